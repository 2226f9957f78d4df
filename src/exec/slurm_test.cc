#include "exec/slurm.h"

#include <gtest/gtest.h>

#include <csignal>

namespace sovai::exec {
namespace {

SlurmBatch GpuBatch() {
  SlurmBatch b;
  b.job_name = "sovai-job_01ABC";
  b.partition = "gpu";
  b.account = "ml-team";
  b.nodes = 2;
  b.tasks_per_node = 4;
  b.cpus_per_task = 8;
  b.gpus_per_node = 4;
  b.gres_type = "h100";
  b.memory_mb_per_node = 512000;
  b.time_minutes = 90;
  b.output_path = "/scratch/sovai-%j.out";
  b.env = {{"SOVAI_SLURM_PLAN", "eyJhIjoxfQ=="}, {"QUOTED", "it's $HOME `x`"}};
  b.agent_argv = {"/usr/local/bin/sovai", "slurm-agent", "run"};
  return b;
}

TEST(BuildBatchScriptTest, WritesEveryDirectiveAndQuotesTheEnvironment) {
  auto script = BuildBatchScript(GpuBatch());
  ASSERT_TRUE(script.ok()) << script.status();
  EXPECT_EQ(*script,
            "#!/bin/bash\n"
            "#SBATCH --job-name=sovai-job_01ABC\n"
            "#SBATCH --partition=gpu\n"
            "#SBATCH --account=ml-team\n"
            "#SBATCH --nodes=2\n"
            "#SBATCH --ntasks-per-node=4\n"
            "#SBATCH --cpus-per-task=8\n"
            "#SBATCH --gres=gpu:h100:4\n"
            "#SBATCH --mem=512000\n"
            "#SBATCH --time=90\n"
            "#SBATCH --output=/scratch/sovai-%j.out\n"
            "#SBATCH --no-requeue\n"
            "set -e\n"
            "export SOVAI_SLURM_PLAN='eyJhIjoxfQ=='\n"
            "export QUOTED='it'\\''s $HOME `x`'\n"
            "exec '/usr/local/bin/sovai' 'slurm-agent' 'run'\n");
}

TEST(BuildBatchScriptTest, OmitsWhatIsNotAsked) {
  SlurmBatch b = GpuBatch();
  b.partition = "";
  b.account = "";
  b.gpus_per_node = 0;
  b.memory_mb_per_node = 0;
  b.time_minutes = 0;
  b.env.clear();
  auto script = BuildBatchScript(b);
  ASSERT_TRUE(script.ok()) << script.status();
  EXPECT_EQ(script->find("--partition"), std::string::npos);
  EXPECT_EQ(script->find("--account"), std::string::npos);
  EXPECT_EQ(script->find("--gres"), std::string::npos);
  EXPECT_EQ(script->find("--mem"), std::string::npos);
  EXPECT_EQ(script->find("--time"), std::string::npos);
  EXPECT_NE(script->find("--nodes=2"), std::string::npos);
}

TEST(BuildBatchScriptTest, AnyGpuTypeWhenNoneIsNamed) {
  SlurmBatch b = GpuBatch();
  b.gres_type = "";
  auto script = BuildBatchScript(b);
  ASSERT_TRUE(script.ok());
  EXPECT_NE(script->find("#SBATCH --gres=gpu:4\n"), std::string::npos);
}

TEST(BuildBatchScriptTest, RefusesValuesThatWouldBreakTheScript) {
  struct Case {
    const char* what;
    void (*mutate)(SlurmBatch&);
    const char* field;
  };
  const Case cases[] = {
      {"newline in the name", [](SlurmBatch& b) { b.job_name = "x\n#SBATCH --x"; }, "job_name"},
      {"space in the partition", [](SlurmBatch& b) { b.partition = "gpu debug"; }, "partition"},
      {"quote in the account", [](SlurmBatch& b) { b.account = "a'b"; }, "account"},
      {"no output", [](SlurmBatch& b) { b.output_path = ""; }, "output_path"},
      {"zero nodes", [](SlurmBatch& b) { b.nodes = 0; }, "nodes"},
      {"zero tasks", [](SlurmBatch& b) { b.tasks_per_node = 0; }, "tasks_per_node"},
      {"zero cpus", [](SlurmBatch& b) { b.cpus_per_task = 0; }, "cpus_per_task"},
      {"negative time", [](SlurmBatch& b) { b.time_minutes = -1; }, "time_minutes"},
      {"bad env name",
       [](SlurmBatch& b) {
         b.env = {{"A B", "x"}};
       },
       "A B"},
      {"env name with =",
       [](SlurmBatch& b) {
         b.env = {{"A=B", "x"}};
       },
       "A=B"},
      {"NUL in a value",
       [](SlurmBatch& b) {
         b.env = {{"A", std::string("x\0y", 3)}};
       },
       "NUL"},
      {"relative agent", [](SlurmBatch& b) { b.agent_argv = {"sovai"}; }, "agent_argv"},
      {"no agent", [](SlurmBatch& b) { b.agent_argv.clear(); }, "agent_argv"},
  };
  for (const Case& c : cases) {
    SlurmBatch b = GpuBatch();
    c.mutate(b);
    auto script = BuildBatchScript(b);
    ASSERT_FALSE(script.ok()) << c.what;
    EXPECT_EQ(script.status().code(), base::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(script.status().message().find(c.field), std::string::npos)
        << c.what << ": " << script.status();
  }
}

TEST(SlurmPhaseTest, MapsSlurmStates) {
  EXPECT_EQ(SlurmPhaseOf("PENDING"), SlurmPhase::kPending);
  EXPECT_EQ(SlurmPhaseOf("RUNNING"), SlurmPhase::kRunning);
  EXPECT_EQ(SlurmPhaseOf("COMPLETING"), SlurmPhase::kRunning);
  EXPECT_EQ(SlurmPhaseOf("COMPLETED"), SlurmPhase::kCompleted);
  EXPECT_EQ(SlurmPhaseOf("FAILED"), SlurmPhase::kFailed);
  EXPECT_EQ(SlurmPhaseOf("CANCELLED by 1000"), SlurmPhase::kCancelled);
  EXPECT_EQ(SlurmPhaseOf("TIMEOUT"), SlurmPhase::kTimeout);
  EXPECT_EQ(SlurmPhaseOf("NODE_FAIL"), SlurmPhase::kNodeFail);
  EXPECT_EQ(SlurmPhaseOf("OUT_OF_MEMORY"), SlurmPhase::kOutOfMemory);
  EXPECT_EQ(SlurmPhaseOf("PREEMPTED"), SlurmPhase::kPreempted);
  EXPECT_EQ(SlurmPhaseOf("SOMETHING_NEW"), SlurmPhase::kUnknown);
  EXPECT_FALSE(IsFinal(SlurmPhase::kPending));
  EXPECT_FALSE(IsFinal(SlurmPhase::kRunning));
  EXPECT_FALSE(IsFinal(SlurmPhase::kUnknown));
  EXPECT_TRUE(IsFinal(SlurmPhase::kCompleted));
  EXPECT_TRUE(IsFinal(SlurmPhase::kNodeFail));
}

TEST(ParseSbatchJobIdTest, ReadsPlainAndClusterForms) {
  EXPECT_EQ(*ParseSbatchJobId("123\n"), "123");
  EXPECT_EQ(*ParseSbatchJobId("4567;cluster-a\n"), "4567");
  for (const char* bad :
       {"", "\n", "Submitted batch job 12", "12a", "-3", ";x", "123456789012345678901234"}) {
    EXPECT_FALSE(ParseSbatchJobId(bad).ok()) << bad;
  }
}

TEST(ParseSqueueLineTest, ReadsTheFourFields) {
  auto info = ParseSqueueLine("42|PENDING|Resources|\n");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->id, "42");
  EXPECT_EQ(info->phase, SlurmPhase::kPending);
  EXPECT_EQ(info->reason, "Resources");
  EXPECT_EQ(info->nodes, "");
  EXPECT_FALSE(info->exit.has_value());
  auto running = ParseSqueueLine("43|RUNNING|None|gpu[01-02]");
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->nodes, "gpu[01-02]");
  for (const char* bad : {"", "42", "42|RUNNING", "|RUNNING|None|x", "42||None|x", "1|2|3|4|5"}) {
    EXPECT_FALSE(ParseSqueueLine(bad).ok()) << bad;
  }
}

TEST(ParseScontrolJobTest, ReadsStateReasonNodesAndExitCode) {
  const char* text =
      "JobId=7 JobName=sovai-job_1 UserId=root(0) GroupId=root(0) Priority=1 "
      "JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=0 Restarts=0 "
      "BatchFlag=1 ExitCode=3:0 RunTime=00:00:01 NodeList=vm BatchHost=vm "
      "Command=/tmp/with space/x.sh\n";
  auto info = ParseScontrolJob(text);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->id, "7");
  EXPECT_EQ(info->state, "FAILED");
  EXPECT_EQ(info->phase, SlurmPhase::kFailed);
  EXPECT_EQ(info->reason, "NonZeroExitCode");
  EXPECT_EQ(info->nodes, "vm");
  ASSERT_TRUE(info->exit.has_value());
  EXPECT_TRUE(info->exit->exited);
  EXPECT_EQ(info->exit->code, 3);

