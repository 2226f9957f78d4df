#include "control/rest_api.h"

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <variant>

#include "base/json.h"
#include "base/postgres.h"
#include "base/strings.h"
#include "base/time.h"
#include "control/billing.h"
#include "control/limits.h"
#include "control/presign.h"
#include "control/problem.h"
#include "control/regions.h"
#include "control/tco_api.h"

namespace sovai::control {

namespace {

using base::Status;
using Json = nlohmann::json;

// --- JSON views of the resources (docs/api/openapi.yaml, components/schemas) ----------------
Json TimeOrNull(const std::optional<int64_t>& unix_micros) {
  return unix_micros ? Json(base::FormatRfc3339(*unix_micros)) : Json(nullptr);
}

Json UserJson(const User& u) {
  return {{"id", u.id},
          {"name", u.name},
          {"display_name", u.display_name},
          {"email", u.email},
          {"bootstrap", u.bootstrap},
          {"created_at", base::FormatRfc3339(u.created_at_us)}};
}

Json ProjectJson(const Project& p) {
  return {{"id", p.id},
          {"name", p.name},
          {"description", p.description},
          {"system", p.system},
          {"allowed_regions", p.allowed_regions},
          {"created_at", base::FormatRfc3339(p.created_at_us)}};
}

Json MembershipJson(const Membership& m) {
  return {{"project", m.project_id},
          {"user", m.user_id},
          {"role", std::string(RoleName(m.role))},
          {"created_at", base::FormatRfc3339(m.created_at_us)}};
}

Json TokenJson(const ApiToken& t) {
  return {{"id", t.id},
          {"name", t.name},
          {"user", t.user_id},
          {"project", t.project_id},
          {"role", std::string(RoleName(t.role))},
          {"labels", t.selector.ToString()},
          {"bootstrap", t.bootstrap},
          {"created_at", base::FormatRfc3339(t.created_at_us)},
          {"expires_at", TimeOrNull(t.expires_at_us)},
          {"revoked_at", TimeOrNull(t.revoked_at_us)}};
}

Json S3KeyJson(const S3KeyRecord& k) {
  return {{"access_key_id", k.access_key_id},
          {"user", k.user_id},
          {"bootstrap", k.bootstrap},
          {"created_at", base::FormatRfc3339(k.created_at_us)}};
}

// The secret key is never part of it: only whether one is set (always, for a stored datastore).
Json DatastoreJson(const Datastore& d) {
  return {{"alias", d.alias},
          {"type", d.type},
          {"endpoint", d.endpoint},
          {"region", d.region},
          {"access_key", d.access_key},
          {"secret_key_set", true},
          {"project", d.project},
          {"created_by", d.created_by},
          {"created_at", base::FormatRfc3339(d.created_at_us)}};
}

template <typename T, typename ToJson>
Json PageJson(const Page<T>& page, ToJson to_json) {
  Json items = Json::array();
  for (const T& item : page.items) items.push_back(to_json(item));
  return {{"items", std::move(items)},
          {"next_cursor", page.next_cursor ? Json(*page.next_cursor) : Json(nullptr)}};
}

net::Response JsonResponse(int status, const Json& body) {
  return net::Response::Json(status, base::DumpJson(body) + "\n");
}

net::Response Problem(const Status& status) { return ProblemResponse(status); }

// A problem that names one field. The detail is the whole message; the field's entry does not
// repeat the field's name when the message starts with it ("volumes[0]: bucket ...").
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

// --- Request bodies ----------------------------------------------------------------------------
// Reads the body as one JSON object. Errors are field-less InvalidArgument problems (the byte
// offset of a syntax error is in the detail).
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

// Collects the typed members of a request object and every error, so that one 400 names all the
// bad fields at once.
class Fields {
 public:
  explicit Fields(const Json& object) : object_(object) {}

  std::optional<std::string> String(std::string_view name, bool required) {
    allowed_.emplace_back(name);
    if (required) {
      auto value = base::GetString(object_, name);
      if (!value.ok()) return Fail(name, value.status().message());
      return std::move(*value);
    }
    auto value = base::GetOptionalString(object_, name);
    if (!value.ok()) return Fail(name, value.status().message());
    return std::move(*value);
  }

  // Adds an error to `name` when `status` is not OK; returns status.ok().
  bool Check(std::string_view name, const Status& status) {
    if (!status.ok()) Fail(name, status.message());
    return status.ok();
  }

  // Call after the last String(): members nobody asked for are errors (typos must not pass).
  void RejectUnknown() {
    for (const auto& [key, value] : object_.items()) {
      bool known = false;
      for (const std::string& a : allowed_) known = known || a == key;
      if (!known) {
        Fail(key,
             "unknown field '" + key + "'; this request accepts " + base::Join(allowed_, ", "));
      }
    }
  }

  bool ok() const { return errors_.empty(); }
  std::vector<FieldError>& errors() { return errors_; }

 private:
  std::nullopt_t Fail(std::string_view name, std::string message) {
    errors_.push_back({std::string(name), std::move(message)});
    return std::nullopt;
  }

  const Json& object_;
  std::vector<std::string> allowed_;
  std::vector<FieldError> errors_;
};

// ?limit= and ?cursor=.
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

// --- Authorization -----------------------------------------------------------------------------
bool SeesProject(const Principal& p, std::string_view project_id) {
  return p.platform_admin() || p.project.id == project_id;
}

bool AdministersProject(const Principal& p, std::string_view project_id) {
  return p.role == Role::kAdmin && SeesProject(p, project_id);
}

// Users, projects, members and S3 keys carry no labels, so a selector-limited token matches none.
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

// --- The handlers ------------------------------------------------------------------------------
class RestApi {
 public:
  using Method = net::Response (RestApi::*)(net::Request&, const Principal&);

  explicit RestApi(ControlPlane& control) : control_(control), identity_(control.identity()) {}

  // The one place every /v1 call passes: authentication, the read-only check, the handler, and
  // the audit entry of every call that may change something (GET and HEAD are not recorded).
  net::Response Run(net::Request& request, std::string_view pattern, Method method) {
    auto principal = AuthenticateRequest(identity_, request);
    net::Response response = Dispatch(request, principal, method);
    AuditLog* audit = control_.audit();
    if (audit != nullptr && request.method() != "GET" && request.method() != "HEAD") {
      AuditEvent event{.action = std::string(request.method()) + " " + std::string(pattern),
                       .resource = request.path(),
                       .source = std::string(request.remote_address()),
                       .result = response.status};
      if (principal.ok()) {
        event.actor_user = principal->user.id;
        event.actor_token = principal->token.id;
        event.project = principal->project.id;
      } else {
        event.detail = principal.status().message();
      }
      // A job that runs a registry image records the digest it resolved to (jobs.h).
      if (event.detail.empty() && response.status < 300 &&
          response.body.find("\"image_digest\"") != std::string::npos) {
        if (auto created = base::ParseJson(response.body);
            created.ok() && created->is_object() && created->contains("status") &&
            (*created)["status"].is_object() && (*created)["status"]["image_digest"].is_string()) {
          event.detail = "image " + (*created)["spec"].value("image", std::string()) +
                         " resolved to " + (*created)["status"]["image_digest"].get<std::string>();
        }
      }
      // A refused call says why: the problem's detail (RFC 9457 JSON, written by Problem()).
      if (event.detail.empty() && response.status >= 400 && !response.body.empty()) {
        if (auto problem = base::ParseJson(response.body);
            problem.ok() && problem->is_object() && (*problem)["detail"].is_string()) {
          event.detail = (*problem)["detail"].get<std::string>();
        }
      }
      audit->Append(std::move(event));
    }
    return response;
  }

  net::Response Dispatch(net::Request& request, const base::Result<Principal>& principal,
                         Method method) {
    if (!principal.ok()) return Problem(principal.status());
    // Presign is a POST that reads: a read token may presign GET and HEAD (the handler checks).
    if (principal->role == Role::kRead && request.method() != "GET" && request.method() != "HEAD" &&
        method != &RestApi::Presign) {
      return Problem(base::PermissionDeniedError("token " + principal->token.id +
                                                 " has role 'read', which allows only GET "
                                                 "requests"));
    }
    // The request handler is the exception boundary: nlohmann::json could throw on a bug here.
    try {
      return (this->*method)(request, *principal);
    } catch (const nlohmann::json::exception& e) {
      return Problem(base::InternalError(std::string("building the response failed: ") + e.what()));
    }
  }

  net::Response Whoami(net::Request&, const Principal& p) {
    return JsonResponse(200, {{"user", UserJson(p.user)},
                              {"project", ProjectJson(p.project)},
                              {"role", std::string(RoleName(p.role))},
                              {"platform_admin", p.platform_admin()},
                              {"token", TokenJson(p.token)}});
  }

  // --- Users ---
  net::Response ListUsers(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "users"); !st.ok()) return Problem(st);
    PageRequest page;
    if (auto errors = ParsePage(request, &page); !errors.empty()) return Invalid(errors);
    std::optional<std::string> member_of;
    if (!p.platform_admin()) member_of = p.project.id;
    auto users = identity_.ListUsers(page, member_of);
    if (!users.ok()) return Problem(users.status());
    return JsonResponse(200, PageJson(*users, UserJson));
  }

