#include "exec/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "base/log.h"
#include "base/strings.h"

namespace sovai::exec {
namespace {

using base::Result;
using base::Status;

constexpr std::string_view kDefaultPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr std::string_view kSandboxTmp = "/tmp";
// The fd bwrap writes its JSON status to (after stdin, stdout, stderr).
constexpr int kStatusFd = 3;
// Sandbox paths that bwrap builds itself, or that stay absent on purpose (/sys).
constexpr std::string_view kReservedTrees[] = {"/proc", "/dev", "/sys"};
// Root entries of a rootfs that the sandbox gets fresh, not from the image.
constexpr std::string_view kFreshRootNames[] = {"proc", "dev", "sys", "tmp"};
// The largest signal number a bwrap exit code of 128+N can stand for.
constexpr int kMaxSignal = 64;
// How Wait's error for a sandbox that never ran its command begins.
constexpr std::string_view kDidNotRun = "the sandbox did not run the command: ";

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// `path` is `dir` or inside it. Both absolute and normalized.
bool IsSameOrUnder(std::string_view path, std::string_view dir) {
  if (dir == "/") return true;
  return path == dir ||
         (path.starts_with(dir) && path.size() > dir.size() && path[dir.size()] == '/');
}

// An absolute path without ".", ".." or empty components (a trailing '/' is one), NUL bytes, or
// more than kMaxSandboxPathBytes. "/" itself is valid.
Status ValidatePath(std::string_view what, std::string_view path) {
  auto bad = [&](std::string_view why) {
    return base::InvalidArgumentError(std::string(what) + " " + Quote(path) + " " +
                                      std::string(why));
  };
  if (path.empty()) return base::InvalidArgumentError(std::string(what) + " is empty");
  if (path.size() > kMaxSandboxPathBytes) {
    return bad("is longer than " + std::to_string(kMaxSandboxPathBytes) + " bytes");
  }
  if (path.front() != '/') return bad("must be an absolute path");
  if (path.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (path == "/") return Status();
  for (std::string_view component : base::Split(path.substr(1), '/')) {
    if (component.empty()) return bad("has an empty component (a doubled or trailing '/')");
    if (component == "." || component == "..") {
      return bad("has a '" + std::string(component) + "' component; give the path without it");
    }
  }
  return Status();
}

bool IsSymlinkEntry(const BwrapOptions& options, std::string_view name) {
  for (const RootEntry& e : options.root_entries) {
    if (e.name == name) return !e.symlink_target.empty();
  }
  return false;
}

bool IsRootEntry(const BwrapOptions& options, std::string_view name) {
  for (const RootEntry& e : options.root_entries) {
    if (e.name == name) return true;
  }
  return false;
}

// "usr" for "/usr/share/x", "" for "/".
std::string_view FirstComponent(std::string_view path) {
  path.remove_prefix(1);
  return path.substr(0, path.find('/'));
}

bool IsFreshRootName(std::string_view name) {
  return std::find(std::begin(kFreshRootNames), std::end(kFreshRootNames), name) !=
         std::end(kFreshRootNames);
}

Status ValidateIds(std::string_view what, const std::vector<int>& ids, int max_id) {
  std::set<int> seen;
  for (int id : ids) {
    if (id < 0 || id >= max_id) {
      return base::InvalidArgumentError(std::string(what) + " " + std::to_string(id) +
                                        " is out of range (0.." + std::to_string(max_id - 1) + ")");
    }
    if (!seen.insert(id).second) {
      return base::InvalidArgumentError(std::string(what) + " " + std::to_string(id) +
                                        " is listed twice");
    }
  }
  return Status();
}

Status ValidateMount(const SandboxSpec& spec, const BwrapOptions& options, const Mount& m) {
  SOVAI_RETURN_IF_ERROR(ValidatePath("mount host_path", m.host_path));
  SOVAI_RETURN_IF_ERROR(ValidatePath("mount sandbox_path", m.sandbox_path));
  auto bad = [&](std::string_view why) {
    return base::InvalidArgumentError("mount at " + Quote(m.sandbox_path) + " " + std::string(why));
  };
  if (m.sandbox_path == "/") return bad("would replace the sandbox's root; mount below it");
  if (m.sandbox_path == kSandboxTmp) return bad("would replace the private /tmp; mount below it");
  for (std::string_view tree : kReservedTrees) {
    if (IsSameOrUnder(m.sandbox_path, tree)) {
      return bad("is inside " + std::string(tree) + ", which the sandbox builds itself");
    }
  }
  std::string_view top = FirstComponent(m.sandbox_path);
  if (spec.rootfs.empty() && IsRootEntry(options, top)) {
    return bad("is inside the host's read-only system directory /" + std::string(top) +
               "; choose a path outside it, e.g. /workspace");
  }
  if (IsSymlinkEntry(options, top)) {
    return bad("goes through the symlink /" + std::string(top) + "; use the path it points to");
  }
  for (const std::string& hidden : options.hidden_paths) {
    if (IsSameOrUnder(hidden, m.host_path)) {
      return bad("would expose " + Quote(hidden) + ", which no workload may see; mount a " +
                 "directory inside it instead");
    }
  }
  return Status();
}

// What bwrap needs of one root entry: its host path.
std::string RootEntryHostPath(const SandboxSpec& spec, const RootEntry& entry) {
  return spec.rootfs.empty() ? "/" + entry.name : spec.rootfs + "/" + entry.name;
}

}  // namespace

Result<std::vector<std::string>> BuildSandboxEnv(const SandboxSpec& spec) {
  if (spec.env.size() > kMaxSandboxEnvEntries) {
    return base::InvalidArgumentError("env has " + std::to_string(spec.env.size()) +
                                      " entries; at most " + std::to_string(kMaxSandboxEnvEntries) +
                                      " are allowed");
  }
  std::vector<std::string> gpu_ids;
  for (int gpu : spec.gpus) gpu_ids.push_back(std::to_string(gpu));
  std::vector<std::pair<std::string, std::string>> vars = {
      {"PATH", std::string(kDefaultPath)},
      {"HOME", std::string(kSandboxTmp)},
      {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
      {"CUDA_VISIBLE_DEVICES", base::Join(gpu_ids, ",")},
  };
  const size_t defaults = vars.size();
  std::set<std::string> seen;
  for (const auto& [name, value] : spec.env) {
    if (name.empty() || name.find('=') != std::string::npos ||
        name.find('\0') != std::string::npos) {
      return base::InvalidArgumentError("env name " + Quote(name) +
                                        " is invalid: it must be non-empty, without '=' or NUL");
    }
    if (value.find('\0') != std::string::npos) {
      return base::InvalidArgumentError("env " + name + " holds a NUL byte");
    }
    if (name == "CUDA_VISIBLE_DEVICES") {
      return base::InvalidArgumentError(
          "env CUDA_VISIBLE_DEVICES is set by the sandbox from the spec's gpus; set gpus instead");
    }
    if (!seen.insert(name).second) {
      return base::InvalidArgumentError("env " + name + " is given twice");
    }
    // (clang 14 cannot capture a structured binding: name it.)
    auto it = std::find_if(vars.begin(), vars.begin() + defaults,
                           [&name = name](const auto& var) { return var.first == name; });
    if (it != vars.begin() + defaults) {
      it->second = value;
    } else {
      vars.emplace_back(name, value);
    }
  }
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [name, value] : vars) out.push_back(name + "=" + value);
  return out;
}

Result<std::vector<std::string>> BuildBwrapArgv(const SandboxSpec& spec,
                                                const BwrapOptions& options) {
  SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> env, BuildSandboxEnv(spec));
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return base::InvalidArgumentError("argv is empty: give the command to run");
  }
  for (const std::string& arg : spec.argv) {
    if (arg.find('\0') != std::string::npos) {
      return base::InvalidArgumentError("argv entry " + Quote(arg) + " holds a NUL byte");
    }
  }
  if (spec.uid == 0 || spec.gid == 0 || spec.uid == UINT32_MAX || spec.gid == UINT32_MAX) {
    return base::InvalidArgumentError(
        "uid and gid must be unprivileged (not 0 or 4294967295), "
        "e.g. 65534");
  }
  SOVAI_RETURN_IF_ERROR(ValidatePath("work_dir", spec.work_dir));
  if (spec.work_dir == "/") return base::InvalidArgumentError("work_dir must not be /");
  if (!spec.rootfs.empty()) {
    SOVAI_RETURN_IF_ERROR(ValidatePath("rootfs", spec.rootfs));
    if (spec.rootfs == "/") {
      return base::InvalidArgumentError(
          "rootfs must not be the host's /; leave it empty for the host's system directories");
    }
  }
  if (spec.memory_bytes != 0 && spec.memory_bytes < kMinSandboxMemoryBytes) {
    return base::InvalidArgumentError("memory_bytes " + std::to_string(spec.memory_bytes) +
                                      " is below the minimum of " +
                                      std::to_string(kMinSandboxMemoryBytes) +
                                      " (bwrap itself needs that much address space); 0 is none");
  }
  const std::string cwd = spec.cwd.empty() ? std::string(kSandboxTmp) : spec.cwd;
  SOVAI_RETURN_IF_ERROR(ValidatePath("cwd", cwd));
  SOVAI_RETURN_IF_ERROR(ValidateIds("cpu", spec.cpus, kMaxCpus));
  if (spec.gpus.size() > kMaxSandboxGpus) {
    return base::InvalidArgumentError("at most " + std::to_string(kMaxSandboxGpus) +
                                      " GPUs per workload");
  }
  SOVAI_RETURN_IF_ERROR(ValidateIds("gpu", spec.gpus, INT_MAX));
  if (spec.mounts.size() > kMaxSandboxMounts) {
    return base::InvalidArgumentError("at most " + std::to_string(kMaxSandboxMounts) +
                                      " mounts per workload");
  }
  for (const RootEntry& entry : options.root_entries) {
    if (entry.name.empty() || entry.name.find('/') != std::string::npos || entry.name == "." ||
        entry.name == ".." || entry.name.find('\0') != std::string::npos ||
        entry.symlink_target.find('\0') != std::string::npos) {
      return base::InvalidArgumentError("root entry " + Quote(entry.name) + " is not a name");
    }
  }
  for (const std::string& hidden : options.hidden_paths) {
    SOVAI_RETURN_IF_ERROR(ValidatePath("hidden path", hidden));
    if (!spec.rootfs.empty() && hidden == spec.rootfs) {
      return base::InvalidArgumentError("rootfs " + Quote(spec.rootfs) +
                                        " is a path no workload may see");
    }
  }
  const std::string work_tmp = spec.work_dir + "/tmp";
  for (const std::string& hidden : options.hidden_paths) {
    if (IsSameOrUnder(hidden, work_tmp)) {
      return base::InvalidArgumentError("work_dir " + Quote(spec.work_dir) + " would expose " +
                                        Quote(hidden) + ", which no workload may see");
    }
  }
  for (const std::string& device : options.gpu_devices) {
    SOVAI_RETURN_IF_ERROR(ValidatePath("GPU device", device));
    if (!device.starts_with("/dev/")) {
      return base::InvalidArgumentError("GPU device " + Quote(device) + " is not under /dev");
    }
  }
  std::vector<Mount> mounts = spec.mounts;
  // Parents before children: a path sorts before every path it is a prefix of.
  std::stable_sort(mounts.begin(), mounts.end(),
                   [](const Mount& a, const Mount& b) { return a.sandbox_path < b.sandbox_path; });
  for (size_t i = 0; i < mounts.size(); ++i) {
    SOVAI_RETURN_IF_ERROR(ValidateMount(spec, options, mounts[i]));
    if (i > 0 && mounts[i].sandbox_path == mounts[i - 1].sandbox_path) {
      return base::InvalidArgumentError("two mounts at " + Quote(mounts[i].sandbox_path));
    }
  }

