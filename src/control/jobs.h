// Jobs: the state machine of docs/api/jobs.md, persisted in the control database, scheduled on
// this machine's resources (scheduler.h) and run by an executor (exec/executor.h): the local one
// (exec/local_executor.h), or with `slurm.client` the Slurm one (exec/slurm_executor.h), which
// own the workload's life; the service turns its phases into the job's transitions.
//
//   SOVAI_ASSIGN_OR_RETURN(auto jobs, JobService::Start(db, options));
//   SOVAI_ASSIGN_OR_RETURN(Job job, jobs->Submit(project_id, user_id, spec));
//   ... jobs->Get(project_id, job.id), jobs->ReadLog(...), jobs->Stop(...) ...
//
// Each admitted job has a runner thread of its own that follows its workload: INITIALIZING (volumes
// synced down), PENDING (sandbox started), RUNNING (until exit, stop or timeout), FINALIZING
// (rw/rwd volumes synced up, the log archived into the project's bucket), then a terminal state.
// Every transition is one committed row update before the work of the state starts, so a restart
// knows where each job was. Start() after a restart: QUEUED jobs keep their order; jobs that were
// INITIALIZING, PENDING, RUNNING or FINALIZING lost their sandbox with the old process (bwrap dies
// with it) and are finalized: outputs written so far are synced up, and the state becomes
// INTERRUPTED with the reason "the server restarted while the job was RUNNING".
//
// Project isolation: every method takes the caller's project; a job of another project is
// NotFound, exactly like a missing one.
// Thread-safety: all methods may be called concurrently; `mu_` guards the scheduler and the table
// of live runners.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "base/ulid.h"
#include "control/db.h"
#include "control/job_restart.h"
#include "control/job_spec.h"
#include "control/limits.h"
#include "control/scheduler.h"
#include "exec/executor.h"
#include "exec/log_capture.h"
#include "exec/slurm_executor.h"
#include "exec/volume_spec.h"

namespace sovai::exec {
class Sandbox;
}  // namespace sovai::exec

namespace sovai::control {

enum class JobState : uint8_t {
  kQueued,
  kInitializing,
  kPending,
  kRunning,
  kFinalizing,
  kDone,
  kFailed,
  kError,
  kInterrupted,
  kTimeout,
};
std::string_view JobStateName(JobState state);  // "QUEUED", ...
JobState StateOf(exec::WorkloadEnd end);        // kDone -> DONE, ...
std::optional<JobState> ParseJobState(std::string_view name);
bool IsTerminal(JobState state);

struct JobTransition {
  JobState state = JobState::kQueued;
  int64_t at_unix_micros = 0;
  // Why, for a terminal state and for QUEUED again after a try (the restart policy); else "".
  std::string reason = {};
  bool operator==(const JobTransition&) const = default;
};

struct Job {
  std::string id;  // "job_<ULID>"
  std::string project;
  std::string user;
  JobSpec spec;
  JobState state = JobState::kQueued;
  std::vector<JobTransition> history;
  std::optional<int> exit_code;          // when the command exited
  std::optional<int> exit_signal;        // when it was killed by a signal
  std::string reason;                    // why it ended (or why it waits, for QUEUED)
  int retries = 0;                       // reruns made by the restart policy
  std::optional<Allocation> allocation;  // while it holds resources
  int64_t created_unix_micros = 0;
  int64_t sequence = 0;  // submission order
  // The Slurm job id of its current try, on the Slurm executor ("" before sbatch, and on the
  // local executor).
  std::string slurm_job_id;
  // The host its workload runs on when it is not this server's ("" = here): the first node of
  // its Slurm allocation, as Slurm names it (resolvable on the cluster's network).
  std::string node;
  // A registry image's manifest digest ("sha256:<hex>"), resolved at submission: every try runs
  // this image, whatever its tag points at later. "" for other images.
  std::string image_digest;
};

// The REST representation (docs/api/openapi.yaml, schema Job).
nlohmann::json JobToJson(const Job& job);

// The live syncs of the jobs of a server, for /metrics (job_sync.cc).
struct LiveSyncTotals {
  uint64_t workloads = 0;  // running jobs with a live volume
  uint64_t pending_files = 0;
  uint64_t pending_bytes = 0;
  int64_t oldest_pending_unix_micros = 0;  // 0 = nothing pending
  uint64_t uploaded_files = 0;             // since the server started
  uint64_t uploaded_bytes = 0;
  uint64_t units = 0;
  uint64_t retried = 0;
  uint64_t errors = 0;

