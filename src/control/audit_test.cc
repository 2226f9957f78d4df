#include "control/audit.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "base/crypto.h"
#include "control/limits.h"
#include "control/postgres_test_util.h"

namespace sovai::control {
namespace {

class AuditLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-audit-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    SOVAI_STATE_LOCATION_OR_SKIP(state_, dir_);
    OpenAll();
  }
  void TearDown() override {
    audit_.reset();
    db_.reset();
    base::Env::Default().DeleteDirRecursive(dir_).IgnoreError();
  }

  void OpenAll(AuditLogOptions options = {}) {
    audit_.reset();
    db_.reset();
    auto db = ControlDb::Open(state_);
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    auto audit = AuditLog::Open(*db_, options);
    ASSERT_TRUE(audit.ok()) << audit.status();
    audit_ = std::move(*audit);
  }

  // Appends n events (actor usr_<i>, action "POST /v1/jobs") and waits until they are written.
  void AppendN(int n, int first = 1) {
    for (int i = first; i < first + n; ++i) {
      audit_->Append({.at_us = 1'000'000LL * i,
                      .actor_user = "usr_" + std::to_string(i),
                      .actor_token = "tok_" + std::to_string(i),
                      .project = i % 2 ? "prj_a" : "prj_b",
                      .action = i % 3 ? "POST /v1/jobs" : "S3 GET",
                      .resource = "/v1/jobs/job_" + std::to_string(i),
                      .source = "127.0.0.1:5000",
                      .result = 201});
    }
    ASSERT_TRUE(audit_->Flush().ok());
  }

  void Sql(const std::string& sql) {
    ASSERT_TRUE(db_->Write([&](base::Database& db) { return db.Exec(sql); }).ok()) << sql;
  }

  AuditVerifyReport Verify() {
    auto report = audit_->Verify();
    EXPECT_TRUE(report.ok()) << report.status();
    return report.ok() ? *report : AuditVerifyReport{};
  }

  std::string dir_;
  std::string state_;  // control.db in dir_, or a PostgreSQL URL (postgres_test_util.h)
  std::unique_ptr<ControlDb> db_;
  std::unique_ptr<AuditLog> audit_;
};

TEST_F(AuditLogTest, UntouchedChainVerifies) {
  AuditVerifyReport empty = Verify();
  EXPECT_TRUE(empty.ok);
  EXPECT_EQ(empty.entries, 0);
  AppendN(10);
  AuditVerifyReport report = Verify();
  EXPECT_TRUE(report.ok) << report.problem;
  EXPECT_EQ(report.entries, 10);
  EXPECT_FALSE(report.first_bad.has_value());
}

TEST_F(AuditLogTest, HashIsTheDocumentedFormula) {
  AppendN(2);
  auto page = audit_->List({.limit = 10});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->items.size(), 2u);
  const AuditEntry& first = page->items[0];
  EXPECT_EQ(first.seq, 1);
  EXPECT_EQ(first.prev_hash, kAuditGenesisHash);
  // docs/audit.md: SHA-256(32 zero bytes || "1:1" "7:1000000" "5:usr_1" ...), hex.
  std::string canonical =
      "1:17:10000005:usr_15:tok_15:prj_a13:POST /v1/jobs14:/v1/jobs/job_114:127.0.0.1:50003:2010:";
  EXPECT_EQ(AuditCanonical(1, first.event), canonical);
  EXPECT_EQ(first.hash, base::HexEncode(base::Sha256(std::string(32, '\0') + canonical)));
  EXPECT_EQ(page->items[1].prev_hash, first.hash);
}

TEST_F(AuditLogTest, ModifiedFieldIsNamed) {
  AppendN(5);
  Sql("UPDATE audit_log SET result = 200 WHERE seq = 3");
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 3);
  EXPECT_NE(report.problem.find("modified"), std::string::npos) << report.problem;
  EXPECT_EQ(report.entries, 2);
}

TEST_F(AuditLogTest, ModifiedHashIsNamed) {
  AppendN(5);
  Sql("UPDATE audit_log SET hash = '" + std::string(64, 'a') + "' WHERE seq = 4");
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 4);
  EXPECT_NE(report.problem.find("modified"), std::string::npos) << report.problem;
}

TEST_F(AuditLogTest, RemovedRowIsNamed) {
  AppendN(5);
  Sql("DELETE FROM audit_log WHERE seq = 2");
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 2);
  EXPECT_NE(report.problem.find("removed"), std::string::npos) << report.problem;
}

