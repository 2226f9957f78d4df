#include "gateway/app_gateway.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/log.h"
#include "base/response_cache_policy.h"
#include "base/strings.h"
#include "control/request_auth.h"
#include "gateway/autoscaler.h"
#include "gateway/response_cache.h"
#include "gateway/upstream_pool.h"

namespace sovai::gateway {

namespace {

using base::Result;
using base::Status;
using Json = nlohmann::json;

// The methods an app may receive.
constexpr const char* kAppMethods[] = {"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"};
// The routes Install adds (GatewayErrorRenderer recognizes them).
constexpr std::string_view kAppsPrefix = "/apps/";
constexpr const char* kCatalogModels = "/v1/models";
constexpr const char* kCatalogChat = "/v1/chat/completions";
constexpr const char* kCatalogCompletions = "/v1/completions";
constexpr const char* kCatalogEmbeddings = "/v1/embeddings";
constexpr const char* kCatalogRerank = "/v1/rerank";

AutoscalingPolicy PolicyOf(const control::AutoscalingSpec& spec) {
  AutoscalingPolicy p;
  p.min_replicas = spec.min_replicas;
  p.max_replicas = spec.max_replicas;
  p.resource_type = static_cast<AutoscalingPolicy::ResourceType>(spec.metric);
  p.threshold = spec.threshold;
  p.scale_up_window_ms = spec.scale_up_window_s * 1000;
  p.scale_down_window_ms = spec.scale_down_window_s * 1000;
  p.cooldown_ms = spec.cooldown_s * 1000;
  return p;
}

net::Response RetryLater(int status, std::string_view message, std::string_view code,
                         int64_t retry_after_s) {
  net::Response res =
      OpenAiError(status, message, status == 429 ? "rate_limit_error" : "server_error", code);
  res.headers.Set("Retry-After", std::to_string(std::max<int64_t>(1, retry_after_s)));
  return res;
}

// Passes what the proxy writes to the client through `observe` first.
class ObservingWriter : public net::BodyWriter {
 public:
  ObservingWriter(net::BodyWriter& inner, std::function<void(std::string_view)> observe)
      : inner_(inner), observe_(std::move(observe)) {}
  Status Write(std::string_view data) override {
    observe_(data);
    return inner_.Write(data);
  }
  uint64_t bytes_written() const override { return inner_.bytes_written(); }

 private:
  net::BodyWriter& inner_;
  std::function<void(std::string_view)> observe_;
};

}  // namespace

// One app as the gateway sees it.
struct AppGateway::AppEntry {
  std::mutex mu;  // guards route, held, autoscaler, last_reason, up_since_ms
  std::condition_variable ready_cv;
  control::AppRoute route;
  ReplicaSet replicas;
  int held = 0;
  std::optional<Autoscaler> autoscaler;
  std::string last_reason;
  int64_t up_since_ms = -1;  // LoadSample::up_since_ms: the last (re)start or first ready replica
  std::atomic<int64_t> last_request_ms{-1};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> rate_limited{0};
  std::atomic<uint64_t> held_total{0};
  std::atomic<uint64_t> hold_timeouts{0};
  std::atomic<uint64_t> cache_hits{0};
  std::atomic<uint64_t> scaling_decisions{0};
};

struct AppGateway::Impl {
  AppGatewayOptions options;
  base::Env& env;
  RateLimiter limiter;
  ResponseCache cache;
  UpstreamPool pool;  // replica connections kept alive between requests
  UsageLedger usage;

  std::mutex mu;  // guards apps, stopping
  std::condition_variable stop_cv;
  std::map<std::string, std::shared_ptr<AppEntry>> apps;  // by app id
  bool stopping = false;
  std::thread autoscaler;

  explicit Impl(AppGatewayOptions o)
      : options(std::move(o)),
        env(options.env ? *options.env : base::Env::Default()),
        cache(options.response_cache_bytes) {
    options.proxy.upstream_pool = &pool;
  }

  int64_t NowMs() const { return env.NowMonotonicMicros() / 1000; }

