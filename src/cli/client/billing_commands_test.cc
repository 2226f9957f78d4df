// `sovai billing`, `sovai budget` and `--dry-run` of `job run` / `app run` end to end, against a
// fake of the billing routes of docs/billing.md (canned answers, recorded requests) on a loopback
// net::Server, as commands_test.cc does for the rest of /v1.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "cli/client/billing_format.h"
#include "cli/client/commands.h"
#include "cli/client/fake_api_test_util.h"
#include "net/http.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

constexpr char kToken[] = "sov_billing";

net::Response Ok(const Json& body, int status = 200) {
  return net::Response::Json(status, body.dump());
}

// Three lines of docs/billing.md's Line: a job of 61 s on 2 units of h100-1-gpu, an app replica
// still running, and storage.
Json Lines() {
  return Json::array({{{"project", "prj_1"},
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
                      {{"project", "prj_1"},
                       {"kind", "app"},
                       {"resource", "app_01"},
                       {"flavor", "ai1-1-cpu"},
                       {"units", 1},
                       {"start", "2026-11-29T15:00:00Z"},
                       {"end", "2026-11-29T15:03:00Z"},
                       {"open", true},
                       {"minutes", 3},
                       {"quantity", 3},
                       {"unit_price_micro_eur", 500},
                       {"amount_micro_eur", 1'500},
                       {"amount_eur", "0.001500"}},
                      {{"project", "prj_1"},
                       {"kind", "storage"},
                       {"resource", "bucket"},
                       {"flavor", ""},
                       {"units", 0},
                       {"start", "2026-11-01T00:00:00Z"},
                       {"end", "2026-11-29T16:00:00Z"},
                       {"open", false},
                       {"minutes", 0},
                       {"quantity", 250'000},
                       {"unit_price_micro_eur", 10'000},
                       {"amount_micro_eur", 2'500},
                       {"amount_eur", "0.002500"}}});
}

// The billing routes of docs/billing.md. Every request is recorded as "METHOD path", its query
// members by name, bodies by path.
class FakeBillingApi {
 public:
  FakeBillingApi()
      : server_(StartFakeApiServer([this](net::Request& req) { return Handle(req); })) {}

  std::string url() const { return FakeApiUrl(*server_); }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  // The last request's query, decoded, by member.
  std::map<std::string, std::string> query() {
    std::lock_guard<std::mutex> lock(mu_);
    return query_;
  }
  Json body(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_[path];
  }
  int created() {
    std::lock_guard<std::mutex> lock(mu_);
    return created_;
  }

 private:
  net::Response Handle(net::Request& req) {
    const std::string method(req.method());
    const std::string path = req.path();
    std::string body_text = req.body().ReadAll().value_or("");
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(method + " " + path);
    query_.clear();
    for (const char* name : {"from", "to", "group_by", "project", "month", "dry_run"}) {
      if (auto value = req.query(name)) query_[name] = std::string(*value);
    }
    if (!body_text.empty()) bodies_[path] = Json::parse(body_text, nullptr, false);
    if (req.header("Authorization").value_or("") != std::string("Bearer ") + kToken) {
      return FakeProblem(401, "unauthenticated", "the token is unknown, revoked or expired");
    }
    if (method == "GET" && path == "/v1/whoami") {
      return Ok({{"user", {{"id", "usr_1"}, {"name", "alice"}}},
                 {"project", {{"id", "prj_1"}, {"name", "nlp"}}},
                 {"role", "admin"}});
    }
    if (method == "GET" && path == "/v1/billing/usage") {
      return Ok({{"from", query_.count("from") ? query_["from"] : "2026-11-01T00:00:00Z"},
                 {"to", query_.count("to") ? query_["to"] : "2026-11-29T16:00:00Z"},
                 {"currency", "EUR"},
                 {"groups", Json::array({{{"key", "h100-1-gpu"},
                                          {"amount_micro_eur", 186'800},
                                          {"amount_eur", "0.186800"},
                                          {"minutes", 2},
                                          {"quantity", 4}},
                                         {{"key", "ai1-1-cpu"},
                                          {"amount_micro_eur", 1'500},
                                          {"amount_eur", "0.001500"},
                                          {"minutes", 3},
                                          {"quantity", 3}},
                                         {{"key", ""},
                                          {"amount_micro_eur", 2'500},
                                          {"amount_eur", "0.002500"},
                                          {"minutes", 0},
                                          {"quantity", 250'000}}})},
                 {"lines", Lines()},
                 {"total_micro_eur", 190'800},
                 {"total_eur", "0.190800"}});
    }
    if (method == "GET" && path == "/v1/projects") {  // names for --project
      return Ok({{"items", Json::array({{{"id", "prj_1"}, {"name", "nlp"}},
                                        {{"id", "prj_2"}, {"name", "vision"}}})}});
    }
    if (method == "GET" && path == "/v1/billing/statement" && query_.count("month") > 0 &&
        query_.at("month") == "2026-09") {
      // One notebook's line: a compute line like a job's.
      return Ok({{"month", "2026-09"},
                 {"project", "prj_1"},
                 {"lines", Json::array({{{"project", "prj_1"},
                                         {"kind", "notebook"},
                                         {"resource", "nb_01"},
                                         {"flavor", "ai1-1-cpu"},
                                         {"units", 1},
                                         {"start", "2026-09-02T10:00:00Z"},
                                         {"end", "2026-09-02T10:00:40Z"},
                                         {"open", false},
                                         {"minutes", 1},
                                         {"quantity", 1},
                                         {"unit_price_micro_eur", 500},
                                         {"amount_micro_eur", 500},
                                         {"amount_eur", "0.000500"}}})},
                 {"total_micro_eur", 500},
                 {"total_eur", "0.000500"}});
    }
    if (method == "GET" && path == "/v1/billing/statement") {
      Json lines = Lines();
      lines.erase(1);  // the open line
      return Ok({{"month", query_.count("month") ? query_["month"] : "2026-11"},
                 {"project", "prj_1"},
                 {"lines", lines},
                 {"total_micro_eur", 189'300},
                 {"total_eur", "0.189300"}});
    }
    if (path == "/v1/projects/prj_1/budget") {
      if (method == "PUT") budget_ = bodies_[path];
      if (method == "GET" || method == "PUT") return Ok(BudgetAnswer());
    }
    if (method == "PUT" && path == "/v1/projects/prj_2/budget") {
      return FakeProblem(403, "permission-denied",
                         "only an admin of project prj_2 may set its budget");
    }
    if (method == "GET" && path == "/v1/projects/prj_nope/budget") {
      return FakeProblem(404, "not-found", "project 'prj_nope' does not exist");
    }
    if (method == "POST" && (path == "/v1/jobs" || path == "/v1/apps")) {
      if (query_["dry_run"] != "true") {
        ++created_;
        return Ok({{"id", "created_1"}}, 201);
      }
      return Quote(path, bodies_[path]);
    }
    return FakeProblem(404, "not-found", "no route " + method + " " + path);
  }

  // The budget's answer: the stored cap (none before a PUT) and 12.3456 € spent this month.
  Json BudgetAnswer() const {
    const int64_t spent = 12'345'600;
    Json answer = {
        {"monthly_cap_eur", nullptr}, {"alert_percent", nullptr}, {"spent_eur", "12.345600"},
        {"spent_micro_eur", spent},   {"alert", false},           {"capped", false}};
    if (budget_.is_object()) {
      answer["monthly_cap_eur"] = budget_["monthly_cap_eur"];
      answer["alert_percent"] = budget_.value("alert_percent", 80);
      const int64_t cap = ParseEurMicros(budget_["monthly_cap_eur"].get<std::string>()).value();
      answer["alert"] = spent * 100 >= cap * answer["alert_percent"].get<int64_t>();
      answer["capped"] = spent >= cap;
    }
    return answer;
  }

  // A dry run's quote: 0.0934 €/min (2 units × 46 700 µ€), priced at the spec's timeout or the
  // default hour; a job has a 50 € budget with 37.6544 € left, an app none.
  net::Response Quote(const std::string& path, const Json& spec) {
    const int64_t timeout_s = spec.value("timeout_s", int64_t{3600});
    const int64_t price = 93'400;
    const int64_t cost = (timeout_s + 59) / 60 * price;
    const bool job = path == "/v1/jobs";
    const int64_t left = 37'654'400;
    const bool refused = job && cost > left;
    Json quote = {{"price_per_minute_eur", "0.093400"},
                  {"price_per_minute_micro_eur", price},
                  {"timeout_s", timeout_s},
                  {"cost_at_timeout_eur", "x"},
                  {"cost_at_timeout_micro_eur", cost},
                  {"budget_left_eur", job ? Json("37.654400") : Json(nullptr)},
                  {"would_be_refused", refused},
                  {"reason", refused ? "the job's cost at its timeout would take the month's spend "
                                       "over the cap"
                                     : ""}};
    return Ok(quote);
  }

  std::mutex mu_;  // guards everything below
  std::vector<std::string> requests_;
  std::map<std::string, std::string> query_;
  std::map<std::string, Json> bodies_;
  Json budget_;
  int created_ = 0;
  std::unique_ptr<net::Server> server_;  // last: stops before the state its handlers use
};

class BillingCommandsTest : public FakeApiCommandTest<FakeBillingApi> {
 protected:
  BillingCommandsTest() : FakeApiCommandTest(kToken) {}
};

// --- billing usage ------------------------------------------------------------------------------

TEST_F(BillingCommandsTest, UsageTableHasTheGroupsAndATotal) {
  ASSERT_EQ(Run({"billing", "usage", "--from", "2026-11-01", "--to", "2026-11-30", "--group-by",
                 "flavor"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(api_.requests(), std::vector<std::string>{"GET /v1/billing/usage"});
  // A day --to includes that day.
  EXPECT_EQ(api_.query(), (std::map<std::string, std::string>{{"from", "2026-11-01T00:00:00Z"},
                                                              {"to", "2026-12-01T00:00:00Z"},
                                                              {"group_by", "flavor"}}));
  EXPECT_EQ(console_.out(),
            "From 2026-11-01 00:00:00 to 2026-12-01 00:00:00 (UTC), in EUR\n"
            "FLAVOR      MINUTES  QUANTITY  AMOUNT €\n"
            "h100-1-gpu  2        4         0.1868\n"
            "ai1-1-cpu   3        3         0.0015\n"
            "-           0        250000    0.0025\n"
            "TOTAL       5                  0.1908\n");
  // The amounts include an open line (a running app): they still grow, says stderr.
  EXPECT_NE(console_.err().find("open intervals"), std::string::npos) << console_.err();
}

TEST_F(BillingCommandsTest, UsageLinesTable) {
  ASSERT_EQ(Run({"billing", "usage", "--lines"}), kExitOk) << console_.err();
  // Without flags, the server's defaults: this month until now.
  EXPECT_TRUE(api_.query().empty());
  EXPECT_EQ(console_.out(),
            "From 2026-11-01 00:00:00 to 2026-11-29 16:00:00 (UTC), in EUR\n"
            "GROUP       MINUTES  QUANTITY  AMOUNT €\n"
            "h100-1-gpu  2        4         0.1868\n"
            "ai1-1-cpu   3        3         0.0015\n"
            "-           0        250000    0.0025\n"
            "TOTAL       5                  0.1908\n"
            "\n"
            "PROJECT  KIND     RESOURCE  FLAVOR         START                END                  "
            "MINUTES  QUANTITY        AMOUNT €\n"
            "prj_1    job      job_01    h100-1-gpu x2  2026-11-29 14:00:00  2026-11-29 14:01:01  "
            "2        4 unit-min      0.1868\n"
            "prj_1    app      app_01    ai1-1-cpu x1   2026-11-29 15:00:00  open                 "
            "3        3 unit-min      0.0015\n"
            "prj_1    storage  bucket    -              2026-11-01 00:00:00  2026-11-29 16:00:00  "
            "-        0.25 GiB-month  0.0025\n"
            "TOTAL                                                    "
            "                                                     0.1908\n");
}

TEST_F(BillingCommandsTest, UsageCsvAndJson) {
  ASSERT_EQ(Run({"billing", "usage", "-o", "csv", "--project", "*", "--from",
                 "2026-11-01T01:00:00+01:00"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(api_.query(), (std::map<std::string, std::string>{{"from", "2026-11-01T00:00:00Z"},
                                                              {"project", "*"}}));
  EXPECT_EQ(console_.out(),
            "project,kind,resource,flavor,units,start,end,open,minutes,quantity,"
            "unit_price_micro_eur,amount_micro_eur,amount_eur\r\n"
            "prj_1,job,job_01,h100-1-gpu,2,2026-11-29T14:00:00Z,2026-11-29T14:01:01Z,false,2,4,"
            "46700,186800,0.186800\r\n"
            "prj_1,app,app_01,ai1-1-cpu,1,2026-11-29T15:00:00Z,2026-11-29T15:03:00Z,true,3,3,500,"
            "1500,0.001500\r\n"
            "prj_1,storage,bucket,,0,2026-11-01T00:00:00Z,2026-11-29T16:00:00Z,false,0,250000,"
            "10000,2500,0.002500\r\n");

  ASSERT_EQ(Run({"billing", "usage", "--output=json", "--group-by", "day"}), kExitOk);
  Json answer = Json::parse(console_.out());
  EXPECT_EQ(answer["total_micro_eur"], 190'800);
  EXPECT_EQ(answer["lines"], Lines());
}

TEST_F(BillingCommandsTest, UsageErrorsSendNothingAndNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"billing", "usage", "--from", "2026-13-01"},
            "--from: '2026-13-01' is not a day of the calendar"},
           {{"billing", "usage", "--to", "last week"}, "--to: 'last week' is not a date"},
           {{"billing", "usage", "--from", "2026-11-30", "--to", "2026-11-01"},
            "--to must be after --from"},
           {{"billing", "usage", "--group-by", "user"},
            "--group-by must be project, flavor, resource or day, not 'user'"},
           {{"billing", "usage", "-o", "xml"}, "--output must be table, json or csv, not 'xml'"},
           {{"billing", "usage", "--lines", "-o", "csv"}, "--lines is for the table"},
           {{"billing", "usage", "--project", ""}, "--project needs a project id"},
           {{"billing", "usage", "extra"}, "unexpected argument 'extra'"},
           {{"billing", "usage", "--frm", "2026-11-01"}, "--frm"},
           {{"billing", "statement", "--month", "2026-13"}, "--month: '2026-13' is not a month"},
           {{"billing", "statement", "-o", "yaml"}, "--output must be table, json or csv"},
       }) {
    const std::string joined = base::Join(c.args, " ");
    EXPECT_EQ(Run(c.args), kExitUsage) << joined;
    EXPECT_NE(console_.err().find(c.says), std::string::npos) << joined << "\n" << console_.err();
    EXPECT_EQ(console_.out(), "") << joined;
  }
  EXPECT_EQ(Run({"billing"}), kExitUsage);
  EXPECT_EQ(Run({"billing", "invoice"}), kExitUsage);
  EXPECT_TRUE(api_.requests().empty());
}

TEST_F(BillingCommandsTest, ApiErrorsAndNoLoginExit1) {
  vars_["SOVAI_TOKEN"] = "sov_revoked";
  EXPECT_EQ(Run({"billing", "usage"}), kExitFailure);
  EXPECT_NE(console_.err().find("sovai billing usage: the token is unknown, revoked or expired"),
            std::string::npos)
      << console_.err();
  EXPECT_NE(console_.err().find("sovai login"), std::string::npos);
  vars_.erase("SOVAI_TOKEN");
  EXPECT_EQ(Run({"billing", "statement"}), kExitFailure);
  EXPECT_NE(console_.err().find("not logged in"), std::string::npos) << console_.err();
}

// --- billing statement --------------------------------------------------------------------------

TEST_F(BillingCommandsTest, StatementOfAMonth) {
  ASSERT_EQ(Run({"billing", "statement", "--month", "2026-10"}), kExitOk) << console_.err();
  EXPECT_EQ(api_.requests(), std::vector<std::string>{"GET /v1/billing/statement"});
  EXPECT_EQ(api_.query(), (std::map<std::string, std::string>{{"month", "2026-10"}}));
  EXPECT_EQ(console_.out(),
            "Statement for 2026-10 of prj_1 (EUR)\n"
            "KIND     RESOURCE  FLAVOR         START                END                  "
            "MINUTES  QUANTITY        AMOUNT €\n"
            "job      job_01    h100-1-gpu x2  2026-11-29 14:00:00  2026-11-29 14:01:01  "
            "2        4 unit-min      0.1868\n"
            "storage  bucket    -              2026-11-01 00:00:00  2026-11-29 16:00:00  "
            "-        0.25 GiB-month  0.0025\n"
            "TOTAL                                                "
            "                                                0.1893\n");
  EXPECT_EQ(console_.err(), "");  // no open line

  ASSERT_EQ(Run({"billing", "statement", "-o", "csv"}), kExitOk);
  EXPECT_TRUE(api_.query().empty());  // this month: the server's default
  EXPECT_NE(console_.out().find("\r\nprj_1,storage,bucket,"), std::string::npos);
  ASSERT_EQ(Run({"billing", "statement", "-o", "json"}), kExitOk);
  EXPECT_EQ(Json::parse(console_.out())["total_eur"], "0.189300");
}

// Regression: a notebook's line showed MINUTES "-" and a bare quantity, while its JSON had
// minutes 1: it is compute, like a job's.
TEST_F(BillingCommandsTest, StatementShowsANotebooksMinutes) {
  ASSERT_EQ(Run({"billing", "statement", "--month", "2026-09"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(),
            "Statement for 2026-09 of prj_1 (EUR)\n"
            "KIND      RESOURCE  FLAVOR        START                END                  "
            "MINUTES  QUANTITY    AMOUNT €\n"
            "notebook  nb_01     ai1-1-cpu x1  2026-09-02 10:00:00  2026-09-02 10:00:40  "
            "1        1 unit-min  0.0005\n"
            "TOTAL                                                                        "
            "                    0.0005\n");
}

// --- budget -------------------------------------------------------------------------------------

TEST_F(BillingCommandsTest, BudgetGetAndSetOfTheTokensProject) {
  ASSERT_EQ(Run({"budget", "get"}), kExitOk) << console_.err();
  // The project is the token's, as whoami says.
  EXPECT_EQ(api_.requests(),
            (std::vector<std::string>{"GET /v1/whoami", "GET /v1/projects/prj_1/budget"}));
  EXPECT_EQ(console_.out(),
            "Project:           prj_1\n"
            "Monthly cap:       none (no budget: nothing is refused or stopped)\n"
            "Spent this month:  12.3456 €\n"
            "Alert:             no\n"
            "Capped:            no\n");

  ASSERT_EQ(Run({"budget", "set", "--monthly-cap", "50", "--alert-percent", "20"}), kExitOk)
      << console_.err();
  EXPECT_EQ(api_.requests().back(), "PUT /v1/projects/prj_1/budget");
  EXPECT_EQ(api_.body("/v1/projects/prj_1/budget"),
            Json::parse(R"({"monthly_cap_eur": "50.00", "alert_percent": 20})"));
  EXPECT_EQ(console_.out(),
            "Project:           prj_1\n"
            "Monthly cap:       50.00 €\n"
            "Spent this month:  12.3456 € (24.6% of the cap)\n"
            "Alert at:          20% of the cap\n"
            "Alert:             yes: past the alert threshold\n"
            "Capped:            no\n");

  // The cap is sent exactly as given, to the µ€; the alert threshold is the server's default.
  ASSERT_EQ(Run({"budget", "set", "--monthly-cap", "12.000001", "--project", "prj_1"}), kExitOk)
      << console_.err();
  EXPECT_EQ(api_.requests().back(), "PUT /v1/projects/prj_1/budget");
  EXPECT_EQ(api_.body("/v1/projects/prj_1/budget"),
            Json::parse(R"({"monthly_cap_eur": "12.000001"})"));
  EXPECT_NE(console_.out().find("Capped:            yes: the cap is reached"), std::string::npos)
      << console_.out();

  ASSERT_EQ(Run({"budget", "get", "--project", "prj_1", "-o", "json"}), kExitOk);
  EXPECT_EQ(api_.requests().back(), "GET /v1/projects/prj_1/budget");
  Json budget = Json::parse(console_.out());
  EXPECT_EQ(budget["monthly_cap_eur"], "12.000001");
  EXPECT_EQ(budget["alert_percent"], 80);
}

TEST_F(BillingCommandsTest, BudgetErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"budget", "set"}, "missing --monthly-cap EUR"},
           {{"budget", "set", "--monthly-cap", "12,50"},
            "--monthly-cap: '12,50' is not an amount in euros"},
           {{"budget", "set", "--monthly-cap", "0.0000001"}, "more than six decimals"},
           {{"budget", "set", "--monthly-cap", "-5"}, "--monthly-cap must be 0 or more"},
           {{"budget", "set", "--monthly-cap", "5", "--alert-percent", "0"},
            "--alert-percent must be 1 to 100, not 0"},
           {{"budget", "set", "--monthly-cap", "5", "--alert-percent", "101"},
            "--alert-percent must be 1 to 100, not 101"},
           {{"budget", "set", "--monthly-cap", "5", "--project="}, "--project needs a project id"},
           {{"budget", "get", "--project", ""}, "--project needs a project id"},
           {{"budget", "get", "prj_1"}, "unexpected argument 'prj_1'"},
       }) {
    const std::string joined = base::Join(c.args, " ");
    EXPECT_EQ(Run(c.args), kExitUsage) << joined;
    EXPECT_NE(console_.err().find(c.says), std::string::npos) << joined << "\n" << console_.err();
  }
  EXPECT_TRUE(api_.requests().empty());

  // The server's problems: exit 1 with the detail.
  EXPECT_EQ(Run({"budget", "set", "--monthly-cap", "5", "--project", "prj_2"}), kExitFailure);
  EXPECT_EQ(console_.err(),
            "sovai budget set: only an admin of project prj_2 may set its budget\n");
  EXPECT_EQ(Run({"budget", "get", "--project", "prj_nope"}), kExitFailure);
  EXPECT_EQ(console_.err(), "sovai budget get: project 'prj_nope' does not exist\n");
  // A name no project visible to the token has.
  EXPECT_EQ(Run({"budget", "get", "--project", "nope"}), kExitFailure);
  EXPECT_EQ(console_.err(),
            "sovai budget get: no project named 'nope' is visible to this token (give its id, "
            "prj_...)\n");
}

// Regression: `budget set --project bobproj` sent the name as the id ("project 'bobproj' not
// found"); --project takes an id or a name, as `project add-member` does.
TEST_F(BillingCommandsTest, ProjectFlagsTakeANameOrAnId) {
  ASSERT_EQ(Run({"budget", "set", "--monthly-cap", "5", "--project", "nlp"}), kExitOk)
      << console_.err();
  EXPECT_EQ(api_.requests().back(), "PUT /v1/projects/prj_1/budget");
  EXPECT_EQ(api_.body("/v1/projects/prj_1/budget"), Json::parse(R"({"monthly_cap_eur": "5.00"})"));
  ASSERT_EQ(Run({"budget", "get", "--project", "nlp"}), kExitOk) << console_.err();
  EXPECT_EQ(api_.requests().back(), "GET /v1/projects/prj_1/budget");
  ASSERT_EQ(Run({"billing", "usage", "--project", "vision", "-o", "json"}), kExitOk)
      << console_.err();
  EXPECT_EQ(api_.query().at("project"), "prj_2");
  ASSERT_EQ(Run({"billing", "usage", "--project", "prj_2", "-o", "json"}), kExitOk);
  EXPECT_EQ(api_.requests().back(), "GET /v1/billing/usage") << "an id needs no lookup";
  EXPECT_EQ(api_.query().at("project"), "prj_2");
}

// --- --dry-run ----------------------------------------------------------------------------------

TEST_F(BillingCommandsTest, JobRunDryRunPricesTheSpecAndCreatesNothing) {
  ASSERT_EQ(Run({"job", "run", "--dry-run", "--flavor", "h100-1-gpu", "--gpu", "2", "--timeout",
                 "1h", "sovai/shell", "--", "python", "train.py"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(api_.requests(), std::vector<std::string>{"POST /v1/jobs"});
  EXPECT_EQ(api_.query(), (std::map<std::string, std::string>{{"dry_run", "true"}}));
  // The same body as without --dry-run.
  const Json spec = api_.body("/v1/jobs");
  EXPECT_EQ(spec["flavor"], "h100-1-gpu");
  EXPECT_EQ(spec["units"], 2);
  EXPECT_EQ(spec["timeout_s"], 3600);
  EXPECT_EQ(spec["command"], Json::array({"python", "train.py"}));
  EXPECT_EQ(console_.out(),
            "Price:             0.0934 €/min\n"
            "Timeout:           3600s\n"
            "Cost at timeout:   5.604 €\n"
            "Budget left:       37.6544 €\n"
            "Would be refused:  no\n");
  EXPECT_EQ(console_.err(), "sovai job run: dry run: nothing was created\n");
  EXPECT_EQ(api_.created(), 0);

  // Without --dry-run the same command creates the job (the fake counts it).
  ASSERT_EQ(Run({"job", "run", "--flavor", "h100-1-gpu", "--gpu", "2", "--timeout", "1h",
                 "sovai/shell", "--", "python", "train.py"}),
            kExitOk);
  EXPECT_EQ(api_.created(), 1);
  EXPECT_EQ(api_.body("/v1/jobs"), spec);
}

TEST_F(BillingCommandsTest, JobRunDryRunThatWouldBeRefusedExits1WithTheReason) {
  EXPECT_EQ(Run({"job", "run", "--dry-run", "--timeout", "1d", "sovai/shell", "--", "true"}),
            kExitFailure);
  EXPECT_NE(console_.out().find("Would be refused:  yes: the job's cost at its timeout would "
                                "take the month's spend over the cap"),
            std::string::npos)
      << console_.out();
  EXPECT_NE(console_.out().find("Cost at timeout:   134.496 €"), std::string::npos);
  EXPECT_NE(console_.err().find("sovai job run: it would be refused: the job's cost at its "
                                "timeout would take the month's spend over the cap"),
            std::string::npos)
      << console_.err();

  // -o json: the quote on stdout for scripts, the same exit code.
  EXPECT_EQ(Run({"job", "run", "--dry-run", "-o", "json", "--timeout", "1d", "sovai/shell"}),
            kExitFailure);
  Json quote = Json::parse(console_.out());
  EXPECT_EQ(quote["would_be_refused"], true);
  EXPECT_EQ(quote["cost_at_timeout_micro_eur"], 134'496'000);
  EXPECT_EQ(api_.created(), 0);
}

TEST_F(BillingCommandsTest, AppRunDryRunWithoutABudget) {
  ASSERT_EQ(Run({"app", "run", "--dry-run", "--name", "support-bot", "--model",
                 "models@EU-WEST-LOCAL/qwen2.5-0.5b", "--replicas", "1"}),
            kExitOk)
      << console_.err();
  EXPECT_EQ(api_.requests(), std::vector<std::string>{"POST /v1/apps"});
  EXPECT_EQ(api_.query(), (std::map<std::string, std::string>{{"dry_run", "true"}}));
  EXPECT_EQ(api_.body("/v1/apps")["name"], "support-bot");
  EXPECT_NE(console_.out().find("Budget left:       no budget\n"), std::string::npos)
      << console_.out();
  EXPECT_NE(console_.out().find("Would be refused:  no\n"), std::string::npos);
  EXPECT_EQ(api_.created(), 0);
}

TEST_F(BillingCommandsTest, DryRunUsageErrorsSendNothing) {
  EXPECT_EQ(Run({"job", "run", "--dry-run", "--follow", "sovai/shell"}), kExitUsage);
  EXPECT_NE(console_.err().find("--dry-run creates no job to --follow"), std::string::npos)
      << console_.err();
  EXPECT_EQ(Run({"app", "run", "--dry-run", "--wait", "--name", "a", "--model",
                 "models@EU-WEST-LOCAL/m"}),
            kExitUsage);
  EXPECT_NE(console_.err().find("--dry-run creates no app to --wait for"), std::string::npos)
      << console_.err();
  // The spec's own checks come first, as without --dry-run.
  EXPECT_EQ(Run({"job", "run", "--dry-run", "--gpu", "1", "sovai/shell"}), kExitUsage);
  EXPECT_TRUE(api_.requests().empty());
}

TEST_F(BillingCommandsTest, HelpAndTopLevelListing) {
  EXPECT_EQ(Run({"billing", "--help"}), kExitOk);
  EXPECT_NE(console_.out().find("statement"), std::string::npos);
  EXPECT_EQ(Run({"budget", "set", "--help"}), kExitOk);
  EXPECT_NE(console_.out().find("--monthly-cap EUR"), std::string::npos) << console_.out();
  EXPECT_EQ(Run({"job", "run", "--help"}), kExitOk);
  EXPECT_NE(console_.out().find("--dry-run"), std::string::npos);
  EXPECT_NE(ClientCommandsHelp().find("  billing"), std::string::npos);
  EXPECT_NE(ClientCommandsHelp().find("  budget"), std::string::npos);
  EXPECT_TRUE(IsClientCommand("billing"));
  EXPECT_TRUE(api_.requests().empty());
}

}  // namespace
}  // namespace sovai::cli::client
