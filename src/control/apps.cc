#include "control/apps.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "base/json.h"
#include "base/log.h"
#include "base/strings.h"
#include "base/time.h"
#include "control/datastores.h"
#include "control/row_version.h"
#include "exec/resources.h"
#include "exec/s3_client.h"
#include "exec/volume_spec.h"
#include "net/client.h"

namespace sovai::control {

namespace {

using base::Result;
using base::Status;
using Json = nlohmann::json;

constexpr std::string_view kStateNames[] = {"QUEUED",  "INITIALIZING", "RUNNING",
                                            "SCALING", "STOPPING",     "STOPPED",
                                            "FAILED",  "DELETING",     "DELETED"};
// Replica jobs whose logs `app logs --replica` can still name.
constexpr size_t kMaxRecentJobs = 16;
// Where replicas find their model inside the sandbox.
constexpr char kModelMount[] = "/workspace/model";
constexpr char kBaseModelMount[] = "/workspace/base";

std::optional<AppState> ParseAppState(std::string_view name) {
  for (size_t i = 0; i < std::size(kStateNames); ++i) {
    if (kStateNames[i] == name) return static_cast<AppState>(i);
  }
  return std::nullopt;
}

bool Serving(AppState s) {
  return s != AppState::kStopping && s != AppState::kStopped && s != AppState::kFailed &&
         s != AppState::kDeleting && s != AppState::kDeleted;
}

int InitialDesired(const AppSpec& spec) {
  return spec.autoscaling ? std::max(spec.autoscaling->min_replicas, 1) : spec.replicas;
}

// The event of a replica job just submitted: "started" is said only when its job runs
// (Reconcile); until then, where it is and why it waits ("position 1 in the queue: waiting for
// 1 CPU, 0 free").
std::string SubmittedEvent(const std::string& job_id, uint16_t port, const Result<Job>& job) {
  std::string what = "replica " + job_id;
  if (!job.ok()) return what + " submitted on port " + std::to_string(port);
  if (job->state == JobState::kQueued) {
    what += " queued on port " + std::to_string(port);
    return job->reason.empty() ? what : what + " (" + job->reason + ")";
  }
  return what + " submitted on port " + std::to_string(port) + " (" +
         std::string(JobStateName(job->state)) + ")";
}

}  // namespace

Result<uint16_t> FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return base::ErrnoToStatus(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  if (rc == 0) rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int err = errno;
  ::close(fd);
  if (rc != 0) return base::ErrnoToStatus(err, "choosing a loopback port");
  return ntohs(addr.sin_port);
}

namespace {

bool HttpProbe(const std::string& host, uint16_t port, const std::string& path) {
  net::ClientOptions options;
  if (!host.empty()) options.host = host;
  options.port = port;
  options.connect_timeout = kProbeTimeout;
  options.read_timeout = kProbeTimeout;
  net::HttpClient client(options);
  net::ClientRequest request;
  request.method = "GET";
  request.target = path;
  auto response = client.Send(request);
  return response.ok() && response->status >= 200 && response->status < 300;
}

Json StatusJson(const App& app) {
  Json events = Json::array();
  for (const AppEvent& e : app.events) {
    events.push_back({{"at_unix_micros", e.at_unix_micros}, {"what", e.what}});
  }
  // The replicas as the leader last saw them: what other servers show, and what a server that
  // takes the lead follows (docs/state.md).
  Json replicas = Json::array();
  for (const AppReplica& r : app.replicas) {
    replicas.push_back({{"job", r.job},
                        {"generation", r.generation},
                        {"port", r.port},
                        {"host", r.host},
                        {"job_state", r.job_state},
                        {"ready", r.ready},
                        {"draining", r.draining},
                        {"stop_sent", r.stop_sent}});
  }
  return {{"recent_jobs", app.recent_jobs},
          {"events", std::move(events)},
          {"replicas", std::move(replicas)},
          {"model_location", app.model_location}};
}

// The columns AppFromRow reads, in its order.
constexpr char kColumns[] =
    "id, project, user, spec, adapter, state, reason, generation, desired, status, created_at, "
    "updated_at";

}  // namespace

std::string_view AppStateName(AppState state) { return kStateNames[static_cast<int>(state)]; }

bool AppRoute::serving() const { return Serving(state); }

Json AppToJson(const App& app, std::string_view api_url) {
  Json replicas = Json::array();
  int ready = 0;
  for (const AppReplica& r : app.replicas) {
    if (r.ready && !r.draining) ++ready;
    replicas.push_back({{"job", r.job},
                        {"state", r.job_state},
                        {"ready", r.ready},
                        {"draining", r.draining},
                        {"generation", r.generation}});
    if (!r.host.empty()) replicas.back()["node"] = r.host;
  }
  Json events = Json::array();
  for (const AppEvent& e : app.events) {
    events.push_back({{"at", base::FormatRfc3339(e.at_unix_micros)}, {"what", e.what}});
  }
  return {{"id", app.id},
          {"name", app.spec.name},
          {"project", app.project},
          {"user", app.user},
          {"state", std::string(AppStateName(app.state))},
          {"reason", app.reason},
          {"url", std::string(api_url) + "/apps/" + app.id + "/"},
          {"spec", AppSpecToJson(app.spec)},
          {"adapter", app.adapter},
          {"model_location", app.model_location},
          {"generation", app.generation},
          {"status",
           {{"desired_replicas", app.desired_replicas},
            {"ready_replicas", ready},
            {"usage",
             {{"requests", app.usage_requests},
              {"prompt_tokens", app.usage_prompt_tokens},
              {"completion_tokens", app.usage_completion_tokens}}},
            {"replicas", std::move(replicas)},
            {"events", std::move(events)}}},
          {"created_at", base::FormatRfc3339(app.created_unix_micros)}};
}

// What the loop remembers about an app between ticks.
struct AppService::Runtime {
  // Replicas of the current generation that ended before any of them was ready, in a row.
  int start_failures = 0;
  bool generation_ready = false;  // a replica of the current generation has been ready
  bool ever_ready = false;
  std::map<std::string, std::chrono::steady_clock::time_point> last_probe;  // by job
  std::optional<AppRoute> published;
  // For MeasureUsage: CPU ticks by job at the previous measurement.
  std::map<std::string, uint64_t> cpu_ticks;
  std::chrono::steady_clock::time_point measured_at;
};

AppService::AppService(ControlDb& db, AppServiceOptions options)
    : db_(db),
      options_(std::move(options)),
      env_(options_.env != nullptr ? *options_.env : base::Env::Default()) {}

AppService::~AppService() { Shutdown(); }

Result<std::unique_ptr<AppService>> AppService::Start(ControlDb& db, AppServiceOptions options) {
  SOVAI_CHECK(options.jobs != nullptr && options.flavors != nullptr);
  std::unique_ptr<AppService> service(new AppService(db, std::move(options)));
  if (!service->options_.probe) service->options_.probe = HttpProbe;
  service->leading_ = service->Leading();
  SOVAI_RETURN_IF_ERROR(service->Load(service->leading_));
  SOVAI_RETURN_IF_ERROR(service->LoadEndpoints());
  service->loop_ = std::thread([s = service.get()] { s->Loop(); });
  return service;
}

void AppService::Shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

Result<App> AppService::AppFromRow(base::Database& sql, const base::Statement& st,
                                   int64_t* version) {
  SpecContext ctx{options_.flavors, options_.region, options_.other_regions};
  App app;
  app.id = st.ColumnText(0);
  app.project = st.ColumnText(1);
  app.user = st.ColumnText(2);
  app.adapter = st.ColumnInt(4) != 0;
  app.state = ParseAppState(st.ColumnText(5)).value_or(AppState::kFailed);
  app.reason = st.ColumnText(6);
  app.generation = st.ColumnInt(7);
  app.desired_replicas = static_cast<int>(st.ColumnInt(8));
  app.created_unix_micros = st.ColumnInt(10);
  *version = st.ColumnInt(11);
  // The model may live in a datastore of the app's project (datastores.h).
  SOVAI_ASSIGN_OR_RETURN(ctx.datastores, DatastoreAliases(sql, app.project));
  auto spec_json = base::ParseJson(st.ColumnText(3));
  auto spec = spec_json.ok() ? ParseAppSpec(*spec_json, ctx)
                             : std::variant<AppSpec, SpecError>(SpecError{spec_json.status()});
  if (auto* error = std::get_if<SpecError>(&spec)) {
    // E.g. its flavor left the catalog: the app stays visible, failed, and can be deleted.
    app.state = AppState::kFailed;
    app.reason = "the stored spec is no longer valid: " + error->status.message();
    if (spec_json.ok()) app.spec.name = spec_json->value("name", app.id);
  } else {
    app.spec = std::get<AppSpec>(std::move(spec));
  }
  if (auto status = base::ParseJson(st.ColumnText(9)); status.ok()) {
    app.model_location = status->value("model_location", app.spec.model);
    for (const Json& j : status->value("recent_jobs", Json::array())) {
      if (j.is_string()) app.recent_jobs.push_back(j.get<std::string>());
    }
    for (const Json& e : status->value("events", Json::array())) {
      if (e.is_object()) {
        app.events.push_back({e.value("at_unix_micros", int64_t{0}), e.value("what", "")});
      }
    }
    for (const Json& r : status->value("replicas", Json::array())) {
      if (!r.is_object()) continue;
      AppReplica replica;
      replica.job = r.value("job", "");
      replica.generation = r.value("generation", int64_t{0});
      replica.port = r.value("port", uint16_t{0});
      replica.host = r.value("host", "");
      replica.job_state = r.value("job_state", "");
      replica.ready = r.value("ready", false);
      replica.draining = r.value("draining", false);
      replica.stop_sent = r.value("stop_sent", false);
      if (!replica.job.empty()) app.replicas.push_back(std::move(replica));
    }
  }
  return app;
}

Status AppService::Load(bool leading) {
  std::lock_guard lock(mu_);  // no other thread yet
  return db_.Read([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                           sql.Prepare(std::string("SELECT ") + kColumns +
                                       " FROM apps WHERE state != 'DELETED' ORDER BY id"));
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      int64_t version = 0;
      SOVAI_ASSIGN_OR_RETURN(App app, AppFromRow(sql, st, &version));
      versions_[app.id] = version;
      // A follower shows the apps as the leader keeps them. A leader's start is a restart: the
      // replicas died with the previous process, and the loop starts new ones.
      if (leading) {
        app.replicas.clear();
        if (app.state == AppState::kStopping) app.state = AppState::kStopped;
        if (app.state == AppState::kDeleting) app.state = AppState::kDeleted;
      }
      runtime_[app.id] = std::make_shared<Runtime>();
      apps_.emplace(app.id, std::move(app));
    }
    return Status();
  });
}

