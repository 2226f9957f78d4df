#include "net/internal/response_head.h"

#include <charconv>

#include "net/internal/beast.h"

namespace sovai::net::internal {

namespace {

std::string_view TrimSpaceTab(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void AppendField(std::string_view name, std::string_view value, std::string& out) {
  out.append(name);
  out.append(": ");
  out.append(value);
  out.append("\r\n");
}

// The Connection value for `keep_alive`, from the handler's value (Beast's keep_alive_impl).
void AppendConnection(std::string_view value, int version, bool keep_alive, std::string& out) {
  if (value.empty()) {  // the usual case: nothing to merge
    if (version < 11 && keep_alive) AppendField("Connection", "keep-alive", out);
    if (version >= 11 && !keep_alive) AppendField("Connection", "close", out);
    return;
  }
  auto dropped = [&](std::string_view token) {
    const bool close = EqualsIgnoreCase(token, "close");
    const bool keep = EqualsIgnoreCase(token, "keep-alive");
    if (version < 11) return keep_alive ? close : close || keep;
    return keep_alive ? close || keep : keep;
  };
  std::string merged;
  http::token_list tokens{beast::string_view(value.data(), value.size())};
  for (auto token : tokens) {
    if (dropped(std::string_view(token.data(), token.size()))) continue;
    if (!merged.empty()) merged += ", ";
    merged.append(token.data(), token.size());
  }
  const char* add = nullptr;
  if (version < 11 && keep_alive && !tokens.exists("keep-alive")) add = "keep-alive";
  if (version >= 11 && !keep_alive && !tokens.exists("close")) add = "close";
  if (add != nullptr) {
    if (!merged.empty()) merged += ", ";
    merged += add;
  }
  if (!merged.empty()) AppendField("Connection", merged, out);
}

}  // namespace

void AppendResponseHead(int version, int status, const Headers& headers,
                        std::string_view server_name, BodyFraming framing, uint64_t content_length,
                        bool keep_alive, std::string& out) {
  SOVAI_CHECK(version == 10 || version == 11) << "HTTP version " << version;
  SOVAI_CHECK(status >= 100 && status <= 999) << "HTTP status " << status;
  char line[] = "HTTP/1.1 000 ";
  line[5] = static_cast<char>('0' + version / 10);
  line[7] = static_cast<char>('0' + version % 10);
  line[9] = static_cast<char>('0' + status / 100);
  line[10] = static_cast<char>('0' + status / 10 % 10);
  line[11] = static_cast<char>('0' + status % 10);
  out.append(line, sizeof line - 1);
  std::string_view reason = HttpReasonPhrase(status);
  if (reason.empty()) {
    auto obsolete = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
    reason = std::string_view(obsolete.data(), obsolete.size());
  }
  out.append(reason);
  out.append("\r\n");

  auto skipped = [&](std::string_view name) {
    return EqualsIgnoreCase(name, "Transfer-Encoding") || EqualsIgnoreCase(name, "Connection") ||
           (framing != BodyFraming::kHandlerLength && EqualsIgnoreCase(name, "Content-Length")) ||
           (!server_name.empty() && EqualsIgnoreCase(name, "Server"));
  };
  std::string_view connection;
  bool has_connection = false;
  // Quadratic in the number of fields, which is small, and allocation-free: a field whose name
  // appeared earlier was written with that earlier field's group.
  for (auto it = headers.begin(); it != headers.end(); ++it) {
    const std::string& name = it->first;
    if (!has_connection && EqualsIgnoreCase(name, "Connection")) {
      has_connection = true;
      connection = TrimSpaceTab(it->second);
    }
    if (skipped(name)) continue;
    bool seen = false;
    for (auto prev = headers.begin(); prev != it && !seen; ++prev) {
      seen = EqualsIgnoreCase(prev->first, name);
    }
    if (seen) continue;
    for (auto same = it; same != headers.end(); ++same) {
      if (same == it || EqualsIgnoreCase(same->first, name)) {
        AppendField(same->first, TrimSpaceTab(same->second), out);
      }
    }
  }
  if (!server_name.empty()) AppendField("Server", TrimSpaceTab(server_name), out);
  if (framing == BodyFraming::kLength) {
    char digits[24];
    auto [end, ec] = std::to_chars(digits, digits + sizeof digits, content_length);
    (void)ec;
    AppendField("Content-Length", std::string_view(digits, static_cast<size_t>(end - digits)), out);
  } else if (framing == BodyFraming::kChunked) {
    AppendField("Transfer-Encoding", "chunked", out);
  }
  AppendConnection(connection, version, keep_alive, out);
  out.append("\r\n");
}

}  // namespace sovai::net::internal
