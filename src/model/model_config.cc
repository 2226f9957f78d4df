#include "model/model_config.h"

#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "base/json.h"
#include "model/limits.h"

namespace sovai::model {
namespace {

using base::InvalidArgumentError;
using base::Result;
using base::Status;
using base::UnimplementedError;
using nlohmann::json;

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

constexpr Architecture kArchitectures[] = {Architecture::kLlama, Architecture::kMistral,
                                           Architecture::kQwen2, Architecture::kQwen3};

std::string SupportedClasses() {
  std::string out;
  for (Architecture a : kArchitectures) {
    if (!out.empty()) out += ", ";
    out += ArchitectureClassName(a);
  }
  return out;
}

std::string SupportedModelTypes() {
  std::string out;
  for (Architecture a : kArchitectures) {
    if (!out.empty()) out += ", ";
    out += ModelTypeName(a);
  }
  return out;
}

// transformers' defaults per config class, for fields a config.json leaves out.
struct Defaults {
  int64_t vocab_size;
  int64_t intermediate_size;
  int64_t max_position_embeddings;
  // 0: num_attention_heads.
  int64_t num_key_value_heads;
  // 0: hidden_size / num_attention_heads.
  int64_t head_dim;
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;
  std::optional<int64_t> sliding_window;
  int64_t max_window_layers;
};

Defaults DefaultsFor(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return {32000, 11008, 2048, 0, 0, 1, 2, std::nullopt, 0};
    case Architecture::kMistral:
      return {32000, 14336, 4096 * 32, 8, 0, 1, 2, 4096, 0};
    case Architecture::kQwen2:
      return {151936, 22016, 32768, 32, 0, std::nullopt, std::nullopt, 4096, 28};
    case Architecture::kQwen3:
      return {151936, 22016, 32768, 32, 128, std::nullopt, std::nullopt, 4096, 28};
  }
  SOVAI_CHECK(false) << "unknown architecture";
  return {};
}

// Typed reads of a config object that remember which keys were read, so that the rest can be
// kept in ModelConfig::extra. Errors carry the file name.
class Fields {
 public:
  Fields(const json& obj, std::string_view source) : obj_(obj), source_(source) {}

  bool Has(std::string_view key) {
    consumed_.insert(std::string(key));
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }
  // Whether the key is present, even as null.
  bool Present(std::string_view key) const { return obj_.contains(key); }
  const json& Raw(std::string_view key) {
    consumed_.insert(std::string(key));
    return obj_.at(std::string(key));
  }
  Result<std::optional<int64_t>> Int(std::string_view key) {
    consumed_.insert(std::string(key));
    return Wrap(base::GetOptionalInt(obj_, key));
  }
  Result<std::optional<double>> Double(std::string_view key) {
    consumed_.insert(std::string(key));
    return Wrap(base::GetOptionalDouble(obj_, key));
  }
  Result<std::optional<bool>> Bool(std::string_view key) {
    consumed_.insert(std::string(key));
    return Wrap(base::GetOptionalBool(obj_, key));
  }
  Result<std::optional<std::string>> String(std::string_view key) {
    consumed_.insert(std::string(key));
    return Wrap(base::GetOptionalString(obj_, key));
  }
  // An int field with a default for missing or null.
  Result<int64_t> IntOr(std::string_view key, int64_t fallback) {
    SOVAI_ASSIGN_OR_RETURN(auto v, Int(key));
    return v.value_or(fallback);
  }
  Result<double> DoubleOr(std::string_view key, double fallback) {
    SOVAI_ASSIGN_OR_RETURN(auto v, Double(key));
    return v.value_or(fallback);
  }
  Result<bool> BoolOr(std::string_view key, bool fallback) {
    SOVAI_ASSIGN_OR_RETURN(auto v, Bool(key));
    return v.value_or(fallback);
  }

  json Rest() const {
    json rest = json::object();
    for (const auto& [key, value] : obj_.items()) {
      if (consumed_.count(key) == 0) rest[key] = value;
    }
    return rest;
  }

