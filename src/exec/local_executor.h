// The local executor: a workload's life on this machine (executor.h), in the bubblewrap sandbox
// (sandbox.h). The Slurm agent runs the same executor on a node (slurm_agent.h), with srun's
// tasks as its process and, for several nodes, srun's stage-in as its volume staging; the steps
// below are the only implementation of each part of a life.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "exec/executor.h"
#include "exec/live_sync.h"
#include "exec/oci_image.h"
#include "exec/s3_client.h"
#include "exec/sandbox.h"
#include "exec/volume_spec.h"

namespace sovai::exec {

// The prefix of an image that is an archive in a bucket: "oci:bucket@REGION/key".
inline constexpr std::string_view kOciImagePrefix = "oci:";
// Where the built-in ML images find sovai-engine inside the sandbox (one file bound there).
inline constexpr std::string_view kEngineInSandbox = "/opt/sovai/bin/sovai-engine";

// A workload's processes once started: the sandbox's, or (on a Slurm node) srun's tasks.
class LaunchedProcess {
 public:
  virtual ~LaunchedProcess() = default;
  virtual base::Result<std::optional<base::ExitStatus>> TryWait() = 0;
  // SIGTERM, `grace`, SIGKILL; the exit status.
  virtual base::Result<base::ExitStatus> Stop(std::chrono::milliseconds grace) = 0;
  virtual base::Result<std::vector<pid_t>> ProcessIds() = 0;
};
using Launcher =
    std::function<base::Result<std::unique_ptr<LaunchedProcess>>(const SandboxSpec& spec)>;
// The sandbox's Launch as a Launcher.
Launcher SandboxLauncher(Sandbox& sandbox);

struct LocalExecutorOptions {
  base::Env* env = nullptr;    // nullptr = base::Env::Default()
  Sandbox* sandbox = nullptr;  // required unless `launch` is given
  std::string engine_binary;   // behind the built-in ML images; "" = those images fail
  std::chrono::milliseconds stop_grace{10'000};
  // How often the workload's thread checks its process, a stop and the timeout.
  std::chrono::milliseconds poll_interval{10};
  // Replaces the sandbox's Launch (the Slurm agent: srun of one task per Slurm task).
  Launcher launch;
  // Replaces StageVolumesIn (the Slurm agent of a multi-node job: srun of a stage-in per node).
  std::function<base::Status(const WorkloadSpec& spec,
                             const std::function<void(std::string_view)>& say)>
      stage_in;
  // The word the log's last line starts with: "job DONE: exited with code 0".
  std::string end_note = "job";
  // The live sync of rw/rwd volumes while the workload runs (live_sync.h).
  LiveSyncOptions live_sync;
};

class LocalExecutor final : public Executor {
 public:
  explicit LocalExecutor(LocalExecutorOptions options);
  base::Result<std::unique_ptr<Workload>> Start(WorkloadSpec spec,
                                                WorkloadObserver& observer) override;
  base::Result<std::unique_ptr<Workload>> Resume(WorkloadSpec spec, WorkloadResumption from,
                                                 WorkloadObserver& observer) override;
  bool runs_multi_node() const override { return false; }
  bool runs_oci_images() const override { return true; }

 private:
  LocalExecutorOptions options_;
};

// --- The steps of a life, shared by LocalExecutor and the Slurm agent ---

// One S3 client per store a workload reaches, made on first use. Not thread-safe.
class WorkloadStores {
 public:
  explicit WorkloadStores(const WorkloadSpec& spec) : spec_(spec) {}
  // The client of `volume`'s store (its own credentials, or s3_access of its region).
  base::Result<S3Client*> ForVolume(const WorkloadVolume& volume);
  // The client of `region`'s store ("" or the home region: the platform's own).
  base::Result<S3Client*> ForRegion(const std::string& region);

 private:
  const WorkloadSpec& spec_;
  std::map<std::string, std::unique_ptr<S3Client>> clients_;  // by region key or "#<volume>"
};

// The archive of an oci: image (`source`: the image without "oci:", as a volume spec), found by
// listing its key. NotFound naming the archive and how to put one there.
base::Result<S3Object> FindImageArchive(S3Client& s3, const VolumeSpec& source);
// "oci:bucket@REGION/key" as a volume spec of its bucket and key.
base::Result<VolumeSpec> ParseOciImageSource(std::string_view image);

// The image's root filesystem: none for the host's system and the built-in images; for an oci:
// image, its archive downloaded once per version (ETag) and unpacked into spec.image_cache_dir,
// which later workloads reuse. Progress goes to `say`.
base::Result<std::optional<CachedImage>> PrepareRootfs(
    base::Env& env, const WorkloadSpec& spec, WorkloadStores& stores,
    const std::function<void(std::string_view)>& say);

// Volumes down into WorkloadVolumeDir(dir, i), each manifest beside them, writable ones owned by
// the workload's uid (when the platform is root). Returns early (OK) once `stop` says so. Errors
// name the volume.
base::Status StageVolumesIn(base::Env& env, const WorkloadSpec& spec, WorkloadStores& stores,
                            const std::function<void(std::string_view)>& say,
                            const std::function<bool()>& stop = nullptr);
// The rw/rwd volumes up (rwd: deletions too), every one tried (`only`: those it accepts); the
// first error, naming its volume, or OK. Each manifest then records what is in the bucket, so
// the next call uploads only what changed since.
base::Status StageVolumesOut(base::Env& env, const WorkloadSpec& spec, WorkloadStores& stores,
                             const std::function<void(std::string_view)>& say,
                             const std::function<bool(const WorkloadVolume&)>& only = nullptr);
std::vector<StagedVolume> StagedVolumes(const WorkloadSpec& spec);
// The log into s3://<project_bucket>/<log_archive_key> of the platform's own store (the bucket
// made on first use); skipped, with a line in the log, when that store cannot be reached.
void ArchiveWorkloadLog(const WorkloadSpec& spec, WorkloadStores& stores, const LogWriter& log,
                        const std::function<void(std::string_view)>& say);

// The sandbox of `spec`: argv (the engine's subcommand, or the image's Entrypoint + the command
// or its Cmd), env (the image's, then the spec's, then SOVAI_JOB_ID), mounts (volumes, extra
// files, the engine), CPUs, GPUs, memory, log, work dir. FailedPrecondition when the built-in
// image needs an engine_binary it lacks, InvalidArgument when there is no command at all.
base::Result<SandboxSpec> BuildSandboxSpec(const WorkloadSpec& spec,
                                           const std::optional<CachedImage>& image,
                                           const std::string& engine_binary);
// The sandbox's private work dir, made and (as root) owned by the workload's uid.
base::Status PrepareSandboxDir(const SandboxSpec& sandbox);

}  // namespace sovai::exec
