// `sovai server` as a user runs it: the real binary in a child process, on port 0, found through
// <data-dir>/server.json, talked to over real sockets.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <map>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/json.h"
#include "net/client.h"

namespace sovai {
namespace {

using base::Env;

class ServerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-server-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    data_dir_ = dir_ + "/data";
  }
  void TearDown() override {
    for (auto& server : servers_) {
      if (server) server->Signal(SIGKILL).IgnoreError();
    }
    servers_.clear();
    env_.DeleteDirRecursive(dir_).IgnoreError();
  }

  // Starts `sovai server` with `extra` flags; stderr and stdout go to <dir>/server-N.log.
  base::Subprocess* StartServer(std::vector<std::string> extra = {},
                                std::map<std::string, std::string> environment = {}) {
    base::SpawnOptions options;
    options.argv = {SOVAI_BINARY,        "server",      "--data-dir",  data_dir_,
                    "--listen-api",      "127.0.0.1:0", "--listen-s3", "127.0.0.1:0",
                    "--listen-registry", "127.0.0.1:0"};
    options.argv.insert(options.argv.end(), extra.begin(), extra.end());
    log_path_ = dir_ + "/server-" + std::to_string(servers_.size()) + ".log";
    options.stdout_spec = base::StdioSpec::File(log_path_);
    options.stderr_spec = base::StdioSpec::MergeWithStdout();
    options.env = std::move(environment);
    auto process = env_.Spawn(options);
    EXPECT_TRUE(process.ok()) << process.status();
    if (!process.ok()) return nullptr;
    servers_.push_back(std::move(*process));
    return servers_.back().get();
  }

  std::string Log() { return env_.ReadFile(log_path_).value_or(""); }

  // Waits for server.json to appear and returns it parsed.
  nlohmann::json WaitForServerJson() {
    for (int i = 0; i < 200; ++i) {
      if (env_.FileExists(data_dir_ + "/server.json")) {
        auto text = env_.ReadFile(data_dir_ + "/server.json");
        if (text.ok()) {
          auto doc = base::ParseJson(*text);
          if (doc.ok()) return *doc;
        }
      }
      env_.SleepForMicros(50'000);
    }
    ADD_FAILURE() << "server.json never appeared; log:\n" << Log();
    return {};
  }

  net::HttpClient ClientFor(const std::string& url) {
    auto options = net::ClientOptionsFromUrl(url);
    EXPECT_TRUE(options.ok()) << options.status();
    return net::HttpClient(options.value_or(net::ClientOptions{}));
  }

  Env& env_ = Env::Default();
  std::string dir_;
  std::string data_dir_;
  std::string log_path_;
  std::vector<std::unique_ptr<base::Subprocess>> servers_;
};

TEST_F(ServerProcessTest, ServesHealthAndMetricsAndStopsCleanlyOnSigterm) {
  base::Subprocess* server = StartServer();
  ASSERT_NE(server, nullptr);
  nlohmann::json info = WaitForServerJson();
  ASSERT_TRUE(info.contains("api_url")) << info.dump();
  EXPECT_EQ(info["region"], "EU-WEST-LOCAL");
  EXPECT_EQ(info["pid"].get<int64_t>(), server->pid());
  EXPECT_NE(info["api_url"], info["s3_url"]);

  net::HttpClient api = ClientFor(info["api_url"]);
  auto health = api.Get("/health");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);
  auto health_json = base::ParseJson(health->body);
  ASSERT_TRUE(health_json.ok()) << health->body;
  EXPECT_EQ((*health_json)["status"], "ok");
  EXPECT_EQ((*health_json)["region"], "EU-WEST-LOCAL");

  // Unknown paths outside /v1 are the web panel's (its page routes); unknown /v1 ones are 404s.
  auto missing = api.Get("/v1/no/such/route");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);

  auto metrics = api.Get("/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->headers.Get("Content-Type").value_or("").find("text/plain"),
            std::string_view::npos);
  const std::string& text = metrics->body;
  EXPECT_NE(text.find("sovai_uptime_seconds "), std::string::npos) << text;
  EXPECT_NE(text.find("sovai_http_requests_total{server=\"api\",route=\"/health\",method=\"GET\","
                      "status=\"200\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("status=\"404\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("sovai_http_open_connections{server=\"api\"} 1"), std::string::npos) << text;

  // The S3 listener serves the object store: an anonymous ListBuckets is denied in S3's XML shape.
  net::HttpClient s3 = ClientFor(info["s3_url"]);
  auto list = s3.Get("/");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->status, 403);
  EXPECT_NE(list->body.find("<Code>AccessDenied</Code>"), std::string::npos) << list->body;
  EXPECT_TRUE(list->headers.Has("x-amz-request-id"));

  // admin.json is private.
  auto admin = env_.Stat(data_dir_ + "/admin.json");
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(admin->mode & 0777, 0600u);

  ASSERT_TRUE(server->Signal(SIGTERM).ok());
  auto exit = server->Wait(20'000);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited) << exit->ToString();
  EXPECT_EQ(exit->code, 0) << Log();
  EXPECT_FALSE(env_.FileExists(data_dir_ + "/server.json"));
  EXPECT_NE(Log().find("sovai server stopped"), std::string::npos) << Log();
}

