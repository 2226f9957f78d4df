// The proxy between real servers on loopback ports: net::Server replicas (and scripted socket
// replicas) behind a net::Server gateway whose handler is Forward(), over an UpstreamPool.
#include "gateway/proxy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/json.h"
#include "base/notification.h"
#include "gateway/upstream_pool.h"
#include "net/client.h"

namespace sovai::gateway {
namespace {

using base::Status;
using namespace std::chrono_literals;

// State a replica's handlers share with the test. Held by shared_ptr in the handlers, so it
// outlives any handler still running when a test ends.
struct ReplicaState {
  std::string id;
  std::atomic<int> requests{0};    // every request that reached a handler
  base::Notification sse_release;  // /v1/events waits on it between its events
  std::atomic<bool> sse_released_in_time{false};
  base::Notification slow_release;  // /v1/slow waits on it
  base::Notification stall_release;
  base::Notification forever_ended;  // /v1/forever's writer failed
  std::mutex mu;
  Status forever_status;  // guarded by mu
};

std::unique_ptr<net::Server> StartReplica(const std::shared_ptr<ReplicaState>& s) {
  net::Router r;
  r.Post("/v1/echo", [s](net::Request& req) {
    ++s->requests;
    auto body = req.body().ReadAll();
    if (!body.ok()) return net::Response::Error(body.status());
    nlohmann::json headers = nlohmann::json::object();
    for (const auto& [name, value] : req.headers()) {
      std::string key = name;
      for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (headers.contains(key)) {
        headers[key] = headers[key].get<std::string>() + "|" + value;
      } else {
        headers[key] = value;
      }
    }
    nlohmann::json out = {{"replica", s->id},
                          {"method", req.method()},
                          {"target", req.target()},
                          {"body", *body},
                          {"headers", headers}};
    net::Response res = net::Response::Json(202, base::DumpJson(out));
    res.headers.Set("X-Replica", s->id);
    res.headers.Set("Connection", "X-Drop-Me");  // names a field as hop-by-hop
    res.headers.Set("X-Drop-Me", "secret");
    res.headers.Set("Keep-Alive", "timeout=5");
    return res;
  });
  r.Get("/v1/sized", [s](net::Request&) {
    ++s->requests;
    return net::Response::Text(200, "twelve bytes");
  });
  r.Get("/v1/nothing", [s](net::Request&) {
    ++s->requests;
    net::Response res = net::Response::Empty(204);
    res.headers.Set("X-Replica", s->id);
    return res;
  });
  r.Post("/v1/events", [s](net::Request&) {
    ++s->requests;
    return net::Response::Sse([s](net::SseWriter& sse) -> Status {
      SOVAI_RETURN_IF_ERROR(sse.WriteEvent(R"({"n":1})"));
      // The test releases this once its client has the first event: if the gateway held the
      // stream back, that would never happen before the wait ends.
      s->sse_released_in_time = s->sse_release.WaitFor(10s);
      SOVAI_RETURN_IF_ERROR(sse.WriteEvent(R"({"n":2})"));
      return sse.WriteEvent("[DONE]");
    });
  });
  r.Get("/v1/forever", [s](net::Request&) {
    ++s->requests;
    return net::Response::Sse([s](net::SseWriter& sse) -> Status {
      Status st;
      for (int i = 0; i < 20'000 && st.ok(); ++i) {
        st = sse.WriteEvent(R"({"token":")" + std::to_string(i) + R"("})");
        std::this_thread::sleep_for(1ms);
      }
      {
        std::lock_guard lock(s->mu);
        s->forever_status = st.ok() ? base::InternalError("the writer never failed") : st;
      }
      s->forever_ended.Notify();
      return st;
    });
  });
  r.Get("/v1/slow", [s](net::Request&) {
    ++s->requests;
    (void)s->slow_release.WaitFor(10s);
    return net::Response::Text(200, s->id);
  });
  auto stall = [s](net::Request& req) {
    ++s->requests;
    (void)req.body().Discard();
    (void)s->stall_release.WaitFor(5s);
    return net::Response::Text(200, "too late");
  };
  r.Get("/v1/stall", stall);
  r.Post("/v1/stall", stall);
  r.Get("/v1/broken", [s](net::Request&) {
    ++s->requests;
    return net::Response::Stream(200, "text/plain", [](net::BodyWriter& out) -> Status {
      SOVAI_RETURN_IF_ERROR(out.Write("partial"));
      return base::InternalError("the replica failed mid-body");
    });
  });
  auto server = std::make_unique<net::Server>(std::move(r));
  Status st = server->Start({.listen = "127.0.0.1:0"});
  EXPECT_TRUE(st.ok()) << st;
  return server;
}

// A loopback port nobody listens on: bound, then closed.
uint16_t ClosedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A replica that accepts connections, reads the request, sends `before_hang_up` (nothing by
// default), and closes without answering further (a crash after the request arrived).
class HangUpReplica {
 public:
  explicit HangUpReplica(std::string before_hang_up = "")
      : before_hang_up_(std::move(before_hang_up)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) continue;
        int conn = ::accept(fd_, nullptr, nullptr);
        if (conn < 0) continue;
        ++accepted_;
        // Read until the end of the head (and a small body), then hang up.
        std::string got;
        char buf[4096];
        while (got.find("\r\n\r\n") == std::string::npos) {
          pollfd c{conn, POLLIN, 0};
          if (::poll(&c, 1, 2000) <= 0) break;
          ssize_t n = ::recv(conn, buf, sizeof buf, 0);
          if (n <= 0) break;
          got.append(buf, static_cast<size_t>(n));
        }
        std::this_thread::sleep_for(20ms);  // the rest of the body, if any
        if (!before_hang_up_.empty()) {
          ::send(conn, before_hang_up_.data(), before_hang_up_.size(), MSG_NOSIGNAL);
          std::this_thread::sleep_for(20ms);  // the head arrives on its own
        }
        ::close(conn);
      }
    });
  }
  ~HangUpReplica() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  int accepted() const { return accepted_; }

 private:
  const std::string before_hang_up_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// A replica written against the socket, for what a net::Server does not do. Each connection is
