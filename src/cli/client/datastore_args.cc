#include "cli/client/datastore_args.h"

#include "base/strings.h"

namespace sovai::cli::client {

namespace {

using Json = nlohmann::json;

bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// The REGION rule of a volume spec (docs/formats/volume-spec.md): 2–32 characters.
base::Status CheckAlias(std::string_view alias) {
  bool ok = alias.size() >= 2 && alias.size() <= 32 && IsLetter(alias.front());
  for (char c : alias) ok = ok && (IsLetter(c) || (c >= '0' && c <= '9') || c == '-');
  if (ok) return base::Status();
  return base::InvalidArgumentError("ALIAS '" + std::string(alias) +
                                    "' must be 2 to 32 letters, digits and '-', starting with a "
                                    "letter (volumes name it as bucket@ALIAS/prefix)");
}

}  // namespace

bool SecretOnCommandLine(const DatastoreAddArgs& args) {
  return !args.secret_key.empty() && args.secret_key != "-";
}

base::Result<Json> BuildDatastoreRequest(const DatastoreAddArgs& args, const EnvVars& local_env,
                                         const std::function<std::string()>& read_stdin_line) {
  if (args.type != "s3") {
    return base::InvalidArgumentError("datastore type '" + args.type +
                                      "' is not supported; the only type is s3 (sovai datastore "
                                      "add s3 ALIAS ...)");
  }
  SOVAI_RETURN_IF_ERROR(CheckAlias(args.alias));
  if (args.endpoint.empty()) {
    return base::InvalidArgumentError(
        "missing --endpoint: the S3 service's URL, http(s)://HOST[:PORT]");
  }
  if (!args.endpoint.starts_with("http://") && !args.endpoint.starts_with("https://")) {
    return base::InvalidArgumentError("--endpoint '" + args.endpoint +
                                      "' must be http://HOST[:PORT] or https://HOST[:PORT]");
  }
  if (args.region.empty()) {
    return base::InvalidArgumentError(
        "missing --region: the region the S3 service signs requests for (e.g. us-east-1)");
  }
  if (args.access_key.empty()) return base::InvalidArgumentError("missing --access-key");
  std::string secret;
  if (args.secret_key == "-") {
    secret = std::string(base::Trim(read_stdin_line()));
    if (secret.empty()) {
      return base::InvalidArgumentError("--secret-key -: stdin gave no secret key (an empty line)");
    }
  } else if (!args.secret_key.empty()) {
    secret = args.secret_key;
  } else if (auto it = local_env.find(kDatastoreSecretEnv);
             it != local_env.end() && !it->second.empty()) {
    secret = it->second;
  } else {
    return base::InvalidArgumentError(
        std::string("missing the secret key: set ") + kDatastoreSecretEnv +
        ", or pass --secret-key - and write it on stdin (--secret-key SECRET works too, but shows "
        "it in the process list)");
  }
  return Json{{"alias", args.alias},           {"type", args.type},
              {"endpoint", args.endpoint},     {"region", args.region},
              {"access_key", args.access_key}, {"secret_key", secret}};
}

}  // namespace sovai::cli::client
