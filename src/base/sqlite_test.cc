#include "base/sqlite.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "base/env.h"

namespace sovai::base {
namespace {

class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sovai-sqlite-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path() const { return (dir_ / "t.db").string(); }
  std::filesystem::path dir_;
};

TEST_F(SqliteTest, RoundTripsTextBlobIntegerAndNull) {
  auto db = Database::Open(Path());
  ASSERT_TRUE(db.ok()) << db.status();
  ASSERT_TRUE((*db)->Exec("CREATE TABLE t(k TEXT PRIMARY KEY, v INTEGER, b BLOB)").ok());
  auto ins = (*db)->Prepare("INSERT INTO t(k, v, b) VALUES (?, ?, ?)");
  ASSERT_TRUE(ins.ok());
  std::string blob("a\0b", 3);
  ins->Bind(1, "key").Bind(2, int64_t{1} << 40).BindBlob(3, blob);
  ASSERT_TRUE(ins->Run().ok());
  ins->Reset();
  ins->Bind(1, "other").Bind(2, int64_t{-1}).BindNull(3);
  ASSERT_TRUE(ins->Run().ok());

  auto sel = (*db)->Prepare("SELECT v, b FROM t WHERE k = ?");
  ASSERT_TRUE(sel.ok());
  sel->Bind(1, "key");
  auto row = sel->Step();
  ASSERT_TRUE(row.ok() && *row);
  EXPECT_EQ(sel->ColumnInt(0), int64_t{1} << 40);
  EXPECT_EQ(sel->ColumnText(1), blob);
  sel->Reset();
  sel->Bind(1, "other");
  ASSERT_TRUE(*sel->Step());
  EXPECT_TRUE(sel->ColumnIsNull(1));
  sel->Reset();
  sel->Bind(1, "missing");
  EXPECT_FALSE(*sel->Step());
}

TEST_F(SqliteTest, ConstraintViolationIsAlreadyExists) {
  auto db = Database::Open(Path());
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->Exec("CREATE TABLE t(k TEXT PRIMARY KEY)").ok());
  ASSERT_TRUE((*db)->Exec("INSERT INTO t VALUES ('a')").ok());
  auto st = (*db)->Prepare("INSERT INTO t VALUES (?)");
  ASSERT_TRUE(st.ok());
  st->Bind(1, "a");
  Status s = st->Run();
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s;
}

TEST_F(SqliteTest, SyntaxErrorIsReportedWithTheStatement) {
  auto db = Database::Open(Path());
  ASSERT_TRUE(db.ok());
  auto st = (*db)->Prepare("SELEC nonsense");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("SELEC nonsense"), std::string::npos);
}

TEST_F(SqliteTest, CommittedRowsSurviveReopenAndRolledBackOnesDoNot) {
  {
    auto db = Database::Open(Path());
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Exec("CREATE TABLE t(k TEXT)").ok());
    ASSERT_TRUE((*db)->Exec("BEGIN; INSERT INTO t VALUES ('kept'); COMMIT").ok());
    ASSERT_TRUE((*db)->Exec("BEGIN; INSERT INTO t VALUES ('dropped'); ROLLBACK").ok());
    ASSERT_TRUE((*db)->Exec("PRAGMA user_version = 7").ok());
  }
  auto db = Database::Open(Path());
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(*(*db)->UserVersion(), 7);
  auto st = (*db)->Prepare("SELECT group_concat(k) FROM t");
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(*st->Step());
  EXPECT_EQ(st->ColumnText(0), "kept");
}

TEST_F(SqliteTest, OpeningADirectoryFails) {
  auto db = Database::Open(dir_.string());
  EXPECT_FALSE(db.ok());
}

