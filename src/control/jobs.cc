#include "control/jobs.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "base/crypto.h"
#include "base/json.h"
#include "base/log.h"
#include "base/strings.h"
#include "base/ulid.h"
#include "control/job_restart.h"
#include "control/model_card.h"
#include "exec/local_executor.h"
#include "exec/s3_client.h"
#include "exec/sandbox.h"
#include "exec/slurm_executor.h"
#include "exec/volume_spec.h"
#include "exec/volume_sync.h"
#include "registry/names.h"

namespace sovai::control {
namespace {

using base::Result;
using base::Status;
using nlohmann::json;

constexpr std::string_view kStateNames[] = {"QUEUED",      "INITIALIZING", "PENDING", "RUNNING",
                                            "FINALIZING",  "DONE",         "FAILED",  "ERROR",
                                            "INTERRUPTED", "TIMEOUT"};
constexpr int kMaxListLimit = 1000;
// The key of an archived job log in the project's bucket.
std::string LogArchiveKey(const std::string& job_id) { return "jobs/" + job_id + "/log.txt"; }

json AllocationToJson(const Allocation& a) {
  return {{"gpus", a.gpus}, {"cpus", a.cpus}, {"memory_bytes", a.memory_bytes}};
}

Allocation AllocationFromJson(const json& j) {
  Allocation a;
  a.gpus = j.value("gpus", std::vector<int>{});
  a.cpus = j.value("cpus", std::vector<int>{});
  a.memory_bytes = j.value("memory_bytes", uint64_t{0});
  return a;
}

json HistoryToJson(const std::vector<JobTransition>& history) {
  json out = json::array();
  for (const JobTransition& t : history) {
    json entry = {{"state", JobStateName(t.state)}, {"at_unix_micros", t.at_unix_micros}};
    if (!t.reason.empty()) entry["reason"] = t.reason;
    out.push_back(std::move(entry));
  }
  return out;
}

// The bucket of a project's platform files (archived logs): "sovai-" + the project's ULID in
// lowercase, a valid bucket name owned by the project.
std::string ProjectBucket(const std::string& project) {
  std::string suffix = project.substr(project.find('_') + 1);
  return "sovai-" + base::AsciiToLower(suffix);
}

exec::S3ClientOptions ClientOptions(const S3Access& access) {
  exec::S3ClientOptions o;
  o.endpoint = access.endpoint;
  o.region = access.region;
  o.access_key = access.access_key;
  o.secret_key = access.secret_key;
  o.ca_file = access.ca_file;
  return o;
}

JobState StateOf(exec::WorkloadPhase phase) {
  switch (phase) {
    case exec::WorkloadPhase::kQueued:
      return JobState::kQueued;
    case exec::WorkloadPhase::kInitializing:
      return JobState::kInitializing;
    case exec::WorkloadPhase::kPending:
      return JobState::kPending;
    case exec::WorkloadPhase::kRunning:
      return JobState::kRunning;
    case exec::WorkloadPhase::kFinalizing:
      return JobState::kFinalizing;
  }
  return JobState::kQueued;
}

exec::WorkloadPhase PhaseOf(JobState state) {
  switch (state) {
    case JobState::kInitializing:
      return exec::WorkloadPhase::kInitializing;
    case JobState::kPending:
      return exec::WorkloadPhase::kPending;
    case JobState::kRunning:
      return exec::WorkloadPhase::kRunning;
    case JobState::kFinalizing:
      return exec::WorkloadPhase::kFinalizing;
    default:
      return exec::WorkloadPhase::kQueued;
  }
}

}  // namespace

std::string_view JobStateName(JobState state) { return kStateNames[static_cast<int>(state)]; }

std::optional<JobState> ParseJobState(std::string_view name) {
  for (size_t i = 0; i < std::size(kStateNames); ++i) {
    if (kStateNames[i] == name) return static_cast<JobState>(i);
  }
  return std::nullopt;
}

bool IsTerminal(JobState state) { return state >= JobState::kDone; }

json JobToJson(const Job& job) {
  json j = {
      {"id", job.id},
      {"project", job.project},
      {"user", job.user},
      {"spec", JobSpecToJson(job.spec)},
      {"status",
       {{"state", JobStateName(job.state)},
        {"reason", job.reason},
        {"retries", job.retries},
        {"history", HistoryToJson(job.history)}}},
      {"created_unix_micros", job.created_unix_micros},
  };
  if (job.exit_code) j["status"]["exit_code"] = *job.exit_code;
  if (job.exit_signal) j["status"]["exit_signal"] = *job.exit_signal;
  if (job.allocation) j["status"]["allocation"] = AllocationToJson(*job.allocation);
  if (!job.slurm_job_id.empty()) j["status"]["slurm_job_id"] = job.slurm_job_id;
  if (!job.node.empty()) j["status"]["node"] = job.node;
  if (!job.image_digest.empty()) j["status"]["image_digest"] = job.image_digest;
  return j;
}

// A job being run, from admission to its terminal state.
struct JobService::Runner {
  std::string id;
  std::string project;
  Allocation allocation;
  // Set when the job was mid-run in a previous process: the executor resumes it.
  std::optional<JobState> recovered_from;
  std::thread thread;

  std::mutex mu;                           // guards the requests and `workload` below
  std::optional<std::string> stop_reason;  // a stop was requested (a user, the budget, shutdown)
  bool detach = false;                     // the server shuts down
  // From the executor's Start to the workload's end. Shared: PushData and ProcessIds keep it
  // alive while they talk to it.
  std::shared_ptr<exec::Workload> workload;

