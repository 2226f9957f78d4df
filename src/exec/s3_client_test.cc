// S3Client against a real in-process object store and S3 front end on a loopback port (the
// wiring of src/cli/server.cc), and against small fake servers for the failures a real store
// does not produce (corrupted or truncated bodies, a busy server).
#include "exec/s3_client.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "base/crypto.h"
#include "base/env.h"
#include "exec/s3_test_server.h"
#include "net/http.h"
#include "objstore/s3_api.h"
#include "objstore/store.h"

namespace sovai::exec {
namespace {

using testing::S3TestServer;
constexpr const char* kRegion = testing::kS3TestRegion;
constexpr const char* kAdminUser = testing::kS3TestAdminUser;
constexpr const char* kAccessKey = testing::kS3TestAccessKey;
constexpr const char* kSecretKey = testing::kS3TestSecretKey;

using base::Env;
using base::StatusCode;

std::string MakeTempDir() {
  char tmpl[] = "/tmp/sovai-s3-client-test-XXXXXX";
  SOVAI_CHECK(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

// Deterministic bytes that differ at every offset within a part.
std::string Pattern(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    out[i] = static_cast<char>(x);
  }
  return out;
}

class S3ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    ASSERT_TRUE(server_.Start(dir_).ok());
    ASSERT_TRUE(server_.store().CreateBucket("data", kAdminUser).ok());
    client_ = std::make_unique<S3Client>(server_.ClientOptions());
    ASSERT_TRUE(client_->status().ok()) << client_->status();
  }
  void TearDown() override { env_.DeleteDirRecursive(dir_).IgnoreError(); }

  std::string WriteLocal(const std::string& name, const std::string& content) {
    std::string path = dir_ + "/" + name;
    EXPECT_TRUE(env_.WriteFileAtomically(path, content).ok());
    return path;
  }
  void Put(S3Client& client, const std::string& key, const std::string& content) {
    auto put = client.PutObjectFromFile("data", key, WriteLocal("upload.tmp", content));
    ASSERT_TRUE(put.ok()) << put.status();
  }
  std::string Get(const std::string& key) {
    const std::string path = dir_ + "/download.tmp";
    auto got = client_->GetObjectToFile("data", key, path);
    EXPECT_TRUE(got.ok()) << got.status();
    return env_.ReadFile(path).value_or("<missing>");
  }

