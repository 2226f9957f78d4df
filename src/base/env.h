// Env: the seam between Sovai and the operating system (files, clock, processes), in the style of
// LevelDB's Env. Code that touches the disk, reads the time or starts processes takes an `Env&`,
// so tests can substitute FaultInjectionEnv (failing writes, syncs, renames) or ManualClockEnv
// (time that only moves when the test says so).
//
// Paths are plain strings passed to the OS unchanged; relative paths resolve against the process
// working directory. Errors are Statuses built by ErrnoToStatus: a missing file or directory is
// NotFound, an existing one AlreadyExists, EACCES/EPERM PermissionDenied, a full disk or too many
// open files ResourceExhausted, anything else Internal; messages name the operation and the path.
//
// Durability contract of WriteFileAtomically / AtomicFileWriter: the data goes to a temporary
// file in the destination's directory, which is written, fsync'ed, closed, renamed over the
// destination, and then the directory is fsync'ed. A reader (or a crash at any moment) sees
// either the complete old content or the complete new content, never a mix or a prefix. On any
// failure the old content stays and the temporary file is removed. Temporary files are named
// ".<name>.sovai-tmp.<16 hex>" (see IsAtomicWriteTempName): after a crash, stale ones may be left
// behind and their owner (e.g. the object store at startup) deletes them.
//
// Thread-safety: Env implementations are thread-safe. WritableFile, RandomAccessFile and
// AtomicFileWriter objects are not (use each from one thread at a time). Subprocess: Wait and
// Signal may be called concurrently from different threads; the fd accessors may not.
//
// Signals: writing to a pipe whose reader has exited raises SIGPIPE. The server's main ignores
// SIGPIPE (it needs to for sockets anyway), so such writes fail with EPIPE instead. Children
// start with all signals at their default disposition and an empty signal mask.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/limits.h"
#include "base/status.h"

namespace sovai::base {

// Owns a file descriptor and closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the current fd (ignoring errors) and takes `fd`.
  void Reset(int fd = -1);
  // Closes now and reports close(2)'s error (which can be a deferred write error).
  Status Close();

 private:
  int fd_ = -1;
};

// Reads from `fd` until end of file. Errors: ResourceExhausted when more than `max_bytes` arrive
// (the extra bytes are not consumed beyond one read), or the read(2) error.
Result<std::string> ReadFdToEnd(int fd, size_t max_bytes);
// Writes all of `data`, retrying short writes and EINTR.
Status WriteFdFully(int fd, std::string_view data);

// The failure channel of fork + exec: the parent makes a close-on-exec pipe; a child that fails
// before exec calls ReportPreExecFailure, which writes {stage, errno} (async-signal-safe) and
// _exits with 127. After closing its copy of the write end, the parent calls
// ReadPreExecFailure: nullopt when exec succeeded (the pipe closed empty), else what failed (err
// is EIO when the report arrived cut short). `stage` is the caller's own numbering.
struct PreExecFailure {
  int32_t stage = 0;
  int32_t err = 0;
};
[[noreturn]] void ReportPreExecFailure(int fd, int32_t stage);
std::optional<PreExecFailure> ReadPreExecFailure(int fd);

// The steps of a child between fork and exec that Env::Spawn and the sandbox share. All are
// async-signal-safe and allocate nothing (call them only in the child of a fork).
//   ResetSignalsInChild: an empty signal mask and every signal's default disposition, so that
//     the program starts as from a fresh process whatever the parent blocked or handled.
//   InstallChildFds: makes sources[i] fd i for each i with sources[i] >= 0 (a negative source
//     leaves fd i as inherited), first moving every source below sources.size() above it so that
//     no dup2 overwrites a source still needed; then marks every fd from sources.size() up
//     close-on-exec (a library's fd opened without O_CLOEXEC must not reach the program).
//     Returns false, with errno set, when a dup fails.
void ResetSignalsInChild();
bool InstallChildFds(std::span<int> sources);
// The NULL-terminated array of pointers into `strings` that execve takes (argv, envp), built
// before fork. The pointers are valid while `strings` is alive and unchanged.
std::vector<char*> ExecPointers(const std::vector<std::string>& strings);

