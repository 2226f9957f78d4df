#include "control/bootstrap.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/crypto.h"
#include "base/json.h"
#include "base/time.h"

namespace sovai::control {
namespace {

constexpr char kAdminFile[] = "admin.json";
constexpr char kAccessKeyAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

std::optional<std::string> NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool AllOf(std::string_view s, bool (*ok)(char)) { return std::all_of(s.begin(), s.end(), ok); }
bool IsAlnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}
bool IsTokenChar(char c) { return IsAlnum(c) || c == '_' || c == '.' || c == '-'; }
bool IsSecretChar(char c) { return c > ' ' && c < 0x7f; }

base::Status ValidateOverrides(const AdminOverrides& o) {
  const std::string& key = *o.access_key_id;
  if (key.size() < 16 || key.size() > 128 || !AllOf(key, IsAlnum)) {
    return base::InvalidArgumentError(
        "SOVAI_ADMIN_ACCESS_KEY must be 16 to 128 letters and digits");
  }
  const std::string& secret = *o.secret_access_key;
  if (secret.size() < 8 || secret.size() > 128 || !AllOf(secret, IsSecretChar)) {
    return base::InvalidArgumentError(
        "SOVAI_ADMIN_SECRET_KEY must be 8 to 128 printable ASCII characters without spaces");
  }
  const std::string& token = *o.api_token;
  if (token.size() < 16 || token.size() > 256 || !AllOf(token, IsTokenChar)) {
    return base::InvalidArgumentError(
        "SOVAI_ADMIN_TOKEN must be 16 to 256 characters of [A-Za-z0-9_.-]");
  }
  return base::Status();
}

// An access key id in the AWS shape: 20 upper-case base32 characters, "SV" first.
std::string GenerateAccessKeyId() {
  std::string random = base::RandomBytes(18);
  std::string key = "SV";
  for (unsigned char byte : random) key += kAccessKeyAlphabet[byte % 32];
  return key;
}

base::Result<AdminCredentials> ReadAdminFile(base::Env& env, const std::string& path) {
  SOVAI_ASSIGN_OR_RETURN(base::FileStat stat, env.Stat(path));
  if ((stat.mode & (S_IRWXG | S_IRWXO)) != 0) {
    return base::FailedPreconditionError(path +
                                         " is readable by group or others; run chmod 600 on it");
  }
  SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(path, 64 * 1024));
  auto parsed = base::ParseJson(text);
  if (!parsed.ok()) return base::DataLossError(path + ": " + parsed.status().message());
  AdminCredentials creds;
  auto field = [&](std::string_view name, std::string& out) -> base::Status {
    auto value = base::GetString(*parsed, name);
    if (!value.ok()) return base::DataLossError(path + ": " + value.status().message());
    out = *value;
    return base::Status();
  };
  SOVAI_RETURN_IF_ERROR(field("user", creds.user));
  SOVAI_RETURN_IF_ERROR(field("access_key_id", creds.access_key_id));
  SOVAI_RETURN_IF_ERROR(field("secret_access_key", creds.secret_access_key));
  SOVAI_RETURN_IF_ERROR(field("api_token", creds.api_token));
  SOVAI_RETURN_IF_ERROR(field("created_at", creds.created_at));
  return creds;
}

}  // namespace

AdminOverrides AdminOverridesFromEnvironment() {
  return AdminOverrides{.access_key_id = NonEmptyEnv("SOVAI_ADMIN_ACCESS_KEY"),
                        .secret_access_key = NonEmptyEnv("SOVAI_ADMIN_SECRET_KEY"),
                        .api_token = NonEmptyEnv("SOVAI_ADMIN_TOKEN")};
}

base::Result<AdminCredentials> BootstrapAdmin(base::Env& env, const std::string& data_dir,
                                              const AdminOverrides& overrides) {
  const int given = overrides.access_key_id.has_value() + overrides.secret_access_key.has_value() +
                    overrides.api_token.has_value();
  if (given != 0 && given != 3) {
    return base::InvalidArgumentError(
        "set all three of SOVAI_ADMIN_ACCESS_KEY, SOVAI_ADMIN_SECRET_KEY and SOVAI_ADMIN_TOKEN, "
        "or none of them");
  }
  if (given == 3) SOVAI_RETURN_IF_ERROR(ValidateOverrides(overrides));

  const std::string path = base::JoinPath(data_dir, kAdminFile);
  if (env.FileExists(path)) {
    SOVAI_ASSIGN_OR_RETURN(AdminCredentials existing, ReadAdminFile(env, path));
    if (given == 3 && (existing.access_key_id != *overrides.access_key_id ||
                       existing.secret_access_key != *overrides.secret_access_key ||
                       existing.api_token != *overrides.api_token)) {
      return base::FailedPreconditionError(
          "SOVAI_ADMIN_* name other credentials than " + path +
          " holds; unset them to keep the existing admin, or start with a new data directory");
    }
    return existing;
  }

  AdminCredentials creds;
  creds.created_at = base::FormatRfc3339(env.NowUnixMicros());
  if (given == 3) {
    creds.access_key_id = *overrides.access_key_id;
    creds.secret_access_key = *overrides.secret_access_key;
    creds.api_token = *overrides.api_token;
  } else {
    creds.access_key_id = GenerateAccessKeyId();
    creds.secret_access_key = base::Base64UrlEncode(base::RandomBytes(30));  // 40 chars
    creds.api_token = base::RandomToken("sovai_", 32);
  }
  nlohmann::json doc = {{"user", creds.user},
                        {"access_key_id", creds.access_key_id},
                        {"secret_access_key", creds.secret_access_key},
                        {"api_token", creds.api_token},
                        {"created_at", creds.created_at}};
  SOVAI_RETURN_IF_ERROR(env.WriteFileAtomically(path, base::DumpJson(doc, 2) + "\n", 0600));
  return creds;
}

}  // namespace sovai::control
