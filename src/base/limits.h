// Named limits of the base library. Each one is enforced where it is used, and exceeding it is a
// clear error (or, for log lines, a visible truncation), never a silent misbehaviour.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sovai::base {

// Env::ReadFile's default cap: whole-file reads are for configs, manifests and small metadata.
// Objects are streamed through RandomAccessFile / AtomicFileWriter instead.
inline constexpr uint64_t kDefaultMaxReadFileBytes = 64ull << 20;  // 64 MiB

// ParseJson's defaults: request bodies and config files. Large documents should raise these
// explicitly at the call site.
inline constexpr size_t kDefaultMaxJsonBytes = 16u << 20;  // 16 MiB
inline constexpr int kDefaultMaxJsonDepth = 64;

// Log lines: a longer message, or a longer field value, is cut and ends with "...[truncated]";
// fields beyond kMaxLogFields are dropped (and a "fields_dropped" count is logged instead).
inline constexpr size_t kMaxLogMessageBytes = 32u << 10;  // 32 KiB
inline constexpr size_t kMaxLogFieldBytes = 4u << 10;     // 4 KiB
inline constexpr size_t kMaxLogFields = 32;

// RunAndCapture's default cap on each captured stream (stdout, stderr).
inline constexpr size_t kDefaultMaxCapturedOutputBytes = 16u << 20;  // 16 MiB

// SpawnOptions: argv entries and environment entries.
inline constexpr size_t kMaxSpawnArgs = 64u << 10;
inline constexpr size_t kMaxSpawnEnvEntries = 64u << 10;

}  // namespace sovai::base
