#include "control/identity.h"

#include <algorithm>

#include "base/crypto.h"
#include "base/strings.h"
#include "base/time.h"
#include "control/regions.h"

namespace sovai::control {

namespace {

using base::Database;
using base::Statement;
using base::Status;

// Quotes a value for an error message, bounded so that a megabyte of garbage stays out of logs.
std::string Quote(std::string_view value) {
  constexpr size_t kMaxQuoted = 64;
  if (value.size() <= kMaxQuoted) return "'" + std::string(value) + "'";
  return "'" + std::string(value.substr(0, kMaxQuoted)) + "...'";
}

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }
bool IsLabelChar(char c) { return IsAlnum(c) || c == '.' || c == '_' || c == '-'; }

// Free text: bounded, no control characters except (where allowed) newline and tab.
Status ValidateText(std::string_view text, size_t max_bytes, bool multiline, const char* what) {
  if (text.size() > max_bytes) {
    return base::InvalidArgumentError(std::string(what) + " is " + std::to_string(text.size()) +
                                      " bytes; the limit is " + std::to_string(max_bytes));
  }
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && !(multiline && (c == '\n' || c == '\t'))) || u == 0x7f) {
      return base::InvalidArgumentError(std::string(what) + " must not contain control characters");
    }
  }
  return Status();
}

Status ValidateLabelPart(std::string_view part, size_t max_bytes, std::string_view item,
                         const char* what) {
  if (part.empty() || part.size() > max_bytes || !IsAlnum(part.front()) || !IsAlnum(part.back()) ||
      !std::all_of(part.begin(), part.end(), IsLabelChar)) {
    return base::InvalidArgumentError(
        "label selector item " + Quote(item) + ": the " + what + " must be 1 to " +
        std::to_string(max_bytes) +
        " characters of A-Z, a-z, 0-9, '.', '_' and '-', starting and ending with a letter or "
        "digit");
  }
  return Status();
}

// Roles are stored by name; the CHECK constraint keeps other text out, so a failure here means
// the file was edited behind our back.
base::Result<Role> RoleFromDb(const std::string& text) {
  auto role = ParseRole(text);
  if (!role.ok())
    return base::DataLossError("control database holds an unknown role " + Quote(text));
  return *role;
}

std::optional<int64_t> OptionalInt(const Statement& st, int col) {
  if (st.ColumnIsNull(col)) return std::nullopt;
  return st.ColumnInt(col);
}

void BindOptionalInt(Statement& st, int index, const std::optional<int64_t>& value) {
  if (value) {
    st.Bind(index, *value);
  } else {
    st.BindNull(index);
  }
}

constexpr char kUserColumns[] = "u.id, u.name, u.display_name, u.email, u.bootstrap, u.created_at";
constexpr int kUserColumnCount = 6;
User ReadUser(const Statement& st, int col) {
  return User{.id = st.ColumnText(col),
              .name = st.ColumnText(col + 1),
              .display_name = st.ColumnText(col + 2),
              .email = st.ColumnText(col + 3),
              .bootstrap = st.ColumnInt(col + 4) != 0,
              .created_at_us = st.ColumnInt(col + 5)};
}

constexpr char kProjectColumns[] =
    "p.id, p.name, p.description, p.system, p.created_at, p.allowed_regions";
constexpr int kProjectColumnCount = 6;
Project ReadProject(const Statement& st, int col) {
  Project p{.id = st.ColumnText(col),
            .name = st.ColumnText(col + 1),
            .description = st.ColumnText(col + 2),
            .system = st.ColumnInt(col + 3) != 0,
            .created_at_us = st.ColumnInt(col + 4)};
  // Canonical names joined by ',' (migration project_regions).
  const std::string regions = st.ColumnText(col + 5);
  for (std::string_view region : base::Split(regions, ',')) {
    if (!region.empty()) p.allowed_regions.emplace_back(region);
  }
  return p;
}

constexpr char kTokenColumns[] =
    "t.id, t.user_id, t.project_id, t.role, t.selector, t.name, t.bootstrap, t.created_at, "
    "t.expires_at, t.revoked_at";
constexpr int kTokenColumnCount = 10;
base::Result<ApiToken> ReadToken(const Statement& st, int col) {
  ApiToken t;
  t.id = st.ColumnText(col);
  t.user_id = st.ColumnText(col + 1);
  t.project_id = st.ColumnText(col + 2);
  SOVAI_ASSIGN_OR_RETURN(t.role, RoleFromDb(st.ColumnText(col + 3)));
  auto selector = LabelSelector::Parse(st.ColumnText(col + 4));
  if (!selector.ok()) {
    return base::DataLossError("control database holds a bad selector for token " + t.id + ": " +
                               selector.status().message());
  }
  t.selector = std::move(*selector);
  t.name = st.ColumnText(col + 5);
  t.bootstrap = st.ColumnInt(col + 6) != 0;
  t.created_at_us = st.ColumnInt(col + 7);
  t.expires_at_us = OptionalInt(st, col + 8);
  t.revoked_at_us = OptionalInt(st, col + 9);
  return t;
}

