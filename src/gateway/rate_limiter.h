// Request rate limits of the gateway (docs/api/apps.md): a token bucket per key, e.g.
// "token:tok_1" or "project:prj_1|model:x".
//
//   SOVAI_ASSIGN_OR_RETURN(gateway::RateLimit limit, gateway::ParseRateLimit("400/min"));
//   gateway::RateLimiter limiter;                     // shared by all requests
//   gateway::Admission a = limiter.Acquire("token:" + token_id, limit, steady_ms);
//   if (!a.allowed) ... 429 with Retry-After: ceil(a.retry_after_ms / 1000) ...
//
// A bucket holds up to `requests` (the burst) and refills continuously at requests / per_ms, so
// "400/min" admits 400 at once, then one every 150 ms. The arithmetic is exact (integers).
//
// Memory: at most max_keys buckets. A new key beyond that evicts a bucket that is full (it holds
// nothing a fresh one would not) among the least recently used, else the least recently used
// one; an evicted key starts again with a full bucket, so eviction can only be lenient.
// Keys should be ids the gateway resolved (tokens, projects, endpoints), not raw client text.
//
// Time is passed in (monotonic milliseconds); nothing reads a clock.
// Thread-safety: RateLimiter may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/status.h"
#include "gateway/limits.h"

namespace sovai::gateway {

// `requests` per `per_ms` milliseconds; both > 0 in a valid limit.
struct RateLimit {
  int64_t requests = 0;
  int64_t per_ms = 0;

  friend bool operator==(const RateLimit&, const RateLimit&) = default;
};

// "N/s", "N/min", "N/h", optionally with a count before the unit: "5/30s", "100/5min". N is
// 1..kMaxRateLimitRequests, the period at most kMaxRateLimitPeriodMs; no spaces. Errors:
// InvalidArgument quoting the text and showing the expected form.
base::Result<RateLimit> ParseRateLimit(std::string_view text);
// The canonical text: "400/min", "10/s", "1000/h", "5/30s".
std::string FormatRateLimit(const RateLimit& limit);

struct Admission {
  bool allowed = false;
  // When denied: milliseconds until one request would be admitted (>= 1). 0 when allowed.
  int64_t retry_after_ms = 0;
  // Requests still admissible right now after this one (the bucket's whole tokens).
  int64_t remaining = 0;
};

class RateLimiter {
 public:
  explicit RateLimiter(size_t max_keys = kDefaultMaxRateLimitKeys);
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  // Takes one request from `key`'s bucket under `limit` (valid, as from ParseRateLimit:
  // SOVAI_CHECK). A key first seen starts full. When a key's limit changes (a new server flag, an
  // endpoint updated), its bucket keeps the whole requests it had, up to the new burst.
  // `now_ms` earlier than a bucket's last use counts as no time elapsed.
  Admission Acquire(std::string_view key, const RateLimit& limit, int64_t now_ms);

  // Buckets tracked now (<= max_keys) and buckets evicted so far.
  size_t size() const;
  uint64_t evictions() const;

 private:
  struct Bucket {
    std::string key;
    RateLimit limit;
    // Tokens in units of 1/per_ms request: a request costs limit.per_ms, elapsed time adds
    // limit.requests per ms, the bucket holds at most requests * per_ms (< 2^63, by the limits).
    int64_t scaled_tokens = 0;
    int64_t updated_ms = 0;
  };
  using List = std::list<Bucket>;
  // Lets find() take a string_view without building a std::string per request.
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view key) const { return std::hash<std::string_view>{}(key); }
  };

  static void Refill(Bucket& bucket, int64_t now_ms);
  void EvictOne(int64_t now_ms);  // mu_ held

  const size_t max_keys_;
  mutable std::mutex mu_;
  List lru_;  // guarded by mu_; most recent first
  // guarded by mu_; key → its lru_ entry
  std::unordered_map<std::string, List::iterator, KeyHash, std::equal_to<>> index_;
  uint64_t evictions_ = 0;  // guarded by mu_
};

}  // namespace sovai::gateway
