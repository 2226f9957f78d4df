#include "train/packing.h"

#include <gtest/gtest.h>

namespace sovai::train {
namespace {

Example Make(std::vector<int32_t> tokens, std::vector<uint8_t> trained) {
  return Example{std::move(tokens), std::move(trained)};
}

TEST(PackingTest, ExamplesShareARowWithoutSeeingEachOther) {
  std::vector<Example> examples = {Make({1, 2, 3}, {0, 1, 1}), Make({4, 5}, {0, 1}),
                                   Make({6, 7, 8, 9}, {0, 0, 1, 1})};
  size_t next = 0;
  PackedRows p = PackRows(examples, 0, 6, 8, &next);
  EXPECT_EQ(next, 3u);
  ASSERT_EQ(p.rows, 2);
  // Row 0: [1 2 3][4 5] pad; row 1: [6 7 8 9] pad pad.
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 0, 6, 7, 8, 9, 0, 0}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 0, 1, 2, 3, 0, 0}));
  EXPECT_EQ(p.segments, (std::vector<int32_t>{0, 0, 0, 1, 1, -1, 0, 0, 0, 0, -1, -1}));
  // Targets: the next token of the same example, only where that token is trained on; the last
  // token of an example predicts nothing (it must not predict the next example's first token).
  EXPECT_EQ(p.targets, (std::vector<int32_t>{2, 3, -1, 5, -1, -1, -1, 8, 9, -1, -1, -1}));
  EXPECT_EQ(p.counted_targets, 5);
  EXPECT_EQ(p.examples, 3);
  EXPECT_EQ(p.truncated, 0);
}

TEST(PackingTest, LongExamplesAreCutAndRowsAreBounded) {
  std::vector<Example> examples = {Make({1, 2, 3, 4, 5, 6}, {1, 1, 1, 1, 1, 1}),
                                   Make({7, 8}, {1, 1}), Make({9}, {1})};
  size_t next = 0;
  PackedRows p = PackRows(examples, 0, 4, 1, &next);
  EXPECT_EQ(p.rows, 1);
  EXPECT_EQ(next, 1u) << "only one row was asked for";
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(p.targets, (std::vector<int32_t>{2, 3, 4, -1}));
  EXPECT_EQ(p.truncated, 1);
  p = PackRows(examples, next, 4, 4, &next);
  EXPECT_EQ(next, 3u);
  EXPECT_EQ(p.rows, 1);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{7, 8, 9, 0}));
}

TEST(PackingTest, NothingLeftGivesNoRows) {
  std::vector<Example> examples = {Make({1}, {1})};
  size_t next = 0;
  PackedRows p = PackRows(examples, 1, 4, 4, &next);
  EXPECT_EQ(p.rows, 0);
  EXPECT_EQ(next, 1u);
  EXPECT_TRUE(p.tokens.empty());
}

}  // namespace
}  // namespace sovai::train
