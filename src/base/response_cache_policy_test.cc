#include "base/response_cache_policy.h"

#include <gtest/gtest.h>

#include <optional>

#include "base/json.h"

namespace sovai::base {
namespace {

std::optional<CompletionCacheFacts> Facts(std::string_view body) {
  Result<nlohmann::json> doc = ParseJson(body);
  EXPECT_TRUE(doc.ok()) << doc.status();
  return CompletionCacheFactsOf(doc.ok() ? *doc : nlohmann::json());
}

ResponseCacheUse Use(std::string_view body, std::string_view cache_control = "") {
  return DecideResponseCache(CompletionCacheable(Facts(body)), ParseCacheControl(cache_control));
}

constexpr ResponseCacheUse kLookupAndStore{.lookup = true, .store = true};
constexpr ResponseCacheUse kStoreOnly{.lookup = false, .store = true};
constexpr ResponseCacheUse kBypass{};

TEST(CacheControlTest, EachDirective) {
  EXPECT_EQ(ParseCacheControl(""), CacheControl::kDefault);
  EXPECT_EQ(ParseCacheControl("max-age=60"), CacheControl::kDefault);
  EXPECT_EQ(ParseCacheControl("private, max-age=0"), CacheControl::kDefault);
  EXPECT_EQ(ParseCacheControl("no-store"), CacheControl::kNoStore);
  EXPECT_EQ(ParseCacheControl(" private ,NO-STORE "), CacheControl::kNoStore);
  EXPECT_EQ(ParseCacheControl("no-cache"), CacheControl::kNoCache);
  EXPECT_EQ(ParseCacheControl("max-age=0, No-Cache"), CacheControl::kNoCache);
  EXPECT_EQ(ParseCacheControl("no-cache=\"x\""), CacheControl::kNoCache);
  // no-store is the stronger one, in either order.
  EXPECT_EQ(ParseCacheControl("no-cache, no-store"), CacheControl::kNoStore);
  EXPECT_EQ(ParseCacheControl("no-store, no-cache"), CacheControl::kNoStore);
  // Whole directives only.
  EXPECT_EQ(ParseCacheControl("no-storex"), CacheControl::kDefault);
  EXPECT_EQ(ParseCacheControl("xno-cache"), CacheControl::kDefault);
  EXPECT_EQ(ParseCacheControl("no-store-ish, no-cache-please"), CacheControl::kDefault);
}

TEST(CompletionCacheFactsTest, ReadsTheFieldsAsSent) {
  std::optional<CompletionCacheFacts> f = Facts(R"({"model":"m"})");
  ASSERT_TRUE(f);
  EXPECT_FALSE(f->stream || f->greedy || f->seeded);
  EXPECT_TRUE(Facts(R"({"temperature":0})")->greedy);
  EXPECT_TRUE(Facts(R"({"temperature":0.0})")->greedy);
  EXPECT_TRUE(Facts(R"({"top_k":1,"temperature":0.8})")->greedy);
  EXPECT_FALSE(Facts(R"({"temperature":0.2})")->greedy);
  EXPECT_FALSE(Facts(R"({"temperature":"0"})")->greedy);
  EXPECT_FALSE(Facts(R"({"top_k":2})")->greedy);
  EXPECT_TRUE(Facts(R"({"seed":7})")->seeded);
  EXPECT_TRUE(Facts(R"({"seed":0})")->seeded);
  EXPECT_FALSE(Facts(R"({"seed":null})")->seeded);
  EXPECT_TRUE(Facts(R"({"stream":true})")->stream);
  EXPECT_FALSE(Facts(R"({"stream":false})")->stream);
  EXPECT_FALSE(Facts(R"({"stream":null})")->stream);
  // Bodies the engine refuses.
  EXPECT_FALSE(Facts(R"({"stream":"no","temperature":0})"));
  EXPECT_FALSE(Facts(R"([{"temperature":0}])"));
  EXPECT_FALSE(Facts("0"));
}

TEST(ResponseCachePolicyTest, DeterministicRequestsAreLookedUpAndStored) {
  EXPECT_EQ(Use(R"({"temperature":0})"), kLookupAndStore);
  EXPECT_EQ(Use(R"({"top_k":1})"), kLookupAndStore);
  EXPECT_EQ(Use(R"({"temperature":0.9,"seed":3})"), kLookupAndStore);
  EXPECT_EQ(Use(R"({"temperature":0,"stream":false})"), kLookupAndStore);
  // n > 1 too: greedy choices are all the same, seeded ones each draw from their own seed.
  EXPECT_EQ(Use(R"({"temperature":0.9,"seed":3,"n":4})"), kLookupAndStore);
  EXPECT_EQ(Use(R"({"temperature":0,"n":2})"), kLookupAndStore);
}

TEST(ResponseCachePolicyTest, SamplingAndStreamsBypass) {
  EXPECT_EQ(Use(R"({"model":"m"})"), kBypass);  // temperature 1 by default, no seed
  EXPECT_EQ(Use(R"({"temperature":0.7,"n":2})"), kBypass);
  EXPECT_EQ(Use(R"({"temperature":0.2,"seed":null})"), kBypass);
  EXPECT_EQ(Use(R"({"temperature":0,"stream":true})"), kBypass);
  EXPECT_EQ(Use(R"({"seed":1,"stream":true})"), kBypass);
  EXPECT_EQ(Use(R"({"temperature":0,"stream":"no"})"), kBypass);
  EXPECT_FALSE(CompletionCacheable(std::nullopt));
  EXPECT_EQ(DecideResponseCache(false, CacheControl::kDefault), kBypass);
  EXPECT_EQ(DecideResponseCache(false, CacheControl::kNoCache), kBypass);
  EXPECT_EQ(kBypass.MissStatus(), "bypass");
}

TEST(ResponseCachePolicyTest, NoCacheStoresWithoutLookingUp) {
  EXPECT_EQ(Use(R"({"temperature":0})", "no-cache"), kStoreOnly);
  EXPECT_EQ(Use(R"({"seed":5})", "max-age=0, no-cache"), kStoreOnly);
  EXPECT_EQ(kStoreOnly.MissStatus(), "miss");
  // What is not cacheable stays so.
  EXPECT_EQ(Use(R"({"temperature":0.5})", "no-cache"), kBypass);
  EXPECT_EQ(Use(R"({"temperature":0,"stream":true})", "no-cache"), kBypass);
}

TEST(ResponseCachePolicyTest, NoStoreNeitherLooksUpNorStores) {
  EXPECT_EQ(Use(R"({"temperature":0})", "no-store"), kBypass);
  EXPECT_EQ(Use(R"({"seed":5,"n":3})", "No-Store"), kBypass);
  EXPECT_EQ(Use(R"({"temperature":0})", "no-cache, no-store"), kBypass);
  EXPECT_EQ(Use(R"({"temperature":0.5})", "no-store"), kBypass);
}

}  // namespace
}  // namespace sovai::base
