#include "model/jinja_strings.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <system_error>

namespace sovai::model::jinja {

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(base::NextUtf8CodePointOrReplacement(s, &i));
  return out;
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) base::AppendUtf8(&out, cp);
  return out;
}

bool IsPySpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool IsRegexSpace(char32_t cp) { return IsPySpace(cp); }

namespace {

// Pairs of code points where the even one is upper case and the odd one lower case.
bool InEvenUpperRange(char32_t cp) {
  return (cp >= 0x0100 && cp <= 0x012F) || (cp >= 0x0132 && cp <= 0x0137) ||
         (cp >= 0x014A && cp <= 0x0177) || (cp >= 0x0460 && cp <= 0x0481) ||
         (cp >= 0x048A && cp <= 0x04BF) || (cp >= 0x04D0 && cp <= 0x04FF);
}
// Pairs where the odd one is upper case.
bool InOddUpperRange(char32_t cp) {
  return (cp >= 0x0139 && cp <= 0x0148) || (cp >= 0x0179 && cp <= 0x017E) ||
         (cp >= 0x04C1 && cp <= 0x04CE);
}

}  // namespace

char32_t ToUpper(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 0x20;
  if (cp == 0xFF) return 0x178;
  if (InEvenUpperRange(cp)) return (cp % 2 == 1) ? cp - 1 : cp;
  if (InOddUpperRange(cp)) return (cp % 2 == 0) ? cp - 1 : cp;
  if (cp >= 0x03B1 && cp <= 0x03C9) return cp == 0x03C2 ? 0x03A3 : cp - 0x20;
  if (cp == 0x03AC) return 0x0386;
  if (cp >= 0x03AD && cp <= 0x03AF) return cp - 0x25;
  if (cp == 0x03CC) return 0x038C;
  if (cp == 0x03CD || cp == 0x03CE) return cp - 0x3F;
  if (cp >= 0x0430 && cp <= 0x044F) return cp - 0x20;
  if (cp >= 0x0450 && cp <= 0x045F) return cp - 0x50;
  return cp;
}

char32_t ToLower(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 0x20;
  if (cp == 0x178) return 0xFF;
  if (InEvenUpperRange(cp)) return (cp % 2 == 0) ? cp + 1 : cp;
  if (InOddUpperRange(cp)) return (cp % 2 == 1) ? cp + 1 : cp;
  if (cp >= 0x0391 && cp <= 0x03A9 && cp != 0x03A2) return cp + 0x20;
  if (cp == 0x0386) return 0x03AC;
  if (cp >= 0x0388 && cp <= 0x038A) return cp + 0x25;
  if (cp == 0x038C) return 0x03CC;
  if (cp == 0x038E || cp == 0x038F) return cp + 0x3F;
  if (cp >= 0x0410 && cp <= 0x042F) return cp + 0x20;
  if (cp >= 0x0400 && cp <= 0x040F) return cp + 0x50;
  return cp;
}

bool IsCased(char32_t cp) { return ToUpper(cp) != cp || ToLower(cp) != cp; }

bool IsAlphaApprox(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (IsCased(cp)) return true;
  if (IsPySpace(cp) || cp < 0xC0 || cp == 0xD7 || cp == 0xF7) return false;
  if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) ||
      (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF20) ||
      (cp >= 0x1F000 && cp <= 0x1FAFF)) {
    return false;
  }
  return true;
}

namespace {

template <typename F>
std::string MapCodePoints(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) base::AppendUtf8(&out, f(base::NextUtf8CodePointOrReplacement(s, &i)));
  return out;
}

}  // namespace

std::string PyUpper(std::string_view s) { return MapCodePoints(s, ToUpper); }
std::string PyLower(std::string_view s) { return MapCodePoints(s, ToLower); }

std::string PySwapCase(std::string_view s) {
  return MapCodePoints(s, [](char32_t cp) {
    char32_t up = ToUpper(cp);
    return up != cp ? up : ToLower(cp);
  });
}

std::string PyTitle(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool previous_is_cased = false;
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = base::NextUtf8CodePointOrReplacement(s, &i);
    base::AppendUtf8(&out, previous_is_cased ? ToLower(cp) : ToUpper(cp));
    previous_is_cased = IsCased(cp);
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  bool first = true;
  while (i < s.size()) {
    char32_t cp = base::NextUtf8CodePointOrReplacement(s, &i);
    base::AppendUtf8(&out, first ? ToUpper(cp) : ToLower(cp));
    first = false;
  }
  return out;
}

