#include "model/model_config.h"

#include <gtest/gtest.h>

#include "model/formats_test_util.h"
#include "model/limits.h"

namespace sovai::model {
namespace {

using testing::ExpectError;
using testing::TempDir;

using base::StatusCode;
using nlohmann::json;

// The config.json files below are as published on the Hugging Face hub.
constexpr const char* kLlama31Config = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

constexpr const char* kMistral7BConfig = R"({
  "architectures": ["MistralForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.34.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

constexpr const char* kQwen25Config = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

constexpr const char* kQwen3Config = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

ModelConfig MustParse(std::string_view text) {
  auto c = ParseModelConfig(text);
  SOVAI_CHECK(c.ok()) << c.status();
  return *c;
}

// `text` with `key` set to `value` (a JSON literal), or removed when value is empty.
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
  return ParseModelConfig(text, "m/config.json").status();
}

TEST(ModelConfigTest, ParsesLlama31) {
  ModelConfig c = MustParse(kLlama31Config);
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 4096);
  EXPECT_EQ(c.kv_dim(), 1024);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling->factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling->low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling->high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, tensor::DType::kBF16);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_TRUE(c.eos_is_list);
  EXPECT_FALSE(c.has_qkv_bias());
  EXPECT_FALSE(c.has_o_bias());
  EXPECT_FALSE(c.has_qk_norm());
  EXPECT_EQ(c.SlidingWindowForLayer(0), std::nullopt);
  // Unmodelled keys are kept.
  EXPECT_EQ(c.extra, (json{{"attention_dropout", 0.0},
                           {"initializer_range", 0.02},
                           {"pretraining_tp", 1},
                           {"transformers_version", "4.43.0.dev0"},
                           {"use_cache", true}}));
}

TEST(ModelConfigTest, ParsesMistralWithItsSlidingWindow) {
  ModelConfig c = MustParse(kMistral7BConfig);
  EXPECT_EQ(c.architecture, Architecture::kMistral);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.SlidingWindowForLayer(0), 4096);
  EXPECT_EQ(c.SlidingWindowForLayer(31), 4096);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_FALSE(c.eos_is_list);
  EXPECT_FALSE(c.has_qkv_bias());
  // Mistral 7B v0.2 and later: no window.
  ModelConfig v2 = MustParse(With(kMistral7BConfig, "sliding_window", "null"));
  EXPECT_EQ(v2.SlidingWindowForLayer(0), std::nullopt);
  // transformers' MistralConfig default when the key is missing: 4096.
  ModelConfig missing = MustParse(With(kMistral7BConfig, "sliding_window", ""));
  EXPECT_EQ(missing.sliding_window, 4096);
}

TEST(ModelConfigTest, ParsesQwen2WithBiasesAndTiedEmbeddings) {
  ModelConfig c = MustParse(kQwen25Config);
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_EQ(c.head_dim, 64);  // 896 / 14
  EXPECT_EQ(c.kv_dim(), 128);
  EXPECT_TRUE(c.has_qkv_bias());
  EXPECT_FALSE(c.has_o_bias());
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  // use_sliding_window false: no layer slides, whatever sliding_window says.
  EXPECT_EQ(c.sliding_window, 32768);
  EXPECT_EQ(c.SlidingWindowForLayer(23), std::nullopt);
  ModelConfig sliding = MustParse(With(kQwen25Config, "use_sliding_window", "true"));
  EXPECT_EQ(sliding.SlidingWindowForLayer(20), std::nullopt);  // below max_window_layers (21)
  EXPECT_EQ(sliding.SlidingWindowForLayer(21), 32768);
  // An explicit layer_types list decides per layer.
  json types = json::array();
  for (int i = 0; i < 24; ++i) types.push_back(i % 2 ? "sliding_attention" : "full_attention");
  ModelConfig listed = MustParse(
      With(With(kQwen25Config, "use_sliding_window", "true"), "layer_types", types.dump()));
  EXPECT_EQ(listed.SlidingWindowForLayer(0), std::nullopt);
  EXPECT_EQ(listed.SlidingWindowForLayer(1), 32768);
}