// served by a thread of its own and answers its requests (0, 1, ...) as the script says:
//   kAnswer         200 "ok", the connection kept alive;
//   kAnswerAndClose 200 "ok" with "Connection: close", then waits for the peer to close; a
//                   request that comes anyway counts as ignored_close() and is hung up on;
//   kHangUp         closes after the head, without reading the body or answering (a server that
//                   closed the idle connection just as the request came).
// Its receive buffer is small, so a large body cannot be taken in whole before a hang-up.
class ScriptedReplica {
 public:
  enum class Act { kAnswer, kAnswerAndClose, kHangUp };

  explicit ScriptedReplica(std::function<Act(int request_on_connection)> script)
      : script_(std::move(script)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int rcvbuf = 64 * 1024;  // inherited by accepted sockets
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) continue;
        int conn = ::accept(fd_, nullptr, nullptr);
        if (conn < 0) continue;
        ++connections_;
        std::lock_guard lock(mu_);
        serving_.emplace_back([this, conn] {
          Serve(conn);
          ::close(conn);
        });
      }
    });
  }
  ~ScriptedReplica() {
    stop_ = true;
    acceptor_.join();
    std::lock_guard lock(mu_);
    for (auto& t : serving_) t.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  int connections() const { return connections_; }
  int answered() const { return answered_; }
  int ignored_close() const { return ignored_close_; }

 private:
  // Appends what arrives to `buf`; false when the peer closed, on error, or when stopping.
  bool Receive(int conn, std::string& buf) {
    char piece[64 * 1024];
    while (!stop_) {
      pollfd c{conn, POLLIN, 0};
      if (::poll(&c, 1, 20) <= 0) continue;
      ssize_t n = ::recv(conn, piece, sizeof piece, 0);
      if (n <= 0) return false;
      buf.append(piece, static_cast<size_t>(n));
      return true;
    }
    return false;
  }
  void Serve(int conn) {
    std::string buf;
    for (int index = 0;; ++index) {
      size_t head_end;
      while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
        if (!Receive(conn, buf)) return;
      }
      std::string head = buf.substr(0, head_end + 4);
      buf.erase(0, head_end + 4);
      const Act act = script_(index);
      if (act == Act::kHangUp) return;
      for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t length = 0;
      if (size_t at = head.find("\r\ncontent-length:"); at != std::string::npos) {
        length = std::stoul(head.substr(at + 17));
      }
      while (buf.size() < length) {
        if (!Receive(conn, buf)) return;
      }
      buf.erase(0, length);
      ++answered_;
      std::string answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n";
      if (act == Act::kAnswerAndClose) answer += "Connection: close\r\n";
      answer += "\r\nok";
      if (::send(conn, answer.data(), answer.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(answer.size())) {
        return;
      }
      if (act == Act::kAnswerAndClose) {
        if (Receive(conn, buf)) ++ignored_close_;  // anything but the peer's close
        return;
      }
    }
  }

  const std::function<Act(int)> script_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::atomic<int> answered_{0};
  std::atomic<int> ignored_close_{0};
  std::thread acceptor_;
  std::mutex mu_;                     // guards serving_
  std::vector<std::thread> serving_;  // one per connection
};

class ProxyTest : public ::testing::Test {
 protected:
  ProxyTest() { options_.upstream_pool = &pool_; }
  ~ProxyTest() override {
    // Release every waiting handler first, so the servers shut down at once.
    for (auto& s : states_) {
      s->sse_release.Notify();
      s->slow_release.Notify();
      s->stall_release.Notify();
    }
    gateway_.reset();
    replica_servers_.clear();
  }

