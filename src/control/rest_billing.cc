// Usage, statements, budgets and the TCO report: /v1/billing, /v1/projects/{id}/budget, /v1/tco
// (docs/billing.md).

#include "control/rest_handlers.h"

namespace sovai::control::rest {
namespace {

class BillingApi : public RestHandlers {
 public:
  using RestHandlers::RestHandlers;

  // ?from=&to=&group_by=&project=: the lines of a window and their groups. Lines name every job
  // of the project, so a token limited to labels is refused, as on members.
  net::Response BillingUsage(net::Request& request, const Principal& p) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    if (Status st = RequireUnlabeled(p, "billing lines"); !st.ok()) return Problem(st);
    const int64_t now = control_.env().NowUnixMicros();
    Window window{MonthOf(now).start_unix_micros, now};
    std::vector<FieldError> errors;
    for (const char* name : {"from", "to"}) {
      auto text = request.query(name);
      if (!text) continue;
      auto at = base::ParseRfc3339(*text);
      if (!at.ok()) {
        errors.push_back({name, at.status().message()});
        continue;
      }
      (std::string_view(name) == "from" ? window.from_unix_micros : window.to_unix_micros) = *at;
    }
    GroupBy group_by = GroupBy::kProject;
    if (auto text = request.query("group_by")) {
      auto parsed = ParseGroupBy(*text);
      if (parsed.ok()) {
        group_by = *parsed;
      } else {
        errors.push_back({"group_by", parsed.status().message()});
      }
    }
    if (errors.empty() && window.from_unix_micros >= window.to_unix_micros) {
      errors.push_back({"to", "to must be later than from"});
    }
    if (errors.empty() &&
        window.to_unix_micros - window.from_unix_micros > kMaxBillingWindowDays * kMicrosPerDay) {
      errors.push_back({"from", "the window may span at most " +
                                    std::to_string(kMaxBillingWindowDays) + " days"});
    }
    if (!errors.empty()) return Invalid(errors);
    auto project = BillingProject(request, p, /*allow_all=*/true);
    if (!project.ok()) return FieldProblem(project.status(), "project");
    // As of the `now` that cut the default window: a running job's line reaches its end, open.
    auto lines = billing->Lines(*project, window, now);
    if (!lines.ok()) return Problem(lines.status());
    if (Status st = CheckLineCount(lines->size()); !st.ok()) return FieldProblem(st, "from");
    Json groups = Json::array();
    for (const Group& g : GroupLines(*lines, group_by)) {
      groups.push_back({{"key", g.key},
                        {"amount_micro_eur", g.amount_micro_eur},
                        {"amount_eur", FormatEur(g.amount_micro_eur)},
                        {"minutes", g.minutes},
                        {"quantity", g.quantity}});
    }
    const int64_t total = SumAmounts(*lines);
    return JsonResponse(200, {{"from", base::FormatRfc3339(window.from_unix_micros)},
                              {"to", base::FormatRfc3339(window.to_unix_micros)},
                              {"currency", billing->prices().currency},
                              {"groups", std::move(groups)},
                              {"lines", LinesJson(*lines)},
                              {"total_micro_eur", total},
                              {"total_eur", FormatEur(total)}});
  }

  // ?month=YYYY-MM (this month by default): the caller's project's lines and their total.
  net::Response BillingStatement(net::Request& request, const Principal& p) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    if (Status st = RequireUnlabeled(p, "billing lines"); !st.ok()) return Problem(st);
    Month month = MonthOf(control_.env().NowUnixMicros());
    if (auto text = request.query("month")) {
      auto parsed = ParseMonth(*text);
      if (!parsed.ok()) return FieldProblem(parsed.status(), "month");
      month = *parsed;
    }
    auto project = BillingProject(request, p, /*allow_all=*/false);
    if (!project.ok()) return FieldProblem(project.status(), "project");
    auto statement = billing->MonthStatement(**project, month);
    if (!statement.ok()) return Problem(statement.status());
    if (Status st = CheckLineCount(statement->lines.size()); !st.ok()) {
      return FieldProblem(st, "month");
    }
    return JsonResponse(200, {{"project", statement->project},
                              {"month", statement->month.Name()},
                              {"currency", billing->prices().currency},
                              {"lines", LinesJson(statement->lines)},
                              {"total_micro_eur", statement->total_micro_eur},
                              {"total_eur", FormatEur(statement->total_micro_eur)}});
  }

  // The caller's project's budget (docs/billing.md: `sovai budget get`).
  net::Response GetOwnBudget(net::Request&, const Principal& p) {
    return BudgetResponse(p.project.id);
  }

  // `sovai tco` for the caller's project (docs/tco.md, tco_api.h). A token limited to labels gets
  // the comparison without the usage history, as the CLI does when the usage route refuses it.
  net::Response Tco(net::Request& request, const Principal& p) {
    if (control_.flavors() == nullptr) return Problem(NoJobs());
    Status unlabeled = RequireUnlabeled(p, "billing lines");
    return TcoApiResponse(request, {.flavors = control_.flavors(),
                                    .billing = control_.billing(),
                                    .project = p.project.id,
                                    .history_refused = unlabeled.ok() ? "" : unlabeled.message(),
                                    .now_unix_micros = control_.env().NowUnixMicros()});
  }

  // Everyone who sees the project may read its budget; its admins set it.
  net::Response GetBudget(net::Request& request, const Principal& p) {
    std::string id(*request.param("id"));
    if (!SeesProject(p, id)) return Problem(ProjectNotFound(id));
    if (auto project = identity_.GetProject(id); !project.ok()) return Problem(project.status());
    return BudgetResponse(id);
  }

