// The pieces the /v1 handlers share (rest_api.cc registers them; rest_<resource>.cc hold them):
// the JSON answer and problem helpers, request-body and paging parsing, the authorization checks,
// the base class of the handler classes, and the route table entry.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/time.h"
#include "control/billing.h"
#include "control/limits.h"
#include "control/presign.h"
#include "control/problem.h"
#include "control/regions.h"
#include "control/rest_api.h"
#include "control/tco_api.h"
#include "net/http.h"

namespace sovai::control::rest {

using base::Status;
using Json = nlohmann::json;

using control::SourcesOf;
// A notebook mounts volumes as a job does.
inline std::vector<BucketSource> SourcesOf(const NotebookSpec& spec) {
  JobSpec mounts;
  mounts.volumes = spec.volumes;
  return SourcesOf(mounts);
}

// --- Answers -----------------------------------------------------------------------------------
template <typename T, typename ToJson>
Json PageJson(const Page<T>& page, ToJson to_json) {
  Json items = Json::array();
  for (const T& item : page.items) items.push_back(to_json(item));
  return {{"items", std::move(items)},
          {"next_cursor", page.next_cursor ? Json(*page.next_cursor) : Json(nullptr)}};
}

net::Response JsonResponse(int status, const Json& body);
net::Response Problem(const Status& status);
// A problem that names one field. The detail is the whole message; the field's entry does not
// repeat the field's name when the message starts with it ("volumes[0]: bucket ...").
net::Response FieldProblem(const Status& status, std::string field);
// A 400 naming every bad field (the first one's message is the detail).
net::Response Invalid(std::vector<FieldError> errors);

// --- Request bodies ----------------------------------------------------------------------------
// Reads the body as one JSON object. Errors are field-less InvalidArgument problems (the byte
// offset of a syntax error is in the detail).
base::Result<Json> ReadObject(net::Request& request);

// Collects the typed members of a request object and every error, so that one 400 names all the
// bad fields at once.
class Fields {
 public:
  explicit Fields(const Json& object) : object_(object) {}

  std::optional<std::string> String(std::string_view name, bool required) {
    allowed_.emplace_back(name);
    if (required) {
      auto value = base::GetString(object_, name);
      if (!value.ok()) return Fail(name, value.status().message());
      return std::move(*value);
    }
    auto value = base::GetOptionalString(object_, name);
    if (!value.ok()) return Fail(name, value.status().message());
    return std::move(*value);
  }

  // Adds an error to `name` when `status` is not OK; returns status.ok().
  bool Check(std::string_view name, const Status& status) {
    if (!status.ok()) Fail(name, status.message());
    return status.ok();
  }

  // Call after the last String(): members nobody asked for are errors (typos must not pass).
  void RejectUnknown() {
    for (const auto& [key, value] : object_.items()) {
      bool known = false;
      for (const std::string& a : allowed_) known = known || a == key;
      if (!known) {
        Fail(key,
             "unknown field '" + key + "'; this request accepts " + base::Join(allowed_, ", "));
      }
    }
  }

  bool ok() const { return errors_.empty(); }
  std::vector<FieldError>& errors() { return errors_; }

 private:
  std::nullopt_t Fail(std::string_view name, std::string message) {
    errors_.push_back({std::string(name), std::move(message)});
    return std::nullopt;
  }

  const Json& object_;
  std::vector<std::string> allowed_;
  std::vector<FieldError> errors_;
};

// ?limit= and ?cursor=.
std::vector<FieldError> ParsePage(const net::Request& request, PageRequest* page);

// --- Authorization -----------------------------------------------------------------------------
bool SeesProject(const Principal& p, std::string_view project_id);
bool AdministersProject(const Principal& p, std::string_view project_id);
// Users, projects, members and S3 keys carry no labels, so a selector-limited token matches none.
Status RequireUnlabeled(const Principal& p, std::string_view what);
Status RequirePlatformAdmin(const Principal& p, std::string_view action);

// --- The handler classes' base -----------------------------------------------------------------
// A handler class per resource family derives from it; an object lives for one call (Call below),
// holding nothing but the control plane.
class RestHandlers {
 public:
  // `audit_detail`: see audit_detail_ (nullptr: nothing is recorded).
  explicit RestHandlers(ControlPlane& control, std::string* audit_detail = nullptr)
      : control_(control), identity_(control.identity()), audit_detail_(audit_detail) {}

