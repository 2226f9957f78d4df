// S3 request authentication: AWS Signature Version 4 (Authorization header and presigned query),
// Signature Version 2 (header and query, for old clients), anonymous requests, and verification of
// the payload as it streams (signed SHA-256, aws-chunked with chunk signatures and trailers).
//
//   S3Result<AuthResult> auth = Authenticate(req, {.region = "us-east-1",
//                                                  .now_unix_micros = env.NowUnixMicros()},
//                                            lookup);
//   if (!auth.ok()) return RenderError(auth.error());
//   PayloadReader body(req.body(), *auth);
//   ... read `body` to the end (Read() == 0) BEFORE committing anything ...
//   if (!n.ok()) return RenderError(body.s3_error() ? *body.s3_error() : S3ErrorFromStatus(...));
//
// The payload contract: Authenticate() checks the request head only. Whatever the mode, bytes
// that PayloadReader returns are unverified until Read() has returned 0: the SHA-256 of a signed
// payload, the last chunk signature and the trailer signature are checked at the end. A front end
// must stage the object and commit it only after Read() returned 0.
//
// Thread-safety: Authenticate, PresignV4, SignV4 and the signature helpers are pure and
// thread-safe (the lookup is called on the caller's thread). A PayloadReader is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/crypto.h"
#include "base/status.h"
#include "net/http.h"
#include "objstore/aws_chunked.h"
#include "objstore/s3_error.h"

namespace sovai::objstore {

// The longest X-Amz-Expires a presigned URL may carry (7 days), as in S3.
inline constexpr int64_t kMaxPresignExpiresSeconds = 604800;
// Headers in SignedHeaders / X-Amz-SignedHeaders.
inline constexpr size_t kMaxSignedHeaders = 64;
// Names in x-amz-trailer.
inline constexpr size_t kMaxDeclaredTrailers = 16;
// PayloadReader reads the raw body in pieces of this size for aws-chunked decoding.
inline constexpr size_t kPayloadReadBufferBytes = 64 << 10;

// The x-amz-content-sha256 values that are not a hash.
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view kStreamingSignedPayload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
inline constexpr std::string_view kStreamingSignedPayloadTrailer =
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
inline constexpr std::string_view kStreamingUnsignedPayloadTrailer =
    "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
// Hex SHA-256 of the empty string.
inline constexpr std::string_view kEmptySha256Hex =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct Credential {
  std::string access_key;
  std::string secret_key;
  std::string user_id;
};

// Finds the credential of an access key; nullopt when the key is unknown. Called at most once per
// Authenticate(), on the caller's thread.
using CredentialLookup = std::function<std::optional<Credential>(std::string_view access_key)>;

enum class PayloadMode : uint8_t {
  kUnsigned,                  // anonymous, presigned, SigV2, or UNSIGNED-PAYLOAD
  kSignedSha256,              // x-amz-content-sha256: <hex SHA-256 of the body>
  kStreamingSigned,           // STREAMING-AWS4-HMAC-SHA256-PAYLOAD
  kStreamingSignedTrailer,    // STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER
  kStreamingUnsignedTrailer,  // STREAMING-UNSIGNED-PAYLOAD-TRAILER
};

// True for the three aws-chunked modes (the body must go through PayloadReader to be decoded).
inline bool IsStreaming(PayloadMode mode) {
  return mode == PayloadMode::kStreamingSigned || mode == PayloadMode::kStreamingSignedTrailer ||
         mode == PayloadMode::kStreamingUnsignedTrailer;
}

struct AuthOptions {
  // The region this server answers for; a SigV4 credential scope must name it. Empty accepts any
  // region (single-region test servers).
  std::string region;
  // The server's clock (Env::NowUnixMicros()).
  int64_t now_unix_micros = 0;
  // Largest difference between the request's date and now (RequestTimeTooSkewed beyond it).
  int64_t max_skew_seconds = 900;
  // The bucket named by the Host header (virtual-hosted style: "photos" for
  // "photos.s3.example.com", or a CNAME's full name); "" for path-style requests. SigV2's
  // canonical resource starts with "/<bucket>" in that case.
  std::string virtual_host_bucket;
};

struct AuthResult {
  bool anonymous = true;
  Credential credential;  // empty when anonymous
  // "SigV4-header", "SigV4-query", "SigV2-header", "SigV2-query" or "anonymous".
  std::string method = "anonymous";

  PayloadMode payload = PayloadMode::kUnsigned;
  // For kSignedSha256: the declared hash, lowercase hex.
  std::string payload_sha256_hex;

  // SigV4 state for chunk and trailer signatures: the signature of the request head (the seed of
  // the chain), the signing key (32 raw bytes), x-amz-date ("20130524T000000Z") and the credential
  // scope ("20130524/us-east-1/s3/aws4_request"). Empty for other methods.
  std::string seed_signature;
  std::string signing_key;
  std::string amz_date;
  std::string scope;

