#include "model/jinja_lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <limits>

#include "model/jinja_strings.h"

namespace sovai::model::jinja {

std::string NormalizeSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

SourceMap::SourceMap(std::string source) : source_(std::move(source)) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < source_.size(); ++i) {
    if (source_[i] == '\n') line_starts_.push_back(static_cast<uint32_t>(i + 1));
  }
}

std::string SourceMap::Describe(uint32_t offset) const {
  offset = std::min<uint32_t>(offset, static_cast<uint32_t>(source_.size()));
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  size_t line = static_cast<size_t>(it - line_starts_.begin());
  uint32_t line_start = *(it - 1);
  size_t column =
      CodePointCount(std::string_view(source_).substr(line_start, offset - line_start)) + 1;
  return std::to_string(line) + ":" + std::to_string(column);
}

std::string_view TokenKindName(TokenKind kind) {
  switch (kind) {
    case TokenKind::kText:
      return "template text";
    case TokenKind::kVarBegin:
      return "'{{'";
    case TokenKind::kVarEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kName:
      return "name";
    case TokenKind::kString:
      return "string";
    case TokenKind::kInt:
      return "integer";
    case TokenKind::kFloat:
      return "float";
    case TokenKind::kOperator:
      return "operator";
    case TokenKind::kEnd:
      return "end of template";
  }
  return "?";
}

namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Operators of Jinja's lexer, longest first.
constexpr std::string_view kOperators[] = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
    "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";",
};

class Lexer {
 public:
  Lexer(const SourceMap& map, const LexOptions& options)
      : map_(map), src_(map.source()), options_(options) {}

  base::Result<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      size_t p = FindOpener(pos);
      std::string text(src_.substr(pos, p - pos));
      if (p == n) {
        EmitText(std::move(text), pos);
        break;
      }
      const char kind = src_[p + 1];
      const char mod = p + 2 < n ? src_[p + 2] : '\0';
      const bool has_mod = mod == '-' || mod == '+';
      const size_t after_open = p + 2 + (has_mod ? 1 : 0);
      size_t raw_content_start = 0;
      const bool raw = kind == '%' && MatchRawBegin(after_open, &raw_content_start);

      if (mod == '-') {
        text = PyStrip(text, StripSide::kRight);
      } else if (mod != '+' && options_.lstrip_blocks && kind != '{') {
        size_t l = text.rfind('\n');
        l = l == std::string::npos ? 0 : l + 1;
        if ((l > 0 || line_starting) && AllSpace(std::string_view(text).substr(l))) {
          text.resize(l);
        }
      }
      EmitText(std::move(text), pos);

      if (kind == '#') {
        SOVAI_ASSIGN_OR_RETURN(pos, SkipComment(p, after_open));
      } else if (raw) {
        SOVAI_ASSIGN_OR_RETURN(pos, LexRaw(p, raw_content_start));
      } else {
        SOVAI_ASSIGN_OR_RETURN(pos, LexTag(p, kind, after_open));
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Token end;
    end.kind = TokenKind::kEnd;
    end.offset = static_cast<uint32_t>(n);
    tokens_.push_back(std::move(end));
    return std::move(tokens_);
  }

 private:
  base::Status Error(size_t offset, const std::string& what) const {
    return base::InvalidArgumentError("template syntax error at " +
                                      map_.Describe(static_cast<uint32_t>(offset)) + ": " + what);
  }

  size_t FindOpener(size_t from) const {
    size_t i = from;
    while (true) {
      i = src_.find('{', i);
      if (i == std::string_view::npos || i + 1 >= src_.size()) return src_.size();
      char c = src_[i + 1];
      if (c == '{' || c == '%' || c == '#') return i;
      ++i;
    }
  }

  static bool AllSpace(std::string_view s) {
    for (char32_t cp : DecodeUtf8(s)) {
      if (!IsRegexSpace(cp) || cp == '\n') return false;
    }
    return true;
  }

