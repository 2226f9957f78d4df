// The control database on PostgreSQL, where it differs from one SQLite file: several processes on
// one database (writers, migrations, leadership), lost connections, and the engine's types and
// errors seen through base::Database. The shared suites (db_test, identity_test, ...) run on
// PostgreSQL too, through SOVAI_TEST_STATE=postgres (postgres_test_util.h).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/postgres.h"
#include "control/db.h"
#include "control/migrations.h"
#include "control/postgres_test_util.h"
#include "control/rest_api.h"

namespace sovai::control {
namespace {

constexpr Migration kCounter[] = {{"counter",
                                   "CREATE TABLE counter (k TEXT PRIMARY KEY, n INTEGER NOT NULL);"
                                   "INSERT INTO counter VALUES ('c', 0)"}};

class PostgresStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto url = testing::NewPostgresStateUrl(/*tcp=*/true);
    if (url.status().code() == base::StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << url.status().message();
    }
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }

  std::unique_ptr<ControlDb> Open(std::span<const Migration> migrations = kCounter) {
    auto db = ControlDb::Open(url_, {.migrations = migrations});
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? std::move(*db) : nullptr;
  }

  // Another session on the same database, as another process would have.
  std::unique_ptr<base::Database> Raw() {
    auto db = OpenStateDatabase(url_);
    EXPECT_TRUE(db.ok()) << db.status();
    return db.ok() ? std::move(*db) : nullptr;
  }

  int64_t Query(base::Database& db, const std::string& sql) {
    auto st = db.Prepare(sql);
    EXPECT_TRUE(st.ok()) << st.status();
    auto row = st->Step();
    EXPECT_TRUE(row.ok() && *row) << sql;
    return st->ColumnInt(0);
  }

