// The HTTP/1.1 server: one io_context per I/O thread, one coroutine per connection on the
// context that accepted it (so a connection's state is only ever touched by one thread, without
// strands); handlers and streaming bodies on a worker pool, bridged to the socket by posting
// operations to the connection's context and waiting on their completion (see README.md).
//
// The per-request path of a keep-alive connection is kept lean, since it is what a cheap
// endpoint costs: the request is parsed straight into a Request the connection reuses, an
// inline handler runs in the connection's coroutine frame, its response head is serialized into
// a reused string and sent with the body by one direct send, and timeouts are a per-connection
// watchdog timer rather than a timer operation per socket operation.
#include "net/internal/server_core.h"

namespace sovai::net::internal {

namespace {

// --- Connection -----------------------------------------------------------------------------

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
constexpr auto kNever = Clock::time_point::max();
// Bytes asked of one socket read: a request head (most fit), or a piece of a body.
constexpr size_t kHeadReadBytes = 4096;
constexpr size_t kBodyReadBytes = 64 * 1024;
// An empty read buffer larger than this (grown by a body or a big head) is released between
// requests, so idle keep-alive connections stay small.
constexpr size_t kIdleBufferBytes = 16 * 1024;

// The response head and body as one gather write, less what has been sent already.
using ResponseBuffers = std::array<asio::const_buffer, 2>;
ResponseBuffers Skip(ResponseBuffers buffers, size_t n) {
  for (auto& b : buffers) {
    size_t k = std::min(n, b.size());
    b += k;
    n -= k;
  }
  return buffers;
}

template <class Stream>
class Connection final : public ConnectionBase,
                         public std::enable_shared_from_this<Connection<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, Socket>;

  template <class... Args>
  Connection(ServerCore& server, uint64_t id, std::string remote, Socket socket, Args&&... args)
      : server_(server),
        id_(id),
        remote_(std::move(remote)),
        stream_(std::move(socket), std::forward<Args>(args)...),
        watchdog_(stream_.get_executor()) {
    req_.set_remote_address(remote_);
    req_.set_is_tls(kTls);
  }

  ~Connection() override { server_.Unregister(id_); }

  IoExecutor executor() override { return stream_.get_executor(); }

  void OnShutdown(bool force) override {
    closing_ = true;
    if (idle_ || force) Lowest().close(ignored_);  // cancels the pending operation
  }

  // The caller keeps the connection alive until the returned coroutine completes.
  Task<void> Run();

 private:
  Socket& Lowest() { return beast::get_lowest_layer(stream_); }
  // Whether the socket holds received bytes not read yet (a read would not wait for the peer).
  bool InputWaiting() {
    boost::system::error_code ec;
    return Lowest().available(ec) > 0 && !ec;
  }
  const ServerOptions& opts() const { return server_.opts; }

  // --- Deadlines. One timer per connection (the watchdog) instead of one timer operation per
  // socket operation: ExpireAt before an operation is a store, and the watchdog is re-armed
  // only when it fires early or a deadline comes sooner than it. When a deadline passes with
  // its operation still pending the watchdog closes the socket; Settle, called when the
  // operation completes, reports that as beast::error::timeout.
  void ExpireAt(Clock::time_point deadline) {
    deadline_ = deadline;
    if (deadline < watchdog_at_) ArmWatchdog(deadline);
  }
  void ExpireAfter(Clock::duration timeout) { ExpireAt(Clock::now() + timeout); }
  void Settle(boost::system::error_code& ec) {
    deadline_ = kNever;
    if (ec && timed_out_) ec = beast::error::timeout;
  }
  void ArmWatchdog(Clock::time_point at) {
    watchdog_at_ = at;
    watchdog_.expires_at(at);  // cancels the wait this replaces
    watchdog_.async_wait([weak = this->weak_from_this()](const boost::system::error_code& ec) {
      if (ec) return;  // replaced by a sooner deadline, or the connection is gone
      if (auto self = weak.lock()) self->OnWatchdog();
    });
  }
  void OnWatchdog() {
    watchdog_at_ = kNever;
    if (deadline_ == kNever) return;  // nothing pending; the next ExpireAt arms it again
    if (Clock::now() < deadline_) {
      ArmWatchdog(deadline_);
      return;
    }
    timed_out_ = true;
    Lowest().close(ignored_);
  }

