// The S3 front end (see s3_api.h and docs/api/s3.md): the plumbing of one request
// (addressing, authentication, authorization, bodies and digests), the routing, the service and
// bucket operations and the listings. Object and multipart operations: s3_objects.cc.
#include "objstore/s3_api.h"

#include <algorithm>
#include <map>

#include "base/check.h"
#include "base/crc.h"
#include "base/crypto.h"
#include "base/log.h"
#include "base/strings.h"
#include "base/time.h"
#include "objstore/cors.h"
#include "objstore/internal/s3_call.h"
#include "objstore/names.h"
#include "objstore/s3_routes.h"
#include "objstore/s3_xml.h"
#include "objstore/sigv4.h"

namespace sovai::objstore {

namespace s3_call {

std::string Iso8601(int64_t micros) { return base::FormatRfc3339(micros, 3); }

std::string NewRequestId() { return base::HexEncode(base::RandomBytes(8)); }

std::string UrlEncodeKey(std::string_view s) { return base::UriEncode(s, /*encode_slash=*/false); }

std::string MultipartEtag(const std::vector<CompletePart>& parts) {
  std::string md5s;
  for (const auto& p : parts) {
    auto raw = base::HexDecode(UnquoteEtag(p.etag));
    if (raw.ok()) md5s += *raw;
  }
  return base::HexEncode(base::Md5(md5s)) + "-" + std::to_string(parts.size());
}

base::Result<std::string> ReadLimited(net::BodyReader& body, size_t limit) {
  std::string out;
  char buf[65536];
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(size_t n, body.Read(buf, sizeof buf));
    if (n == 0) return out;
    if (out.size() + n > limit) {
      return base::ResourceExhaustedError("request body is larger than " + std::to_string(limit) +
                                          " bytes");
    }
    out.append(buf, n);
  }
}

uint32_t ChecksumBitOf(std::string_view algorithm) {
  std::string a = base::AsciiToUpper(algorithm);
  if (a == "CRC32") return kCrc32;
  if (a == "CRC32C") return kCrc32c;
  if (a == "CRC64NVME") return kCrc64Nvme;
  if (a == "SHA1") return kSha1;
  if (a == "SHA256") return kSha256;
  return 0;
}

void AddChecksumHeaders(net::Response& res, const Checksums& c) {
  for (const auto& f : kChecksumFields) {
    const std::string& v = c.*f.member;
    if (!v.empty()) res.headers.Set(f.header, v);
  }
  if (!c.type.empty()) res.headers.Set("x-amz-checksum-type", c.type);
}

void WriteIdentity(XmlWriter& w, const char* element, const std::string& user) {
  w.Open(element);
  w.Element("ID", user);
  w.Element("DisplayName", user);
  w.Close();
}

}  // namespace s3_call

using s3_call::AddChecksumHeaders;
using s3_call::ChecksumBitOf;
using s3_call::Iso8601;
using s3_call::kChecksumFields;
using s3_call::kMaxPutBytes;
using s3_call::kMaxS3BodyBytes;
using s3_call::kStreamPieceBytes;
using s3_call::kXmlType;
using s3_call::MultipartEtag;
using s3_call::NewRequestId;
using s3_call::ObjectBody;
using s3_call::ReadLimited;
using s3_call::UrlEncodeKey;
using s3_call::WriteIdentity;

net::Response S3Api::Call::Xml(int status, std::string body) {
  net::Response res = net::Response::Text(status, std::move(body), std::string(kXmlType));
  return res;
}

net::Response S3Api::Call::Empty(int status) { return net::Response::Empty(status); }

net::Response S3Api::Call::Error(const S3Error& e) {
  if (e.code == S3Code::kAccessDenied) api_.stats_.access_denied.fetch_add(1);
  std::string resource = std::string(req_.raw_path());
  net::Response res;
  res.status = e.http_status();
  if (req_.method() != "HEAD" && e.code != S3Code::kNotModified) {
    res.body = RenderS3ErrorXml(e, resource, request_id_);
    res.headers.Set("Content-Type", std::string(kXmlType));
  }
  for (const auto& [k, v] : e.details) {
    if (k == "DeleteMarker") res.headers.Set("x-amz-delete-marker", v);
    if (k == "VersionId") res.headers.Set("x-amz-version-id", v);
  }
  if (e.code == S3Code::kMethodNotAllowed) res.headers.Set("Allow", "DELETE");
  return res;
}

S3Status S3Api::Call::ParseAddress() {
  std::string_view path = req_.path();
  std::string host(req_.header("Host").value_or(""));
  if (auto colon = host.rfind(':');
      colon != std::string::npos && host.find(']') == std::string::npos) {
    host.resize(colon);
  }
  const std::string& domain = api_.opts_.domain;
  if (!domain.empty() && host.size() > domain.size() + 1 &&
      base::EqualsIgnoreCase(std::string_view(host).substr(host.size() - domain.size()), domain) &&
      host[host.size() - domain.size() - 1] == '.') {
    bucket_ = host.substr(0, host.size() - domain.size() - 1);
    if (path.size() > 1) {
      key_ = std::string(path.substr(1));
      has_key_ = true;
    }
    return std::nullopt;
  }
  if (path.empty() || path[0] != '/') {
    return S3Error(S3Code::kInvalidRequest, "request target must start with '/'");
  }
  path.remove_prefix(1);
  size_t slash = path.find('/');
  if (slash == std::string_view::npos) {
    bucket_ = std::string(path);
  } else {
    bucket_ = std::string(path.substr(0, slash));
    key_ = std::string(path.substr(slash + 1));
    has_key_ = !key_.empty();
  }
  return std::nullopt;
}

