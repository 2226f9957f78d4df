// The /v1 identity API through a real net::Server on port 0 and net::HttpClient: every route,
// every role, project isolation, revoked/expired tokens, label selectors and request validation.
// The only fake is the S3 key issuer (the object store has its own tests).
#include "control/rest_api.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "base/json.h"
#include "base/time.h"
#include "control/billing.h"
#include "control/postgres_test_util.h"
#include "control/problem.h"
#include "net/client.h"

namespace sovai::control {
namespace {

using Json = nlohmann::json;

constexpr char kAdminToken[] = "sovai_rest_test_admin_token_0123456789";
constexpr char kAdminAccessKey[] = "SVRESTADMIN000000001";

// Records calls; issues keys "SVFAKE0001", ... Thread-safe, as the interface requires.
class FakeS3KeyIssuer : public S3KeyIssuer {
 public:
  base::Result<Key> Create(const std::string& user) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back("create " + user);
    if (fail_with_) {
      base::Status st = *fail_with_;
      fail_with_.reset();
      return st;
    }
    char id[32];
    std::snprintf(id, sizeof id, "SVFAKE%04d", ++next_);
    keys_[id] = user;
    return Key{id, "secret-" + std::string(id)};
  }
  base::Status Revoke(const std::string& access_key_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back("revoke " + access_key_id);
    if (keys_.erase(access_key_id) == 0) return base::NotFoundError("no such key");
    return base::Status();
  }

  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  size_t live_keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_.size();
  }
  void FailNextCreate(base::Status st) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_with_ = std::move(st);
  }

 private:
  std::mutex mu_;  // guards everything below
  std::vector<std::string> calls_;
  std::map<std::string, std::string> keys_;
  std::optional<base::Status> fail_with_;
  int next_ = 0;
};

struct Reply {
  int status = 0;
  Json json;
  std::string body;
  net::Headers headers;
};

std::ostream& operator<<(std::ostream& os, const Reply& r) {
  return os << r.status << " " << r.body;
}

// The field of the first entry of a problem's `errors`.
std::string FirstField(const Reply& r) {
  if (!r.json.is_object() || !r.json.contains("errors") || r.json["errors"].empty()) return "";
  return r.json["errors"][0].value("field", "");
}

// The `items` of a list reply, which must be a 200. A failed request gives a non-empty sentinel,
// so that checks like Items(r).empty() cannot pass by accident.
Json Items(const Reply& r) {
  EXPECT_EQ(r.status, 200) << r;
  if (!r.json.is_object() || !r.json.contains("items") || !r.json["items"].is_array()) {
    ADD_FAILURE() << "not a list: " << r;
    return Json::array({"<not a list>"});
  }
  return r.json["items"];
}

// Replaces every {param} of a route pattern by `value`.
std::string Fill(std::string_view pattern, const std::string& value) {
  return std::regex_replace(std::string(pattern), std::regex("\\{[a-z]+\\}"), value);
}

class RestApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-rest-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // "" (SQLite in the data directory), or a PostgreSQL URL with SOVAI_TEST_STATE=postgres.
    if (testing::PostgresStateRequested()) SOVAI_STATE_LOCATION_OR_SKIP(state_url_, dir_);
    StartServer(&issuer_);
  }
  void TearDown() override {
    StopServer();
    base::Env::Default().DeleteDirRecursive(dir_).IgnoreError();
  }

  void StartServer(S3KeyIssuer* issuer) {
    AdminCredentials admin;
    admin.access_key_id = kAdminAccessKey;
    admin.secret_access_key = "not-used-by-the-control-plane";
    admin.api_token = kAdminToken;
    ControlPlaneOptions options;
    options.env = &env_;
    options.admin = admin;
    options.s3_keys = issuer;
    options.state_url = state_url_;
    auto control = ControlPlane::Open(dir_ + "/data", options);
    ASSERT_TRUE(control.ok()) << control.status();
    control_ = std::move(*control);
    net::Router router;
    ASSERT_TRUE(RegisterRestApi(router, *control_).ok());
    server_ = std::make_unique<net::Server>(std::move(router));
    net::ServerOptions server_options;
    server_options.listen = "127.0.0.1:0";
    server_options.io_threads = 2;
    server_options.error_renderer = RenderServerProblem;
    ASSERT_TRUE(server_->Start(server_options).ok());
    client_ = NewClient();
  }

  void StopServer() {
    client_.reset();
    if (server_) server_->Shutdown(std::chrono::milliseconds(1000));
    server_.reset();
    control_.reset();
  }

  std::unique_ptr<net::HttpClient> NewClient() {
    net::ClientOptions options;
    options.host = "127.0.0.1";
    options.port = server_->port();
    return std::make_unique<net::HttpClient>(options);
  }

  static Reply Send(net::HttpClient& client, std::string_view method, const std::string& target,
                    const net::Headers& headers, const std::optional<std::string>& body) {
    net::ClientRequest request;
    request.method = std::string(method);
    request.target = target;
    request.headers = headers;
    if (body) {
      request.body = *body;
      request.headers.Set("Content-Type", "application/json");
    }
    Reply r;
    auto response = client.Send(request);
    if (!response.ok()) {
      ADD_FAILURE() << method << " " << target << ": " << response.status();
      return r;
    }
    r.status = response->status;
    r.body = response->body;
    r.headers = response->headers;
    if (!r.body.empty()) r.json = Json::parse(r.body, nullptr, false);
    return r;
  }

  Reply Call(std::string_view method, const std::string& target, const std::string& token,
             const std::optional<std::string>& body = std::nullopt) {
    net::Headers headers;
    if (!token.empty()) headers.Add("Authorization", "Bearer " + token);
    return Send(*client_, method, target, headers, body);
  }
  Reply Get(const std::string& target, const std::string& token) {
    return Call("GET", target, token);
  }
  Reply Post(const std::string& target, const std::string& token, const Json& body) {
    return Call("POST", target, token, body.dump());
  }
  Reply Delete(const std::string& target, const std::string& token) {
    return Call("DELETE", target, token);
  }

  std::string MakeUser(const std::string& name) {
    Reply r = Post("/v1/users", kAdminToken, {{"name", name}});
    EXPECT_EQ(r.status, 201) << r;
    return r.json.value("id", "");
  }
  std::string MakeProject(const std::string& name) {
    Reply r = Post("/v1/projects", kAdminToken, {{"name", name}});
    EXPECT_EQ(r.status, 201) << r;
    return r.json.value("id", "");
  }
  void AddMember(const std::string& project, const std::string& user, const std::string& role) {
    Reply r = Post("/v1/projects/" + project + "/members/" + user, kAdminToken, {{"role", role}});
    EXPECT_EQ(r.status, 201) << r;
  }
  struct Token {
    std::string id;
    std::string secret;
  };
  Token MakeToken(const std::string& creator, const Json& body) {
    Reply r = Post("/v1/tokens", creator, body);
    EXPECT_EQ(r.status, 201) << r;
    return {r.json.value("id", ""), r.json.value("token", "")};
  }

  // Two projects: nlp (alice admin, bob operator, carol read) and cv (dave admin).
  struct World {
    std::string nlp, cv;
    std::string alice, bob, carol, dave;
    Token alice_token, bob_token, carol_token, dave_token;
  };
  World MakeWorld() {
    World w;
    w.nlp = MakeProject("nlp");
    w.cv = MakeProject("cv");
    w.alice = MakeUser("alice");
    w.bob = MakeUser("bob");
    w.carol = MakeUser("carol");
    w.dave = MakeUser("dave");
    AddMember(w.nlp, w.alice, "admin");
    AddMember(w.nlp, w.bob, "operator");
    AddMember(w.nlp, w.carol, "read");
    AddMember(w.cv, w.dave, "admin");
    w.alice_token =
        MakeToken(kAdminToken, {{"role", "admin"}, {"user", w.alice}, {"project", w.nlp}});
    w.bob_token =
        MakeToken(kAdminToken, {{"role", "operator"}, {"user", w.bob}, {"project", w.nlp}});
    w.carol_token =
        MakeToken(kAdminToken, {{"role", "read"}, {"user", w.carol}, {"project", w.nlp}});
    w.dave_token = MakeToken(kAdminToken, {{"role", "admin"}, {"user", w.dave}, {"project", w.cv}});
    return w;
  }

  static std::vector<std::string> Names(const Reply& list, const char* member = "name") {
    std::vector<std::string> out;
    for (const Json& item : Items(list)) {
      if (item.is_object()) out.push_back(item.value(member, ""));
    }
    return out;
  }

  base::ManualClock clock_;
  base::ManualClockEnv env_{base::Env::Default(), clock_};
  FakeS3KeyIssuer issuer_;
  std::string dir_;
  std::string state_url_;  // ControlPlaneOptions::state_url
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<net::Server> server_;
  std::unique_ptr<net::HttpClient> client_;
};

// --- Authentication ----------------------------------------------------------------------------

TEST_F(RestApiTest, EveryRouteRequiresAValidBearerToken) {
  for (const RouteSpec& route : RestRoutes()) {
    const std::string target = Fill(route.pattern, "x");
    std::optional<std::string> body;
    if (route.method == "POST") body = "{}";
    for (const char* authorization :
         {"", "Basic YWRtaW46YWRtaW4=", "Bearer", "Bearer sov_not_a_token", "Bearer  "}) {
      net::Headers headers;
      if (*authorization) headers.Add("Authorization", authorization);
      Reply r = Send(*client_, route.method, target, headers, body);
      EXPECT_EQ(r.status, 401) << route.method << " " << target << " [" << authorization << "] "
                               << r;
      EXPECT_EQ(r.headers.Get("WWW-Authenticate").value_or(""), "Bearer realm=\"sovai\"");
      EXPECT_EQ(r.headers.Get("Content-Type").value_or(""), "application/problem+json");
      EXPECT_EQ(r.json.value("type", ""), "urn:sovai:problem:unauthenticated") << r;
    }
  }
}

