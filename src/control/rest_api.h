// The control plane's REST API (/v1) and the object that holds the control plane's state.
//
//   control::ControlPlaneOptions options;
//   options.admin = admin_credentials;          // from BootstrapAdmin()
//   options.s3_keys = &issuer;                  // creates/revokes keys in the object store
//   SOVAI_ASSIGN_OR_RETURN(auto control, control::ControlPlane::Open(data_dir, options));
//   net::Router router;
//   SOVAI_RETURN_IF_ERROR(control::RegisterRestApi(router, *control));
//
// Every /v1 route needs `Authorization: Bearer <token>` (401 problem+json otherwise). Roles: `read`
// tokens may only GET (and presign S3 reads: POST /v1/presign); `operator` tokens may also manage
// their own tokens and S3 keys (and later create/stop workloads of their project); `admin` tokens
// administer their project (members, tokens of its members), and admins of the system project
// `default` administer everything (users, projects, every token). A token never sees another
// project's resources: unknown and invisible ids are both 404. A token with a label selector sees
// only resources carrying its labels; users, projects, members and S3 keys carry none, so such a
// token is refused (403) on those routes and sees only tokens at least as narrow as itself. A token
// can never mint a token with more rights than its own: role, selector and expiry are checked.
//
// Bodies are JSON objects (at most kMaxRequestBodyBytes); unknown members are rejected. Errors are
// problem+json (problem.h) whose `errors` name the bad field. Lists take ?limit= (1..kMaxPageSize,
// default kDefaultPageSize) and ?cursor= (the `next_cursor` of the previous page) and answer
// {"items": [...], "next_cursor": "..." | null}. The exact shapes are in docs/api/openapi.yaml,
// which a test keeps equal to RestRoutes().
//
// Thread-safety: handlers run concurrently on the server's worker threads; they share only the
// ControlPlane, whose Identity/ControlDb are thread-safe, and the S3KeyIssuer, which must be.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "control/apps.h"
#include "control/audit.h"
#include "control/billing_service.h"
#include "control/bootstrap.h"
#include "control/datastores.h"
#include "control/db.h"
#include "control/identity.h"
#include "control/jobs.h"
#include "control/notebooks.h"
#include "control/request_auth.h"
#include "net/http.h"

namespace sovai::control {

// Issues S3 access keys in the object store. In `sovai server` it calls objstore::Store in
// process; tests use a fake. Must be thread-safe.
class S3KeyIssuer {
 public:
  struct Key {
    std::string access_key_id;
    std::string secret;
  };
  virtual ~S3KeyIssuer() = default;
  // Creates a key pair whose S3 principal is `project` (a project id): buckets belong to
  // projects, so every member's key and the jobs of the project see the same buckets. The
  // bootstrap admin's key is the exception: principal "admin", an object-store superuser.
  // Errors are passed to the client (Unavailable → 503, ...).
  virtual base::Result<Key> Create(const std::string& project) = 0;
  // Deletes the key. NotFound when the store does not know it (the caller treats that as done).
  virtual base::Status Revoke(const std::string& access_key_id) = 0;
};

struct ControlPlaneOptions {
  // Clock (token expiry, timestamps) and files. nullptr = base::Env::Default().
  base::Env* env = nullptr;
  // The bootstrap admin to import at open (ImportBootstrapAdmin). Without it the database has no
  // user until one is imported, and /v1 answers 401 to everything.
  std::optional<AdminCredentials> admin;
  // Not owned; must outlive the ControlPlane. nullptr: the s3-keys routes answer 503.
  S3KeyIssuer* s3_keys = nullptr;
  // Where the control state lives: "" = SQLite in `<data_dir>/control.db`; a PostgreSQL URL
  // (postgres://user@host:port/db) = that database, which several servers may share (db.h).
  std::string state_url;
};

// The control plane's state (`<data_dir>/control.db` or options.state_url) and the identity over
// it.
class ControlPlane {
 public:
  // Creates `data_dir` when missing, opens and migrates the control database (ControlDb::Open
  // errors; InvalidArgument for a state_url that is not postgres:// or postgresql://), and
  // imports `options.admin`.
  static base::Result<std::unique_ptr<ControlPlane>> Open(const std::string& data_dir,
                                                          ControlPlaneOptions options = {});

  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  ControlDb& db() { return *db_; }
  Identity& identity() { return *identity_; }
  // The projects' external S3 datastores; their secrets sealed with <data_dir>/secrets.key.
  Datastores& datastores() { return *datastores_; }
  base::Env& env() { return env_; }
  S3KeyIssuer* s3_keys() { return s3_keys_; }