  std::vector<std::string> a = {
      options.bwrap_path,       "--unshare-user", "--uid",
      std::to_string(spec.uid), "--gid",          std::to_string(spec.gid),
      "--unshare-pid",          "--unshare-ipc",  "--unshare-uts",
      "--unshare-cgroup-try"};
  if (spec.network_none) a.push_back("--unshare-net");
  a.insert(a.end(), {"--die-with-parent", "--new-session"});
  for (const RootEntry& entry : options.root_entries) {
    if (IsFreshRootName(entry.name)) continue;
    if (!entry.symlink_target.empty()) {
      a.insert(a.end(), {"--symlink", entry.symlink_target, "/" + entry.name});
    } else {
      a.insert(a.end(), {"--ro-bind", RootEntryHostPath(spec, entry), "/" + entry.name});
    }
  }
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev"});
  if (!spec.gpus.empty()) {
    for (const std::string& device : options.gpu_devices) {
      a.insert(a.end(), {"--dev-bind-try", device, device});
    }
  }
  a.insert(a.end(), {"--bind", work_tmp, std::string(kSandboxTmp)});
  // Hidden paths inside a visible root entry disappear under an empty tmpfs.
  for (const std::string& hidden : options.hidden_paths) {
    for (const RootEntry& entry : options.root_entries) {
      if (!entry.symlink_target.empty() || IsFreshRootName(entry.name)) continue;
      std::string host = RootEntryHostPath(spec, entry);
      if (IsSameOrUnder(hidden, host)) {
        a.insert(a.end(), {"--tmpfs", "/" + entry.name + hidden.substr(host.size())});
      }
    }
  }
  for (const Mount& m : mounts) {
    a.insert(a.end(), {m.read_only ? "--ro-bind" : "--bind", m.host_path, m.sandbox_path});
  }
  // Last: mount points for everything above are made; the root's own tmpfs becomes read-only.
  a.insert(a.end(), {"--remount-ro", "/", "--chdir", cwd});
  if (options.status_fd >= 0)
    a.insert(a.end(), {"--json-status-fd", std::to_string(options.status_fd)});
  a.push_back("--");
  a.insert(a.end(), spec.argv.begin(), spec.argv.end());

