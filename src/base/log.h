// Logging: `SOVAI_LOG(INFO) << "bucket created";` with optional structured fields:
//
//   SOVAI_LOG(WARNING).With("bucket", name).With("size_bytes", n) << "quota almost reached";
//
// Levels, lowest first: DEBUG, INFO, WARNING, ERROR. A statement below the configured level costs
// one relaxed atomic load: its stream and field arguments are not evaluated.
//
// Output formats (one line per statement, '\n'-terminated):
//   human: 2026-11-29T14:00:00.123Z INFO  store.cc:12] bucket created bucket=data size_bytes=5
//   json:  {"ts":"2026-11-29T14:00:00.123Z","level":"info","msg":"bucket created",
//           "file":"store.cc","line":12,"bucket":"data","size_bytes":5}
// Timestamps are UTC RFC 3339 with milliseconds; `file` is the basename. In JSON, every string is
// escaped (quotes, backslashes, control characters; invalid UTF-8 becomes U+FFFD) so each line
// parses on its own. In human form, control characters in the message are escaped (\n, \t, ...)
// so one statement is always one line, and a field value is quoted JSON-style when it is empty
// or holds a space, '=', '"' or a control character. Integer and bool fields are JSON numbers
// and booleans; strings are JSON strings. A field named like a built-in key (ts, level, msg, file,
// line) is written with a "_" prefix. Limits (limits.h): kMaxLogMessageBytes, kMaxLogFieldBytes,
// kMaxLogFields; overlong text is cut and marked "...[truncated]".
//
// The sink is the one accepted piece of process-wide mutable state in Sovai. Logging is a
// cross-cutting concern used at every depth of every module; threading a logger through every
// constructor and function would add a parameter everywhere and say nothing. So `main` calls
// ConfigureLogging once at startup (before starting threads) and everything else just logs.
// Until then, logs go to stderr in human form at INFO. Tests may reconfigure (e.g. to capture
// output) but must not race a reconfiguration with logging from other threads they started.
//
// Thread-safety: SOVAI_LOG is safe from any thread. Each statement is written with one write(2)
// under a mutex, so lines from different threads never interleave; lines appear in the order
// their statements completed. Write errors (a closed pipe, a full disk) are ignored: logging never
// fails the caller.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace sovai::base {

enum class LogLevel : uint8_t { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat : uint8_t { kHuman, kJson };

struct LogOptions {
  // Statements below this level are dropped.
  LogLevel level = LogLevel::kInfo;
  LogFormat format = LogFormat::kHuman;
  // Where lines go. Not owned: it must stay open until logging is reconfigured or the process
  // ends. Open files with O_APPEND so that lines stay whole next to other writers.
  int fd = 2;
  // Replaces the wall clock for timestamps (tests). Empty = the system clock.
  std::function<int64_t()> now_unix_micros;
};

// Installs `options` as the process-wide sink. See the header comment for who calls it and when.
void ConfigureLogging(LogOptions options);

// Whether a statement at `level` would be written.
bool IsLogLevelEnabled(LogLevel level);

// "debug", "info", "warning", "error".
std::string_view LogLevelName(LogLevel level);
// Parses a --log-level flag: "debug", "info", "warning" (or "warn"), "error", any case.
// Errors: InvalidArgument naming the accepted values.
Result<LogLevel> ParseLogLevel(std::string_view text);
// Parses a --log-format flag: "human" or "json". Errors: InvalidArgument.
Result<LogFormat> ParseLogFormat(std::string_view text);

namespace internal {

// One statement in flight: collects the message and the fields, writes the line when destroyed.
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  // Structured fields, written in call order.
  LogMessage& With(std::string_view key, std::string_view value);
  LogMessage& With(std::string_view key, const char* value) {
    return With(key, std::string_view(value == nullptr ? "(null)" : value));
  }
  LogMessage& With(std::string_view key, const std::string& value) {
    return With(key, std::string_view(value));
  }
  LogMessage& With(std::string_view key, bool value);
  LogMessage& With(std::string_view key, const Status& value) {
    return With(key, value.ToString());
  }
  template <std::signed_integral T>
  LogMessage& With(std::string_view key, T value) {
    return WithRaw(key, std::to_string(static_cast<int64_t>(value)));
  }
  template <std::unsigned_integral T>
  LogMessage& With(std::string_view key, T value) {
    return WithRaw(key, std::to_string(static_cast<uint64_t>(value)));
  }
  template <std::floating_point T>
  LogMessage& With(std::string_view key, T value) {
    return WithDouble(key, static_cast<double>(value));
  }

  template <typename T>
  LogMessage& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  struct Field {
    std::string key;
    std::string value;
    bool is_string;  // false: `value` is a JSON number or boolean literal
  };
  LogMessage& WithRaw(std::string_view key, std::string literal);
  LogMessage& WithDouble(std::string_view key, double value);
  void AddField(std::string_view key, std::string value, bool is_string);

  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
  std::vector<Field> fields_;
  size_t fields_dropped_ = 0;
};

// Lets the macro be an expression of type void on both branches of `?:`.
struct LogVoidify {
  void operator&(const LogMessage&) {}
};

inline constexpr LogLevel kLogLevelDEBUG = LogLevel::kDebug;
inline constexpr LogLevel kLogLevelINFO = LogLevel::kInfo;
inline constexpr LogLevel kLogLevelWARNING = LogLevel::kWarning;
inline constexpr LogLevel kLogLevelERROR = LogLevel::kError;

}  // namespace internal
}  // namespace sovai::base

// SOVAI_LOG(DEBUG|INFO|WARNING|ERROR) << ...; see the header comment.
#define SOVAI_LOG(severity) SOVAI_LOG_AT_(::sovai::base::internal::kLogLevel##severity)
#define SOVAI_LOG_AT_(level)                    \
  !::sovai::base::IsLogLevelEnabled(level)      \
      ? (void)0                                 \
      : ::sovai::base::internal::LogVoidify() & \
            ::sovai::base::internal::LogMessage(level, __FILE__, __LINE__)
