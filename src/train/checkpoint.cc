#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/log.h"
#include "base/unit_manifest.h"
#include "model/safetensors.h"

namespace sovai::train {

using base::Result;
using base::Status;
using base::StatusCode;

namespace {

constexpr std::string_view kStepPrefix = "step-";
constexpr uint64_t kMaxStateBytes = 1 << 20;

std::string StepName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

std::span<const std::byte> Bytes(const std::vector<float>& v) {
  return std::as_bytes(std::span<const float>(v));
}

model::TensorToWrite F32Tensor(std::string name, std::vector<uint64_t> shape,
                               const std::vector<float>& values) {
  model::TensorToWrite t;
  t.name = std::move(name);
  t.dtype = model::SafetensorsDType::kF32;
  t.shape = std::move(shape);
  t.data = Bytes(values);
  return t;
}

// Reads tensor `name` and uploads it into `out` (a buffer of its backend), which must hold as
// many floats.
Status ReadInto(const model::SafetensorsFile& file, const std::string& name,
                kernels::DeviceBuffer& out) {
  SOVAI_ASSIGN_OR_RETURN(std::vector<float> values, file.ReadF32(name));
  if (static_cast<int64_t>(values.size()) != out.count<float>()) {
    return Status(StatusCode::kFailedPrecondition,
                  "checkpoint tensor '" + name + "' in '" + file.path() + "' has " +
                      std::to_string(values.size()) + " elements, this run has " +
                      std::to_string(out.count<float>()) +
                      ": the checkpoint is of another model or shape");
  }
  if (!values.empty()) {
    out.backend()->Upload(out.data(), values.data(), values.size() * sizeof(float));
  }
  return Status();
}

}  // namespace

Result<std::string> SaveCheckpoint(base::Env& env, const std::string& output_dir,
                                   const std::vector<model::Parameter*>& params,
                                   const std::vector<Moments>& moments, const TrainState& state) {
  if (moments.size() != params.size()) {
    return Status(StatusCode::kInvalidArgument, "one set of moments per parameter is needed");
  }
  const std::string root = output_dir + "/checkpoints";
  SOVAI_RETURN_IF_ERROR(env.CreateDirs(root));
  const std::string final_dir = root + "/" + StepName(state.step);
  const std::string temp_dir =
      root + "/.tmp-" + StepName(state.step) + "-" + std::to_string(::getpid());
  if (env.FileExists(temp_dir)) SOVAI_RETURN_IF_ERROR(env.DeleteDirRecursive(temp_dir));
  SOVAI_RETURN_IF_ERROR(env.CreateDir(temp_dir));

  Status written = [&]() -> Status {
    model::SafetensorsWriter weights, optimizer;
    // The values and moments are downloaded from the backend; the host copies live until the
    // files are written (the writers keep views of them).
    std::vector<std::vector<float>> host;
    host.reserve(3 * params.size());
    auto download = [&](const kernels::DeviceBuffer& buffer) -> const std::vector<float>& {
      host.push_back(kernels::DownloadAll<float>(buffer));
      return host.back();
    };
    for (size_t i = 0; i < params.size(); ++i) {
      const model::Parameter& p = *params[i];
      SOVAI_RETURN_IF_ERROR(weights.Add(F32Tensor(p.name, p.shape, download(p.value))));
      SOVAI_RETURN_IF_ERROR(
          optimizer.Add(F32Tensor(p.name + ".exp_avg", p.shape, download(moments[i].exp_avg))));
      SOVAI_RETURN_IF_ERROR(optimizer.Add(
          F32Tensor(p.name + ".exp_avg_sq", p.shape, download(moments[i].exp_avg_sq))));
    }
    SOVAI_RETURN_IF_ERROR(weights.WriteFile(env, temp_dir + "/trainable.safetensors"));
    SOVAI_RETURN_IF_ERROR(optimizer.WriteFile(env, temp_dir + "/optimizer.safetensors"));
    nlohmann::json j = {{"format", "sovai-checkpoint-1"},
                        {"step", state.step},
                        {"epoch", state.epoch},
                        {"next_example", state.next_example},
                        {"seed", state.seed},
                        {"tokens_seen", state.tokens_seen},
                        {"best_eval_loss", state.best_eval_loss},
                        {"evals_without_improvement", state.evals_without_improvement}};
    SOVAI_ASSIGN_OR_RETURN(auto file, base::AtomicFileWriter::Open(env, temp_dir + "/state.json"));
    SOVAI_RETURN_IF_ERROR(file->Append(j.dump(2) + "\n"));
    SOVAI_RETURN_IF_ERROR(file->Commit());
    SOVAI_RETURN_IF_ERROR(env.SyncDir(temp_dir));
    if (env.FileExists(final_dir)) SOVAI_RETURN_IF_ERROR(env.DeleteDirRecursive(final_dir));
    SOVAI_RETURN_IF_ERROR(env.RenameFile(temp_dir, final_dir));
    return env.SyncDir(root);
  }();
  if (!written.ok()) {
    (void)env.DeleteDirRecursive(temp_dir);
    return written;
  }
  return final_dir;
}

Result<std::optional<std::string>> LatestCheckpoint(base::Env& env, const std::string& output_dir) {
  const std::string root = output_dir + "/checkpoints";
  if (!env.FileExists(root)) return std::optional<std::string>();
  SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> names, env.ListDir(root));
  std::vector<std::string> steps;
  for (const std::string& name : names) {
    const std::string dir = root + "/" + name;
    if (!name.starts_with(kStepPrefix) || !env.FileExists(dir + "/state.json")) continue;
    // A checkpoint that came from a bucket carries the manifest the volume sync wrote last;
    // one that does not match it is part of an interrupted upload, never resumed from.
    if (Status unit = base::CheckLocalUnit(env, dir); !unit.ok()) {
      SOVAI_LOG(WARNING) << "skipping checkpoint: " << unit.message();
      continue;
    }
    steps.push_back(name);
  }
  if (steps.empty()) return std::optional<std::string>();
  // Zero-padded step numbers sort as text.
  return std::optional<std::string>(root + "/" + *std::max_element(steps.begin(), steps.end()));
}

