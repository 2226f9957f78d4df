#include "control/audit_export.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "base/strings.h"
#include "objstore/store.h"

namespace sovai::control {
namespace {

// A bucket in memory, with a switch to fail writes.
class FakeBucket {
 public:
  AuditExportBucket Callbacks() {
    AuditExportBucket b;
    b.name = "audit-bkt";
    b.put_object = [this](const std::string& key, std::string bytes) -> base::Status {
      if (puts_before_failure_ == 0) return base::UnavailableError("the bucket is unreachable");
      if (puts_before_failure_ > 0) --puts_before_failure_;
      if (!objects_.emplace(key, std::move(bytes)).second) {
        return base::AlreadyExistsError(key + " exists");
      }
      return base::Status();
    };
    b.list_keys = [this](const std::string& prefix) -> base::Result<std::vector<std::string>> {
      std::vector<std::string> keys;
      for (const auto& [key, body] : objects_) {
        if (key.starts_with(prefix)) keys.push_back(key);
      }
      return keys;
    };
    b.get_object = [this](const std::string& key) -> base::Result<std::string> {
      auto it = objects_.find(key);
      if (it == objects_.end()) return base::NotFoundError(key);
      return it->second;
    };
    return b;
  }

  std::vector<std::string> Keys() const {
    std::vector<std::string> keys;
    for (const auto& [k, v] : objects_) keys.push_back(k);
    return keys;
  }
  // The objects under audit/ in key order, as a download would give them.
  std::vector<AuditExportFile> Files() const {
    std::vector<AuditExportFile> files;
    for (const auto& [k, v] : objects_) {
      if (k.starts_with("audit/")) files.push_back({k, v});
    }
    return files;
  }

  std::map<std::string, std::string> objects_;
  int puts_before_failure_ = -1;  // -1: never fail
};

class AuditExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-audit-export-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    OpenAll(dir_);
  }
  void TearDown() override {
    exporter_.reset();
    audit_.reset();
    db_.reset();
    base::Env::Default().DeleteDirRecursive(dir_).IgnoreError();
  }

  // A server process on the control database in `dir` (a new one: a restart or another server).
  void OpenAll(const std::string& dir) {
    exporter_.reset();
    audit_.reset();
    db_.reset();
    ASSERT_TRUE(base::Env::Default().CreateDirs(dir).ok());
    auto db = ControlDb::Open(dir + "/control.db");
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    auto audit = AuditLog::Open(*db_);
    ASSERT_TRUE(audit.ok()) << audit.status();
    audit_ = std::move(*audit);
  }

  void StartExporter(int64_t max_entries = kAuditExportMaxEntriesPerObject,
                     size_t max_bytes = kAuditExportMaxObjectBytes) {
    auto exporter = AuditExporter::Start(*audit_, {.bucket = bucket_.Callbacks(),
                                                   .interval = std::chrono::milliseconds(0),
                                                   .max_entries_per_object = max_entries,
                                                   .max_object_bytes = max_bytes});
    ASSERT_TRUE(exporter.ok()) << exporter.status();
    exporter_ = std::move(*exporter);
  }

  void AppendN(int n, int first = 1, bool flush = true) {
    for (int i = first; i < first + n; ++i) {
      audit_->Append({.at_us = 1'000'000LL * i,
                      .actor_user = "usr_" + std::to_string(i),
                      .actor_token = "tok_" + std::to_string(i),
                      .project = "prj_a",
                      .action = "POST /v1/jobs",
                      .resource = "/v1/jobs/job_" + std::to_string(i),
                      .source = "127.0.0.1:5000",
                      .result = 201,
                      .detail = "say \"hi\"\n"});
    }
    if (flush) {
      ASSERT_TRUE(audit_->Flush().ok());
    }
  }

  void Sql(const std::string& sql) {
    ASSERT_TRUE(db_->Write([&](base::Database& db) { return db.Exec(sql); }).ok()) << sql;
  }

  AuditExportResult Export() {
    auto result = exporter_->ExportOnce();
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : AuditExportResult{};
  }