 protected:
  static Status ProjectNotFound(std::string_view id) {
    return base::NotFoundError("project '" + std::string(id) + "' not found");
  }
  Status NoJobs() const { return base::UnavailableError(control_.jobs_unavailable()); }

  Status NoBilling() const {
    return base::UnavailableError("billing is not enabled on this server");
  }

  // The regions this server knows (regions.h).
  KnownRegions Known() const {
    const ControlPlane::ServerInfo& info = control_.info();
    return KnownRegions{info.region, info.other_regions};
  }
  // The names the volumes of the caller's project may take: the regions and its datastores.
  base::Result<KnownRegions> Known(const Principal& p) {
    KnownRegions known = Known();
    SOVAI_ASSIGN_OR_RETURN(known.datastores, control_.datastores().Aliases(p.project.id));
    return known;
  }
  // What a spec of the caller's project is validated against.
  base::Result<SpecContext> Spec(const FlavorCatalog* flavors, const Principal& p) {
    SOVAI_ASSIGN_OR_RETURN(KnownRegions known, Known(p));
    return SpecContext{flavors, known.own, known.others, known.datastores};
  }
  // The data-residency rule (docs/sovereignty.md) for the buckets of a spec of the caller's
  // project: a problem naming the field, or nothing.
  std::optional<net::Response> CheckResidencyOf(const Principal& p,
                                                const std::vector<BucketSource>& sources) {
    auto known = Known(p);
    if (!known.ok()) return Problem(known.status());
    std::string field;
    Status st =
        CheckSpecResidency(*known, p.project.name, p.project.allowed_regions, sources, &field);
    if (st.ok()) return std::nullopt;
    return FieldProblem(st, field);
  }

  // "http://<Host>": apps' URLs as the client reached this server.
  std::string ApiBase(const net::Request& request) const {
    return std::string(control_.info().api_tls ? "https://" : "http://") +
           std::string(request.header("Host").value_or("localhost"));
  }

  // A job or app spec may carry a long environment.
  static base::Result<Json> ReadSpecObject(net::Request& request) {
    SOVAI_ASSIGN_OR_RETURN(std::string text, request.body().ReadAll());
    SOVAI_ASSIGN_OR_RETURN(
        Json body, base::ParseJson(text, base::JsonLimits{.max_bytes = kMaxJobSpecBytes,
                                                          .max_depth = kMaxRequestJsonDepth}));
    if (!body.is_object()) return base::InvalidArgumentError("the body must be a JSON object");
    return body;
  }

  // A token limited to labels creates resources that carry them (and may not contradict them).
  std::optional<net::Response> ApplySelectorLabels(const Principal& p,
                                                   std::map<std::string, std::string>& labels) {
    for (const auto& [key, value] : p.token.selector.labels()) {
      auto it = labels.find(key);
      if (it != labels.end() && it->second != value) {
        return FieldProblem(
            base::PermissionDeniedError("token " + p.token.id +
                                        " may only create resources "
                                        "labeled " +
                                        key + "=" + value + ", not " + key + "=" + it->second),
            "labels." + key);
      }
      labels[key] = value;
    }
    return std::nullopt;
  }

  // Adds a ?labels= filter to the token's own selector. False when they contradict (a token
  // limited to team=a asking for team=b): nothing can match both.
  static bool MergeFilter(const std::map<std::string, std::string>& filter,
                          std::map<std::string, std::string>& labels) {
    for (const auto& [k, v] : filter) {
      auto [it, inserted] = labels.emplace(k, v);
      if (!inserted && it->second != v) return false;
    }
    return true;
  }

