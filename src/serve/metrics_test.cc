#include "serve/metrics.h"

#include <gtest/gtest.h>

namespace sovai::serve {
namespace {

TEST(HistogramTest, BucketsAreCumulativeWithSumAndCount) {
  Histogram h({0.01, 0.1, 1});
  h.Observe(0.005);
  h.Observe(0.05);
  h.Observe(0.05);
  h.Observe(5);
  std::string out;
  h.Render("ttft_seconds", "time to first token", out);
  EXPECT_NE(out.find("# TYPE ttft_seconds histogram\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ttft_seconds_bucket{le=\"0.01\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ttft_seconds_bucket{le=\"0.1\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ttft_seconds_bucket{le=\"1\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ttft_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ttft_seconds_sum 5.105\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ttft_seconds_count 4\n"), std::string::npos) << out;
  EXPECT_EQ(h.count(), 4u);
}

TEST(HistogramTest, ABoundaryValueFallsInItsBucket) {
  Histogram h({1, 2});
  h.Observe(1);  // le="1" includes 1
  std::string out;
  h.Render("x", "x", out);
  EXPECT_NE(out.find("x_bucket{le=\"1\"} 1\n"), std::string::npos) << out;
}

TEST(RenderMetricTest, GaugeLines) {
  std::string out;
  RenderMetric("running", "gauge", "running requests", 3, out);
  EXPECT_EQ(out, "# HELP running running requests\n# TYPE running gauge\nrunning 3\n");
}

}  // namespace
}  // namespace sovai::serve
