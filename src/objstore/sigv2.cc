// SigV2: the Authorization header ("AWS key:signature") and query-string (presigned) forms.
#include <algorithm>
#include <string>

#include "base/crypto.h"
#include "base/strings.h"
#include "base/time.h"
#include "objstore/internal/sigv4_internal.h"

namespace sovai::objstore::sigv4_internal {
namespace {

// The query parameters of SigV2 that belong to the canonical resource: the list of the S3
// documentation plus the ones botocore adds, so that every SDK's signature verifies.
constexpr std::string_view kV2SubResources[] = {
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "defaultObjectAcl",
    "delete",
    "inventory",
    "lifecycle",
    "location",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "partNumber",
    "policy",
    "replication",
    "requestPayment",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "restore",
    "select",
    "select-type",
    "storageClass",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versionId",
    "versioning",
    "versions",
    "website",
};

// HMAC-SHA1 (RFC 2104) over base's SHA-1, for SigV2 only.
std::string HmacSha1(std::string_view key, std::string_view data) {
  constexpr size_t kBlockBytes = 64;
  std::string k = key.size() > kBlockBytes ? base::Sha1(key) : std::string(key);
  k.resize(kBlockBytes, '\0');
  std::string inner_pad(kBlockBytes, '\0');
  std::string outer_pad(kBlockBytes, '\0');
  for (size_t i = 0; i < kBlockBytes; ++i) {
    inner_pad[i] = static_cast<char>(k[i] ^ 0x36);
    outer_pad[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  base::Sha1Hasher inner;
  inner.Update(inner_pad);
  inner.Update(data);
  std::string inner_digest = inner.Finish();
  base::Sha1Hasher outer;
  outer.Update(outer_pad);
  outer.Update(inner_digest);
  return outer.Finish();
}

// HTTP dates as clients send them: the RFC 7231 forms, plus the RFC 2822 zones "+0000" and

bool IsV2SubResource(std::string_view name) {
  return std::find(std::begin(kV2SubResources), std::end(kV2SubResources), name) !=
         std::end(kV2SubResources);
}

// "/bucket/key?acl&versionId=3": the raw path (as sent, escapes and all), the virtual-host bucket
// in front, and the sub-resources of the raw query with decoded values, sorted by name.
std::string CanonicalResourceV2(const net::Request& req, std::string_view virtual_host_bucket) {
  std::string out;
  if (!virtual_host_bucket.empty()) {
    out += '/';
    out += virtual_host_bucket;
  }
  out += req.raw_path();
  std::vector<std::pair<std::string, std::optional<std::string>>> sub;
  for (std::string_view part : base::Split(req.raw_query(), '&')) {
    size_t eq = part.find('=');
    std::string_view name = part.substr(0, eq);
    if (!IsV2SubResource(name)) continue;
    std::optional<std::string> value;
    if (eq != std::string_view::npos) {
      std::string_view raw_value = part.substr(eq + 1);
      base::Result<std::string> decoded = base::PercentDecode(raw_value);
      value = decoded.ok() ? *decoded : std::string(raw_value);
    }
    sub.emplace_back(std::string(name), std::move(value));
  }
  std::stable_sort(sub.begin(), sub.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < sub.size(); ++i) {
    out += i == 0 ? '?' : '&';
    out += sub[i].first;
    if (sub[i].second) {
      out += '=';
      out += *sub[i].second;
    }
  }
  return out;
}

std::string CanonicalAmzHeadersV2(const net::Headers& headers) {
  std::vector<std::pair<std::string, std::string>> amz;  // name, joined values
  for (const auto& [name, value] : headers) {
    std::string lower = base::AsciiToLower(name);
    if (lower.rfind("x-amz-", 0) != 0) continue;
    auto it = std::find_if(amz.begin(), amz.end(), [&](const auto& p) { return p.first == lower; });
    std::string_view trimmed = base::Trim(value);
    if (it == amz.end()) {
      amz.emplace_back(lower, std::string(trimmed));
    } else {
      it->second += ',';
      it->second += trimmed;
    }
  }
  std::sort(amz.begin(), amz.end());
  std::string out;
  for (const auto& [name, value] : amz) {
    out += name;
    out += ':';
    out += value;
    out += '\n';
  }
  return out;
}

std::string StringToSignV2(const net::Request& req, std::string_view date_line,
                           const AuthOptions& options) {
  std::string out(req.method());
  out += '\n';
  out += base::Trim(req.header("content-md5").value_or(""));
  out += '\n';
  out += base::Trim(req.header("content-type").value_or(""));
  out += '\n';
  out += date_line;
  out += '\n';
  out += CanonicalAmzHeadersV2(req.headers());
  out += CanonicalResourceV2(req, options.virtual_host_bucket);
  return out;
}

// Checks a SigV2 signature against each candidate date line (clients disagree on what goes there
// when x-amz-date is sent); fills `result` on success.
std::optional<S3Error> VerifyV2(const net::Request& req, std::string_view access_key,
                                std::string_view signature,
                                const std::vector<std::string>& date_lines,
                                const AuthOptions& options, const CredentialLookup& lookup,
                                AuthResult& result) {
  std::optional<Credential> credential = lookup(access_key);
  if (!credential) return UnknownAccessKey(access_key);
  std::string first_string_to_sign;
  bool matched = false;
  for (const std::string& date_line : date_lines) {
    std::string string_to_sign = StringToSignV2(req, date_line, options);
    std::string expected = base::Base64Encode(HmacSha1(credential->secret_key, string_to_sign));
    // No early exit, so the time does not tell which candidate matched.
    matched |= base::ConstantTimeEquals(expected, signature);
    if (first_string_to_sign.empty()) first_string_to_sign = std::move(string_to_sign);
  }
  if (!matched) {
    return S3Error(S3Code::kSignatureDoesNotMatch, std::string(kSignatureMismatchMessage))
        .With("AWSAccessKeyId", std::string(access_key))
        .With("StringToSign", first_string_to_sign)
        .With("SignatureProvided", std::string(signature));
  }
  result.anonymous = false;
  result.credential = std::move(*credential);
  return std::nullopt;
}
}  // namespace

S3Result<AuthResult> AuthenticateV2Header(const net::Request& req, std::string_view authorization,
                                          const AuthOptions& options,
                                          const CredentialLookup& lookup) {
  // "AWS AKID:base64signature"
  std::string_view rest = base::Trim(authorization.substr(4));
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == rest.size()) {
    return S3Error(S3Code::kInvalidArgument,
                   "AWS authorization header is invalid.  Expected AwsAccessKeyId:signature")
        .With("ArgumentName", "Authorization")
        .With("ArgumentValue", std::string(authorization.substr(0, 256)));
  }
  std::string_view access_key = rest.substr(0, colon);
  std::string_view signature = rest.substr(colon + 1);
  SOVAI_S3_RETURN_IF_ERROR(CheckNoSecurityToken(req));

  std::optional<std::string_view> amz_date = req.header("x-amz-date");
  std::optional<std::string_view> date = req.header("date");
  std::optional<std::string_view> time_header = amz_date ? amz_date : date;
  if (!time_header) return MissingDate();
  base::Result<int64_t> request_micros = ParseClientDate(*time_header);
  if (!request_micros.ok()) return MissingDate();
  SOVAI_S3_RETURN_IF_ERROR(CheckSkew(*time_header, *request_micros, options));

  std::vector<std::string> date_lines = {std::string(base::Trim(date.value_or("")))};
  if (amz_date && !date_lines[0].empty()) date_lines.emplace_back();

  AuthResult result;
  result.method = "SigV2-header";
  SOVAI_S3_RETURN_IF_ERROR(UnsignedHeadPayload(req, result));
  SOVAI_S3_RETURN_IF_ERROR(
      VerifyV2(req, access_key, signature, date_lines, options, lookup, result));
  return result;
}

S3Result<AuthResult> AuthenticateV2Query(const net::Request& req, const AuthOptions& options,
                                         const CredentialLookup& lookup) {
  auto access_key = req.query("AWSAccessKeyId");
  auto expires = req.query("Expires");
  auto signature_param = req.query("Signature");
  if (!access_key || !expires || !signature_param) {
    return S3Error(S3Code::kAccessDenied,
                   "Query-string authentication requires the Signature, Expires and "
                   "AWSAccessKeyId parameters");
  }
  SOVAI_S3_RETURN_IF_ERROR(CheckNoSecurityToken(req));
  base::Result<int64_t> expires_s = base::ParseInt64(*expires);
  if (!expires_s.ok() || *expires_s < 0 || *expires_s > 253402300799 /* 9999-12-31 */) {
    return S3Error(S3Code::kAccessDenied, "Invalid date (should be seconds since epoch): " +
                                              std::string(expires->substr(0, 64)));
  }
  int64_t expiry_micros = *expires_s * base::kMicrosPerSecond;
  if (options.now_unix_micros > expiry_micros) {
    return S3Error(S3Code::kAccessDenied, "Request has expired")
        .With("Expires", base::FormatRfc3339(expiry_micros, 0))
        .With("ServerTime", base::FormatRfc3339(options.now_unix_micros, 0));
  }
  // Base64 has no spaces: a '+' the client did not escape decoded as one.
  std::string signature(*signature_param);
  std::replace(signature.begin(), signature.end(), ' ', '+');

  AuthResult result;
  result.method = "SigV2-query";
  SOVAI_S3_RETURN_IF_ERROR(UnsignedHeadPayload(req, result));
  SOVAI_S3_RETURN_IF_ERROR(
      VerifyV2(req, *access_key, signature, {std::string(*expires)}, options, lookup, result));
  return result;
}

}  // namespace sovai::objstore::sigv4_internal
