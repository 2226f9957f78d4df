// Volume sync against a real in-process object store and S3 front end on a loopback port (the
// wiring of src/cli/server.cc): sync down, sync up in rw and rwd modes, the cache, unsafe keys,
// symlinks, errors, and the manifest's JSON form.
#include "exec/volume_sync.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/crypto.h"
#include "base/env.h"
#include "base/json.h"
#include "base/unit_manifest.h"
#include "exec/s3_test_server.h"
#include "net/http.h"
#include "objstore/s3_api.h"
#include "objstore/store.h"

namespace sovai::exec {
namespace {

using testing::S3TestServer;
constexpr const char* kAdminUser = testing::kS3TestAdminUser;

using base::Env;
using base::StatusCode;

VolumeSpec Spec(const std::string& text) {
  auto spec = ParseVolumeSpec(text);
  SOVAI_CHECK(spec.ok()) << spec.status();
  return *spec;
}

struct LinkInfo {
  ino_t inode = 0;
  nlink_t links = 0;
};
LinkInfo Inode(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return {};
  return {st.st_ino, st.st_nlink};
}

class VolumeSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-volume-sync-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(server_.Start(dir_).ok());
    ASSERT_TRUE(server_.store().CreateBucket("data", kAdminUser).ok());
    s3_ = std::make_unique<S3Client>(server_.ClientOptions());
    options_.progress = [this](std::string_view line) { lines_.emplace_back(line); };
  }
  void TearDown() override { env_.DeleteDirRecursive(dir_).IgnoreError(); }

