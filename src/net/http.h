// HTTP/1.1 server: router, requests with streaming bodies, responses (fixed, streamed, chunked,
// Server-Sent Events, file ranges), limits, stats, graceful shutdown. The client is in client.h.
//
//   net::Router router;
//   router.Get("/health", [](net::Request&) { return net::Response::Text(200, "ok\n"); },
//              {.inline_handler = true});
//   router.Put("/v1/blobs/{name}", [](net::Request& req) {
//     char buf[65536];
//     for (;;) {
//       auto n = req.body().Read(buf, sizeof buf);   // blocks; fails on disconnect / limit
//       if (!n.ok()) return net::Response::Error(n.status());
//       if (*n == 0) break;
//       ...
//     }
//     return net::Response::Text(201, "stored\n");
//   }, {.max_body_bytes = 5ull << 30});
//   net::Server server(std::move(router));
//   SOVAI_RETURN_IF_ERROR(server.Start({.listen = "127.0.0.1:0"}));
//   ... server.port() ...
//   server.Shutdown();   // also done by ~Server
//
// Threading: sockets are driven by `io_threads` I/O threads (C++20 coroutines on Boost.Asio; a
// connection stays on one I/O thread). A handler runs on a worker thread (a pool that grows on
// demand up to `max_worker_threads`) and may block: reading the body and writing a streamed
// response block that worker, not an I/O thread. Routes with `inline_handler` run on the I/O
// thread with their body already buffered; they must not block. Streamed/SSE/file response bodies
// always run on a worker. Handlers may be called concurrently from many threads.
//
// No Boost/Asio/OpenSSL type appears in this header.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "net/limits.h"

namespace sovai::net {

// ---------------------------------------------------------------------------------------------
// Headers: an ordered list of fields; names compare case-insensitively. Values are as received
// (leading/trailing whitespace removed by the parser).
class Headers {
 public:
  using Field = std::pair<std::string, std::string>;

  // The first value of `name`, or nullopt.
  std::optional<std::string_view> Get(std::string_view name) const;
  // Every value of `name`, in order.
  std::vector<std::string_view> GetAll(std::string_view name) const;
  bool Has(std::string_view name) const { return Get(name).has_value(); }
  // Appends a field (repeated names are allowed).
  void Add(std::string name, std::string value);
  // Replaces every field `name` by one field.
  void Set(std::string name, std::string value);
  // Removes every field `name`.
  void Remove(std::string_view name);
  // Removes every field (keeping the storage for reuse).
  void Clear() { fields_.clear(); }

  size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }
  std::vector<Field>::const_iterator begin() const { return fields_.begin(); }
  std::vector<Field>::const_iterator end() const { return fields_.end(); }

 private:
  std::vector<Field> fields_;
};

// Case-insensitive ASCII comparison, as HTTP field names need.
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// ---------------------------------------------------------------------------------------------
// The request body as a blocking stream. Not thread-safe: one reader (the handler) at a time.
class BodyReader {
 public:
  virtual ~BodyReader() = default;

  // Reads up to `n` bytes of the body into `buf` and returns how many; 0 means the body is
  // complete (its last byte has been read and, for chunked bodies, the terminating chunk seen).
  // Returns as soon as some bytes are available. For `Expect: 100-continue` requests the first
  // call sends "100 Continue". Errors:
  //   ResourceExhausted  the body exceeds the route's max_body_bytes (the server answers 413
  //                      whatever the handler returns, and closes the connection);
  //   Unavailable        the client disconnected or sent a malformed body;
  //   DeadlineExceeded   the client stopped sending (read_timeout / min_body_bytes_per_s).
  // After an error every later call returns the same error.
  virtual base::Result<size_t> Read(char* buf, size_t n) = 0;

  // Reads the rest of the body into a string. Same errors as Read().
  base::Result<std::string> ReadAll();
  // Reads and discards the rest of the body; returns how many bytes were skipped.
  base::Result<uint64_t> Discard();
};

