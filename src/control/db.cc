#include "control/db.h"

#include <string_view>
#include <utility>
#include <vector>

#include "base/postgres.h"

namespace sovai::control {

namespace {

struct AppliedMigration {
  int64_t version = 0;
  std::string name;
};

base::Result<std::vector<AppliedMigration>> ReadHistory(base::Database& db) {
  SOVAI_ASSIGN_OR_RETURN(
      auto st, db.Prepare("SELECT version, name FROM schema_migrations ORDER BY version"));
  std::vector<AppliedMigration> out;
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back({st.ColumnInt(0), st.ColumnText(1)});
  }
  return out;
}

// Checks that the recorded history is a prefix of `known` (same versions, same names), so that a
// database is never run by a binary that would misread it.
base::Status CheckHistory(const std::string& path, const std::vector<AppliedMigration>& applied,
                          std::span<const Migration> known) {
  const int64_t known_version = static_cast<int64_t>(known.size());
  if (!applied.empty() && applied.back().version > known_version) {
    return base::FailedPreconditionError(
        "control database " + path + " is at schema version " +
        std::to_string(applied.back().version) + ", but this sovai knows versions up to " +
        std::to_string(known_version) +
        ": it was written by a newer sovai. Run that newer version (downgrades are not "
        "supported) or restore a backup taken before the upgrade");
  }
  for (size_t i = 0; i < applied.size(); ++i) {
    const int64_t expected = static_cast<int64_t>(i) + 1;
    if (applied[i].version != expected) {
      return base::FailedPreconditionError(
          "control database " + path + " has a gap in schema_migrations: version " +
          std::to_string(expected) +
          " is missing; the file was edited by hand or is damaged, "
          "restore a backup");
    }
    if (applied[i].name != known[i].name) {
      return base::FailedPreconditionError(
          "control database " + path + " recorded migration " + std::to_string(expected) + " as '" +
          applied[i].name + "' but this sovai calls it '" + std::string(known[i].name) +
          "': the database comes from an incompatible build; restore a backup");
    }
  }
  return base::Status();
}

// The transaction-scoped lock every PostgreSQL Write and migration takes: one key per database
// and schema (hashtextextended is the server's own 64-bit string hash).
constexpr char kPostgresBeginWrite[] =
    "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock(hashtextextended("
    "'sovai.control.write:' || COALESCE(current_schema(), ''), 0))";
constexpr char kPostgresBeginRead[] = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
constexpr char kSqliteBeginWrite[] = "BEGIN IMMEDIATE";
constexpr char kSqliteBeginRead[] = "BEGIN DEFERRED";

const char* BeginWrite(base::SqlDialect dialect) {
  return dialect == base::SqlDialect::kPostgres ? kPostgresBeginWrite : kSqliteBeginWrite;
}

const char* BeginRead(base::SqlDialect dialect) {
  return dialect == base::SqlDialect::kPostgres ? kPostgresBeginRead : kSqliteBeginRead;
}

// The SQL of migration `m` for `dialect`.
base::Result<std::string> MigrationSql(const Migration& m, base::SqlDialect dialect) {
  if (dialect == base::SqlDialect::kSqlite) return std::string(m.sql);
  if (!m.postgres_sql.empty()) return std::string(m.postgres_sql);
  return base::TranslateSqliteDdlForPostgres(m.sql);
}

}  // namespace

base::Result<std::unique_ptr<base::Database>> OpenStateDatabase(const std::string& location) {
  if (base::IsPostgresUrl(location)) return base::OpenPostgres(location);
  return base::Database::Open(location);
}

base::Result<bool> TableExists(base::Database& db, std::string_view name) {
  const char* sql =
      db.dialect() == base::SqlDialect::kPostgres
          ? "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() AND "
            "table_name = ?"
          : "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?";
  SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(sql));
  st.Bind(1, name);
  return st.Step();
}

base::Result<int64_t> ReadSchemaVersion(base::Database& db) {
  SOVAI_ASSIGN_OR_RETURN(bool has_table, TableExists(db, "schema_migrations"));
  if (!has_table) return int64_t{0};
  SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT COALESCE(MAX(version), 0) FROM "
                                             "schema_migrations"));
  SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.ColumnInt(0) : int64_t{0};
}

