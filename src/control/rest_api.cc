#include "control/rest_api.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/json.h"
#include "base/postgres.h"
#include "base/strings.h"
#include "control/rest_handlers.h"

namespace sovai::control {

namespace {

using base::Status;
using rest::RestRoute;

// The /v1 surface, resource family by family.
std::vector<RestRoute> AllRoutes() {
  std::vector<RestRoute> all;
  for (auto family : {rest::IdentityRoutes(), rest::JobRoutes(), rest::AppRoutes(),
                      rest::BillingRoutes(), rest::AuditRoutes()}) {
    all.insert(all.end(), family.begin(), family.end());
  }
  return all;
}

net::Response Dispatch(ControlPlane& control, net::Request& request,
                       const base::Result<Principal>& principal, const RestRoute& route,
                       std::string* audit_detail) {
  if (!principal.ok()) return rest::Problem(principal.status());
  if (principal->role == Role::kRead && request.method() != "GET" && request.method() != "HEAD" &&
      !route.read_token_may_post) {
    return rest::Problem(base::PermissionDeniedError("token " + principal->token.id +
                                                     " has role 'read', which allows only GET "
                                                     "requests"));
  }
  // The request handler is the exception boundary: nlohmann::json could throw on a bug here.
  try {
    return route.handler(control, request, *principal, audit_detail);
  } catch (const nlohmann::json::exception& e) {
    return rest::Problem(
        base::InternalError(std::string("building the response failed: ") + e.what()));
  }
}

// The one place every /v1 call passes: authentication, the read-only check, the handler, and the
// audit entry of every call that may change something (GET and HEAD are not recorded).
net::Response Run(ControlPlane& control, net::Request& request, const RestRoute& route) {
  auto principal = AuthenticateRequest(control.identity(), request);
  std::string detail;  // what the handler adds to the audit entry
  net::Response response = Dispatch(control, request, principal, route, &detail);
  AuditLog* audit = control.audit();
  if (audit != nullptr && request.method() != "GET" && request.method() != "HEAD") {
    AuditEvent event{.action = std::string(request.method()) + " " + std::string(route.pattern),
                     .resource = request.path(),
                     .source = std::string(request.remote_address()),
                     .result = response.status};
    if (principal.ok()) {
      event.actor_user = principal->user.id;
      event.actor_token = principal->token.id;
      event.project = principal->project.id;
    } else {
      event.detail = principal.status().message();
    }
    if (event.detail.empty()) event.detail = std::move(detail);
    // A refused call says why: the problem's detail (RFC 9457 JSON, written by Problem()).
    if (event.detail.empty() && response.status >= 400 && !response.body.empty()) {
      if (auto problem = base::ParseJson(response.body);
          problem.ok() && problem->is_object() && (*problem)["detail"].is_string()) {
        event.detail = (*problem)["detail"].get<std::string>();
      }
    }
    audit->Append(std::move(event));
  }
  return response;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
ControlPlane::ControlPlane(base::Env& env, std::unique_ptr<ControlDb> db, S3KeyIssuer* s3_keys,
                           const std::string& data_dir)
    : env_(env),
      db_(std::move(db)),
      identity_(std::make_unique<Identity>(*db_, env)),
      datastores_(
          std::make_unique<Datastores>(*db_, env, base::JoinPath(data_dir, kSecretsKeyFile))),
      s3_keys_(s3_keys) {}

base::Result<std::unique_ptr<ControlPlane>> ControlPlane::Open(const std::string& data_dir,
                                                               ControlPlaneOptions options) {
  base::Env& env = options.env ? *options.env : base::Env::Default();
  if (!options.state_url.empty() && !base::IsPostgresUrl(options.state_url)) {
    return base::InvalidArgumentError("state URL '" + base::RedactPostgresUrl(options.state_url) +
                                      "' is not a PostgreSQL URL: write "
                                      "postgres://user@host:port/db, or leave it empty for "
                                      "SQLite in the data directory");
  }
  SOVAI_RETURN_IF_ERROR(env.CreateDirs(data_dir));
  const std::string location =
      options.state_url.empty() ? base::JoinPath(data_dir, kControlDbFile) : options.state_url;
  SOVAI_ASSIGN_OR_RETURN(auto db, ControlDb::Open(location, ControlDbOptions{.env = &env}));
  std::unique_ptr<ControlPlane> control(
      new ControlPlane(env, std::move(db), options.s3_keys, data_dir));
  if (options.admin) {
    SOVAI_RETURN_IF_ERROR(
        control->identity()
            .ImportBootstrapAdmin(*options.admin)
            .WithContext("importing the bootstrap admin into " + control->db().path()));
  }
  return control;
}

std::vector<RouteSpec> RestRoutes() {
  std::vector<RouteSpec> out;
  for (const RestRoute& route : AllRoutes()) out.push_back({route.method, route.pattern});
  return out;
}

base::Status RegisterRestApi(net::Router& router, ControlPlane& control) {
  for (const RestRoute& route : AllRoutes()) {
    net::RouteOptions options;
    options.max_body_bytes = route.max_body_bytes;
    router.Add(
        std::string(route.method), std::string(route.pattern),
        [&control, route](net::Request& request) { return Run(control, request, route); }, options);
  }
  return Status();
}

}  // namespace sovai::control
