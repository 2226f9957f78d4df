// ForwardUpgrade end to end on loopback sockets: a raw websocket client, the gateway route on a
// real net::Server, and a tiny websocket echo upstream (RFC 6455 handshake and frames).
#include "gateway/websocket_tunnel.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/crypto.h"
#include "base/env.h"

namespace sovai::gateway {
namespace {

using namespace std::chrono_literals;

constexpr char kWebsocketGuid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

std::string AcceptFor(std::string_view key) {
  return base::Base64Encode(base::Sha1(std::string(key) + kWebsocketGuid));
}

// Reads until `want` bytes (or "\r\n\r\n" when want is 0) arrived, the peer closed, or 5 s.
std::string ReadFrom(int fd, size_t want) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (want == 0 ? out.find("\r\n\r\n") != std::string::npos : out.size() >= want) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    size_t room = want == 0 ? 1 : std::min(sizeof buf, want - out.size());
    ssize_t n = ::recv(fd, buf, room, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

bool SendTo(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Whether the peer closes within `timeout`.
bool ClosedWithin(int fd, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char c;
    ssize_t n = ::recv(fd, &c, 1, 0);
    if (n <= 0) return true;
  }
  return false;
}

int Listen(uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  SOVAI_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  SOVAI_CHECK(::listen(fd, 16) == 0);
  SOVAI_CHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  *port = ntohs(addr.sin_port);
  return fd;
}

int ConnectTo(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  SOVAI_CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

// A text frame of at most 125 bytes; masked as clients must send them.
std::string Frame(std::string_view payload, bool masked) {
  SOVAI_CHECK(payload.size() <= 125);
  std::string out;
  out += static_cast<char>(0x81);
  out += static_cast<char>((masked ? 0x80 : 0) | payload.size());
  const char mask[4] = {0x12, 0x34, 0x56, 0x78};
  if (masked) out.append(mask, 4);
  for (size_t i = 0; i < payload.size(); ++i) {
    out += masked ? static_cast<char>(payload[i] ^ mask[i % 4]) : payload[i];
  }
  return out;
}

// Reads one short frame; returns its payload (unmasked).
std::string ReadFrame(int fd) {
  std::string head = ReadFrom(fd, 2);
  if (head.size() < 2) return "<closed>";
  const bool masked = (head[1] & 0x80) != 0;
  const size_t len = static_cast<size_t>(head[1] & 0x7f);
  std::string mask = masked ? ReadFrom(fd, 4) : "";
  std::string payload = len == 0 ? "" : ReadFrom(fd, len);
  if (masked) {
    for (size_t i = 0; i < payload.size(); ++i) payload[i] ^= mask[i % 4];
  }
  return payload;
}

// The upstream: a websocket echo server, or one that refuses with 403. Serves connections one
// after another on a thread of its own.
class EchoUpstream {
 public:
  explicit EchoUpstream(bool refuse = false) : refuse_(refuse) {
    listen_fd_ = Listen(&port_);
    thread_ = std::thread([this] { Serve(); });
  }
  ~EchoUpstream() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();  // no new handler after this
    for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
    for (std::thread& t : handlers_) t.join();
    for (int fd : conns_) ::close(fd);
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  std::string last_head() {
    std::lock_guard lock(mu_);
    return last_head_;
  }

 private:
  void Serve() {
    while (!stopping_) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      conns_.push_back(fd);
      handlers_.emplace_back([this, fd] { Handle(fd); });
    }
  }
  void Handle(int fd) {
    std::string head = ReadFrom(fd, 0);
    {
      std::lock_guard lock(mu_);
      last_head_ = head;
    }
    if (refuse_) {
      SendTo(fd,
             "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 18\r\n\r\n"
             "origin not allowed");
    } else {
      std::string key;
      if (size_t at = head.find("Sec-WebSocket-Key: "); at != std::string::npos) {
        key = head.substr(at + 19, head.find("\r\n", at) - at - 19);
      }
      SendTo(fd,
             "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Accept: " +
                 AcceptFor(key) + "\r\n\r\n" + Frame("welcome", false));
      for (;;) {
        std::string payload = ReadFrame(fd);
        if (payload == "<closed>" || payload == "bye") break;
        if (!SendTo(fd, Frame(payload, false))) break;
      }
    }
    ::shutdown(fd, SHUT_RDWR);  // closed by the destructor
  }

  bool refuse_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  // Touched by the accept thread only, and by the destructor once it has been joined.
  std::vector<int> conns_;
  std::vector<std::thread> handlers_;
  std::mutex mu_;  // guards last_head_
  std::string last_head_;
};

constexpr char kKey[] = "dGhlIHNhbXBsZSBub25jZQ==";

std::string UpgradeRequest(std::string_view path) {
  return "GET " + std::string(path) +
         " HTTP/1.1\r\nHost: gateway.test\r\nConnection: keep-alive, Upgrade\r\n"
         "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " +
         kKey + "\r\nAuthorization: Bearer user-token\r\n\r\n";
}

class TunnelTest : public ::testing::Test {
 protected:
  ~TunnelTest() override { server_.reset(); }

  void Start(uint16_t upstream_port, size_t max_tunnels = 8, std::chrono::milliseconds idle = 10s) {
    registry_ = std::make_unique<TunnelRegistry>(max_tunnels);
    net::Router router;
    router.Get("/ws/{rest...}", [this, upstream_port, idle](net::Request& request) {
      if (!IsUpgradeRequest(request)) return net::Response::Text(400, "not an upgrade");
      net::Headers set;
      set.Set("Authorization", "token s3cret");
      return ForwardUpgrade(request, {.host = "127.0.0.1", .port = upstream_port}, request.target(),
                            set, *registry_, {.idle_timeout = idle});
    });
    server_ = std::make_unique<net::Server>(std::move(router));
    ASSERT_TRUE(server_->Start({.listen = "127.0.0.1:0"}).ok());
  }

  std::unique_ptr<TunnelRegistry> registry_;
  std::unique_ptr<net::Server> server_;
};

TEST_F(TunnelTest, SplicesAWebsocketBothWays) {
  EchoUpstream upstream;
  Start(upstream.port());
  int fd = ConnectTo(server_->port());
  ASSERT_TRUE(SendTo(fd, UpgradeRequest("/ws/api/kernels/k1/channels?session_id=s")));
  std::string head = ReadFrom(fd, 0);
  EXPECT_TRUE(head.starts_with("HTTP/1.1 101 ")) << head;
  EXPECT_NE(head.find("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"), std::string::npos)
      << head;
  EXPECT_NE(head.find("Upgrade: websocket\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("Connection: Upgrade\r\n"), std::string::npos) << head;
  // What the upstream sent right after its head comes first.
  EXPECT_EQ(ReadFrame(fd), "welcome");
  for (std::string msg : {"hello", "{\"msg_type\":\"execute_request\"}", ""}) {
    ASSERT_TRUE(SendTo(fd, Frame(msg, true)));
    EXPECT_EQ(ReadFrame(fd), msg);
  }
  // The upstream got the platform's credentials, not the user's, and the target as sent.
  std::string seen = upstream.last_head();
  EXPECT_TRUE(seen.starts_with("GET /ws/api/kernels/k1/channels?session_id=s HTTP/1.1\r\n"))
      << seen;
  EXPECT_NE(seen.find("Authorization: token s3cret\r\n"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("user-token"), std::string::npos) << seen;
  EXPECT_NE(seen.find("Upgrade: websocket\r\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find("Connection: Upgrade\r\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find("Sec-WebSocket-Key: " + std::string(kKey)), std::string::npos) << seen;
  EXPECT_NE(seen.find("X-Forwarded-Host: gateway.test\r\n"), std::string::npos) << seen;
  EXPECT_EQ(registry_->open(), 1u);
  // The upstream ends the conversation: the client's connection closes and the slot is free.
  ASSERT_TRUE(SendTo(fd, Frame("bye", true)));
  EXPECT_TRUE(ClosedWithin(fd, 5s));
  ::close(fd);
  for (int i = 0; i < 500 && registry_->open() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(registry_->open(), 0u);
  EXPECT_EQ(registry_->total(), 1u);
}

TEST_F(TunnelTest, ClientCloseEndsTheUpstreamSide) {
  EchoUpstream upstream;
  Start(upstream.port());
  int fd = ConnectTo(server_->port());
  ASSERT_TRUE(SendTo(fd, UpgradeRequest("/ws/x")));
  ASSERT_TRUE(ReadFrom(fd, 0).starts_with("HTTP/1.1 101 "));
  EXPECT_EQ(ReadFrame(fd), "welcome");
  ::close(fd);
  for (int i = 0; i < 500 && registry_->open() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(registry_->open(), 0u);
}

TEST_F(TunnelTest, ARefusalIsRelayedWithItsBody) {
  EchoUpstream upstream(/*refuse=*/true);
  Start(upstream.port());
  int fd = ConnectTo(server_->port());
  ASSERT_TRUE(SendTo(fd, UpgradeRequest("/ws/x")));
  std::string head = ReadFrom(fd, 0);
  EXPECT_TRUE(head.starts_with("HTTP/1.1 403 ")) << head;
  EXPECT_NE(head.find("Content-Length: 18\r\n"), std::string::npos) << head;
  EXPECT_EQ(ReadFrom(fd, 18), "origin not allowed");
  ::close(fd);
  EXPECT_EQ(registry_->open(), 0u);
  EXPECT_EQ(registry_->total(), 0u);
}

TEST_F(TunnelTest, TheLimitRefusesWith503UntilASlotIsFree) {
  EchoUpstream upstream;
  Start(upstream.port(), /*max_tunnels=*/1);
  int first = ConnectTo(server_->port());
  ASSERT_TRUE(SendTo(first, UpgradeRequest("/ws/a")));
  ASSERT_TRUE(ReadFrom(first, 0).starts_with("HTTP/1.1 101 "));
  int second = ConnectTo(server_->port());
  ASSERT_TRUE(SendTo(second, UpgradeRequest("/ws/b")));
  std::string refused = ReadFrom(second, 0);
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 503 ")) << refused;
  EXPECT_NE(refused.find("Retry-After: 5"), std::string::npos) << refused;
  EXPECT_EQ(registry_->refused(), 1u);
  ::close(second);
  ::close(first);
  for (int i = 0; i < 500 && registry_->open() > 0; ++i) std::this_thread::sleep_for(10ms);
  int third = ConnectTo(server_->port());
  ASSERT_TRUE(SendTo(third, UpgradeRequest("/ws/c")));
  EXPECT_TRUE(ReadFrom(third, 0).starts_with("HTTP/1.1 101 "));
  ::close(third);
}

TEST_F(TunnelTest, AnIdleTunnelIsClosed) {
  EchoUpstream upstream;
  Start(upstream.port(), 8, /*idle=*/300ms);
  int fd = ConnectTo(server_->port());
  ASSERT_TRUE(SendTo(fd, UpgradeRequest("/ws/x")));
  ASSERT_TRUE(ReadFrom(fd, 0).starts_with("HTTP/1.1 101 "));
  EXPECT_EQ(ReadFrame(fd), "welcome");
  // Traffic keeps it open past the idle timeout...
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(150ms);
    ASSERT_TRUE(SendTo(fd, Frame("tick", true)));
    ASSERT_EQ(ReadFrame(fd), "tick");
  }
  // ...silence closes it.
  auto before = std::chrono::steady_clock::now();
  EXPECT_TRUE(ClosedWithin(fd, 5s));
  EXPECT_GE(std::chrono::steady_clock::now() - before, 200ms);
  ::close(fd);
  for (int i = 0; i < 500 && registry_->open() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(registry_->open(), 0u);
}

TEST_F(TunnelTest, AnUnreachableUpstreamIs502) {
  uint16_t port = 0;
  ::close(Listen(&port));  // a port nobody listens on now
  Start(port);
  int fd = ConnectTo(server_->port());
  ASSERT_TRUE(SendTo(fd, UpgradeRequest("/ws/x")));
  std::string head = ReadFrom(fd, 0);
  EXPECT_TRUE(head.starts_with("HTTP/1.1 502 ")) << head;
  ::close(fd);
  EXPECT_EQ(registry_->open(), 0u);
}

TEST(IsUpgradeRequestTest, NeedsBothFields) {
  auto make = [](std::initializer_list<std::pair<const char*, const char*>> fields) {
    auto request = std::make_unique<net::Request>();
    for (auto [k, v] : fields) request->mutable_headers().Add(k, v);
    return request;
  };
  EXPECT_TRUE(IsUpgradeRequest(*make({{"Connection", "Upgrade"}, {"Upgrade", "websocket"}})));
  EXPECT_TRUE(
      IsUpgradeRequest(*make({{"Connection", "keep-alive, upgrade"}, {"Upgrade", "websocket"}})));
  EXPECT_FALSE(IsUpgradeRequest(*make({{"Upgrade", "websocket"}})));
  EXPECT_FALSE(IsUpgradeRequest(*make({{"Connection", "Upgrade"}})));
  EXPECT_FALSE(IsUpgradeRequest(*make({{"Connection", "keep-alive"}, {"Upgrade", "websocket"}})));
}

}  // namespace
}  // namespace sovai::gateway
