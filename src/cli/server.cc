#include "cli/server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "base/crypto.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/log.h"
#include "base/strings.h"
#include "base/time.h"
#include "cli/prometheus.h"
#include "cli/registry_server.h"
#include "cli/version.h"
#include "control/apps.h"
#include "control/audit.h"
#include "control/audit_export.h"
#include "control/billing_service.h"
#include "control/flavors.h"
#include "control/jobs.h"
#include "control/presign.h"
#include "control/problem.h"
#include "control/regions.h"
#include "control/rest_api.h"
#include "exec/resources.h"
#include "exec/sandbox.h"
#include "exec/slurm.h"
#include "gateway/app_gateway.h"
#include "gateway/notebook_gateway.h"
#include "net/client.h"
#include "net/http.h"
#include "objstore/lifecycle_sweeper.h"
#include "objstore/s3_api.h"
#include "objstore/store.h"
#include "panel/panel.h"

namespace sovai::cli {
namespace {

constexpr char kLockFile[] = "LOCK";
constexpr char kServerJsonFile[] = "server.json";

// Holds an exclusive flock on <data-dir>/LOCK for the server's lifetime: one server per
// directory. The kernel drops the lock when the process dies, so a crash never wedges it.
class DataDirLock {
 public:
  static base::Result<std::unique_ptr<DataDirLock>> Acquire(const std::string& data_dir) {
    const std::string path = base::JoinPath(data_dir, kLockFile);
    base::UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd.valid()) return base::ErrnoToStatus(errno, "open '" + path + "'");
    if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        std::string holder = "another process";
        char buf[32] = {};
        if (pread(fd.get(), buf, sizeof buf - 1, 0) > 0) holder = "pid " + std::string(buf);
        while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) {
          holder.pop_back();
        }
        return base::FailedPreconditionError("data directory " + data_dir +
                                             " is in use by another sovai server (" + holder +
                                             "); stop it or choose another --data-dir");
      }
      return base::ErrnoToStatus(errno, "flock '" + path + "'");
    }
    std::string pid = std::to_string(getpid()) + "\n";
    if (ftruncate(fd.get(), 0) != 0 || pwrite(fd.get(), pid.data(), pid.size(), 0) < 0) {
      return base::ErrnoToStatus(errno, "write '" + path + "'");
    }
    return std::unique_ptr<DataDirLock>(new DataDirLock(std::move(fd)));
  }

 private:
  explicit DataDirLock(base::UniqueFd fd) : fd_(std::move(fd)) {}
  base::UniqueFd fd_;  // closing it releases the lock
};

std::string UrlOf(const std::string& address, bool tls) {
  return (tls ? "https://" : "http://") + address;
}

// The control plane issues S3 keys in the object store, in process.
class StoreS3KeyIssuer : public control::S3KeyIssuer {
 public:
  explicit StoreS3KeyIssuer(objstore::Store& store) : store_(store) {}
  base::Result<Key> Create(const std::string& project) override {
    auto key = store_.CreateAccessKey(project);
    if (!key.ok()) return base::UnavailableError("object store: " + key.error().ToString());
    return Key{key->access_key, key->secret_key};
  }
  base::Status Revoke(const std::string& id) override {
    if (auto err = store_.DeleteAccessKey(id)) {
      if (err->code == objstore::S3Code::kInvalidAccessKeyId) {
        return base::NotFoundError(err->message);
      }
      return base::UnavailableError("object store: " + err->ToString());
    }
    return base::Status();
  }

 private:
  objstore::Store& store_;
};

}  // namespace

std::string S3RegionOf(std::string_view region) { return base::AsciiToLower(region); }

base::Status ValidateRegion(std::string_view region) { return control::ValidateRegionName(region); }

struct PlatformServer::Impl {
  base::Env& env;
  ServerConfig config;
  std::unique_ptr<DataDirLock> lock;
  control::AdminCredentials admin;
  // The other regions of --regions (docs/formats/regions.md), read once at start.
  std::vector<control::RegionEndpoint> other_regions;
  int64_t started_monotonic_micros = 0;
  // The store and its front end outlive the S3 listener that calls them.
  std::unique_ptr<objstore::Store> store;
  std::unique_ptr<objstore::S3Api> s3_api;
  // Applies the buckets' lifecycle rules; stops before the store goes.
  std::unique_ptr<objstore::LifecycleSweeper> lifecycle;
  // The control plane and the jobs outlive the API listener; jobs need the S3 listener.
  std::unique_ptr<StoreS3KeyIssuer> s3_key_issuer;
  std::unique_ptr<control::ControlPlane> control;
  // The audit log (docs/audit.md) over control.db: outlives the listeners and the gateway that
  // append to it (declared after `control`, so it goes first of the two). The S3 listener starts
  // before the control plane: it appends once `audit_ptr` is set.
  std::unique_ptr<control::AuditLog> audit;
  std::atomic<control::AuditLog*> audit_ptr{nullptr};
  // S3KeyOwner's cache: access key id -> user id.
  static constexpr size_t kMaxCachedS3KeyOwners = 4096;
  std::mutex s3_key_owner_mu;
  std::unordered_map<std::string, std::string> s3_key_owner;
  // Copies the audit log into a bucket (--audit-export); goes before `audit`, which it reads.
  std::unique_ptr<control::AuditExporter> audit_export;
  std::unique_ptr<control::FlavorCatalog> flavors;
  // Billing outlives the jobs and apps (their admission check calls it) and needs the store
  // (storage samples), the catalog and the control database.
  std::unique_ptr<control::BillingService> billing;
  std::unique_ptr<exec::Sandbox> sandbox;
  std::unique_ptr<exec::SlurmClient> slurm;
  // Two servers on one PostgreSQL database (docs/state.md): the leadership of the jobs, and the
  // API address the leader records for the others (set once the API listens).
  std::mutex leader_mu;
  std::string own_api_url;       // guarded by leader_mu
  bool leader_recorded = false;  // guarded by leader_mu
  // The OCI registry: after the store and identity it uses, before the jobs that resolve their
  // images in it (they go first).
  std::unique_ptr<RegistryListener> registry;
  // The registry's storage while it runs, for the billing sampler's thread.
  std::mutex registry_mu;  // guards registry_storage; held while the sampler measures it
  registry::Storage* registry_storage = nullptr;
  std::unique_ptr<control::JobService> jobs;
  // Apps and the gateway in front of them; the gateway learns routes from the apps and tells
  // them the autoscaler's decisions (set once both exist).
  std::unique_ptr<control::AppService> apps;
  std::unique_ptr<gateway::AppGateway> app_gateway;
  std::atomic<gateway::AppGateway*> gateway_ptr{nullptr};
  // Notebooks (Jupyter jobs) and their gateway routes (docs/api/notebooks.md).
  std::unique_ptr<control::NotebookService> notebooks;
  std::unique_ptr<gateway::NotebookGateway> notebook_gateway;
  std::unique_ptr<net::Server> api;
  std::unique_ptr<net::Server> s3;
  std::string api_url;
  std::string s3_url;
  std::string registry_url;
  bool stopped = false;

  Impl(base::Env& e, ServerConfig c) : env(e), config(std::move(c)) {}
  // When Start fails halfway the members go in reverse order, apps and jobs before billing: its
  // cap watcher must not reach them any more.
  ~Impl() {
    if (billing) billing->Shutdown();
  }

  double UptimeSeconds() const {
    return static_cast<double>(env.NowMonotonicMicros() - started_monotonic_micros) / 1e6;
  }

