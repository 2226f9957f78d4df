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

#include "base/crypto.h"
#include "base/env.h"
#include "base/time.h"
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
                          std::string body = "", const Credential& key = kKey) {
    PresignRequest presign{.method = method, .host = kHost, .path = path, .query = query};
    auto target = PresignV4(presign, key, kRegion, base::Env::Default().NowUnixMicros());
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

// What runs on the server's I/O thread (net::RouteOptions::inline_if): reads of one object only.
TEST(S3ApiPointReads, OnlyObjectReadsThatAreNotListingsRunInline) {
  auto request = [](std::string method, std::string_view target) {
    auto req = std::make_unique<net::Request>();
    req->set_method(std::move(method));
    base::Status st = req->SetTarget(target);
    EXPECT_TRUE(st.ok()) << st;
    return req;
  };
  for (const char* target : {"/b/k", "/b/dir/k", "/b/k?versionId=v1", "/b/k?partNumber=2",
                             "/b/k?tagging", "/b/k?X-Amz-Signature=abc&X-Amz-Date=x"}) {
    EXPECT_TRUE(S3Api::IsPointRead(*request("GET", target))) << target;
    EXPECT_TRUE(S3Api::IsPointRead(*request("HEAD", target))) << target;
  }
  for (const char* target : {"/", "/b", "/b/", "/b?list-type=2", "/b/k?uploadId=u1"}) {
    EXPECT_FALSE(S3Api::IsPointRead(*request("GET", target))) << target;
  }
  for (const char* method : {"PUT", "POST", "DELETE", "OPTIONS"}) {
    EXPECT_FALSE(S3Api::IsPointRead(*request(method, "/b/k"))) << method;
  }
}

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

// Issue 29: DeleteObjects checked s3:DeleteObject on the bucket's ARN, so a policy on keys
// (arn:aws:s3:::bucket/tmp/*) was never consulted. Each key is authorized on its own ARN; a
// refused key is an <Error> in the result, the others are deleted.
TEST_F(S3ApiTest, DeleteObjectsAuthorizesEachKey) {
  const Credential other{"AKS3APITEST000000002", "secret-of-the-other-tenant", "project-b"};
  ASSERT_FALSE(store_->PutAccessKey(other).has_value());
  ASSERT_EQ(Presigned("PUT", "/shared").status, 200);
  for (const char* key : {"tmp/a", "keep/b", "locked/c"}) {
    ASSERT_EQ(Presigned("PUT", std::string("/shared/") + key, {}, "bytes").status, 200);
  }
  const std::string policy = R"({"Version": "2012-10-17", "Statement": [
      {"Effect": "Allow", "Principal": {"AWS": ["project-b"]}, "Action": "s3:DeleteObject",
       "Resource": "arn:aws:s3:::shared/tmp/*"},
      {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject",
       "Resource": "arn:aws:s3:::shared/locked/*"}]})";
  ASSERT_EQ(Presigned("PUT", "/shared", {{"policy", ""}}, policy).status, 204);
  const std::string body =
      "<Delete><Object><Key>tmp/a</Key></Object><Object><Key>keep/b</Key></Object>"
      "<Object><Key>locked/c</Key></Object></Delete>";
  net::Response by_other = Presigned("POST", "/shared", {{"delete", ""}}, body, other);
  ASSERT_EQ(by_other.status, 200) << by_other.body;
  EXPECT_NE(by_other.body.find("<Deleted><Key>tmp/a</Key></Deleted>"), std::string::npos)
      << by_other.body;
  EXPECT_NE(by_other.body.find("<Key>keep/b</Key><Code>AccessDenied</Code>"), std::string::npos)
      << by_other.body;
  EXPECT_NE(by_other.body.find("<Key>locked/c</Key><Code>AccessDenied</Code>"), std::string::npos);
  EXPECT_EQ(Read("shared", "tmp/a"), "NoSuchKey");
  EXPECT_EQ(Read("shared", "keep/b"), "bytes");
  // The owner deletes what it may; the Deny on locked/ holds for it too.
  net::Response by_owner = Presigned("POST", "/shared", {{"delete", ""}}, body);
  ASSERT_EQ(by_owner.status, 200) << by_owner.body;
  EXPECT_EQ(Read("shared", "keep/b"), "NoSuchKey");
  EXPECT_EQ(Read("shared", "locked/c"), "bytes");
  EXPECT_NE(by_owner.body.find("<Key>locked/c</Key><Code>AccessDenied</Code>"), std::string::npos)
      << by_owner.body;
}

// --- POST Object (browser form uploads) ----------------------------------------------------

