// Python str behaviours of jinja_strings.h. Expected values are what CPython 3.11 returns for the
// same calls (checked with the interpreter when the tests were written).
#include "model/jinja_strings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace sovai::model::jinja {
namespace {

using Strings = std::vector<std::string>;

TEST(Utf8Test, Validation) {
  size_t bad = 99;
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("é世😀"));
  EXPECT_FALSE(IsValidUtf8("ab\xff", &bad));
  EXPECT_EQ(bad, 2u);
  EXPECT_FALSE(IsValidUtf8("\xc3", &bad));  // truncated
  EXPECT_EQ(bad, 0u);
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));      // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe4\xb8"));          // truncated 3-byte
  EXPECT_FALSE(IsValidUtf8("a\x80"));             // stray continuation byte
}

TEST(Utf8Test, DecodeEncodeCount) {
  const std::string s = "aé世😀";
  EXPECT_EQ(DecodeUtf8(s), (std::u32string{U'a', U'é', U'世', U'😀'}));
  EXPECT_EQ(EncodeUtf8(DecodeUtf8(s)), s);
  EXPECT_EQ(CodePointCount(s), 4u);
  EXPECT_EQ(CodePointCount(""), 0u);
  // Invalid bytes decode one at a time as U+FFFD.
  EXPECT_EQ(DecodeUtf8("\xff"
                       "a"),
            (std::u32string{0xFFFD, U'a'}));
}

TEST(PyStrTest, Strip) {
  EXPECT_EQ(PyStrip("  a b  ", StripSide::kBoth), "a b");
  EXPECT_EQ(PyStrip("  a  ", StripSide::kLeft), "a  ");
  EXPECT_EQ(PyStrip("  a  ", StripSide::kRight), "  a");
  // Python's whitespace includes \x1c-\x1f, \x85, U+3000 but not U+FEFF.
  EXPECT_EQ(PyStrip("\x1c\xc2\x85\xe3\x80\x80"
                    "ab\xe3\x80\x80\xc2\x85\x1f",
                    StripSide::kBoth),
            "ab");
  EXPECT_EQ(PyStrip("\xef\xbb\xbf"
                    "ab",
                    StripSide::kBoth),
            "\xef\xbb\xbf"
            "ab");
  EXPECT_EQ(PyStrip("x\xc2\xa0", StripSide::kBoth), "x");
  EXPECT_EQ(PyStrip("abcab", StripSide::kBoth, std::string("ab")), "c");
  EXPECT_EQ(PyStrip("ééxé", StripSide::kBoth, std::string("é")), "x");
  EXPECT_EQ(PyStrip("", StripSide::kBoth), "");
}

TEST(PyStrTest, Split) {
  EXPECT_EQ(PySplit("  a  b  ", std::nullopt, -1), (Strings{"a", "b"}));
  EXPECT_EQ(PySplit("a b c d", std::nullopt, 2), (Strings{"a", "b", "c d"}));
  EXPECT_EQ(PySplit("  a b  ", std::nullopt, 1), (Strings{"a", "b  "}));
  EXPECT_EQ(PySplit("", std::nullopt, -1), Strings{});
  EXPECT_EQ(PySplit(",a,,b,", std::string(","), -1), (Strings{"", "a", "", "b", ""}));
  EXPECT_EQ(PySplit("a,b", std::string(","), 0), (Strings{"a,b"}));
  EXPECT_EQ(PySplit("a<>b<>c", std::string("<>"), 1), (Strings{"a", "b<>c"}));
  EXPECT_EQ(PyRSplit("a  b c  ", std::nullopt, 1), (Strings{"a  b", "c"}));
  EXPECT_EQ(PyRSplit("a,b,c", std::string(","), 1), (Strings{"a,b", "c"}));
  EXPECT_EQ(PyRSplit("a,b,c", std::string(","), -1), (Strings{"a", "b", "c"}));
  EXPECT_EQ(PySplitLines("l1\nl2\r\nl3\rl4\vl5\fl6\x1cl7\xe2\x80\xa8l8\n"),
            (Strings{"l1", "l2", "l3", "l4", "l5", "l6", "l7", "l8"}));
  EXPECT_EQ(PySplitLines("a\n\nb"), (Strings{"a", "", "b"}));
  EXPECT_EQ(PySplitLines(""), Strings{});
}

