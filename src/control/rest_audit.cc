// The audit log: /v1/audit, /v1/audit/verify (docs/audit.md).

#include "control/rest_handlers.h"

namespace sovai::control::rest {
namespace {

class AuditApi : public RestHandlers {
 public:
  using RestHandlers::RestHandlers;

  static Json AuditEntryJson(const AuditEntry& e) {
    return {{"seq", e.seq},
            {"at", base::FormatRfc3339(e.event.at_us, 6)},
            {"actor_user", e.event.actor_user},
            {"actor_token", e.event.actor_token},
            {"project", e.event.project},
            {"action", e.event.action},
            {"resource", e.event.resource},
            {"source", e.event.source},
            {"result", e.event.result},
            {"detail", e.event.detail},
            {"prev_hash", e.prev_hash},
            {"hash", e.hash}};
  }

  // Platform admins see every entry (?project= narrows); a project's admins see their project's.
  net::Response ListAudit(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "audit entries"); !st.ok()) return Problem(st);
    if (p.role != Role::kAdmin) {
      return Problem(base::PermissionDeniedError(
          "reading the audit log needs an admin token (of the project, or of the system project "
          "for every project)"));
    }
    AuditLog* audit = control_.audit();
    if (audit == nullptr) {
      return Problem(base::UnavailableError("the audit log is not enabled on this server"));
    }
    PageRequest page;
    std::vector<FieldError> errors = ParsePage(request, &page);
    AuditFilter filter{.limit = page.limit};
    if (!page.after.empty()) {
      auto after = base::ParseInt64(page.after);
      if (after.ok() && *after >= 0) {
        filter.after_seq = *after;
      } else {
        errors.push_back({"cursor", "cursor is not a next_cursor of GET /v1/audit"});
      }
    }
    auto time_param = [&](std::string_view name, std::optional<int64_t>* out) {
      auto text = request.query(name);
      if (!text) return;
      auto t = base::ParseRfc3339(*text);
      if (t.ok()) {
        *out = *t;
      } else {
        errors.push_back({std::string(name), std::string(name) +
                                                 " must be an RFC 3339 time such as "
                                                 "2025-01-31T12:00:00Z"});
      }
    };
    time_param("from", &filter.from_us);
    time_param("to", &filter.to_us);
    filter.actor = std::string(request.query("actor").value_or(""));
    filter.action_prefix = std::string(request.query("action").value_or(""));
    filter.project = std::string(request.query("project").value_or(""));
    if (!errors.empty()) return Invalid(errors);
    if (!p.platform_admin()) {
      if (!filter.project.empty() && filter.project != p.project.id) {
        return FieldProblem(base::NotFoundError("project '" + filter.project + "' not found"),
                            "project");
      }
      filter.project = p.project.id;
    }
    auto entries = audit->List(filter);
    if (!entries.ok()) return Problem(entries.status());
    Json items = Json::array();
    for (const AuditEntry& e : entries->items) items.push_back(AuditEntryJson(e));
    return JsonResponse(
        200, {{"items", std::move(items)},
              {"next_cursor", entries->next_cursor ? Json(std::to_string(*entries->next_cursor))
                                                   : Json(nullptr)}});
  }

  // Walks the whole chain: platform admins only (the chain spans every project).
  net::Response VerifyAudit(net::Request&, const Principal& p) {
    if (Status st = RequirePlatformAdmin(p, "verifying the audit log"); !st.ok()) {
      return Problem(st);
    }
    AuditLog* audit = control_.audit();
    if (audit == nullptr) {
      return Problem(base::UnavailableError("the audit log is not enabled on this server"));
    }
    auto report = audit->Verify();
    if (!report.ok()) return Problem(report.status());
    return JsonResponse(
        200, {{"ok", report->ok},
              {"entries", report->entries},
              {"first_bad_seq", report->first_bad ? Json(*report->first_bad) : Json(nullptr)},
              {"problem", report->problem}});
  }
};

}  // namespace

std::span<const RestRoute> AuditRoutes() {
  static constexpr RestRoute kRoutes[] = {
      {.method = "GET", .pattern = "/v1/audit", .handler = Call<&AuditApi::ListAudit>},
      {.method = "GET", .pattern = "/v1/audit/verify", .handler = Call<&AuditApi::VerifyAudit>},
  };
  return kRoutes;
}

}  // namespace sovai::control::rest