  std::shared_ptr<AppEntry> Find(const std::string& id) {
    std::lock_guard lock(mu);
    auto it = apps.find(id);
    return it == apps.end() ? nullptr : it->second;
  }

  void Apply(const control::AppRoute& route) {
    std::shared_ptr<AppEntry> entry;
    {
      std::lock_guard lock(mu);
      if (route.state == control::AppState::kDeleted) {
        auto it = apps.find(route.id);
        if (it == apps.end()) return;
        entry = it->second;
        apps.erase(it);
      } else {
        auto& slot = apps[route.id];
        if (!slot) slot = std::make_shared<AppEntry>();
        entry = slot;
      }
    }
    std::vector<Replica> replicas;
    for (const control::AppRoute::Target& t : route.ready) {
      replicas.push_back({t.job, t.host.empty() ? std::string("127.0.0.1") : t.host, t.port});
    }
    entry->replicas.Update(replicas);
    std::lock_guard lock(entry->mu);
    // The app came up (started again, or its first replica is ready): the autoscaler's idle time
    // starts here, not at a request from before a stop.
    if ((route.serving() && !entry->route.serving()) ||
        (!route.ready.empty() && entry->route.ready.empty())) {
      entry->up_since_ms = NowMs();
    }
    entry->route = route;
    if (route.autoscaling) {
      AutoscalingPolicy policy = PolicyOf(*route.autoscaling);
      if (!entry->autoscaler) {
        auto created = Autoscaler::Create(policy);
        if (created.ok()) entry->autoscaler = std::move(*created);
      } else if (!(entry->autoscaler->policy() == policy)) {
        (void)entry->autoscaler->SetPolicy(policy);
      }
    } else {
      entry->autoscaler.reset();
    }
    entry->ready_cv.notify_all();
  }

  // 401/403/404 for a caller that may not reach `route`; nullopt when it may. `principal`
  // receives the caller (empty for unsecure apps).
  std::optional<net::Response> Authorize(const net::Request& request,
                                         const control::AppRoute& route,
                                         std::optional<control::Principal>* principal) {
    if (route.unsecure_http) return std::nullopt;
    auto p = control::AuthenticateRequest(*options.identity, request);
    if (!p.ok()) {
      return OpenAiError(401, p.status().message() + " (send the app token as the Bearer key)",
                         "invalid_request_error", "invalid_api_key");
    }
    if (p->project.id != route.project) return AppNotFound(route.id);
    if (!p->token.selector.Matches(route.labels)) {
      return OpenAiError(403,
                         "token " + p->token.id + " selects labels " +
                             p->token.selector.ToString() + ", which app " + route.id +
                             " does not carry",
                         "permission_error", "label_selector_mismatch");
    }
    *principal = std::move(*p);
    return std::nullopt;
  }

  static net::Response AppNotFound(std::string_view id) {
    return OpenAiError(404, "app '" + std::string(id) + "' does not exist", "invalid_request_error",
                       "app_not_found");
  }

  // 429 when `key` is over `limit`.
  std::optional<net::Response> Limit(AppEntry& entry, const std::string& key,
                                     const std::optional<RateLimit>& limit, std::string_view what) {
    if (!limit) return std::nullopt;
    Admission admission = limiter.Acquire(key, *limit, NowMs());
    if (admission.allowed) return std::nullopt;
    entry.rate_limited++;
    return RetryLater(429,
                      "rate limit of " + FormatRateLimit(*limit) + " per " + std::string(what) +
                          " reached; retry after " +
                          std::to_string((admission.retry_after_ms + 999) / 1000) + " s",
                      "rate_limit_exceeded", (admission.retry_after_ms + 999) / 1000);
  }

