// What workloads need of the registry: image references, their resolution to the objects a
// workload fetches, and repositories whose tags are immutable.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "registry/internal/test_fixture.h"
#include "registry/names.h"
#include "registry/registry.h"

namespace sovai::registry {
namespace {

using testing::RegistryFixture;
using testing::Sha256Digest;

TEST(ImageReferenceTest, TheThreeFormsAndTheirParts) {
  const std::string hex(64, 'a');
  auto full = ParseImageReference("127.0.0.1:5000/alpha/trainer:v2");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->host, "127.0.0.1:5000");
  EXPECT_EQ(full->repository, "alpha/trainer");
  EXPECT_EQ(full->tag, "v2");
  EXPECT_FALSE(full->project_implied);
  EXPECT_EQ(full->reference(), "v2");

  auto by_digest = ParseImageReference("registry.example:443/alpha/a/b@sha256:" + hex);
  ASSERT_TRUE(by_digest.ok()) << by_digest.status();
  EXPECT_EQ(by_digest->host, "registry.example:443");
  EXPECT_EQ(by_digest->repository, "alpha/a/b");
  EXPECT_EQ(by_digest->tag, "");
  EXPECT_EQ(by_digest->reference(), "sha256:" + hex);

  auto implied = ParseImageReference("alpha/trainer");
  ASSERT_TRUE(implied.ok());
  EXPECT_EQ(implied->host, "");
  EXPECT_EQ(implied->tag, "latest");
  auto bare = ParseImageReference("trainer:latest");
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->project_implied);
  EXPECT_EQ(bare->repository, "trainer");
  auto both = ParseImageReference("localhost/alpha/t:v1@sha256:" + hex);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->host, "localhost");
  EXPECT_EQ(both->tag, "v1");
  EXPECT_EQ(both->reference(), "sha256:" + hex);
}

TEST(ImageReferenceTest, MalformedReferencesSayWhatIsWrong) {
  for (std::string bad : {std::string(""), std::string("Alpha/trainer"), std::string("a b"),
                          std::string("alpha/trainer:"), std::string("alpha/trainer:-x"),
                          std::string("alpha/trainer@sha256:abc"), std::string("alpha//x"),
                          std::string("host:5000/trainer"), std::string(600, 'a'),
                          std::string("alpha/trainer@md5:00")}) {
    auto parsed = ParseImageReference(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), base::StatusCode::kInvalidArgument);
    }
  }
}

class RegistryImagesTest : public RegistryFixture {};

TEST_F(RegistryImagesTest, ResolveGivesTheObjectsOfTheConfigAndLayers) {
  std::string digest = PushImage("alpha/img", "v1");
  Storage& storage = registry_->storage();
  for (const std::string& ref : {std::string("v1"), digest}) {
    auto image = storage.ResolveImage("alpha/img", ref, "linux", "amd64");
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->digest.ToString(), digest);
    EXPECT_EQ(image->manifest_digest.ToString(), digest);
    EXPECT_EQ(image->config.descriptor.digest.ToString(),
              Sha256Digest(R"({"architecture":"amd64","os":"linux"})"));
    ASSERT_EQ(image->layers.size(), 1u);
    EXPECT_EQ(image->layers[0].descriptor.digest.ToString(), Sha256Digest("layer bytes"));
    // The keys name real objects of the registry's bucket.
    auto layer = store_->Head(storage.bucket(), image->layers[0].key, std::nullopt);
    ASSERT_TRUE(layer.ok());
    EXPECT_EQ(layer->size, std::string("layer bytes").size());
    EXPECT_TRUE(store_->Head(storage.bucket(), image->manifest_key, std::nullopt).ok());
  }
  EXPECT_EQ(storage.ResolveImage("alpha/img", "v2", "linux", "amd64").status().code(),
            base::StatusCode::kNotFound);
  EXPECT_EQ(storage.ResolveImage("alpha/none", "v1", "linux", "amd64").status().code(),
            base::StatusCode::kNotFound);
  EXPECT_EQ(storage.ResolveImage("beta/img", "v1", "linux", "amd64").status().code(),
            base::StatusCode::kNotFound);
}

TEST_F(RegistryImagesTest, AnIndexResolvesToThePlatformsManifest) {
  std::string digest = PushImage("alpha/img", "v1");
  std::string size = std::to_string(Call("GET", "/v2/alpha/img/manifests/v1").body.size());
  std::string index =
      R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[)"
      R"({"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":")" +
      digest + R"(","size":)" + size + R"(,"platform":{"os":"linux","architecture":"amd64"}}]})";
  auto put = Call("PUT", "/v2/alpha/img/manifests/multi", index, "tok-alpha-op",
                  {{"Content-Type", "application/vnd.oci.image.index.v1+json"}});
  ASSERT_EQ(put.status, 201) << put.body;
  auto image = registry_->storage().ResolveImage("alpha/img", "multi", "linux", "amd64");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->digest.ToString(), Sha256Digest(index));
  EXPECT_EQ(image->manifest_digest.ToString(), digest);
  auto arm = registry_->storage().ResolveImage("alpha/img", "multi", "linux", "arm64");
  EXPECT_EQ(arm.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(arm.status().message().find("linux/amd64"), std::string::npos);
}