  void Add(const exec::LiveSyncStatus& s, bool running);
};
// The job's "status.sync" object (docs/api/jobs.md): pending files and bytes, the last round,
// the age of the oldest pending change, what went up.
nlohmann::json LiveSyncToJson(const exec::LiveSyncStatus& s, int64_t now_unix_micros);
// sovai_live_sync_* gauges and counters.
std::string RenderLiveSyncMetrics(const LiveSyncTotals& totals, int64_t now_unix_micros);

// How the platform reaches the object store on behalf of a project.
struct S3Access {
  std::string endpoint;  // "http://127.0.0.1:9000"
  std::string region;    // the S3 region ("eu-west-local")
  std::string access_key;
  std::string secret_key;
  std::string ca_file;  // PEM that verifies an https endpoint's certificate; "" = the system's
};

struct JobServiceOptions {
  std::string data_dir;             // jobs live in <data_dir>/jobs/<id>/
  std::string region;               // the server's region
  std::string jurisdiction = "EU";  // whose law the region is under (model cards)
  // The other regions volumes may name (uppercase name → jurisdiction, for model cards); the
  // data-residency rule itself is s3_access's (regions.h).
  std::map<std::string, std::string> other_jurisdictions;
  const FlavorCatalog* flavors = nullptr;
  Capacity capacity;
  // Host CPU ids, by scheduler CPU index (capacity.cpus of them).
  std::vector<int> cpu_ids;
  // Credentials acting as `project` in the object store of `region` (as a volume spec writes it,
  // case-insensitively; "" = the server's own region). For another region it applies the
  // data-residency rule (regions.h): InvalidArgument for a region the server does not know,
  // PermissionDenied for one the project does not allow, so that no path (admission, sync,
  // app replicas) reaches a region the project may not use.
  std::function<base::Result<S3Access>(const std::string& project, const std::string& region)>
      s3_access;
  exec::Sandbox* sandbox = nullptr;  // the local executor's; may be null with Slurm
  // The Slurm executor (docs/slurm.md) when `slurm.client` is set: every job becomes a Slurm job
  // whose batch step is `sovai slurm-agent run`. Its stop_grace and env are this service's.
  exec::SlurmExecutorOptions slurm;
  base::Env* env = nullptr;  // nullptr = base::Env::Default()
  std::chrono::milliseconds stop_grace{10'000};
  int64_t default_timeout_s = kDefaultJobTimeoutS;
  // The uid:gid workloads run as (and own their writable volumes).
  uint32_t workload_uid = 65534;
  uint32_t workload_gid = 65534;
  // The sovai-engine binary behind the built-in images sovai/finetune (`sovai-engine train`) and
  // sovai/serve (`sovai-engine serve`); "" = those images are unavailable.
  std::string engine_binary;
  // How often a runner checks its workload, a stop request and the timeout.
  std::chrono::milliseconds poll_interval{10};
  // Called by Submit before a job is queued (app replicas included), outside the service's lock;
  // an error refuses the job and is returned as is (the billing service's budget check answers
  // FailedPrecondition with the numbers). nullptr: every job is admitted.
  std::function<base::Status(const std::string& project, const JobSpec& spec)> admission_check;
  // Two servers on one PostgreSQL database (docs/state.md): only the leader schedules and runs
  // jobs. nullptr = always the leader (SQLite: one server). A follower's Submit only queues the
  // row and its Stop only records the request; the leader adopts both within
  // coordination_interval. When a follower becomes the leader it recovers every live job, as
  // after a restart (Slurm jobs are followed; local sandboxes of the old leader are gone).
  std::function<bool()> is_leader;
  std::chrono::milliseconds coordination_interval{500};
  // A follower's reader of the log of a job that runs elsewhere (the leader's internal API);
  // nullptr = such a log reads as empty.
  std::function<base::Result<exec::LogChunk>(const std::string& id, uint64_t offset,
                                             size_t max_bytes)>
      remote_log;
  // Resolves a registry image reference (job_spec.h IsRegistryImage) of `project` in the
  // server's registry: what the executor fetches, with RegistryImage::digest the digest the
  // reference names. NotFound for a missing repository, tag or manifest (another project's
  // included); InvalidArgument for a reference to another registry. nullptr = registry images
  // are refused (FailedPrecondition: the server runs no registry).
  std::function<base::Result<exec::RegistryImage>(const std::string& project,
                                                  const std::string& reference)>
      resolve_image;
};

// Pages of jobs, newest first.
struct JobPage {
  std::vector<Job> jobs;
  std::string next_cursor;  // "" when this is the last page
};

class JobService {
 public:
  static base::Result<std::unique_ptr<JobService>> Start(ControlDb& db, JobServiceOptions options);
  ~JobService();  // Shutdown()
  JobService(const JobService&) = delete;
  JobService& operator=(const JobService&) = delete;

