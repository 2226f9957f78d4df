#include "control/apps.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "base/json.h"
#include "base/log.h"
#include "base/strings.h"
#include "base/time.h"
#include "control/internal/apps_runtime.h"
#include "exec/resources.h"
#include "exec/s3_client.h"
#include "exec/volume_spec.h"

namespace sovai::control {

namespace {

using base::Result;
using base::Status;
using Json = nlohmann::json;
using apps_internal::Serving;

constexpr std::string_view kStateNames[] = {"QUEUED",  "INITIALIZING", "RUNNING",
                                            "SCALING", "STOPPING",     "STOPPED",
                                            "FAILED",  "DELETING",     "DELETED"};

int InitialDesired(const AppSpec& spec) {
  return spec.autoscaling ? std::max(spec.autoscaling->min_replicas, 1) : spec.replicas;
}

}  // namespace

std::string_view AppStateName(AppState state) { return kStateNames[static_cast<int>(state)]; }

namespace apps_internal {

std::optional<AppState> ParseAppState(std::string_view name) {
  for (size_t i = 0; i < std::size(kStateNames); ++i) {
    if (kStateNames[i] == name) return static_cast<AppState>(i);
  }
  return std::nullopt;
}

}  // namespace apps_internal

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

AppService::AppService(ControlDb& db, AppServiceOptions options)
    : db_(db),
      options_(std::move(options)),
      env_(options_.env != nullptr ? *options_.env : base::Env::Default()) {}

AppService::~AppService() { Shutdown(); }

Result<std::unique_ptr<AppService>> AppService::Start(ControlDb& db, AppServiceOptions options) {
  SOVAI_CHECK(options.jobs != nullptr && options.flavors != nullptr);
  std::unique_ptr<AppService> service(new AppService(db, std::move(options)));
  if (!service->options_.probe) service->options_.probe = apps_internal::HttpProbe;
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

}  // namespace sovai::control
