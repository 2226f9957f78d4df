// The int8 Q8_0 product (q8_0_int8.h): the quantizer against QuantizeRowQ8_0, every kernel this
// CPU runs (plain, AVX2, AVX-512 VNNI) bit for bit against a plain reference written here from
// the header's formula, batch and thread invariance, and the accuracy against f32 activations.
#include "kernels/cpu/q8_0_int8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/q8_0.h"
#include "tensor/dtype.h"

namespace sovai::kernels::cpu {
namespace {

using Vec = std::vector<float>;
using Bytes = std::vector<uint8_t>;

constexpr int64_t kBlock = 32;

// The kernels this CPU can run (the plain one always).
std::vector<Int8Kernel> KernelsHere() {
  std::vector<Int8Kernel> kernels = {Int8Kernel::kPlain};
  if (Int8KernelFor(Isa::kAvx2) == Int8Kernel::kAvx2) {
    kernels.push_back(Int8Kernel::kAvx2);
    kernels.push_back(Int8Kernel::kAvx2Rows);
    kernels.push_back(Int8Kernel::kAvx2Quads);
  }
  if (Int8KernelFor(Isa::kAvx512) == Int8Kernel::kAvx512Vnni) {
    kernels.push_back(Int8Kernel::kAvx512Vnni);
  }
  return kernels;
}

const char* KernelName(Int8Kernel kernel) {
  switch (kernel) {
    case Int8Kernel::kPlain:
      return "plain";
    case Int8Kernel::kAvx2:
      return "avx2";
    case Int8Kernel::kAvx512Vnni:
      return "avx512vnni";
    case Int8Kernel::kAvx2Rows:
      return "avx2-rows";
    case Int8Kernel::kAvx2Quads:
      return "avx2-quads";
  }
  return "?";
}

Vec Normal(std::mt19937& gen, size_t count, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  Vec v(count);
  for (float& x : v) x = normal(gen);
  return v;
}

// A Q8_0 weight [rows, cols] from f32 values.
Bytes QuantizeWeight(const Vec& values, int64_t rows, int64_t cols) {
  Bytes bytes(Q8_0Bytes(static_cast<size_t>(rows * cols)));
  QuantizeRowQ8_0(values, bytes);
  return bytes;
}

WeightRef Ref(const Bytes& bytes, int64_t rows, int64_t cols) {
  return WeightRef{
      .format = WeightRef::Format::kQ8_0, .data = bytes.data(), .rows = rows, .cols = cols};
}

// The header's formula, one pair at a time, on QuantizeRowQ8's output.
Vec ReferenceProduct(const Vec& x, const Bytes& w, int64_t n, int64_t out, int64_t in) {
  const int64_t blocks = in / kBlock;
  Vec result(static_cast<size_t>(n * out));
  std::vector<int8_t> q(static_cast<size_t>(in));
  Vec d(static_cast<size_t>(blocks));
  for (int64_t r = 0; r < n; ++r) {
    QuantizeRowQ8(x.data() + r * in, in, q.data(), d.data());
    for (int64_t o = 0; o < out; ++o) {
      float sum = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* block = w.data() + (o * blocks + b) * 34;
        uint16_t half;
        std::memcpy(&half, block, sizeof half);
        int32_t isum = 0;
        for (int64_t k = 0; k < kBlock; ++k) {
          isum += static_cast<int32_t>(static_cast<int8_t>(block[2 + k])) * q[b * kBlock + k];
        }
        const float scale = d[b] * tensor::F16ToFloat(half);
        const float product = static_cast<float>(isum) * scale;
        sum = sum + product;
      }
      result[r * out + o] = sum;
    }
  }
  return result;
}

Vec RunKernel(Int8Kernel kernel, int threads, const Vec& x, const Bytes& w, int64_t n, int64_t out,
              int64_t in, const Vec* start = nullptr) {
  Context context(threads);
  Vec result = start != nullptr ? *start : Vec(static_cast<size_t>(n * out), std::nanf(""));
  Q8_0ProductInt8With(kernel, context, result.data(), x.data(), Ref(w, out, in), n,
                      start != nullptr ? 1.0f : 0.0f);
  return result;
}

// Bit-for-bit equality, with the first differing element in the message.
::testing::AssertionResult SameBits(const Vec& expected, const Vec& actual) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure() << "sizes " << expected.size() << " and " << actual.size();
  }
  for (size_t e = 0; e < expected.size(); ++e) {
    if (std::memcmp(&expected[e], &actual[e], sizeof(float)) != 0) {
      return ::testing::AssertionFailure()
             << "element " << e << ": expected " << expected[e] << ", got " << actual[e];
    }
  }
  return ::testing::AssertionSuccess();
}

