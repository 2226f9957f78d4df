#include "base/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "base/limits.h"
#include "base/strings.h"
#include "base/time.h"

namespace sovai::base {
namespace {

struct LogState {
  std::atomic<int> level{static_cast<int>(LogLevel::kInfo)};
  std::mutex mu;  // guards `options` and serializes writes to options.fd
  LogOptions options;
};

LogState& State() {
  // Deliberately never destroyed, so that logging from other threads or static destructors
  // during exit stays safe.
  static LogState& state = *new LogState();  // NOLINT(cppcoreguidelines-owning-memory)
  return state;
}

constexpr std::string_view kTruncated = "...[truncated]";

std::string Truncate(std::string text, size_t max_bytes) {
  if (text.size() > max_bytes) {
    text.resize(max_bytes);
    text.append(kTruncated);
  }
  return text;
}

std::string_view Basename(const char* file) {
  std::string_view path(file);
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view HumanLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO ";
    case LogLevel::kWarning:
      return "WARN ";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?????";
}

bool IsReservedKey(std::string_view key) {
  return key == "ts" || key == "level" || key == "msg" || key == "file" || key == "line";
}

// Human form: keeps printable text, escapes control characters so a statement stays one line.
void AppendHumanText(std::string* out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (c < 0x20 || c == 0x7F) {
      out->append("\\x");
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 0xF]);
    } else {
      out->push_back(ch);
    }
  }
}

bool NeedsHumanQuoting(std::string_view value) {
  if (value.empty()) return true;
  for (char ch : value) {
    auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7F || c == '=' || c == '"') return true;
  }
  return false;
}

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // Logging never fails the caller.
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

int64_t SystemNowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void ConfigureLogging(LogOptions options) {
  LogState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  state.level.store(static_cast<int>(options.level), std::memory_order_relaxed);
  state.options = std::move(options);
}

bool IsLogLevelEnabled(LogLevel level) {
  return static_cast<int>(level) >= State().level.load(std::memory_order_relaxed);
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

Result<LogLevel> ParseLogLevel(std::string_view text) {
  std::string lower = AsciiToLower(text);
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warning" || lower == "warn") return LogLevel::kWarning;
  if (lower == "error") return LogLevel::kError;
  return InvalidArgumentError("unknown log level '" + std::string(text) +
                              "': use debug, info, warning or error");
}

Result<LogFormat> ParseLogFormat(std::string_view text) {
  std::string lower = AsciiToLower(text);
  if (lower == "human") return LogFormat::kHuman;
  if (lower == "json") return LogFormat::kJson;
  return InvalidArgumentError("unknown log format '" + std::string(text) + "': use human or json");
}

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line)
    : level_(level), file_(file), line_(line) {}

LogMessage& LogMessage::With(std::string_view key, std::string_view value) {
  AddField(key, Truncate(std::string(value), kMaxLogFieldBytes), /*is_string=*/true);
  return *this;
}

LogMessage& LogMessage::With(std::string_view key, bool value) {
  return WithRaw(key, value ? "true" : "false");
}

LogMessage& LogMessage::WithRaw(std::string_view key, std::string literal) {
  AddField(key, std::move(literal), /*is_string=*/false);
  return *this;
}

LogMessage& LogMessage::WithDouble(std::string_view key, double value) {
  if (!std::isfinite(value)) {
    // JSON has no NaN or infinity.
    AddField(key, std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf"), /*is_string=*/true);
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  return WithRaw(key, buf);
}

void LogMessage::AddField(std::string_view key, std::string value, bool is_string) {
  if (fields_.size() >= kMaxLogFields) {
    ++fields_dropped_;
    return;
  }
  std::string name = IsReservedKey(key) ? "_" + std::string(key) : std::string(key);
  fields_.push_back(Field{std::move(name), std::move(value), is_string});
}

LogMessage::~LogMessage() {
  std::string message = Truncate(stream_.str(), kMaxLogMessageBytes);
  if (fields_dropped_ > 0) {
    fields_.push_back(Field{"fields_dropped", std::to_string(fields_dropped_), false});
  }
  std::string_view file = Basename(file_);

  LogState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  const LogOptions& options = state.options;
  int64_t now = options.now_unix_micros ? options.now_unix_micros() : SystemNowMicros();
  std::string out;
  out.reserve(128 + message.size());
  if (options.format == LogFormat::kJson) {
    out.append("{\"ts\":\"").append(FormatRfc3339(now, 3)).append("\",\"level\":\"");
    out.append(LogLevelName(level_)).append("\",\"msg\":");
    AppendJsonQuoted(&out, message);
    out.append(",\"file\":");
    AppendJsonQuoted(&out, file);
    out.append(",\"line\":").append(std::to_string(line_));
    for (const Field& field : fields_) {
      out.push_back(',');
      AppendJsonQuoted(&out, field.key);
      out.push_back(':');
      if (field.is_string) {
        AppendJsonQuoted(&out, field.value);
      } else {
        out.append(field.value);
      }
    }
    out.append("}\n");
  } else {
    out.append(FormatRfc3339(now, 3)).push_back(' ');
    out.append(HumanLevel(level_)).push_back(' ');
    out.append(file).push_back(':');
    out.append(std::to_string(line_)).append("] ");
    AppendHumanText(&out, message);
    for (const Field& field : fields_) {
      out.push_back(' ');
      AppendHumanText(&out, field.key);
      out.push_back('=');
      if (field.is_string && NeedsHumanQuoting(field.value)) {
        AppendJsonQuoted(&out, field.value);
      } else {
        AppendHumanText(&out, field.value);
      }
    }
    out.push_back('\n');
  }
  WriteAll(options.fd, out);
}

}  // namespace internal
}  // namespace sovai::base
