// ModelConfig: the config.json of a Hugging Face Llama-family checkpoint (llama, mistral, qwen2,
// qwen3), parsed and validated, written back in a form transformers reads, and turned into the
// list of tensors such a model has (HF names and shapes) so that a checkpoint can be checked
// against it. Format notes: docs/formats/model-config.md; limits: model/limits.h.
//
// Parsing follows transformers' config classes: a missing field takes that architecture's
// default (e.g. mistral's sliding_window 4096, qwen3's head_dim 128), `rope_scaling` accepts
// `type` for `rope_type`, `torch_dtype` may be spelled `dtype` (transformers >= 4.56), and
// `rope_parameters` (transformers 5) is read like `rope_scaling` + `rope_theta`. Keys that are not
// modelled here (transformers_version, initializer_range, use_cache, ...) are kept in `extra` and
// written back unchanged. Anything that would change the computation and is not supported is
// refused by name rather than ignored: another architecture ("architecture 'GPT2LMHeadModel' is
// not supported; supported: ..."), a rope_scaling type other than linear and llama3, an
// activation other than silu, a quantization_config.
//
// Errors: InvalidArgument naming the file (`source`) and the field, e.g.
//   "config.json: num_attention_heads (32) must be a multiple of num_key_value_heads (5)";
// Unimplemented for a supported-format feature the engine lacks (rope type, quantization).
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace sovai::model {

enum class Architecture : uint8_t { kLlama, kMistral, kQwen2, kQwen3 };

// model_type: "llama", "mistral", "qwen2", "qwen3".
std::string_view ModelTypeName(Architecture arch);
// The class in `architectures`: "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
// "Qwen3ForCausalLM".
std::string_view ArchitectureClassName(Architecture arch);

struct RopeScaling {
  enum class Type : uint8_t {
    kLinear,  // positions divided by `factor`
    kLlama3,  // Llama 3.1: frequencies scaled by wavelength band
  };
  Type type = Type::kLinear;
  double factor = 1.0;
  // llama3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  // Whether the file spelled the type as the legacy key "type" (written back the same way, next
  // to "rope_type", so that old and new transformers both read it).
  bool legacy_type_key = false;

  friend bool operator==(const RopeScaling&, const RopeScaling&) = default;
};

// What kind of attention a layer uses.
enum class LayerAttention : uint8_t { kFull, kSliding };

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  bool tie_word_embeddings = false;
  // llama and qwen3: biases on q/k/v/o (qwen2 always has q/k/v biases and never an o bias;
  // mistral has none). llama only: biases on the MLP projections.
  bool attention_bias = false;
  bool mlp_bias = false;
  // silu (transformers' "swish" is the same function).
  std::string hidden_act = "silu";

  // Sliding-window attention. mistral: `sliding_window` applies to every layer when set.
  // qwen2/qwen3: it applies only when `use_sliding_window`, to layers >= max_window_layers, or as
  // `layer_types` says when the file has that list.
  std::optional<int64_t> sliding_window;
  bool use_sliding_window = false;
  int64_t max_window_layers = 0;
  std::vector<LayerAttention> layer_types;  // empty unless the file has "layer_types"

  std::optional<tensor::DType> torch_dtype;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // empty when absent
  bool eos_is_list = false;            // written back as a list even with one id
  std::optional<int64_t> pad_token_id;

  // Keys of the file not modelled above, written back as they were.
  nlohmann::json extra = nlohmann::json::object();

  // Derived shapes.
  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  bool has_qkv_bias() const;
  bool has_o_bias() const;
  bool has_qk_norm() const { return architecture == Architecture::kQwen3; }
  // The attention window of `layer` in tokens; nullopt for full attention.
  std::optional<int64_t> SlidingWindowForLayer(int64_t layer) const;
};

// Parses config.json text. `source` names the file in messages ("<dir>/config.json").
base::Result<ModelConfig> ParseModelConfig(std::string_view json_text,
                                           std::string_view source = "config.json");

// Checks the invariants the engine relies on: positive sizes within the limits of limits.h,
// num_attention_heads a multiple of num_key_value_heads, an even head_dim (RoPE rotates pairs),
// finite positive rms_norm_eps and rope_theta, sane rope_scaling, token ids within the
// vocabulary, layer_types of num_hidden_layers entries. ParseModelConfig calls it; call it after
// building a config by hand.
base::Status ValidateModelConfig(const ModelConfig& config, std::string_view source = "config");

// config.json as transformers writes it (keys sorted, 2-space indent, trailing newline): `extra`
// plus the modelled fields. Validates first.
base::Result<std::string> ModelConfigToJson(const ModelConfig& config);

// A tensor a model of this config has.
struct ExpectedTensor {
  std::string name;
  std::vector<uint64_t> shape;
  // lm_head.weight of a model with tied embeddings: transformers accepts it present or absent.
  bool optional = false;
};

// Every tensor of the model, in HF naming and order:
//   model.embed_tokens.weight                          (vocab_size, hidden_size)
//   model.layers.N.input_layernorm.weight              (hidden_size)
//   model.layers.N.self_attn.{q,k,v,o}_proj.weight     (q_dim|kv_dim|kv_dim, hidden), (hidden,
//   q_dim) model.layers.N.self_attn.{q,k,v}_proj.bias         qwen2; llama/qwen3 with
//   attention_bias model.layers.N.self_attn.o_proj.bias               llama/qwen3 with
//   attention_bias model.layers.N.self_attn.{q,k}_norm.weight         (head_dim), qwen3
//   model.layers.N.post_attention_layernorm.weight     (hidden_size)
//   model.layers.N.mlp.{gate,up}_proj.weight           (intermediate_size, hidden_size)
//   model.layers.N.mlp.down_proj.weight                (hidden_size, intermediate_size)
//   model.layers.N.mlp.{gate,up,down}_proj.bias        llama with mlp_bias
//   model.norm.weight                                  (hidden_size)
//   lm_head.weight                                     (vocab_size, hidden_size), optional if tied
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config);

// A tensor found in a checkpoint.
struct FoundTensor {
  std::string_view name;
  std::string_view dtype;  // the safetensors spelling, e.g. "BF16"
  std::span<const uint64_t> shape;
  std::string_view file;  // where it was found, for messages
};

// Checks a checkpoint's tensors against the config: every expected tensor present with its shape,
// nothing unexpected, and every weight of dtype F32, F16 or BF16. Rotary `inv_freq` buffers that
// old checkpoints carry (model.layers.N.self_attn.rotary_emb.inv_freq) are ignored, as
// transformers does. `source` names the checkpoint for a missing tensor (the file or the index).
// Error (InvalidArgument) names the first problem's tensor and file, and how many more there are:
//   "tensor 'model.norm.weight' in 'x/model.safetensors' has shape [32], expected [64] (and 2
//   more problems)".
base::Status CheckTensors(const ModelConfig& config, std::span<const FoundTensor> found,
                          std::string_view source);

}  // namespace sovai::model
