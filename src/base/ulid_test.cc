#include "base/ulid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

namespace sovai::base {
namespace {

TEST(UlidTest, EncodesTimestampLikeTheSpec) {
  // From the ULID spec: ulid(1469918176385) starts with "01ARYZ6S41".
  Ulid id(1469918176385, 0, 0);
  EXPECT_EQ(id.ToString(), "01ARYZ6S410000000000000000");
  EXPECT_EQ(id.timestamp_ms(), 1469918176385u);
  EXPECT_EQ(Ulid().ToString(), "00000000000000000000000000");
  EXPECT_EQ(Ulid((uint64_t{1} << 48) - 1, 0xFFFF, ~uint64_t{0}).ToString(),
            "7ZZZZZZZZZZZZZZZZZZZZZZZZZ");
}

TEST(UlidTest, ParseRoundTrips) {
  for (std::string_view text : {"01ARZ3NDEKTSV4RRFFQ69G5FAV", "00000000000000000000000000",
                                "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "01ARYZ6S410000000000000001"}) {
    Result<Ulid> id = ParseUlid(text);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(id->ToString(), text);
  }
  EXPECT_EQ(ParseUlid("01ARYZ6S41TSV4RRFFQ69G5FAV")->timestamp_ms(), 1469918176385u);
  // Lowercase is accepted and canonicalized.
  EXPECT_EQ(ParseUlid("01arz3ndektsv4rrffq69g5fav")->ToString(), "01ARZ3NDEKTSV4RRFFQ69G5FAV");
  Ulid a(123, 0x1234, 0x0123456789ABCDEF);
  EXPECT_EQ(*ParseUlid(a.ToString()), a);
}

TEST(UlidTest, ParseErrors) {
  struct Case {
    std::string_view text;
    std::string_view expected;
  };
  for (auto [text, expected] : {
           Case{"", "length 0"},
           Case{"01ARZ3NDEKTSV4RRFFQ69G5FA", "length 25"},
           Case{"01ARZ3NDEKTSV4RRFFQ69G5FAVX", "length 27"},
           Case{"01ARZ3NDEKTSV4RRFFQ69G5FAU", "character 'U' at offset 25"},
           Case{"01ARZ3NDEKTSV4RRFFQ69G5FAI", "character 'I'"},
           Case{"01ARZ3NDEKTSV4RRFFQ69G5FAL", "character 'L'"},
           Case{"01ARZ3NDEKTSV4RRFFQ69G5FAO", "character 'O'"},
           Case{"01ARZ3NDEKTSV4RRFFQ69G5FA-", "character '-'"},
           Case{"80000000000000000000000000", "overflows"},
           Case{"ZZZZZZZZZZZZZZZZZZZZZZZZZZ", "overflows"},
       }) {
    Result<Ulid> r = ParseUlid(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(expected), std::string::npos) << r.status().message();
  }
}

TEST(UlidTest, TextOrderIsIdOrder) {
  std::vector<Ulid> ids;
  for (uint64_t ts : {uint64_t{0}, uint64_t{1}, uint64_t{31}, uint64_t{32}, uint64_t{1} << 40,
                      (uint64_t{1} << 48) - 1}) {
    for (uint64_t lo : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
      ids.emplace_back(ts, static_cast<uint16_t>(lo), lo);
    }
  }
  for (const Ulid& a : ids) {
    for (const Ulid& b : ids) {
      ASSERT_EQ(a < b, a.ToString() < b.ToString()) << a.ToString() << " " << b.ToString();
    }
  }
}

TEST(UlidTest, GeneratorIsMonotonicWithinAMillisecond) {
  std::atomic<int64_t> now_ms{1'700'000'000'000};
  uint8_t fill = 0x10;
  UlidGenerator gen([&] { return now_ms.load(); },
                    [&](std::span<uint8_t> out) { std::memset(out.data(), fill, out.size()); });
  Ulid first = gen.Next();
  EXPECT_EQ(first.timestamp_ms(), 1'700'000'000'000u);
  EXPECT_EQ(first.ToString().substr(10), "2081040G2081040G");  // random part = 0x10 bytes
  Ulid second = gen.Next();
  EXPECT_EQ(second.timestamp_ms(), first.timestamp_ms());
  EXPECT_EQ(second.bytes()[15], first.bytes()[15] + 1);  // random part incremented
  // The clock stepping back keeps the last millisecond and keeps increasing.
  now_ms = 1'600'000'000'000;
  Ulid third = gen.Next();
  EXPECT_GT(third, second);
  EXPECT_EQ(third.timestamp_ms(), first.timestamp_ms());
  // A new millisecond draws fresh randomness.
  now_ms = 1'700'000'000'001;
  fill = 0x01;
  Ulid fourth = gen.Next();
  EXPECT_EQ(fourth.timestamp_ms(), 1'700'000'000'001u);
  EXPECT_EQ(fourth.bytes()[15], 0x01);
}

TEST(UlidTest, RandomOverflowMovesToTheNextMillisecond) {
  UlidGenerator gen([] { return int64_t{5000}; },
                    [](std::span<uint8_t> out) { std::memset(out.data(), 0xFF, out.size()); });
  Ulid a = gen.Next();  // random part all ones
  Ulid b = gen.Next();
  EXPECT_GT(b, a);
  EXPECT_EQ(b.timestamp_ms(), 5001u);
}

TEST(UlidTest, ConcurrentGenerationIsUniqueAndIncreasingPerThread) {
  UlidGenerator gen;  // real clock and randomness
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;
  std::vector<std::vector<Ulid>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) results[t].push_back(gen.Next());
    });
  }
  for (std::thread& th : threads) th.join();
  std::set<Ulid> all;
  for (const auto& ids : results) {
    EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
    all.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
}

}  // namespace
}  // namespace sovai::base
