// Gateway overhead: the same closed-loop load sent straight to a replica and through the gateway
// (gateway::Forward over an UpstreamPool in a net::Server in front of it), in alternating rounds
// of one run. Prints req/s, p50/p99 latency and the process's CPU time per request of each, the
// throughput ratio, the p50 added and the connections the gateway opened to the replica. Asserts
// nothing.
//
// One run has a scenario per --replica-ms value (default "0,20"):
//  * 20 (any N > 0): each answer takes N ms (spread over the events for sse), as a model's would,
//    without using a core. This is the issue's "same load" comparison, and its goals (>= 0.9x
//    throughput, < 1 ms p50 added) are judged here: a replica is a model server, and what the
//    gateway must not do is slow one down. 20 ms is a short answer (a cache hit inside the engine
//    is faster, but the gateway's own response cache answers those).
//  * 0: the replica answers at once: the ratio is then the proxy's cost against the cheapest
//    possible replica, with everything (load, gateway, replica) sharing the machine's cores. The
//    gateway is a server and a client in one, so it spends about what the load and the replica
//    spend together: CPU per request is what this scenario measures (a busy machine's noise does
//    not move it), and its throughput ratio cannot exceed direct CPU / gateway CPU (~0.5).
//
// With the json workload the 0 ms scenario also has a third leg per round, "cache": a net::Server
// whose handler is the gateway's response-cache hit path (AppGateway's Serve: ReadWholeBody,
// CacheKeyFor, ResponseCache::Lookup, the cached body answered with X-Sovai-Cache: hit,
// UsageScanner over it into a UsageLedger), its cache prefilled with the replica's answer to the
// request. It prints hits/s and the ratio of hits/s to the direct replica's req/s (a cache hit
// never reaches a replica). Token checks, rate limits and the app lookup of AppGateway are not in
// it. Its leg lasts --cache-duration-s (shorter than the others, to keep the default run short;
// 0 leaves it out).
//
//   gateway_bench [--connections N] [--duration-s S] [--rounds R] [--workload json|sse]
//                 [--events N] [--replica-ms MS[,MS...]] [--io-threads N]
//                 [--cache-duration-s S]
//
// Workloads: "json" is a POST of a deterministic chat request (~300 bytes, temperature 0, so the
// cache may answer it) answered with a chat completion (~600 bytes); "sse" is the same POST with
// "stream":true answered with --events Server-Sent Events (a streamed completion). Everything runs
// in this one process (replica, gateway, load), so on a small machine they share the cores.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gateway/proxy.h"
#include "gateway/replica_set.h"
#include "gateway/response_cache.h"
#include "gateway/upstream_pool.h"
#include "gateway/usage_meter.h"
#include "net/client.h"
#include "net/http.h"

namespace sovai {
namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  int connections = 16;
  double duration_s = 3;
  int rounds = 3;
  std::string workload = "json";
  int events = 16;
  int replica_ms = 0;  // of the scenario being run
  std::vector<int> replica_ms_list = {0, 20};
  int io_threads = 1;
  double cache_duration_s = 1;  // 0: no cache leg
};

struct RoundResult {
  double requests_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  double cpu_us_per_request = 0;  // user + system time of the whole process (load included)
  uint64_t errors = 0;
};

// User + system CPU time of this process so far.
double ProcessCpuUs() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto us = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + t.tv_usec; };
  return us(u.ru_utime) + us(u.ru_stime);
}

// Sized like a short real exchange: the cache's cost (hashing the canonical request, copying the
// answer) grows with both.
constexpr std::string_view kRequestBody =
    R"({"model":"llama-3.1-8b-instruct","messages":[{"role":"system","content":"You are a )"
    R"(helpful assistant. Answer in one short paragraph."},{"role":"user","content":"What is )"
    R"(the difference between a process and a thread on Linux? Keep it brief."}],)"
    R"("temperature":0,"max_tokens":256,"user":"bench"})";
constexpr std::string_view kAnswer =
    R"({"id":"chatcmpl-8f3c2a91d4b74e0c9a6b5e21","object":"chat.completion",)"
    R"("created":1718035200,"model":"llama-3.1-8b-instruct","system_fingerprint":"fp_sovai",)"
    R"("choices":[{"index":0,"message":{"role":"assistant","content":"A process is a running )"
    R"(program with its own address space, file descriptors and resources; a thread is a flow )"
    R"(of execution inside a process that shares all of them with its other threads. On Linux )"
    R"(both are tasks made by clone(), so switching between threads is cheaper."},)"
    R"("logprobs":null,"finish_reason":"stop"}],)"
    R"("usage":{"prompt_tokens":52,"completion_tokens":58,"total_tokens":110}})";
constexpr std::string_view kCacheApp = "bench";
constexpr std::string_view kCacheGeneration = "1";

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

