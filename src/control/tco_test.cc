// The arithmetic of `sovai tco` and GET /v1/tco against hand-computed cases (docs/tco.md).
#include "control/tco.h"

#include <gtest/gtest.h>

namespace sovai::control {
namespace {

using Json = nlohmann::json;

TcoInputs Defaults() {
  TcoInputs in;
  in.price_per_gpu_minute_micro_eur = 46'700;  // h100-1-gpu, 0.0467 €/min
  return in;
}

// The brief's defaults, by hand:
//   depreciation 200 000 / 36          = 5 555.555… → 5 555.56
//   power        10.2 kW × 730 h × 0.25 = 1 861.50
//   cooling      1 861.50 × 0.4         =   744.60
//   rack                                = 1 500.00
//   maintenance  20 000 / 12           = 1 666.666… → 1 666.67
//   staff        90 000 × 0.5 / 12     = 3 750.00
//   total                               = 15 078.33
TEST(TcoTest, OwningCostOfTheDefaultsByHand) {
  const OwningCost o = ComputeOwningCost(Defaults());
  EXPECT_EQ(o.depreciation_cents, 555'556);
  EXPECT_EQ(o.power_cents, 186'150);
  EXPECT_EQ(o.cooling_cents, 74'460);
  EXPECT_EQ(o.rack_cents, 150'000);
  EXPECT_EQ(o.maintenance_cents, 166'667);
  EXPECT_EQ(o.staff_cents, 375'000);
  EXPECT_EQ(o.total_cents(), 1'507'833);
  EXPECT_EQ(o.running_cents(), 1'507'833 - 555'556);
}

TEST(TcoTest, CoolingIsRoundedFromTheExactPowerCost) {
  TcoInputs in = Defaults();
  in.power_micro_kw = 1;                 // 0.000001 kW
  in.micro_eur_per_kwh = 1'000'000;      // 1 €/kWh: 0.00073 € a month, 0 cents
  in.cooling_overhead_ppm = 10'000'000;  // ×10: 0.0073 €, 1 cent
  const OwningCost o = ComputeOwningCost(in);
  EXPECT_EQ(o.power_cents, 0);
  EXPECT_EQ(o.cooling_cents, 1);
}

TEST(TcoTest, PayAsYouGoAtTheAssumedUtilisation) {
  // 8 GPUs × 43 800 min × 0.6 = 210 240 GPU-minutes × 0.0467 € = 9 818.208 € → 9 818.21.
  EXPECT_EQ(GpuMinutesPerMonth(8, 600'000), 210'240);
  EXPECT_EQ(PayAsYouGoCents(210'240, 46'700), 981'821);
  // All GPUs, all month: 350 400 × 0.0467 = 16 363.68.
  EXPECT_EQ(PayAsYouGoCents(GpuMinutesPerMonth(8, 1'000'000), 46'700), 1'636'368);
  EXPECT_EQ(PayAsYouGoCents(0, 46'700), 0);
}

TEST(TcoTest, BreakEvenUtilisation) {
  // 15 078.33 / 16 363.68 = 0.92145104… → 921 451 ppm, 92.15 %.
  EXPECT_EQ(BreakEvenUtilisationPpm(1'507'833, 8, 46'700), 921'451);
  // Exactly half: 1 GPU at 0.10 €/min costs 4 380.00 € a full month; owning 2 190.00 €.
  EXPECT_EQ(PayAsYouGoCents(kTcoMinutesPerMonth, 100'000), 438'000);
  EXPECT_EQ(BreakEvenUtilisationPpm(219'000, 1, 100'000), 500'000);
  // Above 100 %: owning never pays off.
  EXPECT_GT(BreakEvenUtilisationPpm(1'507'833, 1, 46'700), kTcoMicro);
}

TEST(TcoTest, ReportAtTheDefaultsSaysPayAsYouGoAndNever) {
  const TcoReport r = ComputeTco(Defaults(), std::nullopt);
  EXPECT_EQ(r.owning.total_cents(), 1'507'833);
  EXPECT_EQ(r.pay_as_you_go_full_cents, 1'636'368);
  EXPECT_EQ(r.break_even_utilisation_ppm, 921'451);
  EXPECT_EQ(r.assumed.utilisation_ppm, 600'000);
  EXPECT_EQ(r.assumed.gpu_minutes_per_month, 210'240);
  EXPECT_EQ(r.assumed.pay_as_you_go_cents, 981'821);
  EXPECT_EQ(r.assumed.owning_cents, 1'507'833);
  EXPECT_FALSE(r.assumed.owning_cheaper());
  EXPECT_EQ(r.assumed.months_to_break_even, std::nullopt);
  EXPECT_FALSE(r.actual.has_value());
}

TEST(TcoTest, MonthsToBreakEvenWhenOwningIsCheaper) {
  // 0.10 €/GPU-min at 60 %: 210 240 × 0.1 = 21 024.00 € a month against owning 15 078.33.
  // Running costs 9 522.77; renting costs 11 501.23 more each month; 200 000 / 11 501.23 =
  // 17.39 → 18 months.
  TcoInputs in = Defaults();
  in.price_per_gpu_minute_micro_eur = 100'000;
  const TcoReport r = ComputeTco(in, std::nullopt);
  EXPECT_EQ(r.assumed.pay_as_you_go_cents, 2'102'400);
  EXPECT_TRUE(r.assumed.owning_cheaper());
  EXPECT_EQ(r.assumed.months_to_break_even, 18);
  // An exact division is not rounded up: saved 1 000.00 a month on a 10 000 € purchase.
  OwningCost o;
  o.depreciation_cents = 100;
  o.rack_cents = 50'000;
  EXPECT_EQ(MonthsToBreakEven(10'000 * kTcoMicro, o, 150'000), 10);
  EXPECT_EQ(MonthsToBreakEven(10'000 * kTcoMicro, o, 150'001), 10);
  EXPECT_EQ(MonthsToBreakEven(10'000 * kTcoMicro, o, 149'999), 11);
}

TEST(TcoTest, NeverBreaksEvenWhenPayAsYouGoIsNotDearer) {
  OwningCost o;
  o.depreciation_cents = 1'000;
  o.staff_cents = 500;
  EXPECT_EQ(MonthsToBreakEven(36'000 * kTcoMicro / 100, o, 1'500), std::nullopt);  // equal
  EXPECT_EQ(MonthsToBreakEven(36'000 * kTcoMicro / 100, o, 1'499), std::nullopt);
  EXPECT_EQ(MonthsToBreakEven(36'000 * kTcoMicro / 100, o, 1'501), 36);  // 360 € / 10 €
  // Zero utilisation: nothing rented, never.
  TcoInputs in = Defaults();
  in.utilisation_ppm = 0;
  const TcoReport r = ComputeTco(in, std::nullopt);
  EXPECT_EQ(r.assumed.pay_as_you_go_cents, 0);
  EXPECT_EQ(r.assumed.months_to_break_even, std::nullopt);
}

TEST(TcoTest, UsageHistoryIsTheFlavorsGpuMinutesPerMonth) {
  const Json usage = {{"groups", Json::array({{{"key", "h100-1-gpu"}, {"quantity", 30'000}},
                                              {{"key", "ai1-1-cpu"}, {"quantity", 99'999}},
                                              {{"key", "storage"}, {"quantity", 250'000}}})}};
  // 90 days = 129 600 minutes.
  auto h = DeriveUsageHistory(usage, "h100-1-gpu", 1, 129'600);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->flavor, "h100-1-gpu");
  EXPECT_EQ(h->gpu_minutes, 30'000);
  // 30 000 × 43 800 / 129 600 = 10 138.88… → 10 139 GPU-minutes a month.
  EXPECT_EQ(HistoryGpuMinutesPerMonth(*h), 10'139);
  // A flavor of 2 GPUs per unit doubles the GPU-minutes.
  auto two = DeriveUsageHistory(usage, "h100-1-gpu", 2, 129'600);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->gpu_minutes, 60'000);
  // No group of that flavor: no use.
  auto none = DeriveUsageHistory(usage, "l4-1-gpu", 1, 129'600);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->gpu_minutes, 0);

  TcoInputs in = Defaults();
  const TcoReport r = ComputeTco(in, *h);
  ASSERT_TRUE(r.actual.has_value());
  EXPECT_EQ(r.actual->gpu_minutes_per_month, 10'139);
  // 10 139 / 350 400 = 2.89355 % → 28 936 ppm; 10 139 × 0.0467 = 473.4913 → 473.49.
  EXPECT_EQ(r.actual->utilisation_ppm, 28'936);
  EXPECT_EQ(r.actual->pay_as_you_go_cents, 47'349);
  EXPECT_EQ(r.actual->months_to_break_even, std::nullopt);
  // The assumed comparison is still there.
  EXPECT_EQ(r.assumed.pay_as_you_go_cents, 981'821);
}

TEST(TcoTest, UsageHistoryRefusesBadAnswers) {
  const Json ok = {{"groups", Json::array()}};
  EXPECT_FALSE(DeriveUsageHistory(ok, "h100-1-gpu", 1, 0).ok());
  EXPECT_FALSE(DeriveUsageHistory(ok, "h100-1-gpu", 0, 100).ok());
  EXPECT_FALSE(DeriveUsageHistory(Json::object(), "h100-1-gpu", 1, 100).ok());
  EXPECT_FALSE(DeriveUsageHistory(Json{{"groups", 3}}, "h100-1-gpu", 1, 100).ok());
  const Json negative = {{"groups", Json::array({{{"key", "h100-1-gpu"}, {"quantity", -1}}})}};
  EXPECT_FALSE(DeriveUsageHistory(negative, "h100-1-gpu", 1, 100).ok());
  const Json text = {{"groups", Json::array({{{"key", "h100-1-gpu"}, {"quantity", "12"}}})}};
  EXPECT_FALSE(DeriveUsageHistory(text, "h100-1-gpu", 1, 100).ok());
}

TEST(TcoTest, ParseTcoDecimalIsExact) {
  EXPECT_EQ(ParseTcoDecimal("--x", "0.25", 10).value(), 250'000);
  EXPECT_EQ(ParseTcoDecimal("--x", "10.2", 100).value(), 10'200'000);
  EXPECT_EQ(ParseTcoDecimal("--x", "200000", 1'000'000).value(), 200'000'000'000);
  EXPECT_EQ(ParseTcoDecimal("--x", ".5", 1).value(), 500'000);
  EXPECT_EQ(ParseTcoDecimal("--x", "1.", 1).value(), 1'000'000);
  EXPECT_EQ(ParseTcoDecimal("--x", "0.000001", 1).value(), 1);
  EXPECT_EQ(ParseTcoDecimal("--x", "0.1", 1).value(), 100'000);  // no 0.1000000000000000055
}

TEST(TcoTest, ParseTcoDecimalRefusesNamingTheFlag) {
  for (const char* bad :
       {"", "-1", "+1", "1e3", "1,5", "0.0000001", "1.2.3", ".", "abc", " 1", "2"}) {
    auto parsed = ParseTcoDecimal("--utilisation", bad, 1);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("--utilisation"), std::string::npos)
        << parsed.status().message();
  }
  EXPECT_FALSE(ParseTcoDecimal("--x", "99999999999999999999", 1'000).ok());  // no overflow
}

TEST(TcoTest, ValidateRefusesBadInputsNamingTheFlag) {
  EXPECT_TRUE(ValidateTcoInputs(Defaults()).ok());
  struct Case {
    const char* flag;
    void (*mutate)(TcoInputs&);
  };
  const Case cases[] = {
      {"--gpus", [](TcoInputs& in) { in.gpus = 0; }},
      {"--gpus", [](TcoInputs& in) { in.gpus = kTcoMaxGpus + 1; }},
      {"--depreciation-months", [](TcoInputs& in) { in.depreciation_months = 0; }},
      {"--depreciation-months", [](TcoInputs& in) { in.depreciation_months = -3; }},
      {"--price-per-gpu-minute-eur", [](TcoInputs& in) { in.price_per_gpu_minute_micro_eur = 0; }},
      {"--purchase-eur", [](TcoInputs& in) { in.purchase_micro_eur = 0; }},
      {"--power-kw", [](TcoInputs& in) { in.power_micro_kw = -1; }},
      {"--eur-per-kwh", [](TcoInputs& in) { in.micro_eur_per_kwh = -1; }},
      {"--cooling-overhead",
       [](TcoInputs& in) { in.cooling_overhead_ppm = (kTcoMaxCoolingOverhead + 1) * kTcoMicro; }},
      {"--rack-eur-per-month", [](TcoInputs& in) { in.rack_micro_eur_per_month = -1; }},
      {"--maintenance-eur-per-year", [](TcoInputs& in) { in.maintenance_micro_eur_per_year = -1; }},
      {"--staff-eur-per-year", [](TcoInputs& in) { in.staff_micro_eur_per_year = -1; }},
      {"--staff-fraction", [](TcoInputs& in) { in.staff_fraction_ppm = 1'000'001; }},
      {"--utilisation", [](TcoInputs& in) { in.utilisation_ppm = 1'000'001; }},
      {"--utilisation", [](TcoInputs& in) { in.utilisation_ppm = -1; }},
  };
  for (const Case& c : cases) {
    TcoInputs in = Defaults();
    c.mutate(in);
    const base::Status s = ValidateTcoInputs(in);
    ASSERT_FALSE(s.ok()) << c.flag;
    EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.flag), std::string::npos) << s.message();
  }
  // The edges are allowed: 0 and 100 % utilisation, no staff, free power.
  TcoInputs edges = Defaults();
  edges.utilisation_ppm = kTcoMicro;
  edges.staff_fraction_ppm = 0;
  edges.micro_eur_per_kwh = 0;
  EXPECT_TRUE(ValidateTcoInputs(edges).ok());
  edges.utilisation_ppm = 0;
  EXPECT_TRUE(ValidateTcoInputs(edges).ok());
}

TEST(TcoTest, TheLargestInputsDoNotOverflow) {
  TcoInputs in;
  in.gpus = kTcoMaxGpus;
  in.price_per_gpu_minute_micro_eur = kTcoMaxPricePerGpuMinuteEur * kTcoMicro;
  in.purchase_micro_eur = kTcoMaxEur * kTcoMicro;
  in.power_micro_kw = kTcoMaxPowerKw * kTcoMicro;
  in.micro_eur_per_kwh = kTcoMaxEurPerKwh * kTcoMicro;
  in.cooling_overhead_ppm = kTcoMaxCoolingOverhead * kTcoMicro;
  in.rack_micro_eur_per_month = kTcoMaxEur * kTcoMicro;
  in.maintenance_micro_eur_per_year = kTcoMaxEur * kTcoMicro;
  in.staff_micro_eur_per_year = kTcoMaxEur * kTcoMicro;
  in.staff_fraction_ppm = kTcoMicro;
  in.depreciation_months = 1;
  in.utilisation_ppm = kTcoMicro;
  ASSERT_TRUE(ValidateTcoInputs(in).ok());
  const TcoReport r = ComputeTco(in, std::nullopt);
  // 10⁶ kW × 730 h × 1 000 €/kWh = 7.3 × 10¹¹ €.
  EXPECT_EQ(r.owning.power_cents, 73'000'000'000'000);
  EXPECT_EQ(r.owning.cooling_cents, 730'000'000'000'000);
  EXPECT_GT(r.assumed.pay_as_you_go_cents, 0);
  EXPECT_GT(r.break_even_utilisation_ppm, 0);
}

TEST(TcoTest, Formats) {
  EXPECT_EQ(FormatCents(1'507'833), "15078.33");
  EXPECT_EQ(FormatCents(5), "0.05");
  EXPECT_EQ(FormatCents(0), "0.00");
  EXPECT_EQ(FormatCents(-5), "-0.05");
  EXPECT_EQ(FormatPpmPercent(921'451), "92.15%");
  EXPECT_EQ(FormatPpmPercent(600'000), "60.00%");
  EXPECT_EQ(FormatPpmPercent(28'935), "2.89%");
  EXPECT_EQ(FormatPpmPercent(28'950), "2.90%");  // half up
  EXPECT_EQ(FormatPpmPercent(1'500'000), "150.00%");
}

TEST(TcoTest, SvgHasBothLinesTheBreakEvenAndTheAxes) {
  TcoInputs in = Defaults();
  const std::string svg = RenderTcoSvg(ComputeTco(in, std::nullopt), "8 x H100 <&>");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("id=\"owning\""), std::string::npos);
  EXPECT_NE(svg.find("id=\"pay-as-you-go\""), std::string::npos);
  EXPECT_NE(svg.find("<circle id=\"break-even\""), std::string::npos);
  EXPECT_NE(svg.find("break-even 92.15%"), std::string::npos);
  EXPECT_NE(svg.find("GPU utilisation"), std::string::npos);
  EXPECT_NE(svg.find("cost per month (EUR)"), std::string::npos);
  EXPECT_NE(svg.find("8 x H100 &lt;&amp;&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("<&>"), std::string::npos);
  // The owning line is flat (y1 == y2); the break-even circle sits on it.
  const size_t owning = svg.find("id=\"owning\"");
  const std::string line = svg.substr(owning, svg.find('\n', owning) - owning);
  const auto attr = [&](const std::string& text, const std::string& name) {
    const size_t at = text.find(name + "=\"") + name.size() + 2;
    return text.substr(at, text.find('"', at) - at);
  };
  EXPECT_EQ(attr(line, "y1"), attr(line, "y2"));
  const size_t circle = svg.find("<circle");
  EXPECT_EQ(attr(svg.substr(circle), "cy"), attr(line, "y1"));

  // Cheap rental: no break-even within 100 %, said in words instead of a marker.
  in.price_per_gpu_minute_micro_eur = 1'000;
  const std::string never = RenderTcoSvg(ComputeTco(in, std::nullopt), "t");
  EXPECT_EQ(never.find("<circle"), std::string::npos);
  EXPECT_NE(never.find("no break-even"), std::string::npos);
}

TEST(TcoTest, ValidateNamesTheQueryParameterForTheApi) {
  TcoInputs in = Defaults();
  in.staff_fraction_ppm = 2 * kTcoMicro;
  std::string bad;
  const base::Status s = ValidateTcoInputs(in, TcoNames::kQuery, &bad);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(bad, "staff-fraction");
  EXPECT_EQ(s.message().rfind("staff_fraction must be", 0), 0u) << s.message();
  EXPECT_EQ(TcoInputName("price-per-gpu-minute-eur", TcoNames::kQuery), "price_per_gpu_minute_eur");
  EXPECT_EQ(TcoInputName("gpus", TcoNames::kFlags), "--gpus");
  in = Defaults();
  in.gpus = 0;
  EXPECT_FALSE(ValidateTcoInputs(in, TcoNames::kQuery, &bad).ok());
  EXPECT_EQ(bad, "gpus");
}

TEST(TcoTest, TheInputTableHoldsTheDefaults) {
  // Parsing every default text gives the defaults of TcoInputs: the CLI's --help and the API's
  // defaults cannot drift apart.
  TcoInputs parsed;
  const TcoInputs defaults;
  for (const TcoDecimalInput& d : kTcoDecimalInputs) {
    if (d.default_text.empty()) continue;
    auto value = ParseTcoDecimal(d.name, d.default_text, d.max_units);
    ASSERT_TRUE(value.ok()) << d.name;
    parsed.*d.member = *value;
    EXPECT_EQ(parsed.*d.member, defaults.*d.member) << d.name;
  }
}

TEST(TcoTest, CatalogPriceIsTheFlavorWithTheFewestGpusPerUnit) {
  const std::vector<TcoFlavor> flavors = {{"h100-2-gpu", "H100", 2, 80'000},
                                          {"h100-1-gpu", "H100", 1, 46'700},
                                          {"l4-1-gpu", "L4", 1, 13'800},
                                          {"free-gpu", "A100", 1, 0}};
  auto price = FindTcoCatalogPrice(flavors, "h100");
  ASSERT_TRUE(price.ok()) << price.status();
  EXPECT_EQ(price->flavor, "h100-1-gpu");
  EXPECT_EQ(price->price_per_gpu_minute_micro_eur, 46'700);
  // Only the 2-GPU flavor: its price per GPU (half up).
  auto two = FindTcoCatalogPrice({{"x-2-gpu", "X", 2, 80'001}}, "X");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->price_per_gpu_minute_micro_eur, 40'001);
  EXPECT_EQ(two->gpus_per_unit, 2);
  auto missing = FindTcoCatalogPrice(flavors, "A100");  // priced at 0: skipped
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), base::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("H100, H100, L4, A100"), std::string::npos)
      << missing.status().message();
}

TEST(TcoTest, CurvesAndJson) {
  const TcoInputs in = Defaults();
  const TcoReport r = ComputeTco(in, std::nullopt);
  const std::vector<TcoCurvePoint> curves = TcoCurves(in, r);
  ASSERT_EQ(curves.size(), 21u);
  EXPECT_EQ(curves.front().utilisation_ppm, 0);
  EXPECT_EQ(curves.front().pay_as_you_go_cents, 0);
  EXPECT_EQ(curves.back().utilisation_ppm, kTcoMicro);
  EXPECT_EQ(curves.back().pay_as_you_go_cents, r.pay_as_you_go_full_cents);
  EXPECT_EQ(curves[12].utilisation_ppm, 600'000);
  EXPECT_EQ(curves[12].pay_as_you_go_cents, r.assumed.pay_as_you_go_cents);
  for (const TcoCurvePoint& p : curves) EXPECT_EQ(p.owning_cents, 1'507'833);
  // A step that does not divide 100 % still ends at 100 %.
  const auto odd = TcoCurves(in, r, 300'000);
  ASSERT_EQ(odd.size(), 5u);
  EXPECT_EQ(odd.back().utilisation_ppm, kTcoMicro);

  const Json j = TcoReportJson(in, r, {.gpu_model = "H100", .flavor = "h100-1-gpu"});
  EXPECT_EQ(j["owning"]["total_cents"], 1'507'833);
  EXPECT_EQ(j["break_even_utilisation_percent"], "92.15%");
  EXPECT_EQ(j["assumed"]["cheaper"], "pay-as-you-go");
  EXPECT_EQ(j["price_source"], "catalog");
  EXPECT_TRUE(j["actual"].is_null());
  EXPECT_TRUE(j["assumed"]["months_to_break_even"].is_null());
}

}  // namespace
}  // namespace sovai::control