TEST_F(AuditLogTest, RemovedAndRenumberedIsNamed) {
  AppendN(5);
  Sql("DELETE FROM audit_log WHERE seq = 2; UPDATE audit_log SET seq = seq - 1 WHERE seq > 2");
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 2);
  EXPECT_NE(report.problem.find("removed"), std::string::npos) << report.problem;
}

TEST_F(AuditLogTest, RemovedTailIsNamedWhileTheWriterKnowsIt) {
  AppendN(5);
  Sql("DELETE FROM audit_log WHERE seq >= 4");
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 4);
  EXPECT_NE(report.problem.find("removed"), std::string::npos) << report.problem;
}

TEST_F(AuditLogTest, SwappedRowsAreNamedAsReordered) {
  AppendN(5);
  Sql("UPDATE audit_log SET seq = -1 WHERE seq = 2; UPDATE audit_log SET seq = 2 WHERE seq = 3;"
      "UPDATE audit_log SET seq = 3 WHERE seq = -1");
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 2);
  EXPECT_NE(report.problem.find("reordered"), std::string::npos) << report.problem;
}

TEST_F(AuditLogTest, RestartContinuesTheChain) {
  AppendN(3);
  OpenAll();  // a new server process on the same database
  AppendN(3, 4);
  auto page = audit_->List({.limit = 10});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->items.size(), 6u);
  EXPECT_EQ(page->items[3].seq, 4);
  EXPECT_EQ(page->items[3].prev_hash, page->items[2].hash);
  AuditVerifyReport report = Verify();
  EXPECT_TRUE(report.ok) << report.problem;
  EXPECT_EQ(report.entries, 6);
}

TEST_F(AuditLogTest, ListFiltersAndPages) {
  AppendN(9);
  auto by_project = audit_->List({.project = "prj_a", .limit = 100});
  ASSERT_TRUE(by_project.ok());
  EXPECT_EQ(by_project->items.size(), 5u);  // 1, 3, 5, 7, 9
  auto by_actor = audit_->List({.actor = "tok_4", .limit = 100});
  ASSERT_TRUE(by_actor.ok());
  ASSERT_EQ(by_actor->items.size(), 1u);
  EXPECT_EQ(by_actor->items[0].event.actor_user, "usr_4");
  auto by_action = audit_->List({.action_prefix = "S3", .limit = 100});
  ASSERT_TRUE(by_action.ok());
  EXPECT_EQ(by_action->items.size(), 3u);  // 3, 6, 9
  auto by_time = audit_->List({.from_us = 2'000'000, .to_us = 4'000'000, .limit = 100});
  ASSERT_TRUE(by_time.ok());
  ASSERT_EQ(by_time->items.size(), 2u);
  EXPECT_EQ(by_time->items[0].seq, 2);

  auto first = audit_->List({.limit = 4});
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->items.size(), 4u);
  ASSERT_EQ(first->next_cursor, 4);
  auto rest = audit_->List({.limit = 100, .after_seq = *first->next_cursor});
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->items.size(), 5u);
  EXPECT_FALSE(rest->next_cursor.has_value());

  EXPECT_FALSE(audit_->List({.limit = 0}).ok());
  EXPECT_FALSE(audit_->List({.limit = kMaxPageSize + 1}).ok());
}

TEST_F(AuditLogTest, ListAndVerifySeeWhatWasAppendedBeforeThem) {
  // No Flush: the writer is still at its first batches when the reads begin.
  constexpr int kEvents = 2000;
  for (int i = 1; i <= kEvents; ++i) {
    audit_->Append({.at_us = i, .action = "S3 PUT", .resource = "/b/k" + std::to_string(i)});
  }
  auto last = audit_->List({.limit = 10, .after_seq = kEvents - 1});
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_EQ(last->items.size(), 1u);
  EXPECT_EQ(last->items[0].event.resource, "/b/k2000");
  for (int i = 1; i <= kEvents; ++i) audit_->Append({.at_us = i, .action = "S3 GET"});
  AuditVerifyReport report = Verify();
  EXPECT_TRUE(report.ok) << report.problem;
  EXPECT_EQ(report.entries, 2 * kEvents);
}

TEST_F(AuditLogTest, LongFieldsAreCutVisibly) {
  audit_->Append({.action = "PUT /v1/x", .detail = std::string(kMaxAuditFieldBytes * 2, 'x')});
  ASSERT_TRUE(audit_->Flush().ok());
  auto page = audit_->List({.limit = 1});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->items.size(), 1u);
  EXPECT_EQ(page->items[0].event.detail.size(), kMaxAuditFieldBytes);
  EXPECT_TRUE(page->items[0].event.detail.ends_with("...(cut)"));
  EXPECT_TRUE(Verify().ok);
}