S3Status S3Api::Call::Authenticate() {
  AuthOptions o;
  o.region = api_.opts_.region;
  o.now_unix_micros = api_.opts_.env->NowUnixMicros();
  if (!api_.opts_.domain.empty()) {
    std::string host(req_.header("Host").value_or(""));
    if (host.find(api_.opts_.domain) != std::string::npos && host.rfind(bucket_ + ".", 0) == 0) {
      o.virtual_host_bucket = bucket_;
    }
  }
  auto r = objstore::Authenticate(
      req_, o, [this](std::string_view access_key) { return store_.LookupAccessKey(access_key); });
  if (!r.ok()) {
    api_.stats_.auth_failures.fetch_add(1);
    return r.error();
  }
  auth_ = std::move(*r);
  if (!auth_.anonymous) {
    user_ = auth_.credential.user_id;
    api_.stats_.payload_modes[static_cast<int>(auth_.payload)].fetch_add(1);
  }
  return std::nullopt;
}

S3Result<BucketInfo> S3Api::Call::BucketFor(std::string_view action, bool object_action) {
  SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, store_.GetBucket(bucket_));
  if (!action.empty()) SOVAI_S3_RETURN_IF_ERROR(Authorize(b, action, object_action, key_));
  // A protection the client asks for: the request fails unless the bucket is that owner's.
  if (auto expected = req_.header("x-amz-expected-bucket-owner");
      expected && base::Trim(*expected) != b.owner) {
    return S3Error(S3Code::kAccessDenied,
                   "Access Denied: the bucket's owner is not the "
                   "x-amz-expected-bucket-owner you specified");
  }
  bucket_info_ = b;
  return b;
}

S3Result<bool> S3Api::Call::UrlEncodingRequested() const {
  std::string_view encoding = Query("encoding-type").value_or("");
  if (!encoding.empty() && encoding != "url") {
    return S3Error(S3Code::kInvalidArgument, "Invalid Encoding Method specified in Request")
        .With("ArgumentName", "encoding-type");
  }
  return encoding == "url";
}

S3Result<std::string> S3Api::Call::ReadXmlBody(bool object_checksums) {
  PayloadReader body(req_.body(), auth_);
  auto text = ReadLimited(body, kMaxXmlBodyBytes);
  if (!text.ok()) {
    if (body.s3_error()) return *body.s3_error();
    if (text.status().code() == base::StatusCode::kResourceExhausted) {
      return S3Error(S3Code::kMalformedXML, "The XML you provided was larger than " +
                                                std::to_string(kMaxXmlBodyBytes) + " bytes");
    }
    return S3Error(S3Code::kIncompleteBody, text.status().message());
  }
  auto checked = VerifyDigests(base::Md5(*text), ComputeChecksums(*text, RequestedChecksumBits()),
                               body.trailers(), !object_checksums);
  if (!checked.ok()) return checked.error();
  return std::move(*text);
}

uint32_t S3Api::Call::RequestedChecksumBits() const {
  // Every x-amz-checksum-* header, every declared trailer, and the SDK's announced algorithm.
  uint32_t bits = 0;
  for (const auto& f : kChecksumFields) {
    if (req_.header(f.header)) bits |= f.bit;
    for (const auto& t : auth_.trailer_names) {
      if (t == f.header) bits |= f.bit;
    }
  }
  if (auto algo = req_.header("x-amz-sdk-checksum-algorithm")) bits |= ChecksumBitOf(*algo);
  return bits;
}

S3Result<Checksums> S3Api::Call::VerifyDigests(
    std::string_view md5, const Checksums& computed,
    const std::vector<std::pair<std::string, std::string>>& trailers, bool headers) {
  if (auto declared_md5 = req_.header("Content-MD5")) {
    auto decoded = base::Base64Decode(base::Trim(*declared_md5));
    if (!decoded.ok() || decoded->size() != 16) {
      return S3Error(S3Code::kInvalidDigest, "The Content-MD5 you specified was invalid.");
    }
    if (*decoded != md5) {
      return S3Error(S3Code::kBadDigest,
                     "The Content-MD5 you specified did not match what we received.");
    }
  }
  Checksums out;
  for (const auto& f : kChecksumFields) {
    std::optional<std::string> declared;
    if (auto h = req_.header(f.header); h && headers) declared = std::string(*h);
    for (const auto& [name, value] : trailers) {
      if (name == f.header) declared = value;
    }
    const std::string& value = computed.*f.member;
    if (declared && *declared != value) {
      return S3Error(S3Code::kBadDigest, std::string("The ") + f.algorithm +
                                             " you specified did not match the calculated "
                                             "checksum.");
    }
    // Declared ones are verified; an announced algorithm without a value stores what we computed.
    out.*f.member = value;
  }
  if (!out.empty()) out.type = "FULL_OBJECT";
  return out;
}

S3Status S3Api::Call::RefuseUnsupportedProtections(bool takes_acl) {
  for (const auto& [name, value] : req_.headers()) {
    const std::string lower = base::AsciiToLower(name);
    if (!takes_acl && (lower == "x-amz-acl" || lower.rfind("x-amz-grant-", 0) == 0)) {
      return S3Error(S3Code::kInvalidRequest,
                     lower + ": this operation takes no ACL (set it when the object is created)");
    }
    if (lower.rfind("x-amz-server-side-encryption", 0) == 0 ||
        lower.rfind("x-amz-copy-source-server-side-encryption", 0) == 0) {
      return S3Error(S3Code::kNotImplemented,
                     lower +
                         ": server-side encryption is not supported; this server stores "
                         "objects as sent (encrypt the disk of its data directory)");
    }
  }
  return std::nullopt;
}

