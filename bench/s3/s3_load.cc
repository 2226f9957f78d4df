// s3_load: the load generator of bench/s3/run.sh. Drives Sovai's S3 endpoint with SigV4-signed
// requests over N concurrent keep-alive connections (one blocking socket per thread), or
// plays a peer: plain HTTP GETs of the same paths from nginx (--plain), the disk's raw sequential
// write with fdatasync (disk-write), the durable small-write floor (fsync-put), and the MD5
// ceiling of a big PUT (md5).
//
//   s3_load --op put --endpoint http://127.0.0.1:9000 --access-key AK --secret-key SK
//           --region eu-west-local --bucket bench --prefix p/ --concurrency 16 --duration-s 5
//   s3_load --op get     ... --prefix g/ --count 2000 --concurrency 64 --duration-s 5 [--plain]
//   s3_load --op put-big ... --key big --big-mb 1024 --part-mb 64 --concurrency 4
//   s3_load --op get-big ... --key big [--plain]
//   s3_load --op disk-write --dir /tmp/x --big-mb 1024 --part-mb 64
//   s3_load --op fsync-put  --dir /tmp/x --size-bytes 4096 --concurrency 64 --duration-s 5
//   s3_load --op md5 --big-mb 1024 --part-mb 64 --concurrency 4
//
// Prints one line of key=value fields (run.sh parses it): ops, seconds, ops_per_s, MB_per_s
// (MB = 10^6 bytes), p50_ms and p99_ms of the per-operation latency (one PUT/GET; one part for
// put-big; one whole download for get-big; one durable write for the local peers), errors, and
// client_cpu: the CPU this process used divided by wall time (cores), so a reader can see the
// load generator is not what saturates a 2-core machine. Exits 1 when any request failed (the
// first failure is printed on stderr).
//
// Payload hashing (x-amz-content-sha256):
//   put, Complete: the real SHA-256 of the body. SDKs sign small payloads (boto3 signs every
//     payload over plain http, which is what this bench speaks), so verifying the hash is part
//     of the small-PUT cost to measure; hashing 4 KiB costs the client microseconds.
//   put-big parts: UNSIGNED-PAYLOAD by default. Multi-GB uploads from aws-cli, rclone and the SDKs
//     over TLS do not sign the payload (it would read every part twice), and the comparison with
//     the disk should measure storage, not a SHA-256 the peer does not do. --sign-big-payload
//     sends the real SHA-256 instead; every part repeats one pattern, so the hash is computed
//     once before the clock starts and the server's verification is what gets measured.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/crypto.h"
#include "base/env.h"
#include "base/flags.h"
#include "base/status.h"
#include "base/strings.h"
#include "net/client.h"
#include "objstore/sigv4.h"

namespace sovai::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Limits on what the flags may ask for (a typo should not fill the disk or fork 10^6 threads).
constexpr int64_t kMaxConcurrency = 1024;
constexpr int64_t kMaxObjectBytes = 128 << 20;
constexpr int64_t kMaxBigMb = 64 << 10;
constexpr int64_t kMaxPartMb = 5 << 10;  // S3's largest part
constexpr int kMaxParts = 10000;         // S3's most parts
// Upload bodies are produced from one pattern buffer of this size (no per-part allocation).
constexpr size_t kPatternBytes = 1 << 20;
// The response body of an error is quoted up to this many bytes.
constexpr size_t kErrorQuoteBytes = 400;

struct Config {
  std::string op;
  std::string endpoint = "http://127.0.0.1:9000";
  std::string access_key, secret_key;
  std::string region = "eu-west-local";
  std::string bucket = "bench";
  std::string prefix = "obj-";
  std::string key = "big";
  std::string dir;
  int64_t concurrency = 1;
  int64_t duration_s = 5;
  int64_t count = 0;  // put: most objects (0 = until the duration); get: keys 0..count-1
  int64_t size_bytes = 4096;
  int64_t big_mb = 1024;
  int64_t part_mb = 64;
  bool plain = false;
  bool sign_big_payload = false;
};

// What one worker thread measured.
struct ThreadStats {
  std::vector<double> latencies_ms;
  uint64_t bytes = 0;
  uint64_t errors = 0;
  // The measured span (setup such as filling buffers excluded), set by each operation.
  double seconds = 0;
};

// The first failure of the run, for stderr.
class FirstError {
 public:
  void Record(std::string message) {
    std::lock_guard lock(mu_);
    if (message_.empty()) message_ = std::move(message);
  }
  std::string Get() {
    std::lock_guard lock(mu_);
    return message_;
  }

 private:
  std::mutex mu_;  // guards message_
  std::string message_;
};

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int64_t NowUnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// The q-quantile (0..1) of `v` (sorted in place), nearest rank.
double Quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(q * static_cast<double>(v.size()));
  return v[std::min(rank, v.size() - 1)];
}

