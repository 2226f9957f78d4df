// First-start identity: the bootstrap admin's S3 keys and API token.
//
// BootstrapAdmin() is called by `sovai server` before it listens. On the first start of a data
// directory it takes the credentials from SOVAI_ADMIN_ACCESS_KEY / SOVAI_ADMIN_SECRET_KEY /
// SOVAI_ADMIN_TOKEN when all three are given (or generates them) and writes `<data-dir>/admin.json`
// atomically with mode 0600. Later starts read that file and return the same credentials. The
// format is in docs/formats/server-json.md. The S3 and control-plane modules give the keys meaning.
//
// Thread-safety: call from one thread (server start-up).
#pragma once

#include <optional>
#include <string>

#include "base/env.h"
#include "base/status.h"

namespace sovai::control {

struct AdminCredentials {
  std::string user = "admin";
  std::string access_key_id;      // 20 chars, [A-Z0-9], starts with "SV"
  std::string secret_access_key;  // 40 chars, base64url alphabet
  std::string api_token;          // "sovai_" + 43 base64url chars
  std::string created_at;         // RFC 3339
};

// Credentials supplied by the operator (from the SOVAI_ADMIN_* environment variables).
struct AdminOverrides {
  std::optional<std::string> access_key_id;
  std::optional<std::string> secret_access_key;
  std::optional<std::string> api_token;
};

// Reads SOVAI_ADMIN_ACCESS_KEY, SOVAI_ADMIN_SECRET_KEY and SOVAI_ADMIN_TOKEN from the process
// environment (unset or empty = not given).
AdminOverrides AdminOverridesFromEnvironment();

// Returns the admin credentials of `data_dir`, creating admin.json on first start.
// Errors:
//   InvalidArgument     only some of the three overrides are given; an override has a bad shape
//                       (access key 16–128 chars [A-Za-z0-9], secret 8–128 printable ASCII chars
//                       without spaces, token 16–256 chars [A-Za-z0-9_.-]);
//   FailedPrecondition  admin.json exists and the overrides name different credentials (the
//                       server never silently changes the admin), or admin.json is readable by
//                       group/others (fix with chmod 600);
//   DataLoss            admin.json exists but does not parse or lacks a field;
//   file-system errors from the Env (the directory is left as it was).
base::Result<AdminCredentials> BootstrapAdmin(base::Env& env, const std::string& data_dir,
                                              const AdminOverrides& overrides);

}  // namespace sovai::control
