// SseParser (declared in client.h) lives here, with the other socket-free parsing code.
#include "net/client.h"

namespace sovai::net {

bool SseParser::Feed(std::string_view piece) {
  for (char c : piece) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      skip_lf_ = (c == '\r');
      std::string line = std::move(line_);
      line_.clear();
      if (!DispatchLine(line)) return false;
      continue;
    }
    line_.push_back(c);
  }
  return true;
}

bool SseParser::DispatchLine(std::string_view line) {
  if (line.empty()) {  // blank line: dispatch the event
    if (!has_data_) {
      current_ = SseEvent{.event = {}, .data = {}, .id = current_.id};
      return true;
    }
    SseEvent event = std::move(current_);
    current_ = SseEvent{.event = {}, .data = {}, .id = event.id};  // id persists per the spec
    has_data_ = false;
    return on_event_(event);
  }
  if (line.front() == ':') return true;  // comment
  size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) current_.data.push_back('\n');
    current_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    current_.event = std::string(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) current_.id = std::string(value);
  }
  // "retry" and unknown fields are ignored.
  return true;
}

}  // namespace sovai::net
