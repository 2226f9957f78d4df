#include "base/postgres.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "base/check.h"

namespace sovai::base {

namespace {

// Type OIDs of pg_type (stable across PostgreSQL versions).
constexpr Oid kBoolOid = 16;
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kTextOid = 25;

// ---------------------------------------------------------------------------------------------
// A lexer that knows just enough SQL to leave literals, quoted names and comments alone.

enum class TokenKind {
  kSpace,
  kComment,
  kString,        // '...'
  kQuotedIdent,   // "..."
  kDollarString,  // $tag$...$tag$ (PostgreSQL function bodies)
  kWord,          // identifiers, keywords, numbers
  kParam,         // ? or ?N
  kOther,         // any other single character
};

struct Token {
  TokenKind kind;
  std::string_view text;
};

bool IsWordByte(unsigned char c) { return std::isalnum(c) || c == '_' || c == '$' || c >= 0x80; }

bool IsWordStart(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

// The end of a quoted run starting at `start` (the opening quote), where a doubled quote is an
// escaped one; the end of the text when unterminated.
size_t QuotedEnd(std::string_view sql, size_t start, char quote) {
  size_t i = start + 1;
  while (i < sql.size()) {
    if (sql[i] == quote) {
      if (i + 1 < sql.size() && sql[i + 1] == quote) {
        i += 2;
        continue;
      }
      return i + 1;
    }
    ++i;
  }
  return sql.size();
}

// The length of a dollar-quote tag ("$$", "$body$") at `start`, or 0 when there is none.
size_t DollarTagLength(std::string_view sql, size_t start) {
  size_t i = start + 1;
  if (i < sql.size() && std::isdigit(static_cast<unsigned char>(sql[i]))) return 0;  // $1
  while (i < sql.size() && (std::isalnum(static_cast<unsigned char>(sql[i])) || sql[i] == '_')) {
    ++i;
  }
  if (i < sql.size() && sql[i] == '$') return i + 1 - start;
  return 0;
}

std::vector<Token> Lex(std::string_view sql) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < sql.size()) {
    const size_t start = i;
    const unsigned char c = static_cast<unsigned char>(sql[i]);
    TokenKind kind = TokenKind::kOther;
    if (std::isspace(c)) {
      while (i < sql.size() && std::isspace(static_cast<unsigned char>(sql[i]))) ++i;
      kind = TokenKind::kSpace;
    } else if (c == '-' && i + 1 < sql.size() && sql[i + 1] == '-') {
      i = sql.find('\n', i);
      if (i == std::string_view::npos) i = sql.size();
      kind = TokenKind::kComment;
    } else if (c == '/' && i + 1 < sql.size() && sql[i + 1] == '*') {
      size_t end = sql.find("*/", i + 2);
      i = end == std::string_view::npos ? sql.size() : end + 2;
      kind = TokenKind::kComment;
    } else if (c == '\'') {
      i = QuotedEnd(sql, i, '\'');
      kind = TokenKind::kString;
    } else if (c == '"') {
      i = QuotedEnd(sql, i, '"');
      kind = TokenKind::kQuotedIdent;
    } else if (c == '$' && DollarTagLength(sql, i) > 0) {
      const size_t tag_length = DollarTagLength(sql, i);
      const std::string_view tag = sql.substr(i, tag_length);
      size_t end = sql.find(tag, i + tag_length);
      i = end == std::string_view::npos ? sql.size() : end + tag_length;
      kind = TokenKind::kDollarString;
    } else if (c == '?') {
      ++i;
      while (i < sql.size() && std::isdigit(static_cast<unsigned char>(sql[i]))) ++i;
      kind = TokenKind::kParam;
    } else if (IsWordStart(c)) {
      while (i < sql.size() && IsWordByte(static_cast<unsigned char>(sql[i]))) ++i;
      kind = TokenKind::kWord;
    } else {
      ++i;
    }
    out.push_back({kind, sql.substr(start, i - start)});
  }
  return out;
}

bool IsSignificant(const Token& t) {
  return t.kind != TokenKind::kSpace && t.kind != TokenKind::kComment;
}

bool WordIs(const Token& t, std::string_view word) {
  if (t.kind != TokenKind::kWord || t.text.size() != word.size()) return false;
  for (size_t i = 0; i < word.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(t.text[i])) != word[i]) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Errors

std::string_view Field(const PGresult* result, int field) {
  const char* value = result ? PQresultErrorField(result, field) : nullptr;
  return value ? std::string_view(value) : std::string_view();
}

Status StatusFor(std::string_view sqlstate, std::string message) {
  auto in_class = [&](std::string_view cls) { return sqlstate.substr(0, 2) == cls; };
  if (in_class("23")) return AlreadyExistsError(std::move(message));
  if (sqlstate == "40001" || sqlstate == "40P01" || sqlstate == "55P03" || in_class("08") ||
      sqlstate == "57P01" || sqlstate == "57P02" || sqlstate == "57P03") {
    return UnavailableError(std::move(message));
  }
  if (in_class("53")) return ResourceExhaustedError(std::move(message));
  if (sqlstate == "42501" || in_class("28")) return PermissionDeniedError(std::move(message));
  if (sqlstate == "3D000") return NotFoundError(std::move(message));
  return InternalError(std::move(message));
}

// Trims libpq's trailing newline.
std::string Trimmed(const char* text) {
  std::string out = text ? text : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// The error of a failed command: the server's message, or the connection's when there is none.
Status CommandError(PGconn* conn, const PGresult* result, std::string_view what,
                    std::string_view sql) {
  std::string message(what);
  message += ": ";
  std::string_view primary = Field(result, PG_DIAG_MESSAGE_PRIMARY);
  message += primary.empty() ? Trimmed(PQerrorMessage(conn)) : std::string(primary);
  if (!sql.empty()) {
    message += " [";
    message += sql.substr(0, 2000);
    message += "]";
  }
  if (PQstatus(conn) == CONNECTION_BAD) {
    return UnavailableError("lost the connection to PostgreSQL: " + message);
  }
  return StatusFor(Field(result, PG_DIAG_SQLSTATE), std::move(message));
}

bool IsRowCountCommand(const char* status) {
  return std::strncmp(status, "INSERT", 6) == 0 || std::strncmp(status, "UPDATE", 6) == 0 ||
         std::strncmp(status, "DELETE", 6) == 0 || std::strncmp(status, "MERGE", 5) == 0;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// bytea in the text format is "\x" and two hex digits per byte (bytea_output = hex, the default
// since PostgreSQL 9.0; the connection sets it).
std::string DecodeByteaHex(std::string_view text) {
  if (text.size() < 2 || text[0] != '\\' || text[1] != 'x') return std::string(text);
  std::string out;
  out.reserve((text.size() - 2) / 2);
  for (size_t i = 2; i + 1 < text.size(); i += 2) {
    int hi = HexValue(text[i]);
    int lo = HexValue(text[i + 1]);
    if (hi < 0 || lo < 0) return std::string(text);
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, PgResultDeleter>;

// ---------------------------------------------------------------------------------------------

class PgConnection final : public DatabaseBackend {
 public:
  PgConnection(PGconn* conn, int lock_timeout_ms)
      : conn_(conn), lock_timeout_ms_(lock_timeout_ms) {}

  // What every session (the first and each reconnected one) starts with.
  Status SetUpSession() {
    return Exec("SET bytea_output = 'hex'; SET lock_timeout = " + std::to_string(lock_timeout_ms_));
  }
  ~PgConnection() override { PQfinish(conn_); }

  SqlDialect dialect() const override { return SqlDialect::kPostgres; }

  Status Exec(std::string_view sql) override {
    PostgresSql rewritten = RewriteSqliteForPostgres(sql);
    PgResult result(PQexec(conn_, rewritten.text.c_str()));
    return Check(result.get(), "exec", sql);
  }

  Result<std::unique_ptr<StatementBackend>> Prepare(std::string_view sql) override;

  int64_t Changes() const override { return changes_; }

  bool ConnectionLost() const override { return PQstatus(conn_) == CONNECTION_BAD; }

  Status Reconnect() override {
    PQreset(conn_);
    if (PQstatus(conn_) != CONNECTION_OK) {
      return UnavailableError("reconnecting to PostgreSQL: " + Trimmed(PQerrorMessage(conn_)));
    }
    return SetUpSession();
  }

  PGconn* conn() { return conn_; }

  // OK for a command or query that succeeded (recording its row count), else its error.
  Status Check(const PGresult* result, std::string_view what, std::string_view sql) {
    ExecStatusType status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK && status != PGRES_EMPTY_QUERY) {
      return CommandError(conn_, result, what, sql);
    }
    if (IsRowCountCommand(PQcmdStatus(const_cast<PGresult*>(result)))) {
      const char* n = PQcmdTuples(const_cast<PGresult*>(result));
      changes_ = n && *n ? std::strtoll(n, nullptr, 10) : 0;
    }
    return Status();
  }

 private:
  PGconn* conn_;
  const int lock_timeout_ms_;
  int64_t changes_ = 0;
};

class PgStatement final : public StatementBackend {
 public:
  PgStatement(PgConnection& conn, std::string original, PostgresSql sql)
      : conn_(conn),
        original_(std::move(original)),
        sql_(std::move(sql)),
        params_(static_cast<size_t>(sql_.param_count)) {}

  Status BindInt(int index, int64_t value) override {
    SOVAI_ASSIGN_OR_RETURN(Param * p, At(index));
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
    p->kind = Param::kInt;
    p->value.assign(buf, end);
    return Status();
  }

  Status BindText(int index, std::string_view text) override {
    SOVAI_ASSIGN_OR_RETURN(Param * p, At(index));
    if (text.find('\0') != std::string_view::npos) {
      return InvalidArgumentError("bind " + std::to_string(index) +
                                  ": text with a NUL byte cannot be stored in PostgreSQL [" +
                                  original_ + "]");
    }
    p->kind = Param::kText;
    p->value.assign(text);
    return Status();
  }

  Status BindBlob(int index, std::string_view bytes) override {
    SOVAI_ASSIGN_OR_RETURN(Param * p, At(index));
    p->kind = Param::kBlob;
    p->value.assign(bytes);
    return Status();
  }

  Status BindNull(int index) override {
    SOVAI_ASSIGN_OR_RETURN(Param * p, At(index));
    p->kind = Param::kNull;
    p->value.clear();
    return Status();
  }

  Result<bool> Step() override {
    if (!result_) {
      SOVAI_RETURN_IF_ERROR(Execute());
      row_ = 0;
    } else {
      ++row_;
    }
    if (row_ < PQntuples(result_.get())) return true;
    // Done: the next Step runs the statement again, as SQLite's does.
    result_.reset();
    row_ = -1;
    return false;
  }

  void Reset(bool clear_bindings) override {
    result_.reset();
    row_ = -1;
    if (clear_bindings) {
      for (Param& p : params_) {
        p.kind = Param::kNull;
        p.value.clear();
      }
    }
  }

  bool ColumnIsNull(int col) const override {
    return !HasColumn(col) || PQgetisnull(result_.get(), row_, col);
  }

  int64_t ColumnInt(int col) const override {
    if (ColumnIsNull(col)) return 0;
    const char* text = PQgetvalue(result_.get(), row_, col);
    const int length = PQgetlength(result_.get(), row_, col);
    if (PQftype(result_.get(), col) == kBoolOid) return text[0] == 't' ? 1 : 0;
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text, text + length, value);
    if (ec == std::errc() && (end == text + length || *end == '.')) return value;
    // A float, or a numeric out of int64's range: truncated and clamped, as SQLite converts a
    // REAL.
    const double d = std::strtod(text, nullptr);
    if (!(d > -9.2233720368547758e18)) return d != d ? 0 : INT64_MIN;  // NaN reads as 0
    if (d >= 9.2233720368547758e18) return INT64_MAX;
    return static_cast<int64_t>(d);
  }

  std::string ColumnText(int col) const override {
    if (ColumnIsNull(col)) return {};
    std::string_view text(PQgetvalue(result_.get(), row_, col),
                          static_cast<size_t>(PQgetlength(result_.get(), row_, col)));
    if (PQftype(result_.get(), col) == kByteaOid) return DecodeByteaHex(text);
    return std::string(text);
  }

 private:
  struct Param {
    enum Kind { kNull, kInt, kText, kBlob } kind = kNull;
    std::string value;
  };

  Result<Param*> At(int index) {
    if (index < 1 || index > sql_.param_count) {
      return InternalError("bind: parameter index " + std::to_string(index) +
                           " out of range (the statement has " + std::to_string(sql_.param_count) +
                           ") [" + original_ + "]");
    }
    return &params_[static_cast<size_t>(index - 1)];
  }

  bool HasColumn(int col) const {
    return result_ && row_ >= 0 && row_ < PQntuples(result_.get()) && col >= 0 &&
           col < PQnfields(result_.get());
  }

  Status Execute() {
    const size_t n = params_.size();
    const size_t total = n + sql_.null_tests.size();
    std::vector<Oid> types(total, 0);
    std::vector<const char*> values(total, nullptr);
    std::vector<int> lengths(total, 0);
    std::vector<int> formats(total, 0);
    for (size_t i = 0; i < n; ++i) {
      const Param& p = params_[i];
      switch (p.kind) {
        case Param::kNull:
          break;
        case Param::kInt:
          types[i] = kInt8Oid;
          values[i] = p.value.c_str();
          break;
        case Param::kText:
          values[i] = p.value.c_str();
          break;
        case Param::kBlob:
          types[i] = kByteaOid;
          values[i] = p.value.data();
          lengths[i] = static_cast<int>(p.value.size());
          formats[i] = 1;
          break;
      }
      // The server cannot type a parameter the statement does not use: give it one.
      if (!sql_.referenced[i] && types[i] == 0) types[i] = kTextOid;
    }
    // NULL tests: text, NULL exactly when their parameter is.
    for (size_t k = 0; k < sql_.null_tests.size(); ++k) {
      const Param& source = params_[static_cast<size_t>(sql_.null_tests[k] - 1)];
      types[n + k] = kTextOid;
      values[n + k] = source.kind == Param::kNull ? nullptr : "";
    }
    PgResult result(PQexecParams(conn_.conn(), sql_.text.c_str(), static_cast<int>(total),
                                 types.data(), values.data(), lengths.data(), formats.data(),
                                 /*resultFormat=*/0));
    SOVAI_RETURN_IF_ERROR(conn_.Check(result.get(), "step", original_));
    result_ = std::move(result);
    return Status();
  }

  PgConnection& conn_;
  const std::string original_;  // the caller's SQL, for messages
  const PostgresSql sql_;
  std::vector<Param> params_;
  PgResult result_;  // the rows of the current execution; null before the first Step
  int row_ = -1;
};

Result<std::unique_ptr<StatementBackend>> PgConnection::Prepare(std::string_view sql) {
  PostgresSql rewritten = RewriteSqliteForPostgres(sql);
  return std::unique_ptr<StatementBackend>(
      new PgStatement(*this, std::string(sql), std::move(rewritten)));
}

void DiscardNotice(void*, const char*) {}

}  // namespace

bool IsPostgresUrl(std::string_view location) {
  return location.starts_with("postgres://") || location.starts_with("postgresql://");
}

std::string RedactPostgresUrl(std::string_view url) {
  std::string out(url);
  const size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    const size_t authority = scheme + 3;
    size_t end = out.find_first_of("/?", authority);
    if (end == std::string::npos) end = out.size();
    const size_t at = out.rfind('@', end);
    if (at != std::string::npos && at >= authority) {
      const size_t colon = out.find(':', authority);
      if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  // A password= query parameter.
  const size_t query = out.find('?');
  if (query != std::string::npos) {
    size_t pos = query + 1;
    while (pos < out.size()) {
      size_t amp = out.find('&', pos);
      if (amp == std::string::npos) amp = out.size();
      if (out.compare(pos, 9, "password=") == 0) {
        out.replace(pos + 9, amp - pos - 9, "***");
        amp = out.find('&', pos);
        if (amp == std::string::npos) amp = out.size();
      }
      pos = amp + 1;
    }
  }
  return out;
}

Result<std::unique_ptr<Database>> OpenPostgres(const std::string& url,
                                               const PostgresOptions& options) {
  const std::string redacted = RedactPostgresUrl(url);
  if (!IsPostgresUrl(url)) {
    return InvalidArgumentError("'" + redacted +
                                "' is not a PostgreSQL URL (postgres://user@host:port/db)");
  }
  // Earlier keywords are defaults: the URL (expanded in place of dbname) overrides them.
  const std::string timeout = std::to_string(options.connect_timeout_s);
  const char* keywords[] = {"connect_timeout", "application_name", "client_encoding", "dbname",
                            nullptr};
  const char* values[] = {timeout.c_str(), options.application_name.c_str(), "UTF8", url.c_str(),
                          nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) return ResourceExhaustedError("connecting to " + redacted + ": no memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message =
        "connecting to PostgreSQL at " + redacted + ": " + Trimmed(PQerrorMessage(conn));
    PQfinish(conn);
    // libpq gives no SQLSTATE for a failed connection; its message tells the kinds apart.
    if (message.find("password authentication failed") != std::string::npos ||
        message.find("no password supplied") != std::string::npos ||
        message.find("no pg_hba.conf entry") != std::string::npos ||
        message.find("permission denied") != std::string::npos) {
      return PermissionDeniedError(std::move(message));
    }
    if (message.find("does not exist") != std::string::npos &&
        message.find("database") != std::string::npos) {
      return NotFoundError(std::move(message));
    }
    if (message.find("invalid URI") != std::string::npos ||
        message.find("invalid connection option") != std::string::npos ||
        message.find("invalid integer value") != std::string::npos) {
      return InvalidArgumentError(std::move(message));
    }
    return UnavailableError(std::move(message));
  }
  PQsetNoticeProcessor(conn, &DiscardNotice, nullptr);
  auto backend = std::make_unique<PgConnection>(conn, options.lock_timeout_ms);
  SOVAI_RETURN_IF_ERROR(backend->SetUpSession());
  return Database::FromBackend(std::move(backend));
}

PostgresSql RewriteSqliteForPostgres(std::string_view sql) {
  const std::vector<Token> tokens = Lex(sql);
  auto next = [&](size_t i) -> std::optional<size_t> {
    for (size_t j = i + 1; j < tokens.size(); ++j) {
      if (IsSignificant(tokens[j])) return j;
    }
    return std::nullopt;
  };
  // Whether the placeholder at `i` is the operand of IS NULL / IS NOT NULL.
  auto tested_for_null = [&](size_t i) {
    auto is = next(i);
    if (!is || !WordIs(tokens[*is], "IS")) return false;
    auto what = next(*is);
    if (what && WordIs(tokens[*what], "NOT")) what = next(*what);
    return what && WordIs(tokens[*what], "NULL");
  };

  // Pass 1: number the placeholders as SQLite does (a bare ? is one more than the largest so far).
  std::vector<int> index_at(tokens.size(), 0);
  int largest = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].kind != TokenKind::kParam) continue;
    int index = largest + 1;
    if (tokens[i].text.size() > 1) {
      index = 0;
      std::from_chars(tokens[i].text.data() + 1, tokens[i].text.data() + tokens[i].text.size(),
                      index);
    }
    index_at[i] = index;
    largest = std::max(largest, index);
  }