// Streams a large sequential write to the disk while it is written, instead of piling up dirty
// page-cache pages that the final fdatasync flushes in one burst. Call Wrote() after each write
// with the file's length so far: each time a window of kWindowBytes fills, its writeback starts,
// and the window before it is waited for and dropped from the page cache (a multi-GB upload then
// neither stalls on a huge flush nor evicts hot small files). The final fdatasync has at most two
// windows left. The calls are advice: they fail only on a bad descriptor, and durability still
// comes from the caller's fdatasync, so their results are not reported.
class WriteBehind {
 public:
  static constexpr uint64_t kWindowBytes = 8 << 20;

  void Wrote(int fd, uint64_t length);
  // Bytes whose writeback has been started (a multiple of kWindowBytes).
  uint64_t started() const { return started_; }

 private:
  uint64_t started_ = 0;
};

// A file being written sequentially. Close() before destruction to see close errors; the
// destructor closes silently.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::string_view data) = 0;
  // fsync(2): data and metadata durable on return.
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
  virtual const std::string& path() const = 0;
  // Asks the file to hand what is appended from now on to the disk as it is written
  // (base::WriteBehind), for large sequential writes such as object data: a multi-GB file then
  // neither piles up dirty pages nor evicts hot small files. Advice: the default ignores it.
  virtual void StreamToDisk() {}
};

// A file read at arbitrary offsets (pread), e.g. to serve ranged GETs.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to out.size() bytes at `offset` into `out`; returns how many were read, fewer only
  // at end of file (0 at or past the end).
  virtual Result<size_t> ReadAt(uint64_t offset, std::span<char> out) const = 0;
  // The size when opened.
  virtual uint64_t size_bytes() const = 0;
};

enum class FileType : uint8_t { kRegular, kDirectory, kSymlink, kOther };

struct FileStat {
  uint64_t size_bytes = 0;
  int64_t mtime_unix_micros = 0;
  FileType type = FileType::kOther;
  uint32_t mode = 0;  // permission bits (st_mode & 07777)
};

// How NewWritableFile opens its file. A created file gets `permissions` (default 0644), less the
// umask; secrets are written with 0600 so they are never readable by others, not even briefly.
inline constexpr uint32_t kDefaultFilePermissions = 0644;
enum class WriteMode : uint8_t {
  kCreateExclusive,  // fail with AlreadyExists if the file exists
  kTruncate,         // create or truncate
  kAppend,           // create or append
};

// --- Subprocesses ---

struct StdioSpec {
  enum class Mode : uint8_t {
    kInherit,          // the parent's fd
    kPipe,             // a pipe; the parent's end is Subprocess::stdin_fd()/stdout_fd()/stderr_fd()
    kFile,             // `path`: stdin opens it read-only; stdout/stderr create or truncate it
                       // (or append with `append`)
    kNull,             // /dev/null
    kMergeWithStdout,  // stderr only: the same destination as stdout (2>&1)
  };
  Mode mode = Mode::kInherit;
  std::string path;
  bool append = false;

  static StdioSpec Inherit() { return {}; }
  static StdioSpec Pipe() { return {Mode::kPipe, {}, false}; }
  static StdioSpec Null() { return {Mode::kNull, {}, false}; }
  static StdioSpec File(std::string path, bool append = false) {
    return {Mode::kFile, std::move(path), append};
  }
  static StdioSpec MergeWithStdout() { return {Mode::kMergeWithStdout, {}, false}; }
};

struct SpawnOptions {
  // argv[0] is the program: a path containing '/' is used as is; a bare name is looked up in the
  // PATH of the child's environment (or "/usr/local/bin:/usr/bin:/bin" if it has none).
  std::vector<std::string> argv;
  // Variables for the child. With replace_env, the child gets exactly these; otherwise it gets
  // the parent's environment with these added or overriding.
  std::map<std::string, std::string> env;
  bool replace_env = false;
  // Working directory of the child; empty = the parent's.
  std::string cwd;
  StdioSpec stdin_spec;
  StdioSpec stdout_spec;
  StdioSpec stderr_spec;
  // Puts the child in a new process group (pgid = pid) so Signal() and the destructor's kill
  // reach its descendants too (jobs, notebooks).
  bool new_process_group = false;
};

struct ExitStatus {
  bool exited = false;  // normal exit: `code` is valid
  int code = 0;
  bool signaled = false;  // killed by a signal: `signal` is valid
  int signal = 0;

