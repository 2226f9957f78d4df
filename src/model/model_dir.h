// Model directories: a whole Hugging Face checkpoint on disk, read and written as transformers'
// from_pretrained / save_pretrained do.
//
//   <dir>/config.json                        ModelConfig (model_config.h)
//   <dir>/model.safetensors                  one file, or
//   <dir>/model.safetensors.index.json       + model-0000i-of-0000n.safetensors shards
//   <dir>/tokenizer.json, tokenizer_config.json, generation_config.json, special_tokens_map.json
//                                            optional; reported (and copied when writing)
//
// LoadModelDir opens config.json and the weights (memory-mapped: see safetensors.h) and checks
// the tensor set against the config (CheckTensors: missing, unexpected, wrong shape or dtype, each
// error naming the tensor and its file). As transformers, a model.safetensors is preferred over an
// index when both exist. PyTorch pickles (pytorch_model.bin) are refused: they can run code.
//
// WriteModelDir builds the directory under a temporary name next to its destination and renames
// it into place once complete and synced, so a reader or a crash never sees half a directory.
// The destination must not exist (AlreadyExists): a model directory is replaced by writing a new
// one, never by mutating one that a server may be reading.
//
// Errors: those of ParseModelConfig, SafetensorsSet and CheckTensors, which name the file; NotFound
// when config.json or the weights are missing; Unimplemented for pickle weights.
//
// Thread-safety: ModelDir is immutable after loading (see SafetensorsSet); the functions hold no
// state.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "model/limits.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace sovai::model {

// The files besides config.json and the weights that LoadModelDir reports.
inline constexpr std::string_view kModelAuxFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"};

struct ModelDir {
  std::string path;
  ModelConfig config;
  std::unique_ptr<SafetensorsSet> weights;
  // Which of kModelAuxFiles exist, in that order.
  std::vector<std::string> aux_files;

  bool Has(std::string_view file) const;
  // <path>/<file>.
  std::string PathOf(std::string_view file) const;
};

base::Result<ModelDir> LoadModelDir(base::Env& env, const std::string& path);

// The tensors of a set as CheckTensors takes them (views into the set).
std::vector<FoundTensor> FoundTensorsOf(const SafetensorsSet& set);

struct WriteModelDirOptions {
  // Weights larger than this are split into shards with an index (transformers' default, 5 GB).
  uint64_t max_shard_bytes = kDefaultMaxShardBytes;
  // Files copied into the directory under their base names (e.g. a source model's
  // tokenizer.json). A name that would replace config.json or a weights file is refused.
  std::vector<std::string> copy_files;
};

// Writes config.json (ModelConfigToJson), the weights (WriteShardedSafetensors, with
// {"format": "pt"} metadata as transformers requires) and the copied files into a new directory
// `path`, atomically as described above. The tensors are checked against the config first
// (CheckTensors); nothing is written when they do not match. Errors: AlreadyExists when `path`
// exists; InvalidArgument for a mismatch or a bad copy_files entry; those of the writes (the
// temporary directory is removed on any failure).
base::Status WriteModelDir(base::Env& env, const std::string& path, const ModelConfig& config,
                           std::vector<TensorToWrite> tensors,
                           const WriteModelDirOptions& options = {});

// Creates `path` atomically: `fill` populates a fresh temporary directory next to it (named
// ".<name>.sovai-tmp.<16 hex>", see base::IsAtomicWriteTempName), which is then synced and renamed
// to `path`, and the parent directory synced. Missing parents are created. On any error the
// temporary directory is removed and `path` is not created. Errors: AlreadyExists when `path`
// exists; those of `fill` and of the file system.
base::Status WriteDirectoryAtomically(
    base::Env& env, const std::string& path,
    const std::function<base::Status(const std::string& temp_dir)>& fill);

}  // namespace sovai::model
