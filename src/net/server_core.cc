// The server's life: the listening socket and the accept loop, start and shutdown (the drain of
// the connections), and the Server class over it. The connection itself is in server.cc.
#include "net/internal/server_core.h"

namespace sovai::net {
namespace internal {

namespace {

std::string JsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  return out;
}

}  // namespace

void DefaultErrorRenderer(const Request*, Response& res) {
  std::string_view title = HttpReasonPhrase(res.status);
  res.headers.Set("Content-Type", "application/problem+json");
  res.body = "{\"type\":\"about:blank\",\"title\":\"" + JsonEscape(title) +
             "\",\"status\":" + std::to_string(res.status) + ",\"detail\":\"" +
             JsonEscape(res.error_message.value_or("")) + "\"}\n";
}

namespace {

Result<tcp::endpoint> ResolveListen(asio::io_context& io, const std::string& listen) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return base::InvalidArgumentError("listen address must be host:port, got '" + listen + "'");
  }
  std::string host = listen.substr(0, colon);
  std::string port_str = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  unsigned port = 0;
  auto [p, ec1] = std::from_chars(port_str.data(), port_str.data() + port_str.size(), port);
  if (ec1 != std::errc() || p != port_str.data() + port_str.size() || port > 65535) {
    return base::InvalidArgumentError("bad port in listen address '" + listen + "'");
  }
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  auto results = resolver.resolve(host, port_str, tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    return base::InvalidArgumentError("cannot resolve listen host '" + host + "': " + ec.message());
  }
  return results.begin()->endpoint();
}

}  // namespace

// --- Accepting ------------------------------------------------------------------------------

void ServerCore::Reject(Socket& socket) {
  // Over max_connections: a short 503 on plain TCP (TLS peers are just closed). The send buffer
  // of a new connection has room for it, so one non-blocking send does.
  boost::system::error_code ec;
  if (!ssl_ctx) {
    static constexpr std::string_view kBusy =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
        "Content-Length: 48\r\n\r\nserver is at its connection limit; retry later\r\n";
    socket.non_blocking(true, ec);
    size_t n = socket.write_some(asio::buffer(kBusy.data(), kBusy.size()), ec);
    bytes_out.fetch_add(n, std::memory_order_relaxed);
    socket.shutdown(tcp::socket::shutdown_send, ec);
  }
  socket.close(ec);
}

Task<void> ServerCore::AcceptLoop() {
  for (;;) {
    boost::system::error_code ec;
    // Accept into a socket made on the context that will run the connection, round-robin (not
    // async_accept(executor): converting the socket it returns corrupted executor reference
    // counts with Boost 1.74 under ASan).
    Socket socket(ios[next_io]->get_executor());
    next_io = (next_io + 1) % ios.size();
    co_await acceptor->async_accept(socket, Into(ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open() || stopping.load()) {
        co_return;
      }
      // EMFILE and friends: back off instead of spinning.
      Timer t(ios[0]->get_executor(), std::chrono::milliseconds(50));
      co_await t.async_wait(Into(ec));
      continue;
    }
    total_connections.fetch_add(1, std::memory_order_relaxed);
    if (open_connections.load() >= opts.max_connections) {
      rejected_connections.fetch_add(1, std::memory_order_relaxed);
      Reject(socket);
      continue;
    }
    std::string remote;
    {
      auto ep = socket.remote_endpoint(ec);
      if (!ec) remote = ep.address().to_string() + ":" + std::to_string(ep.port());
    }
    open_connections.fetch_add(1);
    uint64_t id = next_id.fetch_add(1);
    // When shutting down, Register fails and the connection closes with its last owner.
    StartConnection(*this, id, std::move(remote), std::move(socket));
  }
}

