// UTF-8: the one decoder, validator and encoder of the tree.
//
// "Well-formed" is RFC 3629 (Unicode table 3-7): no overlong forms, no surrogates (U+D800..DFFF),
// nothing above U+10FFFF, no stray continuation bytes, no sequence cut short. Four ways to meet
// text that may not be:
//   * strict, one character at a time: Utf8CharLength, NextUtf8CodePoint (-1 for ill-formed);
//   * validation: IsValidUtf8 (the offset of the first ill-formed byte), ValidateUtf8 (a Status
//     naming the reason and the offset);
//   * lossy, as the WHATWG decoder behind TextDecoder (one U+FFFD per maximal subpart of an
//     ill-formed sequence), whole or incrementally over a stream: AppendUtf8Lossy;
//   * cutting bytes into pieces without splitting a character: Utf8SafeCut.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace sovai::base {

inline constexpr char32_t kReplacementCharacter = 0xFFFD;
inline constexpr std::string_view kReplacementCharacterUtf8 = "\xEF\xBF\xBD";

// Length (1 to 4) of the well-formed character starting at s[pos], or 0 when the bytes there do
// not start one. Requires pos < s.size().
size_t Utf8CharLength(std::string_view s, size_t pos);

// Decodes the character starting at s[*pos] and advances *pos past it. Returns -1 for bytes that
// do not start a well-formed character, and then advances *pos by one byte (the next call looks
// at the byte after). Requires *pos < s.size().
int32_t NextUtf8CodePoint(std::string_view s, size_t* pos);
// NextUtf8CodePoint with U+FFFD where it returns -1: for text known to be well-formed, or read
// lossily one byte at a time.
inline char32_t NextUtf8CodePointOrReplacement(std::string_view s, size_t* pos) {
  int32_t cp = NextUtf8CodePoint(s, pos);
  return cp < 0 ? kReplacementCharacter : static_cast<char32_t>(cp);
}

// True when all of `s` is well-formed. On false, `*bad_offset` (when given) is the offset of the
// first byte that does not start a well-formed character.
bool IsValidUtf8(std::string_view s, size_t* bad_offset = nullptr);

// OK when `s` is well-formed; otherwise InvalidArgument
// "<what> is not valid UTF-8: <reason> at byte N", the reason one of "unexpected continuation
// byte", "invalid lead byte", "truncated sequence", "missing continuation byte", "overlong
// encoding, surrogate or code point > U+10FFFF".
Status ValidateUtf8(std::string_view s, std::string_view what);

// The number of characters in `s` (meant for well-formed text; each byte that does not start a
// well-formed character counts as one).
size_t Utf8Length(std::string_view s);

// Appends the UTF-8 encoding of `cp`; surrogates and values above U+10FFFF, which have none,
// append U+FFFD.
void AppendUtf8(std::string* out, char32_t cp);

// The WHATWG UTF-8 decoder (TextDecoder with fatal: false): appends `bytes` to `out` with each
// maximal subpart of an ill-formed sequence replaced by U+FFFD, and returns how many bytes were
// consumed. With `final` that is all of them (a sequence cut short by the end becomes one
// U+FFFD); otherwise such a trailing sequence, well-formed so far, is left for the caller to
// present again with the bytes that follow. Decoding in pieces this way gives the same text as
// decoding the whole.
size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out);
// AppendUtf8Lossy of all of `bytes`, final.
std::string Utf8Lossy(std::string_view bytes);

// Where to cut `s` into a first piece of at most `limit` bytes without splitting a character:
// `limit` itself, or up to 3 bytes earlier where the character that would run past the cut
// starts (by what its lead byte announces), unless that character starts the piece. Bytes that
// are not UTF-8 are cut anywhere. Requires limit <= s.size().
size_t Utf8SafeCut(std::string_view s, size_t limit);

}  // namespace sovai::base
