// The CUDA backend's per-element math (backend_math.h) on the host: the same functions the
// kernels call, checked against backend.h's shared definitions and the reference backend, so a
// wrong formula fails here in every build, before any GPU runs it.
#include "kernels/cuda/backend_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/nf4.h"
#include "kernels/q8_0.h"

namespace sovai::kernels::cuda::math {
namespace {

TEST(BackendMath, SplitMixAndDropoutAreBackendHs) {
  for (uint64_t z : {0ull, 1ull, 0x9E3779B97F4A7C15ull, ~0ull}) {
    EXPECT_EQ(SplitMix64(z), kernels::SplitMix64(z)) << z;
  }
  int kept = 0;
  for (float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
    for (uint64_t index = 0; index < 4096; ++index) {
      const bool keep = kernels::DropoutKeep(1234, index, p);
      const float factor = DropoutFactor(1234, index, p);
      if (p == 0) {
        EXPECT_EQ(factor, 1.0f);
        continue;
      }
      kept += keep;
      // The reference's factor: 1 / (1 - p) when kept, 0 when dropped.
      EXPECT_EQ(factor, keep ? 1.0f / (1.0f - p) : 0.0f) << "p " << p << " index " << index;
    }
  }
  EXPECT_GT(kept, 0);
}

TEST(BackendMath, Bf16AndHalfAreExact) {
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);  // the smallest subnormal
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);  // the largest finite half
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));  // -0
}

// Q8_0Value against the shared dequantizer (q8_0.h) on quantized random rows.
TEST(BackendMath, Q8_0ValueMatchesDequantizeRow) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(4 * 32);
  for (float& v : x) v = normal(rng);
  x[5] = 0;
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero block: scale 0
  std::vector<uint8_t> blocks(Q8_0Bytes(x.size()));
  QuantizeRowQ8_0(x, blocks);
  std::vector<float> want(x.size());
  DequantizeRowQ8_0(blocks, want);
  for (size_t e = 0; e < x.size(); ++e) {
    const float got = Q8_0Value(blocks.data(), static_cast<int64_t>(e));
    EXPECT_EQ(std::memcmp(&got, &want[e], sizeof(float)), 0) << e << ": " << got << " " << want[e];
  }
}

// The NF4 expansion the kernel computes (code, block absmax, product) against DequantizeNf4.
TEST(BackendMath, Nf4ExpansionMatchesDequantizeNf4) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(64 * 300);  // more than one absmax block of 256
  for (float& v : x) v = normal(rng);
  auto quantized = QuantizeNf4(x);
  ASSERT_TRUE(quantized.ok()) << quantized.status();
  const Nf4Weight w = quantized->View();
  std::vector<float> want(x.size());
  DequantizeNf4(w, static_cast<int64_t>(x.size()), want.data());
  for (int64_t e = 0; e < static_cast<int64_t>(x.size()); ++e) {
    const int64_t block = e / Nf4Weight::kBlockSize;
    // volatile: each product and sum rounded on its own, as the kernel's _rn intrinsics do (no
    // contraction into a fused multiply-add, whatever the compiler flags).
    const volatile float scaled =
        w.absmax_map[w.absmax_codes[block]] * w.absmax_scales[block / Nf4Weight::kAbsmaxBlockSize];
    const volatile float absmax = scaled + w.absmax_offset;
    const float got = kNf4Values[Nf4Code(w.codes, e)] * absmax;
    ASSERT_EQ(std::memcmp(&got, &want[e], sizeof(float)), 0) << e;
  }
}

// SwiGLU and its gradients against the reference backend's ops on the same values.
TEST(BackendMath, SwiGluMatchesReference) {
  const std::vector<float> gate = {-6.0f, -1.0f, 0.0f, 0.5f, 1.0f, 8.0f};
  const std::vector<float> up = {2.0f, -3.0f, 5.0f, 0.25f, 2.0f, -1.0f};
  const std::vector<float> dout = {1.0f, 0.5f, -2.0f, 3.0f, 1.0f, 0.125f};
  const int64_t n = static_cast<int64_t>(gate.size());
  auto reference = NewReferenceBackend();
  std::vector<float> out(n), dgate(n, 0.25f), dup(n, -0.5f);
  reference->SwiGluForward(out.data(), gate.data(), up.data(), n);
  reference->SwiGluBackward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  for (int64_t e = 0; e < n; ++e) {
    EXPECT_NEAR(SwiGlu(gate[e], up[e]), out[e], 1e-6 * (1 + std::fabs(out[e]))) << e;
    // Backward ops accumulate: the kernel adds these to what the gradients held.
    EXPECT_NEAR(0.25f + SwiGluGradGate(dout[e], gate[e], up[e]), dgate[e], 1e-6) << e;
    EXPECT_NEAR(-0.5f + SwiGluGradUp(dout[e], gate[e]), dup[e], 1e-6) << e;
  }
}

// The rotation forward and back against the reference's RoPE, and back(forward(x)) == x.
TEST(BackendMath, RotateMatchesReferenceRope) {
  const float x[4] = {1.0f, -2.0f, 0.5f, 3.0f};  // one head of D = 4
  const int32_t position = 7;
  const float inv_freq[2] = {1.0f, 0.01f};
  auto reference = NewReferenceBackend();
  float out[4];
  float back[4] = {0.1f, 0.2f, 0.3f, 0.4f};  // accumulated into
  reference->RopeForward(out, x, &position, inv_freq, 1, 1, 4);
  reference->RopeBackward(back, x, &position, inv_freq, 1, 1, 4);
  for (int i = 0; i < 2; ++i) {
    const float angle = static_cast<float>(position) * inv_freq[i];
    const Pair f = Rotate(x[i], x[i + 2], std::cos(angle), std::sin(angle), 1.0f);
    EXPECT_NEAR(f.first, out[i], 1e-6);
    EXPECT_NEAR(f.second, out[i + 2], 1e-6);
    const Pair b = Rotate(x[i], x[i + 2], std::cos(angle), std::sin(angle), -1.0f);
    EXPECT_NEAR(b.first + 0.1f * (i + 1), back[i], 1e-6);
    EXPECT_NEAR(b.second + 0.1f * (i + 3), back[i + 2], 1e-6);
    const Pair undo = Rotate(f.first, f.second, std::cos(angle), std::sin(angle), -1.0f);
    EXPECT_NEAR(undo.first, x[i], 1e-6);
    EXPECT_NEAR(undo.second, x[i + 2], 1e-6);
  }
}

TEST(BackendMath, AttentionMaskIsCausalWindowedAndSegmented) {
  EXPECT_TRUE(AttentionVisible(3, 3, 0, 0, 0));  // every row sees itself
  EXPECT_TRUE(AttentionVisible(3, 0, 0, 0, 0));
  EXPECT_FALSE(AttentionVisible(3, 4, 0, 0, 0));  // causal
  EXPECT_TRUE(AttentionVisible(3, 2, 2, 0, 0));   // i - j = 1 < window 2
  EXPECT_FALSE(AttentionVisible(3, 1, 2, 0, 0));  // i - j = 2: outside
  EXPECT_FALSE(AttentionVisible(3, 2, 0, 1, 0));  // another packed sample
}

}  // namespace
}  // namespace sovai::kernels::cuda::math
