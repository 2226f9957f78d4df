// The object store under failing disks: every data file goes through base::Env, so a
// FaultInjectionEnv fails a write partway through an object, an fsync, a close, a rename or an
// unlink, and the tests check what docs/formats/objstore.md promises: the write is refused,
// nothing of it is visible (GET, HEAD, listings), what was acknowledged before stays intact, and
// files left behind are reclaimed at the next start.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/env.h"
#include "objstore/store.h"
#include "objstore/store_test_util.h"

namespace sovai::objstore::store_fault {
namespace {

namespace fs = std::filesystem;
using base::FaultOp;
using store_testing::kBodyPieceBytes;
using store_testing::Pattern;

// Larger than the 1 MiB pieces the data file writes: a few Appends, then the footer's.
constexpr size_t kObjectBytes = (3 << 20) + 12345;

class StoreFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("sovai-store-fault-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    Reopen();
    ASSERT_TRUE(store_->CreateBucket("b", "alice").ok());
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(root_);
  }
  void Reopen() {
    store_.reset();
    env_.ClearFaults();
    StoreOptions o;
    o.root = root_.string();
    o.env = &env_;
    auto s = Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }

  // Stage + Put, as the S3 front end does; the error of whichever step failed.
  S3Status PutBytes(const std::string& key, const std::string& data) {
    net::StringBodyReader body(data, kBodyPieceBytes);
    auto staged = store_->Stage(body, {});
    if (!staged.ok()) return staged.error();
    auto put = store_->Put({.bucket = "b", .key = key, .owner = "alice"}, std::move(*staged));
    if (!put.ok()) return put.error();
    return std::nullopt;
  }

  std::string Get(const std::string& key,
                  const std::optional<std::string>& version_id = std::nullopt) {
    auto v = store_->Head("b", key, version_id);
    if (!v.ok()) return "<" + std::string(v.error().name()) + ">";
    auto r = store_->Open(*v, 0, v->size);
    if (!r.ok()) return "<" + std::string(r.error().name()) + ">";
    std::string out;
    std::vector<char> buf(1 << 16);
    for (;;) {
      auto n = (*r)->Read(buf.data(), buf.size());
      if (!n.ok()) return "<" + n.status().ToString() + ">";
      if (*n == 0) break;
      out.append(buf.data(), *n);
    }
    return out;
  }

  std::vector<std::string> ListedKeys() {
    auto listed = store_->List("b", {});
    EXPECT_TRUE(listed.ok());
    std::vector<std::string> keys;
    if (listed.ok()) {
      for (const auto& o : listed->objects) keys.push_back(o.key);
    }
    return keys;
  }

  size_t FilesUnder(const std::string& sub) {
    size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(root_ / sub)) n += e.is_regular_file();
    return n;
  }

  // Everything a refused write may not change: the acknowledged object, the new key's absence,
  // the listing, and the files on disk (none left in tmp/, none added to data/).
  void ExpectOnlyTheAcknowledgedObject(const std::string& acknowledged, size_t data_files) {
    EXPECT_EQ(Get("k"), acknowledged);
    EXPECT_EQ(store_->Head("b", "new", std::nullopt).error().code, S3Code::kNoSuchKey);
    EXPECT_EQ(ListedKeys(), std::vector<std::string>{"k"});
    EXPECT_EQ(FilesUnder("tmp"), 0u);
    EXPECT_EQ(FilesUnder("data"), data_files);
  }

  fs::path root_;
  base::FaultInjectionEnv env_{base::Env::Default()};
  std::unique_ptr<Store> store_;
};

TEST_F(StoreFaultTest, AWriteThatFailsMidObjectIsRefusedAndLeavesNothing) {
  const std::string acknowledged = Pattern(kObjectBytes, 1);
  ASSERT_FALSE(PutBytes("k", acknowledged));
  const size_t data_files = FilesUnder("data");
  ASSERT_EQ(data_files, 1u);
  // Each of the data file's writes in turn: the first piece, the middle ones, the footer.
  for (int nth = 1; nth <= 4; ++nth) {
    SCOPED_TRACE("failing write " + std::to_string(nth));
    const int before = env_.Count(FaultOp::kAppend);
    env_.FailNth(FaultOp::kAppend, nth, base::ResourceExhaustedError("injected: disk full"));
    S3Status replaced = PutBytes("k", Pattern(kObjectBytes, 10 + nth));
    ASSERT_TRUE(replaced);
    EXPECT_EQ(replaced->code, S3Code::kInternalError);
    EXPECT_GE(env_.Count(FaultOp::kAppend) - before, nth);  // the fault was reached
    env_.FailNth(FaultOp::kAppend, nth);
    EXPECT_TRUE(PutBytes("new", Pattern(kObjectBytes, 20 + nth)));
    env_.ClearFaults();
    ExpectOnlyTheAcknowledgedObject(acknowledged, data_files);
  }
  Reopen();
  ExpectOnlyTheAcknowledgedObject(acknowledged, data_files);
}

