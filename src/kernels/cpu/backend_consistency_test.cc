// Every op of the cpu backend against the reference backend, in the style of ggml's
// test-backend-ops: a case builds its inputs from a fixed seed, runs one op (forward, or forward
// and backward) on a backend and returns every array the op wrote; the test runs the case on the
// reference backend and on cpu backends with 1, 2 and 3 threads (which take different parallel
// paths: single-threaded, split products, two-pass attention backward; the attention test adds
// the AVX2 and baseline variants of its tiles) and compares each array.
//
// Gradient buffers start with small random values (the same on both sides, std kGradientStart,
// well below the gradients so that they do not dominate the scale the tolerance is relative to):
// a backward op that overwrote instead of ACCUMULATING would be off by that much, which the
// tolerances catch.
//
// Tolerance: the reference sums in double, the cpu backend in f32 in another order, so an element
// may differ by a few f32 roundings of the terms of its sum. An element passes when
//   |cpu - reference| <= tolerance * (|reference| + rms(reference array)),
// the rms term standing for the magnitude of the terms where a sum cancels to near zero. The
// tolerances below are about ten times the largest error measured on these cases (noted beside
// each); the ToleranceCatches test shows that they still catch one wrong element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/nf4.h"
#include "kernels/q8_0.h"
#include "kernels/weight.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace sovai::kernels {
namespace {

using Vec = std::vector<float>;
using Outputs = std::vector<std::pair<std::string, Vec>>;

// Bit-exact ops: copies, NF4 and bf16 expansion, AdamW's double arithmetic and RoPE's rotation
// (both computed with the reference's operations in the reference's order), Scale.
constexpr double kExact = 0;
// Element-wise f32 math with our exp (2 ulp) instead of libm's, or double math summed in another
// order (RMSNorm): measured <= 2.6e-7.
constexpr double kElementwise = 3e-6;
// f32 dot products of length <= 300 (sgemm, linear, LoRA, cross-entropy): measured <= 7.5e-7,
// except cross-entropy's dweight (sums over rows of f32 softmax probabilities that largely
// cancel): <= 2.3e-6.
constexpr double kProducts = 2e-5;
// Attention: products of length D and T, exp of scores up to ~10 apart, the backward pass reusing
// the forward's f32 lse: measured <= 9e-6.
constexpr double kAttention = 1e-4;

constexpr float kGradientStart = 1e-2f;

class Rng {
 public:
  explicit Rng(uint32_t seed) : gen_(seed) {}
  Vec Normal(size_t count, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    Vec v(count);
    for (float& x : v) x = normal(gen_);
    return v;
  }
  std::vector<int32_t> Ints(size_t count, int32_t lo, int32_t hi) {
    std::uniform_int_distribution<int32_t> uniform(lo, hi);
    std::vector<int32_t> v(count);
    for (int32_t& x : v) x = uniform(gen_);
    return v;
  }

 private:
  std::mt19937 gen_;
};

double Rms(const Vec& v) {
  double sum_sq = 0;
  for (float x : v) sum_sq += static_cast<double>(x) * x;
  return v.empty() ? 0 : std::sqrt(sum_sq / static_cast<double>(v.size()));
}

// Where `actual` leaves the tolerance band around `expected`: the worst element, or nullopt.
std::optional<std::string> Mismatch(const Vec& expected, const Vec& actual, double tolerance) {
  if (expected.size() != actual.size()) return "size " + std::to_string(actual.size());
  const double rms = Rms(expected);
  double worst = 0;
  size_t worst_index = 0;
  bool failed = false;
  for (size_t e = 0; e < expected.size(); ++e) {
    const double diff = std::fabs(static_cast<double>(actual[e]) - expected[e]);
    const double band = tolerance * (std::fabs(expected[e]) + rms);
    // `!(diff <= band)` also fails NaN; exact comparisons compare bits (0 == -0 is not exact).
    const bool bad = tolerance == 0 ? std::memcmp(&actual[e], &expected[e], sizeof(float)) != 0
                                    : !(diff <= band);
    const double relative = diff / (std::fabs(expected[e]) + rms + 1e-30);
    if (bad && (!failed || relative > worst || std::isnan(relative))) {
      worst = relative;
      worst_index = e;
      failed = true;
    }
  }
  if (!failed) return std::nullopt;
  std::ostringstream message;
  message.precision(9);
  message << "element " << worst_index << ": expected " << expected[worst_index] << ", got "
          << actual[worst_index] << " (relative error " << worst << ", tolerance " << tolerance
          << ", array rms " << rms << ")";
  return message.str();
}

// The largest relative error of `actual` against `expected`, as Mismatch measures it.
double MaxRelativeError(const Vec& expected, const Vec& actual) {
  const double rms = Rms(expected);
  double worst = 0;
  for (size_t e = 0; e < expected.size(); ++e) {
    worst = std::max(worst, std::fabs(static_cast<double>(actual[e]) - expected[e]) /
                                (std::fabs(expected[e]) + rms + 1e-30));
  }
  return worst;
}

struct Case {
  std::string name;
  double tolerance;
  std::function<Outputs(Backend&)> run;
};

// The tolerances above are for f32 activations, which the reference and cpu backends store
// (Backend::activation_dtype). A backend that stores a narrower type is held to that type's
// rounding: the tolerance grows by the ratio of ActivationTolerance, and an exact op is allowed
// one rounding of it.
double ToleranceFor(const Case& c, const Backend& backend) {
  const double storage = ActivationTolerance(backend.activation_dtype());
  const double ratio = storage / ActivationTolerance(tensor::DType::kF32);
  return ratio == 1 ? c.tolerance : std::max(c.tolerance * ratio, storage);
}

class ConsistencyTest : public ::testing::Test {
 protected:
  // Q8_0 products with f32 activations, which the reference computes (the int8 default quantizes
  // the activations: kernels_q8_0_int8_test measures it against this path).
  ConsistencyTest() {
    for (int threads : {1, 2, 3}) {
      cpu_.push_back(
          cpu::NewCpuBackendWithOptions(threads, {.q8_0_activations = cpu::Q8_0Activations::kF32}));
    }
  }

