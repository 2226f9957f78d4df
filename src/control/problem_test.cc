#include "control/problem.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

namespace sovai::control {
namespace {

using base::StatusCode;

TEST(ProblemTest, EveryCodeHasOneRowWithADistinctType) {
  std::set<std::string_view> types;
  for (int c = static_cast<int>(StatusCode::kCancelled);
       c <= static_cast<int>(StatusCode::kUnauthenticated); ++c) {
    const ProblemKind& kind = ProblemKindOf(static_cast<StatusCode>(c));
    EXPECT_EQ(kind.code, static_cast<StatusCode>(c));
    EXPECT_TRUE(kind.type.starts_with("urn:sovai:problem:")) << kind.type;
    EXPECT_FALSE(kind.title.empty());
    EXPECT_GE(kind.http_status, 400);
    EXPECT_LT(kind.http_status, 600);
    EXPECT_TRUE(types.insert(kind.type).second) << kind.type;
  }
}

TEST(ProblemTest, MapsTheCodesClientsDependOn) {
  EXPECT_EQ(HttpStatusOf(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusOf(StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusOf(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(StatusCode::kAlreadyExists), 409);
  EXPECT_EQ(HttpStatusOf(StatusCode::kFailedPrecondition), 409);
  EXPECT_EQ(HttpStatusOf(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusOf(StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusOf(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(StatusCode::kDeadlineExceeded), 504);
}

TEST(ProblemTest, DocumentCarriesTheRfc9457MembersAndFieldErrors) {
  auto doc = nlohmann::json::parse(ProblemJson(base::InvalidArgumentError("bad \"name\""),
                                               {{"name", "must be a string"}, {"role", "x"}}));
  EXPECT_EQ(doc["type"], "urn:sovai:problem:invalid-argument");
  EXPECT_EQ(doc["title"], "Invalid argument");
  EXPECT_EQ(doc["status"], 400);
  EXPECT_EQ(doc["detail"], "bad \"name\"");
  ASSERT_EQ(doc["errors"].size(), 2u);
  EXPECT_EQ(doc["errors"][0]["field"], "name");
  EXPECT_EQ(doc["errors"][0]["message"], "must be a string");
  EXPECT_EQ(doc["errors"][1]["field"], "role");

  auto plain = nlohmann::json::parse(ProblemJson(base::NotFoundError("user 'x' not found")));
  EXPECT_FALSE(plain.contains("errors"));
  EXPECT_EQ(plain["status"], 404);
}

TEST(ProblemTest, ResponseHasProblemContentTypeAndBearerChallengeOn401) {
  net::Response r = ProblemResponse(base::UnauthenticatedError("no token"));
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.headers.Get("Content-Type").value_or(""), "application/problem+json");
  EXPECT_EQ(r.headers.Get("WWW-Authenticate").value_or(""), "Bearer realm=\"sovai\"");
  net::Response forbidden = ProblemResponse(base::PermissionDeniedError("no"));
  EXPECT_EQ(forbidden.status, 403);
  EXPECT_FALSE(forbidden.headers.Has("WWW-Authenticate"));
}

TEST(ProblemTest, InvalidUtf8InADetailStillGivesValidJson) {
  std::string doc = ProblemJson(base::InvalidArgumentError("bad byte \xff here"));
  EXPECT_FALSE(nlohmann::json::parse(doc, nullptr, false).is_discarded()) << doc;
}

TEST(ProblemTest, ServerErrorsRenderAsProblems) {
  net::Response not_found;
  not_found.status = 404;
  not_found.error_message = "no route for /v1/nope";
  RenderServerProblem(nullptr, not_found);
  auto doc = nlohmann::json::parse(not_found.body);
  EXPECT_EQ(doc["type"], "urn:sovai:problem:not-found");
  EXPECT_EQ(doc["detail"], "no route for /v1/nope");
  EXPECT_EQ(not_found.headers.Get("Content-Type").value_or(""), "application/problem+json");

  net::Response too_large;
  too_large.status = 413;
  RenderServerProblem(nullptr, too_large);
  doc = nlohmann::json::parse(too_large.body);
  EXPECT_EQ(doc["type"], "about:blank");
  EXPECT_EQ(doc["status"], 413);
  EXPECT_FALSE(doc["title"].get<std::string>().empty());
}

}  // namespace
}  // namespace sovai::control
