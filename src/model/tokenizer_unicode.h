// Unicode helpers of the tokenizer (internal to src/model; tokenizer.h is the public API).
//
// The reference tokenizer we match id for id (transformers.js, as packaged by @lenml/tokenizers)
// runs on JavaScript strings, so a few of these helpers spell out JavaScript's rules rather than
// Unicode's: IsJsWhitespace is the set behind JavaScript's `\s` and String.prototype.trim, and
// DecodeUtf8Lossy is the WHATWG UTF-8 decoder behind TextDecoder (one U+FFFD per maximal invalid
// subsequence). Normalization (NFC, NFKC, NFD, NFKD) comes from utf8proc.
//
// Text is UTF-8 in std::string / std::string_view throughout. Functions that take "valid" text
// assume it passed ValidateUtf8 and never read past the end even if it did not.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/utf8.h"

namespace sovai::model::unicode {

// Decoding, encoding and validation are base/utf8.h's, under the names the tokenizer uses:
//   NextCodePoint(text, &pos): the code point at text[pos], advancing past it; U+FFFD for a
//     malformed sequence, advancing one byte.
//   AppendUtf8(&out, cp): U+FFFD for surrogates and values above U+10FFFF.
//   ValidateUtf8(text, what): InvalidArgument "<what> is not valid UTF-8: <reason> at byte N".
inline char32_t NextCodePoint(std::string_view text, size_t* pos) {
  return base::NextUtf8CodePointOrReplacement(text, pos);
}
using base::AppendUtf8;
using base::ValidateUtf8;

// JavaScript's WhiteSpace and LineTerminator: TAB, LF, VT, FF, CR, SPACE, U+00A0, U+1680,
// U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF.
bool IsJsWhitespace(char32_t cp);

// String.prototype.trimStart / trimEnd (JavaScript whitespace).
std::string_view TrimStartJs(std::string_view text);
std::string_view TrimEndJs(std::string_view text);

// TextDecoder("utf-8", {fatal: false}): invalid bytes become U+FFFD, one per maximal subpart of
// an invalid sequence. With `strip_bom` a leading U+FEFF is dropped (TextDecoder's default).
std::string DecodeUtf8Lossy(std::string_view bytes, bool strip_bom);

// True when `cp` is left alone by every normal form whatever surrounds it: it has no
// decomposition, combining class 0, and takes part in no canonical composition. Text made only
// of such characters is skipped by Normalize (ASCII, CJK ideographs, emoji, most symbols; ASCII
// letters start compositions, but only with marks that are not inert themselves).
bool IsNormalizationInert(char32_t cp);

enum class NormalForm : uint8_t { kNfc, kNfd, kNfkc, kNfkd };
// Unicode normalization of valid UTF-8 text. Errors: Internal if utf8proc fails (out of memory).
base::Result<std::string> Normalize(std::string_view text, NormalForm form);

// GPT-2's byte-to-unicode table: printable bytes map to themselves (as code points), the other
// 68 to U+0100..U+0143 in byte order, so every byte string has a printable spelling.
char32_t ByteToUnicode(uint8_t byte);
// The inverse; -1 for a code point that is not in the table.
int UnicodeToByte(char32_t cp);
// Appends the byte-level spelling of `bytes` (each byte as its ByteToUnicode code point).
void AppendByteLevel(std::string* out, std::string_view bytes);

}  // namespace sovai::model::unicode
