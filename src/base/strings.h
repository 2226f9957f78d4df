// Small string helpers shared by the HTTP, S3 and CLI layers.
//
// All functions are pure and thread-safe. "ASCII" functions leave bytes >= 0x80 untouched, so they
// are safe on UTF-8 text. Functions returning std::string_view return views into their input: the
// input must outlive the result.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sovai::base {

// Splits `s` at every `sep`. Keeps empty pieces unless `skip_empty`: Split("a,,b", ',') is
// {"a", "", "b"}; Split("", ',') is {""} (or {} with skip_empty).
std::vector<std::string_view> Split(std::string_view s, char sep, bool skip_empty = false);

// Joins `parts` with `sep` between them.
std::string Join(const std::vector<std::string>& parts, std::string_view sep);
std::string Join(const std::vector<std::string_view>& parts, std::string_view sep);

// Removes ASCII whitespace (space, \t, \n, \v, \f, \r) from the ends.
std::string_view Trim(std::string_view s);
std::string_view TrimLeft(std::string_view s);
std::string_view TrimRight(std::string_view s);

std::string AsciiToLower(std::string_view s);
std::string AsciiToUpper(std::string_view s);
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// Decodes %XX escapes (hex digits in either case). With `plus_as_space` (HTML form and query
// string encoding), '+' decodes to ' '. Errors: InvalidArgument for a '%' not followed by two hex
// digits, naming the offset. The result may contain any byte, NUL included: callers that use it
// as a key or a path must validate it.
Result<std::string> PercentDecode(std::string_view s, bool plus_as_space = false);

// Percent-encodes exactly as AWS Signature V4 requires: the unreserved characters A-Z a-z 0-9
// '-' '.' '_' '~' are kept, every other byte becomes %XX with uppercase hex. '/' is kept when
// `encode_slash` is false (canonical URI paths) and encoded when true (query names and values).
std::string UriEncode(std::string_view s, bool encode_slash);

// Parses a base-10 unsigned integer: one or more ASCII digits, nothing else (no sign, no
// whitespace, no "0x"). Errors: InvalidArgument for empty input, a non-digit, or overflow, the
// message quoting the input.
Result<uint64_t> ParseUint64(std::string_view s);
// As ParseUint64 with an optional leading '-'. Overflow in either direction is InvalidArgument.
Result<int64_t> ParseInt64(std::string_view s);

// POSIX shell single quoting: 'it'\''s' (any byte but NUL survives a shell word).
std::string ShellQuote(std::string_view s);

// `s` as a JSON string literal, quotes included: '"', '\\' and control characters are escaped
// (\n, \t, ... or \u00XX), and invalid UTF-8 bytes become U+FFFD so the output is always valid
// JSON. AppendJsonQuoted appends the same text to `out`.
std::string JsonQuote(std::string_view s);
void AppendJsonQuoted(std::string* out, std::string_view s);

// "0 B", "512 B", "1.0 KiB", "1.5 GiB" (binary units, one decimal above bytes).
std::string HumanBytes(uint64_t bytes);

}  // namespace sovai::base
