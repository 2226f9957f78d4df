// sovai billing usage|statement, sovai budget get|set, and --dry-run of job run / app run: the
// billing API of docs/billing.md.
#include "cli/client/billing_commands.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "base/json.h"
#include "base/strings.h"
#include "cli/client/billing_format.h"
#include "cli/client/table.h"
#include "net/client.h"
#include "net/http.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

constexpr char kGroupByValues[] = "project, flavor, resource or day";

std::string BudgetPath(std::string_view project) {
  return "/v1/projects/" + net::PercentEncode(project) + "/budget";
}

// The amount `<name>_micro_eur` of `object` in µ€, or its `<name>_eur` string parsed; nullopt
// when the answer holds neither (or a string that is not an amount).
std::optional<int64_t> MicroEurOf(const Json& object, std::string_view name) {
  const Json& micros = At(object, std::string(name) + "_micro_eur");
  if (micros.is_number_integer()) return micros.get<int64_t>();
  const Json& text = At(object, std::string(name) + "_eur");
  if (text.is_string()) {
    auto parsed = ParseEurMicros(text.get<std::string>());
    if (parsed.ok()) return *parsed;
  }
  return std::nullopt;
}

// The amount for people ("0.1868"), the server's own text when it is not one this client can
// parse, "-" when there is none.
std::string MoneyText(const Json& object, std::string_view name) {
  if (auto micros = MicroEurOf(object, name)) return FormatEur(*micros);
  const Json& text = At(object, std::string(name) + "_eur");
  return text.is_string() && !text.get<std::string>().empty() ? text.get<std::string>() : "-";
}

// An RFC 3339 member as "2026-11-29 14:03:05", or as sent when it does not parse.
std::string TimeText(const Json& object, std::string_view field) {
  const int64_t micros = TimeMicros(object, field);
  if (micros != 0) return FormatTime(micros);
  return Str(object, field).empty() ? "-" : Str(object, field);
}

// -o for the billing commands: table, json, or csv (the lines).
enum class BillingFormat { kTable, kJson, kCsv };

void AddBillingOutputFlag(base::FlagSet& f, std::string* output) {
  f.String("output", output, "table, json (the API's answer) or csv (the lines, RFC 4180)",
           "FORMAT");
  f.Short('o', "output");
}

std::optional<BillingFormat> ParseBillingFormat(std::string_view output) {
  if (output == "table") return BillingFormat::kTable;
  if (output == "json") return BillingFormat::kJson;
  if (output == "csv") return BillingFormat::kCsv;
  return std::nullopt;
}

// The billed lines as a table, then a TOTAL row under AMOUNT. `with_project` adds the PROJECT
// column (a usage query may span projects; a statement is one project's).
std::string LinesTable(const Json& lines, const Json& answer, bool with_project) {
  std::vector<std::string> headers = {"KIND", "RESOURCE", "FLAVOR",   "START",
                                      "END",  "MINUTES",  "QUANTITY", "AMOUNT €"};
  if (with_project) headers.insert(headers.begin(), "PROJECT");
  Table table(headers);
  if (lines.is_array()) {
    for (const Json& line : lines) {
      const std::string kind = Str(line, "kind");
      const bool compute = IsComputeKind(kind);
      std::vector<std::string> row = {
          kind,
          Str(line, "resource"),
          Str(line, "flavor").empty()
              ? "-"
              : Str(line, "flavor") + " x" + std::to_string(Int(line, "units", 1)),
          TimeText(line, "start"),
          At(line, "open") == true ? "open" : TimeText(line, "end"),
          compute ? std::to_string(Int(line, "minutes")) : "-",
          FormatQuantity(kind, Int(line, "quantity")),
          MoneyText(line, "amount")};
      if (with_project) row.insert(row.begin(), Str(line, "project"));
      table.AddRow(std::move(row));
    }
  }
  std::vector<std::string> total(headers.size());
  total[0] = "TOTAL";
  total.back() = MoneyText(answer, "total");
  table.AddRow(std::move(total));
  return table.Render();
}

