// Named limits of `sovai-engine serve`'s pooling routes (POST /v1/embeddings, /v1/rerank): each
// is a 400 naming the parameter when exceeded. The limits of the completion routes are in
// openai_api.h, those of the scheduler in scheduler.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sovai::serve {

// Embeddings: OpenAI's bounds. Inputs of one request (each a prefill-only sequence in the
// engine's queue; a server whose queue is shorter refuses more than its queue holds).
inline constexpr size_t kMaxEmbeddingInputs = 2048;
// Tokens of one input (also at most the served context length).
inline constexpr int64_t kMaxEmbeddingInputTokens = 8192;
// Tokens of all the inputs of one request together.
inline constexpr int64_t kMaxEmbeddingRequestTokens = 300'000;
// `dimensions` at most the model's embedding dimension (checked against the model).

// Rerank: documents of one request (each query-document pair is a sequence), the query, each
// document and the instruction in bytes; the pair's tokens are at most the context length.
inline constexpr size_t kMaxRerankDocuments = 1024;
inline constexpr size_t kMaxRerankQueryBytes = 64 << 10;
inline constexpr size_t kMaxRerankDocumentBytes = 256 << 10;
inline constexpr size_t kMaxRerankInstructionBytes = 4096;
// Tokens of all the pairs of one request together.
inline constexpr int64_t kMaxRerankRequestTokens = 1'000'000;

}  // namespace sovai::serve
