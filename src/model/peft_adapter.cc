#include "model/peft_adapter.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "base/json.h"
#include "model/limits.h"
#include "model/model_dir.h"
#include "model/safetensors.h"

namespace sovai::model {
namespace {

using base::InvalidArgumentError;
using base::Result;
using base::Status;
using base::UnimplementedError;
using nlohmann::json;

constexpr std::string_view kConfigFile = "adapter_config.json";
constexpr std::string_view kWeightsFile = "adapter_model.safetensors";
constexpr std::string_view kKeyPrefix = "base_model.model.model.layers.";
// Layer indices are at most kMaxHiddenLayers (4 digits); more digits cannot be a valid layer.
constexpr size_t kMaxLayerDigits = 6;
// Elements converted per piece when weights are written.
constexpr size_t kConvertChunkElements = 64 * 1024;

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string SupportedModules() {
  std::string out;
  for (LoraModule m : kAllLoraModules) {
    if (!out.empty()) out += ", ";
    out += LoraModuleName(m);
  }
  return out;
}

// Whether the field is absent, null, false, or an empty list/object: PEFT's "not used".
bool IsUnset(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return true;
  if (it->is_boolean()) return !it->get<bool>();
  if (it->is_array() || it->is_object()) return it->empty();
  return false;
}

struct ParsedKey {
  int64_t layer;
  LoraModule module;
  bool is_a;
};

// Parses a PEFT key; nullopt when it is not one of ours.
std::optional<ParsedKey> ParseKey(std::string_view key) {
  if (!key.starts_with(kKeyPrefix)) return std::nullopt;
  key.remove_prefix(kKeyPrefix.size());
  size_t digits = 0;
  while (digits < key.size() && key[digits] >= '0' && key[digits] <= '9') ++digits;
  if (digits == 0 || digits > kMaxLayerDigits || (digits > 1 && key[0] == '0')) return std::nullopt;
  int64_t layer = 0;
  for (size_t i = 0; i < digits; ++i) layer = layer * 10 + (key[i] - '0');
  key.remove_prefix(digits);
  for (LoraModule m : kAllLoraModules) {
    for (bool is_a : {true, false}) {
      std::string rest = "." + std::string(LoraModuleParent(m)) + "." +
                         std::string(LoraModuleName(m)) + (is_a ? ".lora_A" : ".lora_B") +
                         ".weight";
      if (key == rest) return ParsedKey{layer, m, is_a};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<LoraModule> ParseLoraModule(std::string_view name) {
  for (LoraModule m : kAllLoraModules) {
    if (LoraModuleName(m) == name) return m;
  }
  return std::nullopt;
}

std::string_view LoraModuleName(LoraModule module) {
  switch (module) {
    case LoraModule::kQ:
      return "q_proj";
    case LoraModule::kK:
      return "k_proj";
    case LoraModule::kV:
      return "v_proj";
    case LoraModule::kO:
      return "o_proj";
    case LoraModule::kGate:
      return "gate_proj";
    case LoraModule::kUp:
      return "up_proj";
    case LoraModule::kDown:
      return "down_proj";
  }
  return "?";
}

std::string_view LoraModuleParent(LoraModule module) {
  switch (module) {
    case LoraModule::kQ:
    case LoraModule::kK:
    case LoraModule::kV:
    case LoraModule::kO:
      return "self_attn";
    default:
      return "mlp";
  }
}

LoraModuleShape ModuleShape(const ModelConfig& base, LoraModule module) {
  switch (module) {
    case LoraModule::kQ:
      return {base.hidden_size, base.q_dim()};
    case LoraModule::kK:
    case LoraModule::kV:
      return {base.hidden_size, base.kv_dim()};
    case LoraModule::kO:
      return {base.q_dim(), base.hidden_size};
    case LoraModule::kGate:
    case LoraModule::kUp:
      return {base.hidden_size, base.intermediate_size};
    case LoraModule::kDown:
      return {base.intermediate_size, base.hidden_size};
  }
  return {};
}

double LoraConfig::Scale() const {
  return use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r))
                    : lora_alpha / static_cast<double>(r);
}

bool LoraConfig::Targets(LoraModule module) const {
  return std::find(target_modules.begin(), target_modules.end(), module) != target_modules.end();
}

bool LoraConfig::CoversLayer(int64_t layer) const {
  return layers_to_transform.empty() ||
         std::binary_search(layers_to_transform.begin(), layers_to_transform.end(), layer);
}

std::string LoraTensorName(int64_t layer, LoraModule module, bool is_a) {
  return std::string(kKeyPrefix) + std::to_string(layer) + "." +
         std::string(LoraModuleParent(module)) + "." + std::string(LoraModuleName(module)) +
         (is_a ? ".lora_A.weight" : ".lora_B.weight");
}

Result<LoraConfig> ParseLoraConfig(std::string_view json_text, std::string_view source) {
  std::string p = std::string(source) + ": ";
  auto parsed = base::ParseJson(json_text, {.max_bytes = kMaxAdapterConfigBytes, .max_depth = 32});
  if (!parsed.ok()) return InvalidArgumentError(p + parsed.status().message());
  const json& obj = *parsed;
  if (!obj.is_object()) return InvalidArgumentError(p + "the config is not a JSON object");
  auto wrap = [&](const Status& s) { return InvalidArgumentError(p + s.message()); };
  // Keys turned into LoraConfig fields; every other key is kept in `extra`.
  std::set<std::string> consumed;
  auto unsupported = [&](std::string_view what) {
    return UnimplementedError(p + std::string(what) + " is not supported");
  };

  LoraConfig c;
  consumed.insert("peft_type");
  auto peft_type = base::GetOptionalString(obj, "peft_type");
  if (!peft_type.ok()) return wrap(peft_type.status());
  if (!*peft_type) return InvalidArgumentError(p + "missing required field 'peft_type'");
  if (**peft_type != "LORA") {
    return UnimplementedError(p + "peft_type " + Quote(**peft_type) +
                              " is not supported; supported: LORA");
  }
  consumed.insert("task_type");
  auto task_type = base::GetOptionalString(obj, "task_type");
  if (!task_type.ok()) return wrap(task_type.status());
  if (*task_type && **task_type != "CAUSAL_LM") {
    return UnimplementedError(p + "task_type " + Quote(**task_type) +
                              " is not supported; supported: CAUSAL_LM");
  }

  consumed.insert("r");
  auto r = base::GetOptionalInt(obj, "r");
  if (!r.ok()) return wrap(r.status());
  c.r = r->value_or(8);  // PEFT's default
  consumed.insert("lora_alpha");
  auto alpha = base::GetOptionalDouble(obj, "lora_alpha");
  if (!alpha.ok()) return wrap(alpha.status());
  c.lora_alpha = alpha->value_or(8.0);
  consumed.insert("lora_dropout");
  auto dropout = base::GetOptionalDouble(obj, "lora_dropout");
  if (!dropout.ok()) return wrap(dropout.status());
  c.lora_dropout = dropout->value_or(0.0);
  consumed.insert("use_rslora");
  auto rslora = base::GetOptionalBool(obj, "use_rslora");
  if (!rslora.ok()) return wrap(rslora.status());
  c.use_rslora = rslora->value_or(false);
  consumed.insert("base_model_name_or_path");
  auto base_model = base::GetOptionalString(obj, "base_model_name_or_path");
  if (!base_model.ok()) return wrap(base_model.status());
  c.base_model_name_or_path = base_model->value_or("");

  consumed.insert("target_modules");
  auto targets = obj.find("target_modules");
  if (targets == obj.end() || targets->is_null()) {
    // PEFT's default for llama, mistral and qwen2 models.
    c.target_modules = {LoraModule::kQ, LoraModule::kV};
  } else if (targets->is_string()) {
    const std::string& s = targets->get_ref<const std::string&>();
    if (s != "all-linear") {
      return UnimplementedError(p + "target_modules as a regular expression (" + Quote(s) +
                                ") is not supported; list the module names (" + SupportedModules() +
                                ") or use "
                                "\"all-linear\"");
    }
    c.target_modules.assign(std::begin(kAllLoraModules), std::end(kAllLoraModules));
  } else if (targets->is_array()) {
    if (targets->empty()) return InvalidArgumentError(p + "target_modules is empty");
    for (const json& t : *targets) {
      if (!t.is_string()) return InvalidArgumentError(p + "target_modules must hold strings");
      auto m = ParseLoraModule(t.get_ref<const std::string&>());
      if (!m) {
        return UnimplementedError(p + "target module " + t.dump() +
                                  " is not supported; supported: " + SupportedModules());
      }
      c.target_modules.push_back(*m);
    }
    std::sort(c.target_modules.begin(), c.target_modules.end());
    c.target_modules.erase(std::unique(c.target_modules.begin(), c.target_modules.end()),
                           c.target_modules.end());
  } else {
    return InvalidArgumentError(p + "target_modules must be a list of module names");
  }

  consumed.insert("layers_to_transform");
  auto layers = obj.find("layers_to_transform");
  if (layers != obj.end() && !layers->is_null()) {
    json list = layers->is_array() ? *layers : json::array({*layers});
    if (list.size() > static_cast<size_t>(kMaxHiddenLayers)) {
      return InvalidArgumentError(p + "layers_to_transform lists more than " +
                                  std::to_string(kMaxHiddenLayers) + " layers");
    }
    for (const json& l : list) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0) {
        return InvalidArgumentError(p + "layers_to_transform must hold non-negative integers");
      }
      c.layers_to_transform.push_back(l.get<int64_t>());
    }
    std::sort(c.layers_to_transform.begin(), c.layers_to_transform.end());
    c.layers_to_transform.erase(
        std::unique(c.layers_to_transform.begin(), c.layers_to_transform.end()),
        c.layers_to_transform.end());
    // layers_pattern names the ModuleList the indices refer to; Llama-family models have one.
    auto pattern = obj.find("layers_pattern");
    if (pattern != obj.end() && !pattern->is_null() && *pattern != "layers" &&
        *pattern != json::array({"layers"})) {
      return UnimplementedError(p + "layers_pattern " + pattern->dump() +
                                " is not supported; supported: \"layers\"");
    }
  }