  // Passes a stop on to the workload, or keeps it for the workload to come.
  void RequestStop(const std::string& reason, bool shutting_down) {
    std::lock_guard lock(mu);
    if (!stop_reason) stop_reason = reason;
    detach = detach || shutting_down;
    if (workload) ApplyStopLocked();
  }
  void ApplyStopLocked() {
    if (detach) {
      workload->Detach(*stop_reason);
    } else if (stop_reason) {
      workload->Stop(*stop_reason);
    }
  }
};

JobService::JobService(ControlDb& db, JobServiceOptions options)
    : db_(db),
      options_(std::move(options)),
      env_(options_.env != nullptr ? *options_.env : base::Env::Default()),
      scheduler_(options_.capacity) {}

JobService::~JobService() { Shutdown(); }

Result<std::unique_ptr<JobService>> JobService::Start(ControlDb& db, JobServiceOptions options) {
  SOVAI_CHECK(options.flavors != nullptr && options.s3_access);
  SOVAI_CHECK(options.sandbox != nullptr || options.slurm.client != nullptr);
  SOVAI_CHECK(options.cpu_ids.size() == static_cast<size_t>(options.capacity.cpus));
  std::unique_ptr<JobService> service(new JobService(db, std::move(options)));
  const JobServiceOptions& o = service->options_;
  if (o.slurm.client != nullptr) {
    exec::SlurmExecutorOptions slurm = o.slurm;
    slurm.stop_grace = o.stop_grace;
    slurm.env = &service->env_;
    service->executor_ = std::make_unique<exec::SlurmExecutor>(std::move(slurm));
  } else {
    exec::LocalExecutorOptions local;
    local.env = &service->env_;
    local.sandbox = o.sandbox;
    local.engine_binary = o.engine_binary;
    local.stop_grace = o.stop_grace;
    local.poll_interval = o.poll_interval;
    service->executor_ = std::make_unique<exec::LocalExecutor>(std::move(local));
  }
  SOVAI_RETURN_IF_ERROR(exec::MakeDir(service->options_.data_dir, 0711));
  SOVAI_RETURN_IF_ERROR(exec::MakeDir(base::JoinPath(service->options_.data_dir, "jobs"), 0711));
  const bool leading = !service->options_.is_leader || service->options_.is_leader();
  {
    std::lock_guard lock(service->mu_);
    service->leading_ = leading;
  }
  if (leading) SOVAI_RETURN_IF_ERROR(service->Recover(/*take_over=*/true));
  if (service->options_.is_leader) {
    service->coordinator_ = std::thread([s = service.get()] { s->Coordinate(); });
  }
  return service;
}

std::string JobService::JobDir(const std::string& id) const {
  return base::JoinPath(base::JoinPath(options_.data_dir, "jobs"), id);
}

namespace {

Result<Job> JobFromRow(const base::Statement& st) {
  // Columns: id, project, user, sequence, state, spec, history, exit_code, exit_signal, reason,
  // retries, allocation, created_at, slurm_job_id, node, image_digest.
  Job job;
  job.id = st.ColumnText(0);
  job.project = st.ColumnText(1);
  job.user = st.ColumnText(2);
  job.sequence = st.ColumnInt(3);
  auto state = ParseJobState(st.ColumnText(4));
  if (!state) return base::DataLossError("job " + job.id + " has an unknown state");
  job.state = *state;
  auto spec_json = base::ParseJson(st.ColumnText(5));
  if (!spec_json.ok()) return base::DataLossError("job " + job.id + " has a corrupt spec");
  // The stored spec was validated at submission; its parse cannot fail unless the row is corrupt.
  const json& s = *spec_json;
  JobSpec& spec = job.spec;
  spec.name = s.value("name", "");
  spec.image = s.value("image", "");
  spec.command = s.value("command", std::vector<std::string>{});
  spec.env = s.value("env", std::map<std::string, std::string>{});
  spec.flavor = s.value("flavor", "");
  spec.units = s.value("units", 1);
  spec.volumes = s.value("volumes", std::vector<std::string>{});
  spec.labels = s.value("labels", std::map<std::string, std::string>{});
  spec.timeout_s = s.value("timeout_s", int64_t{0});
  spec.priority = s.value("priority", 0);
  spec.network = s.value("network", "host") == "none" ? NetworkMode::kNone : NetworkMode::kHost;
  spec.nodes = s.value("nodes", 1);
  spec.tasks_per_node = s.value("tasks_per_node", 0);
  if (auto r = s.find("restart"); r != s.end() && r->is_object()) {
    spec.restart = r->value("policy", "never") == "on-failure" ? RestartPolicy::kOnFailure
                                                               : RestartPolicy::kNever;
    spec.max_retries = r->value("max_retries", 0);
  }
  auto history = base::ParseJson(st.ColumnText(6));
  if (history.ok() && history->is_array()) {
    for (const json& t : *history) {
      auto ts = ParseJobState(t.value("state", ""));
      if (ts) {
        job.history.push_back({*ts, t.value("at_unix_micros", int64_t{0}), t.value("reason", "")});
      }
    }
  }
  if (!st.ColumnIsNull(7)) job.exit_code = static_cast<int>(st.ColumnInt(7));
  if (!st.ColumnIsNull(8)) job.exit_signal = static_cast<int>(st.ColumnInt(8));
  job.reason = st.ColumnText(9);
  job.retries = static_cast<int>(st.ColumnInt(10));
  if (!st.ColumnIsNull(11)) {
    auto a = base::ParseJson(st.ColumnText(11));
    if (a.ok()) job.allocation = AllocationFromJson(*a);
  }
  job.created_unix_micros = st.ColumnInt(12);
  job.slurm_job_id = st.ColumnText(13);
  job.node = st.ColumnText(14);
  job.image_digest = st.ColumnText(15);
  return job;
}

constexpr std::string_view kJobColumns =
    "id, project, user, sequence, state, spec, history, exit_code, exit_signal, reason, retries, "
    "allocation, created_at, slurm_job_id, node, image_digest";

}  // namespace

Status JobService::Save(const Job& job) {
  return db_.Write([&](base::Database& sql) -> Status { return SaveIn(sql, job); });
}

Status JobService::SaveIn(base::Database& sql, const Job& job) {
  {
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("INSERT INTO jobs(id, project, user, sequence, state, spec, history, "
                    "exit_code, exit_signal, reason, retries, allocation, created_at, "
                    "updated_at, slurm_job_id, node, image_digest) VALUES (?1, ?2, ?3, ?4, ?5, "
                    "?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17) "
                    "ON CONFLICT(id) DO UPDATE SET state = ?5, "
                    "history = ?7, exit_code = ?8, exit_signal = ?9, reason = ?10, "
                    "retries = ?11, allocation = ?12, updated_at = ?14, slurm_job_id = ?15, "
                    "node = ?16"));
    st.Bind(1, job.id).Bind(2, job.project).Bind(3, job.user).Bind(4, job.sequence);
    st.Bind(5, JobStateName(job.state)).Bind(6, base::DumpJson(JobSpecToJson(job.spec)));
    st.Bind(7, base::DumpJson(HistoryToJson(job.history)));
    if (job.exit_code) {
      st.Bind(8, int64_t{*job.exit_code});
    } else {
      st.BindNull(8);
    }
    if (job.exit_signal) {
      st.Bind(9, int64_t{*job.exit_signal});
    } else {
      st.BindNull(9);
    }
    st.Bind(10, job.reason).Bind(11, int64_t{job.retries});
    if (job.allocation) {
      st.Bind(12, base::DumpJson(AllocationToJson(*job.allocation)));
    } else {
      st.BindNull(12);
    }
    st.Bind(13, job.created_unix_micros)
        .Bind(14, env_.NowUnixMicros())
        .Bind(15, job.slurm_job_id)
        .Bind(16, job.node)
        .Bind(17, job.image_digest);
    return st.Run();
  }
}

