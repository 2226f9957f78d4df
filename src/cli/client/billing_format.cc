#include "cli/client/billing_format.h"

#include "base/check.h"
#include "base/strings.h"
#include "base/time.h"
#include "cli/client/api_client.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMicrosPerDay = 86'400 * base::kMicrosPerSecond;

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Two or four ASCII digits at `pos` of `s` as a number (the caller checked they are digits).
int Digits(std::string_view s, size_t pos, size_t count) {
  int value = 0;
  for (size_t i = pos; i < pos + count; ++i) value = value * 10 + (s[i] - '0');
  return value;
}

// A 128-bit magnitude in decimal (percentages of huge amounts over tiny caps do not fit 64 bits).
std::string U128ToString(unsigned __int128 value) {
  if (value == 0) return "0";
  std::string digits;
  while (value > 0) {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  }
  return digits;
}

base::Status NotAnAmount(std::string_view text, std::string_view why) {
  return base::InvalidArgumentError("'" + std::string(text) + "' is not an amount in euros (" +
                                    std::string(why) +
                                    "): give digits with at most six decimals, such as 50 or "
                                    "12.50");
}

base::Status NotADate(std::string_view text) {
  return base::InvalidArgumentError(
      "'" + std::string(text) +
      "' is not a date: give YYYY-MM-DD (a UTC day) or an RFC 3339 time such as "
      "2026-11-01T00:00:00Z");
}

