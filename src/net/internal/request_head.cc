#include "net/internal/request_head.h"

#include <cstring>

namespace sovai::net::internal {

HeadError HeadErrorFromParse(const boost::system::error_code& ec, const HeadLimits& limits) {
  if (ec == http::error::header_limit) {
    return {431, "request head is larger than " + std::to_string(limits.max_header_bytes) +
                     " bytes (request line + header fields)"};
  }
  return {400, "malformed request: " + ec.message()};
}

// --- RequestParser --------------------------------------------------------------------------

void RequestParser::on_request_impl(http::verb method, beast::string_view method_str,
                                    beast::string_view target_view, int version,
                                    boost::system::error_code&) {
  // Problems are recorded, not raised: CheckHead reports them in a fixed order once the whole
  // head has been parsed (a Beast error here would read as a malformed request).
  version_ = version;
  if (version != 10 && version != 11) return;
  out_.set_version(version);
  out_.set_method(std::string(method_str));
  std::string_view target(target_view.data(), target_view.size());
  target_bytes_ = target.size();
  if (target.size() > limits_.max_target_bytes) return;
  if (target == "*" && method == http::verb::options) target = "/";
  target_status_ = out_.SetTarget(target);
}

void RequestParser::on_field_impl(http::field name, beast::string_view name_string,
                                  beast::string_view value, boost::system::error_code&) {
  ++field_count_;
  if (name == http::field::transfer_encoding) has_transfer_encoding_ = true;
  // Past the limit the request is refused (CheckHead); keep no more fields than that.
  if (field_count_ > limits_.max_header_count) return;
  out_.mutable_headers().Add(std::string(name_string.data(), name_string.size()),
                             std::string(value.data(), value.size()));
}

void RequestParser::on_header_impl(boost::system::error_code&) {
  out_.set_chunked(chunked());
  if (auto len = content_length()) out_.set_content_length(*len);
}

size_t RequestParser::on_body_impl(beast::string_view body, boost::system::error_code& ec) {
  // As http::buffer_body's reader: copy what fits, ask for a new buffer when it is full.
  if (body_data_ == nullptr) {
    ec = http::error::need_buffer;
    return 0;
  }
  size_t n = std::min(body.size(), body_left_);
  std::memcpy(body_data_, body.data(), n);
  body_data_ += n;
  body_left_ -= n;
  if (n != body.size()) ec = http::error::need_buffer;
  return n;
}

HeadError RequestParser::CheckHead() const {
  if (version_ != 10 && version_ != 11) {
    return {505, "HTTP version " + std::to_string(version_ / 10) + "." +
                     std::to_string(version_ % 10) + " is not supported; use HTTP/1.1"};
  }
  if (target_bytes_ > limits_.max_target_bytes) {
    return {414, "request target is " + std::to_string(target_bytes_) + " bytes; the limit is " +
                     std::to_string(limits_.max_target_bytes)};
  }
  if (field_count_ > limits_.max_header_count) {
    return {431, "request has " + std::to_string(field_count_) + " header fields; the limit is " +
                     std::to_string(limits_.max_header_count)};
  }
  if (!target_status_.ok()) return {400, target_status_.message()};
  // Beast accepts "Transfer-Encoding: gzip" (body delimited by EOF) on requests; a request body
  // must be framed by Content-Length or chunked.
  if (has_transfer_encoding_ && !chunked()) {
    return {400, "Transfer-Encoding must end with 'chunked' on a request"};
  }
  return {};
}

// --- Socket-free parsing (tests, fuzzer) ------------------------------------------------------

ParsedHead ParseRequestHead(std::string_view bytes, const HeadLimits& limits, Request& out) {
  ParsedHead result;
  RequestParser parser(out, limits);
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
  result.error = parser.CheckHead();
  return result;
}

ParsedRequest ParseRequest(std::string_view bytes, const HeadLimits& limits,
                           uint64_t max_body_bytes, Request& out) {
  ParsedRequest result;
  RequestParser parser(out, limits);
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(max_body_bytes);
  parser.eager(true);
  boost::system::error_code ec;
  size_t used = 0;
  bool head_checked = false;
  char chunk[4096];
  while (!parser.is_done()) {
    parser.set_body_buffer(chunk, sizeof chunk);
    size_t n = parser.put(asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    result.body.append(chunk, sizeof chunk - parser.body_left());
    if (!head_checked && parser.is_header_done()) {
      head_checked = true;
      result.error = parser.CheckHead();
      if (!result.error.ok()) return result;
    }
    if (ec == http::error::body_limit) {
      result.error = {413, "request body is larger than the limit of " +
                               std::to_string(max_body_bytes) + " bytes"};
      return result;
    }
    if (ec == http::error::need_buffer) {  // the chunk is full: the next round brings a new one
      ec = {};
      continue;
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
  return result;
}

}  // namespace sovai::net::internal