Result<Job> JobService::Load(const std::string& project, const std::string& id) {
  return LoadById(id, &project);
}

Result<Job> JobService::LoadById(const std::string& id, const std::string* project) {
  std::optional<Job> found;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("SELECT " + std::string(kJobColumns) +
                    " FROM jobs WHERE id = ?1 AND (?2 IS NULL OR project = ?2)"));
    st.Bind(1, id);
    if (project != nullptr) {
      st.Bind(2, *project);
    } else {
      st.BindNull(2);
    }
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return Status();
    SOVAI_ASSIGN_OR_RETURN(Job job, JobFromRow(st));
    found = std::move(job);
    return Status();
  }));
  if (!found) return base::NotFoundError("job '" + id + "' does not exist in this project");
  return std::move(*found);
}

Status JobService::Transition(Job& job, JobState state, std::string reason) {
  job.state = state;
  // The history keeps why a job ended and why it was queued again (a restart).
  const bool noted = IsTerminal(state) || state == JobState::kQueued;
  job.history.push_back({state, env_.NowUnixMicros(), noted ? reason : ""});
  if (!reason.empty() || noted) {
    job.reason = std::move(reason);
  }
  return Save(job);
}

Status JobService::Recover(bool take_over) {
  std::vector<Job> live;
  std::vector<std::pair<std::string, std::string>> stop_requests;  // id, reason
  SOVAI_RETURN_IF_ERROR(db_.Read([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                           sql.Prepare("SELECT " + std::string(kJobColumns) +
                                       ", stop_request FROM jobs WHERE state NOT IN ('DONE', "
                                       "'FAILED', 'ERROR', 'INTERRUPTED', 'TIMEOUT') ORDER BY "
                                       "sequence"));
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      SOVAI_ASSIGN_OR_RETURN(Job job, JobFromRow(st));
      if (std::string stop = st.ColumnText(16); !stop.empty()) {
        stop_requests.emplace_back(job.id, std::move(stop));
      }
      live.push_back(std::move(job));
    }
    SOVAI_ASSIGN_OR_RETURN(base::Statement q,
                           sql.Prepare("SELECT project, max_gpus, max_cpus FROM project_quotas"));
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool more, q.Step());
      if (!more) break;
      Quota quota;
      if (!q.ColumnIsNull(1)) quota.max_gpus = static_cast<int>(q.ColumnInt(1));
      if (!q.ColumnIsNull(2)) quota.max_cpus = static_cast<int>(q.ColumnInt(2));
      quotas_[q.ColumnText(0)] = quota;
    }
    return Status();
  }));
  {
    std::lock_guard lock(mu_);
    for (const auto& [project, quota] : quotas_) scheduler_.SetQuota(project, quota);
    for (Job& job : live) {
      if (runners_.contains(job.id) || scheduler_.IsQueued(job.id)) continue;
      // The snapshot may predate a job of this server that started and ended since: only the
      // row as it is now decides (a runner records its end before it leaves runners_).
      auto now = LoadById(job.id, nullptr);
      if (!now.ok() || now->state != job.state) continue;
      auto flavor = options_.flavors->Find(job.spec.flavor);
      Result<ResourceRequest> request = flavor.ok() ? RequestFor(**flavor, job.spec.units)
                                                    : Result<ResourceRequest>(flavor.status());
      if (job.state == JobState::kQueued) {
        if (!request.ok() || !scheduler_.CheckFits(*request).ok()) {
          // The catalog or the machine changed under it: it can never start here now.
          job.allocation.reset();
          SOVAI_RETURN_IF_ERROR(Transition(
              job, JobState::kError,
              "cannot run on this server: " +
                  (request.ok() ? scheduler_.CheckFits(*request) : request.status()).message()));
          continue;
        }
        scheduler_.Enqueue({job.id, job.project, job.spec.priority, *request});
        continue;
      }
      // A running state without a runner here: its sandbox died with the process (or the
      // server) that ran it; finalize it (a Slurm job: follow it) on a runner.
      if (!take_over) continue;
      auto runner = std::make_shared<Runner>();
      runner->id = job.id;
      runner->project = job.project;
      runner->recovered_from = job.state;
      Runner& r = *runner;
      runners_[job.id] = std::move(runner);
      r.thread = std::thread([this, &r] { Run(r); });
    }
    ScheduleLocked();
  }
  for (const auto& [id, reason] : stop_requests) {
    SOVAI_RETURN_IF_ERROR(db_.Write([&](base::Database& sql) -> Status {
      SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                             sql.Prepare("UPDATE jobs SET stop_request = '' WHERE id = ?"));
      st.Bind(1, id);
      return st.Run();
    }));
    auto job = LoadById(id, nullptr);
    if (!job.ok() || IsTerminal(job->state)) continue;
    if (auto stopped = StopHere(std::move(*job), reason); !stopped.ok()) {
      SOVAI_LOG(WARNING) << "job " << id << ": applying a stop request: " << stopped.status();
    }
  }
  return Status();
}

