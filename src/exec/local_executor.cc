#include "exec/local_executor.h"

#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "base/crypto.h"
#include "base/log.h"
#include "base/strings.h"
#include "exec/live_sync.h"
#include "exec/registry_pull.h"
#include "exec/volume_sync.h"

namespace sovai::exec {
namespace {

using base::Result;
using base::Status;
using Say = std::function<void(std::string_view)>;

class SandboxProcess final : public LaunchedProcess {
 public:
  explicit SandboxProcess(std::unique_ptr<RunningWorkload> running)
      : running_(std::move(running)) {}
  Result<std::optional<base::ExitStatus>> TryWait() override { return running_->TryWait(); }
  Result<base::ExitStatus> Stop(std::chrono::milliseconds grace) override {
    return running_->Stop(grace);
  }
  Result<std::vector<pid_t>> ProcessIds() override { return running_->ProcessIds(); }

 private:
  std::unique_ptr<RunningWorkload> running_;
};

SyncOptions SyncOptionsFor(base::Env& env, const WorkloadVolume& volume, const Say& say) {
  SyncOptions o;
  o.env = &env;
  o.progress = say;
  o.cache_dir = volume.cache_dir;
  return o;
}

// A workload on this machine: its life runs on `thread_` (Run, or Finalize after a restart).
class LocalWorkload final : public Workload {
 public:
  LocalWorkload(const LocalExecutorOptions& options, WorkloadSpec spec, WorkloadObserver& observer,
                std::unique_ptr<LogWriter> log, std::optional<WorkloadResumption> resumed)
      : options_(options),
        env_(options.env != nullptr ? *options.env : base::Env::Default()),
        spec_(std::move(spec)),
        observer_(observer),
        log_(std::move(log)),
        resumed_(std::move(resumed)),
        stores_(spec_) {
    thread_ = std::thread([this] { Life(); });
  }
  ~LocalWorkload() override {
    Stop("the platform let go of the workload");
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
  void Detach(std::string reason) override { Stop(std::move(reason)); }
  Status SyncOutputs() override {
    std::unique_lock lock(mu_);
    if (done_) return Status();
    const uint64_t ticket = ++push_requested_;
    cv_.notify_all();
    // The workload's thread syncs between two polls of the process and reports back.
    cv_.wait(lock, [&] { return push_done_ >= ticket || done_; });
    return push_done_ >= ticket ? push_result_ : Status();
  }
  Result<LogChunk> ReadLog(uint64_t offset, size_t max_bytes) override {
    return ReadWorkloadLog(env_, spec_.dir, offset, max_bytes);
  }
  Result<std::vector<pid_t>> ProcessIds() override {
    std::lock_guard lock(mu_);
    if (process_ == nullptr) return std::vector<pid_t>();
    return process_->ProcessIds();
  }
  LiveSyncStatus SyncProgress() override {
    std::lock_guard lock(mu_);
    return live_ != nullptr ? live_->Report() : last_live_;
  }

 private:
  void Say(std::string_view line) {
    (void)log_->Write(LogSource::kSovai, std::string(line) + "\n");
  }
  std::optional<std::string> StopRequested() {
    std::lock_guard lock(mu_);
    return stop_reason_;
  }
  static WorkloadOutcome Ended(WorkloadEnd end, std::string reason) {
    WorkloadOutcome o;
    o.end = end;
    o.reason = std::move(reason);
    return o;
  }

  void Life() {
    WorkloadOutcome outcome = resumed_ ? Finalize() : Run();
    Say(options_.end_note + " " + std::string(WorkloadEndName(outcome.end)) + ": " +
        outcome.reason);
    ArchiveLog();
    std::lock_guard lock(mu_);
    outcome_ = std::move(outcome);
    done_ = true;
    cv_.notify_all();
  }

  // After a restart: the sandbox died with the process that ran it; what it wrote is kept.
  WorkloadOutcome Finalize() {
    const std::string reason =
        "the server restarted while the job was " + std::string(WorkloadPhaseName(resumed_->phase));
    Say(reason);
    if (resumed_->phase == WorkloadPhase::kRunning ||
        resumed_->phase == WorkloadPhase::kFinalizing) {
      observer_.OnPhase(WorkloadPhase::kFinalizing);
      if (Status up = SyncUp(); !up.ok()) Say("sync up failed: " + up.message());
    }
    return Ended(WorkloadEnd::kInterrupted, reason);
  }

  Status SyncUp() {
    return StageVolumesOut(env_, spec_, stores_, [&](auto l) { Say(l); });
  }

  WorkloadOutcome Run() {
    auto say = [&](std::string_view line) { Say(line); };
    // --- INITIALIZING: the image and the volumes ---
    observer_.OnPhase(WorkloadPhase::kInitializing);
    if (!spec_.start_note.empty()) Say(spec_.start_note);
    auto image = PrepareRootfs(env_, spec_, stores_, say);
    if (!image.ok()) {
      return Ended(WorkloadEnd::kError, "image " + spec_.image + ": " + image.status().message());
    }
    Status staged = options_.stage_in ? options_.stage_in(spec_, say)
                                      : StageVolumesIn(env_, spec_, stores_, say,
                                                       [&] { return StopRequested().has_value(); });
    if (!staged.ok()) return Ended(WorkloadEnd::kError, staged.message());
    // A stop while the volumes sync ends it here (without volumes, the running sandbox is told).
    if (auto stop = StopRequested(); stop && !spec_.volumes.empty()) {
      return Ended(WorkloadEnd::kInterrupted, *stop);
    }

    // --- PENDING: the sandbox ---
    observer_.OnPhase(WorkloadPhase::kPending);
    auto sandbox = BuildSandboxSpec(spec_, *image, options_.engine_binary);
    if (!sandbox.ok()) return Ended(WorkloadEnd::kError, sandbox.status().message());
    if (Status st = PrepareSandboxDir(*sandbox); !st.ok()) {
      return Ended(WorkloadEnd::kError, "preparing the sandbox: " + st.message());
    }
    Launcher launch = options_.launch ? options_.launch : SandboxLauncher(*options_.sandbox);
    auto launched = launch(*sandbox);
    if (!launched.ok()) {
      return Ended(WorkloadEnd::kError, "starting the sandbox: " + launched.status().message());
    }
    {
      std::lock_guard lock(mu_);
      process_ = std::move(*launched);
    }

    // --- RUNNING ---
    observer_.OnPhase(WorkloadPhase::kRunning);
    {
      // rw/rwd volumes go up while it runs; the final sync-up takes what is still pending.
      auto live = std::make_unique<LiveSync>(
          env_, spec_, [this](std::string_view l) { Say(l); }, options_.live_sync);
      std::lock_guard lock(mu_);
      live_ = std::move(live);
    }
    WorkloadOutcome outcome = Follow();
    std::unique_ptr<LiveSync> live;
    {
      std::lock_guard lock(mu_);
      process_.reset();  // the log holds everything the workload wrote
      live = std::move(live_);
    }
    live->Stop();
    {
      std::lock_guard lock(mu_);
      last_live_ = live->Report();
    }

    // --- FINALIZING ---
    observer_.OnExit(outcome);
    observer_.OnPhase(WorkloadPhase::kFinalizing);
    observer_.BeforeSyncUp(StagedVolumes(spec_), say);
    if (Status up = SyncUp(); !up.ok()) {
      Say("sync up failed: " + up.message());
      outcome.outputs_error = up.message();
      if (outcome.end == WorkloadEnd::kDone) {
        outcome.end = WorkloadEnd::kError;
        outcome.reason = "the command succeeded but syncing the outputs failed: " + up.message();
      }
    }
    return outcome;
  }

  // From the launch to the process's end: push requests, a stop, the timeout.
  WorkloadOutcome Follow() {
    const auto deadline = spec_.timeout_s > 0 ? std::chrono::steady_clock::now() +
                                                    std::chrono::seconds(spec_.timeout_s)
                                              : std::chrono::steady_clock::time_point::max();
    WorkloadOutcome outcome;
    auto record_exit = [&](const Result<base::ExitStatus>& status) {
      if (!status.ok()) {
        outcome.end = WorkloadEnd::kError;
        outcome.reason = status.status().message();
        return;
      }
      if (status->exited) {
        outcome.exit_code = status->code;
        if (outcome.reason.empty()) {
          outcome.end = status->code == 0 ? WorkloadEnd::kDone : WorkloadEnd::kFailed;
          outcome.reason = "exited with code " + std::to_string(status->code);
        }
      } else if (status->signaled) {
        outcome.exit_signal = status->signal;
        if (outcome.reason.empty()) {
          outcome.end = WorkloadEnd::kFailed;
          outcome.reason = status->ToString();
        }
      }
    };
    for (;;) {
      auto ended = process_->TryWait();
      if (!ended.ok() || ended->has_value()) {
        record_exit(ended.ok() ? Result<base::ExitStatus>(**ended) : ended.status());
        return outcome;
      }
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, options_.poll_interval,
                   [&] { return stop_reason_.has_value() || push_requested_ > push_done_; });
      if (push_requested_ > push_done_) {
        const uint64_t ticket = push_requested_;
        lock.unlock();
        Say("push-data: syncing rw volumes while the job runs");
        // The live sync owns the volumes it follows; the others go up as they always did.
        Status pushed = live_->SyncNow();
        if (pushed.ok()) {
          pushed = StageVolumesOut(
              env_, spec_, stores_, [&](auto l) { Say(l); },
              [](const WorkloadVolume& v) { return !v.spec.live_sync(); });
        }
        Say(pushed.ok() ? "push-data: done" : "push-data failed: " + pushed.message());
        lock.lock();
        push_done_ = ticket;
        push_result_ = pushed;
        cv_.notify_all();
        continue;
      }
      std::optional<std::string> stop = stop_reason_;
      lock.unlock();
      std::optional<WorkloadEnd> end;
      if (stop) {
        end = WorkloadEnd::kInterrupted;
      } else if (std::chrono::steady_clock::now() >= deadline) {
        end = WorkloadEnd::kTimeout;
        stop = "ran longer than timeout_s " + std::to_string(spec_.timeout_s);
      }
      if (end) {
        Say("stopping: " + *stop + " (SIGTERM, then SIGKILL after " +
            std::to_string(options_.stop_grace.count()) + " ms)");
        outcome.end = *end;
        outcome.reason = *stop;
        record_exit(process_->Stop(options_.stop_grace));
        return outcome;
      }
    }
  }

