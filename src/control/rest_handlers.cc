#include "control/rest_handlers.h"

namespace sovai::control::rest {

net::Response JsonResponse(int status, const Json& body) {
  return net::Response::Json(status, base::DumpJson(body) + "\n");
}

net::Response Problem(const Status& status) { return ProblemResponse(status); }

net::Response FieldProblem(const Status& status, std::string field) {
  std::string_view message = status.message();
  if (const std::string prefix = field + ": ";
      message.starts_with(prefix) && message.size() > prefix.size()) {
    message.remove_prefix(prefix.size());
  }
  return ProblemResponse(status, {FieldError{std::move(field), std::string(message)}});
}

net::Response Invalid(std::vector<FieldError> errors) {
  std::string detail = "the request has " + std::to_string(errors.size()) + " invalid field" +
                       (errors.size() == 1 ? "" : "s") + ": " + errors.front().message;
  return ProblemResponse(base::InvalidArgumentError(std::move(detail)), errors);
}

base::Result<Json> ReadObject(net::Request& request) {
  SOVAI_ASSIGN_OR_RETURN(std::string body, request.body().ReadAll());
  if (base::Trim(body).empty()) {
    return base::InvalidArgumentError("the request body is empty; send a JSON object");
  }
  SOVAI_ASSIGN_OR_RETURN(
      Json doc, base::ParseJson(body, base::JsonLimits{.max_bytes = kMaxRequestBodyBytes,
                                                       .max_depth = kMaxRequestJsonDepth}));
  if (!doc.is_object()) {
    return base::InvalidArgumentError(std::string("the request body must be a JSON object, not ") +
                                      doc.type_name());
  }
  return doc;
}

std::vector<FieldError> ParsePage(const net::Request& request, PageRequest* page) {
  std::vector<FieldError> errors;
  if (auto limit = request.query("limit")) {
    auto n = base::ParseInt64(*limit);
    if (!n.ok() || *n < 1 || *n > kMaxPageSize) {
      errors.push_back(
          {"limit", "limit must be an integer from 1 to " + std::to_string(kMaxPageSize)});
    } else {
      page->limit = *n;
    }
  }
  if (auto cursor = request.query("cursor")) {
    bool ok = !cursor->empty() && cursor->size() <= kMaxCursorBytes;
    for (char c : *cursor) {
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-');
    }
    if (ok) {
      page->after = std::string(*cursor);
    } else {
      errors.push_back({"cursor",
                        "cursor is not a next_cursor this API returned; list from the start "
                        "without it"});
    }
  }
  return errors;
}

bool SeesProject(const Principal& p, std::string_view project_id) {
  return p.platform_admin() || p.project.id == project_id;
}

bool AdministersProject(const Principal& p, std::string_view project_id) {
  return p.role == Role::kAdmin && SeesProject(p, project_id);
}

Status RequireUnlabeled(const Principal& p, std::string_view what) {
  if (p.token.selector.empty()) return Status();
  return base::PermissionDeniedError("token " + p.token.id + " is limited to resources labeled '" +
                                     p.token.selector.ToString() + "', and " + std::string(what) +
                                     " carry no labels; use a token without a label selector");
}

Status RequirePlatformAdmin(const Principal& p, std::string_view action) {
  if (p.platform_admin()) return Status();
  return base::PermissionDeniedError(std::string(action) +
                                     " needs an admin token of the system project '" +
                                     kSystemProjectName + "'");
}

}  // namespace sovai::control::rest
