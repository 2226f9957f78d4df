#include "cli/client/bucket_ops.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sovai::cli::client {
namespace {

TEST(S3UriTest, ParsesBucketAndKey) {
  EXPECT_EQ(**ParseS3Uri("s3://data/ds/a.txt"), (S3Location{"data", "ds/a.txt"}));
  EXPECT_EQ(**ParseS3Uri("s3://data"), (S3Location{"data", ""}));
  EXPECT_EQ(**ParseS3Uri("s3://data/"), (S3Location{"data", ""}));
  EXPECT_EQ(**ParseS3Uri("s3://data/dir/"), (S3Location{"data", "dir/"}));
  EXPECT_FALSE(ParseS3Uri("./local/file")->has_value());
  EXPECT_FALSE(ParseS3Uri("S3://x")->has_value());  // a local path, as in the AWS CLI
  EXPECT_FALSE(ParseS3Uri("s3://").ok());
  EXPECT_FALSE(ParseS3Uri("s3:///key").ok());
  EXPECT_EQ(*ParseBucketPath("data/ds"), (S3Location{"data", "ds"}));
  EXPECT_EQ(*ParseBucketPath("s3://data/ds"), (S3Location{"data", "ds"}));
  EXPECT_EQ(*ParseBucketPath("data"), (S3Location{"data", ""}));
  EXPECT_EQ(ParseBucketPath("/ds").status().message(),
            "'s3:///ds' names no bucket; write s3://bucket/key");
  EXPECT_FALSE(ParseBucketPath("s3://").ok());
  EXPECT_EQ(S3Uri({"data", "ds/a"}), "s3://data/ds/a");
}

TEST(PlanSyncTest, CopiesNewChangedAndNewerOnly) {
  constexpr int64_t kS = 1'000'000;
  SyncListing source = {{"same", {5, 100 * kS}},    {"new", {1, 100 * kS}},
                        {"resized", {7, 100 * kS}}, {"newer", {5, 300 * kS}},
                        {"older", {5, 100 * kS}},   {"same-second", {5, 200 * kS + 900'000}}};
  SyncListing destination = {{"same", {5, 200 * kS}},        {"resized", {6, 200 * kS}},
                             {"newer", {5, 200 * kS}},       {"older", {5, 200 * kS}},
                             {"same-second", {5, 200 * kS}}, {"extra", {9, kS}}};
  SyncPlan plan = PlanSync(source, destination, /*delete_extra=*/false);
  EXPECT_EQ(plan.copy, (std::vector<std::string>{"new", "newer", "resized"}));
  EXPECT_TRUE(plan.remove.empty());
  EXPECT_EQ(plan.unchanged, 3u);
  EXPECT_EQ(plan.copy_bytes, 13u);
  SyncPlan mirror = PlanSync(source, destination, /*delete_extra=*/true);
  EXPECT_EQ(mirror.remove, std::vector<std::string>{"extra"});
  // A second sync after copying changes nothing: copies are newer than their sources.
  SyncListing after = destination;
  for (const std::string& path : plan.copy) after[path] = {source[path].size_bytes, 1000 * kS};
  EXPECT_TRUE(PlanSync(source, after, false).copy.empty());
}

TEST(RelativeObjectsTest, DirectorySemanticsAndUnsafeKeysSkipped) {
  std::vector<exec::S3Object> objects = {
      {"ds/a.txt", 1, "e", 10},        {"ds/sub/b.txt", 2, "e", 20}, {"ds/", 0, "e", 0},
      {"ds/../etc/passwd", 3, "e", 0}, {"ds//x", 4, "e", 0},         {"dsx/c", 5, "e", 0},
  };
  std::vector<std::string> warnings;
  SyncListing listing = RelativeObjects("data", "ds/", objects, &warnings);
  EXPECT_EQ(listing, (SyncListing{{"a.txt", {1, 10}}, {"sub/b.txt", {2, 20}}}));
  EXPECT_EQ(warnings.size(), 3u);  // "..", "//" and the key outside the prefix
  for (const std::string& w : warnings) EXPECT_NE(w.find("skipped s3://data/"), std::string::npos);
  std::vector<std::string> none;
  EXPECT_EQ(RelativeObjects("data", "", {{"k", 1, "e", 1}}, &none), (SyncListing{{"k", {1, 1}}}));
}

TEST(ListLocalFilesTest, WalksRegularFilesOnly) {
  char tmpl[] = "/tmp/sovai-cli-walk-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  base::Env& env = base::Env::Default();
  ASSERT_TRUE(env.CreateDirs(dir + "/sub/deeper").ok());
  ASSERT_TRUE(env.WriteFileAtomically(dir + "/a.txt", "hello").ok());
  ASSERT_TRUE(env.WriteFileAtomically(dir + "/sub/deeper/b.bin", "123").ok());
  ASSERT_EQ(symlink("/etc/passwd", (dir + "/link").c_str()), 0);
  ASSERT_EQ(symlink("/etc", (dir + "/dirlink").c_str()), 0);
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  std::vector<std::string> warnings;
  auto files = ListLocalFiles(dir, &warnings);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ(files->at("a.txt").size_bytes, 5u);
  EXPECT_GT(files->at("a.txt").mtime_unix_micros, 0);
  EXPECT_EQ(files->at("sub/deeper/b.bin").size_bytes, 3u);
  EXPECT_EQ(warnings.size(), 3u);  // two symlinks and the FIFO
  EXPECT_FALSE(ListLocalFiles(dir + "/a.txt", &warnings).ok());
  EXPECT_FALSE(ListLocalFiles(dir + "/missing", &warnings).ok());
  env.DeleteDirRecursive(dir).IgnoreError();
}

}  // namespace
}  // namespace sovai::cli::client
