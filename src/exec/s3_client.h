// A small S3 client for the platform's own use (volume sync): list, download to a file, upload
// from a file (multipart above a threshold), delete, and check a bucket. It speaks to Sovai's
// S3 endpoint or any S3-compatible one, path-style, signing with SigV4 (objstore/sigv4.h).
//
//   S3Client s3({.endpoint = "http://127.0.0.1:9000", .region = "eu-west-local",
//                .access_key = key.id, .secret_key = key.secret});
//   SOVAI_RETURN_IF_ERROR(s3.HeadBucket("data"));
//   SOVAI_ASSIGN_OR_RETURN(auto objects, s3.ListObjects("data", "datasets/"));
//   SOVAI_ASSIGN_OR_RETURN(S3Object got, s3.GetObjectToFile("data", objects[0].key, "/tmp/x"));
//
// Payloads are sent as UNSIGNED-PAYLOAD (the head is signed; the body is protected by TLS or by
// staying on loopback). Integrity is checked instead where S3 allows it: a download must deliver
// exactly Content-Length bytes, and when the ETag is a plain MD5 (single-part objects; parts)
// the MD5 of the bytes must equal it, on downloads and uploads (S3ClientOptions::verify_md5_etags).
//
// Errors. Every failed call returns a Status whose message names the operation and the object
// ("GET s3://data/ds/a.txt: NoSuchKey: The specified key does not exist.") with S3's error Code
// and Message from the XML body. Codes: NotFound (NoSuchBucket, NoSuchKey, NoSuchUpload, 404),
// PermissionDenied (AccessDenied, 403), Unauthenticated (InvalidAccessKeyId,
// SignatureDoesNotMatch, RequestTimeTooSkewed: the message says to check the keys or the clock),
// InvalidArgument (other 4xx), Unavailable (503 SlowDown, connection failures), Internal (other
// 5xx, malformed responses), DataLoss (a download or upload whose bytes do not match), and the
// errors of the local file operations (Env). Requests are retried up to kMaxRequestAttempts
// times on 500, 503 and broken connections.
//
// Thread-safety: not thread-safe (one HTTP connection, reused); use one client per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "exec/volume_limits.h"

namespace sovai::net {
class HttpClient;
}  // namespace sovai::net

namespace sovai::exec {

struct S3ClientOptions {
  // "http://host:port" or "https://host[:port]", without a path.
  std::string endpoint;
  // The signing region: the S3 side's name, e.g. "eu-west-local" for the server region
  // EU-WEST-LOCAL (Sovai's S3 front end uses the lowercase form).
  std::string region;
  std::string access_key;
  std::string secret_key;

  // Files larger than this are uploaded in parts of part_size_bytes (kMinPartSizeBytes ..
  // kMaxPartSizeBytes; grown when a file would need more than kMaxParts parts). The threshold
  // must not exceed kMaxSinglePutBytes.
  uint64_t multipart_threshold_bytes = kDefaultMultipartThresholdBytes;
  uint64_t part_size_bytes = kDefaultPartSizeBytes;
  // Keys per ListObjectsV2 page, 1..1000 (small values exercise continuation in tests).
  int list_page_keys = kDefaultListPageKeys;
  // Compare the MD5 of transferred bytes with ETags that are plain MD5s. Turn off for stores
  // whose ETags are not MD5s (SSE-KMS on AWS).
  bool verify_md5_etags = true;

  // TLS: the CA bundle (PEM) to trust; empty = the system store.
  std::string ca_file;
  // Clock (request dates, retry backoff) and files. nullptr = Env::Default().
  base::Env* env = nullptr;
};

// One object of a listing, or what a transfer found. `etag` is without the surrounding quotes
// ("9bb58f26192e4ba00f01e2e7b136bbd8", "…-3" for multipart objects).
struct S3Object {
  std::string key;
  uint64_t size_bytes = 0;
  std::string etag;
  int64_t last_modified_unix_micros = 0;

  bool operator==(const S3Object&) const = default;
};

// A bucket as ListBuckets answers it.
struct S3Bucket {
  std::string name;
  int64_t created_unix_micros = 0;
};

class S3Client {
 public:
  // Invalid options (a malformed endpoint, a part size or threshold out of range, an empty
  // region or key) are not reported here: every call then fails with InvalidArgument saying
  // which. status() tells them up front.
  explicit S3Client(S3ClientOptions options);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // OK, or why the options are unusable.
  const base::Status& status() const { return options_status_; }
  const S3ClientOptions& options() const { return options_; }

