#include "base/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/limits.h"
#include "base/strings.h"

namespace sovai::base {
namespace {

constexpr int64_t kFixedTime = 1764424800123000;  // 2025-11-29T14:00:00.123Z

// Sends log output to a temporary file for the duration of a test; restores stderr afterwards.
class LogCapture {
 public:
  explicit LogCapture(LogFormat format, LogLevel level = LogLevel::kDebug) {
    char name[] = "/tmp/sovai_log_test_XXXXXX";
    fd_ = ::mkstemp(name);
    EXPECT_GE(fd_, 0);
    ::unlink(name);
    ConfigureLogging({.level = level, .format = format, .fd = fd_, .now_unix_micros = [] {
                        return kFixedTime;
                      }});
  }
  ~LogCapture() {
    ConfigureLogging({});
    ::close(fd_);
  }
  std::string Text() const {
    std::string out;
    char buf[4096];
    ssize_t n;
    off_t offset = 0;
    while ((n = ::pread(fd_, buf, sizeof(buf), offset)) > 0) {
      out.append(buf, static_cast<size_t>(n));
      offset += n;
    }
    return out;
  }
  std::vector<std::string> Lines() const {
    std::vector<std::string> lines;
    std::string text = Text();
    for (std::string_view line : Split(text, '\n', /*skip_empty=*/true)) {
      lines.emplace_back(line);
    }
    return lines;
  }

 private:
  int fd_ = -1;
};

TEST(LogTest, HumanFormat) {
  LogCapture capture(LogFormat::kHuman);
  int line = __LINE__ + 1;
  SOVAI_LOG(INFO).With("bucket", "data").With("size_bytes", 5) << "bucket "
                                                               << "created";
  EXPECT_EQ(capture.Text(), "2025-11-29T14:00:00.123Z INFO  log_test.cc:" + std::to_string(line) +
                                "] bucket created bucket=data size_bytes=5\n");
}

TEST(LogTest, HumanFormatLevelsAndQuoting) {
  LogCapture capture(LogFormat::kHuman);
  SOVAI_LOG(DEBUG) << "d";
  SOVAI_LOG(WARNING).With("path", "a b").With("empty", "").With("ok", true) << "two\nlines";
  SOVAI_LOG(ERROR).With("status", NotFoundError("gone")) << "e";
  std::vector<std::string> lines = capture.Lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find(" DEBUG log_test.cc:"), std::string::npos);
  EXPECT_NE(lines[1].find(" WARN  log_test.cc:"), std::string::npos);
  // The newline is escaped: one statement, one line.
  EXPECT_NE(lines[1].find("] two\\nlines path=\"a b\" empty=\"\" ok=true"), std::string::npos)
      << lines[1];
  EXPECT_NE(lines[2].find(" ERROR log_test.cc:"), std::string::npos);
  EXPECT_NE(lines[2].find("status=\"NOT_FOUND: gone\""), std::string::npos) << lines[2];
}

TEST(LogTest, JsonFormat) {
  LogCapture capture(LogFormat::kJson);
  int line = __LINE__ + 1;
  SOVAI_LOG(INFO)
          .With("bucket", "data")
          .With("n", -3)
          .With("big", uint64_t{1} << 63)
          .With("ok", false)
          .With("ratio", 0.5)
      << "created";
  std::vector<std::string> lines = capture.Lines();
  ASSERT_EQ(lines.size(), 1u);
  nlohmann::json j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["ts"], "2025-11-29T14:00:00.123Z");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["msg"], "created");
  EXPECT_EQ(j["file"], "log_test.cc");
  EXPECT_EQ(j["line"], line);
  EXPECT_EQ(j["bucket"], "data");
  EXPECT_EQ(j["n"], -3);
  EXPECT_EQ(j["big"].get<uint64_t>(), uint64_t{1} << 63);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["ratio"], 0.5);
  // Built-in keys come first, in a fixed order.
  EXPECT_EQ(lines[0].rfind("{\"ts\":\"2025-11-29T14:00:00.123Z\",\"level\":\"info\",\"msg\":", 0),
            0u);
}

