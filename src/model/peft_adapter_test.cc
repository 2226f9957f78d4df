#include "model/peft_adapter.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <fstream>

#include "base/env.h"
#include "model/formats_test_util.h"
#include "model/safetensors.h"

namespace sovai::model {
namespace {

using testing::ExpectError;
using testing::TempDir;

using base::StatusCode;
using nlohmann::json;

// As PEFT 0.11 writes it for a Llama 3 LoRA.
constexpr const char* kPeftConfig = R"({
  "alpha_pattern": {},
  "auto_mapping": null,
  "base_model_name_or_path": "meta-llama/Meta-Llama-3-8B",
  "bias": "none",
  "fan_in_fan_out": false,
  "inference_mode": true,
  "init_lora_weights": true,
  "layer_replication": null,
  "layers_pattern": null,
  "layers_to_transform": null,
  "loftq_config": {},
  "lora_alpha": 16,
  "lora_dropout": 0.05,
  "megatron_config": null,
  "megatron_core": "megatron.core",
  "modules_to_save": null,
  "peft_type": "LORA",
  "r": 8,
  "rank_pattern": {},
  "revision": null,
  "target_modules": ["v_proj", "q_proj"],
  "task_type": "CAUSAL_LM",
  "use_dora": false,
  "use_rslora": false
})";

std::string With(std::string_view text, const std::string& key, const std::string& value) {
  json j = json::parse(text);
  if (value.empty()) {
    j.erase(key);
  } else {
    j[key] = json::parse(value);
  }
  return j.dump();
}

base::Status ParseStatus(const std::string& text) {
  return ParseLoraConfig(text, "a/adapter_config.json").status();
}

TEST(LoraConfigTest, ParsesWhatPeftWrites) {
  auto c = ParseLoraConfig(kPeftConfig);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->r, 8);
  EXPECT_DOUBLE_EQ(c->lora_alpha, 16);
  EXPECT_DOUBLE_EQ(c->lora_dropout, 0.05);
  EXPECT_DOUBLE_EQ(c->Scale(), 2.0);
  EXPECT_EQ(c->target_modules, (std::vector<LoraModule>{LoraModule::kQ, LoraModule::kV}));
  EXPECT_TRUE(c->Targets(LoraModule::kV));
  EXPECT_FALSE(c->Targets(LoraModule::kK));
  EXPECT_TRUE(c->CoversLayer(31));
  EXPECT_EQ(c->base_model_name_or_path, "meta-llama/Meta-Llama-3-8B");
  EXPECT_FALSE(c->use_rslora);
  EXPECT_EQ(c->extra["megatron_core"], "megatron.core");
  EXPECT_EQ(c->extra["use_dora"], false);

  // Written back: every key of the source with its value (target_modules in canonical order).
  json out = json::parse(*LoraConfigToJson(*c));
  json source = json::parse(kPeftConfig);
  for (const auto& [key, value] : source.items()) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(out.contains(key));
    if (key == "target_modules") {
      EXPECT_EQ(out[key], (json{"q_proj", "v_proj"}));
    } else {
      EXPECT_EQ(out[key], value);
    }
  }
  EXPECT_EQ(out.size(), source.size());
}

TEST(LoraConfigTest, ScaleFollowsRsLora) {
  auto plain = ParseLoraConfig(With(With(kPeftConfig, "r", "16"), "lora_alpha", "32"));
  EXPECT_DOUBLE_EQ(plain->Scale(), 2.0);  // 32 / 16
  auto rs = ParseLoraConfig(
      With(With(With(kPeftConfig, "r", "16"), "lora_alpha", "32"), "use_rslora", "true"));
  EXPECT_DOUBLE_EQ(rs->Scale(), 8.0);  // 32 / sqrt(16)
  auto fractional = ParseLoraConfig(With(kPeftConfig, "lora_alpha", "12.5"));
  EXPECT_DOUBLE_EQ(fractional->Scale(), 12.5 / 8);
  EXPECT_EQ(json::parse(*LoraConfigToJson(*fractional))["lora_alpha"], 12.5);
}