bool AnyOpen(const Json& lines) {
  if (!lines.is_array()) return false;
  for (const Json& line : lines) {
    if (At(line, "open") == true) return true;
  }
  return false;
}

int RunBillingUsage(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai billing usage",
                  "What the project was billed between two dates (GET /v1/billing/usage), in\n"
                  "groups with a total; -o csv prints the billed lines. DATE is YYYY-MM-DD (a UTC\n"
                  "day; --to includes it) or an RFC 3339 time. Open intervals (running jobs) are\n"
                  "billed up to now.\n\n"
                  "  sovai billing usage --from 2026-11-01 --to 2026-11-30 --group-by flavor");
  std::string from;
  std::string to;
  std::string group_by;
  std::string project;
  std::string output = "table";
  bool lines = false;
  base::FlagSet& f = cmd.flags();
  f.String("from", &from, "the start; the start of this month when not given", "DATE");
  f.String("to", &to, "the end (a day is included); now when not given", "DATE");
  f.String("group-by", &group_by, "project, flavor, resource or day", "KEY");
  f.String("project", &project, "platform admins: another project (id or name), or * for all",
           "PROJECT");
  f.Bool("lines", &lines, "with the table: also print every billed line");
  AddBillingOutputFlag(f, &output);
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  const auto format = ParseBillingFormat(output);
  if (!format) return cmd.Usage("--output must be table, json or csv, not '" + output + "'");
  if (lines && *format != BillingFormat::kTable) {
    return cmd.Usage("--lines is for the table; -o json and -o csv always hold the lines");
  }
  std::string path = "/v1/billing/usage";
  auto windowed = AddWindowQuery(path, f.WasSet("from") ? std::optional(from) : std::nullopt,
                                 f.WasSet("to") ? std::optional(to) : std::nullopt);
  if (!windowed.ok()) return cmd.Usage(windowed.status().message());
  path = *windowed;
  if (f.WasSet("group-by")) {
    if (group_by != "project" && group_by != "flavor" && group_by != "resource" &&
        group_by != "day") {
      return cmd.Usage("--group-by must be " + std::string(kGroupByValues) + ", not '" + group_by +
                       "'");
    }
    path = AddQuery(path, "group_by", group_by);
  }
  if (f.WasSet("project") && project.empty()) {
    return cmd.Usage("--project needs a project id or name, or * for all");
  }

  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  if (!project.empty()) {
    auto id =
        project == "*" ? base::Result<std::string>(project) : ResolveProjectId(**api, project);
    if (!id.ok()) return cmd.Fail(id.status());
    path = AddQuery(path, "project", *id);
  }
  auto usage = (*api)->Get(path);
  if (!usage.ok()) return cmd.Fail(usage.status());
  const Json& line_items = At(*usage, "lines");
  if (*format == BillingFormat::kJson) {
    cmd.PrintJson(*usage);
    return kExitOk;
  }
  if (*format == BillingFormat::kCsv) {
    ctx.console.Out(LinesCsv(line_items));
    return kExitOk;
  }
  const std::string key = group_by.empty() ? "GROUP" : base::AsciiToUpper(group_by);
  Table table({key, "MINUTES", "QUANTITY", "AMOUNT €"});
  int64_t minutes = 0;
  const Json& groups = At(*usage, "groups");
  if (groups.is_array()) {
    for (const Json& group : groups) {
      minutes += Int(group, "minutes");
      table.AddRow({Str(group, "key").empty() ? "-" : Str(group, "key"),
                    std::to_string(Int(group, "minutes")), std::to_string(Int(group, "quantity")),
                    MoneyText(group, "amount")});
    }
  }
  table.AddRow({"TOTAL", std::to_string(minutes), "", MoneyText(*usage, "total")});
  ctx.console.Out(
      "From " + TimeText(*usage, "from") + " to " + TimeText(*usage, "to") + " (UTC), in " +
      (Str(*usage, "currency").empty() ? "EUR" : Str(*usage, "currency")) + "\n" + table.Render());
  if (lines) ctx.console.Out("\n" + LinesTable(line_items, *usage, /*with_project=*/true));
  if (AnyOpen(line_items)) {
    cmd.Warn("open intervals (running jobs and apps) are billed up to now and still grow");
  }
  return kExitOk;
}

