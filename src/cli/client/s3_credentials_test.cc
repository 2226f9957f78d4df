// The texts of `sovai s3 credentials` (docs/api/s3.md shows them; tests/e2e/s3_credentials_test.py
// configures each real client with them), and the command: the secret only in a format, usage
// errors, a config without an S3 key.
#include "cli/client/s3_credentials.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "base/env.h"
#include "cli/client/commands.h"

namespace sovai::cli::client {
namespace {

constexpr char kExampleSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

S3Credentials Credentials(std::string endpoint = "http://127.0.0.1:9000") {
  return {std::move(endpoint), "eu-west-local", "SVEXAMPLEKEY", kExampleSecret};
}

TEST(S3CredentialsTest, Env) {
  EXPECT_EQ(RenderS3Credentials(Credentials(), S3CredentialsFormat::kEnv),
            "export AWS_ACCESS_KEY_ID='SVEXAMPLEKEY'\n"
            "export AWS_SECRET_ACCESS_KEY='wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY'\n"
            "export AWS_DEFAULT_REGION='eu-west-local'\n"
            "export AWS_REGION='eu-west-local'\n"
            "export AWS_ENDPOINT_URL_S3='http://127.0.0.1:9000'\n");
  const std::string tls = RenderS3Credentials(Credentials(), S3CredentialsFormat::kEnv,
                                              {.ca_bundle = "/etc/it's/ca.pem"});
  EXPECT_TRUE(tls.ends_with("\nexport AWS_CA_BUNDLE='/etc/it'\\''s/ca.pem'\n")) << tls;
}

TEST(S3CredentialsTest, AwsProfile) {
  EXPECT_EQ(RenderS3Credentials(Credentials(), S3CredentialsFormat::kAws),
            "[profile sovai]\n"
            "region = eu-west-local\n"
            "endpoint_url = http://127.0.0.1:9000\n"
            "aws_access_key_id = SVEXAMPLEKEY\n"
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n"
            "s3 =\n"
            "    addressing_style = path\n");
  const std::string tls =
      RenderS3Credentials(Credentials("https://s3.example.eu"), S3CredentialsFormat::kAws,
                          {.name = "default", .ca_bundle = "/ca.pem"});
  EXPECT_EQ(tls.rfind("[default]\n", 0), 0u) << tls;
  EXPECT_NE(tls.find("\nca_bundle = /ca.pem\n"), std::string::npos) << tls;
}

TEST(S3CredentialsTest, RcloneRemote) {
  EXPECT_EQ(RenderS3Credentials(Credentials(), S3CredentialsFormat::kRclone, {.name = "eu"}),
            "[eu]\n"
            "type = s3\n"
            "provider = Other\n"
            "access_key_id = SVEXAMPLEKEY\n"
            "secret_access_key = wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n"
            "endpoint = http://127.0.0.1:9000\n"
            "region = eu-west-local\n"
            "location_constraint = eu-west-local\n"
            "force_path_style = true\n");
  EXPECT_EQ(RenderS3Credentials(Credentials(), S3CredentialsFormat::kRclone, {.ca_bundle = "/c"})
                .rfind("# run rclone with --ca-cert /c\n[sovai]\n", 0),
            0u);
}

TEST(S3CredentialsTest, S3cmdConfig) {
  EXPECT_EQ(RenderS3Credentials(Credentials("http://127.0.0.1:9000/"), S3CredentialsFormat::kS3cmd),
            "[default]\n"
            "access_key = SVEXAMPLEKEY\n"
            "secret_key = wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n"
            "host_base = 127.0.0.1:9000\n"
            "host_bucket = 127.0.0.1:9000\n"
            "use_https = False\n"
            "signature_v2 = False\n"
            "signurl_use_https = False\n"
            "bucket_location = eu-west-local\n");
  const std::string tls = RenderS3Credentials(Credentials("https://s3.example.eu:9443"),
                                              S3CredentialsFormat::kS3cmd, {.ca_bundle = "/ca"});
  EXPECT_NE(tls.find("host_base = s3.example.eu:9443\n"), std::string::npos) << tls;
  EXPECT_NE(tls.find("use_https = True\nca_certs_file = /ca\ncheck_ssl_certificate = True\n"),
            std::string::npos)
      << tls;
}

TEST(S3CredentialsTest, Boto3Client) {
  EXPECT_EQ(RenderS3Credentials(Credentials(), S3CredentialsFormat::kBoto3),
            "import boto3\n"
            "from botocore.config import Config\n"
            "\n"
            "s3 = boto3.client(\n"
            "    \"s3\",\n"
            "    endpoint_url=\"http://127.0.0.1:9000\",\n"
            "    region_name=\"eu-west-local\",\n"
            "    aws_access_key_id=\"SVEXAMPLEKEY\",\n"
            "    aws_secret_access_key=\"wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\",\n"
            "    config=Config(s3={\"addressing_style\": \"path\"}),\n"
            ")\n");
}

TEST(S3CredentialsTest, TheSummaryNeverHoldsTheSecret) {
  const std::string text = RenderS3Credentials(Credentials(), S3CredentialsFormat::kSummary);
  EXPECT_EQ(text.find(kExampleSecret), std::string::npos) << text;
  EXPECT_NE(text.find("Access key:  SVEXAMPLEKEY\n"), std::string::npos) << text;
  EXPECT_NE(text.find("--format env|aws|rclone|s3cmd|boto3"), std::string::npos) << text;
}

TEST(S3CredentialsTest, FormatsAndConfigsAreChecked) {
  EXPECT_EQ(*ParseS3CredentialsFormat("rclone"), S3CredentialsFormat::kRclone);
  auto bad = ParseS3CredentialsFormat("json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--format must be env, aws, rclone, s3cmd or boto3, not 'json'");

  ClientConfig config;
  config.region = "EU-WEST-LOCAL";
  config.s3_url = "http://127.0.0.1:9000";
  config.s3_access_key_id = "SVEXAMPLEKEY";
  EXPECT_EQ(S3CredentialsOf(config).status().code(), base::StatusCode::kFailedPrecondition);
  config.s3_secret_access_key = kExampleSecret;
  auto ok = S3CredentialsOf(config);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->region, "eu-west-local");  // SigV4 scopes want the lowercase name
  config.s3_secret_access_key = std::string(kExampleSecret) + "\n[evil]";
  EXPECT_EQ(S3CredentialsOf(config).status().code(), base::StatusCode::kFailedPrecondition);
}

// The command over a config file written as `sovai login` writes it.
class S3CredentialsCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-s3-credentials-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    vars_ = {{"SOVAI_CONFIG", dir_ + "/config.json"}};
  }
  void TearDown() override { base::Env::Default().DeleteDirRecursive(dir_).IgnoreError(); }

  void SaveLogin(bool with_s3) {
    ClientConfig config;
    config.url = "http://127.0.0.1:8080";
    config.token = "sov_x";
    if (with_s3) {
      config.region = "EU-WEST-LOCAL";
      config.s3_url = "http://127.0.0.1:9000";
      config.s3_access_key_id = "SVEXAMPLEKEY";
      config.s3_secret_access_key = kExampleSecret;
    }
    ASSERT_TRUE(SaveConfig(base::Env::Default(), dir_ + "/config.json", config).ok());
  }
  int Run(std::vector<std::string> args) {
    console_.Clear();
    CommandContext ctx{base::Env::Default(), console_, vars_, {}};
    return RunClientCommand("s3", args, ctx);
  }

  std::string dir_;
  EnvVars vars_;
  BufferConsole console_;
};

