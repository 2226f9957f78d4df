// `sovai-engine`: the training and inference engine's command line. One binary, one table of
// subcommands; docs/engine.md describes each.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "engine/commands.h"

namespace {

struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(const std::vector<std::string>& args);
};

constexpr Command kCommands[] = {
    {"convert", "a Hugging Face llama directory -> GGUF (f32, f16, bf16, q8_0) for llama.cpp",
     sovai::engine::RunConvertCommand},
    {"train", "LoRA, QLoRA or full training of a Llama-family model on JSONL data",
     sovai::engine::RunTrainCommand},
    {"serve", "an OpenAI-compatible server for a model and its LoRA adapters",
     sovai::engine::RunServeCommand},
    {"eval", "exact-match accuracy of a model (and adapter) on held-out JSONL data",
     sovai::engine::RunEvalCommand},
    {"tokenize", "text on stdin -> token ids (JSON), or ids -> text with --decode",
     sovai::engine::RunTokenizeCommand},
    {"tokenizer", "tokenizer tools: 'tokenizer train' learns a byte-level BPE tokenizer",
     sovai::engine::RunTokenizerCommand},
};

std::string Usage() {
  std::string out =
      "Usage: sovai-engine COMMAND [flags]\n"
      "\n"
      "The Sovai training and inference engine.\n"
      "\n"
      "Commands:\n";
  for (const Command& command : kCommands) {
    std::string line = "  " + std::string(command.name);
    line.resize(14, ' ');
    out += line + std::string(command.summary) + "\n";
  }
  out +=
      "  help        show this help\n"
      "\n"
      "Run 'sovai-engine COMMAND --help' for a command's flags.\n";
  return out;
}

int Run(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(Usage().c_str(), stderr);
    return sovai::engine::kExitUsage;
  }
  std::string_view name = argv[1];
  if (name == "help" || name == "--help" || name == "-h") {
    std::fputs(Usage().c_str(), stdout);
    return sovai::engine::kExitOk;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const Command& command : kCommands) {
    if (command.name == name) return command.run(args);
  }
  std::fprintf(stderr, "sovai-engine: unknown command '%s'; run 'sovai-engine --help'\n",
               std::string(name).c_str());
  return sovai::engine::kExitUsage;
}

}  // namespace

// OpenBLAS chooses its kernels, and libgomp how idle threads wait, when they are loaded — before
// main. Debian's OpenBLAS does not recognise every recent CPU and then falls back to SSE3 kernels
// (about 4x slower), and spinning OpenMP threads cost milliseconds per op on a shared machine. So
// the engine sets both in its environment, unless the user did, and restarts itself once.
void RestartWithTunedLibraries(char** argv) {
  if (std::getenv("SOVAI_ENGINE_TUNED") != nullptr) return;
  ::setenv("SOVAI_ENGINE_TUNED", "1", 1);
  bool changed = false;
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    const char* core = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                       : __builtin_cpu_supports("avx2")  ? "Haswell"
                                                         : nullptr;
    if (core != nullptr) {
      ::setenv("OPENBLAS_CORETYPE", core, 1);
      changed = true;
    }
  }
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = true;
  }
  if (changed) ::execv("/proc/self/exe", argv);  // on failure: run as we are
}

int main(int argc, char** argv) {
  RestartWithTunedLibraries(argv);
  // Project code reports errors as Status values; an exception escaping a library is a bug
  // that should still end with a message rather than std::terminate's.
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sovai-engine: internal error: %s\n", e.what());
    return sovai::engine::kExitFailure;
  }
}
