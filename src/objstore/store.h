// The storage engine behind the S3 API: buckets, object versions, multipart uploads, listings.
// Object bytes live in checksummed data files (or inline in the database when small), metadata in
// SQLite; docs/formats/objstore.md describes both and the crash-safety argument.
//
// A write is two steps, so that the caller can verify signatures and checksums that are only
// known once the whole body has been read (aws-chunked trailers) before anything becomes visible:
//
//   SOVAI_S3_ASSIGN_OR_RETURN(StagedData staged, store.Stage(body, {.checksums = kCrc32c}));
//   if (staged.checksums.crc32c != expected) { store.Discard(staged); return BadDigest; }
//   SOVAI_S3_ASSIGN_OR_RETURN(ObjectVersion v, store.Put({.bucket = "b", .key = "k"},
//   std::move(staged)));
//
// Every public method is thread-safe. Writes of concurrent callers are committed together (group
// commit: one fsync for a batch); a method returns once its write is durable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "net/http.h"
#include "objstore/s3_error.h"
#include "objstore/sigv4.h"

namespace sovai::objstore {

enum class Versioning { kUnversioned = 0, kEnabled = 1, kSuspended = 2 };

struct BucketInfo {
  std::string name;
  std::string owner;  // user id
  std::string region;
  int64_t created_micros = 0;
  Versioning versioning = Versioning::kUnversioned;
};

// Checksum algorithms a client may ask for (x-amz-checksum-*), as a bit set.
enum ChecksumBits : uint32_t {
  kCrc32 = 1,
  kCrc32c = 2,
  kCrc64Nvme = 4,
  kSha1 = 8,
  kSha256 = 16,
};

// Checksum values as S3 sends them: base64 of the big-endian digest; empty = not computed.
struct Checksums {
  std::string crc32, crc32c, crc64nvme, sha1, sha256;
  // "FULL_OBJECT" or "COMPOSITE" (multipart checksum of part checksums, "…-N").
  std::string type;
  bool empty() const {
    return crc32.empty() && crc32c.empty() && crc64nvme.empty() && sha1.empty() && sha256.empty();
  }
};

// Object Lock state of one version (object_lock.h has the rules).
struct ObjectLock {
  std::string mode;                 // "GOVERNANCE", "COMPLIANCE" or "" (no retention)
  int64_t retain_until_micros = 0;  // with a mode
  bool legal_hold = false;
  bool operator==(const ObjectLock&) const = default;
};

// What a PUT stores besides the bytes, returned by GET/HEAD.
struct ObjectMeta {
  std::string content_type;
  std::string content_encoding;
  std::string content_disposition;
  std::string content_language;
  std::string cache_control;
  std::string expires;
  // x-amz-meta-* fields: lowercased name without the prefix → value.
  std::vector<std::pair<std::string, std::string>> user;
  std::vector<std::pair<std::string, std::string>> tags;
  std::string storage_class;  // "" = STANDARD
  ObjectLock lock;
  // The object's ACL as acl.h's AclToJson; "" = its owner's FULL_CONTROL and nothing else.
  std::string acl;
};

struct ObjectVersion {
  std::string bucket;
  std::string key;
  std::string version_id;  // "null" for unversioned writes
  bool is_latest = false;
  bool delete_marker = false;
  uint64_t size = 0;
  std::string etag;  // with quotes, as sent in the ETag header
  int64_t mtime_micros = 0;
  std::string owner;
  ObjectMeta meta;
  Checksums checksums;
  // For multipart objects: each part's size (partNumber reads); empty for single PUTs.
  std::vector<uint64_t> part_sizes;
  // Each part's checksums (GetObjectAttributes, partNumber reads), when the upload had an
  // algorithm.
  std::vector<Checksums> part_checksums;

