// Volume specs (docs/formats/volume-spec.md): parsing, the job-level checks, and the mapping
// between object keys and files.
#include "exec/volume_spec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "exec/volume_limits.h"

namespace sovai::exec {
namespace {

using base::Status;
using base::StatusCode;

struct GoodCase {
  std::string text;
  VolumeSpec want;
};

TEST(ParseVolumeSpecTest, AcceptsTheReferenceSyntax) {
  using P = VolumePermission;
  const std::vector<GoodCase> cases = {
      {"data@EU-WEST-LOCAL/ds:/workspace/data",
       {"data", "EU-WEST-LOCAL", "ds", "/workspace/data", P::kReadOnly, false}},
      {"data@EU-WEST-LOCAL:/mnt", {"data", "EU-WEST-LOCAL", "", "/mnt", P::kReadOnly, false}},
      {"data@EU-WEST-LOCAL/:/mnt", {"data", "EU-WEST-LOCAL", "", "/mnt", P::kReadOnly, false}},
      {"data@eu-west-local/a/b/c:/mnt/x:rw",
       {"data", "eu-west-local", "a/b/c", "/mnt/x", P::kReadWrite, false}},
      {"data@EU-WEST/ds/:/mnt:rwd:cache",
       {"data", "EU-WEST", "ds", "/mnt", P::kReadWriteDelete, true}},
      {"data@EU-WEST/ds:/mnt:cache:rw", {"data", "EU-WEST", "ds", "/mnt", P::kReadWrite, true}},
      {"data@EU-WEST/ds:/mnt:no-cache:ro", {"data", "EU-WEST", "ds", "/mnt", P::kReadOnly, false}},
      {"data@EU-WEST/ds:/mnt:cache", {"data", "EU-WEST", "ds", "/mnt", P::kReadOnly, true}},
      {"my.bucket-1@GRA/models/llama 3/ü+x:/workspace/out:rw",
       {"my.bucket-1", "GRA", "models/llama 3/ü+x", "/workspace/out", P::kReadWrite, false}},
      {"abc@R1:/workspace/my data", {"abc", "R1", "", "/workspace/my data", P::kReadOnly, false}},
      // Only the first segment decides what is reserved: /proc-data and /devices are fine.
      {"abc@R1:/proc-data", {"abc", "R1", "", "/proc-data", P::kReadOnly, false}},
      {"abc@R1:/devices/x", {"abc", "R1", "", "/devices/x", P::kReadOnly, false}},
      // A "..." segment is a name, not a parent reference.
      {"abc@R1/a/...:/mnt/...", {"abc", "R1", "a/...", "/mnt/...", P::kReadOnly, false}},
  };
  for (const GoodCase& c : cases) {
    SCOPED_TRACE(c.text);
    auto spec = ParseVolumeSpec(c.text);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(*spec, c.want);
    // The canonical form parses back to the same spec.
    auto again = ParseVolumeSpec(spec->ToString());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, *spec);
  }
}

TEST(ParseVolumeSpecTest, CanonicalForm) {
  auto spec = ParseVolumeSpec("data@EU-WEST-LOCAL/ds/:/workspace/data:cache:rwd");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ToString(), "data@EU-WEST-LOCAL/ds:/workspace/data:rwd:cache");
  EXPECT_EQ(spec->SourceName(), "data@EU-WEST-LOCAL/ds");
  EXPECT_EQ(spec->KeyPrefix(), "ds/");
  auto whole = ParseVolumeSpec("data@EU-WEST-LOCAL:/mnt");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->ToString(), "data@EU-WEST-LOCAL:/mnt:ro:no-cache");
  EXPECT_EQ(whole->KeyPrefix(), "");
}

