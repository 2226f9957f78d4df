#include "gateway/websocket_tunnel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/log.h"
#include "gateway/proxy.h"

namespace sovai::gateway {

namespace {

using base::Result;
using base::Status;
using Clock = std::chrono::steady_clock;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool HasToken(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    size_t comma = list.find(',');
    if (net::EqualsIgnoreCase(Trim(list.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1'000'000));
}

// A TCP connection to target, within `timeout`.
Result<base::UniqueFd> Connect(const TunnelTarget& target, std::chrono::milliseconds timeout) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(target.port);
  if (::inet_pton(AF_INET, target.host.c_str(), &addr.sin_addr) != 1) {
    return base::InvalidArgumentError("upstream host '" + target.host + "' is not an IPv4 address");
  }
  base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return base::ErrnoToStatus(errno, "socket");
  const std::string where = target.host + ":" + std::to_string(target.port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) return base::UnavailableError("connecting to " + where + " failed");
    pollfd p{fd.get(), POLLOUT, 0};
    int ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (ready == 0) return base::DeadlineExceededError("connecting to " + where + " timed out");
    int err = 0;
    socklen_t len = sizeof err;
    if (ready < 0 || ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      return base::UnavailableError("connecting to " + where + " failed");
    }
  }
  // Blocking from here on: each direction has a thread of its own.
  int flags = ::fcntl(fd.get(), F_GETFL);
  (void)::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  int one = 1;
  (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Sends all of `data`; false when the peer is gone (or the socket was shut down).
bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads into `out` until it holds "\r\n\r\n" (returns the head's length) or the limits strike.
Result<size_t> ReadHead(int fd, std::string& out, Clock::time_point deadline) {
  for (;;) {
    if (size_t end = out.find("\r\n\r\n"); end != std::string::npos) return end + 4;
    if (out.size() > kMaxTunnelUpstreamHeadBytes) {
      return base::ResourceExhaustedError("the upstream's answer head exceeds " +
                                          std::to_string(kMaxTunnelUpstreamHeadBytes) + " bytes");
    }
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, RemainingMs(deadline));
    if (ready == 0) return base::DeadlineExceededError("the upstream did not answer in time");
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return base::UnavailableError("the upstream closed the connection before answering");
    out.append(buf, static_cast<size_t>(n));
  }
}

struct UpstreamHead {
  int status = 0;
  net::Headers headers;
};

// "HTTP/1.1 101 Switching Protocols\r\nName: value\r\n...\r\n\r\n".
Result<UpstreamHead> ParseHead(std::string_view head) {
  UpstreamHead out;
  size_t eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    return base::InternalError("the upstream's answer is not HTTP/1.x");
  }
  std::string_view code = status_line.substr(9, 3);
  auto [ptr, ec] = std::from_chars(code.data(), code.data() + code.size(), out.status);
  if (ec != std::errc() || ptr != code.data() + 3 || out.status < 100 || out.status > 599) {
    return base::InternalError("the upstream's status line is malformed");
  }
  head.remove_prefix(eol + 2);
  while (!head.empty()) {
    eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    head.remove_prefix(eol == std::string_view::npos ? head.size() : eol + 2);
    if (line.empty()) break;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return base::InternalError("the upstream sent a malformed header line");
    }
    out.headers.Add(std::string(line.substr(0, colon)), std::string(Trim(line.substr(colon + 1))));
  }
  return out;
}

// A refusal's body: Content-Length bytes (or up to the close), at most the limit.
std::string ReadRefusalBody(int fd, std::string body, const net::Headers& headers,
                            Clock::time_point deadline) {
  size_t want = kMaxTunnelRefusalBodyBytes;
  if (auto length = headers.Get("Content-Length")) {
    uint64_t n = 0;
    auto [ptr, ec] = std::from_chars(length->data(), length->data() + length->size(), n);
    if (ec == std::errc()) want = static_cast<size_t>(std::min<uint64_t>(n, want));
  } else if (headers.Has("Transfer-Encoding")) {
    return "";  // chunked: the status says enough
  }
  while (body.size() < want) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, RemainingMs(deadline)) <= 0) break;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, std::min(sizeof buf, want - body.size()), 0);
    if (n <= 0) break;
    body.append(buf, static_cast<size_t>(n));
  }
  if (body.size() > want) body.resize(want);
  return body;
}

// One spliced connection: shared by the two directions.
struct Tunnel {
  TunnelRegistry& registry;
  base::UniqueFd upstream;
  std::string early;  // bytes the upstream sent after its 101 head
  std::chrono::milliseconds idle_timeout;
  std::atomic<int64_t> last_activity_ms{0};
  std::atomic<bool> done{false};

  Tunnel(TunnelRegistry& r, base::UniqueFd fd, std::chrono::milliseconds idle)
      : registry(r), upstream(std::move(fd)), idle_timeout(idle) {
    Touch();
  }
  ~Tunnel() { registry.Release(); }

  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
        .count();
  }
  void Touch() { last_activity_ms = NowMs(); }
  // Ends both directions: the upstream socket wakes its blocked recv/send, Close the client's.
  void End(net::UpgradedStream& client) {
    done = true;
    ::shutdown(upstream.get(), SHUT_RDWR);
    client.Close();
  }

  // Upstream to client, with the idle check; on its own thread.
  void PumpDown(net::UpgradedStream& client) {
    std::vector<char> buf(kTunnelBufferBytes);
    const int slice_ms = static_cast<int>(std::clamp<int64_t>(idle_timeout.count(), 1, 1000));
    while (!done) {
      pollfd p{upstream.get(), POLLIN, 0};
      int ready = ::poll(&p, 1, slice_ms);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) break;
      if (ready == 0) {
        if (NowMs() - last_activity_ms.load() >= idle_timeout.count()) break;
        continue;
      }
      ssize_t n = ::recv(upstream.get(), buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      Touch();
      if (!client.Write(std::string_view(buf.data(), static_cast<size_t>(n))).ok()) break;
    }
    End(client);
  }

  // Client to upstream; on the server worker.
  void PumpUp(net::UpgradedStream& client) {
    std::vector<char> buf(kTunnelBufferBytes);
    while (!done) {
      auto n = client.Read(buf.data(), buf.size());
      if (!n.ok() || *n == 0) break;
      Touch();
      if (!SendAll(upstream.get(), std::string_view(buf.data(), *n))) break;
    }
    End(client);
  }

  void Splice(net::UpgradedStream& client) {
    registry.CountSpliced();
    if (!early.empty() && !client.Write(early).ok()) {
      End(client);
      return;
    }
    std::thread down([this, &client] { PumpDown(client); });
    PumpUp(client);
    down.join();
  }
};

}  // namespace

