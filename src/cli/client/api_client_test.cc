#include "cli/client/api_client.h"

#include <gtest/gtest.h>

#include <mutex>

#include "net/http.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

TEST(ProblemToStatusTest, DetailAndFieldErrors) {
  base::Status st = ProblemToStatus(400, R"({
    "type": "urn:sovai:problem:invalid-argument", "title": "Invalid argument", "status": 400,
    "detail": "the job spec has 2 invalid fields",
    "errors": [{"field": "volumes[1]", "message": "missing '@REGION'"},
               {"field": "env.PATH", "message": "is set by the platform"}]})");
  EXPECT_EQ(st.code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "the job spec has 2 invalid fields\n"
            "  volumes[1]: missing '@REGION'\n"
            "  env.PATH: is set by the platform");
}

// What /v1 sends (control/problem.h): a detail that is read alone, so it often states the field
// errors already. Each is printed once, with its field named once (issue: "volumes[0]:
// volumes[0]: bucket ..." under the same line).
TEST(ProblemToStatusTest, WhatTheDetailSaysIsNotRepeated) {
  // A one-field problem whose message starts with its field (a job's missing bucket).
  EXPECT_EQ(ProblemToStatus(404, R"json({"type": "urn:sovai:problem:not-found", "status": 404,
    "detail": "volumes[0]: bucket 'nosuchbucket' does not exist in this project",
    "errors": [{"field": "volumes[0]",
                "message": "volumes[0]: bucket 'nosuchbucket' does not exist in this project"}]})json")
                .message(),
            "volumes[0]: bucket 'nosuchbucket' does not exist in this project");
  // The same from a server that no longer repeats the field in the entry.
  EXPECT_EQ(ProblemToStatus(404, R"json({"detail": "volumes[0]: bucket 'b' does not exist",
    "errors": [{"field": "volumes[0]", "message": "bucket 'b' does not exist"}]})json")
                .message(),
            "volumes[0]: bucket 'b' does not exist");
  // A one-field problem whose message does not name the field (an unknown flavor).
  EXPECT_EQ(ProblemToStatus(404, R"json({"detail": "unknown flavor 'x' (sovai flavor list)",
    "errors": [{"field": "flavor", "message": "unknown flavor 'x' (sovai flavor list)"}]})json")
                .message(),
            "unknown flavor 'x' (sovai flavor list)");
  // A spec's collected errors: the detail lists them all.
  EXPECT_EQ(ProblemToStatus(400, R"json({"detail": "units: must be in [1, 4]; image: is required",
    "errors": [{"field": "units", "message": "must be in [1, 4]"},
               {"field": "image", "message": "is required"}]})json")
                .message(),
            "units: must be in [1, 4]; image: is required");
  // "the request has 2 invalid fields: <the first>": only the second is added.
  EXPECT_EQ(
      ProblemToStatus(400,
                      R"json({"detail": "the request has 2 invalid fields: limit must be 1 to 1000",
    "errors": [{"field": "limit", "message": "limit must be 1 to 1000"},
               {"field": "cursor", "message": "is not a cursor of this list"}]})json")
          .message(),
      "the request has 2 invalid fields: limit must be 1 to 1000\n"
      "  cursor: is not a cursor of this list");
  // The same words for another field are still that field's error.
  EXPECT_EQ(ProblemToStatus(400, R"json({"detail": "name: is required",
    "errors": [{"field": "name", "message": "is required"},
               {"field": "image", "message": "is required"}]})json")
                .message(),
            "name: is required\n  image: is required");
}

TEST(ProblemToStatusTest, TheTypeGivesTheCode) {
  EXPECT_EQ(
      ProblemToStatus(409, R"({"type": "urn:sovai:problem:already-exists", "detail": "x"})").code(),
      base::StatusCode::kAlreadyExists);
  EXPECT_EQ(
      ProblemToStatus(409, R"({"type": "urn:sovai:problem:failed-precondition", "detail": "x"})")
          .code(),
      base::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ProblemToStatus(404, R"({"type": "about:blank", "detail": "no route"})").code(),
            base::StatusCode::kNotFound);
  EXPECT_EQ(ProblemToStatus(403, R"({"detail": "read tokens may only GET"})").code(),
            base::StatusCode::kPermissionDenied);
  EXPECT_EQ(ProblemToStatus(503, "").code(), base::StatusCode::kUnavailable);
  EXPECT_EQ(ProblemToStatus(502, "").code(), base::StatusCode::kInternal);
}

TEST(ProblemToStatusTest, UnauthenticatedSaysHowToLogIn) {
  base::Status st = ProblemToStatus(401, R"({"detail": "the token is revoked"})");
  EXPECT_EQ(st.code(), base::StatusCode::kUnauthenticated);
  EXPECT_NE(st.message().find("the token is revoked"), std::string::npos);
  EXPECT_NE(st.message().find("sovai login"), std::string::npos);
}