Status AppService::RefreshLocked(bool leading) {
  std::vector<std::pair<App, int64_t>> rows;  // changed rows and their versions
  std::vector<std::string> gone;              // rows that no longer exist
  std::map<std::string, Endpoint> endpoints;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](base::Database& sql) -> Status {
    std::vector<std::string> held;
    for (const auto& [id, app] : apps_) {
      if (app.state != AppState::kDeleted) held.push_back(id);
    }
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> load,
                           RowsToReload(sql, "apps", versions_, held));
    SOVAI_ASSIGN_OR_RETURN(base::Statement one, sql.Prepare(std::string("SELECT ") + kColumns +
                                                            " FROM apps WHERE id = ?1"));
    for (const std::string& id : load) {
      one.Reset();
      one.Bind(1, id);
      SOVAI_ASSIGN_OR_RETURN(bool row, one.Step());
      if (!row) {
        gone.push_back(id);
        continue;
      }
      int64_t version = 0;
      SOVAI_ASSIGN_OR_RETURN(App app, AppFromRow(sql, one, &version));
      rows.emplace_back(std::move(app), version);
    }
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement es,
        sql.Prepare("SELECT name, app, rate_limit, created_at FROM endpoints ORDER BY name"));
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, es.Step());
      if (!row) break;
      Endpoint e{es.ColumnText(0), es.ColumnText(1), es.ColumnText(2), es.ColumnInt(3)};
      endpoints.emplace(e.name, std::move(e));
    }
    return Status();
  }));
  endpoints_ = std::move(endpoints);
  for (auto& [row, version] : rows) {
    versions_[row.id] = version;
    auto it = apps_.find(row.id);
    if (it == apps_.end()) {
      if (row.state == AppState::kDeleted) continue;
      // New here (created on another server), or taken over with the replicas it recorded.
      auto rt = std::make_shared<Runtime>();
      AdoptLocked(row, *rt);
      runtime_[row.id] = std::move(rt);
      const std::string id = row.id;
      apps_.emplace(id, std::move(row));
      continue;
    }
    App& app = it->second;
    Runtime& rt = *runtime_[row.id];
    if (leading) {
      // The leader's replicas are what it runs; the rest is the row (another server's Scale,
      // Update, Stop, Start or Delete).
      if (row.generation != app.generation) {
        rt.generation_ready = false;
        rt.start_failures = 0;
      }
      if (!Serving(app.state) && Serving(row.state)) {  // started again
        rt.start_failures = 0;
        rt.generation_ready = false;
        rt.ever_ready = false;
      }
      row.replicas = std::move(app.replicas);
    }
    if (row.state == AppState::kDeleted && row.replicas.empty()) {
      gone.push_back(row.id);
      continue;
    }
    app = std::move(row);
  }
  for (const std::string& id : gone) {
    auto it = apps_.find(id);
    if (it == apps_.end()) continue;
    if (leading && !it->second.replicas.empty()) {
      // Deleted elsewhere while this server runs replicas: the loop stops them, then forgets it.
      it->second.state = AppState::kDeleted;
      continue;
    }
    apps_.erase(it);
    runtime_.erase(id);
  }
  return Status();
}