constexpr char kMembershipColumns[] = "m.project_id, m.user_id, m.role, m.created_at";
base::Result<Membership> ReadMembership(const Statement& st, int col) {
  Membership m;
  m.project_id = st.ColumnText(col);
  m.user_id = st.ColumnText(col + 1);
  SOVAI_ASSIGN_OR_RETURN(m.role, RoleFromDb(st.ColumnText(col + 2)));
  m.created_at_us = st.ColumnInt(col + 3);
  return m;
}

constexpr char kS3KeyColumns[] = "k.access_key_id, k.user_id, k.bootstrap, k.created_at";
S3KeyRecord ReadS3Key(const Statement& st, int col) {
  return S3KeyRecord{.access_key_id = st.ColumnText(col),
                     .user_id = st.ColumnText(col + 1),
                     .bootstrap = st.ColumnInt(col + 2) != 0,
                     .created_at_us = st.ColumnInt(col + 3)};
}

// Runs a page query whose last two parameters are (after, limit + 1), and fills `out` through
// `read`; `id_of` gives the cursor of an item.
template <typename T, typename ReadFn, typename IdFn>
Status FetchPage(Statement& st, int first_page_param, const PageRequest& page, ReadFn read,
                 IdFn id_of, Page<T>* out) {
  SOVAI_CHECK(page.limit >= 1 && page.limit <= kMaxPageSize) << page.limit;
  st.Bind(first_page_param, page.after).Bind(first_page_param + 1, page.limit + 1);
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    SOVAI_ASSIGN_OR_RETURN(T item, read(st));
    out->items.push_back(std::move(item));
  }
  if (static_cast<int64_t>(out->items.size()) > page.limit) {
    out->items.pop_back();
    out->next_cursor = id_of(out->items.back());
  }
  return Status();
}

template <typename T>
base::Result<T> Wrap(T value) {
  return value;
}

// Existence checks inside a transaction.
base::Result<bool> Exists(Database& db, const char* sql, std::string_view id) {
  SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(sql));
  st.Bind(1, id);
  return st.Step();
}

base::Result<User> LoadUser(Database& db, std::string_view id) {
  SOVAI_ASSIGN_OR_RETURN(
      auto st, db.Prepare(std::string("SELECT ") + kUserColumns + " FROM users u WHERE u.id = ?"));
  st.Bind(1, id);
  SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return base::NotFoundError("user " + Quote(id) + " not found");
  return ReadUser(st, 0);
}

base::Result<Project> LoadProject(Database& db, std::string_view id) {
  SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(std::string("SELECT ") + kProjectColumns +
                                             " FROM projects p WHERE p.id = ?"));
  st.Bind(1, id);
  SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return base::NotFoundError("project " + Quote(id) + " not found");
  return ReadProject(st, 0);
}

base::Result<std::optional<Membership>> LoadMembership(Database& db, std::string_view project_id,
                                                       std::string_view user_id) {
  SOVAI_ASSIGN_OR_RETURN(
      auto st, db.Prepare(std::string("SELECT ") + kMembershipColumns +
                          " FROM memberships m WHERE m.project_id = ? AND m.user_id = ?"));
  st.Bind(1, project_id).Bind(2, user_id);
  SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<Membership>();
  SOVAI_ASSIGN_OR_RETURN(Membership m, ReadMembership(st, 0));
  return std::optional<Membership>(std::move(m));
}

// The bootstrap admin's membership of the system project is what keeps admin.json's token an
// admin token; the API must not take it away.
base::Result<bool> IsBootstrapSystemMembership(Database& db, std::string_view project_id,
                                               std::string_view user_id) {
  SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT 1 FROM users u, projects p WHERE u.id = ? "
                                             "AND u.bootstrap = 1 AND p.id = ? AND p.system = 1"));
  st.Bind(1, user_id).Bind(2, project_id);
  return st.Step();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kRead:
      return "read";
    case Role::kOperator:
      return "operator";
    case Role::kAdmin:
      return "admin";
  }
  return "read";
}

base::Result<Role> ParseRole(std::string_view text) {
  if (text == "read") return Role::kRead;
  if (text == "operator") return Role::kOperator;
  if (text == "admin") return Role::kAdmin;
  return base::InvalidArgumentError("role " + Quote(text) +
                                    " is not one of 'admin', 'operator', 'read'");
}

base::Result<LabelSelector> LabelSelector::Parse(std::string_view text) {
  LabelSelector selector;
  if (text.empty()) return selector;
  std::vector<std::string_view> items = base::Split(text, ',');
  if (items.size() > kMaxSelectorLabels) {
    return base::InvalidArgumentError("label selector has " + std::to_string(items.size()) +
                                      " items; the limit is " + std::to_string(kMaxSelectorLabels));
  }
  for (std::string_view item : items) {
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return base::InvalidArgumentError("label selector item " + Quote(item) +
                                        " is not of the form key=value");
    }
    std::string_view key = item.substr(0, eq);
    std::string_view value = item.substr(eq + 1);
    SOVAI_RETURN_IF_ERROR(ValidateLabelPart(key, kMaxLabelKeyBytes, item, "key"));
    SOVAI_RETURN_IF_ERROR(ValidateLabelPart(value, kMaxLabelValueBytes, item, "value"));
    if (!selector.labels_.emplace(std::string(key), std::string(value)).second) {
      return base::InvalidArgumentError("label selector names the key " + Quote(key) + " twice");
    }
  }
  return selector;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  for (const auto& [key, value] : labels_) {
    auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return false;
  }
  return true;
}

