// POST policy documents (post_policy.h): what parses, what each condition accepts, and the
// AccessDenied messages AWS gives for an expired policy, a failed condition and an extra field.
#include "objstore/post_policy.h"

#include <gtest/gtest.h>

#include <string>

#include "base/time.h"
#include "objstore/limits.h"

namespace sovai::objstore {
namespace {

constexpr char kPolicy[] = R"({
  "expiration": "2026-12-01T12:00:00.000Z",
  "conditions": [
    {"bucket": "photos"},
    ["starts-with", "$key", "user/alice/"],
    {"acl": "public-read"},
    ["eq", "$Content-Type", "image/png"],
    ["starts-with", "$x-amz-meta-note", ""],
    ["content-length-range", 1, "1048576"],
    {"x-amz-algorithm": "AWS4-HMAC-SHA256"}
  ]})";

int64_t At(const char* rfc3339) { return *base::ParseRfc3339(rfc3339); }

PostFields Fields() {
  return {{"bucket", "photos"},
          {"key", "user/alice/cat.png"},
          {"acl", "public-read"},
          {"content-type", "image/png"},
          {"x-amz-meta-note", "anything"},
          {"x-amz-algorithm", "AWS4-HMAC-SHA256"},
          {"policy", "eyJ..."},
          {"x-amz-signature", "abc"},
          {"x-ignore-tracking", "1"}};
}

TEST(PostPolicyTest, ParsesConditionsAndTheRange) {
  auto p = ParsePostPolicy(kPolicy);
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_EQ(p->expiration_micros, At("2026-12-01T12:00:00Z"));
  ASSERT_EQ(p->conditions.size(), 6u);
  EXPECT_EQ(p->conditions[0].field, "bucket");
  EXPECT_EQ(p->conditions[1].kind, PostCondition::Kind::kStartsWith);
  EXPECT_EQ(p->conditions[3].field, "content-type");  // names compare case-insensitively
  ASSERT_TRUE(p->length_range.has_value());
  EXPECT_EQ(p->length_range->first, 1u);
  EXPECT_EQ(p->length_range->second, 1048576u);
}

TEST(PostPolicyTest, AcceptsAMatchingForm) {
  auto p = ParsePostPolicy(kPolicy);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(CheckPostPolicy(*p, Fields(), At("2026-12-01T11:59:59Z")).has_value());
}

TEST(PostPolicyTest, RefusesWhatThePolicyDoesNotAllow) {
  auto p = ParsePostPolicy(kPolicy);
  ASSERT_TRUE(p.ok());
  auto check = [&](PostFields f, int64_t now = At("2026-12-01T11:00:00Z")) {
    S3Status st = CheckPostPolicy(*p, f, now);
    if (!st) return std::string("ok");
    EXPECT_EQ(st->code, S3Code::kAccessDenied);
    return st->message;
  };
  EXPECT_EQ(check(Fields(), At("2026-12-01T12:00:00Z")),
            "Invalid according to Policy: Policy expired.");
  PostFields wrong_key = Fields();
  wrong_key[1].second = "user/bob/cat.png";
  EXPECT_EQ(
      check(wrong_key),
      R"(Invalid according to Policy: Policy Condition failed: ["starts-with","$key","user/alice/"])");
  PostFields wrong_bucket = Fields();
  wrong_bucket[0].second = "other";
  EXPECT_EQ(check(wrong_bucket),
            R"(Invalid according to Policy: Policy Condition failed: {"bucket":"photos"})");
  PostFields missing_acl = Fields();
  missing_acl.erase(missing_acl.begin() + 2);
  EXPECT_EQ(check(missing_acl),
            R"(Invalid according to Policy: Policy Condition failed: {"acl":"public-read"})");
  PostFields extra = Fields();
  extra.emplace_back("success_action_status", "201");
  EXPECT_EQ(check(extra), "Invalid according to Policy: Extra input fields: success_action_status");
  PostFields exact = Fields();
  exact[3].second = "image/png; charset=x";  // eq is exact, not a prefix
  EXPECT_NE(check(exact), "ok");
}

TEST(PostPolicyTest, RefusesMalformedPolicies) {
  const char* bad[] = {
      "",
      "not json",
      "[]",
      R"({"conditions": []})",
      R"({"expiration": "tomorrow", "conditions": []})",
      R"({"expiration": 5, "conditions": []})",
      R"({"expiration": "2026-12-01T12:00:00Z"})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": {}})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": [], "extra": 1})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": [["matches", "$key", "a"]]})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": [["eq", "key", "a"]]})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": [["eq", "$key"]]})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": [["eq", "$key", 5]]})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": [{"key": 5}]})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": [{}]})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": ["key"]})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": [["content-length-range", 5, 1]]})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": [["content-length-range", -1, 1]]})",
      R"({"expiration": "2026-12-01T12:00:00Z", "conditions": [[[[["deep"]]]]]})",
  };
  for (const char* text : bad) {
    auto p = ParsePostPolicy(text);
    ASSERT_FALSE(p.ok()) << text;
    EXPECT_EQ(p.error().code, S3Code::kInvalidPolicyDocument) << text;
    EXPECT_FALSE(p.error().message.empty());
  }
  std::string many = R"({"expiration": "2026-12-01T12:00:00Z", "conditions": [)";
  for (size_t i = 0; i <= kMaxPostPolicyConditions; ++i)
    many += (i ? "," : "") + std::string(R"({"a":"b"})");
  EXPECT_FALSE(ParsePostPolicy(many + "]}").ok());
  EXPECT_FALSE(ParsePostPolicy(std::string(kMaxPostPolicyBytes + 1, ' ')).ok());
}

}  // namespace
}  // namespace sovai::objstore
