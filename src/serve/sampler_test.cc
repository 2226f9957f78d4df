#include "serve/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

namespace sovai::serve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

SamplingParams Params(float temperature, float top_p = 1, int32_t top_k = 0) {
  SamplingParams params;
  params.temperature = temperature;
  params.top_p = top_p;
  params.top_k = top_k;
  return params;
}

int32_t Draw(Sampler& sampler, std::vector<float> logits, TokenMask allowed = {},
             SamplerScratch* scratch = nullptr) {
  auto sampled = sampler.Sample(logits, allowed, scratch);
  EXPECT_TRUE(sampled.ok()) << sampled.status();
  return sampled.ok() ? sampled->token : -1;
}

// How often each token is drawn in `draws` calls.
std::vector<int> Histogram(Sampler& sampler, const std::vector<float>& logits, int draws,
                           TokenMask allowed = {}) {
  std::vector<int> counts(logits.size());
  SamplerScratch scratch;
  for (int i = 0; i < draws; ++i) {
    int32_t token = Draw(sampler, logits, allowed, &scratch);
    if (token >= 0) ++counts[token];
  }
  return counts;
}

// Pearson's chi-square statistic of `counts` against probabilities `p`.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p) {
  double n = std::accumulate(counts.begin(), counts.end(), 0.0);
  double chi2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    double expected = n * p[i];
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

// log_softmax in double, the plain way.
std::vector<double> LogSoftmax(const std::vector<float>& logits) {
  double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(l - max);
  std::vector<double> out;
  for (float l : logits) out.push_back(l - max - std::log(sum));
  return out;
}

TEST(SamplerTest, GreedyPicksTheArgmaxTiesToTheLowestId) {
  Sampler greedy(Params(0), 1);
  EXPECT_EQ(Draw(greedy, {0.5f, 2.0f, -1.0f, 1.9f}), 1);
  EXPECT_EQ(Draw(greedy, {3.0f, 1.0f, 3.0f, 3.0f}), 0);
  EXPECT_EQ(Draw(greedy, {-5.0f, -2.0f, -2.0f}), 1);
  // top_k == 1 is greedy whatever the temperature, and so is a temperature too small to divide.
  Sampler top1(Params(1.5f, 1, 1), 2);
  Sampler tiny(Params(1e-7f), 3);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(Draw(top1, {1.0f, 1.2f, 1.1f, 1.2f}), 1);
    EXPECT_EQ(Draw(tiny, {1.0f, 1.2f, 1.1f, 1.2f}), 1);
  }
}

TEST(SamplerTest, SameSeedSameLogitsSameTokens) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i)) * 3;
  for (SamplingParams params : {Params(1), Params(0.7f, 0.9f), Params(1.3f, 1, 40)}) {
    Sampler a(params, 42);
    Sampler b(params, 42);
    Sampler other(params, 43);
    Sampler next_choice(params, ChoiceSeed(42, 1));
    SamplerScratch scratch;
    int same_as_other = 0;
    int same_as_next_choice = 0;
    for (int step = 0; step < 200; ++step) {
      // Interleaving other samplers and sharing scratch changes nothing for `a`.
      int32_t from_other = Draw(other, logits, {}, &scratch);
      int32_t from_next = Draw(next_choice, logits);
      int32_t from_a = Draw(a, logits, {}, &scratch);
      EXPECT_EQ(from_a, Draw(b, logits)) << "step " << step;
      same_as_other += from_a == from_other;
      same_as_next_choice += from_a == from_next;
    }
    EXPECT_LT(same_as_other, 100) << "other seeds give other tokens";
    EXPECT_LT(same_as_next_choice, 100);
    EXPECT_EQ(a.draws(), 200u);
  }
  EXPECT_EQ(ChoiceSeed(7, 0), 7u);
  EXPECT_EQ(ChoiceSeed(7, 3), 10u);
  EXPECT_EQ(ChoiceSeed(~0ull, 1), 0u) << "wraps";
}