std::string LabelSelector::ToString() const {
  std::string out;
  for (const auto& [key, value] : labels_) {
    if (!out.empty()) out += ',';
    out += key + "=" + value;
  }
  return out;
}

Status ValidateName(std::string_view name) {
  bool ok = !name.empty() && name.size() <= kMaxNameBytes && IsLowerAlnum(name.front()) &&
            std::all_of(name.begin(), name.end(),
                        [](char c) { return IsLowerAlnum(c) || c == '.' || c == '_' || c == '-'; });
  if (!ok) {
    return base::InvalidArgumentError(
        "name " + Quote(name) + " must be 1 to " + std::to_string(kMaxNameBytes) +
        " characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit");
  }
  return Status();
}

Status ValidateDisplayName(std::string_view text) {
  return ValidateText(text, kMaxDisplayNameBytes, false, "display name");
}

Status ValidateEmail(std::string_view email) {
  if (email.empty()) return Status();
  SOVAI_RETURN_IF_ERROR(ValidateText(email, kMaxEmailBytes, false, "email"));
  size_t at = email.find('@');
  if (at == 0 || at == std::string_view::npos || at + 1 == email.size() ||
      email.find('@', at + 1) != std::string_view::npos ||
      email.find(' ') != std::string_view::npos) {
    return base::InvalidArgumentError("email " + Quote(email) +
                                      " is not an address of the form user@domain");
  }
  return Status();
}

Status ValidateDescription(std::string_view text) {
  return ValidateText(text, kMaxDescriptionBytes, true, "description");
}

Status ValidateTokenName(std::string_view text) {
  return ValidateText(text, kMaxTokenNameBytes, false, "token name");
}

// ---------------------------------------------------------------------------------------------
Status Identity::ImportBootstrapAdmin(const AdminCredentials& admin) {
  SOVAI_RETURN_IF_ERROR(ValidateName(admin.user).WithContext("bootstrap admin user"));
  if (admin.api_token.empty() || admin.api_token.size() > kMaxBearerTokenBytes) {
    return base::InvalidArgumentError("bootstrap admin token must be 1 to " +
                                      std::to_string(kMaxBearerTokenBytes) + " characters");
  }
  const int64_t now = env_.NowUnixMicros();
  const std::string hash = base::Sha256(admin.api_token);
  return db_.Write([&](Database& db) -> Status {
    // 1. The system project.
    std::string project_id;
    {
      SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT id FROM projects WHERE system = 1"));
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (row) project_id = st.ColumnText(0);
    }
    if (project_id.empty()) {
      SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT id FROM projects WHERE name = ?"));
      st.Bind(1, kSystemProjectName);
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (row) {
        project_id = st.ColumnText(0);
        SOVAI_ASSIGN_OR_RETURN(auto mark,
                               db.Prepare("UPDATE projects SET system = 1 WHERE id = ?"));
        mark.Bind(1, project_id);
        SOVAI_RETURN_IF_ERROR(mark.Run());
      } else {
        project_id = NewId("prj_");
        SOVAI_ASSIGN_OR_RETURN(auto ins, db.Prepare("INSERT INTO projects(id, name, description, "
                                                    "system, created_at) VALUES (?, ?, ?, 1, ?)"));
        ins.Bind(1, project_id)
            .Bind(2, kSystemProjectName)
            .Bind(3, "Platform administration: its admins administer every project")
            .Bind(4, now);
        SOVAI_RETURN_IF_ERROR(ins.Run());
      }
    }
    // 2. The bootstrap user.
    std::string user_id;
    {
      SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT id FROM users WHERE bootstrap = 1"));
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (row) user_id = st.ColumnText(0);
    }
    if (user_id.empty()) {
      SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT id FROM users WHERE name = ?"));
      st.Bind(1, admin.user);
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (row) {
        user_id = st.ColumnText(0);
        SOVAI_ASSIGN_OR_RETURN(auto mark,
                               db.Prepare("UPDATE users SET bootstrap = 1 WHERE id = ?"));
        mark.Bind(1, user_id);
        SOVAI_RETURN_IF_ERROR(mark.Run());
      } else {
        user_id = NewId("usr_");
        SOVAI_ASSIGN_OR_RETURN(auto ins,
                               db.Prepare("INSERT INTO users(id, name, display_name, "
                                          "bootstrap, created_at) VALUES (?, ?, ?, 1, ?)"));
        ins.Bind(1, user_id).Bind(2, admin.user).Bind(3, "Bootstrap administrator").Bind(4, now);
        SOVAI_RETURN_IF_ERROR(ins.Run());
      }
    }
    // 3. Admin of the system project.
    {
      SOVAI_ASSIGN_OR_RETURN(
          auto st, db.Prepare("INSERT INTO memberships(project_id, user_id, role, created_at) "
                              "VALUES (?, ?, 'admin', ?) ON CONFLICT(project_id, user_id) "
                              "DO UPDATE SET role = 'admin'"));
      st.Bind(1, project_id).Bind(2, user_id).Bind(3, now);
      SOVAI_RETURN_IF_ERROR(st.Run());
    }
    // 4. The token: admin.json may have been replaced (a rotation); the old one stops working.
    {
      SOVAI_ASSIGN_OR_RETURN(auto revoke, db.Prepare("UPDATE tokens SET revoked_at = ? WHERE "
                                                     "bootstrap = 1 AND revoked_at IS NULL AND "
                                                     "hash != ?"));
      revoke.Bind(1, now).BindBlob(2, hash);
      SOVAI_RETURN_IF_ERROR(revoke.Run());
      SOVAI_ASSIGN_OR_RETURN(
          auto upsert,
          db.Prepare("INSERT INTO tokens(id, hash, user_id, project_id, role, selector, name, "
                     "bootstrap, created_at) VALUES (?, ?, ?, ?, 'admin', '', ?, 1, ?) "
                     "ON CONFLICT(hash) DO UPDATE SET user_id = excluded.user_id, project_id = "
                     "excluded.project_id, role = 'admin', selector = '', bootstrap = 1, "
                     "expires_at = NULL, revoked_at = NULL"));
      upsert.Bind(1, NewId("tok_"))
          .BindBlob(2, hash)
          .Bind(3, user_id)
          .Bind(4, project_id)
          .Bind(5, "bootstrap admin (admin.json)")
          .Bind(6, now);
      SOVAI_RETURN_IF_ERROR(upsert.Run());
    }
    // 5. The admin's S3 key. An older bootstrap key becomes an ordinary one, revocable by API.
    if (!admin.access_key_id.empty()) {
      SOVAI_ASSIGN_OR_RETURN(auto demote, db.Prepare("UPDATE s3_keys SET bootstrap = 0 WHERE "
                                                     "bootstrap = 1 AND access_key_id != ?"));
      demote.Bind(1, admin.access_key_id);
      SOVAI_RETURN_IF_ERROR(demote.Run());
      SOVAI_ASSIGN_OR_RETURN(
          auto upsert, db.Prepare("INSERT INTO s3_keys(access_key_id, user_id, bootstrap, "
                                  "created_at) VALUES (?, ?, 1, ?) ON CONFLICT(access_key_id) DO "
                                  "UPDATE SET user_id = excluded.user_id, bootstrap = 1"));
      upsert.Bind(1, admin.access_key_id).Bind(2, user_id).Bind(3, now);
      SOVAI_RETURN_IF_ERROR(upsert.Run());
    }
    return Status();
  });
}

