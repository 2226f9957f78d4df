// libFuzzer target for S3 request authentication (src/objstore/sigv4.h).
//
// Input: a flags byte, then a head of '\n'-separated fields, an empty line, and the body:
//   authorization header value \n raw query \n raw path \n "name:value" lines ... \n\n body
// Modes (flags & 3):
//   0  the fields as they are: Authorization, query and headers go to Authenticate(), then the
//      body through a PayloadReader when it succeeds. Must never crash.
//   1  the same path, query and headers signed with SignV4 (payload from the body): Authenticate
//      must accept them (when no auth parameter or session token makes the request ambiguous).
//   2  the path and query parameters presigned with PresignV4: Authenticate must accept them.
//   3  like 0, with "AWS " put in front of the authorization field (SigV2).
// flags & 4: the lookup knows every access key (so signatures are computed), else only AKIDFUZZ.
//
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "base/crypto.h"
#include "base/strings.h"
#include "net/http.h"
#include "objstore/sigv4.h"

namespace {

using sovai::objstore::AuthOptions;
using sovai::objstore::AuthResult;
using sovai::objstore::Credential;
using sovai::objstore::CredentialLookup;

constexpr int64_t kNow = 1714564800LL * 1000000;  // 2024-05-01T12:00:00Z
constexpr char kRegion[] = "us-east-1";
constexpr char kHost[] = "s3.fuzz.test:9000";

// Bodies are read 7 bytes at a time, so that every chunk boundary falls inside a read.
constexpr size_t kBodyPieceBytes = 7;

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

// Query parameter names that select or carry authentication.
bool IsAuthParam(std::string_view name) {
  return name.substr(0, 6) == "X-Amz-" || name == "AWSAccessKeyId" || name == "Signature";
}

void DrainBody(const AuthResult& auth, std::string_view body) {
  sovai::net::StringBodyReader raw(std::string(body), kBodyPieceBytes);
  sovai::objstore::PayloadReader reader(raw, auth);
  char buf[64];
  for (int i = 0; i < 100000; ++i) {
    auto n = reader.Read(buf, sizeof buf);
    if (!n.ok()) {
      SOVAI_CHECK(reader.s3_error().has_value());
      return;
    }
    if (*n == 0) return;
  }
  SOVAI_CHECK(false) << "PayloadReader did not finish";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  // The head ends at the first empty line, like HTTP; the body (any bytes) follows.
  size_t blank = input.find("\n\n");
  std::string_view head = input.substr(0, blank);
  std::string_view body =
      blank == std::string_view::npos ? std::string_view() : input.substr(blank + 2);
  std::vector<std::string_view> fields = sovai::base::Split(head, '\n');
  auto field = [&](size_t i) { return i < fields.size() ? fields[i] : std::string_view(); };
  std::string_view authorization = field(0);
  std::string_view query = field(1);
  std::string_view path = field(2);
  std::vector<std::pair<std::string, std::string>> headers;
  for (size_t i = 3; i < fields.size() && headers.size() < 16; ++i) {
    size_t colon = fields[i].find(':');
    if (colon == std::string_view::npos) continue;
    headers.emplace_back(std::string(fields[i].substr(0, colon)),
                         std::string(fields[i].substr(colon + 1)));
  }
  const std::string method = (flags & 8) ? "PUT" : "GET";

  const Credential credential{"AKIDFUZZ", "fuzz/secret+key", "fuzz-user"};
  const bool any_key = flags & 4;
  CredentialLookup lookup = [&](std::string_view ak) -> std::optional<Credential> {
    if (ak == credential.access_key || (any_key && !ak.empty())) {
      return Credential{std::string(ak), credential.secret_key, credential.user_id};
    }
    return std::nullopt;
  };
  AuthOptions options{.region = kRegion, .now_unix_micros = kNow};
  if (flags & 16) options.virtual_host_bucket = "bucket";

  std::string target = "/" + std::string(path);
  if (!query.empty()) target += "?" + std::string(query);

  switch (flags & 3) {
    case 0:
    case 3: {
      sovai::net::Request req;
      req.set_method(method);
      if (!req.SetTarget(target).ok() && !req.SetTarget("/").ok()) return 0;
      req.mutable_headers().Add("Host", kHost);
      for (const auto& [k, v] : headers) req.mutable_headers().Add(k, v);
      if (!authorization.empty() || (flags & 3) == 3) {
        std::string value = (flags & 3) == 3 ? "AWS " : "";
        value += authorization;
        req.mutable_headers().Add("Authorization", value);
      }
      auto auth = sovai::objstore::Authenticate(req, options, lookup);
      if (auth.ok()) {
        SOVAI_CHECK(auth->anonymous == (auth->method == "anonymous"));
        DrainBody(*auth, body);
      } else {
        SOVAI_CHECK(!auth.error().name().empty());
      }
      return 0;
    }
    case 1: {
      sovai::net::Request parsed;
      if (!parsed.SetTarget(target).ok()) return 0;
      for (const auto& [k, v] : parsed.query_params()) {
        if (IsAuthParam(k)) return 0;
      }
      sovai::net::Headers h;
      h.Add("Host", kHost);
      for (const auto& [k, v] : headers) {
        // Real header names are tokens; the client must not add what it cannot sign.
        if (!IsToken(k)) continue;
        std::string lower = sovai::base::AsciiToLower(k);
        if (lower == "x-amz-security-token" || lower == "authorization") continue;
        h.Add(k, v);
      }
      std::string payload_hash = sovai::base::HexEncode(sovai::base::Sha256(body));
      auto signature =
          sovai::objstore::SignV4(method, target, h, credential, kRegion, kNow, payload_hash);
      SOVAI_CHECK(signature.ok()) << signature.status();
      sovai::net::Request req;
      req.set_method(method);
      SOVAI_CHECK(req.SetTarget(target).ok());
      for (const auto& [k, v] : h) req.mutable_headers().Add(k, v);
      auto auth = sovai::objstore::Authenticate(req, options, lookup);
      SOVAI_CHECK(auth.ok()) << auth.error().ToString() << "\n"
                             << (auth.ok() ? "" : auth.error().details.back().second);
      SOVAI_CHECK_EQ(auth->seed_signature, *signature);
      sovai::net::StringBodyReader raw(std::string(body), kBodyPieceBytes);
      sovai::objstore::PayloadReader reader(raw, *auth);
      auto all = reader.ReadAll();
      SOVAI_CHECK(all.ok() && *all == body);
      return 0;
    }
    case 2: {
      sovai::objstore::PresignRequest p;
      p.method = method;
      p.host = kHost;
      p.path = "/" + std::string(path);
      if (p.path.find('\0') != std::string::npos) return 0;
      p.expires_seconds = 1 + flags % 100;
      for (std::string_view part : sovai::base::Split(query, '&', /*skip_empty=*/true)) {
        size_t eq = part.find('=');
        std::string name(part.substr(0, eq));
        if (IsAuthParam(name)) continue;
        p.query.emplace_back(name, eq == std::string_view::npos ? "" : part.substr(eq + 1));
      }
      auto presigned = sovai::objstore::PresignV4(p, credential, kRegion, kNow);
      SOVAI_CHECK(presigned.ok()) << presigned.status();
      sovai::net::Request req;
      req.set_method(method);
      SOVAI_CHECK(req.SetTarget(*presigned).ok()) << *presigned;
      req.mutable_headers().Add("Host", kHost);
      auto auth = sovai::objstore::Authenticate(req, options, lookup);
      SOVAI_CHECK(auth.ok()) << auth.error().ToString() << " for " << *presigned;
      SOVAI_CHECK_EQ(auth->method, "SigV4-query");
      return 0;
    }
  }
  return 0;
}