  bool success() const { return exited && code == 0; }
  // "exited with code 3", "killed by signal 15 (Terminated)".
  std::string ToString() const;
  friend bool operator==(const ExitStatus&, const ExitStatus&) = default;
};

// A started child process. Destroying a Subprocess whose child is still running sends SIGKILL
// (to the whole group with new_process_group) and reaps it, so no zombie is left.
class Subprocess {
 public:
  virtual ~Subprocess() = default;
  virtual pid_t pid() const = 0;
  // The parent's ends of the kPipe streams (invalid UniqueFd otherwise). Close stdin_fd() (Reset)
  // to send end of file. Moving an fd out is allowed.
  virtual UniqueFd& stdin_fd() = 0;
  virtual UniqueFd& stdout_fd() = 0;
  virtual UniqueFd& stderr_fd() = 0;
  // Sends `sig` to the child, or to its process group with new_process_group. Errors:
  // FailedPrecondition once the child has been reaped by Wait (its pid may have been reused);
  // for a group, NotFound when no process of the group is left.
  virtual Status Signal(int sig) = 0;
  // Waits for the child to end, up to `timeout_ms` (negative = forever, 0 = poll). Returns its
  // exit status (again on later calls). Errors: DeadlineExceeded when it is still running at the
  // deadline; the child is not killed.
  virtual Result<ExitStatus> Wait(int64_t timeout_ms = -1) = 0;
};

// What RunAndCapture collected.
struct CapturedRun {
  ExitStatus exit;
  std::string stdout_text;
  std::string stderr_text;
};

// --- Env ---

class Env {
 public:
  virtual ~Env() = default;

  // The real POSIX environment. A function-local static: it holds no state of its own (the OS is
  // the state), so this is a handle to the OS rather than a mutable global. Only `main` and tests
  // call it; everything else receives an Env&.
  static Env& Default();

  // Files.

  // The whole file. Errors: NotFound; ResourceExhausted if it is larger than `max_size_bytes`.
  virtual Result<std::string> ReadFile(const std::string& path,
                                       uint64_t max_size_bytes = kDefaultMaxReadFileBytes) = 0;
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                                WriteMode mode,
                                                                uint32_t permissions) = 0;
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path, WriteMode mode) {
    return NewWritableFile(path, mode, kDefaultFilePermissions);
  }
  virtual Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // Creates one directory (mode 0755). Errors: AlreadyExists if the path exists; NotFound if the
  // parent does not.
  virtual Status CreateDir(const std::string& path) = 0;
  // Creates the directory and its missing parents; OK if it already exists as a directory.
  // Errors: AlreadyExists if it (or a parent) exists as something other than a directory.
  virtual Status CreateDirs(const std::string& path) = 0;
  // Removes a file (or symlink). Errors: NotFound.
  virtual Status DeleteFile(const std::string& path) = 0;
  // Removes an empty directory. Errors: NotFound; FailedPrecondition if it is not empty.
  virtual Status DeleteDir(const std::string& path) = 0;
  // Removes a directory and everything under it, without following symlinks (a symlink to a
  // directory is unlinked, not descended). Errors: NotFound if `path` does not exist.
  virtual Status DeleteDirRecursive(const std::string& path) = 0;
  // rename(2): atomically replaces `to` if it exists. Both must be on one filesystem.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // fsync of a directory: makes creations, renames and deletions in it durable.
  virtual Status SyncDir(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual Result<uint64_t> GetFileSize(const std::string& path) = 0;
  // stat(2) (follows symlinks).
  virtual Result<FileStat> Stat(const std::string& path) = 0;
  // The names in a directory (not "." or ".."), sorted bytewise.
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;

  // Clock.

  // Wall-clock time (can step); for timestamps shown to people and stored.
  virtual int64_t NowUnixMicros() = 0;
  // Monotonic time with an arbitrary origin; for durations, timeouts and rates.
  virtual int64_t NowMonotonicMicros() = 0;
  virtual void SleepForMicros(int64_t micros) = 0;

  // Processes.

  // Starts a child. Errors: InvalidArgument for an empty argv; NotFound when the program does not
  // exist (or is not found on PATH) or `cwd` does not exist; PermissionDenied when it is not
  // executable; the failure of opening a stdio file. Failures inside the child before exec are
  // reported here, never as an exit code.
  virtual Result<std::unique_ptr<Subprocess>> Spawn(const SpawnOptions& options) = 0;

  // Helpers built on the primitives above (not virtual: fault injection applies through them).

  // See the durability contract in the header comment.
  // A created file gets `permissions` (0600 for secrets).
  Status WriteFileAtomically(const std::string& path, std::string_view data,
                             uint32_t permissions = kDefaultFilePermissions);
};