  void ArchiveLog() {
    ArchiveWorkloadLog(spec_, stores_, *log_, [&](std::string_view l) { Say(l); });
  }

  const LocalExecutorOptions& options_;
  base::Env& env_;
  const WorkloadSpec spec_;
  WorkloadObserver& observer_;
  std::unique_ptr<LogWriter> log_;
  const std::optional<WorkloadResumption> resumed_;
  WorkloadStores stores_;  // used on thread_ only

  std::mutex mu_;  // guards the requests, process_ and the outcome below
  std::condition_variable cv_;
  std::optional<std::string> stop_reason_;
  uint64_t push_requested_ = 0;  // SyncOutputs tickets handed out
  uint64_t push_done_ = 0;       // the last ticket served
  Status push_result_;
  std::unique_ptr<LaunchedProcess> process_;  // while RUNNING
  std::unique_ptr<LiveSync> live_;            // while RUNNING
  LiveSyncStatus last_live_;                  // after it
  bool done_ = false;
  WorkloadOutcome outcome_;
  std::thread thread_;  // last: started when everything above is built
};

}  // namespace

Launcher SandboxLauncher(Sandbox& sandbox) {
  return [&sandbox](const SandboxSpec& spec) -> Result<std::unique_ptr<LaunchedProcess>> {
    SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<RunningWorkload> running, sandbox.Launch(spec));
    return std::unique_ptr<LaunchedProcess>(new SandboxProcess(std::move(running)));
  };
}

