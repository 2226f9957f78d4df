// Time formats used on the wire: RFC 3339 (logs, JSON APIs), HTTP dates (RFC 7231 IMF-fixdate,
// plus the two obsolete forms HTTP recipients must accept), and the AWS SigV4 forms.
//
// Representation: a point in time is an `int64_t unix_micros`, microseconds since
// 1970-01-01T00:00:00Z, ignoring leap seconds (POSIX time). It is the same unit as
// Env::NowUnixMicros(), so values flow from the clock to these functions without conversion.
// Supported range: years 0000..9999; formatting a value outside it is a bug (SOVAI_CHECK).
//
// Errors: every parser returns InvalidArgument for malformed or out-of-range input, the message
// quoting the input and saying which form was expected. Parsers accept exactly the documented
// forms (no surrounding whitespace).
//
// Thread-safety: pure functions; no locale or TZ environment is consulted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace sovai::base {

inline constexpr int64_t kMicrosPerSecond = 1'000'000;
inline constexpr int64_t kMicrosPerMilli = 1'000;

// "2026-11-29T14:03:05.123Z". `fraction_digits` is 0 (no fraction), 3 (ms) or 6 (us); the value
// is truncated, not rounded, to that precision. Always UTC with a 'Z'.
std::string FormatRfc3339(int64_t unix_micros, int fraction_digits = 3);

// Accepts "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)"; 'T' may also be 't' or ' ' and 'Z'
// may be 'z'. The fraction has 1..9 digits; digits beyond microseconds are truncated. Second 60
// (leap second) is rejected.
Result<int64_t> ParseRfc3339(std::string_view text);

// IMF-fixdate, the one form HTTP senders must use: "Sun, 06 Nov 1994 08:49:37 GMT". Sub-second
// precision is dropped.
std::string FormatHttpDate(int64_t unix_micros);

// Accepts the three forms of RFC 7231 section 7.1.1.1:
//   IMF-fixdate  "Sun, 06 Nov 1994 08:49:37 GMT"
//   RFC 850      "Sunday, 06-Nov-94 08:49:37 GMT"  (two-digit year: 00-69 -> 20xx, 70-99 -> 19xx)
//   asctime      "Sun Nov  6 08:49:37 1994"
// The day name must be a valid name for its form but is not checked against the date.
Result<int64_t> ParseHttpDate(std::string_view text);

// SigV4 "x-amz-date" / ISO 8601 basic form: "20130524T000000Z".
std::string FormatAmzDate(int64_t unix_micros);
Result<int64_t> ParseAmzDate(std::string_view text);

// SigV4 credential-scope date stamp: "20130524" (the UTC day of `unix_micros`).
std::string FormatDateStamp(int64_t unix_micros);
// Midnight UTC of the given day.
Result<int64_t> ParseDateStamp(std::string_view text);

// A broken-down UTC time. `micros` is 0..999999.
struct CivilTime {
  int year = 1970;  // 0..9999
  int month = 1;    // 1..12
  int day = 1;      // 1..31
  int hour = 0;     // 0..23
  int minute = 0;   // 0..59
  int second = 0;   // 0..59
  int micros = 0;
  int weekday = 4;  // 0 = Sunday; ignored by FromCivil
};

// Conversions between unix_micros and CivilTime (proleptic Gregorian calendar, UTC).
CivilTime ToCivil(int64_t unix_micros);
// Errors: InvalidArgument when a field is out of range (including Feb 29 of a non-leap year).
Result<int64_t> FromCivil(const CivilTime& civil);

bool IsLeapYear(int year);

}  // namespace sovai::base