  // Runs `c` on the reference and on every cpu backend and compares every output.
  void Check(const Case& c) {
    SCOPED_TRACE(c.name);
    const Outputs expected = c.run(*reference_);
    for (size_t b = 0; b < cpu_.size(); ++b) {
      const Outputs actual = c.run(*cpu_[b]);
      const double tolerance = ToleranceFor(c, *cpu_[b]);
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t o = 0; o < expected.size(); ++o) {
        ASSERT_EQ(actual[o].first, expected[o].first);
        const auto mismatch = Mismatch(expected[o].second, actual[o].second, tolerance);
        EXPECT_FALSE(mismatch.has_value())
            << c.name << " on cpu backend " << b << " ("
            << tensor::DTypeName(cpu_[b]->activation_dtype()) << " activations), output "
            << expected[o].first << ": " << *mismatch;
        if (getenv("SOVAI_PRINT_ERRORS") != nullptr) {  // to re-measure the tolerances
          printf("%-60s %-8s backend=%zu rms %.3g max relative error %.3g\n", c.name.c_str(),
                 expected[o].first.c_str(), b, Rms(expected[o].second),
                 MaxRelativeError(expected[o].second, actual[o].second));
        }
      }
    }
  }

  std::unique_ptr<Backend> reference_ = NewReferenceBackend();
  std::vector<std::unique_ptr<Backend>> cpu_;
};

// --- weights in every storage format ------------------------------------------------------------

// A weight w[rows, cols] in `format`, stored as the model stores it; the ops read WeightOf(it).
tensor::Tensor MakeWeight(WeightRef::Format format, const Vec& values, int64_t rows, int64_t cols) {
  auto weight = QuantizeTensor(values, {rows, cols}, StorageTypeOf(format));
  EXPECT_TRUE(weight.ok()) << weight.status();
  return std::move(weight).value();
}

const char* FormatName(WeightRef::Format format) {
  switch (format) {
    case WeightRef::Format::kF32:
      return "f32";
    case WeightRef::Format::kBF16:
      return "bf16";
    case WeightRef::Format::kNF4:
      return "nf4";
    case WeightRef::Format::kQ8_0:
      return "q8_0";
  }
  return "?";
}

constexpr WeightRef::Format kFormats[] = {WeightRef::Format::kF32, WeightRef::Format::kBF16,
                                          WeightRef::Format::kNF4};

// --- the cases ----------------------------------------------------------------------------------

TEST_F(ConsistencyTest, NamesAndSupportsEveryOp) {
  EXPECT_EQ(cpu_[0]->name(), "cpu");
  // Both store f32 activations, which the tolerances of this file are stated for.
  EXPECT_EQ(cpu_[0]->activation_dtype(), tensor::DType::kF32);
  EXPECT_EQ(reference_->activation_dtype(), tensor::DType::kF32);
  for (int op = 0; op < static_cast<int>(Op::kCount); ++op) {
    EXPECT_TRUE(cpu_[0]->Supports(static_cast<Op>(op))) << OpName(static_cast<Op>(op));
  }
  EXPECT_FALSE(cpu_[0]->Supports(Op::kCount));
}

// threads <= 0 means every core: such a backend works like any other.
TEST_F(ConsistencyTest, ZeroOrNegativeThreadsMeanAllCores) {
  cpu_.clear();
  cpu_.push_back(NewCpuBackend(0));
  cpu_.push_back(NewCpuBackend(-1));
  Check({"gemm 70x90x40 on all cores", kProducts, [](Backend& backend) {
           Rng rng(13);
           const Vec a = rng.Normal(70 * 40);
           const Vec b = rng.Normal(40 * 90);
           Vec c(70 * 90);
           backend.Gemm(false, false, 70, 90, 40, 1.0f, a.data(), b.data(), 0.0f, c.data());
           return Outputs{{"c", c}};
         }});
}

