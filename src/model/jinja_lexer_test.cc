// The lexer (jinja_lexer.h): token kinds, values and positions, and the whitespace rules of
// Jinja with transformers' options. The whitespace expectations follow Jinja 3's documented
// behaviour (and are also covered end to end against Jinja2 in language_cases.json).
#include "model/jinja_lexer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sovai::model::jinja {
namespace {

std::vector<Token> LexOk(std::string_view source) {
  SourceMap map(NormalizeSource(source));
  auto tokens = Lex(map);
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  return tokens.ok() ? *tokens : std::vector<Token>{};
}

// The text tokens only, concatenated with '|' between them.
std::string Texts(std::string_view source) {
  std::string out;
  for (const Token& t : LexOk(source)) {
    if (t.kind != TokenKind::kText) continue;
    if (!out.empty()) out += '|';
    out += t.text;
  }
  return out;
}

std::string Describe(const std::vector<Token>& tokens) {
  std::string out;
  for (const Token& t : tokens) {
    if (!out.empty()) out += ' ';
    switch (t.kind) {
      case TokenKind::kName:
      case TokenKind::kOperator:
        out += t.text;
        break;
      case TokenKind::kString:
        out += "'" + t.text + "'";
        break;
      case TokenKind::kInt:
        out += "i" + std::to_string(t.int_value);
        break;
      case TokenKind::kFloat:
        out += "f" + std::to_string(t.float_value);
        break;
      case TokenKind::kText:
        out += "T(" + t.text + ")";
        break;
      default:
        out += std::string(TokenKindName(t.kind));
    }
  }
  return out;
}

TEST(JinjaLexerTest, NormalizesNewlines) {
  EXPECT_EQ(NormalizeSource("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(NormalizeSource("a\n\n"), "a\n");
  EXPECT_EQ(NormalizeSource(""), "");
}

TEST(JinjaLexerTest, TokensOfExpressions) {
  EXPECT_EQ(Describe(LexOk("{{ a.b[0] | f(x=1, y='s') }}")),
            "'{{' a . b [ i0 ] | f ( x = i1 , y = 's' ) '}}' end of template");
  EXPECT_EQ(Describe(LexOk("{{ 1 // 2 ** 3 != 4 <= 5 >= 6 == 7 ~ 8 }}")),
            "'{{' i1 // i2 ** i3 != i4 <= i5 >= i6 == i7 ~ i8 '}}' end of template");
  EXPECT_EQ(
      Describe(LexOk("{{ 1.5 1e3 2E-2 1_000 0x1f 0o17 0b101 x.0.1 }}")),
      "'{{' f1.500000 f1000.000000 f0.020000 i1000 i31 i15 i5 x . i0 . i1 '}}' end of template");
  EXPECT_EQ(Describe(LexOk("{{ {'a': {'b': 1}} }}")),
            "'{{' { 'a' : { 'b' : i1 } } '}}' end of template");
  EXPECT_EQ(Describe(LexOk("{% if x %}y{% endif %}")),
            "'{%' if x '%}' T(y) '{%' endif '%}' end of template");
}

TEST(JinjaLexerTest, StringEscapes) {
  auto tokens = LexOk(R"({{ 'a\nb\t\\\'\"\x41\u00e9\U0001F600\101\d' "it's" }})");
  ASSERT_GE(tokens.size(), 4u);
  EXPECT_EQ(tokens[1].text, "a\nb\t\\'\"Aé😀A\\d");
  EXPECT_EQ(tokens[2].text, "it's");
  // A backslash before a newline joins the lines; newlines may appear in strings.
  EXPECT_EQ(LexOk("{{ 'a\\\nb\nc' }}")[1].text, "ab\nc");
}

TEST(JinjaLexerTest, Positions) {
  SourceMap map(NormalizeSource("ab\n  {{ x }}\n€{{ y }}"));
  auto tokens = Lex(map);
  ASSERT_TRUE(tokens.ok());
  // ab\n, '{{' x '}}', \n€, '{{' y '}}', end
  std::vector<std::string> where;
  for (const Token& t : *tokens) where.push_back(map.Describe(t.offset));
  EXPECT_EQ(where, (std::vector<std::string>{"1:1", "2:3", "2:6", "2:8", "2:10", "3:2", "3:5",
                                             "3:7", "3:9"}));
}

TEST(JinjaLexerTest, WhitespaceControl) {
  // '-' strips all whitespace, newlines included, on its side.
  EXPECT_EQ(Texts("a  \n {%- if x -%} \n b"), "a|b");
  EXPECT_EQ(Texts("a  {{- x -}}  b"), "a|b");
  EXPECT_EQ(Texts("a  {#- c -#}  b"), "a|b");
  // trim_blocks: one newline after %} or #} goes; not after }}.
  EXPECT_EQ(Texts("{% if x %}\n\nb"), "\nb");
  EXPECT_EQ(Texts("{# c #}\nb"), "b");
  EXPECT_EQ(Texts("{{ x }}\nb"), "\nb");
  // lstrip_blocks: spaces and tabs before a block or comment tag at the start of a line.
  EXPECT_EQ(Texts("a\n  \t{% if x %}b"), "a\n|b");
  EXPECT_EQ(Texts("  {% if x %}b"), "b");  // the start of the template is a line start
  EXPECT_EQ(Texts("a\n  {{ x }}"), "a\n  ");
  EXPECT_EQ(Texts("a  {% if x %}"), "a  ");            // not at a line start
  EXPECT_EQ(Texts("{% if x %}\n    {% if y %}"), "");  // trim_blocks then lstrip_blocks
  // '+' disables them.
  EXPECT_EQ(Texts("a\n  {%+ if x %}"), "a\n  ");
  EXPECT_EQ(Texts("{% if x +%}\nb"), "\nb");
  // Comments vanish; raw blocks are text.
  EXPECT_EQ(Texts("a{# {{ x }} #}b"), "a|b");
  EXPECT_EQ(Texts("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(Texts("{%- raw -%}  x  {%- endraw -%}"), "x");
  EXPECT_EQ(Texts("{% raw %}a{% endraw %}\nb"), "a|b");
}

TEST(JinjaLexerTest, Errors) {
  struct Case {
    std::string source;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"{{ x", "1:1: '{{' is never closed with '}}'"},
      {"{% if", "1:1: '{%' is never closed with '%}'"},
      {"{# x", "1:1: comment '{#' is never closed"},
      {"{% raw %}x", "1:1: '{% raw %}' is never closed"},
      {"{% raw %}{% endraw x %}", "1:10: expected '%}' after 'endraw'"},
      {"{{ 'x }}", "1:4: string literal is never closed"},
      {"{{ ) }}", "1:4: unexpected ')'"},
      {"{{ [1) }}", "unexpected ')', expected ']' to close the bracket at 1:4"},
      {"{{ $ }}", "1:4: unexpected character '$'"},
      {"{{ 0x }}", "1:4: malformed number literal"},
      {"{{ 99999999999999999999 }}", "integer literal is too large"},
      {"{{ '\\xZZ' }}", "1:5: malformed \\x escape"},
      {"{{ '\\U00110000' }}", "not a Unicode scalar value"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.source);
    SourceMap map(NormalizeSource(c.source));
    auto tokens = Lex(map);
    ASSERT_FALSE(tokens.ok());
    EXPECT_EQ(tokens.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(tokens.status().message().find(c.want), std::string::npos) << tokens.status();
  }
}

}  // namespace
}  // namespace sovai::model::jinja