  size_t command_bytes = 0;
  for (const std::string& s : a) command_bytes += s.size() + 1;
  for (const std::string& s : env) command_bytes += s.size() + 1;
  if (command_bytes > kMaxSandboxCommandBytes) {
    return base::InvalidArgumentError("the command and its environment take " +
                                      std::to_string(command_bytes) + " bytes; at most " +
                                      std::to_string(kMaxSandboxCommandBytes) + " are allowed");
  }
  return a;
}

// --- Launch: gathering host facts ---

namespace {

Result<std::string> RealPath(std::string_view what, const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) {
    int err = errno;
    if (err == ENOENT) {
      return base::NotFoundError(std::string(what) + " " + Quote(path) + " does not exist");
    }
    return base::ErrnoToStatus(err, std::string(what) + " " + Quote(path));
  }
  std::string out(resolved);
  std::free(resolved);
  return out;
}

Result<std::string> ReadLink(const std::string& path) {
  std::string target(PATH_MAX, '\0');
  ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
  if (n < 0) return base::ErrnoToStatus(errno, "readlink " + Quote(path));
  target.resize(static_cast<size_t>(n));
  return target;
}

// The entries of `dir` to show at the sandbox's root: those named in `only` (when given) or all
// but the fresh ones. Directories and regular files are bound, symlinks recreated, others skipped.
Result<std::vector<RootEntry>> ScanRootEntries(base::Env& env, const std::string& dir,
                                               const std::vector<std::string>* only) {
  std::vector<std::string> names;
  if (only != nullptr) {
    names = *only;
  } else {
    SOVAI_ASSIGN_OR_RETURN(names, env.ListDir(dir));
  }
  std::vector<RootEntry> entries;
  for (const std::string& name : names) {
    if (IsFreshRootName(name)) continue;
    std::string path = (dir == "/" ? "" : dir) + "/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return base::ErrnoToStatus(errno, "lstat " + Quote(path));
    }
    if (S_ISLNK(st.st_mode)) {
      SOVAI_ASSIGN_OR_RETURN(std::string target, ReadLink(path));
      entries.push_back({name, std::move(target)});
    } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
      entries.push_back({name, ""});
    }
  }
  return entries;
}

// /dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-caps, ...
std::vector<std::string> NvidiaDevices(base::Env& env) {
  std::vector<std::string> devices;
  Result<std::vector<std::string>> names = env.ListDir("/dev");
  if (!names.ok()) return devices;
  for (const std::string& name : *names) {
    if (name.starts_with("nvidia")) devices.push_back("/dev/" + name);
  }
  return devices;
}

