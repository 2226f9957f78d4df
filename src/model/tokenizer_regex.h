// Regular expressions of tokenizer.json (Split and Replace patterns, the GPT-2 ByteLevel
// pattern), compiled with PCRE2 (UTF, JIT) to behave as JavaScript's `new RegExp(p, "gu")` does
// in the reference implementation (internal to src/model; tokenizer.h is the public API):
//
//  * the pattern is first rewritten as transformers.js rewrites it: `\#`, `\&`, `\~` lose their
//    backslash, and Llama 3's `(?i:'s|'t|'re|'ve|'m|'ll|'d)` becomes its ASCII-only expansion;
//  * `\s` / `\S` mean JavaScript's whitespace set (unicode::IsJsWhitespace), `\d`, `\w`, `\b`
//    stay ASCII (PCRE2 without UCP), `.` excludes JavaScript's line terminators, `$` matches only
//    at the end, `\uXXXX` and `\u{X}` are code points; `\p{...}` are Unicode properties;
//  * all matches are found left to right; after an empty match the search resumes one code point
//    further (String.prototype.matchAll with the `u` flag).
//
// Unicode property data comes from PCRE2 (10.42: Unicode 14), the reference's from V8's ICU, so
// letters assigned in later Unicode versions can classify differently.
//
// Errors: InvalidArgument naming the pattern and PCRE2's message and offset for a pattern that
// does not compile; Unimplemented for JavaScript syntax we do not translate (`\S` inside a
// character class, an empty class `[]`); ResourceExhausted when a match hits the backtracking
// limits of tokenizer_limits.h.
//
// Thread-safety: a compiled Regex is immutable and may be used from many threads at once (each
// thread keeps its own match data and JIT stack).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace sovai::model {

// A match: [begin, end) byte offsets into the searched text.
struct RegexMatch {
  size_t begin = 0;
  size_t end = 0;
};

class Regex {
 public:
  // A pattern as written in tokenizer.json ({"Regex": ...}), read with JavaScript's rules.
  static base::Result<Regex> FromJsPattern(std::string_view pattern);
  // A literal string ({"String": ...}).
  static base::Result<Regex> FromLiteral(std::string_view literal);

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Every match in `text` (valid UTF-8), appended to `out` in order.
  base::Status FindAll(std::string_view text, std::vector<RegexMatch>* out) const;

  // The PCRE2 pattern that was compiled (after translation), for tests and error messages.
  const std::string& compiled_pattern() const { return compiled_pattern_; }

  // Exposed for tests: the translation of a JavaScript pattern into PCRE2 syntax.
  static base::Result<std::string> TranslateJsPattern(std::string_view pattern);

 private:
  struct Code;
  Regex(std::unique_ptr<Code> code, std::string compiled_pattern);
  std::unique_ptr<Code> code_;
  std::string compiled_pattern_;
};

}  // namespace sovai::model
