// Blocking HTTP/1.1 client: each operation starts an Asio async operation on a private
// io_context and runs it to completion, so beast::tcp_stream's timeouts give us deadlines.
#include "net/client.h"

#include <sys/socket.h>

#include <atomic>
#include <charconv>

#include "net/internal/beast.h"
#include "net/internal/net_error.h"

namespace sovai::net {

using base::Result;
using base::Status;
using namespace internal;  // NOLINT(google-build-using-namespace): asio/beast/http aliases
using tcp = asio::ip::tcp;
using ErrorCode = boost::system::error_code;

Result<ClientOptions> ClientOptionsFromUrl(std::string_view url) {
  ClientOptions o;
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
    o.port = 80;
  } else if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
    o.tls = true;
    o.port = 443;
  } else {
    return base::InvalidArgumentError("URL must start with http:// or https://: '" +
                                      std::string(url) + "'");
  }
  rest = rest.substr(0, rest.find('/'));
  std::string_view host = rest;
  if (!rest.empty() && rest.front() == '[') {  // [v6]:port
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return base::InvalidArgumentError("bad IPv6 URL");
    host = rest.substr(1, close - 1);
    rest = rest.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return base::InvalidArgumentError("bad IPv6 URL");
  } else {
    size_t colon = rest.rfind(':');
    host = rest.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon);
  }
  if (!rest.empty()) {
    std::string_view port = rest.substr(1);
    unsigned p = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || ptr != port.data() + port.size() || p == 0 || p > 65535) {
      return base::InvalidArgumentError("bad port in URL '" + std::string(url) + "'");
    }
    o.port = static_cast<uint16_t>(p);
  }
  if (host.empty())
    return base::InvalidArgumentError("URL has no host: '" + std::string(url) + "'");
  o.host = std::string(host);
  return o;
}

struct HttpClient::Impl {
  explicit Impl(const ClientOptions& o) : opts(o) {}

  // Runs the io_context until the started operation completes. After Abort() the socket is
  // closed first, so the operation fails at once instead of waiting for the peer.
  void RunIo() {
    io.restart();
    if (aborted.load(std::memory_order_acquire)) CloseSocket();
    io.run();
  }

  // Closes the socket but keeps the stream objects: pending operations complete (with
  // operation_aborted) and nothing dangles. Runs on the thread that runs `io`.
  void CloseSocket() {
    if (!connected()) return;
    ErrorCode ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    Lowest().close();  // also cancels the stream's timer
  }

  // Called from any thread. The close itself runs on the thread that runs `io` (inside RunIo, or
  // first thing in the next one), so the stream is never touched by two threads at once.
  void Abort() {
    aborted.store(true, std::memory_order_release);
    asio::post(io, [this] { CloseSocket(); });
  }
  beast::tcp_stream& Lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  bool connected() const { return plain.has_value() || tls.has_value(); }

  void Close() {
    if (connected()) {
      ErrorCode ec;
      Lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
      Lowest().socket().close(ec);
    }
    tls.reset();
    plain.reset();
    buffer.clear();
    io.restart();
    io.poll();  // let cancelled handlers run so nothing refers to the old stream
    used = false;
    body_pending = false;
    parser.reset();
  }

  Status Err(const ErrorCode& ec, std::string_view what) {
    return StatusFromNetError(ec,
                              std::string(what) + " " + opts.host + ":" + std::to_string(opts.port),
                              TlsFailure::kInternal);
  }

