// `sovai billing usage|statement`, `sovai budget get|set` and the `--dry-run` of `job run` and
// `app run`: the client of the billing API (docs/billing.md, REST). Private to src/cli/client.
//
// Amounts are read from the answers' *_micro_eur integers (their *_eur strings when an integer is
// missing) and printed with billing_format.h: never through floating point.
// Thread-safety: one command at a time per context (commands.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/client/command_util.h"
#include "cli/client/commands.h"

namespace sovai::cli::client {

// The `billing` and `budget` command groups (commands.h's exit codes).
int RunBillingCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunBudgetCommand(CommandContext& ctx, const std::vector<std::string>& args);

// The `--dry-run` of `job run` and `app run`, once `cmd` is parsed and `spec` built: POSTs
// `spec` to `create_path` with `?dry_run=true` (the server creates nothing) and prints the
// quote: price per minute, the timeout and the cost at it, the budget left ("no budget") and
// whether the server would refuse it, as key-value lines, or the answer itself with `-o json`.
// Returns kExitOk; kExitFailure when the request failed, or when the workload would be refused
// (the reason on stderr, after the quote).
int RunDryRun(CommandLine& cmd, std::string_view create_path, const nlohmann::json& spec);

}  // namespace sovai::cli::client
