#include "base/utf8.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sovai::base {
namespace {

const std::string kFffd(kReplacementCharacterUtf8);

std::string Encode(char32_t cp) {
  std::string out;
  AppendUtf8(&out, cp);
  return out;
}

// Ill-formed inputs, each with the offset of its first bad byte.
struct BadCase {
  std::string bytes;
  size_t offset;
  const char* what;
};
const std::vector<BadCase>& BadCases() {
  static const std::vector<BadCase> cases = {
      {"\x80", 0, "stray continuation byte"},
      {"a\xBF", 1, "stray continuation byte after ASCII"},
      {"ab\xC3", 2, "truncated 2-byte"},
      {"ok\xE2\x82", 2, "truncated 3-byte"},
      {"\xF0\x9F\x98", 0, "truncated 4-byte"},
      {"\xC3(", 0, "missing continuation byte"},
      {"\xE2\x28\xA1", 0, "missing continuation in a 3-byte form"},
      {"a\xC0\x80", 1, "overlong NUL"},
      {"\xC1\xBF", 0, "overlong 2-byte"},
      {"\xE0\x80\xAF", 0, "overlong '/' in 3 bytes"},
      {"\xF0\x8F\xBF\xBF", 0, "overlong U+FFFF in 4 bytes"},
      {"xx\xED\xA0\x80", 2, "surrogate U+D800"},
      {"\xED\xBF\xBF", 0, "surrogate U+DFFF"},
      {"\xF4\x90\x80\x80", 0, "above U+10FFFF"},
      {"\xF5\x80\x80\x80", 0, "lead byte F5"},
      {"\xF8\x88\x80\x80\x80", 0, "5-byte form"},
      {"\xFF", 0, "FF"},
  };
  return cases;
}

TEST(Utf8Test, WellFormedCharactersDecodeAndRoundTrip) {
  // The edges of each length, and of the surrogate gap.
  for (char32_t cp : {0x00u, 0x24u, 0x7Fu, 0x80u, 0xA2u, 0x7FFu, 0x800u, 0x20ACu, 0xD7FFu, 0xE000u,
                      0xFFFDu, 0xFFFFu, 0x10000u, 0x10348u, 0x10FFFFu}) {
    std::string s = Encode(cp);
    ASSERT_EQ(Utf8CharLength(s, 0), s.size()) << std::hex << static_cast<uint32_t>(cp);
    size_t pos = 0;
    EXPECT_EQ(NextUtf8CodePoint(s, &pos), static_cast<int32_t>(cp));
    EXPECT_EQ(pos, s.size());
    EXPECT_TRUE(IsValidUtf8(s));
  }
  // RFC 3629's examples.
  EXPECT_EQ(Encode(0x20AC), "\xE2\x82\xAC");
  EXPECT_EQ(Encode(0x10348), "\xF0\x90\x8D\x88");
  EXPECT_EQ(Encode(0xD800), kFffd) << "surrogates have no encoding";
  EXPECT_EQ(Encode(0x110000), kFffd) << "nor values above U+10FFFF";

  const std::string text = "a\xC3\xA9\xE4\xB8\x96\xF0\x9F\x98\x80";  // a é 世 😀
  size_t pos = 0;
  std::vector<int32_t> cps;
  while (pos < text.size()) cps.push_back(NextUtf8CodePoint(text, &pos));
  EXPECT_EQ(cps, (std::vector<int32_t>{'a', 0xE9, 0x4E16, 0x1F600}));
  EXPECT_EQ(Utf8Length(text), 4u);
  EXPECT_EQ(Utf8Length(""), 0u);
  EXPECT_TRUE(ValidateUtf8(text, "text").ok());
}

TEST(Utf8Test, IllFormedInputIsRejectedAtItsFirstBadByte) {
  for (const BadCase& c : BadCases()) {
    size_t bad = 99;
    EXPECT_FALSE(IsValidUtf8(c.bytes, &bad)) << c.what;
    EXPECT_EQ(bad, c.offset) << c.what;
    EXPECT_EQ(Utf8CharLength(c.bytes, c.offset), 0u) << c.what;
    size_t pos = c.offset;
    EXPECT_EQ(NextUtf8CodePoint(c.bytes, &pos), -1) << c.what;
    EXPECT_EQ(pos, c.offset + 1) << c.what << ": a decoder resumes at the next byte";

    Status st = ValidateUtf8(c.bytes, "the input");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(st.message().find("the input is not valid UTF-8: "), std::string::npos) << st;
    EXPECT_NE(st.message().find("at byte " + std::to_string(c.offset)), std::string::npos) << st;
  }
}

TEST(Utf8Test, ValidateNamesTheReason) {
  auto reason = [](std::string_view bytes) { return ValidateUtf8(bytes, "x").message(); };
  EXPECT_EQ(reason("\x80"), "x is not valid UTF-8: unexpected continuation byte at byte 0");
  EXPECT_EQ(reason("a\xFF"), "x is not valid UTF-8: invalid lead byte at byte 1");
  EXPECT_EQ(reason("\xE2\x82"), "x is not valid UTF-8: truncated sequence at byte 0");
  EXPECT_EQ(reason("\xC3("), "x is not valid UTF-8: missing continuation byte at byte 0");
  EXPECT_EQ(reason("\xE2\x82("), "x is not valid UTF-8: missing continuation byte at byte 0");
  EXPECT_EQ(reason("\xED\xA0\x80"),
            "x is not valid UTF-8: overlong encoding, surrogate or code point > U+10FFFF at "
            "byte 0");
}

TEST(Utf8Test, LengthCountsEachBadByteOnce) {
  EXPECT_EQ(Utf8Length("a\xFF\xC3\xA9\x80"), 4u);  // a, FF, é, 80
  EXPECT_EQ(Utf8Length("\xE2\x82"), 2u);
}

TEST(Utf8Test, LossyDecodingReplacesEachMaximalSubpart) {
  EXPECT_EQ(Utf8Lossy("abc"), "abc");
  EXPECT_EQ(Utf8Lossy("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98"), kFffd) << "a truncated form is one subpart";
  EXPECT_EQ(Utf8Lossy("\xE2\x28\xA1"), kFffd + "(" + kFffd);
  EXPECT_EQ(Utf8Lossy("\xC0\x80"), kFffd + kFffd) << "C0 starts nothing; 80 is stray";
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd) << "a surrogate is three";
  EXPECT_EQ(Utf8Lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
  // The WHATWG encoding standard's example: one U+FFFD per maximal subpart.
  EXPECT_EQ(Utf8Lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
  for (const BadCase& c : BadCases()) {
    EXPECT_TRUE(IsValidUtf8(Utf8Lossy(c.bytes))) << c.what;
  }
}

TEST(Utf8Test, LossyDecodingInPiecesEqualsTheWhole) {
  const std::string whole = "a\xC3\xA9\xF0\x9F\x98\x80\xE2\x28\xA1\xED\xA0\x80z\xF0\x9F";
  for (size_t piece = 1; piece <= 5; ++piece) {
    std::string out;
    std::string pending;
    for (size_t i = 0; i < whole.size(); i += piece) {
      pending += whole.substr(i, piece);
      size_t used = AppendUtf8Lossy(pending, /*final=*/false, &out);
      EXPECT_LE(pending.size() - used, 3u) << "only an incomplete character is held back";
      pending.erase(0, used);
    }
    EXPECT_EQ(AppendUtf8Lossy(pending, /*final=*/true, &out), pending.size());
    EXPECT_EQ(out, Utf8Lossy(whole)) << "pieces of " << piece;
  }
  std::string out;
  EXPECT_EQ(AppendUtf8Lossy("ab\xE2\x82", /*final=*/false, &out), 2u);
  EXPECT_EQ(out, "ab");
  EXPECT_EQ(AppendUtf8Lossy("ab\xE2(", /*final=*/false, &out), 4u) << "not a prefix: replaced";
  EXPECT_EQ(out, "abab" + kFffd + "(");
}

TEST(Utf8Test, SafeCutKeepsCharactersWhole) {
  const std::string s =
      "ab\xE2\x82\xAC"  // ab€
      "c";
  EXPECT_EQ(Utf8SafeCut(s, 0), 0u);
  EXPECT_EQ(Utf8SafeCut(s, 2), 2u);
  EXPECT_EQ(Utf8SafeCut(s, 3), 2u) << "inside the euro sign: before it";
  EXPECT_EQ(Utf8SafeCut(s, 4), 2u);
  EXPECT_EQ(Utf8SafeCut(s, 5), 5u) << "after it";
  EXPECT_EQ(Utf8SafeCut(s, 6), 6u);
  // A character that is all the piece would hold is cut rather than giving an empty piece.
  EXPECT_EQ(Utf8SafeCut("\xF0\x9F\x98\x80", 2), 2u);
  // Bytes that are not UTF-8 are cut anywhere.
  EXPECT_EQ(Utf8SafeCut("ab\x80\x80\x80\x80\x80", 6), 6u);
  EXPECT_EQ(Utf8SafeCut("ab\xFF\xFF", 3), 3u);
}

}  // namespace
}  // namespace sovai::base