// --- Users -------------------------------------------------------------------------------------
base::Result<User> Identity::CreateUser(const NewUser& request) {
  SOVAI_RETURN_IF_ERROR(ValidateName(request.name));
  SOVAI_RETURN_IF_ERROR(ValidateDisplayName(request.display_name));
  SOVAI_RETURN_IF_ERROR(ValidateEmail(request.email));
  User user{.id = NewId("usr_"),
            .name = request.name,
            .display_name = request.display_name,
            .email = request.email,
            .created_at_us = env_.NowUnixMicros()};
  SOVAI_RETURN_IF_ERROR(db_.Write([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(bool taken, Exists(db, "SELECT 1 FROM users WHERE name = ?", user.name));
    if (taken) {
      return base::AlreadyExistsError("a user named " + Quote(user.name) +
                                      " already exists; choose another name");
    }
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("INSERT INTO users(id, name, display_name, email, "
                                               "created_at) VALUES (?, ?, ?, ?, ?)"));
    st.Bind(1, user.id)
        .Bind(2, user.name)
        .Bind(3, user.display_name)
        .Bind(4, user.email)
        .Bind(5, user.created_at_us);
    return st.Run();
  }));
  return user;
}

base::Result<User> Identity::GetUser(std::string_view id) {
  User user;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(user, LoadUser(db, id));
    return Status();
  }));
  return user;
}

base::Result<std::optional<User>> Identity::FindUserByEmail(std::string_view email) {
  std::optional<User> found;
  if (email.empty()) return found;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(auto st,
                           db.Prepare(std::string("SELECT ") + kUserColumns +
                                      " FROM users u WHERE lower(u.email) = lower(?) LIMIT 2"));
    st.Bind(1, email);
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return Status();
    User user = ReadUser(st, 0);
    SOVAI_ASSIGN_OR_RETURN(bool second, st.Step());
    if (!second) found = std::move(user);  // an address two users share names neither
    return Status();
  }));
  return found;
}