  std::string dir_;
  FakeBucket bucket_;
  std::unique_ptr<ControlDb> db_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<AuditExporter> exporter_;
};

std::string Key(int64_t first, int64_t last) { return AuditExportKey("audit/", first, last); }

TEST_F(AuditExportTest, EmptyLogExportsNothing) {
  StartExporter();
  AuditExportResult result = Export();
  EXPECT_EQ(result.objects, 0);
  EXPECT_EQ(result.exported_seq, 0);
  EXPECT_TRUE(bucket_.objects_.empty());
  AuditExportStatus status = exporter_->status();
  EXPECT_TRUE(status.ok);
  EXPECT_EQ(status.exports, 1u);
  EXPECT_TRUE(VerifyAuditExport({}).ok);
}

TEST_F(AuditExportTest, ExportsInChunksNamedInSequenceOrder) {
  StartExporter(/*max_entries=*/10);
  AppendN(25);
  AuditExportResult result = Export();
  EXPECT_EQ(result.objects, 3);
  EXPECT_EQ(result.entries, 25);
  EXPECT_EQ(result.exported_seq, 25);
  EXPECT_EQ(bucket_.Keys(), (std::vector<std::string>{Key(1, 10), Key(11, 20), Key(21, 25)}));
  EXPECT_EQ(Key(1, 10), "audit/00000000000000000001-00000000000000000010.jsonl");

  // Nothing new: nothing written. Then only the new entries, in one more object.
  EXPECT_EQ(Export().objects, 0);
  AppendN(3, 26);
  result = Export();
  EXPECT_EQ(result.objects, 1);
  EXPECT_EQ(bucket_.Keys().back(), Key(26, 28));

  AuditVerifyReport report = VerifyAuditExport(bucket_.Files());
  EXPECT_TRUE(report.ok) << report.problem;
  EXPECT_EQ(report.entries, 28);
  // Each file continues the previous one's chain.
  const std::string& second = bucket_.objects_[Key(11, 20)];
  auto page = audit_->List({.limit = 10, .after_seq = 9});
  ASSERT_TRUE(page.ok());
  EXPECT_NE(second.find("\"prev_hash\":\"" + page->items[0].hash + "\""), std::string::npos);

  AuditExportStatus status = exporter_->status();
  EXPECT_EQ(status.objects_written, 4u);
  EXPECT_EQ(status.entries_written, 28u);
  EXPECT_EQ(status.exported_seq, 28);
}

TEST_F(AuditExportTest, LineCarriesEveryFieldAndHashes) {
  AppendN(1);
  auto page = audit_->List({.limit = 1});
  ASSERT_TRUE(page.ok());
  const AuditEntry& e = page->items[0];
  EXPECT_EQ(AuditExportLine(e),
            "{\"seq\":1,\"at_us\":1000000,\"actor_user\":\"usr_1\",\"actor_token\":\"tok_1\","
            "\"project\":\"prj_a\",\"action\":\"POST /v1/jobs\",\"resource\":\"/v1/jobs/job_1\","
            "\"source\":\"127.0.0.1:5000\",\"result\":201,\"detail\":\"say \\\"hi\\\"\\n\","
            "\"prev_hash\":\"" +
                std::string(kAuditGenesisHash) + "\",\"hash\":\"" + e.hash + "\"}\n");
}

TEST_F(AuditExportTest, BytesThatAreNotUtf8SurviveAsBase64) {
  audit_->Append({.action = "S3 PUT", .resource = "/b/\xff\xfe", .detail = "ok"});
  ASSERT_TRUE(audit_->Flush().ok());
  StartExporter();
  Export();
  const std::string& body = bucket_.objects_.at(Key(1, 1));
  EXPECT_NE(body.find("\"resource_base64\":\"L2Iv//4=\""), std::string::npos) << body;
  AuditVerifyReport report = VerifyAuditExport(bucket_.Files());
  EXPECT_TRUE(report.ok) << report.problem;
  EXPECT_EQ(report.entries, 1);
}