  // Admits a validated spec. Errors: NotFound (unknown flavor; a volume's bucket missing or not
  // the project's, naming "volumes[i]"; an oci: image's bucket or archive missing, naming
  // "image"); InvalidArgument or PermissionDenied when s3_access
  // refuses a volume's region (data residency, naming the field); FailedPrecondition when this
  // machine can never run it (names what is missing); admission_check's error; the database's
  // errors. A registry image is resolved here (resolve_image): a missing one is NotFound
  // naming "image", and the job records its digest (Job::image_digest). `bad_field`, when
  // given, receives the spec field a NotFound is about ("flavor", "volumes[1]", "image").
  base::Result<Job> Submit(const std::string& project, const std::string& user, JobSpec spec,
                           std::string* bad_field = nullptr);
  // The log of job `id` of any project, for another server of the same database
  // (remote_log); as ReadLog otherwise.
  base::Result<exec::LogChunk> ReadLogForPeer(const std::string& id, uint64_t offset,
                                              size_t max_bytes);
  // Whether this server schedules and runs jobs now.
  bool leading();
  base::Result<Job> Get(const std::string& project, const std::string& id);
  // `labels`: only jobs carrying all of them. `after`: the cursor of the previous page.
  base::Result<JobPage> List(const std::string& project,
                             const std::map<std::string, std::string>& labels, int limit,
                             const std::string& after);
  // QUEUED: ends INTERRUPTED at once. Running states: SIGTERM, grace, SIGKILL, then FINALIZING
  // (outputs still synced), INTERRUPTED. Terminal: FailedPrecondition. Returns the job as it is
  // when the stop was requested. `reason` becomes the job's reason ("" = "stopped by a user").
  base::Result<Job> Stop(const std::string& project, const std::string& id,
                         const std::string& reason = "");
  // Removes a job that ended (its row, log and files). FailedPrecondition while it is not
  // terminal.
  base::Status Delete(const std::string& project, const std::string& id);
  // Syncs the rw/rwd volumes of a RUNNING job now (checkpoints reach the bucket without waiting
  // for the end). FailedPrecondition when it is not RUNNING or has no writable volume.
  base::Status PushData(const std::string& project, const std::string& id);
  // Whole log records from `offset` (exec::ReadLog).
  base::Result<exec::LogChunk> ReadLog(const std::string& project, const std::string& id,
                                       uint64_t offset, size_t max_bytes);
  // Persists and applies a project's quota (queued jobs start when it allows).
  base::Status SetQuota(const std::string& project, Quota quota);
  Quota GetQuota(const std::string& project);
  // Where the live sync of a job running here stands (exec::Workload::SyncProgress); nullopt
  // when it does not run on this server or follows no volume.
  std::optional<exec::LiveSyncStatus> SyncProgress(const std::string& id);
  // The live syncs of every job running here, summed, with the uploads of the jobs that ended
  // since the start (the *_total counters only grow). For /metrics (RenderLiveSyncMetrics).
  LiveSyncTotals LiveSyncSums();
  // Host pids of the processes of a RUNNING job's sandbox (exec::Workload::ProcessIds);
  // empty when the job is not running. For the autoscaler's CPU and memory measurements.
  base::Result<std::vector<pid_t>> ProcessIds(const std::string& id);
  // Whether this machine could ever run `request` (Scheduler::CheckFits).
  base::Status CheckFits(const ResourceRequest& request);
  // What Submit checks of the data a spec reads: NotFound naming the field (a volume, the image)
  // whose bucket is missing or another project's, or "image" when an oci: image's archive is not
  // in its bucket; s3_access's refusal of a region, naming the field. `bad_field`, when given,
  // receives the field. Apps check their image with it before any replica is submitted.
  // A registry image reference of `project` resolved (resolve_image; FailedPrecondition
  // without one); errors name the image, and set `bad_field` to "image".
  base::Result<exec::RegistryImage> ResolveImage(const std::string& project,
                                                 const std::string& reference,
                                                 std::string* bad_field);
  base::Status CheckSources(const std::string& project, const JobSpec& spec,
                            std::string* bad_field);