// A body read from a string held in memory, handed out in pieces of at most `max_read_bytes`
// (to exercise a consumer's piecewise reads): an object staged by the server itself, or a
// request body in a test. Never fails; 0 at the end.
class StringBodyReader final : public BodyReader {
 public:
  explicit StringBodyReader(std::string data, size_t max_read_bytes = SIZE_MAX)
      : data_(std::move(data)), max_read_bytes_(max_read_bytes) {}
  base::Result<size_t> Read(char* buf, size_t n) override;

 private:
  std::string data_;
  size_t max_read_bytes_;
  size_t pos_ = 0;
};

// The response body as a blocking sink, handed to a streaming writer on a worker thread.
class BodyWriter {
 public:
  virtual ~BodyWriter() = default;

  // Sends `data` to the client (as one chunk when the response is chunked). Blocks until the
  // bytes are handed to the socket: that is the backpressure a producer (token generation, a
  // file) must respect. Errors — after which the producer should stop and return:
  //   Unavailable        the client went away (or the server is shutting down);
  //   DeadlineExceeded   the client stopped reading for write_timeout;
  //   InvalidArgument    more bytes than the declared Content-Length.
  // Empty `data` is a no-op.
  virtual base::Status Write(std::string_view data) = 0;
  // Total bytes accepted by Write() so far.
  virtual uint64_t bytes_written() const = 0;
};

// Server-Sent Events on top of a BodyWriter (text/event-stream framing).
class SseWriter {
 public:
  explicit SseWriter(BodyWriter& out) : out_(out) {}
  // Writes one event. `data` may contain newlines (each line becomes a "data:" line); `event`
  // and `id`, when non-empty, must not contain CR or LF (InvalidArgument otherwise).
  base::Status WriteEvent(std::string_view data, std::string_view event = {},
                          std::string_view id = {});
  // Writes a comment line (": text"); an empty comment is the usual keep-alive.
  base::Status WriteComment(std::string_view text = {});
  // Tells the client how long to wait before reconnecting.
  base::Status WriteRetry(std::chrono::milliseconds retry);

 private:
  BodyWriter& out_;
};

// ---------------------------------------------------------------------------------------------
// One parsed request. Owned by the server for the duration of the handler call.
class Request {
 public:
  Request() = default;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // "GET", "PUT", ... exactly as sent (methods are case-sensitive).
  std::string_view method() const { return method_; }
  // The raw request-target as sent: "/b/k%20ey?x=1&y". S3 SigV4 signs this.
  std::string_view target() const { return target_; }
  // The raw (still percent-encoded) path and query parts of the target; no '?' in either.
  std::string_view raw_path() const { return raw_path_; }
  std::string_view raw_query() const { return raw_query_; }
  // The percent-decoded path ("/b/k ey"). '+' is not a space in paths.
  const std::string& path() const { return path_; }
  // The route pattern that matched ("/v1/jobs/{id}"), "" for the fallback handler.
  std::string_view route_pattern() const { return route_pattern_; }

  // A path parameter by name ("id" for "{id}", "key" for "{key...}"), percent-decoded.
  std::optional<std::string_view> param(std::string_view name) const;
  const std::vector<std::pair<std::string, std::string>>& params() const { return params_; }
  // The first query parameter `name` (decoded: %XX and '+' as space); "" for "?flag".
  std::optional<std::string_view> query(std::string_view name) const;
  // All query parameters, decoded, in order of appearance.
  const std::vector<std::pair<std::string, std::string>>& query_params() const {
    return query_params_;
  }