TEST(ModelConfigTest, ParsesQwen3WithExplicitHeadDim) {
  ModelConfig c = MustParse(kQwen3Config);
  EXPECT_EQ(c.architecture, Architecture::kQwen3);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 2048);  // not hidden_size: qwen3 sets head_dim explicitly
  EXPECT_EQ(c.kv_dim(), 1024);
  EXPECT_TRUE(c.has_qk_norm());
  EXPECT_FALSE(c.has_qkv_bias());
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);  // an integer in the file
  EXPECT_FALSE(c.rope_scaling.has_value());
  EXPECT_EQ(c.sliding_window, std::nullopt);
  ModelConfig biased = MustParse(With(kQwen3Config, "attention_bias", "true"));
  EXPECT_TRUE(biased.has_qkv_bias());
  EXPECT_TRUE(biased.has_o_bias());
}

// Fields left out take transformers' per-class defaults.
TEST(ModelConfigTest, MissingFieldsTakeTransformersDefaults) {
  ModelConfig llama = MustParse(R"({"model_type": "llama"})");
  EXPECT_EQ(llama.vocab_size, 32000);
  EXPECT_EQ(llama.hidden_size, 4096);
  EXPECT_EQ(llama.intermediate_size, 11008);
  EXPECT_EQ(llama.num_hidden_layers, 32);
  EXPECT_EQ(llama.num_key_value_heads, 32);  // = num_attention_heads
  EXPECT_EQ(llama.head_dim, 128);
  EXPECT_EQ(llama.max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(llama.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(llama.rope_theta, 10000.0);
  EXPECT_EQ(llama.bos_token_id, 1);
  EXPECT_EQ(llama.eos_token_ids, std::vector<int64_t>{2});
  ModelConfig llama_gqa = MustParse(R"({"model_type": "llama", "num_attention_heads": 16})");
  EXPECT_EQ(llama_gqa.num_key_value_heads, 16);
  EXPECT_EQ(llama_gqa.head_dim, 256);

  ModelConfig mistral = MustParse(R"({"architectures": ["MistralForCausalLM"]})");
  EXPECT_EQ(mistral.num_key_value_heads, 8);  // MistralConfig's default
  EXPECT_EQ(mistral.max_position_embeddings, 131072);
  EXPECT_EQ(mistral.sliding_window, 4096);

  ModelConfig qwen3 = MustParse(R"({"model_type": "qwen3"})");
  EXPECT_EQ(qwen3.head_dim, 128);
  EXPECT_EQ(qwen3.num_key_value_heads, 32);
  EXPECT_EQ(qwen3.vocab_size, 151936);
  EXPECT_EQ(qwen3.bos_token_id, std::nullopt);
  EXPECT_TRUE(qwen3.eos_token_ids.empty());
  EXPECT_EQ(qwen3.max_window_layers, 28);

  // null num_key_value_heads means num_attention_heads, as in transformers.
  ModelConfig qwen2 = MustParse(
      R"({"model_type": "qwen2", "num_attention_heads": 8, "num_key_value_heads": null})");
  EXPECT_EQ(qwen2.num_key_value_heads, 8);
}

TEST(ModelConfigTest, ReadsEveryRopeSpelling) {
  // The legacy "type" key (linear scaling as older checkpoints write it).
  ModelConfig linear =
      MustParse(With(kMistral7BConfig, "rope_scaling", R"({"type": "linear", "factor": 2.0})"));
  ASSERT_TRUE(linear.rope_scaling.has_value());
  EXPECT_EQ(linear.rope_scaling->type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(linear.rope_scaling->factor, 2.0);
  EXPECT_TRUE(linear.rope_scaling->legacy_type_key);
  // "type" wins over "rope_type", as in transformers.
  ModelConfig both = MustParse(With(kMistral7BConfig, "rope_scaling",
                                    R"({"type": "linear", "rope_type": "yarn", "factor": 3})"));
  EXPECT_EQ(both.rope_scaling->type, RopeScaling::Type::kLinear);
  // "default" is no scaling.
  ModelConfig plain =
      MustParse(With(kMistral7BConfig, "rope_scaling", R"({"rope_type": "default"})"));
  EXPECT_FALSE(plain.rope_scaling.has_value());
  // transformers 5: rope_parameters holds the theta and the type.
  std::string v5 = With(With(kLlama31Config, "rope_scaling", ""), "rope_theta", "");
  v5 = With(v5, "rope_parameters",
            R"({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192})");
  ModelConfig from_v5 = MustParse(v5);
  EXPECT_DOUBLE_EQ(from_v5.rope_theta, 500000.0);
  ASSERT_TRUE(from_v5.rope_scaling.has_value());
  EXPECT_EQ(*from_v5.rope_scaling, *MustParse(kLlama31Config).rope_scaling);
  ModelConfig v5_default = MustParse(
      With(kQwen3Config, "rope_parameters", R"({"rope_type": "default", "rope_theta": 5.0})"));
  EXPECT_DOUBLE_EQ(v5_default.rope_theta, 1e6);  // the top-level rope_theta still counts
  // "dtype" (transformers >= 4.56) for torch_dtype.
  ModelConfig dtype =
      MustParse(With(With(kQwen3Config, "torch_dtype", ""), "dtype", "\"float16\""));
  EXPECT_EQ(dtype.torch_dtype, tensor::DType::kF16);
  EXPECT_FALSE(dtype.extra.contains("dtype"));
}

TEST(ModelConfigTest, RefusesUnsupportedModelsByName) {
  ExpectError(ParseStatus(With(kLlama31Config, "architectures", R"(["GPT2LMHeadModel"])")),
              StatusCode::kUnimplemented,
              {"m/config.json",
               "architecture 'GPT2LMHeadModel' is not supported; supported: "
               "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
               "Qwen3ForCausalLM"});
  ExpectError(ParseStatus(R"({"model_type": "gpt2"})"), StatusCode::kUnimplemented,
              {"model_type 'gpt2' is not supported; supported: llama, mistral, qwen2, qwen3"});
  ExpectError(ParseStatus(With(kLlama31Config, "model_type", R"("qwen2")")),
              StatusCode::kInvalidArgument, {"'LlamaForCausalLM'", "model_type is 'qwen2'"});
  ExpectError(ParseStatus(R"({"hidden_size": 64})"), StatusCode::kInvalidArgument,
              {"neither 'model_type' nor 'architectures'"});
  ExpectError(
      ParseStatus(With(kQwen25Config, "rope_scaling", R"({"type": "yarn", "factor": 4.0})")),
      StatusCode::kUnimplemented, {"rope_scaling type 'yarn' is not supported", "linear, llama3"});
  ExpectError(ParseStatus(With(kLlama31Config, "hidden_act", R"("gelu")")),
              StatusCode::kUnimplemented, {"hidden_act 'gelu'"});
  ExpectError(ParseStatus(With(kLlama31Config, "quantization_config",
                               R"({"quant_method": "gptq", "bits": 4})")),
              StatusCode::kUnimplemented, {"quantized", "gptq"});
  ExpectError(ParseStatus(With(kLlama31Config, "torch_dtype", R"("float64")")),
              StatusCode::kUnimplemented, {"torch_dtype 'float64'"});
  ExpectError(ParseStatus(With(kQwen25Config, "layer_types", R"(["linear_attention"])")),
              StatusCode::kUnimplemented, {"\"linear_attention\""});
}

TEST(ModelConfigTest, RefusesInconsistentOrInsaneValues) {
  struct Case {
    std::string key, value;
    std::vector<std::string_view> parts;
  };
  std::vector<Case> cases = {
      {"num_key_value_heads",
       "5",
       {"num_attention_heads (32) must be a multiple of "
        "num_key_value_heads (5)"}},
      {"num_key_value_heads", "64", {"num_key_value_heads (64) must be between 1 and 32"}},
      {"num_key_value_heads", "0", {"num_key_value_heads (0)"}},
      {"hidden_size", "0", {"hidden_size (0) must be between 1 and"}},
      {"hidden_size", "-4096", {"hidden_size (-4096)"}},
      {"hidden_size", "1048576", {"hidden_size (1048576) must be between 1 and 65536"}},
      {"hidden_size", "\"4096\"", {"field 'hidden_size' must be an integer"}},
      {"hidden_size", "4096.0", {"field 'hidden_size' must be an integer"}},
      {"num_attention_heads", "0", {"num_attention_heads (0) must be positive"}},
      {"num_hidden_layers", "100000", {"num_hidden_layers (100000)"}},
      {"vocab_size", "0", {"vocab_size (0)"}},
      {"intermediate_size", "0", {"intermediate_size (0)"}},
      {"max_position_embeddings", "0", {"max_position_embeddings (0)"}},
      {"head_dim", "127", {"head_dim (127) must be even"}},
      {"head_dim", "4096", {"head_dim (4096) must be between 1 and 1024"}},
      {"rms_norm_eps", "0", {"rms_norm_eps"}},
      {"rms_norm_eps", "\"1e-5\"", {"field 'rms_norm_eps' must be a number"}},
      {"rope_theta", "-1", {"rope_theta must be a positive number"}},
      {"bos_token_id", "128256", {"bos_token_id (128256) is outside the vocabulary"}},
      {"eos_token_id", "[128001, -1]", {"eos_token_id (-1) is outside the vocabulary"}},
      {"eos_token_id", "[1.5]", {"eos_token_id must hold integers"}},
      {"eos_token_id", json(std::vector<int>(65, 1)).dump(), {"more than 64 ids"}},
      {"rope_scaling",
       R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
           "original_max_position_embeddings": 8192})",
       {"0 < low_freq_factor < high_freq_factor"}},
      {"rope_scaling",
       R"({"rope_type": "llama3", "factor": 8.0})",
       {"needs 'factor', 'low_freq_factor'"}},
      {"rope_scaling",
       R"({"rope_type": "linear", "factor": 0.5})",
       {"rope_scaling.factor must be a number >= 1"}},
      {"rope_scaling", R"({"rope_type": "linear"})", {"needs 'factor'"}},
      {"rope_scaling", R"({"factor": 2.0})", {"no 'rope_type'"}},
      {"rope_scaling", R"({"rope_type": 7, "factor": 2.0})", {"in rope_scaling", "rope_type"}},
      {"rope_scaling", "[1]", {"'rope_scaling' must be an object"}},
      {"architectures", "[]", {"non-empty list"}},
      {"architectures", R"(["LlamaForCausalLM", "MistralForCausalLM"])", {"two different"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key + " = " + c.value);
    base::Status status = ParseStatus(With(kLlama31Config, c.key, c.value));
    EXPECT_FALSE(status.ok());
    ExpectError(status, status.code(), c.parts);
    EXPECT_NE(status.message().find("m/config.json"), std::string::npos) << status;
  }
  ExpectError(ParseStatus(With(kMistral7BConfig, "sliding_window", "0")),
              StatusCode::kInvalidArgument, {"sliding_window (0) must be positive"});
  ExpectError(ParseStatus(With(With(kQwen25Config, "use_sliding_window", "true"), "layer_types",
                               R"(["full_attention"])")),
              StatusCode::kInvalidArgument, {"layer_types has 1 entries for 24 layers"});
  ExpectError(ParseStatus("{\"model_type\": \"llama\""), StatusCode::kInvalidArgument,
              {"m/config.json", "invalid JSON"});
  ExpectError(ParseStatus("[]"), StatusCode::kInvalidArgument, {"not a JSON object"});
  ExpectError(ParseStatus(std::string(kMaxModelConfigBytes + 1, ' ')), StatusCode::kInvalidArgument,
              {"exceeds the limit"});
}

TEST(ModelConfigTest, WritesAConfigTransformersReads) {
  for (const char* text : {kLlama31Config, kMistral7BConfig, kQwen25Config, kQwen3Config}) {
    ModelConfig c = MustParse(text);
    auto written = ModelConfigToJson(c);
    ASSERT_TRUE(written.ok()) << written.status();
    // Every field the source had is written back with the same value (the defaults that
    // transformers fills in may be added), checked on the JSON itself.
    json source = json::parse(text);
    json out = json::parse(*written);
    for (const auto& [key, value] : source.items()) {
      SCOPED_TRACE(std::string(text).substr(0, 60) + " " + key);
      ASSERT_TRUE(out.contains(key));
      if (value.is_number() && out[key].is_number()) {
        EXPECT_DOUBLE_EQ(out[key].get<double>(), value.get<double>());
      } else if (key == "rope_scaling" && value.is_object()) {
        for (const auto& [k, v] : value.items()) EXPECT_EQ(out[key][k], v) << k;
      } else {
        EXPECT_EQ(out[key], value);
      }
    }
    // As transformers writes it: sorted keys, indent 2, a trailing newline.
    EXPECT_EQ(written->rfind("{\n  \"architectures\": [\n", 0), 0u);
    EXPECT_EQ(written->back(), '\n');
    // And it reads back to the same config.
    ModelConfig again = MustParse(*written);
    EXPECT_EQ(*ModelConfigToJson(again), *written);
    EXPECT_EQ(again.extra, c.extra);
  }
  // The legacy rope type key is written with the new one, for old and new transformers.
  ModelConfig linear =
      MustParse(With(kMistral7BConfig, "rope_scaling", R"({"type": "linear", "factor": 2.0})"));
  json out = json::parse(*ModelConfigToJson(linear));
  EXPECT_EQ(out["rope_scaling"],
            (json{{"type", "linear"}, {"rope_type", "linear"}, {"factor", 2.0}}));
  // A config built by hand is validated before it is written.
  ModelConfig bad = linear;
  bad.num_key_value_heads = 3;
  ExpectError(ModelConfigToJson(bad).status(), StatusCode::kInvalidArgument, {"multiple"});
}

ModelConfig Tiny(Architecture arch) {
  ModelConfig c;
  c.architecture = arch;
  c.vocab_size = 100;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  SOVAI_CHECK(ValidateModelConfig(c).ok());
  return c;
}

using Shape = std::vector<uint64_t>;

TEST(ModelConfigTest, ExpectedTensorsOfQwen3AreTheHfOnes) {
  ModelConfig c = Tiny(Architecture::kQwen3);
  c.num_hidden_layers = 1;
  c.head_dim = 32;  // q_dim 128 != hidden 64
  c.tie_word_embeddings = true;
  std::vector<ExpectedTensor> got = ExpectedTensors(c);
  std::vector<std::pair<std::string, Shape>> want = {
      {"model.embed_tokens.weight", {100, 64}},
      {"model.layers.0.input_layernorm.weight", {64}},
      {"model.layers.0.self_attn.q_proj.weight", {128, 64}},
      {"model.layers.0.self_attn.k_proj.weight", {64, 64}},
      {"model.layers.0.self_attn.v_proj.weight", {64, 64}},
      {"model.layers.0.self_attn.o_proj.weight", {64, 128}},
      {"model.layers.0.self_attn.q_norm.weight", {32}},
      {"model.layers.0.self_attn.k_norm.weight", {32}},
      {"model.layers.0.post_attention_layernorm.weight", {64}},
      {"model.layers.0.mlp.gate_proj.weight", {128, 64}},
      {"model.layers.0.mlp.up_proj.weight", {128, 64}},
      {"model.layers.0.mlp.down_proj.weight", {64, 128}},
      {"model.norm.weight", {64}},
      {"lm_head.weight", {100, 64}},
  };
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].first);
    EXPECT_EQ(got[i].shape, want[i].second) << want[i].first;
    EXPECT_EQ(got[i].optional, want[i].first == "lm_head.weight");
  }
}