  std::string Prefix() const { return std::string(source_) + ": "; }
  Status Error(std::string message) const { return InvalidArgumentError(Prefix() + message); }

 private:
  template <typename T>
  Result<T> Wrap(Result<T> r) const {
    if (!r.ok()) return Error(r.status().message());
    return r;
  }

  const json& obj_;
  std::string_view source_;
  std::set<std::string> consumed_;
};

std::optional<Architecture> ArchitectureFromClass(std::string_view name) {
  for (Architecture a : kArchitectures) {
    if (ArchitectureClassName(a) == name) return a;
  }
  return std::nullopt;
}

std::optional<Architecture> ArchitectureFromModelType(std::string_view name) {
  for (Architecture a : kArchitectures) {
    if (ModelTypeName(a) == name) return a;
  }
  return std::nullopt;
}

Result<Architecture> ReadArchitecture(Fields& f, std::string_view source) {
  std::optional<Architecture> from_class;
  if (f.Has("architectures")) {
    const json& list = f.Raw("architectures");
    if (!list.is_array() || list.empty()) {
      return f.Error("field 'architectures' must be a non-empty list of class names");
    }
    for (const json& entry : list) {
      if (!entry.is_string()) return f.Error("field 'architectures' must hold strings");
      const std::string& name = entry.get_ref<const std::string&>();
      auto arch = ArchitectureFromClass(name);
      if (!arch) {
        return UnimplementedError(std::string(source) + ": architecture " + Quote(name) +
                                  " is not supported; supported: " + SupportedClasses());
      }
      if (from_class && *from_class != *arch) {
        return f.Error("field 'architectures' names two different architectures");
      }
      from_class = arch;
    }
  }
  SOVAI_ASSIGN_OR_RETURN(auto model_type, f.String("model_type"));
  std::optional<Architecture> from_type;
  if (model_type) {
    from_type = ArchitectureFromModelType(*model_type);
    if (!from_type) {
      return UnimplementedError(std::string(source) + ": model_type " + Quote(*model_type) +
                                " is not supported; supported: " + SupportedModelTypes());
    }
  }
  if (from_class && from_type && *from_class != *from_type) {
    return f.Error("architectures says " + Quote(ArchitectureClassName(*from_class)) +
                   " but model_type is " + Quote(*model_type));
  }
  if (from_type) return *from_type;
  if (from_class) return *from_class;
  return f.Error("neither 'model_type' nor 'architectures' says which model this is");
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5; also holds rope_theta).
Status ReadRope(Fields& f, ModelConfig& config) {
  const bool v5 = !f.Present("rope_scaling") && f.Present("rope_parameters");
  const char* key = v5 ? "rope_parameters" : "rope_scaling";
  std::optional<double> theta_in_parameters;
  if (f.Has(key)) {
    const json& rope = f.Raw(key);
    if (!rope.is_object()) return f.Error(std::string("field '") + key + "' must be an object");
    Fields r(rope, "");
    // r's messages start with its empty source's ": ".
    auto sub = [&](const Status& s) {
      return f.Error("in " + std::string(key) + ": " + s.message().substr(2));
    };
    auto type_new = r.String("rope_type");
    auto type_old = r.String("type");
    if (!type_new.ok()) return sub(type_new.status());
    if (!type_old.ok()) return sub(type_old.status());
    // As transformers: a legacy "type" overrides "rope_type".
    std::optional<std::string> type = *type_old ? *type_old : *type_new;
    if (v5) {
      auto theta = r.Double("rope_theta");
      if (!theta.ok()) return sub(theta.status());
      theta_in_parameters = *theta;
    }
    if (!type) {
      if (!v5) return f.Error("rope_scaling has no 'rope_type' (or 'type')");
      type = "default";
    }
    if (*type == "default") {
      config.rope_scaling.reset();
    } else if (*type == "linear" || *type == "llama3") {
      RopeScaling s;
      s.type = *type == "linear" ? RopeScaling::Type::kLinear : RopeScaling::Type::kLlama3;
      s.legacy_type_key = type_old->has_value();
      auto factor = r.Double("factor");
      if (!factor.ok()) return sub(factor.status());
      if (!*factor) return f.Error(std::string(key) + " of type '" + *type + "' needs 'factor'");
      s.factor = **factor;
      if (s.type == RopeScaling::Type::kLlama3) {
        auto low = r.Double("low_freq_factor");
        auto high = r.Double("high_freq_factor");
        auto original = r.Int("original_max_position_embeddings");
        if (!low.ok()) return sub(low.status());
        if (!high.ok()) return sub(high.status());
        if (!original.ok()) return sub(original.status());
        if (!*low || !*high || !*original) {
          return f.Error(std::string(key) +
                         " of type 'llama3' needs 'factor', 'low_freq_factor', 'high_freq_factor' "
                         "and 'original_max_position_embeddings'");
        }
        s.low_freq_factor = **low;
        s.high_freq_factor = **high;
        s.original_max_position_embeddings = **original;
      }
      config.rope_scaling = s;
    } else {
      return UnimplementedError(f.Prefix() + "rope_scaling type " + Quote(*type) +
                                " is not supported; supported: linear, llama3");
    }
  }
  SOVAI_ASSIGN_OR_RETURN(auto theta, f.Double("rope_theta"));
  config.rope_theta = theta.value_or(theta_in_parameters.value_or(10000.0));
  return Status();
}

Status ReadTokenIds(Fields& f, const Defaults& defaults, ModelConfig& config) {
  // A missing key takes the class default; an explicit null means "none".
  if (f.Present("bos_token_id")) {
    SOVAI_ASSIGN_OR_RETURN(config.bos_token_id, f.Int("bos_token_id"));
  } else {
    config.bos_token_id = defaults.bos_token_id;
  }
  if (f.Present("eos_token_id")) {
    if (f.Has("eos_token_id")) {
      const json& eos = f.Raw("eos_token_id");
      if (eos.is_array()) {
        if (eos.size() > kMaxEosTokenIds) {
          return f.Error("eos_token_id lists more than " + std::to_string(kMaxEosTokenIds) +
                         " ids (kMaxEosTokenIds)");
        }
        config.eos_is_list = true;
        for (const json& id : eos) {
          if (!id.is_number_integer()) return f.Error("eos_token_id must hold integers");
          config.eos_token_ids.push_back(id.get<int64_t>());
        }
      } else {
        SOVAI_ASSIGN_OR_RETURN(auto id, f.Int("eos_token_id"));
        config.eos_token_ids.push_back(*id);
      }
    }
  } else if (defaults.eos_token_id) {
    config.eos_token_ids.push_back(*defaults.eos_token_id);
  }
  SOVAI_ASSIGN_OR_RETURN(config.pad_token_id, f.Int("pad_token_id"));
  return Status();
}

Status ReadSlidingWindow(Fields& f, const Defaults& defaults, ModelConfig& config) {
  if (config.architecture == Architecture::kLlama) return Status();  // llama has none
  if (f.Present("sliding_window")) {
    SOVAI_ASSIGN_OR_RETURN(config.sliding_window, f.Int("sliding_window"));
  } else {
    config.sliding_window = defaults.sliding_window;
  }
  if (config.architecture == Architecture::kMistral) return Status();
  SOVAI_ASSIGN_OR_RETURN(config.use_sliding_window, f.BoolOr("use_sliding_window", false));
  SOVAI_ASSIGN_OR_RETURN(config.max_window_layers,
                         f.IntOr("max_window_layers", defaults.max_window_layers));
  if (f.Has("layer_types")) {
    const json& types = f.Raw("layer_types");
    if (!types.is_array() || types.size() > static_cast<size_t>(kMaxHiddenLayers)) {
      return f.Error("field 'layer_types' must be a list of at most " +
                     std::to_string(kMaxHiddenLayers) + " entries");
    }
    for (const json& t : types) {
      if (t == "full_attention") {
        config.layer_types.push_back(LayerAttention::kFull);
      } else if (t == "sliding_attention") {
        config.layer_types.push_back(LayerAttention::kSliding);
      } else {
        return UnimplementedError(f.Prefix() + "layer type " + t.dump() +
                                  " is not supported; supported: full_attention, "
                                  "sliding_attention");
      }
    }
  }
  return Status();
}

Status CheckRange(std::string_view source, std::string_view field, int64_t value, int64_t max) {
  if (value < 1 || value > max) {
    return InvalidArgumentError(std::string(source) + ": " + std::string(field) + " (" +
                                std::to_string(value) + ") must be between 1 and " +
                                std::to_string(max));
  }
  return Status();
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

bool IsIgnoredBuffer(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  constexpr std::string_view kSuffix = ".self_attn.rotary_emb.inv_freq";
  return name.size() > kPrefix.size() + kSuffix.size() && name.starts_with(kPrefix) &&
         name.ends_with(kSuffix);
}

}  // namespace

std::string_view ModelTypeName(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return "llama";
    case Architecture::kMistral:
      return "mistral";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kQwen3:
      return "qwen3";
  }
  return "?";
}