  // Starts a replica and returns its entry for the ReplicaSet.
  Replica AddReplica(const std::string& id) {
    auto state = std::make_shared<ReplicaState>();
    state->id = id;
    states_.push_back(state);
    replica_servers_.push_back(StartReplica(state));
    return {id, "127.0.0.1", replica_servers_.back()->port()};
  }
  ReplicaState& State(const std::string& id) {
    for (auto& s : states_) {
      if (s->id == id) return *s;
    }
    ADD_FAILURE() << "no replica " << id;
    return *states_.front();
  }

  // The gateway: every request under /apps/test goes to the replicas, without that prefix.
  void StartGateway() {
    net::Router r;
    r.SetFallback(
        [this](net::Request& req) {
          std::string_view target = req.target();
          constexpr std::string_view kPrefix = "/apps/test";
          if (target.substr(0, kPrefix.size()) != kPrefix) {
            return OpenAiError(404, "no such app", "invalid_request_error");
          }
          return Forward(req, replicas_, std::string(target.substr(kPrefix.size())), options_);
        },
        {.max_body_bytes = 64 * 1024 * 1024});
    gateway_ = std::make_unique<net::Server>(std::move(r));
    Status st = gateway_->Start({.listen = "127.0.0.1:0"});
    ASSERT_TRUE(st.ok()) << st;
  }
  net::ClientOptions GatewayClient() {
    net::ClientOptions o;
    o.port = gateway_->port();
    return o;
  }
  // Waits (bounded) until no replica counts a request in flight.
  void ExpectAllReleased() {
    for (int i = 0; i < 500; ++i) {
      bool idle = true;
      for (const auto& s : replicas_.Snapshot()) idle = idle && s.in_flight == 0;
      if (idle) return;
      std::this_thread::sleep_for(10ms);
    }
    for (const auto& s : replicas_.Snapshot()) {
      EXPECT_EQ(s.in_flight, 0u) << s.replica.id;
    }
  }
  static nlohmann::json Json(const std::string& body) {
    auto j = base::ParseJson(body);
    EXPECT_TRUE(j.ok()) << j.status() << ": " << body;
    return j.ok() ? *j : nlohmann::json();
  }
  static void ExpectOpenAiError(const net::ClientResponse& res, int status, const std::string& type,
                                const std::string& code) {
    EXPECT_EQ(res.status, status) << res.body;
    EXPECT_EQ(res.headers.Get("Content-Type").value_or(""), "application/json");
    nlohmann::json j = Json(res.body);
    ASSERT_TRUE(j.contains("error")) << res.body;
    EXPECT_EQ(j["error"]["type"], type) << res.body;
    EXPECT_EQ(j["error"]["code"], code) << res.body;
    EXPECT_TRUE(j["error"]["message"].is_string()) << res.body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  }

  // With `failing` as the first replica and a live one: a POST that reached `failing` gets 502
  // (its message naming `why`) and is not sent again; GETs are answered by the live replica.
  void ExpectOnlySafeRequestsRetried(HangUpReplica& failing, const std::string& why) {
    replicas_.Update({{"failing", "127.0.0.1", failing.port()}, AddReplica("live")});
    StartGateway();
    net::HttpClient client(GatewayClient());
    // The POST reached the first replica, which may have started on it: not sent again.
    auto post = client.Post("/apps/test/v1/echo", "{}");
    ASSERT_TRUE(post.ok()) << post.status();
    ExpectOpenAiError(*post, 502, "server_error", "upstream_unavailable");
    EXPECT_NE(post->body.find(why), std::string::npos) << post->body;
    EXPECT_EQ(failing.accepted(), 1);
    EXPECT_EQ(State("live").requests.load(), 0);
    // A GET can be repeated: the live replica answers it. (The rotation makes every other request
    // start on the failing replica; two GETs cover one of those.)
    for (int i = 0; i < 2; ++i) {
      auto get = client.Get("/apps/test/v1/sized");
      ASSERT_TRUE(get.ok()) << get.status();
      EXPECT_EQ(get->status, 200) << get->body;
      EXPECT_EQ(get->body, "twelve bytes");
    }
    EXPECT_EQ(failing.accepted(), 2);
    ExpectAllReleased();
  }

  // Declared first, destroyed last: the servers' handlers refer to these.
  UpstreamPool pool_;
  ReplicaSet replicas_;
  ProxyOptions options_;
  std::vector<std::shared_ptr<ReplicaState>> states_;
  std::vector<std::unique_ptr<net::Server>> replica_servers_;
  std::unique_ptr<net::Server> gateway_;
};