TEST_F(RestApiTest, TheBootstrapAdminTokenIsAPlatformAdmin) {
  Reply r = Get("/v1/whoami", kAdminToken);
  ASSERT_EQ(r.status, 200) << r;
  EXPECT_EQ(r.json["user"]["name"], "admin");
  EXPECT_EQ(r.json["project"]["name"], "default");
  EXPECT_EQ(r.json["project"]["system"], true);
  EXPECT_EQ(r.json["role"], "admin");
  EXPECT_EQ(r.json["platform_admin"], true);
  EXPECT_EQ(r.json["token"]["bootstrap"], true);
  EXPECT_FALSE(r.json["token"].contains("token"));  // the secret is never shown again
  // The scheme is case-insensitive (RFC 7235).
  net::Headers headers;
  headers.Add("Authorization", std::string("bearer ") + kAdminToken);
  EXPECT_EQ(Send(*client_, "GET", "/v1/whoami", headers, std::nullopt).status, 200);

  // The bootstrap identity cannot be taken away through the API.
  std::string admin_id = r.json["user"]["id"];
  std::string default_id = r.json["project"]["id"];
  std::string token_id = r.json["token"]["id"];
  EXPECT_EQ(Delete("/v1/users/" + admin_id, kAdminToken).status, 409);
  EXPECT_EQ(Delete("/v1/tokens/" + token_id, kAdminToken).status, 409);
  EXPECT_EQ(Delete("/v1/projects/" + default_id + "/members/" + admin_id, kAdminToken).status, 409);
  EXPECT_EQ(
      Post("/v1/projects/" + default_id + "/members/" + admin_id, kAdminToken, {{"role", "read"}})
          .status,
      409);
  EXPECT_EQ(Get("/v1/whoami", kAdminToken).status, 200);
}

TEST_F(RestApiTest, RevokedAndExpiredTokensAreRefusedWith401) {
  World w = MakeWorld();
  ASSERT_EQ(Get("/v1/whoami", w.bob_token.secret).status, 200);
  ASSERT_EQ(Delete("/v1/tokens/" + w.bob_token.id, kAdminToken).status, 204);
  Reply revoked = Get("/v1/whoami", w.bob_token.secret);
  EXPECT_EQ(revoked.status, 401) << revoked;
  EXPECT_NE(revoked.json.value("detail", "").find("revoked"), std::string::npos) << revoked;
  // Revoking again is harmless.
  EXPECT_EQ(Delete("/v1/tokens/" + w.bob_token.id, kAdminToken).status, 204);

  const int64_t hour_us = 3600 * base::kMicrosPerSecond;
  // Read tokens may not POST, so carol cannot mint tokens at all.
  EXPECT_EQ(Post("/v1/tokens", w.carol_token.secret, {{"role", "read"}}).status, 403);
  Token expiring =
      MakeToken(w.alice_token.secret,
                {{"role", "operator"},
                 {"expires_at", base::FormatRfc3339(clock_.NowUnixMicros() + hour_us)}});
  ASSERT_EQ(Get("/v1/whoami", expiring.secret).status, 200);
  // A token cannot outlive the token that made it: no expiry means its creator's.
  Token child = MakeToken(expiring.secret, {{"role", "read"}});
  Reply child_info = Get("/v1/whoami", child.secret);
  ASSERT_EQ(child_info.status, 200) << child_info;
  EXPECT_EQ(child_info.json["token"]["expires_at"],
            base::FormatRfc3339(clock_.NowUnixMicros() + hour_us));
  Reply later = Post("/v1/tokens", expiring.secret,
                     {{"role", "read"},
                      {"expires_at", base::FormatRfc3339(clock_.NowUnixMicros() + 2 * hour_us)}});
  EXPECT_EQ(later.status, 403) << later;
  EXPECT_EQ(FirstField(later), "expires_at");

  clock_.Advance(hour_us);
  Reply expired = Get("/v1/whoami", expiring.secret);
  EXPECT_EQ(expired.status, 401) << expired;
  EXPECT_NE(expired.json.value("detail", "").find("expired"), std::string::npos) << expired;
  EXPECT_EQ(Get("/v1/whoami", child.secret).status, 401);
  EXPECT_EQ(Get("/v1/whoami", w.alice_token.secret).status, 200);
}

// --- Users -------------------------------------------------------------------------------------

TEST_F(RestApiTest, AdminCreatesListsGetsAndDeletesUsers) {
  Reply created = Post("/v1/users", kAdminToken,
                       {{"name", "alice"}, {"display_name", "Alice A."}, {"email", "a@x.example"}});
  ASSERT_EQ(created.status, 201) << created;
  const std::string alice = created.json["id"];
  EXPECT_TRUE(alice.starts_with("usr_"));
  EXPECT_EQ(created.json["display_name"], "Alice A.");
  EXPECT_EQ(created.json["email"], "a@x.example");
  EXPECT_EQ(created.json["bootstrap"], false);
  EXPECT_TRUE(base::ParseRfc3339(created.json.value("created_at", "")).ok());

  Reply dup = Post("/v1/users", kAdminToken, {{"name", "alice"}});
  EXPECT_EQ(dup.status, 409) << dup;
  EXPECT_EQ(FirstField(dup), "name");
  EXPECT_EQ(dup.json["type"], "urn:sovai:problem:already-exists");

  Reply got = Get("/v1/users/" + alice, kAdminToken);
  ASSERT_EQ(got.status, 200) << got;
  EXPECT_EQ(got.json["name"], "alice");

  for (const char* name : {"u2", "u3", "u4"}) MakeUser(name);
  // Pages of 2 through 5 users.
  std::vector<std::string> names;
  std::string target = "/v1/users?limit=2";
  for (int pages = 0; pages < 10; ++pages) {
    Reply page = Get(target, kAdminToken);
    ASSERT_EQ(page.status, 200) << page;
    EXPECT_LE(Items(page).size(), 2u);
    for (const std::string& n : Names(page)) names.push_back(n);
    if (page.json["next_cursor"].is_null()) break;
    target = "/v1/users?limit=2&cursor=" + page.json["next_cursor"].get<std::string>();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"admin", "alice", "u2", "u3", "u4"}));

  EXPECT_EQ(Delete("/v1/users/" + alice, kAdminToken).status, 204);
  EXPECT_EQ(Get("/v1/users/" + alice, kAdminToken).status, 404);
  EXPECT_EQ(Delete("/v1/users/" + alice, kAdminToken).status, 404);
}

TEST_F(RestApiTest, MalformedRequestsAre400sNamingTheField) {
  auto expect_field = [&](const std::string& target, const std::string& body,
                          const std::string& field, const std::string& message_part) {
    Reply r = Call("POST", target, kAdminToken, body);
    EXPECT_EQ(r.status, 400) << target << " " << body << ": " << r;
    EXPECT_EQ(r.json.value("type", ""), "urn:sovai:problem:invalid-argument") << r;
    EXPECT_EQ(FirstField(r), field) << body << ": " << r;
    EXPECT_NE(r.body.find(message_part), std::string::npos) << body << ": " << r;
  };
  expect_field("/v1/users", "{}", "name", "missing required field 'name'");
  expect_field("/v1/users", R"({"name": 5})", "name", "must be a string");
  expect_field("/v1/users", R"({"name": "Not Valid"})", "name", "a-z");
  expect_field("/v1/users", R"({"name": "ok", "emial": "x@y"})", "emial", "unknown field");
  expect_field("/v1/users", R"({"name": "ok", "email": "nope"})", "email", "user@domain");
  expect_field("/v1/projects", R"({"name": "p", "description": ["x"]})", "description",
               "must be a string");
  expect_field("/v1/tokens", R"({"role": "boss"})", "role", "is not one of");
  expect_field("/v1/tokens", R"({})", "role", "missing required field 'role'");
  expect_field("/v1/tokens", R"({"role": "read", "labels": "team"})", "labels", "key=value");
  expect_field("/v1/tokens", R"({"role": "read", "name": 3})", "name", "must be a string");
  expect_field("/v1/tokens", R"({"role": "read", "expires_at": "tomorrow"})", "expires_at",
               "tomorrow");
  expect_field("/v1/tokens", R"({"role": "read", "expires_at": "2001-01-01T00:00:00Z"})",
               "expires_at", "not in the future");

  // Several bad fields are reported together.
  Reply two = Call("POST", "/v1/users", kAdminToken, R"({"name": 5, "email": 7})");
  EXPECT_EQ(two.status, 400);
  EXPECT_EQ(two.json["errors"].size(), 2u) << two;

  // Bodies that are not JSON objects have no field to name; the detail says what is wrong.
  for (const auto& [body, detail] :
       std::vector<std::pair<std::string, std::string>>{{"{", "invalid JSON"},
                                                        {"{\"name\": \"x\",}", "invalid JSON"},
                                                        {"", "empty"},
                                                        {"[]", "must be a JSON object"},
                                                        {"\"alice\"", "must be a JSON object"}}) {
    Reply r = Call("POST", "/v1/users", kAdminToken, body);
    EXPECT_EQ(r.status, 400) << body << ": " << r;
    EXPECT_NE(r.json.value("detail", "").find(detail), std::string::npos) << body << ": " << r;
  }

  World w = MakeWorld();
  expect_field("/v1/projects/" + w.nlp + "/members/" + w.dave, R"({"role": 1})", "role",
               "must be a string");
  expect_field("/v1/projects/" + w.nlp + "/members/" + w.dave, R"({})", "role", "missing");

  for (const auto& [query, field] :
       std::vector<std::pair<std::string, std::string>>{{"limit=0", "limit"},
                                                        {"limit=501", "limit"},
                                                        {"limit=abc", "limit"},
                                                        {"limit=", "limit"},
                                                        {"cursor=bad%20cursor", "cursor"},
                                                        {"cursor=", "cursor"}}) {
    for (const std::string& path :
         {std::string("/v1/users"), std::string("/v1/tokens"), std::string("/v1/projects"),
          "/v1/projects/" + w.nlp + "/members"}) {
      Reply r = Get(path + "?" + query, kAdminToken);
      EXPECT_EQ(r.status, 400) << path << "?" << query << ": " << r;
      EXPECT_EQ(FirstField(r), field) << path << "?" << query << ": " << r;
    }
  }

  // A body over the limit is refused before it is read.
  Reply huge = Call("POST", "/v1/users", kAdminToken,
                    "{\"name\": \"" + std::string(kMaxRequestBodyBytes, 'a') + "\"}");
  EXPECT_EQ(huge.status, 413) << huge.status;
}