// --- A minimal HTTP/1.1 client ------------------------------------------------------------------
//
// Why not net::HttpClient: measured here, it reads responses 512 bytes per recvmsg (Beast's
// flat_buffer is never grown past its first capacity while the body goes to a buffer_body) and
// re-arms a timerfd around every read, so one connection topped out near 100 MB/s on a 1 GiB GET
// (curl: ~600 MB/s from the same nginx) and spent ~100 us of CPU per 4 KiB GET. A load generator
// must not be the bottleneck, so this one is a blocking socket with 256 KiB reads: keep-alive,
// Content-Length request bodies, Content-Length or chunked responses, one retry on a fresh
// connection when a reused one turns out closed.

struct Request {
  std::string method = "GET";
  std::string target = "/";  // origin-form, percent-encoded
  net::Headers headers;      // Host and Content-Length are added
  std::string body;
  // Instead of `body`: `pattern_bytes` bytes cycling through *pattern (large uploads, no copy).
  const std::string* pattern = nullptr;
  uint64_t pattern_bytes = 0;
};

struct Response {
  int status = 0;
  net::Headers headers;
  std::string body;  // empty when a sink consumed it
};

// Receives consecutive pieces of a response body.
using Sink = std::function<void(std::string_view piece)>;

constexpr size_t kRecvBytes = 256 << 10;      // one recv(); also the most header bytes
constexpr size_t kSmallBodyBytes = 64 << 10;  // sent in the same send() as the head
constexpr int kSocketTimeoutS = 120;          // any one send/recv

std::string Quote(const Response& res) {
  return "HTTP " + std::to_string(res.status) + ": " + res.body.substr(0, kErrorQuoteBytes);
}

class HttpConn {
 public:
  HttpConn(std::string host, uint16_t port)
      : host_(std::move(host)), port_(port), buf_(new char[kRecvBytes]) {}

  // Sends `req` and reads the response; the body goes to `sink` when given.
  base::Result<Response> Send(const Request& req, const Sink* sink = nullptr) {
    const bool reused = fd_.valid();
    bool nothing_read = false;
    base::Result<Response> res = SendOnce(req, sink, &nothing_read);
    if (!res.ok() && reused && nothing_read) {
      Close();  // the server closed the idle connection: once more on a fresh one
      res = SendOnce(req, sink, &nothing_read);
    }
    if (!res.ok()) Close();
    return res;
  }

 private:
  void Close() {
    fd_.Reset();
    begin_ = end_ = 0;
  }

