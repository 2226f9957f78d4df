// Blocking HTTP/1.1 client (http and https) for the CLI and tests.
//
//   net::HttpClient client({.host = "127.0.0.1", .port = 8080});
//   SOVAI_ASSIGN_OR_RETURN(auto res, client.Get("/v1/jobs"));
//   if (res.status != 200) ...
//
// One client = one connection, reused for sequential requests (keep-alive) and re-opened
// transparently when the server closed it between requests. A pool of connections is a pool of
// clients: HasReusableConnection() says whether one may go back to it. Not thread-safe: use one
// client per thread at a time; the one exception is HttpClient::Abort(), which another thread may
// call while a request is in progress. No Boost/Asio/OpenSSL type appears in this header.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "net/http.h"
#include "net/limits.h"

namespace sovai::net {

struct ClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 80;
  bool tls = false;
  // TLS: verify the server certificate against `ca_file` (PEM) or the system store when empty.
  bool verify_peer = true;
  std::string ca_file;

  std::chrono::milliseconds connect_timeout = kDefaultConnectTimeout;
  // Longest wait for any single read or write to make progress.
  std::chrono::milliseconds read_timeout = kDefaultClientReadTimeout;
  uint64_t max_body_bytes = kDefaultClientMaxBodyBytes;  // buffered responses only
  size_t max_header_bytes = kDefaultClientMaxHeaderBytes;
  std::string user_agent = "sovai";
};

// "http://host:port" / "https://host" → options (port defaults 80/443). InvalidArgument otherwise.
base::Result<ClientOptions> ClientOptionsFromUrl(std::string_view url);

// Pull source for a streamed request body: fills up to `n` bytes of `buf`, returns the count, 0
// at the end. An error aborts the request (the connection is closed).
using BodySource = std::function<base::Result<size_t>(char* buf, size_t n)>;
// Push sink for a streamed response body: receives consecutive pieces. An error aborts.
using BodySink = std::function<base::Status(std::string_view piece)>;

struct ClientRequest {
  std::string method = "GET";
  std::string target = "/";  // origin-form, already percent-encoded
  Headers headers;           // Host, User-Agent, Content-Length added when absent
  std::string body;          // used when `source` is empty
  BodySource source;         // streamed body
  // For `source`: the exact length (Content-Length), or nullopt for chunked encoding.
  std::optional<uint64_t> source_length;
  // Send "Expect: 100-continue" and wait (up to kDefaultExpectContinueWait) for the server's
  // interim answer before the body; a final answer instead (e.g. 413) is returned without
  // sending the body.
  bool expect_continue = false;
};

struct ClientResponse {
  int status = 0;
  Headers headers;
  std::string body;  // empty when a sink consumed it
  // True when the response was answered without our body being sent (expect_continue).
  bool body_not_sent = false;
};

// Receives the head (status and headers; `body` empty) of the final response, once, after the
// status line and header fields are parsed and before any piece of the body reaches the sink.
// Interim 1xx answers are not reported. An error aborts the request (the connection is closed)
// and is what Send returns.
using HeadCallback = std::function<base::Status(const ClientResponse& head)>;

// One Server-Sent Event.
struct SseEvent {
  std::string event;  // "" when the event had no "event:" field ("message" by the spec)
  std::string data;   // data lines joined with '\n'
  std::string id;
};

// Incremental text/event-stream parser (also used by HttpClient::ReadSse). Feed arbitrary
// pieces; `on_event` is called for each complete event; returning false stops (Feed returns
// false then).
class SseParser {
 public:
  explicit SseParser(std::function<bool(const SseEvent&)> on_event)
      : on_event_(std::move(on_event)) {}
  bool Feed(std::string_view piece);

 private:
  bool DispatchLine(std::string_view line);
  std::function<bool(const SseEvent&)> on_event_;
  std::string line_;
  SseEvent current_;
  bool has_data_ = false;
  bool skip_lf_ = false;
};

class HttpClient {
 public:
  explicit HttpClient(ClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends `request` and buffers the response body (up to max_body_bytes: ResourceExhausted).
  // Errors: Unavailable (connection refused / reset / closed early), DeadlineExceeded (connect
  // or read timeout), InvalidArgument (bad request), Internal (TLS failure, malformed response).
  base::Result<ClientResponse> Send(const ClientRequest& request);
  // Same, streaming the body to `sink` instead of buffering it (no size limit).
  base::Result<ClientResponse> Send(const ClientRequest& request, const BodySink& sink);
  // Same, calling `on_head` with the response head before the first body piece reaches `sink`:
  // a proxy forwards the status and headers before the body is complete. Errors as above, plus
  // whatever `on_head` or `sink` return. When the client re-sends a request on a fresh connection
  // (a kept-alive connection the server had closed), it does so only before any head arrived, so
  // `on_head` is never called twice.
  base::Result<ClientResponse> Send(const ClientRequest& request, const HeadCallback& on_head,
                                    const BodySink& sink);
  // Pull form of the above, for a caller that forwards the body from the thread that sends (a
  // proxy): sends `request`, reads the final response head and returns it (`body` empty),
  // leaving the body to ReadBody. Errors and re-sending as for Send. The body must be read to
  // its end (ReadBody returns 0) before the connection can carry another request; a request
  // started before that, Close(), or the destructor closes the connection instead.
  base::Result<ClientResponse> SendUntilHead(const ClientRequest& request);
  // Reads the next piece of the body of the response SendUntilHead returned into buf[0, n), as
  // soon as the server has sent some (one socket read: a Server-Sent Event is not held back
  // for the next). Returns the bytes read, 0 at the end of the body (and for HEAD requests and
  // bodyless statuses). Errors: FailedPrecondition when no body is pending or n is 0; otherwise
  // as for Send (Cancelled after Abort), and the connection is then closed.
  base::Result<size_t> ReadBody(char* buf, size_t n);

  // True when the client holds a connection that its last request left ready for the next: the
  // response was read to its end, neither side said "Connection: close", the client was not
  // aborted, and the server has not closed it since (a non-blocking look at the socket). A
  // connection pool keeps a client only while this holds.
  bool HasReusableConnection();

  // Sends `request` and parses the body as Server-Sent Events; `on_event` returning false stops
  // reading (and closes the connection). Returns the response head once the stream ends.
  base::Result<ClientResponse> ReadSse(const ClientRequest& request,
                                       std::function<bool(const SseEvent&)> on_event);

  // Conveniences.
  base::Result<ClientResponse> Get(std::string target);
  base::Result<ClientResponse> Post(std::string target, std::string body,
                                    std::string content_type = "application/json");
  base::Result<ClientResponse> Put(std::string target, std::string body,
                                   std::string content_type = "application/octet-stream");
  base::Result<ClientResponse> Delete(std::string target);

  // Closes the connection (the next request opens a new one).
  void Close();
  // Thread-safe: may be called from any thread, also while another thread is inside Send. The
  // request in progress stops at once (its connection is closed, which tells the server the
  // client went away) and fails with Cancelled; so does every later request on this client.
  // Must not be called concurrently with the destructor.
  void Abort();
  const ClientOptions& options() const { return options_; }

 private:
  struct Impl;
  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sovai::net
