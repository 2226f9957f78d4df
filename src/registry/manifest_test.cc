#include "registry/manifest.h"

#include <gtest/gtest.h>

#include <string>

namespace sovai::registry {
namespace {

const std::string kD1 = "sha256:" + std::string(64, 'a');
const std::string kD2 = "sha256:" + std::string(64, 'b');

std::string Image(const std::string& media_type_field = "") {
  std::string mt = media_type_field.empty() ? "" : R"("mediaType":")" + media_type_field + R"(",)";
  return R"({"schemaVersion":2,)" + mt +
         R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" + kD1 +
         R"(","size":10},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip",)"
         R"("digest":")" +
         kD2 + R"(","size":20}]})";
}

TEST(ManifestTest, OciImageManifest) {
  auto m = ParseManifest(Image(kOciManifestType), kOciManifestType);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(m->index);
  EXPECT_EQ(m->media_type, kOciManifestType);
  ASSERT_EQ(m->blobs().size(), 2u);
  EXPECT_EQ(m->blobs()[0].digest.ToString(), kD1);
  EXPECT_EQ(m->blobs()[1].size, 20u);
}

TEST(ManifestTest, MediaTypeFromContentTypeFieldOrShape) {
  // No mediaType field: the Content-Type says it (with parameters), else the shape.
  auto by_header = ParseManifest(Image(), std::string(kDockerManifestType) + "; charset=utf-8");
  ASSERT_TRUE(by_header.ok());
  EXPECT_EQ(by_header->media_type, kDockerManifestType);
  auto by_field = ParseManifest(Image(kDockerManifestType), "application/octet-stream");
  ASSERT_TRUE(by_field.ok());
  EXPECT_EQ(by_field->media_type, kDockerManifestType);
  auto by_shape = ParseManifest(Image(), "");
  ASSERT_TRUE(by_shape.ok());
  EXPECT_EQ(by_shape->media_type, kOciManifestType);
}

TEST(ManifestTest, Index) {
  std::string index = R"({"schemaVersion":2,"mediaType":")" + std::string(kOciIndexType) +
                      R"(","manifests":[{"mediaType":")" + kOciManifestType + R"(","digest":")" +
                      kD1 + R"(","size":300,"platform":{"os":"linux","architecture":"amd64"}}]})";
  auto m = ParseManifest(index, kOciIndexType);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->index);
  ASSERT_EQ(m->manifests.size(), 1u);
  EXPECT_TRUE(m->blobs().empty());
  auto list = ParseManifest(R"({"schemaVersion":2,"manifests":[]})", kDockerListType);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->index);
}

TEST(ManifestTest, MalformedManifestsAreRefusedWithTheReason) {
  struct Case {
    std::string body;
    std::string content_type;
    std::string says;
  };
  std::string deep(100, '[');
  for (const Case& c : std::vector<Case>{
           {"", kOciManifestType, "invalid JSON"},
           {"[1]", kOciManifestType, "object"},
           {deep, kOciManifestType, "deeper"},
           {R"({"schemaVersion":1,"fsLayers":[]})", "", "schema 1"},
           {Image(), "application/vnd.docker.distribution.manifest.v1+prettyjws", "schema 1"},
           {R"({"schemaVersion":3,"config":{}})", kOciManifestType, "schemaVersion"},
           {R"({"config":{}})", kOciManifestType, "schemaVersion"},
           {Image(kOciManifestType), kDockerManifestType, "contradicts"},
           {Image("text/plain"), "", "not a manifest"},
           {R"({"schemaVersion":2})", "", "no media type"},
           {R"({"schemaVersion":2,"layers":[]})", kOciManifestType, "config"},
           {R"({"schemaVersion":2,"config":{"mediaType":"x","digest":"sha256:zz","size":1},)"
            R"("layers":[]})",
            kOciManifestType, "digest"},
           {R"({"schemaVersion":2,"config":{"mediaType":"x","digest":")" + kD1 +
                R"(","size":-1},"layers":[]})",
            kOciManifestType, "size"},
           {R"({"schemaVersion":2,"config":{"digest":")" + kD1 + R"(","size":1},"layers":[]})",
            kOciManifestType, "mediaType"},
           {R"({"schemaVersion":2,"config":{"mediaType":"x","digest":")" + kD1 +
                R"(","size":1},"layers":{}})",
            kOciManifestType, "array"},
           {R"({"schemaVersion":2,"config":{"mediaType":"x","digest":")" + kD1 + R"(","size":1}})",
            kOciManifestType, "layers"},
           {R"({"schemaVersion":2,"manifests":[7]})", kOciIndexType, "manifests[0]"},
       }) {
    auto m = ParseManifest(c.body, c.content_type);
    ASSERT_FALSE(m.ok()) << c.body;
    EXPECT_NE(m.status().message().find(c.says), std::string::npos)
        << c.body << " -> " << m.status().message();
  }
}

TEST(ManifestTest, TooManyReferencesAndTooLarge) {
  std::string layers;
  for (int i = 0; i < 1025; ++i) {
    layers += std::string(i ? "," : "") + R"({"mediaType":"x","digest":")" + kD2 + R"(","size":1})";
  }
  std::string body = R"({"schemaVersion":2,"config":{"mediaType":"x","digest":")" + kD1 +
                     R"(","size":1},"layers":[)" + layers + "]}";
  auto m = ParseManifest(body, kOciManifestType);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("at most 1024"), std::string::npos);
  EXPECT_FALSE(ParseManifest(std::string(5 << 20, ' '), kOciManifestType).ok());
}

TEST(ManifestTest, AcceptNegotiation) {
  EXPECT_TRUE(AcceptAllows("", kOciManifestType));
  EXPECT_TRUE(AcceptAllows("*/*", kOciManifestType));
  EXPECT_TRUE(AcceptAllows(std::string(kDockerManifestType) + ", " + kOciManifestType + ";q=0.9",
                           kOciManifestType));
  EXPECT_FALSE(AcceptAllows(kDockerManifestType, kOciManifestType));
  EXPECT_FALSE(AcceptAllows(std::string(kOciManifestType) + ";q=0", kOciManifestType));
  EXPECT_EQ(BaseMediaType(" Application/JSON ; charset=utf-8"), "application/json");
}

}  // namespace
}  // namespace sovai::registry
