#include "control/billing.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <optional>
#include <tuple>

#include "base/json.h"
#include "base/strings.h"
#include "base/time.h"

namespace sovai::control {
namespace {

using base::Result;
using base::Status;
using nlohmann::json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kMicroPerUnit = 1'000'000;

int64_t Saturate(unsigned __int128 v) {
  return v > static_cast<unsigned __int128>(kInt64Max) ? kInt64Max : static_cast<int64_t>(v);
}

// a × b for non-negative operands, saturating at the int64_t maximum.
int64_t MulSat(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  return Saturate(static_cast<unsigned __int128>(a) * static_cast<unsigned __int128>(b));
}

int64_t AddSat(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? kInt64Max : out;
}

// num / den rounded half up (den > 0). Exact for both parities of den: with an odd den no
// quotient lies exactly halfway.
int64_t DivRoundHalfUp(unsigned __int128 num, unsigned __int128 den) {
  return Saturate((num + den / 2) / den);
}

// ceil(a / b) for b > 0 and any sign of a.
int64_t CeilDiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
// floor(a / b) for b > 0 and any sign of a.
int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

std::string DayName(int64_t unix_micros) {
  base::CivilTime c = base::ToCivil(unix_micros);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", c.year, c.month, c.day);
  return buf;
}

}  // namespace

Result<Prices> ParsePrices(std::string_view text) {
  auto doc = base::ParseJson(text);
  if (!doc.ok()) return doc.status().WithContext("prices");
  if (!doc->is_object())
    return base::InvalidArgumentError("prices: the document must be an object");
  Prices prices;
  for (const auto& [key, value] : doc->items()) {
    if (key == "currency") {
      if (!value.is_string() || value.get<std::string>() != "EUR") {
        return base::InvalidArgumentError("prices: currency must be \"EUR\" (the only one)");
      }
    } else if (key == "price_per_gib_month_eur" || key == "price_per_million_tokens_eur") {
      if (!value.is_string()) {
        return base::InvalidArgumentError("prices: " + key +
                                          " must be a decimal string such as \"0.01\"");
      }
      auto micro = ParseMicroEur(value.get<std::string>());
      if (!micro.ok())
        return base::InvalidArgumentError("prices: " + key + ": " + micro.status().message());
      (key == "price_per_gib_month_eur" ? prices.gib_month_micro_eur
                                        : prices.million_tokens_micro_eur) = *micro;
    } else {
      return base::InvalidArgumentError("prices: unknown field '" + key +
                                        "'; the document has currency, price_per_gib_month_eur "
                                        "and price_per_million_tokens_eur");
    }
  }
  return prices;
}

std::string FormatEur(int64_t micro_eur) {
  // Magnitude as unsigned: INT64_MIN has no positive int64_t.
  const bool negative = micro_eur < 0;
  const uint64_t magnitude =
      negative ? uint64_t{0} - static_cast<uint64_t>(micro_eur) : static_cast<uint64_t>(micro_eur);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%" PRIu64 ".%06" PRIu64, negative ? "-" : "",
                magnitude / kMicroPerUnit, magnitude % kMicroPerUnit);
  return buf;
}

std::string_view LineKindName(LineKind kind) {
  switch (kind) {
    case LineKind::kJob:
      return "job";
    case LineKind::kApp:
      return "app";
    case LineKind::kNotebook:
      return "notebook";
    case LineKind::kStorage:
      return "storage";
    case LineKind::kTokens:
      return "tokens";
  }
  return "job";
}

json LineToJson(const Line& line) {
  return {{"project", line.project},
          {"kind", std::string(LineKindName(line.kind))},
          {"resource", line.resource},
          {"flavor", line.flavor},
          {"units", line.units},
          {"start", base::FormatRfc3339(line.start_unix_micros)},
          {"end", base::FormatRfc3339(line.end_unix_micros)},
          {"open", line.open},
          {"minutes", line.minutes},
          {"quantity", line.quantity},
          {"unit_price_micro_eur", line.unit_price_micro_eur},
          {"amount_micro_eur", line.amount_micro_eur},
          {"amount_eur", FormatEur(line.amount_micro_eur)}};
}