Status AppService::SyncLocked() { return options_.is_leader ? RefreshLocked(leading_) : Status(); }

bool AppService::Leading() const { return !options_.is_leader || options_.is_leader(); }

void AppService::AdoptLocked(const App& app, Runtime& rt) {
  rt = Runtime();
  for (const AppReplica& r : app.replicas) {
    if (!r.ready || r.draining) continue;
    rt.ever_ready = true;
    if (r.generation == app.generation) rt.generation_ready = true;
  }
}

Status AppService::Save(const App& app) {
  auto known = versions_.find(app.id);
  const int64_t expected = known == versions_.end() ? 0 : known->second;
  int64_t version = 0;
  SOVAI_RETURN_IF_ERROR(db_.Write([&](base::Database& sql) -> Status {
    // One server (no is_leader) is the only writer: nothing to check.
    SOVAI_ASSIGN_OR_RETURN(
        version, NextRowVersion(sql, "apps", "app", app.id, expected, options_.is_leader != nullptr,
                                env_.NowUnixMicros()));
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("INSERT INTO apps(id, project, user, name, spec, adapter, state, reason, "
                    "generation, desired, status, created_at, updated_at) VALUES (?1, ?2, ?3, "
                    "?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) ON CONFLICT(id) DO UPDATE SET "
                    "name = ?4, spec = ?5, adapter = ?6, state = ?7, reason = ?8, "
                    "generation = ?9, desired = ?10, status = ?11, updated_at = ?13"));
    st.Bind(1, app.id).Bind(2, app.project).Bind(3, app.user).Bind(4, app.spec.name);
    st.Bind(5, base::DumpJson(AppSpecToJson(app.spec))).Bind(6, int64_t{app.adapter ? 1 : 0});
    st.Bind(7, AppStateName(app.state)).Bind(8, app.reason).Bind(9, app.generation);
    st.Bind(10, int64_t{app.desired_replicas}).Bind(11, base::DumpJson(StatusJson(app)));
    st.Bind(12, app.created_unix_micros).Bind(13, version);
    return st.Run();
  }));
  versions_[app.id] = version;
  return Status();
}

void AppService::AddEventLocked(App& app, std::string what) {
  SOVAI_LOG(INFO).With("app", app.id) << what;
  app.events.push_back({env_.NowUnixMicros(), std::move(what)});
  if (app.events.size() > kMaxAppEvents) app.events.erase(app.events.begin());
}

void AppService::SetStateLocked(App& app, AppState state, std::string reason) {
  if (app.state == state && app.reason == reason) return;
  app.state = state;
  app.reason = std::move(reason);
  AddEventLocked(app, "state " + std::string(AppStateName(state)) +
                          (app.reason.empty() ? "" : ": " + app.reason));
}

Result<App*> AppService::FindLocked(const std::string& project, const std::string& app) {
  for (auto& [id, a] : apps_) {
    if (a.project == project && a.state != AppState::kDeleted &&
        (id == app || a.spec.name == app)) {
      return &a;
    }
  }
  return base::NotFoundError("app '" + app + "' does not exist in this project");
}

Result<ModelLocation> AppService::InspectModel(const std::string& project,
                                               const std::string& location, bool have_base) {
  if (!options_.s3_access) return ModelLocation{location, false};
  SOVAI_ASSIGN_OR_RETURN(exec::VolumeSpec where, exec::ParseVolumeSpec(location + ":/m"));
  auto reached = options_.s3_access(project, where.region);
  if (!reached.ok()) return reached.status().WithContext("'" + where.SourceName() + "'");
  const S3Access& access = *reached;
  exec::S3Client s3(exec::S3ClientOptions{.endpoint = access.endpoint,
                                          .region = access.region,
                                          .access_key = access.access_key,
                                          .secret_key = access.secret_key,
                                          .ca_file = access.ca_file,
                                          .env = &env_});
  SOVAI_RETURN_IF_ERROR(s3.status());
  std::string prefix = where.prefix;
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  auto listed = s3.ListObjects(where.bucket, prefix);
  if (!listed.ok()) {
    if (listed.status().code() == base::StatusCode::kNotFound) {
      return base::NotFoundError("bucket '" + where.bucket + "' does not exist in this project");
    }
    return listed.status();
  }
  std::set<std::string> keys;
  for (const exec::S3Object& o : *listed) keys.insert(o.key.substr(prefix.size()));
  std::string base_location = location;
  while (!base_location.empty() && base_location.back() == '/') base_location.pop_back();
  if (keys.contains("adapter_config.json")) return ModelLocation{base_location, true};
  if (keys.contains("config.json")) return ModelLocation{base_location, false};
  // The output of `sovai-engine train` (docs/engine.md): the adapter when a base is given, else
  // the merged model or the fully trained one.
  const bool adapter = keys.contains("adapter/adapter_config.json");
  if (adapter && have_base) return ModelLocation{base_location + "/adapter", true};
  if (keys.contains("merged/config.json")) return ModelLocation{base_location + "/merged", false};
  if (keys.contains("model/config.json")) return ModelLocation{base_location + "/model", false};
  if (adapter) return ModelLocation{base_location + "/adapter", true};
  return base::NotFoundError("no model at " + location +
                             ": it holds neither config.json (a model), adapter_config.json (a "
                             "PEFT adapter) nor the output of a fine-tuning job");
}

