// GatewayErrorRenderer on a real net::Server with the routes of the API port `sovai server` runs
// (the gateway's and a REST one, each with a small body limit): the errors the HTTP layer answers
// itself are OpenAI's JSON on the gateway's OpenAI routes and problem+json on the REST API's.
#include "gateway/app_gateway.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "control/problem.h"
#include "net/client.h"

namespace sovai::gateway {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kLimitBytes = 1000;

class GatewayErrorRendererTest : public ::testing::Test {
 protected:
  void SetUp() override {
    net::Router router;
    auto read_body = [](net::Request& r) {
      auto body = r.body().ReadAll();
      if (!body.ok()) return net::Response::Error(body.status());
      return net::Response::Json(200, "{}");
    };
    for (const char* path :
         {"/v1/chat/completions", "/v1/completions", "/apps/{app}/{rest...}", "/v1/jobs"}) {
      router.Post(path, read_body, {.max_body_bytes = kLimitBytes});
    }
    router.Get("/v1/models", [](net::Request&) { return net::Response::Json(200, "{}"); });
    server_ = std::make_unique<net::Server>(std::move(router));
    net::ServerOptions options;
    options.error_renderer = GatewayErrorRenderer(control::RenderServerProblem);
    ASSERT_TRUE(server_->Start(options).ok());
  }

  net::ClientOptions Client() const {
    net::ClientOptions options;
    options.host = "127.0.0.1";
    options.port = server_->port();
    return options;
  }

  // POST `path` with a body one byte over the limit: announced by Content-Length (and refused
  // from the head) or chunked (refused once read).
  net::ClientResponse PostOverTheLimit(const std::string& path, bool chunked) {
    net::HttpClient client(Client());
    net::ClientRequest request;
    request.method = "POST";
    request.target = path;
    uint64_t sent = 0;
    request.source = [&](char* buf, size_t n) -> base::Result<size_t> {
      n = std::min<uint64_t>(n, kLimitBytes + 1 - sent);
      std::memset(buf, 'x', n);
      sent += n;
      return n;
    };
    if (!chunked) {
      request.source_length = kLimitBytes + 1;
      request.expect_continue = true;
    }
    auto res = client.Send(request);
    EXPECT_TRUE(res.ok()) << res.status();
    return res.ok() ? *res : net::ClientResponse{};
  }

  static Json ExpectOpenAiError(const net::ClientResponse& res, int status) {
    EXPECT_EQ(res.status, status) << res.body;
    EXPECT_EQ(res.headers.Get("Content-Type").value_or(""), "application/json") << res.body;
    Json doc = Json::parse(res.body, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(doc.is_object() && doc["error"].is_object()) << res.body;
    if (!doc.is_object() || !doc["error"].is_object()) return Json::object();
    Json error = doc["error"];
    EXPECT_TRUE(error["message"].is_string()) << res.body;
    EXPECT_TRUE(error.contains("param") && error.contains("code")) << res.body;
    return error;
  }

  static void ExpectProblem(const net::ClientResponse& res, int status) {
    EXPECT_EQ(res.status, status) << res.body;
    EXPECT_EQ(res.headers.Get("Content-Type").value_or(""), "application/problem+json") << res.body;
    Json doc = Json::parse(res.body, nullptr, /*allow_exceptions=*/false);
    EXPECT_EQ(doc["status"], status) << res.body;
    EXPECT_FALSE(doc.contains("error")) << res.body;
  }

  std::unique_ptr<net::Server> server_;
};

TEST_F(GatewayErrorRendererTest, BodyOverTheLimitOnGatewayRoutesIsAnOpenAiError) {
  for (const char* path :
       {"/v1/chat/completions", "/v1/completions", "/apps/app_1/v1/chat/completions"}) {
    for (bool chunked : {false, true}) {
      SCOPED_TRACE(std::string(path) + (chunked ? " chunked" : " by Content-Length"));
      Json error = ExpectOpenAiError(PostOverTheLimit(path, chunked), 413);
      EXPECT_EQ(error["type"], "invalid_request_error");
      EXPECT_EQ(error["code"], "request_too_large");
      EXPECT_EQ(error["param"], nullptr);
      EXPECT_NE(error["message"].get<std::string>().find("limit of 1000 bytes"), std::string::npos)
          << error;
    }
  }
}

TEST_F(GatewayErrorRendererTest, WrongMethodOnTheCatalogIsAnOpenAiError) {
  net::HttpClient client(Client());
  auto res = client.Get("/v1/chat/completions");
  ASSERT_TRUE(res.ok()) << res.status();
  Json error = ExpectOpenAiError(*res, 405);
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_EQ(error["code"], nullptr);
  res = client.Post("/v1/models", "{}");
  ASSERT_TRUE(res.ok()) << res.status();
  ExpectOpenAiError(*res, 405);
}

TEST_F(GatewayErrorRendererTest, TheRestApiKeepsProblemJson) {
  ExpectProblem(PostOverTheLimit("/v1/jobs", false), 413);
  ExpectProblem(PostOverTheLimit("/v1/jobs", true), 413);
  net::HttpClient client(Client());
  auto res = client.Get("/v1/audio/speech");  // no such route: the REST API's 404
  ASSERT_TRUE(res.ok()) << res.status();
  ExpectProblem(*res, 404);
  res = client.Get("/apps/");  // not an app's path
  ASSERT_TRUE(res.ok()) << res.status();
  ExpectProblem(*res, 404);
}

TEST(GatewayErrorRendererWithoutRequestTest, AHeadThatDidNotParseGetsTheFallback) {
  net::Response response;
  response.status = 400;
  response.error_message = "malformed request head";
  GatewayErrorRenderer(control::RenderServerProblem)(nullptr, response);
  EXPECT_EQ(response.headers.Get("Content-Type").value_or(""), "application/problem+json");
}

}  // namespace
}  // namespace sovai::gateway