  const Headers& headers() const { return headers_; }
  std::optional<std::string_view> header(std::string_view name) const { return headers_.Get(name); }
  // 10 for HTTP/1.0, 11 for HTTP/1.1.
  int version() const { return version_; }
  // Content-Length when the request declared one; nullopt for chunked or absent.
  std::optional<uint64_t> content_length() const { return content_length_; }
  bool chunked() const { return chunked_; }
  // Whether the request carries a body at all (Content-Length > 0 or chunked).
  bool has_body() const { return chunked_ || content_length_.value_or(0) > 0; }
  // Peer "ip:port".
  std::string_view remote_address() const { return remote_address_; }
  bool is_tls() const { return is_tls_; }

  // The body stream. Always valid inside a handler (an empty body reads 0 at once).
  BodyReader& body();

  // --- Construction (used by the server and by tests) ---------------------------------------
  // Empties the request for the next one on the same connection: everything but the remote
  // address and the TLS flag is reset, and string/vector storage is kept for reuse.
  void Clear();
  // Parses `target` into raw_path/raw_query/path/query_params. InvalidArgument when the target
  // is not origin-form ("/..."), contains a bad %-escape, or decodes to a NUL byte.
  base::Status SetTarget(std::string_view target);
  void set_method(std::string method) { method_ = std::move(method); }
  void set_version(int version) { version_ = version; }
  Headers& mutable_headers() { return headers_; }
  void set_content_length(std::optional<uint64_t> n) { content_length_ = n; }
  void set_chunked(bool chunked) { chunked_ = chunked; }
  void set_remote_address(std::string address) { remote_address_ = std::move(address); }
  void set_is_tls(bool tls) { is_tls_ = tls; }
  void set_route(std::string_view pattern,
                 std::vector<std::pair<std::string, std::string>> params) {
    route_pattern_ = pattern;
    params_ = std::move(params);
  }
  // The reader body() returns; nullptr gives an empty body. Not owned; must outlive the call.
  void set_body_reader(BodyReader* reader) { body_ = reader; }

 private:
  std::string method_;
  std::string target_;
  std::string raw_path_;
  std::string raw_query_;
  std::string path_;
  std::string route_pattern_;
  std::vector<std::pair<std::string, std::string>> params_;
  std::vector<std::pair<std::string, std::string>> query_params_;
  Headers headers_;
  int version_ = 11;
  std::optional<uint64_t> content_length_;
  bool chunked_ = false;
  std::string remote_address_;
  bool is_tls_ = false;
  BodyReader* body_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// The raw bytes of a connection that switched protocols (a 101 answer to `Upgrade: websocket`),
// handed to Response::upgrade. One thread may Read while another Writes; Close may be called
// from any thread. Valid only during the Response::upgrade call.
class UpgradedStream {
 public:
  virtual ~UpgradedStream() = default;
  // Reads up to `n` bytes the client sent (first those that arrived with the request head).
  // Blocks until some arrive, with no timeout of its own (the owner bounds idleness and calls
  // Close). Returns 0 once the client closed its side. Errors: Unavailable (reset, Close, the
  // server's shutdown).
  virtual base::Result<size_t> Read(char* buf, size_t n) = 0;
  // Sends all of `data`. Errors: Unavailable (the client went away, Close), DeadlineExceeded
  // (the client read nothing for write_timeout).
  virtual base::Status Write(std::string_view data) = 0;
  // Closes the connection: a Read or Write in progress on another thread fails at once.
  // Idempotent.
  virtual void Close() = 0;
};
using UpgradeFn = std::function<void(UpgradedStream&)>;

// ---------------------------------------------------------------------------------------------
// A streaming body producer. Runs on a worker thread after the status line and headers are
// sent. Returning an error (or writing fewer bytes than a declared length) aborts the response:
// the connection is closed without the final chunk, so the client sees a truncated body.
using StreamFn = std::function<base::Status(BodyWriter&)>;
using SseFn = std::function<base::Status(SseWriter&)>;

class Response {
 public:
  // 200 with an empty body.
  Response() = default;