base::Result<std::unique_ptr<ControlDb>> ControlDb::Open(const std::string& location,
                                                         const ControlDbOptions& options) {
  base::Env& env = options.env ? *options.env : base::Env::Default();
  std::span<const Migration> migrations =
      options.migrations.empty() ? ControlMigrations() : options.migrations;
  const std::string path =
      base::IsPostgresUrl(location) ? base::RedactPostgresUrl(location) : location;
  SOVAI_ASSIGN_OR_RETURN(auto db, OpenStateDatabase(location));
  const base::SqlDialect dialect = db->dialect();

  // Refuse a newer database before writing anything to it (not even the bookkeeping table).
  SOVAI_ASSIGN_OR_RETURN(int64_t version, ReadSchemaVersion(*db));
  if (version > 0) {
    SOVAI_ASSIGN_OR_RETURN(auto history, ReadHistory(*db));
    SOVAI_RETURN_IF_ERROR(CheckHistory(path, history, migrations));
  }
  if (dialect == base::SqlDialect::kPostgres) {
    // Under the write lock: two servers starting at once would race on CREATE TABLE.
    SOVAI_RETURN_IF_ERROR(db->Exec(std::string(kPostgresBeginWrite) +
                                   "; CREATE TABLE IF NOT EXISTS schema_migrations (version "
                                   "BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT "
                                   "NOT NULL); COMMIT"));
  } else {
    SOVAI_RETURN_IF_ERROR(
        db->Exec("CREATE TABLE IF NOT EXISTS schema_migrations ("
                 "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)"));
  }

  for (size_t i = 0; i < migrations.size(); ++i) {
    const int64_t target = static_cast<int64_t>(i) + 1;
    if (target <= version) continue;
    const Migration& m = migrations[i];
    const std::string what = "applying control database migration " + std::to_string(target) +
                             " '" + std::string(m.name) + "' to " + path;
    auto sql = MigrationSql(m, dialect);
    if (!sql.ok()) return sql.status().WithContext(what);
    SOVAI_RETURN_IF_ERROR(db->Exec(BeginWrite(dialect)).WithContext(what));
    base::Status st = [&]() -> base::Status {
      // Another process may have migrated between our read and our lock; re-read under it.
      SOVAI_ASSIGN_OR_RETURN(int64_t now_version, ReadSchemaVersion(*db));
      if (now_version >= target) return base::Status();
      if (now_version != target - 1) {
        return base::FailedPreconditionError("schema version moved to " +
                                             std::to_string(now_version) + " while migrating");
      }
      SOVAI_RETURN_IF_ERROR(db->Exec(*sql));
      SOVAI_ASSIGN_OR_RETURN(auto insert, db->Prepare("INSERT INTO schema_migrations(version, "
                                                      "name, applied_at) VALUES (?, ?, ?)"));
      insert.Bind(1, target).Bind(2, m.name).Bind(3, env.NowUnixMicros());
      SOVAI_RETURN_IF_ERROR(insert.Run());
      return db->Exec("COMMIT");
    }();
    if (!st.ok()) {
      db->Exec("ROLLBACK").IgnoreError();  // fails harmlessly when COMMIT already ended it
      return st.WithContext(what);
    }
    version = target;
  }
  return std::unique_ptr<ControlDb>(new ControlDb(location, std::move(db), version));
}

ControlDb::ControlDb(std::string location, std::unique_ptr<base::Database> db, int64_t version)
    : path_(base::IsPostgresUrl(location) ? base::RedactPostgresUrl(location) : location),
      location_(std::move(location)),
      dialect_(db->dialect()),
      db_(std::move(db)),
      schema_version_(version) {}

base::Status ControlDb::InTransaction(const char* begin, const Fn& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  base::Status began = db_->Exec(begin);
  if (!began.ok() && db_->ConnectionLost()) {
    // The server restarted or the network dropped us since the last call: once more, anew.
    SOVAI_RETURN_IF_ERROR(db_->Reconnect().WithContext(path_));
    began = db_->Exec(begin);
  }
  SOVAI_RETURN_IF_ERROR(began);
  base::Status st = fn(*db_);
  if (st.ok()) st = db_->Exec("COMMIT");
  if (!st.ok()) db_->Exec("ROLLBACK").IgnoreError();
  return st;
}

base::Status ControlDb::Write(const Fn& fn) { return InTransaction(BeginWrite(dialect_), fn); }

base::Status ControlDb::Read(const Fn& fn) { return InTransaction(BeginRead(dialect_), fn); }

base::Result<bool> ControlDb::TryAcquireLeadership(std::string_view name) {
  std::lock_guard<std::mutex> lock(leader_mu_);
  if (dialect_ == base::SqlDialect::kSqlite) {
    leading_.emplace(name);
    return true;
  }
  if (leader_db_ && leading_.contains(name)) {
    // Held: still ours while the session that holds it answers.
    if (leader_db_->Exec("SELECT 1").ok()) return true;
  }
  if (leader_db_ && leader_db_->ConnectionLost()) {
    // The session ended, and every lock it held with it.
    leading_.clear();
    leader_db_.reset();
  }
  if (!leader_db_) {
    SOVAI_ASSIGN_OR_RETURN(leader_db_, base::OpenPostgres(location_));
  }
  SOVAI_ASSIGN_OR_RETURN(
      auto st, leader_db_->Prepare("SELECT pg_try_advisory_lock(hashtextextended('sovai.leader:' "
                                   "|| COALESCE(current_schema(), '') || ':' || ?, 0))"));
  st.Bind(1, name);
  SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
  // Session locks stack: take it once per name, so that closing the session frees it.
  const bool acquired = row && st.ColumnInt(0) != 0;
  if (acquired) {
    leading_.emplace(name);
  } else {
    leading_.erase(std::string(name));
  }
  return acquired;
}

bool ControlDb::IsLeader(std::string_view name) {
  std::lock_guard<std::mutex> lock(leader_mu_);
  return leading_.contains(name);
}

}  // namespace sovai::control