// The gateway's answer to a request whose answer is cached, as AppGateway's Serve gives it: the
// body read whole, its cache key, the lookup, the usage metered from the cached body. A miss is
// a 500 here (the load counts it as an error): every request of the bench should hit.
net::Router CacheRouter(gateway::ResponseCache& cache, gateway::UsageLedger& usage) {
  net::Router router;
  router.Add("POST", "/apps/{app}/{rest...}",
             [&cache, &usage](net::Request& req) {
               const std::string app(req.param("app").value_or(""));
               std::string target = "/" + std::string(req.param("rest").value_or(""));
               base::Result<std::string> body =
                   gateway::ReadWholeBody(req, gateway::kDefaultMaxRequestBodyBytes);
               if (!body.ok()) return net::Response::Error(body.status());
               std::optional<std::string> key = gateway::CacheKeyFor(
                   app + "@" + std::string(kCacheGeneration), req.method(), target, *body);
               std::optional<gateway::CachedResponse> hit;
               if (key) hit = cache.Lookup(*key, SteadyMs());
               if (!hit) return net::Response::Error(500, "bench: cache miss or bypass");
               gateway::UsageScanner scanner(false);
               scanner.Feed(hit->body);
               usage.Add({app, "", "bench-project"}, scanner.usage().value_or(gateway::Usage{}));
               net::Response res = net::Response::Text(hit->status, std::move(hit->body),
                                                       std::move(hit->content_type));
               res.headers.Set("X-Sovai-Cache", "hit");
               return res;
             },
             {.max_body_bytes = gateway::kDefaultMaxRequestBodyBytes});
  return router;
}

net::Router ReplicaRouter(int events, int replica_ms) {
  net::Router r;
  r.Post("/v1/chat/completions", [events, replica_ms](net::Request& req) {
    auto body = req.body().ReadAll();
    if (!body.ok()) return net::Response::Error(body.status());
    bool stream = body->find("\"stream\":true") != std::string::npos;
    if (!stream) {
      std::this_thread::sleep_for(std::chrono::milliseconds(replica_ms));
      return net::Response::Json(200, std::string(kAnswer));
    }
    auto per_event = std::chrono::microseconds(replica_ms * 1000 / events);
    return net::Response::Sse([events, per_event](net::SseWriter& sse) -> base::Status {
      for (int i = 0; i < events; ++i) {
        if (per_event.count() > 0) std::this_thread::sleep_for(per_event);
        SOVAI_RETURN_IF_ERROR(sse.WriteEvent(
            R"({"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,)"
            R"("delta":{"content":"tok"}}]})"));
      }
      return sse.WriteEvent("[DONE]");
    });
  });
  return r;
}

