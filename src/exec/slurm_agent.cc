#include "exec/slurm_agent.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "base/env.h"
#include "base/log.h"
#include "base/strings.h"
#include "exec/executor.h"
#include "exec/local_executor.h"
#include "exec/log_capture.h"
#include "exec/s3_client.h"
#include "exec/sandbox.h"
#include "exec/slurm.h"
#include "exec/slurm_plan.h"
#include "exec/volume_spec.h"

extern char** environ;

namespace sovai::exec {
namespace {

using base::Result;
using base::Status;

constexpr auto kShipInterval = std::chrono::milliseconds(500);
constexpr auto kRelayInterval = std::chrono::milliseconds(100);
// How long a task's workload has to end after the step was told to stop (SIGTERM), before the
// sandbox is killed. Slurm's own KillWait ends the step after its grace anyway.
constexpr auto kTaskStopGrace = std::chrono::milliseconds(10'000);
// The final status and the log's tail are retried this often, kFinalReportRetry apart.
constexpr int kFinalReportAttempts = 60;
constexpr auto kFinalReportRetry = std::chrono::milliseconds(1000);

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::map<std::string, std::string> SlurmEnvironment() {
  std::map<std::string, std::string> out;
  for (char** e = environ; *e; ++e) {
    std::string_view kv = *e;
    if (!kv.starts_with("SLURM_")) continue;
    size_t eq = kv.find('=');
    if (eq != std::string_view::npos) out.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

// The job's directory on this node: <scratch>/sovai-<Slurm job id>, where "%n" in the scratch
// directory is this node's Slurm name (as in slurm.conf's SlurmdSpoolDir), for nodes that share
// a filesystem.
Result<std::string> WorkDir(const SlurmPlan& plan) {
  std::string id = Getenv("SLURM_JOB_ID");
  if (id.empty()) {
    return base::FailedPreconditionError("SLURM_JOB_ID is not set: not in a Slurm job");
  }
  std::string scratch = plan.scratch_dir;
  for (size_t at; (at = scratch.find("%n")) != std::string::npos;) {
    scratch.replace(at, 2, Getenv("SLURMD_NODENAME"));
  }
  SOVAI_RETURN_IF_ERROR(MakeDir(scratch, 0755));
  return base::JoinPath(scratch, "sovai-" + id);
}

// The workload as the local executor on this node runs it: the plan's command (the platform
// composed it), its volumes with the credentials the plan carries, in `work`.
Result<WorkloadSpec> SpecFromPlan(const SlurmPlan& plan, const std::string& work) {
  WorkloadSpec spec;
  spec.id = plan.job_id;
  spec.dir = work;
  spec.command = plan.argv;
  spec.env = plan.env;
  for (const SlurmPlanMount& m : plan.extra_mounts) {
    spec.extra_mounts.push_back({m.host_path, m.sandbox_path, true});
  }
  for (const SlurmPlanVolume& v : plan.volumes) {
    SOVAI_ASSIGN_OR_RETURN(VolumeSpec volume, ParseVolumeSpec(v.spec));
    spec.volumes.push_back({std::move(volume), "", v.s3});
  }
  spec.network_none = plan.network_none;
  spec.uid = plan.uid;
  spec.gid = plan.gid;
  return spec;
}

// Ships the node's log file and the status object to the project bucket. Log chunks go out
// every kShipInterval, whole records only, numbered from 1; the status when it changes.
class Shipper {
 public:
  Shipper(base::Env& env, const SlurmPlan& plan, std::string log_path, std::string spool)
      : env_(env),
        plan_(plan),
        s3_(plan.log_s3),
        log_path_(std::move(log_path)),
        spool_(std::move(spool)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Shipper() { Finish(); }

  // Writes the status now (and the log shipped so far first, so that a reader of the status sees
  // the log that led to it).
  void SetStatus(const AgentStatus& status) {
    std::lock_guard lock(mu_);
    ShipLogLocked();
    const bool last = status.phase == AgentPhase::kDone;
    // The last report is the one the platform cannot do without: it is retried for a while, so
    // that a restart of the platform's S3 endpoint (a server upgrade) does not lose it.
    for (int attempt = 0;; ++attempt) {
      if (Put(std::string(kAgentStatusName), AgentStatusToJson(status))) return;
      if (!last || attempt + 1 >= kFinalReportAttempts) return;
      std::this_thread::sleep_for(kFinalReportRetry);
      ShipLogLocked();
    }
  }

  // Ships what is left and stops.
  void Finish() {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    std::lock_guard lock(mu_);
    for (int attempt = 0; attempt < kFinalReportAttempts; ++attempt) {
      if (ShipLogLocked()) return;
      std::this_thread::sleep_for(kFinalReportRetry);
    }
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, kShipInterval, [&] { return stopping_; });
      if (!stopping_) ShipLogLocked();
    }
  }

  // True when everything written so far is shipped.
  bool ShipLogLocked() {
    for (;;) {
      auto chunk = ReadLog(env_, log_path_, offset_, 1 << 20);
      if (!chunk.ok()) return false;
      if (chunk->data.empty()) return true;
      if (!Put(AgentLogChunkKey("", next_chunk_), chunk->data)) return false;
      ++next_chunk_;
      offset_ = chunk->next_offset;
    }
  }

  // One object under the plan's prefix; false (with a line on stderr, which Slurm keeps in the
  // batch step's --output file) when it could not be written.
  bool Put(const std::string& name, const std::string& body) {
    const std::string file = base::JoinPath(spool_, "upload");
    Status st = env_.WriteFileAtomically(file, body);
    if (st.ok()) {
      st = s3_.PutObjectFromFile(plan_.log_bucket, plan_.log_prefix + name, file).status();
    }
    if (!st.ok()) {
      std::fprintf(stderr, "sovai slurm-agent: shipping %s: %s\n", name.c_str(),
                   st.ToString().c_str());
    }
    return st.ok();
  }

  base::Env& env_;
  const SlurmPlan& plan_;
  S3Client s3_;  // guarded by mu_ (single-threaded)
  const std::string log_path_;
  const std::string spool_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  uint64_t offset_ = 0;
  uint64_t next_chunk_ = 1;
  std::thread thread_;
};

// A status that a signal-killed workload reports through its exit code (bwrap's and srun's
// convention: 128+N), decoded back.
base::ExitStatus DecodeExit(const base::ExitStatus& raw) {
  if (raw.exited && raw.code > 128 && raw.code <= 128 + 64) {
    return base::ExitStatus{.signaled = true, .signal = raw.code - 128};
  }
  return raw;
}

int ExitCodeOf(const base::ExitStatus& status) {
  if (status.exited) return status.code;
  if (status.signaled) return 128 + status.signal;
  return 1;
}

// Copies srun's output into the log: lines that are records of a task keep their source, the
// rest (srun's own messages) become platform notes.
void RelayStream(base::UniqueFd fd, LogWriter& log, LogSource plain_source) {
  std::string pending;
  char buffer[64 * 1024];
  auto flush_line = [&](std::string_view line) {
    if (auto record = ParseLogRecord(line); record.ok()) {
      (void)log.WriteRecord(record->source, record->continued, record->line);
    } else {
      (void)log.Write(plain_source, line);
    }
  };
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      flush_line(std::string_view(pending).substr(start, nl - start));
    }
    pending.erase(0, start);
    if (pending.size() > kMaxLogLineBytes * 2) {
      (void)log.Write(plain_source, pending);
      pending.clear();
    }
  }
  if (!pending.empty()) flush_line(pending);
}

Result<SlurmPlan> PlanFromEnvironment() {
  std::string encoded = Getenv("SOVAI_SLURM_PLAN");
  if (encoded.empty()) {
    return base::FailedPreconditionError(
        "SOVAI_SLURM_PLAN is not set (the platform's batch "
        "script sets it)");
  }
  return DecodeSlurmPlan(encoded);
}

// The batch step's process: `srun` of one `slurm-agent task` per Slurm task, its output relayed
// into the node's log (task records keep their source; srun's own lines become notes).
class SrunTasks final : public LaunchedProcess {
 public:
  static Result<std::unique_ptr<LaunchedProcess>> Start(base::Env& env, const SlurmPlan& plan,
                                                        const std::string& log_path) {
    SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<LogWriter> log, LogWriter::Open(env, log_path));
    base::SpawnOptions tasks;
    tasks.argv = {"srun", "--kill-on-bad-exit=1", plan.agent_binary, "slurm-agent", "task"};
    tasks.stdout_spec = base::StdioSpec::Pipe();
    tasks.stderr_spec = base::StdioSpec::Pipe();
    auto spawned = env.Spawn(tasks);
    if (!spawned.ok()) return spawned.status().WithContext("srun");
    return std::unique_ptr<LaunchedProcess>(new SrunTasks(std::move(*spawned), std::move(log)));
  }
  ~SrunTasks() override {
    if (!ended_) {
      (void)srun_->Signal(SIGKILL);
      (void)srun_->Wait();
    }
    JoinRelays();
  }
  Result<std::optional<base::ExitStatus>> TryWait() override {
    auto waited = srun_->Wait(0);
    if (!waited.ok() && waited.status().code() == base::StatusCode::kDeadlineExceeded) {
      return std::optional<base::ExitStatus>();
    }
    return Ended(waited);
  }
  Result<base::ExitStatus> Stop(std::chrono::milliseconds grace) override {
    (void)srun_->Signal(SIGTERM);
    auto waited = srun_->Wait(grace.count());
    if (!waited.ok() && waited.status().code() == base::StatusCode::kDeadlineExceeded) {
      (void)srun_->Signal(SIGKILL);
      waited = srun_->Wait();
    }
    SOVAI_ASSIGN_OR_RETURN(std::optional<base::ExitStatus> status, Ended(waited));
    return *status;
  }
  Result<std::vector<pid_t>> ProcessIds() override { return std::vector<pid_t>{srun_->pid()}; }

