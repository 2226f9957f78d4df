// Model cards: when a job ends, every model or adapter it wrote to a writable volume gets
// MODEL_CARD.md and model_card.json next to it (at the root of the job's output), written by the
// platform from what it knows (docs/formats/model-card.md): the base model and its content hash,
// the dataset objects with their SHA-256, the hyperparameters, the training and validation
// metrics, the compute used with an energy estimate, the region and jurisdiction, and the sections
// the author must complete. They are synced up with the rest of the output.
//
// Thread-safety: pure functions, plus file reads and writes through the given Env.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "exec/volume_sync.h"

namespace sovai::control {

struct ModelCardVolume {
  std::string source;      // "bucket@REGION/prefix"
  std::string mount_path;  // "/workspace/output"
  bool writable = false;
  std::string local_dir;                       // the host directory holding the volume's files
  std::optional<exec::SyncManifest> manifest;  // what was synced down (ETags by path)
  // The bucket's region, canonical ("EU-CENTRAL-2"), and its jurisdiction ("EU"); "" = those of
  // the card (ModelCardInputs), i.e. the server's own region.
  std::string region;
  std::string jurisdiction;
};

struct ModelCardInputs {
  std::string job_id;
  std::string project;
  std::string user;
  std::string region;        // "EU-WEST-LOCAL"
  std::string jurisdiction;  // "EU"
  std::string image;
  std::string image_digest;          // a registry image's manifest digest ("" = none)
  std::vector<std::string> command;  // the job's (for sovai/finetune: sovai-engine train's flags)
  std::string flavor;
  int units = 1;
  std::string gpu_model;  // "" for CPU flavors
  int gpus = 0;
  int vcpus = 0;
  int64_t running_seconds = 0;
  int64_t finished_unix_micros = 0;
  std::vector<ModelCardVolume> volumes;
};

// Assumed power draw for the energy estimate: per GPU by model (board power), per vCPU otherwise.
int GpuWatts(std::string_view gpu_model);
inline constexpr int kWattsPerVcpu = 10;

// An energy estimate for people: "2.00 kWh" from 1 kWh up, "83.3 Wh" from 1 Wh, "0.083 Wh" below;
// "0 Wh" for 0 (or anything not positive).
std::string FormatEnergy(double kwh);

// The directories under the writable volumes that hold a model or adapter, as
// (volume index, path relative to the volume, kind "peft-adapter" | "model"); at most one level
// below the volume root (e.g. "adapter", "merged", "model") or the root itself.
struct ModelOutput {
  size_t volume = 0;
  std::string path;  // "" = the volume root
  std::string kind;
};
std::vector<ModelOutput> FindModelOutputs(base::Env& env, const ModelCardInputs& in);

// The card of one job (every output it found). Errors only for unreadable files.
base::Result<nlohmann::json> BuildModelCard(base::Env& env, const ModelCardInputs& in,
                                            const std::vector<ModelOutput>& outputs);
std::string RenderModelCardMarkdown(const nlohmann::json& card);

// Finds the outputs and writes MODEL_CARD.md and model_card.json at the root of each writable
// volume that holds one. A PEFT adapter whose adapter_config.json names the sandbox path of
// --model as its base_model_name_or_path gets the base model's portable name instead (its
// config.json `_name_or_path` when that is not a path, else its bucket location), so that it
// loads outside the job; the card's output records it. Returns the files written: the cards
// and any adapter_config.json rewritten (none when the job wrote no model).
base::Result<std::vector<std::string>> WriteModelCards(base::Env& env, const ModelCardInputs& in);

}  // namespace sovai::control
