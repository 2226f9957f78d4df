#include "model/tokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdio>

#include "model/tokenizer_limits.h"
#include "model/tokenizer_unicode.h"

namespace sovai::model {
namespace {

// JavaScript's `\s` as the inside of a PCRE2 character class (see unicode::IsJsWhitespace).
constexpr std::string_view kJsWhitespaceItems =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}\\x{FEFF}";

// The rewrites transformers.js applies before `new RegExp` (PROBLEMATIC_REGEX_MAP): inline flag
// groups are not JavaScript, so Llama 3's case-insensitive contractions become explicit ASCII
// alternatives (which also means no Unicode case folding: 'ſ' is not 's'), and BLOOM's pattern
// gets its intended meaning.
constexpr std::array<std::pair<std::string_view, std::string_view>, 2> kJsRewrites = {{
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))"},
    {" ?[^(\\s|[.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C])]"
     "+",
     " ?[^\\s.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C]+"},
}};

std::string ReplaceAll(std::string text, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = text.find(from, pos)) != std::string::npos) {
    text.replace(pos, from.size(), to);
    pos += to.size();
  }
  return text;
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

char32_t HexValue(char c) {
  if (c >= '0' && c <= '9') return static_cast<char32_t>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<char32_t>(c - 'a' + 10);
  return static_cast<char32_t>(c - 'A' + 10);
}

std::string HexCodePoint(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\x{%X}", static_cast<unsigned>(cp));
  return buf;
}

// Per-thread PCRE2 match state: match data (only group 0 is read), a match context with the
// backtracking limits, and a JIT stack that can grow to kMaxRegexJitStackBytes.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 << 10, kMaxRegexJitStackBytes, nullptr);
    if (context != nullptr) {
      pcre2_set_match_limit(context, kRegexMatchLimit);
      pcre2_set_depth_limit(context, kRegexDepthLimit);
      pcre2_set_heap_limit(context, 256u << 10);  // KiB: 256 MiB for the interpreter
      if (jit_stack != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& ThreadMatchState() {
  thread_local MatchState state;
  return state;
}

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof(buf));
  if (n < 0) return "PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::unique_ptr<Code> code, std::string compiled_pattern)
    : code_(std::move(code)), compiled_pattern_(std::move(compiled_pattern)) {}
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

base::Result<std::string> Regex::TranslateJsPattern(std::string_view pattern) {
  if (pattern.size() > kMaxPatternBytes) {
    return base::ResourceExhaustedError("regex pattern is " + std::to_string(pattern.size()) +
                                        " bytes; the limit is " + std::to_string(kMaxPatternBytes));
  }
  SOVAI_RETURN_IF_ERROR(unicode::ValidateUtf8(pattern, "regex pattern"));
  // transformers.js: pattern.replace(/\\([#&~])/g, "$1"), then the rewrites.
  std::string js;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size() &&
        (pattern[i + 1] == '#' || pattern[i + 1] == '&' || pattern[i + 1] == '~')) {
      js.push_back(pattern[++i]);
    } else {
      js.push_back(pattern[i]);
    }
  }
  for (const auto& [from, to] : kJsRewrites) js = ReplaceAll(std::move(js), from, to);

  std::string out;
  bool in_class = false;
  size_t i = 0;
  const size_t n = js.size();
  auto unsupported = [&](std::string_view what) {
    return base::UnimplementedError("regex pattern '" + std::string(pattern) + "' uses " +
                                    std::string(what) + ", which is not supported");
  };
  while (i < n) {
    char c = js[i];
    if (c == '\\') {
      if (i + 1 >= n) {
        return base::InvalidArgumentError("regex pattern '" + std::string(pattern) +
                                          "' ends with a lone backslash");
      }
      char e = js[i + 1];
      if (e == 's') {
        if (in_class) {
          out += kJsWhitespaceItems;
        } else {
          out += "[";
          out += kJsWhitespaceItems;
          out += "]";
        }
        i += 2;
      } else if (e == 'S') {
        if (in_class) return unsupported("\\S inside a character class");
        out += "[^";
        out += kJsWhitespaceItems;
        out += "]";
        i += 2;
      } else if (e == 'u') {
        // \uXXXX (a UTF-16 unit; a surrogate pair becomes one code point) or \u{X...}.
        auto hex4 = [&](size_t at, char32_t* value) {
          if (at + 4 > n) return false;
          char32_t v = 0;
          for (size_t k = at; k < at + 4; ++k) {
            if (!IsHex(js[k])) return false;
            v = v * 16 + HexValue(js[k]);
          }
          *value = v;
          return true;
        };
        char32_t cp = 0;
        if (i + 2 < n && js[i + 2] == '{') {
          size_t close = js.find('}', i + 3);
          if (close == std::string::npos || close == i + 3 || close - (i + 3) > 6) {
            return unsupported("a malformed \\u{...} escape");
          }
          for (size_t k = i + 3; k < close; ++k) {
            if (!IsHex(js[k])) return unsupported("a malformed \\u{...} escape");
            cp = cp * 16 + HexValue(js[k]);
          }
          if (cp > 0x10FFFF) return unsupported("a \\u{...} escape above U+10FFFF");
          out += HexCodePoint(cp);
          i = close + 1;
        } else if (hex4(i + 2, &cp)) {
          char32_t low = 0;
          if (cp >= 0xD800 && cp <= 0xDBFF && i + 7 < n && js[i + 6] == '\\' && js[i + 7] == 'u' &&
              hex4(i + 8, &low) && low >= 0xDC00 && low <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            i += 12;
          } else {
            if (cp >= 0xD800 && cp <= 0xDFFF) return unsupported("a lone surrogate escape");
            i += 6;
          }
          out += HexCodePoint(cp);
        } else {
          return unsupported("a malformed \\u escape");
        }
      } else {
        out.push_back(c);
        out.push_back(e);
        i += 2;
      }
      continue;
    }
    if (in_class) {
      if (c == ']') {
        in_class = false;
        out.push_back(c);
      } else if (c == '[') {
        out += "\\[";  // literal in JavaScript; PCRE2 would read "[:" as a POSIX class
      } else {
        out.push_back(c);
      }
      ++i;
      continue;
    }
    if (c == '[') {
      size_t after = i + 1;
      if (after < n && js[after] == '^') ++after;
      if (after < n && js[after] == ']') return unsupported("an empty character class");
      in_class = true;
      out.append(js, i, after - i);
      i = after;
      continue;
    }
    if (c == '.') {
      out += "[^\\n\\r\\x{2028}\\x{2029}]";
      ++i;
      continue;
    }
    out.push_back(c);
    ++i;
  }
  return out;
}

