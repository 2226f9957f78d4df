// `sovai audit list|verify`: the client of GET /v1/audit and GET /v1/audit/verify
// (docs/audit.md). Private to src/cli/client; one command at a time per context (commands.h).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/client/api_client.h"
#include "cli/client/billing_format.h"
#include "cli/client/command_util.h"
#include "cli/client/commands.h"
#include "cli/client/table.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

int RunAuditList(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai audit list",
                  "Audit entries, oldest first (GET /v1/audit): platform admins see every\n"
                  "project, a project's admins their own. DATE is YYYY-MM-DD (a UTC day; --to\n"
                  "includes it) or an RFC 3339 time.\n\n"
                  "  sovai audit list --from 2026-11-01 --action 'DELETE /v1/jobs' -o json");
  std::string from;
  std::string to;
  std::string actor;
  std::string action;
  std::string project;
  int64_t limit = 0;
  base::FlagSet& f = cmd.flags();
  f.String("from", &from, "entries at or after this time", "DATE");
  f.String("to", &to, "entries before the end of this time", "DATE");
  f.String("actor", &actor, "a user id, token id or S3 access key id", "ID");
  f.String("action", &action, "an action prefix: 'POST /v1/jobs', 'S3', 'APP', 'CATALOG'",
           "PREFIX");
  f.String("project", &project, "platform admins: one project's entries (id or name)", "PROJECT");
  cmd.AddLimitFlag(&limit);
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  std::string path = "/v1/audit";
  auto windowed = AddWindowQuery(path, f.WasSet("from") ? std::optional(from) : std::nullopt,
                                 f.WasSet("to") ? std::optional(to) : std::nullopt);
  if (!windowed.ok()) return cmd.Usage(windowed.status().message());
  path = *windowed;
  if (!actor.empty()) path = AddQuery(path, "actor", actor);
  if (!action.empty()) path = AddQuery(path, "action", action);

  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  if (!project.empty()) {
    auto id = ResolveProjectId(**api, project);
    if (!id.ok()) return cmd.Fail(id.status());
    path = AddQuery(path, "project", *id);
  }
  auto list = (*api)->List(path, limit);
  if (!list.ok()) return cmd.Fail(list.status());
  if (cmd.json()) {
    cmd.PrintJson(list->ToJson());
    return kExitOk;
  }
  Table table({"SEQ", "TIME", "ACTOR", "PROJECT", "ACTION", "RESOURCE", "SOURCE", "RESULT"});
  for (const Json& e : list->items) {
    std::string who = Str(e, "actor_user");
    const std::string token = Str(e, "actor_token");
    if (!token.empty()) who += (who.empty() ? "" : "/") + token;
    table.AddRow({std::to_string(Int(e, "seq")), FormatTime(TimeMicros(e, "at")),
                  who.empty() ? "-" : who, Str(e, "project").empty() ? "-" : Str(e, "project"),
                  Str(e, "action"), Str(e, "resource"), Str(e, "source"),
                  std::to_string(Int(e, "result"))});
  }
  cmd.ctx().console.Out(table.Render());
  if (list->truncated) cmd.ctx().console.Err("(more exist; raise --limit to see them)\n");
  return kExitOk;
}

int RunAuditVerify(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai audit verify",
                  "Walks the audit log's hash chain (GET /v1/audit/verify, platform admins).\n"
                  "Exits 1 and names the first bad entry when an entry was modified, removed or\n"
                  "reordered.");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto report = (*api)->Get("/v1/audit/verify");
  if (!report.ok()) return cmd.Fail(report.status());
  const bool ok = report->value("ok", false);
  if (cmd.json()) {
    cmd.PrintJson(*report);
  } else if (ok) {
    cmd.ctx().console.Out("audit log OK: " + std::to_string(Int(*report, "entries")) +
                          " entries verified\n");
  } else {
    cmd.ctx().console.Out(
        "audit log BROKEN at entry " + std::to_string(Int(*report, "first_bad_seq")) + ": " +
        Str(*report, "problem") + "\n(" + std::to_string(Int(*report, "entries")) +
        " entries before it verified)\n");
  }
  return ok ? kExitOk : kExitFailure;
}

}  // namespace

int RunAuditCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"list", "audit entries: who did what, when, from where, with what result", &RunAuditList},
      {"verify", "check the audit log's hash chain; exit 1 at the first bad entry",
       &RunAuditVerify},
  };
  return RunGroup(ctx, "audit",
                  "The audit log: every change through /v1, every S3 request and every gateway\n"
                  "call, hash-chained (docs/audit.md).",
                  kSubcommands, args);
}

}  // namespace sovai::cli::client
