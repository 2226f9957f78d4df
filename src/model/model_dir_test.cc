#include "model/model_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <map>

#include "base/env.h"
#include "base/strings.h"
#include "model/formats_test_util.h"

namespace sovai::model {
namespace {

using testing::ExpectError;
using testing::TempDir;

using base::StatusCode;

void WriteRaw(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A 2-layer model of hidden size 64.
ModelConfig TinyConfig(Architecture arch) {
  ModelConfig c;
  c.architecture = arch;
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 512;
  c.torch_dtype = tensor::DType::kBF16;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.extra = {{"transformers_version", "4.46.0"}};
  return c;
}

// BF16 tensors for every expected tensor of `config`, with distinct deterministic contents.
struct TinyWeights {
  std::map<std::string, std::string> bytes;  // keeps the data alive
  std::vector<TensorToWrite> tensors;
};

TinyWeights MakeWeights(const ModelConfig& config, bool include_optional = false) {
  TinyWeights w;
  uint32_t state = 12345;
  for (const ExpectedTensor& e : ExpectedTensors(config)) {
    if (e.optional && !include_optional) continue;
    uint64_t n = 1;
    for (uint64_t d : e.shape) n *= d;
    std::string data(n * 2, '\0');
    for (uint64_t i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;
      uint16_t bits = tensor::FloatToBF16(static_cast<float>(state >> 8) / (1u << 24) - 0.5f);
      data[2 * i] = static_cast<char>(bits & 0xff);
      data[2 * i + 1] = static_cast<char>(bits >> 8);
    }
    w.bytes[e.name] = std::move(data);
  }
  for (const ExpectedTensor& e : ExpectedTensors(config)) {
    auto it = w.bytes.find(e.name);
    if (it == w.bytes.end()) continue;
    w.tensors.push_back({e.name,
                         SafetensorsDType::kBF16,
                         e.shape,
                         std::as_bytes(std::span<const char>(it->second)),
                         {}});
  }
  return w;
}

std::string Str(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

TEST(ModelDirTest, WritesAndLoadsASingleFileModel) {
  TempDir tmp;
  base::Env& env = base::Env::Default();
  ModelConfig config = TinyConfig(Architecture::kQwen2);
  TinyWeights weights = MakeWeights(config);
  WriteRaw(tmp.Join("tokenizer.json"), R"({"model": {"type": "BPE"}})");
  WriteRaw(tmp.Join("generation_config.json"), R"({"do_sample": true})");
  std::string out = tmp.Join("merged");
  ASSERT_TRUE(WriteModelDir(
                  env, out, config, weights.tensors,
                  {.copy_files = {tmp.Join("tokenizer.json"), tmp.Join("generation_config.json")}})
                  .ok());
  EXPECT_EQ(*env.ListDir(out), (std::vector<std::string>{"config.json", "generation_config.json",
                                                         "model.safetensors", "tokenizer.json"}));
  // Nothing temporary is left next to it.
  EXPECT_EQ(*env.ListDir(tmp.path()),
            (std::vector<std::string>{"generation_config.json", "merged", "tokenizer.json"}));
  EXPECT_EQ(*env.ReadFile(base::JoinPath(out, "tokenizer.json")), R"({"model": {"type": "BPE"}})");

  auto dir = LoadModelDir(env, out + "/");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(dir->path, out);
  EXPECT_EQ(*ModelConfigToJson(dir->config), *ModelConfigToJson(config));
  EXPECT_FALSE(dir->weights->sharded());
  EXPECT_EQ(dir->aux_files, (std::vector<std::string>{"tokenizer.json", "generation_config.json"}));
  EXPECT_TRUE(dir->Has("tokenizer.json"));
  EXPECT_FALSE(dir->Has("tokenizer_config.json"));
  EXPECT_EQ(dir->PathOf("tokenizer.json"), base::JoinPath(out, "tokenizer.json"));
  ASSERT_EQ(dir->weights->entries().size(), weights.bytes.size());
  for (const auto& [name, bytes] : weights.bytes) {
    auto e = dir->weights->Get(name);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(Str(e->tensor->bytes), bytes) << name;
  }
  // transformers refuses safetensors files without {"format": "pt"}.
  EXPECT_EQ(dir->weights->files()[0]->metadata().at("format"), "pt");
}

TEST(ModelDirTest, ShardsLargeModelsAndLoadsThemBack) {
  TempDir tmp;
  base::Env& env = base::Env::Default();
  ModelConfig config = TinyConfig(Architecture::kQwen3);
  config.tie_word_embeddings = true;
  TinyWeights weights = MakeWeights(config);
  std::string out = tmp.Join("sharded");
  ASSERT_TRUE(WriteModelDir(env, out, config, weights.tensors, {.max_shard_bytes = 40'000}).ok());
  EXPECT_TRUE(env.FileExists(base::JoinPath(out, "model.safetensors.index.json")));
  EXPECT_FALSE(env.FileExists(base::JoinPath(out, "model.safetensors")));
  auto dir = LoadModelDir(env, out);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(dir->weights->sharded());
  EXPECT_GT(dir->weights->files().size(), 2u);
  for (const auto& file : dir->weights->files()) {
    EXPECT_LE(file->size_bytes() - file->header_bytes() - 8, 40'000u) << file->path();
  }
  for (const auto& [name, bytes] : weights.bytes) {
    EXPECT_EQ(Str(dir->weights->Get(name)->tensor->bytes), bytes) << name;
  }
  EXPECT_TRUE(dir->aux_files.empty());
}

TEST(ModelDirTest, RefusesTensorsThatDoNotMatchTheConfig) {
  TempDir tmp;
  base::Env& env = base::Env::Default();
  ModelConfig config = TinyConfig(Architecture::kLlama);
  TinyWeights weights = MakeWeights(config);
  weights.tensors.pop_back();  // lm_head.weight, the last one
  ExpectError(WriteModelDir(env, tmp.Join("m"), config, weights.tensors),
              StatusCode::kInvalidArgument, {"missing tensor 'lm_head.weight'", "[96, 64]"});
  EXPECT_FALSE(env.FileExists(tmp.Join("m")));
  EXPECT_TRUE(env.ListDir(tmp.path())->empty());

  // A checkpoint on disk whose tensors do not match its config: the error names tensor and file.
  TinyWeights good = MakeWeights(config);
  ASSERT_TRUE(WriteModelDir(env, tmp.Join("m"), config, good.tensors).ok());
  ModelConfig other = config;
  other.intermediate_size = 96;
  ASSERT_TRUE(env.WriteFileAtomically(tmp.Join("m/config.json"), *ModelConfigToJson(other)).ok());
  ExpectError(LoadModelDir(env, tmp.Join("m")).status(), StatusCode::kInvalidArgument,
              {"tensor 'model.layers.0.mlp.down_proj.weight'", tmp.Join("m/model.safetensors"),
               "shape [64, 128], expected [64, 96]", "more problems"});
  // A qwen2 config over llama weights: the biases are missing.
  other = config;
  other.architecture = Architecture::kQwen2;
  ASSERT_TRUE(env.WriteFileAtomically(tmp.Join("m/config.json"), *ModelConfigToJson(other)).ok());
  ExpectError(LoadModelDir(env, tmp.Join("m")).status(), StatusCode::kInvalidArgument,
              {"missing tensor 'model.layers.0.self_attn.q_proj.bias'"});
}

TEST(ModelDirTest, ReportsWhatIsMissingOrUnsupported) {
  TempDir tmp;
  base::Env& env = base::Env::Default();
  ModelConfig config = TinyConfig(Architecture::kMistral);
  TinyWeights weights = MakeWeights(config);
  std::string out = tmp.Join("m");
  ASSERT_TRUE(WriteModelDir(env, out, config, weights.tensors).ok());

  ExpectError(WriteModelDir(env, out, config, weights.tensors), StatusCode::kAlreadyExists,
              {"already exists"});
  ExpectError(LoadModelDir(env, tmp.Join("nope")).status(), StatusCode::kNotFound, {"nope"});
  ExpectError(LoadModelDir(env, base::JoinPath(out, "config.json")).status(),
              StatusCode::kInvalidArgument, {"not a directory"});

  ASSERT_TRUE(env.RenameFile(base::JoinPath(out, "model.safetensors"),
                             base::JoinPath(out, "pytorch_model.bin"))
                  .ok());
  ExpectError(LoadModelDir(env, out).status(), StatusCode::kUnimplemented,
              {"pytorch_model.bin", "safetensors"});
  ASSERT_TRUE(env.DeleteFile(base::JoinPath(out, "pytorch_model.bin")).ok());
  ExpectError(LoadModelDir(env, out).status(), StatusCode::kNotFound,
              {"model.safetensors", "model.safetensors.index.json"});
  ASSERT_TRUE(env.DeleteFile(base::JoinPath(out, "config.json")).ok());
  ExpectError(LoadModelDir(env, out).status(), StatusCode::kNotFound, {"config.json"});
  WriteRaw(base::JoinPath(out, "config.json"), R"({"architectures": ["BertModel"]})");
  ExpectError(LoadModelDir(env, out).status(), StatusCode::kUnimplemented,
              {base::JoinPath(out, "config.json"), "'BertModel'"});

  ExpectError(WriteModelDir(env, tmp.Join("x"), config, weights.tensors,
                            {.copy_files = {tmp.Join("model.safetensors")}}),
              StatusCode::kInvalidArgument, {"would replace"});
  ExpectError(WriteModelDir(env, tmp.Join("x"), config, weights.tensors,
                            {.copy_files = {tmp.Join("a/t.json"), tmp.Join("b/t.json")}}),
              StatusCode::kInvalidArgument, {"'t.json' twice"});
  // A copy that fails (the source is missing) leaves nothing behind.
  ExpectError(WriteModelDir(env, tmp.Join("x"), config, weights.tensors,
                            {.copy_files = {tmp.Join("tokenizer.json")}}),
              StatusCode::kNotFound, {"tokenizer.json"});
  EXPECT_EQ(*env.ListDir(tmp.path()), std::vector<std::string>{"m"});
}

TEST(ModelDirTest, PrefersModelSafetensorsOverAnIndexAsTransformersDoes) {
  TempDir tmp;
  base::Env& env = base::Env::Default();
  ModelConfig config = TinyConfig(Architecture::kLlama);
  TinyWeights weights = MakeWeights(config);
  std::string out = tmp.Join("m");
  ASSERT_TRUE(WriteModelDir(env, out, config, weights.tensors).ok());
  WriteRaw(base::JoinPath(out, "model.safetensors.index.json"), "not even JSON");
  auto dir = LoadModelDir(env, out);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_FALSE(dir->weights->sharded());
}

TEST(ModelDirTest, AFailureBeforeTheRenameLeavesNoDirectory) {
  TempDir tmp;
  base::Env& env = base::Env::Default();
  ModelConfig config = TinyConfig(Architecture::kLlama);
  TinyWeights weights = MakeWeights(config);
  for (base::FaultOp op : {base::FaultOp::kRename, base::FaultOp::kSync, base::FaultOp::kAppend,
                           base::FaultOp::kOpenWritable}) {
    SCOPED_TRACE(static_cast<int>(op));
    base::FaultInjectionEnv faulty(env);
    faulty.FailAlways(op);
    EXPECT_FALSE(WriteModelDir(faulty, tmp.Join("m"), config, weights.tensors).ok());
    EXPECT_TRUE(env.ListDir(tmp.path())->empty()) << base::Join(*env.ListDir(tmp.path()), ",");
  }
  // The directory's own rename, after every file is in place.
  struct FailDirRename : public base::EnvWrapper {
    using EnvWrapper::EnvWrapper;
    base::Status RenameFile(const std::string& from, const std::string& to) override {
      if (base::BaseName(to) == "m") return base::InternalError("injected rename failure");
      return EnvWrapper::RenameFile(from, to);
    }
  } fail_dir_rename(env);
  ExpectError(WriteModelDir(fail_dir_rename, tmp.Join("m"), config, weights.tensors),
              StatusCode::kInternal, {"injected rename failure"});
  EXPECT_TRUE(env.ListDir(tmp.path())->empty());
}

TEST(ModelDirTest, WriteDirectoryAtomicallyCreatesParentsAndRefusesBadNames) {
  TempDir tmp;
  base::Env& env = base::Env::Default();
  std::string path = tmp.Join("a/b/c");
  ASSERT_TRUE(WriteDirectoryAtomically(env, path, [&](const std::string& temp) {
                EXPECT_TRUE(base::IsAtomicWriteTempName(base::BaseName(temp))) << temp;
                EXPECT_EQ(base::DirName(temp), tmp.Join("a/b"));
                return env.WriteFileAtomically(base::JoinPath(temp, "f"), "x");
              }).ok());
  EXPECT_EQ(*env.ReadFile(tmp.Join("a/b/c/f")), "x");
  ExpectError(WriteDirectoryAtomically(env, "/", [](const std::string&) { return base::Status(); }),
              StatusCode::kInvalidArgument, {"does not name a directory"});
}

}  // namespace
}  // namespace sovai::model
