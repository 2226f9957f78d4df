#include "base/env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

namespace sovai::base {
namespace {

// A fresh directory per test, removed afterwards.
class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/sovai_env_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { ASSERT_TRUE(env_.DeleteDirRecursive(dir_).ok()); }

  std::string Path(std::string_view name) const { return JoinPath(dir_, name); }
  std::vector<std::string> List() const { return *env_.ListDir(dir_); }
  std::string Read(const std::string& path) const {
    Result<std::string> r = env_.ReadFile(path);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : "";
  }

  Env& env_ = Env::Default();
  std::string dir_;
};

// --- Files ---

TEST_F(EnvTest, WriteFileAtomicallyCreatesAndReplaces) {
  std::string path = Path("config.json");
  ASSERT_TRUE(env_.WriteFileAtomically(path, "old").ok());
  EXPECT_EQ(Read(path), "old");
  ASSERT_TRUE(env_.WriteFileAtomically(path, "new content").ok());
  EXPECT_EQ(Read(path), "new content");
  ASSERT_TRUE(env_.WriteFileAtomically(path, "").ok());
  EXPECT_EQ(Read(path), "");
  EXPECT_EQ(List(), std::vector<std::string>{"config.json"});  // no temporary left
}

TEST_F(EnvTest, WriteFileAtomicallyPermissions) {
  std::string secret = Path("admin.json");
  ASSERT_TRUE(env_.WriteFileAtomically(secret, "{}", 0600).ok());
  EXPECT_EQ(env_.Stat(secret)->mode & 0777, 0600u);
  // Replacing keeps the requested mode, whatever the old file had.
  ASSERT_TRUE(env_.WriteFileAtomically(secret, "{\"v\":2}", 0600).ok());
  EXPECT_EQ(env_.Stat(secret)->mode & 0777, 0600u);
  std::string plain = Path("plain.txt");
  ASSERT_TRUE(env_.WriteFileAtomically(plain, "x").ok());
  EXPECT_EQ(env_.Stat(plain)->mode & 0600, 0600u);
  EXPECT_EQ(env_.Stat(plain)->mode & 0077 & ~0044, 0u);  // 0644 less the umask
}

TEST_F(EnvTest, WriteFileAtomicallyErrors) {
  EXPECT_EQ(env_.WriteFileAtomically(Path("no/such/dir/f"), "x").code(), StatusCode::kNotFound);
  EXPECT_EQ(env_.WriteFileAtomically(Path("dir/"), "x").code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(env_.CreateDir(Path("d")).ok());
  // Renaming a file over a directory fails; the directory and no temporary remain.
  Status s = env_.WriteFileAtomically(Path("d"), "x");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(List(), std::vector<std::string>{"d"});
}

struct FaultCase {
  FaultOp op;
  const char* name;
};

class AtomicWriteFaultTest : public EnvTest, public ::testing::WithParamInterface<FaultCase> {};

TEST_P(AtomicWriteFaultTest, FailureLeavesOldContentAndNoTemporary) {
  std::string path = Path("object");
  ASSERT_TRUE(env_.WriteFileAtomically(path, "old content").ok());
  FaultInjectionEnv faulty(env_);
  faulty.FailNth(GetParam().op, 1, InternalError("injected"));
  Status s = faulty.WriteFileAtomically(path, std::string(100'000, 'n'));
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("injected"), std::string::npos);
  EXPECT_EQ(Read(path), "old content");
  EXPECT_EQ(List(), std::vector<std::string>{"object"});
  // The next attempt (fault consumed) succeeds.
  ASSERT_TRUE(faulty.WriteFileAtomically(path, "new").ok());
  EXPECT_EQ(Read(path), "new");
  EXPECT_EQ(List(), std::vector<std::string>{"object"});
}

INSTANTIATE_TEST_SUITE_P(EachStep, AtomicWriteFaultTest,
                         ::testing::Values(FaultCase{FaultOp::kOpenWritable, "Open"},
                                           FaultCase{FaultOp::kAppend, "Write"},
                                           FaultCase{FaultOp::kSync, "Fsync"},
                                           FaultCase{FaultOp::kClose, "Close"},
                                           FaultCase{FaultOp::kRename, "Rename"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(EnvTest, DirectorySyncFailureIsReportedAfterTheRename) {
  // Documented exception: the rename has happened, so the new content is visible.
  std::string path = Path("object");
  ASSERT_TRUE(env_.WriteFileAtomically(path, "old").ok());
  FaultInjectionEnv faulty(env_);
  faulty.FailNth(FaultOp::kSyncDir, 1);
  EXPECT_FALSE(faulty.WriteFileAtomically(path, "new").ok());
  EXPECT_EQ(Read(path), "new");
  EXPECT_EQ(List(), std::vector<std::string>{"object"});
}

TEST_F(EnvTest, FailureWhileDeletingTheTemporaryLeavesARecognizableName) {
  std::string path = Path("object");
  ASSERT_TRUE(env_.WriteFileAtomically(path, "old").ok());
  FaultInjectionEnv faulty(env_);
  faulty.FailNth(FaultOp::kRename, 1);
  faulty.FailNth(FaultOp::kDelete, 1);
  EXPECT_FALSE(faulty.WriteFileAtomically(path, "new").ok());
  EXPECT_EQ(Read(path), "old");
  std::vector<std::string> names = List();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_TRUE(IsAtomicWriteTempName(names[0])) << names[0];  // ".object.sovai-tmp.<hex>"
  EXPECT_FALSE(IsAtomicWriteTempName(names[1]));
}

TEST_F(EnvTest, AtomicFileWriterStreamsAndCommits) {
  std::string path = Path("big");
  ASSERT_TRUE(env_.WriteFileAtomically(path, "old").ok());
  Result<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Open(env_, path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::string expected;
  for (int i = 0; i < 100; ++i) {
    std::string piece(10'000, static_cast<char>('a' + i % 26));
    ASSERT_TRUE((*writer)->Append(piece).ok());
    expected += piece;
  }
  EXPECT_EQ((*writer)->bytes_written(), expected.size());
  EXPECT_EQ(Read(path), "old");  // nothing visible before Commit
  EXPECT_EQ(List().size(), 2u);
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ(Read(path), expected);
  EXPECT_EQ(List(), std::vector<std::string>{"big"});
  EXPECT_EQ((*writer)->Commit().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*writer)->Append("x").code(), StatusCode::kFailedPrecondition);
}

TEST_F(EnvTest, AtomicFileWriterAbandonedOnDestruction) {
  std::string path = Path("big");
  ASSERT_TRUE(env_.WriteFileAtomically(path, "old").ok());
  {
    auto writer = AtomicFileWriter::Open(env_, path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append("partial").ok());
    EXPECT_TRUE(env_.FileExists((*writer)->temp_path()));
  }
  EXPECT_EQ(Read(path), "old");
  EXPECT_EQ(List(), std::vector<std::string>{"big"});
  // Same for a writer that never existed before.
  {
    auto writer = AtomicFileWriter::Open(env_, Path("fresh"));
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append("partial").ok());
    (*writer)->Abandon();
    EXPECT_FALSE(env_.FileExists((*writer)->temp_path()));
  }
  EXPECT_FALSE(env_.FileExists(Path("fresh")));
}

TEST_F(EnvTest, AtomicFileWriterIsDeadAfterAFailedAppend) {
  FaultInjectionEnv faulty(env_);
  auto writer = AtomicFileWriter::Open(faulty, Path("f"));
  ASSERT_TRUE(writer.ok());
  faulty.FailNth(FaultOp::kAppend, 1, ResourceExhaustedError("disk full"));
  EXPECT_EQ((*writer)->Append("abcdef").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ((*writer)->Append("more").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ((*writer)->Commit().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(env_.FileExists(Path("f")));
  EXPECT_TRUE(List().empty());
}

TEST_F(EnvTest, ReadFileErrorsAndLimit) {
  EXPECT_EQ(env_.ReadFile(Path("missing")).status().code(), StatusCode::kNotFound);
  EXPECT_NE(env_.ReadFile(Path("missing")).status().message().find("missing"), std::string::npos);
  ASSERT_TRUE(env_.WriteFileAtomically(Path("f"), std::string(1000, 'x')).ok());
  EXPECT_EQ(env_.ReadFile(Path("f"), 999).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(env_.ReadFile(Path("f"), 1000)->size(), 1000u);
  EXPECT_EQ(env_.ReadFile(dir_).status().code(), StatusCode::kFailedPrecondition);
  // Files whose size stat does not know (procfs) are read to the end.
  Result<std::string> proc = env_.ReadFile("/proc/self/status");
  ASSERT_TRUE(proc.ok()) << proc.status();
  EXPECT_NE(proc->find("Pid:"), std::string::npos);
  EXPECT_EQ(env_.ReadFile("/proc/self/status", 10).status().code(), StatusCode::kResourceExhausted);
}

TEST_F(EnvTest, WritableFileModes) {
  std::string path = Path("log");
  {
    auto f = env_.NewWritableFile(path, WriteMode::kCreateExclusive);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append("one\n").ok());
    ASSERT_TRUE((*f)->Sync().ok());
    ASSERT_TRUE((*f)->Close().ok());
    EXPECT_EQ((*f)->Append("x").code(), StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(env_.NewWritableFile(path, WriteMode::kCreateExclusive).status().code(),
            StatusCode::kAlreadyExists);
  {
    auto f = env_.NewWritableFile(path, WriteMode::kAppend);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append("two\n").ok());
  }
  EXPECT_EQ(Read(path), "one\ntwo\n");
  {
    auto f = env_.NewWritableFile(path, WriteMode::kTruncate);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append("three").ok());
  }
  EXPECT_EQ(Read(path), "three");
}

TEST_F(EnvTest, RandomAccessFile) {
  ASSERT_TRUE(env_.WriteFileAtomically(Path("f"), "0123456789").ok());
  auto f = env_.NewRandomAccessFile(Path("f"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->size_bytes(), 10u);
  char buf[4];
  EXPECT_EQ(*(*f)->ReadAt(3, buf), 4u);
  EXPECT_EQ(std::string_view(buf, 4), "3456");
  EXPECT_EQ(*(*f)->ReadAt(8, buf), 2u);
  EXPECT_EQ(std::string_view(buf, 2), "89");
  EXPECT_EQ(*(*f)->ReadAt(10, buf), 0u);
  EXPECT_EQ(*(*f)->ReadAt(1000, buf), 0u);
  EXPECT_EQ(env_.NewRandomAccessFile(Path("nope")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(env_.NewRandomAccessFile(dir_).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(EnvTest, Directories) {
  EXPECT_TRUE(env_.CreateDir(Path("a")).ok());
  EXPECT_EQ(env_.CreateDir(Path("a")).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(env_.CreateDir(Path("x/y")).code(), StatusCode::kNotFound);
  EXPECT_TRUE(env_.CreateDirs(Path("b/c/d/")).ok());
  EXPECT_TRUE(env_.CreateDirs(Path("b/c/d")).ok());  // idempotent
  EXPECT_TRUE(env_.CreateDirs(Path("b//c/e")).ok());
  EXPECT_EQ(env_.Stat(Path("b/c/d"))->type, FileType::kDirectory);
  ASSERT_TRUE(env_.WriteFileAtomically(Path("file"), "x").ok());
  EXPECT_EQ(env_.CreateDirs(Path("file/sub")).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(env_.CreateDirs(Path("file")).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(List(), (std::vector<std::string>{"a", "b", "file"}));
  EXPECT_EQ(*env_.ListDir(Path("b/c")), (std::vector<std::string>{"d", "e"}));
  EXPECT_EQ(env_.ListDir(Path("nope")).status().code(), StatusCode::kNotFound);

  EXPECT_EQ(env_.DeleteDir(Path("b")).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(env_.DeleteDir(Path("a")).ok());
  EXPECT_EQ(env_.DeleteDir(Path("a")).code(), StatusCode::kNotFound);
  EXPECT_EQ(env_.DeleteDirRecursive(Path("file")).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(env_.DeleteDirRecursive(Path("nope")).code(), StatusCode::kNotFound);
}

TEST_F(EnvTest, DeleteDirRecursiveDoesNotFollowSymlinks) {
  ASSERT_TRUE(env_.CreateDirs(Path("outside")).ok());
  ASSERT_TRUE(env_.WriteFileAtomically(Path("outside/keep"), "precious").ok());
  ASSERT_TRUE(env_.CreateDirs(Path("tree/a/b/c")).ok());
  ASSERT_TRUE(env_.WriteFileAtomically(Path("tree/a/f1"), "1").ok());
  ASSERT_TRUE(env_.WriteFileAtomically(Path("tree/a/b/c/f2"), "2").ok());
  ASSERT_EQ(::symlink(Path("outside").c_str(), Path("tree/a/link").c_str()), 0);
  ASSERT_EQ(::symlink("/nonexistent", Path("tree/dangling").c_str()), 0);
  EXPECT_TRUE(env_.DeleteDirRecursive(Path("tree")).ok());
  EXPECT_FALSE(env_.FileExists(Path("tree")));
  EXPECT_EQ(Read(Path("outside/keep")), "precious");
}

TEST_F(EnvTest, WriteBehindStreamsWindowsAndDropsThemFromTheCache) {
  const std::string path = Path("big");
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid());
  constexpr uint64_t kWindow = WriteBehind::kWindowBytes;
  constexpr uint64_t kTotal = 5 * kWindow + 12345;
  std::string chunk(1 << 20, '\0');
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>(i * 131 + 7);
  WriteBehind behind;
  uint64_t length = 0;
  while (length < kTotal) {
    std::string_view piece(chunk.data(), std::min<uint64_t>(chunk.size(), kTotal - length));
    ASSERT_TRUE(WriteFdFully(fd.get(), piece).ok());
    length += piece.size();
    behind.Wrote(fd.get(), length);
    EXPECT_EQ(behind.started(), length / kWindow * kWindow);
  }
  ASSERT_EQ(::fdatasync(fd.get()), 0);

  // Every byte reads back; the windows before the last two left the page cache (unless the
  // filesystem keeps file pages in memory by nature, as tmpfs does).
  std::string back = Read(path);
  ASSERT_EQ(back.size(), kTotal);
  for (uint64_t at = 0; at < kTotal; at += chunk.size()) {
    ASSERT_EQ(back.compare(at, std::min<uint64_t>(chunk.size(), kTotal - at), chunk, 0,
                           std::min<uint64_t>(chunk.size(), kTotal - at)),
              0)
        << "at " << at;
  }
  struct statfs fs {};
  ASSERT_EQ(::fstatfs(fd.get(), &fs), 0);
  if (fs.f_type == TMPFS_MAGIC) GTEST_SKIP() << "tmpfs keeps every page resident";
  // Drop what reading back pulled in, rewrite the file through a fresh WriteBehind, and look.
  ASSERT_EQ(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED), 0);
  ASSERT_EQ(::ftruncate(fd.get(), 0), 0);
  ASSERT_EQ(::lseek(fd.get(), 0, SEEK_SET), 0);
  WriteBehind again;
  for (length = 0; length < kTotal;) {
    std::string_view piece(chunk.data(), std::min<uint64_t>(chunk.size(), kTotal - length));
    ASSERT_TRUE(WriteFdFully(fd.get(), piece).ok());
    length += piece.size();
    again.Wrote(fd.get(), length);
  }
  void* map = ::mmap(nullptr, kTotal, PROT_READ, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(map, MAP_FAILED);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((kTotal + page - 1) / page);
  ASSERT_EQ(::mincore(map, kTotal, resident.data()), 0);
  ::munmap(map, kTotal);
  auto resident_pages = [&](uint64_t from, uint64_t to) {
    size_t n = 0;
    for (uint64_t p = from / page; p < to / page; ++p) n += resident[p] & 1;
    return n;
  };
  EXPECT_EQ(resident_pages(0, 3 * kWindow), 0u) << "windows behind the last two stay cached";
  EXPECT_GT(resident_pages(4 * kWindow, 5 * kWindow), 0u) << "the newest window is still cached";
}

TEST_F(EnvTest, AWritableFileStreamedToDiskKeepsItsBytesAndLeavesTheCache) {
  // Through FaultInjectionEnv's wrapper, which must pass the request on.
  FaultInjectionEnv env(env_);
  const std::string path = Path("streamed");
  auto file = env.NewWritableFile(path, WriteMode::kCreateExclusive);
  ASSERT_TRUE(file.ok()) << file.status();
  (*file)->StreamToDisk();
  constexpr uint64_t kWindow = WriteBehind::kWindowBytes;
  constexpr uint64_t kTotal = 5 * kWindow + 777;
  std::string chunk(1 << 20, '\0');
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>(i * 37 + 3);
  for (uint64_t length = 0; length < kTotal;) {
    std::string_view piece(chunk.data(), std::min<uint64_t>(chunk.size(), kTotal - length));
    ASSERT_TRUE((*file)->Append(piece).ok());
    length += piece.size();
  }
  ASSERT_TRUE((*file)->Sync().ok());
  ASSERT_TRUE((*file)->Close().ok());

  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  struct statfs fs {};
  ASSERT_EQ(::fstatfs(fd.get(), &fs), 0);
  if (fs.f_type != TMPFS_MAGIC) {
    void* map = ::mmap(nullptr, kTotal, PROT_READ, MAP_SHARED, fd.get(), 0);
    ASSERT_NE(map, MAP_FAILED);
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> resident((kTotal + page - 1) / page);
    ASSERT_EQ(::mincore(map, kTotal, resident.data()), 0);
    ::munmap(map, kTotal);
    size_t early_resident = 0;
    for (uint64_t p = 0; p < 3 * kWindow / page; ++p) early_resident += resident[p] & 1;
    EXPECT_EQ(early_resident, 0u) << "windows behind the last two stay cached";
  }
  std::string back = Read(path);
  ASSERT_EQ(back.size(), kTotal);
  for (uint64_t at = 0; at < kTotal; at += chunk.size()) {
    const uint64_t n = std::min<uint64_t>(chunk.size(), kTotal - at);
    ASSERT_EQ(back.compare(at, n, chunk, 0, n), 0) << "at " << at;
  }
}

TEST_F(EnvTest, FileOperations) {
  ASSERT_TRUE(env_.WriteFileAtomically(Path("f"), "hello").ok());
  EXPECT_TRUE(env_.FileExists(Path("f")));
  EXPECT_FALSE(env_.FileExists(Path("g")));
  EXPECT_EQ(*env_.GetFileSize(Path("f")), 5u);
  EXPECT_EQ(env_.GetFileSize(Path("g")).status().code(), StatusCode::kNotFound);
  Result<FileStat> st = env_.Stat(Path("f"));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->type, FileType::kRegular);
  EXPECT_EQ(st->size_bytes, 5u);
  int64_t now = env_.NowUnixMicros();
  EXPECT_LE(std::abs(st->mtime_unix_micros - now), 60 * 1'000'000);
  EXPECT_TRUE(env_.RenameFile(Path("f"), Path("g")).ok());
  EXPECT_EQ(Read(Path("g")), "hello");
  EXPECT_EQ(env_.RenameFile(Path("f"), Path("h")).code(), StatusCode::kNotFound);
  EXPECT_TRUE(env_.DeleteFile(Path("g")).ok());
  EXPECT_EQ(env_.DeleteFile(Path("g")).code(), StatusCode::kNotFound);
  EXPECT_TRUE(env_.SyncDir(dir_).ok());
  EXPECT_EQ(env_.SyncDir(Path("nope")).code(), StatusCode::kNotFound);
}

TEST(PathTest, Helpers) {
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(DirName("/c"), "/");
  EXPECT_EQ(BaseName("a/b/c"), "c");
  EXPECT_EQ(BaseName("c"), "c");
  EXPECT_EQ(BaseName("a/"), "");
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "/b"), "a/b");
  EXPECT_EQ(JoinPath("", "b"), "b");
  EXPECT_TRUE(IsAtomicWriteTempName(".obj.sovai-tmp.0123456789abcdef"));
  EXPECT_FALSE(IsAtomicWriteTempName("obj.sovai-tmp.0123456789abcdef"));
  EXPECT_FALSE(IsAtomicWriteTempName(".obj.sovai-tmp.0123"));
  EXPECT_FALSE(IsAtomicWriteTempName(".obj"));
}

TEST(UniqueFdTest, OwnsAndMoves) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  UniqueFd a(fds[0]);
  UniqueFd b(fds[1]);
  UniqueFd c = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(c.get(), fds[0]);
  EXPECT_TRUE(b.Close().ok());
  EXPECT_FALSE(b.valid());
  EXPECT_EQ(::fcntl(fds[1], F_GETFD), -1);  // really closed
  int raw = c.Release();
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(::close(raw), 0);
  { UniqueFd scoped(::dup(1)); }
}

// --- Clock ---

TEST(ClockTest, RealClocks) {
  Env& env = Env::Default();
  int64_t mono1 = env.NowMonotonicMicros();
  env.SleepForMicros(2000);
  int64_t mono2 = env.NowMonotonicMicros();
  EXPECT_GE(mono2 - mono1, 2000);
  EXPECT_GT(env.NowUnixMicros(), int64_t{1'700'000'000} * 1'000'000);
}

TEST(ClockTest, ManualClockEnv) {
  ManualClock clock(1'000'000, 5);
  ManualClockEnv env(Env::Default(), clock);
  EXPECT_EQ(env.NowUnixMicros(), 1'000'000);
  EXPECT_EQ(env.NowMonotonicMicros(), 5);
  int64_t before = Env::Default().NowMonotonicMicros();
  env.SleepForMicros(3'600'000'000);  // an hour, instantly
  EXPECT_LT(Env::Default().NowMonotonicMicros() - before, 1'000'000);
  EXPECT_EQ(env.NowUnixMicros(), 3'601'000'000);
  EXPECT_EQ(env.NowMonotonicMicros(), 3'600'000'005);
  clock.SetUnixMicros(10);  // wall clock steps back; monotonic does not
  EXPECT_EQ(env.NowUnixMicros(), 10);
  EXPECT_EQ(env.NowMonotonicMicros(), 3'600'000'005);
  EXPECT_TRUE(env.FileExists("/"));  // everything else is forwarded
}

// --- Subprocesses ---

SpawnOptions Cmd(std::vector<std::string> argv) {
  SpawnOptions o;
  o.argv = std::move(argv);
  return o;
}

std::unique_ptr<Subprocess> MustSpawn(const SpawnOptions& o) {
  Result<std::unique_ptr<Subprocess>> r = Env::Default().Spawn(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(r).value() : nullptr;
}

bool ProcessGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

TEST(SpawnTest, EchoToStdoutPipe) {
  SpawnOptions o = Cmd({"/bin/echo", "hello", "world"});
  o.stdout_spec = StdioSpec::Pipe();
  auto child = MustSpawn(o);
  ASSERT_NE(child, nullptr);
  EXPECT_GT(child->pid(), 0);
  EXPECT_FALSE(child->stdin_fd().valid());
  Result<std::string> out = ReadFdToEnd(child->stdout_fd().get(), 1 << 20);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "hello world\n");
  Result<ExitStatus> status = child->Wait();
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(status->success());
  EXPECT_EQ(status->ToString(), "exited with code 0");
  EXPECT_EQ(*child->Wait(), *status);  // cached
}

TEST(SpawnTest, MissingBinaryIsNotFoundFromSpawn) {
  Result<std::unique_ptr<Subprocess>> r = Env::Default().Spawn(Cmd({"/nonexistent/program"}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/program"), std::string::npos);
  r = Env::Default().Spawn(Cmd({"sovai-no-such-program-anywhere"}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("not found on PATH"), std::string::npos);
  EXPECT_EQ(Env::Default().Spawn(Cmd({})).status().code(), StatusCode::kInvalidArgument);
}

TEST(SpawnTest, ExecFailureInsideTheChildIsReported) {
  // A directory passes no PATH lookup: exec itself fails with EACCES in the child.
  Result<std::unique_ptr<Subprocess>> r = Env::Default().Spawn(Cmd({"/tmp"}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  EXPECT_NE(r.status().message().find("exec '/tmp'"), std::string::npos) << r.status();
  SpawnOptions o = Cmd({"/bin/true"});
  o.cwd = "/nonexistent/dir";
  r = Env::Default().Spawn(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("chdir '/nonexistent/dir'"), std::string::npos);
  o = Cmd({"/bin/true"});
  o.stdout_spec = StdioSpec::File("/nonexistent/dir/out");
  EXPECT_EQ(Env::Default().Spawn(o).status().code(), StatusCode::kNotFound);
}

TEST(SpawnTest, ExitCodes) {
  for (int code : {0, 1, 3, 255}) {
    auto child = MustSpawn(Cmd({"/bin/sh", "-c", "exit " + std::to_string(code)}));
    Result<ExitStatus> status = child->Wait(10'000);
    ASSERT_TRUE(status.ok());
    EXPECT_TRUE(status->exited);
    EXPECT_FALSE(status->signaled);
    EXPECT_EQ(status->code, code);
  }
}

TEST(SpawnTest, WaitTimeoutThenSignal) {
  auto child = MustSpawn(Cmd({"sleep", "5"}));
  int64_t start = Env::Default().NowMonotonicMicros();
  Result<ExitStatus> status = child->Wait(100);
  int64_t elapsed_ms = (Env::Default().NowMonotonicMicros() - start) / 1000;
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(elapsed_ms, 100);
  EXPECT_LT(elapsed_ms, 2000);
  EXPECT_EQ(child->Wait(0).status().code(), StatusCode::kDeadlineExceeded);  // still running
  ASSERT_TRUE(child->Signal(SIGTERM).ok());
  status = child->Wait(5000);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(status->signaled);
  EXPECT_EQ(status->signal, SIGTERM);
  EXPECT_FALSE(status->success());
  EXPECT_NE(status->ToString().find("killed by signal 15"), std::string::npos);
  EXPECT_EQ(child->Signal(SIGTERM).code(), StatusCode::kFailedPrecondition);  // reaped
}

TEST(SpawnTest, StdinPipeToCat) {
  SpawnOptions o = Cmd({"cat"});
  o.stdin_spec = StdioSpec::Pipe();
  o.stdout_spec = StdioSpec::Pipe();
  auto child = MustSpawn(o);
  ASSERT_TRUE(WriteFdFully(child->stdin_fd().get(), "line one\nline two\n").ok());
  child->stdin_fd().Reset();  // EOF
  EXPECT_EQ(*ReadFdToEnd(child->stdout_fd().get(), 1 << 20), "line one\nline two\n");
  EXPECT_TRUE(child->Wait()->success());
}

TEST(SpawnTest, WritingToAChildThatExitedIsAnErrorNotSigpipe) {
  SpawnOptions o = Cmd({"/bin/true"});
  o.stdin_spec = StdioSpec::Pipe();
  auto child = MustSpawn(o);
  ASSERT_TRUE(child->Wait()->success());
  Status s = WriteFdFully(child->stdin_fd().get(), std::string(1 << 20, 'x'));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Broken pipe"), std::string::npos) << s;
}

TEST(SpawnTest, EnvironmentAddAndReplace) {
  ::setenv("SOVAI_TEST_INHERITED", "inherited", 1);
  SpawnOptions o = Cmd({"/bin/sh", "-c", "echo \"$SOVAI_TEST_INHERITED:$SOVAI_TEST_ADDED\""});
  o.env["SOVAI_TEST_ADDED"] = "added";
  Result<CapturedRun> run = RunAndCapture(Env::Default(), o);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->stdout_text, "inherited:added\n");
  o.replace_env = true;
  run = RunAndCapture(Env::Default(), o);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->stdout_text, ":added\n");
  // With a replaced environment and no PATH, bare names still resolve via the default PATH.
  o = Cmd({"env"});
  o.replace_env = true;
  o.env["ONLY"] = "this";
  run = RunAndCapture(Env::Default(), o);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->stdout_text, "ONLY=this\n");
  o.env["BAD=NAME"] = "x";
  EXPECT_EQ(RunAndCapture(Env::Default(), o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EnvTest, SpawnCwdAndFileRedirection) {
  SpawnOptions o = Cmd({"/bin/sh", "-c", "pwd; echo err >&2; cat"});
  o.cwd = dir_;
  ASSERT_TRUE(env_.WriteFileAtomically(Path("in"), "from file\n").ok());
  o.stdin_spec = StdioSpec::File(Path("in"));
  o.stdout_spec = StdioSpec::File(Path("out"));
  o.stderr_spec = StdioSpec::MergeWithStdout();
  auto child = MustSpawn(o);
  ASSERT_TRUE(child->Wait()->success());
  char resolved[4096];
  ASSERT_NE(::realpath(dir_.c_str(), resolved), nullptr);
  EXPECT_EQ(Read(Path("out")), std::string(resolved) + "\nerr\nfrom file\n");
  // Append mode, and /dev/null for stdin (reads EOF at once).
  o.stdin_spec = StdioSpec::Null();
  o.stdout_spec = StdioSpec::File(Path("out"), /*append=*/true);
  o.stderr_spec = StdioSpec::Null();
  child = MustSpawn(o);
  ASSERT_TRUE(child->Wait()->success());
  EXPECT_EQ(Read(Path("out")), std::string(resolved) + "\nerr\nfrom file\n" + resolved + "\n");
}

TEST(SpawnTest, StdioWorksWhenTheParentHasFd0Closed) {
  // Pipe fds can land on 0..2 when the parent closed them; the child must still get the right ones.
  int saved = ::dup(0);
  ASSERT_GE(saved, 0);
  ::close(0);
  SpawnOptions o = Cmd({"cat"});
  o.stdin_spec = StdioSpec::Pipe();
  o.stdout_spec = StdioSpec::Pipe();
  Result<std::unique_ptr<Subprocess>> r = Env::Default().Spawn(o);
  ::dup2(saved, 0);
  ::close(saved);
  ASSERT_TRUE(r.ok()) << r.status();
  auto& child = *r;
  ASSERT_TRUE(WriteFdFully(child->stdin_fd().get(), "ok").ok());
  child->stdin_fd().Reset();
  EXPECT_EQ(*ReadFdToEnd(child->stdout_fd().get(), 100), "ok");
  EXPECT_TRUE(child->Wait()->success());
}

// The child-side steps Spawn and the sandbox share, run in a bare fork: fds 1 and 2 swapped
// (each one's source is the other's target) and a signal the parent ignored back to default.
TEST(ChildSetupTest, InstallChildFdsSwapsCrossedSourcesAndSignalsAreReset) {
  int first[2], second[2];
  ASSERT_EQ(::pipe2(first, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(second, O_CLOEXEC), 0);
  UniqueFd first_read(first[0]), first_write(first[1]);
  UniqueFd second_read(second[0]), second_write(second[1]);
  std::vector<std::string> argv = {"unused", "args"};
  std::vector<char*> pointers = ExecPointers(argv);
  ASSERT_EQ(pointers.size(), 3u);
  EXPECT_STREQ(pointers[1], "args");
  EXPECT_EQ(pointers[2], nullptr);

  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGUSR1, SIG_IGN);
    ResetSignalsInChild();
    struct sigaction now;
    if (::sigaction(SIGUSR1, nullptr, &now) != 0 || now.sa_handler != SIG_DFL) ::_exit(3);
    // fd 1 holds the second pipe and fd 2 the first; the sources cross them back.
    if (::dup2(second_write.get(), 1) < 0 || ::dup2(first_write.get(), 2) < 0) ::_exit(4);
    int sources[3] = {-1, 2, 1};
    if (!InstallChildFds(sources)) ::_exit(5);
    if (::write(1, "one", 3) != 3 || ::write(2, "two", 3) != 3) ::_exit(6);
    ::_exit(0);
  }
  first_write.Reset();
  second_write.Reset();
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(*ReadFdToEnd(first_read.get(), 100), "one");
  EXPECT_EQ(*ReadFdToEnd(second_read.get(), 100), "two");
}

TEST(SpawnTest, DestructorKillsAndReaps) {
  pid_t pid;
  {
    auto child = MustSpawn(Cmd({"sleep", "100"}));
    pid = child->pid();
    EXPECT_FALSE(ProcessGone(pid));
  }
  // Reaped, not a zombie: the pid no longer exists at all.
  EXPECT_TRUE(ProcessGone(pid));
}

TEST(SpawnTest, ProcessGroupSignalReachesDescendants) {
  SpawnOptions o = Cmd({"/bin/sh", "-c", "sleep 100 & echo $!; wait"});
  o.stdout_spec = StdioSpec::Pipe();
  o.new_process_group = true;
  auto child = MustSpawn(o);
  char buf[32] = {};
  ssize_t n = ::read(child->stdout_fd().get(), buf, sizeof(buf) - 1);
  ASSERT_GT(n, 0);
  pid_t grandchild = std::atoi(buf);
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(::getpgid(child->pid()), child->pid());
  EXPECT_EQ(::getpgid(grandchild), child->pid());
  ASSERT_TRUE(child->Signal(SIGKILL).ok());
  Result<ExitStatus> status = child->Wait(5000);
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(status->signaled);
  // The grandchild (re-parented to init or a subreaper) was killed too.
  for (int i = 0; i < 200 && !ProcessGone(grandchild); ++i) {
    // Dead but possibly not yet reaped by its new parent: check its state.
    std::string stat_path = "/proc/" + std::to_string(grandchild) + "/stat";
    Result<std::string> stat = Env::Default().ReadFile(stat_path);
    if (!stat.ok() || stat->find(") Z ") != std::string::npos) break;
    Env::Default().SleepForMicros(10'000);
  }
  Result<std::string> stat =
      Env::Default().ReadFile("/proc/" + std::to_string(grandchild) + "/stat");
  EXPECT_TRUE(!stat.ok() || stat->find(") Z ") != std::string::npos) << *stat;
}

TEST(SpawnTest, ConcurrentWaitAndSignal) {
  auto child = MustSpawn(Cmd({"sleep", "100"}));
  std::thread waiter([&] {
    Result<ExitStatus> status = child->Wait();  // blocks until the signal below
    ASSERT_TRUE(status.ok());
    EXPECT_EQ(status->signal, SIGKILL);
  });
  Env::Default().SleepForMicros(50'000);
  EXPECT_TRUE(child->Signal(SIGKILL).ok());
  waiter.join();
}

TEST(SpawnTest, ManyChildrenNoZombies) {
  std::vector<pid_t> pids;
  for (int i = 0; i < 20; ++i) {
    auto child = MustSpawn(Cmd({"/bin/true"}));
    pids.push_back(child->pid());
    if (i % 2 == 0) {
      EXPECT_TRUE(child->Wait()->success());
    }
    // Odd ones are destroyed without Wait: the destructor reaps them.
  }
  for (pid_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

TEST(RunAndCaptureTest, CapturesBothStreamsAndFeedsStdin) {
  // 1 MiB through cat in both directions: needs concurrent writing and reading to not deadlock.
  std::string input(1 << 20, 'q');
  Result<CapturedRun> run = RunAndCapture(
      Env::Default(), Cmd({"/bin/sh", "-c", "cat; echo done >&2; exit 4"}), input, 30'000);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->stdout_text, input);
  EXPECT_EQ(run->stderr_text, "done\n");
  EXPECT_EQ(run->exit.code, 4);
}

TEST(RunAndCaptureTest, TimeoutKillsTheChild) {
  int64_t start = Env::Default().NowMonotonicMicros();
  SpawnOptions o = Cmd({"/bin/sh", "-c", "echo started; sleep 30"});
  o.new_process_group = true;
  Result<CapturedRun> run = RunAndCapture(Env::Default(), o, "", 200);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(Env::Default().NowMonotonicMicros() - start, 5'000'000);
}

TEST(RunAndCaptureTest, OutputIsTruncatedAtTheLimit) {
  Result<CapturedRun> run = RunAndCapture(
      Env::Default(), Cmd({"/bin/sh", "-c", "head -c 100000 /dev/zero"}), "", 30'000, 1000);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->stdout_text.size(), 1000 + std::string_view("...[truncated]").size());
  EXPECT_TRUE(run->exit.success());
}

TEST(FaultInjectionEnvTest, CountsAndFailAlways) {
  FaultInjectionEnv env(Env::Default());
  env.FailAlways(FaultOp::kSpawn, UnavailableError("no fork today"));
  EXPECT_EQ(env.Spawn(Cmd({"/bin/true"})).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(env.Spawn(Cmd({"/bin/true"})).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(env.Count(FaultOp::kSpawn), 2);
  env.ClearFaults();
  auto child = env.Spawn(Cmd({"/bin/true"}));
  ASSERT_TRUE(child.ok());
  EXPECT_TRUE((*child)->Wait()->success());
  env.FailNth(FaultOp::kRead, 2);
  EXPECT_TRUE(env.ReadFile("/proc/self/stat", 1 << 20).ok());
  EXPECT_FALSE(env.ReadFile("/proc/self/stat", 1 << 20).ok());
  EXPECT_TRUE(env.ReadFile("/proc/self/stat", 1 << 20).ok());
  EXPECT_EQ(env.Count(FaultOp::kRead), 3);
}

}  // namespace
}  // namespace sovai::base