// Streams a new version of a file into place atomically (objects of many GB arrive in pieces):
//
//   SOVAI_ASSIGN_OR_RETURN(auto writer, AtomicFileWriter::Open(env, path));
//   SOVAI_RETURN_IF_ERROR(writer->Append(piece));   // as many times as needed
//   SOVAI_RETURN_IF_ERROR(writer->Commit());
//
// Commit syncs, closes, renames over `path` and syncs the directory. Destroying a writer that
// was not committed (or whose Commit failed before the rename) deletes the temporary file; `path`
// is untouched. After an error from Append, the writer is dead: further Appends and Commit fail
// with that error (and Commit deletes the temporary file).
//
// One case cannot restore the old content: when the final directory sync fails, the rename has
// already happened, so the new content is visible but may not survive a crash. Commit returns
// the error; treat the write as failed (retrying it is safe).
class AtomicFileWriter {
 public:
  // The file is created with `permissions` (0600 for secrets) before any byte is written.
  static Result<std::unique_ptr<AtomicFileWriter>> Open(
      Env& env, const std::string& path, uint32_t permissions = kDefaultFilePermissions);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  Status Append(std::string_view data);
  Status Commit();
  // Deletes the temporary file now (the destructor does it otherwise).
  void Abandon();

  uint64_t bytes_written() const { return bytes_written_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  AtomicFileWriter(Env& env, std::string path, std::string temp_path,
                   std::unique_ptr<WritableFile> file);
  Env& env_;
  std::string path_;
  std::string temp_path_;
  std::unique_ptr<WritableFile> file_;
  uint64_t bytes_written_ = 0;
  bool done_ = false;  // committed or abandoned
  Status failed_;      // first error; sticky
};

// Whether `name` (a file name, not a path) is an AtomicFileWriter temporary.
bool IsAtomicWriteTempName(std::string_view name);

// Directory part of `path` ("." when there is none) and the last component.
std::string DirName(std::string_view path);
std::string BaseName(std::string_view path);
// Joins with exactly one '/' between.
std::string JoinPath(std::string_view a, std::string_view b);

// Runs a child to completion, feeding it `stdin_data` and collecting stdout and stderr (each up
// to `max_output_bytes`; the rest is read and discarded, and the text ends with
// "...[truncated]"). The options' stdio specs are overridden with pipes. Errors: those of Spawn;
// DeadlineExceeded after `timeout_ms` (negative = none), in which case the child (group) is
// killed before returning. A nonzero exit is not an error: look at `exit`.
Result<CapturedRun> RunAndCapture(Env& env, SpawnOptions options, std::string_view stdin_data = "",
                                  int64_t timeout_ms = -1,
                                  size_t max_output_bytes = kDefaultMaxCapturedOutputBytes);

// Forwards every call to another Env; subclass it and override what a test needs.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env& target) : target_(target) {}
  Env& target() const { return target_; }

  Result<std::string> ReadFile(const std::string& path, uint64_t max_size_bytes) override {
    return target_.ReadFile(path, max_size_bytes);
  }
  using Env::NewWritableFile;
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path, WriteMode mode,
                                                        uint32_t permissions) override {
    return target_.NewWritableFile(path, mode, permissions);
  }
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override {
    return target_.NewRandomAccessFile(path);
  }
  Status CreateDir(const std::string& path) override { return target_.CreateDir(path); }
  Status CreateDirs(const std::string& path) override { return target_.CreateDirs(path); }
  Status DeleteFile(const std::string& path) override { return target_.DeleteFile(path); }
  Status DeleteDir(const std::string& path) override { return target_.DeleteDir(path); }
  Status DeleteDirRecursive(const std::string& path) override {
    return target_.DeleteDirRecursive(path);
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return target_.RenameFile(from, to);
  }
  Status SyncDir(const std::string& path) override { return target_.SyncDir(path); }
  bool FileExists(const std::string& path) override { return target_.FileExists(path); }
  Result<uint64_t> GetFileSize(const std::string& path) override {
    return target_.GetFileSize(path);
  }
  Result<FileStat> Stat(const std::string& path) override { return target_.Stat(path); }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    return target_.ListDir(path);
  }
  int64_t NowUnixMicros() override { return target_.NowUnixMicros(); }
  int64_t NowMonotonicMicros() override { return target_.NowMonotonicMicros(); }
  void SleepForMicros(int64_t micros) override { target_.SleepForMicros(micros); }
  Result<std::unique_ptr<Subprocess>> Spawn(const SpawnOptions& options) override {
    return target_.Spawn(options);
  }

 private:
  Env& target_;
};