TEST_F(S3CredentialsCommandTest, TheSecretOnlyInAFormatAndOnlyOnStdout) {
  SaveLogin(true);
  ASSERT_EQ(Run({"credentials"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(), RenderS3Credentials(Credentials(), S3CredentialsFormat::kSummary));
  EXPECT_EQ(console_.out().find(kExampleSecret), std::string::npos);
  ASSERT_EQ(Run({"credentials", "--format", "rclone", "--name", "eu"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(),
            RenderS3Credentials(Credentials(), S3CredentialsFormat::kRclone, {.name = "eu"}));
  EXPECT_EQ(console_.err(), "");
  ASSERT_EQ(Run({"credentials", "--format=env"}), kExitOk);
  EXPECT_NE(console_.out().find(kExampleSecret), std::string::npos);
  EXPECT_EQ(console_.err().find(kExampleSecret), std::string::npos);
}

TEST_F(S3CredentialsCommandTest, UsageErrorsAndAMissingKey) {
  SaveLogin(true);
  EXPECT_EQ(Run({"credentials", "--format", "json"}), kExitUsage);
  EXPECT_NE(console_.err().find("--format must be env, aws, rclone, s3cmd or boto3"),
            std::string::npos)
      << console_.err();
  EXPECT_EQ(Run({"credentials", "--format", "aws", "--name", "a]b"}), kExitUsage);
  EXPECT_EQ(Run({"credentials", "extra"}), kExitUsage);
  EXPECT_EQ(console_.out(), "");
  SaveLogin(false);
  EXPECT_EQ(Run({"credentials", "--format", "env"}), kExitFailure);
  EXPECT_EQ(console_.err(),
            "sovai s3 credentials: the config holds no S3 key: run 'sovai login' (without "
            "--no-s3) to create one\n");
  EXPECT_EQ(console_.out(), "");
}

}  // namespace
}  // namespace sovai::cli::client
