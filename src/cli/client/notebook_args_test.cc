#include "cli/client/notebook_args.h"

#include <gtest/gtest.h>

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

std::string RunError(const NotebookRunArgs& args, const EnvVars& env = {}) {
  auto spec = BuildNotebookSpec(args, env);
  EXPECT_FALSE(spec.ok());
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), base::StatusCode::kInvalidArgument);
  return spec.status().message();
}

TEST(BuildNotebookSpecTest, DefaultsToJupyterOnTheDefaultCpuFlavor) {
  auto spec = BuildNotebookSpec({}, {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, Json::parse(R"({"editor": "jupyter", "flavor": "ai1-1-cpu"})"));
}

TEST(BuildNotebookSpecTest, EveryFlagLandsInItsField) {
  NotebookRunArgs args;
  args.name = "explore";
  args.flavor = "h100-1-gpu";
  args.gpu_units = 1;
  args.volumes = {"data@EU-WEST-LOCAL/ds:/workspace/data:ro",
                  "data@EU-WEST-LOCAL/work:/workspace/work:rw"};
  args.labels = {"team=nlp"};
  args.env = {"HF_HUB_OFFLINE=1", "LOCAL"};
  args.idle_timeout = "2h";
  auto spec = BuildNotebookSpec(args, {{"LOCAL", "from-shell"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, Json::parse(R"({
    "name": "explore", "editor": "jupyter", "flavor": "h100-1-gpu", "units": 1,
    "volumes": ["data@EU-WEST-LOCAL/ds:/workspace/data:ro",
                "data@EU-WEST-LOCAL/work:/workspace/work:rw"],
    "labels": {"team": "nlp"}, "env": {"HF_HUB_OFFLINE": "1", "LOCAL": "from-shell"},
    "idle_timeout_s": 7200
  })"));
  args.idle_timeout = "never";
  EXPECT_EQ((*BuildNotebookSpec(args, {{"LOCAL", "x"}}))["idle_timeout_s"], 0);
  args.idle_timeout = "0";
  EXPECT_EQ((*BuildNotebookSpec(args, {{"LOCAL", "x"}}))["idle_timeout_s"], 0);
}

TEST(BuildNotebookSpecTest, AnImageIsAJobsImageButTheEngines) {
  NotebookRunArgs args;
  args.image = "127.0.0.1:5000/team/torch-notebook:2.4";
  auto spec = BuildNotebookSpec(args, {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["image"], "127.0.0.1:5000/team/torch-notebook:2.4");
  args.image = "oci:data@EU-WEST-LOCAL/images/jupyter.tar";
  EXPECT_EQ((*BuildNotebookSpec(args, {}))["image"], args.image);
  EXPECT_FALSE(BuildNotebookSpec({}, {})->contains("image"));
  args.image = "sovai/finetune";
  EXPECT_NE(RunError(args).find("--image sovai/finetune runs jobs and apps"), std::string::npos);
}

TEST(BuildNotebookSpecTest, TheEditorIsJupyterOrVscode) {
  NotebookRunArgs args;
  args.editor = "vscode";
  auto spec = BuildNotebookSpec(args, {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["editor"], "vscode");
  args.editor = "emacs";
  std::string error = RunError(args);
  EXPECT_NE(error.find("--editor 'emacs'"), std::string::npos) << error;
  EXPECT_NE(error.find("vscode"), std::string::npos) << error;
}

TEST(BuildNotebookSpecTest, BadFlagsAreNamed) {
  NotebookRunArgs args;
  args.name = "Bad Name";
  EXPECT_NE(RunError(args).find("--name"), std::string::npos);
  args = {};
  args.gpu_units = 1;  // --gpu without --flavor
  EXPECT_NE(RunError(args).find("--gpu"), std::string::npos);
  args = {};
  args.volumes = {"not-a-volume"};
  EXPECT_NE(RunError(args).find("--volume"), std::string::npos);
  args = {};
  args.labels = {"novalue"};
  EXPECT_NE(RunError(args).find("--label"), std::string::npos);
  args = {};
  args.idle_timeout = "soon";
  EXPECT_NE(RunError(args).find("--idle-timeout"), std::string::npos);
  args.idle_timeout = "8d";
  EXPECT_NE(RunError(args).find("--idle-timeout"), std::string::npos);
}

TEST(NotebookStatesTest, SettledStatesEndAWait) {
  for (const char* s : {"STOPPED", "FAILED", "ERROR", "STOPPING", "DELETING", "DELETED"}) {
    EXPECT_TRUE(IsNotebookSettledState(s)) << s;
  }
  EXPECT_FALSE(IsNotebookSettledState("STARTING"));
  EXPECT_FALSE(IsNotebookSettledState("RUNNING"));
}

}  // namespace
}  // namespace sovai::cli::client
