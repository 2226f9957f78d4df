// Named limits and defaults of the `sovai` command-line client.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sovai::cli::client {

// The config file is a few hundred bytes; anything much larger is not ours.
inline constexpr uint64_t kMaxConfigBytes = 64 * 1024;
// Page size asked of list routes (the server caps pages at 500).
inline constexpr int64_t kListPageSize = 100;
// `--limit` of list commands: the default, and the most one command follows cursors for.
inline constexpr int64_t kDefaultListLimit = 100;
inline constexpr int64_t kMaxListLimit = 100'000;
// Names resolved to ids (`user delete alice`) are searched in at most this many list items.
inline constexpr int64_t kMaxNameLookupItems = 10'000;
// A problem body is read for its detail; a bigger error body is cut when shown.
inline constexpr size_t kMaxShownErrorBodyBytes = 512;
// `job logs -f`: the pause before reconnecting after the stream ended early or broke, and how
// many connection failures in a row end the command.
inline constexpr std::chrono::milliseconds kLogReconnectDelay{1'000};
inline constexpr int kMaxLogReconnectFailures = 30;
// The read timeout of a followed log stream: a quiet job sends nothing for long stretches, and
// the client reconnects from its offset after this much silence.
inline constexpr std::chrono::milliseconds kLogFollowReadTimeout{300'000};
// The longest log record is 16421 bytes (docs/formats/job-log.md); a "record" longer than this
// without a newline is not a log and is dropped instead of growing memory.
inline constexpr size_t kMaxLogRecordBytes = 64 * 1024;
// The progress bar is redrawn at most this often.
inline constexpr int64_t kProgressRedrawMicros = 100'000;
// Job timeouts accepted by --timeout (the server caps them at 30 days too).
inline constexpr int64_t kMaxDurationS = 366LL * 24 * 3600;
// `app run --wait`: how often the app is polled, and how long it waits by default (--timeout).
inline constexpr std::chrono::milliseconds kAppWaitPollInterval{2'000};
inline constexpr char kDefaultAppWaitTimeout[] = "10m";
// `app get` shows the newest scaling events only (the server keeps more).
inline constexpr size_t kShownScalingEvents = 5;
// `notebook get` shows the newest events only (the server keeps more).
inline constexpr size_t kShownNotebookEvents = 10;
// Files one `bucket cp -r` / `bucket sync` walks locally.
inline constexpr size_t kMaxLocalFiles = 1'000'000;

}  // namespace sovai::cli::client