  // Features that change what the adapter computes: refused unless unused. These keys are not
  // consumed, so that their (unused) values are written back as they were.
  auto bias = base::GetOptionalString(obj, "bias");
  if (!bias.ok()) return wrap(bias.status());
  if (*bias && **bias != "none") {
    return UnimplementedError(p + "bias " + Quote(**bias) + " is not supported; supported: none");
  }
  if (!IsUnset(obj, "fan_in_fan_out")) return unsupported("fan_in_fan_out true");
  if (!IsUnset(obj, "use_dora")) return unsupported("use_dora (DoRA)");
  if (!IsUnset(obj, "rank_pattern")) return unsupported("rank_pattern (per-module ranks)");
  if (!IsUnset(obj, "alpha_pattern")) return unsupported("alpha_pattern (per-module alphas)");
  if (!IsUnset(obj, "modules_to_save")) {
    return unsupported("modules_to_save (fully trained modules besides LoRA)");
  }
  if (!IsUnset(obj, "layer_replication")) return unsupported("layer_replication");
  if (!IsUnset(obj, "exclude_modules")) return unsupported("exclude_modules");
  if (!IsUnset(obj, "target_parameters")) return unsupported("target_parameters");
  if (!IsUnset(obj, "trainable_token_indices")) return unsupported("trainable_token_indices");

