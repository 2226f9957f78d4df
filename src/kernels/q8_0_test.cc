#include "kernels/q8_0.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"

namespace sovai::kernels {
namespace {

// The scale of block `b` as stored (an IEEE half, little-endian) and its 32 quants.
uint16_t ScaleBits(const std::vector<uint8_t>& q, size_t b = 0) {
  return static_cast<uint16_t>(q[b * 34] | (q[b * 34 + 1] << 8));
}
int Quant(const std::vector<uint8_t>& q, size_t j, size_t b = 0) {
  return static_cast<int8_t>(q[b * 34 + 2 + j]);
}

std::vector<uint8_t> Quantize(const std::vector<float>& x) {
  std::vector<uint8_t> out(Q8_0Bytes(x.size()));
  QuantizeRowQ8_0(x, out);
  return out;
}

TEST(QuantQ8_0Test, SizesFollowTheBlockLayout) {
  EXPECT_EQ(kQ8_0BlockBytes, 34u);
  EXPECT_EQ(Q8_0Bytes(32), 34u);
  EXPECT_EQ(Q8_0Bytes(4096), 128u * 34u);
}

TEST(QuantQ8_0Test, ZerosGiveAZeroScaleAndZeroQuants) {
  std::vector<uint8_t> q = Quantize(std::vector<float>(32, 0.0f));
  EXPECT_EQ(ScaleBits(q), 0u);
  for (size_t j = 0; j < 32; ++j) EXPECT_EQ(Quant(q, j), 0) << j;
}

TEST(QuantQ8_0Test, MaxMagnitude127GivesScaleOneAndTheIntegersThemselves) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j * 8 - 127);  // -127, -119, ..., 121
  std::vector<uint8_t> q = Quantize(x);
  EXPECT_EQ(ScaleBits(q), 0x3c00u);  // 1.0 as a half
  for (int j = 0; j < 32; ++j) EXPECT_EQ(Quant(q, j), j * 8 - 127) << j;
}

TEST(QuantQ8_0Test, ANegativeMaximumMapsToMinus127) {
  std::vector<float> x(32, 0.5f);
  x[7] = -254.0f;  // d = 2
  std::vector<uint8_t> q = Quantize(x);
  EXPECT_EQ(ScaleBits(q), 0x4000u);  // 2.0
  EXPECT_EQ(Quant(q, 7), -127);
  EXPECT_EQ(Quant(q, 0), 0);  // 0.5 / 2 = 0.25 rounds to 0
}

TEST(QuantQ8_0Test, HalvesRoundAwayFromZeroLikeRoundf) {
  // With d = 1 the quants are round(x): ties go away from zero (roundf), not to even (rint).
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  x[4] = -0.5f;
  x[5] = 3.5f;
  x[6] = 2.4999998f;
  std::vector<uint8_t> q = Quantize(x);
  EXPECT_EQ(Quant(q, 1), 3);
  EXPECT_EQ(Quant(q, 2), -3);
  EXPECT_EQ(Quant(q, 3), 1);
  EXPECT_EQ(Quant(q, 4), -1);
  EXPECT_EQ(Quant(q, 5), 4);
  EXPECT_EQ(Quant(q, 6), 2);
}

TEST(QuantQ8_0Test, ScaleIsTheNearestHalfOfMaxOver127) {
  std::vector<float> x(32, 0.0f);
  x[3] = 1.0f;  // d = 1/127, not representable as a half
  std::vector<uint8_t> q = Quantize(x);
  const double d = 1.0 / 127.0;
  const uint16_t bits = ScaleBits(q);
  const double stored = tensor::F16ToFloat(bits);
  // No neighbouring half is closer (d is a normal half, so bits +-1 are its neighbours).
  EXPECT_LE(std::fabs(stored - d), std::fabs(tensor::F16ToFloat(bits + 1) - d));
  EXPECT_LE(std::fabs(stored - d), std::fabs(tensor::F16ToFloat(bits - 1) - d));
  EXPECT_EQ(Quant(q, 3), 127);
}