int RunBillingStatement(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai billing statement",
                  "The billed lines of a month and their total for the token's project\n"
                  "(GET /v1/billing/statement); this month when --month is not given.");
  std::string month;
  std::string output = "table";
  base::FlagSet& f = cmd.flags();
  f.String("month", &month, "the month, such as 2026-11; this month when not given", "YYYY-MM");
  AddBillingOutputFlag(f, &output);
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  const auto format = ParseBillingFormat(output);
  if (!format) return cmd.Usage("--output must be table, json or csv, not '" + output + "'");
  std::string path = "/v1/billing/statement";
  if (f.WasSet("month")) {
    auto parsed = ParseMonth(month);
    if (!parsed.ok()) return cmd.Usage(parsed.status().WithContext("--month").message());
    path = AddQuery(path, "month", *parsed);
  }
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto statement = (*api)->Get(path);
  if (!statement.ok()) return cmd.Fail(statement.status());
  const Json& lines = At(*statement, "lines");
  if (*format == BillingFormat::kJson) {
    cmd.PrintJson(*statement);
    return kExitOk;
  }
  if (*format == BillingFormat::kCsv) {
    ctx.console.Out(LinesCsv(lines));
    return kExitOk;
  }
  std::string title = "Statement";
  if (!Str(*statement, "month").empty()) title += " for " + Str(*statement, "month");
  if (!Str(*statement, "project").empty()) title += " of " + Str(*statement, "project");
  ctx.console.Out(title + " (EUR)\n" + LinesTable(lines, *statement, /*with_project=*/false));
  if (AnyOpen(lines)) {
    cmd.Warn("open intervals (running jobs and apps) are billed up to now and still grow");
  }
  return kExitOk;
}

// The project a budget command is about: --project (an id or a name), or the token's own (GET
// /v1/whoami, as `sovai whoami` shows it; the config's project may be another token's when
// SOVAI_TOKEN is set).
base::Result<std::string> BudgetProject(ApiClient& api, const std::string& flag) {
  if (!flag.empty()) return ResolveProjectId(api, flag);
  SOVAI_ASSIGN_OR_RETURN(Json me, api.Get("/v1/whoami"));
  std::string id = Str(At(me, "project"), "id");
  if (id.empty()) {
    return base::InternalError("GET /v1/whoami names no project; give --project ID");
  }
  return id;
}

std::vector<std::pair<std::string, std::string>> BudgetRows(const std::string& project,
                                                            const Json& budget) {
  std::vector<std::pair<std::string, std::string>> rows = {{"Project", project}};
  const Json& cap_text = At(budget, "monthly_cap_eur");
  std::optional<int64_t> cap;
  if (cap_text.is_string()) {
    auto parsed = ParseEurMicros(cap_text.get<std::string>());
    if (parsed.ok()) cap = *parsed;
    rows.emplace_back("Monthly cap", (cap ? FormatEur(*cap) : cap_text.get<std::string>()) + " €");
  } else {
    rows.emplace_back("Monthly cap", "none (no budget: nothing is refused or stopped)");
  }
  const std::optional<int64_t> spent = MicroEurOf(budget, "spent");
  std::string spent_text = MoneyText(budget, "spent");
  if (spent_text != "-") spent_text += " €";
  if (cap && spent && *cap > 0) spent_text += " (" + FormatPercent(*spent, *cap) + " of the cap)";
  rows.emplace_back("Spent this month", spent_text);
  if (cap && At(budget, "alert_percent").is_number_integer()) {
    rows.emplace_back("Alert at", std::to_string(Int(budget, "alert_percent")) + "% of the cap");
  }
  rows.emplace_back("Alert", At(budget, "alert") == true ? "yes: past the alert threshold" : "no");
  rows.emplace_back("Capped", At(budget, "capped") == true
                                  ? "yes: the cap is reached; running jobs were stopped and new "
                                    "ones are refused until next month"
                                  : "no");
  return rows;
}

