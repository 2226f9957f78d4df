// The client commands end to end: a fake /v1 API (canned answers, recorded requests) on a
// loopback net::Server, and the real object store's S3 front end (exec/s3_test_server.h) for the
// bucket commands. The real /v1 API is covered by the e2e test that runs the `sovai` binary.
#include "cli/client/commands.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/time.h"
#include "cli/client/config.h"
#include "exec/s3_test_server.h"
#include "net/http.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

constexpr char kGoodToken[] = "sov_good";
constexpr char kLogRecord1[] = "2026-11-29T14:03:05.100000Z sovai volume sync: 2 files\n";
constexpr char kLogRecord2[] = "2026-11-29T14:03:06.514277Z stdout 42 /workspace/data/a.txt\n";
constexpr char kLogRecord3[] = "2026-11-29T14:03:07.000000Z stderr done\n";

net::Response Problem(int status, std::string detail, Json errors = Json()) {
  const char* type = status == 401   ? "urn:sovai:problem:unauthenticated"
                     : status == 404 ? "urn:sovai:problem:not-found"
                                     : "urn:sovai:problem:invalid-argument";
  Json body = {{"type", type}, {"title", "x"}, {"status", status}, {"detail", detail}};
  if (!errors.is_null()) body["errors"] = errors;
  net::Response res = net::Response::Json(status, body.dump());
  res.headers.Set("Content-Type", "application/problem+json");
  return res;
}

