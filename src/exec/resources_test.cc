#include "exec/resources.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace sovai::exec {
namespace {

// --- ParseNvidiaSmiCsv ---

TEST(ParseNvidiaSmiCsvTest, TwoGpus) {
  NvidiaSmiParse p = ParseNvidiaSmiCsv(
      "0, NVIDIA H200, 143771, GPU-8f6c1a2b-0000-1111-2222-333344445555\n"
      "1, NVIDIA H200, 143771, GPU-11111111-2222-3333-4444-555555555555\n");
  EXPECT_TRUE(p.warnings.empty());
  ASSERT_EQ(p.gpus.size(), 2u);
  EXPECT_EQ(p.gpus[0], (GpuInfo{0, "NVIDIA H200", 143771ull << 20,
                                "GPU-8f6c1a2b-0000-1111-2222-333344445555"}));
  EXPECT_EQ(p.gpus[1].index, 1);
  EXPECT_EQ(p.gpus[1].uuid, "GPU-11111111-2222-3333-4444-555555555555");
}

TEST(ParseNvidiaSmiCsvTest, EmptyOutputMeansNoGpus) {
  EXPECT_TRUE(ParseNvidiaSmiCsv("").gpus.empty());
  EXPECT_TRUE(ParseNvidiaSmiCsv("").warnings.empty());
  EXPECT_TRUE(ParseNvidiaSmiCsv("\n\n  \n").warnings.empty());
}

TEST(ParseNvidiaSmiCsvTest, CrLfBlankLinesAndSpacesAreTolerated) {
  NvidiaSmiParse p = ParseNvidiaSmiCsv("\r\n  3 ,Tesla T4,15360,GPU-abc\r\n\r\n");
  EXPECT_TRUE(p.warnings.empty());
  ASSERT_EQ(p.gpus.size(), 1u);
  EXPECT_EQ(p.gpus[0], (GpuInfo{3, "Tesla T4", 15360ull << 20, "GPU-abc"}));
}

TEST(ParseNvidiaSmiCsvTest, NameWithCommasIsKeptWhole) {
  NvidiaSmiParse p = ParseNvidiaSmiCsv("0, Fancy GPU, rev 2, 81920, GPU-x\n");
  ASSERT_EQ(p.gpus.size(), 1u);
  EXPECT_EQ(p.gpus[0].name, "Fancy GPU, rev 2");
  EXPECT_EQ(p.gpus[0].memory_bytes, 81920ull << 20);
}

TEST(ParseNvidiaSmiCsvTest, SortsByIndex) {
  NvidiaSmiParse p = ParseNvidiaSmiCsv("2, A, 1, GPU-2\n0, A, 1, GPU-0\n1, A, 1, GPU-1\n");
  ASSERT_EQ(p.gpus.size(), 3u);
  EXPECT_EQ(p.gpus[0].uuid, "GPU-0");
  EXPECT_EQ(p.gpus[2].uuid, "GPU-2");
}

TEST(ParseNvidiaSmiCsvTest, MalformedLinesAreSkippedWithAWarningEach) {
  NvidiaSmiParse p = ParseNvidiaSmiCsv(
      "0, NVIDIA A100, 40960, GPU-good\n"
      "garbage\n"                                         // too few fields
      "1, NVIDIA A100, [N/A], GPU-na\n"                   // memory not a number
      "x, NVIDIA A100, 40960, GPU-badindex\n"             // index not a number
      "-1, NVIDIA A100, 40960, GPU-neg\n"                 // negative index
      "2, , 40960, GPU-noname\n"                          // empty name
      "3, NVIDIA A100, 40960, \n"                         // empty uuid
      "0, NVIDIA A100, 40960, GPU-dup\n"                  // index seen before
      "4, NVIDIA A100, 99999999999999999999, GPU-huge\n"  // overflows
      "5, NVIDIA A100, 40960, GPU-also-good\n");
  ASSERT_EQ(p.gpus.size(), 2u);
  EXPECT_EQ(p.gpus[0].uuid, "GPU-good");
  EXPECT_EQ(p.gpus[1].uuid, "GPU-also-good");
  ASSERT_EQ(p.warnings.size(), 8u);
  EXPECT_NE(p.warnings[0].find("line 2"), std::string::npos) << p.warnings[0];
  EXPECT_NE(p.warnings[0].find("garbage"), std::string::npos) << p.warnings[0];
  EXPECT_NE(p.warnings[1].find("memory.total"), std::string::npos) << p.warnings[1];
  EXPECT_NE(p.warnings[6].find("duplicate index"), std::string::npos) << p.warnings[6];
}

TEST(ParseNvidiaSmiCsvTest, StopsAtTheGpuLimit) {
  std::string csv;
  for (size_t i = 0; i < kMaxGpusPerHost + 2; ++i) {
    csv += std::to_string(i) + ", G, 1, GPU-" + std::to_string(i) + "\n";
  }
  NvidiaSmiParse p = ParseNvidiaSmiCsv(csv);
  EXPECT_EQ(p.gpus.size(), kMaxGpusPerHost);
  EXPECT_EQ(p.warnings.size(), 2u);
}

// --- ParseMemInfoTotal ---

TEST(ParseMemInfoTotalTest, ReadsKibibytes) {
  auto total = ParseMemInfoTotal(
      "MemTotal:       24684084 kB\nMemFree:        16926112 kB\nMemAvailable:   1 kB\n");
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, 24684084ull * 1024);
  // Not necessarily the first line.
  EXPECT_EQ(*ParseMemInfoTotal("Foo: 1 kB\nMemTotal: 2 kB"), 2048u);
}