  // {"monthly_cap_eur": "50.00" | null, "alert_percent": 80}: null removes the budget;
  // alert_percent defaults to the current one, else 80.
  net::Response SetBudget(net::Request& request, const Principal& p) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    if (Status st = RequireUnlabeled(p, "budgets"); !st.ok()) return Problem(st);
    std::string id(*request.param("id"));
    if (!SeesProject(p, id)) return Problem(ProjectNotFound(id));
    if (!AdministersProject(p, id)) {
      return Problem(base::PermissionDeniedError("setting the budget of project '" + id +
                                                 "' needs an admin token of that project"));
    }
    if (auto project = identity_.GetProject(id); !project.ok()) return Problem(project.status());
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    std::vector<FieldError> errors;
    std::optional<int64_t> cap;
    bool remove = false;
    if (auto it = body->find("monthly_cap_eur"); it == body->end()) {
      errors.push_back({"monthly_cap_eur",
                        "missing required field 'monthly_cap_eur' (a decimal "
                        "string such as \"50.00\", or null to remove)"});
    } else if (it->is_null()) {
      remove = true;
    } else if (!it->is_string()) {
      errors.push_back({"monthly_cap_eur",
                        "monthly_cap_eur must be a decimal string such as "
                        "\"50.00\", or null to remove the budget"});
    } else if (auto micro = ParseMicroEur(it->get<std::string>()); !micro.ok()) {
      errors.push_back({"monthly_cap_eur", micro.status().message()});
    } else {
      cap = *micro;
    }
    std::optional<int> alert_percent;
    if (auto value = base::GetOptionalInt(*body, "alert_percent");
        !value.ok() || (value->has_value() && (**value < 1 || **value > 100))) {
      errors.push_back({"alert_percent", "alert_percent must be an integer from 1 to 100"});
    } else if (value->has_value()) {
      alert_percent = static_cast<int>(**value);
    }
    for (const auto& [key, value] : body->items()) {
      if (key != "monthly_cap_eur" && key != "alert_percent") {
        errors.push_back({key, "unknown field '" + key +
                                   "'; this request accepts monthly_cap_eur, alert_percent"});
      }
    }
    if (!errors.empty()) return Invalid(errors);
    std::optional<Budget> budget;
    if (!remove) {
      auto current = billing->GetBudget(id);
      if (!current.ok()) return Problem(current.status());
      budget = Budget{
          *cap, alert_percent.value_or(current->budget ? current->budget->alert_percent : 80)};
    }
    if (Status st = billing->SetBudget(id, budget); !st.ok()) return Problem(st);
    return BudgetResponse(id);
  }

 private:
  // ?project=: the caller's project by default; platform admins may name another (or, with
  // `allow_all`, "*" = every project: nullopt).
  base::Result<std::optional<std::string>> BillingProject(const net::Request& request,
                                                          const Principal& p, bool allow_all) {
    auto text = request.query("project");
    if (!text || *text == p.project.id) return std::optional<std::string>(p.project.id);
    SOVAI_RETURN_IF_ERROR(RequirePlatformAdmin(p, "billing another project"));
    if (*text == "*") {
      if (!allow_all) {
        return base::InvalidArgumentError("a statement is of one project; name it, not '*'");
      }
      return std::optional<std::string>();
    }
    SOVAI_RETURN_IF_ERROR(identity_.GetProject(std::string(*text)).status());
    return std::optional<std::string>(std::string(*text));
  }

  // An answer holds at most kMaxBillingLines lines (OutOfRange: 400).
  static Status CheckLineCount(size_t lines) {
    if (lines <= kMaxBillingLines) return Status();
    return base::OutOfRangeError("the answer would hold " + std::to_string(lines) +
                                 " billing lines (at most " + std::to_string(kMaxBillingLines) +
                                 "); ask for a shorter window");
  }

  static Json LinesJson(const std::vector<Line>& lines) {
    Json out = Json::array();
    for (const Line& line : lines) out.push_back(LineToJson(line));
    return out;
  }

  net::Response BudgetResponse(const std::string& project) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    auto report = billing->GetBudget(project);
    if (!report.ok()) return Problem(report.status());
    const auto& b = report->budget;
    return JsonResponse(
        200, {{"monthly_cap_eur", b ? Json(FormatEur(b->monthly_cap_micro_eur)) : Json(nullptr)},
              {"alert_percent", b ? Json(b->alert_percent) : Json(nullptr)},
              {"spent_eur", FormatEur(report->spent_micro_eur)},
              {"spent_micro_eur", report->spent_micro_eur},
              {"alert", report->alert},
              {"capped", report->capped}});
  }
};

}  // namespace

std::span<const RestRoute> BillingRoutes() {
  static constexpr RestRoute kRoutes[] = {
      {.method = "GET",
       .pattern = "/v1/projects/{id}/budget",
       .handler = Call<&BillingApi::GetBudget>},
      {.method = "PUT",
       .pattern = "/v1/projects/{id}/budget",
       .handler = Call<&BillingApi::SetBudget>},
      {.method = "GET", .pattern = "/v1/billing/usage", .handler = Call<&BillingApi::BillingUsage>},
      {.method = "GET",
       .pattern = "/v1/billing/statement",
       .handler = Call<&BillingApi::BillingStatement>},
      {.method = "GET",
       .pattern = "/v1/billing/budget",
       .handler = Call<&BillingApi::GetOwnBudget>},
      {.method = "GET", .pattern = "/v1/tco", .handler = Call<&BillingApi::Tco>},
  };
  return kRoutes;
}

}  // namespace sovai::control::rest
