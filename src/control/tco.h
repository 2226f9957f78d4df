// The arithmetic of `sovai tco` and `GET /v1/tco` (docs/tco.md): the monthly cost of owning N GPUs
// against paying for the same GPU-hours at the catalog price, the utilisation where both are
// equal, and how many months a purchase takes to pay for itself. One piece of code for the CLI
// (src/cli/client/tco_command.cc) and the server (tco_api.h), so both answer the same numbers from
// the same inputs and defaults. Pure computation, no I/O.
//
//   TcoInputs in;                                   // the brief's defaults (8×H100, 200 000 €)
//   in.price_per_gpu_minute_micro_eur = 46'700;     // h100-1-gpu, 0.0467 €/min
//   SOVAI_RETURN_IF_ERROR(ValidateTcoInputs(in));
//   TcoReport report = ComputeTco(in, std::nullopt);
//   report.owning.total_cents();                    // 1'507'833 (15 078.33 €/month)
//
// Every decimal input is an integer of millionths (µ€, µkW, ppm) parsed from its text with
// ParseTcoDecimal, never through a double; every cost is rounded once, half up, to whole cents,
// and a total is the sum of its displayed parts, so the printed columns always add up.
// Errors are InvalidArgument naming the input as the caller spells it (the flag "--utilisation"
// or the query parameter "utilisation"). Thread-safety: pure functions and values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sovai::control {

// One million: the denominator of every decimal input (µ€, µkW, ppm).
inline constexpr int64_t kTcoMicro = 1'000'000;
// A month of a server that never sleeps: 8 760 h / 12, the same month the billing uses for
// GiB-months (docs/billing.md).
inline constexpr int64_t kTcoHoursPerMonth = 730;
inline constexpr int64_t kTcoMinutesPerMonth = kTcoHoursPerMonth * 60;
// The history `sovai tco` reads from /v1/billing/usage.
inline constexpr int64_t kTcoHistoryDays = 90;

// Limits on the inputs: far above any real server, and low enough that every product below fits
// an __int128 with room to spare (and every cents result an int64).
inline constexpr int64_t kTcoMaxGpus = 100'000;
inline constexpr int64_t kTcoMaxDepreciationMonths = 600;
inline constexpr int64_t kTcoMaxEur = 1'000'000'000;           // any one amount, in euros
inline constexpr int64_t kTcoMaxPowerKw = 1'000'000;           // a data centre
inline constexpr int64_t kTcoMaxEurPerKwh = 1'000;             // per kWh
inline constexpr int64_t kTcoMaxCoolingOverhead = 10;          // PUE 11
inline constexpr int64_t kTcoMaxPricePerGpuMinuteEur = 1'000;  // per GPU-minute
inline constexpr int kTcoMaxDecimals = 6;
inline constexpr size_t kTcoMaxGpuModelBytes = 64;  // GET /v1/tco's gpu_model

// The inputs, with the defaults of the brief (docs/tco.md gives the source of each).
struct TcoInputs {
  int64_t gpus = 8;
  // The catalog price of one GPU for one minute; 0 until the caller fills it in (the flavor list
  // or --price-per-gpu-minute-eur): ValidateTcoInputs refuses 0.
  int64_t price_per_gpu_minute_micro_eur = 0;
  int64_t purchase_micro_eur = 200'000 * kTcoMicro;
  int64_t power_micro_kw = 10'200'000;  // 10.2 kW, an 8×H100 DGX-class server
  int64_t micro_eur_per_kwh = 250'000;
  int64_t cooling_overhead_ppm = 400'000;  // 0.4 on top of the server's draw
  int64_t rack_micro_eur_per_month = 1'500 * kTcoMicro;
  int64_t maintenance_micro_eur_per_year = 20'000 * kTcoMicro;
  int64_t staff_micro_eur_per_year = 90'000 * kTcoMicro;
  int64_t staff_fraction_ppm = 500'000;
  int64_t depreciation_months = 36;
  int64_t utilisation_ppm = 600'000;
};

// How an error names an input: as the CLI's flag ("--purchase-eur") or as the query parameter of
// GET /v1/tco ("purchase_eur").
enum class TcoNames : uint8_t { kFlags, kQuery };
// "--purchase-eur" or "purchase_eur" for the input `name` of kTcoDecimalInputs ("purchase-eur").
std::string TcoInputName(std::string_view name, TcoNames names);