TEST_F(RestApiTest, UnknownRoutesAndMethodsAnswerProblems) {
  Reply missing = Get("/v1/nothing-here", kAdminToken);
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.headers.Get("Content-Type").value_or(""), "application/problem+json");
  Reply method = Call("PUT", "/v1/users", kAdminToken, "{}");
  EXPECT_EQ(method.status, 405);
  EXPECT_EQ(method.headers.Get("Content-Type").value_or(""), "application/problem+json");
}

// --- Roles -------------------------------------------------------------------------------------

TEST_F(RestApiTest, ReadTokensMayOnlyGet) {
  World w = MakeWorld();
  const std::string& carol = w.carol_token.secret;
  Reply me = Get("/v1/whoami", carol);
  ASSERT_EQ(me.status, 200) << me;
  EXPECT_EQ(me.json["role"], "read");
  EXPECT_EQ(me.json["platform_admin"], false);

  Reply users = Get("/v1/users", carol);
  ASSERT_EQ(users.status, 200) << users;
  EXPECT_EQ(Names(users), (std::vector<std::string>{"alice", "bob", "carol"}));
  Reply projects = Get("/v1/projects", carol);
  ASSERT_EQ(projects.status, 200);
  EXPECT_EQ(Names(projects), (std::vector<std::string>{"nlp"}));
  EXPECT_EQ(Get("/v1/projects/" + w.nlp, carol).status, 200);
  Reply members = Get("/v1/projects/" + w.nlp + "/members", carol);
  ASSERT_EQ(members.status, 200);
  EXPECT_EQ(Items(members).size(), 3u);
  Reply tokens = Get("/v1/tokens", carol);
  ASSERT_EQ(tokens.status, 200);
  ASSERT_EQ(Items(tokens).size(), 1u);
  EXPECT_EQ(Items(tokens)[0]["id"], w.carol_token.id);
  EXPECT_EQ(Get("/v1/users/" + w.alice, carol).status, 200);
  EXPECT_EQ(Get("/v1/users/" + w.carol + "/s3-keys", carol).status, 200);

  for (const RouteSpec& route : RestRoutes()) {
    if (route.method == "GET") continue;
    const std::string target = Fill(route.pattern, w.carol);
    Reply r = Call(route.method, target, carol,
                   route.method == "POST" ? std::optional<std::string>("{}") : std::nullopt);
    EXPECT_EQ(r.status, 403) << route.method << " " << target << ": " << r;
    EXPECT_EQ(r.json.value("type", ""), "urn:sovai:problem:permission-denied");
  }
  // Nothing changed.
  EXPECT_EQ(Get("/v1/whoami", carol).status, 200);
}

TEST_F(RestApiTest, OperatorsManageOnlyTheirOwnCredentials) {
  World w = MakeWorld();
  const std::string& bob = w.bob_token.secret;

  Token own = MakeToken(bob, {{"role", "operator"}, {"name", "ci"}});
  ASSERT_FALSE(own.secret.empty());
  EXPECT_TRUE(own.secret.starts_with("sov_"));
  Reply escalate = Post("/v1/tokens", bob, {{"role", "admin"}});
  EXPECT_EQ(escalate.status, 403) << escalate;
  EXPECT_EQ(FirstField(escalate), "role");
  Reply for_alice = Post("/v1/tokens", bob, {{"role", "read"}, {"user", w.alice}});
  EXPECT_EQ(for_alice.status, 403) << for_alice;
  EXPECT_EQ(FirstField(for_alice), "user");

  EXPECT_EQ(Post("/v1/users", bob, {{"name", "mallory"}}).status, 403);
  EXPECT_EQ(Post("/v1/projects", bob, {{"name", "mine"}}).status, 403);
  EXPECT_EQ(Post("/v1/projects/" + w.nlp + "/members/" + w.dave, bob, {{"role", "read"}}).status,
            403);
  EXPECT_EQ(Delete("/v1/projects/" + w.nlp + "/members/" + w.carol, bob).status, 403);
  EXPECT_EQ(Delete("/v1/users/" + w.carol, bob).status, 403);  // visible, not allowed
  EXPECT_EQ(Delete("/v1/users/" + w.dave, bob).status, 404);   // not even visible

  // Tokens: bob sees and revokes his own only.
  Reply tokens = Get("/v1/tokens", bob);
  ASSERT_EQ(tokens.status, 200);
  EXPECT_EQ(Items(tokens).size(), 2u) << tokens;
  for (const Json& t : Items(tokens)) EXPECT_EQ(t["user"], w.bob);
  EXPECT_EQ(Delete("/v1/tokens/" + w.alice_token.id, bob).status, 404);
  EXPECT_EQ(Delete("/v1/tokens/" + own.id, bob).status, 204);
  EXPECT_EQ(Get("/v1/whoami", own.secret).status, 401);

  // S3 keys: his own, not alice's.
  Reply key = Call("POST", "/v1/users/" + w.bob + "/s3-keys", bob);
  EXPECT_EQ(key.status, 201) << key;
  EXPECT_EQ(Call("POST", "/v1/users/" + w.alice + "/s3-keys", bob).status, 403);
  EXPECT_EQ(Get("/v1/users/" + w.alice + "/s3-keys", bob).status, 403);
  EXPECT_EQ(Get("/v1/users/" + w.bob + "/s3-keys", bob).status, 200);
}

TEST_F(RestApiTest, ProjectAdminsAdministerOnlyTheirProject) {
  World w = MakeWorld();
  const std::string& alice = w.alice_token.secret;
  const std::string erin = MakeUser("erin");

  Reply added = Post("/v1/projects/" + w.nlp + "/members/" + erin, alice, {{"role", "read"}});
  EXPECT_EQ(added.status, 201) << added;
  EXPECT_EQ(added.json["role"], "read");
  Reply changed = Post("/v1/projects/" + w.nlp + "/members/" + erin, alice, {{"role", "operator"}});
  EXPECT_EQ(changed.status, 200) << changed;
  EXPECT_EQ(changed.json["role"], "operator");
  EXPECT_EQ(Post("/v1/projects/" + w.cv + "/members/" + erin, alice, {{"role", "read"}}).status,
            404);
  EXPECT_EQ(Post("/v1/projects/" + w.nlp + "/members/usr_nobody", alice, {{"role", "read"}}).status,
            404);

  // Tokens for members, within the member's role.
  Token for_bob = MakeToken(alice, {{"role", "operator"}, {"user", w.bob}});
  ASSERT_FALSE(for_bob.secret.empty());
  Reply whoami = Get("/v1/whoami", for_bob.secret);
  EXPECT_EQ(whoami.json["user"]["name"], "bob");
  Reply above = Post("/v1/tokens", alice, {{"role", "admin"}, {"user", w.bob}});
  EXPECT_EQ(above.status, 403) << above;
  EXPECT_EQ(FirstField(above), "role");
  Reply outsider = Post("/v1/tokens", alice, {{"role", "read"}, {"user", w.dave}});
  EXPECT_EQ(outsider.status, 409) << outsider;
  EXPECT_EQ(FirstField(outsider), "user");

  Reply tokens = Get("/v1/tokens", alice);
  ASSERT_EQ(tokens.status, 200);
  for (const Json& t : Items(tokens)) EXPECT_EQ(t["project"], w.nlp) << t;
  EXPECT_EQ(Items(tokens).size(), 4u) << tokens;  // alice, bob, carol, for_bob

  EXPECT_EQ(Delete("/v1/tokens/" + w.bob_token.id, alice).status, 204);
  EXPECT_EQ(Get("/v1/whoami", w.bob_token.secret).status, 401);

  Reply removed = Delete("/v1/projects/" + w.nlp + "/members/" + w.carol, alice);
  EXPECT_EQ(removed.status, 204) << removed;
  EXPECT_EQ(Get("/v1/whoami", w.carol_token.secret).status, 401);
  EXPECT_EQ(Delete("/v1/projects/" + w.nlp + "/members/" + w.carol, alice).status, 404);

  EXPECT_EQ(Post("/v1/users", alice, {{"name", "mallory"}}).status, 403);
  EXPECT_EQ(Post("/v1/projects", alice, {{"name", "mine"}}).status, 403);
  EXPECT_EQ(Delete("/v1/users/" + w.bob, alice).status, 403);
}

