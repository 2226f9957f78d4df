// sovai token create|list|revoke, sovai user list|create|delete,
// sovai project list|create|update|members|add-member|remove-member.
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/time.h"
#include "cli/client/command_util.h"
#include "cli/client/job_args.h"
#include "cli/client/limits.h"
#include "cli/client/table.h"

namespace sovai::cli::client {
namespace {

using base::Status;
using Json = nlohmann::json;

base::Status CheckRole(std::string_view role) {
  if (role == "read" || role == "operator" || role == "admin") return Status();
  return base::InvalidArgumentError("--role must be read, operator or admin, not '" +
                                    std::string(role) + "'");
}

// Prints a list answer as JSON or as a table built by `row`.
template <typename RowFn>
int PrintList(CommandLine& cmd, const ListResult& list, std::vector<std::string> headers,
              RowFn row) {
  if (cmd.json()) {
    cmd.PrintJson(list.ToJson());
    return kExitOk;
  }
  Table table(std::move(headers));
  for (const Json& item : list.items) table.AddRow(row(item));
  cmd.ctx().console.Out(table.Render());
  if (list.truncated) cmd.ctx().console.Err("(more exist; raise --limit to see them)\n");
  return kExitOk;
}

// A list command without filters or arguments: GET `path` page by page, up to --limit items.
template <typename RowFn>
int RunPlainList(CommandContext& ctx, const std::vector<std::string>& args, std::string name,
                 std::string summary, const std::string& path, std::vector<std::string> headers,
                 RowFn row) {
  CommandLine cmd(ctx, std::move(name), std::move(summary));
  int64_t limit = 0;
  cmd.AddLimitFlag(&limit);
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto list = (*api)->List(path, limit);
  if (!list.ok()) return cmd.Fail(list.status());
  return PrintList(cmd, *list, std::move(headers), row);
}

std::string Or(std::string value, std::string_view fallback) {
  return value.empty() ? std::string(fallback) : value;
}

// "2026-11-29T14:03:05Z" → "2026-11-29 14:03:05"; "-" for null or empty.
std::string ShortTime(const Json& object, std::string_view field) {
  return FormatTime(TimeMicros(object, field));
}

// --- token ------------------------------------------------------------------------------------

int RunTokenCreate(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai token create",
                  "Creates an API token (POST /v1/tokens). The token is printed once, alone on\n"
                  "stdout (details on stderr): TOKEN=$(sovai token create ...). It can never have\n"
                  "a higher role, a wider selector or a later expiry than the token creating it.");
  std::string name;
  std::string role = "read";
  std::string selector;
  std::string expires;
  std::string project;
  std::string user;
  cmd.flags().String("name", &name, "a name to recognize it by", "NAME");
  cmd.flags().String("role", &role, "read, operator or admin", "ROLE");
  std::vector<std::string> label_selector;
  cmd.flags().String("selector", &selector,
                     "label selector: it only sees resources with these labels", "K=V,...");
  // The spelling of docs/api/apps.md (app tokens); repeatable, and merged with --selector.
  cmd.flags().StringList("label-selector", &label_selector,
                         "a label the token's selector requires (same as --selector)", "K=V");
  cmd.flags().String("expires", &expires,
                     "lifetime, e.g. 30d, 12h (default: never, or the caller's)", "DURATION");
  cmd.flags().String("project", &project, "project id or name (default: the caller's)", "PROJECT");
  cmd.flags().String("user", &user, "user id or name (default: the caller's)", "USER");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  if (Status st = CheckRole(role); !st.ok()) return cmd.Usage(st.message());
  Json body = {{"role", role}};
  if (!name.empty()) body["name"] = name;
  const std::string_view selector_flag = label_selector.empty() ? "--selector" : "--label-selector";
  if (!label_selector.empty()) {
    if (!selector.empty()) label_selector.insert(label_selector.begin(), selector);
    selector = base::Join(label_selector, ",");
  }
  if (!selector.empty()) {
    auto canonical = ParseSelector(selector, selector_flag);
    if (!canonical.ok()) return cmd.Usage(canonical.status().message());
    body["labels"] = *canonical;
  }
  if (!expires.empty()) {
    auto seconds = ParseDuration(expires);
    if (!seconds.ok()) return cmd.Usage(seconds.status().WithContext("--expires").message());
    body["expires_at"] =
        base::FormatRfc3339(ctx.env.NowUnixMicros() + *seconds * base::kMicrosPerSecond, 0);
  }
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  if (!project.empty()) {
    auto id = ResolveProjectId(**api, project);
    if (!id.ok()) return cmd.Fail(id.status());
    body["project"] = *id;
  }
  if (!user.empty()) {
    auto id = ResolveUserId(**api, user);
    if (!id.ok()) return cmd.Fail(id.status());
    body["user"] = *id;
  }
  auto created = (*api)->Post("/v1/tokens", body);
  if (!created.ok()) return cmd.Fail(created.status());
  if (cmd.json()) {
    cmd.PrintJson(*created);
    return kExitOk;
  }
  std::string details = "Created token " + Str(*created, "id");
  if (!Str(*created, "name").empty()) details += " (" + Str(*created, "name") + ")";
  details += ", role " + Str(*created, "role");
  if (!Str(*created, "labels").empty()) details += ", selector " + Str(*created, "labels");
  details += ", expires " + Or(Str(*created, "expires_at"), "never") +
             ".\nStore it now: it is not shown again.\n";
  ctx.console.Err(details);
  ctx.console.Out(Str(*created, "token") + "\n");
  return kExitOk;
}

std::string TokenState(const Json& token, int64_t now_micros) {
  if (!Str(token, "revoked_at").empty()) return "revoked";
  int64_t expires = TimeMicros(token, "expires_at");
  if (expires > 0 && expires <= now_micros) return "expired";
  return "active";
}

int RunTokenList(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai token list",
                  "Lists API tokens: platform admins all, project admins their project's, others\n"
                  "their own. Secrets are never listed.");
  int64_t limit = 0;
  std::string user;
  std::string project;
  cmd.AddLimitFlag(&limit);
  cmd.flags().String("user", &user, "only tokens of this user (id or name)", "USER");
  cmd.flags().String("project", &project, "only tokens of this project (id or name)", "PROJECT");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  std::string path = "/v1/tokens";
  if (!user.empty()) {
    auto id = ResolveUserId(**api, user);
    if (!id.ok()) return cmd.Fail(id.status());
    path = AddQuery(path, "user", *id);
  }
  if (!project.empty()) {
    auto id = ResolveProjectId(**api, project);
    if (!id.ok()) return cmd.Fail(id.status());
    path = AddQuery(path, "project", *id);
  }
  auto list = (*api)->List(path, limit);
  if (!list.ok()) return cmd.Fail(list.status());
  const int64_t now = ctx.env.NowUnixMicros();
  return PrintList(cmd, *list,
                   {"ID", "NAME", "USER", "ROLE", "SELECTOR", "CREATED", "EXPIRES", "STATE"},
                   [&](const Json& t) -> std::vector<std::string> {
                     return {Str(t, "id"),
                             Or(Str(t, "name"), "-"),
                             Str(t, "user"),
                             Str(t, "role"),
                             Or(Str(t, "labels"), "-"),
                             ShortTime(t, "created_at"),
                             Str(t, "expires_at").empty() ? "never" : ShortTime(t, "expires_at"),
                             TokenState(t, now)};
                   });
}

