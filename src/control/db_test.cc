#include "control/db.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <thread>
#include <vector>

#include "base/postgres.h"
#include "control/migrations.h"
#include "control/postgres_test_util.h"

namespace sovai::control {
namespace {

class ControlDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-controldb-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // `<dir>/control.db`, or a fresh PostgreSQL schema with SOVAI_TEST_STATE=postgres.
    SOVAI_STATE_LOCATION_OR_SKIP(path_, dir_);
  }
  void TearDown() override { env_.DeleteDirRecursive(dir_).IgnoreError(); }

  // A second, independent connection to look at the database as another process would.
  std::unique_ptr<base::Database> Raw() {
    auto db = OpenStateDatabase(path_);
    EXPECT_TRUE(db.ok()) << db.status();
    return std::move(*db);
  }

  int64_t CountRows(const std::string& sql) {
    auto db = Raw();
    auto st = db->Prepare(sql);
    EXPECT_TRUE(st.ok()) << st.status();
    auto row = st->Step();
    EXPECT_TRUE(row.ok() && *row);
    return st->ColumnInt(0);
  }

  bool TableExists(const std::string& name) {
    auto exists = control::TableExists(*Raw(), name);
    EXPECT_TRUE(exists.ok()) << exists.status();
    return exists.ok() && *exists;
  }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
  std::string path_;
};

TEST_F(ControlDbTest, FreshDatabaseIsMigratedToTheLatestVersionInWalMode) {
  auto db = ControlDb::Open(path_);
  ASSERT_TRUE(db.ok()) << db.status();
  const auto known = static_cast<int64_t>(ControlMigrations().size());
  ASSERT_GE(known, 1);
  EXPECT_EQ((*db)->schema_version(), known);
  EXPECT_EQ(CountRows("SELECT COUNT(*) FROM schema_migrations"), known);
  EXPECT_EQ(CountRows("SELECT MAX(version) FROM schema_migrations"), known);
  EXPECT_TRUE(TableExists("users"));
  EXPECT_TRUE(TableExists("tokens"));

  auto raw = Raw();
  if (raw->dialect() != base::SqlDialect::kSqlite) return;  // WAL is SQLite's
  auto mode = raw->Prepare("PRAGMA journal_mode");
  ASSERT_TRUE(mode.ok());
  ASSERT_TRUE(mode->Step().ok());
  EXPECT_EQ(mode->ColumnText(0), "wal");
}

TEST_F(ControlDbTest, ReopeningAppliesNothingTwice) {
  ASSERT_TRUE(ControlDb::Open(path_).ok());
  auto again = ControlDb::Open(path_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CountRows("SELECT COUNT(*) FROM schema_migrations"),
            static_cast<int64_t>(ControlMigrations().size()));
}

TEST_F(ControlDbTest, AppliesOnlyTheMissingMigrationsInOrder) {
  static constexpr Migration kV1[] = {{"first", "CREATE TABLE a(x INTEGER)"}};
  static constexpr Migration kV2[] = {{"first", "CREATE TABLE a(x INTEGER)"},
                                      {"second",
                                       "CREATE TABLE b(y INTEGER); INSERT INTO a "
                                       "VALUES (7)"}};
  auto v1 = ControlDb::Open(path_, {.migrations = kV1});
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ((*v1)->schema_version(), 1);
  v1->reset();
  auto v2 = ControlDb::Open(path_, {.migrations = kV2});
  ASSERT_TRUE(v2.ok()) << v2.status();  // would fail if "first" ran again (table a exists)
  EXPECT_EQ((*v2)->schema_version(), 2);
  EXPECT_EQ(CountRows("SELECT COUNT(*) FROM a"), 1);
  EXPECT_TRUE(TableExists("b"));
}

TEST_F(ControlDbTest, RefusesADatabaseFromANewerBinary) {
  ASSERT_TRUE(ControlDb::Open(path_).ok());
  const auto next = static_cast<int64_t>(ControlMigrations().size()) + 1;
  {
    auto raw = Raw();
    auto st = raw->Prepare("INSERT INTO schema_migrations VALUES (?, 'from_the_future', 0)");
    ASSERT_TRUE(st.ok());
    st->Bind(1, next);
    ASSERT_TRUE(st->Run().ok());
  }
  auto db = ControlDb::Open(path_);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(db.status().message().find("schema version " + std::to_string(next)), std::string::npos)
      << db.status();
  EXPECT_NE(db.status().message().find("newer sovai"), std::string::npos) << db.status();
  // Nothing was changed by the refused open.
  EXPECT_EQ(CountRows("SELECT MAX(version) FROM schema_migrations"), next);
}

TEST_F(ControlDbTest, RefusesAHistoryThatDisagreesWithTheBinary) {
  static constexpr Migration kOurs[] = {{"first", "CREATE TABLE a(x INTEGER)"}};
  static constexpr Migration kTheirs[] = {{"another", "CREATE TABLE a(x INTEGER)"}};
  ASSERT_TRUE(ControlDb::Open(path_, {.migrations = kTheirs}).ok());
  auto db = ControlDb::Open(path_, {.migrations = kOurs});
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(db.status().message().find("'another'"), std::string::npos) << db.status();
}

