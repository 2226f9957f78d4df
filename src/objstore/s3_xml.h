// S3's XML bodies: a streaming writer for responses, the error body, and parsers for the request
// bodies the front end accepts (CreateBucket, DeleteObjects, CompleteMultipartUpload, Put*Tagging,
// PutBucketVersioning, PutBucketCors), with writers for the matching Get* results.
//
//   XmlWriter w;
//   w.Open("ListBucketResult", kS3Namespace);
//   w.Element("Name", bucket);
//   w.Element("MaxKeys", 1000);
//   w.Close();
//   std::string body = w.Finish();
//
//   SOVAI_S3_ASSIGN_OR_RETURN(DeleteRequest req, ParseDelete(body));
//
// Parsers: the body must be one well-formed UTF-8 XML 1.0 document of at most kMaxXmlBodyBytes,
// nested at most kMaxXmlDepth deep with at most kMaxXmlElements elements. DOCTYPE (and so every
// entity declaration) is refused before anything is expanded. Element names match by local name:
// a namespace prefix (<s3:Delete xmlns:s3="...">) and any xmlns are accepted. Unknown elements,
// repeated single-valued elements and text where only elements belong are MalformedXML, the
// message saying what was wrong and where. Leaf text is taken verbatim (whitespace kept) for keys,
// tag keys and values; numbers, enums and ETags are trimmed of ASCII whitespace.
//
// Thread-safety: XmlWriter is a value with no shared state; the functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "objstore/cors.h"
#include "objstore/s3_error.h"

namespace sovai::objstore {

// The namespace of every S3 response body except <Error>.
inline constexpr std::string_view kS3Namespace = "http://s3.amazonaws.com/doc/2006-03-01/";

// --- Limits of the request body parsers ---------------------------------------------------------
inline constexpr size_t kMaxXmlBodyBytes = 2 * 1024 * 1024;
// The deepest body S3 defines is 4 levels (Tagging/TagSet/Tag/Key).
inline constexpr int kMaxXmlDepth = 16;
// 10000 parts of CompleteMultipartUpload with every checksum fit.
inline constexpr size_t kMaxXmlElements = 128 * 1024;
inline constexpr size_t kMaxXmlAttributesPerElement = 16;
inline constexpr size_t kMaxDeleteObjects = 1000;
inline constexpr int kMinPartNumber = 1;
inline constexpr int kMaxPartNumber = 10000;
inline constexpr size_t kMaxObjectTags = 10;
inline constexpr size_t kMaxBucketTags = 50;
inline constexpr size_t kMaxTagKeyChars = 128;    // Unicode characters
inline constexpr size_t kMaxTagValueChars = 256;  // Unicode characters

// The integer types XmlWriter::Element formats in decimal (not bool, not char).
template <class T>
concept XmlInteger = std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, char>;

// ------------------------------------------------------------------------------------------------
// XmlWriter: `<?xml version="1.0" encoding="UTF-8"?>` then elements, no whitespace between them.
// Text is escaped (& < > always; \r as &#13; so that a parser does not fold it into \n); bytes
// XML 1.0 cannot carry (invalid UTF-8, C0 controls other than \t \n \r, U+FFFE, U+FFFF) become
// U+FFFD and set lossy(), so the output is always well-formed. A front end that must not alter
// keys checks XmlCanRepresent() first or answers with encoding-type=url. Element names are
// program constants: an invalid name, Close() without Open(), or Finish() with elements still
// open is a bug (SOVAI_CHECK).
class XmlWriter {
 public:
  XmlWriter();

  // <name> or <name xmlns="xmlns">.
  void Open(std::string_view name, std::string_view xmlns = {});
  // </name> of the innermost open element.
  void Close();
  // Escaped text inside the innermost open element, e.g. the region in
  // <LocationConstraint xmlns="...">eu-west-1</LocationConstraint>.
  void Text(std::string_view text);
  // <name>escaped text</name>.
  void Element(std::string_view name, std::string_view text);
  // <name>decimal</name> for any integer type but bool and char.
  template <XmlInteger T>
  void Element(std::string_view name, T value) {
    Element(name, std::string_view(std::to_string(value)));
  }
  // <name>true</name> or <name>false</name>. (Not an Element overload: a string literal would
  // pick it over std::string_view.)
  void BoolElement(std::string_view name, bool value);

  // True when some text had characters XML 1.0 cannot carry and was altered.
  bool lossy() const { return lossy_; }
  // The document. Every Open() must have been closed. The writer is empty afterwards.
  std::string Finish();

 private:
  void AppendText(std::string_view text);

  std::string out_;
  std::vector<std::string> open_;
  bool lossy_ = false;
};

// True when every character of `text` can appear in an XML 1.0 document (valid UTF-8 without
// C0 controls other than \t \n \r, U+FFFE or U+FFFF): XmlWriter then writes it unaltered.
bool XmlCanRepresent(std::string_view text);

// <?xml ...?><Error><Code/><Message/>[details...]<Resource/><RequestId/></Error>, no namespace
// (as S3 sends it). <Resource> is left out when `resource` is empty.
std::string RenderS3ErrorXml(const S3Error& error, std::string_view resource,
                             std::string_view request_id);

// ------------------------------------------------------------------------------------------------
// Tagging (objects and buckets).
struct Tag {
  std::string key;
  std::string value;