TEST(ParseVolumeSpecTest, SyncOptionSetsTheLiveSyncInterval) {
  auto by_default = ParseVolumeSpec("out@EU-WEST/run:/out:rw");
  ASSERT_TRUE(by_default.ok()) << by_default.status();
  EXPECT_EQ(by_default->sync_interval_s, kDefaultSyncIntervalS);
  EXPECT_TRUE(by_default->live_sync());
  EXPECT_EQ(by_default->ToString(), "out@EU-WEST/run:/out:rw:no-cache");  // the default unwritten

  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"sync=1s", 1}, {"sync=45s", 45}, {"sync=5m", 300}, {"sync=2h", 7200}, {"sync=24h", 86400}};
  for (const auto& [option, seconds] : cases) {
    auto spec = ParseVolumeSpec("out@EU-WEST/run:/out:rwd:" + option);
    ASSERT_TRUE(spec.ok()) << option << ": " << spec.status();
    EXPECT_EQ(spec->sync_interval_s, seconds) << option;
    auto again = ParseVolumeSpec(spec->ToString());  // canonical form round-trips
    ASSERT_TRUE(again.ok()) << spec->ToString();
    EXPECT_EQ(*again, *spec) << spec->ToString();
  }
  auto at_end = ParseVolumeSpec("out@EU-WEST/run:/out:sync=end:rw");
  ASSERT_TRUE(at_end.ok()) << at_end.status();
  EXPECT_EQ(at_end->sync_interval_s, 0);
  EXPECT_FALSE(at_end->live_sync());
  EXPECT_EQ(at_end->ToString(), "out@EU-WEST/run:/out:rw:no-cache:sync=end");
  // Read-only volumes never sync up.
  auto ro = ParseVolumeSpec("data@EU-WEST/ds:/data");
  ASSERT_TRUE(ro.ok());
  EXPECT_FALSE(ro->live_sync());
}

struct BadCase {
  std::string text;
  std::string message_part;  // a substring the error message must contain
};

