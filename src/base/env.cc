#include "base/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/crypto.h"
#include "base/strings.h"

extern char** environ;  // NOLINT: POSIX declares it nowhere else

namespace sovai::base {
namespace {

constexpr std::string_view kTempMarker = ".sovai-tmp.";
constexpr std::string_view kTruncatedMarker = "...[truncated]";
// DeleteDirRecursive refuses to descend further (each level holds an open directory).
constexpr int kMaxDeleteDepth = 512;

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

Status Errno(std::string_view op, std::string_view path) {
  int err = errno;
  return ErrnoToStatus(err, std::string(op) + " " + Quote(path));
}

int64_t ClockMicros(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

// write(2) with SIGPIPE suppressed for this thread: a reader that went away gives EPIPE instead
// of killing the process, whatever the process-wide disposition is.
ssize_t WriteNoSigpipe(int fd, const char* data, size_t size) {
  sigset_t sigpipe, old_mask, pending;
  sigemptyset(&sigpipe);
  sigaddset(&sigpipe, SIGPIPE);
  sigpending(&pending);
  bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &sigpipe, &old_mask);
  ssize_t n = ::write(fd, data, size);
  int saved_errno = errno;
  if (n < 0 && saved_errno == EPIPE && !was_pending) {
    timespec zero = {0, 0};
    while (sigtimedwait(&sigpipe, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  errno = saved_errno;
  return n;
}

// --- Files ---

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}

  Status Append(std::string_view data) override {
    if (!fd_.valid()) return FailedPreconditionError("append to closed file " + Quote(path_));
    SOVAI_RETURN_IF_ERROR(WriteFdFully(fd_.get(), data).WithContext("write " + Quote(path_)));
    written_bytes_ += data.size();
    if (stream_to_disk_) write_behind_.Wrote(fd_.get(), written_bytes_);
    return Status();
  }
  Status Sync() override {
    if (!fd_.valid()) return FailedPreconditionError("sync of closed file " + Quote(path_));
    if (::fsync(fd_.get()) != 0) return Errno("fsync", path_);
    return Status();
  }
  Status Close() override {
    if (!fd_.valid()) return Status();
    return fd_.Close().WithContext("close " + Quote(path_));
  }
  const std::string& path() const override { return path_; }
  void StreamToDisk() override { stream_to_disk_ = true; }

 private:
  std::string path_;
  UniqueFd fd_;
  uint64_t written_bytes_ = 0;  // appended through this object (the WriteBehind windows)
  bool stream_to_disk_ = false;
  WriteBehind write_behind_;
};

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, UniqueFd fd, uint64_t size)
      : path_(std::move(path)), fd_(std::move(fd)), size_(size) {}

  Result<size_t> ReadAt(uint64_t offset, std::span<char> out) const override {
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd_.get(), out.data() + done, out.size() - done,
                          static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno("pread", path_);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }
  uint64_t size_bytes() const override { return size_; }

 private:
  std::string path_;
  UniqueFd fd_;
  uint64_t size_;
};

Status RemoveTreeAt(int parent_fd, const std::string& name, const std::string& display, int depth) {
  if (depth > kMaxDeleteDepth) {
    return FailedPreconditionError("delete " + Quote(display) + ": nested deeper than " +
                                   std::to_string(kMaxDeleteDepth) + " directories");
  }
  int fd = ::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errno("open directory", display);
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    Status s = Errno("fdopendir", display);
    ::close(fd);
    return s;
  }
  struct DirCloser {
    DIR* d;
    ~DirCloser() { ::closedir(d); }
  } closer{dir};
  std::vector<std::pair<std::string, bool>> entries;  // name, is_dir
  errno = 0;
  while (dirent* e = ::readdir(dir)) {
    std::string child = e->d_name;
    if (child == "." || child == "..") continue;
    bool is_dir;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      if (::fstatat(::dirfd(dir), child.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return Errno("stat", display + "/" + child);
      }
      is_dir = S_ISDIR(st.st_mode);
    } else {
      is_dir = e->d_type == DT_DIR;
    }
    entries.emplace_back(std::move(child), is_dir);
  }
  if (errno != 0) return Errno("readdir", display);
  for (const auto& [child, is_dir] : entries) {
    std::string child_display = display + "/" + child;
    if (is_dir) {
      SOVAI_RETURN_IF_ERROR(RemoveTreeAt(::dirfd(dir), child, child_display, depth + 1));
    } else if (::unlinkat(::dirfd(dir), child.c_str(), 0) != 0 && errno != ENOENT) {
      return Errno("unlink", child_display);
    }
  }
  if (::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) != 0) return Errno("rmdir", display);
  return Status();
}

// --- Subprocesses ---