Json JobJson(const std::string& id, const std::string& state, Json spec) {
  return {
      {"id", id},
      {"project", "prj_1"},
      {"user", "usr_1"},
      {"spec", spec},
      {"status", {{"state", state}, {"reason", ""}, {"retries", 0}, {"history", Json::array()}}},
      {"created_unix_micros", 1'764'424'985'000'000}};
}

// An App of docs/api/apps.md: `ready` of `desired` replicas, two replicas listed (job ids are
// ULIDs: job_01B is the newer one), seven scaling events.
Json AppJson(const std::string& url, const std::string& state, Json spec,
             const std::string& replica_state = "RUNNING") {
  const int64_t desired = spec.value("replicas", 1);
  Json events = Json::array();
  for (int i = 1; i <= 7; ++i) {
    events.push_back({{"at", "2026-11-29T14:0" + std::to_string(i) + ":00Z"},
                      {"from", i},
                      {"to", i + 1},
                      {"reason", "REQUESTS " + std::to_string(4 * i + 1) +
                                     " in flight / threshold 4 per replica"}});
  }
  return {{"id", "app_1"},
          {"name", spec.value("name", "support-bot")},
          {"project", "prj_1"},
          {"user", "usr_1"},
          {"state", state},
          {"reason", state == "FAILED" ? "replica job_01B exited with code 1: no config.json" : ""},
          {"url", url + "/apps/app_1/"},
          {"spec", spec},
          {"generation", 1},
          {"status",
           {{"desired_replicas", desired},
            {"ready_replicas", state == "RUNNING" ? desired : 0},
            {"replicas", Json::array({{{"job", "job_01A"},
                                       {"state", "RUNNING"},
                                       {"ready", true},
                                       {"generation", 1},
                                       {"in_flight", 3}},
                                      {{"job", "job_01B"},
                                       {"state", replica_state},
                                       {"ready", false},
                                       {"generation", 1},
                                       {"in_flight", 0}}})},
            {"history", Json::array({{{"state", "QUEUED"}, {"at", "2026-11-29T14:00:00Z"}}})},
            {"scaling_events", events}}},
          {"created_at", "2026-11-29T14:00:00Z"}};
}

Json AppSpec() {
  return {{"name", "support-bot"},
          {"model", "models@EU-WEST-LOCAL/qwen2.5-0.5b"},
          {"flavor", "ai1-1-cpu"},
          {"units", 1},
          {"autoscaling", {{"min_replicas", 0}, {"max_replicas", 4}}},
          {"labels", {{"team", "nlp"}}}};
}

// The fake /v1. Every request is recorded as "METHOD target"; bodies of POSTs by path.
class FakeApi {
 public:
  explicit FakeApi(exec::testing::S3TestServer* s3) : s3_(s3) {
    net::Router router;
    router.SetFallback([this](net::Request& req) { return Handle(req); });
    server_ = std::make_unique<net::Server>(std::move(router));
    net::ServerOptions options;
    options.listen = "127.0.0.1:0";
    EXPECT_TRUE(server_->Start(options).ok());
  }

  std::string url() const { return "http://" + server_->address(); }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  Json body(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_[path];
  }
  void set_final_state(std::string state, int exit_code) {
    std::lock_guard<std::mutex> lock(mu_);
    final_state_ = std::move(state);
    final_exit_code_ = exit_code;
  }
  // The states GET /v1/apps/app_1 answers in turn (the last one repeats).
  void set_app_states(std::vector<std::string> states) {
    std::lock_guard<std::mutex> lock(mu_);
    app_states_ = std::move(states);
  }
  void set_replica_state(std::string state) {
    std::lock_guard<std::mutex> lock(mu_);
    replica_state_ = std::move(state);
  }
  int app_gets() {
    std::lock_guard<std::mutex> lock(mu_);
    return app_gets_;
  }
  int keys_created() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_created_;
  }

 private:
  net::Response Handle(net::Request& req) {
    const std::string method(req.method());
    const std::string path = req.path();
    std::string body_text = req.body().ReadAll().value_or("");
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(method + " " + std::string(req.target()));
      if (!body_text.empty()) bodies_[path] = Json::parse(body_text, nullptr, false);
    }
    if (req.header("Authorization").value_or("") != std::string("Bearer ") + kGoodToken) {
      return Problem(401, "the token is unknown, revoked or expired");
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (method == "GET" && path == "/v1/whoami") {
      return Ok({{"user", {{"id", "usr_1"}, {"name", "alice"}}},
                 {"project", {{"id", "prj_1"}, {"name", "nlp"}}},
                 {"role", "operator"},
                 {"platform_admin", false},
                 {"token",
                  {{"id", "tok_1"}, {"name", "laptop"}, {"labels", ""}, {"expires_at", nullptr}}}});
    }
    if (method == "GET" && path == "/v1/info") {
      return Ok({{"region", "EU-WEST-LOCAL"}, {"s3_url", s3_->endpoint()}, {"version", "0.1.0"}});
    }
    if (method == "POST" && path == "/v1/users/usr_1/s3-keys") {
      ++keys_created_;
      std::string id = "SVCLITEST" + std::to_string(keys_created_);
      std::string secret = "secret-for-" + id;
      if (s3_->store().PutAccessKey({id, secret, "prj_1"})) return Problem(500, "store");
      keys_.push_back(id);
      return Ok({{"access_key_id", id}, {"secret_access_key", secret}, {"user", "usr_1"}}, 201);
    }
    if (method == "GET" && path == "/v1/users/usr_1/s3-keys") {
      Json items = Json::array();
      for (const std::string& key : keys_) items.push_back({{"access_key_id", key}});
      return Ok({{"items", items}, {"next_cursor", nullptr}});
    }
    if (method == "DELETE" && path.starts_with("/v1/s3-keys/")) return net::Response::Empty(204);
    if (method == "POST" && path == "/v1/jobs") {
      Json spec = bodies_[path];
      if (spec.value("image", "") == "oci:nope") {
        return Problem(400, "the job spec has 1 invalid field",
                       Json::array({{{"field", "image"},
                                     {"message", "an OCI image is oci:bucket@REGION/path"}}}));
      }
      return Ok(JobJson("job_1", "QUEUED", spec), 201);
    }
    if (method == "GET" && path == "/v1/jobs") {
      Json items = Json::array(
          {JobJson(
               "job_2", "RUNNING",
               {{"name", "b"}, {"flavor", "ai1-1-cpu"}, {"units", 2}, {"image", "sovai/shell"}}),
           JobJson(
               "job_1", "DONE",
               {{"name", "a"}, {"flavor", "h100-1-gpu"}, {"units", 1}, {"image", "sovai/shell"}})});
      // ?limit=1 is the first page of two.
      if (req.query("limit").value_or("") == "1") {
        return Ok({{"items", Json::array({items[0]})}, {"next_cursor", "after-job_2"}});
      }
      return Ok({{"items", items}, {"next_cursor", nullptr}});
    }
    if (method == "GET" && path == "/v1/jobs/job_1") {
      Json job = JobJson("job_1", final_state_,
                         {{"image", "sovai/shell"},
                          {"command", {"sh", "-c", "wc -l *"}},
                          {"flavor", "ai1-1-cpu"},
                          {"units", 1}});
      if (final_exit_code_ >= 0) job["status"]["exit_code"] = final_exit_code_;
      job["status"]["allocation"] = {
          {"gpus", Json::array()}, {"cpus", {3}}, {"memory_bytes", 4294967296}};
      return Ok(job);
    }
    if (method == "GET" && path == "/v1/jobs/missing")
      return Problem(404, "job 'missing' does not exist in this project");
    if (method == "GET" && path == "/v1/jobs/job_1/logs") return Logs(req);
    if (method == "POST" && path == "/v1/jobs/job_1/stop")
      return Ok(JobJson("job_1", "FINALIZING", Json::object()), 202);
    if (method == "DELETE" && path == "/v1/jobs/job_1") return net::Response::Empty(204);
    if (method == "POST" && path == "/v1/jobs/job_1/push-data") return Ok({{"pushed", true}});
    if (method == "GET" && path == "/v1/flavors") {
      return Ok({{"items", Json::array({{{"id", "h100-1-gpu"},
                                         {"kind", "gpu"},
                                         {"gpu_model", "H100"},
                                         {"gpus_per_unit", 1},
                                         {"vcpus_per_unit", 30},
                                         {"memory_bytes_per_unit", 214748364800},
                                         {"max_units", 4},
                                         {"price_per_minute_eur", "0.0467"},
                                         {"available", false},
                                         {"reason", "no H100 on this machine"}},
                                        {{"id", "ai1-1-cpu"},
                                         {"kind", "cpu"},
                                         {"gpu_model", ""},
                                         {"gpus_per_unit", 0},
                                         {"vcpus_per_unit", 1},
                                         {"memory_bytes_per_unit", 4294967296},
                                         {"max_units", 8},
                                         {"price_per_minute_eur", "0.0005"},
                                         {"available", true},
                                         {"reason", ""}}})}});
    }
    if (method == "POST" && path == "/v1/tokens") {
      Json created = bodies_[path];
      created["id"] = "tok_2";
      created["token"] = "sov_NEWSECRET";
      if (!created.contains("labels")) created["labels"] = "";
      return Ok(created, 201);
    }
    if (method == "GET" && path == "/v1/tokens") {
      return Ok({{"items", Json::array({{{"id", "tok_1"},
                                         {"name", "laptop"},
                                         {"user", "usr_1"},
                                         {"role", "operator"},
                                         {"labels", ""},
                                         {"created_at", "2026-11-29T14:03:05Z"},
                                         {"expires_at", nullptr},
                                         {"revoked_at", nullptr}},
                                        {{"id", "tok_0"},
                                         {"name", ""},
                                         {"user", "usr_1"},
                                         {"role", "read"},
                                         {"labels", "team=nlp"},
                                         {"created_at", "2026-11-29T14:03:05Z"},
                                         {"expires_at", nullptr},
                                         {"revoked_at", "2026-11-30T00:00:00Z"}}})},
                 {"next_cursor", nullptr}});
    }
    if (method == "DELETE" && path == "/v1/tokens/tok_1") return net::Response::Empty(204);
    if (method == "GET" && path == "/v1/users") {
      return Ok({{"items", Json::array({{{"id", "usr_1"},
                                         {"name", "alice"},
                                         {"display_name", ""},
                                         {"email", ""},
                                         {"created_at", "2026-11-29T14:03:05Z"}},
                                        {{"id", "usr_2"},
                                         {"name", "bob"},
                                         {"display_name", "Bob"},
                                         {"email", "bob@example.eu"},
                                         {"created_at", "2026-11-29T14:03:05Z"}}})},
                 {"next_cursor", nullptr}});
    }
    if (method == "POST" && path == "/v1/users") {
      Json user = bodies_[path];
      if (user.value("name", "") == "Bad Name") {
        return Problem(
            400, "the request body has 1 invalid field",
            Json::array({{{"field", "name"}, {"message", "must match ^[a-z0-9][a-z0-9._-]*$"}}}));
      }
      user["id"] = "usr_3";
      return Ok(user, 201);
    }
    if (method == "DELETE" && path == "/v1/users/usr_2") return net::Response::Empty(204);
    if (method == "GET" && path == "/v1/projects") {
      return Ok({{"items", Json::array({{{"id", "prj_0"},
                                         {"name", "default"},
                                         {"description", ""},
                                         {"system", true},
                                         {"created_at", "2026-11-29T14:03:05Z"}},
                                        {{"id", "prj_1"},
                                         {"name", "nlp"},
                                         {"description", "language"},
                                         {"system", false},
                                         {"created_at", "2026-11-29T14:03:05Z"}}})},
                 {"next_cursor", nullptr}});
    }
    if (method == "POST" && path == "/v1/projects")
      return Ok({{"id", "prj_9"}, {"name", bodies_[path].value("name", "")}}, 201);
    if (method == "PATCH" && path == "/v1/projects/prj_1") {
      Json regions = bodies_[path].value("allowed_regions", Json::array());
      if (regions == Json::array({"US-EAST-1"})) {
        return Problem(400, "the request has 1 invalid field",
                       Json::array({{{"field", "allowed_regions[0]"},
                                     {"message",
                                      "region 'US-EAST-1' is not one this server "
                                      "knows (docs/sovereignty.md); known: "
                                      "EU-WEST-LOCAL, EU-CENTRAL-2"}}}));
      }
      return Ok({{"id", "prj_1"}, {"name", "nlp"}, {"allowed_regions", regions}});
    }
    if (method == "POST" && path == "/v1/projects/prj_1/members/usr_2") {
      return Ok(
          {{"project", "prj_1"}, {"user", "usr_2"}, {"role", bodies_[path].value("role", "")}},
          201);
    }
    if (path.starts_with("/v1/apps") || path.starts_with("/v1/endpoints")) {
      return HandleApps(req, method, path);
    }
    return Problem(404, "no route " + method + " " + path);
  }

  // The apps API of docs/api/apps.md (mu_ held).
  net::Response HandleApps(net::Request& req, const std::string& method, const std::string& path) {
    const std::string url = "http://" + server_->address();
    if (method == "POST" && path == "/v1/apps") {
      Json spec = bodies_[path];
      if (spec.value("name", "") == "taken") {
        return Problem(400, "the app spec has 1 invalid field",
                       Json::array({{{"field", "name"},
                                     {"message", "an app named 'taken' exists in this project"}}}));
      }
      return Ok(AppJson(url, "QUEUED", spec), 201);
    }
    if (method == "GET" && path == "/v1/apps") {
      Json second = AppJson(url, "STOPPED", {{"name", "web"}, {"image", "sovai/shell"}});
      second["id"] = "app_2";
      second["url"] = url + "/apps/app_2/";
      return Ok({{"items", Json::array({AppJson(url, "RUNNING", AppSpec()), second})},
                 {"next_cursor", nullptr}});
    }
    if (path == "/v1/apps/app_1" || path == "/v1/apps/support-bot") {
      if (method == "GET") {
        const std::string state =
            app_states_.empty() ? "RUNNING"
                                : app_states_[std::min<size_t>(app_gets_, app_states_.size() - 1)];
        ++app_gets_;
        return Ok(AppJson(url, state, AppSpec(), replica_state_));
      }
      if (method == "PATCH") {
        Json spec = AppSpec();
        spec.update(bodies_[path]);
        Json app = AppJson(url, "SCALING", spec);
        app["generation"] = 2;
        return Ok(app);
      }
      if (method == "DELETE") return Ok(AppJson(url, "DELETING", AppSpec()), 202);
    }
    if (method == "GET" && path == "/v1/apps/missing") {
      return Problem(404, "app 'missing' does not exist in this project");
    }
    if (method == "GET" && path == "/v1/apps/app_1/logs") return Logs(req);
    if (method == "POST" && path == "/v1/apps/app_1/scale") {
      Json spec = AppSpec();
      spec.erase("autoscaling");
      spec.update(bodies_[path]);
      return Ok(AppJson(url, "SCALING", spec));
    }
    if (method == "POST" && path == "/v1/apps/app_1/stop") {
      return Ok(AppJson(url, "STOPPING", AppSpec()));
    }
    if (method == "POST" && path == "/v1/apps/app_1/start") {
      return Ok(AppJson(url, "QUEUED", AppSpec()));
    }
    if (method == "POST" && path == "/v1/endpoints") {
      Json endpoint = bodies_[path];
      endpoint["app"] = "app_9";
      endpoint["state"] = "QUEUED";
      endpoint["url"] = url + "/apps/app_9/";
      if (!endpoint.contains("rate_limit")) endpoint["rate_limit"] = "400/min";
      return Ok(endpoint, 201);
    }
    if (method == "GET" && path == "/v1/endpoints") {
      return Ok({{"items", Json::array({{{"name", "qwen-small"},
                                         {"app", "app_9"},
                                         {"state", "RUNNING"},
                                         {"rate_limit", "400/min"},
                                         {"url", url + "/apps/app_9/"}}})}});
    }
    if (method == "DELETE" && path == "/v1/endpoints/qwen-small") return net::Response::Empty(204);
    if (method == "DELETE" && path == "/v1/endpoints/nope") {
      return Problem(404, "endpoint 'nope' does not exist");
    }
    return Problem(404, "no route " + method + " " + path);
  }

  // The log: a followed read first sends record 1 and half of record 2, then breaks the
  // connection; the next one sends the rest from its offset and ends (the job has ended).
  net::Response Logs(net::Request& req) {
    const std::string log = std::string(kLogRecord1) + kLogRecord2 + kLogRecord3;
    const uint64_t offset = std::stoull(std::string(req.query("offset").value_or("0")));
    const bool follow = req.query("follow").value_or("") == "true";
    if (offset > log.size()) return Problem(400, "offset is past the end of the log");
    if (!follow) return net::Response::Text(200, log.substr(offset));
    ++follow_reads_;
    if (follow_reads_ == 1) {
      std::string first = log.substr(offset, std::string(kLogRecord1).size() + 20);
      return net::Response::Stream(200, "text/plain", [first](net::BodyWriter& out) {
        SOVAI_RETURN_IF_ERROR(out.Write(first));
        return base::UnavailableError("the server broke the stream");
      });
    }
    std::string rest = log.substr(offset);
    return net::Response::Stream(200, "text/plain",
                                 [rest](net::BodyWriter& out) { return out.Write(rest); });
  }

  static net::Response Ok(const Json& body, int status = 200) {
    return net::Response::Json(status, body.dump());
  }

  exec::testing::S3TestServer* s3_;
  std::mutex mu_;  // guards everything below
  std::vector<std::string> requests_;
  std::map<std::string, Json> bodies_;
  std::vector<std::string> keys_;
  int keys_created_ = 0;
  int follow_reads_ = 0;
  std::vector<std::string> app_states_;
  std::string replica_state_ = "RUNNING";
  int app_gets_ = 0;
  std::string final_state_ = "DONE";
  int final_exit_code_ = 0;
  std::unique_ptr<net::Server> server_;  // last: stops before the state its handlers use
};

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-cli-commands-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(s3_.Start(dir_ + "/s3").ok());
    api_ = std::make_unique<FakeApi>(&s3_);
    vars_ = {{"HOME", dir_ + "/home"}};
  }
  void TearDown() override {
    api_.reset();
    base::Env::Default().DeleteDirRecursive(dir_).IgnoreError();
  }

  // Runs `sovai <args...>`; the output is in console_.
  int Run(std::vector<std::string> args) {
    console_.Clear();
    CommandContext ctx{clock_env_, console_, vars_, {}};
    std::string command = args.front();
    args.erase(args.begin());
    return RunClientCommand(command, args, ctx);
  }
  int Login() { return Run({"login", "--url", api_->url(), "--token", kGoodToken}); }
  std::string ConfigFile() const { return dir_ + "/home/.config/sovai/config.json"; }
  std::string Local(const std::string& name) const { return dir_ + "/local/" + name; }
  void WriteLocal(const std::string& name, const std::string& data) {
    ASSERT_TRUE(base::Env::Default().CreateDirs(base::DirName(Local(name))).ok());
    ASSERT_TRUE(base::Env::Default().WriteFileAtomically(Local(name), data).ok());
  }
  std::string ReadFile(const std::string& path) {
    return base::Env::Default().ReadFile(path).value_or("<missing>");
  }

  std::string dir_;
  exec::testing::S3TestServer s3_;
  std::unique_ptr<FakeApi> api_;
  EnvVars vars_;
  // Starts at the real time (S3 refuses skewed signatures); sleeps return at once.
  base::ManualClock clock_{base::Env::Default().NowUnixMicros()};
  base::ManualClockEnv clock_env_{base::Env::Default(), clock_};
  BufferConsole console_;
};

