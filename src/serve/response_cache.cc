#include "serve/response_cache.h"

#include <utility>

namespace sovai::serve {

ResponseCache::ResponseCache(size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

std::shared_ptr<const std::string> ResponseCache::Get(std::string_view key) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->body;
}

void ResponseCache::Put(std::string key, std::string body) {
  const size_t bytes = key.size() + body.size();
  std::lock_guard lock(mu_);
  if (bytes > capacity_bytes_) {
    ++stats_.oversized;
    return;
  }
  if (auto it = index_.find(key); it != index_.end()) EraseLocked(it->second);
  while (stats_.bytes + bytes > capacity_bytes_) {
    EraseLocked(std::prev(lru_.end()));
    ++stats_.evictions;
  }
  lru_.push_front(Entry{std::move(key), std::make_shared<const std::string>(std::move(body))});
  index_.emplace(lru_.front().key, lru_.begin());
  stats_.bytes += bytes;
  ++stats_.entries;
}

void ResponseCache::EraseLocked(std::list<Entry>::iterator it) {
  stats_.bytes -= it->bytes();
  --stats_.entries;
  index_.erase(it->key);
  lru_.erase(it);
}

ResponseCacheStats ResponseCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace sovai::serve