TEST_F(ConsistencyTest, Gemm) {
  struct Shape {
    int64_t m, n, k;
  };
  // 1 x 1 x 1; odd sizes; large enough to split over M, then over N; an empty sum (k = 0).
  for (const Shape s :
       {Shape{1, 1, 1}, Shape{7, 13, 5}, Shape{70, 33, 130}, Shape{5, 200, 300}, Shape{6, 4, 0}}) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      for (const float beta : {0.0f, 0.5f}) {
        const bool ta = transposes & 1;
        const bool tb = transposes & 2;
        Check({"gemm " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                   std::to_string(s.k) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                   " beta=" + std::to_string(beta),
               kProducts, [&](Backend& backend) {
                 Rng rng(1);
                 const Vec a = rng.Normal(static_cast<size_t>(s.m * s.k));
                 const Vec b = rng.Normal(static_cast<size_t>(s.k * s.n));
                 Vec c = rng.Normal(static_cast<size_t>(s.m * s.n));
                 // beta == 0 must not read c: garbage there must not reach the result.
                 if (beta == 0) std::fill(c.begin(), c.end(), std::nanf(""));
                 backend.Gemm(ta, tb, s.m, s.n, s.k, 1.5f, a.data(), b.data(), beta, c.data());
                 return Outputs{{"c", c}};
               }});
      }
    }
  }
}

TEST_F(ConsistencyTest, LinearInEveryWeightFormat) {
  struct Shape {
    int64_t n, out, in;
  };
  // One row; odd sizes whose rows start inside NF4 blocks (96 is not a multiple of 64), split in
  // several panels by 2 and 3 threads; more than 256 NF4 blocks (a second absmax scale). For Q8_0,
  // row counts in groups of 4 rows with a remainder.
  for (const Shape s : {Shape{1, 64, 64}, Shape{37, 70, 96}, Shape{9, 130, 192}, Shape{3, 200, 96},
                        Shape{8, 70, 128}}) {
    for (const WeightRef::Format format : {WeightRef::Format::kF32, WeightRef::Format::kBF16,
                                           WeightRef::Format::kNF4, WeightRef::Format::kQ8_0}) {
      for (const bool with_bias : {false, true}) {
        Check({std::string("linear ") + FormatName(format) + " n=" + std::to_string(s.n) +
                   " out=" + std::to_string(s.out) + " in=" + std::to_string(s.in) +
                   (with_bias ? " bias" : ""),
               kProducts, [&](Backend& backend) {
                 Rng rng(2);
                 const tensor::Tensor w =
                     MakeWeight(format, rng.Normal(static_cast<size_t>(s.out * s.in)), s.out, s.in);
                 const Vec x = rng.Normal(static_cast<size_t>(s.n * s.in));
                 const Vec bias = rng.Normal(static_cast<size_t>(s.out));
                 const Vec dout = rng.Normal(static_cast<size_t>(s.n * s.out));
                 Vec out(static_cast<size_t>(s.n * s.out), std::nanf(""));
                 Vec dx = rng.Normal(static_cast<size_t>(s.n * s.in), kGradientStart);
                 Vec dbias = rng.Normal(static_cast<size_t>(s.out), kGradientStart);
                 backend.LinearForward(out.data(), x.data(), WeightOf(w),
                                       with_bias ? bias.data() : nullptr, s.n);
                 backend.LinearBackwardInput(dx.data(), dout.data(), WeightOf(w), s.n);
                 backend.LinearBackwardBias(dbias.data(), dout.data(), s.n, s.out);
                 return Outputs{{"out", out}, {"dx", dx}, {"dbias", dbias}};
               }});
      }
    }
  }
}

TEST_F(ConsistencyTest, Embedding) {
  for (const WeightRef::Format format : {WeightRef::Format::kF32, WeightRef::Format::kBF16}) {
    for (const int64_t c : {int64_t{1}, int64_t{100}}) {
      Check({std::string("embedding ") + FormatName(format) + " c=" + std::to_string(c), kExact,
             [&](Backend& backend) {
               Rng rng(3);
               const int64_t vocab = 11;
               const int64_t n = 50;  // ids repeat: the scatter must sum them
               const tensor::Tensor table =
                   MakeWeight(format, rng.Normal(static_cast<size_t>(vocab * c)), vocab, c);
               const std::vector<int32_t> ids = rng.Ints(static_cast<size_t>(n), 0, vocab - 1);
               // dout of small integers: sums of them are exact in any order.
               Vec dout(static_cast<size_t>(n * c));
               for (size_t e = 0; e < dout.size(); ++e) dout[e] = static_cast<float>(e % 7) - 3;
               Vec out(static_cast<size_t>(n * c));
               Vec dtable(static_cast<size_t>(vocab * c), 0.5f);
               backend.EmbeddingForward(out.data(), ids.data(), WeightOf(table), n);
               backend.EmbeddingBackward(dtable.data(), dout.data(), ids.data(), n, vocab, c);
               return Outputs{{"out", out}, {"dtable", dtable}};
             }});
    }
  }
}

