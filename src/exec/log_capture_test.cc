#include "exec/log_capture.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "base/strings.h"
#include "base/time.h"

namespace sovai::exec {
namespace {

using base::Status;
using namespace std::string_view_literals;

constexpr int64_t kT0 = 1'700'000'000'000'000;  // 2023-11-14T22:13:20Z

// --- Format and parse ---

TEST(LogRecordTest, FormatIsTimestampSourceLine) {
  EXPECT_EQ(FormatLogRecord(kT0 + 123456, LogSource::kStdout, false, "epoch 1 loss 2.31"),
            "2023-11-14T22:13:20.123456Z stdout epoch 1 loss 2.31\n");
  EXPECT_EQ(FormatLogRecord(kT0, LogSource::kStderr, true, "part"),
            "2023-11-14T22:13:20.000000Z stderr+ part\n");
  EXPECT_EQ(FormatLogRecord(kT0, LogSource::kSovai, false, ""),
            "2023-11-14T22:13:20.000000Z sovai \n");
}

TEST(LogRecordTest, ParseRoundTrips) {
  for (LogSource source : {LogSource::kStdout, LogSource::kStderr, LogSource::kSovai}) {
    for (bool continued : {false, true}) {
      std::string line = "a b  c\t\xff\r";
      auto parsed = ParseLogRecord(FormatLogRecord(kT0 + 7, source, continued, line));
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_EQ(*parsed, (LogRecord{kT0 + 7, source, continued, line}));
    }
  }
  // Without the trailing newline too.
  EXPECT_EQ(ParseLogRecord("2023-11-14T22:13:20.000000Z stdout x")->line, "x");
  EXPECT_EQ(ParseLogRecord("2023-11-14T22:13:20.000000Z stdout ")->line, "");
}

TEST(LogRecordTest, ParseRejectsMalformedRecords) {
  for (std::string_view bad :
       {"", "2023-11-14T22:13:20.000000Z", "2023-11-14T22:13:20.000000Z stdout",
        "yesterday stdout x", "2023-11-14T22:13:20.000000Z stdin x",
        "2023-11-14T22:13:20.000000Z stdout++ x", "2023-11-14T22:13:20.000000Z stdout a\nb"}) {
    auto parsed = ParseLogRecord(bad);
    EXPECT_EQ(parsed.status().code(), base::StatusCode::kInvalidArgument) << bad;
  }
}

// --- Files ---

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/sovai_log_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = base::JoinPath(dir_, "job.log");
  }
  void TearDown() override { ASSERT_TRUE(env_.DeleteDirRecursive(dir_).ok()); }

