#include "cli/client/log_printer.h"

#include <gtest/gtest.h>

namespace sovai::cli::client {
namespace {

constexpr char kLog[] =
    "2026-11-29T14:03:05.100000Z sovai volume sync: 12 files\n"
    "2026-11-29T14:03:06.514277Z stdout epoch 1 step 10 loss 2.3101\n"
    "2026-11-29T14:03:06.514301Z stderr warning: no pad token\n"
    "2026-11-29T14:03:07.000012Z stdout+ Downloading model: 45%\n"
    "2026-11-29T14:03:09.843112Z stdout  done\n"
    "2026-11-29T14:09:41.002004Z sovai workload exited with code 0\n";

TEST(ParseLogRecordTest, SplitsTheFields) {
  auto r = ParseLogRecord("2026-11-29T14:03:07.000012Z stdout+ Downloading:  45%");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->timestamp, "2026-11-29T14:03:07.000012Z");
  EXPECT_EQ(r->source, "stdout");
  EXPECT_TRUE(r->continued);
  EXPECT_EQ(r->text, "Downloading:  45%");
  auto empty = ParseLogRecord("2026-11-29T14:03:07Z stderr ");
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->text, "");
  EXPECT_FALSE(empty->continued);
  // A later source still parses (the printer skips it); garbage does not.
  EXPECT_TRUE(ParseLogRecord("2026-11-29T14:03:07Z gpu 80%").has_value());
  EXPECT_FALSE(ParseLogRecord("{\"type\":\"urn:sovai:problem:not-found\"}").has_value());
  EXPECT_FALSE(ParseLogRecord("2026-11-29T14:03:07Z stdout").has_value());
  EXPECT_FALSE(ParseLogRecord("yesterday stdout hello").has_value());
  EXPECT_FALSE(ParseLogRecord("2026-11-29T14:03:07Z STDOUT x").has_value());
}

TEST(LogPrinterTest, PrintsTextJoiningContinuations) {
  BufferConsole console;
  LogPrinter printer(console, {});
  printer.Feed(kLog);
  printer.Finish();
  EXPECT_EQ(console.out(),
            "volume sync: 12 files\n"
            "epoch 1 step 10 loss 2.3101\n"
            "warning: no pad token\n"
            "Downloading model: 45% done\n"
            "workload exited with code 0\n");
  EXPECT_EQ(printer.consumed_bytes(), std::string_view(kLog).size());
}

TEST(LogPrinterTest, TimestampsPrintRecordsAsTheyAre) {
  BufferConsole console;
  LogPrinter printer(console, {.timestamps = true});
  printer.Feed(kLog);
  printer.Finish();
  EXPECT_EQ(console.out(), kLog);
}

TEST(LogPrinterTest, PiecesSplitAnywhereGiveTheSameOutput) {
  BufferConsole whole;
  LogPrinter reference(whole, {});
  reference.Feed(kLog);
  reference.Finish();
  const std::string log = kLog;
  for (size_t step : {1, 2, 7, 33, 100}) {
    BufferConsole console;
    LogPrinter printer(console, {});
    for (size_t i = 0; i < log.size(); i += step) printer.Feed(log.substr(i, step));
    printer.Finish();
    EXPECT_EQ(console.out(), whole.out()) << "step " << step;
  }
}

TEST(LogPrinterTest, IncompleteRecordIsNotCountedUntilItsNewline) {
  BufferConsole console;
  LogPrinter printer(console, {});
  const std::string first = "2026-11-29T14:03:06.514277Z stdout one\n";
  printer.Feed(first + "2026-11-29T14:03:06.6Z stdout tw");
  EXPECT_EQ(console.out(), "one\n");
  EXPECT_EQ(printer.consumed_bytes(), first.size());
  // The stream broke: the partial record is read again from consumed_bytes().
  printer.Reset();
  printer.Feed("2026-11-29T14:03:06.6Z stdout two\n");
  EXPECT_EQ(console.out(), "one\ntwo\n");
}

TEST(LogPrinterTest, OtherSourceClosesAnOpenLine) {
  BufferConsole console;
  LogPrinter printer(console, {});
  printer.Feed(
      "2026-11-29T14:03:07Z stdout+ progress 10%\n"
      "2026-11-29T14:03:07Z stderr oops\n"
      "2026-11-29T14:03:08Z stdout+ 20%\n");
  printer.Finish();
  EXPECT_EQ(console.out(), "progress 10%\noops\n20%\n");
}

TEST(LogPrinterTest, SkipsUnknownSourcesButCountsThemAndIgnoresGarbage) {
  BufferConsole console;
  LogPrinter printer(console, {});
  const std::string known = "2026-11-29T14:03:07Z stdout a\n";
  const std::string future = "2026-11-29T14:03:07Z gpu util 80%\n";
  printer.Feed(known + future + "{\"detail\": \"job not found\"}\n");
  printer.Finish();
  EXPECT_EQ(console.out(), "a\n");
  EXPECT_EQ(printer.consumed_bytes(), known.size() + future.size());
}

TEST(LogPrinterTest, OverlongLineWithoutNewlineIsDropped) {
  BufferConsole console;
  LogPrinter printer(console, {});
  printer.Feed(std::string(200 * 1024, 'x'));
  printer.Feed("tail\n2026-11-29T14:03:07Z stdout ok\n");
  printer.Finish();
  EXPECT_EQ(console.out(), "ok\n");
}

}  // namespace
}  // namespace sovai::cli::client