// What the child writes to the error pipe when it fails before exec.
enum ChildStage : int32_t { kStageSetpgid = 1, kStageDup, kStageChdir, kStageExec };

[[noreturn]] void ChildFail(int error_fd, ChildStage stage) {
  ReportPreExecFailure(error_fd, stage);
}

class PosixSubprocess : public Subprocess {
 public:
  PosixSubprocess(pid_t pid, bool group, UniqueFd in, UniqueFd out, UniqueFd err)
      : pid_(pid),
        group_(group),
        stdin_(std::move(in)),
        stdout_(std::move(out)),
        stderr_(std::move(err)) {
#ifdef SYS_pidfd_open
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd >= 0) {
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      pidfd_.Reset(fd);
    }
#endif
  }

  ~PosixSubprocess() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (reaped_) return;
    ::kill(group_ ? -pid_ : pid_, SIGKILL);
    int status;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }

  pid_t pid() const override { return pid_; }
  UniqueFd& stdin_fd() override { return stdin_; }
  UniqueFd& stdout_fd() override { return stdout_; }
  UniqueFd& stderr_fd() override { return stderr_; }

  Status Signal(int sig) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (group_) {
      if (::kill(-pid_, sig) != 0) {
        if (errno == ESRCH) {
          return NotFoundError("signal process group " + std::to_string(pid_) +
                               ": no process is left in it");
        }
        return Errno("kill", "process group " + std::to_string(pid_));
      }
      return Status();
    }
    if (reaped_) {
      return FailedPreconditionError("signal process " + std::to_string(pid_) +
                                     ": it has exited and been reaped");
    }
    // The child is at least a zombie until reaped (only under mu_), so its pid is still ours.
    if (::kill(pid_, sig) != 0) return Errno("kill", "process " + std::to_string(pid_));
    return Status();
  }

  Result<ExitStatus> Wait(int64_t timeout_ms) override {
    if (timeout_ms < 0) {
      while (true) {
        SOVAI_ASSIGN_OR_RETURN(bool done, TryReap());
        if (done) return CachedStatus();
        // Wait for the exit without reaping, so that Signal (under mu_) never races a reap.
        siginfo_t info;
        if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) != 0 &&
            errno != EINTR && errno != ECHILD) {
          return Errno("waitid", "process " + std::to_string(pid_));
        }
      }
    }
    const int64_t deadline = ClockMicros(CLOCK_MONOTONIC) + timeout_ms * 1000;
    int64_t backoff_us = 1000;
    while (true) {
      SOVAI_ASSIGN_OR_RETURN(bool done, TryReap());
      if (done) return CachedStatus();
      int64_t remaining_us = deadline - ClockMicros(CLOCK_MONOTONIC);
      if (remaining_us <= 0) {
        return DeadlineExceededError("process " + std::to_string(pid_) + " still running after " +
                                     std::to_string(timeout_ms) + " ms");
      }
      if (pidfd_.valid()) {
        pollfd p{pidfd_.get(), POLLIN, 0};
        int wait_ms = static_cast<int>(std::min<int64_t>((remaining_us + 999) / 1000, 60'000));
        ::poll(&p, 1, wait_ms);
      } else {
        int64_t sleep_us = std::min(remaining_us, backoff_us);
        timespec ts{static_cast<time_t>(sleep_us / 1'000'000),
                    static_cast<long>(sleep_us % 1'000'000 * 1000)};
        ::nanosleep(&ts, nullptr);
        backoff_us = std::min<int64_t>(backoff_us * 2, 20'000);
      }
    }
  }

 private:
  // Reaps the child if it has ended. True when it is (now or already) reaped.
  Result<bool> TryReap() {
    std::lock_guard<std::mutex> lock(mu_);
    if (reaped_) return true;
    int status = 0;
    pid_t r;
    do {
      r = ::waitpid(pid_, &status, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return Errno("waitpid", "process " + std::to_string(pid_));
    if (r == 0) return false;
    reaped_ = true;
    if (WIFEXITED(status)) {
      status_.exited = true;
      status_.code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      status_.signaled = true;
      status_.signal = WTERMSIG(status);
    }
    return true;
  }

  ExitStatus CachedStatus() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

  const pid_t pid_;
  const bool group_;
  UniqueFd stdin_;
  UniqueFd stdout_;
  UniqueFd stderr_;
  // Set in the constructor, then only read (poll) until destruction: needs no lock.
  UniqueFd pidfd_;
  std::mutex mu_;  // guards reaped_, status_, and serializes every waitpid/kill on pid_
  bool reaped_ = false;
  ExitStatus status_;
};

// Finds `program` in the colon-separated `path_list`, as execvp would.
Result<std::string> ResolveProgram(const std::string& program, std::string_view path_list) {
  if (program.find('/') != std::string::npos) return program;
  bool saw_not_executable = false;
  for (std::string_view dir : Split(path_list, ':')) {
    std::string candidate = JoinPath(dir.empty() ? "." : dir, program);
    struct stat st;
    if (::stat(candidate.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    saw_not_executable = true;
  }
  std::string message = "spawn " + Quote(program) + ": ";
  if (saw_not_executable) {
    return PermissionDeniedError(message + "found on PATH but not executable");
  }
  return NotFoundError(message + "program not found on PATH=" + std::string(path_list));
}

class PosixEnv : public Env {
 public:
  Result<std::string> ReadFile(const std::string& path, uint64_t max_size_bytes) override {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return Errno("open", path);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return Errno("stat", path);
    if (S_ISDIR(st.st_mode))
      return FailedPreconditionError("read " + Quote(path) + ": a directory");
    auto too_big = [&] {
      return ResourceExhaustedError("read " + Quote(path) + ": larger than the limit of " +
                                    std::to_string(max_size_bytes) + " bytes");
    };
    if (static_cast<uint64_t>(st.st_size) > max_size_bytes) return too_big();
    std::string data;
    data.resize(static_cast<size_t>(st.st_size));
    size_t used = 0;
    while (true) {
      if (used == data.size()) {
        if (data.size() > max_size_bytes) return too_big();  // the file grew while we read
        data.resize(std::max<size_t>(data.size() * 2, 4096));
      }
      ssize_t n = ::read(fd.get(), data.data() + used, data.size() - used);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno("read", path);
      }
      if (n == 0) break;
      used += static_cast<size_t>(n);
    }
    if (used > max_size_bytes) return too_big();
    data.resize(used);
    return data;
  }

  using Env::NewWritableFile;
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path, WriteMode mode,
                                                        uint32_t permissions) override {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC;
    switch (mode) {
      case WriteMode::kCreateExclusive:
        flags |= O_EXCL;
        break;
      case WriteMode::kTruncate:
        flags |= O_TRUNC;
        break;
      case WriteMode::kAppend:
        flags |= O_APPEND;
        break;
    }
    UniqueFd fd(::open(path.c_str(), flags, permissions));
    if (!fd.valid()) return Errno("create", path);
    return std::unique_ptr<WritableFile>(std::make_unique<PosixWritableFile>(path, std::move(fd)));
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return Errno("open", path);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return Errno("stat", path);
    if (!S_ISREG(st.st_mode)) {
      return FailedPreconditionError("open " + Quote(path) + ": not a regular file");
    }
    return std::unique_ptr<RandomAccessFile>(std::make_unique<PosixRandomAccessFile>(
        path, std::move(fd), static_cast<uint64_t>(st.st_size)));
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) return Errno("mkdir", path);
    return Status();
  }

  Status CreateDirs(const std::string& path) override {
    if (path.empty()) return InvalidArgumentError("mkdir: empty path");
    // Each prefix ending before a '/', then the whole path.
    for (size_t pos = 1; pos <= path.size(); ++pos) {
      if (pos != path.size() && path[pos] != '/') continue;
      if (path[pos - 1] == '/') continue;  // "//" or a trailing '/'
      std::string prefix = path.substr(0, pos);
      if (::mkdir(prefix.c_str(), 0755) == 0) continue;
      if (errno != EEXIST) return Errno("mkdir", prefix);
      struct stat st;
      if (::stat(prefix.c_str(), &st) != 0) return Errno("stat", prefix);
      if (!S_ISDIR(st.st_mode)) {
        return AlreadyExistsError("mkdir " + Quote(path) + ": " + Quote(prefix) +
                                  " exists and is not a directory");
      }
    }
    return Status();
  }

  Status DeleteFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return Errno("unlink", path);
    return Status();
  }

  Status DeleteDir(const std::string& path) override {
    if (::rmdir(path.c_str()) != 0) {
      if (errno == ENOTEMPTY || errno == EEXIST) {
        return FailedPreconditionError("rmdir " + Quote(path) + ": directory not empty");
      }
      return Errno("rmdir", path);
    }
    return Status();
  }

  Status DeleteDirRecursive(const std::string& path) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return Errno("delete", path);
    if (!S_ISDIR(st.st_mode)) {
      return FailedPreconditionError("delete " + Quote(path) + ": not a directory");
    }
    return RemoveTreeAt(AT_FDCWD, path, path, 0);
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      int err = errno;
      return ErrnoToStatus(err, "rename " + Quote(from) + " to " + Quote(to));
    }
    return Status();
  }

  Status SyncDir(const std::string& path) override {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) return Errno("open directory", path);
    if (::fsync(fd.get()) != 0) return Errno("fsync directory", path);
    return Status();
  }

  bool FileExists(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }

  Result<uint64_t> GetFileSize(const std::string& path) override {
    SOVAI_ASSIGN_OR_RETURN(FileStat st, Stat(path));
    return st.size_bytes;
  }

  Result<FileStat> Stat(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Errno("stat", path);
    FileStat out;
    out.size_bytes = static_cast<uint64_t>(st.st_size);
    out.mtime_unix_micros =
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000 + st.st_mtim.tv_nsec / 1000;
    out.type = S_ISREG(st.st_mode)   ? FileType::kRegular
               : S_ISDIR(st.st_mode) ? FileType::kDirectory
               : S_ISLNK(st.st_mode) ? FileType::kSymlink
                                     : FileType::kOther;
    out.mode = st.st_mode & 07777;
    return out;
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return Errno("opendir", path);
    std::vector<std::string> names;
    errno = 0;
    while (dirent* e = ::readdir(dir)) {
      std::string_view name = e->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    int err = errno;
    ::closedir(dir);
    if (err != 0) return ErrnoToStatus(err, "readdir " + Quote(path));
    std::sort(names.begin(), names.end());
    return names;
  }

  int64_t NowUnixMicros() override { return ClockMicros(CLOCK_REALTIME); }
  int64_t NowMonotonicMicros() override { return ClockMicros(CLOCK_MONOTONIC); }
  void SleepForMicros(int64_t micros) override {
    if (micros <= 0) return;
    timespec ts{static_cast<time_t>(micros / 1'000'000),
                static_cast<long>(micros % 1'000'000 * 1000)};
    while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }

  Result<std::unique_ptr<Subprocess>> Spawn(const SpawnOptions& options) override;
};