  // --- Responses.
  // Turns an invalid status into 500 and renders error bodies.
  void Normalize(const Request* req, Response& res);
  // Serializes the head of a fixed (not streamed) response into head_; returns what to send.
  ResponseBuffers PrepareFixed(int version, Response& res, bool keep_alive, bool head);
  // Sends what PrepareFixed returned: a direct non-blocking send first, which takes the whole of
  // a small response without suspending; SendRest sends what it left. Both count bytes_out.
  size_t SendNow(const ResponseBuffers& buffers, boost::system::error_code& ec);
  Task<bool> SendRest(ResponseBuffers buffers, size_t sent);
  // Writes a fixed response by the two above, for the paths that are not per-request hot.
  Task<bool> WriteFixed(const Request* req, int version, Response& res, bool keep_alive, bool head);
  // Writes a streamed response (the body from res.stream on a worker). Returns false when the
  // connection must close.
  Task<bool> WriteStreamed(Response& res, bool keep_alive, bool head);
  // Writes the 101 head of `res` and runs res.upgrade on a worker with the connection's bytes
  // (BridgedStream). Returns when it returned; the connection is not reused afterwards.
  Task<void> RunUpgraded(Response& res);

  // --- Requests.
  class BodyState;
  class BridgedReader;
  class BridgedWriter;
  class BridgedStream;
  // Runs the handler of a request that has a body or runs on a worker (all but the inline,
  // bodyless fast path), reading the body as it goes. Returns false when the client vanished or
  // stalled mid-body: there is nobody to answer, and `drop_status` is 408 or 499.
  Task<bool> RunHandler(const Router::Match& match, Response& res, bool& keep_alive,
                        int& drop_status);
  // Sets req_'s route and `slot` from `match` and returns true when the handler should run;
  // false with the server's own answer in `res` (404, 405, or 413 by Content-Length).
  bool Admit(Router::Match& match, Response& res, bool& keep_alive, int& slot);
  // Lingering close: a client still sending a body we did not read would get a TCP reset (and
  // could lose our answer, e.g. a 413) if we closed with unread bytes. Drains it briefly.
  Task<void> Linger();
  // Reads the next piece of the body into [buf, buf + n) (sending "100 Continue" first when the
  // client waits for it): from what is buffered, else from the socket. Returns the bytes
  // obtained; 0 with body.done() at the end of the body, or with body.error() on failure. On
  // the I/O thread; both the inline path and BridgedReader use it.
  Task<size_t> ReadBody(BodyState& body, char* buf, size_t n);
  // Runs `handler` on req_ (on the calling thread); a throwing handler is answered 500.
  void Call(const Handler& handler, Response& res);
  // Counts the request in the stats and the access log.
  void Finish(int slot, int status, Clock::time_point start);

  ServerCore& server_;
  const uint64_t id_;
  const std::string remote_;
  Stream stream_;
  Timer watchdog_;
  Clock::time_point deadline_ = kNever;     // of the pending socket operation; kNever: none
  Clock::time_point watchdog_at_ = kNever;  // when watchdog_ fires; kNever: not waiting
  bool timed_out_ = false;                  // the watchdog closed the socket
  beast::flat_buffer buffer_;               // bytes read and not parsed yet
  Request req_;                             // the current request; reused (storage kept)
  std::optional<RequestParser> parser_;     // the current request's parser
  std::string head_;                        // the serialized response head; reused
  bool idle_ = false;                       // waiting for the first byte of a request
  bool linger_ = false;   // a response was written on this request; drain before closing
  bool closing_ = false;  // close after the current request
  uint64_t req_bytes_in_ = 0;
  uint64_t req_bytes_out_ = 0;
  boost::system::error_code ignored_;
};

// State of reading one request body; all socket work happens on the I/O thread.
template <class Stream>
class Connection<Stream>::BodyState {
 public:
  BodyState(Connection& c, RequestParser& parser, bool expect_continue, uint64_t limit)
      : c_(c), parser_(parser), expect_continue_(expect_continue), limit_(limit) {}

  bool done() const { return parser_.is_done(); }
  const Status& error() const { return error_; }
  bool limit_exceeded() const { return limit_exceeded_; }
  uint64_t total() const { return total_; }

  // Deadline for the next read: read_timeout from now, and no later than what the minimum body
  // rate allows given the time already spent waiting for this body.
  Clock::time_point NextDeadline() {
    auto now = Clock::now();
    auto deadline = now + c_.opts().read_timeout;
    uint64_t rate = c_.opts().min_body_bytes_per_s;
    if (rate > 0) {
      auto allowed =
          c_.opts().read_timeout + std::chrono::milliseconds(total_ * 1000 / rate) - waited_;
      deadline =
          std::min(deadline, now + std::max<Clock::duration>(allowed, Clock::duration::zero()));
    }
    return deadline;
  }