// --- login, logout, whoami --------------------------------------------------------------------

TEST_F(CommandsTest, LoginWritesAPrivateConfigWithAnS3Key) {
  ASSERT_EQ(Login(), kExitOk) << console_.err();
  EXPECT_NE(
      console_.out().find("Logged in to " + api_->url() + " as alice (project nlp, role operator)"),
      std::string::npos)
      << console_.out();
  EXPECT_NE(console_.out().find("access key SVCLITEST1 (new)"), std::string::npos);
  EXPECT_NE(console_.out().find("Other S3 clients: sovai s3 credentials --format "),
            std::string::npos)
      << console_.out();
  EXPECT_EQ(console_.out().find("secret-for-SVCLITEST1"), std::string::npos) << console_.out();
  struct stat st {};
  ASSERT_EQ(stat(ConfigFile().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto config = LoadConfig(base::Env::Default(), ConfigFile());
  ASSERT_TRUE(config.ok() && config->has_value());
  EXPECT_EQ((*config)->url, api_->url());
  EXPECT_EQ((*config)->token, kGoodToken);
  EXPECT_EQ((*config)->user_id, "usr_1");
  EXPECT_EQ((*config)->project_id, "prj_1");
  EXPECT_EQ((*config)->region, "EU-WEST-LOCAL");
  EXPECT_EQ((*config)->s3_url, s3_.endpoint());
  EXPECT_EQ((*config)->s3_access_key_id, "SVCLITEST1");
  EXPECT_EQ((*config)->s3_secret_access_key, "secret-for-SVCLITEST1");

  // A second login keeps the key that still exists.
  ASSERT_EQ(Login(), kExitOk) << console_.err();
  EXPECT_EQ(api_->keys_created(), 1);
  EXPECT_NE(console_.out().find("SVCLITEST1 (kept)"), std::string::npos) << console_.out();
}

TEST_F(CommandsTest, LoginRefusesABadTokenAndWritesNothing) {
  EXPECT_EQ(Run({"login", "--url", api_->url(), "--token", "sov_bad"}), kExitFailure);
  EXPECT_NE(console_.err().find("sovai login: checking the token: the token is unknown"),
            std::string::npos)
      << console_.err();
  EXPECT_FALSE(base::Env::Default().FileExists(ConfigFile()));
  EXPECT_EQ(Run({"login", "--token", kGoodToken}), kExitUsage);
  EXPECT_NE(console_.err().find("missing --url"), std::string::npos);
  EXPECT_EQ(Run({"login", "--url", "localhost:8080", "--token", "t"}), kExitUsage);
  EXPECT_EQ(Run({"login", "--url", api_->url(), "extra"}), kExitUsage);
}

TEST_F(CommandsTest, LoginFromEnvironmentAndStdin) {
  vars_["SOVAI_URL"] = api_->url();
  console_.set_stdin_line(std::string(kGoodToken) + "\n");
  ASSERT_EQ(Run({"login", "--token", "-", "--no-s3"}), kExitOk) << console_.err();
  auto config = LoadConfig(base::Env::Default(), ConfigFile());
  ASSERT_TRUE(config.ok() && config->has_value());
  EXPECT_EQ((*config)->token, kGoodToken);
  EXPECT_FALSE((*config)->has_s3());
  EXPECT_EQ(api_->keys_created(), 0);
}

TEST_F(CommandsTest, EnvironmentOverridesTheConfigAndSovaiConfigMovesIt) {
  // No config file at all: SOVAI_URL and SOVAI_TOKEN are enough.
  vars_["SOVAI_URL"] = api_->url();
  vars_["SOVAI_TOKEN"] = kGoodToken;
  ASSERT_EQ(Run({"whoami"}), kExitOk) << console_.err();
  EXPECT_NE(console_.out().find("alice (usr_1)"), std::string::npos) << console_.out();
  EXPECT_NE(console_.out().find("not set up"), std::string::npos);
  // A config elsewhere, with a token the environment overrides.
  vars_.erase("SOVAI_URL");
  vars_["SOVAI_CONFIG"] = dir_ + "/custom.json";
  ClientConfig stale;
  stale.url = api_->url();
  stale.token = "sov_stale";
  ASSERT_TRUE(SaveConfig(base::Env::Default(), dir_ + "/custom.json", stale).ok());
  EXPECT_EQ(Run({"whoami"}), kExitOk) << console_.err();
  vars_.erase("SOVAI_TOKEN");
  EXPECT_EQ(Run({"whoami"}), kExitFailure);
  EXPECT_NE(console_.err().find("sovai login"), std::string::npos);
}

TEST_F(CommandsTest, NotLoggedInIsAFailureThatSaysWhatToDo) {
  EXPECT_EQ(Run({"job", "list"}), kExitFailure);
  EXPECT_EQ(console_.err(),
            "sovai job list: not logged in: run 'sovai login --url URL --token TOKEN' (or set "
            "SOVAI_URL and SOVAI_TOKEN)\n");
}

TEST_F(CommandsTest, LogoutRevokesTheKeyAndRemovesTheFile) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"logout"}), kExitOk) << console_.err();
  EXPECT_FALSE(base::Env::Default().FileExists(ConfigFile()));
  auto requests = api_->requests();
  EXPECT_EQ(requests.back(), "DELETE /v1/s3-keys/SVCLITEST1");
  EXPECT_EQ(Run({"logout"}), kExitOk);
  EXPECT_NE(console_.out().find("Not logged in"), std::string::npos);
}