void JobService::Coordinate() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, options_.coordination_interval, [&] { return shutting_down_; });
      if (shutting_down_) return;
    }
    const bool leader = options_.is_leader();
    bool take_over = false;
    {
      std::lock_guard lock(mu_);
      if (leader && !leading_) {
        SOVAI_LOG(INFO) << "this server now schedules and runs the jobs";
        take_over = true;
      } else if (!leader && leading_) {
        SOVAI_LOG(ERROR) << "this server lost the job scheduler's leadership: it starts no more "
                            "jobs (those it runs go on)";
      }
      leading_ = leader;
    }
    if (!leader) continue;
    if (Status st = Recover(take_over); !st.ok()) {
      SOVAI_LOG(WARNING) << "adopting the jobs of other servers: " << st;
    }
  }
}

bool JobService::leading() {
  std::lock_guard lock(mu_);
  return leading_;
}

Result<Job> JobService::Submit(const std::string& project, const std::string& user, JobSpec spec,
                               std::string* bad_field) {
  auto found = options_.flavors->Find(spec.flavor);
  if (!found.ok()) {
    if (bad_field != nullptr) *bad_field = "flavor";
    return found.status();
  }
  const Flavor* flavor = *found;
  SOVAI_ASSIGN_OR_RETURN(ResourceRequest request, RequestFor(*flavor, spec.units));
  if (!executor_->runs_multi_node() && (spec.nodes > 1 || spec.tasks_per_node > 1)) {
    if (bad_field != nullptr) *bad_field = spec.nodes > 1 ? "nodes" : "tasks_per_node";
    return base::FailedPreconditionError(
        "jobs of several nodes or tasks run on the Slurm executor; this server runs jobs "
        "locally (sovai server --executor slurm)");
  }
  if (!executor_->runs_oci_images() &&
      (spec.image.starts_with(kOciImagePrefix) || IsRegistryImage(spec.image))) {
    if (bad_field != nullptr) *bad_field = "image";
    return base::FailedPreconditionError(
        "oci: and registry images are not available on the Slurm executor yet; use a command "
        "on the nodes' system or a built-in image");
  }
  Job job;
  job.id = "job_" + ulids_.Next().ToString();
  job.project = project;
  job.user = user;
  job.spec = std::move(spec);
  job.created_unix_micros = env_.NowUnixMicros();
  // Volumes of buckets that do not exist (or that the project may not read) and image archives
  // that are not there fail now, not minutes later in INITIALIZING. Outside mu_: it asks the
  // object store.
  SOVAI_RETURN_IF_ERROR(CheckSources(project, job.spec, bad_field));
  if (IsRegistryImage(job.spec.image)) {
    SOVAI_ASSIGN_OR_RETURN(exec::RegistryImage image,
                           ResolveImage(project, job.spec.image, bad_field));
    job.image_digest = image.digest;
  }
  // The budget (billing_service.h) reads the database: outside mu_ as well.
  if (options_.admission_check) {
    SOVAI_RETURN_IF_ERROR(options_.admission_check(project, job.spec));
  }
  std::lock_guard lock(mu_);
  if (shutting_down_) return base::UnavailableError("the server is shutting down");
  // A follower cannot judge the leader's machine: the leader refuses what never fits there.
  if (Status fits = scheduler_.CheckFits(request); !fits.ok() && leading_) {
    return base::FailedPreconditionError("flavor " + flavor->id + " x" +
                                         std::to_string(job.spec.units) +
                                         " cannot run here: " + fits.message());
  }
  job.history.push_back({JobState::kQueued, job.created_unix_micros});
  // The submission order is the database's, shared by every server of it.
  SOVAI_RETURN_IF_ERROR(db_.Write([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(base::Statement max, sql.Prepare("SELECT MAX(sequence) FROM jobs"));
    SOVAI_ASSIGN_OR_RETURN(bool row, max.Step());
    job.sequence = row && !max.ColumnIsNull(0) ? max.ColumnInt(0) + 1 : 0;
    return SaveIn(sql, job);
  }));
  if (!leading_) return job;  // the leader adopts it
  scheduler_.Enqueue({job.id, project, job.spec.priority, request});
  ScheduleLocked();
  // Report the state after scheduling: a job that started at once is INITIALIZING already.
  return Load(project, job.id);
}