TEST(PyStrTest, Replace) {
  EXPECT_EQ(PyReplace("abc", "", "-", -1), "-a-b-c-");
  EXPECT_EQ(PyReplace("abc", "", "-", 2), "-a-bc");
  EXPECT_EQ(PyReplace("aaa", "a", "bb", 2), "bbbba");
  EXPECT_EQ(PyReplace("éé", "", "|", -1), "|é|é|");
  EXPECT_EQ(PyReplace("abc", "x", "y", -1), "abc");
}

TEST(PyStrTest, CaseMapping) {
  EXPECT_EQ(PyTitle("hello world"), "Hello World");
  EXPECT_EQ(PyTitle("they're bill's"), "They'Re Bill'S");
  EXPECT_EQ(PyCapitalize("hÉllO"), "Héllo");
  EXPECT_EQ(PyLower("ÀÉÎ"), "àéî");
  EXPECT_EQ(PyUpper("àéîÿĳ"), "ÀÉÎŸĲ");
  EXPECT_EQ(PyLower("Ω"), "ω");
  EXPECT_EQ(PyUpper("яё"), "ЯЁ");
  EXPECT_EQ(PySwapCase("aBc"), "AbC");
  // Outside the covered scripts, text is unchanged (Python would give "SS" for ß).
  EXPECT_EQ(PyUpper("ß世"), "ß世");
}

TEST(PyStrTest, Slices) {
  // Python: 'hello'[start:stop:step].
  struct Case {
    std::optional<int64_t> start, stop, step;
    int64_t want_start, want_length;
  };
  const std::vector<Case> cases = {
      {std::nullopt, std::nullopt, std::nullopt, 0, 5},  // 'hello'
      {1, std::nullopt, std::nullopt, 1, 4},             // 'ello'
      {std::nullopt, -1, std::nullopt, 0, 4},            // 'hell'
      {std::nullopt, std::nullopt, -1, 4, 5},            // 'olleh'
      {-100, 100, std::nullopt, 0, 5},                   // 'hello'
      {4, 1, -1, 4, 3},                                  // 'oll'
      {std::nullopt, std::nullopt, 2, 0, 3},             // 'hlo'
      {10, std::nullopt, -1, 4, 5},                      // 'olleh'
      {3, 1, std::nullopt, 3, 0},                        // ''
  };
  for (const Case& c : cases) {
    SliceBounds b = ResolveSlice(c.start, c.stop, c.step, 5);
    EXPECT_EQ(b.start, c.want_start);
    EXPECT_EQ(SliceLength(b), c.want_length);
  }
  SliceBounds extreme =
      ResolveSlice(std::nullopt, std::nullopt, std::numeric_limits<int64_t>::min(), 5);
  EXPECT_EQ(SliceLength(extreme), 1);
}

TEST(PyStrTest, Repr) {
  EXPECT_EQ(PyRepr("it's"), "\"it's\"");
  EXPECT_EQ(PyRepr("say \"hi\""), "'say \"hi\"'");
  EXPECT_EQ(PyRepr("both ' \""), "'both \\' \"'");
  EXPECT_EQ(PyRepr(std::string("\x00\x7f\xc2\x80\xc2\xa0\xc2\xad", 8)),
            "'\\x00\\x7f\\x80\\xa0\\xad'");
  EXPECT_EQ(PyRepr("\xe2\x80\xa8\xe3\x80\x80\xe2\x80\x8b\xef\xbb\xbf"),
            "'\\u2028\\u3000\\u200b\\ufeff'");
  EXPECT_EQ(PyRepr("é\n\t\\"), "'é\\n\\t\\\\'");
}

TEST(PyStrTest, FloatRepr) {
  struct Case {
    double value;
    std::string want;
  };
  const std::vector<Case> cases = {
      {1.0, "1.0"},
      {0.1, "0.1"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {123456789012345678.0, "1.2345678901234568e+17"},
      {1e-5, "1e-05"},
      {0.0001, "0.0001"},
      {1.5e-7, "1.5e-07"},
      {-0.0, "-0.0"},
      {2.5, "2.5"},
      {1.0 / 3, "0.3333333333333333"},
      {1e22, "1e+22"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {100.0, "100.0"},
      {12345.678, "12345.678"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {-std::numeric_limits<double>::infinity(), "-inf"},
      {std::nan(""), "nan"},
  };
  for (const Case& c : cases) EXPECT_EQ(PyFloatRepr(c.value), c.want) << c.want;
}

TEST(PyStrTest, HtmlEscape) {
  EXPECT_EQ(HtmlEscape("<a href=\"x\">&'</a>"), "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;");
}

}  // namespace
}  // namespace sovai::model::jinja
