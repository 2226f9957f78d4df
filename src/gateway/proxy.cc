// The reverse proxy. Two threads meet in an Exchange for each forwarded request:
//   the upstream thread (started by Forward) sends the request to a replica with HttpClient,
//     publishes the response head, then pushes body pieces into a bounded queue;
//   the server side: Forward's worker waits for the head (or the failure) and returns a streamed
//     Response whose writer, on a server worker, pops the pieces and writes them to the client.
// The Exchange is shared (shared_ptr) by both, so whichever side stops first leaves nothing
// dangling; the upstream thread itself is owned by an UpstreamCall that the returned Response
// holds, whose destructor cancels the exchange (which aborts the upstream request) and joins it.
#include "gateway/proxy.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "base/json.h"
#include "net/client.h"

namespace sovai::gateway {

using base::Result;
using base::Status;

namespace {

// Bytes asked of the client's BodyReader per read while buffering the request body.
constexpr size_t kBodyReadBytes = 16 * 1024;  // on the worker's stack

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

// The meeting point of the upstream thread and the server side of one forwarded request.
class Exchange {
 public:
  explicit Exchange(size_t max_queued_bytes) : max_queued_bytes_(max_queued_bytes) {}

  // What Forward waits for: the head, or why there is none.
  struct Outcome {
    std::optional<net::ClientResponse> head;
    int status = 502;
    std::string code;
    std::string message;
  };

  // --- Upstream thread ----------------------------------------------------------------------

  // Makes `client` the one Cancel() aborts. False when already cancelled: do not send.
  bool Attach(net::HttpClient* client) {
    std::lock_guard lock(mu_);
    if (cancelled_) return false;
    client_ = client;
    return true;
  }
  // Before the attached client is destroyed.
  void Detach() {
    std::lock_guard lock(mu_);
    client_ = nullptr;
  }

  Status PublishHead(const net::ClientResponse& head) {
    std::lock_guard lock(mu_);
    if (cancelled_) return CancelledStatus();
    head_ = head;
    changed_.notify_all();
    return Status();
  }

  // Queues a body piece; blocks while the queue is full (a lone piece may exceed the limit).
  Status Push(std::string_view piece) {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] {
      return cancelled_ || queued_bytes_ == 0 || queued_bytes_ + piece.size() <= max_queued_bytes_;
    });
    if (cancelled_) return CancelledStatus();
    pieces_.emplace_back(piece);
    queued_bytes_ += piece.size();
    changed_.notify_all();
    return Status();
  }

  // The upstream request ended: OK once the whole body is queued, else why it stopped.
  void Finish(Status end) {
    std::lock_guard lock(mu_);
    finished_ = true;
    end_ = std::move(end);
    changed_.notify_all();
  }

  // No head will come: what to answer instead.
  void Fail(int status, std::string code, std::string message) {
    std::lock_guard lock(mu_);
    finished_ = true;
    failure_ = true;
    failure_status_ = status;
    failure_code_ = std::move(code);
    end_ = base::UnavailableError(message);
    changed_.notify_all();
  }

  bool cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

  // --- Server side --------------------------------------------------------------------------

