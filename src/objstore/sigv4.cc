#include "objstore/sigv4.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "base/strings.h"
#include "base/time.h"
#include "objstore/internal/sigv4_internal.h"

namespace sovai::objstore {
namespace sigv4_internal {

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

}  // namespace sigv4_internal

using sigv4_internal::AuthenticateV2Header;
using sigv4_internal::AuthenticateV2Query;
using sigv4_internal::AuthenticateV4Header;
using sigv4_internal::AuthenticateV4Query;
using sigv4_internal::kAlgorithmV4;
using sigv4_internal::UnsignedHeadPayload;

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

}  // namespace sovai::objstore