  net::Router ApiRouter() {
    net::Router router;
    router.Get("/health",
               [this](net::Request&) {
                 nlohmann::json body = {{"status", "ok"},
                                        {"version", Version()},
                                        {"region", config.region},
                                        {"uptime_s", UptimeSeconds()}};
                 return net::Response::Json(200, base::DumpJson(body) + "\n");
               },
               {.inline_handler = true});
    router.Get("/metrics",
               [this](net::Request&) {
                 std::vector<NamedServerStats> stats;
                 stats.emplace_back("api", api->Stats());
                 if (s3) stats.emplace_back("s3", s3->Stats());
                 std::string text = RenderPrometheusMetrics(Version(), UptimeSeconds(), stats);
                 if (store) text += RenderObjectStoreMetrics(store->Stats(), s3_api->stats());
                 if (lifecycle) text += RenderLifecycleMetrics(lifecycle->stats());
                 if (app_gateway) text += app_gateway->RenderMetrics();
                 if (notebook_gateway) text += notebook_gateway->RenderMetrics();
                 if (audit_export) text += audit_export->RenderMetrics();
                 if (jobs) {
                   text += control::RenderLiveSyncMetrics(jobs->LiveSyncSums(),
                                                          base::Env::Default().NowUnixMicros());
                 }
                 return net::Response::Text(200, std::move(text),
                                            "text/plain; version=0.0.4; charset=utf-8");
               },
               {.inline_handler = true});
    // Internal API for the control plane: S3 access keys of users (admin token only).
    router.Post("/internal/objstore/access-keys", [this](net::Request& req) {
      if (!IsAdmin(req)) return net::Response::Error(401, "admin bearer token required");
      auto body = req.body().ReadAll();
      if (!body.ok()) return net::Response::Error(body.status());
      auto doc = base::ParseJson(*body);
      if (!doc.ok()) return net::Response::Error(400, doc.status().message());
      auto user = base::GetString(*doc, "user");
      if (!user.ok() || user->empty()) return net::Response::Error(400, "field 'user' is required");
      auto key = store->CreateAccessKey(*user);
      if (!key.ok()) return net::Response::Error(500, key.error().ToString());
      nlohmann::json out = {{"user", key->user_id},
                            {"access_key_id", key->access_key},
                            {"secret_access_key", key->secret_key}};
      return net::Response::Json(201, base::DumpJson(out) + "\n");
    });
    // One application of every bucket's lifecycle rules, now (tests, operators).
    router.Post("/internal/objstore/lifecycle/sweep", [this](net::Request& req) {
      if (!IsAdmin(req)) return net::Response::Error(401, "admin bearer token required");
      if (!lifecycle) return net::Response::Error(503, "the object store is not running");
      lifecycle->SweepNow();
      const objstore::LifecycleStats& s = lifecycle->stats();
      nlohmann::json out = {{"sweeps", s.sweeps.load()},
                            {"expired_current", s.expired_current.load()},
                            {"expired_noncurrent", s.expired_noncurrent.load()},
                            {"removed_delete_markers", s.removed_delete_markers.load()},
                            {"aborted_uploads", s.aborted_uploads.load()},
                            {"skipped_locked", s.skipped_locked.load()},
                            {"errors", s.errors.load()}};
      return net::Response::Json(200, base::DumpJson(out) + "\n");
    });
    // The log of a job this server runs, for another server of the same database.
    router.Get("/internal/jobs/{id}/log", [this](net::Request& req) {
      if (!IsAdmin(req)) return net::Response::Error(401, "admin bearer token required");
      if (!jobs) return net::Response::Error(503, "this server runs no jobs");
      auto offset = base::ParseUint64(req.query("offset").value_or("0"));
      auto max_bytes = base::ParseUint64(req.query("max_bytes").value_or("65536"));
      if (!offset.ok() || !max_bytes.ok() || *max_bytes == 0) {
        return net::Response::Error(400, "offset and max_bytes must be counts");
      }
      auto chunk = jobs->ReadLogForPeer(std::string(*req.param("id")), *offset,
                                        static_cast<size_t>(*max_bytes));
      if (!chunk.ok()) return net::Response::Error(chunk.status());
      nlohmann::json out = {{"data_base64", base::Base64Encode(chunk->data)},
                            {"next_offset", chunk->next_offset},
                            {"size_bytes", chunk->size_bytes}};
      return net::Response::Json(200, base::DumpJson(out) + "\n");
    });
    router.Delete("/internal/objstore/access-keys/{key}", [this](net::Request& req) {
      if (!IsAdmin(req)) return net::Response::Error(401, "admin bearer token required");
      if (auto st = store->DeleteAccessKey(std::string(*req.param("key")))) {
        return net::Response::Error(404, st->message);
      }
      return net::Response::Empty(204);
    });
    return router;
  }

  bool IsAdmin(const net::Request& req) const {
    auto auth = req.header("Authorization");
    return auth && base::ConstantTimeEquals(*auth, "Bearer " + admin.api_token);
  }

  net::Router S3Router() {
    net::Router router;
    s3_api->Install(router);
    // Every S3 request but HEAD and OPTIONS (CORS preflights carry no credentials) goes to the
    // audit log: mutations and object reads alike. The wrapper keeps S3's own body limit.
    const net::RouteOptions options = *router.Find("PUT", "/").options;
    router.SetFallback(
        [this](net::Request& request) {
          net::Response response = s3_api->Handle(request);
          // The web panel's presigned requests come from the API's origin (presign.h).
          control::ApplyPresignedCors(request, response);
          control::AuditLog* audit = audit_ptr.load();
          if (audit != nullptr && request.method() != "HEAD" && request.method() != "OPTIONS") {
            audit->Append(S3AuditEvent(request, response.status));
          }
          return response;
        },
        options);
    return router;
  }

  // The S3 identity an ACL grant by e-mail names: the control-plane user with that address
  // (its name is its S3 owner id); nullopt (UnresolvableGrantByEmailAddress) before the control
  // plane is up, for an unknown or shared address.
  std::optional<std::string> S3UserOfEmail(std::string_view email) {
    if (!control) return std::nullopt;
    auto user = control->identity().FindUserByEmail(email);
    if (!user.ok() || !user->has_value()) return std::nullopt;
    return (*user)->name;
  }

  // The access key id a request claims (SigV4/SigV2 header or presigned query); the S3 API has
  // checked the signature, so for a 2xx it is the caller. Its principal is the key's project (or
  // the bootstrap admin).
  // The user an S3 access key belongs to ("" for keys the control plane did not issue, such as
  // the bootstrap admin's, or unknown ones). A key never changes owner, so answers are cached
  // (bounded) to keep the database off the S3 request path.
  std::string S3KeyOwner(const std::string& key) {
    {
      std::lock_guard lock(s3_key_owner_mu);
      if (auto it = s3_key_owner.find(key); it != s3_key_owner.end()) return it->second;
    }
    std::string owner;
    if (control) {
      if (auto record = control->identity().GetS3Key(key); record.ok()) owner = record->user_id;
    }
    std::lock_guard lock(s3_key_owner_mu);
    if (s3_key_owner.size() >= kMaxCachedS3KeyOwners) s3_key_owner.clear();
    s3_key_owner.emplace(key, owner);
    return owner;
  }

