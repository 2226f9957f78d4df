// Loopback tests of src/net: a real Server and HttpClient (and raw sockets for misbehaving
// clients) in one process. Every server listens on port 0.
//
// SOVAI_NET_TEST_BIG_BYTES overrides the size of the streamed upload/download tests (default
// 1 GiB), e.g. for slow sanitizer builds.
#include "net/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "net/client.h"

#if defined(__SANITIZE_ADDRESS__)
// ASan keeps freed memory in a quarantine (256 MiB by default) that shows up as resident memory
// and would swamp the "streams in bounded memory" assertions. A 16 MiB quarantine still catches
// use-after-free of recently freed memory while keeping those assertions meaningful.
extern "C" const char* __asan_default_options() { return "quarantine_size_mb=16"; }
#endif

namespace sovai::net {
namespace {

using namespace std::chrono_literals;
using base::Result;
using base::Status;

// --- helpers --------------------------------------------------------------------------------

uint64_t BigBytes() {
  if (const char* v = std::getenv("SOVAI_NET_TEST_BIG_BYTES")) return std::strtoull(v, nullptr, 10);
  return uint64_t{1} << 30;
}

// Deterministic data: byte i of the stream is a function of i, so both ends can check it.
void Fill(uint64_t offset, char* buf, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint64_t x = offset + i;
    buf[i] = static_cast<char>((x * 2654435761u) >> 13);
  }
}

// FNV-1a over a stream.
struct Hasher {
  uint64_t h = 1469598103934665603ull;
  uint64_t n = 0;
  void Add(std::string_view d) {
    for (unsigned char c : d) h = (h ^ c) * 1099511628211ull;
    n += d.size();
  }
};

uint64_t ExpectedHash(uint64_t total) {
  Hasher h;
  std::vector<char> buf(1 << 20);
  for (uint64_t off = 0; off < total; off += buf.size()) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), total - off));
    Fill(off, buf.data(), n);
    h.Add(std::string_view(buf.data(), n));
  }
  return h.h;
}

uint64_t ProcStatusKb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::strtoull(line.c_str() + std::strlen(key), nullptr, 10);
  }
  return 0;
}

// Peak resident memory during a scope. Resets the kernel's high-water mark (VmHWM) through
// /proc/self/clear_refs when allowed, and also samples VmRSS every 5 ms as a fallback.
class PeakRss {
 public:
  PeakRss() {
    std::ofstream f("/proc/self/clear_refs");
    f << "5";
    f.close();
    hwm_reset_ = static_cast<bool>(f);
    start_kb_ = ProcStatusKb("VmRSS:");
    sampler_ = std::thread([this] {
      while (!stop_) {
        peak_kb_ = std::max<uint64_t>(peak_kb_, ProcStatusKb("VmRSS:"));
        std::this_thread::sleep_for(5ms);
      }
    });
  }
  ~PeakRss() { Stop(); }
  void Stop() {
    if (sampler_.joinable()) {
      stop_ = true;
      sampler_.join();
    }
  }
  // Growth of the resident set over the starting point, in MiB.
  double GrowthMiB() {
    Stop();
    uint64_t peak = peak_kb_;
    if (hwm_reset_) peak = std::max<uint64_t>(peak, ProcStatusKb("VmHWM:"));
    return (static_cast<double>(peak) - static_cast<double>(start_kb_)) / 1024.0;
  }
  bool hwm_reset() const { return hwm_reset_; }

 private:
  bool hwm_reset_ = false;
  uint64_t start_kb_ = 0;
  std::atomic<uint64_t> peak_kb_{0};
  std::atomic<bool> stop_{false};
  std::thread sampler_;
};

