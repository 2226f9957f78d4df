#include "objstore/sigv4.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/crc.h"
#include "base/crypto.h"
#include "base/strings.h"
#include "base/time.h"

namespace sovai::objstore {
namespace {

// ---- Helpers ---------------------------------------------------------------------------------

// A raw body that fails after `ok_bytes` bytes, like a client that disconnects.
class FailingBody : public net::BodyReader {
 public:
  explicit FailingBody(std::string data) : data_(std::move(data)) {}
  base::Result<size_t> Read(char* buf, size_t n) override {
    if (pos_ == data_.size()) return base::UnavailableError("client disconnected");
    size_t k = std::min(n, data_.size() - pos_);
    std::memcpy(buf, data_.data() + pos_, k);
    pos_ += k;
    return k;
  }

 private:
  std::string data_;
  size_t pos_ = 0;
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

std::unique_ptr<net::Request> MakeRequest(std::string method, std::string_view target,
                                          const HeaderList& headers) {
  auto req = std::make_unique<net::Request>();
  req->set_method(std::move(method));
  base::Status st = req->SetTarget(target);
  EXPECT_TRUE(st.ok()) << st;
  for (const auto& [name, value] : headers) req->mutable_headers().Add(name, value);
  return req;
}

int64_t AmzTime(std::string_view amz_date) {
  base::Result<int64_t> t = base::ParseAmzDate(amz_date);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.value_or(0);
}

std::string HexSha256(std::string_view data) { return base::HexEncode(base::Sha256(data)); }

// Reads the whole body through `reader` in `read_size` pieces. Returns the payload, or the error.
base::Result<std::string> ReadAll(net::BodyReader& reader, size_t read_size = 4096) {
  std::string out;
  std::string buf(read_size, '\0');
  for (;;) {
    base::Result<size_t> n = reader.Read(buf.data(), buf.size());
    if (!n.ok()) return n.status();
    if (*n == 0) return out;
    EXPECT_LE(*n, read_size);
    out.append(buf.data(), *n);
  }
}

// The S3 error code a PayloadReader ends with ("" when it succeeds).
std::string PayloadErrorCode(const AuthResult& auth, const std::string& raw_body,
                             size_t read_size = 4096, size_t raw_piece = SIZE_MAX) {
  net::StringBodyReader raw(raw_body, raw_piece);
  PayloadReader reader(raw, auth);
  base::Result<std::string> body = ReadAll(reader, read_size);
  if (body.ok()) return "";
  EXPECT_EQ(body.status().code(), base::StatusCode::kInvalidArgument) << body.status();
  EXPECT_TRUE(reader.s3_error().has_value());
  return reader.s3_error() ? std::string(reader.s3_error()->name()) : "no s3_error";
}

std::string ErrorCode(const S3Result<AuthResult>& r) {
  return r.ok() ? "OK" : std::string(r.error().name());
}

std::string Detail(const S3Error& e, std::string_view name) {
  for (const auto& [k, v] : e.details) {
    if (k == name) return v;
  }
  return "<missing " + std::string(name) + ">";
}

// ---- The AWS documentation's examples --------------------------------------------------------
// "Signature Calculations for the Authorization Header", "Authenticating Requests: Using Query
// Parameters", "Transferring Payload in Multiple Chunks", "Including Trailing Headers" (S3 API
// reference, SigV4) and "Signing and Authenticating REST Requests" (SigV2).

constexpr char kDocAccessKey[] = "AKIAIOSFODNN7EXAMPLE";
constexpr char kDocSecretKey[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr char kDocDate[] = "20130524T000000Z";
constexpr char kDocScope[] = "20130524/us-east-1/s3/aws4_request";
constexpr char kDocHost[] = "examplebucket.s3.amazonaws.com";

CredentialLookup DocLookup() {
  return [](std::string_view ak) -> std::optional<Credential> {
    if (ak != kDocAccessKey) return std::nullopt;
    return Credential{kDocAccessKey, kDocSecretKey, "doc-user"};
  };
}

AuthOptions DocOptions(int64_t skew_s = 0) {
  return AuthOptions{.region = "us-east-1",
                     .now_unix_micros = AmzTime(kDocDate) + skew_s * base::kMicrosPerSecond};
}

std::string DocAuthorization(std::string_view signed_headers, std::string_view signature) {
  return "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
         "SignedHeaders=" +
         std::string(signed_headers) + ",Signature=" + std::string(signature);
}

TEST(AwsDocsV4, GetObjectWithRange) {
  auto req = MakeRequest(
      "GET", "/test.txt",
      {{"Host", kDocHost},
       {"Range", "bytes=0-9"},
       {"x-amz-content-sha256", std::string(kEmptySha256Hex)},
       {"x-amz-date", kDocDate},
       {"Authorization", DocAuthorization("host;range;x-amz-content-sha256;x-amz-date",
                                          "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd9103"
                                          "9c6036bdb41")}});
  S3Result<AuthResult> auth = Authenticate(*req, DocOptions(), DocLookup());
  ASSERT_TRUE(auth.ok()) << auth.error().ToString();
  EXPECT_FALSE(auth->anonymous);
  EXPECT_EQ(auth->method, "SigV4-header");
  EXPECT_EQ(auth->credential.user_id, "doc-user");
  EXPECT_EQ(auth->payload, PayloadMode::kSignedSha256);
  EXPECT_EQ(auth->payload_sha256_hex, kEmptySha256Hex);
  EXPECT_EQ(auth->scope, kDocScope);
  EXPECT_EQ(auth->amz_date, kDocDate);
  EXPECT_EQ(auth->seed_signature,
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(auth->signing_key, SigningKeyV4(kDocSecretKey, "20130524", "us-east-1"));
}

TEST(AwsDocsV4, PutObjectWithSignedPayload) {
  const std::string body = "Welcome to Amazon S3.";
  ASSERT_EQ(HexSha256(body), "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  HeaderList headers = {
      {"Host", kDocHost},
      {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
      {"x-amz-date", kDocDate},
      {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
      {"x-amz-content-sha256", HexSha256(body)},
      {"Authorization",
       DocAuthorization("date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
                        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")}};
  // The key is "test$file.text": the canonical URI encodes '$' whether or not the client did.
  for (std::string_view target : {"/test%24file.text", "/test$file.text"}) {
    auto req = MakeRequest("PUT", target, headers);
    S3Result<AuthResult> auth = Authenticate(*req, DocOptions(), DocLookup());
    ASSERT_TRUE(auth.ok()) << target << ": " << auth.error().ToString();
    EXPECT_EQ(auth->payload, PayloadMode::kSignedSha256);
    EXPECT_EQ(PayloadErrorCode(*auth, body), "");
    EXPECT_EQ(PayloadErrorCode(*auth, "Welcome to Amazon S3!"), "XAmzContentSHA256Mismatch");
    EXPECT_EQ(PayloadErrorCode(*auth, body + "x"), "XAmzContentSHA256Mismatch");
    EXPECT_EQ(PayloadErrorCode(*auth, ""), "XAmzContentSHA256Mismatch");
  }
}

TEST(AwsDocsV4, GetBucketLifecycleAndListObjects) {
  struct Case {
    std::string_view target;
    std::string_view signature;
  };
  for (const Case& c :
       {Case{"/?lifecycle", "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"},
        Case{"/?max-keys=2&prefix=J",
             "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"},
        // The canonical query is sorted, whatever order the client sent.
        Case{"/?prefix=J&max-keys=2",
             "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"}}) {
    auto req = MakeRequest(
        "GET", c.target,
        {{"Host", kDocHost},
         {"x-amz-content-sha256", std::string(kEmptySha256Hex)},
         {"x-amz-date", kDocDate},
         {"Authorization", DocAuthorization("host;x-amz-content-sha256;x-amz-date", c.signature)}});
    S3Result<AuthResult> auth = Authenticate(*req, DocOptions(), DocLookup());
    EXPECT_TRUE(auth.ok()) << c.target << ": " << auth.error().ToString();
  }
}

constexpr char kDocPresignedTarget[] =
    "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2F"
    "us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-"
    "SignedHeaders=host&X-Amz-Signature="
    "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";

TEST(AwsDocsV4, PresignedGetObject) {
  auto req = MakeRequest("GET", kDocPresignedTarget, {{"Host", kDocHost}});
  // Valid for the whole day the URL was made for, not a second more.
  for (int64_t after_s : {int64_t{0}, int64_t{3600}, int64_t{86400}}) {
    S3Result<AuthResult> auth = Authenticate(*req, DocOptions(after_s), DocLookup());
    ASSERT_TRUE(auth.ok()) << after_s << ": " << auth.error().ToString();
    EXPECT_EQ(auth->method, "SigV4-query");
    EXPECT_EQ(auth->payload, PayloadMode::kUnsigned);
  }
  S3Result<AuthResult> late = Authenticate(*req, DocOptions(86401), DocLookup());
  ASSERT_EQ(ErrorCode(late), "AccessDenied");
  EXPECT_EQ(late.error().message, "Request has expired");
  EXPECT_EQ(Detail(late.error(), "X-Amz-Expires"), "86400");

  // PresignV4 makes the very same URL.
  base::Result<std::string> made =
      PresignV4({.method = "GET", .host = kDocHost, .path = "/test.txt", .expires_seconds = 86400},
                Credential{kDocAccessKey, kDocSecretKey, ""}, "us-east-1", AmzTime(kDocDate));
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(*made, kDocPresignedTarget);
}

// The streaming upload of the AWS example: 66560 bytes of 'a' as chunks of 65536, 1024 and 0.
std::string DocChunkedBody(const std::vector<std::string>& signatures, std::string_view trailer) {
  std::string body;
  body += "10000;chunk-signature=" + signatures[0] + "\r\n" + std::string(65536, 'a') + "\r\n";
  body += "400;chunk-signature=" + signatures[1] + "\r\n" + std::string(1024, 'a') + "\r\n";
  body += "0;chunk-signature=" + signatures[2] + "\r\n";
  body += trailer;
  body += "\r\n";
  return body;
}

TEST(AwsDocsV4, StreamingPutObject) {
  const std::vector<std::string> signatures = {
      "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
      "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
      "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"};
  auto req = MakeRequest(
      "PUT", "/examplebucket/chunkObject.txt",
      {{"Host", "s3.amazonaws.com"},
       {"x-amz-date", kDocDate},
       {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
       {"Authorization",
        DocAuthorization("content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
                         "x-amz-decoded-content-length;x-amz-storage-class",
                         "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9")},
       {"x-amz-content-sha256", std::string(kStreamingSignedPayload)},
       {"Content-Encoding", "aws-chunked"},
       {"x-amz-decoded-content-length", "66560"},
       {"Content-Length", "66824"}});
  S3Result<AuthResult> auth = Authenticate(*req, DocOptions(), DocLookup());
  ASSERT_TRUE(auth.ok()) << auth.error().ToString();
  EXPECT_EQ(auth->payload, PayloadMode::kStreamingSigned);
  EXPECT_EQ(auth->seed_signature,
            "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9");
  EXPECT_EQ(auth->decoded_content_length, 66560u);

  // The chunk signatures of the example, from the helpers.
  EXPECT_EQ(ChunkSignatureV4(auth->signing_key, kDocDate, kDocScope, auth->seed_signature,
                             HexSha256(std::string(65536, 'a'))),
            signatures[0]);
  EXPECT_EQ(ChunkSignatureV4(auth->signing_key, kDocDate, kDocScope, signatures[0],
                             HexSha256(std::string(1024, 'a'))),
            signatures[1]);
  EXPECT_EQ(ChunkSignatureV4(auth->signing_key, kDocDate, kDocScope, signatures[1],
                             std::string(kEmptySha256Hex)),
            signatures[2]);

  const std::string body = DocChunkedBody(signatures, "");
  ASSERT_EQ(body.size(), 66824u);  // the example's Content-Length
  for (size_t read_size : {size_t{1} << 20, size_t{4096}, size_t{1000}, size_t{7}}) {
    net::StringBodyReader raw(body, read_size == 7 ? 13 : SIZE_MAX);
    PayloadReader reader(raw, *auth);
    base::Result<std::string> decoded = ReadAll(reader, read_size);
    ASSERT_TRUE(decoded.ok()) << read_size << ": " << decoded.status();
    EXPECT_EQ(*decoded, std::string(66560, 'a'));
    EXPECT_EQ(reader.decoded_bytes(), 66560u);
  }
  // One changed byte of data, or chunks in another order, break the chain.
  std::string tampered = body;
  tampered[100] = 'b';
  EXPECT_EQ(PayloadErrorCode(*auth, tampered), "SignatureDoesNotMatch");
  EXPECT_EQ(
      PayloadErrorCode(*auth, DocChunkedBody({signatures[1], signatures[0], signatures[2]}, "")),
      "SignatureDoesNotMatch");
}

TEST(AwsDocsV4, StreamingPutObjectWithTrailer) {
  auto req = MakeRequest(
      "PUT", "/examplebucket/chunkObject.txt",
      {{"Host", "s3.amazonaws.com"},
       {"x-amz-date", kDocDate},
       {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
       {"Authorization",
        DocAuthorization("content-encoding;host;x-amz-content-sha256;x-amz-date;"
                         "x-amz-decoded-content-length;x-amz-storage-class;x-amz-trailer",
                         "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e")},
       {"x-amz-content-sha256", std::string(kStreamingSignedPayloadTrailer)},
       {"Content-Encoding", "aws-chunked"},
       {"x-amz-decoded-content-length", "66560"},
       {"x-amz-trailer", "x-amz-checksum-crc32c"}});
  S3Result<AuthResult> auth = Authenticate(*req, DocOptions(), DocLookup());
  ASSERT_TRUE(auth.ok()) << auth.error().ToString();
  EXPECT_EQ(auth->payload, PayloadMode::kStreamingSignedTrailer);
  EXPECT_EQ(auth->trailer_names, std::vector<std::string>{"x-amz-checksum-crc32c"});

  const std::vector<std::string> signatures = {
      "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
      "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
      "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992"};
  const std::string trailer_signature =
      "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435";
  EXPECT_EQ(TrailerSignatureV4(auth->signing_key, kDocDate, kDocScope, signatures[2],
                               "x-amz-checksum-crc32c:sOO8/Q==\n"),
            trailer_signature);
  auto trailer = [&](std::string_view checksum, std::string_view signature) {
    return "x-amz-checksum-crc32c:" + std::string(checksum) +
           "\r\nx-amz-trailer-signature:" + std::string(signature) + "\r\n";
  };
  {
    net::StringBodyReader raw(DocChunkedBody(signatures, trailer("sOO8/Q==", trailer_signature)));
    PayloadReader reader(raw, *auth);
    base::Result<std::string> decoded = ReadAll(reader);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, std::string(66560, 'a'));
    ASSERT_EQ(reader.trailers().size(), 1u);
    EXPECT_EQ(reader.trailers()[0].first, "x-amz-checksum-crc32c");
    EXPECT_EQ(reader.trailers()[0].second, "sOO8/Q==");
  }
  // A changed checksum or trailer signature is caught.
  EXPECT_EQ(
      PayloadErrorCode(*auth, DocChunkedBody(signatures, trailer("AAAAAA==", trailer_signature))),
      "SignatureDoesNotMatch");
  std::string bad_signature = trailer_signature;
  bad_signature[0] = 'e';
  EXPECT_EQ(PayloadErrorCode(*auth, DocChunkedBody(signatures, trailer("sOO8/Q==", bad_signature))),
            "SignatureDoesNotMatch");
}

// SigV2 ("Signing and Authenticating REST Requests"). Those examples write the time zone as
// "+0000", and the bucket comes from the Host header (virtual-hosted style) unless noted.
AuthOptions DocV2Options(std::string_view http_date, std::string bucket) {
  base::Result<int64_t> t = base::ParseHttpDate(
      std::string(http_date.substr(0, http_date.size() - 5)) + "GMT");  // "+0000" → "GMT"
  EXPECT_TRUE(t.ok()) << t.status();
  return AuthOptions{.region = "us-west-1",
                     .now_unix_micros = t.value_or(0),
                     .virtual_host_bucket = std::move(bucket)};
}

TEST(AwsDocsV2, HeaderExamples) {
  struct Case {
    std::string name;
    std::string method;
    std::string target;
    std::string bucket;
    HeaderList headers;
    std::string date;
    std::string signature;
  };
  const std::vector<Case> cases = {
      {"object GET",
       "GET",
       "/photos/puppy.jpg",
       "awsexamplebucket1",
       {{"Host", "awsexamplebucket1.us-west-1.s3.amazonaws.com"}},
       "Tue, 27 Mar 2007 19:36:42 +0000",
       "qgk2+6Sv9/oM7G3qLEjTH1a1l1g="},
      {"object PUT",
       "PUT",
       "/photos/puppy.jpg",
       "awsexamplebucket1",
       {{"Content-Type", "image/jpeg"},
        {"Content-Length", "94328"},
        {"Host", "awsexamplebucket1.s3.us-west-1.amazonaws.com"}},
       "Tue, 27 Mar 2007 21:15:45 +0000",
       "iqRzw+ileNPu1fhspnRs8nOjjIA="},
      {"list",
       "GET",
       "/?prefix=photos&max-keys=50&marker=puppy",
       "awsexamplebucket1",
       {{"User-Agent", "Mozilla/5.0"}, {"Host", "awsexamplebucket1.s3.us-west-1.amazonaws.com"}},
       "Tue, 27 Mar 2007 19:42:41 +0000",
       "m0WP8eCtspQl5Ahe6L1SozdX9YA="},
      {"fetch acl",
       "GET",
       "/?acl",
       "awsexamplebucket1",
       {{"Host", "awsexamplebucket1.s3.us-west-1.amazonaws.com"}},
       "Tue, 27 Mar 2007 19:44:46 +0000",
       "82ZHiFIjc+WbcwFKGUVEQspPn+0="},
      {"upload with amz headers to a CNAME",
       "PUT",
       "/db-backup.dat.gz",
       "static.awsexamplebucket1.net",
       {{"User-Agent", "curl/7.15.5"},
        {"Host", "static.awsexamplebucket1.net:8080"},
        {"x-amz-acl", "public-read"},
        {"content-type", "application/x-download"},
        {"Content-MD5", "4gJE4saaMU4BqNR0kLY+lw=="},
        {"X-Amz-Meta-ReviewedBy", "joe@awsexamplebucket1.net"},
        {"X-Amz-Meta-ReviewedBy", "jane@awsexamplebucket1.net"},
        {"X-Amz-Meta-FileChecksum", "0x02661779"},
        {"X-Amz-Meta-ChecksumAlgorithm", "crc32"},
        {"Content-Disposition", "attachment; filename=database.dat"},
        {"Content-Encoding", "gzip"},
        {"Content-Length", "5913339"}},
       "Tue, 27 Mar 2007 21:06:08 +0000",
       "dKZcB+bz2EPXgSdXZp9ozGeOM4I="},
      {"list all my buckets",
       "GET",
       "/",
       "",
       {{"Host", "s3.us-west-1.amazonaws.com"}},
       "Wed, 28 Mar 2007 01:29:59 +0000",
       "qGdzdERIC03wnaRNKh6OqZehG9s="},
      {"unicode keys, path style, escapes signed as sent",
       "GET",
       "/dictionary/fran%C3%A7ais/pr%c3%a9f%c3%a8re",
       "",
       {{"Host", "s3.us-west-1.amazonaws.com"}},
       "Wed, 28 Mar 2007 01:49:49 +0000",
       "DNEZGsoieTZ92F3bUfSPQcbGmlM="},
  };
  for (const Case& c : cases) {
    HeaderList headers = c.headers;
    headers.emplace_back("Date", c.date);
    headers.emplace_back("Authorization", "AWS AKIAIOSFODNN7EXAMPLE:" + c.signature);
    auto req = MakeRequest(c.method, c.target, headers);
    S3Result<AuthResult> auth = Authenticate(*req, DocV2Options(c.date, c.bucket), DocLookup());
    ASSERT_TRUE(auth.ok()) << c.name << ": " << auth.error().ToString() << "\n"
                           << (auth.ok() ? "" : Detail(auth.error(), "StringToSign"));
    EXPECT_EQ(auth->method, "SigV2-header");
    EXPECT_EQ(auth->credential.user_id, "doc-user");
    EXPECT_EQ(auth->payload, PayloadMode::kUnsigned);

    // The same request with another method does not verify.
    auto other = MakeRequest(c.method == "GET" ? "HEAD" : "POST", c.target, headers);
    EXPECT_EQ(ErrorCode(Authenticate(*other, DocV2Options(c.date, c.bucket), DocLookup())),
              "SignatureDoesNotMatch")
        << c.name;
  }
}

TEST(AwsDocsV2, QueryStringExamples) {
  struct Case {
    std::string target;
    std::string bucket;
    int64_t expires_s;
  };
  // The current page's other example (Expires=1141889120, "vjbyPxybdZaNmGa+yT272YEAiv4=") does
  // not reproduce from its own inputs with any bucket (checked with Python's hmac): a doc error.
  for (const Case& c : {
           Case{"/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzo"
                "ENXmpNDUsSn8%3D&Expires=1175139620",
                "johnsmith", 1175139620},
       }) {
    auto req = MakeRequest("GET", c.target, {{"Host", c.bucket + ".s3.amazonaws.com"}});
    AuthOptions options{.region = "us-east-1",
                        .now_unix_micros = (c.expires_s - 60) * base::kMicrosPerSecond,
                        .virtual_host_bucket = c.bucket};
    S3Result<AuthResult> auth = Authenticate(*req, options, DocLookup());
    ASSERT_TRUE(auth.ok()) << c.target << ": " << auth.error().ToString();
    EXPECT_EQ(auth->method, "SigV2-query");

    options.now_unix_micros = (c.expires_s + 1) * base::kMicrosPerSecond;
    S3Result<AuthResult> expired = Authenticate(*req, options, DocLookup());
    ASSERT_EQ(ErrorCode(expired), "AccessDenied");
    EXPECT_EQ(expired.error().message, "Request has expired");

    // A '+' the client did not escape still verifies (base64 has no spaces).
    std::string unescaped = c.target;
    size_t plus = unescaped.find("%2B");
    unescaped.replace(plus, 3, "+");
    auto req2 = MakeRequest("GET", unescaped, {{"Host", c.bucket + ".s3.amazonaws.com"}});
    options.now_unix_micros = (c.expires_s - 60) * base::kMicrosPerSecond;
    EXPECT_TRUE(Authenticate(*req2, options, DocLookup()).ok());
  }
}

// ---- botocore cross-check --------------------------------------------------------------------

struct BotocoreVector {
  std::string name;
  std::string method;
  std::string target;
  std::string virtual_host_bucket;
  HeaderList headers;
  std::string body;
  std::string decoded;
  HeaderList trailers;
  std::string expected_method;
};

// BEGIN GENERATED by tests/data/sigv4/gen_botocore_vectors.py (botocore 1.43.11); do not edit.
// clang-format off
constexpr char kBotocoreAccessKey[] = "AKIDBOTOCORE0000";
constexpr char kBotocoreSecretKey[] = "botocore/Secret+Key=example";
constexpr char kBotocoreRegion[] = "us-west-2";
constexpr int64_t kBotocoreNowUnixSeconds = 1714564800;
const std::vector<BotocoreVector>& BotocoreVectors() {
  static const auto* vectors = new std::vector<BotocoreVector>{
      {
          .name = "v4_header_get_unicode_key",
          .method = "GET",
          .target = "/photos/dir/a%20key%2B%C3%BC%20%E2%82%AC%281%29%21.txt",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
              {"Range", "bytes=0-9"},
              {"X-Amz-Date", "20240501T120000Z"},
              {"X-Amz-Content-SHA256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
              {"Authorization", "AWS4-HMAC-SHA256 Credential=AKIDBOTOCORE0000/20240501/us-west-2/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=1959ecfae743d34cebfa3c294a6abe66c361f088a14aa87fb19a79654f6277f7"},
          },
          .body = std::string(),
          .decoded = std::string(),
          .trailers = {
          },
          .expected_method = "SigV4-header",
      },
      {
          .name = "v4_header_date_not_amz_date",
          .method = "HEAD",
          .target = "/photos/dated",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
              {"Date", "Wed, 01 May 2024 12:00:00 -0000"},
              {"X-Amz-Content-SHA256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
              {"Authorization", "AWS4-HMAC-SHA256 Credential=AKIDBOTOCORE0000/20240501/us-west-2/s3/aws4_request, SignedHeaders=date;host;x-amz-content-sha256, Signature=d568c0d698c1a62077fece2ba5bdda83c8524d0dee891302ad07b91c0406c82c"},
          },
          .body = std::string(),
          .decoded = std::string(),
          .trailers = {
          },
          .expected_method = "SigV4-header",
      },
      {
          .name = "v4_header_list_query",
          .method = "GET",
          .target = "/photos?list-type=2&prefix=a%20b%2Fc%2Bd&delimiter=%2F&max-keys=10&encoding-type=url&start-after=%C3%BC%3Dx%26y&fetch-owner=&x-id=b&x-id=a",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
              {"X-Amz-Date", "20240501T120000Z"},
              {"X-Amz-Content-SHA256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
              {"Authorization", "AWS4-HMAC-SHA256 Credential=AKIDBOTOCORE0000/20240501/us-west-2/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=74b7e84cce3ee2a5c24a3adf17f75d8cb6944e9c04f9680d345a40c645344a6d"},
          },
          .body = std::string(),
          .decoded = std::string(),
          .trailers = {
          },
          .expected_method = "SigV4-header",
      },
      {
          .name = "v4_header_put_signed_body",
          .method = "PUT",
          .target = "/photos/dir/a%20key%2B%C3%BC%20%E2%82%AC%281%29%21.txt",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
              {"Content-Type", "text/plain"},
              {"x-amz-meta-owner", "  alice   and bob "},
              {"x-amz-storage-class", "STANDARD"},
              {"Content-Length", "31"},
              {"X-Amz-Date", "20240501T120000Z"},
              {"X-Amz-Content-SHA256", "a05cd1bad40679051b24a62a7ae51e3132a4e6717fad70ce2f63dc6b6b8c0e09"},
              {"Authorization", "AWS4-HMAC-SHA256 Credential=AKIDBOTOCORE0000/20240501/us-west-2/s3/aws4_request, SignedHeaders=content-length;content-type;host;x-amz-content-sha256;x-amz-date;x-amz-meta-owner;x-amz-storage-class, Signature=06fcb2a0348b348cfaa08125e6550464ab057969408ce3adec275184062f143c"},
          },
          .body = std::string("Hello, S3 signature version 4!\n", 31),
          .decoded = std::string("Hello, S3 signature version 4!\n", 31),
          .trailers = {
          },
          .expected_method = "SigV4-header",
      },
      {
          .name = "v4_header_put_unsigned",
          .method = "PUT",
          .target = "/photos/unsigned.bin",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
              {"Content-Length", "22"},
              {"X-Amz-Date", "20240501T120000Z"},
              {"X-Amz-Content-SHA256", "UNSIGNED-PAYLOAD"},
              {"Authorization", "AWS4-HMAC-SHA256 Credential=AKIDBOTOCORE0000/20240501/us-west-2/s3/aws4_request, SignedHeaders=content-length;host;x-amz-content-sha256;x-amz-date, Signature=8656d95b5f29d9f6aeb0b2fd1d2cb274d42a45c7263204ad40145ee0878915e3"},
          },
          .body = std::string("unsigned payload bytes", 22),
          .decoded = std::string("unsigned payload bytes", 22),
          .trailers = {
          },
          .expected_method = "SigV4-header",
      },
      {
          .name = "v4_header_vhost_upload_part",
          .method = "PUT",
          .target = "/big/object.bin?partNumber=1&uploadId=u%2F1%2B2%3D3",
          .virtual_host_bucket = "photos",
          .headers = {
              {"Host", "photos.s3.local:9000"},
              {"Content-Length", "8"},
              {"X-Amz-Date", "20240501T120000Z"},
              {"X-Amz-Content-SHA256", "30602ab79ef83f7d41df5625af41de4cf8e08786489ae97a3d517d283101b21b"},
              {"Authorization", "AWS4-HMAC-SHA256 Credential=AKIDBOTOCORE0000/20240501/us-west-2/s3/aws4_request, SignedHeaders=content-length;host;x-amz-content-sha256;x-amz-date, Signature=77d60c2551726386a1bfe510cb15e2731a5c2aa354df1174463c14b764541842"},
          },
          .body = std::string("part-one", 8),
          .decoded = std::string("part-one", 8),
          .trailers = {
          },
          .expected_method = "SigV4-header",
      },
      {
          .name = "v4_header_unsigned_trailer",
          .method = "PUT",
          .target = "/photos/chunked.bin",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
              {"Content-Encoding", "aws-chunked"},
              {"x-amz-trailer", "x-amz-checksum-crc32"},
              {"x-amz-decoded-content-length", "320"},
              {"Content-Length", "374"},
              {"X-Amz-Date", "20240501T120000Z"},
              {"X-Amz-Content-SHA256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"},
              {"Authorization", "AWS4-HMAC-SHA256 Credential=AKIDBOTOCORE0000/20240501/us-west-2/s3/aws4_request, SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-trailer, Signature=1e55cb8f0867bf9531df8aa4d603df1af586d3c1f17a3fd9536b4df2d74285da"},
          },
          .body = std::string("80\r\n0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\r\n80\r\n0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\r\n40\r\n0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\r\n0\r\nx-amz-checksum-crc32:Q/ZNWA==\r\n\r\n", 374),
          .decoded = std::string("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 320),
          .trailers = {
              {"x-amz-checksum-crc32", "Q/ZNWA=="},
          },
          .expected_method = "SigV4-header",
      },
      {
          .name = "v4_query_get",
          .method = "GET",
          .target = "/photos/dir/a%20key%2B%C3%BC%20%E2%82%AC%281%29%21.txt?response-content-type=text%2Fplain%3B%20charset%3Dutf-8&response-content-disposition=attachment%3B%20filename%3D%22a%20b%22&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDBOTOCORE0000%2F20240501%2Fus-west-2%2Fs3%2Faws4_request&X-Amz-Date=20240501T120000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=fa7402a4a860e4bbb60d8c826b0339e20942a3190a83e219899a3d8f7c38ea1b",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
          },
          .body = std::string(),
          .decoded = std::string(),
          .trailers = {
          },
          .expected_method = "SigV4-query",
      },
      {
          .name = "v4_query_put",
          .method = "PUT",
          .target = "/photos/presigned%20put.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDBOTOCORE0000%2F20240501%2Fus-west-2%2Fs3%2Faws4_request&X-Amz-Date=20240501T120000Z&X-Amz-Expires=604800&X-Amz-SignedHeaders=host&X-Amz-Signature=a2d5da48ac3a6ed9080553896643ba9a55d9ea207b3892a8aaff30d5951ca47c",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
          },
          .body = std::string("presigned put", 13),
          .decoded = std::string("presigned put", 13),
          .trailers = {
          },
          .expected_method = "SigV4-query",
      },
      {
          .name = "v2_header_get_unicode_key",
          .method = "GET",
          .target = "/photos/dir/a%20key%2B%C3%BC%20%E2%82%AC%281%29%21.txt",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
              {"Date", "Wed, 01 May 2024 12:00:00 GMT"},
              {"Authorization", "AWS AKIDBOTOCORE0000:jfv4RlgqV+5TW+J5PmpOw9fTxEk="},
          },
          .body = std::string(),
          .decoded = std::string(),
          .trailers = {
          },
          .expected_method = "SigV2-header",
      },
      {
          .name = "v2_header_acl_version",
          .method = "GET",
          .target = "/photos/a%2Bb?acl&versionId=v%201%2F2",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
              {"Date", "Wed, 01 May 2024 12:00:00 GMT"},
              {"Authorization", "AWS AKIDBOTOCORE0000:2LXxZfaB6jk7CPw+OieOkMwD0BI="},
          },
          .body = std::string(),
          .decoded = std::string(),
          .trailers = {
          },
          .expected_method = "SigV2-header",
      },
      {
          .name = "v2_header_put_amz_headers",
          .method = "PUT",
          .target = "/photos/v2.txt",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
              {"Content-Type", "text/plain"},
              {"Content-MD5", "Cw9QmZlv3U0Qgd1G1vAntA=="},
              {"x-amz-meta-b", " two "},
              {"X-Amz-Meta-A", "one"},
              {"x-amz-acl", "private"},
              {"Date", "Wed, 01 May 2024 12:00:00 GMT"},
              {"Authorization", "AWS AKIDBOTOCORE0000:jwQ8nJQ1Q4TXhTLOE3NiD17DaH0="},
          },
          .body = std::string("v2 body", 7),
          .decoded = std::string("v2 body", 7),
          .trailers = {
          },
          .expected_method = "SigV2-header",
      },
      {
          .name = "v2_header_vhost",
          .method = "GET",
          .target = "/k%20e%20y",
          .virtual_host_bucket = "photos",
          .headers = {
              {"Host", "photos.s3.local:9000"},
              {"Date", "Wed, 01 May 2024 12:00:00 GMT"},
              {"Authorization", "AWS AKIDBOTOCORE0000:UFAhGPWSSAjMdnje4bhZVDdoXAU="},
          },
          .body = std::string(),
          .decoded = std::string(),
          .trailers = {
          },
          .expected_method = "SigV2-header",
      },
      {
          .name = "v2_query_get",
          .method = "GET",
          .target = "/photos/dir/a%20key%2B%C3%BC%20%E2%82%AC%281%29%21.txt?response-content-disposition=inline&AWSAccessKeyId=AKIDBOTOCORE0000&Signature=rHyvIKbujbb37h0C3sTmZG87IZc%3D&Expires=1714568400",
          .virtual_host_bucket = "",
          .headers = {
              {"Host", "127.0.0.1:9000"},
          },
          .body = std::string(),
          .decoded = std::string(),
          .trailers = {
          },
          .expected_method = "SigV2-query",
      },
  };
  return *vectors;
}
// clang-format on
// END GENERATED

CredentialLookup BotocoreLookup() {
  return [](std::string_view ak) -> std::optional<Credential> {
    if (ak != kBotocoreAccessKey) return std::nullopt;
    return Credential{kBotocoreAccessKey, kBotocoreSecretKey, "botocore-user"};
  };
}

AuthOptions BotocoreOptions(const BotocoreVector& v) {
  return AuthOptions{.region = kBotocoreRegion,
                     .now_unix_micros = kBotocoreNowUnixSeconds * base::kMicrosPerSecond,
                     .virtual_host_bucket = v.virtual_host_bucket};
}

TEST(Botocore, EveryVectorAuthenticatesAndItsBodyVerifies) {
  ASSERT_GE(BotocoreVectors().size(), 12u);
  for (const BotocoreVector& v : BotocoreVectors()) {
    SCOPED_TRACE(v.name);
    auto req = MakeRequest(v.method, v.target, v.headers);
    S3Result<AuthResult> auth = Authenticate(*req, BotocoreOptions(v), BotocoreLookup());
    ASSERT_TRUE(auth.ok()) << auth.error().ToString() << "\n"
                           << Detail(auth.error(), "CanonicalRequest") << "\n"
                           << Detail(auth.error(), "StringToSign");
    EXPECT_EQ(auth->method, v.expected_method);
    EXPECT_FALSE(auth->anonymous);
    EXPECT_EQ(auth->credential.user_id, "botocore-user");
    for (size_t read_size : {size_t{7}, size_t{4096}}) {
      net::StringBodyReader raw(v.body, 5);
      PayloadReader reader(raw, *auth);
      base::Result<std::string> decoded = ReadAll(reader, read_size);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      EXPECT_EQ(*decoded, v.decoded);
      EXPECT_EQ(reader.trailers(), v.trailers);
    }
  }
}

TEST(Botocore, TrailerChecksumIsTheCrc32OfTheData) {
  // What the front end does with trailers(): compare the checksum with the data it stored.
  for (const BotocoreVector& v : BotocoreVectors()) {
    if (v.trailers.empty()) continue;
    EXPECT_EQ(v.trailers[0].second,
              base::Base64Encode(base::ToBigEndianBytes(base::Crc32(v.decoded))));
  }
}

TEST(Botocore, ChangedRequestsDoNotVerify) {
  for (const BotocoreVector& v : BotocoreVectors()) {
    SCOPED_TRACE(v.name);
    // Another method.
    auto other_method = MakeRequest(v.method == "GET" ? "DELETE" : "GET", v.target, v.headers);
    EXPECT_EQ(ErrorCode(Authenticate(*other_method, BotocoreOptions(v), BotocoreLookup())),
              "SignatureDoesNotMatch");
    // Another key: one more character in the path.
    std::string target = v.target;
    target.insert(target.find('/', 1) == std::string::npos ? 1 : target.find('/', 1) + 1, "x");
    auto other_path = MakeRequest(v.method, target, v.headers);
    EXPECT_EQ(ErrorCode(Authenticate(*other_path, BotocoreOptions(v), BotocoreLookup())),
              "SignatureDoesNotMatch");
    // Another secret.
    auto req = MakeRequest(v.method, v.target, v.headers);
    CredentialLookup wrong_secret = [](std::string_view ak) -> std::optional<Credential> {
      return Credential{std::string(ak), "not the secret", ""};
    };
    EXPECT_EQ(ErrorCode(Authenticate(*req, BotocoreOptions(v), wrong_secret)),
              "SignatureDoesNotMatch");
  }
}

// ---- SignV4 / PresignV4 round trips ----------------------------------------------------------

constexpr char kAk[] = "AKIDSOVAITEST";
constexpr char kSk[] = "s3cr3t/with+special=chars";
constexpr int64_t kNow = 1714564800LL * base::kMicrosPerSecond;  // 2024-05-01T12:00:00Z

CredentialLookup TestLookup() {
  return [](std::string_view ak) -> std::optional<Credential> {
    if (ak != kAk) return std::nullopt;
    return Credential{kAk, kSk, "user-1"};
  };
}

AuthOptions TestOptions(int64_t now = kNow) {
  return AuthOptions{.region = "eu-central-1", .now_unix_micros = now};
}

Credential TestCredential() { return Credential{kAk, kSk, "user-1"}; }

// A request signed by SignV4 with `headers` plus Host.
std::unique_ptr<net::Request> Signed(std::string method, std::string_view target,
                                     HeaderList headers, std::string_view payload_hash,
                                     std::string_view region = "eu-central-1", int64_t now = kNow,
                                     std::string* seed = nullptr) {
  net::Headers h;
  h.Add("Host", "s3.sovai.test:9000");
  for (auto& [k, v] : headers) h.Add(k, v);
  base::Result<std::string> sig =
      SignV4(method, target, h, TestCredential(), region, now, payload_hash);
  EXPECT_TRUE(sig.ok()) << sig.status();
  if (seed) *seed = sig.value_or("");
  HeaderList all(h.begin(), h.end());
  return MakeRequest(std::move(method), target, all);
}

TEST(SignV4, RoundTripsKeysAndQueries) {
  for (std::string_view target :
       {"/", "/bucket", "/bucket/a%20key%2Bplus%C3%BC%E2%82%AC%28x%29%21",
        "/bucket/dir//double/slash", "/bucket/k?uploads", "/bucket/k?uploadId=a%2Fb&partNumber=3",
        "/bucket?list-type=2&prefix=a%20b&delimiter=%2F&start-after=%C3%BC&max-keys=5",
        "/bucket?a=2&a=1&b=&c", "/bucket/tilde~and_dash-.txt"}) {
    auto req = Signed("GET", target, {{"x-amz-meta-note", "  spaced   value "}}, kEmptySha256Hex);
    S3Result<AuthResult> auth = Authenticate(*req, TestOptions(), TestLookup());
    EXPECT_TRUE(auth.ok()) << target << ": " << auth.error().ToString();
  }
}

TEST(PresignV4, RoundTripsAndExpires) {
  PresignRequest p{.method = "PUT",
                   .host = "s3.sovai.test:9000",
                   .path = "/bucket/a key+ü €/x.txt",
                   .query = {{"response-content-type", "text/plain; charset=utf-8"}},
                   .expires_seconds = 600};
  base::Result<std::string> target = PresignV4(p, TestCredential(), "eu-central-1", kNow);
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->rfind("/bucket/a%20key%2B%C3%BC%20%E2%82%AC/x.txt?", 0), 0u) << *target;
  auto req = MakeRequest("PUT", *target, {{"Host", "s3.sovai.test:9000"}});
  EXPECT_EQ(req->path(), "/bucket/a key+ü €/x.txt");
  EXPECT_EQ(req->query("response-content-type"), "text/plain; charset=utf-8");
  S3Result<AuthResult> auth =
      Authenticate(*req, TestOptions(kNow + 600 * base::kMicrosPerSecond), TestLookup());
  ASSERT_TRUE(auth.ok()) << auth.error().ToString();
  EXPECT_EQ(auth->method, "SigV4-query");
  EXPECT_EQ(auth->credential.user_id, "user-1");

  EXPECT_EQ(
      ErrorCode(Authenticate(*req, TestOptions(kNow + 601 * base::kMicrosPerSecond), TestLookup())),
      "AccessDenied");
  // A URL dated in the future (beyond the allowed skew) is not valid yet.
  S3Result<AuthResult> early =
      Authenticate(*req, TestOptions(kNow - 901 * base::kMicrosPerSecond), TestLookup());
  ASSERT_EQ(ErrorCode(early), "AccessDenied");
  EXPECT_EQ(early.error().message, "Request is not valid yet");
  // Another host, method or parameter does not verify.
  auto other_host = MakeRequest("PUT", *target, {{"Host", "evil.test"}});
  EXPECT_EQ(ErrorCode(Authenticate(*other_host, TestOptions(), TestLookup())),
            "SignatureDoesNotMatch");
  auto other_method = MakeRequest("DELETE", *target, {{"Host", "s3.sovai.test:9000"}});
  EXPECT_EQ(ErrorCode(Authenticate(*other_method, TestOptions(), TestLookup())),
            "SignatureDoesNotMatch");
  auto extra_param = MakeRequest("PUT", *target + "&acl", {{"Host", "s3.sovai.test:9000"}});
  EXPECT_EQ(ErrorCode(Authenticate(*extra_param, TestOptions(), TestLookup())),
            "SignatureDoesNotMatch");
  // An unsigned x-amz-* header added to a presigned request.
  auto extra_header =
      MakeRequest("PUT", *target, {{"Host", "s3.sovai.test:9000"}, {"x-amz-acl", "public-read"}});
  S3Result<AuthResult> unsigned_header = Authenticate(*extra_header, TestOptions(), TestLookup());
  ASSERT_EQ(ErrorCode(unsigned_header), "AccessDenied");
  EXPECT_EQ(Detail(unsigned_header.error(), "HeadersNotSigned"), "x-amz-acl");
}

TEST(PresignV4, RejectsBadInputs) {
  Credential c = TestCredential();
  EXPECT_FALSE(PresignV4({.host = "h", .path = "/k", .expires_seconds = 0}, c, "r", kNow).ok());
  EXPECT_FALSE(
      PresignV4({.host = "h", .path = "/k", .expires_seconds = 604801}, c, "r", kNow).ok());
  EXPECT_TRUE(PresignV4({.host = "h", .path = "/k", .expires_seconds = 604800}, c, "r", kNow).ok());
  EXPECT_FALSE(PresignV4({.host = "", .path = "/k"}, c, "r", kNow).ok());
  EXPECT_FALSE(PresignV4({.host = "h", .path = "k"}, c, "r", kNow).ok());
}

TEST(SigV4Query, ParameterErrors) {
  base::Result<std::string> target = PresignV4({.host = "s3.sovai.test:9000", .path = "/b/k"},
                                               TestCredential(), "eu-central-1", kNow);
  ASSERT_TRUE(target.ok());
  auto replace = [&](std::string_view from, std::string_view to) {
    std::string t = *target;
    size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    t.replace(at, from.size(), to);
    return MakeRequest("GET", t, {{"Host", "s3.sovai.test:9000"}});
  };
  struct Case {
    std::string from, to, code, message_part;
  };
  for (const Case& c : std::vector<Case>{
           {"X-Amz-Expires=3600", "X-Amz-Expires=604801", "AuthorizationQueryParametersError",
            "less than a week"},
           {"X-Amz-Expires=3600", "X-Amz-Expires=-1", "AuthorizationQueryParametersError",
            "non-negative"},
           {"X-Amz-Expires=3600", "X-Amz-Expires=soon", "AuthorizationQueryParametersError",
            "number"},
           {"X-Amz-Expires=3600&", "", "AuthorizationQueryParametersError", "requires"},
           {"X-Amz-Algorithm=AWS4-HMAC-SHA256", "X-Amz-Algorithm=AWS4-HMAC-SHA1",
            "AuthorizationQueryParametersError", "only supports"},
           {"X-Amz-Date=20240501T120000Z", "X-Amz-Date=2024-05-01",
            "AuthorizationQueryParametersError", "ISO8601"},
           {"eu-central-1", "us-east-1", "AuthorizationQueryParametersError",
            "expecting 'eu-central-1'"},
           {"%2Fs3%2F", "%2Fs4%2F", "AuthorizationQueryParametersError", "incorrect service"},
           {"X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=range",
            "AuthorizationQueryParametersError", "host"},
           {"AKIDSOVAITEST", "AKIDUNKNOWN", "InvalidAccessKeyId", "does not exist"},
           {"X-Amz-Signature=", "X-Amz-Security-Token=x&X-Amz-Signature=", "InvalidArgument",
            "not supported"},
       }) {
    S3Result<AuthResult> r = Authenticate(*replace(c.from, c.to), TestOptions(), TestLookup());
    ASSERT_EQ(ErrorCode(r), c.code) << c.from << " -> " << c.to;
    EXPECT_NE(r.error().message.find(c.message_part), std::string::npos) << r.error().message;
  }
  S3Result<AuthResult> region =
      Authenticate(*replace("eu-central-1", "us-east-1"), TestOptions(), TestLookup());
  EXPECT_EQ(Detail(region.error(), "Region"), "eu-central-1");
}

// ---- Header-auth errors ----------------------------------------------------------------------

TEST(Authenticate, AnonymousWithoutCredentials) {
  auto req = MakeRequest("GET", "/bucket/key?versionId=3", {{"Host", "h"}});
  S3Result<AuthResult> auth = Authenticate(*req, TestOptions(), TestLookup());
  ASSERT_TRUE(auth.ok());
  EXPECT_TRUE(auth->anonymous);
  EXPECT_EQ(auth->method, "anonymous");
  EXPECT_EQ(auth->payload, PayloadMode::kUnsigned);
  // An anonymous aws-chunked upload with a checksum trailer is still decoded.
  auto chunked =
      MakeRequest("PUT", "/bucket/key",
                  {{"Host", "h"},
                   {"x-amz-content-sha256", std::string(kStreamingUnsignedPayloadTrailer)},
                   {"x-amz-trailer", "x-amz-checksum-crc32"}});
  auth = Authenticate(*chunked, TestOptions(), TestLookup());
  ASSERT_TRUE(auth.ok());
  EXPECT_EQ(auth->payload, PayloadMode::kStreamingUnsignedTrailer);
  // But not a signed stream: its chain needs a signed head.
  auto signed_stream =
      MakeRequest("PUT", "/bucket/key",
                  {{"Host", "h"}, {"x-amz-content-sha256", std::string(kStreamingSignedPayload)}});
  EXPECT_EQ(ErrorCode(Authenticate(*signed_stream, TestOptions(), TestLookup())), "InvalidRequest");
}

TEST(Authenticate, ClockSkew) {
  for (int64_t skew_s : {int64_t{-901}, int64_t{901}, int64_t{86400}}) {
    auto req = Signed("GET", "/b/k", {}, kEmptySha256Hex, "eu-central-1",
                      kNow + skew_s * base::kMicrosPerSecond);
    S3Result<AuthResult> r = Authenticate(*req, TestOptions(), TestLookup());
    ASSERT_EQ(ErrorCode(r), "RequestTimeTooSkewed") << skew_s;
    EXPECT_EQ(Detail(r.error(), "ServerTime"), "2024-05-01T12:00:00Z");
    EXPECT_EQ(Detail(r.error(), "RequestTime"),
              base::FormatAmzDate(kNow + skew_s * base::kMicrosPerSecond));
    EXPECT_EQ(Detail(r.error(), "MaxAllowedSkewMilliseconds"), "900000");
  }
  for (int64_t skew_s : {int64_t{-900}, int64_t{900}}) {
    auto req = Signed("GET", "/b/k", {}, kEmptySha256Hex, "eu-central-1",
                      kNow + skew_s * base::kMicrosPerSecond);
    EXPECT_TRUE(Authenticate(*req, TestOptions(), TestLookup()).ok()) << skew_s;
  }
}

TEST(Authenticate, WrongRegionNamesTheExpectedOne) {
  auto req = Signed("GET", "/b/k", {}, kEmptySha256Hex, "us-west-2");
  S3Result<AuthResult> r = Authenticate(*req, TestOptions(), TestLookup());
  ASSERT_EQ(ErrorCode(r), "AuthorizationHeaderMalformed");
  EXPECT_NE(r.error().message.find("'us-west-2' is wrong; expecting 'eu-central-1'"),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ(Detail(r.error(), "Region"), "eu-central-1");
  // A server with no configured region takes any.
  AuthOptions any = TestOptions();
  any.region = "";
  EXPECT_TRUE(Authenticate(*req, any, TestLookup()).ok());
}

TEST(Authenticate, UnknownAccessKeyAndWrongSecret) {
  auto req = Signed("GET", "/b/k", {}, kEmptySha256Hex);
  CredentialLookup nobody = [](std::string_view) -> std::optional<Credential> {
    return std::nullopt;
  };
  S3Result<AuthResult> r = Authenticate(*req, TestOptions(), nobody);
  ASSERT_EQ(ErrorCode(r), "InvalidAccessKeyId");
  EXPECT_EQ(Detail(r.error(), "AWSAccessKeyId"), kAk);

  CredentialLookup wrong = [](std::string_view ak) -> std::optional<Credential> {
    return Credential{std::string(ak), "wrong secret", ""};
  };
  r = Authenticate(*req, TestOptions(), wrong);
  ASSERT_EQ(ErrorCode(r), "SignatureDoesNotMatch");
  EXPECT_EQ(Detail(r.error(), "AWSAccessKeyId"), kAk);
  EXPECT_EQ(Detail(r.error(), "StringToSign").rfind("AWS4-HMAC-SHA256\n20240501T120000Z\n", 0), 0u);
  EXPECT_EQ(
      Detail(r.error(), "CanonicalRequest").rfind("GET\n/b/k\n\nhost:s3.sovai.test:9000\n", 0), 0u)
      << Detail(r.error(), "CanonicalRequest");
  EXPECT_EQ(Detail(r.error(), "SignatureProvided").size(), 64u);
}

TEST(Authenticate, ChangedSignedHeaderOrPathFails) {
  auto req =
      Signed("PUT", "/b/k",
             {{"x-amz-meta-a", "1"}, {"Content-Type", "text/plain"}, {"x-amz-acl", "private"}},
             kUnsignedPayload);
  ASSERT_TRUE(Authenticate(*req, TestOptions(), TestLookup()).ok());
  HeaderList headers(req->headers().begin(), req->headers().end());
  for (const std::string name :
       {"x-amz-meta-a", "Content-Type", "x-amz-acl", "Host", "x-amz-content-sha256"}) {
    HeaderList changed = headers;
    for (auto& [k, v] : changed) {
      if (k == name) v += "x";
    }
    auto r = MakeRequest("PUT", "/b/k", changed);
    S3Result<AuthResult> auth = Authenticate(*r, TestOptions(), TestLookup());
    // A changed x-amz-content-sha256 is no longer a known value.
    EXPECT_EQ(ErrorCode(auth),
              name == "x-amz-content-sha256" ? "InvalidArgument" : "SignatureDoesNotMatch")
        << name;
  }
  // Whitespace in values is canonical: extra spaces do not matter.
  HeaderList spaced = headers;
  for (auto& [k, v] : spaced) {
    if (k == "Content-Type") v = "  text/plain  ";
  }
  EXPECT_TRUE(Authenticate(*MakeRequest("PUT", "/b/k", spaced), TestOptions(), TestLookup()).ok());
  EXPECT_EQ(
      ErrorCode(Authenticate(*MakeRequest("PUT", "/b/k2", headers), TestOptions(), TestLookup())),
      "SignatureDoesNotMatch");
  EXPECT_EQ(ErrorCode(Authenticate(*MakeRequest("PUT", "/b/k?acl", headers), TestOptions(),
                                   TestLookup())),
            "SignatureDoesNotMatch");
  // An unsigned x-amz-* header is refused outright.
  HeaderList added = headers;
  added.emplace_back("x-amz-grant-read", "uri=everyone");
  S3Result<AuthResult> r =
      Authenticate(*MakeRequest("PUT", "/b/k", added), TestOptions(), TestLookup());
  ASSERT_EQ(ErrorCode(r), "AccessDenied");
  EXPECT_EQ(Detail(r.error(), "HeadersNotSigned"), "x-amz-grant-read");
}

TEST(Authenticate, MalformedAuthorizationHeaders) {
  const std::string good_credential =
      "Credential=AKIDSOVAITEST/20240501/eu-central-1/s3/aws4_request";
  const std::string sig(64, 'a');
  struct Case {
    std::string authorization;
    std::string code;
  };
  for (const Case& c : std::vector<Case>{
           {"AWS4-HMAC-SHA256", "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 ", "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256x Credential=a", "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 " + good_credential, "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 " + good_credential + ", SignedHeaders=host",
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 " + good_credential + ", SignedHeaders=host, Signature=" + sig +
                ", Extra=1",
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 " + good_credential + ", " + good_credential +
                ", SignedHeaders=host, Signature=" + sig,
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 " + good_credential + ", SignedHeaders, Signature=" + sig,
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 Credential=AKIDSOVAITEST/20240501/eu-central-1/s3, "
            "SignedHeaders=host, Signature=" +
                sig,
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 Credential=AKIDSOVAITEST/20240501/eu-central-1/ec2/aws4_request, "
            "SignedHeaders=host, Signature=" +
                sig,
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 Credential=AKIDSOVAITEST/20240501/eu-central-1/s3/aws5_request, "
            "SignedHeaders=host, Signature=" +
                sig,
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 Credential=AKIDSOVAITEST/2024-5-1/eu-central-1/s3/aws4_request, "
            "SignedHeaders=host, Signature=" +
                sig,
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 Credential=AKIDSOVAITEST/20240502/eu-central-1/s3/aws4_request, "
            "SignedHeaders=host, Signature=" +
                sig,
            "AuthorizationHeaderMalformed"},  // not the date of x-amz-date
           {"AWS4-HMAC-SHA256 Credential=/20240501/eu-central-1/s3/aws4_request, "
            "SignedHeaders=host, Signature=" +
                sig,
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 " + good_credential + ", SignedHeaders=range, Signature=" + sig,
            "AuthorizationHeaderMalformed"},  // host not signed
           {"AWS4-HMAC-SHA256 " + good_credential + ", SignedHeaders=Host, Signature=" + sig,
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 " + good_credential +
                ", SignedHeaders=host;;x-amz-date, Signature=" + sig,
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 " + good_credential + ", SignedHeaders=host;host, Signature=" + sig,
            "AuthorizationHeaderMalformed"},
           {"AWS4-HMAC-SHA256 " + good_credential + ", SignedHeaders=host, Signature=" + sig,
            "SignatureDoesNotMatch"},  // well-formed, wrong
           {"AWS4-ECDSA-P256-SHA256 Credential=x", "InvalidArgument"},
           {"Bearer abc", "InvalidArgument"},
           {"", "InvalidArgument"},
           {"AWS AKIDSOVAITEST", "InvalidArgument"},
           {"AWS :sig", "InvalidArgument"},
           {"AWS AKIDSOVAITEST:", "InvalidArgument"},
       }) {
    auto req = MakeRequest("GET", "/b/k",
                           {{"Host", "h"},
                            {"x-amz-date", "20240501T120000Z"},
                            {"Date", "Wed, 01 May 2024 12:00:00 GMT"},
                            {"x-amz-content-sha256", std::string(kEmptySha256Hex)},
                            {"Authorization", c.authorization}});
    S3Result<AuthResult> r = Authenticate(*req, TestOptions(), TestLookup());
    EXPECT_EQ(ErrorCode(r), c.code) << c.authorization;
  }
  // A long SignedHeaders list is refused before any work.
  std::string many = "host";
  for (int i = 0; i < 100; ++i) many += ";x-h" + std::to_string(i);
  auto req = MakeRequest("GET", "/b/k",
                         {{"Host", "h"},
                          {"x-amz-date", "20240501T120000Z"},
                          {"x-amz-content-sha256", std::string(kEmptySha256Hex)},
                          {"Authorization", "AWS4-HMAC-SHA256 " + good_credential +
                                                ", SignedHeaders=" + many + ", Signature=" + sig}});
  EXPECT_EQ(ErrorCode(Authenticate(*req, TestOptions(), TestLookup())),
            "AuthorizationHeaderMalformed");
}

TEST(Authenticate, ContentSha256DateAndTokenRules) {
  auto without = [](std::string_view drop) {
    auto req = Signed("GET", "/b/k", {}, kEmptySha256Hex);
    HeaderList headers;
    for (const auto& [k, v] : req->headers()) {
      if (!base::EqualsIgnoreCase(k, drop)) headers.emplace_back(k, v);
    }
    return MakeRequest("GET", "/b/k", headers);
  };
  S3Result<AuthResult> r =
      Authenticate(*without("x-amz-content-sha256"), TestOptions(), TestLookup());
  ASSERT_EQ(ErrorCode(r), "MissingSecurityHeader");
  EXPECT_EQ(Detail(r.error(), "MissingHeaderName"), "x-amz-content-sha256");
  r = Authenticate(*without("x-amz-date"), TestOptions(), TestLookup());
  ASSERT_EQ(ErrorCode(r), "AccessDenied");

  auto bad_hash = Signed("GET", "/b/k", {}, "not-a-hash");
  r = Authenticate(*bad_hash, TestOptions(), TestLookup());
  ASSERT_EQ(ErrorCode(r), "InvalidArgument");
  EXPECT_EQ(Detail(r.error(), "ArgumentName"), "x-amz-content-sha256");
  EXPECT_EQ(ErrorCode(Authenticate(*Signed("GET", "/b/k", {}, std::string(63, 'a')), TestOptions(),
                                   TestLookup())),
            "InvalidArgument");
  EXPECT_EQ(
      ErrorCode(Authenticate(*Signed("GET", "/b/k", {}, "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD"),
                             TestOptions(), TestLookup())),
      "InvalidArgument");
  // Uppercase hex is a hash too.
  std::string upper = base::AsciiToUpper(kEmptySha256Hex);
  auto upper_req = Signed("GET", "/b/k", {}, upper);
  S3Result<AuthResult> ok = Authenticate(*upper_req, TestOptions(), TestLookup());
  ASSERT_TRUE(ok.ok()) << ok.error().ToString();
  EXPECT_EQ(ok->payload_sha256_hex, kEmptySha256Hex);

  auto token = Signed("GET", "/b/k", {{"x-amz-security-token", "FQoGZXIvYXdzE"}}, kEmptySha256Hex);
  r = Authenticate(*token, TestOptions(), TestLookup());
  ASSERT_EQ(ErrorCode(r), "InvalidArgument");
  EXPECT_NE(r.error().message.find("X-Amz-Security-Token"), std::string::npos);

  auto bad_length =
      Signed("PUT", "/b/k", {{"x-amz-decoded-content-length", "12x"}}, kStreamingSignedPayload);
  EXPECT_EQ(ErrorCode(Authenticate(*bad_length, TestOptions(), TestLookup())), "InvalidArgument");
}

TEST(Authenticate, UnparsableDateIsAccessDenied) {
  // (A valid Date instead of x-amz-date is in the botocore vectors.)
  for (std::string_view date : {"yesterday", "Wed, 01 May 2024 12:00:00", "20240501T120000Z"}) {
    auto req = MakeRequest("GET", "/b/k",
                           {{"Host", "h"},
                            {"Date", std::string(date)},
                            {"x-amz-content-sha256", std::string(kEmptySha256Hex)},
                            {"Authorization",
                             "AWS4-HMAC-SHA256 Credential=AKIDSOVAITEST/20240501/eu-central-1/s3/"
                             "aws4_request, SignedHeaders=date;host, Signature=" +
                                 std::string(64, '0')}});
    EXPECT_EQ(ErrorCode(Authenticate(*req, TestOptions(), TestLookup())), "AccessDenied") << date;
  }
}

TEST(Authenticate, OnlyOneMechanism) {
  base::Result<std::string> target =
      PresignV4({.host = "h", .path = "/b/k"}, TestCredential(), "eu-central-1", kNow);
  ASSERT_TRUE(target.ok());
  auto req = MakeRequest("GET", *target, {{"Host", "h"}, {"Authorization", "AWS AK:sig"}});
  EXPECT_EQ(ErrorCode(Authenticate(*req, TestOptions(), TestLookup())), "InvalidArgument");
  auto both_queries =
      MakeRequest("GET", *target + "&AWSAccessKeyId=AK&Signature=x&Expires=1", {{"Host", "h"}});
  EXPECT_EQ(ErrorCode(Authenticate(*both_queries, TestOptions(), TestLookup())), "InvalidArgument");
}

TEST(Authenticate, SigV2Errors) {
  // Incomplete query parameters.
  auto partial = MakeRequest("GET", "/b/k?AWSAccessKeyId=AKIDSOVAITEST&Expires=1", {{"Host", "h"}});
  EXPECT_EQ(ErrorCode(Authenticate(*partial, TestOptions(), TestLookup())), "AccessDenied");
  auto bad_expires = MakeRequest(
      "GET", "/b/k?AWSAccessKeyId=AKIDSOVAITEST&Expires=tomorrow&Signature=x", {{"Host", "h"}});
  EXPECT_EQ(ErrorCode(Authenticate(*bad_expires, TestOptions(), TestLookup())), "AccessDenied");
  auto unknown = MakeRequest("GET", "/b/k?AWSAccessKeyId=NOPE&Expires=9999999999&Signature=x",
                             {{"Host", "h"}});
  EXPECT_EQ(ErrorCode(Authenticate(*unknown, TestOptions(), TestLookup())), "InvalidAccessKeyId");
  auto wrong = MakeRequest(
      "GET", "/b/k?AWSAccessKeyId=AKIDSOVAITEST&Expires=9999999999&Signature=x", {{"Host", "h"}});
  S3Result<AuthResult> r = Authenticate(*wrong, TestOptions(), TestLookup());
  ASSERT_EQ(ErrorCode(r), "SignatureDoesNotMatch");
  EXPECT_EQ(Detail(r.error(), "StringToSign"), "GET\n\n\n9999999999\n/b/k");
  // Header auth: skewed and missing dates.
  auto skewed = MakeRequest("GET", "/b/k",
                            {{"Host", "h"},
                             {"Date", base::FormatHttpDate(kNow - 3600 * base::kMicrosPerSecond)},
                             {"Authorization", "AWS AKIDSOVAITEST:c2ln"}});
  EXPECT_EQ(ErrorCode(Authenticate(*skewed, TestOptions(), TestLookup())), "RequestTimeTooSkewed");
  auto undated =
      MakeRequest("GET", "/b/k", {{"Host", "h"}, {"Authorization", "AWS AKIDSOVAITEST:c2ln"}});
  EXPECT_EQ(ErrorCode(Authenticate(*undated, TestOptions(), TestLookup())), "AccessDenied");
  auto token = MakeRequest("GET", "/b/k",
                           {{"Host", "h"},
                            {"Date", base::FormatHttpDate(kNow)},
                            {"x-amz-security-token", "t"},
                            {"Authorization", "AWS AKIDSOVAITEST:c2ln"}});
  EXPECT_EQ(ErrorCode(Authenticate(*token, TestOptions(), TestLookup())), "InvalidArgument");
}

// ---- Payload verification, every mode --------------------------------------------------------

TEST(PayloadReader, UnsignedPassesBytesThrough) {
  AuthResult auth;  // anonymous, kUnsigned
  net::StringBodyReader raw("raw bytes, not checked", 3);
  PayloadReader reader(raw, auth);
  char c;
  EXPECT_EQ(reader.Read(&c, 0).value(), 0u);  // a zero-byte read is not the end
  base::Result<std::string> body = ReadAll(reader, 5);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body, "raw bytes, not checked");
  EXPECT_EQ(reader.decoded_bytes(), 22u);
}

TEST(PayloadReader, RawErrorsPassThroughUnchanged) {
  for (PayloadMode mode : {PayloadMode::kUnsigned, PayloadMode::kSignedSha256,
                           PayloadMode::kStreamingUnsignedTrailer}) {
    AuthResult auth;
    auth.payload = mode;
    auth.payload_sha256_hex = std::string(kEmptySha256Hex);
    FailingBody raw(mode == PayloadMode::kStreamingUnsignedTrailer ? "5\r\nab" : "abc");
    PayloadReader reader(raw, auth);
    base::Result<std::string> body = ReadAll(reader);
    ASSERT_FALSE(body.ok());
    EXPECT_EQ(body.status().code(), base::StatusCode::kUnavailable);
    EXPECT_FALSE(reader.s3_error().has_value());
    // Sticky.
    char buf[8];
    EXPECT_EQ(reader.Read(buf, sizeof buf).status(), body.status());
  }
}

TEST(PayloadReader, SignedSha256) {
  const std::string body = "the body of a signed PUT";
  auto req = Signed("PUT", "/b/k", {}, HexSha256(body));
  S3Result<AuthResult> auth = Authenticate(*req, TestOptions(), TestLookup());
  ASSERT_TRUE(auth.ok()) << auth.error().ToString();
  ASSERT_EQ(auth->payload, PayloadMode::kSignedSha256);
  EXPECT_EQ(PayloadErrorCode(*auth, body, 3, 2), "");
  for (size_t i = 0; i < body.size(); i += 5) {
    std::string tampered = body;
    tampered[i] ^= 1;
    EXPECT_EQ(PayloadErrorCode(*auth, tampered), "XAmzContentSHA256Mismatch") << i;
  }
  net::StringBodyReader raw("short");
  PayloadReader reader(raw, *auth);
  ASSERT_FALSE(ReadAll(reader).ok());
  ASSERT_TRUE(reader.s3_error().has_value());
  EXPECT_EQ(Detail(*reader.s3_error(), "ClientComputedContentSHA256"), HexSha256(body));
  EXPECT_EQ(Detail(*reader.s3_error(), "S3ComputedContentSHA256"), HexSha256("short"));
  char buf[4];
  EXPECT_FALSE(reader.Read(buf, 4).ok());  // sticky
}

// A client's signed aws-chunked body, chained from `seed`.
struct StreamClient {
  std::string seed;
  std::string key = SigningKeyV4(kSk, "20240501", "eu-central-1");
  std::string date = "20240501T120000Z";
  std::string scope = "20240501/eu-central-1/s3/aws4_request";

