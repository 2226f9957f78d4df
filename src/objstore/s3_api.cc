// The S3 front end (see s3_api.h and docs/api/s3.md).
#include "objstore/s3_api.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/crc.h"
#include "base/crypto.h"
#include "base/log.h"
#include "base/strings.h"
#include "base/time.h"
#include "objstore/cors.h"
#include "objstore/names.h"
#include "objstore/s3_routes.h"
#include "objstore/s3_xml.h"
#include "objstore/sigv4.h"

namespace sovai::objstore {

using base::Result;
using nlohmann::json;

namespace {

// Request bodies of S3 are at most one 5 GiB object, plus the aws-chunked framing around it.
constexpr uint64_t kMaxS3BodyBytes = (5ull << 30) + (64ull << 20);
constexpr uint64_t kMaxPutBytes = 5ull << 30;
constexpr size_t kStreamPieceBytes = 1 << 20;
constexpr std::string_view kXmlType = "application/xml";

std::string Iso8601(int64_t micros) { return base::FormatRfc3339(micros, 3); }

std::string NewRequestId() { return base::HexEncode(base::RandomBytes(8)); }

std::string UrlEncodeKey(std::string_view s) { return base::UriEncode(s, /*encode_slash=*/false); }

// The ETag of the object a CompleteMultipartUpload with these parts makes: the MD5 of the parts'
// MD5s, "-N" (what the store computes).
std::string MultipartEtag(const std::vector<CompletePart>& parts) {
  std::string md5s;
  for (const auto& p : parts) {
    auto raw = base::HexDecode(UnquoteEtag(p.etag));
    if (raw.ok()) md5s += *raw;
  }
  return base::HexEncode(base::Md5(md5s)) + "-" + std::to_string(parts.size());
}

// A BodyReader over an ObjectReader (copies are staged from the source object).
class ObjectBody final : public net::BodyReader {
 public:
  explicit ObjectBody(ObjectReader& r) : r_(r) {}
  Result<size_t> Read(char* buf, size_t n) override { return r_.Read(buf, n); }

 private:
  ObjectReader& r_;
};

// A BodyReader that fails once more than `limit` bytes arrive (XML bodies).
Result<std::string> ReadLimited(net::BodyReader& body, size_t limit) {
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

struct ChecksumField {
  const char* header;  // x-amz-checksum-...
  const char* algorithm;
  uint32_t bit;
  std::string Checksums::*member;
};
constexpr ChecksumField kChecksumFields[] = {
    {"x-amz-checksum-crc32", "CRC32", kCrc32, &Checksums::crc32},
    {"x-amz-checksum-crc32c", "CRC32C", kCrc32c, &Checksums::crc32c},
    {"x-amz-checksum-crc64nvme", "CRC64NVME", kCrc64Nvme, &Checksums::crc64nvme},
    {"x-amz-checksum-sha1", "SHA1", kSha1, &Checksums::sha1},
    {"x-amz-checksum-sha256", "SHA256", kSha256, &Checksums::sha256},
};

void AddChecksumHeaders(net::Response& res, const Checksums& c) {
  for (const auto& f : kChecksumFields) {
    const std::string& v = c.*f.member;
    if (!v.empty()) res.headers.Set(f.header, v);
  }
  if (!c.type.empty()) res.headers.Set("x-amz-checksum-type", c.type);
}

// <Owner><ID>user</ID><DisplayName>user</DisplayName></Owner> (or Initiator, Grantee).
void WriteIdentity(XmlWriter& w, const char* element, const std::string& user) {
  w.Open(element);
  w.Element("ID", user);
  w.Element("DisplayName", user);
  w.Close();
}

// --- Bucket policies (a subset of IAM's language) ----------------------------------------------

bool Wildcard(std::string_view pattern, std::string_view text) {
  // '*' any run, '?' one character; iterative with backtracking to the last '*'.
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::string> StringOrList(const json& j) {
  std::vector<std::string> out;
  if (j.is_string()) out.push_back(j.get<std::string>());
  if (j.is_array()) {
    for (const auto& e : j) {
      if (e.is_string()) out.push_back(e.get<std::string>());
    }
  }
  return out;
}

// Checks a policy document's shape. Errors: MalformedPolicy saying what is wrong.
S3Status ValidatePolicy(std::string_view text) {
  json doc = json::parse(text, nullptr, false);
  auto bad = [](std::string m) { return S3Error(S3Code::kMalformedPolicy, std::move(m)); };
  if (!doc.is_object()) return bad("Policies must be valid JSON objects");
  auto st = doc.find("Statement");
  if (st == doc.end()) return bad("Missing required field Statement");
  json statements = st->is_array() ? *st : json::array({*st});
  if (statements.empty() || statements.size() > 100)
    return bad("Statement must have 1 to 100 entries");
  for (const auto& s : statements) {
    if (!s.is_object()) return bad("Each Statement must be an object");
    auto effect = s.find("Effect");
    if (effect == s.end() || !effect->is_string() || (*effect != "Allow" && *effect != "Deny")) {
      return bad("Effect must be Allow or Deny");
    }
    if (!s.contains("Principal")) return bad("Missing required field Principal");
    if (!s.contains("Action") || StringOrList(s["Action"]).empty()) {
      return bad("Missing required field Action");
    }
    if (!s.contains("Resource") || StringOrList(s["Resource"]).empty()) {
      return bad("Missing required field Resource");
    }
    for (const auto& a : StringOrList(s["Action"])) {
      if (a != "*" && a.rfind("s3:", 0) != 0) return bad("Action does not apply: " + a);
    }
  }
  return std::nullopt;
}

bool PrincipalMatches(const json& principal, const std::string& user, bool anonymous) {
  std::vector<std::string> ids;
  if (principal.is_string()) {
    ids.push_back(principal.get<std::string>());
  } else if (principal.is_object() && principal.contains("AWS")) {
    ids = StringOrList(principal["AWS"]);
  }
  for (const auto& id : ids) {
    if (id == "*") return true;
    if (anonymous) continue;
    if (id == user) return true;
    // arn:aws:iam::<account>:user/<name>
    if (id.size() > user.size() + 1 &&
        id.compare(id.size() - user.size() - 1, std::string::npos, "/" + user) == 0) {
      return true;
    }
  }
  return false;
}

// "Allow", "Deny" or "" (no statement applies).
std::string EvaluatePolicy(std::string_view text, const std::string& user, bool anonymous,
                           std::string_view action, std::string_view resource) {
  json doc = json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc.contains("Statement")) return "";
  json statements =
      doc["Statement"].is_array() ? doc["Statement"] : json::array({doc["Statement"]});
  std::string verdict;
  for (const auto& s : statements) {
    if (!s.is_object() || !s.contains("Principal")) continue;
    if (!PrincipalMatches(s["Principal"], user, anonymous)) continue;
    bool action_ok = false;
    for (const auto& a : StringOrList(s.value("Action", json()))) {
      action_ok = action_ok || Wildcard(a, action);
    }
    bool resource_ok = false;
    for (const auto& r : StringOrList(s.value("Resource", json()))) {
      resource_ok = resource_ok || Wildcard(r, resource);
    }
    if (!action_ok || !resource_ok) continue;
    std::string effect = s.value("Effect", "");
    // Conditions are not evaluated: a conditional Allow never grants, a conditional Deny always
    // denies (the safe reading of a policy we cannot fully understand).
    if (s.contains("Condition") && effect == "Allow") continue;
    if (effect == "Deny") return "Deny";
    if (effect == "Allow") verdict = "Allow";
  }
  return verdict;
}

}  // namespace

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
  // Authorizes `action` on the current bucket (and key, for object actions).
  S3Status Authorize(const BucketInfo& bucket, std::string_view action, bool object_action,
                     const std::string& key);
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
  // ignore it: canned ACLs but private (and, on objects, bucket-owner-full-control, the same
  // thing here), ACL grants, server-side encryption, Object Lock. NotImplemented.
  S3Status RefuseUnsupportedProtections(bool object);
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
  net::Response CopyObject();
  net::Response GetObject(bool head);
  net::Response DeleteObject();
  net::Response ObjectTagging();
  net::Response Acl(bool object);
  net::Response CreateUpload();
  net::Response UploadPart();
  net::Response CompleteUpload();
  net::Response CompleteResult(const BucketInfo& bucket, const ObjectVersion& v);
  // If-None-Match and If-Match of a write, both applied whatever their combination: "*" (create
  // only / overwrite only) or ETag lists, checked in the write's transaction.
  void WriteConditions(PutOptions* o);
  net::Response AbortUpload();
  net::Response ListParts();