  for (const auto& [key, value] : obj.items()) {
    if (consumed.count(key) == 0) c.extra[key] = value;
  }
  if (c.r < 1 || c.r > kMaxLoraRank) {
    return InvalidArgumentError(p + "r (" + std::to_string(c.r) + ") must be between 1 and " +
                                std::to_string(kMaxLoraRank));
  }
  if (!std::isfinite(c.lora_alpha) || c.lora_alpha <= 0) {
    return InvalidArgumentError(p + "lora_alpha must be a positive number");
  }
  if (!std::isfinite(c.lora_dropout) || c.lora_dropout < 0 || c.lora_dropout >= 1) {
    return InvalidArgumentError(p + "lora_dropout must be in [0, 1)");
  }
  return c;
}

Result<std::string> LoraConfigToJson(const LoraConfig& c) {
  if (c.r < 1 || c.r > kMaxLoraRank || !std::isfinite(c.lora_alpha) || c.lora_alpha <= 0 ||
      c.target_modules.empty() || !c.extra.is_object()) {
    return InvalidArgumentError("invalid LoRA config: r, lora_alpha or target_modules");
  }
  json out = c.extra;
  out["peft_type"] = "LORA";
  out["task_type"] = "CAUSAL_LM";
  out["r"] = c.r;
  // PEFT configs carry an integer alpha in the common case; keep it an integer then.
  double integral;
  if (std::modf(c.lora_alpha, &integral) == 0.0 && std::fabs(c.lora_alpha) < 1e15) {
    out["lora_alpha"] = static_cast<int64_t>(c.lora_alpha);
  } else {
    out["lora_alpha"] = c.lora_alpha;
  }
  out["lora_dropout"] = c.lora_dropout;
  json targets = json::array();
  for (LoraModule m : c.target_modules) targets.push_back(std::string(LoraModuleName(m)));
  out["target_modules"] = targets;
  out["use_rslora"] = c.use_rslora;
  out["base_model_name_or_path"] =
      c.base_model_name_or_path.empty() ? json(nullptr) : json(c.base_model_name_or_path);
  out["layers_to_transform"] =
      c.layers_to_transform.empty() ? json(nullptr) : json(c.layers_to_transform);
  // What PEFT always writes, unless the source said otherwise (their values were checked to be
  // "unused" when parsed).
  if (!out.contains("bias")) out["bias"] = "none";
  if (!out.contains("fan_in_fan_out")) out["fan_in_fan_out"] = false;
  if (!out.contains("modules_to_save")) out["modules_to_save"] = nullptr;
  if (!out.contains("inference_mode")) out["inference_mode"] = true;
  if (!out.contains("init_lora_weights")) out["init_lora_weights"] = true;
  return base::DumpJson(out, 2) + "\n";
}

const LoraModuleWeights* LoraAdapter::Find(int64_t layer, LoraModule module) const {
  auto it =
      std::lower_bound(modules.begin(), modules.end(), std::make_pair(layer, module),
                       [](const LoraModuleWeights& w, const std::pair<int64_t, LoraModule>& k) {
                         return std::make_pair(w.layer, w.module) < k;
                       });
  if (it == modules.end() || it->layer != layer || it->module != module) return nullptr;
  return &*it;
}

Status ValidateLoraAdapter(const LoraAdapter& adapter, const ModelConfig& base) {
  const LoraConfig& c = adapter.config;
  SOVAI_RETURN_IF_ERROR(LoraConfigToJson(c).status());
  for (int64_t layer : c.layers_to_transform) {
    if (layer >= base.num_hidden_layers) {
      return InvalidArgumentError("layers_to_transform names layer " + std::to_string(layer) +
                                  ", but the base model has " +
                                  std::to_string(base.num_hidden_layers) + " layers");
    }
  }
  if (!std::is_sorted(adapter.modules.begin(), adapter.modules.end(),
                      [](const LoraModuleWeights& a, const LoraModuleWeights& b) {
                        return std::tie(a.layer, a.module) < std::tie(b.layer, b.module);
                      })) {
    return InvalidArgumentError("adapter modules must be sorted by (layer, module)");
  }
  size_t expected = 0;
  for (int64_t layer = 0; layer < base.num_hidden_layers; ++layer) {
    if (!c.CoversLayer(layer)) continue;
    for (LoraModule m : c.target_modules) {
      const LoraModuleWeights* w = adapter.Find(layer, m);
      if (w == nullptr) {
        return InvalidArgumentError("the adapter has no weights for layer " +
                                    std::to_string(layer) + " " + std::string(LoraModuleName(m)));
      }
      ++expected;
      LoraModuleShape s = ModuleShape(base, m);
      size_t a_size = static_cast<size_t>(c.r * s.in_features);
      size_t b_size = static_cast<size_t>(s.out_features * c.r);
      if (w->a.size() != a_size || w->b.size() != b_size) {
        return InvalidArgumentError(
            "layer " + std::to_string(layer) + " " + std::string(LoraModuleName(m)) + ": A has " +
            std::to_string(w->a.size()) + " and B " + std::to_string(w->b.size()) +
            " values, expected r*in = " + std::to_string(a_size) +
            " and out*r = " + std::to_string(b_size));
      }
    }
  }
  if (adapter.modules.size() != expected) {
    return InvalidArgumentError("the adapter has " + std::to_string(adapter.modules.size()) +
                                " modules, but its config covers " + std::to_string(expected) +
                                " (duplicates, or modules outside target_modules / "
                                "layers_to_transform / the base model's layers)");
  }
  return Status();
}

Result<LoraAdapter> LoadLoraAdapter(base::Env& env, const std::string& dir,
                                    const ModelConfig& base) {
  std::string config_path = base::JoinPath(dir, kConfigFile);
  std::string weights_path = base::JoinPath(dir, kWeightsFile);
  if (!env.FileExists(config_path)) {
    return base::NotFoundError("'" + dir + "' has no adapter_config.json: not a PEFT adapter");
  }
  SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(config_path, kMaxAdapterConfigBytes));
  LoraAdapter adapter;
  SOVAI_ASSIGN_OR_RETURN(adapter.config, ParseLoraConfig(text, config_path));
  const LoraConfig& c = adapter.config;
  for (int64_t layer : c.layers_to_transform) {
    if (layer >= base.num_hidden_layers) {
      return InvalidArgumentError(config_path + ": layers_to_transform names layer " +
                                  std::to_string(layer) + ", but the base model has " +
                                  std::to_string(base.num_hidden_layers) + " layers");
    }
  }
  if (!env.FileExists(weights_path)) {
    if (env.FileExists(base::JoinPath(dir, "adapter_model.bin"))) {
      return UnimplementedError(
          "'" + dir +
          "' holds adapter_model.bin, a PyTorch pickle (which can run code when "
          "loaded); save the adapter with safe_serialization=True");
    }
    return base::NotFoundError("'" + dir + "' has no adapter_model.safetensors");
  }
  SOVAI_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(weights_path));
  std::string p = weights_path + ": ";

  // (layer, module) -> the A and B tensors found.
  std::map<std::pair<int64_t, LoraModule>,
           std::pair<const SafetensorsTensor*, const SafetensorsTensor*>>
      found;
  for (const SafetensorsTensor& t : file->tensors()) {
    auto key = ParseKey(t.name);
    if (!key) {
      return InvalidArgumentError(
          p + "unexpected key " + Quote(t.name) +
          " (expected base_model.model.model.layers.<N>.<self_attn|mlp>.<module>.lora_<A|B>."
          "weight for a LoRA adapter of the projections " +
          SupportedModules() + ")");
    }
    std::string module_name(LoraModuleName(key->module));
    if (key->layer >= base.num_hidden_layers) {
      return InvalidArgumentError(p + "key " + Quote(t.name) + " is for layer " +
                                  std::to_string(key->layer) + ", but the base model has " +
                                  std::to_string(base.num_hidden_layers) + " layers");
    }
    if (!c.Targets(key->module)) {
      return InvalidArgumentError(p + "key " + Quote(t.name) + " is for " + module_name +
                                  ", which target_modules does not list");
    }
    if (!c.CoversLayer(key->layer)) {
      return InvalidArgumentError(p + "key " + Quote(t.name) + " is for layer " +
                                  std::to_string(key->layer) +
                                  ", which layers_to_transform does not list");
    }
    SOVAI_RETURN_IF_ERROR(RequireComputable(t, weights_path).status());
    LoraModuleShape s = ModuleShape(base, key->module);
    std::vector<uint64_t> want = key->is_a
                                     ? std::vector<uint64_t>{static_cast<uint64_t>(c.r),
                                                             static_cast<uint64_t>(s.in_features)}
                                     : std::vector<uint64_t>{static_cast<uint64_t>(s.out_features),
                                                             static_cast<uint64_t>(c.r)};
    if (t.shape != want) {
      return InvalidArgumentError(
          p + "key " + Quote(t.name) + " has shape " + ShapeToString(t.shape) + ", expected " +
          ShapeToString(want) + (key->is_a ? " (r, in_features)" : " (out_features, r)") +
          " for r = " + std::to_string(c.r) + " and the base model's " + module_name);
    }
    auto& slot = found[{key->layer, key->module}];
    (key->is_a ? slot.first : slot.second) = &t;
  }

  for (int64_t layer = 0; layer < base.num_hidden_layers; ++layer) {
    if (!c.CoversLayer(layer)) continue;
    for (LoraModule m : c.target_modules) {
      auto it = found.find({layer, m});
      const SafetensorsTensor* a = it == found.end() ? nullptr : it->second.first;
      const SafetensorsTensor* b = it == found.end() ? nullptr : it->second.second;
      if (a == nullptr || b == nullptr) {
        return InvalidArgumentError(p + "missing key " +
                                    Quote(LoraTensorName(layer, m, a == nullptr)) +
                                    " (target_modules " + "lists " +
                                    std::string(LoraModuleName(m)) + " for every covered layer)");
      }
      LoraModuleWeights w;
      w.layer = layer;
      w.module = m;
      SOVAI_ASSIGN_OR_RETURN(w.a, file->ReadF32(a->name));
      SOVAI_ASSIGN_OR_RETURN(w.b, file->ReadF32(b->name));
      adapter.modules.push_back(std::move(w));
    }
  }
  return adapter;
}