  net::Response CreateUser(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "users"); !st.ok()) return Problem(st);
    if (Status st = RequirePlatformAdmin(p, "creating users"); !st.ok()) return Problem(st);
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    Fields f(*body);
    auto name = f.String("name", true);
    auto display_name = f.String("display_name", false);
    auto email = f.String("email", false);
    f.RejectUnknown();
    if (name) f.Check("name", ValidateName(*name));
    if (display_name) f.Check("display_name", ValidateDisplayName(*display_name));
    if (email) f.Check("email", ValidateEmail(*email));
    if (!f.ok()) return Invalid(f.errors());
    auto user = identity_.CreateUser(
        {.name = *name, .display_name = display_name.value_or(""), .email = email.value_or("")});
    if (!user.ok()) {
      if (user.status().code() == base::StatusCode::kAlreadyExists) {
        return FieldProblem(user.status(), "name");
      }
      return Problem(user.status());
    }
    return JsonResponse(201, UserJson(*user));
  }

  net::Response GetUser(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "users"); !st.ok()) return Problem(st);
    std::string id(*request.param("id"));
    auto visible = SeesUser(p, id);
    if (!visible.ok()) return Problem(visible.status());
    if (!*visible) return Problem(UserNotFound(id));
    auto user = identity_.GetUser(id);
    if (!user.ok()) return Problem(user.status());
    return JsonResponse(200, UserJson(*user));
  }

  net::Response DeleteUser(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "users"); !st.ok()) return Problem(st);
    std::string id(*request.param("id"));
    if (Status st = RequireVisibleOr403(p, id, "deleting users"); !st.ok()) return Problem(st);
    auto user = identity_.GetUser(id);
    if (!user.ok()) return Problem(user.status());
    if (user->bootstrap) {
      return Problem(base::FailedPreconditionError(
          "user '" + user->name + "' is the bootstrap admin of admin.json and cannot be deleted"));
    }
    if (id == p.user.id) {
      return Problem(base::FailedPreconditionError(
          "a token cannot delete its own user; use another admin's token"));
    }
    // Revoke the user's S3 keys in the object store first: a deleted user must not keep S3
    // access. Each record goes as soon as its key is revoked, so a failure halfway leaves the
    // records matching the store and the request can simply be repeated.
    for (;;) {
      auto keys = identity_.ListS3Keys(id, PageRequest{.limit = kMaxPageSize});
      if (!keys.ok()) return Problem(keys.status());
      if (keys->items.empty()) break;
      for (const S3KeyRecord& key : keys->items) {
        if (Status st = RevokeS3Key(key); !st.ok()) return Problem(st);
      }
    }
    if (Status st = identity_.DeleteUser(id); !st.ok()) return Problem(st);
    return net::Response::Empty(204);
  }

  // --- S3 keys ---
  net::Response ListS3Keys(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "S3 keys"); !st.ok()) return Problem(st);
    std::string id(*request.param("id"));
    if (Status st = RequireSelfOrPlatformAdmin(p, id, "seeing another user's S3 keys"); !st.ok()) {
      return Problem(st);
    }
    PageRequest page;
    if (auto errors = ParsePage(request, &page); !errors.empty()) return Invalid(errors);
    auto keys = identity_.ListS3Keys(id, page);
    if (!keys.ok()) return Problem(keys.status());
    return JsonResponse(200, PageJson(*keys, S3KeyJson));
  }

  net::Response CreateS3Key(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "S3 keys"); !st.ok()) return Problem(st);
    std::string id(*request.param("id"));
    if (Status st = RequireSelfOrPlatformAdmin(p, id, "creating S3 keys for another user");
        !st.ok()) {
      return Problem(st);
    }
    S3KeyIssuer* issuer = control_.s3_keys();
    if (issuer == nullptr) return Problem(NoIssuer());
    auto user = identity_.GetUser(id);
    if (!user.ok()) return Problem(user.status());
    // Check the limit before the store makes a key we would have to take back.
    auto count = identity_.CountS3Keys(id);
    if (!count.ok()) return Problem(count.status());
    if (*count >= kMaxS3KeysPerUser) {
      return Problem(base::FailedPreconditionError(
          "user '" + user->name + "' already has " + std::to_string(*count) +
          " S3 access keys (the limit is " + std::to_string(kMaxS3KeysPerUser) +
          "); delete unused ones first"));
    }
    // Buckets belong to projects: the key acts for one project, {"project": id} or the token's,
    // which the user must be a member of.
    std::string project = p.project.id;
    if (auto text = request.body().ReadAll(); text.ok() && !base::Trim(*text).empty()) {
      auto body = base::ParseJson(*text, base::JsonLimits{.max_bytes = kMaxRequestBodyBytes,
                                                          .max_depth = kMaxRequestJsonDepth});
      if (!body.ok()) return Problem(body.status());
      Fields fields(*body);
      std::optional<std::string> named = fields.String("project", false);
      fields.RejectUnknown();
      if (!fields.ok()) return Invalid(fields.errors());
      if (named) project = *named;
    }
    if (!SeesProject(p, project)) {
      return FieldProblem(base::NotFoundError("project '" + project + "' not found"), "project");
    }
    auto membership = identity_.GetMembership(project, id);
    if (!membership.ok()) return Problem(membership.status());
    if (!membership->has_value()) {
      return FieldProblem(
          base::FailedPreconditionError(
              "user '" + user->name + "' is not a member of project '" + project +
              "'; an S3 key acts for one of its user's projects (pass \"project\")"),
          "project");
    }
    auto key = issuer->Create(project);
    if (!key.ok()) return Problem(key.status().WithContext("creating the S3 key"));
    if (Status st = identity_.AddS3Key(id, key->access_key_id); !st.ok()) {
      issuer->Revoke(key->access_key_id).IgnoreError();  // best effort: nobody saw the secret
      return Problem(st);
    }
    auto record = identity_.GetS3Key(key->access_key_id);
    if (!record.ok()) return Problem(record.status());
    Json out = S3KeyJson(*record);
    out["secret_access_key"] = key->secret;
    return JsonResponse(201, out);
  }

  net::Response DeleteS3Key(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "S3 keys"); !st.ok()) return Problem(st);
    std::string access_key(*request.param("key"));
    auto key = identity_.GetS3Key(access_key);
    if (!key.ok()) return Problem(key.status());
    if (!p.platform_admin() && key->user_id != p.user.id) {
      return Problem(base::NotFoundError("S3 access key '" + access_key + "' not found"));
    }
    if (key->bootstrap) {
      return Problem(base::FailedPreconditionError(
          "S3 access key '" + access_key +
          "' is the bootstrap admin's key of admin.json; rotate it there instead"));
    }
    if (Status st = RevokeS3Key(*key); !st.ok()) return Problem(st);
    return net::Response::Empty(204);
  }

  // --- Projects ---
  net::Response ListProjects(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "projects"); !st.ok()) return Problem(st);
    PageRequest page;
    if (auto errors = ParsePage(request, &page); !errors.empty()) return Invalid(errors);
    if (p.platform_admin()) {
      auto projects = identity_.ListProjects(page);
      if (!projects.ok()) return Problem(projects.status());
      return JsonResponse(200, PageJson(*projects, ProjectJson));
    }
    Page<Project> own;  // a project sees only itself
    if (p.project.id > page.after) own.items.push_back(p.project);
    return JsonResponse(200, PageJson(own, ProjectJson));
  }

  net::Response CreateProject(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "projects"); !st.ok()) return Problem(st);
    if (Status st = RequirePlatformAdmin(p, "creating projects"); !st.ok()) return Problem(st);
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    Fields f(*body);
    auto name = f.String("name", true);
    auto description = f.String("description", false);
    f.RejectUnknown();
    if (name) f.Check("name", ValidateName(*name));
    if (description) f.Check("description", ValidateDescription(*description));
    if (!f.ok()) return Invalid(f.errors());
    auto project =
        identity_.CreateProject({.name = *name, .description = description.value_or("")});
    if (!project.ok()) {
      if (project.status().code() == base::StatusCode::kAlreadyExists) {
        return FieldProblem(project.status(), "name");
      }
      return Problem(project.status());
    }
    return JsonResponse(201, ProjectJson(*project));
  }

  net::Response GetProject(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "projects"); !st.ok()) return Problem(st);
    std::string id(*request.param("id"));
    if (!SeesProject(p, id)) return Problem(ProjectNotFound(id));
    auto project = identity_.GetProject(id);
    if (!project.ok()) return Problem(project.status());
    return JsonResponse(200, ProjectJson(*project));
  }

  // PATCH /v1/projects/{id}: {"allowed_regions": [...]} replaces the other regions whose buckets
  // the project's workloads may mount (docs/sovereignty.md). Admins of the project and platform
  // admins; each name must be a region this server knows other than its own.
  net::Response UpdateProject(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "projects"); !st.ok()) return Problem(st);
    std::string id(*request.param("id"));
    if (!SeesProject(p, id)) return Problem(ProjectNotFound(id));
    if (!AdministersProject(p, id)) {
      return Problem(base::PermissionDeniedError("changing project '" + id +
                                                 "' needs an admin token of that project"));
    }
    auto project = identity_.GetProject(id);
    if (!project.ok()) return Problem(project.status());
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    std::vector<FieldError> errors;
    for (const auto& [key, value] : body->items()) {
      if (key != "allowed_regions") {
        errors.push_back(
            {key, "unknown field '" + key + "'; this request accepts allowed_regions"});
      }
    }
    auto list = body->find("allowed_regions");
    std::vector<std::string> regions;
    if (list == body->end() || !list->is_array()) {
      errors.push_back({"allowed_regions",
                        "is required: an array of region names such as [\"EU-CENTRAL-2\"] ([] = "
                        "only this server's region)"});
    } else if (list->size() > kMaxAllowedRegions) {
      errors.push_back(
          {"allowed_regions", "has more than " + std::to_string(kMaxAllowedRegions) + " regions"});
    } else {
      const KnownRegions known = Known();
      for (size_t i = 0; i < list->size(); ++i) {
        const std::string field = "allowed_regions[" + std::to_string(i) + "]";
        const Json& r = (*list)[i];
        if (!r.is_string()) {
          errors.push_back({field, std::string("must be a region name, not ") + r.type_name()});
          continue;
        }
        const std::string name = base::AsciiToUpper(r.get_ref<const std::string&>());
        if (Status st = ValidateRegionName(name); !st.ok()) {
          errors.push_back({field, st.message()});
        } else if (known.IsOwn(name)) {
          errors.push_back({field, "'" + name +
                                       "' is this server's own region, which every project may "
                                       "mount; list only other regions"});
        } else if (!known.Knows(name)) {
          errors.push_back({field, "region '" + name +
                                       "' is not one this server knows (docs/sovereignty.md); "
                                       "known: " +
                                       known.List()});
        } else {
          regions.push_back(name);
        }
      }
    }
    if (!errors.empty()) return Invalid(errors);
    auto updated = identity_.SetAllowedRegions(id, regions);
    if (!updated.ok()) return FieldProblem(updated.status(), "allowed_regions");
    return JsonResponse(200, ProjectJson(*updated));
  }

  // A project's quota: what its jobs may hold at once. Everyone in the project may read it; only
  // platform admins set it (a project must not raise its own limit).
  net::Response GetQuota(net::Request& request, const Principal& p) {
    std::string id(*request.param("id"));
    if (!SeesProject(p, id)) return Problem(ProjectNotFound(id));
    if (control_.jobs() == nullptr) return Problem(NoJobs());
    if (auto project = identity_.GetProject(id); !project.ok()) return Problem(project.status());
    return JsonResponse(200, QuotaJson(control_.jobs()->GetQuota(id)));
  }

  net::Response SetQuota(net::Request& request, const Principal& p) {
    if (Status st = RequirePlatformAdmin(p, "setting project quotas"); !st.ok()) return Problem(st);
    std::string id(*request.param("id"));
    if (control_.jobs() == nullptr) return Problem(NoJobs());
    if (auto project = identity_.GetProject(id); !project.ok()) return Problem(project.status());
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    Quota quota;
    std::vector<FieldError> errors;
    for (const char* field : {"max_gpus", "max_cpus"}) {
      auto value = base::GetOptionalInt(*body, field);
      if (!value.ok() || (value->has_value() && (**value < 0 || **value > kMaxQuotaUnits))) {
        errors.push_back({field, std::string(field) + " must be null or an integer from 0 to " +
                                     std::to_string(kMaxQuotaUnits)});
        continue;
      }
      std::optional<int> n;
      if (value->has_value()) n = static_cast<int>(**value);
      (std::string_view(field) == "max_gpus" ? quota.max_gpus : quota.max_cpus) = n;
    }
    for (const auto& [key, value] : body->items()) {
      if (key != "max_gpus" && key != "max_cpus") {
        errors.push_back(
            {key, "unknown field '" + key + "'; this request accepts max_gpus, max_cpus"});
      }
    }
    if (!errors.empty()) return Invalid(errors);
    if (Status st = control_.jobs()->SetQuota(id, quota); !st.ok()) return Problem(st);
    return JsonResponse(200, QuotaJson(quota));
  }

  static Json QuotaJson(const Quota& q) {
    return {{"max_gpus", q.max_gpus ? Json(*q.max_gpus) : Json(nullptr)},
            {"max_cpus", q.max_cpus ? Json(*q.max_cpus) : Json(nullptr)}};
  }

  net::Response ListMembers(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "project members"); !st.ok()) return Problem(st);
    std::string id(*request.param("id"));
    if (!SeesProject(p, id)) return Problem(ProjectNotFound(id));
    PageRequest page;
    if (auto errors = ParsePage(request, &page); !errors.empty()) return Invalid(errors);
    auto members = identity_.ListMembers(id, page);
    if (!members.ok()) return Problem(members.status());
    return JsonResponse(200, PageJson(*members, MembershipJson));
  }

  net::Response SetMember(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "project members"); !st.ok()) return Problem(st);
    std::string project_id(*request.param("id"));
    std::string user_id(*request.param("user"));
    if (Status st = RequireProjectAdmin(p, project_id); !st.ok()) return Problem(st);
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    Fields f(*body);
    auto role_text = f.String("role", true);
    f.RejectUnknown();
    Role role = Role::kRead;
    if (role_text) {
      auto parsed = ParseRole(*role_text);
      if (f.Check("role", parsed.status())) role = *parsed;
    }
    if (!f.ok()) return Invalid(f.errors());
    auto result = identity_.SetMember(project_id, user_id, role);
    if (!result.ok()) return Problem(result.status());
    return JsonResponse(result->second ? 201 : 200, MembershipJson(result->first));
  }

  net::Response RemoveMember(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "project members"); !st.ok()) return Problem(st);
    std::string project_id(*request.param("id"));
    std::string user_id(*request.param("user"));
    if (Status st = RequireProjectAdmin(p, project_id); !st.ok()) return Problem(st);
    if (Status st = identity_.RemoveMember(project_id, user_id); !st.ok()) return Problem(st);
    return net::Response::Empty(204);
  }

  // --- Tokens ---
  net::Response ListTokens(net::Request& request, const Principal& p) {
    std::vector<FieldError> errors;
    PageRequest page;
    errors = ParsePage(request, &page);
    if (!errors.empty()) return Invalid(errors);
    // What the caller may see: everything (platform admin), its project (project admin), or its
    // own tokens in its project. ?user= and ?project= narrow that further.
    TokenFilter filter{.must_include = p.token.selector};
    if (!p.platform_admin()) {
      filter.project_id = p.project.id;
      if (p.role != Role::kAdmin) filter.user_id = p.user.id;
    }
    bool empty = false;
    auto narrow = [&](std::string_view param, std::optional<std::string>& slot) {
      auto value = request.query(param);
      if (!value) return;
      if (slot && *slot != *value) empty = true;  // outside what the caller may see
      slot = std::string(*value);
    };
    narrow("user", filter.user_id);
    narrow("project", filter.project_id);
    if (empty) return JsonResponse(200, PageJson(Page<ApiToken>{}, TokenJson));
    auto tokens = identity_.ListTokens(filter, page);
    if (!tokens.ok()) return Problem(tokens.status());
    return JsonResponse(200, PageJson(*tokens, TokenJson));
  }

  net::Response CreateToken(net::Request& request, const Principal& p) {
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    Fields f(*body);
    auto role_text = f.String("role", true);
    auto project = f.String("project", false);
    auto user = f.String("user", false);
    auto labels = f.String("labels", false);
    auto name = f.String("name", false);
    auto expires_at = f.String("expires_at", false);
    f.RejectUnknown();
    NewToken token;
    if (role_text) {
      auto role = ParseRole(*role_text);
      if (f.Check("role", role.status())) token.role = *role;
    }
    if (labels) {
      auto selector = LabelSelector::Parse(*labels);
      if (f.Check("labels", selector.status())) token.selector = std::move(*selector);
    }
    if (name && f.Check("name", ValidateTokenName(*name))) token.name = *name;
    if (expires_at) {
      auto when = base::ParseRfc3339(*expires_at);
      if (f.Check("expires_at", when.status())) {
        if (*when <= control_.env().NowUnixMicros()) {
          f.Check("expires_at", base::InvalidArgumentError("expires_at " + *expires_at +
                                                           " is not in the future"));
        } else {
          token.expires_at_us = *when;
        }
      }
    }
    if (!f.ok()) return Invalid(f.errors());

    token.project_id = project.value_or(p.project.id);
    token.user_id = user.value_or(p.user.id);
    // A token never mints a token with more reach than itself.
    if (!SeesProject(p, token.project_id)) return Problem(ProjectNotFound(token.project_id));
    if (token.user_id != p.user.id && !AdministersProject(p, token.project_id)) {
      return FieldProblem(base::PermissionDeniedError(
                              "only an admin of the project may create tokens for other users"),
                          "user");
    }
    if (token.role > p.role) {
      return FieldProblem(base::PermissionDeniedError("role '" + std::string(RoleName(token.role)) +
                                                      "' exceeds this token's role '" +
                                                      std::string(RoleName(p.role)) + "'"),
                          "role");
    }
    if (!token.selector.Includes(p.token.selector)) {
      return FieldProblem(base::PermissionDeniedError("labels must include this token's labels '" +
                                                      p.token.selector.ToString() +
                                                      "' (a token cannot widen its reach)"),
                          "labels");
    }
    if (p.token.expires_at_us) {
      if (!token.expires_at_us) {
        token.expires_at_us = p.token.expires_at_us;  // inherit: it cannot outlive its creator
      } else if (*token.expires_at_us > *p.token.expires_at_us) {
        return FieldProblem(
            base::PermissionDeniedError("expires_at must not be later than this token's expiry " +
                                        base::FormatRfc3339(*p.token.expires_at_us)),
            "expires_at");
      }
    }
    // The user must exist and be a member with at least this role; Identity checks it again in
    // its transaction, these checks are here to name the field.
    auto target = identity_.GetUser(token.user_id);
    if (!target.ok()) return FieldProblem(target.status(), "user");
    auto membership = identity_.GetMembership(token.project_id, token.user_id);
    if (!membership.ok()) return Problem(membership.status());
    if (!*membership) {
      return FieldProblem(
          base::FailedPreconditionError("user '" + target->name + "' is not a member of project '" +
                                        token.project_id + "'; add the user to the project first"),
          "user");
    }
    if (token.role > (*membership)->role) {
      return FieldProblem(
          base::PermissionDeniedError(
              "role '" + std::string(RoleName(token.role)) + "' exceeds user '" + target->name +
              "''s role '" + std::string(RoleName((*membership)->role)) + "' in the project"),
          "role");
    }
    auto created = identity_.CreateToken(token);
    if (!created.ok()) return Problem(created.status());
    Json out = TokenJson(created->token);
    out["token"] = created->secret;
    return JsonResponse(201, out);
  }

  net::Response RevokeToken(net::Request& request, const Principal& p) {
    std::string id(*request.param("id"));
    auto token = identity_.GetToken(id);
    if (!token.ok()) return Problem(token.status());
    bool own = token->user_id == p.user.id && token->project_id == p.project.id;
    bool visible = (p.platform_admin() || AdministersProject(p, token->project_id) || own) &&
                   token->selector.Includes(p.token.selector);
    if (!visible) return Problem(base::NotFoundError("token '" + id + "' not found"));
    if (Status st = identity_.RevokeToken(id); !st.ok()) return Problem(st);
    return net::Response::Empty(204);
  }

  // --- Datastores (docs/api/datastores.md) ---
  // The external S3 services of the caller's project. They carry no labels, so a selector-limited
  // token is refused; read tokens may list and get them (Dispatch refuses their POST and DELETE),
  // operators and admins of the project add and delete them. No answer holds the secret key.
  net::Response ListDatastores(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "datastores"); !st.ok()) return Problem(st);
    PageRequest page;
    if (auto errors = ParsePage(request, &page); !errors.empty()) return Invalid(errors);
    auto listed = control_.datastores().List(p.project.id, page);
    if (!listed.ok()) return Problem(listed.status());
    return JsonResponse(200, PageJson(*listed, DatastoreJson));
  }

  net::Response CreateDatastore(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "datastores"); !st.ok()) return Problem(st);
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    Fields f(*body);
    auto alias = f.String("alias", true);
    auto type = f.String("type", false);
    auto endpoint = f.String("endpoint", true);
    auto region = f.String("region", true);
    auto access_key = f.String("access_key", true);
    auto secret_key = f.String("secret_key", true);
    f.RejectUnknown();
    if (!f.ok()) return Invalid(f.errors());
    NewDatastore d{.alias = *alias,
                   .type = type.value_or(kDatastoreTypeS3),
                   .endpoint = *endpoint,
                   .region = *region,
                   .access_key = *access_key,
                   .secret_key = *secret_key};
    if (auto errors = ValidateNewDatastore(d, Known()); !errors.empty()) return Invalid(errors);
    auto created = control_.datastores().Add(p.project.id, p.user.id, d);
    if (!created.ok()) {
      if (created.status().code() == base::StatusCode::kAlreadyExists ||
          created.status().code() == base::StatusCode::kFailedPrecondition) {
        return FieldProblem(created.status(), "alias");
      }
      return Problem(created.status());
    }
    return JsonResponse(201, DatastoreJson(*created));
  }

  net::Response GetDatastore(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "datastores"); !st.ok()) return Problem(st);
    auto found = control_.datastores().Get(p.project.id, *request.param("alias"));
    if (!found.ok()) return Problem(found.status());
    return JsonResponse(200, DatastoreJson(*found));
  }

  net::Response DeleteDatastore(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "datastores"); !st.ok()) return Problem(st);
    if (Status st = control_.datastores().Delete(p.project.id, *request.param("alias")); !st.ok()) {
      return Problem(st);
    }
    return net::Response::Empty(204);
  }

 private:
  static Status UserNotFound(std::string_view id) {
    return base::NotFoundError("user '" + std::string(id) + "' not found");
  }
  static Status ProjectNotFound(std::string_view id) {
    return base::NotFoundError("project '" + std::string(id) + "' not found");
  }
  static Status NoIssuer() {
    return base::UnavailableError("this server has no object store to issue S3 keys from");
  }

  // The regions this server knows (regions.h).
  KnownRegions Known() const {
    const ControlPlane::ServerInfo& info = control_.info();
    return KnownRegions{info.region, info.other_regions};
  }
  // The names the volumes of the caller's project may take: the regions and its datastores.
  base::Result<KnownRegions> Known(const Principal& p) {
    KnownRegions known = Known();
    SOVAI_ASSIGN_OR_RETURN(known.datastores, control_.datastores().Aliases(p.project.id));
    return known;
  }
  // What a spec of the caller's project is validated against.
  base::Result<SpecContext> Spec(const FlavorCatalog* flavors, const Principal& p) {
    SOVAI_ASSIGN_OR_RETURN(KnownRegions known, Known(p));
    return SpecContext{flavors, known.own, known.others, known.datastores};
  }
  // The data-residency rule (docs/sovereignty.md) for the buckets of a spec of the caller's
  // project: a problem naming the field, or nothing.
  std::optional<net::Response> CheckResidencyOf(const Principal& p,
                                                const std::vector<BucketSource>& sources) {
    auto known = Known(p);
    if (!known.ok()) return Problem(known.status());
    std::string field;
    Status st =
        CheckSpecResidency(*known, p.project.name, p.project.allowed_regions, sources, &field);
    if (st.ok()) return std::nullopt;
    return FieldProblem(st, field);
  }

  // A user is visible to platform admins, to itself, and to tokens of a project it belongs to.
  base::Result<bool> SeesUser(const Principal& p, std::string_view user_id) {
    if (p.platform_admin() || user_id == p.user.id) return true;
    SOVAI_ASSIGN_OR_RETURN(auto membership, identity_.GetMembership(p.project.id, user_id));
    return membership.has_value();
  }

  // 403 when the caller may see the user but not do `action`; 404 when it may not even see it.
  Status RequireVisibleOr403(const Principal& p, std::string_view user_id,
                             std::string_view action) {
    if (p.platform_admin()) return Status();
    SOVAI_ASSIGN_OR_RETURN(bool visible, SeesUser(p, user_id));
    if (!visible) return UserNotFound(user_id);
    return RequirePlatformAdmin(p, action);
  }

  Status RequireSelfOrPlatformAdmin(const Principal& p, std::string_view user_id,
                                    std::string_view action) {
    if (user_id == p.user.id) return Status();
    return RequireVisibleOr403(p, user_id, action);
  }

  Status RequireProjectAdmin(const Principal& p, std::string_view project_id) {
    if (!SeesProject(p, project_id)) return ProjectNotFound(project_id);
    if (AdministersProject(p, project_id)) return Status();
    return base::PermissionDeniedError("managing the members of project '" +
                                       std::string(project_id) +
                                       "' needs an admin token of that project");
  }

  // Revokes in the store, then drops the record. A key the store no longer knows is gone already.
  Status RevokeS3Key(const S3KeyRecord& key) {
    S3KeyIssuer* issuer = control_.s3_keys();
    if (issuer == nullptr) return NoIssuer();
    Status revoked = issuer->Revoke(key.access_key_id);
    if (!revoked.ok() && revoked.code() != base::StatusCode::kNotFound) {
      return revoked.WithContext("revoking S3 key " + key.access_key_id);
    }
    Status removed = identity_.RemoveS3Key(key.access_key_id);
    if (!removed.ok() && removed.code() != base::StatusCode::kNotFound) return removed;
    return Status();
  }

  // --- Server info, flavors and jobs ------------------------------------------------------------
 public:
  net::Response Info(net::Request&, const Principal&) {
    const ControlPlane::ServerInfo& info = control_.info();
    return JsonResponse(
        200, {{"region", info.region}, {"s3_url", info.s3_url}, {"version", info.version}});
  }

  // POST /v1/presign (presign.h, docs/panel.md): one S3 request signed with the project's S3
  // credentials. Buckets carry no labels, so a selector-limited token is refused; a read token
  // may presign only GET and HEAD. The URL never outlives the token.
  net::Response Presign(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "buckets"); !st.ok()) return Problem(st);
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    // Before any other check: whatever else is wrong, a read token asking for more than a read
    // is refused as such.
    if (p.role == Role::kRead) {
      auto method = body->find("method");
      if (method == body->end() || !method->is_string() ||
          (*method != "GET" && *method != "HEAD")) {
        return FieldProblem(base::PermissionDeniedError("token " + p.token.id +
                                                        " has role 'read', which may presign only "
                                                        "GET and HEAD requests"),
                            "method");
      }
    }
    auto parsed = ParsePresignRequest(*body);
    if (auto* errors = std::get_if<std::vector<FieldError>>(&parsed)) return Invalid(*errors);
    PresignSpec spec = std::get<PresignSpec>(std::move(parsed));
    if (!control_.s3_access()) {
      return Problem(base::UnavailableError("presigned URLs are not available on this server"));
    }
    auto access = control_.s3_access()(p.project.id);
    if (!access.ok()) return Problem(access.status());
    const int64_t now = control_.env().NowUnixMicros();
    if (p.token.expires_at_us) {
      const int64_t left_s = (*p.token.expires_at_us - now) / 1'000'000;
      spec.expires_s = std::max<int64_t>(1, std::min(spec.expires_s, left_s));
    }
    auto url = PresignUrl(spec, *access, request.header("Host").value_or(""), now);
    if (!url.ok()) return Problem(url.status());
    return JsonResponse(200,
                        {{"url", *url},
                         {"method", spec.method},
                         {"expires_at", base::FormatRfc3339(now + spec.expires_s * 1'000'000)}});
  }

  net::Response ListFlavors(net::Request&, const Principal&) {
    JobService* jobs = control_.jobs();
    const FlavorCatalog* flavors = control_.flavors();
    if (jobs == nullptr || flavors == nullptr) return Problem(NoJobs());
    Json items = Json::array();
    for (const Flavor& f : flavors->flavors()) {
      Status fits = Status();
      auto request = RequestFor(f, 1);
      fits = request.ok() ? jobs->CheckFits(*request) : request.status();
      items.push_back({{"id", f.id},
                       {"kind", f.kind == FlavorKind::kGpu ? "gpu" : "cpu"},
                       {"gpu_model", f.gpu_model},
                       {"description", f.description},
                       {"gpus_per_unit", f.gpus_per_unit},
                       {"vcpus_per_unit", f.vcpus_per_unit},
                       {"memory_bytes_per_unit", f.memory_bytes_per_unit},
                       {"max_units", f.max_units},
                       {"price_per_minute_eur", FormatMicroEur(f.price_micro_eur_per_minute)},
                       {"available", fits.ok()},
                       {"reason", fits.ok() ? "" : fits.message()}});
    }
    return JsonResponse(200, {{"items", std::move(items)}});
  }

  net::Response CreateJob(net::Request& request, const Principal& p) {
    bool dry_run = false;
    if (auto bad = ParseDryRun(request, &dry_run)) return *bad;
    if (dry_run) return DryRunJob(request, p);
    JobService* jobs = control_.jobs();
    if (jobs == nullptr) return Problem(NoJobs());
    auto text = request.body().ReadAll();
    if (!text.ok()) return Problem(text.status());
    auto body = base::ParseJson(
        *text, base::JsonLimits{.max_bytes = kMaxJobSpecBytes, .max_depth = kMaxRequestJsonDepth});
    if (!body.ok()) return Problem(body.status());
    auto ctx = Spec(control_.flavors(), p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = ParseJobSpec(*body, *ctx);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      return ProblemResponse(error->status, error->fields);
    }
    JobSpec spec = std::get<JobSpec>(std::move(parsed));
    if (auto bad = ApplySelectorLabels(p, spec.labels)) return *bad;
    if (auto refused = CheckResidencyOf(p, SourcesOf(spec))) return *refused;
    std::string bad_field;
    auto job = jobs->Submit(p.project.id, p.user.id, std::move(spec), &bad_field);
    if (!job.ok()) {
      return bad_field.empty() ? Problem(job.status()) : FieldProblem(job.status(), bad_field);
    }
    return JsonResponse(201, JobToJson(*job));
  }

  net::Response ListJobs(net::Request& request, const Principal& p) {
    JobService* jobs = control_.jobs();
    if (jobs == nullptr) return Problem(NoJobs());
    PageRequest page;
    std::vector<FieldError> errors = ParsePage(request, &page);
    std::map<std::string, std::string> labels = p.token.selector.labels();
    if (auto filter = request.query("labels")) {
      auto selector = LabelSelector::Parse(*filter);
      if (!selector.ok()) {
        errors.push_back({"labels", selector.status().message()});
      } else if (!MergeFilter(selector->labels(), labels)) {
        return JsonResponse(200, {{"items", Json::array()}, {"next_cursor", nullptr}});
      }
    }
    if (!errors.empty()) return Invalid(errors);
    auto listed = jobs->List(p.project.id, labels, static_cast<int>(page.limit), page.after);
    if (!listed.ok()) return FieldProblem(listed.status(), "cursor");
    Json items = Json::array();
    for (const Job& job : listed->jobs) items.push_back(JobToJson(job));
    return JsonResponse(
        200,
        {{"items", std::move(items)},
         {"next_cursor", listed->next_cursor.empty() ? Json(nullptr) : Json(listed->next_cursor)}});
  }

  net::Response GetJob(net::Request& request, const Principal& p) {
    auto job = VisibleJob(request, p);
    if (!job.ok()) return Problem(job.status());
    return JsonResponse(200, JobToJson(*job));
  }

  net::Response StopJob(net::Request& request, const Principal& p) {
    auto job = VisibleJob(request, p);
    if (!job.ok()) return Problem(job.status());
    auto stopped = control_.jobs()->Stop(p.project.id, job->id);
    if (!stopped.ok()) return Problem(stopped.status());
    return JsonResponse(202, JobToJson(*stopped));
  }

  net::Response DeleteJob(net::Request& request, const Principal& p) {
    auto job = VisibleJob(request, p);
    if (!job.ok()) return Problem(job.status());
    if (Status st = control_.jobs()->Delete(p.project.id, job->id); !st.ok()) return Problem(st);
    return net::Response::Empty(204);
  }

  net::Response PushJobData(net::Request& request, const Principal& p) {
    auto job = VisibleJob(request, p);
    if (!job.ok()) return Problem(job.status());
    if (Status st = control_.jobs()->PushData(p.project.id, job->id); !st.ok()) {
      return Problem(st);
    }
    return JsonResponse(200, {{"pushed", true}});
  }

  // The log from ?offset= (0): whole records as text/plain, `X-Sovai-Log-Offset` giving where to
  // continue. With ?follow=true the response stays open (chunked) and streams new records until
  // the job has ended and its log is read to the end.
  net::Response JobLogs(net::Request& request, const Principal& p) {
    auto job = VisibleJob(request, p);
    if (!job.ok()) return Problem(job.status());
    uint64_t offset = 0;
    if (auto bad = ParseLogOffset(request, &offset)) return *bad;
    const bool follow = request.query("follow").value_or("false") == "true";
    JobService* jobs = control_.jobs();
    const std::string project = p.project.id;
    const std::string id = job->id;
    auto first = jobs->ReadLog(project, id, offset, kMaxLogChunkBytes);
    if (!first.ok()) return FieldProblem(first.status(), "offset");
    if (!follow) {
      net::Response res = net::Response::Text(200, std::move(first->data));
      res.headers.Set("X-Sovai-Log-Offset", std::to_string(first->next_offset));
      return res;
    }
    return net::Response::Stream(
        200, "text/plain; charset=utf-8",
        [jobs, project, id, chunk = std::move(*first)](net::BodyWriter& out) mutable -> Status {
          for (;;) {
            if (!chunk.data.empty()) SOVAI_RETURN_IF_ERROR(out.Write(chunk.data));
            const uint64_t at = chunk.next_offset;
            // Read the state before the log: a job that ended has written its last record.
            auto now = jobs->Get(project, id);
            SOVAI_ASSIGN_OR_RETURN(chunk, jobs->ReadLog(project, id, at, kMaxLogChunkBytes));
            if (chunk.data.empty()) {
              if (!now.ok() || IsTerminal(now->state)) return Status();
              std::this_thread::sleep_for(kLogFollowPoll);
            }
          }
        });
  }

  // --- Apps (docs/api/apps.md) ------------------------------------------------------------------
  net::Response CreateApp(net::Request& request, const Principal& p) {
    bool dry_run = false;
    if (auto bad = ParseDryRun(request, &dry_run)) return *bad;
    if (dry_run) return DryRunApp(request, p);
    AppService* apps = control_.apps();
    if (apps == nullptr) return Problem(NoJobs());
    auto body = ReadSpecObject(request);
    if (!body.ok()) return Problem(body.status());
    auto ctx = Spec(control_.flavors(), p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = ParseAppSpec(*body, *ctx);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      return ProblemResponse(error->status, error->fields);
    }
    AppSpec spec = std::get<AppSpec>(std::move(parsed));
    if (auto bad = ApplySelectorLabels(p, spec.labels)) return *bad;
    if (auto refused = CheckResidencyOf(p, SourcesOf(spec))) return *refused;
    std::string bad_field;
    auto app = apps->Create(p.project.id, p.user.id, std::move(spec), &bad_field);
    if (!app.ok()) {
      return bad_field.empty() ? Problem(app.status()) : FieldProblem(app.status(), bad_field);
    }
    return JsonResponse(201, AppToJson(*app, ApiBase(request)));
  }

  net::Response ListApps(net::Request& request, const Principal& p) {
    return ListLabelled(request, p, control_.apps(), &AppToJson);
  }

  net::Response GetApp(net::Request& request, const Principal& p) {
    auto app = VisibleApp(request, p);
    if (!app.ok()) return Problem(app.status());
    return JsonResponse(200, AppToJson(*app, ApiBase(request)));
  }

  net::Response ScaleApp(net::Request& request, const Principal& p) {
    auto app = VisibleApp(request, p);
    if (!app.ok()) return Problem(app.status());
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    auto ctx = Spec(control_.flavors(), p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = ScaleAppSpec(app->spec, *body, *ctx);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      return ProblemResponse(error->status, error->fields);
    }
    auto scaled = control_.apps()->Scale(p.project.id, app->id, std::get<AppSpec>(parsed));
    if (!scaled.ok()) return Problem(scaled.status());
    return JsonResponse(200, AppToJson(*scaled, ApiBase(request)));
  }

  net::Response UpdateApp(net::Request& request, const Principal& p) {
    auto app = VisibleApp(request, p);
    if (!app.ok()) return Problem(app.status());
    auto body = ReadSpecObject(request);
    if (!body.ok()) return Problem(body.status());
    bool rolling = false;
    auto ctx = Spec(control_.flavors(), p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = PatchAppSpec(app->spec, *body, *ctx, &rolling);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      return ProblemResponse(error->status, error->fields);
    }
    AppSpec spec = std::get<AppSpec>(std::move(parsed));
    if (auto bad = ApplySelectorLabels(p, spec.labels)) return *bad;
    if (auto refused = CheckResidencyOf(p, SourcesOf(spec))) return *refused;
    std::string bad_field;
    auto updated =
        control_.apps()->Update(p.project.id, app->id, std::move(spec), rolling, &bad_field);
    if (!updated.ok()) {
      return bad_field.empty() ? Problem(updated.status())
                               : FieldProblem(updated.status(), bad_field);
    }
    return JsonResponse(200, AppToJson(*updated, ApiBase(request)));
  }

  net::Response StopApp(net::Request& request, const Principal& p) {
    return Lifecycle(request, p, control_.apps(), "app", &AppService::Stop, &AppToJson);
  }
  net::Response StartApp(net::Request& request, const Principal& p) {
    return Lifecycle(request, p, control_.apps(), "app", &AppService::StartApp, &AppToJson);
  }
  net::Response DeleteApp(net::Request& request, const Principal& p) {
    return Lifecycle(request, p, control_.apps(), "app", &AppService::Delete, &AppToJson);
  }

  // A replica's log from ?offset=, as GET /v1/jobs/{id}/logs answers it (no follow: the CLI
  // polls with the offset it got).
  net::Response AppLogs(net::Request& request, const Principal& p) {
    auto app = VisibleApp(request, p);
    if (!app.ok()) return Problem(app.status());
    uint64_t offset = 0;
    if (auto bad = ParseLogOffset(request, &offset)) return *bad;
    const std::string replica(request.query("replica").value_or(""));
    auto chunk =
        control_.apps()->ReadLog(p.project.id, app->id, replica, offset, kMaxLogChunkBytes);
    if (!chunk.ok()) {
      return FieldProblem(chunk.status(), chunk.status().code() == base::StatusCode::kNotFound
                                              ? "replica"
                                              : "offset");
    }
    net::Response res = net::Response::Text(200, std::move(chunk->data));
    res.headers.Set("X-Sovai-Log-Offset", std::to_string(chunk->next_offset));
    return res;
  }

  // --- Notebooks (docs/api/notebooks.md) ---------------------------------------------------------
  net::Response CreateNotebook(net::Request& request, const Principal& p) {
    bool dry_run = false;
    if (auto bad = ParseDryRun(request, &dry_run)) return *bad;
    const FlavorCatalog* flavors = dry_run && control_.billing() != nullptr
                                       ? &control_.billing()->flavors()
                                       : control_.flavors();
    NotebookService* notebooks = control_.notebooks();
    if (!dry_run && notebooks == nullptr) return Problem(NoJobs());
    if (dry_run && control_.billing() == nullptr) return Problem(NoBilling());
    auto body = ReadSpecObject(request);
    if (!body.ok()) return Problem(body.status());
    auto ctx = Spec(flavors, p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = ParseNotebookSpec(*body, *ctx);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      return ProblemResponse(error->status, error->fields);
    }
    NotebookSpec spec = std::get<NotebookSpec>(std::move(parsed));
    if (auto bad = ApplySelectorLabels(p, spec.labels)) return *bad;
    JobSpec mounts;
    mounts.volumes = spec.volumes;
    if (auto refused = CheckResidencyOf(p, SourcesOf(mounts))) return *refused;
    if (dry_run) {
      // A notebook runs until it is stopped: priced like an app replica, for an hour.
      auto run = control_.billing()->DryRunNotebook(p.project.id, spec);
      if (!run.ok()) {
        return FieldProblem(
            run.status(), run.status().code() == base::StatusCode::kNotFound ? "flavor" : "units");
      }
      CheckFitsForDryRun(spec.flavor, spec.units, *run);
      return JsonResponse(200, DryRunJson(*run));
    }
    std::string bad_field;
    auto nb = notebooks->Create(p.project.id, p.user.id, std::move(spec), &bad_field);
    if (!nb.ok()) {
      return bad_field.empty() ? Problem(nb.status()) : FieldProblem(nb.status(), bad_field);
    }
    return JsonResponse(201, NotebookToJson(*nb, ApiBase(request)));
  }

  net::Response ListNotebooks(net::Request& request, const Principal& p) {
    return ListLabelled(request, p, control_.notebooks(), &NotebookToJson);
  }

  net::Response GetNotebook(net::Request& request, const Principal& p) {
    auto nb = VisibleNotebook(request, p);
    if (!nb.ok()) return Problem(nb.status());
    return JsonResponse(200, NotebookToJson(*nb, ApiBase(request)));
  }

  net::Response StopNotebook(net::Request& request, const Principal& p) {
    // Stop's reason defaults to "stopped by the user"; a member pointer cannot carry a default.
    auto stop = [](NotebookService& notebooks, const std::string& project, const std::string& id) {
      return notebooks.Stop(project, id);
    };
    return Lifecycle(request, p, control_.notebooks(), "notebook", stop, &NotebookToJson);
  }
  net::Response StartNotebook(net::Request& request, const Principal& p) {
    return Lifecycle(request, p, control_.notebooks(), "notebook", &NotebookService::StartNotebook,
                     &NotebookToJson);
  }
  net::Response DeleteNotebook(net::Request& request, const Principal& p) {
    return Lifecycle(request, p, control_.notebooks(), "notebook", &NotebookService::Delete,
                     &NotebookToJson);
  }

  // The log of the notebook's current job (or ?job= one of its recent ones) from ?offset=.
  net::Response NotebookLogs(net::Request& request, const Principal& p) {
    auto nb = VisibleNotebook(request, p);
    if (!nb.ok()) return Problem(nb.status());
    uint64_t offset = 0;
    if (auto bad = ParseLogOffset(request, &offset)) return *bad;
    const std::string job(request.query("job").value_or(""));
    auto chunk =
        control_.notebooks()->ReadLog(p.project.id, nb->id, job, offset, kMaxLogChunkBytes);
    if (!chunk.ok()) {
      return FieldProblem(chunk.status(),
                          chunk.status().code() == base::StatusCode::kNotFound ? "job" : "offset");
    }
    net::Response res = net::Response::Text(200, std::move(chunk->data));
    res.headers.Set("X-Sovai-Log-Offset", std::to_string(chunk->next_offset));
    return res;
  }

  // The notebook {id} (id or name) when this token may see it; NotFound otherwise.
  base::Result<Notebook> VisibleNotebook(const net::Request& request, const Principal& p) {
    return Visible(request, p, control_.notebooks(), "notebook");
  }

  // --- The endpoints catalog -------------------------------------------------------------------
  net::Response CreateEndpoint(net::Request& request, const Principal& p) {
    AppService* apps = control_.apps();
    if (apps == nullptr) return Problem(NoJobs());
    if (Status st = RequirePlatformAdmin(p, "publishing endpoints"); !st.ok()) return Problem(st);
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    Json app = *body;
    std::string rate_limit = kDefaultEndpointRateLimit;
    if (auto it = app.find("rate_limit"); it != app.end()) {
      if (!it->is_string() || !IsRateLimit(it->get<std::string>())) {
        return FieldProblem(base::InvalidArgumentError(
                                "must be requests per period: N/s, N/min or N/h (e.g. 400/min)"),
                            "rate_limit");
      }
      rate_limit = it->get<std::string>();
      app.erase(it);
    }
    Json autoscaling = {{"min_replicas", app.value("min_replicas", Json(1))},
                        {"max_replicas", app.value("max_replicas", Json(1))}};
    app.erase("min_replicas");
    app.erase("max_replicas");
    app["autoscaling"] = autoscaling;
    auto ctx = Spec(control_.flavors(), p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = ParseAppSpec(app, *ctx);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      for (FieldError& f : error->fields) {
        if (f.field.starts_with("autoscaling.")) f.field = f.field.substr(12);
      }
      return ProblemResponse(error->status, error->fields);
    }
    if (auto refused = CheckResidencyOf(p, SourcesOf(std::get<AppSpec>(parsed)))) {
      return *refused;
    }
    std::string bad_field;
    auto endpoint = apps->CreateEndpoint(p.project.id, p.user.id, std::get<AppSpec>(parsed),
                                         rate_limit, &bad_field);
    if (!endpoint.ok()) {
      return bad_field.empty() ? Problem(endpoint.status())
                               : FieldProblem(endpoint.status(), bad_field);
    }
    return JsonResponse(201, EndpointJson(*endpoint, request));
  }

  net::Response ListEndpoints(net::Request& request, const Principal&) {
    AppService* apps = control_.apps();
    if (apps == nullptr) return Problem(NoJobs());
    Json items = Json::array();
    for (const Endpoint& e : apps->ListEndpoints()) items.push_back(EndpointJson(e, request));
    return JsonResponse(200, {{"items", std::move(items)}, {"next_cursor", nullptr}});
  }

  net::Response DeleteEndpoint(net::Request& request, const Principal& p) {
    AppService* apps = control_.apps();
    if (apps == nullptr) return Problem(NoJobs());
    if (Status st = RequirePlatformAdmin(p, "removing endpoints"); !st.ok()) return Problem(st);
    if (Status st = apps->DeleteEndpoint(std::string(request.param("name").value_or("")));
        !st.ok()) {
      return Problem(st);
    }
    return net::Response::Empty(204);
  }

  // --- Billing (docs/billing.md) ---------------------------------------------------------------
  // ?from=&to=&group_by=&project=: the lines of a window and their groups. Lines name every job
  // of the project, so a token limited to labels is refused, as on members.
  net::Response BillingUsage(net::Request& request, const Principal& p) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    if (Status st = RequireUnlabeled(p, "billing lines"); !st.ok()) return Problem(st);
    const int64_t now = control_.env().NowUnixMicros();
    Window window{MonthOf(now).start_unix_micros, now};
    std::vector<FieldError> errors;
    for (const char* name : {"from", "to"}) {
      auto text = request.query(name);
      if (!text) continue;
      auto at = base::ParseRfc3339(*text);
      if (!at.ok()) {
        errors.push_back({name, at.status().message()});
        continue;
      }
      (std::string_view(name) == "from" ? window.from_unix_micros : window.to_unix_micros) = *at;
    }
    GroupBy group_by = GroupBy::kProject;
    if (auto text = request.query("group_by")) {
      auto parsed = ParseGroupBy(*text);
      if (parsed.ok()) {
        group_by = *parsed;
      } else {
        errors.push_back({"group_by", parsed.status().message()});
      }
    }
    if (errors.empty() && window.from_unix_micros >= window.to_unix_micros) {
      errors.push_back({"to", "to must be later than from"});
    }
    if (errors.empty() &&
        window.to_unix_micros - window.from_unix_micros > kMaxBillingWindowDays * kMicrosPerDay) {
      errors.push_back({"from", "the window may span at most " +
                                    std::to_string(kMaxBillingWindowDays) + " days"});
    }
    if (!errors.empty()) return Invalid(errors);
    auto project = BillingProject(request, p, /*allow_all=*/true);
    if (!project.ok()) return FieldProblem(project.status(), "project");
    // As of the `now` that cut the default window: a running job's line reaches its end, open.
    auto lines = billing->Lines(*project, window, now);
    if (!lines.ok()) return Problem(lines.status());
    if (Status st = CheckLineCount(lines->size()); !st.ok()) return FieldProblem(st, "from");
    Json groups = Json::array();
    for (const Group& g : GroupLines(*lines, group_by)) {
      groups.push_back({{"key", g.key},
                        {"amount_micro_eur", g.amount_micro_eur},
                        {"amount_eur", FormatEur(g.amount_micro_eur)},
                        {"minutes", g.minutes},
                        {"quantity", g.quantity}});
    }
    const int64_t total = SumAmounts(*lines);
    return JsonResponse(200, {{"from", base::FormatRfc3339(window.from_unix_micros)},
                              {"to", base::FormatRfc3339(window.to_unix_micros)},
                              {"currency", billing->prices().currency},
                              {"groups", std::move(groups)},
                              {"lines", LinesJson(*lines)},
                              {"total_micro_eur", total},
                              {"total_eur", FormatEur(total)}});
  }

  // ?month=YYYY-MM (this month by default): the caller's project's lines and their total.
  net::Response BillingStatement(net::Request& request, const Principal& p) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    if (Status st = RequireUnlabeled(p, "billing lines"); !st.ok()) return Problem(st);
    Month month = MonthOf(control_.env().NowUnixMicros());
    if (auto text = request.query("month")) {
      auto parsed = ParseMonth(*text);
      if (!parsed.ok()) return FieldProblem(parsed.status(), "month");
      month = *parsed;
    }
    auto project = BillingProject(request, p, /*allow_all=*/false);
    if (!project.ok()) return FieldProblem(project.status(), "project");
    auto statement = billing->MonthStatement(**project, month);
    if (!statement.ok()) return Problem(statement.status());
    if (Status st = CheckLineCount(statement->lines.size()); !st.ok()) {
      return FieldProblem(st, "month");
    }
    return JsonResponse(200, {{"project", statement->project},
                              {"month", statement->month.Name()},
                              {"currency", billing->prices().currency},
                              {"lines", LinesJson(statement->lines)},
                              {"total_micro_eur", statement->total_micro_eur},
                              {"total_eur", FormatEur(statement->total_micro_eur)}});
  }

  // The caller's project's budget (docs/billing.md: `sovai budget get`).
  net::Response GetOwnBudget(net::Request&, const Principal& p) {
    return BudgetResponse(p.project.id);
  }

  // `sovai tco` for the caller's project (docs/tco.md, tco_api.h). A token limited to labels gets
  // the comparison without the usage history, as the CLI does when the usage route refuses it.
  net::Response Tco(net::Request& request, const Principal& p) {
    if (control_.flavors() == nullptr) return Problem(NoJobs());
    Status unlabeled = RequireUnlabeled(p, "billing lines");
    return TcoApiResponse(request, {.flavors = control_.flavors(),
                                    .billing = control_.billing(),
                                    .project = p.project.id,
                                    .history_refused = unlabeled.ok() ? "" : unlabeled.message(),
                                    .now_unix_micros = control_.env().NowUnixMicros()});
  }

  // Everyone who sees the project may read its budget; its admins set it.
  net::Response GetBudget(net::Request& request, const Principal& p) {
    std::string id(*request.param("id"));
    if (!SeesProject(p, id)) return Problem(ProjectNotFound(id));
    if (auto project = identity_.GetProject(id); !project.ok()) return Problem(project.status());
    return BudgetResponse(id);
  }

  // {"monthly_cap_eur": "50.00" | null, "alert_percent": 80}: null removes the budget;
  // alert_percent defaults to the current one, else 80.
  net::Response SetBudget(net::Request& request, const Principal& p) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    if (Status st = RequireUnlabeled(p, "budgets"); !st.ok()) return Problem(st);
    std::string id(*request.param("id"));
    if (!SeesProject(p, id)) return Problem(ProjectNotFound(id));
    if (!AdministersProject(p, id)) {
      return Problem(base::PermissionDeniedError("setting the budget of project '" + id +
                                                 "' needs an admin token of that project"));
    }
    if (auto project = identity_.GetProject(id); !project.ok()) return Problem(project.status());
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    std::vector<FieldError> errors;
    std::optional<int64_t> cap;
    bool remove = false;
    if (auto it = body->find("monthly_cap_eur"); it == body->end()) {
      errors.push_back({"monthly_cap_eur",
                        "missing required field 'monthly_cap_eur' (a decimal "
                        "string such as \"50.00\", or null to remove)"});
    } else if (it->is_null()) {
      remove = true;
    } else if (!it->is_string()) {
      errors.push_back({"monthly_cap_eur",
                        "monthly_cap_eur must be a decimal string such as "
                        "\"50.00\", or null to remove the budget"});
    } else if (auto micro = ParseMicroEur(it->get<std::string>()); !micro.ok()) {
      errors.push_back({"monthly_cap_eur", micro.status().message()});
    } else {
      cap = *micro;
    }
    std::optional<int> alert_percent;
    if (auto value = base::GetOptionalInt(*body, "alert_percent");
        !value.ok() || (value->has_value() && (**value < 1 || **value > 100))) {
      errors.push_back({"alert_percent", "alert_percent must be an integer from 1 to 100"});
    } else if (value->has_value()) {
      alert_percent = static_cast<int>(**value);
    }
    for (const auto& [key, value] : body->items()) {
      if (key != "monthly_cap_eur" && key != "alert_percent") {
        errors.push_back({key, "unknown field '" + key +
                                   "'; this request accepts monthly_cap_eur, alert_percent"});
      }
    }
    if (!errors.empty()) return Invalid(errors);
    std::optional<Budget> budget;
    if (!remove) {
      auto current = billing->GetBudget(id);
      if (!current.ok()) return Problem(current.status());
      budget = Budget{
          *cap, alert_percent.value_or(current->budget ? current->budget->alert_percent : 80)};
    }
    if (Status st = billing->SetBudget(id, budget); !st.ok()) return Problem(st);
    return BudgetResponse(id);
  }

 private:
  // Adds a ?labels= filter to the token's own selector. False when they contradict (a token
  // limited to team=a asking for team=b): nothing can match both.
  static bool MergeFilter(const std::map<std::string, std::string>& filter,
                          std::map<std::string, std::string>& labels) {
    for (const auto& [k, v] : filter) {
      auto [it, inserted] = labels.emplace(k, v);
      if (!inserted && it->second != v) return false;
    }
    return true;
  }

  Status NoJobs() const { return base::UnavailableError(control_.jobs_unavailable()); }

  Status NoBilling() const {
    return base::UnavailableError("billing is not enabled on this server");
  }

  // ?project=: the caller's project by default; platform admins may name another (or, with
  // `allow_all`, "*" = every project: nullopt).
  base::Result<std::optional<std::string>> BillingProject(const net::Request& request,
                                                          const Principal& p, bool allow_all) {
    auto text = request.query("project");
    if (!text || *text == p.project.id) return std::optional<std::string>(p.project.id);
    SOVAI_RETURN_IF_ERROR(RequirePlatformAdmin(p, "billing another project"));
    if (*text == "*") {
      if (!allow_all) {
        return base::InvalidArgumentError("a statement is of one project; name it, not '*'");
      }
      return std::optional<std::string>();
    }
    SOVAI_RETURN_IF_ERROR(identity_.GetProject(std::string(*text)).status());
    return std::optional<std::string>(std::string(*text));
  }

  // An answer holds at most kMaxBillingLines lines (OutOfRange: 400).
  static Status CheckLineCount(size_t lines) {
    if (lines <= kMaxBillingLines) return Status();
    return base::OutOfRangeError("the answer would hold " + std::to_string(lines) +
                                 " billing lines (at most " + std::to_string(kMaxBillingLines) +
                                 "); ask for a shorter window");
  }

  static Json LinesJson(const std::vector<Line>& lines) {
    Json out = Json::array();
    for (const Line& line : lines) out.push_back(LineToJson(line));
    return out;
  }

  net::Response BudgetResponse(const std::string& project) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    auto report = billing->GetBudget(project);
    if (!report.ok()) return Problem(report.status());
    const auto& b = report->budget;
    return JsonResponse(
        200, {{"monthly_cap_eur", b ? Json(FormatEur(b->monthly_cap_micro_eur)) : Json(nullptr)},
              {"alert_percent", b ? Json(b->alert_percent) : Json(nullptr)},
              {"spent_eur", FormatEur(report->spent_micro_eur)},
              {"spent_micro_eur", report->spent_micro_eur},
              {"alert", report->alert},
              {"capped", report->capped}});
  }

  // ?dry_run=true|false. A response for any other value.
  static std::optional<net::Response> ParseDryRun(const net::Request& request, bool* dry_run) {
    auto text = request.query("dry_run");
    *dry_run = text && *text == "true";
    if (text && *text != "true" && *text != "false") {
      return FieldProblem(base::InvalidArgumentError("dry_run must be true or false"), "dry_run");
    }
    return std::nullopt;
  }

  static Json DryRunJson(const DryRun& run) {
    return {
        {"price_per_minute_eur", FormatEur(run.price_per_minute_micro_eur)},
        {"price_per_minute_micro_eur", run.price_per_minute_micro_eur},
        {"timeout_s", run.timeout_s},
        {"cost_at_timeout_eur", FormatEur(run.cost_at_timeout_micro_eur)},
        {"cost_at_timeout_micro_eur", run.cost_at_timeout_micro_eur},
        {"budget_left_eur",
         run.budget_left_micro_eur ? Json(FormatEur(*run.budget_left_micro_eur)) : Json(nullptr)},
        {"would_be_refused", run.would_be_refused},
        {"reason", run.reason}};
  }

  // A dry run the budget admits is still refused when this machine can never run the flavor.
  void CheckFitsForDryRun(const std::string& flavor_id, int units, DryRun& run) {
    JobService* jobs = control_.jobs();
    if (jobs == nullptr || run.would_be_refused) return;
    auto flavor = control_.billing()->flavors().Find(flavor_id);
    if (!flavor.ok()) return;
    auto request = RequestFor(**flavor, units);
    Status fits = request.ok() ? jobs->CheckFits(*request) : request.status();
    if (!fits.ok()) {
      run.would_be_refused = true;
      run.reason = "flavor " + flavor_id + " x" + std::to_string(units) +
                   " cannot run here: " + fits.message();
    }
  }

  // POST /v1/jobs?dry_run=true: the price and the budget's verdict; nothing is created.
  net::Response DryRunJob(net::Request& request, const Principal& p) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    auto body = ReadSpecObject(request);
    if (!body.ok()) return Problem(body.status());
    auto ctx = Spec(&billing->flavors(), p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = ParseJobSpec(*body, *ctx);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      return ProblemResponse(error->status, error->fields);
    }
    JobSpec spec = std::get<JobSpec>(std::move(parsed));
    if (auto bad = ApplySelectorLabels(p, spec.labels)) return *bad;
    if (auto refused = CheckResidencyOf(p, SourcesOf(spec))) return *refused;
    auto run = billing->DryRunJob(p.project.id, spec);
    if (!run.ok()) {
      return FieldProblem(run.status(),
                          run.status().code() == base::StatusCode::kNotFound ? "flavor" : "units");
    }
    CheckFitsForDryRun(spec.flavor, spec.units, *run);
    return JsonResponse(200, DryRunJson(*run));
  }

  // POST /v1/apps?dry_run=true: all replicas (max_replicas when autoscaled) at a replica's timeout.
  net::Response DryRunApp(net::Request& request, const Principal& p) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    auto body = ReadSpecObject(request);
    if (!body.ok()) return Problem(body.status());
    auto ctx = Spec(&billing->flavors(), p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = ParseAppSpec(*body, *ctx);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      return ProblemResponse(error->status, error->fields);
    }
    AppSpec spec = std::get<AppSpec>(std::move(parsed));
    if (auto bad = ApplySelectorLabels(p, spec.labels)) return *bad;
    if (auto refused = CheckResidencyOf(p, SourcesOf(spec))) return *refused;
    auto run = billing->DryRunApp(p.project.id, spec, kAppAdmissionHorizonS);
    if (!run.ok()) {
      return FieldProblem(run.status(),
                          run.status().code() == base::StatusCode::kNotFound ? "flavor" : "units");
    }
    CheckFitsForDryRun(spec.flavor, spec.units, *run);
    return JsonResponse(200, DryRunJson(*run));
  }

  // "http://<Host>": apps' URLs as the client reached this server.
  std::string ApiBase(const net::Request& request) const {
    return std::string(control_.info().api_tls ? "https://" : "http://") +
           std::string(request.header("Host").value_or("localhost"));
  }

  Json EndpointJson(const Endpoint& e, const net::Request& request) {
    Json j = {{"name", e.name},
              {"app", e.app},
              {"rate_limit", e.rate_limit},
              {"url", ApiBase(request) + "/v1"},
              {"created_at", base::FormatRfc3339(e.created_unix_micros)}};
    if (AppService* apps = control_.apps()) {
      if (auto route = apps->Route(e.app)) {
        j["state"] = std::string(AppStateName(route->state));
        j["ready_replicas"] = route->ready.size();
      }
    }
    return j;
  }

 public:
  // --- Audit (docs/audit.md) ---
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

 private:
  static bool IsRateLimit(std::string_view text) {
    size_t slash = text.find('/');
    if (slash == std::string_view::npos || slash == 0) return false;
    auto n = base::ParseUint64(text.substr(0, slash));
    std::string_view unit = text.substr(slash + 1);
    return n.ok() && *n > 0 && (unit == "s" || unit == "min" || unit == "h");
  }

  // A job or app spec may carry a long environment.
  static base::Result<Json> ReadSpecObject(net::Request& request) {
    SOVAI_ASSIGN_OR_RETURN(std::string text, request.body().ReadAll());
    SOVAI_ASSIGN_OR_RETURN(
        Json body, base::ParseJson(text, base::JsonLimits{.max_bytes = kMaxJobSpecBytes,
                                                          .max_depth = kMaxRequestJsonDepth}));
    if (!body.is_object()) return base::InvalidArgumentError("the body must be a JSON object");
    return body;
  }

  // A token limited to labels creates resources that carry them (and may not contradict them).
  std::optional<net::Response> ApplySelectorLabels(const Principal& p,
                                                   std::map<std::string, std::string>& labels) {
    for (const auto& [key, value] : p.token.selector.labels()) {
      auto it = labels.find(key);
      if (it != labels.end() && it->second != value) {
        return FieldProblem(
            base::PermissionDeniedError("token " + p.token.id +
                                        " may only create resources "
                                        "labeled " +
                                        key + "=" + value + ", not " + key + "=" + it->second),
            "labels." + key);
      }
      labels[key] = value;
    }
    return std::nullopt;
  }

  // The app {id} (id or name) when this token may see it; NotFound otherwise.
  base::Result<App> VisibleApp(const net::Request& request, const Principal& p) {
    return Visible(request, p, control_.apps(), "app");
  }

  // The job of {id} when this token may see it; NotFound otherwise.
  base::Result<Job> VisibleJob(const net::Request& request, const Principal& p) {
    return Visible(request, p, control_.jobs(), "job");
  }

  // The {id} of `service` (a job, an app or a notebook) when this token may see it: its project,
  // and its labels match the token's selector. NotFound otherwise, exactly like a missing one;
  // NoJobs() when the server runs no such service.
  template <typename Service>
  auto Visible(const net::Request& request, const Principal& p, Service* service,
               std::string_view kind) -> decltype(service->Get(p.project.id, std::string())) {
    if (service == nullptr) return NoJobs();
    const std::string id(request.param("id").value_or(""));
    auto found = service->Get(p.project.id, id);
    if (!found.ok()) return found.status();
    if (!p.token.selector.Matches(found->spec.labels)) {
      return base::NotFoundError(std::string(kind) + " '" + id +
                                 "' does not exist in this project");
    }
    return found;
  }

  // stop, start and delete of an app or a notebook: `action(service, project, id)` on the {id}
  // this token may see (Visible; `kind` names it in NotFound), answered 202 with what it returns.
  template <typename Service, typename Action, typename T>
  net::Response Lifecycle(const net::Request& request, const Principal& p, Service* service,
                          std::string_view kind, Action action,
                          Json (*to_json)(const T&, std::string_view)) {
    auto found = Visible(request, p, service, kind);
    if (!found.ok()) return Problem(found.status());
    base::Result<T> done = std::invoke(action, *service, p.project.id, found->id);
    if (!done.ok()) return Problem(done.status());
    return JsonResponse(202, to_json(*done, ApiBase(request)));
  }

  // GET of a project's apps or notebooks: those whose labels match the token's selector and the
  // ?labels= filter (bad: 400 on "labels"), one page of at most kMaxPageSize.
  template <typename Service, typename T>
  net::Response ListLabelled(const net::Request& request, const Principal& p, Service* service,
                             Json (*to_json)(const T&, std::string_view)) {
    if (service == nullptr) return Problem(NoJobs());
    std::map<std::string, std::string> labels = p.token.selector.labels();
    if (auto filter = request.query("labels")) {
      auto selector = LabelSelector::Parse(*filter);
      if (!selector.ok()) return FieldProblem(selector.status(), "labels");
      if (!MergeFilter(selector->labels(), labels)) {
        return JsonResponse(200, {{"items", Json::array()}, {"next_cursor", nullptr}});
      }
    }
    auto listed = service->List(p.project.id, labels);
    if (!listed.ok()) return Problem(listed.status());
    Json items = Json::array();
    for (const T& item : *listed) items.push_back(to_json(item, ApiBase(request)));
    return JsonResponse(200, {{"items", std::move(items)}, {"next_cursor", nullptr}});
  }

  // ?offset= of a log request into `offset` (unchanged when absent); a 400 on "offset" when it is
  // not a byte offset.
  static std::optional<net::Response> ParseLogOffset(const net::Request& request,
                                                     uint64_t* offset) {
    if (auto text = request.query("offset")) {
      auto n = base::ParseUint64(*text);
      if (!n.ok()) {
        return FieldProblem(base::InvalidArgumentError("offset must be a byte offset"), "offset");
      }
      *offset = *n;
    }
    return std::nullopt;
  }

  ControlPlane& control_;
  Identity& identity_;
};

