// sovai tco: owning N GPUs against pay-as-you-go at the catalog price (docs/tco.md). The numbers
// come from tco.h; this file reads the flags, the flavor catalog and the usage history, and
// prints the table, the JSON or the SVG plot.
#include <nlohmann/json.hpp>
#include <optional>

#include "base/strings.h"
#include "cli/client/billing_format.h"
#include "cli/client/command_util.h"
#include "cli/client/table.h"
#include "cli/client/tco.h"
#include "control/tco.h"
#include "net/http.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

using control::ComputeTco;
using control::DeriveUsageHistory;
using control::FormatCents;
using control::FormatPpmPercent;
using control::kTcoDecimalInputs;
using control::kTcoHistoryDays;
using control::kTcoHoursPerMonth;
using control::kTcoMicro;
using control::OwningCost;
using control::ParseTcoDecimal;
using control::RenderTcoSvg;
using control::TcoCatalogPrice;
using control::TcoContext;
using control::TcoDecimalInput;
using control::TcoInputs;
using control::TcoReport;
using control::TcoScenario;
using control::UsageHistory;
using control::ValidateTcoInputs;

// A decimal flag: its text (the default shown by --help) and the table row it fills.
struct DecimalFlag {
  const TcoDecimalInput* input;
  std::string text;
};

// The catalog's price of one GPU-minute of `gpu_model` (control::FindTcoCatalogPrice), from the
// answer of GET /v1/flavors.
base::Result<TcoCatalogPrice> FindCatalogPrice(const Json& flavors, std::string_view gpu_model) {
  const Json& items = At(flavors, "items");
  std::vector<control::TcoFlavor> gpu_flavors;
  if (items.is_array()) {
    for (const Json& f : items) {
      if (Str(f, "kind") != "gpu") continue;
      auto price = ParseEurMicros(Str(f, "price_per_minute_eur"));
      gpu_flavors.push_back(
          {Str(f, "id"), Str(f, "gpu_model"), Int(f, "gpus_per_unit", 1), price.ok() ? *price : 0});
    }
  }
  return control::FindTcoCatalogPrice(gpu_flavors, gpu_model);
}

// GPU-minutes as hours with one decimal ("3504.0"), exact to the tenth (rounded half up).
std::string GpuHoursText(int64_t gpu_minutes) {
  const int64_t tenths = (gpu_minutes * 10 + 30) / 60;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10);
}

std::string MonthsText(const std::optional<int64_t>& months) {
  return months ? std::to_string(*months) : "never";
}