std::string_view ArchitectureClassName(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return "LlamaForCausalLM";
    case Architecture::kMistral:
      return "MistralForCausalLM";
    case Architecture::kQwen2:
      return "Qwen2ForCausalLM";
    case Architecture::kQwen3:
      return "Qwen3ForCausalLM";
  }
  return "?";
}

bool ModelConfig::has_qkv_bias() const {
  switch (architecture) {
    case Architecture::kQwen2:
      return true;
    case Architecture::kMistral:
      return false;
    default:
      return attention_bias;
  }
}

bool ModelConfig::has_o_bias() const {
  return (architecture == Architecture::kLlama || architecture == Architecture::kQwen3) &&
         attention_bias;
}

std::optional<int64_t> ModelConfig::SlidingWindowForLayer(int64_t layer) const {
  switch (architecture) {
    case Architecture::kLlama:
      return std::nullopt;
    case Architecture::kMistral:
      return sliding_window;
    case Architecture::kQwen2:
    case Architecture::kQwen3:
      // transformers drops sliding_window when use_sliding_window is false, whatever
      // layer_types says.
      if (!use_sliding_window || !sliding_window) return std::nullopt;
      if (!layer_types.empty()) {
        if (layer < 0 || static_cast<size_t>(layer) >= layer_types.size()) return std::nullopt;
        return layer_types[layer] == LayerAttention::kSliding ? sliding_window : std::nullopt;
      }
      return layer >= max_window_layers ? sliding_window : std::nullopt;
  }
  return std::nullopt;
}

