// `sovai datastore add|list|get|delete`: the client of /v1/datastores (docs/api/datastores.md),
// the external S3 services of the token's project. Private to src/cli/client; one command at a
// time per context (commands.h).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/client/api_client.h"
#include "cli/client/command_util.h"
#include "cli/client/datastore_args.h"
#include "cli/client/table.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

std::string DatastorePath(std::string_view alias) {
  return "/v1/datastores/" + net::PercentEncode(alias);
}

// "set" when the server has a secret key (it never sends the key itself).
std::string SecretState(const Json& d) { return At(d, "secret_key_set") == true ? "set" : "-"; }

int RunDatastoreAdd(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(
      ctx, "sovai datastore add",
      "Registers an external S3 service (Ceph RGW, a cloud's S3, another Sovai server) for\n"
      "the token's project (POST /v1/datastores; operators and admins). Its buckets are then\n"
      "mounted like the platform's: --volume BUCKET@ALIAS/prefix:/path. The secret key is\n"
      "stored encrypted and never shown again; give it without the command line:\n\n"
      "  SOVAI_DATASTORE_SECRET_KEY=... sovai datastore add s3 ext --endpoint URL ...\n"
      "  pass show ceph | sovai datastore add s3 ceph --secret-key - --endpoint URL ...");
  DatastoreAddArgs a;
  base::FlagSet& f = cmd.flags();
  f.Positional("s3 ALIAS");
  f.String("endpoint", &a.endpoint, "the S3 service, http(s)://HOST[:PORT]", "URL");
  f.String("region", &a.region, "the region its requests are signed for (e.g. us-east-1)",
           "REGION");
  f.String("access-key", &a.access_key, "the access key id", "KEY");
  f.String("secret-key", &a.secret_key,
           "the secret key; '-' reads it from stdin (default: $SOVAI_DATASTORE_SECRET_KEY)",
           "SECRET");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 2, 2)) return *code;
  a.type = f.positional()[0];
  a.alias = f.positional()[1];
  auto body = BuildDatastoreRequest(a, ctx.vars, [&] { return ctx.console.ReadStdinLine(); });
  if (!body.ok()) return cmd.Usage(body.status().message());
  if (SecretOnCommandLine(a)) {
    cmd.Warn(
        "warning: --secret-key on the command line shows in the process list and the shell "
        "history; prefer $SOVAI_DATASTORE_SECRET_KEY or --secret-key -");
  }
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto created = (*api)->Post("/v1/datastores", *body);
  if (!created.ok()) return cmd.Fail(created.status());
  if (cmd.json()) {
    cmd.PrintJson(*created);
    return kExitOk;
  }
  const std::string alias = Str(*created, "alias");
  ctx.console.Out("Added datastore " + alias + " (" + Str(*created, "type") + ", " +
                  Str(*created, "endpoint") + ", access key " + Str(*created, "access_key") +
                  ").\nMount its buckets with --volume BUCKET@" + alias + "/PREFIX:/PATH.\n");
  return kExitOk;
}

int RunDatastoreList(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai datastore list",
                  "Lists the project's datastores. Secret keys are never shown.");
  int64_t limit = 0;
  cmd.AddLimitFlag(&limit);
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto list = (*api)->List("/v1/datastores", limit);
  if (!list.ok()) return cmd.Fail(list.status());
  if (cmd.json()) {
    cmd.PrintJson(list->ToJson());
    return kExitOk;
  }
  Table table({"ALIAS", "TYPE", "ENDPOINT", "REGION", "ACCESS KEY", "SECRET", "CREATED"});
  for (const Json& d : list->items) {
    table.AddRow({Str(d, "alias"), Str(d, "type"), Str(d, "endpoint"), Str(d, "region"),
                  Str(d, "access_key"), SecretState(d), FormatTime(TimeMicros(d, "created_at"))});
  }
  ctx.console.Out(table.Render());
  if (list->truncated) ctx.console.Err("(more exist; raise --limit to see them)\n");
  return kExitOk;
}

int RunDatastoreGet(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai datastore get", "Shows one datastore (never its secret key).");
  cmd.flags().Positional("ALIAS");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto d = (*api)->Get(DatastorePath(cmd.flags().positional()[0]));
  if (!d.ok()) return cmd.Fail(d.status());
  if (cmd.json()) {
    cmd.PrintJson(*d);
    return kExitOk;
  }
  ctx.console.Out(RenderKeyValues({
      {"Alias", Str(*d, "alias")},
      {"Type", Str(*d, "type")},
      {"Endpoint", Str(*d, "endpoint")},
      {"Region", Str(*d, "region")},
      {"Access key", Str(*d, "access_key")},
      {"Secret key", SecretState(*d)},
      {"Created", FormatTime(TimeMicros(*d, "created_at")) + " by " + Str(*d, "created_by")},
      {"Volumes", "BUCKET@" + Str(*d, "alias") + "/PREFIX:/PATH"},
  }));
  return kExitOk;
}

int RunDatastoreDelete(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai datastore delete",
                  "Forgets a datastore and its keys (operators and admins). Its buckets are not\n"
                  "touched; workloads that still mount it fail their next sync.");
  cmd.flags().Positional("ALIAS");
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  const std::string& alias = cmd.flags().positional()[0];
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto deleted = (*api)->Delete(DatastorePath(alias));
  if (!deleted.ok()) return cmd.Fail(deleted.status());
  ctx.console.Out("Deleted datastore " + alias + ".\n");
  return kExitOk;
}

}  // namespace

int RunDatastoreCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"add", "register an external S3 service under an alias", &RunDatastoreAdd},
      {"list", "list the project's datastores", &RunDatastoreList},
      {"get", "show one datastore", &RunDatastoreGet},
      {"delete", "forget a datastore", &RunDatastoreDelete},
  };
  return RunGroup(ctx, "datastore",
                  "External S3 datastores of the project: volumes mount bucket@ALIAS/prefix.",
                  kSubcommands, args);
}

}  // namespace sovai::cli::client
