#include "exec/slurm_executor.h"

#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "base/crypto.h"
#include "base/log.h"
#include "base/strings.h"
#include "exec/local_executor.h"
#include "exec/slurm_plan.h"

namespace sovai::exec {
namespace {

using base::Result;
using base::Status;

// A port for the rendezvous of a distributed job, spread by job id so that two jobs sharing a
// node rarely pick the same one.
int MasterPortFor(const std::string& job_id) {
  const std::string digest = base::Sha256(job_id);
  const unsigned value =
      static_cast<unsigned char>(digest[0]) << 8 | static_cast<unsigned char>(digest[1]);
  return 20000 + static_cast<int>(value % 20000);
}

// "Slurm job 12 ended NODE_FAIL (NodeDown)".
std::string SlurmEnded(const std::string& slurm_id, const SlurmJobInfo& info) {
  return "Slurm job " + slurm_id + " ended " + info.state +
         (info.reason.empty() || info.reason == "None" ? "" : " (" + info.reason + ")");
}

// Pending reasons that no amount of waiting changes: the request exceeds what the partition,
// the account or the QOS can ever give.
bool NeverStarts(std::string_view reason) {
  static constexpr std::string_view kNever[] = {
      "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints",
      "InvalidAccount",  "InvalidQOS",         "AccountNotAllowed",  "QOSNotAllowed",
  };
  return std::find(std::begin(kNever), std::end(kNever), reason) != std::end(kNever);
}

WorkloadOutcome Ended(WorkloadEnd end, std::string reason) {
  WorkloadOutcome o;
  o.end = end;
  o.reason = std::move(reason);
  return o;
}

// A Slurm job of the platform, followed from sbatch (or, after a restart, its Slurm id) to its
// end on `thread_`.
class SlurmWorkload final : public Workload {
 public:
  SlurmWorkload(const SlurmExecutorOptions& options, WorkloadSpec spec, WorkloadObserver& observer,
                std::unique_ptr<LogWriter> log, WorkloadResumption from)
      : options_(options),
        env_(options.env != nullptr ? *options.env : base::Env::Default()),
        spec_(std::move(spec)),
        observer_(observer),
        log_(std::move(log)),
        phase_(from.phase),
        slurm_id_(std::move(from.backend_id)),
        stores_(spec_) {
    thread_ = std::thread([this] { Life(); });
  }
  ~SlurmWorkload() override {
    Detach("the platform let go of the workload");
    thread_.join();
  }

  WorkloadOutcome Wait() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return outcome_;
  }
  void Stop(std::string reason) override {
    std::lock_guard lock(mu_);
    if (!stop_reason_) stop_reason_ = std::move(reason);
    cv_.notify_all();
  }
  void Detach(std::string reason) override {
    std::lock_guard lock(mu_);
    if (!stop_reason_) stop_reason_ = std::move(reason);
    detach_ = true;
    cv_.notify_all();
  }
  Status SyncOutputs() override {
    return base::UnavailableError("push-data is not available on the Slurm executor yet");
  }
  Result<LogChunk> ReadLog(uint64_t offset, size_t max_bytes) override {
    return ReadWorkloadLog(env_, spec_.dir, offset, max_bytes);
  }
  Result<std::vector<pid_t>> ProcessIds() override { return std::vector<pid_t>(); }

 private:
  void Say(std::string_view line) {
    (void)log_->Write(LogSource::kSovai, std::string(line) + "\n");
  }

  void Life() {
    WorkloadOutcome outcome = Run();
    if (outcome.detached) {
      Say("the server is shutting down: Slurm job " + slurm_id_ +
          " goes on, and the next server to run the jobs follows it");
    } else {
      Say("job " + std::string(WorkloadEndName(outcome.end)) + ": " + outcome.reason);
      ArchiveWorkloadLog(spec_, stores_, *log_, [&](std::string_view l) { Say(l); });
    }
    std::lock_guard lock(mu_);
    outcome_ = std::move(outcome);
    done_ = true;
    cv_.notify_all();
  }

  // The credentials a node uses for the store of `region` ("" = the platform's own, seen from
  // the nodes at s3_endpoint when set).
  Result<S3ClientOptions> NodeAccess(const std::string& region) {
    SOVAI_ASSIGN_OR_RETURN(S3ClientOptions o, spec_.s3_access(region));
    if (region.empty() && !options_.s3_endpoint.empty()) o.endpoint = options_.s3_endpoint;
    return o;
  }

