#include "cli/client/datastore_args.h"

#include <gtest/gtest.h>

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

DatastoreAddArgs Args() {
  return DatastoreAddArgs{.type = "s3",
                          .alias = "ext",
                          .endpoint = "https://s3.example.eu:8443",
                          .region = "eu-central-1",
                          .access_key = "AKIAIOSFODNN7EXAMPLE"};
}

std::string NoStdin() {
  ADD_FAILURE() << "stdin read without --secret-key -";
  return "";
}

std::string Error(const DatastoreAddArgs& args, const EnvVars& env = {},
                  std::function<std::string()> stdin_line = NoStdin) {
  auto body = BuildDatastoreRequest(args, env, stdin_line);
  EXPECT_FALSE(body.ok());
  if (body.ok()) return "";
  EXPECT_EQ(body.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(body.status().message().find(kSecret), std::string::npos) << body.status();
  return body.status().message();
}

TEST(BuildDatastoreRequestTest, EveryFlagLandsInItsField) {
  DatastoreAddArgs args = Args();
  args.secret_key = kSecret;
  auto body = BuildDatastoreRequest(args, {}, NoStdin);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, Json({{"alias", "ext"},
                         {"type", "s3"},
                         {"endpoint", "https://s3.example.eu:8443"},
                         {"region", "eu-central-1"},
                         {"access_key", "AKIAIOSFODNN7EXAMPLE"},
                         {"secret_key", kSecret}}));
  EXPECT_TRUE(SecretOnCommandLine(args));
}

TEST(BuildDatastoreRequestTest, TheSecretComesFromTheEnvironmentOrStdin) {
  DatastoreAddArgs args = Args();
  const EnvVars env = {{"SOVAI_DATASTORE_SECRET_KEY", kSecret}};
  auto from_env = BuildDatastoreRequest(args, env, NoStdin);
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ((*from_env)["secret_key"], kSecret);
  EXPECT_FALSE(SecretOnCommandLine(args));

  args.secret_key = "-";
  int reads = 0;
  auto from_stdin = BuildDatastoreRequest(args, env, [&] {
    ++reads;
    return std::string(kSecret) + "\r\n";
  });
  ASSERT_TRUE(from_stdin.ok()) << from_stdin.status();
  EXPECT_EQ((*from_stdin)["secret_key"], kSecret);  // stdin wins, trimmed
  EXPECT_EQ(reads, 1);
  EXPECT_FALSE(SecretOnCommandLine(args));

  // The flag's value wins over the environment.
  args.secret_key = "from-the-flag";
  EXPECT_EQ((*BuildDatastoreRequest(args, env, NoStdin))["secret_key"], "from-the-flag");
}

TEST(BuildDatastoreRequestTest, RefusesWhatTheServerWouldNamingTheFlag) {
  DatastoreAddArgs args = Args();
  args.secret_key = kSecret;
  {
    DatastoreAddArgs a = args;
    a.type = "gcs";
    EXPECT_NE(Error(a).find("the only type is s3"), std::string::npos);
  }
  for (const char* alias :
       {"e", "1ext", "ext_1", "ext.eu", "-ext", "", "abcdefghijabcdefghijabcdefghijabc"}) {
    DatastoreAddArgs a = args;
    a.alias = alias;
    EXPECT_NE(Error(a).find("ALIAS '" + std::string(alias) + "' must be 2 to 32"),
              std::string::npos)
        << alias;
  }
  {
    DatastoreAddArgs a = args;
    a.endpoint = "";
    EXPECT_NE(Error(a).find("missing --endpoint"), std::string::npos);
    a.endpoint = "s3.example.eu";
    EXPECT_NE(Error(a).find("--endpoint 's3.example.eu' must be http://"), std::string::npos);
  }
  {
    DatastoreAddArgs a = args;
    a.region = "";
    EXPECT_NE(Error(a).find("missing --region"), std::string::npos);
  }
  {
    DatastoreAddArgs a = args;
    a.access_key = "";
    EXPECT_NE(Error(a).find("missing --access-key"), std::string::npos);
  }
  {
    DatastoreAddArgs a = args;
    a.secret_key = "";
    EXPECT_NE(Error(a).find("set SOVAI_DATASTORE_SECRET_KEY, or pass --secret-key -"),
              std::string::npos);
    EXPECT_NE(Error(a, {{"SOVAI_DATASTORE_SECRET_KEY", ""}}).find("missing the secret key"),
              std::string::npos);
    a.secret_key = "-";
    EXPECT_NE(Error(a, {}, [] { return std::string("  \n"); }).find("stdin gave no secret key"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace sovai::cli::client
