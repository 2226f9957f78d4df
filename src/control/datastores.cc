#include "control/datastores.h"

#include "base/check.h"
#include "base/strings.h"
#include "control/limits.h"
#include "exec/volume_limits.h"

namespace sovai::control {

namespace {

using base::Database;
using base::Result;
using base::Statement;
using base::Status;

constexpr char kColumns[] =
    "project, alias, type, endpoint, region, access_key, created_by, created_at";

Datastore ReadDatastore(const Statement& st) {
  return Datastore{.project = st.ColumnText(0),
                   .alias = st.ColumnText(1),
                   .type = st.ColumnText(2),
                   .endpoint = st.ColumnText(3),
                   .region = st.ColumnText(4),
                   .access_key = st.ColumnText(5),
                   .created_by = st.ColumnText(6),
                   .created_at_us = st.ColumnInt(7)};
}

// The associated data of a row's sealed secret: its ciphertext opens in no other row.
std::string SecretContext(const std::string& project, const std::string& alias) {
  std::string context = "datastore";
  context.push_back('\0');
  context += project;
  context.push_back('\0');
  context += alias;
  return context;
}

Status NotFound(std::string_view alias) {
  return base::NotFoundError("datastore '" + std::string(alias) +
                             "' not found in this project; `sovai datastore list` shows its "
                             "datastores");
}

bool PrintableWithoutSpace(std::string_view s) {
  for (char c : s) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

// At most 64 bytes of `value`, quoted, for messages (never used for the secret).
std::string Quoted(std::string_view value) {
  constexpr size_t kMax = 64;
  if (value.size() <= kMax) return "'" + std::string(value) + "'";
  return "'" + std::string(value.substr(0, kMax)) + "...'";
}

// The row of `alias` (any case) of `project`, stepped onto: kColumns, then secret_key_id and
// secret_sealed. NotFound when there is none.
Result<Statement> LoadRow(Database& sql, const std::string& project, std::string_view alias) {
  SOVAI_ASSIGN_OR_RETURN(Statement st, sql.Prepare(std::string("SELECT ") + kColumns +
                                                   ", secret_key_id, secret_sealed FROM "
                                                   "datastores WHERE project = ?1 AND alias = ?2"));
  st.Bind(1, project).Bind(2, base::AsciiToLower(alias));
  SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return NotFound(alias);
  return st;
}

}  // namespace

Status ValidateDatastoreAlias(std::string_view alias) {
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  bool ok = alias.size() >= exec::kMinRegionBytes && alias.size() <= exec::kMaxRegionBytes &&
            letter(alias.front());
  for (char c : alias) ok = ok && (letter(c) || (c >= '0' && c <= '9') || c == '-');
  if (ok) return Status();
  return base::InvalidArgumentError(
      "alias " + Quoted(alias) + " must be " + std::to_string(exec::kMinRegionBytes) + " to " +
      std::to_string(exec::kMaxRegionBytes) +
      " letters, digits and '-', starting with a letter (volumes name it as bucket@ALIAS/prefix)");
}

std::vector<FieldError> ValidateNewDatastore(const NewDatastore& d, const KnownRegions& regions) {
  std::vector<FieldError> errors;
  auto check = [&](const char* field, const Status& st) {
    if (!st.ok()) errors.push_back({field, st.message()});
  };
  Status alias = ValidateDatastoreAlias(d.alias);
  check("alias", alias);
  if (alias.ok() && regions.Knows(d.alias)) {
    errors.push_back(
        {"alias", "alias '" + base::AsciiToLower(d.alias) + "' is " +
                      (regions.IsOwn(d.alias) ? "this server's own region"
                                              : "a region this server knows (--regions)") +
                      ", compared case-insensitively; a volume's @NAME must mean one thing, so "
                      "choose another alias"});
  }
  if (d.type != kDatastoreTypeS3) {
    errors.push_back({"type", "type " + Quoted(d.type) + " is not supported; use \"s3\""});
  }
  if (Status st = ValidateS3Endpoint(d.endpoint); !st.ok()) {
    errors.push_back({"endpoint", "endpoint " + st.message()});
  }
  if (Status st = ValidateS3SigningRegion(d.region); !st.ok()) {
    errors.push_back({"region", "region (the region S3 requests are signed for, e.g. us-east-1) " +
                                    st.message()});
  }
  if (d.access_key.empty() || d.access_key.size() > kMaxDatastoreKeyBytes ||
      !PrintableWithoutSpace(d.access_key)) {
    errors.push_back({"access_key", "access_key must be 1 to " +
                                        std::to_string(kMaxDatastoreKeyBytes) +
                                        " printable ASCII characters without spaces"});
  }
  if (d.secret_key.empty() || d.secret_key.size() > kMaxDatastoreSecretBytes ||
      !PrintableWithoutSpace(d.secret_key)) {
    errors.push_back({"secret_key", "secret_key must be 1 to " +
                                        std::to_string(kMaxDatastoreSecretBytes) +
                                        " printable ASCII characters without spaces"});
  }
  return errors;
}

Result<std::vector<std::string>> DatastoreAliases(Database& sql, const std::string& project) {
  SOVAI_ASSIGN_OR_RETURN(Statement st,
                         sql.Prepare("SELECT alias FROM datastores WHERE project = ?1 "
                                     "ORDER BY alias"));
  st.Bind(1, project);
  std::vector<std::string> out;
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(st.ColumnText(0));
  }
  return out;
}

Result<Datastore> Datastores::Add(const std::string& project, const std::string& user,
                                  const NewDatastore& d) {
  SOVAI_CHECK(ValidateDatastoreAlias(d.alias).ok()) << "unvalidated alias " << d.alias;
  Datastore out{.project = project,
                .alias = base::AsciiToLower(d.alias),
                .type = d.type,
                .endpoint = d.endpoint,
                .region = d.region,
                .access_key = d.access_key,
                .created_by = user,
                .created_at_us = env_.NowUnixMicros()};
  // Sealed before the transaction: creating the master key writes a file.
  SOVAI_ASSIGN_OR_RETURN(SealedSecret sealed,
                         secrets_.Seal(d.secret_key, SecretContext(project, out.alias)));
  SOVAI_RETURN_IF_ERROR(db_.Write([&](Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> aliases, DatastoreAliases(sql, project));
    for (const std::string& a : aliases) {
      if (a == out.alias) {
        return base::AlreadyExistsError("the project already has a datastore '" + out.alias +
                                        "'; delete it first to register it again");
      }
    }
    if (static_cast<int64_t>(aliases.size()) >= kMaxDatastoresPerProject) {
      return base::FailedPreconditionError(
          "the project already has " + std::to_string(aliases.size()) +
          " datastores (the limit is " + std::to_string(kMaxDatastoresPerProject) +
          "); delete unused ones first");
    }
    SOVAI_ASSIGN_OR_RETURN(
        Statement st,
        sql.Prepare("INSERT INTO datastores(project, alias, type, endpoint, region, access_key, "
                    "secret_key_id, secret_sealed, created_by, created_at) VALUES (?1, ?2, ?3, "
                    "?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
    st.Bind(1, out.project).Bind(2, out.alias).Bind(3, out.type).Bind(4, out.endpoint);
    st.Bind(5, out.region).Bind(6, out.access_key).Bind(7, sealed.key_id);
    st.BindBlob(8, sealed.sealed).Bind(9, out.created_by).Bind(10, out.created_at_us);
    return st.Run();
  }));
  return out;
}

Result<Page<Datastore>> Datastores::List(const std::string& project, const PageRequest& page) {
  SOVAI_CHECK(page.limit >= 1 && page.limit <= kMaxPageSize) << page.limit;
  Page<Datastore> out;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(Statement st, sql.Prepare(std::string("SELECT ") + kColumns +
                                                     " FROM datastores WHERE project = ?1 AND "
                                                     "alias > ?2 ORDER BY alias LIMIT ?3"));
    st.Bind(1, project).Bind(2, base::AsciiToLower(page.after)).Bind(3, page.limit + 1);
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      out.items.push_back(ReadDatastore(st));
    }
    return Status();
  }));
  if (static_cast<int64_t>(out.items.size()) > page.limit) {
    out.items.pop_back();
    out.next_cursor = out.items.back().alias;
  }
  return out;
}