Status ServerCore::Start() {
  if (!opts.tls_cert_file.empty() || !opts.tls_key_file.empty()) {
    if (opts.tls_cert_file.empty() || opts.tls_key_file.empty()) {
      return base::InvalidArgumentError("TLS needs both tls_cert_file and tls_key_file");
    }
    ssl_ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    ssl_ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                         asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                         asio::ssl::context::no_tlsv1_1);
    boost::system::error_code ec;
    ssl_ctx->use_certificate_chain_file(opts.tls_cert_file, ec);
    if (ec) {
      return base::InvalidArgumentError("TLS certificate '" + opts.tls_cert_file +
                                        "' is unusable: " + ec.message());
    }
    ssl_ctx->use_private_key_file(opts.tls_key_file, asio::ssl::context::pem, ec);
    if (ec) {
      return base::InvalidArgumentError("TLS key '" + opts.tls_key_file +
                                        "' is unusable: " + ec.message());
    }
  }
  const int n = opts.io_threads > 0
                    ? opts.io_threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < n; ++i) {
    // Concurrency hint 1: only this context's thread runs it (other threads only post to it).
    ios.push_back(std::make_unique<asio::io_context>(1));
  }
  acceptor.emplace(ios[0]->get_executor());
  SOVAI_ASSIGN_OR_RETURN(tcp::endpoint ep, ResolveListen(*ios[0], opts.listen));
  boost::system::error_code ec;
  acceptor->open(ep.protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(ep, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return base::ErrnoToStatus(ec.value(), "listen on '" + opts.listen + "'");
  auto local = acceptor->local_endpoint(ec);
  port = local.port();
  std::string host = local.address().to_string();
  address = local.address().is_v6() ? "[" + host + "]:" + std::to_string(port)
                                    : host + ":" + std::to_string(port);

  workers = std::make_unique<WorkerPool>(opts.max_worker_threads);
  for (auto& io : ios) work.push_back(asio::make_work_guard(*io));
  asio::co_spawn(ios[0]->get_executor(), AcceptLoop(), asio::detached);
  for (auto& io_ptr : ios) {
    io_threads.emplace_back([&io = *io_ptr] {
      for (;;) {
        try {
          io.run();
          return;
        } catch (const std::exception&) {
          // A completion handler threw: keep the I/O thread alive.
        }
      }
    });
  }
  started = true;
  return Status();
}

void ServerCore::Shutdown(std::chrono::milliseconds grace) {
  if (!started || stopped) return;
  stopped = true;
  auto for_each_conn = [&](bool force) {
    std::vector<std::shared_ptr<ConnectionBase>> live;
    {
      std::lock_guard lock(conns_mu);
      for (auto& [id, weak] : conns) {
        if (auto c = weak.lock()) live.push_back(std::move(c));
      }
    }
    for (auto& c : live) {
      asio::post(c->executor(), [c, force] { c->OnShutdown(force); });
    }
  };
  {
    std::lock_guard lock(conns_mu);
    stopping.store(true);
  }
  Completion<bool> closed;
  asio::post(*ios[0], [this, &closed] {
    boost::system::error_code ec;
    acceptor->close(ec);
    closed.Set(true);
  });
  closed.Wait();
  for_each_conn(false);  // idle keep-alive connections close now
  {
    std::unique_lock lock(conns_mu);
    conns_cv.wait_for(lock, grace, [&] { return conns.empty(); });
  }
  // Grace is over: close what is left. Bridged reads/writes fail, handlers return.
  for (;;) {
    for_each_conn(true);
    std::unique_lock lock(conns_mu);
    if (conns_cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return conns.empty(); })) {
      break;
    }
  }
  workers->Shutdown();
  work.clear();
  for (auto& io : ios) io->stop();
  for (auto& t : io_threads) t.join();
  io_threads.clear();
}

}  // namespace internal

using base::Status;

// --- Server ---------------------------------------------------------------------------------

struct Server::Impl : internal::ServerCore {
  using ServerCore::ServerCore;
};

Server::Server(Router router) : impl_(std::make_unique<Impl>(std::move(router), options_)) {}

Server::~Server() {
  if (impl_) impl_->Shutdown(options_.shutdown_grace);
}

Status Server::Start(ServerOptions options) {
  SOVAI_CHECK(!impl_->started) << "Server::Start called twice";
  options_ = std::move(options);
  impl_ = std::make_unique<Impl>(std::move(impl_->router), options_);
  return impl_->Start();
}

void Server::Shutdown(std::chrono::milliseconds grace) { impl_->Shutdown(grace); }

std::string Server::address() const { return impl_->address; }
uint16_t Server::port() const { return impl_->port; }

ServerStats Server::Stats() const {
  ServerStats s;
  s.open_connections = impl_->open_connections.load();
  s.total_connections = impl_->total_connections.load();
  s.rejected_connections = impl_->rejected_connections.load();
  s.active_requests = impl_->active_requests.load();
  s.bytes_in = impl_->bytes_in.load();
  s.bytes_out = impl_->bytes_out.load();
  const int routes = impl_->router.route_count();
  impl_->counters.ForEach([&](int slot, int method, int status, uint64_t count) {
    std::string pattern = slot < routes ? std::string(impl_->router.route_key(slot).first)
                                        : (slot == routes ? "" : "<unmatched>");
    s.requests.push_back(
        {std::move(pattern), std::string(internal::kMethodNames[method]), status, count});
  });
  std::sort(s.requests.begin(), s.requests.end(), [](const RequestCount& a, const RequestCount& b) {
    return std::tie(a.pattern, a.method, a.status) < std::tie(b.pattern, b.method, b.status);
  });
  return s;
}

}  // namespace sovai::net
