// `sovai tco` end to end against fake /v1/flavors and /v1/billing/usage handlers on a loopback
// net::Server (as billing_commands_test.cc does), and without a login.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "cli/client/commands.h"
#include "cli/client/fake_api_test_util.h"
#include "net/http.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

constexpr char kToken[] = "sov_tco";

class FakeTcoApi {
 public:
  FakeTcoApi() : server_(StartFakeApiServer([this](net::Request& req) { return Handle(req); })) {}

  std::string url() const { return FakeApiUrl(*server_); }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  std::map<std::string, std::string> usage_query() {
    std::lock_guard<std::mutex> lock(mu_);
    return usage_query_;
  }
  void set_usage_forbidden(bool forbidden) {
    std::lock_guard<std::mutex> lock(mu_);
    usage_forbidden_ = forbidden;
  }

 private:
  net::Response Handle(net::Request& req) {
    const std::string method(req.method());
    const std::string path = req.path();
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(method + " " + path);
    if (req.header("Authorization").value_or("") != std::string("Bearer ") + kToken) {
      return FakeProblem(401, "unauthenticated", "the token is unknown, revoked or expired");
    }
    if (method == "GET" && path == "/v1/flavors") {
      // The H100 is also sold as a 2-GPU flavor at a lower price per unit-GPU... that is not
      // the one to use: the fewest GPUs per unit wins.
      return net::Response::Json(
          200,
          Json{{"items",
                Json::array(
                    {{{"id", "h100-2-gpu"},
                      {"kind", "gpu"},
                      {"gpu_model", "H100"},
                      {"gpus_per_unit", 2},
                      {"price_per_minute_eur", "0.0800"}},
                     {{"id", "h100-1-gpu"},
                      {"kind", "gpu"},
                      {"gpu_model", "H100"},
                      {"gpus_per_unit", 1},
                      {"price_per_minute_eur", "0.0467"}},
                     {{"id", "l4-1-gpu"},
                      {"kind", "gpu"},
                      {"gpu_model", "L4"},
                      {"gpus_per_unit", 1},
                      {"price_per_minute_eur", "0.0138"}},
                     {{"id", "ai1-1-cpu"}, {"kind", "cpu"}, {"price_per_minute_eur", "0.0005"}}})}}
              .dump());
    }
    if (method == "GET" && path == "/v1/billing/usage") {
      usage_query_.clear();
      for (const char* name : {"from", "to", "group_by", "project"}) {
        if (auto value = req.query(name)) usage_query_[name] = std::string(*value);
      }
      if (usage_forbidden_) {
        return FakeProblem(403, "permission-denied", "a token limited to labels cannot read usage");
      }
      // 30 000 started unit-minutes of h100-1-gpu in the window asked for.
      return net::Response::Json(200,
                                 Json{{"from", usage_query_["from"]},
                                      {"to", usage_query_["to"]},
                                      {"currency", "EUR"},
                                      {"groups", Json::array({{{"key", "h100-1-gpu"},
                                                               {"amount_micro_eur", 1'401'000'000},
                                                               {"minutes", 30'000},
                                                               {"quantity", 30'000}},
                                                              {{"key", "storage"},
                                                               {"amount_micro_eur", 2'500},
                                                               {"minutes", 0},
                                                               {"quantity", 250'000}}})},
                                      {"lines", Json::array()},
                                      {"total_micro_eur", 1'401'002'500}}
                                     .dump());
    }
    return FakeProblem(404, "not-found", "no route " + method + " " + path);
  }

  std::mutex mu_;  // guards everything below but server_
  std::vector<std::string> requests_;
  std::map<std::string, std::string> usage_query_;
  bool usage_forbidden_ = false;
  std::unique_ptr<net::Server> server_;  // last: stops before the state its handlers use
};

class TcoCommandTest : public FakeApiCommandTest<FakeTcoApi> {
 protected:
  TcoCommandTest() : FakeApiCommandTest(kToken) {}

  // Runs `sovai tco <args...>`.
  int Run(std::vector<std::string> args) {
    args.insert(args.begin(), "tco");
    return FakeApiCommandTest::Run(std::move(args));
  }
  void LogOut() { vars_ = {{"HOME", dir_}}; }
};

TEST_F(TcoCommandTest, TableUsesTheCatalogPriceAndTheLast90Days) {
  ASSERT_EQ(Run({}), kExitOk) << console_.err();
  const std::string& out = console_.out();
  EXPECT_NE(out.find("8 x H100 at 0.0467 EUR per GPU-minute (catalog: h100-1-gpu)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("15078.33"), std::string::npos) << out;  // owning, per month
  EXPECT_NE(out.find("5555.56"), std::string::npos) << out;   // depreciation
  EXPECT_NE(out.find("9818.21"), std::string::npos) << out;   // pay-as-you-go at 60 %
  EXPECT_NE(out.find("ACTUAL (LAST 90 DAYS)"), std::string::npos) << out;
  EXPECT_NE(out.find("2.89%"), std::string::npos) << out;   // 10 139 of 350 400 GPU-minutes
  EXPECT_NE(out.find("473.49"), std::string::npos) << out;  // 10 139 × 0.0467
  EXPECT_NE(out.find("never"), std::string::npos) << out;
  EXPECT_NE(out.find("Break-even utilisation: 92.15%"), std::string::npos) << out;
  EXPECT_EQ(api_.requests(),
            (std::vector<std::string>{"GET /v1/flavors", "GET /v1/billing/usage"}));
  const auto query = api_.usage_query();
  EXPECT_EQ(query.at("group_by"), "flavor");
  EXPECT_EQ(query.count("project"), 0u);
  ASSERT_TRUE(query.count("from") && query.count("to"));
  EXPECT_LT(query.at("from"), query.at("to"));
}

TEST_F(TcoCommandTest, JsonHasEveryNumberInCents) {
  ASSERT_EQ(Run({"-o", "json", "--price-per-gpu-minute-eur", "0.1"}), kExitOk) << console_.err();
  const Json j = Json::parse(console_.out());
  EXPECT_EQ(j["price_source"], "flag");
  EXPECT_EQ(j["flavor"], "h100-1-gpu");  // the history is still the catalog flavor's
  EXPECT_EQ(j["price_per_gpu_minute_micro_eur"], 100'000);
  EXPECT_EQ(j["hours_per_month"], 730);
  EXPECT_EQ(j["owning"]["total_cents"], 1'507'833);
  EXPECT_EQ(j["owning"]["power_cents"], 186'150);
  EXPECT_EQ(j["owning"]["cooling_cents"], 74'460);
  EXPECT_EQ(j["assumed"]["pay_as_you_go_cents"], 2'102'400);
  EXPECT_EQ(j["assumed"]["cheaper"], "owning");
  EXPECT_EQ(j["assumed"]["months_to_break_even"], 18);
  EXPECT_EQ(j["actual"]["gpu_minutes"], 30'000);
  EXPECT_EQ(j["actual"]["gpu_minutes_per_month"], 10'139);
  EXPECT_EQ(j["actual"]["cheaper"], "pay-as-you-go");
  EXPECT_TRUE(j["actual"]["months_to_break_even"].is_null());
  EXPECT_EQ(j["break_even_utilisation_percent"], "43.03%");  // 15 078.33 / 35 040.00
}

TEST_F(TcoCommandTest, WorksWithoutALoginGivenThePrice) {
  LogOut();
  ASSERT_EQ(Run({"--price-per-gpu-minute-eur", "0.0467", "-o", "json"}), kExitOk) << console_.err();
  const Json j = Json::parse(console_.out());
  EXPECT_EQ(j["owning"]["total_cents"], 1'507'833);
  EXPECT_TRUE(j["actual"].is_null());
  EXPECT_TRUE(j["flavor"].is_null());
  EXPECT_TRUE(api_.requests().empty());
}

TEST_F(TcoCommandTest, WithoutALoginThePriceIsRequired) {
  LogOut();
  EXPECT_EQ(Run({}), kExitUsage);
  EXPECT_NE(console_.err().find("--price-per-gpu-minute-eur"), std::string::npos) << console_.err();
  EXPECT_TRUE(api_.requests().empty());
}

TEST_F(TcoCommandTest, BadFlagsAreRefusedBeforeAnyRequestNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--utilisation", "1.5"}, "--utilisation"},
      {{"--utilisation", "0.6.1"}, "--utilisation"},
      {{"--gpus", "0"}, "--gpus"},
      {{"--purchase-eur", "abc"}, "--purchase-eur"},
      {{"--purchase-eur", "0"}, "--purchase-eur"},
      {{"--power-kw", "-3"}, "--power-kw"},
      {{"--eur-per-kwh", "0.1234567"}, "--eur-per-kwh"},
      {{"--staff-fraction", "2"}, "--staff-fraction"},
      {{"--depreciation-months", "0"}, "--depreciation-months"},
      {{"--price-per-gpu-minute-eur", "0"}, "--price-per-gpu-minute-eur"},
      {{"-o", "pdf"}, "--output"},
      {{"--svg", ""}, "--svg"},
      {{"extra"}, ""},
  };
  for (const auto& [args, flag] : cases) {
    EXPECT_EQ(Run(args), kExitUsage) << args.front();
    EXPECT_NE(console_.err().find(flag), std::string::npos) << console_.err();
  }
  EXPECT_TRUE(api_.requests().empty());
}

TEST_F(TcoCommandTest, SvgToStdoutAndToAFile) {
  ASSERT_EQ(Run({"-o", "svg", "--no-history"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out().rfind("<?xml", 0), 0u);
  EXPECT_NE(console_.out().find("break-even 92.15%"), std::string::npos);
  EXPECT_EQ(api_.requests(), (std::vector<std::string>{"GET /v1/flavors"}));

  const std::string path = dir_ + "/tco.svg";
  ASSERT_EQ(Run({"--svg", path}), kExitOk) << console_.err();
  EXPECT_NE(console_.out().find("Break-even utilisation"), std::string::npos);  // and the table
  auto svg = base::Env::Default().ReadFile(path);
  ASSERT_TRUE(svg.ok());
  EXPECT_NE(svg->find("id=\"actual\""), std::string::npos);
  EXPECT_NE(svg->find("</svg>"), std::string::npos);

  EXPECT_EQ(Run({"--svg", dir_ + "/missing/dir/tco.svg"}), kExitFailure);
  EXPECT_NE(console_.err().find("--svg"), std::string::npos) << console_.err();
}

TEST_F(TcoCommandTest, UsageRefusedShowsTheAssumedComparisonOnly) {
  api_.set_usage_forbidden(true);
  ASSERT_EQ(Run({}), kExitOk) << console_.err();
  EXPECT_NE(console_.err().find("no usage history"), std::string::npos) << console_.err();
  EXPECT_EQ(console_.out().find("ACTUAL"), std::string::npos);
  EXPECT_NE(console_.out().find("9818.21"), std::string::npos);
}

TEST_F(TcoCommandTest, UnknownGpuModelFailsNamingTheCatalog) {
  EXPECT_EQ(Run({"--gpu-model", "B200"}), kExitFailure);
  EXPECT_NE(console_.err().find("B200"), std::string::npos) << console_.err();
  EXPECT_NE(console_.err().find("H100"), std::string::npos) << console_.err();
  // The model is matched case-insensitively; L4's one flavor.
  ASSERT_EQ(Run({"--gpu-model", "l4", "--gpus", "1", "-o", "json", "--no-history"}), kExitOk);
  EXPECT_EQ(Json::parse(console_.out())["flavor"], "l4-1-gpu");
  // With a price given, an unknown model only loses the history.
  ASSERT_EQ(Run({"--gpu-model", "B200", "--price-per-gpu-minute-eur", "0.09"}), kExitOk)
      << console_.err();
  EXPECT_NE(console_.err().find("no usage history"), std::string::npos) << console_.err();
}

TEST_F(TcoCommandTest, IsInTheHelp) {
  EXPECT_NE(ClientCommandsHelp().find("tco"), std::string::npos);
  EXPECT_EQ(Run({"--help"}), kExitOk);
  EXPECT_NE(console_.out().find("--utilisation"), std::string::npos);
  EXPECT_NE(console_.out().find("--cooling-overhead"), std::string::npos);
}

}  // namespace
}  // namespace sovai::cli::client
