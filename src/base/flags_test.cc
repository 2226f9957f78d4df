#include "base/flags.h"

#include <gtest/gtest.h>

namespace sovai::base {
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

// The flags of `sovai job run`: repeated values, one-letter aliases, a command after "--".
struct RunFlags {
  std::vector<std::string> volumes;
  std::vector<std::string> env;
  std::string output = "table";
  bool follow = false;
  int64_t priority = 0;
  FlagSet flags{"sovai job run", "Runs a job."};

  RunFlags() {
    flags.StringList("volume", &volumes, "a volume", "SPEC");
    flags.StringList("env", &env, "K=V");
    flags.String("output", &output, "table or json", "FORMAT");
    flags.Bool("follow", &follow, "stream the logs");
    flags.Int("priority", &priority, "priority");
    flags.Short('o', "output");
    flags.Short('f', "follow");
    flags.Positional("IMAGE [-- COMMAND ARGS...]");
  }
};

TEST(FlagsTest, RepeatedFlagsKeepEveryValueInOrder) {
  RunFlags p;
  ASSERT_TRUE(
      p.flags.Parse({"--volume", "a@R:/x", "--env=A=1", "--volume=b@R:/y", "--env", "B=2=3", "img"})
          .ok());
  EXPECT_EQ(p.volumes, (std::vector<std::string>{"a@R:/x", "b@R:/y"}));
  EXPECT_EQ(p.env, (std::vector<std::string>{"A=1", "B=2=3"}));
  EXPECT_TRUE(p.flags.WasSet("volume"));
  EXPECT_FALSE(p.flags.WasSet("priority"));
}

TEST(FlagsTest, ShortAliasesTakeValuesAndBooleans) {
  RunFlags p;
  ASSERT_TRUE(p.flags.Parse({"-o", "json", "-f", "--priority", "-5", "img"}).ok());
  EXPECT_EQ(p.output, "json");
  EXPECT_TRUE(p.follow);
  EXPECT_EQ(p.priority, -5);
  EXPECT_TRUE(p.flags.WasSet("priority"));
  EXPECT_EQ(p.flags.positional(), std::vector<std::string>{"img"});

  RunFlags missing;
  base::Status s = missing.flags.Parse({"-o"});
  EXPECT_NE(s.message().find("-o (--output) needs a value"), std::string::npos) << s;
  RunFlags unknown;
  s = unknown.flags.Parse({"img", "sh", "-c", "ls"});
  EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown flag -c"), std::string::npos) << s;
  EXPECT_NE(s.message().find("after --"), std::string::npos) << s;
  RunFlags combined;
  EXPECT_FALSE(combined.flags.Parse({"-fo", "json"}).ok());
}

TEST(FlagsTest, DashSeparatesTheCommand) {
  RunFlags p;
  ASSERT_TRUE(
      p.flags.Parse({"--volume", "v@R:/x", "img", "--", "sh", "-c", "wc -l /x/*", "--volume"})
          .ok());
  EXPECT_TRUE(p.flags.saw_dash());
  EXPECT_EQ(p.flags.positional_before_dash(), 1u);
  EXPECT_EQ(p.flags.positional(),
            (std::vector<std::string>{"img", "sh", "-c", "wc -l /x/*", "--volume"}));
  EXPECT_EQ(p.volumes, std::vector<std::string>{"v@R:/x"});

  RunFlags no_dash;
  ASSERT_TRUE(no_dash.flags.Parse({"img", "-", "echo"}).ok());
  EXPECT_FALSE(no_dash.flags.saw_dash());
  EXPECT_EQ(no_dash.flags.positional_before_dash(), 3u);
}

TEST(FlagsTest, UsageShowsAliasesPlaceholdersAndRepeatable) {
  RunFlags p;
  std::string usage = p.flags.Usage();
  EXPECT_NE(usage.find("Usage: sovai job run [flags] IMAGE [-- COMMAND ARGS...]"),
            std::string::npos)
      << usage;
  EXPECT_NE(usage.find("-o, --output FORMAT"), std::string::npos) << usage;
  EXPECT_NE(usage.find("-f, --follow"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--volume SPEC"), std::string::npos) << usage;
  EXPECT_NE(usage.find("(repeatable)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("-h, --help"), std::string::npos) << usage;
  // Booleans that default to false say nothing; a hidden default says nothing.
  EXPECT_EQ(usage.find("(default: false)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("(default: 0)"), std::string::npos) << usage;
  p.flags.HideDefault("priority");
  EXPECT_EQ(p.flags.Usage().find("(default: 0)"), std::string::npos);
}

TEST(FlagsDeathTest, AliasOfUnknownFlagIsABug) {
  RunFlags p;
  EXPECT_DEATH(p.flags.Short('x', "nope"), "unknown flag");
  EXPECT_DEATH(p.flags.Short('o', "follow"), "twice");
}

}  // namespace
}  // namespace sovai::base
