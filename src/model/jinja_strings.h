// Text helpers for the chat-template interpreter (internal to sovai_model_template): UTF-8
// decoding, and the Python `str` behaviours that Jinja templates observe through filters and
// methods (strip, split, upper/lower/title/capitalize, repr, float formatting).
//
// Every string the interpreter handles is valid UTF-8: templates and render inputs are checked
// on entry, and these functions only ever cut strings at code point boundaries.
//
// Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (simple one-to-one
// mappings). Other scripts are left unchanged, where Python would apply its full Unicode tables
// (so "ß".upper() stays "ß" here instead of "SS"). Whitespace is Python's str.isspace() set.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/utf8.h"

namespace sovai::model::jinja {

// UTF-8 is base/utf8.h's (validation, encoding, counting); the interpreter's own are the
// conversions to and from code point strings and Python's len().
using base::IsValidUtf8;

// Decodes valid UTF-8 (an invalid byte decodes as U+FFFD, one byte at a time).
std::u32string DecodeUtf8(std::string_view s);
std::string EncodeUtf8(std::u32string_view s);
// Number of code points (Python len()).
inline size_t CodePointCount(std::string_view s) { return base::Utf8Length(s); }

// Python str.isspace() for one code point.
bool IsPySpace(char32_t cp);
// Whitespace that Jinja's lexer skips inside tags (Python's `\s` in a str regex).
bool IsRegexSpace(char32_t cp);
char32_t ToUpper(char32_t cp);
char32_t ToLower(char32_t cp);
// A letter with case (one that ToUpper or ToLower changes, or would change back).
bool IsCased(char32_t cp);
inline bool IsAsciiDigit(char32_t cp) { return cp >= '0' && cp <= '9'; }
// str.isalpha() approximated: ASCII letters, the cased scripts, and everything outside ASCII
// that is neither whitespace nor punctuation/symbols of the common blocks (so CJK counts).
bool IsAlphaApprox(char32_t cp);

std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
// str.title(): a cased character after an uncased one starts a word.
std::string PyTitle(std::string_view s);
// str.capitalize(): first character upper case, the rest lower case.
std::string PyCapitalize(std::string_view s);
// str.swapcase().
std::string PySwapCase(std::string_view s);

enum class StripSide : uint8_t { kBoth, kLeft, kRight };
// str.strip(chars): without `chars`, strips IsPySpace characters; with it, any code point in it.
std::string PyStrip(std::string_view s, StripSide side,
                    const std::optional<std::string>& chars = std::nullopt);

// str.split(sep, maxsplit) and str.rsplit. Without `sep`, splits on runs of whitespace and drops
// empty pieces. `sep` must not be empty (the caller reports that error). maxsplit < 0: no limit.
std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit);
std::vector<std::string> PyRSplit(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
// str.splitlines() (without keepends): the line boundaries are \n \r \r\n \v \f \x1c \x1d \x1e
// \x85 \u2028 \u2029.
std::vector<std::string> PySplitLines(std::string_view s);

// str.replace(old, new, count); count < 0 replaces all. An empty `old` inserts `new` between
// code points (and at both ends), as Python does.
std::string PyReplace(std::string_view s, std::string_view old_text, std::string_view new_text,
                      int64_t count);

// The code points [start, stop) stepping by `step` (Python slice semantics, already resolved
// against the length by the caller through ResolveSlice).
struct SliceBounds {
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
};
// Python's slice.indices(length). `step` must not be 0.
SliceBounds ResolveSlice(std::optional<int64_t> start, std::optional<int64_t> stop,
                         std::optional<int64_t> step, int64_t length);
// Number of elements a resolved slice selects.
int64_t SliceLength(const SliceBounds& b);

// Python repr() of a str: single quotes unless the text contains ' and no ", backslash escapes
// for \\ \n \r \t and the quote, \xNN for other control characters.
std::string PyRepr(std::string_view s);

// Python repr()/str() of a float: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf",
// "nan".
std::string PyFloatRepr(double d);

// HTML escaping as Jinja's escape filter does it (markupsafe): & < > " '.
std::string HtmlEscape(std::string_view s);

}  // namespace sovai::model::jinja