  Outcome WaitForHead() {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] { return head_.has_value() || finished_; });
    Outcome out;
    if (head_) {
      out.head = *head_;
    } else if (failure_) {
      out.status = failure_status_;
      out.code = failure_code_;
      out.message = end_.message();
    } else {
      out.code = "upstream_unavailable";
      out.message = "the replica's answer ended before its head: " + end_.ToString();
    }
    return out;
  }

  // Waits for body bytes and moves all that are queued into `out`; returns true. At the end of
  // the body returns false with `end` set: OK when it is complete, else why it stopped.
  bool Pop(std::string& out, Status& end) {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] { return cancelled_ || !pieces_.empty() || finished_; });
    if (cancelled_) {
      end = CancelledStatus();
      return false;
    }
    if (!pieces_.empty()) {
      out.clear();
      if (pieces_.size() == 1) {
        out.swap(pieces_.front());
      } else {
        out.reserve(queued_bytes_);
        for (const std::string& p : pieces_) out.append(p);
      }
      pieces_.clear();
      queued_bytes_ = 0;
      changed_.notify_all();  // room for the upstream thread
      return true;
    }
    end = end_;
    return false;
  }

  // The whole body, when the upstream request has already ended well (a small answer usually
  // arrives with its head); nullopt otherwise, leaving everything in place.
  std::optional<std::string> TakeCompleteBody() {
    std::lock_guard lock(mu_);
    if (!finished_ || !end_.ok() || cancelled_) return std::nullopt;
    std::string body;
    body.reserve(queued_bytes_);
    for (const std::string& p : pieces_) body.append(p);
    pieces_.clear();
    queued_bytes_ = 0;
    return body;
  }

  // The client side is gone (or no longer wants the body): aborts the upstream request and wakes
  // every waiter. Idempotent; any thread.
  void Cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    if (client_ != nullptr) client_->Abort();
    changed_.notify_all();
  }

 private:
  static Status CancelledStatus() {
    return base::CancelledError("the client of the forwarded request went away");
  }

  const size_t max_queued_bytes_;
  mutable std::mutex mu_;
  // Signals every change of the state below (head, pieces, room, end, cancel); at most two
  // threads wait on it, so notify_all costs nothing extra.
  std::condition_variable changed_;
  // Guarded by mu_:
  std::optional<net::ClientResponse> head_;
  std::deque<std::string> pieces_;
  size_t queued_bytes_ = 0;
  bool finished_ = false;
  Status end_;
  bool failure_ = false;
  int failure_status_ = 502;
  std::string failure_code_;
  bool cancelled_ = false;
  net::HttpClient* client_ = nullptr;  // the attempt in progress, owned by the upstream thread
};

// Sends the request to replicas until one answers (or attempts run out), then streams its body
// into the exchange. Runs on the upstream thread. `replicas` is touched only before the head or
// the failure is published, while Forward is still waiting (so it is alive).
void RunUpstream(Exchange& exchange, ReplicaSet& replicas, ReplicaSet::Lease lease,
                 net::ClientRequest request, const std::string& body, const ProxyOptions& options) {
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
  bool head_seen = false;
  net::HeadCallback on_head = [&](const net::ClientResponse& head) {
    head_seen = true;
    return exchange.PublishHead(head);
  };
  net::BodySink sink = [&](std::string_view piece) { return exchange.Push(piece); };

  std::vector<std::string> tried;
  std::string errors;
  bool timed_out = false;
  const int max_attempts = std::max(1, options.max_attempts);
  for (int attempt = 1;; ++attempt) {
    const Replica& replica = lease.replica();
    net::ClientOptions client_options;
    client_options.host = replica.host;
    client_options.port = replica.port;
    client_options.connect_timeout = options.connect_timeout;
    client_options.read_timeout = options.read_timeout;
    client_options.user_agent.clear();  // the client's own User-Agent passes through instead
    net::HttpClient client(client_options);
    rest = body;
    request_sent = false;
    if (!exchange.Attach(&client)) {
      lease.Release();
      exchange.Finish(base::CancelledError("the client went away"));
      return;
    }
    Result<net::ClientResponse> result = [&] {
      // Detached before `client` dies, even when unwinding: Cancel() must never reach it then.
      struct Detach {
        Exchange& exchange;
        ~Detach() { exchange.Detach(); }
      } detach{exchange};
      return client.Send(request, on_head, sink);
    }();
    if (result.ok() && !head_seen) {
      head_seen = true;
      exchange.PublishHead(*result).IgnoreError();  // unreachable with a conforming client
    }
    if (head_seen) {
      // The lease goes before the end is told: once the client has the whole answer, the
      // replica no longer counts it.
      lease.Release();
      exchange.Finish(result.status());
      return;
    }
    const Status& st = result.status();
    if (!errors.empty()) errors += "; ";
    errors += "replica '" + replica.id + "' at " + replica.host + ":" +
              std::to_string(replica.port) + ": " + st.message();
    timed_out = st.code() == base::StatusCode::kDeadlineExceeded;
    const bool transient = st.code() == base::StatusCode::kUnavailable || timed_out;
    const bool safe = !request_sent || IsIdempotent(request.method);
    if (exchange.cancelled() || !transient || !safe || attempt >= max_attempts) break;
    tried.push_back(replica.id);
    lease.Release();
    std::optional<ReplicaSet::Lease> next = replicas.Acquire(tried);
    if (!next) break;
    lease = std::move(*next);
  }
  lease.Release();
  if (timed_out) {
    exchange.Fail(504, "upstream_timeout", "the app's replica did not answer in time: " + errors);
  } else {
    exchange.Fail(502, "upstream_unavailable",
                  "no replica of the app could take the request (" + errors +
                      "); retry later, or check the app's replicas");
  }
}

