#include "model/pooling_config.h"

#include <nlohmann/json.hpp>

#include "base/json.h"

namespace sovai::model {

using base::Result;
using base::Status;
using base::StatusCode;

namespace {

constexpr std::string_view kTransformerType = "sentence_transformers.models.Transformer";
constexpr std::string_view kPoolingType = "sentence_transformers.models.Pooling";
constexpr std::string_view kNormalizeType = "sentence_transformers.models.Normalize";

Status Invalid(std::string_view file, const std::string& message) {
  return Status(StatusCode::kInvalidArgument, std::string(file) + ": " + message);
}

// A module path stays inside the model directory.
bool SafeRelativePath(std::string_view path) {
  if (path.empty()) return true;
  if (path.front() == '/' || path.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    const std::string_view part = path.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part == "..") return false;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return true;
}

}  // namespace

const char* PoolingName(Pooling pooling) {
  switch (pooling) {
    case Pooling::kLastToken:
      return "lasttoken";
    case Pooling::kMean:
      return "mean";
    case Pooling::kCls:
      return "cls";
  }
  return "lasttoken";
}

Result<std::vector<SentenceTransformerModule>> ParseModulesJson(std::string_view text,
                                                                std::string_view file) {
  if (text.size() > kMaxModulesJsonBytes) {
    return Status(
        StatusCode::kResourceExhausted,
        std::string(file) + " is larger than " + std::to_string(kMaxModulesJsonBytes) + " bytes");
  }
  auto parsed = base::ParseJson(text, {.max_bytes = kMaxModulesJsonBytes, .max_depth = 8});
  if (!parsed.ok()) return Invalid(file, parsed.status().message());
  if (!parsed->is_array()) return Invalid(file, "must be a list of modules");
  if (parsed->size() > kMaxSentenceTransformerModules) {
    return Status(StatusCode::kResourceExhausted,
                  std::string(file) + " lists more than " +
                      std::to_string(kMaxSentenceTransformerModules) + " modules");
  }
  std::vector<SentenceTransformerModule> out;
  for (size_t i = 0; i < parsed->size(); ++i) {
    const nlohmann::json& entry = (*parsed)[i];
    const std::string where = "module " + std::to_string(i);
    if (!entry.is_object()) return Invalid(file, where + " is not an object");
    auto type = entry.find("type");
    auto path = entry.find("path");
    if (type == entry.end() || !type->is_string()) {
      return Invalid(file, where + " has no string \"type\"");
    }
    if (path == entry.end() || !path->is_string()) {
      return Invalid(file, where + " has no string \"path\"");
    }
    SentenceTransformerModule module{type->get<std::string>(), path->get<std::string>()};
    if (module.path.size() > kMaxModulePathBytes || !SafeRelativePath(module.path)) {
      return Invalid(file,
                     where + "'s path must be relative to the model directory, without \"..\"");
    }
    out.push_back(std::move(module));
  }
  return out;
}

Result<PoolingConfig> ParsePoolingModuleConfig(std::string_view text, std::string_view file,
                                               int64_t hidden_size) {
  if (text.size() > kMaxPoolingConfigBytes) {
    return Status(
        StatusCode::kResourceExhausted,
        std::string(file) + " is larger than " + std::to_string(kMaxPoolingConfigBytes) + " bytes");
  }
  auto parsed = base::ParseJson(text, {.max_bytes = kMaxPoolingConfigBytes, .max_depth = 8});
  if (!parsed.ok()) return Invalid(file, parsed.status().message());
  if (!parsed->is_object()) return Invalid(file, "must be an object");
  const nlohmann::json& j = *parsed;
  auto flag = [&](const char* name) -> Result<bool> {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return false;
    if (!it->is_boolean()) return Invalid(file, std::string(name) + " must be a boolean");
    return it->get<bool>();
  };
  std::vector<Pooling> modes;
  static constexpr std::pair<const char*, Pooling> kModes[] = {
      {"pooling_mode_cls_token", Pooling::kCls},
      {"pooling_mode_mean_tokens", Pooling::kMean},
      {"pooling_mode_lasttoken", Pooling::kLastToken}};
  for (const auto& [name, mode] : kModes) {
    SOVAI_ASSIGN_OR_RETURN(bool on, flag(name));
    if (on) modes.push_back(mode);
  }
  for (const char* name : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                           "pooling_mode_weightedmean_tokens"}) {
    SOVAI_ASSIGN_OR_RETURN(bool on, flag(name));
    if (on) {
      return Status(StatusCode::kUnimplemented, std::string(file) + ": " + name +
                                                    " is not supported (cls, mean, lasttoken are)");
    }
  }
  if (auto it = j.find("pooling_mode"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return Invalid(file, "pooling_mode must be a string");
    const std::string mode = it->get<std::string>();
    if (mode == "lasttoken") {
      modes.push_back(Pooling::kLastToken);
    } else if (mode == "mean") {
      modes.push_back(Pooling::kMean);
    } else if (mode == "cls") {
      modes.push_back(Pooling::kCls);
    } else {
      return Status(StatusCode::kUnimplemented,
                    std::string(file) + ": pooling_mode '" + mode +
                        "' is not supported (cls, mean, lasttoken are)");
    }
  }
  if (modes.empty()) return Invalid(file, "sets no pooling mode");
  if (modes.size() > 1) {
    return Status(StatusCode::kUnimplemented,
                  std::string(file) + ": several pooling modes concatenated are not supported");
  }
  PoolingConfig config;
  config.pooling = modes[0];
  auto dimension = j.find("word_embedding_dimension");
  if (dimension == j.end() || !dimension->is_number_integer()) {
    return Invalid(file, "word_embedding_dimension must be an integer");
  }
  config.dimension = dimension->get<int64_t>();
  if (config.dimension != hidden_size) {
    return Invalid(file, "word_embedding_dimension " + std::to_string(config.dimension) +
                             " is not the model's hidden_size " + std::to_string(hidden_size));
  }
  SOVAI_ASSIGN_OR_RETURN(bool exclude_prompt, [&]() -> Result<bool> {
    auto it = j.find("include_prompt");
    if (it == j.end() || it->is_null()) return false;
    if (!it->is_boolean()) return Invalid(file, "include_prompt must be a boolean");
    return !it->get<bool>();
  }());
  if (exclude_prompt && config.pooling == Pooling::kMean) {
    return Status(StatusCode::kUnimplemented,
                  std::string(file) +
                      ": mean pooling without the prompt (include_prompt false) is "
                      "not supported");
  }
  return config;
}

Result<std::optional<PoolingConfig>> ReadPoolingConfig(base::Env& env, const std::string& dir,
                                                       int64_t hidden_size) {
  const std::string modules_path = dir + "/modules.json";
  if (!env.FileExists(modules_path)) return std::optional<PoolingConfig>();
  SOVAI_ASSIGN_OR_RETURN(std::string modules_text,
                         env.ReadFile(modules_path, kMaxModulesJsonBytes));
  SOVAI_ASSIGN_OR_RETURN(std::vector<SentenceTransformerModule> modules,
                         ParseModulesJson(modules_text, modules_path));
  std::optional<PoolingConfig> config;
  bool normalize = false;
  for (size_t i = 0; i < modules.size(); ++i) {
    const SentenceTransformerModule& m = modules[i];
    if (m.type == kTransformerType && i == 0) continue;
    if (m.type == kPoolingType && i == 1) {
      const std::string path = dir + "/" + (m.path.empty() ? "" : m.path + "/") + "config.json";
      if (!env.FileExists(path)) {
        return Status(StatusCode::kNotFound, path + " (the Pooling module's config) is missing");
      }
      SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(path, kMaxPoolingConfigBytes));
      SOVAI_ASSIGN_OR_RETURN(PoolingConfig pooling,
                             ParsePoolingModuleConfig(text, path, hidden_size));
      config = pooling;
      continue;
    }
    if (m.type == kNormalizeType && i == 2) {
      normalize = true;
      continue;
    }
    return Status(StatusCode::kUnimplemented,
                  modules_path + ": module " + std::to_string(i) + " (" + m.type +
                      ") is not supported: the pipeline read is Transformer, Pooling and an "
                      "optional Normalize, in that order");
  }
  if (!config) {
    return Status(StatusCode::kUnimplemented, modules_path + " has no Pooling module");
  }
  config->normalize = normalize;
  return config;
}

}  // namespace sovai::model
