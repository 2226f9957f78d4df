// PullRegistryImage against a real object store and S3 front end: the objects a resolved
// registry image names become a cached rootfs; layers are fetched once and shared; bytes that do
// not match their digest, and objects deleted since the submission, fail and cache nothing.
#include "exec/registry_pull.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/crypto.h"
#include "base/env.h"
#include "exec/s3_test_server.h"
#include "exec/tar_test_util.h"

namespace sovai::exec {
namespace {

using nlohmann::json;
using testing::TarBuilder;

std::string Sha256Digest(std::string_view bytes) {
  return "sha256:" + base::HexEncode(base::Sha256(bytes));
}

class RegistryPullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("sovai-registry-pull-" + base::RandomToken("", 6));
    std::filesystem::create_directories(root_);
    ASSERT_TRUE(s3_server_.Start(root_.string()).ok());
    s3_ = std::make_unique<S3Client>(s3_server_.ClientOptions());
    ASSERT_TRUE(s3_->CreateBucket("sovai-registry").ok());
    cache_ = (root_ / "cache").string();
    std::filesystem::create_directories(cache_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // Puts `bytes` as the object of a blob; returns its descriptor.
  RegistryBlob PutBlob(const std::string& bytes) {
    RegistryBlob blob{Sha256Digest(bytes), bytes.size(), "data/alpha/" + base::RandomToken("", 8)};
    const std::string path = (root_ / "upload").string();
    EXPECT_TRUE(base::Env::Default().WriteFileAtomically(path, bytes).ok());
    EXPECT_TRUE(s3_->PutObjectFromFile("sovai-registry", blob.key, path).ok());
    return blob;
  }

  // An image of the given layers (gzip-compressed tars), stored as the registry stores it.
  RegistryImage PutImage(const std::vector<std::string>& layers,
                         std::vector<std::string> cmd = {"/bin/run"}) {
    RegistryImage image;
    image.bucket = "sovai-registry";
    image.s3 = s3_server_.ClientOptions();
    json diff_ids = json::array();
    json layer_descriptors = json::array();
    for (const std::string& tar : layers) {
      diff_ids.push_back(Sha256Digest(tar));
      std::string gz = testing::Gzip(tar);
      image.layers.push_back(PutBlob(gz));
      layer_descriptors.push_back({{"mediaType", "application/vnd.oci.image.layer.v1.tar+gzip"},
                                   {"digest", image.layers.back().digest},
                                   {"size", gz.size()}});
    }
    json config = {{"architecture", std::string(HostImageArchitecture())},
                   {"os", "linux"},
                   {"config", {{"Cmd", cmd}, {"Env", {"A=1"}}}},
                   {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}};
    std::string config_text = config.dump();
    image.config = PutBlob(config_text);
    json manifest = {{"schemaVersion", 2},
                     {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                     {"config",
                      {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                       {"digest", image.config.digest},
                       {"size", config_text.size()}}},
                     {"layers", layer_descriptors}};
    RegistryBlob m = PutBlob(manifest.dump());
    image.digest = image.manifest_digest = m.digest;
    image.manifest_key = m.key;
    return image;
  }

  std::vector<std::string> lines_;
  std::function<void(std::string_view)> say_ = [this](std::string_view l) {
    lines_.emplace_back(l);
  };
  std::filesystem::path root_;
  testing::S3TestServer s3_server_;
  std::unique_ptr<S3Client> s3_;
  std::string cache_;
};

TEST_F(RegistryPullTest, UnpacksByDigestAndSharesLayersBetweenImages) {
  const std::string base = TarBuilder().File("bin/run", "#!/bin/sh\n", 0755).Finish();
  const std::string app = TarBuilder().File("app/train.sh", "echo train\n").Finish();
  RegistryImage first = PutImage({base, app});
  auto pulled = PullRegistryImage(base::Env::Default(), first, cache_, say_);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_FALSE(pulled->reused);
  EXPECT_EQ(pulled->info.layers, 2u);
  EXPECT_EQ(pulled->info.cmd, std::vector<std::string>{"/bin/run"});
  EXPECT_TRUE(std::filesystem::exists(pulled->rootfs + "/app/train.sh"));
  EXPECT_TRUE(std::filesystem::exists(
      CachedLayerPath(cache_, first.layers[0].digest.substr(std::string("sha256:").size()))));

  // The same manifest again: the rootfs is reused, nothing is fetched.
  ASSERT_TRUE(s3_->DeleteObject("sovai-registry", first.layers[0].key).ok());
  auto again = PullRegistryImage(base::Env::Default(), first, cache_, say_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->reused);

  // Another image with the same base layer: only its own blobs are fetched (the base layer's
  // object is gone from the store, so a second download would fail).
  const std::string other = TarBuilder().File("app/serve.sh", "echo serve\n").Finish();
  RegistryImage second = PutImage({base, other}, {"/bin/run", "serve"});
  second.layers[0] = first.layers[0];
  lines_.clear();
  auto shared = PullRegistryImage(base::Env::Default(), second, cache_, say_);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_TRUE(std::filesystem::exists(shared->rootfs + "/bin/run"));
  EXPECT_TRUE(std::filesystem::exists(shared->rootfs + "/app/serve.sh"));
  EXPECT_FALSE(std::filesystem::exists(shared->rootfs + "/app/train.sh"));
  ASSERT_FALSE(lines_.empty());
  EXPECT_NE(lines_.back().find("1 blobs from the layer cache"), std::string::npos) << lines_.back();
  // No layout directories are left behind.
  for (const auto& entry : std::filesystem::directory_iterator(cache_)) {
    EXPECT_EQ(entry.path().filename().string().find(".layout-"), std::string::npos) << entry.path();
  }
}

TEST_F(RegistryPullTest, BytesThatDoNotMatchTheirDigestAreNotCached) {
  RegistryImage image = PutImage({TarBuilder().File("a", "a").Finish()});
  // The layer's object now holds other bytes than its digest says.
  RegistryBlob forged = PutBlob(testing::Gzip(TarBuilder().File("b", "b").Finish()));
  image.layers[0].key = forged.key;
  auto pulled = PullRegistryImage(base::Env::Default(), image, cache_, say_);
  ASSERT_FALSE(pulled.ok());
  EXPECT_EQ(pulled.status().code(), base::StatusCode::kDataLoss) << pulled.status();
  EXPECT_FALSE(std::filesystem::exists(
      CachedLayerPath(cache_, image.layers[0].digest.substr(std::string("sha256:").size()))));
  // A manifest whose object is not what its digest names fails the same way.
  RegistryImage wrong_manifest = PutImage({TarBuilder().File("c", "c").Finish()});
  wrong_manifest.manifest_key = forged.key;
  EXPECT_EQ(PullRegistryImage(base::Env::Default(), wrong_manifest, cache_, say_).status().code(),
            base::StatusCode::kDataLoss);
}

TEST_F(RegistryPullTest, ObjectsDeletedSinceTheSubmissionAndBadDigestsFail) {
  RegistryImage image = PutImage({TarBuilder().File("a", "a").Finish()});
  ASSERT_TRUE(s3_->DeleteObject("sovai-registry", image.config.key).ok());
  auto gone = PullRegistryImage(base::Env::Default(), image, cache_, say_);
  EXPECT_EQ(gone.status().code(), base::StatusCode::kNotFound) << gone.status();
  RegistryImage sha512 = image;
  sha512.manifest_digest = "sha512:" + std::string(128, 'a');
  EXPECT_EQ(PullRegistryImage(base::Env::Default(), sha512, cache_, say_).status().code(),
            base::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sovai::exec