base::Result<Page<User>> Identity::ListUsers(const PageRequest& page,
                                             const std::optional<std::string>& member_of) {
  Page<User> out;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    std::string sql = std::string("SELECT ") + kUserColumns + " FROM users u";
    if (member_of) {
      sql += " JOIN memberships m ON m.user_id = u.id WHERE m.project_id = ? AND u.id > ?";
    } else {
      sql += " WHERE u.id > ?";
    }
    sql += " ORDER BY u.id LIMIT ?";
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(sql));
    int param = 1;
    if (member_of) st.Bind(param++, *member_of);
    return FetchPage<User>(
        st, param, page, [](const Statement& s) { return Wrap(ReadUser(s, 0)); },
        [](const User& u) { return u.id; }, &out);
  }));
  return out;
}

Status Identity::DeleteUser(std::string_view id) {
  return db_.Write([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(User user, LoadUser(db, id));
    if (user.bootstrap) {
      return base::FailedPreconditionError(
          "user " + Quote(user.name) +
          " is the bootstrap admin of admin.json and cannot be deleted");
    }
    // Memberships, tokens and S3 key records go with it (ON DELETE CASCADE).
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("DELETE FROM users WHERE id = ?"));
    st.Bind(1, id);
    return st.Run();
  });
}

base::Result<std::optional<Membership>> Identity::GetMembership(std::string_view project_id,
                                                                std::string_view user_id) {
  std::optional<Membership> out;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(out, LoadMembership(db, project_id, user_id));
    return Status();
  }));
  return out;
}

// --- Projects ----------------------------------------------------------------------------------
base::Result<Project> Identity::CreateProject(const NewProject& request) {
  SOVAI_RETURN_IF_ERROR(ValidateName(request.name));
  SOVAI_RETURN_IF_ERROR(ValidateDescription(request.description));
  Project project{.id = NewId("prj_"),
                  .name = request.name,
                  .description = request.description,
                  .created_at_us = env_.NowUnixMicros()};
  SOVAI_RETURN_IF_ERROR(db_.Write([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(bool taken,
                           Exists(db, "SELECT 1 FROM projects WHERE name = ?", project.name));
    if (taken) {
      return base::AlreadyExistsError("a project named " + Quote(project.name) +
                                      " already exists; choose another name");
    }
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("INSERT INTO projects(id, name, description, "
                                               "created_at) VALUES (?, ?, ?, ?)"));
    st.Bind(1, project.id)
        .Bind(2, project.name)
        .Bind(3, project.description)
        .Bind(4, project.created_at_us);
    return st.Run();
  }));
  return project;
}

base::Result<Project> Identity::GetProject(std::string_view id) {
  Project project;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(project, LoadProject(db, id));
    return Status();
  }));
  return project;
}

base::Result<Project> Identity::SetAllowedRegions(std::string_view project_id,
                                                  const std::vector<std::string>& regions) {
  if (regions.size() > kMaxAllowedRegions) {
    return base::InvalidArgumentError("a project may allow at most " +
                                      std::to_string(kMaxAllowedRegions) + " other regions; " +
                                      std::to_string(regions.size()) + " were given");
  }
  std::vector<std::string> canonical;
  for (const std::string& region : regions) {
    std::string upper = base::AsciiToUpper(region);
    SOVAI_RETURN_IF_ERROR(ValidateRegionName(upper));
    canonical.push_back(std::move(upper));
  }
  std::sort(canonical.begin(), canonical.end());
  canonical.erase(std::unique(canonical.begin(), canonical.end()), canonical.end());
  Project project;
  SOVAI_RETURN_IF_ERROR(db_.Write([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(auto st,
                           db.Prepare("UPDATE projects SET allowed_regions = ? WHERE id = ?"));
    st.Bind(1, base::Join(canonical, ",")).Bind(2, project_id);
    SOVAI_RETURN_IF_ERROR(st.Run());
    SOVAI_ASSIGN_OR_RETURN(project, LoadProject(db, project_id));
    return Status();
  }));
  return project;
}

base::Result<Project> Identity::SystemProject() {
  Project project;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(std::string("SELECT ") + kProjectColumns +
                                               " FROM projects p WHERE p.system = 1"));
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) {
      return base::FailedPreconditionError(
          "the system project does not exist yet: the bootstrap admin was not imported");
    }
    project = ReadProject(st, 0);
    return Status();
  }));
  return project;
}

base::Result<Page<Project>> Identity::ListProjects(const PageRequest& page) {
  Page<Project> out;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(std::string("SELECT ") + kProjectColumns +
                                               " FROM projects p WHERE p.id > ? ORDER BY p.id "
                                               "LIMIT ?"));
    return FetchPage<Project>(
        st, 1, page, [](const Statement& s) { return Wrap(ReadProject(s, 0)); },
        [](const Project& p) { return p.id; }, &out);
  }));
  return out;
}

