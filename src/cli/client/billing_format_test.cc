#include "cli/client/billing_format.h"

#include <gtest/gtest.h>

#include <limits>

#include "base/time.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

TEST(BillingFormatTest, MoneyFromMicroEurosIsExact) {
  EXPECT_EQ(FormatEur(186'800), "0.1868");  // docs/billing.md: 61 s on 2 units at 0.0467 €/min
  EXPECT_EQ(FormatEur(93'400), "0.0934");
  EXPECT_EQ(FormatEur(50'000'000), "50.00");
  EXPECT_EQ(FormatEur(12'500'000), "12.50");
  EXPECT_EQ(FormatEur(1), "0.000001");
  EXPECT_EQ(FormatEur(0), "0.00");
  EXPECT_EQ(FormatEur(-1'500'000), "-1.50");
  EXPECT_EQ(FormatEur(-1), "-0.000001");
  EXPECT_EQ(FormatEurFixed(93'400), "0.093400");
  EXPECT_EQ(FormatEurFixed(0), "0.000000");
  EXPECT_EQ(FormatMicroUnits(250'000, 0), "0.25");
  EXPECT_EQ(FormatMicroUnits(3'000'000, 0), "3");
  // Every int64 is formatted digit for digit, the extremes included (a double would not be).
  EXPECT_EQ(FormatEurFixed(std::numeric_limits<int64_t>::max()), "9223372036854.775807");
  EXPECT_EQ(FormatEurFixed(std::numeric_limits<int64_t>::min()), "-9223372036854.775808");
  EXPECT_EQ(FormatEur(9'007'199'254'740'993), "9007199254.740993");  // 2^53 + 1
}

TEST(BillingFormatTest, ParsesEurosWithoutRounding) {
  EXPECT_EQ(ParseEurMicros("50").value(), 50'000'000);
  EXPECT_EQ(ParseEurMicros("50.00").value(), 50'000'000);
  EXPECT_EQ(ParseEurMicros("12.5").value(), 12'500'000);
  EXPECT_EQ(ParseEurMicros("0.000001").value(), 1);
  EXPECT_EQ(ParseEurMicros("0.1").value(), 100'000);  // not 0.1000000000000000055...
  EXPECT_EQ(ParseEurMicros("-3.25").value(), -3'250'000);
  EXPECT_EQ(ParseEurMicros("+1").value(), 1'000'000);
  EXPECT_EQ(ParseEurMicros("1000000000000").value(), kMaxParsedEur * kMicroEurPerEur);
  // Round trip of what FormatEur writes.
  for (int64_t micros : {int64_t{0}, int64_t{1}, int64_t{93'400}, int64_t{-7'000'001}}) {
    EXPECT_EQ(ParseEurMicros(FormatEur(micros)).value(), micros);
  }
}

TEST(BillingFormatTest, RejectsWhatIsNotAnAmount) {
  for (const char* bad :
       {"", "-", "+", ".", "5.", ".5", "1,50", "1.5e3", " 5", "5 ", "abc", "0x10", "1.2.3", "--1",
        "1.0000001", "1000000000001", "99999999999999999999999"}) {
    auto parsed = ParseEurMicros(bad);
    EXPECT_FALSE(parsed.ok()) << "'" << bad << "' gave " << parsed.value_or(0);
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), base::StatusCode::kInvalidArgument);
      EXPECT_NE(parsed.status().message().find("'" + std::string(bad) + "'"), std::string::npos)
          << parsed.status().message();
    }
  }
  EXPECT_NE(ParseEurMicros("1.0000001").status().message().find("more than six decimals"),
            std::string::npos);
}

TEST(BillingFormatTest, DatesAreUtcDaysOrRfc3339Instants) {
  const int64_t nov1 = base::ParseRfc3339("2026-11-01T00:00:00Z").value();
  EXPECT_EQ(ParseDateArg("2026-11-01", DateBound::kStart).value(), nov1);
  // --to 2026-11-30 includes the 30th: the period ends at the next midnight.
  EXPECT_EQ(ParseDateArg("2026-11-30", DateBound::kEnd).value(),
            base::ParseRfc3339("2026-12-01T00:00:00Z").value());
  EXPECT_EQ(ParseDateArg("2028-02-29", DateBound::kEnd).value(),
            base::ParseRfc3339("2028-03-01T00:00:00Z").value());
  // An instant is that instant, whichever end it is.
  EXPECT_EQ(ParseDateArg("2026-11-01T02:00:00+02:00", DateBound::kEnd).value(), nov1);
  EXPECT_EQ(ParseDateArg("2026-11-01T00:00:00Z", DateBound::kStart).value(), nov1);

  for (const char* bad :
       {"", "2026-13-01", "2026-02-29", "2026-11-31", "2026-1-01", "26-11-01", "2026/11/01",
        "yesterday", "2026-11-01T25:00:00Z", "2026-11-01 ", "2026-11-01T00:00:00"}) {
    auto parsed = ParseDateArg(bad, DateBound::kStart);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("'" + std::string(bad) + "'"), std::string::npos);
  }
  EXPECT_NE(ParseDateArg("tomorrow", DateBound::kStart).status().message().find("YYYY-MM-DD"),
            std::string::npos);
  // The day after the last one cannot be written on the wire.
  EXPECT_TRUE(ParseDateArg("9999-12-31", DateBound::kStart).ok());
  EXPECT_FALSE(ParseDateArg("9999-12-31", DateBound::kEnd).ok());
}

TEST(BillingFormatTest, QueryTimesAndMonths) {
  const int64_t nov1 = base::ParseRfc3339("2026-11-01T00:00:00Z").value();
  EXPECT_EQ(FormatQueryTime(nov1), "2026-11-01T00:00:00Z");
  EXPECT_EQ(FormatQueryTime(nov1 + 250'000), "2026-11-01T00:00:00.250000Z");
  EXPECT_EQ(ParseMonth("2026-11").value(), "2026-11");
  EXPECT_EQ(ParseMonth("2026-01").value(), "2026-01");
  for (const char* bad : {"", "2026-00", "2026-13", "2026-1", "2026-11-01", "11-2026", "2026/11"}) {
    EXPECT_FALSE(ParseMonth(bad).ok()) << bad;
  }
}

TEST(BillingFormatTest, AWindowBecomesFromAndToQueryParameters) {
  EXPECT_EQ(AddWindowQuery("/v1/audit", std::nullopt, std::nullopt).value(), "/v1/audit");
  EXPECT_EQ(AddWindowQuery("/v1/billing/usage", "2026-11-01", "2026-11-30").value(),
            "/v1/billing/usage?from=2026-11-01T00%3A00%3A00Z&to=2026-12-01T00%3A00%3A00Z");
  EXPECT_EQ(AddWindowQuery("/v1/audit", std::nullopt, "2026-11-30").value(),
            "/v1/audit?to=2026-12-01T00%3A00%3A00Z");
  auto bad_from = AddWindowQuery("/v1/audit", "yesterday", std::nullopt);
  EXPECT_EQ(bad_from.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_TRUE(bad_from.status().message().starts_with("--from")) << bad_from.status();
  auto bad_to = AddWindowQuery("/v1/audit", std::nullopt, "2026-13-01");
  EXPECT_TRUE(bad_to.status().message().starts_with("--to")) << bad_to.status();
  // The same day is a one-day window; a --to before --from is refused.
  EXPECT_TRUE(AddWindowQuery("/v1/audit", "2026-11-02", "2026-11-02").ok());
  auto backwards = AddWindowQuery("/v1/audit", "2026-11-02", "2026-11-01T00:00:00Z");
  EXPECT_EQ(backwards.status().message(), "--to must be after --from");
}

TEST(BillingFormatTest, QuantitiesAndPercentages) {
  EXPECT_EQ(FormatQuantity("job", 4), "4 unit-min");
  EXPECT_EQ(FormatQuantity("app", 2), "2 unit-min");
  // Regression: a notebook's line is compute too (it was printed as a bare "1").
  EXPECT_EQ(FormatQuantity("notebook", 1), "1 unit-min");
  EXPECT_TRUE(IsComputeKind("notebook"));
  EXPECT_TRUE(IsComputeKind("job"));
  EXPECT_FALSE(IsComputeKind("storage"));
  EXPECT_FALSE(IsComputeKind("tokens"));
  EXPECT_EQ(FormatQuantity("storage", 250'000), "0.25 GiB-month");
  EXPECT_EQ(FormatQuantity("tokens", 1200), "1200 tokens");
  EXPECT_EQ(FormatQuantity("gizmo", 7), "7");

  EXPECT_EQ(FormatPercent(12'345'600, 50'000'000), "24.6%");  // 24.69: rounded down
  EXPECT_EQ(FormatPercent(50'000'000, 50'000'000), "100.0%");
  EXPECT_EQ(FormatPercent(0, 50'000'000), "0.0%");
  EXPECT_EQ(FormatPercent(75'000'001, 50'000'000), "150.0%");
  EXPECT_EQ(FormatPercent(5, 0), "-");
  EXPECT_EQ(FormatPercent(5, -1), "-");
  EXPECT_EQ(FormatPercent(-1'000'000, 10'000'000), "-10.0%");
  // No overflow where part × 1000 leaves 64 bits.
  EXPECT_EQ(FormatPercent(std::numeric_limits<int64_t>::max(), 1), "922337203685477580700.0%");
}

TEST(BillingFormatTest, CsvQuotingFollowsRfc4180) {
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField(""), "");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField("cr\r"), "\"cr\r\"");
  EXPECT_EQ(CsvField(" spaced "), " spaced ");  // spaces are data, not a reason to quote
  EXPECT_EQ(CsvRecord({"a", "b,c", ""}), "a,\"b,c\",\r\n");
  EXPECT_EQ(CsvRecord({}), "\r\n");
}

TEST(BillingFormatTest, LinesCsvWritesEveryLineMemberAndExactAmounts) {
  Json lines = Json::array({{{"project", "prj_1"},
                             {"kind", "job"},
                             {"resource", "job_01"},
                             {"flavor", "h100-1-gpu"},
                             {"units", 2},
                             {"start", "2026-11-29T14:00:00Z"},
                             {"end", "2026-11-29T14:01:01Z"},
                             {"open", false},
                             {"minutes", 2},
                             {"quantity", 4},
                             {"unit_price_micro_eur", 46'700},
                             {"amount_micro_eur", 186'800},
                             {"amount_eur", "0.186800"}},
                            // A storage line: no flavor, no end yet; an odd resource name to quote;
                            // amount_eur written from the integer even when the string disagrees.
                            {{"project", "prj_1"},
                             {"kind", "storage"},
                             {"resource", "bucket \"a,b\""},
                             {"start", "2026-11-01T00:00:00Z"},
                             {"end", nullptr},
                             {"open", true},
                             {"quantity", 250'000},
                             {"amount_micro_eur", 2'500},
                             {"amount_eur", "wrong"}},
                            // Only the string: kept as sent.
                            {{"kind", "tokens"}, {"amount_eur", "0.500000"}}});
  EXPECT_EQ(LinesCsv(lines),
            "project,kind,resource,flavor,units,start,end,open,minutes,quantity,"
            "unit_price_micro_eur,amount_micro_eur,amount_eur\r\n"
            "prj_1,job,job_01,h100-1-gpu,2,2026-11-29T14:00:00Z,2026-11-29T14:01:01Z,false,2,4,"
            "46700,186800,0.186800\r\n"
            "prj_1,storage,\"bucket \"\"a,b\"\"\",,,2026-11-01T00:00:00Z,,true,,250000,,2500,"
            "0.002500\r\n"
            ",tokens,,,,,,,,,,,0.500000\r\n");
  EXPECT_EQ(LinesCsv(Json()), LinesCsv(Json::array()));
  EXPECT_EQ(LinesCsvHeader().size(), 13u);
}

}  // namespace
}  // namespace sovai::cli::client
