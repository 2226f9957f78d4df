// `sovai audit list|verify` end to end against a fake of GET /v1/audit and /v1/audit/verify on a
// loopback net::Server, as billing_commands_test.cc does for the billing routes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "cli/client/commands.h"
#include "cli/client/fake_api_test_util.h"
#include "net/http.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

constexpr char kToken[] = "sov_audit";

Json Entry(int64_t seq, const std::string& action) {
  return {{"seq", seq},
          {"at", "2026-11-29T14:00:0" + std::to_string(seq) + "Z"},
          {"actor_user", "usr_1"},
          {"actor_token", "tok_1"},
          {"project", "prj_1"},
          {"action", action},
          {"resource", "/v1/jobs/job_" + std::to_string(seq)},
          {"source", "10.0.0.7:5123"},
          {"result", 201},
          {"detail", ""},
          {"prev_hash", "00"},
          {"hash", "11"}};
}

// Canned answers; `broken` makes /v1/audit/verify report a modified entry 7.
class FakeAuditApi {
 public:
  FakeAuditApi() : server_(StartFakeApiServer([this](net::Request& req) { return Handle(req); })) {}
  std::string url() const { return FakeApiUrl(*server_); }
  std::map<std::string, std::string> query() {
    std::lock_guard<std::mutex> lock(mu_);
    return query_;
  }
  void set_broken(bool broken) {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = broken;
  }

 private:
  net::Response Handle(net::Request& req) {
    std::lock_guard<std::mutex> lock(mu_);
    if (req.header("Authorization").value_or("") != std::string("Bearer ") + kToken) {
      return net::Response::Json(401, R"({"title":"x","status":401,"detail":"bad token"})");
    }
    if (req.path() == "/v1/audit") {
      query_.clear();
      for (const char* name : {"from", "to", "actor", "action", "project"}) {
        if (auto value = req.query(name)) query_[name] = std::string(*value);
      }
      Json body = {{"items", Json::array({Entry(1, "POST /v1/jobs"), Entry(2, "S3 PUT")})},
                   {"next_cursor", nullptr}};
      return net::Response::Json(200, body.dump());
    }
    if (req.path() == "/v1/projects") {  // names for --project
      return net::Response::Json(200, R"({"items":[{"id":"prj_1","name":"nlp"}]})");
    }
    if (req.path() == "/v1/audit/verify") {
      Json body =
          broken_
              ? Json{{"ok", false},
                     {"entries", 6},
                     {"first_bad_seq", 7},
                     {"problem", "modified: entry 7's fields do not match its hash"}}
              : Json{{"ok", true}, {"entries", 12}, {"first_bad_seq", nullptr}, {"problem", ""}};
      return net::Response::Json(200, body.dump());
    }
    return net::Response::Json(404, R"({"title":"x","status":404,"detail":"no route"})");
  }

  std::mutex mu_;  // guards everything below
  std::map<std::string, std::string> query_;
  bool broken_ = false;
  std::unique_ptr<net::Server> server_;  // last: stops before the state its handlers use
};

class AuditCommandsTest : public FakeApiCommandTest<FakeAuditApi> {
 protected:
  AuditCommandsTest() : FakeApiCommandTest(kToken) {}
};

TEST_F(AuditCommandsTest, ListPassesTheFiltersAndPrintsATable) {
  ASSERT_EQ(Run({"audit", "list", "--from", "2026-11-01", "--to", "2026-11-30", "--actor", "tok_1",
                 "--action", "POST /v1/jobs"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(api_.query(), (std::map<std::string, std::string>{{"from", "2026-11-01T00:00:00Z"},
                                                              {"to", "2026-12-01T00:00:00Z"},
                                                              {"actor", "tok_1"},
                                                              {"action", "POST /v1/jobs"}}));
  const std::string out = console_.out();
  EXPECT_NE(out.find("SEQ"), std::string::npos) << out;
  EXPECT_NE(out.find("usr_1/tok_1"), std::string::npos) << out;
  EXPECT_NE(out.find("S3 PUT"), std::string::npos) << out;
  EXPECT_NE(out.find("10.0.0.7:5123"), std::string::npos) << out;
}

// --project takes an id or a name, as every --project flag does (one resolver, command_util.h).
TEST_F(AuditCommandsTest, ListProjectIsAnIdOrAName) {
  ASSERT_EQ(Run({"audit", "list", "--project", "nlp"}), kExitOk) << console_.err();
  EXPECT_EQ(api_.query(), (std::map<std::string, std::string>{{"project", "prj_1"}}));
  ASSERT_EQ(Run({"audit", "list", "--project", "prj_7"}), kExitOk) << console_.err();
  EXPECT_EQ(api_.query(), (std::map<std::string, std::string>{{"project", "prj_7"}}));
  EXPECT_EQ(Run({"audit", "list", "--project", "nobody"}), kExitFailure);
  EXPECT_NE(console_.err().find("no project named 'nobody'"), std::string::npos) << console_.err();
}

TEST_F(AuditCommandsTest, ListAsJsonIsTheApisPage) {
  ASSERT_EQ(Run({"audit", "list", "-o", "json"}), kExitOk) << console_.err();
  Json out = Json::parse(console_.out());
  ASSERT_TRUE(out["items"].is_array()) << out;
  ASSERT_EQ(out["items"].size(), 2u);
  EXPECT_EQ(out["items"][1]["action"], "S3 PUT");
  EXPECT_TRUE(out["next_cursor"].is_null()) << out;
}

TEST_F(AuditCommandsTest, ListRejectsBadDates) {
  EXPECT_EQ(Run({"audit", "list", "--from", "yesterday"}), kExitUsage);
  EXPECT_EQ(Run({"audit", "list", "--from", "2026-11-05", "--to", "2026-11-01"}), kExitUsage);
}

TEST_F(AuditCommandsTest, VerifyOkExitsZero) {
  ASSERT_EQ(Run({"audit", "verify"}), kExitOk) << console_.err();
  EXPECT_NE(console_.out().find("12 entries verified"), std::string::npos) << console_.out();
}

TEST_F(AuditCommandsTest, VerifyBrokenExitsOneAndNamesTheEntry) {
  api_.set_broken(true);
  EXPECT_EQ(Run({"audit", "verify"}), kExitFailure);
  EXPECT_NE(console_.out().find("BROKEN at entry 7: modified"), std::string::npos)
      << console_.out();
  EXPECT_EQ(Run({"audit", "verify", "-o", "json"}), kExitFailure);
  EXPECT_EQ(Json::parse(console_.out())["first_bad_seq"], 7);
}

}  // namespace
}  // namespace sovai::cli::client