  // Whether "100 Continue" must be sent before the first read (true once).
  bool NeedsContinue() {
    if (!expect_continue_ || continue_sent_) return false;
    continue_sent_ = true;
    return true;
  }

  // Called with the outcome of one read step into a buffer of `n` bytes. Returns body bytes
  // obtained; sets error_ on failure.
  size_t OnRead(const boost::system::error_code& ec, size_t n, Clock::duration waited,
                size_t parsed_bytes) {
    waited_ += std::chrono::duration_cast<std::chrono::milliseconds>(waited);
    c_.server_.bytes_in.fetch_add(parsed_bytes, std::memory_order_relaxed);
    c_.req_bytes_in_ += parsed_bytes;
    size_t got = n - parser_.body_left();
    total_ += got;
    if (ec && ec != http::error::need_buffer) {
      if (ec == http::error::body_limit) {
        limit_exceeded_ = true;
        error_ = base::ResourceExhaustedError("request body exceeds the limit of " +
                                              std::to_string(limit_) + " bytes for this route");
      } else if (ec == beast::error::timeout) {
        error_ = base::DeadlineExceededError(
            "client stopped sending the request body (read timeout " +
            std::to_string(c_.opts().read_timeout.count()) + " ms or slower than " +
            std::to_string(c_.opts().min_body_bytes_per_s) + " bytes/s)");
      } else if (ec == http::error::partial_message || ec == asio::error::eof ||
                 ec == http::error::end_of_stream) {
        error_ = base::UnavailableError("client closed the connection mid-body after " +
                                        std::to_string(total_) + " bytes");
      } else {
        error_ = StatusFromNetError(ec, "reading the request body");
      }
    }
    return got;
  }

  void Fail(Status st) { error_ = std::move(st); }
  RequestParser& parser() { return parser_; }
  Connection& conn() { return c_; }

 private:
  Connection& c_;
  RequestParser& parser_;
  const bool expect_continue_;
  const uint64_t limit_;
  bool continue_sent_ = false;
  bool limit_exceeded_ = false;
  uint64_t total_ = 0;
  std::chrono::milliseconds waited_{0};
  Status error_;
};

// BodyReader for worker handlers: each Read runs one ReadBody on the I/O thread and waits.
template <class Stream>
class Connection<Stream>::BridgedReader final : public BodyReader {
 public:
  explicit BridgedReader(BodyState& state) : s_(state) {}

  Result<size_t> Read(char* buf, size_t n) override {
    if (!s_.error().ok()) return s_.error();
    if (s_.done() || n == 0) return size_t{0};
    Connection& c = s_.conn();
    for (;;) {
      Completion<size_t> done;
      // co_spawn from the I/O thread, not from this worker: everything about the coroutine
      // (its frames, its executor's bookkeeping) then happens on one thread.
      asio::post(c.executor(), [this, &c, &done, buf, n] {
        asio::co_spawn(c.executor(), c.ReadBody(s_, buf, n),
                       [this, &done](std::exception_ptr e, size_t got) {
                         if (e) s_.Fail(base::InternalError("reading the request body failed"));
                         done.Set(e ? 0 : got);
                       });
      });
      size_t got = done.Wait();
      if (got > 0) return got;
      if (!s_.error().ok()) return s_.error();
      if (s_.done()) return size_t{0};
    }
  }

 private:
  BodyState& s_;
};

// BodyWriter for streamed responses: each Write posts one write to the I/O thread and waits.
template <class Stream>
class Connection<Stream>::BridgedWriter final : public BodyWriter {
 public:
  BridgedWriter(Connection& c, bool chunked, std::optional<uint64_t> length)
      : c_(c), chunked_(chunked), length_(length) {}

  Status Write(std::string_view data) override {
    if (!error_.ok()) return error_;
    if (data.empty()) return Status();
    if (length_ && written_ + data.size() > *length_) {
      return base::InvalidArgumentError(
          "streamed body is longer than its declared Content-Length " + std::to_string(*length_));
    }
    Completion<boost::system::error_code> done;
    auto chunk = http::make_chunk(asio::buffer(data.data(), data.size()));
    asio::post(c_.executor(), [this, &done, &chunk, data] {
      c_.ExpireAfter(c_.opts().write_timeout);
      auto on_done = [this, &done](boost::system::error_code ec, size_t n) {
        c_.Settle(ec);
        c_.server_.bytes_out.fetch_add(n, std::memory_order_relaxed);
        done.Set(ec);
      };
      if (chunked_) {
        asio::async_write(c_.stream_, chunk, on_done);
      } else {
        asio::async_write(c_.stream_, asio::buffer(data.data(), data.size()), on_done);
      }
    });
    boost::system::error_code ec = done.Wait();
    if (ec) {
      error_ = StatusFromNetError(ec, "writing the response body (client went away?)");
      return error_;
    }
    written_ += data.size();
    return Status();
  }