// --- Compute ---------------------------------------------------------------------------------
std::vector<RunningInterval> RunningIntervals(std::span<const JobTransition> history, int64_t now,
                                              std::span<const ServerRun> runs) {
  std::vector<RunningInterval> out;
  std::optional<int64_t> running_since;
  for (const JobTransition& t : history) {
    if (running_since) {
      out.push_back({*running_since, t.at_unix_micros, false});
      running_since.reset();
    }
    if (t.state == JobState::kRunning) running_since = t.at_unix_micros;
  }
  if (running_since) out.push_back({*running_since, now, true});
  for (RunningInterval& interval : out) {
    // The lifetime the interval started in, and whether a later one started before it ended.
    auto next = std::upper_bound(
        runs.begin(), runs.end(), interval.start_unix_micros,
        [](int64_t at, const ServerRun& run) { return at < run.started_unix_micros; });
    if (next == runs.begin() || next == runs.end()) continue;
    if (next->started_unix_micros > interval.end_unix_micros) continue;
    const ServerRun& own = *(next - 1);
    interval.end_unix_micros = std::max(interval.start_unix_micros,
                                        std::min(interval.end_unix_micros, own.alive_unix_micros));
    interval.open = false;
  }
  return out;
}

int64_t StartedMinutes(int64_t start, int64_t end) {
  if (end <= start) return 0;
  return CeilDiv(end - start, kMicrosPerMinute);
}

int64_t MinutesStartingIn(int64_t start, int64_t end, int64_t from, int64_t to) {
  const int64_t n = StartedMinutes(start, end);
  // Minute k starts at start + k min; it counts when from <= that < to.
  const int64_t first = std::max<int64_t>(0, CeilDiv(from - start, kMicrosPerMinute));
  const int64_t last = std::min(n, CeilDiv(to - start, kMicrosPerMinute));  // exclusive
  return std::max<int64_t>(0, last - first);
}

std::vector<Line> ComputeJobLines(std::span<const BillableJob> jobs, const FlavorCatalog& flavors,
                                  Window window, int64_t now, std::span<const ServerRun> runs) {
  std::vector<Line> out;
  const int64_t from = window.from_unix_micros;
  const int64_t to = window.to_unix_micros;
  for (const BillableJob& job : jobs) {
    auto flavor = flavors.Find(job.flavor);
    const int64_t price = flavor.ok() ? (*flavor)->price_micro_eur_per_minute : 0;
    for (const RunningInterval& interval : RunningIntervals(job.history, now, runs)) {
      const int64_t start = interval.start_unix_micros;
      const int64_t end = interval.end_unix_micros;
      if (end <= start) continue;
      // Minute starts lie in [start, end): the days to look at are those of max(start, from)
      // up to the one of min(end, to) - 1.
      const int64_t lo = std::max(start, from);
      const int64_t hi = std::min(end, to);
      if (lo >= hi) continue;
      for (int64_t day = FloorDiv(lo, kMicrosPerDay); day * kMicrosPerDay < hi; ++day) {
        const int64_t day_from = std::max(from, day * kMicrosPerDay);
        const int64_t day_to = std::min(to, (day + 1) * kMicrosPerDay);
        const int64_t minutes = MinutesStartingIn(start, end, day_from, day_to);
        if (minutes == 0) continue;
        Line line;
        line.project = job.project;
        // A replica's lines name its app, a notebook's job's lines the notebook.
        line.kind = !job.app.empty()        ? LineKind::kApp
                    : !job.notebook.empty() ? LineKind::kNotebook
                                            : LineKind::kJob;
        line.resource = !job.app.empty() ? job.app : !job.notebook.empty() ? job.notebook : job.id;
        line.flavor = job.flavor;
        line.units = job.units;
        line.start_unix_micros = std::max(start, day_from);
        line.end_unix_micros = std::min(end, day_to);
        line.open = interval.open && end <= day_to;
        line.minutes = minutes;
        line.quantity = MulSat(minutes, job.units);
        line.unit_price_micro_eur = price;
        line.amount_micro_eur = MulSat(line.quantity, price);
        out.push_back(std::move(line));
      }
    }
  }
  return out;
}