  bool operator==(const Tag&) const = default;
};
// S3's tag rules: at most 10 tags on an object, 50 on a bucket; keys 1..128 and values 0..256
// Unicode characters of valid UTF-8 that XML can carry (XmlCanRepresent: GetObjectTagging must
// return them unaltered); keys unique and not starting with "aws:" (any case).
// Errors: InvalidTag naming the rule and the tag. (BadRequest for too many tags on S3; we use
// InvalidTag with the same message.)
S3Status ValidateTags(const std::vector<Tag>& tags, bool for_bucket);

// <Tagging><TagSet><Tag><Key/><Value/></Tag>...</TagSet></Tagging>, then ValidateTags.
// Errors: MalformedXML (also a Tag without Key or Value); InvalidTag.
S3Result<std::vector<Tag>> ParseTagging(std::string_view xml, bool for_bucket);
// The x-amz-tagging header: "k1=v1&k2=v2", keys and values in URL query encoding ('+' is a
// space); an item without '=' is a key with an empty value; an empty header is no tags. Then
// ValidateTags. Errors: InvalidArgument for a bad %-escape; InvalidTag.
S3Result<std::vector<Tag>> ParseTaggingHeader(std::string_view header, bool for_bucket);
// The header form of `tags`, each key and value percent-encoded (UriEncode, '/' encoded too).
std::string FormatTaggingHeader(const std::vector<Tag>& tags);
// GetObjectTagging / GetBucketTagging result body (namespaced).
std::string RenderTagging(const std::vector<Tag>& tags);

// ------------------------------------------------------------------------------------------------
// CreateBucket. An empty (or all-whitespace) body is the same as no configuration.
struct CreateBucketConfiguration {
  std::string location_constraint;  // empty: the default region (us-east-1)
  std::vector<Tag> tags;            // <Tags><Tag>..., validated as bucket tags
};
// Errors: MalformedXML; NotImplemented for the directory bucket elements (Location, Bucket);
// InvalidTag as ValidateTags(tags, /*for_bucket=*/true).
S3Result<CreateBucketConfiguration> ParseCreateBucketConfiguration(std::string_view xml);

// ------------------------------------------------------------------------------------------------
// DeleteObjects.
struct ObjectToDelete {
  std::string key;                                // non-empty; validate with ValidateObjectKey
  std::string version_id;                         // empty: none (an empty element counts as none)
  std::optional<std::string> etag;                // conditional delete: If-Match, quotes stripped
  std::optional<std::string> last_modified_time;  // conditional delete, as sent (RFC 1123)
  std::optional<uint64_t> size;                   // conditional delete

  bool operator==(const ObjectToDelete&) const = default;
};
struct DeleteRequest {
  bool quiet = false;
  std::vector<ObjectToDelete> objects;  // 1..kMaxDeleteObjects, in body order

  bool operator==(const DeleteRequest&) const = default;
};
// Errors: MalformedXML (also for no objects or more than 1000, as S3 does, and an empty <Key>).
S3Result<DeleteRequest> ParseDelete(std::string_view xml);

// ------------------------------------------------------------------------------------------------
// CompleteMultipartUpload.
struct CompletedPart {
  int part_number = 0;  // kMinPartNumber..kMaxPartNumber
  std::string etag;     // surrounding quotes stripped
  std::optional<std::string> checksum_crc32;
  std::optional<std::string> checksum_crc32c;
  std::optional<std::string> checksum_crc64nvme;
  std::optional<std::string> checksum_sha1;
  std::optional<std::string> checksum_sha256;

  bool operator==(const CompletedPart&) const = default;
};
struct CompleteMultipartUpload {
  std::vector<CompletedPart> parts;  // >= 1, strictly ascending part numbers

  bool operator==(const CompleteMultipartUpload&) const = default;
};
// Errors: MalformedXML (no parts, a missing or non-integer PartNumber, a missing ETag);
// InvalidArgument for a part number below 1; InvalidPart for one above 10000; InvalidPartOrder
// when part numbers are not strictly ascending; NotImplemented for checksum algorithms we do not
// support (SHA512, MD5, XXHASH*).
S3Result<CompleteMultipartUpload> ParseCompleteMultipartUpload(std::string_view xml);

// ------------------------------------------------------------------------------------------------
// Versioning.
enum class VersioningStatus { kUnversioned, kEnabled, kSuspended };
struct VersioningConfiguration {
  VersioningStatus status = VersioningStatus::kUnversioned;
  bool mfa_delete = false;  // never true here: MFA delete is not implemented

  bool operator==(const VersioningConfiguration&) const = default;
};
// Status must be Enabled or Suspended (never kUnversioned); MfaDelete, if present, Disabled.
// Errors: MalformedXML (also a missing or other Status); NotImplemented for MfaDelete Enabled.
S3Result<VersioningConfiguration> ParseVersioningConfiguration(std::string_view xml);
// GetBucketVersioning result: no Status for kUnversioned (an empty <VersioningConfiguration/>).
std::string RenderVersioningConfiguration(const VersioningConfiguration& config);

// ------------------------------------------------------------------------------------------------
// CORS (the model and matching are in cors.h).
// Errors: MalformedXML (also a non-integer MaxAgeSeconds, a repeated ID or MaxAgeSeconds); then
// ValidateCorsConfiguration's errors.
S3Result<CorsConfiguration> ParseCorsConfiguration(std::string_view xml);
// GetBucketCors result body (namespaced).
std::string RenderCorsConfiguration(const CorsConfiguration& config);

}  // namespace sovai::objstore
