// The local executor's sandbox: runs one workload (a job, a notebook kernel, an app replica) under
// bubblewrap (bwrap), with its output captured into a job log (log_capture.h).
//
// What the workload gets:
//   * its own PID namespace (it sees only its own processes; bwrap's reaper is pid 1), IPC, UTS and
//     cgroup namespaces, and, with network_none, a network namespace holding only `lo`;
//   * a user namespace in which it runs as spec.uid:spec.gid (65534, "nobody", by default), with no
//     capabilities. When the platform runs as root, bwrap itself is started as spec.uid:spec.gid,
//     so the host also sees the workload as that unprivileged user: it cannot read root-only
//     files, and the files it writes to volumes belong to spec.uid. Writable mounts and the
//     directories above every bind source must therefore be writable / traversable by spec.uid
//     (Launch checks this and says which directory is wrong). When the platform runs as another
//     user (or as the root of a user namespace that has no spec.uid, i.e. a rootless container),
//     the workload is that user on the host, as with any rootless container;
//   * a root of its own, read-only: with spec.rootfs empty, the host's system directories
//     (SandboxOptions::host_root_dirs: /usr, /bin, /sbin, /lib*, /etc; symlinks kept as symlinks);
//     otherwise the top-level entries of spec.rootfs. Nothing else of the host is visible: not the
//     data directory, not /home, /root, /srv or the host's /tmp. A SandboxOptions::hidden_paths
//     entry that lies inside a visible system directory is covered with an empty tmpfs;
//   * a fresh /proc, a minimal /dev (null, zero, full, random, urandom, tty, shm, pts), plus the
//     NVIDIA device nodes when it was given GPUs, and a private writable /tmp (a bind of
//     <work_dir>/tmp, on disk, not in RAM); HOME=/tmp;
//   * the volume mounts at their paths, read-only unless mount.read_only is false;
//   * CPU affinity to spec.cpus, set with sched_setaffinity before bwrap starts;
//   * a memory limit: RLIMIT_AS (address space) of spec.memory_bytes on every process of the
//     sandbox, set with setrlimit before bwrap starts. It is per process, not a total, and counts
//     virtual memory: an allocation beyond it fails (malloc returns NULL, Python raises
//     MemoryError) rather than the process being OOM-killed. CUDA reserves very large virtual
//     ranges, so GPU workloads need memory_bytes 0 (no limit) or a generous value. A cgroup v2
//     memory.max (a total, counting the page cache) would be better and needs a delegated
//     writable cgroup v2 subtree with the memory controller; this host has cgroup v1 (memory
//     controller on the v1 hierarchy), so it is not implemented yet;
//   * CUDA_VISIBLE_DEVICES=<spec.gpus joined with ','> ("" for none) and CUDA_DEVICE_ORDER=
//     PCI_BUS_ID, so CUDA numbers GPUs as nvidia-smi does (GpuInfo::index). This pins GPUs by
//     convention: the device nodes of all GPUs are visible once a workload has any;
//   * an environment holding only PATH, HOME, the CUDA variables and spec.env (which may override
//     PATH and HOME), plus PWD, which bwrap sets. It travels in bwrap's environment, never on its
//     command line, so secrets in spec.env do not show in `ps`;
//   * its own session (--new-session: no access to a controlling terminal), and death with the
//     platform (--die-with-parent: bwrap and everything inside get SIGKILL when the thread that
//     called Launch exits, so call Launch from a thread that lives as long as the server).
//
// Exit status: bwrap reports the workload's status as a shell does: a workload killed by signal N
// ends bwrap with code 128+N, which Wait decodes as "killed by signal N". A workload that itself
// exits with a code in 129..192 is therefore reported as killed by a signal. When the workload's
// main process (argv) exits, the sandbox ends: its remaining background processes are killed with
// it, as the kernel does for any PID namespace whose init exits. bwrap exits without reaping the
// sandbox's pid 1 in that case, so that zombie is reaped by the host's init: run the server under
// one that reaps orphans (systemd, tini, docker --init), as any process supervisor should.
//
// Errors are Statuses whose message says what is wrong and what to do. Thread-safety: Sandbox is
// thread-safe (Launch may be called concurrently). RunningWorkload: Wait, TryWait and Stop may be
// called from different threads.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "exec/limits.h"
#include "exec/log_capture.h"