TEST(ParseVolumeSpecTest, RefusesMalformedSpecsWithAClearMessage) {
  const std::vector<BadCase> cases = {
      // Sync options.
      {"out@EU-WEST:/out:rw:sync=", "sync '' is malformed"},
      {"out@EU-WEST:/out:rw:sync=30", "sync '30' is malformed"},
      {"out@EU-WEST:/out:rw:sync=s", "malformed"},
      {"out@EU-WEST:/out:rw:sync=-5s", "malformed"},
      {"out@EU-WEST:/out:rw:sync=1.5m", "malformed"},
      {"out@EU-WEST:/out:rw:sync=30d", "malformed; give sync=end or an interval from 1s to 24h"},
      {"out@EU-WEST:/out:rw:sync=0s", "sync interval 0s is out of range"},
      {"out@EU-WEST:/out:rw:sync=25h", "sync interval 25h is out of range"},
      {"out@EU-WEST:/out:rw:sync=9999999s", "malformed"},
      {"out@EU-WEST:/out:rw:sync=30s:sync=end", "repeats 'sync=30s'"},
      {"out@EU-WEST:/out:ro:sync=30s", "needs a writable volume"},
      {"out@EU-WEST:/out:sync=end", "needs a writable volume"},
      // Structure.
      {"", "empty"},
      {"data@EU-WEST", "missing ':/mount/path'"},
      {"data@EU-WEST/ds", "missing ':/mount/path'"},
      {"data:/mnt", "missing '@REGION'"},
      {"data/ds:/mnt", "missing '@REGION'"},
      {"@EU-WEST:/mnt", "missing bucket name"},
      {"data@:/mnt", "missing region"},
      {"data@/ds:/mnt", "missing region"},
      // Bucket names (S3's rules).
      {"Data@EU-WEST:/mnt", "invalid bucket name 'Data'"},
      {"da@EU-WEST:/mnt", "invalid bucket name"},
      {"my_bucket@EU-WEST:/mnt", "invalid bucket name"},
      {"-data@EU-WEST:/mnt", "invalid bucket name"},
      {"data-@EU-WEST:/mnt", "invalid bucket name"},
      {"a..b@EU-WEST:/mnt", "invalid bucket name"},
      {"192.168.1.1@EU-WEST:/mnt", "invalid bucket name"},
      {"xn--data@EU-WEST:/mnt", "invalid bucket name"},
      {std::string(64, 'a') + "@EU-WEST:/mnt", "invalid bucket name"},
      {"da ta@EU-WEST:/mnt", "invalid bucket name"},
      {"data@eu@west:/mnt", "region 'eu@west'"},
      // Regions.
      {"data@E:/mnt", "region 'E' must be"},
      {"data@1EU:/mnt", "region '1EU' must be"},
      {"data@EU_WEST:/mnt", "region 'EU_WEST' must be"},
      {"data@" + std::string(33, 'E') + ":/mnt", "must be 2 to 32"},
      // Prefixes.
      {"data@EU-WEST//ds:/mnt", "starts with '/'"},
      {"data@EU-WEST//:/mnt", "starts with '/'"},
      {"data@EU-WEST/../x:/mnt", "'..' segment"},
      {"data@EU-WEST/ds/../x:/mnt", "'..' segment"},
      {"data@EU-WEST/ds/..:/mnt", "'..' segment"},
      {"data@EU-WEST/./ds:/mnt", "'.' segment"},
      {"data@EU-WEST/a//b:/mnt", "empty segment"},
      {"data@EU-WEST/ds//:/mnt", "empty segment"},
      {"data@EU-WEST/a\tb:/mnt", "control character"},
      {"data@EU-WEST/a\xff:/mnt", "not valid UTF-8"},
      {"data@EU-WEST/" + std::string(1100, 'p') + ":/mnt", "prefix is longer than"},
      // Mount paths.
      {"data@EU-WEST:", "missing mount path"},
      {"data@EU-WEST::rw", "missing mount path"},
      {"data@EU-WEST:mnt", "is relative"},
      {"data@EU-WEST:./mnt", "is relative"},
      {"data@EU-WEST:/", "'/' would hide"},
      {"data@EU-WEST:/mnt/", "empty segment"},
      {"data@EU-WEST://mnt", "empty segment"},
      {"data@EU-WEST:/a//b", "empty segment"},
      {"data@EU-WEST:/a/./b", "'.' segment"},
      {"data@EU-WEST:/..", "'..' segment"},
      {"data@EU-WEST:/workspace/../etc", "'..' segment"},
      {"data@EU-WEST:/workspace/..", "'..' segment"},
      {"data@EU-WEST:/proc", "inside /proc"},
      {"data@EU-WEST:/proc/self", "inside /proc"},
      {"data@EU-WEST:/sys", "inside /sys"},
      {"data@EU-WEST:/dev", "inside /dev"},
      {"data@EU-WEST:/dev/shm", "inside /dev"},
      {"data@EU-WEST:/mnt\n", "control character"},
      // Options.
      {"data@EU-WEST:/mnt:", "empty option"},
      {"data@EU-WEST:/mnt:rw:", "empty option"},
      {"data@EU-WEST:/mnt::rw", "empty option"},
      {"data@EU-WEST:/mnt:RW", "unknown option 'RW'"},
      {"data@EU-WEST:/mnt:wo", "unknown option 'wo'"},
      {"data@EU-WEST:/mnt:rw:nocache", "unknown option 'nocache'"},
      {"data@EU-WEST:/mnt:ro:ro", "repeats the permission 'ro'"},
      {"data@EU-WEST:/mnt:ro:rw", "repeats the permission 'ro'"},
      {"data@EU-WEST:/mnt:rwd:cache:rw", "repeats the permission 'rwd'"},
      {"data@EU-WEST:/mnt:cache:cache", "repeats the cache option 'cache'"},
      {"data@EU-WEST:/mnt:cache:no-cache", "repeats the cache option 'cache'"},
      {"data@EU-WEST:/mnt:ro:cache:rw", "repeats the permission"},
      // A ':' inside the prefix or mount path splits it: the rest becomes an unknown option.
      {"data@EU-WEST/a:b:/mnt", "is relative"},
      {"data@EU-WEST:/mnt:x:rw", "unknown option 'x'"},
      // Size.
      {"data@EU-WEST:/" + std::string(kMaxVolumeSpecBytes, 'm'), "longer than"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.text.substr(0, 80));
    auto spec = ParseVolumeSpec(c.text);
    ASSERT_FALSE(spec.ok()) << "accepted as " << spec->ToString();
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.message_part), std::string::npos)
        << spec.status().message();
    if (c.text.size() < 200) {
      // Every message names the spec it is about.
      EXPECT_NE(spec.status().message().find("'" + c.text + "'"), std::string::npos)
          << spec.status().message();
    }
  }
}

