#include "cli/registry_server.h"

#include <utility>

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

}  // namespace sovai::cli