Result<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source) {
  auto parsed = base::ParseJson(json_text, {.max_bytes = kMaxModelConfigBytes, .max_depth = 32});
  if (!parsed.ok()) {
    return InvalidArgumentError(std::string(source) + ": " + parsed.status().message());
  }
  const json& obj = *parsed;
  if (!obj.is_object()) {
    return InvalidArgumentError(std::string(source) + ": the config is not a JSON object");
  }
  Fields f(obj, source);
  ModelConfig c;
  SOVAI_ASSIGN_OR_RETURN(c.architecture, ReadArchitecture(f, source));
  const Defaults d = DefaultsFor(c.architecture);

  if (f.Has("quantization_config")) {
    std::string method;
    const json& q = f.Raw("quantization_config");
    if (q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()) {
      method = " (" + q["quant_method"].get<std::string>() + ")";
    }
    return UnimplementedError(std::string(source) + ": quantized checkpoints" + method +
                              " are not supported; use an unquantized (F32, F16 or BF16) one");
  }

  SOVAI_ASSIGN_OR_RETURN(c.vocab_size, f.IntOr("vocab_size", d.vocab_size));
  SOVAI_ASSIGN_OR_RETURN(c.hidden_size, f.IntOr("hidden_size", 4096));
  SOVAI_ASSIGN_OR_RETURN(c.intermediate_size, f.IntOr("intermediate_size", d.intermediate_size));
  SOVAI_ASSIGN_OR_RETURN(c.num_hidden_layers, f.IntOr("num_hidden_layers", 32));
  SOVAI_ASSIGN_OR_RETURN(c.num_attention_heads, f.IntOr("num_attention_heads", 32));
  // Missing: the class default; null: num_attention_heads (both as transformers).
  if (f.Present("num_key_value_heads")) {
    SOVAI_ASSIGN_OR_RETURN(c.num_key_value_heads,
                           f.IntOr("num_key_value_heads", c.num_attention_heads));
  } else {
    c.num_key_value_heads =
        d.num_key_value_heads > 0 ? d.num_key_value_heads : c.num_attention_heads;
  }
  if (c.num_attention_heads <= 0) {
    return f.Error("num_attention_heads (" + std::to_string(c.num_attention_heads) +
                   ") must be positive");
  }
  int64_t derived_head_dim = c.hidden_size / c.num_attention_heads;
  if (f.Present("head_dim")) {
    SOVAI_ASSIGN_OR_RETURN(c.head_dim, f.IntOr("head_dim", derived_head_dim));
  } else {
    c.head_dim = d.head_dim > 0 ? d.head_dim : derived_head_dim;
  }
  SOVAI_ASSIGN_OR_RETURN(c.max_position_embeddings,
                         f.IntOr("max_position_embeddings", d.max_position_embeddings));
  SOVAI_ASSIGN_OR_RETURN(c.rms_norm_eps, f.DoubleOr("rms_norm_eps", 1e-6));
  SOVAI_RETURN_IF_ERROR(ReadRope(f, c));
  SOVAI_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.BoolOr("tie_word_embeddings", false));
  if (c.architecture == Architecture::kLlama || c.architecture == Architecture::kQwen3) {
    SOVAI_ASSIGN_OR_RETURN(c.attention_bias, f.BoolOr("attention_bias", false));
  }
  if (c.architecture == Architecture::kLlama) {
    SOVAI_ASSIGN_OR_RETURN(c.mlp_bias, f.BoolOr("mlp_bias", false));
  }
  SOVAI_ASSIGN_OR_RETURN(auto act, f.String("hidden_act"));
  c.hidden_act = act.value_or("silu");
  if (c.hidden_act != "silu" && c.hidden_act != "swish") {
    return UnimplementedError(std::string(source) + ": hidden_act " + Quote(c.hidden_act) +
                              " is not supported; supported: silu");
  }
  SOVAI_RETURN_IF_ERROR(ReadSlidingWindow(f, d, c));

  // transformers >= 4.56 writes "dtype"; older versions "torch_dtype".
  const char* dtype_key = f.Present("torch_dtype") ? "torch_dtype" : "dtype";
  SOVAI_ASSIGN_OR_RETURN(auto dtype, f.String(dtype_key));
  f.Has("dtype");  // consumed either way: written back as torch_dtype
  if (dtype) {
    c.torch_dtype = tensor::ParseDType(*dtype);
    if (!c.torch_dtype) {
      return UnimplementedError(std::string(source) + ": " + dtype_key + " " + Quote(*dtype) +
                                " is not supported; supported: float32, float16, bfloat16");
    }
  }
  SOVAI_RETURN_IF_ERROR(ReadTokenIds(f, d, c));
  c.extra = f.Rest();
  SOVAI_RETURN_IF_ERROR(ValidateModelConfig(c, source));
  return c;
}