TEST_F(RegistryImagesTest, ImmutableTagsCannotMoveNorBeDeleted) {
  auto defaults =
      Call("GET", "/sovai/registry/v1/settings?repository=alpha/img", "", "tok-alpha-read");
  ASSERT_EQ(defaults.status, 200) << defaults.body;
  EXPECT_FALSE(nlohmann::json::parse(defaults.body)["immutable_tags"]);
  // Reading needs pull rights, changing push rights; another project's is unknown.
  EXPECT_EQ(Call("PUT", "/sovai/registry/v1/settings?repository=alpha/img&immutable_tags=true", "",
                 "tok-alpha-read")
                .status,
            403);
  EXPECT_EQ(
      Call("GET", "/sovai/registry/v1/settings?repository=alpha/img", "", "tok-beta-op").status,
      404);
  EXPECT_EQ(Code(Call("PUT", "/sovai/registry/v1/settings?repository=alpha/img&immutable_tags=1")),
            "UNSUPPORTED");
  EXPECT_EQ(Code(Call("GET", "/sovai/registry/v1/settings?repository=img")), "NAME_INVALID");
  EXPECT_EQ(Call("GET", "/sovai/registry/v1/settings?repository=alpha/img", "", "").status, 401);

  std::string first = PushImage("alpha/img", "v1", "first layer");
  auto set = Call("PUT", "/sovai/registry/v1/settings?repository=alpha/img&immutable_tags=true");
  ASSERT_EQ(set.status, 200) << set.body;
  EXPECT_TRUE(nlohmann::json::parse(set.body)["immutable_tags"]);

  // The same manifest again under its tag is fine; another one is refused, and v1 stays.
  std::string manifest = Call("GET", "/v2/alpha/img/manifests/v1").body;
  EXPECT_EQ(Call("PUT", "/v2/alpha/img/manifests/v1", manifest, "tok-alpha-op",
                 {{"Content-Type", "application/vnd.oci.image.manifest.v1+json"}})
                .status,
            201);
  std::string config = R"({"architecture":"amd64","os":"linux"})";
  std::string layer = "second layer";
  std::string other = ImageManifest(PushBlob("alpha/img", config), config.size(),
                                    PushBlob("alpha/img", layer), layer.size());
  auto moved = Call("PUT", "/v2/alpha/img/manifests/v1", other, "tok-alpha-op",
                    {{"Content-Type", "application/vnd.oci.image.manifest.v1+json"}});
  EXPECT_EQ(moved.status, 400);
  EXPECT_EQ(Code(moved), "TAG_INVALID");
  EXPECT_NE(moved.body.find("immutable"), std::string::npos) << moved.body;
  EXPECT_EQ(
      Call("GET", "/v2/alpha/img/manifests/v1").headers.Get("Docker-Content-Digest").value_or(""),
      first);
  // A new tag is fine; deleting a tag, or a tagged manifest, is denied.
  EXPECT_EQ(Call("PUT", "/v2/alpha/img/manifests/v2", other, "tok-alpha-op",
                 {{"Content-Type", "application/vnd.oci.image.manifest.v1+json"}})
                .status,
            201);
  auto untag = Call("DELETE", "/v2/alpha/img/manifests/v1");
  EXPECT_EQ(untag.status, 403);
  EXPECT_EQ(Code(untag), "DENIED");
  EXPECT_EQ(Code(Call("DELETE", "/v2/alpha/img/manifests/" + first)), "DENIED");
  EXPECT_EQ(Call("GET", "/v2/alpha/img/manifests/v1").status, 200);

  // Mutable again: the tag moves.
  ASSERT_EQ(
      Call("PUT", "/sovai/registry/v1/settings?repository=alpha/img&immutable_tags=false").status,
      200);
  EXPECT_EQ(Call("PUT", "/v2/alpha/img/manifests/v1", other, "tok-alpha-op",
                 {{"Content-Type", "application/vnd.oci.image.manifest.v1+json"}})
                .status,
            201);
  EXPECT_EQ(Call("DELETE", "/v2/alpha/img/manifests/v1").status, 202);
}

}  // namespace
}  // namespace sovai::registry
