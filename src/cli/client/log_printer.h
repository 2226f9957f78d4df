// Prints a job log (docs/formats/job-log.md) as it streams in: records
// "<timestamp> <source>[+] <text>\n" become "<text>\n" (or stay whole with --timestamps), with
// `+` continuation records joined into one line.
//
//   LogPrinter printer(console, {.timestamps = false});
//   for each piece of the body: printer.Feed(piece);
//   printer.Finish();
//   ... printer.consumed_bytes() is the offset to resume from ...
//
// Only whole, well-formed records are printed and counted: a partial record at the end of a
// broken stream waits for the rest (or is dropped by Finish), and anything that is not a record
// (an error body sent instead of the log) is ignored. Records of unknown sources are skipped, as
// the format asks of readers.
// Thread-safety: not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cli/client/console.h"

namespace sovai::cli::client {

struct LogRecord {
  std::string_view timestamp;
  std::string_view source;  // "stdout", "stderr", "sovai" (or a later source: [a-z]+)
  bool continued = false;   // the '+' mark: the line goes on in the next record of this source
  std::string_view text;
};

// Parses one record line (without its '\n'). nullopt when it is not shaped like a record (an
// RFC 3339 timestamp, a lowercase source with an optional '+', the text).
std::optional<LogRecord> ParseLogRecord(std::string_view line);

struct LogPrinterOptions {
  // Print the records as they are (timestamp, source and mark) instead of their text.
  bool timestamps = false;
};

class LogPrinter {
 public:
  LogPrinter(Console& console, LogPrinterOptions options) : console_(console), options_(options) {}

  void Feed(std::string_view piece);
  // Ends the stream: drops an incomplete trailing record and ends a line left open by a '+'
  // record, so that the next output starts on a new line.
  void Finish();
  // Forgets an incomplete record (the stream broke; the next one restarts at consumed_bytes()).
  void Reset() {
    pending_.clear();
    discarding_ = false;
  }

  // Bytes of whole records seen so far (printed or skipped): add it to the starting offset to
  // resume reading after a broken connection.
  uint64_t consumed_bytes() const { return consumed_bytes_; }

 private:
  void Record(std::string_view line);

  Console& console_;
  LogPrinterOptions options_;
  std::string pending_;      // the bytes of an incomplete record
  bool discarding_ = false;  // an overlong line is being skipped up to its newline
  uint64_t consumed_bytes_ = 0;
  // The source whose line is open (its last record had '+'), "" when none.
  std::string open_source_;
};

}  // namespace sovai::cli::client
