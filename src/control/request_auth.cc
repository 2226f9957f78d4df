#include "control/request_auth.h"

#include <string_view>

#include "base/strings.h"

namespace sovai::control {

base::Result<Principal> AuthenticateRequest(Identity& identity, const net::Request& request) {
  auto header = request.header("Authorization");
  if (!header) {
    return base::UnauthenticatedError(
        "missing 'Authorization: Bearer <token>' header (the admin token is in "
        "<data-dir>/admin.json; create others with POST /v1/tokens)");
  }
  std::string_view value = base::Trim(*header);
  size_t space = value.find(' ');
  if (space == std::string_view::npos ||
      !base::EqualsIgnoreCase(value.substr(0, space), "Bearer")) {
    return base::UnauthenticatedError(
        "the Authorization header must be 'Bearer <token>' (other schemes are not accepted)");
  }
  return identity.Authenticate(base::Trim(value.substr(space + 1)));
}

}  // namespace sovai::control
