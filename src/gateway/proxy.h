// The gateway's reverse proxy: forwards one request to a replica of an app and streams the
// answer back, token by token for Server-Sent Events.
//
//   gateway::ReplicaSet replicas;            // kept up to date by the deployment controller
//   gateway::UpstreamPool pool;              // idle replica connections, for every app
//   router.Add(method, "/apps/{app}/{rest...}", [&](net::Request& req) {
//     return gateway::Forward(req, replicas, "/" + std::string(*req.param("rest")),
//                             {.upstream_pool = &pool});
//   }, {.max_body_bytes = gateway::kDefaultMaxRequestBodyBytes});
//
// Thread-safety: Forward may run on many server workers at once. `replicas` must outlive the
// Forward call only (not the streamed body that follows: leases keep what they need alive); the
// pool must outlive every response Forward returned (their bodies give connections back to it).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "gateway/limits.h"
#include "gateway/replica_set.h"
#include "net/http.h"

namespace sovai::gateway {

class UpstreamPool;  // upstream_pool.h

struct ProxyOptions {
  // Larger request bodies get 413. The route's RouteOptions::max_body_bytes must be at least this
  // (the server refuses bodies over the route's limit before the handler runs).
  uint64_t max_request_body_bytes = kDefaultMaxRequestBodyBytes;
  // Replicas tried per request (distinct ones); values below 1 count as 1.
  int max_attempts = kDefaultMaxAttempts;
  // Response bytes the gateway holds between the replica and the client: a body of known length
  // up to this is read whole before it is answered; a longer one, or one of unknown length, is
  // streamed in pieces of at most this (64 KiB at most), read from the replica only as fast as the
  // client takes them (backpressure).
  size_t max_queued_response_bytes = kDefaultMaxQueuedResponseBytes;
  std::chrono::milliseconds connect_timeout = kDefaultUpstreamConnectTimeout;
  std::chrono::milliseconds read_timeout = kDefaultUpstreamReadTimeout;
  // Where replica connections are borrowed from and given back to (keep-alive). Null: a new
  // connection per request, closed after it (slow: for tests and one-off calls).
  UpstreamPool* upstream_pool = nullptr;
  // The replicas' POSTs have no effect beyond their answer (a model server's completions): a
  // POST whose connection failed before any byte of the answer is retried like an idempotent
  // request (a crashed replica's requests go to another one).
  bool retry_sent_posts = false;
};

// Forwards `request` to the least-loaded replica in `replicas` as `upstream_target` (origin-form,
// already percent-encoded, e.g. "/v1/chat/completions?x=1"), and returns the replica's answer.
//
// The request: its body is read whole first (so it can be sent again), with the hop-by-hop fields
// (see RemoveHopByHopHeaders), Host, Expect and Content-Length removed, and X-Forwarded-For
// (appended to), X-Forwarded-Proto and X-Forwarded-Host set. Host is the replica's.
//
// The answer: the replica's status and header fields (less the hop-by-hop ones) as soon as the
// first piece of its body arrives (or at once when no body follows), then a streamed body that is
// written to the client piece by piece as the replica sends it (never gathered first: Server-Sent
// Events pass event by event). A body whose Content-Length is at most
// options.max_queued_response_bytes is the exception: it is read whole first and goes out with the
// head as one fixed body (a JSON answer), and a replica that fails midway through it gets the error
// below instead. If the client goes away, the replica's connection is closed, which tells it to
// stop. If the replica fails mid-body, the client's response is cut short (no final chunk), never
// completed.
//
// Connections: taken from options.upstream_pool, and given back only once the answer was read to
// its end and the replica did not say "Connection: close"; closed in every other case.
//
// Retries: when the connection fails (refused, reset, closed, timed out) before any byte of the
// answer arrived, or after the head but before any byte of its body (nothing has reached the
// client yet: a replica killed while it thinks), the request goes to another replica, up to
// options.max_attempts in all, provided it was not completely sent (connecting or sending failed)
// or its method is idempotent (GET, HEAD, PUT, DELETE, OPTIONS, TRACE) or options.retry_sent_posts
// is set: a POST that reached a replica may be running there, so it is not sent twice unless the
// caller says that is harmless. Nothing is retried once the answer's body has begun. A pooled
// connection that fails before any byte of the answer (the replica closed it while it was idle) is
// first tried again on a fresh connection to the same replica, under the same conditions; that does
// not count as an attempt. (A POST that went out completely on it is not resent: it gets 502. The
// pool's idle timeout, below the replicas' own, makes that rare.)
//
// Errors are answered with an OpenAI-style JSON body ({"error":{"message","type","param",
// "code"}}):
//   400 invalid_request_error  `upstream_target` is not origin-form (code "invalid_target");
//   413 invalid_request_error  the body exceeds options.max_request_body_bytes
//                              (code "request_too_large");
//   502 server_error           every attempt failed (code "upstream_unavailable"), the replica
//                              answered something that cannot be forwarded, or a body read whole
//                              (see above) broke off;
//   503 server_error           no replica in the set (code "no_replica_available");
//   504 server_error           the last attempt, or the reading of a body read whole, timed out
//                              (code "upstream_timeout").
// A client that vanished while its body was being read gets Response::Error for that failure
// (nobody reads it).
//
// Threads: none of its own. The request is sent and the head and first body piece read on the
// calling thread (the server worker running the handler); the rest of a streamed body is read from
// the replica by the response writer, on the worker that writes it to the client. A returned
// response whose body is never written closes the replica connection and releases the lease when it
// is destroyed.
net::Response Forward(net::Request& request, ReplicaSet& replicas, std::string upstream_target,
                      const ProxyOptions& options = {});

// As Forward, for a caller that has read the body already (to route on it or to look it up in a
// cache): `body` is sent as the request's body and the request's own body is not read.
net::Response ForwardBody(net::Request& request, std::string body, ReplicaSet& replicas,
                          std::string upstream_target, const ProxyOptions& options = {});

// The whole request body, up to `max_bytes` (ResourceExhausted beyond: answer 413), as Forward
// reads it.
base::Result<std::string> ReadWholeBody(net::Request& request, uint64_t max_bytes);

// The fields Forward sends upstream for `request`: its own less the hop-by-hop ones (see
// RemoveHopByHopHeaders), Host, Content-Length and Expect, with X-Forwarded-For (appended to),
// X-Forwarded-Proto and X-Forwarded-Host set. (The websocket tunnel sends the same.)
net::Headers ForwardedRequestHeaders(const net::Request& request);

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

// A net::ErrorRenderer (ServerOptions::error_renderer) for OpenAI routes: the errors the HTTP
// server answers itself (413 over a route's body limit, 405, 500 for a throwing handler) and
// net::Response::Error bodies as OpenAiError's JSON with the response's status and message; type
// invalid_request_error for 4xx (code request_too_large for 413, as Forward's own 413), 429
// rate_limit_error, server_error otherwise.
void RenderOpenAiError(const net::Request* request, net::Response& response);

}  // namespace sovai::gateway