  // Waits until `done` holds (a closed session's locks go when its server process exits).
  template <typename Fn>
  bool Eventually(Fn done) {
    for (int i = 0; i < 100; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::string url_;
};

TEST_F(PostgresStateTest, TwoProcessesMigrateOnceAndTheirWritersLoseNoIncrement) {
  // Two servers starting at once on an empty database: the migration runs once.
  std::unique_ptr<ControlDb> a, b;
  {
    std::thread ta([&] { a = Open(); });
    std::thread tb([&] { b = Open(); });
    ta.join();
    tb.join();
  }
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->dialect(), base::SqlDialect::kPostgres);
  EXPECT_EQ(Query(*Raw(), "SELECT COUNT(*) FROM schema_migrations"), 1);
  EXPECT_EQ(Query(*Raw(), "SELECT COUNT(*) FROM counter"), 1);

  // Read-modify-write in two statements, from two connections at once: exact only when Writes
  // exclude each other across processes.
  constexpr int kIncrements = 200;
  auto increment = [](ControlDb& db) {
    int failures = 0;
    for (int i = 0; i < kIncrements; ++i) {
      base::Status st = db.Write([](base::Database& sql) -> base::Status {
        SOVAI_ASSIGN_OR_RETURN(auto read, sql.Prepare("SELECT n FROM counter WHERE k = 'c'"));
        SOVAI_ASSIGN_OR_RETURN(bool row, read.Step());
        if (!row) return base::NotFoundError("no counter");
        const int64_t n = read.ColumnInt(0);
        SOVAI_ASSIGN_OR_RETURN(auto write, sql.Prepare("UPDATE counter SET n = ? WHERE k = 'c'"));
        write.Bind(1, n + 1);
        return write.Run();
      });
      if (!st.ok()) {
        ADD_FAILURE() << st;
        ++failures;
      }
    }
    return failures;
  };
  int failures_a = 0, failures_b = 0;
  std::thread ta([&] { failures_a = increment(*a); });
  std::thread tb([&] { failures_b = increment(*b); });
  ta.join();
  tb.join();
  EXPECT_EQ(failures_a + failures_b, 0);
  EXPECT_EQ(Query(*Raw(), "SELECT n FROM counter WHERE k = 'c'"), 2 * kIncrements);

  // A Read is one snapshot: a Write committed in between is not seen by it.
  int64_t first = -1, second = -1;
  ASSERT_TRUE(a->Read([&](base::Database& sql) -> base::Status {
                 SOVAI_ASSIGN_OR_RETURN(auto st, sql.Prepare("SELECT n FROM counter"));
                 SOVAI_RETURN_IF_ERROR(st.Step());
                 first = st.ColumnInt(0);
                 SOVAI_RETURN_IF_ERROR(b->Write(
                     [](base::Database& w) { return w.Exec("UPDATE counter SET n = 0"); }));
                 SOVAI_ASSIGN_OR_RETURN(auto again, sql.Prepare("SELECT n FROM counter"));
                 SOVAI_RETURN_IF_ERROR(again.Step());
                 second = again.ColumnInt(0);
                 return base::Status();
               }).ok());
  EXPECT_EQ(first, 2 * kIncrements);
  EXPECT_EQ(second, first);
  // And it is read-only.
  EXPECT_FALSE(
      a->Read([](base::Database& sql) { return sql.Exec("UPDATE counter SET n = 1"); }).ok());
}

TEST_F(PostgresStateTest, OnlyOneOfTwoLeadsUntilTheHolderCloses) {
  auto a = Open();
  auto b = Open();
  ASSERT_TRUE(a && b);
  auto leads = [](ControlDb& db, std::string_view name) {
    auto r = db.TryAcquireLeadership(name);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && *r;
  };
  EXPECT_TRUE(leads(*a, "scheduler"));
  EXPECT_FALSE(leads(*b, "scheduler"));
  EXPECT_TRUE(a->IsLeader("scheduler"));
  EXPECT_FALSE(b->IsLeader("scheduler"));
  EXPECT_TRUE(leads(*a, "scheduler"));  // still held, asked again
  EXPECT_FALSE(leads(*b, "scheduler"));
  // Names are independent.
  EXPECT_TRUE(leads(*b, "billing"));
  EXPECT_FALSE(leads(*a, "billing"));
  EXPECT_FALSE(a->IsLeader("billing"));

  // Another installation (schema) on the same server leads for itself.
  auto other_url = testing::NewPostgresStateUrl(/*tcp=*/true);
  ASSERT_TRUE(other_url.ok()) << other_url.status();
  auto other = ControlDb::Open(*other_url, {.migrations = kCounter});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(leads(**other, "scheduler"));

  // The holder goes away: the other takes over.
  a.reset();
  EXPECT_TRUE(Eventually([&] { return leads(*b, "scheduler"); }));
  EXPECT_TRUE(b->IsLeader("scheduler"));
}

TEST_F(PostgresStateTest, ALostConnectionIsReopenedAndALostLeadershipIsNoticed) {
  auto a = Open();
  auto b = Open();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->TryAcquireLeadership("scheduler").value_or(false));
  auto admin = Raw();
  ASSERT_NE(admin, nullptr);

  // The server ends every session of `a` (as a restart or a network cut would).
  int64_t pid = 0;
  ASSERT_TRUE(a->Read([&](base::Database& sql) -> base::Status {
                 SOVAI_ASSIGN_OR_RETURN(auto st, sql.Prepare("SELECT pg_backend_pid()"));
                 SOVAI_RETURN_IF_ERROR(st.Step());
                 pid = st.ColumnInt(0);
                 return base::Status();
               }).ok());
  EXPECT_EQ(Query(*admin,
                  "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = "
                  "'advisory' AND granted AND pid <> pg_backend_pid()"),
            1);
  EXPECT_EQ(Query(*admin, "SELECT pg_terminate_backend(" + std::to_string(pid) + ")"), 1);

  // The next Write reconnects and lands.
  ASSERT_TRUE(Eventually([&] {
    return Query(*admin,
                 "SELECT COUNT(*) FROM pg_locks WHERE locktype = "
                 "'advisory'") == 0;
  }));
  base::Status st =
      a->Write([](base::Database& sql) { return sql.Exec("UPDATE counter SET n = n + 1"); });
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(Query(*admin, "SELECT n FROM counter"), 1);

  // Its leadership went with its session: b takes it; a notices when it asks again.
  EXPECT_TRUE(b->TryAcquireLeadership("scheduler").value_or(false));
  auto again = a->TryAcquireLeadership("scheduler");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
  EXPECT_FALSE(a->IsLeader("scheduler"));
}