// A raw TCP connection for clients that misbehave on purpose.
class RawConn {
 public:
  // `receive_buffer_bytes` > 0 caps the socket's receive buffer (set before connecting, so the
  // window stays small): a client that does not read then stalls the server quickly.
  explicit RawConn(uint16_t port, int receive_buffer_bytes = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (receive_buffer_bytes > 0) {
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof receive_buffer_bytes);
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawConn() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }
  // Half-close: the server sees EOF, and can still answer.
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  bool Send(std::string_view s) {
    while (!s.empty()) {
      ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads until EOF or `timeout`; returns what arrived. `eof` tells whether the peer closed.
  std::string ReadAll(std::chrono::milliseconds timeout, bool* eof = nullptr,
                      std::string_view stop_after = {}) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    if (eof) *eof = false;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return out;
      char buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        if (eof) *eof = true;
        return out;
      }
      out.append(buf, static_cast<size_t>(n));
      if (!stop_after.empty() && out.find(stop_after) != std::string::npos) return out;
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

class HttpTest : public ::testing::Test {
 protected:
  void StartServer(Router router, ServerOptions opts = {}) {
    server_ = std::make_unique<Server>(std::move(router));
    opts.listen = "127.0.0.1:0";
    Status st = server_->Start(std::move(opts));
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_NE(server_->port(), 0);
  }
  ClientOptions ClientOpts() {
    ClientOptions o;
    o.host = "127.0.0.1";
    o.port = server_->port();
    return o;
  }
  // The server still answers a normal request on a new connection.
  void ExpectHealthy() {
    HttpClient c(ClientOpts());
    auto r = c.Get("/ping");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "pong");
  }
  static void AddPing(Router& r) {
    r.Get("/ping", [](Request&) { return Response::Text(200, "pong"); }, {.inline_handler = true});
  }
  // A request is counted once its response has been written, which can be just after the client
  // has read it: wait (bounded) until `requests` requests are counted.
  ServerStats StatsAfterCounting(uint64_t requests) {
    ServerStats s = server_->Stats();
    for (int i = 0; i < 500; ++i) {
      uint64_t counted = 0;
      for (const auto& rc : s.requests) counted += rc.count;
      if (counted >= requests) break;
      std::this_thread::sleep_for(10ms);
      s = server_->Stats();
    }
    return s;
  }
  std::unique_ptr<Server> server_;
};

// --- routing, basics ------------------------------------------------------------------------

TEST_F(HttpTest, RoutesParamsQueryAnd404And405) {
  Router r;
  AddPing(r);
  r.Get("/v1/jobs/{id}/logs", [](Request& req) {
    return Response::Text(200, std::string(*req.param("id")) + "|" +
                                   std::string(req.query("tail").value_or("-")) + "|" +
                                   std::string(req.raw_path()) + "|" + std::string(req.target()));
  });
  r.Put("/b/{bucket}/{key...}", [](Request& req) {
    return Response::Text(200, std::string(*req.param("bucket")) + "/" +
                                   std::string(*req.param("key")) + "|" +
                                   std::string(req.route_pattern()));
  });
  StartServer(std::move(r));
  HttpClient c(ClientOpts());
  auto res = c.Get("/v1/jobs/j%201/logs?tail=5&x=%2B");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->body, "j 1|5|/v1/jobs/j%201/logs|/v1/jobs/j%201/logs?tail=5&x=%2B");
  res = c.Put("/b/bkt/a/b%2Fc.txt", "data");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->body, "bkt/a/b/c.txt|/b/{bucket}/{key...}");
  res = c.Get("/nope");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(*res->headers.Get("Content-Type"), "application/problem+json");
  res = c.Delete("/v1/jobs/x/logs");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(*res->headers.Get("Allow"), "GET, HEAD");
  // Stats are keyed by pattern, not raw path.
  ServerStats s = StatsAfterCounting(4);
  bool found = false;
  for (const auto& rc : s.requests) {
    if (rc.pattern == "/v1/jobs/{id}/logs" && rc.method == "GET" && rc.status == 200) {
      found = rc.count == 1;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_GE(s.total_connections, 1u);
  EXPECT_GT(s.bytes_in, 0u);
  EXPECT_GT(s.bytes_out, 0u);
}

// RouteOptions::inline_if is asked on the I/O thread; a request it chooses (and that has no body)
// is handled on that same thread, any other on a worker.
TEST_F(HttpTest, InlineIfRunsTheRequestsItChoosesOnTheIoThread) {
  std::mutex mu;
  std::map<std::string, std::thread::id> asked_on, handled_on;
  Router r;
  RouteOptions options;
  options.inline_if = [&](const Request& req) {
    std::lock_guard lock(mu);
    asked_on[std::string(req.raw_path())] = std::this_thread::get_id();
    return req.raw_path() == "/inline" || req.raw_path() == "/inline-with-body";
  };
  r.SetFallback(
      [&](Request& req) {
        std::lock_guard lock(mu);
        handled_on[std::string(req.raw_path())] = std::this_thread::get_id();
        return Response::Text(200, "ok");
      },
      options);
  StartServer(std::move(r));
  HttpClient c(ClientOpts());
  for (const char* path : {"/inline", "/worker"}) {
    auto res = c.Get(path);
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->status, 200);
  }
  auto res = c.Put("/inline-with-body", "data");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);

  std::lock_guard lock(mu);
  ASSERT_TRUE(asked_on.count("/inline") && asked_on.count("/worker"));
  EXPECT_EQ(handled_on.at("/inline"), asked_on.at("/inline"));
  EXPECT_NE(handled_on.at("/worker"), asked_on.at("/worker"));
  // A request with a body is read by a worker whatever the predicate would say: it is not asked.
  EXPECT_EQ(asked_on.count("/inline-with-body"), 0u);
  EXPECT_NE(handled_on.at("/inline-with-body"), asked_on.at("/inline"));
}

TEST_F(HttpTest, TwoHundredConcurrentKeepAliveClients) {
  Router r;
  AddPing(r);
  r.Post("/echo", [](Request& req) {
    auto body = req.body().ReadAll();
    if (!body.ok()) return Response::Error(body.status());
    return Response::Text(200, *body);
  });
  StartServer(std::move(r));
  constexpr int kClients = 200;
  constexpr int kRequests = 5;
  std::atomic<int> ok{0};
  std::atomic<int> conns_reused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      HttpClient c(ClientOpts());
      for (int k = 0; k < kRequests; ++k) {
        std::string body = "client " + std::to_string(i) + " request " + std::to_string(k);
        auto res = (k % 2 == 0) ? c.Post("/echo", body) : c.Get("/ping");
        if (res.ok() && res->status == 200 && res->body == (k % 2 == 0 ? body : "pong")) ++ok;
      }
      ++conns_reused;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kClients * kRequests);
  // Keep-alive: one connection per client (not per request).
  EXPECT_LE(server_->Stats().total_connections, static_cast<uint64_t>(kClients) + 5);
}

TEST_F(HttpTest, UnusualStatusesAreCounted) {
  Router r;
  AddPing(r);
  r.Get("/odd", [](Request&) { return Response::Text(299, "odd"); }, {.inline_handler = true});
  r.Get("/bad", [](Request&) { return Response::Text(1000, "bad"); }, {.inline_handler = true});
  StartServer(std::move(r));
  HttpClient c(ClientOpts());
  auto res = c.Get("/odd");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 299);
  EXPECT_EQ(res->body, "odd");
  res = c.Get("/bad");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 500) << "an invalid status is answered 500";
  ASSERT_TRUE(c.Get("/ping").ok());
  // The stats count what the handler returned, sorted by (pattern, method, status).
  std::vector<std::string> rows;
  for (const auto& rc : StatsAfterCounting(3).requests) {
    rows.push_back(rc.pattern + " " + rc.method + " " + std::to_string(rc.status) + " " +
                   std::to_string(rc.count));
  }
  EXPECT_EQ(rows,
            (std::vector<std::string>{"/bad GET 1000 1", "/odd GET 299 1", "/ping GET 200 1"}));
}

