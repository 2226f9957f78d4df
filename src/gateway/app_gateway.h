// The gateway of `sovai server` (docs/api/apps.md): `/apps/<app-id>/...` forwarded to the app's
// ready replicas, and the endpoints catalog's OpenAI-compatible `/v1/models`,
// `/v1/chat/completions` and `/v1/completions` routed by model name. Around the proxy it adds:
// authentication by app tokens (API tokens whose label selector must match the app's labels),
// per-token and per-project rate limits, holding requests while an app has no ready replica
// (scale from zero, start-up), the exact-match response cache, usage metering, and the
// autoscaler loop that turns load into AppService::SetDesiredReplicas calls.
//
//   gateway::AppGatewayOptions options{.apps = apps.get(), .identity = &control->identity()};
//   SOVAI_ASSIGN_OR_RETURN(auto gateway, gateway::AppGateway::Start(options));
//   gateway->Install(router);                        // before the server starts
//   app_options.on_route = [g = gateway.get()](const control::AppRoute& r) { g->OnRoute(r); };
//
// Thread-safety: every method may be called from any thread. Requests run on the server's
// workers; one thread of its own runs the autoscaler.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "base/env.h"
#include "base/status.h"
#include "control/apps.h"
#include "control/audit.h"
#include "control/identity.h"
#include "gateway/proxy.h"
#include "gateway/rate_limiter.h"
#include "gateway/usage_meter.h"
#include "net/http.h"

namespace sovai::gateway {

struct AppGatewayOptions {
  control::AppService* apps = nullptr;    // not owned
  control::Identity* identity = nullptr;  // not owned
  base::Env* env = nullptr;               // nullptr = base::Env::Default()
  ProxyOptions proxy;
  // Requests held per app while it has no ready replica, and for how long.
  int max_held_per_app = kDefaultMaxHeldRequestsPerApp;
  std::chrono::milliseconds hold_timeout = kDefaultHoldTimeout;
  // Per token and per project, over all apps; nullopt = unlimited.
  std::optional<RateLimit> token_rate_limit;
  std::optional<RateLimit> project_rate_limit;
  // The catalog takes requests without a token.
  bool catalog_anonymous = false;
  size_t response_cache_bytes = kDefaultResponseCacheBytes;
  std::chrono::milliseconds autoscale_interval{1'000};
  // Where the meter's readings go, from the autoscaler thread at each tick and at the end
  // (AppService::RecordUsage in `sovai server`). nullptr: kept until TakeUsage.
  std::function<void(std::vector<UsageRow>)> on_usage;
  // Called after every app call and catalog completion with who, what, where and the status
  // (AuditLog::Append in `sovai server`); on the request's thread, so it must be fast.
  std::function<void(const control::AuditEvent&)> on_audit;
};

// The error renderer of the port the gateway shares with the REST API: RenderOpenAiError
// (proxy.h) on the paths AppGateway::Install routes (/apps/..., and the catalog's /v1/models,
// /v1/chat/completions and /v1/completions), so that an OpenAI client reads every error there,
// the server's own 413 and 405 included; `fallback` (the REST API's problem+json) on every other
// path, and for a request whose head could not be parsed.
net::ErrorRenderer GatewayErrorRenderer(net::ErrorRenderer fallback);

class AppGateway {
 public:
  static base::Result<std::unique_ptr<AppGateway>> Start(AppGatewayOptions options);
  ~AppGateway();  // stops the autoscaler thread and hands over the last usage
  AppGateway(const AppGateway&) = delete;
  AppGateway& operator=(const AppGateway&) = delete;

  // Adds /apps/{app}/{path...} (every method) and the catalog's /v1 routes.
  void Install(net::Router& router);

  // AppService's on_route: the app's ready replicas, state, labels and policy changed.
  void OnRoute(const control::AppRoute& route);
  // Requests in flight on replica `job` of `app` (AppService's in_flight).
  uint64_t InFlight(const std::string& app, const std::string& job);

  // Usage since the last call, for billing (UsageLedger::Take).
  std::vector<UsageRow> TakeUsage();
  // Prometheus text: requests, held requests, cache hits, scaling decisions per app.
  std::string RenderMetrics();

 private:
  struct AppEntry;
  struct Impl;
  explicit AppGateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sovai::gateway