using FormFields = std::vector<std::pair<std::string, std::string>>;

constexpr char kFormBoundary[] = "----WebKitFormBoundaryu8Yq2L3bHRS0bc7J";

// The fields boto3's generate_presigned_post returns for `conditions`, signed with kKey.
FormFields SignedFields(const std::string& conditions, int64_t expires_in_s = 600) {
  const int64_t now = base::Env::Default().NowUnixMicros();
  const std::string amz_date = base::FormatRfc3339(now, 0);  // 2026-12-01T12:00:00Z
  std::string compact;
  for (char c : amz_date) {
    if (c != '-' && c != ':') compact.push_back(c);
  }
  const std::string day = compact.substr(0, 8);
  const std::string credential =
      std::string(kKey.access_key) + "/" + day + "/" + kRegion + "/s3/aws4_request";
  const std::string policy = "{\"expiration\": \"" +
                             base::FormatRfc3339(now + expires_in_s * base::kMicrosPerSecond) +
                             "\", \"conditions\": [" + conditions +
                             ", {\"x-amz-algorithm\": \"AWS4-HMAC-SHA256\"}, "
                             "{\"x-amz-credential\": \"" +
                             credential + "\"}, {\"x-amz-date\": \"" + compact + "\"}]}";
  const std::string b64 = base::Base64Encode(policy);
  return {{"x-amz-algorithm", "AWS4-HMAC-SHA256"},
          {"x-amz-credential", credential},
          {"x-amz-date", compact},
          {"policy", b64},
          {"x-amz-signature",
           base::HexEncode(base::HmacSha256(SigningKeyV4(kKey.secret_key, day, kRegion), b64))}};
}

class S3PostTest : public S3ApiTest {
 protected:
  void SetUp() override {
    S3ApiTest::SetUp();
    ASSERT_EQ(Presigned("PUT", "/uploads").status, 200);
  }

  // The form as a browser posts it; `cut` drops that many bytes off the end (a broken upload).
  net::Response Post(FormFields fields, const std::string& file, size_t cut = 0) {
    std::string body;
    for (const auto& [name, value] : fields) {
      body += std::string("--") + kFormBoundary + "\r\nContent-Disposition: form-data; name=\"" +
              name + "\"\r\n\r\n" + value + "\r\n";
    }
    body += std::string("--") + kFormBoundary +
            "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"photo.png\"\r\n"
            "Content-Type: image/png\r\n\r\n" +
            file + "\r\n--" + kFormBoundary + "--\r\n";
    body.resize(body.size() - cut);
    net::Request request;
    request.set_method("POST");
    EXPECT_TRUE(request.SetTarget("/uploads").ok());
    request.mutable_headers().Add("Host", kHost);
    request.mutable_headers().Add("Content-Type",
                                  std::string("multipart/form-data; boundary=") + kFormBoundary);
    request.mutable_headers().Add("Cache-Control", "max-age=0");  // what a browser adds
    net::StringBodyReader reader(body, 1000);
    request.set_content_length(body.size());
    request.set_body_reader(&reader);
    return api_->Handle(request);
  }

  // `more` first, then the signed fields (x-amz-signature last), as boto3 orders them.
  static FormFields With(const FormFields& fields, FormFields more) {
    more.insert(more.end(), fields.begin(), fields.end());
    return more;
  }
};

TEST_F(S3PostTest, SignedFormUploadStoresTheObject) {
  FormFields fields = With(
      SignedFields(R"({"bucket": "uploads"}, ["starts-with", "$key", "in/"],
      ["starts-with", "$Content-Type", "image/"], {"x-amz-meta-owner": "alice"},
      ["content-length-range", 1, 1000])"),
      {{"key", "in/${filename}"}, {"Content-Type", "image/png"}, {"x-amz-meta-owner", "alice"}});
  net::Response res = Post(fields, "PNG-BYTES");
  EXPECT_EQ(res.status, 204) << res.body;
  EXPECT_EQ(res.headers.Get("Location").value_or(""),
            std::string("http://") + kHost + "/uploads/in/photo.png");
  EXPECT_EQ(Read("uploads", "in/photo.png"), "PNG-BYTES");
  auto v = store_->Head("uploads", "in/photo.png", std::nullopt);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(res.headers.Get("ETag").value_or(""), v->etag);
  EXPECT_EQ(v->meta.content_type, "image/png");
  EXPECT_EQ(v->meta.cache_control, "");  // the browser's header is not the object's
  ASSERT_EQ(v->meta.user.size(), 1u);
  EXPECT_EQ(v->meta.user[0], std::make_pair(std::string("owner"), std::string("alice")));
  EXPECT_EQ(v->owner, "project-a");
}

