// An exact-match response cache for the OpenAI API: complete response bodies of deterministic
// requests (openai_api.h: Cacheable, CacheKey), kept in least-recently-used order within a byte
// budget.
//
// An entry costs key.size() + body.size() bytes. Put evicts least recently used entries until the
// new one fits; a Put larger than the whole budget is ignored (counted in stats as oversized), and
// a budget of 0 disables the cache. Put of an existing key replaces its body. Get returns a shared,
// immutable body, so a hit copies no bytes and an evicted body stays valid for readers still
// holding it.
//
// Thread-safety: every method may be called concurrently; one mutex guards the whole cache (each
// operation is a hash lookup and a list splice).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sovai::serve {

// The default budget: a few thousand typical chat responses.
inline constexpr size_t kDefaultResponseCacheBytes = 64u << 20;  // 64 MiB

struct ResponseCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;  // entries dropped to make room (not replacements)
  uint64_t oversized = 0;  // Puts ignored because the entry alone exceeds the budget
  size_t bytes = 0;        // sum of key + body sizes of the entries held
  size_t entries = 0;
};

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity_bytes = kDefaultResponseCacheBytes);
  ResponseCache(const ResponseCache&) = delete;
  ResponseCache& operator=(const ResponseCache&) = delete;

  // The body stored under `key` (and marks it most recently used), or nullptr (a miss).
  std::shared_ptr<const std::string> Get(std::string_view key);
  // Stores `body` under `key` as the most recently used entry (see the header comment).
  void Put(std::string key, std::string body);

  ResponseCacheStats stats() const;
  size_t capacity_bytes() const { return capacity_bytes_; }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const std::string> body;
    size_t bytes() const { return key.size() + body->size(); }
  };
  // Requires mu_.
  void EraseLocked(std::list<Entry>::iterator it);

  const size_t capacity_bytes_;
  mutable std::mutex mu_;  // guards everything below
  std::list<Entry> lru_;   // most recently used first
  // Views into the keys of lru_'s entries (list nodes never move).
  std::unordered_map<std::string_view, std::list<Entry>::iterator> index_;
  ResponseCacheStats stats_;
};

}  // namespace sovai::serve