  std::string Contents() {
    auto text = env_.ReadFile(path_);
    return text.ok() ? *text : "";
  }
  std::vector<LogRecord> Records() {
    std::vector<LogRecord> out;
    const std::string text = Contents();  // outlives the views Split returns
    for (std::string_view line : base::Split(text, '\n', /*skip_empty=*/true)) {
      auto record = ParseLogRecord(line);
      EXPECT_TRUE(record.ok()) << record.status();
      if (record.ok()) out.push_back(*record);
    }
    return out;
  }
  // Waits (up to 10 s) until the log holds `n` records.
  void AwaitRecords(size_t n) {
    for (int i = 0; i < 1000 && Records().size() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  base::Env& env_ = base::Env::Default();
  base::ManualClock clock_{kT0};
  base::ManualClockEnv clock_env_{env_, clock_};
  std::string dir_;
  std::string path_;
};

TEST_F(LogTest, WriterWritesOneRecordPerLine) {
  auto writer = LogWriter::Open(clock_env_, path_);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Write(LogSource::kSovai, "volume sync: 12 files").ok());
  clock_.Advance(5);
  ASSERT_TRUE((*writer)->Write(LogSource::kSovai, "two\nlines\n").ok());
  ASSERT_TRUE((*writer)->Write(LogSource::kStdout, "").ok());
  ASSERT_TRUE((*writer)->WriteRecord(LogSource::kStderr, true, "raw").ok());
  EXPECT_EQ(Contents(),
            "2023-11-14T22:13:20.000000Z sovai volume sync: 12 files\n"
            "2023-11-14T22:13:20.000005Z sovai two\n"
            "2023-11-14T22:13:20.000005Z sovai lines\n"
            "2023-11-14T22:13:20.000005Z stdout \n"
            "2023-11-14T22:13:20.000005Z stderr+ raw\n");
  EXPECT_TRUE((*writer)->Sync().ok());
}

TEST_F(LogTest, WriterAppendsToAnExistingLog) {
  ASSERT_TRUE((*LogWriter::Open(clock_env_, path_))->Write(LogSource::kSovai, "one").ok());
  ASSERT_TRUE((*LogWriter::Open(clock_env_, path_))->Write(LogSource::kSovai, "two").ok());
  ASSERT_EQ(Records().size(), 2u);
  EXPECT_EQ(Records()[1].line, "two");
}

TEST_F(LogTest, LongLinesAreSplitWithContinuationMarkers) {
  auto writer = *LogWriter::Open(clock_env_, path_);
  std::string line = std::string(kMaxLogLineBytes, 'a') + std::string(kMaxLogLineBytes, 'b') + "c";
  ASSERT_TRUE(writer->Write(LogSource::kStdout, line).ok());
  std::vector<LogRecord> records = Records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_TRUE(records[0].continued);
  EXPECT_TRUE(records[1].continued);
  EXPECT_FALSE(records[2].continued);
  EXPECT_EQ(records[0].line + records[1].line + records[2].line, line);
  EXPECT_EQ(records[0].line.size(), kMaxLogLineBytes);
  // A line of exactly the limit is one record.
  ASSERT_TRUE(writer->Write(LogSource::kStdout, std::string(kMaxLogLineBytes, 'x')).ok());
  EXPECT_EQ(Records().size(), 4u);
  EXPECT_FALSE(Records()[3].continued);
}

TEST_F(LogTest, SplitsDoNotCutUtf8Characters) {
  auto writer = *LogWriter::Open(clock_env_, path_);
  // "é" (2 bytes) straddles the limit; "€" (3 bytes) too in the second case.
  std::string two = std::string(kMaxLogLineBytes - 1, 'a') + "\xC3\xA9" + "z";
  std::string three = std::string(kMaxLogLineBytes - 2, 'a') + "\xE2\x82\xAC" + "z";
  ASSERT_TRUE(writer->Write(LogSource::kStdout, two).ok());
  ASSERT_TRUE(writer->Write(LogSource::kStdout, three).ok());
  std::vector<LogRecord> records = Records();
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].line.size(), kMaxLogLineBytes - 1);
  EXPECT_EQ(records[1].line, "\xC3\xA9z");
  EXPECT_EQ(records[2].line.size(), kMaxLogLineBytes - 2);
  EXPECT_EQ(records[3].line, "\xE2\x82\xACz");
  // Bytes that are not UTF-8 are cut exactly at the limit.
  std::string binary(kMaxLogLineBytes + 3, '\x80');
  ASSERT_TRUE(writer->Write(LogSource::kStdout, binary).ok());
  records = Records();
  ASSERT_EQ(records.size(), 6u);
  EXPECT_EQ(records[4].line.size(), kMaxLogLineBytes);
}

// --- Capture ---

struct Pipe {
  base::UniqueFd read;
  base::UniqueFd write;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    read.Reset(fds[0]);
    write.Reset(fds[1]);
  }
  void Put(std::string_view data) { EXPECT_TRUE(base::WriteFdFully(write.get(), data).ok()); }
};

TEST_F(LogTest, CapturesBothStreamsWithTheLastPartialLine) {
  std::shared_ptr<LogWriter> writer = *LogWriter::Open(env_, path_);
  Pipe out, err;
  auto capture = LogCapture::Start(writer, std::move(out.read), std::move(err.read));
  ASSERT_TRUE(capture.ok()) << capture.status();
  out.Put("first\nsec");
  out.Put("ond\n");
  AwaitRecords(2);
  err.Put("oops\n");
  AwaitRecords(3);
  out.Put("no newline at the end");
  constexpr std::string_view kOdd = "bad\xff\xfe bytes\0kept\r"sv;  // not UTF-8, NUL, CR
  err.Put(std::string(kOdd) + "\n");
  out.write.Reset();
  err.write.Reset();
  ASSERT_TRUE((*capture)->Finish().ok());
  std::vector<LogRecord> records = Records();
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(records[0].line, "first");
  EXPECT_EQ(records[1].line, "second");
  EXPECT_EQ(records[2].source, LogSource::kStderr);
  EXPECT_EQ(records[2].line, "oops");
  // The last two arrived together; within a stream the order is kept.
  std::vector<std::string> rest = {records[3].line, records[4].line};
  std::sort(rest.begin(), rest.end());
  EXPECT_EQ(rest[0], kOdd);
  EXPECT_EQ(rest[1], "no newline at the end");
  for (const LogRecord& r : records) EXPECT_FALSE(r.continued);
  for (size_t i = 1; i < records.size(); ++i) {
    EXPECT_LE(records[i - 1].unix_micros, records[i].unix_micros);
  }
  EXPECT_EQ((*capture)->last_stderr_line(), kOdd);
}

