// The pooling of an embedding model, as sentence-transformers lays it out in a model directory
// (Qwen3-Embedding, gte-Qwen2, e5-mistral):
//
//   <dir>/modules.json             [{"idx": 0, "name": "0", "path": "",
//                                    "type": "sentence_transformers.models.Transformer"},
//                                   {"idx": 1, "name": "1", "path": "1_Pooling",
//                                    "type": "sentence_transformers.models.Pooling"},
//                                   {"idx": 2, "name": "2", "path": "2_Normalize",
//                                    "type": "sentence_transformers.models.Normalize"}]
//   <dir>/1_Pooling/config.json    {"word_embedding_dimension": 1024,
//                                   "pooling_mode_lasttoken": true, ...}
//
// The pipeline read is the Transformer (the model's final hidden states, after its final norm),
// one Pooling module with one of the modes below, and an optional Normalize (L2). Anything else
// (Dense projections, several pooling modes concatenated, max or weighted-mean pooling) would
// change the vectors if ignored, so it is refused (Unimplemented) rather than served wrong.
// docs/engine.md ("Embedding models") has the exact rules.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"

namespace sovai::model {

// Limits on the files read (both are untrusted, like every file of a model directory).
inline constexpr uint64_t kMaxModulesJsonBytes = 64 << 10;
inline constexpr size_t kMaxSentenceTransformerModules = 16;
inline constexpr uint64_t kMaxPoolingConfigBytes = 64 << 10;
inline constexpr size_t kMaxModulePathBytes = 256;

enum class Pooling : uint8_t {
  kLastToken,  // the hidden state of the last token (decoder embedders: Qwen3-Embedding)
  kMean,       // the mean of every token's hidden state
  kCls,        // the hidden state of the first token
};
// "lasttoken", "mean", "cls".
const char* PoolingName(Pooling pooling);

struct PoolingConfig {
  Pooling pooling = Pooling::kLastToken;
  bool normalize = false;  // a Normalize module follows: unit-length (L2) vectors
  int64_t dimension = 0;   // the Pooling module's word_embedding_dimension (the hidden size)
};

// One entry of modules.json.
struct SentenceTransformerModule {
  std::string type;  // "sentence_transformers.models.Pooling", ...
  std::string path;  // relative to the model directory; "" for the directory itself
};

// modules.json: a list of at most kMaxSentenceTransformerModules objects with a string "type"
// and "path" (relative, no "..", at most kMaxModulePathBytes). Errors: InvalidArgument naming
// `file` for malformed JSON or a bad entry; ResourceExhausted past the limits.
base::Result<std::vector<SentenceTransformerModule>> ParseModulesJson(std::string_view text,
                                                                      std::string_view file);

// A Pooling module's config.json: the pooling_mode_* flags (exactly one of cls_token,
// mean_tokens, lasttoken true; max, mean_sqrt_len and weightedmean are Unimplemented), or
// "pooling_mode" as a string, and word_embedding_dimension, which must equal `hidden_size`.
// include_prompt false is Unimplemented for mean pooling (it needs the prompt's length).
base::Result<PoolingConfig> ParsePoolingModuleConfig(std::string_view text, std::string_view file,
                                                     int64_t hidden_size);

// The pooling of the model directory `dir`: nullopt when it has no modules.json (not a
// sentence-transformers model). Errors: those above, naming the file; NotFound when the Pooling
// module's config.json is missing; Unimplemented for a module type the pipeline cannot run, no
// Pooling module, or modules out of the order Transformer, Pooling, Normalize.
base::Result<std::optional<PoolingConfig>> ReadPoolingConfig(base::Env& env, const std::string& dir,
                                                             int64_t hidden_size);

}  // namespace sovai::model
