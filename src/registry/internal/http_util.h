// Small helpers the registry's handler files share.
#pragma once

#include <string>

#include "net/http.h"

namespace sovai::registry::internal {

inline net::Response WithApiVersion(net::Response res) {
  res.headers.Set("Docker-Distribution-API-Version", "registry/2.0");
  return res;
}

inline net::Response Json(int status, std::string body) {
  return WithApiVersion(net::Response::Json(status, std::move(body)));
}

// An empty answer (201, 202, 204) with the API version header.
inline net::Response Empty(int status) { return WithApiVersion(net::Response::Empty(status)); }

}  // namespace sovai::registry::internal