  uint64_t bytes_written() const override { return written_; }
  const Status& error() const { return error_; }

 private:
  Connection& c_;
  const bool chunked_;
  const std::optional<uint64_t> length_;
  uint64_t written_ = 0;
  Status error_;
};

// UpgradedStream after a 101: each Read or Write posts one socket operation to the I/O thread and
// waits, as BridgedReader and BridgedWriter do. A read and a write may be in flight at once (one
// of each is what a socket, and an SSL stream, allow). Reads have no deadline (the owner bounds
// idleness); writes have write_timeout through the watchdog.
template <class Stream>
class Connection<Stream>::BridgedStream final : public UpgradedStream {
 public:
  explicit BridgedStream(Connection& c) : c_(c) {}

  Result<size_t> Read(char* buf, size_t n) override {
    if (n == 0) return size_t{0};
    Completion<std::pair<boost::system::error_code, size_t>> done;
    asio::post(c_.executor(), [this, &done, buf, n] {
      if (c_.buffer_.size() > 0) {
        // Bytes the client sent right after the request head.
        size_t k = asio::buffer_copy(asio::buffer(buf, n), c_.buffer_.data());
        c_.buffer_.consume(k);
        done.Set({boost::system::error_code(), k});
        return;
      }
      c_.stream_.async_read_some(asio::buffer(buf, n),
                                 [this, &done](boost::system::error_code ec, size_t got) {
                                   c_.server_.bytes_in.fetch_add(got, std::memory_order_relaxed);
                                   done.Set({ec, got});
                                 });
    });
    auto [ec, got] = done.Wait();
    if (got > 0) return got;
    if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) return size_t{0};
    if (ec) return StatusFromNetError(ec, "reading from the upgraded connection");
    return size_t{0};
  }

  Status Write(std::string_view data) override {
    if (data.empty()) return Status();
    Completion<boost::system::error_code> done;
    asio::post(c_.executor(), [this, &done, data] {
      c_.ExpireAfter(c_.opts().write_timeout);
      asio::async_write(c_.stream_, asio::buffer(data.data(), data.size()),
                        [this, &done](boost::system::error_code ec, size_t n) {
                          c_.Settle(ec);
                          c_.server_.bytes_out.fetch_add(n, std::memory_order_relaxed);
                          c_.req_bytes_out_ += n;
                          done.Set(ec);
                        });
    });
    boost::system::error_code ec = done.Wait();
    if (ec) return StatusFromNetError(ec, "writing to the upgraded connection (client went away?)");
    return Status();
  }

  void Close() override {
    asio::post(c_.executor(),
               [self = c_.shared_from_this()] { self->Lowest().close(self->ignored_); });
  }

 private:
  Connection& c_;
};

template <class Stream>
Task<void> Connection<Stream>::RunUpgraded(Response& res) {
  head_.clear();
  AppendResponseHead(11, 101, res.headers, opts().server_name, BodyFraming::kNone, 0,
                     /*keep_alive=*/true, head_);
  boost::system::error_code ec;
  ExpireAfter(opts().write_timeout);
  size_t n =
      co_await asio::async_write(stream_, asio::buffer(head_.data(), head_.size()), Into(ec));
  Settle(ec);
  server_.bytes_out.fetch_add(n, std::memory_order_relaxed);
  if (ec) co_return;
  BridgedStream stream(*this);
  co_await RunOnWorker(*server_.workers, [&] {
    try {
      res.upgrade(stream);
    } catch (...) {
      // The connection closes below either way.
    }
    res.upgrade = nullptr;  // release what it captured on the worker
  });
}

