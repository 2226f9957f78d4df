#include "model/tokenizer_unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>
#include <memory>

namespace sovai::model::unicode {
namespace {

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
  std::string out = base::Utf8Lossy(bytes);
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