TEST_F(RestApiTest, PlatformAdminsSeeAndManageEverything) {
  World w = MakeWorld();
  Reply projects = Get("/v1/projects", kAdminToken);
  ASSERT_EQ(projects.status, 200);
  EXPECT_EQ(Names(projects), (std::vector<std::string>{"default", "nlp", "cv"}));
  Reply project = Get("/v1/projects/" + w.cv, kAdminToken);
  ASSERT_EQ(project.status, 200) << project;
  EXPECT_EQ(project.json["name"], "cv");
  EXPECT_EQ(project.json["system"], false);
  EXPECT_EQ(Get("/v1/projects/prj_nope", kAdminToken).status, 404);

  Reply tokens = Get("/v1/tokens?limit=500", kAdminToken);
  ASSERT_EQ(tokens.status, 200);
  EXPECT_EQ(Items(tokens).size(), 5u);  // 4 + the bootstrap token
  Reply cv_tokens = Get("/v1/tokens?project=" + w.cv, kAdminToken);
  ASSERT_EQ(Items(cv_tokens).size(), 1u);
  EXPECT_EQ(Items(cv_tokens)[0]["id"], w.dave_token.id);
  Reply bob_tokens = Get("/v1/tokens?user=" + w.bob, kAdminToken);
  ASSERT_EQ(Items(bob_tokens).size(), 1u);

  AddMember(w.cv, w.alice, "read");
  Token alice_cv = MakeToken(kAdminToken, {{"role", "read"}, {"user", w.alice}, {"project", w.cv}});
  Reply whoami = Get("/v1/whoami", alice_cv.secret);
  EXPECT_EQ(whoami.json["project"]["name"], "cv");
  EXPECT_EQ(Delete("/v1/tokens/" + w.dave_token.id, kAdminToken).status, 204);

  // A second platform admin: an admin of the system project.
  std::string default_id = Get("/v1/whoami", kAdminToken).json["project"]["id"];
  AddMember(default_id, w.dave, "admin");
  Token dave_platform =
      MakeToken(kAdminToken, {{"role", "admin"}, {"user", w.dave}, {"project", default_id}});
  Reply dave = Get("/v1/whoami", dave_platform.secret);
  EXPECT_EQ(dave.json["platform_admin"], true);
  EXPECT_EQ(Post("/v1/users", dave_platform.secret, {{"name", "frank"}}).status, 201);
  // It cannot delete the user its token belongs to.
  EXPECT_EQ(Delete("/v1/users/" + w.dave, dave_platform.secret).status, 409);
}

// --- Isolation ---------------------------------------------------------------------------------

TEST_F(RestApiTest, AProjectSeesNothingOfAnotherProject) {
  World w = MakeWorld();
  Reply key = Call("POST", "/v1/users/" + w.dave + "/s3-keys", w.dave_token.secret);
  ASSERT_EQ(key.status, 201) << key;
  const std::string dave_key = key.json["access_key_id"];

  for (const std::string& token :
       {w.alice_token.secret, w.bob_token.secret, w.carol_token.secret}) {
    EXPECT_EQ(Get("/v1/projects/" + w.cv, token).status, 404);
    EXPECT_EQ(Get("/v1/projects/" + w.cv + "/members", token).status, 404);
    EXPECT_EQ(Get("/v1/users/" + w.dave, token).status, 404);
    EXPECT_EQ(Get("/v1/users/" + w.dave + "/s3-keys", token).status, 404);
    Reply projects = Get("/v1/projects", token);
    EXPECT_EQ(Names(projects), (std::vector<std::string>{"nlp"}));
    Reply users = Get("/v1/users", token);
    for (const std::string& name : Names(users)) EXPECT_NE(name, "dave");
    Reply tokens = Get("/v1/tokens?project=" + w.cv, token);
    ASSERT_EQ(tokens.status, 200);
    EXPECT_TRUE(Items(tokens).empty()) << tokens;
    Reply all_tokens = Get("/v1/tokens", token);
    for (const Json& t : Items(all_tokens)) EXPECT_EQ(t["project"], w.nlp);
  }
  for (const std::string& token : {w.alice_token.secret, w.bob_token.secret}) {
    EXPECT_EQ(Delete("/v1/tokens/" + w.dave_token.id, token).status, 404);
    EXPECT_EQ(Delete("/v1/s3-keys/" + dave_key, token).status, 404);
    EXPECT_EQ(Post("/v1/tokens", token, {{"role", "read"}, {"project", w.cv}}).status, 404);
  }
  // And the other way round.
  EXPECT_EQ(Get("/v1/projects/" + w.nlp, w.dave_token.secret).status, 404);
  EXPECT_EQ(Get("/v1/users/" + w.alice, w.dave_token.secret).status, 404);
  EXPECT_EQ(Delete("/v1/tokens/" + w.alice_token.id, w.dave_token.secret).status, 404);
  EXPECT_EQ(
      Post("/v1/projects/" + w.nlp + "/members/" + w.dave, w.dave_token.secret, {{"role", "admin"}})
          .status,
      404);
  EXPECT_EQ(Get("/v1/whoami", w.dave_token.secret).status, 200);
  EXPECT_EQ(Get("/v1/whoami", w.alice_token.secret).status, 200);
}

