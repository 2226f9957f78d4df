// Which S3 operation a request names, from its method, what its path addresses (the service, a
// bucket, an object) and its query's subresources, by one explicit table: every operation of
// AWS's S3 API (botocore's S3 model) has a row, implemented or NotImplemented. So no subresource
// ever falls through to the plain object or bucket operation: `PUT /b/k?retention` is not a
// PutObject that stores the retention XML as the object's bytes.
//
//   S3Route r = RouteS3Request("PUT", S3Level::kObject, req.query_params());
//   if (r.op == S3Op::kNotImplemented) return Error(NotImplemented, r.message);
//
// Rules (docs/api/s3.md, "Routing"):
// * A subresource is a query parameter in S3Subresources(). The first row of the method and
//   level whose subresource is present wins; the row without one comes last.
// * Any other subresource present (`?acl&retention`) makes the request NotImplemented.
// * Writes (PUT, POST, DELETE) also refuse every parameter their operation does not take, so an
//   unknown future subresource cannot reach a write either. Reads (GET, HEAD) ignore unknown
//   plain parameters, as S3 does (cache-busting `?v=2` on a public object).
// * Never parameters of an operation: the signature's (X-Amz-*, AWSAccessKeyId, Signature,
//   Expires) and the caller's own `x-` parameters (S3 ignores them: the SDKs' `x-id`, the panel's
//   `x-sovai-origin`).
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sovai::objstore {

// What the path addresses: "/" (the service), "/bucket", "/bucket/key".
enum class S3Level { kService, kBucket, kObject };

// The handler a request goes to. Paired operations (Get/Put/Delete of one configuration) share
// one handler, which looks at the method.
enum class S3Op {
  kListBuckets,
  kCreateBucket,
  kDeleteBucket,
  kHeadBucket,
  kGetBucketLocation,
  kBucketVersioning,
  kBucketCors,
  kBucketTagging,
  kBucketPolicy,
  kBucketAcl,
  kBucketLifecycle,
  kBucketOwnershipControls,
  kBucketPublicAccessBlock,
  kGetBucketPolicyStatus,
  kGetBucketEncryption,
  kObjectLockConfiguration,
  kGetBucketWebsite,
  kListObjects,  // V1 and V2 (list-type=2)
  kListObjectVersions,
  kListMultipartUploads,
  kDeleteObjects,
  kPostObject,  // a browser form upload (multipart/form-data with a POST policy)
  kGetObject,
  kHeadObject,
  kPutObject,  // and CopyObject (x-amz-copy-source)
  kDeleteObject,
  kObjectTagging,
  kObjectAcl,
  kObjectRetention,
  kObjectLegalHold,
  kGetObjectAttributes,
  kCreateMultipartUpload,
  kUploadPart,  // and UploadPartCopy
  kCompleteMultipartUpload,
  kAbortMultipartUpload,
  kListParts,
  // AWS has the operation (or the subresource), this server does not: 501 NotImplemented.
  kNotImplemented,
  // No operation of S3 has this method on this level: 405 MethodNotAllowed.
  kMethodNotAllowed,
};

struct S3Route {
  S3Op op = S3Op::kNotImplemented;
  // AWS's name of the operation ("PutObjectRetention"); for kNotImplemented and
  // kMethodNotAllowed, the message for the client, naming the method and parameter.
  std::string name;
};

S3Route RouteS3Request(std::string_view method, S3Level level,
                       const std::vector<std::pair<std::string, std::string>>& query);

// The query parameters AWS documents as subresources or operation selectors (the SigV2
// canonical-resource list and every `?name` of botocore's S3 model), sorted.
std::span<const std::string_view> S3Subresources();

// True for the parameters that never select anything: X-Amz-*, the SigV2 query signature's, and
// any `x-` parameter.
bool IsSigningOrCallerParameter(std::string_view name);

// One row of the routing table, for tests and docs: every operation AWS's S3 API has.
struct S3RouteRow {
  std::string_view method;
  S3Level level;
  std::string_view subresource;  // "" = none
  S3Op op;
  std::string_view name;  // AWS's operation name
  // Other parameters the operation takes, space-separated (writes refuse anything else).
  std::string_view params;
};
std::span<const S3RouteRow> S3RouteTable();

}  // namespace sovai::objstore