  control::AuditEvent S3AuditEvent(const net::Request& request, int status) {
    std::string key;
    if (auto auth = request.header("Authorization")) {
      std::string_view a = *auth;
      if (size_t at = a.find("Credential="); at != std::string_view::npos) {
        a.remove_prefix(at + 11);
        key = std::string(a.substr(0, a.find('/')));
      } else if (a.starts_with("AWS ")) {
        a.remove_prefix(4);
        key = std::string(a.substr(0, a.find(':')));
      }
    } else if (auto credential = request.query("X-Amz-Credential")) {
      key = std::string(credential->substr(0, credential->find('/')));
    } else if (auto id = request.query("AWSAccessKeyId")) {
      key = std::string(*id);
    }
    control::AuditEvent event{.actor_token = key,
                              .action = "S3 " + std::string(request.method()),
                              .resource = request.path(),
                              .source = std::string(request.remote_address()),
                              .result = status};
    if (!key.empty()) {
      if (auto credential = store->LookupAccessKey(key)) event.project = credential->user_id;
      event.actor_user = S3KeyOwner(key);
    }
    // Subresource names ("uploads", "acl", "delete"), never values: a presigned query carries
    // a signature.
    std::string names;
    for (std::string_view part : base::Split(request.raw_query(), '&')) {
      std::string_view name = part.substr(0, part.find('='));
      if (name.empty() || base::EqualsIgnoreCase(name.substr(0, 6), "X-Amz-") ||
          name == "Signature" || name == "AWSAccessKeyId" || name == "Expires") {
        continue;
      }
      names += (names.empty() ? "" : ",") + std::string(name);
    }
    if (!names.empty()) event.detail = "query: " + names;
    return event;
  }

  net::ServerOptions Options(const std::string& listen) const {
    net::ServerOptions options;
    options.listen = listen;
    options.io_threads = config.io_threads;
    options.tls_cert_file = config.tls_cert_file;
    options.tls_key_file = config.tls_key_file;
    options.shutdown_grace = kServerShutdownGrace;
    options.access_log = [](const net::AccessLogEntry& entry) {
      SOVAI_LOG(DEBUG)
              .With("method", entry.method)
              .With("path", entry.path)
              .With("status", std::to_string(entry.status))
              .With("duration_us", std::to_string(entry.duration.count()))
          << "request";
    };
    return options;
  }

  // The job service, when this host can run the sandbox: jobs are a capability of the server,
  // not a condition for starting it (a host without user namespaces still serves S3 and /v1).
  base::Status StartJobs(const std::string& s3_ca_file) {
    if (!config.jobs) {
      control->SetJobsUnavailable("jobs are disabled on this server (--jobs=false)");
      return base::Status();
    }
    const control::FlavorCatalog& catalog = flavors ? *flavors : control::FlavorCatalog::Default();
    std::error_code ec;
    std::string data_dir = std::filesystem::absolute(config.data_dir, ec).lexically_normal();
    if (ec) data_dir = config.data_dir;
    while (data_dir.size() > 1 && data_dir.back() == '/') data_dir.pop_back();
    if (config.executor != "local" && config.executor != "slurm") {
      return base::InvalidArgumentError("--executor must be local or slurm, not \"" +
                                        config.executor + "\"");
    }
    if (::geteuid() == 0 && config.executor == "local") {
      // Workloads run as an unprivileged uid that must reach their directories under the data
      // directory: every directory above it must let others traverse it.
      for (std::filesystem::path dir = std::filesystem::path(data_dir).parent_path(); !dir.empty();
           dir = dir.parent_path()) {
        struct stat st {};
        if (::stat(dir.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) {
          std::string reason = "jobs are disabled: " + dir.string() +
                               " does not let other users traverse it, so the sandbox's user "
                               "cannot reach the jobs' directories under " +
                               data_dir + "; run 'chmod o+x " + dir.string() +
                               "' or choose a --data-dir elsewhere";
          SOVAI_LOG(WARNING) << reason;
          control->SetJobsUnavailable(std::move(reason));
          return base::Status();
        }
        if (dir == dir.root_path()) break;
      }
    }
    control::JobServiceOptions o;
    o.data_dir = data_dir;
    o.region = config.region;
    for (const control::RegionEndpoint& r : other_regions) {
      o.other_jurisdictions[r.name] = r.jurisdiction;
    }
    o.flavors = &catalog;
    o.env = &env;
    char self[4096];
    ssize_t self_bytes = ::readlink("/proc/self/exe", self, sizeof self - 1);
    const std::string self_path = self_bytes > 0 ? std::string(self, size_t(self_bytes)) : "";
    o.engine_binary = config.engine_binary;
    if (o.engine_binary.empty() && !self_path.empty()) {
      o.engine_binary = FindEngineBinary(self_path);
    }
    if (config.executor == "slurm") {
      SOVAI_RETURN_IF_ERROR(ConfigureSlurm(catalog, self_path, o));
    } else {
      exec::SandboxOptions sandbox_options;
      sandbox_options.hidden_paths = {data_dir};
      auto created = exec::Sandbox::Create(env, sandbox_options);
      if (!created.ok()) {
        std::string reason = "jobs are disabled: " + created.status().message();
        SOVAI_LOG(WARNING) << reason;
        control->SetJobsUnavailable(std::move(reason));
        return base::Status();
      }
      sandbox = std::move(*created);
      SOVAI_ASSIGN_OR_RETURN(exec::HostResources host, exec::DiscoverHost(env, {}));
      for (const std::string& warning : host.warnings) SOVAI_LOG(WARNING) << warning;
      o.capacity.cpus = host.cpus;
      o.capacity.memory_bytes = host.memory_bytes;
      for (const exec::GpuInfo& gpu : host.gpus) o.capacity.gpus.push_back({gpu.index, gpu.name});
      o.cpu_ids = host.cpu_ids;
      o.sandbox = sandbox.get();
    }
    if (o.engine_binary.empty()) {
      SOVAI_LOG(WARNING) << "sovai-engine not found: the images sovai/finetune and sovai/serve "
                            "are unavailable (give its path with --engine)";
    }
    SOVAI_ASSIGN_OR_RETURN(control::Project system, control->identity().SystemProject());
    const std::string system_project = system.id;
    auto jobs_s3_access = [this, system_project, s3_ca_file](
                              const std::string& project,
                              const std::string& region) -> base::Result<control::S3Access> {
      if (region.empty() || base::EqualsIgnoreCase(region, config.region)) {
        return LocalS3Access(project, system_project, s3_ca_file);
      }
      for (const control::RegionEndpoint& r : other_regions) {
        if (base::EqualsIgnoreCase(r.name, region)) return OtherRegionAccess(project, region);
      }
      return DatastoreAccess(project, region);
    };
    o.s3_access = jobs_s3_access;
    if (registry) {
      o.resolve_image = [this, system_project, s3_ca_file](
                            const std::string& project,
                            const std::string& reference) -> base::Result<exec::RegistryImage> {
        SOVAI_ASSIGN_OR_RETURN(control::Project p, control->identity().GetProject(project));
        // The registry's own key: it reads the registry's bucket, and nothing else.
        SOVAI_ASSIGN_OR_RETURN(
            control::S3Access access,
            LocalS3Access(registry->registry().storage().owner(), system_project, s3_ca_file));
        std::string address = registry->url().substr(registry->url().find("://") + 3);
        return ResolveJobImage(registry->registry().storage(), address, p.name, reference,
                               {.endpoint = access.endpoint,
                                .region = access.region,
                                .access_key = access.access_key,
                                .secret_key = access.secret_key,
                                .ca_file = access.ca_file});
      };
    }
    o.admission_check = [this](const std::string& project, const control::JobSpec& spec) {
      return billing->AdmissionCheck(project, spec);
    };
    if (!config.state_url.empty()) {
      o.is_leader = LeaderCheck();
      o.remote_log = [this](const std::string& id, uint64_t offset, size_t max_bytes) {
        return LeaderJobLog(id, offset, max_bytes);
      };
    }
    SOVAI_ASSIGN_OR_RETURN(jobs, control::JobService::Start(control->db(), std::move(o)));
    control->AttachJobs(jobs.get(), &catalog);
    SOVAI_RETURN_IF_ERROR(StartApps(catalog, jobs_s3_access));
    SOVAI_RETURN_IF_ERROR(StartNotebooks());
    billing->AttachWorkloads(jobs.get(), apps.get());
    return base::Status();
  }

  // The leadership test of the services that must act on one server only (docs/state.md):
  // nullptr on SQLite, where this server is the only one.
  std::function<bool()> LeaderCheck() {
    if (config.state_url.empty()) return nullptr;
    return [this] { return LeadsJobs(); };
  }

  // Whether this server schedules and runs the jobs now; the leader records where its API
  // answers (the `leaders` table), for the others' log reads.
  bool LeadsJobs() {
    auto held = control->db().TryAcquireLeadership("jobs");
    const bool leads = held.ok() && *held;
    std::lock_guard lock(leader_mu);
    if (!leads) {
      leader_recorded = false;
    } else if (!leader_recorded && !own_api_url.empty()) {
      const int64_t now = env.NowUnixMicros();
      base::Status recorded = control->db().Write([&](base::Database& sql) -> base::Status {
        SOVAI_ASSIGN_OR_RETURN(
            base::Statement st,
            sql.Prepare("INSERT INTO leaders(name, api_url, since) VALUES ('jobs', ?1, ?2) "
                        "ON CONFLICT(name) DO UPDATE SET api_url = ?1, since = ?2"));
        st.Bind(1, own_api_url).Bind(2, now);
        return st.Run();
      });
      leader_recorded = recorded.ok();
      if (recorded.ok()) SOVAI_LOG(INFO) << "this server leads the jobs (" << own_api_url << ")";
    }
    return leads;
  }

  // A follower's read of a log that the leader keeps: GET /internal/jobs/{id}/log there.
  base::Result<exec::LogChunk> LeaderJobLog(const std::string& id, uint64_t offset,
                                            size_t max_bytes) {
    std::string leader_url;
    SOVAI_RETURN_IF_ERROR(control->db().Read([&](base::Database& sql) -> base::Status {
      SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                             sql.Prepare("SELECT api_url FROM leaders WHERE name = 'jobs'"));
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (row) leader_url = st.ColumnText(0);
      return base::Status();
    }));
    if (leader_url.empty()) {
      return base::UnavailableError("no server has recorded that it runs the jobs yet; retry");
    }
    SOVAI_ASSIGN_OR_RETURN(net::ClientOptions options, net::ClientOptionsFromUrl(leader_url));
    net::HttpClient client(options);
    net::ClientRequest request;
    request.target = "/internal/jobs/" + id + "/log?offset=" + std::to_string(offset) +
                     "&max_bytes=" + std::to_string(max_bytes);
    request.headers.Add("Authorization", "Bearer " + admin.api_token);
    SOVAI_ASSIGN_OR_RETURN(net::ClientResponse response, client.Send(request));
    if (response.status != 200) {
      return base::UnavailableError("the leader (" + leader_url + ") answered " +
                                    std::to_string(response.status) + " for the log of " + id);
    }
    auto doc = base::ParseJson(response.body);
    if (!doc.ok() || !doc->is_object()) return base::UnavailableError("the leader's log answer");
    auto data = base::Base64Decode(doc->value("data_base64", ""));
    if (!data.ok()) return base::UnavailableError("the leader's log answer");
    exec::LogChunk chunk;
    chunk.data = std::move(*data);
    chunk.next_offset = doc->value("next_offset", uint64_t{0});
    chunk.size_bytes = doc->value("size_bytes", uint64_t{0});
    return chunk;
  }