  // A fixed body.
  static Response Text(int status, std::string body,
                       std::string content_type = "text/plain; charset=utf-8");
  static Response Json(int status, std::string json_body);
  // No body (Content-Length: 0 unless status is 1xx/204/304).
  static Response Empty(int status);
  // An error rendered by the server's error renderer (problem+json by default) for `status`
  // with `message`; e.g. Error(404, "job 'x' not found").
  static Response Error(int status, std::string message);
  // From a Status: the HTTP status of HttpStatusFromCode(status.code()) and its message.
  static Response Error(const base::Status& status);

  // A streamed body. With `content_length` the response carries Content-Length and the writer
  // must write exactly that many bytes; without it, HTTP/1.1 clients get chunked encoding and
  // HTTP/1.0 clients a body delimited by closing the connection.
  static Response Stream(int status, std::string content_type, StreamFn writer,
                         std::optional<uint64_t> content_length = std::nullopt);
  // Server-Sent Events: 200, text/event-stream, Cache-Control: no-cache, chunked.
  static Response Sse(SseFn writer);
  // `length` bytes of a file starting at `offset`, streamed in kStreamChunkBytes pieces from a
  // worker. `length` = nullopt means "to the end of the file". The file is opened now (so a
  // missing file is an error here, not a truncated body). Errors: NotFound/PermissionDenied
  // from open, OutOfRange when offset/length go past the end of the file.
  static base::Result<Response> File(const std::string& path, uint64_t offset = 0,
                                     std::optional<uint64_t> length = std::nullopt,
                                     std::string content_type = "application/octet-stream");
  // Same from an open file descriptor, whose ownership passes to the response (closed when the
  // response is destroyed). Errors as File(); the fd is closed on error too.
  static base::Result<Response> FileFd(int fd, uint64_t offset = 0,
                                       std::optional<uint64_t> length = std::nullopt,
                                       std::string content_type = "application/octet-stream");

  int status = 200;
  Headers headers;

  // The body kinds. Exactly one is used: `stream` when set, else `body`.
  std::string body;
  StreamFn stream;
  // For `stream`: the declared length (Content-Length) or nullopt (chunked).
  std::optional<uint64_t> stream_length;
  // Set by Error(): the server's error renderer builds the body from (status, error_message).
  std::optional<std::string> error_message;
  // Taking over the connection: with status 101 (and the Connection and Upgrade fields the
  // protocol needs), the server sends the head, then runs `upgrade` on a worker with the
  // connection's byte stream, and closes the connection when it returns. A 101 without it, or
  // one to an HTTP/1.0 request, is answered 500; with any other status it is ignored.
  UpgradeFn upgrade;
};

// The HTTP status used for a Status code (NotFound→404, InvalidArgument→400,
// PermissionDenied→403, Unauthenticated→401, AlreadyExists/Aborted/FailedPrecondition→409,
// ResourceExhausted→429, OutOfRange→416, Unimplemented→501, Unavailable→503,
// DeadlineExceeded→504, others→500).
int HttpStatusFromCode(base::StatusCode code);
// "Not Found" for 404, "" when unknown.
std::string_view HttpReasonPhrase(int status);

// A byte range from a Range header, resolved against a representation of `size` bytes.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};
// Parses "bytes=a-b", "bytes=a-", "bytes=-n" (a single range). Returns:
//   nullopt             the header is absent/not a single bytes range → serve the whole body (200);
//   OutOfRange error    unsatisfiable (answer 416 with "Content-Range: bytes */size");
//   a ByteRange         answer 206 with "Content-Range: bytes a-b/size".
base::Result<std::optional<ByteRange>> ParseRange(std::string_view header, uint64_t size);

// Percent-decoding. With `plus_is_space` ('+' → ' ') for query strings. InvalidArgument for a
// malformed escape ("%zz", "%4").
base::Result<std::string> PercentDecode(std::string_view in, bool plus_is_space = false);
// Percent-encodes everything except unreserved characters (A-Z a-z 0-9 - . _ ~), and '/' when
// `keep_slash`.
std::string PercentEncode(std::string_view in, bool keep_slash = false);

// ---------------------------------------------------------------------------------------------
using Handler = std::function<Response(Request&)>;

struct RouteOptions {
  // Run on the I/O thread with the body buffered (up to max_body_bytes) before the call. For
  // cheap, non-blocking handlers only (health, metrics).
  bool inline_handler = false;
  // Run a request without a body on the I/O thread when this says so, the others on a worker:
  // for requests whose handling is short and never waits on a lock or the network (a point read
  // from a WAL database), so that a small read costs no hand-off to a worker and back (S3's
  // object GETs: bench/s3). A streamed response body is still written from a worker.
  std::function<bool(const Request&)> inline_if;
  // Largest body accepted. A Content-Length over it is answered 413 before any body byte is
  // read; a chunked body that grows over it fails BodyReader::Read and is answered 413.
  uint64_t max_body_bytes = kDefaultMaxBodyBytes;
};

// Routes requests by method and path pattern. Build it completely before handing it to a Server;
// it is immutable (and so thread-safe) afterwards.
//
// Patterns are matched segment by segment on the raw path (so "%2F" stays inside a segment):
//   "/v1/jobs"              literal segments
//   "/v1/jobs/{id}"         {name} matches one non-empty segment
//   "/v1/jobs/{id}/logs"
//   "/{bucket}/{key...}"    a trailing {name...} matches the rest of the path (possibly empty,
//                           slashes included)
// Literal segments win over parameters, which win over catch-alls. When the path matches some
// pattern but not for this method the answer is 405 with Allow; when nothing matches, the
// fallback handler runs (404 without one). HEAD is served by the GET route when no HEAD route
// exists (with the body dropped).
class Router {
 public:
  Router();
  ~Router();
  Router(Router&&) noexcept;
  Router& operator=(Router&&) noexcept;