// The table output: the owning costs, then assumed (and actual) pay-as-you-go against owning.
std::string TcoText(const TcoInputs& in, const TcoReport& report, const std::string& gpu_model,
                    bool price_given, const std::optional<TcoCatalogPrice>& catalog) {
  const OwningCost& o = report.owning;
  std::string out =
      std::to_string(in.gpus) + " x " + gpu_model + " at " +
      FormatMicroUnits(in.price_per_gpu_minute_micro_eur, 2) + " EUR per GPU-minute (" +
      (price_given ? std::string("--price-per-gpu-minute-eur") : "catalog: " + catalog->flavor) +
      "), months of " + std::to_string(kTcoHoursPerMonth) + " h\n\n";
  Table owning({"OWNING, PER MONTH", "EUR"});
  owning.AddRow({"depreciation (" + FormatMicroUnits(in.purchase_micro_eur, 0) + " over " +
                     std::to_string(in.depreciation_months) + " months)",
                 FormatCents(o.depreciation_cents)});
  owning.AddRow({"power (" + FormatMicroUnits(in.power_micro_kw, 0) + " kW x " +
                     std::to_string(kTcoHoursPerMonth) + " h x " +
                     FormatMicroUnits(in.micro_eur_per_kwh, 0) + " EUR/kWh)",
                 FormatCents(o.power_cents)});
  owning.AddRow({"cooling (" + FormatMicroUnits(in.cooling_overhead_ppm, 0) + " x power)",
                 FormatCents(o.cooling_cents)});
  owning.AddRow({"rack / colocation", FormatCents(o.rack_cents)});
  owning.AddRow(
      {"maintenance (" + FormatMicroUnits(in.maintenance_micro_eur_per_year, 0) + " a year)",
       FormatCents(o.maintenance_cents)});
  owning.AddRow({"staff (" + FormatMicroUnits(in.staff_micro_eur_per_year, 0) + " a year x " +
                     FormatMicroUnits(in.staff_fraction_ppm, 0) + ")",
                 FormatCents(o.staff_cents)});
  owning.AddRow({"TOTAL", FormatCents(o.total_cents())});
  out += owning.Render() + "\n";

  std::vector<std::string> headers = {"COMPARISON, PER MONTH", "ASSUMED"};
  if (report.actual)
    headers.push_back("ACTUAL (LAST " + std::to_string(kTcoHistoryDays) + " DAYS)");
  Table compare(headers);
  const auto row = [&](std::string label, auto value) {
    std::vector<std::string> cells = {std::move(label), value(report.assumed)};
    if (report.actual) cells.push_back(value(*report.actual));
    compare.AddRow(std::move(cells));
  };
  row("utilisation", [](const TcoScenario& s) { return FormatPpmPercent(s.utilisation_ppm); });
  row("GPU-hours", [](const TcoScenario& s) { return GpuHoursText(s.gpu_minutes_per_month); });
  row("pay-as-you-go EUR", [](const TcoScenario& s) { return FormatCents(s.pay_as_you_go_cents); });
  row("owning EUR", [](const TcoScenario& s) { return FormatCents(s.owning_cents); });
  row("cheaper", [](const TcoScenario& s) -> std::string {
    return s.owning_cheaper() ? "owning" : "pay-as-you-go";
  });
  row("months to break even",
      [](const TcoScenario& s) { return MonthsText(s.months_to_break_even); });
  out += compare.Render() + "\n";
  out += "Break-even utilisation: " + FormatPpmPercent(report.break_even_utilisation_ppm);
  if (report.break_even_utilisation_ppm > kTcoMicro) out += " (never: above 100%)";
  out += " (pay-as-you-go with every GPU busy: " + FormatCents(report.pay_as_you_go_full_cents) +
         " EUR/month)\n";
  return out;
}

