#include "gateway/notebook_gateway.h"

#include <atomic>
#include <vector>

#include "base/log.h"
#include "base/strings.h"
#include "control/notebook_editors.h"
#include "control/request_auth.h"
#include "gateway/upstream_pool.h"

namespace sovai::gateway {

namespace {

using base::Result;

constexpr const char* kNotebookMethods[] = {"GET",   "HEAD",   "POST",   "PUT",
                                            "PATCH", "DELETE", "OPTIONS"};

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of cookie `name`, "" when absent.
std::string CookieValue(const net::Request& request, std::string_view name) {
  for (std::string_view header : request.headers().GetAll("Cookie")) {
    while (!header.empty()) {
      size_t semi = header.find(';');
      std::string_view pair = TrimSpaces(header.substr(0, semi));
      header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
      size_t eq = pair.find('=');
      if (eq != std::string_view::npos && pair.substr(0, eq) == name) {
        return std::string(pair.substr(eq + 1));
      }
    }
  }
  return "";
}

// The Cookie fields without cookie `name` (Jupyter has no use for the platform's token).
void RemoveCookie(net::Headers& headers, std::string_view name) {
  std::vector<std::string> kept;
  for (std::string_view header : headers.GetAll("Cookie")) {
    while (!header.empty()) {
      size_t semi = header.find(';');
      std::string_view pair = TrimSpaces(header.substr(0, semi));
      header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
      size_t eq = pair.find('=');
      if (pair.empty() || (eq != std::string_view::npos && pair.substr(0, eq) == name)) continue;
      kept.emplace_back(pair);
    }
  }
  headers.Remove("Cookie");
  if (!kept.empty()) headers.Set("Cookie", base::Join(kept, "; "));
}

// The raw query without the parameter `name` ("a=1&b=2").
std::string QueryWithout(std::string_view query, std::string_view name) {
  std::vector<std::string> kept;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    std::string_view key = part.substr(0, part.find('='));
    if (!part.empty() && key != name) kept.emplace_back(part);
  }
  return base::Join(kept, "&");
}

net::Response NotFound(std::string_view id) {
  return net::Response::Error(404, "notebook '" + std::string(id) + "' does not exist");
}

}  // namespace

struct NotebookGateway::Impl {
  NotebookGatewayOptions options;
  UpstreamPool pool;
  TunnelRegistry tunnels;
  std::atomic<uint64_t> forwarded{0};
  std::atomic<uint64_t> unauthorized{0};
  std::atomic<uint64_t> not_running{0};

  explicit Impl(NotebookGatewayOptions o) : options(std::move(o)), tunnels(options.max_tunnels) {
    options.proxy.upstream_pool = &pool;
  }

  // The caller, or the answer that refuses it. `from_cookie` is set when the token came from the
  // cookie (the origin check applies then).
  Result<control::Principal> Authenticate(const net::Request& request, bool* from_cookie) {
    *from_cookie = false;
    if (request.header("Authorization")) {
      return control::AuthenticateRequest(*options.identity, request);
    }
    std::string cookie = CookieValue(request, kNotebookTokenCookie);
    if (cookie.empty()) {
      return base::UnauthenticatedError(
          "no token: send 'Authorization: Bearer <API token>', or open the notebook's URL once "
          "with ?sovai_token=<API token> (a cookie keeps it for this notebook)");
    }
    *from_cookie = true;
    return options.identity->Authenticate(cookie);
  }

  static net::Response Unauthorized(const base::Status& status) {
    net::Response res = net::Response::Error(401, status.message());
    res.headers.Set("WWW-Authenticate", "Bearer realm=\"sovai\"");
    return res;
  }

  // Whether the request's Origin (when it has one) is this server: scheme://Host.
  static bool SameOrigin(const net::Request& request) {
    auto origin = request.header("Origin");
    if (!origin) return true;
    const std::string self = std::string(request.is_tls() ? "https://" : "http://") +
                             std::string(request.header("Host").value_or(""));
    return net::EqualsIgnoreCase(*origin, self);
  }