  void PutObject(const std::string& key, const std::string& content) {
    const std::string path = dir_ + "/upload.tmp";
    ASSERT_TRUE(env_.WriteFileAtomically(path, content).ok());
    auto put = s3_->PutObjectFromFile("data", key, path);
    ASSERT_TRUE(put.ok()) << key << ": " << put.status();
  }
  // Every key of the bucket → its content.
  std::map<std::string, std::string> BucketContents() {
    std::map<std::string, std::string> out;
    auto listed = s3_->ListObjects("data", "");
    EXPECT_TRUE(listed.ok()) << listed.status();
    if (!listed.ok()) return out;
    for (const S3Object& o : *listed) {
      auto got = s3_->GetObjectToFile("data", o.key, dir_ + "/download.tmp");
      EXPECT_TRUE(got.ok()) << got.status();
      out[o.key] = env_.ReadFile(dir_ + "/download.tmp").value_or("<unreadable>");
    }
    return out;
  }
  std::string Read(const std::string& path) { return env_.ReadFile(path).value_or("<missing>"); }
  void Write(const std::string& path, const std::string& content) {
    ASSERT_TRUE(env_.CreateDirs(base::DirName(path)).ok());
    ASSERT_TRUE(env_.WriteFileAtomically(path, content).ok());
  }
  // Sets a file's mtime explicitly: a same-size change must be seen through its mtime, whatever
  // the filesystem's timestamp granularity.
  void SetMtime(const std::string& path, int64_t unix_seconds) {
    struct timespec times[2] = {{unix_seconds, 0}, {unix_seconds, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }
  void PutDataset() {
    PutObject("ds/a.txt", "alpha");
    PutObject("ds/sub/b.txt", "bravo bravo");
    PutObject("ds/sub/deep/c.txt", "charlie");
    PutObject("ds/empty/", "");  // a directory marker
    PutObject("other/x.txt", "not in the volume");
    PutObject("dsx/y.txt", "a string prefix match, not the directory");
  }
  bool LinesContain(const std::string& part) const {
    for (const std::string& line : lines_) {
      if (line.find(part) != std::string::npos) return true;
    }
    return false;
  }

  Env& env_ = Env::Default();
  std::string dir_;
  S3TestServer server_;
  std::unique_ptr<S3Client> s3_;
  SyncOptions options_;
  std::vector<std::string> lines_;
};

TEST_F(VolumeSyncTest, SyncDownCopiesThePrefixWithNestedDirectories) {
  PutDataset();
  const std::string vol = dir_ + "/job/data";
  auto manifest = SyncDown(*s3_, Spec("data@EU-WEST-LOCAL/ds:/workspace/data"), vol, options_);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(Read(vol + "/a.txt"), "alpha");
  EXPECT_EQ(Read(vol + "/sub/b.txt"), "bravo bravo");
  EXPECT_EQ(Read(vol + "/sub/deep/c.txt"), "charlie");
  auto empty = env_.Stat(vol + "/empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->type, base::FileType::kDirectory);
  EXPECT_FALSE(env_.FileExists(vol + "/x.txt"));
  EXPECT_FALSE(env_.FileExists(vol + "/y.txt"));
  EXPECT_FALSE(env_.FileExists(dir_ + "/job/y.txt"));

  ASSERT_EQ(manifest->files.size(), 3u);
  EXPECT_EQ(manifest->bucket, "data");
  EXPECT_EQ(manifest->prefix, "ds");
  EXPECT_EQ(manifest->files[0].path, "a.txt");
  EXPECT_EQ(manifest->files[1].path, "sub/b.txt");
  EXPECT_EQ(manifest->files[2].path, "sub/deep/c.txt");
  EXPECT_EQ(manifest->files[1].size_bytes, 11u);
  EXPECT_EQ(manifest->files[1].etag, base::HexEncode(base::Md5("bravo bravo")));
  auto stat = env_.Stat(vol + "/sub/b.txt");
  ASSERT_TRUE(stat.ok());
  EXPECT_EQ(manifest->files[1].mtime_unix_micros, stat->mtime_unix_micros);
  EXPECT_EQ(manifest->report.files, 3u);
  EXPECT_EQ(manifest->report.bytes, 5u + 11u + 7u);
  EXPECT_EQ(manifest->report.from_cache, 0u);
  EXPECT_EQ(manifest->report.skipped, 0u);
  EXPECT_EQ(manifest->report.summary,
            "sync down data@EU-WEST-LOCAL/ds: 3 files, 23 B, 0 from cache");
  EXPECT_TRUE(LinesContain("sync down data@EU-WEST-LOCAL/ds: 4 objects")) << lines_.size();
  EXPECT_EQ(lines_.back(), manifest->report.summary);
}

TEST_F(VolumeSyncTest, WholeBucketVolume) {
  PutObject("top.txt", "t");
  PutObject("d/e.txt", "e");
  const std::string vol = dir_ + "/vol";
  auto manifest = SyncDown(*s3_, Spec("data@EU-WEST-LOCAL:/mnt"), vol, options_);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->files.size(), 2u);
  EXPECT_EQ(Read(vol + "/top.txt"), "t");
  EXPECT_EQ(Read(vol + "/d/e.txt"), "e");
}

TEST_F(VolumeSyncTest, SyncUpUploadsNewAndChangedFilesAndDeletesOnlyWithRwd) {
  PutDataset();
  const std::string vol = dir_ + "/vol";
  const VolumeSpec rw = Spec("data@EU-WEST-LOCAL/ds:/workspace/data:rw");
  auto manifest = SyncDown(*s3_, rw, vol, options_);
  ASSERT_TRUE(manifest.ok()) << manifest.status();

  Write(vol + "/sub/b.txt", "BRAVO BRAVO");  // same size: seen through the mtime
  SetMtime(vol + "/sub/b.txt", 2'000'000'000);
  Write(vol + "/sub/deep/c.txt", "charlie, longer now");
  Write(vol + "/new/n.txt", "november");
  ASSERT_TRUE(env_.DeleteFile(vol + "/a.txt").ok());

  // The baseline survives a restart as JSON.
  auto baseline = SyncManifest::FromJson(manifest->ToJson());
  ASSERT_TRUE(baseline.ok()) << baseline.status();

  lines_.clear();
  auto up = SyncUp(*s3_, rw, vol, *baseline, /*delete_removed=*/false, options_);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->files, 3u);
  EXPECT_EQ(up->unchanged, 0u);
  EXPECT_EQ(up->deleted, 0u);
  EXPECT_EQ(up->summary, "sync up data@EU-WEST-LOCAL/ds: 3 files, 38 B uploaded, 0 unchanged");
  EXPECT_EQ(lines_.back(), up->summary);
  auto contents = BucketContents();
  EXPECT_EQ(contents["ds/a.txt"], "alpha");  // removed locally, kept with rw
  EXPECT_EQ(contents["ds/sub/b.txt"], "BRAVO BRAVO");
  EXPECT_EQ(contents["ds/sub/deep/c.txt"], "charlie, longer now");
  EXPECT_EQ(contents["ds/new/n.txt"], "november");
  EXPECT_EQ(contents["other/x.txt"], "not in the volume");

  // rw may not delete.
  auto refused = SyncUp(*s3_, rw, vol, *baseline, /*delete_removed=*/true, options_);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);

  auto rwd = SyncUp(*s3_, Spec("data@EU-WEST-LOCAL/ds:/workspace/data:rwd"), vol, *baseline,
                    /*delete_removed=*/true, options_);
  ASSERT_TRUE(rwd.ok()) << rwd.status();
  EXPECT_EQ(rwd->deleted, 1u);
  contents = BucketContents();
  EXPECT_EQ(contents.count("ds/a.txt"), 0u);
  EXPECT_EQ(contents["ds/sub/b.txt"], "BRAVO BRAVO");
  EXPECT_EQ(contents["ds/new/n.txt"], "november");
  EXPECT_EQ(contents["ds/empty/"], "");  // the marker was never a file: not deleted
  EXPECT_EQ(contents["dsx/y.txt"], "a string prefix match, not the directory");
  EXPECT_EQ(contents["other/x.txt"], "not in the volume");
}

TEST_F(VolumeSyncTest, SyncUpOfAnUnchangedDirectoryUploadsNothing) {
  PutDataset();
  const std::string vol = dir_ + "/vol";
  const VolumeSpec rwd = Spec("data@EU-WEST-LOCAL/ds:/mnt:rwd");
  auto manifest = SyncDown(*s3_, rwd, vol, options_);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  auto up = SyncUp(*s3_, rwd, vol, *manifest, /*delete_removed=*/true, options_);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->files, 0u);
  EXPECT_EQ(up->unchanged, 3u);
  EXPECT_EQ(up->deleted, 0u);
}