TEST(SamplerTest, DrawsFollowTheDistribution) {
  // chi-square with 3 degrees of freedom: 16.27 is the 0.001 quantile. The seed is fixed, so the
  // test is stable; a biased sampler lands far above (thousands).
  std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  std::vector<float> logits;
  for (double q : p) logits.push_back(static_cast<float>(std::log(q)));
  Sampler plain(Params(1), 1234);
  EXPECT_LT(ChiSquare(Histogram(plain, logits, 20000), p), 16.27);

  // Temperature 0.5 squares the probabilities.
  std::vector<double> squared;
  for (double q : p) squared.push_back(q * q / 0.3);
  Sampler cold(Params(0.5f), 99);
  EXPECT_LT(ChiSquare(Histogram(cold, logits, 20000), squared), 16.27);
  // The uniform distribution is not what `cold` draws.
  Sampler cold_again(Params(0.5f), 99);
  EXPECT_GT(ChiSquare(Histogram(cold_again, logits, 20000), {0.25, 0.25, 0.25, 0.25}), 1000);
}

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f, 2.0f, -1.0f};
  Sampler top2(Params(1, 1, 2), 5);
  std::vector<int> counts = Histogram(top2, logits, 4000);
  // Tokens 2 and 4 tie for second place: the lower id stays.
  EXPECT_EQ(counts, (std::vector<int>{0, counts[1], counts[2], 0, 0, 0}));
  double e = std::exp(1.0);
  EXPECT_LT(ChiSquare(counts, {0, e / (e + 1), 1 / (e + 1), 0, 0, 0}), 10.83);  // 1 dof, 0.001
  // top_k at or above the number of tokens changes nothing.
  Sampler all(Params(1, 1, 100), 6);
  std::vector<int> wide = Histogram(all, logits, 20000);
  EXPECT_TRUE(std::all_of(wide.begin(), wide.end(), [](int c) { return c > 0; }));
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  std::vector<double> p = {0.05, 0.5, 0.15, 0.3};
  std::vector<float> logits;
  for (double q : p) logits.push_back(static_cast<float>(std::log(q)));
  // 0.5 + 0.3 = 0.8 reaches 0.75: tokens 1 and 3.
  Sampler p75(Params(1, 0.75f), 11);
  std::vector<int> counts = Histogram(p75, logits, 8000);
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[2], 0);
  EXPECT_LT(ChiSquare(counts, {0, 0.5 / 0.8, 0, 0.3 / 0.8}), 10.83);
  // 0.81 needs token 2 as well.
  Sampler p81(Params(1, 0.81f), 12);
  counts = Histogram(p81, logits, 8000);
  EXPECT_EQ(counts[0], 0);
  EXPECT_LT(ChiSquare(counts, {0, 0.5 / 0.95, 0.15 / 0.95, 0.3 / 0.95}), 13.82);  // 2 dof
  // A tiny top_p still keeps the most likely token.
  Sampler tiny(Params(1, 1e-6f), 13);
  counts = Histogram(tiny, logits, 100);
  EXPECT_EQ(counts[1], 100);
  // top-k first, then top-p over the renormalized top-k: of {0.5, 0.3}, 0.5 / 0.8 >= 0.6.
  Sampler both(Params(1, 0.6f, 2), 14);
  counts = Histogram(both, logits, 100);
  EXPECT_EQ(counts[1], 100);
}