  // Waits until the app has a ready replica. nullopt when it has one; a 503 otherwise.
  std::optional<net::Response> HoldUntilReady(AppEntry& entry) {
    std::unique_lock lock(entry.mu);
    if (!entry.route.ready.empty()) return std::nullopt;
    if (!entry.route.serving()) {
      return RetryLater(503,
                        "app " + entry.route.id + " is " +
                            std::string(control::AppStateName(entry.route.state)) +
                            (entry.route.state == control::AppState::kFailed
                                 ? "; see `sovai app get " + entry.route.name + "`"
                                 : "; start it with `sovai app start " + entry.route.name + "`"),
                        "app_not_running", 10);
    }
    if (entry.held >= options.max_held_per_app) {
      return RetryLater(503,
                        "app " + entry.route.id + " has no ready replica yet and " +
                            std::to_string(entry.held) + " requests are already waiting",
                        "no_replica_available", 5);
    }
    entry.held++;
    entry.held_total++;
    const bool wake = entry.route.desired_replicas == 0;
    const std::string id = entry.route.id;
    if (wake) {
      // Scale from zero now, not at the autoscaler's next tick.
      lock.unlock();
      (void)options.apps->SetDesiredReplicas(id, 1, "a request arrived while at zero replicas");
      lock.lock();
    }
    const bool ready = entry.ready_cv.wait_for(lock, options.hold_timeout, [&] {
      return !entry.route.ready.empty() || !entry.route.serving();
    });
    entry.held--;
    if (ready && !entry.route.ready.empty()) return std::nullopt;
    entry.hold_timeouts++;
    return RetryLater(503,
                      "app " + id + " had no ready replica within " +
                          std::to_string(options.hold_timeout.count() / 1000) + " s",
                      "no_replica_available", 5);
  }

  // The common path of app and catalog requests once the caller is known.
  // The body, read whole (it may be sent twice, and it is the cache key); a 413 or 400 when it
  // cannot be.
  Result<std::string> ReadBody(net::Request& request, std::optional<net::Response>* error) {
    Result<std::string> body = ReadWholeBody(request, options.proxy.max_request_body_bytes);
    if (!body.ok()) {
      *error = body.status().code() == base::StatusCode::kResourceExhausted
                   ? OpenAiError(413, body.status().message(), "invalid_request_error",
                                 "request_too_large")
                   : net::Response::Error(body.status());  // the client left mid-body
    }
    return body;
  }

  net::Response Serve(net::Request& request, AppEntry& entry, std::string upstream_target,
                      UsageKey usage_key, std::string body) {
    entry.requests++;
    entry.last_request_ms = NowMs();
    if (auto held = HoldUntilReady(entry)) return std::move(*held);
    int64_t generation;
    bool model;
    {
      std::lock_guard lock(entry.mu);
      generation = entry.route.generation;
      model = entry.route.model;
    }
    std::optional<std::string> cache_key = CacheKeyFor(
        entry.route.id + "@" + std::to_string(generation), request.method(), upstream_target, body);
    // The replica sees the same Cache-Control (it is forwarded) and decides the same way.
    const base::ResponseCacheUse cache_use = base::DecideResponseCache(
        cache_key.has_value(),
        base::ParseCacheControl(request.header("Cache-Control").value_or("")));
    if (cache_use.lookup) {
      if (auto hit = cache.Lookup(*cache_key, NowMs())) {
        entry.cache_hits++;
        UsageScanner scanner(false);
        scanner.Feed(hit->body);
        usage.Add(usage_key, scanner.usage().value_or(Usage{}));
        net::Response res =
            net::Response::Text(hit->status, std::move(hit->body), std::move(hit->content_type));
        res.headers.Set(std::string(base::kCacheStatusHeader), "hit");
        return res;
      }
    }
    ProxyOptions proxy = options.proxy;
    // A model server's completions change nothing: one lost with a crashed replica is sent to
    // another one.
    proxy.retry_sent_posts = model;
    net::Response res =
        ForwardBody(request, std::move(body), entry.replicas, std::move(upstream_target), proxy);
    res.headers.Set(std::string(base::kCacheStatusHeader), std::string(cache_use.MissStatus()));
    const std::string content_type(res.headers.Get("Content-Type").value_or(""));
    const bool sse = IsEventStream(content_type);
    // What is learnt from the answer as it passes: its usage, and the body for the cache.
    struct Observed {
      UsageScanner scanner;
      std::string body;
      bool keep_body;
      explicit Observed(bool sse, bool keep) : scanner(sse), keep_body(keep) {}
    };
    auto observed = std::make_shared<Observed>(sse, cache_use.store && res.status == 200);
    auto observe = [observed, max = options.response_cache_bytes /
                                    kResponseCacheMaxEntryDivisor](std::string_view data) {
      observed->scanner.Feed(data);
      if (observed->keep_body) {
        if (observed->body.size() + data.size() > max) {
          observed->keep_body = false;
          observed->body.clear();
        } else {
          observed->body.append(data);
        }
      }
    };
    auto finish = [this, observed, usage_key, cache_key, content_type,
                   status = res.status](bool complete) {
      usage.Add(usage_key, observed->scanner.usage().value_or(Usage{}));
      // keep_body: the policy allows storing it, and it fitted.
      if (complete && observed->keep_body && status == 200) {
        cache.Insert(*cache_key, {status, content_type, std::move(observed->body)}, NowMs());
      }
    };
    if (!res.stream) {
      observe(res.body);
      finish(true);
      return res;
    }
    res.stream = [inner = std::move(res.stream), observe, finish](net::BodyWriter& out) {
      ObservingWriter writer(out, observe);
      Status st = inner(writer);
      finish(st.ok());
      return st;
    };
    return res;
  }

