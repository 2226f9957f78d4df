// The notebook routes of the gateway on a real net::Server, with a real Identity (tokens of two
// projects, roles, selectors) and a stand-in for Jupyter on another loopback server: it insists
// on Jupyter's token and echoes what it was sent, and its kernel channel is a websocket echo.
#include "gateway/notebook_gateway.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/env.h"
#include "base/json.h"
#include "control/bootstrap.h"
#include "control/db.h"
#include "net/client.h"

namespace sovai::gateway {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr char kAdminToken[] = "sovai_notebook_gateway_test_admin_token_0123";
constexpr char kJupyterToken[] = "jupyter-secret";
constexpr char kId[] = "nb_01NOTEBOOKGATEWAYTEST0000";

std::string ReadUntil(int fd, size_t want_bytes, bool head) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (head ? out.find("\r\n\r\n") != std::string::npos : out.size() >= want_bytes) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, head ? 1 : std::min(sizeof buf, want_bytes - out.size()), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class NotebookGatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-nbgw-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto db = control::ControlDb::Open(dir_ + "/control.db");
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    identity_ = std::make_unique<control::Identity>(*db_, base::Env::Default());
    control::AdminCredentials admin;
    admin.api_token = kAdminToken;
    ASSERT_TRUE(identity_->ImportBootstrapAdmin(admin).ok());
    auto system = identity_->SystemProject();
    ASSERT_TRUE(system.ok());
    project_ = system->id;
    read_token_ = Token(project_, control::Role::kRead, "");
    selected_token_ = Token(project_, control::Role::kOperator, "team=other");
    auto other = identity_->CreateProject({.name = "other"});
    ASSERT_TRUE(other.ok()) << other.status();
    other_token_ = Token(other->id, control::Role::kOperator, "");
    StartJupyter();
    StartGateway();
  }

  void TearDown() override {
    gateway_server_.reset();
    gateway_.reset();
    jupyter_.reset();
    (void)base::Env::Default().DeleteDirRecursive(dir_);
  }

  // A token of a new member of `project`.
  std::string Token(const std::string& project, control::Role role, const std::string& selector) {
    auto user = identity_->CreateUser({.name = "u" + std::to_string(++users_)});
    SOVAI_CHECK(user.ok()) << user.status();
    SOVAI_CHECK(identity_->SetMember(project, user->id, role).ok());
    control::NewToken request{.user_id = user->id, .project_id = project, .role = role};
    request.selector = *control::LabelSelector::Parse(selector);
    auto created = identity_->CreateToken(request);
    SOVAI_CHECK(created.ok()) << created.status();
    return created->secret;
  }

  void StartJupyter() {
    net::Router router;
    const std::string base = std::string("/notebooks/") + kId + "/";
    router.Get(base + "api/status", [](net::Request& r) {
      if (r.header("Authorization") != std::string("token ") + kJupyterToken) {
        return net::Response::Text(403, "Forbidden");
      }
      Json seen = Json::object();
      for (const auto& [name, value] : r.headers()) seen[name] = value;
      return net::Response::Json(200, Json{{"seen", seen}, {"target", r.target()}}.dump());
    });
    // code-server's paths have no prefix: it echoes what it was sent.
    router.Get("/static/{rest...}", [](net::Request& r) {
      Json seen = Json::object();
      for (const auto& [name, value] : r.headers()) seen[name] = value;
      return net::Response::Json(200, Json{{"seen", seen}, {"target", r.target()}}.dump());
    });
    router.Get(base + "api/kernels/{kernel}/channels", [](net::Request& r) {
      if (r.header("Authorization") != std::string("token ") + kJupyterToken) {
        return net::Response::Text(403, "Forbidden");
      }
      net::Response res = net::Response::Empty(101);
      res.headers.Set("Connection", "Upgrade");
      res.headers.Set("Upgrade", "websocket");
      res.upgrade = [](net::UpgradedStream& stream) {
        char buf[256];
        for (;;) {
          auto n = stream.Read(buf, sizeof buf);
          if (!n.ok() || *n == 0) return;
          if (!stream.Write(std::string_view(buf, *n)).ok()) return;
        }
      };
      return res;
    });
    jupyter_ = std::make_unique<net::Server>(std::move(router));
    ASSERT_TRUE(jupyter_->Start({.listen = "127.0.0.1:0"}).ok());
  }

  void StartGateway() {
    NotebookGatewayOptions o;
    o.route = [this](const std::string& id) -> std::optional<control::NotebookRoute> {
      std::lock_guard lock(mu_);
      if (id != kId) return std::nullopt;
      return control::NotebookRoute{kId,           project_, labels_, state_, jupyter_->port(),
                                    kJupyterToken, "",       editor_};
    };
    o.note_activity = [this](const std::string& id) {
      std::lock_guard lock(mu_);
      activity_[id]++;
    };
    o.identity = identity_.get();
    o.on_audit = [this](const control::AuditEvent& e) {
      std::lock_guard lock(mu_);
      audit_.push_back(e);
    };
    auto gateway = NotebookGateway::Start(std::move(o));
    ASSERT_TRUE(gateway.ok());
    gateway_ = std::move(*gateway);
    net::Router router;
    gateway_->Install(router);
    gateway_server_ = std::make_unique<net::Server>(std::move(router));
    ASSERT_TRUE(gateway_server_->Start({.listen = "127.0.0.1:0"}).ok());
  }

  net::ClientResponse Call(const std::string& target, std::map<std::string, std::string> headers,
                           const std::string& method = "GET") {
    net::HttpClient client({.port = gateway_server_->port()});
    net::ClientRequest request;
    request.method = method;
    request.target = target;
    for (const auto& [k, v] : headers) request.headers.Set(k, v);
    auto response = client.Send(request);
    SOVAI_CHECK(response.ok()) << response.status();
    return *response;
  }
  static std::map<std::string, std::string> Bearer(const std::string& token) {
    return {{"Authorization", "Bearer " + token}};
  }
  std::string Status() { return std::string("/notebooks/") + kId + "/api/status"; }

  // A websocket handshake to the kernel channel through the gateway on a raw socket; returns the
  // socket (the caller closes it) and the answer's head.
  std::pair<int, std::string> OpenChannel(const std::string& extra_headers) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(gateway_server_->port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    SOVAI_CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    const std::string request = std::string("GET /notebooks/") + kId +
                                "/api/kernels/k1/channels?session_id=s HTTP/1.1\r\n"
                                "Host: 127.0.0.1:" +
                                std::to_string(gateway_server_->port()) +
                                "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                                "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: a2V5\r\n" +
                                extra_headers + "\r\n";
    SOVAI_CHECK(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
                static_cast<ssize_t>(request.size()));
    return {fd, ReadUntil(fd, 0, true)};
  }

  std::string dir_;
  std::unique_ptr<control::ControlDb> db_;
  std::unique_ptr<control::Identity> identity_;
  std::string project_;
  std::string read_token_, selected_token_, other_token_;
  int users_ = 0;
  std::mutex mu_;  // guards the five below
  std::string editor_ = "jupyter";
  std::map<std::string, std::string> labels_ = {{"team", "nlp"}};
  control::NotebookState state_ = control::NotebookState::kRunning;
  std::map<std::string, int> activity_;
  std::vector<control::AuditEvent> audit_;
  std::unique_ptr<net::Server> jupyter_;
  std::unique_ptr<NotebookGateway> gateway_;
  std::unique_ptr<net::Server> gateway_server_;
};