TEST_F(ServerProcessTest, OneServerPerDataDirectory) {
  ASSERT_NE(StartServer(), nullptr);
  WaitForServerJson();
  base::Subprocess* second = StartServer();
  ASSERT_NE(second, nullptr);
  auto exit = second->Wait(20'000);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->code, 1);
  EXPECT_NE(Log().find("is in use by another sovai server (pid " +
                       std::to_string(servers_[0]->pid()) + ")"),
            std::string::npos)
      << Log();
}

TEST_F(ServerProcessTest, AdminCredentialsComeFromEnvironmentAndSurviveRestart) {
  std::map<std::string, std::string> creds = {
      {"SOVAI_ADMIN_ACCESS_KEY", "AKIAIOSFODNN7EXAMPLE"},
      {"SOVAI_ADMIN_SECRET_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
      {"SOVAI_ADMIN_TOKEN", "sovai_integration_token_123"}};
  base::Subprocess* first = StartServer({}, creds);
  ASSERT_NE(first, nullptr);
  WaitForServerJson();
  ASSERT_TRUE(first->Signal(SIGTERM).ok());
  ASSERT_TRUE(first->Wait(20'000).ok());

  auto text = env_.ReadFile(data_dir_ + "/admin.json");
  ASSERT_TRUE(text.ok());
  auto admin = base::ParseJson(*text);
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ((*admin)["access_key_id"], "AKIAIOSFODNN7EXAMPLE");
  EXPECT_EQ((*admin)["api_token"], "sovai_integration_token_123");

  // A restart with different credentials is refused, the file untouched.
  base::Subprocess* changed = StartServer({}, {{"SOVAI_ADMIN_ACCESS_KEY", "AKIAOTHEROTHEROTHER1"},
                                               {"SOVAI_ADMIN_SECRET_KEY", "another-secret-value"},
                                               {"SOVAI_ADMIN_TOKEN", "sovai_other_token_12345"}});
  ASSERT_NE(changed, nullptr);
  auto exit = changed->Wait(20'000);
  ASSERT_TRUE(exit.ok());
  EXPECT_EQ(exit->code, 1);
  EXPECT_NE(Log().find("SOVAI_ADMIN_* name other credentials"), std::string::npos) << Log();
  EXPECT_EQ(env_.ReadFile(data_dir_ + "/admin.json").value_or(""), *text);
}

TEST_F(ServerProcessTest, BadFlagsAreClearErrors) {
  base::Subprocess* unknown = StartServer({"--lisen-api", "x"});
  ASSERT_NE(unknown, nullptr);
  auto exit = unknown->Wait(20'000);
  ASSERT_TRUE(exit.ok());
  EXPECT_EQ(exit->code, 2);
  EXPECT_NE(Log().find("unknown flag --lisen-api"), std::string::npos) << Log();

  base::Subprocess* region = StartServer({"--region", "eu west"});
  ASSERT_NE(region, nullptr);
  exit = region->Wait(20'000);
  ASSERT_TRUE(exit.ok());
  EXPECT_EQ(exit->code, 1);
  EXPECT_NE(Log().find("region 'eu west' must be"), std::string::npos) << Log();

  base::Subprocess* address = StartServer({"--listen-api", "127.0.0.1:notaport"});
  ASSERT_NE(address, nullptr);
  exit = address->Wait(20'000);
  ASSERT_TRUE(exit.ok());
  EXPECT_EQ(exit->code, 1);
  EXPECT_NE(Log().find("--listen-api 127.0.0.1:notaport"), std::string::npos) << Log();
  EXPECT_FALSE(env_.FileExists(data_dir_ + "/server.json"));
}

TEST_F(ServerProcessTest, VersionCommand) {
  auto run = base::RunAndCapture(env_, base::SpawnOptions{.argv = {SOVAI_BINARY, "version"}});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit.code, 0);
  EXPECT_EQ(run->stdout_text, std::string(SOVAI_VERSION_STRING) + "\n");
}

}  // namespace
}  // namespace sovai
