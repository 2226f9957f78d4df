#include "model/tokenizer_regex.h"

#include <gtest/gtest.h>

namespace sovai::model {
namespace {

std::vector<std::string> Matches(const Regex& regex, std::string_view text) {
  std::vector<RegexMatch> matches;
  base::Status s = regex.FindAll(text, &matches);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<std::string> out;
  for (const RegexMatch& m : matches) out.emplace_back(text.substr(m.begin, m.end - m.begin));
  return out;
}

std::vector<std::string> JsMatches(std::string_view pattern, std::string_view text) {
  auto regex = Regex::FromJsPattern(pattern);
  EXPECT_TRUE(regex.ok()) << regex.status();
  if (!regex.ok()) return {};
  return Matches(*regex, text);
}

using Pieces = std::vector<std::string>;

TEST(TokenizerRegexTest, Gpt2PatternSplitsAsGpt2Does) {
  const std::string gpt2 =
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
  EXPECT_EQ(JsMatches(gpt2, "Hello world's 123 !!"),
            (Pieces{"Hello", " world", "'s", " 123", " !!"}));
  // The last space of a run goes with the next word.
  EXPECT_EQ(JsMatches(gpt2, "a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(JsMatches(gpt2, "x\n\n"), (Pieces{"x", "\n\n"}));
}

TEST(TokenizerRegexTest, Llama3ContractionsAreAsciiOnly) {
  const std::string llama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  auto translated = Regex::TranslateJsPattern(llama3);
  ASSERT_TRUE(translated.ok());
  EXPECT_EQ(translated->find("(?i"), std::string::npos) << *translated;
  EXPECT_EQ(JsMatches(llama3, "I'LL DON'T"), (Pieces{"I", "'LL", " DON", "'T"}));
  EXPECT_EQ(JsMatches(llama3, "1234567"), (Pieces{"123", "456", "7"}));
  // 'ſ' (long s) case-folds to 's' in Unicode, but the reference's rewrite is ASCII: "'ſt" is
  // one letter run, not the contraction "'ſ" and "t".
  EXPECT_EQ(JsMatches(llama3, "it'\xC5\xBFt"), (Pieces{"it", "'\xC5\xBFt"}));
  EXPECT_EQ(JsMatches(llama3, "it's"), (Pieces{"it", "'s"}));
}

TEST(TokenizerRegexTest, WhitespaceIsJavaScriptsSet) {
  // NBSP and BOM are \s in JavaScript; NEL (U+0085) is not.
  EXPECT_EQ(JsMatches("\\s+",
                      "a\xC2\xA0"
                      "b\xC2\x85"
                      "c\xEF\xBB\xBF"
                      "d\xE3\x80\x80"),
            (Pieces{"\xC2\xA0", "\xEF\xBB\xBF", "\xE3\x80\x80"}));
  EXPECT_EQ(JsMatches("\\S+",
                      "a\xC2\xA0"
                      "b\xC2\x85"
                      "c"),
            (Pieces{"a",
                    "b\xC2\x85"
                    "c"}));
  EXPECT_EQ(JsMatches("[^\\s]+", "x y"), (Pieces{"x", "y"}));
}

TEST(TokenizerRegexTest, AsciiClassesDotAndDollarFollowJavaScript) {
  // \d and \w are ASCII-only in JavaScript even with the u flag.
  EXPECT_EQ(JsMatches("\\d+", "\xD9\xA1\xD9\xA2 123"), (Pieces{"123"}));
  EXPECT_EQ(JsMatches("\\w+", "caf\xC3\xA9 ok"), (Pieces{"caf", "ok"}));
  // '.' excludes line terminators, U+2028 included.
  EXPECT_EQ(JsMatches(".+",
                      "ab\ncd\xE2\x80\xA8"
                      "ef"),
            (Pieces{"ab", "cd", "ef"}));
  // '$' is the end of the input only, not before a final newline.
  EXPECT_TRUE(JsMatches("a$", "a\n").empty());
  EXPECT_EQ(JsMatches("a$", "ba"), (Pieces{"a"}));
  // \u escapes, including a surrogate pair spelled as two escapes.
  EXPECT_EQ(JsMatches("\\u00e9|\\u{1F600}", "\xC3\xA9\xF0\x9F\x98\x80"),
            (Pieces{"\xC3\xA9", "\xF0\x9F\x98\x80"}));
  EXPECT_EQ(JsMatches("\\uD83D\\uDE00", "x\xF0\x9F\x98\x80"), (Pieces{"\xF0\x9F\x98\x80"}));
  // The reference drops the backslash of \# \& \~.
  EXPECT_EQ(JsMatches("\\#\\&\\~", "#&~"), (Pieces{"#&~"}));
}

TEST(TokenizerRegexTest, EmptyMatchesAdvanceOneCodePoint) {
  // "a😀".match(/x*/gu) is ["", "", ""]: empty matches at 0, after 'a', and at the end.
  auto regex = Regex::FromJsPattern("x*");
  ASSERT_TRUE(regex.ok());
  std::vector<RegexMatch> matches;
  ASSERT_TRUE(regex->FindAll("a\xF0\x9F\x98\x80", &matches).ok());
  ASSERT_EQ(matches.size(), 3u);
  EXPECT_EQ(matches[0].begin, 0u);
  EXPECT_EQ(matches[1].begin, 1u);
  EXPECT_EQ(matches[2].begin, 5u);
}

TEST(TokenizerRegexTest, LiteralsMatchLiterally) {
  auto regex = Regex::FromLiteral("a.b\\E(");
  ASSERT_TRUE(regex.ok()) << regex.status();
  EXPECT_EQ(Matches(*regex, "axb a.b\\E( a.b"), (Pieces{"a.b\\E("}));
  auto space = Regex::FromLiteral(" ");
  ASSERT_TRUE(space.ok());
  EXPECT_EQ(Matches(*space, "a b  c").size(), 3u);
}

TEST(TokenizerRegexTest, BadPatternsAreErrors) {
  auto open = Regex::FromJsPattern("(abc");
  EXPECT_EQ(open.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(open.status().message().find("(abc"), std::string::npos) << open.status();
  EXPECT_EQ(Regex::FromJsPattern("[]").status().code(), base::StatusCode::kUnimplemented);
  EXPECT_EQ(Regex::FromJsPattern("[^\\S]").status().code(), base::StatusCode::kUnimplemented);
  EXPECT_EQ(Regex::FromJsPattern("abc\\").status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(Regex::FromJsPattern("\\u12").status().code(), base::StatusCode::kUnimplemented);
  EXPECT_EQ(Regex::FromJsPattern("\xFF").status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(Regex::FromJsPattern(std::string(5000, 'a')).status().code(),
            base::StatusCode::kResourceExhausted);
}

TEST(TokenizerRegexTest, CatastrophicBacktrackingHitsTheLimit) {
  auto regex = Regex::FromJsPattern("(a+)+$");
  ASSERT_TRUE(regex.ok());
  std::vector<RegexMatch> matches;
  base::Status s = regex->FindAll(std::string(40, 'a') + "!", &matches);
  EXPECT_EQ(s.code(), base::StatusCode::kResourceExhausted) << s;
}

}  // namespace
}  // namespace sovai::model