  net::Response Handle(net::Request& request, control::AuditEvent* event) {
    const std::string id(request.param("id").value_or(""));
    std::optional<control::NotebookRoute> route = options.route(id);
    if (!route) return NotFound(id);
    if (event != nullptr) event->project = route->project;
    // Jupyter lives under /notebooks/<id>/ (its base_url): the bare id gets the slash.
    constexpr std::string_view kPrefix = "/notebooks/";
    if (request.raw_path().find('/', kPrefix.size()) == std::string_view::npos) {
      net::Response res = net::Response::Empty(302);
      std::string location = std::string(request.raw_path()) + "/";
      if (!request.raw_query().empty()) location += "?" + std::string(request.raw_query());
      res.headers.Set("Location", location);
      return res;
    }

    // A browser's first visit: ?sovai_token= becomes a cookie, and the URL loses it.
    if (auto token = request.query(kNotebookTokenCookie); token && request.method() == "GET") {
      auto p = options.identity->Authenticate(*token);
      if (!p.ok()) {
        unauthorized++;
        return Unauthorized(p.status());
      }
      std::string location(request.raw_path());
      std::string rest = QueryWithout(request.raw_query(), kNotebookTokenCookie);
      if (!rest.empty()) location += "?" + rest;
      net::Response res = net::Response::Empty(302);
      res.headers.Set("Location", location);
      res.headers.Set("Set-Cookie", std::string(kNotebookTokenCookie) + "=" + std::string(*token) +
                                        "; Path=/notebooks/" + id + "/; HttpOnly; SameSite=Strict" +
                                        (request.is_tls() ? "; Secure" : ""));
      res.headers.Set("Cache-Control", "no-store");
      return res;
    }

    bool from_cookie = false;
    auto principal = Authenticate(request, &from_cookie);
    if (!principal.ok()) {
      unauthorized++;
      return Unauthorized(principal.status());
    }
    if (event != nullptr) {
      event->actor_user = principal->user.id;
      event->actor_token = principal->token.id;
    }
    if (principal->project.id != route->project) return NotFound(id);
    if (!principal->token.selector.Matches(route->labels)) {
      return net::Response::Error(403, "token " + principal->token.id + " selects labels " +
                                           principal->token.selector.ToString() +
                                           ", which notebook " + id + " does not carry");
    }
    if (principal->role < control::Role::kOperator) {
      return net::Response::Error(403, "a notebook runs code: token " + principal->token.id +
                                           " has role read; use an operator or admin token");
    }
    const bool upgrade = IsUpgradeRequest(request);
    const bool safe = request.method() == "GET" || request.method() == "HEAD";
    if (from_cookie && (upgrade || !safe) && !SameOrigin(request)) {
      return net::Response::Error(403, "cross-origin request refused: Origin " +
                                           std::string(*request.header("Origin")) +
                                           " is not this server");
    }
    if (route->state != control::NotebookState::kRunning) {
      not_running++;
      const std::string state(control::NotebookStateName(route->state));
      net::Response res =
          net::Response::Error(503, route->state == control::NotebookState::kStarting
                                        ? "notebook " + id + " is STARTING; retry in a few seconds"
                                        : "notebook " + id + " is " + state +
                                              "; start it with `sovai notebook start " + id + "`");
      res.headers.Set("Retry-After",
                      route->state == control::NotebookState::kStarting ? "5" : "30");
      return res;
    }
    if (options.note_activity) options.note_activity(id);
    forwarded++;

    // The editor gets the platform's token instead of the user's: Jupyter as its API token,
    // code-server as its session cookie (control/notebook_editors.h).
    net::Headers& headers = request.mutable_headers();
    RemoveCookie(headers, kNotebookTokenCookie);
    headers.Remove("Authorization");
    net::Headers set;
    if (route->editor == control::kVscodeEditor) {
      RemoveCookie(headers, control::kCodeServerSessionCookie);
      std::string cookies(headers.Get("Cookie").value_or(""));
      if (!cookies.empty()) cookies += "; ";
      cookies += std::string(control::kCodeServerSessionCookie) + "=" + route->jupyter_token;
      headers.Set("Cookie", cookies);
      set.Set("Cookie", cookies);
    } else {
      set.Set("Authorization", "token " + route->jupyter_token);
      headers.Set("Authorization", "token " + route->jupyter_token);
    }
    // Jupyter's URLs carry the whole /notebooks/<id>/ prefix (its base_url): the target is sent
    // as is; code-server serves at / with relative URLs and gets it without the prefix.
    const std::string target = control::EditorUpstreamTarget(route->editor, id, request.target());
    if (upgrade) {
      return ForwardUpgrade(request,
                            {.host = route->host.empty() ? std::string("127.0.0.1") : route->host,
                             .port = route->port},
                            target, set, tunnels, options.tunnel);
    }
    ReplicaSet replicas;
    replicas.Update({{.id = id,
                      .host = route->host.empty() ? std::string("127.0.0.1") : route->host,
                      .port = route->port}});
    return Forward(request, replicas, target, options.proxy);
  }