TEST(LogTest, JsonEscapesEverything) {
  LogCapture capture(LogFormat::kJson);
  std::string nasty = "quote\" backslash\\ newline\n tab\t nul";
  nasty.push_back('\0');
  nasty += " ctl\x01 bad-utf8\xFF end";
  SOVAI_LOG(WARNING).With("key\"with\nstuff", nasty).With("msg", "shadow") << nasty;
  std::vector<std::string> lines = capture.Lines();
  ASSERT_EQ(lines.size(), 1u);  // the raw newline did not split the line
  nlohmann::json j = nlohmann::json::parse(lines[0]);
  std::string expected = nasty;
  expected.replace(expected.find('\xFF'), 1, "\xEF\xBF\xBD");  // U+FFFD
  EXPECT_EQ(j["msg"], expected);
  EXPECT_EQ(j["key\"with\nstuff"], expected);
  EXPECT_EQ(j["_msg"], "shadow");  // reserved key renamed, built-in kept
  EXPECT_EQ(j["level"], "warning");
}

TEST(LogTest, NonFiniteDoublesStayValidJson) {
  LogCapture capture(LogFormat::kJson);
  SOVAI_LOG(INFO).With("nan", 0.0 / 0.0).With("inf", 1.0 / 0.0) << "x";
  nlohmann::json j = nlohmann::json::parse(capture.Lines().at(0));
  EXPECT_EQ(j["nan"], "nan");
  EXPECT_EQ(j["inf"], "inf");
}

TEST(LogTest, LevelFilteringSkipsEvaluation) {
  LogCapture capture(LogFormat::kHuman, LogLevel::kWarning);
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  SOVAI_LOG(DEBUG) << count();
  SOVAI_LOG(INFO).With("n", count()) << "hidden";
  SOVAI_LOG(WARNING) << "shown " << count();
  SOVAI_LOG(ERROR) << "shown too";
  EXPECT_EQ(evaluated, 1);
  std::vector<std::string> lines = capture.Lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("shown 1"), std::string::npos);
  EXPECT_FALSE(IsLogLevelEnabled(LogLevel::kInfo));
  EXPECT_TRUE(IsLogLevelEnabled(LogLevel::kError));
}

TEST(LogTest, LongMessagesAndManyFieldsAreBounded) {
  LogCapture capture(LogFormat::kJson);
  {
    internal::LogMessage m(LogLevel::kInfo, __FILE__, __LINE__);
    m << std::string(kMaxLogMessageBytes + 100, 'x');
    m.With("big", std::string(kMaxLogFieldBytes + 1, 'y'));
    for (size_t i = 0; i < kMaxLogFields + 5; ++i) m.With("f" + std::to_string(i), i);
  }
  nlohmann::json j = nlohmann::json::parse(capture.Lines().at(0));
  std::string message = j["msg"];
  EXPECT_EQ(message.size(), kMaxLogMessageBytes + std::string_view("...[truncated]").size());
  EXPECT_TRUE(message.ends_with("...[truncated]"));
  EXPECT_TRUE(j["big"].get<std::string>().ends_with("...[truncated]"));
  EXPECT_EQ(j["fields_dropped"], 6);  // "big" took one of the kMaxLogFields slots
}

TEST(LogTest, ConcurrentLinesNeverInterleave) {
  LogCapture capture(LogFormat::kJson);
  constexpr int kThreads = 4;
  constexpr int kLinesPerThread = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kLinesPerThread; ++i) {
        SOVAI_LOG(INFO).With("thread", t).With("i", i) << std::string(200, 'a' + t);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::vector<std::string> lines = capture.Lines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLinesPerThread));
  std::vector<int> next(kThreads, 0);
  for (const std::string& line : lines) {
    nlohmann::json j = nlohmann::json::parse(line);  // throws (fails the test) if torn
    int t = j["thread"];
    EXPECT_EQ(j["i"], next[t]++);  // each thread's lines stay in order
    EXPECT_EQ(j["msg"], std::string(200, 'a' + t));
  }
}

TEST(LogTest, ParseFlags) {
  EXPECT_EQ(*ParseLogLevel("DEBUG"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("warn"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("Warning"), LogLevel::kWarning);
  EXPECT_EQ(ParseLogLevel("loud").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_FALSE(ParseLogFormat("xml").ok());
  EXPECT_EQ(LogLevelName(LogLevel::kError), "error");
}

}  // namespace
}  // namespace sovai::base
