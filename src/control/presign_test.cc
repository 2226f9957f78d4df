#include "control/presign.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "objstore/sigv4.h"

namespace sovai::control {
namespace {

using Json = nlohmann::json;

constexpr int64_t kNow = 1'767'225'600'000'000;  // 2026-01-01T00:00:00Z

PresignSpec Parsed(const Json& body) {
  auto parsed = ParsePresignRequest(body);
  if (auto* errors = std::get_if<std::vector<FieldError>>(&parsed)) {
    ADD_FAILURE() << body.dump() << ": " << errors->front().field << ": "
                  << errors->front().message;
    return {};
  }
  return std::get<PresignSpec>(parsed);
}

// The fields the errors name, in order.
std::vector<std::string> BadFields(const Json& body) {
  auto parsed = ParsePresignRequest(body);
  std::vector<std::string> fields;
  if (auto* errors = std::get_if<std::vector<FieldError>>(&parsed)) {
    for (const FieldError& e : *errors) fields.push_back(e.field);
  }
  return fields;
}

TEST(PresignTest, ParsesAFullRequest) {
  PresignSpec spec = Parsed({{"method", "PUT"},
                             {"bucket", "data"},
                             {"key", "dir/a b+ü.txt"},
                             {"query", {{"response-content-type", "text/plain"}}},
                             {"expires_s", 60},
                             {"origin", "http://127.0.0.1:8080"}});
  EXPECT_EQ(spec.method, "PUT");
  EXPECT_EQ(spec.bucket, "data");
  EXPECT_EQ(spec.key, "dir/a b+ü.txt");
  ASSERT_EQ(spec.query.size(), 1u);
  EXPECT_EQ(spec.query[0].first, "response-content-type");
  EXPECT_EQ(spec.expires_s, 60);
  EXPECT_EQ(spec.origin, "http://127.0.0.1:8080");

  PresignSpec service = Parsed({{"method", "GET"}});
  EXPECT_EQ(service.bucket, "");
  EXPECT_EQ(service.expires_s, kDefaultPresignExpiresS);
  EXPECT_EQ(service.origin, "");
  for (const char* origin : {"https://panel.example", "http://[::1]:8080", "http://a-b.c:1"}) {
    EXPECT_EQ(Parsed({{"method", "GET"}, {"origin", origin}}).origin, origin);
  }
}

TEST(PresignTest, NamesEveryBadField) {
  EXPECT_EQ(BadFields(Json::object()), std::vector<std::string>{"method"});
  EXPECT_EQ(BadFields({{"method", "POST"}}), std::vector<std::string>{"method"});
  EXPECT_EQ(BadFields({{"method", "get"}}), std::vector<std::string>{"method"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"bucket", "No_Such"}}),
            std::vector<std::string>{"bucket"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"key", "k"}}), std::vector<std::string>{"key"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"bucket", "data"}, {"key", "a/../b"}}),
            std::vector<std::string>{"key"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"bucket", "data"}, {"key", "./b"}}),
            std::vector<std::string>{"key"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"bucket", "data"}, {"key", std::string(1025, 'k')}}),
            std::vector<std::string>{"key"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"expires_s", 0}}),
            std::vector<std::string>{"expires_s"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"expires_s", kMaxPresignExpiresS + 1}}),
            std::vector<std::string>{"expires_s"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"expires_s", "60"}}),
            std::vector<std::string>{"expires_s"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"query", {{"X-Amz-Expires", "1"}}}}),
            std::vector<std::string>{"query.X-Amz-Expires"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"query", {{"x-sovai-origin", "http://e.vil"}}}}),
            std::vector<std::string>{"query.x-sovai-origin"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"query", {{"prefix", 1}}}}),
            std::vector<std::string>{"query.prefix"});
  EXPECT_EQ(BadFields({{"method", "GET"}, {"query", "prefix=a"}}),
            std::vector<std::string>{"query"});
  Json many = Json::object();
  for (size_t i = 0; i <= kMaxPresignQueryParams; ++i) many["p" + std::to_string(i)] = "v";
  EXPECT_EQ(BadFields({{"method", "GET"}, {"query", many}}), std::vector<std::string>{"query"});
  for (const char* origin : {"null", "file://", "http://", "http://a/b", "http://a:", "http://a:x",
                             "ftp://a", "http://a b", "http://[::1"}) {
    EXPECT_EQ(BadFields({{"method", "GET"}, {"origin", origin}}),
              std::vector<std::string>{"origin"})
        << origin;
  }
  EXPECT_EQ(BadFields({{"method", "GET"}, {"acl", "public"}}), std::vector<std::string>{"acl"});
  // All at once.
  EXPECT_EQ(BadFields({{"method", "PATCH"}, {"bucket", "x"}, {"expires_s", -1}}),
            (std::vector<std::string>{"method", "bucket", "expires_s"}));
}

