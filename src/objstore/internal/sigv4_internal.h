// What objstore's SigV4 files share (sigv4.cc: SigV4 header and query authentication; sigv2.cc:
// SigV2; sigv4_signing.cc: signing, presigning and the PayloadReader). Private to those files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "net/http.h"
#include "objstore/s3_error.h"
#include "objstore/sigv4.h"

namespace sovai::objstore::sigv4_internal {

constexpr std::string_view kAlgorithmV4 = "AWS4-HMAC-SHA256";
constexpr std::string_view kService = "s3";
constexpr std::string_view kTerminator = "aws4_request";
constexpr std::string_view kSignatureMismatchMessage =
    "The request signature we calculated does not match the signature you provided. Check your "
    "key and signing method.";

// Signing keys change once a day per access key; deriving one is four HMACs, a visible share of a
// small request's CPU. A bounded cache keyed by (secret, date, region).
std::string CachedSigningKeyV4(std::string_view secret_key, std::string_view date_stamp,
                               std::string_view region);

std::string HexSha256(std::string_view data);

// The SigV4 canonical forms (docs/objstore.md).
std::string CanonicalUri(const net::Request& req);
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& params,
                           bool skip_signature);
std::string CanonicalRequest(std::string_view method, std::string_view canonical_uri,
                             std::string_view canonical_query, const net::Headers& headers,
                             const std::vector<std::string>& signed_headers,
                             std::string_view signed_headers_text, std::string_view payload_hash);
std::string StringToSignV4(std::string_view amz_date, std::string_view scope,
                           std::string_view canonical_request);
// "<date>/<region>/s3/aws4_request".
std::string Scope(std::string_view date_stamp, std::string_view region);

// Checks both signature versions make.
base::Result<int64_t> ParseClientDate(std::string_view text);
S3Error MissingDate();
std::optional<S3Error> CheckSkew(std::string_view request_time, int64_t request_micros,
                                 const AuthOptions& options);
std::optional<S3Error> CheckNoSecurityToken(const net::Request& req);
// The payload mode of a request whose body is not signed (SigV2, anonymous).
std::optional<S3Error> UnsignedHeadPayload(const net::Request& req, AuthResult& result);
S3Error UnknownAccessKey(std::string_view access_key);

// SigV2 (sigv2.cc).
S3Result<AuthResult> AuthenticateV2Header(const net::Request& req, std::string_view authorization,
                                          const AuthOptions& options,
                                          const CredentialLookup& lookup);
S3Result<AuthResult> AuthenticateV2Query(const net::Request& req, const AuthOptions& options,
                                         const CredentialLookup& lookup);

}  // namespace sovai::objstore::sigv4_internal
