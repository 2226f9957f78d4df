// The arithmetic of `sovai tco` and GET /v1/tco: integers of millionths in, whole cents out
// (docs/tco.md).
#include "control/tco.h"

#include <algorithm>
#include <cstdio>

#include "base/strings.h"

namespace sovai::control {
namespace {

using Json = nlohmann::json;
using I128 = __int128;

constexpr int64_t kMicroEurPerCent = 10'000;

// num / den rounded half up; both non-negative, den > 0 (every caller's inputs are validated).
int64_t RoundDiv(I128 num, I128 den) { return static_cast<int64_t>((num + den / 2) / den); }

base::Status OutOfRange(std::string_view flag, std::string_view rule) {
  return base::InvalidArgumentError(std::string(flag) + " must be " + std::string(rule));
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

const TcoDecimalInput kTcoDecimalInputs[10] = {
    {"price-per-gpu-minute-eur", "", &TcoInputs::price_per_gpu_minute_micro_eur,
     kTcoMaxPricePerGpuMinuteEur, "the price of one GPU-minute; the catalog's when logged in"},
    {"purchase-eur", "200000", &TcoInputs::purchase_micro_eur, kTcoMaxEur,
     "what the server costs to buy"},
    {"power-kw", "10.2", &TcoInputs::power_micro_kw, kTcoMaxPowerKw, "the server's draw, in kW"},
    {"eur-per-kwh", "0.25", &TcoInputs::micro_eur_per_kwh, kTcoMaxEurPerKwh, "the price of energy"},
    {"cooling-overhead", "0.4", &TcoInputs::cooling_overhead_ppm, kTcoMaxCoolingOverhead,
     "cooling as a fraction of the server's power (PUE - 1)"},
    {"rack-eur-per-month", "1500", &TcoInputs::rack_micro_eur_per_month, kTcoMaxEur,
     "rack space / colocation"},
    {"maintenance-eur-per-year", "20000", &TcoInputs::maintenance_micro_eur_per_year, kTcoMaxEur,
     "the maintenance contract"},
    {"staff-eur-per-year", "90000", &TcoInputs::staff_micro_eur_per_year, kTcoMaxEur,
     "the yearly cost of the engineer who runs it"},
    {"staff-fraction", "0.5", &TcoInputs::staff_fraction_ppm, 1,
     "the share of that engineer's time"},
    {"utilisation", "0.6", &TcoInputs::utilisation_ppm, 1,
     "the fraction of the hours the GPUs are busy (0..1)"},
};

std::string TcoInputName(std::string_view name, TcoNames names) {
  if (names == TcoNames::kFlags) return "--" + std::string(name);
  std::string out(name);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

base::Status ValidateTcoInputs(const TcoInputs& in, TcoNames names, std::string* bad_input) {
  const auto out_of_range = [&](std::string_view name, std::string_view rule) {
    if (bad_input != nullptr) *bad_input = std::string(name);
    return OutOfRange(TcoInputName(name, names), rule);
  };
  if (in.gpus < 1 || in.gpus > kTcoMaxGpus) {
    return out_of_range(kTcoGpusInput, "between 1 and " + std::to_string(kTcoMaxGpus));
  }
  if (in.depreciation_months < 1 || in.depreciation_months > kTcoMaxDepreciationMonths) {
    return out_of_range(kTcoDepreciationMonthsInput,
                        "between 1 and " + std::to_string(kTcoMaxDepreciationMonths));
  }
  for (const TcoDecimalInput& d : kTcoDecimalInputs) {
    const int64_t value = in.*d.member;
    const std::string max = std::to_string(d.max_units);
    std::string rule;
    int64_t min = 0;
    if (d.member == &TcoInputs::price_per_gpu_minute_micro_eur ||
        d.member == &TcoInputs::purchase_micro_eur) {
      min = 1;
      rule = "more than 0 and at most " + max;
    } else if (d.member == &TcoInputs::staff_fraction_ppm) {
      rule = "between 0 and 1 (a fraction of one engineer's time)";
    } else if (d.member == &TcoInputs::utilisation_ppm) {
      rule = "between 0 and 1 (0.6 is 60 % of the hours)";
    } else {
      rule = "between 0 and " + max;
    }
    if (value < min || value > d.max_units * kTcoMicro) return out_of_range(d.name, rule);
  }
  return base::Status::Ok();
}

base::Result<int64_t> ParseTcoDecimal(std::string_view flag, std::string_view text,
                                      int64_t max_units) {
  const auto bad = [&](std::string_view why) {
    return base::InvalidArgumentError(std::string(flag) + ": '" + std::string(text) + "' " +
                                      std::string(why));
  };
  if (text.empty()) return bad("is empty; expected a number such as 0.25");
  int64_t whole = 0;
  int64_t fraction = 0;
  int decimals = 0;
  bool seen_dot = false;
  bool seen_digit = false;
  for (char c : text) {
    if (c == '.') {
      if (seen_dot) return bad("has two decimal points");
      seen_dot = true;
      continue;
    }
    if (c < '0' || c > '9') {
      return bad("is not a non-negative decimal number (digits and one '.', such as 0.25)");
    }
    seen_digit = true;
    if (seen_dot) {
      if (++decimals > kTcoMaxDecimals) return bad("has more than 6 decimals");
      fraction = fraction * 10 + (c - '0');
    } else {
      whole = whole * 10 + (c - '0');
      if (whole > max_units) return bad("is more than " + std::to_string(max_units));
    }
  }
  if (!seen_digit) return bad("has no digits");
  for (int i = decimals; i < kTcoMaxDecimals; ++i) fraction *= 10;
  const int64_t micros = whole * kTcoMicro + fraction;
  if (micros > max_units * kTcoMicro) return bad("is more than " + std::to_string(max_units));
  return micros;
}

int64_t OwningCost::total_cents() const {
  return depreciation_cents + power_cents + cooling_cents + rack_cents + maintenance_cents +
         staff_cents;
}

OwningCost ComputeOwningCost(const TcoInputs& in) {
  OwningCost out;
  out.depreciation_cents =
      RoundDiv(in.purchase_micro_eur, I128{in.depreciation_months} * kMicroEurPerCent);
  // µkW × h × µ€/kWh = 10⁻¹² € (kWh × €); to cents: / 10¹⁰.
  const I128 power_pico_eur = I128{in.power_micro_kw} * kTcoHoursPerMonth * in.micro_eur_per_kwh;
  out.power_cents = RoundDiv(power_pico_eur, I128{10'000'000'000});
  // Cooling is rounded from the exact power cost, not from its rounded cents.
  out.cooling_cents =
      RoundDiv(power_pico_eur * in.cooling_overhead_ppm, I128{10'000'000'000} * kTcoMicro);
  out.rack_cents = RoundDiv(in.rack_micro_eur_per_month, kMicroEurPerCent);
  out.maintenance_cents = RoundDiv(in.maintenance_micro_eur_per_year, I128{12} * kMicroEurPerCent);
  out.staff_cents = RoundDiv(I128{in.staff_micro_eur_per_year} * in.staff_fraction_ppm,
                             I128{12} * kMicroEurPerCent * kTcoMicro);
  return out;
}

int64_t GpuMinutesPerMonth(int64_t gpus, int64_t utilisation_ppm) {
  return RoundDiv(I128{gpus} * kTcoMinutesPerMonth * utilisation_ppm, kTcoMicro);
}

int64_t PayAsYouGoCents(int64_t gpu_minutes, int64_t price_per_gpu_minute_micro_eur) {
  return RoundDiv(I128{gpu_minutes} * price_per_gpu_minute_micro_eur, kMicroEurPerCent);
}

int64_t BreakEvenUtilisationPpm(int64_t owning_cents, int64_t gpus,
                                int64_t price_per_gpu_minute_micro_eur) {
  // owning = gpus × minutes × u × price  ⇒  u = owning / (gpus × minutes × price).
  return RoundDiv(I128{owning_cents} * kMicroEurPerCent * kTcoMicro,
                  I128{gpus} * kTcoMinutesPerMonth * price_per_gpu_minute_micro_eur);
}

std::optional<int64_t> MonthsToBreakEven(int64_t purchase_micro_eur, const OwningCost& owning,
                                         int64_t pay_as_you_go_cents) {
  if (pay_as_you_go_cents <= owning.total_cents()) return std::nullopt;
  // Renting saves nothing on the running costs; each month it costs `saved` more than owning's
  // running costs, and the purchase is paid back when the months' savings reach it.
  const I128 saved_micro_eur =
      I128{pay_as_you_go_cents - owning.running_cents()} * kMicroEurPerCent;
  return static_cast<int64_t>((purchase_micro_eur + saved_micro_eur - 1) / saved_micro_eur);
}

base::Result<UsageHistory> DeriveUsageHistory(const Json& usage_answer, std::string_view flavor,
                                              int64_t gpus_per_unit, int64_t window_minutes) {
  if (window_minutes <= 0) {
    return base::InvalidArgumentError("the usage window is empty (its end is not after its start)");
  }
  if (gpus_per_unit < 1) {
    return base::InvalidArgumentError("flavor '" + std::string(flavor) + "' has no GPUs per unit");
  }
  const Json* groups = usage_answer.is_object() && usage_answer.contains("groups")
                           ? &usage_answer["groups"]
                           : nullptr;
  if (groups == nullptr || !groups->is_array()) {
    return base::InvalidArgumentError("the usage answer has no 'groups' array");
  }
  UsageHistory out;
  out.flavor = std::string(flavor);
  out.window_minutes = window_minutes;
  for (const Json& group : *groups) {
    if (!group.is_object() || !group.contains("key") || group["key"] != flavor) continue;
    const Json& quantity = group.contains("quantity") ? group["quantity"] : Json();
    if (!quantity.is_number_integer() || quantity.get<int64_t>() < 0 ||
        quantity.get<int64_t>() > kTcoMaxGpus * window_minutes) {
      return base::InvalidArgumentError("the usage group '" + std::string(flavor) +
                                        "' has no valid 'quantity' (started minutes x units)");
    }
    out.gpu_minutes += quantity.get<int64_t>() * gpus_per_unit;
  }
  return out;
}

int64_t HistoryGpuMinutesPerMonth(const UsageHistory& history) {
  return RoundDiv(I128{history.gpu_minutes} * kTcoMinutesPerMonth, history.window_minutes);
}

namespace {

TcoScenario Scenario(const TcoInputs& in, const OwningCost& owning, int64_t gpu_minutes,
                     int64_t utilisation_ppm) {
  TcoScenario s;
  s.utilisation_ppm = utilisation_ppm;
  s.gpu_minutes_per_month = gpu_minutes;
  s.pay_as_you_go_cents = PayAsYouGoCents(gpu_minutes, in.price_per_gpu_minute_micro_eur);
  s.owning_cents = owning.total_cents();
  s.months_to_break_even = MonthsToBreakEven(in.purchase_micro_eur, owning, s.pay_as_you_go_cents);
  return s;
}

}  // namespace

TcoReport ComputeTco(const TcoInputs& in, const std::optional<UsageHistory>& history) {
  TcoReport r;
  r.owning = ComputeOwningCost(in);
  const int64_t full_minutes = GpuMinutesPerMonth(in.gpus, kTcoMicro);
  r.pay_as_you_go_full_cents = PayAsYouGoCents(full_minutes, in.price_per_gpu_minute_micro_eur);
  r.break_even_utilisation_ppm =
      BreakEvenUtilisationPpm(r.owning.total_cents(), in.gpus, in.price_per_gpu_minute_micro_eur);
  r.assumed =
      Scenario(in, r.owning, GpuMinutesPerMonth(in.gpus, in.utilisation_ppm), in.utilisation_ppm);
  if (history) {
    const int64_t minutes = HistoryGpuMinutesPerMonth(*history);
    r.actual = Scenario(in, r.owning, minutes, RoundDiv(I128{minutes} * kTcoMicro, full_minutes));
  }
  return r;
}

std::string FormatCents(int64_t cents) {
  const bool negative = cents < 0;
  const uint64_t magnitude =
      negative ? uint64_t{0} - static_cast<uint64_t>(cents) : static_cast<uint64_t>(cents);
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s%llu.%02llu", negative ? "-" : "",
                static_cast<unsigned long long>(magnitude / 100),
                static_cast<unsigned long long>(magnitude % 100));
  return buf;
}

std::string FormatPpmPercent(int64_t ppm) {
  // ppm / 10⁴ is the percentage; in hundredths of a percent that is ppm / 100.
  const int64_t hundredths = RoundDiv(std::max<int64_t>(ppm, 0), 100);
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%lld.%02lld%%", static_cast<long long>(hundredths / 100),
                static_cast<long long>(hundredths % 100));
  return buf;
}

std::string RenderTcoSvg(const TcoReport& report, std::string_view title) {
  // The plot area, in pixels: x = utilisation 0..100 %, y = € per month 0..y_max.
  constexpr int64_t kWidth = 720, kHeight = 460;
  constexpr int64_t kLeft = 90, kRight = 680, kTop = 50, kBottom = 380;
  const int64_t owning = report.owning.total_cents();
  const int64_t top_cents = std::max<int64_t>({owning, report.pay_as_you_go_full_cents, 100});
  // A round axis maximum: 1, 2 or 5 × 10ⁿ euros, at least 10 % above the highest line.
  int64_t step_eur = 1;
  const int64_t want_eur = top_cents * 11 / 1000 + 1;
  while (step_eur * 5 < want_eur) step_eur *= 10;
  int64_t y_max_eur = step_eur;
  for (int64_t m : {1, 2, 5, 10}) {
    if (step_eur * m >= want_eur) {
      y_max_eur = step_eur * m;
      break;
    }
  }
  const int64_t y_max_cents = y_max_eur * 100;
  const auto x_of = [&](int64_t ppm) {
    return kLeft +
           RoundDiv(I128{std::clamp<int64_t>(ppm, 0, kTcoMicro)} * (kRight - kLeft), kTcoMicro);
  };
  const auto y_of = [&](int64_t cents) {
    return kBottom - RoundDiv(I128{std::clamp<int64_t>(cents, 0, y_max_cents)} * (kBottom - kTop),
                              y_max_cents);
  };
  const auto num = [](int64_t v) { return std::to_string(v); };
  std::string s;
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + num(kWidth) +
       "\" height=\"" + num(kHeight) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) +
       "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<title>" + XmlEscape(title) + "</title>\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + num(kWidth / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" +
       XmlEscape(title) + "</text>\n";
  // Grid and ticks: x every 10 %, y in five steps.
  for (int64_t pct = 0; pct <= 100; pct += 10) {
    const int64_t x = x_of(pct * 10'000);
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(x) + "\" y2=\"" +
         num(kBottom) + "\" stroke=\"#eee\"/>\n";
    s += "<text x=\"" + num(x) + "\" y=\"" + num(kBottom + 18) + "\" text-anchor=\"middle\">" +
         num(pct) + "%</text>\n";
  }
  for (int64_t i = 0; i <= 5; ++i) {
    const int64_t cents = y_max_cents / 5 * i;
    const int64_t y = y_of(cents);
    s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(y) + "\" x2=\"" + num(kRight) + "\" y2=\"" +
         num(y) + "\" stroke=\"#eee\"/>\n";
    s += "<text x=\"" + num(kLeft - 8) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" +
         num(cents / 100) + "</text>\n";
  }
  s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(kBottom) + "\" x2=\"" + num(kRight) +
       "\" y2=\"" + num(kBottom) + "\" stroke=\"black\"/>\n";
  s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(kLeft) + "\" y2=\"" +
       num(kBottom) + "\" stroke=\"black\"/>\n";
  s += "<text x=\"" + num((kLeft + kRight) / 2) + "\" y=\"" + num(kBottom + 42) +
       "\" text-anchor=\"middle\">GPU utilisation (% of the hours)</text>\n";
  s += "<text x=\"20\" y=\"" + num((kTop + kBottom) / 2) + "\" text-anchor=\"middle\" " +
       "transform=\"rotate(-90 20 " + num((kTop + kBottom) / 2) +
       ")\">cost per month (EUR)</text>\n";
  // The lines: owning is flat, pay-as-you-go rises from 0 to all GPUs busy all month.
  s += "<line id=\"owning\" x1=\"" + num(x_of(0)) + "\" y1=\"" + num(y_of(owning)) + "\" x2=\"" +
       num(x_of(kTcoMicro)) + "\" y2=\"" + num(y_of(owning)) +
       "\" stroke=\"#1f77b4\" stroke-width=\"2.5\"/>\n";
  s += "<line id=\"pay-as-you-go\" x1=\"" + num(x_of(0)) + "\" y1=\"" + num(y_of(0)) + "\" x2=\"" +
       num(x_of(kTcoMicro)) + "\" y2=\"" + num(y_of(report.pay_as_you_go_full_cents)) +
       "\" stroke=\"#d62728\" stroke-width=\"2.5\"/>\n";
  const auto vertical = [&](std::string_view id, int64_t ppm, std::string_view label) {
    if (ppm < 0 || ppm > kTcoMicro) return;
    const int64_t x = x_of(ppm);
    s += "<line id=\"" + std::string(id) + "\" x1=\"" + num(x) + "\" y1=\"" + num(kTop) +
         "\" x2=\"" + num(x) + "\" y2=\"" + num(kBottom) +
         "\" stroke=\"#777\" stroke-dasharray=\"4 4\"/>\n";
    s += "<text x=\"" + num(x + 4) + "\" y=\"" + num(kTop + 12) + "\" fill=\"#555\">" +
         XmlEscape(label) + "</text>\n";
  };
  vertical("assumed", report.assumed.utilisation_ppm,
           "assumed " + FormatPpmPercent(report.assumed.utilisation_ppm));
  if (report.actual) {
    vertical("actual", report.actual->utilisation_ppm,
             "actual " + FormatPpmPercent(report.actual->utilisation_ppm));
  }
  if (report.break_even_utilisation_ppm <= kTcoMicro) {
    const int64_t x = x_of(report.break_even_utilisation_ppm);
    const int64_t y = y_of(owning);
    s += "<circle id=\"break-even\" cx=\"" + num(x) + "\" cy=\"" + num(y) +
         "\" r=\"6\" fill=\"none\" stroke=\"black\" stroke-width=\"2\"/>\n";
    s += "<text x=\"" + num(x) + "\" y=\"" + num(y - 12) + "\" text-anchor=\"middle\">break-even " +
         FormatPpmPercent(report.break_even_utilisation_ppm) + "</text>\n";
  } else {
    s += "<text id=\"break-even\" x=\"" + num(kRight) + "\" y=\"" + num(kTop - 8) +
         "\" text-anchor=\"end\">no break-even: owning costs more even at 100%</text>\n";
  }
  // Legend.
  s += "<line x1=\"" + num(kLeft + 10) + "\" y1=\"" + num(kBottom + 34 + 24) + "\" x2=\"" +
       num(kLeft + 40) + "\" y2=\"" + num(kBottom + 34 + 24) +
       "\" stroke=\"#1f77b4\" stroke-width=\"2.5\"/>\n";
  s += "<text x=\"" + num(kLeft + 46) + "\" y=\"" + num(kBottom + 38 + 24) + "\">owning " +
       FormatCents(owning) + " EUR/month</text>\n";
  s += "<line x1=\"" + num(kLeft + 300) + "\" y1=\"" + num(kBottom + 34 + 24) + "\" x2=\"" +
       num(kLeft + 330) + "\" y2=\"" + num(kBottom + 34 + 24) +
       "\" stroke=\"#d62728\" stroke-width=\"2.5\"/>\n";
  s += "<text x=\"" + num(kLeft + 336) + "\" y=\"" + num(kBottom + 38 + 24) + "\">pay-as-you-go (" +
       FormatCents(report.pay_as_you_go_full_cents) + " EUR at 100%)</text>\n";
  s += "</svg>\n";
  return s;
}

base::Result<TcoCatalogPrice> FindTcoCatalogPrice(const std::vector<TcoFlavor>& gpu_flavors,
                                                  std::string_view gpu_model, TcoNames names) {
  std::optional<TcoCatalogPrice> best;
  std::vector<std::string> models;
  for (const TcoFlavor& f : gpu_flavors) {
    models.push_back(f.gpu_model);
    if (!base::EqualsIgnoreCase(f.gpu_model, gpu_model)) continue;
    if (f.gpus_per_unit < 1 || f.price_micro_eur_per_minute <= 0) continue;
    if (best && (best->gpus_per_unit < f.gpus_per_unit ||
                 (best->gpus_per_unit == f.gpus_per_unit && best->flavor < f.id))) {
      continue;
    }
    // A flavor of k GPUs per unit costs k GPU-minutes a minute; rounded half up to the µ€.
    best = TcoCatalogPrice{f.id, f.gpus_per_unit,
                           (f.price_micro_eur_per_minute + f.gpus_per_unit / 2) / f.gpus_per_unit};
  }
  if (!best) {
    return base::NotFoundError("no GPU flavor of model '" + std::string(gpu_model) +
                               "' in the catalog (models: " + base::Join(models, ", ") +
                               "); pick one with " + TcoInputName("gpu-model", names) +
                               " or give " + TcoInputName("price-per-gpu-minute-eur", names));
  }
  return *best;
}

namespace {

Json ScenarioJson(const TcoScenario& s) {
  return {{"utilisation_ppm", s.utilisation_ppm},
          {"utilisation_percent", FormatPpmPercent(s.utilisation_ppm)},
          {"gpu_minutes_per_month", s.gpu_minutes_per_month},
          {"pay_as_you_go_cents", s.pay_as_you_go_cents},
          {"owning_cents", s.owning_cents},
          {"cheaper", s.owning_cheaper() ? "owning" : "pay-as-you-go"},
          {"months_to_break_even",
           s.months_to_break_even ? Json(*s.months_to_break_even) : Json(nullptr)}};
}

}  // namespace

Json TcoReportJson(const TcoInputs& in, const TcoReport& report, const TcoContext& ctx) {
  Json actual = nullptr;
  if (report.actual) {
    actual = ScenarioJson(*report.actual);
    if (ctx.history) {
      actual["flavor"] = ctx.history->flavor;
      actual["gpu_minutes"] = ctx.history->gpu_minutes;
    }
    actual["from"] = ctx.history_from;
    actual["to"] = ctx.history_to;
  }
  const OwningCost& o = report.owning;
  return {{"gpus", in.gpus},
          {"gpu_model", ctx.gpu_model},
          {"flavor", ctx.flavor ? Json(*ctx.flavor) : Json(nullptr)},
          {"price_source", ctx.price_given ? "flag" : "catalog"},
          {"price_per_gpu_minute_micro_eur", in.price_per_gpu_minute_micro_eur},
          {"hours_per_month", kTcoHoursPerMonth},
          {"owning",
           {{"depreciation_cents", o.depreciation_cents},
            {"power_cents", o.power_cents},
            {"cooling_cents", o.cooling_cents},
            {"rack_cents", o.rack_cents},
            {"maintenance_cents", o.maintenance_cents},
            {"staff_cents", o.staff_cents},
            {"running_cents", o.running_cents()},
            {"total_cents", o.total_cents()}}},
          {"pay_as_you_go_full_cents", report.pay_as_you_go_full_cents},
          {"break_even_utilisation_ppm", report.break_even_utilisation_ppm},
          {"break_even_utilisation_percent", FormatPpmPercent(report.break_even_utilisation_ppm)},
          {"assumed", ScenarioJson(report.assumed)},
          {"actual", actual}};
}

std::vector<TcoCurvePoint> TcoCurves(const TcoInputs& in, const TcoReport& report,
                                     int64_t step_ppm) {
  step_ppm = std::clamp<int64_t>(step_ppm, 1'000, kTcoMicro);  // 0.1 %..100 %: ≤ 1 001 points
  std::vector<TcoCurvePoint> out;
  for (int64_t u = 0;; u = std::min(u + step_ppm, kTcoMicro)) {
    out.push_back(
        {u, report.owning.total_cents(),
         PayAsYouGoCents(GpuMinutesPerMonth(in.gpus, u), in.price_per_gpu_minute_micro_eur)});
    if (u == kTcoMicro) break;
  }
  return out;
}

}  // namespace sovai::control
