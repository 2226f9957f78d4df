// AppService's rows: `apps` (the spec, the state and, in `status`, the replicas as the leader
// last saw them), `endpoints` and `app_usage`; reading other servers' changes on a shared
// database (docs/state.md).
#include "base/json.h"
#include "base/log.h"
#include "control/apps.h"
#include "control/datastores.h"
#include "control/internal/apps_runtime.h"
#include "control/row_version.h"

namespace sovai::control {

namespace {

using base::Result;
using base::Status;
using Json = nlohmann::json;
using apps_internal::Serving;

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

Result<std::map<std::string, Endpoint>> ReadEndpoints(base::Database& sql) {
  SOVAI_ASSIGN_OR_RETURN(
      base::Statement st,
      sql.Prepare("SELECT name, app, rate_limit, created_at FROM endpoints ORDER BY name"));
  std::map<std::string, Endpoint> endpoints;
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    Endpoint e{st.ColumnText(0), st.ColumnText(1), st.ColumnText(2), st.ColumnInt(3)};
    endpoints.emplace(e.name, std::move(e));
  }
  return endpoints;
}

}  // namespace

Result<App> AppService::AppFromRow(base::Database& sql, const base::Statement& st,
                                   int64_t* version) {
  SpecContext ctx{options_.flavors, options_.region, options_.other_regions};
  App app;
  app.id = st.ColumnText(0);
  app.project = st.ColumnText(1);
  app.user = st.ColumnText(2);
  app.adapter = st.ColumnInt(4) != 0;
  app.state = apps_internal::ParseAppState(st.ColumnText(5)).value_or(AppState::kFailed);
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
    SOVAI_ASSIGN_OR_RETURN(endpoints, ReadEndpoints(sql));
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

Status AppService::LoadEndpoints() {
  return db_.Read([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(endpoints_, ReadEndpoints(sql));
    return Status();
  });
}

}  // namespace sovai::control