  // A kept-alive connection the server closed meanwhile shows EOF (or stray bytes) on a peek.
  bool IsStale() {
    char c;
    ssize_t n = ::recv(Lowest().socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    if (n > 0) return true;  // unsolicited bytes: framing is gone
    return !(errno == EAGAIN || errno == EWOULDBLOCK);
  }

  Status Connect() {
    Close();
    ErrorCode ec;
    tcp::resolver resolver(io);
    auto results = resolver.resolve(opts.host, std::to_string(opts.port), ec);
    if (ec) {
      return base::UnavailableError("cannot resolve '" + opts.host + "': " + ec.message());
    }
    if (opts.tls) {
      if (!ssl_ctx) {
        ssl_ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
        if (opts.verify_peer) {
          ssl_ctx->set_verify_mode(asio::ssl::verify_peer);
          if (!opts.ca_file.empty()) {
            ssl_ctx->load_verify_file(opts.ca_file, ec);
            if (ec) {
              ssl_ctx.reset();
              return base::InvalidArgumentError("CA file '" + opts.ca_file +
                                                "' is unusable: " + ec.message());
            }
          } else {
            ssl_ctx->set_default_verify_paths(ec);
          }
        } else {
          ssl_ctx->set_verify_mode(asio::ssl::verify_none);
        }
      }
      tls.emplace(io, *ssl_ctx);
      if (opts.verify_peer) {
        tls->set_verify_callback(asio::ssl::host_name_verification(opts.host));
      }
      SSL_set_tlsext_host_name(tls->native_handle(), opts.host.c_str());
    } else {
      plain.emplace(io);
    }
    ErrorCode result = asio::error::would_block;
    Lowest().expires_after(opts.connect_timeout);
    Lowest().async_connect(results, [&](ErrorCode e, const tcp::endpoint&) { result = e; });
    RunIo();
    if (result) {
      Status st = Err(result, "connect to");
      Close();
      return st;
    }
    Lowest().socket().set_option(tcp::no_delay(true), ec);
    if (tls) {
      result = asio::error::would_block;
      Lowest().expires_after(opts.connect_timeout);
      tls->async_handshake(asio::ssl::stream_base::client, [&](ErrorCode e) { result = e; });
      RunIo();
      if (result) {
        Status st = base::InternalError("TLS handshake with " + opts.host + ":" +
                                        std::to_string(opts.port) + " failed: " + result.message());
        if (result == beast::error::timeout) st = Err(result, "TLS handshake with");
        Close();
        return st;
      }
    }
    return Status();
  }

  // Runs one operation, `start(stream, done)` on whichever stream this connection has (TLS or
  // plain), to completion or the read timeout.
  template <class Start>
  ErrorCode RunOne(Start start) {
    ErrorCode result = asio::error::would_block;
    Lowest().expires_after(opts.read_timeout);
    auto done = [&](ErrorCode e, size_t) { result = e; };
    if (tls) {
      start(*tls, done);
    } else {
      start(*plain, done);
    }
    RunIo();
    return result;
  }

  template <class Buffers>
  ErrorCode WriteAll(const Buffers& buffers) {
    return RunOne([&](auto& stream, auto done) { asio::async_write(stream, buffers, done); });
  }

  template <class Serializer>
  ErrorCode WriteHeader(Serializer& sr) {
    return RunOne([&](auto& stream, auto done) { http::async_write_header(stream, sr, done); });
  }

  template <class Parser>
  ErrorCode ReadHeader(Parser& parser) {
    return RunOne(
        [&](auto& stream, auto done) { http::async_read_header(stream, buffer, parser, done); });
  }

  template <class Parser>
  ErrorCode ReadSome(Parser& parser) {
    return RunOne(
        [&](auto& stream, auto done) { http::async_read_some(stream, buffer, parser, done); });
  }

  // Waits up to `wait` for the socket to become readable (without a tcp_stream timeout, which
  // would close the socket).
  bool WaitReadable(std::chrono::milliseconds wait) {
    if (buffer.size() > 0) return true;
    bool readable = false;
    asio::steady_timer timer(io, wait);
    auto& sock = Lowest().socket();
    timer.async_wait([&](ErrorCode e) {
      if (!e) sock.cancel();
    });
    sock.async_wait(tcp::socket::wait_read, [&](ErrorCode e) {
      readable = !e;
      timer.cancel();
    });
    RunIo();
    return readable;
  }

  Status SendBody(const ClientRequest& req, bool chunked) {
    ErrorCode ec;
    if (!req.source) {
      if (req.body.empty()) return Status();
      ec = WriteAll(asio::buffer(req.body));
      return ec ? Err(ec, "sending the request body to") : Status();
    }
    // Not zeroed: clearing 256 KiB per request showed in the gateway's profile.
    auto buf = std::make_unique_for_overwrite<char[]>(kStreamChunkBytes);
    uint64_t sent = 0;
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(size_t n, req.source(buf.get(), kStreamChunkBytes));
      if (n == 0) break;
      sent += n;
      if (req.source_length && sent > *req.source_length) {
        return base::InvalidArgumentError("body source produced more than its declared " +
                                          std::to_string(*req.source_length) + " bytes");
      }
      if (chunked) {
        ec = WriteAll(http::make_chunk(asio::buffer(buf.get(), n)));
      } else {
        ec = WriteAll(asio::buffer(buf.get(), n));
      }
      if (ec) return Err(ec, "sending the request body to");
    }
    if (req.source_length && sent != *req.source_length) {
      return base::InvalidArgumentError("body source produced " + std::to_string(sent) +
                                        " bytes, not the declared " +
                                        std::to_string(*req.source_length));
    }
    if (chunked) {
      ec = WriteAll(http::make_chunk_last());
      if (ec) return Err(ec, "sending the request body to");
    }
    return Status();
  }