Result<ModelLocation> AppService::ResolveModels(const std::string& project, const AppSpec& spec,
                                                std::string* bad_field) {
  auto field = [&](const char* name) {
    if (bad_field) *bad_field = name;
  };
  auto model = InspectModel(project, spec.model, !spec.base_model.empty());
  if (!model.ok()) {
    field("model");
    return model.status();
  }
  if (model->adapter && spec.base_model.empty()) {
    field("base_model");
    return base::FailedPreconditionError(
        spec.model +
        " holds a PEFT adapter: give the model it was trained on with base_model "
        "(--base-model bucket@REGION/prefix)");
  }
  if (!spec.base_model.empty()) {
    auto base_model = InspectModel(project, spec.base_model, false);
    if (!base_model.ok()) {
      field("base_model");
      return base_model.status();
    }
    std::string given = spec.base_model;
    while (!given.empty() && given.back() == '/') given.pop_back();
    if (base_model->adapter || base_model->location != given) {
      field("base_model");
      return base::InvalidArgumentError(spec.base_model +
                                        " is not a model directory (config.json and weights)");
    }
  }
  return model;
}

Status AppService::CheckImage(const std::string& project, const AppSpec& spec,
                              std::string* bad_field) {
  // An oci: archive that is not there fails the request, as for a job, rather than every
  // replica's start after the app was accepted.
  if (IsRegistryImage(spec.image)) {
    return options_.jobs->ResolveImage(project, spec.image, bad_field).status();
  }
  if (!spec.image.starts_with(kOciImagePrefix)) return Status();
  JobSpec image_only;
  image_only.image = spec.image;
  return options_.jobs->CheckSources(project, image_only, bad_field);
}

Result<App> AppService::Create(const std::string& project, const std::string& user, AppSpec spec,
                               std::string* bad_field) {
  auto field = [&](const char* name) {
    if (bad_field) *bad_field = name;
  };
  auto flavor = options_.flavors->Find(spec.flavor);
  if (!flavor.ok()) {
    field("flavor");
    return flavor.status();
  }
  SOVAI_ASSIGN_OR_RETURN(ResourceRequest request, RequestFor(**flavor, spec.units));
  if (Status fits = options_.jobs->CheckFits(request); !fits.ok()) {
    field("flavor");
    return fits;
  }
  App app;
  if (!spec.model.empty()) {
    SOVAI_ASSIGN_OR_RETURN(ModelLocation model, ResolveModels(project, spec, bad_field));
    app.adapter = model.adapter;
    app.model_location = model.location;
  }
  SOVAI_RETURN_IF_ERROR(CheckImage(project, spec, bad_field));
  std::lock_guard lock(mu_);
  SOVAI_RETURN_IF_ERROR(SyncLocked());
  for (const auto& [id, a] : apps_) {
    if (a.project == project && a.spec.name == spec.name && a.state != AppState::kDeleted) {
      field("name");
      return base::AlreadyExistsError("an app named '" + spec.name +
                                      "' already exists in this project (" + id + ")");
    }
  }
  app.id = "app_" + ulids_.Next().ToString();
  app.project = project;
  app.user = user;
  app.spec = std::move(spec);
  app.desired_replicas = InitialDesired(app.spec);
  app.created_unix_micros = env_.NowUnixMicros();
  AddEventLocked(app, "created with " + std::to_string(app.desired_replicas) + " replica(s)");
  SOVAI_RETURN_IF_ERROR(Save(app));
  runtime_[app.id] = std::make_shared<Runtime>();
  auto [it, inserted] = apps_.emplace(app.id, app);
  cv_.notify_all();
  return it->second;
}

Result<App> AppService::Get(const std::string& project, const std::string& app) {
  App out;
  {
    std::lock_guard lock(mu_);
    SOVAI_RETURN_IF_ERROR(SyncLocked());
    SOVAI_ASSIGN_OR_RETURN(App * found, FindLocked(project, app));
    out = *found;
  }
  FillUsage(out);
  return out;
}

void AppService::FillUsage(App& app) {
  Status read = db_.Read([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(prompt_tokens), 0), "
                    "COALESCE(SUM(completion_tokens), 0) FROM app_usage WHERE app = ?1"));
    st.Bind(1, app.id);
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (row) {
      app.usage_requests = st.ColumnInt(0);
      app.usage_prompt_tokens = st.ColumnInt(1);
      app.usage_completion_tokens = st.ColumnInt(2);
    }
    return Status();
  });
  if (!read.ok()) SOVAI_LOG(WARNING).With("app", app.id) << "reading usage: " << read;
}

Status AppService::RecordUsage(const std::vector<AppUsageRecord>& rows, int64_t now_unix_micros) {
  if (rows.empty()) return Status();
  const int64_t minute = now_unix_micros / 60'000'000;
  return db_.Write([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("INSERT INTO app_usage(app, token, project, minute, requests, prompt_tokens, "
                    "completion_tokens) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(app, "
                    "token, project, minute) DO UPDATE SET requests = app_usage.requests + ?5, "
                    "prompt_tokens = app_usage.prompt_tokens + ?6, "
                    "completion_tokens = app_usage.completion_tokens + ?7"));
    for (const AppUsageRecord& r : rows) {
      st.Reset();
      st.Bind(1, r.app).Bind(2, r.token).Bind(3, r.project).Bind(4, minute);
      st.Bind(5, r.requests).Bind(6, r.prompt_tokens).Bind(7, r.completion_tokens);
      SOVAI_RETURN_IF_ERROR(st.Run());
    }
    return Status();
  });
}

Result<std::vector<App>> AppService::List(const std::string& project,
                                          const std::map<std::string, std::string>& labels) {
  std::unique_lock lock(mu_);
  SOVAI_RETURN_IF_ERROR(SyncLocked());
  std::vector<App> out;
  for (const auto& [id, app] : apps_) {
    if (app.project != project || app.state == AppState::kDeleted) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = app.spec.labels.find(k);
      match = match && it != app.spec.labels.end() && it->second == v;
    }
    if (match) out.push_back(app);
    if (out.size() >= static_cast<size_t>(kMaxPageSize)) break;
  }
  lock.unlock();
  for (App& app : out) FillUsage(app);
  return out;
}

Result<App> AppService::Scale(const std::string& project, const std::string& app_name,
                              AppSpec spec) {
  std::lock_guard lock(mu_);
  SOVAI_RETURN_IF_ERROR(SyncLocked());
  SOVAI_ASSIGN_OR_RETURN(App * app, FindLocked(project, app_name));
  if (!Serving(app->state) && app->state != AppState::kStopped) {
    return base::FailedPreconditionError("app " + app->id + " is " +
                                         std::string(AppStateName(app->state)));
  }
  const int before = app->desired_replicas;
  app->spec.replicas = spec.replicas;
  app->spec.autoscaling = spec.autoscaling;
  if (app->spec.autoscaling) {
    app->desired_replicas = std::clamp(app->desired_replicas, app->spec.autoscaling->min_replicas,
                                       app->spec.autoscaling->max_replicas);
  } else {
    app->desired_replicas = app->spec.replicas;
  }
  AddEventLocked(*app, "scale " + std::to_string(before) + " -> " +
                           std::to_string(app->desired_replicas) + ": requested by the user");
  SOVAI_RETURN_IF_ERROR(Save(*app));
  cv_.notify_all();
  return *app;
}