TEST_F(VolumeSyncTest, SyncUpRefusesReadOnlyVolumesAndForeignBaselines) {
  const std::string vol = dir_ + "/vol";
  ASSERT_TRUE(env_.CreateDirs(vol).ok());
  SyncManifest empty;
  auto ro = SyncUp(*s3_, Spec("data@EU-WEST-LOCAL/ds:/mnt"), vol, empty, false, options_);
  EXPECT_EQ(ro.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(ro.status().message().find("read-only"), std::string::npos);
  SyncManifest other;
  other.bucket = "data";
  other.prefix = "elsewhere";
  auto foreign = SyncUp(*s3_, Spec("data@EU-WEST-LOCAL/ds:/mnt:rwd"), vol, other, true, options_);
  EXPECT_EQ(foreign.status().code(), StatusCode::kFailedPrecondition);
  auto missing =
      SyncUp(*s3_, Spec("data@EU-WEST-LOCAL/ds:/mnt:rw"), dir_ + "/nope", empty, false, options_);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST_F(VolumeSyncTest, TheCacheServesUnchangedObjectsAndAChangedOneIsDownloadedAgain) {
  PutDataset();
  options_.cache_dir = dir_ + "/cache";
  const VolumeSpec ro = Spec("data@EU-WEST-LOCAL/ds:/mnt:ro:cache");
  auto first = SyncDown(*s3_, ro, dir_ + "/job1", options_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->report.from_cache, 0u);

  PutObject("ds/sub/b.txt", "bravo, changed");
  auto second = SyncDown(*s3_, ro, dir_ + "/job2", options_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->report.files, 3u);
  EXPECT_EQ(second->report.from_cache, 2u);
  EXPECT_EQ(second->report.summary, "sync down data@EU-WEST-LOCAL/ds: 3 files, 26 B, 2 from cache");
  EXPECT_EQ(Read(dir_ + "/job2/a.txt"), "alpha");
  EXPECT_EQ(Read(dir_ + "/job2/sub/b.txt"), "bravo, changed");
  EXPECT_EQ(Read(dir_ + "/job2/sub/deep/c.txt"), "charlie");
  EXPECT_EQ(second->Find("sub/b.txt")->etag, base::HexEncode(base::Md5("bravo, changed")));
  // Read-only volumes share the cached inode.
  EXPECT_EQ(Inode(dir_ + "/job1/a.txt").inode, Inode(dir_ + "/job2/a.txt").inode);

  // A writable volume gets its own copies: writing into them cannot alter the cache.
  auto rw = SyncDown(*s3_, Spec("data@EU-WEST-LOCAL/ds:/mnt:rw:cache"), dir_ + "/job3", options_);
  ASSERT_TRUE(rw.ok()) << rw.status();
  EXPECT_EQ(rw->report.from_cache, 3u);
  EXPECT_EQ(Inode(dir_ + "/job3/a.txt").links, 1u);
  EXPECT_NE(Inode(dir_ + "/job3/a.txt").inode, Inode(dir_ + "/job1/a.txt").inode);
  EXPECT_EQ(Read(dir_ + "/job3/sub/b.txt"), "bravo, changed");

  // A cache over its limit drops copies (the volume's files stay whole).
  options_.cache_max_bytes = 0;
  auto evicting = SyncDown(*s3_, ro, dir_ + "/job4", options_);
  ASSERT_TRUE(evicting.ok()) << evicting.status();
  auto cached = env_.ListDir(dir_ + "/cache/objects");
  ASSERT_TRUE(cached.ok());
  EXPECT_TRUE(cached->empty()) << cached->size();
  EXPECT_EQ(Read(dir_ + "/job4/a.txt"), "alpha");
}

TEST_F(VolumeSyncTest, KeysThatWouldEscapeTheDirectoryAreSkippedWithAWarning) {
  PutObject("ds/ok.txt", "fine");
  PutObject("ds/../escape.txt", "outside");
  PutObject("ds/a/../../escape2.txt", "outside too");
  PutObject("ds//abs.txt", "absolute");
  PutObject("ds/./dot.txt", "aliased");
  PutObject("ds/f", "a file");
  PutObject("ds/f/g", "needs f to be a directory");
  const std::string vol = dir_ + "/work/vol";
  auto manifest = SyncDown(*s3_, Spec("data@EU-WEST-LOCAL/ds:/mnt"), vol, options_);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_EQ(manifest->files.size(), 2u);
  EXPECT_EQ(manifest->files[0].path, "f");
  EXPECT_EQ(manifest->files[1].path, "ok.txt");
  EXPECT_EQ(manifest->report.skipped, 5u);
  EXPECT_EQ(manifest->report.warnings.size(), 5u);
  for (const char* name : {"escape.txt", "escape2.txt", "abs.txt", "dot.txt"}) {
    EXPECT_FALSE(env_.FileExists(dir_ + "/work/" + name)) << name;
    EXPECT_FALSE(env_.FileExists(dir_ + "/" + name)) << name;
    EXPECT_FALSE(env_.FileExists(vol + "/" + name)) << name;
  }
  auto listing = env_.ListDir(vol);
  ASSERT_TRUE(listing.ok());
  EXPECT_EQ(*listing, (std::vector<std::string>{"f", "ok.txt"}));
  EXPECT_TRUE(
      LinesContain("warning: skipped key 'ds/../escape.txt': path '../escape.txt' has "
                   "a '..' segment"));
  EXPECT_TRUE(LinesContain("warning: skipped key 'ds/f/g': 'f' is not a directory"));
  EXPECT_TRUE(LinesContain("5 skipped"));
}

TEST_F(VolumeSyncTest, TheLongestAcceptedNameSyncsDownAndALongerOneIsSkipped) {
  const std::string longest(kMaxSyncedNameBytes, 'n');
  PutObject("ds/" + longest, "long");
  PutObject("ds/" + longest + "x", "too long for a temporary name");
  options_.cache_dir = dir_ + "/cache";
  auto manifest =
      SyncDown(*s3_, Spec("data@EU-WEST-LOCAL/ds:/mnt:ro:cache"), dir_ + "/vol", options_);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(Read(dir_ + "/vol/" + longest), "long");
  EXPECT_EQ(manifest->report.files, 1u);
  EXPECT_EQ(manifest->report.skipped, 1u);
}

TEST_F(VolumeSyncTest, SyncDownNeverWritesThroughASymlinkedDirectory) {
  PutObject("ds/link/inside.txt", "would land outside");
  const std::string vol = dir_ + "/vol";
  const std::string outside = dir_ + "/outside";
  ASSERT_TRUE(env_.CreateDirs(vol).ok());
  ASSERT_TRUE(env_.CreateDirs(outside).ok());
  ASSERT_EQ(::symlink(outside.c_str(), (vol + "/link").c_str()), 0);
  auto manifest = SyncDown(*s3_, Spec("data@EU-WEST-LOCAL/ds:/mnt"), vol, options_);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->report.skipped, 1u);
  EXPECT_FALSE(env_.FileExists(outside + "/inside.txt"));
}

TEST_F(VolumeSyncTest, SyncUpSkipsSymlinksAndTemporaries) {
  const std::string vol = dir_ + "/vol";
  ASSERT_TRUE(env_.CreateDirs(vol + "/real").ok());
  Write(vol + "/real/file.txt", "real");
  Write(dir_ + "/secret.txt", "must not be uploaded");
  ASSERT_EQ(::symlink((dir_ + "/secret.txt").c_str(), (vol + "/file-link").c_str()), 0);
  ASSERT_EQ(::symlink(dir_.c_str(), (vol + "/dir-link").c_str()), 0);
  Write(vol + "/.x.sovai-tmp.0123456789abcdef", "a crashed download");
  auto up =
      SyncUp(*s3_, Spec("data@EU-WEST-LOCAL/out:/mnt:rw"), vol, SyncManifest{}, false, options_);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->files, 1u);
  EXPECT_EQ(up->skipped, 2u);
  EXPECT_TRUE(LinesContain("warning: skipped 'file-link': symlinks are not followed"));
  auto contents = BucketContents();
  EXPECT_EQ(contents.size(), 1u);
  EXPECT_EQ(contents["out/real/file.txt"], "real");
}