template <class Stream>
Task<void> Connection<Stream>::Run() {
  try {
    Lowest().set_option(tcp::no_delay(true), ignored_);
    if constexpr (kTls) {
      ExpireAfter(opts().header_timeout);
      boost::system::error_code ec;
      co_await stream_.async_handshake(asio::ssl::stream_base::server, Into(ec));
      Settle(ec);
      if (ec) co_return;
    } else {
      // SendNow's direct send must fail with would_block rather than block the I/O thread.
      Lowest().non_blocking(true, ignored_);
    }
    const int unmatched_slot = server_.router.route_count() + 1;
    // One request per iteration. The common case — an inline handler, no body, a fixed
    // response — runs entirely in this frame: no coroutine is called, so none is allocated.
    for (;;) {
      boost::system::error_code ec;
      linger_ = false;

      // 1. The head: its first byte within idle_timeout, the rest within header_timeout.
      if (buffer_.size() == 0 && buffer_.capacity() > kIdleBufferBytes) buffer_.shrink_to_fit();
      req_.Clear();
      RequestParser& parser = parser_.emplace(req_, server_.head_limits);
      parser.header_limit(static_cast<std::uint32_t>(opts().max_header_bytes));
      parser.body_limit(kMaxBodyBytesCeiling);
      size_t head_bytes = 0;
      std::optional<Clock::time_point> head_deadline;  // set once the first bytes are in
      bool read_failed = false;
      for (;;) {
        if (buffer_.size() > 0) {
          size_t used = parser.put(buffer_.data(), ec);
          buffer_.consume(used);
          head_bytes += used;
          if (ec != http::error::need_more) break;  // the whole head, or malformed
          ec = {};
        }
        if (buffer_.size() == 0) {
          idle_ = true;
          if (closing_) break;
          ExpireAfter(opts().idle_timeout);
        } else {
          if (!head_deadline) head_deadline = Clock::now() + opts().header_timeout;
          ExpireAt(*head_deadline);
        }
        size_t n = co_await stream_.async_read_some(buffer_.prepare(kHeadReadBytes), Into(ec));
        Settle(ec);
        idle_ = false;
        if (ec) {
          read_failed = true;
          break;
        }
        buffer_.commit(n);
      }
      if (idle_) break;  // shutting down between requests
      if (read_failed) {
        // A client that half-closes mid-head is answered 400, as Beast's reader did; a timeout,
        // a reset or a close between requests just ends the connection.
        if (ec != asio::error::eof || !parser.got_some()) break;
        ec = {};
        parser.put_eof(ec);
      }
      server_.bytes_in.fetch_add(head_bytes, std::memory_order_relaxed);
      if (ec) {
        HeadError err = HeadErrorFromParse(ec, server_.head_limits);
        server_.counters.Add(unmatched_slot, kOtherMethod, err.status);
        Response res = Response::Error(err.status, err.message);
        co_await WriteFixed(nullptr, 11, res, false, false);
        break;
      }

      auto start = server_.opts.access_log ? Clock::now() : Clock::time_point();
      server_.active_requests.fetch_add(1, std::memory_order_relaxed);
      req_bytes_in_ = 0;
      req_bytes_out_ = 0;
      if (HeadError err = parser.CheckHead(); !err.ok()) {
        Response res = Response::Error(err.status, err.message);
        co_await WriteFixed(nullptr, 11, res, false, false);
        Finish(unmatched_slot, err.status, start);
        break;
      }
      bool keep_alive = parser.keep_alive();
      const bool head = req_.method() == "HEAD";

      // 2. Route, and run the handler (or answer for the server).
      Response res;
      int slot = unmatched_slot;
      Router::Match match = server_.router.Find(req_.method(), req_.raw_path());
      if (!Admit(match, res, keep_alive, slot)) {
        // Answered for the server (404, 405, 413).
      } else if (!req_.has_body() &&
                 (match.options->inline_handler ||
                  (match.options->inline_if && match.options->inline_if(req_)))) {
        Call(*match.handler, res);
      } else {
        int drop_status = 0;
        bool answer = co_await RunHandler(match, res, keep_alive, drop_status);
        if (!answer) {
          Finish(slot, drop_status, start);
          break;
        }
      }

      // 3. The response.
      if (res.status == 101 && (!res.upgrade || req_.version() < 11 || head)) {
        res = Response::Error(500,
                              "the handler answered 101 without taking over the connection"
                              " (or to a request that cannot switch protocols)");
      }
      const int status = res.status;  // what the stats count, even if invalid (then sent as 500)
      keep_alive = keep_alive && !closing_;
      Normalize(&req_, res);
      if (res.status == 101) {
        // The connection now carries another protocol; it is closed when that ends.
        co_await RunUpgraded(res);
        linger_ = false;
        Finish(slot, status, start);
        break;
      }
      bool ok = true;
      if (!res.stream) {
        ResponseBuffers buffers = PrepareFixed(req_.version(), res, keep_alive, head);
        size_t sent = SendNow(buffers, ec);
        if (!ec && sent < asio::buffer_size(buffers)) {
          ok = co_await SendRest(buffers, sent);
        } else {
          ok = !ec;
        }
      } else {
        ok = co_await WriteStreamed(res, keep_alive, head);
        keep_alive = ok;
      }
      Finish(slot, status, start);
      if (!ok || !keep_alive || closing_) break;
    }

    // Half-close so the client reads everything we wrote before seeing the end.
    Lowest().shutdown(tcp::socket::shutdown_send, ignored_);
    if (linger_) co_await Linger();
    Lowest().close(ignored_);
  } catch (const std::exception&) {
    // One bad connection never takes the server down; the socket closes with `self`.
  }
}