// --- the quantizer ------------------------------------------------------------------------------

// Blocks that stress rounding and scaling: zeros, exact halves, a lone large value, the extremes
// of f32, subnormals (whose scale underflows to 0), mixed signs.
Vec EdgeCaseActivations(std::mt19937& gen, int64_t cols) {
  Vec x = Normal(gen, static_cast<size_t>(cols));
  const int64_t blocks = cols / kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    float* v = x.data() + b * kBlock;
    switch ((b + 1) % 11) {  // one block in 11 of each kind; the rest Gaussian
      case 0:                // all zero (and a negative zero)
        for (int64_t k = 0; k < kBlock; ++k) v[k] = 0.0f;
        v[3] = -0.0f;
        break;
      case 1:  // amax 127: every integer and half-integer lands exactly on a tie
        for (int64_t k = 0; k < kBlock; ++k) v[k] = static_cast<float>(k * 4) - 63.5f;
        v[0] = 127.0f;
        v[1] = -127.0f;
        break;
      case 2:  // one huge value, the rest round to 0 or +-1
        for (int64_t k = 0; k < kBlock; ++k) v[k] *= 1e-3f;
        v[17] = -3e30f;
        v[18] = 3e30f / 254.0f;
        break;
      case 3:  // tiny normal values
        for (int64_t k = 0; k < kBlock; ++k) v[k] *= 1e-36f;
        break;
      case 4:  // subnormal values: the scale underflows
        for (int64_t k = 0; k < kBlock; ++k) v[k] *= 1e-44f;
        break;
      case 5:  // all the same sign and magnitude
        for (int64_t k = 0; k < kBlock; ++k) v[k] = -2.5f;
        break;
      default:
        break;
    }
  }
  return x;
}

TEST(QuantizeRowQ8Test, SameQuantsAsQ8_0AndTheUnroundedScale) {
  std::mt19937 gen(1);
  for (const int64_t cols : {int64_t{32}, int64_t{64}, int64_t{4864}}) {
    const Vec x = EdgeCaseActivations(gen, cols);
    const int64_t blocks = cols / kBlock;
    Bytes ggml(Q8_0Bytes(static_cast<size_t>(cols)));
    QuantizeRowQ8_0(x, ggml);
    std::vector<int8_t> q(static_cast<size_t>(cols));
    Vec d(static_cast<size_t>(blocks));
    QuantizeRowQ8(x.data(), cols, q.data(), d.data());
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = ggml.data() + b * 34;
      uint16_t half;
      std::memcpy(&half, block, sizeof half);
      EXPECT_EQ(tensor::FloatToF16(d[b]), half) << "cols " << cols << " block " << b;
      for (int64_t k = 0; k < kBlock; ++k) {
        ASSERT_EQ(q[b * kBlock + k], static_cast<int8_t>(block[2 + k]))
            << "cols " << cols << " block " << b << " value " << x[b * kBlock + k];
      }
    }
  }
}

// The SIMD quantizer (what QuantizeRowQ8 runs on an AVX2 CPU) gives the portable one's bytes on
// every kind of block, NaN and infinity included.
TEST(QuantizeRowQ8Test, DispatchedAndPortableGiveTheSameBytes) {
  std::mt19937 gen(4);
  const int64_t cols = 4864;
  Vec x = EdgeCaseActivations(gen, cols);
  x[40] = std::nanf("");
  x[100] = std::numeric_limits<float>::infinity();
  x[200] = -std::numeric_limits<float>::infinity();
  x[201] = std::nanf("");
  const int64_t blocks = cols / kBlock;
  std::vector<int8_t> q(cols), q_portable(cols);
  Vec d(blocks), d_portable(blocks);
  QuantizeRowQ8(x.data(), cols, q.data(), d.data());
  QuantizeRowQ8Portable(x.data(), cols, q_portable.data(), d_portable.data());
  EXPECT_EQ(q, q_portable);
  EXPECT_TRUE(SameBits(d, d_portable));
  EXPECT_TRUE(std::isnan(d[40 / kBlock]));
  EXPECT_TRUE(std::isnan(d[200 / kBlock]));
}