int RunTokenRevoke(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai token revoke", "Revokes an API token (idempotent).");
  cmd.flags().Positional("TOKEN_ID");
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  const std::string& id = cmd.flags().positional()[0];
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto revoked = (*api)->Delete("/v1/tokens/" + net::PercentEncode(id));
  if (!revoked.ok()) return cmd.Fail(revoked.status());
  ctx.console.Out("Revoked " + id + ".\n");
  return kExitOk;
}

// --- user -------------------------------------------------------------------------------------

int RunUserList(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunPlainList(ctx, args, "sovai user list",
                      "Lists users (platform admins see all; others the members of their project).",
                      "/v1/users", {"ID", "NAME", "DISPLAY NAME", "EMAIL", "CREATED"},
                      [](const Json& u) -> std::vector<std::string> {
                        return {Str(u, "id"), Str(u, "name"), Or(Str(u, "display_name"), "-"),
                                Or(Str(u, "email"), "-"), ShortTime(u, "created_at")};
                      });
}

int RunUserCreate(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(
      ctx, "sovai user create",
      "Creates a user (platform admins). Add it to a project with\n"
      "'sovai project add-member', then give it a token with 'sovai token create --user'.");
  std::string display_name;
  std::string email;
  cmd.flags().Positional("NAME");
  cmd.flags().String("display-name", &display_name, "a human name", "TEXT");
  cmd.flags().String("email", &email, "an email address", "EMAIL");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  Json body = {{"name", cmd.flags().positional()[0]}};
  if (!display_name.empty()) body["display_name"] = display_name;
  if (!email.empty()) body["email"] = email;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto user = (*api)->Post("/v1/users", body);
  if (!user.ok()) return cmd.Fail(user.status());
  if (cmd.json()) {
    cmd.PrintJson(*user);
    return kExitOk;
  }
  ctx.console.Out("Created user " + Str(*user, "name") + " (" + Str(*user, "id") + ").\n");
  return kExitOk;
}

