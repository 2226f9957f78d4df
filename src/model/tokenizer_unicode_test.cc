#include "model/tokenizer_unicode.h"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace sovai::model::unicode {
namespace {

std::string Utf8(char32_t cp) {
  std::string out;
  AppendUtf8(&out, cp);
  return out;
}

TEST(TokenizerUnicodeTest, CodePointsRoundTrip) {
  for (char32_t cp : {0x24u, 0xA2u, 0x939u, 0x20ACu, 0xD55Cu, 0x10348u, 0x10FFFFu}) {
    std::string s = Utf8(cp);
    size_t pos = 0;
    EXPECT_EQ(NextCodePoint(s, &pos), cp);
    EXPECT_EQ(pos, s.size());
  }
  // RFC 3629 examples.
  EXPECT_EQ(Utf8(0x20AC), "\xE2\x82\xAC");
  EXPECT_EQ(Utf8(0x10348), "\xF0\x90\x8D\x88");
  EXPECT_EQ(Utf8(0xD800), "\xEF\xBF\xBD") << "surrogates are not encodable";
}

TEST(TokenizerUnicodeTest, ValidateUtf8NamesTheOffendingByte) {
  EXPECT_TRUE(ValidateUtf8("plain ASCII", "text").ok());
  EXPECT_TRUE(ValidateUtf8("Zażółć 中文 😀", "text").ok());
  struct Case {
    std::string bytes;
    size_t offset;
  };
  for (const Case& c : std::vector<Case>{{"\x80", 0},
                                         {"ab\xC3", 2},                // truncated
                                         {"a\xC0\x80", 1},             // overlong NUL
                                         {"\xE0\x80\xAF", 0},          // overlong '/'
                                         {"xx\xED\xA0\x80", 2},        // surrogate D800
                                         {"\xF4\x90\x80\x80", 0},      // above U+10FFFF
                                         {"\xF8\x88\x80\x80\x80", 0},  // 5-byte form
                                         {"ok\xE2\x82", 2},
                                         {"\xC3(", 0}}) {
    base::Status s = ValidateUtf8(c.bytes, "the input");
    EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("the input is not valid UTF-8"), std::string::npos) << s;
    EXPECT_NE(s.message().find("at byte " + std::to_string(c.offset)), std::string::npos) << s;
  }
}