  // With options.on_audit: runs `handle` with an event it fills with the caller, then records it
  // with the response's status (docs/audit.md).
  template <typename Handle>
  net::Response Audited(net::Request& request, std::string_view action, Handle handle) {
    if (!options.on_audit) return handle(nullptr);
    control::AuditEvent event{.action = std::string(action) + " " + std::string(request.method()),
                              .resource = request.path(),
                              .source = std::string(request.remote_address())};
    net::Response response = handle(&event);
    event.result = response.status;
    options.on_audit(event);
    return response;
  }

  static void NoteCaller(control::AuditEvent* event, const std::optional<control::Principal>& p) {
    if (event == nullptr || !p) return;
    event->actor_user = p->user.id;
    event->actor_token = p->token.id;
    event->project = p->project.id;
  }

  net::Response HandleApp(net::Request& request, control::AuditEvent* event) {
    const std::string id(request.param("app").value_or(""));
    std::shared_ptr<AppEntry> entry = Find(id);
    if (!entry) return AppNotFound(id);
    control::AppRoute route;
    {
      std::lock_guard lock(entry->mu);
      route = entry->route;
    }
    std::optional<control::Principal> principal;
    // The app's project, not the caller's: the app's admins see the calls to it.
    if (event != nullptr) event->project = route.project;
    if (auto denied = Authorize(request, route, &principal)) return std::move(*denied);
    NoteCaller(event, principal);
    if (event != nullptr) event->project = route.project;
    UsageKey key{route.id, principal ? principal->token.id : "", route.project};
    if (principal) {
      if (auto limited =
              Limit(*entry, "token:" + principal->token.id, options.token_rate_limit, "token")) {
        return std::move(*limited);
      }
    }
    if (auto limited =
            Limit(*entry, "project:" + route.project, options.project_rate_limit, "project")) {
      return std::move(*limited);
    }
    // The upstream target: what follows /apps/<id> in the raw target, query included.
    std::string_view target = request.target();
    const std::string prefix = "/apps/" + id;
    std::string upstream(target.substr(std::min(target.size(), prefix.size())));
    if (upstream.empty() || upstream[0] != '/') upstream = "/" + upstream;
    std::optional<net::Response> error;
    Result<std::string> body = ReadBody(request, &error);
    if (!body.ok()) return std::move(*error);
    return Serve(request, *entry, std::move(upstream), std::move(key), std::move(*body));
  }

