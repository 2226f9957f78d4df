// Apps, notebooks and the endpoints catalog: /v1/apps, /v1/notebooks, /v1/endpoints.

#include "control/rest_handlers.h"

namespace sovai::control::rest {
namespace {

class AppApi : public RestHandlers {
 public:
  using RestHandlers::RestHandlers;

  // --- Apps (docs/api/apps.md) ---
  net::Response CreateApp(net::Request& request, const Principal& p) {
    bool dry_run = false;
    if (auto bad = ParseDryRun(request, &dry_run)) return *bad;
    if (dry_run) return DryRunApp(request, p);
    AppService* apps = control_.apps();
    if (apps == nullptr) return Problem(NoJobs());
    auto spec = ReadSpec<AppSpec>(request, p, control_.flavors(), ParseAppSpec);
    if (auto* answer = std::get_if<net::Response>(&spec)) return std::move(*answer);
    std::string bad_field;
    auto app =
        apps->Create(p.project.id, p.user.id, std::get<AppSpec>(std::move(spec)), &bad_field);
    if (!app.ok()) {
      return bad_field.empty() ? Problem(app.status()) : FieldProblem(app.status(), bad_field);
    }
    return JsonResponse(201, AppToJson(*app, ApiBase(request)));
  }

  net::Response ListApps(net::Request& request, const Principal& p) {
    return ListLabelled(request, p, control_.apps(), &AppToJson);
  }

  net::Response GetApp(net::Request& request, const Principal& p) {
    auto app = VisibleApp(request, p);
    if (!app.ok()) return Problem(app.status());
    return JsonResponse(200, AppToJson(*app, ApiBase(request)));
  }

  net::Response ScaleApp(net::Request& request, const Principal& p) {
    auto app = VisibleApp(request, p);
    if (!app.ok()) return Problem(app.status());
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    auto ctx = Spec(control_.flavors(), p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = ScaleAppSpec(app->spec, *body, *ctx);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      return ProblemResponse(error->status, error->fields);
    }
    auto scaled = control_.apps()->Scale(p.project.id, app->id, std::get<AppSpec>(parsed));
    if (!scaled.ok()) return Problem(scaled.status());
    return JsonResponse(200, AppToJson(*scaled, ApiBase(request)));
  }

  net::Response UpdateApp(net::Request& request, const Principal& p) {
    auto app = VisibleApp(request, p);
    if (!app.ok()) return Problem(app.status());
    bool rolling = false;
    auto spec = ReadSpec<AppSpec>(request, p, control_.flavors(),
                                  [&](const nlohmann::json& body, const SpecContext& ctx) {
                                    return PatchAppSpec(app->spec, body, ctx, &rolling);
                                  });
    if (auto* answer = std::get_if<net::Response>(&spec)) return std::move(*answer);
    std::string bad_field;
    auto updated = control_.apps()->Update(p.project.id, app->id,
                                           std::get<AppSpec>(std::move(spec)), rolling, &bad_field);
    if (!updated.ok()) {
      return bad_field.empty() ? Problem(updated.status())
                               : FieldProblem(updated.status(), bad_field);
    }
    return JsonResponse(200, AppToJson(*updated, ApiBase(request)));
  }

  net::Response StopApp(net::Request& request, const Principal& p) {
    return Lifecycle(request, p, control_.apps(), "app", &AppService::Stop, &AppToJson);
  }
  net::Response StartApp(net::Request& request, const Principal& p) {
    return Lifecycle(request, p, control_.apps(), "app", &AppService::StartApp, &AppToJson);
  }
  net::Response DeleteApp(net::Request& request, const Principal& p) {
    return Lifecycle(request, p, control_.apps(), "app", &AppService::Delete, &AppToJson);
  }

  // A replica's log from ?offset=, as GET /v1/jobs/{id}/logs answers it (no follow: the CLI
  // polls with the offset it got).
  net::Response AppLogs(net::Request& request, const Principal& p) {
    auto app = VisibleApp(request, p);
    if (!app.ok()) return Problem(app.status());
    uint64_t offset = 0;
    if (auto bad = ParseLogOffset(request, &offset)) return *bad;
    const std::string replica(request.query("replica").value_or(""));
    auto chunk =
        control_.apps()->ReadLog(p.project.id, app->id, replica, offset, kMaxLogChunkBytes);
    if (!chunk.ok()) {
      return FieldProblem(chunk.status(), chunk.status().code() == base::StatusCode::kNotFound
                                              ? "replica"
                                              : "offset");
    }
    net::Response res = net::Response::Text(200, std::move(chunk->data));
    res.headers.Set("X-Sovai-Log-Offset", std::to_string(chunk->next_offset));
    return res;
  }

