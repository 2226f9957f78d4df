// HttpClient against a real Server on a loopback port: the response head before the body (pushed
// to callbacks, or pulled), when a connection may carry the next request, and Abort() from another
// thread. (The rest of the client is covered by tests/integration.)
#include "net/client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/notification.h"
#include "net/http.h"

namespace sovai::net {
namespace {

using base::Status;
using namespace std::chrono_literals;

// Runs a request on another thread. The destructor aborts the client and waits, so a failing
// test leaves no thread behind.
class SendInBackground {
 public:
  SendInBackground(HttpClient& client, std::function<base::Result<ClientResponse>()> send)
      : client_(client), future_(std::async(std::launch::async, std::move(send))) {}
  ~SendInBackground() {
    if (future_.valid()) {
      client_.Abort();
      future_.wait();
    }
  }
  // The result, or nullopt when the request is still running after `timeout`.
  std::optional<base::Result<ClientResponse>> Wait(std::chrono::milliseconds timeout) {
    if (future_.wait_for(timeout) != std::future_status::ready) return std::nullopt;
    return future_.get();
  }

 private:
  HttpClient& client_;
  std::future<base::Result<ClientResponse>> future_;
};

class ClientTest : public ::testing::Test {
 protected:
  ~ClientTest() override {
    release_.Notify();  // handlers still waiting return at once...
    server_.reset();    // ...and are gone before the state they use
  }
  void WriterEnded(Status st) {
    {
      std::lock_guard lock(mu_);
      writer_status_ = std::move(st);
    }
    writer_ended_.Notify();
  }
  Status writer_status() {
    std::lock_guard lock(mu_);
    return writer_status_;
  }