  // The agent's phases map onto the workload's; skipped ones are passed through in order.
  void AdvanceTo(WorkloadPhase phase) {
    for (WorkloadPhase step : {WorkloadPhase::kInitializing, WorkloadPhase::kPending,
                               WorkloadPhase::kRunning, WorkloadPhase::kFinalizing}) {
      if (phase_ >= phase) return;
      if (step > phase_ && step <= phase) {
        observer_.OnPhase(step);
        phase_ = step;
      }
    }
  }

  // The plan the agent carries, and the batch script that carries it; sbatch.
  std::optional<WorkloadOutcome> Submit() {
    SlurmPlan plan;
    plan.job_id = spec_.id;
    auto log_s3 = NodeAccess("");
    if (!log_s3.ok())
      return Ended(WorkloadEnd::kError, "object store: " + log_s3.status().message());
    plan.log_s3 = *log_s3;
    plan.log_bucket = spec_.project_bucket;
    plan.log_prefix = prefix_;
    for (const WorkloadVolume& v : spec_.volumes) {
      const std::string region =
          base::EqualsIgnoreCase(v.spec.region, spec_.home_region) ? "" : v.spec.region;
      auto access = NodeAccess(region);
      if (!access.ok()) {
        return Ended(WorkloadEnd::kError,
                     "volume " + v.spec.SourceName() + ": " + access.status().message());
      }
      plan.volumes.push_back({v.spec.ToString(), *access});
    }
    if (spec_.engine_subcommand) {
      if (options_.engine_binary.empty()) {
        return Ended(WorkloadEnd::kError, "image " + spec_.image +
                                              " needs sovai-engine on the nodes (slurm "
                                              "engine_binary)");
      }
      plan.extra_mounts.push_back({options_.engine_binary, std::string(kEngineInSandbox)});
      plan.argv = {std::string(kEngineInSandbox), *spec_.engine_subcommand};
    }
    plan.argv.insert(plan.argv.end(), spec_.command.begin(), spec_.command.end());
    if (plan.argv.empty()) return Ended(WorkloadEnd::kError, "the job has no command");
    for (const Mount& m : spec_.extra_mounts)
      plan.extra_mounts.push_back({m.host_path, m.sandbox_path});
    plan.env = spec_.env;
    plan.network_none = spec_.network_none;
    plan.uid = spec_.uid;
    plan.gid = spec_.gid;
    plan.scratch_dir = options_.scratch_dir;
    plan.agent_binary = options_.agent_binary;
    plan.master_port = MasterPortFor(spec_.id);

    const WorkloadResources& r = spec_.resources;
    SlurmBatch batch;
    batch.job_name = "sovai-" + spec_.id;
    batch.partition = options_.partition;
    batch.account = options_.account;
    if (auto it = options_.flavors.find(r.flavor); it != options_.flavors.end()) {
      batch.partition = it->second.first;
      batch.gres_type = it->second.second;
    }
    const int nodes = std::max(1, r.nodes);
    batch.nodes = nodes;
    batch.gpus_per_node = (r.gpus + nodes - 1) / nodes;
    batch.tasks_per_node =
        r.tasks_per_node > 0 ? r.tasks_per_node : std::max(1, batch.gpus_per_node);
    batch.cpus_per_task = std::max(1, r.vcpus / nodes / batch.tasks_per_node);
    batch.memory_mb_per_node = r.memory_bytes / static_cast<uint64_t>(nodes) / (1024 * 1024);
    batch.time_minutes = (spec_.timeout_s + 59) / 60 + options_.staging_minutes;
    // The batch step's own output; Slurm opens it before the agent runs, so in a directory
    // that exists (a scratch directory per node, "%n", does not yet).
    batch.output_path = base::JoinPath(
        options_.scratch_dir.find("%n") == std::string::npos ? options_.scratch_dir : "/tmp",
        "sovai-%j.out");
    batch.env = {{"SOVAI_SLURM_PLAN", EncodeSlurmPlan(plan)}};
    batch.agent_argv = {options_.agent_binary, "slurm-agent", "run"};
    auto script = BuildBatchScript(batch);
    if (!script.ok()) {
      return Ended(WorkloadEnd::kError, "batch script: " + script.status().message());
    }
    auto submitted = options_.client->Submit(*script);
    if (!submitted.ok()) {
      return Ended(WorkloadEnd::kError, "sbatch: " + submitted.status().message());
    }
    slurm_id_ = *submitted;
    observer_.OnBackendId(slurm_id_);
    observer_.OnWaiting("Slurm: submitted");
    Say("submitted to Slurm as job " + slurm_id_ + " (partition " +
        (batch.partition.empty() ? "default" : batch.partition) + ", " + std::to_string(nodes) +
        " node(s) x " + std::to_string(batch.tasks_per_node) + " task(s), " +
        std::to_string(batch.gpus_per_node) + " GPU(s) per node, --time " +
        std::to_string(batch.time_minutes) + " min)");
    return std::nullopt;
  }

