#include "net/internal/request_head.h"

namespace sovai::net::internal {

HeadError HeadErrorFromParse(const boost::system::error_code& ec, const HeadLimits& limits) {
  if (ec == http::error::header_limit) {
    return {431, "request head is larger than " + std::to_string(limits.max_header_bytes) +
                     " bytes (request line + header fields)"};
  }
  return {400, "malformed request: " + ec.message()};
}

ParsedHead ParseRequestHead(std::string_view bytes, const HeadLimits& limits, Request& out) {
  ParsedHead result;
  http::request_parser<http::empty_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.eager(false);
  boost::system::error_code ec;
  size_t used = 0;
  while (!parser.is_header_done()) {
    size_t n = parser.put(asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    if (ec == http::error::need_more) {
      result.error = {400, "incomplete request head"};
      return result;
    }
    if (ec) {
      result.error = HeadErrorFromParse(ec, limits);
      return result;
    }
    used += n;
    if (n == 0 && !parser.is_header_done()) {
      result.error = {400, "incomplete request head"};
      return result;
    }
  }
  result.head_bytes = used;
  result.error = FillRequest(parser, limits, out);
  return result;
}

ParsedRequest ParseRequest(std::string_view bytes, const HeadLimits& limits,
                           uint64_t max_body_bytes, Request& out) {
  ParsedRequest result;
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(max_body_bytes);
  parser.eager(true);
  boost::system::error_code ec;
  size_t used = 0;
  bool head_checked = false;
  while (!parser.is_done()) {
    size_t n = parser.put(asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (!head_checked && parser.is_header_done()) {
      head_checked = true;
      result.error = FillRequest(parser, limits, out);
      if (!result.error.ok()) return result;
    }
    if (ec == http::error::body_limit) {
      result.error = {413, "request body is larger than the limit of " +
                               std::to_string(max_body_bytes) + " bytes"};
      return result;
    }
    // All remaining bytes are offered on each call, so "need more" means the request is cut.
    if (ec == http::error::need_more || (!ec && n == 0 && !parser.is_done())) {
      result.error = {400, "incomplete request"};
      return result;
    }
    if (ec) {
      result.error = head_checked ? HeadError{400, "malformed request body: " + ec.message()}
                                  : HeadErrorFromParse(ec, limits);
      return result;
    }
  }
  result.body = parser.get().body();
  return result;
}

}  // namespace sovai::net::internal
