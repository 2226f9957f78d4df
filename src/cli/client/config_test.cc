#include "cli/client/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

namespace sovai::cli::client {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-cli-config-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { env_.DeleteDirRecursive(dir_).IgnoreError(); }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
};

ClientConfig Full() {
  ClientConfig c;
  c.url = "http://127.0.0.1:8080";
  c.token = "sov_secret";
  c.user_id = "usr_01";
  c.user_name = "alice";
  c.project_id = "prj_01";
  c.project_name = "nlp";
  c.region = "EU-WEST-LOCAL";
  c.s3_url = "http://127.0.0.1:9000";
  c.s3_access_key_id = "SVKEY";
  c.s3_secret_access_key = "s3cret";
  return c;
}

TEST(ConfigPathTest, EnvironmentChoosesThePath) {
  EXPECT_EQ(*ConfigPath({{"HOME", "/home/a"}}), "/home/a/.config/sovai/config.json");
  EXPECT_EQ(*ConfigPath({{"HOME", "/home/a"}, {"XDG_CONFIG_HOME", "/xdg"}}),
            "/xdg/sovai/config.json");
  // The XDG spec ignores relative values; so do we.
  EXPECT_EQ(*ConfigPath({{"HOME", "/home/a"}, {"XDG_CONFIG_HOME", "rel"}}),
            "/home/a/.config/sovai/config.json");
  EXPECT_EQ(
      *ConfigPath({{"HOME", "/home/a"}, {"XDG_CONFIG_HOME", "/xdg"}, {"SOVAI_CONFIG", "/c.json"}}),
      "/c.json");
  // Empty values count as unset.
  EXPECT_EQ(*ConfigPath({{"HOME", "/h"}, {"SOVAI_CONFIG", ""}, {"XDG_CONFIG_HOME", ""}}),
            "/h/.config/sovai/config.json");
  auto none = ConfigPath({});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("SOVAI_CONFIG"), std::string::npos);
}

TEST_F(ConfigTest, RoundTripsWithMode0600AndCreatesPrivateDirectory) {
  const std::string path = dir_ + "/xdg/sovai/config.json";
  ASSERT_TRUE(SaveConfig(env_, path, Full()).ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((dir_ + "/xdg/sovai").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto loaded = LoadConfig(env_, path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ(**loaded, Full());
  EXPECT_TRUE((*loaded)->has_s3());
}

TEST_F(ConfigTest, RewritingAGroupReadableFileMakesIt0600) {
  const std::string path = dir_ + "/config.json";
  ASSERT_TRUE(env_.WriteFileAtomically(path, "{}", 0644).ok());
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  ASSERT_TRUE(SaveConfig(env_, path, Full()).ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // No temporary file is left next to it.
  auto names = env_.ListDir(dir_);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"config.json"});
}

TEST_F(ConfigTest, MissingFileIsNoConfigAndBadFilesSayHowToFixThem) {
  auto missing = LoadConfig(env_, dir_ + "/none.json");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());

  const std::string path = dir_ + "/config.json";
  for (const char* bad : {"{not json", "[1,2]", "{\"url\": 5}"}) {
    ASSERT_TRUE(env_.WriteFileAtomically(path, bad).ok());
    auto loaded = LoadConfig(env_, path);
    ASSERT_FALSE(loaded.ok()) << bad;
    EXPECT_EQ(loaded.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(loaded.status().message().find(path), std::string::npos) << loaded.status();
    EXPECT_NE(loaded.status().message().find("sovai login"), std::string::npos);
  }
  // Unknown members are ignored (a newer CLI may add some).
  ASSERT_TRUE(env_.WriteFileAtomically(path, R"({"url": "http://x:1", "future": true})").ok());
  auto loaded = LoadConfig(env_, path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->url, "http://x:1");
  EXPECT_FALSE((*loaded)->has_s3());
}

TEST(ApplyEnvironmentTest, UrlAndTokenOverrideTheFile) {
  ClientConfig merged = ApplyEnvironment(
      Full(), {{"SOVAI_URL", "https://api.example.eu/"}, {"SOVAI_TOKEN", "sov_env"}});
  EXPECT_EQ(merged.url, "https://api.example.eu");
  EXPECT_EQ(merged.token, "sov_env");
  EXPECT_EQ(merged.s3_access_key_id, "SVKEY");  // the rest stays
  ClientConfig same = ApplyEnvironment(Full(), {{"SOVAI_URL", ""}, {"HOME", "/h"}});
  EXPECT_EQ(same, Full());
  ClientConfig from_nothing = ApplyEnvironment({}, {{"SOVAI_TOKEN", "t"}});
  EXPECT_EQ(from_nothing.token, "t");
  EXPECT_EQ(from_nothing.url, "");
}

TEST(NormalizeApiUrlTest, AcceptsOriginsOnly) {
  EXPECT_EQ(*NormalizeApiUrl("http://127.0.0.1:8080/"), "http://127.0.0.1:8080");
  EXPECT_EQ(*NormalizeApiUrl("https://sovai.example.eu"), "https://sovai.example.eu");
  EXPECT_EQ(*NormalizeApiUrl("http://[::1]:8080"), "http://[::1]:8080");
  for (const char* bad : {"127.0.0.1:8080", "ftp://x", "http://", "http://h:99999", "http://h/v1",
                          "http://u:p@h", "http://h?x=1"}) {
    EXPECT_FALSE(NormalizeApiUrl(bad).ok()) << bad;
  }
}

TEST(ConfigToJsonTest, OmitsEmptyMembers) {
  ClientConfig c;
  c.url = "http://h:1";
  c.token = "t";
  EXPECT_EQ(ConfigToJson(c), "{\n  \"token\": \"t\",\n  \"url\": \"http://h:1\"\n}\n");
}

}  // namespace
}  // namespace sovai::cli::client
