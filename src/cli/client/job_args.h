// `sovai job run` flags → the JSON job spec of POST /v1/jobs (src/control/job_spec.h,
// docs/api/jobs.md), checked locally first so that a typo is a usage error (exit 2) with the
// flag named, not a round trip. The server validates everything again.
//
//   JobRunArgs args;  // filled by the flag parser
//   SOVAI_ASSIGN_OR_RETURN(nlohmann::json spec, BuildJobSpec(args, vars));
//
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

// The flavor `--cpu N` (or no unit flag at all) uses when --flavor is not given.
inline constexpr char kDefaultCpuFlavor[] = "ai1-1-cpu";

struct JobRunArgs {
  std::string name;
  std::string flavor;                     // "" = kDefaultCpuFlavor (not allowed with --gpu)
  std::optional<int64_t> gpu_units;       // --gpu N
  std::optional<int64_t> cpu_units;       // --cpu N
  std::vector<std::string> volumes;       // --volume, as written
  std::vector<std::string> env;           // --env K=V, or K to pass the local value
  std::vector<std::string> labels;        // --label K=V
  std::string timeout;                    // --timeout DURATION, "" = the server's default
  std::string restart;                    // --restart never|on-failure[:N], "" = never
  std::string network;                    // --network none|host, "" = the server's default
  std::optional<int64_t> priority;        // --priority N
  std::optional<int64_t> nodes;           // --nodes N (distributed jobs, the Slurm executor)
  std::optional<int64_t> tasks_per_node;  // --tasks-per-node N
  std::string image;
  std::vector<std::string> command;
};

// The spec, or InvalidArgument naming the flag and what is wrong: --gpu with --cpu, --gpu
// without --flavor, units < 1, a malformed or duplicate --env/--label, a volume that
// exec::ParseVolumeSpec rejects (its message), a bad duration, restart policy or network, a
// priority outside [-1000, 1000], --nodes below 1, --tasks-per-node below 1. `local_env` supplies
// the values of `--env NAME`.
base::Result<nlohmann::json> BuildJobSpec(const JobRunArgs& args, const EnvVars& local_env);

// "90s", "10m", "2h", "1d", "1h30m", or a bare number of seconds → seconds (at least 1, at most
// kMaxDurationS). InvalidArgument otherwise, quoting the text.
base::Result<int64_t> ParseDuration(std::string_view text);

// "k=v" → {k, v}; the key must be non-empty. InvalidArgument naming `flag` otherwise.
base::Result<std::pair<std::string, std::string>> ParseKeyValue(std::string_view text,
                                                                std::string_view flag);

// The label rules of the server (control::ValidateLabel): keys 1..63 of [A-Za-z0-9._/-]
// starting with a letter or digit; values 0..63 of [A-Za-z0-9._-].
base::Status ValidateLabel(std::string_view key, std::string_view value);

// "k=v,k2=v2" (a token's label selector, a job list filter): each pair valid as a label, no key
// twice. Returns the canonical form (pairs sorted by key). InvalidArgument naming `flag`.
base::Result<std::string> ParseSelector(std::string_view text, std::string_view flag);

// The process exit code for a job that has ended (Job JSON): 0 for DONE; the job's exit code
// when it has a non-zero one; 1 otherwise (FAILED, ERROR, TIMEOUT, INTERRUPTED without one).
int ExitCodeForJob(const nlohmann::json& job);

// Whether a state name is terminal (DONE, FAILED, ERROR, INTERRUPTED, TIMEOUT).
bool IsTerminalState(std::string_view state);

}  // namespace sovai::cli::client
