// `sovai tco` (docs/tco.md): owning N GPUs against pay-as-you-go at the catalog price. The
// arithmetic is control/tco.h, shared with GET /v1/tco, so the CLI and the panel show the same
// numbers; this command reads the flags, the flavor catalog and the usage history, and prints the
// table, -o json or -o svg.
#pragma once

#include <string>
#include <vector>

#include "cli/client/commands.h"

namespace sovai::cli::client {

// `sovai tco` itself (tco_command.cc; commands.h's exit codes).
int RunTcoCommand(CommandContext& ctx, const std::vector<std::string>& args);

}  // namespace sovai::cli::client