Result<App> AppService::Update(const std::string& project, const std::string& app_name,
                               AppSpec spec, bool rolling, std::string* bad_field) {
  std::optional<ModelLocation> model;
  if (rolling && !spec.model.empty()) {
    SOVAI_ASSIGN_OR_RETURN(model, ResolveModels(project, spec, bad_field));
  }
  if (rolling) SOVAI_RETURN_IF_ERROR(CheckImage(project, spec, bad_field));
  std::lock_guard lock(mu_);
  SOVAI_RETURN_IF_ERROR(SyncLocked());
  SOVAI_ASSIGN_OR_RETURN(App * app, FindLocked(project, app_name));
  if (app->state == AppState::kDeleting) {
    return base::FailedPreconditionError("app " + app->id + " is being deleted");
  }
  spec.name = app->spec.name;
  spec.replicas = app->spec.replicas;
  spec.autoscaling = app->spec.autoscaling;
  app->spec = std::move(spec);
  if (rolling) {
    if (model) {
      app->adapter = model->adapter;
      app->model_location = model->location;
    }
    app->generation += 1;
    runtime_[app->id]->generation_ready = false;
    runtime_[app->id]->start_failures = 0;
    AddEventLocked(*app,
                   "update: rolling replacement to generation " + std::to_string(app->generation));
  }
  SOVAI_RETURN_IF_ERROR(Save(*app));
  cv_.notify_all();
  return *app;
}

Result<App> AppService::Stop(const std::string& project, const std::string& app_name) {
  return StopBecause(project, app_name, "stopped by the user");
}

Result<App> AppService::StopBecause(const std::string& project, const std::string& app_name,
                                    const std::string& reason) {
  std::lock_guard lock(mu_);
  SOVAI_RETURN_IF_ERROR(SyncLocked());
  SOVAI_ASSIGN_OR_RETURN(App * app, FindLocked(project, app_name));
  if (app->state == AppState::kDeleting) {
    return base::FailedPreconditionError("app " + app->id + " is being deleted");
  }
  if (app->state == AppState::kStopped || app->state == AppState::kStopping) return *app;
  SetStateLocked(*app, app->replicas.empty() ? AppState::kStopped : AppState::kStopping, reason);
  SOVAI_RETURN_IF_ERROR(Save(*app));
  cv_.notify_all();
  return *app;
}

Result<App> AppService::StartApp(const std::string& project, const std::string& app_name) {
  std::lock_guard lock(mu_);
  SOVAI_RETURN_IF_ERROR(SyncLocked());
  SOVAI_ASSIGN_OR_RETURN(App * app, FindLocked(project, app_name));
  if (app->state != AppState::kStopped && app->state != AppState::kFailed) {
    return base::FailedPreconditionError("app " + app->id + " is " +
                                         std::string(AppStateName(app->state)) +
                                         "; only a STOPPED or FAILED app can be started");
  }
  if (app->spec.flavor.empty()) {
    return base::FailedPreconditionError("app " + app->id + ": " + app->reason);
  }
  Runtime& rt = *runtime_[app->id];
  rt.start_failures = 0;
  rt.generation_ready = false;
  rt.ever_ready = false;
  app->desired_replicas = InitialDesired(app->spec);
  SetStateLocked(*app, AppState::kQueued);
  SOVAI_RETURN_IF_ERROR(Save(*app));
  cv_.notify_all();
  return *app;
}

Result<App> AppService::Delete(const std::string& project, const std::string& app_name) {
  std::lock_guard lock(mu_);
  SOVAI_RETURN_IF_ERROR(SyncLocked());
  SOVAI_ASSIGN_OR_RETURN(App * app, FindLocked(project, app_name));
  SetStateLocked(*app, app->replicas.empty() ? AppState::kDeleted : AppState::kDeleting,
                 "deleted by the user");
  SOVAI_RETURN_IF_ERROR(Save(*app));
  App out = *app;
  cv_.notify_all();
  return out;
}

Result<exec::LogChunk> AppService::ReadLog(const std::string& project, const std::string& app_name,
                                           const std::string& replica, uint64_t offset,
                                           size_t max_bytes) {
  std::string job;
  {
    std::lock_guard lock(mu_);
    SOVAI_RETURN_IF_ERROR(SyncLocked());
    SOVAI_ASSIGN_OR_RETURN(App * app, FindLocked(project, app_name));
    if (replica.empty()) {
      if (app->recent_jobs.empty()) return exec::LogChunk{};
      job = app->recent_jobs.back();
    } else if (std::find(app->recent_jobs.begin(), app->recent_jobs.end(), replica) !=
               app->recent_jobs.end()) {
      job = replica;
    } else {
      return base::NotFoundError("app " + app->id + " has no replica '" + replica + "'");
    }
  }
  return options_.jobs->ReadLog(project, job, offset, max_bytes);
}

Status AppService::SetDesiredReplicas(const std::string& app_id, int replicas,
                                      const std::string& reason) {
  std::lock_guard lock(mu_);
  // The autoscaler of a follower's gateway measures no replica (they run where the leader is):
  // its decisions are not the app's.
  if (!leading_) return Status();
  auto it = apps_.find(app_id);
  if (it == apps_.end()) return base::NotFoundError("app '" + app_id + "' does not exist");
  App& app = it->second;
  if (!app.spec.autoscaling || !Serving(app.state)) return Status();
  replicas =
      std::clamp(replicas, app.spec.autoscaling->min_replicas, app.spec.autoscaling->max_replicas);
  if (replicas == app.desired_replicas) return Status();
  AddEventLocked(app, "scale " + std::to_string(app.desired_replicas) + " -> " +
                          std::to_string(replicas) + ": " + reason);
  app.desired_replicas = replicas;
  SOVAI_RETURN_IF_ERROR(Save(app));
  cv_.notify_all();
  return Status();
}

