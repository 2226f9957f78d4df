// The S3 front end (s3_api.h) called in process: presigned bucket requests, whose query carries
// the signature, are CreateBucket and DeleteBucket, while real subresources S3 has and this store
// does not are still refused as NotImplemented.
#include "objstore/s3_api.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "base/env.h"
#include "objstore/sigv4.h"
#include "objstore/store.h"

namespace sovai::objstore {
namespace {

namespace fs = std::filesystem;

constexpr char kRegion[] = "eu-west-local";
constexpr char kHost[] = "127.0.0.1:9000";
const Credential kKey{"AKS3APITEST000000001", "secret-of-the-s3-api-test", "project-a"};

class S3ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("sovai-s3api-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    StoreOptions options;
    options.root = root_.string();
    options.region = kRegion;
    auto store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    ASSERT_FALSE(store_->PutAccessKey(kKey).has_value());
    api_ = std::make_unique<S3Api>(*store_, S3ApiOptions{.region = kRegion});
  }
  void TearDown() override {
    api_.reset();
    store_.reset();
    fs::remove_all(root_);
  }

  // A presigned URL's request, as a browser sends it (no Authorization header).
  net::Response Presigned(const std::string& method, const std::string& path,
                          std::vector<std::pair<std::string, std::string>> query = {}) {
    PresignRequest presign{.method = method, .host = kHost, .path = path, .query = query};
    auto target = PresignV4(presign, kKey, kRegion, base::Env::Default().NowUnixMicros());
    EXPECT_TRUE(target.ok()) << target.status();
    net::Request request;
    request.set_method(method);
    EXPECT_TRUE(request.SetTarget(*target).ok()) << *target;
    request.mutable_headers().Add("Host", kHost);
    return api_->Handle(request);
  }

  fs::path root_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<S3Api> api_;
};

TEST_F(S3ApiTest, PresignedCreateAndDeleteBucket) {
  // The panel's URLs also carry its origin as a signed x- parameter (ignored by S3).
  net::Response created =
      Presigned("PUT", "/panel-made", {{"x-sovai-origin", "http://127.0.0.1:8080"}});
  EXPECT_EQ(created.status, 200) << created.body;
  auto bucket = store_->GetBucket("panel-made");
  ASSERT_TRUE(bucket.ok());
  EXPECT_EQ(bucket.value().owner, "project-a");

  net::Response deleted = Presigned("DELETE", "/panel-made");
  EXPECT_EQ(deleted.status, 204) << deleted.body;
  EXPECT_FALSE(store_->GetBucket("panel-made").ok());
}

TEST_F(S3ApiTest, RealSubresourcesAreStillRefused) {
  ASSERT_EQ(Presigned("PUT", "/kept").status, 200);
  for (const char* subresource : {"logging", "replication", "lifecycle"}) {
    net::Response put = Presigned("PUT", "/kept", {{subresource, ""}});
    EXPECT_EQ(put.status, 501) << subresource;
    EXPECT_NE(put.body.find("<Code>NotImplemented</Code>"), std::string::npos) << put.body;
    EXPECT_NE(put.body.find(std::string("PUT ?") + subresource), std::string::npos) << put.body;
  }
  net::Response del = Presigned("DELETE", "/kept", {{"website", ""}});
  EXPECT_EQ(del.status, 501);
  EXPECT_NE(del.body.find("DELETE ?website"), std::string::npos) << del.body;
  // Nothing happened to the bucket.
  EXPECT_TRUE(store_->GetBucket("kept").ok());
}

}  // namespace
}  // namespace sovai::objstore