 private:
  SrunTasks(std::unique_ptr<base::Subprocess> srun, std::unique_ptr<LogWriter> log)
      : srun_(std::move(srun)), log_(std::move(log)) {
    out_ = std::thread(RelayStream, std::move(srun_->stdout_fd()), std::ref(*log_),
                       LogSource::kStdout);
    err_ =
        std::thread(RelayStream, std::move(srun_->stderr_fd()), std::ref(*log_), LogSource::kSovai);
  }
  // srun's end: its output relayed to the last line, a signal's 128+N decoded.
  Result<std::optional<base::ExitStatus>> Ended(const Result<base::ExitStatus>& waited) {
    ended_ = true;
    JoinRelays();
    if (!waited.ok()) return waited.status().WithContext("srun");
    return std::optional<base::ExitStatus>(DecodeExit(*waited));
  }
  void JoinRelays() {
    if (out_.joinable()) out_.join();
    if (err_.joinable()) err_.join();
  }

  std::unique_ptr<base::Subprocess> srun_;
  std::unique_ptr<LogWriter> log_;
  bool ended_ = false;
  std::thread out_;
  std::thread err_;
};

// The phases of the node's local executor, reported to the platform through the shipper.
class AgentReporter final : public WorkloadObserver {
 public:
  explicit AgentReporter(std::function<void(AgentPhase)> report) : report_(std::move(report)) {}
  void OnPhase(WorkloadPhase phase) override {
    if (phase == WorkloadPhase::kInitializing) report_(AgentPhase::kInitializing);
    // RUNNING is reported as the tasks are about to start (srun), as the platform's timeout and
    // a node's failure are counted from there.
    if (phase == WorkloadPhase::kPending) report_(AgentPhase::kRunning);
    if (phase == WorkloadPhase::kFinalizing) report_(AgentPhase::kFinalizing);
  }

