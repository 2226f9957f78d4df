// External datastores (docs/api/datastores.md): S3 services a project registers under an alias
// (Ceph RGW, a cloud's S3, another Sovai server), so that its workloads mount
// `bucket@ALIAS/prefix` exactly as they mount buckets of the embedded store.
//
//   Datastores stores(db, env, base::JoinPath(data_dir, kSecretsKeyFile));
//   SOVAI_ASSIGN_OR_RETURN(Datastore d, stores.Add(project_id, user_id, request));
//   SOVAI_ASSIGN_OR_RETURN(DatastoreCredentials c, stores.Credentials(project_id, "ext"));
//
// Rows live in control.db (`datastores`); the secret key is sealed with the server's master key
// (secrets.h) and only Credentials() ever opens it: nothing else returns it, and no message
// quotes it. Aliases are stored in lowercase and compared case-insensitively, like regions.
// A project sees only its own datastores: another project's alias is NotFound, exactly like one
// that does not exist.
//
// Thread-safety: thread-safe (ControlDb and SecretBox are).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/sqlite.h"
#include "base/status.h"
#include "control/db.h"
#include "control/identity.h"
#include "control/problem.h"
#include "control/regions.h"
#include "control/secrets.h"

namespace sovai::control {

// The only datastore type so far.
inline constexpr char kDatastoreTypeS3[] = "s3";

struct Datastore {
  std::string project;     // project id
  std::string alias;       // lowercase: "ext"
  std::string type;        // "s3"
  std::string endpoint;    // "https://s3.example.eu[:port]", no path
  std::string region;      // the region S3 requests are signed for: "us-east-1"
  std::string access_key;  // shown; the secret never is
  std::string created_by;  // user id
  int64_t created_at_us = 0;
};

// What POST /v1/datastores asks for.
struct NewDatastore {
  std::string alias;
  std::string type = kDatastoreTypeS3;
  std::string endpoint;
  std::string region;
  std::string access_key;
  std::string secret_key;
};

// A datastore with its secret, for the S3 client of a workload of its project.
struct DatastoreCredentials {
  Datastore datastore;
  std::string secret_key;
};

// Alias syntax: 2–32 characters of letters, digits and '-', starting with a letter (the REGION
// part of a volume spec, docs/formats/volume-spec.md). InvalidArgument quoting it otherwise.
base::Status ValidateDatastoreAlias(std::string_view alias);

// Every problem of a request, naming its field ("alias", "type", "endpoint", "region",
// "access_key", "secret_key"): the alias syntax, or an alias that is a region of `regions` (the
// server's own or one of --regions, case-insensitively: a volume's @NAME must mean one thing);
// a type other than "s3"; an endpoint that is not http(s)://HOST[:PORT] (ValidateS3Endpoint); a
// signing region that is not 1–64 of [a-z0-9-]; an access key that is not 1–kMaxDatastoreKeyBytes
// printable ASCII characters without spaces; a secret key that is not 1–kMaxDatastoreSecretBytes
// of them. Messages never quote the secret.
std::vector<FieldError> ValidateNewDatastore(const NewDatastore& d, const KnownRegions& regions);

// The aliases of `project`'s datastores, sorted, inside a transaction the caller holds (for code
// that already runs in ControlDb::Read/Write, such as AppService::Load).
base::Result<std::vector<std::string>> DatastoreAliases(base::Database& sql,
                                                        const std::string& project);

class Datastores {
 public:
  Datastores(ControlDb& db, base::Env& env, std::string secrets_key_path)
      : db_(db), env_(env), secrets_(env, std::move(secrets_key_path)) {}
  Datastores(const Datastores&) = delete;
  Datastores& operator=(const Datastores&) = delete;

  // Registers a datastore of `project`, created by user `user`. The alias is stored in
  // lowercase; the secret sealed (creating the master key on first use). `d` must have passed
  // ValidateNewDatastore (a bug otherwise: SOVAI_CHECK on the alias). Errors: AlreadyExists when
  // the project has a datastore of that alias (any case); FailedPrecondition when it already has
  // kMaxDatastoresPerProject; SecretBox::Seal's and the database's errors.
  base::Result<Datastore> Add(const std::string& project, const std::string& user,
                              const NewDatastore& d);
  // One page of the project's datastores, by alias (the cursor is the last alias).
  base::Result<Page<Datastore>> List(const std::string& project, const PageRequest& page);
  // Errors: NotFound ("datastore 'x' not found in this project") for an alias the project has
  // not registered, whatever other projects have.
  base::Result<Datastore> Get(const std::string& project, std::string_view alias);
  // Errors: NotFound as Get.
  base::Status Delete(const std::string& project, std::string_view alias);
  // The datastore with its secret opened. Errors: NotFound as Get; SecretBox::Open's
  // (FailedPrecondition for a missing or replaced master key, DataLoss for a modified row).
  base::Result<DatastoreCredentials> Credentials(const std::string& project,
                                                 std::string_view alias);
  // The project's aliases, sorted.
  base::Result<std::vector<std::string>> Aliases(const std::string& project);

 private:
  ControlDb& db_;
  base::Env& env_;
  SecretBox secrets_;
};

}  // namespace sovai::control
