#include "model/tokenizer_unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>
#include <memory>

namespace sovai::model::unicode {
namespace {

// Length of the UTF-8 sequence a lead byte announces, and the range its first continuation byte
// must fall in (RFC 3629 table 3-7): this rules out overlongs, surrogates and > U+10FFFF.
struct LeadInfo {
  int length;  // 0: not a valid lead byte
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b >= 0xE1 && b <= 0xEC) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xEE && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

constexpr char32_t kReplacement = 0xFFFD;

struct ByteTables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int16_t, 0x144> to_byte{};
};

ByteTables MakeByteTables() {
  ByteTables t;
  t.to_byte.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    char32_t cp = printable ? static_cast<char32_t>(b) : next++;
    t.to_unicode[b] = cp;
    t.to_byte[cp] = static_cast<int16_t>(b);
  }
  return t;
}

const ByteTables& Tables() {
  static const ByteTables tables = MakeByteTables();
  return tables;
}

}  // namespace

char32_t NextCodePoint(std::string_view text, size_t* pos) {
  size_t i = *pos;
  uint8_t b0 = static_cast<uint8_t>(text[i]);
  if (b0 < 0x80) {
    *pos = i + 1;
    return b0;
  }
  LeadInfo lead = Lead(b0);
  if (lead.length == 0 || i + lead.length > text.size()) {
    *pos = i + 1;
    return kReplacement;
  }
  char32_t cp = b0 & (0x7F >> lead.length);
  for (int k = 1; k < lead.length; ++k) {
    uint8_t b = static_cast<uint8_t>(text[i + k]);
    if ((b & 0xC0) != 0x80) {
      *pos = i + 1;
      return kReplacement;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *pos = i + lead.length;
  return cp;
}

void AppendUtf8(std::string* out, char32_t cp) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = kReplacement;
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

base::Status ValidateUtf8(std::string_view text, std::string_view what) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    uint8_t b0 = static_cast<uint8_t>(text[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    LeadInfo lead = Lead(b0);
    auto fail = [&](std::string_view reason) {
      return base::InvalidArgumentError(std::string(what) + " is not valid UTF-8: " +
                                        std::string(reason) + " at byte " + std::to_string(i));
    };
    if (lead.length == 0) {
      return fail((b0 & 0xC0) == 0x80 ? "unexpected continuation byte" : "invalid lead byte");
    }
    if (i + lead.length > n) return fail("truncated sequence");
    uint8_t b1 = static_cast<uint8_t>(text[i + 1]);
    if (b1 < lead.second_lo || b1 > lead.second_hi) {
      return fail((b1 & 0xC0) != 0x80 ? "missing continuation byte"
                                      : "overlong encoding, surrogate or code point > U+10FFFF");
    }
    for (int k = 2; k < lead.length; ++k) {
      if ((static_cast<uint8_t>(text[i + k]) & 0xC0) != 0x80)
        return fail("missing continuation byte");
    }
    i += lead.length;
  }
  return base::Status::Ok();
}

bool IsJsWhitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x00A0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
    case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string_view TrimStartJs(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsJsWhitespace(NextCodePoint(text, &next))) break;
    pos = next;
  }
  return text.substr(pos);
}

std::string_view TrimEndJs(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    // Step back to the start of the last code point (at most 4 bytes back).
    size_t start = end - 1;
    while (start > 0 && end - start < 4 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) {
      --start;
    }
    size_t next = start;
    char32_t cp = NextCodePoint(text, &next);
    if (next != end || !IsJsWhitespace(cp)) break;
    end = start;
  }
  return text.substr(0, end);
}

std::string DecodeUtf8Lossy(std::string_view bytes, bool strip_bom) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    uint8_t b0 = static_cast<uint8_t>(bytes[i]);
    if (b0 < 0x80) {
      out.push_back(static_cast<char>(b0));
      ++i;
      continue;
    }
    LeadInfo lead = Lead(b0);
    if (lead.length == 0) {
      AppendUtf8(&out, kReplacement);
      ++i;
      continue;
    }
    // WHATWG: consume continuation bytes while they are in range; the first out-of-range byte
    // ends the maximal subpart (one U+FFFD) and is looked at again as a new lead.
    size_t k = 1;
    bool ok = true;
    for (; k < static_cast<size_t>(lead.length); ++k) {
      if (i + k >= n) {
        ok = false;
        break;
      }
      uint8_t b = static_cast<uint8_t>(bytes[i + k]);
      uint8_t lo = k == 1 ? lead.second_lo : 0x80;
      uint8_t hi = k == 1 ? lead.second_hi : 0xBF;
      if (b < lo || b > hi) {
        ok = false;
        break;
      }
    }
    if (!ok) {
      AppendUtf8(&out, kReplacement);
      i += k;
      continue;
    }
    out.append(bytes.substr(i, lead.length));
    i += lead.length;
  }
  if (strip_bom && out.starts_with("\xEF\xBB\xBF")) out.erase(0, 3);
  return out;
}

bool IsNormalizationInert(char32_t cp) {
  if (cp < 0x80) return true;
  // Hangul jamo compose and syllables decompose algorithmically (utf8proc's tables do not say).
  if ((cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0xAC00 && cp <= 0xD7A3)) return false;
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  return p->combining_class == 0 && p->decomp_seqindex == UINT16_MAX && p->comb_index == UINT16_MAX;
}

base::Result<std::string> Normalize(std::string_view text, NormalForm form) {
  bool inert = true;
  for (size_t pos = 0; pos < text.size() && inert;) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    inert = IsNormalizationInert(NextCodePoint(text, &pos));
  }
  if (inert) return std::string(text);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* mapped = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                    static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(mapped, &std::free);
  if (n < 0) {
    return base::InternalError(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
  }
  return std::string(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
}

char32_t ByteToUnicode(uint8_t byte) { return Tables().to_unicode[byte]; }

int UnicodeToByte(char32_t cp) {
  if (cp >= Tables().to_byte.size()) return -1;
  return Tables().to_byte[cp];
}

void AppendByteLevel(std::string* out, std::string_view bytes) {
  const auto& table = Tables().to_unicode;
  for (char c : bytes) AppendUtf8(out, table[static_cast<uint8_t>(c)]);
}

}  // namespace sovai::model::unicode