// Owns the upstream thread. Destroyed on a server thread: cancels (which makes the upstream
// thread return promptly) and joins.
class UpstreamCall {
 public:
  UpstreamCall(std::shared_ptr<Exchange> exchange, ReplicaSet& replicas, ReplicaSet::Lease lease,
               net::ClientRequest request, std::string body, const ProxyOptions& options)
      : exchange_(std::move(exchange)) {
    thread_ =
        std::thread([exchange = exchange_, &replicas, lease = std::move(lease),
                     request = std::move(request), body = std::move(body), options]() mutable {
          try {
            RunUpstream(*exchange, replicas, std::move(lease), std::move(request), body, options);
          } catch (const std::exception& e) {  // a thread entry: nothing may escape
            exchange->Fail(502, "upstream_unavailable",
                           std::string("forwarding the request failed: ") + e.what());
          }
        });
  }
  ~UpstreamCall() {
    exchange_->Cancel();
    thread_.join();
  }
  UpstreamCall(const UpstreamCall&) = delete;
  UpstreamCall& operator=(const UpstreamCall&) = delete;

  Exchange& exchange() { return *exchange_; }

  // The response writer: body pieces from the upstream thread to the client.
  Status Pipe(net::BodyWriter& out) {
    std::string batch;
    Status end;
    while (exchange_->Pop(batch, end)) {
      Status st = out.Write(batch);
      if (!st.ok()) {
        exchange_->Cancel();  // the client is gone: stop the replica
        return st;
      }
    }
    return end;  // not OK when the replica's body broke off: the client's is then cut short too
  }

 private:
  std::shared_ptr<Exchange> exchange_;
  std::thread thread_;
};

}  // namespace

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
  std::optional<ReplicaSet::Lease> lease = replicas.Acquire();
  if (!lease) {
    net::Response res = OpenAiError(
        503, "no replica of this app is running; start the app or wait for it to scale up",
        "server_error", "no_replica_available");
    res.headers.Set("Retry-After", "1");
    return res;
  }
  net::ClientRequest upstream;
  upstream.method = std::string(request.method());
  upstream.target = std::move(upstream_target);
  upstream.headers = UpstreamHeaders(request);
  const bool head_request = request.method() == "HEAD";

  auto exchange = std::make_shared<Exchange>(options.max_queued_response_bytes);
  std::shared_ptr<UpstreamCall> call;
  try {
    call = std::make_shared<UpstreamCall>(exchange, replicas, std::move(*lease),
                                          std::move(upstream), std::move(*body), options);
  } catch (const std::system_error& e) {  // no thread could be started
    return OpenAiError(503, std::string("the gateway is out of threads: ") + e.what(),
                       "server_error", "gateway_overloaded");
  }
  Exchange::Outcome outcome = exchange->WaitForHead();
  if (!outcome.head)
    return OpenAiError(outcome.status, outcome.message, "server_error", outcome.code);
  net::ClientResponse& head = *outcome.head;
  if (head.status == 101) {
    return OpenAiError(502, "the replica switched protocols, which the gateway does not forward",
                       "server_error", "upstream_unavailable");
  }
  std::optional<uint64_t> length = ContentLength(head.headers);
  net::Response res;
  res.status = head.status;
  res.headers = std::move(head.headers);
  RemoveHopByHopHeaders(res.headers);
  if (head_request || IsBodylessStatus(head.status)) {
    // No body follows: wait for the end of the exchange, so the replica's lease is released
    // before the answer goes out, and answer with the head alone. (HEAD keeps the replica's
    // Content-Length: the size a GET would get.)
    std::string ignored;
    Status end;
    while (exchange->Pop(ignored, end)) {
    }
    if (!head_request) res.headers.Remove("Content-Length");
    return res;
  }
  res.headers.Remove("Content-Length");  // the server writes its own framing
  // A body that is complete already goes out as a fixed one, sparing the hand-offs of a stream.
  if (std::optional<std::string> whole = exchange->TakeCompleteBody()) {
    res.body = std::move(*whole);
    return res;
  }
  res.stream_length = length;
  res.stream = [call](net::BodyWriter& out) { return call->Pipe(out); };
  return res;
}

}  // namespace sovai::gateway