TEST_F(AuditExportTest, ObjectsStayUnderTheByteLimit) {
  AppendN(1);
  auto page = audit_->List({.limit = 1});
  ASSERT_TRUE(page.ok());
  const size_t line_bytes = AuditExportLine(page->items[0]).size();
  AppendN(9, 2);
  StartExporter(kAuditExportMaxEntriesPerObject, 3 * line_bytes + 5);
  Export();
  for (const auto& [key, body] : bucket_.objects_) {
    EXPECT_LE(body.size(), 3 * line_bytes + 5) << key;
  }
  EXPECT_EQ(bucket_.objects_.size(), 4u);  // 3 + 3 + 3 + 1
  EXPECT_TRUE(VerifyAuditExport(bucket_.Files()).ok);
}

TEST_F(AuditExportTest, ContinuesFromTheBucketAfterARestart) {
  StartExporter(/*max_entries=*/4);
  AppendN(6);
  Export();
  EXPECT_EQ(bucket_.Keys(), (std::vector<std::string>{Key(1, 4), Key(5, 6)}));
  // A new process: no local state but the bucket.
  OpenAll(dir_);
  AppendN(3, 7);
  StartExporter(/*max_entries=*/4);
  AuditExportResult result = Export();
  EXPECT_EQ(result.objects, 1);
  EXPECT_EQ(result.entries, 3);
  EXPECT_EQ(bucket_.Keys(), (std::vector<std::string>{Key(1, 4), Key(5, 6), Key(7, 9)}));
  AuditVerifyReport report = VerifyAuditExport(bucket_.Files());
  EXPECT_TRUE(report.ok) << report.problem;
  EXPECT_EQ(report.entries, 9);
}

TEST_F(AuditExportTest, ObjectDeletedFromTheEndIsWrittenAgain) {
  StartExporter(/*max_entries=*/3);
  AppendN(7);
  Export();
  ASSERT_EQ(bucket_.objects_.erase(Key(7, 7)), 1u);
  ASSERT_EQ(bucket_.objects_.erase(Key(4, 6)), 1u);
  AppendN(1, 8);
  AuditExportResult result = Export();
  EXPECT_EQ(result.entries, 5);
  EXPECT_EQ(bucket_.Keys(), (std::vector<std::string>{Key(1, 3), Key(4, 6), Key(7, 8)}));
  EXPECT_TRUE(VerifyAuditExport(bucket_.Files()).ok);
}

TEST_F(AuditExportTest, OtherObjectsUnderThePrefixAreIgnored) {
  bucket_.objects_["audit/README.txt"] = "exported audit log";
  bucket_.objects_["other/00000000000000000001-00000000000000000099.jsonl"] = "not ours";
  AppendN(2);
  StartExporter();
  Export();
  EXPECT_EQ(bucket_.objects_.count(Key(1, 2)), 1u);
}

TEST_F(AuditExportTest, AFailedWriteNeitherDuplicatesNorSkips) {
  StartExporter(/*max_entries=*/3);
  AppendN(8);
  bucket_.puts_before_failure_ = 1;  // the first object goes, the second fails
  auto failed = exporter_->ExportOnce();
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(bucket_.Keys(), (std::vector<std::string>{Key(1, 3)}));
  AuditExportStatus status = exporter_->status();
  EXPECT_FALSE(status.ok);
  EXPECT_FALSE(status.chain_error);
  EXPECT_EQ(status.exported_seq, 3);
  EXPECT_EQ(status.failures, 1u);
  EXPECT_NE(status.error.find("unreachable"), std::string::npos) << status.error;

  bucket_.puts_before_failure_ = -1;
  AuditExportResult result = Export();
  EXPECT_EQ(result.entries, 5);
  EXPECT_EQ(bucket_.Keys(), (std::vector<std::string>{Key(1, 3), Key(4, 6), Key(7, 8)}));
  EXPECT_TRUE(exporter_->status().ok);
  EXPECT_TRUE(VerifyAuditExport(bucket_.Files()).ok);
}