base::Result<std::pair<Membership, bool>> Identity::SetMember(std::string_view project_id,
                                                              std::string_view user_id, Role role) {
  Membership membership{.project_id = std::string(project_id),
                        .user_id = std::string(user_id),
                        .role = role,
                        .created_at_us = env_.NowUnixMicros()};
  bool created = false;
  SOVAI_RETURN_IF_ERROR(db_.Write([&](Database& db) -> Status {
    SOVAI_RETURN_IF_ERROR(LoadProject(db, project_id));
    SOVAI_RETURN_IF_ERROR(LoadUser(db, user_id));
    SOVAI_ASSIGN_OR_RETURN(bool protected_membership,
                           IsBootstrapSystemMembership(db, project_id, user_id));
    if (protected_membership && role != Role::kAdmin) {
      return base::FailedPreconditionError(
          "the bootstrap admin's admin role in the system project cannot be changed");
    }
    SOVAI_ASSIGN_OR_RETURN(auto existing, LoadMembership(db, project_id, user_id));
    created = !existing.has_value();
    if (existing) membership.created_at_us = existing->created_at_us;
    SOVAI_ASSIGN_OR_RETURN(
        auto st, db.Prepare("INSERT INTO memberships(project_id, user_id, role, created_at) "
                            "VALUES (?, ?, ?, ?) ON CONFLICT(project_id, user_id) DO UPDATE SET "
                            "role = excluded.role"));
    st.Bind(1, project_id)
        .Bind(2, user_id)
        .Bind(3, RoleName(role))
        .Bind(4, membership.created_at_us);
    return st.Run();
  }));
  return std::make_pair(std::move(membership), created);
}

Status Identity::RemoveMember(std::string_view project_id, std::string_view user_id) {
  const int64_t now = env_.NowUnixMicros();
  return db_.Write([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(auto existing, LoadMembership(db, project_id, user_id));
    if (!existing) {
      return base::NotFoundError("user " + Quote(user_id) + " is not a member of project " +
                                 Quote(project_id));
    }
    SOVAI_ASSIGN_OR_RETURN(bool protected_membership,
                           IsBootstrapSystemMembership(db, project_id, user_id));
    if (protected_membership) {
      return base::FailedPreconditionError(
          "the bootstrap admin cannot be removed from the system project");
    }
    SOVAI_ASSIGN_OR_RETURN(auto del, db.Prepare("DELETE FROM memberships WHERE project_id = ? AND "
                                                "user_id = ?"));
    del.Bind(1, project_id).Bind(2, user_id);
    SOVAI_RETURN_IF_ERROR(del.Run());
    // Authenticate would already refuse them (no membership); revoking makes it permanent, so
    // that adding the user back later does not bring old tokens back to life.
    SOVAI_ASSIGN_OR_RETURN(auto revoke, db.Prepare("UPDATE tokens SET revoked_at = ? WHERE "
                                                   "project_id = ? AND user_id = ? AND "
                                                   "revoked_at IS NULL"));
    revoke.Bind(1, now).Bind(2, project_id).Bind(3, user_id);
    return revoke.Run();
  });
}

base::Result<Page<Membership>> Identity::ListMembers(std::string_view project_id,
                                                     const PageRequest& page) {
  Page<Membership> out;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_RETURN_IF_ERROR(LoadProject(db, project_id));
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(std::string("SELECT ") + kMembershipColumns +
                                               " FROM memberships m WHERE m.project_id = ? AND "
                                               "m.user_id > ? ORDER BY m.user_id LIMIT ?"));
    st.Bind(1, project_id);
    return FetchPage<Membership>(
        st, 2, page, [](const Statement& s) { return ReadMembership(s, 0); },
        [](const Membership& m) { return m.user_id; }, &out);
  }));
  return out;
}

// --- Tokens ------------------------------------------------------------------------------------
base::Result<CreatedToken> Identity::CreateToken(const NewToken& request) {
  SOVAI_RETURN_IF_ERROR(ValidateTokenName(request.name));
  const int64_t now = env_.NowUnixMicros();
  if (request.expires_at_us && *request.expires_at_us <= now) {
    return base::InvalidArgumentError("expiry " + base::FormatRfc3339(*request.expires_at_us) +
                                      " is not in the future");
  }
  CreatedToken created;
  created.secret = "sov_" + base::Base64UrlEncode(base::RandomBytes(kTokenRandomBytes));
  ApiToken& token = created.token;
  token.id = NewId("tok_");
  token.user_id = request.user_id;
  token.project_id = request.project_id;
  token.role = request.role;
  token.selector = request.selector;
  token.name = request.name;
  token.created_at_us = now;
  token.expires_at_us = request.expires_at_us;
  SOVAI_RETURN_IF_ERROR(db_.Write([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(User user, LoadUser(db, request.user_id));
    SOVAI_ASSIGN_OR_RETURN(Project project, LoadProject(db, request.project_id));
    SOVAI_ASSIGN_OR_RETURN(auto membership, LoadMembership(db, project.id, user.id));
    if (!membership) {
      return base::FailedPreconditionError("user " + Quote(user.name) +
                                           " is not a member of project " + Quote(project.name) +
                                           "; add the user to the project first");
    }
    if (request.role > membership->role) {
      return base::PermissionDeniedError("role '" + std::string(RoleName(request.role)) +
                                         "' exceeds user " + Quote(user.name) + "'s role '" +
                                         std::string(RoleName(membership->role)) + "' in project " +
                                         Quote(project.name));
    }
    SOVAI_ASSIGN_OR_RETURN(auto count, db.Prepare("SELECT COUNT(*) FROM tokens WHERE user_id = ? "
                                                  "AND project_id = ? AND revoked_at IS NULL"));
    count.Bind(1, user.id).Bind(2, project.id);
    SOVAI_RETURN_IF_ERROR(count.Step());
    if (count.ColumnInt(0) >= kMaxActiveTokensPerUserProject) {
      return base::FailedPreconditionError(
          "user " + Quote(user.name) + " already has " + std::to_string(count.ColumnInt(0)) +
          " un-revoked tokens in project " + Quote(project.name) + " (the limit is " +
          std::to_string(kMaxActiveTokensPerUserProject) + "); revoke unused ones first");
    }
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("INSERT INTO tokens(id, hash, user_id, project_id, "
                                               "role, selector, name, created_at, expires_at) "
                                               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    st.Bind(1, token.id)
        .BindBlob(2, base::Sha256(created.secret))
        .Bind(3, token.user_id)
        .Bind(4, token.project_id)
        .Bind(5, RoleName(token.role))
        .Bind(6, token.selector.ToString())
        .Bind(7, token.name)
        .Bind(8, token.created_at_us);
    BindOptionalInt(st, 9, token.expires_at_us);
    return st.Run();
  }));
  return created;
}

base::Result<ApiToken> Identity::GetToken(std::string_view id) {
  ApiToken token;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(std::string("SELECT ") + kTokenColumns +
                                               " FROM tokens t WHERE t.id = ?"));
    st.Bind(1, id);
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return base::NotFoundError("token " + Quote(id) + " not found");
    SOVAI_ASSIGN_OR_RETURN(token, ReadToken(st, 0));
    return Status();
  }));
  return token;
}

