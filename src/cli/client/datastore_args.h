// `sovai datastore add s3 ALIAS ...` flags → the JSON body of POST /v1/datastores
// (docs/api/datastores.md), checked locally first so that a typo is a usage error (exit 2) naming
// the flag, not a round trip; the server validates everything again.
//
//   DatastoreAddArgs args;  // filled by the flag parser
//   SOVAI_ASSIGN_OR_RETURN(nlohmann::json body,
//                          BuildDatastoreRequest(args, vars, [&] { return console.ReadStdinLine();
//                          }));
//
// The secret key need not be on the command line (where the process list and the shell history
// would show it): `--secret-key -` reads it from the first line of stdin, and without the flag it
// comes from the environment variable SOVAI_DATASTORE_SECRET_KEY.
//
// Errors are InvalidArgument whose message names the flag and says what is wrong; no message
// quotes the secret. Thread-safety: pure functions (plus the stdin callback).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "cli/client/config.h"

namespace sovai::cli::client {

// Where the secret key comes from when --secret-key is not given.
inline constexpr char kDatastoreSecretEnv[] = "SOVAI_DATASTORE_SECRET_KEY";

struct DatastoreAddArgs {
  std::string type;        // the first positional: "s3"
  std::string alias;       // the second: how volumes name it, bucket@ALIAS/prefix
  std::string endpoint;    // --endpoint http(s)://HOST[:PORT]
  std::string region;      // --region: the region S3 requests are signed for
  std::string access_key;  // --access-key
  // --secret-key: the secret, "-" = the first line of stdin, "" = $SOVAI_DATASTORE_SECRET_KEY.
  std::string secret_key;
};

// The POST /v1/datastores body {"alias", "type", "endpoint", "region", "access_key",
// "secret_key"}. `read_stdin_line` is called only for `--secret-key -`. Errors: a type other than
// s3; an alias that is not 2–32 letters, digits and '-' starting with a letter; a missing
// --endpoint, or one that is not http:// or https://; a missing --region or --access-key; no
// secret (no flag and no SOVAI_DATASTORE_SECRET_KEY, or an empty stdin line).
base::Result<nlohmann::json> BuildDatastoreRequest(
    const DatastoreAddArgs& args, const EnvVars& local_env,
    const std::function<std::string()>& read_stdin_line);

// Whether the secret was given as the flag's value (visible in the process list and the shell
// history): the command warns about it.
bool SecretOnCommandLine(const DatastoreAddArgs& args);

}  // namespace sovai::cli::client
