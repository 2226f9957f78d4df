#include "registry/names.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sovai::registry {
namespace {

TEST(NamesTest, Digests) {
  std::string hex64(64, 'a');
  auto d = ParseDigest("sha256:" + hex64);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->algorithm, "sha256");
  EXPECT_EQ(d->ToString(), "sha256:" + hex64);
  EXPECT_TRUE(ParseDigest("sha512:" + std::string(128, '0')).ok());
  for (std::string bad :
       std::vector<std::string>{"", "sha256:", "sha256:" + std::string(63, 'a'),
                                "sha256:" + std::string(64, 'A'), "md5:" + std::string(32, 'a'),
                                "sha512:" + hex64, "sha256" + hex64, "sha256:" + hex64 + "0"}) {
    EXPECT_FALSE(ParseDigest(bad).ok()) << bad;
  }
  EXPECT_EQ(DigestOf("sha256", "").hex,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(DigestOf("sha512", "abc").hex.size(), 128u);
}

TEST(NamesTest, RepositoryNamesNeedAProjectAndTheSpecsGrammar) {
  for (const char* good : {"alpha/trainer", "a/b/c", "p-1/x.y", "p/x__y", "p/a---b", "p/0"}) {
    EXPECT_TRUE(ValidateRepositoryName(good).ok()) << good;
  }
  for (std::string bad :
       std::vector<std::string>{"", "trainer", "Alpha/x", "a//b", "/a/b", "a/b/", "a/-b", "a/b.",
                                "a/b___c", "a/b..c", "a/b c", "a/" + std::string(300, 'x')}) {
    EXPECT_FALSE(ValidateRepositoryName(bad).ok()) << bad;
  }
  EXPECT_EQ(ProjectOf("alpha/team/trainer"), "alpha");
}

TEST(NamesTest, Tags) {
  EXPECT_TRUE(ValidateTag("latest").ok());
  EXPECT_TRUE(ValidateTag("v1.2_3-rc").ok());
  EXPECT_TRUE(ValidateTag("_x").ok());
  for (std::string bad :
       std::vector<std::string>{"", ".x", "-x", "a:b", "a/b", std::string(129, 'a')}) {
    EXPECT_FALSE(ValidateTag(bad).ok()) << bad;
  }
}

TEST(NamesTest, V2PathsAreReadFromTheEnd) {
  EXPECT_EQ(ParseV2Path("/v2/").kind, V2Path::kBase);
  EXPECT_EQ(ParseV2Path("/v2").kind, V2Path::kBase);
  EXPECT_EQ(ParseV2Path("/v2/_catalog").kind, V2Path::kCatalog);
  V2Path m = ParseV2Path("/v2/alpha/team/img/manifests/latest");
  EXPECT_EQ(m.kind, V2Path::kManifest);
  EXPECT_EQ(m.repository, "alpha/team/img");
  EXPECT_EQ(m.reference, "latest");
  // A repository may have components named like the API's words.
  V2Path tricky = ParseV2Path("/v2/alpha/manifests/manifests/v1");
  EXPECT_EQ(tricky.kind, V2Path::kManifest);
  EXPECT_EQ(tricky.repository, "alpha/manifests");
  EXPECT_EQ(ParseV2Path("/v2/alpha/x/blobs/uploads/").kind, V2Path::kUploadStart);
  EXPECT_EQ(ParseV2Path("/v2/alpha/x/blobs/uploads").kind, V2Path::kUploadStart);
  V2Path u = ParseV2Path("/v2/alpha/x/blobs/uploads/abc");
  EXPECT_EQ(u.kind, V2Path::kUpload);
  EXPECT_EQ(u.reference, "abc");
  EXPECT_EQ(ParseV2Path("/v2/alpha/x/blobs/sha256:00").kind, V2Path::kBlob);
  V2Path t = ParseV2Path("/v2/alpha/x/tags/list");
  EXPECT_EQ(t.kind, V2Path::kTags);
  EXPECT_EQ(t.repository, "alpha/x");
  for (const char* unknown : {"/v2/x", "/v2/alpha/x/manifests/", "/v3/a/b/tags/list", "/",
                              "/v2/tags/list", "/v2/alpha/x/other"}) {
    EXPECT_EQ(ParseV2Path(unknown).kind, V2Path::kUnknown) << unknown;
  }
}

}  // namespace
}  // namespace sovai::registry
