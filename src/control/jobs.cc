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
#include "control/model_card.h"
#include "exec/oci_image.h"
#include "exec/s3_client.h"
#include "exec/sandbox.h"
#include "exec/slurm.h"
#include "exec/slurm_plan.h"
#include "exec/volume_spec.h"
#include "exec/volume_sync.h"

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

// The archive of an oci: image (`source` parsed from the image without "oci:"), found by listing
// its key (exec::S3Client has no HEAD of an object). NotFound naming the archive and how to put
// one there.
Result<exec::S3Object> FindImageArchive(exec::S3Client& s3, const exec::VolumeSpec& source) {
  const std::string& key = source.prefix;
  SOVAI_ASSIGN_OR_RETURN(std::vector<exec::S3Object> listed, s3.ListObjects(source.bucket, key));
  for (exec::S3Object& object : listed) {
    if (object.key == key) return std::move(object);
  }
  return base::NotFoundError("the archive s3://" + source.bucket + "/" + key +
                             " does not exist (upload it with 'sovai bucket cp IMAGE.tar s3://" +
                             source.bucket + "/" + key + "')");
}

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
    out.push_back({{"state", JobStateName(t.state)}, {"at_unix_micros", t.at_unix_micros}});
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
  return j;
}

// A job being run, from admission to its terminal state.
struct JobService::Runner {
  std::string id;
  std::string project;
  Allocation allocation;
  // Set when the job was mid-run in a previous process: only finalize it.
  std::optional<JobState> recovered_from;
  std::thread thread;

  std::mutex mu;  // guards the requests below
  std::condition_variable cv;
  std::optional<JobState> stop_as;  // kInterrupted (user, shutdown); the reason in stop_reason
  std::string stop_reason;
  bool push_requested = false;
  std::string push_result;                    // "" while pending
  bool done = false;                          // Run returned
  exec::RunningWorkload* workload = nullptr;  // while RUNNING; owned by Run
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
  // retries, allocation, created_at, slurm_job_id, node.
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
      if (ts) job.history.push_back({*ts, t.value("at_unix_micros", int64_t{0})});
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
  return job;
}

constexpr std::string_view kJobColumns =
    "id, project, user, sequence, state, spec, history, exit_code, exit_signal, reason, retries, "
    "allocation, created_at, slurm_job_id, node";

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
                    "updated_at, slurm_job_id, node) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                    "?10, ?11, ?12, ?13, ?14, ?15, ?16) ON CONFLICT(id) DO UPDATE SET state = ?5, "
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
        .Bind(16, job.node);
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
  job.history.push_back({state, env_.NowUnixMicros()});
  if (!reason.empty() || IsTerminal(state) || state == JobState::kQueued) {
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
      if (std::string stop = st.ColumnText(15); !stop.empty()) {
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
  if (options_.slurm.client == nullptr && (spec.nodes > 1 || spec.tasks_per_node > 1)) {
    if (bad_field != nullptr) *bad_field = spec.nodes > 1 ? "nodes" : "tasks_per_node";
    return base::FailedPreconditionError(
        "jobs of several nodes or tasks run on the Slurm executor; this server runs jobs "
        "locally (sovai server --executor slurm)");
  }
  if (options_.slurm.client != nullptr && spec.image.starts_with(kOciImagePrefix)) {
    if (bad_field != nullptr) *bad_field = "image";
    return base::FailedPreconditionError(
        "oci: images are not available on the Slurm executor yet; use a command on the nodes' "
        "system or a built-in image");
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
    SOVAI_ASSIGN_OR_RETURN(
        exec::VolumeSpec source,
        exec::ParseVolumeSpec(spec.image.substr(kOciImagePrefix.size()) + ":/image"));
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
      auto archive = FindImageArchive(*s3, source.volume);
      if (!archive.ok()) {
        if (bad_field != nullptr) *bad_field = source.field;
        return archive.status().WithContext("image");
      }
    }
  }
  return Status();
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
  {
    std::lock_guard rl(r->mu);
    if (!r->stop_as) {
      r->stop_as = JobState::kInterrupted;
      r->stop_reason = reason.empty() ? "stopped by a user" : reason;
    }
  }
  r->cv.notify_all();
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
  std::shared_ptr<Runner> r;
  {
    std::lock_guard lock(mu_);
    auto it = runners_.find(id);
    if (it == runners_.end()) return base::FailedPreconditionError("job " + id + " has ended");
    r = it->second;
  }
  std::unique_lock rl(r->mu);
  r->push_requested = true;
  r->push_result.clear();
  r->cv.notify_all();
  // The runner syncs between two polls of the workload and reports back.
  r->cv.wait(rl, [&] { return !r->push_requested || r->done; });
  if (r->push_result.empty() || r->push_result == "ok") return Status();
  return base::UnavailableError("push-data failed: " + r->push_result);
}

Result<exec::LogChunk> JobService::ReadLog(const std::string& project, const std::string& id,
                                           uint64_t offset, size_t max_bytes) {
  SOVAI_ASSIGN_OR_RETURN(Job job, Load(project, id));
  const std::string path = base::JoinPath(JobDir(id), "log");
  if (!env_.FileExists(path)) {
    if (options_.remote_log && !leading()) return options_.remote_log(id, offset, max_bytes);
    if (offset != 0) return base::InvalidArgumentError("offset is past the end of the log");
    return exec::LogChunk{};
  }
  return exec::ReadLog(env_, path, offset, max_bytes);
}

Result<exec::LogChunk> JobService::ReadLogForPeer(const std::string& id, uint64_t offset,
                                                  size_t max_bytes) {
  SOVAI_ASSIGN_OR_RETURN(Job job, LoadById(id, nullptr));
  const std::string path = base::JoinPath(JobDir(id), "log");
  if (!env_.FileExists(path)) {
    if (offset != 0) return base::InvalidArgumentError("offset is past the end of the log");
    return exec::LogChunk{};
  }
  return exec::ReadLog(env_, path, offset, max_bytes);
}