// Another engine behind the same classes (sql_backend.h): calls reach it, and the first bind
// error is kept for Step as on SQLite.
class RecordingStatement : public StatementBackend {
 public:
  explicit RecordingStatement(std::string* log) : log_(log) {}
  Status BindInt(int index, int64_t value) override {
    *log_ += "int" + std::to_string(index) + "=" + std::to_string(value) + ";";
    return Status();
  }
  Status BindText(int index, std::string_view text) override {
    if (index > 2) return InternalError("index out of range");
    *log_ += "text" + std::to_string(index) + "=" + std::string(text) + ";";
    return Status();
  }
  Status BindBlob(int index, std::string_view) override {
    *log_ += "blob" + std::to_string(index) + ";";
    return Status();
  }
  Status BindNull(int index) override {
    *log_ += "null" + std::to_string(index) + ";";
    return Status();
  }
  Result<bool> Step() override {
    *log_ += "step;";
    return rows_++ == 0;
  }
  void Reset(bool clear) override { *log_ += clear ? "reset+clear;" : "reset;"; }
  bool ColumnIsNull(int col) const override { return col > 1; }
  int64_t ColumnInt(int col) const override { return 40 + col; }
  std::string ColumnText(int col) const override { return "col" + std::to_string(col); }

 private:
  std::string* log_;
  int rows_ = 0;
};

class RecordingDatabase : public DatabaseBackend {
 public:
  explicit RecordingDatabase(std::string* log) : log_(log) {}
  SqlDialect dialect() const override { return SqlDialect::kPostgres; }
  Status Exec(std::string_view sql) override {
    *log_ += "exec " + std::string(sql) + ";";
    return Status();
  }
  Result<std::unique_ptr<StatementBackend>> Prepare(std::string_view sql) override {
    *log_ += "prepare " + std::string(sql) + ";";
    return std::unique_ptr<StatementBackend>(new RecordingStatement(log_));
  }
  int64_t Changes() const override { return 7; }
  bool ConnectionLost() const override { return true; }
  Status Reconnect() override {
    *log_ += "reconnect;";
    return Status();
  }

 private:
  std::string* log_;
};

TEST(SqlBackendTest, DatabaseAndStatementForwardToAnotherEngine) {
  std::string log;
  auto db = Database::FromBackend(std::make_unique<RecordingDatabase>(&log));
  EXPECT_EQ(db->dialect(), SqlDialect::kPostgres);
  ASSERT_TRUE(db->Exec("BEGIN").ok());
  auto st = db->Prepare("SELECT ?");
  ASSERT_TRUE(st.ok());
  Statement moved = std::move(*st);
  moved.Bind(1, int64_t{5}).Bind(2, "x").BindBlob(1, "b").BindNull(2).BindOptional(1, "o");
  auto row = moved.Step();
  ASSERT_TRUE(row.ok() && *row);
  EXPECT_EQ(moved.ColumnInt(1), 41);
  EXPECT_EQ(moved.ColumnText(0), "col0");
  EXPECT_TRUE(moved.ColumnIsNull(2));
  EXPECT_EQ(db->Changes(), 7);
  EXPECT_TRUE(db->ConnectionLost());
  EXPECT_TRUE(db->Reconnect().ok());
  EXPECT_EQ(db->UserVersion().status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(log, "exec BEGIN;prepare SELECT ?;int1=5;text2=x;blob1;null2;text1=o;step;reconnect;");

  // A failed bind is returned by the next Step, which does not run; Reset forgets it.
  log.clear();
  moved.Bind(3, "too far");
  EXPECT_EQ(moved.Step().status().code(), StatusCode::kInternal);
  moved.Reset(false);
  EXPECT_TRUE(moved.Step().ok());
  EXPECT_EQ(log, "reset;step;");
}

TEST(SqlBackendTest, SqliteIsItsOwnDialectAndNeverLost) {
  auto db = Database::Open(":memory:", {.wal = false});
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ((*db)->dialect(), SqlDialect::kSqlite);
  EXPECT_FALSE((*db)->ConnectionLost());
  EXPECT_TRUE((*db)->Reconnect().ok());
}

}  // namespace
}  // namespace sovai::base