  PostgresSql out;
  out.param_count = largest;
  out.referenced.assign(static_cast<size_t>(largest), false);
  out.text.reserve(sql.size() + 16);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    if (t.kind == TokenKind::kParam) {
      int index = index_at[i];
      if (index >= 1 && tested_for_null(i)) {
        out.null_tests.push_back(index);
        index = largest + static_cast<int>(out.null_tests.size());
      } else if (index >= 1) {
        out.referenced[static_cast<size_t>(index - 1)] = true;
      }
      out.text += '$';
      out.text += std::to_string(index);
    } else if (WordIs(t, "USER")) {
      out.text += "\"user\"";
    } else {
      out.text += t.text;
    }
  }
  return out;
}

Result<std::string> TranslateSqliteDdlForPostgres(std::string_view ddl) {
  const std::vector<Token> tokens = Lex(ddl);
  auto next = [&](size_t i) -> std::optional<size_t> {
    for (size_t j = i + 1; j < tokens.size(); ++j) {
      if (IsSignificant(tokens[j])) return j;
    }
    return std::nullopt;
  };
  auto refuse = [](std::string_view what) -> Status {
    return InvalidArgumentError(std::string(what) +
                                " has no mechanical PostgreSQL translation; give the migration a "
                                "hand-written PostgreSQL version");
  };
  std::string out;
  out.reserve(ddl.size() + 64);
  const Token* prev = nullptr;  // the previous significant token
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    if (!IsSignificant(t)) {
      out += t.text;
      continue;
    }
    auto prev_is = [&](std::string_view word) { return prev != nullptr && WordIs(*prev, word); };
    if (WordIs(t, "INTEGER") || WordIs(t, "INT")) {
      auto primary = next(i);
      auto key = primary ? next(*primary) : std::nullopt;
      if (primary && key && WordIs(tokens[*primary], "PRIMARY") && WordIs(tokens[*key], "KEY")) {
        out += "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY";
        i = *key;
        if (auto autoincrement = next(i);
            autoincrement && WordIs(tokens[*autoincrement], "AUTOINCREMENT")) {
          i = *autoincrement;
        }
        prev = &tokens[i];
        continue;
      }
      out += "BIGINT";
    } else if (WordIs(t, "BLOB")) {
      out += "BYTEA";
    } else if (WordIs(t, "REAL") || WordIs(t, "FLOAT")) {
      out += "DOUBLE PRECISION";
    } else if (WordIs(t, "TEXT")) {
      // A column's type follows its name; TEXT after AS (a CAST) is no column.
      const bool column = prev != nullptr && ((prev->kind == TokenKind::kWord && !prev_is("AS")) ||
                                              prev->kind == TokenKind::kQuotedIdent);
      auto after = next(i);
      const bool collated = after && WordIs(tokens[*after], "COLLATE");
      out += t.text;
      if (column && !collated) out += " COLLATE \"C\"";
    } else if (WordIs(t, "TRIGGER") &&
               (prev_is("CREATE") || prev_is("TEMP") || prev_is("TEMPORARY"))) {
      return refuse("CREATE TRIGGER");
    } else if (WordIs(t, "OR") && prev_is("INSERT")) {
      return refuse("INSERT OR ...");
    } else if (auto after = next(i);
               WordIs(t, "REPLACE") && after && WordIs(tokens[*after], "INTO")) {
      return refuse("REPLACE INTO");
    } else if (WordIs(t, "ROWID") && prev_is("WITHOUT")) {
      return refuse("WITHOUT ROWID");
    } else if (WordIs(t, "PRAGMA")) {
      return refuse("PRAGMA");
    } else if (WordIs(t, "AUTOINCREMENT")) {
      return refuse("AUTOINCREMENT on anything but INTEGER PRIMARY KEY");
    } else {
      out += t.text;
    }
    prev = &t;
  }
  return out;
}

}  // namespace sovai::base
