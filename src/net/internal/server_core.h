// What the server's two halves share (net/server.cc holds the connection, server_core.cc the
// accept loop, the start and the shutdown): the executor types, the worker pool, the request
// counters and ServerCore, which is Server::Impl. Internal to net.
#pragma once

#include <array>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "net/http.h"
#include "net/internal/beast.h"
#include "net/internal/net_error.h"
#include "net/internal/request_head.h"
#include "net/internal/response_head.h"

namespace sovai::net::internal {

using base::Result;
using base::Status;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// Everything a connection touches is typed on the io_context's own executor, not on the
// type-erased any_io_executor: no type-erased executor copies and queries per operation.
using IoExecutor = asio::io_context::executor_type;
template <class T = void>
using Task = asio::awaitable<T, IoExecutor>;
using Socket = asio::basic_stream_socket<tcp, IoExecutor>;
using Acceptor = asio::basic_socket_acceptor<tcp, IoExecutor>;
using Timer = asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, IoExecutor>;

// Completion token for `co_await op(..., Into(ec))`: the error lands in `ec` instead of throwing.
inline auto Into(boost::system::error_code& ec) {
  return asio::redirect_error(asio::use_awaitable_t<IoExecutor>(), ec);
}

// --- Worker pool ----------------------------------------------------------------------------

// Runs blocking tasks. Grows on demand (a task never waits while an idle thread or spare
// capacity exists) up to max_threads; threads live until Shutdown.
class WorkerPool {
 public:
  explicit WorkerPool(int max_threads) : max_threads_(std::max(1, max_threads)) {}
  ~WorkerPool() { Shutdown(); }

  void Submit(std::function<void()> task) {
    std::lock_guard lock(mu_);
    SOVAI_CHECK(!stopping_) << "task submitted to a stopped worker pool";
    queue_.push_back(std::move(task));
    if (static_cast<int>(queue_.size()) > idle_ &&
        static_cast<int>(threads_.size()) < max_threads_) {
      threads_.emplace_back([this] { Loop(); });
    }
    cv_.notify_one();
  }

  // Runs what is queued, then joins every thread.
  void Shutdown() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      threads.swap(threads_);
    }
    cv_.notify_all();
    for (auto& t : threads) t.join();
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty()) return;  // stopping
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      task();  // tasks catch their own exceptions
      lock.lock();
    }
  }

  const int max_threads_;
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool stopping_ = false;
};

// Suspends the calling coroutine while `fn` runs on a worker; resumes it on its own I/O thread.
// The wait is a timer that never expires, cancelled (on the I/O thread) when `fn` returns. (An
// earlier version used async_initiate with a handler resumed from the worker; with g++ 12 and
// Boost 1.74 it corrupted the executor's reference count — heap-use-after-free under ASan.)
template <class Fn>
Task<void> RunOnWorker(WorkerPool& pool, Fn fn) {
  Timer done(co_await asio::this_coro::executor, Timer::time_point::max());
  pool.Submit([&done, &fn] {
    fn();
    // `done` outlives this: the coroutine stays suspended until the cancel below has run.
    asio::post(done.get_executor(), [&done] { done.cancel(); });
  });
  boost::system::error_code ec;
  co_await done.async_wait(Into(ec));
}

// One-shot hand-off of a value from an I/O thread to a blocked worker. Unlike std::promise, the
// setter is done touching the object once the waiter can return (it notifies under the lock),
// so the waiter may destroy it right away.
template <class T>
class Completion {
 public:
  void Set(T value) {
    std::lock_guard lock(mu_);
    value_ = std::move(value);
    cv_.notify_one();
  }
  T Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return value_.has_value(); });
    return std::move(*value_);
  }

 private:
  std::mutex mu_;  // guards value_
  std::condition_variable cv_;
  std::optional<T> value_;
};

// --- Stats ----------------------------------------------------------------------------------

constexpr std::string_view kMethodNames[] = {"GET",    "HEAD",  "POST",    "PUT",
                                             "DELETE", "PATCH", "OPTIONS", "OTHER"};
constexpr int kMethods = 8;
constexpr int kOtherMethod = 7;
inline int MethodIndex(std::string_view method) {
  for (int i = 0; i < kOtherMethod; ++i) {
    if (kMethodNames[i] == method) return i;
  }
  return kOtherMethod;
}