std::string PyStrip(std::string_view s, StripSide side, const std::optional<std::string>& chars) {
  std::u32string strip_set;
  if (chars) strip_set = DecodeUtf8(*chars);
  auto strip = [&](char32_t cp) {
    return chars ? strip_set.find(cp) != std::u32string::npos : IsPySpace(cp);
  };
  std::u32string cps = DecodeUtf8(s);
  size_t begin = 0;
  size_t end = cps.size();
  if (side != StripSide::kRight) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (side != StripSide::kLeft) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  return EncodeUtf8(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit) {
  std::vector<std::string> out;
  int64_t remaining = maxsplit < 0 ? std::numeric_limits<int64_t>::max() : maxsplit;
  if (!sep) {
    std::u32string cps = DecodeUtf8(s);
    const size_t n = cps.size();
    size_t i = 0;
    while (remaining-- > 0) {
      while (i < n && IsPySpace(cps[i])) ++i;
      if (i == n) break;
      size_t j = i++;
      while (i < n && !IsPySpace(cps[i])) ++i;
      out.push_back(EncodeUtf8(std::u32string_view(cps).substr(j, i - j)));
    }
    if (i < n) {
      while (i < n && IsPySpace(cps[i])) ++i;
      if (i != n) out.push_back(EncodeUtf8(std::u32string_view(cps).substr(i)));
    }
    return out;
  }
  size_t i = 0;
  while (remaining-- > 0) {
    size_t pos = s.find(*sep, i);
    if (pos == std::string_view::npos) break;
    out.emplace_back(s.substr(i, pos - i));
    i = pos + sep->size();
  }
  out.emplace_back(s.substr(i));
  return out;
}

std::vector<std::string> PyRSplit(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> out;
  int64_t remaining = maxsplit < 0 ? std::numeric_limits<int64_t>::max() : maxsplit;
  if (!sep) {
    std::u32string cps = DecodeUtf8(s);
    // Indices are one past the position they stand for, so that 0 means "before the start".
    size_t i = cps.size();
    while (remaining-- > 0) {
      while (i > 0 && IsPySpace(cps[i - 1])) --i;
      if (i == 0) break;
      size_t j = i--;
      while (i > 0 && !IsPySpace(cps[i - 1])) --i;
      out.push_back(EncodeUtf8(std::u32string_view(cps).substr(i, j - i)));
    }
    if (i > 0) {
      while (i > 0 && IsPySpace(cps[i - 1])) --i;
      if (i > 0) out.push_back(EncodeUtf8(std::u32string_view(cps).substr(0, i)));
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  size_t end = s.size();
  while (remaining-- > 0 && end >= sep->size()) {
    size_t pos = s.substr(0, end).rfind(*sep);
    if (pos == std::string_view::npos) break;
    out.emplace_back(s.substr(pos + sep->size(), end - pos - sep->size()));
    end = pos;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> PySplitLines(std::string_view s) {
  std::vector<std::string> out;
  std::u32string cps = DecodeUtf8(s);
  const size_t n = cps.size();
  size_t start = 0;
  size_t i = 0;
  while (i < n) {
    char32_t c = cps[i];
    bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                    c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) {
      ++i;
      continue;
    }
    out.push_back(EncodeUtf8(std::u32string_view(cps).substr(start, i - start)));
    if (c == '\r' && i + 1 < n && cps[i + 1] == '\n') ++i;
    ++i;
    start = i;
  }
  if (start < n) out.push_back(EncodeUtf8(std::u32string_view(cps).substr(start)));
  return out;
}

std::string PyReplace(std::string_view s, std::string_view old_text, std::string_view new_text,
                      int64_t count) {
  int64_t remaining = count < 0 ? std::numeric_limits<int64_t>::max() : count;
  std::string out;
  if (old_text.empty()) {
    size_t i = 0;
    if (remaining > 0) {
      out.append(new_text);
      --remaining;
    }
    while (i < s.size()) {
      size_t start = i;
      base::NextUtf8CodePointOrReplacement(s, &i);
      out.append(s.substr(start, i - start));
      if (remaining > 0) {
        out.append(new_text);
        --remaining;
      }
    }
    return out;
  }
  size_t i = 0;
  while (remaining > 0) {
    size_t pos = s.find(old_text, i);
    if (pos == std::string_view::npos) break;
    out.append(s.substr(i, pos - i));
    out.append(new_text);
    i = pos + old_text.size();
    --remaining;
  }
  out.append(s.substr(i));
  return out;
}

SliceBounds ResolveSlice(std::optional<int64_t> start, std::optional<int64_t> stop,
                         std::optional<int64_t> step, int64_t length) {
  SliceBounds b;
  b.step = step.value_or(1);
  // -INT64_MIN overflows; no sequence is long enough for the difference to matter.
  if (b.step < -std::numeric_limits<int64_t>::max()) b.step = -std::numeric_limits<int64_t>::max();
  const bool backwards = b.step < 0;
  auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) {
      x += length;
      if (x < 0) x = backwards ? -1 : 0;
    } else if (x >= length) {
      x = backwards ? length - 1 : length;
    }
    return x;
  };
  b.start = adjust(start, backwards ? length - 1 : 0);
  b.stop = adjust(stop, backwards ? -1 : length);
  return b;
}

int64_t SliceLength(const SliceBounds& b) {
  if (b.step < 0) {
    return b.stop < b.start ? (b.start - b.stop - 1) / (-b.step) + 1 : 0;
  }
  return b.start < b.stop ? (b.stop - b.start - 1) / b.step + 1 : 0;
}

std::string PyRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    char32_t cp = base::NextUtf8CodePointOrReplacement(s, &i);
    char buf[16];
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == static_cast<char32_t>(quote)) {
      out += '\\';
      out += quote;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp >= 0x100 &&
               (IsPySpace(cp) || (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
                (cp >= 0x2060 && cp <= 0x2064) || cp == 0xFEFF)) {
      // Separators and format characters, which Python's str.isprintable() rejects.
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += quote;
  return out;
}

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  // Shortest round-trip digits in scientific form: "-1.2345e+02".
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (!sci.empty() && sci[0] == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  int exponent = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+' ? 1 : 0), sci.data() + sci.size(),
                  exponent);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exponent + 1;  // the value is 0.DIGITS x 10^decpt
  const int ndigits = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= ndigits) {
      out += digits;
      out.append(static_cast<size_t>(decpt - ndigits), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt));
      out += '.';
      out += digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits[0];
  if (ndigits > 1) {
    out += '.';
    out += digits.substr(1);
  }
  std::snprintf(buf, sizeof(buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  out += buf;
  return out;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace sovai::model::jinja