int RunBudgetGet(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai budget get",
                  "Shows a project's monthly budget: the cap, this month's spend, and whether\n"
                  "the alert threshold or the cap is reached (GET /v1/projects/{id}/budget).");
  std::string project;
  cmd.flags().String("project", &project, "the project (id or name); the token's by default",
                     "PROJECT");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  if (cmd.flags().WasSet("project") && project.empty()) {
    return cmd.Usage("--project needs a project id or name");
  }
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto id = BudgetProject(**api, project);
  if (!id.ok()) return cmd.Fail(id.status());
  auto budget = (*api)->Get(BudgetPath(*id));
  if (!budget.ok()) return cmd.Fail(budget.status());
  if (cmd.json()) {
    cmd.PrintJson(*budget);
    return kExitOk;
  }
  ctx.console.Out(RenderKeyValues(BudgetRows(*id, *budget)));
  return kExitOk;
}

// PUT with ApiClient's headers and problem+json rules. ApiClient has no Put (the budget is the
// only PUT route of /v1), so this builds the same request for that one route.
base::Result<Json> Put(CommandContext& ctx, const ClientConfig& config, const std::string& path,
                       const Json& body) {
  SOVAI_ASSIGN_OR_RETURN(net::ClientOptions parsed, net::ClientOptionsFromUrl(config.url));
  net::ClientOptions options = ctx.http;
  options.host = parsed.host;
  options.port = parsed.port;
  options.tls = parsed.tls;
  options.user_agent = "sovai-cli";
  net::HttpClient http(options);
  net::ClientRequest request;
  request.method = "PUT";
  request.target = path;
  request.headers.Set("Authorization", "Bearer " + config.token);
  request.headers.Set("Accept", "application/json");
  request.headers.Set("Content-Type", "application/json");
  request.body = base::DumpJson(body);
  auto sent = http.Send(request);
  if (!sent.ok()) {
    return base::Status(sent.status().code(), "cannot reach the Sovai API at " + config.url + ": " +
                                                  sent.status().message());
  }
  if (sent->status < 200 || sent->status >= 300) return ProblemToStatus(sent->status, sent->body);
  if (base::Trim(sent->body).empty()) return Json();
  auto doc = base::ParseJson(sent->body);
  if (!doc.ok()) {
    return base::InternalError("PUT " + path +
                               ": the server's answer is not JSON: " + doc.status().message());
  }
  return std::move(*doc);
}

