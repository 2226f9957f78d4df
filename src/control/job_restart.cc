#include "control/job_restart.h"

#include <algorithm>

#include "base/log.h"
#include "control/jobs.h"

namespace sovai::control {
namespace {

constexpr std::string_view kResumeFlag = "--resume";

bool LostMidRun(exec::WorkloadPhase phase) {
  return phase == exec::WorkloadPhase::kInitializing || phase == exec::WorkloadPhase::kPending ||
         phase == exec::WorkloadPhase::kRunning;
}

}  // namespace

JobState StateOf(exec::WorkloadEnd end) {
  switch (end) {
    case exec::WorkloadEnd::kDone:
      return JobState::kDone;
    case exec::WorkloadEnd::kFailed:
      return JobState::kFailed;
    case exec::WorkloadEnd::kError:
      return JobState::kError;
    case exec::WorkloadEnd::kInterrupted:
      return JobState::kInterrupted;
    case exec::WorkloadEnd::kTimeout:
      return JobState::kTimeout;
  }
  return JobState::kError;
}

std::optional<std::string> RestartCause(const JobSpec& spec, int retries, const TryEnd& end) {
  if (spec.restart != RestartPolicy::kOnFailure || retries >= spec.max_retries) return std::nullopt;
  if (end.stop_requested) return std::nullopt;
  const exec::WorkloadOutcome& o = end.outcome;
  if (end.lost_with_server_in) {
    // Recovery ends such a try INTERRUPTED with the reason that says where it was.
    if (!LostMidRun(*end.lost_with_server_in)) return std::nullopt;
    return o.reason.empty() ? "the server restarted while the job ran" : o.reason;
  }
  if (o.end == exec::WorkloadEnd::kFailed) return o.reason;
  if (o.end == exec::WorkloadEnd::kError && o.node_lost) return o.reason;
  return std::nullopt;
}

std::vector<std::string> CommandForTry(const JobSpec& spec, int retries) {
  std::vector<std::string> command = spec.command;
  if (retries > 0 && spec.image == kFinetuneImage &&
      std::find(command.begin(), command.end(), kResumeFlag) == command.end()) {
    command.emplace_back(kResumeFlag);
  }
  return command;
}

std::string TryNote(const JobSpec& spec, int retries, const std::string& queued_reason) {
  if (retries == 0) return "";
  std::string note = !queued_reason.empty() ? queued_reason
                                            : "try " + std::to_string(retries + 1) + " of " +
                                                  std::to_string(spec.max_retries + 1);
  if (spec.image == kFinetuneImage) {
    note += "; sovai/finetune continues from the newest complete checkpoint of its output";
  }
  return note;
}

void JobService::Conclude(Job& job, const TryEnd& end) {
  const JobState state = StateOf(end.outcome.end);
  std::optional<std::string> cause = RestartCause(job.spec, job.retries, end);
  job.allocation.reset();
  {
    std::lock_guard lock(mu_);
    // A server that shuts down queues nothing: its next start recovers the job (and restarts it
    // then, as one lost with its server).
    if (shutting_down_) cause.reset();
  }
  if (!cause) {
    (void)Transition(job, state, end.outcome.reason);
    return;
  }
  std::lock_guard lock(mu_);
  // The ended try stays in the history, but the job is never seen in a terminal state between
  // its tries: both transitions are saved at once.
  job.history.push_back({state, env_.NowUnixMicros(), end.outcome.reason});
  job.retries += 1;
  job.slurm_job_id.clear();  // the next try is a new Slurm job
  job.node.clear();
  const std::string why = "restart policy: " + *cause + "; try " + std::to_string(job.retries + 1) +
                          " of " + std::to_string(job.spec.max_retries + 1);
  SOVAI_LOG(INFO).With("job", job.id) << why;
  (void)Transition(job, JobState::kQueued, why);
  auto flavor = options_.flavors->Find(job.spec.flavor);
  if (flavor.ok()) {
    auto request = RequestFor(**flavor, job.spec.units);
    // The id is still held by this runner: release first, then queue again.
    scheduler_.Release(job.id);
    if (request.ok()) scheduler_.Enqueue({job.id, job.project, job.spec.priority, *request});
  }
}

}  // namespace sovai::control