  base::Status Connect() {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    int rc = getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found);
    if (rc != 0) {
      return base::UnavailableError("resolve " + host_ + ": " + std::string(gai_strerror(rc)));
    }
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> list(found, freeaddrinfo);
    base::UniqueFd fd(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return base::ErrnoToStatus(errno, "socket");
    int one = 1;
    (void)setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{kSocketTimeoutS, 0};
    (void)setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(fd.get(), found->ai_addr, found->ai_addrlen) != 0) {
      return base::ErrnoToStatus(errno, "connect " + host_ + ":" + std::to_string(port_));
    }
    fd_ = std::move(fd);
    begin_ = end_ = 0;
    return base::Status();
  }

  base::Status SendAll(const char* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::send(fd_.get(), p, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return base::ErrnoToStatus(errno, "send");
      p += w;
      n -= static_cast<size_t>(w);
    }
    return base::Status();
  }

  // Reads more into buf_ (compacting it first). 0 at EOF.
  base::Result<size_t> Recv() {
    if (begin_ > 0) {
      std::memmove(buf_.get(), buf_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == kRecvBytes) return base::ResourceExhaustedError("response head too large");
    for (;;) {
      ssize_t r = ::recv(fd_.get(), buf_.get() + end_, kRecvBytes - end_, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return base::ErrnoToStatus(errno, "recv");
      end_ += static_cast<size_t>(r);
      return static_cast<size_t>(r);
    }
  }

  // The next line (without CRLF), reading more as needed.
  base::Result<std::string> ReadLine() {
    for (;;) {
      std::string_view have(buf_.get() + begin_, end_ - begin_);
      size_t eol = have.find("\r\n");
      if (eol != std::string_view::npos) {
        begin_ += eol + 2;
        return std::string(have.substr(0, eol));
      }
      SOVAI_ASSIGN_OR_RETURN(size_t n, Recv());
      if (n == 0) return base::UnavailableError("connection closed in a response line");
    }
  }

  // Exactly `n` body bytes (or up to EOF when `to_eof`), to the sink or appended to `out`.
  base::Status ReadBody(uint64_t n, bool to_eof, const Sink* sink, std::string& out) {
    for (;;) {
      size_t take = static_cast<size_t>(std::min<uint64_t>(n, end_ - begin_));
      if (take > 0) {
        std::string_view piece(buf_.get() + begin_, take);
        if (sink != nullptr) {
          (*sink)(piece);
        } else {
          out.append(piece);
        }
        begin_ += take;
        n -= take;
      }
      if (n == 0) return base::Status();
      begin_ = end_ = 0;  // the buffer is drained
      SOVAI_ASSIGN_OR_RETURN(size_t got, Recv());
      if (got == 0) {
        if (to_eof) return base::Status();
        return base::UnavailableError("connection closed in a response body");
      }
    }
  }

  base::Status SendRequest(const Request& req) {
    const uint64_t length = req.pattern ? req.pattern_bytes : req.body.size();
    std::string head = req.method + " " + req.target + " HTTP/1.1\r\n";
    for (const auto& [name, value] : req.headers) head += name + ": " + value + "\r\n";
    if (length > 0 || req.method == "PUT" || req.method == "POST") {
      head += "Content-Length: " + std::to_string(length) + "\r\n";
    }
    head += "\r\n";
    if (!req.pattern && req.body.size() <= kSmallBodyBytes) {
      head += req.body;
      return SendAll(head.data(), head.size());
    }
    SOVAI_RETURN_IF_ERROR(SendAll(head.data(), head.size()));
    if (!req.pattern) return SendAll(req.body.data(), req.body.size());
    for (uint64_t sent = 0; sent < length;) {
      size_t at = static_cast<size_t>(sent % req.pattern->size());
      size_t n = static_cast<size_t>(std::min<uint64_t>(req.pattern->size() - at, length - sent));
      SOVAI_RETURN_IF_ERROR(SendAll(req.pattern->data() + at, n));
      sent += n;
    }
    return base::Status();
  }

  base::Result<Response> SendOnce(const Request& req, const Sink* sink, bool* nothing_read) {
    *nothing_read = true;
    if (!fd_.valid()) SOVAI_RETURN_IF_ERROR(Connect());
    SOVAI_RETURN_IF_ERROR(SendRequest(req));
    if (end_ == begin_) {
      SOVAI_ASSIGN_OR_RETURN(size_t n, Recv());
      if (n == 0) return base::UnavailableError("connection closed before the response");
    }
    *nothing_read = false;
    Response res;
    SOVAI_ASSIGN_OR_RETURN(std::string status_line, ReadLine());  // "HTTP/1.1 200 OK"
    if (status_line.size() < 12 || status_line.compare(0, 5, "HTTP/") != 0) {
      return base::InternalError("malformed status line '" + status_line + "'");
    }
    res.status = std::atoi(status_line.c_str() + 9);
    std::optional<uint64_t> content_length;
    bool chunked = false, close = false;
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(std::string line, ReadLine());
      if (line.empty()) break;
      size_t colon = line.find(':');
      if (colon == std::string::npos) return base::InternalError("malformed header '" + line + "'");
      std::string name = line.substr(0, colon);
      std::string value(base::Trim(std::string_view(line).substr(colon + 1)));
      if (net::EqualsIgnoreCase(name, "Content-Length")) {
        content_length = std::strtoull(value.c_str(), nullptr, 10);
      } else if (net::EqualsIgnoreCase(name, "Transfer-Encoding")) {
        chunked = value.find("chunked") != std::string::npos;
      } else if (net::EqualsIgnoreCase(name, "Connection")) {
        close = net::EqualsIgnoreCase(value, "close");
      }
      res.headers.Add(std::move(name), std::move(value));
    }
    if (req.method == "HEAD" || res.status == 204 || res.status == 304) {
      // No body.
    } else if (chunked) {
      for (;;) {
        SOVAI_ASSIGN_OR_RETURN(std::string size_line, ReadLine());
        uint64_t size = std::strtoull(size_line.c_str(), nullptr, 16);
        if (size == 0) {
          for (;;) {  // the trailer section, up to its empty line
            SOVAI_ASSIGN_OR_RETURN(std::string line, ReadLine());
            if (line.empty()) break;
          }
          break;
        }
        SOVAI_RETURN_IF_ERROR(ReadBody(size, false, sink, res.body));
        SOVAI_RETURN_IF_ERROR(ReadLine().status());  // the CRLF after the chunk
      }
    } else if (content_length) {
      SOVAI_RETURN_IF_ERROR(ReadBody(*content_length, false, sink, res.body));
    } else {
      SOVAI_RETURN_IF_ERROR(ReadBody(UINT64_MAX, true, sink, res.body));
      close = true;
    }
    if (close) Close();
    return res;
  }

  std::string host_;
  uint16_t port_;
  base::UniqueFd fd_;
  std::unique_ptr<char[]> buf_;  // received bytes: [begin_, end_)
  size_t begin_ = 0, end_ = 0;
};

// One connection to the endpoint plus what signing needs.
class S3Conn {
 public:
  S3Conn(const Config& config, const net::ClientOptions& options)
      : config_(config),
        host_(options.host + ":" + std::to_string(options.port)),
        conn_(options.host, options.port) {}