// The serving engine's promise (kernels/cpu/inference.h, q8_0_int8.h): a row's Q8_0 product is
// bit-identical whatever the other rows of the batch and wherever the row sits in it, with f32
// and with int8 activations.
TEST_F(ConsistencyTest, Q8_0ProductIsBatchInvariant) {
  Rng rng(21);
  const int64_t in = 96, out = 70, n = 13;
  const tensor::Tensor w =
      MakeWeight(WeightRef::Format::kQ8_0, rng.Normal(static_cast<size_t>(out * in)), out, in);
  const Vec x = rng.Normal(static_cast<size_t>(n * in));
  for (int threads : {1, 2, 3}) {
    cpu_.push_back(
        cpu::NewCpuBackendWithOptions(threads, {.q8_0_activations = cpu::Q8_0Activations::kInt8}));
  }
  for (auto& backend : cpu_) {
    Vec all(static_cast<size_t>(n * out));
    backend->LinearForward(all.data(), x.data(), WeightOf(w), nullptr, n);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t batch : {int64_t{1}, int64_t{3}}) {
        // Row r alone, or as the last row of a batch of `batch` rows (other rows first).
        Vec rows(static_cast<size_t>(batch * in));
        for (int64_t k = 0; k + 1 < batch; ++k) {
          std::copy_n(x.data() + ((r + k + 1) % n) * in, in, rows.data() + k * in);
        }
        std::copy_n(x.data() + r * in, in, rows.data() + (batch - 1) * in);
        Vec got(static_cast<size_t>(batch * out));
        backend->LinearForward(got.data(), rows.data(), WeightOf(w), nullptr, batch);
        EXPECT_EQ(0, std::memcmp(got.data() + (batch - 1) * out, all.data() + r * out,
                                 static_cast<size_t>(out) * sizeof(float)))
            << "row " << r << " in a batch of " << batch;
      }
    }
  }
}

TEST_F(ConsistencyTest, EmbeddingQ8_0) {
  Check({"embedding q8_0", kExact, [&](Backend& backend) {
           Rng rng(3);
           const int64_t vocab = 11, c = 96, n = 20;
           const tensor::Tensor table = MakeWeight(
               WeightRef::Format::kQ8_0, rng.Normal(static_cast<size_t>(vocab * c)), vocab, c);
           const std::vector<int32_t> ids = rng.Ints(static_cast<size_t>(n), 0, vocab - 1);
           Vec out(static_cast<size_t>(n * c));
           backend.EmbeddingForward(out.data(), ids.data(), WeightOf(table), n);
           return Outputs{{"out", out}};
         }});
}

// Decode and chunked prefill over a paged cache: three sequences with scattered, shared-free
// block tables, GQA, and one case with a sliding window; head sizes of the generic loop (16) and
// of the AVX2 kernels (64, 128; sequence 1 sees 18 positions: two groups of 8 and a tail).
TEST_F(ConsistencyTest, PagedAttention) {
  struct Variant {
    int64_t window, head_dim;
  };
  for (const Variant c :
       {Variant{0, 16}, Variant{5, 16}, Variant{0, 64}, Variant{5, 64}, Variant{0, 128}}) {
    const int64_t window = c.window;
    const int64_t head_dim = c.head_dim;
    Check({"paged_attention window=" + std::to_string(window) +
               " head_dim=" + std::to_string(head_dim),
           kProducts, [&](Backend& backend) {
             Rng rng(12);
             Backend::PagedAttentionShape s{.q_heads = 4,
                                            .kv_heads = 2,
                                            .head_dim = head_dim,
                                            .block_size = 4,
                                            .max_blocks = 5,
                                            .window = window,
                                            .scale = 0.25f};
             const int64_t blocks = 16;
             const int64_t row = s.kv_heads * s.head_dim;
             Vec k_cache = rng.Normal(static_cast<size_t>(blocks * s.block_size * row));
             Vec v_cache = rng.Normal(static_cast<size_t>(blocks * s.block_size * row));
             const std::vector<int32_t> tables = {3, 9,  1,  -1, -1,   // sequence 0: 3 blocks
                                                  0, 15, 7,  12, 4,    // sequence 1: 5 blocks
                                                  8, -1, -1, -1, -1};  // sequence 2: 1 block
             // Sequence 0 decodes position 10, sequence 1 prefills positions 12..17, sequence 2
             // prefills from 0.
             std::vector<int32_t> seq_of = {0, 1, 1, 1, 1, 1, 1, 2, 2, 2};
             std::vector<int32_t> positions = {10, 12, 13, 14, 15, 16, 17, 0, 1, 2};
             const int64_t n = static_cast<int64_t>(seq_of.size());
             const Vec k = rng.Normal(static_cast<size_t>(n * row));
             const Vec v = rng.Normal(static_cast<size_t>(n * row));
             std::vector<int32_t> slots;
             for (int64_t t = 0; t < n; ++t) {
               const int32_t block = tables[seq_of[t] * s.max_blocks + positions[t] / s.block_size];
               slots.push_back(block * static_cast<int32_t>(s.block_size) +
                               positions[t] % static_cast<int32_t>(s.block_size));
             }
             backend.KvCacheWrite(k_cache.data(), v_cache.data(), k.data(), v.data(), slots.data(),
                                  n, s.kv_heads, s.head_dim);
             const Vec q = rng.Normal(static_cast<size_t>(n * s.q_heads * s.head_dim));
             Vec out(static_cast<size_t>(n * s.q_heads * s.head_dim), std::nanf(""));
             backend.PagedAttention(out.data(), q.data(), k_cache.data(), v_cache.data(),
                                    seq_of.data(), positions.data(), tables.data(), n, s);
             return Outputs{{"out", out}, {"k_cache", k_cache}, {"v_cache", v_cache}};
           }});
  }
}