TEST(ModelConfigTest, ExpectedTensorsFollowTheBiases) {
  auto names = [](const ModelConfig& c) {
    std::map<std::string, Shape> out;
    for (const ExpectedTensor& t : ExpectedTensors(c)) out[t.name] = t.shape;
    return out;
  };
  auto llama = names(Tiny(Architecture::kLlama));
  EXPECT_EQ(llama.size(), 1u + 2 * 9 + 2);
  EXPECT_EQ(llama.at("model.layers.1.self_attn.k_proj.weight"), (Shape{32, 64}));
  EXPECT_EQ(llama.count("model.layers.0.self_attn.q_proj.bias"), 0u);
  EXPECT_EQ(llama.count("model.layers.0.self_attn.q_norm.weight"), 0u);

  auto qwen2 = names(Tiny(Architecture::kQwen2));
  EXPECT_EQ(qwen2.at("model.layers.0.self_attn.q_proj.bias"), (Shape{64}));
  EXPECT_EQ(qwen2.at("model.layers.1.self_attn.k_proj.bias"), (Shape{32}));
  EXPECT_EQ(qwen2.at("model.layers.1.self_attn.v_proj.bias"), (Shape{32}));
  EXPECT_EQ(qwen2.count("model.layers.0.self_attn.o_proj.bias"), 0u);

  ModelConfig biased = Tiny(Architecture::kLlama);
  biased.attention_bias = true;
  biased.mlp_bias = true;
  auto llama_bias = names(biased);
  EXPECT_EQ(llama_bias.at("model.layers.0.self_attn.o_proj.bias"), (Shape{64}));
  EXPECT_EQ(llama_bias.at("model.layers.0.mlp.up_proj.bias"), (Shape{128}));
  EXPECT_EQ(llama_bias.at("model.layers.0.mlp.down_proj.bias"), (Shape{64}));

  ModelConfig mistral = Tiny(Architecture::kMistral);
  mistral.attention_bias = true;  // MistralAttention has no biases whatever the flag says
  EXPECT_EQ(names(mistral).count("model.layers.0.self_attn.q_proj.bias"), 0u);
}