  net::Response Audited(net::Request& request) {
    const bool audit =
        options.on_audit &&
        (IsUpgradeRequest(request) || (request.method() != "GET" && request.method() != "HEAD"));
    if (!audit) return Handle(request, nullptr);
    control::AuditEvent event{.action = "NOTEBOOK " + std::string(request.method()),
                              .resource = request.path(),
                              .source = std::string(request.remote_address())};
    if (IsUpgradeRequest(request)) event.detail = "websocket";
    net::Response response = Handle(request, &event);
    event.result = response.status;
    options.on_audit(event);
    return response;
  }
};

Result<std::unique_ptr<NotebookGateway>> NotebookGateway::Start(NotebookGatewayOptions options) {
  SOVAI_CHECK(options.route && options.identity != nullptr);
  return std::unique_ptr<NotebookGateway>(
      new NotebookGateway(std::make_shared<Impl>(std::move(options))));
}

NotebookGateway::NotebookGateway(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

NotebookGateway::~NotebookGateway() = default;

void NotebookGateway::Install(net::Router& router) {
  net::RouteOptions route_options;
  route_options.max_body_bytes = impl_->options.proxy.max_request_body_bytes;
  for (const char* method : kNotebookMethods) {
    for (const char* pattern : {"/notebooks/{id}", "/notebooks/{id}/{rest...}"}) {
      router.Add(
          method, pattern, [impl = impl_](net::Request& r) { return impl->Audited(r); },
          route_options);
    }
  }
}

std::string NotebookGateway::RenderMetrics() {
  const Impl& impl = *impl_;
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, uint64_t value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(value) + "\n";
  };
  metric("sovai_gateway_notebook_requests_total", "counter",
         "Requests forwarded to notebooks (websocket upgrades included).", impl.forwarded.load());
  metric("sovai_gateway_notebook_unauthorized_total", "counter", "Notebook requests answered 401.",
         impl.unauthorized.load());
  metric("sovai_gateway_notebook_not_running_total", "counter",
         "Notebook requests answered 503 because the notebook was not RUNNING.",
         impl.not_running.load());
  metric("sovai_gateway_tunnels_open", "gauge", "Websocket tunnels open now.", impl.tunnels.open());
  metric("sovai_gateway_tunnels_total", "counter", "Websocket tunnels opened since the start.",
         impl.tunnels.total());
  metric("sovai_gateway_tunnels_refused_total", "counter",
         "Websocket upgrades refused with 503 at the tunnel limit.", impl.tunnels.refused());
  return out;
}

}  // namespace sovai::gateway