// OK, or InvalidArgument naming the first input out of range (gpus 1..kTcoMaxGpus,
// depreciation-months 1..kTcoMaxDepreciationMonths, utilisation and staff-fraction 0..1,
// purchase-eur > 0, the price > 0, every other input ≥ 0 and under its kTcoMax*). `bad_input`,
// when given, receives that input's name as kTcoDecimalInputs spells it ("utilisation").
base::Status ValidateTcoInputs(const TcoInputs& in, TcoNames names = TcoNames::kFlags,
                               std::string* bad_input = nullptr);

// The decimal inputs, one table for the CLI's flags and the query parameters of GET /v1/tco:
// the name (flag spelling, without "--"), the default as text (what --help shows; "" for the
// price, which comes from the catalog), the member it sets, its bound in whole units, and help.
struct TcoDecimalInput {
  std::string_view name;
  std::string_view default_text;
  int64_t TcoInputs::*member;
  int64_t max_units;
  std::string_view help;
};
extern const TcoDecimalInput kTcoDecimalInputs[10];
// The whole-number inputs: "gpus" and "depreciation-months".
inline constexpr std::string_view kTcoGpusInput = "gpus";
inline constexpr std::string_view kTcoDepreciationMonthsInput = "depreciation-months";

// A non-negative decimal ("0.25", "10.2", "200000", ".5") in millionths, for the flag `flag`
// ("--eur-per-kwh"): at most six decimals (a seventh is an error, not a silent rounding), at most
// `max_units` before scaling, no sign, exponent, spaces or separators. InvalidArgument naming the
// flag and quoting the text otherwise.
base::Result<int64_t> ParseTcoDecimal(std::string_view flag, std::string_view text,
                                      int64_t max_units);

// The monthly cost of owning, part by part, each rounded half up to whole cents.
struct OwningCost {
  int64_t depreciation_cents = 0;  // purchase / depreciation months
  int64_t power_cents = 0;         // kW × 730 h × €/kWh
  int64_t cooling_cents = 0;       // the power cost × cooling overhead
  int64_t rack_cents = 0;          // colocation per month
  int64_t maintenance_cents = 0;   // the yearly contract / 12
  int64_t staff_cents = 0;         // salary × fraction / 12
  // The sum of the parts above (so that a printed table adds up to the cent).
  int64_t total_cents() const;
  // What owning costs each month once the server is paid for: the total without depreciation.
  int64_t running_cents() const { return total_cents() - depreciation_cents; }
};
OwningCost ComputeOwningCost(const TcoInputs& in);

// GPU-minutes a month at `utilisation_ppm` of the N GPUs (rounded half up to whole minutes).
int64_t GpuMinutesPerMonth(int64_t gpus, int64_t utilisation_ppm);
// Pay-as-you-go for `gpu_minutes` at the catalog price, rounded half up to cents.
int64_t PayAsYouGoCents(int64_t gpu_minutes, int64_t price_per_gpu_minute_micro_eur);
// The utilisation (ppm, rounded half up) at which pay-as-you-go for all N GPUs costs
// `owning_cents`; above kTcoMicro (100 %) when owning never pays off. Requires gpus > 0 and a
// price > 0 (ValidateTcoInputs).
int64_t BreakEvenUtilisationPpm(int64_t owning_cents, int64_t gpus,
                                int64_t price_per_gpu_minute_micro_eur);
// Whole months (rounded up) until buying has cost no more than renting: the purchase against what
// renting costs beyond owning's running costs each month. nullopt ("never") when pay-as-you-go
// is not dearer than owning's monthly total (depreciation included); 0 when nothing was paid.
std::optional<int64_t> MonthsToBreakEven(int64_t purchase_micro_eur, const OwningCost& owning,
                                         int64_t pay_as_you_go_cents);

// The project's real GPU use of one flavor, from GET /v1/billing/usage?group_by=flavor.
struct UsageHistory {
  std::string flavor;
  int64_t window_minutes = 0;  // the span the answer covers
  int64_t gpu_minutes = 0;     // started minutes × units × GPUs per unit, over the window
};
// Sums the `quantity` (started minutes × units) of the groups whose key is `flavor` and scales
// it by `gpus_per_unit`. InvalidArgument when `window_minutes` ≤ 0, `gpus_per_unit` < 1, the
// answer has no `groups` array, or a matching group's quantity is not a non-negative integer.
base::Result<UsageHistory> DeriveUsageHistory(const nlohmann::json& usage_answer,
                                              std::string_view flavor, int64_t gpus_per_unit,
                                              int64_t window_minutes);
