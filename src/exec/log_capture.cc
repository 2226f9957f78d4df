#include "exec/log_capture.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "base/check.h"
#include "base/time.h"
#include "base/utf8.h"

namespace sovai::exec {
namespace {

using base::Result;
using base::Status;

constexpr int kTimestampDigits = 6;  // microseconds, as the format promises

}  // namespace

std::string_view LogSourceName(LogSource source) {
  switch (source) {
    case LogSource::kStdout:
      return "stdout";
    case LogSource::kStderr:
      return "stderr";
    case LogSource::kSovai:
      return "sovai";
  }
  return "unknown";
}

std::string FormatLogRecord(int64_t unix_micros, LogSource source, bool continued,
                            std::string_view line) {
  SOVAI_CHECK_LE(line.size(), kMaxLogLineBytes);
  SOVAI_CHECK(line.find('\n') == std::string_view::npos) << "a log line holds no newline";
  std::string record = base::FormatRfc3339(unix_micros, kTimestampDigits);
  record.reserve(record.size() + line.size() + 10);
  record += ' ';
  record += LogSourceName(source);
  if (continued) record += '+';
  record += ' ';
  record += line;
  record += '\n';
  return record;
}

Result<LogRecord> ParseLogRecord(std::string_view record) {
  if (record.ends_with('\n')) record.remove_suffix(1);
  auto malformed = [&](std::string_view why) {
    std::string shown(record.substr(0, 80));
    return base::InvalidArgumentError("malformed job log record (" + std::string(why) + "): '" +
                                      shown + (record.size() > 80 ? "...'" : "'"));
  };
  if (record.find('\n') != std::string_view::npos) return malformed("more than one line");
  size_t space = record.find(' ');
  if (space == std::string_view::npos) return malformed("no source");
  LogRecord out;
  Result<int64_t> when = base::ParseRfc3339(record.substr(0, space));
  if (!when.ok()) return malformed("bad timestamp");
  out.unix_micros = *when;
  std::string_view rest = record.substr(space + 1);
  size_t source_end = rest.find(' ');
  if (source_end == std::string_view::npos) return malformed("no space after the source");
  std::string_view source = rest.substr(0, source_end);
  if (source.ends_with('+')) {
    out.continued = true;
    source.remove_suffix(1);
  }
  if (source == "stdout") {
    out.source = LogSource::kStdout;
  } else if (source == "stderr") {
    out.source = LogSource::kStderr;
  } else if (source == "sovai") {
    out.source = LogSource::kSovai;
  } else {
    return malformed("unknown source");
  }
  out.line = std::string(rest.substr(source_end + 1));
  return out;
}

// --- LogWriter ---

namespace {

// Appends the records of one line of any length to `out`.
void AppendLineRecords(int64_t unix_micros, LogSource source, std::string_view line, bool ends_line,
                       std::string& out) {
  while (line.size() > kMaxLogLineBytes) {
    size_t cut = base::Utf8SafeCut(line, kMaxLogLineBytes);
    out += FormatLogRecord(unix_micros, source, /*continued=*/true, line.substr(0, cut));
    line.remove_prefix(cut);
  }
  out += FormatLogRecord(unix_micros, source, /*continued=*/!ends_line, line);
}

}  // namespace

Result<std::unique_ptr<LogWriter>> LogWriter::Open(base::Env& env, const std::string& path) {
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<base::WritableFile> file,
                         env.NewWritableFile(path, base::WriteMode::kAppend, 0640));
  return std::unique_ptr<LogWriter>(new LogWriter(env, path, std::move(file)));
}

Status LogWriter::Write(LogSource source, std::string_view text) {
  if (text.ends_with('\n')) text.remove_suffix(1);
  const int64_t now = env_.NowUnixMicros();
  std::string records;
  size_t start = 0;
  while (true) {
    size_t newline = text.find('\n', start);
    std::string_view line = text.substr(
        start, newline == std::string_view::npos ? std::string_view::npos : newline - start);
    AppendLineRecords(now, source, line, /*ends_line=*/true, records);
    if (newline == std::string_view::npos) break;
    start = newline + 1;
  }
  return AppendRecords(records);
}

Status LogWriter::WriteRecord(LogSource source, bool continued, std::string_view line) {
  return AppendRecords(FormatLogRecord(env_.NowUnixMicros(), source, continued, line));
}

Status LogWriter::AppendRecords(std::string_view records) {
  std::lock_guard<std::mutex> lock(mu_);
  return file_->Append(records);
}

Status LogWriter::Sync() {
  std::lock_guard<std::mutex> lock(mu_);
  return file_->Sync();
}