TEST_F(ControlDbTest, AFailingMigrationLeavesNothingOfItself) {
  static constexpr Migration kBroken[] = {
      {"first", "CREATE TABLE a(x INTEGER)"},
      {"second", "CREATE TABLE b(y INTEGER); INSERT INTO a VALUES (1); THIS IS NOT SQL"}};
  auto db = ControlDb::Open(path_, {.migrations = kBroken});
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("migration 2 'second'"), std::string::npos) << db.status();
  EXPECT_EQ(CountRows("SELECT MAX(version) FROM schema_migrations"), 1);
  EXPECT_FALSE(TableExists("b"));
  EXPECT_EQ(CountRows("SELECT COUNT(*) FROM a"), 0);

  static constexpr Migration kFixed[] = {{"first", "CREATE TABLE a(x INTEGER)"},
                                         {"second", "CREATE TABLE b(y INTEGER)"}};
  auto fixed = ControlDb::Open(path_, {.migrations = kFixed});
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ((*fixed)->schema_version(), 2);
}

TEST_F(ControlDbTest, AFailedWriteRollsBackEveryStatement) {
  static constexpr Migration kTable[] = {{"t", "CREATE TABLE t(k TEXT PRIMARY KEY)"}};
  auto db = ControlDb::Open(path_, {.migrations = kTable});
  ASSERT_TRUE(db.ok());
  base::Status st = (*db)->Write([](base::Database& sql) -> base::Status {
    SOVAI_RETURN_IF_ERROR(sql.Exec("INSERT INTO t VALUES ('one')"));
    SOVAI_RETURN_IF_ERROR(sql.Exec("INSERT INTO t VALUES ('two')"));
    return base::AbortedError("changed my mind");
  });
  EXPECT_EQ(st.code(), base::StatusCode::kAborted);
  EXPECT_EQ(CountRows("SELECT COUNT(*) FROM t"), 0);

  // A constraint failure in the middle also rolls back the statements before it.
  st = (*db)->Write([](base::Database& sql) -> base::Status {
    SOVAI_RETURN_IF_ERROR(sql.Exec("INSERT INTO t VALUES ('a')"));
    return sql.Exec("INSERT INTO t VALUES ('a')");
  });
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(CountRows("SELECT COUNT(*) FROM t"), 0);

  ASSERT_TRUE(
      (*db)
          ->Write([](base::Database& sql) { return sql.Exec("INSERT INTO t VALUES ('b')"); })
          .ok());
  EXPECT_EQ(CountRows("SELECT COUNT(*) FROM t"), 1);
}

TEST_F(ControlDbTest, ConcurrentWritersFromManyThreadsAllLand) {
  static constexpr Migration kTable[] = {{"t", "CREATE TABLE t(v INTEGER)"}};
  auto db = ControlDb::Open(path_, {.migrations = kTable});
  ASSERT_TRUE(db.ok());
  constexpr int kThreads = 8;
  constexpr int kWrites = 40;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        base::Status st = (*db)->Write([&](base::Database& sql) -> base::Status {
          SOVAI_ASSIGN_OR_RETURN(auto ins, sql.Prepare("INSERT INTO t VALUES (?)"));
          ins.Bind(1, int64_t{t * 1000 + i});
          return ins.Run();
        });
        if (!st.ok()) ++failures;
        int64_t n = 0;
        st = (*db)->Read([&](base::Database& sql) -> base::Status {
          SOVAI_ASSIGN_OR_RETURN(auto q, sql.Prepare("SELECT COUNT(*) FROM t"));
          SOVAI_RETURN_IF_ERROR(q.Step());
          n = q.ColumnInt(0);
          return base::Status();
        });
        if (!st.ok() || n < 1) ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(CountRows("SELECT COUNT(*) FROM t"), kThreads * kWrites);
}

TEST_F(ControlDbTest, ReadSchemaVersionOfAnEmptyFileIsZero) {
  auto raw = Raw();
  auto version = ReadSchemaVersion(*raw);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, 0);
}

TEST_F(ControlDbTest, MigrationNamesAreUnique) {
  auto migrations = ControlMigrations();
  for (size_t i = 0; i < migrations.size(); ++i) {
    EXPECT_FALSE(migrations[i].name.empty());
    for (size_t j = i + 1; j < migrations.size(); ++j) {
      EXPECT_NE(migrations[i].name, migrations[j].name);
    }
  }
}

}  // namespace
}  // namespace sovai::control

namespace sovai::control {
namespace {

// Every shipped migration runs on PostgreSQL: a hand-written version, or SQLite DDL that
// translates mechanically (a new table or column needs nothing more; a trigger needs postgres_sql).
TEST(ControlMigrationsTest, EachHasAPostgresVersion) {
  for (const Migration& m : ControlMigrations()) {
    if (!m.postgres_sql.empty()) continue;
    auto translated = base::TranslateSqliteDdlForPostgres(m.sql);
    EXPECT_TRUE(translated.ok()) << "migration '" << m.name << "': " << translated.status();
  }
}

}  // namespace
}  // namespace sovai::control