// The serving engine's other promise: a token's attention output is bit-identical whether it is
// computed alone or with others (the grouped kernel shares key and value reads among the rows of a
// task, never their arithmetic). A Qwen-like group of 7 query heads per kv head, a 44-token
// prefill chunk after a cached prefix, a decoding token and a prefill from 0; with and without a
// window; on 1-3 threads and on 16 (which splits the groups' heads across tasks).
TEST_F(ConsistencyTest, PagedAttentionIsBatchInvariant) {
  cpu_.push_back(NewCpuBackend(16));
  for (const int64_t head_dim : {64, 128}) {
    for (const int64_t window : {0, 37}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " window " + std::to_string(window));
      Rng rng(31);
      Backend::PagedAttentionShape s{.q_heads = 14,
                                     .kv_heads = 2,
                                     .head_dim = head_dim,
                                     .block_size = 16,
                                     .max_blocks = 10,
                                     .window = window,
                                     .scale = 0.125f};
      const int64_t blocks = 24, row = s.kv_heads * s.head_dim;
      Vec k_cache = rng.Normal(static_cast<size_t>(blocks * s.block_size * row));
      Vec v_cache = rng.Normal(static_cast<size_t>(blocks * s.block_size * row));
      // Scattered block tables: sequence 0 reads blocks 23, 21, ..., 5, sequence 1 blocks 0, 2,
      // ..., 8, sequence 2 blocks 13 and 15 (also sequence 0's: nothing writes the cache here).
      std::vector<int32_t> tables(static_cast<size_t>(3 * s.max_blocks), -1);
      for (int b = 0; b < 10; ++b) tables[static_cast<size_t>(b)] = 23 - 2 * b;
      for (int b = 0; b < 5; ++b) tables[static_cast<size_t>(s.max_blocks + b)] = 2 * b;
      tables[static_cast<size_t>(2 * s.max_blocks)] = 13;
      tables[static_cast<size_t>(2 * s.max_blocks + 1)] = 15;
      std::vector<int32_t> seq_of, positions;
      for (int32_t p = 100; p < 144; ++p) seq_of.push_back(0), positions.push_back(p);
      seq_of.push_back(1), positions.push_back(70);
      for (int32_t p = 0; p < 20; ++p) seq_of.push_back(2), positions.push_back(p);
      const int64_t n = static_cast<int64_t>(seq_of.size());
      const Vec q = rng.Normal(static_cast<size_t>(n * s.q_heads * s.head_dim));
      const size_t token_floats = static_cast<size_t>(s.q_heads * s.head_dim);
      Vec expected(static_cast<size_t>(n) * token_floats);
      reference_->PagedAttention(expected.data(), q.data(), k_cache.data(), v_cache.data(),
                                 seq_of.data(), positions.data(), tables.data(), n, s);
      for (auto& backend : cpu_) {
        Vec all(expected.size(), std::nanf(""));
        backend->PagedAttention(all.data(), q.data(), k_cache.data(), v_cache.data(), seq_of.data(),
                                positions.data(), tables.data(), n, s);
        const auto mismatch = Mismatch(expected, all, kProducts);
        EXPECT_FALSE(mismatch.has_value()) << *mismatch;
        for (int64_t t = 0; t < n; ++t) {
          Vec alone(token_floats, std::nanf(""));
          backend->PagedAttention(alone.data(), q.data() + t * token_floats, k_cache.data(),
                                  v_cache.data(), &seq_of[static_cast<size_t>(t)],
                                  &positions[static_cast<size_t>(t)], tables.data(), 1, s);
          EXPECT_EQ(0, std::memcmp(alone.data(), all.data() + t * token_floats,
                                   token_floats * sizeof(float)))
              << "token " << t << " (sequence " << seq_of[static_cast<size_t>(t)] << ", position "
              << positions[static_cast<size_t>(t)] << ")";
        }
      }
    }
  }
}

TEST_F(ConsistencyTest, RmsNorm) {
  for (const auto& [n, c] : {std::pair<int64_t, int64_t>{1, 7}, {33, 300}, {70, 130}}) {
    for (const bool with_dweight : {false, true}) {
      Check({"rmsnorm n=" + std::to_string(n) + " c=" + std::to_string(c) +
                 (with_dweight ? " dweight" : ""),
             kElementwise, [&](Backend& backend) {
               Rng rng(4);
               const Vec x = rng.Normal(static_cast<size_t>(n * c), 3.0f);
               const Vec weight = rng.Normal(static_cast<size_t>(c));
               const Vec dout = rng.Normal(static_cast<size_t>(n * c));
               Vec out(static_cast<size_t>(n * c));
               Vec rstd(static_cast<size_t>(n));
               Vec dx = rng.Normal(static_cast<size_t>(n * c), kGradientStart);
               Vec dweight = rng.Normal(static_cast<size_t>(c), kGradientStart);
               backend.RmsNormForward(out.data(), rstd.data(), x.data(), weight.data(), n, c,
                                      1e-5f);
               backend.RmsNormBackward(dx.data(), with_dweight ? dweight.data() : nullptr,
                                       dout.data(), x.data(), weight.data(), rstd.data(), n, c);
               return Outputs{{"out", out}, {"rstd", rstd}, {"dx", dx}, {"dweight", dweight}};
             }});
    }
  }
}

