#include "serve/response_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace sovai::serve {
namespace {

TEST(ResponseCacheTest, MissThenHit) {
  ResponseCache cache(1024);
  EXPECT_EQ(cache.Get("k"), nullptr);
  cache.Put("k", "body");
  std::shared_ptr<const std::string> hit = cache.Get("k");
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(*hit, "body");
  EXPECT_EQ(cache.Get("other"), nullptr);

  ResponseCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, 1u + 4u);  // key + body
  EXPECT_EQ(s.evictions, 0u);
}

TEST(ResponseCacheTest, PutReplacesAndReaccountsBytes) {
  ResponseCache cache(1024);
  cache.Put("k", "short");
  std::shared_ptr<const std::string> old_body = cache.Get("k");
  cache.Put("k", "a longer body");
  EXPECT_EQ(*cache.Get("k"), "a longer body");
  EXPECT_EQ(*old_body, "short");  // a reader holding the old body still sees it
  ResponseCacheStats s = cache.stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, 1u + 13u);
  EXPECT_EQ(s.evictions, 0u);
}

TEST(ResponseCacheTest, EvictsLeastRecentlyUsedByBytes) {
  // Entries of 10 bytes each ("kN" + 8-byte body); room for 3.
  ResponseCache cache(30);
  cache.Put("k1", "aaaaaaaa");
  cache.Put("k2", "bbbbbbbb");
  cache.Put("k3", "cccccccc");
  ASSERT_NE(cache.Get("k1"), nullptr);  // k1 becomes the most recent; k2 is now the oldest
  cache.Put("k4", "dddddddd");
  EXPECT_EQ(cache.Get("k2"), nullptr);
  EXPECT_NE(cache.Get("k1"), nullptr);
  EXPECT_NE(cache.Get("k3"), nullptr);
  EXPECT_NE(cache.Get("k4"), nullptr);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().bytes, 30u);

  // A 20-byte entry evicts the two least recently used (k1, then k3).
  cache.Put("k5", std::string(18, 'e'));
  EXPECT_EQ(cache.Get("k1"), nullptr);
  EXPECT_EQ(cache.Get("k3"), nullptr);
  EXPECT_NE(cache.Get("k4"), nullptr);
  EXPECT_NE(cache.Get("k5"), nullptr);
  EXPECT_EQ(cache.stats().evictions, 3u);
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.stats().bytes, 30u);
}

TEST(ResponseCacheTest, OversizedPutIsIgnored) {
  ResponseCache cache(16);
  cache.Put("small", "x");
  cache.Put("big", std::string(14, 'y'));  // 17 bytes > 16
  EXPECT_EQ(cache.Get("big"), nullptr);
  EXPECT_NE(cache.Get("small"), nullptr);  // nothing was evicted for it
  ResponseCacheStats s = cache.stats();
  EXPECT_EQ(s.oversized, 1u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.entries, 1u);
  // Exactly the budget fits (evicting the rest).
  cache.Put("fit", std::string(13, 'z'));
  EXPECT_NE(cache.Get("fit"), nullptr);
  EXPECT_EQ(cache.Get("small"), nullptr);
  EXPECT_EQ(cache.stats().bytes, 16u);
}

TEST(ResponseCacheTest, ZeroBudgetStoresNothing) {
  ResponseCache cache(0);
  cache.Put("k", "v");
  EXPECT_EQ(cache.Get("k"), nullptr);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(ResponseCache().capacity_bytes(), kDefaultResponseCacheBytes);
}

TEST(ResponseCacheTest, ConcurrentGetsAndPutsKeepAccountsConsistent) {
  constexpr int kThreads = 8;
  constexpr int kOpsPerThread = 5000;
  constexpr size_t kBudget = 4096;
  ResponseCache cache(kBudget);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < kOpsPerThread; ++i) {
        std::string key = "key" + std::to_string((i * 7 + t) % 200);
        if (i % 3 == 0) {
          cache.Put(key, std::string(20 + (i % 50), 'a' + (t % 26)));
        } else if (std::shared_ptr<const std::string> body = cache.Get(key)) {
          // A body is always one that some Put stored in full.
          ASSERT_GE(body->size(), 20u);
          ASSERT_EQ(std::string(body->size(), (*body)[0]), *body);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();

  ResponseCacheStats s = cache.stats();
  EXPECT_LE(s.bytes, kBudget);
  EXPECT_GT(s.entries, 0u);
  EXPECT_EQ(s.hits + s.misses, static_cast<uint64_t>(kThreads) * (kOpsPerThread * 2 / 3));
  // The accounted bytes match what is held: re-reading every key sums to the same total.
  size_t held = 0, found = 0;
  for (int k = 0; k < 200; ++k) {
    std::string key = "key" + std::to_string(k);
    if (auto body = cache.Get(key)) {
      held += key.size() + body->size();
      ++found;
    }
  }
  EXPECT_EQ(held, s.bytes);
  EXPECT_EQ(found, s.entries);
}

}  // namespace
}  // namespace sovai::serve
