// The control database: `<data-dir>/control.db`, SQLite in WAL mode, schema kept by numbered
// migrations (migrations.h).
//
//   SOVAI_ASSIGN_OR_RETURN(auto db, ControlDb::Open(JoinPath(data_dir, kControlDbFile)));
//   SOVAI_RETURN_IF_ERROR(db->Write([&](base::Database& sql) -> base::Status {
//     ... statements; returning an error rolls all of them back ...
//   }));
//
// Open() creates the file when absent, creates `schema_migrations(version, name, applied_at)`,
// and applies every migration the database lacks, each in its own transaction with its row in
// schema_migrations (a crash between two leaves a database at a valid, older version that the
// next start finishes). Errors of Open:
//   FailedPrecondition  the database was migrated by a newer sovai (its version is above the
//                       binary's), or its recorded history disagrees with the binary's list
//                       (a migration has another name / versions have a gap);
//   the migration's SQL error, with its version and name (nothing of it stays applied);
//   open errors of base::Database (PermissionDenied, DataLoss for a file that is not SQLite).
//
// Thread-safety: all methods may be called from any thread. One connection serves everything;
// `mu_` serializes its use, so a Write() is atomic with respect to every other Read()/Write() of
// this process. The callback must not call back into the same ControlDb (it would deadlock).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>

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

  static base::Result<std::unique_ptr<ControlDb>> Open(const std::string& path,
                                                       const ControlDbOptions& options = {});

  ControlDb(const ControlDb&) = delete;
  ControlDb& operator=(const ControlDb&) = delete;

  // Runs `fn` in one write transaction (BEGIN IMMEDIATE): committed when `fn` returns OK, rolled
  // back otherwise (and when COMMIT fails). Returns `fn`'s error or the commit's.
  base::Status Write(const Fn& fn);
  // Runs `fn` in a read transaction, so that several SELECTs see one snapshot. `fn` must not write.
  base::Status Read(const Fn& fn);

  // The version the database is at after Open (= the number of migrations known).
  int64_t schema_version() const { return schema_version_; }
  const std::string& path() const { return path_; }

 private:
  ControlDb(std::string path, std::unique_ptr<base::Database> db, int64_t version)
      : path_(std::move(path)), db_(std::move(db)), schema_version_(version) {}
  base::Status InTransaction(const char* begin, const Fn& fn);

  const std::string path_;
  std::mutex mu_;                       // guards db_ (a connection is single-threaded)
  std::unique_ptr<base::Database> db_;  // guarded by mu_
  const int64_t schema_version_;
};

// Reads the version recorded in schema_migrations (0 for a database without the table).
base::Result<int64_t> ReadSchemaVersion(base::Database& db);

}  // namespace sovai::control