TEST_F(StoreFaultTest, ASyncOrCloseThatFailsIsRefusedAndLeavesNothing) {
  const std::string acknowledged = Pattern(kObjectBytes, 2);
  ASSERT_FALSE(PutBytes("k", acknowledged));
  const size_t data_files = FilesUnder("data");
  // The data file's fsync, its close, the fsync of tmp/ that makes its name durable, and the
  // creation of the file itself.
  for (FaultOp op : {FaultOp::kSync, FaultOp::kClose, FaultOp::kSyncDir, FaultOp::kOpenWritable}) {
    SCOPED_TRACE("failing op " + std::to_string(static_cast<int>(op)));
    const int before = env_.Count(op);
    env_.FailNth(op, 1, base::InternalError("injected: I/O error"));
    S3Status replaced = PutBytes("k", Pattern(kObjectBytes, 30));
    ASSERT_TRUE(replaced);
    EXPECT_EQ(replaced->code, S3Code::kInternalError);
    EXPECT_EQ(env_.Count(op) - before, 1);
    env_.FailNth(op, 1);
    EXPECT_TRUE(PutBytes("new", Pattern(kObjectBytes, 31)));
    env_.ClearFaults();
    ExpectOnlyTheAcknowledgedObject(acknowledged, data_files);
  }
  Reopen();
  ExpectOnlyTheAcknowledgedObject(acknowledged, data_files);
}

TEST_F(StoreFaultTest, AFailedWriteKeepsEveryAcknowledgedVersion) {
  ASSERT_FALSE(store_->SetVersioning("b", Versioning::kEnabled));
  const std::string first = Pattern(kObjectBytes, 3), second = Pattern(kObjectBytes, 4);
  ASSERT_FALSE(PutBytes("k", first));
  ASSERT_FALSE(PutBytes("k", second));
  env_.FailNth(FaultOp::kAppend, 2);
  EXPECT_TRUE(PutBytes("k", Pattern(kObjectBytes, 5)));
  env_.FailNth(FaultOp::kSync, 1);
  EXPECT_TRUE(PutBytes("k", Pattern(kObjectBytes, 6)));
  env_.ClearFaults();
  auto versions = store_->ListVersions("b", {});
  ASSERT_TRUE(versions.ok());
  ASSERT_EQ(versions->versions.size(), 2u);
  EXPECT_TRUE(versions->versions[0].is_latest);
  EXPECT_EQ(Get("k"), second);
  EXPECT_EQ(Get("k", versions->versions[1].version_id), first);
  EXPECT_EQ(FilesUnder("tmp"), 0u);
  EXPECT_EQ(FilesUnder("data"), 2u);
}

TEST_F(StoreFaultTest, AFailedPartIsNotListedAndLeavesNoFile) {
  auto upload = store_->CreateUpload("b", "mp", "alice", {}, "");
  ASSERT_TRUE(upload.ok());
  net::StringBodyReader body(Pattern(kObjectBytes, 7), kBodyPieceBytes);
  env_.FailNth(FaultOp::kAppend, 3);
  auto staged = store_->Stage(body, {.allow_inline = false});
  EXPECT_FALSE(staged.ok());
  env_.ClearFaults();
  auto parts = store_->ListParts(*upload);
  ASSERT_TRUE(parts.ok());
  EXPECT_TRUE(parts->empty());
  EXPECT_EQ(FilesUnder("tmp"), 0u);
}

TEST_F(StoreFaultTest, AFileLeftBehindByAFailedWriteIsReclaimedAtTheNextStart) {
  const std::string acknowledged = Pattern(kObjectBytes, 8);
  ASSERT_FALSE(PutBytes("k", acknowledged));
  // The sync fails and so does the unlink of the half-made file, as when the disk goes away.
  env_.FailNth(FaultOp::kSync, 1);
  env_.FailAlways(FaultOp::kDelete);
  EXPECT_TRUE(PutBytes("new", Pattern(kObjectBytes, 9)));
  env_.ClearFaults();
  EXPECT_EQ(FilesUnder("tmp"), 1u);  // the orphan
  EXPECT_EQ(store_->Head("b", "new", std::nullopt).error().code, S3Code::kNoSuchKey);
  Reopen();
  EXPECT_EQ(store_->Stats().deleted_temp_files, 1u);
  EXPECT_EQ(store_->Stats().recovered_temp_files, 0u);
  ExpectOnlyTheAcknowledgedObject(acknowledged, 1);
}

TEST_F(StoreFaultTest, AMoveThatFailsAfterTheCommitLosesNothing) {
  // The write is committed, so it is acknowledged; the file stays in tmp/ until the next start.
  const std::string data = Pattern(kObjectBytes, 11);
  env_.FailNth(FaultOp::kRename, 1);
  ASSERT_FALSE(PutBytes("k", data));
  EXPECT_EQ(FilesUnder("tmp"), 1u);
  EXPECT_EQ(Get("k"), data);  // read from tmp/
  Reopen();
  EXPECT_EQ(store_->Stats().recovered_temp_files, 1u);
  EXPECT_EQ(FilesUnder("tmp"), 0u);
  EXPECT_EQ(Get("k"), data);
}

TEST_F(StoreFaultTest, AFailedReadIsAnErrorNotCorruption) {
  const std::string data = Pattern(kObjectBytes, 12);
  ASSERT_FALSE(PutBytes("k", data));
  env_.FailNth(FaultOp::kRead, 1);
  EXPECT_NE(Get("k"), data);
  EXPECT_EQ(store_->Stats().corruptions, 0u);
  EXPECT_EQ(Get("k"), data);
}

}  // namespace
}  // namespace sovai::objstore::store_fault