TEST_F(RestApiTest, LabelSelectorsLimitATokensReach) {
  World w = MakeWorld();
  Token labeled = MakeToken(w.alice_token.secret, {{"role", "operator"}, {"labels", "team=nlp"}});
  ASSERT_FALSE(labeled.secret.empty());
  Reply me = Get("/v1/whoami", labeled.secret);
  ASSERT_EQ(me.status, 200);
  EXPECT_EQ(me.json["token"]["labels"], "team=nlp");

  // Identity resources carry no labels.
  for (const std::string& target :
       {std::string("/v1/users"), std::string("/v1/projects"), "/v1/projects/" + w.nlp,
        "/v1/users/" + w.alice, "/v1/users/" + w.alice + "/s3-keys"}) {
    Reply r = Get(target, labeled.secret);
    EXPECT_EQ(r.status, 403) << target << ": " << r;
  }
  // It may mint only tokens at least as narrow as itself.
  Reply wider = Post("/v1/tokens", labeled.secret, {{"role", "read"}});
  EXPECT_EQ(wider.status, 403) << wider;
  EXPECT_EQ(FirstField(wider), "labels");
  Reply other = Post("/v1/tokens", labeled.secret, {{"role", "read"}, {"labels", "team=cv"}});
  EXPECT_EQ(other.status, 403);
  Token narrower = MakeToken(labeled.secret, {{"role", "read"}, {"labels", "env=prod,team=nlp"}});
  ASSERT_FALSE(narrower.secret.empty());
  Reply narrower_me = Get("/v1/whoami", narrower.secret);
  EXPECT_EQ(narrower_me.json["token"]["labels"], "env=prod,team=nlp");

  // It sees only tokens carrying its labels (alice's unlabeled token stays invisible).
  Reply tokens = Get("/v1/tokens", labeled.secret);
  ASSERT_EQ(tokens.status, 200);
  std::vector<std::string> ids;
  for (const Json& t : Items(tokens)) ids.push_back(t["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{labeled.id, narrower.id}));
  EXPECT_EQ(Delete("/v1/tokens/" + w.alice_token.id, labeled.secret).status, 404);
  EXPECT_EQ(Delete("/v1/tokens/" + narrower.id, labeled.secret).status, 204);
}

// --- S3 keys -----------------------------------------------------------------------------------

TEST_F(RestApiTest, S3KeysAreIssuedAndRevokedThroughTheIssuer) {
  World w = MakeWorld();
  // The admin's token is of the system project, which alice is not in: name her project.
  Reply outside = Call("POST", "/v1/users/" + w.alice + "/s3-keys", kAdminToken);
  EXPECT_EQ(outside.status, 409) << outside;
  Reply created = Post("/v1/users/" + w.alice + "/s3-keys", kAdminToken, {{"project", w.nlp}});
  ASSERT_EQ(created.status, 201) << created;
  const std::string key = created.json["access_key_id"];
  EXPECT_EQ(created.json["secret_access_key"], "secret-" + key);
  EXPECT_EQ(created.json["user"], w.alice);
  EXPECT_EQ(issuer_.calls(), (std::vector<std::string>{"create " + w.nlp}));

  Reply listed = Get("/v1/users/" + w.alice + "/s3-keys", w.alice_token.secret);
  ASSERT_EQ(listed.status, 200) << listed;
  ASSERT_EQ(Items(listed).size(), 1u);
  EXPECT_EQ(Items(listed)[0]["access_key_id"], key);
  EXPECT_FALSE(Items(listed)[0].contains("secret_access_key"));

  EXPECT_EQ(Delete("/v1/s3-keys/" + key, w.bob_token.secret).status, 404);
  EXPECT_EQ(Delete("/v1/s3-keys/" + key, w.alice_token.secret).status, 204);
  EXPECT_EQ(issuer_.calls().back(), "revoke " + key);
  EXPECT_EQ(Delete("/v1/s3-keys/" + key, w.alice_token.secret).status, 404);
  EXPECT_TRUE(Items(Get("/v1/users/" + w.alice + "/s3-keys", kAdminToken)).empty());

  // The bootstrap admin's key is listed but cannot be deleted through the API.
  std::string admin_id = Get("/v1/whoami", kAdminToken).json["user"]["id"];
  Reply admin_keys = Get("/v1/users/" + admin_id + "/s3-keys", kAdminToken);
  ASSERT_EQ(Items(admin_keys).size(), 1u);
  EXPECT_EQ(Items(admin_keys)[0]["access_key_id"], kAdminAccessKey);
  EXPECT_EQ(Items(admin_keys)[0]["bootstrap"], true);
  EXPECT_EQ(Delete("/v1/s3-keys/" + std::string(kAdminAccessKey), kAdminToken).status, 409);

  // The limit is checked before the store is asked.
  for (int64_t i = 0; i < kMaxS3KeysPerUser; ++i) {
    ASSERT_EQ(Post("/v1/users/" + w.bob + "/s3-keys", kAdminToken, {{"project", w.nlp}}).status,
              201);
  }
  const size_t calls = issuer_.calls().size();
  Reply over = Post("/v1/users/" + w.bob + "/s3-keys", kAdminToken, {{"project", w.nlp}});
  EXPECT_EQ(over.status, 409) << over;
  EXPECT_EQ(issuer_.calls().size(), calls);
  Reply page = Get("/v1/users/" + w.bob + "/s3-keys?limit=10", w.bob_token.secret);
  EXPECT_EQ(Items(page).size(), 10u);
  EXPECT_FALSE(page.json["next_cursor"].is_null());

  // Deleting a user revokes its keys in the store first.
  EXPECT_EQ(Delete("/v1/users/" + w.bob, kAdminToken).status, 204);
  EXPECT_EQ(issuer_.live_keys(), 0u);
  EXPECT_EQ(Get("/v1/whoami", w.bob_token.secret).status, 401);

  // A store failure reaches the client and records nothing.
  issuer_.FailNextCreate(base::UnavailableError("object store is read-only"));
  Reply failed = Post("/v1/users/" + w.carol + "/s3-keys", kAdminToken, {{"project", w.nlp}});
  EXPECT_EQ(failed.status, 503) << failed;
  EXPECT_NE(failed.json.value("detail", "").find("read-only"), std::string::npos);
  EXPECT_TRUE(Items(Get("/v1/users/" + w.carol + "/s3-keys", kAdminToken)).empty());
  EXPECT_EQ(Call("POST", "/v1/users/usr_nope/s3-keys", kAdminToken).status, 404);
}

TEST_F(RestApiTest, WithoutAnIssuerS3KeyRoutesAre503) {
  StopServer();
  StartServer(nullptr);
  std::string admin_id = Get("/v1/whoami", kAdminToken).json["user"]["id"];
  Reply r = Call("POST", "/v1/users/" + admin_id + "/s3-keys", kAdminToken);
  EXPECT_EQ(r.status, 503) << r;
  EXPECT_EQ(r.json.value("type", ""), "urn:sovai:problem:unavailable");
  EXPECT_EQ(Get("/v1/users/" + admin_id + "/s3-keys", kAdminToken).status, 200);
}

// --- Projects and members ----------------------------------------------------------------------

TEST_F(RestApiTest, ProjectsAndMembers) {
  Reply created = Post("/v1/projects", kAdminToken, {{"name", "nlp"}, {"description", "NLP team"}});
  ASSERT_EQ(created.status, 201) << created;
  const std::string nlp = created.json["id"];
  EXPECT_TRUE(nlp.starts_with("prj_"));
  EXPECT_EQ(created.json["description"], "NLP team");
  Reply dup = Post("/v1/projects", kAdminToken, {{"name", "nlp"}});
  EXPECT_EQ(dup.status, 409);
  EXPECT_EQ(FirstField(dup), "name");

  const std::string alice = MakeUser("alice");
  Reply added = Post("/v1/projects/" + nlp + "/members/" + alice, kAdminToken, {{"role", "read"}});
  ASSERT_EQ(added.status, 201) << added;
  EXPECT_EQ(added.json["project"], nlp);
  EXPECT_EQ(added.json["user"], alice);
  Reply members = Get("/v1/projects/" + nlp + "/members", kAdminToken);
  ASSERT_EQ(members.status, 200);
  EXPECT_EQ(Names(members, "user"), (std::vector<std::string>{alice}));
  EXPECT_EQ(Delete("/v1/projects/" + nlp + "/members/" + alice, kAdminToken).status, 204);
  EXPECT_TRUE(Items(Get("/v1/projects/" + nlp + "/members", kAdminToken)).empty());
  EXPECT_EQ(Get("/v1/projects/prj_nope/members", kAdminToken).status, 404);
}

// --- Billing (docs/billing.md) -------------------------------------------------------------------

TEST_F(RestApiTest, WithoutBillingItsRoutesAre503) {
  World w = MakeWorld();
  EXPECT_EQ(Get("/v1/billing/usage", kAdminToken).status, 503);
  EXPECT_EQ(Get("/v1/projects/" + w.nlp + "/budget", w.alice_token.secret).status, 503);
  EXPECT_EQ(Post("/v1/jobs?dry_run=true", w.alice_token.secret, {{"flavor", "ai1-1-cpu"}}).status,
            503);
}

// The REST fixture with a billing service on the control database (threads off) and job rows
// written as JobService writes them.
class BillingRestTest : public RestApiTest {
 protected:
  void SetUp() override {
    RestApiTest::SetUp();
    if (HasFatalFailure()) return;
    control_->SetServerInfo({"EU-WEST-LOCAL", "http://127.0.0.1:9", "test", false});
    BillingServiceOptions o;
    o.flavors = &FlavorCatalog::Default();
    o.env = &env_;
    o.watch_period = std::chrono::milliseconds(0);
    o.sample_period = std::chrono::milliseconds(0);
    auto billing = BillingService::Start(control_->db(), o);
    ASSERT_TRUE(billing.ok()) << billing.status();
    billing_ = std::move(*billing);
    control_->AttachBilling(billing_.get());
  }
  void TearDown() override {
    // The server's handlers use the billing service, which uses the control database.
    client_.reset();
    if (server_) server_->Shutdown(std::chrono::milliseconds(1000));
    server_.reset();
    billing_.reset();
    RestApiTest::TearDown();
  }

  Reply Put(const std::string& target, const std::string& token, const Json& body) {
    return Call("PUT", target, token, body.dump());
  }

  // A job of `project` that ran [start, start + seconds) on `flavor` x `units`.
  void PutJob(const std::string& id, const std::string& project, const std::string& flavor,
              int units, int64_t start, int64_t seconds) {
    const int64_t end = start + seconds * base::kMicrosPerSecond;
    Json history = Json::array({{{"state", "QUEUED"}, {"at_unix_micros", start - 1}},
                                {{"state", "RUNNING"}, {"at_unix_micros", start}},
                                {{"state", "FINALIZING"}, {"at_unix_micros", end}},
                                {{"state", "DONE"}, {"at_unix_micros", end + 1}}});
    Json spec = {{"image", "sovai/shell"}, {"flavor", flavor}, {"units", units}};
    ASSERT_TRUE(control_->db()
                    .Write([&](base::Database& sql) -> base::Status {
                      SOVAI_ASSIGN_OR_RETURN(
                          base::Statement st,
                          sql.Prepare("INSERT INTO jobs(id, project, user, sequence, state, spec, "
                                      "history, created_at, updated_at) VALUES (?1, ?2, 'usr_x', "
                                      "?3, 'DONE', ?4, ?5, ?6, ?7)"));
                      st.Bind(1, id).Bind(2, project).Bind(3, ++sequence_);
                      st.Bind(4, base::DumpJson(spec)).Bind(5, base::DumpJson(history));
                      st.Bind(6, start - 1).Bind(7, end + 1);
                      return st.Run();
                    })
                    .ok());
  }

  std::unique_ptr<BillingService> billing_;
  int64_t sequence_ = 0;
};

TEST_F(BillingRestTest, BudgetsArePutByProjectAdminsAndReadByMembers) {
  World w = MakeWorld();
  const std::string path = "/v1/projects/" + w.nlp + "/budget";
  Reply none = Get(path, w.carol_token.secret);
  ASSERT_EQ(none.status, 200) << none;
  EXPECT_EQ(none.json, (Json{{"monthly_cap_eur", nullptr},
                             {"alert_percent", nullptr},
                             {"spent_eur", "0.000000"},
                             {"spent_micro_eur", 0},
                             {"alert", false},
                             {"capped", false}}));
  EXPECT_EQ(Put(path, w.bob_token.secret, {{"monthly_cap_eur", "50.00"}}).status, 403);
  EXPECT_EQ(Put(path, w.carol_token.secret, {{"monthly_cap_eur", "50.00"}}).status, 403);
  EXPECT_EQ(Put(path, w.dave_token.secret, {{"monthly_cap_eur", "50.00"}}).status, 404);
  EXPECT_EQ(Get(path, w.dave_token.secret).status, 404);
  EXPECT_EQ(Get("/v1/projects/prj_nope/budget", kAdminToken).status, 404);

  Reply set =
      Put(path, w.alice_token.secret, {{"monthly_cap_eur", "50.00"}, {"alert_percent", 60}});
  ASSERT_EQ(set.status, 200) << set;
  EXPECT_EQ(set.json["monthly_cap_eur"], "50.000000");
  EXPECT_EQ(set.json["alert_percent"], 60);
  EXPECT_EQ(set.json["capped"], false);
  EXPECT_EQ(Get(path, w.carol_token.secret).json, set.json);
  EXPECT_EQ(Get("/v1/billing/budget", w.bob_token.secret).json, set.json);
  // Without alert_percent the current one stays.
  Reply lower = Put(path, w.alice_token.secret, {{"monthly_cap_eur", "0.001"}});
  ASSERT_EQ(lower.status, 200) << lower;
  EXPECT_EQ(lower.json["monthly_cap_eur"], "0.001000");
  EXPECT_EQ(lower.json["alert_percent"], 60);
  // Spend shows up, and past the cap the project is capped.
  PutJob("job_1", w.nlp, "ai1-1-cpu", 2, env_.NowUnixMicros() - 100 * base::kMicrosPerSecond, 30);
  Reply capped = Get(path, w.carol_token.secret);
  EXPECT_EQ(capped.json["spent_micro_eur"], 1000);
  EXPECT_EQ(capped.json["spent_eur"], "0.001000");
  EXPECT_EQ(capped.json["alert"], true);
  EXPECT_EQ(capped.json["capped"], true);

  struct Bad {
    Json body;
    const char* field;
  };
  for (const Bad& bad : {Bad{{{"monthly_cap_eur", 50}}, "monthly_cap_eur"},
                         Bad{{{"monthly_cap_eur", "-1"}}, "monthly_cap_eur"},
                         Bad{{{"monthly_cap_eur", "1.0000001"}}, "monthly_cap_eur"},
                         Bad{{{"alert_percent", 80}}, "monthly_cap_eur"},
                         Bad{{{"monthly_cap_eur", "1"}, {"alert_percent", 0}}, "alert_percent"},
                         Bad{{{"monthly_cap_eur", "1"}, {"alert_percent", 101}}, "alert_percent"},
                         Bad{{{"monthly_cap_eur", "1"}, {"alert_percent", "80"}}, "alert_percent"},
                         Bad{{{"monthly_cap_eur", "1"}, {"cap", "1"}}, "cap"}}) {
    Reply r = Put(path, w.alice_token.secret, bad.body);
    EXPECT_EQ(r.status, 400) << bad.body.dump() << " " << r;
    EXPECT_EQ(FirstField(r), bad.field) << r;
  }
  Reply removed = Put(path, w.alice_token.secret, {{"monthly_cap_eur", nullptr}});
  ASSERT_EQ(removed.status, 200) << removed;
  EXPECT_TRUE(removed.json["monthly_cap_eur"].is_null());
  EXPECT_EQ(removed.json["capped"], false);
}

TEST_F(BillingRestTest, DryRunNumbersEqualTheBillOfAJobThatRanToItsTimeout) {
  World w = MakeWorld();
  const Json spec = {{"image", "sovai/shell"},
                     {"command", {"true"}},
                     {"flavor", "h100-1-gpu"},
                     {"units", 2},
                     {"timeout_s", 61}};
  Reply dry = Post("/v1/jobs?dry_run=true", w.bob_token.secret, spec);
  ASSERT_EQ(dry.status, 200) << dry;
  // The bill of the same job that ran exactly 61 s: the ledger's own arithmetic.
  const int64_t start = env_.NowUnixMicros() - 3600 * base::kMicrosPerSecond;
  BillableJob ran{"job_x",
                  w.nlp,
                  "h100-1-gpu",
                  2,
                  "",
                  {{JobState::kRunning, start},
                   {JobState::kFinalizing, start + 61 * base::kMicrosPerSecond},
                   {JobState::kTimeout, start + 62 * base::kMicrosPerSecond}}};
  std::vector<Line> bill = ComputeJobLines({&ran, 1}, FlavorCatalog::Default(),
                                           {start, env_.NowUnixMicros()}, env_.NowUnixMicros(), {});
  const int64_t billed = SumAmounts(bill);
  EXPECT_EQ(billed, 186'800);
  EXPECT_EQ(dry.json, (Json{{"price_per_minute_eur", "0.093400"},
                            {"price_per_minute_micro_eur", 93'400},
                            {"timeout_s", 61},
                            {"cost_at_timeout_eur", FormatEur(billed)},
                            {"cost_at_timeout_micro_eur", billed},
                            {"budget_left_eur", nullptr},
                            {"would_be_refused", false},
                            {"reason", ""}}));
  // The same job, really run, shows up in the usage with that amount.
  PutJob("job_x", w.nlp, "h100-1-gpu", 2, start, 61);
  Reply usage = Get("/v1/billing/usage", w.alice_token.secret);
  ASSERT_EQ(usage.status, 200) << usage;
  EXPECT_EQ(usage.json["total_micro_eur"], dry.json["cost_at_timeout_micro_eur"]);

  // With a budget of 0.20 €, 0.186800 € already spent: the same job would be refused.
  ASSERT_EQ(
      Put("/v1/projects/" + w.nlp + "/budget", w.alice_token.secret, {{"monthly_cap_eur", "0.20"}})
          .status,
      200);
  Reply refused = Post("/v1/jobs?dry_run=true", w.bob_token.secret, spec);
  ASSERT_EQ(refused.status, 200) << refused;
  EXPECT_EQ(refused.json["budget_left_eur"], "0.013200");
  EXPECT_EQ(refused.json["would_be_refused"], true);
  const std::string reason = refused.json.value("reason", "");
  for (const char* number : {"0.186800", "0.200000"}) {
    EXPECT_NE(reason.find(number), std::string::npos) << reason;
  }
  // Nothing was created (this server has no jobs at all: a real POST is 503).
  EXPECT_EQ(Post("/v1/jobs", w.bob_token.secret, spec).status, 503);
  EXPECT_EQ(Post("/v1/jobs?dry_run=false", w.bob_token.secret, spec).status, 503);

  Reply bad = Post("/v1/jobs?dry_run=yes", w.bob_token.secret, spec);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(FirstField(bad), "dry_run");
  Json unknown = spec;
  unknown["flavor"] = "nope";
  Reply missing = Post("/v1/jobs?dry_run=true", w.bob_token.secret, unknown);
  EXPECT_EQ(missing.status, 404) << missing;
  EXPECT_EQ(FirstField(missing), "flavor");
  EXPECT_EQ(Post("/v1/jobs?dry_run=true", w.carol_token.secret, spec).status, 403);  // read

  // An app: its replicas at a replica's timeout.
  Reply app = Post("/v1/apps?dry_run=true", w.bob_token.secret,
                   {{"name", "bot"},
                    {"model", "models@EU-WEST-LOCAL/bot"},
                    {"flavor", "ai1-1-cpu"},
                    {"replicas", 2}});
  ASSERT_EQ(app.status, 200) << app;
  EXPECT_EQ(app.json["price_per_minute_micro_eur"], 1000);
  EXPECT_EQ(app.json["timeout_s"], kAppAdmissionHorizonS);
  EXPECT_EQ(app.json["cost_at_timeout_micro_eur"], CostAtTimeout(1000, kAppAdmissionHorizonS));
  EXPECT_EQ(app.json["would_be_refused"], true);
}

TEST_F(BillingRestTest, UsageAndStatement) {
  World w = MakeWorld();
  const int64_t now = env_.NowUnixMicros();
  const int64_t s = base::kMicrosPerSecond;
  PutJob("job_a", w.nlp, "ai1-1-cpu", 2, now - 600 * s, 90);  // 2 min × 2 × 500 = 2000
  PutJob("job_b", w.nlp, "l4-1-gpu", 1, now - 300 * s, 30);   // 1 min × 13 800
  PutJob("job_c", w.cv, "ai1-1-cpu", 1, now - 300 * s, 30);   // another project: 500

  Reply usage = Get("/v1/billing/usage?group_by=flavor", w.carol_token.secret);
  ASSERT_EQ(usage.status, 200) << usage;
  EXPECT_EQ(usage.json["currency"], "EUR");
  EXPECT_EQ(usage.json["total_micro_eur"], 15'800);
  EXPECT_EQ(usage.json["total_eur"], "0.015800");
  EXPECT_EQ(usage.json["from"], base::FormatRfc3339(MonthOf(now).start_unix_micros));
  ASSERT_EQ(usage.json["lines"].size(), 2u);
  const Json& line = usage.json["lines"][0];
  EXPECT_EQ(line["project"], w.nlp);
  EXPECT_EQ(line["kind"], "job");
  EXPECT_EQ(line["resource"], "job_a");
  EXPECT_EQ(line["minutes"], 2);
  EXPECT_EQ(line["quantity"], 4);
  EXPECT_EQ(line["amount_eur"], "0.002000");
  ASSERT_EQ(usage.json["groups"].size(), 2u);
  EXPECT_EQ(usage.json["groups"][0], (Json{{"key", "ai1-1-cpu"},
                                           {"amount_micro_eur", 2000},
                                           {"amount_eur", "0.002000"},
                                           {"minutes", 2},
                                           {"quantity", 4}}));
  // A window that ends before job_b started.
  Reply early =
      Get("/v1/billing/usage?to=" + base::FormatRfc3339(now - 400 * s), w.carol_token.secret);
  ASSERT_EQ(early.status, 200) << early;
  EXPECT_EQ(early.json["total_micro_eur"], 2000);

  // Other projects: platform admins only.
  EXPECT_EQ(Get("/v1/billing/usage?project=" + w.cv, w.alice_token.secret).status, 403);
  Reply all = Get("/v1/billing/usage?project=*&group_by=project", kAdminToken);
  ASSERT_EQ(all.status, 200) << all;
  EXPECT_EQ(all.json["total_micro_eur"], 16'300);
  EXPECT_EQ(all.json["groups"].size(), 2u);
  Reply theirs = Get("/v1/billing/usage?project=" + w.cv, kAdminToken);
  EXPECT_EQ(theirs.json["total_micro_eur"], 500);
  EXPECT_EQ(Get("/v1/billing/usage?project=prj_nope", kAdminToken).status, 404);

  struct Bad {
    std::string query;
    const char* field;
  };
  for (const Bad& bad :
       {Bad{"from=yesterday", "from"}, Bad{"to=2026-13-01T00:00:00Z", "to"},
        Bad{"group_by=week", "group_by"},
        Bad{"from=" + base::FormatRfc3339(now) + "&to=" + base::FormatRfc3339(now - s), "to"},
        Bad{"from=2020-01-01T00:00:00Z", "from"}}) {
    Reply r = Get("/v1/billing/usage?" + bad.query, w.carol_token.secret);
    EXPECT_EQ(r.status, 400) << bad.query << " " << r;
    EXPECT_EQ(FirstField(r), bad.field) << r;
  }
  // A token limited to labels does not see the project's whole bill.
  Token labeled = MakeToken(
      kAdminToken, {{"role", "read"}, {"user", w.carol}, {"project", w.nlp}, {"labels", "team=a"}});
  EXPECT_EQ(Get("/v1/billing/usage", labeled.secret).status, 403);

  const std::string month = MonthOf(now).Name();
  Reply statement = Get("/v1/billing/statement?month=" + month, w.carol_token.secret);
  ASSERT_EQ(statement.status, 200) << statement;
  EXPECT_EQ(statement.json["project"], w.nlp);
  EXPECT_EQ(statement.json["month"], month);
  int64_t sum = 0;
  for (const Json& l : statement.json["lines"]) sum += l["amount_micro_eur"].get<int64_t>();
  EXPECT_EQ(statement.json["total_micro_eur"], sum);
  EXPECT_EQ(sum, 15'800);
  EXPECT_EQ(Get("/v1/billing/statement", w.carol_token.secret).json, statement.json);
  Reply past = Get("/v1/billing/statement?month=2020-01", w.carol_token.secret);
  EXPECT_EQ(past.json["total_eur"], "0.000000");
  EXPECT_TRUE(past.json["lines"].empty());
  Reply bad_month = Get("/v1/billing/statement?month=2020-1", w.carol_token.secret);
  EXPECT_EQ(bad_month.status, 400);
  EXPECT_EQ(FirstField(bad_month), "month");
  EXPECT_EQ(Get("/v1/billing/statement?project=*", kAdminToken).status, 400);
  EXPECT_EQ(Get("/v1/billing/statement?project=" + w.cv, kAdminToken).json["total_micro_eur"], 500);
}

// --- Concurrency -------------------------------------------------------------------------------

// --- Data residency (docs/sovereignty.md)
// ---------------------------------------------------------

// A server of region EU-WEST-LOCAL that also knows EU-CENTRAL-2 (--regions), with billing for
// the dry runs, which go through the same admission rule as real submissions.
class ResidencyRestTest : public BillingRestTest {
 protected:
  void SetUp() override {
    BillingRestTest::SetUp();
    if (HasFatalFailure()) return;
    control_->SetServerInfo({.region = "EU-WEST-LOCAL",
                             .s3_url = "http://127.0.0.1:9",
                             .version = "test",
                             .other_regions = {"EU-CENTRAL-2"}});
  }
  Reply Patch(const std::string& target, const std::string& token, const Json& body) {
    return Call("PATCH", target, token, body.dump());
  }
};

TEST_F(ResidencyRestTest, ProjectAdminsSetAllowedRegionsAndMembersSeeThem) {
  World w = MakeWorld();
  const std::string path = "/v1/projects/" + w.nlp;
  Reply fresh = Get(path, w.carol_token.secret);
  ASSERT_EQ(fresh.status, 200) << fresh;
  EXPECT_EQ(fresh.json["allowed_regions"], Json::array());
  const Json allow = {{"allowed_regions", {"eu-central-2"}}};
  // Not admins of the project: refused; another project's admin does not even see it.
  EXPECT_EQ(Patch(path, w.carol_token.secret, allow).status, 403);  // read: GET only
  Reply operator_refused = Patch(path, w.bob_token.secret, allow);
  EXPECT_EQ(operator_refused.status, 403) << operator_refused;
  EXPECT_NE(operator_refused.json.value("detail", "").find("needs an admin token of that project"),
            std::string::npos);
  EXPECT_EQ(Patch(path, w.dave_token.secret, allow).status, 404);
  EXPECT_EQ(Patch("/v1/projects/prj_nope", kAdminToken, allow).status, 404);
  EXPECT_EQ(Get(path, w.alice_token.secret).json["allowed_regions"], Json::array());

  Reply set = Patch(path, w.alice_token.secret, allow);
  ASSERT_EQ(set.status, 200) << set;
  EXPECT_EQ(set.json["allowed_regions"], Json::array({"EU-CENTRAL-2"}));  // canonical
  EXPECT_EQ(Get(path, w.carol_token.secret).json["allowed_regions"], Json::array({"EU-CENTRAL-2"}));
  Reply listed = Get("/v1/projects", w.bob_token.secret);
  EXPECT_EQ(Items(listed)[0]["allowed_regions"], Json::array({"EU-CENTRAL-2"}));
  // Platform admins may change any project; [] is only the server's own region again.
  Reply cleared = Patch(path, kAdminToken, {{"allowed_regions", Json::array()}});
  ASSERT_EQ(cleared.status, 200) << cleared;
  EXPECT_EQ(cleared.json["allowed_regions"], Json::array());

  struct Bad {
    Json body;
    const char* field;
    const char* message_part;
  };
  for (const Bad& bad : {
           Bad{{{"allowed_regions", {"US-EAST-1"}}},
               "allowed_regions[0]",
               "region 'US-EAST-1' is not one this server knows (docs/sovereignty.md); known: "
               "EU-WEST-LOCAL, EU-CENTRAL-2"},
           Bad{{{"allowed_regions", {"EU-CENTRAL-2", "EU-WEST-LOCAL"}}},
               "allowed_regions[1]",
               "is this server's own region"},
           Bad{{{"allowed_regions", {"EU CENTRAL"}}}, "allowed_regions[0]", "must be 2 to 32"},
           Bad{{{"allowed_regions", {7}}}, "allowed_regions[0]", "must be a region name"},
           Bad{{{"allowed_regions", "EU-CENTRAL-2"}}, "allowed_regions", "is required: an array"},
           Bad{Json::object(), "allowed_regions", "is required"},
           Bad{{{"allowed_regions", Json::array()}, {"name", "x"}}, "name", "unknown field"},
       }) {
    Reply r = Patch(path, w.alice_token.secret, bad.body);
    EXPECT_EQ(r.status, 400) << bad.body.dump() << " " << r;
    EXPECT_EQ(FirstField(r), bad.field) << r;
    EXPECT_NE(r.body.find(bad.message_part), std::string::npos) << r;
  }
  EXPECT_EQ(Get(path, w.alice_token.secret).json["allowed_regions"], Json::array());
}

TEST_F(ResidencyRestTest, AnotherRegionsVolumeIsRefusedUntilTheProjectAllowsIt) {
  World w = MakeWorld();
  const Json job = {
      {"image", "sovai/shell"},
      {"command", {"true"}},
      {"flavor", "ai1-1-cpu"},
      {"volumes", {"out@EU-WEST-LOCAL/o:/workspace/out:rw", "far@EU-CENTRAL-2/ds:/workspace/in"}}};
  Reply refused = Post("/v1/jobs?dry_run=true", w.bob_token.secret, job);
  ASSERT_EQ(refused.status, 403) << refused;
  EXPECT_EQ(refused.json["type"], "urn:sovai:problem:permission-denied");
  EXPECT_EQ(FirstField(refused), "volumes[1]");
  EXPECT_EQ(refused.json["detail"],
            "volume 'far@EU-CENTRAL-2/ds': data residency: project 'nlp' may mount only buckets "
            "of region EU-WEST-LOCAL; a project admin can allow EU-CENTRAL-2 with `sovai project "
            "update nlp --allow-region EU-CENTRAL-2`");
  const Json app = {{"name", "bot"}, {"model", "models@EU-CENTRAL-2/bot"}, {"flavor", "ai1-1-cpu"}};
  Reply app_refused = Post("/v1/apps?dry_run=true", w.bob_token.secret, app);
  EXPECT_EQ(app_refused.status, 403) << app_refused;
  EXPECT_EQ(FirstField(app_refused), "model");

  // A region the server does not know is a bad request, whatever the project allows.
  Json unknown = job;
  unknown["volumes"][1] = "far@US-EAST-1/ds:/workspace/in";
  Reply bad = Post("/v1/jobs?dry_run=true", w.bob_token.secret, unknown);
  EXPECT_EQ(bad.status, 400) << bad;
  EXPECT_EQ(FirstField(bad), "volumes");
  EXPECT_NE(bad.body.find("region 'US-EAST-1' is not one this server knows"), std::string::npos)
      << bad;

  ASSERT_EQ(
      Patch("/v1/projects/" + w.nlp, w.alice_token.secret, {{"allowed_regions", {"EU-CENTRAL-2"}}})
          .status,
      200);
  Reply allowed = Post("/v1/jobs?dry_run=true", w.bob_token.secret, job);
  EXPECT_EQ(allowed.status, 200) << allowed;
  EXPECT_EQ(Post("/v1/apps?dry_run=true", w.bob_token.secret, app).status, 200);
  // Another project is not allowed by nlp's setting.
  Reply other = Post("/v1/jobs?dry_run=true", w.dave_token.secret, job);
  EXPECT_EQ(other.status, 403) << other;
  EXPECT_NE(other.json.value("detail", "").find("project 'cv' may mount only"), std::string::npos);
}

// --- Datastores (docs/api/datastores.md) -------------------------------------------------------

constexpr char kDatastoreSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

Json DatastoreBody(const std::string& alias) {
  return {{"alias", alias},
          {"type", "s3"},
          {"endpoint", "http://127.0.0.1:7480"},
          {"region", "us-east-1"},
          {"access_key", "AKIAIOSFODNN7EXAMPLE"},
          {"secret_key", kDatastoreSecret}};
}

TEST_F(ResidencyRestTest, DatastoresAreTheProjectsAndNeverShowTheSecret) {
  World w = MakeWorld();
  // Operators and admins of the project add; read tokens may not.
  EXPECT_EQ(Post("/v1/datastores", w.carol_token.secret, DatastoreBody("ext")).status, 403);
  Reply added = Post("/v1/datastores", w.bob_token.secret, DatastoreBody("Ext"));
  ASSERT_EQ(added.status, 201) << added;
  EXPECT_EQ(added.json["alias"], "ext");
  EXPECT_EQ(added.json["type"], "s3");
  EXPECT_EQ(added.json["endpoint"], "http://127.0.0.1:7480");
  EXPECT_EQ(added.json["region"], "us-east-1");
  EXPECT_EQ(added.json["access_key"], "AKIAIOSFODNN7EXAMPLE");
  EXPECT_EQ(added.json["secret_key_set"], true);
  EXPECT_EQ(added.json["project"], w.nlp);
  EXPECT_EQ(added.json["created_by"], w.bob);
  EXPECT_FALSE(added.json.contains("secret_key"));
  ASSERT_EQ(Post("/v1/datastores", w.alice_token.secret, DatastoreBody("ceph")).status, 201);

  // Everyone of the project reads them; no answer holds the secret.
  Reply listed = Get("/v1/datastores", w.carol_token.secret);
  EXPECT_EQ(Names(listed, "alias"), (std::vector<std::string>{"ceph", "ext"}));
  Reply page = Get("/v1/datastores?limit=1", w.carol_token.secret);
  EXPECT_EQ(Names(page, "alias"), std::vector<std::string>{"ceph"});
  EXPECT_EQ(page.json["next_cursor"], "ceph");
  EXPECT_EQ(Names(Get("/v1/datastores?cursor=ceph", w.carol_token.secret), "alias"),
            std::vector<std::string>{"ext"});
  Reply got = Get("/v1/datastores/EXT", w.carol_token.secret);
  ASSERT_EQ(got.status, 200) << got;
  EXPECT_EQ(got.json["alias"], "ext");
  for (const Reply& r : {added, listed, got}) {
    EXPECT_EQ(r.body.find(kDatastoreSecret), std::string::npos) << r;
  }

  // Another project sees nothing of them, and its alias space is its own.
  EXPECT_EQ(Names(Get("/v1/datastores", w.dave_token.secret), "alias"), std::vector<std::string>{});
  Reply hidden = Get("/v1/datastores/ext", w.dave_token.secret);
  EXPECT_EQ(hidden.status, 404) << hidden;
  EXPECT_EQ(Delete("/v1/datastores/ext", w.dave_token.secret).status, 404);
  EXPECT_EQ(Post("/v1/datastores", w.dave_token.secret, DatastoreBody("ext")).status, 201);

  // Duplicates (any case) are a conflict naming the alias.
  Reply duplicate = Post("/v1/datastores", w.alice_token.secret, DatastoreBody("EXT"));
  EXPECT_EQ(duplicate.status, 409) << duplicate;
  EXPECT_EQ(FirstField(duplicate), "alias");

  // Tokens limited to labels are refused: datastores carry none.
  Token labeled = MakeToken(w.alice_token.secret, {{"role", "operator"}, {"labels", "team=a"}});
  EXPECT_EQ(Get("/v1/datastores", labeled.secret).status, 403);
  EXPECT_EQ(Post("/v1/datastores", labeled.secret, DatastoreBody("lab")).status, 403);

  // Delete, then it is gone; a second delete is a 404.
  EXPECT_EQ(Delete("/v1/datastores/CEPH", w.bob_token.secret).status, 204);
  EXPECT_EQ(Get("/v1/datastores/ceph", w.bob_token.secret).status, 404);
  EXPECT_EQ(Delete("/v1/datastores/ceph", w.bob_token.secret).status, 404);
  EXPECT_EQ(Delete("/v1/datastores/ext", w.carol_token.secret).status, 403);
}

TEST_F(ResidencyRestTest, ABadDatastoreIsRefusedNamingTheField) {
  World w = MakeWorld();
  struct Bad {
    const char* field;
    Json value;
    int status;
    const char* message_part;
  };
  for (const Bad& bad : {
           Bad{"alias", "1ext", 400, "must be 2 to 32 letters, digits and '-'"},
           Bad{"alias", "ext.eu", 400, "must be 2 to 32"},
           Bad{"alias", "eu-west-local", 400, "this server's own region"},
           Bad{"alias", "EU-CENTRAL-2", 400, "a region this server knows"},
           Bad{"endpoint", "ftp://s3.example.eu", 400, "must be http://HOST[:PORT]"},
           Bad{"endpoint", "https://s3.example.eu/bucket", 400, "without a path"},
           Bad{"region", "US-EAST-1", 400, "1 to 64 characters of a-z"},
           Bad{"type", "gcs", 400, "is not supported"},
           Bad{"access_key", "", 400, "1 to 128 printable"},
           Bad{"secret_key", "with space", 400, "1 to 256 printable"},
           Bad{"secret_key", 7, 400, "secret_key"},
           Bad{"colour", "blue", 400, "unknown field 'colour'"},
       }) {
    Json body = DatastoreBody("ext");
    body[bad.field] = bad.value;
    Reply r = Post("/v1/datastores", w.bob_token.secret, body);
    EXPECT_EQ(r.status, bad.status) << bad.field << " " << r;
    EXPECT_EQ(r.json["type"], "urn:sovai:problem:invalid-argument") << r;
    EXPECT_EQ(FirstField(r), bad.field) << r;
    EXPECT_NE(r.body.find(bad.message_part), std::string::npos) << r;
    EXPECT_EQ(r.body.find("with space"), std::string::npos) << "the secret is quoted: " << r;
  }
  Json missing = DatastoreBody("ext");
  missing.erase("secret_key");
  Reply r = Post("/v1/datastores", w.bob_token.secret, missing);
  EXPECT_EQ(r.status, 400) << r;
  EXPECT_EQ(FirstField(r), "secret_key");
  EXPECT_EQ(Names(Get("/v1/datastores", w.bob_token.secret), "alias"), std::vector<std::string>{});
}

TEST_F(ResidencyRestTest, VolumesNameTheProjectsDatastoresOnly) {
  World w = MakeWorld();
  const Json job = {{"image", "sovai/shell"},
                    {"command", {"true"}},
                    {"flavor", "ai1-1-cpu"},
                    {"volumes", {"input@ext/data:/mnt/in:ro", "output@ext/results:/mnt/out:rw"}}};
  Reply unknown = Post("/v1/jobs?dry_run=true", w.bob_token.secret, job);
  EXPECT_EQ(unknown.status, 400) << unknown;
  EXPECT_EQ(FirstField(unknown), "volumes");
  EXPECT_NE(unknown.body.find("region 'ext' is not one this server knows (docs/sovereignty.md); "
                              "known: EU-WEST-LOCAL, EU-CENTRAL-2; the project's datastores "
                              "(docs/api/datastores.md): none"),
            std::string::npos)
      << unknown;
  ASSERT_EQ(Post("/v1/datastores", w.bob_token.secret, DatastoreBody("ext")).status, 201);
  Reply admitted = Post("/v1/jobs?dry_run=true", w.bob_token.secret, job);
  EXPECT_EQ(admitted.status, 200) << admitted;
  // No region to allow: the project registered the datastore itself.
  const Json app = {{"name", "bot"}, {"model", "models@EXT/bot"}, {"flavor", "ai1-1-cpu"}};
  EXPECT_EQ(Post("/v1/apps?dry_run=true", w.bob_token.secret, app).status, 200);
  // Another project's alias is as unknown as any other name; its own datastores are listed.
  ASSERT_EQ(Post("/v1/datastores", w.dave_token.secret, DatastoreBody("ceph")).status, 201);
  Reply other = Post("/v1/jobs?dry_run=true", w.dave_token.secret, job);
  EXPECT_EQ(other.status, 400) << other;
  EXPECT_NE(other.body.find("the project's datastores (docs/api/datastores.md): ceph"),
            std::string::npos)
      << other;
  EXPECT_EQ(other.body.find("ext,"), std::string::npos) << other;
}

TEST_F(RestApiTest, ConcurrentClientsOnWorkerThreads) {
  constexpr int kThreads = 6;
  constexpr int kUsersEach = 8;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = NewClient();
      net::Headers headers;
      headers.Add("Authorization", std::string("Bearer ") + kAdminToken);
      for (int i = 0; i < kUsersEach; ++i) {
        Json body = {{"name", "t" + std::to_string(t) + "-u" + std::to_string(i)}};
        if (Send(*client, "POST", "/v1/users", headers, body.dump()).status != 201) ++failures;
        if (Send(*client, "GET", "/v1/users?limit=5", headers, std::nullopt).status != 200) {
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  Reply all = Get("/v1/users?limit=500", kAdminToken);
  EXPECT_EQ(Items(all).size(), 1u + kThreads * kUsersEach);
}

}  // namespace
}  // namespace sovai::control
