// The live sync against a real in-process object store and S3 front end on a loopback port:
// files reach the bucket while "the workload" (this test) writes, once closed and settled;
// checkpoint directories appear whole, manifest last; staging directories never go up; the
// manifest file records what was stored, so the final sync-up uploads only what is pending.
#include "exec/live_sync.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "base/env.h"
#include "base/unit_manifest.h"
#include "exec/s3_test_server.h"
#include "exec/volume_sync.h"

namespace sovai::exec {
namespace {

using base::Env;
using testing::S3TestServer;

// Polls `ready` until it holds or a generous bound passes (no timing is asserted: the bound
// only keeps a broken build from hanging).
bool Eventually(const std::function<bool()>& ready) {
  for (int i = 0; i < 600; ++i) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ready();
}

class LiveSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-live-sync-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(server_.Start(dir_).ok());
    ASSERT_TRUE(server_.store().CreateBucket("out", testing::kS3TestAdminUser).ok());
    s3_ = std::make_unique<S3Client>(server_.ClientOptions());

    spec_.id = "job_live";
    spec_.dir = dir_ + "/job";
    auto volume = ParseVolumeSpec("out@EU-WEST-LOCAL/run:/workspace/output:rwd:sync=1s");
    ASSERT_TRUE(volume.ok());
    spec_.volumes.push_back({*volume, "", server_.ClientOptions()});
    volume_dir_ = WorkloadVolumeDir(spec_.dir, 0);
    ASSERT_TRUE(env_.CreateDirs(volume_dir_).ok());
    // As StageVolumesIn leaves it: the volume synced down, its manifest beside it.
    auto manifest = SyncDown(*s3_, spec_.volumes[0].spec, volume_dir_);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    ASSERT_TRUE(
        env_.WriteFileAtomically(WorkloadManifestPath(spec_.dir, 0), manifest->ToJson()).ok());
  }
  void TearDown() override { env_.DeleteDirRecursive(dir_).IgnoreError(); }