TEST(ParseMemInfoTotalTest, RejectsMissingOrMalformed) {
  EXPECT_EQ(ParseMemInfoTotal("MemFree: 1 kB\n").status().code(),
            base::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseMemInfoTotal("MemTotal: lots kB\n").ok());
  EXPECT_FALSE(ParseMemInfoTotal("MemTotal: 12 MB\n").ok());
  EXPECT_FALSE(ParseMemInfoTotal("MemTotal: 12\n").ok());
  EXPECT_FALSE(ParseMemInfoTotal("MemTotal: 99999999999999999999 kB\n").ok());
}

// --- DiscoverHost ---

class DiscoverHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/sovai_res_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { ASSERT_TRUE(env_.DeleteDirRecursive(dir_).ok()); }

  // A fake nvidia-smi: a shell script with `body`.
  std::string FakeNvidiaSmi(const std::string& body) {
    std::string path = base::JoinPath(dir_, "nvidia-smi");
    EXPECT_TRUE(env_.WriteFileAtomically(path, "#!/bin/sh\n" + body + "\n").ok());
    EXPECT_EQ(::chmod(path.c_str(), 0755), 0);
    return path;
  }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
};

TEST_F(DiscoverHostTest, CpusAndMemoryComeFromTheHost) {
  DiscoverOptions options;
  options.nvidia_smi = base::JoinPath(dir_, "absent-nvidia-smi");
  auto host = DiscoverHost(env_, options);
  ASSERT_TRUE(host.ok()) << host.status();
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(host->cpus, CPU_COUNT(&set));
  EXPECT_EQ(host->cpu_ids.size(), static_cast<size_t>(host->cpus));
  for (int id : host->cpu_ids) EXPECT_TRUE(CPU_ISSET(id, &set)) << id;
  EXPECT_GT(host->memory_bytes, 16ull << 20);
  // Absent nvidia-smi: no GPUs, and nothing to warn about.
  EXPECT_TRUE(host->gpus.empty());
  EXPECT_TRUE(host->warnings.empty()) << host->warnings[0];
}

TEST_F(DiscoverHostTest, MemoryFromAGivenMeminfo) {
  std::string meminfo = base::JoinPath(dir_, "meminfo");
  ASSERT_TRUE(env_.WriteFileAtomically(meminfo, "MemTotal: 1000 kB\n").ok());
  DiscoverOptions options;
  options.nvidia_smi = base::JoinPath(dir_, "absent");
  options.meminfo_path = meminfo;
  EXPECT_EQ(DiscoverHost(env_, options)->memory_bytes, 1000u * 1024);
  // Unreadable or malformed: sysinfo(2) still answers.
  options.meminfo_path = base::JoinPath(dir_, "missing");
  EXPECT_GT(DiscoverHost(env_, options)->memory_bytes, 16ull << 20);
}