TEST_F(S3PostTest, AnswersAsSuccessActionAsks) {
  FormFields status = With(SignedFields(R"({"key": "k"}, {"success_action_status": "201"})"),
                           {{"key", "k"}, {"success_action_status", "201"}});
  net::Response created = Post(status, "x");
  EXPECT_EQ(created.status, 201);
  EXPECT_NE(created.body.find("<PostResponse><Location>http://"), std::string::npos)
      << created.body;
  EXPECT_NE(created.body.find("<Bucket>uploads</Bucket><Key>k</Key><ETag>\""), std::string::npos)
      << created.body;

  FormFields redirect = With(
      SignedFields(R"({"key": "a b"}, ["starts-with", "$success_action_redirect", "http://app/"])"),
      {{"key", "a b"}, {"success_action_redirect", "http://app/done?x=1"}});
  net::Response moved = Post(redirect, "x");
  EXPECT_EQ(moved.status, 303);
  std::string location(moved.headers.Get("Location").value_or(""));
  EXPECT_EQ(location.rfind("http://app/done?x=1&bucket=uploads&key=a%20b&etag=%22", 0), 0u)
      << location;
}

TEST_F(S3PostTest, RefusesWhatThePolicyDoesNotAllow) {
  struct Case {
    const char* what;
    FormFields fields;
    std::string file;
    const char* code;
    const char* message;
  } cases[] = {
      {"wrong key prefix",
       With(SignedFields(R"(["starts-with", "$key", "in/"])"), {{"key", "out/x"}}), "x",
       "AccessDenied", "Invalid according to Policy: Policy Condition failed"},
      {"expired", With(SignedFields(R"({"key": "k"})", -1), {{"key", "k"}}), "x", "AccessDenied",
       "Invalid according to Policy: Policy expired."},
      {"field not in the policy",
       With(SignedFields(R"({"key": "k"})"), {{"key", "k"}, {"acl", "public-read"}}), "x",
       "AccessDenied", "Extra input fields: acl"},
      {"too large",
       With(SignedFields(R"({"key": "k"}, ["content-length-range", 2, 5])"), {{"key", "k"}}),
       "123456", "EntityTooLarge", "exceeds the maximum allowed size"},
      {"too small",
       With(SignedFields(R"({"key": "k"}, ["content-length-range", 2, 5])"), {{"key", "k"}}), "1",
       "EntityTooSmall", "smaller than the minimum allowed size"},
      {"no key", SignedFields(R"({"bucket": "uploads"})"), "x", "InvalidArgument",
       "must contain a field named 'key'"},
  };
  for (const Case& c : cases) {
    net::Response res = Post(c.fields, c.file);
    EXPECT_EQ(res.status, std::string(c.code) == "AccessDenied" ? 403 : 400) << c.what;
    EXPECT_NE(res.body.find(std::string("<Code>") + c.code + "</Code>"), std::string::npos)
        << c.what << ": " << res.body;
    EXPECT_NE(res.body.find(c.message), std::string::npos) << c.what << ": " << res.body;
  }
  EXPECT_EQ(Read("uploads", "k"), "NoSuchKey");
  EXPECT_EQ(Read("uploads", "out/x"), "NoSuchKey");
}

TEST_F(S3PostTest, RefusesForgedAndBrokenForms) {
  FormFields forged = With(SignedFields(R"({"key": "k"})"), {{"key", "k"}});
  forged.back().second[0] = forged.back().second[0] == 'a' ? 'b' : 'a';  // x-amz-signature
  net::Response bad_signature = Post(forged, "x");
  EXPECT_EQ(bad_signature.status, 403);
  EXPECT_NE(bad_signature.body.find("SignatureDoesNotMatch"), std::string::npos);

  FormFields fields = With(SignedFields(R"({"key": "k"})"), {{"key", "k"}});
  net::Response truncated = Post(fields, std::string(5000, 'z'), 60);
  EXPECT_EQ(truncated.status, 400);
  EXPECT_NE(truncated.body.find("MalformedPOSTRequest"), std::string::npos) << truncated.body;

  // Unsigned: the bucket is private, so anonymous uploads are refused.
  net::Response anonymous = Post({{"key", "k"}}, "x");
  EXPECT_EQ(anonymous.status, 403) << anonymous.body;
  EXPECT_EQ(Read("uploads", "k"), "NoSuchKey");
}

}  // namespace
}  // namespace sovai::objstore