TEST_F(ProxyTest, JsonRoundTripWithHeaders) {
  Replica r1 = AddReplica("r1");
  replicas_.Update({r1});
  StartGateway();
  net::HttpClient client(GatewayClient());
  net::ClientRequest req;
  req.method = "POST";
  req.target = "/apps/test/v1/echo?stream=false&x=%2F";
  req.body = R"({"model":"m","messages":[]})";
  req.headers.Set("Content-Type", "application/json");
  req.headers.Set("Host", "api.example.com");
  req.headers.Set("Connection", "X-Hop");
  req.headers.Set("X-Hop", "hop value");
  req.headers.Set("Keep-Alive", "timeout=5");
  req.headers.Set("Proxy-Authorization", "Basic eDp5");
  req.headers.Set("TE", "trailers");
  req.headers.Set("Authorization", "Bearer sk-test");
  req.headers.Set("X-Forwarded-For", "10.1.2.3");
  req.headers.Add("X-Custom", "a");
  req.headers.Add("X-Custom", "b");
  auto res = client.Send(req);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 202);  // the replica's status, whatever it is
  EXPECT_EQ(res->headers.Get("Content-Type").value_or(""), "application/json");
  EXPECT_EQ(res->headers.Get("X-Replica").value_or(""), "r1");
  EXPECT_FALSE(res->headers.Has("X-Drop-Me"));
  EXPECT_FALSE(res->headers.Has("Keep-Alive"));
  nlohmann::json seen = Json(res->body);
  EXPECT_EQ(seen["method"], "POST");
  EXPECT_EQ(seen["target"], "/v1/echo?stream=false&x=%2F");
  EXPECT_EQ(seen["body"], req.body);
  const nlohmann::json& h = seen["headers"];
  EXPECT_EQ(h.value("content-type", ""), "application/json");
  EXPECT_EQ(h.value("authorization", ""), "Bearer sk-test");
  EXPECT_EQ(h.value("x-custom", ""), "a|b");
  EXPECT_EQ(h.value("content-length", ""), std::to_string(req.body.size()));
  EXPECT_EQ(h.value("host", ""), "127.0.0.1:" + std::to_string(r1.port));
  EXPECT_EQ(h.value("x-forwarded-for", ""), "10.1.2.3, 127.0.0.1");
  EXPECT_EQ(h.value("x-forwarded-proto", ""), "http");
  EXPECT_EQ(h.value("x-forwarded-host", ""), "api.example.com");
  for (const char* hop : {"connection", "x-hop", "keep-alive", "proxy-authorization", "te"}) {
    EXPECT_FALSE(h.contains(hop)) << hop << " was forwarded: " << h.dump();
  }
  // The replica's own errors pass through unchanged.
  auto missing = client.Get("/apps/test/v1/missing");
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(missing->status, 404);
  // Keep-alive to the gateway works across forwarded requests.
  for (int i = 0; i < 3; ++i) {
    auto again = client.Post("/apps/test/v1/echo", "{}");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->status, 202);
  }
  EXPECT_EQ(gateway_->Stats().total_connections, 1u);
  ExpectAllReleased();
}

TEST_F(ProxyTest, ServerSentEventsArriveAsTheyAreSent) {
  replicas_.Update({AddReplica("r1")});
  StartGateway();
  net::HttpClient client(GatewayClient());
  net::ClientRequest req;
  req.method = "POST";
  req.target = "/apps/test/v1/events";
  req.body = R"({"stream":true})";
  std::vector<std::string> events;
  auto res = client.ReadSse(req, [&](const net::SseEvent& e) {
    events.push_back(e.data);
    if (events.size() == 1) State("r1").sse_release.Notify();  // the replica may go on
    return true;
  });
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->headers.Get("Content-Type").value_or(""), "text/event-stream");
  EXPECT_EQ(res->headers.Get("Cache-Control").value_or(""), "no-cache");
  EXPECT_EQ(events, (std::vector<std::string>{R"({"n":1})", R"({"n":2})", "[DONE]"}));
  EXPECT_TRUE(State("r1").sse_released_in_time)
      << "the first event reached the client only after the replica's last one";
  ExpectAllReleased();
}

TEST_F(ProxyTest, RetriesOnAnotherReplicaWhenOneIsDown) {
  // "down" comes first in the set, so the first pick of every request is the dead one.
  replicas_.Update({{"down", "127.0.0.1", ClosedPort()}, AddReplica("live")});
  StartGateway();
  net::HttpClient client(GatewayClient());
  for (int i = 0; i < 4; ++i) {
    auto res = client.Post("/apps/test/v1/echo", R"({"i":)" + std::to_string(i) + "}");
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->status, 202) << res->body;
    EXPECT_EQ(Json(res->body)["body"], R"({"i":)" + std::to_string(i) + "}");
  }
  EXPECT_EQ(State("live").requests.load(), 4);
  std::map<std::string, uint64_t> acquired;
  for (const auto& s : replicas_.Snapshot()) acquired[s.replica.id] = s.acquired;
  EXPECT_GE(acquired["down"], 1u) << "the dead replica was never tried";
  EXPECT_EQ(acquired["live"], 4u);
  ExpectAllReleased();

  // With one attempt only, a request that picks the dead replica fails.
  options_.max_attempts = 1;
  int failures = 0;
  for (int i = 0; i < 4; ++i) {
    auto res = client.Post("/apps/test/v1/echo", "{}");
    ASSERT_TRUE(res.ok()) << res.status();
    if (res->status == 502) {
      ++failures;
      ExpectOpenAiError(*res, 502, "server_error", "upstream_unavailable");
    } else {
      EXPECT_EQ(res->status, 202);
    }
  }
  EXPECT_EQ(failures, 2);  // the two replicas take turns
}

