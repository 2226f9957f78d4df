#include "gateway/rate_limiter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace sovai::gateway {
namespace {

using ::testing::HasSubstr;

RateLimit Parse(std::string_view text) {
  auto limit = ParseRateLimit(text);
  EXPECT_TRUE(limit.ok()) << limit.status();
  return limit.value_or({});
}

TEST(ParseRateLimitTest, Formats) {
  EXPECT_EQ(Parse("400/min"), (RateLimit{400, 60'000}));
  EXPECT_EQ(Parse("10/s"), (RateLimit{10, 1'000}));
  EXPECT_EQ(Parse("1000/h"), (RateLimit{1000, 3'600'000}));
  EXPECT_EQ(Parse("5/30s"), (RateLimit{5, 30'000}));
  EXPECT_EQ(Parse("100/5min"), (RateLimit{100, 300'000}));
  EXPECT_EQ(Parse("1/24h"), (RateLimit{1, 86'400'000}));
}

TEST(ParseRateLimitTest, ErrorsQuoteTheText) {
  for (std::string_view bad :
       {"", "400", "abc/min", "/min", "400/", "400/day", "400/m", "0/min", "-1/s", "4.5/s",
        "400 /min", "400/ min", "400/0s", "400/25h", "2000000000/s", "99999999999999999999/s",
        "5/99999999999999999999s"}) {
    auto limit = ParseRateLimit(bad);
    ASSERT_FALSE(limit.ok()) << bad;
    EXPECT_EQ(limit.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_THAT(limit.status().message(), HasSubstr("\"" + std::string(bad) + "\"")) << bad;
    EXPECT_THAT(limit.status().message(), HasSubstr("400/min"));
  }
}

TEST(ParseRateLimitTest, FormatIsCanonical) {
  EXPECT_EQ(FormatRateLimit(Parse("400/min")), "400/min");
  EXPECT_EQ(FormatRateLimit(Parse("10/s")), "10/s");
  EXPECT_EQ(FormatRateLimit(Parse("1000/h")), "1000/h");
  EXPECT_EQ(FormatRateLimit(Parse("5/30s")), "5/30s");
  EXPECT_EQ(FormatRateLimit(Parse("5/60s")), "5/min");
  EXPECT_EQ(FormatRateLimit(Parse("7/120min")), "7/2h");
}

TEST(RateLimiterTest, BurstIsNThenDenied) {
  RateLimiter limiter;
  RateLimit limit = Parse("4/s");
  for (int i = 0; i < 4; ++i) {
    Admission a = limiter.Acquire("token:a", limit, 1'000);
    EXPECT_TRUE(a.allowed) << i;
    EXPECT_EQ(a.remaining, 3 - i);
    EXPECT_EQ(a.retry_after_ms, 0);
  }
  Admission a = limiter.Acquire("token:a", limit, 1'000);
  EXPECT_FALSE(a.allowed);
  EXPECT_EQ(a.remaining, 0);
  EXPECT_EQ(a.retry_after_ms, 250);
}

TEST(RateLimiterTest, RefillsContinuouslyAndRetryAfterIsExact) {
  RateLimiter limiter;
  RateLimit limit = Parse("400/min");  // one request every 150 ms
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(limiter.Acquire("k", limit, 0).allowed);
  EXPECT_EQ(limiter.Acquire("k", limit, 0).retry_after_ms, 150);
  EXPECT_EQ(limiter.Acquire("k", limit, 100).retry_after_ms, 50);
  EXPECT_FALSE(limiter.Acquire("k", limit, 149).allowed);
  Admission a = limiter.Acquire("k", limit, 150);
  EXPECT_TRUE(a.allowed);
  EXPECT_EQ(a.remaining, 0);
  EXPECT_EQ(limiter.Acquire("k", limit, 150).retry_after_ms, 150);
  // A minute later the whole burst is back, no more.
  EXPECT_EQ(limiter.Acquire("k", limit, 3'600'000).remaining, 399);
}

TEST(RateLimiterTest, DeniedRequestsDoNotConsume) {
  RateLimiter limiter;
  RateLimit limit = Parse("1/s");
  EXPECT_TRUE(limiter.Acquire("k", limit, 0).allowed);
  for (int64_t t = 0; t < 1'000; t += 100) EXPECT_FALSE(limiter.Acquire("k", limit, t).allowed);
  EXPECT_TRUE(limiter.Acquire("k", limit, 1'000).allowed);
}

TEST(RateLimiterTest, KeysAreIndependent) {
  RateLimiter limiter;
  RateLimit limit = Parse("2/min");
  EXPECT_TRUE(limiter.Acquire("token:a", limit, 0).allowed);
  EXPECT_TRUE(limiter.Acquire("token:a", limit, 0).allowed);
  EXPECT_FALSE(limiter.Acquire("token:a", limit, 0).allowed);
  EXPECT_TRUE(limiter.Acquire("token:b", limit, 0).allowed);
  EXPECT_TRUE(limiter.Acquire("project:prj_1|model:x", limit, 0).allowed);
  EXPECT_EQ(limiter.size(), 3u);
}

TEST(RateLimiterTest, TimeGoingBackwardsAddsNothing) {
  RateLimiter limiter;
  RateLimit limit = Parse("1/s");
  EXPECT_TRUE(limiter.Acquire("k", limit, 10'000).allowed);
  EXPECT_FALSE(limiter.Acquire("k", limit, 0).allowed);
  EXPECT_FALSE(limiter.Acquire("k", limit, 10'999).allowed);
  EXPECT_TRUE(limiter.Acquire("k", limit, 11'000).allowed);
}

TEST(RateLimiterTest, ChangedLimitKeepsWholeRequestsUpToTheNewBurst) {
  RateLimiter limiter;
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(limiter.Acquire("k", Parse("10/min"), 0).allowed);
  // 3 left; the new limit's burst is 2.
  Admission a = limiter.Acquire("k", Parse("2/s"), 0);
  EXPECT_TRUE(a.allowed);
  EXPECT_EQ(a.remaining, 1);
  EXPECT_TRUE(limiter.Acquire("k", Parse("2/s"), 0).allowed);
  EXPECT_FALSE(limiter.Acquire("k", Parse("2/s"), 0).allowed);
}

TEST(RateLimiterTest, KeysAreBoundedAndFullBucketsGoFirst) {
  RateLimiter limiter(/*max_keys=*/4);
  RateLimit limit = Parse("2/min");
  RateLimit slow = Parse("1/h");
  // Least recently used first: "drained" (empty for an hour), "full" (refilled by t=60 s), c, d.
  ASSERT_TRUE(limiter.Acquire("drained", slow, 0).allowed);
  ASSERT_TRUE(limiter.Acquire("full", limit, 1).allowed);
  ASSERT_TRUE(limiter.Acquire("c", slow, 2).allowed);
  ASSERT_TRUE(limiter.Acquire("d", slow, 2).allowed);
  EXPECT_TRUE(limiter.Acquire("e", limit, 60'001).allowed);
  EXPECT_EQ(limiter.size(), 4u);
  EXPECT_EQ(limiter.evictions(), 1u);
  // "full" went, not the older "drained", which is still empty.
  EXPECT_FALSE(limiter.Acquire("drained", slow, 60'001).allowed);
  EXPECT_FALSE(limiter.Acquire("c", slow, 60'001).allowed);

  // Many keys: never more than the bound; every new key is admitted.
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(limiter.Acquire("attacker:" + std::to_string(i), limit, 60'001).allowed);
    ASSERT_LE(limiter.size(), 4u);
  }
  EXPECT_EQ(limiter.evictions(), 1001u);
}

TEST(RateLimiterTest, EvictsTheLeastRecentlyUsedWhenNoneIsFull) {
  RateLimiter limiter(/*max_keys=*/2);
  RateLimit limit = Parse("1/h");
  ASSERT_TRUE(limiter.Acquire("a", limit, 0).allowed);
  ASSERT_TRUE(limiter.Acquire("b", limit, 1).allowed);
  ASSERT_FALSE(limiter.Acquire("a", limit, 2).allowed);  // a is now the most recent
  ASSERT_TRUE(limiter.Acquire("c", limit, 3).allowed);   // evicts b
  EXPECT_FALSE(limiter.Acquire("a", limit, 4).allowed);
  EXPECT_TRUE(limiter.Acquire("b", limit, 5).allowed);  // b starts over
}

TEST(RateLimiterTest, ConcurrentAcquiresAdmitExactlyTheBurst) {
  RateLimiter limiter;
  RateLimit limit = Parse("1000/h");
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        if (limiter.Acquire("shared", limit, 0).allowed) allowed.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 1000);
}

}  // namespace
}  // namespace sovai::gateway
