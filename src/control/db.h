// The control database: `<data-dir>/control.db`, SQLite in WAL mode, or a PostgreSQL database
// (`sovai server --state postgres://user@host:port/db`) that several servers share; schema kept
// by numbered migrations (migrations.h).
//
//   SOVAI_ASSIGN_OR_RETURN(auto db, ControlDb::Open(JoinPath(data_dir, kControlDbFile)));
//   SOVAI_ASSIGN_OR_RETURN(auto db, ControlDb::Open("postgres://sovai@db.internal:5432/sovai"));
//   SOVAI_RETURN_IF_ERROR(db->Write([&](base::Database& sql) -> base::Status {
//     ... statements; returning an error rolls all of them back ...
//   }));
//
// The engines. Callers write SQLite SQL (`?`/`?N` placeholders, portable upserts
// `INSERT ... ON CONFLICT`, no INSERT OR REPLACE) against base::Database, whatever the engine;
// on PostgreSQL it is rewritten per statement (base/postgres.h says how, and what is not).
// `location` is a file path (SQLite) or a postgres:// / postgresql:// URL (PostgreSQL; the
// password may be in the URL, PGPASSWORD or ~/.pgpass; messages and path() never show it).
// On PostgreSQL a failed statement ends its transaction (every later statement of the callback
// fails): a callback returns the first error, as every caller does today.
//
// Open() creates the file when absent, creates `schema_migrations(version, name, applied_at)`,
// and applies every migration the database lacks, each in its own transaction with its row in
// schema_migrations (a crash between two leaves a database at a valid, older version that the
// next start finishes). Errors of Open:
//   FailedPrecondition  the database was migrated by a newer sovai (its version is above the
//                       binary's), or its recorded history disagrees with the binary's list
//                       (a migration has another name / versions have a gap);
//   the migration's SQL error, with its version and name (nothing of it stays applied);
//   open errors of base::Database (PermissionDenied, DataLoss for a file that is not SQLite) and of
//   base::OpenPostgres (Unavailable, PermissionDenied, NotFound, InvalidArgument).
// On PostgreSQL, a migration runs its `postgres_sql` when it has one, else its SQLite DDL through
// base::TranslateSqliteDdlForPostgres (an untranslatable one fails Open, InvalidArgument).
//
// Transactions on PostgreSQL (one database, several server processes):
//   Write = BEGIN (READ COMMITTED) + pg_advisory_xact_lock on one key per database and schema:
//       the Writes of every process run one at a time, as SQLite's BEGIN IMMEDIATE makes them
//       (each statement then sees every earlier Write, so read-modify-write in one Write is
//       exact). The callback runs once: no serialization failures to retry, no side effects run
//       twice. The lock is held until COMMIT/ROLLBACK; Writes are short, as on SQLite, and one
//       that waits for it longer than 10 s (lock_timeout, base/postgres.h) fails with
//       Unavailable, as SQLite's busy timeout does.
//   Read = BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY: one snapshot, no lock, never waits
//       for a Write.
//   Migrations take the same lock, so two servers starting together migrate once.
//   A lost connection (server restart, network cut) fails the call in flight with Unavailable;
//   the next Write/Read reconnects once before giving up (Unavailable).
//
// Leadership: work that exactly one server of a shared database may do (the job scheduler) runs
// where TryAcquireLeadership(name) returned true. On PostgreSQL that is a session-level
// pg_try_advisory_lock (key: name and schema) on a connection of its own, held until this
// ControlDb is destroyed or that connection is lost (the server then releases the lock and
// another process may take it). The leader calls TryAcquireLeadership again before each round of
// such work: while the lock is held it returns true after one round trip that shows the session
// alive; once the session was lost it reconnects and tries to take the lock again, and returns
// whether that worked. On SQLite the file belongs to one process (the data-dir lock), so it is
// always true.
//
// Thread-safety: all methods may be called from any thread. One connection serves Read/Write;
// `mu_` serializes its use, so a Write() is atomic with respect to every other Read()/Write() of
// this process. The callback must not call back into the same ControlDb (it would deadlock).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "base/env.h"
#include "base/sqlite.h"
#include "base/status.h"
#include "control/migrations.h"

namespace sovai::control {

inline constexpr char kControlDbFile[] = "control.db";

struct ControlDbOptions {
  // Clock for schema_migrations.applied_at. nullptr = base::Env::Default().
  base::Env* env = nullptr;
  // The schema history; tests pass their own lists. Empty span = ControlMigrations().
  std::span<const Migration> migrations;
};

class ControlDb {
 public:
  using Fn = std::function<base::Status(base::Database&)>;

  // `location`: a SQLite file path or a PostgreSQL URL (see above).
  static base::Result<std::unique_ptr<ControlDb>> Open(const std::string& location,
                                                       const ControlDbOptions& options = {});

  ControlDb(const ControlDb&) = delete;
  ControlDb& operator=(const ControlDb&) = delete;

  // Runs `fn` in one write transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL: see above):
  // committed when `fn` returns OK, rolled back otherwise (and when COMMIT fails). Returns `fn`'s
  // error or the commit's.
  base::Status Write(const Fn& fn);
  // Runs `fn` in a read transaction, so that several SELECTs see one snapshot. `fn` must not write.
  base::Status Read(const Fn& fn);

  // Whether this process leads for `name` (see above). Errors: those of connecting to PostgreSQL
  // (leadership is then not held).
  base::Result<bool> TryAcquireLeadership(std::string_view name);
  // Whether the last TryAcquireLeadership(name) returned true and the hold was not lost since
  // (as far as this process knows without asking the server: a leader re-checks through
  // TryAcquireLeadership).
  bool IsLeader(std::string_view name);

  // The version the database is at after Open (= the number of migrations known).
  int64_t schema_version() const { return schema_version_; }
  // The file path, or the URL without its password: for messages.
  const std::string& path() const { return path_; }
  base::SqlDialect dialect() const { return dialect_; }

 private:
  ControlDb(std::string location, std::unique_ptr<base::Database> db, int64_t version);
  base::Status InTransaction(const char* begin, const Fn& fn);

  const std::string path_;      // redacted location
  const std::string location_;  // as given (the URL may hold a password): for reconnecting
  const base::SqlDialect dialect_;
  std::mutex mu_;                       // guards db_ (a connection is single-threaded)
  std::unique_ptr<base::Database> db_;  // guarded by mu_
  const int64_t schema_version_;

  std::mutex leader_mu_;                       // guards leader_db_ and leading_
  std::unique_ptr<base::Database> leader_db_;  // PostgreSQL: the session holding the locks
  std::set<std::string, std::less<>> leading_;
};

// Opens the database at `location` (a SQLite file path or a PostgreSQL URL) without migrating it:
// for tools and tests that look at a control database as another process would.
base::Result<std::unique_ptr<base::Database>> OpenStateDatabase(const std::string& location);

// Reads the version recorded in schema_migrations (0 for a database without the table).
base::Result<int64_t> ReadSchemaVersion(base::Database& db);

// Whether the table `name` exists (on PostgreSQL: in the current schema).
base::Result<bool> TableExists(base::Database& db, std::string_view name);

}  // namespace sovai::control
