// The gateway's exact-match response cache (docs/api/apps.md): deterministic, non-streamed
// completions answered again without a replica, shared by all replicas of an app.
//
//   std::optional<std::string> key = gateway::CacheKeyFor(app_id + "@" + generation,
//                                                          req.method(), path, body);
//   base::ResponseCacheUse use = base::DecideResponseCache(key.has_value(),
//                                                          base::ParseCacheControl(...));
//   if (use.lookup && (hit = cache.Lookup(*key, steady_ms))) ... answer *hit; X-Sovai-Cache: hit
//   else ... forward; X-Sovai-Cache: use.MissStatus(); on a complete 200 answer and use.store:
//            cache.Insert(*key, {200, content_type, body}, steady_ms) ...
//
// Time is passed in (monotonic milliseconds); nothing reads a clock.
// Thread-safety: ResponseCache may be called from any thread; CacheKeyFor is pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "gateway/limits.h"

namespace sovai::gateway {

// The cache key of a request, or nullopt when the request must not be cached (bypass). Cacheable:
// method POST; the path (before any '?') ends in "/chat/completions" or "/completions" and the body
// is JSON (within base::ParseJson's default limits) that base::CompletionCacheable accepts, or it
// ends in "/embeddings" or "/rerank" and the body is a JSON object (base::PoolingCacheable): the
// rules the engine applies too (base/response_cache_policy.h). The request's Cache-Control then
// decides, through base::DecideResponseCache, whether a keyed request is looked up and stored.
// The key is the lowercase hex SHA-256 over `app_scope`, the path (query included) and the body's
// canonical JSON (keys sorted, no whitespace), so key order and spacing do not matter.
// `app_scope` must change whenever the app's answers may (e.g. "<app id>@<generation>"): entries
// of an older scope are never looked up again and age out.
std::optional<std::string> CacheKeyFor(std::string_view app_scope, std::string_view method,
                                       std::string_view path, std::string_view body);

struct CachedResponse {
  int status = 200;
  std::string content_type;
  std::string body;
};

struct ResponseCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;       // lookups that found nothing, or an expired entry
  uint64_t inserts = 0;      // entries stored (a replaced key counts again)
  uint64_t evictions = 0;    // entries dropped to make room
  uint64_t expirations = 0;  // entries found past their TTL (and dropped)
  size_t bytes = 0;          // charged bytes now (see Insert), <= max_bytes
  size_t entries = 0;
};

class ResponseCache {
 public:
  // `max_bytes` bounds the whole cache; `ttl_ms` is how long an answer stays usable.
  explicit ResponseCache(size_t max_bytes = kDefaultResponseCacheBytes,
                         int64_t ttl_ms = kDefaultResponseCacheTtlMs);
  ResponseCache(const ResponseCache&) = delete;
  ResponseCache& operator=(const ResponseCache&) = delete;

  // The answer stored under `key` if it was inserted less than ttl_ms before `now_ms` (a copy;
  // a hit makes it the most recently used). An expired entry is dropped.
  std::optional<CachedResponse> Lookup(std::string_view key, int64_t now_ms);

  // Stores `response` under `key` (replacing an older one), evicting the least recently used
  // entries until it fits. Returns false, storing nothing, unless status is 200 and the entry is
  // at most max_bytes / kResponseCacheMaxEntryDivisor. An entry is charged key + content type +
  // body + kResponseCacheEntryOverheadBytes.
  bool Insert(std::string key, CachedResponse response, int64_t now_ms);

  ResponseCacheStats stats() const;

 private:
  struct Entry {
    std::string key;
    CachedResponse response;
    int64_t inserted_ms = 0;
    size_t charged_bytes = 0;
  };
  using List = std::list<Entry>;
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view key) const { return std::hash<std::string_view>{}(key); }
  };

  void Erase(List::iterator it);  // mu_ held

  const size_t max_bytes_;
  const int64_t ttl_ms_;
  mutable std::mutex mu_;
  List lru_;  // guarded by mu_; most recently used first
  // guarded by mu_; key → its lru_ entry
  std::unordered_map<std::string, List::iterator, KeyHash, std::equal_to<>> index_;
  ResponseCacheStats stats_;  // guarded by mu_
};

}  // namespace sovai::gateway