TEST_F(LogTest, CaptureSplitsLongLines) {
  std::shared_ptr<LogWriter> writer = *LogWriter::Open(env_, path_);
  Pipe out;
  auto capture = *LogCapture::Start(writer, std::move(out.read), base::UniqueFd());
  std::string line(2 * kMaxLogLineBytes + 100, 'x');
  std::thread feeder([&] {
    out.Put(line + "\n");
    out.write.Reset();
  });
  ASSERT_TRUE(capture->Finish().ok());
  feeder.join();
  std::vector<LogRecord> records = Records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_TRUE(records[0].continued);
  EXPECT_TRUE(records[1].continued);
  EXPECT_FALSE(records[2].continued);
  EXPECT_EQ(records[2].line.size(), 100u);
}

TEST_F(LogTest, UnfinishedLinesAreFlushedForLiveReaders) {
  std::shared_ptr<LogWriter> writer = *LogWriter::Open(env_, path_);
  Pipe out;
  LogCaptureOptions options;
  options.partial_flush_ms = 50;
  auto capture = *LogCapture::Start(writer, std::move(out.read), base::UniqueFd(), options);
  out.Put("downloading... ");
  AwaitRecords(1);
  std::vector<LogRecord> records = Records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_TRUE(records[0].continued);
  EXPECT_EQ(records[0].line, "downloading... ");
  out.Put("done\n");
  out.write.Reset();
  ASSERT_TRUE(capture->Finish().ok());
  records = Records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_FALSE(records[1].continued);
  EXPECT_EQ(records[1].line, "done");
}

TEST_F(LogTest, PlatformRecordsInterleaveWholeWithTheCapture) {
  std::shared_ptr<LogWriter> writer = *LogWriter::Open(env_, path_);
  Pipe out;
  auto capture = *LogCapture::Start(writer, std::move(out.read), base::UniqueFd());
  constexpr int kLines = 2000;
  std::thread workload([&] {
    for (int i = 0; i < kLines; ++i) out.Put("out " + std::to_string(i) + "\n");
    out.write.Reset();
  });
  // A second writer on the same file, as another part of the platform might open.
  std::unique_ptr<LogWriter> other = *LogWriter::Open(env_, path_);
  for (int i = 0; i < kLines; ++i) {
    LogWriter& w = i % 2 == 0 ? *writer : *other;
    ASSERT_TRUE(w.Write(LogSource::kSovai, "note " + std::to_string(i)).ok());
  }
  workload.join();
  ASSERT_TRUE(capture->Finish().ok());
  int next_out = 0, next_note = 0;
  for (const LogRecord& r : Records()) {
    if (r.source == LogSource::kStdout) {
      EXPECT_EQ(r.line, "out " + std::to_string(next_out++));
    } else {
      EXPECT_EQ(r.line, "note " + std::to_string(next_note++));
    }
  }
  EXPECT_EQ(next_out, kLines);
  EXPECT_EQ(next_note, kLines);
}

TEST_F(LogTest, WriteErrorsAreReportedButThePipeIsDrained) {
  base::FaultInjectionEnv faulty(env_);
  std::shared_ptr<LogWriter> writer = *LogWriter::Open(faulty, path_);
  faulty.FailAlways(base::FaultOp::kAppend, base::ResourceExhaustedError("disk full"));
  Pipe out;
  auto capture = *LogCapture::Start(writer, std::move(out.read), base::UniqueFd());
  // Far more than a pipe buffer: a stalled reader would block this writer forever.
  std::string megabyte(1 << 20, 'x');
  for (int i = 0; i < 4; ++i) out.Put(megabyte + "\n");
  out.write.Reset();
  Status finished = capture->Finish();
  EXPECT_EQ(finished.code(), base::StatusCode::kResourceExhausted) << finished;
  EXPECT_EQ(capture->Finish(), finished);  // again, the same
}

