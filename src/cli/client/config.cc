#include "cli/client/config.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "base/json.h"
#include "cli/client/limits.h"
#include "net/client.h"

namespace sovai::cli::client {
namespace {

constexpr char kConfigRelativePath[] = "sovai/config.json";
constexpr uint32_t kSecretFileMode = 0600;
constexpr mode_t kSecretDirMode = 0700;

// The file's members, bound to the struct: one table for reading and writing.
struct Member {
  const char* name;
  std::string ClientConfig::*field;
};
constexpr Member kMembers[] = {
    {"url", &ClientConfig::url},
    {"token", &ClientConfig::token},
    {"user_id", &ClientConfig::user_id},
    {"user", &ClientConfig::user_name},
    {"project_id", &ClientConfig::project_id},
    {"project", &ClientConfig::project_name},
    {"region", &ClientConfig::region},
    {"s3_url", &ClientConfig::s3_url},
    {"s3_access_key_id", &ClientConfig::s3_access_key_id},
    {"s3_secret_access_key", &ClientConfig::s3_secret_access_key},
};

std::optional<std::string> Lookup(const EnvVars& vars, std::string_view name) {
  auto it = vars.find(name);
  if (it == vars.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

}  // namespace

base::Result<std::string> ConfigPath(const EnvVars& vars) {
  if (auto path = Lookup(vars, "SOVAI_CONFIG")) return *path;
  if (auto xdg = Lookup(vars, "XDG_CONFIG_HOME"); xdg && xdg->front() == '/') {
    return base::JoinPath(*xdg, kConfigRelativePath);
  }
  if (auto home = Lookup(vars, "HOME")) {
    return base::JoinPath(base::JoinPath(*home, ".config"), kConfigRelativePath);
  }
  return base::FailedPreconditionError(
      "cannot find the config file: neither SOVAI_CONFIG, XDG_CONFIG_HOME nor HOME is set; set "
      "SOVAI_CONFIG to a file path");
}

base::Result<std::optional<ClientConfig>> LoadConfig(base::Env& env, const std::string& path) {
  auto text = env.ReadFile(path, kMaxConfigBytes);
  if (!text.ok()) {
    if (text.status().code() == base::StatusCode::kNotFound) return std::optional<ClientConfig>();
    return text.status().WithContext("reading the config " + path);
  }
  const std::string fix = " (run 'sovai login' again, or delete the file)";
  auto doc = base::ParseJson(*text);
  if (!doc.ok())
    return base::InvalidArgumentError("config " + path + ": " + doc.status().message() + fix);
  if (!doc->is_object())
    return base::InvalidArgumentError("config " + path + " is not a JSON object" + fix);
  ClientConfig config;
  for (const Member& member : kMembers) {
    auto value = base::GetOptionalString(*doc, member.name);
    if (!value.ok())
      return base::InvalidArgumentError("config " + path + ": " + value.status().message() + fix);
    config.*member.field = value->value_or("");
  }
  return std::optional<ClientConfig>(std::move(config));
}

std::string ConfigToJson(const ClientConfig& config) {
  nlohmann::json doc = nlohmann::json::object();
  for (const Member& member : kMembers) {
    if (!(config.*member.field).empty()) doc[member.name] = config.*member.field;
  }
  return base::DumpJson(doc, 2) + "\n";
}

base::Status SaveConfig(base::Env& env, const std::string& path, const ClientConfig& config) {
  const std::string dir = base::DirName(path);
  if (!env.FileExists(dir)) {
    SOVAI_RETURN_IF_ERROR(env.CreateDirs(dir).WithContext("creating the config directory"));
    // Best effort: the file itself is 0600 whatever the directory's mode.
    chmod(dir.c_str(), kSecretDirMode);
  }
  return env.WriteFileAtomically(path, ConfigToJson(config), kSecretFileMode)
      .WithContext("writing the config " + path);
}

ClientConfig ApplyEnvironment(ClientConfig config, const EnvVars& vars) {
  if (auto url = Lookup(vars, "SOVAI_URL")) {
    std::string value = *url;
    while (value.size() > 1 && value.back() == '/') value.pop_back();
    config.url = value;
  }
  if (auto token = Lookup(vars, "SOVAI_TOKEN")) config.token = *token;
  return config;
}

base::Result<std::string> NormalizeApiUrl(std::string_view url) {
  std::string value(url);
  while (!value.empty() && value.back() == '/') value.pop_back();
  auto options = net::ClientOptionsFromUrl(value);
  if (!options.ok()) return options.status();
  const size_t scheme_end = value.find("://") + 3;
  if (value.find_first_of("/?#@", scheme_end) != std::string::npos) {
    return base::InvalidArgumentError("the API URL '" + std::string(url) +
                                      "' must be scheme://host[:port] without a path, query or "
                                      "credentials (e.g. http://127.0.0.1:8080)");
  }
  return value;
}

}  // namespace sovai::cli::client