  // `req.target` is "/bucket/key?query", already percent-encoded. `payload_hash` is a hex
  // SHA-256 or UNSIGNED-PAYLOAD; ignored in --plain mode (no Authorization at all).
  base::Result<Response> Send(Request req, std::string_view payload_hash,
                              const Sink* sink = nullptr) {
    req.headers.Set("Host", host_);
    if (!config_.plain) {
      objstore::Credential credential{config_.access_key, config_.secret_key, ""};
      SOVAI_RETURN_IF_ERROR(objstore::SignV4(req.method, req.target, req.headers, credential,
                                             config_.region, NowUnixMicros(), payload_hash)
                                .status());
    }
    return conn_.Send(req, sink);
  }

 private:
  const Config& config_;
  std::string host_;
  HttpConn conn_;
};

std::string ObjectTarget(const Config& c, std::string_view key) {
  return "/" + c.bucket + "/" + base::UriEncode(key, /*encode_slash=*/false);
}

// Runs `body(thread_index, stats)` on `n` threads and merges what they measured; the span is
// from the first thread's start to the last one's end.
template <class Fn>
ThreadStats RunThreads(int64_t n, Fn body) {
  std::vector<ThreadStats> per(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int64_t t = 0; t < n; ++t) {
    threads.emplace_back([&, t] { body(static_cast<int>(t), per[static_cast<size_t>(t)]); });
  }
  for (auto& th : threads) th.join();
  ThreadStats all;
  all.seconds = MsSince(start) / 1e3;
  for (auto& s : per) {
    all.latencies_ms.insert(all.latencies_ms.end(), s.latencies_ms.begin(), s.latencies_ms.end());
    all.bytes += s.bytes;
    all.errors += s.errors;
  }
  return all;
}

// `client_cores`: this process's CPU time over the wall time of the whole run.
void Report(const Config& c, ThreadStats& s, double client_cores) {
  const uint64_t ops = s.latencies_ms.size();
  const double seconds = std::max(s.seconds, 1e-9);
  double p50 = Quantile(s.latencies_ms, 0.50);
  double p99 = Quantile(s.latencies_ms, 0.99);
  std::printf(
      "s3_load op=%s target=%s concurrency=%lld ops=%llu bytes=%llu seconds=%.3f ops_per_s=%.1f "
      "MB_per_s=%.1f p50_ms=%.3f p99_ms=%.3f errors=%llu client_cpu=%.2f\n",
      c.op.c_str(),
      c.op == "md5"                                 ? "cpu"
      : c.op == "disk-write" || c.op == "fsync-put" ? "disk"
      : c.plain                                     ? "plain-http"
                                                    : "s3",
      static_cast<long long>(c.concurrency), static_cast<unsigned long long>(ops),
      static_cast<unsigned long long>(s.bytes), seconds, static_cast<double>(ops) / seconds,
      static_cast<double>(s.bytes) / seconds / 1e6, p50, p99,
      static_cast<unsigned long long>(s.errors), client_cores);
  std::fflush(stdout);
}

std::string MakePattern() {
  std::string p = base::RandomBytes(kPatternBytes);
  return p;
}

// --- S3 operations ------------------------------------------------------------------------------

int CreateBucket(const Config& c, const net::ClientOptions& options) {
  S3Conn conn(c, options);
  Request req;
  req.method = "PUT";
  req.target = "/" + c.bucket;
  auto res = conn.Send(req, objstore::kEmptySha256Hex);
  if (!res.ok()) {
    std::fprintf(stderr, "s3_load: create bucket: %s\n", res.status().ToString().c_str());
    return 1;
  }
  if (res->status != 200 && res->body.find("BucketAlreadyOwnedByYou") == std::string::npos) {
    std::fprintf(stderr, "s3_load: create bucket: %s\n", Quote(*res).c_str());
    return 1;
  }
  return 0;
}

// PUTs of distinct keys prefix+i, each body size_bytes (its first 8 bytes are i, so no two are
// alike), until the duration ends or `count` objects were written.
ThreadStats PutSmall(const Config& c, const net::ClientOptions& options, FirstError& first) {
  std::atomic<int64_t> next{0};
  const auto deadline = Clock::now() + std::chrono::seconds(c.duration_s);
  const std::string pattern = MakePattern();
  return RunThreads(c.concurrency, [&](int, ThreadStats& s) {
    S3Conn conn(c, options);
    for (;;) {
      if (Clock::now() >= deadline) return;
      int64_t i = next.fetch_add(1);
      if (c.count > 0 && i >= c.count) return;
      Request req;
      req.method = "PUT";
      req.target = ObjectTarget(c, c.prefix + std::to_string(i));
      req.body = pattern.substr(0, static_cast<size_t>(c.size_bytes));
      std::memcpy(req.body.data(), &i, std::min<size_t>(sizeof i, req.body.size()));
      req.headers.Set("Content-Type", "application/octet-stream");
      auto start = Clock::now();
      auto res = conn.Send(req, base::HexEncode(base::Sha256(req.body)));
      if (!res.ok() || res->status != 200) {
        ++s.errors;
        first.Record("PUT " + req.target + ": " +
                     (res.ok() ? Quote(*res) : res.status().ToString()));
        return;
      }
      s.latencies_ms.push_back(MsSince(start));
      s.bytes += req.body.size();
    }
  });
}