LocalExecutor::LocalExecutor(LocalExecutorOptions options) : options_(std::move(options)) {
  SOVAI_CHECK(options_.sandbox != nullptr || options_.launch);
}

Result<std::unique_ptr<Workload>> LocalExecutor::Start(WorkloadSpec spec,
                                                       WorkloadObserver& observer) {
  base::Env& env = options_.env != nullptr ? *options_.env : base::Env::Default();
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<LogWriter> log, OpenWorkloadLog(env, spec.dir));
  return std::unique_ptr<Workload>(
      new LocalWorkload(options_, std::move(spec), observer, std::move(log), std::nullopt));
}

Result<std::unique_ptr<Workload>> LocalExecutor::Resume(WorkloadSpec spec, WorkloadResumption from,
                                                        WorkloadObserver& observer) {
  base::Env& env = options_.env != nullptr ? *options_.env : base::Env::Default();
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<LogWriter> log, OpenWorkloadLog(env, spec.dir));
  return std::unique_ptr<Workload>(
      new LocalWorkload(options_, std::move(spec), observer, std::move(log), std::move(from)));
}

// --- The steps ---

Result<S3Client*> WorkloadStores::ForVolume(const WorkloadVolume& volume) {
  if (!volume.s3) return ForRegion(volume.spec.region);
  std::unique_ptr<S3Client>& s3 = clients_["#" + volume.spec.SourceName()];
  if (!s3) {
    auto made = std::make_unique<S3Client>(*volume.s3);
    SOVAI_RETURN_IF_ERROR(made->status());
    s3 = std::move(made);
  }
  return s3.get();
}