  // The catalog: who is calling (a token of any project), or an anonymous caller when allowed.
  std::optional<net::Response> CatalogCaller(const net::Request& request,
                                             std::optional<control::Principal>* principal) {
    if (!request.header("Authorization") && options.catalog_anonymous) return std::nullopt;
    auto p = control::AuthenticateRequest(*options.identity, request);
    if (!p.ok()) {
      return OpenAiError(401, p.status().message() + " (send your project's API key)",
                         "invalid_request_error", "invalid_api_key");
    }
    *principal = std::move(*p);
    return std::nullopt;
  }

  net::Response CatalogModels(net::Request& request) {
    std::optional<control::Principal> principal;
    if (auto denied = CatalogCaller(request, &principal)) return std::move(*denied);
    Json data = Json::array();
    for (const control::Endpoint& e : options.apps->ListEndpoints()) {
      data.push_back({{"id", e.name},
                      {"object", "model"},
                      {"created", e.created_unix_micros / 1'000'000},
                      {"owned_by", "sovai"}});
    }
    return net::Response::Json(200, base::DumpJson(Json{{"object", "list"}, {"data", data}}));
  }

  net::Response CatalogCompletion(net::Request& request, std::string upstream,
                                  control::AuditEvent* event) {
    std::optional<control::Principal> principal;
    if (auto denied = CatalogCaller(request, &principal)) return std::move(*denied);
    NoteCaller(event, principal);
    // The model decides the app: read the body here, and hand it on.
    std::optional<net::Response> error;
    Result<std::string> body = ReadBody(request, &error);
    if (!body.ok()) return std::move(*error);
    // The engine's wording (serve/openai_api.cc), with the byte where the JSON broke off.
    auto doc = base::ParseJson(*body);
    if (!doc.ok()) {
      return OpenAiError(400, "The request body is not valid JSON: " + doc.status().message() + ".",
                         "invalid_request_error", "invalid_json");
    }
    if (!doc->is_object()) {
      return OpenAiError(
          400, "The request body must be a JSON object, got " + std::string(doc->type_name()) + ".",
          "invalid_request_error", "invalid_json");
    }
    auto model = doc->find("model");
    if (model == doc->end() || !model->is_string()) {
      net::Response res = OpenAiError(400, "you must provide a model parameter",
                                      "invalid_request_error", "missing_model");
      return res;
    }
    const std::string name = model->get<std::string>();
    if (event != nullptr) event->detail = "model " + name;
    std::optional<control::Endpoint> endpoint = options.apps->FindEndpoint(name);
    std::shared_ptr<AppEntry> entry = endpoint ? Find(endpoint->app) : nullptr;
    if (!entry) {
      return OpenAiError(404, "the model '" + name + "' does not exist (GET /v1/models lists them)",
                         "invalid_request_error", "model_not_found");
    }
    const std::string project = principal ? principal->project.id : "anonymous";
    if (auto limit = ParseRateLimit(endpoint->rate_limit); limit.ok()) {
      if (auto limited = Limit(*entry, "endpoint:" + name + "|project:" + project, *limit,
                               "project on model " + name)) {
        return std::move(*limited);
      }
    }
    return Serve(request, *entry, std::move(upstream),
                 UsageKey{endpoint->app, principal ? principal->token.id : "", project},
                 std::move(*body));
  }

