// POST Object: uploads from an HTML form (multipart/form-data) signed with a POST policy, as
// AWS documents them (docs/api/s3.md, "POST Object"). The form's fields become the headers of
// the PutObject it stands for, so an upload gets exactly a PUT's metadata, ACL, Object Lock and
// bucket-policy checks; the file part streams to the store like a PUT's body.
#include <algorithm>

#include "base/crypto.h"
#include "base/strings.h"
#include "objstore/internal/s3_call.h"
#include "objstore/limits.h"
#include "objstore/names.h"

namespace sovai::objstore {

using s3_call::kMaxPutBytes;
using s3_call::UrlEncodeKey;

namespace {

// The fields a SigV4 form carries for its signature; they never become headers.
constexpr std::string_view kSigningFields[] = {"policy",           "x-amz-algorithm",
                                               "x-amz-credential", "x-amz-date",
                                               "x-amz-signature",  "x-amz-security-token"};

// Request headers that describe the form, not the object: the fields say what the object gets.
bool DescribesObject(std::string_view lower) {
  return lower.starts_with("x-amz-") || lower.starts_with("content-") || lower == "authorization" ||
         lower == "cache-control" || lower == "expires";
}

std::optional<std::string_view> Field(const PostFields& fields, std::string_view name) {
  for (const auto& [k, v] : fields) {
    if (k == name) return v;
  }
  return std::nullopt;
}

S3Error MissingField(std::string_view name) {
  return S3Error(S3Code::kInvalidArgument,
                 "Bucket POST must contain a field named '" + std::string(name) +
                     "'. If it is specified, please check the order of the fields.")
      .With("ArgumentName", std::string(name));
}

// A failed read of the form: its own errors, or the connection's.
S3Error FormReadError(const MultipartFormReader& form, const base::Status& status) {
  if (form.form_error()) {
    if (status.code() == base::StatusCode::kResourceExhausted) {
      return S3Error(
          S3Code::kMaxPostPreDataLengthExceededError,
          "Your POST request fields preceding the upload file were too large: " + status.message());
    }
    return S3Error(S3Code::kMalformedPOSTRequest,
                   "The body of your POST request is not well-formed multipart/form-data: " +
                       status.message());
  }
  if (status.code() == base::StatusCode::kResourceExhausted) {
    return S3Error(S3Code::kEntityTooLarge,
                   "Your proposed upload exceeds the maximum allowed size");
  }
  if (status.code() == base::StatusCode::kDeadlineExceeded) {
    return S3Error(S3Code::kRequestTimeout,
                   "Your socket connection to the server was not read from or written to within "
                   "the timeout period.");
  }
  return S3Error(S3Code::kIncompleteBody, "The request body ended early: " + status.message());
}

// A file input's name as the key's ${filename}: browsers send the base name; old ones sent a
// Windows path.
std::string BaseName(std::string_view filename) {
  size_t slash = filename.find_last_of("/\\");
  return std::string(slash == std::string_view::npos ? filename : filename.substr(slash + 1));
}

std::string ReplaceAll(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

}  // namespace

S3Result<PostFields> S3Api::Call::ReadPostFields(MultipartFormReader& form,
                                                 std::optional<FormPart>* file) {
  PostFields fields;
  size_t pre_data_bytes = 0;
  for (;;) {
    auto part = form.NextPart();
    if (!part.ok()) return FormReadError(form, part.status());
    if (!part->has_value()) return fields;
    std::string name = base::AsciiToLower((*part)->name);
    if (name == "file") {
      *file = std::move(**part);
      return fields;  // fields after the file are not read, as in AWS
    }
    auto value = form.ReadPartValue(kMaxPostFieldBytes);
    if (!value.ok()) return FormReadError(form, value.status());
    pre_data_bytes += name.size() + value->size();
    if (pre_data_bytes > kMaxPostPreDataBytes) {
      return S3Error(S3Code::kMaxPostPreDataLengthExceededError,
                     "Your POST request fields preceding the upload file were too large (more "
                     "than " +
                         std::to_string(kMaxPostPreDataBytes) + " bytes)");
    }
    if (Field(fields, name)) {
      return S3Error(S3Code::kInvalidArgument, "The form field '" + name + "' is given twice")
          .With("ArgumentName", name);
    }
    fields.emplace_back(std::move(name), std::move(*value));
  }
}

S3Result<std::optional<PostPolicy>> S3Api::Call::AuthenticatePost(const PostFields& fields) {
  const auto policy_b64 = Field(fields, "policy");
  if (Field(fields, "awsaccesskeyid") || Field(fields, "signature")) {
    return S3Error(S3Code::kInvalidArgument,
                   "Signature Version 2 form uploads (AWSAccessKeyId, signature) are not "
                   "supported: sign the policy with AWS4-HMAC-SHA256")
        .With("ArgumentName", "AWSAccessKeyId");
  }
  if (!policy_b64) {
    if (Field(fields, "x-amz-signature")) return MissingField("policy");
    return std::optional<PostPolicy>();  // an anonymous upload: the bucket's ACL or policy decide
  }
  if (Field(fields, "x-amz-security-token")) {
    return S3Error(S3Code::kInvalidArgument,
                   "x-amz-security-token: session credentials are not supported; sign with an "
                   "access key")
        .With("ArgumentName", "x-amz-security-token");
  }
  for (std::string_view name :
       {"x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature"}) {
    if (!Field(fields, name)) return MissingField(name);
  }
  if (*Field(fields, "x-amz-algorithm") != "AWS4-HMAC-SHA256") {
    return S3Error(S3Code::kInvalidArgument, "x-amz-algorithm must be AWS4-HMAC-SHA256")
        .With("ArgumentName", "x-amz-algorithm");
  }
  // AK/20261202/eu-west-1/s3/aws4_request
  const std::vector<std::string_view> scope = base::Split(*Field(fields, "x-amz-credential"), '/');
  const std::string_view amz_date = *Field(fields, "x-amz-date");
  const std::string& region = api_.opts_.region;
  if (scope.size() != 5 || scope[0].empty() || scope[1].size() != 8 || scope[3] != "s3" ||
      scope[4] != "aws4_request" || (!region.empty() && scope[2] != region)) {
    return S3Error(S3Code::kInvalidArgument,
                   "x-amz-credential must be <access key>/<yyyymmdd>/" +
                       (region.empty() ? std::string("<region>") : region) + "/s3/aws4_request")
        .With("ArgumentName", "x-amz-credential");
  }
  if (amz_date.size() != 16 || !amz_date.starts_with(scope[1])) {
    return S3Error(S3Code::kInvalidArgument,
                   "x-amz-date must be the credential's day as yyyymmddThhmmssZ")
        .With("ArgumentName", "x-amz-date");
  }
  std::optional<Credential> credential = store_.LookupAccessKey(scope[0]);
  if (!credential) {
    api_.stats_.auth_failures.fetch_add(1);
    return S3Error(S3Code::kInvalidAccessKeyId,
                   "The AWS Access Key Id you provided does not exist in our records.")
        .With("AWSAccessKeyId", std::string(scope[0]));
  }
  const std::string expected = base::HexEncode(
      base::HmacSha256(SigningKeyV4(credential->secret_key, scope[1], scope[2]), *policy_b64));
  const std::string provided = base::AsciiToLower(*Field(fields, "x-amz-signature"));
  if (!base::ConstantTimeEquals(provided, expected)) {
    api_.stats_.auth_failures.fetch_add(1);
    return S3Error(S3Code::kSignatureDoesNotMatch,
                   "The request signature we calculated does not match the signature you "
                   "provided. Check your key and signing method.")
        .With("AWSAccessKeyId", std::string(scope[0]))
        .With("StringToSign", std::string(*policy_b64))
        .With("SignatureProvided", provided);
  }
  auth_ = AuthResult{};
  auth_.anonymous = false;
  auth_.credential = std::move(*credential);
  auth_.method = "SigV4-post";
  user_ = auth_.credential.user_id;
  api_.stats_.payload_modes[static_cast<int>(PayloadMode::kUnsigned)].fetch_add(1);

  if (policy_b64->size() > (kMaxPostPolicyBytes / 3 + 1) * 4) {
    return S3Error(S3Code::kInvalidPolicyDocument, "Invalid Policy: the policy is larger than " +
                                                       std::to_string(kMaxPostPolicyBytes) +
                                                       " bytes");
  }
  auto decoded = base::Base64Decode(base::Trim(*policy_b64));
  if (!decoded.ok()) {
    return S3Error(S3Code::kInvalidPolicyDocument, "Invalid Policy: the policy is not base64");
  }
  SOVAI_S3_ASSIGN_OR_RETURN(PostPolicy policy, ParsePostPolicy(*decoded));
  PostFields checked = fields;
  std::erase_if(checked, [](const auto& f) { return f.first == "bucket"; });
  checked.emplace_back("bucket", bucket_);  // the bucket posted to, whatever the form says
  SOVAI_S3_RETURN_IF_ERROR(CheckPostPolicy(policy, checked, api_.opts_.env->NowUnixMicros()));
  return std::optional<PostPolicy>(std::move(policy));
}

S3Status S3Api::Call::PostFieldsAsHeaders(const PostFields& fields) {
  net::Headers& headers = req_.mutable_headers();
  std::vector<std::string> form_headers;
  for (const auto& [name, value] : headers) {
    if (std::string lower = base::AsciiToLower(name); DescribesObject(lower)) {
      form_headers.push_back(std::move(lower));
    }
  }
  for (const std::string& name : form_headers) headers.Remove(name);
  for (const auto& [name, value] : fields) {
    if (std::find(std::begin(kSigningFields), std::end(kSigningFields), name) !=
        std::end(kSigningFields)) {
      continue;
    }
    if (name == "acl") {
      headers.Set("x-amz-acl", value);
    } else if (name == "tagging") {
      SOVAI_S3_ASSIGN_OR_RETURN(std::vector<Tag> tags, ParseTagging(value, false));
      headers.Set("x-amz-tagging", FormatTaggingHeader(tags));
    } else if (name.starts_with("x-amz-") || DescribesObject(name)) {
      headers.Set(name, value);
    }
  }
  return std::nullopt;
}

net::Response S3Api::Call::PostResult(const BucketInfo& bucket, const ObjectVersion& v,
                                      const PostFields& fields) {
  const std::string host(req_.header("Host").value_or("localhost"));
  const std::string location = std::string(req_.is_tls() ? "https://" : "http://") + host + "/" +
                               bucket_ + "/" + UrlEncodeKey(key_);
  net::Response res;
  std::string_view redirect =
      Field(fields, "success_action_redirect").value_or(Field(fields, "redirect").value_or(""));
  if (redirect.starts_with("http://") || redirect.starts_with("https://")) {
    res = Empty(303);
    res.headers.Set("Location", std::string(redirect) +
                                    (redirect.find('?') == std::string_view::npos ? "?" : "&") +
                                    "bucket=" + base::UriEncode(bucket_, true) +
                                    "&key=" + base::UriEncode(key_, true) +
                                    "&etag=" + base::UriEncode(v.etag, true));
  } else if (std::string_view status = Field(fields, "success_action_status").value_or("");
             status == "201") {
    XmlWriter w;
    w.Open("PostResponse");
    w.Element("Location", location);
    w.Element("Bucket", bucket_);
    w.Element("Key", key_);
    w.Element("ETag", v.etag);
    w.Close();
    res = Xml(201, w.Finish());
    res.headers.Set("Location", location);
  } else {
    // 204 unless 200 is asked for; any other value is ignored, as AWS ignores it.
    res = Empty(status == "200" ? 200 : 204);
    res.headers.Set("Location", location);
  }
  res.headers.Set("ETag", v.etag);
  if (bucket.versioning != Versioning::kUnversioned)
    res.headers.Set("x-amz-version-id", v.version_id);
  return res;
}

net::Response S3Api::Call::PostObject() {
  if (auto b = store_.GetBucket(bucket_); !b.ok()) return Error(b.error());
  auto boundary = FormBoundary(Header("Content-Type"));
  if (!boundary.ok()) {
    return Error(S3Error(S3Code::kMalformedPOSTRequest,
                         "The body of your POST request is not well-formed multipart/form-data: " +
                             boundary.status().message()));
  }
  // A form posted with a signed request head keeps its payload verification.
  PayloadReader payload(req_.body(), auth_);
  MultipartFormReader form(payload, *boundary);
  std::optional<FormPart> file;
  auto fields = ReadPostFields(form, &file);
  if (!fields.ok()) return Error(fields.error());
  auto policy = AuthenticatePost(*fields);
  if (!policy.ok()) return Error(policy.error());
  if (!file) {
    return Error(S3Error(S3Code::kIncorrectNumberOfFilesInPostRequest,
                         "POST requires exactly one file upload per request."));
  }
  std::string_view key = Field(*fields, "key").value_or("");
  if (key.empty()) return Error(MissingField("key"));
  key_ = ReplaceAll(std::string(key), "${filename}", BaseName(file->filename.value_or("")));
  has_key_ = true;
  if (S3Status st = ValidateObjectKey(key_)) return Error(*st);
  if (S3Status st = PostFieldsAsHeaders(*fields)) return Error(*st);
  if (S3Status st = RefuseUnknownChecksums()) return Error(*st);
  auto b = BucketFor("s3:PutObject", true);
  if (!b.ok()) return Error(b.error());
  auto options = PutOptionsFromHeaders(*b);
  if (!options.ok()) return Error(options.error());

  uint64_t min_bytes = 0, max_bytes = kMaxPutBytes;
  if (*policy && (*policy)->length_range) {
    min_bytes = (*policy)->length_range->first;
    max_bytes = std::min(max_bytes, (*policy)->length_range->second);
  }
  auto staged = store_.Stage(
      form.part_body(),
      {.checksums = RequestedChecksumBits(), .max_size = max_bytes, .allow_inline = true});
  if (!staged.ok()) {
    if (staged.error().code == S3Code::kEntityTooLarge) {
      return Error(
          S3Error(S3Code::kEntityTooLarge, "Your proposed upload exceeds the maximum allowed size")
              .With("MaxSizeAllowed", std::to_string(max_bytes)));
    }
    if (form.form_error()) {
      return Error(FormReadError(form, base::InvalidArgumentError(staged.error().message)));
    }
    return Error(staged.error());
  }
  if (staged->size < min_bytes) {
    const uint64_t size = staged->size;
    store_.Discard(*staged);
    return Error(S3Error(S3Code::kEntityTooSmall,
                         "Your proposed upload is smaller than the minimum allowed size")
                     .With("ProposedSize", std::to_string(size))
                     .With("MinSizeAllowed", std::to_string(min_bytes)));
  }
  auto verified = VerifyDigests(staged->md5, staged->checksums, {});
  if (!verified.ok()) {
    store_.Discard(*staged);
    return Error(verified.error());
  }
  options->checksums = std::move(*verified);
  api_.stats_.bytes_stored.fetch_add(staged->size);
  auto v = store_.Put(*options, std::move(*staged));
  if (!v.ok()) return Error(v.error());
  return PostResult(*b, *v, *fields);
}

}  // namespace sovai::objstore
