#include "net/internal/net_error.h"

#include <string>

namespace sovai::net::internal {

base::Status StatusFromNetError(const boost::system::error_code& ec, std::string_view what,
                                TlsFailure tls) {
  std::string prefix(what);
  if (ec == beast::error::timeout) return base::DeadlineExceededError(prefix + ": timed out");
  if (ec == asio::error::connection_refused) {
    return base::UnavailableError(prefix + ": connection refused (is the server running?)");
  }
  if (ec.category() == asio::error::get_ssl_category() ||
      ec == asio::ssl::error::stream_truncated) {
    std::string message = prefix + ": TLS error: " + ec.message();
    return tls == TlsFailure::kInternal ? base::InternalError(std::move(message))
                                        : base::UnavailableError(std::move(message));
  }
  return base::UnavailableError(prefix + ": " + ec.message());
}

}  // namespace sovai::net::internal