TEST_F(PostgresStateTest, TypesPlaceholdersAndErrorsBehaveAsOnSqlite) {
  static constexpr Migration kTable[] = {
      {"t",
       "CREATE TABLE t (k TEXT PRIMARY KEY, user TEXT, n INTEGER, b BLOB, flag INTEGER);"
       "CREATE TABLE s (seq INTEGER PRIMARY KEY, v TEXT);"
       "CREATE TABLE u (k TEXT PRIMARY KEY, n INTEGER NOT NULL)"}};
  auto db = Open(kTable);
  ASSERT_NE(db, nullptr);
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  base::Status st = db->Write([&](base::Database& sql) -> base::Status {
    SOVAI_ASSIGN_OR_RETURN(auto ins, sql.Prepare("INSERT INTO t(k, user, n, b, flag) VALUES "
                                                 "(?1, ?2, ?3, ?4, ?5)"));
    ins.Bind(1, "a").Bind(2, "usr_1").Bind(3, INT64_MIN).BindBlob(4, bytes).Bind(5, int64_t{1});
    SOVAI_RETURN_IF_ERROR(ins.Run());
    ins.Reset();
    ins.Bind(1, "B").BindNull(2).Bind(3, INT64_MAX).BindBlob(4, "").BindNull(5);
    SOVAI_RETURN_IF_ERROR(ins.Run());
    ins.Reset();
    ins.Bind(1, "_é").Bind(2, "usr_2").Bind(3, int64_t{7});  // b, flag unbound: NULL
    SOVAI_RETURN_IF_ERROR(ins.Run());
    EXPECT_EQ(sql.Changes(), 1);
    SOVAI_RETURN_IF_ERROR(sql.Exec("UPDATE t SET flag = 0 WHERE flag IS NULL"));
    EXPECT_EQ(sql.Changes(), 2);
    // An INTEGER PRIMARY KEY left out is assigned.
    SOVAI_RETURN_IF_ERROR(sql.Exec("INSERT INTO s(v) VALUES ('x'); INSERT INTO s(v) VALUES ('y')"));
    // The portable upsert (apps.cc's app_usage): the old row's column is named by its table.
    SOVAI_ASSIGN_OR_RETURN(auto upsert, sql.Prepare("INSERT INTO u(k, n) VALUES (?1, ?2) ON "
                                                    "CONFLICT(k) DO UPDATE SET n = u.n + ?2"));
    for (int i = 0; i < 3; ++i) {
      upsert.Reset();
      upsert.Bind(1, "k").Bind(2, int64_t{5});
      SOVAI_RETURN_IF_ERROR(upsert.Run());
      EXPECT_EQ(sql.Changes(), 1);
    }
    return base::Status();
  });
  ASSERT_TRUE(st.ok()) << st;

  st = db->Read([&](base::Database& sql) -> base::Status {
    // Text orders bytewise, as SQLite's: "B" < "_é" < "a".
    SOVAI_ASSIGN_OR_RETURN(auto all, sql.Prepare("SELECT k, user, n, b, flag, flag = 1 FROM t "
                                                 "ORDER BY k"));
    std::vector<std::string> keys;
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, all.Step());
      if (!row) break;
      keys.push_back(all.ColumnText(0));
      if (keys.back() == "a") {
        EXPECT_EQ(all.ColumnText(1), "usr_1");
        EXPECT_EQ(all.ColumnInt(2), INT64_MIN);
        EXPECT_EQ(all.ColumnText(3), bytes);
        EXPECT_EQ(all.ColumnInt(5), 1);  // a boolean reads as 0/1
      } else if (keys.back() == "B") {
        EXPECT_TRUE(all.ColumnIsNull(1));
        EXPECT_EQ(all.ColumnText(1), "");
        EXPECT_EQ(all.ColumnInt(2), INT64_MAX);
        EXPECT_FALSE(all.ColumnIsNull(3));
        EXPECT_EQ(all.ColumnText(3), "");
        EXPECT_EQ(all.ColumnInt(5), 0);
      } else {
        EXPECT_TRUE(all.ColumnIsNull(3));
      }
    }
    EXPECT_EQ(keys, (std::vector<std::string>{"B", "_é", "a"}));
    // Past the last row, a Step runs the statement again.
    SOVAI_ASSIGN_OR_RETURN(bool again, all.Step());
    EXPECT_TRUE(again);

    // An optional filter on one placeholder, bound to NULL or to text.
    SOVAI_ASSIGN_OR_RETURN(auto optional,
                           sql.Prepare("SELECT COUNT(*) FROM t WHERE ?1 IS NULL OR user = ?1"));
    optional.BindNull(1);
    SOVAI_RETURN_IF_ERROR(optional.Step());
    EXPECT_EQ(optional.ColumnInt(0), 3);
    optional.Reset();
    optional.Bind(1, "usr_2");
    SOVAI_RETURN_IF_ERROR(optional.Step());
    EXPECT_EQ(optional.ColumnInt(0), 1);

    // SUM of BIGINT is numeric in PostgreSQL; it reads as an integer all the same.
    SOVAI_ASSIGN_OR_RETURN(auto sum, sql.Prepare("SELECT SUM(n) FROM t WHERE k <> 'B'"));
    SOVAI_RETURN_IF_ERROR(sum.Step());
    EXPECT_EQ(sum.ColumnInt(0), INT64_MIN + 7);
    SOVAI_ASSIGN_OR_RETURN(auto u, sql.Prepare("SELECT n FROM u WHERE k = 'k'"));
    SOVAI_RETURN_IF_ERROR(u.Step());
    EXPECT_EQ(u.ColumnInt(0), 15);
    SOVAI_ASSIGN_OR_RETURN(auto seq, sql.Prepare("SELECT seq FROM s ORDER BY seq"));
    SOVAI_RETURN_IF_ERROR(seq.Step());
    EXPECT_EQ(seq.ColumnInt(0), 1);
    SOVAI_RETURN_IF_ERROR(seq.Step());
    EXPECT_EQ(seq.ColumnInt(0), 2);
    return base::Status();
  });
  ASSERT_TRUE(st.ok()) << st;

  // A constraint failure is AlreadyExists, and rolls the whole Write back.
  st = db->Write([](base::Database& sql) -> base::Status {
    SOVAI_RETURN_IF_ERROR(sql.Exec("INSERT INTO t(k) VALUES ('c')"));
    return sql.Exec("INSERT INTO t(k) VALUES ('a')");
  });
  EXPECT_EQ(st.code(), base::StatusCode::kAlreadyExists) << st;
  EXPECT_EQ(Query(*Raw(), "SELECT COUNT(*) FROM t"), 3);

  // Text that PostgreSQL cannot hold, and a bad parameter index, are named.
  st = db->Write([](base::Database& sql) -> base::Status {
    SOVAI_ASSIGN_OR_RETURN(auto ins, sql.Prepare("INSERT INTO t(k) VALUES (?)"));
    ins.Bind(1, std::string_view("a\0b", 3));
    return ins.Run();
  });
  EXPECT_EQ(st.code(), base::StatusCode::kInvalidArgument) << st;
  st = db->Write([](base::Database& sql) -> base::Status {
    SOVAI_ASSIGN_OR_RETURN(auto ins, sql.Prepare("INSERT INTO t(k) VALUES (?)"));
    ins.Bind(2, "x");
    return ins.Run();
  });
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("out of range"), std::string::npos) << st;
}

