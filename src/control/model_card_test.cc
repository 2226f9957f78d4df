#include "control/model_card.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "base/crypto.h"
#include "base/json.h"

namespace sovai::control {
namespace {

using Json = nlohmann::json;

class ModelCardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-modelcard-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // Volume 0: the base model (ro); 1: the dataset (ro); 2: the output (rw).
    Write("base/config.json", R"({"_name_or_path": "sovai-tiny-llama",
                                  "architectures": ["LlamaForCausalLM"]})");
    Write("base/model.safetensors", "weights");
    Write("data/train.jsonl", "{\"messages\": []}\n");
    Write("data/extra/more.jsonl", "{}\n");
    Write("out/adapter/adapter_config.json", "{}");
    Write("out/adapter/adapter_model.safetensors", "lora");
    Write("out/checkpoints/step-4/state.json", "{}");
    Write("out/metrics.jsonl",
          "{\"step\":0,\"eval_loss\":3.5}\n{\"step\":10,\"loss\":2.0,\"tokens_seen\":640}\n"
          "{\"step\":20,\"loss\":1.25,\"tokens_seen\":1280}\n{\"step\":20,\"eval_loss\":1.5}\n");
    in_.job_id = "job_1";
    in_.project = "prj_1";
    in_.user = "usr_1";
    in_.region = "EU-WEST-LOCAL";
    in_.jurisdiction = "EU";
    in_.image = "sovai/finetune";
    in_.command = {"--model",
                   "/workspace/base",
                   "--data",
                   "/workspace/data",
                   "--output",
                   "/workspace/output",
                   "--method",
                   "lora",
                   "--rank",
                   "8",
                   "--learning-rate=1e-3",
                   "--merge"};
    in_.flavor = "h100-1-gpu";
    in_.units = 2;
    in_.gpu_model = "H100";
    in_.gpus = 2;
    in_.vcpus = 60;
    in_.running_seconds = 3600;
    exec::SyncManifest base_manifest;
    base_manifest.files = {{"config.json", 80, "etag-config", 0},
                           {"model.safetensors", 7, "etag-weights", 0}};
    exec::SyncManifest data_manifest;
    data_manifest.files = {{"extra/more.jsonl", 3, "etag-more", 0},
                           {"train.jsonl", 17, "etag-train", 0}};
    in_.volumes = {
        {"models@EU-WEST-LOCAL/tiny", "/workspace/base", false, dir_ + "/base", base_manifest},
        {"demo@EU-WEST-LOCAL/dataset", "/workspace/data", false, dir_ + "/data", data_manifest},
        {"demo@EU-WEST-LOCAL/output", "/workspace/output", true, dir_ + "/out", std::nullopt}};
  }
  void TearDown() override { env_.DeleteDirRecursive(dir_).IgnoreError(); }

  void Write(const std::string& rel, const std::string& data) {
    const std::string path = dir_ + "/" + rel;
    ASSERT_TRUE(env_.CreateDirs(path.substr(0, path.rfind('/'))).ok());
    ASSERT_TRUE(env_.WriteFileAtomically(path, data).ok());
  }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
  ModelCardInputs in_;
};

TEST_F(ModelCardTest, FindsTheAdapterAndSkipsCheckpoints) {
  std::vector<ModelOutput> outputs = FindModelOutputs(env_, in_);
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].volume, 2u);
  EXPECT_EQ(outputs[0].path, "adapter");
  EXPECT_EQ(outputs[0].kind, "peft-adapter");
  // Read-only volumes hold inputs: the base model there is not an output.
  in_.volumes[0].writable = true;
  EXPECT_EQ(FindModelOutputs(env_, in_).size(), 2u);
}