int RunUserDelete(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai user delete",
                  "Deletes a user with its memberships and tokens; its S3 keys are revoked.");
  cmd.flags().Positional("USER (id or name)");
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto id = ResolveUserId(**api, cmd.flags().positional()[0]);
  if (!id.ok()) return cmd.Fail(id.status());
  auto deleted = (*api)->Delete("/v1/users/" + net::PercentEncode(*id));
  if (!deleted.ok()) return cmd.Fail(deleted.status());
  ctx.console.Out("Deleted user " + *id + ".\n");
  return kExitOk;
}

// --- project ----------------------------------------------------------------------------------

// "EU-CENTRAL-2, EU-NORTH-1": a project's allowed_regions.
std::string AllowedRegions(const Json& project) {
  std::string out;
  const Json& regions = At(project, "allowed_regions");
  if (!regions.is_array()) return out;
  for (const Json& r : regions) {
    if (r.is_string()) out += (out.empty() ? "" : ", ") + r.get<std::string>();
  }
  return out;
}

int RunProjectList(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunPlainList(ctx, args, "sovai project list",
                      "Lists projects (platform admins see all; others their own).", "/v1/projects",
                      {"ID", "NAME", "DESCRIPTION", "SYSTEM", "CREATED", "OTHER REGIONS"},
                      [](const Json& p) -> std::vector<std::string> {
                        return {Str(p, "id"),
                                Str(p, "name"),
                                Or(Str(p, "description"), "-"),
                                At(p, "system") == true ? "yes" : "no",
                                ShortTime(p, "created_at"),
                                Or(AllowedRegions(p), "-")};
                      });
}

int RunProjectUpdate(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai project update",
                  "Sets the regions besides this server's own whose buckets the project's jobs\n"
                  "and apps may mount (data residency, docs/sovereignty.md; admins of the\n"
                  "project). --allow-region replaces the list: name every region to allow.");
  std::vector<std::string> allow;
  bool no_other_regions = false;
  cmd.flags().Positional("PROJECT (id or name)");
  cmd.flags().StringList("allow-region", &allow,
                         "a region the server knows (sovai server --regions); repeat for more",
                         "REGION");
  cmd.flags().Bool("no-other-regions", &no_other_regions,
                   "allow only this server's own region again");
  cmd.flags().HideDefault("no-other-regions");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  if (allow.empty() == !no_other_regions) {
    return cmd.Usage("give --allow-region REGION (repeatable) or --no-other-regions");
  }
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto id = ResolveProjectId(**api, cmd.flags().positional()[0]);
  if (!id.ok()) return cmd.Fail(id.status());
  auto project =
      (*api)->Patch("/v1/projects/" + net::PercentEncode(*id), Json{{"allowed_regions", allow}});
  if (!project.ok()) return cmd.Fail(project.status());
  if (cmd.json()) {
    cmd.PrintJson(*project);
    return kExitOk;
  }
  const std::string regions = AllowedRegions(*project);
  ctx.console.Out(
      "Project " + Str(*project, "name") + " may mount buckets of " +
      (regions.empty() ? "this server's region only" : "this server's region and " + regions) +
      ".\n");
  return kExitOk;
}

int RunProjectCreate(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai project create", "Creates a project (platform admins).");
  std::string description;
  cmd.flags().Positional("NAME");
  cmd.flags().String("description", &description, "what the project is for", "TEXT");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  Json body = {{"name", cmd.flags().positional()[0]}};
  if (!description.empty()) body["description"] = description;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto project = (*api)->Post("/v1/projects", body);
  if (!project.ok()) return cmd.Fail(project.status());
  if (cmd.json()) {
    cmd.PrintJson(*project);
    return kExitOk;
  }
  ctx.console.Out("Created project " + Str(*project, "name") + " (" + Str(*project, "id") + ").\n");
  return kExitOk;
}

