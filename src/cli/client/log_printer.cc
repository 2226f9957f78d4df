#include "cli/client/log_printer.h"

#include "cli/client/limits.h"

namespace sovai::cli::client {

std::optional<LogRecord> ParseLogRecord(std::string_view line) {
  size_t first = line.find(' ');
  if (first == std::string_view::npos || first == 0) return std::nullopt;
  size_t second = line.find(' ', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  LogRecord record;
  record.timestamp = line.substr(0, first);
  // RFC 3339: starts with a 4-digit year and a '-'; any fraction length is accepted.
  if (record.timestamp.size() < 20 || record.timestamp[4] != '-' || record.timestamp[10] != 'T') {
    return std::nullopt;
  }
  std::string_view source = line.substr(first + 1, second - first - 1);
  if (!source.empty() && source.back() == '+') {
    record.continued = true;
    source.remove_suffix(1);
  }
  if (source.empty()) return std::nullopt;
  for (char c : source) {
    if (c < 'a' || c > 'z') return std::nullopt;
  }
  record.source = source;
  record.text = line.substr(second + 1);
  return record;
}

void LogPrinter::Feed(std::string_view piece) {
  size_t start = 0;
  for (;;) {
    size_t newline = piece.find('\n', start);
    if (newline == std::string_view::npos) {
      if (!discarding_) pending_.append(piece.substr(start));
      if (pending_.size() > kMaxLogRecordBytes) {
        pending_.clear();
        discarding_ = true;
      }
      return;
    }
    std::string_view tail = piece.substr(start, newline - start);
    if (discarding_) {
      discarding_ = false;
    } else if (pending_.empty()) {
      Record(tail);
    } else {
      pending_.append(tail);
      std::string line = std::move(pending_);
      pending_.clear();
      Record(line);
    }
    start = newline + 1;
  }
}

void LogPrinter::Record(std::string_view line) {
  std::optional<LogRecord> record = ParseLogRecord(line);
  if (!record) return;  // not a record (an error body): ignored, not counted
  consumed_bytes_ += line.size() + 1;
  if (record->source != "stdout" && record->source != "stderr" && record->source != "sovai") {
    return;  // a source of a later format version: skipped, as the format asks
  }
  if (options_.timestamps) {
    std::string out(line);
    out += '\n';
    console_.Out(out);
    return;
  }
  std::string out;
  // Another source's record while a line is open: end that line so the two do not run together.
  if (!open_source_.empty() && open_source_ != record->source) out += '\n';
  out.append(record->text);
  if (record->continued) {
    open_source_ = std::string(record->source);
  } else {
    out += '\n';
    open_source_.clear();
  }
  console_.Out(out);
}

void LogPrinter::Finish() {
  Reset();
  if (!open_source_.empty()) {
    console_.Out("\n");
    open_source_.clear();
  }
}

}  // namespace sovai::cli::client