  // What `GET /v1/info` tells clients (the CLI learns the S3 endpoint from it).
  struct ServerInfo {
    std::string region;  // "EU-WEST-LOCAL"
    std::string s3_url;  // "http://127.0.0.1:9000"
    std::string version;
    bool api_tls = false;  // apps' URLs are https://<Host>/apps/<id>/
    // The other regions the server knows (--regions): volumes may name them, and a project may
    // allow them (docs/sovereignty.md).
    std::vector<std::string> other_regions;
  };
  // Call before the API serves. Until AttachJobs, the job and flavor routes answer 503.
  void SetServerInfo(ServerInfo info) { info_ = std::move(info); }
  const ServerInfo& info() const { return info_; }
  // Not owned; must outlive the router's use of it.
  void AttachJobs(JobService* jobs, const FlavorCatalog* flavors) {
    jobs_ = jobs;
    flavors_ = flavors;
  }
  // Why jobs are off on this server (the 503 of the job routes says it).
  void SetJobsUnavailable(std::string reason) { jobs_unavailable_ = std::move(reason); }
  const std::string& jobs_unavailable() const { return jobs_unavailable_; }
  JobService* jobs() { return jobs_; }
  // Not owned. Until AttachApps, the app and endpoint routes answer 503 (with the jobs' reason).
  void AttachApps(AppService* apps) { apps_ = apps; }
  AppService* apps() { return apps_; }
  // Not owned. Until AttachNotebooks, the notebook routes answer 503 (with the jobs' reason).
  void AttachNotebooks(NotebookService* notebooks) { notebooks_ = notebooks; }
  NotebookService* notebooks() { return notebooks_; }
  const FlavorCatalog* flavors() { return flavors_; }
  // Not owned. Until AttachBilling, the billing and budget routes and ?dry_run=true answer 503.
  void AttachBilling(BillingService* billing) { billing_ = billing; }
  BillingService* billing() { return billing_; }
  // Not owned. With it, every /v1 call other than GET/HEAD is appended to the audit log (also
  // refused and unauthenticated ones), and GET /v1/audit answers; without it that answers 503.
  void AttachAudit(AuditLog* audit) { audit_ = audit; }
  AuditLog* audit() { return audit_; }
  // The S3 credentials of a project in this server's object store (those its jobs use), for
  // POST /v1/presign (presign.h). Until set, that route answers 503.
  using ProjectS3Access = std::function<base::Result<S3Access>(const std::string& project)>;
  void AttachS3Access(ProjectS3Access access) { s3_access_ = std::move(access); }
  const ProjectS3Access& s3_access() const { return s3_access_; }

 private:
  ControlPlane(base::Env& env, std::unique_ptr<ControlDb> db, S3KeyIssuer* s3_keys,
               const std::string& data_dir);
  base::Env& env_;
  std::unique_ptr<ControlDb> db_;
  std::unique_ptr<Identity> identity_;
  std::unique_ptr<Datastores> datastores_;
  S3KeyIssuer* s3_keys_;
  ServerInfo info_;
  JobService* jobs_ = nullptr;
  AppService* apps_ = nullptr;
  NotebookService* notebooks_ = nullptr;
  BillingService* billing_ = nullptr;
  AuditLog* audit_ = nullptr;
  ProjectS3Access s3_access_;
  std::string jobs_unavailable_ = "jobs are not enabled on this server";
  const FlavorCatalog* flavors_ = nullptr;
};

// One route of the REST API: "GET", "/v1/users/{id}".
struct RouteSpec {
  std::string_view method;
  std::string_view pattern;
  friend bool operator==(const RouteSpec&, const RouteSpec&) = default;
  friend auto operator<=>(const RouteSpec&, const RouteSpec&) = default;
};

// Every route RegisterRestApi adds, in registration order.
std::vector<RouteSpec> RestRoutes();

// Adds the /v1 routes to `router`. `control` must outlive the router (and the server using it).
// A route that already exists on the router is a bug (net::Router SOVAI_CHECKs).
base::Status RegisterRestApi(net::Router& router, ControlPlane& control);

}  // namespace sovai::control
