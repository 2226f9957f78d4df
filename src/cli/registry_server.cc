#include "cli/registry_server.h"

#include <utility>

#include "exec/oci_image.h"
#include "registry/names.h"

namespace sovai::cli {

base::Result<registry::Caller> IdentityAuthenticator::Authenticate(std::string_view secret) {
  SOVAI_ASSIGN_OR_RETURN(control::Principal principal, identity_.Authenticate(secret));
  return registry::Caller{.subject = principal.token.id,
                          .project = principal.project.name,
                          .can_push = principal.role >= control::Role::kOperator,
                          .admin = principal.platform_admin()};
}

base::Result<std::unique_ptr<RegistryListener>> RegistryListener::Start(
    objstore::Store& store, control::Identity& identity, base::Env& env,
    net::ServerOptions options) {
  std::unique_ptr<RegistryListener> out(new RegistryListener());
  out->authenticator_ = std::make_unique<IdentityAuthenticator>(identity);
  registry::RegistryOptions ro;
  SOVAI_ASSIGN_OR_RETURN(out->registry_,
                         registry::Registry::Create(store, *out->authenticator_, env, ro));
  net::Router router;
  out->registry_->AddRoutes(router);
  out->server_ = std::make_unique<net::Server>(std::move(router));
  options.error_renderer = registry::ErrorRenderer();
  const bool tls = !options.tls_cert_file.empty();
  const std::string listen = options.listen;
  SOVAI_RETURN_IF_ERROR(
      out->server_->Start(std::move(options)).WithContext("--listen-registry " + listen));
  out->url_ = std::string(tls ? "https://" : "http://") + out->server_->address();
  return out;
}

void RegistryListener::Shutdown(std::chrono::milliseconds grace) {
  if (server_) server_->Shutdown(grace);
}

RegistryListener::~RegistryListener() {
  if (server_) server_->Stop();
  server_.reset();
  registry_.reset();
}

namespace {

// Whether `host` names the registry listening on `address`: the same "host:port", or a loopback
// name for a loopback address with the same port.
bool IsOwnRegistry(std::string_view host, std::string_view address) {
  if (host == address) return true;
  const size_t a = address.rfind(':');
  const size_t h = host.rfind(':');
  if (a == std::string_view::npos || h == std::string_view::npos) return false;
  if (host.substr(h) != address.substr(a)) return false;
  auto loopback = [](std::string_view name) {
    return name == "127.0.0.1" || name == "localhost" || name == "[::1]";
  };
  return loopback(host.substr(0, h)) && loopback(address.substr(0, a));
}

}  // namespace

base::Result<exec::RegistryImage> ResolveJobImage(registry::Storage& storage,
                                                  std::string_view address,
                                                  const std::string& project_name,
                                                  const std::string& reference,
                                                  exec::S3ClientOptions s3) {
  SOVAI_ASSIGN_OR_RETURN(registry::ImageReference ref, registry::ParseImageReference(reference));
  if (!ref.host.empty() && !IsOwnRegistry(ref.host, address)) {
    return base::InvalidArgumentError("names the registry " + ref.host +
                                      "; jobs run images of this server's registry, " +
                                      std::string(address) + ": push the image there");
  }
  const std::string repository =
      ref.project_implied ? project_name + "/" + ref.repository : ref.repository;
  if (registry::ProjectOf(repository) != project_name) {
    return base::NotFoundError("repository " + repository + " does not exist in project " +
                               project_name);
  }
  SOVAI_ASSIGN_OR_RETURN(
      registry::ResolvedImage resolved,
      storage.ResolveImage(repository, ref.reference(), "linux", exec::HostImageArchitecture()));
  auto blob = [](const registry::ResolvedBlob& b) {
    return exec::RegistryBlob{b.descriptor.digest.ToString(), b.descriptor.size, b.key};
  };
  exec::RegistryImage out;
  out.digest = resolved.digest.ToString();
  out.manifest_digest = resolved.manifest_digest.ToString();
  out.manifest_key = resolved.manifest_key;
  out.bucket = storage.bucket();
  out.config = blob(resolved.config);
  for (const registry::ResolvedBlob& layer : resolved.layers) out.layers.push_back(blob(layer));
  out.s3 = std::move(s3);
  return out;
}

}  // namespace sovai::cli