  Result<std::string> Fetch(const std::string& key) {
    SOVAI_ASSIGN_OR_RETURN(S3Client * reports, stores_.ForRegion(""));
    const std::string download = base::JoinPath(spec_.dir, "agent-download");
    SOVAI_RETURN_IF_ERROR(reports->GetObjectToFile(spec_.project_bucket, key, download).status());
    auto text = env_.ReadFile(download);
    (void)env_.DeleteFile(download);
    return text;
  }

  // Appends the agent's new log chunks; the next one's number is kept beside the log, so that a
  // restarted server continues where this one stopped (chunks are deleted once appended).
  void PullLog() {
    for (;;) {
      const std::string key = AgentLogChunkKey(prefix_, next_chunk_);
      auto chunk = Fetch(key);
      if (!chunk.ok()) return;
      for (std::string_view line : base::Split(*chunk, '\n', /*skip_empty=*/true)) {
        if (auto record = ParseLogRecord(line); record.ok()) {
          (void)log_->WriteRecord(record->source, record->continued, record->line);
        } else {
          (void)log_->Write(LogSource::kSovai, "(a malformed log record from the node)\n");
        }
      }
      ++next_chunk_;
      (void)env_.WriteFileAtomically(NextChunkPath(), std::to_string(next_chunk_));
      if (auto reports = stores_.ForRegion(""); reports.ok()) {
        (void)(*reports)->DeleteObject(spec_.project_bucket, key);
      }
    }
  }
  std::string NextChunkPath() const { return base::JoinPath(spec_.dir, "agent-next-chunk"); }

  std::optional<AgentStatus> ReadAgentStatus() {
    auto text = Fetch(prefix_ + std::string(kAgentStatusName));
    if (!text.ok()) return std::nullopt;
    auto parsed = AgentStatusFromJson(*text);
    if (!parsed.ok()) return std::nullopt;
    return *parsed;
  }

  // The outcome when Slurm itself ended the job (its state says how), or nothing when the job
  // ended on its own (the agent's report then says how).
  std::optional<WorkloadOutcome> SlurmVerdict(const SlurmJobInfo& info) {
    const std::string what = SlurmEnded(slurm_id_, info);
    switch (info.phase) {
      case SlurmPhase::kTimeout:
        return Ended(WorkloadEnd::kTimeout, what + ": it reached its --time limit");
      case SlurmPhase::kNodeFail: {
        WorkloadOutcome lost =
            Ended(WorkloadEnd::kError, what + ": a node of the allocation failed");
        lost.node_lost = true;
        return lost;
      }
      case SlurmPhase::kOutOfMemory:
        return Ended(WorkloadEnd::kFailed, what + ": out of memory");
      case SlurmPhase::kCancelled:
      case SlurmPhase::kPreempted:
        if (stopping_) return Ended(stopping_->first, stopping_->second);
        return Ended(WorkloadEnd::kInterrupted, what);
      default:
        return std::nullopt;
    }
  }

  // Slurm's verdict on a job whose agent reported its end. A command that failed while Slurm
  // still runs the job may be a node that is dying (its slurmd gone, the steps with it): the
  // verdict is then awaited until Slurm's job is final, for at most verdict_grace.
  std::optional<WorkloadOutcome> AwaitSlurmVerdict(const AgentStatus& status) {
    const bool failed = !status.exit || !status.exit->exited || status.exit->code != 0;
    const auto give_up = std::chrono::steady_clock::now() + options_.verdict_grace;
    for (;;) {
      auto info = options_.client->Query(slurm_id_);
      if (!info.ok()) return std::nullopt;
      if (auto verdict = SlurmVerdict(*info)) return verdict;
      if (IsFinal(info->phase) || !failed || stopping_ ||
          std::chrono::steady_clock::now() >= give_up) {
        return std::nullopt;
      }
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, options_.poll_interval, [&] { return detach_; });
      if (detach_) {
        WorkloadOutcome o;
        o.detached = true;
        return o;
      }
    }
  }