// GETs of keys prefix+0 .. prefix+(count-1), round robin, until the duration ends.
ThreadStats GetSmall(const Config& c, const net::ClientOptions& options, FirstError& first) {
  std::atomic<int64_t> next{0};
  const auto deadline = Clock::now() + std::chrono::seconds(c.duration_s);
  return RunThreads(c.concurrency, [&](int, ThreadStats& s) {
    S3Conn conn(c, options);
    while (Clock::now() < deadline) {
      int64_t i = next.fetch_add(1) % c.count;
      Request req;
      req.method = "GET";
      req.target = ObjectTarget(c, c.prefix + std::to_string(i));
      auto start = Clock::now();
      auto res = conn.Send(req, objstore::kEmptySha256Hex);
      if (!res.ok() || res->status != 200 ||
          res->body.size() != static_cast<size_t>(c.size_bytes)) {
        ++s.errors;
        first.Record("GET " + req.target + ": " +
                     (res.ok() ? Quote(*res) + " (" + std::to_string(res->body.size()) + " bytes)"
                               : res.status().ToString()));
        return;
      }
      s.latencies_ms.push_back(MsSince(start));
      s.bytes += res->body.size();
    }
  });
}

std::optional<std::string> XmlElement(const std::string& xml, const std::string& name) {
  const std::string open = "<" + name + ">", close = "</" + name + ">";
  size_t a = xml.find(open);
  if (a == std::string::npos) return std::nullopt;
  a += open.size();
  size_t b = xml.find(close, a);
  if (b == std::string::npos) return std::nullopt;
  return xml.substr(a, b - a);
}

// CreateMultipartUpload, UploadPart of every part_mb part on `concurrency` connections (each takes
// the next part number), CompleteMultipartUpload. The timed span is all three; the latencies are
// per part.
ThreadStats PutBig(const Config& c, const net::ClientOptions& options, FirstError& first) {
  const uint64_t total = static_cast<uint64_t>(c.big_mb) << 20;
  const uint64_t part = static_cast<uint64_t>(c.part_mb) << 20;
  const int parts = static_cast<int>((total + part - 1) / part);
  const std::string pattern = MakePattern();
  auto part_size = [&](int n) {
    return std::min(part, total - static_cast<uint64_t>(n - 1) * part);
  };
  // Every part repeats the pattern from offset 0, so one hash per distinct part size suffices.
  std::string full_hash(objstore::kUnsignedPayload), last_hash(objstore::kUnsignedPayload);
  if (c.sign_big_payload) {
    auto hash = [&](uint64_t size) {
      base::Sha256Hasher h;
      for (uint64_t done = 0; done < size;) {
        size_t take = static_cast<size_t>(std::min<uint64_t>(pattern.size(), size - done));
        h.Update(std::string_view(pattern.data(), take));
        done += take;
      }
      return base::HexEncode(h.Finish());
    };
    full_hash = hash(part_size(1));
    last_hash = hash(part_size(parts));
  }

  const auto start = Clock::now();
  S3Conn control(c, options);
  Request create;
  create.method = "POST";
  create.target = ObjectTarget(c, c.key) + "?uploads";
  auto created = control.Send(create, objstore::kEmptySha256Hex);
  std::optional<std::string> upload_id;
  if (created.ok() && created->status == 200) upload_id = XmlElement(created->body, "UploadId");
  if (!upload_id) {
    first.Record("CreateMultipartUpload: " +
                 (created.ok() ? Quote(*created) : created.status().ToString()));
    ThreadStats failed;
    failed.errors = 1;
    return failed;
  }
  std::vector<std::string> etags(static_cast<size_t>(parts));
  std::atomic<int> next{1};
  ThreadStats stats = RunThreads(std::min<int64_t>(c.concurrency, parts), [&](int, ThreadStats& s) {
    S3Conn conn(c, options);
    for (;;) {
      int n = next.fetch_add(1);
      if (n > parts) return;
      Request req;
      req.method = "PUT";
      req.target = ObjectTarget(c, c.key) + "?partNumber=" + std::to_string(n) +
                   "&uploadId=" + base::UriEncode(*upload_id, true);
      req.pattern = &pattern;
      req.pattern_bytes = part_size(n);
      auto start = Clock::now();
      auto res = conn.Send(req, n == parts ? last_hash : full_hash);
      auto etag = res.ok() ? res->headers.Get("ETag") : std::nullopt;
      if (!res.ok() || res->status != 200 || !etag) {
        ++s.errors;
        first.Record("UploadPart " + std::to_string(n) + ": " +
                     (res.ok() ? Quote(*res) : res.status().ToString()));
        return;
      }
      etags[static_cast<size_t>(n - 1)] = std::string(*etag);
      s.latencies_ms.push_back(MsSince(start));
      s.bytes += part_size(n);
    }
  });
  if (stats.errors > 0) return stats;
  std::string xml = "<CompleteMultipartUpload>";
  for (int n = 1; n <= parts; ++n) {
    xml += "<Part><PartNumber>" + std::to_string(n) + "</PartNumber><ETag>" +
           etags[static_cast<size_t>(n - 1)] + "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  Request complete;
  complete.method = "POST";
  complete.target = ObjectTarget(c, c.key) + "?uploadId=" + base::UriEncode(*upload_id, true);
  complete.body = xml;
  complete.headers.Set("Content-Type", "application/xml");
  auto done = control.Send(complete, base::HexEncode(base::Sha256(xml)));
  // Complete answers 200 and may still carry an error document (S3 does so after a long wait).
  if (!done.ok() || done->status != 200 || done->body.find("<Error>") != std::string::npos) {
    ++stats.errors;
    first.Record("CompleteMultipartUpload: " +
                 (done.ok() ? Quote(*done) : done.status().ToString()));
  }
  stats.seconds = MsSince(start) / 1e3;
  return stats;
}

// `concurrency` whole downloads of the object at once, each streamed to a sink that counts bytes.
ThreadStats GetBig(const Config& c, const net::ClientOptions& options, FirstError& first) {
  return RunThreads(c.concurrency, [&](int, ThreadStats& s) {
    S3Conn conn(c, options);
    Request req;
    req.method = "GET";
    req.target = ObjectTarget(c, c.key);
    uint64_t got = 0;
    Sink sink = [&got](std::string_view piece) { got += piece.size(); };
    auto start = Clock::now();
    auto res = conn.Send(req, objstore::kEmptySha256Hex, &sink);
    if (!res.ok() || res->status != 200) {
      ++s.errors;
      first.Record("GET " + req.target + ": " + (res.ok() ? Quote(*res) : res.status().ToString()));
      return;
    }
    s.latencies_ms.push_back(MsSince(start));
    s.bytes += got;
  });
}

// --- Local peers --------------------------------------------------------------------------------

base::Status WriteAll(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return base::ErrnoToStatus(errno, "write '" + path + "'");
    data += w;
    n -= static_cast<size_t>(w);
  }
  return base::Status();
}

