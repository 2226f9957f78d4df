#include "gateway/response_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace sovai::gateway {
namespace {

constexpr std::string_view kChat = "/v1/chat/completions";
constexpr std::string_view kGreedy =
    R"({"model":"m","temperature":0,"messages":[{"role":"user","content":"hi"}]})";

std::optional<std::string> Key(std::string_view body, std::string_view path = kChat,
                               std::string_view method = "POST",
                               std::string_view scope = "app_1@1") {
  return CacheKeyFor(scope, method, path, body);
}

TEST(CacheKeyForTest, DeterministicRequestsAreCacheable) {
  std::optional<std::string> key = Key(kGreedy);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->size(), 64u);
  EXPECT_EQ(key->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_TRUE(Key(R"({"prompt":"x","seed":7,"temperature":0.9})", "/v1/completions"));
  EXPECT_TRUE(Key(R"({"prompt":"x","temperature":0.0,"stream":false,"n":1})", "/v1/completions"));
  EXPECT_TRUE(Key(R"({"prompt":"x","temperature":0,"stream":null,"n":null})", "/v1/completions"));
  EXPECT_TRUE(Key(kGreedy, "/v1/chat/completions?api-version=1"));
  // The engine's rule (base/response_cache_policy.h): top_k 1 is greedy, and n > 1 is as
  // deterministic as n = 1.
  EXPECT_TRUE(Key(R"({"prompt":"x","top_k":1})", "/v1/completions"));
  EXPECT_TRUE(Key(R"({"temperature":0,"n":2})"));
  EXPECT_TRUE(Key(R"({"seed":3,"n":4})"));
}

TEST(CacheKeyForTest, KeyIgnoresKeyOrderAndSpacingButNotContent) {
  std::optional<std::string> a = Key(R"({"temperature":0,"model":"m","messages":[]})");
  std::optional<std::string> b =
      Key("{ \"model\" : \"m\",\n \"messages\": [ ],\"temperature\": 0 }");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *Key(R"({"temperature":0,"model":"m","messages":[1]})"));
  EXPECT_NE(*a, *Key(R"({"temperature":0,"model":"m","messages":[]})", kChat, "POST", "app_1@2"));
  EXPECT_NE(*a, *Key(R"({"temperature":0,"model":"m","messages":[]})", "/v1/completions"));
  // The parts are length-prefixed: moving bytes between scope and path changes the key.
  EXPECT_NE(*CacheKeyFor("a", "POST", "b/completions", "{\"seed\":1}"),
            *CacheKeyFor("ab", "POST", "/completions", "{\"seed\":1}"));
}

// Embeddings and rerank scores are deterministic: any request body (an object) is cacheable.
TEST(CacheKeyForTest, PoolingRequestsAreCacheable) {
  const char* body = R"({"model":"e","input":["a"],"temperature":0.7})";
  ASSERT_TRUE(Key(body, "/v1/embeddings"));
  ASSERT_TRUE(Key(body, "/apps/x/v1/rerank"));
  EXPECT_NE(*Key(body, "/v1/embeddings"), *Key(body, "/v1/rerank"));
  EXPECT_FALSE(Key(body, "/v1/embeddings", "GET"));
}

TEST(CacheKeyForTest, OthersBypass) {
  EXPECT_FALSE(Key(kGreedy, kChat, "GET"));
  EXPECT_FALSE(Key(kGreedy, kChat, "post"));
  EXPECT_FALSE(Key(kGreedy, "/v1/models"));
  EXPECT_FALSE(Key("[1]", "/v1/embeddings"));
  EXPECT_FALSE(Key(kGreedy, "/v1/completions/x"));
  EXPECT_FALSE(Key(R"({"temperature":0,"stream":true})"));
  EXPECT_FALSE(Key(R"({"temperature":0,"stream":"no"})"));
  EXPECT_FALSE(Key(R"({"temperature":0.7})"));
  EXPECT_FALSE(Key(R"({"temperature":"0"})"));
  EXPECT_FALSE(Key(R"({"model":"m"})"));  // default temperature 1
  EXPECT_FALSE(Key(R"({"temperature":0.2,"seed":null})"));
  EXPECT_FALSE(Key(R"([{"temperature":0}])"));
  EXPECT_FALSE(Key("not json"));
  EXPECT_FALSE(Key(R"({"temperature":0)"));
  EXPECT_FALSE(Key(""));
}

CachedResponse Answer(std::string body, int status = 200) {
  return {.status = status, .content_type = "application/json", .body = std::move(body)};
}