  Env& env_ = Env::Default();
  std::string dir_;
  S3TestServer server_;
  std::unique_ptr<S3Client> client_;
};

TEST_F(S3ClientTest, AwkwardKeysRoundTripThroughPutListAndGet) {
  const std::vector<std::string> keys = {
      "plain.txt",        "with space.txt",   "plus+sign",       "ünïcödé/日本語.bin",
      "percent%20kept",   "tilde~star*(1)!'", "a/b/c/deep.txt",  "query?hash#amp&eq=1",
      "semi;colon,comma", "tab\tand\x01ctrl", "trailing space ", "x/../not-a-dir",
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    SCOPED_TRACE(keys[i]);
    const std::string content = "object " + std::to_string(i) + " " + keys[i];
    auto put = client_->PutObjectFromFile("data", keys[i], WriteLocal("upload.tmp", content));
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_EQ(put->etag, base::HexEncode(base::Md5(content)));
    EXPECT_EQ(put->size_bytes, content.size());
    EXPECT_EQ(Get(keys[i]), content);
  }
  auto listed = client_->ListObjects("data", "");
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_EQ(listed->size(), sorted.size());
  for (size_t i = 0; i < sorted.size(); ++i) {
    EXPECT_EQ((*listed)[i].key, sorted[i]);
    EXPECT_EQ((*listed)[i].etag.size(), 32u);
    EXPECT_GT((*listed)[i].last_modified_unix_micros, 0);
  }
}

TEST_F(S3ClientTest, ListFollowsContinuationTokensAndHonoursThePrefix) {
  S3ClientOptions options = server_.ClientOptions();
  options.list_page_keys = 2;
  S3Client paged(options);
  for (int i = 0; i < 7; ++i) Put(paged, "p/" + std::to_string(i), std::string(i, 'x'));
  Put(paged, "q/other", "no");
  Put(paged, "p", "the prefix without its slash");
  auto listed = paged.ListObjects("data", "p/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 7u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ((*listed)[i].key, "p/" + std::to_string(i));
    EXPECT_EQ((*listed)[i].size_bytes, static_cast<uint64_t>(i));
  }
  auto all = paged.ListObjects("data", "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 9u);
  auto none = paged.ListObjects("data", "zzz");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(S3ClientTest, AFailedDownloadLeavesTheOldFileAndNoTemporary) {
  const std::string path = WriteLocal("keep.txt", "old content");
  auto got = client_->GetObjectToFile("data", "missing-key", path);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("GET s3://data/missing-key: NoSuchKey"), std::string::npos)
      << got.status();
  EXPECT_EQ(env_.ReadFile(path).value_or(""), "old content");
  auto names = env_.ListDir(dir_);
  ASSERT_TRUE(names.ok());
  for (const std::string& name : *names) EXPECT_FALSE(base::IsAtomicWriteTempName(name)) << name;
}

TEST_F(S3ClientTest, MissingBucketIsNotFound) {
  auto listed = client_->ListObjects("nosuchbucket", "");
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.status().code(), StatusCode::kNotFound);
  EXPECT_NE(listed.status().message().find("NoSuchBucket"), std::string::npos) << listed.status();
  base::Status head = client_->HeadBucket("nosuchbucket");
  EXPECT_EQ(head.code(), StatusCode::kNotFound) << head;
  EXPECT_NE(head.message().find("bucket 'nosuchbucket' does not exist"), std::string::npos);
  auto got = client_->GetObjectToFile("nosuchbucket", "k", dir_ + "/x");
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(env_.FileExists(dir_ + "/x"));
  EXPECT_TRUE(client_->HeadBucket("data").ok());
}

TEST_F(S3ClientTest, CreateBucketInTheClientsRegion) {
  ASSERT_TRUE(client_->CreateBucket("fresh-bucket").ok());
  EXPECT_TRUE(client_->HeadBucket("fresh-bucket").ok());
  base::Status again = client_->CreateBucket("fresh-bucket");
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again;
  base::Status bad = client_->CreateBucket("Bad_Name");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("InvalidBucketName"), std::string::npos) << bad;
}

TEST_F(S3ClientTest, ListAndDeleteBuckets) {
  ASSERT_TRUE(client_->CreateBucket("zeta-bucket").ok());
  ASSERT_TRUE(client_->CreateBucket("alpha-bucket").ok());
  auto listed = client_->ListBuckets();
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> names;
  for (const S3Bucket& b : *listed) {
    names.push_back(b.name);
    EXPECT_GT(b.created_unix_micros, 0) << b.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"alpha-bucket", "data", "zeta-bucket"}));
  ASSERT_TRUE(env_.WriteFileAtomically(dir_ + "/one", "1").ok());
  ASSERT_TRUE(client_->PutObjectFromFile("zeta-bucket", "one", dir_ + "/one").ok());
  EXPECT_EQ(client_->DeleteBucket("zeta-bucket").code(), StatusCode::kFailedPrecondition)
      << "it holds an object";
  ASSERT_TRUE(client_->DeleteObject("zeta-bucket", "one").ok());
  ASSERT_TRUE(client_->DeleteBucket("zeta-bucket").ok());
  EXPECT_EQ(client_->DeleteBucket("zeta-bucket").code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->DeleteBucket("a/b").code(), StatusCode::kInvalidArgument);
}

