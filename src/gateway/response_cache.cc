#include "gateway/response_cache.h"

#include <string>
#include <utility>

#include "base/check.h"
#include "base/crypto.h"
#include "base/json.h"
#include "base/response_cache_policy.h"

namespace sovai::gateway {
namespace {

// Length-prefixed, so that ("ab", "c") and ("a", "bc") hash differently.
void AddPart(base::Sha256Hasher& hasher, std::string_view part) {
  hasher.Update(std::to_string(part.size()));
  hasher.Update(":");
  hasher.Update(part);
}

}  // namespace

std::optional<std::string> CacheKeyFor(std::string_view app_scope, std::string_view method,
                                       std::string_view path, std::string_view body) {
  if (method != "POST") return std::nullopt;
  const std::string_view route = path.substr(0, path.find('?'));
  // "/completions" also covers "/chat/completions".
  const bool completion = route.ends_with("/completions");
  const bool pooling = route.ends_with("/embeddings") || route.ends_with("/rerank");
  if (!completion && !pooling) return std::nullopt;
  base::Result<nlohmann::json> doc = base::ParseJson(body);
  if (!doc.ok()) return std::nullopt;

  const bool cacheable = completion ? base::CompletionCacheable(base::CompletionCacheFactsOf(*doc))
                                    : base::PoolingCacheable() && doc->is_object();
  if (!cacheable) return std::nullopt;

  base::Sha256Hasher hasher;
  AddPart(hasher, app_scope);
  AddPart(hasher, path);
  // nlohmann's objects are ordered maps: the dump has its keys sorted and no whitespace.
  AddPart(hasher, base::DumpJson(*doc));
  return base::HexEncode(hasher.Finish());
}

ResponseCache::ResponseCache(size_t max_bytes, int64_t ttl_ms)
    : max_bytes_(max_bytes), ttl_ms_(ttl_ms) {
  SOVAI_CHECK(ttl_ms >= 0) << "negative cache TTL " << ttl_ms;
}

void ResponseCache::Erase(List::iterator it) {
  stats_.bytes -= it->charged_bytes;
  index_.erase(it->key);
  lru_.erase(it);
}

std::optional<CachedResponse> ResponseCache::Lookup(std::string_view key, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  auto found = index_.find(key);
  if (found == index_.end()) {
    ++stats_.misses;
    return std::nullopt;
  }
  List::iterator it = found->second;
  if (now_ms - it->inserted_ms >= ttl_ms_) {
    Erase(it);
    ++stats_.expirations;
    ++stats_.misses;
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it);
  ++stats_.hits;
  return it->response;
}

bool ResponseCache::Insert(std::string key, CachedResponse response, int64_t now_ms) {
  if (response.status != 200) return false;
  size_t charged = key.size() + response.content_type.size() + response.body.size() +
                   kResponseCacheEntryOverheadBytes;
  if (charged > max_bytes_ / kResponseCacheMaxEntryDivisor) return false;

  std::lock_guard<std::mutex> lock(mu_);
  if (auto found = index_.find(key); found != index_.end()) Erase(found->second);
  while (stats_.bytes + charged > max_bytes_) {
    Erase(std::prev(lru_.end()));  // non-empty: bytes > 0
    ++stats_.evictions;
  }
  lru_.push_front({.key = std::move(key),
                   .response = std::move(response),
                   .inserted_ms = now_ms,
                   .charged_bytes = charged});
  index_.emplace(lru_.front().key, lru_.begin());
  stats_.bytes += charged;
  ++stats_.inserts;
  return true;
}

ResponseCacheStats ResponseCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ResponseCacheStats out = stats_;
  out.entries = lru_.size();
  return out;
}

}  // namespace sovai::gateway