TEST(QuantizeRowQ8Test, RoundsHalfAwayFromZeroAndClamps) {
  Vec x(kBlock, 0.0f);
  x[0] = 127.0f;  // d = 1 exactly: q = round(x)
  x[1] = 0.5f;
  x[2] = -0.5f;
  x[3] = 1.5f;
  x[4] = 2.5f;
  x[5] = -2.5f;
  x[6] = 0.49999997f;  // below one half: 0 (floor(x + 0.5) would give 1)
  x[7] = 126.5f;
  x[8] = -127.0f;
  std::vector<int8_t> q(kBlock);
  float d = 0;
  QuantizeRowQ8(x.data(), kBlock, q.data(), &d);
  EXPECT_EQ(d, 1.0f);
  const int expected[] = {127, 1, -1, 2, 3, -3, 0, 127, -127};
  for (int k = 0; k < 9; ++k) EXPECT_EQ(q[k], expected[k]) << "value " << x[k];
}

TEST(QuantizeRowQ8Test, NanMakesTheBlockScaleNan) {
  Vec x(2 * kBlock, 1.0f);
  x[5] = std::nanf("");
  std::vector<int8_t> q(2 * kBlock);
  Vec d(2);
  QuantizeRowQ8(x.data(), 2 * kBlock, q.data(), d.data());
  EXPECT_TRUE(std::isnan(d[0]));
  EXPECT_EQ(q[5], 0);
  EXPECT_EQ(d[1], 1.0f / 127.0f);
  EXPECT_EQ(q[kBlock], 127);
}

// --- the kernels --------------------------------------------------------------------------------

TEST(Q8_0ProductInt8Test, DispatchPicksTheWidestKernel) {
  EXPECT_EQ(Int8KernelFor(Isa::kBaseline), Int8Kernel::kPlain);
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (__builtin_cpu_supports("avx2")) {
    EXPECT_EQ(Int8KernelFor(Isa::kAvx2), Int8Kernel::kAvx2);
  }
  if (__builtin_cpu_supports("x86-64-v4") && __builtin_cpu_supports("avx512vnni")) {
    EXPECT_EQ(Int8KernelFor(Isa::kAvx512), Int8Kernel::kAvx512Vnni);
  }
#endif
  for (const Int8Kernel kernel : KernelsHere())
    std::printf("int8 kernel: %s\n", KernelName(kernel));
}

// Batches too small to fill a tile take the row or the quad kernel; the plain kernel stays plain.
TEST(Q8_0ProductInt8Test, SmallBatchesTakeTheRowOrQuadKernel) {
  EXPECT_EQ(Int8KernelForRows(Int8Kernel::kPlain, 1), Int8Kernel::kPlain);
  EXPECT_EQ(Int8KernelForRows(Int8Kernel::kAvx2, 1), Int8Kernel::kAvx2Rows);
  EXPECT_EQ(Int8KernelForRows(Int8Kernel::kAvx2, 2), Int8Kernel::kAvx2Rows);
  EXPECT_EQ(Int8KernelForRows(Int8Kernel::kAvx2, 3), Int8Kernel::kAvx2Quads);
  EXPECT_EQ(Int8KernelForRows(Int8Kernel::kAvx2, 4), Int8Kernel::kAvx2Quads);
  EXPECT_EQ(Int8KernelForRows(Int8Kernel::kAvx2, 5), Int8Kernel::kAvx2);
  EXPECT_EQ(Int8KernelForRows(Int8Kernel::kAvx512Vnni, 1), Int8Kernel::kAvx2Rows);
  EXPECT_EQ(Int8KernelForRows(Int8Kernel::kAvx512Vnni, 2), Int8Kernel::kAvx512Vnni);
  EXPECT_EQ(Int8TileRows(Int8Kernel::kAvx2Rows), 1);
  EXPECT_EQ(Int8TileRows(Int8Kernel::kAvx2Quads), 4);
}

