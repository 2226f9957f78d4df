// The principal of an HTTP request's `Authorization: Bearer <token>`, for every module that serves
// Sovai tokens: the /v1 API (rest_api.h), the app and notebook gateways, the registry's token
// endpoint.
#pragma once

#include "base/status.h"
#include "control/identity.h"
#include "net/http.h"

namespace sovai::control {

// Unauthenticated (401 through ProblemResponse) when the header is missing, not a Bearer
// credential, or the token is refused by Identity::Authenticate.
base::Result<Principal> AuthenticateRequest(Identity& identity, const net::Request& request);

}  // namespace sovai::control
