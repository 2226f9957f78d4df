#include "base/sqlite.h"

#include <sqlite3.h>

#include "base/check.h"

namespace sovai::base {

namespace {

Status SqliteError(sqlite3* db, int rc, std::string_view what) {
  std::string message = std::string(what) + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  int primary = rc & 0xff;
  switch (primary) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return UnavailableError(message);
    case SQLITE_CONSTRAINT:
      return AlreadyExistsError(message);
    case SQLITE_FULL:
      return ResourceExhaustedError(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return DataLossError(message);
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return PermissionDeniedError(message);
    default:
      return InternalError(message);
  }
}

}  // namespace

Statement::Statement(std::unique_ptr<StatementBackend> backend) : backend_(std::move(backend)) {}

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept
    : stmt_(other.stmt_),
      db_(other.db_),
      bind_error_(std::move(other.bind_error_)),
      backend_(std::move(other.backend_)) {
  other.stmt_ = nullptr;
}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    if (stmt_) sqlite3_finalize(stmt_);
    stmt_ = other.stmt_;
    db_ = other.db_;
    bind_error_ = std::move(other.bind_error_);
    backend_ = std::move(other.backend_);
    other.stmt_ = nullptr;
  }
  return *this;
}

Status Statement::Error(int rc, std::string_view what) const {
  std::string context(what);
  if (const char* sql = sqlite3_sql(stmt_)) context += std::string(" [") + sql + "]";
  return SqliteError(db_, rc, context);
}

// The first bind error is kept and returned by the next Step (binds chain, so they return *this).
void Statement::KeepBindError(Status st) {
  if (!st.ok() && bind_error_.ok()) bind_error_ = std::move(st);
}

Statement& Statement::Bind(int index, int64_t value) {
  if (backend_) [[unlikely]] {
    KeepBindError(backend_->BindInt(index, value));
    return *this;
  }
  int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK && bind_error_.ok()) bind_error_ = Error(rc, "bind");
  return *this;
}

Statement& Statement::Bind(int index, std::string_view text) {
  if (backend_) [[unlikely]] {
    KeepBindError(backend_->BindText(index, text));
    return *this;
  }
  int rc =
      sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK && bind_error_.ok()) bind_error_ = Error(rc, "bind");
  return *this;
}

Statement& Statement::BindBlob(int index, std::string_view bytes) {
  if (backend_) [[unlikely]] {
    KeepBindError(backend_->BindBlob(index, bytes));
    return *this;
  }
  int rc = sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK && bind_error_.ok()) bind_error_ = Error(rc, "bind");
  return *this;
}

Statement& Statement::BindNull(int index) {
  if (backend_) [[unlikely]] {
    KeepBindError(backend_->BindNull(index));
    return *this;
  }
  int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK && bind_error_.ok()) bind_error_ = Error(rc, "bind");
  return *this;
}

Statement& Statement::BindOptional(int index, const std::optional<std::string>& value) {
  return value ? Bind(index, std::string_view(*value)) : BindNull(index);
}

Result<bool> Statement::Step() {
  if (!bind_error_.ok()) return bind_error_;
  if (backend_) [[unlikely]] {
    return backend_->Step();
  }
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  Status st = Error(rc, "step");
  sqlite3_reset(stmt_);
  return st;
}

Status Statement::Run() {
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status();
  }
}

void Statement::Reset(bool clear_bindings) {
  bind_error_ = Status();
  if (backend_) [[unlikely]] {
    backend_->Reset(clear_bindings);
    return;
  }
  sqlite3_reset(stmt_);
  if (clear_bindings) sqlite3_clear_bindings(stmt_);
}

bool Statement::ColumnIsNull(int col) const {
  if (backend_) [[unlikely]] {
    return backend_->ColumnIsNull(col);
  }
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

int64_t Statement::ColumnInt(int col) const {
  if (backend_) [[unlikely]] {
    return backend_->ColumnInt(col);
  }
  return sqlite3_column_int64(stmt_, col);
}

std::string Statement::ColumnText(int col) const {
  if (backend_) [[unlikely]] {
    return backend_->ColumnText(col);
  }
  const void* data = sqlite3_column_blob(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  if (data == nullptr || n <= 0) return {};
  return std::string(static_cast<const char*>(data), static_cast<size_t>(n));
}

Database::Database(std::unique_ptr<DatabaseBackend> backend) : backend_(std::move(backend)) {}

std::unique_ptr<Database> Database::FromBackend(std::unique_ptr<DatabaseBackend> backend) {
  SOVAI_CHECK(backend != nullptr);
  return std::unique_ptr<Database>(new Database(std::move(backend)));
}

Database::~Database() {
  if (db_) sqlite3_close_v2(db_);
}

Result<std::unique_ptr<Database>> Database::Open(const std::string& path,
                                                 const DatabaseOptions& options) {
  sqlite3* raw = nullptr;
  int flags =
      SQLITE_OPEN_NOMUTEX |
      (options.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  if (rc != SQLITE_OK) {
    Status st = SqliteError(raw, rc, "opening database '" + path + "'");
    sqlite3_close_v2(raw);
    return st;
  }
  std::unique_ptr<Database> db(new Database(raw));
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);
  if (options.wal && !options.read_only) {
    SOVAI_RETURN_IF_ERROR(db->Exec("PRAGMA journal_mode=WAL").WithContext(path));
  }
  SOVAI_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON"));
  if (options.mmap_size_bytes > 0) {
    SOVAI_RETURN_IF_ERROR(
        db->Exec("PRAGMA mmap_size=" + std::to_string(options.mmap_size_bytes)).WithContext(path));
  }
  return db;
}

Status Database::Exec(std::string_view sql) {
  if (backend_) return backend_->Exec(sql);
  char* err = nullptr;
  std::string copy(sql);
  int rc = sqlite3_exec(db_, copy.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string message = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    return SqliteError(nullptr, rc, message + " [" + copy.substr(0, 200) + "]");
  }
  return Status();
}

Result<Statement> Database::Prepare(std::string_view sql) {
  if (backend_) [[unlikely]] {
    SOVAI_ASSIGN_OR_RETURN(auto statement, backend_->Prepare(sql));
    return Statement(std::move(statement));
  }
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db_, rc, "prepare [" + std::string(sql) + "]");
  return Statement(stmt, db_);
}

int64_t Database::Changes() const {
  return backend_ ? backend_->Changes() : sqlite3_changes64(db_);
}

int64_t Database::LastInsertRowId() const {
  SOVAI_CHECK(backend_ == nullptr) << "LastInsertRowId is SQLite's; use RETURNING";
  return sqlite3_last_insert_rowid(db_);
}

Result<int64_t> Database::UserVersion() {
  if (backend_) return UnimplementedError("PRAGMA user_version is SQLite's");
  SOVAI_ASSIGN_OR_RETURN(Statement st, Prepare("PRAGMA user_version"));
  SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
  return row ? st.ColumnInt(0) : 0;
}

}  // namespace sovai::base