// --- LogCapture ---

Result<std::unique_ptr<LogCapture>> LogCapture::Start(std::shared_ptr<LogWriter> writer,
                                                      base::UniqueFd stdout_fd,
                                                      base::UniqueFd stderr_fd,
                                                      LogCaptureOptions options) {
  SOVAI_CHECK(writer != nullptr);
  base::UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return base::ErrnoToStatus(errno, "eventfd for log capture");
  std::unique_ptr<LogCapture> capture(new LogCapture(
      std::move(writer), std::move(stdout_fd), std::move(stderr_fd), std::move(wake), options));
  capture->thread_ = std::thread([raw = capture.get()] { raw->Run(); });
  return capture;
}

LogCapture::LogCapture(std::shared_ptr<LogWriter> writer, base::UniqueFd stdout_fd,
                       base::UniqueFd stderr_fd, base::UniqueFd wake_fd, LogCaptureOptions options)
    : writer_(std::move(writer)), wake_fd_(std::move(wake_fd)), options_(options) {
  fds_[0] = std::move(stdout_fd);
  fds_[1] = std::move(stderr_fd);
}

LogCapture::~LogCapture() {
  std::lock_guard<std::mutex> lock(finish_mu_);
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_.get(), &one, sizeof(one));
  (void)ignored;
  thread_.join();
}

Status LogCapture::Finish() {
  {
    std::lock_guard<std::mutex> lock(finish_mu_);
    if (thread_.joinable()) thread_.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

std::string LogCapture::last_stderr_line() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_stderr_line_;
}

void LogCapture::Run() {
  using Clock = std::chrono::steady_clock;
  constexpr LogSource kSources[2] = {LogSource::kStdout, LogSource::kStderr};
  struct Stream {
    std::string pending;              // bytes of an unfinished line
    Clock::time_point pending_since;  // when its oldest byte arrived
  };
  Stream streams[2];
  std::string chunk(kLogReadChunkBytes, '\0');

  auto record_error = [&](const Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok()) status_ = status;
  };
  // Writes the records made so far from stream `i`, in one write.
  auto flush_records = [&](int i, const std::string& records, std::string_view last_line) {
    if (records.empty()) return;
    Status written = writer_->AppendRecords(records);
    if (!written.ok()) record_error(written);
    if (i == 1 && !last_line.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      last_stderr_line_ = std::string(last_line);
    }
  };
  // Turns the complete lines (and overlong pieces) of stream i's pending bytes into records;
  // `at_end`: the stream ended, so its unfinished line is complete; `partial`: write the
  // unfinished line now as a continued record.
  auto drain = [&](int i, bool at_end, bool partial) {
    Stream& s = streams[i];
    const int64_t now = writer_->env().NowUnixMicros();
    std::string records;
    std::string_view last_line;
    std::string_view data = s.pending;
    size_t newline;
    while ((newline = data.find('\n')) != std::string_view::npos) {
      AppendLineRecords(now, kSources[i], data.substr(0, newline), /*ends_line=*/true, records);
      last_line = data.substr(0, newline);
      data.remove_prefix(newline + 1);
    }
    // An unfinished line longer than the limit: its full pieces go now.
    while (data.size() > kMaxLogLineBytes) {
      size_t cut = base::Utf8SafeCut(data, kMaxLogLineBytes);
      records += FormatLogRecord(now, kSources[i], /*continued=*/true, data.substr(0, cut));
      data.remove_prefix(cut);
    }
    if (!data.empty() && at_end) {
      records += FormatLogRecord(now, kSources[i], /*continued=*/false, data);
      last_line = data;
      data = {};
    } else if (!data.empty() && partial) {
      size_t cut = base::Utf8SafeCut(data, data.size());
      records += FormatLogRecord(now, kSources[i], /*continued=*/true, data.substr(0, cut));
      data.remove_prefix(cut);
    }
    std::string last(last_line);  // `data` and `last_line` point into s.pending
    s.pending.erase(0, s.pending.size() - data.size());
    s.pending_since = Clock::now();
    flush_records(i, records, last);
  };

  while (fds_[0].valid() || fds_[1].valid()) {
    pollfd polls[3];
    int stream_of[3];
    nfds_t n = 0;
    polls[n] = {wake_fd_.get(), POLLIN, 0};
    stream_of[n++] = -1;
    for (int i = 0; i < 2; ++i) {
      if (!fds_[i].valid()) continue;
      polls[n] = {fds_[i].get(), POLLIN, 0};
      stream_of[n++] = i;
    }
    int timeout_ms = -1;
    if (options_.partial_flush_ms >= 0) {
      for (int i = 0; i < 2; ++i) {
        if (streams[i].pending.empty()) continue;
        auto due = streams[i].pending_since + std::chrono::milliseconds(options_.partial_flush_ms);
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(due - Clock::now());
        int left_ms = static_cast<int>(std::max<int64_t>(0, left.count() + 1));
        timeout_ms = timeout_ms < 0 ? left_ms : std::min(timeout_ms, left_ms);
      }
    }
    int ready = ::poll(polls, n, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      record_error(base::ErrnoToStatus(errno, "poll of a workload's output"));
      break;
    }
    if (polls[0].revents != 0) break;  // the owner gave up: stop now
    for (nfds_t p = 1; p < n; ++p) {
      if (polls[p].revents == 0) continue;
      const int i = stream_of[p];
      ssize_t got = ::read(fds_[i].get(), chunk.data(), chunk.size());
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        if (got < 0) record_error(base::ErrnoToStatus(errno, "read of a workload's output"));
        drain(i, /*at_end=*/true, /*partial=*/false);
        fds_[i].Reset();
        continue;
      }
      if (streams[i].pending.empty()) streams[i].pending_since = Clock::now();
      streams[i].pending.append(chunk.data(), static_cast<size_t>(got));
      std::string_view fresh(chunk.data(), static_cast<size_t>(got));
      if (fresh.find('\n') != std::string_view::npos ||
          streams[i].pending.size() > kMaxLogLineBytes) {
        drain(i, /*at_end=*/false, /*partial=*/false);
      }
    }
    if (options_.partial_flush_ms >= 0) {
      for (int i = 0; i < 2; ++i) {
        if (streams[i].pending.empty()) continue;
        auto age = Clock::now() - streams[i].pending_since;
        if (age >= std::chrono::milliseconds(options_.partial_flush_ms)) {
          drain(i, /*at_end=*/false, /*partial=*/true);
        }
      }
    }
  }
}

