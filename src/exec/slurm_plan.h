// What the platform tells the Slurm agent (`sovai slurm-agent`, src/exec/slurm_agent.cc) about one
// job, and what the agent reports back. docs/formats/slurm-agent.md describes both.
//
// The plan travels in the batch script as base64 JSON (SOVAI_SLURM_PLAN): the job's command,
// environment and volumes, with the S3 credentials that reach each volume's store and the
// project bucket where the agent ships the job's log and its status. Nothing else connects the
// node to the platform: no shared filesystem, no callback port.
//
// Reports, under `log_prefix` in `log_bucket`:
//   status.json        {"phase": "initializing|running|finalizing|done", "exit": {...},
//                       "message": "...", "node": "...", "at_unix_micros": N}, rewritten at
//                       each change;
//   log-00000001, ...  consecutive chunks of the job log (docs/formats/job-log.md records, whole
//                       records only), in order; the platform appends and deletes each.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "exec/s3_client.h"

namespace sovai::exec {

struct SlurmPlanVolume {
  std::string spec;    // as the job wrote it (volume_spec.h), validated on the platform
  S3ClientOptions s3;  // endpoint, region and keys that reach its store
};

struct SlurmPlanMount {
  std::string host_path;  // on the node
  std::string sandbox_path;
};

struct SlurmPlan {
  std::string job_id;
  S3ClientOptions log_s3;
  std::string log_bucket;
  std::string log_prefix;  // "jobs/<id>/agent/"
  std::vector<SlurmPlanVolume> volumes;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<SlurmPlanMount> extra_mounts;  // read-only (the engine binary)
  bool network_none = false;
  uint32_t uid = 65534;
  uint32_t gid = 65534;
  std::string scratch_dir = "/tmp";  // node-local: volumes live in <scratch>/sovai-<slurm id>
  std::string agent_binary;          // the sovai binary on the nodes (srun runs it per task)
  int master_port = 29500;
};

// JSON, then base64 for the environment. Errors of the decoder: InvalidArgument naming the field,
// for malformed base64 or JSON, missing fields, wrong types, or more than the limits allow
// (kMaxSlurmPlanBytes, the sandbox's mount and env limits).
std::string EncodeSlurmPlan(const SlurmPlan& plan);
base::Result<SlurmPlan> DecodeSlurmPlan(std::string_view encoded);

enum class AgentPhase : uint8_t { kInitializing, kRunning, kFinalizing, kDone };
std::string_view AgentPhaseName(AgentPhase phase);

struct AgentStatus {
  AgentPhase phase = AgentPhase::kInitializing;
  std::optional<base::ExitStatus> exit;  // kDone: the workload's status (none: it never ran)
  std::string message;                   // kDone without exit: why (a volume failed to sync)
  bool sync_failed = false;              // kDone: the workload ran but the outputs did not sync
  std::string node;                      // the batch step's node (the allocation's first)
  int64_t at_unix_micros = 0;
};
std::string AgentStatusToJson(const AgentStatus& status);
base::Result<AgentStatus> AgentStatusFromJson(std::string_view json);

// The key of log chunk `sequence` (1, 2, ...) under `prefix`.
std::string AgentLogChunkKey(std::string_view prefix, uint64_t sequence);
inline constexpr std::string_view kAgentStatusName = "status.json";
// Plans are small; this bounds what the decoder accepts (the job spec's own limit, with room).
inline constexpr size_t kMaxSlurmPlanBytes = 1 << 20;

}  // namespace sovai::exec