TEST(LoraConfigTest, TargetModuleForms) {
  auto all = ParseLoraConfig(With(kPeftConfig, "target_modules", "\"all-linear\""));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->target_modules.size(), 7u);
  // null: PEFT's default for Llama-family models.
  auto fallback = ParseLoraConfig(With(kPeftConfig, "target_modules", "null"));
  EXPECT_EQ(fallback->target_modules, (std::vector<LoraModule>{LoraModule::kQ, LoraModule::kV}));
  auto dup = ParseLoraConfig(
      With(kPeftConfig, "target_modules", R"(["down_proj", "q_proj", "down_proj"])"));
  EXPECT_EQ(dup->target_modules, (std::vector<LoraModule>{LoraModule::kQ, LoraModule::kDown}));
  auto one = ParseLoraConfig(With(kPeftConfig, "layers_to_transform", "3"));
  EXPECT_EQ(one->layers_to_transform, std::vector<int64_t>{3});
  EXPECT_FALSE(one->CoversLayer(2));
  EXPECT_TRUE(one->CoversLayer(3));
  auto list = ParseLoraConfig(With(kPeftConfig, "layers_to_transform", "[5, 1, 5]"));
  EXPECT_EQ(list->layers_to_transform, (std::vector<int64_t>{1, 5}));
}