S3Status S3Api::Call::RefuseUnknownChecksums() {
  auto unknown = [](std::string_view what) {
    return S3Error(S3Code::kInvalidRequest,
                   "Checksum " + std::string(what) +
                       " is not supported: this server verifies CRC32, CRC32C, CRC64NVME, SHA1 "
                       "and SHA256");
  };
  auto known_header = [](std::string_view name) {
    for (const auto& f : kChecksumFields) {
      if (base::EqualsIgnoreCase(name, f.header)) return true;
    }
    return false;
  };
  for (const auto& [name, value] : req_.headers()) {
    const std::string lower = base::AsciiToLower(name);
    if (lower.rfind("x-amz-checksum-", 0) != 0) continue;
    if (lower == "x-amz-checksum-algorithm") {
      if (ChecksumBitOf(value) == 0) return unknown("algorithm '" + value + "'");
    } else if (lower != "x-amz-checksum-type" && lower != "x-amz-checksum-mode" &&
               !known_header(lower)) {
      return unknown(lower);
    }
  }
  if (auto algo = req_.header("x-amz-sdk-checksum-algorithm"); algo && ChecksumBitOf(*algo) == 0) {
    return unknown("algorithm '" + std::string(*algo) + "'");
  }
  for (const auto& t : auth_.trailer_names) {
    if (!known_header(t)) return unknown("trailer " + t);
  }
  return std::nullopt;
}

S3Result<ObjectMeta> S3Api::Call::MetaFromHeaders() {
  ObjectMeta m;
  m.content_type = Header("Content-Type");
  m.content_encoding = Header("Content-Encoding");
  // aws-chunked is transport framing, not the object's encoding: it is taken out, and what
  // remains is kept as sent ("deflate, gzip" stays "deflate, gzip").
  if (!m.content_encoding.empty()) {
    std::vector<std::string> kept;
    bool framing = false;
    for (std::string_view e : base::Split(m.content_encoding, ',')) {
      e = base::Trim(e);
      if (base::EqualsIgnoreCase(e, "aws-chunked")) {
        framing = true;
      } else if (!e.empty()) {
        kept.emplace_back(e);
      }
    }
    if (framing) m.content_encoding = base::Join(kept, ", ");
  }
  m.content_disposition = Header("Content-Disposition");
  m.content_language = Header("Content-Language");
  m.cache_control = Header("Cache-Control");
  m.expires = Header("Expires");
  std::string storage = Header("x-amz-storage-class");
  if (!storage.empty() && storage != "STANDARD") {
    return S3Error(S3Code::kInvalidStorageClass,
                   "The storage class you specified is not valid: this store has STANDARD only");
  }
  for (const auto& [name, value] : req_.headers()) {
    if (name.size() > 11 &&
        base::EqualsIgnoreCase(std::string_view(name).substr(0, 11), "x-amz-meta-")) {
      std::string lowered = base::AsciiToLower(std::string_view(name).substr(11));
      m.user.emplace_back(lowered, value);
    }
  }
  SOVAI_S3_RETURN_IF_ERROR(ValidateUserMetadata(m.user));
  if (auto tagging = req_.header("x-amz-tagging")) {
    SOVAI_S3_ASSIGN_OR_RETURN(std::vector<Tag> tags, ParseTaggingHeader(*tagging, false));
    for (auto& t : tags) m.tags.emplace_back(std::move(t.key), std::move(t.value));
  }
  return m;
}

void S3Api::Call::AddCors(net::Response& res) {
  auto origin = req_.header("Origin");
  if (!origin || bucket_.empty()) return;
  auto doc = store_.GetBucketConfig(bucket_, "cors");
  if (!doc.ok() || !doc->has_value()) return;
  auto config = ParseCorsConfiguration(**doc);
  if (!config.ok()) return;
  const CorsRule* rule = MatchCors(*config, *origin, req_.method(), {});
  if (!rule) return;
  for (auto& [k, v] : CorsActualHeaders(*rule, *origin)) res.headers.Set(k, v);
}

net::Response S3Api::Call::Run() {
  net::Response res;
  if (S3Status st = ParseAddress()) {
    res = Error(*st);
  } else if (req_.method() == "OPTIONS") {
    res = Preflight();
  } else if (S3Status auth = Authenticate()) {
    res = Error(*auth);
  } else {
    try {
      res = Dispatch();
    } catch (const std::exception& e) {
      SOVAI_LOG(ERROR).With("error", e.what()) << "s3: request failed";
      res = Error(S3Error(S3Code::kInternalError, "We encountered an internal error."));
    }
    AddCors(res);
  }
  res.headers.Set("x-amz-request-id", request_id_);
  res.headers.Set("x-amz-id-2", base::Base64Encode(request_id_));
  return res;
}

