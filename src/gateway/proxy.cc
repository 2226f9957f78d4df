// The reverse proxy. Everything happens on the server worker that runs the handler, then on the
// one that runs the streamed response's writer: no thread of its own, no queue. Forward sends the
// request with a pooled net::HttpClient (SendUntilHead), answers with the head; the body is read
// with HttpClient::ReadBody, either whole right there (small, known length) or piece by piece by
// the response writer, which writes each piece to the client before it reads the next. An
// Upstream holds the connection and the replica's lease until the body was read to its end (then
// the connection goes back to the pool) or abandoned (then it is closed).
#include "gateway/proxy.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "base/json.h"
#include "gateway/upstream_pool.h"
#include "net/client.h"

namespace sovai::gateway {

using base::Result;
using base::Status;

namespace {

// Bytes asked of the client's BodyReader per read while buffering the request body.
constexpr size_t kBodyReadBytes = 16 * 1024;  // on the worker's stack
// Largest piece read from the replica and written to the client in one go while streaming (one
// buffer per streamed response). An SSE event is written as soon as it is read, whatever this is.
constexpr size_t kResponsePieceBytes = 64 * 1024;

constexpr std::array<std::string_view, 6> kHopByHopFields = {
    "Connection", "Keep-Alive", "TE", "Trailer", "Transfer-Encoding", "Upgrade"};

std::string_view TrimSpaceTab(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && net::EqualsIgnoreCase(s.substr(0, prefix.size()), prefix);
}

bool IsIdempotent(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "PUT" || method == "DELETE" ||
         method == "OPTIONS" || method == "TRACE";
}

// Statuses whose responses never carry a body (RFC 9110 §6.4.1).
bool IsBodylessStatus(int status) {
  return (status >= 100 && status < 200) || status == 204 || status == 304;
}

// An origin-form target that can go on a request line as is: "/..." without controls or spaces.
bool IsOriginForm(std::string_view target) {
  if (target.empty() || target.front() != '/') return false;
  return std::none_of(target.begin(), target.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

// The Content-Length of a response head, when it has exactly one well-formed value.
std::optional<uint64_t> ContentLength(const net::Headers& headers) {
  auto values = headers.GetAll("Content-Length");
  if (values.size() != 1) return std::nullopt;
  std::string_view v = TrimSpaceTab(values[0]);
  uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || ptr != v.data() + v.size() || v.empty()) return std::nullopt;
  return n;
}

// The client's IP from "ip:port" (IPv6 addresses come without brackets: "::1:5000").
std::string_view PeerIp(std::string_view remote_address) {
  size_t colon = remote_address.rfind(':');
  return colon == std::string_view::npos ? remote_address : remote_address.substr(0, colon);
}

net::Headers UpstreamHeaders(const net::Request& request) {
  net::Headers headers = request.headers();
  RemoveHopByHopHeaders(headers);
  for (std::string_view name : {"Host", "Content-Length", "Expect", "X-Forwarded-For",
                                "X-Forwarded-Proto", "X-Forwarded-Host"}) {
    headers.Remove(name);
  }
  std::string forwarded_for;
  for (std::string_view v : request.headers().GetAll("X-Forwarded-For")) {
    v = TrimSpaceTab(v);
    if (v.empty()) continue;
    forwarded_for.append(v).append(", ");
  }
  forwarded_for.append(PeerIp(request.remote_address()));
  headers.Set("X-Forwarded-For", std::move(forwarded_for));
  headers.Set("X-Forwarded-Proto", request.is_tls() ? "https" : "http");
  if (auto host = request.header("Host")) headers.Set("X-Forwarded-Host", std::string(*host));
  return headers;
}

// Reads the whole request body, up to `max_bytes`.
Result<std::string> ReadRequestBody(net::Request& request, uint64_t max_bytes) {
  auto too_large = [&] {
    return base::ResourceExhaustedError("request body exceeds the gateway limit of " +
                                        std::to_string(max_bytes) +
                                        " bytes; send a smaller request");
  };
  if (request.content_length() && *request.content_length() > max_bytes) return too_large();
  std::string body;
  // Read straight into the string when the length is known; otherwise piece by piece (the
  // string is not grown by a whole read buffer each time: zero-filling it costs).
  if (request.content_length()) body.resize(static_cast<size_t>(*request.content_length()));
  size_t filled = 0;
  char piece[kBodyReadBytes];
  for (;;) {
    const bool into_body = filled < body.size();
    char* dest = into_body ? body.data() + filled : piece;
    size_t room = into_body ? body.size() - filled : sizeof piece;
    Result<size_t> n = request.body().Read(dest, room);
    if (!n.ok()) {
      if (n.status().code() == base::StatusCode::kResourceExhausted) return too_large();
      return n.status();
    }
    if (*n == 0) break;
    if (into_body) {
      filled += *n;
    } else {
      if (body.size() + *n > max_bytes) return too_large();
      body.append(piece, *n);
      filled = body.size();
    }
  }
  body.resize(filled);  // a body shorter than its Content-Length fails Read before this
  return body;
}

// One forwarded request's hold on its replica: the lease that counts the request there, and the
// client whose connection carries the answer. The connection goes back to the pool only once the
// answer was read to its end (Finish); any other end (a body cut short, a client that left, an
// answer never read) closes it, which tells the replica to stop.
//
// Shared (shared_ptr) by Forward and the streamed Response's writer; used by one thread at a time
// (the server runs the handler, then the writer).
class Upstream {
 public:
  Upstream(UpstreamPool* pool, ReplicaSet::Lease lease) : pool_(pool), lease_(std::move(lease)) {}
  // An answer not read to its end: the connection is closed first, then the lease released.
  ~Upstream() = default;
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  ReplicaSet::Lease& lease() { return lease_; }
  // The client whose request was answered with a head; its body is still to be read.
  void Attach(std::unique_ptr<net::HttpClient> client) { client_ = std::move(client); }

  // The answer was read to its end: the connection to the pool (which keeps it only if it can
  // carry another request), the lease released.
  void Finish() {
    if (pool_ != nullptr && client_ != nullptr) pool_->Give(std::move(client_));
    client_.reset();
    lease_.Release();
  }
  // The answer will not be read to its end: the connection closed, the lease released.
  void Abandon() {
    client_.reset();
    lease_.Release();
  }

  // Reads the body's first piece (at most `capacity` bytes, or its end) into the buffer that Pipe
  // goes on with, and keeps it for ReadAll or Pipe: until then nothing of the answer has gone to
  // the client, so a replica that dies between its head and its body can still be replaced. On
  // failure the connection is closed (the lease is left to the caller, which may retry elsewhere).
  Status ReadFirstPiece(size_t capacity) {
    buffer_ = std::make_unique_for_overwrite<char[]>(capacity);  // not zeroed: overwritten
    buffer_size_ = capacity;
    Result<size_t> n = client_->ReadBody(buffer_.get(), capacity);
    if (!n.ok()) {
      client_.reset();
      return n.status();
    }
    first_length_ = *n;
    body_ended_ = *n == 0;
    return Status();
  }

  // Reads the rest of the body into `out`, which holds at most `max_bytes` (a Content-Length
  // the parser enforces). Finishes on success, abandons on failure.
  Status ReadAll(std::string& out, uint64_t max_bytes) {
    out.resize(static_cast<size_t>(max_bytes));
    size_t filled = std::min(first_length_, out.size());
    std::memcpy(out.data(), buffer_.get(), filled);
    first_length_ = 0;
    if (body_ended_) {
      out.resize(filled);
      Finish();
      return Status();
    }
    char end_probe;  // ReadBody needs room to report the end after the last byte
    for (;;) {
      char* dest = filled < out.size() ? out.data() + filled : &end_probe;
      size_t room = filled < out.size() ? out.size() - filled : 1;
      Result<size_t> n = client_->ReadBody(dest, room);
      if (!n.ok()) {
        Abandon();
        return n.status();
      }
      if (*n == 0) break;
      if (dest == &end_probe) {  // unreachable: the parser stops at Content-Length
        Abandon();
        return base::InternalError("the replica's body is longer than its Content-Length");
      }
      filled += *n;
    }
    out.resize(filled);
    Finish();
    return Status();
  }

  // The response writer, after ReadFirstPiece: writes that piece, then reads the rest of the body
  // from the replica and writes each piece to the client as it arrives, the buffer's size at most
  // at a time (no queue: a client that reads slowly slows the reading from the replica, and TCP
  // backpressure reaches the replica).
  Status Pipe(net::BodyWriter& out) {
    if (client_ == nullptr) return base::FailedPreconditionError("the body was already written");
    if (first_length_ > 0) {
      Status st = out.Write(std::string_view(buffer_.get(), first_length_));
      first_length_ = 0;
      if (!st.ok()) {
        Abandon();
        return st;
      }
    }
    if (body_ended_) {
      Finish();
      return Status();
    }
    for (;;) {
      Result<size_t> n = client_->ReadBody(buffer_.get(), buffer_size_);
      if (!n.ok()) {
        Abandon();
        return n.status();  // the client's body is cut short too (no final chunk)
      }
      if (*n == 0) {
        // The lease goes before the end is told: once the client has the whole answer, the
        // replica no longer counts it.
        Finish();
        return Status();
      }
      Status st = out.Write(std::string_view(buffer_.get(), *n));
      if (!st.ok()) {
        Abandon();  // the client is gone: closing the replica's connection stops it
        return st;
      }
    }
  }

 private:
  UpstreamPool* const pool_;  // may be null: no pool
  ReplicaSet::Lease lease_;   // declared before client_, so released after it is closed
  std::unique_ptr<net::HttpClient> client_;
  std::unique_ptr<char[]> buffer_;  // ReadFirstPiece's, then Pipe's
  size_t buffer_size_ = 0;
  size_t first_length_ = 0;  // bytes of the first piece in buffer_ not yet passed on
  bool body_ended_ = false;  // ReadFirstPiece met the body's end
};

// Why no replica answered: what to tell the client instead.
struct Failure {
  int status = 502;
  std::string code;
  std::string message;
};

net::ClientOptions ClientOptionsFor(const Replica& replica, const ProxyOptions& options) {
  net::ClientOptions o;
  o.host = replica.host;
  o.port = replica.port;
  o.connect_timeout = options.connect_timeout;
  o.read_timeout = options.read_timeout;
  o.user_agent.clear();  // the client's own User-Agent passes through instead
  return o;
}

// Sends `request` to replicas until one answers with a head and, when a body follows, the body's
// first piece (then `upstream` holds that client and the piece, and the head is in `head`) or the
// attempts run out (the failure is returned). Runs on the calling thread; the lease in `upstream`
// follows the replica being tried.
std::optional<Failure> SendToReplicas(Upstream& upstream, ReplicaSet& replicas,
                                      net::ClientRequest request, const std::string& body,
                                      const ProxyOptions& options, size_t piece_bytes,
                                      net::ClientResponse& head) {
  const bool head_request = request.method == "HEAD";
  auto has_body = [&](const net::ClientResponse& h) {
    return !head_request && h.status != 101 && !IsBodylessStatus(h.status);
  };
  // The body is sent from memory through a source, to learn whether it was sent completely.
  std::string_view rest;
  bool request_sent = false;
  const bool with_body = !body.empty() || request.method == "POST" || request.method == "PUT" ||
                         request.method == "PATCH";
  if (with_body) {
    request.source = [&](char* buf, size_t n) -> Result<size_t> {
      n = std::min(n, rest.size());
      std::memcpy(buf, rest.data(), n);
      rest.remove_prefix(n);
      if (n == 0) request_sent = true;
      return n;
    };
    request.source_length = body.size();
  }
  const bool idempotent =
      IsIdempotent(request.method) || (options.retry_sent_posts && request.method == "POST");

  std::vector<std::string> tried;
  std::string errors;
  bool timed_out = false;
  const int max_attempts = std::max(1, options.max_attempts);
  for (int attempt = 1;; ++attempt) {
    const Replica& replica = upstream.lease().replica();
    const net::ClientOptions client_options = ClientOptionsFor(replica, options);
    // A pooled connection first; a fresh one when there is none, or when the pooled one failed
    // before any byte of the answer: the replica closed it just as the request went out (as it
    // may close any idle connection), which says nothing about the replica. That second try is
    // not an attempt, and it follows the retry rules: not once the request may have reached the
    // replica, unless it is idempotent.
    Result<net::ClientResponse> result = base::UnavailableError("not sent");
    for (bool fresh = options.upstream_pool == nullptr;; fresh = true) {
      std::unique_ptr<net::HttpClient> client;
      if (!fresh) client = options.upstream_pool->Take(client_options);
      const bool pooled = client != nullptr;
      if (!pooled) client = std::make_unique<net::HttpClient>(client_options);
      rest = body;
      request_sent = false;
      result = client->SendUntilHead(request);
      if (result.ok()) {
        upstream.Attach(std::move(client));
        head = std::move(*result);
        if (!has_body(head)) return std::nullopt;
        // The head is held until the body's first piece arrives: a replica that dies in
        // between (killed while it thinks) has sent nothing the client saw, so the request
        // may go elsewhere under the rules above.
        // A body of known length needs no larger buffer than itself (1: room to see its end).
        const std::optional<uint64_t> length = ContentLength(head.headers);
        const size_t capacity =
            length ? static_cast<size_t>(std::clamp<uint64_t>(*length, 1, piece_bytes))
                   : piece_bytes;
        Status first = upstream.ReadFirstPiece(capacity);
        if (first.ok()) return std::nullopt;
        request_sent = true;
        result = Status(first.code(), "its answer broke off after the head: " + first.message());
        break;
      }
      const bool stale = pooled && result.status().code() == base::StatusCode::kUnavailable;
      if (!stale || (request_sent && !idempotent)) break;
    }
    const Status& st = result.status();
    if (!errors.empty()) errors += "; ";
    errors += "replica '" + replica.id + "' at " + replica.host + ":" +
              std::to_string(replica.port) + ": " + st.message();
    timed_out = st.code() == base::StatusCode::kDeadlineExceeded;
    const bool transient = st.code() == base::StatusCode::kUnavailable || timed_out;
    const bool safe = !request_sent || idempotent;
    if (!transient || !safe || attempt >= max_attempts) break;
    tried.push_back(replica.id);
    upstream.lease().Release();
    std::optional<ReplicaSet::Lease> next = replicas.Acquire(tried);
    if (!next) break;
    upstream.lease() = std::move(*next);
  }
  upstream.Abandon();
  if (timed_out) {
    return Failure{504, "upstream_timeout", "the app's replica did not answer in time: " + errors};
  }
  return Failure{502, "upstream_unavailable",
                 "no replica of the app could take the request (" + errors +
                     "); retry later, or check the app's replicas"};
}

}  // namespace

net::Headers ForwardedRequestHeaders(const net::Request& request) {
  return UpstreamHeaders(request);
}

void RemoveHopByHopHeaders(net::Headers& headers) {
  std::vector<std::string> named;  // fields listed in Connection values
  for (std::string_view value : headers.GetAll("Connection")) {
    while (!value.empty()) {
      size_t comma = value.find(',');
      std::string_view token = TrimSpaceTab(value.substr(0, comma));
      value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
      if (!token.empty()) named.emplace_back(token);
    }
  }
  net::Headers kept;
  for (const auto& [name, value] : headers) {
    bool hop = StartsWithIgnoreCase(name, "Proxy-") ||
               std::any_of(kHopByHopFields.begin(), kHopByHopFields.end(),
                           [&](std::string_view h) { return net::EqualsIgnoreCase(name, h); }) ||
               std::any_of(named.begin(), named.end(),
                           [&](const std::string& h) { return net::EqualsIgnoreCase(name, h); });
    if (!hop) kept.Add(name, value);
  }
  headers = std::move(kept);
}

net::Response OpenAiError(int status, std::string_view message, std::string_view type,
                          std::string_view code) {
  nlohmann::json error = {{"message", message}, {"type", type}, {"param", nullptr}};
  error["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return net::Response::Json(status, base::DumpJson({{"error", std::move(error)}}));
}

void RenderOpenAiError(const net::Request*, net::Response& response) {
  const int status = response.status;
  std::string_view type = status == 429                   ? "rate_limit_error"
                          : status >= 400 && status < 500 ? "invalid_request_error"
                                                          : "server_error";
  net::Response rendered = OpenAiError(
      status, response.error_message.value_or(std::string(net::HttpReasonPhrase(status))), type,
      status == 413 ? "request_too_large" : "");
  response.headers.Set("Content-Type", "application/json");
  response.body = std::move(rendered.body);
}

Result<std::string> ReadWholeBody(net::Request& request, uint64_t max_bytes) {
  return ReadRequestBody(request, max_bytes);
}

net::Response Forward(net::Request& request, ReplicaSet& replicas, std::string upstream_target,
                      const ProxyOptions& options) {
  if (!IsOriginForm(upstream_target)) {
    return OpenAiError(400, "the request target cannot be forwarded", "invalid_request_error",
                       "invalid_target");
  }
  Result<std::string> body = ReadRequestBody(request, options.max_request_body_bytes);
  if (!body.ok()) {
    if (body.status().code() == base::StatusCode::kResourceExhausted) {
      return OpenAiError(413, body.status().message(), "invalid_request_error",
                         "request_too_large");
    }
    return net::Response::Error(body.status());  // the client left mid-body: nobody reads this
  }
  return ForwardBody(request, std::move(*body), replicas, std::move(upstream_target), options);
}

net::Response ForwardBody(net::Request& request, std::string request_body, ReplicaSet& replicas,
                          std::string upstream_target, const ProxyOptions& options) {
  if (!IsOriginForm(upstream_target)) {
    return OpenAiError(400, "the request target cannot be forwarded", "invalid_request_error",
                       "invalid_target");
  }
  Result<std::string> body = std::move(request_body);
  std::optional<ReplicaSet::Lease> lease = replicas.Acquire();
  if (!lease) {
    net::Response res = OpenAiError(
        503, "no replica of this app is running; start the app or wait for it to scale up",
        "server_error", "no_replica_available");
    res.headers.Set("Retry-After", "1");
    return res;
  }
  net::ClientRequest upstream_request;
  upstream_request.method = std::string(request.method());
  upstream_request.target = std::move(upstream_target);
  upstream_request.headers = UpstreamHeaders(request);
  const bool head_request = request.method() == "HEAD";

  const size_t piece_bytes =
      std::clamp<size_t>(options.max_queued_response_bytes, 1, kResponsePieceBytes);
  auto upstream = std::make_shared<Upstream>(options.upstream_pool, std::move(*lease));
  net::ClientResponse head;
  if (std::optional<Failure> failure = SendToReplicas(
          *upstream, replicas, std::move(upstream_request), *body, options, piece_bytes, head)) {
    return OpenAiError(failure->status, failure->message, "server_error", failure->code);
  }
  if (head.status == 101) {
    upstream->Abandon();
    return OpenAiError(502, "the replica switched protocols, which the gateway does not forward",
                       "server_error", "upstream_unavailable");
  }
  std::optional<uint64_t> length = ContentLength(head.headers);
  net::Response res;
  res.status = head.status;
  res.headers = std::move(head.headers);
  RemoveHopByHopHeaders(res.headers);
  if (head_request || IsBodylessStatus(head.status)) {
    // No body follows: end the exchange (its body is empty), so the connection goes back to the
    // pool and the replica's lease is released before the answer goes out, and answer with the
    // head alone. (HEAD keeps the replica's Content-Length: the size a GET would get.)
    std::string none;
    upstream->ReadAll(none, 0).IgnoreError();  // a failure only closes the connection
    if (!head_request) res.headers.Remove("Content-Length");
    return res;
  }
  res.headers.Remove("Content-Length");  // the server writes its own framing
  if (length && *length <= options.max_queued_response_bytes) {
    // A small body of known length (a JSON answer) is read here and goes out with the head in
    // one write, sparing the server a streamed response's hand-offs. Nothing has reached the
    // client yet, so a replica that fails midway gets an error answer, not a truncated one.
    std::string whole;
    Status st = upstream->ReadAll(whole, *length);
    if (!st.ok()) {
      const bool timeout = st.code() == base::StatusCode::kDeadlineExceeded;
      return OpenAiError(timeout ? 504 : 502,
                         "the replica's answer broke off before its end: " + st.message(),
                         "server_error", timeout ? "upstream_timeout" : "upstream_unavailable");
    }
    res.body = std::move(whole);
    return res;
  }
  res.stream_length = length;
  res.stream = [upstream](net::BodyWriter& out) { return upstream->Pipe(out); };
  return res;
}

}  // namespace sovai::gateway