// --- ReadLog ---

Result<LogChunk> ReadLog(base::Env& env, const std::string& path, uint64_t offset,
                         size_t max_bytes) {
  if (max_bytes == 0) return base::InvalidArgumentError("read log: max_bytes must be positive");
  max_bytes = std::min(max_bytes, kMaxLogReadBytes);
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<base::RandomAccessFile> file,
                         env.NewRandomAccessFile(path));
  LogChunk chunk;
  chunk.size_bytes = file->size_bytes();
  chunk.next_offset = offset;
  if (offset > chunk.size_bytes) {
    return base::OutOfRangeError("read log: offset " + std::to_string(offset) +
                                 " is past the end of the log (" +
                                 std::to_string(chunk.size_bytes) + " bytes)");
  }
  if (offset > 0) {
    char before = 0;
    SOVAI_ASSIGN_OR_RETURN(size_t got, file->ReadAt(offset - 1, std::span<char>(&before, 1)));
    if (got != 1 || before != '\n') {
      return base::InvalidArgumentError(
          "read log: offset " + std::to_string(offset) +
          " is not the start of a record; use 0 or the next_offset of an earlier read");
    }
  }
  const uint64_t available = chunk.size_bytes - offset;
  if (available == 0) return chunk;

  auto read_at_offset = [&](size_t want) -> Result<std::string> {
    std::string data(want, '\0');
    SOVAI_ASSIGN_OR_RETURN(size_t got, file->ReadAt(offset, std::span<char>(data)));
    data.resize(got);
    return data;
  };
  SOVAI_ASSIGN_OR_RETURN(
      std::string data,
      read_at_offset(static_cast<size_t>(std::min<uint64_t>(available, max_bytes))));
  size_t last_newline = data.rfind('\n');
  if (last_newline == std::string::npos && data.size() < available &&
      data.size() < kMaxLogRecordBytes) {
    // One record longer than max_bytes: return it whole so the reader makes progress.
    SOVAI_ASSIGN_OR_RETURN(
        data,
        read_at_offset(static_cast<size_t>(std::min<uint64_t>(available, kMaxLogRecordBytes))));
    last_newline = data.find('\n');
  }
  if (last_newline == std::string::npos) {
    if (data.size() >= kMaxLogRecordBytes) {
      return base::DataLossError(
          "read log: no record ends within " + std::to_string(kMaxLogRecordBytes) +
          " bytes of offset " + std::to_string(offset) + " in '" + path + "': it is not a job log");
    }
    return chunk;  // the only record is still being written
  }
  data.resize(last_newline + 1);
  chunk.next_offset = offset + data.size();
  chunk.data = std::move(data);
  return chunk;
}

}  // namespace sovai::exec
