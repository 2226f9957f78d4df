// The OCI distribution registry (the /v2/ API of the OCI distribution spec, as podman, skopeo,
// buildah and docker speak it) over Storage, with the bearer-token flow of `podman login`.
// docs/api/registry.md lists the endpoints, the auth flow, the limits and what is not supported.
//
//   registry::Registry reg(store, authenticator, env, {.service = "127.0.0.1:5000"});
//   net::Router router;
//   reg.AddRoutes(router);
//   net::Server server(std::move(router));
//   server.Start({.listen = "127.0.0.1:5000", .error_renderer = registry::ErrorRenderer()});
//
// Authorization: every /v2/ request but the token endpoint needs a caller (Basic with an API
// token as the password, a registry token from /auth/token, or an API token as Bearer); an
// anonymous or refused one gets 401 UNAUTHORIZED with the WWW-Authenticate challenge that sends
// clients to the token endpoint. Pulls (GET, HEAD) need read on the repository's project,
// pushes and deletes push rights there (Caller); anything else is 403 DENIED.
//
// Thread-safety: handlers run concurrently; Registry is thread-safe. It must outlive the server
// its routes are on. A thread reclaims expired uploads until the destructor.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/env.h"
#include "base/status.h"
#include "net/http.h"
#include "net/limits.h"
#include "objstore/store.h"
#include "registry/auth.h"
#include "registry/names.h"
#include "registry/storage.h"

namespace sovai::registry {

struct RegistryOptions {
  // The `service` of the token flow (clients echo it to the token endpoint).
  std::string service = "sovai-registry";
  // Key of the registry tokens; empty: 32 random bytes (tokens die with the process).
  std::string token_key;
  int64_t token_lifetime_s = kDefaultTokenLifetimeS;
  StorageOptions storage;
  // Run the thread that reclaims expired uploads (tests call ReclaimExpiredUploads instead).
  bool reclaim_thread = true;
};

class Registry {
 public:
  // Opens the storage (creating its bucket). `store`, `authenticator` and `env` must outlive
  // the result.
  static base::Result<std::unique_ptr<Registry>> Create(objstore::Store& store,
                                                        Authenticator& authenticator,
                                                        base::Env& env, RegistryOptions options);
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // /v2/ and /v2/{...} for GET, HEAD, POST, PUT, PATCH, DELETE; GET /auth/token;
  // POST /sovai/registry/v1/gc (the `sovai registry gc` call, JSON);
  // GET|PUT /sovai/registry/v1/settings?repository=R[&immutable_tags=true|false] (a
  // repository's settings: read with pull rights, changed with push rights).
  void AddRoutes(net::Router& router);

  Storage& storage() { return *storage_; }

 private:
  Registry(std::unique_ptr<Storage> storage, Authenticator& authenticator, base::Env& env,
           RegistryOptions options);

  net::Response HandleV2(net::Request& req);
  net::Response HandleToken(net::Request& req);
  net::Response HandleGc(net::Request& req);
  net::Response HandleSettings(net::Request& req);
  net::Response HandleCatalog(net::Request& req, const Caller& caller);
  net::Response HandleTags(net::Request& req, const V2Path& path);
  net::Response HandleManifest(net::Request& req, const V2Path& path);
  net::Response HandleBlob(net::Request& req, const V2Path& path);
  net::Response HandleUploadStart(net::Request& req, const V2Path& path);
  net::Response HandleUpload(net::Request& req, const V2Path& path);
  net::Response Challenge(const net::Request& req, const V2Path& path, const base::Status& why);
  void ReclaimLoop();

  std::unique_ptr<Storage> storage_;
  Authenticator& authenticator_;
  base::Env& env_;
  const RegistryOptions options_;
  TokenIssuer tokens_;
  std::mutex reclaim_mu_;  // guards stop_
  std::condition_variable reclaim_cv_;
  bool stop_ = false;
  std::thread reclaim_thread_;
};

// A /v2/ error answer: {"errors":[{"code":CODE,"message":...,"detail":{}}]}, with the
// Docker-Distribution-API-Version header.
net::Response ErrorResponse(int status, std::string_view code, std::string message);
// The server's error renderer for the registry listener: the spec's JSON for what the HTTP
// layer answers itself (404, 405, 413, 431, 500 ...).
net::ErrorRenderer ErrorRenderer();

}  // namespace sovai::registry