  size_t SkipSpaces(size_t i) const {
    while (i < src_.size()) {
      if (IsAsciiSpace(src_[i])) {
        ++i;
        continue;
      }
      // Non-ASCII whitespace (U+00A0, U+3000, ...) counts too, as in Python's `\s`.
      if (static_cast<unsigned char>(src_[i]) >= 0x80) {
        size_t next = i;
        if (IsRegexSpace(base::NextUtf8CodePointOrReplacement(src_, &next))) {
          i = next;
          continue;
        }
      }
      break;
    }
    return i;
  }

  size_t SkipAllWhitespaceAfter(size_t i) const { return SkipSpaces(i); }

  // After a closing `%}` or `#}` without modifier: trim_blocks removes one newline.
  size_t TrimBlock(size_t i) const {
    if (options_.trim_blocks && i < src_.size() && src_[i] == '\n') return i + 1;
    return i;
  }

  void EmitText(std::string text, size_t offset) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kText;
    t.offset = static_cast<uint32_t>(offset);
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
  }

  void Emit(TokenKind kind, size_t offset, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.offset = static_cast<uint32_t>(offset);
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
  }

  // `raw` then `%}` or `-%}` after `{%`: sets *content_start.
  bool MatchRawBegin(size_t i, size_t* content_start) const {
    i = SkipSpaces(i);
    if (src_.substr(i, 3) != "raw" || (i + 3 < src_.size() && IsNameChar(src_[i + 3]))) {
      return false;
    }
    i = SkipSpaces(i + 3);
    if (src_.substr(i, 3) == "-%}") {
      *content_start = SkipAllWhitespaceAfter(i + 3);
      return true;
    }
    if (src_.substr(i, 2) == "%}") {
      *content_start = i + 2;
      return true;
    }
    return false;
  }

  base::Result<size_t> SkipComment(size_t open, size_t after_open) {
    size_t q = src_.find("#}", after_open);
    if (q == std::string_view::npos) return Error(open, "comment '{#' is never closed with '#}'");
    if (q > after_open && src_[q - 1] == '-') return SkipAllWhitespaceAfter(q + 2);
    if (q > after_open && src_[q - 1] == '+') return q + 2;
    return TrimBlock(q + 2);
  }

  base::Result<size_t> LexRaw(size_t open, size_t content_start) {
    // The first `{% endraw %}` (with optional modifiers and spaces) ends the raw block.
    size_t search = content_start;
    while (true) {
      size_t q = src_.find("{%", search);
      if (q == std::string_view::npos) {
        return Error(open, "'{% raw %}' is never closed with '{% endraw %}'");
      }
      const char mod = q + 2 < src_.size() ? src_[q + 2] : '\0';
      const bool has_mod = mod == '-' || mod == '+';
      size_t i = SkipSpaces(q + 2 + (has_mod ? 1 : 0));
      if (src_.substr(i, 6) != "endraw" || (i + 6 < src_.size() && IsNameChar(src_[i + 6]))) {
        search = q + 2;
        continue;
      }
      i = SkipSpaces(i + 6);
      size_t after = 0;
      if (src_.substr(i, 3) == "-%}") {
        after = SkipAllWhitespaceAfter(i + 3);
      } else if (src_.substr(i, 3) == "+%}") {
        after = i + 3;
      } else if (src_.substr(i, 2) == "%}") {
        after = TrimBlock(i + 2);
      } else {
        return Error(q, "expected '%}' after 'endraw'");
      }
      std::string text(src_.substr(content_start, q - content_start));
      if (mod == '-') {
        text = PyStrip(text, StripSide::kRight);
      } else if (mod != '+' && options_.lstrip_blocks) {
        size_t l = text.rfind('\n');
        if (l != std::string::npos && AllSpace(std::string_view(text).substr(l + 1))) {
          text.resize(l + 1);
        }
      }
      EmitText(std::move(text), content_start);
      return after;
    }
  }

  base::Result<size_t> LexTag(size_t open, char kind, size_t after_open) {
    const bool block = kind == '%';
    Emit(block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, open);
    std::vector<std::pair<char, size_t>> brackets;  // open brackets and their offsets
    size_t i = after_open;
    const size_t n = src_.size();
    while (true) {
      i = SkipSpaces(i);
      if (i >= n) {
        return Error(open, std::string(block ? "'{%'" : "'{{'") + " is never closed with " +
                               (block ? "'%}'" : "'}}'"));
      }
      if (brackets.empty()) {
        std::string_view rest = src_.substr(i);
        if (block) {
          if (rest.substr(0, 3) == "-%}") {
            Emit(TokenKind::kBlockEnd, i);
            return SkipAllWhitespaceAfter(i + 3);
          }
          if (rest.substr(0, 3) == "+%}") {
            Emit(TokenKind::kBlockEnd, i);
            return i + 3;
          }
          if (rest.substr(0, 2) == "%}") {
            Emit(TokenKind::kBlockEnd, i);
            return TrimBlock(i + 2);
          }
        } else {
          if (rest.substr(0, 3) == "-}}") {
            Emit(TokenKind::kVarEnd, i);
            return SkipAllWhitespaceAfter(i + 3);
          }
          if (rest.substr(0, 2) == "}}") {
            Emit(TokenKind::kVarEnd, i);
            return i + 2;
          }
        }
      }
      const char c = src_[i];
      if (IsDigit(c)) {
        SOVAI_ASSIGN_OR_RETURN(i, LexNumber(i));
        continue;
      }
      if (IsNameStart(c)) {
        size_t j = i;
        while (j < n && IsNameChar(src_[j])) ++j;
        Emit(TokenKind::kName, i, std::string(src_.substr(i, j - i)));
        i = j;
        continue;
      }
      if (c == '\'' || c == '"') {
        SOVAI_ASSIGN_OR_RETURN(i, LexString(i));
        continue;
      }
      bool matched = false;
      for (std::string_view op : kOperators) {
        if (src_.substr(i, op.size()) != op) continue;
        matched = true;
        if (op == "(" || op == "[" || op == "{") {
          brackets.emplace_back(op[0], i);
        } else if (op == ")" || op == "]" || op == "}") {
          const char want = op == ")" ? '(' : op == "]" ? '[' : '{';
          if (brackets.empty()) return Error(i, "unexpected '" + std::string(op) + "'");
          if (brackets.back().first != want) {
            const char close = brackets.back().first == '('   ? ')'
                               : brackets.back().first == '[' ? ']'
                                                              : '}';
            return Error(i, "unexpected '" + std::string(op) + "', expected '" +
                                std::string(1, close) + "' to close the bracket at " +
                                map_.Describe(static_cast<uint32_t>(brackets.back().second)));
          }
          brackets.pop_back();
        }
        Emit(TokenKind::kOperator, i, std::string(op));
        i += op.size();
        break;
      }
      if (matched) continue;
      if (static_cast<unsigned char>(c) >= 0x80) {
        size_t next = i;
        base::NextUtf8CodePoint(src_, &next);
        return Error(i, "unexpected character '" + std::string(src_.substr(i, next - i)) + "'");
      }
      return Error(i, "unexpected character '" + std::string(1, c) + "'");
    }
  }

  // Digits with optional single underscores between them, in the given base.
  static bool IsBaseDigit(char c, int base) {
    if (base == 2) return c == '0' || c == '1';
    if (base == 8) return c >= '0' && c <= '7';
    if (base == 10) return IsDigit(c);
    return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }
  size_t ScanDigits(size_t i, int base, std::string* digits) const {
    while (i < src_.size()) {
      if (IsBaseDigit(src_[i], base)) {
        digits->push_back(src_[i++]);
      } else if (src_[i] == '_' && i + 1 < src_.size() && IsBaseDigit(src_[i + 1], base) &&
                 !digits->empty()) {
        ++i;
      } else {
        break;
      }
    }
    return i;
  }

  base::Result<size_t> LexNumber(size_t start) {
    const size_t n = src_.size();
    if (src_[start] == '0' && start + 1 < n) {
      const char p = static_cast<char>(src_[start + 1] | 0x20);
      const int base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (base != 0) {
        std::string digits;
        size_t i = start + 2;
        if (i < n && src_[i] == '_') ++i;
        i = ScanDigits(i, base, &digits);
        if (digits.empty()) return Error(start, "malformed number literal");
        int64_t v = 0;
        auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
        if (r.ec != std::errc()) return Error(start, "integer literal is too large");
        Token t;
        t.kind = TokenKind::kInt;
        t.offset = static_cast<uint32_t>(start);
        t.int_value = v;
        tokens_.push_back(std::move(t));
        return i;
      }
    }
    std::string digits;
    size_t i = ScanDigits(start, 10, &digits);
    bool is_float = false;
    std::string text = digits;
    // A fraction needs digits after the dot; and `x.0.1` is attribute access, not a float
    // (Jinja's float rule does not match right after a dot).
    const bool after_dot = start > 0 && src_[start - 1] == '.';
    if (!after_dot && i + 1 < n && src_[i] == '.' && IsDigit(src_[i + 1])) {
      std::string frac;
      i = ScanDigits(i + 1, 10, &frac);
      text += "." + frac;
      is_float = true;
    }
    if (!after_dot && i < n && (src_[i] == 'e' || src_[i] == 'E')) {
      size_t j = i + 1;
      std::string exp;
      if (j < n && (src_[j] == '+' || src_[j] == '-')) exp += src_[j++];
      std::string exp_digits;
      size_t k = ScanDigits(j, 10, &exp_digits);
      if (!exp_digits.empty()) {
        text += "e" + exp + exp_digits;
        is_float = true;
        i = k;
      }
    }
    Token t;
    t.offset = static_cast<uint32_t>(start);
    if (is_float) {
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.kind = TokenKind::kInt;
      auto r = std::from_chars(digits.data(), digits.data() + digits.size(), t.int_value);
      if (r.ec != std::errc()) return Error(start, "integer literal is too large");
    }
    tokens_.push_back(std::move(t));
    return i;
  }

  base::Result<size_t> LexString(size_t start) {
    const char quote = src_[start];
    const size_t n = src_.size();
    std::string value;
    size_t i = start + 1;
    while (true) {
      if (i >= n) return Error(start, "string literal is never closed");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= n) return Error(start, "string literal is never closed");
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n':
          break;  // a backslash before a newline joins the lines
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'v':
          value += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          std::string_view hex = src_.substr(i, len);
          auto r = std::from_chars(hex.data(), hex.data() + hex.size(), cp, 16);
          if (hex.size() != len || r.ptr != hex.data() + hex.size() || r.ec != std::errc()) {
            return Error(i - 2, std::string("malformed \\") + e + " escape in string literal");
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return Error(i - 2, "escape in string literal is not a Unicode scalar value");
          }
          base::AppendUtf8(&value, static_cast<char32_t>(cp));
          i += len;
          break;
        }
        case 'N':
          return Error(i - 2, "\\N{...} escapes are not supported in chat templates");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < n && src_[i] >= '0' && src_[i] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[i++] - '0');
            }
            base::AppendUtf8(&value, static_cast<char32_t>(cp));
          } else {
            // Python keeps unknown escapes as they are.
            value += '\\';
            i -= 1;
          }
      }
    }
    Token t;
    t.kind = TokenKind::kString;
    t.offset = static_cast<uint32_t>(start);
    t.text = std::move(value);
    tokens_.push_back(std::move(t));
    return i + 1;
  }

  const SourceMap& map_;
  std::string_view src_;
  LexOptions options_;
  std::vector<Token> tokens_;
};

}  // namespace

base::Result<std::vector<Token>> Lex(const SourceMap& map, const LexOptions& options) {
  return Lexer(map, options).Run();
}

}  // namespace sovai::model::jinja