template <class Stream>
bool Connection<Stream>::Admit(Router::Match& match, Response& res, bool& keep_alive, int& slot) {
  if (match.kind != Router::Match::kFound) {
    if (match.kind == Router::Match::kMethodNotAllowed) {
      res = Response::Error(405, "method " + std::string(req_.method()) + " is not allowed on " +
                                     std::string(req_.raw_path()) + "; allowed: " + match.allow);
      res.headers.Set("Allow", match.allow);
    } else {
      res = Response::Error(
          404, "no route for " + std::string(req_.method()) + " " + std::string(req_.raw_path()));
    }
    // An unread body would be taken for the next request.
    keep_alive = keep_alive && !req_.has_body();
    return false;
  }
  req_.set_route(match.pattern, std::move(match.params));
  slot = match.route_index;
  const RouteOptions& ropts = *match.options;
  if (req_.content_length() && *req_.content_length() > ropts.max_body_bytes) {
    // The limit by Content-Length: refused before any body byte is read.
    res = Response::Error(413, "request body of " + std::to_string(*req_.content_length()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(ropts.max_body_bytes) + " bytes for this route");
    keep_alive = false;
    return false;
  }
  return true;
}

template <class Stream>
Task<void> Connection<Stream>::Linger() {
  auto until = Clock::now() + kLingerTime;
  uint64_t drained = 0;
  boost::system::error_code ec;
  while (!ec && drained < kLingerBytes && Clock::now() < until && !closing_) {
    ExpireAt(until);
    // (Not `drained += co_await ...`: keep co_await out of compound expressions, where g++ 12 has
    // had temporaries-lifetime bugs.)
    size_t n = co_await Lowest().async_read_some(buffer_.prepare(64 * 1024), Into(ec));
    Settle(ec);
    drained += n;
  }
}

template <class Stream>
Task<bool> Connection<Stream>::RunHandler(const Router::Match& match, Response& res,
                                          bool& keep_alive, int& drop_status) {
  const RouteOptions& ropts = *match.options;
  RequestParser& parser = *parser_;
  parser.body_limit(ropts.max_body_bytes);
  auto expect = req_.header("Expect");
  bool expect_continue = expect && EqualsIgnoreCase(*expect, "100-continue") &&
                         req_.version() == 11 && req_.has_body();
  BodyState body(*this, parser, expect_continue, ropts.max_body_bytes);
  auto call = [&] { Call(*match.handler, res); };
  if (ropts.inline_handler) {
    // Buffer the body (up to the route's limit, which the parser enforces), then call.
    std::string buffered;
    while (req_.has_body() && !body.done() && body.error().ok()) {
      // Read straight into the string; room for the rest of a known length, else a piece.
      size_t room = kBodyReadBytes;
      if (auto length = req_.content_length(); length && *length > body.total()) {
        room = static_cast<size_t>(std::min<uint64_t>(kStreamChunkBytes, *length - body.total()));
      }
      size_t have = buffered.size();
      buffered.resize(have + room);
      size_t got = co_await ReadBody(body, buffered.data() + have, room);
      buffered.resize(have + got);
    }
    if (body.error().ok()) {
      struct StringReader final : BodyReader {
        std::string_view rest;
        Result<size_t> Read(char* buf, size_t n) override {
          n = std::min(n, rest.size());
          std::memcpy(buf, rest.data(), n);
          rest.remove_prefix(n);
          return n;
        }
      } reader;
      reader.rest = buffered;
      req_.set_body_reader(&reader);
      call();
      req_.set_body_reader(nullptr);
    }
  } else {
    BridgedReader reader(body);
    req_.set_body_reader(&reader);
    co_await RunOnWorker(*server_.workers, call);
    req_.set_body_reader(nullptr);
  }

  // The connection's fate follows from the body.
  if (body.limit_exceeded()) {
    res = Response::Error(413, body.error().message());
    keep_alive = false;
  } else if (!body.error().ok()) {
    // The client vanished or stalled mid-body: nobody to answer.
    drop_status = body.error().code() == base::StatusCode::kDeadlineExceeded ? 408 : 499;
    co_return false;
  } else if (!body.done()) {
    keep_alive = false;  // unread body bytes: the framing is lost
  }
  co_return true;
}

template <class Stream>
Task<size_t> Connection<Stream>::ReadBody(BodyState& body, char* buf, size_t n) {
  if (!body.error().ok() || body.done() || n == 0) co_return 0;
  boost::system::error_code ec;
  if (body.NeedsContinue()) {
    ExpireAfter(opts().write_timeout);
    co_await asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()), Into(ec));
    Settle(ec);
    if (ec) {
      body.Fail(StatusFromNetError(ec, "sending 100 Continue"));
      co_return 0;
    }
  }
  RequestParser& parser = body.parser();
  parser.set_body_buffer(buf, n);
  const auto start = Clock::now();
  const auto deadline = body.NextDeadline();
  if (deadline <= start) {
    size_t got = body.OnRead(beast::error::timeout, n, {}, 0);
    parser.set_body_buffer(nullptr, 0);
    co_return got;
  }
  // Parse what is buffered, and read from the socket while the parser needs more input or, to
  // fill `buf` in one call, while more of the body is already waiting in the socket: a worker
  // reading a large body then pays one hand-off per `n` bytes instead of one per socket read.
  size_t parsed = 0;
  bool need_input = buffer_.size() == 0;
  for (;;) {
    if (!need_input) {
      size_t used = parser.put(buffer_.data(), ec);
      buffer_.consume(used);
      parsed += used;
      if (ec == http::error::need_more) {
        ec = {};
      } else if (ec || buffer_.size() > 0 || parser.is_done() || parser.body_left() == 0 ||
                 !InputWaiting()) {
        break;
      }
    }
    need_input = false;
    ExpireAt(deadline);
    size_t got = co_await stream_.async_read_some(buffer_.prepare(kBodyReadBytes), Into(ec));
    Settle(ec);
    buffer_.commit(got);
    if (ec == asio::error::eof) {
      if (parser.got_some()) {
        ec = {};
        parser.put_eof(ec);  // partial_message: the body is cut short
      } else {
        ec = http::error::end_of_stream;
      }
      break;
    }
    if (ec) break;
  }
  size_t got = body.OnRead(ec, n, Clock::now() - start, parsed);
  parser.set_body_buffer(nullptr, 0);  // `buf` belongs to the caller
  co_return got;
}

