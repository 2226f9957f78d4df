#include "exec/resources.h"

#include <sched.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "base/strings.h"

namespace sovai::exec {
namespace {

using base::Result;
using base::Status;

constexpr uint64_t kBytesPerMiB = 1ull << 20;
constexpr uint64_t kBytesPerKiB = 1ull << 10;

// The first line of a child's output, for a warning (nvidia-smi explains itself on one line).
std::string FirstLine(std::string_view text) {
  text = base::Trim(text);
  std::string_view line = text.substr(0, text.find('\n'));
  if (line.size() > 200) return std::string(line.substr(0, 200)) + "...";
  return std::string(line);
}

Result<std::vector<int>> AffinityCpuIds() {
  cpu_set_t* set = CPU_ALLOC(kMaxCpus);
  if (set == nullptr) return base::InternalError("CPU_ALLOC failed");
  const size_t set_bytes = CPU_ALLOC_SIZE(kMaxCpus);
  CPU_ZERO_S(set_bytes, set);
  std::vector<int> ids;
  if (::sched_getaffinity(0, set_bytes, set) != 0) {
    int err = errno;
    CPU_FREE(set);
    return base::ErrnoToStatus(err, "sched_getaffinity");
  }
  for (int cpu = 0; cpu < kMaxCpus; ++cpu) {
    if (CPU_ISSET_S(cpu, set_bytes, set)) ids.push_back(cpu);
  }
  CPU_FREE(set);
  if (ids.empty()) return base::InternalError("sched_getaffinity returned an empty CPU set");
  return ids;
}

Result<uint64_t> MemoryBytes(base::Env& env, const std::string& meminfo_path) {
  Result<std::string> text = env.ReadFile(meminfo_path);
  if (text.ok()) {
    Result<uint64_t> total = ParseMemInfoTotal(*text);
    if (total.ok()) return total;
  }
  // No procfs (or an odd one): the kernel's own figure.
  struct sysinfo info;
  if (::sysinfo(&info) != 0) return base::ErrnoToStatus(errno, "sysinfo");
  return static_cast<uint64_t>(info.totalram) * info.mem_unit;
}

void DiscoverGpus(base::Env& env, const DiscoverOptions& options, HostResources& host) {
  base::SpawnOptions spawn;
  spawn.argv = {options.nvidia_smi, "--query-gpu=index,name,memory.total,uuid",
                "--format=csv,noheader,nounits"};
  spawn.stdin_spec = base::StdioSpec::Null();
  Result<base::CapturedRun> run =
      base::RunAndCapture(env, spawn, "", options.nvidia_smi_timeout_ms, kMaxNvidiaSmiOutputBytes);
  if (!run.ok()) {
    // Not installed: a host without NVIDIA GPUs, which is normal.
    if (run.status().code() == base::StatusCode::kNotFound) return;
    host.warnings.push_back("GPU discovery: running " + options.nvidia_smi +
                            " failed: " + run.status().ToString() + "; assuming no GPUs");
    return;
  }
  if (!run->exit.success()) {
    std::string said = FirstLine(run->stderr_text.empty() ? run->stdout_text : run->stderr_text);
    host.warnings.push_back("GPU discovery: " + options.nvidia_smi + " " + run->exit.ToString() +
                            (said.empty() ? "" : ": " + said) +
                            "; assuming no GPUs (is the NVIDIA driver loaded?)");
    return;
  }
  NvidiaSmiParse parsed = ParseNvidiaSmiCsv(run->stdout_text);
  host.gpus = std::move(parsed.gpus);
  for (std::string& warning : parsed.warnings) {
    host.warnings.push_back("GPU discovery: " + std::move(warning));
  }
}

}  // namespace

NvidiaSmiParse ParseNvidiaSmiCsv(std::string_view csv) {
  NvidiaSmiParse out;
  std::set<int> seen;
  int line_number = 0;
  for (std::string_view raw : base::Split(csv, '\n')) {
    ++line_number;
    std::string_view line = base::Trim(raw);  // also drops a CRLF's '\r'
    if (line.empty()) continue;
    auto skip = [&](std::string_view why) {
      out.warnings.push_back("nvidia-smi line " + std::to_string(line_number) + " skipped (" +
                             std::string(why) + "): " + FirstLine(line));
    };
    std::vector<std::string_view> fields = base::Split(line, ',');
    if (fields.size() < 4) {
      skip("expected 4 fields: index, name, memory.total, uuid");
      continue;
    }
    Result<uint64_t> index = base::ParseUint64(base::Trim(fields.front()));
    if (!index.ok() || *index > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      skip("index is not a number");
      continue;
    }
    Result<uint64_t> memory_mib = base::ParseUint64(base::Trim(fields[fields.size() - 2]));
    if (!memory_mib.ok() || *memory_mib > (UINT64_MAX / kBytesPerMiB)) {
      skip("memory.total is not a number of MiB");
      continue;
    }
    std::string_view uuid = base::Trim(fields.back());
    // Everything between index and memory is the name, commas included.
    std::vector<std::string_view> name_parts(fields.begin() + 1, fields.end() - 2);
    std::string name(base::Trim(base::Join(name_parts, ",")));
    if (name.empty() || uuid.empty()) {
      skip("empty name or uuid");
      continue;
    }
    if (!seen.insert(static_cast<int>(*index)).second) {
      skip("duplicate index");
      continue;
    }
    if (out.gpus.size() >= kMaxGpusPerHost) {
      skip("more than " + std::to_string(kMaxGpusPerHost) + " GPUs");
      continue;
    }
    out.gpus.push_back(GpuInfo{static_cast<int>(*index), std::move(name),
                               *memory_mib * kBytesPerMiB, std::string(uuid)});
  }
  std::sort(out.gpus.begin(), out.gpus.end(),
            [](const GpuInfo& a, const GpuInfo& b) { return a.index < b.index; });
  return out;
}

Result<uint64_t> ParseMemInfoTotal(std::string_view meminfo) {
  for (std::string_view line : base::Split(meminfo, '\n')) {
    if (!line.starts_with("MemTotal:")) continue;
    std::string_view rest = base::Trim(line.substr(9));
    // "24684084 kB": the kernel always reports kibibytes here.
    size_t space = rest.find(' ');
    std::string_view number = rest.substr(0, space);
    std::string_view unit = space == std::string_view::npos ? "" : base::Trim(rest.substr(space));
    Result<uint64_t> kib = base::ParseUint64(number);
    if (!kib.ok() || unit != "kB" || *kib > UINT64_MAX / kBytesPerKiB) {
      return base::InvalidArgumentError("meminfo: malformed MemTotal line '" + std::string(line) +
                                        "' (expected 'MemTotal: <n> kB')");
    }
    return *kib * kBytesPerKiB;
  }
  return base::InvalidArgumentError("meminfo: no MemTotal line");
}

Result<HostResources> DiscoverHost(base::Env& env, const DiscoverOptions& options) {
  HostResources host;
  SOVAI_ASSIGN_OR_RETURN(host.cpu_ids, AffinityCpuIds());
  host.cpus = static_cast<int>(host.cpu_ids.size());
  SOVAI_ASSIGN_OR_RETURN(host.memory_bytes, MemoryBytes(env, options.meminfo_path));
  DiscoverGpus(env, options, host);
  return host;
}

base::Result<uint64_t> ParseProcStatCpuTicks(std::string_view stat) {
  // "pid (comm) state ppid ... utime stime ...": fields after the last ')' start at field 3.
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos) {
    return base::InvalidArgumentError("malformed /proc stat line: no ')' after the command");
  }
  std::vector<std::string_view> fields;
  for (std::string_view rest = stat.substr(close + 1); !rest.empty();) {
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\n')) rest.remove_prefix(1);
    size_t end = rest.find_first_of(" \n");
    if (end == std::string_view::npos) end = rest.size();
    if (end > 0) fields.push_back(rest.substr(0, end));
    rest.remove_prefix(end);
  }
  // fields[0] is field 3 (state); utime is field 14, stime field 15.
  if (fields.size() < 13) {
    return base::InvalidArgumentError("malformed /proc stat line: too few fields");
  }
  auto utime = base::ParseUint64(fields[11]);
  auto stime = base::ParseUint64(fields[12]);
  if (!utime.ok() || !stime.ok()) {
    return base::InvalidArgumentError("malformed /proc stat line: utime/stime not numbers");
  }
  return *utime + *stime;
}

base::Result<ProcessUsage> MeasureProcesses(const std::vector<pid_t>& pids,
                                            const std::string& proc_root) {
  static const long ticks_per_s = ::sysconf(_SC_CLK_TCK);
  static const long page_bytes = ::sysconf(_SC_PAGESIZE);
  ProcessUsage usage;
  for (pid_t pid : pids) {
    const std::string dir = proc_root + "/" + std::to_string(pid);
    std::ifstream stat_file(dir + "/stat");
    std::stringstream stat;
    stat << stat_file.rdbuf();
    auto ticks = ParseProcStatCpuTicks(stat.str());
    if (!ticks.ok()) continue;  // exited in between
    std::ifstream statm(dir + "/statm");
    uint64_t size_pages = 0, resident_pages = 0;
    if (!(statm >> size_pages >> resident_pages)) continue;
    usage.cpu_millis += *ticks * 1000 / static_cast<uint64_t>(ticks_per_s > 0 ? ticks_per_s : 100);
    usage.rss_bytes += resident_pages * static_cast<uint64_t>(page_bytes > 0 ? page_bytes : 4096);
  }
  return usage;
}

}  // namespace sovai::exec