TEST(ProblemToStatusTest, NonProblemBodiesAreShownCut) {
  base::Status st = ProblemToStatus(502, "<html>bad gateway</html>");
  EXPECT_EQ(st.message(), "the server answered HTTP 502 Bad Gateway: <html>bad gateway</html>");
  st = ProblemToStatus(500, std::string(10'000, 'x'));
  EXPECT_LT(st.message().size(), 700u);
  EXPECT_EQ(st.message().substr(st.message().size() - 3), "...");
  st = ProblemToStatus(400, R"({"title": "Bad Request"})");
  EXPECT_EQ(st.message(), "Bad Request");
  st = ProblemToStatus(400, R"({"errors": [{"field": "name"}, 5]})");
  EXPECT_EQ(st.message(), "\n  name: invalid");
}

TEST(AddQueryTest, EncodesValues) {
  EXPECT_EQ(AddQuery("/v1/jobs", "labels", "team=nlp,env=prod"),
            "/v1/jobs?labels=team%3Dnlp%2Cenv%3Dprod");
  EXPECT_EQ(AddQuery("/v1/jobs?limit=5", "cursor", "abc"), "/v1/jobs?limit=5&cursor=abc");
}

// A /v1 stand-in: /items pages through 7 items 3 at a time; /empty answers 204; /text answers
// plain text; /bad-json and /loop misbehave. Records the Authorization header.
class FakeApi {
 public:
  FakeApi() {
    net::Router router;
    router.Get("/items", [this](net::Request& req) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        auth_ = std::string(req.header("Authorization").value_or(""));
      }
      int start = 0;
      if (auto cursor = req.query("cursor")) start = std::stoi(std::string(*cursor));
      int limit = std::stoi(std::string(req.query("limit").value_or("50")));
      Json items = Json::array();
      int i = start;
      for (; i < 7 && i < start + std::min(limit, 3); ++i) items.push_back({{"n", i}});
      Json next = i < 7 ? Json(std::to_string(i)) : Json();
      return net::Response::Json(200, Json{{"items", items}, {"next_cursor", next}}.dump());
    });
    router.Get("/loop", [](net::Request&) {
      return net::Response::Json(200, R"({"items": [{"n": 1}], "next_cursor": "same"})");
    });
    router.Get("/empty", [](net::Request&) { return net::Response::Empty(204); });
    router.Get("/text", [](net::Request&) { return net::Response::Text(200, "line\n"); });
    router.Get("/bad-json", [](net::Request&) { return net::Response::Json(200, "{nope"); });
    router.Post("/echo", [](net::Request& req) {
      auto body = req.body().ReadAll();
      return net::Response::Json(201, body.ok() ? *body : "null");
    });
    server_ = std::make_unique<net::Server>(std::move(router));
    EXPECT_TRUE(server_->Start({.listen = "127.0.0.1:0"}).ok());
  }
  std::string url() const { return "http://" + server_->address(); }
  std::string auth() {
    std::lock_guard<std::mutex> lock(mu_);
    return auth_;
  }

 private:
  std::mutex mu_;  // guards auth_
  std::string auth_;
  std::unique_ptr<net::Server> server_;
};

TEST(ApiClientTest, ListFollowsCursorsUpToTheLimit) {
  FakeApi fake;
  auto api = ApiClient::Create(fake.url(), "sov_tok");
  ASSERT_TRUE(api.ok());
  auto all = (*api)->List("/items", 100);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->items.size(), 7u);
  EXPECT_EQ(all->items[6]["n"], 6);
  EXPECT_FALSE(all->truncated);
  EXPECT_EQ(fake.auth(), "Bearer sov_tok");
  auto some = (*api)->List("/items", 4);
  ASSERT_TRUE(some.ok());
  EXPECT_EQ(some->items.size(), 4u);
  EXPECT_TRUE(some->truncated);
  auto loop = (*api)->List("/loop", 100);
  ASSERT_FALSE(loop.ok());
  EXPECT_NE(loop.status().message().find("repeated a cursor"), std::string::npos);
}

TEST(ApiClientTest, BodiesAndErrors) {
  FakeApi fake;
  auto api = ApiClient::Create(fake.url(), "t");
  ASSERT_TRUE(api.ok());
  auto empty = (*api)->Get("/empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->is_null());
  auto echo = (*api)->Post("/echo", Json{{"a", 1}});
  ASSERT_TRUE(echo.ok());
  EXPECT_EQ(*echo, (Json{{"a", 1}}));
  auto bad = (*api)->Get("/bad-json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not JSON"), std::string::npos);
  auto missing = (*api)->Get("/nothing-here");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), base::StatusCode::kNotFound);
  auto text = (*api)->GetRaw("/text");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->body, "line\n");
  std::string streamed;
  auto sunk = (*api)->GetRaw("/text", [&](std::string_view piece) {
    streamed.append(piece);
    return base::Status();
  });
  ASSERT_TRUE(sunk.ok());
  EXPECT_EQ(streamed, "line\n");
}

TEST(ApiClientTest, UnreachableServerNamesTheUrl) {
  // A port nothing listens on: bind one, then close it.
  std::string url;
  {
    FakeApi fake;
    url = fake.url();
  }
  auto api = ApiClient::Create(url, "t");
  ASSERT_TRUE(api.ok());
  auto got = (*api)->Get("/v1/whoami");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("cannot reach the Sovai API at " + url), std::string::npos)
      << got.status();
  EXPECT_FALSE(ApiClient::Create("nonsense", "t").ok());
}

}  // namespace
}  // namespace sovai::cli::client
