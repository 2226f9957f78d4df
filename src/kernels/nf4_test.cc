#include "kernels/nf4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace sovai::kernels {
namespace {

float Up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float Down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }

TEST(Nf4Test, TableIsAscendingWithExactZeroAndOne) {
  for (size_t k = 1; k < kNf4Values.size(); ++k) EXPECT_LT(kNf4Values[k - 1], kNf4Values[k]);
  EXPECT_EQ(kNf4Values[0], -1.0f);
  EXPECT_EQ(kNf4Values[7], 0.0f);
  EXPECT_EQ(kNf4Values[15], 1.0f);
}

TEST(Nf4Test, EncodePicksTheNearestValue) {
  // Every table value is its own code, and the decision between neighbours k and k + 1 flips at
  // their midpoint: bitsandbytes' thresholds are that midpoint to within 1e-7, so 1e-6 either side
  // is decided.
  for (int k = 0; k < 16; ++k) EXPECT_EQ(Nf4Encode(kNf4Values[k]), k) << k;
  for (int k = 0; k + 1 < 16; ++k) {
    const double midpoint = (static_cast<double>(kNf4Values[k]) + kNf4Values[k + 1]) / 2;
    EXPECT_EQ(Nf4Encode(static_cast<float>(midpoint - 1e-6)), k) << k;
    EXPECT_EQ(Nf4Encode(static_cast<float>(midpoint + 1e-6)), k + 1) << k;
  }
  // Beyond the ends (cannot happen after dividing by the absmax, but must stay in range).
  EXPECT_EQ(Nf4Encode(1.5f), 15);
  EXPECT_EQ(Nf4Encode(-1.5f), 0);
  // NaN fails every `x > threshold` test: code 0, as in bitsandbytes.
  EXPECT_EQ(Nf4Encode(std::numeric_limits<float>::quiet_NaN()), 0);
}

TEST(Nf4Test, EncodeSendsAValueOnAThresholdToTheLowerCode) {
  // bitsandbytes' threshold between codes 7 (0) and 8 (0.0795803) is the f32 literal
  // 0.03979014977812767f; every test is `x > threshold`.
  const float threshold = 0.03979014977812767f;
  EXPECT_EQ(Nf4Encode(threshold), 7);
  EXPECT_EQ(Nf4Encode(Up(threshold)), 8);
  const float top = 0.8614784181118011f;  // between 0.7229568 and 1
  EXPECT_EQ(Nf4Encode(top), 14);
  EXPECT_EQ(Nf4Encode(Up(top)), 15);
}

TEST(Nf4Test, DynamicMapHasTheShapeOfCreateDynamicMap) {
  const auto& map = BitsandbytesDynamicMap();
  for (size_t k = 1; k < map.size(); ++k) EXPECT_LT(map[k - 1], map[k]) << k;
  EXPECT_EQ(map[127], 0.0f);
  EXPECT_EQ(map[255], 1.0f);
  for (int k = 1; k <= 127; ++k) EXPECT_EQ(map[127 - k], -map[127 + k]) << k;
  // Exponent i = 0..6 contributes the 2^i midpoints of linspace(0.1, 1, 2^i + 1) times
  // 10^(i - 6). PyTorch's f32 linspace, midpoint and product round three times, so an entry may
  // be one ulp off the correctly rounded value, i.e. up to 1.5 ulp from the exact one
  // (ops_golden.py checks the exact bits against PyTorch).
  int index = 128;
  for (int i = 0; i < 7; ++i) {
    const int count = 1 << i;
    for (int j = 0; j < count; ++j, ++index) {
      const double exact = (0.1 + (j + 0.5) * 0.9 / count) * std::pow(10.0, i - 6);
      const float entry = map[static_cast<size_t>(index)];
      EXPECT_LE(std::fabs(entry - exact), 1.5 * std::fabs(Up(entry) - entry)) << index;
    }
  }
  EXPECT_EQ(index, 255);
  EXPECT_NEAR(map[128], 5.5e-7, 1e-13);    // i = 0: 0.55 * 10^-6
  EXPECT_NEAR(map[0], -0.99296875, 1e-7);  // -(1 - 0.9 / 128)
}