Result<S3Client*> WorkloadStores::ForRegion(const std::string& region) {
  // By uppercase name ("" = the platform's own region); s3_access applies the data-residency
  // rule again: a region the project stopped allowing since admission is refused here.
  const std::string key = region.empty() || base::EqualsIgnoreCase(region, spec_.home_region)
                              ? std::string()
                              : base::AsciiToUpper(region);
  std::unique_ptr<S3Client>& s3 = clients_[key];
  if (!s3) {
    if (!spec_.s3_access) {
      return base::FailedPreconditionError("no credentials for the store of region '" + key + "'");
    }
    SOVAI_ASSIGN_OR_RETURN(S3ClientOptions access, spec_.s3_access(key));
    auto made = std::make_unique<S3Client>(std::move(access));
    SOVAI_RETURN_IF_ERROR(made->status());
    s3 = std::move(made);
  }
  return s3.get();
}

Result<S3Object> FindImageArchive(S3Client& s3, const VolumeSpec& source) {
  // S3Client has no HEAD of an object: the archive is found by listing its key.
  const std::string& key = source.prefix;
  SOVAI_ASSIGN_OR_RETURN(std::vector<S3Object> listed, s3.ListObjects(source.bucket, key));
  for (S3Object& object : listed) {
    if (object.key == key) return std::move(object);
  }
  return base::NotFoundError("the archive s3://" + source.bucket + "/" + key +
                             " does not exist (upload it with 'sovai bucket cp IMAGE.tar s3://" +
                             source.bucket + "/" + key + "')");
}

Result<VolumeSpec> ParseOciImageSource(std::string_view image) {
  if (!image.starts_with(kOciImagePrefix)) {
    return base::InvalidArgumentError("image '" + std::string(image) + "' is not an oci: image");
  }
  return ParseVolumeSpec(std::string(image.substr(kOciImagePrefix.size())) + ":/image");
}

Result<std::optional<CachedImage>> PrepareRootfs(base::Env& env, const WorkloadSpec& spec,
                                                 WorkloadStores& stores, const Say& say) {
  if (spec.registry_image) {
    if (spec.image_cache_dir.empty()) {
      return base::FailedPreconditionError("registry images are not available here");
    }
    const std::string& cache = spec.image_cache_dir;
    SOVAI_RETURN_IF_ERROR(MakeDir(std::filesystem::path(cache).parent_path().string(), 0711));
    SOVAI_RETURN_IF_ERROR(MakeDir(cache, 0711));
    auto image = PullRegistryImage(env, *spec.registry_image, cache, say);
    if (!image.ok()) return image.status().WithContext("image " + spec.image);
    // The workload's uid binds the rootfs: every directory down to it must be traversable.
    SOVAI_RETURN_IF_ERROR(
        MakeDir(std::filesystem::path(image->rootfs).parent_path().string(), 0711));
    say("image " + spec.image + ": " +
        (image->reused ? std::string("cached rootfs reused")
                       : "unpacked " + std::to_string(image->info.layers) + " layers, " +
                             std::to_string(image->info.files) + " files"));
    return std::optional<CachedImage>(std::move(*image));
  }
  if (!spec.image.starts_with(kOciImagePrefix)) return std::optional<CachedImage>();
  if (spec.image_cache_dir.empty()) {
    return base::FailedPreconditionError("oci: images are not available here");
  }
  SOVAI_ASSIGN_OR_RETURN(VolumeSpec source, ParseOciImageSource(spec.image));
  SOVAI_ASSIGN_OR_RETURN(S3Client * s3, stores.ForRegion(source.region));
  const std::string& key = source.prefix;
  // Checked at submission too; it may have been deleted since.
  SOVAI_ASSIGN_OR_RETURN(S3Object object, FindImageArchive(*s3, source));
  const std::string& cache = spec.image_cache_dir;
  SOVAI_RETURN_IF_ERROR(MakeDir(std::filesystem::path(cache).parent_path().string(), 0711));
  SOVAI_RETURN_IF_ERROR(MakeDir(cache, 0711));
  const std::string cache_key =
      base::HexEncode(base::Sha256(source.bucket + "/" + key + "@" + object.etag));
  const std::string entry = base::JoinPath(cache, cache_key);
  std::string archive;
  if (!env.FileExists(base::JoinPath(entry, "image.json"))) {
    archive = base::JoinPath(cache, cache_key + ".download");
    say("image " + spec.image + ": downloading " + base::HumanBytes(object.size_bytes));
    SOVAI_RETURN_IF_ERROR(s3->GetObjectToFile(source.bucket, key, archive).status());
  }
  auto image = CachedRootfs(cache, cache_key, archive);
  if (!archive.empty()) (void)env.DeleteFile(archive);
  SOVAI_RETURN_IF_ERROR(image.status());
  // The workload's uid binds the rootfs: every directory down to it must be traversable.
  SOVAI_RETURN_IF_ERROR(MakeDir(entry, 0711));
  say("image " + spec.image + ": " +
      (image->reused ? std::string("cached rootfs reused")
                     : "unpacked " + std::to_string(image->info.layers) + " layers, " +
                           std::to_string(image->info.files) + " files"));
  return std::optional<CachedImage>(std::move(*image));
}

