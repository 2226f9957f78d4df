#include "cli/slurm_agent.h"

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
#include "exec/log_capture.h"
#include "exec/s3_client.h"
#include "exec/sandbox.h"
#include "exec/slurm.h"
#include "exec/slurm_plan.h"
#include "exec/volume_spec.h"
#include "exec/volume_sync.h"

extern char** environ;

namespace sovai::cli {
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
Result<std::string> WorkDir(const exec::SlurmPlan& plan) {
  std::string id = Getenv("SLURM_JOB_ID");
  if (id.empty()) {
    return base::FailedPreconditionError("SLURM_JOB_ID is not set: not in a Slurm job");
  }
  std::string scratch = plan.scratch_dir;
  for (size_t at; (at = scratch.find("%n")) != std::string::npos;) {
    scratch.replace(at, 2, Getenv("SLURMD_NODENAME"));
  }
  SOVAI_RETURN_IF_ERROR(exec::MakeDir(scratch, 0755));
  return base::JoinPath(scratch, "sovai-" + id);
}

std::string VolumeDir(const std::string& work, size_t i) {
  return base::JoinPath(base::JoinPath(work, "volumes"), std::to_string(i));
}
std::string ManifestPath(const std::string& work, size_t i) {
  return base::JoinPath(work, "manifest-" + std::to_string(i) + ".json");
}

Result<exec::VolumeSpec> ParseVolume(const exec::SlurmPlanVolume& v) {
  return exec::ParseVolumeSpec(v.spec);
}

// Volumes down into <work>/volumes/<i>, each manifest beside them.
Status StageIn(base::Env& env, const exec::SlurmPlan& plan, const std::string& work,
               const std::function<void(std::string_view)>& say) {
  SOVAI_RETURN_IF_ERROR(exec::MakeDir(work, 0711));
  SOVAI_RETURN_IF_ERROR(exec::MakeDir(base::JoinPath(work, "volumes"), 0711));
  const bool root = ::geteuid() == 0;
  for (size_t i = 0; i < plan.volumes.size(); ++i) {
    SOVAI_ASSIGN_OR_RETURN(exec::VolumeSpec spec, ParseVolume(plan.volumes[i]));
    const std::string dir = VolumeDir(work, i);
    SOVAI_RETURN_IF_ERROR(exec::MakeDir(dir, 0755));
    exec::S3Client s3(plan.volumes[i].s3);
    SOVAI_RETURN_IF_ERROR(s3.status());
    exec::SyncOptions options;
    options.env = &env;
    options.progress = say;
    auto manifest = exec::SyncDown(s3, spec, dir, options);
    if (!manifest.ok()) {
      return Status(manifest.status().code(),
                    "volume " + spec.SourceName() + ": " + manifest.status().message());
    }
    SOVAI_RETURN_IF_ERROR(env.WriteFileAtomically(ManifestPath(work, i), manifest->ToJson()));
    if (root && spec.permission != exec::VolumePermission::kReadOnly) {
      SOVAI_RETURN_IF_ERROR(exec::ChownTree(dir, plan.uid, plan.gid));
    }
  }
  return Status();
}

// The rw/rwd volumes of this node up; the first error, or OK.
Status StageOut(base::Env& env, const exec::SlurmPlan& plan, const std::string& work,
                const std::function<void(std::string_view)>& say) {
  Status first;
  for (size_t i = 0; i < plan.volumes.size(); ++i) {
    SOVAI_ASSIGN_OR_RETURN(exec::VolumeSpec spec, ParseVolume(plan.volumes[i]));
    if (spec.permission == exec::VolumePermission::kReadOnly) continue;
    auto text = env.ReadFile(ManifestPath(work, i));
    if (!text.ok()) {
      if (first.ok())
        first =
            Status(text.status().code(), "volume " + spec.SourceName() + " was never synced down");
      continue;
    }
    auto baseline = exec::SyncManifest::FromJson(*text);
    exec::S3Client s3(plan.volumes[i].s3);
    exec::SyncOptions options;
    options.env = &env;
    options.progress = say;
    Status st = baseline.ok() ? s3.status() : baseline.status();
    if (st.ok()) {
      auto report =
          exec::SyncUp(s3, spec, VolumeDir(work, i), *baseline,
                       spec.permission == exec::VolumePermission::kReadWriteDelete, options);
      st = report.status();
    }
    if (!st.ok()) {
      say("sync up failed: " + spec.SourceName() + ": " + st.message());
      if (first.ok()) first = st;
    }
  }
  return first;
}

// Ships the node's log file and the status object to the project bucket. Log chunks go out
// every kShipInterval, whole records only, numbered from 1; the status when it changes.
class Shipper {
 public:
  Shipper(base::Env& env, const exec::SlurmPlan& plan, std::string log_path, std::string spool)
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
  void SetStatus(const exec::AgentStatus& status) {
    std::lock_guard lock(mu_);
    ShipLogLocked();
    const bool last = status.phase == exec::AgentPhase::kDone;
    // The last report is the one the platform cannot do without: it is retried for a while, so
    // that a restart of the platform's S3 endpoint (a server upgrade) does not lose it.
    for (int attempt = 0;; ++attempt) {
      if (Put(std::string(exec::kAgentStatusName), exec::AgentStatusToJson(status))) return;
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
      auto chunk = exec::ReadLog(env_, log_path_, offset_, 1 << 20);
      if (!chunk.ok()) return false;
      if (chunk->data.empty()) return true;
      if (!Put(exec::AgentLogChunkKey("", next_chunk_), chunk->data)) return false;
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
  const exec::SlurmPlan& plan_;
  exec::S3Client s3_;  // guarded by mu_ (single-threaded)
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
void RelayStream(base::UniqueFd fd, exec::LogWriter& log, exec::LogSource plain_source) {
  std::string pending;
  char buffer[64 * 1024];
  auto flush_line = [&](std::string_view line) {
    if (auto record = exec::ParseLogRecord(line); record.ok()) {
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
    if (pending.size() > exec::kMaxLogLineBytes * 2) {
      (void)log.Write(plain_source, pending);
      pending.clear();
    }
  }
  if (!pending.empty()) flush_line(pending);
}

Result<exec::SlurmPlan> PlanFromEnvironment() {
  std::string encoded = Getenv("SOVAI_SLURM_PLAN");
  if (encoded.empty()) {
    return base::FailedPreconditionError(
        "SOVAI_SLURM_PLAN is not set (the platform's batch "
        "script sets it)");
  }
  return exec::DecodeSlurmPlan(encoded);
}

int RunBatchStep(base::Env& env, const exec::SlurmPlan& plan) {
  auto work = WorkDir(plan);
  if (!work.ok()) {
    std::fprintf(stderr, "sovai slurm-agent: %s\n", work.status().ToString().c_str());
    return 1;
  }
  if (Status st = exec::MakeDir(*work, 0711); !st.ok()) {
    std::fprintf(stderr, "sovai slurm-agent: %s\n", st.ToString().c_str());
    return 1;
  }
  const std::string spool = base::JoinPath(*work, "spool");
  (void)exec::MakeDir(spool, 0700);
  auto opened = exec::LogWriter::Open(env, base::JoinPath(*work, "log"));
  if (!opened.ok()) {
    std::fprintf(stderr, "sovai slurm-agent: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<exec::LogWriter> log = std::move(*opened);
  auto say = [&](std::string_view line) { (void)log->Write(exec::LogSource::kSovai, line); };
  Shipper shipper(env, plan, log->path(), spool);
  exec::AgentStatus status;
  status.node = Getenv("SLURMD_NODENAME");
  auto report = [&](exec::AgentPhase phase) {
    status.phase = phase;
    status.at_unix_micros = env.NowUnixMicros();
    shipper.SetStatus(status);
  };
  auto give_up = [&](std::string message) {
    say(message);
    status.message = std::move(message);
    report(exec::AgentPhase::kDone);
    shipper.Finish();
    (void)env.DeleteDirRecursive(*work);
    return 1;
  };

  const std::map<std::string, std::string> slurm = SlurmEnvironment();
  const std::string nodes =
      slurm.contains("SLURM_JOB_NUM_NODES") ? slurm.at("SLURM_JOB_NUM_NODES") : "1";
  say("slurm job " + Getenv("SLURM_JOB_ID") + " on " + Getenv("SLURM_JOB_NODELIST") + ": " + nodes +
      " node(s), " + Getenv("SLURM_NTASKS") + " task(s)");

  // --- INITIALIZING: volumes down, on every node of the allocation ---
  report(exec::AgentPhase::kInitializing);
  if (nodes == "1") {
    if (Status st = StageIn(env, plan, *work, say); !st.ok()) return give_up(st.message());
  } else {
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
      for (auto text : {run->stdout_text, run->stderr_text}) {
        if (!text.empty()) (void)log->Write(exec::LogSource::kSovai, text);
      }
    }
    if (!run.ok() || !run->exit.success()) {
      return give_up("staging the volumes on the nodes failed: " +
                     (run.ok() ? run->exit.ToString() : run.status().message()));
    }
  }

  // --- RUNNING: one sandboxed task per Slurm task ---
  report(exec::AgentPhase::kRunning);
  base::SpawnOptions tasks;
  tasks.argv = {"srun", "--kill-on-bad-exit=1", plan.agent_binary, "slurm-agent", "task"};
  tasks.stdout_spec = base::StdioSpec::Pipe();
  tasks.stderr_spec = base::StdioSpec::Pipe();
  auto spawned = env.Spawn(tasks);
  if (!spawned.ok()) return give_up("srun: " + spawned.status().message());
  std::unique_ptr<base::Subprocess> srun = std::move(*spawned);
  std::thread out(RelayStream, std::move(srun->stdout_fd()), std::ref(*log),
                  exec::LogSource::kStdout);
  std::thread err(RelayStream, std::move(srun->stderr_fd()), std::ref(*log),
                  exec::LogSource::kSovai);
  auto waited = srun->Wait();
  out.join();
  err.join();
  if (!waited.ok()) return give_up("srun: " + waited.status().message());
  status.exit = DecodeExit(*waited);
  say("workload " + status.exit->ToString());

  // --- FINALIZING: this node's writable volumes up ---
  report(exec::AgentPhase::kFinalizing);
  if (Status st = StageOut(env, plan, *work, say); !st.ok()) {
    status.sync_failed = true;
    status.message = "syncing the outputs failed: " + st.message();
  }
  report(exec::AgentPhase::kDone);
  shipper.Finish();
  (void)env.DeleteDirRecursive(*work);
  return ExitCodeOf(*status.exit);
}

std::atomic<bool> stop_requested{false};
void OnStopSignal(int) { stop_requested = true; }

int RunTask(base::Env& env, const exec::SlurmPlan& plan) {
  auto fail = [](const Status& st) {
    // srun's stderr reaches the batch step, which logs it as a platform note.
    std::fprintf(stderr, "sovai slurm-agent task: %s\n", st.ToString().c_str());
    return 1;
  };
  const std::map<std::string, std::string> slurm = SlurmEnvironment();
  auto work = WorkDir(plan);
  if (!work.ok()) return fail(work.status());
  auto first_host = exec::FirstHostOf(Getenv("SLURM_JOB_NODELIST"));
  if (!first_host.ok()) return fail(first_host.status());
  auto distributed = exec::DistributedEnv(slurm, *first_host, plan.master_port);
  if (!distributed.ok()) return fail(distributed.status());
  const std::string rank = slurm.contains("SLURM_PROCID") ? slurm.at("SLURM_PROCID") : "0";

  exec::SandboxOptions options;
  auto sandbox = exec::Sandbox::Create(env, options);
  if (!sandbox.ok()) return fail(sandbox.status());

  exec::SandboxSpec spec;
  // Slurm signals every process of the step: bwrap is shielded, and the workload gets the
  // default dispositions back (coreutils env) so that SIGTERM reaches it as a stop request.
  spec.shield_from_step_signals = true;
  spec.argv = {"env", "--default-signal=TERM,INT,HUP"};
  spec.argv.insert(spec.argv.end(), plan.argv.begin(), plan.argv.end());
  spec.env = plan.env;
  spec.env.insert(spec.env.end(), distributed->begin(), distributed->end());
  spec.env.emplace_back("SOVAI_JOB_ID", plan.job_id);
  spec.network_none = plan.network_none;
  // Slurm binds the task's GPUs through CUDA_VISIBLE_DEVICES (gres); the sandbox keeps them.
  for (std::string_view gpu : base::Split(Getenv("CUDA_VISIBLE_DEVICES"), ',', true)) {
    if (auto index = base::ParseInt64(gpu); index.ok()) spec.gpus.push_back(int(*index));
  }
  spec.log_path = base::JoinPath(*work, "task-" + rank + ".log");
  spec.work_dir = base::JoinPath(*work, "task-" + rank);
  spec.uid = plan.uid;
  spec.gid = plan.gid;
  for (size_t i = 0; i < plan.volumes.size(); ++i) {
    auto volume = ParseVolume(plan.volumes[i]);
    if (!volume.ok()) return fail(volume.status());
    spec.mounts.push_back({VolumeDir(*work, i), volume->mount_path,
                           volume->permission == exec::VolumePermission::kReadOnly});
  }
  for (const exec::SlurmPlanMount& m : plan.extra_mounts) {
    spec.mounts.push_back({m.host_path, m.sandbox_path, true});
  }
  Status prepared = exec::MakeDir(spec.work_dir, 0700);
  if (prepared.ok() && ::geteuid() == 0) {
    prepared = exec::ChownTree(spec.work_dir, plan.uid, plan.gid);
  }
  if (!prepared.ok()) return fail(prepared);

  // SIGTERM from scancel reaches this process and the workload alike: this one stays to stop the
  // sandbox in order and relay its last words.
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);

  auto launched = (*sandbox)->Launch(spec);
  if (!launched.ok()) return fail(launched.status());
  std::unique_ptr<exec::RunningWorkload> workload = std::move(*launched);
  uint64_t offset = 0;
  auto relay = [&] {
    for (;;) {
      auto chunk = exec::ReadLog(env, spec.log_path, offset, 1 << 20);
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

int RunStageIn(base::Env& env, const exec::SlurmPlan& plan) {
  auto work = WorkDir(plan);
  if (!work.ok()) {
    std::fprintf(stderr, "%s\n", work.status().ToString().c_str());
    return 1;
  }
  const std::string host = Getenv("SLURMD_NODENAME");
  Status st = StageIn(env, plan, *work, [&](std::string_view line) {
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

int RunSlurmAgentCommand(const std::vector<std::string>& args) {
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
  base::Env& env = base::Env::Default();
  if (args[0] == "run") return RunBatchStep(env, *plan);
  if (args[0] == "task") return RunTask(env, *plan);
  if (args[0] == "stage-in") return RunStageIn(env, *plan);
  std::fprintf(stderr, "%s", usage.c_str());
  return 2;
}

}  // namespace sovai::cli