  // The Slurm executor: the cluster answers, and the job service gets its settings. Slurm
  // queues and places the jobs, so the local scheduler only keeps order and quotas: its capacity
  // is unbounded (a job the cluster can never run is refused by sbatch, with Slurm's words).
  base::Status ConfigureSlurm(const control::FlavorCatalog& catalog, const std::string& self_path,
                              control::JobServiceOptions& o) {
    exec::SlurmConfig settings;
    if (!config.slurm_config_file.empty()) {
      SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(config.slurm_config_file));
      auto parsed = exec::ParseSlurmConfig(text);
      if (!parsed.ok()) return parsed.status().WithContext(config.slurm_config_file);
      settings = std::move(*parsed);
    }
    slurm = std::make_unique<exec::SlurmClient>(env, settings.client);
    SOVAI_RETURN_IF_ERROR(slurm->Check());
    o.slurm.client = slurm.get();
    o.slurm.partition = settings.partition;
    o.slurm.account = settings.account;
    o.slurm.flavors = settings.flavors;
    o.slurm.agent_binary = settings.agent_binary.empty() ? self_path : settings.agent_binary;
    o.slurm.engine_binary =
        settings.engine_binary.empty() ? o.engine_binary : settings.engine_binary;
    o.slurm.scratch_dir = settings.scratch_dir;
    o.slurm.s3_endpoint = settings.s3_endpoint;
    o.slurm.staging_minutes = settings.staging_minutes;
    o.slurm.poll_interval = std::chrono::milliseconds(settings.poll_ms);
    constexpr int kUnbounded = 1 << 16;
    o.capacity.cpus = kUnbounded;
    o.capacity.memory_bytes = uint64_t{1} << 60;
    for (int i = 0; i < kUnbounded; ++i) o.cpu_ids.push_back(i);
    std::set<std::string> models;
    for (const control::Flavor& f : catalog.flavors()) {
      if (!f.gpu_model.empty()) models.insert(f.gpu_model);
    }
    int index = 0;
    for (const std::string& model : models) {
      for (int i = 0; i < 1024; ++i) o.capacity.gpus.push_back({index++, model});
    }
    SOVAI_LOG(INFO) << "jobs run on Slurm (agent " << o.slurm.agent_binary << ", scratch "
                    << o.slurm.scratch_dir << ")";
    return base::Status();
  }

  // The credentials that act as `project` in this server's object store: the bootstrap admin's
  // for the system project (its buckets are the admin's), else the project's first S3 key,
  // created on first use. Jobs, apps and the panel's presigned URLs share them.
  base::Result<control::S3Access> LocalS3Access(const std::string& project,
                                                const std::string& system_project,
                                                const std::string& s3_ca_file) {
    control::S3Access access{s3_url, S3RegionOf(config.region), "", "", s3_ca_file};
    if (project == system_project) {
      access.access_key = admin.access_key_id;
      access.secret_key = admin.secret_access_key;
      return access;
    }
    std::vector<objstore::Credential> keys = store->ListAccessKeys(project);
    if (keys.empty()) {
      auto key = store->CreateAccessKey(project);
      if (!key.ok()) return base::UnavailableError("object store: " + key.error().ToString());
      keys.push_back(*key);
    }
    access.access_key = keys.front().access_key;
    access.secret_key = keys.front().secret_key;
    return access;
  }

  // Credentials for a workload of `project` in another region (docs/sovereignty.md): only for a
  // region of --regions that the project allows (control::CheckResidency), and every time they
  // are handed out, an audit entry "REGION ACCESS" says so.
  base::Result<control::S3Access> OtherRegionAccess(const std::string& project,
                                                    const std::string& region) {
    const control::KnownRegions known{config.region, control::NamesOf(other_regions)};
    SOVAI_ASSIGN_OR_RETURN(control::Project p, control->identity().GetProject(project));
    base::Status allowed = control::CheckResidency(known, p.name, p.allowed_regions, "", region);
    const control::RegionEndpoint* endpoint = nullptr;
    for (const control::RegionEndpoint& r : other_regions) {
      if (base::EqualsIgnoreCase(r.name, region)) endpoint = &r;
    }
    if (control::AuditLog* a = audit_ptr.load()) {
      a->Append({.project = project,
                 .action = "REGION ACCESS",
                 .resource = base::AsciiToUpper(region),
                 .result = allowed.ok() ? 200 : control::HttpStatusOf(allowed.code()),
                 .detail = allowed.ok() ? "S3 credentials of region " + base::AsciiToUpper(region) +
                                              " (" + (endpoint ? endpoint->s3_endpoint : "") +
                                              ") for a workload of the project"
                                        : allowed.message()});
    }
    SOVAI_RETURN_IF_ERROR(allowed);
    SOVAI_CHECK(endpoint != nullptr) << "CheckResidency allowed an unknown region " << region;
    return control::S3Access{endpoint->s3_endpoint, endpoint->s3_region, endpoint->access_key_id,
                             endpoint->secret_access_key, endpoint->ca_file};
  }

  // Credentials for a workload of `project` in one of its datastores (docs/api/datastores.md):
  // the datastore's endpoint, signing region and keys, the secret opened here. A name that is
  // no datastore of the project (another project's alias included) is refused like an unknown
  // region, listing only the project's own datastores. Every handing-out, and every refusal of
  // a datastore that exists, is an audit entry "DATASTORE ACCESS".
  base::Result<control::S3Access> DatastoreAccess(const std::string& project,
                                                  const std::string& alias) {
    auto found = control->datastores().Credentials(project, alias);
    if (!found.ok() && found.status().code() == base::StatusCode::kNotFound) {
      control::KnownRegions known{config.region, control::NamesOf(other_regions)};
      SOVAI_ASSIGN_OR_RETURN(known.datastores, control->datastores().Aliases(project));
      return control::UnknownRegionError(known, "", alias);
    }
    if (control::AuditLog* a = audit_ptr.load()) {
      a->Append({.project = project,
                 .action = "DATASTORE ACCESS",
                 .resource = base::AsciiToLower(alias),
                 .result = found.ok() ? 200 : control::HttpStatusOf(found.status().code()),
                 .detail = found.ok()
                               ? "S3 credentials of datastore " + found->datastore.alias + " (" +
                                     found->datastore.endpoint + ") for a workload of the project"
                               : found.status().message()});
    }
    SOVAI_RETURN_IF_ERROR(found.status());
    const control::Datastore& d = found->datastore;
    return control::S3Access{d.endpoint, d.region, d.access_key, found->secret_key, ""};
  }

  // --audit-export (docs/audit.md): the audit log copied into a bucket of this object store, the
  // first export now (on the exporter's thread), then every interval.
  base::Status StartAuditExport() {
    auto target = control::ParseAuditExportTarget(config.audit_export);
    if (!target.ok()) return target.status().WithContext("--audit-export");
    auto interval = control::ParseAuditExportInterval(config.audit_export_interval);
    if (!interval.ok()) return interval.status().WithContext("--audit-export-interval");
    SOVAI_ASSIGN_OR_RETURN(control::AuditExportBucket bucket,
                           control::AuditExportBucketInStore(*store, target->bucket, admin.user));
    SOVAI_ASSIGN_OR_RETURN(audit_export,
                           control::AuditExporter::Start(*audit, {.bucket = std::move(bucket),
                                                                  .prefix = target->prefix,
                                                                  .interval = *interval,
                                                                  .env = &env,
                                                                  .is_leader = LeaderCheck()}));
    return base::Status();
  }

  // Billing (docs/billing.md), before the jobs: it records this server lifetime before any job
  // of it runs, and the jobs' admission check calls it. It needs the flavor catalog, loaded here.
  base::Status StartBilling() {
    if (!config.flavors_file.empty()) {
      SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(config.flavors_file));
      auto parsed = control::FlavorCatalog::Parse(text);
      if (!parsed.ok()) return parsed.status().WithContext("--flavors " + config.flavors_file);
      flavors = std::make_unique<control::FlavorCatalog>(std::move(*parsed));
    }
    control::BillingServiceOptions o;
    o.flavors = flavors ? flavors.get() : &control::FlavorCatalog::Default();
    o.env = &env;
    o.is_leader = LeaderCheck();
    if (!config.prices_file.empty()) {
      SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(config.prices_file));
      auto prices = control::ParsePrices(text);
      if (!prices.ok()) return prices.status().WithContext("--prices " + config.prices_file);
      o.prices = *prices;
    }
    SOVAI_ASSIGN_OR_RETURN(control::Project system, control->identity().SystemProject());
    o.bytes_by_project = [this, system_project = system.id] {
      return BytesByProject(system_project);
    };
    o.repository_bytes = [this] { return RepositoryBytes(); };
    o.sample_period = std::chrono::seconds(config.billing_sample_interval_s);
    SOVAI_ASSIGN_OR_RETURN(billing, control::BillingService::Start(control->db(), std::move(o)));
    control->AttachBilling(billing.get());
    return base::Status();
  }

  // Every version of every object, per owning project: buckets belong to projects (S3 keys act
  // for one), except the bootstrap admin's, which are the system project's. Unfinished multipart
  // uploads are not counted. A bucket that cannot be listed is logged and skipped.
  std::map<std::string, uint64_t> BytesByProject(const std::string& system_project) {
    std::map<std::string, uint64_t> out;
    auto buckets = store->ListBuckets();
    if (!buckets.ok()) {
      SOVAI_LOG(WARNING) << "billing: listing buckets: " << buckets.error().ToString();
      return out;
    }
    for (const objstore::BucketInfo& bucket : *buckets) {
      // The registry's bucket holds every project's images: RepositoryBytes bills them.
      if (bucket.name == registry::StorageOptions{}.bucket) continue;
      const std::string project = bucket.owner == admin.user ? system_project : bucket.owner;
      objstore::ListVersionsOptions page;
      for (;;) {
        auto listed = store->ListVersions(bucket.name, page);
        if (!listed.ok()) {
          SOVAI_LOG(WARNING) << "billing: listing bucket " << bucket.name << ": "
                             << listed.error().ToString();
          break;
        }
        for (const objstore::ObjectVersion& v : listed->versions) {
          if (!v.delete_marker) out[project] += v.size;
        }
        if (!listed->truncated) break;
        page.key_marker = listed->next_key_marker;
        page.version_id_marker = listed->next_version_id_marker;
      }
    }
    return out;
  }

  // The registry's bytes per repository of each project (registry::Storage::Usage), as billing
  // resources: "registry:<repository>", and "registry" for blobs no manifest references.
  // Repositories are named by project name; lines are by project id. Nothing while the registry
  // is off, or on an error (logged).
  std::vector<control::StorageUsage> RepositoryBytes() {
    std::vector<control::StorageUsage> out;
    auto usage = [&]() -> base::Result<std::vector<registry::RepositoryUsage>> {
      std::lock_guard lock(registry_mu);
      if (registry_storage == nullptr) return std::vector<registry::RepositoryUsage>();
      return registry_storage->Usage();
    }();
    if (!usage.ok()) {
      SOVAI_LOG(WARNING) << "billing: measuring the registry: " << usage.status();
      return out;
    }
    std::map<std::string, std::string> id_of;  // project name → id
    control::PageRequest page{.limit = control::kMaxPageSize};
    for (;;) {
      auto projects = control->identity().ListProjects(page);
      if (!projects.ok()) {
        SOVAI_LOG(WARNING) << "billing: listing projects: " << projects.status();
        return out;
      }
      for (const control::Project& p : projects->items) id_of[p.name] = p.id;
      if (!projects->next_cursor) break;
      page.after = *projects->next_cursor;
    }
    for (const registry::RepositoryUsage& u : *usage) {
      auto id = id_of.find(u.project);
      if (id == id_of.end()) continue;  // a deleted project's images: nobody to bill
      out.push_back({id->second,
                     u.repository.empty()
                         ? std::string(control::kRegistryUnreferencedResource)
                         : std::string(control::kRegistryResourcePrefix) + u.repository,
                     u.bytes});
    }
    return out;
  }

  // Apps run their replicas as jobs; the gateway routes to them.
  base::Status StartApps(
      const control::FlavorCatalog& catalog,
      std::function<base::Result<control::S3Access>(const std::string&, const std::string&)>
          s3_access) {
    control::AppServiceOptions o;
    o.jobs = jobs.get();
    o.replicas_on_other_hosts = config.executor == "slurm";
    o.is_leader = LeaderCheck();
    o.flavors = &catalog;
    o.region = config.region;
    o.other_regions = control::NamesOf(other_regions);
    o.env = &env;
    o.s3_access = std::move(s3_access);
    o.on_route = [this](const control::AppRoute& route) {
      if (gateway::AppGateway* g = gateway_ptr.load()) g->OnRoute(route);
    };
    o.in_flight = [this](const std::string& app, const std::string& job) -> uint64_t {
      gateway::AppGateway* g = gateway_ptr.load();
      return g ? g->InFlight(app, job) : 0;
    };
    SOVAI_ASSIGN_OR_RETURN(apps, control::AppService::Start(control->db(), std::move(o)));
    gateway::AppGatewayOptions g;
    g.apps = apps.get();
    g.identity = &control->identity();
    g.env = &env;
    g.catalog_anonymous = config.catalog_anonymous;
    if (!config.app_rate_limit.empty()) {
      auto limit = gateway::ParseRateLimit(config.app_rate_limit);
      if (!limit.ok()) return limit.status().WithContext("--app-rate-limit");
      g.token_rate_limit = *limit;
      g.project_rate_limit = *limit;
    }
    g.on_audit = [this](const control::AuditEvent& event) {
      if (control::AuditLog* a = audit_ptr.load()) a->Append(event);
    };
    g.on_usage = [this](std::vector<gateway::UsageRow> rows) {
      std::vector<control::AppUsageRecord> records;
      for (const gateway::UsageRow& r : rows) {
        records.push_back({r.key.app, r.key.token_id, r.key.project, r.requests, r.prompt_tokens,
                           r.completion_tokens});
      }
      if (base::Status st = apps->RecordUsage(records, env.NowUnixMicros()); !st.ok()) {
        SOVAI_LOG(WARNING) << "recording app usage: " << st;
      }
    };
    SOVAI_ASSIGN_OR_RETURN(app_gateway, gateway::AppGateway::Start(std::move(g)));
    gateway_ptr.store(app_gateway.get());
    // Routes published before the pointer was set.
    for (const control::AppRoute& route : apps->Routes()) app_gateway->OnRoute(route);
    control->AttachApps(apps.get());
    return base::Status();
  }

  // Notebooks run Jupyter as jobs; the gateway routes /notebooks/<id>/ to them.
  base::Status StartNotebooks() {
    control::NotebookServiceOptions o;
    o.jobs = jobs.get();
    o.on_other_hosts = config.executor == "slurm";
    if (!config.code_server_binary.empty()) o.vscode_command = {config.code_server_binary};
    o.is_leader = LeaderCheck();
    o.env = &env;
    SOVAI_ASSIGN_OR_RETURN(notebooks, control::NotebookService::Start(control->db(), std::move(o)));
    gateway::NotebookGatewayOptions g;
    control::NotebookService* service = notebooks.get();
    g.route = [service](const std::string& id) { return service->Route(id); };
    g.note_activity = [service](const std::string& id) { service->NoteActivity(id); };
    g.identity = &control->identity();
    g.on_audit = [this](const control::AuditEvent& event) {
      if (control::AuditLog* a = audit_ptr.load()) a->Append(event);
    };
    SOVAI_ASSIGN_OR_RETURN(notebook_gateway, gateway::NotebookGateway::Start(std::move(g)));
    control->AttachNotebooks(notebooks.get());
    return base::Status();
  }

  base::Status WriteServerJson() {
    std::error_code ec;
    std::string absolute = std::filesystem::absolute(config.data_dir, ec).lexically_normal();
    if (ec) absolute = config.data_dir;
    if (!absolute.empty() && absolute.size() > 1 && absolute.back() == '/') absolute.pop_back();
    nlohmann::json doc = {
        {"version", Version()},         {"pid", static_cast<int64_t>(getpid())},
        {"region", config.region},      {"data_dir", absolute},
        {"api_url", api_url},           {"s3_url", s3_url},
        {"registry_url", registry_url}, {"started_at", base::FormatRfc3339(env.NowUnixMicros())}};
    return env.WriteFileAtomically(base::JoinPath(config.data_dir, kServerJsonFile),
                                   base::DumpJson(doc, 2) + "\n");
  }
};

