// `sovai notebook ...` against a fake /v1 (canned notebooks, recorded requests) on a loopback
// net::Server; the client is configured through SOVAI_URL and SOVAI_TOKEN. The real API is
// covered by tests/e2e/notebooks_test.py.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <mutex>
#include <nlohmann/json.hpp>

#include "base/env.h"
#include "cli/client/commands.h"
#include "cli/client/console.h"
#include "net/http.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

constexpr char kLogRecord[] = "2026-11-29T14:03:05.100000Z stderr [I NotebookApp] running\n";

Json NotebookJson(const std::string& state) {
  return {
      {"id", "nb_1"},
      {"name", "explore"},
      {"project", "prj_1"},
      {"user", "usr_1"},
      {"state", state},
      {"reason", state == "FAILED" ? "Jupyter exited (job job_1 ended FAILED: exit code 1)" : ""},
      {"url", "http://api.test/notebooks/nb_1/"},
      {"spec",
       {{"name", "explore"},
        {"editor", "jupyter"},
        {"flavor", "ai1-1-cpu"},
        {"units", 2},
        {"volumes", {"data@EU-WEST-LOCAL/w:/workspace/w:rw"}},
        {"labels", {{"team", "nlp"}}},
        {"env", Json::object()},
        {"idle_timeout_s", 3600}}},
      {"job", "job_1"},
      {"recent_jobs", {"job_1"}},
      {"workdir", "/workspace"},
      {"events", Json::array({{{"at", "2026-11-29T14:00:00Z"}, {"what", "state RUNNING"}}})},
      {"created_at", "2026-11-29T14:00:00Z"},
      {"started_at", "2026-11-29T14:00:00Z"},
      {"last_activity_at", nullptr}};
}

// The fake /v1: records "METHOD target" and POST bodies; GET /v1/notebooks/nb_1 answers the
// states set in turn (the last one repeats).
class FakeApi {
 public:
  FakeApi() {
    net::Router router;
    router.SetFallback([this](net::Request& req) { return Handle(req); });
    server_ = std::make_unique<net::Server>(std::move(router));
    EXPECT_TRUE(server_->Start({.listen = "127.0.0.1:0"}).ok());
  }
  std::string url() const { return "http://" + server_->address(); }
  std::vector<std::string> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  Json body() {
    std::lock_guard lock(mu_);
    return body_;
  }
  void set_states(std::vector<std::string> states) {
    std::lock_guard lock(mu_);
    states_ = std::move(states);
  }

 private:
  net::Response Handle(net::Request& req) {
    std::lock_guard lock(mu_);
    requests_.push_back(std::string(req.method()) + " " + std::string(req.target()));
    if (req.header("Authorization") != "Bearer sov_good") {
      return net::Response::Json(401, R"({"status":401,"detail":"bad token"})");
    }
    const std::string path = req.path();
    if (req.method() == "POST" && path == "/v1/notebooks") {
      body_ = Json::parse(*req.body().ReadAll());
      if (req.query("dry_run") == "true") {
        return net::Response::Json(200, Json{{"price_per_minute_micro_eur", 1000},
                                             {"timeout_s", 3600},
                                             {"cost_at_timeout_micro_eur", 60000},
                                             {"budget_left_eur", nullptr},
                                             {"would_be_refused", false},
                                             {"reason", ""}}
                                            .dump());
      }
      return net::Response::Json(201, NotebookJson("STARTING").dump());
    }
    if (req.method() == "GET" && path == "/v1/notebooks") {
      return net::Response::Json(
          200, Json{{"items", {NotebookJson("RUNNING")}}, {"next_cursor", nullptr}}.dump());
    }
    if (req.method() == "GET" &&
        (path == "/v1/notebooks/nb_1" || path == "/v1/notebooks/explore")) {
      std::string state = states_.front();
      if (states_.size() > 1) states_.erase(states_.begin());
      return net::Response::Json(200, NotebookJson(state).dump());
    }
    if (req.method() == "GET" && path == "/v1/notebooks/nb_1/logs") {
      net::Response res = net::Response::Text(200, req.query("offset") == "0" ? kLogRecord : "");
      res.headers.Set("X-Sovai-Log-Offset", std::to_string(sizeof kLogRecord - 1));
      return res;
    }
    if (req.method() == "POST" && path == "/v1/notebooks/nb_1/push-data") {
      return net::Response::Json(200, R"({"pushed": true})");
    }
    if (req.method() == "POST" && path == "/v1/notebooks/nb_2/push-data") {
      return net::Response::Json(
          409,
          R"({"status":409,"detail":"notebook nb_2 is STOPPED; sync now needs a RUNNING notebook"})");
    }
    if (req.method() == "GET" && path == "/v1/notebooks/nb_img") {
      Json nb = NotebookJson("RUNNING");
      nb["spec"]["image"] = "team/torch-notebook:2.4";
      nb["image_digest"] = "sha256:0123abcd";
      nb["status"]["sync"] = {{"pending_files", 2},
                              {"pending_bytes", 2048},
                              {"oldest_pending_age_s", 12.5},
                              {"last_sync_age_s", 3.0},
                              {"uploaded_files", 7},
                              {"uploaded_bytes", 4096},
                              {"units", 2},
                              {"retried", 0},
                              {"errors", 0}};
      return net::Response::Json(200, nb.dump());
    }
    if (req.method() == "POST" && path == "/v1/notebooks/nb_1/stop") {
      return net::Response::Json(202, NotebookJson("STOPPING").dump());
    }
    if (req.method() == "POST" && path == "/v1/notebooks/nb_1/start") {
      return net::Response::Json(202, NotebookJson("STARTING").dump());
    }
    if (req.method() == "DELETE" && path == "/v1/notebooks/nb_1") {
      return net::Response::Json(202, NotebookJson("DELETING").dump());
    }
    return net::Response::Json(404, R"({"status":404,"detail":"no such notebook"})");
  }