TEST_F(DiscoverHostTest, GpusFromAFakeNvidiaSmi) {
  DiscoverOptions options;
  options.nvidia_smi = FakeNvidiaSmi(
      "[ \"$1\" = --query-gpu=index,name,memory.total,uuid ] || exit 2\n"
      "[ \"$2\" = --format=csv,noheader,nounits ] || exit 2\n"
      "echo '0, NVIDIA H200, 143771, GPU-aaaa'\n"
      "echo '1, NVIDIA H200, 143771, GPU-bbbb'");
  auto host = DiscoverHost(env_, options);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE(host->warnings.empty()) << host->warnings[0];
  ASSERT_EQ(host->gpus.size(), 2u);
  EXPECT_EQ(host->gpus[1], (GpuInfo{1, "NVIDIA H200", 143771ull << 20, "GPU-bbbb"}));
}

TEST_F(DiscoverHostTest, FailingNvidiaSmiMeansNoGpusAndAWarning) {
  DiscoverOptions options;
  options.nvidia_smi = FakeNvidiaSmi(
      "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\n"
      "exit 9");
  auto host = DiscoverHost(env_, options);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE(host->gpus.empty());
  ASSERT_EQ(host->warnings.size(), 1u);
  EXPECT_NE(host->warnings[0].find("exited with code 9"), std::string::npos) << host->warnings[0];
  EXPECT_NE(host->warnings[0].find("could not communicate"), std::string::npos)
      << host->warnings[0];
}

TEST_F(DiscoverHostTest, MalformedOutputKeepsTheGoodLines) {
  DiscoverOptions options;
  options.nvidia_smi = FakeNvidiaSmi("echo '0, A, 10, GPU-a'; echo 'oops'; echo '1, B, ?, GPU-b'");
  auto host = DiscoverHost(env_, options);
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_EQ(host->gpus.size(), 1u);
  EXPECT_EQ(host->gpus[0].uuid, "GPU-a");
  EXPECT_EQ(host->warnings.size(), 2u);
}

TEST_F(DiscoverHostTest, HungNvidiaSmiTimesOutWithAWarning) {
  DiscoverOptions options;
  options.nvidia_smi = FakeNvidiaSmi("exec sleep 30");
  options.nvidia_smi_timeout_ms = 200;
  auto host = DiscoverHost(env_, options);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE(host->gpus.empty());
  ASSERT_EQ(host->warnings.size(), 1u);
  EXPECT_NE(host->warnings[0].find("DEADLINE_EXCEEDED"), std::string::npos) << host->warnings[0];
}

TEST_F(DiscoverHostTest, NonExecutableNvidiaSmiIsAWarning) {
  std::string path = base::JoinPath(dir_, "nvidia-smi");
  ASSERT_TRUE(env_.WriteFileAtomically(path, "not a program").ok());
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  DiscoverOptions options;
  options.nvidia_smi = path;
  auto host = DiscoverHost(env_, options);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE(host->gpus.empty());
  EXPECT_EQ(host->warnings.size(), 1u);
}

}  // namespace
}  // namespace sovai::exec

namespace sovai::exec {
namespace {

TEST(ParseProcStatCpuTicksTest, SumsUserAndSystemTimeAfterACommandWithSpaces) {
  // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  auto ticks = ParseProcStatCpuTicks(
      "42 (my (odd) cmd) S 1 42 42 0 -1 4194560 100 0 0 0 250 "
      "50 0 0 20 0 1 0 123 456 789\n");
  ASSERT_TRUE(ticks.ok()) << ticks.status();
  EXPECT_EQ(*ticks, 300u);
}

TEST(ParseProcStatCpuTicksTest, RejectsMalformedLines) {
  EXPECT_FALSE(ParseProcStatCpuTicks("").ok());
  EXPECT_FALSE(ParseProcStatCpuTicks("42 cmd S 1").ok());
  EXPECT_FALSE(ParseProcStatCpuTicks("42 (cmd) S 1 2 3").ok());
  EXPECT_FALSE(ParseProcStatCpuTicks("42 (cmd) S 1 42 42 0 -1 0 0 0 0 0 x y 0").ok());
}

TEST(MeasureProcessesTest, MeasuresThisProcessAndSkipsMissingPids) {
  auto usage = MeasureProcesses({::getpid(), 0x7ffffff0});
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_GT(usage->rss_bytes, 1u << 20);  // a test binary holds more than a MiB resident
  auto none = MeasureProcesses({0x7ffffff0});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->rss_bytes, 0u);
  EXPECT_EQ(none->cpu_millis, 0u);
}

}  // namespace
}  // namespace sovai::exec