AppRoute AppService::RouteOfLocked(const App& app) const {
  AppRoute route;
  route.id = app.id;
  route.project = app.project;
  route.name = app.spec.name;
  route.labels = app.spec.labels;
  route.unsecure_http = app.spec.unsecure_http;
  route.model = app.spec.image.empty();
  route.state = app.state;
  route.generation = app.generation;
  route.autoscaling = app.spec.autoscaling;
  route.desired_replicas = app.desired_replicas;
  for (const AppReplica& r : app.replicas) {
    if (r.ready && !r.draining) route.ready.push_back({r.job, r.port, r.host});
  }
  return route;
}

std::optional<AppRoute> AppService::Route(const std::string& app_id) {
  std::lock_guard lock(mu_);
  auto it = apps_.find(app_id);
  if (it == apps_.end() || it->second.state == AppState::kDeleted) return std::nullopt;
  AppRoute route = RouteOfLocked(it->second);
  if (!leading_) route.ready.clear();  // the replicas are the leader's to route to
  return route;
}

std::vector<AppRoute> AppService::Routes() {
  std::lock_guard lock(mu_);
  std::vector<AppRoute> out;
  for (const auto& [id, app] : apps_) {
    if (app.state == AppState::kDeleted) continue;
    out.push_back(RouteOfLocked(app));
    if (!leading_) out.back().ready.clear();
  }
  return out;
}

AppUsage AppService::MeasureUsage(const std::string& app_id) {
  std::vector<std::string> jobs;
  uint64_t cpu_millis = 0, memory_bytes = 0;
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard lock(mu_);
    if (!leading_) return {};  // a follower runs no replica to measure
    auto it = apps_.find(app_id);
    if (it == apps_.end()) return {};
    auto flavor = options_.flavors->Find(it->second.spec.flavor);
    if (!flavor.ok()) return {};
    auto request = RequestFor(**flavor, it->second.spec.units);
    if (!request.ok()) return {};
    cpu_millis = static_cast<uint64_t>(request->cpus) * 1000;
    memory_bytes = request->memory_bytes;
    for (const AppReplica& r : it->second.replicas) {
      if (r.ready && !r.draining) jobs.push_back(r.job);
    }
    rt = runtime_[app_id];
  }
  AppUsage usage;
  const auto now = std::chrono::steady_clock::now();
  std::map<std::string, uint64_t> ticks;
  double cpu_sum = 0, ram_sum = 0;
  for (const std::string& job : jobs) {
    auto pids = options_.jobs->ProcessIds(job);
    if (!pids.ok() || pids->empty()) continue;
    auto measured = exec::MeasureProcesses(*pids);
    if (!measured.ok()) continue;
    ticks[job] = measured->cpu_millis;
    ram_sum += memory_bytes == 0 ? 0
                                 : 100.0 * static_cast<double>(measured->rss_bytes) /
                                       static_cast<double>(memory_bytes);
    std::lock_guard lock(mu_);
    auto prev = rt->cpu_ticks.find(job);
    const double elapsed_ms =
        std::chrono::duration<double, std::milli>(now - rt->measured_at).count();
    if (prev != rt->cpu_ticks.end() && elapsed_ms > 0 && cpu_millis > 0) {
      cpu_sum += 100.0 * static_cast<double>(measured->cpu_millis - prev->second) /
                 (elapsed_ms * static_cast<double>(cpu_millis) / 1000.0);
    }
    usage.replicas += 1;
  }
  std::lock_guard lock(mu_);
  rt->cpu_ticks = std::move(ticks);
  rt->measured_at = now;
  if (usage.replicas > 0) {
    usage.cpu_percent = cpu_sum / usage.replicas;
    usage.ram_percent = ram_sum / usage.replicas;
  }
  return usage;
}

Status AppService::LoadEndpoints() {
  return db_.Read([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("SELECT name, app, rate_limit, created_at FROM endpoints ORDER BY name"));
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      Endpoint e{st.ColumnText(0), st.ColumnText(1), st.ColumnText(2), st.ColumnInt(3)};
      endpoints_.emplace(e.name, std::move(e));
    }
    return Status();
  });
}

Result<Endpoint> AppService::CreateEndpoint(const std::string& project, const std::string& user,
                                            AppSpec spec, std::string rate_limit,
                                            std::string* bad_field) {
  {
    std::lock_guard lock(mu_);
    SOVAI_RETURN_IF_ERROR(SyncLocked());
    if (endpoints_.contains(spec.name)) {
      if (bad_field) *bad_field = "name";
      return base::AlreadyExistsError("an endpoint named '" + spec.name + "' already exists");
    }
  }
  SOVAI_ASSIGN_OR_RETURN(App app, Create(project, user, std::move(spec), bad_field));
  Endpoint endpoint{app.spec.name, app.id, std::move(rate_limit), env_.NowUnixMicros()};
  Status saved = db_.Write([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                           sql.Prepare("INSERT INTO endpoints(name, app, rate_limit, created_at) "
                                       "VALUES (?1, ?2, ?3, ?4)"));
    st.Bind(1, endpoint.name).Bind(2, endpoint.app).Bind(3, endpoint.rate_limit);
    st.Bind(4, endpoint.created_unix_micros);
    return st.Run();
  });
  if (!saved.ok()) {
    (void)Delete(project, app.id);
    return saved;
  }
  std::lock_guard lock(mu_);
  endpoints_[endpoint.name] = endpoint;
  return endpoint;
}

std::vector<Endpoint> AppService::ListEndpoints() {
  std::lock_guard lock(mu_);
  std::vector<Endpoint> out;
  for (const auto& [name, e] : endpoints_) out.push_back(e);
  return out;
}

std::optional<Endpoint> AppService::FindEndpoint(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = endpoints_.find(name);
  if (it == endpoints_.end()) return std::nullopt;
  return it->second;
}

Status AppService::DeleteEndpoint(const std::string& name) {
  {
    std::lock_guard lock(mu_);
    SOVAI_RETURN_IF_ERROR(SyncLocked());
  }
  std::optional<Endpoint> endpoint = FindEndpoint(name);
  if (!endpoint) return base::NotFoundError("endpoint '" + name + "' does not exist");
  SOVAI_RETURN_IF_ERROR(db_.Write([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                           sql.Prepare("DELETE FROM endpoints WHERE name = ?1"));
    st.Bind(1, name);
    return st.Run();
  }));
  std::string project;
  {
    std::lock_guard lock(mu_);
    endpoints_.erase(name);
    auto it = apps_.find(endpoint->app);
    if (it == apps_.end()) return Status();
    project = it->second.project;
  }
  auto deleted = Delete(project, endpoint->app);
  return deleted.ok() || deleted.status().code() == base::StatusCode::kNotFound ? Status()
                                                                                : deleted.status();
}