  std::unique_ptr<net::Server> server_;
  std::mutex mu_;  // guards the three below
  std::vector<std::string> requests_;
  Json body_;
  std::vector<std::string> states_ = {"RUNNING"};
};

class NotebookCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-cli-notebooks-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    api_ = std::make_unique<FakeApi>();
    vars_ = {{"HOME", dir_ + "/home"}, {"SOVAI_URL", api_->url()}, {"SOVAI_TOKEN", "sov_good"}};
  }
  void TearDown() override {
    api_.reset();
    base::Env::Default().DeleteDirRecursive(dir_).IgnoreError();
  }
  int Run(std::vector<std::string> args) {
    console_.Clear();
    CommandContext ctx{clock_env_, console_, vars_, {}};
    return RunClientCommand("notebook", args, ctx);
  }

  std::string dir_;
  std::unique_ptr<FakeApi> api_;
  EnvVars vars_;
  base::ManualClock clock_{base::Env::Default().NowUnixMicros()};
  base::ManualClockEnv clock_env_{base::Env::Default(), clock_};
  BufferConsole console_;
};

TEST_F(NotebookCommandsTest, RunPostsTheSpecAndPrintsIdStateAndUrl) {
  ASSERT_EQ(
      Run({"run", "--name", "explore", "--cpu", "2", "-v", "data@EU-WEST-LOCAL/w:/workspace/w:rw",
           "-l", "team=nlp", "--idle-timeout", "30m"}),
      kExitOk)
      << console_.err();
  EXPECT_EQ(console_.out(), "nb_1  STARTING  http://api.test/notebooks/nb_1/\n");
  EXPECT_NE(console_.err().find("?sovai_token="), std::string::npos) << console_.err();
  EXPECT_EQ(api_->body(), Json::parse(R"({
    "name": "explore", "editor": "jupyter", "flavor": "ai1-1-cpu", "units": 2,
    "volumes": ["data@EU-WEST-LOCAL/w:/workspace/w:rw"], "labels": {"team": "nlp"},
    "idle_timeout_s": 1800})"));
}

TEST_F(NotebookCommandsTest, RunWaitPollsUntilRunning) {
  api_->set_states({"STARTING", "STARTING", "RUNNING"});
  ASSERT_EQ(Run({"run", "--wait"}), kExitOk) << console_.err();
  EXPECT_NE(console_.err().find("notebook nb_1: RUNNING"), std::string::npos) << console_.err();
  api_->set_states({"STARTING", "FAILED"});
  EXPECT_EQ(Run({"run", "--wait"}), kExitFailure);
  EXPECT_NE(console_.err().find("Jupyter exited"), std::string::npos) << console_.err();
}

