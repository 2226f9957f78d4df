#include "serve/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "base/check.h"
#include "kernels/backend.h"

namespace sovai::serve {
namespace {

using Candidate = SamplerScratch::Candidate;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Top-p without top-k gathers the tokens whose weight (probability relative to the most likely)
// is at least e^floor, for each floor in turn until they hold top_p of the total: each round is a
// pass of comparisons, and the nucleus is then found among far fewer tokens than V.
constexpr float kTopPLogWeightFloors[] = {-2.0f, -5.0f, -10.0f, -20.0f,
                                          -std::numeric_limits<float>::infinity()};
// Below this many candidates the nucleus search sorts instead of halving.
constexpr size_t kNucleusSortBelow = 64;

// Steps 2 and 3 of the contract (sampler.h). Returns the largest logit afterwards and the lowest
// id that has it; the largest is -inf when no token can be drawn.
std::pair<float, int32_t> MaskAndSanitize(std::span<float> logits, TokenMask allowed) {
  float max = kNegInf;
  int32_t argmax = -1;
  bool any_positive_inf = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    float& l = logits[i];
    if ((!allowed.empty() && allowed[i] == 0) || std::isnan(l)) l = kNegInf;
    if (l > max) {
      max = l;
      argmax = static_cast<int32_t>(i);
    }
    any_positive_inf |= std::isinf(l) && l > 0;
  }
  if (any_positive_inf) {
    for (float& l : logits) l = std::isinf(l) && l > 0 ? 0.0f : kNegInf;
    max = 0;
  }
  return {max, argmax};
}

// log(sum(exp(logits))) given their maximum (finite).
double LogSumExp(std::span<const float> logits, float max) {
  double sum = 0;
  for (float l : logits) sum += std::exp(l - max);
  return max + std::log(sum);
}

// The `n` largest finite logits, descending, ties to the lowest id: an insertion into a short
// sorted list, O(V) for n <= kSamplerMaxTopLogprobs.
std::vector<TokenLogprob> TopLogits(std::span<const float> logits, size_t n) {
  std::vector<TokenLogprob> top;
  if (n == 0) return top;
  top.reserve(n + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    float l = logits[i];
    // Ids arrive in increasing order, so a tie never displaces an earlier entry.
    if (!std::isfinite(l) || (top.size() == n && l <= top.back().logprob)) continue;
    auto at = std::upper_bound(top.begin(), top.end(), l, [](float value, const TokenLogprob& e) {
      return value > e.logprob;
    });
    top.insert(at, {static_cast<int32_t>(i), l});
    if (top.size() > n) top.pop_back();
  }
  return top;
}

// The order of likelihood: the larger logit first, ties to the lowest id.
bool Before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The k most likely tokens, in no particular order, into the empty `out` (weights not set): a
// heap of the best so far with the worst on top, which most tokens fail to beat in one
// comparison.
void KeepTopK(std::span<const float> logits, size_t k, std::vector<Candidate>* out) {
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == kNegInf) continue;
    Candidate c{logits[i], 0, static_cast<int32_t>(i)};
    if (out->size() < k) {
      out->push_back(c);
      std::push_heap(out->begin(), out->end(), Before);
    } else if (Before(c, out->front())) {
      std::pop_heap(out->begin(), out->end(), Before);
      out->back() = c;
      std::push_heap(out->begin(), out->end(), Before);
    }
  }
}

// Into the empty `out`: a set of the most likely tokens whose weights sum to at least `target`
// (or every token with weight, should rounding fall short), found by lowering a floor on the
// weight. Weights are monotone in the logits, so each such set holds the nucleus.
void GatherLikely(std::span<const float> logits, std::span<const float> weights, double target,
                  std::vector<Candidate>* out) {
  double gathered = 0;
  float ceiling = std::numeric_limits<float>::infinity();  // the previous rounds took w >= it
  for (float log_floor : kTopPLogWeightFloors) {
    float floor = std::exp(log_floor);
    for (size_t i = 0; i < weights.size(); ++i) {
      float w = weights[i];
      if (w >= floor && w < ceiling && w > 0) {
        out->push_back({logits[i], w, static_cast<int32_t>(i)});
        gathered += w;
      }
    }
    if (gathered >= target) return;
    ceiling = floor;
  }
}

