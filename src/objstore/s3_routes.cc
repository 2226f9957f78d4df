// The routing table of the S3 front end (see s3_routes.h).
#include "objstore/s3_routes.h"

#include <algorithm>
#include <iterator>

#include "base/strings.h"

namespace sovai::objstore {

namespace {

using enum S3Level;
using enum S3Op;

// botocore 1.43's S3 model (every operation's `requestUri` query) plus the SigV2 list of
// subresources (partNumber, uploadId, versionId). Sorted (byte order), checked by the tests.
constexpr std::string_view kSubresources[] = {
    "abac",
    "accelerate",
    "acl",
    "analytics",
    "attributes",
    "cors",
    "delete",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "legal-hold",
    "lifecycle",
    "location",
    "logging",
    "metadataConfiguration",
    "metadataInventoryTable",
    "metadataJournalTable",
    "metadataTable",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "partNumber",
    "policy",
    "policyStatus",
    "publicAccessBlock",
    "renameObject",
    "replication",
    "requestPayment",
    "restore",
    "retention",
    "select",
    "select-type",
    "session",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versionId",
    "versioning",
    "versions",
    "website",
};

// For each method and level: rows with a subresource first, in the order they are tried, then
// the row without one. Every operation of botocore's S3 model on the S3 endpoint is here (the
// directory-bucket and S3 Object Lambda ones, ListDirectoryBuckets and WriteGetObjectResponse,
// are not S3 endpoint calls a client makes to this server).
constexpr S3RouteRow kRoutes[] = {
    // --- The service ---
    {"GET", kService, "", kListBuckets, "ListBuckets",
     "max-buckets continuation-token prefix bucket-region"},
    {"HEAD", kService, "", kListBuckets, "ListBuckets", ""},

    // --- Buckets: reads ---
    {"GET", kBucket, "location", kGetBucketLocation, "GetBucketLocation", ""},
    {"GET", kBucket, "versioning", kBucketVersioning, "GetBucketVersioning", ""},
    {"GET", kBucket, "cors", kBucketCors, "GetBucketCors", ""},
    {"GET", kBucket, "tagging", kBucketTagging, "GetBucketTagging", ""},
    {"GET", kBucket, "policy", kBucketPolicy, "GetBucketPolicy", ""},
    {"GET", kBucket, "acl", kBucketAcl, "GetBucketAcl", ""},
    {"GET", kBucket, "lifecycle", kBucketLifecycle, "GetBucketLifecycleConfiguration", ""},
    {"GET", kBucket, "encryption", kGetBucketEncryption, "GetBucketEncryption", ""},
    {"GET", kBucket, "object-lock", kObjectLockConfiguration, "GetObjectLockConfiguration", ""},
    {"GET", kBucket, "website", kGetBucketWebsite, "GetBucketWebsite", ""},
    {"GET", kBucket, "versions", kListObjectVersions, "ListObjectVersions",
     "prefix delimiter key-marker version-id-marker max-keys encoding-type"},
    {"GET", kBucket, "uploads", kListMultipartUploads, "ListMultipartUploads",
     "prefix delimiter key-marker upload-id-marker max-uploads encoding-type"},
    {"GET", kBucket, "session", kNotImplemented, "CreateSession", ""},
    {"GET", kBucket, "abac", kNotImplemented, "GetBucketAbac", ""},
    {"GET", kBucket, "accelerate", kNotImplemented, "GetBucketAccelerateConfiguration", ""},
    {"GET", kBucket, "analytics", kNotImplemented, "GetBucketAnalyticsConfiguration", ""},
    {"GET", kBucket, "intelligent-tiering", kNotImplemented,
     "GetBucketIntelligentTieringConfiguration", ""},
    {"GET", kBucket, "inventory", kNotImplemented, "GetBucketInventoryConfiguration", ""},
    {"GET", kBucket, "logging", kNotImplemented, "GetBucketLogging", ""},
    {"GET", kBucket, "metadataConfiguration", kNotImplemented, "GetBucketMetadataConfiguration",
     ""},
    {"GET", kBucket, "metadataTable", kNotImplemented, "GetBucketMetadataTableConfiguration", ""},
    {"GET", kBucket, "metrics", kNotImplemented, "GetBucketMetricsConfiguration", ""},
    {"GET", kBucket, "notification", kNotImplemented, "GetBucketNotificationConfiguration", ""},
    {"GET", kBucket, "ownershipControls", kBucketOwnershipControls, "GetBucketOwnershipControls",
     ""},
    {"GET", kBucket, "policyStatus", kGetBucketPolicyStatus, "GetBucketPolicyStatus", ""},
    {"GET", kBucket, "replication", kNotImplemented, "GetBucketReplication", ""},
    {"GET", kBucket, "requestPayment", kNotImplemented, "GetBucketRequestPayment", ""},
    {"GET", kBucket, "publicAccessBlock", kBucketPublicAccessBlock, "GetPublicAccessBlock", ""},
    {"GET", kBucket, "", kListObjects, "ListObjects",
     "list-type prefix delimiter marker max-keys encoding-type continuation-token start-after "
     "fetch-owner"},
    {"HEAD", kBucket, "", kHeadBucket, "HeadBucket", ""},

    // --- Buckets: writes ---
    {"PUT", kBucket, "versioning", kBucketVersioning, "PutBucketVersioning", ""},
    {"PUT", kBucket, "cors", kBucketCors, "PutBucketCors", ""},
    {"PUT", kBucket, "tagging", kBucketTagging, "PutBucketTagging", ""},
    {"PUT", kBucket, "policy", kBucketPolicy, "PutBucketPolicy", ""},
    {"PUT", kBucket, "acl", kBucketAcl, "PutBucketAcl", ""},
    {"PUT", kBucket, "abac", kNotImplemented, "PutBucketAbac", ""},
    {"PUT", kBucket, "accelerate", kNotImplemented, "PutBucketAccelerateConfiguration", ""},
    {"PUT", kBucket, "analytics", kNotImplemented, "PutBucketAnalyticsConfiguration", ""},
    {"PUT", kBucket, "encryption", kNotImplemented, "PutBucketEncryption", ""},
    {"PUT", kBucket, "intelligent-tiering", kNotImplemented,
     "PutBucketIntelligentTieringConfiguration", ""},
    {"PUT", kBucket, "inventory", kNotImplemented, "PutBucketInventoryConfiguration", ""},
    {"PUT", kBucket, "lifecycle", kBucketLifecycle, "PutBucketLifecycleConfiguration", ""},
    {"PUT", kBucket, "logging", kNotImplemented, "PutBucketLogging", ""},
    {"PUT", kBucket, "metrics", kNotImplemented, "PutBucketMetricsConfiguration", ""},
    {"PUT", kBucket, "notification", kNotImplemented, "PutBucketNotificationConfiguration", ""},
    {"PUT", kBucket, "ownershipControls", kBucketOwnershipControls, "PutBucketOwnershipControls",
     ""},
    {"PUT", kBucket, "replication", kNotImplemented, "PutBucketReplication", ""},
    {"PUT", kBucket, "requestPayment", kNotImplemented, "PutBucketRequestPayment", ""},
    {"PUT", kBucket, "website", kNotImplemented, "PutBucketWebsite", ""},
    {"PUT", kBucket, "object-lock", kObjectLockConfiguration, "PutObjectLockConfiguration", ""},
    {"PUT", kBucket, "publicAccessBlock", kBucketPublicAccessBlock, "PutPublicAccessBlock", ""},
    {"PUT", kBucket, "metadataInventoryTable", kNotImplemented,
     "UpdateBucketMetadataInventoryTableConfiguration", ""},
    {"PUT", kBucket, "metadataJournalTable", kNotImplemented,
     "UpdateBucketMetadataJournalTableConfiguration", ""},
    {"PUT", kBucket, "", kCreateBucket, "CreateBucket", ""},
    {"DELETE", kBucket, "cors", kBucketCors, "DeleteBucketCors", ""},
    {"DELETE", kBucket, "tagging", kBucketTagging, "DeleteBucketTagging", ""},
    {"DELETE", kBucket, "policy", kBucketPolicy, "DeleteBucketPolicy", ""},
    {"DELETE", kBucket, "analytics", kNotImplemented, "DeleteBucketAnalyticsConfiguration", ""},
    {"DELETE", kBucket, "encryption", kNotImplemented, "DeleteBucketEncryption", ""},
    {"DELETE", kBucket, "intelligent-tiering", kNotImplemented,
     "DeleteBucketIntelligentTieringConfiguration", ""},
    {"DELETE", kBucket, "inventory", kNotImplemented, "DeleteBucketInventoryConfiguration", ""},
    {"DELETE", kBucket, "lifecycle", kBucketLifecycle, "DeleteBucketLifecycle", ""},
    {"DELETE", kBucket, "metadataConfiguration", kNotImplemented,
     "DeleteBucketMetadataConfiguration", ""},
    {"DELETE", kBucket, "metadataTable", kNotImplemented, "DeleteBucketMetadataTableConfiguration",
     ""},
    {"DELETE", kBucket, "metrics", kNotImplemented, "DeleteBucketMetricsConfiguration", ""},
    {"DELETE", kBucket, "ownershipControls", kBucketOwnershipControls,
     "DeleteBucketOwnershipControls", ""},
    {"DELETE", kBucket, "replication", kNotImplemented, "DeleteBucketReplication", ""},
    {"DELETE", kBucket, "website", kNotImplemented, "DeleteBucketWebsite", ""},
    {"DELETE", kBucket, "publicAccessBlock", kBucketPublicAccessBlock, "DeletePublicAccessBlock",
     ""},
    {"DELETE", kBucket, "", kDeleteBucket, "DeleteBucket", ""},
    {"POST", kBucket, "delete", kDeleteObjects, "DeleteObjects", ""},
    {"POST", kBucket, "metadataConfiguration", kNotImplemented, "CreateBucketMetadataConfiguration",
     ""},
    {"POST", kBucket, "metadataTable", kNotImplemented, "CreateBucketMetadataTableConfiguration",
     ""},
    // A browser form upload (POST policy).
    {"POST", kBucket, "", kPostObject, "PostObject", ""},

    // --- Objects: reads ---
    {"GET", kObject, "uploadId", kListParts, "ListParts", "max-parts part-number-marker"},
    {"GET", kObject, "tagging", kObjectTagging, "GetObjectTagging", "versionId"},
    {"GET", kObject, "acl", kObjectAcl, "GetObjectAcl", "versionId"},
    {"GET", kObject, "attributes", kGetObjectAttributes, "GetObjectAttributes", "versionId"},
    {"GET", kObject, "legal-hold", kObjectLegalHold, "GetObjectLegalHold", "versionId"},
    {"GET", kObject, "retention", kObjectRetention, "GetObjectRetention", "versionId"},
    {"GET", kObject, "torrent", kNotImplemented, "GetObjectTorrent", ""},
    {"GET", kObject, "", kGetObject, "GetObject", "versionId partNumber"},
    {"HEAD", kObject, "", kHeadObject, "HeadObject", "versionId partNumber"},

    // --- Objects: writes ---
    {"PUT", kObject, "tagging", kObjectTagging, "PutObjectTagging", "versionId"},
    {"PUT", kObject, "acl", kObjectAcl, "PutObjectAcl", "versionId"},
    {"PUT", kObject, "uploadId", kUploadPart, "UploadPart", "partNumber"},
    {"PUT", kObject, "partNumber", kUploadPart, "UploadPart", "uploadId"},
    {"PUT", kObject, "legal-hold", kObjectLegalHold, "PutObjectLegalHold", "versionId"},
    {"PUT", kObject, "retention", kObjectRetention, "PutObjectRetention", "versionId"},
    {"PUT", kObject, "renameObject", kNotImplemented, "RenameObject", ""},
    {"PUT", kObject, "encryption", kNotImplemented, "UpdateObjectEncryption", ""},
    {"PUT", kObject, "", kPutObject, "PutObject", ""},
    {"DELETE", kObject, "tagging", kObjectTagging, "DeleteObjectTagging", "versionId"},
    {"DELETE", kObject, "uploadId", kAbortMultipartUpload, "AbortMultipartUpload", ""},
    {"DELETE", kObject, "", kDeleteObject, "DeleteObject", "versionId"},
    {"POST", kObject, "uploads", kCreateMultipartUpload, "CreateMultipartUpload", ""},
    {"POST", kObject, "uploadId", kCompleteMultipartUpload, "CompleteMultipartUpload", ""},
    {"POST", kObject, "restore", kNotImplemented, "RestoreObject", ""},
    {"POST", kObject, "select", kNotImplemented, "SelectObjectContent", ""},
};

bool IsSubresource(std::string_view name) {
  return std::find(std::begin(kSubresources), std::end(kSubresources), name) !=
         std::end(kSubresources);
}

bool IsWrite(std::string_view method) { return method != "GET" && method != "HEAD"; }

// Whether `name` is one of the space-separated `params`.
bool Takes(std::string_view params, std::string_view name) {
  for (std::string_view p : base::Split(params, ' ')) {
    if (p == name) return true;
  }
  return false;
}

S3Route NotImplemented(std::string message) {
  return S3Route{kNotImplemented, std::move(message) + " is not implemented by this server"};
}

}  // namespace

std::span<const std::string_view> S3Subresources() { return kSubresources; }

std::span<const S3RouteRow> S3RouteTable() { return kRoutes; }

bool IsSigningOrCallerParameter(std::string_view name) {
  return base::EqualsIgnoreCase(name.substr(0, 2), "x-") || name == "AWSAccessKeyId" ||
         name == "Signature" || name == "Expires";
}

S3Route RouteS3Request(std::string_view method, S3Level level,
                       const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::string_view> names;
  for (const auto& [name, value] : query) {
    if (!IsSigningOrCallerParameter(name)) names.push_back(name);
  }
  auto present = [&](std::string_view name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  const S3RouteRow* chosen = nullptr;
  bool method_known = false;
  for (const S3RouteRow& row : kRoutes) {
    if (row.method != method || row.level != level) continue;
    method_known = true;
    if (row.subresource.empty() || present(row.subresource)) {
      chosen = &row;
      break;
    }
  }
  const std::string prefix = std::string(method) + " ?";
  if (chosen == nullptr) {
    for (std::string_view name : names) {
      if (IsSubresource(name) || (method_known && IsWrite(method))) {
        return NotImplemented(prefix + std::string(name));
      }
    }
    return S3Route{kMethodNotAllowed, "The specified method is not allowed against this resource."};
  }
  if (chosen->op == kNotImplemented) {
    std::string what = std::string(chosen->name);
    if (!chosen->subresource.empty()) {
      what += " (" + prefix + std::string(chosen->subresource) + ")";
    }
    return NotImplemented(what);
  }
  for (std::string_view name : names) {
    if (name == chosen->subresource || Takes(chosen->params, name)) continue;
    // A subresource the operation does not take is another operation, and a write never runs
    // with a parameter it does not understand.
    if (IsSubresource(name) || IsWrite(method)) {
      return NotImplemented(prefix + std::string(name) + " (with " + std::string(chosen->name) +
                            ")");
    }
  }
  return S3Route{chosen->op, std::string(chosen->name)};
}

}  // namespace sovai::objstore