// The history as GPU-minutes per 730-hour month (rounded half up).
int64_t HistoryGpuMinutesPerMonth(const UsageHistory& history);

// One comparison: owning against renting the same GPU-minutes.
struct TcoScenario {
  int64_t utilisation_ppm = 0;  // of the N GPUs (may pass 100 % for a history above N GPUs)
  int64_t gpu_minutes_per_month = 0;
  int64_t pay_as_you_go_cents = 0;
  int64_t owning_cents = 0;
  std::optional<int64_t> months_to_break_even;  // nullopt: never
  bool owning_cheaper() const { return owning_cents < pay_as_you_go_cents; }
};

struct TcoReport {
  OwningCost owning;
  int64_t pay_as_you_go_full_cents = 0;  // all N GPUs busy all month
  int64_t break_even_utilisation_ppm = 0;
  TcoScenario assumed;                // at --utilisation
  std::optional<TcoScenario> actual;  // at the history's GPU-minutes, when there is one
};
// Everything `sovai tco` prints. `in` must have passed ValidateTcoInputs.
TcoReport ComputeTco(const TcoInputs& in, const std::optional<UsageHistory>& history);

// "15078.33" (cents as euros, exact), "-0.05".
std::string FormatCents(int64_t cents);
// "92.15%" (ppm as a percentage, two decimals, rounded half up).
std::string FormatPpmPercent(int64_t ppm);

// The plot: monthly cost (€) against utilisation 0..100 %, the flat owning line, the rising
// pay-as-you-go line, the break-even point marked when it is within 100 %, the assumed (and
// actual, when there is one) utilisation as dashed verticals, axis labels and ticks. A complete
// SVG 1.1 document; `title` is escaped.
std::string RenderTcoSvg(const TcoReport& report, std::string_view title);

// One GPU flavor of the catalog, as far as the comparison needs it.
struct TcoFlavor {
  std::string id;
  std::string gpu_model;
  int64_t gpus_per_unit = 0;
  int64_t price_micro_eur_per_minute = 0;  // per unit
};
// The catalog's price of one GPU-minute of a model.
struct TcoCatalogPrice {
  std::string flavor;  // "h100-1-gpu"
  int64_t gpus_per_unit = 1;
  int64_t price_per_gpu_minute_micro_eur = 0;
};
// The flavor of `gpu_model` (case-insensitive) with the fewest GPUs per unit (then the smallest
// id) among `gpu_flavors`; its price per unit ÷ GPUs per unit, rounded half up to the µ€.
// Flavors without GPUs or without a price are skipped. NotFound naming the models there are
// otherwise (and the inputs to change, spelled as `names` says).
base::Result<TcoCatalogPrice> FindTcoCatalogPrice(const std::vector<TcoFlavor>& gpu_flavors,
                                                  std::string_view gpu_model,
                                                  TcoNames names = TcoNames::kFlags);

// Where the numbers came from, for the JSON answer.
struct TcoContext {
  std::string gpu_model;              // as asked ("H100")
  std::optional<std::string> flavor;  // the catalog flavor whose price is used
  bool price_given = false;           // the price came from the caller, not the catalog
  // With report.actual: the history and its window (RFC 3339).
  std::optional<UsageHistory> history;
  std::string history_from;
  std::string history_to;
};
// The comparison as `sovai tco -o json` prints it and GET /v1/tco answers it: every amount in
// integer cents (docs/tco.md, Output).
nlohmann::json TcoReportJson(const TcoInputs& in, const TcoReport& report, const TcoContext& ctx);

// The monthly costs over utilisation 0..100 % in steps of `step_ppm` (100 % included): the flat
// owning line and the rising pay-as-you-go line, the plot's two curves as numbers.
struct TcoCurvePoint {
  int64_t utilisation_ppm = 0;
  int64_t owning_cents = 0;
  int64_t pay_as_you_go_cents = 0;
};
inline constexpr int64_t kTcoCurveStepPpm = 50'000;  // 5 %: 21 points
std::vector<TcoCurvePoint> TcoCurves(const TcoInputs& in, const TcoReport& report,
                                     int64_t step_ppm = kTcoCurveStepPpm);

}  // namespace sovai::control
