// RFC 9457 problem details: how every /v1 error looks on the wire.
//
//   HTTP/1.1 400 Bad Request
//   Content-Type: application/problem+json
//   {"type":"urn:sovai:problem:invalid-argument","title":"Invalid argument","status":400,
//    "detail":"the request body has 1 invalid field",
//    "errors":[{"field":"name","message":"missing required field 'name'"}]}
//
// `type` is a stable URN per base::StatusCode (clients switch on it), `title` its fixed summary,
// `detail` the Status message (what was wrong and what to do), `errors` the offending request
// fields (only when there are some). One table in problem.cc maps StatusCode to HTTP status; it is
// the only such table of the REST API.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "net/http.h"

namespace sovai::control {

// A bad request field. `field` is the JSON member name ("name"), a dotted path for nested values,
// or a query parameter name ("limit").
struct FieldError {
  std::string field;
  std::string message;
};

struct ProblemKind {
  base::StatusCode code;
  int http_status;
  std::string_view type;   // "urn:sovai:problem:not-found"
  std::string_view title;  // "Not found"
};

// The table row of `code`. For kOk (not a problem) it is a bug: SOVAI_CHECK.
const ProblemKind& ProblemKindOf(base::StatusCode code);
int HttpStatusOf(base::StatusCode code);

// The problem+json document of a non-OK status.
std::string ProblemJson(const base::Status& status, const std::vector<FieldError>& errors = {});
// A complete response: the mapped HTTP status, Content-Type application/problem+json, the body.
// 401 responses also carry `WWW-Authenticate: Bearer realm="sovai"` (RFC 6750).
net::Response ProblemResponse(const base::Status& status,
                              const std::vector<FieldError>& errors = {});

// A net::ErrorRenderer (ServerOptions::error_renderer) for errors the server itself produces
// (unknown route 404, 405, 413, 431, ...), so that they look like every other /v1 problem: the
// type is the table's row for that HTTP status when there is one, "about:blank" otherwise.
void RenderServerProblem(const net::Request* request, net::Response& response);

}  // namespace sovai::control