Status ValidateModelConfig(const ModelConfig& c, std::string_view source) {
  std::string p = std::string(source) + ": ";
  SOVAI_RETURN_IF_ERROR(CheckRange(source, "vocab_size", c.vocab_size, kMaxVocabSize));
  SOVAI_RETURN_IF_ERROR(CheckRange(source, "hidden_size", c.hidden_size, kMaxHiddenSize));
  SOVAI_RETURN_IF_ERROR(
      CheckRange(source, "intermediate_size", c.intermediate_size, kMaxIntermediateSize));
  SOVAI_RETURN_IF_ERROR(
      CheckRange(source, "num_hidden_layers", c.num_hidden_layers, kMaxHiddenLayers));
  SOVAI_RETURN_IF_ERROR(
      CheckRange(source, "num_attention_heads", c.num_attention_heads, kMaxAttentionHeads));
  SOVAI_RETURN_IF_ERROR(
      CheckRange(source, "num_key_value_heads", c.num_key_value_heads, c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return InvalidArgumentError(p + "num_attention_heads (" +
                                std::to_string(c.num_attention_heads) +
                                ") must be a multiple of num_key_value_heads (" +
                                std::to_string(c.num_key_value_heads) + ")");
  }
  SOVAI_RETURN_IF_ERROR(CheckRange(source, "head_dim", c.head_dim, kMaxHeadDim));
  if (c.head_dim % 2 != 0) {
    return InvalidArgumentError(p + "head_dim (" + std::to_string(c.head_dim) +
                                ") must be even (rotary embeddings rotate pairs)");
  }
  SOVAI_RETURN_IF_ERROR(CheckRange(source, "max_position_embeddings", c.max_position_embeddings,
                                   kMaxPositionEmbeddings));
  if (!std::isfinite(c.rms_norm_eps) || c.rms_norm_eps <= 0 || c.rms_norm_eps >= 1) {
    return InvalidArgumentError(p + "rms_norm_eps must be a number between 0 and 1 (exclusive)");
  }
  if (!std::isfinite(c.rope_theta) || c.rope_theta <= 0) {
    return InvalidArgumentError(p + "rope_theta must be a positive number");
  }
  if (c.rope_scaling) {
    const RopeScaling& s = *c.rope_scaling;
    if (!std::isfinite(s.factor) || s.factor < 1) {
      return InvalidArgumentError(p + "rope_scaling.factor must be a number >= 1");
    }
    if (s.type == RopeScaling::Type::kLlama3) {
      if (!std::isfinite(s.low_freq_factor) || !std::isfinite(s.high_freq_factor) ||
          s.low_freq_factor <= 0 || s.high_freq_factor <= s.low_freq_factor) {
        return InvalidArgumentError(p +
                                    "rope_scaling needs 0 < low_freq_factor < high_freq_factor");
      }
      SOVAI_RETURN_IF_ERROR(CheckRange(source, "rope_scaling.original_max_position_embeddings",
                                       s.original_max_position_embeddings, kMaxPositionEmbeddings));
    }
  }
  if (c.hidden_act != "silu" && c.hidden_act != "swish") {
    return UnimplementedError(p + "hidden_act " + Quote(c.hidden_act) +
                              " is not supported; supported: silu");
  }
  if (c.sliding_window && *c.sliding_window < 1) {
    return InvalidArgumentError(p + "sliding_window (" + std::to_string(*c.sliding_window) +
                                ") must be positive");
  }
  if (c.max_window_layers < 0) {
    return InvalidArgumentError(p + "max_window_layers must not be negative");
  }
  if (!c.layer_types.empty() && c.layer_types.size() != static_cast<size_t>(c.num_hidden_layers)) {
    return InvalidArgumentError(p + "layer_types has " + std::to_string(c.layer_types.size()) +
                                " entries for " + std::to_string(c.num_hidden_layers) + " layers");
  }
  if (c.bos_token_id && (*c.bos_token_id < 0 || *c.bos_token_id >= c.vocab_size)) {
    return InvalidArgumentError(p + "bos_token_id (" + std::to_string(*c.bos_token_id) +
                                ") is outside the vocabulary (vocab_size " +
                                std::to_string(c.vocab_size) + ")");
  }
  if (c.eos_token_ids.size() > kMaxEosTokenIds) {
    return InvalidArgumentError(p + "more than " + std::to_string(kMaxEosTokenIds) +
                                " eos_token_id values");
  }
  for (int64_t id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgumentError(p + "eos_token_id (" + std::to_string(id) +
                                  ") is outside the vocabulary (vocab_size " +
                                  std::to_string(c.vocab_size) + ")");
    }
  }
  if (!c.extra.is_object()) return InvalidArgumentError(p + "extra must be a JSON object");
  return Status();
}