  // Reads one final response head (skipping 1xx unless `stop_at_100`) into `out`, leaving its
  // body to ReadBodyPiece through `parser`. `got_100` tells the caller an interim 100 was read
  // instead.
  Status ReadHead(bool head_request, ClientResponse& out, bool stop_at_100, bool* got_100,
                  bool* keep_alive) {
    for (;;) {
      parser.emplace();
      parser->header_limit(static_cast<std::uint32_t>(opts.max_header_bytes));
      // Not boost::none: Beast 1.74 compares Content-Length > none as true (body_limit error).
      parser->body_limit(std::numeric_limits<std::uint64_t>::max());
      if (head_request) parser->skip(true);
      ErrorCode ec = ReadHeader(*parser);
      if (ec) return Err(ec, "reading the response from");
      int status = static_cast<int>(parser->get().result_int());
      if (status >= 100 && status < 200 && status != 101) {
        if (stop_at_100 && status == 100) {
          *got_100 = true;
          return Status();
        }
        continue;  // interim response
      }
      out.status = status;
      out.headers = Headers();
      for (const auto& f : parser->get()) {
        out.headers.Add(std::string(f.name_string()), std::string(f.value()));
      }
      *keep_alive = parser->get().keep_alive();
      return Status();
    }
  }

  // Reads the next piece of the body of the response ReadHead read into buf[0, n) (n > 0):
  // returns its size, 0 at the end of the body.
  Result<size_t> ReadBodyPiece(char* buf, size_t n) {
    while (!parser->is_done()) {
      auto& body = parser->get().body();
      body.data = buf;
      body.size = n;
      ErrorCode ec = ReadSome(*parser);
      if (ec == http::error::need_buffer) ec = {};
      size_t got = n - body.size;
      if (ec == http::error::end_of_stream && parser->is_done()) ec = {};
      if (ec) return Err(ec, "reading the response body from");
      if (got > 0) return got;
    }
    return size_t{0};
  }

