// The executor: what owns a workload's whole life, from its directory to its last log line, on
// this machine (local_executor.h) or on a Slurm cluster (slurm_executor.h). The control plane
// keeps the state machine and the rows; it describes a workload once (WorkloadSpec), hears its
// phases (WorkloadObserver) and asks it to stop or to sync its outputs now (Workload).
//
//   SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<Workload> w, executor.Start(spec, observer));
//   ... w->Stop("stopped by a user"), w->SyncOutputs(), w->ReadLog(0, 1 << 20) ...
//   WorkloadOutcome outcome = w->Wait();
//
// A workload's life, on either executor: its directory and log; the image's root filesystem
// (PrepareRootfs); volumes synced down (with the per-project cache), writable ones owned by the
// workload's uid; the sandbox (bubblewrap, GPUs pinned); until exit, stop or timeout; writable
// volumes synced up; the log archived into the project's bucket. It runs on a thread of the
// workload's own from Start to the end; the observer's calls come from that thread, each before
// the work it announces starts, so that a caller that commits a state there never shows a state
// whose work already happened.
//
// Thread-safety: every Workload method may be called from any thread, also while Wait blocks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "exec/log_capture.h"
#include "exec/s3_client.h"
#include "exec/sandbox.h"
#include "exec/volume_spec.h"