  // --- Notebooks (docs/api/notebooks.md) ---
  net::Response CreateNotebook(net::Request& request, const Principal& p) {
    bool dry_run = false;
    if (auto bad = ParseDryRun(request, &dry_run)) return *bad;
    const FlavorCatalog* flavors = dry_run && control_.billing() != nullptr
                                       ? &control_.billing()->flavors()
                                       : control_.flavors();
    NotebookService* notebooks = control_.notebooks();
    if (!dry_run && notebooks == nullptr) return Problem(NoJobs());
    if (dry_run && control_.billing() == nullptr) return Problem(NoBilling());
    auto parsed = ReadSpec<NotebookSpec>(request, p, flavors, ParseNotebookSpec);
    if (auto* answer = std::get_if<net::Response>(&parsed)) return std::move(*answer);
    NotebookSpec spec = std::get<NotebookSpec>(std::move(parsed));
    if (dry_run) {
      // A notebook runs until it is stopped: priced like an app replica, for an hour.
      return DryRunAnswer(spec, control_.billing()->DryRunNotebook(p.project.id, spec));
    }
    std::string bad_field;
    auto nb = notebooks->Create(p.project.id, p.user.id, std::move(spec), &bad_field);
    if (!nb.ok()) {
      return bad_field.empty() ? Problem(nb.status()) : FieldProblem(nb.status(), bad_field);
    }
    return JsonResponse(201, NotebookToJson(*nb, ApiBase(request)));
  }

  net::Response ListNotebooks(net::Request& request, const Principal& p) {
    return ListLabelled(request, p, control_.notebooks(), &NotebookToJson);
  }

  net::Response GetNotebook(net::Request& request, const Principal& p) {
    auto nb = VisibleNotebook(request, p);
    if (!nb.ok()) return Problem(nb.status());
    Json body = NotebookToJson(*nb, ApiBase(request));
    // The live sync of its rw volumes, as a job's (docs/api/jobs.md "Live sync").
    if (JobService* jobs = control_.jobs(); jobs != nullptr && !nb->job.empty()) {
      if (auto sync = jobs->SyncProgress(nb->job)) {
        body["status"]["sync"] = LiveSyncToJson(*sync, control_.env().NowUnixMicros());
      }
    }
    return JsonResponse(200, body);
  }

  // "Sync now": the rw volumes of a RUNNING notebook go up at once.
  net::Response PushNotebookData(net::Request& request, const Principal& p) {
    auto nb = VisibleNotebook(request, p);
    if (!nb.ok()) return Problem(nb.status());
    if (Status st = control_.notebooks()->PushData(p.project.id, nb->id); !st.ok()) {
      return Problem(st);
    }
    return JsonResponse(200, {{"pushed", true}});
  }

  net::Response StopNotebook(net::Request& request, const Principal& p) {
    // Stop's reason defaults to "stopped by the user"; a member pointer cannot carry a default.
    auto stop = [](NotebookService& notebooks, const std::string& project, const std::string& id) {
      return notebooks.Stop(project, id);
    };
    return Lifecycle(request, p, control_.notebooks(), "notebook", stop, &NotebookToJson);
  }
  net::Response StartNotebook(net::Request& request, const Principal& p) {
    return Lifecycle(request, p, control_.notebooks(), "notebook", &NotebookService::StartNotebook,
                     &NotebookToJson);
  }
  net::Response DeleteNotebook(net::Request& request, const Principal& p) {
    return Lifecycle(request, p, control_.notebooks(), "notebook", &NotebookService::Delete,
                     &NotebookToJson);
  }