Result<Datastore> Datastores::Get(const std::string& project, std::string_view alias) {
  Datastore out;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(Statement st, LoadRow(sql, project, alias));
    out = ReadDatastore(st);
    return Status();
  }));
  return out;
}

Status Datastores::Delete(const std::string& project, std::string_view alias) {
  return db_.Write([&](Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(Statement st,
                           sql.Prepare("DELETE FROM datastores WHERE project = ?1 AND alias = ?2"));
    st.Bind(1, project).Bind(2, base::AsciiToLower(alias));
    SOVAI_RETURN_IF_ERROR(st.Run());
    if (sql.Changes() == 0) return NotFound(alias);
    return Status();
  });
}

Result<DatastoreCredentials> Datastores::Credentials(const std::string& project,
                                                     std::string_view alias) {
  DatastoreCredentials out;
  SealedSecret sealed;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(Statement st, LoadRow(sql, project, alias));
    out.datastore = ReadDatastore(st);
    sealed.key_id = st.ColumnText(8);
    sealed.sealed = st.ColumnText(9);
    return Status();
  }));
  auto secret = secrets_.Open(sealed, SecretContext(project, out.datastore.alias));
  if (!secret.ok()) {
    return secret.status().WithContext("the secret key of datastore '" + out.datastore.alias + "'");
  }
  out.secret_key = std::move(*secret);
  return out;
}

Result<std::vector<std::string>> Datastores::Aliases(const std::string& project) {
  std::vector<std::string> out;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(out, DatastoreAliases(sql, project));
    return Status();
  }));
  return out;
}

}  // namespace sovai::control
