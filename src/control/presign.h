// Presigned S3 URLs for browsers (docs/panel.md). `POST /v1/presign` signs one S3 request with the
// S3 credentials of the caller's project — the ones its jobs use — so that the web panel lists,
// uploads, downloads and deletes objects on the S3 endpoint without ever holding a secret key.
// The S3 answer is then exactly what S3 would answer that project: the URL grants one method on
// one resource until it expires, and nothing else.
//
// CORS: the panel runs on the API's origin and S3 listens on another, so its requests are
// cross-origin. A presign request may name the browser origin (`origin`); the URL then carries
// it as the signed query parameter kPresignOriginParam, and the S3 listener answers CORS for that
// origin on that URL (ApplyPresignedCors) — in addition to the buckets' own CORS rules, which
// other web applications keep using as on S3. A changed origin breaks the signature, and the URL
// is itself the credential (no cookie is involved), so this opens nothing a URL holder could not
// already do with curl.
//
//   auto spec = ParsePresignRequest(body);               // the 400 field errors, or a spec
//   auto url = PresignUrl(spec, access, request_host, now_unix_micros);
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/status.h"
#include "control/jobs.h"
#include "control/problem.h"
#include "net/http.h"

namespace sovai::control {

// URL lifetimes: the default, and the longest one may ask for (a URL also never outlives the
// token that asked for it).
inline constexpr int64_t kDefaultPresignExpiresS = 900;
inline constexpr int64_t kMaxPresignExpiresS = 24 * 3600;
// Extra S3 query parameters of one URL ("list-type", "prefix", "response-content-disposition").
inline constexpr size_t kMaxPresignQueryParams = 16;
inline constexpr size_t kMaxPresignQueryValueBytes = 1024;
// An `origin` longer than this is not a browser origin.
inline constexpr size_t kMaxPresignOriginBytes = 256;
// The signed query parameter that carries the browser origin.
inline constexpr std::string_view kPresignOriginParam = "x-sovai-origin";
// How long a browser may cache the answer to a preflight of a presigned URL.
inline constexpr int kPresignedCorsMaxAgeS = 600;

// One S3 request to sign.
struct PresignSpec {
  std::string method;  // GET, HEAD, PUT or DELETE
  std::string bucket;  // "" = the service (GET: ListBuckets)
  std::string key;     // "" = the bucket itself (GET: ListObjects)
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in the body's order
  int64_t expires_s = kDefaultPresignExpiresS;
  std::string origin;  // "" = no CORS answer
};

// Parses the body of POST /v1/presign:
//   {"method": "PUT", "bucket": "data", "key": "a/b.txt", "query": {"name": "value"},
//    "expires_s": 900, "origin": "https://panel.example:8080"}
// Every bad or unknown member is one FieldError naming it: a method other than GET HEAD PUT
// DELETE; a bucket or key S3 refuses (objstore/names.h), a key without a bucket, a key with a
// "." or ".." segment (a browser rewrites those paths, so no URL could address it); more than
// kMaxPresignQueryParams query parameters, a value that is not a string or is longer than
// kMaxPresignQueryValueBytes, a name starting with X-Amz- or equal to kPresignOriginParam;
// expires_s outside 1..kMaxPresignExpiresS; an origin that is not scheme://host[:port].
std::variant<PresignSpec, std::vector<FieldError>> ParsePresignRequest(const nlohmann::json& body);

// `url` ("http://0.0.0.0:9000") as a client that sent `request_host` (its Host header, e.g.
// "panel.example:8080") reaches it: a wildcard listen address (0.0.0.0, [::]) is replaced by the
// host the client used; anything else is returned unchanged. No trailing '/'.
std::string ReachableUrl(std::string_view url, std::string_view request_host);

// The presigned URL of `spec` with `access`'s credentials, on ReachableUrl(access.endpoint,
// request_host), path-style ("/bucket/key"). Errors: InvalidArgument from objstore::PresignV4
// (an endpoint without a host).
base::Result<std::string> PresignUrl(const PresignSpec& spec, const S3Access& access,
                                     std::string_view request_host, int64_t now_unix_micros);

// For the S3 listener, after the S3 API answered `request` with `response`: when the request is
// presigned (X-Amz-Signature), carries kPresignOriginParam equal to its Origin header, and the
// bucket's own CORS rules did not answer, a preflight (OPTIONS) becomes 200 allowing GET, HEAD,
// PUT and DELETE with the requested headers, and any other answer gets
// Access-Control-Allow-Origin and the S3 headers a browser script needs to read (ETag, ...).
// Anything else is left as it is.
void ApplyPresignedCors(const net::Request& request, net::Response& response);

}  // namespace sovai::control
