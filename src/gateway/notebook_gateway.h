// The gateway's notebook routes (docs/api/notebooks.md): `/notebooks/<id>/...` (every method)
// forwarded to the notebook's Jupyter on its loopback port, with Jupyter's token added by the
// platform (`Authorization: token ...`) so that the user never sees it, and websockets (kernel
// channels, terminals) spliced through (websocket_tunnel.h).
//
//   gateway::NotebookGatewayOptions options;
//   options.route = [&](const std::string& id) { return notebooks->Route(id); };
//   options.note_activity = [&](const std::string& id) { notebooks->NoteActivity(id); };
//   options.identity = &control->identity();
//   SOVAI_ASSIGN_OR_RETURN(auto gateway, gateway::NotebookGateway::Start(options));
//   gateway->Install(router);  // before the server starts
//
// Who may call: a user's API token of the notebook's project, with role operator or admin (a
// notebook runs code: read tokens get 403) and a label selector the notebook's labels match
// (403 otherwise), sent as `Authorization: Bearer <token>`, or, for browsers, as the cookie
// `sovai_token` that `GET /notebooks/<id>/?sovai_token=<token>` sets (HttpOnly, SameSite=Strict,
// path /notebooks/<id>/) before redirecting to the same URL without it. No token: 401 (with
// WWW-Authenticate: Bearer). Another project's notebook, or none: 404. A cookie-authenticated
// websocket or non-GET request whose Origin is not this server's is refused (403): Jupyter
// itself accepts any origin, since every request comes from the gateway.
// Not RUNNING: 503 with Retry-After (STARTING), or saying how to start it (STOPPED, FAILED, ...).
// VS Code notebooks (control/notebook_editors.h) get the token as code-server's session cookie
// instead of the Authorization field, and the target without the /notebooks/<id> prefix.
//
// Thread-safety: every method may be called from any thread; requests run on the server's
// workers.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/env.h"
#include "base/status.h"
#include "control/audit.h"
#include "control/identity.h"
#include "control/notebooks.h"
#include "gateway/proxy.h"
#include "gateway/websocket_tunnel.h"
#include "net/http.h"

namespace sovai::gateway {

// The cookie a browser carries instead of the Authorization header.
inline constexpr std::string_view kNotebookTokenCookie = "sovai_token";

struct NotebookGatewayOptions {
  // The notebook `id` (NotebookService::Route), nullopt when there is none.
  std::function<std::optional<control::NotebookRoute>(const std::string& id)> route;
  // A request reached notebook `id` (NotebookService::NoteActivity: it holds off the idle stop).
  std::function<void(const std::string& id)> note_activity;
  control::Identity* identity = nullptr;  // not owned
  // Jupyter's answers stream as they come (a long download, a slow listing); requests carry
  // whole notebooks, hence the larger body limit.
  ProxyOptions proxy = {.max_request_body_bytes = kDefaultMaxNotebookRequestBodyBytes};
  TunnelOptions tunnel;
  size_t max_tunnels = kDefaultMaxTunnels;
  // Called after every request with who, what and the status (AuditLog::Append in `sovai
  // server`); on the request's thread, so it must be fast.
  std::function<void(const control::AuditEvent&)> on_audit;
};

class NotebookGateway {
 public:
  static base::Result<std::unique_ptr<NotebookGateway>> Start(NotebookGatewayOptions options);
  ~NotebookGateway();
  NotebookGateway(const NotebookGateway&) = delete;
  NotebookGateway& operator=(const NotebookGateway&) = delete;

  // Adds /notebooks/{id} and /notebooks/{id}/{rest...} for GET, HEAD, POST, PUT, PATCH, DELETE
  // and OPTIONS.
  void Install(net::Router& router);

  // Prometheus text: requests per answer class, open and total websocket tunnels.
  std::string RenderMetrics();

 private:
  struct Impl;
  explicit NotebookGateway(std::shared_ptr<Impl> impl);
  // Shared with the routes and the tunnels they start, which may outlive this object.
  std::shared_ptr<Impl> impl_;
};

}  // namespace sovai::gateway