Result<std::string> AppService::StartReplica(const App& app, uint16_t port) {
  JobSpec job;
  job.name = app.spec.name + "-replica";
  job.flavor = app.spec.flavor;
  job.units = app.spec.units;
  job.env = app.spec.env;
  job.labels = app.spec.labels;
  job.labels[std::string(kAppLabel)] = app.id;
  job.network = NetworkMode::kHost;
  job.timeout_s = kAppReplicaTimeoutS;
  const std::string listen =
      (options_.replicas_on_other_hosts ? "0.0.0.0:" : "127.0.0.1:") + std::to_string(port);
  if (!app.spec.model.empty()) {
    job.image = std::string(kServeImage);
    int threads = 1;
    if (auto flavor = options_.flavors->Find(app.spec.flavor); flavor.ok()) {
      if (auto request = RequestFor(**flavor, app.spec.units); request.ok()) {
        threads = std::max(1, request->cpus);
      }
    }
    if (app.adapter) {
      job.volumes = {app.spec.base_model + ":" + kBaseModelMount + ":ro:cache",
                     app.model_location + ":" + kModelMount + ":ro:cache"};
      job.command = {"--model",
                     kBaseModelMount,
                     "--served-model-name",
                     app.spec.name + "-base",
                     "--lora",
                     app.spec.name + "=" + kModelMount};
    } else {
      job.volumes = {app.model_location + ":" + kModelMount + ":ro:cache"};
      job.command = {"--model", kModelMount, "--served-model-name", app.spec.name};
    }
    job.command.insert(job.command.end(),
                       {"--listen", listen, "--threads", std::to_string(threads)});
    if (!app.spec.task.empty()) job.command.insert(job.command.end(), {"--task", app.spec.task});
  } else {
    job.image = app.spec.image;
    job.command = app.spec.command;
  }
  job.env["PORT"] = std::to_string(port);
  std::string bad_field;
  SOVAI_ASSIGN_OR_RETURN(Job submitted,
                         options_.jobs->Submit(app.project, app.user, std::move(job), &bad_field));
  return submitted.id;
}

void AppService::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    Round();
    lock.lock();
    cv_.wait_for(lock, options_.reconcile_interval, [&] { return stopping_; });
  }
}

void AppService::Round() {
  const bool leading = Leading();
  std::vector<std::string> ids;
  std::vector<AppRoute> withdrawn;  // routes of a server that stopped leading
  {
    std::lock_guard lock(mu_);
    if (options_.is_leader) {
      if (Status st = RefreshLocked(leading); !st.ok()) {
        SOVAI_LOG(WARNING) << "apps: reading the changes of other servers: " << st;
        return;  // a round on stale rows could act on what another server already changed
      }
    }
    if (leading && !leading_) {
      SOVAI_LOG(INFO) << "this server now runs the apps (it leads): it follows their replicas";
      for (const auto& [id, app] : apps_) AdoptLocked(app, *runtime_[id]);
    } else if (!leading && leading_) {
      SOVAI_LOG(WARNING) << "this server no longer leads: it stops running the apps and routes "
                            "no request to their replicas";
      for (const auto& [id, app] : apps_) {
        runtime_[id]->published.reset();
        withdrawn.push_back(RouteOfLocked(app));
        withdrawn.back().ready.clear();
      }
    }
    leading_ = leading;
    if (leading) {
      for (const auto& [id, app] : apps_) ids.push_back(id);
    }
  }
  if (options_.on_route) {
    for (const AppRoute& route : withdrawn) options_.on_route(route);
  }
  for (const std::string& id : ids) Reconcile(id);
}

