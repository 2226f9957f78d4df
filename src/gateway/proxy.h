// The gateway's reverse proxy: forwards one request to a replica of an app and streams the
// answer back, token by token for Server-Sent Events.
//
//   gateway::ReplicaSet replicas;            // kept up to date by the deployment controller
//   router.Add(method, "/apps/{app}/{rest...}", [&](net::Request& req) {
//     return gateway::Forward(req, replicas, "/" + std::string(*req.param("rest")), {});
//   }, {.max_body_bytes = gateway::kDefaultMaxRequestBodyBytes});
//
// Thread-safety: Forward may run on many server workers at once. `replicas` must outlive the
// Forward call only (not the streamed body that follows: leases keep what they need alive).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "gateway/limits.h"
#include "gateway/replica_set.h"
#include "net/http.h"

namespace sovai::gateway {

struct ProxyOptions {
  // Larger request bodies get 413. The route's RouteOptions::max_body_bytes must be at least this
  // (the server refuses bodies over the route's limit before the handler runs).
  uint64_t max_request_body_bytes = kDefaultMaxRequestBodyBytes;
  // Replicas tried per request (distinct ones); values below 1 count as 1.
  int max_attempts = kDefaultMaxAttempts;
  // Response bytes buffered between the replica and a slower client (backpressure beyond).
  size_t max_queued_response_bytes = kDefaultMaxQueuedResponseBytes;
  std::chrono::milliseconds connect_timeout = kDefaultUpstreamConnectTimeout;
  std::chrono::milliseconds read_timeout = kDefaultUpstreamReadTimeout;
};

// Forwards `request` to the least-loaded replica in `replicas` as `upstream_target` (origin-form,
// already percent-encoded, e.g. "/v1/chat/completions?x=1"), and returns the replica's answer.
//
// The request: its body is read whole first (so it can be sent again), with the hop-by-hop fields
// (see RemoveHopByHopHeaders), Host, Expect and Content-Length removed, and X-Forwarded-For
// (appended to), X-Forwarded-Proto and X-Forwarded-Host set. Host is the replica's.
//
// The answer: the replica's status and header fields (less the hop-by-hop ones) as soon as they
// arrive, then a streamed body that is written to the client piece by piece as the replica sends
// it (never gathered first), with at most options.max_queued_response_bytes in between. (A body
// that has arrived completely by the time the head is handled goes out as one fixed body.) If the
// client goes away, the replica's connection is closed, which tells it to stop. If the replica
// fails mid-body, the client's response is cut short (no final chunk), never completed.
//
// Retries: when the connection fails (refused, reset, closed, timed out) before any byte of the
// answer arrived, the request goes to another replica, up to options.max_attempts in all,
// provided it was not completely sent (connecting or sending failed) or its method is idempotent
// (GET, HEAD, PUT, DELETE, OPTIONS, TRACE): a POST that reached a replica may be running there,
// so it is not sent twice. Nothing is retried once the answer has begun.
//
// Errors are answered with an OpenAI-style JSON body ({"error":{"message","type","param",
// "code"}}):
//   400 invalid_request_error  `upstream_target` is not origin-form (code "invalid_target");
//   413 invalid_request_error  the body exceeds options.max_request_body_bytes
//                              (code "request_too_large");
//   502 server_error           every attempt failed (code "upstream_unavailable"), or the replica
//                              answered something that cannot be forwarded;
//   503 server_error           no replica in the set (code "no_replica_available");
//   504 server_error           the last attempt timed out (code "upstream_timeout").
// A client that vanished while its body was being read gets Response::Error for that failure
// (nobody reads it).
//
// Threads: the upstream request runs on a thread of its own, started here, from which the body
// flows to the response writer. That thread ends (and is joined) by the time the returned
// response is destroyed, whether or not its body was ever written.
net::Response Forward(net::Request& request, ReplicaSet& replicas, std::string upstream_target,
                      const ProxyOptions& options = {});

// Removes the hop-by-hop fields of RFC 9110 §7.6.1 and RFC 9112: Connection, Keep-Alive,
// Proxy-* (Proxy-Connection, Proxy-Authorization, ...), TE, Trailer, Transfer-Encoding,
// Upgrade, and every field named in a Connection value ("Connection: close, X-Foo" removes
// X-Foo). Empty or repeated Connection tokens are ignored. The input was bounded by the head
// limits of whoever parsed it.
void RemoveHopByHopHeaders(net::Headers& headers);

// An OpenAI-style error response: `status`, application/json,
// {"error":{"message":message,"type":type,"param":null,"code":code or null}}.
net::Response OpenAiError(int status, std::string_view message, std::string_view type,
                          std::string_view code = {});

}  // namespace sovai::gateway
