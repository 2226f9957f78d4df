#include "control/db.h"

#include <string_view>
#include <utility>
#include <vector>

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

}  // namespace

base::Result<int64_t> ReadSchemaVersion(base::Database& db) {
  SOVAI_ASSIGN_OR_RETURN(
      auto exists,
      db.Prepare(
          "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"));
  SOVAI_ASSIGN_OR_RETURN(bool has_table, exists.Step());
  if (!has_table) return int64_t{0};
  SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT COALESCE(MAX(version), 0) FROM "
                                             "schema_migrations"));
  SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.ColumnInt(0) : int64_t{0};
}

base::Result<std::unique_ptr<ControlDb>> ControlDb::Open(const std::string& path,
                                                         const ControlDbOptions& options) {
  base::Env& env = options.env ? *options.env : base::Env::Default();
  std::span<const Migration> migrations =
      options.migrations.empty() ? ControlMigrations() : options.migrations;
  SOVAI_ASSIGN_OR_RETURN(auto db, base::Database::Open(path));

  // Refuse a newer database before writing anything to it (not even the bookkeeping table).
  SOVAI_ASSIGN_OR_RETURN(int64_t version, ReadSchemaVersion(*db));
  if (version > 0) {
    SOVAI_ASSIGN_OR_RETURN(auto history, ReadHistory(*db));
    SOVAI_RETURN_IF_ERROR(CheckHistory(path, history, migrations));
  }
  SOVAI_RETURN_IF_ERROR(
      db->Exec("CREATE TABLE IF NOT EXISTS schema_migrations ("
               "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)"));

  for (size_t i = 0; i < migrations.size(); ++i) {
    const int64_t target = static_cast<int64_t>(i) + 1;
    if (target <= version) continue;
    const Migration& m = migrations[i];
    const std::string what = "applying control database migration " + std::to_string(target) +
                             " '" + std::string(m.name) + "' to " + path;
    SOVAI_RETURN_IF_ERROR(db->Exec("BEGIN IMMEDIATE").WithContext(what));
    base::Status st = [&]() -> base::Status {
      // Another process may have migrated between our read and our lock; re-read under it.
      SOVAI_ASSIGN_OR_RETURN(int64_t now_version, ReadSchemaVersion(*db));
      if (now_version >= target) return base::Status();
      if (now_version != target - 1) {
        return base::FailedPreconditionError("schema version moved to " +
                                             std::to_string(now_version) + " while migrating");
      }
      SOVAI_RETURN_IF_ERROR(db->Exec(m.sql));
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
  return std::unique_ptr<ControlDb>(new ControlDb(path, std::move(db), version));
}

base::Status ControlDb::InTransaction(const char* begin, const Fn& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  SOVAI_RETURN_IF_ERROR(db_->Exec(begin));
  base::Status st = fn(*db_);
  if (st.ok()) st = db_->Exec("COMMIT");
  if (!st.ok()) db_->Exec("ROLLBACK").IgnoreError();
  return st;
}

base::Status ControlDb::Write(const Fn& fn) { return InTransaction("BEGIN IMMEDIATE", fn); }

base::Status ControlDb::Read(const Fn& fn) { return InTransaction("BEGIN DEFERRED", fn); }

}  // namespace sovai::control