namespace sovai::exec {

// The phases a workload goes through, in this order (a backend may skip some: Slurm reports no
// kPending). kQueued: waiting for the backend to place it (Slurm's queue).
enum class WorkloadPhase : uint8_t { kQueued, kInitializing, kPending, kRunning, kFinalizing };
std::string_view WorkloadPhaseName(WorkloadPhase phase);  // "QUEUED", "INITIALIZING", ...

// How a workload ended: its command's status (kDone, kFailed), a failure of the platform or the
// backend to run it (kError), a stop (kInterrupted) or its time limit (kTimeout).
enum class WorkloadEnd : uint8_t { kDone, kFailed, kError, kInterrupted, kTimeout };
std::string_view WorkloadEndName(WorkloadEnd end);  // "DONE", "FAILED", ...

struct WorkloadOutcome {
  WorkloadEnd end = WorkloadEnd::kDone;
  std::string reason;  // "exited with code 0", "stopped by a user", what failed
  std::optional<int> exit_code;
  std::optional<int> exit_signal;
  // Why the outputs did not reach their buckets ("" = synced, or nothing to sync).
  std::string outputs_error;
  // Detach() on a workload that outlives this process (Slurm): it goes on, unchanged, and
  // Executor::Resume follows it again.
  bool detached = false;
  // The node it ran on died under it (Slurm's NODE_FAIL), not its command: a restart policy
  // runs it again (control/job_restart.h).
  bool node_lost = false;
};

struct WorkloadVolume {
  VolumeSpec spec;
  // The object cache of ":cache" volumes ("" = none).
  std::string cache_dir;
  // The credentials of its store, when the caller resolved them (the Slurm agent's plan); none =
  // WorkloadSpec::s3_access, asked when the volume is synced.
  std::optional<S3ClientOptions> s3;
};

// What the workload asks of the machine: in all for Slurm's request, by host id where the local
// scheduler placed it.
struct WorkloadResources {
  std::string flavor;  // the catalog's id (Slurm maps it to a partition and a gres type)
  int gpus = 0;
  int vcpus = 0;
  uint64_t memory_bytes = 0;  // the local sandbox's RLIMIT_AS when it has no GPU; 0 = no limit
  int nodes = 1;
  int tasks_per_node = 0;    // 0 = one per GPU of a node (at least one)
  std::vector<int> cpu_ids;  // host CPU ids (local)
  std::vector<int> gpu_ids;  // host GPU indexes (local)
};

// An image of the platform's registry (docs/formats/registry.md), resolved by the control plane
// at submission: the objects PrepareRootfs fetches from the registry's bucket, so that exec needs
// nothing of the registry's layout.
struct RegistryBlob {
  std::string digest;  // "sha256:<64 hex>": verified after the download
  uint64_t size_bytes = 0;
  std::string key;  // its object in RegistryImage::bucket
};
struct RegistryImage {
  std::string digest;           // what the job names ("sha256:<hex>", a manifest or an index)
  std::string manifest_digest;  // the image manifest run (== digest unless an index)
  std::string manifest_key;
  std::string bucket;
  RegistryBlob config;
  std::vector<RegistryBlob> layers;
  S3ClientOptions s3;  // reads `bucket`
};

struct WorkloadSpec {
  std::string id;   // "job_<ULID>": SOVAI_JOB_ID in the workload, names on the backend
  std::string dir;  // its directory here: log, volumes/<i>, manifest-<i>.json, sandbox/
  // As the job names it, for messages: "" (the host's system), a built-in image, or
  // "oci:bucket@REGION/key" (an archive that PrepareRootfs unpacks), or a registry reference
  // (then `registry_image` says what to fetch).
  std::string image;
  std::optional<RegistryImage> registry_image;
  // The built-in ML images are sovai-engine: argv is `sovai-engine <subcommand> <command...>`.
  std::optional<std::string> engine_subcommand;
  // The command (with an OCI image: it replaces Cmd; Entrypoint stays in front of it).
  std::vector<std::string> command;
  std::vector<std::pair<std::string, std::string>> env;  // over the image's Env
  std::vector<Mount> extra_mounts;                       // read-only host files
  std::vector<WorkloadVolume> volumes;
  bool network_none = false;
  WorkloadResources resources;
  uint32_t uid = 65534;  // the workload runs as (and owns its writable volumes)
  uint32_t gid = 65534;
  int64_t timeout_s = 0;  // from RUNNING; 0 = none
  // The platform's own region: volumes that name it use s3_access("").
  std::string home_region;
  // Credentials for the store of `region` ("" = the platform's own; otherwise uppercase). Its
  // refusal (data residency) fails the volume that needs it.
  std::function<base::Result<S3ClientOptions>(const std::string& region)> s3_access;
  // Where oci: images are unpacked, once per archive version, and registry images once per
  // manifest digest, their layers cached once by digest in <image_cache_dir>/layers/ ("" =
  // neither is available).
  std::string image_cache_dir;
  // The log's archive in the platform's own store at the end ("" = not archived), and the
  // bucket the platform's reports about it go to (created on first use).
  std::string project_bucket;
  std::string log_archive_key;
  // Written to the log once the workload is INITIALIZING ("" = none).
  std::string start_note;
};

// A volume as staged on this machine, for a look at the outputs before they are synced up.
struct StagedVolume {
  VolumeSpec spec;
  std::string local_dir;
  std::string manifest_path;  // the SyncManifest of its sync down
};

// What the executor tells its caller, on the workload's thread.
class WorkloadObserver {
 public:
  virtual ~WorkloadObserver() = default;
  // The workload enters `phase`; the work of the phase starts when this returns.
  virtual void OnPhase(WorkloadPhase phase) = 0;
  // The command ended (exit code or signal in `outcome`); the outputs are synced next.
  virtual void OnExit(const WorkloadOutcome& outcome) { (void)outcome; }
  // Just before the writable volumes are synced up at the end (model cards go beside models);
  // `say` adds a line to the workload's log.
  virtual void BeforeSyncUp(const std::vector<StagedVolume>& volumes,
                            const std::function<void(std::string_view)>& say) {
    (void)volumes;
    (void)say;
  }
  // The backend's own name for the workload (a Slurm job id), once it has one.
  virtual void OnBackendId(const std::string& id) { (void)id; }
  // Why a queued workload waits ("Slurm: PENDING (Resources)").
  virtual void OnWaiting(const std::string& reason) { (void)reason; }
  // The host it runs on, when that is not this machine (Slurm's first node).
  virtual void OnNode(const std::string& host) { (void)host; }
};

// What the live sync of a workload has done and what it still has to do; all volumes together.
struct LiveSyncStatus {
  bool active = false;         // at least one volume is followed
  uint64_t pending_files = 0;  // changed and not yet uploaded
  uint64_t pending_bytes = 0;
  int64_t oldest_pending_unix_micros = 0;  // the oldest pending change (its mtime); 0 = none
  int64_t last_sync_unix_micros = 0;       // the end of the last round; 0 = none yet
  uint64_t uploaded_files = 0;             // since the start
  uint64_t uploaded_bytes = 0;
  uint64_t units = 0;    // units (checkpoint directories) completed
  uint64_t retried = 0;  // files that changed while they were uploaded (and went up again)
  uint64_t errors = 0;   // rounds that failed (each one a line in the log)
  std::string last_error;
};

class Workload {
 public:
  virtual ~Workload() = default;
  // Blocks until the end (the outputs synced and the log archived) and returns how it ended;
  // again after that, the same outcome at once.
  virtual WorkloadOutcome Wait() = 0;
  // Ends it: before it runs, at the next step; while it runs, SIGTERM, a grace, SIGKILL; the
  // outputs are still synced. The outcome is kInterrupted with `reason` (the first stop's).
  virtual void Stop(std::string reason) = 0;
  // The platform stops following it (its process shuts down): a workload that outlives the
  // process (Slurm) goes on and ends `detached`; a local one is stopped as by Stop(reason).
  virtual void Detach(std::string reason) = 0;
  // Syncs the rw/rwd volumes now, while it runs (checkpoints reach the bucket before the end).
  // OK when it ended first (the end syncs them). Unavailable when the backend cannot.
  virtual base::Status SyncOutputs() = 0;
  // Whole log records from `offset` (exec::ReadLog of its log).
  virtual base::Result<LogChunk> ReadLog(uint64_t offset, size_t max_bytes) = 0;
  // Host pids of its processes while it runs here; empty otherwise.
  virtual base::Result<std::vector<pid_t>> ProcessIds() = 0;
  // Where the live sync of its rw/rwd volumes stands (live_sync.h); inactive when it has none
  // or the backend does not report it.
  virtual LiveSyncStatus SyncProgress() { return {}; }
};

// Where a workload was when the process that ran it ended (a restart, a new leader).
struct WorkloadResumption {
  WorkloadPhase phase = WorkloadPhase::kQueued;
  std::string backend_id;  // the Slurm job id ("" = none was submitted)
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Starts `spec`'s life on a thread of its own. Errors: the directory or the log cannot be made
  // (nothing ran); everything later is the outcome's.
  virtual base::Result<std::unique_ptr<Workload>> Start(WorkloadSpec spec,
                                                        WorkloadObserver& observer) = 0;
  // Takes a workload over after the process that ran it ended: a local sandbox died with it, so
  // the outputs written so far are synced up (when it had run) and it ends kInterrupted; a Slurm
  // job is followed again (or submitted, when it never was).
  virtual base::Result<std::unique_ptr<Workload>> Resume(WorkloadSpec spec, WorkloadResumption from,
                                                         WorkloadObserver& observer) = 0;
  // Whether workloads need more than one node or task (Slurm), and oci: images (local).
  virtual bool runs_multi_node() const = 0;
  virtual bool runs_oci_images() const = 0;
};

// The layout of a workload's directory (both executors and the Slurm agent's node side).
std::string WorkloadLogPath(const std::string& dir);
std::string WorkloadVolumeDir(const std::string& dir, size_t i);
std::string WorkloadManifestPath(const std::string& dir, size_t i);

// Makes <dir> (0711) and <dir>/volumes, and opens <dir>/log for appending. Errors say "cannot
// open the job log" when the log is what failed.
base::Result<std::unique_ptr<LogWriter>> OpenWorkloadLog(base::Env& env, const std::string& dir);

// The log of a workload whose directory is `dir`, from `offset`: empty at offset 0 when it has
// none yet.
base::Result<LogChunk> ReadWorkloadLog(base::Env& env, const std::string& dir, uint64_t offset,
                                       size_t max_bytes);

// The bucket exists in `s3`'s store (created when missing).
base::Status EnsureBucket(S3Client& s3, const std::string& bucket);

}  // namespace sovai::exec