TEST_F(CommandsTest, WhoamiTableAndJson) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"whoami"}), kExitOk);
  EXPECT_NE(console_.out().find("Project:         nlp (prj_1)"), std::string::npos)
      << console_.out();
  EXPECT_NE(console_.out().find("Token:           tok_1 (laptop)"), std::string::npos);
  ASSERT_EQ(Run({"whoami", "-o", "json"}), kExitOk);
  Json me = Json::parse(console_.out());
  EXPECT_EQ(me["role"], "operator");
  EXPECT_EQ(Run({"whoami", "-o", "yaml"}), kExitUsage);
  EXPECT_NE(console_.err().find("--output must be table or json"), std::string::npos);
}

// --- jobs -------------------------------------------------------------------------------------

TEST_F(CommandsTest, JobRunPostsTheSpecOfTheBriefsCommand) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"job", "run", "--flavor", "ai1-1-cpu", "--cpu", "1", "--volume",
                 "my-bucket@EU-WEST-LOCAL/dataset:/workspace/data:ro", "--volume",
                 "my-bucket@EU-WEST-LOCAL/output:/workspace/output:rw", "sovai/shell", "--", "sh",
                 "-c", "wc -l /workspace/data/*"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(console_.out(), "job_1  QUEUED\n");
  EXPECT_EQ(api_->body("/v1/jobs"), Json::parse(R"({
    "image": "sovai/shell", "command": ["sh", "-c", "wc -l /workspace/data/*"],
    "flavor": "ai1-1-cpu", "units": 1,
    "volumes": ["my-bucket@EU-WEST-LOCAL/dataset:/workspace/data:ro",
                "my-bucket@EU-WEST-LOCAL/output:/workspace/output:rw"]})"));
  ASSERT_EQ(Run({"job", "run", "-o", "json", "-e", "A=1", "-l", "team=nlp", "--timeout", "10m",
                 "sovai/shell", "true"}),
            kExitOk);
  Json job = Json::parse(console_.out());
  EXPECT_EQ(job["id"], "job_1");
  EXPECT_EQ(api_->body("/v1/jobs")["timeout_s"], 600);
  EXPECT_EQ(api_->body("/v1/jobs")["command"], Json::array({"true"}));
}

TEST_F(CommandsTest, JobRunUsageErrorsSendNothing) {
  ASSERT_EQ(Login(), kExitOk);
  const size_t before = api_->requests().size();
  EXPECT_EQ(Run({"job", "run", "--gpu", "1", "sovai/shell", "--", "nvidia-smi"}), kExitUsage);
  EXPECT_NE(console_.err().find("--gpu needs --flavor"), std::string::npos);
  EXPECT_EQ(Run({"job", "run", "--volume", "data:/x", "sovai/shell", "--", "ls"}), kExitUsage);
  EXPECT_NE(console_.err().find("missing '@REGION'"), std::string::npos) << console_.err();
  EXPECT_EQ(Run({"job", "run", "sovai/shell", "sh", "-c", "ls"}), kExitUsage);
  EXPECT_NE(console_.err().find("after --"), std::string::npos);
  EXPECT_EQ(Run({"job", "run", "--timeout", "forever", "sovai/shell", "--", "ls"}), kExitUsage);
  EXPECT_EQ(Run({"job", "run"}), kExitUsage);
  EXPECT_NE(console_.err().find("IMAGE [-- COMMAND ARGS...]"), std::string::npos) << console_.err();
  EXPECT_EQ(Run({"job", "run", "a", "b", "--", "c"}), kExitUsage);
  EXPECT_EQ(Run({"job", "run", "--bogus", "x"}), kExitUsage);
  EXPECT_EQ(Run({"job"}), kExitUsage);
  EXPECT_EQ(Run({"job", "frobnicate"}), kExitUsage);
  EXPECT_EQ(api_->requests().size(), before);
}

TEST_F(CommandsTest, ServerErrorsPrintDetailAndFieldsAndExit1) {
  ASSERT_EQ(Login(), kExitOk);
  EXPECT_EQ(Run({"job", "run", "oci:nope", "--", "x"}), kExitFailure);
  EXPECT_EQ(console_.err(),
            "sovai job run: the job spec has 1 invalid field\n"
            "  image: an OCI image is oci:bucket@REGION/path\n");
  EXPECT_EQ(console_.out(), "");
  EXPECT_EQ(Run({"job", "get", "missing"}), kExitFailure);
  EXPECT_EQ(console_.err(), "sovai job get: job 'missing' does not exist in this project\n");
}

TEST_F(CommandsTest, JobRunFollowStreamsTheLogAcrossABrokenStreamAndExitsWithTheJobsCode) {
  ASSERT_EQ(Login(), kExitOk);
  api_->set_final_state("FAILED", 3);
  EXPECT_EQ(Run({"job", "run", "-f", "sovai/shell", "--", "sh", "-c", "exit 3"}), 3);
  EXPECT_EQ(console_.out(), "volume sync: 2 files\n42 /workspace/data/a.txt\ndone\n");
  EXPECT_NE(console_.err().find("job_1  QUEUED"), std::string::npos) << console_.err();
  EXPECT_NE(console_.err().find("job job_1 ended FAILED (exit 3)"), std::string::npos);
  // The second followed read resumed after the last whole record.
  std::vector<std::string> logs;
  for (const std::string& r : api_->requests()) {
    if (r.find("/logs") != std::string::npos) logs.push_back(r);
  }
  ASSERT_GE(logs.size(), 2u);
  EXPECT_EQ(logs[0], "GET /v1/jobs/job_1/logs?offset=0&follow=true");
  EXPECT_EQ(logs[1], "GET /v1/jobs/job_1/logs?offset=" +
                         std::to_string(std::string(kLogRecord1).size()) + "&follow=true");
}

TEST_F(CommandsTest, JobRunFollowExitCodes) {
  ASSERT_EQ(Login(), kExitOk);
  api_->set_final_state("DONE", 0);
  EXPECT_EQ(Run({"job", "run", "-f", "sovai/shell", "--", "true"}), 0) << console_.err();
  api_ = std::make_unique<FakeApi>(&s3_);
  ASSERT_EQ(Login(), kExitOk);
  api_->set_final_state("TIMEOUT", -1);
  EXPECT_EQ(Run({"job", "run", "-f", "sovai/shell", "--", "sleep", "99"}), 1);
}

TEST_F(CommandsTest, JobLogsPrintsTextOrRecords) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"job", "logs", "job_1"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(), "volume sync: 2 files\n42 /workspace/data/a.txt\ndone\n");
  ASSERT_EQ(Run({"job", "logs", "--timestamps", "job_1"}), kExitOk);
  EXPECT_EQ(console_.out(), std::string(kLogRecord1) + kLogRecord2 + kLogRecord3);
  const std::string offset = std::to_string(std::string(kLogRecord1).size());
  ASSERT_EQ(Run({"job", "logs", "--offset", offset, "job_1"}), kExitOk);
  EXPECT_EQ(console_.out(), "42 /workspace/data/a.txt\ndone\n");
  EXPECT_EQ(Run({"job", "logs", "--offset", "100000", "job_1"}), kExitFailure);
  EXPECT_NE(console_.err().find("offset is past the end"), std::string::npos);
  EXPECT_EQ(Run({"job", "logs"}), kExitUsage);
}

