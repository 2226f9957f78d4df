#include "cli/client/progress.h"

#include <gtest/gtest.h>

#include "cli/client/table.h"

namespace sovai::cli::client {
namespace {

TEST(ProgressTest, RenderLine) {
  EXPECT_EQ(Progress::RenderLine(0, 1000, 0, 2, 0, "a.bin", 200),
            "[>                   ]   0%  0 B/1000 B  0/2 files  0 B/s  a.bin");
  EXPECT_EQ(Progress::RenderLine(500, 1000, 1, 2, 2048, "b", 200),
            "[==========>         ]  50%  500 B/1000 B  1/2 files  2.0 KiB/s  b");
  EXPECT_EQ(Progress::RenderLine(1000, 1000, 2, 2, 0, "", 200),
            "[====================] 100%  1000 B/1000 B  2/2 files  0 B/s");
  // Empty files: progress by file count.
  EXPECT_EQ(Progress::RenderLine(0, 0, 1, 2, 0, "", 200).substr(0, 28),
            "[==========>         ]  50% ");
  // Never wider than the terminal, and never cut inside a UTF-8 character.
  std::string narrow = Progress::RenderLine(1, 2, 0, 1, 0, "données-é.bin", 62);
  EXPECT_LE(DisplayWidth(narrow), 61u);
  EXPECT_EQ(DisplayWidth(narrow), 61u);
}

class CountingConsole : public BufferConsole {
 public:
  bool ErrIsTerminal() const override { return true; }
};

TEST(ProgressTest, ProgressEnvCountsWritesAndReadsCappedAtTheFileSize) {
  char tmpl[] = "/tmp/sovai-cli-progress-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  base::ManualClock clock;
  base::ManualClockEnv clock_env(base::Env::Default(), clock);
  CountingConsole console;
  Progress progress(console, clock_env, /*enabled=*/true);
  ProgressEnv env(clock_env, progress);
  progress.Start(1, 10);
  progress.BeginFile("f", 10);
  {
    auto file = env.NewWritableFile(dir + "/f", base::WriteMode::kTruncate);
    ASSERT_TRUE(file.ok());
    clock.Advance(1'000'000);  // past the redraw interval
    ASSERT_TRUE((*file)->Append("12345").ok());
    clock.Advance(1'000'000);
    ASSERT_TRUE((*file)->Append("67890").ok());
    ASSERT_TRUE((*file)->Close().ok());
  }
  EXPECT_NE(console.err().find(" 50%"), std::string::npos) << console.err();
  EXPECT_NE(console.err().find("100%"), std::string::npos) << console.err();
  console.Clear();
  // Reading it again (a retried upload) does not go past 100%.
  auto read = env.NewRandomAccessFile(dir + "/f");
  ASSERT_TRUE(read.ok());
  char buf[16];
  clock.Advance(1'000'000);
  ASSERT_EQ(*(*read)->ReadAt(0, std::span<char>(buf, sizeof buf)), 10u);
  EXPECT_EQ(console.err().find("200%"), std::string::npos);
  progress.EndFile();
  progress.Finish();
  EXPECT_EQ(console.err().substr(console.err().size() - 4), "\r\x1b[K");
  base::Env::Default().DeleteDirRecursive(dir).IgnoreError();
}

TEST(ProgressTest, DisabledDrawsNothing) {
  BufferConsole console;
  Progress progress(console, base::Env::Default(), /*enabled=*/false);
  progress.Start(3, 100);
  progress.BeginFile("x", 100);
  progress.AddBytes(100);
  progress.EndFile();
  progress.Finish();
  EXPECT_EQ(console.err(), "");
}

}  // namespace
}  // namespace sovai::cli::client
