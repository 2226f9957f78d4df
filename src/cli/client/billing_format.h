// The pure parsing and formatting of `sovai billing`, `sovai budget` and `--dry-run`
// (docs/billing.md): money, dates and CSV.
//
// Money is an integer of micro-euros (µ€, 10⁻⁶ €) from the wire to the screen, as it is on the
// server: amounts are never converted to floating point, so what is printed is exactly what was
// billed, digit for digit.
//
//   FormatEur(186'800)           // "0.1868"
//   FormatEurFixed(186'800)      // "0.186800" (the API's *_eur strings)
//   ParseEurMicros("50.00")      // 50'000'000
//   ParseDateArg("2026-11-30", DateBound::kEnd)  // 2026-12-01T00:00:00Z as micros
//
// Errors are InvalidArgument quoting the input and saying which form was expected; callers add
// the flag's name. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sovai::cli::client {

inline constexpr int64_t kMicroEurPerEur = 1'000'000;
// The largest amount ParseEurMicros accepts, in euros: far above any budget, and its µ€ value
// (10¹⁸) fits an int64 with room to add a few of them.
inline constexpr int64_t kMaxParsedEur = 1'000'000'000'000;
// The decimals an amount may have: µ€ is the unit of account.
inline constexpr int kMaxEurDecimals = 6;

// `micros` (an integer count of millionths) as a decimal number with at least `min_decimals`
// (0..6) and at most six decimals; trailing zeros beyond `min_decimals` are dropped.
// FormatMicroUnits(250'000, 0) is "0.25", FormatMicroUnits(3'000'000, 0) is "3",
// FormatMicroUnits(-1'500'000, 2) is "-1.50". Every int64 is formatted exactly.
std::string FormatMicroUnits(int64_t micros, int min_decimals);
// An amount for people: at least two decimals, more only when the µ€ need them:
// "50.00", "0.0934", "0.000001", "-1.50".
std::string FormatEur(int64_t micro_eur);
// An amount with six decimals, as the API writes `amount_eur` ("0.093400").
std::string FormatEurFixed(int64_t micro_eur);

// "50", "50.5", "0.000001", "-3.25", "+1" → µ€. At most six decimals (no rounding: a seventh
// digit is an error, not a silent change of the amount), at most kMaxParsedEur euros, an
// optional sign, no spaces, no exponent, no thousands separators.
base::Result<int64_t> ParseEurMicros(std::string_view text);

// Which end of a period a date-only --from/--to names.
enum class DateBound {
  kStart,  // the start of the day (--from 2026-11-01 is 2026-11-01T00:00:00Z)
  kEnd,    // the end of the day, so that the day is included (--to 2026-11-30 is
           // 2026-12-01T00:00:00Z)
};
// A --from/--to value → unix micros: YYYY-MM-DD (a UTC day, see DateBound) or an RFC 3339 time
// (that instant, whatever `bound`).
base::Result<int64_t> ParseDateArg(std::string_view text, DateBound bound);
// The RFC 3339 form sent in queries: UTC, seconds, and a fraction only when there is one
// ("2026-11-01T00:00:00Z", "2026-11-01T00:00:00.250000Z").
std::string FormatQueryTime(int64_t unix_micros);
// `path` with the query parameters from= and to= of the --from and --to values given (nullopt: the
// flag was not given); InvalidArgument naming the flag for a bad value, or for --to not after
// --from.
base::Result<std::string> AddWindowQuery(std::string path, const std::optional<std::string>& from,
                                         const std::optional<std::string>& to);
// "2026-11" (YYYY-MM, month 01..12) as given; InvalidArgument otherwise.
base::Result<std::string> ParseMonth(std::string_view text);

// Whether a line of this kind bills compute (docs/billing.md, Line): job, app and notebook lines
// have minutes, a flavor and units; storage and token lines do not.
bool IsComputeKind(std::string_view kind);
// A line's quantity in its unit (docs/billing.md, Line): "4 unit-min" for compute (job, app,
// notebook: started minutes × units), "0.25 GiB-month" for storage (micro GiB-months), "1200
// tokens" for tokens; the bare number for a kind this client does not know.
std::string FormatQuantity(std::string_view kind, int64_t quantity);
// `part` as a percentage of `whole` with one decimal, rounded down: "24.6%"; "-" when `whole`
// is 0 or less. Exact for every int64 (no overflow, no floating point).
std::string FormatPercent(int64_t part, int64_t whole);

// One CSV field (RFC 4180): as is, or in double quotes with inner quotes doubled when it holds a
// comma, a quote, CR or LF.
std::string CsvField(std::string_view field);
// A CSV record: the fields joined by commas, ended by CRLF (RFC 4180).
std::string CsvRecord(const std::vector<std::string>& fields);
// The header of the billing lines' CSV (the Line members, in order) and the CSV of `lines` (an
// array of Line objects) under it. `amount_eur` is written from `amount_micro_eur`; a member a
// line lacks is an empty field. Anything but an array gives the header alone.
std::vector<std::string> LinesCsvHeader();
std::string LinesCsv(const nlohmann::json& lines);

}  // namespace sovai::cli::client