// When the platform is root, bwrap runs as uid:gid, which must be able to reach `path` (search
// permission on every directory above it) and, with `write`, write it.
Status CheckAccessibleAs(const std::string& path, uint32_t uid, uint32_t gid, bool write) {
  auto allowed = [&](const struct stat& st, mode_t owner_bit, mode_t group_bit, mode_t other_bit) {
    if (st.st_uid == uid) return (st.st_mode & owner_bit) != 0;
    if (st.st_gid == gid) return (st.st_mode & group_bit) != 0;
    return (st.st_mode & other_bit) != 0;
  };
  auto describe = [](const std::string& p, const struct stat& st) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Quote(p) + " (mode " + mode + ", owner " + std::to_string(st.st_uid) + ":" +
           std::to_string(st.st_gid) + ")";
  };
  const std::string who = "the sandbox runs as uid " + std::to_string(uid) +
                          " on the host (the platform runs as root), which ";
  std::string prefix;
  for (std::string_view component : base::Split(path, '/', /*skip_empty=*/true)) {
    std::string dir = prefix.empty() ? "/" : prefix;
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return base::ErrnoToStatus(errno, "stat " + Quote(dir));
    if (!allowed(st, S_IXUSR, S_IXGRP, S_IXOTH)) {
      return base::FailedPreconditionError(who + "cannot traverse " + describe(dir, st) +
                                           " to reach " + Quote(path) +
                                           ": make it traversable (chmod o+x) or move the data");
    }
    prefix += "/" + std::string(component);
  }
  if (write) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return base::ErrnoToStatus(errno, "stat " + Quote(path));
    mode_t need = S_ISDIR(st.st_mode) ? (S_IWUSR | S_IXUSR) : S_IWUSR;
    bool ok = st.st_uid == uid   ? (st.st_mode & need) == need
              : st.st_gid == gid ? (st.st_mode & (need >> 3)) == (need >> 3)
                                 : (st.st_mode & (need >> 6)) == (need >> 6);
    if (!ok) {
      return base::FailedPreconditionError(
          who + "cannot write the writable mount " + describe(path, st) + ": chown it to " +
          std::to_string(uid) + ":" + std::to_string(gid) + " or mount it read-only");
    }
  }
  return Status();
}

// Whether `id` has a mapping in this process's user namespace (a uid_map or gid_map file:
// lines of "inside outside count").
bool IdIsMapped(base::Env& env, const std::string& map_path, uint32_t id) {
  Result<std::string> map = env.ReadFile(map_path);
  if (!map.ok()) return true;  // no user namespaces: every id exists
  for (std::string_view line : base::Split(*map, '\n', /*skip_empty=*/true)) {
    std::vector<std::string_view> fields = base::Split(base::Trim(line), ' ', /*skip_empty=*/true);
    if (fields.size() != 3) continue;
    Result<uint64_t> first = base::ParseUint64(fields[0]);
    Result<uint64_t> count = base::ParseUint64(fields[2]);
    if (first.ok() && count.ok() && id >= *first && id - *first < *count) return true;
  }
  return false;
}