Result<std::string> ModelConfigToJson(const ModelConfig& c) {
  SOVAI_RETURN_IF_ERROR(ValidateModelConfig(c));
  json out = c.extra;
  out["architectures"] = json::array({std::string(ArchitectureClassName(c.architecture))});
  out["model_type"] = std::string(ModelTypeName(c.architecture));
  out["vocab_size"] = c.vocab_size;
  out["hidden_size"] = c.hidden_size;
  out["intermediate_size"] = c.intermediate_size;
  out["num_hidden_layers"] = c.num_hidden_layers;
  out["num_attention_heads"] = c.num_attention_heads;
  out["num_key_value_heads"] = c.num_key_value_heads;
  out["head_dim"] = c.head_dim;
  out["hidden_act"] = c.hidden_act;
  out["max_position_embeddings"] = c.max_position_embeddings;
  out["rms_norm_eps"] = c.rms_norm_eps;
  out["rope_theta"] = c.rope_theta;
  if (c.rope_scaling) {
    const RopeScaling& s = *c.rope_scaling;
    std::string type = s.type == RopeScaling::Type::kLinear ? "linear" : "llama3";
    json r = {{"rope_type", type}, {"factor", s.factor}};
    if (s.legacy_type_key) r["type"] = type;
    if (s.type == RopeScaling::Type::kLlama3) {
      r["low_freq_factor"] = s.low_freq_factor;
      r["high_freq_factor"] = s.high_freq_factor;
      r["original_max_position_embeddings"] = s.original_max_position_embeddings;
    }
    out["rope_scaling"] = r;
  } else {
    out["rope_scaling"] = nullptr;
  }
  out["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.architecture == Architecture::kLlama || c.architecture == Architecture::kQwen3) {
    out["attention_bias"] = c.attention_bias;
  }
  if (c.architecture == Architecture::kLlama) out["mlp_bias"] = c.mlp_bias;
  if (c.architecture != Architecture::kLlama) {
    out["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
  }
  if (c.architecture == Architecture::kQwen2 || c.architecture == Architecture::kQwen3) {
    out["use_sliding_window"] = c.use_sliding_window;
    out["max_window_layers"] = c.max_window_layers;
    if (!c.layer_types.empty()) {
      json types = json::array();
      for (LayerAttention t : c.layer_types) {
        types.push_back(t == LayerAttention::kSliding ? "sliding_attention" : "full_attention");
      }
      out["layer_types"] = types;
    }
  }
  if (c.torch_dtype) {
    switch (*c.torch_dtype) {
      case tensor::DType::kF32:
        out["torch_dtype"] = "float32";
        break;
      case tensor::DType::kF16:
        out["torch_dtype"] = "float16";
        break;
      case tensor::DType::kBF16:
        out["torch_dtype"] = "bfloat16";
        break;
    }
  }
  out["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  if (c.eos_is_list) {
    out["eos_token_id"] = c.eos_token_ids;
  } else if (c.eos_token_ids.size() == 1) {
    out["eos_token_id"] = c.eos_token_ids[0];
  } else if (c.eos_token_ids.empty()) {
    out["eos_token_id"] = nullptr;
  } else {
    out["eos_token_id"] = c.eos_token_ids;
  }
  if (c.pad_token_id) out["pad_token_id"] = *c.pad_token_id;
  return base::DumpJson(out, 2) + "\n";
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const uint64_t hidden = u(c.hidden_size);
  const uint64_t inter = u(c.intermediate_size);
  const uint64_t q = u(c.q_dim());
  const uint64_t kv = u(c.kv_dim());
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {u(c.vocab_size), hidden}, false});
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    std::string p = "model.layers." + std::to_string(layer) + ".";
    out.push_back({p + "input_layernorm.weight", {hidden}, false});
    out.push_back({p + "self_attn.q_proj.weight", {q, hidden}, false});
    out.push_back({p + "self_attn.k_proj.weight", {kv, hidden}, false});
    out.push_back({p + "self_attn.v_proj.weight", {kv, hidden}, false});
    out.push_back({p + "self_attn.o_proj.weight", {hidden, q}, false});
    if (c.has_qkv_bias()) {
      out.push_back({p + "self_attn.q_proj.bias", {q}, false});
      out.push_back({p + "self_attn.k_proj.bias", {kv}, false});
      out.push_back({p + "self_attn.v_proj.bias", {kv}, false});
    }
    if (c.has_o_bias()) out.push_back({p + "self_attn.o_proj.bias", {hidden}, false});
    if (c.has_qk_norm()) {
      out.push_back({p + "self_attn.q_norm.weight", {u(c.head_dim)}, false});
      out.push_back({p + "self_attn.k_norm.weight", {u(c.head_dim)}, false});
    }
    out.push_back({p + "post_attention_layernorm.weight", {hidden}, false});
    out.push_back({p + "mlp.gate_proj.weight", {inter, hidden}, false});
    out.push_back({p + "mlp.up_proj.weight", {inter, hidden}, false});
    out.push_back({p + "mlp.down_proj.weight", {hidden, inter}, false});
    if (c.mlp_bias) {
      out.push_back({p + "mlp.gate_proj.bias", {inter}, false});
      out.push_back({p + "mlp.up_proj.bias", {inter}, false});
      out.push_back({p + "mlp.down_proj.bias", {hidden}, false});
    }
  }
  out.push_back({"model.norm.weight", {hidden}, false});
  out.push_back({"lm_head.weight", {u(c.vocab_size), hidden}, c.tie_word_embeddings});
  return out;
}

