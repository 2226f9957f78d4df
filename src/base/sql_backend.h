// The seam behind base::Database and base::Statement (sqlite.h) for SQL engines other than the
// built-in SQLite: an engine implements DatabaseBackend and StatementBackend, and
// Database::FromBackend wraps it, so that code written against Database/Statement runs on it
// unchanged. The PostgreSQL engine (postgres.h) is the one implementation.
//
// Why a seam inside the existing classes rather than a second interface: every control-plane module
// writes its SQL against `base::Database&` and `base::Statement` values, and the object store runs
// SQLite on a hot path. Keeping the classes concrete and SQLite-first leaves the object store's
// path as it was (one null-pointer test per call, no allocation), while the control plane's
// callbacks reach another engine through the same names.
//
// Contract of a backend (it mirrors SQLite's, which callers were written for): parameters are
// 1-based and an unbound one is NULL; Step returns true per row and false when done, and a Step
// after done runs the statement again; Reset rewinds (and unbinds when asked); a column of a row
// that is not there reads as NULL / 0 / "". Errors use the codes of sqlite.h (constraint →
// AlreadyExists, lock/busy/lost connection → Unavailable, ...).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace sovai::base {

// The SQL an engine speaks. Callers write SQLite SQL; code that must differ (catalog queries,
// DDL, locks) asks Database::dialect().
enum class SqlDialect { kSqlite, kPostgres };

class StatementBackend {
 public:
  virtual ~StatementBackend() = default;
  virtual Status BindInt(int index, int64_t value) = 0;
  virtual Status BindText(int index, std::string_view text) = 0;
  virtual Status BindBlob(int index, std::string_view bytes) = 0;
  virtual Status BindNull(int index) = 0;
  virtual Result<bool> Step() = 0;
  virtual void Reset(bool clear_bindings) = 0;
  virtual bool ColumnIsNull(int col) const = 0;
  virtual int64_t ColumnInt(int col) const = 0;
  // Text or blob bytes.
  virtual std::string ColumnText(int col) const = 0;
};

class DatabaseBackend {
 public:
  virtual ~DatabaseBackend() = default;
  virtual SqlDialect dialect() const = 0;
  virtual Status Exec(std::string_view sql) = 0;
  virtual Result<std::unique_ptr<StatementBackend>> Prepare(std::string_view sql) = 0;
  // Rows changed by the last INSERT/UPDATE/DELETE.
  virtual int64_t Changes() const = 0;
  // True once the engine knows its connection is gone (a server restart, a network cut).
  virtual bool ConnectionLost() const = 0;
  // Opens the connection again with the same parameters (anything of the old session is gone).
  virtual Status Reconnect() = 0;
};

}  // namespace sovai::base
