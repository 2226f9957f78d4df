#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace sovai::tensor {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

TEST(DTypeTest, NamesAndSizes) {
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(ParseDType("float32"), DType::kF32);
  EXPECT_EQ(ParseDType("f16"), DType::kF16);
  EXPECT_EQ(ParseDType("int8"), std::nullopt);
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
}

TEST(DTypeTest, EveryHalfSurvivesARoundTripThroughFloat) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    float f = F16ToFloat(static_cast<uint16_t>(h));
    bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (nan) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(f)))) << h;
      continue;
    }
    EXPECT_EQ(FloatToF16(f), h) << std::hex << h;
  }
}

TEST(DTypeTest, HalfDecodesKnownValues) {
  EXPECT_EQ(F16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(F16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(F16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F16ToFloat(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_TRUE(std::isinf(F16ToFloat(0xfc00)) && F16ToFloat(0xfc00) < 0);
  EXPECT_EQ(Bits(F16ToFloat(0x8000)), 0x80000000u);  // -0 stays negative
}

// The compiler's _Float16 conversion rounds to nearest even: ours must agree on every input class.
TEST(DTypeTest, FloatToHalfMatchesTheCompilersConversion) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_real_distribution<float> small(-70000.f, 70000.f);
  for (int i = 0; i < 2'000'000; ++i) {
    float f = (i % 2) ? FromBits(any_bits(rng)) : small(rng) * std::ldexp(1.0f, -(i % 40));
    _Float16 h = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &h, sizeof want);
    uint16_t got = FloatToF16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToFloat(got)));
      continue;
    }
    ASSERT_EQ(got, want) << "input bits " << std::hex << Bits(f);
  }
  // Ties: exactly halfway between two halves goes to the even one.
  EXPECT_EQ(FloatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // 1 + half ulp -> 1
  EXPECT_EQ(FloatToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // -> even above
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);                          // rounds to inf
  EXPECT_EQ(FloatToF16(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even zero
  EXPECT_EQ(FloatToF16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(DTypeTest, BFloat16RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(FloatToBF16(1.0f), 0x3f80);
  EXPECT_EQ(BF16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBF16(FromBits(0x3f808000)), 0x3f80);  // tie, even below
  EXPECT_EQ(FloatToBF16(FromBits(0x3f818000)), 0x3f82);  // tie, even above
  EXPECT_EQ(FloatToBF16(FromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBF16(FromBits(0x7f7fffff)), 0x7f80);  // max float rounds to inf, as torch does
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(FromBits(0x7f800001)))))
      << "a NaN whose payload lives only in the dropped bits stays a NaN";
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    float f = BF16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToBF16(f), b);
  }
}

TEST(DTypeTest, ConvertElementsBetweenEveryPair) {
  const float values[] = {0.0f, -1.5f, 3.140625f, 1024.0f};
  for (DType from : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType to : {DType::kF32, DType::kF16, DType::kBF16}) {
      alignas(4) unsigned char src[16], dst[16];
      ConvertElements(DType::kF32, values, from, src, 4);
      ConvertElements(from, src, to, dst, 4);
      float back[4];
      ConvertElements(to, dst, DType::kF32, back, 4);
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(back[i], values[i]) << DTypeName(from) << "->" << DTypeName(to);
    }
  }
}

}  // namespace
}  // namespace sovai::tensor