net::Response S3Api::Call::Dispatch() {
  const std::string_view m = req_.method();
  const S3Level level =
      bucket_.empty() ? S3Level::kService : (has_key_ ? S3Level::kObject : S3Level::kBucket);
  if (level == S3Level::kObject) {
    if (S3Status st = ValidateObjectKey(key_)) return Error(*st);
  }
  const S3Route route = RouteS3Request(m, level, req_.query_params());
  if ((m == "PUT" || m == "POST") && route.op != S3Op::kNotImplemented &&
      route.op != S3Op::kMethodNotAllowed) {
    if (S3Status st = RefuseUnknownChecksums()) return Error(*st);
  }
  switch (route.op) {
    case S3Op::kListBuckets:
      return ListBuckets();
    case S3Op::kCreateBucket:
      return CreateBucket();
    case S3Op::kDeleteBucket:
      return DeleteBucket();
    case S3Op::kHeadBucket:
      return HeadBucket();
    case S3Op::kGetBucketLocation:
      return GetBucketLocation();
    case S3Op::kBucketVersioning:
      return BucketVersioning();
    case S3Op::kBucketCors:
      return BucketConfig("cors");
    case S3Op::kBucketTagging:
      return BucketConfig("tagging");
    case S3Op::kBucketPolicy:
      return BucketConfig("policy");
    case S3Op::kBucketAcl:
      return AclOperation(false);
    case S3Op::kBucketLifecycle:
      return BucketLifecycle();
    case S3Op::kBucketOwnershipControls:
      return OwnershipControls();
    case S3Op::kBucketPublicAccessBlock:
      return PublicAccessBlockConfig();
    case S3Op::kGetBucketPolicyStatus:
      return PolicyStatus();
    case S3Op::kGetBucketEncryption:
      return NotConfigured("s3:GetEncryptionConfiguration",
                           S3Error(S3Code::kServerSideEncryptionConfigurationNotFoundError,
                                   "The server side encryption configuration was not found"));
    case S3Op::kObjectLockConfiguration:
      return ObjectLockConfig();
    case S3Op::kObjectRetention:
      return ObjectRetention();
    case S3Op::kObjectLegalHold:
      return ObjectLegalHold();
    case S3Op::kGetObjectAttributes:
      return GetObjectAttributes();
    case S3Op::kGetBucketWebsite:
      return NotConfigured("s3:GetBucketWebsite",
                           S3Error(S3Code::kNoSuchWebsiteConfiguration,
                                   "The specified bucket does not have a website configuration"));
    case S3Op::kListObjects:
      return ListObjects(Query("list-type").value_or("") == "2");
    case S3Op::kListObjectVersions:
      return ListVersions();
    case S3Op::kListMultipartUploads:
      return ListUploads();
    case S3Op::kDeleteObjects:
      return DeleteObjects();
    case S3Op::kPostObject:
      return PostObject();
    case S3Op::kGetObject:
      return GetObject(false);
    case S3Op::kHeadObject:
      return GetObject(true);
    case S3Op::kPutObject:
      return req_.header("x-amz-copy-source") ? CopyObject() : PutObject();
    case S3Op::kDeleteObject:
      return DeleteObject();
    case S3Op::kObjectTagging:
      return ObjectTagging();
    case S3Op::kObjectAcl:
      return AclOperation(true);
    case S3Op::kCreateMultipartUpload:
      return CreateUpload();
    case S3Op::kUploadPart:
      return UploadPart();
    case S3Op::kCompleteMultipartUpload:
      return CompleteUpload();
    case S3Op::kAbortMultipartUpload:
      return AbortUpload();
    case S3Op::kListParts:
      return ListParts();
    case S3Op::kNotImplemented:
      // A missing bucket is the client's mistake to hear about first (never a 5xx for it).
      if (!bucket_.empty()) {
        if (auto b = store_.GetBucket(bucket_); !b.ok()) return Error(b.error());
      }
      return Error(S3Error(S3Code::kNotImplemented, route.name));
    case S3Op::kMethodNotAllowed:
      break;
  }
  return Error(S3Error(S3Code::kMethodNotAllowed, route.name));
}

net::Response S3Api::Call::NotConfigured(std::string_view action, S3Error not_configured) {
  auto b = BucketFor(action, false);
  if (!b.ok()) return Error(b.error());
  return Error(not_configured.With("BucketName", bucket_));
}

// --- Service and buckets -------------------------------------------------------------------------

net::Response S3Api::Call::ListBuckets() {
  if (auth_.anonymous) return Error(S3Error(S3Code::kAccessDenied, "Access Denied"));
  auto all = store_.ListBuckets();
  if (!all.ok()) return Error(all.error());
  const bool admin = IsAdmin();
  XmlWriter w;
  w.Open("ListAllMyBucketsResult", kS3Namespace);
  WriteIdentity(w, "Owner", user_);
  w.Open("Buckets");
  for (const auto& b : *all) {
    if (b.owner != user_ && !admin) continue;
    w.Open("Bucket");
    w.Element("Name", b.name);
    w.Element("CreationDate", Iso8601(b.created_micros));
    w.Element("BucketRegion", b.region);
    w.Close();
  }
  w.Close();
  w.Close();
  return Xml(200, w.Finish());
}