namespace sovai::exec {

struct Mount {
  std::string host_path;     // absolute; a directory or a file
  std::string sandbox_path;  // absolute; not /, /tmp itself, nor under /proc, /dev or /sys
  bool read_only = true;
};

struct SandboxSpec {
  std::vector<std::string> argv;  // argv[0] is looked up on the sandbox's PATH
  std::vector<std::pair<std::string, std::string>> env;  // added to PATH, HOME, CUDA_*
  std::string cwd;                                       // in the sandbox; empty: /tmp
  std::string rootfs;  // absolute host directory shown as / (read-only); empty: the host's root
  std::vector<Mount> mounts;
  bool network_none = true;   // own network namespace with only loopback; false: the host's network
  std::vector<int> cpus;      // CPU affinity (ids from HostResources::cpu_ids); empty: unchanged
  uint64_t memory_bytes = 0;  // RLIMIT_AS per process (see above); 0: no limit
  std::vector<int> gpus;      // GpuInfo::index values -> CUDA_VISIBLE_DEVICES; empty: ""
  std::string log_path;       // the job log (appended to; created if needed)
  std::string work_dir;       // absolute host directory for the sandbox's private files (/tmp)
  uint32_t uid = 65534;       // inside the sandbox, and on the host when the platform is root
  uint32_t gid = 65534;
  // For a sandbox inside a Slurm step, whose stop signals reach every process of the step:
  // bwrap and its reaper ignore SIGTERM, SIGINT and SIGHUP, so that they outlive the signal and
  // the workload can end on its own terms (its trap, its checkpoint) until SIGKILL. The workload
  // inherits the ignored dispositions: argv must restore them (`env --default-signal=...`).
  bool shield_from_step_signals = false;
};

// One top-level entry of the sandbox's root.
struct RootEntry {
  std::string name;            // "usr"
  std::string symlink_target;  // non-empty: recreated as this symlink ("usr/bin"); else bound ro
  friend bool operator==(const RootEntry&, const RootEntry&) = default;
};

// Facts about the host that BuildBwrapArgv needs; Launch gathers them.
struct BwrapOptions {
  std::string bwrap_path = "/usr/bin/bwrap";
  // Top-level entries of the root: of "/" when spec.rootfs is empty, else of spec.rootfs.
  std::vector<RootEntry> root_entries;
  // Absolute, canonical host paths the sandbox must not see (the data directory). A mount or the
  // work dir that contains one is an error; one inside a visible root entry is covered by a tmpfs.
  std::vector<std::string> hidden_paths;
  // Host device nodes bound into /dev when the spec has GPUs (/dev/nvidia0, /dev/nvidiactl, ...).
  std::vector<std::string> gpu_devices;
  // When >= 0, bwrap writes its JSON status (sandbox pid 1, exit code) to this fd.
  int status_fd = -1;
};

// The bwrap command line for `spec`, without touching the system. Errors: InvalidArgument naming
// the offending field: empty argv; a relative path, one with "." / ".." / empty components or a
// NUL byte, or longer than kMaxSandboxPathBytes; a mount at /, /tmp, under /proc, /dev or /sys,
// under a host system directory (with an empty rootfs), or twice at one path; a mount or the
// work dir containing a hidden path; an environment name that is empty, holds '=' or is
// CUDA_VISIBLE_DEVICES (use gpus); a duplicate environment name; a negative or duplicate CPU or
// GPU; uid or gid 0; more than kMaxSandboxMounts / kMaxSandboxEnvEntries / kMaxSandboxGpus, or a
// command over kMaxSandboxCommandBytes.
base::Result<std::vector<std::string>> BuildBwrapArgv(const SandboxSpec& spec,
                                                      const BwrapOptions& options);

// The workload's environment ("NAME=value" entries): PATH, HOME, CUDA_DEVICE_ORDER and
// CUDA_VISIBLE_DEVICES, then spec.env (overriding PATH, HOME or CUDA_DEVICE_ORDER in place).
// Errors: as BuildBwrapArgv for the environment.
base::Result<std::vector<std::string>> BuildSandboxEnv(const SandboxSpec& spec);

// A workload started by Sandbox::Launch. Destroying it while the workload runs kills the whole
// sandbox (SIGKILL) and reaps it; the log is complete when the destructor returns.
class RunningWorkload {
 public:
  ~RunningWorkload();
  RunningWorkload(const RunningWorkload&) = delete;
  RunningWorkload& operator=(const RunningWorkload&) = delete;

  // bwrap's pid (the host's PID namespace).
  pid_t pid() const { return bwrap_pid_; }
  // The host pid of the sandbox's pid 1 (bwrap's reaper inside the PID namespace).
  pid_t sandbox_init_pid() const { return init_pid_; }

  // Blocks until the workload has ended (every process of the sandbox has exited) and its
  // output is in the log. Returns its exit status
  // (again on later calls). Errors: FailedPrecondition when the sandbox could not be set up or
  // the command could not be executed, quoting bwrap (e.g. "bwrap: execvp train: No such file or
  // directory"); Internal for a failed waitpid.
  base::Result<base::ExitStatus> Wait();
  // As Wait, without blocking: std::nullopt while the workload runs.
  base::Result<std::optional<base::ExitStatus>> TryWait();

  // Stops the workload: SIGTERM to every process in the sandbox, then up to `grace` for it to
  // end, then SIGKILL of the sandbox's pid 1, which makes the kernel kill every process of the
  // PID namespace. Returns the final status as Wait does (a workload that handled SIGTERM and
  // exited reports its own exit code; a killed one reports signal 9). When Stop returns, no
  // process of the sandbox is left. Calling it after the end just returns the status.
  base::Result<base::ExitStatus> Stop(std::chrono::milliseconds grace);