TEST_F(NotebookCommandsTest, DryRunPricesAndCreatesNothing) {
  ASSERT_EQ(Run({"run", "--dry-run", "--cpu", "2"}), kExitOk) << console_.err();
  EXPECT_NE(console_.out().find("Price"), std::string::npos) << console_.out();
  EXPECT_NE(console_.out().find("0.001 €/min"), std::string::npos) << console_.out();
  EXPECT_EQ(api_->requests(), std::vector<std::string>{"POST /v1/notebooks?dry_run=true"});
}

TEST_F(NotebookCommandsTest, BadFlagsAreUsageErrorsThatSendNothing) {
  EXPECT_EQ(Run({"run", "--editor", "emacs"}), kExitUsage);
  EXPECT_NE(console_.err().find("--editor"), std::string::npos) << console_.err();
  EXPECT_EQ(Run({"run", "--volume", "nope"}), kExitUsage);
  EXPECT_EQ(Run({"run", "--idle-timeout", "soon"}), kExitUsage);
  EXPECT_EQ(Run({"run", "--timeout", "5m"}), kExitUsage);  // without --wait
  EXPECT_EQ(Run({"get"}), kExitUsage);
  EXPECT_TRUE(api_->requests().empty());
}

TEST_F(NotebookCommandsTest, ListGetStopStartDeleteAndLogs) {
  ASSERT_EQ(Run({"list"}), kExitOk) << console_.err();
  EXPECT_NE(console_.out().find("nb_1"), std::string::npos);
  EXPECT_NE(console_.out().find("ai1-1-cpu x2"), std::string::npos) << console_.out();
  ASSERT_EQ(Run({"list", "-o", "json"}), kExitOk) << console_.err();
  EXPECT_EQ(Json::parse(console_.out()),
            (Json{{"items", {NotebookJson("RUNNING")}}, {"next_cursor", nullptr}}));
  ASSERT_EQ(Run({"get", "explore"}), kExitOk) << console_.err();
  EXPECT_NE(console_.out().find("/workspace"), std::string::npos) << console_.out();
  EXPECT_NE(console_.out().find("3600s"), std::string::npos) << console_.out();
  EXPECT_NE(console_.out().find("state RUNNING"), std::string::npos) << console_.out();
  ASSERT_EQ(Run({"get", "nb_1", "-o", "json"}), kExitOk);
  EXPECT_EQ(Json::parse(console_.out())["id"], "nb_1");
  ASSERT_EQ(Run({"stop", "nb_1"}), kExitOk);
  EXPECT_EQ(console_.out(), "nb_1  STOPPING\n");
  ASSERT_EQ(Run({"start", "nb_1"}), kExitOk);
  EXPECT_EQ(console_.out(), "nb_1  STARTING\n");
  ASSERT_EQ(Run({"delete", "nb_1"}), kExitOk);
  EXPECT_EQ(console_.out(), "nb_1  DELETING\n");
  ASSERT_EQ(Run({"logs", "nb_1"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(), "[I NotebookApp] running\n");
  ASSERT_EQ(Run({"sync", "nb_1"}), kExitOk) << console_.err();
  EXPECT_EQ(api_->requests().back(), "POST /v1/notebooks/nb_1/push-data");
  EXPECT_NE(console_.out().find("Synced the writable volumes of nb_1"), std::string::npos);
  EXPECT_EQ(Run({"sync", "nb_2"}), kExitFailure);
  EXPECT_NE(console_.err().find("needs a RUNNING notebook"), std::string::npos) << console_.err();
  // The image with its digest, and the live sync, as `job get` shows a job's.
  ASSERT_EQ(Run({"get", "nb_img"}), kExitOk) << console_.err();
  EXPECT_NE(console_.out().find("team/torch-notebook:2.4 (sha256:0123abcd)"), std::string::npos)
      << console_.out();
  EXPECT_NE(console_.out().find("2 files (2.0 KiB) pending, oldest 12 s; last round 3 s ago; 7 "
                                "files, 4.0 KiB, 2 units up"),
            std::string::npos)
      << console_.out();
  EXPECT_EQ(Run({"get", "nb_missing"}), kExitFailure);
  EXPECT_NE(console_.err().find("no such notebook"), std::string::npos) << console_.err();
}

}  // namespace
}  // namespace sovai::cli::client
