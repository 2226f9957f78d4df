#include "objstore/iam_policy.h"

#include <gtest/gtest.h>

#include <string>

namespace sovai::objstore {
namespace {

IamPolicy MustParse(const std::string& text, std::string_view bucket = "b") {
  auto p = IamPolicy::Parse(text, bucket);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().ToString()) << "\n" << text;
  return p.ok() ? std::move(*p) : IamPolicy();
}

std::string Malformed(const std::string& text, std::string_view bucket = "b") {
  auto p = IamPolicy::Parse(text, bucket);
  if (p.ok()) return "parsed";
  EXPECT_EQ(p.error().code, S3Code::kMalformedPolicy) << p.error().ToString();
  return p.error().message;
}

PolicyRequest Req(std::string user, std::string action, std::string resource) {
  PolicyRequest r;
  r.user = std::move(user);
  r.anonymous = r.user.empty();
  r.action = std::move(action);
  r.resource = std::move(resource);
  return r;
}

// One statement around a Condition block.
std::string WithCondition(const std::string& condition, const std::string& effect = "Allow") {
  return R"({"Version":"2012-10-17","Statement":[{"Effect":")" + effect +
         R"(","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::b/*","Condition":)" +
         condition + "}]}";
}

TEST(IamPolicyTest, PrincipalsActionsAndResources) {
  IamPolicy p = MustParse(R"({"Statement":[
    {"Effect":"Allow","Principal":{"AWS":["bob","arn:aws:iam::123:user/carol"]},
     "Action":["s3:Get*","s3:ListBucket"],"Resource":["arn:aws:s3:::b","arn:aws:s3:::b/pub/*"]},
    {"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::dave:root"},"Action":"s3:GetObject",
     "Resource":"arn:aws:s3:::b/*"}]})");
  EXPECT_EQ(p.Evaluate(Req("bob", "s3:GetObject", "arn:aws:s3:::b/pub/x")), PolicyEffect::kAllow);
  EXPECT_EQ(p.Evaluate(Req("carol", "s3:getobject", "arn:aws:s3:::b/pub/x")),
            PolicyEffect::kAllow);  // actions compare case-insensitively
  EXPECT_EQ(p.Evaluate(Req("bob", "s3:GetObject", "arn:aws:s3:::b/private/x")),
            PolicyEffect::kNone);
  EXPECT_EQ(p.Evaluate(Req("bob", "s3:PutObject", "arn:aws:s3:::b/pub/x")), PolicyEffect::kNone);
  EXPECT_EQ(p.Evaluate(Req("bob", "s3:ListBucket", "arn:aws:s3:::b")), PolicyEffect::kAllow);
  EXPECT_EQ(p.Evaluate(Req("eve", "s3:GetObject", "arn:aws:s3:::b/pub/x")), PolicyEffect::kNone);
  EXPECT_EQ(p.Evaluate(Req("", "s3:GetObject", "arn:aws:s3:::b/pub/x")), PolicyEffect::kNone);
  EXPECT_EQ(p.Evaluate(Req("dave", "s3:GetObject", "arn:aws:s3:::b/any")), PolicyEffect::kAllow);
  // A user id that is a suffix of an ARN's account part is not that user.
  EXPECT_EQ(p.Evaluate(Req("ol", "s3:GetObject", "arn:aws:s3:::b/pub/x")), PolicyEffect::kNone);
}

TEST(IamPolicyTest, DenyWinsOverAllowAndNotElementsInvert) {
  IamPolicy p = MustParse(R"({"Statement":[
    {"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::b/*"},
    {"Effect":"Deny","Principal":"*","Action":"s3:DeleteObject","Resource":"arn:aws:s3:::b/*"},
    {"Effect":"Deny","NotPrincipal":{"AWS":"alice"},"Action":"s3:PutObject",
     "NotResource":"arn:aws:s3:::b/drop/*"}]})");
  EXPECT_EQ(p.Evaluate(Req("bob", "s3:GetObject", "arn:aws:s3:::b/k")), PolicyEffect::kAllow);
  EXPECT_EQ(p.Evaluate(Req("bob", "s3:DeleteObject", "arn:aws:s3:::b/k")), PolicyEffect::kDeny);
  EXPECT_EQ(p.Evaluate(Req("bob", "s3:PutObject", "arn:aws:s3:::b/k")), PolicyEffect::kDeny);
  EXPECT_EQ(p.Evaluate(Req("bob", "s3:PutObject", "arn:aws:s3:::b/drop/k")), PolicyEffect::kAllow);
  EXPECT_EQ(p.Evaluate(Req("alice", "s3:PutObject", "arn:aws:s3:::b/k")), PolicyEffect::kAllow);
  IamPolicy not_action = MustParse(
      R"({"Statement":{"Effect":"Allow","Principal":"*","NotAction":"s3:Delete*",
      "Resource":"arn:aws:s3:::b/*"}})");
  EXPECT_EQ(not_action.Evaluate(Req("x", "s3:GetObject", "arn:aws:s3:::b/k")),
            PolicyEffect::kAllow);
  EXPECT_EQ(not_action.Evaluate(Req("x", "s3:DeleteObject", "arn:aws:s3:::b/k")),
            PolicyEffect::kNone);
}

