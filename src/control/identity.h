// Identity: users, projects (tenants), memberships, API tokens and the records of S3 access keys,
// stored in the control database.
//
// Model.
//   * A user belongs to projects through memberships; a membership has a role.
//   * Roles are ordered read < operator < admin. `read` may only read; `operator` may also create
//     and stop workloads in its project (and manage its own tokens and S3 keys); `admin` may do
//     everything in its project.
//   * One project is the system project, named `default`, created at the first start. An admin of
//     the system project is a *platform admin*: it administers every user, project and token.
//     Any other project sees nothing of the others.
//   * An API token ("sov_" + 43 base64url characters) belongs to one user and one project, has a
//     role, an optional label selector ("team=nlp,env=prod": the token may only touch resources
//     carrying all those labels) and an optional expiry. Only its SHA-256 is stored; the token
//     itself is returned once, by CreateToken. The token's effective role is the lower of its own
//     role and its user's current role in the project, so demoting or removing a member takes
//     effect on the next request.
//   * The bootstrap admin (admin.json, bootstrap.h) is imported at every start as user `admin`,
//     admin of `default`, with the admin.json token; it cannot be deleted, demoted or revoked
//     through the API (rotate it in admin.json instead).
//
// Errors are Statuses whose messages say what to do; they name values, not request fields (the
// REST layer adds field names). NotFound for unknown ids, AlreadyExists for taken names,
// FailedPrecondition for rules about the bootstrap identity and limits, PermissionDenied when a
// token would exceed its user's role, Unauthenticated from Authenticate.
//
// Thread-safety: Identity is thread-safe; every write is one transaction of ControlDb (which
// serializes access to the connection). It holds no other mutable state.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "base/ulid.h"
#include "control/bootstrap.h"
#include "control/db.h"
#include "control/limits.h"

namespace sovai::control {

// Ordered: a higher value may do everything a lower one may.
enum class Role : uint8_t { kRead = 0, kOperator = 1, kAdmin = 2 };

// "read", "operator", "admin".
std::string_view RoleName(Role role);
// InvalidArgument for anything but the three names (case-sensitive).
base::Result<Role> ParseRole(std::string_view text);

// A conjunction of key=value requirements. Keys and values are 1–63 characters of
// [A-Za-z0-9._-] starting and ending with a letter or digit; at most kMaxSelectorLabels pairs;
// a key appears once. The empty selector matches everything.
class LabelSelector {
 public:
  LabelSelector() = default;

  // Parses "k1=v1,k2=v2" (spaces around items are not allowed); "" gives the empty selector.
  // Errors: InvalidArgument saying which item is wrong.
  static base::Result<LabelSelector> Parse(std::string_view text);

  bool empty() const { return labels_.empty(); }
  const std::map<std::string, std::string>& labels() const { return labels_; }
  // Whether `labels` carries every key=value of this selector.
  bool Matches(const std::map<std::string, std::string>& labels) const;
  // Whether this selector is at least as narrow as `other` (it requires everything `other`
  // requires, and maybe more).
  bool Includes(const LabelSelector& other) const { return other.Matches(labels_); }
  // Canonical text: pairs sorted by key, "" when empty. Parse(ToString()) gives the same value.
  std::string ToString() const;

  friend bool operator==(const LabelSelector&, const LabelSelector&) = default;