TEST_F(VolumeSyncTest, MissingBucketAndWrongSecretAreClearErrors) {
  auto missing =
      SyncDown(*s3_, Spec("nosuchbucket@EU-WEST-LOCAL/ds:/mnt"), dir_ + "/vol", options_);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("NoSuchBucket"), std::string::npos) << missing.status();

  S3ClientOptions options = server_.ClientOptions();
  options.secret_key = "wrong";
  S3Client wrong(options);
  auto denied = SyncDown(wrong, Spec("data@EU-WEST-LOCAL/ds:/mnt"), dir_ + "/vol", options_);
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(denied.status().message().find("SignatureDoesNotMatch"), std::string::npos)
      << denied.status();
}

TEST_F(VolumeSyncTest, ALargeFileGoesUpInPartsAndComesBackIdentical) {
  S3ClientOptions options = server_.ClientOptions();
  options.multipart_threshold_bytes = 1 << 20;
  options.part_size_bytes = kMinPartSizeBytes;
  S3Client s3(options);
  const std::string vol = dir_ + "/vol";
  std::string big = base::RandomBytes(kMinPartSizeBytes + 4321);
  Write(vol + "/model/weights.bin", big);
  auto up =
      SyncUp(s3, Spec("data@EU-WEST-LOCAL/out:/mnt:rw"), vol, SyncManifest{}, false, options_);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->bytes, big.size());
  auto down = SyncDown(s3, Spec("data@EU-WEST-LOCAL/out:/mnt"), dir_ + "/back", options_);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_TRUE(down->files[0].etag.ends_with("-2")) << down->files[0].etag;
  EXPECT_TRUE(Read(dir_ + "/back/model/weights.bin") == big);
}