TEST(IamPolicyTest, StringConditionsAndMissingKeys) {
  IamPolicy eq =
      MustParse(WithCondition(R"({"StringEquals":{"s3:x-amz-acl":["private","public-read"]}})"));
  PolicyRequest r = Req("bob", "s3:PutObject", "arn:aws:s3:::b/k");
  EXPECT_EQ(eq.Evaluate(r), PolicyEffect::kNone);  // key absent: false
  r.Set("s3:x-amz-acl", "public-read");
  EXPECT_EQ(eq.Evaluate(r), PolicyEffect::kAllow);
  IamPolicy ne = MustParse(WithCondition(R"({"StringNotEquals":{"s3:x-amz-acl":"public-read"}})"));
  EXPECT_EQ(ne.Evaluate(r), PolicyEffect::kNone);
  EXPECT_EQ(ne.Evaluate(Req("bob", "s3:PutObject", "arn:aws:s3:::b/k")), PolicyEffect::kAllow)
      << "a negated operator on an absent key holds, as IAM documents";
  IamPolicy like = MustParse(WithCondition(R"({"StringLike":{"S3:Prefix":["home/*","pub?"]}})"));
  PolicyRequest list = Req("bob", "s3:ListBucket", "arn:aws:s3:::b/x");
  list.Set("s3:prefix", "home/bob/");
  EXPECT_EQ(like.Evaluate(list), PolicyEffect::kAllow) << "condition keys are case-insensitive";
  IamPolicy not_like = MustParse(WithCondition(R"({"StringNotLike":{"s3:prefix":"home/*"}})"));
  EXPECT_EQ(not_like.Evaluate(list), PolicyEffect::kNone);
  IamPolicy ignore_case =
      MustParse(WithCondition(R"({"StringEqualsIgnoreCase":{"aws:UserAgent":"BOTO3"}})"));
  PolicyRequest ua = Req("bob", "s3:GetObject", "arn:aws:s3:::b/k");
  ua.Set("aws:UserAgent", "boto3");
  EXPECT_EQ(ignore_case.Evaluate(ua), PolicyEffect::kAllow);
  IamPolicy if_exists =
      MustParse(WithCondition(R"({"StringEqualsIfExists":{"s3:x-amz-acl":"private"}})"));
  EXPECT_EQ(if_exists.Evaluate(Req("bob", "s3:PutObject", "arn:aws:s3:::b/k")),
            PolicyEffect::kAllow);
  EXPECT_EQ(if_exists.Evaluate(r), PolicyEffect::kNone);
}

TEST(IamPolicyTest, TagConditionsKeepTheTagKeyExact) {
  IamPolicy p = MustParse(WithCondition(
      R"({"StringEquals":{"s3:ExistingObjectTag/Team":"ml","s3:RequestObjectTag/Stage":"prod"}})"));
  PolicyRequest r = Req("bob", "s3:PutObject", "arn:aws:s3:::b/k");
  r.Set("s3:ExistingObjectTag/Team", "ml");
  EXPECT_EQ(p.Evaluate(r), PolicyEffect::kNone) << "both conditions must hold";
  r.Set("s3:requestobjecttag/Stage", "prod");
  EXPECT_EQ(p.Evaluate(r), PolicyEffect::kAllow);
  PolicyRequest other_case = Req("bob", "s3:PutObject", "arn:aws:s3:::b/k");
  other_case.Set("s3:ExistingObjectTag/team", "ml");
  other_case.Set("s3:RequestObjectTag/Stage", "prod");
  EXPECT_EQ(p.Evaluate(other_case), PolicyEffect::kNone);
  IamPolicy keys = MustParse(
      WithCondition(R"({"ForAllValues:StringEquals":{"s3:RequestObjectTagKeys":["a","b"]}})"));
  PolicyRequest k = Req("bob", "s3:PutObject", "arn:aws:s3:::b/k");
  k.Set("s3:RequestObjectTagKeys", "a");
  k.Set("s3:RequestObjectTagKeys", "b");
  EXPECT_EQ(keys.Evaluate(k), PolicyEffect::kAllow);
  k.Set("s3:RequestObjectTagKeys", "c");
  EXPECT_EQ(keys.Evaluate(k), PolicyEffect::kNone);
  IamPolicy any =
      MustParse(WithCondition(R"({"ForAnyValue:StringEquals":{"s3:RequestObjectTagKeys":"c"}})"));
  EXPECT_EQ(any.Evaluate(k), PolicyEffect::kAllow);
}

TEST(IamPolicyTest, IpNumericDateBoolAndNull) {
  IamPolicy ip = MustParse(
      WithCondition(R"({"IpAddress":{"aws:SourceIp":["10.0.0.0/8","2001:db8::/32"]}})", "Deny"));
  PolicyRequest r = Req("bob", "s3:GetObject", "arn:aws:s3:::b/k");
  r.Set("aws:SourceIp", "10.2.3.4");
  EXPECT_EQ(ip.Evaluate(r), PolicyEffect::kDeny);
  PolicyRequest v6 = Req("bob", "s3:GetObject", "arn:aws:s3:::b/k");
  v6.Set("aws:SourceIp", "2001:db8::1");
  EXPECT_EQ(ip.Evaluate(v6), PolicyEffect::kDeny);
  PolicyRequest outside = Req("bob", "s3:GetObject", "arn:aws:s3:::b/k");
  outside.Set("aws:SourceIp", "127.0.0.1");
  EXPECT_EQ(ip.Evaluate(outside), PolicyEffect::kNone);
  IamPolicy not_ip = MustParse(WithCondition(R"({"NotIpAddress":{"aws:SourceIp":"10.0.0.0/8"}})"));
  EXPECT_EQ(not_ip.Evaluate(outside), PolicyEffect::kAllow);
  EXPECT_EQ(not_ip.Evaluate(r), PolicyEffect::kNone);

  IamPolicy num = MustParse(WithCondition(R"({"NumericLessThanEquals":{"s3:max-keys":"10"}})"));
  PolicyRequest list = Req("bob", "s3:ListBucket", "arn:aws:s3:::b/x");
  list.Set("s3:max-keys", "10");
  EXPECT_EQ(num.Evaluate(list), PolicyEffect::kAllow);
  PolicyRequest many = Req("bob", "s3:ListBucket", "arn:aws:s3:::b/x");
  many.Set("s3:max-keys", "11");
  EXPECT_EQ(num.Evaluate(many), PolicyEffect::kNone);
  PolicyRequest junk = Req("bob", "s3:ListBucket", "arn:aws:s3:::b/x");
  junk.Set("s3:max-keys", "ten");
  EXPECT_EQ(num.Evaluate(junk), PolicyEffect::kNone);
  IamPolicy gt = MustParse(WithCondition(R"({"NumericGreaterThan":{"s3:max-keys":5}})"));
  EXPECT_EQ(gt.Evaluate(list), PolicyEffect::kAllow);

  IamPolicy date =
      MustParse(WithCondition(R"({"DateLessThan":{"aws:CurrentTime":"2030-01-01T00:00:00Z"}})"));
  PolicyRequest now = Req("bob", "s3:GetObject", "arn:aws:s3:::b/k");
  now.Set("aws:CurrentTime", "2026-12-01T00:00:00Z");
  EXPECT_EQ(date.Evaluate(now), PolicyEffect::kAllow);
  IamPolicy epoch = MustParse(WithCondition(R"({"DateGreaterThan":{"aws:EpochTime":1893456000}})"));
  PolicyRequest e = Req("bob", "s3:GetObject", "arn:aws:s3:::b/k");
  e.Set("aws:EpochTime", "1800000000");
  EXPECT_EQ(epoch.Evaluate(e), PolicyEffect::kNone);

  IamPolicy tls = MustParse(WithCondition(R"({"Bool":{"aws:SecureTransport":"false"}})", "Deny"));
  PolicyRequest plain = Req("bob", "s3:GetObject", "arn:aws:s3:::b/k");
  plain.Set("aws:SecureTransport", "false");
  EXPECT_EQ(tls.Evaluate(plain), PolicyEffect::kDeny);
  PolicyRequest secure = Req("bob", "s3:GetObject", "arn:aws:s3:::b/k");
  secure.Set("aws:SecureTransport", "true");
  EXPECT_EQ(tls.Evaluate(secure), PolicyEffect::kNone);

  IamPolicy null = MustParse(WithCondition(R"({"Null":{"s3:x-amz-acl":"true"}})"));
  EXPECT_EQ(null.Evaluate(plain), PolicyEffect::kAllow);
  plain.Set("s3:x-amz-acl", "private");
  EXPECT_EQ(null.Evaluate(plain), PolicyEffect::kNone);
}

TEST(IamPolicyTest, PolicyVariablesInResources) {
  IamPolicy p = MustParse(R"({"Statement":[{"Effect":"Allow","Principal":"*",
    "Action":"s3:*","Resource":"arn:aws:s3:::b/home/${aws:username}/*"}]})");
  EXPECT_EQ(p.Evaluate(Req("bob", "s3:PutObject", "arn:aws:s3:::b/home/bob/x")),
            PolicyEffect::kAllow);
  EXPECT_EQ(p.Evaluate(Req("bob", "s3:PutObject", "arn:aws:s3:::b/home/alice/x")),
            PolicyEffect::kNone);
  EXPECT_EQ(p.Evaluate(Req("", "s3:PutObject", "arn:aws:s3:::b/home//x")), PolicyEffect::kAllow)
      << "anonymous has no user name; the variable is empty";
}

TEST(IamPolicyTest, IsPublicFollowsAwsRule) {
  EXPECT_TRUE(MustParse(WithCondition("{}")).IsPublic());
  EXPECT_TRUE(MustParse(R"({"Statement":{"Effect":"Allow","Principal":{"AWS":"*"},
    "Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}})")
                  .IsPublic());
  EXPECT_FALSE(MustParse(R"({"Statement":{"Effect":"Allow","Principal":{"AWS":"bob"},
    "Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}})")
                   .IsPublic());
  EXPECT_FALSE(MustParse(WithCondition("{}", "Deny")).IsPublic());
  EXPECT_FALSE(
      MustParse(WithCondition(R"({"IpAddress":{"aws:SourceIp":"10.1.0.0/16"}})")).IsPublic());
  EXPECT_TRUE(MustParse(WithCondition(R"({"IpAddress":{"aws:SourceIp":"0.0.0.0/0"}})")).IsPublic());
  EXPECT_TRUE(MustParse(WithCondition(R"({"StringLike":{"aws:userid":"*"}})")).IsPublic());
  EXPECT_TRUE(MustParse(WithCondition(R"({"StringEquals":{"s3:prefix":"pub/"}})")).IsPublic());
}

TEST(IamPolicyTest, MalformedPoliciesSayWhatIsWrong) {
  EXPECT_NE(Malformed("not json").find("valid JSON"), std::string::npos);
  EXPECT_NE(Malformed("[]").find("valid JSON"), std::string::npos);
  EXPECT_NE(Malformed(R"({"Statement":[]})").find("1 to 100"), std::string::npos);
  EXPECT_NE(Malformed(R"({"Version":"2020-01-01","Statement":{}})").find("version"),
            std::string::npos);
  EXPECT_NE(Malformed(R"({"Statement":{"Effect":"Maybe"}})").find("Effect"), std::string::npos);
  const std::string base = R"("Effect":"Allow","Principal":"*","Action":"s3:GetObject")";
  EXPECT_NE(Malformed("{\"Statement\":{" + base + "}}").find("Resource"), std::string::npos);
  EXPECT_NE(Malformed("{\"Statement\":{" + base + R"(,"Resource":"arn:aws:s3:::other/*"}})")
                .find("invalid resource"),
            std::string::npos);
  EXPECT_NE(Malformed("{\"Statement\":{" + base + R"(,"Resource":"*"}})").find("invalid resource"),
            std::string::npos);
  EXPECT_NE(Malformed(R"({"Statement":{"Effect":"Allow","Principal":"*","Action":"iam:Pass",
    "Resource":"arn:aws:s3:::b"}})")
                .find("invalid action"),
            std::string::npos);
  EXPECT_NE(Malformed(R"({"Statement":{"Effect":"Allow","Principal":"bob","Action":"s3:*",
    "Resource":"arn:aws:s3:::b"}})")
                .find("principal"),
            std::string::npos);
  EXPECT_NE(Malformed(R"({"Statement":{"Effect":"Allow","Principal":{"Service":"x"},
    "Action":"s3:*","Resource":"arn:aws:s3:::b"}})")
                .find("Service"),
            std::string::npos);
  EXPECT_NE(Malformed("{\"Statement\":{" + base + R"(,"Resource":"arn:aws:s3:::b","Extra":1}})")
                .find("Unknown field Extra"),
            std::string::npos);
  EXPECT_NE(
      Malformed(WithCondition(R"({"StringSortOf":{"s3:prefix":"a"}})")).find("Condition type"),
      std::string::npos);
  EXPECT_NE(Malformed(WithCondition(R"({"StringEquals":{"ec2:Region":"a"}})"))
                .find("invalid condition key"),
            std::string::npos);
  EXPECT_NE(
      Malformed(WithCondition(R"({"IpAddress":{"aws:SourceIp":"10.0.0.0/33"}})")).find("CIDR"),
      std::string::npos);
  EXPECT_NE(
      Malformed(WithCondition(R"({"NumericLessThan":{"s3:max-keys":"many"}})")).find("numbers"),
      std::string::npos);
  EXPECT_NE(
      Malformed(WithCondition(R"({"DateLessThan":{"aws:CurrentTime":"soon"}})")).find("dates"),
      std::string::npos);
  EXPECT_NE(
      Malformed(WithCondition(R"({"Bool":{"aws:SecureTransport":"yes"}})")).find("true or false"),
      std::string::npos);
  EXPECT_NE(Malformed(WithCondition(R"({"StringEquals":{"s3:prefix":{"a":1}}})")).find("values"),
            std::string::npos);
}

TEST(IamPolicyTest, LimitsAreEnforcedBeforeParsing) {
  std::string big = WithCondition(R"({"StringEquals":{"s3:prefix":")" +
                                  std::string(kMaxPolicyBytes, 'a') + "\"}}");
  EXPECT_NE(Malformed(big).find("at most"), std::string::npos);
  std::string deep =
      std::string(kMaxPolicyJsonDepth + 1, '[') + std::string(kMaxPolicyJsonDepth + 1, ']');
  EXPECT_NE(Malformed("{\"Statement\":" + deep + "}").find("nest"), std::string::npos);
  // Brackets inside strings do not count.
  MustParse(R"({"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject",
    "Resource":"arn:aws:s3:::b/[[[[[[[[[[[[[[[[[[[["}})");
  std::string many = R"({"Statement":[)";
  for (size_t i = 0; i <= kMaxPolicyStatements; ++i) {
    many +=
        std::string(i ? "," : "") +
        R"({"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b"})";
  }
  EXPECT_NE(Malformed(many + "]}").find("1 to 100"), std::string::npos);
}

TEST(IamPolicyTest, WildcardsAndCidrs) {
  EXPECT_TRUE(IamWildcardMatch("a*b?d", "axxxbcd", false));
  EXPECT_FALSE(IamWildcardMatch("a*b?d", "axxxbd", false));
  EXPECT_TRUE(IamWildcardMatch("S3:GET*", "s3:GetObject", true));
  EXPECT_FALSE(IamWildcardMatch("S3:GET*", "s3:GetObject", false));
  EXPECT_TRUE(IamWildcardMatch("*", "", false));
  EXPECT_TRUE(IpInCidr("192.168.1.9:5000", "192.168.0.0/16"));
  EXPECT_TRUE(IpInCidr("[::1]:80", "::1"));
  EXPECT_FALSE(IpInCidr("::1", "127.0.0.1/8"));
  EXPECT_FALSE(IpInCidr("10.0.0.1", "10.0.0.0/x"));
  EXPECT_FALSE(IpInCidr("nonsense", "0.0.0.0/0"));
  EXPECT_TRUE(IpInCidr("8.8.8.8", "0.0.0.0/0"));
}

}  // namespace
}  // namespace sovai::objstore
