#include "model/pooling_config.h"

#include <gtest/gtest.h>

#include "model/formats_test_util.h"

namespace sovai::model {
namespace {

using base::StatusCode;
using testing::ExpectError;
using testing::TempDir;

constexpr const char* kQwen3Modules = R"([
  {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
  {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
])";

// Qwen3-Embedding-0.6B's 1_Pooling/config.json, with its dimension.
std::string PoolingJson(const std::string& modes, int64_t dimension = 64) {
  return R"({"word_embedding_dimension": )" + std::to_string(dimension) + ", " + modes +
         R"(, "include_prompt": true})";
}

void Write(const std::string& path, const std::string& text) {
  ASSERT_TRUE(base::Env::Default().WriteFileAtomically(path, text).ok()) << path;
}

TEST(PoolingConfigTest, ReadsQwen3EmbeddingsLayout) {
  TempDir tmp;
  Write(tmp.Join("modules.json"), kQwen3Modules);
  ASSERT_TRUE(base::Env::Default().CreateDirs(tmp.Join("1_Pooling")).ok());
  Write(tmp.Join("1_Pooling/config.json"),
        PoolingJson(R"("pooling_mode_cls_token": false, "pooling_mode_mean_tokens": false,
                       "pooling_mode_max_tokens": false, "pooling_mode_lasttoken": true)"));
  auto config = ReadPoolingConfig(base::Env::Default(), tmp.path(), 64);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->has_value());
  EXPECT_EQ((*config)->pooling, Pooling::kLastToken);
  EXPECT_TRUE((*config)->normalize);
  EXPECT_EQ((*config)->dimension, 64);
}

TEST(PoolingConfigTest, MeanPoolingWithoutNormalize) {
  TempDir tmp;
  Write(tmp.Join("modules.json"), R"([
    {"path": "", "type": "sentence_transformers.models.Transformer"},
    {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])");
  ASSERT_TRUE(base::Env::Default().CreateDirs(tmp.Join("1_Pooling")).ok());
  Write(tmp.Join("1_Pooling/config.json"), PoolingJson(R"("pooling_mode_mean_tokens": true)"));
  auto config = ReadPoolingConfig(base::Env::Default(), tmp.path(), 64);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ((*config)->pooling, Pooling::kMean);
  EXPECT_FALSE((*config)->normalize);
}

TEST(PoolingConfigTest, NoModulesJsonIsNotAnEmbeddingModel) {
  TempDir tmp;
  auto config = ReadPoolingConfig(base::Env::Default(), tmp.path(), 64);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->has_value());
}

TEST(PoolingConfigTest, RefusesWhatWouldChangeTheVectors) {
  TempDir tmp;
  Write(tmp.Join("modules.json"), R"([
    {"path": "", "type": "sentence_transformers.models.Transformer"},
    {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}])");
  ASSERT_TRUE(base::Env::Default().CreateDirs(tmp.Join("1_Pooling")).ok());
  Write(tmp.Join("1_Pooling/config.json"), PoolingJson(R"("pooling_mode_lasttoken": true)"));
  ExpectError(ReadPoolingConfig(base::Env::Default(), tmp.path(), 64).status(),
              StatusCode::kUnimplemented, {"Dense", "modules.json"});

  const std::string file = "1_Pooling/config.json";
  ExpectError(ParsePoolingModuleConfig(PoolingJson(R"("pooling_mode_max_tokens": true)"), file, 64)
                  .status(),
              StatusCode::kUnimplemented, {"pooling_mode_max_tokens", file});
  ExpectError(
      ParsePoolingModuleConfig(
          PoolingJson(R"("pooling_mode_mean_tokens": true, "pooling_mode_cls_token": true)"), file,
          64)
          .status(),
      StatusCode::kUnimplemented, {"several"});
  ExpectError(
      ParsePoolingModuleConfig(PoolingJson(R"("pooling_mode_lasttoken": true)", 32), file, 64)
          .status(),
      StatusCode::kInvalidArgument, {"word_embedding_dimension 32", "hidden_size 64"});
  ExpectError(ParsePoolingModuleConfig(R"({"word_embedding_dimension": 64})", file, 64).status(),
              StatusCode::kInvalidArgument, {"no pooling mode"});
  ExpectError(ParsePoolingModuleConfig(
                  R"({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": true,
                      "include_prompt": false})",
                  file, 64)
                  .status(),
              StatusCode::kUnimplemented, {"include_prompt"});
  auto by_name = ParsePoolingModuleConfig(
      R"({"word_embedding_dimension": 64, "pooling_mode": "cls"})", file, 64);
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ(by_name->pooling, Pooling::kCls);
}

TEST(PoolingConfigTest, MalformedModulesJson) {
  const std::string file = "modules.json";
  ExpectError(ParseModulesJson("{", file).status(), StatusCode::kInvalidArgument, {file});
  ExpectError(ParseModulesJson("{}", file).status(), StatusCode::kInvalidArgument, {"list"});
  ExpectError(ParseModulesJson("[1]", file).status(), StatusCode::kInvalidArgument, {"module 0"});
  ExpectError(ParseModulesJson(R"([{"type": "x"}])", file).status(), StatusCode::kInvalidArgument,
              {"path"});
  ExpectError(ParseModulesJson(R"([{"type": "x", "path": "../../etc"}])", file).status(),
              StatusCode::kInvalidArgument, {"relative"});
  ExpectError(ParseModulesJson(R"([{"type": "x", "path": "/etc"}])", file).status(),
              StatusCode::kInvalidArgument, {"relative"});
  std::string many = "[";
  for (size_t i = 0; i <= kMaxSentenceTransformerModules; ++i) {
    many += std::string(i ? "," : "") + R"({"type": "x", "path": ""})";
  }
  ExpectError(ParseModulesJson(many + "]", file).status(), StatusCode::kResourceExhausted,
              {"more than"});
  ExpectError(ParseModulesJson(std::string(kMaxModulesJsonBytes + 1, ' '), file).status(),
              StatusCode::kResourceExhausted, {"larger"});
}

}  // namespace
}  // namespace sovai::model