  void StartServer(Router router) {
    router.Get("/ping", [](Request&) { return Response::Text(200, "pong"); },
               {.inline_handler = true});
    server_ = std::make_unique<Server>(std::move(router));
    Status st = server_->Start({.listen = "127.0.0.1:0"});
    ASSERT_TRUE(st.ok()) << st;
  }
  ClientOptions Options() {
    ClientOptions o;
    o.port = server_->port();
    return o;
  }
  // What handlers share with the test; declared before server_, so they outlive it.
  base::Notification release_;       // handlers that wait, wait for this
  base::Notification head_seen_;     // the client reported a response head
  base::Notification writer_ended_;  // a streaming handler's writer returned, with writer_status_
  std::mutex mu_;
  Status writer_status_;  // guarded by mu_
  std::atomic<int> calls_{0};
  std::unique_ptr<Server> server_;
};

TEST_F(ClientTest, HeadArrivesBeforeTheBody) {
  Router r;
  r.Get("/slow", [this](Request&) {
    Response res = Response::Stream(200, "text/plain", [this](BodyWriter& out) -> Status {
      // The body is written only once the client has reported the head: a client that waited
      // for the body before reporting the head would get "timeout" instead.
      bool seen = head_seen_.WaitFor(10s);
      return out.Write(seen ? "after-head" : "timeout");
    });
    res.headers.Set("X-Test", "yes");
    return res;
  });
  StartServer(std::move(r));
  HttpClient c(Options());
  ClientRequest req;
  req.target = "/slow";
  std::vector<std::string> events;
  std::string body;
  auto res = c.Send(
      req,
      [&](const ClientResponse& head) -> Status {
        events.push_back("head " + std::to_string(head.status));
        EXPECT_EQ(head.headers.Get("X-Test").value_or(""), "yes");
        EXPECT_TRUE(head.body.empty());
        head_seen_.Notify();
        return Status();
      },
      [&](std::string_view piece) -> Status {
        if (events.empty() || events.back() != "body") events.push_back("body");
        body.append(piece);
        return Status();
      });
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(res->body.empty());
  EXPECT_EQ(body, "after-head");
  EXPECT_EQ(events, (std::vector<std::string>{"head 200", "body"}));
  // The connection stays usable.
  auto again = c.Get("/ping");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->body, "pong");
}

TEST_F(ClientTest, HeadCallbackErrorAbortsTheRequest) {
  Router r;
  r.Get("/endless", [this](Request&) {
    return Response::Stream(200, "text/plain", [this](BodyWriter& out) -> Status {
      Status st;
      for (int i = 0; i < 100'000 && st.ok(); ++i) {
        st = out.Write(std::string(4096, 'x'));
        std::this_thread::sleep_for(1ms);
      }
      WriterEnded(st);
      return st;
    });
  });
  StartServer(std::move(r));
  HttpClient c(Options());
  ClientRequest req;
  req.target = "/endless";
  int heads = 0;
  int pieces = 0;
  auto res = c.Send(
      req,
      [&](const ClientResponse&) -> Status {
        ++heads;
        return base::FailedPreconditionError("not this one");
      },
      [&](std::string_view) -> Status {
        ++pieces;
        return Status();
      });
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_EQ(res.status().message(), "not this one");
  EXPECT_EQ(heads, 1);
  EXPECT_EQ(pieces, 0);
  // The connection was closed: the server's writer fails soon.
  ASSERT_TRUE(writer_ended_.WaitFor(20s));
  EXPECT_FALSE(writer_status().ok());
  // The next request opens a new connection.
  auto again = c.Get("/ping");
  ASSERT_TRUE(again.ok()) << again.status();
}

TEST_F(ClientTest, HeadCallbackSeesOnlyTheFinalResponse) {
  Router r;
  r.Put("/upload", [](Request& req) {
    auto body = req.body().ReadAll();
    if (!body.ok()) return Response::Error(body.status());
    return Response::Text(201, "got " + std::to_string(body->size()));
  });
  r.Get("/sized", [](Request&) { return Response::Text(200, "twelve bytes"); });
  StartServer(std::move(r));
  HttpClient c(Options());

  // "100 Continue" comes first; only the final 201 is reported.
  ClientRequest put;
  put.method = "PUT";
  put.target = "/upload";
  put.body = std::string(1000, 'b');
  put.expect_continue = true;
  std::vector<int> heads;
  std::string body;
  auto on_head = [&](const ClientResponse& head) -> Status {
    heads.push_back(head.status);
    return Status();
  };
  auto sink = [&](std::string_view piece) -> Status {
    body.append(piece);
    return Status();
  };
  auto res = c.Send(put, on_head, sink);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(heads, std::vector<int>{201});
  EXPECT_EQ(body, "got 1000");

  // HEAD: a head, no body piece.
  heads.clear();
  body.clear();
  ClientRequest head;
  head.method = "HEAD";
  head.target = "/sized";
  res = c.Send(head, on_head, sink);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(heads, std::vector<int>{200});
  EXPECT_EQ(res->headers.Get("Content-Length").value_or(""), "12");
  EXPECT_TRUE(body.empty());

  // The older overloads are unchanged.
  auto buffered = c.Get("/sized");
  ASSERT_TRUE(buffered.ok()) << buffered.status();
  EXPECT_EQ(buffered->body, "twelve bytes");
  body.clear();
  ClientRequest get;
  get.target = "/sized";
  res = c.Send(get, sink);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(body, "twelve bytes");
}

TEST_F(ClientTest, AbortStopsARequestMidBody) {
  Router r;
  r.Get("/stream", [this](Request&) {
    return Response::Stream(200, "text/plain", [this](BodyWriter& out) -> Status {
      Status st = out.Write("first");
      if (st.ok()) {
        (void)release_.WaitFor(10s);
        // The client has aborted: keep writing until the closed connection shows.
        for (int i = 0; i < 10'000 && st.ok(); ++i) {
          st = out.Write(std::string(4096, 'y'));
          std::this_thread::sleep_for(1ms);
        }
      }
      WriterEnded(st);
      return st;
    });
  });
  StartServer(std::move(r));
  HttpClient c(Options());
  base::Notification got_first;
  SendInBackground send(c, [&] {
    ClientRequest req;
    req.target = "/stream";
    return c.Send(
        req, [](const ClientResponse&) { return Status(); },
        [&](std::string_view) -> Status {
          got_first.Notify();
          return Status();
        });
  });
  ASSERT_TRUE(got_first.WaitFor(10s));
  auto t0 = std::chrono::steady_clock::now();
  c.Abort();  // from this thread, while the client thread waits for more of the body
  auto res = send.Wait(5s);
  ASSERT_TRUE(res.has_value()) << "Abort did not stop the request";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  ASSERT_FALSE(res->ok());
  EXPECT_EQ(res->status().code(), base::StatusCode::kCancelled) << res->status();
  release_.Notify();
  // The server learns that the client went away.
  ASSERT_TRUE(writer_ended_.WaitFor(20s));
  EXPECT_FALSE(writer_status().ok());
  // Abort is sticky: the client sends nothing more.
  auto later = c.Get("/ping");
  EXPECT_EQ(later.status().code(), base::StatusCode::kCancelled) << later.status();
}

TEST_F(ClientTest, AbortWhileWaitingForTheHead) {
  Router r;
  r.Get("/late", [this](Request&) {
    (void)release_.WaitFor(10s);
    return Response::Text(200, "late");
  });
  StartServer(std::move(r));
  HttpClient c(Options());
  SendInBackground send(c, [&] { return c.Get("/late"); });
  for (int i = 0; i < 500 && server_->Stats().active_requests == 0; ++i) {
    std::this_thread::sleep_for(10ms);  // until the handler is waiting
  }
  ASSERT_EQ(server_->Stats().active_requests, 1u);
  auto t0 = std::chrono::steady_clock::now();
  c.Abort();
  auto res = send.Wait(5s);
  ASSERT_TRUE(res.has_value()) << "Abort did not stop the request";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(res->status().code(), base::StatusCode::kCancelled) << res->status();
}

TEST_F(ClientTest, AbortBeforeSendingConnectsNowhere) {
  Router r;
  r.Get("/count", [this](Request&) {
    ++calls_;
    return Response::Text(200, "counted");
  });
  StartServer(std::move(r));
  HttpClient c(Options());
  c.Abort();
  auto res = c.Get("/count");
  EXPECT_EQ(res.status().code(), base::StatusCode::kCancelled) << res.status();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(calls_.load(), 0);
  EXPECT_EQ(server_->Stats().total_connections, 0u);
  // Another client is unaffected.
  HttpClient other(Options());
  auto ok = other.Get("/count");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(calls_.load(), 1);
}

TEST_F(ClientTest, PulledBodyArrivesPieceByPiece) {
  Router r;
  r.Get("/two", [this](Request&) {
    Response res = Response::Stream(200, "text/plain", [this](BodyWriter& out) -> Status {
      SOVAI_RETURN_IF_ERROR(out.Write("one"));
      // The second piece only once the client has read the first: a client that waited for
      // more than what arrived would read "timeout" instead.
      bool read = release_.WaitFor(10s);
      return out.Write(read ? "two" : "timeout");
    });
    res.headers.Set("X-Test", "yes");
    return res;
  });
  StartServer(std::move(r));
  HttpClient c(Options());
  ClientRequest req;
  req.target = "/two";
  auto head = c.SendUntilHead(req);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->headers.Get("X-Test").value_or(""), "yes");
  EXPECT_TRUE(head->body.empty());
  EXPECT_FALSE(c.HasReusableConnection()) << "its body is still pending";
  char buf[64];
  auto n = c.ReadBody(buf, sizeof buf);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(std::string(buf, *n), "one");
  release_.Notify();
  std::string rest;
  for (;;) {
    n = c.ReadBody(buf, sizeof buf);
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) break;
    rest.append(buf, *n);
  }
  EXPECT_EQ(rest, "two");
  EXPECT_TRUE(c.HasReusableConnection());
  // The body is done: nothing more to read.
  EXPECT_EQ(c.ReadBody(buf, sizeof buf).status().code(), base::StatusCode::kFailedPrecondition);
  // A bodyless answer ends at once; the same connection carries every request.
  ClientRequest head_req;
  head_req.method = "HEAD";
  head_req.target = "/ping";
  head = c.SendUntilHead(head_req);
  ASSERT_TRUE(head.ok()) << head.status();
  n = c.ReadBody(buf, sizeof buf);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
  auto again = c.Get("/ping");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->body, "pong");
  EXPECT_TRUE(c.HasReusableConnection());
  EXPECT_EQ(server_->Stats().total_connections, 1u);
}

