#include "base/unit_manifest.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "base/env.h"

namespace sovai::base {
namespace {

UnitManifest TwoFiles(bool complete) {
  UnitManifest m;
  m.complete = complete;
  m.files = {{"optimizer.safetensors", 5, "aa"}, {"sub/state.json", 3, "bb"}};
  return m;
}

TEST(UnitManifestTest, RoundTripsThroughJson) {
  const UnitManifest m = TwoFiles(true);
  auto back = UnitManifest::FromJson(m.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, m);
  ASSERT_NE(back->Find("sub/state.json"), nullptr);
  EXPECT_EQ(back->Find("sub/state.json")->size_bytes, 3u);
  EXPECT_EQ(back->Find("missing"), nullptr);
}

TEST(UnitManifestTest, RefusesMalformedManifests) {
  const std::string bad[] = {
      "",
      "[]",
      R"({"format":"other","version":1,"complete":true,"files":[]})",
      R"({"format":"sovai-unit","version":2,"complete":true,"files":[]})",
      R"({"format":"sovai-unit","version":1,"files":[]})",
      R"({"format":"sovai-unit","version":1,"complete":"yes","files":[]})",
      R"({"format":"sovai-unit","version":1,"complete":true,"files":[{"path":"../x","size":1,"etag":""}]})",
      R"({"format":"sovai-unit","version":1,"complete":true,"files":[{"path":"/x","size":1,"etag":""}]})",
      R"({"format":"sovai-unit","version":1,"complete":true,"files":[{"path":"a//b","size":1,"etag":""}]})",
      R"({"format":"sovai-unit","version":1,"complete":true,"files":[{"path":".sovai-unit.json","size":1,"etag":""}]})",
      R"({"format":"sovai-unit","version":1,"complete":true,"files":[{"path":"b","size":1,"etag":""},{"path":"a","size":1,"etag":""}]})",
      R"({"format":"sovai-unit","version":1,"complete":true,"files":[{"path":"a","size":-1,"etag":""}]})",
  };
  for (const std::string& text : bad) {
    auto parsed = UnitManifest::FromJson(text);
    EXPECT_FALSE(parsed.ok()) << text;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << text;
    }
  }
  EXPECT_FALSE(UnitManifest::FromJson(std::string(kMaxUnitManifestBytes + 1, ' ')).ok());
}

class CheckLocalUnitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-unit-manifest-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(env_.CreateDirs(dir_ + "/sub").ok());
    ASSERT_TRUE(env_.WriteFileAtomically(dir_ + "/optimizer.safetensors", "12345").ok());
    ASSERT_TRUE(env_.WriteFileAtomically(dir_ + "/sub/state.json", "{ }").ok());
  }
  void TearDown() override { env_.DeleteDirRecursive(dir_).IgnoreError(); }
  void WriteManifest(const std::string& text) {
    ASSERT_TRUE(env_.WriteFileAtomically(dir_ + "/" + std::string(kUnitManifestName), text).ok());
  }

  Env& env_ = Env::Default();
  std::string dir_;
};

TEST_F(CheckLocalUnitTest, ADirectoryWithoutAManifestIsOrdinary) {
  EXPECT_TRUE(CheckLocalUnit(env_, dir_).ok());
}

TEST_F(CheckLocalUnitTest, TrustsOnlyACompleteManifestThatMatches) {
  WriteManifest(TwoFiles(true).ToJson());
  EXPECT_TRUE(CheckLocalUnit(env_, dir_).ok());

  WriteManifest(TwoFiles(false).ToJson());
  Status incomplete = CheckLocalUnit(env_, dir_);
  EXPECT_EQ(incomplete.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(incomplete.message().find("still being written"), std::string::npos);

  UnitManifest bigger = TwoFiles(true);
  bigger.files[0].size_bytes = 6;
  WriteManifest(bigger.ToJson());
  Status size = CheckLocalUnit(env_, dir_);
  EXPECT_NE(size.message().find("has 5 bytes, the manifest says 6"), std::string::npos) << size;

  UnitManifest more = TwoFiles(true);
  more.files.push_back({"zz.bin", 1, ""});
  WriteManifest(more.ToJson());
  EXPECT_NE(CheckLocalUnit(env_, dir_).message().find("'zz.bin' is missing"), std::string::npos);

  WriteManifest("{not json");
  EXPECT_EQ(CheckLocalUnit(env_, dir_).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace sovai::base