base::Result<Page<ApiToken>> Identity::ListTokens(const TokenFilter& filter,
                                                  const PageRequest& page) {
  SOVAI_CHECK(page.limit >= 1 && page.limit <= kMaxPageSize) << page.limit;
  Page<ApiToken> out;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    std::string sql = std::string("SELECT ") + kTokenColumns + " FROM tokens t WHERE t.id > ?";
    if (filter.user_id) sql += " AND t.user_id = ?";
    if (filter.project_id) sql += " AND t.project_id = ?";
    sql += " ORDER BY t.id LIMIT ?";
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(sql));
    // The selector filter is not expressible in SQL over the canonical text, so scan in batches
    // until the page is full (one item more than asked tells whether another page follows).
    const int64_t batch = page.limit + 1;
    std::string after = page.after;
    for (;;) {
      st.Reset();
      int param = 1;
      st.Bind(param++, after);
      if (filter.user_id) st.Bind(param++, *filter.user_id);
      if (filter.project_id) st.Bind(param++, *filter.project_id);
      st.Bind(param, batch);
      int64_t seen = 0;
      for (;;) {
        SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
        if (!row) break;
        ++seen;
        SOVAI_ASSIGN_OR_RETURN(ApiToken token, ReadToken(st, 0));
        after = token.id;
        if (token.selector.Includes(filter.must_include)) out.items.push_back(std::move(token));
      }
      if (seen < batch || static_cast<int64_t>(out.items.size()) > page.limit) break;
    }
    if (static_cast<int64_t>(out.items.size()) > page.limit) {
      out.items.resize(page.limit);
      out.next_cursor = out.items.back().id;
    }
    return Status();
  }));
  return out;
}

Status Identity::RevokeToken(std::string_view id) {
  const int64_t now = env_.NowUnixMicros();
  return db_.Write([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT bootstrap FROM tokens WHERE id = ?"));
    st.Bind(1, id);
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return base::NotFoundError("token " + Quote(id) + " not found");
    if (st.ColumnInt(0) != 0) {
      return base::FailedPreconditionError(
          "token " + Quote(id) +
          " is the bootstrap admin token of admin.json; rotate it there instead of revoking it");
    }
    SOVAI_ASSIGN_OR_RETURN(auto revoke, db.Prepare("UPDATE tokens SET revoked_at = ? WHERE id = ? "
                                                   "AND revoked_at IS NULL"));
    revoke.Bind(1, now).Bind(2, id);
    return revoke.Run();
  });
}