VolumeSpec Spec(const std::string& text) {
  auto spec = ParseVolumeSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(VolumeSpec{});
}

TEST(CheckVolumesTest, AcceptsDistinctMountsInTheServerRegionOrAnotherKnownOne) {
  std::vector<VolumeSpec> volumes = {Spec("data@EU-WEST-LOCAL/ds:/workspace/data"),
                                     Spec("out@eu-west-local:/workspace/output:rw"),
                                     Spec("models@EU-CENTRAL-2:/workspace/data2:ro:cache"),
                                     Spec("data@EU-WEST-LOCAL/other:/opt/x")};
  EXPECT_TRUE(CheckVolumes(volumes, "EU-WEST-LOCAL", {"EU-CENTRAL-2"}).ok());
  EXPECT_TRUE(CheckVolumes({}, "EU-WEST-LOCAL").ok());
}

TEST(CheckVolumesTest, RefusesARegionTheServerDoesNotKnow) {
  Status st = CheckVolumes({Spec("data@US-EAST:/mnt")}, "EU-WEST-LOCAL", {"EU-CENTRAL-2"});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("region 'US-EAST' is not one this server knows "
                              "(docs/sovereignty.md); known: EU-WEST-LOCAL, EU-CENTRAL-2"),
            std::string::npos)
      << st.message();
  // Another region is known only when it is given.
  EXPECT_FALSE(CheckVolumes({Spec("data@EU-CENTRAL-2:/mnt")}, "EU-WEST-LOCAL").ok());
  EXPECT_NE(st.message().find("; the project's datastores (docs/api/datastores.md): none"),
            std::string::npos)
      << st.message();
}

TEST(CheckVolumesTest, AcceptsTheProjectsDatastoresAndListsThemWhenRefusing) {
  const std::vector<std::string> datastores = {"ceph", "ext"};
  EXPECT_TRUE(
      CheckVolumes({Spec("input@ext/data:/mnt/in:ro"), Spec("output@EXT/results:/mnt/out:rw")},
                   "EU-WEST-LOCAL", {}, datastores)
          .ok());
  Status st =
      CheckVolumes({Spec("input@other:/mnt")}, "EU-WEST-LOCAL", {"EU-CENTRAL-2"}, datastores);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "volume 'input@other:/mnt:ro:no-cache': region 'other' is not one this server knows "
            "(docs/sovereignty.md); known: EU-WEST-LOCAL, EU-CENTRAL-2; the project's datastores "
            "(docs/api/datastores.md): ceph, ext");
}

TEST(CheckVolumesTest, RefusesSameOrNestedMountPaths) {
  struct Case {
    std::string a, b;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"aaa@R1:/mnt", "bbb@R1:/mnt", "mount on the same path /mnt"},
      {"aaa@R1:/mnt", "bbb@R1:/mnt/sub", "nested mount paths"},
      {"aaa@R1:/mnt/sub/deep", "bbb@R1:/mnt", "nested mount paths"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.a + " " + c.b);
    Status st = CheckVolumes({Spec(c.a), Spec("ccc@R1:/other"), Spec(c.b)}, "R1");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.message_part), std::string::npos) << st.message();
  }
  // A common string prefix is not nesting.
  EXPECT_TRUE(
      CheckVolumes({Spec("aaa@R1:/mnt"), Spec("bbb@R1:/mnt2"), Spec("ccc@R1:/mn")}, "R1").ok());
}

TEST(CheckVolumesTest, RefusesTooManyVolumes) {
  std::vector<VolumeSpec> volumes;
  for (size_t i = 0; i <= kMaxVolumesPerJob; ++i) {
    volumes.push_back(Spec("data@R1:/mnt/v" + std::to_string(i)));
  }
  EXPECT_EQ(CheckVolumes(volumes, "R1").code(), StatusCode::kInvalidArgument);
  volumes.pop_back();
  EXPECT_TRUE(CheckVolumes(volumes, "R1").ok());
}

