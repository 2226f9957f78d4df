// The `sovai` client commands (everything but `sovai server`): login, logout, whoami, job,
// flavor, app, endpoint, notebook, bucket, datastore, token, user, project. docs/cli.md is the
// reference of each.
//
//   client::StdConsole console;
//   client::CommandContext ctx{base::Env::Default(), console, vars};
//   if (client::IsClientCommand(argv[1])) return client::RunClientCommand(argv[1], args, ctx);
//
// Exit codes: kExitOk (0) success; kExitFailure (1) the operation failed, with the reason on
// stderr (a problem's `detail` and each `errors[].field: message`); kExitUsage (2) the command
// line is wrong. `job run --follow` exits with the job's exit code instead (ExitCodeForJob).
// Results go to stdout as tables, or as JSON with `-o json`; notes and progress go to stderr.
// Thread-safety: one command at a time per context.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "cli/client/config.h"
#include "cli/client/console.h"
#include "net/client.h"

namespace sovai::cli::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

struct CommandContext {
  base::Env& env;
  Console& console;
  // The environment: SOVAI_CONFIG, SOVAI_URL, SOVAI_TOKEN, HOME, XDG_CONFIG_HOME, and the values
  // `job run --env NAME` passes on.
  const EnvVars& vars;
  // Options every HTTP client starts from (timeouts, CA file); host and port come from the URL.
  net::ClientOptions http;
};

// Whether `command` is one of the client commands.
bool IsClientCommand(std::string_view command);
// Runs `sovai <command> <args...>` and returns the exit code.
int RunClientCommand(std::string_view command, const std::vector<std::string>& args,
                     CommandContext& ctx);
// The "Commands:" lines of the client commands, for `sovai --help`.
std::string ClientCommandsHelp();

}  // namespace sovai::cli::client