PlatformServer::PlatformServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PlatformServer::~PlatformServer() { Shutdown(kServerShutdownGrace); }

base::Result<std::unique_ptr<PlatformServer>> PlatformServer::Start(
    base::Env& env, ServerConfig config, control::AdminOverrides overrides) {
  SOVAI_RETURN_IF_ERROR(ValidateRegion(config.region));
  std::vector<control::RegionEndpoint> other_regions;
  if (!config.regions_file.empty()) {
    auto loaded = control::LoadRegionsFile(env, config.regions_file, config.region);
    if (!loaded.ok()) return loaded.status().WithContext("--regions");
    other_regions = std::move(*loaded);
  }
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return base::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  if (config.s3_tls_cert_file.empty() != config.s3_tls_key_file.empty()) {
    return base::InvalidArgumentError("--s3-tls-cert and --s3-tls-key must be given together");
  }
  if (config.registry_tls_cert_file.empty() != config.registry_tls_key_file.empty()) {
    return base::InvalidArgumentError(
        "--registry-tls-cert and --registry-tls-key must be given together");
  }
  // Each hour bills its largest sample, so a period beyond an hour would leave hours unbilled.
  if (config.billing_sample_interval_s < 1 || config.billing_sample_interval_s > 3600) {
    return base::InvalidArgumentError("--billing-sample-interval must be 1 to 3600 seconds, not " +
                                      std::to_string(config.billing_sample_interval_s));
  }
  SOVAI_RETURN_IF_ERROR(env.CreateDirs(config.data_dir));

  auto impl = std::make_unique<Impl>(env, std::move(config));
  impl->other_regions = std::move(other_regions);
  impl->started_monotonic_micros = env.NowMonotonicMicros();
  SOVAI_ASSIGN_OR_RETURN(impl->lock, DataDirLock::Acquire(impl->config.data_dir));
  SOVAI_ASSIGN_OR_RETURN(impl->admin,
                         control::BootstrapAdmin(env, impl->config.data_dir, overrides));

  const bool tls = !impl->config.tls_cert_file.empty();
  objstore::StoreOptions store_options;
  store_options.root = base::JoinPath(impl->config.data_dir, "objstore");
  store_options.region = S3RegionOf(impl->config.region);
  store_options.env = &env;
  SOVAI_ASSIGN_OR_RETURN(impl->store, objstore::Store::Open(store_options));
  if (auto st = impl->store->PutAccessKey(
          {impl->admin.access_key_id, impl->admin.secret_access_key, impl->admin.user})) {
    return base::InternalError("registering the admin access key: " + st->ToString());
  }
  const int64_t lifecycle_day_micros =
      std::max<int64_t>(1, impl->config.s3_lifecycle_day_s) * 1'000'000;
  impl->s3_api = std::make_unique<objstore::S3Api>(
      *impl->store, objstore::S3ApiOptions{
                        .region = store_options.region,
                        .domain = impl->config.s3_domain,
                        .admin_users = {impl->admin.user},
                        .user_by_email = [impl = impl.get()](
                                             std::string_view e) { return impl->S3UserOfEmail(e); },
                        .env = &env,
                        .lifecycle_day_micros = lifecycle_day_micros});
  impl->lifecycle = std::make_unique<objstore::LifecycleSweeper>(
      *impl->store,
      objstore::LifecycleSweeperOptions{.env = &env,
                                        .interval_s = impl->config.s3_lifecycle_interval_s,
                                        .day_micros = lifecycle_day_micros});
  impl->lifecycle->Start();
  net::ServerOptions s3_options = impl->Options(impl->config.listen_s3);
  s3_options.error_renderer = objstore::S3Api::RenderServerError;
  if (!impl->config.s3_tls_cert_file.empty()) {
    s3_options.tls_cert_file = impl->config.s3_tls_cert_file;
    s3_options.tls_key_file = impl->config.s3_tls_key_file;
  }
  // Object bodies stream through worker threads; allow many concurrent uploads and downloads.
  s3_options.max_worker_threads = std::max(s3_options.max_worker_threads, 256);
  impl->s3 = std::make_unique<net::Server>(impl->S3Router());
  SOVAI_RETURN_IF_ERROR(
      impl->s3->Start(s3_options).WithContext("--listen-s3 " + impl->config.listen_s3));
  impl->s3_url = UrlOf(impl->s3->address(), !s3_options.tls_cert_file.empty());

  // The control plane: identity, REST API, jobs.
  impl->s3_key_issuer = std::make_unique<StoreS3KeyIssuer>(*impl->store);
  SOVAI_ASSIGN_OR_RETURN(
      impl->control,
      control::ControlPlane::Open(impl->config.data_dir, {.env = &env,
                                                          .admin = impl->admin,
                                                          .s3_keys = impl->s3_key_issuer.get(),
                                                          .state_url = impl->config.state_url}));
  SOVAI_ASSIGN_OR_RETURN(impl->audit, control::AuditLog::Open(impl->control->db(), {.env = &env}));
  impl->audit_ptr.store(impl->audit.get());
  impl->control->AttachAudit(impl->audit.get());
  if (!impl->config.audit_export.empty()) SOVAI_RETURN_IF_ERROR(impl->StartAuditExport());
  impl->control->SetServerInfo({.region = impl->config.region,
                                .s3_url = impl->s3_url,
                                .version = Version(),
                                .api_tls = !impl->config.tls_cert_file.empty(),
                                .other_regions = control::NamesOf(impl->other_regions)});
  SOVAI_RETURN_IF_ERROR(impl->StartBilling());
  SOVAI_ASSIGN_OR_RETURN(control::Project system_project,
                         impl->control->identity().SystemProject());
  impl->control->AttachS3Access(
      [impl = impl.get(), system = system_project.id](const std::string& project) {
        return impl->LocalS3Access(project, system, "");
      });
  if (!impl->config.listen_registry.empty()) {
    net::ServerOptions registry_options = impl->Options(impl->config.listen_registry);
    if (!impl->config.registry_tls_cert_file.empty()) {
      registry_options.tls_cert_file = impl->config.registry_tls_cert_file;
      registry_options.tls_key_file = impl->config.registry_tls_key_file;
    }
    SOVAI_ASSIGN_OR_RETURN(
        impl->registry, RegistryListener::Start(*impl->store, impl->control->identity(), impl->env,
                                                std::move(registry_options)));
    impl->registry_url = impl->registry->url();
    std::lock_guard lock(impl->registry_mu);
    impl->registry_storage = &impl->registry->registry().storage();
  }
  SOVAI_RETURN_IF_ERROR(impl->StartJobs(s3_options.tls_cert_file));

  net::Router router = impl->ApiRouter();
  SOVAI_RETURN_IF_ERROR(control::RegisterRestApi(router, *impl->control));
  if (impl->app_gateway) impl->app_gateway->Install(router);
  if (impl->notebook_gateway) impl->notebook_gateway->Install(router);
  // The web panel answers what no route does (src/panel/panel.h).
  panel::InstallPanel(router, panel::EmbeddedAssets(),
                      {.connect_origins = [impl = impl.get()](const net::Request& request) {
                        return control::ReachableUrl(impl->s3_url,
                                                     request.header("Host").value_or(""));
                      }});
  impl->api = std::make_unique<net::Server>(std::move(router));
  net::ServerOptions api_options = impl->Options(impl->config.listen_api);
  // OpenAI's error JSON on the gateway's OpenAI routes, problem+json on the REST API's.
  api_options.error_renderer = gateway::GatewayErrorRenderer(control::RenderServerProblem);
  SOVAI_RETURN_IF_ERROR(
      impl->api->Start(api_options).WithContext("--listen-api " + impl->config.listen_api));
  impl->api_url = UrlOf(impl->api->address(), tls);
  {
    std::lock_guard lock(impl->leader_mu);
    impl->own_api_url = impl->api_url;
  }
  // The leader tells the others where it answers as soon as it knows.
  if (impl->jobs && !impl->config.state_url.empty()) (void)impl->LeadsJobs();
  SOVAI_RETURN_IF_ERROR(impl->WriteServerJson());
  return std::unique_ptr<PlatformServer>(new PlatformServer(std::move(impl)));
}

