// BuildBwrapArgv / BuildSandboxEnv unit tests, and SandboxIntegrationTest.*: real bwrap sandboxes
// (ctest label "integration"; they skip, saying what is missing, where bwrap cannot run).
#include "exec/sandbox.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

#include "base/strings.h"
#include "exec/sandbox_test_util.h"

namespace sovai::exec {
namespace {

using base::StatusCode;
using Args = std::vector<std::string>;

// --- BuildBwrapArgv ---

SandboxSpec BaseSpec() {
  SandboxSpec spec;
  spec.argv = {"python3", "train.py"};
  spec.work_dir = "/data/jobs/j1/work";
  spec.log_path = "/data/jobs/j1/log";
  return spec;
}

BwrapOptions BaseOptions() {
  BwrapOptions options;
  options.bwrap_path = "/usr/bin/bwrap";
  options.root_entries = {{"usr", ""}, {"bin", "usr/bin"}, {"etc", ""}};
  options.status_fd = 3;
  return options;
}

const Args kPrologue = {
    "/usr/bin/bwrap", "--unshare-user", "--uid",         "65534",         "--gid",
    "65534",          "--unshare-pid",  "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"};

Args Concat(std::initializer_list<Args> parts) {
  Args out;
  for (const Args& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

TEST(BuildBwrapArgvTest, HostRootArgumentByArgument) {
  auto argv = BuildBwrapArgv(BaseSpec(), BaseOptions());
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_EQ(*argv, Concat({kPrologue,
                           {"--unshare-net",
                            "--die-with-parent",
                            "--new-session",  //
                            "--ro-bind",
                            "/usr",
                            "/usr",  //
                            "--symlink",
                            "usr/bin",
                            "/bin",  //
                            "--ro-bind",
                            "/etc",
                            "/etc",  //
                            "--proc",
                            "/proc",
                            "--dev",
                            "/dev",  //
                            "--bind",
                            "/data/jobs/j1/work/tmp",
                            "/tmp",  //
                            "--remount-ro",
                            "/",
                            "--chdir",
                            "/tmp",  //
                            "--json-status-fd",
                            "3",
                            "--",
                            "python3",
                            "train.py"}}));
}

TEST(BuildBwrapArgvTest, SharedNetworkCwdUidAndNoStatusFd) {
  SandboxSpec spec = BaseSpec();
  spec.network_none = false;
  spec.cwd = "/workspace";
  spec.uid = 1000;
  spec.gid = 100;
  BwrapOptions options = BaseOptions();
  options.root_entries.clear();
  options.status_fd = -1;
  EXPECT_EQ(*BuildBwrapArgv(spec, options), (Args{"/usr/bin/bwrap",
                                                  "--unshare-user",
                                                  "--uid",
                                                  "1000",
                                                  "--gid",
                                                  "100",
                                                  "--unshare-pid",
                                                  "--unshare-ipc",
                                                  "--unshare-uts",
                                                  "--unshare-cgroup-try",
                                                  "--die-with-parent",
                                                  "--new-session",
                                                  "--proc",
                                                  "/proc",
                                                  "--dev",
                                                  "/dev",
                                                  "--bind",
                                                  "/data/jobs/j1/work/tmp",
                                                  "/tmp",
                                                  "--remount-ro",
                                                  "/",
                                                  "--chdir",
                                                  "/workspace",
                                                  "--",
                                                  "python3",
                                                  "train.py"}));
}

TEST(BuildBwrapArgvTest, MountsAreSortedParentsFirstAndKeepTheirMode) {
  SandboxSpec spec = BaseSpec();
  spec.mounts = {{"/data/v/out", "/workspace/out", false},
                 {"/data/v/ws", "/workspace", true},
                 {"/data/v/cfg.json", "/tmp/cfg.json", true}};
  BwrapOptions options = BaseOptions();
  options.root_entries.clear();
  options.status_fd = -1;
  Args argv = *BuildBwrapArgv(spec, options);
  auto at = std::find(argv.begin(), argv.end(), "/data/jobs/j1/work/tmp");
  ASSERT_NE(at, argv.end());
  EXPECT_EQ(Args(at + 2, at + 11), (Args{"--ro-bind", "/data/v/cfg.json", "/tmp/cfg.json",  //
                                         "--ro-bind", "/data/v/ws", "/workspace",           //
                                         "--bind", "/data/v/out", "/workspace/out"}));
}

TEST(BuildBwrapArgvTest, RootfsEntriesComeFromTheImage) {
  SandboxSpec spec = BaseSpec();
  spec.rootfs = "/data/images/abc/rootfs";
  spec.mounts = {{"/data/v", "/usr/share/data", true}};  // inside the image: allowed
  BwrapOptions options = BaseOptions();
  options.root_entries = {{"usr", ""}, {"lib", "usr/lib"}, {"proc", ""}, {"tmp", ""}, {"etc", ""}};
  options.status_fd = -1;
  Args argv = *BuildBwrapArgv(spec, options);
  Args expected = Concat({kPrologue,
                          {"--unshare-net",
                           "--die-with-parent",
                           "--new-session",  //
                           "--ro-bind",
                           "/data/images/abc/rootfs/usr",
                           "/usr",  //
                           "--symlink",
                           "usr/lib",
                           "/lib",  //
                           "--ro-bind",
                           "/data/images/abc/rootfs/etc",
                           "/etc",  //
                           "--proc",
                           "/proc",
                           "--dev",
                           "/dev",  //
                           "--bind",
                           "/data/jobs/j1/work/tmp",
                           "/tmp",  //
                           "--ro-bind",
                           "/data/v",
                           "/usr/share/data",  //
                           "--remount-ro",
                           "/",
                           "--chdir",
                           "/tmp",
                           "--",
                           "python3",
                           "train.py"}});
  EXPECT_EQ(argv, expected);
}

TEST(BuildBwrapArgvTest, GpuDevicesOnlyWithGpus) {
  SandboxSpec spec = BaseSpec();
  BwrapOptions options = BaseOptions();
  options.gpu_devices = {"/dev/nvidia0", "/dev/nvidiactl"};
  Args without = *BuildBwrapArgv(spec, options);
  EXPECT_EQ(std::count(without.begin(), without.end(), "--dev-bind-try"), 0);
  spec.gpus = {0};
  Args with = *BuildBwrapArgv(spec, options);
  auto at = std::find(with.begin(), with.end(), "--dev-bind-try");
  ASSERT_NE(at, with.end());
  EXPECT_EQ(*(at - 1), "/dev");  // right after --dev /dev
  EXPECT_EQ(Args(at, at + 6), (Args{"--dev-bind-try", "/dev/nvidia0", "/dev/nvidia0",
                                    "--dev-bind-try", "/dev/nvidiactl", "/dev/nvidiactl"}));
}

TEST(BuildBwrapArgvTest, HiddenPathsInsideSystemDirsAreCovered) {
  SandboxSpec spec = BaseSpec();
  BwrapOptions options = BaseOptions();
  options.hidden_paths = {"/etc/sovai", "/srv/sovai-data"};
  Args argv = *BuildBwrapArgv(spec, options);
  auto at = std::find(argv.begin(), argv.end(), "--tmpfs");
  ASSERT_NE(at, argv.end());
  EXPECT_EQ(*(at + 1), "/etc/sovai");
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--tmpfs"), 1);  // /srv is not visible at all
  // Inside a rootfs entry too.
  spec.rootfs = "/img";
  options.root_entries = {{"opt", ""}};
  options.hidden_paths = {"/img/opt/secrets"};
  argv = *BuildBwrapArgv(spec, options);
  at = std::find(argv.begin(), argv.end(), "--tmpfs");
  ASSERT_NE(at, argv.end());
  EXPECT_EQ(*(at + 1), "/opt/secrets");
}

TEST(BuildBwrapArgvTest, EnvironmentIsNotOnTheCommandLine) {
  SandboxSpec spec = BaseSpec();
  spec.env = {{"HF_TOKEN", "hf_secret"}};
  Args argv = *BuildBwrapArgv(spec, BaseOptions());
  for (const std::string& arg : argv) EXPECT_EQ(arg.find("hf_secret"), std::string::npos);
}

struct BadSpecCase {
  const char* name;
  std::function<void(SandboxSpec&, BwrapOptions&)> mutate;
  const char* message_part;
};

TEST(BuildBwrapArgvTest, RejectsBadSpecs) {
  const std::vector<BadSpecCase> cases = {
      {"empty argv", [](SandboxSpec& s, BwrapOptions&) { s.argv.clear(); }, "argv is empty"},
      {"empty program", [](SandboxSpec& s, BwrapOptions&) { s.argv = {""}; }, "argv is empty"},
      {"root uid", [](SandboxSpec& s, BwrapOptions&) { s.uid = 0; }, "unprivileged"},
      {"root gid", [](SandboxSpec& s, BwrapOptions&) { s.gid = 0; }, "unprivileged"},
      {"no work dir", [](SandboxSpec& s, BwrapOptions&) { s.work_dir.clear(); }, "work_dir"},
      {"relative work dir", [](SandboxSpec& s, BwrapOptions&) { s.work_dir = "work"; }, "absolute"},
      {"work dir /", [](SandboxSpec& s, BwrapOptions&) { s.work_dir = "/"; }, "work_dir"},
      {"dotdot in work dir", [](SandboxSpec& s, BwrapOptions&) { s.work_dir = "/data/../etc"; },
       "'..'"},
      {"dot in cwd", [](SandboxSpec& s, BwrapOptions&) { s.cwd = "/a/./b"; }, "'.'"},
      {"relative cwd", [](SandboxSpec& s, BwrapOptions&) { s.cwd = "workspace"; }, "absolute"},
      {"double slash", [](SandboxSpec& s, BwrapOptions&) { s.cwd = "/a//b"; }, "empty component"},
      {"trailing slash", [](SandboxSpec& s, BwrapOptions&) { s.cwd = "/a/"; }, "empty component"},
      {"NUL in path", [](SandboxSpec& s, BwrapOptions&) { s.cwd = std::string("/a\0b", 4); },
       "NUL"},
      {"long path",
       [](SandboxSpec& s, BwrapOptions&) { s.cwd = "/" + std::string(kMaxSandboxPathBytes, 'a'); },
       "longer than"},
      {"relative rootfs", [](SandboxSpec& s, BwrapOptions&) { s.rootfs = "img"; }, "absolute"},
      {"rootfs /", [](SandboxSpec& s, BwrapOptions&) { s.rootfs = "/"; }, "rootfs"},
      {"relative mount source",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"data", "/workspace", true}};
       },
       "absolute"},
      {"dotdot mount source",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"/data/../root", "/w", true}};
       },
       "'..'"},
      {"relative mount target",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"/data", "workspace", true}};
       },
       "absolute"},
      {"dotdot mount target",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"/data", "/w/../proc/x", true}};
       },
       "'..'"},
      {"mount over /",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"/data", "/", true}};
       },
       "root"},
      {"mount over /tmp",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"/data", "/tmp", true}};
       },
       "/tmp"},
      {"mount over /proc",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"/data", "/proc", true}};
       },
       "/proc"},
      {"mount under /proc",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"/data", "/proc/self", true}};
       },
       "/proc"},
      {"mount under /dev",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"/data", "/dev/shm", false}};
       },
       "/dev"},
      {"mount under /sys",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"/data", "/sys/fs", true}};
       },
       "/sys"},
      {"mount in host /usr",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"/data", "/usr/share/x", true}};
       },
       "read-only system directory"},
      {"mount through a symlink",
       [](SandboxSpec& s, BwrapOptions&) {
         s.rootfs = "/img";
         s.mounts = {{"/data", "/bin/x", true}};
       },
       "symlink"},
      {"two mounts at one path",
       [](SandboxSpec& s, BwrapOptions&) {
         s.mounts = {{"/a", "/workspace", true}, {"/b", "/workspace", false}};
       },
       "two mounts"},
      {"mount exposing a hidden path",
       [](SandboxSpec& s, BwrapOptions& o) {
         o.hidden_paths = {"/srv/sovai-data"};
         s.mounts = {{"/srv", "/workspace", true}};
       },
       "would expose"},
      {"mount of the hidden path itself",
       [](SandboxSpec& s, BwrapOptions& o) {
         o.hidden_paths = {"/srv/sovai-data"};
         s.mounts = {{"/srv/sovai-data", "/workspace", true}};
       },
       "would expose"},
      {"work dir exposing a hidden path",
       [](SandboxSpec& s, BwrapOptions& o) {
         o.hidden_paths = {"/srv/tmp/x"};
         s.work_dir = "/srv";
       },
       "would expose"},
      {"rootfs is hidden",
       [](SandboxSpec& s, BwrapOptions& o) {
         o.hidden_paths = {"/img"};
         s.rootfs = "/img";
       },
       "no workload may see"},
      {"too many mounts",
       [](SandboxSpec& s, BwrapOptions&) {
         for (size_t i = 0; i <= kMaxSandboxMounts; ++i) {
           s.mounts.push_back({"/data", "/m" + std::to_string(i), true});
         }
       },
       "mounts per workload"},
      {"negative cpu",
       [](SandboxSpec& s, BwrapOptions&) {
         s.cpus = {0, -1};
       },
       "out of range"},
      {"huge cpu", [](SandboxSpec& s, BwrapOptions&) { s.cpus = {kMaxCpus}; }, "out of range"},
      {"duplicate cpu",
       [](SandboxSpec& s, BwrapOptions&) {
         s.cpus = {1, 1};
       },
       "twice"},
      {"negative gpu", [](SandboxSpec& s, BwrapOptions&) { s.gpus = {-2}; }, "out of range"},
      {"duplicate gpu",
       [](SandboxSpec& s, BwrapOptions&) {
         s.gpus = {0, 0};
       },
       "twice"},
      {"tiny memory", [](SandboxSpec& s, BwrapOptions&) { s.memory_bytes = 4096; }, "minimum"},
      {"empty env name",
       [](SandboxSpec& s, BwrapOptions&) {
         s.env = {{"", "x"}};
       },
       "env name"},
      {"env name with =",
       [](SandboxSpec& s, BwrapOptions&) {
         s.env = {{"A=B", "x"}};
       },
       "env name"},
      {"env CUDA_VISIBLE_DEVICES",
       [](SandboxSpec& s, BwrapOptions&) {
         s.env = {{"CUDA_VISIBLE_DEVICES", "0"}};
       },
       "set gpus instead"},
      {"duplicate env",
       [](SandboxSpec& s, BwrapOptions&) {
         s.env = {{"A", "1"}, {"A", "2"}};
       },
       "twice"},
      {"NUL in env value",
       [](SandboxSpec& s, BwrapOptions&) {
         s.env = {{"A", std::string("1\0", 2)}};
       },
       "NUL"},
      {"NUL in argv",
       [](SandboxSpec& s, BwrapOptions&) {
         s.argv = {"sh", std::string("-c\0", 3)};
       },
       "NUL"},
      {"huge command",
       [](SandboxSpec& s, BwrapOptions&) {
         s.argv.push_back(std::string(kMaxSandboxCommandBytes, 'x'));
       },
       "bytes"},
      {"bad root entry",
       [](SandboxSpec&, BwrapOptions& o) {
         o.root_entries = {{"a/b", ""}};
       },
       "root entry"},
      {"device outside /dev",
       [](SandboxSpec& s, BwrapOptions& o) {
         s.gpus = {0};
         o.gpu_devices = {"/etc/passwd"};
       },
       "not under /dev"},
  };
  for (const BadSpecCase& c : cases) {
    SandboxSpec spec = BaseSpec();
    BwrapOptions options = BaseOptions();
    c.mutate(spec, options);
    auto argv = BuildBwrapArgv(spec, options);
    ASSERT_FALSE(argv.ok()) << c.name;
    EXPECT_EQ(argv.status().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(argv.status().message().find(c.message_part), std::string::npos)
        << c.name << ": " << argv.status();
  }
}