  // ?dry_run=true|false. A response for any other value.
  static std::optional<net::Response> ParseDryRun(const net::Request& request, bool* dry_run) {
    auto text = request.query("dry_run");
    *dry_run = text && *text == "true";
    if (text && *text != "true" && *text != "false") {
      return FieldProblem(base::InvalidArgumentError("dry_run must be true or false"), "dry_run");
    }
    return std::nullopt;
  }

  static Json DryRunJson(const DryRun& run) {
    return {
        {"price_per_minute_eur", FormatEur(run.price_per_minute_micro_eur)},
        {"price_per_minute_micro_eur", run.price_per_minute_micro_eur},
        {"timeout_s", run.timeout_s},
        {"cost_at_timeout_eur", FormatEur(run.cost_at_timeout_micro_eur)},
        {"cost_at_timeout_micro_eur", run.cost_at_timeout_micro_eur},
        {"budget_left_eur",
         run.budget_left_micro_eur ? Json(FormatEur(*run.budget_left_micro_eur)) : Json(nullptr)},
        {"would_be_refused", run.would_be_refused},
        {"reason", run.reason}};
  }

  // A dry run the budget admits is still refused when this machine can never run the flavor.
  void CheckFitsForDryRun(const std::string& flavor_id, int units, DryRun& run) {
    JobService* jobs = control_.jobs();
    if (jobs == nullptr || run.would_be_refused) return;
    auto flavor = control_.billing()->flavors().Find(flavor_id);
    if (!flavor.ok()) return;
    auto request = RequestFor(**flavor, units);
    Status fits = request.ok() ? jobs->CheckFits(*request) : request.status();
    if (!fits.ok()) {
      run.would_be_refused = true;
      run.reason = "flavor " + flavor_id + " x" + std::to_string(units) +
                   " cannot run here: " + fits.message();
    }
  }

  // The spec a create, an update or a dry run is about: `parse(body, context)` of the request's
  // JSON object against the caller's project (`flavors`, regions, datastores), with the token's
  // labels applied and the data-residency rule checked on its buckets; or the problem to answer.
  template <typename SpecT, typename Parse>
  std::variant<SpecT, net::Response> ReadSpec(net::Request& request, const Principal& p,
                                              const FlavorCatalog* flavors, Parse parse) {
    auto body = ReadSpecObject(request);
    if (!body.ok()) return Problem(body.status());
    auto ctx = Spec(flavors, p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = parse(*body, *ctx);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      return ProblemResponse(error->status, error->fields);
    }
    SpecT spec = std::get<SpecT>(std::move(parsed));
    if (auto bad = ApplySelectorLabels(p, spec.labels)) return *bad;
    if (auto refused = CheckResidencyOf(p, SourcesOf(spec))) return *refused;
    return spec;
  }

  // The answer of a dry run: the price of `run` (BillingService::DryRun*) and the budget's
  // verdict, refused as well when this machine can never run the flavor. Nothing is created.
  template <typename SpecT>
  net::Response DryRunAnswer(const SpecT& spec, base::Result<DryRun> run) {
    if (!run.ok()) {
      return FieldProblem(run.status(),
                          run.status().code() == base::StatusCode::kNotFound ? "flavor" : "units");
    }
    CheckFitsForDryRun(spec.flavor, spec.units, *run);
    return JsonResponse(200, DryRunJson(*run));
  }

  // The {id} of `service` (a job, an app or a notebook) when this token may see it: its project,
  // and its labels match the token's selector. NotFound otherwise, exactly like a missing one;
  // NoJobs() when the server runs no such service.
  template <typename Service>
  auto Visible(const net::Request& request, const Principal& p, Service* service,
               std::string_view kind) -> decltype(service->Get(p.project.id, std::string())) {
    if (service == nullptr) return NoJobs();
    const std::string id(request.param("id").value_or(""));
    auto found = service->Get(p.project.id, id);
    if (!found.ok()) return found.status();
    if (!p.token.selector.Matches(found->spec.labels)) {
      return base::NotFoundError(std::string(kind) + " '" + id +
                                 "' does not exist in this project");
    }
    return found;
  }

