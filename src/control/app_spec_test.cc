#include "control/app_spec.h"

#include <gtest/gtest.h>

namespace sovai::control {
namespace {

using Json = nlohmann::json;

SpecContext Context() { return {&FlavorCatalog::Default(), "EU-WEST-LOCAL"}; }

AppSpec ParseOk(const Json& body) {
  auto parsed = ParseAppSpec(body, Context());
  if (auto* error = std::get_if<SpecError>(&parsed)) {
    ADD_FAILURE() << error->status;
    return {};
  }
  return std::get<AppSpec>(parsed);
}

std::vector<std::string> BadFields(const Json& body) {
  auto parsed = ParseAppSpec(body, Context());
  std::vector<std::string> fields;
  if (auto* error = std::get_if<SpecError>(&parsed)) {
    for (const FieldError& f : error->fields) fields.push_back(f.field);
  }
  return fields;
}

Json ModelApp() {
  return {{"name", "support-bot"},
          {"model", "demo@EU-WEST-LOCAL/output"},
          {"base_model", "demo@EU-WEST-LOCAL/base"},
          {"flavor", "ai1-1-cpu"}};
}

TEST(AppSpecTest, ModelAppGetsDefaults) {
  AppSpec spec = ParseOk(ModelApp());
  EXPECT_EQ(spec.name, "support-bot");
  EXPECT_EQ(spec.model, "demo@EU-WEST-LOCAL/output");
  EXPECT_EQ(spec.base_model, "demo@EU-WEST-LOCAL/base");
  EXPECT_EQ(spec.replicas, 1);
  EXPECT_FALSE(spec.autoscaling.has_value());
  EXPECT_EQ(spec.probe_path, "/health");
  EXPECT_FALSE(spec.unsecure_http);
}

TEST(AppSpecTest, AutoscalingDefaultsDependOnTheMetric) {
  Json body = ModelApp();
  body["autoscaling"] = {{"min_replicas", 0}, {"max_replicas", 3}};
  AppSpec spec = ParseOk(body);
  ASSERT_TRUE(spec.autoscaling.has_value());
  EXPECT_EQ(spec.autoscaling->metric, ScalingMetric::kRequests);
  EXPECT_EQ(spec.autoscaling->threshold, 4);
  EXPECT_EQ(spec.autoscaling->min_replicas, 0);
  EXPECT_EQ(spec.autoscaling->cooldown_s, 300);
  body["autoscaling"]["resource_type"] = "CPU";
  EXPECT_EQ(ParseOk(body).autoscaling->threshold, 75);
}

TEST(AppSpecTest, RoundTripsThroughJson) {
  Json body = ModelApp();
  body["autoscaling"] = {{"min_replicas", 0}, {"max_replicas", 3}, {"resource_type", "RAM"},
                         {"threshold", 60},   {"cooldown_s", 30},  {"scale_down_window_s", 5}};
  body["labels"] = {{"team", "support"}};
  body["env"] = {{"LOG_LEVEL", "debug"}};
  body["unsecure_http"] = true;
  AppSpec spec = ParseOk(body);
  EXPECT_EQ(ParseOk(AppSpecToJson(spec)), spec);
  Json image = {{"name", "web"},
                {"image", "oci:imgs@EU-WEST-LOCAL/web.tar"},
                {"command", {"serve", "--port", "$PORT"}},
                {"port", 8000},
                {"flavor", "ai1-1-cpu"},
                {"replicas", 2}};
  AppSpec image_spec = ParseOk(image);
  EXPECT_EQ(ParseOk(AppSpecToJson(image_spec)), image_spec);
}

TEST(AppSpecTest, EveryBadFieldIsNamed) {
  Json body = {{"name", "Bad_Name"},
               {"model", "no-region"},
               {"image", "sovai/serve"},
               {"flavor", "ai1-1-cpu"},
               {"replicas", 1000},
               {"probe_path", "health"},
               {"labels", {{"sovai.app", "x"}}},
               {"env", {{"PORT", "1"}}},
               {"colour", "blue"}};
  std::vector<std::string> fields = BadFields(body);
  for (const char* f : {"name", "model", "image", "replicas", "probe_path", "labels.sovai.app",
                        "env.PORT", "colour"}) {
    EXPECT_NE(std::find(fields.begin(), fields.end(), f), fields.end()) << f;
  }
}

TEST(AppSpecTest, ModelOrImageExactlyOnce) {
  Json neither = {{"name", "a"}, {"flavor", "ai1-1-cpu"}};
  EXPECT_EQ(BadFields(neither), std::vector<std::string>{"model"});
  Json base_alone = {{"name", "a"},
                     {"image", "sovai/shell"},
                     {"command", {"true"}},
                     {"base_model", "models@EU-WEST-LOCAL/x"},
                     {"flavor", "ai1-1-cpu"}};
  EXPECT_EQ(BadFields(base_alone), std::vector<std::string>{"base_model"});
  Json command_with_model = ModelApp();
  command_with_model["command"] = {"x"};
  EXPECT_EQ(BadFields(command_with_model), std::vector<std::string>{"command"});
}

// Embedding and reranker models: the task the engine serves the model for.
TEST(AppSpecTest, TaskGoesWithAModel) {
  Json rerank = ModelApp();
  rerank["task"] = "rerank";
  AppSpec spec = ParseOk(rerank);
  EXPECT_EQ(spec.task, "rerank");
  EXPECT_EQ(AppSpecToJson(spec)["task"], "rerank");
  EXPECT_FALSE(AppSpecToJson(ParseOk(ModelApp())).contains("task"));
  Json bad = ModelApp();
  bad["task"] = "classify";
  EXPECT_EQ(BadFields(bad), std::vector<std::string>{"task"});
  Json image = {{"name", "a"},
                {"image", "sovai/shell"},
                {"command", {"true"}},
                {"task", "embed"},
                {"flavor", "ai1-1-cpu"}};
  EXPECT_EQ(BadFields(image), std::vector<std::string>{"task"});
}

TEST(AppSpecTest, AutoscalingIsChecked) {
  Json body = ModelApp();
  body["autoscaling"] = {{"min_replicas", 4}, {"max_replicas", 2}, {"threshold", 0}};
  auto fields = BadFields(body);
  EXPECT_NE(std::find(fields.begin(), fields.end(), "autoscaling.min_replicas"), fields.end());
  EXPECT_NE(std::find(fields.begin(), fields.end(), "autoscaling.threshold"), fields.end());
  body["autoscaling"] = {{"min_replicas", 0}};
  EXPECT_EQ(BadFields(body), std::vector<std::string>{"autoscaling.max_replicas"});
  body["autoscaling"] = {{"max_replicas", 2}, {"resource_type", "GPU"}};
  EXPECT_EQ(BadFields(body), std::vector<std::string>{"autoscaling.resource_type"});
  body["autoscaling"] = {{"max_replicas", 2}, {"resource_type", "CPU"}, {"threshold", 150}};
  EXPECT_EQ(BadFields(body), std::vector<std::string>{"autoscaling.threshold"});
  body["autoscaling"] = {{"max_replicas", 2}};
  body["replicas"] = 2;
  EXPECT_EQ(BadFields(body), std::vector<std::string>{"replicas"});
}

TEST(AppSpecTest, UnknownFlavorIsNotFound) {
  Json body = ModelApp();
  body["flavor"] = "h999-1-gpu";
  auto parsed = ParseAppSpec(body, Context());
  ASSERT_TRUE(std::holds_alternative<SpecError>(parsed));
  EXPECT_EQ(std::get<SpecError>(parsed).status.code(), base::StatusCode::kNotFound);
}

TEST(AppSpecTest, PatchTellsWhetherReplicasMustBeReplaced) {
  AppSpec spec = ParseOk(ModelApp());
  bool rolling = true;
  auto labels_only = PatchAppSpec(spec, {{"labels", {{"team", "x"}}}}, Context(), &rolling);
  ASSERT_TRUE(std::holds_alternative<AppSpec>(labels_only));
  EXPECT_FALSE(rolling);
  EXPECT_EQ(std::get<AppSpec>(labels_only).labels.at("team"), "x");
  auto model = PatchAppSpec(spec, {{"model", "demo@EU-WEST-LOCAL/output-v2"}}, Context(), &rolling);
  ASSERT_TRUE(std::holds_alternative<AppSpec>(model));
  EXPECT_TRUE(rolling);
  EXPECT_EQ(std::get<AppSpec>(model).model, "demo@EU-WEST-LOCAL/output-v2");
  auto bad = PatchAppSpec(spec, {{"flavor", "ai1-1-cpu"}}, Context(), &rolling);
  ASSERT_TRUE(std::holds_alternative<SpecError>(bad));
  EXPECT_EQ(std::get<SpecError>(bad).fields.front().field, "flavor");
}

TEST(AppSpecTest, ScaleSwitchesBetweenFixedAndAutoscaled) {
  AppSpec spec = ParseOk(ModelApp());
  auto scaled = ScaleAppSpec(spec, {{"autoscaling", {{"max_replicas", 3}}}}, Context());
  ASSERT_TRUE(std::holds_alternative<AppSpec>(scaled));
  EXPECT_EQ(std::get<AppSpec>(scaled).autoscaling->max_replicas, 3);
  auto fixed = ScaleAppSpec(std::get<AppSpec>(scaled), {{"replicas", 0}}, Context());
  ASSERT_TRUE(std::holds_alternative<AppSpec>(fixed));
  EXPECT_FALSE(std::get<AppSpec>(fixed).autoscaling.has_value());
  EXPECT_EQ(std::get<AppSpec>(fixed).replicas, 0);
  EXPECT_TRUE(std::holds_alternative<SpecError>(ScaleAppSpec(spec, Json::object(), Context())));
}

}  // namespace
}  // namespace sovai::control