  // Internal: where the bytes are (the engine fills these; callers pass them back to Open).
  int64_t row_id = 0;
  std::vector<std::pair<std::string, uint64_t>> segments;  // (data id, size)
  bool inline_data = false;
};

// Bytes written to durable temporary storage, not yet visible. Move-only; Put/UploadPart consume
// it, Discard drops it (the destructor does not delete the temporary file: always do one of those).
struct StagedData {
  uint64_t size = 0;
  std::string md5;      // raw 16 bytes
  Checksums checksums;  // the algorithms asked for in StageOptions
  // Internal.
  std::string data_id;       // file-backed when non-empty
  std::string inline_bytes;  // small bodies
  bool consumed = false;
};

struct StageOptions {
  uint32_t checksums = 0;  // ChecksumBits to compute besides MD5
  // Larger bodies fail with EntityTooLarge (the S3 single PUT limit is 5 GiB).
  uint64_t max_size = 5ull << 30;
  // Keep in memory (inline) when the whole body is at most this many bytes.
  bool allow_inline = true;
};

constexpr uint64_t kMinPartSize = 5ull << 20;

struct PutOptions {
  std::string bucket;
  std::string key;
  std::string owner;
  ObjectMeta meta;
  // Values to store and return (the verified client checksums); defaults to the staged ones.
  std::optional<Checksums> checksums;
  // Conditional write: If-None-Match: * → fail with PreconditionFailed when the key exists;
  // If-None-Match: "etag", ... → fail when the current version has one of those ETags;
  // If-Match: "etag", ... or * → fail unless the current version has one of them (NoSuchKey
  // when there is none). Lists as in HTTP (EtagListMatches).
  bool if_none_match_star = false;
  std::optional<std::string> if_none_match;
  std::optional<std::string> if_match;
  // CompleteUpload only: what the client declared about the object it completes. Each non-empty
  // value must equal the object's composite checksum (the "-N" suffix optional): BadDigest, or
  // InvalidRequest when the upload has no checksum of that algorithm. The size
  // (x-amz-mp-object-size) must be the sum of the parts: InvalidRequest.
  Checksums expected_checksums;
  std::optional<uint64_t> expected_size;
  // CompleteUpload only: every part but the last must be at least this large (EntityTooSmall).
  // S3's rule by default; the registry's chunked blob uploads take chunks of any size.
  uint64_t min_part_size = kMinPartSize;
};

// Called inside a write's transaction with the version it would remove or replace; an error
// refuses the write. Object Lock (retention, legal holds) and the lifecycle sweeper (delete only
// the version it examined) use it, so nothing changes between the check and the write.
using VersionGuard = std::function<S3Status(const ObjectVersion&)>;

// What a new bucket starts with, in the transaction that creates it (an Object Lock bucket is
// never seen without its lock or its versioning).
struct BucketSetup {
  Versioning versioning = Versioning::kUnversioned;
  std::vector<std::pair<std::string, std::string>> configs;  // kind → value (SetBucketConfig)
};

struct DeleteResult {
  std::string version_id;  // of the deleted version or of the new delete marker; "" if none
  bool delete_marker = false;
};

struct ListOptions {
  std::string prefix;
  std::string delimiter;
  // Start strictly after this key (V1 marker, V2 start-after / continuation).
  std::string after;
  int max_keys = 1000;
};

struct ListResult {
  std::vector<ObjectVersion> objects;
  std::vector<std::string> common_prefixes;
  bool truncated = false;
  // When truncated: the last key or common prefix returned (resume strictly after it; a common
  // prefix resumes after every key that starts with it).
  std::string next_marker;
};

struct ListVersionsOptions {
  std::string prefix;
  std::string delimiter;
  std::string key_marker;
  std::string version_id_marker;
  int max_keys = 1000;
};

struct ListVersionsResult {
  std::vector<ObjectVersion> versions;  // delete markers included (delete_marker = true)
  std::vector<std::string> common_prefixes;
  bool truncated = false;
  std::string next_key_marker;
  std::string next_version_id_marker;
};

struct UploadInfo {
  std::string upload_id;
  std::string bucket;
  std::string key;
  std::string owner;
  int64_t created_micros = 0;
  ObjectMeta meta;
  std::string checksum_algorithm;  // "CRC32", ... or ""
  // With an algorithm: "COMPOSITE" (a checksum of the parts' checksums, "…-N") or "FULL_OBJECT"
  // (the CRC of the whole object, combined from the parts' CRCs).
  std::string checksum_type;
};

struct PartInfo {
  int part_number = 0;
  uint64_t size = 0;
  std::string etag;  // quoted
  int64_t mtime_micros = 0;
  Checksums checksums;
  std::string data_id;  // internal
};

struct CompletePart {
  int part_number = 0;
  std::string etag;  // with or without quotes
};

struct ListUploadsOptions {
  std::string prefix;
  std::string key_marker;
  std::string upload_id_marker;
  int max_uploads = 1000;
};

// Streams a byte range of an object version, verifying every block against its checksum.
class ObjectReader {
 public:
  virtual ~ObjectReader() = default;
  // Up to n bytes; 0 at the end. DataLoss when stored bytes fail their checksum.
  virtual base::Result<size_t> Read(char* buf, size_t n) = 0;
};

struct StoreOptions {
  std::string root;  // <data-dir>/objstore
  std::string region = "eu-west-1";
  // Objects up to this size live inline in the database.
  uint64_t inline_max_bytes = 128 * 1024;
  base::Env* env = nullptr;  // nullptr = Env::Default()
};

struct StoreStats {
  uint64_t commit_batches = 0;
  uint64_t committed_writes = 0;
  uint64_t corruptions = 0;
  uint64_t recovered_temp_files = 0;
  uint64_t deleted_temp_files = 0;
};

// How long a completed upload's answer is kept for retries (S3 keeps it for a while; clients
// retry a CompleteMultipartUpload whose answer was lost within seconds or minutes).
constexpr int64_t kCompletedUploadRetentionMicros = 24ll * 3600 * 1000 * 1000;

class Store {
 public:
  // Opens (creating) the store under options.root and finishes what a crash interrupted (see
  // docs/formats/objstore.md).
  static base::Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  virtual ~Store() = default;