Status WriteLoraAdapter(base::Env& env, const std::string& dir, const LoraAdapter& adapter,
                        const ModelConfig& base, tensor::DType dtype) {
  SOVAI_RETURN_IF_ERROR(ValidateLoraAdapter(adapter, base));
  SOVAI_ASSIGN_OR_RETURN(std::string config_json, LoraConfigToJson(adapter.config));
  SafetensorsWriter writer;
  SOVAI_RETURN_IF_ERROR(writer.SetMetadata({{"format", "pt"}}));
  const uint64_t r = static_cast<uint64_t>(adapter.config.r);
  for (const LoraModuleWeights& w : adapter.modules) {
    LoraModuleShape s = ModuleShape(base, w.module);
    for (bool is_a : {true, false}) {
      const std::vector<float>& values = is_a ? w.a : w.b;
      TensorToWrite t;
      t.name = LoraTensorName(w.layer, w.module, is_a);
      t.dtype = ToSafetensorsDType(dtype);
      t.shape = is_a ? std::vector<uint64_t>{r, static_cast<uint64_t>(s.in_features)}
                     : std::vector<uint64_t>{static_cast<uint64_t>(s.out_features), r};
      // Converted piece by piece while the file is written.
      t.fill = [&values, dtype](TensorSink& sink) -> Status {
        std::vector<std::byte> buffer(kConvertChunkElements * tensor::DTypeSize(dtype));
        for (size_t i = 0; i < values.size(); i += kConvertChunkElements) {
          size_t n = std::min(kConvertChunkElements, values.size() - i);
          tensor::ConvertElements(tensor::DType::kF32, values.data() + i, dtype, buffer.data(), n);
          SOVAI_RETURN_IF_ERROR(
              sink.Write(std::span<const std::byte>(buffer.data(), n * tensor::DTypeSize(dtype))));
        }
        return Status();
      };
      SOVAI_RETURN_IF_ERROR(writer.Add(std::move(t)));
    }
  }
  return WriteDirectoryAtomically(env, dir, [&](const std::string& temp) -> Status {
    SOVAI_RETURN_IF_ERROR(writer.WriteFile(env, base::JoinPath(temp, kWeightsFile)));
    return env.WriteFileAtomically(base::JoinPath(temp, kConfigFile), config_json);
  });
}

}  // namespace sovai::model