Result<std::vector<pid_t>> JobService::ProcessIds(const std::string& id) {
  std::shared_ptr<Runner> r;
  {
    std::lock_guard lock(mu_);
    auto it = runners_.find(id);
    if (it == runners_.end()) return std::vector<pid_t>();
    r = it->second;
  }
  std::lock_guard rl(r->mu);
  if (r->workload == nullptr) return std::vector<pid_t>();
  return r->workload->ProcessIds();
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
  for (auto& r : live) {
    std::lock_guard rl(r->mu);
    if (!r->stop_as) {
      r->stop_as = JobState::kInterrupted;
      r->stop_reason = "the server is shutting down";
    }
    r->cv.notify_all();
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return runners_.empty(); });
  ReapLocked();
}

Status JobService::WriteCards(const Job& job, const std::vector<exec::VolumeSpec>& volumes,
                              const std::string& volumes_dir) {
  ModelCardInputs in;
  in.job_id = job.id;
  in.project = job.project;
  in.user = job.user;
  in.region = options_.region;
  in.jurisdiction = options_.jurisdiction;
  in.image = job.spec.image;
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
  for (size_t i = 0; i < volumes.size(); ++i) {
    ModelCardVolume v;
    v.source = volumes[i].SourceName();
    const bool own = base::EqualsIgnoreCase(volumes[i].region, options_.region);
    v.region = own ? options_.region : base::AsciiToUpper(volumes[i].region);
    auto jurisdiction = options_.other_jurisdictions.find(v.region);
    v.jurisdiction =
        own ? options_.jurisdiction
            : (jurisdiction == options_.other_jurisdictions.end() ? "" : jurisdiction->second);
    v.mount_path = volumes[i].mount_path;
    v.writable = volumes[i].permission != exec::VolumePermission::kReadOnly;
    v.local_dir = base::JoinPath(volumes_dir, std::to_string(i));
    auto text =
        env_.ReadFile(base::JoinPath(JobDir(job.id), "manifest-" + std::to_string(i) + ".json"));
    if (text.ok()) {
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

namespace {

// The outcome of the RUNNING phase.
}  // namespace

struct JobService::Outcome {
  // The server shuts down while a Slurm job runs: the job goes on, unchanged, and the next
  // server to lead follows it.
  bool detached = false;
  JobState state = JobState::kDone;
  std::optional<int> exit_code;
  std::optional<int> exit_signal;
  std::string reason;
};

void JobService::Run(Runner& runner) {
  // Placed runners know only the job's id; the project comes with the row.
  Result<Job> loaded = LoadById(runner.id, nullptr);

  auto finish = [&] {
    std::lock_guard lock(mu_);
    scheduler_.Release(runner.id);
    {
      std::lock_guard rl(runner.mu);
      runner.done = true;
    }
    runner.cv.notify_all();
    auto it = runners_.find(runner.id);
    if (it != runners_.end()) {
      finished_.push_back(std::move(it->second));
      runners_.erase(it);
    }
    ScheduleLocked();
    cv_.notify_all();
  };
  if (!loaded.ok()) {
    SOVAI_LOG(ERROR) << "job runner " << runner.id << ": " << loaded.status();
    finish();
    return;
  }
  Job job = std::move(*loaded);
  const std::string dir = JobDir(job.id);
  const std::string volumes_dir = base::JoinPath(dir, "volumes");
  const bool root = ::geteuid() == 0;

  std::unique_ptr<exec::LogWriter> log;
  auto say = [&](std::string_view line) {
    if (log) (void)log->Write(exec::LogSource::kSovai, std::string(line) + "\n");
  };
  auto fail = [&](JobState state, std::string reason) {
    say("job " + std::string(JobStateName(state)) + ": " + reason);
    job.allocation.reset();
    if (Status st = Transition(job, state, std::move(reason)); !st.ok()) {
      SOVAI_LOG(ERROR) << "job " << job.id << ": " << st;
    }
  };

  // Directories: <dir> (0711), <dir>/log (0600), <dir>/volumes/<i>, <dir>/sandbox.
  if (Status st = exec::MakeDir(dir, 0711); !st.ok()) {
    fail(JobState::kError, st.message());
    finish();
    return;
  }
  (void)exec::MakeDir(volumes_dir, 0711);
  if (auto opened = exec::LogWriter::Open(env_, base::JoinPath(dir, "log")); opened.ok()) {
    log = std::move(*opened);
  } else {
    fail(JobState::kError, "cannot open the job log: " + opened.status().message());
    finish();
    return;
  }

  std::vector<exec::VolumeSpec> volumes;
  for (const std::string& v : job.spec.volumes) {
    auto spec = exec::ParseVolumeSpec(v);
    SOVAI_CHECK(spec.ok()) << "stored volume specs were validated: " << v;
    volumes.push_back(*spec);
  }
  // One S3 client per region the job reaches, by uppercase name ("" = this server's region).
  // s3_access applies the data-residency rule again: a region the project stopped allowing
  // after the job was admitted is refused here.
  std::map<std::string, std::unique_ptr<exec::S3Client>> clients;
  auto region_key = [&](const std::string& region) {
    return base::EqualsIgnoreCase(region, options_.region) ? std::string()
                                                           : base::AsciiToUpper(region);
  };
  auto client = [&](const std::string& region) -> Result<exec::S3Client*> {
    const std::string key = region_key(region);
    std::unique_ptr<exec::S3Client>& s3 = clients[key];
    if (!s3) {
      SOVAI_ASSIGN_OR_RETURN(S3Access access, options_.s3_access(job.project, key));
      auto made = std::make_unique<exec::S3Client>(ClientOptions(access));
      SOVAI_RETURN_IF_ERROR(made->status());
      s3 = std::move(made);
    }
    return s3.get();
  };
  auto manifest_path = [&](size_t i) {
    return base::JoinPath(dir, "manifest-" + std::to_string(i) + ".json");
  };
  auto sync_options = [&](const exec::VolumeSpec& v) {
    exec::SyncOptions o;
    o.progress = [&](std::string_view line) { say(line); };
    o.env = &env_;
    if (v.cache) {
      // Objects of another region are cached apart: a bucket name means another bucket there.
      const std::string region = region_key(v.region);
      o.cache_dir = base::JoinPath(base::JoinPath(options_.data_dir, "volume-cache"),
                                   region.empty() ? job.project : job.project + "@" + region);
    }
    return o;
  };
  // Syncs the rw/rwd volumes up; the first error, or OK.
  auto sync_up = [&]() -> Status {
    for (size_t i = 0; i < volumes.size(); ++i) {
      const exec::VolumeSpec& v = volumes[i];
      if (v.permission == exec::VolumePermission::kReadOnly) continue;
      SOVAI_ASSIGN_OR_RETURN(exec::S3Client * s3, client(v.region));
      auto text = env_.ReadFile(manifest_path(i));
      if (!text.ok())
        return Status(text.status().code(), "volume " + v.SourceName() + " was never synced down");
      SOVAI_ASSIGN_OR_RETURN(exec::SyncManifest baseline, exec::SyncManifest::FromJson(*text));
      SOVAI_ASSIGN_OR_RETURN(
          exec::SyncReport report,
          exec::SyncUp(*s3, v, base::JoinPath(volumes_dir, std::to_string(i)), baseline,
                       v.permission == exec::VolumePermission::kReadWriteDelete, sync_options(v)));
      (void)report;
    }
    return Status();
  };
  // Uploads the log into the project's bucket (created on first use).
  auto archive_log = [&] {
    auto own = client(options_.region);
    if (!own.ok()) {
      say("log archive skipped: " + own.status().message());
      return;
    }
    exec::S3Client* s3 = *own;
    const std::string bucket = ProjectBucket(job.project);
    if (Status st = s3->HeadBucket(bucket); st.code() == base::StatusCode::kNotFound) {
      if (Status made = s3->CreateBucket(bucket); !made.ok()) {
        say("log archive skipped: " + made.message());
        return;
      }
    }
    if (auto put = s3->PutObjectFromFile(bucket, LogArchiveKey(job.id), log->path()); !put.ok()) {
      SOVAI_LOG(WARNING) << "job " << job.id << ": archiving the log: " << put.status();
    }
  };

  // An oci: image is downloaded once per archive version (ETag) and unpacked into the
  // project's image cache; later jobs reuse the rootfs.
  auto prepare_image = [&]() -> Result<std::optional<exec::CachedImage>> {
    if (!job.spec.image.starts_with(kOciImagePrefix)) return std::optional<exec::CachedImage>();
    SOVAI_ASSIGN_OR_RETURN(
        exec::VolumeSpec source,
        exec::ParseVolumeSpec(job.spec.image.substr(kOciImagePrefix.size()) + ":/image"));
    SOVAI_ASSIGN_OR_RETURN(exec::S3Client * s3, client(source.region));
    const std::string& key = source.prefix;
    // Checked at submission too; it may have been deleted since.
    SOVAI_ASSIGN_OR_RETURN(exec::S3Object object, FindImageArchive(*s3, source));
    const std::string images = base::JoinPath(options_.data_dir, "images");
    const std::string cache = base::JoinPath(images, job.project);
    SOVAI_RETURN_IF_ERROR(exec::MakeDir(images, 0711));
    SOVAI_RETURN_IF_ERROR(exec::MakeDir(cache, 0711));
    const std::string cache_key =
        base::HexEncode(base::Sha256(source.bucket + "/" + key + "@" + object.etag));
    const std::string entry = base::JoinPath(cache, cache_key);
    std::string archive;
    if (!env_.FileExists(base::JoinPath(entry, "image.json"))) {
      archive = base::JoinPath(cache, cache_key + ".download");
      say("image " + job.spec.image + ": downloading " + base::HumanBytes(object.size_bytes));
      SOVAI_RETURN_IF_ERROR(s3->GetObjectToFile(source.bucket, key, archive).status());
    }
    auto image = exec::CachedRootfs(cache, cache_key, archive);
    if (!archive.empty()) (void)env_.DeleteFile(archive);
    SOVAI_RETURN_IF_ERROR(image.status());
    // The workload's uid binds the rootfs: every directory down to it must be traversable.
    SOVAI_RETURN_IF_ERROR(exec::MakeDir(entry, 0711));
    say("image " + job.spec.image + ": " +
        (image->reused ? std::string("cached rootfs reused")
                       : "unpacked " + std::to_string(image->info.layers) + " layers, " +
                             std::to_string(image->info.files) + " files"));
    return std::optional<exec::CachedImage>(std::move(*image));
  };

  // The end, or another try (the restart policy).
  auto conclude = [&](Outcome outcome) {
    bool retry = outcome.state == JobState::kFailed &&
                 job.spec.restart == RestartPolicy::kOnFailure &&
                 job.retries < job.spec.max_retries;
    job.allocation.reset();
    {
      std::lock_guard lock(mu_);
      retry = retry && !shutting_down_;
    }
    if (!retry) (void)Transition(job, outcome.state, outcome.reason);
    if (retry) {
      std::lock_guard lock(mu_);
      {
        // The failed try stays in the history, but the job is never seen in a terminal state
        // between its tries: both transitions are saved at once.
        job.history.push_back({outcome.state, env_.NowUnixMicros()});
        job.retries += 1;
        job.slurm_job_id.clear();  // the next try is a new Slurm job
        job.node.clear();
        (void)Transition(job, JobState::kQueued,
                         "restart policy: " + outcome.reason + "; try " +
                             std::to_string(job.retries + 1) + " of " +
                             std::to_string(job.spec.max_retries + 1));
        auto flavor = options_.flavors->Find(job.spec.flavor);
        if (flavor.ok()) {
          auto request = RequestFor(**flavor, job.spec.units);
          // The id is still held by this runner: release first, then queue again.
          scheduler_.Release(job.id);
          if (request.ok()) scheduler_.Enqueue({job.id, job.project, job.spec.priority, *request});
        }
      }
    }
    finish();
  };

  if (options_.slurm.client != nullptr) {
    Outcome outcome = RunOnSlurm(runner, job, *log);
    if (outcome.detached) {
      say("the server is shutting down: Slurm job " + job.slurm_job_id +
          " goes on, and the next server to run the jobs follows it");
      finish();
      return;
    }
    say("job " + std::string(JobStateName(outcome.state)) + ": " + outcome.reason);
    archive_log();
    conclude(std::move(outcome));
    return;
  }
  if (runner.recovered_from) {
    // The previous process died while this job was in a running state.
    const JobState was = *runner.recovered_from;
    const std::string reason =
        "the server restarted while the job was " + std::string(JobStateName(was));
    say(reason);
    if (was == JobState::kRunning || was == JobState::kFinalizing) {
      if (Status st = Transition(job, JobState::kFinalizing); st.ok()) {
        if (Status up = sync_up(); !up.ok()) say("sync up failed: " + up.message());
      }
    }
    archive_log();
    fail(JobState::kInterrupted, reason);
    finish();
    return;
  }

  // --- INITIALIZING: volumes down ---
  job.allocation = runner.allocation;
  if (Status st = Transition(job, JobState::kInitializing); !st.ok()) {
    SOVAI_LOG(ERROR) << "job " << job.id << ": " << st;
    finish();
    return;
  }
  say("job " + job.id + " admitted: flavor " + job.spec.flavor + " x" +
      std::to_string(job.spec.units) + ", " + std::to_string(runner.allocation.cpus.size()) +
      " CPUs, " + std::to_string(runner.allocation.gpus.size()) + " GPUs");
  std::optional<exec::CachedImage> image;
  if (auto prepared = prepare_image(); prepared.ok()) {
    image = std::move(*prepared);
  } else {
    archive_log();
    fail(JobState::kError, "image " + job.spec.image + ": " + prepared.status().message());
    finish();
    return;
  }
  auto stop_requested = [&]() -> std::optional<std::pair<JobState, std::string>> {
    std::lock_guard rl(runner.mu);
    if (runner.stop_as) return std::make_pair(*runner.stop_as, runner.stop_reason);
    return std::nullopt;
  };
  for (size_t i = 0; i < volumes.size(); ++i) {
    const exec::VolumeSpec& v = volumes[i];
    const std::string local = base::JoinPath(volumes_dir, std::to_string(i));
    Status st = exec::MakeDir(local, 0755);
    auto s3 = st.ok() ? client(v.region) : Result<exec::S3Client*>(st);
    if (!s3.ok()) st = s3.status();
    if (st.ok()) {
      auto manifest = exec::SyncDown(**s3, v, local, sync_options(v));
      if (manifest.ok()) {
        st = env_.WriteFileAtomically(manifest_path(i), manifest->ToJson());
      } else {
        st = manifest.status();
      }
    }
    if (st.ok() && root && v.permission != exec::VolumePermission::kReadOnly) {
      st = exec::ChownTree(local, options_.workload_uid, options_.workload_gid);
    }
    if (!st.ok()) {
      archive_log();
      fail(JobState::kError, "volume " + v.SourceName() + ": " + st.message());
      finish();
      return;
    }
    if (auto stop = stop_requested()) {
      archive_log();
      fail(stop->first, stop->second);
      finish();
      return;
    }
  }

  // --- PENDING: the sandbox ---
  (void)Transition(job, JobState::kPending);
  exec::SandboxSpec sandbox;
  sandbox.argv = job.spec.command;
  if (auto engine_command = EngineSubcommandOf(job.spec.image)) {
    // The built-in ML images are the engine: the job's command is the subcommand's arguments.
    if (options_.engine_binary.empty()) {
      archive_log();
      fail(JobState::kError, "image " + job.spec.image +
                                 " needs sovai-engine, which this server did not find (see "
                                 "`sovai server --engine`)");
      finish();
      return;
    }
    // The sandbox shows only the host's system directories: the engine comes in as one file.
    constexpr std::string_view kEngineInSandbox = "/opt/sovai/bin/sovai-engine";
    sandbox.mounts.push_back({options_.engine_binary, std::string(kEngineInSandbox), true});
    sandbox.argv = {std::string(kEngineInSandbox), std::string(*engine_command)};
    sandbox.argv.insert(sandbox.argv.end(), job.spec.command.begin(), job.spec.command.end());
  } else if (image) {
    // As a container runtime does: the command replaces Cmd, Entrypoint stays in front of it;
    // the image's Env comes first and the spec's env overrides it.
    sandbox.rootfs = image->rootfs;
    sandbox.cwd = image->info.working_dir;
    std::vector<std::string> argv = image->info.entrypoint;
    const std::vector<std::string>& args =
        job.spec.command.empty() ? image->info.cmd : job.spec.command;
    argv.insert(argv.end(), args.begin(), args.end());
    sandbox.argv = std::move(argv);
    for (const std::string& kv : image->info.env) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) continue;
      std::string name = kv.substr(0, eq);
      if (job.spec.env.contains(name) || name == "CUDA_VISIBLE_DEVICES") continue;
      sandbox.env.emplace_back(std::move(name), kv.substr(eq + 1));
    }
  }
  if (sandbox.argv.empty()) {
    archive_log();
    fail(JobState::kError, "the job has no command and its image no Entrypoint or Cmd");
    finish();
    return;
  }
  for (const auto& [k, v] : job.spec.env) sandbox.env.emplace_back(k, v);
  sandbox.env.emplace_back("SOVAI_JOB_ID", job.id);
  sandbox.network_none = job.spec.network == NetworkMode::kNone;
  for (int cpu : runner.allocation.cpus) {
    sandbox.cpus.push_back(options_.cpu_ids[static_cast<size_t>(cpu)]);
  }
  sandbox.gpus = runner.allocation.gpus;
  // GPU workloads reserve huge virtual ranges (CUDA); the RLIMIT_AS limit would break them.
  sandbox.memory_bytes = runner.allocation.gpus.empty() ? runner.allocation.memory_bytes : 0;
  sandbox.log_path = log->path();
  sandbox.work_dir = base::JoinPath(dir, "sandbox");
  sandbox.uid = options_.workload_uid;
  sandbox.gid = options_.workload_gid;
  for (size_t i = 0; i < volumes.size(); ++i) {
    sandbox.mounts.push_back({base::JoinPath(volumes_dir, std::to_string(i)), volumes[i].mount_path,
                              volumes[i].permission == exec::VolumePermission::kReadOnly});
  }
  Status prepared = exec::MakeDir(sandbox.work_dir, 0700);
  if (prepared.ok() && root) {
    prepared = exec::ChownTree(sandbox.work_dir, options_.workload_uid, options_.workload_gid);
  }
  if (!prepared.ok()) {
    archive_log();
    fail(JobState::kError, "preparing the sandbox: " + prepared.message());
    finish();
    return;
  }
  auto launched = options_.sandbox->Launch(sandbox);
  if (!launched.ok()) {
    archive_log();
    fail(JobState::kError, "starting the sandbox: " + launched.status().message());
    finish();
    return;
  }
  std::unique_ptr<exec::RunningWorkload> workload = std::move(*launched);
  {
    std::lock_guard rl(runner.mu);
    runner.workload = workload.get();
  }

  // --- RUNNING ---
  (void)Transition(job, JobState::kRunning);
  const int64_t timeout_s =
      job.spec.timeout_s > 0 ? job.spec.timeout_s : options_.default_timeout_s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  Outcome outcome;
  auto record_exit = [&](const Result<base::ExitStatus>& status) {
    if (!status.ok()) {
      outcome.state = JobState::kError;
      outcome.reason = status.status().message();
      return;
    }
    if (status->exited) {
      outcome.exit_code = status->code;
      if (outcome.reason.empty()) {
        outcome.state = status->code == 0 ? JobState::kDone : JobState::kFailed;
        outcome.reason = "exited with code " + std::to_string(status->code);
      }
    } else if (status->signaled) {
      outcome.exit_signal = status->signal;
      if (outcome.reason.empty()) {
        outcome.state = JobState::kFailed;
        outcome.reason = status->ToString();
      }
    }
  };
  for (;;) {
    auto ended = workload->TryWait();
    if (!ended.ok() || ended->has_value()) {
      record_exit(ended.ok() ? Result<base::ExitStatus>(**ended) : ended.status());
      break;
    }
    std::unique_lock rl(runner.mu);
    runner.cv.wait_for(rl, options_.poll_interval,
                       [&] { return runner.stop_as.has_value() || runner.push_requested; });
    if (runner.push_requested) {
      rl.unlock();
      say("push-data: syncing rw volumes while the job runs");
      Status pushed = sync_up();
      say(pushed.ok() ? "push-data: done" : "push-data failed: " + pushed.message());
      rl.lock();
      runner.push_requested = false;
      runner.push_result = pushed.ok() ? "ok" : pushed.message();
      runner.cv.notify_all();
      continue;
    }
    std::optional<JobState> stop_as = runner.stop_as;
    std::string stop_reason = runner.stop_reason;
    rl.unlock();
    if (!stop_as && std::chrono::steady_clock::now() >= deadline) {
      stop_as = JobState::kTimeout;
      stop_reason = "ran longer than timeout_s " + std::to_string(timeout_s);
    }
    if (stop_as) {
      say("stopping: " + stop_reason + " (SIGTERM, then SIGKILL after " +
          std::to_string(options_.stop_grace.count()) + " ms)");
      outcome.state = *stop_as;
      outcome.reason = stop_reason;
      record_exit(workload->Stop(options_.stop_grace));
      break;
    }
  }
  {
    std::lock_guard rl(runner.mu);
    runner.workload = nullptr;
  }
  workload.reset();  // the log holds everything the workload wrote

  // --- FINALIZING ---
  job.exit_code = outcome.exit_code;
  job.exit_signal = outcome.exit_signal;
  (void)Transition(job, JobState::kFinalizing);
  if (Status cards = WriteCards(job, volumes, volumes_dir); !cards.ok()) {
    say("model card not written: " + cards.message());
  }
  if (Status up = sync_up(); !up.ok()) {
    say("sync up failed: " + up.message());
    if (outcome.state == JobState::kDone) {
      outcome.state = JobState::kError;
      outcome.reason = "the command succeeded but syncing the outputs failed: " + up.message();
    }
  }
  say("job " + std::string(JobStateName(outcome.state)) + ": " + outcome.reason);
  archive_log();

  conclude(std::move(outcome));
}

// --- The Slurm executor ---

namespace {

// A port for the rendezvous of a distributed job, spread by job id so that two jobs sharing a
// node rarely pick the same one.
int MasterPortFor(const std::string& job_id) {
  const std::string digest = base::Sha256(job_id);
  const unsigned value =
      static_cast<unsigned char>(digest[0]) << 8 | static_cast<unsigned char>(digest[1]);
  return 20000 + static_cast<int>(value % 20000);
}

// "Slurm job 12 ended NODE_FAIL (NodeDown)".
std::string SlurmEnded(const std::string& slurm_id, const exec::SlurmJobInfo& info) {
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

}  // namespace

JobService::Outcome JobService::RunOnSlurm(Runner& runner, Job& job, exec::LogWriter& log) {
  const SlurmExecution& slurm = options_.slurm;
  auto say = [&](std::string_view line) {
    (void)log.Write(exec::LogSource::kSovai, std::string(line) + "\n");
  };
  auto ended = [](JobState state, std::string reason) {
    Outcome o;
    o.state = state;
    o.reason = std::move(reason);
    return o;
  };
  // The credentials a node uses for the store of `region` ("" = the server's own, seen from the
  // nodes at slurm.s3_endpoint when set).
  auto node_access = [&](const std::string& region) -> Result<exec::S3ClientOptions> {
    SOVAI_ASSIGN_OR_RETURN(S3Access access, options_.s3_access(job.project, region));
    exec::S3ClientOptions o = ClientOptions(access);
    if (region.empty() && !slurm.s3_endpoint.empty()) o.endpoint = slurm.s3_endpoint;
    return o;
  };
  auto own = options_.s3_access(job.project, "");
  if (!own.ok()) return ended(JobState::kError, "object store: " + own.status().message());
  exec::S3Client reports(ClientOptions(*own));
  const std::string bucket = ProjectBucket(job.project);
  const std::string prefix = "jobs/" + job.id + "/agent/";
  if (Status st = reports.HeadBucket(bucket); st.code() == base::StatusCode::kNotFound) {
    if (Status made = reports.CreateBucket(bucket);
        !made.ok() && made.code() != base::StatusCode::kAlreadyExists) {
      return ended(JobState::kError,
                   "creating the project bucket " + bucket + ": " + made.message());
    }
  }

  // The next log chunk to append, kept beside the log so that a restarted server continues
  // where this one stopped (chunks are deleted once appended).
  const std::string next_chunk_path = base::JoinPath(JobDir(job.id), "agent-next-chunk");
  uint64_t next_chunk = 1;
  if (auto text = env_.ReadFile(next_chunk_path); text.ok()) {
    if (auto n = base::ParseUint64(base::Trim(*text)); n.ok() && *n > 0) next_chunk = *n;
  }
  if (job.slurm_job_id.empty()) {
    // A new Slurm job (a first try, or a retry): its agent numbers its chunks from 1.
    next_chunk = 1;
    (void)env_.DeleteFile(next_chunk_path);
    // --- The plan and the batch script ---
    auto flavor = options_.flavors->Find(job.spec.flavor);
    if (!flavor.ok()) return ended(JobState::kError, flavor.status().message());
    exec::SlurmPlan plan;
    plan.job_id = job.id;
    auto log_s3 = node_access("");
    if (!log_s3.ok()) return ended(JobState::kError, "object store: " + log_s3.status().message());
    plan.log_s3 = *log_s3;
    plan.log_bucket = bucket;
    plan.log_prefix = prefix;
    for (const std::string& v : job.spec.volumes) {
      auto spec = exec::ParseVolumeSpec(v);
      SOVAI_CHECK(spec.ok()) << "stored volume specs were validated: " << v;
      const std::string region =
          base::EqualsIgnoreCase(spec->region, options_.region) ? "" : spec->region;
      auto access = node_access(region);
      if (!access.ok()) {
        return ended(JobState::kError,
                     "volume " + spec->SourceName() + ": " + access.status().message());
      }
      plan.volumes.push_back({v, *access});
    }
    if (auto engine_command = EngineSubcommandOf(job.spec.image)) {
      if (slurm.engine_binary.empty()) {
        return ended(
            JobState::kError,
            "image " + job.spec.image + " needs sovai-engine on the nodes (slurm engine_binary)");
      }
      constexpr std::string_view kEngineInSandbox = "/opt/sovai/bin/sovai-engine";
      plan.extra_mounts.push_back({slurm.engine_binary, std::string(kEngineInSandbox)});
      plan.argv = {std::string(kEngineInSandbox), std::string(*engine_command)};
    }
    plan.argv.insert(plan.argv.end(), job.spec.command.begin(), job.spec.command.end());
    if (plan.argv.empty()) return ended(JobState::kError, "the job has no command");
    for (const auto& [k, v] : job.spec.env) plan.env.emplace_back(k, v);
    plan.network_none = job.spec.network == NetworkMode::kNone;
    plan.uid = options_.workload_uid;
    plan.gid = options_.workload_gid;
    plan.scratch_dir = slurm.scratch_dir;
    plan.agent_binary = slurm.agent_binary;
    plan.master_port = MasterPortFor(job.id);

    exec::SlurmBatch batch;
    batch.job_name = "sovai-" + job.id;
    batch.partition = slurm.partition;
    batch.account = slurm.account;
    if (auto it = slurm.flavors.find(job.spec.flavor); it != slurm.flavors.end()) {
      batch.partition = it->second.first;
      batch.gres_type = it->second.second;
    }
    const int nodes = std::max(1, job.spec.nodes);
    const int gpus = (*flavor)->gpus_per_unit * job.spec.units;
    const int vcpus = (*flavor)->vcpus_per_unit * job.spec.units;
    const uint64_t memory =
        (*flavor)->memory_bytes_per_unit * static_cast<uint64_t>(job.spec.units);
    batch.nodes = nodes;
    batch.gpus_per_node = (gpus + nodes - 1) / nodes;
    batch.tasks_per_node =
        job.spec.tasks_per_node > 0 ? job.spec.tasks_per_node : std::max(1, batch.gpus_per_node);
    batch.cpus_per_task = std::max(1, vcpus / nodes / batch.tasks_per_node);
    batch.memory_mb_per_node = memory / static_cast<uint64_t>(nodes) / (1024 * 1024);
    const int64_t timeout_s =
        job.spec.timeout_s > 0 ? job.spec.timeout_s : options_.default_timeout_s;
    batch.time_minutes = (timeout_s + 59) / 60 + slurm.staging_minutes;
    // The batch step's own output; Slurm opens it before the agent runs, so in a directory
    // that exists (a scratch directory per node, "%n", does not yet).
    batch.output_path = base::JoinPath(
        slurm.scratch_dir.find("%n") == std::string::npos ? slurm.scratch_dir : "/tmp",
        "sovai-%j.out");
    batch.env = {{"SOVAI_SLURM_PLAN", exec::EncodeSlurmPlan(plan)}};
    batch.agent_argv = {slurm.agent_binary, "slurm-agent", "run"};
    auto script = exec::BuildBatchScript(batch);
    if (!script.ok()) return ended(JobState::kError, "batch script: " + script.status().message());
    auto submitted = slurm.client->Submit(*script);
    if (!submitted.ok()) return ended(JobState::kError, "sbatch: " + submitted.status().message());
    job.slurm_job_id = *submitted;
    job.reason = "Slurm: submitted";
    (void)Save(job);
    say("submitted to Slurm as job " + job.slurm_job_id + " (partition " +
        (batch.partition.empty() ? "default" : batch.partition) + ", " + std::to_string(nodes) +
        " node(s) x " + std::to_string(batch.tasks_per_node) + " task(s), " +
        std::to_string(batch.gpus_per_node) + " GPU(s) per node, --time " +
        std::to_string(batch.time_minutes) + " min)");
  } else {
    say("following Slurm job " + job.slurm_job_id + " again after a restart of the server");
  }

  // --- Following the Slurm job and the agent's reports ---
  const std::string download = base::JoinPath(JobDir(job.id), "agent-download");
  auto fetch = [&](const std::string& key) -> Result<std::string> {
    SOVAI_RETURN_IF_ERROR(reports.GetObjectToFile(bucket, key, download).status());
    auto text = env_.ReadFile(download);
    (void)env_.DeleteFile(download);
    return text;
  };
  auto pull_log = [&] {
    for (;;) {
      const std::string key = exec::AgentLogChunkKey(prefix, next_chunk);
      auto chunk = fetch(key);
      if (!chunk.ok()) return;
      for (std::string_view line : base::Split(*chunk, '\n', /*skip_empty=*/true)) {
        if (auto record = exec::ParseLogRecord(line); record.ok()) {
          (void)log.WriteRecord(record->source, record->continued, record->line);
        } else {
          (void)log.Write(exec::LogSource::kSovai, "(a malformed log record from the node)\n");
        }
      }
      ++next_chunk;
      (void)env_.WriteFileAtomically(next_chunk_path, std::to_string(next_chunk));
      (void)reports.DeleteObject(bucket, key);
    }
  };
  auto agent_status = [&]() -> std::optional<exec::AgentStatus> {
    auto text = fetch(prefix + std::string(exec::kAgentStatusName));
    if (!text.ok()) return std::nullopt;
    auto parsed = exec::AgentStatusFromJson(*text);
    if (!parsed.ok()) return std::nullopt;
    return *parsed;
  };
  auto advance_to = [&](JobState state) {
    // The agent's phases map onto the running states; skipped ones are passed through in order.
    for (JobState step :
         {JobState::kInitializing, JobState::kPending, JobState::kRunning, JobState::kFinalizing}) {
      if (job.state >= state) return;
      if (step > job.state && step <= state) (void)Transition(job, step);
    }
  };

  const int64_t timeout_s =
      job.spec.timeout_s > 0 ? job.spec.timeout_s : options_.default_timeout_s;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::optional<std::pair<JobState, std::string>> stopping;
  // The outcome when Slurm itself ended the job (its state says how), or nothing when the job
  // ended on its own (the agent's report then says how).
  auto slurm_verdict = [&](const exec::SlurmJobInfo& info) -> std::optional<Outcome> {
    const std::string what = SlurmEnded(job.slurm_job_id, info);
    switch (info.phase) {
      case exec::SlurmPhase::kTimeout:
        return ended(JobState::kTimeout, what + ": it reached its --time limit");
      case exec::SlurmPhase::kNodeFail:
        return ended(JobState::kError, what + ": a node of the allocation failed");
      case exec::SlurmPhase::kOutOfMemory:
        return ended(JobState::kFailed, what + ": out of memory");
      case exec::SlurmPhase::kCancelled:
      case exec::SlurmPhase::kPreempted:
        if (stopping) return ended(stopping->first, stopping->second);
        return ended(JobState::kInterrupted, what);
      default:
        return std::nullopt;
    }
  };
  std::chrono::steady_clock::time_point stop_sent{};
  bool killed = false;
  std::string last_query_error;
  for (;;) {
    pull_log();
    std::optional<exec::AgentStatus> status = agent_status();
    if (status && job.node.empty() && !status->node.empty()) {
      job.node = status->node;
      (void)Save(job);
    }
    if (status) {
      switch (status->phase) {
        case exec::AgentPhase::kInitializing:
          advance_to(JobState::kInitializing);
          break;
        case exec::AgentPhase::kRunning:
          advance_to(JobState::kRunning);
          if (!deadline)
            deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
          break;
        case exec::AgentPhase::kFinalizing:
          advance_to(JobState::kFinalizing);
          break;
        case exec::AgentPhase::kDone:
          break;
      }
    }
    if (status && status->phase == exec::AgentPhase::kDone) {
      pull_log();
      (void)reports.DeleteObject(bucket, prefix + std::string(exec::kAgentStatusName));
      advance_to(JobState::kFinalizing);
      // Slurm's verdict comes first when Slurm itself ended the job (a node failure, its time
      // limit, an administrator's scancel): the agent then saw only its steps vanish.
      if (auto info = slurm.client->Query(job.slurm_job_id); info.ok()) {
        if (auto verdict = slurm_verdict(*info)) return *verdict;
      }
      Outcome o;
      if (!status->exit) {
        o = ended(JobState::kError,
                  status->message.empty() ? "the Slurm agent gave up" : status->message);
      } else if (status->exit->exited) {
        o.exit_code = status->exit->code;
        o.state = status->exit->code == 0 ? JobState::kDone : JobState::kFailed;
        o.reason = "exited with code " + std::to_string(status->exit->code);
      } else {
        o.exit_signal = status->exit->signal;
        o.state = JobState::kFailed;
        o.reason = status->exit->ToString();
      }
      if (stopping && status->exit) {
        o.state = stopping->first;
        o.reason = stopping->second;
      } else if (o.state == JobState::kDone && status->sync_failed) {
        o.state = JobState::kError;
        o.reason = "the command succeeded but " + status->message;
      }
      job.exit_code = o.exit_code;
      job.exit_signal = o.exit_signal;
      return o;
    }

    auto info = slurm.client->Query(job.slurm_job_id);
    if (!info.ok()) {
      if (info.status().code() == base::StatusCode::kNotFound) {
        pull_log();
        return ended(JobState::kError, info.status().message());
      }
      if (info.status().message() != last_query_error) {
        last_query_error = info.status().message();
        say("asking Slurm: " + last_query_error + " (will retry)");
      }
    } else if (info->phase == exec::SlurmPhase::kPending && NeverStarts(info->reason)) {
      (void)slurm.client->Cancel(job.slurm_job_id);
      return ended(JobState::kError, "Slurm will never start job " + job.slurm_job_id +
                                         ": PENDING (" + info->reason +
                                         "): the partition cannot give it what the flavor asks");
    } else if (info->phase == exec::SlurmPhase::kPending) {
      const std::string reason = "Slurm: " + info->state + " (" + info->reason + ")";
      if (job.state == JobState::kQueued && job.reason != reason) {
        job.reason = reason;
        (void)Save(job);
      }
    } else if (info->phase == exec::SlurmPhase::kRunning && job.node.empty() &&
               !info->nodes.empty()) {
      if (auto first = exec::FirstHostOf(info->nodes); first.ok()) {
        job.node = *first;
        (void)Save(job);
      }
    } else if (exec::IsFinal(info->phase)) {
      // The batch step ended; its last report may have landed after the read above.
      if (auto last = agent_status(); last && last->phase == exec::AgentPhase::kDone) continue;
      pull_log();
      if (auto verdict = slurm_verdict(*info)) return *verdict;
      Outcome o = ended(JobState::kError, SlurmEnded(job.slurm_job_id, *info) +
                                              ", but the agent's final report never arrived: "
                                              "the outputs may not be synced");
      if (info->exit && info->exit->exited) o.exit_code = info->exit->code;
      if (info->exit && info->exit->signaled) o.exit_signal = info->exit->signal;
      job.exit_code = o.exit_code;
      job.exit_signal = o.exit_signal;
      return o;
    }

    // Requests: a stop, a push (not available here), the timeout.
    {
      std::unique_lock rl(runner.mu);
      runner.cv.wait_for(rl, slurm.poll_interval,
                         [&] { return (runner.stop_as && !stopping) || runner.push_requested; });
      if (runner.push_requested) {
        runner.push_requested = false;
        runner.push_result = "push-data is not available on the Slurm executor yet";
        runner.cv.notify_all();
      }
      if (runner.stop_as && !stopping) stopping.emplace(*runner.stop_as, runner.stop_reason);
    }
    if (stopping && !job.slurm_job_id.empty()) {
      std::lock_guard lock(mu_);
      if (shutting_down_) {
        Outcome o;
        o.detached = true;
        return o;
      }
    }
    if (!stopping && deadline && std::chrono::steady_clock::now() >= *deadline) {
      stopping.emplace(JobState::kTimeout,
                       "ran longer than timeout_s " + std::to_string(timeout_s));
    }
    if (stopping && stop_sent == std::chrono::steady_clock::time_point{}) {
      stop_sent = std::chrono::steady_clock::now();
      if (job.state == JobState::kQueued || job.state == JobState::kInitializing) {
        // Nothing of the workload runs yet: the whole Slurm job goes.
        say("stopping: " + stopping->second + " (scancel)");
        if (Status st = slurm.client->Cancel(job.slurm_job_id); !st.ok())
          say("scancel: " + st.message());
        killed = true;
      } else {
        say("stopping: " + stopping->second + " (SIGTERM to the job's steps, SIGKILL after " +
            std::to_string(options_.stop_grace.count()) + " ms)");
        if (Status st = slurm.client->Signal(job.slurm_job_id, SIGTERM); !st.ok()) {
          say("scancel --signal=TERM: " + st.message());
        }
      }
    } else if (stopping && !killed &&
               std::chrono::steady_clock::now() - stop_sent >= options_.stop_grace) {
      killed = true;
      (void)slurm.client->Signal(job.slurm_job_id, SIGKILL);
    }
  }
}

}  // namespace sovai::control