TEST_F(ProxyTest, AllReplicasDownGives502) {
  replicas_.Update({{"dead1", "127.0.0.1", ClosedPort()}, {"dead2", "127.0.0.1", ClosedPort()}});
  StartGateway();
  net::HttpClient client(GatewayClient());
  auto res = client.Post("/apps/test/v1/chat/completions", R"({"model":"m"})");
  ASSERT_TRUE(res.ok()) << res.status();
  ExpectOpenAiError(*res, 502, "server_error", "upstream_unavailable");
  std::string message = Json(res->body)["error"]["message"];
  EXPECT_NE(message.find("dead1"), std::string::npos) << message;
  EXPECT_NE(message.find("dead2"), std::string::npos) << message;
  EXPECT_NE(message.find("refused"), std::string::npos) << message;
  ExpectAllReleased();
}

TEST_F(ProxyTest, NoReplicaGives503) {
  StartGateway();
  net::HttpClient client(GatewayClient());
  auto res = client.Post("/apps/test/v1/chat/completions", "{}");
  ASSERT_TRUE(res.ok()) << res.status();
  ExpectOpenAiError(*res, 503, "server_error", "no_replica_available");
  EXPECT_EQ(res->headers.Get("Retry-After").value_or(""), "1");
  // Replicas that all left the set count as none.
  replicas_.Update({{"gone", "127.0.0.1", ClosedPort()}});
  replicas_.Update({});
  res = client.Get("/apps/test/v1/models");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 503);
}

TEST_F(ProxyTest, BodyOverTheLimitGives413) {
  replicas_.Update({AddReplica("r1")});
  options_.max_request_body_bytes = 1024;
  StartGateway();
  {
    net::HttpClient client(GatewayClient());
    auto at_limit = client.Post("/apps/test/v1/echo", std::string(1024, 'a'));
    ASSERT_TRUE(at_limit.ok()) << at_limit.status();
    EXPECT_EQ(at_limit->status, 202);
    EXPECT_EQ(Json(at_limit->body)["body"].get<std::string>().size(), 1024u);
  }
  {
    // Over the limit by its Content-Length: refused before the body is read.
    net::HttpClient client(GatewayClient());
    auto over = client.Post("/apps/test/v1/echo", std::string(1025, 'a'));
    ASSERT_TRUE(over.ok()) << over.status();
    ExpectOpenAiError(*over, 413, "invalid_request_error", "request_too_large");
  }
  {
    // Chunked, so only reading finds out.
    net::HttpClient client(GatewayClient());
    net::ClientRequest req;
    req.method = "POST";
    req.target = "/apps/test/v1/echo";
    int calls = 0;
    req.source = [&](char* buf, size_t n) -> base::Result<size_t> {
      if (calls++ == 4) return size_t{0};
      n = std::min<size_t>(n, 1000);
      std::memset(buf, 'c', n);
      return n;
    };
    auto over = client.Send(req);
    ASSERT_TRUE(over.ok()) << over.status();
    ExpectOpenAiError(*over, 413, "invalid_request_error", "request_too_large");
  }
  EXPECT_EQ(State("r1").requests.load(), 1);  // only the request within the limit got through
}

TEST_F(ProxyTest, ClientDisconnectMidStreamAbortsTheReplica) {
  replicas_.Update({AddReplica("r1")});
  StartGateway();
  {
    net::HttpClient client(GatewayClient());
    net::ClientRequest req;
    req.target = "/apps/test/v1/forever";
    int seen = 0;
    auto res = client.ReadSse(req, [&](const net::SseEvent&) { return ++seen < 3; });
    ASSERT_TRUE(res.ok()) << res.status();  // stopping early is not an error
    EXPECT_EQ(seen, 3);
  }  // the client's connection is closed here at the latest
  ReplicaState& s = State("r1");
  ASSERT_TRUE(s.forever_ended.WaitFor(20s)) << "the replica kept streaming to nobody";
  {
    std::lock_guard lock(s.mu);
    EXPECT_FALSE(s.forever_status.ok());
    EXPECT_NE(s.forever_status.code(), base::StatusCode::kInternal) << s.forever_status;
  }
  ExpectAllReleased();
}