net::Response S3Api::Call::CreateBucket() {
  if (auth_.anonymous) return Error(S3Error(S3Code::kAccessDenied, "Access Denied"));
  if (S3Status st = ValidateBucketName(bucket_)) return Error(*st);
  auto body = ReadXmlBody();
  if (!body.ok()) return Error(body.error());
  auto config = ParseCreateBucketConfiguration(*body);
  if (!config.ok()) return Error(config.error());
  const std::string& region = api_.opts_.region;
  if (!config->location_constraint.empty() && config->location_constraint != region) {
    return Error(S3Error(S3Code::kIllegalLocationConstraintException,
                         "The " + config->location_constraint +
                             " location constraint is incompatible for the region specific "
                             "endpoint this request was sent to (this server is " +
                             region + ").")
                     .With("LocationConstraint", config->location_constraint));
  }
  if (S3Status st = RefuseUnsupportedProtections(/*takes_acl=*/true)) return Error(*st);
  auto access = AccessForNewBucket();
  if (!access.ok()) return Error(access.error());
  // Object Lock (versioning on for good, and the lock), the Object Ownership and the ACL are set
  // in the transaction that makes the bucket: no request sees it without them.
  BucketSetup setup;
  AddNewBucketAccess(*access, &setup);
  if (std::string lock = std::string(base::Trim(Header("x-amz-bucket-object-lock-enabled")));
      !lock.empty()) {
    if (!base::EqualsIgnoreCase(lock, "true") && !base::EqualsIgnoreCase(lock, "false")) {
      return Error(S3Error(S3Code::kInvalidArgument,
                           "x-amz-bucket-object-lock-enabled must be true or false")
                       .With("ArgumentName", "x-amz-bucket-object-lock-enabled"));
    }
    if (base::EqualsIgnoreCase(lock, "true")) {
      setup.versioning = Versioning::kEnabled;
      setup.configs.emplace_back(std::string(kObjectLockConfigKind),
                                 RenderObjectLockConfiguration({.enabled = true}));
    }
  }
  auto created = store_.CreateBucket(bucket_, user_, setup);
  if (!created.ok()) {
    // S3's rule: in us-east-1 creating a bucket you already own succeeds (and changes nothing);
    // in every other region it is BucketAlreadyOwnedByYou (409).
    if (created.error().code == S3Code::kBucketAlreadyOwnedByYou && region == "us-east-1") {
      net::Response res = Empty(200);
      res.headers.Set("Location", "/" + bucket_);
      return res;
    }
    return Error(created.error());
  }
  access_.reset();
  if (!config->tags.empty()) {
    (void)store_.SetBucketConfig(bucket_, "tagging", RenderTagging(config->tags));
  }
  net::Response res = Empty(200);
  res.headers.Set("Location", "/" + bucket_);
  return res;
}

net::Response S3Api::Call::DeleteBucket() {
  auto b = BucketFor("s3:DeleteBucket", false);
  if (!b.ok()) return Error(b.error());
  if (S3Status st = store_.DeleteBucket(bucket_)) return Error(*st);
  return Empty(204);
}

net::Response S3Api::Call::HeadBucket() {
  auto b = BucketFor("s3:ListBucket", false);
  if (!b.ok()) return Error(b.error());
  net::Response res = Empty(200);
  res.headers.Set("x-amz-bucket-region", b->region);
  return res;
}

net::Response S3Api::Call::GetBucketLocation() {
  auto b = BucketFor("s3:GetBucketLocation", false);
  if (!b.ok()) return Error(b.error());
  // us-east-1 is spelled as an empty LocationConstraint, as S3 does.
  XmlWriter w;
  w.Open("LocationConstraint", kS3Namespace);
  if (b->region != "us-east-1") w.Text(b->region);
  w.Close();
  return Xml(200, w.Finish());
}

net::Response S3Api::Call::BucketVersioning() {
  const bool put = req_.method() == "PUT";
  auto b = BucketFor(put ? "s3:PutBucketVersioning" : "s3:GetBucketVersioning", false);
  if (!b.ok()) return Error(b.error());
  if (!put) {
    VersioningConfiguration c;
    c.status = b->versioning == Versioning::kEnabled     ? VersioningStatus::kEnabled
               : b->versioning == Versioning::kSuspended ? VersioningStatus::kSuspended
                                                         : VersioningStatus::kUnversioned;
    return Xml(200, RenderVersioningConfiguration(c));
  }
  auto body = ReadXmlBody();
  if (!body.ok()) return Error(body.error());
  auto config = ParseVersioningConfiguration(*body);
  if (!config.ok()) return Error(config.error());
  // Suspending a never-versioned bucket writes "null" versions as before, but the bucket now
  // reports Suspended, as S3's does.
  Versioning state =
      config->status == VersioningStatus::kEnabled ? Versioning::kEnabled : Versioning::kSuspended;
  if (state == Versioning::kSuspended) {
    auto lock = BucketObjectLock();
    if (!lock.ok()) return Error(lock.error());
    if (*lock) {
      return Error(S3Error(S3Code::kInvalidBucketState,
                           "An Object Lock configuration is present on this bucket, so the "
                           "versioning state cannot be changed.")
                       .With("BucketName", bucket_));
    }
  }
  if (S3Status st = store_.SetVersioning(bucket_, state)) return Error(*st);
  return Empty(200);
}

net::Response S3Api::Call::BucketConfig(const std::string& kind) {
  const std::string_view m = req_.method();
  std::string verb = m == "GET" ? "Get" : m == "PUT" ? "Put" : "Delete";
  std::string action =
      kind == "cors"      ? "s3:" + std::string(m == "GET" ? "Get" : "Put") + "BucketCORS"
      : kind == "tagging" ? "s3:" + std::string(m == "GET" ? "Get" : "Put") + "BucketTagging"
                          : "s3:" + verb + "BucketPolicy";
  auto b = BucketFor(action, false);
  if (!b.ok()) return Error(b.error());
  if (m == "GET") {
    auto doc = store_.GetBucketConfig(bucket_, kind);
    if (!doc.ok()) return Error(doc.error());
    if (!doc->has_value()) {
      if (kind == "cors") {
        return Error(
            S3Error(S3Code::kNoSuchCORSConfiguration, "The CORS configuration does not exist")
                .With("BucketName", bucket_));
      }
      if (kind == "tagging") {
        return Error(S3Error(S3Code::kNoSuchTagSet, "The TagSet does not exist")
                         .With("BucketName", bucket_));
      }
      return Error(S3Error(S3Code::kNoSuchBucketPolicy, "The bucket policy does not exist")
                       .With("BucketName", bucket_));
    }
    if (kind == "policy") return net::Response::Json(200, **doc);
    return Xml(200, **doc);
  }
  if (m == "DELETE") {
    if (S3Status st = store_.SetBucketConfig(bucket_, kind, std::nullopt)) return Error(*st);
    return Empty(204);
  }
  auto body = ReadXmlBody();
  if (!body.ok()) return Error(body.error());
  std::string stored;
  if (kind == "cors") {
    auto c = ParseCorsConfiguration(*body);
    if (!c.ok()) return Error(c.error());
    stored = RenderCorsConfiguration(*c);
  } else if (kind == "tagging") {
    auto t = ParseTagging(*body, true);
    if (!t.ok()) return Error(t.error());
    stored = RenderTagging(*t);
  } else {
    if (S3Status st = CheckNewPolicy(*body)) return Error(*st);
    stored = *body;
  }
  if (S3Status st = store_.SetBucketConfig(bucket_, kind, stored)) return Error(*st);
  return Empty(kind == "policy" ? 204 : 200);
}