TEST(PresignTest, ReachableUrlReplacesWildcardHosts) {
  EXPECT_EQ(ReachableUrl("http://127.0.0.1:9000", "x:8080"), "http://127.0.0.1:9000");
  EXPECT_EQ(ReachableUrl("http://127.0.0.1:9000/", "x:8080"), "http://127.0.0.1:9000");
  EXPECT_EQ(ReachableUrl("http://0.0.0.0:9000", "panel.example:8080"), "http://panel.example:9000");
  EXPECT_EQ(ReachableUrl("https://[::]:9000", "[fd00::1]:8080"), "https://[fd00::1]:9000");
  EXPECT_EQ(ReachableUrl("http://0.0.0.0:9000", "panel.example"), "http://panel.example:9000");
  EXPECT_EQ(ReachableUrl("http://0.0.0.0:9000", ""), "http://127.0.0.1:9000");
  EXPECT_EQ(ReachableUrl("http://[::1]:9000", "x"), "http://[::1]:9000");
}

// The URL is one the S3 front end accepts, for exactly the signed method, and a changed origin
// breaks it.
TEST(PresignTest, UrlAuthenticatesAtTheS3FrontEnd) {
  const S3Access access{.endpoint = "http://0.0.0.0:9000",
                        .region = "eu-west-local",
                        .access_key = "AKPANEL",
                        .secret_key = "secret-of-the-project"};
  PresignSpec spec = Parsed({{"method", "PUT"},
                             {"bucket", "data"},
                             {"key", "dir/a b+ü.txt"},
                             {"origin", "http://panel.example:8080"}});
  auto url = PresignUrl(spec, access, "panel.example:8080", kNow);
  ASSERT_TRUE(url.ok()) << url.status();
  const std::string prefix = "http://panel.example:9000/data/dir/a%20b%2B%C3%BC.txt?";
  ASSERT_TRUE(url->starts_with(prefix)) << *url;
  EXPECT_NE(url->find("x-sovai-origin=http%3A%2F%2Fpanel.example%3A8080"), std::string::npos);
  EXPECT_NE(url->find("X-Amz-Expires=900"), std::string::npos);

  auto authenticate = [&](std::string method, std::string target) {
    net::Request request;
    request.set_method(std::move(method));
    EXPECT_TRUE(request.SetTarget(target).ok());
    request.mutable_headers().Add("Host", "panel.example:9000");
    return objstore::Authenticate(
        request, {.region = "eu-west-local", .now_unix_micros = kNow + 1'000'000},
        [&](std::string_view key) -> std::optional<objstore::Credential> {
          if (key != access.access_key) return std::nullopt;
          return objstore::Credential{access.access_key, access.secret_key, "project"};
        });
  };
  const std::string target = url->substr(std::string("http://panel.example:9000").size());
  auto ok = authenticate("PUT", target);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->credential.user_id, "project");
  EXPECT_FALSE(authenticate("DELETE", target).ok());
  std::string forged = target;
  forged.replace(forged.find("panel.example%3A8080"), 20, "evil.example%3A8080X");
  EXPECT_FALSE(authenticate("PUT", forged).ok());

  // The service itself (ListBuckets) and a listing with its query.
  auto list = PresignUrl(Parsed({{"method", "GET"},
                                 {"bucket", "data"},
                                 {"query", {{"list-type", "2"}, {"delimiter", "/"}}}}),
                         access, "panel.example", kNow);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->starts_with("http://panel.example:9000/data?")) << *list;
  EXPECT_TRUE(authenticate("GET", list->substr(25)).ok()) << *list;
  auto service = PresignUrl(Parsed({{"method", "GET"}}), access, "panel.example", kNow);
  ASSERT_TRUE(service.ok());
  EXPECT_TRUE(service->starts_with("http://panel.example:9000/?")) << *service;
}

