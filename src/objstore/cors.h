// Cross-origin resource sharing for buckets, with S3's semantics: a bucket's CorsConfiguration
// is an ordered list of rules; a request is allowed by the first rule whose origins, methods and
// (for a preflight) headers all match. The XML form is in s3_xml.h (ParseCorsConfiguration,
// RenderCorsConfiguration).
//
// The front end, for a preflight (OPTIONS with Origin and Access-Control-Request-Method):
//   std::vector<std::string> headers = ParseAccessControlRequestHeaders(acrh_value);
//   const CorsRule* rule = MatchCors(config, origin, method, headers);
//   if (rule == nullptr) -> 403 "CORSResponse: This CORS request is not allowed."
//   else                 -> 200 with CorsPreflightHeaders(*rule, origin, headers)
// and for an actual request carrying Origin, when a rule matches (request_headers empty), it adds
// CorsActualHeaders(*rule, origin) to whatever response it sends.
//
// Thread-safety: values and pure functions. MatchCors returns a pointer into `config`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "objstore/s3_error.h"

namespace sovai::objstore {

inline constexpr size_t kMaxCorsRules = 100;
inline constexpr size_t kMaxCorsRuleIdChars = 255;

struct CorsRule {
  std::string id;                            // optional, <= 255 characters
  std::vector<std::string> allowed_methods;  // >= 1 of GET PUT HEAD POST DELETE
  std::vector<std::string> allowed_origins;  // >= 1; each at most one '*'
  std::vector<std::string> allowed_headers;  // each at most one '*'; matched case-insensitively
  std::vector<std::string> expose_headers;   // no '*'
  std::optional<int64_t> max_age_seconds;    // 0..2^31-1

  bool operator==(const CorsRule&) const = default;
};

struct CorsConfiguration {
  std::vector<CorsRule> rules;  // 1..kMaxCorsRules, in priority order

  bool operator==(const CorsConfiguration&) const = default;
};

// The rules S3 enforces on PutBucketCors. Errors: MalformedXML for no rules, or a rule without
// an AllowedMethod or AllowedOrigin; InvalidRequest for more than 100 rules, a method other than
// GET PUT HEAD POST DELETE, an AllowedOrigin or AllowedHeader with more than one '*', an
// ExposeHeader with a '*', an ID longer than 255 characters or a negative MaxAgeSeconds.
S3Status ValidateCorsConfiguration(const CorsConfiguration& config);

// '*' in `pattern` matches any run of characters (also none); everything else matches itself,
// ASCII-case-insensitively when `ignore_case`.
bool CorsWildcardMatch(std::string_view pattern, std::string_view text, bool ignore_case);

// The first rule of `config` that allows `origin` (the Origin header, matched case-sensitively
// against allowed_origins with wildcards), `method` (exactly, e.g. "PUT") and every name in
// `request_headers` (case-insensitively against allowed_headers with wildcards); nullptr if none.
// For an actual request (not a preflight) pass no request_headers.
const CorsRule* MatchCors(const CorsConfiguration& config, std::string_view origin,
                          std::string_view method, const std::vector<std::string>& request_headers);

// The header names of an Access-Control-Request-Headers value ("Content-Type, x-amz-date"),
// trimmed and lowercased, empty items dropped.
std::vector<std::string> ParseAccessControlRequestHeaders(std::string_view value);

using CorsHeaders = std::vector<std::pair<std::string, std::string>>;

// The response headers of a successful preflight that `rule` (from MatchCors) allowed:
// Access-Control-Allow-Origin ("*" when the origin matched a bare "*", else the origin, with
// Access-Control-Allow-Credentials: true), Access-Control-Allow-Methods (the rule's methods),
// Access-Control-Allow-Headers (the requested headers, if any), Access-Control-Max-Age (if
// set), Access-Control-Expose-Headers (if any), and Vary.
CorsHeaders CorsPreflightHeaders(const CorsRule& rule, std::string_view origin,
                                 const std::vector<std::string>& request_headers);

// The headers to add to an actual cross-origin response that `rule` allowed: Allow-Origin
// (and Allow-Credentials) as above, Allow-Methods, Expose-Headers (if any), Max-Age (if set),
// and Vary.
CorsHeaders CorsActualHeaders(const CorsRule& rule, std::string_view origin);

}  // namespace sovai::objstore