// Creates the mount point `sandbox_path` inside `rootfs` (a directory, or an empty file when the
// source is a file), one component at a time without following symlinks, so an image's symlink
// can never make us create anything outside it.
Status CreateMountPoint(const std::string& rootfs, const std::string& sandbox_path, bool is_dir) {
  base::UniqueFd dir(::open(rootfs.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!dir.valid()) return base::ErrnoToStatus(errno, "open rootfs " + Quote(rootfs));
  std::vector<std::string_view> components = base::Split(sandbox_path, '/', /*skip_empty=*/true);
  for (size_t i = 0; i < components.size(); ++i) {
    std::string name(components[i]);
    const bool last = i + 1 == components.size();
    if (last && !is_dir) {
      base::UniqueFd file(
          ::openat(dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
      if (!file.valid() && errno != EISDIR) {
        return base::FailedPreconditionError("cannot create the mount point " +
                                             Quote(sandbox_path) + " in rootfs " + Quote(rootfs) +
                                             ": " + std::strerror(errno));
      }
      return Status();
    }
    if (::mkdirat(dir.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
      return base::ErrnoToStatus(
          errno, "create the mount point " + Quote(sandbox_path) + " in rootfs " + Quote(rootfs));
    }
    base::UniqueFd next(
        ::openat(dir.get(), name.c_str(), O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      return base::FailedPreconditionError("the mount point " + Quote(sandbox_path) +
                                           " in rootfs " + Quote(rootfs) + " goes through " +
                                           Quote(name) + ", a symlink or not a directory (" +
                                           std::strerror(errno) + "); mount somewhere else");
    }
    dir = std::move(next);
  }
  return Status();
}

// The integer after "key": in bwrap's JSON status stream (flat objects of integers).
std::optional<int64_t> StatusField(std::string_view text, std::string_view key) {
  std::string needle = "\"" + std::string(key) + "\"";
  size_t at = text.find(needle);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = base::TrimLeft(text.substr(at + needle.size()));
  if (!rest.starts_with(':')) return std::nullopt;
  rest = base::TrimLeft(rest.substr(1));
  size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  if (digits == 0 || digits == rest.size()) return std::nullopt;  // the number may be unfinished
  Result<int64_t> value = base::ParseInt64(rest.substr(0, digits));
  if (!value.ok()) return std::nullopt;
  return *value;
}

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

int PidfdSendSignal(int pidfd, int sig) {
#ifdef SYS_pidfd_send_signal
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// The inode of a process's PID namespace, 0 when it cannot be read (gone, or not ours).
uint64_t PidNamespaceInode(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/ns/pid";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

// Whether `pid` has exited and waits to be reaped (or is gone).
bool IsZombieOrGone(pid_t pid) {
  char buffer[512];
  base::UniqueFd fd(
      ::open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return true;
  ssize_t n = ::read(fd.get(), buffer, sizeof(buffer) - 1);
  if (n <= 0) return true;
  // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
  std::string_view stat(buffer, static_cast<size_t>(n));
  size_t paren = stat.rfind(')');
  if (paren == std::string_view::npos || paren + 2 >= stat.size()) return false;
  char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

// Sends `sig` to `pid` only if it is still the process in namespace `ns_inode`: the pidfd pins
// the process, so a pid reused after the check is never signalled.
void SignalIfInNamespace(pid_t pid, uint64_t ns_inode, int sig) {
  base::UniqueFd pidfd(PidfdOpen(pid));
  if (!pidfd.valid()) {
    if (errno == ENOSYS && PidNamespaceInode(pid) == ns_inode) ::kill(pid, sig);
    return;
  }
  if (PidNamespaceInode(pid) != ns_inode) return;
  PidfdSendSignal(pidfd.get(), sig);
}

// --- Starting bwrap ---

enum ChildStage : int32_t { kStageDup = 1, kStageAffinity, kStageRlimit, kStageIds, kStageExec };

[[noreturn]] void ChildFail(int error_fd, ChildStage stage) {
  base::ReportPreExecFailure(error_fd, stage);
}

struct StartRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::vector<int> cpus;
  uint64_t memory_bytes = 0;
  bool drop_to_ids = false;   // the platform is root: become uid:gid before exec
  bool shield_bwrap = false;  // SandboxSpec::shield_from_step_signals
  uint32_t uid = 0;
  uint32_t gid = 0;
};

struct Started {
  pid_t pid = -1;
  base::UniqueFd stdout_read;
  base::UniqueFd stderr_read;
  base::UniqueFd status_read;
};

// fork + exec of bwrap. Env::Spawn cannot do this: the child must set its CPU affinity, its
// RLIMIT_AS and its uid between fork and exec, and keep a fourth fd (bwrap's status stream)
// open across exec. Everything the child touches is prepared before fork.
Result<Started> StartBwrap(const StartRequest& request) {
  auto make_pipe = [](base::UniqueFd& read_end, base::UniqueFd& write_end) -> Status {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return base::ErrnoToStatus(errno, "pipe for the sandbox");
    read_end.Reset(fds[0]);
    write_end.Reset(fds[1]);
    return Status();
  };
  Started started;
  base::UniqueFd out_write, err_write, status_write, error_read, error_write;
  SOVAI_RETURN_IF_ERROR(make_pipe(started.stdout_read, out_write));
  SOVAI_RETURN_IF_ERROR(make_pipe(started.stderr_read, err_write));
  SOVAI_RETURN_IF_ERROR(make_pipe(started.status_read, status_write));
  SOVAI_RETURN_IF_ERROR(make_pipe(error_read, error_write));
  base::UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) return base::ErrnoToStatus(errno, "open /dev/null");

  std::vector<char*> argv_ptrs = base::ExecPointers(request.argv);
  std::vector<char*> env_ptrs = base::ExecPointers(request.env);
  const size_t cpu_set_bytes = CPU_ALLOC_SIZE(kMaxCpus);
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> cpu_set(CPU_ALLOC(kMaxCpus),
                                                           [](cpu_set_t* s) { CPU_FREE(s); });
  if (cpu_set == nullptr) return base::InternalError("CPU_ALLOC failed");
  CPU_ZERO_S(cpu_set_bytes, cpu_set.get());
  for (int cpu : request.cpus) CPU_SET_S(cpu, cpu_set_bytes, cpu_set.get());
  const rlimit address_space{request.memory_bytes, request.memory_bytes};
  // The sources of fds 0..3 in the child, and where the error report goes.
  int sources[kStatusFd + 1] = {dev_null.get(), out_write.get(), err_write.get(),
                                status_write.get()};
  const int error_fd = error_write.get();

  pid_t pid = ::fork();
  if (pid < 0) return base::ErrnoToStatus(errno, "fork for the sandbox");
  if (pid == 0) {
    base::ResetSignalsInChild();
    if (request.shield_bwrap) {
      struct sigaction ign;
      std::memset(&ign, 0, sizeof(ign));
      ign.sa_handler = SIG_IGN;
      for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(sig, &ign, nullptr);
    }
    // Its own process group: a Ctrl-C meant for the server's terminal does not reach workloads.
    ::setpgid(0, 0);
    // stdin, stdout, stderr and bwrap's status stream; nothing else inherited reaches bwrap.
    if (!base::InstallChildFds(sources)) ChildFail(error_fd, kStageDup);
    if (!request.cpus.empty() && ::sched_setaffinity(0, cpu_set_bytes, cpu_set.get()) != 0) {
      ChildFail(error_fd, kStageAffinity);
    }
    if (request.memory_bytes > 0 && ::setrlimit(RLIMIT_AS, &address_space) != 0) {
      ChildFail(error_fd, kStageRlimit);
    }
    if (request.drop_to_ids) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(request.gid) != 0 ||
          ::setuid(request.uid) != 0) {
        ChildFail(error_fd, kStageIds);
      }
    }
    if (::chdir("/") != 0) ChildFail(error_fd, kStageExec);
    ::execve(argv_ptrs[0], argv_ptrs.data(), env_ptrs.data());
    ChildFail(error_fd, kStageExec);
  }

  error_write.Reset();
  if (std::optional<base::PreExecFailure> report = base::ReadPreExecFailure(error_read.get())) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::string stage;
    switch (report->stage) {
      case kStageDup:
        stage = "sandbox: redirecting stdio";
        break;
      case kStageAffinity:
        stage = "sandbox: sched_setaffinity";
        break;
      case kStageRlimit:
        stage = "sandbox: setrlimit(RLIMIT_AS)";
        break;
      case kStageIds:
        stage = "sandbox: switching to uid " + std::to_string(request.uid);
        break;
      default:
        stage = "sandbox: exec " + Quote(request.argv[0]);
        break;
    }
    return base::ErrnoToStatus(report->err, stage);
  }
  started.pid = pid;
  return started;
}

// Finds a program as execvp would, in $PATH.
Result<std::string> FindProgram(const std::string& program) {
  auto executable = [](const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    if (executable(program)) return program;
  } else {
    const char* path_env = std::getenv("PATH");
    std::string path_list = path_env != nullptr ? path_env : std::string(kDefaultPath);
    for (std::string_view dir : base::Split(path_list, ':', /*skip_empty=*/true)) {
      std::string candidate = base::JoinPath(dir, program);
      if (executable(candidate)) return candidate;
    }
  }
  return base::NotFoundError("bubblewrap (" + Quote(program) +
                             ") is not installed or not executable: install the bubblewrap "
                             "package (apt-get install bubblewrap); the local executor needs it");
}

}  // namespace

// --- RunningWorkload ---

RunningWorkload::~RunningWorkload() {
  if (bwrap_pid_ < 0) return;
  // As Stop without the grace: bwrap reaps its pid 1 itself when that one is killed first.
  KillSandbox();
  if (!WaitFor(kSandboxKillWaitMs).ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reaped_) {
      ::kill(bwrap_pid_, SIGKILL);
      while (::waitpid(bwrap_pid_, &wait_status_, 0) < 0 && errno == EINTR) {
      }
      reaped_ = true;
    }
  }
  // Every process of the sandbox is gone or going: the pipes reach end of file.
  if (capture_ != nullptr) capture_->Finish().IgnoreError();
}

Result<bool> RunningWorkload::TryReap() {
  std::lock_guard<std::mutex> lock(mu_);
  if (reaped_) return true;
  pid_t r;
  do {
    r = ::waitpid(bwrap_pid_, &wait_status_, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return base::ErrnoToStatus(errno, "waitpid of bwrap " + std::to_string(bwrap_pid_));
  if (r == 0) return false;
  reaped_ = true;
  return true;
}

Result<base::ExitStatus> RunningWorkload::Finalize() {
  std::lock_guard<std::mutex> lock(finalize_mu_);
  if (result_.has_value()) return *result_;
  // bwrap may exit as soon as its pid 1 reports the workload's exit, before pid 1 has finished
  // exiting (which the kernel completes only once every other process of the namespace is
  // gone). Waiting for pid 1 here makes "Wait returned" mean "nothing of the sandbox runs".
  if (init_pidfd_.valid()) {
    pollfd p{init_pidfd_.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(kSandboxKillWaitMs)) == 0) {
      SOVAI_LOG(WARNING).With("pid", init_pid_) << "sandbox pid 1 still running after bwrap ended";
    }
  }
  Status log_status = capture_ != nullptr ? capture_->Finish() : Status();
  if (!log_status.ok()) {
    SOVAI_LOG(WARNING).With("log", log_writer_->path()).With("error", log_status)
        << "job log incomplete";
  }
  // bwrap has exited, so its status stream is complete (non-blocking all the same: nothing may
  // hang a Wait).
  if (status_fd_.valid()) ::fcntl(status_fd_.get(), F_SETFL, O_NONBLOCK);
  char buffer[4096];
  while (status_fd_.valid() && status_text_.size() < kMaxBwrapStatusBytes) {
    ssize_t n = ::read(status_fd_.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    status_text_.append(buffer, static_cast<size_t>(n));
  }
  status_fd_.Reset();

  int wait_status;
  bool ended_by_us;
  {
    std::lock_guard<std::mutex> state_lock(mu_);
    wait_status = wait_status_;
    ended_by_us = killed_ || stopped_;
  }
  base::ExitStatus exit;
  if (WIFSIGNALED(wait_status)) {
    exit.signaled = true;
    exit.signal = WTERMSIG(wait_status);
  } else {
    const int code = WEXITSTATUS(wait_status);
    // bwrap reports "exit-code" only when the command ran; without it, the sandbox could not be
    // set up or the command not executed, and bwrap said why on stderr.
    if (!StatusField(status_text_, "exit-code").has_value() && !ended_by_us) {
      std::string said = capture_ != nullptr ? capture_->last_stderr_line() : "";
      result_ = base::FailedPreconditionError(
          std::string(kDidNotRun) +
          (said.empty() ? "bwrap exited with code " + std::to_string(code) : said));
      return *result_;
    }
    if (code > 128 && code <= 128 + kMaxSignal) {
      exit.signaled = true;
      exit.signal = code - 128;
    } else {
      exit.exited = true;
      exit.code = code;
    }
  }
  result_ = exit;
  return *result_;
}

Result<base::ExitStatus> RunningWorkload::WaitFor(int64_t timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
  while (true) {
    SOVAI_ASSIGN_OR_RETURN(bool done, TryReap());
    if (done) return Finalize();
    int wait_ms = -1;
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        return base::DeadlineExceededError("the sandbox (bwrap pid " + std::to_string(bwrap_pid_) +
                                           ") is still running after " +
                                           std::to_string(timeout_ms) + " ms");
      }
      wait_ms = static_cast<int>(std::min<int64_t>(left.count() + 1, 60'000));
    }
    if (bwrap_pidfd_.valid()) {
      pollfd p{bwrap_pidfd_.get(), POLLIN, 0};
      ::poll(&p, 1, wait_ms);
    } else {
      ::usleep(static_cast<useconds_t>(std::min(wait_ms < 0 ? 20 : wait_ms, 20) * 1000));
    }
  }
}

Result<base::ExitStatus> RunningWorkload::Wait() { return WaitFor(-1); }

Result<std::optional<base::ExitStatus>> RunningWorkload::TryWait() {
  SOVAI_ASSIGN_OR_RETURN(bool done, TryReap());
  if (!done) return std::optional<base::ExitStatus>();
  SOVAI_ASSIGN_OR_RETURN(base::ExitStatus exit, Finalize());
  return std::optional<base::ExitStatus>(exit);
}

Result<std::vector<pid_t>> RunningWorkload::ProcessIds() const {
  std::vector<pid_t> pids;
  if (pid_namespace_inode_ == 0) return pids;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return base::ErrnoToStatus(errno, "opendir /proc");
  while (dirent* entry = ::readdir(proc)) {
    Result<uint64_t> pid = base::ParseUint64(entry->d_name);
    if (!pid.ok() || *pid > INT_MAX) continue;
    // A zombie has ended; bwrap's pid 1 stays one until the host's init reaps it.
    if (PidNamespaceInode(static_cast<pid_t>(*pid)) == pid_namespace_inode_ &&
        !IsZombieOrGone(static_cast<pid_t>(*pid))) {
      pids.push_back(static_cast<pid_t>(*pid));
    }
  }
  ::closedir(proc);
  std::sort(pids.begin(), pids.end());
  return pids;
}

void RunningWorkload::SignalSandbox(int sig) const {
  Result<std::vector<pid_t>> pids = ProcessIds();
  if (!pids.ok()) return;
  for (pid_t pid : *pids) {
    // bwrap's reaper (pid 1 inside) ignores signals it has no handler for; it ends with the
    // workload's main process anyway.
    if (pid == init_pid_) continue;
    SignalIfInNamespace(pid, pid_namespace_inode_, sig);
  }
}

void RunningWorkload::KillSandbox() {
  std::lock_guard<std::mutex> lock(mu_);
  if (reaped_) return;
  killed_ = true;
  // pid 1 of a PID namespace dying takes every process of the namespace with it.
  if (init_pidfd_.valid()) {
    PidfdSendSignal(init_pidfd_.get(), SIGKILL);
  } else {
    ::kill(bwrap_pid_, SIGKILL);
  }
}

Result<base::ExitStatus> RunningWorkload::Stop(std::chrono::milliseconds grace) {
  SOVAI_ASSIGN_OR_RETURN(bool done, TryReap());
  if (done) return Finalize();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  SignalSandbox(SIGTERM);
  Result<base::ExitStatus> ended = WaitFor(grace.count());
  if (ended.ok() || ended.status().code() != base::StatusCode::kDeadlineExceeded) return ended;
  KillSandbox();
  ended = WaitFor(kSandboxKillWaitMs);
  if (ended.ok() || ended.status().code() != base::StatusCode::kDeadlineExceeded) return ended;
  SOVAI_LOG(WARNING).With("bwrap_pid", bwrap_pid_)
      << "sandbox still running after SIGKILL of its pid 1; killing bwrap";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reaped_) ::kill(bwrap_pid_, SIGKILL);
  }
  return WaitFor(-1);
}

// --- Sandbox ---

Result<std::unique_ptr<Sandbox>> Sandbox::Create(base::Env& env, SandboxOptions options) {
  SOVAI_ASSIGN_OR_RETURN(std::string bwrap, FindProgram(options.bwrap_path));
  std::unique_ptr<Sandbox> sandbox(new Sandbox(env, std::move(options), std::move(bwrap)));

  // The probe: `true` in a sandbox built exactly as a workload's would be.
  const char* tmp = std::getenv("TMPDIR");
  std::string dir =
      std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/sovai-sandbox-probe-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    return base::ErrnoToStatus(errno, "create a directory for the sandbox probe");
  }
  // uid 65534 must reach <dir>/work/tmp when the platform is root.
  ::chmod(dir.c_str(), 0711);
  SandboxSpec probe;
  probe.argv = {"true"};
  probe.work_dir = dir + "/work";
  probe.log_path = dir + "/probe.log";
  Result<base::ExitStatus> exit = [&]() -> Result<base::ExitStatus> {
    SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<RunningWorkload> workload, sandbox->Launch(probe));
    return workload->Wait();
  }();
  env.DeleteDirRecursive(dir).IgnoreError();
  std::string problem;
  if (!exit.ok()) {
    // Errors before bwrap ran (a probe directory the sandbox user cannot reach, ...) are not
    // about namespaces.
    if (!exit.status().message().starts_with(kDidNotRun)) {
      return exit.status().WithContext("sandbox probe");
    }
    problem = exit.status().message();
  } else if (!exit->success()) {
    problem = "`true` " + exit->ToString();
  }
  if (!problem.empty()) {
    return base::FailedPreconditionError(
        "bubblewrap (" + sandbox->bwrap_path_ +
        ") cannot create a sandbox on this host: " + problem +
        ". The sandbox needs unprivileged user namespaces (with PID and network namespaces): "
        "check sysctl user.max_user_namespaces (> 0), kernel.unprivileged_userns_clone (1) and "
        "kernel.apparmor_restrict_unprivileged_userns (0), and the container's seccomp profile");
  }
  return sandbox;
}

