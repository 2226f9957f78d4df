// Response::upgrade: a handler that answers 101 takes over the connection's bytes (the hook the
// gateway's websocket tunnel uses). Driven by a raw TCP client, since HttpClient does not speak
// upgraded protocols.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "base/notification.h"
#include "net/http.h"

namespace sovai::net {
namespace {

using namespace std::chrono_literals;

// A blocking TCP connection to 127.0.0.1:port, closed by the destructor.
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  void Send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      ASSERT_GT(n, 0);
      data.remove_prefix(static_cast<size_t>(n));
    }
  }
  // Reads until `want` bytes arrived, the peer closed, or 5 s passed.
  std::string Read(size_t want) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (out.size() < want && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, std::min(sizeof buf, want - out.size()), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // Reads a response head (through the empty line).
  std::string ReadHead() {
    std::string out;
    while (out.find("\r\n\r\n") == std::string::npos) {
      std::string c = Read(1);
      if (c.empty()) break;
      out += c;
    }
    return out;
  }
  // Whether the peer closed the connection within 5 s (reads 0 or fails).
  bool PeerClosed() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) return false;
    char c;
    return ::recv(fd_, &c, 1, 0) <= 0;
  }
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

constexpr char kUpgradeRequest[] =
    "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n";

class UpgradeTest : public ::testing::Test {
 protected:
  ~UpgradeTest() override { server_.reset(); }

  void StartServer(Router router) {
    server_ = std::make_unique<Server>(std::move(router));
    base::Status st = server_->Start({.listen = "127.0.0.1:0"});
    ASSERT_TRUE(st.ok()) << st;
  }

  // A route whose upgrade echoes what it reads until the client closes, then records it.
  Router EchoRouter() {
    Router router;
    router.Get("/ws", [this](Request&) {
      Response res = Response::Empty(101);
      res.headers.Set("Connection", "Upgrade");
      res.headers.Set("Upgrade", "echo");
      res.upgrade = [this](UpgradedStream& stream) {
        char buf[1024];
        for (;;) {
          auto n = stream.Read(buf, sizeof buf);
          if (!n.ok() || *n == 0) break;
          if (!stream.Write(std::string_view(buf, *n)).ok()) break;
        }
        ended_.Notify();
      };
      return res;
    });
    router.Get("/plain", [](Request&) { return Response::Text(200, "plain"); });
    return router;
  }

  base::Notification ended_;
  std::unique_ptr<Server> server_;
};

TEST_F(UpgradeTest, EchoesBothWaysAfterTheSwitchingProtocolsHead) {
  StartServer(EchoRouter());
  RawClient client(server_->port());
  ASSERT_TRUE(client.connected());
  client.Send(kUpgradeRequest);
  std::string head = client.ReadHead();
  EXPECT_TRUE(head.starts_with("HTTP/1.1 101 ")) << head;
  EXPECT_NE(head.find("Connection: Upgrade\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("Upgrade: echo\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.find("Content-Length"), std::string::npos) << head;
  EXPECT_EQ(head.find("Transfer-Encoding"), std::string::npos) << head;
  client.Send("hello");
  EXPECT_EQ(client.Read(5), "hello");
  client.Send(std::string(100'000, 'x'));
  EXPECT_EQ(client.Read(100'000), std::string(100'000, 'x'));
  client.ShutdownWrite();  // Read returns 0: the upgrade ends, the server closes
  EXPECT_TRUE(ended_.WaitFor(5s));
  EXPECT_TRUE(client.PeerClosed());
}

TEST_F(UpgradeTest, BytesSentWithTheHeadAreReadFirst) {
  StartServer(EchoRouter());
  RawClient client(server_->port());
  client.Send(std::string(kUpgradeRequest) + "early");
  std::string head = client.ReadHead();
  ASSERT_TRUE(head.starts_with("HTTP/1.1 101 ")) << head;
  EXPECT_EQ(client.Read(5), "early");
}

TEST_F(UpgradeTest, CloseFromAnotherThreadEndsABlockedRead) {
  Router router;
  std::atomic<bool> read_failed{false};
  router.Get("/ws", [&](Request&) {
    Response res = Response::Empty(101);
    res.headers.Set("Connection", "Upgrade");
    res.headers.Set("Upgrade", "echo");
    res.upgrade = [&](UpgradedStream& stream) {
      std::thread closer([&] {
        std::this_thread::sleep_for(100ms);
        stream.Close();
      });
      char buf[16];
      auto n = stream.Read(buf, sizeof buf);  // nothing comes: only Close ends it
      read_failed = !n.ok() || *n == 0;
      closer.join();
      ended_.Notify();
    };
    return res;
  });
  StartServer(std::move(router));
  RawClient client(server_->port());
  client.Send(kUpgradeRequest);
  ASSERT_TRUE(client.ReadHead().starts_with("HTTP/1.1 101 "));
  EXPECT_TRUE(ended_.WaitFor(5s));
  EXPECT_TRUE(read_failed);
  EXPECT_TRUE(client.PeerClosed());
}

TEST_F(UpgradeTest, A101WithoutUpgradeIsA500AndOtherStatusesIgnoreIt) {
  Router router;
  router.Get("/bare101", [](Request&) { return Response::Empty(101); });
  router.Get("/200", [](Request&) {
    Response res = Response::Text(200, "not switching");
    res.upgrade = [](UpgradedStream&) { ADD_FAILURE() << "upgrade ran on a 200"; };
    return res;
  });
  StartServer(std::move(router));
  {
    RawClient client(server_->port());
    client.Send("GET /bare101 HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_TRUE(client.ReadHead().starts_with("HTTP/1.1 500 "));
  }
  {
    RawClient client(server_->port());
    client.Send("GET /200 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    std::string head = client.ReadHead();
    EXPECT_TRUE(head.starts_with("HTTP/1.1 200 ")) << head;
    EXPECT_EQ(client.Read(13), "not switching");
  }
}

TEST_F(UpgradeTest, HttpOneZeroCannotSwitch) {
  StartServer(EchoRouter());
  RawClient client(server_->port());
  client.Send("GET /ws HTTP/1.0\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n");
  EXPECT_TRUE(client.ReadHead().starts_with("HTTP/1.0 500 "));
}

TEST_F(UpgradeTest, ShutdownEndsAnOpenTunnel) {
  StartServer(EchoRouter());
  RawClient client(server_->port());
  client.Send(kUpgradeRequest);
  ASSERT_TRUE(client.ReadHead().starts_with("HTTP/1.1 101 "));
  client.Send("ping");
  EXPECT_EQ(client.Read(4), "ping");
  server_->Shutdown(200ms);  // the busy connection is closed when the grace ends
  EXPECT_TRUE(ended_.WaitFor(5s));
  EXPECT_TRUE(client.PeerClosed());
}

}  // namespace
}  // namespace sovai::net
