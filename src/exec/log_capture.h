// Job logs: a workload's stdout and stderr, and the platform's own notes, as one file of records.
//
// Format (docs/formats/job-log.md): one record per line,
//
//   <RFC 3339 UTC timestamp with microseconds> <source>[+] <line bytes>\n
//   2026-11-29T14:03:05.123456Z stdout epoch 1 loss 2.31
//   2026-11-29T14:03:05.200001Z sovai volume sync: 12 files
//
// where source is stdout, stderr or sovai. A line longer than kMaxLogLineBytes is cut into
// pieces (at a UTF-8 character boundary when there is one nearby); every piece but the last
// carries the '+' marker, meaning "the next record of this source continues this line". An
// unfinished line that waits longer than kLogPartialFlushMs for its newline is written the same
// way, so a live reader sees a progress bar or a prompt. The bytes of a line are kept as they are
// (invalid UTF-8, '\r', NUL): the file is bytes, and only '\n' ends a record. A last line without a
// newline is written as a complete record when its stream ends.
//
// Concurrency: records are written whole, a batch of them with one write(2) to a file opened with
// O_APPEND, under a mutex. Records therefore never interleave, neither between the capture thread
// and LogWriter::Write callers in this process, nor between two LogWriters (or processes) appending
// to one file on a local filesystem. Records are not fsync'ed one by one: logs are best effort;
// Sync() on request.
//
// Reading: ReadLog returns whole records from a byte offset, and the offset to continue from, so
// `GET /v1/jobs/{id}/logs?offset=N` can page through the file and follow it while it grows.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "base/env.h"
#include "base/status.h"
#include "exec/limits.h"

namespace sovai::exec {

enum class LogSource : uint8_t { kStdout, kStderr, kSovai };

// "stdout", "stderr", "sovai".
std::string_view LogSourceName(LogSource source);

// One record, '\n' included. `line` must not contain '\n' and be at most kMaxLogLineBytes (bugs:
// SOVAI_CHECK); `continued` adds the '+' marker.
std::string FormatLogRecord(int64_t unix_micros, LogSource source, bool continued,
                            std::string_view line);

// A parsed record (for readers: the CLI, the web panel's server side, tests).
struct LogRecord {
  int64_t unix_micros = 0;
  LogSource source = LogSource::kStdout;
  bool continued = false;
  std::string line;  // without the '\n'
  friend bool operator==(const LogRecord&, const LogRecord&) = default;
};

// Parses one record, with or without its '\n'. Errors: InvalidArgument, saying what is malformed.
base::Result<LogRecord> ParseLogRecord(std::string_view record);

// Appends records to one log file. Thread-safe (see the header comment).
class LogWriter {
 public:
  // Opens `path` for appending, creating it (mode 0640) if needed. The clock of `env` stamps the
  // records; `env` must outlive the writer. Errors: those of opening the file.
  static base::Result<std::unique_ptr<LogWriter>> Open(base::Env& env, const std::string& path);

  // Writes `text` as records of `source`: one per '\n'-separated line (a final '\n' ends the last
  // line and adds no empty record; empty text is one empty record), long lines split as described
  // above. This is how the platform adds its notes: Write(LogSource::kSovai, "volume sync: 12
  // files"). Errors: the write error; records written before it stay.
  base::Status Write(LogSource source, std::string_view text);

  // Writes one record as is. `line` must satisfy FormatLogRecord's contract.
  base::Status WriteRecord(LogSource source, bool continued, std::string_view line);

  // fsync(2) of the file.
  base::Status Sync();

  const std::string& path() const { return path_; }
  base::Env& env() const { return env_; }

 private:
  friend class LogCapture;  // writes a batch of formatted records at once

  LogWriter(base::Env& env, std::string path, std::unique_ptr<base::WritableFile> file)
      : env_(env), path_(std::move(path)), file_(std::move(file)) {}
  // Appends whole formatted records with one write.
  base::Status AppendRecords(std::string_view records);

  base::Env& env_;
  const std::string path_;
  std::mutex mu_;  // guards file_: one record per Append, never two at once
  std::unique_ptr<base::WritableFile> file_;
};

struct LogCaptureOptions {
  // See kLogPartialFlushMs. Negative: unfinished lines wait for their newline (or the limit).
  int64_t partial_flush_ms = kLogPartialFlushMs;
};

// Reads a workload's stdout and stderr pipes on its own thread and writes their lines to a
// LogWriter until both reach end of file (every process holding the write ends has exited).
// The pipes are always drained, even after a write error, so that a full disk never blocks the
// workload on a full pipe; records are lost instead and Finish reports the first error.
class LogCapture {
 public:
  // Takes the read ends of the two pipes (either may be invalid: that stream is not captured).
  // Errors: Internal when the thread's wake-up eventfd cannot be created.
  static base::Result<std::unique_ptr<LogCapture>> Start(std::shared_ptr<LogWriter> writer,
                                                         base::UniqueFd stdout_fd,
                                                         base::UniqueFd stderr_fd,
                                                         LogCaptureOptions options = {});

  // Stops reading now if both streams have not ended (unread output is lost), and joins.
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Blocks until both streams have ended and their last records are written, then returns the
  // first write or read error (OK if none). Later calls return the same.
  base::Status Finish();

  // The last complete line the workload wrote to stderr (for error messages, e.g. bwrap's own
  // complaint when it cannot set up a sandbox). Thread-safe.
  std::string last_stderr_line() const;

 private:
  LogCapture(std::shared_ptr<LogWriter> writer, base::UniqueFd stdout_fd, base::UniqueFd stderr_fd,
             base::UniqueFd wake_fd, LogCaptureOptions options);
  void Run();

  std::shared_ptr<LogWriter> writer_;
  base::UniqueFd fds_[2];   // stdout, stderr; owned by the thread while it runs
  base::UniqueFd wake_fd_;  // eventfd: the destructor wakes the thread to stop
  const LogCaptureOptions options_;

  mutable std::mutex mu_;  // guards status_, last_stderr_line_
  base::Status status_;
  std::string last_stderr_line_;

  std::mutex finish_mu_;  // serializes Finish/~LogCapture around joining thread_
  std::thread thread_;
};

// A piece of a log file.
struct LogChunk {
  std::string data;          // whole records only (empty at the end of the file)
  uint64_t next_offset = 0;  // where the next read starts: offset + data.size()
  uint64_t size_bytes = 0;   // the file's size when it was read
};

// Reads whole records from `offset` (0, or a next_offset from an earlier call): up to `max_bytes`
// (lowered to kMaxLogReadBytes), except that one record longer than max_bytes is returned whole
// so that a reader always makes progress. A record still being written is not returned until its
// '\n' is there. Errors: NotFound for a missing file; InvalidArgument for max_bytes 0 or an offset
// that is not the start of a record; OutOfRange for an offset past the end of the file.
base::Result<LogChunk> ReadLog(base::Env& env, const std::string& path, uint64_t offset,
                               size_t max_bytes);

}  // namespace sovai::exec
