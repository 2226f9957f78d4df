// `sovai`: the platform daemon (`sovai server`) and the command-line client (every other
// subcommand).
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "cli/server.h"
#include "cli/version.h"

namespace {

constexpr char kUsage[] =
    "Usage: sovai COMMAND [flags]\n"
    "\n"
    "Commands:\n"
    "  server     run the platform daemon (REST API, S3, panel)\n"
    "  version    print the version\n"
    "  help       show this help\n"
    "\n"
    "Run 'sovai COMMAND --help' for a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string_view command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "server") return sovai::cli::RunServerCommand(args);
  if (command == "version" || command == "--version") {
    bool details = !args.empty() && (args[0] == "--details" || args[0] == "-v");
    std::printf("%s\n", details ? sovai::cli::VersionDetails() : sovai::cli::Version());
    return 0;
  }
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "sovai: unknown command '%s'\n\n%s", argv[1], kUsage);
  return 2;
}
