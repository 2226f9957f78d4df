#include "registry/auth.h"

#include <string>

#include "base/check.h"
#include "base/crypto.h"
#include "base/json.h"
#include "registry/limits.h"

namespace sovai::registry {
namespace {

constexpr std::string_view kTokenPrefix = "svr1.";

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

TokenIssuer::TokenIssuer(std::string key, base::Env& env, int64_t lifetime_s)
    : key_(std::move(key)), env_(env), lifetime_s_(lifetime_s) {
  SOVAI_CHECK(!key_.empty()) << "registry token key";
  SOVAI_CHECK(lifetime_s_ > 0) << "registry token lifetime";
}

std::string TokenIssuer::Issue(const Caller& caller) const {
  nlohmann::json claims = {{"sub", caller.subject},
                           {"prj", caller.project},
                           {"push", caller.can_push},
                           {"adm", caller.admin},
                           {"exp", env_.NowUnixMicros() / 1000000 + lifetime_s_}};
  std::string body = base::Base64UrlEncode(base::DumpJson(claims));
  std::string mac = base::Base64UrlEncode(base::HmacSha256(key_, body));
  return std::string(kTokenPrefix) + body + "." + mac;
}

bool TokenIssuer::IsRegistryToken(std::string_view token) {
  return token.starts_with(kTokenPrefix);
}

base::Result<Caller> TokenIssuer::Verify(std::string_view token) const {
  auto refused = [](std::string why) {
    return base::UnauthenticatedError("registry token " + why +
                                      ": log in again (podman login / sovai registry login)");
  };
  if (!IsRegistryToken(token)) return refused("is malformed");
  std::string_view rest = token.substr(kTokenPrefix.size());
  size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return refused("is malformed");
  std::string_view body = rest.substr(0, dot);
  auto mac = base::Base64UrlDecode(rest.substr(dot + 1));
  if (!mac.ok() || !base::ConstantTimeEquals(*mac, base::HmacSha256(key_, body))) {
    return refused("has a bad signature (or the server restarted)");
  }
  auto text = base::Base64UrlDecode(body);
  if (!text.ok()) return refused("is malformed");
  auto claims = base::ParseJson(*text);
  if (!claims.ok()) return refused("is malformed");
  auto exp = base::GetInt(*claims, "exp");
  auto sub = base::GetString(*claims, "sub");
  auto prj = base::GetString(*claims, "prj");
  auto push = base::GetBool(*claims, "push");
  auto adm = base::GetBool(*claims, "adm");
  if (!exp.ok() || !sub.ok() || !prj.ok() || !push.ok() || !adm.ok()) {
    return refused("is malformed");
  }
  if (*exp <= env_.NowUnixMicros() / 1000000) return refused("expired");
  return Caller{*sub, *prj, *push, *adm};
}

base::Result<Caller> AuthenticateHeader(std::string_view authorization,
                                        Authenticator& authenticator, const TokenIssuer& tokens) {
  if (authorization.empty()) {
    return base::UnauthenticatedError(
        "authentication required: log in with a Sovai API token as the password");
  }
  if (authorization.size() > kMaxAuthorizationBytes) {
    return base::UnauthenticatedError("the Authorization header is longer than " +
                                      std::to_string(kMaxAuthorizationBytes) + " bytes");
  }
  if (StartsWithIgnoreCase(authorization, "Basic ")) {
    auto decoded = base::Base64Decode(authorization.substr(6));
    if (!decoded.ok()) return base::UnauthenticatedError("malformed Basic credentials");
    size_t colon = decoded->find(':');
    if (colon == std::string::npos)
      return base::UnauthenticatedError("malformed Basic credentials");
    return authenticator.Authenticate(std::string_view(*decoded).substr(colon + 1));
  }
  if (StartsWithIgnoreCase(authorization, "Bearer ")) {
    std::string_view token = authorization.substr(7);
    if (TokenIssuer::IsRegistryToken(token)) return tokens.Verify(token);
    return authenticator.Authenticate(token);
  }
  return base::UnauthenticatedError("unsupported Authorization scheme: use Basic or Bearer");
}

}  // namespace sovai::registry
