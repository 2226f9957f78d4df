// Billing arithmetic (docs/billing.md): the ledger lines of compute, storage and tokens, their
// groups, the monthly statement and the budget rules, as pure functions over rows the billing
// service (billing_service.h) reads from the control database.
//
// Money is an int64_t of micro-euros (µ€) from the first multiplication to the total; the only
// rounding is the one of storage and token lines (half up, once per line, from exact integer
// fractions). Products that would exceed int64_t saturate at its maximum (no price in the catalog
// comes near: 9 integer digits of € per minute is the most a price may have).
//
// Lines are cut at UTC days and at the window asked for, so that groups by day and sums of
// adjacent windows are exact: the started minutes of a RUNNING interval are numbered from its
// start, and minute k belongs to the day (and the window) in which it starts. The minutes of an
// interval over all days therefore equal ceil(seconds / 60) of the whole interval.
//
// Thread-safety: pure functions and values.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "control/flavors.h"
#include "control/jobs.h"

namespace sovai::control {

inline constexpr int64_t kMicrosPerMinute = 60'000'000;
inline constexpr int64_t kMicrosPerHour = 3'600'000'000;
inline constexpr int64_t kMicrosPerDay = 86'400'000'000;
// 1 GiB-month = 2^30 bytes held for 730 hours.
inline constexpr uint64_t kBytesPerGib = uint64_t{1} << 30;
inline constexpr int64_t kHoursPerBillingMonth = 730;

// The prices that are not the flavors' (`sovai server --prices FILE`).
struct Prices {
  std::string currency = "EUR";
  int64_t gib_month_micro_eur = 10'000;        // price_per_gib_month_eur "0.01"
  int64_t million_tokens_micro_eur = 500'000;  // price_per_million_tokens_eur "0.50"
};

// Parses {"currency": "EUR", "price_per_gib_month_eur": "0.01",
// "price_per_million_tokens_eur": "0.50"}; a missing member keeps its default. InvalidArgument
// naming the field for a malformed document, a currency other than EUR, a price that is not a
// non-negative decimal string with at most 6 decimals, or an unknown member.
base::Result<Prices> ParsePrices(std::string_view json);

// "%d.%06d": 93400 → "0.093400". Negative amounts (a budget left below zero) get a '-'.
std::string FormatEur(int64_t micro_eur);

// --- Lines ---------------------------------------------------------------------------------
enum class LineKind : uint8_t { kJob, kApp, kNotebook, kStorage, kTokens };
// "job", "app", "notebook", "storage", "tokens"
std::string_view LineKindName(LineKind kind);

// What storage lines name as their resource: all buckets of the project, sampled together.
inline constexpr std::string_view kStorageResource = "buckets";

struct Line {
  std::string project;
  LineKind kind = LineKind::kJob;
  std::string resource;  // job id, app id, a storage resource, or the endpoint's name
  std::string flavor;    // compute only
  int units = 0;         // compute only
  int64_t start_unix_micros = 0;
  int64_t end_unix_micros = 0;
  bool open = false;  // still growing (a running job, today's storage, this minute's tokens)
  int64_t minutes = 0;
  // Started minutes × units (compute), micro-GiB-months (storage), tokens.
  int64_t quantity = 0;
  // Per unit-minute (compute), per GiB-month (storage), per million tokens (tokens).
  int64_t unit_price_micro_eur = 0;
  int64_t amount_micro_eur = 0;
  bool operator==(const Line&) const = default;
};

// The Line of docs/billing.md (times as RFC 3339).
nlohmann::json LineToJson(const Line& line);

// [from, to) in Unix microseconds.
struct Window {
  int64_t from_unix_micros = 0;
  int64_t to_unix_micros = 0;
};

// One lifetime of the server process: when it started and the last time it was known alive
// (the billing service's heartbeat). A RUNNING interval that spans the start of a later
// lifetime was cut short by a crash; it is billed only up to the heartbeat of its own lifetime.
struct ServerRun {
  int64_t started_unix_micros = 0;
  int64_t alive_unix_micros = 0;
};

struct RunningInterval {
  int64_t start_unix_micros = 0;
  int64_t end_unix_micros = 0;
  bool open = false;  // the job is still RUNNING: the interval ends at `now`
  bool operator==(const RunningInterval&) const = default;
};

// The RUNNING intervals of a job's history: from each entry into RUNNING to the next transition
// (DONE, FAILED, FINALIZING, ...), or to `now` when RUNNING is the last state. `runs` (sorted by
// start) cut intervals that a crash ended, see ServerRun.
std::vector<RunningInterval> RunningIntervals(std::span<const JobTransition> history, int64_t now,
                                              std::span<const ServerRun> runs);

// ceil((end - start) / 1 min); 0 when end <= start.
int64_t StartedMinutes(int64_t start_unix_micros, int64_t end_unix_micros);
// How many of the started minutes of [start, end) start in [from, to).
int64_t MinutesStartingIn(int64_t start_unix_micros, int64_t end_unix_micros,
                          int64_t from_unix_micros, int64_t to_unix_micros);

// A job row as billing needs it.
struct BillableJob {
  std::string id;
  std::string project;
  std::string flavor;
  int units = 1;
  std::string app;  // the sovai.app label of a replica; "" for a job
  std::vector<JobTransition> history;
  std::string notebook;  // the sovai.notebook label of a notebook's job; "" otherwise
};

// Compute lines: one per RUNNING interval per UTC day, in `window`, at the catalog's price per
// unit-minute. A flavor that left the catalog is billed at 0 (the catalog is the price list).
std::vector<Line> ComputeJobLines(std::span<const BillableJob> jobs, const FlavorCatalog& flavors,
                                  Window window, int64_t now, std::span<const ServerRun> runs);

// Registry repositories are storage resources of their own (docs/billing.md): a repository's
// resource is "registry:<project>/<name>"; blobs no manifest references (until `sovai registry
// gc`) are the project's "registry".
inline constexpr std::string_view kRegistryResourcePrefix = "registry:";
inline constexpr std::string_view kRegistryUnreferencedResource = "registry";

// What a project holds in one storage resource: its buckets (kStorageResource) or a registry
// resource.
struct StorageUsage {
  std::string project;
  std::string resource = std::string(kStorageResource);
  uint64_t bytes = 0;
};

// One hourly sample of a project's bytes in a storage resource.
struct StorageSample {
  std::string project;
  int64_t at_unix_micros = 0;
  uint64_t bytes = 0;
  std::string resource = std::string(kStorageResource);
};

// Storage lines: one per project and resource per UTC day. Each hour counts once, with the largest
// sample taken in it (restarts and faster sampling do not bill an hour twice); the hour belongs to
// the window when it starts in it. amount = byte-hours × price / (2^30 × 730) and quantity =
// byte-hours × 10^6 / (2^30 × 730), each rounded half up.
std::vector<Line> ComputeStorageLines(std::span<const StorageSample> samples, const Prices& prices,
                                      Window window, int64_t now);

// One row of app_usage.
struct TokenUsage {
  std::string app;
  std::string project;  // the calling project
  int64_t minute = 0;   // Unix time / 60
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// Token lines: one per calling project per catalog endpoint per UTC day, for rows of the apps in
// `endpoint_of_app` (app id → endpoint name; other apps' traffic is not billed as tokens).
// amount = tokens × price per million / 10^6, rounded half up.
std::vector<Line> ComputeTokenLines(std::span<const TokenUsage> usage,
                                    const std::map<std::string, std::string>& endpoint_of_app,
                                    const Prices& prices, Window window, int64_t now);

// By start, then project, kind, resource.
void SortLines(std::vector<Line>& lines);
int64_t SumAmounts(std::span<const Line> lines);

// --- Groups --------------------------------------------------------------------------------
enum class GroupBy : uint8_t { kProject, kFlavor, kResource, kDay };
// "project", "flavor", "resource", "day"; InvalidArgument naming the choices otherwise.
base::Result<GroupBy> ParseGroupBy(std::string_view text);

struct Group {
  std::string key;  // the project, the flavor (or "storage"/"tokens"), the resource, "YYYY-MM-DD"
  int64_t amount_micro_eur = 0;
  int64_t minutes = 0;
  int64_t quantity = 0;
  bool operator==(const Group&) const = default;
};
// Sums by key, sorted by key. A line's day is the UTC day of its start.
std::vector<Group> GroupLines(std::span<const Line> lines, GroupBy by);

// --- Months and statements -------------------------------------------------------------------
struct Month {
  int year = 1970;
  int month = 1;  // 1..12
  int64_t start_unix_micros = 0;
  int64_t end_unix_micros = 0;  // the next month's start
  std::string Name() const;     // "2026-03"
};
// "YYYY-MM" (years 1970..9998). InvalidArgument otherwise.
base::Result<Month> ParseMonth(std::string_view text);
// The UTC month of an instant.
Month MonthOf(int64_t unix_micros);

struct Statement {
  std::string project;
  Month month;
  std::vector<Line> lines;
  int64_t total_micro_eur = 0;  // always SumAmounts(lines)
};
// The statement of `lines` (sorted); its total is the sum of the lines.
Statement MakeStatement(std::string project, const Month& month, std::vector<Line> lines);

// --- Prices of what has not run yet, and budgets ---------------------------------------------
// flavor price × units, saturating.
int64_t PricePerMinute(const Flavor& flavor, int units);
// ceil(timeout_s / 60) started minutes × price_per_minute: what a job costs when it runs exactly
// to its timeout (the bill of ComputeJobLines for a RUNNING interval of timeout_s seconds).
int64_t CostAtTimeout(int64_t price_per_minute_micro_eur, int64_t timeout_s);

struct Budget {
  int64_t monthly_cap_micro_eur = 0;
  int alert_percent = 80;  // 1..100
};
// spent >= alert_percent % of the cap.
bool BudgetAlert(const Budget& budget, int64_t spent_micro_eur);
// spent >= the cap.
bool BudgetCapped(const Budget& budget, int64_t spent_micro_eur);
// Admission: OK when the project is under its cap and spent + worst_case stays within it;
// FailedPrecondition with the numbers otherwise. `what` names the workload ("job flavor
// ai1-1-cpu x1 for 60 s").
base::Status CheckBudget(const Budget& budget, int64_t spent_micro_eur,
                         int64_t worst_case_micro_eur, std::string_view what);

}  // namespace sovai::control
