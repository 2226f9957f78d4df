#include "serve/pooling_api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/crypto.h"

namespace sovai::serve {
namespace {

// The 400 that answers `body`, naming `param`.
void ExpectEmbeddingError(std::string_view body, std::string_view param) {
  ApiResult<EmbeddingRequest> parsed = ParseEmbeddingRequest(body);
  ASSERT_FALSE(parsed.ok()) << body;
  EXPECT_EQ(parsed.error().status, 400) << body;
  EXPECT_EQ(parsed.error().type, "invalid_request_error") << body;
  EXPECT_EQ(parsed.error().param, param) << body << ": " << parsed.error().message;
}

TEST(EmbeddingRequestTest, EveryInputShape) {
  auto one = ParseEmbeddingRequest(R"({"model": "e", "input": "hello"})");
  ASSERT_TRUE(one.ok()) << one.error().message;
  ASSERT_EQ(one->inputs.size(), 1u);
  EXPECT_EQ(one->inputs[0].text, "hello");
  EXPECT_EQ(one->encoding_format, EncodingFormat::kFloat);
  EXPECT_FALSE(one->dimensions);

  auto many = ParseEmbeddingRequest(
      R"({"model": "e", "input": ["a", "b"], "encoding_format": "base64", "dimensions": 8})");
  ASSERT_TRUE(many.ok()) << many.error().message;
  ASSERT_EQ(many->inputs.size(), 2u);
  EXPECT_EQ(many->inputs[1].text, "b");
  EXPECT_EQ(many->encoding_format, EncodingFormat::kBase64);
  EXPECT_EQ(many->dimensions, 8);

  auto ids = ParseEmbeddingRequest(R"({"model": "e", "input": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->inputs.size(), 1u);
  EXPECT_EQ(*ids->inputs[0].token_ids, (std::vector<int32_t>{1, 2, 3}));

  auto id_lists = ParseEmbeddingRequest(R"({"model": "e", "input": [[1], [2, 3]], "user": "u"})");
  ASSERT_TRUE(id_lists.ok());
  ASSERT_EQ(id_lists->inputs.size(), 2u);
  EXPECT_EQ(*id_lists->inputs[1].token_ids, (std::vector<int32_t>{2, 3}));
}

TEST(EmbeddingRequestTest, Errors) {
  ExpectEmbeddingError("{", "");
  ExpectEmbeddingError("[]", "");
  ExpectEmbeddingError(R"({"input": "x"})", "model");
  ExpectEmbeddingError(R"({"model": "e"})", "input");
  ExpectEmbeddingError(R"({"model": "e", "input": null})", "input");
  ExpectEmbeddingError(R"({"model": "e", "input": ""})", "input");
  ExpectEmbeddingError(R"({"model": "e", "input": ["a", ""]})", "input[1]");
  ExpectEmbeddingError(R"({"model": "e", "input": []})", "input");
  ExpectEmbeddingError(R"({"model": "e", "input": [[]]})", "input[0]");
  ExpectEmbeddingError(R"({"model": "e", "input": ["a", 1]})", "input[1]");
  ExpectEmbeddingError(R"({"model": "e", "input": [-1]})", "input[0]");
  ExpectEmbeddingError(R"({"model": "e", "input": 5})", "input");
  ExpectEmbeddingError(R"({"model": "e", "input": "x", "encoding_format": "int8"})",
                       "encoding_format");
  ExpectEmbeddingError(R"({"model": "e", "input": "x", "dimensions": 0})", "dimensions");
  ExpectEmbeddingError(R"({"model": "e", "input": "x", "dimensions": 1.5})", "dimensions");
  ExpectEmbeddingError(R"({"model": "e", "input": "x", "dimensions": 18446744073709551615})",
                       "dimensions");
  std::string many = R"({"model": "e", "input": [)";
  for (size_t i = 0; i <= kMaxEmbeddingInputs; ++i) many += i ? ",\"x\"" : "\"x\"";
  ExpectEmbeddingError(many + "]}", "input");
}

TEST(EmbeddingResponseTest, TruncatesAndRenormalizes) {
  EXPECT_EQ(FinishEmbedding({3, 4, 12}, std::nullopt, false), (std::vector<float>{3, 4, 12}));
  const std::vector<float> unit = FinishEmbedding({3, 4, 12}, std::nullopt, true);
  EXPECT_FLOAT_EQ(unit[0], 3.0f / 13);
  EXPECT_FLOAT_EQ(unit[2], 12.0f / 13);
  // Truncated: unit length again, whether the model normalizes or not.
  for (bool normalize : {false, true}) {
    const std::vector<float> cut = FinishEmbedding({3, 4, 12}, 2, normalize);
    ASSERT_EQ(cut.size(), 2u);
    EXPECT_FLOAT_EQ(cut[0], 0.6f);
    EXPECT_FLOAT_EQ(cut[1], 0.8f);
  }
  EXPECT_EQ(FinishEmbedding({0, 0}, std::nullopt, true), (std::vector<float>{0, 0}));
  EXPECT_EQ(FinishEmbedding({1, 2}, 5, false), (std::vector<float>{1, 2}));
}

TEST(EmbeddingResponseTest, FloatAndBase64) {
  EXPECT_EQ(SerializeJson(EmbeddingResponse("e", {{0.5f, -1.0f}}, EncodingFormat::kFloat, 3)),
            R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-1.0]}],)"
            R"("model":"e","usage":{"prompt_tokens":3,"total_tokens":3}})");
  const nlohmann::ordered_json b64 =
      EmbeddingResponse("e", {{0.5f, -1.0f}, {2.0f}}, EncodingFormat::kBase64, 4);
  ASSERT_EQ(b64["data"].size(), 2u);
  auto bytes = base::Base64Decode(b64["data"][0]["embedding"].get<std::string>());
  ASSERT_TRUE(bytes.ok());
  ASSERT_EQ(bytes->size(), 8u);
  float back[2];
  std::memcpy(back, bytes->data(), 8);  // little-endian hosts, as numpy reads it
  EXPECT_EQ(back[0], 0.5f);
  EXPECT_EQ(back[1], -1.0f);
  EXPECT_EQ(b64["data"][1]["index"], 1);
}

