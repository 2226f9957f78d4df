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

}  // namespace
}  // namespace sovai::base