namespace {

base::Result<std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)>> CompilePcre2(
    const std::string& compiled, std::string_view original) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                    PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return base::InvalidArgumentError("regex pattern '" + std::string(original) +
                                      "' does not compile: " + Pcre2Message(error_code) +
                                      " (at offset " + std::to_string(error_offset) +
                                      " of the translated pattern '" + compiled + "')");
  }
  // Without JIT (an unsupported CPU) the interpreter gives the same results, only slower.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)>(code, &pcre2_code_free);
}

}  // namespace

base::Result<Regex> Regex::FromJsPattern(std::string_view pattern) {
  SOVAI_ASSIGN_OR_RETURN(std::string compiled, TranslateJsPattern(pattern));
  SOVAI_ASSIGN_OR_RETURN(auto pcre, CompilePcre2(compiled, pattern));
  auto code = std::make_unique<Code>();
  code->code = pcre.release();
  return Regex(std::move(code), std::move(compiled));
}

base::Result<Regex> Regex::FromLiteral(std::string_view literal) {
  if (literal.size() > kMaxPatternBytes) {
    return base::ResourceExhaustedError("string pattern is " + std::to_string(literal.size()) +
                                        " bytes; the limit is " + std::to_string(kMaxPatternBytes));
  }
  SOVAI_RETURN_IF_ERROR(unicode::ValidateUtf8(literal, "string pattern"));
  // \Q...\E quotes everything but "\E" itself, which is spelled \E\\E\Q.
  std::string compiled = "\\Q" + ReplaceAll(std::string(literal), "\\E", "\\E\\\\E\\Q") + "\\E";
  SOVAI_ASSIGN_OR_RETURN(auto pcre, CompilePcre2(compiled, literal));
  auto code = std::make_unique<Code>();
  code->code = pcre.release();
  return Regex(std::move(code), std::move(compiled));
}

base::Status Regex::FindAll(std::string_view text, std::vector<RegexMatch>* out) const {
  MatchState& state = ThreadMatchState();
  if (state.data == nullptr || state.context == nullptr) {
    return base::ResourceExhaustedError("out of memory for regex match data");
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t start = 0;
  while (start <= n) {
    // The text is valid UTF-8 (checked once by the caller): skipping PCRE2's check, which would
    // rescan the whole subject on every call, keeps this linear.
    int rc =
        pcre2_match(code_->code, subject, n, start, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
          rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT ||
          rc == PCRE2_ERROR_NOMEMORY) {
        return base::ResourceExhaustedError("regex '" + compiled_pattern_ +
                                            "' hit a backtracking limit at byte " +
                                            std::to_string(start) + ": " + Pcre2Message(rc));
      }
      return base::InternalError("regex match failed at byte " + std::to_string(start) + ": " +
                                 Pcre2Message(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    size_t begin = ovector[0];
    size_t end = ovector[1];
    if (end < begin || begin < start || end > n) {
      // Only \K inside a lookaround can do this.
      return base::UnimplementedError("regex '" + compiled_pattern_ +
                                      "' produced a match that ends before it starts (\\K?)");
    }
    out->push_back({begin, end});
    if (end > begin) {
      start = end;
    } else {
      if (begin >= n) break;
      size_t next = begin;
      unicode::NextCodePoint(text, &next);
      start = next;
    }
  }
  return base::Status::Ok();
}

}  // namespace sovai::model