// One leg of a round: `connections` threads, each with its own keep-alive client, for
// `duration_s`.
RoundResult RunLoad(uint16_t port, const std::string& target, const Config& config,
                    double duration_s) {
  std::string body(kRequestBody);
  if (config.workload == "sse") body.insert(body.size() - 1, R"(,"stream":true)");
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> errors{0};
  std::vector<std::vector<double>> latencies(config.connections);
  std::vector<std::thread> threads;
  for (int c = 0; c < config.connections; ++c) {
    threads.emplace_back([&, c] {
      net::HttpClient client({.host = "127.0.0.1", .port = port});
      net::ClientRequest req;
      req.method = "POST";
      req.target = target;
      req.body = body;
      req.headers.Set("Content-Type", "application/json");
      while (!stop.load(std::memory_order_relaxed)) {
        auto t0 = Clock::now();
        bool ok = false;
        if (config.workload == "sse") {
          int seen = 0;
          auto res = client.ReadSse(req, [&](const net::SseEvent&) {
            ++seen;
            return true;
          });
          ok = res.ok() && res->status == 200 && seen == config.events + 1;
        } else {
          auto res = client.Send(req);
          ok = res.ok() && res->status == 200 && res->body.size() == kAnswer.size();
        }
        auto t1 = Clock::now();
        if (!ok) {
          errors.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        latencies[c].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
    });
  }
  auto start = Clock::now();
  const double cpu_start_us = ProcessCpuUs();
  std::this_thread::sleep_for(std::chrono::duration<double>(duration_s));
  stop = true;
  for (auto& t : threads) t.join();
  double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu_us = ProcessCpuUs() - cpu_start_us;
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  RoundResult r;
  r.errors = errors.load();
  if (all.empty()) return r;
  std::sort(all.begin(), all.end());
  r.requests_per_s = static_cast<double>(all.size()) / elapsed_s;
  r.p50_us = all[all.size() / 2];
  r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  r.cpu_us_per_request = cpu_us / static_cast<double>(all.size());
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Run(const Config& config) {
  net::Server replica(ReplicaRouter(config.events, config.replica_ms));
  if (auto st = replica.Start({.listen = "127.0.0.1:0", .io_threads = config.io_threads});
      !st.ok()) {
    std::fprintf(stderr, "replica: %s\n", st.ToString().c_str());
    return 1;
  }
  gateway::ReplicaSet replicas;
  replicas.Update({{"r1", "127.0.0.1", replica.port()}});
  gateway::UpstreamPool pool;  // outlives gateway_server, whose responses give connections back
  net::Router router;
  router.Add("POST", "/apps/{app}/{rest...}",
             [&](net::Request& req) {
               std::string target = "/" + std::string(req.param("rest").value_or(""));
               return gateway::Forward(req, replicas, std::move(target), {.upstream_pool = &pool});
             },
             {.max_body_bytes = gateway::kDefaultMaxRequestBodyBytes});
  net::Server gateway_server(std::move(router));
  if (auto st = gateway_server.Start({.listen = "127.0.0.1:0", .io_threads = config.io_threads});
      !st.ok()) {
    std::fprintf(stderr, "gateway: %s\n", st.ToString().c_str());
    return 1;
  }

  // The cache leg: a server that answers from the gateway's cache, prefilled with the replica's
  // answer to the bench's request (the json workload only: a streamed request bypasses the cache).
  const bool with_cache =
      config.workload == "json" && config.cache_duration_s > 0 && config.replica_ms == 0;
  gateway::ResponseCache cache;
  gateway::UsageLedger usage;
  net::Server cache_server(CacheRouter(cache, usage));
  if (with_cache) {
    std::optional<std::string> key =
        gateway::CacheKeyFor(std::string(kCacheApp) + "@" + std::string(kCacheGeneration), "POST",
                             "/v1/chat/completions", kRequestBody);
    if (!key || !cache.Insert(*key, {200, "application/json", std::string(kAnswer)}, SteadyMs())) {
      std::fprintf(stderr, "cache: the bench request is not cacheable\n");
      return 1;
    }
    if (auto st = cache_server.Start({.listen = "127.0.0.1:0", .io_threads = config.io_threads});
        !st.ok()) {
      std::fprintf(stderr, "cache: %s\n", st.ToString().c_str());
      return 1;
    }
  }

  std::printf(
      "workload=%s connections=%d duration_s=%.1f rounds=%d replica_ms=%d io_threads=%d "
      "cache_duration_s=%.1f request_bytes=%zu answer_bytes=%zu cores=%u\n",
      config.workload.c_str(), config.connections, config.duration_s, config.rounds,
      config.replica_ms, config.io_threads, with_cache ? config.cache_duration_s : 0.0,
      kRequestBody.size(), kAnswer.size(), std::thread::hardware_concurrency());
  std::vector<double> direct_rps, direct_p50, direct_p99, gw_rps, gw_p50, gw_p99, direct_cpu,
      gw_cpu, cache_rps, cache_p50, cache_p99, cache_cpu;
  uint64_t errors = 0;
  uint64_t cache_errors = 0;
  uint64_t gateway_connections = 0;  // opened by the gateway to the replica
  for (int round = 0; round < config.rounds; ++round) {
    RoundResult d = RunLoad(replica.port(), "/v1/chat/completions", config, config.duration_s);
    const uint64_t before = replica.Stats().total_connections;
    RoundResult g = RunLoad(gateway_server.port(), "/apps/bench/v1/chat/completions", config,
                            config.duration_s);
    gateway_connections += replica.Stats().total_connections - before;
    std::printf(
        "round %d  direct %9.0f req/s p50 %7.0f us p99 %7.0f us cpu %5.0f us/req | gateway %9.0f "
        "req/s p50 %7.0f us p99 %7.0f us cpu %5.0f us/req\n",
        round + 1, d.requests_per_s, d.p50_us, d.p99_us, d.cpu_us_per_request, g.requests_per_s,
        g.p50_us, g.p99_us, g.cpu_us_per_request);
    direct_cpu.push_back(d.cpu_us_per_request);
    gw_cpu.push_back(g.cpu_us_per_request);
    direct_rps.push_back(d.requests_per_s);
    direct_p50.push_back(d.p50_us);
    direct_p99.push_back(d.p99_us);
    gw_rps.push_back(g.requests_per_s);
    gw_p50.push_back(g.p50_us);
    gw_p99.push_back(g.p99_us);
    errors += d.errors + g.errors;
    if (with_cache) {
      RoundResult c =
          RunLoad(cache_server.port(), "/apps/" + std::string(kCacheApp) + "/v1/chat/completions",
                  config, config.cache_duration_s);
      std::printf("round %d  cache  %9.0f hits/s p50 %7.0f us p99 %7.0f us cpu %5.0f us/req\n",
                  round + 1, c.requests_per_s, c.p50_us, c.p99_us, c.cpu_us_per_request);
      cache_rps.push_back(c.requests_per_s);
      cache_p50.push_back(c.p50_us);
      cache_p99.push_back(c.p99_us);
      cache_cpu.push_back(c.cpu_us_per_request);
      cache_errors += c.errors;
    }
  }
  double ratio = Median(direct_rps) > 0 ? Median(gw_rps) / Median(direct_rps) : 0;
  std::printf(
      "median   direct %9.0f req/s p50 %7.0f us p99 %7.0f us cpu %5.0f us/req | gateway %9.0f "
      "req/s p50 %7.0f us p99 %7.0f us cpu %5.0f us/req\n",
      Median(direct_rps), Median(direct_p50), Median(direct_p99), Median(direct_cpu),
      Median(gw_rps), Median(gw_p50), Median(gw_p99), Median(gw_cpu));
  if (with_cache) {
    std::printf("median   cache  %9.0f hits/s p50 %7.0f us p99 %7.0f us cpu %5.0f us/req\n",
                Median(cache_rps), Median(cache_p50), Median(cache_p99), Median(cache_cpu));
  }
  const double p50_added_us = Median(gw_p50) - Median(direct_p50);
  if (config.replica_ms > 0) {
    const bool pass = ratio >= 0.9 && p50_added_us < 1000;
    std::printf(
        "replica %d ms: gateway/direct throughput %.2fx (goal >= 0.9), p50 added %.0f us (goal < "
        "1000): %s; errors %llu, replica connections opened by the gateway %llu\n",
        config.replica_ms, ratio, p50_added_us, pass ? "PASS" : "MISS",
        static_cast<unsigned long long>(errors),
        static_cast<unsigned long long>(gateway_connections));
  } else {
    std::printf(
        "replica 0 ms (CPU-bound, the proxy's own cost): gateway/direct throughput %.2fx, p50 "
        "added %.0f us, CPU %.0f us per request more than direct (%.2fx); errors %llu, replica "
        "connections opened by the gateway %llu\n",
        ratio, p50_added_us, Median(gw_cpu) - Median(direct_cpu),
        Median(direct_cpu) > 0 ? Median(gw_cpu) / Median(direct_cpu) : 0,
        static_cast<unsigned long long>(errors),
        static_cast<unsigned long long>(gateway_connections));
  }
  if (with_cache) {
    // Every answered hit must have been counted by the cache and metered with the answer's usage.
    const gateway::ResponseCacheStats stats = cache.stats();
    int64_t metered_requests = 0, metered_completion_tokens = 0;
    for (const gateway::UsageRow& row : usage.Take()) {
      metered_requests += row.requests;
      metered_completion_tokens += row.completion_tokens;
    }
    const double cache_ratio = Median(direct_rps) > 0 ? Median(cache_rps) / Median(direct_rps) : 0;
    std::printf(
        "cache-hit/direct throughput %.2fx, p50 %+.0f us against direct, errors %llu, cache hits "
        "%llu misses %llu, metered %lld requests %lld completion tokens\n",
        cache_ratio, Median(cache_p50) - Median(direct_p50),
        static_cast<unsigned long long>(cache_errors), static_cast<unsigned long long>(stats.hits),
        static_cast<unsigned long long>(stats.misses), static_cast<long long>(metered_requests),
        static_cast<long long>(metered_completion_tokens));
  }
  return 0;
}

}  // namespace
}  // namespace sovai

int main(int argc, char** argv) {
  sovai::Config config;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--connections") {
      config.connections = std::max(1, std::atoi(value));
    } else if (flag == "--duration-s") {
      config.duration_s = std::max(0.1, std::atof(value));
    } else if (flag == "--rounds") {
      config.rounds = std::max(1, std::atoi(value));
    } else if (flag == "--workload" &&
               (std::strcmp(value, "json") == 0 || std::strcmp(value, "sse") == 0)) {
      config.workload = value;
    } else if (flag == "--events") {
      config.events = std::max(1, std::atoi(value));
    } else if (flag == "--replica-ms") {
      config.replica_ms_list.clear();
      for (std::string_view rest = value; !rest.empty();) {
        const size_t comma = rest.find(',');
        config.replica_ms_list.push_back(
            std::max(0, std::atoi(std::string(rest.substr(0, comma)).c_str())));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    } else if (flag == "--io-threads") {
      config.io_threads = std::max(1, std::atoi(value));
    } else if (flag == "--cache-duration-s") {
      config.cache_duration_s = std::max(0.0, std::atof(value));
    } else {
      std::fprintf(stderr, "unknown flag or value: %s %s\n", argv[i], value);
      return 2;
    }
  }
  for (const int replica_ms : config.replica_ms_list) {
    config.replica_ms = replica_ms;
    if (const int rc = sovai::Run(config); rc != 0) return rc;
    std::printf("\n");
  }
  return 0;
}