TEST_F(ClientTest, BodyLeftUnreadClosesTheConnection) {
  Router r;
  r.Get("/sized", [](Request&) { return Response::Text(200, "twelve bytes"); });
  StartServer(std::move(r));
  HttpClient c(Options());
  char buf[64];
  EXPECT_EQ(c.ReadBody(buf, sizeof buf).status().code(), base::StatusCode::kFailedPrecondition)
      << "no request was sent";
  ClientRequest req;
  req.target = "/sized";
  auto head = c.SendUntilHead(req);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(c.ReadBody(buf, 0).status().code(), base::StatusCode::kFailedPrecondition);
  auto n = c.ReadBody(buf, 3);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(std::string(buf, *n), "twe");
  EXPECT_FALSE(c.HasReusableConnection());
  // The next request does not read the rest of that body as its answer: a new connection.
  auto next = c.Get("/sized");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->body, "twelve bytes");
  EXPECT_EQ(server_->Stats().total_connections, 2u);
  EXPECT_TRUE(c.HasReusableConnection());
  // Closed, or aborted: not reusable.
  c.Close();
  EXPECT_FALSE(c.HasReusableConnection());
  ASSERT_TRUE(c.Get("/sized").ok());
  head = c.SendUntilHead(req);
  ASSERT_TRUE(head.ok()) << head.status();
  c.Abort();
  EXPECT_EQ(c.ReadBody(buf, sizeof buf).status().code(), base::StatusCode::kCancelled);
  EXPECT_FALSE(c.HasReusableConnection());
}

}  // namespace
}  // namespace sovai::net