TEST_F(VolumeSyncTest, UnitsGoUpManifestLastAndComeDownWholeOrNotAtAll) {
  const std::string vol = dir_ + "/vol";
  Write(vol + "/checkpoint-1/model.bin", "weights-1");
  Write(vol + "/checkpoint-1/state.json", "{}");
  Write(vol + "/checkpoints/.tmp-step-00000002-7/half.bin", "a staging directory");
  Write(vol + "/plain/a.txt", "ordinary");
  SyncManifest stored;
  auto up = SyncUp(*s3_, Spec("data@EU-WEST-LOCAL/out:/mnt:rw"), vol, SyncManifest{}, false,
                   options_, &stored);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->units, 1u);
  EXPECT_EQ(up->files, 3u);  // the staging directory stays local
  auto contents = BucketContents();
  EXPECT_EQ(contents.count("out/checkpoints/.tmp-step-00000002-7/half.bin"), 0u);
  auto manifest = base::UnitManifest::FromJson(contents["out/checkpoint-1/.sovai-unit.json"]);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_TRUE(manifest->complete);
  ASSERT_EQ(manifest->files.size(), 2u);
  ASSERT_NE(stored.Find("checkpoint-1/.sovai-unit.json"), nullptr);
  // Nothing changed: nothing goes up again, the unit included.
  auto again = SyncUp(*s3_, Spec("data@EU-WEST-LOCAL/out:/mnt:rw"), vol, stored, false, options_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->files, 0u);
  EXPECT_EQ(again->units, 0u);

  // A unit interrupted after its first file, and one whose file is not the listed version.
  PutObject("out/checkpoint-2/.sovai-unit.json", base::UnitManifest{}.ToJson());
  PutObject("out/checkpoint-2/model.bin", "half of a checkpoint");
  base::UnitManifest stale;
  stale.complete = true;
  stale.files = {{"model.bin", 9, "0000"}};
  PutObject("out/checkpoint-3/model.bin", "weights-3");
  PutObject("out/checkpoint-3/.sovai-unit.json", stale.ToJson());
  // An object added to a complete unit after its manifest is not part of it.
  PutObject("out/checkpoint-1/extra.bin", "not listed");

  auto down = SyncDown(*s3_, Spec("data@EU-WEST-LOCAL/out:/mnt"), dir_ + "/back", options_);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(Read(dir_ + "/back/checkpoint-1/model.bin"), "weights-1");
  EXPECT_TRUE(base::CheckLocalUnit(env_, dir_ + "/back/checkpoint-1").ok());
  EXPECT_FALSE(env_.FileExists(dir_ + "/back/checkpoint-1/extra.bin"));
  EXPECT_FALSE(env_.FileExists(dir_ + "/back/checkpoint-2"));
  EXPECT_FALSE(env_.FileExists(dir_ + "/back/checkpoint-3"));
  EXPECT_EQ(Read(dir_ + "/back/plain/a.txt"), "ordinary");
  EXPECT_TRUE(LinesContain("skipped unit 'checkpoint-2': it is still being written"));
  EXPECT_TRUE(LinesContain("skipped unit 'checkpoint-3': 'model.bin' is not the version"));
}