  std::unique_ptr<LiveSync> Start() {
    return std::make_unique<LiveSync>(
        env_, spec_, [this](std::string_view line) { Say(line); },
        LiveSyncOptions{.settle_micros = 300'000});
  }
  void Say(std::string_view line) {
    std::lock_guard lock(mu_);
    lines_.emplace_back(line);
  }
  void Write(const std::string& relative, const std::string& content) {
    const std::string path = volume_dir_ + "/" + relative;
    ASSERT_TRUE(env_.CreateDirs(base::DirName(path)).ok());
    ASSERT_TRUE(env_.WriteFileAtomically(path, content).ok());
  }
  std::map<std::string, S3Object> Objects() {
    std::map<std::string, S3Object> out;
    auto listed = s3_->ListObjects("out", "run/");
    if (listed.ok()) {
      for (S3Object& o : *listed) out[o.key] = o;
    }
    return out;
  }
  std::string Get(const std::string& key) {
    auto got = s3_->GetObjectToFile("out", key, dir_ + "/download.tmp");
    if (!got.ok()) return "<" + got.status().message() + ">";
    return env_.ReadFile(dir_ + "/download.tmp").value_or("<unreadable>");
  }

  Env& env_ = Env::Default();
  S3TestServer server_;
  std::unique_ptr<S3Client> s3_;
  std::string dir_, volume_dir_;
  WorkloadSpec spec_;
  std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST_F(LiveSyncTest, AClosedFileReachesTheBucketWhileTheWorkloadRuns) {
  auto live = Start();
  EXPECT_TRUE(live->Report().active);
  Write("notes/a.txt", "alpha");
  ASSERT_TRUE(Eventually([&] { return Objects().count("run/notes/a.txt") == 1; }));
  EXPECT_EQ(Get("run/notes/a.txt"), "alpha");

  // A rewrite goes up again.
  Write("notes/a.txt", "alpha, second version");
  ASSERT_TRUE(Eventually([&] { return Get("run/notes/a.txt") == "alpha, second version"; }));
  ASSERT_TRUE(Eventually([&] { return live->Report().pending_files == 0; }));
  LiveSyncStatus report = live->Report();
  EXPECT_GE(report.uploaded_files, 2u);
  EXPECT_GT(report.last_sync_unix_micros, 0);
  live->Stop();

  // The manifest records what is in the bucket: the final sync-up has nothing left to do.
  auto text = env_.ReadFile(WorkloadManifestPath(spec_.dir, 0));
  ASSERT_TRUE(text.ok());
  auto baseline = SyncManifest::FromJson(*text);
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  ASSERT_NE(baseline->Find("notes/a.txt"), nullptr);
  auto final_sync = SyncUp(*s3_, spec_.volumes[0].spec, volume_dir_, *baseline, true);
  ASSERT_TRUE(final_sync.ok()) << final_sync.status();
  EXPECT_EQ(final_sync->files, 0u);
  EXPECT_EQ(final_sync->deleted, 0u);
}

TEST_F(LiveSyncTest, AFileStillOpenForWritingWaitsForItsClose) {
  auto live = Start();
  const std::string path = volume_dir_ + "/log.txt";
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "partial", 7), 7);
  // Well past a round and the settle time: still open, so not uploaded.
  Write("marker.txt", "m");
  ASSERT_TRUE(Eventually([&] { return Objects().count("run/marker.txt") == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(Objects().count("run/log.txt"), 0u);
  EXPECT_GE(live->Report().pending_files, 1u);
  ASSERT_EQ(::write(fd, " then whole", 11), 11);
  ::close(fd);
  ASSERT_TRUE(Eventually([&] { return Get("run/log.txt") == "partial then whole"; }));
}

TEST_F(LiveSyncTest, ACheckpointDirectoryAppearsWholeWithItsManifestLast) {
  auto live = Start();
  // sovai-engine's way: a staging directory renamed into place.
  Write("checkpoints/.tmp-step-00000010-1/trainable.safetensors", std::string(1000, 'w'));
  Write("checkpoints/.tmp-step-00000010-1/state.json", "{\"step\": 10}");
  ASSERT_EQ(::rename((volume_dir_ + "/checkpoints/.tmp-step-00000010-1").c_str(),
                     (volume_dir_ + "/checkpoints/step-00000010").c_str()),
            0);
  const std::string manifest_key =
      "run/checkpoints/step-00000010/" + std::string(base::kUnitManifestName);
  ASSERT_TRUE(Eventually([&] {
    auto m = base::UnitManifest::FromJson(Get(manifest_key));
    return m.ok() && m->complete;
  }));
  auto objects = Objects();
  for (const auto& [key, o] : objects) {
    EXPECT_EQ(key.find(".tmp-"), std::string::npos) << "a staging file went up: " << key;
  }
  auto manifest = base::UnitManifest::FromJson(Get(manifest_key));
  ASSERT_TRUE(manifest.ok());
  ASSERT_EQ(manifest->files.size(), 2u);
  EXPECT_EQ(manifest->files[0].path, "state.json");
  EXPECT_EQ(manifest->files[1].path, "trainable.safetensors");
  for (const base::UnitFile& f : manifest->files) {
    const S3Object& o = objects.at("run/checkpoints/step-00000010/" + f.path);
    EXPECT_EQ(o.size_bytes, f.size_bytes);
    EXPECT_EQ(o.etag, f.etag);
    // The manifest is written after every file it lists.
    EXPECT_LE(o.last_modified_unix_micros, objects.at(manifest_key).last_modified_unix_micros);
  }
  EXPECT_GE(live->Report().units, 1u);

  // A Hugging Face checkpoint whose files are written one after the other: the unit waits
  // until none changed for the settle time, then goes up with all of them.
  Write("checkpoint-500/model.safetensors", std::string(2000, 'm'));
  Write("checkpoint-500/trainer_state.json", "{}");
  const std::string hf_key = "run/checkpoint-500/" + std::string(base::kUnitManifestName);
  ASSERT_TRUE(Eventually([&] {
    auto m = base::UnitManifest::FromJson(Get(hf_key));
    return m.ok() && m->complete;
  }));
  EXPECT_EQ(base::UnitManifest::FromJson(Get(hf_key))->files.size(), 2u);
}

TEST_F(LiveSyncTest, ADirectoryWithTheMarkerIsAUnit) {
  auto live = Start();
  Write("exports/v1/weights.bin", std::string(100, 'x'));
  Write("exports/v1/" + std::string(base::kUnitMarkerName), "");
  const std::string key = "run/exports/v1/" + std::string(base::kUnitManifestName);
  ASSERT_TRUE(Eventually([&] {
    auto m = base::UnitManifest::FromJson(Get(key));
    return m.ok() && m->complete;
  }));
  auto manifest = base::UnitManifest::FromJson(Get(key));
  ASSERT_EQ(manifest->files.size(), 2u);  // the marker is one of its files
  EXPECT_NE(manifest->Find("weights.bin"), nullptr);
}

TEST_F(LiveSyncTest, ALargeFileGoesUpAsMultipart) {
  auto live = Start();
  std::string big(20u << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 131) >> 7);
  Write("big.bin", big);
  ASSERT_TRUE(Eventually([&] { return Objects().count("run/big.bin") == 1; }));
  const S3Object o = Objects().at("run/big.bin");
  EXPECT_EQ(o.size_bytes, big.size());
  EXPECT_NE(o.etag.find('-'), std::string::npos) << "a multipart ETag ends in -<parts>: " << o.etag;
  EXPECT_EQ(Get("run/big.bin"), big);
}

TEST_F(LiveSyncTest, SyncNowUploadsWhatIsUnsettledAtOnce) {
  auto live = std::make_unique<LiveSync>(
      env_, spec_, [this](std::string_view line) { Say(line); },
      LiveSyncOptions{.settle_micros = 3'600'000'000});  // an hour: only SyncNow uploads
  Write("now.txt", "pushed");
  ASSERT_TRUE(live->SyncNow().ok());
  EXPECT_EQ(Get("run/now.txt"), "pushed");
}

TEST_F(LiveSyncTest, FilesWrittenBeforeTheStartAreFoundByTheFirstScan) {
  Write("early/before.txt", "written while the volume synced down");
  auto live = Start();
  ASSERT_TRUE(Eventually([&] { return Objects().count("run/early/before.txt") == 1; }));
}

TEST_F(LiveSyncTest, NoLiveVolumeStartsNothing) {
  spec_.volumes[0].spec.sync_interval_s = 0;  // sync=end
  auto live = Start();
  EXPECT_FALSE(live->Report().active);
  Write("a.txt", "a");
  EXPECT_TRUE(live->SyncNow().ok());
  EXPECT_EQ(Objects().count("run/a.txt"), 0u);
}

}  // namespace
}  // namespace sovai::exec
