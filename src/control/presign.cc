#include "control/presign.h"

#include <span>

#include "base/json.h"
#include "base/strings.h"
#include "objstore/cors.h"
#include "objstore/names.h"
#include "objstore/sigv4.h"

namespace sovai::control {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kPresignMethods[] = {"GET", "HEAD", "PUT", "DELETE"};
// What a panel script reads from S3 answers (upload results, listings, downloads).
constexpr char kExposedHeaders[] =
    "ETag, Content-Length, Content-Type, Last-Modified, x-amz-version-id, x-amz-request-id";

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool IsOneOf(std::string_view value, std::span<const std::string_view> allowed) {
  for (std::string_view a : allowed) {
    if (value == a) return true;
  }
  return false;
}

// scheme://host[:port], as a browser sends it in Origin: lowercase scheme http or https, a host
// of letters, digits, '.', '-' (or a bracketed IPv6 literal), an optional numeric port.
bool IsBrowserOrigin(std::string_view origin) {
  if (origin.size() > kMaxPresignOriginBytes) return false;
  std::string_view rest;
  if (origin.starts_with("http://")) {
    rest = origin.substr(7);
  } else if (origin.starts_with("https://")) {
    rest = origin.substr(8);
  } else {
    return false;
  }
  std::string_view host = rest;
  std::string_view port;
  if (rest.starts_with("[")) {
    size_t close = rest.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (char c : rest.substr(1, close - 1)) {
      if (!IsAlnum(c) && c != ':' && c != '.') return false;
    }
    host = rest.substr(0, close + 1);
    rest.remove_prefix(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
      if (port.empty()) return false;
    }
  } else {
    size_t colon = rest.find(':');
    if (colon != std::string_view::npos) {
      host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
      if (port.empty()) return false;
    }
    if (host.empty()) return false;
    for (char c : host) {
      if (!IsAlnum(c) && c != '.' && c != '-') return false;
    }
  }
  if (port.size() > 5) return false;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::variant<PresignSpec, std::vector<FieldError>> ParsePresignRequest(const Json& body) {
  std::vector<FieldError> errors;
  PresignSpec spec;
  auto fail = [&](std::string field, std::string message) {
    errors.push_back({std::move(field), std::move(message)});
  };
  if (!body.is_object()) return std::vector<FieldError>{{"", "the body must be a JSON object"}};
  for (const auto& [name, value] : body.items()) {
    if (name != "method" && name != "bucket" && name != "key" && name != "query" &&
        name != "expires_s" && name != "origin") {
      fail(name, "unknown field '" + name +
                     "'; this request accepts method, bucket, key, query, expires_s, origin");
    }
  }
  if (auto method = base::GetString(body, "method"); !method.ok()) {
    fail("method", method.status().message());
  } else if (!IsOneOf(*method, kPresignMethods)) {
    fail("method", "method must be GET, HEAD, PUT or DELETE, not '" + method->substr(0, 16) + "'");
  } else {
    spec.method = *method;
  }
  if (auto bucket = base::GetOptionalString(body, "bucket"); !bucket.ok()) {
    fail("bucket", bucket.status().message());
  } else if (*bucket && !(*bucket)->empty()) {
    if (auto bad = objstore::ValidateBucketName(**bucket)) {
      fail("bucket", bad->message);
    } else {
      spec.bucket = **bucket;
    }
  }
  if (auto key = base::GetOptionalString(body, "key"); !key.ok()) {
    fail("key", key.status().message());
  } else if (*key && !(*key)->empty()) {
    if (auto bad = objstore::ValidateObjectKey(**key)) {
      fail("key", bad->message);
    } else if (!body.contains("bucket") || body["bucket"].is_null() ||
               (body["bucket"].is_string() && body["bucket"].get<std::string>().empty())) {
      fail("key", "a key needs a bucket");
    } else {
      bool dot_segment = false;
      for (std::string_view segment : base::Split(**key, '/')) {
        dot_segment = dot_segment || segment == "." || segment == "..";
      }
      if (dot_segment) {
        fail("key",
             "keys with a '.' or '..' segment cannot be reached by a browser (it rewrites such "
             "paths); use an S3 client for them");
      } else {
        spec.key = **key;
      }
    }
  }
  if (body.contains("query") && !body["query"].is_null()) {
    const Json& query = body["query"];
    if (!query.is_object()) {
      fail("query", "query must be an object of strings");
    } else if (query.size() > kMaxPresignQueryParams) {
      fail("query", "query has " + std::to_string(query.size()) + " parameters; at most " +
                        std::to_string(kMaxPresignQueryParams));
    } else {
      for (const auto& [name, value] : query.items()) {
        const std::string field = "query." + name;
        if (name.empty()) {
          fail(field, "a query parameter needs a name");
        } else if (base::EqualsIgnoreCase(std::string_view(name).substr(0, 6), "X-Amz-") ||
                   base::EqualsIgnoreCase(name, kPresignOriginParam)) {
          fail(field, "'" + name + "' is set by the signer");
        } else if (!value.is_string()) {
          fail(field, "query parameters are strings");
        } else if (value.get<std::string>().size() > kMaxPresignQueryValueBytes) {
          fail(field, "longer than " + std::to_string(kMaxPresignQueryValueBytes) + " bytes");
        } else {
          spec.query.emplace_back(name, value.get<std::string>());
        }
      }
    }
  }
  if (auto expires = base::GetOptionalInt(body, "expires_s"); !expires.ok()) {
    fail("expires_s", expires.status().message());
  } else if (*expires) {
    if (**expires < 1 || **expires > kMaxPresignExpiresS) {
      fail("expires_s",
           "expires_s must be from 1 to " + std::to_string(kMaxPresignExpiresS) + " seconds");
    } else {
      spec.expires_s = **expires;
    }
  }
  if (auto origin = base::GetOptionalString(body, "origin"); !origin.ok()) {
    fail("origin", origin.status().message());
  } else if (*origin && !(*origin)->empty()) {
    if (!IsBrowserOrigin(**origin)) {
      fail("origin", "origin must be a browser origin, scheme://host[:port] (location.origin)");
    } else {
      spec.origin = **origin;
    }
  }
  if (!errors.empty()) return errors;
  return spec;
}

std::string ReachableUrl(std::string_view url, std::string_view request_host) {
  while (url.ends_with("/")) url.remove_suffix(1);
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::string(url);
  const std::string_view scheme = url.substr(0, scheme_end + 3);
  std::string_view authority = url.substr(scheme_end + 3);
  std::string_view host = authority;
  std::string_view port;
  if (size_t colon = authority.rfind(':');
      colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon);  // ":9000"
  }
  if (host != "0.0.0.0" && host != "[::]" && host != "::") return std::string(url);
  // The client's host without its port: "a.example:8080" → "a.example", "[::1]:8080" → "[::1]".
  std::string_view client = base::Trim(request_host);
  if (client.starts_with("[")) {
    client = client.substr(0, client.find(']') + 1);
  } else if (size_t colon = client.find(':'); colon != std::string_view::npos) {
    client = client.substr(0, colon);
  }
  if (client.empty()) client = "127.0.0.1";
  return std::string(scheme) + std::string(client) + std::string(port);
}

base::Result<std::string> PresignUrl(const PresignSpec& spec, const S3Access& access,
                                     std::string_view request_host, int64_t now_unix_micros) {
  const std::string base = ReachableUrl(access.endpoint, request_host);
  const size_t scheme_end = base.find("://");
  if (scheme_end == std::string::npos) {
    return base::InvalidArgumentError("the S3 endpoint '" + access.endpoint + "' is not a URL");
  }
  objstore::PresignRequest request;
  request.method = spec.method;
  request.host = base.substr(scheme_end + 3);
  request.path = "/";
  if (!spec.bucket.empty()) {
    request.path += spec.bucket;
    if (!spec.key.empty()) request.path += "/" + spec.key;
  }
  request.query = spec.query;
  if (!spec.origin.empty()) request.query.emplace_back(kPresignOriginParam, spec.origin);
  request.expires_seconds = spec.expires_s;
  SOVAI_ASSIGN_OR_RETURN(std::string target, objstore::PresignV4(request,
                                                                 {.access_key = access.access_key,
                                                                  .secret_key = access.secret_key},
                                                                 access.region, now_unix_micros));
  return base.substr(0, scheme_end + 3) + request.host + target;
}

void ApplyPresignedCors(const net::Request& request, net::Response& response) {
  auto origin = request.header("Origin");
  auto signed_origin = request.query(kPresignOriginParam);
  if (!origin || !signed_origin || *origin != *signed_origin || origin->empty()) return;
  if (!request.query("X-Amz-Signature")) return;
  if (response.headers.Has("Access-Control-Allow-Origin")) return;  // the bucket's rules answered
  if (request.method() == "OPTIONS") {
    auto method = request.header("Access-Control-Request-Method");
    if (!method || !IsOneOf(*method, kPresignMethods)) return;
    response = net::Response::Empty(200);
    response.headers.Set("Access-Control-Allow-Origin", std::string(*origin));
    response.headers.Set("Access-Control-Allow-Methods", "GET, HEAD, PUT, DELETE");
    std::vector<std::string> asked = objstore::ParseAccessControlRequestHeaders(
        request.header("Access-Control-Request-Headers").value_or(""));
    if (!asked.empty())
      response.headers.Set("Access-Control-Allow-Headers", base::Join(asked, ", "));
    response.headers.Set("Access-Control-Max-Age", std::to_string(kPresignedCorsMaxAgeS));
    response.headers.Set("Vary",
                         "Origin, Access-Control-Request-Method, Access-Control-Request-Headers");
    return;
  }
  response.headers.Set("Access-Control-Allow-Origin", std::string(*origin));
  response.headers.Set("Access-Control-Expose-Headers", kExposedHeaders);
  response.headers.Set("Vary", "Origin");
}

}  // namespace sovai::control
