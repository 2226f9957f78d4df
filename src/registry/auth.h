// Who may pull and push: the seam between the registry and the platform's identity, and the
// registry's own short-lived bearer tokens (the token flow of `docker login`/`podman login`).
//
// The registry links no control-plane code: `sovai server` hands it an Authenticator that
// resolves a Sovai API token (sent as the password of Basic auth, or as a Bearer) to a Caller.
// The token endpoint then issues a registry token: an HMAC-SHA256-signed statement of that
// Caller with an expiry, so that a pull of many layers costs one identity lookup, not one each.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/env.h"
#include "base/status.h"

namespace sovai::registry {

// An authenticated client. Repositories are "<project>/<name>": a caller reads its own
// project's repositories (and pushes to them when `can_push`); a platform admin reads and
// writes every project's.
struct Caller {
  std::string subject;  // for logs and audit: the token id, "tok_..."
  std::string project;  // the project's name
  bool can_push = false;
  bool admin = false;

  bool CanPull(std::string_view repository_project) const {
    return admin || repository_project == project;
  }
  bool CanPushTo(std::string_view repository_project) const {
    return admin || (can_push && repository_project == project);
  }
  friend bool operator==(const Caller&, const Caller&) = default;
};

class Authenticator {
 public:
  virtual ~Authenticator() = default;
  // Resolves a platform credential (an API token). Unauthenticated with the reason for an
  // unknown, revoked or expired one. Thread-safe; called from many request threads.
  virtual base::Result<Caller> Authenticate(std::string_view secret) = 0;
};

// Registry tokens: "svr1." + base64url(JSON claims) + "." + base64url(HMAC-SHA256). The key is
// the server's (random per process unless configured), so a restart invalidates them and
// clients fetch new ones on the 401. Thread-safe (immutable after construction).
class TokenIssuer {
 public:
  // `key` must not be empty; `env` gives the clock and must outlive this object.
  TokenIssuer(std::string key, base::Env& env, int64_t lifetime_s);

  std::string Issue(const Caller& caller) const;
  int64_t lifetime_s() const { return lifetime_s_; }
  // Whether `token` looks like one of ours (its prefix), before verifying it.
  static bool IsRegistryToken(std::string_view token);
  // Unauthenticated for a malformed, forged or expired token.
  base::Result<Caller> Verify(std::string_view token) const;

 private:
  std::string key_;
  base::Env& env_;
  int64_t lifetime_s_;
};

// Resolves an Authorization header value: "Basic base64(user:secret)" (the user is ignored:
// the secret is the API token) and "Bearer <registry token or API token>". Unauthenticated when
// absent, malformed or refused.
base::Result<Caller> AuthenticateHeader(std::string_view authorization,
                                        Authenticator& authenticator, const TokenIssuer& tokens);

}  // namespace sovai::registry
