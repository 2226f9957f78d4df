// Beast-free parts of the public API: headers, request target parsing, percent-coding, responses,
// SSE framing, Range parsing, status tables.
#include "net/http.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

#include "base/strings.h"
#include "net/internal/file_stream.h"

namespace sovai::net {

using base::Result;
using base::Status;

namespace {

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool ParseU64(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return base::EqualsIgnoreCase(a, b);
}

// --- Headers --------------------------------------------------------------------------------

std::optional<std::string_view> Headers::Get(std::string_view name) const {
  for (const auto& [k, v] : fields_) {
    if (EqualsIgnoreCase(k, name)) return std::string_view(v);
  }
  return std::nullopt;
}

std::vector<std::string_view> Headers::GetAll(std::string_view name) const {
  std::vector<std::string_view> out;
  for (const auto& [k, v] : fields_) {
    if (EqualsIgnoreCase(k, name)) out.emplace_back(v);
  }
  return out;
}

void Headers::Add(std::string name, std::string value) {
  fields_.emplace_back(std::move(name), std::move(value));
}

void Headers::Set(std::string name, std::string value) {
  Remove(name);
  Add(std::move(name), std::move(value));
}

void Headers::Remove(std::string_view name) {
  std::erase_if(fields_, [&](const Field& f) { return EqualsIgnoreCase(f.first, name); });
}

// --- Percent coding -------------------------------------------------------------------------

// net's names for base's percent coding (the HTTP layer's public header keeps its own
// vocabulary; there is one implementation).
Result<std::string> PercentDecode(std::string_view in, bool plus_is_space) {
  return base::PercentDecode(in, plus_is_space);
}

std::string PercentEncode(std::string_view in, bool keep_slash) {
  return base::UriEncode(in, /*encode_slash=*/!keep_slash);
}

// --- Request --------------------------------------------------------------------------------

namespace {

// A body reader for requests without a body.
class EmptyBodyReader final : public BodyReader {
 public:
  Result<size_t> Read(char*, size_t) override { return size_t{0}; }
};

}  // namespace

Result<size_t> StringBodyReader::Read(char* buf, size_t n) {
  n = std::min({n, max_read_bytes_, data_.size() - pos_});
  if (n > 0) std::memcpy(buf, data_.data() + pos_, n);  // `buf` may be null when n is 0
  pos_ += n;
  return n;
}

BodyReader& Request::body() {
  static EmptyBodyReader empty;  // stateless, so sharing it is safe
  return body_ != nullptr ? *body_ : empty;
}

void Request::Clear() {
  method_.clear();
  target_.clear();
  raw_path_.clear();
  raw_query_.clear();
  path_.clear();
  route_pattern_.clear();
  params_.clear();
  query_params_.clear();
  headers_.Clear();
  version_ = 11;
  content_length_.reset();
  chunked_ = false;
  body_ = nullptr;
}

Status Request::SetTarget(std::string_view target) {
  if (target.empty() || target.front() != '/') {
    return base::InvalidArgumentError("request target must start with '/': '" +
                                      std::string(target.substr(0, 256)) + "'");
  }
  // assign(), not a new string: a connection reuses its Request, and with it this storage.
  target_.assign(target);
  size_t q = target.find('?');
  std::string_view raw_path = target.substr(0, q);
  std::string_view raw_query =
      q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  // A fragment is never sent by conforming clients; drop it if present.
  if (size_t hash = raw_query.find('#'); hash != std::string_view::npos) {
    raw_query = raw_query.substr(0, hash);
  }
  if (q == std::string_view::npos) {
    if (size_t hash = raw_path.find('#'); hash != std::string_view::npos) {
      raw_path = raw_path.substr(0, hash);
    }
  }
  raw_path_.assign(raw_path);
  raw_query_.assign(raw_query);
  if (raw_path_.find('%') == std::string::npos) {
    path_.assign(raw_path_);  // nothing to decode ('+' is not a space in paths)
  } else {
    SOVAI_ASSIGN_OR_RETURN(path_, PercentDecode(raw_path_));
  }
  if (path_.find('\0') != std::string::npos) {
    return base::InvalidArgumentError("request path contains a NUL byte");
  }
  query_params_.clear();
  std::string_view rest = raw_query_;
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view part = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (part.empty()) continue;
    size_t eq = part.find('=');
    std::string_view k = part.substr(0, eq);
    std::string_view v = eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1);
    SOVAI_ASSIGN_OR_RETURN(std::string key, PercentDecode(k, /*plus_is_space=*/true));
    SOVAI_ASSIGN_OR_RETURN(std::string value, PercentDecode(v, /*plus_is_space=*/true));
    query_params_.emplace_back(std::move(key), std::move(value));
  }
  return Status();
}