  // Reads one final response (skipping 1xx unless `stop_at_100`), body to `sink` (or into
  // out.body when there is none) unless `head_only`, which leaves it to ReadBodyPiece.
  // `got_100` tells the caller an interim 100 was read instead.
  // `on_head`, when set, sees the final head before any body piece.
  Status ReadResponse(bool head_request, const HeadCallback* on_head, const BodySink* sink,
                      uint64_t max_body, ClientResponse& out, bool stop_at_100, bool* got_100,
                      bool* keep_alive, bool head_only) {
    SOVAI_RETURN_IF_ERROR(ReadHead(head_request, out, stop_at_100, got_100, keep_alive));
    if (got_100 != nullptr && *got_100) return Status();
    if (on_head != nullptr && *on_head) {
      Status st = (*on_head)(out);
      if (!st.ok()) {
        *keep_alive = false;
        return st;
      }
    }
    if (head_only) return Status();
    auto chunk = std::make_unique_for_overwrite<char[]>(kStreamChunkBytes);
    uint64_t total = 0;
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(size_t got, ReadBodyPiece(chunk.get(), kStreamChunkBytes));
      if (got == 0) return Status();
      total += got;
      if (sink != nullptr) {
        Status st = (*sink)(std::string_view(chunk.get(), got));
        if (!st.ok()) {
          *keep_alive = false;
          return st;
        }
      } else {
        if (total > max_body) {
          *keep_alive = false;
          return base::ResourceExhaustedError("response body exceeds the client limit of " +
                                              std::to_string(max_body) +
                                              " bytes; stream it to a sink instead");
        }
        out.body.append(chunk.get(), got);
      }
    }
  }

  // The response head has been read in pull mode: ReadBody reads the body next.
  void LeaveBody(bool keep_alive) {
    body_pending = true;
    pending_keep_alive = keep_alive;
  }

  // One attempt. `head_only` (pull mode) returns once the final head is read, leaving the body
  // pending for ReadBody.
  Status SendOnce(const ClientRequest& req, const HeadCallback* on_head, const BodySink* sink,
                  ClientResponse& out, bool* retryable, bool head_only) {
    *retryable = false;
    if (aborted.load(std::memory_order_acquire)) return AbortedStatus();
    if (body_pending) Close();  // the last body was not read to its end: its framing is lost
    const bool reused = connected() && used;
    if (connected() && IsStale()) Close();
    if (!connected()) SOVAI_RETURN_IF_ERROR(Connect());
    used = true;

    http::request<http::empty_body> hdr;
    hdr.version(11);
    hdr.method_string(req.method);
    hdr.target(req.target);
    for (const auto& [k, v] : req.headers) hdr.insert(k, v);
    if (!req.headers.Has("Host")) {
      bool default_port = opts.port == (opts.tls ? 443 : 80);
      std::string host =
          opts.host.find(':') != std::string::npos ? "[" + opts.host + "]" : opts.host;
      hdr.set(http::field::host, default_port ? host : host + ":" + std::to_string(opts.port));
    }
    if (!req.headers.Has("User-Agent") && !opts.user_agent.empty()) {
      hdr.set(http::field::user_agent, opts.user_agent);
    }
    bool chunked = false;
    if (req.source) {
      if (req.source_length) {
        hdr.content_length(*req.source_length);
      } else {
        hdr.chunked(true);
        chunked = true;
      }
    } else if (!req.body.empty() || req.method == "POST" || req.method == "PUT" ||
               req.method == "PATCH") {
      hdr.content_length(req.body.size());
    }
    const bool has_body = chunked || (req.source && req.source_length.value_or(0) > 0) ||
                          (!req.source && !req.body.empty());
    const bool expect = req.expect_continue && has_body;
    if (expect) hdr.set(http::field::expect, "100-continue");

    http::request_serializer<http::empty_body> sr(hdr);
    ErrorCode ec = WriteHeader(sr);
    if (ec) {
      *retryable = reused;
      return Err(ec, "sending the request to");
    }
    bool keep_alive = false;
    const bool head_request = req.method == "HEAD";
    const uint64_t max_body = opts.max_body_bytes;
    if (expect && WaitReadable(kDefaultExpectContinueWait)) {
      bool got_100 = false;
      Status st = ReadResponse(head_request, on_head, sink, max_body, out, true, &got_100,
                               &keep_alive, head_only);
      if (!st.ok()) {
        *retryable = reused && out.status == 0;  // never once a head was reported
        return st;
      }
      if (!got_100) {  // a final answer without our body
        out.body_not_sent = true;
        // The server expects no body, but the framing is ambiguous now: close after it.
        if (head_only) {
          LeaveBody(false);
        } else {
          Close();
        }
        return Status();
      }
    }
    Status body_status = SendBody(req, chunked);
    if (!body_status.ok()) {
      if (body_status.code() == base::StatusCode::kUnavailable && connected()) {
        // The server may have answered early (413) and closed: try to read that answer.
        Status st = ReadResponse(head_request, on_head, sink, max_body, out, false, nullptr,
                                 &keep_alive, head_only);
        if (st.ok()) {
          out.body_not_sent = true;
          if (head_only) {
            LeaveBody(false);
          } else {
            Close();
          }
          return Status();
        }
      }
      Close();
      return body_status;
    }
    Status st = ReadResponse(head_request, on_head, sink, max_body, out, false, nullptr,
                             &keep_alive, head_only);
    if (!st.ok()) {
      // EOF before any response byte on a reused connection: the server closed it meanwhile.
      *retryable = reused && out.status == 0 && !req.source;
      Close();
      return st;
    }
    if (head_only) {
      LeaveBody(keep_alive);
    } else if (!keep_alive) {
      Close();
    }
    return Status();
  }

  Status AbortedStatus() const {
    return base::CancelledError("request to " + opts.host + ":" + std::to_string(opts.port) +
                                " aborted");
  }

  Status Send(const ClientRequest& req, const HeadCallback* on_head, const BodySink* sink,
              ClientResponse& out, bool head_only = false) {
    bool retryable = false;
    Status st = SendOnce(req, on_head, sink, out, &retryable, head_only);
    if (!st.ok() && retryable) {
      Close();
      out = ClientResponse();
      st = SendOnce(req, on_head, sink, out, &retryable, head_only);
    }
    if (!st.ok()) {
      Close();
      // The closed socket surfaces as some network error; say what really happened.
      if (aborted.load(std::memory_order_acquire)) st = AbortedStatus();
    }
    return st;
  }

  Result<size_t> ReadBody(char* buf, size_t n) {
    if (!body_pending) {
      return base::FailedPreconditionError(
          "no response body is pending: call SendUntilHead first, and stop once ReadBody "
          "returned 0");
    }
    if (n == 0) return base::FailedPreconditionError("ReadBody needs room for at least one byte");
    if (aborted.load(std::memory_order_acquire)) {  // even when the rest is buffered already
      Close();
      return AbortedStatus();
    }
    Result<size_t> got = ReadBodyPiece(buf, n);
    if (!got.ok()) {
      Close();
      if (aborted.load(std::memory_order_acquire)) return AbortedStatus();
      return got.status();
    }
    if (*got == 0) {
      body_pending = false;
      if (!pending_keep_alive) Close();
    }
    return got;
  }

  // Bytes left in `buffer` after a complete response were sent beyond it: the framing is lost.
  bool HasReusableConnection() {
    return connected() && used && !body_pending && buffer.size() == 0 &&
           !aborted.load(std::memory_order_acquire) && !IsStale();
  }

  ClientOptions opts;
  asio::io_context io;
  std::unique_ptr<asio::ssl::context> ssl_ctx;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  bool used = false;  // the connection has carried a request
  // The parser of the response being read (its head, then its body piece by piece).
  std::optional<http::response_parser<http::buffer_body>> parser;
  // Pull mode: a response head was returned and its body is not read to its end yet.
  bool body_pending = false;
  bool pending_keep_alive = false;  // of that response: the connection may carry the next one
  // Set by Abort() from any thread; sticky.
  std::atomic<bool> aborted{false};
};

