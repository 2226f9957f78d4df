// Named limits and defaults of the gateway (src/gateway). The proxy's can be overridden per call
// in ProxyOptions; the others where their constructor takes them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sovai::gateway {

// A request body is read whole before it is forwarded, so that it can be sent again to another
// replica; larger bodies are answered 413. Chat requests with long contexts stay far below it.
inline constexpr uint64_t kDefaultMaxRequestBodyBytes = 16 * 1024 * 1024;
// Tries per request, on distinct replicas, while no byte of the response has arrived.
inline constexpr int kDefaultMaxAttempts = 2;
// Response bytes read from the replica but not yet written to the client. When the client reads
// slower than the replica writes, the gateway stops reading from the replica at this point, so
// TCP backpressure reaches the replica.
inline constexpr size_t kDefaultMaxQueuedResponseBytes = 1024 * 1024;
// A replica that does not accept the connection in this time counts as down (and is retried).
inline constexpr std::chrono::milliseconds kDefaultUpstreamConnectTimeout{5'000};
// Longest silence from a replica (waiting for the head or between body pieces). Long, because a
// replica may think for a while before its first token (a long prompt's prefill, a queue).
inline constexpr std::chrono::milliseconds kDefaultUpstreamReadTimeout{300'000};

// --- Upstream connection pool (upstream_pool.h) -------------------------------------------------
// Idle keep-alive connections kept per replica; a burst beyond it leaves by closing what it
// opened. A replica with that many idle connections had that many requests at once not long ago.
inline constexpr size_t kDefaultMaxIdleConnectionsPerReplica = 64;
// Idle connections kept over all replicas (file descriptors held on both sides).
inline constexpr size_t kDefaultMaxIdleUpstreamConnections = 4096;
// A connection idle this long is closed, not reused. Below the replicas' own keep-alive idle
// timeout (net::kDefaultIdleTimeout, 60 s) so that the gateway, not the replica, closes an idle
// connection: a replica that closes one just as a request goes out on it makes a POST that cannot
// be sent again (see proxy.h).
inline constexpr std::chrono::milliseconds kDefaultUpstreamIdleTimeout{30'000};

// --- Autoscaler (autoscaler.h) ------------------------------------------------------------------
// Sanity bound on max_replicas; control's kMaxAppReplicas is the (lower) limit users see.
inline constexpr int kMaxAutoscaledReplicas = 1024;
// Longest stabilization window or cooldown (as control's kMaxScalingWindowS).
inline constexpr int64_t kMaxAutoscalingWindowMs = 24 * 3600 * 1000;
// Recommendation changes remembered for the windows. Only changes are stored, so this covers
// any window unless the recommendation flaps every tick; then the oldest are dropped first (the
// window gets shorter, never the memory larger).
inline constexpr size_t kMaxAutoscalerHistoryEntries = 4096;

// --- Rate limits (rate_limiter.h) ---------------------------------------------------------------
// Buckets tracked at once (one per token, per project and model, ...). Beyond, the least recently
// used goes (a full bucket first), so many tokens cannot grow memory without bound.
inline constexpr size_t kDefaultMaxRateLimitKeys = 100'000;
// How many of the least recently used buckets are looked at for a full one before evicting.
inline constexpr size_t kRateLimitEvictionScan = 8;
// Largest N and longest period of "N/period"; keeps the bucket arithmetic within int64.
inline constexpr int64_t kMaxRateLimitRequests = 1'000'000'000;
inline constexpr int64_t kMaxRateLimitPeriodMs = 24 * 3600 * 1000;

// --- Response cache (response_cache.h) ----------------------------------------------------------
inline constexpr size_t kDefaultResponseCacheBytes = 64u << 20;  // 64 MiB over all apps
inline constexpr int64_t kDefaultResponseCacheTtlMs = 10 * 60 * 1000;
// An answer larger than max_bytes / this is not cached: one huge answer must not flush the rest.
inline constexpr size_t kResponseCacheMaxEntryDivisor = 8;
// Bookkeeping charged per entry on top of key and body, so that empty answers are bounded too.
inline constexpr size_t kResponseCacheEntryOverheadBytes = 128;

// --- Usage metering (usage_meter.h) -------------------------------------------------------------
// A non-streamed JSON answer is buffered up to this to read its "usage"; beyond, not metered.
inline constexpr size_t kMaxUsageScanBodyBytes = 4u << 20;  // 4 MiB
// One Server-Sent Events line or event; a longer one is skipped (a token chunk is ~200 bytes).
inline constexpr size_t kMaxUsageSseEventBytes = 1u << 20;  // 1 MiB
// Distinct (app, token, project) rows between two UsageLedger::Take() calls.
inline constexpr size_t kMaxUsageLedgerRows = 100'000;

// --- Apps (app_gateway.h) ---------------------------------------------------------------------
// Requests held per app while it has no ready replica (scaling from zero, starting); beyond, 503
// with Retry-After. Each waits at most kDefaultHoldTimeout: a replica of the small models starts
// in seconds, a 70B model may need a minute to load.
inline constexpr int kDefaultMaxHeldRequestsPerApp = 64;
inline constexpr std::chrono::milliseconds kDefaultHoldTimeout{60'000};

// --- Websocket tunnels (websocket_tunnel.h) -----------------------------------------------------
// Upgraded connections open at once through the gateway, over all notebooks; each holds two
// threads and two sockets. Beyond, 503: a browser tab holds a handful (one per open kernel).
inline constexpr size_t kDefaultMaxTunnels = 256;
// A tunnel that carries no byte either way for this long is closed. Jupyter's kernels send no
// heartbeat over the websocket by themselves, but a browser's notebook page polls every few
// seconds while it is open, so this only closes forgotten connections.
inline constexpr std::chrono::milliseconds kDefaultTunnelIdleTimeout{600'000};
// The upstream's answer to the upgrade request: its head must arrive within this time, and be
// at most this large; a refusal's body (a 403 or 404 page) is relayed up to this many bytes.
inline constexpr std::chrono::milliseconds kDefaultTunnelHandshakeTimeout{30'000};
inline constexpr size_t kMaxTunnelUpstreamHeadBytes = 16 * 1024;
inline constexpr size_t kMaxTunnelRefusalBodyBytes = 64 * 1024;
// One read or write of the splice loops.
inline constexpr size_t kTunnelBufferBytes = 64 * 1024;

// --- Notebooks (notebook_gateway.h)
// --------------------------------------------------------------- A notebook's requests carry whole
// files (the contents API sends a notebook as one JSON body, an upload as base64): larger than a
// chat request.
inline constexpr uint64_t kDefaultMaxNotebookRequestBodyBytes = 64 * 1024 * 1024;

}  // namespace sovai::gateway