  void AutoscaleOnce() {
    std::vector<std::shared_ptr<AppEntry>> entries;
    {
      std::lock_guard lock(mu);
      for (auto& [id, e] : apps) entries.push_back(e);
    }
    for (const std::shared_ptr<AppEntry>& entry : entries) {
      LoadSample sample;
      std::string id;
      {
        std::lock_guard lock(entry->mu);
        if (!entry->autoscaler || !entry->route.serving()) continue;
        id = entry->route.id;
        sample.current_replicas = entry->route.desired_replicas;
        sample.ready_replicas = static_cast<int>(entry->route.ready.size());
        sample.held = entry->held;
        sample.up_since_ms = entry->up_since_ms;
      }
      sample.now_ms = NowMs();
      sample.last_request_ms = entry->last_request_ms.load();
      for (const ReplicaStats& r : entry->replicas.Snapshot()) {
        sample.in_flight += static_cast<double>(r.in_flight);
      }
      AutoscalingPolicy::ResourceType type;
      {
        std::lock_guard lock(entry->mu);
        type = entry->autoscaler->policy().resource_type;
      }
      if (type != AutoscalingPolicy::ResourceType::kRequests) {
        control::AppUsage measured = options.apps->MeasureUsage(id);
        sample.cpu_percent_avg = measured.cpu_percent;
        sample.ram_percent_avg = measured.ram_percent;
      }
      ScalingDecision decision;
      {
        std::lock_guard lock(entry->mu);
        if (!entry->autoscaler) continue;
        decision = entry->autoscaler->Decide(sample);
        if (decision.changed) entry->last_reason = decision.reason;
      }
      if (decision.changed) {
        entry->scaling_decisions++;
        SOVAI_LOG(INFO).With("app", id) << "autoscaler: " << sample.current_replicas << " -> "
                                        << decision.desired << ": " << decision.reason;
        if (Status st = options.apps->SetDesiredReplicas(id, decision.desired, decision.reason);
            !st.ok()) {
          SOVAI_LOG(WARNING).With("app", id) << "autoscaler: " << st;
        }
      }
    }
  }

  void AutoscaleLoop() {
    std::unique_lock lock(mu);
    while (!stopping) {
      stop_cv.wait_for(lock, options.autoscale_interval, [&] { return stopping; });
      if (stopping) break;
      lock.unlock();
      AutoscaleOnce();
      FlushUsage();
      lock.lock();
    }
  }