TEST_F(PostgresStateTest, AControlPlaneOpensOnAStateUrl) {
  char tmpl[] = "/tmp/sovai-pgstate-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    auto control = ControlPlane::Open(dir, {.state_url = url_});
    ASSERT_TRUE(control.ok()) << control.status();
    EXPECT_EQ((*control)->db().dialect(), base::SqlDialect::kPostgres);
    EXPECT_EQ((*control)->db().schema_version(), static_cast<int64_t>(ControlMigrations().size()));
    // Nothing of the state is in the data directory.
    EXPECT_FALSE(base::Env::Default().FileExists(dir + "/control.db"));
  }
  auto bad = ControlPlane::Open(dir, {.state_url = "mysql://sovai:hunter2@db/sovai"});
  EXPECT_EQ(bad.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().find("hunter2"), std::string::npos) << bad.status();
  auto unreachable =
      ControlPlane::Open(dir, {.state_url = "postgres://sovai:hunter2@127.0.0.1:1/x"});
  EXPECT_EQ(unreachable.status().code(), base::StatusCode::kUnavailable) << unreachable.status();
  EXPECT_EQ(unreachable.status().message().find("hunter2"), std::string::npos)
      << unreachable.status();
  base::Env::Default().DeleteDirRecursive(dir).IgnoreError();
}

}  // namespace
}  // namespace sovai::control