  // Adds a route. A malformed pattern or a duplicate (method, pattern) is a bug (SOVAI_CHECK).
  void Add(std::string method, std::string pattern, Handler handler, RouteOptions options = {});
  void Get(std::string pattern, Handler h, RouteOptions o = {}) {
    Add("GET", std::move(pattern), std::move(h), o);
  }
  void Post(std::string pattern, Handler h, RouteOptions o = {}) {
    Add("POST", std::move(pattern), std::move(h), o);
  }
  void Put(std::string pattern, Handler h, RouteOptions o = {}) {
    Add("PUT", std::move(pattern), std::move(h), o);
  }
  void Delete(std::string pattern, Handler h, RouteOptions o = {}) {
    Add("DELETE", std::move(pattern), std::move(h), o);
  }
  // Handles every request no route matched, whatever its method.
  void SetFallback(Handler handler, RouteOptions options = {});

  struct Match {
    enum Kind { kFound, kNotFound, kMethodNotAllowed } kind = kNotFound;
    // For kFound: the route (or the fallback). Valid while the Router lives.
    const Handler* handler = nullptr;
    const RouteOptions* options = nullptr;
    std::string_view pattern;  // "" for the fallback
    int route_index = -1;      // stable small integer per route; -1 when not found
    std::vector<std::pair<std::string, std::string>> params;  // decoded
    std::string allow;  // for kMethodNotAllowed: "GET, HEAD, PUT"
  };
  // Matches `method` and the raw path. A path whose segment has a malformed %-escape matches
  // nothing (kNotFound) — unless a fallback exists, which then gets it.
  Match Find(std::string_view method, std::string_view raw_path) const;

