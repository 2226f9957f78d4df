// Private: the one mapping from a failed socket or TLS operation (a Boost error_code) to a
// Status, shared by the server and the client.
#pragma once

#include <string_view>

#include "base/status.h"
#include "net/internal/beast.h"

namespace sovai::net::internal {

// How a TLS-layer failure reads. The client reports it as Internal (its contract: a TLS failure
// is not a transient outage worth a retry); the server as Unavailable, like any other way a
// client can go away mid-request.
enum class TlsFailure { kInternal, kUnavailable };

// `what` names the operation and, where useful, the peer ("reading the response from
// 10.0.0.1:80"); the message is "<what>: <cause>":
//   beast::error::timeout (a deadline passed)  DeadlineExceeded  "...: timed out"
//   connection refused                         Unavailable       "...: connection refused (is
//                                                                 the server running?)"
//   a TLS error (SSL category, stream truncated) `tls`           "...: TLS error: <detail>"
//   anything else (reset, EOF, closed)         Unavailable       "...: <detail>"
base::Status StatusFromNetError(const boost::system::error_code& ec, std::string_view what,
                                TlsFailure tls = TlsFailure::kUnavailable);

}  // namespace sovai::net::internal