  virtual const std::string& region() const = 0;

  // --- Buckets ---
  // BucketAlreadyOwnedByYou / BucketAlreadyExists when taken.
  virtual S3Result<BucketInfo> CreateBucket(const std::string& name, const std::string& owner,
                                            const BucketSetup& setup = {}) = 0;
  virtual S3Result<BucketInfo> GetBucket(const std::string& name) = 0;
  // Every bucket, by name.
  virtual S3Result<std::vector<BucketInfo>> ListBuckets() = 0;
  // BucketNotEmpty when any version remains. Multipart uploads in progress are aborted with
  // it (their parts' files released), as S3 does.
  virtual S3Status DeleteBucket(const std::string& name) = 0;
  virtual S3Status SetVersioning(const std::string& bucket, Versioning state) = 0;
  // Per-bucket documents (kind: "cors", "tagging", "policy"); nullopt when not set.
  virtual S3Result<std::optional<std::string>> GetBucketConfig(const std::string& bucket,
                                                               const std::string& kind) = 0;
  // Every per-bucket document at once (one read for the authorization of a request).
  virtual S3Result<std::vector<std::pair<std::string, std::string>>> GetBucketConfigs(
      const std::string& bucket) = 0;
  // nullopt deletes.
  virtual S3Status SetBucketConfig(const std::string& bucket, const std::string& kind,
                                   std::optional<std::string> value) = 0;
  // The parsed form of one per-bucket document, made by `parse` on first use and kept beside the
  // cached documents, so it is forgotten with them on every change (the lifecycle rules are
  // consulted on every GET, the Object Lock default on every write). nullptr when the bucket has
  // no document of that kind. Parse errors are returned, never kept.
  using ParsedConfig = std::shared_ptr<const void>;
  using ConfigParser = std::function<S3Result<ParsedConfig>(std::string_view)>;
  virtual S3Result<ParsedConfig> GetParsedBucketConfig(const std::string& bucket,
                                                       const std::string& kind,
                                                       const ConfigParser& parse) = 0;
  template <class T>
  S3Result<std::shared_ptr<const T>> GetParsedBucketConfig(const std::string& bucket,
                                                           const std::string& kind,
                                                           S3Result<T> (*parse)(std::string_view)) {
    SOVAI_S3_ASSIGN_OR_RETURN(
        ParsedConfig parsed,
        GetParsedBucketConfig(bucket, kind,
                              [parse](std::string_view doc) -> S3Result<ParsedConfig> {
                                SOVAI_S3_ASSIGN_OR_RETURN(T value, parse(doc));
                                return ParsedConfig(std::make_shared<const T>(std::move(value)));
                              }));
    return std::static_pointer_cast<const T>(parsed);
  }

