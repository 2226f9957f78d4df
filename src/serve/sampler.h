// Sampler: draws one sequence's next token from the model's logits, as vLLM does for OpenAI
// requests, and reports log-probabilities.
//
//   Sampler sampler(request.sampling, ChoiceSeed(seed, choice_index));
//   SOVAI_ASSIGN_OR_RETURN(SampledToken next, sampler.Sample(logits, allowed, &scratch));
//   sampler.Accept(next.token);
//
// One Sample call, in vLLM's order, over logits[V] (modified in place: after the call they hold
// the values of steps 1-3, which is what logprobs describe):
//   1. logit_bias: logit[t] += bias[t]; then the repetition penalty over the tokens of the prompt
//      and the ones generated so far (logit[t] / p when positive, * p otherwise), then the
//      penalties over the tokens generated so far (counted by Accept):
//        logit[t] -= presence_penalty * (count[t] > 0) + frequency_penalty * count[t]
//   2. the allowed-token mask: a disallowed token's logit becomes -inf
//   3. non-finite logits: NaN becomes -inf (never drawn); if any logit is +inf, the +inf tokens
//      share all the probability equally (their logits become 0, all others -inf)
//   4. greedy (temperature below kGreedyTemperature, or top_k == 1): the argmax, ties to the
//      lowest id; otherwise logits / temperature, then top-k (the k largest, ties to the lowest
//      id), then top-p (the smallest set of the most likely tokens whose probability, renormalized
//      after top-k, reaches top_p; never empty), then min-p (drop the tokens whose probability is
//      below min_p times the likeliest one's), and a draw from what is left.
//
// Log-probabilities are log_softmax of the logits after steps 1-3 and before temperature, top-k
// and top-p: the model's distribution over what this request may emit. Penalties and the mask are
// in because they define what can be emitted (a token a JSON schema forbids is never listed, and
// the sampled token always has a finite logprob); temperature and truncation are out because they
// are choices about drawing, not about the model (with them, greedy requests would report 0 for
// every token and top-k would report -inf for most alternatives). vLLM's default reports the raw
// logits (before penalties too); the two agree whenever there are no penalties and no mask.
//
// Randomness: each Sample call takes the next value of a counter-based splitmix64 stream keyed by
// the seed, so a sampler's n-th draw depends only on its seed, n and the logits — not on the
// batch, the thread or other sequences. The engine seeds choice i of a request with
// ChoiceSeed(seed, i), where seed is the request's seed or, without one, a random value drawn
// once per request.
//
// Cost over V logits: a few O(V) passes, one of them of exp (penalties touch only generated
// tokens). Top-k keeps a heap of the k best; top-p gathers the likeliest tokens by thresholds on
// their weight, then finds where the nucleus ends by a quickselect on probability mass (expected
// linear time); nothing sorts the whole vocabulary.
//
// Thread-safety: a Sampler belongs to one sequence and is used by one thread at a time; a
// SamplerScratch belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "serve/request.h"

namespace sovai::serve {

// The most alternatives the sampler reports (OpenAI's limit on top_logprobs; openai_api.h has
// its own name for the same bound).
inline constexpr int32_t kSamplerMaxTopLogprobs = 20;
// Temperatures below this are greedy (vLLM's _SAMPLING_EPS): dividing by them overflows.
inline constexpr float kGreedyTemperature = 1e-5f;

// The allowed-token mask from constrained decoding: one byte per token of the logits, nonzero
// for a token that may be drawn; an empty span allows every token. Bytes rather than bits: the
// producer sets entries without shifting, applying it is a plain pass, and V bytes a step is
// small next to the 4V bytes of logits.
using TokenMask = std::span<const uint8_t>;

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  bool operator==(const TokenLogprob&) const = default;
};

struct SampledToken {
  int32_t token = -1;
  float logprob = 0;  // with params.logprobs: the token's log-probability (see above); else 0
  // With params.top_logprobs > 0: that many most likely tokens, by logprob descending, ties to the
  // lowest id; fewer when fewer tokens have a finite logprob.
  std::vector<TokenLogprob> top_logprobs;
};

// Buffers Sample reuses across calls (a weight per token, up to V candidates: a few MiB at
// V = 152k). Pass one per sampling thread; without one, each call allocates its own.
class SamplerScratch {
 public:
  SamplerScratch() = default;

  // A token still in the running (internal to the sampler).
  struct Candidate {
    float logit;
    float weight;  // exp((logit - max) / temperature)
    int32_t id;
  };

 private:
  friend class Sampler;
  std::vector<float> weights_;
  std::vector<Candidate> candidates_;
};

// The seed of choice `index` (0-based) of a request whose seed is `request_seed`: the seed plus
// the index, wrapping (vLLM's rule for n > 1). The sampler mixes its seed, so neighbouring seeds
// give unrelated streams.
uint64_t ChoiceSeed(uint64_t request_seed, int32_t index);

// OK when the sampler can run `params`: temperature finite and >= 0, top_p in (0, 1], top_k >= 0,
// finite penalties, a finite repetition_penalty > 0, min_p in [0, 1], logit_bias sorted by
// non-negative token ids, each once, with finite biases, top_logprobs in
// [0, kSamplerMaxTopLogprobs]. Otherwise InvalidArgument naming the field. (The API layer
// enforces OpenAI's narrower ranges; token ids beyond the vocabulary are Sample's to catch.)
base::Status ValidateSamplingParams(const SamplingParams& params);

class Sampler {
 public:
  // `params` must pass ValidateSamplingParams (checked: the API layer validates requests).
  // `prompt` (its tokens) is what the repetition penalty counts besides the generated tokens.
  Sampler(const SamplingParams& params, uint64_t seed, std::span<const int32_t> prompt = {});

  // Draws the next token from `logits` (V > 0 entries; modified in place, see above). `allowed`
  // is empty or has V entries (checked). Errors: FailedPrecondition when no token can be drawn
  // (every token disallowed or with a NaN or -inf logit); the sequence cannot continue.
  base::Result<SampledToken> Sample(std::span<float> logits, TokenMask allowed = {},
                                    SamplerScratch* scratch = nullptr);

  // Counts `token` (>= 0) as generated, for the penalties. A no-op when no penalty is on.
  // The engine calls it for every token appended to the sequence, sampled or forced.
  void Accept(int32_t token);

  const SamplingParams& params() const { return params_; }
  // Sample calls so far: the position in the random stream.
  uint64_t draws() const { return draws_; }

 private:
  double NextUniform();

  SamplingParams params_;
  uint64_t seed_;
  uint64_t draws_ = 0;
  std::unordered_map<int32_t, int32_t> counts_;  // generated token -> times
  std::unordered_set<int32_t> seen_;  // prompt and generated tokens, for repetition_penalty
};

}  // namespace sovai::serve
