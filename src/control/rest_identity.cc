// Users, their S3 keys, projects (quota, members), tokens and datastores: /v1/whoami, /v1/users,
// /v1/s3-keys, /v1/projects, /v1/tokens, /v1/datastores (docs/api/openapi.yaml).

#include "control/rest_handlers.h"

namespace sovai::control::rest {
namespace {

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

class IdentityApi : public RestHandlers {
 public:
  using RestHandlers::RestHandlers;

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

  static Status NoIssuer() {
    return base::UnavailableError("this server has no object store to issue S3 keys from");
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
};

}  // namespace

std::span<const RestRoute> IdentityRoutes() {
  static constexpr RestRoute kRoutes[] = {
      {.method = "GET", .pattern = "/v1/whoami", .handler = Call<&IdentityApi::Whoami>},
      {.method = "GET", .pattern = "/v1/users", .handler = Call<&IdentityApi::ListUsers>},
      {.method = "POST", .pattern = "/v1/users", .handler = Call<&IdentityApi::CreateUser>},
      {.method = "GET", .pattern = "/v1/users/{id}", .handler = Call<&IdentityApi::GetUser>},
      {.method = "DELETE", .pattern = "/v1/users/{id}", .handler = Call<&IdentityApi::DeleteUser>},
      {.method = "GET",
       .pattern = "/v1/users/{id}/s3-keys",
       .handler = Call<&IdentityApi::ListS3Keys>},
      {.method = "POST",
       .pattern = "/v1/users/{id}/s3-keys",
       .handler = Call<&IdentityApi::CreateS3Key>},
      {.method = "DELETE",
       .pattern = "/v1/s3-keys/{key}",
       .handler = Call<&IdentityApi::DeleteS3Key>},
      {.method = "GET", .pattern = "/v1/projects", .handler = Call<&IdentityApi::ListProjects>},
      {.method = "POST", .pattern = "/v1/projects", .handler = Call<&IdentityApi::CreateProject>},
      {.method = "GET", .pattern = "/v1/projects/{id}", .handler = Call<&IdentityApi::GetProject>},
      {.method = "PATCH",
       .pattern = "/v1/projects/{id}",
       .handler = Call<&IdentityApi::UpdateProject>},
      {.method = "GET",
       .pattern = "/v1/projects/{id}/members",
       .handler = Call<&IdentityApi::ListMembers>},
      {.method = "GET",
       .pattern = "/v1/projects/{id}/quota",
       .handler = Call<&IdentityApi::GetQuota>},
      {.method = "PUT",
       .pattern = "/v1/projects/{id}/quota",
       .handler = Call<&IdentityApi::SetQuota>},
      {.method = "POST",
       .pattern = "/v1/projects/{id}/members/{user}",
       .handler = Call<&IdentityApi::SetMember>},
      {.method = "DELETE",
       .pattern = "/v1/projects/{id}/members/{user}",
       .handler = Call<&IdentityApi::RemoveMember>},
      {.method = "GET", .pattern = "/v1/tokens", .handler = Call<&IdentityApi::ListTokens>},
      {.method = "POST", .pattern = "/v1/tokens", .handler = Call<&IdentityApi::CreateToken>},
      {.method = "DELETE",
       .pattern = "/v1/tokens/{id}",
       .handler = Call<&IdentityApi::RevokeToken>},
      {.method = "GET", .pattern = "/v1/datastores", .handler = Call<&IdentityApi::ListDatastores>},
      {.method = "POST",
       .pattern = "/v1/datastores",
       .handler = Call<&IdentityApi::CreateDatastore>},
      {.method = "GET",
       .pattern = "/v1/datastores/{alias}",
       .handler = Call<&IdentityApi::GetDatastore>},
      {.method = "DELETE",
       .pattern = "/v1/datastores/{alias}",
       .handler = Call<&IdentityApi::DeleteDatastore>},
  };
  return kRoutes;
}

}  // namespace sovai::control::rest