struct Found {
  std::string name;
  std::string dtype = "BF16";
  Shape shape;
};

base::Status Check(const ModelConfig& c, const std::vector<Found>& tensors) {
  std::vector<FoundTensor> found;
  for (const Found& f : tensors) found.push_back({f.name, f.dtype, f.shape, "w.safetensors"});
  return CheckTensors(c, found, "dir/model.safetensors");
}

std::vector<Found> AllOf(const ModelConfig& c) {
  std::vector<Found> out;
  for (const ExpectedTensor& t : ExpectedTensors(c)) {
    if (!t.optional) out.push_back({t.name, "BF16", t.shape});
  }
  return out;
}

TEST(ModelConfigTest, CheckTensorsNamesEachProblem) {
  ModelConfig c = Tiny(Architecture::kLlama);
  std::vector<Found> all = AllOf(c);
  EXPECT_TRUE(Check(c, all).ok());

  std::vector<Found> missing(all.begin() + 1, all.end());
  ExpectError(Check(c, missing), StatusCode::kInvalidArgument,
              {"missing tensor 'model.embed_tokens.weight' (shape [100, 64]) in "
               "'dir/model.safetensors'"});

  std::vector<Found> extra = all;
  extra.push_back({"model.layers.0.self_attn.q_proj.bias", "BF16", {64}});
  ExpectError(Check(c, extra), StatusCode::kInvalidArgument,
              {"unexpected tensor 'model.layers.0.self_attn.q_proj.bias' in 'w.safetensors'",
               "llama model"});

  std::vector<Found> wrong = all;
  for (Found& f : wrong) {
    if (f.name == "model.layers.1.self_attn.k_proj.weight") f.shape = {64, 64};
  }
  ExpectError(Check(c, wrong), StatusCode::kInvalidArgument,
              {"tensor 'model.layers.1.self_attn.k_proj.weight' in 'w.safetensors' has shape "
               "[64, 64], expected [32, 64]"});

  std::vector<Found> int8 = all;
  int8.back().dtype = "I8";
  ExpectError(Check(c, int8), StatusCode::kInvalidArgument,
              {"'lm_head.weight'", "dtype I8", "F32, F16 or BF16"});

  std::vector<Found> several(all.begin() + 3, all.end());
  ExpectError(Check(c, several), StatusCode::kInvalidArgument, {"(and 2 more problems)"});

  std::vector<Found> twice = all;
  twice.push_back(all[0]);
  ExpectError(Check(c, twice), StatusCode::kInvalidArgument, {"appears twice"});

  // Old checkpoints' rotary buffers are ignored.
  std::vector<Found> inv_freq = all;
  inv_freq.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {8}});
  EXPECT_TRUE(Check(c, inv_freq).ok());

  // Tied embeddings: lm_head.weight may be present (with its shape) or absent.
  ModelConfig tied = c;
  tied.tie_word_embeddings = true;
  std::vector<Found> without_head = AllOf(tied);
  EXPECT_TRUE(Check(tied, without_head).ok());
  EXPECT_TRUE(Check(tied, all).ok());
  std::vector<Found> bad_head = all;
  bad_head.back().shape = {99, 64};
  ExpectError(Check(tied, bad_head), StatusCode::kInvalidArgument,
              {"'lm_head.weight'", "[99, 64]"});
}

}  // namespace
}  // namespace sovai::model