Result<std::unique_ptr<Subprocess>> PosixEnv::Spawn(const SpawnOptions& o) {
  if (o.argv.empty()) return InvalidArgumentError("spawn: empty argv");
  if (o.argv.size() > kMaxSpawnArgs) {
    return InvalidArgumentError("spawn: more than " + std::to_string(kMaxSpawnArgs) + " arguments");
  }
  if (o.stdin_spec.mode == StdioSpec::Mode::kMergeWithStdout ||
      o.stdout_spec.mode == StdioSpec::Mode::kMergeWithStdout) {
    return InvalidArgumentError("spawn: kMergeWithStdout is only valid for stderr");
  }

  // The child's environment.
  std::vector<std::string> env_strings;
  if (!o.replace_env) {
    for (char** e = environ; *e != nullptr; ++e) {
      std::string_view entry = *e;
      std::string key(entry.substr(0, entry.find('=')));
      if (o.env.find(key) == o.env.end()) env_strings.emplace_back(entry);
    }
  }
  for (const auto& [key, value] : o.env) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return InvalidArgumentError("spawn: invalid environment variable name " + Quote(key));
    }
    env_strings.push_back(key + "=" + value);
  }
  if (env_strings.size() > kMaxSpawnEnvEntries) {
    return InvalidArgumentError("spawn: more than " + std::to_string(kMaxSpawnEnvEntries) +
                                " environment entries");
  }
  std::string path_list = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& entry : env_strings) {
    if (entry.starts_with("PATH=")) path_list = entry.substr(5);
  }
  SOVAI_ASSIGN_OR_RETURN(std::string program, ResolveProgram(o.argv[0], path_list));

  // Stdio: child_src[i] is what becomes fd i in the child (-1 = inherit).
  UniqueFd parent_end[3];
  UniqueFd child_end[3];
  const StdioSpec* specs[3] = {&o.stdin_spec, &o.stdout_spec, &o.stderr_spec};
  bool merge_stderr = false;
  for (int i = 0; i < 3; ++i) {
    const StdioSpec& spec = *specs[i];
    switch (spec.mode) {
      case StdioSpec::Mode::kInherit:
        break;
      case StdioSpec::Mode::kPipe: {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) return Errno("pipe", "for spawn");
        // The child reads stdin and writes stdout/stderr; the parent holds the other end.
        parent_end[i].Reset(i == 0 ? fds[1] : fds[0]);
        child_end[i].Reset(i == 0 ? fds[0] : fds[1]);
        break;
      }
      case StdioSpec::Mode::kFile: {
        int flags = i == 0 ? O_RDONLY : O_WRONLY | O_CREAT | (spec.append ? O_APPEND : O_TRUNC);
        child_end[i].Reset(::open(spec.path.c_str(), flags | O_CLOEXEC, 0644));
        if (!child_end[i].valid()) return Errno("spawn: open", spec.path);
        break;
      }
      case StdioSpec::Mode::kNull:
        child_end[i].Reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
        if (!child_end[i].valid()) return Errno("open", "/dev/null");
        break;
      case StdioSpec::Mode::kMergeWithStdout:
        merge_stderr = true;
        break;
    }
  }

  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) return Errno("pipe", "for spawn");
  UniqueFd error_read(error_pipe[0]), error_write(error_pipe[1]);

  // Everything the child needs is built before fork: after fork, only async-signal-safe calls.
  std::vector<char*> argv_ptrs = ExecPointers(o.argv);
  std::vector<char*> env_ptrs = ExecPointers(env_strings);
  int child_src[3] = {child_end[0].get(), child_end[1].get(), child_end[2].get()};
  const char* cwd = o.cwd.empty() ? nullptr : o.cwd.c_str();
  const int error_fd = error_write.get();

  pid_t pid = ::fork();
  if (pid < 0) return Errno("fork", o.argv[0]);
  if (pid == 0) {
    // Child.
    ResetSignalsInChild();
    if (o.new_process_group && ::setpgid(0, 0) != 0) ChildFail(error_fd, kStageSetpgid);
    if (!InstallChildFds(child_src)) ChildFail(error_fd, kStageDup);
    if (merge_stderr && ::dup2(1, 2) < 0) ChildFail(error_fd, kStageDup);
    if (cwd != nullptr && ::chdir(cwd) != 0) ChildFail(error_fd, kStageChdir);
    ::execve(program.c_str(), argv_ptrs.data(), env_ptrs.data());
    ChildFail(error_fd, kStageExec);
  }

  // Parent.
  error_write.Reset();
  for (UniqueFd& fd : child_end) fd.Reset();
  if (std::optional<PreExecFailure> report = ReadPreExecFailure(error_read.get())) {
    // The child failed before exec and is exiting: reap it and report why.
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::string what;
    switch (report->stage) {
      case kStageSetpgid:
        what = "spawn " + Quote(o.argv[0]) + ": setpgid";
        break;
      case kStageDup:
        what = "spawn " + Quote(o.argv[0]) + ": redirecting stdio";
        break;
      case kStageChdir:
        what = "spawn " + Quote(o.argv[0]) + ": chdir " + Quote(o.cwd);
        break;
      default:
        what = "spawn: exec " + Quote(program);
        break;
    }
    return ErrnoToStatus(report->err, what);
  }
  return std::unique_ptr<Subprocess>(
      std::make_unique<PosixSubprocess>(pid, o.new_process_group, std::move(parent_end[0]),
                                        std::move(parent_end[1]), std::move(parent_end[2])));
}

