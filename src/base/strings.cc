#include "base/strings.h"

#include <cstdio>
#include <limits>

#include "base/utf8.h"

namespace sovai::base {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

char ToLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
char ToUpper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Quoted(std::string_view s) {
  constexpr size_t kMaxQuoted = 64;
  std::string out = "'";
  out.append(s.substr(0, kMaxQuoted));
  if (s.size() > kMaxQuoted) out += "...";
  out += "'";
  return out;
}

template <typename Parts>
std::string JoinImpl(const Parts& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out.append(sep);
    out.append(parts[i]);
  }
  return out;
}

}  // namespace

std::vector<std::string_view> Split(std::string_view s, char sep, bool skip_empty) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    std::string_view piece = s.substr(start, pos == std::string_view::npos ? s.npos : pos - start);
    if (!skip_empty || !piece.empty()) out.push_back(piece);
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  return JoinImpl(parts, sep);
}
std::string Join(const std::vector<std::string_view>& parts, std::string_view sep) {
  return JoinImpl(parts, sep);
}

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && IsAsciiSpace(s.front())) s.remove_prefix(1);
  return s;
}
std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && IsAsciiSpace(s.back())) s.remove_suffix(1);
  return s;
}
std::string_view Trim(std::string_view s) { return TrimRight(TrimLeft(s)); }

std::string AsciiToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ToLower(c);
  return out;
}
std::string AsciiToUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ToUpper(c);
  return out;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ToLower(a[i]) != ToLower(b[i])) return false;
  }
  return true;
}

Result<std::string> PercentDecode(std::string_view s, bool plus_as_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      int hi = i + 1 < s.size() ? HexValue(s[i + 1]) : -1;
      int lo = i + 2 < s.size() ? HexValue(s[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return InvalidArgumentError("bad percent-escape at offset " + std::to_string(i) + " in " +
                                    Quoted(s) + ": '%' must be followed by two hex digits");
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_as_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string UriEncode(std::string_view s, bool encode_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved || (c == '/' && !encode_slash)) {
      out.push_back(c);
    } else {
      auto b = static_cast<unsigned char>(c);
      out.push_back('%');
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 0xF]);
    }
  }
  return out;
}

Result<uint64_t> ParseUint64(std::string_view s) {
  if (s.empty()) return InvalidArgumentError("expected an unsigned integer, got an empty string");
  uint64_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') {
      return InvalidArgumentError("expected an unsigned integer, got " + Quoted(s));
    }
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      return InvalidArgumentError("integer " + Quoted(s) + " is too large (max 2^64-1)");
    }
    value = value * 10 + digit;
  }
  return value;
}

Result<int64_t> ParseInt64(std::string_view s) {
  bool negative = !s.empty() && s.front() == '-';
  std::string_view digits = negative ? s.substr(1) : s;
  if (digits.empty()) return InvalidArgumentError("expected an integer, got " + Quoted(s));
  for (char c : digits) {
    if (c < '0' || c > '9') return InvalidArgumentError("expected an integer, got " + Quoted(s));
  }
  Result<uint64_t> magnitude = ParseUint64(digits);
  constexpr uint64_t kMaxPositive = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!magnitude.ok() || *magnitude > kMaxPositive + (negative ? 1 : 0)) {
    return InvalidArgumentError("integer " + Quoted(s) + " is out of the 64-bit signed range");
  }
  if (negative) return static_cast<int64_t>(0 - *magnitude);  // wraps correctly for INT64_MIN
  return static_cast<int64_t>(*magnitude);
}

void AppendJsonQuoted(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->reserve(out->size() + s.size() + 2);
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t len = Utf8CharLength(s, i);
      if (len == 0) {
        out->append("\\ufffd");
        i += 1;
      } else {
        out->append(s.substr(i, len));
        i += len;
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xF]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out->push_back('"');
}

std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string JsonQuote(std::string_view s) {
  std::string out;
  AppendJsonQuoted(&out, s);
  return out;
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", value, kUnits[unit]);
  return buf;
}

}  // namespace sovai::base