HttpClient::HttpClient(ClientOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>(options_)) {}

HttpClient::~HttpClient() {
  if (impl_) impl_->Close();
}

void HttpClient::Close() { impl_->Close(); }

void HttpClient::Abort() { impl_->Abort(); }

Result<ClientResponse> HttpClient::Send(const ClientRequest& request) {
  ClientResponse out;
  try {
    SOVAI_RETURN_IF_ERROR(impl_->Send(request, nullptr, nullptr, out));
  } catch (const std::exception& e) {
    impl_->Close();
    return base::InternalError(std::string("HTTP client: ") + e.what());
  }
  return out;
}

Result<ClientResponse> HttpClient::Send(const ClientRequest& request, const BodySink& sink) {
  ClientResponse out;
  try {
    SOVAI_RETURN_IF_ERROR(impl_->Send(request, nullptr, &sink, out));
  } catch (const std::exception& e) {
    impl_->Close();
    return base::InternalError(std::string("HTTP client: ") + e.what());
  }
  return out;
}

Result<ClientResponse> HttpClient::Send(const ClientRequest& request, const HeadCallback& on_head,
                                        const BodySink& sink) {
  ClientResponse out;
  try {
    SOVAI_RETURN_IF_ERROR(impl_->Send(request, &on_head, &sink, out));
  } catch (const std::exception& e) {
    impl_->Close();
    return base::InternalError(std::string("HTTP client: ") + e.what());
  }
  return out;
}