std::optional<std::string_view> Request::param(std::string_view name) const {
  for (const auto& [k, v] : params_) {
    if (k == name) return std::string_view(v);
  }
  return std::nullopt;
}

std::optional<std::string_view> Request::query(std::string_view name) const {
  for (const auto& [k, v] : query_params_) {
    if (k == name) return std::string_view(v);
  }
  return std::nullopt;
}

Result<std::string> BodyReader::ReadAll() {
  std::string out;
  char buf[16 * 1024];
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(size_t n, Read(buf, sizeof buf));
    if (n == 0) return out;
    out.append(buf, n);
  }
}

Result<uint64_t> BodyReader::Discard() {
  uint64_t total = 0;
  auto buf = std::make_unique<char[]>(kStreamChunkBytes);
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(size_t n, Read(buf.get(), kStreamChunkBytes));
    if (n == 0) return total;
    total += n;
  }
}

// --- SSE ------------------------------------------------------------------------------------

Status SseWriter::WriteEvent(std::string_view data, std::string_view event, std::string_view id) {
  auto has_newline = [](std::string_view s) {
    return s.find_first_of("\r\n") != std::string_view::npos;
  };
  if (has_newline(event) || has_newline(id)) {
    return base::InvalidArgumentError("SSE event name and id must not contain CR or LF");
  }
  std::string out;
  out.reserve(data.size() + event.size() + id.size() + 32);
  if (!event.empty()) out.append("event: ").append(event).append("\n");
  if (!id.empty()) out.append("id: ").append(id).append("\n");
  // Split data on any line break (CRLF, CR, LF) into data: lines.
  size_t start = 0;
  for (size_t i = 0; i <= data.size(); ++i) {
    if (i == data.size() || data[i] == '\n' || data[i] == '\r') {
      out.append("data: ").append(data.substr(start, i - start)).append("\n");
      if (i < data.size() && data[i] == '\r' && i + 1 < data.size() && data[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  out.append("\n");
  return out_.Write(out);
}

Status SseWriter::WriteComment(std::string_view text) {
  std::string out = ":";
  for (char c : text) {
    if (c == '\r' || c == '\n') c = ' ';
    out.push_back(c);
  }
  out.append("\n\n");
  return out_.Write(out);
}

Status SseWriter::WriteRetry(std::chrono::milliseconds retry) {
  return out_.Write("retry: " + std::to_string(retry.count()) + "\n\n");
}

// --- Response -------------------------------------------------------------------------------

Response Response::Text(int status, std::string body, std::string content_type) {
  Response r;
  r.status = status;
  r.headers.Set("Content-Type", std::move(content_type));
  r.body = std::move(body);
  return r;
}

Response Response::Json(int status, std::string json_body) {
  return Text(status, std::move(json_body), "application/json");
}

Response Response::Empty(int status) {
  Response r;
  r.status = status;
  return r;
}

Response Response::Error(int status, std::string message) {
  Response r;
  r.status = status;
  r.error_message = std::move(message);
  return r;
}

Response Response::Error(const Status& status) {
  return Error(HttpStatusFromCode(status.code()), status.message());
}

Response Response::Stream(int status, std::string content_type, StreamFn writer,
                          std::optional<uint64_t> content_length) {
  Response r;
  r.status = status;
  r.headers.Set("Content-Type", std::move(content_type));
  r.stream = std::move(writer);
  r.stream_length = content_length;
  return r;
}

Response Response::Sse(SseFn writer) {
  Response r =
      Stream(200, "text/event-stream", [writer = std::move(writer)](BodyWriter& out) -> Status {
        SseWriter sse(out);
        return writer(sse);
      });
  r.headers.Set("Cache-Control", "no-cache");
  r.headers.Set("X-Accel-Buffering", "no");
  return r;
}

Result<Response> Response::File(const std::string& path, uint64_t offset,
                                std::optional<uint64_t> length, std::string content_type) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return base::ErrnoToStatus(errno, "open '" + path + "'");
  return FileFd(fd, offset, length, std::move(content_type));
}

Result<Response> Response::FileFd(int fd, uint64_t offset, std::optional<uint64_t> length,
                                  std::string content_type) {
  auto file = std::make_shared<internal::FileDescriptor>(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return base::ErrnoToStatus(errno, "fstat");
  if (!S_ISREG(st.st_mode)) return base::InvalidArgumentError("not a regular file");
  auto size = static_cast<uint64_t>(st.st_size);
  if (offset > size) {
    return base::OutOfRangeError("offset " + std::to_string(offset) + " is past the end (" +
                                 std::to_string(size) + " bytes)");
  }
  uint64_t n = length.value_or(size - offset);
  if (n > size - offset) {
    return base::OutOfRangeError("range " + std::to_string(offset) + "+" + std::to_string(n) +
                                 " is past the end (" + std::to_string(size) + " bytes)");
  }
  return Stream(
      200, std::move(content_type),
      [file, offset, n](BodyWriter& out) {
        return internal::StreamFileRange(file->get(), offset, n, out);
      },
      n);
}

// --- Tables ---------------------------------------------------------------------------------

int HttpStatusFromCode(base::StatusCode code) {
  using base::StatusCode;
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kAborted:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kOutOfRange:
      return 416;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kCancelled:
      return 499;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string_view HttpReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 101:
      return "Switching Protocols";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 307:
      return "Temporary Redirect";
    case 308:
      return "Permanent Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 412:
      return "Precondition Failed";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 416:
      return "Range Not Satisfiable";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 499:
      return "Client Closed Request";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "";
  }
}

Result<std::optional<ByteRange>> ParseRange(std::string_view header, uint64_t size) {
  header = TrimSpace(header);
  constexpr std::string_view kPrefix = "bytes=";
  if (header.size() < kPrefix.size() ||
      !EqualsIgnoreCase(header.substr(0, kPrefix.size()), kPrefix)) {
    return std::optional<ByteRange>();
  }
  std::string_view spec = TrimSpace(header.substr(kPrefix.size()));
  if (spec.find(',') != std::string_view::npos) return std::optional<ByteRange>();  // multi-range
  size_t dash = spec.find('-');
  if (dash == std::string_view::npos) return std::optional<ByteRange>();
  std::string_view first = TrimSpace(spec.substr(0, dash));
  std::string_view last = TrimSpace(spec.substr(dash + 1));
  auto unsatisfiable = [&] {
    return base::OutOfRangeError("range '" + std::string(header.substr(0, 128)) +
                                 "' is not satisfiable for " + std::to_string(size) + " bytes");
  };
  if (first.empty()) {  // suffix: last N bytes
    uint64_t n = 0;
    if (!ParseU64(last, n)) return std::optional<ByteRange>();
    if (n == 0 || size == 0) return unsatisfiable();
    n = std::min(n, size);
    return std::optional<ByteRange>(ByteRange{size - n, n});
  }
  uint64_t a = 0;
  if (!ParseU64(first, a)) return std::optional<ByteRange>();
  uint64_t b = 0;
  if (last.empty()) {
    b = size == 0 ? 0 : size - 1;
  } else {
    if (!ParseU64(last, b)) return std::optional<ByteRange>();
    if (b < a) return std::optional<ByteRange>();  // syntactically invalid: ignore the header
    if (size > 0) b = std::min(b, size - 1);
  }
  if (a >= size) return unsatisfiable();
  return std::optional<ByteRange>(ByteRange{a, b - a + 1});
}

}  // namespace sovai::net
