// Host resources: what the local executor may hand out (CPUs, memory, GPUs).
//
// DiscoverHost reads them once at server start: CPUs from this process's affinity mask
// (sched_getaffinity, so a server confined by taskset or a container sees only its own CPUs),
// memory from /proc/meminfo MemTotal (sysinfo(2) when that cannot be read), and GPUs from
// `nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits`.
//
// GPUs are best effort: nvidia-smi absent from PATH means a host without GPUs (no warning);
// nvidia-smi present but failing (driver not loaded, timeout, unparseable lines) means no GPUs, or
// fewer, plus a warning per problem in HostResources::warnings, for the server to log. Only the
// CPU and memory probes can fail DiscoverHost.
//
// Thread-safety: pure functions; DiscoverHost runs a child process through the given Env.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "exec/limits.h"

namespace sovai::exec {

struct GpuInfo {
  int index = 0;              // nvidia-smi's index (PCI bus order), the CUDA_VISIBLE_DEVICES id
  std::string name;           // "NVIDIA H200"
  uint64_t memory_bytes = 0;  // total device memory
  std::string uuid;           // "GPU-8f6c...": stable across reboots, unlike the index
  friend bool operator==(const GpuInfo&, const GpuInfo&) = default;
};

struct HostResources {
  int cpus = 0;               // == cpu_ids.size()
  std::vector<int> cpu_ids;   // the CPUs this process may run on, ascending (affinity targets)
  uint64_t memory_bytes = 0;  // physical RAM
  std::vector<GpuInfo> gpus;  // ascending index
  std::vector<std::string> warnings;  // why GPUs may be missing; empty when all went well
};

struct DiscoverOptions {
  // The nvidia-smi program: a bare name is looked up on PATH, a path with '/' is used as is (tests
  // point it at a fake script).
  std::string nvidia_smi = "nvidia-smi";
  int64_t nvidia_smi_timeout_ms = kNvidiaSmiTimeoutMs;
  std::string meminfo_path = "/proc/meminfo";
};

// Errors: Internal when the affinity mask or the memory size cannot be read at all.
base::Result<HostResources> DiscoverHost(base::Env& env, const DiscoverOptions& options = {});

// What ParseNvidiaSmiCsv understood.
struct NvidiaSmiParse {
  std::vector<GpuInfo> gpus;          // ascending index
  std::vector<std::string> warnings;  // one per skipped line, quoting it
};

// Parses the CSV of the query above: one GPU per line, "index, name, memory MiB, uuid". A name
// containing commas is kept whole (the index is the first field, memory and uuid the last two).
// Blank lines and a trailing '\r' are ignored. A line with fewer than 4 fields, a non-numeric
// index or memory (e.g. "[N/A]"), an empty name or uuid, or an index already seen, is skipped with
// a warning; so are lines beyond kMaxGpusPerHost. Never fails: the caller gets what was valid.
NvidiaSmiParse ParseNvidiaSmiCsv(std::string_view csv);

// MemTotal from the text of /proc/meminfo, in bytes. Errors: InvalidArgument when the line is
// missing or malformed.
base::Result<uint64_t> ParseMemInfoTotal(std::string_view meminfo);

// CPU time and resident memory of a group of processes (a sandbox), from /proc/<pid>/stat
// (utime + stime) and /proc/<pid>/statm (resident pages). A process that exited in between is
// skipped. Errors: none beyond an empty result; never fails for a vanished pid.
struct ProcessUsage {
  uint64_t cpu_millis = 0;  // user + system CPU time since each process started
  uint64_t rss_bytes = 0;
};
base::Result<ProcessUsage> MeasureProcesses(const std::vector<pid_t>& pids,
                                            const std::string& proc_root = "/proc");

// The CPU time (utime + stime, in clock ticks) from the text of /proc/<pid>/stat, whose second
// field (comm) may hold spaces and parentheses. InvalidArgument when malformed.
base::Result<uint64_t> ParseProcStatCpuTicks(std::string_view stat);

}  // namespace sovai::exec