int RunBudgetSet(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai budget set",
                  "Sets a project's monthly budget (PUT /v1/projects/{id}/budget; admins of the\n"
                  "project). A job whose cost at its timeout would take the month's spend over\n"
                  "the cap is refused; at the cap, the project's running jobs and apps are\n"
                  "stopped. Without --alert-percent the project's threshold stays as it is\n"
                  "(the server's default for a new budget).\n\n"
                  "  sovai budget set --monthly-cap 50 --alert-percent 80");
  std::string cap_text;
  int64_t alert_percent = 0;
  std::string project;
  base::FlagSet& f = cmd.flags();
  f.String("monthly-cap", &cap_text, "the cap in euros, such as 50 or 12.50 (required)", "EUR");
  f.Int("alert-percent", &alert_percent, "warn past this percentage of the cap, 1..100");
  f.String("project", &project, "the project (id or name); the token's by default", "PROJECT");
  f.HideDefault("alert-percent");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  if (!f.WasSet("monthly-cap")) return cmd.Usage("missing --monthly-cap EUR");
  auto cap = ParseEurMicros(cap_text);
  if (!cap.ok()) return cmd.Usage(cap.status().WithContext("--monthly-cap").message());
  if (*cap < 0) return cmd.Usage("--monthly-cap must be 0 or more, not '" + cap_text + "'");
  Json body = {{"monthly_cap_eur", FormatEur(*cap)}};
  if (f.WasSet("alert-percent")) {
    if (alert_percent < 1 || alert_percent > 100) {
      return cmd.Usage("--alert-percent must be 1 to 100, not " + std::to_string(alert_percent));
    }
    body["alert_percent"] = alert_percent;
  }
  if (f.WasSet("project") && project.empty()) {
    return cmd.Usage("--project needs a project id or name");
  }

  auto config = cmd.Config();
  if (!config.ok()) return cmd.Fail(config.status());
  auto api = cmd.Connect(*config);
  if (!api.ok()) return cmd.Fail(api.status());
  auto id = BudgetProject(**api, project);
  if (!id.ok()) return cmd.Fail(id.status());
  auto budget = Put(ctx, *config, BudgetPath(*id), body);
  if (!budget.ok()) return cmd.Fail(budget.status());
  if (cmd.json()) {
    cmd.PrintJson(budget->is_null() ? body : *budget);
    return kExitOk;
  }
  if (!budget->is_object()) {
    ctx.console.Out("Set the monthly budget of " + *id + " to " + FormatEur(*cap) + " €.\n");
    return kExitOk;
  }
  ctx.console.Out(RenderKeyValues(BudgetRows(*id, *budget)));
  return kExitOk;
}

}  // namespace

int RunDryRun(CommandLine& cmd, std::string_view create_path, const Json& spec) {
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto quote = (*api)->Post(AddQuery(std::string(create_path), "dry_run", "true"), spec);
  if (!quote.ok()) return cmd.Fail(quote.status());
  const bool refused = At(*quote, "would_be_refused") == true;
  if (cmd.json()) {
    cmd.PrintJson(*quote);
  } else {
    std::vector<std::pair<std::string, std::string>> rows;
    rows.emplace_back("Price", MoneyText(*quote, "price_per_minute") + " €/min");
    const Json& timeout = At(*quote, "timeout_s");
    rows.emplace_back("Timeout", timeout.is_number_integer()
                                     ? std::to_string(timeout.get<int64_t>()) + "s"
                                     : "none");
    std::string cost = MoneyText(*quote, "cost_at_timeout");
    rows.emplace_back("Cost at timeout", cost == "-" ? cost : cost + " €");
    // budget_left_eur is null when the project has no budget.
    std::string left = MoneyText(*quote, "budget_left");
    rows.emplace_back("Budget left", left == "-" ? "no budget" : left + " €");
    std::string verdict = refused ? "yes" : "no";
    if (refused && !Str(*quote, "reason").empty()) verdict += ": " + Str(*quote, "reason");
    rows.emplace_back("Would be refused", verdict);
    cmd.ctx().console.Out(RenderKeyValues(rows));
  }
  cmd.Warn("dry run: nothing was created");
  if (refused) {
    const std::string reason = Str(*quote, "reason");
    return cmd.Fail(base::FailedPreconditionError(
        "it would be refused" + (reason.empty() ? " (the server gave no reason)" : ": " + reason)));
  }
  return kExitOk;
}

int RunBillingCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"usage", "what was billed between two dates, grouped, with a total", &RunBillingUsage},
      {"statement", "a month's billed lines and total", &RunBillingStatement},
  };
  return RunGroup(ctx, "billing",
                  "What the project was billed: compute minutes, storage and tokens "
                  "(docs/billing.md).",
                  kSubcommands, args);
}

int RunBudgetCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"get", "show a project's monthly budget and spend", &RunBudgetGet},
      {"set", "set a project's monthly cap and alert threshold", &RunBudgetSet},
  };
  return RunGroup(ctx, "budget",
                  "A project's monthly budget: jobs over it are refused, and at the cap the\n"
                  "project's workloads are stopped.",
                  kSubcommands, args);
}

}  // namespace sovai::cli::client