  // The agent's final report (kDone) as the outcome.
  WorkloadOutcome FromAgent(const AgentStatus& status) {
    WorkloadOutcome o;
    if (!status.exit) {
      o = Ended(WorkloadEnd::kError,
                status.message.empty() ? "the Slurm agent gave up" : status.message);
    } else if (status.exit->exited) {
      o.exit_code = status.exit->code;
      o.end = status.exit->code == 0 ? WorkloadEnd::kDone : WorkloadEnd::kFailed;
      o.reason = "exited with code " + std::to_string(status.exit->code);
    } else {
      o.exit_signal = status.exit->signal;
      o.end = WorkloadEnd::kFailed;
      o.reason = status.exit->ToString();
    }
    if (status.sync_failed) o.outputs_error = status.message;
    if (stopping_ && status.exit) {
      o.end = stopping_->first;
      o.reason = stopping_->second;
    } else if (o.end == WorkloadEnd::kDone && status.sync_failed) {
      o.end = WorkloadEnd::kError;
      o.reason = "the command succeeded but " + status.message;
    }
    return o;
  }

  WorkloadOutcome Run() {
    auto reports = stores_.ForRegion("");
    if (!reports.ok()) {
      return Ended(WorkloadEnd::kError, "object store: " + reports.status().message());
    }
    if (Status made = EnsureBucket(**reports, spec_.project_bucket); !made.ok()) {
      return Ended(WorkloadEnd::kError,
                   "creating the project bucket " + spec_.project_bucket + ": " + made.message());
    }
    if (auto text = env_.ReadFile(NextChunkPath()); text.ok()) {
      if (auto n = base::ParseUint64(base::Trim(*text)); n.ok() && *n > 0) next_chunk_ = *n;
    }
    if (slurm_id_.empty()) {
      // A new Slurm job (a first try, or a retry): its agent numbers its chunks from 1.
      next_chunk_ = 1;
      (void)env_.DeleteFile(NextChunkPath());
      if (auto failed = Submit()) return *failed;
    } else {
      Say("following Slurm job " + slurm_id_ + " again after a restart of the server");
    }
    return Follow();
  }

