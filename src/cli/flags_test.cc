#include "cli/flags.h"

#include <gtest/gtest.h>

namespace sovai::cli {
namespace {

// The flags of a small command, bound to fields of this struct.
struct ServerFlags {
  std::string data_dir = "./sovai-data";
  int64_t threads = 2;
  bool tls = false;
  FlagSet flags{"sovai server", "Runs the daemon."};

  ServerFlags() {
    flags.String("data-dir", &data_dir, "state directory");
    flags.Int("threads", &threads, "I/O threads");
    flags.Bool("tls", &tls, "serve HTTPS");
  }
};

base::Status Parse(std::vector<std::string> args) {
  ServerFlags f;
  return f.flags.Parse(args);
}

TEST(FlagsTest, DefaultsStayWhenNotGiven) {
  ServerFlags p;
  ASSERT_TRUE(p.flags.Parse({}).ok());
  EXPECT_EQ(p.data_dir, "./sovai-data");
  EXPECT_EQ(p.threads, 2);
  EXPECT_FALSE(p.tls);
}

TEST(FlagsTest, BothValueFormsBooleansAndPositionals) {
  ServerFlags p;
  ASSERT_TRUE(
      p.flags.Parse({"--data-dir", "/d", "--threads=8", "--tls", "job", "--", "--not-a-flag"})
          .ok());
  EXPECT_EQ(p.data_dir, "/d");
  EXPECT_EQ(p.threads, 8);
  EXPECT_TRUE(p.tls);
  EXPECT_EQ(p.flags.positional(), (std::vector<std::string>{"job", "--not-a-flag"}));
  ServerFlags negated;
  ASSERT_TRUE(negated.flags.Parse({"--tls", "--no-tls"}).ok());
  EXPECT_FALSE(negated.tls);
  ServerFlags explicit_value;
  ASSERT_TRUE(explicit_value.flags.Parse({"--tls=true"}).ok());
  EXPECT_TRUE(explicit_value.tls);
}

TEST(FlagsTest, ErrorsNameTheFlag) {
  base::Status s = Parse({"--data-dri", "/x"});
  EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--data-dri"), std::string::npos);
  s = Parse({"--threads", "many"});
  EXPECT_NE(s.message().find("--threads needs an integer"), std::string::npos);
  s = Parse({"--threads"});
  EXPECT_NE(s.message().find("--threads needs a value"), std::string::npos);
  s = Parse({"--tls=maybe"});
  EXPECT_NE(s.message().find("true or false"), std::string::npos);
  s = Parse({"--threads=12x"});
  EXPECT_FALSE(s.ok());
}

TEST(FlagsTest, HelpStopsParsingAndUsageListsDefaults) {
  ServerFlags p;
  ASSERT_TRUE(p.flags.Parse({"--help", "--bogus"}).ok());
  EXPECT_TRUE(p.flags.help_requested());
  std::string usage = p.flags.Usage();
  EXPECT_NE(usage.find("--data-dir VALUE"), std::string::npos);
  EXPECT_NE(usage.find("(default: ./sovai-data)"), std::string::npos);
  EXPECT_NE(usage.find("--threads N"), std::string::npos);
}

}  // namespace
}  // namespace sovai::cli