  // Stops every running job (as Stop, with reason "the server is shutting down") and joins the
  // runners. Idempotent.
  void Shutdown();

 private:
  struct Runner;
  class Events;
  JobService(ControlDb& db, JobServiceOptions options);
  // Takes over the live jobs of the database: QUEUED ones into the scheduler, and (with
  // `take_over`: at start, or when this server becomes the leader) running ones onto runners
  // that finalize or follow them. Jobs it knows already are left alone. Also applies the stop
  // requests that followers recorded.
  base::Status Recover(bool take_over);
  // The coordination thread: leadership changes, jobs and stops recorded by other servers.
  void Coordinate();
  // Stops a job this server runs or queues (Stop's work on the leader).
  base::Result<Job> StopHere(Job job, const std::string& reason);
  // Writes `job` in `sql` (Save's statement).
  base::Status SaveIn(base::Database& sql, const Job& job);
  // Under mu_: starts what the scheduler places.
  void ScheduleLocked();
  // A runner's thread: the job's workload from Start (or Resume) to its end, then the job's end
  // or its next try.
  void Run(Runner& runner);
  // The workload of `job` as the executor runs it, on `allocation` (the local scheduler's).
  exec::WorkloadSpec WorkloadSpecFor(const Job& job, const Allocation& allocation) const;
  // The registry image of `job` by its recorded digest.
  base::Result<exec::RegistryImage> PinnedImage(const Job& job);
  // The job's end (a terminal state), or another try (the restart policy, job_restart.h).
  void Conclude(Job& job, const TryEnd& end);
  // The runner leaves: its resources go back, the next jobs are scheduled.
  void Finish(Runner& runner);
  base::Result<Job> Load(const std::string& project, const std::string& id);
  // The job `id` of `project`, or of any project when `project` is null (the runners).
  base::Result<Job> LoadById(const std::string& id, const std::string* project);
  base::Status Save(const Job& job);
  base::Status Transition(Job& job, JobState state, std::string reason = "");
  std::string JobDir(const std::string& id) const;
  // MODEL_CARD.md and model_card.json next to every model or adapter the job wrote
  // (model_card.h).
  base::Status WriteCards(const Job& job, const std::vector<exec::StagedVolume>& volumes);
  // The workload of a job that runs here now, or nullptr.
  std::shared_ptr<exec::Workload> LiveWorkload(const std::string& id);
  // Reaps runners that finished (joins their threads).
  void ReapLocked();

  ControlDb& db_;
  JobServiceOptions options_;
  base::Env& env_;
  base::UlidGenerator ulids_;
  std::unique_ptr<exec::Executor> executor_;

  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  Scheduler scheduler_;
  std::map<std::string, Quota> quotas_;  // as persisted in project_quotas
  // By job id, while it runs. Shared: Stop and PushData keep a runner alive while they talk to it.
  std::map<std::string, std::shared_ptr<Runner>> runners_;
  std::vector<std::shared_ptr<Runner>> finished_;  // to join
  LiveSyncTotals ended_syncs_;                     // the live syncs of the jobs that ended
  bool shutting_down_ = false;
  bool leading_ = false;
  std::thread coordinator_;  // joined by Shutdown
};

}  // namespace sovai::control