// --- big responses, write timeouts ----------------------------------------------------------

TEST_F(HttpTest, LargeFixedResponseAndKeepAlive) {
  // Larger than any socket buffer: the server's direct send takes part of it, the rest goes
  // out asynchronously, and the connection is reused afterwards.
  const std::string big = [] {
    std::string b(32 << 20, '\0');
    Fill(0, b.data(), b.size());
    return b;
  }();
  Router r;
  AddPing(r);
  r.Get("/big", [&](Request&) { return Response::Text(200, big); }, {.inline_handler = true});
  StartServer(std::move(r));
  HttpClient c(ClientOpts());
  for (int i = 0; i < 2; ++i) {
    auto res = c.Get("/big");
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->body.size(), big.size());
    EXPECT_TRUE(res->body == big);
    ASSERT_TRUE(c.Get("/ping").ok());
  }
  EXPECT_EQ(server_->Stats().total_connections, 1u);
}

TEST_F(HttpTest, ClientThatStopsReadingIsDroppedAtWriteTimeout) {
  std::promise<Status> writer_end;
  Router r;
  AddPing(r);
  r.Get("/forever", [&](Request&) {
    return Response::Stream(200, "text/plain", [&](BodyWriter& out) -> Status {
      const std::string piece(64 << 10, 'x');
      for (;;) {
        Status st = out.Write(piece);
        if (!st.ok()) {
          writer_end.set_value(st);
          return st;
        }
      }
    });
  });
  r.Get("/big", [](Request&) { return Response::Text(200, std::string(64 << 20, 'y')); },
        {.inline_handler = true});
  ServerOptions o;
  o.write_timeout = 1s;
  StartServer(std::move(r), o);
  // A streamed body: the producer's Write fails with DeadlineExceeded.
  RawConn streamed(server_->port(), 64 << 10);
  ASSERT_TRUE(streamed.Send("GET /forever HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto fut = writer_end.get_future();
  ASSERT_EQ(fut.wait_for(20s), std::future_status::ready);
  Status st = fut.get();
  EXPECT_EQ(st.code(), base::StatusCode::kDeadlineExceeded) << st;
  // A fixed body: the connection is closed with the body cut short.
  RawConn fixed(server_->port(), 64 << 10);
  ASSERT_TRUE(fixed.Send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string got = fixed.ReadAll(10s, nullptr, "\r\n\r\n");  // the response has started
  ASSERT_EQ(got.substr(0, 12), "HTTP/1.1 200") << got.substr(0, 200);
  for (int i = 0; i < 200 && server_->Stats().open_connections > 0; ++i) {
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(server_->Stats().open_connections, 0u) << "the stalled connections are closed";
  bool eof = false;
  got += fixed.ReadAll(10s, &eof);
  EXPECT_TRUE(eof);
  EXPECT_LT(got.size(), size_t{64} << 20);
  ExpectHealthy();
}

TEST_F(HttpTest, SlowHandlerOutlivesSocketTimeouts) {
  // Socket timeouts bound socket operations only, not a handler that takes its time.
  Router r;
  AddPing(r);
  r.Get("/slow", [](Request&) {
    std::this_thread::sleep_for(1200ms);
    return Response::Text(200, "done");
  });
  ServerOptions o;
  o.idle_timeout = 400ms;
  o.header_timeout = 400ms;
  o.read_timeout = 400ms;
  o.write_timeout = 400ms;
  StartServer(std::move(r), o);
  RawConn c(server_->port());
  ASSERT_TRUE(c.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string out = c.ReadAll(10s, nullptr, "done");
  EXPECT_EQ(out.substr(0, 12), "HTTP/1.1 200") << out;
  ASSERT_TRUE(c.Send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"));
  out = c.ReadAll(10s, nullptr, "pong");
  EXPECT_NE(out.find("pong"), std::string::npos) << "same connection, next request: " << out;
}

// --- big streams ----------------------------------------------------------------------------

TEST_F(HttpTest, StreamedUploadOf1GiBInBoundedMemory) {
  const uint64_t total = BigBytes();
  Router r;
  AddPing(r);
  r.Put("/upload",
        [](Request& req) {
          Hasher h;
          auto buf = std::make_unique<char[]>(1 << 20);
          for (;;) {
            auto n = req.body().Read(buf.get(), 1 << 20);
            if (!n.ok()) return Response::Error(n.status());
            if (*n == 0) break;
            h.Add(std::string_view(buf.get(), *n));
          }
          return Response::Text(200, std::to_string(h.n) + " " + std::to_string(h.h));
        },
        {.max_body_bytes = kMaxBodyBytesCeiling});
  StartServer(std::move(r));
  const uint64_t expected = ExpectedHash(total);

  PeakRss rss;
  HttpClient c(ClientOpts());
  ClientRequest req;
  req.method = "PUT";
  req.target = "/upload";
  uint64_t sent = 0;
  req.source = [&](char* buf, size_t n) -> Result<size_t> {
    n = static_cast<size_t>(std::min<uint64_t>(n, total - sent));
    Fill(sent, buf, n);
    sent += n;
    return n;
  };
  req.source_length = total;
  auto res = c.Send(req);
  double growth = rss.GrowthMiB();
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->body, std::to_string(total) + " " + std::to_string(expected));
  EXPECT_LT(growth, 64.0) << "resident memory grew by " << growth << " MiB (hwm reset "
                          << rss.hwm_reset() << ")";
  std::printf("upload of %llu bytes: RSS growth %.1f MiB\n", static_cast<unsigned long long>(total),
              growth);
}

TEST_F(HttpTest, StreamedDownloadOf1GiBInBoundedMemory) {
  const uint64_t total = BigBytes();
  Router r;
  AddPing(r);
  r.Get("/download", [total](Request& req) {
    bool chunked = req.query("chunked").has_value();
    return Response::Stream(
        200, "application/octet-stream",
        [total](BodyWriter& out) -> Status {
          std::vector<char> buf(kStreamChunkBytes);
          for (uint64_t off = 0; off < total; off += buf.size()) {
            size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), total - off));
            Fill(off, buf.data(), n);
            SOVAI_RETURN_IF_ERROR(out.Write(std::string_view(buf.data(), n)));
          }
          return Status();
        },
        chunked ? std::nullopt : std::optional<uint64_t>(total));
  });
  StartServer(std::move(r));
  const uint64_t expected = ExpectedHash(total);
  for (const char* target : {"/download", "/download?chunked"}) {
    PeakRss rss;
    HttpClient c(ClientOpts());
    ClientRequest req;
    req.target = target;
    Hasher h;
    auto res = c.Send(req, [&](std::string_view piece) {
      h.Add(piece);
      return Status();
    });
    double growth = rss.GrowthMiB();
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(h.n, total) << target;
    EXPECT_EQ(h.h, expected) << target;
    EXPECT_LT(growth, 64.0) << target << ": resident memory grew by " << growth << " MiB";
    std::printf("%s of %llu bytes: RSS growth %.1f MiB\n", target,
                static_cast<unsigned long long>(total), growth);
    if (std::string_view(target) == "/download?chunked") {
      EXPECT_EQ(*res->headers.Get("Transfer-Encoding"), "chunked");
    } else {
      EXPECT_EQ(*res->headers.Get("Content-Length"), std::to_string(total));
    }
  }
}

TEST_F(HttpTest, ChunkedRequestBody) {
  Router r;
  AddPing(r);
  r.Post("/sum",
         [](Request& req) {
           auto body = req.body().ReadAll();
           if (!body.ok()) return Response::Error(body.status());
           return Response::Text(200,
                                 std::to_string(body->size()) + (req.chunked() ? " chunked" : ""));
         },
         {.max_body_bytes = 4 << 20});
  StartServer(std::move(r));
  HttpClient c(ClientOpts());
  ClientRequest req;
  req.method = "POST";
  req.target = "/sum";
  uint64_t sent = 0;
  const uint64_t total = 3'000'001;
  req.source = [&](char* buf, size_t n) -> Result<size_t> {
    n = static_cast<size_t>(std::min<uint64_t>(std::min<size_t>(n, 100'000), total - sent));
    Fill(sent, buf, n);
    sent += n;
    return n;
  };
  auto res = c.Send(req);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->body, "3000001 chunked");
  // Same connection, next request.
  res = c.Get("/ping");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->body, "pong");
}

// --- limits and misbehaving clients ---------------------------------------------------------

TEST_F(HttpTest, MalformedRequestLineGets400AndClose) {
  Router r;
  AddPing(r);
  StartServer(std::move(r));
  for (std::string_view bad :
       {"GARBAGE\r\n\r\n", "GET /x HTTP/1.1\r\nNo colon here\r\n\r\n",
        "GET relative HTTP/1.1\r\n\r\n", "\x01\x02\x03 / HTTP/1.1\r\n\r\n"}) {
    RawConn c(server_->port());
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.Send(bad));
    bool eof = false;
    std::string out = c.ReadAll(5s, &eof);
    EXPECT_EQ(out.substr(0, 12), "HTTP/1.1 400") << bad << " → " << out;
    EXPECT_TRUE(eof) << "connection must close after a malformed request";
  }
  ExpectHealthy();
}

TEST_F(HttpTest, HalfCloseMidHeadGets400) {
  Router r;
  AddPing(r);
  StartServer(std::move(r));
  RawConn c(server_->port());
  ASSERT_TRUE(c.Send("GET /ping HTTP/1.1\r\nHost: x\r\n"));  // no blank line
  c.ShutdownWrite();
  bool eof = false;
  std::string out = c.ReadAll(5s, &eof);
  EXPECT_EQ(out.substr(0, 12), "HTTP/1.1 400") << out;
  EXPECT_TRUE(eof);
  ExpectHealthy();
}

TEST_F(HttpTest, OversizeHeadersAndTooManyHeadersGet431) {
  Router r;
  AddPing(r);
  ServerOptions o;
  o.max_header_bytes = 4096;
  o.max_header_count = 20;
  StartServer(std::move(r), o);
  {
    RawConn c(server_->port());
    ASSERT_TRUE(
        c.Send("GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(8000, 'a') + "\r\n\r\n"));
    bool eof = false;
    std::string out = c.ReadAll(5s, &eof);
    EXPECT_EQ(out.substr(0, 12), "HTTP/1.1 431") << out;
    EXPECT_NE(out.find("4096"), std::string::npos) << "the message names the limit: " << out;
  }
  {
    RawConn c(server_->port());
    std::string req = "GET /ping HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 25; ++i) req += "X-H" + std::to_string(i) + ": v\r\n";
    ASSERT_TRUE(c.Send(req + "\r\n"));
    std::string out = c.ReadAll(5s);
    EXPECT_EQ(out.substr(0, 12), "HTTP/1.1 431") << out;
    EXPECT_NE(out.find("limit is 20"), std::string::npos) << out;
  }
  ExpectHealthy();
}

TEST_F(HttpTest, BodyOverRouteLimitGets413) {
  Router r;
  AddPing(r);
  std::atomic<int> handler_errors{0};
  r.Post("/small",
         [&](Request& req) {
           auto body = req.body().ReadAll();
           if (!body.ok()) {
             ++handler_errors;
             return Response::Error(body.status());
           }
           return Response::Text(200, "ok");
         },
         {.max_body_bytes = 1000});
  r.Post("/small-inline", [](Request& req) { return Response::Text(200, "ok"); },
         {.inline_handler = true, .max_body_bytes = 1000});
  StartServer(std::move(r));

  // By Content-Length: rejected before any body byte is sent.
  for (const char* target : {"/small", "/small-inline"}) {
    RawConn c(server_->port());
    ASSERT_TRUE(c.Send(std::string("POST ") + target +
                       " HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"));
    bool eof = false;
    std::string out = c.ReadAll(5s, &eof);
    EXPECT_EQ(out.substr(0, 12), "HTTP/1.1 413") << out;
    EXPECT_NE(out.find("limit of 1000 bytes"), std::string::npos) << out;
    EXPECT_TRUE(eof);
  }
  // By a chunked body that grows over the limit.
  for (const char* target : {"/small", "/small-inline"}) {
    HttpClient c(ClientOpts());
    ClientRequest req;
    req.method = "POST";
    req.target = target;
    int pieces = 0;
    req.source = [&](char* buf, size_t n) -> Result<size_t> {
      if (pieces++ == 10) return size_t{0};
      std::memset(buf, 'x', 500);
      return size_t{500};
    };
    auto res = c.Send(req);
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->status, 413) << target << " " << res->body;
    EXPECT_NE(res->body.find("limit of 1000 bytes"), std::string::npos) << res->body;
  }
  EXPECT_EQ(handler_errors.load(), 1);
  ExpectHealthy();
}

TEST_F(HttpTest, OneBytePerSecondClientIsDroppedAtHeaderTimeout) {
  Router r;
  AddPing(r);
  ServerOptions o;
  o.header_timeout = 2s;
  StartServer(std::move(r), o);
  RawConn c(server_->port());
  auto start = std::chrono::steady_clock::now();
  std::string req = "GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaa\r\n\r\n";
  bool dropped = false;
  for (char ch : req) {
    if (!c.Send(std::string_view(&ch, 1))) {
      dropped = true;
      break;
    }
    bool eof = false;
    std::string got = c.ReadAll(1s, &eof);
    if (eof) {
      dropped = true;
      break;
    }
    ASSERT_TRUE(got.empty()) << got;
  }
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(dropped);
  EXPECT_LT(elapsed, 5s);
  ExpectHealthy();
}

TEST_F(HttpTest, SlowBodyClientIsDropped) {
  Router r;
  AddPing(r);
  std::promise<Status> handler_saw;
  r.Put("/slow", [&](Request& req) {
    auto body = req.body().ReadAll();
    handler_saw.set_value(body.status());
    return Response::Text(200, "ok");
  });
  ServerOptions o;
  o.read_timeout = 2s;
  o.min_body_bytes_per_s = 1024;
  StartServer(std::move(r), o);
  RawConn c(server_->port());
  ASSERT_TRUE(c.Send("PUT /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"));
  auto fut = handler_saw.get_future();
  auto start = std::chrono::steady_clock::now();
  bool eof = false;
  for (int i = 0; i < 30 && !eof; ++i) {  // one byte per 1/2 s: 2 bytes/s
    if (!c.Send("x")) break;
    c.ReadAll(500ms, &eof);
  }
  ASSERT_EQ(fut.wait_for(10s), std::future_status::ready);
  Status st = fut.get();
  EXPECT_EQ(st.code(), base::StatusCode::kDeadlineExceeded) << st;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
  ExpectHealthy();
}

TEST_F(HttpTest, ClientDisconnectMidBody) {
  Router r;
  AddPing(r);
  std::promise<Status> handler_saw;
  r.Put("/up",
        [&](Request& req) {
          auto n = req.body().Discard();
          handler_saw.set_value(n.status());
          return Response::Text(200, "ok");
        },
        {.max_body_bytes = 100 << 20});
  StartServer(std::move(r));
  {
    RawConn c(server_->port());
    ASSERT_TRUE(c.Send("PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"));
    ASSERT_TRUE(c.Send(std::string(1'000'000, 'z')));
  }  // closed mid-body
  auto fut = handler_saw.get_future();
  ASSERT_EQ(fut.wait_for(10s), std::future_status::ready);
  Status st = fut.get();
  EXPECT_EQ(st.code(), base::StatusCode::kUnavailable) << st;
  ExpectHealthy();
}

TEST_F(HttpTest, HandlerThrowingGives500AndServerKeepsServing) {
  Router r;
  AddPing(r);
  r.Get("/throw", [](Request&) -> Response { throw std::runtime_error("boom"); });
  r.Get("/throw-inline", [](Request&) -> Response { throw std::runtime_error("boom"); },
        {.inline_handler = true});
  r.Get("/throw-stream", [](Request&) {
    return Response::Stream(200, "text/plain", [](BodyWriter& out) -> Status {
      SOVAI_RETURN_IF_ERROR(out.Write("partial"));
      throw std::runtime_error("mid-stream");
    });
  });
  StartServer(std::move(r));
  HttpClient c(ClientOpts());
  for (const char* t : {"/throw", "/throw-inline"}) {
    auto res = c.Get(t);
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->status, 500);
    EXPECT_NE(res->body.find("boom"), std::string::npos);
  }
  auto res = c.Get("/throw-stream");
  EXPECT_FALSE(res.ok()) << "a stream that fails midway must not look complete";
  ExpectHealthy();
}

TEST_F(HttpTest, HeadHasHeadersButNoBody) {
  Router r;
  AddPing(r);
  r.Get("/doc", [](Request&) { return Response::Text(200, "hello world"); });
  r.Get("/stream", [](Request&) {
    return Response::Stream(
        200, "text/plain", [](BodyWriter& out) { return out.Write("abc"); }, 3);
  });
  r.Add("HEAD", "/object", [](Request&) {
    Response res = Response::Empty(200);
    res.headers.Set("Content-Length", "12345");  // S3-style HEAD: the object's size
    return res;
  });
  StartServer(std::move(r));
  RawConn c(server_->port());
  ASSERT_TRUE(
      c.Send("HEAD /doc HTTP/1.1\r\nHost: x\r\n\r\nHEAD /stream HTTP/1.1\r\nHost: x\r\n\r\n"
             "HEAD /object HTTP/1.1\r\nHost: x\r\n\r\nGET /ping HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string out = c.ReadAll(5s, nullptr, "pong");
  EXPECT_NE(out.find("Content-Length: 11\r\n"), std::string::npos) << out;
  EXPECT_NE(out.find("Content-Length: 3\r\n"), std::string::npos) << out;
  EXPECT_NE(out.find("Content-Length: 12345\r\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("hello world"), std::string::npos) << out;
  EXPECT_EQ(out.find("abc"), std::string::npos) << out;
  EXPECT_NE(out.find("pong"), std::string::npos) << "pipelined GET after HEADs: " << out;
}

TEST_F(HttpTest, ExpectContinue) {
  Router r;
  AddPing(r);
  r.Put("/obj",
        [](Request& req) {
          auto body = req.body().ReadAll();
          if (!body.ok()) return Response::Error(body.status());
          return Response::Text(200, "got " + std::to_string(body->size()));
        },
        {.max_body_bytes = 1 << 20});
  r.Put("/denied", [](Request&) { return Response::Error(403, "no"); });
  StartServer(std::move(r));
  {
    // The server sends 100 Continue only once the handler reads.
    RawConn c(server_->port());
    ASSERT_TRUE(
        c.Send("PUT /obj HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
               "Expect: 100-continue\r\n\r\n"));
    std::string out = c.ReadAll(3s, nullptr, "\r\n\r\n");
    EXPECT_EQ(out, "HTTP/1.1 100 Continue\r\n\r\n");
    ASSERT_TRUE(c.Send("hello"));
    out = c.ReadAll(3s, nullptr, "got 5");
    EXPECT_EQ(out.substr(0, 12), "HTTP/1.1 200") << out;
  }
  HttpClient c(ClientOpts());
  ClientRequest req;
  req.method = "PUT";
  req.target = "/obj";
  req.body = std::string(1000, 'a');
  req.expect_continue = true;
  auto res = c.Send(req);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->body, "got 1000");
  EXPECT_FALSE(res->body_not_sent);
  // Rejected early (limit by Content-Length, or the handler refusing): the body is never sent.
  req.body = std::string(2 << 20, 'a');
  res = c.Send(req);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 413);
  EXPECT_TRUE(res->body_not_sent);
  req.target = "/denied";
  req.body = "small";
  res = c.Send(req);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 403);
  EXPECT_TRUE(res->body_not_sent);
  ExpectHealthy();
}

TEST_F(HttpTest, ServerSentEvents) {
  Router r;
  AddPing(r);
  std::promise<Status> writer_end;
  r.Get("/events", [](Request&) {
    return Response::Sse([](SseWriter& sse) -> Status {
      SOVAI_RETURN_IF_ERROR(sse.WriteComment());
      for (int i = 0; i < 5; ++i) {
        SOVAI_RETURN_IF_ERROR(
            sse.WriteEvent("line " + std::to_string(i) + "\nsecond", "log", std::to_string(i)));
      }
      return Status();
    });
  });
  r.Get("/forever", [&](Request&) {
    return Response::Sse([&](SseWriter& sse) -> Status {
      for (int i = 0;; ++i) {
        Status st = sse.WriteEvent(std::string(1000, 'x'));
        if (!st.ok()) {
          writer_end.set_value(st);  // the producer learns the client left
          return st;
        }
        std::this_thread::sleep_for(1ms);
      }
    });
  });
  StartServer(std::move(r));
  HttpClient c(ClientOpts());
  std::vector<SseEvent> events;
  ClientRequest req;
  req.target = "/events";
  auto res = c.ReadSse(req, [&](const SseEvent& e) {
    events.push_back(e);
    return true;
  });
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(*res->headers.Get("Content-Type"), "text/event-stream");
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[3].event, "log");
  EXPECT_EQ(events[3].id, "3");
  EXPECT_EQ(events[3].data, "line 3\nsecond");
  // A client that stops reading makes the producer's Write fail.
  req.target = "/forever";
  int seen = 0;
  res = c.ReadSse(req, [&](const SseEvent&) { return ++seen < 3; });
  ASSERT_TRUE(res.ok()) << res.status();
  auto fut = writer_end.get_future();
  ASSERT_EQ(fut.wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(fut.get().ok());
  ExpectHealthy();
}

TEST_F(HttpTest, FileRangeResponse) {
  auto path =
      std::filesystem::temp_directory_path() / ("sovai_net_file_" + std::to_string(getpid()));
  std::string content(1'000'000, '\0');
  Fill(0, content.data(), content.size());
  {
    std::ofstream f(path, std::ios::binary);
    f << content;
  }
  Router r;
  AddPing(r);
  r.Get("/file", [&](Request& req) {
    uint64_t size = std::filesystem::file_size(path);
    auto range = ParseRange(req.header("Range").value_or(""), size);
    if (!range.ok()) {
      Response res = Response::Error(416, range.status().message());
      res.headers.Set("Content-Range", "bytes */" + std::to_string(size));
      return res;
    }
    uint64_t off = *range ? (*range)->offset : 0;
    uint64_t len = *range ? (*range)->length : size;
    auto res = Response::File(path.string(), off, len);
    if (!res.ok()) return Response::Error(res.status());
    if (*range) {
      res->status = 206;
      res->headers.Set("Content-Range", "bytes " + std::to_string(off) + "-" +
                                            std::to_string(off + len - 1) + "/" +
                                            std::to_string(size));
    }
    return std::move(*res);
  });
  StartServer(std::move(r));
  HttpClient c(ClientOpts());
  ClientRequest req;
  req.target = "/file";
  req.headers.Set("Range", "bytes=1000-300999");
  auto res = c.Send(req);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 206);
  EXPECT_EQ(*res->headers.Get("Content-Range"), "bytes 1000-300999/1000000");
  EXPECT_EQ(res->body, content.substr(1000, 300000));
  req.headers.Set("Range", "bytes=2000000-");
  res = c.Send(req);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 416);
  req.headers.Remove("Range");
  res = c.Send(req);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->body, content);
  EXPECT_EQ(Response::File("/nonexistent/file").status().code(), base::StatusCode::kNotFound);
  EXPECT_EQ(Response::File(path.string(), 2'000'000).status().code(),
            base::StatusCode::kOutOfRange);
  std::filesystem::remove(path);
}