TEST(ResponseCacheTest, HitAfterInsertMissBefore) {
  ResponseCache cache(1 << 20, 60'000);
  EXPECT_FALSE(cache.Lookup("k", 0));
  EXPECT_TRUE(cache.Insert("k", Answer("{\"x\":1}"), 0));
  std::optional<CachedResponse> hit = cache.Lookup("k", 10);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->status, 200);
  EXPECT_EQ(hit->content_type, "application/json");
  EXPECT_EQ(hit->body, "{\"x\":1}");
  ResponseCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.inserts, 1u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, 1 + 16 + 7 + kResponseCacheEntryOverheadBytes);
}

TEST(ResponseCacheTest, EntriesExpireAfterTheTtl) {
  ResponseCache cache(1 << 20, 1'000);
  ASSERT_TRUE(cache.Insert("k", Answer("a"), 5'000));
  EXPECT_TRUE(cache.Lookup("k", 5'999));
  EXPECT_FALSE(cache.Lookup("k", 6'000));
  ResponseCacheStats s = cache.stats();
  EXPECT_EQ(s.expirations, 1u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.bytes, 0u);
  // Re-inserting starts a new TTL.
  ASSERT_TRUE(cache.Insert("k", Answer("b"), 7'000));
  EXPECT_EQ(cache.Lookup("k", 7'500)->body, "b");
}

TEST(ResponseCacheTest, OnlyOkAnswersOfBoundedSizeAreStored) {
  ResponseCache cache(8 * 1024, 60'000);  // entries up to 1 KiB charged
  EXPECT_FALSE(cache.Insert("k", Answer("{}", 500), 0));
  EXPECT_FALSE(cache.Insert("k", Answer("{}", 201), 0));
  EXPECT_FALSE(cache.Insert("k", Answer(std::string(1024, 'x')), 0));
  size_t fits = 1024 - 1 - 16 - kResponseCacheEntryOverheadBytes;
  EXPECT_TRUE(cache.Insert("k", Answer(std::string(fits, 'x')), 0));
  EXPECT_FALSE(cache.Insert("j", Answer(std::string(fits + 1, 'x')), 0));
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.stats().inserts, 1u);
}

TEST(ResponseCacheTest, EvictsLeastRecentlyUsedByBytes) {
  // Entries of max_bytes / 8 exactly: eight fit, not nine.
  const size_t entry = 1 + 16 + 300 + kResponseCacheEntryOverheadBytes;
  ResponseCache cache(8 * entry, 60'000);
  const std::string keys = "abcdefgh";
  for (char k : keys) ASSERT_TRUE(cache.Insert({k}, Answer(std::string(300, k)), 0));
  EXPECT_EQ(cache.stats().bytes, 8 * entry);
  EXPECT_TRUE(cache.Lookup("a", 1));  // a is now the most recent; b the least
  ASSERT_TRUE(cache.Insert("i", Answer(std::string(300, 'i')), 2));
  ResponseCacheStats s = cache.stats();
  EXPECT_EQ(s.bytes, 8 * entry);
  EXPECT_EQ(s.entries, 8u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_FALSE(cache.Lookup("b", 3));
  for (std::string_view k : {"a", "c", "d", "e", "f", "g", "h", "i"}) {
    EXPECT_TRUE(cache.Lookup(k, 3)) << k;
  }
}

TEST(ResponseCacheTest, ReplacingAKeyKeepsTheByteCountRight) {
  ResponseCache cache(1 << 20, 60'000);
  ASSERT_TRUE(cache.Insert("k", Answer(std::string(100, 'a')), 0));
  ASSERT_TRUE(cache.Insert("k", Answer(std::string(10, 'b')), 1));
  ResponseCacheStats s = cache.stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, 1 + 16 + 10 + kResponseCacheEntryOverheadBytes);
  EXPECT_EQ(cache.Lookup("k", 2)->body, std::string(10, 'b'));
}

TEST(ResponseCacheTest, BytesNeverExceedTheBound) {
  const size_t max_bytes = 64 * 1024;
  ResponseCache cache(max_bytes, 60'000);
  for (int i = 0; i < 2000; ++i) {
    (void)cache.Insert("key" + std::to_string(i), Answer(std::string((i * 37) % 7000, 'x')), i);
    ASSERT_LE(cache.stats().bytes, max_bytes);
  }
  EXPECT_GT(cache.stats().evictions, 0u);
}

TEST(ResponseCacheTest, ConcurrentUse) {
  ResponseCache cache(256 * 1024, 60'000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < 2000; ++i) {
        std::string key = "k" + std::to_string((i * 7 + t) % 300);
        if (auto hit = cache.Lookup(key, i)) {
          EXPECT_EQ(hit->body, key);
        } else {
          (void)cache.Insert(key, Answer(key), i);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ResponseCacheStats s = cache.stats();
  EXPECT_EQ(s.hits + s.misses, 8000u);
  EXPECT_LE(s.bytes, 256u * 1024);
}

}  // namespace
}  // namespace sovai::gateway