TEST_F(VolumeSyncTest, RwdRemovesAUnitsManifestBeforeItsFiles) {
  const std::string vol = dir_ + "/vol";
  Write(vol + "/checkpoints/step-00000001/state.json", "{}");
  auto spec = Spec("data@EU-WEST-LOCAL/out:/mnt:rwd");
  SyncManifest stored;
  ASSERT_TRUE(SyncUp(*s3_, spec, vol, SyncManifest{}, true, options_, &stored).ok());
  EXPECT_EQ(BucketContents().count("out/checkpoints/step-00000001/.sovai-unit.json"), 1u);
  // The unit's manifest is no local file: it stays while the directory does...
  auto kept = SyncUp(*s3_, spec, vol, stored, true, options_, &stored);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->deleted, 0u);
  // A file removed from a unit: the manifest is rewritten without it before its object goes.
  Write(vol + "/checkpoints/step-00000001/scratch.bin", "temporary");
  ASSERT_TRUE(SyncUp(*s3_, spec, vol, stored, true, options_, &stored).ok());
  ASSERT_TRUE(env_.DeleteFile(vol + "/checkpoints/step-00000001/scratch.bin").ok());
  auto trimmed = SyncUp(*s3_, spec, vol, stored, true, options_, &stored);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status();
  EXPECT_EQ(trimmed->deleted, 1u);
  auto contents = BucketContents();
  EXPECT_EQ(contents.count("out/checkpoints/step-00000001/scratch.bin"), 0u);
  auto manifest =
      base::UnitManifest::FromJson(contents["out/checkpoints/step-00000001/.sovai-unit.json"]);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_TRUE(manifest->complete);
  ASSERT_EQ(manifest->files.size(), 1u);
  EXPECT_EQ(manifest->files[0].path, "state.json");
  // ...and goes with it.
  ASSERT_TRUE(env_.DeleteDirRecursive(vol + "/checkpoints/step-00000001").ok());
  auto gone = SyncUp(*s3_, spec, vol, stored, true, options_, &stored);
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(gone->deleted, 2u);
  EXPECT_TRUE(BucketContents().empty());
  EXPECT_TRUE(stored.files.empty());
}