// --- Fault injection ---

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionEnv& env, std::unique_ptr<WritableFile> target)
      : env_(env), target_(std::move(target)) {}

  Status Append(std::string_view data) override {
    Status injected = env_.MaybeFail(FaultOp::kAppend);
    if (!injected.ok()) {
      // A full disk accepts part of the write before failing.
      target_->Append(data.substr(0, data.size() / 2)).IgnoreError();
      return injected;
    }
    return target_->Append(data);
  }
  Status Sync() override {
    SOVAI_RETURN_IF_ERROR(env_.MaybeFail(FaultOp::kSync));
    return target_->Sync();
  }
  Status Close() override {
    Status injected = env_.MaybeFail(FaultOp::kClose);
    Status closed = target_->Close();  // the fd is released either way, as with close(2)
    return injected.ok() ? closed : injected;
  }
  const std::string& path() const override { return target_->path(); }
  void StreamToDisk() override { target_->StreamToDisk(); }

 private:
  FaultInjectionEnv& env_;
  std::unique_ptr<WritableFile> target_;
};

}  // namespace

// --- UniqueFd and fd helpers ---

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Status UniqueFd::Close() {
  if (fd_ < 0) return Status();
  int fd = Release();
  // On Linux the fd is released even when close fails (EINTR included): never retry.
  if (::close(fd) != 0) {
    int err = errno;
    return ErrnoToStatus(err, "close fd " + std::to_string(fd));
  }
  return Status();
}