TEST(LoraConfigTest, RefusesWhatItDoesNotSupportByName) {
  struct Case {
    std::string key, value;
    StatusCode code;
    std::vector<std::string_view> parts;
  };
  std::vector<Case> cases = {
      {"target_modules",
       R"(".*\\.(q|v)_proj")",
       StatusCode::kUnimplemented,
       {"regular expression", "not supported", "all-linear"}},
      {"target_modules",
       R"(["q_proj", "lm_head"])",
       StatusCode::kUnimplemented,
       {"target module \"lm_head\" is not supported", "q_proj, k_proj"}},
      {"target_modules", "[]", StatusCode::kInvalidArgument, {"target_modules is empty"}},
      {"target_modules", "5", StatusCode::kInvalidArgument, {"target_modules must be a list"}},
      {"peft_type", R"("IA3")", StatusCode::kUnimplemented, {"peft_type 'IA3'", "LORA"}},
      {"peft_type", "", StatusCode::kInvalidArgument, {"missing required field 'peft_type'"}},
      {"task_type", R"("SEQ_CLS")", StatusCode::kUnimplemented, {"task_type 'SEQ_CLS'"}},
      {"use_dora", "true", StatusCode::kUnimplemented, {"DoRA"}},
      {"bias", R"("lora_only")", StatusCode::kUnimplemented, {"bias 'lora_only'"}},
      {"fan_in_fan_out", "true", StatusCode::kUnimplemented, {"fan_in_fan_out"}},
      {"rank_pattern", R"({"q_proj": 4})", StatusCode::kUnimplemented, {"rank_pattern"}},
      {"alpha_pattern", R"({"q_proj": 4})", StatusCode::kUnimplemented, {"alpha_pattern"}},
      {"modules_to_save", R"(["lm_head"])", StatusCode::kUnimplemented, {"modules_to_save"}},
      {"layer_replication", "[[0, 4]]", StatusCode::kUnimplemented, {"layer_replication"}},
      {"r", "0", StatusCode::kInvalidArgument, {"r (0) must be between 1 and 4096"}},
      {"r", "5000", StatusCode::kInvalidArgument, {"r (5000)"}},
      {"r", "8.5", StatusCode::kInvalidArgument, {"field 'r' must be an integer"}},
      {"lora_alpha", "-1", StatusCode::kInvalidArgument, {"lora_alpha must be a positive"}},
      {"lora_dropout", "1.0", StatusCode::kInvalidArgument, {"lora_dropout must be in [0, 1)"}},
      {"layers_to_transform", "[-1]", StatusCode::kInvalidArgument, {"non-negative integers"}},
      {"layers_to_transform", "[1, \"2\"]", StatusCode::kInvalidArgument, {"non-negative"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key + " = " + c.value);
    ExpectError(ParseStatus(With(kPeftConfig, c.key, c.value)), c.code, c.parts);
  }
  ExpectError(
      ParseStatus(With(With(kPeftConfig, "layers_to_transform", "[1]"), "layers_pattern", "\"h\"")),
      StatusCode::kUnimplemented, {"layers_pattern \"h\""});
  EXPECT_TRUE(ParseStatus(With(With(kPeftConfig, "layers_to_transform", "[1]"), "layers_pattern",
                               "\"layers\""))
                  .ok());
  ExpectError(ParseStatus("[1]"), StatusCode::kInvalidArgument,
              {"a/adapter_config.json", "not a JSON object"});
  ExpectError(ParseStatus("{"), StatusCode::kInvalidArgument, {"invalid JSON"});
}

// A 2-layer Llama of hidden size 64: q (64, 64), k/v (32, 64), o (64, 64), gate/up (128, 64),
// down (64, 128) as (out, in).
ModelConfig Base() {
  ModelConfig c;
  c.architecture = Architecture::kLlama;
  c.vocab_size = 100;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 128;
  SOVAI_CHECK(ValidateModelConfig(c).ok());
  return c;
}

LoraAdapter MakeAdapter(const ModelConfig& base, std::vector<LoraModule> targets, int64_t r) {
  LoraAdapter adapter;
  adapter.config.r = r;
  adapter.config.lora_alpha = 2.0 * static_cast<double>(r);
  adapter.config.target_modules = targets;
  adapter.config.base_model_name_or_path = "tiny-llama";
  float v = 0.001f;
  for (int64_t layer = 0; layer < base.num_hidden_layers; ++layer) {
    for (LoraModule m : targets) {
      LoraModuleShape s = ModuleShape(base, m);
      LoraModuleWeights w;
      w.layer = layer;
      w.module = m;
      w.a.resize(static_cast<size_t>(r * s.in_features));
      w.b.resize(static_cast<size_t>(s.out_features * r));
      for (float& x : w.a) x = (v = std::fmod(v * 1.37f + 0.011f, 1.0f)) - 0.5f;
      for (float& x : w.b) x = (v = std::fmod(v * 1.53f + 0.007f, 1.0f)) - 0.5f;
      adapter.modules.push_back(std::move(w));
    }
  }
  return adapter;
}

TEST(LoraAdapterTest, ModuleShapesFollowTheBaseModel) {
  ModelConfig base = Base();
  using InOut = std::pair<int64_t, int64_t>;
  auto shape = [&](LoraModule m) {
    LoraModuleShape s = ModuleShape(base, m);
    return InOut(s.in_features, s.out_features);
  };
  EXPECT_EQ(shape(LoraModule::kQ), InOut(64, 64));
  EXPECT_EQ(shape(LoraModule::kK), InOut(64, 32));
  EXPECT_EQ(shape(LoraModule::kV), InOut(64, 32));
  EXPECT_EQ(shape(LoraModule::kO), InOut(64, 64));
  EXPECT_EQ(shape(LoraModule::kGate), InOut(64, 128));
  EXPECT_EQ(shape(LoraModule::kDown), InOut(128, 64));
  EXPECT_EQ(LoraTensorName(1, LoraModule::kUp, false),
            "base_model.model.model.layers.1.mlp.up_proj.lora_B.weight");
  EXPECT_EQ(LoraTensorName(0, LoraModule::kK, true),
            "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight");
}

TEST(LoraAdapterTest, RoundTripsAndWritesPeftKeys) {
  TempDir tmp;
  base::Env& env = base::Env::Default();
  ModelConfig base = Base();
  LoraAdapter adapter = MakeAdapter(base, {LoraModule::kQ, LoraModule::kV, LoraModule::kDown}, 4);
  std::string dir = tmp.Join("adapter");
  ASSERT_TRUE(WriteLoraAdapter(env, dir, adapter, base).ok());
  EXPECT_EQ(*env.ListDir(dir),
            (std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors"}));

  // The keys and shapes PEFT uses, read with the plain safetensors reader.
  auto file = SafetensorsFile::Open(base::JoinPath(dir, "adapter_model.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  EXPECT_EQ((*file)->tensors().size(), 12u);
  using Shape = std::vector<uint64_t>;
  EXPECT_EQ((*file)->Find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight")->shape,
            (Shape{4, 64}));
  EXPECT_EQ((*file)->Find("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight")->shape,
            (Shape{32, 4}));
  EXPECT_EQ((*file)->Find("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight")->shape,
            (Shape{4, 128}));
  EXPECT_EQ((*file)->Find("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight")->shape,
            (Shape{64, 4}));
  EXPECT_EQ((*file)->Find("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight")->dtype,
            SafetensorsDType::kF32);
  json config = json::parse(*env.ReadFile(base::JoinPath(dir, "adapter_config.json")));
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["task_type"], "CAUSAL_LM");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8);
  EXPECT_EQ(config["target_modules"], (json{"q_proj", "v_proj", "down_proj"}));
  EXPECT_EQ(config["bias"], "none");
  EXPECT_EQ(config["fan_in_fan_out"], false);
  EXPECT_EQ(config["use_rslora"], false);
  EXPECT_EQ(config["base_model_name_or_path"], "tiny-llama");

  auto loaded = LoadLoraAdapter(env, dir, base);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.r, 4);
  EXPECT_DOUBLE_EQ(loaded->config.Scale(), 2.0);
  ASSERT_EQ(loaded->modules.size(), adapter.modules.size());
  for (size_t i = 0; i < adapter.modules.size(); ++i) {
    EXPECT_EQ(loaded->modules[i].layer, adapter.modules[i].layer);
    EXPECT_EQ(loaded->modules[i].module, adapter.modules[i].module);
    EXPECT_EQ(loaded->modules[i].a, adapter.modules[i].a);
    EXPECT_EQ(loaded->modules[i].b, adapter.modules[i].b);
  }
  EXPECT_NE(loaded->Find(1, LoraModule::kDown), nullptr);
  EXPECT_EQ(loaded->Find(1, LoraModule::kK), nullptr);

  // BF16 storage: each value is rounded as tensor::FloatToBF16 rounds it.
  std::string bf16_dir = tmp.Join("bf16");
  ASSERT_TRUE(WriteLoraAdapter(env, bf16_dir, adapter, base, tensor::DType::kBF16).ok());
  auto bf16 = LoadLoraAdapter(env, bf16_dir, base);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  const std::vector<float>& original = adapter.modules[3].a;
  const std::vector<float>& rounded = bf16->modules[3].a;
  ASSERT_EQ(rounded.size(), original.size());
  for (size_t i = 0; i < original.size(); ++i) {
    EXPECT_EQ(rounded[i], tensor::BF16ToFloat(tensor::FloatToBF16(original[i])));
  }
  ExpectError(WriteLoraAdapter(env, dir, adapter, base), StatusCode::kAlreadyExists, {"exists"});
}

TEST(LoraAdapterTest, LayersToTransformLimitsTheModules) {
  TempDir tmp;
  base::Env& env = base::Env::Default();
  ModelConfig base = Base();
  LoraAdapter adapter = MakeAdapter(base, {LoraModule::kO}, 2);
  adapter.config.layers_to_transform = {1};
  EXPECT_FALSE(ValidateLoraAdapter(adapter, base).ok());  // layer 0 is not covered
  adapter.modules.erase(adapter.modules.begin());
  ASSERT_TRUE(ValidateLoraAdapter(adapter, base).ok());
  ASSERT_TRUE(WriteLoraAdapter(env, tmp.Join("a"), adapter, base).ok());
  auto loaded = LoadLoraAdapter(env, tmp.Join("a"), base);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->modules.size(), 1u);
  EXPECT_EQ(loaded->modules[0].layer, 1);
  EXPECT_EQ(loaded->config.layers_to_transform, std::vector<int64_t>{1});
}

TEST(LoraAdapterTest, ValidateChecksSizesAndCoverage) {
  ModelConfig base = Base();
  LoraAdapter adapter = MakeAdapter(base, {LoraModule::kQ, LoraModule::kUp}, 2);
  ASSERT_TRUE(ValidateLoraAdapter(adapter, base).ok());
  LoraAdapter short_a = adapter;
  short_a.modules[1].a.pop_back();
  ExpectError(ValidateLoraAdapter(short_a, base), StatusCode::kInvalidArgument,
              {"layer 0 up_proj", "expected r*in = 128 and out*r = 256"});
  LoraAdapter missing = adapter;
  missing.modules.pop_back();
  ExpectError(ValidateLoraAdapter(missing, base), StatusCode::kInvalidArgument,
              {"no weights for layer 1 up_proj"});
  LoraAdapter extra = adapter;
  extra.config.target_modules = {LoraModule::kQ};
  ExpectError(ValidateLoraAdapter(extra, base), StatusCode::kInvalidArgument,
              {"has 4 modules, but its config covers 2"});
  LoraAdapter beyond = adapter;
  beyond.config.layers_to_transform = {7};
  ExpectError(ValidateLoraAdapter(beyond, base), StatusCode::kInvalidArgument,
              {"layer 7", "2 layers"});
}

// Writes an adapter directory by hand: PEFT's config and a weights file with the given tensors.
void WriteAdapterFiles(const std::string& dir, const std::string& config,
                       const std::vector<TensorToWrite>& tensors) {
  base::Env& env = base::Env::Default();
  SOVAI_CHECK(env.CreateDirs(dir).ok());
  SOVAI_CHECK(env.WriteFileAtomically(base::JoinPath(dir, "adapter_config.json"), config).ok());
  SafetensorsWriter w;
  for (const TensorToWrite& t : tensors) SOVAI_CHECK(w.Add(t).ok());
  SOVAI_CHECK(w.WriteFile(env, base::JoinPath(dir, "adapter_model.safetensors")).ok());
}

TEST(LoraAdapterTest, LoadNamesEveryBadKey) {
  TempDir tmp;
  base::Env& env = base::Env::Default();
  ModelConfig base = Base();
  std::string config = With(With(kPeftConfig, "r", "2"), "target_modules", R"(["q_proj"])");
  std::string zeros(64 * 2 * 4, '\0');
  auto bytes = [&](size_t n) { return std::as_bytes(std::span<const char>(zeros.data(), n)); };
  auto a = [&](int layer) {
    return TensorToWrite{LoraTensorName(layer, LoraModule::kQ, true),
                         SafetensorsDType::kF32,
                         {2, 64},
                         bytes(2 * 64 * 4),
                         {}};
  };
  auto b = [&](int layer) {
    return TensorToWrite{LoraTensorName(layer, LoraModule::kQ, false),
                         SafetensorsDType::kF32,
                         {64, 2},
                         bytes(64 * 2 * 4),
                         {}};
  };
  std::vector<TensorToWrite> good = {a(0), b(0), a(1), b(1)};
  int n = 0;
  auto load = [&](const std::string& cfg, std::vector<TensorToWrite> tensors) {
    std::string dir = tmp.Join("a" + std::to_string(n++));
    WriteAdapterFiles(dir, cfg, tensors);
    return LoadLoraAdapter(env, dir, base).status();
  };
  EXPECT_TRUE(load(config, good).ok());

  auto plus = [&](TensorToWrite t) {
    std::vector<TensorToWrite> out = good;
    out.push_back(std::move(t));
    return out;
  };
  ExpectError(
      load(config, plus({"base_model.model.lm_head.lora_A.weight",
                         SafetensorsDType::kF32,
                         {2, 64},
                         bytes(512),
                         {}})),
      StatusCode::kInvalidArgument,
      {"adapter_model.safetensors", "unexpected key 'base_model.model.lm_head.lora_A.weight'"});
  ExpectError(load(config, plus({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.default."
                                 "weight",
                                 SafetensorsDType::kF32,
                                 {2, 64},
                                 bytes(512),
                                 {}})),
              StatusCode::kInvalidArgument, {"unexpected key", "lora_A.default.weight"});
  ExpectError(load(config, plus({"base_model.model.model.layers.01.self_attn.q_proj.lora_A.weight",
                                 SafetensorsDType::kF32,
                                 {2, 64},
                                 bytes(512),
                                 {}})),
              StatusCode::kInvalidArgument, {"unexpected key"});
  ExpectError(load(config, plus(a(2))), StatusCode::kInvalidArgument,
              {"layers.2.self_attn.q_proj.lora_A.weight'", "layer 2", "has 2 layers"});
  ExpectError(load(config, plus({LoraTensorName(0, LoraModule::kK, true),
                                 SafetensorsDType::kF32,
                                 {2, 64},
                                 bytes(512),
                                 {}})),
              StatusCode::kInvalidArgument, {"k_proj, which target_modules does not list"});
  ExpectError(load(config, {a(0), b(0), a(1)}), StatusCode::kInvalidArgument,
              {"missing key 'base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight'"});
  ExpectError(load(config, {a(0), b(0)}), StatusCode::kInvalidArgument,
              {"missing key 'base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight'"});
  std::vector<TensorToWrite> wrong_shape = {a(0), b(0), a(1), b(1)};
  wrong_shape[2].shape = {4, 32};
  ExpectError(load(config, wrong_shape), StatusCode::kInvalidArgument,
              {"layers.1.self_attn.q_proj.lora_A.weight'", "shape [4, 32], expected [2, 64]",
               "(r, in_features)"});
  std::vector<TensorToWrite> int8 = {a(0), b(0), a(1), b(1)};
  int8[3].dtype = SafetensorsDType::kI8;
  int8[3].data = bytes(128);
  ExpectError(load(config, int8), StatusCode::kUnimplemented, {"lora_B.weight'", "dtype I8"});
  ExpectError(load(With(config, "layers_to_transform", "[0]"), good), StatusCode::kInvalidArgument,
              {"layer 1, which layers_to_transform does not list"});
  ExpectError(load(With(config, "layers_to_transform", "[9]"), good), StatusCode::kInvalidArgument,
              {"adapter_config.json", "layer 9"});

  std::string dir = tmp.Join("bin");
  ASSERT_TRUE(env.CreateDirs(dir).ok());
  ASSERT_TRUE(env.WriteFileAtomically(base::JoinPath(dir, "adapter_config.json"), config).ok());
  ExpectError(LoadLoraAdapter(env, dir, base).status(), StatusCode::kNotFound,
              {"adapter_model.safetensors"});
  ASSERT_TRUE(env.WriteFileAtomically(base::JoinPath(dir, "adapter_model.bin"), "pickle").ok());
  ExpectError(LoadLoraAdapter(env, dir, base).status(), StatusCode::kUnimplemented,
              {"adapter_model.bin", "pickle"});
  ExpectError(LoadLoraAdapter(env, tmp.Join("none"), base).status(), StatusCode::kNotFound,
              {"adapter_config.json"});
}

}  // namespace
}  // namespace sovai::model
