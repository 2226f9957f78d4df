// The S3 front end (s3_api.h) called in process: presigned bucket requests, whose query carries
// the signature, are CreateBucket and DeleteBucket, while real subresources S3 has and this store
// does not are refused as NotImplemented, and never change an object (issue 29).
#include "objstore/s3_api.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "base/env.h"
#include "objstore/s3_routes.h"
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
                          std::vector<std::pair<std::string, std::string>> query = {},
                          std::string body = "") {
    PresignRequest presign{.method = method, .host = kHost, .path = path, .query = query};
    auto target = PresignV4(presign, kKey, kRegion, base::Env::Default().NowUnixMicros());
    EXPECT_TRUE(target.ok()) << target.status();
    net::Request request;
    request.set_method(method);
    EXPECT_TRUE(request.SetTarget(*target).ok()) << *target;
    request.mutable_headers().Add("Host", kHost);
    net::StringBodyReader reader(body);
    if (method == "PUT" || method == "POST") request.set_content_length(body.size());
    request.set_body_reader(&reader);
    return api_->Handle(request);
  }

  // The object's bytes, or the error's code.
  std::string Read(const std::string& bucket, const std::string& key) {
    auto v = store_->Head(bucket, key, std::nullopt);
    if (!v.ok()) return std::string(v.error().name());
    auto reader = store_->Open(*v, 0, v->size);
    if (!reader.ok()) return std::string(reader.error().name());
    std::string out(v->size, '\0');
    size_t got = 0;
    while (got < out.size()) {
      auto n = (*reader)->Read(out.data() + got, out.size() - got);
      if (!n.ok() || *n == 0) return "short read";
      got += *n;
    }
    return out;
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
  for (const char* subresource : {"logging", "replication", "website"}) {
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

// Issue 29: `PUT /b/k?retention` (boto3's put_object_retention) stored the Retention XML as the
// object's bytes, and `GET ?torrent` served the object. Every subresource AWS documents, with
// every method, on a bucket and on an object: the ones this server implements answer as that
// operation (never a 5xx but NotImplemented), every other one is 501 NotImplemented with an S3
// error body, and no request changes the object or the bucket.
TEST_F(S3ApiTest, EverySubresourceWithEveryMethodLeavesTheObjectAlone) {
  ASSERT_EQ(Presigned("PUT", "/kept").status, 200);
  ASSERT_EQ(Presigned("PUT", "/kept/k", {}, "ORIGINAL-BYTES").status, 200);
  auto before = store_->Head("kept", "k", std::nullopt);
  ASSERT_TRUE(before.ok());
  // What this server implements, written out here rather than read from the routing table.
  const std::set<std::string> implemented = {
      "GET /kept?location",
      "GET /kept?versioning",
      "GET /kept?cors",
      "GET /kept?tagging",
      "GET /kept?policy",
      "GET /kept?acl",
      "GET /kept?lifecycle",
      "GET /kept?encryption",
      "GET /kept?object-lock",
      "GET /kept?website",
      "GET /kept?versions",
      "GET /kept?uploads",
      "GET /kept?ownershipControls",
      "GET /kept?publicAccessBlock",
      "GET /kept?policyStatus",
      "PUT /kept?ownershipControls",
      "PUT /kept?publicAccessBlock",
      "DELETE /kept?ownershipControls",
      "DELETE /kept?publicAccessBlock",
      "PUT /kept?versioning",
      "PUT /kept?cors",
      "PUT /kept?tagging",
      "PUT /kept?policy",
      "PUT /kept?acl",
      "PUT /kept?lifecycle",
      "PUT /kept?object-lock",
      "DELETE /kept?lifecycle",
      "DELETE /kept?cors",
      "DELETE /kept?tagging",
      "DELETE /kept?policy",
      "POST /kept?delete",
      "GET /kept/k?uploadId",
      "GET /kept/k?tagging",
      "GET /kept/k?acl",
      "GET /kept/k?attributes",
      "GET /kept/k?legal-hold",
      "GET /kept/k?retention",
      "GET /kept/k?versionId",
      "GET /kept/k?partNumber",
      "HEAD /kept/k?versionId",
      "HEAD /kept/k?partNumber",
      "PUT /kept/k?tagging",
      "PUT /kept/k?acl",
      "PUT /kept/k?legal-hold",
      "PUT /kept/k?retention",
      "PUT /kept/k?uploadId",
      "PUT /kept/k?partNumber",
      "DELETE /kept/k?tagging",
      "DELETE /kept/k?uploadId",
      "DELETE /kept/k?versionId",
      "POST /kept/k?uploads",
      "POST /kept/k?uploadId",
  };
  const std::string retention =
      "<Retention xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Mode>GOVERNANCE</Mode>"
      "<RetainUntilDate>2030-01-01T00:00:00Z</RetainUntilDate></Retention>";
  int refused = 0;
  for (const std::string path : {"/kept", "/kept/k"}) {
    for (const std::string method : {"GET", "HEAD", "PUT", "POST", "DELETE"}) {
      for (std::string_view sub : S3Subresources()) {
        std::string value = sub == "versionId"     ? "0123456789abcdefABCDEF0123456789"
                            : sub == "uploadId"    ? "no-such-upload"
                            : sub == "partNumber"  ? "1"
                            : sub == "select-type" ? "2"
                                                   : "";
        const std::string what = method + " " + path + "?" + std::string(sub);
        const bool with_body = method == "PUT" || method == "POST";
        net::Response res =
            Presigned(method, path, {{std::string(sub), value}}, with_body ? retention : "");
        if (implemented.contains(what)) {
          EXPECT_TRUE(res.status < 500 || res.status == 501) << what << ": " << res.status;
        } else {
          ++refused;
          EXPECT_EQ(res.status, 501) << what << ": " << res.body;
          if (method != "HEAD") {
            EXPECT_NE(res.body.find("<Code>NotImplemented</Code>"), std::string::npos)
                << what << ": " << res.body;
          }
        }
        ASSERT_EQ(Read("kept", "k"), "ORIGINAL-BYTES") << what;
        auto now = store_->Head("kept", "k", std::nullopt);
        ASSERT_TRUE(now.ok()) << what;
        EXPECT_EQ(now->etag, before->etag) << what;
        EXPECT_EQ(now->mtime_micros, before->mtime_micros) << what;
        EXPECT_EQ(now->meta.tags, before->meta.tags) << what;
        ASSERT_TRUE(store_->GetBucket("kept").ok()) << what;
      }
    }
  }
  EXPECT_GT(refused, 300);
}

// Writes never run with a parameter they do not understand; reads ignore one, as S3 does.
TEST_F(S3ApiTest, UnknownParametersOfWritesAreRefused) {
  ASSERT_EQ(Presigned("PUT", "/kept").status, 200);
  ASSERT_EQ(Presigned("PUT", "/kept/k", {}, "ORIGINAL-BYTES").status, 200);
  net::Response put = Presigned("PUT", "/kept/k", {{"future-subresource", ""}}, "<Xml/>");
  EXPECT_EQ(put.status, 501);
  EXPECT_NE(put.body.find("PUT ?future-subresource"), std::string::npos) << put.body;
  EXPECT_EQ(Presigned("DELETE", "/kept/k", {{"future-subresource", ""}}).status, 501);
  EXPECT_EQ(Read("kept", "k"), "ORIGINAL-BYTES");
  net::Response get = Presigned("GET", "/kept/k", {{"v", "2"}});
  EXPECT_EQ(get.status, 200);
  EXPECT_EQ(get.body, "ORIGINAL-BYTES");
}

}  // namespace
}  // namespace sovai::objstore