Status JobService::CheckSources(const std::string& project, const JobSpec& spec,
                                std::string* bad_field) {
  // Every bucket the spec reads, with the field that names it.
  struct Source {
    std::string field;
    exec::VolumeSpec volume;
  };
  std::vector<Source> sources;
  for (size_t i = 0; i < spec.volumes.size(); ++i) {
    SOVAI_ASSIGN_OR_RETURN(exec::VolumeSpec volume, exec::ParseVolumeSpec(spec.volumes[i]));
    sources.push_back({"volumes[" + std::to_string(i) + "]", std::move(volume)});
  }
  if (spec.image.starts_with(kOciImagePrefix)) {
    SOVAI_ASSIGN_OR_RETURN(exec::VolumeSpec source, exec::ParseOciImageSource(spec.image));
    sources.push_back({"image", std::move(source)});
  }
  // One client per region; s3_access refuses a region the project may not use (data residency)
  // before anything is asked of that region.
  std::map<std::string, std::unique_ptr<exec::S3Client>> clients;
  for (const Source& source : sources) {
    const bool own = base::EqualsIgnoreCase(source.volume.region, options_.region);
    const std::string region = own ? "" : base::AsciiToUpper(source.volume.region);
    std::unique_ptr<exec::S3Client>& s3 = clients[region];
    if (!s3) {
      auto access = options_.s3_access(project, region);
      if (!access.ok()) {
        if (bad_field != nullptr) *bad_field = source.field;
        const std::string kind = source.field == "image" ? "image" : "volume";
        return access.status().WithContext(kind + " '" + source.volume.SourceName() + "'");
      }
      s3 = std::make_unique<exec::S3Client>(ClientOptions(*access));
    }
    Status head = s3->HeadBucket(source.volume.bucket);
    if (head.code() == base::StatusCode::kNotFound ||
        head.code() == base::StatusCode::kPermissionDenied) {
      // Another project's bucket looks exactly like a missing one.
      if (bad_field != nullptr) *bad_field = source.field;
      if (!own) {
        return base::NotFoundError(source.field + ": bucket '" + source.volume.bucket +
                                   "' does not exist in region " + region +
                                   ", or the key this server uses there (--regions, or the "
                                   "project's datastore) may not read it");
      }
      return base::NotFoundError(source.field + ": bucket '" + source.volume.bucket +
                                 "' does not exist in this project");
    }
    SOVAI_RETURN_IF_ERROR(head);
    if (source.field == "image") {
      auto archive = exec::FindImageArchive(*s3, source.volume);
      if (!archive.ok()) {
        if (bad_field != nullptr) *bad_field = source.field;
        return archive.status().WithContext("image");
      }
    }
  }
  return Status();
}

Result<exec::RegistryImage> JobService::ResolveImage(const std::string& project,
                                                     const std::string& reference,
                                                     std::string* bad_field) {
  if (!options_.resolve_image) {
    if (bad_field != nullptr) *bad_field = "image";
    return base::FailedPreconditionError(
        "image '" + reference +
        "': this server runs no registry (sovai server --listen-registry); use a built-in "
        "image or oci:bucket@REGION/path/to/image.tar");
  }
  auto image = options_.resolve_image(project, reference);
  if (!image.ok()) {
    if (bad_field != nullptr) *bad_field = "image";
    return image.status().WithContext("image '" + reference + "'");
  }
  return image;
}

void JobService::ScheduleLocked() {
  ReapLocked();
  if (shutting_down_) return;
  for (Placement& p : scheduler_.Schedule()) {
    auto runner = std::make_shared<Runner>();
    runner->id = p.id;
    runner->allocation = std::move(p.allocation);
    Runner& r = *runner;
    runners_[p.id] = std::move(runner);
    r.thread = std::thread([this, &r] { Run(r); });
  }
}

void JobService::ReapLocked() {
  // A runner reaps others from its own finish(); it cannot join itself, so it stays for later.
  std::vector<std::shared_ptr<Runner>> keep;
  for (auto& r : finished_) {
    if (r->thread.get_id() == std::this_thread::get_id()) {
      keep.push_back(std::move(r));
    } else if (r->thread.joinable()) {
      r->thread.join();
    }
  }
  finished_ = std::move(keep);
}

Result<Job> JobService::Get(const std::string& project, const std::string& id) {
  SOVAI_ASSIGN_OR_RETURN(Job job, Load(project, id));
  if (job.state == JobState::kQueued) {
    std::lock_guard lock(mu_);
    for (const QueueEntry& e : scheduler_.Queue()) {
      if (e.id == id) {
        job.reason = "position " + std::to_string(e.position) + " in the queue: " + e.reason;
      }
    }
  }
  return job;
}

Result<JobPage> JobService::List(const std::string& project,
                                 const std::map<std::string, std::string>& labels, int limit,
                                 const std::string& after) {
  limit = std::clamp(limit, 1, kMaxListLimit);
  int64_t before_sequence = INT64_MAX;
  if (!after.empty()) {
    auto n = base::ParseInt64(after);
    if (!n.ok()) return base::InvalidArgumentError("cursor '" + after + "' is not valid");
    before_sequence = *n;
  }
  JobPage page;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                           sql.Prepare("SELECT " + std::string(kJobColumns) +
                                       " FROM jobs WHERE project = ? AND sequence < ? ORDER BY "
                                       "sequence DESC"));
    st.Bind(1, project).Bind(2, before_sequence);
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      SOVAI_ASSIGN_OR_RETURN(Job job, JobFromRow(st));
      bool match = std::all_of(labels.begin(), labels.end(), [&](const auto& kv) {
        auto it = job.spec.labels.find(kv.first);
        return it != job.spec.labels.end() && it->second == kv.second;
      });
      if (!match) continue;
      if (static_cast<int>(page.jobs.size()) == limit) {
        page.next_cursor = std::to_string(page.jobs.back().sequence);
        break;
      }
      page.jobs.push_back(std::move(job));
    }
    return Status();
  }));
  return page;
}

Result<Job> JobService::Stop(const std::string& project, const std::string& id,
                             const std::string& reason) {
  SOVAI_ASSIGN_OR_RETURN(Job job, Load(project, id));
  if (!leading()) {
    // The leader runs it: the request goes through the database.
    if (IsTerminal(job.state)) {
      return base::FailedPreconditionError("job " + id + " has already ended (" +
                                           std::string(JobStateName(job.state)) + ")");
    }
    SOVAI_RETURN_IF_ERROR(db_.Write([&](base::Database& sql) -> Status {
      SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                             sql.Prepare("UPDATE jobs SET stop_request = ? WHERE id = ?"));
      st.Bind(1, reason.empty() ? std::string("stopped by a user") : reason).Bind(2, id);
      return st.Run();
    }));
    return job;
  }
  return StopHere(std::move(job), reason);
}

