#include "control/problem.h"

#include <nlohmann/json.hpp>

#include "base/json.h"

namespace sovai::control {

namespace {

using base::StatusCode;

// The one StatusCode → HTTP table of the REST API. It follows Google's API error model, except
// that FailedPrecondition is 409 (the request conflicts with the resource's current state, e.g.
// deleting the bootstrap admin) rather than 400, which we keep for malformed requests.
// Rows are in enum order, so kProblemKinds[code] is the row of `code`.
constexpr ProblemKind kProblemKinds[] = {
    {StatusCode::kOk, 200, "urn:sovai:problem:ok", "OK"},
    {StatusCode::kCancelled, 499, "urn:sovai:problem:cancelled", "Cancelled"},
    {StatusCode::kUnknown, 500, "urn:sovai:problem:unknown", "Unknown error"},
    {StatusCode::kInvalidArgument, 400, "urn:sovai:problem:invalid-argument", "Invalid argument"},
    {StatusCode::kDeadlineExceeded, 504, "urn:sovai:problem:deadline-exceeded",
     "Deadline exceeded"},
    {StatusCode::kNotFound, 404, "urn:sovai:problem:not-found", "Not found"},
    {StatusCode::kAlreadyExists, 409, "urn:sovai:problem:already-exists", "Already exists"},
    {StatusCode::kPermissionDenied, 403, "urn:sovai:problem:permission-denied",
     "Permission denied"},
    {StatusCode::kResourceExhausted, 429, "urn:sovai:problem:resource-exhausted",
     "Resource exhausted"},
    {StatusCode::kFailedPrecondition, 409, "urn:sovai:problem:failed-precondition",
     "Failed precondition"},
    {StatusCode::kAborted, 409, "urn:sovai:problem:aborted", "Aborted"},
    {StatusCode::kOutOfRange, 400, "urn:sovai:problem:out-of-range", "Out of range"},
    {StatusCode::kUnimplemented, 501, "urn:sovai:problem:unimplemented", "Not implemented"},
    {StatusCode::kInternal, 500, "urn:sovai:problem:internal", "Internal error"},
    {StatusCode::kUnavailable, 503, "urn:sovai:problem:unavailable", "Service unavailable"},
    {StatusCode::kDataLoss, 500, "urn:sovai:problem:data-loss", "Data loss"},
    {StatusCode::kUnauthenticated, 401, "urn:sovai:problem:unauthenticated", "Unauthenticated"},
};
static_assert(std::size(kProblemKinds) == static_cast<size_t>(StatusCode::kUnauthenticated) + 1,
              "one row per StatusCode");

constexpr bool RowsInEnumOrder() {
  for (size_t i = 0; i < std::size(kProblemKinds); ++i) {
    if (static_cast<size_t>(kProblemKinds[i].code) != i) return false;
  }
  return true;
}
static_assert(RowsInEnumOrder(), "kProblemKinds rows must follow the StatusCode enum");

// Server-generated statuses map back to the first (most specific) row that produces them.
const ProblemKind* KindForHttpStatus(int http_status) {
  // Preferred rows for statuses several codes share.
  switch (http_status) {
    case 400:
      return &kProblemKinds[static_cast<size_t>(StatusCode::kInvalidArgument)];
    case 409:
      return &kProblemKinds[static_cast<size_t>(StatusCode::kFailedPrecondition)];
    case 500:
      return &kProblemKinds[static_cast<size_t>(StatusCode::kInternal)];
    default:
      break;
  }
  for (const ProblemKind& kind : kProblemKinds) {
    if (kind.code != StatusCode::kOk && kind.http_status == http_status) return &kind;
  }
  return nullptr;
}

nlohmann::json ProblemDocument(std::string_view type, std::string_view title, int http_status,
                               std::string_view detail, const std::vector<FieldError>& errors) {
  nlohmann::json doc = {
      {"type", type}, {"title", title}, {"status", http_status}, {"detail", detail}};
  if (!errors.empty()) {
    nlohmann::json list = nlohmann::json::array();
    for (const FieldError& e : errors) list.push_back({{"field", e.field}, {"message", e.message}});
    doc["errors"] = std::move(list);
  }
  return doc;
}

constexpr char kProblemContentType[] = "application/problem+json";

}  // namespace

const ProblemKind& ProblemKindOf(base::StatusCode code) {
  SOVAI_CHECK(code != StatusCode::kOk) << "an OK status is not a problem";
  return kProblemKinds[static_cast<size_t>(code)];
}

int HttpStatusOf(base::StatusCode code) { return ProblemKindOf(code).http_status; }

std::string ProblemJson(const base::Status& status, const std::vector<FieldError>& errors) {
  const ProblemKind& kind = ProblemKindOf(status.code());
  return base::DumpJson(
             ProblemDocument(kind.type, kind.title, kind.http_status, status.message(), errors)) +
         "\n";
}

net::Response ProblemResponse(const base::Status& status, const std::vector<FieldError>& errors) {
  const ProblemKind& kind = ProblemKindOf(status.code());
  net::Response response =
      net::Response::Text(kind.http_status, ProblemJson(status, errors), kProblemContentType);
  if (kind.http_status == 401) {
    response.headers.Set("WWW-Authenticate", "Bearer realm=\"sovai\"");
  }
  return response;
}

void RenderServerProblem(const net::Request*, net::Response& response) {
  const ProblemKind* kind = KindForHttpStatus(response.status);
  std::string_view title = kind ? kind->title : net::HttpReasonPhrase(response.status);
  std::string detail = response.error_message.value_or(std::string(title));
  response.headers.Set("Content-Type", kProblemContentType);
  response.body = base::DumpJson(ProblemDocument(kind ? kind->type : "about:blank", title,
                                                 response.status, detail, {})) +
                  "\n";
}

}  // namespace sovai::control