void PlatformServer::Shutdown(std::chrono::milliseconds grace) {
  if (impl_ == nullptr || impl_->stopped) return;
  impl_->stopped = true;
  // The REST API first (no handler touches the jobs after this), then the jobs (stopping them
  // syncs their outputs through S3), then S3, then what they all used.
  if (impl_->api) impl_->api->Shutdown(grace);
  {
    std::lock_guard lock(impl_->registry_mu);
    impl_->registry_storage = nullptr;
  }
  if (impl_->registry) impl_->registry->Shutdown(grace);
  // The cap watcher stops nothing any more (the shutdown stops everything); the service stays
  // for the jobs' admission check until they are gone.
  if (impl_->billing) impl_->billing->Shutdown();
  // Apps before the jobs that are their replicas; the gateway after the apps' loop stopped.
  if (impl_->apps) impl_->apps->Shutdown();
  impl_->gateway_ptr.store(nullptr);
  impl_->app_gateway.reset();  // hands its last usage readings to the apps
  impl_->apps.reset();
  // Notebooks before the jobs that run them (stopping those syncs their rw volumes up).
  if (impl_->notebooks) impl_->notebooks->Shutdown();
  impl_->notebook_gateway.reset();
  impl_->notebooks.reset();
  impl_->jobs.reset();
  impl_->registry.reset();  // after the jobs, which resolve their images in it
  impl_->billing.reset();
  if (impl_->s3) impl_->s3->Shutdown(grace);
  impl_->audit_ptr.store(nullptr);
  // The final export: after the last append, before the audit log goes (errors are logged).
  if (impl_->audit_export) impl_->audit_export->Shutdown().IgnoreError();
  impl_->audit_export.reset();
  impl_->audit.reset();  // writes what is queued
  impl_->control.reset();
  impl_->s3_key_issuer.reset();
  impl_->store.reset();  // after the S3 listener: no request uses it any more
  impl_->env.DeleteFile(base::JoinPath(impl_->config.data_dir, kServerJsonFile)).IgnoreError();
  impl_->lock.reset();
}