  // Reads the body (verified), computes the checksums the request declares and checks them.
  S3Result<StagedData> StageBody(bool allow_inline, uint64_t max_size, Checksums* verified);
  S3Result<StagedData> StageCopySource(const ObjectVersion& source, uint64_t offset,
                                       uint64_t length, bool allow_inline);
  S3Result<ObjectVersion> CopySource(std::string_view header, std::string_view range_header,
                                     uint64_t* offset, uint64_t* length);
  S3Status CheckCopySourceConditions(const ObjectVersion& src);
  void AddObjectHeaders(net::Response& res, const ObjectVersion& v, bool versioned_bucket);

  S3Api& api_;
  Store& store_;
  net::Request& req_;
  std::string request_id_ = NewRequestId();
  std::string bucket_;
  std::string key_;
  bool has_key_ = false;
  AuthResult auth_;
  std::string user_;  // "" when anonymous
  std::optional<BucketInfo> bucket_info_;
};

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

S3Status S3Api::Call::Authorize(const BucketInfo& bucket, std::string_view action,
                                bool object_action, const std::string& key) {
  const auto& admins = api_.opts_.admin_users;
  if (!auth_.anonymous) {
    if (bucket.owner == user_) return std::nullopt;
    if (std::find(admins.begin(), admins.end(), user_) != admins.end()) return std::nullopt;
  }
  auto policy = store_.GetBucketConfig(bucket.name, "policy");
  if (policy.ok() && policy->has_value()) {
    std::string resource = "arn:aws:s3:::" + bucket.name + (object_action ? "/" + key : "");
    std::string verdict = EvaluatePolicy(**policy, user_, auth_.anonymous, action, resource);
    if (verdict == "Allow") return std::nullopt;
  }
  return S3Error(S3Code::kAccessDenied, "Access Denied");
}

S3Result<BucketInfo> S3Api::Call::BucketFor(std::string_view action, bool object_action) {
  SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, store_.GetBucket(bucket_));
  SOVAI_S3_RETURN_IF_ERROR(Authorize(b, action, object_action, key_));
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

S3Status S3Api::Call::RefuseUnsupportedProtections(bool object) {
  const std::string acl = Header("x-amz-acl");
  if (!acl.empty() && acl != "private" && !(object && acl == "bucket-owner-full-control")) {
    return S3Error(S3Code::kNotImplemented,
                   "canned ACL '" + acl + "' is not supported: objects and buckets are private " +
                       "to their owner here; use a bucket policy to share them");
  }
  for (const auto& [name, value] : req_.headers()) {
    const std::string lower = base::AsciiToLower(name);
    if (lower.rfind("x-amz-grant-", 0) == 0) {
      return S3Error(S3Code::kNotImplemented,
                     lower + ": ACL grants are not supported; use a bucket policy");
    }
    if (lower.rfind("x-amz-server-side-encryption", 0) == 0 ||
        lower.rfind("x-amz-copy-source-server-side-encryption", 0) == 0) {
      return S3Error(S3Code::kNotImplemented,
                     lower +
                         ": server-side encryption is not supported; this server stores "
                         "objects as sent (encrypt the disk of its data directory)");
    }
    if (lower.rfind("x-amz-object-lock-", 0) == 0 ||
        (lower == "x-amz-bucket-object-lock-enabled" && !base::EqualsIgnoreCase(value, "false"))) {
      return S3Error(S3Code::kNotImplemented,
                     lower +
                         ": Object Lock (retention, legal holds) is not supported; nothing "
                         "would protect the object from deletion");
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
      return Acl(false);
    case S3Op::kGetBucketLifecycle:
      return NotConfigured("s3:GetLifecycleConfiguration",
                           S3Error(S3Code::kNoSuchLifecycleConfiguration,
                                   "The lifecycle configuration does not exist"));
    case S3Op::kGetBucketEncryption:
      return NotConfigured("s3:GetEncryptionConfiguration",
                           S3Error(S3Code::kServerSideEncryptionConfigurationNotFoundError,
                                   "The server side encryption configuration was not found"));
    case S3Op::kGetObjectLockConfiguration:
      return NotConfigured("s3:GetBucketObjectLockConfiguration",
                           S3Error(S3Code::kObjectLockConfigurationNotFoundError,
                                   "Object Lock configuration does not exist for this bucket"));
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
      return Acl(true);
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
  const auto& admins = api_.opts_.admin_users;
  bool admin = std::find(admins.begin(), admins.end(), user_) != admins.end();
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
  if (S3Status st = RefuseUnsupportedProtections(false)) return Error(*st);
  if (std::string ownership = Header("x-amz-object-ownership");
      !ownership.empty() && ownership != "BucketOwnerEnforced") {
    return Error(S3Error(S3Code::kNotImplemented,
                         "x-amz-object-ownership " + ownership +
                             " is not supported: the bucket owner owns every object "
                             "(BucketOwnerEnforced)"));
  }
  auto created = store_.CreateBucket(bucket_, user_);
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
    if (S3Status st = ValidatePolicy(*body)) return Error(*st);
    stored = *body;
  }
  if (S3Status st = store_.SetBucketConfig(bucket_, kind, stored)) return Error(*st);
  return Empty(kind == "policy" ? 204 : 200);
}

net::Response S3Api::Call::Acl(bool object) {
  const bool put = req_.method() == "PUT";
  auto b = BucketFor(put ? (object ? "s3:PutObjectAcl" : "s3:PutBucketAcl")
                         : (object ? "s3:GetObjectAcl" : "s3:GetBucketAcl"),
                     object);
  if (!b.ok()) return Error(b.error());
  if (object) {
    auto v = store_.Head(bucket_, key_,
                         Query("versionId")
                             ? std::optional<std::string>(std::string(*Query("versionId")))
                             : std::nullopt);
    if (!v.ok()) return Error(v.error());
  }
  if (put) {
    // Grants too (x-amz-grant-*); bucket-owner-full-control is what every bucket and object has.
    if (S3Status st = RefuseUnsupportedProtections(/*object=*/true)) return Error(*st);
    std::string acl = Header("x-amz-acl");
    if ((acl.empty() && req_.has_body()) ||
        (!acl.empty() && acl != "private" && acl != "bucket-owner-full-control")) {
      return Error(S3Error(S3Code::kNotImplemented,
                           "ACLs other than 'private' are not supported; use a bucket policy"));
    }
    return Empty(200);
  }
  XmlWriter w;
  w.Open("AccessControlPolicy", kS3Namespace);
  WriteIdentity(w, "Owner", b->owner);
  w.Open("AccessControlList");
  w.Open("Grant");
  WriteIdentity(w, "Grantee", b->owner);
  w.Element("Permission", "FULL_CONTROL");
  w.Close();
  w.Close();
  w.Close();
  std::string doc = w.Finish();
  // S3 types every grantee with an attribute, and clients read it unconditionally: s3cmd's
  // ACL parser (S3/ACL.py) raises KeyError without xsi:type, which broke `s3cmd info` and
  // `s3cmd cp`/`mv` (they read the source's ACL). XmlWriter writes no attributes; the text in
  // the document is escaped, so the one "<Grantee>" in it is the element opened above.
  constexpr std::string_view kGrantee = "<Grantee>";
  const size_t at = doc.find(kGrantee);
  SOVAI_CHECK(at != std::string::npos);
  doc.replace(at, kGrantee.size(),
              "<Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
              "xsi:type=\"CanonicalUser\">");
  return Xml(200, std::move(doc));
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
  auto b = BucketFor("s3:DeleteObject", false);
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
    std::optional<DeleteResult> done;
    if (!problem) {
      if (version && !IsPlausibleVersionId(*version)) {
        problem = S3Error(S3Code::kNoSuchVersion, "The specified version does not exist.");
      } else {
        auto r = store_.Delete(bucket_, o.key, version);
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

// --- Objects -------------------------------------------------------------------------------------

S3Result<StagedData> S3Api::Call::StageBody(bool allow_inline, uint64_t max_size,
                                            Checksums* verified) {
  if (!req_.content_length() && !req_.chunked()) {
    return S3Error(S3Code::kMissingContentLength,
                   "You must provide the Content-Length HTTP header.");
  }
  if (auth_.decoded_content_length && *auth_.decoded_content_length > max_size) {
    return S3Error(S3Code::kEntityTooLarge,
                   "Your proposed upload exceeds the maximum allowed size");
  }
  if (!IsStreaming(auth_.payload) && req_.content_length() && *req_.content_length() > max_size) {
    return S3Error(S3Code::kEntityTooLarge,
                   "Your proposed upload exceeds the maximum allowed size");
  }
  uint32_t bits = RequestedChecksumBits();
  PayloadReader body(req_.body(), auth_);
  auto staged =
      store_.Stage(body, {.checksums = bits, .max_size = max_size, .allow_inline = allow_inline});
  if (!staged.ok()) {
    if (body.s3_error()) return *body.s3_error();
    return staged.error();
  }
  auto reject = [&](S3Error e) -> S3Result<StagedData> {
    store_.Discard(*staged);
    return e;
  };
  auto checked = VerifyDigests(staged->md5, staged->checksums, body.trailers());
  if (!checked.ok()) return reject(checked.error());
  *verified = std::move(*checked);
  api_.stats_.bytes_stored.fetch_add(staged->size);
  return staged;
}

void S3Api::Call::WriteConditions(PutOptions* o) {
  if (auto inm = req_.header("If-None-Match")) o->if_none_match = std::string(base::Trim(*inm));
  if (auto im = req_.header("If-Match")) o->if_match = std::string(base::Trim(*im));
}

net::Response S3Api::Call::PutObject() {
  auto b = BucketFor("s3:PutObject", true);
  if (!b.ok()) return Error(b.error());
  if (S3Status st = RefuseUnsupportedProtections(true)) return Error(*st);
  auto meta = MetaFromHeaders();
  if (!meta.ok()) return Error(meta.error());
  PutOptions o;
  o.bucket = bucket_;
  o.key = key_;
  o.owner = b->owner;
  o.meta = std::move(*meta);
  WriteConditions(&o);
  Checksums verified;
  auto staged = StageBody(true, kMaxPutBytes, &verified);
  if (!staged.ok()) return Error(staged.error());
  o.checksums = verified;
  auto v = store_.Put(o, std::move(*staged));
  if (!v.ok()) return Error(v.error());
  net::Response res = Empty(200);
  res.headers.Set("ETag", v->etag);
  if (b->versioning != Versioning::kUnversioned) res.headers.Set("x-amz-version-id", v->version_id);
  AddChecksumHeaders(res, v->checksums);
  return res;
}

S3Result<ObjectVersion> S3Api::Call::CopySource(std::string_view header,
                                                std::string_view range_header, uint64_t* offset,
                                                uint64_t* length) {
  std::string_view source = base::Trim(header);
  std::optional<std::string> version;
  if (size_t q = source.find('?'); q != std::string_view::npos) {
    std::string_view query = source.substr(q + 1);
    source = source.substr(0, q);
    if (query.rfind("versionId=", 0) == 0) version = std::string(query.substr(10));
  }
  auto decoded = base::PercentDecode(source);
  if (!decoded.ok()) {
    return S3Error(S3Code::kInvalidArgument, "Invalid copy source encoding")
        .With("ArgumentName", "x-amz-copy-source");
  }
  std::string_view path = *decoded;
  if (!path.empty() && path[0] == '/') path.remove_prefix(1);
  size_t slash = path.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == path.size()) {
    return S3Error(S3Code::kInvalidArgument,
                   "Copy Source must mention the source bucket and key: "
                   "sourcebucket/sourcekey")
        .With("ArgumentName", "x-amz-copy-source");
  }
  std::string src_bucket(path.substr(0, slash));
  std::string src_key(path.substr(slash + 1));
  SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo sb, store_.GetBucket(src_bucket));
  SOVAI_S3_RETURN_IF_ERROR(
      Authorize(sb, version ? "s3:GetObjectVersion" : "s3:GetObject", true, src_key));
  if (auto expected = req_.header("x-amz-source-expected-bucket-owner");
      expected && base::Trim(*expected) != sb.owner) {
    return S3Error(S3Code::kAccessDenied,
                   "Access Denied: the source bucket's owner is not the "
                   "x-amz-source-expected-bucket-owner you specified");
  }
  SOVAI_S3_ASSIGN_OR_RETURN(ObjectVersion v, store_.Head(src_bucket, src_key, version));
  *offset = 0;
  *length = v.size;
  if (!range_header.empty()) {
    auto range = net::ParseRange(range_header, v.size);
    if (!range.ok() || !range->has_value()) {
      return S3Error(S3Code::kInvalidRange, "The requested range is not satisfiable")
          .With("RangeRequested", std::string(range_header));
    }
    *offset = (*range)->offset;
    *length = (*range)->length;
  }
  return v;
}

S3Status S3Api::Call::CheckCopySourceConditions(const ObjectVersion& src) {
  auto failed = [] {
    return S3Error(S3Code::kPreconditionFailed,
                   "At least one of the pre-conditions you specified did not hold");
  };
  auto im = req_.header("x-amz-copy-source-if-match");
  auto inm = req_.header("x-amz-copy-source-if-none-match");
  auto ims = req_.header("x-amz-copy-source-if-modified-since");
  auto ius = req_.header("x-amz-copy-source-if-unmodified-since");
  int64_t mtime_s = src.mtime_micros / base::kMicrosPerSecond;
  if (im && !EtagListMatches(*im, src.etag)) return failed();
  if (ius && !im) {
    auto t = base::ParseHttpDate(*ius);
    if (t.ok() && mtime_s > *t / base::kMicrosPerSecond) return failed();
  }
  if (inm && EtagListMatches(*inm, src.etag)) return failed();
  if (ims && !inm) {
    auto t = base::ParseHttpDate(*ims);
    if (t.ok() && mtime_s <= *t / base::kMicrosPerSecond) return failed();
  }
  return std::nullopt;
}

S3Result<StagedData> S3Api::Call::StageCopySource(const ObjectVersion& source, uint64_t offset,
                                                  uint64_t length, bool allow_inline) {
  SOVAI_S3_ASSIGN_OR_RETURN(std::unique_ptr<ObjectReader> reader,
                            store_.Open(source, offset, length));
  ObjectBody body(*reader);
  uint32_t bits = 0;
  for (const auto& f : kChecksumFields) {
    if (!(source.checksums.*f.member).empty()) bits |= f.bit;
  }
  if (auto algo = req_.header("x-amz-checksum-algorithm")) bits |= ChecksumBitOf(*algo);
  auto staged = store_.Stage(
      body, {.checksums = bits, .max_size = kMaxPutBytes, .allow_inline = allow_inline});
  if (!staged.ok() && staged.error().code == S3Code::kInvalidRequest) {
    return S3Error(S3Code::kInternalError,
                   "the copy source could not be read: " + staged.error().message);
  }
  return staged;
}

net::Response S3Api::Call::CopyObject() {
  auto b = BucketFor("s3:PutObject", true);
  if (!b.ok()) return Error(b.error());
  if (S3Status st = RefuseUnsupportedProtections(true)) return Error(*st);
  uint64_t offset = 0, length = 0;
  auto src = CopySource(Header("x-amz-copy-source"), "", &offset, &length);
  if (!src.ok()) return Error(src.error());
  if (S3Status st = CheckCopySourceConditions(*src)) return Error(*st);
  std::string directive = Header("x-amz-metadata-directive");
  if (directive.empty()) directive = "COPY";
  if (directive != "COPY" && directive != "REPLACE") {
    return Error(S3Error(S3Code::kInvalidArgument, "Unknown metadata directive.")
                     .With("ArgumentName", "x-amz-metadata-directive"));
  }
  std::string tagging_directive = Header("x-amz-tagging-directive");
  if (src->bucket == bucket_ && src->key == key_ && directive == "COPY" &&
      !req_.header("x-amz-copy-source")->empty() && !Query("versionId") &&
      tagging_directive != "REPLACE") {
    return Error(S3Error(S3Code::kInvalidRequest,
                         "This copy request is illegal because it is trying to copy an object to "
                         "itself without changing the object's metadata, storage class, website "
                         "redirect location or encryption attributes."));
  }
  PutOptions o;
  o.bucket = bucket_;
  o.key = key_;
  o.owner = b->owner;
  if (directive == "REPLACE") {
    auto meta = MetaFromHeaders();
    if (!meta.ok()) return Error(meta.error());
    o.meta = std::move(*meta);
  } else {
    o.meta = src->meta;
  }
  if (tagging_directive == "REPLACE") {
    o.meta.tags.clear();
    if (auto tagging = req_.header("x-amz-tagging")) {
      auto tags = ParseTaggingHeader(*tagging, false);
      if (!tags.ok()) return Error(tags.error());
      for (auto& t : *tags) o.meta.tags.emplace_back(std::move(t.key), std::move(t.value));
    }
  } else {
    o.meta.tags = src->meta.tags;
  }
  WriteConditions(&o);
  auto staged = StageCopySource(*src, 0, src->size, true);
  if (!staged.ok()) return Error(staged.error());
  auto v = store_.Put(o, std::move(*staged));
  if (!v.ok()) return Error(v.error());
  XmlWriter w;
  w.Open("CopyObjectResult", kS3Namespace);
  w.Element("LastModified", Iso8601(v->mtime_micros));
  w.Element("ETag", v->etag);
  for (const auto& f : kChecksumFields) {
    if (!(v->checksums.*f.member).empty()) {
      w.Element(std::string("Checksum") + f.algorithm, v->checksums.*f.member);
    }
  }
  w.Close();
  net::Response res = Xml(200, w.Finish());
  if (src->version_id != "null") res.headers.Set("x-amz-copy-source-version-id", src->version_id);
  if (b->versioning != Versioning::kUnversioned) res.headers.Set("x-amz-version-id", v->version_id);
  return res;
}

void S3Api::Call::AddObjectHeaders(net::Response& res, const ObjectVersion& v,
                                   bool versioned_bucket) {
  res.headers.Set("ETag", v.etag);
  res.headers.Set("Last-Modified", base::FormatHttpDate(v.mtime_micros));
  res.headers.Set("Accept-Ranges", "bytes");
  res.headers.Set("Content-Type",
                  v.meta.content_type.empty() ? "binary/octet-stream" : v.meta.content_type);
  auto set = [&](const char* name, const std::string& value) {
    if (!value.empty()) res.headers.Set(name, value);
  };
  set("Content-Encoding", v.meta.content_encoding);
  set("Content-Disposition", v.meta.content_disposition);
  set("Content-Language", v.meta.content_language);
  set("Cache-Control", v.meta.cache_control);
  set("Expires", v.meta.expires);
  for (const auto& [k, value] : v.meta.user) res.headers.Add("x-amz-meta-" + k, value);
  if (!v.meta.tags.empty())
    res.headers.Set("x-amz-tagging-count", std::to_string(v.meta.tags.size()));
  if (versioned_bucket || v.version_id != "null") res.headers.Set("x-amz-version-id", v.version_id);
  // response-* query parameters override (presigned download links use them).
  static constexpr std::pair<const char*, const char*> kOverrides[] = {
      {"response-content-type", "Content-Type"},
      {"response-content-language", "Content-Language"},
      {"response-expires", "Expires"},
      {"response-cache-control", "Cache-Control"},
      {"response-content-disposition", "Content-Disposition"},
      {"response-content-encoding", "Content-Encoding"},
  };
  for (const auto& [param, header] : kOverrides) {
    if (auto q = Query(param)) res.headers.Set(header, std::string(*q));
  }
}

net::Response S3Api::Call::GetObject(bool head) {
  std::optional<std::string> version;
  if (auto q = Query("versionId")) version = std::string(*q);
  auto b = BucketFor(version ? "s3:GetObjectVersion" : "s3:GetObject", true);
  if (!b.ok()) return Error(b.error());
  if (version && !IsPlausibleVersionId(*version)) {
    return Error(S3Error(S3Code::kInvalidArgument, "Invalid version id specified")
                     .With("ArgumentName", "versionId"));
  }
  auto v = store_.Head(bucket_, key_, version);
  if (!v.ok()) return Error(v.error());
  const bool versioned = b->versioning != Versioning::kUnversioned;

  // Conditions (RFC 9110 13.2.2 order).
  int64_t mtime_s = v->mtime_micros / base::kMicrosPerSecond;
  auto im = req_.header("If-Match");
  auto ius = req_.header("If-Unmodified-Since");
  auto inm = req_.header("If-None-Match");
  auto ims = req_.header("If-Modified-Since");
  auto precondition_failed = [] {
    return S3Error(S3Code::kPreconditionFailed,
                   "At least one of the pre-conditions you specified did not hold");
  };
  if (im && !EtagListMatches(*im, v->etag))
    return Error(precondition_failed().With("Condition", "If-Match"));
  if (!im && ius) {
    auto t = base::ParseHttpDate(*ius);
    if (t.ok() && mtime_s > *t / base::kMicrosPerSecond) {
      return Error(precondition_failed().With("Condition", "If-Unmodified-Since"));
    }
  }
  bool not_modified = false;
  if (inm) {
    not_modified = EtagListMatches(*inm, v->etag);
  } else if (ims) {
    auto t = base::ParseHttpDate(*ims);
    not_modified = t.ok() && mtime_s <= *t / base::kMicrosPerSecond;
  }
  if (not_modified) {
    net::Response res = net::Response::Empty(304);
    res.headers.Set("ETag", v->etag);
    res.headers.Set("Last-Modified", base::FormatHttpDate(v->mtime_micros));
    return res;
  }

  uint64_t offset = 0, length = v->size;
  int status = 200;
  net::Response res;
  if (auto pn = Query("partNumber")) {
    auto n = base::ParseUint64(*pn);
    if (!n.ok() || *n < 1 || *n > static_cast<uint64_t>(kMaxPartNumber)) {
      return Error(S3Error(S3Code::kInvalidArgument,
                           "Part number must be an integer between 1 and 10000, inclusive")
                       .With("ArgumentName", "partNumber"));
    }
    uint64_t parts = v->part_sizes.empty() ? 1 : v->part_sizes.size();
    if (*n > parts) {
      return Error(S3Error(S3Code::kInvalidPart, "The requested partnumber is not satisfiable"));
    }
    if (!v->part_sizes.empty()) {
      for (uint64_t i = 0; i + 1 < *n; ++i) offset += v->part_sizes[i];
      length = v->part_sizes[*n - 1];
      status = 206;
      res.headers.Set("Content-Range", "bytes " + std::to_string(offset) + "-" +
                                           std::to_string(offset + length - 1) + "/" +
                                           std::to_string(v->size));
    }
    res.headers.Set("x-amz-mp-parts-count", std::to_string(parts));
  } else if (auto range = req_.header("Range")) {
    auto r = net::ParseRange(*range, v->size);
    if (!r.ok()) {
      S3Error e(S3Code::kInvalidRange, "The requested range is not satisfiable");
      e.With("RangeRequested", std::string(*range))
          .With("ActualObjectSize", std::to_string(v->size));
      net::Response err = Error(e);
      err.headers.Set("Content-Range", "bytes */" + std::to_string(v->size));
      return err;
    }
    if (r->has_value()) {
      offset = (*r)->offset;
      length = (*r)->length;
      status = 206;
      res.headers.Set("Content-Range", "bytes " + std::to_string(offset) + "-" +
                                           std::to_string(offset + length - 1) + "/" +
                                           std::to_string(v->size));
    }
  }
  AddObjectHeaders(res, *v, versioned);
  if (Header("x-amz-checksum-mode") == "ENABLED" && status == 200) {
    AddChecksumHeaders(res, v->checksums);
  }
  res.status = status;
  if (head) {
    res.headers.Set("Content-Length", std::to_string(length));
    return res;
  }
  auto reader = store_.Open(*v, offset, length);
  if (!reader.ok()) return Error(reader.error());
  api_.stats_.bytes_served.fetch_add(length);
  if (v->inline_data) {
    res.body.resize(length);
    size_t got = 0;
    while (got < length) {
      auto n = (*reader)->Read(res.body.data() + got, length - got);
      if (!n.ok() || *n == 0) {
        return Error(S3Error(S3Code::kInternalError,
                             "The stored object failed its integrity check; it was not served."));
      }
      got += *n;
    }
    return res;
  }
  std::string content_type(res.headers.Get("Content-Type").value_or("binary/octet-stream"));
  std::shared_ptr<ObjectReader> shared(std::move(*reader));
  net::Response stream = net::Response::Stream(
      status, content_type,
      [shared, key = key_](net::BodyWriter& out) -> base::Status {
        // Double buffering: the next piece is read (and verified) while this one is sent, so
        // the disk and the socket work at the same time. Reads stay sequential: the next read
        // starts only once the previous one has returned.
        std::string buffers[2] = {std::string(kStreamPieceBytes, '\0'),
                                  std::string(kStreamPieceBytes, '\0')};
        auto read_into = [&shared](std::string* buffer) {
          return shared->Read(buffer->data(), buffer->size());
        };
        int current = 0;
        auto pending = std::async(std::launch::async, read_into, &buffers[current]);
        for (;;) {
          Result<size_t> n = pending.get();
          if (!n.ok()) {
            SOVAI_LOG(ERROR).With("key", key).With("error", n.status().ToString())
                << "s3: aborting a GET: stored data failed verification";
            return n.status();
          }
          if (*n == 0) return base::Status();
          const int next = 1 - current;
          pending = std::async(std::launch::async, read_into, &buffers[next]);
          // On a write error the future's destructor waits for the read in flight.
          SOVAI_RETURN_IF_ERROR(out.Write(std::string_view(buffers[current].data(), *n)));
          current = next;
        }
      },
      length);
  for (const auto& [k, value] : res.headers) {
    if (!base::EqualsIgnoreCase(k, "Content-Type")) stream.headers.Add(k, value);
  }
  return stream;
}

net::Response S3Api::Call::DeleteObject() {
  std::optional<std::string> version;
  if (auto q = Query("versionId")) version = std::string(*q);
  auto b = BucketFor(version ? "s3:DeleteObjectVersion" : "s3:DeleteObject", true);
  if (!b.ok()) return Error(b.error());
  if (version && !IsPlausibleVersionId(*version)) {
    return Error(S3Error(S3Code::kInvalidArgument, "Invalid version id specified")
                     .With("ArgumentName", "versionId"));
  }
  if (auto im = req_.header("If-Match")) {
    auto current = store_.Head(bucket_, key_, version);
    if (!current.ok()) return Error(current.error());
    if (!EtagListMatches(*im, current->etag)) {
      return Error(S3Error(S3Code::kPreconditionFailed,
                           "At least one of the pre-conditions you specified did not hold"));
    }
  }
  auto r = store_.Delete(bucket_, key_, version);
  if (!r.ok()) return Error(r.error());
  net::Response res = Empty(204);
  if (r->delete_marker) res.headers.Set("x-amz-delete-marker", "true");
  if (!r->version_id.empty() && (version || b->versioning != Versioning::kUnversioned)) {
    res.headers.Set("x-amz-version-id", r->version_id);
  }
  return res;
}

net::Response S3Api::Call::ObjectTagging() {
  const std::string_view m = req_.method();
  std::optional<std::string> version;
  if (auto q = Query("versionId")) version = std::string(*q);
  auto b = BucketFor(m == "GET"   ? "s3:GetObjectTagging"
                     : m == "PUT" ? "s3:PutObjectTagging"
                                  : "s3:DeleteObjectTagging",
                     true);
  if (!b.ok()) return Error(b.error());
  if (m == "GET") {
    auto v = store_.Head(bucket_, key_, version);
    if (!v.ok()) return Error(v.error());
    std::vector<Tag> tags;
    for (const auto& [k, value] : v->meta.tags) tags.push_back({k, value});
    net::Response res = Xml(200, RenderTagging(tags));
    if (b->versioning != Versioning::kUnversioned)
      res.headers.Set("x-amz-version-id", v->version_id);
    return res;
  }
  std::vector<std::pair<std::string, std::string>> tags;
  if (m == "PUT") {
    auto body = ReadXmlBody();
    if (!body.ok()) return Error(body.error());
    auto parsed = ParseTagging(*body, false);
    if (!parsed.ok()) return Error(parsed.error());
    for (auto& t : *parsed) tags.emplace_back(std::move(t.key), std::move(t.value));
  }
  auto v = store_.SetTags(bucket_, key_, version, std::move(tags));
  if (!v.ok()) return Error(v.error());
  net::Response res = Empty(m == "PUT" ? 200 : 204);
  if (b->versioning != Versioning::kUnversioned) res.headers.Set("x-amz-version-id", v->version_id);
  return res;
}

// --- Multipart -----------------------------------------------------------------------------------

net::Response S3Api::Call::CreateUpload() {
  auto b = BucketFor("s3:PutObject", true);
  if (!b.ok()) return Error(b.error());
  if (S3Status st = RefuseUnsupportedProtections(true)) return Error(*st);
  if (std::string type = Header("x-amz-checksum-type"); !type.empty() && type != "COMPOSITE") {
    return Error(S3Error(S3Code::kNotImplemented,
                         "x-amz-checksum-type " + type +
                             " is not supported for multipart uploads: their checksum is "
                             "COMPOSITE (a checksum of the parts' checksums)"));
  }
  auto meta = MetaFromHeaders();
  if (!meta.ok()) return Error(meta.error());
  std::string algorithm = base::AsciiToUpper(Header("x-amz-checksum-algorithm"));
  if (!algorithm.empty() && ChecksumBitOf(algorithm) == 0) {
    return Error(S3Error(S3Code::kInvalidRequest,
                         "Checksum algorithm '" + algorithm + "' is not supported"));
  }
  auto u = store_.CreateUpload(bucket_, key_, b->owner, std::move(*meta), algorithm);
  if (!u.ok()) return Error(u.error());
  XmlWriter w;
  w.Open("InitiateMultipartUploadResult", kS3Namespace);
  w.Element("Bucket", bucket_);
  w.Element("Key", key_);
  w.Element("UploadId", u->upload_id);
  w.Close();
  net::Response res = Xml(200, w.Finish());
  if (!algorithm.empty()) res.headers.Set("x-amz-checksum-algorithm", algorithm);
  return res;
}

net::Response S3Api::Call::UploadPart() {
  auto b = BucketFor("s3:PutObject", true);
  if (!b.ok()) return Error(b.error());
  if (S3Status st = RefuseUnsupportedProtections(true)) return Error(*st);
  auto id = Query("uploadId");
  auto pn = Query("partNumber");
  if (!id || !pn) {
    return Error(S3Error(S3Code::kInvalidRequest, "UploadPart needs both uploadId and partNumber"));
  }
  auto n = base::ParseUint64(*pn);
  if (!n.ok() || *n < 1 || *n > static_cast<uint64_t>(kMaxPartNumber)) {
    return Error(S3Error(S3Code::kInvalidArgument,
                         "Part number must be an integer between 1 and 10000, inclusive")
                     .With("ArgumentName", "partNumber")
                     .With("ArgumentValue", std::string(*pn)));
  }
  auto u = store_.GetUpload(bucket_, key_, std::string(*id));
  if (!u.ok()) return Error(u.error());
  if (req_.header("x-amz-copy-source")) {
    uint64_t offset = 0, length = 0;
    auto src = CopySource(Header("x-amz-copy-source"), Header("x-amz-copy-source-range"), &offset,
                          &length);
    if (!src.ok()) return Error(src.error());
    if (S3Status st = CheckCopySourceConditions(*src)) return Error(*st);
    auto staged = StageCopySource(*src, offset, length, false);
    if (!staged.ok()) return Error(staged.error());
    Checksums c = staged->checksums;
    auto part = store_.UploadPart(*u, static_cast<int>(*n), std::move(*staged), c);
    if (!part.ok()) return Error(part.error());
    XmlWriter w;
    w.Open("CopyPartResult", kS3Namespace);
    w.Element("LastModified", Iso8601(part->mtime_micros));
    w.Element("ETag", part->etag);
    w.Close();
    net::Response res = Xml(200, w.Finish());
    if (src->version_id != "null") res.headers.Set("x-amz-copy-source-version-id", src->version_id);
    return res;
  }
  Checksums verified;
  auto staged = StageBody(false, kMaxPutBytes, &verified);
  if (!staged.ok()) return Error(staged.error());
  auto part = store_.UploadPart(*u, static_cast<int>(*n), std::move(*staged), verified);
  if (!part.ok()) return Error(part.error());
  net::Response res = Empty(200);
  res.headers.Set("ETag", part->etag);
  AddChecksumHeaders(res, verified);
  res.headers.Remove("x-amz-checksum-type");
  return res;
}

net::Response S3Api::Call::CompleteUpload() {
  auto b = BucketFor("s3:PutObject", true);
  if (!b.ok()) return Error(b.error());
  const std::string upload_id(*Query("uploadId"));
  auto u = store_.GetUpload(bucket_, key_, upload_id);
  if (!u.ok() && u.error().code != S3Code::kNoSuchUpload) return Error(u.error());
  // The x-amz-checksum-* headers are the client's checksums of the object, checked against it
  // below, not of this XML body.
  auto body = ReadXmlBody(/*object_checksums=*/true);
  if (!body.ok()) return Error(body.error());
  auto parsed = ParseCompleteMultipartUpload(*body);
  if (!parsed.ok()) return Error(parsed.error());
  std::vector<CompletePart> parts;
  for (const auto& p : parsed->parts) parts.push_back({p.part_number, p.etag});
  if (!u.ok()) {
    // A retry of a completion whose answer was lost gets the same answer, as on S3: the upload
    // is gone, but the same part list names the object it made.
    auto done = store_.GetCompletedUpload(bucket_, key_, upload_id);
    if (!done.ok() || UnquoteEtag(MultipartEtag(parts)) != UnquoteEtag(done->etag)) {
      return Error(u.error());
    }
    return CompleteResult(*b, *done);
  }
  PutOptions conditions;
  conditions.key = key_;
  WriteConditions(&conditions);
  for (const auto& f : kChecksumFields) {
    if (auto h = req_.header(f.header)) conditions.expected_checksums.*f.member = base::Trim(*h);
  }
  if (auto size = req_.header("x-amz-mp-object-size")) {
    auto n = base::ParseUint64(base::Trim(*size));
    if (!n.ok()) {
      return Error(S3Error(S3Code::kInvalidArgument, "x-amz-mp-object-size must be a number")
                       .With("ArgumentName", "x-amz-mp-object-size"));
    }
    conditions.expected_size = *n;
  }
  auto v = store_.CompleteUpload(*u, parts, conditions);
  if (!v.ok()) return Error(v.error());
  return CompleteResult(*b, *v);
}

net::Response S3Api::Call::CompleteResult(const BucketInfo& bucket, const ObjectVersion& v) {
  XmlWriter w;
  w.Open("CompleteMultipartUploadResult", kS3Namespace);
  w.Element("Location", "/" + bucket_ + "/" + UrlEncodeKey(key_));
  w.Element("Bucket", bucket_);
  w.Element("Key", key_);
  w.Element("ETag", v.etag);
  for (const auto& f : kChecksumFields) {
    if (!(v.checksums.*f.member).empty()) {
      w.Element(std::string("Checksum") + f.algorithm, v.checksums.*f.member);
    }
  }
  if (!v.checksums.type.empty()) w.Element("ChecksumType", v.checksums.type);
  w.Close();
  net::Response res = Xml(200, w.Finish());
  if (bucket.versioning != Versioning::kUnversioned) {
    res.headers.Set("x-amz-version-id", v.version_id);
  }
  return res;
}

net::Response S3Api::Call::AbortUpload() {
  auto b = BucketFor("s3:AbortMultipartUpload", true);
  if (!b.ok()) return Error(b.error());
  auto u = store_.GetUpload(bucket_, key_, std::string(*Query("uploadId")));
  if (!u.ok()) return Error(u.error());
  if (S3Status st = store_.AbortUpload(*u)) return Error(*st);
  return Empty(204);
}

net::Response S3Api::Call::ListParts() {
  auto b = BucketFor("s3:ListMultipartUploadParts", true);
  if (!b.ok()) return Error(b.error());
  auto u = store_.GetUpload(bucket_, key_, std::string(*Query("uploadId")));
  if (!u.ok()) return Error(u.error());
  auto parts = store_.ListParts(*u);
  if (!parts.ok()) return Error(parts.error());
  uint64_t marker = 0;
  if (auto m = Query("part-number-marker")) marker = base::ParseUint64(*m).value_or(0);
  uint64_t max_parts = 1000;
  if (auto m = Query("max-parts"))
    max_parts = std::min<uint64_t>(base::ParseUint64(*m).value_or(1000), 1000);
  XmlWriter w;
  w.Open("ListPartsResult", kS3Namespace);
  w.Element("Bucket", bucket_);
  w.Element("Key", key_);
  w.Element("UploadId", u->upload_id);
  w.Element("PartNumberMarker", marker);
  std::vector<const PartInfo*> page;
  bool truncated = false;
  for (const auto& p : *parts) {
    if (static_cast<uint64_t>(p.part_number) <= marker) continue;
    if (page.size() == max_parts) {
      truncated = true;
      break;
    }
    page.push_back(&p);
  }
  if (!page.empty()) w.Element("NextPartNumberMarker", page.back()->part_number);
  w.Element("MaxParts", max_parts);
  w.BoolElement("IsTruncated", truncated);
  WriteIdentity(w, "Initiator", u->owner);
  WriteIdentity(w, "Owner", u->owner);
  w.Element("StorageClass", "STANDARD");
  if (!u->checksum_algorithm.empty()) w.Element("ChecksumAlgorithm", u->checksum_algorithm);
  for (const PartInfo* p : page) {
    w.Open("Part");
    w.Element("PartNumber", p->part_number);
    w.Element("LastModified", Iso8601(p->mtime_micros));
    w.Element("ETag", p->etag);
    w.Element("Size", p->size);
    for (const auto& f : kChecksumFields) {
      if (!(p->checksums.*f.member).empty()) {
        w.Element(std::string("Checksum") + f.algorithm, p->checksums.*f.member);
      }
    }
    w.Close();
  }
  w.Close();
  return Xml(200, w.Finish());
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
                     {.max_body_bytes = kMaxS3BodyBytes});
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