  std::string Encode(const std::vector<std::string>& chunks, const HeaderList& trailers = {},
                     bool sign_trailers = false) const {
    std::string out;
    std::string previous = seed;
    std::vector<std::string> all = chunks;
    all.emplace_back();
    for (const std::string& chunk : all) {
      std::string sig = ChunkSignatureV4(key, date, scope, previous, HexSha256(chunk));
      char size[32];
      std::snprintf(size, sizeof size, "%zx", chunk.size());
      out += std::string(size) + ";chunk-signature=" + sig + "\r\n" + chunk;
      if (!chunk.empty()) out += "\r\n";
      previous = sig;
    }
    std::string canonical;
    for (const auto& [k, v] : trailers) {
      out += k + ":" + v + "\r\n";
      canonical += k + ":" + v + "\n";
    }
    if (sign_trailers) {
      out +=
          "x-amz-trailer-signature:" + TrailerSignatureV4(key, date, scope, previous, canonical) +
          "\r\n";
    }
    out += "\r\n";
    return out;
  }
};

// Flips the byte at `at` of `s`.
std::string Flip(std::string s, size_t at) {
  s[at] = s[at] == 'x' ? 'y' : 'x';
  return s;
}

std::string ReplaceFirst(std::string s, std::string_view from, std::string_view to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(PayloadReader, StreamingSigned) {
  const std::vector<std::string> chunks = {std::string(8192, 'x'), std::string(8192, 'y'), "tail"};
  const std::string data = chunks[0] + chunks[1] + chunks[2];
  StreamClient client;
  auto req = Signed("PUT", "/b/k",
                    {{"Content-Encoding", "aws-chunked"},
                     {"x-amz-decoded-content-length", std::to_string(data.size())}},
                    kStreamingSignedPayload, "eu-central-1", kNow, &client.seed);
  S3Result<AuthResult> auth = Authenticate(*req, TestOptions(), TestLookup());
  ASSERT_TRUE(auth.ok()) << auth.error().ToString();
  ASSERT_EQ(auth->payload, PayloadMode::kStreamingSigned);
  EXPECT_EQ(auth->seed_signature, client.seed);
  const std::string body = client.Encode(chunks);

  for (auto [read_size, raw_piece] :
       std::vector<std::pair<size_t, size_t>>{{65536, SIZE_MAX}, {1, 1}, {100, 7}, {8192, 3}}) {
    net::StringBodyReader raw(body, raw_piece);
    PayloadReader reader(raw, *auth);
    base::Result<std::string> decoded = ReadAll(reader, read_size);
    ASSERT_TRUE(decoded.ok()) << read_size << "/" << raw_piece << ": " << decoded.status();
    EXPECT_EQ(*decoded, data);
  }

  // Chunk data, chunk signatures, chunk order, lengths and framing.
  size_t second_data = body.find("\r\n", body.find("\r\n") + 2 + 8192) + 2;
  second_data = body.find("\r\n", second_data) + 2;  // after the second size line
  EXPECT_EQ(PayloadErrorCode(*auth, Flip(body, 200)), "SignatureDoesNotMatch");
  EXPECT_EQ(PayloadErrorCode(*auth, Flip(body, second_data + 5)), "SignatureDoesNotMatch");
  std::string first_sig = body.substr(body.find("chunk-signature=") + 16, 64);
  EXPECT_EQ(PayloadErrorCode(*auth, ReplaceFirst(body, first_sig, std::string(64, '0'))),
            "SignatureDoesNotMatch");
  EXPECT_EQ(PayloadErrorCode(*auth, ReplaceFirst(body, ";chunk-signature=" + first_sig, "")),
            "SignatureDoesNotMatch");
  // The first two chunks (same size) swapped, each with its own signature.
  const size_t frame = body.find("\r\n", body.find("\r\n") + 2) + 2;
  const std::string swapped =
      body.substr(frame, frame) + body.substr(0, frame) + body.substr(2 * frame);
  ASSERT_EQ(swapped.size(), body.size());
  EXPECT_EQ(PayloadErrorCode(*auth, swapped), "SignatureDoesNotMatch");
  EXPECT_EQ(PayloadErrorCode(*auth, client.Encode({chunks[0], chunks[2]})), "IncompleteBody");
  EXPECT_EQ(PayloadErrorCode(*auth, client.Encode({chunks[0], chunks[1], chunks[2], "more"})),
            "IncompleteBody");
  // Signed with another seed (a replayed body of another request).
  StreamClient other = client;
  other.seed = std::string(64, 'f');
  EXPECT_EQ(PayloadErrorCode(*auth, other.Encode(chunks)), "SignatureDoesNotMatch");
  // Truncated anywhere: IncompleteBody (or a signature error when the cut lands in a signature).
  for (size_t cut :
       {size_t{0}, size_t{5}, size_t{100}, body.size() / 2, body.size() - 3, body.size() - 1}) {
    EXPECT_EQ(PayloadErrorCode(*auth, body.substr(0, cut)), "IncompleteBody") << cut;
  }
  EXPECT_EQ(PayloadErrorCode(*auth, ReplaceFirst(body, "2000;", "2zz0;")), "InvalidRequest");
  EXPECT_EQ(PayloadErrorCode(*auth, body + "garbage"), "InvalidRequest");
  EXPECT_EQ(PayloadErrorCode(*auth,
                             body.substr(0, body.size() - 2) + "x-amz-checksum-crc32:AA==\r\n\r\n"),
            "InvalidRequest");
}

TEST(PayloadReader, StreamingSignedTrailer) {
  const std::vector<std::string> chunks = {std::string(10000, 'q'), "end"};
  const std::string data = chunks[0] + chunks[1];
  const std::string crc = base::Base64Encode(base::ToBigEndianBytes(base::Crc32(data)));
  StreamClient client;
  auto req = Signed("PUT", "/b/k",
                    {{"Content-Encoding", "aws-chunked"},
                     {"x-amz-decoded-content-length", std::to_string(data.size())},
                     {"x-amz-trailer", "x-amz-checksum-crc32"}},
                    kStreamingSignedPayloadTrailer, "eu-central-1", kNow, &client.seed);
  S3Result<AuthResult> auth = Authenticate(*req, TestOptions(), TestLookup());
  ASSERT_TRUE(auth.ok()) << auth.error().ToString();
  ASSERT_EQ(auth->payload, PayloadMode::kStreamingSignedTrailer);
  const HeaderList trailers = {{"x-amz-checksum-crc32", crc}};
  const std::string body = client.Encode(chunks, trailers, true);
  {
    net::StringBodyReader raw(body, 11);
    PayloadReader reader(raw, *auth);
    base::Result<std::string> decoded = ReadAll(reader, 333);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, data);
    EXPECT_EQ(reader.trailers(), trailers);
  }
  // Trailer value and trailer signature are signed.
  EXPECT_EQ(PayloadErrorCode(*auth, ReplaceFirst(body, crc, "AAAAAA==")), "SignatureDoesNotMatch");
  std::string trailer_sig = body.substr(body.find("x-amz-trailer-signature:") + 24, 64);
  EXPECT_EQ(PayloadErrorCode(*auth, ReplaceFirst(body, trailer_sig, std::string(64, 'a'))),
            "SignatureDoesNotMatch");
  EXPECT_EQ(PayloadErrorCode(*auth, client.Encode(chunks, trailers, false)),
            "SignatureDoesNotMatch");
  EXPECT_EQ(PayloadErrorCode(*auth, Flip(body, 50)), "SignatureDoesNotMatch");
  // The trailers must be the declared ones.
  EXPECT_EQ(PayloadErrorCode(*auth, client.Encode(chunks, {}, true)), "IncompleteBody");
  EXPECT_EQ(PayloadErrorCode(*auth, client.Encode(chunks,
                                                  {{"x-amz-checksum-crc32", crc},
                                                   {"x-amz-checksum-sha256", "AAAA"}},
                                                  true)),
            "InvalidRequest");
  EXPECT_EQ(
      PayloadErrorCode(
          *auth, client.Encode(
                     chunks, {{"x-amz-checksum-crc32", crc}, {"x-amz-checksum-crc32", crc}}, true)),
      "InvalidRequest");
  // Header names are case-insensitive on the wire.
  std::string upper = ReplaceFirst(body, "x-amz-checksum-crc32:", "X-Amz-Checksum-CRC32:");
  EXPECT_EQ(PayloadErrorCode(*auth, upper), "");
  // Without the final empty line (some clients end there) it still verifies.
  EXPECT_EQ(PayloadErrorCode(*auth, body.substr(0, body.size() - 2)), "");
  EXPECT_EQ(PayloadErrorCode(*auth, body.substr(0, body.size() - 4)), "IncompleteBody");
}

TEST(PayloadReader, StreamingUnsignedTrailer) {
  const std::string data = "unsigned chunks with a checksum";
  const std::string crc = base::Base64Encode(base::ToBigEndianBytes(base::Crc32(data)));
  auto req = Signed("PUT", "/b/k",
                    {{"Content-Encoding", "aws-chunked"},
                     {"x-amz-decoded-content-length", std::to_string(data.size())},
                     {"x-amz-trailer", "x-amz-checksum-crc32"}},
                    kStreamingUnsignedPayloadTrailer);
  S3Result<AuthResult> auth = Authenticate(*req, TestOptions(), TestLookup());
  ASSERT_TRUE(auth.ok()) << auth.error().ToString();
  ASSERT_EQ(auth->payload, PayloadMode::kStreamingUnsignedTrailer);
  const std::string body = "a\r\n" + data.substr(0, 10) + "\r\n15\r\n" + data.substr(10) +
                           "\r\n0\r\nx-amz-checksum-crc32:" + crc + "\r\n\r\n";
  net::StringBodyReader raw(body, 4);
  PayloadReader reader(raw, *auth);
  base::Result<std::string> decoded = ReadAll(reader, 3);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, data);
  EXPECT_EQ(reader.trailers(), (HeaderList{{"x-amz-checksum-crc32", crc}}));
  // Unsigned: a changed byte gets through here (the caller's CRC check catches it), but framing,
  // lengths and declared trailers are still enforced.
  EXPECT_EQ(PayloadErrorCode(*auth, Flip(body, 5)), "");
  EXPECT_EQ(PayloadErrorCode(*auth, ReplaceFirst(body, "15\r\n", "16\r\n")), "IncompleteBody");
  EXPECT_EQ(PayloadErrorCode(*auth, ReplaceFirst(body, "15\r\n", "14\r\n")), "InvalidRequest");
  EXPECT_EQ(PayloadErrorCode(*auth, ReplaceFirst(body, "a\r\n", "a;\r\n")), "InvalidRequest");
  EXPECT_EQ(PayloadErrorCode(*auth, body.substr(0, 20)), "IncompleteBody");
  EXPECT_EQ(PayloadErrorCode(
                *auth, ReplaceFirst(body, "x-amz-checksum-crc32:", "x-amz-checksum-crc64nvme:")),
            "InvalidRequest");
}

}  // namespace
}  // namespace sovai::objstore