Result<Job> JobService::StopHere(Job job, const std::string& reason) {
  const std::string id = job.id;
  std::unique_lock lock(mu_);
  if (scheduler_.Dequeue(id)) {
    lock.unlock();
    SOVAI_RETURN_IF_ERROR(Transition(job, JobState::kInterrupted,
                                     reason.empty() ? "stopped by a user while QUEUED" : reason));
    return job;
  }
  auto it = runners_.find(id);
  if (it == runners_.end()) {
    return base::FailedPreconditionError("job " + id + " has already ended (" +
                                         std::string(JobStateName(job.state)) + ")");
  }
  std::shared_ptr<Runner> r = it->second;
  lock.unlock();
  r->RequestStop(reason.empty() ? "stopped by a user" : reason, /*shutting_down=*/false);
  return job;
}

Status JobService::Delete(const std::string& project, const std::string& id) {
  SOVAI_ASSIGN_OR_RETURN(Job job, Load(project, id));
  if (!IsTerminal(job.state)) {
    return base::FailedPreconditionError("job " + id + " is " +
                                         std::string(JobStateName(job.state)) +
                                         "; stop it before deleting it");
  }
  SOVAI_RETURN_IF_ERROR(db_.Write([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                           sql.Prepare("DELETE FROM jobs WHERE id = ? AND project = ?"));
    st.Bind(1, id).Bind(2, project);
    return st.Run();
  }));
  std::error_code ec;
  std::filesystem::remove_all(JobDir(id), ec);
  if (ec) SOVAI_LOG(WARNING) << "removing the files of job " << id << ": " << ec.message();
  return Status();
}

Status JobService::PushData(const std::string& project, const std::string& id) {
  SOVAI_ASSIGN_OR_RETURN(Job job, Load(project, id));
  if (job.state != JobState::kRunning) {
    return base::FailedPreconditionError("job " + id + " is " +
                                         std::string(JobStateName(job.state)) +
                                         "; push-data needs a RUNNING job");
  }
  bool writable = false;
  for (const std::string& v : job.spec.volumes) {
    auto spec = exec::ParseVolumeSpec(v);
    if (spec.ok() && spec->permission != exec::VolumePermission::kReadOnly) writable = true;
  }
  if (!writable) {
    return base::FailedPreconditionError("job " + id + " has no rw or rwd volume to push");
  }
  std::shared_ptr<exec::Workload> workload = LiveWorkload(id);
  if (!workload) return base::FailedPreconditionError("job " + id + " has ended");
  if (Status pushed = workload->SyncOutputs(); !pushed.ok()) {
    return base::UnavailableError("push-data failed: " + pushed.message());
  }
  return Status();
}

Result<exec::LogChunk> JobService::ReadLog(const std::string& project, const std::string& id,
                                           uint64_t offset, size_t max_bytes) {
  SOVAI_ASSIGN_OR_RETURN(Job job, Load(project, id));
  if (!env_.FileExists(exec::WorkloadLogPath(JobDir(id))) && options_.remote_log && !leading()) {
    return options_.remote_log(id, offset, max_bytes);
  }
  return exec::ReadWorkloadLog(env_, JobDir(id), offset, max_bytes);
}

Result<exec::LogChunk> JobService::ReadLogForPeer(const std::string& id, uint64_t offset,
                                                  size_t max_bytes) {
  SOVAI_ASSIGN_OR_RETURN(Job job, LoadById(id, nullptr));
  return exec::ReadWorkloadLog(env_, JobDir(id), offset, max_bytes);
}

std::shared_ptr<exec::Workload> JobService::LiveWorkload(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = runners_.find(id);
  if (it == runners_.end()) return nullptr;
  std::lock_guard rl(it->second->mu);
  return it->second->workload;
}

std::optional<exec::LiveSyncStatus> JobService::SyncProgress(const std::string& id) {
  std::shared_ptr<exec::Workload> workload = LiveWorkload(id);
  if (!workload) return std::nullopt;
  exec::LiveSyncStatus status = workload->SyncProgress();
  if (!status.active) return std::nullopt;
  return status;
}

LiveSyncTotals JobService::LiveSyncSums() {
  std::lock_guard lock(mu_);
  LiveSyncTotals totals = ended_syncs_;
  for (const auto& [id, runner] : runners_) {
    std::lock_guard rl(runner->mu);
    if (runner->workload) totals.Add(runner->workload->SyncProgress(), /*running=*/true);
  }
  return totals;
}

Result<std::vector<pid_t>> JobService::ProcessIds(const std::string& id) {
  std::shared_ptr<exec::Workload> workload = LiveWorkload(id);
  if (!workload) return std::vector<pid_t>();
  return workload->ProcessIds();
}

base::Status JobService::CheckFits(const ResourceRequest& request) {
  std::lock_guard lock(mu_);
  return scheduler_.CheckFits(request);
}

Status JobService::SetQuota(const std::string& project, Quota quota) {
  SOVAI_RETURN_IF_ERROR(db_.Write([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("INSERT INTO project_quotas(project, max_gpus, max_cpus) VALUES (?, ?, ?) "
                    "ON CONFLICT(project) DO UPDATE SET max_gpus = excluded.max_gpus, "
                    "max_cpus = excluded.max_cpus"));
    st.Bind(1, project);
    if (quota.max_gpus) {
      st.Bind(2, int64_t{*quota.max_gpus});
    } else {
      st.BindNull(2);
    }
    if (quota.max_cpus) {
      st.Bind(3, int64_t{*quota.max_cpus});
    } else {
      st.BindNull(3);
    }
    return st.Run();
  }));
  std::lock_guard lock(mu_);
  quotas_[project] = quota;
  scheduler_.SetQuota(project, quota);
  ScheduleLocked();
  return Status();
}

Quota JobService::GetQuota(const std::string& project) {
  std::lock_guard lock(mu_);
  auto it = quotas_.find(project);
  return it == quotas_.end() ? Quota{} : it->second;
}

