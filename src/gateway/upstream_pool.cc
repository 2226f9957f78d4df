#include "gateway/upstream_pool.h"

#include <algorithm>
#include <utility>

namespace sovai::gateway {

// The gateway closes an idle connection before the replica would (see limits.h).
static_assert(kDefaultUpstreamIdleTimeout < net::kDefaultIdleTimeout,
              "pooled connections must expire before replicas close them");

namespace {

// How often Take/Give look at every replica's list for expired connections (each call looks at
// its own replica's list anyway). Often enough that an idle connection to a replica nobody asks
// for any more outlives idle_timeout by little; rare enough to cost nothing per request.
constexpr std::chrono::milliseconds kSweepInterval{1'000};

// Whether a client made with `a` may serve a request that asks for `b` (same host and port).
bool SameSettings(const net::ClientOptions& a, const net::ClientOptions& b) {
  return a.tls == b.tls && a.verify_peer == b.verify_peer && a.ca_file == b.ca_file &&
         a.connect_timeout == b.connect_timeout && a.read_timeout == b.read_timeout &&
         a.max_body_bytes == b.max_body_bytes && a.max_header_bytes == b.max_header_bytes &&
         a.user_agent == b.user_agent;
}

}  // namespace

UpstreamPool::UpstreamPool(UpstreamPoolOptions options)
    : options_(options), last_sweep_(Clock::now()) {}

UpstreamPool::~UpstreamPool() { Clear(); }

std::string UpstreamPool::Key(std::string_view host, uint16_t port) {
  std::string key(host);
  key += '\n';  // cannot occur in a host name
  key += std::to_string(port);
  return key;
}

void UpstreamPool::DropExpired(IdleList& list, Clock::time_point now,
                               std::vector<std::unique_ptr<net::HttpClient>>& closing) {
  while (!list.empty() && now - list.front().since >= options_.idle_timeout) {
    closing.push_back(std::move(list.front().client));
    list.pop_front();
    --idle_count_;
  }
}

void UpstreamPool::SweepIfDue(Clock::time_point now,
                              std::vector<std::unique_ptr<net::HttpClient>>& closing) {
  if (now - last_sweep_ < kSweepInterval) return;
  last_sweep_ = now;
  for (auto it = idle_.begin(); it != idle_.end();) {
    DropExpired(it->second, now, closing);
    it = it->second.empty() ? idle_.erase(it) : std::next(it);
  }
}

std::unique_ptr<net::HttpClient> UpstreamPool::Take(const net::ClientOptions& options) {
  const std::string key = Key(options.host, options.port);
  for (;;) {
    std::vector<std::unique_ptr<net::HttpClient>> closing;  // closed after the lock is released
    std::unique_ptr<net::HttpClient> candidate;
    {
      std::lock_guard lock(mu_);
      const Clock::time_point now = Clock::now();
      SweepIfDue(now, closing);
      auto it = idle_.find(key);
      if (it != idle_.end()) {
        IdleList& list = it->second;
        DropExpired(list, now, closing);
        // The most recently given back first.
        for (auto idle = list.rbegin(); idle != list.rend(); ++idle) {
          if (SameSettings(idle->client->options(), options)) {
            candidate = std::move(idle->client);
            list.erase(std::next(idle).base());
            --idle_count_;
            break;
          }
        }
      }
    }
    if (candidate == nullptr) return nullptr;
    // Looked at outside the lock (a system call): a connection the replica closed while it sat
    // here is closed, and the next one tried.
    if (candidate->HasReusableConnection()) return candidate;
  }
}

void UpstreamPool::Give(std::unique_ptr<net::HttpClient> client) {
  if (client == nullptr || options_.idle_timeout.count() <= 0 || !client->HasReusableConnection()) {
    return;  // `client` closes its connection here
  }
  std::vector<std::unique_ptr<net::HttpClient>> closing;  // closed after the lock is released
  {
    std::lock_guard lock(mu_);
    const Clock::time_point now = Clock::now();
    SweepIfDue(now, closing);
    IdleList& list = idle_[Key(client->options().host, client->options().port)];
    DropExpired(list, now, closing);
    if (list.size() < options_.max_idle_per_replica && idle_count_ < options_.max_idle_total) {
      list.push_back({std::move(client), now});
      ++idle_count_;
    }
  }
  // `client`, when it was not kept, and `closing` close their connections here.
}

void UpstreamPool::Clear() {
  std::unordered_map<std::string, IdleList> closing;
  {
    std::lock_guard lock(mu_);
    closing.swap(idle_);
    idle_count_ = 0;
  }
}

size_t UpstreamPool::idle() const {
  std::lock_guard lock(mu_);
  return idle_count_;
}

size_t UpstreamPool::idle(std::string_view host, uint16_t port) const {
  std::lock_guard lock(mu_);
  auto it = idle_.find(Key(host, port));
  return it == idle_.end() ? 0 : it->second.size();
}

}  // namespace sovai::gateway