TEST_F(ProxyTest, LeastOutstandingSpreadsConcurrentRequests) {
  replicas_.Update({AddReplica("a"), AddReplica("b"), AddReplica("c")});
  StartGateway();
  // "a" is already busy with two requests (from another gateway thread, say): the next four go
  // to b and c, which a round-robin balancer would not do.
  std::vector<std::string> not_a = {"b", "c"};
  std::vector<ReplicaSet::Lease> busy_a;
  for (int i = 0; i < 2; ++i) {
    auto lease = replicas_.Acquire(not_a);
    ASSERT_TRUE(lease.has_value());
    busy_a.push_back(std::move(*lease));
  }
  constexpr int kRequests = 4;
  std::vector<std::thread> threads;
  std::vector<std::string> answers(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      net::HttpClient client(GatewayClient());
      auto res = client.Get("/apps/test/v1/slow");
      if (res.ok() && res->status == 200) answers[i] = res->body;
    });
  }
  // Wait until all are in flight, then look at the spread.
  bool all_in_flight = false;
  for (int i = 0; i < 1000 && !all_in_flight; ++i) {
    uint64_t total = 0;
    for (const auto& s : replicas_.Snapshot()) total += s.in_flight;
    all_in_flight = total == kRequests + busy_a.size();
    if (!all_in_flight) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(all_in_flight);
  for (const auto& s : replicas_.Snapshot()) EXPECT_EQ(s.in_flight, 2u) << s.replica.id;
  for (const char* id : {"a", "b", "c"}) State(id).slow_release.Notify();
  for (auto& t : threads) t.join();  // (no ASSERT before this: a joinable thread must not leak)
  std::map<std::string, int> per_replica;
  for (const auto& a : answers) ++per_replica[a];
  EXPECT_EQ(per_replica, (std::map<std::string, int>{{"b", 2}, {"c", 2}}));
  EXPECT_EQ(State("a").requests.load(), 0);
  busy_a.clear();
  ExpectAllReleased();
}

TEST_F(ProxyTest, TimeoutsRetryOnlyWhatIsSafeToRepeat) {
  replicas_.Update({AddReplica("r1"), AddReplica("r2")});
  options_.read_timeout = 300ms;
  StartGateway();
  net::HttpClient client(GatewayClient());
  // A POST that was sent may be running on the replica: it is not sent again.
  auto post = client.Post("/apps/test/v1/stall", "{}");
  ASSERT_TRUE(post.ok()) << post.status();
  ExpectOpenAiError(*post, 504, "server_error", "upstream_timeout");
  EXPECT_EQ(State("r1").requests + State("r2").requests, 1);
  // A GET is idempotent: the other replica gets it too.
  auto get = client.Get("/apps/test/v1/stall");
  ASSERT_TRUE(get.ok()) << get.status();
  ExpectOpenAiError(*get, 504, "server_error", "upstream_timeout");
  EXPECT_EQ(State("r1").requests + State("r2").requests, 3);
  EXPECT_GE(State("r1").requests.load(), 1);
  EXPECT_GE(State("r2").requests.load(), 1);
}

TEST_F(ProxyTest, HangUpBeforeTheAnswerIsRetriedOnlyWhenSafe) {
  HangUpReplica hang_up;
  ExpectOnlySafeRequestsRetried(hang_up, "");
}

TEST_F(ProxyTest, PostsOfSideEffectFreeReplicasAreRetriedAfterAHangUp) {
  HangUpReplica hang_up;
  replicas_.Update({{"hang-up", "127.0.0.1", hang_up.port()}, AddReplica("live")});
  options_.retry_sent_posts = true;  // a model server: a completion changes nothing
  StartGateway();
  net::HttpClient client(GatewayClient());
  // Requests that start on the hang-up replica are sent again to the live one: every POST is
  // answered there, whichever replica it started on.
  for (int i = 0; i < 2; ++i) {
    auto post = client.Post("/apps/test/v1/echo", "{}");
    ASSERT_TRUE(post.ok()) << post.status();
    EXPECT_EQ(post->status, 202) << post->body;
  }
  EXPECT_GE(hang_up.accepted(), 1);
  EXPECT_EQ(State("live").requests.load(), 2);
  ExpectAllReleased();
}

