// UpstreamPool with real HttpClients against a net::Server on a loopback port: which connections
// are kept, which are handed out again, and the bounds. (Forward over the pool: proxy_test.cc.)
#include "gateway/upstream_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net/http.h"

namespace sovai::gateway {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<net::Server> StartReplica(net::ServerOptions options = {}) {
  net::Router r;
  r.Get("/sized", [](net::Request&) { return net::Response::Text(200, "twelve bytes"); });
  options.listen = "127.0.0.1:0";
  auto server = std::make_unique<net::Server>(std::move(r));
  base::Status st = server->Start(options);
  EXPECT_TRUE(st.ok()) << st;
  return server;
}

net::ClientOptions To(const net::Server& server) {
  net::ClientOptions o;
  o.port = server.port();
  return o;
}

// A client that has carried one complete request to `options`' server.
std::unique_ptr<net::HttpClient> Used(const net::ClientOptions& options) {
  auto client = std::make_unique<net::HttpClient>(options);
  auto res = client->Get("/sized");
  EXPECT_TRUE(res.ok()) << res.status();
  return client;
}

// Waits (bounded) until the server has `n` connections open.
bool WaitForOpenConnections(const net::Server& server, uint64_t n) {
  for (int i = 0; i < 1000; ++i) {
    if (server.Stats().open_connections == n) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST(UpstreamPoolTest, OneConnectionCarriesSequentialRequests) {
  auto replica = StartReplica();
  UpstreamPool pool;
  const net::ClientOptions options = To(*replica);
  EXPECT_EQ(pool.Take(options), nullptr);  // nothing idle yet
  for (int i = 0; i < 5; ++i) {
    std::unique_ptr<net::HttpClient> client = pool.Take(options);
    EXPECT_EQ(client == nullptr, i == 0) << i;
    if (client == nullptr) client = std::make_unique<net::HttpClient>(options);
    auto res = client->Get("/sized");
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->body, "twelve bytes");
    pool.Give(std::move(client));
    EXPECT_EQ(pool.idle(), 1u);
    EXPECT_EQ(pool.idle("127.0.0.1", replica->port()), 1u);
  }
  EXPECT_EQ(replica->Stats().total_connections, 1u);
  pool.Clear();
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_TRUE(WaitForOpenConnections(*replica, 0));
}

TEST(UpstreamPoolTest, KeepsOnlyConnectionsWhoseAnswerWasReadToTheEnd) {
  auto replica = StartReplica();
  UpstreamPool pool;
  const net::ClientOptions options = To(*replica);

  // Head and body pulled to the end: kept.
  auto whole = std::make_unique<net::HttpClient>(options);
  net::ClientRequest get;
  get.target = "/sized";
  auto head = whole->SendUntilHead(get);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_FALSE(whole->HasReusableConnection()) << "the body is still pending";
  std::string body;
  char buf[5];
  for (;;) {
    auto n = whole->ReadBody(buf, sizeof buf);
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) break;
    body.append(buf, *n);
  }
  EXPECT_EQ(body, "twelve bytes");
  pool.Give(std::move(whole));
  EXPECT_EQ(pool.idle(), 1u);
  pool.Clear();

  // A body read halfway: the rest would be taken for the next answer. Closed instead.
  auto half = std::make_unique<net::HttpClient>(options);
  head = half->SendUntilHead(get);
  ASSERT_TRUE(head.ok()) << head.status();
  auto n = half->ReadBody(buf, 1);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1u);
  pool.Give(std::move(half));
  EXPECT_EQ(pool.idle(), 0u);

  // A failed request, an aborted client, a client that never connected, null: closed/ignored.
  auto failed = std::make_unique<net::HttpClient>(options);
  auto missing = failed->Get("/missing");  // a complete 404 answer is fine...
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_TRUE(failed->HasReusableConnection());
  net::ClientOptions tiny = options;
  tiny.max_body_bytes = 4;
  auto limited = std::make_unique<net::HttpClient>(tiny);
  EXPECT_FALSE(limited->Get("/sized").ok());  // ...a body over the client's limit is not
  pool.Give(std::move(limited));
  auto aborted = Used(options);
  aborted->Abort();
  pool.Give(std::move(aborted));
  pool.Give(std::make_unique<net::HttpClient>(options));
  pool.Give(nullptr);
  EXPECT_EQ(pool.idle(), 0u);
  pool.Give(std::move(failed));
  EXPECT_EQ(pool.idle(), 1u);
}