TEST(SamplerTest, TopPOverALargeVocabularyMatchesAFullSort) {
  // 152k tokens, the nucleus a few hundred (past the first two chunks), in groups of ties.
  const size_t v = 152064;
  std::vector<float> logits(v);
  for (size_t i = 0; i < v; ++i) {
    logits[i] = i % 397 == 0 ? 12.0f + 0.1f * static_cast<float>(i % 3) : static_cast<float>(i % 5);
  }
  const float top_p = 0.9f;
  // The reference nucleus: sort everything.
  std::vector<int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  double max = logits[order[0]];
  double total = 0;
  for (float l : logits) total += std::exp(l - max);
  std::set<int32_t> nucleus;
  double sum = 0;
  for (int32_t i : order) {
    nucleus.insert(i);
    sum += std::exp(logits[i] - max);
    if (sum >= top_p * total) break;
  }
  ASSERT_GT(nucleus.size(), 200u);
  ASSERT_LT(nucleus.size(), 384u);

  Sampler sampler(Params(1, top_p), 2024);
  std::vector<int> counts = Histogram(sampler, logits, 1000);
  std::set<int32_t> drawn;
  for (size_t i = 0; i < v; ++i) {
    if (counts[i] > 0) drawn.insert(static_cast<int32_t>(i));
  }
  for (int32_t i : drawn) EXPECT_TRUE(nucleus.contains(i)) << "token " << i;
  EXPECT_GT(drawn.size(), nucleus.size() / 2);
}

TEST(SamplerTest, PenaltiesFollowTheFormula) {
  SamplingParams params = Params(0);
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  Sampler sampler(params, 1);
  sampler.Accept(3);
  sampler.Accept(3);
  sampler.Accept(1);
  std::vector<float> logits = {1.0f, 2.0f, 0.0f, 2.2f};
  ASSERT_TRUE(sampler.Sample(logits).ok());
  // Sample leaves the penalized logits in place.
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 2.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[2], 0.0f);
  EXPECT_FLOAT_EQ(logits[3], 2.2f - 0.5f - 0.5f);
  // The penalties moved the argmax from token 3 (2.2 > 2.0) to token 1 (1.25 > 1.2).
  std::vector<float> again = {1.0f, 2.0f, 0.0f, 2.2f};
  EXPECT_EQ(Draw(sampler, again), 1);

  // Negative penalties encourage repetition.
  SamplingParams encourage = Params(0);
  encourage.presence_penalty = -1;
  Sampler repeat(encourage, 1);
  repeat.Accept(0);
  EXPECT_EQ(Draw(repeat, {1.0f, 1.5f}), 0);

  // Without penalties nothing is counted or changed.
  Sampler none(Params(0), 1);
  none.Accept(1);
  std::vector<float> same = {1.0f, 2.0f};
  ASSERT_TRUE(none.Sample(same).ok());
  EXPECT_EQ(same, (std::vector<float>{1.0f, 2.0f}));
}

TEST(SamplerTest, LogitBiasIsAddedBeforeThePenalties) {
  SamplingParams params = Params(0);
  params.logit_bias = {{0, 5.0f}, {2, -100.0f}};
  params.presence_penalty = 1;
  Sampler sampler(params, 1);
  sampler.Accept(0);
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  auto sampled = sampler.Sample(logits);
  ASSERT_TRUE(sampled.ok());
  EXPECT_EQ(logits, (std::vector<float>{1.0f + 5 - 1, 2.0f, 3.0f - 100}));
  EXPECT_EQ(sampled->token, 0);
  // -100 bans a token for any sampling: what is left is drawn.
  SamplingParams ban = Params(1);
  ban.logit_bias = {{1, -100.0f}};
  Sampler banned(ban, 7);
  const std::vector<int> counts = Histogram(banned, {0.0f, 3.0f, 0.0f}, 2000);
  EXPECT_EQ(counts[1], 0);
  EXPECT_GT(counts[0], 800);
  EXPECT_GT(counts[2], 800);
}