void JobService::Shutdown() {
  std::vector<std::shared_ptr<Runner>> live;
  {
    std::lock_guard lock(mu_);
    shutting_down_ = true;
    cv_.notify_all();
  }
  if (coordinator_.joinable()) coordinator_.join();
  {
    std::lock_guard lock(mu_);
    if (runners_.empty()) {
      ReapLocked();
      return;
    }
    for (auto& [id, r] : runners_) live.push_back(r);
  }
  // A local workload stops; a Slurm job goes on, and the next server to lead follows it.
  for (auto& r : live) r->RequestStop("the server is shutting down", /*shutting_down=*/true);
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return runners_.empty(); });
  ReapLocked();
}

Status JobService::WriteCards(const Job& job, const std::vector<exec::StagedVolume>& volumes) {
  ModelCardInputs in;
  in.job_id = job.id;
  in.project = job.project;
  in.user = job.user;
  in.region = options_.region;
  in.jurisdiction = options_.jurisdiction;
  in.image = job.spec.image;
  in.image_digest = job.image_digest;
  in.command = job.spec.command;
  in.flavor = job.spec.flavor;
  in.units = job.spec.units;
  if (auto flavor = options_.flavors->Find(job.spec.flavor); flavor.ok()) {
    in.gpu_model = (*flavor)->gpu_model;
    in.gpus = (*flavor)->gpus_per_unit * job.spec.units;
    in.vcpus = (*flavor)->vcpus_per_unit * job.spec.units;
  }
  in.finished_unix_micros = env_.NowUnixMicros();
  for (auto it = job.history.rbegin(); it != job.history.rend(); ++it) {
    if (it->state == JobState::kRunning) {
      in.running_seconds = (in.finished_unix_micros - it->at_unix_micros) / 1'000'000;
      break;
    }
  }
  for (const exec::StagedVolume& staged : volumes) {
    const exec::VolumeSpec& volume = staged.spec;
    ModelCardVolume v;
    v.source = volume.SourceName();
    const bool own = base::EqualsIgnoreCase(volume.region, options_.region);
    v.region = own ? options_.region : base::AsciiToUpper(volume.region);
    auto jurisdiction = options_.other_jurisdictions.find(v.region);
    v.jurisdiction =
        own ? options_.jurisdiction
            : (jurisdiction == options_.other_jurisdictions.end() ? "" : jurisdiction->second);
    v.mount_path = volume.mount_path;
    v.writable = volume.permission != exec::VolumePermission::kReadOnly;
    v.local_dir = staged.local_dir;
    if (auto text = env_.ReadFile(staged.manifest_path); text.ok()) {
      if (auto manifest = exec::SyncManifest::FromJson(*text); manifest.ok()) {
        v.manifest = std::move(*manifest);
      }
    }
    in.volumes.push_back(std::move(v));
  }
  SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> written, WriteModelCards(env_, in));
  // The workload's uid owns its outputs; the cards are written by the platform.
  if (::geteuid() == 0) {
    for (const std::string& path : written) {
      if (::chown(path.c_str(), options_.workload_uid, options_.workload_gid) != 0) {
        return base::ErrnoToStatus(errno, "chown " + path);
      }
    }
  }
  return Status();
}

// The workload's phases as the job's transitions, each committed before the phase's work.
// Called on the workload's thread; the runner's thread touches `job_` only after Wait.
class JobService::Events final : public exec::WorkloadObserver {
 public:
  Events(JobService& service, Job& job) : service_(service), job_(job) {}
  void OnPhase(exec::WorkloadPhase phase) override {
    if (Status st = service_.Transition(job_, StateOf(phase)); !st.ok()) {
      SOVAI_LOG(ERROR) << "job " << job_.id << ": " << st;
    }
  }
  void OnExit(const exec::WorkloadOutcome& outcome) override {
    job_.exit_code = outcome.exit_code;
    job_.exit_signal = outcome.exit_signal;
  }
  void BeforeSyncUp(const std::vector<exec::StagedVolume>& volumes,
                    const std::function<void(std::string_view)>& say) override {
    if (Status cards = service_.WriteCards(job_, volumes); !cards.ok()) {
      say("model card not written: " + cards.message());
    }
  }
  void OnBackendId(const std::string& id) override {
    job_.slurm_job_id = id;
    (void)service_.Save(job_);
  }
  void OnWaiting(const std::string& reason) override {
    if (job_.state != JobState::kQueued || job_.reason == reason) return;
    job_.reason = reason;
    (void)service_.Save(job_);
  }
  void OnNode(const std::string& host) override {
    if (!job_.node.empty()) return;
    job_.node = host;
    (void)service_.Save(job_);
  }

 private:
  JobService& service_;
  Job& job_;
};

