#include "base/utf8.h"

#include "base/check.h"

namespace sovai::base {
namespace {

// What a lead byte allows (Unicode table 3-7): the length of the character it starts and the
// range its first continuation byte must fall in, which rules out overlongs (E0, F0), surrogates
// (ED) and code points above U+10FFFF (F4). The later continuation bytes are always 80..BF.
struct Lead {
  size_t length;  // 0: the byte starts no well-formed character
  uint8_t second_lo;
  uint8_t second_hi;
};

Lead LeadOf(uint8_t b) {
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

uint8_t ByteAt(std::string_view s, size_t i) { return static_cast<uint8_t>(s[i]); }

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Whether the byte at s[pos + k] (k >= 1) may continue the character `lead` starts.
bool ContinuesAt(std::string_view s, size_t pos, size_t k, const Lead& lead) {
  uint8_t b = ByteAt(s, pos + k);
  return k == 1 ? b >= lead.second_lo && b <= lead.second_hi : IsContinuation(b);
}

// How many bytes a sequence starting with `b` announces by its bit pattern (1 to 4), whether or
// not it can be well-formed; 0 for a continuation byte or F8..FF.
size_t AnnouncedLength(uint8_t b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 0;
}

}  // namespace

size_t Utf8CharLength(std::string_view s, size_t pos) {
  SOVAI_CHECK_LT(pos, s.size());
  Lead lead = LeadOf(ByteAt(s, pos));
  if (lead.length == 0 || s.size() - pos < lead.length) return 0;
  for (size_t k = 1; k < lead.length; ++k) {
    if (!ContinuesAt(s, pos, k, lead)) return 0;
  }
  return lead.length;
}

int32_t NextUtf8CodePoint(std::string_view s, size_t* pos) {
  size_t length = Utf8CharLength(s, *pos);
  if (length == 0) {
    ++*pos;
    return -1;
  }
  uint8_t b0 = ByteAt(s, *pos);
  // The lead byte's payload: 7, 5, 4 or 3 bits; then 6 bits from each continuation byte.
  int32_t cp = length == 1 ? b0 : b0 & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (ByteAt(s, *pos + k) & 0x3F);
  *pos += length;
  return cp;
}

bool IsValidUtf8(std::string_view s, size_t* bad_offset) {
  for (size_t pos = 0; pos < s.size();) {
    if (ByteAt(s, pos) < 0x80) {
      ++pos;
      continue;
    }
    size_t length = Utf8CharLength(s, pos);
    if (length == 0) {
      if (bad_offset != nullptr) *bad_offset = pos;
      return false;
    }
    pos += length;
  }
  return true;
}

Status ValidateUtf8(std::string_view s, std::string_view what) {
  for (size_t pos = 0; pos < s.size();) {
    uint8_t b0 = ByteAt(s, pos);
    if (b0 < 0x80) {
      ++pos;
      continue;
    }
    auto fail = [&](std::string_view reason) {
      return InvalidArgumentError(std::string(what) + " is not valid UTF-8: " +
                                  std::string(reason) + " at byte " + std::to_string(pos));
    };
    Lead lead = LeadOf(b0);
    if (lead.length == 0) {
      return fail(IsContinuation(b0) ? "unexpected continuation byte" : "invalid lead byte");
    }
    if (s.size() - pos < lead.length) return fail("truncated sequence");
    if (!ContinuesAt(s, pos, 1, lead)) {
      return fail(!IsContinuation(ByteAt(s, pos + 1))
                      ? "missing continuation byte"
                      : "overlong encoding, surrogate or code point > U+10FFFF");
    }
    for (size_t k = 2; k < lead.length; ++k) {
      if (!ContinuesAt(s, pos, k, lead)) return fail("missing continuation byte");
    }
    pos += lead.length;
  }
  return Status();
}

size_t Utf8Length(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) {
    size_t length = ByteAt(s, pos) < 0x80 ? 1 : Utf8CharLength(s, pos);
    pos += length == 0 ? 1 : length;
  }
  return n;
}

void AppendUtf8(std::string* out, char32_t cp) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = kReplacementCharacter;
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

size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint8_t b0 = ByteAt(bytes, pos);
    if (b0 < 0x80) {
      out->push_back(static_cast<char>(b0));
      ++pos;
      continue;
    }
    Lead lead = LeadOf(b0);
    if (lead.length == 0) {
      out->append(kReplacementCharacterUtf8);
      ++pos;
      continue;
    }
    // WHATWG: take continuation bytes while they are in range; the first one out of range ends
    // the maximal subpart (one U+FFFD) and is looked at again as a lead byte.
    size_t k = 1;
    while (k < lead.length && pos + k < bytes.size() && ContinuesAt(bytes, pos, k, lead)) ++k;
    if (k == lead.length) {
      out->append(bytes.substr(pos, lead.length));
      pos += lead.length;
    } else if (pos + k == bytes.size()) {
      // Well-formed so far, cut short by the end of the bytes.
      if (!final) return pos;
      out->append(kReplacementCharacterUtf8);
      return bytes.size();
    } else {
      out->append(kReplacementCharacterUtf8);
      pos += k;
    }
  }
  return pos;
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  AppendUtf8Lossy(bytes, /*final=*/true, &out);
  return out;
}

size_t Utf8SafeCut(std::string_view s, size_t limit) {
  SOVAI_CHECK_LE(limit, s.size());
  // Look back from the cut for the lead byte of the character the cut falls in or after.
  for (size_t back = 1; back <= 4 && back <= limit; ++back) {
    uint8_t b = ByteAt(s, limit - back);
    if (IsContinuation(b)) continue;
    // A character that would run past the cut moves whole into the next piece, unless it is all
    // this piece would have.
    if (AnnouncedLength(b) > back && limit - back > 0) return limit - back;
    return limit;
  }
  return limit;
}

}  // namespace sovai::base
