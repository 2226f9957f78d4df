#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

namespace sovai::kernels {
namespace {

using Kind = RopeScaling::Kind;

// The frequencies are the f32 rounding of a double computation: 1 ulp of f32 relative.
constexpr double kRel = 1.2e-7;

void ExpectRel(double expected, float actual) {
  EXPECT_NEAR(actual, expected, std::fabs(expected) * kRel) << "expected " << expected;
}

TEST(RopeTest, DefaultFrequenciesAreThetaToTheMinusTwoIOverD) {
  // D = 4, theta = 10000: 10000^(-0/4) = 1 and 10000^(-2/4) = 1/100.
  auto f = RopeInverseFrequencies(4, 10000, {});
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->size(), 2u);
  EXPECT_EQ((*f)[0], 1.0f);
  ExpectRel(0.01, (*f)[1]);

  // D = 8, theta = 16: 16^(-i/4) = 1, 1/2, 1/4, 1/8 (exact in f32).
  auto g = RopeInverseFrequencies(8, 16, {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, (std::vector<float>{1.0f, 0.5f, 0.25f, 0.125f}));
}

TEST(RopeTest, LinearScalingDividesEveryFrequency) {
  auto f = RopeInverseFrequencies(8, 16, {.kind = Kind::kLinear, .factor = 4});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*f, (std::vector<float>{0.25f, 0.125f, 0.0625f, 0.03125f}));
}

TEST(RopeTest, Llama3ScalingKeepsHighDividesLowAndSmoothsTheMiddle) {
  // D = 4, theta = 10000: frequencies 1 (wavelength 2*pi) and 0.01 (wavelength 200*pi ~ 628).
  // With original = 1000, low_freq_factor 1, high_freq_factor 4 the band edges are wavelengths
  // 1000 and 250: frequency 1 is above the band (kept); 0.01 is inside it, so with
  // smooth = (1000 / (200 pi) - 1) / (4 - 1) = (5 / pi - 1) / 3 it becomes
  // (1 - smooth) * 0.01 / 8 + smooth * 0.01.
  RopeScaling llama3{.kind = Kind::kLlama3,
                     .factor = 8,
                     .low_freq_factor = 1,
                     .high_freq_factor = 4,
                     .original_max_position_embeddings = 1000};
  auto f = RopeInverseFrequencies(4, 10000, llama3);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)[0], 1.0f);
  const double smooth = (5 / std::numbers::pi - 1) / 3;
  ExpectRel((1 - smooth) * 0.01 / 8 + smooth * 0.01, (*f)[1]);

  // original = 500 moves the low edge to wavelength 500 < 628: 0.01 is now below the band and is
  // divided by the factor.
  llama3.original_max_position_embeddings = 500;
  auto g = RopeInverseFrequencies(4, 10000, llama3);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0], 1.0f);
  ExpectRel(0.01 / 8, (*g)[1]);
}

TEST(RopeTest, Llama31ConfigurationIsMonotoneAndHitsAllThreeBands) {
  // Llama 3.1 8B: head_dim 128, theta 500000, factor 8, low 1, high 4, original 8192.
  RopeScaling llama3{.kind = Kind::kLlama3,
                     .factor = 8,
                     .low_freq_factor = 1,
                     .high_freq_factor = 4,
                     .original_max_position_embeddings = 8192};
  auto scaled = RopeInverseFrequencies(128, 500000, llama3);
  auto plain = RopeInverseFrequencies(128, 500000, {});
  ASSERT_TRUE(scaled.ok() && plain.ok());
  ASSERT_EQ(scaled->size(), 64u);
  int kept = 0, divided = 0, smoothed = 0;
  for (size_t i = 0; i < 64; ++i) {
    if (i > 0) {
      EXPECT_LT((*scaled)[i], (*scaled)[i - 1]) << i;  // still strictly decreasing
    }
    const double ratio = static_cast<double>((*scaled)[i]) / (*plain)[i];
    if (std::fabs(ratio - 1) < 1e-6) {
      ++kept;
    } else if (std::fabs(ratio - 0.125) < 1e-6) {
      ++divided;
    } else {
      EXPECT_GT(ratio, 0.125) << i;
      EXPECT_LT(ratio, 1.0) << i;
      ++smoothed;
    }
  }
  // Wavelength 2 pi 500000^(i/64) crosses 2048 after i = 28 and 8192 after i = 34.
  EXPECT_EQ(kept, 29);
  EXPECT_EQ(smoothed, 6);
  EXPECT_EQ(divided, 29);
}

TEST(RopeTest, RefusesBadConfigurationsNamingTheField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto fails = [](base::Result<std::vector<float>> r, std::string_view field) {
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status();
  };
  fails(RopeInverseFrequencies(0, 10000, {}), "head_dim");
  fails(RopeInverseFrequencies(7, 10000, {}), "head_dim");
  fails(RopeInverseFrequencies(-2, 10000, {}), "head_dim");
  fails(RopeInverseFrequencies(kMaxRopeHeadDim + 2, 10000, {}), "head_dim");
  fails(RopeInverseFrequencies(64, nan, {}), "rope_theta");
  fails(RopeInverseFrequencies(64, inf, {}), "rope_theta");
  fails(RopeInverseFrequencies(64, 1, {}), "rope_theta");
  fails(RopeInverseFrequencies(64, 10000, {.kind = Kind::kLinear, .factor = 0}), "factor");
  fails(RopeInverseFrequencies(64, 10000, {.kind = Kind::kLinear, .factor = nan}), "factor");
  fails(RopeInverseFrequencies(64, 10000, {.kind = Kind::kLlama3, .factor = -8}), "factor");
  fails(RopeInverseFrequencies(
            64, 10000,
            {.kind = Kind::kLlama3, .factor = 8, .low_freq_factor = 4, .high_freq_factor = 4}),
        "high_freq_factor");
  fails(
      RopeInverseFrequencies(64, 10000, {.kind = Kind::kLlama3, .factor = 8, .low_freq_factor = 0}),
      "low_freq_factor");
  fails(RopeInverseFrequencies(
            64, 10000, {.kind = Kind::kLlama3, .factor = 8, .original_max_position_embeddings = 0}),
        "original_max_position_embeddings");
  // The largest head size is accepted; the factor of an unscaled configuration is not looked at.
  EXPECT_TRUE(RopeInverseFrequencies(kMaxRopeHeadDim, 10000, {}).ok());
  EXPECT_TRUE(RopeInverseFrequencies(64, 10000, {.kind = Kind::kNone, .factor = 0}).ok());
}

TEST(RopeTest, ParsesTheScalingKindsHuggingFaceNames) {
  EXPECT_EQ(ParseRopeScalingKind("default"), Kind::kNone);
  EXPECT_EQ(ParseRopeScalingKind("linear"), Kind::kLinear);
  EXPECT_EQ(ParseRopeScalingKind("llama3"), Kind::kLlama3);
  EXPECT_EQ(ParseRopeScalingKind("yarn"), std::nullopt);
  EXPECT_EQ(ParseRopeScalingKind("dynamic"), std::nullopt);
  EXPECT_EQ(ParseRopeScalingKind(""), std::nullopt);
}

}  // namespace
}  // namespace sovai::kernels
