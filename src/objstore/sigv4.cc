#include "objstore/sigv4.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "base/strings.h"
#include "base/time.h"

namespace sovai::objstore {
namespace {

// Signing keys change once a day per access key; deriving one is four HMACs, a visible share of a
// small request's CPU. A bounded cache keyed by (secret, date, region).
std::string CachedSigningKeyV4(std::string_view secret_key, std::string_view date_stamp,
                               std::string_view region);

constexpr std::string_view kAlgorithmV4 = "AWS4-HMAC-SHA256";
constexpr std::string_view kService = "s3";
constexpr std::string_view kTerminator = "aws4_request";
constexpr std::string_view kSignatureMismatchMessage =
    "The request signature we calculated does not match the signature you provided. Check your "
    "key and signing method.";

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

std::string HexSha256(std::string_view data) { return base::HexEncode(base::Sha256(data)); }

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool IsHexSha256(std::string_view s) { return s.size() == 64 && IsLowerHex(base::AsciiToLower(s)); }

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// SigV4's Trimall: surrounding whitespace removed, inner runs collapsed to one space.
std::string TrimAll(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  bool pending_space = false;
  for (char c : value) {
    if (IsAsciiSpace(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

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
// "-0000" for "GMT" (the S3 SigV2 documentation's examples use the first, botocore's SigV4 Date
// header the second).
base::Result<int64_t> ParseClientDate(std::string_view text) {
  base::Result<int64_t> parsed = base::ParseHttpDate(text);
  if (parsed.ok()) return parsed;
  for (std::string_view zone : {std::string_view(" +0000"), std::string_view(" -0000")}) {
    if (text.size() > zone.size() && text.substr(text.size() - zone.size()) == zone) {
      std::string gmt(text.substr(0, text.size() - zone.size()));
      gmt += " GMT";
      base::Result<int64_t> retried = base::ParseHttpDate(gmt);
      if (retried.ok()) return retried;
    }
  }
  return parsed;
}

S3Error MissingDate() {
  return S3Error(S3Code::kAccessDenied,
                 "AWS authentication requires a valid Date or x-amz-date header");
}

std::optional<S3Error> CheckSkew(std::string_view request_time, int64_t request_micros,
                                 const AuthOptions& options) {
  int64_t skew_micros = options.max_skew_seconds * base::kMicrosPerSecond;
  int64_t diff = request_micros - options.now_unix_micros;
  if (diff > skew_micros || diff < -skew_micros) {
    return S3Error(S3Code::kRequestTimeTooSkewed,
                   "The difference between the request time and the server's time is too large.")
        .With("RequestTime", std::string(request_time))
        .With("ServerTime", base::FormatRfc3339(options.now_unix_micros, 0))
        .With("MaxAllowedSkewMilliseconds", std::to_string(options.max_skew_seconds * 1000));
  }
  return std::nullopt;
}

std::optional<S3Error> CheckNoSecurityToken(const net::Request& req) {
  if (req.header("x-amz-security-token") || req.query("X-Amz-Security-Token")) {
    return S3Error(S3Code::kInvalidArgument,
                   "Session credentials (X-Amz-Security-Token) are not supported by this server; "
                   "sign with a long-term access key instead.")
        .With("ArgumentName", "x-amz-security-token");
  }
  return std::nullopt;
}

// ---- SigV4 canonical forms -------------------------------------------------------------------

std::string CanonicalUri(const net::Request& req) {
  std::string uri = base::UriEncode(req.path(), /*encode_slash=*/false);
  return uri.empty() ? "/" : uri;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& params,
                           bool skip_signature) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(params.size());
  for (const auto& [name, value] : params) {
    if (skip_signature && name == "X-Amz-Signature") continue;
    encoded.emplace_back(base::UriEncode(name, true), base::UriEncode(value, true));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

std::string CanonicalRequest(std::string_view method, std::string_view canonical_uri,
                             std::string_view canonical_query, const net::Headers& headers,
                             const std::vector<std::string>& signed_headers,
                             std::string_view signed_headers_text, std::string_view payload_hash) {
  std::string out;
  out += method;
  out += '\n';
  out += canonical_uri;
  out += '\n';
  out += canonical_query;
  out += '\n';
  for (const std::string& name : signed_headers) {
    out += name;
    out += ':';
    bool first = true;
    for (std::string_view value : headers.GetAll(name)) {
      if (!first) out += ',';
      first = false;
      out += TrimAll(value);
    }
    out += '\n';
  }
  out += '\n';
  out += signed_headers_text;
  out += '\n';
  out += payload_hash;
  return out;
}

std::string StringToSignV4(std::string_view amz_date, std::string_view scope,
                           std::string_view canonical_request) {
  std::string out(kAlgorithmV4);
  out += '\n';
  out += amz_date;
  out += '\n';
  out += scope;
  out += '\n';
  out += HexSha256(canonical_request);
  return out;
}

std::string Scope(std::string_view date_stamp, std::string_view region) {
  std::string out(date_stamp);
  out += '/';
  out += region;
  out += '/';
  out += kService;
  out += '/';
  out += kTerminator;
  return out;
}

// Where a SigV4 parameter came from decides the error code and message prefix.
struct V4Source {
  S3Code code;
  std::string_view prefix;
};
constexpr V4Source kFromHeader{S3Code::kAuthorizationHeaderMalformed,
                               "The authorization header is malformed; "};
constexpr V4Source kFromQuery{S3Code::kAuthorizationQueryParametersError,
                              "Error parsing the X-Amz-Credential parameter; "};
constexpr V4Source kFromQuerySignedHeaders{S3Code::kAuthorizationQueryParametersError,
                                           "Error parsing the X-Amz-SignedHeaders parameter; "};

S3Error Malformed(const V4Source& source, std::string_view what) {
  return S3Error(source.code, std::string(source.prefix) + std::string(what));
}

struct CredentialScope {
  std::string access_key;
  std::string date_stamp;
  std::string region;
};

// "AKID/20130524/us-east-1/s3/aws4_request".
S3Result<CredentialScope> ParseCredential(std::string_view text, const V4Source& source) {
  std::vector<std::string_view> parts = base::Split(text, '/');
  if (parts.size() < 5) {
    return Malformed(source,
                     "the Credential is mal-formed; expecting "
                     "\"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\".");
  }
  size_t n = parts.size();
  CredentialScope scope;
  std::vector<std::string_view> key_parts(parts.begin(), parts.end() - 4);
  scope.access_key = base::Join(key_parts, "/");
  scope.date_stamp = std::string(parts[n - 4]);
  scope.region = std::string(parts[n - 3]);
  std::string_view service = parts[n - 2];
  std::string_view terminator = parts[n - 1];
  if (scope.access_key.empty()) {
    return Malformed(source, "the Credential has no access key.");
  }
  if (scope.date_stamp.size() != 8 || !base::ParseDateStamp(scope.date_stamp).ok()) {
    return Malformed(source, "incorrect date format \"" + scope.date_stamp +
                                 "\". This date in the credential must be in the format "
                                 "\"yyyyMMdd\".");
  }
  if (scope.region.empty()) return Malformed(source, "the Credential has an empty region.");
  if (service != kService) {
    return Malformed(source, "incorrect service \"" + std::string(service) +
                                 "\". This endpoint belongs to \"s3\".");
  }
  if (terminator != kTerminator) {
    return Malformed(source, "incorrect terminal \"" + std::string(terminator) +
                                 "\". This endpoint uses \"aws4_request\".");
  }
  return scope;
}

std::optional<S3Error> CheckScope(const CredentialScope& scope, std::string_view amz_date,
                                  const AuthOptions& options, const V4Source& source) {
  if (amz_date.substr(0, 8) != scope.date_stamp) {
    return Malformed(source, "Invalid credential date \"" + scope.date_stamp +
                                 "\". This date is not the same as X-Amz-Date: \"" +
                                 std::string(amz_date.substr(0, 8)) + "\".");
  }
  if (!options.region.empty() && scope.region != options.region) {
    return Malformed(source, "the region '" + scope.region + "' is wrong; expecting '" +
                                 options.region + "'")
        .With("Region", options.region);
  }
  return std::nullopt;
}

// "host;range;x-amz-date": lowercase names, host among them.
S3Result<std::vector<std::string>> ParseSignedHeaders(std::string_view text,
                                                      const V4Source& source) {
  std::vector<std::string> names;
  for (std::string_view name : base::Split(text, ';')) {
    if (name.empty() || base::AsciiToLower(name) != name) {
      return Malformed(source,
                       "SignedHeaders must be lowercase header names separated by ';', "
                       "got \"" +
                           std::string(text.substr(0, 256)) + "\".");
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      return Malformed(source, "SignedHeaders names \"" + std::string(name) + "\" twice.");
    }
    names.emplace_back(name);
    if (names.size() > kMaxSignedHeaders) {
      return Malformed(source, "SignedHeaders lists more than " +
                                   std::to_string(kMaxSignedHeaders) + " headers.");
    }
  }
  if (std::find(names.begin(), names.end(), "host") == names.end()) {
    return Malformed(source, "SignedHeaders must include \"host\".");
  }
  return names;
}

// Every x-amz-* header of the request must be signed, or a captured request could be replayed
// with, say, x-amz-acl added. x-amz-content-sha256 and x-amz-date are in the string to sign.
std::optional<S3Error> CheckAmzHeadersSigned(const net::Request& req,
                                             const std::vector<std::string>& signed_headers) {
  std::vector<std::string> unsigned_names;
  for (const auto& [name, value] : req.headers()) {
    std::string lower = base::AsciiToLower(name);
    if (lower.rfind("x-amz-", 0) != 0) continue;
    if (lower == "x-amz-content-sha256" || lower == "x-amz-date") continue;
    if (std::find(signed_headers.begin(), signed_headers.end(), lower) != signed_headers.end()) {
      continue;
    }
    if (std::find(unsigned_names.begin(), unsigned_names.end(), lower) == unsigned_names.end()) {
      unsigned_names.push_back(lower);
    }
  }
  if (unsigned_names.empty()) return std::nullopt;
  return S3Error(S3Code::kAccessDenied,
                 "There were headers present in the request which were not signed")
      .With("HeadersNotSigned", base::Join(unsigned_names, ", "));
}

std::optional<PayloadMode> ClassifyContentSha256(std::string_view value) {
  if (value == kUnsignedPayload) return PayloadMode::kUnsigned;
  if (value == kStreamingSignedPayload) return PayloadMode::kStreamingSigned;
  if (value == kStreamingSignedPayloadTrailer) return PayloadMode::kStreamingSignedTrailer;
  if (value == kStreamingUnsignedPayloadTrailer) return PayloadMode::kStreamingUnsignedTrailer;
  if (IsHexSha256(value)) return PayloadMode::kSignedSha256;
  return std::nullopt;
}

S3Error BadContentSha256(std::string_view value) {
  return S3Error(S3Code::kInvalidArgument,
                 "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, "
                 "STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER], "
                 "STREAMING-UNSIGNED-PAYLOAD-TRAILER or the hex SHA-256 of the body")
      .With("ArgumentName", "x-amz-content-sha256")
      .With("ArgumentValue", std::string(value.substr(0, 256)));
}

// x-amz-decoded-content-length and x-amz-trailer, for the streaming modes.
std::optional<S3Error> ParseStreamingHeaders(const net::Request& req, AuthResult& result) {
  if (auto length = req.header("x-amz-decoded-content-length")) {
    base::Result<uint64_t> parsed = base::ParseUint64(*length);
    if (!parsed.ok()) {
      return S3Error(S3Code::kInvalidArgument,
                     "x-amz-decoded-content-length must be a decimal byte count")
          .With("ArgumentName", "x-amz-decoded-content-length")
          .With("ArgumentValue", std::string(length->substr(0, 64)));
    }
    result.decoded_content_length = *parsed;
  }
  for (std::string_view value : req.headers().GetAll("x-amz-trailer")) {
    for (std::string_view name : base::Split(value, ',')) {
      name = base::Trim(name);
      if (name.empty()) continue;
      if (result.trailer_names.size() == kMaxDeclaredTrailers) {
        return S3Error(S3Code::kInvalidArgument, "x-amz-trailer names more than " +
                                                     std::to_string(kMaxDeclaredTrailers) +
                                                     " trailers")
            .With("ArgumentName", "x-amz-trailer");
      }
      result.trailer_names.push_back(base::AsciiToLower(name));
    }
  }
  return std::nullopt;
}

// The payload of a request whose head signature does not cover the body (anonymous, SigV2,
// presigned): x-amz-content-sha256, when sent, still says how the body is framed, and a hash in
// it is checked for integrity.
std::optional<S3Error> UnsignedHeadPayload(const net::Request& req, AuthResult& result) {
  std::optional<std::string_view> value = req.header("x-amz-content-sha256");
  if (!value) return std::nullopt;
  std::optional<PayloadMode> mode = ClassifyContentSha256(*value);
  if (!mode) return std::nullopt;  // not ours to judge: the head signature does not cover it
  switch (*mode) {
    case PayloadMode::kStreamingSigned:
    case PayloadMode::kStreamingSignedTrailer:
      return S3Error(S3Code::kInvalidRequest,
                     std::string(*value) +
                         " needs a SigV4 Authorization header: chunk signatures chain from it");
    case PayloadMode::kSignedSha256:
      result.payload = PayloadMode::kSignedSha256;
      result.payload_sha256_hex = base::AsciiToLower(*value);
      return std::nullopt;
    case PayloadMode::kStreamingUnsignedTrailer:
      result.payload = PayloadMode::kStreamingUnsignedTrailer;
      return ParseStreamingHeaders(req, result);
    case PayloadMode::kUnsigned:
      return std::nullopt;
  }
  return std::nullopt;
}

S3Error UnknownAccessKey(std::string_view access_key) {
  return S3Error(S3Code::kInvalidAccessKeyId,
                 "The AWS Access Key Id you provided does not exist in our records.")
      .With("AWSAccessKeyId", std::string(access_key));
}

// ---- SigV4 -----------------------------------------------------------------------------------

struct V4Request {
  CredentialScope scope;
  std::vector<std::string> signed_headers;
  std::string signed_headers_text;
  std::string signature;
  std::string amz_date;
};

// Verifies the signature once the parts are known; fills the SigV4 fields of `result`.
std::optional<S3Error> VerifyV4(const net::Request& req, const V4Request& v4,
                                std::string_view canonical_query, std::string_view payload_hash,
                                const CredentialLookup& lookup, AuthResult& result) {
  std::optional<Credential> credential = lookup(v4.scope.access_key);
  if (!credential) return UnknownAccessKey(v4.scope.access_key);
  std::string canonical =
      CanonicalRequest(req.method(), CanonicalUri(req), canonical_query, req.headers(),
                       v4.signed_headers, v4.signed_headers_text, payload_hash);
  std::string scope = Scope(v4.scope.date_stamp, v4.scope.region);
  std::string string_to_sign = StringToSignV4(v4.amz_date, scope, canonical);
  std::string key =
      CachedSigningKeyV4(credential->secret_key, v4.scope.date_stamp, v4.scope.region);
  std::string expected = base::HexEncode(base::HmacSha256(key, string_to_sign));
  if (!base::ConstantTimeEquals(expected, v4.signature)) {
    return S3Error(S3Code::kSignatureDoesNotMatch, std::string(kSignatureMismatchMessage))
        .With("AWSAccessKeyId", v4.scope.access_key)
        .With("StringToSign", string_to_sign)
        .With("SignatureProvided", v4.signature)
        .With("CanonicalRequest", canonical);
  }
  result.anonymous = false;
  result.credential = std::move(*credential);
  result.seed_signature = expected;
  result.signing_key = std::move(key);
  result.amz_date = v4.amz_date;
  result.scope = std::move(scope);
  return std::nullopt;
}

S3Result<AuthResult> AuthenticateV4Header(const net::Request& req, std::string_view authorization,
                                          const AuthOptions& options,
                                          const CredentialLookup& lookup) {
  // "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..."
  std::string_view rest = authorization.substr(kAlgorithmV4.size());
  if (rest.empty() || (rest.front() != ' ' && rest.front() != '\t')) {
    return Malformed(kFromHeader,
                     "expecting \"AWS4-HMAC-SHA256 Credential=..., "
                     "SignedHeaders=..., Signature=...\".");
  }
  std::optional<std::string_view> credential_text, signed_text, signature_text;
  for (std::string_view part : base::Split(rest, ',')) {
    part = base::Trim(part);
    size_t eq = part.find('=');
    if (eq == std::string_view::npos) {
      return Malformed(kFromHeader, "expecting \"<key>=<value>\" but found \"" +
                                        std::string(part.substr(0, 128)) + "\".");
    }
    std::string_view key = part.substr(0, eq);
    std::string_view value = part.substr(eq + 1);
    std::optional<std::string_view>* slot = key == "Credential"      ? &credential_text
                                            : key == "SignedHeaders" ? &signed_text
                                            : key == "Signature"     ? &signature_text
                                                                     : nullptr;
    if (slot == nullptr) {
      return Malformed(kFromHeader,
                       "unknown component \"" + std::string(key.substr(0, 64)) + "\".");
    }
    if (slot->has_value()) {
      return Malformed(kFromHeader, "\"" + std::string(key) + "\" appears twice.");
    }
    *slot = value;
  }
  if (!credential_text || !signed_text || !signature_text) {
    return Malformed(kFromHeader, "it must contain Credential, SignedHeaders and Signature.");
  }
  V4Request v4;
  SOVAI_S3_ASSIGN_OR_RETURN(v4.scope, ParseCredential(*credential_text, kFromHeader));
  SOVAI_S3_ASSIGN_OR_RETURN(v4.signed_headers, ParseSignedHeaders(*signed_text, kFromHeader));
  v4.signed_headers_text = std::string(*signed_text);
  v4.signature = std::string(*signature_text);
  SOVAI_S3_RETURN_IF_ERROR(CheckNoSecurityToken(req));

  // The date: x-amz-date, else Date.
  int64_t request_micros = 0;
  std::string request_time;
  if (auto amz_date = req.header("x-amz-date")) {
    base::Result<int64_t> parsed = base::ParseAmzDate(*amz_date);
    if (!parsed.ok()) return MissingDate();
    request_micros = *parsed;
    request_time = std::string(*amz_date);
    v4.amz_date = std::string(*amz_date);
  } else if (auto date = req.header("date")) {
    base::Result<int64_t> parsed = ParseClientDate(*date);
    if (!parsed.ok()) return MissingDate();
    request_micros = *parsed;
    request_time = std::string(*date);
    v4.amz_date = base::FormatAmzDate(*parsed);
  } else {
    return MissingDate();
  }
  SOVAI_S3_RETURN_IF_ERROR(CheckSkew(request_time, request_micros, options));
  SOVAI_S3_RETURN_IF_ERROR(CheckScope(v4.scope, v4.amz_date, options, kFromHeader));

  AuthResult result;
  result.method = "SigV4-header";
  std::optional<std::string_view> content_sha256 = req.header("x-amz-content-sha256");
  if (!content_sha256) {
    return S3Error(S3Code::kMissingSecurityHeader,
                   "Your request was missing a required header: x-amz-content-sha256 (the hex "
                   "SHA-256 of the body, or UNSIGNED-PAYLOAD).")
        .With("MissingHeaderName", "x-amz-content-sha256");
  }
  std::optional<PayloadMode> mode = ClassifyContentSha256(*content_sha256);
  if (!mode) return BadContentSha256(*content_sha256);
  result.payload = *mode;
  if (*mode == PayloadMode::kSignedSha256) {
    result.payload_sha256_hex = base::AsciiToLower(*content_sha256);
  }
  if (IsStreaming(*mode)) SOVAI_S3_RETURN_IF_ERROR(ParseStreamingHeaders(req, result));
  SOVAI_S3_RETURN_IF_ERROR(CheckAmzHeadersSigned(req, v4.signed_headers));

  SOVAI_S3_RETURN_IF_ERROR(VerifyV4(req, v4, CanonicalQuery(req.query_params(), false),
                                    *content_sha256, lookup, result));
  return result;
}

S3Result<AuthResult> AuthenticateV4Query(const net::Request& req, const AuthOptions& options,
                                         const CredentialLookup& lookup) {
  auto algorithm = req.query("X-Amz-Algorithm");
  auto credential = req.query("X-Amz-Credential");
  auto date = req.query("X-Amz-Date");
  auto expires = req.query("X-Amz-Expires");
  auto signed_headers = req.query("X-Amz-SignedHeaders");
  auto signature = req.query("X-Amz-Signature");
  if (!algorithm || !credential || !date || !expires || !signed_headers || !signature) {
    return S3Error(S3Code::kAuthorizationQueryParametersError,
                   "Query-string authentication version 4 requires the X-Amz-Algorithm, "
                   "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and "
                   "X-Amz-Expires parameters.");
  }
  if (*algorithm != kAlgorithmV4) {
    return S3Error(S3Code::kAuthorizationQueryParametersError,
                   "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"");
  }
  V4Request v4;
  SOVAI_S3_ASSIGN_OR_RETURN(v4.scope, ParseCredential(*credential, kFromQuery));
  SOVAI_S3_ASSIGN_OR_RETURN(v4.signed_headers,
                            ParseSignedHeaders(*signed_headers, kFromQuerySignedHeaders));
  v4.signed_headers_text = std::string(*signed_headers);
  v4.signature = std::string(*signature);
  v4.amz_date = std::string(*date);
  SOVAI_S3_RETURN_IF_ERROR(CheckNoSecurityToken(req));

  base::Result<int64_t> date_micros = base::ParseAmzDate(*date);
  if (!date_micros.ok()) {
    return S3Error(S3Code::kAuthorizationQueryParametersError,
                   "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"");
  }
  base::Result<int64_t> expires_s = base::ParseInt64(*expires);
  if (!expires_s.ok()) {
    return S3Error(S3Code::kAuthorizationQueryParametersError, "X-Amz-Expires should be a number");
  }
  if (*expires_s < 0) {
    return S3Error(S3Code::kAuthorizationQueryParametersError,
                   "X-Amz-Expires must be non-negative");
  }
  if (*expires_s > kMaxPresignExpiresSeconds) {
    return S3Error(S3Code::kAuthorizationQueryParametersError,
                   "X-Amz-Expires must be less than a week (in seconds) that is 604800");
  }
  if (*date_micros - options.now_unix_micros > options.max_skew_seconds * base::kMicrosPerSecond) {
    return S3Error(S3Code::kAccessDenied, "Request is not valid yet")
        .With("X-Amz-Date", std::string(*date))
        .With("ServerTime", base::FormatRfc3339(options.now_unix_micros, 0));
  }
  int64_t expiry_micros = *date_micros + *expires_s * base::kMicrosPerSecond;
  if (options.now_unix_micros > expiry_micros) {
    return S3Error(S3Code::kAccessDenied, "Request has expired")
        .With("X-Amz-Expires", std::string(*expires))
        .With("Expires", base::FormatRfc3339(expiry_micros, 0))
        .With("ServerTime", base::FormatRfc3339(options.now_unix_micros, 0));
  }
  SOVAI_S3_RETURN_IF_ERROR(CheckScope(v4.scope, v4.amz_date, options, kFromQuery));

  AuthResult result;
  result.method = "SigV4-query";
  // The payload: UNSIGNED-PAYLOAD unless the URL itself carries a hash.
  std::string payload_hash(kUnsignedPayload);
  if (auto query_hash = req.query("X-Amz-Content-Sha256")) {
    std::optional<PayloadMode> mode = ClassifyContentSha256(*query_hash);
    if (mode != PayloadMode::kUnsigned && mode != PayloadMode::kSignedSha256) {
      return BadContentSha256(*query_hash);
    }
    payload_hash = std::string(*query_hash);
    if (mode == PayloadMode::kSignedSha256) {
      result.payload = PayloadMode::kSignedSha256;
      result.payload_sha256_hex = base::AsciiToLower(*query_hash);
    }
  } else {
    SOVAI_S3_RETURN_IF_ERROR(UnsignedHeadPayload(req, result));
  }
  SOVAI_S3_RETURN_IF_ERROR(CheckAmzHeadersSigned(req, v4.signed_headers));

  SOVAI_S3_RETURN_IF_ERROR(
      VerifyV4(req, v4, CanonicalQuery(req.query_params(), true), payload_hash, lookup, result));
  return result;
}

// ---- SigV2 -----------------------------------------------------------------------------------

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

}  // namespace

// ---- Authenticate ----------------------------------------------------------------------------

S3Result<AuthResult> Authenticate(const net::Request& req, const AuthOptions& options,
                                  const CredentialLookup& lookup) {
  std::optional<std::string_view> authorization = req.header("authorization");
  bool v4_query =
      req.query("X-Amz-Algorithm") || req.query("X-Amz-Credential") || req.query("X-Amz-Signature");
  bool v2_query = req.query("AWSAccessKeyId") || req.query("Signature");
  int mechanisms = (authorization ? 1 : 0) + (v4_query ? 1 : 0) + (v2_query ? 1 : 0);
  if (mechanisms > 1) {
    return S3Error(S3Code::kInvalidArgument,
                   "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
                   "Signature query string parameter or the Authorization header should be "
                   "specified")
        .With("ArgumentName", "Authorization");
  }
  if (authorization) {
    std::string_view value = *authorization;
    if (value.substr(0, kAlgorithmV4.size()) == kAlgorithmV4) {
      return AuthenticateV4Header(req, value, options, lookup);
    }
    if (value.substr(0, 4) == "AWS ") return AuthenticateV2Header(req, value, options, lookup);
    return S3Error(S3Code::kInvalidArgument,
                   "Unsupported Authorization Type: use AWS4-HMAC-SHA256 (Signature Version 4) "
                   "or AWS (Signature Version 2)")
        .With("ArgumentName", "Authorization")
        .With("ArgumentValue", std::string(value.substr(0, value.find(' '))).substr(0, 64));
  }
  if (v4_query) return AuthenticateV4Query(req, options, lookup);
  if (v2_query) return AuthenticateV2Query(req, options, lookup);

  AuthResult result;  // anonymous
  SOVAI_S3_RETURN_IF_ERROR(UnsignedHeadPayload(req, result));
  return result;
}

// ---- Signing ---------------------------------------------------------------------------------

namespace {

std::string CachedSigningKeyV4(std::string_view secret_key, std::string_view date_stamp,
                               std::string_view region) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::string> cache;  // guarded by mu
  std::string id =
      std::string(secret_key) + '\0' + std::string(date_stamp) + '\0' + std::string(region);
  {
    std::lock_guard lock(mu);
    if (auto it = cache.find(id); it != cache.end()) return it->second;
  }
  std::string key = SigningKeyV4(secret_key, date_stamp, region);
  std::lock_guard lock(mu);
  if (cache.size() >= 4096) cache.clear();  // old dates and revoked keys age out
  cache.emplace(std::move(id), key);
  return key;
}

}  // namespace

std::string SigningKeyV4(std::string_view secret_key, std::string_view date_stamp,
                         std::string_view region) {
  std::string key = "AWS4";
  key += secret_key;
  std::string date_key = base::HmacSha256(key, date_stamp);
  std::string region_key = base::HmacSha256(date_key, region);
  std::string service_key = base::HmacSha256(region_key, kService);
  return base::HmacSha256(service_key, kTerminator);
}

std::string ChunkSignatureV4(std::string_view signing_key, std::string_view amz_date,
                             std::string_view scope, std::string_view previous_signature,
                             std::string_view chunk_sha256_hex) {
  std::string string_to_sign = "AWS4-HMAC-SHA256-PAYLOAD\n";
  string_to_sign += amz_date;
  string_to_sign += '\n';
  string_to_sign += scope;
  string_to_sign += '\n';
  string_to_sign += previous_signature;
  string_to_sign += '\n';
  string_to_sign += kEmptySha256Hex;
  string_to_sign += '\n';
  string_to_sign += chunk_sha256_hex;
  return base::HexEncode(base::HmacSha256(signing_key, string_to_sign));
}

std::string TrailerSignatureV4(std::string_view signing_key, std::string_view amz_date,
                               std::string_view scope, std::string_view previous_signature,
                               std::string_view canonical_trailers) {
  std::string string_to_sign = "AWS4-HMAC-SHA256-TRAILER\n";
  string_to_sign += amz_date;
  string_to_sign += '\n';
  string_to_sign += scope;
  string_to_sign += '\n';
  string_to_sign += previous_signature;
  string_to_sign += '\n';
  string_to_sign += HexSha256(canonical_trailers);
  return base::HexEncode(base::HmacSha256(signing_key, string_to_sign));
}

base::Result<std::string> SignV4(std::string_view method, std::string_view target,
                                 net::Headers& headers, const Credential& credential,
                                 std::string_view region, int64_t now_unix_micros,
                                 std::string_view payload_hash,
                                 const std::vector<std::string>& extra_signed_headers) {
  net::Request req;
  req.set_method(std::string(method));
  SOVAI_RETURN_IF_ERROR(req.SetTarget(target));
  if (!headers.Has("host")) return base::InvalidArgumentError("SignV4: no Host header to sign");
  std::string amz_date = base::FormatAmzDate(now_unix_micros);
  std::string date_stamp = amz_date.substr(0, 8);
  headers.Remove("authorization");
  headers.Set("x-amz-date", amz_date);
  headers.Set("x-amz-content-sha256", std::string(payload_hash));

  std::vector<std::string> extras;
  for (const std::string& name : extra_signed_headers) extras.push_back(base::AsciiToLower(name));
  std::vector<std::string> signed_headers;
  for (const auto& [name, value] : headers) {
    std::string lower = base::AsciiToLower(name);
    bool sign = lower == "host" || lower == "content-md5" || lower == "content-type" ||
                lower.rfind("x-amz-", 0) == 0 ||
                std::find(extras.begin(), extras.end(), lower) != extras.end();
    if (sign) signed_headers.push_back(lower);
    req.mutable_headers().Add(name, value);
  }
  std::sort(signed_headers.begin(), signed_headers.end());
  signed_headers.erase(std::unique(signed_headers.begin(), signed_headers.end()),
                       signed_headers.end());
  std::string signed_text = base::Join(signed_headers, ";");

  std::string canonical =
      CanonicalRequest(req.method(), CanonicalUri(req), CanonicalQuery(req.query_params(), false),
                       req.headers(), signed_headers, signed_text, payload_hash);
  std::string scope = Scope(date_stamp, region);
  std::string key = SigningKeyV4(credential.secret_key, date_stamp, region);
  std::string signature =
      base::HexEncode(base::HmacSha256(key, StringToSignV4(amz_date, scope, canonical)));
  headers.Set("Authorization", std::string(kAlgorithmV4) + " Credential=" + credential.access_key +
                                   "/" + scope + ", SignedHeaders=" + signed_text +
                                   ", Signature=" + signature);
  return signature;
}

base::Result<std::string> PresignV4(const PresignRequest& request, const Credential& credential,
                                    std::string_view region, int64_t now_unix_micros) {
  if (request.host.empty()) return base::InvalidArgumentError("PresignV4: empty host");
  if (request.path.empty() || request.path.front() != '/') {
    return base::InvalidArgumentError("PresignV4: the path must start with '/': '" +
                                      request.path.substr(0, 256) + "'");
  }
  if (request.expires_seconds < 1 || request.expires_seconds > kMaxPresignExpiresSeconds) {
    return base::InvalidArgumentError("PresignV4: expires_seconds must be in 1..604800, got " +
                                      std::to_string(request.expires_seconds));
  }
  std::string amz_date = base::FormatAmzDate(now_unix_micros);
  std::string date_stamp = amz_date.substr(0, 8);
  std::string scope = Scope(date_stamp, region);

  std::vector<std::pair<std::string, std::string>> params = request.query;
  params.emplace_back("X-Amz-Algorithm", std::string(kAlgorithmV4));
  params.emplace_back("X-Amz-Credential", credential.access_key + "/" + scope);
  params.emplace_back("X-Amz-Date", amz_date);
  params.emplace_back("X-Amz-Expires", std::to_string(request.expires_seconds));
  params.emplace_back("X-Amz-SignedHeaders", "host");

  net::Headers headers;
  headers.Add("host", request.host);
  std::string uri = base::UriEncode(request.path, /*encode_slash=*/false);
  std::string canonical = CanonicalRequest(request.method, uri, CanonicalQuery(params, false),
                                           headers, {"host"}, "host", kUnsignedPayload);
  std::string key = SigningKeyV4(credential.secret_key, date_stamp, region);
  std::string signature =
      base::HexEncode(base::HmacSha256(key, StringToSignV4(amz_date, scope, canonical)));

  std::string target = uri;
  char sep = '?';
  for (const auto& [name, value] : params) {
    target += sep;
    sep = '&';
    target += base::UriEncode(name, true);
    target += '=';
    target += base::UriEncode(value, true);
  }
  target += "&X-Amz-Signature=";
  target += signature;
  return target;
}

// ---- PayloadReader ---------------------------------------------------------------------------

namespace {

S3Error MalformedChunked(std::string_view what) {
  return S3Error(S3Code::kInvalidRequest, "malformed aws-chunked encoding: " + std::string(what));
}

}  // namespace

PayloadReader::PayloadReader(net::BodyReader& raw, const AuthResult& auth)
    : raw_(raw), auth_(auth), previous_signature_(auth.seed_signature) {
  if (IsStreaming(auth_.payload)) buffer_.resize(kPayloadReadBufferBytes);
}

PayloadReader::~PayloadReader() = default;

base::Status PayloadReader::Fail(S3Error error) {
  s3_error_ = std::move(error);
  failed_ = base::InvalidArgumentError(s3_error_->ToString());
  return *failed_;
}

base::Result<size_t> PayloadReader::Read(char* buf, size_t n) {
  if (failed_) return *failed_;
  if (n == 0) return size_t{0};
  switch (auth_.payload) {
    case PayloadMode::kUnsigned: {
      base::Result<size_t> r = raw_.Read(buf, n);
      if (!r.ok()) {
        failed_ = r.status();
        return *failed_;
      }
      decoded_bytes_ += *r;
      return r;
    }
    case PayloadMode::kSignedSha256:
      return ReadSigned(buf, n);
    case PayloadMode::kStreamingSigned:
    case PayloadMode::kStreamingSignedTrailer:
    case PayloadMode::kStreamingUnsignedTrailer:
      return ReadStreaming(buf, n);
  }
  return Fail(S3Error(S3Code::kInternalError, "unknown payload mode"));
}

base::Result<size_t> PayloadReader::ReadSigned(char* buf, size_t n) {
  if (finished_) return size_t{0};
  base::Result<size_t> r = raw_.Read(buf, n);
  if (!r.ok()) {
    failed_ = r.status();
    return *failed_;
  }
  if (*r > 0) {
    body_hasher_.Update(std::string_view(buf, *r));
    decoded_bytes_ += *r;
    return r;
  }
  std::string computed = base::HexEncode(body_hasher_.Finish());
  if (computed != auth_.payload_sha256_hex) {
    return Fail(S3Error(S3Code::kXAmzContentSHA256Mismatch,
                        "The provided 'x-amz-content-sha256' header does not match what was "
                        "computed.")
                    .With("ClientComputedContentSHA256", auth_.payload_sha256_hex)
                    .With("S3ComputedContentSHA256", computed));
  }
  finished_ = true;
  return size_t{0};
}

base::Result<size_t> PayloadReader::ReadStreaming(char* buf, size_t n) {
  if (finished_) return size_t{0};
  const bool is_signed = auth_.payload != PayloadMode::kStreamingUnsignedTrailer;
  for (;;) {
    std::string_view input(buffer_.data() + buffer_pos_, buffer_len_ - buffer_pos_);
    // Never more payload than the caller asked for (the decoder hands data out in place).
    if (input.size() > n) input = input.substr(0, n);
    AwsChunkedDecoder::Event event = decoder_.Next(input);
    buffer_pos_ += event.consumed;
    switch (event.kind) {
      case AwsChunkedDecoder::EventKind::kNeedMore: {
        if (buffer_pos_ < buffer_len_) continue;
        if (raw_eof_) {
          if (decoder_.Finish().kind != AwsChunkedDecoder::EventKind::kDone) {
            return Fail(S3Error(S3Code::kIncompleteBody,
                                "The request body ended early: " + decoder_.error()));
          }
          if (auto error = FinishStreaming()) return Fail(std::move(*error));
          finished_ = true;
          return size_t{0};
        }
        base::Result<size_t> r = raw_.Read(buffer_.data(), buffer_.size());
        if (!r.ok()) {
          failed_ = r.status();
          return *failed_;
        }
        buffer_pos_ = 0;
        buffer_len_ = *r;
        if (*r == 0) raw_eof_ = true;
        continue;
      }
      case AwsChunkedDecoder::EventKind::kChunkHeader:
        if (is_signed) {
          if (!decoder_.has_chunk_signature()) {
            return Fail(S3Error(S3Code::kSignatureDoesNotMatch,
                                "chunk " + std::to_string(chunk_index_) +
                                    " of a signed streaming upload has no chunk-signature"));
          }
          chunk_hasher_.Reset();
        }
        continue;
      case AwsChunkedDecoder::EventKind::kData: {
        size_t size = event.data.size();
        if (is_signed) chunk_hasher_.Update(event.data);
        decoded_bytes_ += size;
        if (auth_.decoded_content_length && decoded_bytes_ > *auth_.decoded_content_length) {
          return Fail(S3Error(S3Code::kIncompleteBody,
                              "The decoded body is longer than x-amz-decoded-content-length (" +
                                  std::to_string(*auth_.decoded_content_length) + " bytes)"));
        }
        std::memcpy(buf, event.data.data(), size);
        return size;
      }
      case AwsChunkedDecoder::EventKind::kChunkEnd:
        if (is_signed) {
          if (auto error = VerifyChunk()) return Fail(std::move(*error));
        }
        ++chunk_index_;
        continue;
      case AwsChunkedDecoder::EventKind::kTrailer: {
        const std::string& name = decoder_.trailer_name();
        if (auth_.payload == PayloadMode::kStreamingSigned) {
          return Fail(MalformedChunked("trailer '" + name + "' sent, but x-amz-content-sha256 is " +
                                       std::string(kStreamingSignedPayload) +
                                       " (use the -TRAILER variant)"));
        }
        if (name == "x-amz-trailer-signature") {
          if (!trailer_signature_.empty()) {
            return Fail(MalformedChunked("x-amz-trailer-signature sent twice"));
          }
          trailer_signature_ = decoder_.trailer_value();
          continue;
        }
        for (const auto& [seen, value] : trailers_) {
          if (seen == name) return Fail(MalformedChunked("trailer '" + name + "' sent twice"));
        }
        trailers_.emplace_back(name, decoder_.trailer_value());
        continue;
      }
      case AwsChunkedDecoder::EventKind::kDone: {
        if (buffer_pos_ < buffer_len_) {
          return Fail(MalformedChunked("data after the end of the aws-chunked body"));
        }
        // The raw body must end here too.
        while (!raw_eof_) {
          base::Result<size_t> r = raw_.Read(buffer_.data(), buffer_.size());
          if (!r.ok()) {
            failed_ = r.status();
            return *failed_;
          }
          if (*r > 0) return Fail(MalformedChunked("data after the end of the aws-chunked body"));
          raw_eof_ = true;
        }
        if (auto error = FinishStreaming()) return Fail(std::move(*error));
        finished_ = true;
        return size_t{0};
      }
      case AwsChunkedDecoder::EventKind::kError:
        return Fail(MalformedChunked(decoder_.error()));
    }
  }
}

std::optional<S3Error> PayloadReader::VerifyChunk() {
  std::string chunk_hash = base::HexEncode(chunk_hasher_.Finish());
  std::string expected = ChunkSignatureV4(auth_.signing_key, auth_.amz_date, auth_.scope,
                                          previous_signature_, chunk_hash);
  if (!base::ConstantTimeEquals(expected, decoder_.chunk_signature())) {
    return S3Error(S3Code::kSignatureDoesNotMatch,
                   "The chunk signature of chunk " + std::to_string(chunk_index_) +
                       " does not match the signature we calculated (the chunk data or an "
                       "earlier chunk was changed, or the signing key differs).")
        .With("SignatureProvided", decoder_.chunk_signature());
  }
  previous_signature_ = std::move(expected);
  return std::nullopt;
}

std::optional<S3Error> PayloadReader::FinishStreaming() {
  if (auth_.decoded_content_length && decoded_bytes_ != *auth_.decoded_content_length) {
    return S3Error(S3Code::kIncompleteBody, "The decoded body has " +
                                                std::to_string(decoded_bytes_) +
                                                " bytes but x-amz-decoded-content-length says " +
                                                std::to_string(*auth_.decoded_content_length));
  }
  if (auth_.payload == PayloadMode::kStreamingSigned) return std::nullopt;
  const std::vector<std::string>& declared = auth_.trailer_names;
  for (const auto& [name, value] : trailers_) {
    if (std::find(declared.begin(), declared.end(), name) == declared.end()) {
      return MalformedChunked("trailer '" + name + "' was not declared in x-amz-trailer");
    }
  }
  for (const std::string& name : declared) {
    auto it = std::find_if(trailers_.begin(), trailers_.end(),
                           [&](const auto& field) { return field.first == name; });
    if (it == trailers_.end()) {
      return S3Error(S3Code::kIncompleteBody,
                     "The trailer '" + name + "' declared in x-amz-trailer was not sent");
    }
  }
  if (auth_.payload != PayloadMode::kStreamingSignedTrailer) return std::nullopt;
  if (trailer_signature_.empty()) {
    return S3Error(S3Code::kSignatureDoesNotMatch,
                   "A signed-trailer upload must end with x-amz-trailer-signature");
  }
  std::string canonical;
  for (const auto& [name, value] : trailers_) {
    canonical += name;
    canonical += ':';
    canonical += value;
    canonical += '\n';
  }
  std::string expected = TrailerSignatureV4(auth_.signing_key, auth_.amz_date, auth_.scope,
                                            previous_signature_, canonical);
  if (!base::ConstantTimeEquals(expected, trailer_signature_)) {
    return S3Error(S3Code::kSignatureDoesNotMatch,
                   "The trailer signature does not match the signature we calculated (a trailer "
                   "field was changed).")
        .With("SignatureProvided", trailer_signature_);
  }
  return std::nullopt;
}

}  // namespace sovai::objstore