 private:
  std::map<std::string, std::string> labels_;
};

struct User {
  std::string id;  // "usr_<ULID>"
  std::string name;
  std::string display_name;
  std::string email;
  bool bootstrap = false;
  int64_t created_at_us = 0;
};

struct Project {
  std::string id;  // "prj_<ULID>"
  std::string name;
  std::string description;
  bool system = false;  // the `default` project; its admins are platform admins
  int64_t created_at_us = 0;
  // Regions besides the server's own whose buckets the project's workloads may mount
  // (regions.h, docs/sovereignty.md): canonical names, sorted, no duplicates; empty by default.
  std::vector<std::string> allowed_regions;
};

struct Membership {
  std::string project_id;
  std::string user_id;
  Role role = Role::kRead;
  int64_t created_at_us = 0;
};

struct ApiToken {
  std::string id;  // "tok_<ULID>"
  std::string user_id;
  std::string project_id;
  Role role = Role::kRead;
  LabelSelector selector;
  std::string name;
  bool bootstrap = false;
  int64_t created_at_us = 0;
  std::optional<int64_t> expires_at_us;
  std::optional<int64_t> revoked_at_us;
};

struct CreatedToken {
  ApiToken token;
  std::string secret;  // "sov_...": shown once, never stored
};

struct S3KeyRecord {
  std::string access_key_id;
  std::string user_id;
  bool bootstrap = false;
  int64_t created_at_us = 0;
};

// Who a request acts as: an authenticated, un-revoked, un-expired token of a current member.
struct Principal {
  ApiToken token;
  User user;
  Project project;
  Role role = Role::kRead;  // min(token.role, membership role)

  bool platform_admin() const { return role == Role::kAdmin && project.system; }
};

// Lists are ordered by id (creation order for ULID ids); `after` is the exclusive cursor, the
// last id of the previous page ("" for the first page).
struct PageRequest {
  int64_t limit = kDefaultPageSize;  // 1..kMaxPageSize (SOVAI_CHECK: the REST layer validates)
  std::string after;
};

template <typename T>
struct Page {
  std::vector<T> items;
  std::optional<std::string> next_cursor;  // set when more items follow
};

struct NewUser {
  std::string name;
  std::string display_name;
  std::string email;
};

struct NewProject {
  std::string name;
  std::string description;
};

struct NewToken {
  std::string user_id;
  std::string project_id;
  Role role = Role::kRead;
  LabelSelector selector;
  std::string name;
  std::optional<int64_t> expires_at_us;
};

struct TokenFilter {
  std::optional<std::string> user_id;
  std::optional<std::string> project_id;
  // Only tokens whose selector includes this one (a selector-limited caller sees only tokens at
  // least as narrow as itself).
  LabelSelector must_include;
};

// Validators shared with the REST layer. InvalidArgument messages say what is allowed and quote
// (a bounded prefix of) the bad value.
base::Status ValidateName(std::string_view name);  // users and projects
base::Status ValidateDisplayName(std::string_view text);
base::Status ValidateEmail(std::string_view email);  // "" allowed
base::Status ValidateDescription(std::string_view text);
base::Status ValidateTokenName(std::string_view text);

// The system project's fixed name.
inline constexpr char kSystemProjectName[] = "default";

class Identity {
 public:
  // `db` and `env` (clock for timestamps and expiry) must outlive this object.
  Identity(ControlDb& db, base::Env& env) : db_(db), env_(env) {}

  // Makes the bootstrap admin of admin.json usable: ensures the system project `default`, the
  // user `admin.user` (marked bootstrap), its admin membership of `default`, the token
  // `admin.api_token` (role admin, no selector, no expiry; an older bootstrap token is revoked)
  // and the record of `admin.access_key_id` (when not empty). Idempotent; one transaction.
  base::Status ImportBootstrapAdmin(const AdminCredentials& admin);

  // --- Users -----------------------------------------------------------------------------------
  // Errors: InvalidArgument (validators), AlreadyExists (name taken).
  base::Result<User> CreateUser(const NewUser& user);
  base::Result<User> GetUser(std::string_view id);
  // The one user with this e-mail address (compared case-insensitively); nullopt when none has
  // it, when two users share it, or for "".
  base::Result<std::optional<User>> FindUserByEmail(std::string_view email);
  // All users, or only members of `member_of`.
  base::Result<Page<User>> ListUsers(const PageRequest& page,
                                     const std::optional<std::string>& member_of = std::nullopt);
  // Deletes the user, its memberships, tokens and S3 key records (the caller revokes the keys in
  // the object store first). FailedPrecondition for the bootstrap admin.
  base::Status DeleteUser(std::string_view id);
  // Whether `user_id` is a member of `project_id`.
  base::Result<std::optional<Membership>> GetMembership(std::string_view project_id,
                                                        std::string_view user_id);