// --- Listings ------------------------------------------------------------------------------------

net::Response S3Api::Call::ListObjects(bool v2) {
  auto b = BucketFor("s3:ListBucket", false);
  if (!b.ok()) return Error(b.error());
  auto url = UrlEncodingRequested();
  if (!url.ok()) return Error(url.error());
  auto enc = [&](const std::string& s) { return *url ? UrlEncodeKey(s) : s; };
  ListOptions o;
  o.prefix = std::string(Query("prefix").value_or(""));
  o.delimiter = std::string(Query("delimiter").value_or(""));
  int max_keys = 1000;
  if (auto mk = Query("max-keys")) {
    auto n = base::ParseUint64(*mk);
    if (!n.ok() || *n > 1u << 30) {
      return Error(S3Error(S3Code::kInvalidArgument,
                           "Provided max-keys not an integer or within "
                           "integer range")
                       .With("ArgumentName", "max-keys"));
    }
    max_keys = static_cast<int>(std::min<uint64_t>(*n, 1000));
  }
  o.max_keys = max_keys;
  std::string token, start_after, marker;
  const std::optional<std::string_view> token_param =
      v2 ? Query("continuation-token") : std::nullopt;
  if (v2) {
    start_after = std::string(Query("start-after").value_or(""));
    if (token_param) {
      token = std::string(*token_param);
      auto decoded = base::Base64UrlDecode(token);
      if (!decoded.ok()) {
        return Error(S3Error(S3Code::kInvalidArgument,
                             "The continuation token provided is "
                             "incorrect")
                         .With("ArgumentName", "continuation-token"));
      }
      o.after = *decoded;
    } else {
      o.after = start_after;
    }
  } else {
    marker = std::string(Query("marker").value_or(""));
    o.after = marker;
  }
  // max-keys=0 asks for nothing: an empty, complete page (S3's answer), not a truncated one.
  S3Result<ListResult> r =
      max_keys == 0 ? S3Result<ListResult>(ListResult{}) : store_.List(bucket_, o);
  if (!r.ok()) return Error(r.error());
  XmlWriter w;
  w.Open("ListBucketResult", kS3Namespace);
  w.Element("Name", bucket_);
  // ListObjects (v1) sends its Prefix as given even with encoding-type=url: S3 does, and
  // botocore, which decodes every element S3 encodes, leaves this one as it comes.
  w.Element("Prefix", v2 ? enc(o.prefix) : o.prefix);
  if (v2) {
    // Echoed whenever sent, even empty (an empty token starts at the beginning).
    if (token_param) w.Element("ContinuationToken", token);
    if (!start_after.empty()) w.Element("StartAfter", enc(start_after));
    w.Element("KeyCount", r->objects.size() + r->common_prefixes.size());
    if (r->truncated) w.Element("NextContinuationToken", base::Base64UrlEncode(r->next_marker));
  } else {
    w.Element("Marker", enc(marker));
    if (r->truncated) w.Element("NextMarker", enc(r->next_marker));
  }
  w.Element("MaxKeys", max_keys);
  if (!o.delimiter.empty()) w.Element("Delimiter", enc(o.delimiter));
  if (*url) w.Element("EncodingType", "url");
  w.BoolElement("IsTruncated", r->truncated);
  const bool owner = !v2 || Query("fetch-owner").value_or("") == "true";
  for (const auto& v : r->objects) {
    w.Open("Contents");
    w.Element("Key", enc(v.key));
    w.Element("LastModified", Iso8601(v.mtime_micros));
    w.Element("ETag", v.etag);
    for (const auto& f : kChecksumFields) {
      if (!(v.checksums.*f.member).empty()) w.Element("ChecksumAlgorithm", f.algorithm);
    }
    if (!v.checksums.type.empty()) w.Element("ChecksumType", v.checksums.type);
    w.Element("Size", v.size);
    w.Element("StorageClass", "STANDARD");
    if (owner) {
      WriteIdentity(w, "Owner", v.owner);
    }
    w.Close();
  }
  for (const auto& p : r->common_prefixes) {
    w.Open("CommonPrefixes");
    w.Element("Prefix", enc(p));
    w.Close();
  }
  w.Close();
  return Xml(200, w.Finish());
}