TEST(Nf4Test, DynamicMapEncodeIsNearestWithTheSearchEntryWinningTies) {
  const auto& map = BitsandbytesDynamicMap();
  for (int k = 0; k < 256; ++k) EXPECT_EQ(DynamicMapEncode(map, map[k]), k) << k;
  // Random values against a brute-force nearest entry, away from midpoints.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int trial = 0; trial < 20000; ++trial) {
    // Spread over the map's decades, as centered absmaxes are.
    const float x = uniform(rng) * std::pow(10.0f, -static_cast<float>(trial % 7));
    int nearest = 0;
    for (int k = 1; k < 256; ++k) {
      if (std::fabs(map[k] - x) < std::fabs(map[nearest] - x)) nearest = k;
    }
    // The runner-up is the neighbour on x's side of the nearest entry (none past the ends).
    const int other = map[nearest] < x ? nearest + 1 : nearest - 1;
    if (other >= 0 && other < 256) {
      const double gap = std::fabs(std::fabs(map[nearest] - x) - std::fabs(map[other] - x));
      if (gap < 1e-6 * std::fabs(x)) continue;  // too close to a midpoint to call
    }
    EXPECT_EQ(DynamicMapEncode(map, x), nearest) << x;
  }
  EXPECT_EQ(DynamicMapEncode(map, 2.0f), 255);
  EXPECT_EQ(DynamicMapEncode(map, -2.0f), 0);
  EXPECT_EQ(DynamicMapEncode(map, -1.0f), 0);  // the map's lowest entry is -0.99297
  EXPECT_EQ(DynamicMapEncode(map, std::numeric_limits<float>::quiet_NaN()), 0);
  // On the midpoint of two entries the binary search's last entry wins: for (map[127] + map[128])
  // / 2 the search passes 127 (x > 0), then narrows down from above and ends on 128, so the tie
  // goes to 128; one ulp lower is nearer 127.
  const float mid = (map[127] + map[128]) * 0.5f;
  EXPECT_EQ(DynamicMapEncode(map, mid), 128);
  EXPECT_EQ(DynamicMapEncode(map, Down(mid)), 127);
}

TEST(Nf4Test, RefusesSizesAndValuesItCannotQuantize) {
  std::vector<float> v(128, 1.0f);
  auto bad_size = [](std::span<const float> s) {
    auto r = QuantizeNf4(s);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("multiple of 64"), std::string::npos) << r.status();
  };
  bad_size(std::span<const float>(v.data(), 0));
  bad_size(std::span<const float>(v.data(), 63));
  bad_size(std::span<const float>(v.data(), 100));
  v[70] = std::numeric_limits<float>::quiet_NaN();
  auto r = QuantizeNf4(v);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("element 70"), std::string::npos) << r.status();
  v[70] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(QuantizeNf4(v).ok());
  v[70] = 1.0f;
  EXPECT_TRUE(QuantizeNf4(v).ok());
}

TEST(Nf4Test, OneBlockOfTableValuesEncodesToTheirCodesHighNibbleFirst) {
  // x[e] = 3 * kNf4Values[e % 16]: absmax 3, code(e) = e % 16, packed two per byte with the
  // earlier element in the high nibble: 0x01, 0x23, ..., 0xef, four times.
  std::vector<float> x(64);
  for (int e = 0; e < 64; ++e) x[e] = 3.0f * kNf4Values[e % 16];
  auto q = QuantizeNf4(x);
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_EQ(q->codes.size(), 32u);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(q->codes[j], ((2 * j) % 16) << 4 | ((2 * j + 1) % 16)) << j;
  }
  // One absmax: the mean is 3 itself, so the centered value and its block scale are 0, and the
  // absmax code is 0 (bitsandbytes' 0 * (1 / 0) = NaN).
  EXPECT_EQ(q->absmax_offset, 3.0f);
  ASSERT_EQ(q->absmax_scales.size(), 1u);
  EXPECT_EQ(q->absmax_scales[0], 0.0f);
  EXPECT_EQ(q->absmax_codes, std::vector<uint8_t>{0});
  // Dequantized: absmax = map[0] * 0 + 3 = 3, so every value comes back exactly.
  std::vector<float> back(64);
  Nf4Weight w = q->View();
  DequantizeNf4(w, 64, back.data());
  EXPECT_EQ(back, x);
}

TEST(Nf4Test, DoubleQuantizationCentersTheAbsmaxesOnTheirMean) {
  // Two blocks with absmax 1 and 3: offset 2, centered -1 and +1, scale 1. +1 is the map's last
  // entry (code 255); -1 is below its first, -0.99296875 (code 0). So block 0's absmax comes back
  // as 2 - 0.99296875 = 1.00703125: the double quantization's error, as in bitsandbytes.
  std::vector<float> x(128, 0.0f);
  x[5] = -1.0f;  // block 0: absmax 1 (sign does not matter)
  x[64] = 3.0f;  // block 1: absmax 3
  auto q = QuantizeNf4(x);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->absmax_offset, 2.0f);
  EXPECT_EQ(q->absmax_scales, std::vector<float>{1.0f});
  EXPECT_EQ(q->absmax_codes, (std::vector<uint8_t>{0, 255}));
  // Element 5 is -1 -> code 0 (low nibble of byte 2, element 4 the high one); zeros -> code 7;
  // 3 / 3 = 1 -> code 15.
  EXPECT_EQ(q->codes[2], 0x70);
  EXPECT_EQ(q->codes[32], 0xf7);
  EXPECT_EQ(q->codes[1], 0x77);
  std::vector<float> back(128);
  DequantizeNf4(q->View(), 128, back.data());
  const float absmax0 = BitsandbytesDynamicMap()[0] * 1.0f + 2.0f;
  EXPECT_NEAR(absmax0, 1.00703125f, 1e-7f);
  EXPECT_EQ(back[5], -absmax0);
  EXPECT_EQ(back[0], 0.0f);
  EXPECT_EQ(back[64], 3.0f);
}