TEST_F(NotebookGatewayTest, ForwardsWithJupytersTokenInsteadOfTheUsers) {
  net::ClientResponse r = Call(Status() + "?x=1", Bearer(kAdminToken));
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = *base::ParseJson(r.body);
  EXPECT_EQ(body["target"], Status() + "?x=1");
  EXPECT_EQ(body["seen"]["Authorization"], std::string("token ") + kJupyterToken);
  EXPECT_EQ(r.body.find(kAdminToken), std::string::npos);
  std::lock_guard lock(mu_);
  EXPECT_EQ(activity_[kId], 1);
}

TEST_F(NotebookGatewayTest, VscodeGetsTheTokenAsItsSessionCookieAndTargetsWithoutThePrefix) {
  {
    std::lock_guard lock(mu_);
    editor_ = "vscode";
  }
  auto headers = Bearer(kAdminToken);
  // The user's own session cookie is replaced; other cookies pass.
  headers["Cookie"] = "code-server-session=guess; vscode-theme=dark";
  net::ClientResponse r = Call(std::string("/notebooks/") + kId + "/static/a.js?v=1", headers);
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = *base::ParseJson(r.body);
  EXPECT_EQ(body["target"], "/static/a.js?v=1");
  EXPECT_EQ(body["seen"]["Cookie"],
            std::string("vscode-theme=dark; code-server-session=") + kJupyterToken);
  EXPECT_FALSE(body["seen"].contains("Authorization")) << body.dump();
  EXPECT_EQ(r.body.find(kAdminToken), std::string::npos);
  // Still the gateway's rules: no token, no editor.
  EXPECT_EQ(Call(std::string("/notebooks/") + kId + "/static/a.js", {}).status, 401);
}

TEST_F(NotebookGatewayTest, CallersWithoutTheRightTokenAreRefused) {
  net::ClientResponse none = Call(Status(), {});
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.headers.Get("WWW-Authenticate"), "Bearer realm=\"sovai\"");
  EXPECT_NE(none.body.find("sovai_token"), std::string::npos) << none.body;
  EXPECT_EQ(Call(Status(), Bearer("sov_not_a_token")).status, 401);
  EXPECT_EQ(Call(Status(), {{"Authorization", "token " + std::string(kJupyterToken)}}).status, 401);
  EXPECT_EQ(Call(Status(), Bearer(other_token_)).status, 404);
  EXPECT_EQ(Call(Status(), Bearer(read_token_)).status, 403);
  EXPECT_EQ(Call(Status(), Bearer(selected_token_)).status, 403);
  EXPECT_EQ(Call("/notebooks/nb_missing/api/status", Bearer(kAdminToken)).status, 404);
  std::lock_guard lock(mu_);
  EXPECT_EQ(activity_[kId], 0);
}

