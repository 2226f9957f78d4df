#include "base/strings.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sovai::base {
namespace {

using Pieces = std::vector<std::string_view>;

TEST(StringsTest, SplitKeepsOrSkipsEmptyPieces) {
  EXPECT_EQ(Split("a,,b", ','), (Pieces{"a", "", "b"}));
  EXPECT_EQ(Split("a,,b", ',', /*skip_empty=*/true), (Pieces{"a", "b"}));
  EXPECT_EQ(Split("", ','), (Pieces{""}));
  EXPECT_EQ(Split("", ',', true), (Pieces{}));
  EXPECT_EQ(Split(",a,", ','), (Pieces{"", "a", ""}));
  EXPECT_EQ(Split("abc", ','), (Pieces{"abc"}));
}

TEST(StringsTest, Join) {
  EXPECT_EQ(Join(std::vector<std::string>{"a", "b", "c"}, ", "), "a, b, c");
  EXPECT_EQ(Join(std::vector<std::string>{}, ","), "");
  EXPECT_EQ(Join(Pieces{"x"}, ","), "x");
}

TEST(StringsTest, Trim) {
  EXPECT_EQ(Trim(" \t a b \r\n"), "a b");
  EXPECT_EQ(TrimLeft("  a "), "a ");
  EXPECT_EQ(TrimRight("  a "), "  a");
  EXPECT_EQ(Trim("   "), "");
  EXPECT_EQ(Trim(""), "");
}

TEST(StringsTest, CaseHelpersLeaveNonAsciiAlone) {
  EXPECT_EQ(AsciiToLower("Content-TYPE \xC3\x89"), "content-type \xC3\x89");
  EXPECT_EQ(AsciiToUpper("x-amz-date"), "X-AMZ-DATE");
  EXPECT_TRUE(EqualsIgnoreCase("Content-Length", "content-length"));
  EXPECT_FALSE(EqualsIgnoreCase("abc", "abd"));
  EXPECT_FALSE(EqualsIgnoreCase("abc", "abcd"));
}

TEST(StringsTest, PercentDecode) {
  EXPECT_EQ(*PercentDecode("a%20b%2Fc%2f"), "a b/c/");
  EXPECT_EQ(*PercentDecode("a+b"), "a+b");
  EXPECT_EQ(*PercentDecode("a+b", /*plus_as_space=*/true), "a b");
  EXPECT_EQ(*PercentDecode("%00"), std::string(1, '\0'));
  EXPECT_EQ(*PercentDecode("%E2%82%AC"), "\xE2\x82\xAC");
  for (std::string_view bad : {"%", "%2", "%zz", "abc%g0", "%2 "}) {
    Result<std::string> r = PercentDecode(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("offset"), std::string::npos);
  }
}

TEST(StringsTest, UriEncodeMatchesSigV4) {
  EXPECT_EQ(UriEncode("AZaz09-._~", true), "AZaz09-._~");
  EXPECT_EQ(UriEncode("a b/c", false), "a%20b/c");
  EXPECT_EQ(UriEncode("a b/c", true), "a%20b%2Fc");
  EXPECT_EQ(UriEncode("+=&?*", true), "%2B%3D%26%3F%2A");
  EXPECT_EQ(UriEncode("\xE2\x82\xAC", true), "%E2%82%AC");  // uppercase hex, per byte
  EXPECT_EQ(UriEncode(std::string(1, '\0'), true), "%00");
  // Round trip through PercentDecode for every byte.
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  EXPECT_EQ(*PercentDecode(UriEncode(all, true)), all);
}

TEST(StringsTest, ParseUint64) {
  EXPECT_EQ(*ParseUint64("0"), 0u);
  EXPECT_EQ(*ParseUint64("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(*ParseUint64("007"), 7u);
  for (std::string_view bad : {"", "-1", "+1", " 1", "1 ", "0x10", "1.5", "18446744073709551616",
                               "99999999999999999999999"}) {
    Result<uint64_t> r = ParseUint64(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
  EXPECT_NE(ParseUint64("18446744073709551616").status().message().find("too large"),
            std::string::npos);
}

TEST(StringsTest, ParseInt64) {
  EXPECT_EQ(*ParseInt64("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(*ParseInt64("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(*ParseInt64("-5"), -5);
  for (std::string_view bad :
       {"", "-", "--1", "9223372036854775808", "-9223372036854775809", "1-"}) {
    EXPECT_FALSE(ParseInt64(bad).ok()) << bad;
  }
}

TEST(StringsTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.0 KiB");
  EXPECT_EQ(HumanBytes(1536ull << 20), "1.5 GiB");
  EXPECT_EQ(HumanBytes(UINT64_MAX), "16.0 EiB");
}

TEST(StringsTest, ShellQuoteSurvivesTheShell) {
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("plain"), "'plain'");
  EXPECT_EQ(ShellQuote("it's $HOME `x`"), "'it'\\''s $HOME `x`'");
}

TEST(StringsTest, JsonQuoteEscapesAndStaysValid) {
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("a\"b\\c\n\t\r"), R"("a\"b\\c\n\t\r")");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f\x7f", 3)), R"("\u0001\u001f\u007f")");
  EXPECT_EQ(JsonQuote("caf\xC3\xA9"), "\"caf\xC3\xA9\"");           // valid UTF-8 kept
  EXPECT_EQ(JsonQuote("bad\xFF\xC3"), R"("bad\ufffd\ufffd")");      // invalid bytes replaced
  EXPECT_EQ(JsonQuote("\xED\xA0\x80"), R"("\ufffd\ufffd\ufffd")");  // surrogate is invalid
  EXPECT_EQ(JsonQuote("\xC0\xAF"), R"("\ufffd\ufffd")");            // overlong is invalid
  // Whatever the bytes, the output parses back as a JSON string.
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  EXPECT_TRUE(nlohmann::json::accept(JsonQuote(all)));
  EXPECT_EQ(nlohmann::json::parse(JsonQuote("x\"\n\x01y")).get<std::string>(), "x\"\n\x01y");
}

}  // namespace
}  // namespace sovai::base
