#include "control/job_spec.h"

#include <gtest/gtest.h>

namespace sovai::control {
namespace {

SpecContext Context() { return SpecContext{&FlavorCatalog::Default(), "EU-WEST-LOCAL"}; }

std::variant<JobSpec, SpecError> Parse(const char* json) {
  return ParseJobSpec(nlohmann::json::parse(json), Context());
}

TEST(JobSpecTest, TheBriefsCommandShape) {
  auto parsed = Parse(R"({
    "image": "sovai/shell", "command": ["sh", "-c", "wc -l /workspace/data/a.txt"],
    "flavor": "ai1-1-cpu", "units": 2,
    "volumes": ["my-bucket@EU-WEST-LOCAL/dataset:/workspace/data:ro",
                "my-bucket@eu-west-local/output:/workspace/output:rw"],
    "env": {"EPOCHS": "3"}, "labels": {"team": "nlp"}, "timeout_s": 600, "priority": 5,
    "restart": {"policy": "on-failure", "max_retries": 2}, "network": "none"})");
  ASSERT_TRUE(std::holds_alternative<JobSpec>(parsed)) << std::get<SpecError>(parsed).status;
  const JobSpec& spec = std::get<JobSpec>(parsed);
  EXPECT_EQ(spec.image, "sovai/shell");
  EXPECT_EQ(spec.command.size(), 3u);
  EXPECT_EQ(spec.units, 2);
  ASSERT_EQ(spec.volumes.size(), 2u);
  EXPECT_EQ(spec.volumes[0], "my-bucket@EU-WEST-LOCAL/dataset:/workspace/data:ro:no-cache");
  EXPECT_EQ(spec.env.at("EPOCHS"), "3");
  EXPECT_EQ(spec.labels.at("team"), "nlp");
  EXPECT_EQ(spec.timeout_s, 600);
  EXPECT_EQ(spec.priority, 5);
  EXPECT_EQ(spec.restart, RestartPolicy::kOnFailure);
  EXPECT_EQ(spec.max_retries, 2);
  EXPECT_EQ(spec.network, NetworkMode::kNone);
  // The JSON form parses back to the same spec.
  auto again = ParseJobSpec(JobSpecToJson(spec), Context());
  ASSERT_TRUE(std::holds_alternative<JobSpec>(again));
  EXPECT_EQ(JobSpecToJson(std::get<JobSpec>(again)), JobSpecToJson(spec));
}

TEST(JobSpecTest, EveryBadFieldIsNamed) {
  struct Case {
    const char* json;
    const char* field;
    const char* message;
    base::StatusCode code = base::StatusCode::kInvalidArgument;
  };
  const Case cases[] = {
      {R"([])", "(body)", "must be a JSON object"},
      {R"({"flavor": "ai1-1-cpu"})", "image", "is required"},
      {R"({"image": "sovai/shell", "command": ["x"]})", "flavor", "is required"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "nope"})", "flavor",
       "unknown flavor 'nope'", base::StatusCode::kNotFound},
      {R"({"image": "Ubuntu:22.04", "command": ["x"], "flavor": "ai1-1-cpu"})", "image",
       "unknown image 'Ubuntu:22.04'"},
      {R"({"image": "127.0.0.1:5000/trainer", "flavor": "ai1-1-cpu"})", "image",
       "must name <project>/<name> after the registry host"},
      {R"({"image": "alpha/trainer@sha256:abc", "flavor": "ai1-1-cpu"})", "image",
       "must be sha256:<64 lowercase hex>"},
      {R"({"image": "sovai/shell", "flavor": "ai1-1-cpu"})", "command", "is required"},
      {R"({"image": "sovai/shell", "command": "ls", "flavor": "ai1-1-cpu"})", "command",
       "must be an array"},
      {R"({"image": "sovai/shell", "command": ["ls", 3], "flavor": "ai1-1-cpu"})", "command[1]",
       "must be a string"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "h100-1-gpu", "units": 5})", "units",
       "1 to 4 units"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu", "units": 0})", "units",
       "must be in [1, 4096]"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu", "nodes": 0})", "nodes",
       "must be in [1, 256]"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu", "nodes": "2"})",
       "nodes", "must be an integer"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu",
           "tasks_per_node": 65})",
       "tasks_per_node", "must be in [0, 64]"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu",
           "volumes": ["bucket:/data"]})",
       "volumes[0]", "@"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu",
           "volumes": ["data@US-EAST-1/x:/data"]})",
       "volumes", "US-EAST-1"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu",
           "volumes": ["aaa@EU-WEST-LOCAL:/data", "bbb@EU-WEST-LOCAL:/data/raw"]})",
       "volumes", "/data"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu",
           "env": {"1BAD": "x"}})",
       "env.1BAD", "not a valid variable name"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu",
           "env": {"CUDA_VISIBLE_DEVICES": "0"}})",
       "env.CUDA_VISIBLE_DEVICES", "set by the platform"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu",
           "labels": {"team": "a b"}})",
       "labels.team", "may only hold"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu", "network": "bridge"})",
       "network", "\"none\" or \"host\""},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu", "timeout_s": "60"})",
       "timeout_s", "must be an integer"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu",
           "restart": {"policy": "always"}})",
       "restart.policy", "\"never\" or \"on-failure\""},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu",
           "restart": {"max_retries": 3}})",
       "restart.max_retries", "needs"},
      {R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu", "gpus": 1})", "gpus",
       "is not a job spec field"},
      {R"({"image": "oci:images", "flavor": "ai1-1-cpu"})", "image",
       "oci:bucket@REGION/path/to/image.tar"},
  };
  for (const Case& c : cases) {
    auto parsed = Parse(c.json);
    ASSERT_TRUE(std::holds_alternative<SpecError>(parsed)) << c.json;
    const SpecError& e = std::get<SpecError>(parsed);
    EXPECT_EQ(e.status.code(), c.code) << c.json << " -> " << e.status;
    bool found = false;
    for (const FieldError& f : e.fields) {
      if (f.field == c.field && f.message.find(c.message) != std::string::npos) found = true;
    }
    EXPECT_TRUE(found) << c.json << " should report " << c.field << ": " << c.message
                       << ", got: " << e.status;
  }
}