net::Response S3Api::Call::ListVersions() {
  auto b = BucketFor("s3:ListBucketVersions", false);
  if (!b.ok()) return Error(b.error());
  auto url = UrlEncodingRequested();
  if (!url.ok()) return Error(url.error());
  auto enc = [&](const std::string& s) { return *url ? UrlEncodeKey(s) : s; };
  ListVersionsOptions o;
  o.prefix = std::string(Query("prefix").value_or(""));
  o.delimiter = std::string(Query("delimiter").value_or(""));
  o.key_marker = std::string(Query("key-marker").value_or(""));
  o.version_id_marker = std::string(Query("version-id-marker").value_or(""));
  if (!o.version_id_marker.empty() && o.key_marker.empty()) {
    return Error(S3Error(S3Code::kInvalidArgument,
                         "A version-id marker cannot be specified without a key marker.")
                     .With("ArgumentName", "version-id-marker"));
  }
  int max_keys = 1000;
  if (auto mk = Query("max-keys")) {
    auto n = base::ParseUint64(*mk);
    if (!n.ok()) {
      return Error(S3Error(S3Code::kInvalidArgument, "Provided max-keys not an integer")
                       .With("ArgumentName", "max-keys"));
    }
    max_keys = static_cast<int>(std::min<uint64_t>(*n, 1000));
  }
  o.max_keys = max_keys;
  S3Result<ListVersionsResult> r = max_keys == 0
                                       ? S3Result<ListVersionsResult>(ListVersionsResult{})
                                       : store_.ListVersions(bucket_, o);
  if (!r.ok()) return Error(r.error());
  XmlWriter w;
  w.Open("ListVersionsResult", kS3Namespace);
  w.Element("Name", bucket_);
  w.Element("Prefix", enc(o.prefix));
  w.Element("KeyMarker", enc(o.key_marker));
  w.Element("VersionIdMarker", o.version_id_marker);
  if (r->truncated) {
    w.Element("NextKeyMarker", enc(r->next_key_marker));
    if (!r->next_version_id_marker.empty()) {
      w.Element("NextVersionIdMarker", r->next_version_id_marker);
    }
  }
  w.Element("MaxKeys", max_keys);
  if (!o.delimiter.empty()) w.Element("Delimiter", enc(o.delimiter));
  if (*url) w.Element("EncodingType", "url");
  w.BoolElement("IsTruncated", r->truncated);
  for (const auto& v : r->versions) {
    w.Open(v.delete_marker ? "DeleteMarker" : "Version");
    w.Element("Key", enc(v.key));
    w.Element("VersionId", v.version_id);
    w.BoolElement("IsLatest", v.is_latest);
    w.Element("LastModified", Iso8601(v.mtime_micros));
    if (!v.delete_marker) {
      w.Element("ETag", v.etag);
      w.Element("Size", v.size);
      w.Element("StorageClass", "STANDARD");
    }
    WriteIdentity(w, "Owner", v.owner);
    w.Close();
  }
  for (const auto& p : r->common_prefixes) {
    w.Open("CommonPrefixes");
    w.Element("Prefix", enc(p));
    w.Close();
  }
  w.Close();
  return Xml(200, w.Finish());
}

net::Response S3Api::Call::ListUploads() {
  auto b = BucketFor("s3:ListBucketMultipartUploads", false);
  if (!b.ok()) return Error(b.error());
  auto url = UrlEncodingRequested();
  if (!url.ok()) return Error(url.error());
  auto enc = [&](const std::string& s) { return *url ? UrlEncodeKey(s) : s; };
  ListUploadsOptions o;
  o.prefix = std::string(Query("prefix").value_or(""));
  o.key_marker = std::string(Query("key-marker").value_or(""));
  o.upload_id_marker = std::string(Query("upload-id-marker").value_or(""));
  if (auto mu = Query("max-uploads")) {
    auto n = base::ParseUint64(*mu);
    if (!n.ok()) {
      return Error(S3Error(S3Code::kInvalidArgument, "Provided max-uploads not an integer")
                       .With("ArgumentName", "max-uploads"));
    }
    o.max_uploads = static_cast<int>(std::min<uint64_t>(*n, 1000));
  }
  bool truncated = false;
  S3Result<std::vector<UploadInfo>> r =
      o.max_uploads == 0 ? S3Result<std::vector<UploadInfo>>(std::vector<UploadInfo>{})
                         : store_.ListUploads(bucket_, o, &truncated);
  if (!r.ok()) return Error(r.error());
  XmlWriter w;
  w.Open("ListMultipartUploadsResult", kS3Namespace);
  w.Element("Bucket", bucket_);
  w.Element("KeyMarker", enc(o.key_marker));
  w.Element("UploadIdMarker", o.upload_id_marker);
  if (truncated && !r->empty()) {
    w.Element("NextKeyMarker", enc(r->back().key));
    w.Element("NextUploadIdMarker", r->back().upload_id);
  }
  w.Element("Prefix", enc(o.prefix));
  w.Element("MaxUploads", o.max_uploads);
  if (*url) w.Element("EncodingType", "url");
  w.BoolElement("IsTruncated", truncated);
  for (const auto& u : *r) {
    w.Open("Upload");
    w.Element("Key", enc(u.key));
    w.Element("UploadId", u.upload_id);
    WriteIdentity(w, "Initiator", u.owner);
    WriteIdentity(w, "Owner", u.owner);
    w.Element("StorageClass", "STANDARD");
    w.Element("Initiated", Iso8601(u.created_micros));
    if (!u.checksum_algorithm.empty()) w.Element("ChecksumAlgorithm", u.checksum_algorithm);
    w.Close();
  }
  w.Close();
  return Xml(200, w.Finish());
}

