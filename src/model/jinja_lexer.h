// The lexer of the chat-template interpreter (internal to sovai_model_template).
//
// It turns a template into text and tag tokens the way Jinja 3's lexer does with the options
// transformers' apply_chat_template uses (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False):
//
//  * newlines (\r\n, \r, \n) become \n and one trailing newline is dropped (NormalizeSource);
//  * `{%-` / `{{-` / `{#-` remove all whitespace before the tag, `-%}` / `-}}` / `-#}` all
//    whitespace after it;
//  * lstrip_blocks: spaces and tabs between the start of a line and a `{%` or `{#` tag are
//    removed (not before `{{`); `{%+` keeps them;
//  * trim_blocks: the first newline after `%}` or `#}` is removed; `+%}` keeps it;
//  * comments are dropped, `{% raw %}...{% endraw %}` becomes text.
//
// Inside tags: names, strings (Python escapes: \n \t \xNN \uNNNN \UNNNNNNNN, octal, ...),
// integers (decimal, 0x, 0o, 0b, `_` separators), floats (with exponents) and the operators
// of Jinja. `}}` and `%}` only close a tag when brackets are balanced, so `{{ {'a': {}} }}` works.
//
// Errors (InvalidArgument) name the problem and the position as line:column (1-based; columns
// count code points): unclosed tags, comments, strings and raw blocks, unexpected characters,
// unbalanced brackets, malformed escapes and numbers.
//
// Thread-safety: pure functions; SourceMap is immutable after construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sovai::model::jinja {

// \r\n and \r become \n; one trailing \n is removed (Jinja's keep_trailing_newline=False).
std::string NormalizeSource(std::string_view source);

// Maps byte offsets of a (normalized) source to "line:column".
class SourceMap {
 public:
  explicit SourceMap(std::string source);
  const std::string& source() const { return source_; }
  // "3:14": 1-based line, 1-based column counted in code points.
  std::string Describe(uint32_t offset) const;

 private:
  std::string source_;
  std::vector<uint32_t> line_starts_;
};

enum class TokenKind : uint8_t {
  kText,        // template data between tags (text)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword (text)
  kString,      // string literal, escapes resolved (text)
  kInt,         // int_value
  kFloat,       // float_value
  kOperator,    // "+", "//", "==", "(", ... (text)
  kEnd,         // end of the template
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  uint32_t offset = 0;  // byte offset of the token in the normalized source
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
};

std::string_view TokenKindName(TokenKind kind);

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Tokens of `map.source()` (already normalized), ending with one kEnd token.
base::Result<std::vector<Token>> Lex(const SourceMap& map, const LexOptions& options = {});

}  // namespace sovai::model::jinja