  // The log of the notebook's current job (or ?job= one of its recent ones) from ?offset=.
  net::Response NotebookLogs(net::Request& request, const Principal& p) {
    auto nb = VisibleNotebook(request, p);
    if (!nb.ok()) return Problem(nb.status());
    uint64_t offset = 0;
    if (auto bad = ParseLogOffset(request, &offset)) return *bad;
    const std::string job(request.query("job").value_or(""));
    auto chunk =
        control_.notebooks()->ReadLog(p.project.id, nb->id, job, offset, kMaxLogChunkBytes);
    if (!chunk.ok()) {
      return FieldProblem(chunk.status(),
                          chunk.status().code() == base::StatusCode::kNotFound ? "job" : "offset");
    }
    net::Response res = net::Response::Text(200, std::move(chunk->data));
    res.headers.Set("X-Sovai-Log-Offset", std::to_string(chunk->next_offset));
    return res;
  }

  // The notebook {id} (id or name) when this token may see it; NotFound otherwise.
  base::Result<Notebook> VisibleNotebook(const net::Request& request, const Principal& p) {
    return Visible(request, p, control_.notebooks(), "notebook");
  }

  // --- The endpoints catalog ---
  net::Response CreateEndpoint(net::Request& request, const Principal& p) {
    AppService* apps = control_.apps();
    if (apps == nullptr) return Problem(NoJobs());
    if (Status st = RequirePlatformAdmin(p, "publishing endpoints"); !st.ok()) return Problem(st);
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    Json app = *body;
    std::string rate_limit = kDefaultEndpointRateLimit;
    if (auto it = app.find("rate_limit"); it != app.end()) {
      if (!it->is_string() || !IsRateLimit(it->get<std::string>())) {
        return FieldProblem(base::InvalidArgumentError(
                                "must be requests per period: N/s, N/min or N/h (e.g. 400/min)"),
                            "rate_limit");
      }
      rate_limit = it->get<std::string>();
      app.erase(it);
    }
    Json autoscaling = {{"min_replicas", app.value("min_replicas", Json(1))},
                        {"max_replicas", app.value("max_replicas", Json(1))}};
    app.erase("min_replicas");
    app.erase("max_replicas");
    app["autoscaling"] = autoscaling;
    auto ctx = Spec(control_.flavors(), p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = ParseAppSpec(app, *ctx);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      for (FieldError& f : error->fields) {
        if (f.field.starts_with("autoscaling.")) f.field = f.field.substr(12);
      }
      return ProblemResponse(error->status, error->fields);
    }
    if (auto refused = CheckResidencyOf(p, SourcesOf(std::get<AppSpec>(parsed)))) {
      return *refused;
    }
    std::string bad_field;
    auto endpoint = apps->CreateEndpoint(p.project.id, p.user.id, std::get<AppSpec>(parsed),
                                         rate_limit, &bad_field);
    if (!endpoint.ok()) {
      return bad_field.empty() ? Problem(endpoint.status())
                               : FieldProblem(endpoint.status(), bad_field);
    }
    return JsonResponse(201, EndpointJson(*endpoint, request));
  }

  net::Response ListEndpoints(net::Request& request, const Principal&) {
    AppService* apps = control_.apps();
    if (apps == nullptr) return Problem(NoJobs());
    Json items = Json::array();
    for (const Endpoint& e : apps->ListEndpoints()) items.push_back(EndpointJson(e, request));
    return JsonResponse(200, {{"items", std::move(items)}, {"next_cursor", nullptr}});
  }

  net::Response DeleteEndpoint(net::Request& request, const Principal& p) {
    AppService* apps = control_.apps();
    if (apps == nullptr) return Problem(NoJobs());
    if (Status st = RequirePlatformAdmin(p, "removing endpoints"); !st.ok()) return Problem(st);
    if (Status st = apps->DeleteEndpoint(std::string(request.param("name").value_or("")));
        !st.ok()) {
      return Problem(st);
    }
    return net::Response::Empty(204);
  }

 private:
  // POST /v1/apps?dry_run=true: all replicas (max_replicas when autoscaled) at a replica's timeout.
  net::Response DryRunApp(net::Request& request, const Principal& p) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    auto spec = ReadSpec<AppSpec>(request, p, &billing->flavors(), ParseAppSpec);
    if (auto* answer = std::get_if<net::Response>(&spec)) return std::move(*answer);
    const AppSpec& app = std::get<AppSpec>(spec);
    return DryRunAnswer(app, billing->DryRunApp(p.project.id, app, kAppAdmissionHorizonS));
  }