TEST_F(HttpTest, GracefulShutdownFinishesInFlightRequest) {
  Router r;
  AddPing(r);
  std::atomic<bool> started{false};
  r.Get("/slow", [&](Request&) {
    started = true;
    std::this_thread::sleep_for(700ms);
    return Response::Text(200, "finished");
  });
  StartServer(std::move(r));
  uint16_t port = server_->port();
  // An idle keep-alive connection must not hold the shutdown up.
  HttpClient idle(ClientOpts());
  ASSERT_TRUE(idle.Get("/ping").ok());
  auto in_flight = std::async(std::launch::async, [&] {
    HttpClient c(ClientOpts());
    return c.Get("/slow");
  });
  while (!started) std::this_thread::sleep_for(5ms);
  auto t0 = std::chrono::steady_clock::now();
  server_->Shutdown(10s);
  auto took = std::chrono::steady_clock::now() - t0;
  auto res = in_flight.get();
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "finished");
  EXPECT_EQ(*res->headers.Get("Connection"), "close");
  EXPECT_LT(took, 5s);
  ClientOptions o;
  o.port = port;
  HttpClient after(o);
  EXPECT_EQ(after.Get("/ping").status().code(), base::StatusCode::kUnavailable);
}

TEST_F(HttpTest, ShutdownGraceEndsStuckStreams) {
  Router r;
  AddPing(r);
  r.Get("/forever", [](Request&) {
    return Response::Stream(200, "text/plain", [](BodyWriter& out) -> Status {
      for (;;) {
        SOVAI_RETURN_IF_ERROR(out.Write("tick\n"));
        std::this_thread::sleep_for(10ms);
      }
    });
  });
  StartServer(std::move(r));
  auto reader = std::async(std::launch::async, [&] {
    HttpClient c(ClientOpts());
    ClientRequest req;
    req.target = "/forever";
    return c.Send(req, [](std::string_view) { return Status(); });
  });
  std::this_thread::sleep_for(200ms);
  auto t0 = std::chrono::steady_clock::now();
  server_->Shutdown(300ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_FALSE(reader.get().ok());  // truncated stream
}

TEST_F(HttpTest, MaxConnections) {
  Router r;
  AddPing(r);
  ServerOptions o;
  o.max_connections = 2;
  StartServer(std::move(r), o);
  HttpClient a(ClientOpts()), b(ClientOpts());
  ASSERT_TRUE(a.Get("/ping").ok());
  ASSERT_TRUE(b.Get("/ping").ok());
  {
    RawConn c(server_->port());
    bool eof = false;
    std::string out = c.ReadAll(3s, &eof);
    EXPECT_EQ(out.substr(0, 12), "HTTP/1.1 503") << out;
    EXPECT_TRUE(eof);
  }
  EXPECT_GE(server_->Stats().rejected_connections, 1u);
  EXPECT_EQ(server_->Stats().open_connections, 2u);
  a.Close();
  for (int i = 0; i < 100 && server_->Stats().open_connections > 1; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ExpectHealthy();
}

TEST_F(HttpTest, IdleKeepAliveConnectionIsClosed) {
  Router r;
  AddPing(r);
  ServerOptions o;
  o.idle_timeout = 500ms;
  StartServer(std::move(r), o);
  RawConn c(server_->port());
  ASSERT_TRUE(c.Send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"));
  bool eof = false;
  std::string out = c.ReadAll(3s, &eof);
  EXPECT_NE(out.find("pong"), std::string::npos);
  EXPECT_TRUE(eof) << "idle connection must be closed after idle_timeout";
  // The client reconnects transparently after the server closed its idle connection.
  HttpClient client(ClientOpts());
  ASSERT_TRUE(client.Get("/ping").ok());
  std::this_thread::sleep_for(800ms);
  auto res = client.Get("/ping");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->body, "pong");
}

TEST_F(HttpTest, Http10AndConnectionClose) {
  Router r;
  AddPing(r);
  r.Get("/chunks", [](Request&) {
    return Response::Stream(200, "text/plain", [](BodyWriter& out) { return out.Write("body"); });
  });
  StartServer(std::move(r));
  {
    RawConn c(server_->port());
    ASSERT_TRUE(c.Send("GET /ping HTTP/1.0\r\n\r\n"));
    bool eof = false;
    std::string out = c.ReadAll(3s, &eof);
    EXPECT_EQ(out.substr(0, 12), "HTTP/1.0 200") << out;
    EXPECT_TRUE(eof);
  }
  {
    RawConn c(server_->port());
    ASSERT_TRUE(c.Send("GET /chunks HTTP/1.0\r\n\r\n"));
    bool eof = false;
    std::string out = c.ReadAll(3s, &eof);
    EXPECT_EQ(out.find("chunked"), std::string::npos) << out;
    EXPECT_EQ(out.substr(out.size() - 4), "body");
    EXPECT_TRUE(eof);
  }
  {
    RawConn c(server_->port());
    ASSERT_TRUE(c.Send("GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    bool eof = false;
    std::string out = c.ReadAll(3s, &eof);
    EXPECT_NE(out.find("Connection: close"), std::string::npos) << out;
    EXPECT_TRUE(eof);
  }
}

TEST_F(HttpTest, TlsRoundTrip) {
  auto dir = std::filesystem::temp_directory_path() / ("sovai_tls_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string cert = (dir / "cert.pem").string();
  std::string key = (dir / "key.pem").string();
  std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
      key + " -out " + cert + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "openssl CLI unavailable";
  Router r;
  AddPing(r);
  r.Post("/echo", [](Request& req) {
    auto body = req.body().ReadAll();
    return Response::Text(200, (req.is_tls() ? "tls:" : "plain:") + body.value_or("?"));
  });
  ServerOptions o;
  o.tls_cert_file = cert;
  o.tls_key_file = key;
  StartServer(std::move(r), o);
  ClientOptions co = ClientOpts();
  co.tls = true;
  co.ca_file = cert;
  HttpClient c(co);
  for (int i = 0; i < 3; ++i) {
    auto res = c.Post("/echo", "secret " + std::to_string(i));
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->body, "tls:secret " + std::to_string(i));
  }
  EXPECT_EQ(server_->Stats().total_connections, 1u);  // keep-alive over TLS
  // Without the CA the certificate is rejected.
  ClientOptions bad = ClientOpts();
  bad.tls = true;
  HttpClient untrusted(bad);
  EXPECT_FALSE(untrusted.Get("/ping").ok());
  // Plain HTTP to a TLS port fails cleanly, and the server keeps serving.
  HttpClient plain(ClientOpts());
  EXPECT_FALSE(plain.Get("/ping").ok());
  auto res = c.Get("/ping");
  ASSERT_TRUE(res.ok()) << res.status();
  // Bad TLS files are a clear Start error.
  Server s2{Router()};
  ServerOptions o2;
  o2.tls_cert_file = (dir / "missing.pem").string();
  o2.tls_key_file = key;
  EXPECT_EQ(s2.Start(o2).code(), base::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST_F(HttpTest, ClientTimeoutsAndConnectionRefused) {
  Router r;
  AddPing(r);
  r.Get("/sleep", [](Request&) {
    std::this_thread::sleep_for(1500ms);
    return Response::Text(200, "late");
  });
  StartServer(std::move(r));
  ClientOptions o = ClientOpts();
  o.read_timeout = 300ms;
  HttpClient c(o);
  auto t0 = std::chrono::steady_clock::now();
  auto res = c.Get("/sleep");
  EXPECT_EQ(res.status().code(), base::StatusCode::kDeadlineExceeded) << res.status();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1200ms);
  res = c.Get("/ping");  // the client recovers on a new connection
  ASSERT_TRUE(res.ok()) << res.status();

  // A port nobody listens on: find one by binding and closing.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  ClientOptions refused;
  refused.port = ntohs(a.sin_port);
  HttpClient rc(refused);
  res = rc.Get("/");
  EXPECT_EQ(res.status().code(), base::StatusCode::kUnavailable) << res.status();
  EXPECT_NE(res.status().message().find("refused"), std::string::npos) << res.status();

  // Buffered bodies over the client limit.
  ClientOptions small = ClientOpts();
  small.max_body_bytes = 2;
  HttpClient sc(small);
  EXPECT_EQ(sc.Get("/ping").status().code(), base::StatusCode::kResourceExhausted);
}

TEST_F(HttpTest, AccessLogAndCustomErrorRenderer) {
  Router r;
  AddPing(r);
  std::mutex mu;
  std::vector<std::string> log;
  ServerOptions o;
  o.access_log = [&](const AccessLogEntry& e) {
    std::lock_guard lock(mu);
    log.push_back(std::string(e.method) + " " + std::string(e.pattern) + " " +
                  std::to_string(e.status));
  };
  o.error_renderer = [](const Request*, Response& res) {
    res.headers.Set("Content-Type", "application/xml");
    res.body = "<Error><Message>" + res.error_message.value_or("") + "</Message></Error>";
  };
  StartServer(std::move(r), o);
  HttpClient c(ClientOpts());
  ASSERT_TRUE(c.Get("/ping").ok());
  auto res = c.Get("/missing");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(res->body.rfind("<Error>", 0), 0u) << res->body;
  server_->Shutdown(1s);
  std::lock_guard lock(mu);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0], "GET /ping 200");
  EXPECT_EQ(log[1], "GET  404");
}

}  // namespace
}  // namespace sovai::net