// Request counts per (slot, method, status), where a slot is a route, the fallback or the
// unmatched pseudo-route. Bumped by every request on the I/O threads, so without a lock: one
// relaxed atomic per (slot, method, status column). Statuses with a reason phrase (and 499, the
// client went away) have a column; any other status a handler returns goes to a small locked
// map that a well-behaved server never touches.
class RequestCounters {
 public:
  explicit RequestCounters(int slots) : slots_(slots) {
    column_.fill(-1);
    for (int status = 100; status < kMaxStatus; ++status) {
      if (!HttpReasonPhrase(status).empty() || status == 499) {
        column_[static_cast<size_t>(status)] = static_cast<int16_t>(statuses_.size());
        statuses_.push_back(status);
      }
    }
    counts_ = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(slots_) * kMethods *
                                                        statuses_.size());
  }

  void Add(int slot, int method, int status) {
    int column = status >= 0 && status < kMaxStatus ? column_[static_cast<size_t>(status)] : -1;
    if (column < 0) {
      std::lock_guard lock(mu_);
      ++other_[{slot, method, status}];
      return;
    }
    Counter(slot, method, column).fetch_add(1, std::memory_order_relaxed);
  }

  // Calls fn(slot, method, status, count) for every count that is not zero.
  template <class Fn>
  void ForEach(Fn fn) {
    for (int slot = 0; slot < slots_; ++slot) {
      for (int method = 0; method < kMethods; ++method) {
        for (size_t column = 0; column < statuses_.size(); ++column) {
          uint64_t n =
              Counter(slot, method, static_cast<int>(column)).load(std::memory_order_relaxed);
          if (n > 0) fn(slot, method, statuses_[column], n);
        }
      }
    }
    std::lock_guard lock(mu_);
    for (const auto& [key, n] : other_) {
      fn(std::get<0>(key), std::get<1>(key), std::get<2>(key), n);
    }
  }

 private:
  static constexpr int kMaxStatus = 1000;
  std::atomic<uint64_t>& Counter(int slot, int method, int column) {
    size_t i =
        (static_cast<size_t>(slot) * kMethods + static_cast<size_t>(method)) * statuses_.size() +
        static_cast<size_t>(column);
    return counts_[i];
  }

  const int slots_;
  std::array<int16_t, kMaxStatus> column_;           // status → column, -1 for other_
  std::vector<int> statuses_;                        // column → status
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // [slot][method][column]
  std::mutex mu_;                                    // guards other_
  std::map<std::tuple<int, int, int>, uint64_t> other_;
};

// The problem+json body of an error response without a renderer of its own.
void DefaultErrorRenderer(const Request*, Response& res);

inline bool IsBodylessStatus(int status) {
  return (status >= 100 && status < 200) || status == 204 || status == 304;
}

// Lingering close bounds.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr uint64_t kLingerBytes = 16 * 1024 * 1024;

// --- ServerCore (Server::Impl) --------------------------------------------------------------

class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // Called on the connection's I/O thread at shutdown: idle → close now; busy → close after the
  // current request (`force` closes busy ones too).
  virtual void OnShutdown(bool force) = 0;
  virtual IoExecutor executor() = 0;
};

class ServerCore {
 public:
  ServerCore(Router r, const ServerOptions& o)
      : router(std::move(r)), opts(o), counters(router.route_count() + 2) {
    head_limits.max_header_bytes = o.max_header_bytes;
    head_limits.max_header_count = o.max_header_count;
    head_limits.max_target_bytes = o.max_target_bytes;
    if (!opts.error_renderer) opts.error_renderer = DefaultErrorRenderer;
  }
  ~ServerCore() {
    // Context 0 first: its accept loop may be suspended holding a socket made on another context.
    // Every other object lives on the context that runs it.
    acceptor.reset();
    work.clear();
    for (auto& io : ios) io.reset();
  }

  Status Start();
  void Shutdown(std::chrono::milliseconds grace);
  Task<void> AcceptLoop();
  void Reject(Socket& socket);

  // Registry of live connections (for shutdown and max_connections).
  bool Register(uint64_t id, std::weak_ptr<ConnectionBase> conn) {
    std::lock_guard lock(conns_mu);
    if (stopping.load()) return false;
    conns.emplace(id, std::move(conn));
    return true;
  }
  void Unregister(uint64_t id) {
    std::lock_guard lock(conns_mu);
    conns.erase(id);
    open_connections.fetch_sub(1);
    if (conns.empty()) conns_cv.notify_all();
  }
  void RenderError(const Request* req, Response& res) {
    if (!res.error_message) return;
    try {
      opts.error_renderer(req, res);
    } catch (const std::exception&) {
      DefaultErrorRenderer(req, res);
    }
  }

  // Declaration order matters: connections (destroyed with `ios` at the latest) touch the
  // registry and counters, and TLS streams use ssl_ctx, so those are declared before `ios`.
  Router router;
  ServerOptions opts;
  HeadLimits head_limits;
  std::string address;
  uint16_t port = 0;
  bool started = false;
  std::atomic<bool> stopping{false};
  bool stopped = false;

  std::atomic<uint64_t> open_connections{0};
  std::atomic<uint64_t> total_connections{0};
  std::atomic<uint64_t> rejected_connections{0};
  std::atomic<uint64_t> active_requests{0};
  std::atomic<uint64_t> bytes_in{0};
  std::atomic<uint64_t> bytes_out{0};
  std::atomic<uint64_t> next_id{1};
  RequestCounters counters;  // slots: routes, then fallback, then unmatched

  std::mutex conns_mu;  // guards conns
  std::condition_variable conns_cv;
  std::unordered_map<uint64_t, std::weak_ptr<ConnectionBase>> conns;

  std::unique_ptr<asio::ssl::context> ssl_ctx;
  std::unique_ptr<WorkerPool> workers;
  // One context per I/O thread, each run by that thread only: a connection lives on one context,
  // so its coroutine, socket and timers need no strand. Cross-thread work is asio::post.
  std::vector<std::unique_ptr<asio::io_context>> ios;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<Acceptor> acceptor;  // on ios[0]
  size_t next_io = 0;                // round-robin over ios; used by the accept loop only
  std::vector<std::thread> io_threads;
};

// Serves an accepted connection (TLS when the server has a context) on the socket's I/O context
// (server.cc); a server that is shutting down closes it at once.
void StartConnection(ServerCore& server, uint64_t id, std::string remote, Socket socket);

}  // namespace sovai::net::internal