TEST_F(ConsistencyTest, Rope) {
  for (const int64_t head_dim : {int64_t{2}, int64_t{64}, int64_t{6}}) {
    for (const bool in_place : {false, true}) {
      Check({"rope d=" + std::to_string(head_dim) + (in_place ? " in place" : ""), kExact,
             [&](Backend& backend) {
               Rng rng(5);
               const int64_t n = 40;
               const int64_t heads = 3;
               const size_t size = static_cast<size_t>(n * heads * head_dim);
               // Long positions too: the angle is rounded in f32 before cos and sin.
               const std::vector<int32_t> positions = rng.Ints(static_cast<size_t>(n), 0, 200000);
               Vec inv_freq(static_cast<size_t>(head_dim / 2));
               for (size_t i = 0; i < inv_freq.size(); ++i) {
                 inv_freq[i] = std::pow(
                     10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(head_dim));
               }
               Vec x = rng.Normal(size);
               const Vec dout = rng.Normal(size);
               Vec out(size);
               Vec dx = rng.Normal(size, kGradientStart);
               float* target = in_place ? x.data() : out.data();
               backend.RopeForward(target, x.data(), positions.data(), inv_freq.data(), n, heads,
                                   head_dim);
               backend.RopeBackward(dx.data(), dout.data(), positions.data(), inv_freq.data(), n,
                                    heads, head_dim);
               return Outputs{{"out", in_place ? x : out}, {"dx", dx}};
             }});
    }
  }
}

struct AttentionCase {
  int64_t batch, seq_len, q_heads, kv_heads, head_dim, window;
  enum class Segments : uint8_t { kNone, kPacked, kInterleaved } segments;
};

// Segment ids of B sequences of T positions: packed samples of random lengths (contiguous runs),
// or ids that alternate in stretches (a layout packing never makes, but the mask allows).
std::vector<int32_t> SegmentIds(const AttentionCase& c, Rng& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(c.batch * c.seq_len));
  for (int64_t b = 0; b < c.batch; ++b) {
    int32_t id = 0;
    int64_t left = 0;
    for (int64_t t = 0; t < c.seq_len; ++t) {
      if (left == 0) {
        left = rng.Ints(1, 1, 90)[0];
        ++id;
      }
      --left;
      ids[static_cast<size_t>(b * c.seq_len + t)] =
          c.segments == AttentionCase::Segments::kPacked ? id : id % 3;
    }
  }
  return ids;
}

Case MakeAttentionCase(const AttentionCase& c) {
  std::ostringstream name;
  name << "attention B=" << c.batch << " T=" << c.seq_len << " Hq=" << c.q_heads
       << " Hkv=" << c.kv_heads << " D=" << c.head_dim << " window=" << c.window
       << " segments=" << static_cast<int>(c.segments);
  return {name.str(), kAttention, [c](Backend& backend) {
            Rng rng(6);
            const Backend::AttentionShape shape{
                .batch = c.batch,
                .seq_len = c.seq_len,
                .q_heads = c.q_heads,
                .kv_heads = c.kv_heads,
                .head_dim = c.head_dim,
                .window = c.window,
                .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
            const int64_t n = c.batch * c.seq_len;
            const size_t q_size = static_cast<size_t>(n * c.q_heads * c.head_dim);
            const size_t kv_size = static_cast<size_t>(n * c.kv_heads * c.head_dim);
            // Scores with a standard deviation of about 3: some rows nearly one-hot.
            const Vec q = rng.Normal(q_size, 3.0f);
            const Vec k = rng.Normal(kv_size);
            const Vec v = rng.Normal(kv_size);
            const Vec dout = rng.Normal(q_size);
            const std::vector<int32_t> segment = c.segments == AttentionCase::Segments::kNone
                                                     ? std::vector<int32_t>{}
                                                     : SegmentIds(c, rng);
            Vec out(q_size, std::nanf(""));
            Vec lse(static_cast<size_t>(c.batch * c.q_heads * c.seq_len), std::nanf(""));
            Vec dq = rng.Normal(q_size, kGradientStart);
            Vec dk = rng.Normal(kv_size, kGradientStart);
            Vec dv = rng.Normal(kv_size, kGradientStart);
            const int32_t* seg = segment.empty() ? nullptr : segment.data();
            backend.AttentionForward(out.data(), lse.data(), q.data(), k.data(), v.data(), seg,
                                     shape);
            backend.AttentionBackward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(),
                                      lse.data(), q.data(), k.data(), v.data(), seg, shape);
            return Outputs{{"out", out}, {"lse", lse}, {"dq", dq}, {"dk", dk}, {"dv", dv}};
          }};
}

using Segments = AttentionCase::Segments;