Status StageVolumesIn(base::Env& env, const WorkloadSpec& spec, WorkloadStores& stores,
                      const Say& say, const std::function<bool()>& stop) {
  SOVAI_RETURN_IF_ERROR(MakeDir(spec.dir, 0711));
  SOVAI_RETURN_IF_ERROR(MakeDir(base::JoinPath(spec.dir, "volumes"), 0711));
  const bool root = ::geteuid() == 0;
  for (size_t i = 0; i < spec.volumes.size(); ++i) {
    const WorkloadVolume& v = spec.volumes[i];
    const std::string local = WorkloadVolumeDir(spec.dir, i);
    Status st = MakeDir(local, 0755);
    auto s3 = st.ok() ? stores.ForVolume(v) : Result<S3Client*>(st);
    if (!s3.ok()) st = s3.status();
    if (st.ok()) {
      auto manifest = SyncDown(**s3, v.spec, local, SyncOptionsFor(env, v, say));
      st = manifest.ok()
               ? env.WriteFileAtomically(WorkloadManifestPath(spec.dir, i), manifest->ToJson())
               : manifest.status();
    }
    if (st.ok() && root && v.spec.permission != VolumePermission::kReadOnly) {
      st = ChownTree(local, spec.uid, spec.gid);
    }
    if (!st.ok()) return Status(st.code(), "volume " + v.spec.SourceName() + ": " + st.message());
    if (stop && stop()) return Status();
  }
  return Status();
}

Status StageVolumesOut(base::Env& env, const WorkloadSpec& spec, WorkloadStores& stores,
                       const Say& say, const std::function<bool(const WorkloadVolume&)>& only) {
  Status first;
  for (size_t i = 0; i < spec.volumes.size(); ++i) {
    const WorkloadVolume& v = spec.volumes[i];
    if (v.spec.permission == VolumePermission::kReadOnly || (only && !only(v))) continue;
    auto sync = [&]() -> Status {
      auto text = env.ReadFile(WorkloadManifestPath(spec.dir, i));
      if (!text.ok()) return Status(text.status().code(), "it was never synced down");
      SOVAI_ASSIGN_OR_RETURN(SyncManifest baseline, SyncManifest::FromJson(*text));
      SOVAI_ASSIGN_OR_RETURN(S3Client * s3, stores.ForVolume(v));
      SyncManifest stored;
      SOVAI_RETURN_IF_ERROR(SyncUp(*s3, v.spec, WorkloadVolumeDir(spec.dir, i), baseline,
                                   v.spec.permission == VolumePermission::kReadWriteDelete,
                                   SyncOptionsFor(env, v, say), &stored)
                                .status());
      // A later sync (the next push, the end) compares against what is in the bucket now.
      return env.WriteFileAtomically(WorkloadManifestPath(spec.dir, i), stored.ToJson());
    };
    if (Status st = sync(); !st.ok() && first.ok()) {
      first = Status(st.code(), "volume " + v.spec.SourceName() + ": " + st.message());
    }
  }
  return first;
}

