#include "model/model_dir.h"

#include <algorithm>
#include <set>

#include "base/crypto.h"

namespace sovai::model {
namespace {

using base::Result;
using base::Status;

constexpr std::string_view kConfigFile = "config.json";
constexpr std::string_view kSingleWeights = "model.safetensors";
constexpr std::string_view kWeightsIndex = "model.safetensors.index.json";

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Names that WriteModelDir writes itself, which copied files must not replace.
bool IsReservedName(std::string_view name) {
  return name == kConfigFile || name == kSingleWeights || name == kWeightsIndex ||
         (name.starts_with("model-") && name.ends_with(".safetensors"));
}

// Copies a file in chunks (tokenizer.json can be tens of MB).
Status CopyFile(base::Env& env, const std::string& from, const std::string& to) {
  SOVAI_ASSIGN_OR_RETURN(auto stat, env.Stat(from));
  if (stat.type != base::FileType::kRegular) {
    return base::InvalidArgumentError("cannot copy " + Quote(from) + ": not a regular file");
  }
  SOVAI_ASSIGN_OR_RETURN(auto in, env.NewRandomAccessFile(from));
  SOVAI_ASSIGN_OR_RETURN(auto out, base::AtomicFileWriter::Open(env, to));
  std::string buffer(kModelDirCopyChunkBytes, '\0');
  uint64_t offset = 0;
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(size_t n, in->ReadAt(offset, buffer));
    if (n == 0) break;
    SOVAI_RETURN_IF_ERROR(out->Append(std::string_view(buffer.data(), n)));
    offset += n;
  }
  return out->Commit();
}

}  // namespace

bool ModelDir::Has(std::string_view file) const {
  return std::find(aux_files.begin(), aux_files.end(), file) != aux_files.end();
}

std::string ModelDir::PathOf(std::string_view file) const { return base::JoinPath(path, file); }

std::vector<FoundTensor> FoundTensorsOf(const SafetensorsSet& set) {
  std::vector<FoundTensor> out;
  out.reserve(set.entries().size());
  for (const SafetensorsSet::Entry& e : set.entries()) {
    out.push_back({e.tensor->name, e.tensor->dtype_name(), e.tensor->shape, e.file->path()});
  }
  return out;
}

Result<ModelDir> LoadModelDir(base::Env& env, const std::string& path_in) {
  ModelDir dir;
  dir.path = StripTrailingSlashes(path_in);
  SOVAI_ASSIGN_OR_RETURN(auto stat, env.Stat(dir.path));
  if (stat.type != base::FileType::kDirectory) {
    return base::InvalidArgumentError(Quote(dir.path) + " is not a directory");
  }

  std::string config_path = dir.PathOf(kConfigFile);
  if (!env.FileExists(config_path)) {
    return base::NotFoundError(Quote(dir.path) +
                               " has no config.json: not a Hugging Face model "
                               "directory");
  }
  SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(config_path, kMaxModelConfigBytes));
  SOVAI_ASSIGN_OR_RETURN(dir.config, ParseModelConfig(text, config_path));

  std::string single = dir.PathOf(kSingleWeights);
  std::string index = dir.PathOf(kWeightsIndex);
  if (env.FileExists(single)) {
    SOVAI_ASSIGN_OR_RETURN(dir.weights, SafetensorsSet::OpenFile(single));
  } else if (env.FileExists(index)) {
    SOVAI_ASSIGN_OR_RETURN(dir.weights, SafetensorsSet::OpenIndex(env, index));
  } else if (env.FileExists(dir.PathOf("pytorch_model.bin")) ||
             env.FileExists(dir.PathOf("pytorch_model.bin.index.json"))) {
    return base::UnimplementedError(
        Quote(dir.path) +
        " holds PyTorch pickle weights (pytorch_model.bin), which can run code when loaded and "
        "are not supported; convert them to safetensors (e.g. save_pretrained(..., "
        "safe_serialization=True))");
  } else {
    return base::NotFoundError(Quote(dir.path) + " has no " + std::string(kSingleWeights) + " or " +
                               std::string(kWeightsIndex));
  }

  std::vector<FoundTensor> found = FoundTensorsOf(*dir.weights);
  SOVAI_RETURN_IF_ERROR(CheckTensors(dir.config, found, dir.weights->source()));

  for (std::string_view name : kModelAuxFiles) {
    if (env.FileExists(dir.PathOf(name))) dir.aux_files.emplace_back(name);
  }
  return dir;
}

Status WriteDirectoryAtomically(base::Env& env, const std::string& path_in,
                                const std::function<Status(const std::string& temp_dir)>& fill) {
  std::string path = StripTrailingSlashes(path_in);
  std::string name = base::BaseName(path);
  if (name.empty() || name == "." || name == ".." || name == "/") {
    return base::InvalidArgumentError(Quote(path_in) + " does not name a directory to create");
  }
  if (env.FileExists(path)) return base::AlreadyExistsError(Quote(path) + " already exists");
  std::string parent = base::DirName(path);
  SOVAI_RETURN_IF_ERROR(env.CreateDirs(parent));
  std::string temp =
      base::JoinPath(parent, "." + name + ".sovai-tmp." + base::HexEncode(base::RandomBytes(8)));
  SOVAI_RETURN_IF_ERROR(env.CreateDir(temp));
  Status status = fill(temp);
  if (status.ok()) status = env.SyncDir(temp);
  if (status.ok() && env.FileExists(path)) {
    status = base::AlreadyExistsError(Quote(path) + " already exists");
  }
  if (status.ok()) status = env.RenameFile(temp, path);
  if (!status.ok()) {
    env.DeleteDirRecursive(temp).IgnoreError();  // best effort; the name marks it as temporary
    return status;
  }
  // The rename is done: `path` is complete. A failing parent sync means it may not survive a
  // crash; report it (as AtomicFileWriter::Commit does).
  return env.SyncDir(parent);
}

Status WriteModelDir(base::Env& env, const std::string& path, const ModelConfig& config,
                     std::vector<TensorToWrite> tensors, const WriteModelDirOptions& options) {
  SOVAI_ASSIGN_OR_RETURN(std::string config_json, ModelConfigToJson(config));
  std::vector<FoundTensor> found;
  found.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) {
    found.push_back({t.name, SafetensorsDTypeName(t.dtype), t.shape, "the tensors to write"});
  }
  SOVAI_RETURN_IF_ERROR(CheckTensors(config, found, "the tensors to write"));
  std::set<std::string> copy_names;
  for (const std::string& file : options.copy_files) {
    std::string name = base::BaseName(file);
    if (name.empty() || IsReservedName(name)) {
      return base::InvalidArgumentError("copy_files entry " + Quote(file) +
                                        " would replace a file the model directory is made of");
    }
    if (!copy_names.insert(name).second) {
      return base::InvalidArgumentError("copy_files names " + Quote(name) + " twice");
    }
  }
  return WriteDirectoryAtomically(env, path, [&](const std::string& temp) -> Status {
    SOVAI_RETURN_IF_ERROR(env.WriteFileAtomically(base::JoinPath(temp, kConfigFile), config_json));
    SOVAI_RETURN_IF_ERROR(WriteShardedSafetensors(env, temp, std::move(tensors),
                                                  options.max_shard_bytes, {{"format", "pt"}})
                              .status());
    for (const std::string& file : options.copy_files) {
      SOVAI_RETURN_IF_ERROR(CopyFile(env, file, base::JoinPath(temp, base::BaseName(file))));
    }
    return Status();
  });
}

}  // namespace sovai::model
