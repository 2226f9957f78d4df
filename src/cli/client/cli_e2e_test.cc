// The `sovai` binary end to end: a real `sovai server` (REST API, S3, jobs in bubblewrap) in a
// temporary data directory, driven only through the CLI as a user would: the admin logs in,
// creates a user, a project and a token; the user logs in, fills a bucket, runs the brief's job
// and reads its output back. Checks exit codes (0, 1, 2, the job's own) and what is printed.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <csignal>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/env.h"
#include "base/json.h"
#include "base/strings.h"

#ifndef SOVAI_BINARY
#error "SOVAI_BINARY must name the sovai executable"
#endif

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

constexpr int64_t kServerStartTimeoutMs = 30'000;
constexpr int64_t kCommandTimeoutMs = 120'000;

// How many times `needle` occurs in `text`.
int Count(std::string_view text, std::string_view needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string_view::npos;
       at = text.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

struct CliRun {
  int code = -1;
  std::string out;
  std::string err;
};

std::ostream& operator<<(std::ostream& os, const CliRun& r) {
  return os << "exit " << r.code << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err;
}

class CliE2eTest : public ::testing::Test {
 protected:
  // The server every test of the suite talks to.
  struct Server {
    std::string dir;
    std::string api_url;
    std::string admin_token;
    std::unique_ptr<base::Subprocess> process;  // destroyed: killed if still running
  };

  static void SetUpTestSuite() {
    server_ = std::make_unique<Server>();
    char tmpl[] = "/tmp/sovai-cli-e2e-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    // Jobs run as an unprivileged uid that must traverse the data directory's parents.
    ASSERT_EQ(chmod(tmpl, 0711), 0);
    server_->dir = tmpl;
    base::SpawnOptions options;
    options.argv = {SOVAI_BINARY,        "server",      "--data-dir",  Path("data"),
                    "--listen-api",      "127.0.0.1:0", "--listen-s3", "127.0.0.1:0",
                    "--listen-registry", "127.0.0.1:0"};
    options.stdout_spec = base::StdioSpec::File(Path("server.log"));
    options.stderr_spec = base::StdioSpec::MergeWithStdout();
    auto process = base::Env::Default().Spawn(options);
    ASSERT_TRUE(process.ok()) << process.status();
    server_->process = std::move(*process);
    const std::string server_json = Path("data/server.json");
    for (int64_t waited = 0; !base::Env::Default().FileExists(server_json); waited += 50) {
      ASSERT_LT(waited, kServerStartTimeoutMs) << "sovai server did not start; see " << Path("");
      base::Env::Default().SleepForMicros(50'000);
    }
    auto info = base::ParseJson(base::Env::Default().ReadFile(server_json).value_or(""));
    ASSERT_TRUE(info.ok()) << info.status();
    server_->api_url = base::GetString(*info, "api_url").value_or("");
    auto admin =
        base::ParseJson(base::Env::Default().ReadFile(Path("data/admin.json")).value_or(""));
    ASSERT_TRUE(admin.ok()) << admin.status();
    server_->admin_token = base::GetString(*admin, "api_token").value_or("");
  }

  static void TearDownTestSuite() {
    if (server_ == nullptr) return;
    if (server_->process != nullptr) {
      server_->process->Signal(SIGTERM).IgnoreError();
      server_->process->Wait(10'000).status().IgnoreError();
    }
    // Kept for a look when something failed.
    if (!HasFailure()) base::Env::Default().DeleteDirRecursive(server_->dir).IgnoreError();
    server_.reset();
  }

  // Runs `sovai <args>` as `home`'s user (HOME=<dir>/<home>), with none of the SOVAI_*
  // variables of the test's own environment.
  static CliRun Cli(const std::string& home, std::vector<std::string> args,
                    std::map<std::string, std::string> env = {}) {
    base::SpawnOptions options;
    options.argv = {SOVAI_BINARY};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.env = {{"HOME", Path(home)},
                   {"SOVAI_URL", ""},
                   {"SOVAI_TOKEN", ""},
                   {"SOVAI_CONFIG", ""},
                   {"XDG_CONFIG_HOME", ""}};
    for (auto& [k, v] : env) options.env[k] = v;
    auto run = base::RunAndCapture(base::Env::Default(), options, "", kCommandTimeoutMs);
    if (!run.ok()) return {-1, "", run.status().ToString()};
    return {run->exit.exited ? run->exit.code : 128 + run->exit.signal, run->stdout_text,
            run->stderr_text};
  }

  static std::string Path(const std::string& name) { return server_->dir + "/" + name; }
  static void Write(const std::string& name, const std::string& data) {
    ASSERT_TRUE(base::Env::Default().CreateDirs(base::DirName(Path(name))).ok());
    ASSERT_TRUE(base::Env::Default().WriteFileAtomically(Path(name), data).ok());
  }

  // Whether this machine can run a bubblewrap sandbox (jobs need one).
  static bool SandboxWorks() {
    base::SpawnOptions options;
    options.argv = {"bwrap", "--ro-bind",     "/",   "/", "--dev", "/dev", "--proc",
                    "/proc", "--unshare-all", "true"};
    auto run = base::RunAndCapture(base::Env::Default(), options, "", 10'000);
    return run.ok() && run->exit.success();
  }

  static std::unique_ptr<Server> server_;
};

std::unique_ptr<CliE2eTest::Server> CliE2eTest::server_;

TEST_F(CliE2eTest, AdminSetsUpAUserWhoRunsTheBriefsJob) {
  // The admin logs in and creates alice, project nlp and a token for alice there.
  CliRun r = Cli("admin", {"login", "--url", server_->api_url, "--token", server_->admin_token});
  ASSERT_EQ(r.code, 0) << r;
  struct stat st {};
  ASSERT_EQ(stat(Path("admin/.config/sovai/config.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  r = Cli("admin", {"whoami", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(Json::parse(r.out)["platform_admin"], true);
  ASSERT_EQ((r = Cli("admin", {"user", "create", "alice", "--email", "alice@example.eu"})).code, 0)
      << r;
  ASSERT_EQ((r = Cli("admin", {"project", "create", "nlp"})).code, 0) << r;
  ASSERT_EQ(
      (r = Cli("admin", {"project", "add-member", "nlp", "alice", "--role", "operator"})).code, 0)
      << r;
  r = Cli("admin", {"user", "create", "Not Valid"});
  EXPECT_EQ(r.code, 1) << r;
  // The problem's detail names the field; its errors[] entry says the same and is not repeated.
  EXPECT_EQ(r.err.rfind("sovai user create: the request has 1 invalid field: name 'Not Valid' ", 0),
            0u)
      << r;
  EXPECT_EQ(Count(r.err, "'Not Valid'"), 1) << r;
  r = Cli("admin", {"token", "create", "--user", "alice", "--project", "nlp", "--role", "operator",
                    "--name", "alice-laptop"});
  ASSERT_EQ(r.code, 0) << r;
  const std::string alice_token(base::Trim(r.out));
  ASSERT_EQ(alice_token.rfind("sov_", 0), 0u) << r;

  // Alice logs in: an S3 key for project nlp; she fills a bucket.
  r = Cli("alice", {"login", "--url", server_->api_url, "--token", "-"});
  EXPECT_EQ(r.code, 2) << r;  // no stdin given: an empty token
  r = Cli("alice", {"login", "--url", server_->api_url, "--token", alice_token});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("as alice (project nlp, role operator)"), std::string::npos) << r;
  EXPECT_NE(r.out.find("access key"), std::string::npos) << r;
  ASSERT_EQ((r = Cli("alice", {"bucket", "mb", "my-bucket"})).code, 0) << r;
  Write("dataset/one.txt", "a\nb\nc\n");
  Write("dataset/two.txt", "x\n");
  ASSERT_EQ((r = Cli("alice", {"bucket", "sync", Path("dataset"), "s3://my-bucket/dataset"})).code,
            0)
      << r;
  r = Cli("alice", {"bucket", "ls", "-o", "json", "my-bucket/dataset/"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(Json::parse(r.out).size(), 2u) << r;
  r = Cli("alice", {"bucket", "sync", Path("dataset"), "s3://my-bucket/dataset"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.err.find("0 files (0 B) copied, 2 unchanged"), std::string::npos) << r;

  // Usage errors exit 2 without a request; server-side refusals exit 1 with the field named.
  r = Cli("alice", {"job", "run", "--volume", "my-bucket:/x", "sovai/shell", "--", "ls"});
  EXPECT_EQ(r.code, 2) << r;
  r = Cli("alice", {"job", "run", "--flavor", "no-such-flavor", "sovai/shell", "--", "ls"});
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_EQ(r.err.rfind("sovai job run: ", 0), 0u) << r;
  EXPECT_EQ(Count(r.err, "no-such-flavor"), 1) << r;  // once: detail and errors[] say the same
  EXPECT_EQ(Count(r.err, "\n"), 1) << r;
  // The command: the message once, the field named once.
  r = Cli("alice", {"job", "run", "--volume", "nosuchbucket@EU-WEST-LOCAL/x:/workspace/x:ro",
                    "sovai/shell", "--", "ls"});
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_EQ(r.err,
            "sovai job run: volumes[0]: bucket 'nosuchbucket' does not exist in this project\n")
      << r;
  r = Cli("alice",
          {"job", "run", "--flavor", "h100-1-gpu", "--gpu", "5", "sovai/shell", "--", "ls"});
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_EQ(Count(r.err, "\n"), 1) << r;
  // An oci: archive that is not in its bucket is refused at submission, naming the image.
  r = Cli("alice", {"job", "run", "oci:my-bucket@EU-WEST-LOCAL/images/nope.tar"});
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_EQ(r.err.rfind("sovai job run: image: the archive s3://my-bucket/images/nope.tar does "
                        "not exist",
                        0),
            0u)
      << r;
  EXPECT_EQ(Count(r.err, "\n"), 1) << r;
  r = Cli("alice", {"flavor", "list", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;

  if (!SandboxWorks()) GTEST_SKIP() << "bubblewrap cannot run here; the job part is skipped";

  // The brief's command, followed: the job's output on stdout, its exit code as ours.
  r = Cli("alice", {"job", "run", "--follow", "--flavor", "ai1-1-cpu", "--cpu", "1", "--volume",
                    "my-bucket@EU-WEST-LOCAL/dataset:/workspace/data:ro", "--volume",
                    "my-bucket@EU-WEST-LOCAL/output:/workspace/output:rw", "sovai/shell", "--",
                    "sh", "-c", "wc -l /workspace/data/* | tee /workspace/output/counts.txt"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("3 /workspace/data/one.txt"), std::string::npos) << r;
  EXPECT_NE(r.out.find("4 total"), std::string::npos) << r;
  EXPECT_NE(r.err.find("ended DONE"), std::string::npos) << r;
  r = Cli("alice", {"bucket", "cp", "s3://my-bucket/output/counts.txt", "-"});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("1 /workspace/data/two.txt"), std::string::npos) << r;

  r = Cli("alice", {"job", "run", "-f", "--name", "failing", "sovai/shell", "--", "sh", "-c",
                    "echo to-stderr >&2; exit 7"});
  EXPECT_EQ(r.code, 7) << r;
  EXPECT_NE(r.out.find("to-stderr"), std::string::npos) << r;
  r = Cli("alice", {"job", "list", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  Json page = Json::parse(r.out);  // the API's own page object
  EXPECT_TRUE(page["next_cursor"].is_null()) << r;
  Json jobs = page["items"];
  ASSERT_EQ(jobs.size(), 2u) << r;
  EXPECT_EQ(jobs[0]["spec"]["name"], "failing");  // newest first
  EXPECT_EQ(jobs[0]["status"]["exit_code"], 7);
  const std::string failed_id = jobs[0]["id"];
  r = Cli("alice", {"job", "logs", "--timestamps", failed_id});
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find(" stderr to-stderr\n"), std::string::npos) << r;
  ASSERT_EQ((r = Cli("alice", {"job", "delete", failed_id})).code, 0) << r;
  EXPECT_EQ(Cli("alice", {"job", "get", failed_id}).code, 1);

  // Revoking alice's token locks her out (exit 1, and the message says to log in again).
  r = Cli("admin", {"token", "list", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r;
  std::string alice_token_id;
  const Json tokens = Json::parse(r.out);
  for (const Json& t : tokens["items"]) {
    if (t["name"] == "alice-laptop") alice_token_id = t["id"];
  }
  ASSERT_FALSE(alice_token_id.empty()) << r;
  ASSERT_EQ((r = Cli("admin", {"token", "revoke", alice_token_id})).code, 0) << r;
  r = Cli("alice", {"whoami"});
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_NE(r.err.find("sovai login"), std::string::npos) << r;
  ASSERT_EQ((r = Cli("admin", {"logout"})).code, 0) << r;
  EXPECT_FALSE(base::Env::Default().FileExists(Path("admin/.config/sovai/config.json")));
}

}  // namespace
}  // namespace sovai::cli::client
