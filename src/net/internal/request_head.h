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

// Beast's HTTP/1 request parser (all framing: request line, fields, Content-Length, chunked)
// writing straight into a net::Request: fields go into `out` as they are parsed, with no
// intermediate http::fields, and body bytes into the caller's buffer (as http::buffer_body
// does). Beast's parsers cannot be reset, so the server makes one per request; it allocates
// nothing itself. `out` must be empty (Request::Clear) and outlive the parser.
class RequestParser final : public http::basic_parser<true> {
 public:
  RequestParser(Request& out, const HeadLimits& limits) : out_(out), limits_(limits) {}

  // Once is_header_done(): our rules on the head, the first that fails in this order: 505 for
  // versions other than 1.0/1.1, 414 for a long target, 431 for too many fields, 400 for a bad
  // target or a body that cannot be framed (Transfer-Encoding other than chunked). Beast's parse
  // errors (400/431) come from put() instead; see HeadErrorFromParse.
  HeadError CheckHead() const;

  // Where put() copies the next body bytes: up to `size` bytes at `data`. put() stops with
  // http::error::need_buffer once they are used up (or when `data` is null).
  void set_body_buffer(char* data, size_t size) {
    body_data_ = data;
    body_left_ = size;
  }
  // How much of the body buffer is still free.
  size_t body_left() const { return body_left_; }

 private:
  void on_request_impl(http::verb method, beast::string_view method_str, beast::string_view target,
                       int version, boost::system::error_code& ec) override;
  void on_response_impl(int, beast::string_view, int, boost::system::error_code&) override {}
  void on_field_impl(http::field name, beast::string_view name_string, beast::string_view value,
                     boost::system::error_code& ec) override;
  void on_header_impl(boost::system::error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>&,
                         boost::system::error_code&) override {}
  size_t on_body_impl(beast::string_view body, boost::system::error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t, beast::string_view,
                            boost::system::error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, beast::string_view body,
                            boost::system::error_code& ec) override {
    return on_body_impl(body, ec);
  }
  void on_finish_impl(boost::system::error_code&) override {}

  Request& out_;
  const HeadLimits& limits_;
  int version_ = 11;
  size_t target_bytes_ = 0;
  size_t field_count_ = 0;
  bool has_transfer_encoding_ = false;
  base::Status target_status_;  // from Request::SetTarget
  char* body_data_ = nullptr;
  size_t body_left_ = 0;
};

// Parses `bytes` as a request head with the given limits (no socket), with RequestParser.
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

}  // namespace sovai::net::internal