TEST(UnitRulesTest, CheckpointNamesMarkersAndStagingDirectories) {
  auto none = [](const std::string&) { return false; };
  EXPECT_EQ(UnitDirFor("checkpoint-500/model.safetensors", none), "checkpoint-500");
  EXPECT_EQ(UnitDirFor("run/checkpoint-7/sub/x.pt", none), "run/checkpoint-7");
  EXPECT_EQ(UnitDirFor("checkpoints/step-00000010/state.json", none), "checkpoints/step-00000010");
  EXPECT_EQ(UnitDirFor("step-10/state.json", none), "");  // not under checkpoints/
  EXPECT_EQ(UnitDirFor("checkpoint-x/a", none), "");
  EXPECT_EQ(UnitDirFor("checkpoint-500", none), "");  // a file, not a directory
  EXPECT_EQ(UnitDirFor("notes.txt", none), "");
  auto marked = [](const std::string& dir) { return dir == "exports/v1"; };
  EXPECT_EQ(UnitDirFor("exports/v1/deep/w.bin", marked), "exports/v1");
  EXPECT_TRUE(IsStagingPath("checkpoints/.tmp-step-00000002-9/a"));
  EXPECT_TRUE(IsStagingPath("tmp-checkpoint-20/model.safetensors"));
  EXPECT_FALSE(IsStagingPath(".tmp-file"));  // a file, not a directory
  EXPECT_FALSE(IsStagingPath("checkpoint-20/a"));
}

TEST(SyncManifestTest, JsonRoundTrip) {
  SyncManifest m;
  m.bucket = "data";
  m.prefix = "ds/sub";
  m.files = {{"a.txt", 5, "0123abcd", 1'700'000'000'123'456},
             {"dir/ü b+c.bin", 1ull << 40, "ffee-3", -1}};
  m.report.files = 2;
  m.report.bytes = 99;
  m.report.from_cache = 1;
  m.report.skipped = 1;
  m.report.warnings = {"skipped key 'ds/sub/../x': path '../x' has a '..' segment"};
  m.report.summary = "sync down data@EU-WEST-LOCAL/ds/sub: 2 files, 99 B, 1 from cache";
  auto back = SyncManifest::FromJson(m.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, m);
  EXPECT_EQ(back->Find("dir/ü b+c.bin")->size_bytes, 1ull << 40);
  EXPECT_EQ(back->Find("missing"), nullptr);
}

TEST(SyncManifestTest, MalformedManifestsAreRefused) {
  SyncManifest m;
  m.bucket = "data";
  m.files = {{"a", 1, "e", 1}, {"b", 1, "e", 1}};
  auto doc = base::ParseJson(m.ToJson());
  ASSERT_TRUE(doc.ok());
  struct Case {
    std::string name;
    std::function<void(nlohmann::json&)> mutate;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"not json", nullptr, "invalid JSON"},
      {"format", [](nlohmann::json& j) { j["format"] = "other"; }, "not a manifest"},
      {"version", [](nlohmann::json& j) { j["version"] = 2; }, "version 2 is not supported"},
      {"files type", [](nlohmann::json& j) { j["files"] = "x"; }, "files"},
      {"escaping path", [](nlohmann::json& j) { j["files"][0]["path"] = "../x"; },
       "not a safe relative path"},
      {"absolute path", [](nlohmann::json& j) { j["files"][0]["path"] = "/etc/passwd"; },
       "not a safe relative path"},
      {"unsorted", [](nlohmann::json& j) { j["files"][0]["path"] = "c"; }, "not sorted"},
      {"duplicate", [](nlohmann::json& j) { j["files"][1]["path"] = "a"; }, "not sorted"},
      {"negative size", [](nlohmann::json& j) { j["files"][0]["size"] = -1; }, "size"},
      {"missing etag", [](nlohmann::json& j) { j["files"][0].erase("etag"); }, "etag"},
      {"missing report", [](nlohmann::json& j) { j.erase("report"); }, "report"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string text = "{not json";
    if (c.mutate) {
      nlohmann::json j = *doc;
      c.mutate(j);
      text = base::DumpJson(j);
    }
    auto parsed = SyncManifest::FromJson(text);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.message_part), std::string::npos) << parsed.status();
  }
}

}  // namespace
}  // namespace sovai::exec
