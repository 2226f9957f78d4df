#include "engine/commands.h"

#include <csignal>
#include <cstdio>

namespace sovai::engine {
namespace {

std::atomic<bool> g_stop_requested{false};

extern "C" void OnStopSignal(int) { g_stop_requested.store(true); }

}  // namespace

int UsageError(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "sovai-engine %s: %s\nRun 'sovai-engine %s --help' for usage.\n",
               command.c_str(), message.c_str(), command.c_str());
  return kExitUsage;
}

std::atomic<bool>& InstallStopSignalHandlers() {
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
  return g_stop_requested;
}

}  // namespace sovai::engine