base::Result<Principal> Identity::Authenticate(std::string_view bearer) {
  if (bearer.empty() || bearer.size() > kMaxBearerTokenBytes) {
    return base::UnauthenticatedError("the bearer token is empty or longer than " +
                                      std::to_string(kMaxBearerTokenBytes) + " bytes");
  }
  const std::string hash = base::Sha256(bearer);
  const int64_t now = env_.NowUnixMicros();
  Principal principal;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(
        auto st, db.Prepare(std::string("SELECT t.hash, ") + kTokenColumns + ", " + kUserColumns +
                            ", " + kProjectColumns +
                            ", m.role FROM tokens t JOIN users u ON u.id = t.user_id "
                            "JOIN projects p ON p.id = t.project_id LEFT JOIN memberships m ON "
                            "m.project_id = t.project_id AND m.user_id = t.user_id "
                            "WHERE t.hash = ?"));
    st.BindBlob(1, hash);
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row || !base::ConstantTimeEquals(st.ColumnText(0), hash)) {
      return base::UnauthenticatedError("unknown API token; create one with POST /v1/tokens");
    }
    int col = 1;
    SOVAI_ASSIGN_OR_RETURN(principal.token, ReadToken(st, col));
    col += kTokenColumnCount;
    principal.user = ReadUser(st, col);
    col += kUserColumnCount;
    principal.project = ReadProject(st, col);
    col += kProjectColumnCount;
    const ApiToken& token = principal.token;
    if (token.revoked_at_us) {
      return base::UnauthenticatedError("API token " + token.id + " was revoked at " +
                                        base::FormatRfc3339(*token.revoked_at_us));
    }
    if (token.expires_at_us && now >= *token.expires_at_us) {
      return base::UnauthenticatedError("API token " + token.id + " expired at " +
                                        base::FormatRfc3339(*token.expires_at_us) +
                                        "; create a new one");
    }
    if (st.ColumnIsNull(col)) {
      return base::UnauthenticatedError(
          "API token " + token.id + ": user " + Quote(principal.user.name) +
          " is no longer a member of project " + Quote(principal.project.name));
    }
    SOVAI_ASSIGN_OR_RETURN(Role member_role, RoleFromDb(st.ColumnText(col)));
    principal.role = std::min(token.role, member_role);
    return Status();
  }));
  return principal;
}

// --- S3 key records ----------------------------------------------------------------------------
Status Identity::AddS3Key(std::string_view user_id, std::string_view access_key_id) {
  const int64_t now = env_.NowUnixMicros();
  return db_.Write([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(User user, LoadUser(db, user_id));
    SOVAI_ASSIGN_OR_RETURN(
        bool taken, Exists(db, "SELECT 1 FROM s3_keys WHERE access_key_id = ?", access_key_id));
    if (taken) {
      return base::AlreadyExistsError("S3 access key " + Quote(access_key_id) +
                                      " is already recorded");
    }
    SOVAI_ASSIGN_OR_RETURN(auto count,
                           db.Prepare("SELECT COUNT(*) FROM s3_keys WHERE user_id = ?"));
    count.Bind(1, user_id);
    SOVAI_RETURN_IF_ERROR(count.Step());
    if (count.ColumnInt(0) >= kMaxS3KeysPerUser) {
      return base::FailedPreconditionError(
          "user " + Quote(user.name) + " already has " + std::to_string(count.ColumnInt(0)) +
          " S3 access keys (the limit is " + std::to_string(kMaxS3KeysPerUser) +
          "); delete unused ones first");
    }
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("INSERT INTO s3_keys(access_key_id, user_id, "
                                               "created_at) VALUES (?, ?, ?)"));
    st.Bind(1, access_key_id).Bind(2, user_id).Bind(3, now);
    return st.Run();
  });
}

base::Result<int64_t> Identity::CountS3Keys(std::string_view user_id) {
  int64_t n = 0;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT COUNT(*) FROM s3_keys WHERE user_id = ?"));
    st.Bind(1, user_id);
    SOVAI_RETURN_IF_ERROR(st.Step());
    n = st.ColumnInt(0);
    return Status();
  }));
  return n;
}

base::Result<S3KeyRecord> Identity::GetS3Key(std::string_view access_key_id) {
  S3KeyRecord key;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(std::string("SELECT ") + kS3KeyColumns +
                                               " FROM s3_keys k WHERE k.access_key_id = ?"));
    st.Bind(1, access_key_id);
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return base::NotFoundError("S3 access key " + Quote(access_key_id) + " not found");
    key = ReadS3Key(st, 0);
    return Status();
  }));
  return key;
}

base::Result<Page<S3KeyRecord>> Identity::ListS3Keys(std::string_view user_id,
                                                     const PageRequest& page) {
  Page<S3KeyRecord> out;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](Database& db) -> Status {
    SOVAI_RETURN_IF_ERROR(LoadUser(db, user_id));
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(std::string("SELECT ") + kS3KeyColumns +
                                               " FROM s3_keys k WHERE k.user_id = ? AND "
                                               "k.access_key_id > ? ORDER BY k.access_key_id "
                                               "LIMIT ?"));
    st.Bind(1, user_id);
    return FetchPage<S3KeyRecord>(
        st, 2, page, [](const Statement& s) { return Wrap(ReadS3Key(s, 0)); },
        [](const S3KeyRecord& k) { return k.access_key_id; }, &out);
  }));
  return out;
}

Status Identity::RemoveS3Key(std::string_view access_key_id) {
  return db_.Write([&](Database& db) -> Status {
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT bootstrap FROM s3_keys WHERE "
                                               "access_key_id = ?"));
    st.Bind(1, access_key_id);
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return base::NotFoundError("S3 access key " + Quote(access_key_id) + " not found");
    if (st.ColumnInt(0) != 0) {
      return base::FailedPreconditionError(
          "S3 access key " + Quote(access_key_id) +
          " is the bootstrap admin's key of admin.json; rotate it there instead");
    }
    SOVAI_ASSIGN_OR_RETURN(auto del, db.Prepare("DELETE FROM s3_keys WHERE access_key_id = ?"));
    del.Bind(1, access_key_id);
    return del.Run();
  });
}

}  // namespace sovai::control