// --- Storage ---------------------------------------------------------------------------------
std::vector<Line> ComputeStorageLines(std::span<const StorageSample> samples, const Prices& prices,
                                      Window window, int64_t now) {
  // The largest sample of each (project, resource, hour) whose hour starts in the window.
  std::map<std::tuple<std::string, std::string, int64_t>, uint64_t> hours;
  for (const StorageSample& s : samples) {
    const int64_t hour = FloorDiv(s.at_unix_micros, kMicrosPerHour);
    const int64_t hour_start = hour * kMicrosPerHour;
    if (hour_start < window.from_unix_micros || hour_start >= window.to_unix_micros) continue;
    uint64_t& bytes = hours[{s.project, s.resource, hour}];
    bytes = std::max(bytes, s.bytes);
  }
  struct Day {
    unsigned __int128 byte_hours = 0;
    int64_t first_hour = 0;
    int64_t last_hour = 0;
  };
  std::map<std::tuple<std::string, std::string, int64_t>, Day> days;  // (project, resource, day)
  for (const auto& [key, bytes] : hours) {
    const auto& [project, resource, hour] = key;
    const int64_t day = FloorDiv(hour * kMicrosPerHour, kMicrosPerDay);
    auto [it, inserted] = days.try_emplace({project, resource, day});
    Day& d = it->second;
    if (inserted) d.first_hour = hour;
    d.last_hour = hour;  // the map iterates hours in order
    d.byte_hours += bytes;
  }
  const unsigned __int128 gib_month_byte_hours =
      static_cast<unsigned __int128>(kBytesPerGib) * kHoursPerBillingMonth;
  std::vector<Line> out;
  for (const auto& [key, d] : days) {
    if (d.byte_hours == 0) continue;
    Line line;
    line.project = std::get<0>(key);
    line.kind = LineKind::kStorage;
    line.resource = std::get<1>(key);
    line.start_unix_micros = d.first_hour * kMicrosPerHour;
    line.end_unix_micros = (d.last_hour + 1) * kMicrosPerHour;
    line.open = line.end_unix_micros > now;
    line.quantity = DivRoundHalfUp(d.byte_hours * kMicroPerUnit, gib_month_byte_hours);
    line.unit_price_micro_eur = prices.gib_month_micro_eur;
    line.amount_micro_eur = DivRoundHalfUp(
        d.byte_hours * static_cast<uint64_t>(prices.gib_month_micro_eur), gib_month_byte_hours);
    out.push_back(std::move(line));
  }
  return out;
}

// --- Tokens ----------------------------------------------------------------------------------
std::vector<Line> ComputeTokenLines(std::span<const TokenUsage> usage,
                                    const std::map<std::string, std::string>& endpoint_of_app,
                                    const Prices& prices, Window window, int64_t now) {
  struct Acc {
    int64_t tokens = 0;
    int64_t first_minute = 0;
    int64_t last_minute = 0;
    bool any = false;
  };
  // (calling project, endpoint, day)
  std::map<std::tuple<std::string, std::string, int64_t>, Acc> acc;
  for (const TokenUsage& u : usage) {
    auto endpoint = endpoint_of_app.find(u.app);
    if (endpoint == endpoint_of_app.end()) continue;
    const int64_t minute_start = u.minute * kMicrosPerMinute;
    if (minute_start < window.from_unix_micros || minute_start >= window.to_unix_micros) continue;
    const int64_t tokens =
        AddSat(std::max<int64_t>(0, u.prompt_tokens), std::max<int64_t>(0, u.completion_tokens));
    Acc& a = acc[{u.project, endpoint->second, FloorDiv(minute_start, kMicrosPerDay)}];
    a.first_minute = a.any ? std::min(a.first_minute, u.minute) : u.minute;
    a.last_minute = a.any ? std::max(a.last_minute, u.minute) : u.minute;
    a.any = true;
    a.tokens = AddSat(a.tokens, tokens);
  }
  std::vector<Line> out;
  for (const auto& [key, a] : acc) {
    if (a.tokens == 0) continue;
    Line line;
    line.project = std::get<0>(key);
    line.kind = LineKind::kTokens;
    line.resource = std::get<1>(key);
    line.start_unix_micros = a.first_minute * kMicrosPerMinute;
    line.end_unix_micros = (a.last_minute + 1) * kMicrosPerMinute;
    line.open = line.end_unix_micros > now;
    line.quantity = a.tokens;
    line.unit_price_micro_eur = prices.million_tokens_micro_eur;
    line.amount_micro_eur =
        DivRoundHalfUp(static_cast<unsigned __int128>(a.tokens) *
                           static_cast<uint64_t>(prices.million_tokens_micro_eur),
                       kMicroPerUnit);
    out.push_back(std::move(line));
  }
  return out;
}

void SortLines(std::vector<Line>& lines) {
  std::stable_sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) {
    return std::tie(a.start_unix_micros, a.project, a.kind, a.resource) <
           std::tie(b.start_unix_micros, b.project, b.kind, b.resource);
  });
}

int64_t SumAmounts(std::span<const Line> lines) {
  int64_t total = 0;
  for (const Line& line : lines) total = AddSat(total, line.amount_micro_eur);
  return total;
}

// --- Groups ----------------------------------------------------------------------------------
Result<GroupBy> ParseGroupBy(std::string_view text) {
  if (text == "project") return GroupBy::kProject;
  if (text == "flavor") return GroupBy::kFlavor;
  if (text == "resource") return GroupBy::kResource;
  if (text == "day") return GroupBy::kDay;
  return base::InvalidArgumentError("group_by must be project, flavor, resource or day, not '" +
                                    std::string(text) + "'");
}