  // Following the Slurm job and the agent's reports, and the requests: a stop, the timeout.
  WorkloadOutcome Follow() {
    std::optional<std::chrono::steady_clock::time_point> deadline;
    std::chrono::steady_clock::time_point stop_sent{};
    bool killed = false;
    bool node_known = false;
    std::string last_query_error;
    std::string last_waiting;
    auto learn_node = [&](const std::string& host) {
      if (node_known || host.empty()) return;
      node_known = true;
      observer_.OnNode(host);
    };
    for (;;) {
      PullLog();
      std::optional<AgentStatus> status = ReadAgentStatus();
      if (status) {
        learn_node(status->node);
        switch (status->phase) {
          case AgentPhase::kInitializing:
            AdvanceTo(WorkloadPhase::kInitializing);
            break;
          case AgentPhase::kRunning:
            AdvanceTo(WorkloadPhase::kRunning);
            if (!deadline) {
              deadline = std::chrono::steady_clock::now() + std::chrono::seconds(spec_.timeout_s);
            }
            break;
          case AgentPhase::kFinalizing:
            AdvanceTo(WorkloadPhase::kFinalizing);
            break;
          case AgentPhase::kDone:
            break;
        }
      }
      if (status && status->phase == AgentPhase::kDone) {
        PullLog();
        if (auto r = stores_.ForRegion(""); r.ok()) {
          (void)(*r)->DeleteObject(spec_.project_bucket, prefix_ + std::string(kAgentStatusName));
        }
        AdvanceTo(WorkloadPhase::kFinalizing);
        // Slurm's verdict comes first when Slurm itself ended the job (a node failure, its time
        // limit, an administrator's scancel): the agent then saw only its steps vanish.
        if (auto verdict = AwaitSlurmVerdict(*status)) return *verdict;
        WorkloadOutcome o = FromAgent(*status);
        observer_.OnExit(o);
        return o;
      }

      auto info = options_.client->Query(slurm_id_);
      if (!info.ok()) {
        if (info.status().code() == base::StatusCode::kNotFound) {
          PullLog();
          return Ended(WorkloadEnd::kError, info.status().message());
        }
        if (info.status().message() != last_query_error) {
          last_query_error = info.status().message();
          Say("asking Slurm: " + last_query_error + " (will retry)");
        }
      } else if (info->phase == SlurmPhase::kPending && NeverStarts(info->reason)) {
        (void)options_.client->Cancel(slurm_id_);
        return Ended(WorkloadEnd::kError,
                     "Slurm will never start job " + slurm_id_ + ": PENDING (" + info->reason +
                         "): the partition cannot give it what the flavor asks");
      } else if (info->phase == SlurmPhase::kPending) {
        const std::string reason = "Slurm: " + info->state + " (" + info->reason + ")";
        if (phase_ == WorkloadPhase::kQueued && reason != last_waiting) {
          last_waiting = reason;
          observer_.OnWaiting(reason);
        }
      } else if (info->phase == SlurmPhase::kRunning && !node_known && !info->nodes.empty()) {
        if (auto first = FirstHostOf(info->nodes); first.ok()) learn_node(*first);
      } else if (IsFinal(info->phase)) {
        // The batch step ended; its last report may have landed after the read above.
        if (auto last = ReadAgentStatus(); last && last->phase == AgentPhase::kDone) continue;
        PullLog();
        if (auto verdict = SlurmVerdict(*info)) return *verdict;
        WorkloadOutcome o =
            Ended(WorkloadEnd::kError, SlurmEnded(slurm_id_, *info) +
                                           ", but the agent's final report never "
                                           "arrived: the outputs may not be synced");
        if (info->exit && info->exit->exited) o.exit_code = info->exit->code;
        if (info->exit && info->exit->signaled) o.exit_signal = info->exit->signal;
        observer_.OnExit(o);
        return o;
      }

      {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, options_.poll_interval,
                     [&] { return (stop_reason_ && !stopping_) || detach_; });
        if (detach_) {
          WorkloadOutcome o;
          o.detached = true;
          return o;
        }
        if (stop_reason_ && !stopping_) stopping_.emplace(WorkloadEnd::kInterrupted, *stop_reason_);
      }
      if (!stopping_ && deadline && std::chrono::steady_clock::now() >= *deadline) {
        stopping_.emplace(WorkloadEnd::kTimeout,
                          "ran longer than timeout_s " + std::to_string(spec_.timeout_s));
      }
      if (stopping_ && stop_sent == std::chrono::steady_clock::time_point{}) {
        stop_sent = std::chrono::steady_clock::now();
        if (phase_ == WorkloadPhase::kQueued || phase_ == WorkloadPhase::kInitializing) {
          // Nothing of the workload runs yet: the whole Slurm job goes.
          Say("stopping: " + stopping_->second + " (scancel)");
          if (Status st = options_.client->Cancel(slurm_id_); !st.ok()) {
            Say("scancel: " + st.message());
          }
          killed = true;
        } else {
          Say("stopping: " + stopping_->second + " (SIGTERM to the job's steps, SIGKILL after " +
              std::to_string(options_.stop_grace.count()) + " ms)");
          if (Status st = options_.client->Signal(slurm_id_, SIGTERM); !st.ok()) {
            Say("scancel --signal=TERM: " + st.message());
          }
        }
      } else if (stopping_ && !killed &&
                 std::chrono::steady_clock::now() - stop_sent >= options_.stop_grace) {
        killed = true;
        (void)options_.client->Signal(slurm_id_, SIGKILL);
      }
    }
  }

  const SlurmExecutorOptions& options_;
  base::Env& env_;
  const WorkloadSpec spec_;
  WorkloadObserver& observer_;
  std::unique_ptr<LogWriter> log_;
  const std::string prefix_ = "jobs/" + spec_.id + "/agent/";
  // On thread_ only:
  WorkloadPhase phase_;
  std::string slurm_id_;
  uint64_t next_chunk_ = 1;
  std::optional<std::pair<WorkloadEnd, std::string>> stopping_;
  WorkloadStores stores_;

  std::mutex mu_;  // guards the requests and the outcome below
  std::condition_variable cv_;
  std::optional<std::string> stop_reason_;
  bool detach_ = false;
  bool done_ = false;
  WorkloadOutcome outcome_;
  std::thread thread_;  // last: started when everything above is built
};

}  // namespace

SlurmExecutor::SlurmExecutor(SlurmExecutorOptions options) : options_(std::move(options)) {
  SOVAI_CHECK(options_.client != nullptr);
}

Result<std::unique_ptr<Workload>> SlurmExecutor::Start(WorkloadSpec spec,
                                                       WorkloadObserver& observer) {
  return Resume(std::move(spec), WorkloadResumption{}, observer);
}

Result<std::unique_ptr<Workload>> SlurmExecutor::Resume(WorkloadSpec spec, WorkloadResumption from,
                                                        WorkloadObserver& observer) {
  base::Env& env = options_.env != nullptr ? *options_.env : base::Env::Default();
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<LogWriter> log, OpenWorkloadLog(env, spec.dir));
  return std::unique_ptr<Workload>(
      new SlurmWorkload(options_, std::move(spec), observer, std::move(log), std::move(from)));
}

}  // namespace sovai::exec
