// Private to the S3 front end (s3_api.cc, s3_objects.cc): the per-request class S3Api::Call and
// the helpers its operations share. Not included from other modules or other objstore files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "net/http.h"
#include "objstore/acl.h"
#include "objstore/iam_policy.h"
#include "objstore/lifecycle.h"
#include "objstore/object_lock.h"
#include "objstore/post_form.h"
#include "objstore/post_policy.h"
#include "objstore/s3_api.h"
#include "objstore/s3_error.h"
#include "objstore/s3_xml.h"
#include "objstore/sigv4.h"
#include "objstore/store.h"

namespace sovai::objstore {
namespace s3_call {

// Request bodies of S3 are at most one 5 GiB object, plus the aws-chunked framing around it.
inline constexpr uint64_t kMaxS3BodyBytes = (5ull << 30) + (64ull << 20);
inline constexpr uint64_t kMaxPutBytes = 5ull << 30;
inline constexpr size_t kStreamPieceBytes = 1 << 20;
inline constexpr std::string_view kXmlType = "application/xml";

// RFC 3339 with milliseconds, as S3's XML dates.
std::string Iso8601(int64_t micros);
std::string NewRequestId();
// A key in a URL: percent-encoded, '/' kept.
std::string UrlEncodeKey(std::string_view s);
// The ETag of the object a CompleteMultipartUpload with these parts makes: the MD5 of the parts'
// MD5s, "-N" (what the store computes).
std::string MultipartEtag(const std::vector<CompletePart>& parts);
// The body, failing (ResourceExhausted) once more than `limit` bytes arrive (XML bodies).
base::Result<std::string> ReadLimited(net::BodyReader& body, size_t limit);
// The ChecksumBits of "CRC32", "crc32c", ...; 0 for an algorithm this server does not compute.
uint32_t ChecksumBitOf(std::string_view algorithm);

// A BodyReader over an ObjectReader (copies are staged from the source object).
class ObjectBody final : public net::BodyReader {
 public:
  explicit ObjectBody(ObjectReader& r) : r_(r) {}
  base::Result<size_t> Read(char* buf, size_t n) override { return r_.Read(buf, n); }

 private:
  ObjectReader& r_;
};

struct ChecksumField {
  const char* header;  // x-amz-checksum-...
  const char* algorithm;
  uint32_t bit;
  std::string Checksums::*member;
};
inline constexpr ChecksumField kChecksumFields[] = {
    {"x-amz-checksum-crc32", "CRC32", kCrc32, &Checksums::crc32},
    {"x-amz-checksum-crc32c", "CRC32C", kCrc32c, &Checksums::crc32c},
    {"x-amz-checksum-crc64nvme", "CRC64NVME", kCrc64Nvme, &Checksums::crc64nvme},
    {"x-amz-checksum-sha1", "SHA1", kSha1, &Checksums::sha1},
    {"x-amz-checksum-sha256", "SHA256", kSha256, &Checksums::sha256},
};

// x-amz-checksum-* headers for every value in `c`, and x-amz-checksum-type.
void AddChecksumHeaders(net::Response& res, const Checksums& c);
// <Owner><ID>user</ID><DisplayName>user</DisplayName></Owner> (or Initiator, Grantee).
void WriteIdentity(XmlWriter& w, const char* element, const std::string& user);

// A bucket's access documents (policy, ACL, Object Ownership, Public Access Block) as stored,
// read in one go for a request's authorization.
struct BucketAccess {
  std::optional<std::string> policy;
  std::optional<std::string> acl;
  std::optional<std::string> ownership;
  std::optional<std::string> public_access_block;
};

}  // namespace s3_call

// --- One request ---------------------------------------------------------------------------------

class S3Api::Call {
 public:
  Call(S3Api& api, net::Request& req) : api_(api), store_(api.store_), req_(req) {}

  net::Response Run();