Result<std::unique_ptr<RunningWorkload>> Sandbox::Launch(const SandboxSpec& raw_spec) {
  // Validate the spec as given before touching the filesystem with its paths.
  BwrapOptions options;
  options.bwrap_path = bwrap_path_;
  SOVAI_RETURN_IF_ERROR(BuildBwrapArgv(raw_spec, options));
  if (raw_spec.log_path.empty()) return base::InvalidArgumentError("log_path is empty");

  // Canonical host paths: a symlink must not smuggle a hidden path past the checks.
  SandboxSpec spec = raw_spec;
  // Root that can become spec.uid (it is mapped in our user namespace) starts bwrap as that
  // user; root of a user namespace without it (a rootless container) is unprivileged on the
  // host already, and the sandbox runs as it, like any non-root platform.
  const bool as_root = ::geteuid() == 0 && IdIsMapped(env_, "/proc/self/uid_map", spec.uid) &&
                       IdIsMapped(env_, "/proc/self/gid_map", spec.gid);
  for (Mount& m : spec.mounts) {
    SOVAI_ASSIGN_OR_RETURN(m.host_path, RealPath("mount source", m.host_path));
  }
  if (!spec.rootfs.empty()) {
    SOVAI_ASSIGN_OR_RETURN(spec.rootfs, RealPath("rootfs", spec.rootfs));
    SOVAI_ASSIGN_OR_RETURN(base::FileStat st, env_.Stat(spec.rootfs));
    if (st.type != base::FileType::kDirectory) {
      return base::InvalidArgumentError("rootfs " + Quote(spec.rootfs) + " is not a directory");
    }
  }
  for (const std::string& hidden : options_.hidden_paths) {
    Result<std::string> real = RealPath("hidden path", hidden);
    options.hidden_paths.push_back(real.ok() ? *real : hidden);
  }
  if (spec.rootfs.empty()) {
    SOVAI_ASSIGN_OR_RETURN(options.root_entries,
                           ScanRootEntries(env_, "/", &options_.host_root_dirs));
  } else {
    SOVAI_ASSIGN_OR_RETURN(options.root_entries, ScanRootEntries(env_, spec.rootfs, nullptr));
  }
  if (!spec.gpus.empty()) options.gpu_devices = NvidiaDevices(env_);
  if (!spec.cpus.empty()) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
      return base::ErrnoToStatus(errno, "sched_getaffinity");
    }
    for (int cpu : spec.cpus) {
      if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) {
        return base::InvalidArgumentError("cpu " + std::to_string(cpu) +
                                          " is not one this server may use (see its affinity)");
      }
    }
  }

  // The private /tmp, owned by the sandbox's host user.
  SOVAI_RETURN_IF_ERROR(env_.CreateDirs(spec.work_dir));
  SOVAI_ASSIGN_OR_RETURN(spec.work_dir, RealPath("work_dir", spec.work_dir));
  const std::string work_tmp = spec.work_dir + "/tmp";
  SOVAI_RETURN_IF_ERROR(env_.CreateDirs(work_tmp));
  if (as_root && ::chown(work_tmp.c_str(), spec.uid, spec.gid) != 0) {
    return base::ErrnoToStatus(errno, "chown " + Quote(work_tmp));
  }
  if (::chmod(work_tmp.c_str(), 0700) != 0) {
    return base::ErrnoToStatus(errno, "chmod " + Quote(work_tmp));
  }

  options.status_fd = kStatusFd;
  SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> argv, BuildBwrapArgv(spec, options));
  SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> sandbox_env, BuildSandboxEnv(spec));

  if (as_root) {
    SOVAI_RETURN_IF_ERROR(CheckAccessibleAs(work_tmp, spec.uid, spec.gid, /*write=*/true));
    if (!spec.rootfs.empty()) {
      SOVAI_RETURN_IF_ERROR(CheckAccessibleAs(spec.rootfs, spec.uid, spec.gid, false));
    }
    for (const Mount& m : spec.mounts) {
      SOVAI_RETURN_IF_ERROR(CheckAccessibleAs(m.host_path, spec.uid, spec.gid, !m.read_only));
    }
  }
  if (!spec.rootfs.empty()) {
    for (const Mount& m : spec.mounts) {
      if (!IsRootEntry(options, FirstComponent(m.sandbox_path))) continue;
      SOVAI_ASSIGN_OR_RETURN(base::FileStat st, env_.Stat(m.host_path));
      SOVAI_RETURN_IF_ERROR(
          CreateMountPoint(spec.rootfs, m.sandbox_path, st.type == base::FileType::kDirectory));
    }
  }

  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<LogWriter> writer, LogWriter::Open(env_, spec.log_path));
  StartRequest request;
  request.argv = std::move(argv);
  request.env = std::move(sandbox_env);
  request.cpus = spec.cpus;
  request.memory_bytes = spec.memory_bytes;
  request.drop_to_ids = as_root;
  request.shield_bwrap = spec.shield_from_step_signals;
  request.uid = spec.uid;
  request.gid = spec.gid;
  SOVAI_ASSIGN_OR_RETURN(Started started, StartBwrap(request));

  // From here the workload object owns bwrap: any early return kills and reaps it.
  std::unique_ptr<RunningWorkload> workload(new RunningWorkload());
  workload->bwrap_pid_ = started.pid;
  workload->bwrap_pidfd_.Reset(PidfdOpen(started.pid));
  workload->status_fd_ = std::move(started.status_read);
  workload->log_writer_ = std::move(writer);
  SOVAI_ASSIGN_OR_RETURN(workload->capture_,
                         LogCapture::Start(workload->log_writer_, std::move(started.stdout_read),
                                           std::move(started.stderr_read), options_.log_capture));

  // Wait for bwrap to report the sandbox's pid 1: the namespaces then exist.
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.start_timeout_ms);
  std::string& text = workload->status_text_;
  bool eof = false;
  while (!(StatusField(text, "pid-namespace").has_value() && text.find('}') != std::string::npos)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return base::DeadlineExceededError("bwrap did not start the sandbox within " +
                                         std::to_string(options_.start_timeout_ms) + " ms");
    }
    pollfd p{workload->status_fd_.get(), POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) return base::ErrnoToStatus(errno, "poll bwrap's status");
    if (ready <= 0) continue;
    char buffer[1024];
    ssize_t n = ::read(workload->status_fd_.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || text.size() > kMaxBwrapStatusBytes) {
      eof = true;
      break;
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  if (eof) {
    // bwrap gave up before creating the namespaces; Wait reports its complaint.
    Result<base::ExitStatus> exit = workload->Wait();
    if (!exit.ok()) return exit.status();
    return base::FailedPreconditionError("bwrap could not create the sandbox: it " +
                                         exit->ToString() + "; see " + spec.log_path);
  }
  workload->init_pid_ = static_cast<pid_t>(*StatusField(text, "child-pid"));
  workload->pid_namespace_inode_ = static_cast<uint64_t>(*StatusField(text, "pid-namespace"));
  // Pin pid 1 with a pidfd, checking it is still the sandbox's (it may already have ended).
  base::UniqueFd init_pidfd(PidfdOpen(workload->init_pid_));
  if (init_pidfd.valid() &&
      PidNamespaceInode(workload->init_pid_) == workload->pid_namespace_inode_) {
    workload->init_pidfd_ = std::move(init_pidfd);
  }
  return workload;
}

Status MakeDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return base::ErrnoToStatus(errno, "mkdir '" + path + "'");
  }
  if (::chmod(path.c_str(), mode) != 0) return base::ErrnoToStatus(errno, "chmod '" + path + "'");
  return Status();
}

Status ChownTree(const std::string& dir, uint32_t uid, uint32_t gid) {
  std::error_code ec;
  if (::lchown(dir.c_str(), uid, gid) != 0) {
    return base::ErrnoToStatus(errno, "chown '" + dir + "'");
  }
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (::lchown(it->path().c_str(), uid, gid) != 0) {
      return base::ErrnoToStatus(errno, "chown '" + it->path().string() + "'");
    }
  }
  if (ec) return base::InternalError("walking '" + dir + "': " + ec.message());
  return Status();
}

}  // namespace sovai::exec