template <class Stream>
void Connection<Stream>::Call(const Handler& handler, Response& res) {
  try {
    res = handler(req_);
  } catch (const std::exception& e) {
    res = Response::Error(500, std::string("handler failed: ") + e.what());
  } catch (...) {
    res = Response::Error(500, "handler failed with an unknown exception");
  }
}

template <class Stream>
void Connection<Stream>::Finish(int slot, int status, Clock::time_point start) {
  server_.active_requests.fetch_sub(1, std::memory_order_relaxed);
  server_.counters.Add(slot, MethodIndex(req_.method()), status);
  if (server_.opts.access_log) {
    AccessLogEntry e;
    e.method = req_.method();
    e.path = req_.raw_path();
    e.pattern = req_.route_pattern();
    e.remote_address = remote_;
    e.status = status;
    e.duration = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    e.bytes_in = req_bytes_in_;
    e.bytes_out = req_bytes_out_;
    try {
      server_.opts.access_log(e);
    } catch (const std::exception&) {
    }
  }
}

template <class Stream>
void Connection<Stream>::Normalize(const Request* req, Response& res) {
  if (res.status < 100 || res.status > 999) {
    res =
        Response::Error(500, "handler returned invalid HTTP status " + std::to_string(res.status));
  }
  server_.RenderError(req, res);
}

template <class Stream>
ResponseBuffers Connection<Stream>::PrepareFixed(int version, Response& res, bool keep_alive,
                                                 bool head) {
  linger_ = true;
  BodyFraming framing = BodyFraming::kLength;
  if (IsBodylessStatus(res.status)) {
    res.body.clear();
    framing = BodyFraming::kNone;
  } else if (head && res.body.empty() && res.headers.Has("Content-Length")) {
    framing = BodyFraming::kHandlerLength;  // HEAD: the size of what GET would send
  }
  head_.clear();
  AppendResponseHead(version, res.status, res.headers, opts().server_name, framing, res.body.size(),
                     keep_alive, head_);
  req_bytes_out_ = head ? 0 : res.body.size();
  std::string_view body = head ? std::string_view() : std::string_view(res.body);
  return {asio::buffer(head_.data(), head_.size()), asio::buffer(body.data(), body.size())};
}