void Fill(net::Request& request, std::string method, std::string target, std::string origin,
          std::string asked_method = "") {
  request.set_method(std::move(method));
  EXPECT_TRUE(request.SetTarget(target).ok());
  if (!origin.empty()) request.mutable_headers().Add("Origin", origin);
  if (!asked_method.empty()) {
    request.mutable_headers().Add("Access-Control-Request-Method", asked_method);
  }
}

constexpr char kSigned[] = "/data/k?x-sovai-origin=http%3A%2F%2Fpanel%3A8080&X-Amz-Signature=abc";

TEST(PresignTest, CorsPreflightForThePresignedOrigin) {
  net::Request request;
  Fill(request, "OPTIONS", kSigned, "http://panel:8080", "PUT");
  request.mutable_headers().Add("Access-Control-Request-Headers", "Content-Type, X-Amz-Meta-A");
  net::Response response = net::Response::Text(403, "<Error>CORSResponse</Error>");
  ApplyPresignedCors(request, response);
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, "");
  EXPECT_EQ(response.headers.Get("Access-Control-Allow-Origin"), "http://panel:8080");
  EXPECT_EQ(response.headers.Get("Access-Control-Allow-Methods"), "GET, HEAD, PUT, DELETE");
  EXPECT_EQ(response.headers.Get("Access-Control-Allow-Headers"), "content-type, x-amz-meta-a");
  EXPECT_EQ(response.headers.Get("Access-Control-Max-Age"), "600");
  EXPECT_FALSE(response.headers.Has("Access-Control-Allow-Credentials"));
}

TEST(PresignTest, CorsOnTheActualAnswer) {
  net::Request request;
  Fill(request, "PUT", kSigned, "http://panel:8080");
  net::Response response = net::Response::Empty(200);
  response.headers.Set("ETag", "\"e\"");
  ApplyPresignedCors(request, response);
  EXPECT_EQ(response.headers.Get("Access-Control-Allow-Origin"), "http://panel:8080");
  EXPECT_NE(response.headers.Get("Access-Control-Expose-Headers")->find("ETag"), std::string::npos);
  EXPECT_EQ(response.headers.Get("Vary"), "Origin");
  // Errors are readable too (the panel shows S3's message).
  net::Response denied = net::Response::Text(403, "<Error/>");
  ApplyPresignedCors(request, denied);
  EXPECT_EQ(denied.status, 403);
  EXPECT_EQ(denied.headers.Get("Access-Control-Allow-Origin"), "http://panel:8080");
}

TEST(PresignTest, NoCorsForOtherRequests) {
  auto untouched = [](std::string target, std::string origin, std::string asked = "PUT") {
    net::Request request;
    Fill(request, "OPTIONS", std::move(target), std::move(origin), std::move(asked));
    net::Response response = net::Response::Text(403, "denied");
    ApplyPresignedCors(request, response);
    return response.status == 403 && !response.headers.Has("Access-Control-Allow-Origin");
  };
  // Another origin than the signed one; no Origin; no signature; no signed origin.
  EXPECT_TRUE(untouched(kSigned, "http://evil:8080"));
  EXPECT_TRUE(untouched(kSigned, ""));
  EXPECT_TRUE(untouched("/data/k?x-sovai-origin=http%3A%2F%2Fpanel%3A8080", "http://panel:8080"));
  EXPECT_TRUE(untouched("/data/k?X-Amz-Signature=abc", "http://panel:8080"));
  // A method the panel never presigns.
  EXPECT_TRUE(untouched(kSigned, "http://panel:8080", "POST"));
  // The bucket's own rule answered: left as it is.
  net::Request actual;
  Fill(actual, "GET", kSigned, "http://panel:8080");
  net::Response by_bucket = net::Response::Empty(200);
  by_bucket.headers.Set("Access-Control-Allow-Origin", "*");
  ApplyPresignedCors(actual, by_bucket);
  EXPECT_EQ(by_bucket.headers.Get("Access-Control-Allow-Origin"), "*");
  EXPECT_FALSE(by_bucket.headers.Has("Access-Control-Expose-Headers"));
}

}  // namespace
}  // namespace sovai::control