Result<std::string> ReadFdToEnd(int fd, size_t max_bytes) {
  std::string out;
  char buf[64 * 1024];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      return ErrnoToStatus(err, "read fd " + std::to_string(fd));
    }
    if (n == 0) return out;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      return ResourceExhaustedError("read fd " + std::to_string(fd) + ": more than " +
                                    std::to_string(max_bytes) + " bytes");
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

Status WriteFdFully(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = WriteNoSigpipe(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      return ErrnoToStatus(err, "write fd " + std::to_string(fd));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status();
}

void ReportPreExecFailure(int fd, int32_t stage) {
  PreExecFailure report{stage, errno};
  ssize_t ignored = ::write(fd, &report, sizeof(report));
  (void)ignored;
  ::_exit(127);
}

void ResetSignalsInChild() {
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);  // some fail: fine
}

bool InstallChildFds(std::span<int> sources) {
  const int count = static_cast<int>(sources.size());
  for (int& fd : sources) {
    if (fd >= 0 && fd < count) {
      fd = ::fcntl(fd, F_DUPFD_CLOEXEC, count);
      if (fd < 0) return false;
    }
  }
  for (int i = 0; i < count; ++i) {
    if (sources[i] >= 0 && ::dup2(sources[i], i) < 0) return false;
  }
#if defined(SYS_close_range)
  ::syscall(SYS_close_range, static_cast<unsigned>(count), ~0u, 4u /* CLOSE_RANGE_CLOEXEC */);
#endif
  return true;
}