  void FlushUsage() {
    if (!options.on_usage) return;
    std::vector<UsageRow> rows = usage.Take();
    if (!rows.empty()) options.on_usage(std::move(rows));
  }
};

Result<std::unique_ptr<AppGateway>> AppGateway::Start(AppGatewayOptions options) {
  SOVAI_CHECK(options.apps != nullptr && options.identity != nullptr);
  auto impl = std::make_unique<Impl>(std::move(options));
  for (const control::AppRoute& route : impl->options.apps->Routes()) impl->Apply(route);
  std::unique_ptr<AppGateway> gateway(new AppGateway(std::move(impl)));
  Impl* raw = gateway->impl_.get();
  raw->autoscaler = std::thread([raw] { raw->AutoscaleLoop(); });
  return gateway;
}

void AppGateway::Install(net::Router& router) {
  Impl* impl = impl_.get();
  net::RouteOptions route_options;
  route_options.max_body_bytes = impl->options.proxy.max_request_body_bytes;
  for (const char* method : kAppMethods) {
    for (const char* pattern : {"/apps/{app}", "/apps/{app}/{rest...}"}) {
      router.Add(
          method, pattern,
          [impl](net::Request& r) {
            return impl->Audited(r, "APP",
                                 [&](control::AuditEvent* e) { return impl->HandleApp(r, e); });
          },
          route_options);
    }
  }
  router.Get(kCatalogModels, [impl](net::Request& r) { return impl->CatalogModels(r); });
  for (const char* path : {kCatalogChat, kCatalogCompletions, kCatalogEmbeddings, kCatalogRerank}) {
    router.Post(
        path,
        [impl, path](net::Request& r) {
          return impl->Audited(r, "CATALOG", [&](control::AuditEvent* e) {
            return impl->CatalogCompletion(r, path, e);
          });
        },
        route_options);
  }
}

net::ErrorRenderer GatewayErrorRenderer(net::ErrorRenderer fallback) {
  return [fallback = std::move(fallback)](const net::Request* request, net::Response& response) {
    const std::string_view path = request != nullptr ? request->raw_path() : "";
    const bool ours = (path.starts_with(kAppsPrefix) && path.size() > kAppsPrefix.size()) ||
                      path == kCatalogModels || path == kCatalogChat ||
                      path == kCatalogCompletions || path == kCatalogEmbeddings ||
                      path == kCatalogRerank;
    if (ours) {
      RenderOpenAiError(request, response);
    } else {
      fallback(request, response);
    }
  };
}

void AppGateway::OnRoute(const control::AppRoute& route) { impl_->Apply(route); }

uint64_t AppGateway::InFlight(const std::string& app, const std::string& job) {
  std::shared_ptr<AppEntry> entry = impl_->Find(app);
  if (!entry) return 0;
  uint64_t n = 0;
  for (const ReplicaStats& r : entry->replicas.Snapshot()) {
    if (r.replica.id == job) n += r.in_flight;
  }
  return n;
}

std::vector<UsageRow> AppGateway::TakeUsage() { return impl_->usage.Take(); }

std::string AppGateway::RenderMetrics() {
  std::vector<std::shared_ptr<AppEntry>> entries;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [id, e] : impl_->apps) entries.push_back(e);
  }
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  struct Row {
    std::string app;
    control::AppRoute route;
    int held;
    std::string reason;
    AppEntry* e;
  };
  std::vector<Row> rows;
  for (auto& e : entries) {
    std::lock_guard lock(e->mu);
    rows.push_back({e->route.id, e->route, e->held, e->last_reason, e.get()});
  }
  auto each = [&](const char* name, auto value) {
    for (const Row& r : rows) {
      out += std::string(name) + "{app=\"" + r.app + "\",name=\"" + r.route.name + "\"} " +
             std::to_string(value(r)) + "\n";
    }
  };
  family("sovai_gateway_requests_total", "counter", "Requests received per app.");
  each("sovai_gateway_requests_total", [](const Row& r) { return r.e->requests.load(); });
  family("sovai_gateway_rate_limited_total", "counter", "Requests refused with 429 per app.");
  each("sovai_gateway_rate_limited_total", [](const Row& r) { return r.e->rate_limited.load(); });
  family("sovai_gateway_held_requests", "gauge",
         "Requests waiting for a ready replica (scale from zero, start-up).");
  each("sovai_gateway_held_requests", [](const Row& r) { return r.held; });
  family("sovai_gateway_held_requests_total", "counter", "Requests that had to wait.");
  each("sovai_gateway_held_requests_total", [](const Row& r) { return r.e->held_total.load(); });
  family("sovai_gateway_hold_timeouts_total", "counter",
         "Held requests answered 503 after the hold timeout.");
  each("sovai_gateway_hold_timeouts_total", [](const Row& r) { return r.e->hold_timeouts.load(); });
  family("sovai_gateway_response_cache_hits_total", "counter",
         "Requests answered from the gateway's response cache.");
  each("sovai_gateway_response_cache_hits_total",
       [](const Row& r) { return r.e->cache_hits.load(); });
  family("sovai_gateway_desired_replicas", "gauge", "Replicas the app should have.");
  each("sovai_gateway_desired_replicas", [](const Row& r) { return r.route.desired_replicas; });
  family("sovai_gateway_ready_replicas", "gauge", "Replicas receiving requests.");
  each("sovai_gateway_ready_replicas", [](const Row& r) { return r.route.ready.size(); });
  family("sovai_gateway_scaling_decisions_total", "counter",
         "Autoscaler decisions that changed the desired replicas.");
  each("sovai_gateway_scaling_decisions_total",
       [](const Row& r) { return r.e->scaling_decisions.load(); });
  ResponseCacheStats cache = impl_->cache.stats();
  family("sovai_gateway_response_cache_bytes", "gauge", "Bytes held by the response cache.");
  out += "sovai_gateway_response_cache_bytes " + std::to_string(cache.bytes) + "\n";
  family("sovai_gateway_response_cache_entries", "gauge", "Answers held by the response cache.");
  out += "sovai_gateway_response_cache_entries " + std::to_string(cache.entries) + "\n";
  return out;
}

AppGateway::AppGateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AppGateway::~AppGateway() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  if (impl_->autoscaler.joinable()) impl_->autoscaler.join();
  impl_->FlushUsage();
}

}  // namespace sovai::gateway