TEST(SamplerTest, RepetitionPenaltyCoversThePromptAndTheGeneratedTokens) {
  SamplingParams params = Params(0);
  params.repetition_penalty = 2;
  const std::vector<int32_t> prompt = {0, 2, 0};
  Sampler sampler(params, 1, prompt);
  std::vector<float> logits = {3.0f, 2.0f, -1.0f, -1.5f};
  ASSERT_TRUE(sampler.Sample(logits).ok());
  // Positive logits are divided, negative ones multiplied; each seen token once.
  EXPECT_EQ(logits, (std::vector<float>{1.5f, 2.0f, -2.0f, -1.5f}));
  sampler.Accept(1);
  logits = {3.0f, 2.0f, -1.0f, -1.5f};
  EXPECT_EQ(Draw(sampler, logits), 0) << "1 is now penalized as well: 1.5 > 1.0";
  // 1 (off) changes nothing, whatever the prompt.
  Sampler off(Params(0), 1, prompt);
  logits = {3.0f, 2.0f, -1.0f, -1.5f};
  ASSERT_TRUE(off.Sample(logits).ok());
  EXPECT_EQ(logits, (std::vector<float>{3.0f, 2.0f, -1.0f, -1.5f}));
}

TEST(SamplerTest, MinPDropsTokensFarLessLikelyThanTheTopOne) {
  // Probabilities ~ 0.49, 0.33, 0.18 (logits ln 0.49 ...): min_p 0.5 keeps 0 and 1 (0.33 / 0.49
  // = 0.67), min_p 0.7 only 0.
  const std::vector<float> logits = {std::log(0.49f), std::log(0.33f), std::log(0.18f)};
  for (const int32_t top_k : {0, 3}) {
    SamplingParams params = Params(1, 1, top_k);
    params.min_p = 0.5f;
    Sampler half(params, 3);
    const std::vector<int> counts = Histogram(half, logits, 3000);
    EXPECT_EQ(counts[2], 0) << "top_k " << top_k;
    EXPECT_LT(ChiSquare(counts, {0.49 / 0.82, 0.33 / 0.82, 0}), 13.8) << "top_k " << top_k;
    params.min_p = 0.7f;
    Sampler strict(params, 3);
    EXPECT_EQ(Histogram(strict, logits, 500)[0], 500) << "top_k " << top_k;
  }
  // After top-p, as vLLM: top_p 0.9 keeps 0 and 1 and 2 (0.82 < 0.9), min_p then drops 2.
  SamplingParams nucleus = Params(1, 0.9f);
  nucleus.min_p = 0.5f;
  Sampler both(nucleus, 5);
  EXPECT_EQ(Histogram(both, logits, 2000)[2], 0);
  // min_p 1 keeps the likeliest token only (the draw always has something to draw).
  nucleus.min_p = 1;
  Sampler top(nucleus, 5);
  EXPECT_EQ(Histogram(top, logits, 200)[0], 200);
}