  // Every object whose key starts with `prefix` (a plain string prefix, "" for all), in key
  // order, following continuation tokens. Errors: as above; ResourceExhausted beyond
  // kMaxListedObjects objects.
  base::Result<std::vector<S3Object>> ListObjects(std::string_view bucket, std::string_view prefix);

  // Downloads an object to `path`, atomically: the bytes go to a temporary file in the same
  // directory (which must exist), which is fsync'ed and renamed over `path` only once the whole
  // body arrived and checked out; on any failure `path` is untouched and the temporary removed.
  // Returns the object's size, ETag and Last-Modified. Errors: as above; DataLoss when fewer or
  // more bytes than Content-Length arrived or the MD5 does not match the ETag.
  base::Result<S3Object> GetObjectToFile(std::string_view bucket, std::string_view key,
                                         const std::string& path);

  // Uploads the file at `path` as `key`, streaming it. Files above multipart_threshold_bytes go
  // in parts; a failed multipart upload is aborted (best effort) before returning the error, so
  // no parts are left behind. The file must not change during the upload (FailedPrecondition
  // when it shrinks). Returns the new object's size and ETag (last_modified is 0).
  base::Result<S3Object> PutObjectFromFile(std::string_view bucket, std::string_view key,
                                           const std::string& path);

  // As above, for a file that may be written while it is read (a running workload's): the file
  // is never stored torn. `before_commit` runs once every byte has been read and sent and
  // before the object becomes visible; its error is returned and nothing is stored. A file of at
  // most kSnapshotInMemoryBytes (and multipart_threshold_bytes) is read into memory, checked,
  // then PUT; a larger one goes up as a multipart upload (parts of part_size_bytes), checked
  // before CompleteMultipartUpload and aborted on error. Memory: at most kSnapshotInMemoryBytes.
  base::Result<S3Object> PutObjectFromFile(std::string_view bucket, std::string_view key,
                                           const std::string& path,
                                           const std::function<base::Status()>& before_commit);

  // Uploads `data` as `key` in one PUT (small objects: manifests). Errors: as above.
  base::Result<S3Object> PutObject(std::string_view bucket, std::string_view key,
                                   std::string_view data);

  // Deletes the latest version of `key` (a missing key is success, as in S3).
  base::Status DeleteObject(std::string_view bucket, std::string_view key);

  // Whether the bucket exists and these credentials may list it. Errors: NotFound ("bucket
  // 'x' does not exist"), PermissionDenied (it exists but access is denied, or the credentials
  // are wrong: a HEAD answer carries no body to tell those apart), and transport errors.
  base::Status HeadBucket(std::string_view bucket);

  // Creates a bucket in the client's region. Errors: AlreadyExists when it exists (S3's
  // BucketAlreadyOwnedByYou or BucketAlreadyExists), InvalidArgument for an invalid name, and
  // the errors above.
  base::Status CreateBucket(std::string_view bucket);

  // The buckets these credentials own, by name. Errors: as above.
  base::Result<std::vector<S3Bucket>> ListBuckets();

  // Deletes an empty bucket. Errors: NotFound (NoSuchBucket), FailedPrecondition
  // (BucketNotEmpty), PermissionDenied, and the errors above.
  base::Status DeleteBucket(std::string_view bucket);

 private:
  // The file at `path` as a PUT of `key` may take it: a regular file within S3's object size.
  base::Result<base::FileStat> StatUploadable(std::string_view bucket, std::string_view key,
                                              const std::string& path);
  struct Call;
  struct Response;
  base::Result<Response> Execute(const Call& call);
  base::Result<S3Object> PutSingle(std::string_view bucket, std::string_view key,
                                   const std::string& path, uint64_t size_bytes);
  base::Result<S3Object> PutMultipart(std::string_view bucket, std::string_view key,
                                      const std::string& path, uint64_t size_bytes,
                                      const std::function<base::Status()>* before_commit = nullptr);

  S3ClientOptions options_;
  base::Status options_status_;
  base::Env& env_;
  std::string host_header_;  // "127.0.0.1:9000", as signed and sent
  std::unique_ptr<net::HttpClient> http_;
};

}  // namespace sovai::exec