// Reorders `c` so that the nucleus comes first, and returns its size: the fewest most likely
// candidates whose weights sum to at least `needed`, at least one. A quickselect on mass: split
// the range in half by likelihood (nth_element); if the likelier half holds what is still needed
// the cut lies in it, otherwise all of it is kept and the cut lies in the rest.
size_t NucleusSize(std::vector<Candidate>* c, double needed) {
  auto first = c->begin();
  size_t lo = 0;  // [0, lo) is kept, the cut is in (lo, hi]
  size_t hi = c->size();
  while (hi - lo > kNucleusSortBelow) {
    size_t mid = lo + (hi - lo) / 2;
    std::nth_element(first + lo, first + mid, first + hi, Before);
    double upper = 0;
    for (size_t i = lo; i < mid; ++i) upper += (*c)[i].weight;
    if (upper >= needed) {
      hi = mid;
    } else {
      needed -= upper;
      lo = mid;
    }
  }
  std::sort(first + lo, first + hi, Before);
  double sum = 0;
  for (size_t i = lo; i < hi; ++i) {
    sum += (*c)[i].weight;
    if (sum >= needed) return i + 1;
  }
  return hi;  // short of the target by rounding alone
}

// Draws index i of [0, n) with probability weight(i) / sum, with `u` uniform in [0, 1). Some
// weight must be positive.
template <typename WeightOf>
size_t DrawIndex(size_t n, const WeightOf& weight, double u) {
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += weight(i);
  const double target = u * total;
  double sum = 0;
  size_t drawn = n;
  for (size_t i = 0; i < n; ++i) {
    float w = weight(i);
    if (w == 0) continue;
    drawn = i;  // should rounding keep the sum at or below the target: the last with weight
    sum += w;
    if (sum > target) break;
  }
  SOVAI_CHECK(drawn < n) << "no weight to draw from";
  return drawn;
}

// Step 4 without greedy: temperature, top-k, top-p, min-p and the draw, over sanitized logits
// whose largest is `max` (finite). A weight is the token's probability over the likeliest one's
// (that one weighs 1 and survives top-k and top-p), so min-p keeps the weights >= min_p.
int32_t DrawToken(std::span<const float> logits, float max, const SamplingParams& params, double u,
                  std::vector<float>* weights, std::vector<Candidate>* candidates) {
  const float inv_temperature = 1.0f / params.temperature;
  auto weight_of = [&](float logit) { return std::exp((logit - max) * inv_temperature); };
  auto min_p_kept = [&](float weight) { return weight >= params.min_p ? weight : 0.0f; };
  candidates->clear();
  double total = 0;  // what top-p takes its share of: the top-k's weight, or every token's
  if (params.top_k > 0) {
    KeepTopK(logits, static_cast<size_t>(params.top_k), candidates);
    for (Candidate& c : *candidates) total += c.weight = weight_of(c.logit);
  } else {
    weights->resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) total += (*weights)[i] = weight_of(logits[i]);
    if (params.top_p >= 1) {
      // The whole vocabulary, in id order.
      return static_cast<int32_t>(DrawIndex(
          weights->size(), [&](size_t i) { return min_p_kept((*weights)[i]); }, u));
    }
    GatherLikely(logits, *weights, params.top_p * total, candidates);
  }
  if (params.top_p < 1) candidates->resize(NucleusSize(candidates, params.top_p * total));
  size_t drawn = DrawIndex(
      candidates->size(), [&](size_t i) { return min_p_kept((*candidates)[i].weight); }, u);
  return (*candidates)[drawn].id;
}

}  // namespace

uint64_t ChoiceSeed(uint64_t request_seed, int32_t index) {
  SOVAI_CHECK(index >= 0) << "choice index " << index;
  return request_seed + static_cast<uint64_t>(index);
}

base::Status ValidateSamplingParams(const SamplingParams& params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0) {
    return base::InvalidArgumentError("temperature must be a finite number >= 0, got " +
                                      std::to_string(params.temperature));
  }
  if (!(params.top_p > 0 && params.top_p <= 1)) {
    return base::InvalidArgumentError("top_p must be in (0, 1], got " +
                                      std::to_string(params.top_p));
  }
  if (params.top_k < 0) {
    return base::InvalidArgumentError("top_k must be >= 0 (0 turns it off), got " +
                                      std::to_string(params.top_k));
  }
  if (!std::isfinite(params.presence_penalty) || !std::isfinite(params.frequency_penalty)) {
    return base::InvalidArgumentError("presence_penalty and frequency_penalty must be finite");
  }
  if (!std::isfinite(params.repetition_penalty) || params.repetition_penalty <= 0) {
    return base::InvalidArgumentError("repetition_penalty must be a finite number > 0, got " +
                                      std::to_string(params.repetition_penalty));
  }
  if (!(params.min_p >= 0 && params.min_p <= 1)) {
    return base::InvalidArgumentError("min_p must be in [0, 1], got " +
                                      std::to_string(params.min_p));
  }
  for (size_t i = 0; i < params.logit_bias.size(); ++i) {
    const auto [token, bias] = params.logit_bias[i];
    if (token < 0 || (i > 0 && token <= params.logit_bias[i - 1].first) || !std::isfinite(bias)) {
      return base::InvalidArgumentError(
          "logit_bias must list non-negative token ids in increasing order with finite biases; "
          "entry " +
          std::to_string(i) + " is (" + std::to_string(token) + ", " + std::to_string(bias) + ")");
    }
  }
  if (params.top_logprobs < 0 || params.top_logprobs > kSamplerMaxTopLogprobs) {
    return base::InvalidArgumentError("top_logprobs must be in [0, " +
                                      std::to_string(kSamplerMaxTopLogprobs) + "], got " +
                                      std::to_string(params.top_logprobs));
  }
  return base::Status::Ok();
}

