// The S3 object and multipart operations of S3Api::Call (see internal/s3_call.h, s3_api.cc).
#include <algorithm>
#include <array>
#include <future>
#include <memory>

#include "base/crypto.h"
#include "base/log.h"
#include "base/strings.h"
#include "base/time.h"
#include "objstore/internal/s3_call.h"
#include "objstore/multipart_checksum.h"
#include "objstore/names.h"
#include "objstore/s3_xml.h"

namespace sovai::objstore {

using base::Result;
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

// --- Objects -------------------------------------------------------------------------------------

S3Result<StagedData> S3Api::Call::StageBody(bool allow_inline, uint64_t max_size,
                                            Checksums* verified, uint32_t extra_checksums) {
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
  uint32_t bits = RequestedChecksumBits() | extra_checksums;
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

S3Result<PutOptions> S3Api::Call::PutOptionsFromHeaders(const BucketInfo& bucket) {
  SOVAI_S3_RETURN_IF_ERROR(RefuseUnsupportedProtections(true));
  SOVAI_S3_ASSIGN_OR_RETURN(ObjectMeta meta, MetaFromHeaders());
  SOVAI_S3_ASSIGN_OR_RETURN(meta.lock, LockForNewObject());
  PutOptions o;
  o.bucket = bucket_;
  o.key = key_;
  o.meta = std::move(meta);
  SOVAI_S3_RETURN_IF_ERROR(ApplyWriteAcl(bucket, &o.owner, &o.meta));
  WriteConditions(&o);
  return o;
}

net::Response S3Api::Call::PutObject() {
  auto b = BucketFor("s3:PutObject", true);
  if (!b.ok()) return Error(b.error());
  auto options = PutOptionsFromHeaders(*b);
  if (!options.ok()) return Error(options.error());
  PutOptions& o = *options;
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
  // The copy is a new version: its lock is the request's or the bucket's, never the source's.
  auto lock = LockForNewObject();
  if (!lock.ok()) return Error(lock.error());
  o.meta.lock = *lock;
  if (S3Status st = ApplyWriteAcl(*b, &o.owner, &o.meta)) return Error(*st);
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
  if (auto refused = CheckReadConditions(*v)) return std::move(*refused);

  ReadRange range{.offset = 0, .length = v->size, .status = 200};
  net::Response res;
  if (auto refused = SelectReadRange(*v, range, res)) return std::move(*refused);
  AddObjectHeaders(res, *v, versioned);
  AddLockHeaders(res, *v);
  if (v->is_latest) AddExpirationHeader(res, *v);
  if (Header("x-amz-checksum-mode") == "ENABLED") AddReadChecksumHeaders(res, *v, range.status);
  res.status = range.status;
  if (head) {
    res.headers.Set("Content-Length", std::to_string(range.length));
    return res;
  }
  return SendObjectBytes(*v, range, std::move(res));
}

std::optional<net::Response> S3Api::Call::CheckReadConditions(const ObjectVersion& v) {
  // RFC 9110 13.2.2 order.
  int64_t mtime_s = v.mtime_micros / base::kMicrosPerSecond;
  auto im = req_.header("If-Match");
  auto ius = req_.header("If-Unmodified-Since");
  auto inm = req_.header("If-None-Match");
  auto ims = req_.header("If-Modified-Since");
  auto precondition_failed = [] {
    return S3Error(S3Code::kPreconditionFailed,
                   "At least one of the pre-conditions you specified did not hold");
  };
  if (im && !EtagListMatches(*im, v.etag))
    return Error(precondition_failed().With("Condition", "If-Match"));
  if (!im && ius) {
    auto t = base::ParseHttpDate(*ius);
    if (t.ok() && mtime_s > *t / base::kMicrosPerSecond) {
      return Error(precondition_failed().With("Condition", "If-Unmodified-Since"));
    }
  }
  bool not_modified = false;
  if (inm) {
    not_modified = EtagListMatches(*inm, v.etag);
  } else if (ims) {
    auto t = base::ParseHttpDate(*ims);
    not_modified = t.ok() && mtime_s <= *t / base::kMicrosPerSecond;
  }
  if (not_modified) {
    net::Response res = net::Response::Empty(304);
    res.headers.Set("ETag", v.etag);
    res.headers.Set("Last-Modified", base::FormatHttpDate(v.mtime_micros));
    return res;
  }
  return std::nullopt;
}

std::optional<net::Response> S3Api::Call::SelectReadRange(const ObjectVersion& v, ReadRange& range,
                                                          net::Response& res) {
  auto set_content_range = [&] {
    res.headers.Set("Content-Range", "bytes " + std::to_string(range.offset) + "-" +
                                         std::to_string(range.offset + range.length - 1) + "/" +
                                         std::to_string(v.size));
  };
  if (auto pn = Query("partNumber")) {
    auto n = base::ParseUint64(*pn);
    if (!n.ok() || *n < 1 || *n > static_cast<uint64_t>(kMaxPartNumber)) {
      return Error(S3Error(S3Code::kInvalidArgument,
                           "Part number must be an integer between 1 and 10000, inclusive")
                       .With("ArgumentName", "partNumber"));
    }
    uint64_t parts = v.part_sizes.empty() ? 1 : v.part_sizes.size();
    if (*n > parts) {
      return Error(S3Error(S3Code::kInvalidPart, "The requested partnumber is not satisfiable"));
    }
    if (!v.part_sizes.empty()) {
      for (uint64_t i = 0; i + 1 < *n; ++i) range.offset += v.part_sizes[i];
      range.length = v.part_sizes[*n - 1];
      range.status = 206;
      set_content_range();
    }
    res.headers.Set("x-amz-mp-parts-count", std::to_string(parts));
  } else if (auto header = req_.header("Range")) {
    auto r = net::ParseRange(*header, v.size);
    if (!r.ok()) {
      S3Error e(S3Code::kInvalidRange, "The requested range is not satisfiable");
      e.With("RangeRequested", std::string(*header))
          .With("ActualObjectSize", std::to_string(v.size));
      net::Response err = Error(e);
      err.headers.Set("Content-Range", "bytes */" + std::to_string(v.size));
      return err;
    }
    if (r->has_value()) {
      range.offset = (*r)->offset;
      range.length = (*r)->length;
      range.status = 206;
      set_content_range();
    }
  }
  return std::nullopt;
}

void S3Api::Call::AddReadChecksumHeaders(net::Response& res, const ObjectVersion& v, int status) {
  if (status == 200) {
    AddChecksumHeaders(res, v.checksums);
  } else if (auto pn = Query("partNumber"); pn && !v.part_checksums.empty()) {
    // A part's own checksum, as S3 answers a partNumber read of a multipart object.
    const size_t index = base::ParseUint64(*pn).value_or(1) - 1;
    if (index < v.part_checksums.size()) {
      Checksums part = v.part_checksums[index];
      part.type.clear();
      AddChecksumHeaders(res, part);
    }
  }
}

net::Response S3Api::Call::SendObjectBytes(const ObjectVersion& v, const ReadRange& range,
                                           net::Response res) {
  const uint64_t length = range.length;
  auto reader = store_.Open(v, range.offset, length);
  if (!reader.ok()) return Error(reader.error());
  api_.stats_.bytes_served.fetch_add(length);
  if (v.inline_data) {
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
      range.status, content_type,
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
  auto r = store_.Delete(bucket_, key_, version, LockGuard(version.has_value()));
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
  auto meta = MetaFromHeaders();
  if (!meta.ok()) return Error(meta.error());
  std::string algorithm = base::AsciiToUpper(Header("x-amz-checksum-algorithm"));
  auto type = CheckMultipartChecksumType(algorithm, base::Trim(Header("x-amz-checksum-type")));
  if (!type.ok()) return Error(type.error());
  auto lock = LockForNewObject();
  if (!lock.ok()) return Error(lock.error());
  meta->lock = *lock;
  std::string owner;
  if (S3Status st = ApplyWriteAcl(*b, &owner, &*meta)) return Error(*st);
  auto u = store_.CreateUpload(bucket_, key_, owner, std::move(*meta), algorithm, *type);
  if (!u.ok()) return Error(u.error());
  XmlWriter w;
  w.Open("InitiateMultipartUploadResult", kS3Namespace);
  w.Element("Bucket", bucket_);
  w.Element("Key", key_);
  w.Element("UploadId", u->upload_id);
  w.Close();
  net::Response res = Xml(200, w.Finish());
  if (!algorithm.empty()) {
    res.headers.Set("x-amz-checksum-algorithm", algorithm);
    res.headers.Set("x-amz-checksum-type", *type);
  }
  return res;
}

net::Response S3Api::Call::UploadPart() {
  auto b = BucketFor("s3:PutObject", true);
  if (!b.ok()) return Error(b.error());
  if (S3Status st = RefuseUnsupportedProtections(/*takes_acl=*/false)) return Error(*st);
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
  // The upload's algorithm is computed for every part, sent or not: the object's checksum is
  // made from the parts'.
  auto staged = StageBody(false, kMaxPutBytes, &verified, ChecksumBitOf(u->checksum_algorithm));
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
  if (S3Status st = CheckCompletedPartChecksums(*u, parsed->parts)) return Error(*st);
  auto v = store_.CompleteUpload(*u, parts, conditions);
  if (!v.ok()) return Error(v.error());
  return CompleteResult(*b, *v);
}

S3Status S3Api::Call::CheckCompletedPartChecksums(const UploadInfo& upload,
                                                  const std::vector<CompletedPart>& listed) {
  auto declared = [](const CompletedPart& p) -> std::array<const std::optional<std::string>*, 5> {
    return {&p.checksum_crc32, &p.checksum_crc32c, &p.checksum_crc64nvme, &p.checksum_sha1,
            &p.checksum_sha256};
  };
  bool any = false;
  for (const auto& p : listed) {
    for (const auto* d : declared(p)) any = any || d->has_value();
  }
  if (!any) return std::nullopt;
  SOVAI_S3_ASSIGN_OR_RETURN(std::vector<PartInfo> stored, store_.ListParts(upload));
  for (const auto& p : listed) {
    auto it = std::find_if(stored.begin(), stored.end(),
                           [&](const PartInfo& s) { return s.part_number == p.part_number; });
    if (it == stored.end()) continue;  // CompleteUpload answers InvalidPart for it
    auto sums = declared(p);
    for (size_t i = 0; i < std::size(kChecksumFields); ++i) {
      const std::string& have = it->checksums.*kChecksumFields[i].member;
      if (sums[i]->has_value() && !have.empty() && **sums[i] != have) {
        return S3Error(S3Code::kInvalidPart,
                       std::string("The ") + kChecksumFields[i].algorithm + " of part " +
                           std::to_string(p.part_number) +
                           " you listed is not the checksum of the part uploaded.")
            .With("PartNumber", std::to_string(p.part_number));
      }
    }
  }
  return std::nullopt;
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

}  // namespace sovai::objstore
