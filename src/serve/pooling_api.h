// The protocol layer of the pooling routes of `sovai-engine serve` (docs/api/openai.md):
// POST /v1/embeddings in OpenAI's shape and POST /v1/rerank in the shape vLLM, Jina and Cohere
// share, for decoder rerankers that answer "yes" or "no" (Qwen3-Reranker). Parsing and validating
// bodies, the reranker's prompt, vector post-processing (`dimensions`, L2 normalization), the
// responses and the response cache's keys. No I/O: the server (server_pooling.cc) calls these.
// Errors are OpenAI's (openai_api.h: ApiError), limits in limits.h.
//
// Thread-safety: pure functions over their arguments.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/response_cache_policy.h"
#include "serve/limits.h"
#include "serve/openai_api.h"

namespace sovai::serve {

// --- Embeddings ---

enum class EncodingFormat : uint8_t {
  kFloat,   // a JSON list of numbers
  kBase64,  // the little-endian float32 bytes, base64 (what the openai clients ask for by default)
};

struct EmbeddingRequest {
  std::string model;
  // `input`: a string, a list of strings, a list of token ids or a list of those; at most
  // kMaxEmbeddingInputs, none empty.
  std::vector<CompletionPrompt> inputs;
  EncodingFormat encoding_format = EncodingFormat::kFloat;
  std::optional<int64_t> dimensions;  // >= 1; checked against the model by the server
  base::CacheControl cache_control = base::CacheControl::kDefault;
};

// 400s as OpenAI answers them: malformed JSON, missing model or input, an input of the wrong
// type, an empty string or list, too many inputs, an encoding_format other than float or base64,
// dimensions that is not a positive integer.
ApiResult<EmbeddingRequest> ParseEmbeddingRequest(std::string_view body,
                                                  const ParseOptions& options = {});

// The vector answered for one pooled hidden state: its first `dimensions` values (all when
// unset), L2-normalized when the model normalizes (a Normalize module) or when truncated (a
// truncated unit vector is no longer one). A zero vector stays zero.
std::vector<float> FinishEmbedding(std::vector<float> pooled, std::optional<int64_t> dimensions,
                                   bool normalize);

// {"object": "list", "data": [{"object": "embedding", "index", "embedding": [floats] or
// "<base64>"}], "model", "usage": {"prompt_tokens", "total_tokens"}}.
nlohmann::ordered_json EmbeddingResponse(const std::string& model,
                                         const std::vector<std::vector<float>>& embeddings,
                                         EncodingFormat format, int64_t prompt_tokens);

// The response cache's key of an embedding request: SHA-256 hex of its canonical form (route,
// model, adapter hash, inputs, encoding_format, dimensions).
std::string EmbeddingCacheKey(const EmbeddingRequest& request, std::string_view adapter_hash);

// --- Rerank ---

// Qwen3-Reranker's default instruction.
inline constexpr std::string_view kDefaultRerankInstruction =
    "Given a web search query, retrieve relevant passages that answer the query";

struct RerankRequest {
  std::string model;
  std::string query;
  std::vector<std::string> documents;  // strings, or objects {"text": ...} (Cohere's form)
  std::optional<int64_t> top_n;        // >= 1; the best top_n results (all when unset)
  bool return_documents = true;        // each result carries {"text": document}
  std::string instruction{kDefaultRerankInstruction};  // Qwen3-Reranker's <Instruct>
  base::CacheControl cache_control = base::CacheControl::kDefault;
};

// 400s: malformed JSON, a missing model, query or documents, an empty documents list, more than
// kMaxRerankDocuments, a document or query over its byte limit, top_n < 1, mistyped fields.
ApiResult<RerankRequest> ParseRerankRequest(std::string_view body,
                                            const ParseOptions& options = {});

// The prompt Qwen3-Reranker is trained on for one query-document pair (its model card's
// format_instruction with the chat template's system turn and the empty thinking block); the
// answer is read from the logits of "yes" and "no" after it.
std::string RerankPrompt(std::string_view instruction, std::string_view query,
                         std::string_view document);

// {"id": "rerank-...", "model", "usage": {"prompt_tokens", "total_tokens"}, "results": [{"index",
// "relevance_score", "document": {"text"}}]}: the top_n documents by score, best first (ties by
// index), `document` only with return_documents.
nlohmann::ordered_json RerankResponse(const RerankRequest& request,
                                      const std::vector<float>& scores, int64_t prompt_tokens);

std::string RerankCacheKey(const RerankRequest& request, std::string_view adapter_hash);

}  // namespace sovai::serve
