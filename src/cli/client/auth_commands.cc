// sovai login, logout, whoami.
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "cli/client/command_util.h"
#include "cli/client/limits.h"
#include "cli/client/table.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

// Whether the user `user_id` still has the access key `access_key_id` (it may have been revoked
// since the last login). nullopt when the keys cannot be listed.
std::optional<bool> KeyStillExists(ApiClient& api, const std::string& user_id,
                                   const std::string& access_key_id) {
  auto keys =
      api.List("/v1/users/" + net::PercentEncode(user_id) + "/s3-keys", kMaxNameLookupItems);
  if (!keys.ok()) return std::nullopt;
  for (const Json& key : keys->items) {
    if (Str(key, "access_key_id") == access_key_id) return true;
  }
  return keys->truncated ? std::nullopt : std::optional<bool>(false);
}

}  // namespace

int RunLoginCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai login",
                  "Logs in to a Sovai server: checks the token with GET /v1/whoami, then writes\n"
                  "the config file (mode 0600) with the URL and token, the S3 endpoint and region\n"
                  "(GET /v1/info) and an S3 access key for the bucket commands, created for your\n"
                  "user unless the config already holds one that still works.\n"
                  "The file is $SOVAI_CONFIG, $XDG_CONFIG_HOME/sovai/config.json or\n"
                  "~/.config/sovai/config.json. Without --url/--token, SOVAI_URL and SOVAI_TOKEN\n"
                  "are used.");
  std::string url;
  std::string token;
  bool s3 = true;
  cmd.flags().String("url", &url, "the API URL, e.g. http://127.0.0.1:8080", "URL");
  cmd.flags().String("token", &token, "an API token; '-' reads it from stdin", "TOKEN");
  cmd.flags().Bool("s3", &s3, "set up an S3 key for the bucket commands (--no-s3 to skip)");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;

  if (url.empty()) url = ctx.vars.contains("SOVAI_URL") ? ctx.vars.find("SOVAI_URL")->second : "";
  if (token.empty()) {
    token = ctx.vars.contains("SOVAI_TOKEN") ? ctx.vars.find("SOVAI_TOKEN")->second : "";
  }
  if (url.empty()) return cmd.Usage("missing --url (or SOVAI_URL): the server's API URL");
  if (token == "-") token = std::string(base::Trim(ctx.console.ReadStdinLine()));
  if (token.empty()) return cmd.Usage("missing --token (or SOVAI_TOKEN): an API token");
  auto normalized = NormalizeApiUrl(url);
  if (!normalized.ok()) return cmd.Usage(normalized.status().message());
  url = *normalized;
  auto path = ConfigPath(ctx.vars);
  if (!path.ok()) return cmd.Fail(path.status());

  auto api = ApiClient::Create(url, token, ctx.http);
  if (!api.ok()) return cmd.Usage(api.status().message());
  auto me = (*api)->Get("/v1/whoami");
  if (!me.ok()) return cmd.Fail(me.status().WithContext("checking the token"));

  ClientConfig config;
  config.url = url;
  config.token = token;
  config.user_id = Str(At(*me, "user"), "id");
  config.user_name = Str(At(*me, "user"), "name");
  config.project_id = Str(At(*me, "project"), "id");
  config.project_name = Str(At(*me, "project"), "name");
  // Keep the S3 key of an earlier login of the same user and project on the same server (a key
  // acts for one project: its buckets).
  auto existing = LoadConfig(ctx.env, *path);
  if (!existing.ok()) {
    cmd.Warn("warning: replacing the unreadable config: " + existing.status().message());
  } else if (*existing && (*existing)->url == url && (*existing)->user_id == config.user_id &&
             (*existing)->project_id == config.project_id) {
    config.region = (*existing)->region;
    config.s3_url = (*existing)->s3_url;
    config.s3_access_key_id = (*existing)->s3_access_key_id;
    config.s3_secret_access_key = (*existing)->s3_secret_access_key;
  }

  std::string s3_note;
  if (s3) {
    auto info = (*api)->Get("/v1/info");
    if (!info.ok()) {
      cmd.Warn("warning: could not read the S3 endpoint from GET /v1/info (" +
               info.status().message() + "); the bucket commands need it: run 'sovai login' again");
    } else {
      config.region = Str(*info, "region");
      config.s3_url = Str(*info, "s3_url");
      bool create = config.s3_access_key_id.empty();
      if (!create) {
        std::optional<bool> still = KeyStillExists(**api, config.user_id, config.s3_access_key_id);
        if (still == false) {
          cmd.Warn("the stored S3 key " + config.s3_access_key_id +
                   " no longer exists; creating a new one");
          create = true;
        } else {
          s3_note = "kept";
        }
      }
      if (create) {
        config.s3_access_key_id.clear();
        config.s3_secret_access_key.clear();
        auto key =
            (*api)->Post("/v1/users/" + net::PercentEncode(config.user_id) + "/s3-keys", Json());
        if (!key.ok()) {
          cmd.Warn("warning: could not create an S3 key (" + key.status().message() +
                   "); the bucket commands will not work with this token");
        } else {
          config.s3_access_key_id = Str(*key, "access_key_id");
          config.s3_secret_access_key = Str(*key, "secret_access_key");
          s3_note = "new";
        }
      }
    }
  }
  if (base::Status saved = SaveConfig(ctx.env, *path, config); !saved.ok()) {
    return cmd.Fail(saved);
  }

  if (cmd.json()) {
    Json out = {{"url", config.url},
                {"user", config.user_name},
                {"user_id", config.user_id},
                {"project", config.project_name},
                {"role", Str(*me, "role")},
                {"config", *path},
                {"region", config.region},
                {"s3_url", config.s3_url},
                {"s3_access_key_id", config.s3_access_key_id}};
    cmd.PrintJson(out);
    return kExitOk;
  }
  std::string text = "Logged in to " + config.url + " as " + config.user_name + " (project " +
                     config.project_name + ", role " + Str(*me, "role") + ").\n";
  if (config.has_s3()) {
    text += "S3: " + config.s3_url + ", region " + config.region + ", access key " +
            config.s3_access_key_id + (s3_note.empty() ? "" : " (" + s3_note + ")") + ".\n";
    // The secret stays in the config: the command prints it only in a client's configuration.
    text += "Other S3 clients: sovai s3 credentials --format env|aws|rclone|s3cmd|boto3\n";
  }
  text += "Config: " + *path + "\n";
  ctx.console.Out(text);
  return kExitOk;
}

int RunLogoutCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai logout",
                  "Removes the config file that 'sovai login' wrote. The S3 key login created is\n"
                  "revoked first (DELETE /v1/s3-keys/{key}) unless --keep-s3-key; the API token\n"
                  "itself stays valid (revoke it with 'sovai token revoke').");
  bool keep_key = false;
  cmd.flags().Bool("keep-s3-key", &keep_key, "do not revoke the config's S3 key");
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  auto path = ConfigPath(ctx.vars);
  if (!path.ok()) return cmd.Fail(path.status());
  auto stored = LoadConfig(ctx.env, *path);
  if (stored.ok() && !*stored) {
    ctx.console.Out("Not logged in (no " + *path + ").\n");
    return kExitOk;
  }
  if (stored.ok() && !keep_key && !(*stored)->s3_access_key_id.empty() && !(*stored)->url.empty() &&
      !(*stored)->token.empty()) {
    const ClientConfig& config = **stored;
    auto api = ApiClient::Create(config.url, config.token, ctx.http);
    base::Status revoked =
        api.ok()
            ? (*api)->Delete("/v1/s3-keys/" + net::PercentEncode(config.s3_access_key_id)).status()
            : api.status();
    if (!revoked.ok() && revoked.code() != base::StatusCode::kNotFound) {
      cmd.Warn("warning: could not revoke the S3 key " + config.s3_access_key_id + " (" +
               revoked.message() + "); revoke it later with an admin token");
    }
  }
  if (base::Status removed = ctx.env.DeleteFile(*path);
      !removed.ok() && removed.code() != base::StatusCode::kNotFound) {
    return cmd.Fail(removed.WithContext("removing " + *path));
  }
  ctx.console.Out("Logged out (removed " + *path + ").\n");
  return kExitOk;
}

int RunWhoamiCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai whoami",
                  "Shows who the configured token is (GET /v1/whoami): user, project, role,\n"
                  "token, and the S3 key of the config.");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  auto config = cmd.Config();
  if (!config.ok()) return cmd.Fail(config.status());
  auto api = cmd.Connect(*config);
  if (!api.ok()) return cmd.Fail(api.status());
  auto me = (*api)->Get("/v1/whoami");
  if (!me.ok()) return cmd.Fail(me.status());
  if (cmd.json()) {
    cmd.PrintJson(*me);
    return kExitOk;
  }
  const Json& user = At(*me, "user");
  const Json& project = At(*me, "project");
  const Json& token = At(*me, "token");
  std::string expires = Str(token, "expires_at");
  std::vector<std::pair<std::string, std::string>> rows = {
      {"URL", config->url},
      {"User", Str(user, "name") + " (" + Str(user, "id") + ")"},
      {"Project", Str(project, "name") + " (" + Str(project, "id") + ")"},
      {"Role", Str(*me, "role")},
      {"Platform admin", At(*me, "platform_admin") == true ? "yes" : "no"},
      {"Token",
       Str(token, "id") + (Str(token, "name").empty() ? "" : " (" + Str(token, "name") + ")")},
      {"Token expires", expires.empty() ? "never" : expires},
      {"Label selector", Str(token, "labels").empty() ? "-" : Str(token, "labels")},
      {"S3", config->has_s3() ? config->s3_url + " (key " + config->s3_access_key_id + ")"
                              : "not set up (run 'sovai login')"},
  };
  ctx.console.Out(RenderKeyValues(rows));
  return kExitOk;
}

}  // namespace sovai::cli::client
