#include "base/time.h"

#include <gtest/gtest.h>

namespace sovai::base {
namespace {

// 1994-11-06T08:49:37Z, the RFC 7231 example.
constexpr int64_t kRfcExample = 784111777 * kMicrosPerSecond;
// 2013-05-24T00:00:00Z, the AWS SigV4 example date.
constexpr int64_t kAwsExample = 1369353600 * kMicrosPerSecond;

TEST(TimeTest, FormatRfc3339) {
  EXPECT_EQ(FormatRfc3339(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatRfc3339(kRfcExample + 123456, 3), "1994-11-06T08:49:37.123Z");
  EXPECT_EQ(FormatRfc3339(kRfcExample + 123456, 6), "1994-11-06T08:49:37.123456Z");
  EXPECT_EQ(FormatRfc3339(kRfcExample + 999999, 0), "1994-11-06T08:49:37Z");  // truncates
  EXPECT_EQ(FormatRfc3339(-1, 6), "1969-12-31T23:59:59.999999Z");
  EXPECT_EQ(FormatRfc3339(951782400LL * kMicrosPerSecond, 0), "2000-02-29T00:00:00Z");
}

TEST(TimeTest, ParseRfc3339) {
  EXPECT_EQ(*ParseRfc3339("1994-11-06T08:49:37Z"), kRfcExample);
  EXPECT_EQ(*ParseRfc3339("1994-11-06T08:49:37.123Z"), kRfcExample + 123000);
  EXPECT_EQ(*ParseRfc3339("1994-11-06t08:49:37.1234567z"), kRfcExample + 123456);
  EXPECT_EQ(*ParseRfc3339("1994-11-06 08:49:37.5Z"), kRfcExample + 500000);
  EXPECT_EQ(*ParseRfc3339("1994-11-06T10:49:37+02:00"), kRfcExample);
  EXPECT_EQ(*ParseRfc3339("1994-11-06T03:19:37-05:30"), kRfcExample);
  EXPECT_EQ(*ParseRfc3339("1994-11-07T00:49:37+16:00"), kRfcExample);
  EXPECT_EQ(*ParseRfc3339("1969-12-31T23:59:59.999999Z"), -1);
  EXPECT_EQ(*ParseRfc3339("2024-02-29T00:00:00Z"), 1709164800LL * kMicrosPerSecond);
}

TEST(TimeTest, ParseRfc3339RejectsGarbage) {
  for (std::string_view bad :
       {"", "garbage", "1994-11-06", "1994-11-06T08:49:37", "1994-11-06T08:49:37+0200",
        "1994-11-06T08:49:37.Z", "1994-11-06T08:49:37.1234567890Z", "1994-13-06T08:49:37Z",
        "1994-11-31T08:49:37Z", "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z",
        "1994-11-06T24:00:00Z", "1994-11-06T08:60:00Z", "1994-11-06T08:49:60Z",
        "1994-11-06T08:49:37Zjunk", " 1994-11-06T08:49:37Z", "1994-11-06T08:49:37+24:00",
        "9999-12-31T23:59:59-01:00", "94-11-06T08:49:37Z"}) {
    Result<int64_t> r = ParseRfc3339(bad);
    ASSERT_FALSE(r.ok()) << "accepted: " << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string(bad)), std::string::npos)
        << r.status().message();
  }
}

TEST(TimeTest, Rfc3339RoundTrips) {
  for (int64_t t : {int64_t{0}, kRfcExample + 1, kAwsExample, int64_t{253402300799999999},
                    int64_t{-62167219200000000}, int64_t{4102444800123456}}) {
    EXPECT_EQ(*ParseRfc3339(FormatRfc3339(t, 6)), t) << FormatRfc3339(t, 6);
  }
  EXPECT_EQ(FormatRfc3339(253402300799999999, 6), "9999-12-31T23:59:59.999999Z");
  EXPECT_EQ(FormatRfc3339(-62167219200000000, 0), "0000-01-01T00:00:00Z");
}

TEST(TimeTest, HttpDateAllThreeForms) {
  EXPECT_EQ(FormatHttpDate(kRfcExample + 999), "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(*ParseHttpDate("Sun, 06 Nov 1994 08:49:37 GMT"), kRfcExample);
  EXPECT_EQ(*ParseHttpDate("Sunday, 06-Nov-94 08:49:37 GMT"), kRfcExample);
  EXPECT_EQ(*ParseHttpDate("Sun Nov  6 08:49:37 1994"), kRfcExample);
  EXPECT_EQ(*ParseHttpDate("Thu Nov 16 08:49:37 1994"),
            kRfcExample + 10 * 86400 * kMicrosPerSecond);
  // RFC 850 two-digit years pivot at 70.
  EXPECT_EQ(FormatHttpDate(*ParseHttpDate("Friday, 24-May-13 00:00:00 GMT")),
            "Fri, 24 May 2013 00:00:00 GMT");
  EXPECT_EQ(FormatHttpDate(*ParseHttpDate("Thursday, 01-Jan-70 00:00:00 GMT")),
            "Thu, 01 Jan 1970 00:00:00 GMT");
  // The weekday is computed right across years.
  EXPECT_EQ(FormatHttpDate(0), "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(FormatHttpDate(kAwsExample), "Fri, 24 May 2013 00:00:00 GMT");
  EXPECT_EQ(FormatHttpDate(-86400 * kMicrosPerSecond), "Wed, 31 Dec 1969 00:00:00 GMT");
}

TEST(TimeTest, HttpDateRejectsGarbage) {
  for (std::string_view bad :
       {"", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 6 Nov 1994 08:49:37 GMT", "Xyz, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 31 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT", "Sun Nov 6 08:49:37 1994",
        "Sun, 06 Nov 1994 8:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMT ", "1994-11-06T08:49:37Z"}) {
    Result<int64_t> r = ParseHttpDate(bad);
    EXPECT_FALSE(r.ok()) << "accepted: " << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(TimeTest, AmzDateAndDateStamp) {
  EXPECT_EQ(FormatAmzDate(kAwsExample), "20130524T000000Z");
  EXPECT_EQ(FormatDateStamp(kAwsExample + 86399 * kMicrosPerSecond), "20130524");
  EXPECT_EQ(*ParseAmzDate("20130524T000000Z"), kAwsExample);
  EXPECT_EQ(*ParseDateStamp("20130524"), kAwsExample);
  EXPECT_EQ(*ParseAmzDate(FormatAmzDate(kRfcExample)), kRfcExample);
  for (std::string_view bad : {"", "20130524", "20130524T000000", "20130524T000000z",
                               "2013-05-24T00:00:00Z", "20130230T000000Z", "20130524T250000Z"}) {
    EXPECT_FALSE(ParseAmzDate(bad).ok()) << bad;
  }
  for (std::string_view bad : {"", "2013052", "201305245", "20131324", "2013-05-24"}) {
    EXPECT_FALSE(ParseDateStamp(bad).ok()) << bad;
  }
}

TEST(TimeTest, LeapYears) {
  EXPECT_TRUE(IsLeapYear(2000));
  EXPECT_TRUE(IsLeapYear(2024));
  EXPECT_FALSE(IsLeapYear(1900));
  EXPECT_FALSE(IsLeapYear(2023));
  EXPECT_TRUE(FromCivil({2000, 2, 29}).ok());
  EXPECT_FALSE(FromCivil({2100, 2, 29}).ok());
  // Day after Feb 28 in a leap year is Feb 29; in a common year Mar 1.
  EXPECT_EQ(FormatDateStamp(*ParseDateStamp("20240228") + 86400 * kMicrosPerSecond), "20240229");
  EXPECT_EQ(FormatDateStamp(*ParseDateStamp("20230228") + 86400 * kMicrosPerSecond), "20230301");
}

TEST(TimeTest, CivilRoundTripEveryDayForDecades) {
  // Each day from 1960 to 2100 converts to civil and back, with a weekday that advances by one.
  int64_t start = *ParseDateStamp("19600101");
  int expected_weekday = ToCivil(start).weekday;
  EXPECT_EQ(expected_weekday, 5);  // 1960-01-01 was a Friday
  for (int64_t day = 0; day < 141 * 366; ++day) {
    int64_t t = start + day * 86400 * kMicrosPerSecond + 12345;
    CivilTime c = ToCivil(t);
    ASSERT_EQ(*FromCivil(c), t);
    ASSERT_EQ(c.weekday, expected_weekday);
    expected_weekday = (expected_weekday + 1) % 7;
  }
}

TEST(TimeDeathTest, FormattingOutOfRangeIsABug) {
  EXPECT_DEATH((void)FormatRfc3339(INT64_MAX), "outside years 0000..9999");
}

}  // namespace
}  // namespace sovai::base
