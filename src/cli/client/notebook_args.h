// `sovai notebook run` flags → the JSON spec of POST /v1/notebooks (docs/api/notebooks.md),
// checked locally first so that a typo is a usage error (exit 2) naming the flag, not a round
// trip; the server validates everything again.
//
//   NotebookRunArgs args;  // filled by the flag parser
//   SOVAI_ASSIGN_OR_RETURN(nlohmann::json spec, BuildNotebookSpec(args, vars));
//
// Errors are InvalidArgument whose message names the flag and says what is wrong.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "cli/client/config.h"

namespace sovai::cli::client {

struct NotebookRunArgs {
  std::string name;                  // --name, "" = none
  std::string editor = "jupyter";    // --editor jupyter|vscode
  std::string image;                 // --image, "" = the host's root filesystem
  std::string flavor;                // "" = kDefaultCpuFlavor (not allowed with --gpu)
  std::optional<int64_t> gpu_units;  // --gpu N
  std::optional<int64_t> cpu_units;  // --cpu N
  std::vector<std::string> volumes;  // --volume, as written
  std::vector<std::string> labels;   // --label K=V
  std::vector<std::string> env;      // --env K=V, or K to pass the local value
  std::string idle_timeout;          // --idle-timeout DURATION, "0"/"never", "" = the default
};

// The POST /v1/notebooks spec. Errors: a malformed --name (the app-name rule); --editor other
// than jupyter or vscode; the flavor, unit, volume, env, label and image rules of
// `job run` (an engine image is refused); a malformed --idle-timeout.
base::Result<nlohmann::json> BuildNotebookSpec(const NotebookRunArgs& args,
                                               const EnvVars& local_env);

// Whether a notebook in `state` can no longer become RUNNING without a command (STOPPED,
// FAILED, ERROR, STOPPING, DELETING, DELETED): `notebook run --wait` gives up on it.
bool IsNotebookSettledState(std::string_view state);

}  // namespace sovai::cli::client