 private:
  // --- Plumbing ---
  net::Response Error(const S3Error& e);
  net::Response Xml(int status, std::string body);
  net::Response Empty(int status);
  std::optional<std::string_view> Query(std::string_view name) const { return req_.query(name); }
  std::string Header(std::string_view name) const {
    return std::string(req_.header(name).value_or(""));
  }
  S3Status ParseAddress();
  S3Status Authenticate();
  // --- Access control (s3_access.cc) ---
  // Authorizes `action` on `bucket` (and `key`, for object actions): the admin; else the bucket
  // policy's Deny; the bucket owner; the policy's Allow; the bucket's or object's ACL (unless
  // BucketOwnerEnforced); with the Public Access Block applied to the last two.
  S3Status Authorize(const BucketInfo& bucket, std::string_view action, bool object_action,
                     const std::string& key);
  bool IsAdmin() const;
  S3Result<s3_call::BucketAccess> AccessOf(const std::string& bucket);
  PolicyRequest PolicyRequestFor(const BucketInfo& bucket, std::string_view action,
                                 bool object_action, const std::string& key,
                                 std::string_view policy_text);
  AclResolver Resolver();
  // The ACL a write asks for (x-amz-acl or x-amz-grant-*) for a resource owned by `owner`,
  // checked against the bucket's Object Ownership (AccessControlListNotSupported) and Public
  // Access Block (AccessDenied); nullopt when it asks for none or ACLs are disabled.
  S3Result<std::optional<Acl>> RequestedAcl(const BucketInfo& bucket, const std::string& owner,
                                            bool object);
  // Sets the owner of an object this request writes (the writer under ObjectWriter, else the
  // bucket owner) and its ACL in `meta` (none copied from a source).
  S3Status ApplyWriteAcl(const BucketInfo& bucket, std::string* owner, ObjectMeta* meta);
  // CreateBucket: Object Ownership and ACL of the new bucket, checked before it is made.
  struct NewBucketAccess {
    std::string ownership;
    std::optional<Acl> acl;
  };
  S3Result<NewBucketAccess> AccessForNewBucket();
  // The bucket's first Object Ownership and ACL, stored by CreateBucket with the bucket itself.
  void AddNewBucketAccess(const NewBucketAccess& access, BucketSetup* setup);
  // PutBucketPolicy: the policy parses for this bucket and, under BlockPublicPolicy, is not
  // public.
  S3Status CheckNewPolicy(std::string_view text);
  // The request's bucket, `action` authorized on it (or on key_, for object actions; an empty
  // action authorizes nothing, for operations that authorize per key), and the
  // x-amz-expected-bucket-owner it asks for.
  S3Result<BucketInfo> BucketFor(std::string_view action, bool object_action);
  // Whether the listing asks for encoding-type=url; InvalidArgument for any other value.
  S3Result<bool> UrlEncodingRequested() const;
  // The XML body, its Content-MD5 and checksums verified. `object_checksums`: the request's
  // x-amz-checksum-* headers describe the object being made (CompleteMultipartUpload), not the
  // body, and are left to the operation.
  S3Result<std::string> ReadXmlBody(bool object_checksums = false);
  // The checksum algorithms the request asks for (ChecksumBits).
  uint32_t RequestedChecksumBits() const;
  // Checks Content-MD5 (raw `md5`) and every declared x-amz-checksum-* (header or trailer) against
  // what was computed; returns the checksums to store. BadDigest / InvalidDigest.
  S3Result<Checksums> VerifyDigests(
      std::string_view md5, const Checksums& computed,
      const std::vector<std::pair<std::string, std::string>>& trailers, bool headers = true);
  // Refuses what asks for a protection or an exposure this server does not give, rather than
  // ignore it: server-side encryption, Object Lock (NotImplemented); ACL headers on an operation
  // that does not take them (`takes_acl` false: InvalidRequest).
  S3Status RefuseUnsupportedProtections(bool takes_acl);
  // x-amz-checksum-* headers, trailers and announced algorithms this server cannot compute are
  // refused (InvalidRequest) instead of being left unverified.
  S3Status RefuseUnknownChecksums();
  S3Result<ObjectMeta> MetaFromHeaders();
  void AddCors(net::Response& res);

  // --- Operations ---
  net::Response Dispatch();
  net::Response ListBuckets();
  net::Response CreateBucket();
  net::Response DeleteBucket();
  net::Response HeadBucket();
  net::Response GetBucketLocation();
  // A configuration this server never has (lifecycle, encryption, ...): after the bucket and
  // authorization checks, the "not configured" error each SDK expects.
  net::Response NotConfigured(std::string_view action, S3Error not_configured);
  net::Response BucketVersioning();
  net::Response BucketConfig(const std::string& kind);
  net::Response ListObjects(bool v2);
  net::Response ListVersions();
  net::Response ListUploads();
  net::Response DeleteObjects();
  net::Response Preflight();
  net::Response PutObject();
  // What a PutObject's headers ask for (metadata, lock, owner and ACL, conditions), checked as
  // PutObject checks them; PostObject shares it through PostFieldsAsHeaders.
  S3Result<PutOptions> PutOptionsFromHeaders(const BucketInfo& bucket);
  net::Response CopyObject();
  net::Response GetObject(bool head);
  // GetObject's steps: the conditional headers (an error or a 304 when they refuse), the part or
  // Range asked for (an error when unsatisfiable), the checksum headers, the bytes.
  struct ReadRange {
    uint64_t offset = 0;
    uint64_t length = 0;
    int status = 200;  // 206 for a part of a multipart object or a Range
  };
  std::optional<net::Response> CheckReadConditions(const ObjectVersion& v);
  std::optional<net::Response> SelectReadRange(const ObjectVersion& v, ReadRange& range,
                                               net::Response& res);
  void AddReadChecksumHeaders(net::Response& res, const ObjectVersion& v, int status);
  net::Response SendObjectBytes(const ObjectVersion& v, const ReadRange& range, net::Response res);
  net::Response DeleteObject();
  net::Response ObjectTagging();
  net::Response AclOperation(bool object);  // Get/Put Bucket/Object Acl
  net::Response OwnershipControls();
  net::Response PublicAccessBlockConfig();
  net::Response PolicyStatus();
  net::Response CreateUpload();
  net::Response UploadPart();
  net::Response CompleteUpload();
  net::Response CompleteResult(const BucketInfo& bucket, const ObjectVersion& v);
  // The part checksums a CompleteMultipartUpload body lists against the stored parts'
  // (InvalidPart when one differs), as S3 checks them.
  S3Status CheckCompletedPartChecksums(const UploadInfo& upload,
                                       const std::vector<CompletedPart>& listed);
  // If-None-Match and If-Match of a write, both applied whatever their combination: "*" (create
  // only / overwrite only) or ETag lists, checked in the write's transaction.
  void WriteConditions(PutOptions* o);
  net::Response AbortUpload();
  net::Response ListParts();