  // Number of routes (route_index is in [0, route_count()); the fallback is route_count()).
  int route_count() const;
  // The pattern and method of a route_index.
  std::pair<std::string_view, std::string_view> route_key(int route_index) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------------
// One finished request, for access logs.
struct AccessLogEntry {
  std::string_view method;
  std::string_view path;     // raw path (no query: it may carry credentials)
  std::string_view pattern;  // route pattern, "" for fallback / unmatched
  std::string_view remote_address;
  int status = 0;
  std::chrono::microseconds duration{0};
  uint64_t bytes_in = 0;   // body bytes read
  uint64_t bytes_out = 0;  // body bytes written
};

// Renders the body of server-generated errors (404, 405, 413, 431, 500, ...) and of
// Response::Error(). Sets content type and body on `response` (status is already set).
// Default: application/problem+json {"type":"about:blank","title":..,"status":..,"detail":..}.
using ErrorRenderer = std::function<void(const Request* request, Response& response)>;

struct ServerOptions {
  // "host:port"; host may be an IPv4/IPv6 literal ("[::1]:0"), "localhost" or "0.0.0.0".
  // Port 0 picks a free port (see Server::port()).
  std::string listen = "127.0.0.1:0";
  int io_threads = kDefaultIoThreads;
  int max_worker_threads = kDefaultMaxWorkerThreads;

  size_t max_header_bytes = kDefaultMaxHeaderBytes;
  size_t max_header_count = kDefaultMaxHeaderCount;
  size_t max_target_bytes = kDefaultMaxTargetBytes;
  size_t max_connections = kDefaultMaxConnections;
  std::chrono::milliseconds header_timeout = kDefaultHeaderTimeout;
  std::chrono::milliseconds read_timeout = kDefaultReadTimeout;
  std::chrono::milliseconds write_timeout = kDefaultWriteTimeout;
  std::chrono::milliseconds idle_timeout = kDefaultIdleTimeout;
  uint64_t min_body_bytes_per_s = kDefaultMinBodyBytesPerS;          // 0 disables the rate check
  std::chrono::milliseconds shutdown_grace = kDefaultShutdownGrace;  // for ~Server / Stop()

  // TLS: both set → HTTPS only on this listener. PEM files.
  std::string tls_cert_file;
  std::string tls_key_file;

  // Value of the Server header; empty omits it.
  std::string server_name = "sovai";
  // Called after each request (on an I/O or worker thread; must be thread-safe and fast).
  std::function<void(const AccessLogEntry&)> access_log;
  // Overrides the default problem+json error bodies.
  ErrorRenderer error_renderer;
};

struct RequestCount {
  std::string pattern;  // route pattern; "" = fallback, "<unmatched>" = 404/405 or bad request
  std::string method;   // the route's method, or GET/HEAD/POST/PUT/DELETE/PATCH/OPTIONS/OTHER
  int status = 0;
  uint64_t count = 0;
};

struct ServerStats {
  uint64_t open_connections = 0;
  uint64_t total_connections = 0;
  uint64_t rejected_connections = 0;  // over max_connections
  uint64_t active_requests = 0;
  uint64_t bytes_in = 0;               // all bytes read from sockets
  uint64_t bytes_out = 0;              // all bytes written to sockets
  std::vector<RequestCount> requests;  // sorted by (pattern, method, status)
};

// An HTTP/1.1 server on one listener. Thread-safe: Stats/port/address may be called from any
// thread; Start and Shutdown from the owner.
class Server {
 public:
  explicit Server(Router router);
  // Shuts down with options.shutdown_grace when still running.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts the threads. Errors: InvalidArgument (bad listen address, TLS
  // files unreadable/invalid), Unavailable/AlreadyExists-like errno statuses from bind.
  // Call once.
  base::Status Start(ServerOptions options);

  // Stops accepting, lets in-flight requests finish for up to `grace`, closes idle keep-alive
  // connections at once (and busy ones when the grace ends), waits for handlers to return, and
  // joins the threads. Idempotent. Handlers must return once their BodyReader/BodyWriter fails.
  void Shutdown(std::chrono::milliseconds grace);
  void Stop() { Shutdown(options_.shutdown_grace); }

  // The bound address ("127.0.0.1:43121") and port, valid after Start.
  std::string address() const;
  uint16_t port() const;

  ServerStats Stats() const;

 private:
  struct Impl;
  ServerOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sovai::net