struct Route {
  std::string_view method;
  std::string_view pattern;
  RestApi::Method handler;
};

// The /v1 surface. docs/api/openapi.yaml lists exactly these (openapi_test.cc checks it).
constexpr Route kRoutes[] = {
    {"GET", "/v1/whoami", &RestApi::Whoami},
    {"GET", "/v1/users", &RestApi::ListUsers},
    {"POST", "/v1/users", &RestApi::CreateUser},
    {"GET", "/v1/users/{id}", &RestApi::GetUser},
    {"DELETE", "/v1/users/{id}", &RestApi::DeleteUser},
    {"GET", "/v1/users/{id}/s3-keys", &RestApi::ListS3Keys},
    {"POST", "/v1/users/{id}/s3-keys", &RestApi::CreateS3Key},
    {"DELETE", "/v1/s3-keys/{key}", &RestApi::DeleteS3Key},
    {"GET", "/v1/projects", &RestApi::ListProjects},
    {"POST", "/v1/projects", &RestApi::CreateProject},
    {"GET", "/v1/projects/{id}", &RestApi::GetProject},
    {"PATCH", "/v1/projects/{id}", &RestApi::UpdateProject},
    {"GET", "/v1/projects/{id}/members", &RestApi::ListMembers},
    {"GET", "/v1/projects/{id}/quota", &RestApi::GetQuota},
    {"PUT", "/v1/projects/{id}/quota", &RestApi::SetQuota},
    {"GET", "/v1/projects/{id}/budget", &RestApi::GetBudget},
    {"PUT", "/v1/projects/{id}/budget", &RestApi::SetBudget},
    {"POST", "/v1/projects/{id}/members/{user}", &RestApi::SetMember},
    {"DELETE", "/v1/projects/{id}/members/{user}", &RestApi::RemoveMember},
    {"GET", "/v1/tokens", &RestApi::ListTokens},
    {"POST", "/v1/tokens", &RestApi::CreateToken},
    {"DELETE", "/v1/tokens/{id}", &RestApi::RevokeToken},
    {"GET", "/v1/datastores", &RestApi::ListDatastores},
    {"POST", "/v1/datastores", &RestApi::CreateDatastore},
    {"GET", "/v1/datastores/{alias}", &RestApi::GetDatastore},
    {"DELETE", "/v1/datastores/{alias}", &RestApi::DeleteDatastore},
    {"GET", "/v1/info", &RestApi::Info},
    {"POST", "/v1/presign", &RestApi::Presign},
    {"GET", "/v1/flavors", &RestApi::ListFlavors},
    {"GET", "/v1/jobs", &RestApi::ListJobs},
    {"POST", "/v1/jobs", &RestApi::CreateJob},
    {"GET", "/v1/jobs/{id}", &RestApi::GetJob},
    {"DELETE", "/v1/jobs/{id}", &RestApi::DeleteJob},
    {"POST", "/v1/jobs/{id}/stop", &RestApi::StopJob},
    {"POST", "/v1/jobs/{id}/push-data", &RestApi::PushJobData},
    {"GET", "/v1/jobs/{id}/logs", &RestApi::JobLogs},
    {"GET", "/v1/apps", &RestApi::ListApps},
    {"POST", "/v1/apps", &RestApi::CreateApp},
    {"GET", "/v1/apps/{id}", &RestApi::GetApp},
    {"PATCH", "/v1/apps/{id}", &RestApi::UpdateApp},
    {"DELETE", "/v1/apps/{id}", &RestApi::DeleteApp},
    {"POST", "/v1/apps/{id}/scale", &RestApi::ScaleApp},
    {"POST", "/v1/apps/{id}/stop", &RestApi::StopApp},
    {"POST", "/v1/apps/{id}/start", &RestApi::StartApp},
    {"GET", "/v1/apps/{id}/logs", &RestApi::AppLogs},
    {"GET", "/v1/notebooks", &RestApi::ListNotebooks},
    {"POST", "/v1/notebooks", &RestApi::CreateNotebook},
    {"GET", "/v1/notebooks/{id}", &RestApi::GetNotebook},
    {"DELETE", "/v1/notebooks/{id}", &RestApi::DeleteNotebook},
    {"POST", "/v1/notebooks/{id}/stop", &RestApi::StopNotebook},
    {"POST", "/v1/notebooks/{id}/start", &RestApi::StartNotebook},
    {"GET", "/v1/notebooks/{id}/logs", &RestApi::NotebookLogs},
    {"GET", "/v1/endpoints", &RestApi::ListEndpoints},
    {"POST", "/v1/endpoints", &RestApi::CreateEndpoint},
    {"DELETE", "/v1/endpoints/{name}", &RestApi::DeleteEndpoint},
    {"GET", "/v1/billing/usage", &RestApi::BillingUsage},
    {"GET", "/v1/billing/statement", &RestApi::BillingStatement},
    {"GET", "/v1/billing/budget", &RestApi::GetOwnBudget},
    {"GET", "/v1/tco", &RestApi::Tco},
    {"GET", "/v1/audit", &RestApi::ListAudit},
    {"GET", "/v1/audit/verify", &RestApi::VerifyAudit},
};

}  // namespace