  // --- Projects --------------------------------------------------------------------------------
  base::Result<Project> CreateProject(const NewProject& project);
  base::Result<Project> GetProject(std::string_view id);
  base::Result<Project> SystemProject();
  base::Result<Page<Project>> ListProjects(const PageRequest& page);
  // Replaces the project's allowed_regions with `regions` (names in any case; stored in
  // uppercase, sorted, duplicates dropped). Whether the server knows them is the caller's check.
  // Errors: NotFound; InvalidArgument for a malformed name (ValidateRegionName) or more than
  // kMaxAllowedRegions names.
  base::Result<Project> SetAllowedRegions(std::string_view project_id,
                                          const std::vector<std::string>& regions);

  // Adds `user_id` to `project_id` with `role`, or changes its role. Returns the membership and
  // whether it is new. NotFound for an unknown project or user; FailedPrecondition for the
  // bootstrap admin's membership of the system project.
  base::Result<std::pair<Membership, bool>> SetMember(std::string_view project_id,
                                                      std::string_view user_id, Role role);
  // Removes the membership and revokes the user's tokens in that project. NotFound when not a
  // member; FailedPrecondition for the bootstrap admin in the system project.
  base::Status RemoveMember(std::string_view project_id, std::string_view user_id);
  // Ordered by user id; the cursor is a user id.
  base::Result<Page<Membership>> ListMembers(std::string_view project_id, const PageRequest& page);

  // --- Tokens ----------------------------------------------------------------------------------
  // Errors: NotFound (user, project); FailedPrecondition (not a member; more than
  // kMaxActiveTokensPerUserProject un-revoked tokens); PermissionDenied (role above the user's
  // role in the project); InvalidArgument (expiry not in the future, name).
  base::Result<CreatedToken> CreateToken(const NewToken& request);
  base::Result<ApiToken> GetToken(std::string_view id);
  // Revoked tokens are listed too (with revoked_at), so that the history stays visible.
  base::Result<Page<ApiToken>> ListTokens(const TokenFilter& filter, const PageRequest& page);
  // Marks the token revoked (idempotent). NotFound; FailedPrecondition for the bootstrap token.
  base::Status RevokeToken(std::string_view id);

  // Resolves a bearer token (the text after "Bearer "). Unauthenticated, with the reason, for an
  // unknown, revoked or expired token, or one whose user left the project. The hash is looked up
  // through the index and then compared in constant time; the lookup's timing can at most reveal
  // bytes of the SHA-256, which does not help find a token.
  base::Result<Principal> Authenticate(std::string_view bearer);

  // --- S3 access key records ---------------------------------------------------------------
  // Records a key issued to `user_id`. NotFound (user), AlreadyExists, FailedPrecondition when the
  // user already has kMaxS3KeysPerUser keys.
  base::Status AddS3Key(std::string_view user_id, std::string_view access_key_id);
  base::Result<int64_t> CountS3Keys(std::string_view user_id);
  base::Result<S3KeyRecord> GetS3Key(std::string_view access_key_id);
  // Ordered by access key id; the cursor is an access key id.
  base::Result<Page<S3KeyRecord>> ListS3Keys(std::string_view user_id, const PageRequest& page);
  // Deletes the record. NotFound; FailedPrecondition for the bootstrap admin's key.
  base::Status RemoveS3Key(std::string_view access_key_id);

 private:
  std::string NewId(std::string_view prefix) {
    return std::string(prefix) + ulids_.Next().ToString();
  }

  ControlDb& db_;
  base::Env& env_;
  base::UlidGenerator ulids_;  // thread-safe
};

}  // namespace sovai::control
