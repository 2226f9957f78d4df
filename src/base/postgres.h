// PostgreSQL behind base::Database (sqlite.h, sql_backend.h), over libpq: code written for SQLite
// runs on a PostgreSQL connection unchanged, within the limits below.
//
//   SOVAI_ASSIGN_OR_RETURN(auto db, OpenPostgres("postgres://sovai@db.internal:5432/sovai"));
//   SOVAI_ASSIGN_OR_RETURN(auto st, db->Prepare("SELECT v FROM t WHERE k = ?"));  // SQLite SQL
//
// What is translated, for every statement (RewriteSqliteForPostgres):
//   * placeholders: `?` and `?N` become `$N` (numbered as SQLite numbers them: a bare `?` is one
//     more than the largest index so far); string literals, quoted identifiers, comments and
//     dollar-quoted bodies are left alone;
//   * `?N IS [NOT] NULL` tests a parameter of its own (bound to NULL or not as ?N is, typed text):
//     PostgreSQL types an untyped parameter at its first use and cannot type one from a NULL
//     test, so `?1 IS NULL OR project = ?1` would otherwise fail ("could not determine data type
//     of parameter $1");
//   * `user`, a column name to SQLite but a reserved word (CURRENT_USER) to PostgreSQL, is quoted.
// Parameters: Bind(int64) is sent as int8, Bind(text) as an untyped literal that the server types
// from its context (so `?1 IS NULL OR project = ?1` works), BindBlob as bytea in binary format,
// BindNull as an untyped NULL. Text must be valid UTF-8 without NUL bytes (InvalidArgument).
// Columns: ColumnText of a bytea column is its raw bytes; ColumnInt reads integers, numerics
// (SUM of a BIGINT is numeric) truncated, and booleans as 0/1.
// What is not translated: SQLite-only syntax (INSERT OR REPLACE/IGNORE, two-argument MAX/MIN,
// IFNULL, GLOB, PRAGMA, sqlite_master) fails with the server's error; write the portable form
// (INSERT ... ON CONFLICT, CASE, COALESCE). Semantics that differ and that callers rely on are
// the caller's: an error inside a transaction aborts it (every later statement fails until
// ROLLBACK), where SQLite rolls back only the failed statement.
//
// Statements: nothing is sent at Prepare; the first Step sends the statement with its parameters
// (one round trip, the unnamed prepared statement) and fetches every row, later Steps walk them.
// Changes() is the row count of the last INSERT/UPDATE/DELETE.
//
// Errors (SQLSTATE → code): class 23 (integrity: unique, foreign key, not null, check) →
// AlreadyExists, as SQLite's SQLITE_CONSTRAINT; 40001/40P01/55P03 (serialization, deadlock, lock
// not available), class 08 and 57P01-03 (connection, shutdown) and a lost connection →
// Unavailable; class 53 → ResourceExhausted; 42501 and class 28 (privileges, authentication) →
// PermissionDenied; 3D000 (no such database) → NotFound; anything else → Internal. Messages carry
// the server's message and the statement; never a password.
//
// Thread-safety: as SQLite's Database: one thread at a time per connection.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/sqlite.h"
#include "base/status.h"

namespace sovai::base {

// True for "postgres://..." and "postgresql://..." (the URI forms libpq accepts).
bool IsPostgresUrl(std::string_view location);

// `url` with its password, if any, replaced by "***" (the userinfo's and a `password=` query
// parameter's): what messages and logs may show.
std::string RedactPostgresUrl(std::string_view url);

struct PostgresOptions {
  int connect_timeout_s = 10;
  // How long a statement waits for a lock (lock_timeout) before failing with Unavailable, as
  // SQLite's busy timeout (sqlite.h DatabaseOptions). 0 = forever.
  int lock_timeout_ms = 10000;
  // Shown in pg_stat_activity.
  std::string application_name = "sovai";
};

// Connects to `url` (postgres://user[:password]@host[:port]/db[?param=value...]; a password may
// also come from PGPASSWORD or ~/.pgpass, as libpq reads them; the URL's parameters override
// `options`). The session speaks UTF-8, waits at most options.lock_timeout_ms for a lock, and its
// notices are discarded; a Reconnect sets it up the same way. Errors: Unavailable
// (unreachable, refused, timed out), PermissionDenied (authentication), NotFound (no such
// database), InvalidArgument (a malformed URL).
Result<std::unique_ptr<Database>> OpenPostgres(const std::string& url,
                                               const PostgresOptions& options = {});

// The statement rewrite described above, for tests and for callers that send SQL themselves.
struct PostgresSql {
  std::string text;
  int param_count = 0;  // the largest ?N of the caller's SQL
  // The parameters after those: $(param_count + 1 + i) is a NULL test of ?null_tests[i].
  std::vector<int> null_tests;
  // Whether ?N (index N - 1) still appears in `text` other than through a NULL test.
  std::vector<bool> referenced;
};
PostgresSql RewriteSqliteForPostgres(std::string_view sql);

// Schema translation of SQLite DDL (CREATE TABLE / INDEX, ALTER TABLE ... ADD COLUMN, and plain
// INSERT/UPDATE data steps) into PostgreSQL DDL of the same meaning:
//   INTEGER PRIMARY KEY [AUTOINCREMENT] → BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY
//       (an omitted key is assigned, as SQLite's rowid alias; mixing explicit and assigned keys in
//       one table is not supported);
//   INTEGER, INT → BIGINT (SQLite integers are 64-bit); BLOB → BYTEA; REAL, FLOAT → DOUBLE
//   PRECISION; a TEXT column → TEXT COLLATE "C" (SQLite compares and orders text bytewise).
// Constructs without a mechanical translation (CREATE TRIGGER, INSERT OR ..., REPLACE INTO,
// WITHOUT ROWID, PRAGMA) are refused with InvalidArgument naming them: such a migration needs a
// hand-written PostgreSQL version.
Result<std::string> TranslateSqliteDdlForPostgres(std::string_view ddl);

}  // namespace sovai::base