// ---------------------------------------------------------------------------------------------
ControlPlane::ControlPlane(base::Env& env, std::unique_ptr<ControlDb> db, S3KeyIssuer* s3_keys,
                           const std::string& data_dir)
    : env_(env),
      db_(std::move(db)),
      identity_(std::make_unique<Identity>(*db_, env)),
      datastores_(
          std::make_unique<Datastores>(*db_, env, base::JoinPath(data_dir, kSecretsKeyFile))),
      s3_keys_(s3_keys) {}

base::Result<std::unique_ptr<ControlPlane>> ControlPlane::Open(const std::string& data_dir,
                                                               ControlPlaneOptions options) {
  base::Env& env = options.env ? *options.env : base::Env::Default();
  if (!options.state_url.empty() && !base::IsPostgresUrl(options.state_url)) {
    return base::InvalidArgumentError("state URL '" + base::RedactPostgresUrl(options.state_url) +
                                      "' is not a PostgreSQL URL: write "
                                      "postgres://user@host:port/db, or leave it empty for "
                                      "SQLite in the data directory");
  }
  SOVAI_RETURN_IF_ERROR(env.CreateDirs(data_dir));
  const std::string location =
      options.state_url.empty() ? base::JoinPath(data_dir, kControlDbFile) : options.state_url;
  SOVAI_ASSIGN_OR_RETURN(auto db, ControlDb::Open(location, ControlDbOptions{.env = &env}));
  std::unique_ptr<ControlPlane> control(
      new ControlPlane(env, std::move(db), options.s3_keys, data_dir));
  if (options.admin) {
    SOVAI_RETURN_IF_ERROR(
        control->identity()
            .ImportBootstrapAdmin(*options.admin)
            .WithContext("importing the bootstrap admin into " + control->db().path()));
  }
  return control;
}

std::vector<RouteSpec> RestRoutes() {
  std::vector<RouteSpec> out;
  for (const Route& route : kRoutes) out.push_back({route.method, route.pattern});
  return out;
}

base::Status RegisterRestApi(net::Router& router, ControlPlane& control) {
  auto api = std::make_shared<RestApi>(control);
  for (const Route& route : kRoutes) {
    net::RouteOptions options;
    // Job specs may carry a long environment; every other body is small.
    const bool job_spec = (route.method == "POST" && route.pattern == "/v1/jobs") ||
                          (route.method == "POST" && route.pattern == "/v1/apps") ||
                          (route.method == "POST" && route.pattern == "/v1/notebooks") ||
                          (route.method == "PATCH" && route.pattern == "/v1/apps/{id}");
    options.max_body_bytes = job_spec ? kMaxJobSpecBytes : kMaxRequestBodyBytes;
    router.Add(
        std::string(route.method), std::string(route.pattern),
        [api, pattern = route.pattern, handler = route.handler](net::Request& request) {
          return api->Run(request, pattern, handler);
        },
        options);
  }
  return Status();
}

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
