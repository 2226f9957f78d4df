#include "exec/slurm_plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/crypto.h"

namespace sovai::exec {
namespace {

SlurmPlan SamplePlan() {
  SlurmPlan plan;
  plan.job_id = "job_01ABC";
  plan.log_s3 = {.endpoint = "http://10.0.0.1:9000",
                 .region = "eu-west-local",
                 .access_key = "AK",
                 .secret_key = "SK"};
  plan.log_bucket = "sovai-01abc";
  plan.log_prefix = "jobs/job_01ABC/agent/";
  SlurmPlanVolume volume;
  volume.spec = "data@EU-WEST-LOCAL/ds:/mnt/data:ro";
  volume.s3 = plan.log_s3;
  plan.volumes.push_back(volume);
  plan.argv = {"python3", "-c", "print('hi')"};
  plan.env = {{"A", "1"}, {"B", "two words"}};
  plan.extra_mounts = {{"/usr/local/bin/sovai-engine", "/opt/sovai/bin/sovai-engine"}};
  plan.network_none = true;
  plan.uid = 1000;
  plan.gid = 1001;
  plan.scratch_dir = "/scratch";
  plan.agent_binary = "/usr/local/bin/sovai";
  plan.master_port = 31234;
  return plan;
}

TEST(SlurmPlanTest, RoundTrips) {
  auto decoded = DecodeSlurmPlan(EncodeSlurmPlan(SamplePlan()));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const SlurmPlan want = SamplePlan();
  EXPECT_EQ(decoded->job_id, want.job_id);
  EXPECT_EQ(decoded->log_s3.secret_key, "SK");
  EXPECT_EQ(decoded->log_bucket, want.log_bucket);
  EXPECT_EQ(decoded->log_prefix, want.log_prefix);
  ASSERT_EQ(decoded->volumes.size(), 1u);
  EXPECT_EQ(decoded->volumes[0].spec, want.volumes[0].spec);
  EXPECT_EQ(decoded->volumes[0].s3.endpoint, "http://10.0.0.1:9000");
  EXPECT_EQ(decoded->argv, want.argv);
  EXPECT_EQ(decoded->env, want.env);
  ASSERT_EQ(decoded->extra_mounts.size(), 1u);
  EXPECT_EQ(decoded->extra_mounts[0].sandbox_path, "/opt/sovai/bin/sovai-engine");
  EXPECT_TRUE(decoded->network_none);
  EXPECT_EQ(decoded->uid, 1000u);
  EXPECT_EQ(decoded->gid, 1001u);
  EXPECT_EQ(decoded->scratch_dir, "/scratch");
  EXPECT_EQ(decoded->agent_binary, "/usr/local/bin/sovai");
  EXPECT_EQ(decoded->master_port, 31234);
}

// Re-encodes the sample with one field changed by `mutate`.
std::string Mutated(void (*mutate)(nlohmann::json&)) {
  auto text = base::Base64Decode(EncodeSlurmPlan(SamplePlan()));
  nlohmann::json j = nlohmann::json::parse(*text);
  mutate(j);
  return base::Base64Encode(j.dump());
}

TEST(SlurmPlanTest, RefusesMalformedPlansNamingTheField) {
  EXPECT_FALSE(DecodeSlurmPlan("not base64!").ok());
  EXPECT_FALSE(DecodeSlurmPlan(base::Base64Encode("[1,2]")).ok());
  EXPECT_FALSE(DecodeSlurmPlan(base::Base64Encode("{")).ok());
  struct Case {
    void (*mutate)(nlohmann::json&);
    const char* field;
  };
  const Case cases[] = {
      {[](nlohmann::json& j) { j.erase("job_id"); }, "job_id"},
      {[](nlohmann::json& j) { j["argv"] = nlohmann::json::array(); }, "argv"},
      {[](nlohmann::json& j) { j["argv"] = {1}; }, "argv[0]"},
      {[](nlohmann::json& j) { j["env"] = {{"A"}}; }, "env[0]"},
      {[](nlohmann::json& j) { j["volumes"][0].erase("s3"); }, "volumes[0].s3"},
      {[](nlohmann::json& j) { j["volumes"][0]["s3"]["region"] = 3; }, "volumes[0].s3.region"},
      {[](nlohmann::json& j) { j["uid"] = 0; }, "uid"},
      {[](nlohmann::json& j) { j["master_port"] = 70000; }, "master_port"},
      {[](nlohmann::json& j) { j["scratch_dir"] = "tmp"; }, "scratch_dir"},
      {[](nlohmann::json& j) { j["agent_binary"] = "sovai"; }, "agent_binary"},
      {[](nlohmann::json& j) { j["network_none"] = "yes"; }, "network_none"},
  };
  for (const Case& c : cases) {
    auto decoded = DecodeSlurmPlan(Mutated(c.mutate));
    ASSERT_FALSE(decoded.ok()) << c.field;
    EXPECT_NE(decoded.status().message().find(c.field), std::string::npos) << decoded.status();
  }
  EXPECT_FALSE(DecodeSlurmPlan(std::string(kMaxSlurmPlanBytes * 2, 'A')).ok());
}

TEST(AgentStatusTest, RoundTripsAndRefusesNonsense) {
  AgentStatus done;
  done.phase = AgentPhase::kDone;
  done.exit = base::ExitStatus{.exited = true, .code = 3};
  done.sync_failed = true;
  done.at_unix_micros = 42;
  done.node = "gpu03";
  auto back = AgentStatusFromJson(AgentStatusToJson(done));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->phase, AgentPhase::kDone);
  ASSERT_TRUE(back->exit.has_value());
  EXPECT_EQ(*back->exit, *done.exit);
  EXPECT_TRUE(back->sync_failed);
  EXPECT_EQ(back->at_unix_micros, 42);
  EXPECT_EQ(back->node, "gpu03");

  for (
      const char* bad :
      {"", "[]", R"({"phase":"flying","at_unix_micros":1})", R"({"at_unix_micros":1})",
       R"({"phase":"done","at_unix_micros":1,"exit":{"exited":true,"signaled":true,"code":0,"signal":0}})",
       R"({"phase":"done","at_unix_micros":1,"exit":{"exited":true,"signaled":false,"code":300,"signal":0}})"}) {
    EXPECT_FALSE(AgentStatusFromJson(bad).ok()) << bad;
  }
}

TEST(AgentLogChunkKeyTest, SortsInSequenceOrder) {
  EXPECT_EQ(AgentLogChunkKey("jobs/j/agent/", 1), "jobs/j/agent/log-00000001");
  EXPECT_LT(AgentLogChunkKey("p/", 9), AgentLogChunkKey("p/", 10));
}

}  // namespace
}  // namespace sovai::exec