TEST(QuantQ8_0Test, BlocksAreIndependent) {
  std::vector<float> x(64, 0.0f);
  x[0] = 127.0f;   // block 0: d = 1
  x[32] = 254.0f;  // block 1: d = 2
  x[33] = -5.0f;   // -2.5 -> -3
  std::vector<uint8_t> q = Quantize(x);
  EXPECT_EQ(ScaleBits(q, 0), 0x3c00u);
  EXPECT_EQ(ScaleBits(q, 1), 0x4000u);
  EXPECT_EQ(Quant(q, 0, 1), 127);
  EXPECT_EQ(Quant(q, 1, 1), -3);
}

TEST(QuantQ8_0Test, DequantizeReadsHandBuiltBlocks) {
  // Block 0: d = 0.5 (half 0x3800), q = 0, 1, -1, 127, -127, ...; block 1: d = 0.
  std::vector<uint8_t> bytes(68, 0);
  bytes[0] = 0x00;
  bytes[1] = 0x38;
  const int8_t quants[] = {0, 1, -1, 127, -127, 64};
  for (size_t j = 0; j < std::size(quants); ++j) bytes[2 + j] = static_cast<uint8_t>(quants[j]);
  bytes[34 + 2] = 5;  // ignored: d = 0
  std::vector<float> out(64, -1.0f);
  DequantizeRowQ8_0(bytes, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.5f);
  EXPECT_EQ(out[2], -0.5f);
  EXPECT_EQ(out[3], 63.5f);
  EXPECT_EQ(out[4], -63.5f);
  EXPECT_EQ(out[5], 32.0f);
  EXPECT_EQ(out[6], 0.0f);
  for (size_t j = 32; j < 64; ++j) EXPECT_EQ(out[j], 0.0f) << j;
}

TEST(QuantQ8_0Test, ErrorIsWithinHalfAStepPlusTheScaleRounding) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> x(32 * 256);
  for (float& v : x) v = normal(rng);
  x[100] = 3.0f;  // an outlier widens one block's step
  std::vector<uint8_t> q = Quantize(x);
  std::vector<float> back(x.size());
  DequantizeRowQ8_0(q, back);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const double d = amax / 127.0;
    const double stored = tensor::F16ToFloat(ScaleBits(q, b));
    const double bound = d / 2 + 127 * std::fabs(d - stored) + 1e-7 * amax;
    for (size_t j = 0; j < 32; ++j) {
      const size_t i = b * 32 + j;
      ASSERT_LE(std::fabs(x[i] - back[i]), bound) << "block " << b << " value " << j;
      ASSERT_LE(std::abs(Quant(q, j, b)), 127);
    }
  }
}

TEST(QuantQ8_0Test, QuantizeThenDequantizeIsIdempotent) {
  // Values already on the grid of a representable scale come back exactly.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.25f * static_cast<float>((j * 37) % 255 - 127);
  x[0] = 0.25f * 127;  // amax = 31.75, d = 0.25
  std::vector<uint8_t> q = Quantize(x);
  std::vector<float> back(32);
  DequantizeRowQ8_0(q, back);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(back[j], x[j]) << j;
}

TEST(QuantQ8_0Test, NaNAndInfinityStayInRange) {
  std::vector<float> x(32, 1.0f);
  x[1] = std::nanf("");
  x[2] = INFINITY;
  std::vector<uint8_t> q = Quantize(x);
  for (size_t j = 0; j < 32; ++j) EXPECT_LE(std::abs(Quant(q, j)), 127);
}

TEST(QuantQ8_0DeathTest, PartialBlocksAreABug) {
  std::vector<float> x(33, 0.0f);
  std::vector<uint8_t> out(34);
  EXPECT_DEATH(QuantizeRowQ8_0(x, out), "blocks of 32");
}

}  // namespace
}  // namespace sovai::kernels