  auto killed = ParseScontrolJob("JobId=8 JobState=CANCELLED Reason=None ExitCode=0:15");
  ASSERT_TRUE(killed.ok()) << killed.status();
  ASSERT_TRUE(killed->exit.has_value());
  EXPECT_TRUE(killed->exit->signaled);
  EXPECT_EQ(killed->exit->signal, SIGTERM);

  auto pending = ParseScontrolJob(
      "JobId=9 JobState=PENDING Reason=Resources NodeList=(null) "
      "ExitCode=0:0");
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(pending->nodes, "");
  EXPECT_FALSE(pending->exit.has_value());  // only a final job has an exit code
}

TEST(ParseScontrolJobTest, RefusesMalformedAnswers) {
  for (const char* bad :
       {"", "slurm_load_jobs error: Invalid job id specified", "JobId=1 Reason=None",
        "JobState=RUNNING", "JobId=1 JobState=FAILED ExitCode=3",
        "JobId=1 JobState=FAILED ExitCode=x:0", "JobId=1 JobState=FAILED ExitCode=999:0"}) {
    EXPECT_FALSE(ParseScontrolJob(bad).ok()) << bad;
  }
}

TEST(ParseSacctLineTest, ReadsTheBatchLine) {
  auto info = ParseSacctLine("12|CANCELLED by 0|0:15|None");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, "CANCELLED");
  EXPECT_EQ(info->phase, SlurmPhase::kCancelled);
  ASSERT_TRUE(info->exit.has_value());
  EXPECT_EQ(info->exit->signal, 15);
  EXPECT_FALSE(ParseSacctLine("12|COMPLETED").ok());
  EXPECT_FALSE(ParseSacctLine("12|COMPLETED|zero|None").ok());
}