const std::string& PlatformServer::api_url() const { return impl_->api_url; }
const std::string& PlatformServer::s3_url() const { return impl_->s3_url; }
const std::string& PlatformServer::registry_url() const { return impl_->registry_url; }
const std::string& PlatformServer::data_dir() const { return impl_->config.data_dir; }

int RunServerCommand(const std::vector<std::string>& args) {
  ServerConfig config;
  std::string log_format = "human";
  std::string log_level = "info";
  int64_t io_threads = 0;
  base::FlagSet flags(
      "sovai server",
      "Runs the Sovai platform daemon: REST API, web panel and /health, /metrics on\n"
      "--listen-api; the S3 API on --listen-s3. Port 0 picks a free port; the chosen\n"
      "addresses are printed and written to <data-dir>/server.json.");
  flags.String("data-dir", &config.data_dir, "directory that holds all state");
  flags.String("state", &config.state_url,
               "control state in the PostgreSQL database postgres://USER@HOST:PORT/DB, shared "
               "by servers (docs/state.md; password from PGPASSWORD or ~/.pgpass); empty = "
               "SQLite in the data directory",
               "URL");
  flags.String("listen-api", &config.listen_api, "HOST:PORT of the REST API and panel");
  flags.String("listen-s3", &config.listen_s3, "HOST:PORT of the S3 API");
  flags.String("region", &config.region, "this server's region name");
  flags.String("regions", &config.regions_file,
               "JSON of the other regions this server can reach (docs/formats/regions.md); "
               "projects may allow them by name",
               "FILE");
  flags.String("tls-cert", &config.tls_cert_file, "PEM certificate: serve HTTPS");
  flags.String("tls-key", &config.tls_key_file, "PEM private key for --tls-cert");
  flags.String("s3-tls-cert", &config.s3_tls_cert_file, "PEM certificate: HTTPS on --listen-s3");
  flags.String("s3-tls-key", &config.s3_tls_key_file, "PEM private key for --s3-tls-cert");
  config.listen_registry = kDefaultListenRegistry;
  flags.String("listen-registry", &config.listen_registry,
               "HOST:PORT of the OCI registry (podman, skopeo; docs/api/registry.md); empty = off");
  flags.String("registry-tls-cert", &config.registry_tls_cert_file,
               "PEM certificate: HTTPS on --listen-registry");
  flags.String("registry-tls-key", &config.registry_tls_key_file,
               "PEM private key for --registry-tls-cert");
  flags.String("s3-domain", &config.s3_domain,
               "virtual-hosted-style S3: Host <bucket>.<domain> names the bucket");
  flags.Int("s3-lifecycle-interval", &config.s3_lifecycle_interval_s,
            "seconds between two applications of the buckets' lifecycle rules");
  flags.Int("billing-sample-interval", &config.billing_sample_interval_s,
            "seconds between two samples of the storage billed (buckets, registry repositories)");
  flags.Int("s3-lifecycle-day-seconds", &config.s3_lifecycle_day_s,
            "length of a lifecycle day in seconds (shorten only to test lifecycle rules)");
  flags.Int("io-threads", &io_threads, "I/O threads per listener, 0 = one per core");
  flags.String("flavors", &config.flavors_file,
               "flavor catalog JSON (docs/formats/flavors.md); empty = the built-in one");
  flags.String("prices", &config.prices_file,
               "storage and token prices JSON (docs/billing.md); empty = the defaults", "FILE");
  flags.Bool("jobs", &config.jobs, "run jobs (needs bubblewrap)");
  flags.String("executor", &config.executor,
               "where jobs run: local (bubblewrap on this host) or slurm (sbatch)");
  flags.String("slurm-config", &config.slurm_config_file,
               "JSON settings of the Slurm executor (partitions, paths on the nodes)");
  flags.String("engine", &config.engine_binary,
               "sovai-engine for the sovai/finetune and sovai/serve images (default: next to "
               "this binary)",
               "FILE");
  flags.HideDefault("engine");
  flags.String("code-server", &config.code_server_binary,
               "code-server for notebooks with --editor vscode (default: where "
               "tools/install_code_server.sh installs it)",
               "FILE");
  flags.HideDefault("code-server");
  flags.String("app-rate-limit", &config.app_rate_limit,
               "requests per token and per project to apps, e.g. 600/min (empty: unlimited)");
  flags.Bool("catalog-anonymous", &config.catalog_anonymous,
             "the endpoints catalog's /v1 answers requests without a token");
  flags.String("audit-export", &config.audit_export,
               "copy the audit log into BUCKET[/PREFIX] (default prefix audit/) of this object "
               "store every --audit-export-interval (docs/audit.md); empty = off",
               "BUCKET[/PREFIX]");
  flags.String("audit-export-interval", &config.audit_export_interval,
               "time between audit exports: 90s, 10m, 1h, 1d", "DURATION");
  flags.String("log-format", &log_format, "human or json");
  flags.String("log-level", &log_level, "debug, info, warning or error");
  if (base::Status parsed = flags.Parse(args); !parsed.ok()) {
    std::fprintf(stderr, "sovai server: %s\n", parsed.message().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (!flags.positional().empty()) {
    std::fprintf(stderr, "sovai server: unexpected argument '%s'\n", flags.positional()[0].c_str());
    return 2;
  }
  base::LogOptions log_options;
  auto format = base::ParseLogFormat(log_format);
  if (!format.ok()) {
    std::fprintf(stderr, "sovai server: --log-format: %s\n", format.status().message().c_str());
    return 2;
  }
  log_options.format = *format;
  auto level = base::ParseLogLevel(log_level);
  if (!level.ok()) {
    std::fprintf(stderr, "sovai server: --log-level: %s\n", level.status().message().c_str());
    return 2;
  }
  log_options.level = *level;
  base::ConfigureLogging(log_options);
  config.io_threads = static_cast<int>(io_threads);

  // Block the stop signals in every thread (the server's threads inherit this mask) and wait
  // for them here, so shutdown runs on this thread and never inside a signal handler.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server =
      PlatformServer::Start(base::Env::Default(), config, control::AdminOverridesFromEnvironment());
  if (!server.ok()) {
    SOVAI_LOG(ERROR) << "sovai server could not start: " << server.status().ToString();
    return 1;
  }
  SOVAI_LOG(INFO).With("version", Version()).With("region", config.region) << "sovai server ready";
  std::printf("sovai server %s, region %s, data directory %s\n", Version(), config.region.c_str(),
              config.data_dir.c_str());
  std::printf("  API, panel, /health, /metrics  %s\n", (*server)->api_url().c_str());
  std::printf("  S3                             %s\n", (*server)->s3_url().c_str());
  if (!(*server)->registry_url().empty()) {
    std::printf("  Registry                       %s\n", (*server)->registry_url().c_str());
  }
  if (!config.regions_file.empty()) {
    std::printf("  other regions                  %s\n", config.regions_file.c_str());
  }
  std::printf("  admin credentials              %s\n",
              base::JoinPath(config.data_dir, "admin.json").c_str());
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  SOVAI_LOG(INFO).With("signal", strsignal(signal_number)) << "shutting down";
  (*server)->Shutdown(kServerShutdownGrace);
  SOVAI_LOG(INFO) << "sovai server stopped";
  return 0;
}

std::string FindEngineBinary(const std::string& self) {
  const std::string dir = self.substr(0, self.rfind('/') + 1);
  for (const std::string& candidate : {dir + "sovai-engine", dir + "../engine/sovai-engine"}) {
    char resolved[PATH_MAX];
    if (::access(candidate.c_str(), X_OK) == 0 && ::realpath(candidate.c_str(), resolved)) {
      return resolved;
    }
  }
  return "";
}

}  // namespace sovai::cli