std::vector<char*> ExecPointers(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const std::string& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

std::optional<PreExecFailure> ReadPreExecFailure(int fd) {
  PreExecFailure report{};
  size_t got = 0;
  while (got < sizeof(report)) {
    ssize_t n = ::read(fd, reinterpret_cast<char*>(&report) + got, sizeof(report) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == 0) return std::nullopt;
  if (got < sizeof(report)) report.err = EIO;
  return report;
}

void WriteBehind::Wrote(int fd, uint64_t length) {
  while (length - started_ >= kWindowBytes) {
    (void)::sync_file_range(fd, static_cast<off_t>(started_), kWindowBytes, SYNC_FILE_RANGE_WRITE);
    if (started_ >= kWindowBytes) {
      const auto previous = static_cast<off_t>(started_ - kWindowBytes);
      (void)::sync_file_range(
          fd, previous, kWindowBytes,
          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      (void)::posix_fadvise(fd, previous, kWindowBytes, POSIX_FADV_DONTNEED);
    }
    started_ += kWindowBytes;
  }
}

std::string ExitStatus::ToString() const {
  if (exited) return "exited with code " + std::to_string(code);
  if (signaled) {
    const char* name = ::strsignal(signal);
    return "killed by signal " + std::to_string(signal) + " (" + (name ? name : "?") + ")";
  }
  return "unknown exit status";
}

// --- Env ---

Env& Env::Default() {
  static PosixEnv env;
  return env;
}

Status Env::WriteFileAtomically(const std::string& path, std::string_view data,
                                uint32_t permissions) {
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> writer,
                         AtomicFileWriter::Open(*this, path, permissions));
  SOVAI_RETURN_IF_ERROR(writer->Append(data));
  return writer->Commit();
}

// --- AtomicFileWriter ---

Result<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Open(Env& env, const std::string& path,
                                                                 uint32_t permissions) {
  std::string base = BaseName(path);
  if (base.empty() || base == "." || base == "..") {
    return InvalidArgumentError("atomic write: " + Quote(path) + " does not name a file");
  }
  std::string temp_path =
      JoinPath(DirName(path), "." + base + std::string(kTempMarker) + HexEncode(RandomBytes(8)));
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                         env.NewWritableFile(temp_path, WriteMode::kCreateExclusive, permissions));
  return std::unique_ptr<AtomicFileWriter>(
      new AtomicFileWriter(env, path, std::move(temp_path), std::move(file)));
}

AtomicFileWriter::AtomicFileWriter(Env& env, std::string path, std::string temp_path,
                                   std::unique_ptr<WritableFile> file)
    : env_(env), path_(std::move(path)), temp_path_(std::move(temp_path)), file_(std::move(file)) {}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

Status AtomicFileWriter::Append(std::string_view data) {
  if (done_) return FailedPreconditionError("atomic write " + Quote(path_) + ": already finished");
  if (!failed_.ok()) return failed_;
  Status s = file_->Append(data);
  if (!s.ok()) {
    failed_ = s;
    return s;
  }
  bytes_written_ += data.size();
  return Status();
}

Status AtomicFileWriter::Commit() {
  if (done_) return FailedPreconditionError("atomic write " + Quote(path_) + ": already finished");
  if (!failed_.ok()) {
    Abandon();  // it can never succeed: clean up now
    return failed_;
  }
  Status s = file_->Sync();
  if (s.ok()) s = file_->Close();
  if (s.ok()) s = env_.RenameFile(temp_path_, path_);
  if (!s.ok()) {
    failed_ = s;
    Abandon();
    return s;
  }
  done_ = true;
  file_.reset();
  // The rename happened: the new content is visible. Syncing the directory makes it durable.
  return env_.SyncDir(DirName(path_)).WithContext("atomic write " + Quote(path_));
}

void AtomicFileWriter::Abandon() {
  if (done_) return;
  done_ = true;
  if (file_ != nullptr) {
    file_->Close().IgnoreError();
    file_.reset();
  }
  env_.DeleteFile(temp_path_).IgnoreError();  // best effort; IsAtomicWriteTempName finds leftovers
}

bool IsAtomicWriteTempName(std::string_view name) {
  size_t marker = name.rfind(kTempMarker);
  if (name.empty() || name[0] != '.' || marker == std::string_view::npos || marker < 2) {
    return false;
  }
  std::string_view suffix = name.substr(marker + kTempMarker.size());
  return suffix.size() == 16 && std::all_of(suffix.begin(), suffix.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string DirName(std::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

std::string BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string JoinPath(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  std::string out(a);
  if (out.back() != '/') out.push_back('/');
  while (!b.empty() && b.front() == '/') b.remove_prefix(1);
  out.append(b);
  return out;
}

// --- RunAndCapture ---

Result<CapturedRun> RunAndCapture(Env& env, SpawnOptions options, std::string_view stdin_data,
                                  int64_t timeout_ms, size_t max_output_bytes) {
  options.stdin_spec = StdioSpec::Pipe();
  options.stdout_spec = StdioSpec::Pipe();
  options.stderr_spec = StdioSpec::Pipe();
  const std::string name = options.argv.empty() ? "" : options.argv[0];
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> child, env.Spawn(options));
  // The deadline is real time: poll(2) waits in real time whatever Env's clock says.
  const int64_t deadline_us =
      timeout_ms < 0 ? -1 : ClockMicros(CLOCK_MONOTONIC) + timeout_ms * 1000;
  auto timed_out = [&]() -> Status {
    child->Signal(SIGKILL).IgnoreError();
    child->Wait(-1).status().IgnoreError();
    return DeadlineExceededError("command " + Quote(name) + " did not finish within " +
                                 std::to_string(timeout_ms) + " ms; killed");
  };

  UniqueFd& in = child->stdin_fd();
  if (stdin_data.empty()) in.Reset();
  for (UniqueFd* fd : {&in, &child->stdout_fd(), &child->stderr_fd()}) {
    if (fd->valid()) ::fcntl(fd->get(), F_SETFL, ::fcntl(fd->get(), F_GETFL) | O_NONBLOCK);
  }
  CapturedRun run;
  std::string* sinks[3] = {nullptr, &run.stdout_text, &run.stderr_text};
  bool truncated[3] = {false, false, false};
  UniqueFd* fds[3] = {&in, &child->stdout_fd(), &child->stderr_fd()};
  char buf[64 * 1024];
  while (fds[0]->valid() || fds[1]->valid() || fds[2]->valid()) {
    pollfd pfds[3];
    int map[3];
    nfds_t n = 0;
    for (int i = 0; i < 3; ++i) {
      if (!fds[i]->valid()) continue;
      pfds[n] = {fds[i]->get(), static_cast<short>(i == 0 ? POLLOUT : POLLIN), 0};
      map[n++] = i;
    }
    int wait_ms = -1;
    if (deadline_us >= 0) {
      int64_t remaining = deadline_us - ClockMicros(CLOCK_MONOTONIC);
      if (remaining <= 0) return timed_out();
      wait_ms = static_cast<int>(std::min<int64_t>((remaining + 999) / 1000, 60'000));
    }
    int ready = ::poll(pfds, n, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Errno("poll", "pipes of " + name);
    }
    for (nfds_t k = 0; k < n; ++k) {
      if (pfds[k].revents == 0) continue;
      int i = map[k];
      if (i == 0) {
        ssize_t w = WriteNoSigpipe(fds[0]->get(), stdin_data.data(), stdin_data.size());
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (w < 0) {
          fds[0]->Reset();  // EPIPE: the child stopped reading; that is its business
          continue;
        }
        stdin_data.remove_prefix(static_cast<size_t>(w));
        if (stdin_data.empty()) fds[0]->Reset();
        continue;
      }
      ssize_t r = ::read(fds[i]->get(), buf, sizeof(buf));
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (r <= 0) {
        fds[i]->Reset();
        continue;
      }
      std::string& sink = *sinks[i];
      size_t room = max_output_bytes - std::min(max_output_bytes, sink.size());
      sink.append(buf, std::min(room, static_cast<size_t>(r)));
      if (static_cast<size_t>(r) > room) truncated[i] = true;
    }
  }
  for (int i = 1; i < 3; ++i) {
    if (truncated[i]) sinks[i]->append(kTruncatedMarker);
  }
  int64_t wait_ms = -1;
  if (deadline_us >= 0) {
    wait_ms = std::max<int64_t>(0, (deadline_us - ClockMicros(CLOCK_MONOTONIC)) / 1000);
  }
  Result<ExitStatus> exit = child->Wait(wait_ms);
  if (!exit.ok()) {
    if (exit.status().code() == StatusCode::kDeadlineExceeded) return timed_out();
    return exit.status();
  }
  run.exit = *exit;
  return run;
}

// --- ManualClock ---

int64_t ManualClock::NowUnixMicros() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unix_micros_;
}

int64_t ManualClock::NowMonotonicMicros() const {
  std::lock_guard<std::mutex> lock(mu_);
  return monotonic_micros_;
}

void ManualClock::Advance(int64_t micros) {
  SOVAI_CHECK_GE(micros, 0) << "ManualClock::Advance backwards";
  std::lock_guard<std::mutex> lock(mu_);
  unix_micros_ += micros;
  monotonic_micros_ += micros;
}

void ManualClock::SetUnixMicros(int64_t unix_micros) {
  std::lock_guard<std::mutex> lock(mu_);
  unix_micros_ = unix_micros;
}

// --- FaultInjectionEnv ---

void FaultInjectionEnv::FailNth(FaultOp op, int n, Status error) {
  SOVAI_CHECK_GE(n, 1);
  SOVAI_CHECK(!error.ok()) << "an injected fault needs an error status";
  std::lock_guard<std::mutex> lock(mu_);
  rules_[static_cast<int>(op)] = Rule{n, false, std::move(error)};
}

void FaultInjectionEnv::FailAlways(FaultOp op, Status error) {
  SOVAI_CHECK(!error.ok()) << "an injected fault needs an error status";
  std::lock_guard<std::mutex> lock(mu_);
  rules_[static_cast<int>(op)] = Rule{0, true, std::move(error)};
}

void FaultInjectionEnv::ClearFaults() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Rule& rule : rules_) rule = Rule{};
}

int FaultInjectionEnv::Count(FaultOp op) const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_[static_cast<int>(op)];
}

Status FaultInjectionEnv::MaybeFail(FaultOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  int i = static_cast<int>(op);
  ++counts_[i];
  Rule& rule = rules_[i];
  if (rule.always) return rule.error;
  if (rule.countdown > 0 && --rule.countdown == 0) {
    Status error = std::move(rule.error);
    rule = Rule{};
    return error;
  }
  return Status();
}

Result<std::string> FaultInjectionEnv::ReadFile(const std::string& path, uint64_t max_size_bytes) {
  SOVAI_RETURN_IF_ERROR(MaybeFail(FaultOp::kRead));
  return EnvWrapper::ReadFile(path, max_size_bytes);
}

Result<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(const std::string& path,
                                                                         WriteMode mode,
                                                                         uint32_t permissions) {
  SOVAI_RETURN_IF_ERROR(MaybeFail(FaultOp::kOpenWritable));
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                         EnvWrapper::NewWritableFile(path, mode, permissions));
  return std::unique_ptr<WritableFile>(std::make_unique<FaultWritableFile>(*this, std::move(file)));
}