TEST(FirstHostOfTest, ExpandsTheFirstEntry) {
  EXPECT_EQ(*FirstHostOf("vm"), "vm");
  EXPECT_EQ(*FirstHostOf("cpu01,cpu02"), "cpu01");
  EXPECT_EQ(*FirstHostOf("gpu[03-05,09],cpu01"), "gpu03");
  EXPECT_EQ(*FirstHostOf("gpu[007,9]"), "gpu007");
  EXPECT_EQ(*FirstHostOf("rack[1-2]-n"), "rack1-n");
  for (const char* bad : {"", "[1-2]", "gpu[", "gpu[]", "gpu[a-b]", ",x"}) {
    EXPECT_FALSE(FirstHostOf(bad).ok()) << bad;
  }
}

TEST(DistributedEnvTest, MapsSlurmTasksToTorchVariables) {
  std::map<std::string, std::string> slurm = {{"SLURM_PROCID", "5"},
                                              {"SLURM_LOCALID", "1"},
                                              {"SLURM_NTASKS", "8"},
                                              {"SLURM_NODEID", "1"},
                                              {"SLURM_TASKS_PER_NODE", "4(x2)"}};
  auto env = DistributedEnv(slurm, "gpu03", 29500);
  ASSERT_TRUE(env.ok()) << env.status();
  std::map<std::string, std::string> got(env->begin(), env->end());
  EXPECT_EQ(got["RANK"], "5");
  EXPECT_EQ(got["LOCAL_RANK"], "1");
  EXPECT_EQ(got["WORLD_SIZE"], "8");
  EXPECT_EQ(got["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(got["NODE_RANK"], "1");
  EXPECT_EQ(got["MASTER_ADDR"], "gpu03");
  EXPECT_EQ(got["MASTER_PORT"], "29500");
}

TEST(DistributedEnvTest, NamesWhatIsMissingOrWrong) {
  std::map<std::string, std::string> slurm = {
      {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODEID", "0"}};
  EXPECT_TRUE(DistributedEnv(slurm, "h", 1).ok());
  for (const char* name : {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NODEID"}) {
    auto missing = slurm;
    missing.erase(name);
    auto env = DistributedEnv(missing, "h", 1);
    ASSERT_FALSE(env.ok());
    EXPECT_NE(env.status().message().find(name), std::string::npos) << env.status();
    auto garbled = slurm;
    garbled[name] = "x";
    EXPECT_FALSE(DistributedEnv(garbled, "h", 1).ok()) << name;
  }
  auto beyond = slurm;
  beyond["SLURM_PROCID"] = "2";
  EXPECT_FALSE(DistributedEnv(beyond, "h", 1).ok());
  EXPECT_FALSE(DistributedEnv(slurm, "", 1).ok());
}

TEST(ParseSlurmConfigTest, ReadsEverySetting) {
  auto config = ParseSlurmConfig(R"({
    "bin_dir": "/opt/slurm/bin", "slurm_conf": "/etc/slurm/cluster.conf",
    "partition": "batch", "account": "ml",
    "flavors": {"h100-1-gpu": {"partition": "gpu", "gres": "h100"}},
    "agent_binary": "/usr/local/bin/sovai", "engine_binary": "/usr/local/bin/sovai-engine",
    "scratch_dir": "/scratch", "s3_endpoint": "http://head:9000",
    "staging_minutes": 10, "poll_ms": 500})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->client.bin_dir, "/opt/slurm/bin");
  EXPECT_EQ(config->client.slurm_conf, "/etc/slurm/cluster.conf");
  EXPECT_EQ(config->partition, "batch");
  EXPECT_EQ(config->account, "ml");
  ASSERT_EQ(config->flavors.size(), 1u);
  EXPECT_EQ(config->flavors.at("h100-1-gpu").first, "gpu");
  EXPECT_EQ(config->flavors.at("h100-1-gpu").second, "h100");
  EXPECT_EQ(config->agent_binary, "/usr/local/bin/sovai");
  EXPECT_EQ(config->engine_binary, "/usr/local/bin/sovai-engine");
  EXPECT_EQ(config->scratch_dir, "/scratch");
  EXPECT_EQ(config->s3_endpoint, "http://head:9000");
  EXPECT_EQ(config->staging_minutes, 10);
  EXPECT_EQ(config->poll_ms, 500);

  auto defaults = ParseSlurmConfig("{}");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->scratch_dir, "/tmp");
  EXPECT_EQ(defaults->staging_minutes, 30);
}

TEST(ParseSlurmConfigTest, NamesTheBadSetting) {
  const std::pair<const char*, const char*> cases[] = {
      {"[]", "not a JSON object"},
      {"{", "not a JSON object"},
      {R"({"partitoin": "gpu"})", "partitoin is not a setting"},
      {R"({"partition": 3})", "partition must be a string"},
      {R"({"partition": "gpu debug"})", "partition"},
      {R"({"scratch_dir": "scratch"})", "scratch_dir must be an absolute path"},
      {R"({"bin_dir": "bin"})", "bin_dir must be an absolute path"},
      {R"({"s3_endpoint": "ftp://x"})", "s3_endpoint must be an http(s):// URL"},
      {R"({"staging_minutes": -1})", "staging_minutes must be an integer"},
      {R"({"poll_ms": 1})", "poll_ms must be an integer"},
      {R"({"flavors": []})", "flavors must be an object"},
      {R"({"flavors": {"x": {"gres": "a b"}}})", "flavors.x.gres"},
      {R"({"flavors": {"x": {"nodes": 2}}})", "flavors.x.nodes is not a setting"},
  };
  for (const auto& [json, want] : cases) {
    auto config = ParseSlurmConfig(json);
    ASSERT_FALSE(config.ok()) << json;
    EXPECT_NE(config.status().message().find(want), std::string::npos)
        << json << ": " << config.status();
  }
}

}  // namespace
}  // namespace sovai::exec