TEST_F(ConsistencyTest, Attention) {
  // The attention tiles are compiled once per instruction set (cpu/attention.cc): run the lower
  // variants too, each on 2 threads, where this CPU can.
  for (const cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kBaseline}) {
    if (isa < cpu::CpuIsa()) cpu_.push_back(cpu::NewCpuBackendWithIsa(2, isa));
  }
  const AttentionCase cases[] = {
      {1, 1, 1, 1, 8, 0, Segments::kNone},  // one position
      // GQA ratio 1 over two tiles; D = 16 (one vector).
      {2, 100, 4, 4, 16, 0, Segments::kNone},
      // GQA 2, three tiles, D = 64: 1 thread does one pass, 2 and 3 threads two passes.
      {1, 130, 4, 2, 64, 0, Segments::kNone},
      // GQA 4, D = 24 (a vector and a scalar tail); 4 kv pairs: one pass with 2 threads.
      {2, 70, 8, 2, 24, 0, Segments::kNone},
      // Sliding window shorter than a tile (whole tiles skipped), D = 80.
      {1, 150, 2, 1, 80, 40, Segments::kNone},
      // Packed samples, and ids that alternate (tiles skipped by segment range or masked).
      {2, 140, 4, 2, 32, 0, Segments::kPacked},
      {1, 140, 2, 1, 32, 0, Segments::kInterleaved},
      // Everything at once, D = 128 (two register blocks).
      {1, 200, 2, 2, 128, 70, Segments::kPacked},
      // A window wider than the sequence changes nothing but must not break the skipping.
      {1, 90, 2, 1, 16, 1000, Segments::kNone},
  };
  for (const AttentionCase& c : cases) Check(MakeAttentionCase(c));
}

TEST_F(ConsistencyTest, SwiGluAndAdd) {
  for (const int64_t count : {int64_t{1}, int64_t{1000}, int64_t{70001}}) {
    Check({"swiglu+add count=" + std::to_string(count), kElementwise, [&](Backend& backend) {
             Rng rng(7);
             Vec gate = rng.Normal(static_cast<size_t>(count), 4.0f);
             // exp(-gate) overflows f32 for these: silu must still be 0 and the gate itself.
             if (count > 2) {
               gate[0] = -120.0f;
               gate[1] = 120.0f;
             }
             const Vec up = rng.Normal(static_cast<size_t>(count));
             const Vec dout = rng.Normal(static_cast<size_t>(count));
             Vec out(static_cast<size_t>(count));
             Vec dgate = rng.Normal(static_cast<size_t>(count), kGradientStart);
             Vec dup = rng.Normal(static_cast<size_t>(count), kGradientStart);
             Vec sum(static_cast<size_t>(count));
             backend.SwiGluForward(out.data(), gate.data(), up.data(), count);
             backend.SwiGluBackward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(),
                                    count);
             backend.Add(sum.data(), out.data(), up.data(), count);
             backend.Add(dup.data(), dup.data(), up.data(), count);  // out == a
             return Outputs{{"out", out}, {"dgate", dgate}, {"dup", dup}, {"sum", sum}};
           }});
  }
}

TEST_F(ConsistencyTest, CrossEntropy) {
  struct Shape {
    int64_t n, c, vocab, chunk_rows;
  };
  // Chunks that do not divide n; one row; chunks larger than n.
  for (const Shape s : {Shape{37, 48, 300, 8}, Shape{1, 64, 100, 4}, Shape{20, 32, 130, 64}}) {
    for (const WeightRef::Format format : kFormats) {
      for (const bool backward : {false, true}) {
        Check({std::string("cross_entropy ") + FormatName(format) + " n=" + std::to_string(s.n) +
                   " c=" + std::to_string(s.c) + " V=" + std::to_string(s.vocab) +
                   " chunk=" + std::to_string(s.chunk_rows) + (backward ? " backward" : ""),
               kProducts, [&](Backend& backend) {
                 Rng rng(8);
                 const tensor::Tensor w = MakeWeight(
                     format, rng.Normal(static_cast<size_t>(s.vocab * s.c), 0.5f), s.vocab, s.c);
                 const Vec hidden = rng.Normal(static_cast<size_t>(s.n * s.c));
                 std::vector<int32_t> targets =
                     rng.Ints(static_cast<size_t>(s.n), 0, static_cast<int32_t>(s.vocab - 1));
                 int64_t counted = s.n;
                 for (size_t r = 3; r < targets.size(); r += 4) {  // ignore_index = -100
                   targets[r] = -100;
                   --counted;
                 }
                 Vec dhidden = rng.Normal(static_cast<size_t>(s.n * s.c), kGradientStart);
                 Vec dweight = rng.Normal(static_cast<size_t>(s.vocab * s.c), kGradientStart);
                 // Only an f32 head is trainable.
                 const bool with_dweight = backward && format == WeightRef::Format::kF32;
                 const double loss = backend.CrossEntropy(
                     backward ? dhidden.data() : nullptr, with_dweight ? dweight.data() : nullptr,
                     hidden.data(), WeightOf(w), targets.data(), s.n,
                     1.0f / static_cast<float>(counted), s.chunk_rows);
                 return Outputs{{"loss", {static_cast<float>(loss)}},
                                {"dhidden", dhidden},
                                {"dweight", dweight}};
               }});
      }
    }
  }
}

