#include "cli/client/job_args.h"

#include <gtest/gtest.h>

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

JobRunArgs Shell(std::vector<std::string> command = {"echo", "hi"}) {
  JobRunArgs args;
  args.image = "sovai/shell";
  args.command = std::move(command);
  return args;
}

std::string Error(const JobRunArgs& args, const EnvVars& env = {}) {
  auto spec = BuildJobSpec(args, env);
  EXPECT_FALSE(spec.ok()) << spec->dump();
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), base::StatusCode::kInvalidArgument);
  return spec.status().message();
}

TEST(ParseDurationTest, UnitsAndCombinations) {
  EXPECT_EQ(*ParseDuration("90s"), 90);
  EXPECT_EQ(*ParseDuration("10m"), 600);
  EXPECT_EQ(*ParseDuration("2h"), 7200);
  EXPECT_EQ(*ParseDuration("1d"), 86400);
  EXPECT_EQ(*ParseDuration("1h30m"), 5400);
  EXPECT_EQ(*ParseDuration("1d2h3m4s"), 93784);
  EXPECT_EQ(*ParseDuration("45"), 45);
  EXPECT_EQ(*ParseDuration("366d"), 366 * 86400);
}

TEST(ParseDurationTest, RejectsWhatIsNotADuration) {
  for (const char* bad : {"", "s", "-5s", "1.5h", "10x", "1h30", "0s", "0", "10 m", "h1", "367d",
                          "99999999999999999999s", "1w"}) {
    auto parsed = ParseDuration(bad);
    EXPECT_FALSE(parsed.ok()) << "'" << bad << "' gave " << (parsed.ok() ? *parsed : 0);
  }
  EXPECT_NE(ParseDuration("10x").status().message().find("e.g. 90s"), std::string::npos);
  EXPECT_NE(ParseDuration("0s").status().message().find("at least 1s"), std::string::npos);
}