TEST(SamplerTest, MaskIsRespected) {
  std::vector<float> logits = {5.0f, 1.0f, 4.0f, 1.0f};
  std::vector<uint8_t> allowed = {0, 1, 1, 1};
  Sampler greedy(Params(0), 1);
  EXPECT_EQ(Draw(greedy, logits, allowed), 2);
  Sampler sampled(Params(2), 2);
  std::vector<int> counts = Histogram(sampled, logits, 2000, allowed);
  EXPECT_EQ(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  Sampler top_p(Params(1, 0.99f, 3), 3);
  EXPECT_EQ(Histogram(top_p, logits, 500, allowed)[0], 0);

  // Nothing allowed: an error, not a token.
  std::vector<uint8_t> nothing(4, 0);
  std::vector<float> copy = logits;
  auto none = greedy.Sample(copy, nothing);
  EXPECT_EQ(none.status().code(), base::StatusCode::kFailedPrecondition) << none.status();
  copy = logits;
  none = sampled.Sample(copy, nothing);
  EXPECT_EQ(none.status().code(), base::StatusCode::kFailedPrecondition);
}

TEST(SamplerDeathTest, MaskOfTheWrongSizeIsABug) {
  Sampler sampler(Params(1), 1);
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  std::vector<uint8_t> short_mask = {1, 1};
  EXPECT_DEATH((void)sampler.Sample(logits, short_mask), "mask of 2 entries for 3 logits");
}

TEST(SamplerTest, LogprobsAreLogSoftmaxAfterPenaltiesAndMask) {
  std::vector<float> logits = {0.3f, -1.2f, 2.5f, 2.5f, 0.0f, 7.0f, -3.0f, 1.1f};
  std::vector<uint8_t> allowed = {1, 1, 1, 1, 1, 0, 1, 1};
  for (SamplingParams params : {Params(0), Params(0.3f), Params(1.7f, 0.5f, 3)}) {
    params.logprobs = true;
    params.top_logprobs = 4;
    params.frequency_penalty = 1;
    Sampler sampler(params, 8);
    sampler.Accept(0);
    std::vector<float> input = logits;
    auto sampled = sampler.Sample(input, allowed);
    ASSERT_TRUE(sampled.ok()) << sampled.status();

    // The reference: penalty on token 0, token 5 removed. Temperature and truncation do not
    // enter.
    std::vector<float> expected_logits = logits;
    expected_logits[0] -= 1;
    expected_logits.erase(expected_logits.begin() + 5);
    std::vector<double> reference = LogSoftmax(expected_logits);
    reference.insert(reference.begin() + 5, -kInf);
    ASSERT_NE(sampled->token, 5);
    EXPECT_NEAR(sampled->logprob, reference[sampled->token], 1e-5);
    // Descending, ties to the lowest id (2 before 3), the masked 5 absent.
    ASSERT_EQ(sampled->top_logprobs.size(), 4u);
    std::vector<int32_t> ids;
    for (const TokenLogprob& e : sampled->top_logprobs) {
      ids.push_back(e.token);
      EXPECT_NEAR(e.logprob, reference[e.token], 1e-5) << "token " << e.token;
    }
    EXPECT_EQ(ids, (std::vector<int32_t>{2, 3, 7, 4}));
  }
  // More alternatives asked for than tokens can be emitted: only the finite ones.
  SamplingParams params = Params(0);
  params.logprobs = true;
  params.top_logprobs = kSamplerMaxTopLogprobs;
  Sampler sampler(params, 1);
  std::vector<float> three = {1.0f, -kInf, 2.0f};
  auto sampled = sampler.Sample(three);
  ASSERT_TRUE(sampled.ok());
  EXPECT_EQ(sampled->top_logprobs.size(), 2u);
  // Without logprobs none are computed.
  Sampler quiet(Params(0), 1);
  std::vector<float> values = {1.0f, 2.0f};
  auto plain = quiet.Sample(values);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->logprob, 0);
  EXPECT_TRUE(plain->top_logprobs.empty());
}

TEST(SamplerTest, NonFiniteLogitsHaveADefinedMeaning) {
  SamplingParams params = Params(1);
  params.logprobs = true;
  params.top_logprobs = 3;
  // NaN is never drawn.
  Sampler sampler(params, 77);
  std::vector<float> with_nan = {kNaN, 0.0f, kNaN, 0.0f};
  std::vector<int> counts = Histogram(sampler, with_nan, 400);
  EXPECT_EQ(counts[0] + counts[2], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[3], 0);
  // +inf tokens share all the probability.
  std::vector<float> one_inf = {1.0f, kInf, 3.0f};
  auto sampled = sampler.Sample(one_inf);
  ASSERT_TRUE(sampled.ok());
  EXPECT_EQ(sampled->token, 1);
  EXPECT_EQ(sampled->logprob, 0.0f);
  ASSERT_EQ(sampled->top_logprobs.size(), 1u);
  counts = Histogram(sampler, {kInf, 1.0f, kInf, kNaN}, 1000);
  EXPECT_EQ(counts[1] + counts[3], 0);
  EXPECT_LT(ChiSquare(counts, {0.5, 0, 0.5, 0}), 10.83);
  std::vector<float> two_inf = {kInf, 1.0f, kInf};
  sampled = sampler.Sample(two_inf);
  ASSERT_TRUE(sampled.ok());
  EXPECT_NEAR(sampled->logprob, -std::log(2.0), 1e-6);
  // Greedy with +inf and -inf.
  Sampler greedy(Params(0), 1);
  EXPECT_EQ(Draw(greedy, {-kInf, 2.0f, kInf, kInf}), 2);
  // Nothing finite: an error.
  for (std::vector<float> hopeless :
       {std::vector<float>{kNaN, kNaN}, std::vector<float>{-kInf, kNaN, -kInf}}) {
    auto failed = sampler.Sample(hopeless);
    EXPECT_EQ(failed.status().code(), base::StatusCode::kFailedPrecondition);
    EXPECT_NE(failed.status().message().find("no token can be sampled"), std::string::npos);
    failed = greedy.Sample(hopeless);
    EXPECT_EQ(failed.status().code(), base::StatusCode::kFailedPrecondition);
  }
}