TEST_F(CommandsTest, JobListGetAndActions) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"job", "list", "--label", "team=nlp", "-l", "env=prod"}), kExitOk);
  EXPECT_NE(console_.out().find("ID     NAME  STATE    FLAVOR         IMAGE        AGE"),
            std::string::npos)
      << console_.out();
  EXPECT_NE(console_.out().find("job_2  b     RUNNING  ai1-1-cpu x2   sovai/shell"),
            std::string::npos)
      << console_.out();
  EXPECT_NE(api_->requests().back().find("labels=env%3Dprod%2Cteam%3Dnlp"), std::string::npos)
      << api_->requests().back();
  // -o json is the API's own page object; next_cursor says where the next page starts.
  ASSERT_EQ(Run({"job", "list", "-o", "json", "--limit", "1"}), kExitOk);
  Json page = Json::parse(console_.out());
  ASSERT_EQ(page["items"].size(), 1u) << page;
  EXPECT_EQ(page["items"][0]["id"], "job_2");
  EXPECT_EQ(page["next_cursor"], "after-job_2") << page;
  ASSERT_EQ(Run({"job", "list", "-o", "json"}), kExitOk);
  page = Json::parse(console_.out());
  EXPECT_EQ(page["items"].size(), 2u) << page;
  EXPECT_TRUE(page["next_cursor"].is_null()) << page;
  ASSERT_EQ(Run({"job", "get", "job_1"}), kExitOk);
  EXPECT_NE(console_.out().find("Command:     sh -c 'wc -l *'"), std::string::npos)
      << console_.out();
  EXPECT_NE(console_.out().find("Allocation:  0 GPU, 1 CPU (3), 4.0 GiB"), std::string::npos);
  ASSERT_EQ(Run({"job", "stop", "job_1"}), kExitOk);
  EXPECT_NE(console_.out().find("job_1  FINALIZING"), std::string::npos);
  ASSERT_EQ(Run({"job", "delete", "job_1"}), kExitOk);
  EXPECT_EQ(console_.out(), "Deleted job_1.\n");
  ASSERT_EQ(Run({"job", "push-data", "job_1"}), kExitOk);
  EXPECT_EQ(api_->requests().back(), "POST /v1/jobs/job_1/push-data");
}

TEST_F(CommandsTest, FlavorListTable) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"flavor", "list"}), kExitOk);
  EXPECT_NE(console_.out().find("h100-1-gpu  gpu   H100  1 GPU, 30 vCPU, 200.0 GiB  4          "
                                "0.0467   no: no H100 on this machine"),
            std::string::npos)
      << console_.out();
  EXPECT_NE(console_.out().find("ai1-1-cpu   cpu   -     1 vCPU, 4.0 GiB"), std::string::npos);
}

// --- apps and endpoints ------------------------------------------------------------------------