TEST_F(AuditLogTest, EventsBeyondTheQueueAreCountedAndRecorded) {
  // Hold the database so the writer cannot drain; the queue (limit 2) then overflows.
  OpenAll({.queue_limit = 2});
  std::mutex release_mu;
  release_mu.lock();
  std::promise<void> holding;
  std::thread holder([&] {
    db_->Write([&](base::Database&) {
         holding.set_value();
         std::lock_guard wait(release_mu);
         return base::Status();
       })
        .IgnoreError();
  });
  holding.get_future().wait();
  // The writer may take one batch (at most queue_limit events, and a record of the drops so far)
  // before it blocks on the database, and the queue holds queue_limit more: of 10, at least 6
  // are dropped, in one or two runs of drops.
  for (int i = 0; i < 10; ++i) audit_->Append({.action = "POST /v1/jobs"});
  const uint64_t dropped = audit_->dropped();
  EXPECT_GE(dropped, 6u);
  release_mu.unlock();
  holder.join();
  ASSERT_TRUE(audit_->Flush().ok());
  audit_->Append({.action = "POST /v1/after"});  // wakes the writer to record the drops
  ASSERT_TRUE(audit_->Flush().ok());
  auto drops = audit_->List({.action_prefix = "AUDIT DROPPED", .limit = 10});
  ASSERT_TRUE(drops.ok());
  ASSERT_GE(drops->items.size(), 1u);
  ASSERT_LE(drops->items.size(), 2u);
  uint64_t recorded = 0;  // "<n> events dropped: ..."
  for (const AuditEntry& e : drops->items) recorded += std::stoull(e.event.detail);
  EXPECT_EQ(recorded, dropped);
  EXPECT_TRUE(Verify().ok);
}

// Two servers on one database (docs/state.md): two AuditLogs, each on its own connection, append
// at the same time, and the result is one gapless chain in which each writer's entries keep their
// order. On SQLite the two connections share control.db; on PostgreSQL, one schema.
TEST_F(AuditLogTest, TwoWritersOnOneDatabaseContinueOneChain) {
  AppendN(3);  // a chain that already has a tail when the second writer opens
  auto other_db = ControlDb::Open(state_);
  ASSERT_TRUE(other_db.ok()) << other_db.status();
  auto other = AuditLog::Open(**other_db);
  ASSERT_TRUE(other.ok()) << other.status();
  constexpr int kEach = 200;
  // Small batches (a Flush every few events) so that the two writers' Writes interleave.
  auto append = [](AuditLog& log, const std::string& actor) {
    for (int i = 0; i < kEach; ++i) {
      log.Append({.at_us = 1'000'000LL + i,
                  .actor_user = actor,
                  .action = "POST /v1/jobs",
                  .resource = std::to_string(i),
                  .result = 201});
      if (i % 7 == 6) {
        EXPECT_TRUE(log.Flush().ok());
      }
    }
    EXPECT_TRUE(log.Flush().ok());
  };
  std::thread first([&] { append(*audit_, "usr_first"); });
  std::thread second([&] { append(**other, "usr_second"); });
  first.join();
  second.join();

  for (AuditLog* log : {audit_.get(), other->get()}) {
    auto report = log->Verify();
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok) << report->problem;
    EXPECT_EQ(report->entries, 3 + 2 * kEach);
  }
  std::vector<AuditEntry> all;
  for (std::optional<int64_t> cursor = 0; cursor;) {
    auto page = audit_->List({.limit = kMaxPageSize, .after_seq = *cursor});
    ASSERT_TRUE(page.ok()) << page.status();
    all.insert(all.end(), page->items.begin(), page->items.end());
    cursor = page->next_cursor;
  }
  ASSERT_EQ(all.size(), size_t{3 + 2 * kEach});
  std::map<std::string, int> next;  // by actor: the resource its next entry must carry
  int switches = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].seq, static_cast<int64_t>(i + 1)) << "no gap, no duplicate";
    if (i > 0) {
      EXPECT_EQ(all[i].prev_hash, all[i - 1].hash) << "seq " << all[i].seq;
    }
    if (i < 3) continue;
    const std::string& actor = all[i].event.actor_user;
    EXPECT_EQ(all[i].event.resource, std::to_string(next[actor]++)) << actor << "'s order";
    if (actor != all[i - 1].event.actor_user) ++switches;
  }
  EXPECT_EQ(next["usr_first"], kEach);
  EXPECT_EQ(next["usr_second"], kEach);
  // Not asserted (scheduling decides), but the point of the test: the writers did interleave.
  std::cout << "the chain switches writer " << switches << " times\n";
  other->reset();
}

}  // namespace
}  // namespace sovai::control