TEST(BuildJobSpecTest, TheBriefsCommand) {
  JobRunArgs args;
  args.flavor = "ai1-1-cpu";
  args.cpu_units = 1;
  args.volumes = {"my-bucket@EU-WEST-LOCAL/dataset:/workspace/data:ro",
                  "my-bucket@EU-WEST-LOCAL/output:/workspace/output:rw"};
  args.image = "sovai/shell";
  args.command = {"sh", "-c", "wc -l /workspace/data/*"};
  auto spec = BuildJobSpec(args, {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, Json::parse(R"({
    "image": "sovai/shell",
    "command": ["sh", "-c", "wc -l /workspace/data/*"],
    "flavor": "ai1-1-cpu",
    "units": 1,
    "volumes": ["my-bucket@EU-WEST-LOCAL/dataset:/workspace/data:ro",
                "my-bucket@EU-WEST-LOCAL/output:/workspace/output:rw"]
  })"));
}

TEST(BuildJobSpecTest, EveryFlagLandsInItsField) {
  JobRunArgs args = Shell();
  args.name = "finetune-1";
  args.flavor = "h100-1-gpu";
  args.gpu_units = 2;
  args.env = {"EPOCHS=3", "EMPTY=", "EQ=a=b", "HF_TOKEN"};
  args.labels = {"team=nlp", "env=prod"};
  args.timeout = "2h";
  args.restart = "on-failure:3";
  args.network = "none";
  args.priority = -10;
  auto spec = BuildJobSpec(args, {{"HF_TOKEN", "hf_local"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, Json::parse(R"({
    "image": "sovai/shell", "command": ["echo", "hi"], "name": "finetune-1",
    "flavor": "h100-1-gpu", "units": 2,
    "env": {"EPOCHS": "3", "EMPTY": "", "EQ": "a=b", "HF_TOKEN": "hf_local"},
    "labels": {"team": "nlp", "env": "prod"},
    "timeout_s": 7200, "restart": {"policy": "on-failure", "max_retries": 3},
    "network": "none", "priority": -10
  })"));
}

TEST(BuildJobSpecTest, DefaultsStayOutOfTheSpec) {
  auto spec = BuildJobSpec(Shell(), {});
  ASSERT_TRUE(spec.ok());
  // No units: the server's default (1); the CPU flavor by default.
  EXPECT_EQ(*spec, Json::parse(R"({"image": "sovai/shell", "command": ["echo", "hi"],
                                   "flavor": "ai1-1-cpu"})"));
  JobRunArgs restart = Shell();
  restart.restart = "on-failure";
  EXPECT_EQ((*BuildJobSpec(restart, {}))["restart"], Json::parse(R"({"policy": "on-failure"})"));
  restart.restart = "never";
  EXPECT_EQ((*BuildJobSpec(restart, {}))["restart"], Json::parse(R"({"policy": "never"})"));
  JobRunArgs zero = Shell();
  zero.priority = 0;  // given explicitly: sent
  EXPECT_EQ((*BuildJobSpec(zero, {}))["priority"], 0);
}

TEST(BuildJobSpecTest, UnitFlagsAndFlavor) {
  JobRunArgs both = Shell();
  both.gpu_units = 1;
  both.cpu_units = 1;
  both.flavor = "h100-1-gpu";
  EXPECT_NE(Error(both).find("--gpu and --cpu"), std::string::npos);
  JobRunArgs gpu = Shell();
  gpu.gpu_units = 1;
  EXPECT_NE(Error(gpu).find("--gpu needs --flavor"), std::string::npos);
  JobRunArgs zero = Shell();
  zero.cpu_units = 0;
  EXPECT_NE(Error(zero).find("--cpu"), std::string::npos);
  JobRunArgs cpu = Shell();
  cpu.cpu_units = 4;
  EXPECT_EQ((*BuildJobSpec(cpu, {}))["flavor"], "ai1-1-cpu");
  EXPECT_EQ((*BuildJobSpec(cpu, {}))["units"], 4);
  JobRunArgs no_image = Shell();
  no_image.image = "";
  EXPECT_NE(Error(no_image).find("IMAGE"), std::string::npos);
}

TEST(BuildJobSpecTest, VolumeErrorsComeFromTheVolumeParser) {
  JobRunArgs args = Shell();
  args.volumes = {"data:/mnt"};
  std::string error = Error(args);
  EXPECT_NE(error.find("--volume"), std::string::npos) << error;
  EXPECT_NE(error.find("missing '@REGION'"), std::string::npos) << error;
  args.volumes = {"data@EU-WEST-LOCAL:/workspace/data:RW"};
  EXPECT_NE(Error(args).find("unknown option 'RW'"), std::string::npos);
}

TEST(BuildJobSpecTest, EnvAndLabelErrorsNameTheFlag) {
  JobRunArgs env = Shell();
  env.env = {"1BAD=x"};
  EXPECT_NE(Error(env).find("--env '1BAD=x'"), std::string::npos);
  env.env = {"A=1", "A=2"};
  EXPECT_NE(Error(env).find("--env A is given twice"), std::string::npos);
  env.env = {"UNSET_HERE"};
  EXPECT_NE(Error(env).find("UNSET_HERE is not set here"), std::string::npos);
  env.env = {"=x"};
  EXPECT_FALSE(BuildJobSpec(env, {}).ok());

  JobRunArgs label = Shell();
  label.labels = {"team"};
  EXPECT_NE(Error(label).find("--label 'team' must be KEY=VALUE"), std::string::npos);
  label.labels = {"team=a b"};
  EXPECT_NE(Error(label).find("--label: label value 'a b'"), std::string::npos);
  label.labels = {"team=a", "team=b"};
  EXPECT_NE(Error(label).find("twice"), std::string::npos);
  label.labels = {"-x=1"};
  EXPECT_NE(Error(label).find("starting with a letter or digit"), std::string::npos);
}

TEST(BuildJobSpecTest, TimeoutRestartNetworkPriorityErrors) {
  JobRunArgs args = Shell();
  args.timeout = "soon";
  EXPECT_NE(Error(args).find("--timeout: invalid duration 'soon'"), std::string::npos);
  args = Shell();
  for (const char* bad :
       {"always", "on-failure:", "on-failure:x", "on-failure:101", "On-Failure"}) {
    args.restart = bad;
    EXPECT_NE(Error(args).find("--restart must be"), std::string::npos) << bad;
  }
  args = Shell();
  args.network = "bridge";
  EXPECT_NE(Error(args).find("--network must be none or host"), std::string::npos);
  args = Shell();
  args.priority = 1001;
  EXPECT_NE(Error(args).find("--priority must be in [-1000, 1000]"), std::string::npos);
  args = Shell();
  args.nodes = 0;
  EXPECT_NE(Error(args).find("--nodes must be at least 1"), std::string::npos);
  args = Shell();
  args.tasks_per_node = 0;
  EXPECT_NE(Error(args).find("--tasks-per-node must be at least 1"), std::string::npos);
}

TEST(BuildJobSpecTest, DistributedShape) {
  JobRunArgs args = Shell();
  auto plain = BuildJobSpec(args, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->contains("nodes"));
  EXPECT_FALSE(plain->contains("tasks_per_node"));
  args.nodes = 2;
  args.tasks_per_node = 4;
  auto spec = BuildJobSpec(args, {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["nodes"], 2);
  EXPECT_EQ((*spec)["tasks_per_node"], 4);
}

TEST(SelectorTest, CanonicalAndChecked) {
  EXPECT_EQ(*ParseSelector("team=nlp,env=prod", "--selector"), "env=prod,team=nlp");
  EXPECT_EQ(*ParseSelector("a=", "--selector"), "a=");
  EXPECT_FALSE(ParseSelector("team=nlp,team=cv", "--selector").ok());
  EXPECT_FALSE(ParseSelector("team", "--selector").ok());
  EXPECT_FALSE(ParseSelector("", "--selector").ok());
  EXPECT_FALSE(ParseSelector("a=b c", "--selector").ok());
}

TEST(ExitCodeForJobTest, MapsTerminalStates) {
  EXPECT_EQ(ExitCodeForJob(Json::parse(R"({"status": {"state": "DONE", "exit_code": 0}})")), 0);
  EXPECT_EQ(ExitCodeForJob(Json::parse(R"({"status": {"state": "FAILED", "exit_code": 3}})")), 3);
  EXPECT_EQ(ExitCodeForJob(Json::parse(R"({"status": {"state": "FAILED", "exit_signal": 9}})")), 1);
  EXPECT_EQ(ExitCodeForJob(Json::parse(R"({"status": {"state": "ERROR"}})")), 1);
  EXPECT_EQ(ExitCodeForJob(Json::parse(R"({"status": {"state": "TIMEOUT"}})")), 1);
  EXPECT_EQ(ExitCodeForJob(Json::parse(R"({"status": {"state": "INTERRUPTED", "exit_code": 0}})")),
            1);
  EXPECT_EQ(ExitCodeForJob(Json::parse(R"({"status": {"state": "FAILED", "exit_code": 300}})")), 1);
  EXPECT_EQ(ExitCodeForJob(Json::parse(R"({"status": {"state": "FAILED", "exit_code": -1}})")), 1);
  EXPECT_EQ(ExitCodeForJob(Json()), 1);
  EXPECT_TRUE(IsTerminalState("TIMEOUT"));
  EXPECT_FALSE(IsTerminalState("FINALIZING"));
}

}  // namespace
}  // namespace sovai::cli::client