Status CheckTensors(const ModelConfig& config, std::span<const FoundTensor> found,
                    std::string_view source) {
  std::vector<ExpectedTensor> expected = ExpectedTensors(config);
  std::unordered_map<std::string_view, size_t> index;
  for (size_t i = 0; i < expected.size(); ++i) index.emplace(expected[i].name, i);
  std::vector<bool> seen(expected.size(), false);
  std::vector<std::string> problems;
  std::string model = std::string(ModelTypeName(config.architecture)) + " model";

  for (const FoundTensor& t : found) {
    if (IsIgnoredBuffer(t.name)) continue;
    std::string where = "tensor " + Quote(t.name) + " in " + Quote(t.file);
    auto it = index.find(t.name);
    if (it == index.end()) {
      problems.push_back("unexpected " + where + ": a " + model +
                         " with this config has no such tensor");
      continue;
    }
    const ExpectedTensor& e = expected[it->second];
    if (seen[it->second]) {
      problems.push_back(where + " appears twice");
      continue;
    }
    seen[it->second] = true;
    if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
      problems.push_back(where + " has dtype " + std::string(t.dtype) +
                         "; model weights must be F32, F16 or BF16");
      continue;
    }
    if (!std::equal(t.shape.begin(), t.shape.end(), e.shape.begin(), e.shape.end())) {
      problems.push_back(where + " has shape " +
                         ShapeString(std::vector<uint64_t>(t.shape.begin(), t.shape.end())) +
                         ", expected " + ShapeString(e.shape) + " from the config");
    }
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (seen[i] || expected[i].optional) continue;
    problems.push_back("missing tensor " + Quote(expected[i].name) + " (shape " +
                       ShapeString(expected[i].shape) + ") in " + Quote(source));
  }
  if (problems.empty()) return Status();
  std::string message = problems[0];
  if (problems.size() > 1) {
    message += " (and " + std::to_string(problems.size() - 1) + " more problem" +
               (problems.size() > 2 ? "s" : "") + ")";
  }
  return InvalidArgumentError(message);
}

}  // namespace sovai::model