TEST_F(LogTest, DestroyingACaptureStopsItWithoutEndOfFile) {
  std::shared_ptr<LogWriter> writer = *LogWriter::Open(env_, path_);
  Pipe out;
  auto capture = *LogCapture::Start(writer, std::move(out.read), base::UniqueFd());
  out.Put("line\n");
  AwaitRecords(1);
  capture.reset();  // the write end is still open: must not hang
  EXPECT_EQ(Records().size(), 1u);
}

// --- ReadLog ---

TEST_F(LogTest, ReadLogPagesThroughWholeRecords) {
  auto writer = *LogWriter::Open(clock_env_, path_);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(writer->Write(LogSource::kStdout, "line " + std::to_string(i)).ok());
  }
  const std::string all = Contents();
  std::string collected;
  uint64_t offset = 0;
  for (int reads = 0; reads < 100; ++reads) {
    auto chunk = ReadLog(env_, path_, offset, 100);
    ASSERT_TRUE(chunk.ok()) << chunk.status();
    EXPECT_EQ(chunk->size_bytes, all.size());
    if (chunk->data.empty()) break;
    EXPECT_LE(chunk->data.size(), 100u);
    EXPECT_TRUE(chunk->data.ends_with('\n'));
    EXPECT_EQ(chunk->next_offset, offset + chunk->data.size());
    collected += chunk->data;
    offset = chunk->next_offset;
  }
  EXPECT_EQ(collected, all);
  // At the end: nothing, and the same offset to poll again.
  auto end = ReadLog(env_, path_, all.size(), 100);
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(end->data.empty());
  EXPECT_EQ(end->next_offset, all.size());
}

TEST_F(LogTest, ReadLogFollowsAGrowingFileAndSkipsAnUnfinishedRecord) {
  ASSERT_TRUE(env_.WriteFileAtomically(path_, "").ok());
  auto writer = *LogWriter::Open(clock_env_, path_);
  ASSERT_TRUE(writer->Write(LogSource::kStdout, "one").ok());
  auto first = *ReadLog(env_, path_, 0, 1 << 20);
  EXPECT_EQ(ParseLogRecord(first.data)->line, "one");
  // A record being written (no newline yet) is not returned.
  auto file = *env_.NewWritableFile(path_, base::WriteMode::kAppend);
  ASSERT_TRUE(file->Append("2023-11-14T22:13:20.000000Z stdout hal").ok());
  auto partial = *ReadLog(env_, path_, first.next_offset, 1 << 20);
  EXPECT_TRUE(partial.data.empty());
  EXPECT_EQ(partial.next_offset, first.next_offset);
  ASSERT_TRUE(file->Append("f\n").ok());
  auto rest = *ReadLog(env_, path_, first.next_offset, 1 << 20);
  EXPECT_EQ(ParseLogRecord(rest.data)->line, "half");
}

TEST_F(LogTest, ReadLogReturnsARecordLongerThanMaxBytesWhole) {
  auto writer = *LogWriter::Open(clock_env_, path_);
  ASSERT_TRUE(writer->Write(LogSource::kStdout, std::string(5000, 'z')).ok());
  ASSERT_TRUE(writer->Write(LogSource::kStdout, "short").ok());
  auto chunk = *ReadLog(env_, path_, 0, 10);
  EXPECT_EQ(ParseLogRecord(chunk.data)->line, std::string(5000, 'z'));
  auto next = *ReadLog(env_, path_, chunk.next_offset, 10);
  EXPECT_EQ(ParseLogRecord(next.data)->line, "short");
}

TEST_F(LogTest, ReadLogRejectsBadRequests) {
  auto writer = *LogWriter::Open(clock_env_, path_);
  ASSERT_TRUE(writer->Write(LogSource::kStdout, "hello").ok());
  const uint64_t size = Contents().size();
  EXPECT_EQ(ReadLog(env_, path_, 0, 0).status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadLog(env_, path_, size + 1, 100).status().code(), base::StatusCode::kOutOfRange);
  Status middle = ReadLog(env_, path_, 3, 100).status();
  EXPECT_EQ(middle.code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(middle.message().find("not the start of a record"), std::string::npos) << middle;
  EXPECT_EQ(ReadLog(env_, base::JoinPath(dir_, "missing.log"), 0, 100).status().code(),
            base::StatusCode::kNotFound);
}

TEST_F(LogTest, ReadLogOfAFileWithoutRecordsIsDataLoss) {
  ASSERT_TRUE(env_.WriteFileAtomically(path_, std::string(kMaxLogRecordBytes + 10, 'q')).ok());
  EXPECT_EQ(ReadLog(env_, path_, 0, 100).status().code(), base::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace sovai::exec