  // Host pids of the processes now running in the sandbox's PID namespace (pid 1 included,
  // zombies not), ascending. Empty once the sandbox has ended.
  base::Result<std::vector<pid_t>> ProcessIds() const;

  // The job log's writer, for the platform's own records while the workload runs.
  LogWriter& log() { return *log_writer_; }

 private:
  friend class Sandbox;
  RunningWorkload() = default;

  base::Result<bool> TryReap();                                // true once bwrap has been reaped
  base::Result<base::ExitStatus> WaitFor(int64_t timeout_ms);  // DeadlineExceeded on timeout
  base::Result<base::ExitStatus> Finalize();  // after the reap: log, status stream, decoding
  void SignalSandbox(int sig) const;          // every process but pid 1
  void KillSandbox();                         // SIGKILL to pid 1: the namespace ends

  pid_t bwrap_pid_ = -1;
  pid_t init_pid_ = -1;
  uint64_t pid_namespace_inode_ = 0;
  base::UniqueFd bwrap_pidfd_;  // may be invalid (old kernel): then waits poll
  base::UniqueFd init_pidfd_;
  std::shared_ptr<LogWriter> log_writer_;
  std::unique_ptr<LogCapture> capture_;

  mutable std::mutex
      mu_;  // guards reaped_, wait_status_, killed_, stopped_; serializes waitpid/kill
  bool reaped_ = false;
  int wait_status_ = 0;  // from waitpid, once reaped_
  bool killed_ = false;  // Stop or the destructor sent SIGKILL
  // Stop sent SIGTERM: a sandbox that ends without running its command was stopped while bwrap
  // set it up, which is the stop's doing, not a setup failure.
  bool stopped_ = false;

  std::mutex finalize_mu_;    // guards the three below (held while the log drains)
  base::UniqueFd status_fd_;  // read end of bwrap's --json-status-fd
  std::string status_text_;   // what bwrap wrote there so far
  std::optional<base::Result<base::ExitStatus>> result_;  // set by Finalize
};

struct SandboxOptions {
  // The bwrap program: a bare name is looked up on PATH.
  std::string bwrap_path = "bwrap";
  // Top-level host directories shown read-only when a spec has no rootfs (missing ones skipped).
  // Deliberately not /opt, /srv, /home, /var or /run: a data directory tends to live there.
  std::vector<std::string> host_root_dirs = {"usr",   "bin",   "sbin",   "lib",
                                             "lib32", "lib64", "libx32", "etc"};
  // Host paths no workload may see, whatever its spec says (the data directory).
  std::vector<std::string> hidden_paths;
  LogCaptureOptions log_capture;
  int64_t start_timeout_ms = kSandboxStartTimeoutMs;
};

// Creates `path` (its parent must exist) or keeps it, and sets exactly `mode`: the umask must
// not narrow it, since the workload's uid traverses the directories above its mounts.
base::Status MakeDir(const std::string& path, mode_t mode);
// Gives `uid:gid` every file and directory under `dir` (the platform runs as root; the workload
// does not). Symlinks are changed themselves, never followed.
base::Status ChownTree(const std::string& dir, uint32_t uid, uint32_t gid);

class Sandbox {
 public:
  // Finds bwrap and checks that it can build a sandbox here by running `true` in one (under a
  // temporary directory of $TMPDIR or /tmp). Errors: NotFound when bwrap is not installed;
  // FailedPrecondition when it cannot create the namespaces, quoting bwrap and naming what to
  // enable (unprivileged user namespaces). `env` must outlive the Sandbox.
  static base::Result<std::unique_ptr<Sandbox>> Create(base::Env& env, SandboxOptions options);

  // Starts `spec` and returns once the sandbox's namespaces exist (its output already flows to
  // spec.log_path). Creates <work_dir>/tmp; with a rootfs, creates missing mount points inside
  // it (never following its symlinks). Errors: those of BuildBwrapArgv; NotFound for a missing
  // rootfs, mount source or log directory; InvalidArgument for a CPU outside this process's
  // affinity; FailedPrecondition when, the platform being root, spec.uid cannot reach a bind
  // source or write a writable mount; DeadlineExceeded when bwrap does not start the sandbox
  // within SandboxOptions::start_timeout_ms; Internal for failed system calls. A command that
  // does not exist in the sandbox is reported by Wait, not here.
  base::Result<std::unique_ptr<RunningWorkload>> Launch(const SandboxSpec& spec);

  const std::string& bwrap_path() const { return bwrap_path_; }

 private:
  Sandbox(base::Env& env, SandboxOptions options, std::string bwrap_path)
      : env_(env), options_(std::move(options)), bwrap_path_(std::move(bwrap_path)) {}

  base::Env& env_;
  const SandboxOptions options_;
  const std::string bwrap_path_;
};

}  // namespace sovai::exec