TEST_F(NotebookGatewayTest, TheBareIdRedirectsToJupytersBaseUrl) {
  net::ClientResponse r = Call(std::string("/notebooks/") + kId + "?sovai_token=x", {});
  EXPECT_EQ(r.status, 302);
  EXPECT_EQ(r.headers.Get("Location"), std::string("/notebooks/") + kId + "/?sovai_token=x");
  EXPECT_EQ(Call("/notebooks/nb_missing", {}).status, 404);
}

TEST_F(NotebookGatewayTest, ANotebookThatIsNotRunningIs503) {
  {
    std::lock_guard lock(mu_);
    state_ = control::NotebookState::kStarting;
  }
  net::ClientResponse starting = Call(Status(), Bearer(kAdminToken));
  EXPECT_EQ(starting.status, 503);
  EXPECT_EQ(starting.headers.Get("Retry-After"), "5");
  {
    std::lock_guard lock(mu_);
    state_ = control::NotebookState::kStopped;
  }
  net::ClientResponse stopped = Call(Status(), Bearer(kAdminToken));
  EXPECT_EQ(stopped.status, 503);
  EXPECT_NE(stopped.body.find("sovai notebook start"), std::string::npos) << stopped.body;
}

TEST_F(NotebookGatewayTest, ABrowserSignsInWithACookie) {
  net::ClientResponse bad = Call(std::string("/notebooks/") + kId + "/tree?sovai_token=nope", {});
  EXPECT_EQ(bad.status, 401);
  net::ClientResponse r =
      Call(std::string("/notebooks/") + kId + "/tree?a=1&sovai_token=" + kAdminToken + "&b=2", {});
  ASSERT_EQ(r.status, 302) << r.body;
  EXPECT_EQ(r.headers.Get("Location"), std::string("/notebooks/") + kId + "/tree?a=1&b=2");
  std::string cookie(r.headers.Get("Set-Cookie").value_or(""));
  EXPECT_NE(cookie.find(std::string("sovai_token=") + kAdminToken), std::string::npos) << cookie;
  EXPECT_NE(cookie.find(std::string("Path=/notebooks/") + kId + "/"), std::string::npos);
  EXPECT_NE(cookie.find("HttpOnly"), std::string::npos);
  EXPECT_NE(cookie.find("SameSite=Strict"), std::string::npos);
  // The cookie authenticates; Jupyter does not see it, but sees the page's other cookies.
  net::ClientResponse page =
      Call(Status(),
           {{"Cookie", std::string("_xsrf=abc; sovai_token=") + kAdminToken + "; theme=dark"}});
  ASSERT_EQ(page.status, 200) << page.body;
  Json seen = (*base::ParseJson(page.body))["seen"];
  EXPECT_EQ(seen["Cookie"], "_xsrf=abc; theme=dark");
  EXPECT_EQ(page.body.find(kAdminToken), std::string::npos);
  // A cookie-authenticated write from another origin is refused; from this one it passes.
  const std::map<std::string, std::string> foreign = {
      {"Cookie", std::string("sovai_token=") + kAdminToken}, {"Origin", "http://evil.example"}};
  EXPECT_EQ(Call(Status(), foreign, "POST").status, 403);
  EXPECT_EQ(Call(Status(), foreign, "GET").status, 200);  // reads are not forgeries
}

TEST_F(NotebookGatewayTest, KernelWebsocketsPassThrough) {
  auto [fd, head] = OpenChannel("Authorization: Bearer " + std::string(kAdminToken) + "\r\n");
  ASSERT_TRUE(head.starts_with("HTTP/1.1 101 ")) << head;
  const std::string frame = "\x81\x05hello";
  ASSERT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  EXPECT_EQ(ReadUntil(fd, frame.size(), false), frame);
  ::close(fd);
  std::lock_guard lock(mu_);
  ASSERT_FALSE(audit_.empty());
  EXPECT_EQ(audit_.back().action, "NOTEBOOK GET");
  EXPECT_EQ(audit_.back().detail, "websocket");
  EXPECT_EQ(audit_.back().result, 101);
  EXPECT_EQ(audit_.back().project, project_);
}

TEST_F(NotebookGatewayTest, CookieWebsocketsMustComeFromThisOrigin) {
  const std::string cookie = std::string("Cookie: sovai_token=") + kAdminToken + "\r\n";
  auto [foreign, refused] = OpenChannel(cookie + "Origin: http://evil.example\r\n");
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 403 ")) << refused;
  ::close(foreign);
  const std::string self = "Origin: http://127.0.0.1:" + std::to_string(gateway_server_->port());
  auto [fd, head] = OpenChannel(cookie + self + "\r\n");
  EXPECT_TRUE(head.starts_with("HTTP/1.1 101 ")) << head;
  ::close(fd);
  auto [anonymous, unauthorized] = OpenChannel("");
  EXPECT_TRUE(unauthorized.starts_with("HTTP/1.1 401 ")) << unauthorized;
  ::close(anonymous);
}

}  // namespace
}  // namespace sovai::gateway
