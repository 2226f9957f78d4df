#include "cli/client/app_args.h"

#include <gtest/gtest.h>

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

AppRunArgs ModelApp() {
  AppRunArgs args;
  args.name = "support-bot";
  args.model = "models@EU-WEST-LOCAL/qwen2.5-0.5b";
  return args;
}

template <typename T>
std::string ErrorOf(const base::Result<T>& result) {
  EXPECT_FALSE(result.ok());
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), base::StatusCode::kInvalidArgument);
  return result.status().message();
}

std::string RunError(const AppRunArgs& args, const EnvVars& env = {}) {
  return ErrorOf(BuildAppSpec(args, env));
}

TEST(BuildAppSpecTest, AModelAppWithDefaults) {
  auto spec = BuildAppSpec(ModelApp(), {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, Json::parse(R"({
    "name": "support-bot", "model": "models@EU-WEST-LOCAL/qwen2.5-0.5b", "flavor": "ai1-1-cpu"
  })"));
}

TEST(BuildAppSpecTest, TaskForEmbeddingAndRerankerModels) {
  AppRunArgs args = ModelApp();
  args.task = "embed";
  auto spec = BuildAppSpec(args, {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["task"], "embed");
  args.task = "classify";
  EXPECT_NE(RunError(args).find("--task must be"), std::string::npos);
  EndpointAddArgs add;
  add.name = "rerank";
  add.model = "models@EU-WEST-LOCAL/qwen3-reranker";
  add.task = "rerank";
  auto body = BuildEndpointBody(add);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ((*body)["task"], "rerank");
}

TEST(BuildAppSpecTest, EveryFlagLandsInItsField) {
  AppRunArgs args = ModelApp();
  args.model = "models@EU-WEST-LOCAL/adapters/support";
  args.base_model = "models@EU-WEST-LOCAL/qwen2.5-0.5b";
  args.flavor = "h100-1-gpu";
  args.gpu_units = 2;
  args.scaling.auto_min_replicas = 0;
  args.scaling.auto_max_replicas = 4;
  args.scaling.auto_resource_type = "cpu";
  args.scaling.auto_threshold = "60.5";
  args.scaling.scale_up_window_s = 10;
  args.scaling.scale_down_window_s = 120;
  args.scaling.cooldown_s = 600;
  args.probe_path = "/ready";
  args.unsecure_http = true;
  args.labels = {"team=nlp"};
  args.env = {"LOG=debug", "HF_TOKEN"};
  auto spec = BuildAppSpec(args, {{"HF_TOKEN", "hf_local"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, Json::parse(R"({
    "name": "support-bot",
    "model": "models@EU-WEST-LOCAL/adapters/support",
    "base_model": "models@EU-WEST-LOCAL/qwen2.5-0.5b",
    "flavor": "h100-1-gpu", "units": 2,
    "autoscaling": {"min_replicas": 0, "max_replicas": 4, "resource_type": "CPU",
                    "threshold": 60.5, "scale_up_window_s": 10, "scale_down_window_s": 120,
                    "cooldown_s": 600},
    "probe_path": "/ready", "unsecure_http": true,
    "labels": {"team": "nlp"}, "env": {"LOG": "debug", "HF_TOKEN": "hf_local"}
  })"));
}

TEST(BuildAppSpecTest, AnImageAppWithCommandPortAndFixedReplicas) {
  AppRunArgs args;
  args.name = "web";
  args.image = "oci:images@EU-WEST-LOCAL/web.tar";
  args.command = {"python", "-m", "http.server"};
  args.port = 9000;
  args.cpu_units = 2;
  args.scaling.replicas = 3;
  auto spec = BuildAppSpec(args, {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, Json::parse(R"({
    "name": "web", "image": "oci:images@EU-WEST-LOCAL/web.tar",
    "command": ["python", "-m", "http.server"], "port": 9000,
    "flavor": "ai1-1-cpu", "units": 2, "replicas": 3
  })"));
  args.scaling.replicas = 0;  // a fixed count of zero is allowed (parked)
  EXPECT_TRUE(BuildAppSpec(args, {}).ok());
}

TEST(BuildAppSpecTest, NameRules) {
  for (const char* bad : {"", "Support", "1bot", "-bot", "bot_1", "bot.1",
                          "a123456789012345678901234567890123456789012345678901234567890123"}) {
    AppRunArgs args = ModelApp();
    args.name = bad;
    EXPECT_NE(RunError(args).find("--name"), std::string::npos) << bad;
  }
  AppRunArgs args = ModelApp();
  args.name = "a12345678901234567890123456789012345678901234567890123456789012";  // 63
  EXPECT_TRUE(BuildAppSpec(args, {}).ok());
  args.name = "";
  EXPECT_NE(RunError(args).find("missing --name"), std::string::npos);
}

TEST(BuildAppSpecTest, ModelOrImage) {
  AppRunArgs args = ModelApp();
  args.image = "sovai/shell";
  EXPECT_NE(RunError(args).find("--model excludes --image"), std::string::npos);
  args.model.clear();
  args.image.clear();
  EXPECT_NE(RunError(args).find("give --model"), std::string::npos);
  args = ModelApp();
  args.model.clear();
  args.image = "sovai/shell";
  args.base_model = "models@EU-WEST-LOCAL/base";
  EXPECT_NE(RunError(args).find("--base-model needs --model"), std::string::npos);
  args = ModelApp();
  args.port = 8080;
  EXPECT_NE(RunError(args).find("--port needs --image"), std::string::npos);
  args = ModelApp();
  args.command = {"sh"};
  EXPECT_NE(RunError(args).find("needs --image"), std::string::npos);
  args = ModelApp();
  args.model.clear();
  args.image = "sovai/shell";
  args.port = 70000;
  EXPECT_NE(RunError(args).find("--port must be 1 to 65535"), std::string::npos);
}

TEST(BuildAppSpecTest, ModelSourcesAreCheckedAsVolumeSources) {
  EXPECT_TRUE(CheckModelSource("models@EU-WEST-LOCAL/qwen", "--model").ok());
  EXPECT_TRUE(CheckModelSource("models@EU-WEST-LOCAL", "--model").ok());  // the whole bucket
  EXPECT_TRUE(CheckModelSource("models@EU-WEST-LOCAL/a/b/", "--model").ok());
  struct Case {
    const char* source;
    const char* says;
  };
  for (const Case& c :
       {Case{"models", "missing '@REGION'"}, Case{"Models@EU-WEST-LOCAL/x", "invalid bucket name"},
        Case{"models@/x", "missing region"}, Case{"models@EU-WEST-LOCAL/a/../b", "'..' segment"},
        Case{"models@EU-WEST-LOCAL/x:/mnt", "without ':'"},
        Case{"models@EU-WEST-LOCAL/x:ro", "without ':'"}}) {
    base::Status st = CheckModelSource(c.source, "--base-model");
    ASSERT_FALSE(st.ok()) << c.source;
    EXPECT_EQ(st.code(), base::StatusCode::kInvalidArgument);
    EXPECT_TRUE(st.message().starts_with(std::string("--base-model '") + c.source +
                                         "' must be bucket@REGION/prefix"))
        << st.message();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.message();
    // The volume parser's wording (mount paths) does not leak into a model's error.
    EXPECT_EQ(st.message().find("mount"), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find(std::string(c.source) + ":/m"), std::string::npos) << st.message();
  }
  AppRunArgs args = ModelApp();
  args.model = "nope";
  EXPECT_NE(RunError(args).find("--model 'nope'"), std::string::npos);
}

TEST(BuildAppSpecTest, FlavorUnitsEnvAndLabelsFollowJobRun) {
  AppRunArgs args = ModelApp();
  args.gpu_units = 1;
  EXPECT_NE(RunError(args).find("--gpu needs --flavor"), std::string::npos);
  args.flavor = "h100-1-gpu";
  args.cpu_units = 1;
  EXPECT_NE(RunError(args).find("exclude each other"), std::string::npos);
  args = ModelApp();
  args.cpu_units = 0;
  EXPECT_NE(RunError(args).find("--cpu is a number of flavor units"), std::string::npos);
  args = ModelApp();
  args.env = {"MISSING"};
  EXPECT_NE(RunError(args).find("MISSING is not set here"), std::string::npos);
  args.env = {"1X=2"};
  EXPECT_NE(RunError(args).find("--env"), std::string::npos);
  args = ModelApp();
  args.labels = {"team=nlp", "team=cv"};
  EXPECT_NE(RunError(args).find("--label team is given twice"), std::string::npos);
  args.labels = {"=x"};
  EXPECT_NE(RunError(args).find("KEY=VALUE"), std::string::npos);
  args = ModelApp();
  args.probe_path = "health";
  EXPECT_NE(RunError(args).find("--probe-path"), std::string::npos);
  args.probe_path = "/a b";
  EXPECT_NE(RunError(args).find("--probe-path"), std::string::npos);
}

TEST(BuildScalingTest, ReplicasExcludeAutoscaling) {
  ScalingArgs args;
  args.replicas = 2;
  args.auto_max_replicas = 4;
  Json body = Json::object();
  base::Status st = BuildScaling(args, body);
  EXPECT_NE(st.message().find("--replicas excludes the --auto-* flags"), std::string::npos);
  args.auto_max_replicas.reset();
  args.cooldown_s = 60;  // every --auto-* flag counts, not only min/max
  EXPECT_FALSE(BuildScaling(args, body).ok());
  args.cooldown_s.reset();
  args.replicas = -1;
  EXPECT_NE(BuildScaling(args, body).message().find("--replicas must be 0 or more"),
            std::string::npos);
}

TEST(BuildScalingTest, AutoFlagsNeedAMaximum) {
  for (auto set :
       std::vector<void (*)(ScalingArgs&)>{[](ScalingArgs& a) { a.auto_min_replicas = 0; },
                                           [](ScalingArgs& a) { a.auto_resource_type = "RAM"; },
                                           [](ScalingArgs& a) { a.auto_threshold = "3"; },
                                           [](ScalingArgs& a) { a.scale_up_window_s = 5; },
                                           [](ScalingArgs& a) { a.scale_down_window_s = 5; },
                                           [](ScalingArgs& a) { a.cooldown_s = 5; }}) {
    ScalingArgs args;
    set(args);
    Json body = Json::object();
    base::Status st = BuildScaling(args, body);
    EXPECT_NE(st.message().find("--auto-max-replicas is needed"), std::string::npos)
        << st.message();
  }
}

TEST(BuildScalingTest, PolicyBoundsAndValues) {
  auto error = [](ScalingArgs args) {
    Json body = Json::object();
    base::Status st = BuildScaling(args, body);
    EXPECT_FALSE(st.ok()) << body.dump();
    return st.message();
  };
  ScalingArgs args;
  args.auto_max_replicas = 0;
  EXPECT_NE(error(args).find("--auto-max-replicas must be 1 or more"), std::string::npos);
  args.auto_max_replicas = 2;
  args.auto_min_replicas = 3;
  EXPECT_NE(error(args).find("--auto-max-replicas 2 is below --auto-min-replicas 3"),
            std::string::npos);
  args.auto_min_replicas = -1;
  EXPECT_NE(error(args).find("--auto-min-replicas must be 0 or more"), std::string::npos);
  args.auto_min_replicas.reset();
  args.auto_resource_type = "GPU";
  EXPECT_NE(error(args).find("REQUESTS, CPU or RAM"), std::string::npos);
  args.auto_resource_type.clear();
  for (const char* bad : {"0", "-1", "abc", "4x", "nan", "inf", ""}) {
    if (std::string(bad).empty()) continue;  // "" means the default
    args.auto_threshold = bad;
    EXPECT_NE(error(args).find("--auto-resource-usage-threshold"), std::string::npos) << bad;
  }
  args.auto_threshold.clear();
  args.scale_down_window_s = -5;
  EXPECT_NE(error(args).find("--auto-scale-down-window-s must be 0 to"), std::string::npos);

  ScalingArgs good;
  good.auto_max_replicas = 3;
  Json body = Json::object();
  ASSERT_TRUE(BuildScaling(good, body).ok());
  EXPECT_EQ(body, Json::parse(R"({"autoscaling": {"max_replicas": 3}})"));
  Json untouched = Json::object();
  ASSERT_TRUE(BuildScaling(ScalingArgs{}, untouched).ok());
  EXPECT_EQ(untouched, Json::object());
}

TEST(BuildScaleBodyTest, NeedsOneScalingFlag) {
  EXPECT_NE(ErrorOf(BuildScaleBody(ScalingArgs{})).find("give --replicas N"), std::string::npos);
  ScalingArgs args;
  args.replicas = 0;
  auto body = BuildScaleBody(args);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, Json::parse(R"({"replicas": 0})"));
}

TEST(BuildAppPatchTest, OnlyTheGivenFields) {
  AppUpdateArgs args;
  args.model = "models@EU-WEST-LOCAL/v2";
  args.env = {"A=1"};
  args.unsecure_http = false;
  auto patch = BuildAppPatch(args, {});
  ASSERT_TRUE(patch.ok()) << patch.status();
  EXPECT_EQ(*patch, Json::parse(R"({"model": "models@EU-WEST-LOCAL/v2", "env": {"A": "1"},
                                    "unsecure_http": false})"));
  AppUpdateArgs image;
  image.image = "sovai/shell";
  image.command = {"serve", "--port", "$PORT"};
  image.labels = {"tier=gold"};
  image.probe_path = "/ok";
  patch = BuildAppPatch(image, {});
  ASSERT_TRUE(patch.ok()) << patch.status();
  EXPECT_EQ(*patch, Json::parse(R"({"image": "sovai/shell", "command": ["serve", "--port", "$PORT"],
                                    "labels": {"tier": "gold"}, "probe_path": "/ok"})"));
}

TEST(BuildAppPatchTest, Errors) {
  EXPECT_NE(ErrorOf(BuildAppPatch(AppUpdateArgs{}, {})).find("nothing to update"),
            std::string::npos);
  AppUpdateArgs args;
  args.model = "models@EU-WEST-LOCAL/v2";
  args.image = "sovai/shell";
  EXPECT_NE(ErrorOf(BuildAppPatch(args, {})).find("--model excludes --image"), std::string::npos);
  args.image.clear();
  args.base_model = "nope";
  EXPECT_NE(ErrorOf(BuildAppPatch(args, {})).find("--base-model 'nope'"), std::string::npos);
  AppUpdateArgs env;
  env.env = {"UNSET_HERE"};
  EXPECT_NE(ErrorOf(BuildAppPatch(env, {})).find("UNSET_HERE is not set here"), std::string::npos);
}

TEST(BuildEndpointBodyTest, EveryFlag) {
  EndpointAddArgs args;
  args.name = "qwen-small";
  args.model = "models@EU-WEST-LOCAL/qwen2.5-0.5b";
  args.flavor = "h100-1-gpu";
  args.gpu_units = 1;
  args.min_replicas = 0;
  args.max_replicas = 2;
  args.rate_limit = "400/min";
  auto body = BuildEndpointBody(args);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, Json::parse(R"({
    "name": "qwen-small", "model": "models@EU-WEST-LOCAL/qwen2.5-0.5b",
    "flavor": "h100-1-gpu", "units": 1, "min_replicas": 0, "max_replicas": 2,
    "rate_limit": "400/min"})"));
  EndpointAddArgs minimal;
  minimal.name = "m";
  minimal.model = "models@EU-WEST-LOCAL/m";
  body = BuildEndpointBody(minimal);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, Json::parse(R"({"name": "m", "model": "models@EU-WEST-LOCAL/m",
                                   "flavor": "ai1-1-cpu"})"));
}

TEST(BuildEndpointBodyTest, Errors) {
  EndpointAddArgs args;
  args.name = "m";
  EXPECT_NE(ErrorOf(BuildEndpointBody(args)).find("missing --model"), std::string::npos);
  args.model = "models@EU-WEST-LOCAL/m";
  for (const char* bad : {"400", "400/s", "0/min", "-1/min", "x/min", "/min", "400/minute"}) {
    args.rate_limit = bad;
    EXPECT_NE(ErrorOf(BuildEndpointBody(args)).find("--rate-limit must be N/min"),
              std::string::npos)
        << bad;
  }
  args.rate_limit.clear();
  args.min_replicas = 3;
  args.max_replicas = 1;
  EXPECT_NE(ErrorOf(BuildEndpointBody(args)).find("--max-replicas 1 is below --min-replicas 3"),
            std::string::npos);
  args.min_replicas = -1;
  EXPECT_NE(ErrorOf(BuildEndpointBody(args)).find("--min-replicas must be 0 or more"),
            std::string::npos);
  args.min_replicas.reset();
  args.max_replicas = 0;
  EXPECT_NE(ErrorOf(BuildEndpointBody(args)).find("--max-replicas must be 1 or more"),
            std::string::npos);
  args.max_replicas.reset();
  args.gpu_units = 1;
  EXPECT_NE(ErrorOf(BuildEndpointBody(args)).find("--gpu needs --flavor"), std::string::npos);
  args.gpu_units.reset();
  args.name = "Bad";
  EXPECT_NE(ErrorOf(BuildEndpointBody(args)).find("--name 'Bad'"), std::string::npos);
}

TEST(AppStatesTest, SettledStates) {
  for (const char* s : {"FAILED", "STOPPING", "STOPPED", "DELETING", "DELETED"}) {
    EXPECT_TRUE(IsAppSettledState(s)) << s;
  }
  for (const char* s : {"QUEUED", "INITIALIZING", "RUNNING", "SCALING", ""}) {
    EXPECT_FALSE(IsAppSettledState(s)) << s;
  }
}

}  // namespace
}  // namespace sovai::cli::client
