// Private: turning a parsed HTTP request head into a net::Request, without sockets, so the same
// code runs in the server, in unit tests and in the fuzzer (tests/fuzz/http_request_fuzzer.cc).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "net/http.h"
#include "net/internal/beast.h"

namespace sovai::net::internal {

struct HeadLimits {
  size_t max_header_bytes = kDefaultMaxHeaderBytes;
  size_t max_header_count = kDefaultMaxHeaderCount;
  size_t max_target_bytes = kDefaultMaxTargetBytes;
};

// An HTTP status to answer with (0 = no error) and what was wrong.
struct HeadError {
  int status = 0;
  std::string message;
  bool ok() const { return status == 0; }
};

// Maps a Beast parse error while reading the head to 431 (header_limit) or 400.
HeadError HeadErrorFromParse(const boost::system::error_code& ec, const HeadLimits& limits);

// Fills `out` (method, target, path, query, headers, version, length/chunked) from a completely
// parsed head and checks our limits: 505 for versions other than 1.0/1.1, 414 for a long
// target, 431 for too many fields, 400 for a bad target or a body on a request that cannot have
// one framed (e.g. Transfer-Encoding other than chunked).
template <class Parser>
HeadError FillRequest(const Parser& parser, const HeadLimits& limits, Request& out);

// Parses `bytes` as a request head with the given limits (no socket): Beast's parser + FillRequest.
// On success `head_bytes` is the size of the head; status 400 when the head is incomplete.
struct ParsedHead {
  HeadError error;
  size_t head_bytes = 0;
};
ParsedHead ParseRequestHead(std::string_view bytes, const HeadLimits& limits, Request& out);

// Parses a whole request (head and body, chunked or Content-Length) with a body limit, the way
// the server does, returning the body; 413 when the body exceeds `max_body_bytes`. For tests and
// the fuzzer.
struct ParsedRequest {
  HeadError error;
  std::string body;
};
ParsedRequest ParseRequest(std::string_view bytes, const HeadLimits& limits,
                           uint64_t max_body_bytes, Request& out);

// --- implementation of the template ---------------------------------------------------------

template <class Parser>
HeadError FillRequest(const Parser& parser, const HeadLimits& limits, Request& out) {
  const auto& h = parser.get();
  int version = h.version();
  if (version != 10 && version != 11) {
    return {505, "HTTP version " + std::to_string(version / 10) + "." +
                     std::to_string(version % 10) + " is not supported; use HTTP/1.1"};
  }
  out.set_version(version);
  out.set_method(std::string(h.method_string()));
  std::string_view target(h.target().data(), h.target().size());
  if (target.size() > limits.max_target_bytes) {
    return {414, "request target is " + std::to_string(target.size()) + " bytes; the limit is " +
                     std::to_string(limits.max_target_bytes)};
  }
  size_t count = 0;
  for (const auto& field : h) {
    (void)field;
    ++count;
  }
  if (count > limits.max_header_count) {
    return {431, "request has " + std::to_string(count) + " header fields; the limit is " +
                     std::to_string(limits.max_header_count)};
  }
  if (target == "*" && h.method() == http::verb::options) {
    target = "/";
  }
  if (base::Status st = out.SetTarget(target); !st.ok()) return {400, st.message()};
  Headers& headers = out.mutable_headers();
  for (const auto& field : h) {
    headers.Add(std::string(field.name_string()), std::string(field.value()));
  }
  out.set_chunked(parser.chunked());
  if (auto len = parser.content_length()) {
    out.set_content_length(*len);
  }
  // Beast accepts "Transfer-Encoding: gzip" (body delimited by EOF) on requests; a request body
  // must be framed by Content-Length or chunked.
  if (h.count(http::field::transfer_encoding) > 0 && !parser.chunked()) {
    return {400, "Transfer-Encoding must end with 'chunked' on a request"};
  }
  return {};
}

}  // namespace sovai::net::internal