TEST(EmbeddingCacheKeyTest, SameRequestSameKey) {
  auto a = ParseEmbeddingRequest(R"({"model": "e", "input": ["x"], "user": "1"})").value();
  auto b = ParseEmbeddingRequest(R"({"user": "2", "input": "x", "model": "e"})").value();
  EXPECT_EQ(EmbeddingCacheKey(a, "base"), EmbeddingCacheKey(b, "base"));
  EXPECT_NE(EmbeddingCacheKey(a, "base"), EmbeddingCacheKey(a, "0123"));
  auto c = ParseEmbeddingRequest(R"({"model": "e", "input": "x", "dimensions": 4})").value();
  EXPECT_NE(EmbeddingCacheKey(a, "base"), EmbeddingCacheKey(c, "base"));
  auto d =
      ParseEmbeddingRequest(R"({"model": "e", "input": "x", "encoding_format": "base64"})").value();
  EXPECT_NE(EmbeddingCacheKey(a, "base"), EmbeddingCacheKey(d, "base"));
}

TEST(RerankRequestTest, ParsesAndAnswers) {
  auto parsed = ParseRerankRequest(
      R"({"model": "r", "query": "q", "documents": ["a", {"text": "b"}, "c"], "top_n": 2})");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->documents, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(parsed->return_documents);
  EXPECT_EQ(parsed->instruction, kDefaultRerankInstruction);
  const nlohmann::ordered_json response = RerankResponse(*parsed, {0.25f, 0.75f, 0.5f}, 30);
  ASSERT_EQ(response["results"].size(), 2u);
  EXPECT_EQ(response["results"][0]["index"], 1);
  EXPECT_EQ(response["results"][0]["relevance_score"], 0.75f);
  EXPECT_EQ(response["results"][0]["document"]["text"], "b");
  EXPECT_EQ(response["results"][1]["index"], 2);
  EXPECT_EQ(response["usage"]["prompt_tokens"], 30);
  EXPECT_EQ(response["model"], "r");
  EXPECT_TRUE(response["id"].get<std::string>().starts_with("rerank-"));

  auto bare = ParseRerankRequest(
      R"({"model": "r", "query": "q", "documents": ["a", "b"], "return_documents": false})");
  ASSERT_TRUE(bare.ok());
  const nlohmann::ordered_json all = RerankResponse(*bare, {0.5f, 0.5f}, 1);
  ASSERT_EQ(all["results"].size(), 2u);
  EXPECT_EQ(all["results"][0]["index"], 0);  // ties keep the documents' order
  EXPECT_FALSE(all["results"][0].contains("document"));
}

TEST(RerankRequestTest, Errors) {
  auto param_of = [](std::string_view body) {
    auto parsed = ParseRerankRequest(body);
    EXPECT_FALSE(parsed.ok()) << body;
    return parsed.ok() ? std::string("<ok>") : parsed.error().param;
  };
  EXPECT_EQ(param_of(R"({"query": "q", "documents": ["a"]})"), "model");
  EXPECT_EQ(param_of(R"({"model": "r", "documents": ["a"]})"), "query");
  EXPECT_EQ(param_of(R"({"model": "r", "query": 1, "documents": ["a"]})"), "query");
  EXPECT_EQ(param_of(R"({"model": "r", "query": "q"})"), "documents");
  EXPECT_EQ(param_of(R"({"model": "r", "query": "q", "documents": []})"), "documents");
  EXPECT_EQ(param_of(R"({"model": "r", "query": "q", "documents": ["a", 2]})"), "documents[1]");
  EXPECT_EQ(param_of(R"({"model": "r", "query": "q", "documents": [{"txt": "a"}]})"),
            "documents[0]");
  EXPECT_EQ(param_of(R"({"model": "r", "query": "q", "documents": ["a"], "top_n": 0})"), "top_n");
  EXPECT_EQ(param_of(R"({"model": "r", "query": "q", "documents": ["a"], "return_documents": 1})"),
            "return_documents");
  const std::string big(kMaxRerankDocumentBytes + 1, 'x');
  EXPECT_EQ(param_of(R"({"model": "r", "query": "q", "documents": [")" + big + "\"]}"),
            "documents[0]");
  std::string many = R"({"model": "r", "query": "q", "documents": [)";
  for (size_t i = 0; i <= kMaxRerankDocuments; ++i) many += i ? ",\"x\"" : "\"x\"";
  EXPECT_EQ(param_of(many + "]}"), "documents");
}

TEST(RerankPromptTest, Qwen3RerankerLayout) {
  EXPECT_EQ(RerankPrompt("I", "Q", "D"),
            "<|im_start|>system\nJudge whether the Document meets the requirements based on the "
            "Query and the Instruct provided. Note that the answer can only be \"yes\" or "
            "\"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: I\n<Query>: Q\n<Document>: "
            "D<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

}  // namespace
}  // namespace sovai::serve