TEST(Nf4Test, AllZeroBlockTakesCodeZeroAsBitsandbytesDoes) {
  // Block 0 all zeros: bitsandbytes computes 0 * (1 / 0) = NaN for every element, which its tree
  // sends to code 0 (-1). Block 1 has absmax 2. Offset 1; centered -1, +1.
  std::vector<float> x(128, 0.0f);
  x[100] = 2.0f;
  auto q = QuantizeNf4(x);
  ASSERT_TRUE(q.ok()) << q.status();
  for (int j = 0; j < 32; ++j) EXPECT_EQ(q->codes[j], 0x00) << j;
  EXPECT_EQ(q->absmax_codes, (std::vector<uint8_t>{0, 255}));
  std::vector<float> back(128);
  DequantizeNf4(q->View(), 128, back.data());
  // absmax0 = map[0] + 1 = 0.00703125 (not 0), so the zeros come back as -0.00703125.
  EXPECT_NEAR(back[0], -(1.0f + BitsandbytesDynamicMap()[0]), 1e-9f);
  EXPECT_NEAR(back[0], -0.00703125f, 1e-7f);
  EXPECT_EQ(back[100], 2.0f);
}

TEST(Nf4Test, RandomWeightsRoundTripWithinHalfAStepOfTheTable) {
  // 300 blocks: two absmax blocks of 256 and 44. Every element's code must be the nearest table
  // value to x / absmax (checked by brute force, away from midpoints), and the dequantized value
  // within half the widest table gap (0.3038 between -1 and -0.6962) of the absmax, plus the
  // absmax's own double-quantization error.
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(64 * 300);
  for (float& v : x) v = normal(rng);
  auto q = QuantizeNf4(x);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->absmax_codes.size(), 300u);
  EXPECT_EQ(q->absmax_scales.size(), 2u);
  std::vector<float> back(x.size());
  DequantizeNf4(q->View(), static_cast<int64_t>(x.size()), back.data());
  int checked = 0;
  for (int b = 0; b < 300; ++b) {
    float absmax = 0;
    for (int i = 0; i < 64; ++i) absmax = std::max(absmax, std::fabs(x[b * 64 + i]));
    const float scale = q->absmax_scales[b / 256];
    // The dynamic map's widest gap near +-1 is 0.9 / 64: half of it, times the block's scale.
    const float absmax_error = scale * 0.9f / 128 + 1e-7f;
    for (int i = 0; i < 64; ++i) {
      const int e = b * 64 + i;
      const float normalized = x[e] / absmax;
      int nearest = 0;
      for (int k = 1; k < 16; ++k) {
        if (std::fabs(kNf4Values[k] - normalized) < std::fabs(kNf4Values[nearest] - normalized)) {
          nearest = k;
        }
      }
      const uint8_t byte = q->codes[e / 2];
      const int code = e % 2 == 0 ? byte >> 4 : byte & 0xf;
      bool near_midpoint = false;
      for (int k = 0; k + 1 < 16; ++k) {
        near_midpoint |= std::fabs(normalized - (kNf4Values[k] + kNf4Values[k + 1]) / 2) < 1e-5f;
      }
      if (!near_midpoint) {
        EXPECT_EQ(code, nearest) << e;
        ++checked;
      }
      EXPECT_LE(std::fabs(back[e] - x[e]), 0.3039f / 2 * absmax + absmax_error) << e;
    }
  }
  EXPECT_GT(checked, 19000);
}

TEST(Nf4Test, ViewPointsIntoTheOwnedBuffers) {
  std::vector<float> x(64, 0.5f);
  auto q = QuantizeNf4(x);
  ASSERT_TRUE(q.ok());
  Nf4Weight w = q->View();
  EXPECT_EQ(w.codes, q->codes.data());
  EXPECT_EQ(w.absmax_codes, q->absmax_codes.data());
  EXPECT_EQ(w.absmax_scales, q->absmax_scales.data());
  EXPECT_EQ(w.absmax_map, q->absmax_map.data());
  EXPECT_EQ(w.absmax_offset, q->absmax_offset);
}

}  // namespace
}  // namespace sovai::kernels