TEST(UpstreamPoolTest, ConnectionsTheReplicaClosedAreNotHandedOut) {
  net::ServerOptions server_options;
  server_options.idle_timeout = 50ms;  // the replica closes idle connections quickly
  auto replica = StartReplica(server_options);
  UpstreamPool pool;
  const net::ClientOptions options = To(*replica);
  pool.Give(Used(options));
  EXPECT_EQ(pool.idle(), 1u);
  ASSERT_TRUE(WaitForOpenConnections(*replica, 0)) << "the replica never closed the connection";
  EXPECT_EQ(pool.Take(options), nullptr);
  EXPECT_EQ(pool.idle(), 0u);
}

TEST(UpstreamPoolTest, IdleTimeout) {
  auto replica = StartReplica();
  const net::ClientOptions options = To(*replica);
  {
    UpstreamPool keeps_none({.idle_timeout = 0ms});
    keeps_none.Give(Used(options));
    EXPECT_EQ(keeps_none.idle(), 0u);
  }
  UpstreamPool pool({.idle_timeout = 1ms});
  pool.Give(Used(options));
  EXPECT_EQ(pool.idle(), 1u);
  std::this_thread::sleep_for(20ms);  // longer than the idle timeout
  EXPECT_EQ(pool.Take(options), nullptr);
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_TRUE(WaitForOpenConnections(*replica, 0)) << "the expired connection was not closed";
}

TEST(UpstreamPoolTest, BoundsPerReplicaAndOverall) {
  auto a = StartReplica();
  auto b = StartReplica();
  UpstreamPool pool({.max_idle_per_replica = 3, .max_idle_total = 5});
  // A burst of 5 connections to `a` leaves 3 behind; the others are closed.
  std::vector<std::unique_ptr<net::HttpClient>> burst;
  for (int i = 0; i < 5; ++i) burst.push_back(Used(To(*a)));
  EXPECT_EQ(a->Stats().open_connections, 5u);
  for (auto& c : burst) pool.Give(std::move(c));
  EXPECT_EQ(pool.idle("127.0.0.1", a->port()), 3u);
  EXPECT_TRUE(WaitForOpenConnections(*a, 3));
  // `b` gets what is left of the overall bound.
  for (int i = 0; i < 3; ++i) pool.Give(Used(To(*b)));
  EXPECT_EQ(pool.idle("127.0.0.1", b->port()), 2u);
  EXPECT_EQ(pool.idle(), 5u);
  // Taking one makes room again.
  auto taken = pool.Take(To(*a));
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(pool.idle(), 4u);
  pool.Give(Used(To(*b)));
  EXPECT_EQ(pool.idle("127.0.0.1", b->port()), 3u);
  EXPECT_EQ(pool.idle(), 5u);
}

TEST(UpstreamPoolTest, HandsOutOnlyClientsWithTheSameSettings) {
  auto replica = StartReplica();
  UpstreamPool pool;
  net::ClientOptions options = To(*replica);
  options.read_timeout = 1s;
  pool.Give(Used(options));
  net::ClientOptions other = options;
  other.read_timeout = 2s;
  EXPECT_EQ(pool.Take(other), nullptr);
  EXPECT_EQ(pool.idle(), 1u);  // still there for whoever asks with its settings
  net::ClientOptions other_port = options;
  other_port.port = static_cast<uint16_t>(options.port + 1);
  EXPECT_EQ(pool.Take(other_port), nullptr);
  auto same = pool.Take(options);
  ASSERT_NE(same, nullptr);
  EXPECT_EQ(same->options().read_timeout, 1s);
  auto res = same->Get("/sized");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(replica->Stats().total_connections, 1u);
}

}  // namespace
}  // namespace sovai::gateway