TEST_F(AuditExportTest, RefusesABucketWithAnotherServersChain) {
  StartExporter();
  AppendN(5);
  Export();
  const auto before = bucket_.objects_;

  // Another server (another database, other entries) pointed at the same bucket.
  OpenAll(dir_ + "/other");
  audit_->Append({.action = "POST /v1/other"});
  AppendN(6, 100);
  StartExporter();
  auto result = exporter_->ExportOnce();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(result.status().message().find("entry 5 has hash"), std::string::npos)
      << result.status();
  AuditExportStatus status = exporter_->status();
  EXPECT_FALSE(status.ok);
  EXPECT_TRUE(status.chain_error);
  EXPECT_NE(exporter_->RenderMetrics().find("sovai_audit_export_chain_error 1\n"),
            std::string::npos);
  EXPECT_EQ(bucket_.objects_, before);  // nothing written

  // Still refused on the next round, and at shutdown.
  EXPECT_FALSE(exporter_->ExportOnce().ok());
  EXPECT_FALSE(exporter_->Shutdown().ok());
  EXPECT_EQ(bucket_.objects_, before);
}

TEST_F(AuditExportTest, RefusesABucketAheadOfTheDatabase) {
  StartExporter();
  AppendN(5);
  Export();
  OpenAll(dir_ + "/fresh");  // a new, shorter database
  AppendN(2);
  StartExporter();
  auto result = exporter_->ExportOnce();
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("does not have"), std::string::npos) << result.status();
  EXPECT_TRUE(exporter_->status().chain_error);
  EXPECT_EQ(bucket_.objects_.size(), 1u);
}

TEST_F(AuditExportTest, RefusesWhenTheExportedTailWasRewrittenInTheDatabase) {
  StartExporter();
  AppendN(5);
  Export();
  Sql("UPDATE audit_log SET hash = '" + std::string(64, 'a') + "' WHERE seq = 5");
  AppendN(1, 6);
  auto result = exporter_->ExportOnce();
  EXPECT_FALSE(result.ok());
  EXPECT_TRUE(exporter_->status().chain_error);
  EXPECT_EQ(bucket_.objects_.size(), 1u);
}

TEST_F(AuditExportTest, StopsAtABrokenDatabaseChainAfterExportingWhatVerifies) {
  StartExporter();
  AppendN(10);
  Sql("UPDATE audit_log SET result = 200 WHERE seq = 7");
  auto result = exporter_->ExportOnce();
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("entry 7"), std::string::npos) << result.status();
  EXPECT_EQ(bucket_.Keys(), (std::vector<std::string>{Key(1, 6)}));
  AuditExportStatus status = exporter_->status();
  EXPECT_TRUE(status.chain_error);
  EXPECT_EQ(status.exported_seq, 6);
  EXPECT_EQ(status.entries_written, 6u);
}

TEST_F(AuditExportTest, ShutdownExportsWhatIsStillQueued) {
  StartExporter();
  AppendN(4, 1, /*flush=*/false);
  ASSERT_TRUE(exporter_->Shutdown().ok());
  EXPECT_EQ(bucket_.Keys(), (std::vector<std::string>{Key(1, 4)}));
  EXPECT_TRUE(exporter_->Shutdown().ok());  // idempotent, exports nothing more
  EXPECT_EQ(bucket_.objects_.size(), 1u);
}

