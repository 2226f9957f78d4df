// `sovai server`: the platform daemon. It owns the data directory (one server per directory,
// enforced by a lock), bootstraps the admin identity, serves /health and /metrics on the API
// listener and the S3 API (objstore) on the S3 listener; the later modules plug in here.
//
// Thread-safety: Start and Shutdown from one thread; the accessors from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "control/bootstrap.h"

namespace sovai::cli {

inline constexpr char kDefaultRegion[] = "EU-WEST-LOCAL";
inline constexpr char kDefaultListenApi[] = "127.0.0.1:8080";
inline constexpr char kDefaultListenS3[] = "127.0.0.1:9000";
inline constexpr std::chrono::milliseconds kServerShutdownGrace{10'000};

struct ServerConfig {
  std::string data_dir = "./sovai-data";
  // Where the control state lives: "" = SQLite in <data-dir>/control.db; a PostgreSQL URL
  // (postgres://user@host:port/db) = that database, shared by the servers given it
  // (docs/state.md). The object store and job logs stay in data_dir either way.
  std::string state_url;
  std::string listen_api = kDefaultListenApi;
  std::string listen_s3 = kDefaultListenS3;
  std::string region = kDefaultRegion;
  // The other regions this server can reach (docs/formats/regions.md); "" = none. Projects may
  // allow them by name (docs/sovereignty.md).
  std::string regions_file;
  std::string tls_cert_file;  // both set: both listeners speak HTTPS
  std::string tls_key_file;
  // HTTPS for the S3 listener only (overrides tls_* there).
  std::string s3_tls_cert_file;
  std::string s3_tls_key_file;
  // The OCI registry (docs/api/registry.md): "" = off. `sovai server` defaults it to
  // kDefaultListenRegistry (cli/registry_server.h). HTTPS with tls_* or, for it alone,
  // registry_tls_*.
  std::string listen_registry;
  std::string registry_tls_cert_file;
  std::string registry_tls_key_file;
  // Virtual-hosted-style S3 addressing: "<bucket>.<s3_domain>" ("" = path-style only).
  std::string s3_domain = "s3.localhost";
  // Lifecycle rules are applied every this many seconds; a lifecycle "day" lasts
  // s3_lifecycle_day_s (shortened only to test rules, as RGW's rgw_lc_debug_interval).
  int64_t s3_lifecycle_interval_s = 3600;
  // Storage (buckets, registry repositories) is sampled for billing every this many seconds;
  // each hour bills its largest sample (docs/billing.md).
  int64_t billing_sample_interval_s = 3600;
  int64_t s3_lifecycle_day_s = 86400;
  int io_threads = 0;  // 0: one per core
  // The flavor catalog (docs/formats/flavors.md); "" = the built-in one.
  std::string flavors_file;
  // The prices that are not the flavors' (docs/billing.md: storage, tokens); "" = the defaults.
  std::string prices_file;
  // Jobs: off when false, or when this host cannot run the bubblewrap sandbox (logged).
  bool jobs = true;
  // Where workloads run: "local" (the bubblewrap sandbox on this host) or "slurm" (a Slurm
  // cluster, settings in slurm_config_file; docs/slurm.md).
  std::string executor = "local";
  std::string slurm_config_file;
  // The sovai-engine binary of the built-in images sovai/finetune and sovai/serve; "" = the one
  // installed next to this binary (or, in a build tree, in ../engine/).
  std::string engine_binary;
  // code-server for notebooks with `editor: vscode` (tools/install_code_server.sh puts it at
  // control::kCodeServerProgram, the default); "" = the default.
  std::string code_server_binary;
  // Apps: requests per token and per project (N/s, N/min, N/h); "" = unlimited.
  std::string app_rate_limit;
  // The endpoints catalog (/v1/chat/completions) takes requests without a token.
  bool catalog_anonymous = false;
  // Export of the audit log to BUCKET[/PREFIX] of this server's object store (docs/audit.md,
  // "Export to a bucket"); "" = off.
  std::string audit_export;
  std::string audit_export_interval = "1h";
};

// Where sovai-engine is for a server whose own binary is `self` ("" when it is not found).
std::string FindEngineBinary(const std::string& self);

class PlatformServer {
 public:
  // Creates the data directory if needed, takes its lock, bootstraps the admin, starts both
  // listeners and writes <data-dir>/server.json. Errors: InvalidArgument (bad region or listen
  // address, TLS files), FailedPrecondition (another server holds the data directory), bind
  // and file-system errors. On error nothing keeps running and server.json is not written.
  static base::Result<std::unique_ptr<PlatformServer>> Start(base::Env& env, ServerConfig config,
                                                             control::AdminOverrides overrides);
  ~PlatformServer();

  // Finishes in-flight requests (up to `grace`), stops both listeners, removes server.json and
  // releases the data-directory lock. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

  const std::string& api_url() const;
  const std::string& s3_url() const;
  // "" when --listen-registry is off.
  const std::string& registry_url() const;
  const std::string& data_dir() const;

 private:
  struct Impl;
  explicit PlatformServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The S3 region name of a server region: lowercase, as S3 clients spell regions ("eu-west-local").
std::string S3RegionOf(std::string_view region);

// Region names: 2–32 characters of [A-Z0-9-], starting with a letter ("EU-WEST-LOCAL").
base::Status ValidateRegion(std::string_view region);

// The `sovai server` command: parses flags, starts, waits for SIGINT/SIGTERM, shuts down.
// Returns the process exit code.
int RunServerCommand(const std::vector<std::string>& args);

}  // namespace sovai::cli