TEST_F(S3ClientTest, HeadBucketTellsAccessDeniedFromNotFound) {
  auto bob = server_.store().CreateAccessKey("bob");
  ASSERT_TRUE(bob.ok());
  S3ClientOptions options = server_.ClientOptions();
  options.access_key = bob->access_key;
  options.secret_key = bob->secret_key;
  S3Client as_bob(options);
  base::Status head = as_bob.HeadBucket("data");  // the admin's bucket
  EXPECT_EQ(head.code(), StatusCode::kPermissionDenied) << head;
  EXPECT_NE(head.message().find("access to bucket 'data'"), std::string::npos) << head;
  EXPECT_EQ(as_bob.HeadBucket("nosuchbucket").code(), StatusCode::kNotFound);
  auto listed = as_bob.ListObjects("data", "");
  EXPECT_EQ(listed.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(listed.status().message().find("AccessDenied"), std::string::npos) << listed.status();
}

TEST_F(S3ClientTest, WrongCredentialsGiveAClearError) {
  S3ClientOptions options = server_.ClientOptions();
  options.secret_key = "not-the-secret";
  S3Client wrong_secret(options);
  auto listed = wrong_secret.ListObjects("data", "");
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(listed.status().message().find("SignatureDoesNotMatch"), std::string::npos)
      << listed.status();
  EXPECT_NE(listed.status().message().find("check the secret key of access key '" +
                                           std::string(kAccessKey) + "'"),
            std::string::npos)
      << listed.status();

  options = server_.ClientOptions();
  options.access_key = "SVUNKNOWN00000000000";
  S3Client unknown_key(options);
  auto put = unknown_key.PutObjectFromFile("data", "k", WriteLocal("f", "x"));
  EXPECT_EQ(put.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(put.status().message().find("InvalidAccessKeyId"), std::string::npos) << put.status();

  options = server_.ClientOptions();
  options.region = "us-east-1";
  S3Client wrong_region(options);
  auto other = wrong_region.ListObjects("data", "");
  EXPECT_EQ(other.status().code(), StatusCode::kUnauthenticated) << other.status();
}

TEST_F(S3ClientTest, MultipartUploadAboveTheThresholdRoundTripsByteIdentical) {
  S3ClientOptions options = server_.ClientOptions();
  options.multipart_threshold_bytes = 1 << 20;
  options.part_size_bytes = kMinPartSizeBytes;
  S3Client client(options);
  const std::string content = Pattern(2 * kMinPartSizeBytes + 12345, 7);
  auto put = client.PutObjectFromFile("data", "big/model.bin", WriteLocal("big", content));
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->size_bytes, content.size());
  EXPECT_TRUE(put->etag.ends_with("-3")) << put->etag;
  auto head = server_.store().Head("data", "big/model.bin", std::nullopt);
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->part_sizes.size(), 3u);
  EXPECT_EQ(Get("big/model.bin"), content);

  // Below the threshold: one PUT.
  auto small = client.PutObjectFromFile("data", "small.bin", WriteLocal("small", "tiny"));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->etag, base::HexEncode(base::Md5("tiny")));
}

// Reads fail from `fail_at` bytes into any file: an upload that breaks after some parts.
class FailingReadEnv : public base::EnvWrapper {
 public:
  FailingReadEnv(Env& target, uint64_t fail_at) : EnvWrapper(target), fail_at_(fail_at) {}
  base::Result<std::unique_ptr<base::RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    SOVAI_ASSIGN_OR_RETURN(auto file, target().NewRandomAccessFile(path));
    return std::unique_ptr<base::RandomAccessFile>(new FailingFile(std::move(file), fail_at_));
  }

 private:
  class FailingFile : public base::RandomAccessFile {
   public:
    FailingFile(std::unique_ptr<base::RandomAccessFile> file, uint64_t fail_at)
        : file_(std::move(file)), fail_at_(fail_at) {}
    base::Result<size_t> ReadAt(uint64_t offset, std::span<char> out) const override {
      if (offset >= fail_at_) return base::InternalError("injected read failure");
      return file_->ReadAt(offset, out);
    }
    uint64_t size_bytes() const override { return file_->size_bytes(); }

   private:
    std::unique_ptr<base::RandomAccessFile> file_;
    uint64_t fail_at_;
  };
  uint64_t fail_at_;
};

TEST_F(S3ClientTest, AFailedMultipartUploadIsAborted) {
  FailingReadEnv failing(env_, kMinPartSizeBytes + 1000);  // inside the second part
  S3ClientOptions options = server_.ClientOptions();
  options.multipart_threshold_bytes = 1 << 20;
  options.part_size_bytes = kMinPartSizeBytes;
  options.env = &failing;
  S3Client client(options);
  const std::string path = WriteLocal("big", Pattern(2 * kMinPartSizeBytes + 10, 3));
  auto put = client.PutObjectFromFile("data", "broken.bin", path);
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.status().message().find("injected read failure"), std::string::npos)
      << put.status();
  bool truncated = false;
  auto uploads = server_.store().ListUploads("data", {}, &truncated);
  ASSERT_TRUE(uploads.ok());
  EXPECT_TRUE(uploads->empty()) << uploads->size() << " multipart uploads left behind";
  EXPECT_FALSE(server_.store().Head("data", "broken.bin", std::nullopt).ok());
}

