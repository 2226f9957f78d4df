// Idle keep-alive connections to replicas, for the reverse proxy (proxy.h): a forwarded request
// borrows a connection to its replica instead of opening one, and gives it back once the answer
// was read to its end.
//
//   gateway::UpstreamPool pool;                  // one per gateway, outlives its server
//   std::unique_ptr<net::HttpClient> c = pool.Take(client_options);
//   if (!c) c = std::make_unique<net::HttpClient>(client_options);
//   ... c->SendUntilHead(...), c->ReadBody(...) until 0 ...
//   pool.Give(std::move(c));                    // kept only if it can carry another request
//
// A connection is an net::HttpClient, keyed by the replica's host:port. It goes back into the
// pool only when HttpClient::HasReusableConnection() holds (the answer was read completely, the
// replica did not say "Connection: close", nobody aborted it, the replica has not closed it), and
// is handed out again only while it still holds and it was idle for less than idle_timeout; the
// most recently used one goes first, so a surplus left by a burst ages out. Every other
// connection is closed, never reused.
//
// A pooled connection may still turn out dead when it is used (the replica closed it just as the
// request went out); its user retries on a fresh connection (Forward does, see proxy.h).
//
// Thread-safety: every method may be called from any thread. Closing connections happens outside
// the lock.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gateway/limits.h"
#include "net/client.h"

namespace sovai::gateway {

struct UpstreamPoolOptions {
  // Idle connections kept per replica (host:port); one given back beyond it is closed.
  size_t max_idle_per_replica = kDefaultMaxIdleConnectionsPerReplica;
  // Idle connections kept over all replicas; one given back beyond it is closed.
  size_t max_idle_total = kDefaultMaxIdleUpstreamConnections;
  // A connection idle this long is closed instead of being handed out; 0 (or less) keeps none.
  std::chrono::milliseconds idle_timeout = kDefaultUpstreamIdleTimeout;
};

class UpstreamPool {
 public:
  explicit UpstreamPool(UpstreamPoolOptions options = {});
  // Closes every idle connection.
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // An idle client connected to options.host:options.port whose settings (TLS, timeouts, limits,
  // User-Agent) equal `options`, or nullptr when there is none: the caller makes a new one then.
  // Connections found expired or closed by the replica on the way are closed.
  std::unique_ptr<net::HttpClient> Take(const net::ClientOptions& options);

  // Gives back a client after its request. Kept when its connection can carry another request
  // (see above) and the limits allow; closed (destroyed) otherwise. Null is ignored.
  void Give(std::unique_ptr<net::HttpClient> client);

  // Closes every idle connection (of every replica).
  void Clear();

  // Idle connections held now, over all replicas / to host:port.
  size_t idle() const;
  size_t idle(std::string_view host, uint16_t port) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Idle {
    std::unique_ptr<net::HttpClient> client;
    Clock::time_point since;  // when it was given back
  };
  using IdleList = std::deque<Idle>;  // oldest first

  static std::string Key(std::string_view host, uint16_t port);
  // Moves the expired connections of `list` to `closing`. Needs mu_.
  void DropExpired(IdleList& list, Clock::time_point now,
                   std::vector<std::unique_ptr<net::HttpClient>>& closing);
  // Now and then, the expired connections of every replica (also of replicas nobody asks for
  // any more) and the empty lists. Needs mu_.
  void SweepIfDue(Clock::time_point now, std::vector<std::unique_ptr<net::HttpClient>>& closing);

  const UpstreamPoolOptions options_;
  mutable std::mutex mu_;                           // guards idle_, idle_count_, last_sweep_
  std::unordered_map<std::string, IdleList> idle_;  // by Key(host, port)
  size_t idle_count_ = 0;                           // over all lists
  Clock::time_point last_sweep_;
};

}  // namespace sovai::gateway
