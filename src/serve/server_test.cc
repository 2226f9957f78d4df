// The HTTP face of `sovai-engine serve` on a real loopback server, for what needs no model: the
// errors the HTTP layer answers itself (body limits, unknown routes) are OpenAI errors like every
// other one. The server listens before its model loads; here the model directory does not exist,
// so the engine never loads and generation answers 503, in OpenAI's shape too. (Without an engine
// no handler reads a body, so a chunked body over the limit is not seen here: the net server turns
// it into the same Response::Error(413) as a Content-Length over it: tests/integration/http_test.cc
// and the gateway's renderer test, src/gateway/app_gateway_test.cc, cover that.)
#include "serve/server.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "net/client.h"
#include "serve/openai_api.h"

namespace sovai::serve {
namespace {

class InferenceServerErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServeOptions options;
    options.engine.model_dir = "/nonexistent/sovai-serve-server-test-model";
    options.listen = "127.0.0.1:0";
    auto server = InferenceServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    EXPECT_FALSE(server_->WaitReady().ok());
  }

  net::ClientOptions Client() const {
    net::ClientOptions options;
    options.host = "127.0.0.1";
    options.port = server_->port();
    return options;
  }

  // The response is an OpenAI error: {"error": {"message", "type", "param", "code"}}.
  static nlohmann::json ExpectOpenAiError(const net::ClientResponse& res, int status,
                                          std::string_view type) {
    EXPECT_EQ(res.status, status) << res.body;
    EXPECT_EQ(res.headers.Get("Content-Type").value_or(""), "application/json") << res.body;
    nlohmann::json doc = nlohmann::json::parse(res.body, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(doc.is_object() && doc["error"].is_object()) << res.body;
    if (!doc.is_object() || !doc["error"].is_object()) return nlohmann::json::object();
    const nlohmann::json& error = doc["error"];
    EXPECT_EQ(error.size(), 4u) << res.body;
    EXPECT_TRUE(error["message"].is_string() && !error["message"].get<std::string>().empty());
    EXPECT_EQ(error["type"], type) << res.body;
    EXPECT_TRUE(error.contains("param") && error.contains("code")) << res.body;
    return error;
  }

  std::unique_ptr<InferenceServer> server_;
};

TEST_F(InferenceServerErrorsTest, BodyOverTheLimitByContentLengthIsAnOpenAiError) {
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize"}) {
    net::HttpClient client(Client());
    net::ClientRequest request;
    request.method = "POST";
    request.target = path;
    // Announced, never sent: the server answers from the head.
    request.source = [](char*, size_t) -> base::Result<size_t> { return size_t{0}; };
    request.source_length = kMaxRequestBodyBytes + 1;
    request.expect_continue = true;
    auto res = client.Send(request);
    ASSERT_TRUE(res.ok()) << res.status();
    nlohmann::json error = ExpectOpenAiError(*res, 413, "invalid_request_error");
    EXPECT_EQ(error["code"], "request_too_large") << path;
    EXPECT_NE(error["message"].get<std::string>().find("exceeds the limit of 16777216 bytes"),
              std::string::npos)
        << error;
  }
}

TEST_F(InferenceServerErrorsTest, UnknownRoutesAndMethodsAreOpenAiErrors) {
  net::HttpClient client(Client());
  auto missing = client.Post("/v1/audio/speech", "{}");
  ASSERT_TRUE(missing.ok()) << missing.status();
  nlohmann::json error = ExpectOpenAiError(*missing, 404, "invalid_request_error");
  EXPECT_NE(error["message"].get<std::string>().find("/v1/audio/speech"), std::string::npos);
  EXPECT_EQ(error["code"], nullptr);

  auto wrong_method = client.Get("/v1/chat/completions");
  ASSERT_TRUE(wrong_method.ok()) << wrong_method.status();
  ExpectOpenAiError(*wrong_method, 405, "invalid_request_error");
  EXPECT_EQ(wrong_method->headers.Get("Allow").value_or(""), "POST");

  // The pooling routes exist, and answer 503 like the others while the model loads.
  for (const char* path : {"/v1/embeddings", "/v1/rerank"}) {
    auto loading = client.Post(path, R"({"model": "m", "input": "x"})");
    ASSERT_TRUE(loading.ok()) << loading.status();
    EXPECT_NE(loading->status, 404) << path;
  }
}

TEST_F(InferenceServerErrorsTest, ALoadFailureIsA503OpenAiError) {
  net::HttpClient client(Client());
  auto res = client.Post("/v1/chat/completions", R"({"model":"m","messages":[]})");
  ASSERT_TRUE(res.ok()) << res.status();
  ExpectOpenAiError(*res, 503, "server_error");
}

}  // namespace
}  // namespace sovai::serve