TEST_F(S3ClientTest, ACheckedUploadStoresNothingWhenTheCheckRefuses) {
  S3ClientOptions options = server_.ClientOptions();
  options.multipart_threshold_bytes = 1 << 20;
  options.part_size_bytes = kMinPartSizeBytes;
  S3Client client(options);
  // The file is rewritten while it is read: the check (size/mtime compared by the volume sync)
  // refuses, and neither the small PUT nor the multipart upload leaves an object behind.
  const std::string small = WriteLocal("small", "before");
  const std::string big = WriteLocal("big", Pattern(2 * kMinPartSizeBytes + 10, 5));
  for (const std::string& path : {small, big}) {
    int checks = 0;
    auto put = client.PutObjectFromFile("data", "torn.bin", path, [&]() -> base::Status {
      ++checks;
      return base::AbortedError("it changed while it was read");
    });
    ASSERT_FALSE(put.ok()) << path;
    EXPECT_EQ(put.status().code(), base::StatusCode::kAborted);
    EXPECT_EQ(checks, 1);
    EXPECT_FALSE(server_.store().Head("data", "torn.bin", std::nullopt).ok()) << path;
  }
  bool truncated = false;
  auto uploads = server_.store().ListUploads("data", {}, &truncated);
  ASSERT_TRUE(uploads.ok());
  EXPECT_TRUE(uploads->empty()) << uploads->size() << " multipart uploads left behind";

  // Accepted: the large file went up in parts (1 MiB threshold), the small one in one PUT.
  auto whole = client.PutObjectFromFile("data", "whole.bin", big, [] { return base::Status(); });
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(whole->etag.ends_with("-3")) << whole->etag;
  auto tiny = client.PutObjectFromFile("data", "tiny.bin", small, [] { return base::Status(); });
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->etag, base::HexEncode(base::Md5("before")));
  EXPECT_EQ(Get("tiny.bin"), "before");
}

TEST_F(S3ClientTest, DeleteObject) {
  Put(*client_, "gone.txt", "bye");
  EXPECT_TRUE(client_->DeleteObject("data", "gone.txt").ok());
  auto listed = client_->ListObjects("data", "");
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
  // As in S3, deleting a missing key succeeds.
  EXPECT_TRUE(client_->DeleteObject("data", "never-there").ok());
  EXPECT_EQ(client_->DeleteObject("nosuchbucket", "k").code(), StatusCode::kNotFound);
}

TEST_F(S3ClientTest, PutOfAMissingFileFailsBeforeAnyRequest) {
  auto put = client_->PutObjectFromFile("data", "k", dir_ + "/no-such-file");
  EXPECT_EQ(put.status().code(), StatusCode::kNotFound) << put.status();
  auto dir = client_->PutObjectFromFile("data", "k", dir_);
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument) << dir.status();
}

TEST(S3ClientOptionsTest, InvalidOptionsFailEveryCall) {
  struct Case {
    S3ClientOptions options;
    std::string message_part;
  };
  S3ClientOptions good{
      .endpoint = "http://127.0.0.1:1", .region = "r", .access_key = "a", .secret_key = "s"};
  std::vector<Case> cases;
  cases.push_back({good, ""});
  cases.back().options.endpoint = "ftp://127.0.0.1";
  cases.back().message_part = "http:// or https://";
  cases.push_back({good, "has a path"});
  cases.back().options.endpoint = "http://127.0.0.1:9000/bucket";
  cases.push_back({good, "part size"});
  cases.back().options.part_size_bytes = 1 << 20;
  cases.push_back({good, "part size"});
  cases.back().options.part_size_bytes = kMaxPartSizeBytes + 1;
  cases.push_back({good, "multipart threshold"});
  cases.back().options.multipart_threshold_bytes = kMaxSinglePutBytes + 1;
  cases.push_back({good, "list page size"});
  cases.back().options.list_page_keys = 0;
  cases.push_back({good, "empty signing region"});
  cases.back().options.region = "";
  cases.push_back({good, "empty access key"});
  cases.back().options.secret_key = "";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message_part);
    S3Client client(c.options);
    EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(client.status().message().find(c.message_part), std::string::npos) << client.status();
    EXPECT_EQ(client.ListObjects("b", "").status(), client.status());
    EXPECT_EQ(client.HeadBucket("b"), client.status());
  }
  EXPECT_TRUE(S3Client(good).status().ok());
}

