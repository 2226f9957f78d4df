// Websockets (and any other `Connection: Upgrade` protocol) through the gateway: the upgrade
// request goes to the upstream, and when it answers 101 the gateway relays that 101 to the client
// and splices bytes both ways until either side closes or the tunnel is idle too long.
//
//   gateway::TunnelRegistry tunnels;                 // one per gateway; bounds open tunnels
//   if (gateway::IsUpgradeRequest(request)) {
//     net::Headers set;
//     set.Set("Authorization", "token " + secret);   // what the upstream needs from the platform
//     return gateway::ForwardUpgrade(request, {.host = "127.0.0.1", .port = port},
//                                    request.target(), set, tunnels);
//   }
//
// The upstream request: GET (the client's method) of `upstream_target` with the client's fields
// as Forward sends them (ForwardedRequestHeaders: no hop-by-hop fields, X-Forwarded-* set), then
// `Connection: Upgrade` and the client's `Upgrade` value, then `set_headers` (replacing fields of
// those names). A request body is not forwarded (an upgrade request has none).
//
// The answer:
//   101                 relayed with the upstream's fields (less hop-by-hop ones, plus
//                       Connection: Upgrade and its Upgrade value); the connection is then
//                       spliced: bytes the upstream sent after its head go first;
//   any other status    relayed as a plain answer (its body up to kMaxTunnelRefusalBodyBytes);
//   502                 the upstream could not be reached, or its answer is not HTTP/1.1;
//   503                 options.max_tunnels tunnels are open already (Retry-After: 5);
//   504                 its head did not arrive within options.handshake_timeout.
// Errors are the OpenAI-style JSON bodies of proxy.h.
//
// Threads: the handshake runs on the calling server worker. Once spliced, the client-to-upstream
// direction runs on the server worker that runs Response::upgrade, the other direction on a
// thread of its own; the tunnel ends (both sockets closed) when either direction ends, when
// nothing passed for options.idle_timeout, or when the server shuts down.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "gateway/limits.h"
#include "net/http.h"

namespace sovai::gateway {

struct TunnelOptions {
  std::chrono::milliseconds connect_timeout = kDefaultUpstreamConnectTimeout;
  std::chrono::milliseconds handshake_timeout = kDefaultTunnelHandshakeTimeout;
  // No byte either way for this long closes the tunnel.
  std::chrono::milliseconds idle_timeout = kDefaultTunnelIdleTimeout;
};

// Where the upstream listens (plain HTTP).
struct TunnelTarget {
  std::string host = "127.0.0.1";  // an IPv4 literal
  uint16_t port = 0;
};

// Counts the open tunnels and bounds them. Thread-safe.
class TunnelRegistry {
 public:
  explicit TunnelRegistry(size_t max_tunnels = kDefaultMaxTunnels) : max_(max_tunnels) {}
  TunnelRegistry(const TunnelRegistry&) = delete;
  TunnelRegistry& operator=(const TunnelRegistry&) = delete;

  // Takes a slot; false when max_tunnels are open.
  bool TryAcquire();
  void Release();

  size_t open() const { return open_.load(); }
  uint64_t total() const { return total_.load(); }      // spliced since the start
  uint64_t refused() const { return refused_.load(); }  // 503s for the limit
  size_t max() const { return max_; }

  void CountSpliced() { total_++; }

 private:
  const size_t max_;
  std::atomic<size_t> open_{0};
  std::atomic<uint64_t> total_{0};
  std::atomic<uint64_t> refused_{0};
};

// Whether `request` asks to switch protocols: a `Connection` token "upgrade" and an `Upgrade`
// field.
bool IsUpgradeRequest(const net::Request& request);

// Forwards an upgrade request (see above). `registry` must outlive the returned response and its
// tunnel.
net::Response ForwardUpgrade(net::Request& request, const TunnelTarget& target,
                             std::string_view upstream_target, const net::Headers& set_headers,
                             TunnelRegistry& registry, const TunnelOptions& options = {});

}  // namespace sovai::gateway