TEST_F(ProxyTest, ReplicaDyingBetweenItsHeadAndItsBodyIsReplacedWhenSafe) {
  // A model server killed while it thinks: its event stream's head went out, no event did.
  // Nothing reached the client, so it gets 502 rather than the dead replica's 200 cut short.
  HangUpReplica dies(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
  ExpectOnlySafeRequestsRetried(dies, "broke off after the head");
  // For a side-effect-free replica, POSTs go to the live one too.
  options_.retry_sent_posts = true;  // read by the gateway at each request
  net::HttpClient client(GatewayClient());
  for (int i = 0; i < 2; ++i) {
    auto post = client.Post("/apps/test/v1/echo", "{}");
    ASSERT_TRUE(post.ok()) << post.status();
    EXPECT_EQ(post->status, 202) << post->body;
  }
  EXPECT_GE(dies.accepted(), 3);
  EXPECT_EQ(State("live").requests.load(), 4);
  ExpectAllReleased();
}

TEST_F(ProxyTest, ReplicaFailingMidBodyCutsTheResponseShort) {
  replicas_.Update({AddReplica("r1")});
  StartGateway();
  net::HttpClient client(GatewayClient());
  std::string body;
  net::ClientRequest req;
  req.target = "/apps/test/v1/broken";
  auto res = client.Send(req, [&](std::string_view piece) {
    body.append(piece);
    return Status();
  });
  EXPECT_FALSE(res.ok()) << "a broken body was reported complete: " << body;
  EXPECT_EQ(body.find("partial"), 0u) << body;
  ExpectAllReleased();
  // The gateway still serves.
  auto ok = client.Get("/apps/test/v1/sized");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->body, "twelve bytes");
}

TEST_F(ProxyTest, BodylessAnswers) {
  replicas_.Update({AddReplica("r1")});
  StartGateway();
  net::HttpClient client(GatewayClient());
  net::ClientRequest head;
  head.method = "HEAD";
  head.target = "/apps/test/v1/sized";
  auto res = client.Send(head);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->headers.Get("Content-Length").value_or(""), "12");
  EXPECT_TRUE(res->body.empty());
  res = client.Get("/apps/test/v1/nothing");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 204);
  EXPECT_EQ(res->headers.Get("X-Replica").value_or(""), "r1");
  EXPECT_TRUE(res->body.empty());
  // The connection is still in sync after both.
  res = client.Get("/apps/test/v1/sized");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->body, "twelve bytes");
  ExpectAllReleased();
}

TEST_F(ProxyTest, OnePooledConnectionCarriesSequentialRequests) {
  replicas_.Update({AddReplica("r1")});
  StartGateway();
  State("r1").sse_release.Notify();  // the events go out without waiting for the client
  net::HttpClient client(GatewayClient());
  for (int i = 0; i < 3; ++i) {
    auto res = client.Post("/apps/test/v1/echo", R"({"i":)" + std::to_string(i) + "}");
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->status, 202);
  }
  net::ClientRequest sse;
  sse.method = "POST";
  sse.target = "/apps/test/v1/events";
  int events = 0;
  auto streamed = client.ReadSse(sse, [&](const net::SseEvent&) { return ++events > 0; });
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_EQ(events, 3);
  net::ClientRequest head;
  head.method = "HEAD";
  head.target = "/apps/test/v1/sized";
  auto res = client.Send(head);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
  res = client.Get("/apps/test/v1/nothing");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 204);
  res = client.Get("/apps/test/v1/sized");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->body, "twelve bytes");
  EXPECT_EQ(replica_servers_.back()->Stats().total_connections, 1u);
  EXPECT_EQ(pool_.idle(), 1u);
  ExpectAllReleased();
}

TEST_F(ProxyTest, ConnectionCloseFromTheReplicaIsHonoured) {
  ScriptedReplica replica([](int) { return ScriptedReplica::Act::kAnswerAndClose; });
  replicas_.Update({{"r", "127.0.0.1", replica.port()}});
  StartGateway();
  net::HttpClient client(GatewayClient());
  for (int i = 0; i < 3; ++i) {
    auto res = client.Get("/apps/test/v1/x");
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->body, "ok");
    EXPECT_FALSE(res->headers.Has("Connection"));  // hop-by-hop: for the gateway only
    EXPECT_EQ(pool_.idle(), 0u);
  }
  EXPECT_EQ(replica.connections(), 3);
  EXPECT_EQ(replica.ignored_close(), 0);
}

TEST_F(ProxyTest, StalePooledConnectionIsRetriedOnAFreshOne) {
  // Every connection answers its first request and hangs up on the second, like a replica that
  // closes an idle connection just as the next request arrives on it.
  ScriptedReplica replica(
      [](int i) { return i == 0 ? ScriptedReplica::Act::kAnswer : ScriptedReplica::Act::kHangUp; });
  replicas_.Update({{"r", "127.0.0.1", replica.port()}});
  options_.max_attempts = 1;  // the fresh connection is not a second attempt
  options_.max_request_body_bytes = 32 * 1024 * 1024;
  StartGateway();
  net::HttpClient client(GatewayClient());
  auto res = client.Get("/apps/test/v1/x");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->body, "ok");
  EXPECT_EQ(pool_.idle(), 1u);
  // A GET on the pooled connection, which hangs up: sent again on a fresh one.
  res = client.Get("/apps/test/v1/x");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(replica.connections(), 2);
  // A POST whose body could not be sent completely (far more than the replica's buffers take)
  // is safe to send again too.
  res = client.Post("/apps/test/v1/x", std::string(24 * 1024 * 1024, 'p'));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(replica.connections(), 3);
  EXPECT_EQ(replica.answered(), 3);
  // A POST that went out completely may be running on the replica: not sent again.
  res = client.Post("/apps/test/v1/x", "{}");
  ASSERT_TRUE(res.ok()) << res.status();
  ExpectOpenAiError(*res, 502, "server_error", "upstream_unavailable");
  EXPECT_EQ(replica.connections(), 3);
  EXPECT_EQ(replica.answered(), 3);
  ExpectAllReleased();
}