TEST_F(AuditExportTest, ThreadExportsPeriodically) {
  AppendN(2);
  auto exporter = AuditExporter::Start(
      *audit_, {.bucket = bucket_.Callbacks(), .interval = std::chrono::milliseconds(20)});
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  // The first export runs at start; later ones pick up new entries. The bucket's map is only
  // touched by the exporter's thread until Shutdown, so wait on its status.
  auto wait_for_seq = [&](int64_t seq) {
    for (int i = 0; i < 500 && (*exporter)->status().exported_seq < seq; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return (*exporter)->status().exported_seq;
  };
  EXPECT_EQ(wait_for_seq(2), 2);
  AppendN(3, 3);
  EXPECT_EQ(wait_for_seq(5), 5);
  ASSERT_TRUE((*exporter)->Shutdown().ok());
  EXPECT_EQ(bucket_.Keys(), (std::vector<std::string>{Key(1, 2), Key(3, 5)}));
  EXPECT_GE((*exporter)->status().exports, 2u);
}

// Two servers on one database: a follower's thread ticks without exporting, exports once it leads,
// stops again when it no longer does, and makes no final export at Shutdown.
TEST_F(AuditExportTest, OnlyTheLeaderExports) {
  AppendN(2);
  std::atomic<bool> leader = false;
  std::atomic<int> listings = 0;  // every export starts by listing the bucket
  AuditExportBucket bucket = bucket_.Callbacks();
  bucket.list_keys = [&, list = bucket.list_keys](const std::string& prefix) {
    ++listings;
    return list(prefix);
  };
  auto exporter = AuditExporter::Start(*audit_, {.bucket = std::move(bucket),
                                                 .interval = std::chrono::milliseconds(10),
                                                 .is_leader = [&] { return leader.load(); }});
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // ten periods
  EXPECT_EQ(listings.load(), 0) << "a follower does not export";
  EXPECT_EQ((*exporter)->status().exports, 0u);

  leader = true;
  for (int i = 0; i < 500 && (*exporter)->status().exported_seq < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ((*exporter)->status().exported_seq, 2) << "the leader's next round exports";

  leader = false;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a round in flight ends
  const int before = listings.load();
  AppendN(3, 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(listings.load(), before) << "leadership lost: no more exports";
  ASSERT_TRUE((*exporter)->Shutdown().ok());
  EXPECT_EQ(listings.load(), before) << "a follower makes no final export";
  EXPECT_EQ(bucket_.Keys(), (std::vector<std::string>{Key(1, 2)}));
}

TEST_F(AuditExportTest, StartChecksItsOptions) {
  AuditExportBucket incomplete = bucket_.Callbacks();
  incomplete.get_object = nullptr;
  EXPECT_FALSE(AuditExporter::Start(*audit_, {.bucket = incomplete, .interval = {}}).ok());
  EXPECT_FALSE(AuditExporter::Start(
                   *audit_, {.bucket = bucket_.Callbacks(), .prefix = "audit", .interval = {}})
                   .ok());
  EXPECT_FALSE(
      AuditExporter::Start(
          *audit_, {.bucket = bucket_.Callbacks(), .interval = {}, .max_entries_per_object = 0})
          .ok());
  EXPECT_FALSE(AuditExporter::Start(*audit_, {.bucket = bucket_.Callbacks(),
                                              .interval = {},
                                              .max_object_bytes = kAuditExportMaxObjectBytes + 1})
                   .ok());
}

// --- VerifyAuditExport over files that were edited after the export -------------------------

class AuditExportVerifyTest : public AuditExportTest {
 protected:
  void SetUp() override {
    AuditExportTest::SetUp();
    StartExporter(/*max_entries=*/5);
    AppendN(15);
    Export();
    files_ = bucket_.Files();
    ASSERT_EQ(files_.size(), 3u);
    ASSERT_TRUE(VerifyAuditExport(files_).ok);
  }

  static std::vector<std::string> Lines(const std::string& body) {
    std::vector<std::string> lines;
    for (std::string_view line : base::Split(body, '\n', /*skip_empty=*/true)) {
      lines.emplace_back(line);
    }
    return lines;
  }
  static std::string Join(const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& line : lines) out += line + "\n";
    return out;
  }

  AuditVerifyReport Verify() { return VerifyAuditExport(files_); }

  std::vector<AuditExportFile> files_;
};

TEST_F(AuditExportVerifyTest, EditedLineIsModified) {
  std::string& body = files_[1].contents;  // entries 6..10
  const size_t at = body.find("usr_7");
  ASSERT_NE(at, std::string::npos);
  body.replace(at, 5, "usr_X");
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 7);
  EXPECT_EQ(report.entries, 6);
  EXPECT_NE(report.problem.find("modified"), std::string::npos) << report.problem;
  EXPECT_NE(report.problem.find("line 2 of"), std::string::npos) << report.problem;
}

TEST_F(AuditExportVerifyTest, RemovedLineIsNamed) {
  std::vector<std::string> lines = Lines(files_[1].contents);
  lines.erase(lines.begin() + 1);  // entry 7
  files_[1].contents = Join(lines);
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 7);
  EXPECT_NE(report.problem.find("removed"), std::string::npos) << report.problem;
}