void AppService::Reconcile(const std::string& app_id) {
  App snapshot;
  std::shared_ptr<Runtime> rt;
  bool generation_ready = false;
  {
    std::lock_guard lock(mu_);
    auto it = apps_.find(app_id);
    if (it == apps_.end()) return;
    snapshot = it->second;
    rt = runtime_[app_id];
    generation_ready = rt->generation_ready;
  }
  const auto now = std::chrono::steady_clock::now();
  const int64_t now_ms = env_.NowMonotonicMicros() / 1000;

  // 1. Look at every replica: its job, its probe.
  std::vector<AppReplica> replicas;
  std::vector<std::string> events;
  bool failed_start = false;
  bool saw_generation_ready = false, saw_ready = false;  // applied under mu_ below
  std::string failure;
  for (AppReplica r : snapshot.replicas) {
    auto job = options_.jobs->Get(snapshot.project, r.job);
    if (!job.ok() || IsTerminal(job->state)) {
      if (!r.draining) {
        std::string why = job.ok() ? std::string(JobStateName(job->state)) + ": " + job->reason
                                   : job.status().message();
        events.push_back("replica " + r.job + " ended (" + why + ")");
        if (r.generation == snapshot.generation && !generation_ready) {
          failed_start = true;
          failure = "replica " + r.job + " ended before it was ready (" + why +
                    "); see `sovai app logs " + snapshot.spec.name + " --replica " + r.job + "`";
        }
      }
      rt->last_probe.erase(r.job);
      continue;
    }
    if (job->state == JobState::kRunning && r.job_state != "RUNNING" && !r.draining) {
      events.push_back("replica " + r.job + " started on port " + std::to_string(r.port));
    }
    r.job_state = std::string(JobStateName(job->state));
    r.host = job->node;
    if (job->state == JobState::kRunning && !r.draining) {
      auto& last = rt->last_probe[r.job];
      if (!r.ready || now - last >= options_.probe_interval) {
        last = now;
        if (options_.probe(r.host, r.port, snapshot.spec.probe_path)) {
          if (!r.ready) events.push_back("replica " + r.job + " is ready");
          r.ready = true;
          r.probe_failures = 0;
          if (r.generation == snapshot.generation) saw_generation_ready = true;
          saw_ready = true;
        } else if (r.ready && ++r.probe_failures >= kMaxProbeFailures) {
          r.ready = false;
          events.push_back("replica " + r.job + " failed its probe " +
                           std::to_string(r.probe_failures) + " times; no more requests");
        }
      }
    }
    replicas.push_back(std::move(r));
  }

  // 2. Decide under the lock, from the app as it is now (the user may have changed it).
  std::vector<AppReplica> to_start;  // filled with ports below
  int starts = 0;
  std::vector<std::string> to_stop;
  {
    std::lock_guard lock(mu_);
    auto it = apps_.find(app_id);
    if (it == apps_.end()) return;
    App& app = it->second;
    bool dirty = !events.empty();
    for (std::string& e : events) AddEventLocked(app, std::move(e));
    if (saw_ready) rt->ever_ready = true;
    if (saw_generation_ready && app.generation == snapshot.generation) {
      rt->generation_ready = true;
      rt->start_failures = 0;
    }
    if (failed_start && Serving(app.state)) {
      rt->start_failures += 1;
      if (rt->start_failures >= kMaxAppStartFailures) {
        SetStateLocked(
            app, AppState::kFailed,
            std::to_string(rt->start_failures) + " replicas in a row failed: " + failure);
      }
    }
    const bool serving = Serving(app.state);
    int active_new = 0, ready_new = 0, old_ready = 0;
    for (AppReplica& r : replicas) {
      if (!serving) r.draining = true;
      if (r.draining) continue;
      if (r.generation == app.generation) {
        ++active_new;
        if (r.ready) ++ready_new;
      } else if (r.ready) {
        ++old_ready;
      }
    }
    if (serving) {
      // Too many of the current generation: drain the least useful (not ready, newest) first.
      for (auto r = replicas.rbegin(); r != replicas.rend() && active_new > app.desired_replicas;
           ++r) {
        if (!r->draining && r->generation == app.generation && !r->ready) {
          r->draining = true;
          --active_new;
        }
      }
      for (auto r = replicas.rbegin(); r != replicas.rend() && active_new > app.desired_replicas;
           ++r) {
        if (!r->draining && r->generation == app.generation) {
          r->draining = true;
          --active_new;
          --ready_new;
        }
      }
      // Old generations: keep ready ones while the new generation is not ready in full.
      int keep_old = std::max(0, app.desired_replicas - ready_new);
      for (AppReplica& r : replicas) {
        if (r.draining || r.generation == app.generation) continue;
        if (r.ready && keep_old > 0) {
          --keep_old;
        } else {
          r.draining = true;
        }
      }
      if (app.state != AppState::kFailed) starts = std::max(0, app.desired_replicas - active_new);
    }
    for (AppReplica& r : replicas) {
      if (!r.draining || r.stop_sent) continue;
      if (r.drain_since_ms == 0) r.drain_since_ms = now_ms;
      const uint64_t busy = options_.in_flight ? options_.in_flight(app.id, r.job) : 0;
      if (busy == 0 || now_ms - r.drain_since_ms >= options_.drain_timeout.count()) {
        to_stop.push_back(r.job);
        r.stop_sent = true;
      }
    }
    app.replicas = replicas;
    if (dirty) (void)Save(app);
  }
  for (const std::string& job : to_stop) {
    auto stopped = options_.jobs->Stop(snapshot.project, job);
    if (!stopped.ok() && stopped.status().code() != base::StatusCode::kFailedPrecondition) {
      SOVAI_LOG(WARNING).With("app", app_id)
          << "stopping replica " << job << ": " << stopped.status();
    }
  }
  std::vector<std::pair<std::string, AppReplica>> started;
  std::vector<std::string> submitted_events;  // one per `started`
  std::string start_error;
  for (int i = 0; i < starts; ++i) {
    auto port = FreeLoopbackPort();
    if (!port.ok()) {
      start_error = port.status().message();
      break;
    }
    auto job = StartReplica(snapshot, *port);
    if (!job.ok()) {
      start_error = job.status().message();
      break;
    }
    AppReplica r;
    r.job = *job;
    r.generation = snapshot.generation;
    r.port = *port;
    r.job_state = "QUEUED";
    started.emplace_back(*job, r);
    submitted_events.push_back(
        SubmittedEvent(*job, *port, options_.jobs->Get(snapshot.project, *job)));
  }

  // 3. Record the new replicas, the state and the route.
  std::optional<AppRoute> publish;
  {
    std::lock_guard lock(mu_);
    auto it = apps_.find(app_id);
    if (it == apps_.end()) return;
    App& app = it->second;
    for (size_t i = 0; i < started.size(); ++i) {
      auto& [job, r] = started[i];
      if (r.generation != app.generation || !Serving(app.state)) {
        // The app changed while the job was submitted: this replica is not wanted after all.
        r.draining = true;
      }
      app.replicas.push_back(r);
      app.recent_jobs.push_back(job);
      if (app.recent_jobs.size() > kMaxRecentJobs) app.recent_jobs.erase(app.recent_jobs.begin());
      AddEventLocked(app, std::move(submitted_events[i]));
    }
    if (!start_error.empty()) {
      SetStateLocked(app, AppState::kFailed, "starting a replica: " + start_error);
    }
    int ready = 0, active = 0, draining = 0;
    bool all_queued = true;
    for (const AppReplica& r : app.replicas) {
      if (r.draining) {
        ++draining;
        continue;
      }
      ++active;
      if (r.ready && r.generation == app.generation) ++ready;
      if (r.job_state != "QUEUED") all_queued = false;
    }
    if (app.state == AppState::kStopping && app.replicas.empty()) {
      SetStateLocked(app, AppState::kStopped, app.reason);
    } else if (app.state == AppState::kDeleting && app.replicas.empty()) {
      SetStateLocked(app, AppState::kDeleted, app.reason);
    } else if (app.state == AppState::kFailed && !app.replicas.empty()) {
      for (AppReplica& r : app.replicas) r.draining = true;
    } else if (Serving(app.state)) {
      AppState next;
      if (ready == app.desired_replicas && active == app.desired_replicas && draining == 0) {
        next = AppState::kRunning;
      } else if (!rt->ever_ready) {
        next = all_queued && active > 0 ? AppState::kQueued : AppState::kInitializing;
      } else {
        next = AppState::kScaling;
      }
      SetStateLocked(app, next);
    }
    AppRoute route = RouteOfLocked(app);
    const bool changed = !rt->published || rt->published->ready != route.ready ||
                         rt->published->state != route.state ||
                         rt->published->labels != route.labels ||
                         rt->published->unsecure_http != route.unsecure_http ||
                         rt->published->generation != route.generation ||
                         rt->published->desired_replicas != route.desired_replicas ||
                         rt->published->autoscaling != route.autoscaling;
    if (changed) {
      rt->published = route;
      publish = route;
    }
    if (changed || !started.empty() || !to_stop.empty()) (void)Save(app);
    // A replica submitted while the app was deleted (Delete saw none, so DELETED at once) is
    // still running: the app stays in the table, invisible, until later ticks have stopped it.
    if (app.state == AppState::kDeleted && app.replicas.empty()) {
      apps_.erase(it);
      runtime_.erase(app_id);
    }
  }
  if (publish && options_.on_route) options_.on_route(*publish);
}

}  // namespace sovai::control