TEST_F(ConsistencyTest, Lora) {
  for (const float p : {0.0f, 0.3f}) {
    for (const bool with_dx : {false, true}) {
      Check({"lora p=" + std::to_string(p) + (with_dx ? " dx" : ""), kProducts,
             [&](Backend& backend) {
               Rng rng(9);
               const int64_t n = 37, in = 96, out = 70, rank = 8;
               const Vec x = rng.Normal(static_cast<size_t>(n * in));
               const Vec a = rng.Normal(static_cast<size_t>(rank * in), 0.1f);
               const Vec b = rng.Normal(static_cast<size_t>(out * rank), 0.1f);
               const Vec dy = rng.Normal(static_cast<size_t>(n * out));
               const Dropout dropout{.probability = p, .seed = 0x5eed};
               Vec y = rng.Normal(static_cast<size_t>(n * out));
               Vec xa(static_cast<size_t>(n * rank));
               Vec dx = rng.Normal(static_cast<size_t>(n * in), kGradientStart);
               Vec da = rng.Normal(static_cast<size_t>(rank * in), kGradientStart);
               Vec db = rng.Normal(static_cast<size_t>(out * rank), kGradientStart);
               backend.LoraForward(y.data(), xa.data(), x.data(), a.data(), b.data(), n, in, out,
                                   rank, 2.0f, dropout);
               backend.LoraBackward(with_dx ? dx.data() : nullptr, da.data(), db.data(), dy.data(),
                                    x.data(), xa.data(), a.data(), b.data(), n, in, out, rank, 2.0f,
                                    dropout);
               return Outputs{{"y", y}, {"xa", xa}, {"dx", dx}, {"da", da}, {"db", db}};
             }});
    }
  }
}

TEST_F(ConsistencyTest, Nf4Dequantize) {
  for (const int64_t numel : {int64_t{64}, int64_t{64 * 300}, int64_t{64 * 1031}}) {
    Check({"nf4 numel=" + std::to_string(numel), kExact, [&](Backend& backend) {
             Rng rng(10);
             const tensor::Tensor w = MakeWeight(WeightRef::Format::kNF4,
                                                 rng.Normal(static_cast<size_t>(numel)), 1, numel);
             Vec out(static_cast<size_t>(numel));
             backend.Nf4Dequantize(out.data(), WeightOf(w).nf4, numel);
             return Outputs{{"out", out}};
           }});
  }
}

TEST_F(ConsistencyTest, OptimizerOps) {
  for (const int64_t count : {int64_t{1}, int64_t{100003}}) {
    for (const int64_t step : {int64_t{1}, int64_t{10}}) {
      Check({"adamw count=" + std::to_string(count) + " step=" + std::to_string(step), kExact,
             [&](Backend& backend) {
               Rng rng(11);
               Vec param = rng.Normal(static_cast<size_t>(count));
               const Vec grad = rng.Normal(static_cast<size_t>(count), 0.01f);
               Vec m = rng.Normal(static_cast<size_t>(count), 0.01f);
               Vec v = rng.Normal(static_cast<size_t>(count), 0.001f);
               for (float& x : v) x = x * x;
               backend.AdamWStep(param.data(), grad.data(), m.data(), v.data(), count,
                                 {.learning_rate = 1e-3f, .weight_decay = 0.01f, .step = step});
               Vec scaled = param;
               backend.Scale(scaled.data(), 0.7f, count);
               return Outputs{{"param", param}, {"m", m}, {"v", v}, {"scaled", scaled}};
             }});
    }
    // A sum of positive terms in double: different orders agree to ~1e-16 relative.
    Check({"sum_of_squares count=" + std::to_string(count), 1e-13, [&](Backend& backend) {
             Rng rng(12);
             const Vec grad = rng.Normal(static_cast<size_t>(count));
             // Returned as the f32 parts of the double, so that the comparison sees ~48 bits.
             const double sum = backend.SumOfSquares(grad.data(), count);
             const float high = static_cast<float>(sum);
             return Outputs{{"sum", {high, static_cast<float>(sum - high)}}};
           }});
  }
}

// The same inputs give the same bits on a second run (fixed partitions, no atomics).
TEST_F(ConsistencyTest, RepeatableBitForBit) {
  const Case c = MakeAttentionCase({2, 140, 4, 2, 32, 0, Segments::kPacked});
  for (auto& backend : cpu_) {
    const Outputs first = c.run(*backend);
    const Outputs second = c.run(*backend);
    for (size_t o = 0; o < first.size(); ++o) {
      EXPECT_FALSE(Mismatch(first[o].second, second[o].second, kExact).has_value())
          << first[o].first;
    }
  }
}

// The tolerances are tight enough to see a wrong gradient element: an error of 10x the tolerance
// in one element of dk (say a dropped contribution) fails the comparison.
TEST_F(ConsistencyTest, ToleranceCatchesOneWrongElement) {
  const Case c = MakeAttentionCase({1, 130, 4, 2, 64, 0, Segments::kNone});
  const Outputs expected = c.run(*reference_);
  Outputs actual = c.run(*cpu_[1]);
  ASSERT_EQ(actual[3].first, "dk");
  const Vec& reference_dk = expected[3].second;
  Vec& dk = actual[3].second;
  EXPECT_FALSE(Mismatch(reference_dk, dk, kAttention).has_value());
  dk[500] +=
      static_cast<float>(10 * kAttention * (std::fabs(reference_dk[500]) + Rms(reference_dk)));
  const auto mismatch = Mismatch(reference_dk, dk, kAttention);
  ASSERT_TRUE(mismatch.has_value());
  EXPECT_NE(mismatch->find("element 500:"), std::string::npos) << *mismatch;
}

}  // namespace
}  // namespace sovai::kernels