  // Streaming modes: x-amz-decoded-content-length when sent (the object's size), and the names in
  // x-amz-trailer, lowercased.
  std::optional<uint64_t> decoded_content_length;
  std::vector<std::string> trailer_names;
};

// Authenticates the head of an S3 request (method, target, headers; the body is not touched).
//
// Anonymous when there is no Authorization header and no auth query parameter (X-Amz-Algorithm,
// X-Amz-Credential, X-Amz-Signature, AWSAccessKeyId, Signature); the caller decides what anonymous
// may do. Otherwise exactly one of:
//   SigV4 header  "Authorization: AWS4-HMAC-SHA256 Credential=AK/date/region/s3/aws4_request,
//                  SignedHeaders=host;...,Signature=<hex>", with x-amz-date (or Date) and
//                  x-amz-content-sha256;
//   SigV4 query   X-Amz-Algorithm, -Credential, -Date, -Expires (0..604800), -SignedHeaders,
//                  -Signature; the payload is UNSIGNED-PAYLOAD unless X-Amz-Content-Sha256 is
//                  given;
//   SigV2 header  "Authorization: AWS AK:<base64 HMAC-SHA1>", with Date or x-amz-date;
//   SigV2 query   AWSAccessKeyId, Expires (epoch seconds), Signature.
// Every x-amz-* request header must be signed (SigV4; x-amz-content-sha256 and x-amz-date are
// covered by the string to sign anyway).
//
// Errors (S3Error codes; messages say what to fix):
//   InvalidArgument                 two auth mechanisms at once; an unsupported Authorization
//                                   scheme; X-Amz-Security-Token (session credentials are not
//                                   supported); a malformed SigV2 header; an unknown
//                                   x-amz-content-sha256, x-amz-decoded-content-length or
//                                   x-amz-trailer value
//   MissingSecurityHeader           SigV4 header auth without x-amz-content-sha256
//   AuthorizationHeaderMalformed    a malformed SigV4 Authorization header or credential scope;
//                                   a scope for another region (the message and the Region detail
//                                   name the expected region)
//   AuthorizationQueryParametersError  the same for presigned SigV4 URLs
//   AccessDenied                    no valid date; an x-amz-* header not signed; "Request has
//                                   expired" for a presigned URL past its expiry; incomplete SigV2
//                                   query parameters
//   RequestTimeTooSkewed            the request date is more than max_skew_seconds from now
//                                   (details RequestTime, ServerTime, MaxAllowedSkewMilliseconds)
//   InvalidAccessKeyId              the lookup does not know the access key
//   SignatureDoesNotMatch           wrong signature (details AWSAccessKeyId, StringToSign,
//                                   SignatureProvided, and CanonicalRequest for SigV4)
//   InvalidRequest                  a streaming-signed payload on an unsigned request
// Signatures are compared in constant time.
S3Result<AuthResult> Authenticate(const net::Request& req, const AuthOptions& options,
                                  const CredentialLookup& lookup);

// The request body as the client meant it, verified as it streams (see the contract at the top):
//   kUnsigned                  the raw body, unchanged;
//   kSignedSha256              the raw body; at its end the SHA-256 must equal the declared one
//                              (XAmzContentSHA256Mismatch);
//   kStreamingSigned[Trailer]  aws-chunked decoded; every chunk signature is checked against the
//                              chain that starts at the seed signature, and the trailer signature
//                              (AWS4-HMAC-SHA256-TRAILER) when trailers are signed
//                              (SignatureDoesNotMatch);
//   kStreamingUnsignedTrailer  aws-chunked decoded, no signatures.
// In the streaming modes the decoded length must equal x-amz-decoded-content-length when it was
// sent, a truncated body is IncompleteBody, and framing errors are InvalidRequest ("malformed
// aws-chunked encoding: ..."); trailer fields must be the ones x-amz-trailer declared. Bytes after
// the end of the encoding are an error too (the raw body is read to its end).
//
// Read() follows net::BodyReader: 0 means the body is complete AND verified. On a verification
// or format failure it returns InvalidArgument and s3_error() holds the S3 error to answer with;
// errors of the raw reader pass through unchanged (s3_error() stays empty). Errors are sticky.
// Read(buf, 0) returns 0 without reading.
class PayloadReader : public net::BodyReader {
 public:
  // `raw` must outlive the reader; `auth` is copied.
  PayloadReader(net::BodyReader& raw, const AuthResult& auth);
  ~PayloadReader() override;

  base::Result<size_t> Read(char* buf, size_t n) override;

  // The S3 error behind the last failed Read(), when it was a verification or format failure.
  const std::optional<S3Error>& s3_error() const { return s3_error_; }
  // After Read() returned 0: the trailer fields in order (lowercased names → values), e.g.
  // {"x-amz-checksum-crc32", "sOO8/Q=="}; x-amz-trailer-signature is not included. Checking a
  // checksum trailer against the data is the caller's job.
  const std::vector<std::pair<std::string, std::string>>& trailers() const { return trailers_; }
  // Payload bytes returned so far.
  uint64_t decoded_bytes() const { return decoded_bytes_; }

