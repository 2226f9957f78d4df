// What one generation asks of the engine, after the API layer has parsed and validated it. The
// OpenAI layer (openai_api.h) fills these from a request body; the engine (engine.h) runs them;
// the sampler (sampler.h), the text stream (text_stream.h) and the JSON constraint
// (json_constraint.h) each read their part.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sovai::serve {

// How the next token is drawn from the logits (OpenAI's and vLLM's meanings).
struct SamplingParams {
  // 0: greedy (argmax; ties to the lowest id). Otherwise logits are divided by it.
  float temperature = 1.0f;
  float top_p = 1.0f;  // (0, 1]: the smallest set of tokens whose probability reaches top_p
  int32_t top_k = 0;   // 0: off; else only the k most likely tokens
  // OpenAI's penalties over the tokens generated so far (not the prompt), in [-2, 2]:
  //   logit[t] -= presence_penalty * (count[t] > 0) + frequency_penalty * count[t]
  float presence_penalty = 0;
  float frequency_penalty = 0;
  // vLLM's repetition_penalty (CTRL's rule; 1: off): over the tokens of the prompt and the ones
  // generated so far, a positive logit is divided by it and a negative one multiplied by it.
  float repetition_penalty = 1;
  // OpenAI's logit_bias: (token, bias) added to the token's logit before anything else; sorted
  // by token, each token once.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // vLLM's min_p in [0, 1] (0: off): after temperature, top-k and top-p, the tokens less likely
  // than min_p times the likeliest one are dropped. Greedy decoding ignores it.
  float min_p = 0;
  // The request's seed; without one the engine draws a seed per request. The same seed gives the
  // same tokens whatever else is in the batch.
  std::optional<uint64_t> seed;
  bool logprobs = false;     // report the sampled token's log-probability
  int32_t top_logprobs = 0;  // and the most likely alternatives, 0..20

  bool Greedy() const { return temperature == 0 || top_k == 1; }
};

// Constrained decoding (`response_format`).
struct ResponseFormat {
  enum class Kind : uint8_t { kText, kJsonObject, kJsonSchema };
  Kind kind = Kind::kText;
  nlohmann::json schema;  // for kJsonSchema: the JSON Schema (subset, json_constraint.h)
  std::string schema_name;
};

struct GenerationRequest {
  std::string model;    // the name the client asked for (base model or adapter)
  std::string adapter;  // empty: the base model
  // Token ids, chat template already applied; one prompt, or several (a batched completion:
  // choice p * n + i is choice i of prompt p, answered as a request of its own would be).
  std::vector<std::vector<int32_t>> prompts;
  int64_t max_tokens = 0;  // > 0, already clipped to the context left after the longest prompt
  std::vector<std::string> stop;        // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;  // besides the model's end-of-sequence tokens
  bool ignore_eos = false;
  // vLLM's min_tokens (<= max_tokens): until a choice has this many tokens, its end tokens
  // (EOS, stop_token_ids) cannot be drawn and stop strings are not looked for.
  int64_t min_tokens = 0;
  int32_t n = 1;  // choices per prompt
  SamplingParams sampling;
  ResponseFormat response_format;
  bool echo = false;  // completions: include the prompt text in the output
};

// A request whose prompts are only prefilled, one output each (POST /v1/embeddings, /v1/rerank):
// no token is generated and no KV is kept for it afterwards (its full blocks stay in the prefix
// cache, as any finished sequence's).
struct PoolingRequest {
  enum class Output : uint8_t {
    kEmbedding,   // the model's pooling (model/pooling_config.h) of the final hidden states
    kYesNoScore,  // P("yes") of the last token's logits over the pair {yes, no} (rerankers)
  };
  std::string adapter;  // empty: the base model
  std::vector<std::vector<int32_t>> prompts;
  Output output = Output::kEmbedding;
  int32_t yes_token = -1;  // kYesNoScore: token ids inside the vocabulary
  int32_t no_token = -1;
};

// Why a choice ended, as OpenAI spells it.
enum class FinishReason : uint8_t {
  kNone,    // still running
  kStop,    // end-of-sequence token, stop string or stop token
  kLength,  // max_tokens or the context length
  kAbort,   // cancelled (the client went away) or failed
};
// "stop", "length", "abort"; "" for kNone.
const char* FinishReasonName(FinishReason reason);

}  // namespace sovai::serve
