#include "train/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace sovai::train {
namespace {

TEST(ScheduleTest, WarmupRisesLinearlyFromZero) {
  Schedule s{ScheduleKind::kCosine, 1e-3, 10, 110};
  EXPECT_DOUBLE_EQ(s.LearningRate(0), 0.0);
  EXPECT_DOUBLE_EQ(s.LearningRate(5), 5e-4);
  EXPECT_DOUBLE_EQ(s.LearningRate(10), 1e-3) << "the peak is reached right after warmup";
}

TEST(ScheduleTest, CosineFallsToZeroAtTheEnd) {
  Schedule s{ScheduleKind::kCosine, 1e-3, 10, 110};
  EXPECT_NEAR(s.LearningRate(60), 0.5e-3, 1e-15) << "half way: half the peak";
  EXPECT_NEAR(s.LearningRate(35), 1e-3 * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-15);
  EXPECT_NEAR(s.LearningRate(110), 0.0, 1e-18);
  EXPECT_GE(s.LearningRate(500), 0.0) << "never negative past the end";
}

TEST(ScheduleTest, LinearAndConstant) {
  Schedule linear{ScheduleKind::kLinear, 1e-3, 0, 100};
  EXPECT_DOUBLE_EQ(linear.LearningRate(0), 1e-3);
  EXPECT_DOUBLE_EQ(linear.LearningRate(75), 0.25e-3);
  EXPECT_DOUBLE_EQ(linear.LearningRate(200), 0.0);
  Schedule constant{ScheduleKind::kConstant, 1e-3, 4, 100};
  EXPECT_DOUBLE_EQ(constant.LearningRate(2), 0.5e-3);
  EXPECT_DOUBLE_EQ(constant.LearningRate(99), 1e-3);
}

TEST(ScheduleTest, Names) {
  EXPECT_EQ(ParseScheduleKind("linear"), ScheduleKind::kLinear);
  EXPECT_EQ(ParseScheduleKind("exponential"), std::nullopt);
  EXPECT_EQ(ScheduleKindName(ScheduleKind::kCosine), "cosine");
}

}  // namespace
}  // namespace sovai::train