Result<ClientResponse> HttpClient::SendUntilHead(const ClientRequest& request) {
  ClientResponse out;
  try {
    SOVAI_RETURN_IF_ERROR(impl_->Send(request, nullptr, nullptr, out, /*head_only=*/true));
  } catch (const std::exception& e) {
    impl_->Close();
    return base::InternalError(std::string("HTTP client: ") + e.what());
  }
  return out;
}

Result<size_t> HttpClient::ReadBody(char* buf, size_t n) {
  try {
    return impl_->ReadBody(buf, n);
  } catch (const std::exception& e) {
    impl_->Close();
    return base::InternalError(std::string("HTTP client: ") + e.what());
  }
}

bool HttpClient::HasReusableConnection() { return impl_->HasReusableConnection(); }

Result<ClientResponse> HttpClient::ReadSse(const ClientRequest& request,
                                           std::function<bool(const SseEvent&)> on_event) {
  ClientRequest req = request;
  if (!req.headers.Has("Accept")) req.headers.Set("Accept", "text/event-stream");
  bool stopped = false;
  SseParser parser([&](const SseEvent& e) {
    if (!on_event(e)) {
      stopped = true;
      return false;
    }
    return true;
  });
  BodySink sink = [&](std::string_view piece) -> Status {
    if (!parser.Feed(piece)) return base::CancelledError("SSE reader stopped");
    return Status();
  };
  ClientResponse out;
  Status st;
  try {
    st = impl_->Send(req, nullptr, &sink, out);
  } catch (const std::exception& e) {
    impl_->Close();
    return base::InternalError(std::string("HTTP client: ") + e.what());
  }
  if (!st.ok() && !stopped) return st;
  if (stopped) impl_->Close();
  return out;
}

Result<ClientResponse> HttpClient::Get(std::string target) {
  ClientRequest r;
  r.method = "GET";
  r.target = std::move(target);
  return Send(r);
}

Result<ClientResponse> HttpClient::Post(std::string target, std::string body,
                                        std::string content_type) {
  ClientRequest r;
  r.method = "POST";
  r.target = std::move(target);
  r.body = std::move(body);
  r.headers.Set("Content-Type", std::move(content_type));
  return Send(r);
}

Result<ClientResponse> HttpClient::Put(std::string target, std::string body,
                                       std::string content_type) {
  ClientRequest r;
  r.method = "PUT";
  r.target = std::move(target);
  r.body = std::move(body);
  r.headers.Set("Content-Type", std::move(content_type));
  return Send(r);
}

Result<ClientResponse> HttpClient::Delete(std::string target) {
  ClientRequest r;
  r.method = "DELETE";
  r.target = std::move(target);
  return Send(r);
}

}  // namespace sovai::net