exec::WorkloadSpec JobService::WorkloadSpecFor(const Job& job, const Allocation& allocation) const {
  const bool local = options_.slurm.client == nullptr;
  exec::WorkloadSpec w;
  w.id = job.id;
  w.dir = JobDir(job.id);
  w.image = job.spec.image;
  if (auto engine_command = EngineSubcommandOf(job.spec.image)) {
    w.engine_subcommand = std::string(*engine_command);
  }
  w.command = CommandForTry(job.spec, job.retries);
  w.env.assign(job.spec.env.begin(), job.spec.env.end());
  for (const std::string& v : job.spec.volumes) {
    auto spec = exec::ParseVolumeSpec(v);
    SOVAI_CHECK(spec.ok()) << "stored volume specs were validated: " << v;
    exec::WorkloadVolume volume{*spec, "", std::nullopt};
    if (spec->cache) {
      // Objects of another region are cached apart: a bucket name means another bucket there.
      const bool own = base::EqualsIgnoreCase(spec->region, options_.region);
      volume.cache_dir =
          base::JoinPath(base::JoinPath(options_.data_dir, "volume-cache"),
                         own ? job.project : job.project + "@" + base::AsciiToUpper(spec->region));
    }
    w.volumes.push_back(std::move(volume));
  }
  w.network_none = job.spec.network == NetworkMode::kNone;
  exec::WorkloadResources& r = w.resources;
  r.flavor = job.spec.flavor;
  if (auto flavor = options_.flavors->Find(job.spec.flavor); flavor.ok()) {
    r.gpus = (*flavor)->gpus_per_unit * job.spec.units;
    r.vcpus = (*flavor)->vcpus_per_unit * job.spec.units;
    r.memory_bytes = (*flavor)->memory_bytes_per_unit * static_cast<uint64_t>(job.spec.units);
  }
  r.nodes = job.spec.nodes;
  r.tasks_per_node = job.spec.tasks_per_node;
  if (local) {
    for (int cpu : allocation.cpus) r.cpu_ids.push_back(options_.cpu_ids[static_cast<size_t>(cpu)]);
    r.gpu_ids = allocation.gpus;
    r.memory_bytes = allocation.memory_bytes;
    w.start_note = "job " + job.id + " admitted: flavor " + job.spec.flavor + " x" +
                   std::to_string(job.spec.units) + ", " + std::to_string(allocation.cpus.size()) +
                   " CPUs, " + std::to_string(allocation.gpus.size()) + " GPUs";
  }
  if (std::string note = TryNote(job.spec, job.retries, job.reason); !note.empty()) {
    w.start_note += (w.start_note.empty() ? "" : "; ") + note;
  }
  w.uid = options_.workload_uid;
  w.gid = options_.workload_gid;
  w.timeout_s = job.spec.timeout_s > 0 ? job.spec.timeout_s : options_.default_timeout_s;
  w.home_region = options_.region;
  w.s3_access =
      [this, project = job.project](const std::string& region) -> Result<exec::S3ClientOptions> {
    SOVAI_ASSIGN_OR_RETURN(S3Access access, options_.s3_access(project, region));
    return ClientOptions(access);
  };
  w.image_cache_dir = base::JoinPath(base::JoinPath(options_.data_dir, "images"), job.project);
  w.project_bucket = ProjectBucket(job.project);
  w.log_archive_key = LogArchiveKey(job.id);
  return w;
}

Result<exec::RegistryImage> JobService::PinnedImage(const Job& job) {
  SOVAI_ASSIGN_OR_RETURN(registry::ImageReference reference,
                         registry::ParseImageReference(job.spec.image));
  std::string pinned = reference.host.empty() ? "" : reference.host + "/";
  pinned += reference.repository + "@" + job.image_digest;
  SOVAI_ASSIGN_OR_RETURN(exec::RegistryImage image, ResolveImage(job.project, pinned, nullptr));
  // The reference as the job wrote it, in the messages of the executor.
  return image;
}

void JobService::Run(Runner& runner) {
  // Placed runners know only the job's id; the project comes with the row.
  Result<Job> loaded = LoadById(runner.id, nullptr);
  if (!loaded.ok()) {
    SOVAI_LOG(ERROR) << "job runner " << runner.id << ": " << loaded.status();
    Finish(runner);
    return;
  }
  Job job = std::move(*loaded);
  const bool local = options_.slurm.client == nullptr;
  if (!local && !options_.flavors->Find(job.spec.flavor).ok()) {
    job.allocation.reset();
    (void)Transition(job, JobState::kError,
                     options_.flavors->Find(job.spec.flavor).status().message());
    Finish(runner);
    return;
  }
  Events events(*this, job);
  exec::WorkloadSpec spec = WorkloadSpecFor(job, runner.allocation);
  if (!runner.recovered_from && local && IsRegistryImage(job.spec.image)) {
    // The image the submission resolved, by its digest: a tag moved since does not change it.
    auto image = PinnedImage(job);
    if (!image.ok()) {
      job.allocation.reset();
      if (Status st = Transition(job, JobState::kError, image.status().message()); !st.ok()) {
        SOVAI_LOG(ERROR) << "job " << job.id << ": " << st;
      }
      Finish(runner);
      return;
    }
    spec.registry_image = std::move(*image);
  }
  Result<std::unique_ptr<exec::Workload>> started = base::UnknownError("not started");
  if (runner.recovered_from || !local) {
    // A local job mid-run lost its sandbox with the old process; a Slurm job is followed.
    const exec::WorkloadPhase was = PhaseOf(runner.recovered_from.value_or(job.state));
    started = executor_->Resume(std::move(spec), {was, job.slurm_job_id}, events);
  } else {
    job.allocation = runner.allocation;  // saved with INITIALIZING
    started = executor_->Start(std::move(spec), events);
  }
  if (!started.ok()) {
    job.allocation.reset();
    if (Status st = Transition(job, JobState::kError, started.status().message()); !st.ok()) {
      SOVAI_LOG(ERROR) << "job " << job.id << ": " << st;
    }
    Finish(runner);
    return;
  }
  std::shared_ptr<exec::Workload> workload = std::move(*started);
  {
    std::lock_guard rl(runner.mu);
    runner.workload = workload;
    if (runner.stop_reason) runner.ApplyStopLocked();
  }
  const exec::WorkloadOutcome outcome = workload->Wait();
  {
    // Its uploads stay in the totals: the counters of /metrics only grow.
    std::lock_guard lock(mu_);
    std::lock_guard rl(runner.mu);
    ended_syncs_.Add(workload->SyncProgress(), /*running=*/false);
    runner.workload.reset();
  }
  workload.reset();
  if (outcome.detached) {
    Finish(runner);
    return;
  }
  TryEnd end{outcome, std::nullopt, false};
  if (runner.recovered_from && local) end.lost_with_server_in = PhaseOf(*runner.recovered_from);
  {
    std::lock_guard rl(runner.mu);
    end.stop_requested = runner.stop_reason.has_value();
  }
  Conclude(job, end);
  Finish(runner);
}

void JobService::Finish(Runner& runner) {
  std::lock_guard lock(mu_);
  scheduler_.Release(runner.id);
  auto it = runners_.find(runner.id);
  if (it != runners_.end()) {
    finished_.push_back(std::move(it->second));
    runners_.erase(it);
  }
  ScheduleLocked();
  cv_.notify_all();
}

}  // namespace sovai::control