TEST_F(ModelCardTest, CardHoldsWhatTheJobActuallyUsed) {
  auto written = WriteModelCards(env_, in_);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_EQ(written->size(), 2u);
  auto text = env_.ReadFile(dir_ + "/out/model_card.json");
  ASSERT_TRUE(text.ok());
  Json card = Json::parse(*text);
  EXPECT_EQ(card["schema"], "sovai.model_card/1");
  EXPECT_EQ(card["outputs"][0]["location"], "demo@EU-WEST-LOCAL/output/adapter");
  EXPECT_EQ(card["outputs"][0]["kind"], "peft-adapter");
  // Base model: where it came from, its name, and the hash of its objects' identities.
  EXPECT_EQ(card["base_model"]["location"], "models@EU-WEST-LOCAL/tiny");
  EXPECT_EQ(card["base_model"]["name"], "sovai-tiny-llama");
  EXPECT_EQ(card["base_model"]["content_sha256"],
            base::HexEncode(base::Sha256("config.json\t80\tetag-config\n"
                                         "model.safetensors\t7\tetag-weights\n")));
  EXPECT_EQ(card["base_model"]["size_bytes"], 87);
  // Datasets: every object, with its key, ETag and the SHA-256 of the bytes the job read.
  ASSERT_EQ(card["datasets"].size(), 2u);
  EXPECT_EQ(card["datasets"][1]["key"], "dataset/train.jsonl");
  EXPECT_EQ(card["datasets"][1]["bucket"], "demo");
  EXPECT_EQ(card["datasets"][1]["etag"], "etag-train");
  EXPECT_EQ(card["datasets"][1]["sha256"], base::HexEncode(base::Sha256("{\"messages\": []}\n")));
  EXPECT_EQ(card["datasets"][0]["key"], "dataset/extra/more.jsonl");
  // Hyperparameters: the flags, not the paths.
  Json hp = card["training"]["hyperparameters"];
  EXPECT_EQ(hp["rank"], "8");
  EXPECT_EQ(hp["learning-rate"], "1e-3");
  EXPECT_EQ(hp["merge"], "true");
  EXPECT_FALSE(hp.contains("model"));
  EXPECT_FALSE(hp.contains("output"));
  // Metrics from metrics.jsonl: the last training loss, validation before and after.
  EXPECT_EQ(card["metrics"]["train_loss"], 1.25);
  EXPECT_EQ(card["metrics"]["validation_loss_before"], 3.5);
  EXPECT_EQ(card["metrics"]["validation_loss"], 1.5);
  EXPECT_EQ(card["metrics"]["tokens_seen"], 1280);
  // Compute: 2 H100 (700 W) + 60 vCPU (10 W) for an hour = 2 kWh.
  EXPECT_EQ(card["compute"]["device_minutes"], 120);
  EXPECT_EQ(card["compute"]["power_watts_assumed"], 2000);
  EXPECT_DOUBLE_EQ(card["compute"]["energy_kwh_estimate"].get<double>(), 2.0);
  EXPECT_EQ(card["region"], "EU-WEST-LOCAL");
  EXPECT_EQ(card["jurisdiction"], "EU");
  EXPECT_TRUE(card["intended_use"].is_null());

  auto md = env_.ReadFile(dir_ + "/out/MODEL_CARD.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("demo/dataset/train.jsonl"), std::string::npos);
  EXPECT_NE(md->find("## Intended use\n\n*To be completed by the author.*"), std::string::npos);
  EXPECT_NE(md->find("jurisdiction EU; the data and the outputs stayed in its buckets."),
            std::string::npos);
  EXPECT_EQ(card["datasets"][1]["region"], "EU-WEST-LOCAL");
}

TEST_F(ModelCardTest, NamesTheRegionOfEveryBucketItUsed) {
  // The dataset came from another region the project allows (docs/sovereignty.md).
  in_.volumes[1].source = "demo@EU-CENTRAL-2/dataset";
  in_.volumes[1].region = "EU-CENTRAL-2";
  in_.volumes[1].jurisdiction = "EU";
  ASSERT_TRUE(WriteModelCards(env_, in_).ok());
  auto text = env_.ReadFile(dir_ + "/out/model_card.json");
  ASSERT_TRUE(text.ok());
  Json card = Json::parse(*text);
  EXPECT_EQ(card["region"], "EU-WEST-LOCAL");
  EXPECT_EQ(card["datasets"][0]["region"], "EU-CENTRAL-2");
  EXPECT_EQ(card["base_model"]["region"], "EU-WEST-LOCAL");
  EXPECT_EQ(card["outputs"][0]["region"], "EU-WEST-LOCAL");
  EXPECT_EQ(card["data_regions"], Json::parse(R"([{"region": "EU-WEST-LOCAL", "jurisdiction": "EU",
                             "volumes": ["models@EU-WEST-LOCAL/tiny", "demo@EU-WEST-LOCAL/output"]},
                            {"region": "EU-CENTRAL-2", "jurisdiction": "EU",
                             "volumes": ["demo@EU-CENTRAL-2/dataset"]}])"));
  auto md = env_.ReadFile(dir_ + "/out/MODEL_CARD.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("The job mounted buckets of more than one region:\n\n* EU-WEST-LOCAL "
                     "(jurisdiction EU): `models@EU-WEST-LOCAL/tiny`, `demo@EU-WEST-LOCAL/output`\n"
                     "* EU-CENTRAL-2 (jurisdiction EU): `demo@EU-CENTRAL-2/dataset`\n"),
            std::string::npos)
      << *md;
  EXPECT_EQ(md->find("stayed in its buckets"), std::string::npos);
}