 private:
  base::Result<size_t> ReadSigned(char* buf, size_t n);
  base::Result<size_t> ReadStreaming(char* buf, size_t n);
  // Records an S3 error and returns (and keeps returning) InvalidArgument.
  base::Status Fail(S3Error error);
  // Checks the signature of the chunk that just ended.
  std::optional<S3Error> VerifyChunk();
  // Checks trailers, lengths and the trailer signature once the encoding is complete, and that
  // the raw body holds nothing more.
  std::optional<S3Error> FinishStreaming();

  net::BodyReader& raw_;
  AuthResult auth_;
  base::Sha256Hasher body_hasher_;   // kSignedSha256: the whole body
  base::Sha256Hasher chunk_hasher_;  // streaming signed: the current chunk
  AwsChunkedDecoder decoder_;
  std::string buffer_;  // raw bytes not yet decoded: buffer_[buffer_pos_, buffer_len_)
  size_t buffer_pos_ = 0;
  size_t buffer_len_ = 0;
  bool raw_eof_ = false;
  std::string previous_signature_;
  std::string trailer_signature_;
  std::vector<std::pair<std::string, std::string>> trailers_;
  uint64_t decoded_bytes_ = 0;
  uint64_t chunk_index_ = 0;
  bool finished_ = false;
  std::optional<base::Status> failed_;
  std::optional<S3Error> s3_error_;
};

// ---------------------------------------------------------------------------------------------
// Signing, for clients (the CLI, tests) and shared with the verifier above.

// The SigV4 signing key for S3: HMAC chain over "AWS4"+secret, the date stamp ("20130524"),
// region, "s3" and "aws4_request". 32 raw bytes.
std::string SigningKeyV4(std::string_view secret_key, std::string_view date_stamp,
                         std::string_view region);

// The signature (lowercase hex) of one aws-chunked chunk: HMAC over "AWS4-HMAC-SHA256-PAYLOAD",
// the amz date, the scope, the previous signature (the seed for the first chunk), the hash of the
// empty string and `chunk_sha256_hex`, the hex SHA-256 of the chunk's data.
std::string ChunkSignatureV4(std::string_view signing_key, std::string_view amz_date,
                             std::string_view scope, std::string_view previous_signature,
                             std::string_view chunk_sha256_hex);

// The signature (lowercase hex) of the trailer section: HMAC over "AWS4-HMAC-SHA256-TRAILER",
// the amz date, the scope, the last chunk's signature and the hex SHA-256 of
// `canonical_trailers`, which is "name:value\n" for each trailer field in order (lowercased
// names, trimmed values, x-amz-trailer-signature excluded).
std::string TrailerSignatureV4(std::string_view signing_key, std::string_view amz_date,
                               std::string_view scope, std::string_view previous_signature,
                               std::string_view canonical_trailers);

// Signs a request with an Authorization header, the way an SDK does. Sets x-amz-date (from
// `now_unix_micros`) and x-amz-content-sha256 (`payload_hash`: a hex SHA-256, UNSIGNED-PAYLOAD or
// one of the STREAMING-* values) in `headers`, then Authorization over every header of `headers`
// named host, content-md5, content-type, x-amz-* or listed in `extra_signed_headers`.
// `headers` must contain Host. `target` is the raw request target as it will be sent
// ("/bucket/a%20key?uploads"). Returns the signature (the seed of a streaming upload).
// Errors: InvalidArgument for a target Request::SetTarget rejects, or no Host header.
base::Result<std::string> SignV4(std::string_view method, std::string_view target,
                                 net::Headers& headers, const Credential& credential,
                                 std::string_view region, int64_t now_unix_micros,
                                 std::string_view payload_hash,
                                 const std::vector<std::string>& extra_signed_headers = {});

struct PresignRequest {
  std::string method = "GET";
  // The Host header the client will send ("127.0.0.1:9000", "photos.s3.example.com").
  std::string host;
  // The decoded path ("/photos/2024/a key+ü.jpg"); it is encoded as S3 expects.
  std::string path = "/";
  // Extra query parameters, decoded ({"response-content-type", "text/plain"}, {"uploadId", ..}).
  std::vector<std::pair<std::string, std::string>> query;
  // Lifetime of the URL: 1..kMaxPresignExpiresSeconds.
  int64_t expires_seconds = 3600;
};

// A presigned SigV4 URL's request target: the encoded path, '?', the extra parameters and the
// X-Amz-* parameters, X-Amz-Signature last ("/photos/a%20key.jpg?X-Amz-Algorithm=...").
// Prefix "http://" + host (or https) for a full URL. Only `host` is signed; the payload is
// UNSIGNED-PAYLOAD. Errors: InvalidArgument for an empty host, a path not starting with '/', or
// expires_seconds out of range.
base::Result<std::string> PresignV4(const PresignRequest& request, const Credential& credential,
                                    std::string_view region, int64_t now_unix_micros);

}  // namespace sovai::objstore
