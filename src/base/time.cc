#include "base/time.h"

#include <array>
#include <cstdio>

namespace sovai::base {
namespace {

constexpr int64_t kSecondsPerDay = 86'400;
constexpr int64_t kMicrosPerDay = kSecondsPerDay * kMicrosPerSecond;
// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z.
constexpr int64_t kMinDays = -719'528;
constexpr int64_t kMaxDays = 2'932'896;

constexpr std::array<std::string_view, 7> kShortDays = {"Sun", "Mon", "Tue", "Wed",
                                                        "Thu", "Fri", "Sat"};
constexpr std::array<std::string_view, 7> kLongDays = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                                       "Thursday", "Friday", "Saturday"};
constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// Howard Hinnant's days_from_civil / civil_from_days: exact for the proleptic Gregorian calendar.
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

void CivilFromDays(int64_t z, int* year, int* month, int* day) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  *day = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  *month = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  *year = static_cast<int>(yoe + era * 400 + (*month <= 2));
}

int DaysInMonth(int year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && IsLeapYear(year) ? 29 : kDays[month - 1];
}

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

CivilTime CheckedCivil(int64_t unix_micros) {
  int64_t days = FloorDiv(unix_micros, kMicrosPerDay);
  SOVAI_CHECK(days >= kMinDays && days <= kMaxDays)
      << "time " << unix_micros << "us is outside years 0000..9999";
  return ToCivil(unix_micros);
}

// A cursor over the input with the parsing primitives the formats need.
class Scanner {
 public:
  explicit Scanner(std::string_view text) : text_(text) {}

