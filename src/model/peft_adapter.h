// PEFT LoRA adapters: the directory Hugging Face PEFT's save_pretrained writes and
// PeftModel.from_pretrained reads, for the Llama-family models of model_config.h.
//
//   <dir>/adapter_config.json         {"peft_type": "LORA", "r": 8, "lora_alpha": 16,
//                                      "target_modules": ["q_proj", "v_proj"], ...}
//   <dir>/adapter_model.safetensors
//   base_model.model.model.layers.<N>.self_attn.q_proj.lora_A.weight
//                                     (r, in_features) and ...lora_B.weight (out_features, r)
//
// The effective weight of a targeted projection is W + scale * B @ A, with scale = lora_alpha / r,
// or lora_alpha / sqrt(r) with use_rslora. Format notes and the supported subset:
// docs/formats/peft-adapter.md.
//
// Supported: peft_type LORA, task_type CAUSAL_LM (or null), target_modules as a list of the seven
// projections (q_proj k_proj v_proj o_proj gate_proj up_proj down_proj) or "all-linear",
// layers_to_transform (an int or a list), bias "none", fan_in_fan_out false, use_rslora, weights in
// F32, F16 or BF16. Refused by name (Unimplemented), never ignored: target_modules as a regular
// expression, other modules (lm_head, embed_tokens), DoRA, rank_pattern / alpha_pattern,
// modules_to_save, trained biases, layer_replication, exclude_modules, other PEFT types, pickle
// weights (adapter_model.bin).
//
// Reading checks every key of the weights file against the config and the base model: a known
// projection that is targeted, a layer index within the base model (and layers_to_transform),
// both lora_A and lora_B present, shapes (r, in) and (out, r) for that projection of the base
// model, and every targeted (layer, module) present. Errors (InvalidArgument / DataLoss) name the
// key and the file.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "model/model_config.h"
#include "tensor/dtype.h"

namespace sovai::model {

// The projections a LoRA adapter may target, in canonical order.
enum class LoraModule : uint8_t { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr LoraModule kAllLoraModules[] = {
    LoraModule::kQ,    LoraModule::kK,  LoraModule::kV,   LoraModule::kO,
    LoraModule::kGate, LoraModule::kUp, LoraModule::kDown};

// "q_proj", ..., "down_proj".
std::string_view LoraModuleName(LoraModule module);
// The inverse of LoraModuleName; nullopt for any other name.
std::optional<LoraModule> ParseLoraModule(std::string_view name);
// "self_attn" for q/k/v/o, "mlp" for gate/up/down.
std::string_view LoraModuleParent(LoraModule module);

// (in_features, out_features) of the projection in `base`.
struct LoraModuleShape {
  int64_t in_features = 0;
  int64_t out_features = 0;
};
LoraModuleShape ModuleShape(const ModelConfig& base, LoraModule module);

struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  double lora_dropout = 0;
  std::vector<LoraModule> target_modules;  // sorted, unique
  bool use_rslora = false;
  // Layers that carry adapters; empty = all.
  std::vector<int64_t> layers_to_transform;
  std::string base_model_name_or_path;
  // Keys of the file not modelled above, written back as they were.
  nlohmann::json extra = nlohmann::json::object();

  // lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora.
  double Scale() const;
  bool Targets(LoraModule module) const;
  bool CoversLayer(int64_t layer) const;
};

// Parses adapter_config.json. `source` names the file in messages.
base::Result<LoraConfig> ParseLoraConfig(std::string_view json_text,
                                         std::string_view source = "adapter_config.json");
// adapter_config.json as PEFT writes it (sorted keys, 2-space indent).
base::Result<std::string> LoraConfigToJson(const LoraConfig& config);

// The PEFT key of a weight: "base_model.model.model.layers.3.mlp.up_proj.lora_B.weight".
std::string LoraTensorName(int64_t layer, LoraModule module, bool is_a);

struct LoraModuleWeights {
  int64_t layer = 0;
  LoraModule module = LoraModule::kQ;
  std::vector<float> a;  // (r, in_features), row-major
  std::vector<float> b;  // (out_features, r), row-major
};

struct LoraAdapter {
  LoraConfig config;
  // Sorted by (layer, module).
  std::vector<LoraModuleWeights> modules;

  // nullptr when the adapter has no weights for that projection.
  const LoraModuleWeights* Find(int64_t layer, LoraModule module) const;
};

// Checks an in-memory adapter against `base`: config values, one entry per covered layer and
// targeted module (no more, no less), vector sizes r * in and out * r.
base::Status ValidateLoraAdapter(const LoraAdapter& adapter, const ModelConfig& base);

// Reads the adapter directory `dir` for a model of config `base`. Weights are converted to f32.
base::Result<LoraAdapter> LoadLoraAdapter(base::Env& env, const std::string& dir,
                                          const ModelConfig& base);

// Writes `adapter` as a new directory `dir` (atomically, as WriteDirectoryAtomically: `dir` must
// not exist), weights stored as `dtype` with {"format": "pt"} metadata as PEFT writes them.
base::Status WriteLoraAdapter(base::Env& env, const std::string& dir, const LoraAdapter& adapter,
                              const ModelConfig& base, tensor::DType dtype = tensor::DType::kF32);

}  // namespace sovai::model