base::Status SyncDir(const std::string& dir) {
  base::UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return base::ErrnoToStatus(errno, "open '" + dir + "'");
  if (::fsync(fd.get()) != 0) return base::ErrnoToStatus(errno, "fsync '" + dir + "'");
  return base::Status();
}

// The physical limit of put-big: big_mb written sequentially to one new file in 1 MiB write()s
// through the page cache (Sovai's write size), streamed to the disk as it goes (base::WriteBehind,
// as Sovai's data files are), one fdatasync at the end, then the directory fsync. Leaves the file
// at <dir>/<key> (run.sh lets nginx serve it for the get-big peer).
ThreadStats DiskWrite(const Config& c, FirstError& first) {
  ThreadStats s;
  const std::string path = c.dir + "/" + c.key;
  const uint64_t total = static_cast<uint64_t>(c.big_mb) << 20;
  const size_t block = static_cast<size_t>(c.part_mb) << 20;
  std::string buf;
  const std::string pattern = MakePattern();
  while (buf.size() < block) buf += pattern.substr(0, block - buf.size());
  auto fail = [&](const base::Status& st) {
    ++s.errors;
    first.Record(st.ToString());
    return s;
  };
  ::unlink(path.c_str());
  auto start = Clock::now();
  base::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return fail(base::ErrnoToStatus(errno, "open '" + path + "'"));
  base::WriteBehind behind;
  for (uint64_t done = 0; done < total;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>({block, uint64_t{1} << 20, total - done}));
    if (auto st = WriteAll(fd.get(), buf.data(), n, path); !st.ok()) return fail(st);
    done += n;
    behind.Wrote(fd.get(), done);
  }
  if (::fdatasync(fd.get()) != 0) return fail(base::ErrnoToStatus(errno, "fdatasync " + path));
  fd.Reset();
  if (auto st = SyncDir(c.dir); !st.ok()) return fail(st);
  s.latencies_ms.push_back(MsSince(start));
  s.seconds = s.latencies_ms.back() / 1e3;
  s.bytes = total;
  return s;
}