  bool Digits(int n, int* out) {
    if (text_.size() - pos_ < static_cast<size_t>(n)) return false;
    int value = 0;
    for (int i = 0; i < n; ++i) {
      char c = text_[pos_ + i];
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    pos_ += n;
    *out = value;
    return true;
  }
  bool Literal(std::string_view lit) {
    if (text_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }
  bool OneOf(std::string_view chars, char* out) {
    if (pos_ >= text_.size() || chars.find(text_[pos_]) == std::string_view::npos) return false;
    *out = text_[pos_++];
    return true;
  }
  // Matches one of `names` exactly; returns its index or -1.
  template <size_t N>
  int Name(const std::array<std::string_view, N>& names) {
    for (size_t i = 0; i < N; ++i) {
      if (Literal(names[i])) return static_cast<int>(i);
    }
    return -1;
  }
  bool AtEnd() const { return pos_ == text_.size(); }
  bool PeekDigit() const { return pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9'; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

Status BadTime(std::string_view text, std::string_view expected) {
  constexpr size_t kMaxQuoted = 64;
  std::string message = "invalid ";
  message.append(expected);
  message += " '";
  message.append(text.substr(0, kMaxQuoted));
  if (text.size() > kMaxQuoted) message += "...";
  message += "'";
  return InvalidArgumentError(std::move(message));
}

// Parses "HH:MM:SS".
bool ClockTime(Scanner& s, CivilTime* c) {
  return s.Digits(2, &c->hour) && s.Literal(":") && s.Digits(2, &c->minute) && s.Literal(":") &&
         s.Digits(2, &c->second);
}

Result<int64_t> Finish(const CivilTime& civil, std::string_view text, std::string_view expected) {
  Result<int64_t> result = FromCivil(civil);
  if (!result.ok()) {
    return InvalidArgumentError(BadTime(text, expected).message() + ": " +
                                result.status().message());
  }
  return result;
}

}  // namespace

bool IsLeapYear(int year) { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

CivilTime ToCivil(int64_t unix_micros) {
  CivilTime c;
  int64_t days = FloorDiv(unix_micros, kMicrosPerDay);
  int64_t micros_of_day = unix_micros - days * kMicrosPerDay;
  CivilFromDays(days, &c.year, &c.month, &c.day);
  int64_t seconds_of_day = micros_of_day / kMicrosPerSecond;
  c.hour = static_cast<int>(seconds_of_day / 3600);
  c.minute = static_cast<int>(seconds_of_day / 60 % 60);
  c.second = static_cast<int>(seconds_of_day % 60);
  c.micros = static_cast<int>(micros_of_day % kMicrosPerSecond);
  int64_t weekday = (days + 4) % 7;  // 1970-01-01 was a Thursday
  c.weekday = static_cast<int>(weekday < 0 ? weekday + 7 : weekday);
  return c;
}

Result<int64_t> FromCivil(const CivilTime& c) {
  if (c.year < 0 || c.year > 9999) return InvalidArgumentError("year out of range 0000..9999");
  if (c.month < 1 || c.month > 12) return InvalidArgumentError("month out of range 1..12");
  if (c.day < 1 || c.day > DaysInMonth(c.year, c.month)) {
    return InvalidArgumentError("day out of range for its month");
  }
  if (c.hour < 0 || c.hour > 23 || c.minute < 0 || c.minute > 59 || c.second < 0 || c.second > 59) {
    return InvalidArgumentError("time of day out of range");
  }
  if (c.micros < 0 || c.micros >= kMicrosPerSecond) {
    return InvalidArgumentError("microseconds out of range");
  }
  int64_t days = DaysFromCivil(c.year, c.month, c.day);
  int64_t seconds = days * kSecondsPerDay + c.hour * 3600 + c.minute * 60 + c.second;
  return seconds * kMicrosPerSecond + c.micros;
}

std::string FormatRfc3339(int64_t unix_micros, int fraction_digits) {
  SOVAI_CHECK(fraction_digits == 0 || fraction_digits == 3 || fraction_digits == 6)
      << "fraction_digits=" << fraction_digits;
  CivilTime c = CheckedCivil(unix_micros);
  char buf[40];
  int n = std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d", c.year, c.month, c.day,
                        c.hour, c.minute, c.second);
  if (fraction_digits == 3) {
    n += std::snprintf(buf + n, sizeof(buf) - n, ".%03d", c.micros / 1000);
  } else if (fraction_digits == 6) {
    n += std::snprintf(buf + n, sizeof(buf) - n, ".%06d", c.micros);
  }
  std::snprintf(buf + n, sizeof(buf) - n, "Z");
  return buf;
}

Result<int64_t> ParseRfc3339(std::string_view text) {
  constexpr std::string_view kForm = "RFC 3339 time (expected e.g. 2026-11-29T14:03:05.123Z)";
  Scanner s(text);
  CivilTime c;
  char sep;
  if (!s.Digits(4, &c.year) || !s.Literal("-") || !s.Digits(2, &c.month) || !s.Literal("-") ||
      !s.Digits(2, &c.day) || !s.OneOf("Tt ", &sep) || !ClockTime(s, &c)) {
    return BadTime(text, kForm);
  }
  if (s.Literal(".")) {
    if (!s.PeekDigit()) return BadTime(text, kForm);
    int scale = 100'000;
    int digits = 0;
    int digit;
    while (s.Digits(1, &digit)) {
      if (++digits > 9) return BadTime(text, kForm);
      c.micros += digit * scale;
      scale /= 10;
    }
  }
  int offset_seconds = 0;
  char zone;
  if (!s.OneOf("Zz+-", &zone)) return BadTime(text, kForm);
  if (zone == '+' || zone == '-') {
    int oh, om;
    if (!s.Digits(2, &oh) || !s.Literal(":") || !s.Digits(2, &om) || oh > 23 || om > 59) {
      return BadTime(text, kForm);
    }
    offset_seconds = (oh * 3600 + om * 60) * (zone == '+' ? 1 : -1);
  }
  if (!s.AtEnd()) return BadTime(text, kForm);
  SOVAI_ASSIGN_OR_RETURN(int64_t local, Finish(c, text, kForm));
  // The local time is `offset` ahead of UTC.
  int64_t utc = local - offset_seconds * kMicrosPerSecond;
  int64_t days = FloorDiv(utc, kMicrosPerDay);
  if (days < kMinDays || days > kMaxDays) {
    return InvalidArgumentError(BadTime(text, kForm).message() + ": outside years 0000..9999");
  }
  return utc;
}

std::string FormatHttpDate(int64_t unix_micros) {
  CivilTime c = CheckedCivil(unix_micros);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s, %02d %s %04d %02d:%02d:%02d GMT",
                kShortDays[c.weekday].data(), c.day, kMonths[c.month - 1].data(), c.year, c.hour,
                c.minute, c.second);
  return buf;
}

Result<int64_t> ParseHttpDate(std::string_view text) {
  constexpr std::string_view kForm = "HTTP date (expected e.g. Sun, 06 Nov 1994 08:49:37 GMT)";
  CivilTime c;
  {  // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
    Scanner s(text);
    if (s.Name(kShortDays) >= 0 && s.Literal(", ")) {
      int month;
      if (s.Digits(2, &c.day) && s.Literal(" ") && (month = s.Name(kMonths)) >= 0 &&
          s.Literal(" ") && s.Digits(4, &c.year) && s.Literal(" ") && ClockTime(s, &c) &&
          s.Literal(" GMT") && s.AtEnd()) {
        c.month = month + 1;
        return Finish(c, text, kForm);
      }
      return BadTime(text, kForm);
    }
  }
  {  // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"
    Scanner s(text);
    if (s.Name(kLongDays) >= 0 && s.Literal(", ")) {
      int month, yy;
      if (s.Digits(2, &c.day) && s.Literal("-") && (month = s.Name(kMonths)) >= 0 &&
          s.Literal("-") && s.Digits(2, &yy) && s.Literal(" ") && ClockTime(s, &c) &&
          s.Literal(" GMT") && s.AtEnd()) {
        c.month = month + 1;
        c.year = yy < 70 ? 2000 + yy : 1900 + yy;
        return Finish(c, text, kForm);
      }
      return BadTime(text, kForm);
    }
  }
  {  // asctime: "Sun Nov  6 08:49:37 1994" (day is space-padded)
    Scanner s(text);
    int month;
    if (s.Name(kShortDays) >= 0 && s.Literal(" ") && (month = s.Name(kMonths)) >= 0 &&
        s.Literal(" ")) {
      bool day_ok = s.Literal(" ") ? s.Digits(1, &c.day) : s.Digits(2, &c.day);
      if (day_ok && s.Literal(" ") && ClockTime(s, &c) && s.Literal(" ") && s.Digits(4, &c.year) &&
          s.AtEnd()) {
        c.month = month + 1;
        return Finish(c, text, kForm);
      }
    }
  }
  return BadTime(text, kForm);
}

std::string FormatAmzDate(int64_t unix_micros) {
  CivilTime c = CheckedCivil(unix_micros);
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%04d%02d%02dT%02d%02d%02dZ", c.year, c.month, c.day, c.hour,
                c.minute, c.second);
  return buf;
}

Result<int64_t> ParseAmzDate(std::string_view text) {
  constexpr std::string_view kForm = "x-amz-date (expected e.g. 20130524T000000Z)";
  Scanner s(text);
  CivilTime c;
  if (!s.Digits(4, &c.year) || !s.Digits(2, &c.month) || !s.Digits(2, &c.day) || !s.Literal("T") ||
      !s.Digits(2, &c.hour) || !s.Digits(2, &c.minute) || !s.Digits(2, &c.second) ||
      !s.Literal("Z") || !s.AtEnd()) {
    return BadTime(text, kForm);
  }
  return Finish(c, text, kForm);
}

std::string FormatDateStamp(int64_t unix_micros) {
  CivilTime c = CheckedCivil(unix_micros);
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04d%02d%02d", c.year, c.month, c.day);
  return buf;
}

Result<int64_t> ParseDateStamp(std::string_view text) {
  constexpr std::string_view kForm = "date stamp (expected e.g. 20130524)";
  Scanner s(text);
  CivilTime c;
  if (!s.Digits(4, &c.year) || !s.Digits(2, &c.month) || !s.Digits(2, &c.day) || !s.AtEnd()) {
    return BadTime(text, kForm);
  }
  return Finish(c, text, kForm);
}

}  // namespace sovai::base
