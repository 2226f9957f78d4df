// The restart policy of jobs (`restart: {"policy": "on-failure", "max_retries": N}`, docs/api/
// jobs.md "Restarts"): which ends of a try earn another try, and what the next try runs.
//
//   if (auto cause = RestartCause(job.spec, job.retries, try_end)) ... queue it again, saying why
//   w.command = CommandForTry(job.spec, job.retries);
//
// A try gets another when the policy is on-failure, retries are left, nobody asked it to stop
// (a user's `job stop`, a budget cap, a shutdown) and it ended because
//   * its command failed: a non-zero exit, or a signal from outside the platform (an OOM killer,
//     `kill -9` of the sandbox);
//   * its node died under it (Slurm's NODE_FAIL);
//   * the server that ran it died (or stopped) while it was INITIALIZING, PENDING or RUNNING:
//     a local sandbox dies with its server, and recovery (JobService::Recover) finds the job
//     mid-run. One that was FINALIZING had finished its command: it is not run again.
// A timeout, a platform error (a volume that cannot sync, an image that cannot be unpacked) and
// a stop are never restarted: another try would end the same way, or against the user's wish.
//
// The next try of a `sovai/finetune` job continues from the newest complete checkpoint in its
// output volume: its command gets `--resume`, with which the engine takes the newest checkpoint
// whose unit manifest (base/unit_manifest.h) says complete, and starts from the beginning when
// there is none (train/checkpoint.h LatestCheckpoint). A user's first try is never changed.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "control/job_spec.h"
#include "exec/executor.h"

namespace sovai::control {

// How one try of a job ended, as the service saw it.
struct TryEnd {
  exec::WorkloadOutcome outcome;
  // The try was found mid-run by a server's recovery in this phase: its sandbox died with the
  // server that ran it (nullopt: it ran its course under this server).
  std::optional<exec::WorkloadPhase> lost_with_server_in;
  // A stop was asked of this try (a user, the budget, the server shutting down).
  bool stop_requested = false;
};

// Why the try earns another under `spec`'s policy after `retries` reruns ("exited with code 3",
// "killed by signal 9", "the server restarted while the job was RUNNING"), or nullopt.
std::optional<std::string> RestartCause(const JobSpec& spec, int retries, const TryEnd& end);

// The command of the try after `retries` reruns: the spec's, with `--resume` added for a rerun
// of sovai/finetune that does not already pass it.
std::vector<std::string> CommandForTry(const JobSpec& spec, int retries);

// The log line that opens a rerun ("" for the first try): why it was queued again (the reason
// Conclude gave it, "restart policy: <why>; try 2 of 3"; "try 2 of 3" without one) and, for
// sovai/finetune, that it resumes from the newest complete checkpoint.
std::string TryNote(const JobSpec& spec, int retries, const std::string& queued_reason);

}  // namespace sovai::control
