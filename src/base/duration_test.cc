#include "base/duration.h"

#include <gtest/gtest.h>

namespace sovai::base {
namespace {

constexpr int64_t kYear = 366LL * 86400;

TEST(ParseDurationSecondsTest, UnitsCombinationsAndBareSeconds) {
  EXPECT_EQ(*ParseDurationSeconds("90s", kYear), 90);
  EXPECT_EQ(*ParseDurationSeconds("10m", kYear), 600);
  EXPECT_EQ(*ParseDurationSeconds("2h", kYear), 7200);
  EXPECT_EQ(*ParseDurationSeconds("1d", kYear), 86400);
  EXPECT_EQ(*ParseDurationSeconds("1h30m", kYear), 5400);
  EXPECT_EQ(*ParseDurationSeconds("45", kYear), 45);
}

TEST(ParseDurationSecondsTest, MalformedInputIsRefusedQuotingIt) {
  for (const char* bad : {"", "h", "1x", "1h30", "-5s", "1.5h", " 1h", "0s", "0"}) {
    auto parsed = ParseDurationSeconds(bad, kYear);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (*bad != '\0') {
      EXPECT_NE(parsed.status().message().find(std::string("'") + bad + "'"), std::string::npos)
          << parsed.status().message();
    }
  }
}

TEST(ParseDurationSecondsTest, TheMaximumIsEnforcedWithoutOverflow) {
  EXPECT_EQ(*ParseDurationSeconds("366d", kYear), kYear);
  EXPECT_NE(ParseDurationSeconds("367d", kYear).status().message().find("longer than 366 days"),
            std::string::npos);
  EXPECT_FALSE(ParseDurationSeconds("99999999999999999999s", kYear).ok());
  EXPECT_FALSE(ParseDurationSeconds("3000000h3000000h", kYear).ok());
  EXPECT_NE(ParseDurationSeconds("2h", 3600).status().message().find("longer than 3600 s"),
            std::string::npos);
}

}  // namespace
}  // namespace sovai::base