Sampler::Sampler(const SamplingParams& params, uint64_t seed, std::span<const int32_t> prompt)
    : params_(params), seed_(seed) {
  base::Status valid = ValidateSamplingParams(params);
  SOVAI_CHECK(valid.ok()) << valid;
  if (params_.repetition_penalty != 1) seen_.insert(prompt.begin(), prompt.end());
}

void Sampler::Accept(int32_t token) {
  SOVAI_CHECK(token >= 0) << "token " << token;
  if (params_.repetition_penalty != 1) seen_.insert(token);
  if (params_.presence_penalty == 0 && params_.frequency_penalty == 0) return;
  ++counts_[token];
}

double Sampler::NextUniform() {
  // Counter-based: draw n is a function of (seed, n) alone. The seed is mixed first so that
  // ChoiceSeed's neighbouring seeds do not give overlapping streams.
  ++draws_;
  uint64_t bits = kernels::SplitMix64(kernels::SplitMix64(seed_) + draws_ * 0x9E3779B97F4A7C15ull);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // 53 random bits in [0, 1)
}

base::Result<SampledToken> Sampler::Sample(std::span<float> logits, TokenMask allowed,
                                           SamplerScratch* scratch) {
  SOVAI_CHECK(!logits.empty());
  SOVAI_CHECK(allowed.empty() || allowed.size() == logits.size())
      << "mask of " << allowed.size() << " entries for " << logits.size() << " logits";
  SOVAI_CHECK(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  double u = NextUniform();  // every call takes one value, used or not

  // 1. Bias, then penalties.
  auto check_token = [&](int32_t token, const char* what) {
    SOVAI_CHECK(static_cast<size_t>(token) < logits.size())
        << what << " token " << token << " is outside the " << logits.size() << " logits";
  };
  for (const auto& [token, bias] : params_.logit_bias) {
    check_token(token, "biased");
    logits[token] += bias;
  }
  if (params_.repetition_penalty != 1) {
    const float p = params_.repetition_penalty;
    for (int32_t token : seen_) {
      check_token(token, "seen");
      float& logit = logits[token];
      logit = logit > 0 ? logit / p : logit * p;
    }
  }
  if (params_.presence_penalty != 0 || params_.frequency_penalty != 0) {
    for (auto [token, count] : counts_) {
      check_token(token, "accepted");
      logits[token] -= params_.presence_penalty + params_.frequency_penalty * count;
    }
  }
  // 2, 3. Mask and non-finite values.
  auto [max, argmax] = MaskAndSanitize(logits, allowed);
  if (max == kNegInf) {
    return base::FailedPreconditionError(
        "no token can be sampled: every token is disallowed or has a NaN or -inf logit");
  }

  SampledToken out;
  // 4. The draw.
  if (params_.Greedy() || params_.temperature < kGreedyTemperature) {
    out.token = argmax;
  } else {
    SamplerScratch local;
    SamplerScratch& buffers = scratch != nullptr ? *scratch : local;
    out.token = DrawToken(logits, max, params_, u, &buffers.weights_, &buffers.candidates_);
  }

  if (params_.logprobs || params_.top_logprobs > 0) {
    double log_total = LogSumExp(logits, max);
    out.logprob = static_cast<float>(logits[out.token] - log_total);
    out.top_logprobs = TopLogits(logits, static_cast<size_t>(params_.top_logprobs));
    for (TokenLogprob& entry : out.top_logprobs) {
      entry.logprob = static_cast<float>(entry.logprob - log_total);
    }
  }
  return out;
}

}  // namespace sovai::serve