TEST_F(ProxyTest, AnswersNotReadToTheEndCloseTheirConnection) {
  replicas_.Update({AddReplica("r1")});
  StartGateway();
  const net::Server& replica = *replica_servers_.back();
  net::HttpClient client(GatewayClient());
  auto res = client.Get("/apps/test/v1/sized");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(pool_.idle(), 1u);
  // The replica breaks off mid-body on the pooled connection: it is not given back.
  net::ClientRequest broken;
  broken.target = "/apps/test/v1/broken";
  EXPECT_FALSE(client.Send(broken, [](std::string_view) { return Status(); }).ok());
  ExpectAllReleased();
  EXPECT_EQ(pool_.idle(), 0u);
  res = client.Get("/apps/test/v1/sized");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->body, "twelve bytes");
  EXPECT_EQ(replica.Stats().total_connections, 2u);
  EXPECT_EQ(pool_.idle(), 1u);
  // The client leaves mid-stream: the pooled connection carrying the stream is closed.
  {
    net::HttpClient leaving(GatewayClient());
    net::ClientRequest req;
    req.target = "/apps/test/v1/forever";
    int seen = 0;
    auto sse = leaving.ReadSse(req, [&](const net::SseEvent&) { return ++seen < 3; });
    ASSERT_TRUE(sse.ok()) << sse.status();
  }
  ASSERT_TRUE(State("r1").forever_ended.WaitFor(20s)) << "the replica kept streaming to nobody";
  ExpectAllReleased();
  EXPECT_EQ(pool_.idle(), 0u);
  EXPECT_EQ(replica.Stats().total_connections, 2u);
}

TEST(ForwardTest, RejectsTargetsThatAreNotOriginForm) {
  ReplicaSet replicas;
  replicas.Update({{"r", "127.0.0.1", ClosedPort()}});
  for (const char* target : {"", "v1/models", "/v1/x\r\nX-Injected: 1", "/a b", "/\x7f"}) {
    net::Request req;
    req.set_method("GET");
    ASSERT_TRUE(req.SetTarget("/apps/x/v1/models").ok());
    net::Response res = Forward(req, replicas, target);
    EXPECT_EQ(res.status, 400) << target;
    EXPECT_NE(res.body.find("invalid_target"), std::string::npos) << res.body;
  }
  EXPECT_EQ(replicas.Snapshot()[0].acquired, 0u);
}

TEST(ForwardTest, ErrorBodiesAreOpenAiJson) {
  net::Response res = OpenAiError(502, "bad \"gateway\"", "server_error", "upstream_unavailable");
  EXPECT_EQ(res.status, 502);
  EXPECT_EQ(res.body, R"({"error":{"code":"upstream_unavailable","message":"bad \"gateway\"",)"
                      R"("param":null,"type":"server_error"}})");
  res = OpenAiError(400, "x", "invalid_request_error");
  EXPECT_EQ(res.body,
            R"({"error":{"code":null,"message":"x","param":null,"type":"invalid_request_error"}})");
}

TEST(HopByHopTest, RemovesStandardAndNamedFields) {
  net::Headers h;
  h.Add("Connection", "  , close,,X-A ,  ");
  h.Add("connection", "x-b");
  h.Add("Keep-Alive", "timeout=5");
  h.Add("Proxy-Connection", "keep-alive");
  h.Add("proxy-authorization", "Basic x");
  h.Add("TE", "trailers");
  h.Add("Trailer", "X-Checksum");
  h.Add("Transfer-Encoding", "chunked");
  h.Add("UPGRADE", "websocket");
  h.Add("x-a", "1");
  h.Add("X-B", "2");
  h.Add("X-Kept", "3");
  h.Add("Proxyish", "4");  // not a Proxy- field
  h.Add("Close", "5");     // "close" is an option, and also names this field: dropped
  RemoveHopByHopHeaders(h);
  std::vector<std::string> left;
  for (const auto& [name, value] : h) left.push_back(name + "=" + value);
  EXPECT_EQ(left, (std::vector<std::string>{"X-Kept=3", "Proxyish=4"}));
  net::Headers empty;
  RemoveHopByHopHeaders(empty);
  EXPECT_TRUE(empty.empty());
}

}  // namespace
}  // namespace sovai::gateway
