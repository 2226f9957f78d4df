#include "cli/client/commands.h"

#include "cli/client/billing_commands.h"
#include "cli/client/command_util.h"
#include "cli/client/tco.h"

namespace sovai::cli::client {

// audit_commands.cc (outside the anonymous namespace: it is defined there, with external linkage)
int RunAuditCommand(CommandContext& ctx, const std::vector<std::string>& args);
// registry_commands.cc
int RunRegistryCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunImageCommand(CommandContext& ctx, const std::vector<std::string>& args);

namespace {

struct TopCommand {
  std::string_view name;
  std::string_view summary;
  int (*run)(CommandContext& ctx, const std::vector<std::string>& args);
};

constexpr TopCommand kCommands[] = {
    {"login", "log in to a Sovai server (writes ~/.config/sovai/config.json)", &RunLoginCommand},
    {"logout", "forget the login (and revoke its S3 key)", &RunLogoutCommand},
    {"whoami", "show the user, project and role of the token", &RunWhoamiCommand},
    {"job", "run, list, follow and stop training jobs", &RunJobCommand},
    {"flavor", "list the machine flavors jobs can ask for", &RunFlavorCommand},
    {"app", "serve models (or HTTP images) behind the gateway", &RunAppCommand},
    {"endpoint", "publish models in the OpenAI-compatible catalog", &RunEndpointCommand},
    {"notebook", "Jupyter notebooks with buckets mounted, behind the gateway", &RunNotebookCommand},
    {"bucket", "object storage: ls, mb, rb, cp, sync, rm", &RunBucketCommand},
    {"image", "images in the server's registry: list, tags, delete", &RunImageCommand},
    {"registry", "the OCI registry: login for podman/skopeo, gc", &RunRegistryCommand},
    {"datastore", "external S3 services the project's volumes mount", &RunDatastoreCommand},
    {"s3", "the S3 key for other clients: aws, rclone, s3cmd, boto3", &RunS3Command},
    {"billing", "what the project was billed: usage and monthly statements", &RunBillingCommand},
    {"audit", "the audit log: list entries, verify the hash chain", &RunAuditCommand},
    {"budget", "a project's monthly budget: get, set", &RunBudgetCommand},
    {"tco", "owning GPUs vs pay-as-you-go: monthly costs and break-even", &RunTcoCommand},
    {"token", "create, list and revoke API tokens", &RunTokenCommand},
    {"user", "list, create and delete users (platform admins)", &RunUserCommand},
    {"project", "list, create and update projects, add members", &RunProjectCommand},
};

}  // namespace

bool IsClientCommand(std::string_view command) {
  for (const TopCommand& c : kCommands) {
    if (c.name == command) return true;
  }
  return false;
}

int RunClientCommand(std::string_view command, const std::vector<std::string>& args,
                     CommandContext& ctx) {
  for (const TopCommand& c : kCommands) {
    if (c.name == command) return c.run(ctx, args);
  }
  ctx.console.Err("sovai: unknown command '" + std::string(command) + "'\n");
  return kExitUsage;
}

std::string ClientCommandsHelp() {
  std::string out;
  for (const TopCommand& c : kCommands) {
    std::string left = "  " + std::string(c.name);
    if (left.size() < 13) left.resize(13, ' ');
    out += left + std::string(c.summary) + "\n";
  }
  return out;
}

}  // namespace sovai::cli::client