// A fake S3 endpoint whose answers the test chooses.
class FakeS3 {
 public:
  explicit FakeS3(net::Handler handler) {
    net::Router router;
    router.SetFallback(std::move(handler));
    server_ = std::make_unique<net::Server>(std::move(router));
    SOVAI_CHECK(server_->Start({.listen = "127.0.0.1:0"}).ok());
  }
  S3ClientOptions ClientOptions() const {
    return {.endpoint = "http://" + server_->address(),
            .region = kRegion,
            .access_key = kAccessKey,
            .secret_key = kSecretKey};
  }

 private:
  std::unique_ptr<net::Server> server_;
};

TEST(S3ClientFakeServerTest, ADownloadWhoseBytesDoNotMatchTheEtagIsDataLoss) {
  FakeS3 fake([](net::Request&) {
    net::Response res = net::Response::Text(200, "jello", "application/octet-stream");
    res.headers.Set("ETag", "\"" + base::HexEncode(base::Md5("hello")) + "\"");
    return res;
  });
  const std::string dir = MakeTempDir();
  S3Client client(fake.ClientOptions());
  auto got = client.GetObjectToFile("b", "k", dir + "/k");
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status();
  EXPECT_FALSE(Env::Default().FileExists(dir + "/k"));

  S3ClientOptions no_check = fake.ClientOptions();
  no_check.verify_md5_etags = false;
  S3Client trusting(no_check);
  EXPECT_TRUE(trusting.GetObjectToFile("b", "k", dir + "/k").ok());
  Env::Default().DeleteDirRecursive(dir).IgnoreError();
}

TEST(S3ClientFakeServerTest, ATruncatedDownloadIsAnErrorAndLeavesNoFile) {
  std::atomic<int> requests{0};
  FakeS3 fake([&](net::Request&) {
    ++requests;
    return net::Response::Stream(
        200, "application/octet-stream", [](net::BodyWriter& out) { return out.Write("abc"); },
        /*content_length=*/10);
  });
  const std::string dir = MakeTempDir();
  S3Client client(fake.ClientOptions());
  auto got = client.GetObjectToFile("b", "k", dir + "/k");
  EXPECT_FALSE(got.ok());
  EXPECT_EQ(requests.load(), kMaxRequestAttempts);  // a broken body is retried
  auto names = Env::Default().ListDir(dir);
  ASSERT_TRUE(names.ok());
  EXPECT_TRUE(names->empty());
  Env::Default().DeleteDirRecursive(dir).IgnoreError();
}

TEST(S3ClientFakeServerTest, ABusyServerIsRetried) {
  std::atomic<int> requests{0};
  FakeS3 fake([&](net::Request&) {
    if (++requests == 1) {
      return net::Response::Text(
          503,
          "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
          "</Error>",
          "application/xml");
    }
    return net::Response::Text(200, "hello", "application/octet-stream");
  });
  const std::string dir = MakeTempDir();
  S3Client client(fake.ClientOptions());
  auto got = client.GetObjectToFile("b", "k", dir + "/k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(requests.load(), 2);
  EXPECT_EQ(Env::Default().ReadFile(dir + "/k").value_or(""), "hello");

  // Busy every time: the S3 error comes back after the last attempt.
  requests = -100;
  FakeS3 always_busy([](net::Request&) {
    return net::Response::Text(
        503,
        "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
        "</Error>",
        "application/xml");
  });
  S3Client busy(always_busy.ClientOptions());
  auto failed = busy.GetObjectToFile("b", "k", dir + "/busy");
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find("SlowDown: Please reduce your request rate."),
            std::string::npos)
      << failed.status();
  EXPECT_FALSE(Env::Default().FileExists(dir + "/busy"));
  Env::Default().DeleteDirRecursive(dir).IgnoreError();
}

}  // namespace
}  // namespace sovai::exec
