// GetObjectAttributes of S3Api::Call (see internal/s3_call.h): what S3 documents for
// `GET /bucket/key?attributes` with `x-amz-object-attributes` (ETag, Checksum, ObjectParts,
// StorageClass, ObjectSize), parts paged by x-amz-max-parts / x-amz-part-number-marker.
#include "base/strings.h"
#include "base/time.h"
#include "objstore/internal/s3_call.h"

namespace sovai::objstore {

using s3_call::kChecksumFields;

namespace {

constexpr std::string_view kAttributeNames[] = {"ETag", "Checksum", "ObjectParts", "StorageClass",
                                                "ObjectSize"};
constexpr uint64_t kMaxAttributeParts = 1000;

void WriteChecksums(XmlWriter& w, const Checksums& c) {
  for (const auto& f : kChecksumFields) {
    if (!(c.*f.member).empty()) w.Element(std::string("Checksum") + f.algorithm, c.*f.member);
  }
}

}  // namespace

net::Response S3Api::Call::GetObjectAttributes() {
  std::optional<std::string> version;
  if (auto q = Query("versionId")) version = std::string(*q);
  auto b = BucketFor(version ? "s3:GetObjectVersionAttributes" : "s3:GetObjectAttributes", true);
  if (!b.ok()) return Error(b.error());
  if (version && !IsPlausibleVersionId(*version)) {
    return Error(S3Error(S3Code::kInvalidArgument, "Invalid version id specified")
                     .With("ArgumentName", "versionId"));
  }
  std::vector<std::string> wanted;
  const std::string requested = Header("x-amz-object-attributes");
  for (std::string_view name : base::Split(requested, ',')) {
    name = base::Trim(name);
    if (name.empty()) continue;
    if (std::find(std::begin(kAttributeNames), std::end(kAttributeNames), name) ==
        std::end(kAttributeNames)) {
      return Error(S3Error(S3Code::kInvalidArgument, "Invalid attribute name specified.")
                       .With("ArgumentName", "x-amz-object-attributes")
                       .With("ArgumentValue", std::string(name)));
    }
    wanted.emplace_back(name);
  }
  if (wanted.empty()) {
    return Error(S3Error(S3Code::kInvalidArgument,
                         "The x-amz-object-attributes header specifying the attributes to be "
                         "retrieved is either missing or empty")
                     .With("ArgumentName", "x-amz-object-attributes"));
  }
  uint64_t max_parts = kMaxAttributeParts, marker = 0;
  for (auto [header, slot] :
       {std::pair{"x-amz-max-parts", &max_parts}, std::pair{"x-amz-part-number-marker", &marker}}) {
    if (auto h = req_.header(header)) {
      auto n = base::ParseUint64(base::Trim(*h));
      if (!n.ok()) {
        return Error(S3Error(S3Code::kInvalidArgument, std::string(header) + " must be a number")
                         .With("ArgumentName", header));
      }
      *slot = *n;
    }
  }
  max_parts = std::min(max_parts, kMaxAttributeParts);
  auto v = store_.Head(bucket_, key_, version);
  if (!v.ok()) return Error(v.error());
  auto has = [&](std::string_view name) {
    return std::find(wanted.begin(), wanted.end(), name) != wanted.end();
  };
  XmlWriter w;
  w.Open("GetObjectAttributesResponse", kS3Namespace);
  if (has("ETag")) w.Element("ETag", UnquoteEtag(v->etag));
  if (has("Checksum") && !v->checksums.empty()) {
    w.Open("Checksum");
    WriteChecksums(w, v->checksums);
    if (!v->checksums.type.empty()) w.Element("ChecksumType", v->checksums.type);
    w.Close();
  }
  if (has("ObjectParts") && !v->part_sizes.empty()) {
    const uint64_t count = v->part_sizes.size();
    w.Open("ObjectParts");
    w.Element("PartsCount", count);
    w.Element("PartNumberMarker", marker);
    uint64_t last = marker;
    const uint64_t end = std::min(count, marker + max_parts);
    for (uint64_t n = marker + 1; n <= end; ++n) last = n;
    w.Element("NextPartNumberMarker", last);
    w.Element("MaxParts", max_parts);
    w.BoolElement("IsTruncated", end < count);
    for (uint64_t n = marker + 1; n <= end; ++n) {
      w.Open("Part");
      w.Element("PartNumber", n);
      w.Element("Size", v->part_sizes[n - 1]);
      if (n - 1 < v->part_checksums.size()) WriteChecksums(w, v->part_checksums[n - 1]);
      w.Close();
    }
    w.Close();
  }
  if (has("StorageClass")) w.Element("StorageClass", "STANDARD");
  if (has("ObjectSize")) w.Element("ObjectSize", v->size);
  w.Close();
  net::Response res = Xml(200, w.Finish());
  res.headers.Set("Last-Modified", base::FormatHttpDate(v->mtime_micros));
  if (b->versioning != Versioning::kUnversioned || v->version_id != "null") {
    res.headers.Set("x-amz-version-id", v->version_id);
  }
  return res;
}

}  // namespace sovai::objstore