// The hashing ceiling of put-big: S3 owes every part's MD5 (its ETag, which s3cmd checks against
// the bytes it sent), so no compliant server can take parts faster than this machine computes MD5
// over concurrent parts: big_mb hashed as part_mb parts on `concurrency` threads, nothing else
// (no socket, no disk). Uses the server's hasher (base::Md5Hasher).
ThreadStats Md5Ceiling(const Config& c) {
  const int64_t parts = (c.big_mb + c.part_mb - 1) / c.part_mb;
  const size_t block = std::min<size_t>(static_cast<size_t>(c.part_mb) << 20, 1 << 20);
  std::string buf;
  const std::string pattern = MakePattern();
  while (buf.size() < block) buf += pattern.substr(0, block - buf.size());
  std::atomic<int64_t> next{0};
  return RunThreads(std::min<int64_t>(c.concurrency, parts), [&](int, ThreadStats& s) {
    for (int64_t part = next.fetch_add(1); part < parts; part = next.fetch_add(1)) {
      const uint64_t begin = static_cast<uint64_t>(part) * c.part_mb << 20;
      const uint64_t end = std::min<uint64_t>(begin + (static_cast<uint64_t>(c.part_mb) << 20),
                                              static_cast<uint64_t>(c.big_mb) << 20);
      auto start = Clock::now();
      base::Md5Hasher md5;
      for (uint64_t at = begin; at < end; at += block) {
        md5.Update(std::string_view(buf.data(), std::min<uint64_t>(block, end - at)));
      }
      if (md5.Finish().size() != base::kMd5Bytes) ++s.errors;
      s.latencies_ms.push_back(MsSince(start));
      s.bytes += end - begin;
    }
  });
}

// The durable small-write floor: per object, write a temporary file, fdatasync it, rename it into
// place and fsync the directory (STYLE.md's durable write, with no batching across writers).
ThreadStats FsyncPut(const Config& c, FirstError& first) {
  std::atomic<int64_t> next{0};
  const auto deadline = Clock::now() + std::chrono::seconds(c.duration_s);
  const std::string pattern = MakePattern();
  if (::mkdir(c.dir.c_str(), 0755) != 0 && errno != EEXIST) {
    first.Record(base::ErrnoToStatus(errno, "mkdir '" + c.dir + "'").ToString());
    ThreadStats failed;
    failed.errors = 1;
    return failed;
  }
  return RunThreads(c.concurrency, [&](int t, ThreadStats& s) {
    std::string body = pattern.substr(0, static_cast<size_t>(c.size_bytes));
    auto fail = [&](const base::Status& st) {
      ++s.errors;
      first.Record(st.ToString());
    };
    while (Clock::now() < deadline) {
      int64_t i = next.fetch_add(1);
      if (c.count > 0 && i >= c.count) return;
      std::memcpy(body.data(), &i, std::min<size_t>(sizeof i, body.size()));
      const std::string tmp = c.dir + "/.tmp-" + std::to_string(t);
      const std::string path = c.dir + "/" + c.prefix + std::to_string(i);
      auto start = Clock::now();
      base::UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!fd.valid()) return fail(base::ErrnoToStatus(errno, "open '" + tmp + "'"));
      if (auto st = WriteAll(fd.get(), body.data(), body.size(), tmp); !st.ok()) return fail(st);
      if (::fdatasync(fd.get()) != 0) return fail(base::ErrnoToStatus(errno, "fdatasync " + tmp));
      fd.Reset();
      if (::rename(tmp.c_str(), path.c_str()) != 0) {
        return fail(base::ErrnoToStatus(errno, "rename to '" + path + "'"));
      }
      if (auto st = SyncDir(c.dir); !st.ok()) return fail(st);
      s.latencies_ms.push_back(MsSince(start));
      s.bytes += body.size();
    }
  });
}

base::Status Validate(const Config& c) {
  auto range = [](const char* name, int64_t v, int64_t lo, int64_t hi) -> base::Status {
    if (v < lo || v > hi) {
      return base::InvalidArgumentError("--" + std::string(name) + " must be in [" +
                                        std::to_string(lo) + ", " + std::to_string(hi) + "], not " +
                                        std::to_string(v));
    }
    return base::Status();
  };
  SOVAI_RETURN_IF_ERROR(range("concurrency", c.concurrency, 1, kMaxConcurrency));
  SOVAI_RETURN_IF_ERROR(range("duration-s", c.duration_s, 1, 3600));
  SOVAI_RETURN_IF_ERROR(range("size-bytes", c.size_bytes, 1, kMaxObjectBytes));
  SOVAI_RETURN_IF_ERROR(range("big-mb", c.big_mb, 1, kMaxBigMb));
  SOVAI_RETURN_IF_ERROR(range("part-mb", c.part_mb, 1, kMaxPartMb));
  if ((c.big_mb + c.part_mb - 1) / c.part_mb > kMaxParts) {
    return base::InvalidArgumentError("--big-mb / --part-mb makes more than 10000 parts");
  }
  if (c.op == "get" && c.count < 1) {
    return base::InvalidArgumentError("--op get needs --count: the number of keys put before");
  }
  if ((c.op == "disk-write" || c.op == "fsync-put") && c.dir.empty()) {
    return base::InvalidArgumentError("--op " + c.op + " needs --dir");
  }
  bool s3 = c.op == "create-bucket" || c.op == "put" || c.op == "get" || c.op == "put-big" ||
            c.op == "get-big";
  if (s3 && !c.plain && (c.access_key.empty() || c.secret_key.empty())) {
    return base::InvalidArgumentError("--op " + c.op + " needs --access-key and --secret-key");
  }
  if (c.plain && c.op != "get" && c.op != "get-big") {
    return base::InvalidArgumentError("--plain is for get and get-big (peers such as nginx)");
  }
  if (!s3 && c.op != "disk-write" && c.op != "fsync-put" && c.op != "md5") {
    return base::InvalidArgumentError(
        "--op must be create-bucket, put, get, put-big, get-big, disk-write, fsync-put or md5");
  }
  return base::Status();
}