// Every kernel equals the reference bit for bit, for 1 and 2 threads, overwriting and adding.
TEST(Q8_0ProductInt8Test, EveryKernelMatchesTheReferenceBitForBit) {
  struct Shape {
    int64_t n, out, in;
  };
  std::mt19937 gen(2);
  for (const Shape s : {Shape{1, 37, 32}, Shape{3, 37, 64}, Shape{17, 37, 64}, Shape{1, 21, 4864},
                        Shape{17, 21, 4864}, Shape{3, 70, 896}, Shape{33, 16, 96}, Shape{2, 37, 96},
                        Shape{6, 21, 896}, Shape{4, 19, 160}, Shape{5, 19, 160}}) {
    Vec w_values = Normal(gen, static_cast<size_t>(s.out * s.in), 0.05f);
    Bytes w = QuantizeWeight(w_values, s.out, s.in);
    // Weight edge cases: an all-zero block, quants at -128 and +-127 (ggml writes at most 127, but
    // a file may hold -128), tiny and subnormal half scales.
    const int64_t blocks = s.in / kBlock;
    for (int64_t o = 0; o < s.out; o += 3) {
      uint8_t* block = w.data() + (o * blocks + (o % blocks)) * 34;
      const uint16_t scales[] = {0x0000, 0x0001, 0x0400, 0x7bff, 0x3c00};  // 0, 2^-24, 2^-14, max
      const uint16_t half = scales[o % 5];
      std::memcpy(block, &half, sizeof half);
      for (int64_t k = 0; k < kBlock; ++k) {
        block[2 + k] = static_cast<uint8_t>(o % 2 == 0 ? (k % 2 == 0 ? -128 : 127) : -127);
      }
    }
    const Vec x = EdgeCaseActivations(gen, s.n * s.in);
    const Vec expected = ReferenceProduct(x, w, s.n, s.out, s.in);
    // The edge cases leave most outputs finite (inf and NaN only where a huge x block meets a
    // large weight scale).
    const auto finite = std::count_if(expected.begin(), expected.end(),
                                      [](float v) { return std::isfinite(v) && v != 0; });
    EXPECT_GT(finite, static_cast<int64_t>(expected.size()) / 2);
    const Vec start = Normal(gen, static_cast<size_t>(s.n * s.out));
    Vec expected_added(start);
    for (size_t e = 0; e < start.size(); ++e) expected_added[e] = start[e] + expected[e];
    for (const Int8Kernel kernel : KernelsHere()) {
      for (const int threads : {1, 2}) {
        SCOPED_TRACE(std::string(KernelName(kernel)) + " n=" + std::to_string(s.n) +
                     " out=" + std::to_string(s.out) + " in=" + std::to_string(s.in) +
                     " threads=" + std::to_string(threads));
        EXPECT_TRUE(SameBits(expected, RunKernel(kernel, threads, x, w, s.n, s.out, s.in)));
        EXPECT_TRUE(
            SameBits(expected_added, RunKernel(kernel, threads, x, w, s.n, s.out, s.in, &start)));
      }
    }
  }
}

