// The client configuration `sovai login` writes and every other command reads:
// `~/.config/sovai/config.json` (docs/cli.md, "Configuration"), holding the API URL and token and,
// for the bucket commands, the S3 endpoint, region and an S3 access key.
//
//   SOVAI_ASSIGN_OR_RETURN(std::string path, ConfigPath(vars));
//   SOVAI_ASSIGN_OR_RETURN(std::optional<ClientConfig> config, LoadConfig(env, path));
//   ClientConfig effective = ApplyEnvironment(config.value_or(ClientConfig{}), vars);
//
// The file holds secrets: it is written atomically with mode 0600 (a reader never sees half a
// file, and no other user can read it even briefly). Environment variables override it:
// SOVAI_CONFIG (the file's path), SOVAI_URL and SOVAI_TOKEN (the API), so CI jobs need no file.
// Thread-safety: pure functions over their arguments (and the Env's files).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "base/env.h"
#include "base/status.h"

namespace sovai::cli::client {

// The process environment (or a test's), by name.
using EnvVars = std::map<std::string, std::string, std::less<>>;

struct ClientConfig {
  std::string url;    // "http://127.0.0.1:8080", no trailing '/'
  std::string token;  // the bearer token
  // Who the token belongs to (from /v1/whoami at login), to tell whether stored S3 keys match.
  std::string user_id;
  std::string user_name;
  std::string project_id;  // the token's project: the S3 key acts for it (its buckets)
  std::string project_name;
  // From /v1/info at login.
  std::string region;  // the server's region, "EU-WEST-LOCAL"
  std::string s3_url;  // "http://127.0.0.1:9000"
  std::string s3_access_key_id;
  std::string s3_secret_access_key;

  bool has_s3() const { return !s3_url.empty() && !s3_access_key_id.empty(); }
  bool operator==(const ClientConfig&) const = default;
};

// Where the config lives: $SOVAI_CONFIG if set, else $XDG_CONFIG_HOME/sovai/config.json (when it
// is an absolute path, as the XDG spec requires), else $HOME/.config/sovai/config.json.
// FailedPrecondition when none of them is set.
base::Result<std::string> ConfigPath(const EnvVars& vars);

// The config at `path`; nullopt when there is no such file. Errors: the file cannot be read,
// is larger than kMaxConfigBytes, or is not a JSON object of strings (the message names the file
// and says to run `sovai login` again or delete it).
base::Result<std::optional<ClientConfig>> LoadConfig(base::Env& env, const std::string& path);

// Writes `config` to `path` atomically with mode 0600, creating the parent directories (0700 for
// a directory it creates: it holds only this secret file).
base::Status SaveConfig(base::Env& env, const std::string& path, const ClientConfig& config);

// The config as JSON (the file's format); secrets included.
std::string ConfigToJson(const ClientConfig& config);

// `config` with SOVAI_URL and SOVAI_TOKEN applied when they are set and non-empty. A URL loses
// its trailing '/'.
ClientConfig ApplyEnvironment(ClientConfig config, const EnvVars& vars);

// "http://host:port/" → "http://host:port". InvalidArgument for anything but an http(s) URL
// without a path, query or credentials.
base::Result<std::string> NormalizeApiUrl(std::string_view url);

}  // namespace sovai::cli::client
