// `sovai-engine convert` (docs/engine.md): a Hugging Face llama directory -> GGUF for llama.cpp.
#include <cstdio>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/flags.h"
#include "base/json.h"
#include "engine/commands.h"
#include "model/gguf_llama.h"
#include "model/model_dir.h"

namespace sovai::engine {
namespace {

constexpr uint64_t kMaxTokenizerFileBytes = 64u << 20;

base::Result<nlohmann::json> ReadJsonFile(base::Env& env, const std::string& path) {
  SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(path, kMaxTokenizerFileBytes));
  auto json = base::ParseJson(text, {.max_bytes = kMaxTokenizerFileBytes});
  if (!json.ok()) return json.status().WithContext(path);
  return json;
}

base::Status Convert(const std::string& model_dir, const std::string& output,
                     model::LlamaGgufFileType type, const std::string& name) {
  base::Env& env = base::Env::Default();
  SOVAI_ASSIGN_OR_RETURN(model::ModelDir dir, model::LoadModelDir(env, model_dir));
  model::LlamaGgufInput input;
  input.name = name.empty() ? model_dir.substr(model_dir.find_last_of('/') + 1) : name;
  SOVAI_ASSIGN_OR_RETURN(input.arch, model::LlamaArchFromConfig(dir.config));
  SOVAI_ASSIGN_OR_RETURN(input.tensors, model::HfTensorsFrom(*dir.weights));
  if (!dir.Has("tokenizer.json")) {
    return base::InvalidArgumentError(model_dir + " has no tokenizer.json, which GGUF embeds");
  }
  SOVAI_ASSIGN_OR_RETURN(nlohmann::json tokenizer, ReadJsonFile(env, dir.PathOf("tokenizer.json")));
  nlohmann::json config;
  if (dir.Has("tokenizer_config.json")) {
    SOVAI_ASSIGN_OR_RETURN(config, ReadJsonFile(env, dir.PathOf("tokenizer_config.json")));
  }
  SOVAI_ASSIGN_OR_RETURN(input.vocab, model::LlamaVocabFromTokenizerJson(tokenizer, config));
  return model::WriteLlamaGguf(env, output, input, type);
}

}  // namespace

int RunConvertCommand(const std::vector<std::string>& args) {
  base::FlagSet flags("sovai-engine convert",
                      "Converts a Hugging Face llama model directory (for example a merged\n"
                      "fine-tune, <output>/merged) into one GGUF file that llama.cpp runs.");
  std::string model_dir, output, type = "f16", name, to = "gguf";
  flags.String("model", &model_dir, "Hugging Face model directory (required)", "DIR");
  flags.String("to", &to, "the output format (gguf, the only one so far)", "FORMAT");
  flags.String("output", &output, "the .gguf file to write (required)", "FILE");
  flags.String("type", &type, "f32, f16, bf16 or q8_0", "TYPE");
  flags.String("name", &name, "general.name (default: the directory's name)", "NAME");
  base::Status parsed = flags.Parse(args);
  if (!parsed.ok()) return UsageError("convert", parsed.message());
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (model_dir.empty() || output.empty())
    return UsageError("convert", "--model and --output are required");
  if (to != "gguf") return UsageError("convert", "--to must be gguf, got '" + to + "'");
  auto file_type = model::ParseLlamaGgufFileType(type);
  if (!file_type) return UsageError("convert", "--type must be f32, f16, bf16 or q8_0");
  base::Status converted = Convert(model_dir, output, *file_type, name);
  if (!converted.ok()) {
    std::fprintf(stderr, "sovai-engine convert: %s\n", converted.ToString().c_str());
    return kExitFailure;
  }
  std::printf("wrote %s (%s)\n", output.c_str(), type.c_str());
  return kExitOk;
}

}  // namespace sovai::engine
