// The registry listener of `sovai server` (--listen-registry): the OCI registry of
// src/registry/ over the server's object store, authenticated by the control plane's identity
// (API tokens; pull needs a token of the project, push an operator or admin one).
#pragma once

#include <memory>
#include <string>

#include "base/env.h"
#include "base/status.h"
#include "control/identity.h"
#include "exec/executor.h"
#include "net/http.h"
#include "objstore/store.h"
#include "registry/auth.h"
#include "registry/registry.h"

namespace sovai::cli {

inline constexpr char kDefaultListenRegistry[] = "127.0.0.1:5000";

// Sovai API tokens as registry credentials: the token's project, whether its role may push
// (operator or admin), whether it is a platform admin.
class IdentityAuthenticator final : public registry::Authenticator {
 public:
  explicit IdentityAuthenticator(control::Identity& identity) : identity_(identity) {}
  base::Result<registry::Caller> Authenticate(std::string_view secret) override;

 private:
  control::Identity& identity_;
};

// The registry, its authenticator and its listener, stopped and destroyed in that order by the
// destructor (the server first: no handler runs once it is gone).
class RegistryListener {
 public:
  // `store`, `identity` and `env` must outlive the result. `options` is the listener's (address,
  // TLS, threads); its error renderer is replaced by the registry's.
  static base::Result<std::unique_ptr<RegistryListener>> Start(objstore::Store& store,
                                                               control::Identity& identity,
                                                               base::Env& env,
                                                               net::ServerOptions options);
  ~RegistryListener();

  // "http(s)://host:port"
  const std::string& url() const { return url_; }
  void Shutdown(std::chrono::milliseconds grace);
  net::ServerStats Stats() const { return server_->Stats(); }
  registry::Registry& registry() { return *registry_; }

 private:
  RegistryListener() = default;
  std::unique_ptr<IdentityAuthenticator> authenticator_;
  std::unique_ptr<registry::Registry> registry_;
  std::unique_ptr<net::Server> server_;
  std::string url_;
};

// A job's registry image (control/job_spec.h IsRegistryImage) for project `project_name`, in
// the registry listening on `address` ("host:port"): a reference naming another host is
// InvalidArgument; a bare name is the project's repository; another project's repository is
// NotFound like a missing one; an index resolves to this host's platform. `s3` reads the
// registry's bucket.
base::Result<exec::RegistryImage> ResolveJobImage(registry::Storage& storage,
                                                  std::string_view address,
                                                  const std::string& project_name,
                                                  const std::string& reference,
                                                  exec::S3ClientOptions s3);

}  // namespace sovai::cli