void ArchiveWorkloadLog(const WorkloadSpec& spec, WorkloadStores& stores, const LogWriter& log,
                        const Say& say) {
  if (spec.log_archive_key.empty()) return;
  auto own = stores.ForRegion("");
  if (!own.ok()) {
    say("log archive skipped: " + own.status().message());
    return;
  }
  if (Status made = EnsureBucket(**own, spec.project_bucket); !made.ok()) {
    say("log archive skipped: " + made.message());
    return;
  }
  auto put = (*own)->PutObjectFromFile(spec.project_bucket, spec.log_archive_key, log.path());
  if (!put.ok()) SOVAI_LOG(WARNING) << spec.id << ": archiving the log: " << put.status();
}

std::vector<StagedVolume> StagedVolumes(const WorkloadSpec& spec) {
  std::vector<StagedVolume> out;
  for (size_t i = 0; i < spec.volumes.size(); ++i) {
    out.push_back(
        {spec.volumes[i].spec, WorkloadVolumeDir(spec.dir, i), WorkloadManifestPath(spec.dir, i)});
  }
  return out;
}

Result<SandboxSpec> BuildSandboxSpec(const WorkloadSpec& spec,
                                     const std::optional<CachedImage>& image,
                                     const std::string& engine_binary) {
  SandboxSpec sandbox;
  sandbox.argv = spec.command;
  if (spec.engine_subcommand) {
    // The built-in ML images are the engine: the command is the subcommand's arguments.
    if (engine_binary.empty()) {
      return base::FailedPreconditionError(
          "image " + spec.image +
          " needs sovai-engine, which this server did not find (see `sovai server --engine`)");
    }
    // The sandbox shows only the host's system directories: the engine comes in as one file.
    sandbox.mounts.push_back({engine_binary, std::string(kEngineInSandbox), true});
    sandbox.argv = {std::string(kEngineInSandbox), *spec.engine_subcommand};
    sandbox.argv.insert(sandbox.argv.end(), spec.command.begin(), spec.command.end());
  } else if (image) {
    // As a container runtime does: the command replaces Cmd, Entrypoint stays in front of it;
    // the image's Env comes first and the spec's env overrides it.
    sandbox.rootfs = image->rootfs;
    sandbox.cwd = image->info.working_dir;
    std::vector<std::string> argv = image->info.entrypoint;
    const std::vector<std::string>& args = spec.command.empty() ? image->info.cmd : spec.command;
    argv.insert(argv.end(), args.begin(), args.end());
    sandbox.argv = std::move(argv);
    for (const std::string& kv : image->info.env) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) continue;
      std::string name = kv.substr(0, eq);
      const bool overridden = std::any_of(spec.env.begin(), spec.env.end(),
                                          [&](const auto& e) { return e.first == name; });
      if (overridden || name == "CUDA_VISIBLE_DEVICES") continue;
      sandbox.env.emplace_back(std::move(name), kv.substr(eq + 1));
    }
  }
  if (sandbox.argv.empty()) {
    return base::InvalidArgumentError("the job has no command and its image no Entrypoint or Cmd");
  }
  sandbox.env.insert(sandbox.env.end(), spec.env.begin(), spec.env.end());
  sandbox.env.emplace_back("SOVAI_JOB_ID", spec.id);
  sandbox.network_none = spec.network_none;
  sandbox.cpus = spec.resources.cpu_ids;
  sandbox.gpus = spec.resources.gpu_ids;
  // GPU workloads reserve huge virtual ranges (CUDA); the RLIMIT_AS limit would break them.
  sandbox.memory_bytes = spec.resources.gpu_ids.empty() ? spec.resources.memory_bytes : 0;
  sandbox.log_path = WorkloadLogPath(spec.dir);
  sandbox.work_dir = base::JoinPath(spec.dir, "sandbox");
  sandbox.uid = spec.uid;
  sandbox.gid = spec.gid;
  for (size_t i = 0; i < spec.volumes.size(); ++i) {
    sandbox.mounts.push_back({WorkloadVolumeDir(spec.dir, i), spec.volumes[i].spec.mount_path,
                              spec.volumes[i].spec.permission == VolumePermission::kReadOnly});
  }
  sandbox.mounts.insert(sandbox.mounts.end(), spec.extra_mounts.begin(), spec.extra_mounts.end());
  return sandbox;
}

Status PrepareSandboxDir(const SandboxSpec& sandbox) {
  SOVAI_RETURN_IF_ERROR(MakeDir(sandbox.work_dir, 0700));
  if (::geteuid() == 0)
    SOVAI_RETURN_IF_ERROR(ChownTree(sandbox.work_dir, sandbox.uid, sandbox.gid));
  return Status();
}

}  // namespace sovai::exec