template <class Stream>
size_t Connection<Stream>::SendNow(const ResponseBuffers& buffers, boost::system::error_code& ec) {
  ec = {};
  if constexpr (kTls) {
    return 0;  // TLS records are written by the stream's own (asynchronous) writes
  } else {
    size_t n = Lowest().write_some(buffers, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
    server_.bytes_out.fetch_add(n, std::memory_order_relaxed);
    return n;
  }
}

template <class Stream>
Task<bool> Connection<Stream>::SendRest(ResponseBuffers buffers, size_t sent) {
  boost::system::error_code ec;
  ExpireAfter(opts().write_timeout);
  size_t n = co_await asio::async_write(stream_, Skip(buffers, sent), Into(ec));
  Settle(ec);
  server_.bytes_out.fetch_add(n, std::memory_order_relaxed);
  co_return !ec;
}

template <class Stream>
Task<bool> Connection<Stream>::WriteFixed(const Request* req, int version, Response& res,
                                          bool keep_alive, bool head) {
  Normalize(req, res);
  ResponseBuffers buffers = PrepareFixed(version, res, keep_alive, head);
  boost::system::error_code ec;
  size_t sent = SendNow(buffers, ec);
  if (ec) co_return false;
  if (sent == asio::buffer_size(buffers)) co_return true;
  bool ok = co_await SendRest(buffers, sent);
  co_return ok;
}

template <class Stream>
Task<bool> Connection<Stream>::WriteStreamed(Response& res, bool keep_alive, bool head) {
  linger_ = true;
  BodyFraming framing = BodyFraming::kNone;
  bool chunked = false;
  if (res.stream_length) {
    framing = BodyFraming::kLength;
  } else if (req_.version() >= 11) {
    framing = BodyFraming::kChunked;
    chunked = true;
  } else {
    keep_alive = false;  // HTTP/1.0: the end of the body is the end of the connection
  }
  head_.clear();
  AppendResponseHead(req_.version(), res.status, res.headers, opts().server_name, framing,
                     res.stream_length.value_or(0), keep_alive, head_);
  boost::system::error_code ec;
  ExpireAfter(opts().write_timeout);
  size_t n =
      co_await asio::async_write(stream_, asio::buffer(head_.data(), head_.size()), Into(ec));
  Settle(ec);
  server_.bytes_out.fetch_add(n, std::memory_order_relaxed);
  if (ec) co_return false;
  if (head) co_return keep_alive;

  BridgedWriter writer(*this, chunked, res.stream_length);
  Status st;
  co_await RunOnWorker(*server_.workers, [&] {
    try {
      st = res.stream(writer);
    } catch (const std::exception& e) {
      st = base::InternalError(std::string("response writer threw: ") + e.what());
    } catch (...) {
      st = base::InternalError("response writer threw");
    }
    res.stream = nullptr;  // release captured resources (files) on the worker
  });
  req_bytes_out_ = writer.bytes_written();
  if (!st.ok() || !writer.error().ok()) co_return false;  // abort: no final chunk
  if (res.stream_length && writer.bytes_written() != *res.stream_length) co_return false;
  if (chunked) {
    ExpireAfter(opts().write_timeout);
    size_t last = co_await asio::async_write(stream_, http::make_chunk_last(), Into(ec));
    Settle(ec);
    server_.bytes_out.fetch_add(last, std::memory_order_relaxed);
    if (ec) co_return false;
  }
  co_return keep_alive;
}

}  // namespace

// Runs a connection. The lambda (stored in co_spawn's frame) owns the connection, so it outlives
// every operation of its coroutine.
template <class Conn>
void Spawn(const IoExecutor& ex, std::shared_ptr<Conn> conn) {
  asio::co_spawn(
      ex, [conn = std::move(conn)]() -> Task<void> { co_await conn->Run(); }, asio::detached);
}

void StartConnection(ServerCore& server, uint64_t id, std::string remote, Socket socket) {
  IoExecutor ex = socket.get_executor();
  if (server.ssl_ctx) {
    auto c = std::make_shared<Connection<beast::ssl_stream<Socket>>>(
        server, id, std::move(remote), std::move(socket), *server.ssl_ctx);
    if (server.Register(id, c)) Spawn(ex, std::move(c));
  } else {
    auto c = std::make_shared<Connection<Socket>>(server, id, std::move(remote), std::move(socket));
    if (server.Register(id, c)) Spawn(ex, std::move(c));
  }
}

}  // namespace sovai::net::internal