TEST(KeyMappingTest, KeysBecomeRelativePathsUnderThePrefix) {
  VolumeSpec spec = Spec("data@R1/ds:/mnt");
  struct Case {
    std::string key;
    std::string path;
  };
  for (const Case& c : std::vector<Case>{{"ds/a.txt", "a.txt"},
                                         {"ds/sub/dir/b.bin", "sub/dir/b.bin"},
                                         {"ds/with space/ü+%.txt", "with space/ü+%.txt"},
                                         {"ds/.hidden", ".hidden"},
                                         {"ds/a..b/...", "a..b/..."}}) {
    auto path = RelativePathForKey(spec, c.key);
    ASSERT_TRUE(path.ok()) << c.key << ": " << path.status();
    EXPECT_EQ(*path, c.path);
    auto key = KeyForRelativePath(spec, c.path);
    ASSERT_TRUE(key.ok()) << key.status();
    EXPECT_EQ(*key, c.key);
  }
  VolumeSpec whole = Spec("data@R1:/mnt");
  EXPECT_EQ(RelativePathForKey(whole, "x/y").value_or(""), "x/y");
  EXPECT_EQ(KeyForRelativePath(whole, "x/y").value_or(""), "x/y");
}

TEST(KeyMappingTest, KeysThatWouldEscapeOrAliasAreRefused) {
  VolumeSpec spec = Spec("data@R1/ds:/mnt");
  struct Case {
    std::string key;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"ds/../escape.txt", "'..' segment"},
      {"ds/a/../../escape.txt", "'..' segment"},
      {"ds/..", "'..' segment"},
      {"ds//etc/passwd", "is absolute"},
      {"ds/a//b", "empty segment"},
      {"ds/./a", "'.' segment"},
      {"ds/a/.", "'.' segment"},
      {std::string("ds/a\0b", 6), "NUL"},
      {"ds/", "names the prefix itself"},
      {"ds/dir/", "directory marker"},
      {"ds", "outside the prefix"},
      {"dsx/a", "outside the prefix"},
      {"other/a", "outside the prefix"},
      {"ds/" + std::string(kMaxSyncedNameBytes + 1, 'n'), "component longer than 227 bytes"},
      {"ds/" + std::string(kMaxRelativePathBytes / 2, 'a') + "/" +
           std::string(kMaxRelativePathBytes / 2, 'b'),
       "longer than"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key.substr(0, 60));
    auto path = RelativePathForKey(spec, c.key);
    ASSERT_FALSE(path.ok()) << "mapped to " << *path;
    EXPECT_EQ(path.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(path.status().message().find(c.message_part), std::string::npos)
        << path.status().message();
  }
}

TEST(KeyMappingTest, FilesThatCannotBeKeysAreRefused) {
  VolumeSpec spec = Spec("data@R1/ds:/mnt");
  EXPECT_FALSE(KeyForRelativePath(spec, "").ok());
  EXPECT_FALSE(KeyForRelativePath(spec, "../x").ok());
  EXPECT_FALSE(KeyForRelativePath(spec, "/abs").ok());
  // A name SyncDown could not write back is still uploaded: it is a file that exists.
  EXPECT_TRUE(KeyForRelativePath(spec, std::string(kMaxPathComponentBytes, 'n')).ok());
  EXPECT_FALSE(KeyForRelativePath(spec, std::string(kMaxPathComponentBytes + 1, 'n')).ok());
  auto latin1 = KeyForRelativePath(spec, "caf\xe9.txt");
  ASSERT_FALSE(latin1.ok());
  EXPECT_NE(latin1.status().message().find("not valid UTF-8"), std::string::npos);
  std::string deep;
  for (int i = 0; i < 5; ++i) deep += std::string(250, 'd') + "/";
  deep += "f";
  auto too_long = KeyForRelativePath(spec, deep);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("longer than 1024"), std::string::npos)
      << too_long.status().message();
}

}  // namespace
}  // namespace sovai::exec