bool TunnelRegistry::TryAcquire() {
  size_t n = open_.load();
  while (n < max_) {
    if (open_.compare_exchange_weak(n, n + 1)) return true;
  }
  refused_++;
  return false;
}

void TunnelRegistry::Release() { open_--; }

bool IsUpgradeRequest(const net::Request& request) {
  if (!request.header("Upgrade")) return false;
  for (std::string_view value : request.headers().GetAll("Connection")) {
    if (HasToken(value, "upgrade")) return true;
  }
  return false;
}

net::Response ForwardUpgrade(net::Request& request, const TunnelTarget& target,
                             std::string_view upstream_target, const net::Headers& set_headers,
                             TunnelRegistry& registry, const TunnelOptions& options) {
  if (upstream_target.empty() || upstream_target[0] != '/') {
    return OpenAiError(400, "the upstream target must be an absolute path", "invalid_request_error",
                       "invalid_target");
  }
  if (!registry.TryAcquire()) {
    net::Response res = OpenAiError(503,
                                    "too many open websocket connections through the gateway "
                                    "(at most " +
                                        std::to_string(registry.max()) + "); retry later",
                                    "server_error", "too_many_tunnels");
    res.headers.Set("Retry-After", "5");
    return res;
  }
  // From here on the slot is the tunnel's (released by ~Tunnel) or given back on failure.
  struct SlotGuard {
    TunnelRegistry* registry;
    ~SlotGuard() {
      if (registry != nullptr) registry->Release();
    }
  } slot{&registry};

  auto fd = Connect(target, options.connect_timeout);
  if (!fd.ok()) {
    return fd.status().code() == base::StatusCode::kDeadlineExceeded
               ? OpenAiError(504, fd.status().message(), "server_error", "upstream_timeout")
               : OpenAiError(502, fd.status().message(), "server_error", "upstream_unavailable");
  }
  net::Headers headers = ForwardedRequestHeaders(request);
  headers.Set("Connection", "Upgrade");
  headers.Set("Upgrade", std::string(*request.header("Upgrade")));
  for (const auto& [name, value] : set_headers) headers.Set(name, value);
  std::string head = std::string(request.method()) + " " + std::string(upstream_target) +
                     " HTTP/1.1\r\nHost: " + target.host + ":" + std::to_string(target.port) +
                     "\r\n";
  for (const auto& [name, value] : headers) head += name + ": " + value + "\r\n";
  head += "\r\n";
  const auto deadline = Clock::now() + options.handshake_timeout;
  if (!SendAll(fd->get(), head)) {
    return OpenAiError(502, "the upstream closed the connection", "server_error",
                       "upstream_unavailable");
  }
  std::string received;
  auto head_bytes = ReadHead(fd->get(), received, deadline);
  if (!head_bytes.ok()) {
    return head_bytes.status().code() == base::StatusCode::kDeadlineExceeded
               ? OpenAiError(504, head_bytes.status().message(), "server_error", "upstream_timeout")
               : OpenAiError(502, head_bytes.status().message(), "server_error",
                             "upstream_unavailable");
  }
  auto parsed = ParseHead(std::string_view(received).substr(0, *head_bytes));
  if (!parsed.ok()) {
    return OpenAiError(502, parsed.status().message(), "server_error", "upstream_unavailable");
  }
  std::string rest = received.substr(*head_bytes);
  if (parsed->status != 101) {
    // A refusal (Jupyter's 403 for a bad origin, 404 for an unknown kernel): relayed as is.
    net::Response res;
    res.status = parsed->status;
    const std::string content_type(
        parsed->headers.Get("Content-Type").value_or("text/plain; charset=utf-8"));
    res.body = ReadRefusalBody(fd->get(), std::move(rest), parsed->headers, deadline);
    res.headers = std::move(parsed->headers);
    RemoveHopByHopHeaders(res.headers);
    res.headers.Remove("Content-Length");
    res.headers.Set("Content-Type", content_type);
    return res;
  }
  net::Response res;
  res.status = 101;
  const std::string upgrade(parsed->headers.Get("Upgrade").value_or(*request.header("Upgrade")));
  res.headers = std::move(parsed->headers);
  RemoveHopByHopHeaders(res.headers);
  res.headers.Set("Connection", "Upgrade");
  res.headers.Set("Upgrade", upgrade);
  auto tunnel = std::make_shared<Tunnel>(registry, std::move(*fd), options.idle_timeout);
  slot.registry = nullptr;  // the tunnel holds the slot now
  tunnel->early = std::move(rest);
  res.upgrade = [tunnel](net::UpgradedStream& client) { tunnel->Splice(client); };
  return res;
}

}  // namespace sovai::gateway