TEST_F(AuditExportVerifyTest, LineCutOffAFilesEndIsNamed) {
  std::vector<std::string> lines = Lines(files_[2].contents);
  lines.pop_back();  // entry 15, the very last: only the file's name still says it existed
  files_[2].contents = Join(lines);
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 15);
  EXPECT_NE(report.problem.find("removed"), std::string::npos) << report.problem;
}

TEST_F(AuditExportVerifyTest, ReorderedLinesAreNamed) {
  std::vector<std::string> lines = Lines(files_[0].contents);
  std::swap(lines[1], lines[2]);  // entries 2 and 3
  files_[0].contents = Join(lines);
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 2);
  EXPECT_NE(report.problem.find("reordered"), std::string::npos) << report.problem;
}

TEST_F(AuditExportVerifyTest, RenumberedLinesAreReordered) {
  // Swap two entries and their seq fields too: the prev_hash links give it away.
  std::vector<std::string> lines = Lines(files_[0].contents);
  std::swap(lines[1], lines[2]);
  lines[1].replace(lines[1].find("\"seq\":3"), 7, "\"seq\":2");
  lines[2].replace(lines[2].find("\"seq\":2"), 7, "\"seq\":3");
  files_[0].contents = Join(lines);
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 2);
  EXPECT_NE(report.problem.find("reordered"), std::string::npos) << report.problem;
}

TEST_F(AuditExportVerifyTest, MissingFileIsNamed) {
  files_.erase(files_.begin() + 1);  // entries 6..10
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 6);
  EXPECT_EQ(report.entries, 5);
  EXPECT_NE(report.problem.find("removed: entries 6..10"), std::string::npos) << report.problem;
  EXPECT_NE(report.problem.find("file before it missing"), std::string::npos) << report.problem;
}

TEST_F(AuditExportVerifyTest, MissingFirstFileIsNamed) {
  files_.erase(files_.begin());
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 1);
  EXPECT_NE(report.problem.find("removed: entries 1..5"), std::string::npos) << report.problem;
}

TEST_F(AuditExportVerifyTest, FilesOutOfOrderAreNamed) {
  std::swap(files_[1], files_[2]);
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 6);
  EXPECT_NE(report.problem.find("reordered"), std::string::npos) << report.problem;
}

TEST_F(AuditExportVerifyTest, TruncatedFileIsNamed) {
  files_[2].contents.pop_back();  // the final newline
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 15);
  EXPECT_NE(report.problem.find("truncated"), std::string::npos) << report.problem;
}

TEST_F(AuditExportVerifyTest, MalformedAndUnknownFieldsAreNamed) {
  std::vector<std::string> lines = Lines(files_[0].contents);
  lines[3].insert(1, "\"note\":\"unhashed\",");
  files_[0].contents = Join(lines);
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.first_bad, 4);
  EXPECT_NE(report.problem.find("unknown field 'note'"), std::string::npos) << report.problem;

  files_ = bucket_.Files();
  files_[0].contents.insert(0, "not json\n");
  report = Verify();
  EXPECT_EQ(report.first_bad, 1);
  EXPECT_NE(report.problem.find("malformed"), std::string::npos) << report.problem;
}

TEST_F(AuditExportVerifyTest, RenamedFileIsNamed) {
  files_[1].name = Key(6, 11);
  AuditVerifyReport report = Verify();
  EXPECT_FALSE(report.ok);
  EXPECT_NE(report.problem.find("named for entries 6..11"), std::string::npos) << report.problem;
  // Without names only the contents are checked.
  for (AuditExportFile& f : files_) f.name.clear();
  EXPECT_TRUE(Verify().ok);
}