net::Response S3Api::Call::DeleteObjects() {
  // Authorized per key below, as AWS does: a policy may allow or deny s3:DeleteObject on some
  // keys of the bucket only.
  auto b = BucketFor("", false);
  if (!b.ok()) return Error(b.error());
  auto body = ReadXmlBody();
  if (!body.ok()) return Error(body.error());
  auto request = ParseDelete(*body);
  if (!request.ok()) return Error(request.error());
  XmlWriter w;
  w.Open("DeleteResult", kS3Namespace);
  for (const auto& o : request->objects) {
    std::optional<std::string> version;
    if (!o.version_id.empty()) version = o.version_id;
    S3Status problem = ValidateObjectKey(o.key);
    if (!problem) {
      problem = Authorize(*b, version ? "s3:DeleteObjectVersion" : "s3:DeleteObject", true, o.key);
    }
    std::optional<DeleteResult> done;
    if (!problem) {
      if (version && !IsPlausibleVersionId(*version)) {
        problem = S3Error(S3Code::kNoSuchVersion, "The specified version does not exist.");
      } else {
        key_ = o.key;  // what LockGuard authorizes the bypass for
        auto r = store_.Delete(bucket_, o.key, version, LockGuard(version.has_value()));
        if (r.ok()) {
          done = *r;
        } else {
          problem = r.error();
        }
      }
    }
    if (problem) {
      w.Open("Error");
      w.Element("Key", o.key);
      if (version) w.Element("VersionId", *version);
      w.Element("Code", problem->name());
      w.Element("Message", problem->message);
      w.Close();
      continue;
    }
    if (request->quiet) continue;
    w.Open("Deleted");
    w.Element("Key", o.key);
    if (version) w.Element("VersionId", *version);
    if (done->delete_marker) {
      w.BoolElement("DeleteMarker", true);
      w.Element("DeleteMarkerVersionId", done->version_id);
    }
    w.Close();
  }
  w.Close();
  return Xml(200, w.Finish());
}

net::Response S3Api::Call::Preflight() {
  auto origin = req_.header("Origin");
  auto method = req_.header("Access-Control-Request-Method");
  if (!origin || !method) {
    return Error(S3Error(S3Code::kInvalidRequest,
                         "Insufficient information. Origin request header needed."));
  }
  auto forbidden = [&] {
    return Error(S3Error(S3Code::kAccessForbidden,
                         "CORSResponse: This CORS request is not allowed. This is usually because "
                         "the evalution of Origin, request method / Access-Control-Request-Method "
                         "or Access-Control-Request-Headers are not whitelisted by the resource's "
                         "CORS spec.")
                     .With("Method", std::string(*method))
                     .With("ResourceType", has_key_ ? "OBJECT" : "BUCKET"));
  };
  if (bucket_.empty()) return forbidden();
  auto doc = store_.GetBucketConfig(bucket_, "cors");
  if (!doc.ok()) return Error(doc.error());
  if (!doc->has_value()) return forbidden();
  auto config = ParseCorsConfiguration(**doc);
  if (!config.ok()) return forbidden();
  std::vector<std::string> headers =
      ParseAccessControlRequestHeaders(req_.header("Access-Control-Request-Headers").value_or(""));
  const CorsRule* rule = MatchCors(*config, *origin, *method, headers);
  if (!rule) return forbidden();
  net::Response res = Empty(200);
  for (auto& [k, v] : CorsPreflightHeaders(*rule, *origin, headers)) res.headers.Set(k, v);
  return res;
}

// --- S3Api ---------------------------------------------------------------------------------------

const char* PayloadModeName(int mode) {
  static constexpr const char* kNames[] = {"unsigned", "signed-sha256", "streaming-signed",
                                           "streaming-signed-trailer",
                                           "streaming-unsigned-trailer"};
  return mode >= 0 && mode < 5 ? kNames[mode] : "unknown";
}

S3Api::S3Api(Store& store, S3ApiOptions options) : store_(store), opts_(std::move(options)) {
  if (!opts_.env) opts_.env = &base::Env::Default();
}

void S3Api::Install(net::Router& router) {
  router.SetFallback([this](net::Request& req) { return Handle(req); },
                     {.inline_if = IsPointRead, .max_body_bytes = kMaxS3BodyBytes});
}

bool S3Api::IsPointRead(const net::Request& req) {
  if (req.method() != "GET" && req.method() != "HEAD") return false;
  // "/bucket/key" (path style; virtual-hosted, a key with a '/'): one object. "/bucket/" and
  // "/key" may be listings and run on a worker.
  std::string_view path = req.raw_path();
  if (path.size() < 2 || path[0] != '/') return false;
  size_t slash = path.find('/', 1);
  if (slash == std::string_view::npos || slash == 1 || slash + 1 == path.size()) return false;
  // ListParts scans up to a thousand rows; every other object-level read is a point read.
  return RouteS3Request(req.method(), S3Level::kObject, req.query_params()).op != S3Op::kListParts;
}

net::Response S3Api::Handle(net::Request& req) { return Call(*this, req).Run(); }

void S3Api::RenderServerError(const net::Request* req, net::Response& res) {
  // The S3 code for each status the HTTP layer answers by itself.
  static constexpr std::pair<int, S3Code> kCodes[] = {
      {400, S3Code::kInvalidRequest}, {403, S3Code::kAccessDenied},
      {404, S3Code::kNoSuchKey},      {405, S3Code::kMethodNotAllowed},
      {408, S3Code::kRequestTimeout}, {411, S3Code::kMissingContentLength},
      {413, S3Code::kEntityTooLarge}, {501, S3Code::kNotImplemented},
      {503, S3Code::kSlowDown},
  };
  S3Code code = S3Code::kInternalError;
  for (const auto& [status, s3_code] : kCodes) {
    if (status == res.status) code = s3_code;
  }
  S3Error e(code, res.error_message.value_or(std::string(net::HttpReasonPhrase(res.status))));
  res.headers.Set("Content-Type", std::string(kXmlType));
  res.body = RenderS3ErrorXml(e, req ? req->raw_path() : "", NewRequestId());
}

}  // namespace sovai::objstore
