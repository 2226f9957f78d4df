#include "cli/prometheus.h"

#include <gtest/gtest.h>

namespace sovai::cli {
namespace {

TEST(PrometheusTest, RendersEveryFamilyWithHelpAndType) {
  net::ServerStats api;
  api.open_connections = 3;
  api.total_connections = 10;
  api.bytes_in = 100;
  api.requests = {{"/health", "GET", 200, 7}, {"<unmatched>", "GET", 404, 2}};
  net::ServerStats s3;
  s3.total_connections = 1;
  std::string text = RenderPrometheusMetrics("0.1.0", 12.5, {{"api", api}, {"s3", s3}});

  EXPECT_NE(text.find("sovai_build_info{version=\"0.1.0\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE sovai_uptime_seconds gauge\nsovai_uptime_seconds 12.500\n"),
            std::string::npos);
  EXPECT_NE(text.find("sovai_http_open_connections{server=\"api\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("sovai_http_connections_total{server=\"s3\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("sovai_http_received_bytes_total{server=\"api\"} 100\n"), std::string::npos);
  EXPECT_NE(text.find("sovai_http_requests_total{server=\"api\",route=\"/health\",method=\"GET\","
                      "status=\"200\"} 7\n"),
            std::string::npos);
  EXPECT_NE(text.find("route=\"<unmatched>\",method=\"GET\",status=\"404\"} 2\n"),
            std::string::npos);
  // Every sample line belongs to a family announced with HELP and TYPE.
  size_t pos = 0;
  while ((pos = text.find("\nsovai_", pos)) != std::string::npos) {
    size_t end = text.find_first_of("{ ", pos + 1);
    std::string family = text.substr(pos + 1, end - pos - 1);
    EXPECT_NE(text.find("# TYPE " + family + " "), std::string::npos) << family;
    EXPECT_NE(text.find("# HELP " + family + " "), std::string::npos) << family;
    ++pos;
  }
  EXPECT_EQ(text.back(), '\n');
}

TEST(PrometheusTest, EscapesLabelValues) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  net::ServerStats stats;
  stats.requests = {{"/x/\"{id}\"", "GET", 200, 1}};
  std::string text = RenderPrometheusMetrics("v\n1", 0, {{"api", stats}});
  EXPECT_NE(text.find("version=\"v\\n1\""), std::string::npos);
  EXPECT_NE(text.find("route=\"/x/\\\"{id}\\\"\""), std::string::npos);
}

}  // namespace
}  // namespace sovai::cli