  Json EndpointJson(const Endpoint& e, const net::Request& request) {
    Json j = {{"name", e.name},
              {"app", e.app},
              {"rate_limit", e.rate_limit},
              {"url", ApiBase(request) + "/v1"},
              {"created_at", base::FormatRfc3339(e.created_unix_micros)}};
    if (AppService* apps = control_.apps()) {
      if (auto route = apps->Route(e.app)) {
        j["state"] = std::string(AppStateName(route->state));
        j["ready_replicas"] = route->ready.size();
      }
    }
    return j;
  }

  static bool IsRateLimit(std::string_view text) {
    size_t slash = text.find('/');
    if (slash == std::string_view::npos || slash == 0) return false;
    auto n = base::ParseUint64(text.substr(0, slash));
    std::string_view unit = text.substr(slash + 1);
    return n.ok() && *n > 0 && (unit == "s" || unit == "min" || unit == "h");
  }

  // The app {id} (id or name) when this token may see it; NotFound otherwise.
  base::Result<App> VisibleApp(const net::Request& request, const Principal& p) {
    return Visible(request, p, control_.apps(), "app");
  }
};

}  // namespace

std::span<const RestRoute> AppRoutes() {
  static constexpr RestRoute kRoutes[] = {
      {.method = "GET", .pattern = "/v1/apps", .handler = Call<&AppApi::ListApps>},
      {.method = "POST",
       .pattern = "/v1/apps",
       .handler = Call<&AppApi::CreateApp>,
       .max_body_bytes = kMaxJobSpecBytes},
      {.method = "GET", .pattern = "/v1/apps/{id}", .handler = Call<&AppApi::GetApp>},
      {.method = "PATCH",
       .pattern = "/v1/apps/{id}",
       .handler = Call<&AppApi::UpdateApp>,
       .max_body_bytes = kMaxJobSpecBytes},
      {.method = "DELETE", .pattern = "/v1/apps/{id}", .handler = Call<&AppApi::DeleteApp>},
      {.method = "POST", .pattern = "/v1/apps/{id}/scale", .handler = Call<&AppApi::ScaleApp>},
      {.method = "POST", .pattern = "/v1/apps/{id}/stop", .handler = Call<&AppApi::StopApp>},
      {.method = "POST", .pattern = "/v1/apps/{id}/start", .handler = Call<&AppApi::StartApp>},
      {.method = "GET", .pattern = "/v1/apps/{id}/logs", .handler = Call<&AppApi::AppLogs>},
      {.method = "GET", .pattern = "/v1/notebooks", .handler = Call<&AppApi::ListNotebooks>},
      {.method = "POST",
       .pattern = "/v1/notebooks",
       .handler = Call<&AppApi::CreateNotebook>,
       .max_body_bytes = kMaxJobSpecBytes},
      {.method = "GET", .pattern = "/v1/notebooks/{id}", .handler = Call<&AppApi::GetNotebook>},
      {.method = "DELETE",
       .pattern = "/v1/notebooks/{id}",
       .handler = Call<&AppApi::DeleteNotebook>},
      {.method = "POST",
       .pattern = "/v1/notebooks/{id}/stop",
       .handler = Call<&AppApi::StopNotebook>},
      {.method = "POST",
       .pattern = "/v1/notebooks/{id}/start",
       .handler = Call<&AppApi::StartNotebook>},
      {.method = "POST",
       .pattern = "/v1/notebooks/{id}/push-data",
       .handler = Call<&AppApi::PushNotebookData>},
      {.method = "GET",
       .pattern = "/v1/notebooks/{id}/logs",
       .handler = Call<&AppApi::NotebookLogs>},
      {.method = "GET", .pattern = "/v1/endpoints", .handler = Call<&AppApi::ListEndpoints>},
      {.method = "POST", .pattern = "/v1/endpoints", .handler = Call<&AppApi::CreateEndpoint>},
      {.method = "DELETE",
       .pattern = "/v1/endpoints/{name}",
       .handler = Call<&AppApi::DeleteEndpoint>},
  };
  return kRoutes;
}

}  // namespace sovai::control::rest