  // stop, start and delete of an app or a notebook: `action(service, project, id)` on the {id}
  // this token may see (Visible; `kind` names it in NotFound), answered 202 with what it returns.
  template <typename Service, typename Action, typename T>
  net::Response Lifecycle(const net::Request& request, const Principal& p, Service* service,
                          std::string_view kind, Action action,
                          Json (*to_json)(const T&, std::string_view)) {
    auto found = Visible(request, p, service, kind);
    if (!found.ok()) return Problem(found.status());
    base::Result<T> done = std::invoke(action, *service, p.project.id, found->id);
    if (!done.ok()) return Problem(done.status());
    return JsonResponse(202, to_json(*done, ApiBase(request)));
  }

  // GET of a project's apps or notebooks: those whose labels match the token's selector and the
  // ?labels= filter (bad: 400 on "labels"), one page of at most kMaxPageSize.
  template <typename Service, typename T>
  net::Response ListLabelled(const net::Request& request, const Principal& p, Service* service,
                             Json (*to_json)(const T&, std::string_view)) {
    if (service == nullptr) return Problem(NoJobs());
    std::map<std::string, std::string> labels = p.token.selector.labels();
    if (auto filter = request.query("labels")) {
      auto selector = LabelSelector::Parse(*filter);
      if (!selector.ok()) return FieldProblem(selector.status(), "labels");
      if (!MergeFilter(selector->labels(), labels)) {
        return JsonResponse(200, {{"items", Json::array()}, {"next_cursor", nullptr}});
      }
    }
    auto listed = service->List(p.project.id, labels);
    if (!listed.ok()) return Problem(listed.status());
    Json items = Json::array();
    for (const T& item : *listed) items.push_back(to_json(item, ApiBase(request)));
    return JsonResponse(200, {{"items", std::move(items)}, {"next_cursor", nullptr}});
  }

  // ?offset= of a log request into `offset` (unchanged when absent); a 400 on "offset" when it is
  // not a byte offset.
  static std::optional<net::Response> ParseLogOffset(const net::Request& request,
                                                     uint64_t* offset) {
    if (auto text = request.query("offset")) {
      auto n = base::ParseUint64(*text);
      if (!n.ok()) {
        return FieldProblem(base::InvalidArgumentError("offset must be a byte offset"), "offset");
      }
      *offset = *n;
    }
    return std::nullopt;
  }

  ControlPlane& control_;
  Identity& identity_;
  // What the call's audit entry says beyond its result (rest_api.cc records it): a handler that
  // knows something worth keeping writes it here (when not nullptr).
  std::string* const audit_detail_;
};

// --- Routes ------------------------------------------------------------------------------------
// `audit_detail`: see RestHandlers::audit_detail_.
using RestHandler = net::Response (*)(ControlPlane&, net::Request&, const Principal&,
                                      std::string* audit_detail);

struct RestRoute {
  std::string_view method;
  std::string_view pattern;
  RestHandler handler;
  // Job, app and notebook specs may carry a long environment; every other body is small.
  size_t max_body_bytes = kMaxRequestBodyBytes;
  // A POST that reads (presign): a read token may call it, and the handler checks what it asks.
  bool read_token_may_post = false;
};

template <typename>
struct HandlerClassOf;
template <typename C>
struct HandlerClassOf<net::Response (C::*)(net::Request&, const Principal&)> {
  using type = C;
};

// The RestHandler that calls `kMethod` on a fresh object of its class.
template <auto kMethod>
net::Response Call(ControlPlane& control, net::Request& request, const Principal& p,
                   std::string* audit_detail) {
  typename HandlerClassOf<decltype(kMethod)>::type handlers(control, audit_detail);
  return (handlers.*kMethod)(request, p);
}

// Each resource family's routes (rest_<family>.cc). docs/api/openapi.yaml lists exactly these
// (openapi_test.cc checks it).
std::span<const RestRoute> IdentityRoutes();
std::span<const RestRoute> JobRoutes();
std::span<const RestRoute> AppRoutes();
std::span<const RestRoute> BillingRoutes();
std::span<const RestRoute> AuditRoutes();

}  // namespace sovai::control::rest