TEST(SamplerTest, ExtremeTemperaturesStayFinite) {
  std::vector<float> logits = {-30000.0f, 0.0f, 30000.0f, 29999.0f};
  Sampler cold(Params(1e-4f), 1);
  Sampler hot(Params(1e4f), 1);
  SamplerScratch scratch;
  std::vector<int> hot_counts(4);
  for (int i = 0; i < 2000; ++i) {
    EXPECT_EQ(Draw(cold, logits, {}, &scratch), 2);
    ++hot_counts[Draw(hot, logits)];
  }
  // At temperature 10^4 token 1 has probability e^-3 / (2 + e^-3 + e^-6), about 2.4%.
  EXPECT_GT(hot_counts[1], 20);
  EXPECT_GT(hot_counts[2], 500);
  EXPECT_GT(hot_counts[3], 500);
}

TEST(SamplerTest, ValidationNamesTheField) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  struct Case {
    SamplingParams params;
    std::string field;
  };
  std::vector<Case> cases;
  auto add = [&](std::string field, auto change) {
    SamplingParams params;
    change(params);
    cases.push_back({params, field});
  };
  add("temperature", [](SamplingParams& p) { p.temperature = -0.1f; });
  add("temperature", [](SamplingParams& p) { p.temperature = kNaN; });
  add("temperature", [](SamplingParams& p) { p.temperature = kInf; });
  add("top_p", [](SamplingParams& p) { p.top_p = 0; });
  add("top_p", [](SamplingParams& p) { p.top_p = 1.01f; });
  add("top_p", [](SamplingParams& p) { p.top_p = kNaN; });
  add("top_k", [](SamplingParams& p) { p.top_k = -1; });
  add("presence_penalty", [](SamplingParams& p) { p.presence_penalty = kNaN; });
  add("frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -kInf; });
  add("top_logprobs", [](SamplingParams& p) { p.top_logprobs = kSamplerMaxTopLogprobs + 1; });
  add("top_logprobs", [](SamplingParams& p) { p.top_logprobs = -1; });
  add("repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0; });
  add("repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = kInf; });
  add("min_p", [](SamplingParams& p) { p.min_p = -0.1f; });
  add("min_p", [](SamplingParams& p) { p.min_p = kNaN; });
  add("logit_bias", [](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; });
  add("logit_bias", [](SamplingParams& p) { p.logit_bias = {{3, 1.0f}, {3, 2.0f}}; });
  add("logit_bias", [](SamplingParams& p) { p.logit_bias = {{4, 1.0f}, {3, 2.0f}}; });
  add("logit_bias", [](SamplingParams& p) { p.logit_bias = {{3, kNaN}}; });
  for (const Case& c : cases) {
    base::Status status = ValidateSamplingParams(c.params);
    EXPECT_EQ(status.code(), base::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(status.message().find(c.field), std::string::npos) << status;
  }
}

TEST(SamplerDeathTest, InvalidParamsAreABug) {
  SamplingParams params;
  params.top_p = 0;
  EXPECT_DEATH(Sampler(params, 1), "top_p");
}

}  // namespace
}  // namespace sovai::serve