  // --- Objects ---
  virtual S3Result<StagedData> Stage(net::BodyReader& body, const StageOptions& options) = 0;
  virtual void Discard(StagedData& staged) = 0;
  virtual S3Result<ObjectVersion> Put(const PutOptions& options, StagedData staged) = 0;
  // The latest version (NoSuchKey when absent or a delete marker — the marker is returned in the
  // error's details as "DeleteMarker"/"VersionId"), or a given version (NoSuchVersion).
  virtual S3Result<ObjectVersion> Head(const std::string& bucket, const std::string& key,
                                       const std::optional<std::string>& version_id) = 0;
  virtual S3Result<std::unique_ptr<ObjectReader>> Open(const ObjectVersion& version,
                                                       uint64_t offset, uint64_t length) = 0;
  // With `guard`: called with the version a delete by id removes, or the latest version (if
  // any) a plain delete removes or hides behind a delete marker.
  virtual S3Result<DeleteResult> Delete(const std::string& bucket, const std::string& key,
                                        const std::optional<std::string>& version_id,
                                        const VersionGuard& guard = nullptr) = 0;
  // Read-modify-write of a version's metadata (latest when version_id is nullopt) in one
  // transaction: `edit` sees the stored version and changes its meta, or refuses. NoSuchKey,
  // NoSuchVersion, MethodNotAllowed for a delete marker. Returns the version as stored.
  virtual S3Result<ObjectVersion> UpdateVersion(
      const std::string& bucket, const std::string& key,
      const std::optional<std::string>& version_id,
      const std::function<S3Status(ObjectVersion&)>& edit) = 0;
  // Replaces the tag set of a version (latest when version_id is nullopt).
  virtual S3Result<ObjectVersion> SetTags(
      const std::string& bucket, const std::string& key,
      const std::optional<std::string>& version_id,
      std::vector<std::pair<std::string, std::string>> tags) = 0;
  // Replaces the ACL (ObjectMeta::acl) of a version (latest when version_id is nullopt).
  virtual S3Result<ObjectVersion> SetObjectAcl(const std::string& bucket, const std::string& key,
                                               const std::optional<std::string>& version_id,
                                               std::string acl) = 0;
  virtual S3Result<ListResult> List(const std::string& bucket, const ListOptions& options) = 0;
  virtual S3Result<ListVersionsResult> ListVersions(const std::string& bucket,
                                                    const ListVersionsOptions& options) = 0;

  // --- Multipart ---
  virtual S3Result<UploadInfo> CreateUpload(const std::string& bucket, const std::string& key,
                                            const std::string& owner, ObjectMeta meta,
                                            std::string checksum_algorithm,
                                            std::string checksum_type = "") = 0;
  virtual S3Result<UploadInfo> GetUpload(const std::string& bucket, const std::string& key,
                                         const std::string& upload_id) = 0;
  virtual S3Result<PartInfo> UploadPart(const UploadInfo& upload, int part_number,
                                        StagedData staged, Checksums checksums) = 0;
  virtual S3Result<std::vector<PartInfo>> ListParts(const UploadInfo& upload) = 0;
  virtual S3Result<std::vector<UploadInfo>> ListUploads(const std::string& bucket,
                                                        const ListUploadsOptions& options,
                                                        bool* truncated) = 0;
  virtual S3Status AbortUpload(const UploadInfo& upload) = 0;
  // Checks the list (InvalidPart, InvalidPartOrder, EntityTooSmall) and makes the object.
  virtual S3Result<ObjectVersion> CompleteUpload(const UploadInfo& upload,
                                                 const std::vector<CompletePart>& parts,
                                                 const PutOptions& conditions) = 0;
  // What a completed upload made (bucket, key, version_id, etag, checksums; no bytes), kept for
  // kCompletedUploadRetentionMicros so that a retried CompleteMultipartUpload gets S3's answer:
  // the same 200 and ETag. NoSuchUpload when unknown, older, or its bucket was deleted.
  virtual S3Result<ObjectVersion> GetCompletedUpload(const std::string& bucket,
                                                     const std::string& key,
                                                     const std::string& upload_id) = 0;

  // --- Access keys: the identities requests are signed with ---
  // Creates a key pair for `user_id` (access key "SV" + 18 characters, 40-character secret).
  virtual S3Result<Credential> CreateAccessKey(const std::string& user_id) = 0;
  // Adds or replaces a given key pair (the bootstrap admin's, or one the control plane made).
  virtual S3Status PutAccessKey(const Credential& credential) = 0;
  virtual S3Status DeleteAccessKey(const std::string& access_key) = 0;
  // From memory: no database access on the request path.
  virtual std::optional<Credential> LookupAccessKey(std::string_view access_key) = 0;
  virtual std::vector<Credential> ListAccessKeys(const std::string& user_id) = 0;

  virtual StoreStats Stats() = 0;
};

// An ETag without surrounding whitespace and quotes ("\"abc\"" → "abc"), for comparisons.
std::string UnquoteEtag(std::string_view etag);

// Whether an If-Match / If-None-Match list ("\"a\", W/\"b\"" or "*") names `etag`; "*" names
// any.
bool EtagListMatches(std::string_view list, std::string_view etag);

// The checksums of `data` for the ChecksumBits in `bits`, encoded as S3 sends them.
Checksums ComputeChecksums(std::string_view data, uint32_t bits);

// Whether `s` is a version id this store could have produced ("null" or its random form).
bool IsPlausibleVersionId(std::string_view s);

}  // namespace sovai::objstore
