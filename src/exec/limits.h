// Named limits of the exec module. Each one is enforced where it is used; exceeding it is a clear
// error (or, for log lines, a documented split), never a silent misbehaviour.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sovai::exec {

// --- Host resources (resources.h) ---

// nvidia-smi answers in well under a second; a hung driver must not stall the server's start.
inline constexpr int64_t kNvidiaSmiTimeoutMs = 15'000;
// Its CSV is ~150 bytes per GPU.
inline constexpr size_t kMaxNvidiaSmiOutputBytes = 1u << 20;  // 1 MiB
// GPUs per host that discovery reports; lines beyond it are dropped with a warning.
inline constexpr size_t kMaxGpusPerHost = 256;
// CPU ids that discovery and affinity handle (ids 0 .. kMaxCpus - 1).
inline constexpr int kMaxCpus = 8192;

// --- Job logs (log_capture.h, docs/formats/job-log.md) ---

// A line longer than this is written as several records (all but the last marked as continued).
inline constexpr size_t kMaxLogLineBytes = 16u << 10;  // 16 KiB
// The longest possible record: timestamp (27) + ' ' + source with marker (7) + ' ' + line + '\n'.
inline constexpr size_t kMaxLogRecordBytes = 27 + 1 + 7 + 1 + kMaxLogLineBytes + 1;
// ReadLog returns at most this much per call (a larger max_bytes is lowered to it).
inline constexpr size_t kMaxLogReadBytes = 4u << 20;  // 4 MiB
// How long the start of an unfinished line (a progress bar, a prompt) waits for its newline before
// it is written as a continued record, so that live readers see it.
inline constexpr int64_t kLogPartialFlushMs = 1'000;
// One read(2) from a workload's pipe.
inline constexpr size_t kLogReadChunkBytes = 64u << 10;  // 64 KiB

// --- Sandbox (sandbox.h) ---

inline constexpr size_t kMaxSandboxMounts = 256;
inline constexpr size_t kMaxSandboxEnvEntries = 4096;
// argv + environment of the bwrap command, in bytes: well under the kernel's ARG_MAX (a quarter of
// the 8 MiB default stack), so a too-long spec is our clear error, not an E2BIG from execve.
inline constexpr size_t kMaxSandboxCommandBytes = 1u << 20;  // 1 MiB
// Paths in a spec (PATH_MAX).
inline constexpr size_t kMaxSandboxPathBytes = 4096;
// A nonzero memory limit below this would leave bwrap itself no address space to start in.
inline constexpr uint64_t kMinSandboxMemoryBytes = 32ull << 20;  // 32 MiB
// GPUs one workload may be given.
inline constexpr size_t kMaxSandboxGpus = 64;
// Launch waits this long for bwrap to create the namespaces and report the sandbox's pid 1.
inline constexpr int64_t kSandboxStartTimeoutMs = 30'000;
// After SIGKILL of the sandbox's pid 1 the kernel tears the PID namespace down; Stop waits this
// long for bwrap to report it before it SIGKILLs bwrap itself.
inline constexpr int64_t kSandboxKillWaitMs = 10'000;
// The bwrap --json-status-fd stream (two small JSON documents).
inline constexpr size_t kMaxBwrapStatusBytes = 64u << 10;

// --- Volumes ---
// (volume specs, volume sync and the S3 client add their limits here)

}  // namespace sovai::exec