Result<std::unique_ptr<RandomAccessFile>> FaultInjectionEnv::NewRandomAccessFile(
    const std::string& path) {
  SOVAI_RETURN_IF_ERROR(MaybeFail(FaultOp::kRead));
  return EnvWrapper::NewRandomAccessFile(path);
}

Status FaultInjectionEnv::DeleteFile(const std::string& path) {
  SOVAI_RETURN_IF_ERROR(MaybeFail(FaultOp::kDelete));
  return EnvWrapper::DeleteFile(path);
}

Status FaultInjectionEnv::DeleteDir(const std::string& path) {
  SOVAI_RETURN_IF_ERROR(MaybeFail(FaultOp::kDelete));
  return EnvWrapper::DeleteDir(path);
}

Status FaultInjectionEnv::DeleteDirRecursive(const std::string& path) {
  SOVAI_RETURN_IF_ERROR(MaybeFail(FaultOp::kDelete));
  return EnvWrapper::DeleteDirRecursive(path);
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  SOVAI_RETURN_IF_ERROR(MaybeFail(FaultOp::kRename));
  return EnvWrapper::RenameFile(from, to);
}

Status FaultInjectionEnv::SyncDir(const std::string& path) {
  SOVAI_RETURN_IF_ERROR(MaybeFail(FaultOp::kSyncDir));
  return EnvWrapper::SyncDir(path);
}

Result<std::unique_ptr<Subprocess>> FaultInjectionEnv::Spawn(const SpawnOptions& options) {
  SOVAI_RETURN_IF_ERROR(MaybeFail(FaultOp::kSpawn));
  return EnvWrapper::Spawn(options);
}

}  // namespace sovai::base