// --- Flags -----------------------------------------------------------------------------------

TEST(AuditExportFlagsTest, Target) {
  auto plain = ParseAuditExportTarget("audit-bkt");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->bucket, "audit-bkt");
  EXPECT_EQ(plain->prefix, "audit/");
  auto prefixed = ParseAuditExportTarget("audit-bkt/logs/eu");
  ASSERT_TRUE(prefixed.ok()) << prefixed.status();
  EXPECT_EQ(prefixed->prefix, "logs/eu/");
  EXPECT_EQ(ParseAuditExportTarget("audit-bkt/logs/")->prefix, "logs/");
  EXPECT_FALSE(ParseAuditExportTarget("").ok());
  EXPECT_FALSE(ParseAuditExportTarget("Bad_Bucket").ok());
  EXPECT_FALSE(ParseAuditExportTarget("audit-bkt/").ok());
  EXPECT_FALSE(ParseAuditExportTarget("audit-bkt//x").ok());
}

TEST(AuditExportFlagsTest, Interval) {
  EXPECT_EQ(*ParseAuditExportInterval("1h"), std::chrono::seconds(3600));
  EXPECT_EQ(*ParseAuditExportInterval("1h30m"), std::chrono::seconds(5400));
  EXPECT_EQ(*ParseAuditExportInterval("90"), std::chrono::seconds(90));
  EXPECT_EQ(*ParseAuditExportInterval("7d"), std::chrono::seconds(7 * 86400));
  for (const char* bad : {"", "0s", "8d", "1h30", "h", "10x", "-5m", "99999999999s"}) {
    EXPECT_FALSE(ParseAuditExportInterval(bad).ok()) << bad;
  }
}

// --- Through the object store ----------------------------------------------------------------

TEST_F(AuditExportTest, WritesThroughTheObjectStore) {
  auto store = objstore::Store::Open({.root = dir_ + "/objstore"});
  ASSERT_TRUE(store.ok()) << store.status();
  auto bucket = AuditExportBucketInStore(**store, "audit-bkt", "usr_admin");
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  auto info = (*store)->GetBucket("audit-bkt");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->owner, "usr_admin");

  // An existing key is never replaced.
  ASSERT_TRUE(bucket->put_object("x/1", "one\n").ok());
  base::Status again = bucket->put_object("x/1", "two\n");
  EXPECT_EQ(again.code(), base::StatusCode::kAlreadyExists) << again;
  EXPECT_EQ(*bucket->get_object("x/1"), "one\n");

  auto exporter = AuditExporter::Start(*audit_, {.bucket = *std::move(bucket),
                                                 .interval = std::chrono::milliseconds(0),
                                                 .max_entries_per_object = 2});
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  AppendN(5);
  auto result = (*exporter)->ExportOnce();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->objects, 3);

  // Reopened (the bucket exists now): the same chain continues.
  auto reopened = AuditExportBucketInStore(**store, "audit-bkt", "usr_other");
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto keys = reopened->list_keys("audit/");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (std::vector<std::string>{Key(1, 2), Key(3, 4), Key(5, 5)}));
  std::vector<AuditExportFile> files;
  for (const std::string& key : *keys) files.push_back({key, *reopened->get_object(key)});
  AuditVerifyReport report = VerifyAuditExport(files);
  EXPECT_TRUE(report.ok) << report.problem;
  EXPECT_EQ(report.entries, 5);
  auto head = (*store)->Head("audit-bkt", Key(1, 2), std::nullopt);
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->meta.content_type, "application/x-ndjson");
  EXPECT_EQ(head->owner, "usr_admin");
  exporter->reset();

  EXPECT_FALSE(AuditExportBucketInStore(**store, "Bad_Name", "usr_admin").ok());
}

}  // namespace
}  // namespace sovai::control
