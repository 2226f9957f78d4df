#include "objstore/cors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "objstore/s3_xml.h"

namespace sovai::objstore {
namespace {

CorsRule Rule(std::vector<std::string> origins, std::vector<std::string> methods,
              std::vector<std::string> headers = {}) {
  CorsRule r;
  r.allowed_origins = std::move(origins);
  r.allowed_methods = std::move(methods);
  r.allowed_headers = std::move(headers);
  return r;
}

TEST(CorsWildcardMatchTest, Patterns) {
  EXPECT_TRUE(CorsWildcardMatch("*", "", false));
  EXPECT_TRUE(CorsWildcardMatch("*", "anything", false));
  EXPECT_TRUE(CorsWildcardMatch("https://*.example.com", "https://a.example.com", false));
  EXPECT_TRUE(CorsWildcardMatch("https://*.example.com", "https://a.b.example.com", false));
  EXPECT_FALSE(CorsWildcardMatch("https://*.example.com", "https://example.com", false));
  EXPECT_FALSE(CorsWildcardMatch("https://*.example.com", "http://a.example.com", false));
  EXPECT_FALSE(CorsWildcardMatch("https://*.example.com", "https://a.example.com.evil", false));
  EXPECT_TRUE(CorsWildcardMatch("http://localhost:*", "http://localhost:3000", false));
  EXPECT_TRUE(CorsWildcardMatch("x-amz-*", "X-Amz-Date", true));
  EXPECT_FALSE(CorsWildcardMatch("x-amz-*", "X-Amz-Date", false));
  EXPECT_TRUE(CorsWildcardMatch("a*b*c", "aXXbYYbc", false));  // needs backtracking
  EXPECT_FALSE(CorsWildcardMatch("a*b*c", "aXXbYYb", false));
  EXPECT_TRUE(CorsWildcardMatch("exact", "exact", false));
  EXPECT_FALSE(CorsWildcardMatch("exact", "exactly", false));
  EXPECT_FALSE(CorsWildcardMatch("", "x", false));
  EXPECT_TRUE(CorsWildcardMatch("", "", false));
}

TEST(MatchCorsTest, FirstMatchingRuleWins) {
  CorsConfiguration config;
  config.rules = {Rule({"https://app.example.com"}, {"PUT"}, {"content-type"}),
                  Rule({"https://*.example.com"}, {"GET", "PUT"}, {"*"}), Rule({"*"}, {"GET"})};
  EXPECT_EQ(MatchCors(config, "https://app.example.com", "PUT", {"content-type"}),
            &config.rules[0]);
  // Rule 0 does not allow x-amz-date: rule 1 does.
  EXPECT_EQ(MatchCors(config, "https://app.example.com", "PUT", {"content-type", "x-amz-date"}),
            &config.rules[1]);
  EXPECT_EQ(MatchCors(config, "https://other.example.com", "GET", {}), &config.rules[1]);
  EXPECT_EQ(MatchCors(config, "https://evil.com", "GET", {}), &config.rules[2]);
  // Rule 2 allows no request headers at all.
  EXPECT_EQ(MatchCors(config, "https://evil.com", "GET", {"x-custom"}), nullptr);
  EXPECT_EQ(MatchCors(config, "https://evil.com", "DELETE", {}), nullptr);
  // Methods match exactly.
  EXPECT_EQ(MatchCors(config, "https://evil.com", "get", {}), nullptr);
  EXPECT_EQ(MatchCors(CorsConfiguration{}, "https://a.example.com", "GET", {}), nullptr);
}

TEST(MatchCorsTest, HeadersAreCaseInsensitiveWithWildcards) {
  CorsConfiguration config;
  config.rules = {Rule({"http://localhost:3000"}, {"PUT"}, {"Content-Type", "x-amz-*"})};
  EXPECT_NE(MatchCors(config, "http://localhost:3000", "PUT",
                      {"content-type", "X-AMZ-DATE", "x-amz-content-sha256"}),
            nullptr);
  EXPECT_EQ(MatchCors(config, "http://localhost:3000", "PUT", {"authorization"}), nullptr);
  // Origins are compared case-sensitively, as S3 does.
  EXPECT_EQ(MatchCors(config, "http://LOCALHOST:3000", "PUT", {}), nullptr);
}

TEST(ParseAccessControlRequestHeadersTest, SplitsTrimsLowercases) {
  EXPECT_EQ(ParseAccessControlRequestHeaders("Content-Type, X-Amz-Date,,  authorization "),
            (std::vector<std::string>{"content-type", "x-amz-date", "authorization"}));
  EXPECT_TRUE(ParseAccessControlRequestHeaders("").empty());
  EXPECT_TRUE(ParseAccessControlRequestHeaders(" , ").empty());
}

TEST(CorsHeadersTest, PreflightForASpecificOrigin) {
  CorsRule rule = Rule({"https://*.example.com"}, {"GET", "PUT"}, {"*"});
  rule.expose_headers = {"ETag"};
  rule.max_age_seconds = 3000;
  CorsHeaders h =
      CorsPreflightHeaders(rule, "https://app.example.com", {"content-type", "x-amz-date"});
  EXPECT_EQ(h,
            (CorsHeaders{
                {"Access-Control-Allow-Origin", "https://app.example.com"},
                {"Access-Control-Allow-Credentials", "true"},
                {"Access-Control-Allow-Methods", "GET, PUT"},
                {"Access-Control-Expose-Headers", "ETag"},
                {"Access-Control-Max-Age", "3000"},
                {"Access-Control-Allow-Headers", "content-type, x-amz-date"},
                {"Vary", "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"},
            }));
}

TEST(CorsHeadersTest, PreflightForAnyOrigin) {
  CorsRule rule = Rule({"*"}, {"GET"});
  CorsHeaders h = CorsPreflightHeaders(rule, "https://x.test", {});
  EXPECT_EQ(h,
            (CorsHeaders{
                {"Access-Control-Allow-Origin", "*"},
                {"Access-Control-Allow-Methods", "GET"},
                {"Vary", "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"},
            }));
}

TEST(CorsHeadersTest, FirstMatchingOriginPatternDecidesStar) {
  // "https://a.test" is listed before "*": the origin is echoed with credentials.
  CorsRule rule = Rule({"https://a.test", "*"}, {"GET"});
  CorsHeaders h = CorsActualHeaders(rule, "https://a.test");
  ASSERT_GE(h.size(), 2u);
  EXPECT_EQ(h[0].second, "https://a.test");
  EXPECT_EQ(h[1].first, "Access-Control-Allow-Credentials");
  CorsHeaders other = CorsActualHeaders(rule, "https://b.test");
  EXPECT_EQ(other[0].second, "*");
}

TEST(CorsHeadersTest, ActualRequest) {
  CorsRule rule = Rule({"http://localhost:*"}, {"GET", "HEAD"});
  rule.expose_headers = {"ETag", "x-amz-version-id"};
  EXPECT_EQ(CorsActualHeaders(rule, "http://localhost:8080"),
            (CorsHeaders{
                {"Access-Control-Allow-Origin", "http://localhost:8080"},
                {"Access-Control-Allow-Credentials", "true"},
                {"Access-Control-Allow-Methods", "GET, HEAD"},
                {"Access-Control-Expose-Headers", "ETag, x-amz-version-id"},
                {"Vary", "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"},
            }));
}

TEST(ValidateCorsConfigurationTest, Rules) {
  CorsConfiguration ok;
  ok.rules = {Rule({"https://*.example.com", "*"}, {"GET", "PUT", "HEAD", "POST", "DELETE"},
                   {"x-amz-*", "*"})};
  EXPECT_FALSE(ValidateCorsConfiguration(ok));

  EXPECT_EQ(ValidateCorsConfiguration(CorsConfiguration{})->code, S3Code::kMalformedXML);
  CorsConfiguration bad_method = ok;
  bad_method.rules[0].allowed_methods.push_back("OPTIONS");
  EXPECT_EQ(ValidateCorsConfiguration(bad_method)->code, S3Code::kInvalidRequest);
  CorsConfiguration no_origin = ok;
  no_origin.rules[0].allowed_origins.clear();
  EXPECT_EQ(ValidateCorsConfiguration(no_origin)->code, S3Code::kMalformedXML);
  CorsConfiguration too_many;
  too_many.rules.assign(101, ok.rules[0]);
  EXPECT_EQ(ValidateCorsConfiguration(too_many)->code, S3Code::kInvalidRequest);
}

TEST(CorsEndToEndTest, Boto3ConfigurationThroughMatchAndHeaders) {
  auto config = ParseCorsConfiguration(
      R"(<CORSConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><CORSRule><ID>web</ID><AllowedHeader>*</AllowedHeader><AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod><AllowedOrigin>https://*.example.com</AllowedOrigin><AllowedOrigin>http://localhost:3000</AllowedOrigin><ExposeHeader>ETag</ExposeHeader><ExposeHeader>x-amz-request-id</ExposeHeader><MaxAgeSeconds>3000</MaxAgeSeconds></CORSRule><CORSRule><AllowedMethod>GET</AllowedMethod><AllowedOrigin>*</AllowedOrigin></CORSRule></CORSConfiguration>)");
  ASSERT_TRUE(config.ok()) << config.error().message;
  std::vector<std::string> headers =
      ParseAccessControlRequestHeaders("content-type,x-amz-date,authorization");
  const CorsRule* rule = MatchCors(*config, "http://localhost:3000", "PUT", headers);
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->id, "web");
  EXPECT_EQ(MatchCors(*config, "http://localhost:3001", "PUT", headers), nullptr);
  const CorsRule* any = MatchCors(*config, "http://localhost:3001", "GET", {});
  ASSERT_NE(any, nullptr);
  EXPECT_EQ(CorsActualHeaders(*any, "http://localhost:3001")[0],
            (std::pair<std::string, std::string>{"Access-Control-Allow-Origin", "*"}));
}

}  // namespace
}  // namespace sovai::objstore