int RunTco(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(
      ctx, "sovai tco",
      "Compares owning N GPUs with pay-as-you-go at the catalog price: the monthly cost of each,\n"
      "the utilisation where they cost the same, and the months a purchase takes to pay off.\n"
      "Logged in, the price is the catalog's (GET /v1/flavors) and the project's last 90 days\n"
      "of that flavor (GET /v1/billing/usage) are compared too. Every input is explained in\n"
      "docs/tco.md.\n\n"
      "  sovai tco --gpus 8 --purchase-eur 250000 --utilisation 0.8 --svg tco.svg");
  TcoInputs in;
  std::string gpu_model = "H100";
  std::string output = "table";
  std::string svg_path;
  bool no_history = false;
  std::vector<DecimalFlag> decimals;
  for (const TcoDecimalInput& d : kTcoDecimalInputs) {
    decimals.push_back({&d, std::string(d.default_text)});
  }
  base::FlagSet& f = cmd.flags();
  f.Int("gpus", &in.gpus, "how many GPUs the server holds");
  f.String("gpu-model", &gpu_model, "the GPU model whose catalog price to use", "MODEL");
  for (DecimalFlag& d : decimals) {
    f.String(std::string(d.input->name), &d.text, std::string(d.input->help), "NUMBER");
  }
  f.HideDefault("price-per-gpu-minute-eur");
  f.Int("depreciation-months", &in.depreciation_months, "the months the purchase is spread over");
  f.Bool("no-history", &no_history, "do not read the project's usage history");
  f.String("output", &output, "table, json or svg (the plot, on stdout)", "FORMAT");
  f.Short('o', "output");
  f.String("svg", &svg_path, "also write the plot to FILE", "FILE");
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  if (output != "table" && output != "json" && output != "svg") {
    return cmd.Usage("--output must be table, json or svg, not '" + output + "'");
  }
  if (f.WasSet("svg") && svg_path.empty()) return cmd.Usage("--svg needs a file name");
  for (DecimalFlag& d : decimals) {
    const std::string name(d.input->name);
    if (d.text.empty() && !f.WasSet(name)) continue;  // the price, when not given
    auto parsed = ParseTcoDecimal("--" + name, d.text, d.input->max_units);
    if (!parsed.ok()) return cmd.Usage(parsed.status().message());
    in.*d.input->member = *parsed;
  }
  const bool price_given = f.WasSet("price-per-gpu-minute-eur");
  {
    // Every flag is checked before any request; the catalog's price is checked once known.
    TcoInputs check = in;
    if (!price_given) check.price_per_gpu_minute_micro_eur = 1;
    if (auto s = ValidateTcoInputs(check); !s.ok()) return cmd.Usage(s.message());
  }

  auto config = cmd.Config();
  const bool logged_in = config.ok() && !config->url.empty() && !config->token.empty();
  if (!logged_in && !price_given) {
    return cmd.Usage(
        "not logged in, so there is no catalog price: give --price-per-gpu-minute-eur (0.0467 "
        "is h100-1-gpu's list price) or run 'sovai login'" +
        (config.ok() ? std::string() : " (" + config.status().message() + ")"));
  }

  std::optional<TcoCatalogPrice> catalog;
  std::optional<UsageHistory> history;
  int64_t history_from = 0;
  int64_t history_to = 0;
  if (logged_in) {
    auto api = cmd.Connect(*config);
    if (!api.ok()) return cmd.Fail(api.status());
    auto flavors = (*api)->Get("/v1/flavors");
    base::Status found = flavors.status();
    if (flavors.ok()) {
      auto price = FindCatalogPrice(*flavors, gpu_model);
      if (price.ok()) catalog = *price;
      found = price.status();
    }
    if (!found.ok()) {
      if (!price_given) return cmd.Fail(found);
      cmd.Warn("no catalog flavor, so no usage history: " + found.message());
    }
    if (catalog && !price_given) {
      in.price_per_gpu_minute_micro_eur = catalog->price_per_gpu_minute_micro_eur;
      if (auto s = ValidateTcoInputs(in); !s.ok()) {
        return cmd.Fail(base::InvalidArgumentError("the catalog price of " + catalog->flavor +
                                                   " is out of range: " + s.message()));
      }
    }
    if (catalog && !no_history) {
      history_to = ctx.env.NowUnixMicros();
      history_from = history_to - kTcoHistoryDays * 24 * 3600 * int64_t{1'000'000};
      std::string path = "/v1/billing/usage";
      path = AddQuery(path, "from", FormatQueryTime(history_from));
      path = AddQuery(path, "to", FormatQueryTime(history_to));
      path = AddQuery(path, "group_by", "flavor");
      auto usage = (*api)->Get(path);
      if (usage.ok()) {
        // The server's own window, when it says (it may clamp the end to now).
        if (TimeMicros(*usage, "from") != 0) history_from = TimeMicros(*usage, "from");
        if (TimeMicros(*usage, "to") != 0) history_to = TimeMicros(*usage, "to");
        auto derived = DeriveUsageHistory(*usage, catalog->flavor, catalog->gpus_per_unit,
                                          (history_to - history_from) / 60'000'000);
        if (derived.ok()) {
          history = *derived;
        } else {
          cmd.Warn("usage history ignored: " + derived.status().message());
        }
      } else {
        cmd.Warn("no usage history (" + usage.status().message() +
                 "); showing the assumed utilisation only");
      }
    }
  }

  const TcoReport report = ComputeTco(in, history);
  const std::string title =
      std::to_string(in.gpus) + " x " + gpu_model + ": owning vs pay-as-you-go (EUR per month)";
  const std::string svg = RenderTcoSvg(report, title);
  if (!svg_path.empty()) {
    if (auto s = ctx.env.WriteFileAtomically(svg_path, svg, 0644); !s.ok()) {
      return cmd.Fail(s.WithContext("--svg " + svg_path));
    }
  }
  if (output == "svg") {
    ctx.console.Out(svg);
    return kExitOk;
  }
  if (output == "json") {
    TcoContext json_ctx{.gpu_model = gpu_model, .price_given = price_given, .history = history};
    if (catalog) json_ctx.flavor = catalog->flavor;
    json_ctx.history_from = FormatQueryTime(history_from);
    json_ctx.history_to = FormatQueryTime(history_to);
    cmd.PrintJson(control::TcoReportJson(in, report, json_ctx));
    return kExitOk;
  }
  ctx.console.Out(TcoText(in, report, gpu_model, price_given, catalog));
  return kExitOk;
}

}  // namespace

int RunTcoCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunTco(ctx, args);
}

}  // namespace sovai::cli::client
