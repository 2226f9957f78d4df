#include "objstore/cors.h"

#include <algorithm>
#include <array>

#include "base/strings.h"
#include "objstore/names.h"

namespace sovai::objstore {
namespace {

constexpr std::array<std::string_view, 5> kCorsMethods = {"GET", "PUT", "HEAD", "POST", "DELETE"};

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool CharEquals(char a, char b, bool ignore_case) {
  return ignore_case ? Lower(a) == Lower(b) : a == b;
}

size_t CountStars(std::string_view s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '*'));
}

bool AnyMatches(const std::vector<std::string>& patterns, std::string_view text, bool ignore_case) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return CorsWildcardMatch(p, text, ignore_case); });
}

// Access-Control-Allow-Origin (+ Allow-Credentials), per the first origin pattern that matches.
void AddAllowOrigin(const CorsRule& rule, std::string_view origin, CorsHeaders* out) {
  bool bare_star = false;
  for (const std::string& pattern : rule.allowed_origins) {
    if (CorsWildcardMatch(pattern, origin, /*ignore_case=*/false)) {
      bare_star = pattern == "*";
      break;
    }
  }
  if (bare_star) {
    out->emplace_back("Access-Control-Allow-Origin", "*");
  } else {
    out->emplace_back("Access-Control-Allow-Origin", std::string(origin));
    out->emplace_back("Access-Control-Allow-Credentials", "true");
  }
}

void AddCommon(const CorsRule& rule, CorsHeaders* out) {
  out->emplace_back("Access-Control-Allow-Methods", base::Join(rule.allowed_methods, ", "));
  if (!rule.expose_headers.empty()) {
    out->emplace_back("Access-Control-Expose-Headers", base::Join(rule.expose_headers, ", "));
  }
  if (rule.max_age_seconds) {
    out->emplace_back("Access-Control-Max-Age", std::to_string(*rule.max_age_seconds));
  }
}

void AddVary(CorsHeaders* out) {
  out->emplace_back("Vary",
                    "Origin, Access-Control-Request-Headers, Access-Control-Request-Method");
}

}  // namespace

S3Status ValidateCorsConfiguration(const CorsConfiguration& config) {
  if (config.rules.empty()) {
    return S3Error(S3Code::kMalformedXML,
                   "The XML you provided was not well-formed or did not validate against our "
                   "published schema: CORSConfiguration needs at least one CORSRule.");
  }
  if (config.rules.size() > kMaxCorsRules) {
    return S3Error(S3Code::kInvalidRequest, "The CORS configuration has " +
                                                std::to_string(config.rules.size()) +
                                                " rules; at most 100 are allowed.");
  }
  for (size_t i = 0; i < config.rules.size(); ++i) {
    const CorsRule& rule = config.rules[i];
    const std::string where = "CORSRule #" + std::to_string(i + 1);
    if (rule.allowed_methods.empty() || rule.allowed_origins.empty()) {
      return S3Error(S3Code::kMalformedXML,
                     "The XML you provided was not well-formed or did not validate against our "
                     "published schema: " +
                         where + " needs at least one AllowedMethod and one AllowedOrigin.");
    }
    if (Utf8Length(rule.id) > kMaxCorsRuleIdChars) {
      return S3Error(S3Code::kInvalidRequest,
                     "The ID of " + where + " is longer than 255 characters.");
    }
    for (const std::string& method : rule.allowed_methods) {
      if (std::find(kCorsMethods.begin(), kCorsMethods.end(), method) == kCorsMethods.end()) {
        return S3Error(S3Code::kInvalidRequest,
                       "Found unsupported HTTP method in CORS config. Unsupported method is " +
                           method + " (allowed: GET, PUT, HEAD, POST, DELETE).");
      }
    }
    for (const std::string& origin : rule.allowed_origins) {
      if (CountStars(origin) > 1) {
        return S3Error(S3Code::kInvalidRequest,
                       "AllowedOrigin \"" + origin + "\" can not have more than one wildcard.");
      }
    }
    for (const std::string& header : rule.allowed_headers) {
      if (CountStars(header) > 1) {
        return S3Error(S3Code::kInvalidRequest,
                       "AllowedHeader \"" + header + "\" can not have more than one wildcard.");
      }
    }
    for (const std::string& header : rule.expose_headers) {
      if (CountStars(header) > 0) {
        return S3Error(S3Code::kInvalidRequest,
                       "ExposeHeader \"" + header +
                           "\" contains wildcard. We currently do not support wildcard for "
                           "ExposeHeader.");
      }
    }
    if (rule.max_age_seconds && *rule.max_age_seconds < 0) {
      return S3Error(S3Code::kInvalidRequest,
                     "MaxAgeSeconds of " + where + " must not be negative.");
    }
  }
  return std::nullopt;
}

bool CorsWildcardMatch(std::string_view pattern, std::string_view text, bool ignore_case) {
  // Greedy glob with one backtrack point (the last '*'): O(pattern * text) at worst.
  size_t p = 0, t = 0;
  size_t star = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_t = t;
    } else if (p < pattern.size() && CharEquals(pattern[p], text[t], ignore_case)) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

const CorsRule* MatchCors(const CorsConfiguration& config, std::string_view origin,
                          std::string_view method,
                          const std::vector<std::string>& request_headers) {
  for (const CorsRule& rule : config.rules) {
    if (!AnyMatches(rule.allowed_origins, origin, /*ignore_case=*/false)) continue;
    if (std::find(rule.allowed_methods.begin(), rule.allowed_methods.end(), method) ==
        rule.allowed_methods.end()) {
      continue;
    }
    bool headers_ok =
        std::all_of(request_headers.begin(), request_headers.end(), [&](const std::string& h) {
          return AnyMatches(rule.allowed_headers, h, /*ignore_case=*/true);
        });
    if (headers_ok) return &rule;
  }
  return nullptr;
}

std::vector<std::string> ParseAccessControlRequestHeaders(std::string_view value) {
  std::vector<std::string> out;
  for (std::string_view item : base::Split(value, ',')) {
    item = base::Trim(item);
    if (!item.empty()) out.push_back(base::AsciiToLower(item));
  }
  return out;
}

CorsHeaders CorsPreflightHeaders(const CorsRule& rule, std::string_view origin,
                                 const std::vector<std::string>& request_headers) {
  CorsHeaders out;
  AddAllowOrigin(rule, origin, &out);
  AddCommon(rule, &out);
  if (!request_headers.empty()) {
    out.emplace_back("Access-Control-Allow-Headers", base::Join(request_headers, ", "));
  }
  AddVary(&out);
  return out;
}

CorsHeaders CorsActualHeaders(const CorsRule& rule, std::string_view origin) {
  CorsHeaders out;
  AddAllowOrigin(rule, origin, &out);
  AddCommon(rule, &out);
  AddVary(&out);
  return out;
}

}  // namespace sovai::objstore
