// A thin RAII layer over SQLite 3: connections, prepared statements, transactions, errors as
// Status. The control plane and the object store keep their state in SQLite files in WAL mode.
//
//   SOVAI_ASSIGN_OR_RETURN(auto db, Database::Open(path));
//   SOVAI_RETURN_IF_ERROR(db->Exec("CREATE TABLE IF NOT EXISTS t(k TEXT PRIMARY KEY, v INTEGER)"));
//   SOVAI_ASSIGN_OR_RETURN(auto st, db->Prepare("SELECT v FROM t WHERE k = ?"));
//   st.Bind(1, "key");
//   SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
//   if (row) int64_t v = st.ColumnInt(0);
//
// Thread-safety: a Database (and its statements) is used by one thread at a time; open one
// connection per thread (WAL lets readers run alongside the one writer).
//
// Other engines: a Database may also wrap another SQL engine (Database::FromBackend,
// sql_backend.h; PostgreSQL in postgres.h). Callers keep writing SQLite SQL against the same
// classes; dialect() tells the engine. The SQLite path is the classes' own code (no virtual call,
// no allocation per Bind/Step): a wrapped engine costs SQLite users one null-pointer test per call.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/sql_backend.h"
#include "base/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace sovai::base {

class Statement {
 public:
  Statement() = default;
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are 1-based. Text and blobs are copied (SQLITE_TRANSIENT).
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, std::string_view text);
  Statement& Bind(int index, const char* text) { return Bind(index, std::string_view(text)); }
  Statement& BindBlob(int index, std::string_view bytes);
  Statement& BindNull(int index);
  // Binds `value` or NULL.
  Statement& BindOptional(int index, const std::optional<std::string>& value);

  // Runs one step: true when a row is available, false when done.
  Result<bool> Step();
  // Steps to completion, for statements without result rows.
  Status Run();
  // Resets for another execution (keeps bindings unless `clear_bindings`).
  void Reset(bool clear_bindings = true);

  // Columns are 0-based.
  bool ColumnIsNull(int col) const;
  int64_t ColumnInt(int col) const;
  // Text or blob bytes (copied).
  std::string ColumnText(int col) const;

 private:
  friend class Database;
  Statement(sqlite3_stmt* stmt, sqlite3* db) : stmt_(stmt), db_(db) {}
  explicit Statement(std::unique_ptr<StatementBackend> backend);
  Status Error(int rc, std::string_view what) const;
  void KeepBindError(Status st);
  sqlite3_stmt* stmt_ = nullptr;
  sqlite3* db_ = nullptr;
  Status bind_error_;
  // Non-null: a statement of another engine, and stmt_/db_ are unused.
  std::unique_ptr<StatementBackend> backend_;
};

struct DatabaseOptions {
  // WAL journal, synchronous=FULL (a commit is durable when it returns), foreign keys on.
  bool wal = true;
  bool read_only = false;
  // How long a statement waits for a lock held by another connection.
  int busy_timeout_ms = 10000;
  // Bytes of the database file read through a shared memory map instead of read() into the
  // connection's own page cache (PRAGMA mmap_size; 0: off). Many connections reading the same
  // rows then share the kernel's page cache instead of each copying pages in; writes still go
  // through write(), so a crash is no different.
  int64_t mmap_size_bytes = 0;
};

class Database {
 public:
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Opens (creating when absent, unless read_only) the SQLite database file at `path`.
  static Result<std::unique_ptr<Database>> Open(const std::string& path,
                                                const DatabaseOptions& options = {});
  // Wraps a connection of another engine (sql_backend.h).
  static std::unique_ptr<Database> FromBackend(std::unique_ptr<DatabaseBackend> backend);

  SqlDialect dialect() const { return backend_ ? backend_->dialect() : SqlDialect::kSqlite; }

  // Runs one or more statements without parameters.
  Status Exec(std::string_view sql);
  Result<Statement> Prepare(std::string_view sql);
  // Rows changed by the last INSERT/UPDATE/DELETE.
  int64_t Changes() const;
  // SQLite only (a bug on another engine: SOVAI_CHECK).
  int64_t LastInsertRowId() const;
  // PRAGMA user_version. SQLite only (Unimplemented on another engine).
  Result<int64_t> UserVersion();

  // Whether the connection is known to be gone, and opening it again with the same parameters.
  // A SQLite file is never lost: false, and Reconnect does nothing.
  bool ConnectionLost() const { return backend_ && backend_->ConnectionLost(); }
  Status Reconnect() { return backend_ ? backend_->Reconnect() : Status(); }

 private:
  explicit Database(sqlite3* db) : db_(db) {}
  explicit Database(std::unique_ptr<DatabaseBackend> backend);
  sqlite3* db_ = nullptr;
  // Non-null: another engine's connection, and db_ is null.
  std::unique_ptr<DatabaseBackend> backend_;
};

}  // namespace sovai::base