  // --- Object Lock (s3_object_lock.cc) ---
  net::Response ObjectLockConfig();
  net::Response ObjectRetention();
  net::Response ObjectLegalHold();
  // The bucket's configuration; nullopt when Object Lock is not enabled on it.
  S3Result<std::optional<ObjectLockConfiguration>> BucketObjectLock();
  // The lock of a version being written: the x-amz-object-lock-* headers, else the bucket's
  // default retention. InvalidRequest for lock headers on a bucket without Object Lock.
  S3Result<ObjectLock> LockForNewObject();
  // BucketFor(action) on an object of a bucket with Object Lock (InvalidRequest without it).
  S3Status LockedObjectFor(std::string_view action);
  // x-amz-bypass-governance-retention: true, by a caller allowed s3:BypassGovernanceRetention.
  bool BypassGovernance();
  // What a delete must respect (for the store's transaction); nullptr for a plain delete.
  VersionGuard LockGuard(bool by_version_id);
  void AddLockHeaders(net::Response& res, const ObjectVersion& v);

  // --- POST Object: browser form uploads (s3_post.cc) ---
  net::Response PostObject();
  // The form's fields before the file part (lowercased names, values as sent) and the file
  // part's headers in `file` (nullopt when the form has none). MalformedPOSTRequest,
  // MaxPostPreDataLengthExceededError, InvalidArgument for a field sent twice.
  S3Result<PostFields> ReadPostFields(MultipartFormReader& form, std::optional<FormPart>* file);
  // Who signed the form: SigV4 over the base64 policy (x-amz-algorithm, x-amz-credential,
  // x-amz-date, x-amz-signature), the policy then checked against the fields; anonymous without
  // a policy field. Sets auth_ and user_; returns the policy when there is one.
  S3Result<std::optional<PostPolicy>> AuthenticatePost(const PostFields& fields);
  // Makes the request's headers those of the PutObject the form stands for (acl, Content-Type,
  // x-amz-meta-*, ... as headers), so that it gets a PUT's metadata, ACL and policy checks.
  S3Status PostFieldsAsHeaders(const PostFields& fields);
  // The answer success_action_redirect / success_action_status ask for (204 by default).
  net::Response PostResult(const BucketInfo& bucket, const ObjectVersion& v,
                           const PostFields& fields);

  // --- GetObjectAttributes (s3_attributes.cc) ---
  net::Response GetObjectAttributes();

  // --- Lifecycle (s3_lifecycle.cc) ---
  net::Response BucketLifecycle();
  // x-amz-expiration of a current version, from the bucket's rules (none when none applies).
  void AddExpirationHeader(net::Response& res, const ObjectVersion& v);

  // Reads the body (verified), computes the checksums the request declares and checks them.
  // `extra_checksums`: ChecksumBits computed (and stored) besides the request's.
  S3Result<StagedData> StageBody(bool allow_inline, uint64_t max_size, Checksums* verified,
                                 uint32_t extra_checksums = 0);
  S3Result<StagedData> StageCopySource(const ObjectVersion& source, uint64_t offset,
                                       uint64_t length, bool allow_inline);
  S3Result<ObjectVersion> CopySource(std::string_view header, std::string_view range_header,
                                     uint64_t* offset, uint64_t* length);
  S3Status CheckCopySourceConditions(const ObjectVersion& src);
  void AddObjectHeaders(net::Response& res, const ObjectVersion& v, bool versioned_bucket);

  S3Api& api_;
  Store& store_;
  net::Request& req_;
  std::string request_id_ = s3_call::NewRequestId();
  std::string bucket_;
  std::string key_;
  bool has_key_ = false;
  AuthResult auth_;
  std::string user_;  // "" when anonymous
  std::optional<BucketInfo> bucket_info_;
  // AccessOf(bucket_), read once.
  std::optional<s3_call::BucketAccess> access_;
};

}  // namespace sovai::objstore