Result<TrainState> LoadCheckpoint(base::Env& env, const std::string& checkpoint_dir,
                                  const std::vector<model::Parameter*>& params,
                                  std::vector<Moments>& moments) {
  SOVAI_ASSIGN_OR_RETURN(std::string text,
                         env.ReadFile(checkpoint_dir + "/state.json", kMaxStateBytes));
  const std::string where = checkpoint_dir + "/state.json: ";
  auto parsed = base::ParseJson(text);
  if (!parsed.ok()) return Status(StatusCode::kDataLoss, where + parsed.status().message());
  const nlohmann::json& j = *parsed;
  TrainState state;
  auto field = [&](std::string_view name) -> Result<const nlohmann::json*> {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number()) {
      return Status(StatusCode::kDataLoss, where + "'" + std::string(name) + "' is missing");
    }
    return &*it;
  };
  if (!j.is_object() || j.value("format", "") != "sovai-checkpoint-1") {
    return Status(StatusCode::kDataLoss, where + "not a sovai checkpoint");
  }
  SOVAI_ASSIGN_OR_RETURN(const nlohmann::json* step, field("step"));
  SOVAI_ASSIGN_OR_RETURN(const nlohmann::json* epoch, field("epoch"));
  SOVAI_ASSIGN_OR_RETURN(const nlohmann::json* next, field("next_example"));
  SOVAI_ASSIGN_OR_RETURN(const nlohmann::json* seed, field("seed"));
  SOVAI_ASSIGN_OR_RETURN(const nlohmann::json* tokens, field("tokens_seen"));
  SOVAI_ASSIGN_OR_RETURN(const nlohmann::json* best, field("best_eval_loss"));
  SOVAI_ASSIGN_OR_RETURN(const nlohmann::json* stale, field("evals_without_improvement"));
  state.step = step->get<int64_t>();
  state.epoch = epoch->get<int64_t>();
  state.next_example = next->get<uint64_t>();
  state.seed = seed->get<uint64_t>();
  state.tokens_seen = tokens->get<int64_t>();
  state.best_eval_loss = best->get<double>();
  state.evals_without_improvement = stale->get<int64_t>();

  SOVAI_ASSIGN_OR_RETURN(auto weights,
                         model::SafetensorsFile::Open(checkpoint_dir + "/trainable.safetensors"));
  SOVAI_ASSIGN_OR_RETURN(auto optimizer,
                         model::SafetensorsFile::Open(checkpoint_dir + "/optimizer.safetensors"));
  if (weights->tensors().size() != params.size()) {
    return Status(StatusCode::kFailedPrecondition,
                  checkpoint_dir + " holds " + std::to_string(weights->tensors().size()) +
                      " trainable tensors, this run has " + std::to_string(params.size()));
  }
  moments.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    model::Parameter& p = *params[i];
    SOVAI_RETURN_IF_ERROR(ReadInto(*weights, p.name, p.value));
    if (!p.value.empty()) {
      // Moments live beside their parameter, in its backend's memory.
      kernels::Backend& backend = *p.value.backend();
      for (kernels::DeviceBuffer* m : {&moments[i].exp_avg, &moments[i].exp_avg_sq}) {
        if (m->backend() != &backend || m->bytes() != p.value.bytes()) {
          SOVAI_ASSIGN_OR_RETURN(*m, backend.Allocate(p.value.bytes()));
        }
      }
    }
    SOVAI_RETURN_IF_ERROR(ReadInto(*optimizer, p.name + ".exp_avg", moments[i].exp_avg));
    SOVAI_RETURN_IF_ERROR(ReadInto(*optimizer, p.name + ".exp_avg_sq", moments[i].exp_avg_sq));
  }
  return state;
}

Status PruneCheckpoints(base::Env& env, const std::string& output_dir, int keep) {
  const std::string root = output_dir + "/checkpoints";
  if (!env.FileExists(root)) return Status();
  SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> names, env.ListDir(root));
  std::vector<std::string> steps;
  for (const std::string& name : names) {
    if (name.starts_with(kStepPrefix)) steps.push_back(name);
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < steps.size(); ++i) {
    SOVAI_RETURN_IF_ERROR(env.DeleteDirRecursive(root + "/" + steps[i]));
  }
  return Status();
}

}  // namespace sovai::train