TEST(TokenizerUnicodeTest, JavaScriptWhitespaceSet) {
  // ECMAScript WhiteSpace + LineTerminator (ECMA-262 12.2, 12.3; Zs as of Unicode 15).
  for (char32_t cp : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0xA0u, 0x1680u, 0x2000u, 0x2005u,
                      0x200Au, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) {
    EXPECT_TRUE(IsJsWhitespace(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
  // Not JavaScript whitespace, though some are in Unicode's White_Space or look blank.
  for (char32_t cp : {0x85u, 0x180Eu, 0x200Bu, 0x2060u, 0x08u, 0x1Fu, 0x61u, 0x3001u}) {
    EXPECT_FALSE(IsJsWhitespace(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
  EXPECT_EQ(TrimStartJs("\xE3\x80\x80 \t x y "), "x y ");
  EXPECT_EQ(TrimEndJs(" x y\xEF\xBB\xBF\n \xC2\xA0"), " x y");
  EXPECT_EQ(TrimEndJs("\xC2\x85"), "\xC2\x85");
  EXPECT_EQ(TrimStartJs("   "), "");
  EXPECT_EQ(TrimEndJs(""), "");
}

TEST(TokenizerUnicodeTest, LossyDecodingReplacesMaximalSubparts) {
  // The "best practice" of Unicode 15 section 3.9 (Table 3-8), which WHATWG's decoder follows.
  EXPECT_EQ(DecodeUtf8Lossy("abc", false), "abc");
  EXPECT_EQ(DecodeUtf8Lossy("\xF0\x9F\x98", false), "\xEF\xBF\xBD") << "truncated 4-byte form";
  EXPECT_EQ(DecodeUtf8Lossy("\xE2\x28\xA1", false), "\xEF\xBF\xBD(\xEF\xBF\xBD");
  EXPECT_EQ(DecodeUtf8Lossy("\xC0\x80", false), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(DecodeUtf8Lossy("\xED\xA0\x80", false), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(DecodeUtf8Lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", false),
            "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
            "b\xEF\xBF\xBD"
            "c\xEF\xBF\xBD\xEF\xBF\xBD"
            "d");
  EXPECT_EQ(DecodeUtf8Lossy("\xEF\xBB\xBFx", true), "x");
  EXPECT_EQ(DecodeUtf8Lossy("\xEF\xBB\xBFx", false), "\xEF\xBB\xBFx");
  EXPECT_EQ(DecodeUtf8Lossy("x\xEF\xBB\xBF", true), "x\xEF\xBB\xBF") << "only a leading BOM goes";
}

TEST(TokenizerUnicodeTest, NormalForms) {
  EXPECT_EQ(*Normalize("e\xCC\x81", NormalForm::kNfc), "\xC3\xA9");  // e + U+0301
  EXPECT_EQ(*Normalize("\xC3\xA9", NormalForm::kNfd), "e\xCC\x81");
  EXPECT_EQ(*Normalize("\xE2\x84\xAB", NormalForm::kNfc), "\xC3\x85");      // U+212B -> U+00C5
  EXPECT_EQ(*Normalize("\xEF\xAC\x81", NormalForm::kNfc), "\xEF\xAC\x81");  // ligature fi kept
  EXPECT_EQ(*Normalize("\xEF\xAC\x81", NormalForm::kNfkc), "fi");
  EXPECT_EQ(*Normalize("\xE2\x91\xA0", NormalForm::kNfkd), "1");  // circled 1
  // Combining marks are reordered by class: dot below (220) before acute (230).
  EXPECT_EQ(*Normalize("a\xCC\x81\xCC\xA3", NormalForm::kNfd), "a\xCC\xA3\xCC\x81");
  // Hangul: L + V + T jamo compose to one syllable.
  EXPECT_EQ(*Normalize("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", NormalForm::kNfc), "\xEA\xB0\x81");
  EXPECT_EQ(*Normalize("plain", NormalForm::kNfkc), "plain");
}

// The quick check of Normalize must never skip text that utf8proc would change: every inert code
// point (and pairs of them) is checked against utf8proc's full algorithm directly.
TEST(TokenizerUnicodeTest, InertCodePointsAreFixedPointsOfEveryForm) {
  auto full = [](const std::string& text, int options) {
    utf8proc_uint8_t* out = nullptr;
    utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                      static_cast<utf8proc_ssize_t>(text.size()), &out,
                                      static_cast<utf8proc_option_t>(UTF8PROC_STABLE | options));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(out, &std::free);
    return n < 0 ? std::string("<error>") : std::string(reinterpret_cast<char*>(out), n);
  };
  const int forms[] = {UTF8PROC_COMPOSE, UTF8PROC_DECOMPOSE, UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                       UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
  std::vector<char32_t> inert;
  size_t checked = 0;
  for (char32_t cp = 0x80; cp <= 0x10FFFF; cp += (cp < 0x10000 ? 1 : 13)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if (!IsNormalizationInert(cp)) continue;
    inert.push_back(cp);
    std::string s = Utf8(cp);
    for (int form : forms)
      ASSERT_EQ(full(s, form), s) << std::hex << "U+" << static_cast<uint32_t>(cp);
    ++checked;
  }
  EXPECT_GT(checked, 50000u);
  EXPECT_FALSE(IsNormalizationInert(0x301)) << "combining acute";
  EXPECT_FALSE(IsNormalizationInert(0x212B)) << "angstrom sign";
  EXPECT_FALSE(IsNormalizationInert(0x1161)) << "hangul jamo";
  EXPECT_FALSE(IsNormalizationInert(0xE9)) << "e-acute decomposes under NFD";
  EXPECT_FALSE(IsNormalizationInert(0xA0)) << "NBSP is a space under NFKC";
  EXPECT_FALSE(IsNormalizationInert(0xAC00)) << "hangul syllable";
  EXPECT_TRUE(IsNormalizationInert(0x4E2D)) << "CJK ideograph";
  // Pairs: an inert code point after a few letters that start compositions, and inert pairs.
  uint64_t state = 12345;
  for (int i = 0; i < 20000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    char32_t a = inert[(state >> 33) % inert.size()];
    char32_t b = inert[(state >> 13) % inert.size()];
    std::string s = Utf8(a) + Utf8(b);
    for (int form : forms)
      ASSERT_EQ(full(s, form), s) << std::hex << static_cast<uint32_t>(a) << " "
                                  << static_cast<uint32_t>(b);
    std::string after_letter = "e" + Utf8(a);
    EXPECT_EQ(full(after_letter, UTF8PROC_COMPOSE), after_letter)
        << std::hex << static_cast<uint32_t>(a);
  }
}

TEST(TokenizerUnicodeTest, Gpt2ByteTable) {
  // GPT-2's bytes_to_unicode(): printable bytes stay, the others move to U+0100.. in order.
  EXPECT_EQ(ByteToUnicode('A'), U'A');
  EXPECT_EQ(ByteToUnicode('!'), U'!');
  EXPECT_EQ(ByteToUnicode(0x00), U'\u0100');
  EXPECT_EQ(ByteToUnicode('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(ByteToUnicode(' '), U'\u0120');   // "Ġ"
  EXPECT_EQ(ByteToUnicode(0x7F), U'\u0121');
  EXPECT_EQ(ByteToUnicode(0xA0), U'\u0142');
  EXPECT_EQ(ByteToUnicode(0xAD), U'\u0143');
  EXPECT_EQ(ByteToUnicode(0xA1), U'\u00A1');
  EXPECT_EQ(ByteToUnicode(0xFF), U'\u00FF');
  for (int b = 0; b < 256; ++b) EXPECT_EQ(UnicodeToByte(ByteToUnicode(b)), b);
  EXPECT_EQ(UnicodeToByte(U'\u0144'), -1);
  EXPECT_EQ(UnicodeToByte(U' '), -1);
  std::string mapped;
  AppendByteLevel(&mapped, " hi\n");
  EXPECT_EQ(mapped, "\xC4\xA0hi\xC4\x8A");  // "Ġhi" + "Ċ"
}

}  // namespace
}  // namespace sovai::model::unicode