// Row r's outputs are the same bits alone, anywhere in a batch of 17, with 1 or 2 threads, next to
// a row of NaNs, through the backend's LinearForward at every instruction-set level.
TEST(Q8_0ProductInt8Test, BatchAndThreadInvariant) {
  std::mt19937 gen(3);
  const int64_t in = 896, out = 70, n = 17;
  const Bytes w = QuantizeWeight(Normal(gen, static_cast<size_t>(out * in), 0.05f), out, in);
  Vec x = Normal(gen, static_cast<size_t>(n * in));
  std::fill_n(x.data() + 5 * in + 64, 40, std::nanf(""));  // row 5: NaN in blocks 2 and 3
  for (const Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    Vec alone(static_cast<size_t>(n * out));
    {
      auto backend = NewCpuBackendWithIsa(1, isa);
      for (int64_t r = 0; r < n; ++r) {
        backend->LinearForward(alone.data() + r * out, x.data() + r * in, Ref(w, out, in), nullptr,
                               1);
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      const bool nan_row = r == 5;
      for (int64_t o = 0; o < out; ++o) {
        EXPECT_EQ(nan_row, std::isnan(alone[r * out + o])) << "row " << r << " output " << o;
      }
    }
    for (const int threads : {1, 2}) {
      auto backend = NewCpuBackendWithIsa(threads, isa);
      Vec batch(static_cast<size_t>(n * out));
      backend->LinearForward(batch.data(), x.data(), Ref(w, out, in), nullptr, n);
      EXPECT_TRUE(SameBits(alone, batch))
          << "isa " << static_cast<int>(isa) << " threads " << threads;
      // The rows in another order: row r now sits at position (r * 7) % 17.
      Vec shuffled(x.size());
      for (int64_t r = 0; r < n; ++r) {
        std::copy_n(x.data() + r * in, in, shuffled.data() + ((r * 7) % n) * in);
      }
      backend->LinearForward(batch.data(), shuffled.data(), Ref(w, out, in), nullptr, n);
      for (int64_t r = 0; r < n; ++r) {
        const Vec got(batch.begin() + ((r * 7) % n) * out, batch.begin() + ((r * 7) % n + 1) * out);
        const Vec want(alone.begin() + r * out, alone.begin() + (r + 1) * out);
        EXPECT_TRUE(SameBits(want, got)) << "row " << r << " threads " << threads;
      }
    }
  }
}

// Against the f32-activation product (Q8_0Product: the same weights, x unquantized). Quantizing x
// moves each value by at most d/2 = max|x|/254 of its block, roughly uniformly, so an output
// moves by about sqrt(sum w^2 d^2 / 12): for Gaussian x (max of 32 |values| about 2.2 sigma) that
// is 0.5% of the outputs' rms. Bounds: 1% for the rms of the differences, 4% of (|y| + rms) for the
// worst element (about 6 standard deviations of the difference over 20000 outputs).
TEST(Q8_0ProductInt8Test, CloseToTheF32ActivationProduct) {
  std::mt19937 gen(4);
  for (const int64_t in : {int64_t{896}, int64_t{4864}}) {
    const int64_t out = 80, n = 256;
    const Bytes w = QuantizeWeight(Normal(gen, static_cast<size_t>(out * in), 0.05f), out, in);
    const Vec x = Normal(gen, static_cast<size_t>(n * in));
    auto f32 = NewCpuBackendWithOptions(2, {.q8_0_activations = Q8_0Activations::kF32});
    auto int8 = NewCpuBackendWithOptions(2, {.q8_0_activations = Q8_0Activations::kInt8});
    Vec exact(static_cast<size_t>(n * out));
    Vec got(static_cast<size_t>(n * out));
    f32->LinearForward(exact.data(), x.data(), Ref(w, out, in), nullptr, n);
    int8->LinearForward(got.data(), x.data(), Ref(w, out, in), nullptr, n);
    double sum_sq = 0;
    double diff_sq = 0;
    for (size_t e = 0; e < exact.size(); ++e) {
      sum_sq += static_cast<double>(exact[e]) * exact[e];
      diff_sq +=
          (static_cast<double>(got[e]) - exact[e]) * (static_cast<double>(got[e]) - exact[e]);
    }
    const double rms = std::sqrt(sum_sq / static_cast<double>(exact.size()));
    const double diff_rms = std::sqrt(diff_sq / static_cast<double>(exact.size()));
    EXPECT_LT(diff_rms / rms, 0.01) << "in " << in;
    EXPECT_GT(diff_rms / rms, 1e-4) << "in " << in << ": x does not look quantized";
    double worst = 0;
    for (size_t e = 0; e < exact.size(); ++e) {
      worst = std::max(
          worst, std::fabs(static_cast<double>(got[e]) - exact[e]) / (std::fabs(exact[e]) + rms));
    }
    EXPECT_LT(worst, 0.04) << "in " << in;
    if (std::getenv("SOVAI_PRINT_ERRORS") != nullptr) {
      std::printf("in %lld: rms of differences %.3g of the outputs' rms, worst %.3g\n",
                  static_cast<long long>(in), diff_rms / rms, worst);
    }
  }
}

TEST(Q8_0ProductInt8Test, EnvironmentChoosesTheActivations) {
  ::unsetenv("SOVAI_Q8_0_ACTIVATIONS");
  EXPECT_EQ(Q8_0ActivationsFromEnvironment(), Q8_0Activations::kInt8);
  ::setenv("SOVAI_Q8_0_ACTIVATIONS", "f32", 1);
  EXPECT_EQ(Q8_0ActivationsFromEnvironment(), Q8_0Activations::kF32);
  ::setenv("SOVAI_Q8_0_ACTIVATIONS", "int8", 1);
  EXPECT_EQ(Q8_0ActivationsFromEnvironment(), Q8_0Activations::kInt8);
  ::setenv("SOVAI_Q8_0_ACTIVATIONS", "bogus", 1);
  EXPECT_EQ(Q8_0ActivationsFromEnvironment(), Q8_0Activations::kInt8);
  ::unsetenv("SOVAI_Q8_0_ACTIVATIONS");
}

}  // namespace
}  // namespace sovai::kernels::cpu