// A JSON member as a CSV field: strings as they are, numbers and booleans in JSON's spelling,
// missing or null members empty.
std::string FieldText(const Json& line, const char* name) {
  if (!line.is_object()) return "";
  auto it = line.find(name);
  if (it == line.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

}  // namespace

std::string FormatMicroUnits(int64_t micros, int min_decimals) {
  SOVAI_CHECK(min_decimals >= 0 && min_decimals <= kMaxEurDecimals) << min_decimals;
  const bool negative = micros < 0;
  // Unsigned negation is defined for INT64_MIN too.
  const uint64_t magnitude =
      negative ? uint64_t{0} - static_cast<uint64_t>(micros) : static_cast<uint64_t>(micros);
  const uint64_t whole = magnitude / kMicroEurPerEur;
  std::string fraction = std::to_string(magnitude % kMicroEurPerEur);
  fraction.insert(0, kMaxEurDecimals - fraction.size(), '0');
  size_t keep = fraction.size();
  while (keep > static_cast<size_t>(min_decimals) && fraction[keep - 1] == '0') --keep;
  std::string out = negative ? "-" : "";
  out += std::to_string(whole);
  if (keep > 0) out += "." + fraction.substr(0, keep);
  return out;
}

std::string FormatEur(int64_t micro_eur) { return FormatMicroUnits(micro_eur, 2); }

std::string FormatEurFixed(int64_t micro_eur) {
  return FormatMicroUnits(micro_eur, kMaxEurDecimals);
}

base::Result<int64_t> ParseEurMicros(std::string_view text) {
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  const size_t dot = s.find('.');
  std::string_view whole = s.substr(0, dot);
  std::string_view fraction = dot == std::string_view::npos ? "" : s.substr(dot + 1);
  if (!AllDigits(whole) || (dot != std::string_view::npos && !AllDigits(fraction))) {
    return NotAnAmount(text, "not a decimal number");
  }
  if (fraction.size() > static_cast<size_t>(kMaxEurDecimals)) {
    return NotAnAmount(text, "more than six decimals; 0.000001 is the smallest amount");
  }
  auto euros = base::ParseUint64(whole);
  if (!euros.ok() || *euros > static_cast<uint64_t>(kMaxParsedEur)) {
    return NotAnAmount(text, "more than " + std::to_string(kMaxParsedEur) + " €");
  }
  std::string padded(fraction);
  padded.append(kMaxEurDecimals - fraction.size(), '0');
  const int64_t micros =
      static_cast<int64_t>(*euros) * kMicroEurPerEur + Digits(padded, 0, kMaxEurDecimals);
  return negative ? -micros : micros;
}

base::Result<int64_t> ParseDateArg(std::string_view text, DateBound bound) {
  const bool date_only = text.size() == 10 && text[4] == '-' && text[7] == '-' &&
                         AllDigits(text.substr(0, 4)) && AllDigits(text.substr(5, 2)) &&
                         AllDigits(text.substr(8, 2));
  if (!date_only) {
    auto instant = base::ParseRfc3339(text);
    if (!instant.ok()) return NotADate(text);
    return *instant;
  }
  base::CivilTime day;
  day.year = Digits(text, 0, 4);
  day.month = Digits(text, 5, 2);
  day.day = Digits(text, 8, 2);
  auto start = base::FromCivil(day);
  if (!start.ok()) {
    return base::InvalidArgumentError("'" + std::string(text) + "' is not a day of the calendar");
  }
  if (bound == DateBound::kStart) return *start;
  // The next day's midnight must still be a time the wire format can write (year <= 9999).
  if (day.year == 9999 && day.month == 12 && day.day == 31) {
    return base::InvalidArgumentError("'" + std::string(text) + "' is past the last day (9999)");
  }
  return *start + kMicrosPerDay;
}

std::string FormatQueryTime(int64_t unix_micros) {
  return base::FormatRfc3339(unix_micros, unix_micros % base::kMicrosPerSecond == 0 ? 0 : 6);
}

base::Result<std::string> AddWindowQuery(std::string path, const std::optional<std::string>& from,
                                         const std::optional<std::string>& to) {
  std::optional<int64_t> from_micros;
  if (from) {
    auto parsed = ParseDateArg(*from, DateBound::kStart);
    if (!parsed.ok()) return parsed.status().WithContext("--from");
    from_micros = *parsed;
    path = AddQuery(path, "from", FormatQueryTime(*parsed));
  }
  if (to) {
    auto parsed = ParseDateArg(*to, DateBound::kEnd);
    if (!parsed.ok()) return parsed.status().WithContext("--to");
    if (from_micros && *parsed <= *from_micros) {
      return base::InvalidArgumentError("--to must be after --from");
    }
    path = AddQuery(path, "to", FormatQueryTime(*parsed));
  }
  return path;
}

base::Result<std::string> ParseMonth(std::string_view text) {
  const bool shaped = text.size() == 7 && text[4] == '-' && AllDigits(text.substr(0, 4)) &&
                      AllDigits(text.substr(5, 2));
  if (!shaped || Digits(text, 5, 2) < 1 || Digits(text, 5, 2) > 12) {
    return base::InvalidArgumentError("'" + std::string(text) +
                                      "' is not a month: give YYYY-MM, such as 2026-11");
  }
  return std::string(text);
}

bool IsComputeKind(std::string_view kind) {
  return kind == "job" || kind == "app" || kind == "notebook";
}

std::string FormatQuantity(std::string_view kind, int64_t quantity) {
  if (IsComputeKind(kind)) return std::to_string(quantity) + " unit-min";
  if (kind == "storage") return FormatMicroUnits(quantity, 0) + " GiB-month";
  if (kind == "tokens") return std::to_string(quantity) + " tokens";
  return std::to_string(quantity);
}

std::string FormatPercent(int64_t part, int64_t whole) {
  if (whole <= 0) return "-";
  const bool negative = part < 0;
  const unsigned __int128 magnitude =
      negative ? uint64_t{0} - static_cast<uint64_t>(part) : static_cast<uint64_t>(part);
  // Tenths of a percent, truncated: the amount shown never overstates the spend.
  const unsigned __int128 tenths = magnitude * 1000 / static_cast<uint64_t>(whole);
  return (negative && tenths > 0 ? "-" : "") + U128ToString(tenths / 10) + "." +
         U128ToString(tenths % 10) + "%";
}

std::string CsvField(std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string CsvRecord(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out += ',';
    out += CsvField(fields[i]);
  }
  out += "\r\n";
  return out;
}

std::vector<std::string> LinesCsvHeader() {
  return {"project",
          "kind",
          "resource",
          "flavor",
          "units",
          "start",
          "end",
          "open",
          "minutes",
          "quantity",
          "unit_price_micro_eur",
          "amount_micro_eur",
          "amount_eur"};
}

std::string LinesCsv(const Json& lines) {
  const std::vector<std::string> header = LinesCsvHeader();
  std::string out = CsvRecord(header);
  if (!lines.is_array()) return out;
  for (const Json& line : lines) {
    std::vector<std::string> fields;
    fields.reserve(header.size());
    for (const std::string& name : header) {
      if (name != "amount_eur") {
        fields.push_back(FieldText(line, name.c_str()));
        continue;
      }
      // From the integer when there is one, so that the column is exactly the µ€ amount.
      const Json& micros =
          line.is_object() && line.contains("amount_micro_eur") ? line["amount_micro_eur"] : Json();
      fields.push_back(micros.is_number_integer() ? FormatEurFixed(micros.get<int64_t>())
                                                  : FieldText(line, "amount_eur"));
    }
    out += CsvRecord(fields);
  }
  return out;
}

}  // namespace sovai::cli::client