TEST_F(ModelCardTest, NoModelNoCard) {
  ASSERT_TRUE(env_.DeleteDirRecursive(dir_ + "/out/adapter").ok());
  auto written = WriteModelCards(env_, in_);
  ASSERT_TRUE(written.ok());
  EXPECT_TRUE(written->empty());
  EXPECT_FALSE(env_.FileExists(dir_ + "/out/model_card.json"));
}

// Regression: the Compute line said "(0 GPU , 1 vCPU)" for a CPU flavor and the energy
// "8.333333333333333e-05 kWh".
TEST_F(ModelCardTest, ComputeLineNamesOnlyTheDevicesUsedAndEnergyInSensibleUnits) {
  ASSERT_TRUE(WriteModelCards(env_, in_).ok());
  auto md = env_.ReadFile(dir_ + "/out/MODEL_CARD.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("* Flavor: h100-1-gpu × 2 (2 GPU H100, 60 vCPU)\n"), std::string::npos) << *md;
  EXPECT_NE(md->find("* Energy (estimate at 2000 W): 2.00 kWh\n"), std::string::npos) << *md;

  in_.flavor = "ai1-1-cpu";
  in_.units = 1;
  in_.gpu_model = "";
  in_.gpus = 0;
  in_.vcpus = 1;
  in_.running_seconds = 30;  // 10 W for 30 s: 0.083 Wh
  ASSERT_TRUE(WriteModelCards(env_, in_).ok());
  md = env_.ReadFile(dir_ + "/out/MODEL_CARD.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("* Flavor: ai1-1-cpu × 1 (1 vCPU)\n"), std::string::npos) << *md;
  EXPECT_NE(md->find("* Energy (estimate at 10 W): 0.083 Wh\n"), std::string::npos) << *md;
  EXPECT_EQ(md->find("e-0"), std::string::npos) << *md;

  EXPECT_EQ(FormatEnergy(0), "0 Wh");
  EXPECT_EQ(FormatEnergy(8.333333333333333e-05), "0.083 Wh");
  EXPECT_EQ(FormatEnergy(0.0833), "83.3 Wh");
  EXPECT_EQ(FormatEnergy(1234.5), "1234.50 kWh");
}

// Regression: adapter_config.json named the sandbox path /workspace/base as its base model, which
// loads nowhere else. It names the base model's own name, or its bucket location.
TEST_F(ModelCardTest, AnAdaptersBaseModelIsNamedSoThatItLoadsElsewhere) {
  Write("out/adapter/adapter_config.json",
        R"({"base_model_name_or_path": "/workspace/base", "peft_type": "LORA", "r": 8})");
  auto written = WriteModelCards(env_, in_);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->size(), 3u) << "the cards and the adapter's config";
  Json config = Json::parse(*env_.ReadFile(dir_ + "/out/adapter/adapter_config.json"));
  EXPECT_EQ(config["base_model_name_or_path"], "sovai-tiny-llama") << "config.json's name";
  EXPECT_EQ(config["peft_type"], "LORA") << "the rest is kept";
  EXPECT_EQ(config["r"], 8);
  Json card = Json::parse(*env_.ReadFile(dir_ + "/out/model_card.json"));
  EXPECT_EQ(card["outputs"][0]["base_model_name_or_path"], "sovai-tiny-llama");

  // A base model without a name (or whose name is a local path): its bucket location.
  Write("base/config.json", R"({"_name_or_path": "/home/me/llama"})");
  Write("out/adapter/adapter_config.json", R"({"base_model_name_or_path": "/workspace/base/"})");
  ASSERT_TRUE(WriteModelCards(env_, in_).ok());
  config = Json::parse(*env_.ReadFile(dir_ + "/out/adapter/adapter_config.json"));
  EXPECT_EQ(config["base_model_name_or_path"], "models@EU-WEST-LOCAL/tiny");

  // A name the author chose is theirs: left as it is.
  Write("out/adapter/adapter_config.json",
        R"({"base_model_name_or_path": "meta-llama/Llama-3.2-1B"})");
  written = WriteModelCards(env_, in_);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(written->size(), 2u);
  config = Json::parse(*env_.ReadFile(dir_ + "/out/adapter/adapter_config.json"));
  EXPECT_EQ(config["base_model_name_or_path"], "meta-llama/Llama-3.2-1B");
}

TEST_F(ModelCardTest, UnknownGpusGetAMidRangeEstimate) {
  EXPECT_EQ(GpuWatts("h100"), 700);
  EXPECT_EQ(GpuWatts("L4"), 72);
  EXPECT_EQ(GpuWatts("B200"), 300);
}

}  // namespace
}  // namespace sovai::control