int RunProjectMembers(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai project members", "Lists the members of a project and their roles.");
  int64_t limit = 0;
  cmd.flags().Positional("PROJECT (id or name)");
  cmd.AddLimitFlag(&limit);
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto id = ResolveProjectId(**api, cmd.flags().positional()[0]);
  if (!id.ok()) return cmd.Fail(id.status());
  auto list = (*api)->List("/v1/projects/" + net::PercentEncode(*id) + "/members", limit);
  if (!list.ok()) return cmd.Fail(list.status());
  return PrintList(cmd, *list, {"USER", "ROLE", "SINCE"},
                   [](const Json& m) -> std::vector<std::string> {
                     return {Str(m, "user"), Str(m, "role"), ShortTime(m, "created_at")};
                   });
}

int RunProjectAddMember(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai project add-member",
                  "Adds a user to a project with a role, or changes the role of a member\n"
                  "(admins of the project).");
  std::string role;
  cmd.flags().Positional("PROJECT USER (ids or names)");
  cmd.flags().String("role", &role, "read, operator or admin (required)", "ROLE");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 2, 2)) return *code;
  if (role.empty()) return cmd.Usage("missing --role (read, operator or admin)");
  if (Status st = CheckRole(role); !st.ok()) return cmd.Usage(st.message());
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto project = ResolveProjectId(**api, cmd.flags().positional()[0]);
  if (!project.ok()) return cmd.Fail(project.status());
  auto user = ResolveUserId(**api, cmd.flags().positional()[1]);
  if (!user.ok()) return cmd.Fail(user.status());
  auto member = (*api)->Post(
      "/v1/projects/" + net::PercentEncode(*project) + "/members/" + net::PercentEncode(*user),
      Json{{"role", role}});
  if (!member.ok()) return cmd.Fail(member.status());
  if (cmd.json()) {
    cmd.PrintJson(*member);
    return kExitOk;
  }
  ctx.console.Out("User " + *user + " is now " + Str(*member, "role") + " of project " + *project +
                  ".\n");
  return kExitOk;
}

int RunProjectRemoveMember(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai project remove-member",
                  "Removes a user from a project and revokes its tokens there.");
  cmd.flags().Positional("PROJECT USER (ids or names)");
  if (auto code = cmd.Parse(args, 2, 2)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto project = ResolveProjectId(**api, cmd.flags().positional()[0]);
  if (!project.ok()) return cmd.Fail(project.status());
  auto user = ResolveUserId(**api, cmd.flags().positional()[1]);
  if (!user.ok()) return cmd.Fail(user.status());
  auto removed = (*api)->Delete("/v1/projects/" + net::PercentEncode(*project) + "/members/" +
                                net::PercentEncode(*user));
  if (!removed.ok()) return cmd.Fail(removed.status());
  ctx.console.Out("Removed user " + *user + " from project " + *project + ".\n");
  return kExitOk;
}

}  // namespace

int RunTokenCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"create", "create a token (printed once)", &RunTokenCreate},
      {"list", "list tokens", &RunTokenList},
      {"revoke", "revoke a token", &RunTokenRevoke},
  };
  return RunGroup(ctx, "token", "API tokens: bearer credentials with a role and a label selector.",
                  kSubcommands, args);
}

int RunUserCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"list", "list users", &RunUserList},
      {"create", "create a user", &RunUserCreate},
      {"delete", "delete a user", &RunUserDelete},
  };
  return RunGroup(ctx, "user", "Users of the platform (platform admins manage them).", kSubcommands,
                  args);
}

int RunProjectCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"list", "list projects", &RunProjectList},
      {"create", "create a project", &RunProjectCreate},
      {"update", "set the other regions a project may mount buckets of", &RunProjectUpdate},
      {"members", "list a project's members", &RunProjectMembers},
      {"add-member", "add a user to a project with a role", &RunProjectAddMember},
      {"remove-member", "remove a user from a project", &RunProjectRemoveMember},
  };
  return RunGroup(ctx, "project", "Projects: who may do what, and whose jobs and buckets.",
                  kSubcommands, args);
}

}  // namespace sovai::cli::client
