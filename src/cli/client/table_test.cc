#include "cli/client/table.h"

#include <gtest/gtest.h>

namespace sovai::cli::client {
namespace {

TEST(TableTest, AlignsColumnsWithoutTrailingSpaces) {
  Table table({"ID", "STATE", "NAME"});
  table.AddRow({"job_1", "RUNNING", "a"});
  table.AddRow({"job_22", "DONE", ""});
  table.AddRow({"j"});  // padded
  EXPECT_EQ(table.Render(),
            "ID      STATE    NAME\n"
            "job_1   RUNNING  a\n"
            "job_22  DONE\n"
            "j\n");
  EXPECT_EQ(table.rows(), 3u);
}

TEST(TableTest, EmptyTableIsTheHeader) {
  EXPECT_EQ(Table({"NAME", "CREATED"}).Render(), "NAME  CREATED\n");
}

TEST(TableTest, WidthCountsCharactersNotBytes) {
  Table table({"NAME", "X"});
  table.AddRow({"équipe", "1"});
  table.AddRow({"ab", "2"});
  EXPECT_EQ(table.Render(),
            "NAME    X\n"
            "équipe  1\n"
            "ab      2\n");
  EXPECT_EQ(DisplayWidth("équipe"), 6u);
  EXPECT_EQ(DisplayWidth("日本"), 2u);
}

TEST(TableTest, ControlCharactersCannotBreakLines) {
  Table table({"NAME", "STATE"});
  table.AddRow({"evil\nname\x1b[31m", "DONE"});
  EXPECT_EQ(table.Render(),
            "NAME            STATE\n"
            "evil?name?[31m  DONE\n");
}

TEST(TableDeathTest, TooManyCellsIsABug) {
  Table table({"A"});
  EXPECT_DEATH(table.AddRow({"1", "2"}), "2 cells for 1 columns");
}

TEST(KeyValuesTest, AlignsAndIndentsContinuationLines) {
  EXPECT_EQ(RenderKeyValues({{"ID", "job_1"}, {"Volumes", "a:/x\nb:/y"}, {"Env", ""}}),
            "ID:       job_1\n"
            "Volumes:  a:/x\n"
            "          b:/y\n"
            "Env:\n");
}

TEST(FormatTest, AgesTimesAndShellWords) {
  const int64_t now = 1'800'000'000'000'000;
  EXPECT_EQ(FormatAge(now, now - 5'000'000), "5s");
  EXPECT_EQ(FormatAge(now, now - 125'000'000), "2m");
  EXPECT_EQ(FormatAge(now, now - 3 * 3600'000'000LL), "3h");
  EXPECT_EQ(FormatAge(now, now - 72 * 3600'000'000LL), "3d");
  EXPECT_EQ(FormatAge(now, now + 10'000'000), "0s");  // clock skew
  EXPECT_EQ(FormatAge(now, 0), "-");
  EXPECT_EQ(FormatTime(1'764'424'985'123'456), "2025-11-29 14:03:05");
  EXPECT_EQ(FormatTime(0), "-");
  EXPECT_EQ(ShellJoin({"sh", "-c", "wc -l /workspace/data/*"}), "sh -c 'wc -l /workspace/data/*'");
  EXPECT_EQ(ShellJoin({"echo", "it's", ""}), "echo 'it'\\''s' ''");
  EXPECT_EQ(ShellJoin({"python3", "train.py", "--lr=3e-4"}), "python3 train.py --lr=3e-4");
}

}  // namespace
}  // namespace sovai::cli::client