// --- BuildSandboxEnv ---

TEST(BuildSandboxEnvTest, DefaultsThenTheSpec) {
  SandboxSpec spec = BaseSpec();
  EXPECT_EQ(*BuildSandboxEnv(spec),
            (Args{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp",
                  "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES="}));
  spec.gpus = {2, 0};
  spec.env = {{"HOME", "/workspace"}, {"LANG", "C.UTF-8"}, {"PATH", "/opt/bin"}};
  EXPECT_EQ(*BuildSandboxEnv(spec),
            (Args{"PATH=/opt/bin", "HOME=/workspace", "CUDA_DEVICE_ORDER=PCI_BUS_ID",
                  "CUDA_VISIBLE_DEVICES=2,0", "LANG=C.UTF-8"}));
}

// --- Integration: real bwrap ---

class SandboxIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/sovai_sbx_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    // The sandbox user (65534 on the host when tests run as root) must reach the work dirs.
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
    data_dir_ = Path("data");
    ASSERT_TRUE(env_.CreateDirs(data_dir_).ok());
    SandboxOptions options;
    options.hidden_paths = {data_dir_};
    auto sandbox = Sandbox::Create(env_, options);
    if (std::string skip = testing::SandboxSkipReason(sandbox.status()); !skip.empty()) {
      GTEST_SKIP() << skip;
    }
    ASSERT_TRUE(sandbox.ok()) << sandbox.status();
    sandbox_ = std::move(*sandbox);
  }
  void TearDown() override { ASSERT_TRUE(env_.DeleteDirRecursive(dir_).ok()); }

  std::string Path(std::string_view name) const { return base::JoinPath(dir_, name); }

  SandboxSpec Spec(std::vector<std::string> argv, std::string_view name = "job") {
    SandboxSpec spec;
    spec.argv = std::move(argv);
    spec.work_dir = Path(std::string(name) + "-work");
    spec.log_path = Path(std::string(name) + ".log");
    return spec;
  }
  static SandboxSpec Shell(SandboxSpec spec, const std::string& script) {
    spec.argv = {"sh", "-c", script};
    return spec;
  }

  struct Run {
    base::Result<base::ExitStatus> exit = base::InternalError("not run");
    std::vector<LogRecord> records;
    std::string out;  // stdout lines, each + "\n"
    std::string err;
  };
  Run Execute(const SandboxSpec& spec) {
    Run run;
    auto workload = sandbox_->Launch(spec);
    if (!workload.ok()) {
      run.exit = workload.status();
      return run;
    }
    run.exit = (*workload)->Wait();
    run.records = Records(spec.log_path);
    for (const LogRecord& r : run.records) {
      if (r.source == LogSource::kStdout) run.out += r.line + "\n";
      if (r.source == LogSource::kStderr) run.err += r.line + "\n";
    }
    return run;
  }
  std::vector<LogRecord> Records(const std::string& log_path) {
    std::vector<LogRecord> out;
    auto text = env_.ReadFile(log_path);
    if (!text.ok()) return out;
    for (std::string_view line : base::Split(*text, '\n', /*skip_empty=*/true)) {
      auto record = ParseLogRecord(line);
      EXPECT_TRUE(record.ok()) << record.status();
      if (record.ok()) out.push_back(*record);
    }
    return out;
  }
  // Waits (up to 10 s) until the log holds a stdout line `line`.
  bool AwaitLine(const std::string& log_path, const std::string& line) {
    for (int i = 0; i < 1000; ++i) {
      for (const LogRecord& r : Records(log_path)) {
        if (r.line == line) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // A directory the sandbox user can write.
  std::string WritableDir(std::string_view name) {
    std::string path = Path(name);
    EXPECT_TRUE(env_.CreateDirs(path).ok());
    EXPECT_EQ(::chmod(path.c_str(), 0777), 0);
    return path;
  }
  // Running: neither gone nor a zombie (bwrap leaves its pid 1 to the host's init to reap).
  static bool Alive(pid_t pid) {
    auto stat = base::Env::Default().ReadFile("/proc/" + std::to_string(pid) + "/stat");
    if (!stat.ok()) return false;
    size_t paren = stat->rfind(')');
    return paren == std::string::npos || paren + 2 >= stat->size() || (*stat)[paren + 2] != 'Z';
  }

  base::Env& env_ = base::Env::Default();
  std::unique_ptr<Sandbox> sandbox_;
  std::string dir_;
  std::string data_dir_;
};

#define ASSERT_EXIT_CODE(run, expected)                                                      \
  do {                                                                                       \
    ASSERT_TRUE((run).exit.ok()) << (run).exit.status() << "\nstderr: " << (run).err;        \
    ASSERT_EQ(*(run).exit, (base::ExitStatus{true, (expected), false, 0}))                   \
        << (run).exit->ToString() << "\nstdout: " << (run).out << "\nstderr: " << (run).err; \
  } while (0)

TEST_F(SandboxIntegrationTest, ExitCodePropagates) {
  Run ok = Execute(Spec({"true"}, "ok"));
  ASSERT_EXIT_CODE(ok, 0);
  Run three = Execute(Shell(Spec({}, "three"), "exit 3"));
  ASSERT_EXIT_CODE(three, 3);
  Run high = Execute(Shell(Spec({}, "high"), "exit 128"));
  ASSERT_EXIT_CODE(high, 128);
}

TEST_F(SandboxIntegrationTest, KilledBySignalIsReported) {
  Run segv = Execute(Shell(Spec({}), "kill -SEGV $$"));
  ASSERT_TRUE(segv.exit.ok()) << segv.exit.status();
  EXPECT_EQ(*segv.exit, (base::ExitStatus{false, 0, true, SIGSEGV})) << segv.exit->ToString();
  Run killed = Execute(Shell(Spec({}, "killed"), "kill -KILL $$"));
  ASSERT_TRUE(killed.exit.ok());
  EXPECT_EQ(*killed.exit, (base::ExitStatus{false, 0, true, SIGKILL})) << killed.exit->ToString();
}

TEST_F(SandboxIntegrationTest, OutputIsCapturedWithTimestampsInOrder) {
  Run run = Execute(Shell(Spec({}),
                          "echo one; sleep 0.1; echo two >&2; sleep 0.1; echo three; "
                          "printf 'no newline'"));
  ASSERT_EXIT_CODE(run, 0);
  ASSERT_EQ(run.records.size(), 4u);
  EXPECT_EQ(run.records[0],
            (LogRecord{run.records[0].unix_micros, LogSource::kStdout, false, "one"}));
  EXPECT_EQ(run.records[1].source, LogSource::kStderr);
  EXPECT_EQ(run.records[1].line, "two");
  EXPECT_EQ(run.records[2].line, "three");
  EXPECT_EQ(run.records[3].line, "no newline");
  for (size_t i = 1; i < run.records.size(); ++i) {
    EXPECT_LE(run.records[i - 1].unix_micros, run.records[i].unix_micros);
  }
  EXPECT_GE(run.records[2].unix_micros - run.records[0].unix_micros, 150'000);
}

TEST_F(SandboxIntegrationTest, RunsAsTheUnprivilegedUser) {
  Run run = Execute(Shell(Spec({}), "id -u; id -g"));
  ASSERT_EXIT_CODE(run, 0);
  EXPECT_EQ(run.out, "65534\n65534\n");
  SandboxSpec other = Shell(Spec({}, "other"), "id -u; id -g");
  other.uid = 1000;
  other.gid = 1001;
  Run custom = Execute(other);
  ASSERT_EXIT_CODE(custom, 0);
  EXPECT_EQ(custom.out, "1000\n1001\n");
}

TEST_F(SandboxIntegrationTest, HasItsOwnPidNamespace) {
  Run run = Execute(Shell(Spec({}), "echo $$; ls /proc | grep -c '^[0-9]'"));
  ASSERT_EXIT_CODE(run, 0);
  std::vector<std::string_view> lines = base::Split(run.out, '\n', true);
  ASSERT_EQ(lines.size(), 2u) << run.out;
  EXPECT_EQ(lines[0], "2");                                // bwrap's reaper is 1, the workload 2
  EXPECT_LE(*base::ParseUint64(lines[1]), 4u) << run.out;  // reaper, sh, ls, grep
}

TEST_F(SandboxIntegrationTest, NetworkNoneHasOnlyLoopback) {
  Run run = Execute(Shell(Spec({}), "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"));
  ASSERT_EXIT_CODE(run, 0);
  EXPECT_EQ(run.out, "lo\n");
  // Shared, it sees the host's interfaces.
  auto host = env_.ReadFile("/proc/net/dev");
  ASSERT_TRUE(host.ok());
  SandboxSpec shared = Shell(Spec({}, "shared"), "tail -n +3 /proc/net/dev | wc -l");
  shared.network_none = false;
  Run shared_run = Execute(shared);
  ASSERT_EXIT_CODE(shared_run, 0);
  EXPECT_EQ(shared_run.out, std::to_string(base::Split(*host, '\n', true).size() - 2) + "\n");
}

TEST_F(SandboxIntegrationTest, ReadOnlyAndWritableMounts) {
  std::string ro = WritableDir("ro");
  std::string rw = WritableDir("rw");
  ASSERT_TRUE(env_.WriteFileAtomically(base::JoinPath(ro, "input.txt"), "dataset").ok());
  SandboxSpec spec = Shell(Spec({}),
                           "cat /workspace/data/input.txt; echo;"
                           "touch /workspace/data/new 2>/dev/null && echo ro-writable;"
                           "echo result > /workspace/out/model.txt && echo rw-ok");
  spec.mounts = {{ro, "/workspace/data", true}, {rw, "/workspace/out", false}};
  Run run = Execute(spec);
  ASSERT_EXIT_CODE(run, 0);
  EXPECT_EQ(run.out, "dataset\nrw-ok\n");
  EXPECT_FALSE(env_.FileExists(base::JoinPath(ro, "new")));
  auto written = env_.ReadFile(base::JoinPath(rw, "model.txt"));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, "result\n");
}

TEST_F(SandboxIntegrationTest, TheDataDirectoryIsInvisible) {
  std::string secret = base::JoinPath(data_dir_, "secret.key");
  ASSERT_TRUE(env_.WriteFileAtomically(secret, "s3cr3t", 0644).ok());
  // Even world-readable, and with a mount next to it, the file is out of reach.
  std::string volume = WritableDir("data-volume");
  SandboxSpec spec = Shell(Spec({}), "cat " + secret + " || echo unreadable; ls " + dir_ +
                                         " 2>/dev/null || echo no-dir; ls / | tr '\\n' ' '");
  spec.mounts = {{volume, "/workspace", true}};
  Run run = Execute(spec);
  ASSERT_EXIT_CODE(run, 0);
  EXPECT_EQ(run.out.find("s3cr3t"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("unreadable\nno-dir\n"), std::string::npos) << run.out;
  // The root holds the system directories, the fresh ones and the mount, nothing else.
  std::string root_listing(base::Split(run.out, '\n', true).back());
  for (std::string_view name : base::Split(root_listing, ' ', true)) {
    static const std::vector<std::string> kAllowed = {"bin",   "dev",   "etc",    "lib",
                                                      "lib32", "lib64", "libx32", "proc",
                                                      "sbin",  "tmp",   "usr",    "workspace"};
    EXPECT_NE(std::find(kAllowed.begin(), kAllowed.end(), name), kAllowed.end()) << name;
  }
  // A mount that would contain the data directory is refused.
  SandboxSpec leaky = Spec({"true"}, "leaky");
  leaky.mounts = {{dir_, "/workspace", true}};
  auto refused = sandbox_->Launch(leaky);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status();
}

TEST_F(SandboxIntegrationTest, TmpIsPrivate) {
  const std::string marker = "/tmp/sovai-private-" + std::to_string(::getpid());
  Run writer = Execute(Shell(Spec({}, "a"), "echo x > " + marker + " && cat " + marker));
  ASSERT_EXIT_CODE(writer, 0);
  EXPECT_EQ(writer.out, "x\n");
  Run reader =
      Execute(Shell(Spec({}, "b"), "test -e " + marker + " && echo visible || echo absent"));
  ASSERT_EXIT_CODE(reader, 0);
  EXPECT_EQ(reader.out, "absent\n");
  EXPECT_FALSE(env_.FileExists(marker));  // not in the host's /tmp either
  EXPECT_TRUE(env_.FileExists(Path("a-work/tmp") + marker.substr(4)));  // but in its work dir
}

TEST_F(SandboxIntegrationTest, EnvironmentIsClearedAndCudaDevicesSet) {
  ::setenv("SOVAI_TEST_LEAK", "leaked", 1);
  SandboxSpec spec = Spec({"env"});
  spec.env = {{"FOO", "bar"}};
  Run run = Execute(spec);
  ::unsetenv("SOVAI_TEST_LEAK");
  ASSERT_EXIT_CODE(run, 0);
  std::vector<std::string_view> vars = base::Split(run.out, '\n', true);
  std::sort(vars.begin(), vars.end());
  // bwrap adds PWD (its --chdir); nothing of the server's environment leaks.
  EXPECT_EQ(vars,
            (std::vector<std::string_view>{
                "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=", "FOO=bar", "HOME=/tmp",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PWD=/tmp"}));
  SandboxSpec gpus = Shell(Spec({}, "gpus"), "echo \"[$CUDA_VISIBLE_DEVICES]\"");
  gpus.gpus = {1, 3};
  Run gpu_run = Execute(gpus);
  ASSERT_EXIT_CODE(gpu_run, 0);
  EXPECT_EQ(gpu_run.out, "[1,3]\n");
}

TEST_F(SandboxIntegrationTest, CpuAffinityIsApplied) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  int last = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) last = cpu;
  }
  SandboxSpec spec = Shell(Spec({}), "grep Cpus_allowed_list /proc/self/status | cut -f2");
  spec.cpus = {last};
  Run run = Execute(spec);
  ASSERT_EXIT_CODE(run, 0);
  EXPECT_EQ(run.out, std::to_string(last) + "\n");
  // A CPU this server may not use is refused.
  SandboxSpec bad = Spec({"true"}, "bad");
  bad.cpus = {CPU_SETSIZE - 1};
  EXPECT_EQ(sandbox_->Launch(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SandboxIntegrationTest, MemoryLimitIsEnforced) {
  if (!env_.FileExists("/usr/bin/python3")) GTEST_SKIP() << "needs /usr/bin/python3";
  SandboxSpec big = Spec({"python3", "-c", "b = bytearray(512 << 20); print('allocated')"});
  big.memory_bytes = 256ull << 20;
  Run over = Execute(big);
  ASSERT_TRUE(over.exit.ok()) << over.exit.status();
  EXPECT_FALSE(over.exit->success());
  EXPECT_EQ(over.out, "");
  EXPECT_NE(over.err.find("MemoryError"), std::string::npos) << over.err;
  SandboxSpec small =
      Spec({"python3", "-c", "b = bytearray(16 << 20); print('allocated')"}, "small");
  small.memory_bytes = 256ull << 20;
  Run under = Execute(small);
  ASSERT_EXIT_CODE(under, 0);
  EXPECT_EQ(under.out, "allocated\n");
}

TEST_F(SandboxIntegrationTest, StopLetsATermHandlerFinish) {
  SandboxSpec spec = Shell(Spec({}),
                           "trap 'echo got-term; exit 42' TERM; echo ready; "
                           "while :; do sleep 0.05; done");
  auto workload = sandbox_->Launch(spec);
  ASSERT_TRUE(workload.ok()) << workload.status();
  ASSERT_TRUE(AwaitLine(spec.log_path, "ready"));
  auto running = (*workload)->TryWait();
  ASSERT_TRUE(running.ok());
  EXPECT_FALSE(running->has_value());
  auto stopped = (*workload)->Stop(std::chrono::seconds(10));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, (base::ExitStatus{true, 42, false, 0})) << stopped->ToString();
  EXPECT_TRUE(AwaitLine(spec.log_path, "got-term"));
  // Later calls give the same answer.
  EXPECT_EQ(*(*workload)->Wait(), *stopped);
  EXPECT_EQ(**(*workload)->TryWait(), *stopped);
}

// A stop that lands while bwrap still sets the sandbox up (before the command runs) is a stop:
// the workload ended by a signal, not "the sandbox did not run the command".
TEST_F(SandboxIntegrationTest, AStopRightAfterLaunchIsAStopNotASetupFailure) {
  // Stops at 0-20 ms after the launch, 0.4 ms apart: some land before bwrap has made the
  // command's process (nothing to signal: SIGKILL after the grace), some in its setup, some once
  // it runs.
  for (int i = 0; i < 50; ++i) {
    SCOPED_TRACE(i);
    SandboxSpec spec = Spec({"sleep", "1000"}, "early-" + std::to_string(i));
    auto workload = sandbox_->Launch(spec);
    ASSERT_TRUE(workload.ok()) << workload.status();
    std::this_thread::sleep_for(std::chrono::microseconds(400 * i));
    auto stopped = (*workload)->Stop(std::chrono::milliseconds(200));
    ASSERT_TRUE(stopped.ok()) << stopped.status();
    EXPECT_FALSE(stopped->success()) << stopped->ToString();
    EXPECT_TRUE(stopped->signaled) << stopped->ToString();
  }
}

TEST_F(SandboxIntegrationTest, StopKillsEverythingThatIgnoresTerm) {
  // The shell and its background child ignore SIGTERM (SIG_IGN is inherited).
  SandboxSpec spec = Shell(Spec({}),
                           "trap '' TERM; sleep 1000 & echo ready; "
                           "while :; do sleep 0.05; done");
  auto workload = sandbox_->Launch(spec);
  ASSERT_TRUE(workload.ok()) << workload.status();
  ASSERT_TRUE(AwaitLine(spec.log_path, "ready"));
  auto pids = (*workload)->ProcessIds();
  ASSERT_TRUE(pids.ok()) << pids.status();
  ASSERT_GE(pids->size(), 3u);  // pid 1, sh, sleep 1000 (and maybe a sleep 0.05)
  EXPECT_NE(std::find(pids->begin(), pids->end(), (*workload)->sandbox_init_pid()), pids->end());
  const auto start = std::chrono::steady_clock::now();
  auto stopped = (*workload)->Stop(std::chrono::milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, (base::ExitStatus{false, 0, true, SIGKILL})) << stopped->ToString();
  EXPECT_GE(took, std::chrono::milliseconds(300));
  for (pid_t pid : *pids) EXPECT_FALSE(Alive(pid)) << pid;
  EXPECT_TRUE((*workload)->ProcessIds()->empty());
  EXPECT_FALSE(Alive((*workload)->pid()));
}

TEST_F(SandboxIntegrationTest, DestroyingAWorkloadKillsIt) {
  auto workload = sandbox_->Launch(Shell(Spec({}), "sleep 1000 & echo ready; wait"));
  ASSERT_TRUE(workload.ok()) << workload.status();
  ASSERT_TRUE(AwaitLine(Path("job.log"), "ready"));
  std::vector<pid_t> pids = *(*workload)->ProcessIds();
  pids.push_back((*workload)->pid());
  workload->reset();
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << pid;
}

TEST_F(SandboxIntegrationTest, BackgroundProcessesEndWithTheWorkload) {
  SandboxSpec spec = Shell(Spec({}), "sleep 1000 & echo started");
  auto workload = sandbox_->Launch(spec);
  ASSERT_TRUE(workload.ok()) << workload.status();
  ASSERT_TRUE(AwaitLine(spec.log_path, "started"));
  auto exit = (*workload)->Wait();
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->success());
  EXPECT_TRUE((*workload)->ProcessIds()->empty());
}

TEST_F(SandboxIntegrationTest, MissingCommandIsReportedByWait) {
  Run run = Execute(Spec({"no-such-program-xyz"}));
  ASSERT_FALSE(run.exit.ok());
  EXPECT_EQ(run.exit.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(run.exit.status().message().find("no-such-program-xyz"), std::string::npos)
      << run.exit.status();
}

TEST_F(SandboxIntegrationTest, LaunchChecksHostPaths) {
  SandboxSpec missing = Spec({"true"});
  missing.mounts = {{Path("nope"), "/workspace", true}};
  EXPECT_EQ(sandbox_->Launch(missing).status().code(), StatusCode::kNotFound);
  SandboxSpec no_rootfs = Spec({"true"});
  no_rootfs.rootfs = Path("no-rootfs");
  EXPECT_EQ(sandbox_->Launch(no_rootfs).status().code(), StatusCode::kNotFound);
  if (::geteuid() != 0) return;
  // As root, the sandbox is uid 65534 on the host: a root-only writable mount is explained.
  std::string root_only = Path("root-only");
  ASSERT_TRUE(env_.CreateDirs(root_only).ok());
  ASSERT_EQ(::chmod(root_only.c_str(), 0755), 0);
  SandboxSpec rw = Spec({"true"});
  rw.mounts = {{root_only, "/out", false}};
  auto refused = sandbox_->Launch(rw);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("chown it to 65534:65534"), std::string::npos)
      << refused.status();
  std::string closed = Path("closed");
  ASSERT_TRUE(env_.CreateDirs(closed + "/inside").ok());
  ASSERT_EQ(::chmod(closed.c_str(), 0700), 0);
  SandboxSpec ro = Spec({"true"});
  ro.mounts = {{closed + "/inside", "/in", true}};
  refused = sandbox_->Launch(ro);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("cannot traverse"), std::string::npos)
      << refused.status();
}

TEST_F(SandboxIntegrationTest, RootfsBecomesTheRoot) {
  // A tiny image: its own /etc and /opt, programs from the host's /usr mounted into it.
  std::string rootfs = Path("rootfs");
  for (const char* d : {"usr", "etc", "opt/app", "opt/secrets", "workspace"}) {
    ASSERT_TRUE(env_.CreateDirs(base::JoinPath(rootfs, d)).ok());
  }
  for (const char* link : {"bin", "lib", "lib64"}) {
    std::string target = std::string("usr/") + link;
    ASSERT_EQ(::symlink(target.c_str(), base::JoinPath(rootfs, link).c_str()), 0);
  }
  ASSERT_TRUE(env_.WriteFileAtomically(rootfs + "/etc/os-release", "ID=sovai-test\n").ok());
  ASSERT_TRUE(env_.WriteFileAtomically(rootfs + "/opt/secrets/key", "hidden\n").ok());
  ASSERT_TRUE(env_.WriteFileAtomically(rootfs + "/opt/app/run", "visible\n").ok());
  std::string volume = WritableDir("volume");

  SandboxOptions options;
  options.hidden_paths = {data_dir_, rootfs + "/opt/secrets"};
  auto sandbox = Sandbox::Create(env_, options);
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  SandboxSpec spec = Shell(Spec({}),
                           "cat /etc/os-release /opt/app/run; "
                           "cat /opt/secrets/key 2>/dev/null || echo no-key; "
                           "touch /etc/x 2>/dev/null || echo ro-root; "
                           "echo out > /workspace/data/f && echo mounted");
  spec.rootfs = rootfs;
  spec.mounts = {{"/usr", "/usr", true}, {volume, "/workspace/data", false}};
  auto workload = (*sandbox)->Launch(spec);
  ASSERT_TRUE(workload.ok()) << workload.status();
  auto exit = (*workload)->Wait();
  ASSERT_TRUE(exit.ok()) << exit.status();
  std::string out;
  for (const LogRecord& r : Records(spec.log_path)) out += r.line + "\n";
  EXPECT_TRUE(exit->success()) << exit->ToString() << "\n" << out;
  EXPECT_EQ(out, "ID=sovai-test\nvisible\nno-key\nro-root\nmounted\n");
  // The mount point was made inside the image.
  EXPECT_TRUE(env_.FileExists(rootfs + "/workspace/data"));
}

TEST_F(SandboxIntegrationTest, RootfsSymlinksNeverLeadOutside) {
  std::string rootfs = Path("evil-rootfs");
  ASSERT_TRUE(env_.CreateDirs(rootfs + "/usr").ok());
  std::string outside = Path("outside");
  ASSERT_TRUE(env_.CreateDirs(outside).ok());
  // The image's /workspace points at a host directory.
  ASSERT_EQ(::symlink(outside.c_str(), (rootfs + "/opt").c_str()), 0);
  ASSERT_TRUE(env_.CreateDirs(rootfs + "/srv").ok());
  ASSERT_EQ(::symlink(outside.c_str(), (rootfs + "/srv/link").c_str()), 0);
  SandboxSpec spec = Spec({"true"});
  spec.rootfs = rootfs;
  spec.mounts = {{"/usr", "/usr", true}, {WritableDir("v"), "/srv/link/data", true}};
  auto refused = sandbox_->Launch(spec);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status();
  spec.mounts = {{"/usr", "/usr", true}, {Path("v"), "/opt/data", true}};
  refused = sandbox_->Launch(spec);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status();
  EXPECT_TRUE(env_.ListDir(outside)->empty());  // nothing was created through the links
}

TEST_F(SandboxIntegrationTest, PlatformRecordsJoinTheLog) {
  SandboxSpec spec = Shell(Spec({}), "echo ready; sleep 0.3; echo done");
  auto workload = sandbox_->Launch(spec);
  ASSERT_TRUE(workload.ok()) << workload.status();
  ASSERT_TRUE(AwaitLine(spec.log_path, "ready"));
  ASSERT_TRUE((*workload)->log().Write(LogSource::kSovai, "volume sync: 12 files").ok());
  ASSERT_TRUE((*workload)->Wait().ok());
  std::vector<LogRecord> records = Records(spec.log_path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[1],
            (LogRecord{records[1].unix_micros, LogSource::kSovai, false, "volume sync: 12 files"}));
  EXPECT_EQ(records[2].line, "done");
}

}  // namespace
}  // namespace sovai::exec