std::vector<Group> GroupLines(std::span<const Line> lines, GroupBy by) {
  std::map<std::string, Group> groups;
  for (const Line& line : lines) {
    std::string key;
    switch (by) {
      case GroupBy::kProject:
        key = line.project;
        break;
      case GroupBy::kFlavor:
        key = line.flavor.empty() ? std::string(LineKindName(line.kind)) : line.flavor;
        break;
      case GroupBy::kResource:
        key = line.resource;
        break;
      case GroupBy::kDay:
        key = DayName(line.start_unix_micros);
        break;
    }
    Group& g = groups[key];
    g.key = key;
    g.amount_micro_eur = AddSat(g.amount_micro_eur, line.amount_micro_eur);
    g.minutes = AddSat(g.minutes, line.minutes);
    g.quantity = AddSat(g.quantity, line.quantity);
  }
  std::vector<Group> out;
  out.reserve(groups.size());
  for (auto& [key, g] : groups) out.push_back(std::move(g));
  return out;
}

// --- Months ----------------------------------------------------------------------------------
std::string Month::Name() const {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02d", year, month);
  return buf;
}

namespace {
Month MakeMonth(int year, int month) {
  Month m;
  m.year = year;
  m.month = month;
  base::CivilTime start;
  start.year = year;
  start.month = month;
  base::CivilTime next = start;
  next.year = month == 12 ? year + 1 : year;
  next.month = month == 12 ? 1 : month + 1;
  // Valid by construction: day 1 of a month of a year in range.
  m.start_unix_micros = *base::FromCivil(start);
  m.end_unix_micros = *base::FromCivil(next);
  return m;
}
}  // namespace

Result<Month> ParseMonth(std::string_view text) {
  auto bad = [&] {
    return base::InvalidArgumentError("month must be YYYY-MM (e.g. 2026-03), not '" +
                                      std::string(text) + "'");
  };
  if (text.size() != 7 || text[4] != '-') return bad();
  for (size_t i : {0, 1, 2, 3, 5, 6}) {
    if (text[i] < '0' || text[i] > '9') return bad();
  }
  const int year = std::stoi(std::string(text.substr(0, 4)));
  const int month = std::stoi(std::string(text.substr(5, 2)));
  if (year < 1970 || year > 9998 || month < 1 || month > 12) return bad();
  return MakeMonth(year, month);
}

Month MonthOf(int64_t unix_micros) {
  base::CivilTime c = base::ToCivil(unix_micros);
  return MakeMonth(c.year, c.month);
}

Statement MakeStatement(std::string project, const Month& month, std::vector<Line> lines) {
  Statement s;
  s.project = std::move(project);
  s.month = month;
  SortLines(lines);
  s.lines = std::move(lines);
  s.total_micro_eur = SumAmounts(s.lines);
  return s;
}

// --- Prices of what has not run yet, and budgets ---------------------------------------------
int64_t PricePerMinute(const Flavor& flavor, int units) {
  return MulSat(flavor.price_micro_eur_per_minute, units);
}

int64_t CostAtTimeout(int64_t price_per_minute_micro_eur, int64_t timeout_s) {
  return MulSat(StartedMinutes(0, MulSat(timeout_s, base::kMicrosPerSecond)),
                price_per_minute_micro_eur);
}

bool BudgetAlert(const Budget& budget, int64_t spent_micro_eur) {
  // spent / cap >= percent / 100, without division.
  return static_cast<__int128>(spent_micro_eur) * 100 >=
         static_cast<__int128>(budget.monthly_cap_micro_eur) * budget.alert_percent;
}

bool BudgetCapped(const Budget& budget, int64_t spent_micro_eur) {
  return spent_micro_eur >= budget.monthly_cap_micro_eur;
}

Status CheckBudget(const Budget& budget, int64_t spent_micro_eur, int64_t worst_case_micro_eur,
                   std::string_view what) {
  const std::string cap = FormatEur(budget.monthly_cap_micro_eur);
  const std::string spent = FormatEur(spent_micro_eur);
  if (BudgetCapped(budget, spent_micro_eur)) {
    return base::FailedPreconditionError(
        "the project's monthly budget cap of " + cap + " € is reached (spent this month: " + spent +
        " €); " + std::string(what) + " would cost up to " + FormatEur(worst_case_micro_eur) +
        " €; a project admin can raise the cap (sovai budget set)");
  }
  if (AddSat(spent_micro_eur, worst_case_micro_eur) > budget.monthly_cap_micro_eur) {
    return base::FailedPreconditionError(
        std::string(what) + " would cost up to " + FormatEur(worst_case_micro_eur) +
        " € at its timeout; with " + spent +
        " € spent this month that exceeds the project's "
        "monthly budget cap of " +
        cap + " € (" + FormatEur(budget.monthly_cap_micro_eur - spent_micro_eur) +
        " € left); give it a shorter timeout (--timeout) or raise the cap");
  }
  return Status();
}

}  // namespace sovai::control