 private:
  std::function<void(AgentPhase)> report_;
};

// Volumes down on every node of a multi-node allocation: `slurm-agent stage-in` on each.
Status StageOnEveryNode(base::Env& env, const SlurmPlan& plan, const std::string& nodes,
                        const std::function<void(std::string_view)>& say) {
  base::SpawnOptions stage;
  stage.argv = {"srun",
                "--nodes=" + nodes,
                "--ntasks=" + nodes,
                "--ntasks-per-node=1",
                plan.agent_binary,
                "slurm-agent",
                "stage-in"};
  auto run = base::RunAndCapture(env, stage);
  if (run.ok()) {
    for (const std::string& text : {run->stdout_text, run->stderr_text}) {
      if (!text.empty()) say(text);
    }
  }
  if (!run.ok() || !run->exit.success()) {
    return base::UnavailableError("staging the volumes on the nodes failed: " +
                                  (run.ok() ? run->exit.ToString() : run.status().message()));
  }
  return Status();
}

int RunBatchStep(base::Env& env, const SlurmPlan& plan) {
  auto work = WorkDir(plan);
  auto spec = work.ok() ? SpecFromPlan(plan, *work) : Result<WorkloadSpec>(work.status());
  if (!spec.ok()) {
    std::fprintf(stderr, "sovai slurm-agent: %s\n", spec.status().ToString().c_str());
    return 1;
  }
  // The log is the local executor's; the shipper reads it from the start.
  auto opened = OpenWorkloadLog(env, *work);
  if (!opened.ok()) {
    std::fprintf(stderr, "sovai slurm-agent: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<LogWriter> log = std::move(*opened);
  auto say = [&](std::string_view line) { (void)log->Write(LogSource::kSovai, line); };
  const std::string spool = base::JoinPath(*work, "spool");
  (void)MakeDir(spool, 0700);
  Shipper shipper(env, plan, log->path(), spool);
  AgentStatus status;
  status.node = Getenv("SLURMD_NODENAME");
  auto report = [&](AgentPhase phase) {
    status.phase = phase;
    status.at_unix_micros = env.NowUnixMicros();
    shipper.SetStatus(status);
  };

  const std::map<std::string, std::string> slurm = SlurmEnvironment();
  const std::string nodes =
      slurm.contains("SLURM_JOB_NUM_NODES") ? slurm.at("SLURM_JOB_NUM_NODES") : "1";
  say("slurm job " + Getenv("SLURM_JOB_ID") + " on " + Getenv("SLURM_JOB_NODELIST") + ": " + nodes +
      " node(s), " + Getenv("SLURM_NTASKS") + " task(s)");

  // The workload's life on this node is the local executor's; its process is srun's tasks.
  LocalExecutorOptions options;
  options.env = &env;
  options.end_note = "workload";
  options.launch = [&](const SandboxSpec& sandbox) {
    return SrunTasks::Start(env, plan, sandbox.log_path);
  };
  if (nodes != "1") {
    options.stage_in = [&](const WorkloadSpec&, const std::function<void(std::string_view)>& s) {
      return StageOnEveryNode(env, plan, nodes, s);
    };
  }
  LocalExecutor executor(std::move(options));
  AgentReporter reporter(report);
  WorkloadOutcome outcome;
  if (auto workload = executor.Start(*spec, reporter); workload.ok()) {
    outcome = (*workload)->Wait();
  } else {
    outcome.end = WorkloadEnd::kError;
    outcome.reason = workload.status().message();
  }
  if (outcome.exit_code) status.exit = base::ExitStatus{.exited = true, .code = *outcome.exit_code};
  if (outcome.exit_signal) {
    status.exit = base::ExitStatus{.signaled = true, .signal = *outcome.exit_signal};
  }
  if (!status.exit) {
    status.message = outcome.reason;  // the agent could not run it: why
  } else if (!outcome.outputs_error.empty()) {
    status.sync_failed = true;
    status.message = "syncing the outputs failed: " + outcome.outputs_error;
  }
  report(AgentPhase::kDone);
  shipper.Finish();
  (void)env.DeleteDirRecursive(*work);
  return status.exit ? ExitCodeOf(*status.exit) : 1;
}

std::atomic<bool> stop_requested{false};
void OnStopSignal(int) { stop_requested = true; }

int RunTask(base::Env& env, const SlurmPlan& plan) {
  auto fail = [](const Status& st) {
    // srun's stderr reaches the batch step, which logs it as a platform note.
    std::fprintf(stderr, "sovai slurm-agent task: %s\n", st.ToString().c_str());
    return 1;
  };
  const std::map<std::string, std::string> slurm = SlurmEnvironment();
  auto work = WorkDir(plan);
  if (!work.ok()) return fail(work.status());
  auto first_host = FirstHostOf(Getenv("SLURM_JOB_NODELIST"));
  if (!first_host.ok()) return fail(first_host.status());
  auto distributed = DistributedEnv(slurm, *first_host, plan.master_port);
  if (!distributed.ok()) return fail(distributed.status());
  const std::string rank = slurm.contains("SLURM_PROCID") ? slurm.at("SLURM_PROCID") : "0";

  SandboxOptions options;
  auto sandbox = Sandbox::Create(env, options);
  if (!sandbox.ok()) return fail(sandbox.status());

  auto task = SpecFromPlan(plan, *work);
  if (!task.ok()) return fail(task.status());
  auto built = BuildSandboxSpec(*task, std::nullopt, "");
  if (!built.ok()) return fail(built.status());
  SandboxSpec& spec = *built;
  // Slurm signals every process of the step: bwrap is shielded, and the workload gets the
  // default dispositions back (coreutils env) so that SIGTERM reaches it as a stop request.
  spec.shield_from_step_signals = true;
  spec.argv.insert(spec.argv.begin(), {"env", "--default-signal=TERM,INT,HUP"});
  spec.env.insert(spec.env.end(), distributed->begin(), distributed->end());
  // Slurm binds the task's GPUs through CUDA_VISIBLE_DEVICES (gres); the sandbox keeps them.
  for (std::string_view gpu : base::Split(Getenv("CUDA_VISIBLE_DEVICES"), ',', true)) {
    if (auto index = base::ParseInt64(gpu); index.ok()) spec.gpus.push_back(int(*index));
  }
  spec.log_path = base::JoinPath(*work, "task-" + rank + ".log");
  spec.work_dir = base::JoinPath(*work, "task-" + rank);
  Status prepared = PrepareSandboxDir(spec);
  if (!prepared.ok()) return fail(prepared);

  // SIGTERM from scancel reaches this process and the workload alike: this one stays to stop the
  // sandbox in order and relay its last words.
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);

  auto launched = (*sandbox)->Launch(spec);
  if (!launched.ok()) return fail(launched.status());
  std::unique_ptr<RunningWorkload> workload = std::move(*launched);
  uint64_t offset = 0;
  auto relay = [&] {
    for (;;) {
      auto chunk = ReadLog(env, spec.log_path, offset, 1 << 20);
      if (!chunk.ok() || chunk->data.empty()) return;
      std::fwrite(chunk->data.data(), 1, chunk->data.size(), stdout);
      std::fflush(stdout);
      offset = chunk->next_offset;
    }
  };
  std::optional<Result<base::ExitStatus>> ended;
  while (!ended) {
    relay();
    if (stop_requested) {
      ended = workload->Stop(kTaskStopGrace);
      break;
    }
    auto polled = workload->TryWait();
    if (!polled.ok()) {
      ended = polled.status();
    } else if (polled->has_value()) {
      ended = **polled;
    } else {
      std::this_thread::sleep_for(kRelayInterval);
    }
  }
  workload.reset();  // the log is complete
  relay();
  if (!ended->ok()) return fail(ended->status());
  return ExitCodeOf(**ended);
}

int RunStageIn(base::Env& env, const SlurmPlan& plan) {
  auto work = WorkDir(plan);
  if (!work.ok()) {
    std::fprintf(stderr, "%s\n", work.status().ToString().c_str());
    return 1;
  }
  const std::string host = Getenv("SLURMD_NODENAME");
  auto spec = SpecFromPlan(plan, *work);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s: %s\n", host.c_str(), spec.status().ToString().c_str());
    return 1;
  }
  WorkloadStores stores(*spec);
  Status st = StageVolumesIn(env, *spec, stores, [&](std::string_view line) {
    std::printf("%s: %.*s\n", host.c_str(), static_cast<int>(line.size()), line.data());
    std::fflush(stdout);
  });
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", host.c_str(), st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int RunSlurmAgent(base::Env& env, const std::vector<std::string>& args) {
  const std::string usage =
      "Usage: sovai slurm-agent run|task|stage-in\n"
      "Runs inside a Slurm job of the platform (its batch script calls it); see "
      "docs/formats/slurm-agent.md.\n";
  if (args.size() != 1) {
    std::fprintf(stderr, "%s", usage.c_str());
    return 2;
  }
  auto plan = PlanFromEnvironment();
  if (!plan.ok()) {
    std::fprintf(stderr, "sovai slurm-agent: %s\n", plan.status().ToString().c_str());
    return 1;
  }
  if (args[0] == "run") return RunBatchStep(env, *plan);
  if (args[0] == "task") return RunTask(env, *plan);
  if (args[0] == "stage-in") return RunStageIn(env, *plan);
  std::fprintf(stderr, "%s", usage.c_str());
  return 2;
}

}  // namespace sovai::exec