// A settable clock for tests. Thread-safe.
class ManualClock {
 public:
  explicit ManualClock(int64_t unix_micros = 1'700'000'000'000'000, int64_t monotonic_micros = 0)
      : unix_micros_(unix_micros), monotonic_micros_(monotonic_micros) {}
  int64_t NowUnixMicros() const;
  int64_t NowMonotonicMicros() const;
  // Moves both clocks forward (`micros` >= 0).
  void Advance(int64_t micros);
  // Sets the wall clock only (it may step backwards, like a real one).
  void SetUnixMicros(int64_t unix_micros);

 private:
  mutable std::mutex mu_;  // guards both times
  int64_t unix_micros_;
  int64_t monotonic_micros_;
};

// An Env whose clock is a ManualClock; SleepForMicros advances it instantly. Everything else goes
// to the target. `clock` must outlive this Env.
class ManualClockEnv : public EnvWrapper {
 public:
  ManualClockEnv(Env& target, ManualClock& clock) : EnvWrapper(target), clock_(clock) {}
  int64_t NowUnixMicros() override { return clock_.NowUnixMicros(); }
  int64_t NowMonotonicMicros() override { return clock_.NowMonotonicMicros(); }
  void SleepForMicros(int64_t micros) override { clock_.Advance(micros); }

 private:
  ManualClock& clock_;
};

// An Env that fails chosen operations, for crash and error-path tests. Thread-safe.
//
//   FaultInjectionEnv env(Env::Default());
//   env.FailNth(FaultOp::kSync, 1);      // the next Sync fails
//   EXPECT_FALSE(env.WriteFileAtomically(path, "new").ok());   // old content intact
//
// An injected Append failure first writes half of the data (as a full disk would), so tests see
// a partial temporary file being cleaned up.
enum class FaultOp : uint8_t {
  kOpenWritable,  // NewWritableFile
  kAppend,        // WritableFile::Append
  kSync,          // WritableFile::Sync
  kClose,         // WritableFile::Close
  kRename,        // RenameFile
  kSyncDir,       // SyncDir
  kDelete,        // DeleteFile, DeleteDir, DeleteDirRecursive
  kRead,          // ReadFile, NewRandomAccessFile
  kSpawn,         // Spawn
};
inline constexpr int kFaultOpCount = 9;

class FaultInjectionEnv : public EnvWrapper {
 public:
  explicit FaultInjectionEnv(Env& target) : EnvWrapper(target) {}

  // The `n`th call of `op` from now (1 = the next) fails with `error`; later calls succeed.
  void FailNth(FaultOp op, int n, Status error = InternalError("injected fault"));
  // Every call of `op` fails with `error` until ClearFaults.
  void FailAlways(FaultOp op, Status error = InternalError("injected fault"));
  void ClearFaults();
  // How many times `op` was attempted since construction.
  int Count(FaultOp op) const;

  Result<std::string> ReadFile(const std::string& path, uint64_t max_size_bytes) override;
  using Env::NewWritableFile;
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path, WriteMode mode,
                                                        uint32_t permissions) override;
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override;
  Status DeleteFile(const std::string& path) override;
  Status DeleteDir(const std::string& path) override;
  Status DeleteDirRecursive(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& path) override;
  Result<std::unique_ptr<Subprocess>> Spawn(const SpawnOptions& options) override;

  // Counts a call of `op` and returns the injected error for it, or OK. Public so that wrapped
  // files can use it.
  Status MaybeFail(FaultOp op);

 private:
  struct Rule {
    int countdown = 0;  // > 0: fail when it reaches 0
    bool always = false;
    Status error;
  };
  mutable std::mutex mu_;  // guards rules_ and counts_
  Rule rules_[kFaultOpCount];
  int counts_[kFaultOpCount] = {};
};

}  // namespace sovai::base