TEST(JobSpecTest, RegistryImagesInTheirThreeForms) {
  const std::string hex(64, 'a');
  for (const std::string& image :
       {std::string("127.0.0.1:5000/alpha/trainer:latest"), "alpha/trainer@sha256:" + hex,
        "127.0.0.1:5000/alpha/trainer@sha256:" + hex, std::string("trainer:v1"),
        std::string("alpha/trainer")}) {
    auto parsed =
        ParseJobSpec(nlohmann::json{{"image", image}, {"flavor", "ai1-1-cpu"}}, Context());
    ASSERT_TRUE(std::holds_alternative<JobSpec>(parsed)) << image;
    EXPECT_EQ(std::get<JobSpec>(parsed).image, image);
    EXPECT_TRUE(IsRegistryImage(image)) << image;
  }
  for (const char* other : {"sovai/shell", "sovai/finetune", "oci:b@EU-WEST-LOCAL/x.tar", ""}) {
    EXPECT_FALSE(IsRegistryImage(other)) << other;
  }
}

TEST(JobSpecTest, DistributedShapeRoundTrips) {
  auto parsed = Parse(R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu",
                          "nodes": 2, "tasks_per_node": 4})");
  ASSERT_TRUE(std::holds_alternative<JobSpec>(parsed));
  const JobSpec& spec = std::get<JobSpec>(parsed);
  EXPECT_EQ(spec.nodes, 2);
  EXPECT_EQ(spec.tasks_per_node, 4);
  nlohmann::json j = JobSpecToJson(spec);
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_EQ(j["tasks_per_node"], 4);
  // A one-node spec keeps its old shape.
  auto plain = Parse(R"({"image": "sovai/shell", "command": ["x"], "flavor": "ai1-1-cpu"})");
  ASSERT_TRUE(std::holds_alternative<JobSpec>(plain));
  EXPECT_EQ(std::get<JobSpec>(plain).nodes, 1);
  EXPECT_FALSE(JobSpecToJson(std::get<JobSpec>(plain)).contains("nodes"));
}

TEST(JobSpecTest, CollectsSeveralErrorsAtOnce) {
  auto parsed = Parse(R"({"image": 7, "flavor": ["x"], "units": "two"})");
  ASSERT_TRUE(std::holds_alternative<SpecError>(parsed));
  EXPECT_EQ(std::get<SpecError>(parsed).fields.size(), 3u) << std::get<SpecError>(parsed).status;
}

TEST(JobSpecTest, Labels) {
  EXPECT_TRUE(ValidateLabel("team", "nlp").ok());
  EXPECT_TRUE(ValidateLabel("sovai.dev/app", "").ok());
  EXPECT_FALSE(ValidateLabel("", "x").ok());
  EXPECT_FALSE(ValidateLabel("-team", "x").ok());
  EXPECT_FALSE(ValidateLabel(std::string(64, 'a'), "x").ok());
  EXPECT_FALSE(ValidateLabel("team", std::string(64, 'a')).ok());
  EXPECT_FALSE(ValidateLabel("team", "a=b").ok());
}

}  // namespace
}  // namespace sovai::control