TEST_F(CommandsTest, AppRunPostsTheSpecAndPrintsIdStateAndUrl) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"app",
                 "run",
                 "--name",
                 "support-bot",
                 "--model",
                 "models@EU-WEST-LOCAL/qwen2.5-0.5b",
                 "--auto-min-replicas",
                 "0",
                 "--auto-max-replicas",
                 "4",
                 "--auto-resource-type",
                 "REQUESTS",
                 "--auto-resource-usage-threshold",
                 "4",
                 "--auto-cooldown-s",
                 "300",
                 "--label",
                 "team=nlp",
                 "-e",
                 "LOG=debug"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(console_.out(), "app_1  QUEUED  " + api_->url() + "/apps/app_1/\n");
  EXPECT_EQ(api_->body("/v1/apps"), Json::parse(R"({
    "name": "support-bot", "model": "models@EU-WEST-LOCAL/qwen2.5-0.5b", "flavor": "ai1-1-cpu",
    "autoscaling": {"min_replicas": 0, "max_replicas": 4, "resource_type": "REQUESTS",
                    "threshold": 4, "cooldown_s": 300},
    "labels": {"team": "nlp"}, "env": {"LOG": "debug"}})"));

  ASSERT_EQ(Run({"app",          "run",     "-o",          "json",    "--name",
                 "web",          "--image", "sovai/shell", "--port",  "9000",
                 "--cpu",        "2",       "--replicas",  "2",       "--unsecure-http",
                 "--probe-path", "/ok",     "--",          "python3", "-m",
                 "http.server"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(Json::parse(console_.out())["id"], "app_1");
  EXPECT_EQ(api_->body("/v1/apps"), Json::parse(R"({
    "name": "web", "image": "sovai/shell", "command": ["python3", "-m", "http.server"],
    "port": 9000, "flavor": "ai1-1-cpu", "units": 2, "replicas": 2, "unsecure_http": true,
    "probe_path": "/ok"})"));
  EXPECT_EQ(api_->app_gets(), 0);  // no --wait: no polling

  EXPECT_EQ(Run({"app", "run", "--name", "taken", "--model", "models@EU-WEST-LOCAL/x"}),
            kExitFailure);
  EXPECT_EQ(console_.err(),
            "sovai app run: the app spec has 1 invalid field\n"
            "  name: an app named 'taken' exists in this project\n");
}

TEST_F(CommandsTest, AppRunWaitPrintsStateChangesUntilRunning) {
  ASSERT_EQ(Login(), kExitOk);
  api_->set_app_states({"QUEUED", "INITIALIZING", "INITIALIZING", "RUNNING"});
  ASSERT_EQ(Run({"app", "run", "--name", "support-bot", "--model", "models@EU-WEST-LOCAL/qwen",
                 "--wait"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(console_.out(), "app_1  QUEUED  " + api_->url() + "/apps/app_1/\n");
  EXPECT_EQ(console_.err(),
            "app app_1: INITIALIZING (0/1 ready)\n"
            "app app_1: RUNNING (1/1 ready)\n");
  EXPECT_EQ(api_->app_gets(), 4);

  // -o json: stdout is the running App alone.
  api_->set_app_states({"RUNNING"});
  ASSERT_EQ(Run({"app", "run", "-o", "json", "--name", "support-bot", "--model",
                 "models@EU-WEST-LOCAL/qwen", "-w"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(Json::parse(console_.out())["state"], "RUNNING");
}

TEST_F(CommandsTest, AppRunWaitFailsWithTheReasonWhenTheAppFailed) {
  ASSERT_EQ(Login(), kExitOk);
  api_->set_app_states({"INITIALIZING", "FAILED"});
  EXPECT_EQ(Run({"app", "run", "--name", "support-bot", "--model", "models@EU-WEST-LOCAL/qwen",
                 "--wait"}),
            kExitFailure);
  EXPECT_NE(console_.out().find("app_1  QUEUED"), std::string::npos) << console_.out();
  EXPECT_NE(console_.err().find("sovai app run: app app_1 FAILED: replica job_01B exited with "
                                "code 1: no config.json\n"),
            std::string::npos)
      << console_.err();
  // Stopped by someone else while waiting: it will not become RUNNING either.
  api_ = std::make_unique<FakeApi>(&s3_);
  ASSERT_EQ(Login(), kExitOk);
  api_->set_app_states({"STOPPING"});
  EXPECT_EQ(Run({"app", "run", "--name", "a", "--model", "models@EU-WEST-LOCAL/x", "--wait"}),
            kExitFailure);
  EXPECT_NE(console_.err().find("is STOPPING and will not become RUNNING"), std::string::npos);
}

TEST_F(CommandsTest, AppRunWaitGivesUpAfterTheTimeout) {
  ASSERT_EQ(Login(), kExitOk);
  api_->set_app_states({"INITIALIZING"});
  // Sleeps advance the manual clock: 10 s of 2 s polls.
  EXPECT_EQ(Run({"app", "run", "--name", "a", "--model", "models@EU-WEST-LOCAL/x", "--wait",
                 "--timeout", "10s"}),
            kExitFailure);
  EXPECT_NE(console_.err().find("app app_1 is still INITIALIZING (0/1 ready) after 10s"),
            std::string::npos)
      << console_.err();
  EXPECT_EQ(api_->app_gets(), 5);
}

TEST_F(CommandsTest, AppListAndGet) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"app", "list", "-l", "team=nlp"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(),
            "ID     NAME         STATE    READY/DESIRED  URL\n"
            "app_1  support-bot  RUNNING  1/1            " +
                api_->url() + "/apps/app_1/\n" + "app_2  web          STOPPED  0/1            " +
                api_->url() + "/apps/app_2/\n");
  EXPECT_EQ(api_->requests().back(), "GET /v1/apps?labels=team%3Dnlp&limit=100");
  ASSERT_EQ(Run({"app", "list", "-o", "json"}), kExitOk);
  Json apps = Json::parse(console_.out());
  ASSERT_EQ(apps["items"].size(), 2u) << apps;
  EXPECT_EQ(apps["items"][1]["id"], "app_2");
  EXPECT_TRUE(apps["next_cursor"].is_null()) << apps;

  ASSERT_EQ(Run({"app", "get", "support-bot"}), kExitOk) << console_.err();
  EXPECT_EQ(api_->requests().back(), "GET /v1/apps/support-bot");
  const std::string& out = console_.out();
  EXPECT_NE(out.find("State:           RUNNING\n"), std::string::npos) << out;
  EXPECT_NE(out.find("Model:           models@EU-WEST-LOCAL/qwen2.5-0.5b\n"), std::string::npos);
  EXPECT_NE(out.find("Flavor:          ai1-1-cpu x1\n"), std::string::npos);
  EXPECT_NE(out.find("Scaling:         autoscaling 0..4 on REQUESTS\n"), std::string::npos);
  EXPECT_NE(out.find("Labels:          team=nlp\n"), std::string::npos);
  EXPECT_NE(out.find("Replicas:        JOB      STATE    READY  GENERATION  IN FLIGHT\n"
                     "                 job_01A  RUNNING  yes    1           3\n"
                     "                 job_01B  RUNNING  no     1           0\n"),
            std::string::npos)
      << out;
  // The last five of the seven scaling events.
  EXPECT_EQ(out.find("1 -> 2"), std::string::npos) << out;
  EXPECT_EQ(out.find("2 -> 3"), std::string::npos) << out;
  EXPECT_NE(out.find("Scaling events:  2026-11-29 14:03:00  3 -> 4  REQUESTS 13 in flight / "
                     "threshold 4 per replica\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("                 2026-11-29 14:07:00  7 -> 8"), std::string::npos) << out;

  EXPECT_EQ(Run({"app", "get", "missing"}), kExitFailure);
  EXPECT_EQ(console_.err(), "sovai app get: app 'missing' does not exist in this project\n");
}

TEST_F(CommandsTest, AppScaleUpdateStopStartDelete) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"app", "scale", "app_1", "--replicas", "3"}), kExitOk) << console_.err();
  EXPECT_EQ(api_->body("/v1/apps/app_1/scale"), Json::parse(R"({"replicas": 3})"));
  EXPECT_EQ(console_.out(), "app_1  SCALING  0/3 ready  3 replicas (fixed)\n");
  ASSERT_EQ(Run({"app", "scale", "app_1", "--auto-min-replicas", "1", "--auto-max-replicas", "8",
                 "--auto-resource-type", "cpu", "--auto-scale-down-window-s", "120"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(api_->body("/v1/apps/app_1/scale"), Json::parse(R"({"autoscaling": {
    "min_replicas": 1, "max_replicas": 8, "resource_type": "CPU", "scale_down_window_s": 120}})"));
  EXPECT_NE(console_.out().find("autoscaling 1..8 on CPU (down 120s)"), std::string::npos)
      << console_.out();

  ASSERT_EQ(Run({"app", "update", "app_1", "--model", "models@EU-WEST-LOCAL/v2", "-e", "A=1",
                 "--label", "team=cv"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(api_->requests().back(), "PATCH /v1/apps/app_1");
  EXPECT_EQ(api_->body("/v1/apps/app_1"), Json::parse(R"({
    "model": "models@EU-WEST-LOCAL/v2", "env": {"A": "1"}, "labels": {"team": "cv"}})"));
  EXPECT_EQ(console_.out(), "app_1  SCALING  generation 2\n");
  ASSERT_EQ(Run({"app", "update", "app_1", "--no-unsecure-http", "--", "serve", "--fast"}), kExitOk)
      << console_.err();
  EXPECT_EQ(api_->body("/v1/apps/app_1"),
            Json::parse(R"({"command": ["serve", "--fast"], "unsecure_http": false})"));

  ASSERT_EQ(Run({"app", "stop", "app_1"}), kExitOk);
  EXPECT_EQ(console_.out(), "app_1  STOPPING\n");
  EXPECT_EQ(api_->requests().back(), "POST /v1/apps/app_1/stop");
  ASSERT_EQ(Run({"app", "start", "app_1"}), kExitOk);
  EXPECT_EQ(console_.out(), "app_1  QUEUED\n");
  EXPECT_EQ(api_->requests().back(), "POST /v1/apps/app_1/start");
  ASSERT_EQ(Run({"app", "delete", "app_1"}), kExitOk);
  EXPECT_EQ(console_.out(), "app_1  DELETING\n");
  EXPECT_EQ(api_->requests().back(), "DELETE /v1/apps/app_1");
  ASSERT_EQ(Run({"app", "delete", "-o", "json", "app_1"}), kExitOk);
  EXPECT_EQ(Json::parse(console_.out())["state"], "DELETING");
}

TEST_F(CommandsTest, AppLogsOfAReplicaAndFollowingTheNewest) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"app", "logs", "app_1", "--replica", "job_01A"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(), "volume sync: 2 files\n42 /workspace/data/a.txt\ndone\n");
  EXPECT_NE(api_->requests().back().find("GET /v1/apps/app_1/logs?replica=job_01A&offset="),
            std::string::npos)
      << api_->requests().back();
  ASSERT_EQ(Run({"app", "logs", "-t", "app_1"}), kExitOk);
  EXPECT_EQ(console_.out(), std::string(kLogRecord1) + kLogRecord2 + kLogRecord3);
  EXPECT_EQ(api_->requests().back().find("replica="), std::string::npos);  // the server's default

  // -f pins the newest replica (job_01B), resumes after the broken stream, and ends once that
  // replica has ended.
  api_->set_replica_state("DONE");
  ASSERT_EQ(Run({"app", "logs", "-f", "app_1"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(), "volume sync: 2 files\n42 /workspace/data/a.txt\ndone\n");
  EXPECT_EQ(console_.err(), "sovai app logs: following replica job_01B\n");
  std::vector<std::string> logs;
  for (const std::string& r : api_->requests()) {
    if (r.find("follow=true") != std::string::npos) logs.push_back(r);
  }
  ASSERT_EQ(logs.size(), 2u);
  EXPECT_EQ(logs[0], "GET /v1/apps/app_1/logs?replica=job_01B&offset=0&follow=true");
  EXPECT_EQ(logs[1], "GET /v1/apps/app_1/logs?replica=job_01B&offset=" +
                         std::to_string(std::string(kLogRecord1).size()) + "&follow=true");

  EXPECT_EQ(Run({"app", "logs", "missing"}), kExitFailure);
  EXPECT_EQ(Run({"app", "logs"}), kExitUsage);
}

TEST_F(CommandsTest, EndpointAddListDelete) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"endpoint", "add", "--name", "qwen-small", "--model",
                 "models@EU-WEST-LOCAL/qwen2.5-0.5b", "--flavor", "h100-1-gpu", "--gpu", "1",
                 "--min-replicas", "0", "--max-replicas", "2", "--rate-limit", "100/min"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(api_->body("/v1/endpoints"), Json::parse(R"({
    "name": "qwen-small", "model": "models@EU-WEST-LOCAL/qwen2.5-0.5b", "flavor": "h100-1-gpu",
    "units": 1, "min_replicas": 0, "max_replicas": 2, "rate_limit": "100/min"})"));
  EXPECT_EQ(console_.out(), "qwen-small  QUEUED  app_9\n");
  EXPECT_NE(
      console_.err().find("\"model\": \"qwen-small\" on " + api_->url() + "/v1/chat/completions"),
      std::string::npos)
      << console_.err();

  ASSERT_EQ(Run({"endpoint", "list"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(),
            "NAME        APP    STATE    RATE LIMIT  URL\n"
            "qwen-small  app_9  RUNNING  400/min     " +
                api_->url() + "/apps/app_9/\n");
  ASSERT_EQ(Run({"endpoint", "list", "-o", "json"}), kExitOk);
  EXPECT_EQ(Json::parse(console_.out())["items"][0]["name"], "qwen-small");

  ASSERT_EQ(Run({"endpoint", "delete", "qwen-small"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(), "Deleted endpoint qwen-small.\n");
  EXPECT_EQ(api_->requests().back(), "DELETE /v1/endpoints/qwen-small");
  EXPECT_EQ(Run({"endpoint", "delete", "nope"}), kExitFailure);
  EXPECT_EQ(console_.err(), "sovai endpoint delete: endpoint 'nope' does not exist\n");
}

TEST_F(CommandsTest, AppAndEndpointUsageErrorsSendNothing) {
  ASSERT_EQ(Login(), kExitOk);
  const size_t before = api_->requests().size();
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  const std::string model = "models@EU-WEST-LOCAL/qwen";
  for (const Case& c : std::vector<Case>{
           {{"app", "run", "--name", "a", "--model", model, "--replicas", "2",
             "--auto-max-replicas", "4"},
            "--replicas excludes the --auto-* flags"},
           {{"app", "run", "--name", "a", "--model", model, "--auto-min-replicas", "0"},
            "--auto-max-replicas is needed"},
           {{"app", "run", "--name", "a", "--model", model, "--image", "sovai/shell"},
            "--model excludes --image"},
           {{"app", "run", "--name", "a", "--model", "models/qwen"}, "--model 'models/qwen'"},
           {{"app", "run", "--name", "a", "--model", model, "--base-model", "b@EU-WEST-LOCAL/x:ro"},
            "--base-model"},
           {{"app", "run", "--model", model}, "missing --name"},
           {{"app", "run", "--name", "a"}, "give --model"},
           {{"app", "run", "--name", "a", "--model", model, "--gpu", "1"}, "--gpu needs --flavor"},
           {{"app", "run", "--name", "a", "--image", "sovai/shell", "serve"},
            "unexpected argument 'serve'"},
           {{"app", "run", "--name", "a", "--model", model, "--timeout", "5m"},
            "--timeout needs --wait"},
           {{"app", "run", "--name", "a", "--model", model, "--wait", "--timeout", "soon"},
            "--timeout"},
           {{"app", "run", "--name", "a", "--model", model, "--replicas", "two"}, "--replicas"},
           {{"app", "run", "--name", "a", "--model", model, "--bogus"}, "--bogus"},
           {{"app", "scale", "app_1"}, "give --replicas N"},
           {{"app", "scale", "app_1", "--replicas", "1", "--auto-cooldown-s", "5"},
            "--replicas excludes"},
           {{"app", "scale", "--replicas", "1"}, "missing arguments"},
           {{"app", "update", "app_1"}, "nothing to update"},
           {{"app", "update", "app_1", "extra"}, "unexpected argument 'extra'"},
           {{"app", "update", "--", "serve"}, "missing APP before '--'"},
           {{"app", "list", "--label", "bad"}, "--label 'bad' must be KEY=VALUE"},
           {{"app", "get"}, "missing arguments"},
           {{"app", "logs", "app_1", "--offset", "-1"}, "--offset must be 0 or more"},
           {{"app", "stop"}, "missing arguments"},
           {{"app", "delete", "a", "b"}, "unexpected argument 'b'"},
           {{"endpoint", "add", "--name", "m", "--model", model, "--rate-limit", "400"},
            "--rate-limit must be N/min"},
           {{"endpoint", "add", "--name", "m", "--model", model, "--min-replicas", "3",
             "--max-replicas", "2"},
            "--max-replicas 2 is below --min-replicas 3"},
           {{"endpoint", "add", "--name", "m"}, "missing --model"},
           {{"endpoint", "delete"}, "missing arguments"},
       }) {
    std::string joined = base::Join(c.args, " ");
    EXPECT_EQ(Run(c.args), kExitUsage) << joined;
    EXPECT_NE(console_.err().find(c.says), std::string::npos) << joined << "\n" << console_.err();
    EXPECT_EQ(console_.out(), "") << joined;
  }
  EXPECT_EQ(Run({"app"}), kExitUsage);
  EXPECT_EQ(Run({"app", "frobnicate"}), kExitUsage);
  EXPECT_EQ(Run({"endpoint", "frobnicate"}), kExitUsage);
  EXPECT_EQ(api_->requests().size(), before);
}

TEST_F(CommandsTest, TokenCreateTakesTheLabelSelectorOfAppTokens) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"token", "create", "--role", "read", "--label-selector", "team=nlp",
                 "--label-selector", "app=support-bot"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(api_->body("/v1/tokens"),
            Json::parse(R"({"role": "read", "labels": "app=support-bot,team=nlp"})"));
  ASSERT_EQ(Run({"token", "create", "--role", "operator", "--selector", "a=1", "--label-selector",
                 "b=2"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(api_->body("/v1/tokens")["labels"], "a=1,b=2");
  EXPECT_EQ(Run({"token", "create", "--label-selector", "team"}), kExitUsage);
  EXPECT_NE(console_.err().find("--label-selector 'team' must be KEY=VALUE"), std::string::npos)
      << console_.err();
}

// --- tokens, users, projects ------------------------------------------------------------------

TEST_F(CommandsTest, TokenCreatePrintsTheSecretAloneOnStdout) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"token", "create", "--name", "ci", "--role", "operator", "--selector",
                 "team=nlp,env=prod", "--expires", "30d"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(console_.out(), "sov_NEWSECRET\n");
  EXPECT_NE(console_.err().find("not shown again"), std::string::npos);
  Json body = api_->body("/v1/tokens");
  EXPECT_EQ(body["labels"], "env=prod,team=nlp");
  EXPECT_EQ(body["role"], "operator");
  EXPECT_EQ(body["expires_at"],
            base::FormatRfc3339(clock_.NowUnixMicros() + 30LL * 86400'000'000, 0));
  EXPECT_EQ(Run({"token", "create", "--role", "root"}), kExitUsage);
  EXPECT_EQ(Run({"token", "create", "--expires", "later"}), kExitUsage);
  ASSERT_EQ(Run({"token", "list"}), kExitOk);
  EXPECT_NE(console_.out().find("tok_0  -       usr_1  read      team=nlp"), std::string::npos)
      << console_.out();
  EXPECT_NE(console_.out().find("revoked"), std::string::npos);
  ASSERT_EQ(Run({"token", "revoke", "tok_1"}), kExitOk);
  EXPECT_EQ(console_.out(), "Revoked tok_1.\n");
}

TEST_F(CommandsTest, UsersAndProjectsByNameOrId) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"user", "list"}), kExitOk);
  EXPECT_NE(console_.out().find("usr_2  bob    Bob           bob@example.eu"), std::string::npos)
      << console_.out();
  ASSERT_EQ(Run({"user", "create", "carol", "--email", "c@example.eu"}), kExitOk);
  EXPECT_EQ(console_.out(), "Created user carol (usr_3).\n");
  EXPECT_EQ(Run({"user", "create", "Bad Name"}), kExitFailure);
  EXPECT_NE(console_.err().find("  name: must match"), std::string::npos) << console_.err();
  ASSERT_EQ(Run({"user", "delete", "bob"}), kExitOk) << console_.err();
  EXPECT_EQ(api_->requests().back(), "DELETE /v1/users/usr_2");
  EXPECT_EQ(Run({"user", "delete", "nobody"}), kExitFailure);
  EXPECT_NE(console_.err().find("no user named 'nobody'"), std::string::npos);
  ASSERT_EQ(Run({"project", "list"}), kExitOk);
  EXPECT_NE(console_.out().find("prj_0  default  -            yes"), std::string::npos)
      << console_.out();
  ASSERT_EQ(Run({"project", "create", "vision"}), kExitOk);
  EXPECT_EQ(console_.out(), "Created project vision (prj_9).\n");
  ASSERT_EQ(Run({"project", "add-member", "nlp", "bob", "--role", "operator"}), kExitOk)
      << console_.err();
  EXPECT_EQ(api_->body("/v1/projects/prj_1/members/usr_2"), Json::parse(R"({"role": "operator"})"));
  // token list's --user and --project take names too (one resolver for every flag).
  ASSERT_EQ(Run({"token", "list", "--user", "bob", "--project", "nlp"}), kExitOk) << console_.err();
  EXPECT_EQ(api_->requests().back().rfind("GET /v1/tokens?user=usr_2&project=prj_1", 0), 0u)
      << api_->requests().back();
  EXPECT_EQ(Run({"project", "add-member", "nlp", "bob"}), kExitUsage);
  EXPECT_EQ(Run({"project", "add-member", "nlp", "bob", "--role", "owner"}), kExitUsage);
}

TEST_F(CommandsTest, ProjectUpdateSetsTheAllowedRegions) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"project", "update", "nlp", "--allow-region", "EU-CENTRAL-2", "--allow-region",
                 "EU-NORTH-1"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(api_->requests().back(), "PATCH /v1/projects/prj_1");
  EXPECT_EQ(api_->body("/v1/projects/prj_1"),
            Json::parse(R"({"allowed_regions": ["EU-CENTRAL-2", "EU-NORTH-1"]})"));
  EXPECT_EQ(console_.out(),
            "Project nlp may mount buckets of this server's region and EU-CENTRAL-2, "
            "EU-NORTH-1.\n");
  ASSERT_EQ(Run({"project", "update", "nlp", "--no-other-regions"}), kExitOk) << console_.err();
  EXPECT_EQ(api_->body("/v1/projects/prj_1"), Json::parse(R"({"allowed_regions": []})"));
  EXPECT_EQ(console_.out(), "Project nlp may mount buckets of this server's region only.\n");
  // Exactly one of the two forms.
  EXPECT_EQ(Run({"project", "update", "nlp"}), kExitUsage);
  EXPECT_EQ(Run({"project", "update", "nlp", "--allow-region", "X1", "--no-other-regions"}),
            kExitUsage);
  // The server's refusal names the region.
  EXPECT_EQ(Run({"project", "update", "nlp", "--allow-region", "US-EAST-1"}), kExitFailure);
  EXPECT_NE(console_.err().find("is not one this server knows"), std::string::npos)
      << console_.err();
}

// --- buckets ----------------------------------------------------------------------------------

TEST_F(CommandsTest, BucketsWithoutS3CredentialsSayToLogIn) {
  vars_["SOVAI_URL"] = api_->url();
  vars_["SOVAI_TOKEN"] = kGoodToken;
  EXPECT_EQ(Run({"bucket", "ls"}), kExitFailure);
  EXPECT_NE(console_.err().find("run 'sovai login'"), std::string::npos) << console_.err();
}

TEST_F(CommandsTest, BucketLifecycle) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"bucket", "mb", "my-bucket"}), kExitOk) << console_.err();
  EXPECT_EQ(Run({"bucket", "mb", "my-bucket"}), kExitFailure);
  EXPECT_EQ(Run({"bucket", "mb", "s3://Bad_Name"}), kExitFailure);
  ASSERT_EQ(Run({"bucket", "ls"}), kExitOk);
  EXPECT_NE(console_.out().find("my-bucket"), std::string::npos) << console_.out();

  // cp a file up and down; -r a directory up and down.
  WriteLocal("a.txt", "hello\n");
  WriteLocal("tree/x.txt", "x\n");
  WriteLocal("tree/sub/y.txt", "yy\n");
  ASSERT_EQ(Run({"bucket", "cp", Local("a.txt"), "s3://my-bucket/dataset/"}), kExitOk)
      << console_.err();
  EXPECT_EQ(console_.out(), "upload: " + Local("a.txt") + " to s3://my-bucket/dataset/a.txt\n");
  ASSERT_EQ(Run({"bucket", "cp", "-r", Local("tree"), "s3://my-bucket/dataset/tree"}), kExitOk)
      << console_.err();
  ASSERT_EQ(Run({"bucket", "ls", "my-bucket/dataset/"}), kExitOk);
  EXPECT_NE(console_.out().find("DIR   tree/"), std::string::npos) << console_.out();
  EXPECT_NE(console_.out().find("6 B   a.txt"), std::string::npos) << console_.out();
  ASSERT_EQ(Run({"bucket", "ls", "-r", "-o", "json", "s3://my-bucket"}), kExitOk);
  Json listed = Json::parse(console_.out());
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[2]["key"], "dataset/tree/x.txt");

  ASSERT_EQ(Run({"bucket", "cp", "s3://my-bucket/dataset/a.txt", dir_ + "/down/"}), kExitOk)
      << console_.err();
  EXPECT_EQ(ReadFile(dir_ + "/down/a.txt"), "hello\n");
  ASSERT_EQ(Run({"bucket", "cp", "s3://my-bucket/dataset/a.txt", "-"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(), "hello\n");  // the object only: no "download:" line
  EXPECT_EQ(Run({"bucket", "cp", "-", "s3://my-bucket/x"}), kExitUsage);
  ASSERT_EQ(Run({"bucket", "cp", "-r", "s3://my-bucket/dataset", dir_ + "/mirror"}), kExitOk)
      << console_.err();
  EXPECT_EQ(ReadFile(dir_ + "/mirror/tree/sub/y.txt"), "yy\n");
  EXPECT_EQ(Run({"bucket", "cp", "s3://my-bucket/dataset", dir_ + "/x"}), kExitFailure);
  EXPECT_NE(console_.err().find("use -r"), std::string::npos) << console_.err();
  EXPECT_EQ(Run({"bucket", "cp", Local("tree"), "s3://my-bucket/t"}), kExitUsage);
  EXPECT_EQ(Run({"bucket", "cp", Local("a.txt"), Local("b.txt")}), kExitUsage);

  // rb refuses a bucket with objects; rm -r empties a prefix; rb --force the rest.
  EXPECT_EQ(Run({"bucket", "rb", "my-bucket"}), kExitFailure);
  EXPECT_NE(console_.err().find("--force"), std::string::npos) << console_.err();
  ASSERT_EQ(Run({"bucket", "rm", "-r", "s3://my-bucket/dataset/tree"}), kExitOk);
  EXPECT_EQ(console_.out(),
            "delete: s3://my-bucket/dataset/tree/sub/y.txt\n"
            "delete: s3://my-bucket/dataset/tree/x.txt\n");
  EXPECT_EQ(Run({"bucket", "rm", "s3://my-bucket/dataset/"}), kExitUsage);
  ASSERT_EQ(Run({"bucket", "rb", "--force", "my-bucket"}), kExitOk) << console_.err();
  ASSERT_EQ(Run({"bucket", "ls", "-o", "json"}), kExitOk);
  EXPECT_EQ(Json::parse(console_.out()), Json::array());
  EXPECT_EQ(Run({"bucket", "ls", "my-bucket"}), kExitFailure);
  EXPECT_NE(console_.err().find("NoSuchBucket"), std::string::npos) << console_.err();
}

TEST_F(CommandsTest, BucketSyncCopiesOnlyWhatChanged) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"bucket", "mb", "data"}), kExitOk) << console_.err();
  WriteLocal("ds/a.txt", "a\n");
  WriteLocal("ds/sub/b.txt", "bb\n");
  ASSERT_EQ(Run({"bucket", "sync", Local("ds"), "s3://data/ds"}), kExitOk) << console_.err();
  EXPECT_NE(console_.err().find("2 files (5 B) copied"), std::string::npos) << console_.err();
  ASSERT_EQ(Run({"bucket", "sync", Local("ds"), "s3://data/ds"}), kExitOk);
  EXPECT_EQ(console_.out(), "");
  EXPECT_NE(console_.err().find("0 files (0 B) copied, 2 unchanged"), std::string::npos)
      << console_.err();
  // A changed size is uploaded again; --delete removes what the source lost.
  WriteLocal("ds/a.txt", "a changed\n");
  ASSERT_TRUE(base::Env::Default().DeleteFile(Local("ds/sub/b.txt")).ok());
  ASSERT_EQ(Run({"bucket", "sync", "--dry-run", "--delete", Local("ds"), "s3://data/ds"}), kExitOk);
  EXPECT_NE(console_.out().find("(dry run) upload: "), std::string::npos) << console_.out();
  EXPECT_NE(console_.out().find("(dry run) delete: s3://data/ds/sub/b.txt"), std::string::npos);
  ASSERT_EQ(Run({"bucket", "sync", "--delete", "-o", "json", Local("ds"), "s3://data/ds"}),
            kExitOk);
  Json report = Json::parse(console_.out());
  EXPECT_EQ(report["uploaded"].size(), 1u);
  EXPECT_EQ(report["deleted"], Json::array({"s3://data/ds/sub/b.txt"}));

  // Download into a new directory, then again: nothing to copy.
  ASSERT_EQ(Run({"bucket", "sync", "s3://data/ds", dir_ + "/copy"}), kExitOk) << console_.err();
  EXPECT_EQ(ReadFile(dir_ + "/copy/a.txt"), "a changed\n");
  ASSERT_EQ(Run({"bucket", "sync", "s3://data/ds", dir_ + "/copy"}), kExitOk);
  EXPECT_NE(console_.err().find("0 files (0 B) copied, 1 unchanged"), std::string::npos)
      << console_.err();
  EXPECT_EQ(Run({"bucket", "sync", "s3://data/ds", "s3://data/other"}), kExitUsage);
}

TEST_F(CommandsTest, ProgressBarOnlyOnATerminal) {
  ASSERT_EQ(Login(), kExitOk);
  ASSERT_EQ(Run({"bucket", "mb", "data"}), kExitOk) << console_.err();
  WriteLocal("big.bin", std::string(300'000, 'x'));
  ASSERT_EQ(Run({"bucket", "cp", Local("big.bin"), "s3://data/big.bin"}), kExitOk);
  EXPECT_EQ(console_.err().find('\r'), std::string::npos);
  console_.set_terminal(true);
  ASSERT_EQ(Run({"bucket", "cp", Local("big.bin"), "s3://data/big2.bin"}), kExitOk);
  EXPECT_NE(console_.err().find("100%"), std::string::npos) << console_.err();
  ASSERT_EQ(Run({"bucket", "cp", "--no-progress", Local("big.bin"), "s3://data/big3.bin"}),
            kExitOk);
  EXPECT_EQ(console_.err().find('\r'), std::string::npos);
}

TEST_F(CommandsTest, HelpExitsZeroOnStdout) {
  for (std::vector<std::string> args : {std::vector<std::string>{"job", "--help"},
                                        {"job", "run", "--help"},
                                        {"bucket", "sync", "-h"},
                                        {"login", "--help"},
                                        {"token", "help"},
                                        {"project", "add-member", "--help"},
                                        {"app", "--help"},
                                        {"app", "run", "--help"},
                                        {"app", "scale", "-h"},
                                        {"endpoint", "help"},
                                        {"endpoint", "add", "--help"}}) {
    EXPECT_EQ(Run(args), kExitOk) << args[0];
    EXPECT_NE(console_.out().find("Usage: sovai "), std::string::npos) << console_.out();
    EXPECT_EQ(console_.err(), "");
  }
  ASSERT_EQ(Run({"job", "run", "--help"}), kExitOk);
  EXPECT_NE(console_.out().find("-v, --volume SPEC"), std::string::npos) << console_.out();
}

}  // namespace
}  // namespace sovai::cli::client