int Main(int argc, char** argv) {
  Config c;
  base::FlagSet flags("s3_load", "S3 load generator and local peers for bench/s3/run.sh.");
  flags.String("op", &c.op,
               "create-bucket, put, get, put-big, get-big, disk-write, fsync-put or md5");
  flags.String("endpoint", &c.endpoint, "http://HOST:PORT of the S3 endpoint (or the peer)");
  flags.String("access-key", &c.access_key, "SigV4 access key id");
  flags.String("secret-key", &c.secret_key, "SigV4 secret key");
  flags.String("region", &c.region, "SigV4 region");
  flags.String("bucket", &c.bucket, "bucket (first path segment in --plain mode)");
  flags.String("prefix", &c.prefix, "key prefix of put/get objects (file prefix for fsync-put)");
  flags.String("key", &c.key, "key of the put-big/get-big object (file name for disk-write)");
  flags.String("dir", &c.dir, "directory of the local peers disk-write and fsync-put");
  flags.Int("concurrency", &c.concurrency, "connections (threads)");
  flags.Int("duration-s", &c.duration_s, "seconds of put/get/fsync-put");
  flags.Int("count", &c.count, "put/fsync-put: most objects (0 = no limit); get: keys to read");
  flags.Int("size-bytes", &c.size_bytes, "size of put/get objects");
  flags.Int("big-mb", &c.big_mb, "size of the put-big object / disk-write file, MiB");
  flags.Int("part-mb", &c.part_mb, "multipart part size (and disk-write block), MiB");
  flags.Bool("plain", &c.plain, "unsigned plain HTTP GETs (a peer such as nginx)");
  flags.Bool("sign-big-payload", &c.sign_big_payload,
             "put-big: send each part's SHA-256 instead of UNSIGNED-PAYLOAD");
  if (auto st = flags.Parse({argv + 1, argv + argc}); !st.ok()) {
    std::fprintf(stderr, "s3_load: %s\n", st.message().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (auto st = Validate(c); !st.ok()) {
    std::fprintf(stderr, "s3_load: %s\n", st.message().c_str());
    return 2;
  }
  net::ClientOptions options;
  if (c.op != "disk-write" && c.op != "fsync-put" && c.op != "md5") {
    auto parsed = net::ClientOptionsFromUrl(c.endpoint);
    if (!parsed.ok()) {
      std::fprintf(stderr, "s3_load: --endpoint: %s\n", parsed.status().message().c_str());
      return 2;
    }
    options = std::move(*parsed);
    if (options.tls) {
      std::fprintf(stderr, "s3_load: --endpoint must be http:// (the bench measures no TLS)\n");
      return 2;
    }
  }
  if (c.op == "create-bucket") return CreateBucket(c, options);

  FirstError first;
  const double cpu_start = CpuSeconds();
  const auto start = Clock::now();
  ThreadStats stats;
  if (c.op == "put") stats = PutSmall(c, options, first);
  if (c.op == "get") stats = GetSmall(c, options, first);
  if (c.op == "put-big") stats = PutBig(c, options, first);
  if (c.op == "get-big") stats = GetBig(c, options, first);
  if (c.op == "disk-write") stats = DiskWrite(c, first);
  if (c.op == "fsync-put") stats = FsyncPut(c, first);
  if (c.op == "md5") stats = Md5Ceiling(c);
  // Over the whole run, setup included: it errs on the high side.
  const double client_cores = (CpuSeconds() - cpu_start) / (MsSince(start) / 1e3);
  Report(c, stats, client_cores);
  if (stats.errors > 0) {
    std::fprintf(stderr, "s3_load: %llu error(s); first: %s\n",
                 static_cast<unsigned long long>(stats.errors), first.Get().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace sovai::bench

int main(int argc, char** argv) { return sovai::bench::Main(argc, argv); }
