// `sovai`: the platform daemon (`sovai server`) and the command-line client (every other
// subcommand, src/cli/client).
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "cli/client/commands.h"
#include "cli/server.h"
#include "cli/version.h"
#include "exec/slurm_agent.h"

extern char** environ;

namespace {

std::string Usage() {
  return "Usage: sovai COMMAND [flags]\n"
         "\n"
         "Commands:\n"
         "  server     run the platform daemon (REST API, S3, panel)\n" +
         sovai::cli::client::ClientCommandsHelp() +
         "  version    print the version\n"
         "  help       show this help\n"
         "\n"
         "Run 'sovai COMMAND --help' for a command's flags. The client commands read the login\n"
         "of 'sovai login' (~/.config/sovai/config.json), or SOVAI_URL and SOVAI_TOKEN.\n";
}

sovai::cli::client::EnvVars ProcessEnvironment() {
  sovai::cli::client::EnvVars vars;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text = *entry;
    size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    vars.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return vars;
}

int Run(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(Usage().c_str(), stderr);
    return 2;
  }
  std::string_view command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "server") return sovai::cli::RunServerCommand(args);
  // Inside a Slurm job of the platform (exec/slurm_agent.h).
  if (command == "slurm-agent")
    return sovai::exec::RunSlurmAgent(sovai::base::Env::Default(), args);
  if (command == "version" || command == "--version") {
    bool details = !args.empty() && (args[0] == "--details" || args[0] == "-v");
    std::printf("%s\n", details ? sovai::cli::VersionDetails() : sovai::cli::Version());
    return 0;
  }
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  if (sovai::cli::client::IsClientCommand(command)) {
    const sovai::cli::client::EnvVars vars = ProcessEnvironment();
    sovai::cli::client::StdConsole console;
    sovai::cli::client::CommandContext ctx{sovai::base::Env::Default(), console, vars, {}};
    return sovai::cli::client::RunClientCommand(command, args, ctx);
  }
  std::fprintf(stderr, "sovai: unknown command '%s'\n\n%s", argv[1], Usage().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Project code does not throw; a library that does must not end in a stack trace.
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sovai: internal error: %s\n", e.what());
    return 1;
  }
}
