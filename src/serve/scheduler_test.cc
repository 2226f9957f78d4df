#include "serve/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace sovai::serve {
namespace {

using base::StatusCode;

// max_num_seqs -1: as many as the budget allows, up to 64.
SchedulerOptions Opts(int64_t num_blocks, int64_t block_size, int64_t budget = 2048,
                      int64_t max_num_seqs = -1) {
  SchedulerOptions o;
  o.num_blocks = num_blocks;
  o.block_size = block_size;
  o.max_num_batched_tokens = budget;
  o.max_num_seqs = max_num_seqs == -1 ? std::min<int64_t>(budget, 64) : max_num_seqs;
  o.max_model_len = 1 << 20;
  o.prefix_hash_key = 42;
  return o;
}

std::vector<int32_t> Range(int32_t begin, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const ScheduledChunk* FindChunk(const StepPlan& plan, SequenceId id) {
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

int64_t PlanTokens(const StepPlan& plan) {
  int64_t n = 0;
  for (const ScheduledChunk& c : plan.chunks) n += static_cast<int64_t>(c.tokens.size());
  return n;
}

// One engine step: Schedule, Complete, then `token` for every chunk that produces one. Ids that
// reached max_new_tokens go to *finished.
StepPlan RunStep(Scheduler& s, int32_t token = 7, std::vector<SequenceId>* finished = nullptr) {
  StepPlan plan = s.Schedule();
  s.CheckInvariants();
  s.Complete(plan);
  for (const ScheduledChunk& c : plan.chunks) {
    if (!c.produces_token) continue;
    if (s.AppendToken(c.id, token) && finished != nullptr) finished->push_back(c.id);
  }
  s.CheckInvariants();
  return plan;
}

TEST(SchedulerTest, ValidatesOptions) {
  EXPECT_TRUE(Scheduler::ValidateOptions(Opts(16, 16)).ok());
  auto code = [](SchedulerOptions o) { return Scheduler::ValidateOptions(o).code(); };
  SchedulerOptions o = Opts(16, 16);
  o.num_blocks = 0;
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  o = Opts(16, 16);
  o.num_blocks = int64_t{1} << 31;
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  o = Opts(16, 0);
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  o = Opts(16, kMaxBlockSize + 1);
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  o = Opts(16, 16, /*budget=*/8, /*max_num_seqs=*/9);
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  EXPECT_NE(Scheduler::ValidateOptions(o).message().find("max_num_batched_tokens"),
            std::string::npos);
  o = Opts(16, 16, 8, 0);
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  o = Opts(16, 16);
  o.max_waiting = 0;
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  o = Opts(16, 16);
  o.max_model_len = 0;
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  EXPECT_DEATH(Scheduler{o}, "max_model_len");
}

TEST(SchedulerTest, AddRefusesWhatCanNeverRunAndAFullQueue) {
  SchedulerOptions o = Opts(/*num_blocks=*/4, /*block_size=*/4);  // 16 tokens of KV
  o.max_model_len = 12;
  o.max_waiting = 2;
  Scheduler s(o);
  EXPECT_EQ(s.Add(1, {}, 4, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Add(1, {1}, 0, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Add(1, {1}, -3, 0).code(), StatusCode::kInvalidArgument);
  const base::Status too_long = s.Add(1, Range(0, 10), 3, 0);
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("context length of 12"), std::string::npos) << too_long;
  EXPECT_EQ(s.Add(1, Range(0, 13), 1, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Add(1, {1}, std::numeric_limits<int64_t>::max(), 0).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(s.Contains(1));
  EXPECT_TRUE(s.Add(1, Range(0, 10), 2, 0).ok());  // exactly max_model_len

  // A model longer than the cache: the cache is the limit.
  SchedulerOptions big = Opts(4, 4);
  big.max_model_len = 100;
  Scheduler small_cache(big);
  const base::Status over_cache = small_cache.Add(1, Range(0, 10), 7, 0);
  EXPECT_EQ(over_cache.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over_cache.message().find("KV cache of 16 tokens"), std::string::npos) << over_cache;
  EXPECT_TRUE(small_cache.Add(1, Range(0, 10), 6, 0).ok());

  EXPECT_EQ(s.Add(1, {5}, 1, 0).code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(s.Add(2, {5}, 1, 0).ok());
  const base::Status full = s.Add(3, {5}, 1, 0);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full;
  EXPECT_FALSE(s.Contains(3));
  // Admission empties the queue: Add works again.
  RunStep(s);
  EXPECT_EQ(s.Stats().num_waiting, 0);
  EXPECT_TRUE(s.Add(3, {5}, 1, 0).ok());
  s.CheckInvariants();
}

TEST(SchedulerTest, OneSequenceFromPrefillToLength) {
  Scheduler s(Opts(/*num_blocks=*/8, /*block_size=*/4));
  EXPECT_TRUE(s.Schedule().empty());
  ASSERT_TRUE(s.Add(9, Range(100, 8), /*max_new_tokens=*/3, 0).ok());

  StepPlan p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  const ScheduledChunk prefill = p.chunks[0];  // a copy: p is reused below
  EXPECT_EQ(prefill.id, 9u);
  EXPECT_EQ(prefill.tokens, Range(100, 8));
  EXPECT_EQ(prefill.start_position, 0);
  EXPECT_EQ(prefill.block_table.size(), 2u);
  EXPECT_TRUE(prefill.produces_token);
  EXPECT_EQ(prefill.cached_prompt_tokens, 0);
  EXPECT_EQ(s.Stats().num_running, 1);
  EXPECT_EQ(s.FreeBlockCount(), 6);
  s.Complete(p);
  EXPECT_FALSE(s.AppendToken(9, 500));

  // Position 8 starts a third block.
  p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].tokens, std::vector<int32_t>{500});
  EXPECT_EQ(p.chunks[0].start_position, 8);
  ASSERT_EQ(p.chunks[0].block_table.size(), 3u);
  EXPECT_EQ(
      std::vector<BlockId>(p.chunks[0].block_table.begin(), p.chunks[0].block_table.begin() + 2),
      prefill.block_table);
  EXPECT_TRUE(p.chunks[0].produces_token);
  EXPECT_EQ(p.chunks[0].cached_prompt_tokens, 0);
  s.Complete(p);
  EXPECT_FALSE(s.AppendToken(9, 501));

  p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].start_position, 9);
  EXPECT_EQ(p.chunks[0].block_table.size(), 3u);
  s.Complete(p);
  EXPECT_TRUE(s.AppendToken(9, 502)) << "third of max_new_tokens=3";

  // Finished: never scheduled again, blocks back (the two full prompt blocks stay cached, and the
  // third with its 2 computed positions for partial matches).
  EXPECT_TRUE(s.Schedule().empty());
  EXPECT_EQ(s.FreeBlockCount(), 8);
  EXPECT_EQ(s.Stats().num_running, 0);
  EXPECT_EQ(s.Stats().num_cached_blocks, 3);
  EXPECT_EQ(s.Tokens(9), Concat(Range(100, 8), {500, 501, 502}));
  s.CheckInvariants();
  s.Remove(9);
  EXPECT_FALSE(s.Contains(9));
  EXPECT_TRUE(s.Tokens(9).empty());
  s.CheckInvariants();
}

TEST(SchedulerTest, SecondSequenceReusesCommonPrefixBlocks) {
  Scheduler s(Opts(16, 4));
  ASSERT_TRUE(s.Add(1, Range(0, 10), 5, 0).ok());
  const StepPlan first = RunStep(s);
  const std::vector<BlockId> a_blocks = first.chunks[0].block_table;

  ASSERT_TRUE(s.Add(2, Concat(Range(0, 8), {50, 51, 52}), 5, 0).ok());
  const StepPlan p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].id, 1u) << "decodes first";
  EXPECT_EQ(p.chunks[0].tokens.size(), 1u);
  const ScheduledChunk& b = p.chunks[1];
  EXPECT_EQ(b.id, 2u);
  EXPECT_EQ(b.cached_prompt_tokens, 8);
  EXPECT_EQ(b.start_position, 8);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{50, 51, 52}));
  ASSERT_EQ(b.block_table.size(), 3u);
  EXPECT_EQ(b.block_table[0], a_blocks[0]);
  EXPECT_EQ(b.block_table[1], a_blocks[1]);
  EXPECT_NE(b.block_table[2], a_blocks[2]);
  EXPECT_EQ(s.block_manager().RefCount(a_blocks[0]), 2);
  EXPECT_EQ(s.block_manager().RefCount(a_blocks[1]), 2);
  EXPECT_EQ(s.block_manager().RefCount(a_blocks[2]), 1);
  const SchedulerStats st = s.Stats();
  EXPECT_EQ(st.prefix_cache_queried_tokens, 10 + 11);
  EXPECT_EQ(st.prefix_cache_hit_tokens, 8);
  s.CheckInvariants();
  s.Complete(p);
  ASSERT_TRUE(s.AppendToken(1, 3) == false && s.AppendToken(2, 3) == false);

  // Removing one leaves the shared blocks with the other.
  s.Remove(1);
  EXPECT_EQ(s.block_manager().RefCount(a_blocks[0]), 1);
  s.Remove(2);
  EXPECT_EQ(s.block_manager().RefCount(a_blocks[0]), 0);
  EXPECT_EQ(s.FreeBlockCount(), 16);
  s.CheckInvariants();
}

TEST(SchedulerTest, ReuseLeavesTheLastPromptTokenToCompute) {
  SchedulerOptions o = Opts(16, 4);
  o.reuse_partial_blocks = false;
  Scheduler s(o);
  ASSERT_TRUE(s.Add(1, Range(0, 8), 1, 0).ok());
  RunStep(s);
  // The same 8-token prompt: both blocks are cached, but only the first may be reused so that
  // the model computes the last token's logits.
  ASSERT_TRUE(s.Add(2, Range(0, 8), 1, 0).ok());
  // One more token: both blocks are reusable.
  ASSERT_TRUE(s.Add(3, Range(0, 9), 1, 0).ok());
  const StepPlan p = s.Schedule();
  const ScheduledChunk* two = FindChunk(p, 2);
  const ScheduledChunk* three = FindChunk(p, 3);
  ASSERT_TRUE(two != nullptr && three != nullptr);
  EXPECT_EQ(two->cached_prompt_tokens, 4);
  EXPECT_EQ(two->start_position, 4);
  EXPECT_EQ(two->tokens, Range(4, 4));
  EXPECT_TRUE(two->produces_token);
  EXPECT_EQ(two->reused_positions, 0);
  EXPECT_EQ(three->cached_prompt_tokens, 8);
  EXPECT_EQ(three->tokens, std::vector<int32_t>{8});
  s.Complete(p);
}

TEST(SchedulerTest, PartialBlockHitCopiesTheMatchingSlotsAndHoldsTheirSource) {
  Scheduler s(Opts(16, 4));
  ASSERT_TRUE(s.Add(1, Range(0, 8), 1, 0).ok());
  const StepPlan first = RunStep(s);
  const BlockId second_block = first.chunks[0].block_table[1];  // holds tokens 4 5 6 7
  s.Remove(1);

  // The same prompt: block 0 whole, then 3 of block 1's 4 slots (the last token is computed).
  ASSERT_TRUE(s.Add(2, Range(0, 8), 1, 0).ok());
  // Another ending after 0..5: block 0, then 2 slots of block 1.
  ASSERT_TRUE(s.Add(3, Concat(Range(0, 6), {90, 91}), 1, 0).ok());
  // A different first token: nothing to reuse.
  ASSERT_TRUE(s.Add(4, Range(1, 7), 1, 0).ok());
  StepPlan p = s.Schedule();
  s.CheckInvariants();
  const ScheduledChunk* two = FindChunk(p, 2);
  const ScheduledChunk* three = FindChunk(p, 3);
  const ScheduledChunk* four = FindChunk(p, 4);
  ASSERT_TRUE(two != nullptr && three != nullptr && four != nullptr);
  EXPECT_EQ(two->cached_prompt_tokens, 7);
  EXPECT_EQ(two->start_position, 7);
  EXPECT_EQ(two->tokens, std::vector<int32_t>{7});
  EXPECT_EQ(two->reuse_source, second_block);
  EXPECT_EQ(two->reused_positions, 3);
  EXPECT_NE(two->block_table[1], second_block) << "a cached block is never written";
  EXPECT_EQ(three->cached_prompt_tokens, 6);
  EXPECT_EQ(three->tokens, (std::vector<int32_t>{90, 91}));
  EXPECT_EQ(three->reuse_source, second_block);
  EXPECT_EQ(three->reused_positions, 2);
  EXPECT_EQ(four->cached_prompt_tokens, 0);
  EXPECT_EQ(four->reused_positions, 0);
  // The source is held (and so cannot be evicted) until the step completes: block 0 by 2 and 3,
  // block 1 by the two copies.
  EXPECT_EQ(s.block_manager().RefCount(second_block), 2);
  EXPECT_EQ(s.Stats().prefix_cache_partial_hit_tokens, 5);
  EXPECT_EQ(s.Stats().prefix_cache_hit_tokens, 4 + 3 + 4 + 2);
  s.Complete(p);
  s.CheckInvariants();
  EXPECT_EQ(s.block_manager().RefCount(second_block), 0);
  EXPECT_TRUE(s.block_manager().IsCached(second_block));
}

TEST(SchedulerTest, PartialBlockSourceIsReleasedByDiscardAndSurvivesARemove) {
  Scheduler s(Opts(16, 4));
  ASSERT_TRUE(s.Add(1, Range(0, 8), 1, 0).ok());
  const BlockId second_block = RunStep(s).chunks[0].block_table[1];
  s.Remove(1);
  ASSERT_TRUE(s.Add(2, Concat(Range(0, 7), {99}), 1, 0).ok());
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].reused_positions, 3);
  s.Remove(2);  // cancelled while the model runs: the copy may still be under way
  EXPECT_EQ(s.block_manager().RefCount(second_block), 1);
  s.CheckInvariants();
  s.Complete(p);
  EXPECT_EQ(s.block_manager().RefCount(second_block), 0);

  ASSERT_TRUE(s.Add(3, Concat(Range(0, 7), {98}), 1, 0).ok());
  p = s.Schedule();
  EXPECT_EQ(p.chunks[0].reuse_source, second_block);
  s.Discard(p);
  s.CheckInvariants();
  EXPECT_EQ(s.block_manager().RefCount(second_block), 0);
  EXPECT_EQ(s.block_manager().UsedBlockCount(), 0);
  EXPECT_TRUE(s.block_manager().IsCached(second_block));
}

TEST(SchedulerTest, DifferentAdaptersNeverShareBlocks) {
  Scheduler s(Opts(16, 4));
  ASSERT_TRUE(s.Add(1, Range(0, 9), 2, /*adapter_key=*/11).ok());
  const std::vector<BlockId> a = RunStep(s).chunks[0].block_table;
  ASSERT_TRUE(s.Add(2, Range(0, 9), 2, /*adapter_key=*/22).ok());
  ASSERT_TRUE(s.Add(3, Range(0, 9), 2, /*adapter_key=*/0).ok());
  ASSERT_TRUE(s.Add(4, Range(0, 9), 2, /*adapter_key=*/11).ok());
  const StepPlan p = s.Schedule();
  for (SequenceId id : {2, 3}) {
    const ScheduledChunk* c = FindChunk(p, id);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->cached_prompt_tokens, 0) << id;
    for (BlockId b : c->block_table) {
      EXPECT_EQ(std::count(a.begin(), a.end(), b), 0) << "sequence " << id << " block " << b;
    }
  }
  const ScheduledChunk* same = FindChunk(p, 4);
  ASSERT_NE(same, nullptr);
  EXPECT_EQ(same->cached_prompt_tokens, 8);
  s.Complete(p);
}

TEST(SchedulerTest, BlocksAreCachedOnlyOnceComputed) {
  Scheduler s(Opts(16, 4));
  // Both arrive before either ran: the second waits for the first to compute the blocks they
  // share (nothing is cached before its step completes), then reuses them.
  ASSERT_TRUE(s.Add(1, Range(0, 9), 2, 0).ok());
  ASSERT_TRUE(s.Add(2, Range(0, 9), 2, 0).ok());
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].id, 1u);
  EXPECT_EQ(s.Stats().num_cached_blocks, 0);
  EXPECT_EQ(s.Stats().num_waiting, 1);
  s.Complete(p);
  EXPECT_EQ(s.Stats().num_cached_blocks, 2);
  s.AppendToken(1, 1);
  p = s.Schedule();
  ASSERT_NE(FindChunk(p, 2), nullptr);
  EXPECT_EQ(FindChunk(p, 2)->cached_prompt_tokens, 8);
  EXPECT_EQ(FindChunk(p, 2)->tokens, std::vector<int32_t>{8});
  s.Complete(p);
  EXPECT_TRUE(s.AppendToken(1, 1));  // both done: 1's partly filled last block is cached, 2's
  s.AppendToken(2, 1);               // (the same tokens) is not
  s.CheckInvariants();
  const int64_t cached = s.Stats().num_cached_blocks;
  EXPECT_EQ(cached, 3);

  // A chunk removed before Complete is never cached.
  ASSERT_TRUE(s.Add(3, Range(50, 9), 2, 0).ok());
  p = s.Schedule();
  ASSERT_NE(FindChunk(p, 3), nullptr);
  s.Remove(3);
  s.Complete(p);
  EXPECT_EQ(s.Stats().num_cached_blocks, cached);
  s.Remove(1);
  s.Remove(2);
  EXPECT_EQ(s.FreeBlockCount(), 16);
  s.CheckInvariants();
}

TEST(SchedulerTest, OneRequestsChoicesComputeTheirPromptOnce) {
  // n = 4 choices of a 40-token prompt (as the engine adds them), a budget of 64 tokens a step:
  // side by side they would take 160 prompt tokens over 3 steps; the first computes the 40, the
  // others reuse its 9 full blocks and 3 slots of the 10th, and compute the last token each.
  Scheduler s(Opts(64, 4, /*budget=*/64));
  for (SequenceId id = 1; id <= 4; ++id) ASSERT_TRUE(s.Add(id, Range(100, 40), 3, 0).ok());
  int64_t prompt_tokens = 0;
  StepPlan p = RunStep(s);
  ASSERT_EQ(p.chunks.size(), 1u);
  prompt_tokens += PlanTokens(p);
  p = RunStep(s);
  for (SequenceId id = 2; id <= 4; ++id) {
    const ScheduledChunk* c = FindChunk(p, id);
    ASSERT_NE(c, nullptr) << id;
    EXPECT_EQ(c->cached_prompt_tokens, 39) << id;
    prompt_tokens += static_cast<int64_t>(c->tokens.size());
  }
  EXPECT_EQ(prompt_tokens, 40 + 3 * 1);
  // Another adapter does not wait for blocks it could never share.
  ASSERT_TRUE(s.Add(5, Range(100, 40), 3, 0).ok());
  ASSERT_TRUE(s.Add(6, Range(100, 40), 3, /*adapter_key=*/7).ok());
  p = RunStep(s);
  EXPECT_NE(FindChunk(p, 5), nullptr);
  EXPECT_NE(FindChunk(p, 6), nullptr);
  EXPECT_EQ(FindChunk(p, 6)->cached_prompt_tokens, 0);
}

TEST(SchedulerTest, RemovedSequenceLeavesItsPrefixCached) {
  Scheduler s(Opts(16, 4));
  ASSERT_TRUE(s.Add(1, Range(0, 10), 2, 0).ok());
  const std::vector<BlockId> a = RunStep(s).chunks[0].block_table;
  s.Remove(1);
  EXPECT_EQ(s.FreeBlockCount(), 16);
  // The two full blocks, and the third's 2 computed positions (8 and 9) for partial matches.
  EXPECT_EQ(s.Stats().num_cached_blocks, 3);
  ASSERT_TRUE(s.Add(2, Range(0, 10), 2, 0).ok());
  const StepPlan p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  // Everything but the last prompt token: 8 shared, 1 copied from the partial block.
  EXPECT_EQ(p.chunks[0].cached_prompt_tokens, 9);
  EXPECT_EQ(p.chunks[0].tokens, std::vector<int32_t>{9});
  EXPECT_EQ(p.chunks[0].block_table[0], a[0]);
  EXPECT_EQ(p.chunks[0].block_table[1], a[1]);
  EXPECT_EQ(p.chunks[0].reuse_source, a[2]);
  EXPECT_EQ(p.chunks[0].reused_positions, 1);
  EXPECT_NE(p.chunks[0].block_table[2], a[2]);
  // Held: the 2 shared blocks, the copy's source and the new third block.
  EXPECT_EQ(s.FreeBlockCount(), 12);
  s.Complete(p);
}

TEST(SchedulerTest, TheNextTurnOfAConversationReusesTheEndOfTheAnswer) {
  Scheduler s(Opts(16, 4));
  ASSERT_TRUE(s.Add(1, Range(0, 6), 3, 0).ok());
  std::vector<SequenceId> finished;
  for (int i = 0; i < 3; ++i) RunStep(s, 50 + i, &finished);
  ASSERT_EQ(finished, std::vector<SequenceId>{1});
  // 0..5 and the answer 50 51 52: all but 52 computed, 8 positions, two full blocks.
  const std::vector<int32_t> answered = s.Tokens(1);
  s.Remove(1);
  // The next turn repeats the conversation and adds to it.
  ASSERT_TRUE(s.Add(2, Concat(answered, {60, 61, 62}), 1, 0).ok());
  StepPlan p = RunStep(s);
  EXPECT_EQ(p.chunks[0].cached_prompt_tokens, 8);
  EXPECT_EQ(p.chunks[0].tokens, (std::vector<int32_t>{52, 60, 61, 62}));
  s.Remove(2);

  // An answer that ends mid-block: its last block joins the cache for partial matches.
  ASSERT_TRUE(s.Add(3, Range(100, 5), 2, 0).ok());
  finished.clear();
  for (int i = 0; i < 2; ++i) RunStep(s, 70 + i, &finished);
  ASSERT_EQ(finished, std::vector<SequenceId>{3});
  const std::vector<int32_t> answered3 = s.Tokens(3);  // 100..104 70 71: 6 computed
  s.Remove(3);
  ASSERT_TRUE(s.Add(4, Concat(answered3, {80}), 1, 0).ok());
  p = RunStep(s);
  EXPECT_EQ(p.chunks[0].cached_prompt_tokens, 6);
  EXPECT_EQ(p.chunks[0].reused_positions, 2);
  EXPECT_EQ(p.chunks[0].tokens, (std::vector<int32_t>{71, 80}));
  s.Remove(4);
  // The same partial block again is not cached twice.
  const int64_t cached = s.Stats().num_cached_blocks;
  ASSERT_TRUE(s.Add(5, Range(100, 5), 2, 0).ok());
  finished.clear();
  for (int i = 0; i < 2; ++i) RunStep(s, 70 + i, &finished);
  s.Remove(5);
  EXPECT_EQ(s.Stats().num_cached_blocks, cached);
  s.CheckInvariants();
}

TEST(SchedulerTest, EvictsLeastRecentlyReleasedPrefixFirst) {
  // 4 blocks of 2 tokens; full blocks only (partly filled last blocks would join the LRU too).
  SchedulerOptions o = Opts(4, 2);
  o.reuse_partial_blocks = false;
  Scheduler s(o);
  ASSERT_TRUE(s.Add(1, {1, 2, 3}, 1, 0).ok());  // caches [1 2]
  RunStep(s);
  s.Remove(1);
  ASSERT_TRUE(s.Add(2, {4, 5, 6}, 1, 0).ok());  // caches [4 5]
  RunStep(s);
  s.Remove(2);
  EXPECT_EQ(s.Stats().num_cached_blocks, 2);
  // Three blocks: the two uncached free ones, then the least recently released cached one.
  ASSERT_TRUE(s.Add(3, {7, 8, 9, 10, 11}, 1, 0).ok());
  RunStep(s);
  s.Remove(3);
  ASSERT_TRUE(s.Add(4, {4, 5, 6}, 1, 0).ok());
  StepPlan p = RunStep(s);
  EXPECT_EQ(p.chunks[0].cached_prompt_tokens, 2) << "[4 5] must have survived";
  s.Remove(4);
  ASSERT_TRUE(s.Add(5, {1, 2, 3}, 1, 0).ok());
  p = RunStep(s);
  EXPECT_EQ(p.chunks[0].cached_prompt_tokens, 0) << "[1 2] must have been evicted";
  s.Remove(5);
  s.CheckInvariants();
}

TEST(SchedulerTest, EvictsTheTailOfASequenceBeforeItsPrefix) {
  Scheduler s(Opts(4, 2));
  ASSERT_TRUE(s.Add(1, {1, 2, 3, 4, 5}, 1, 0).ok());  // caches [1 2] and [3 4]
  RunStep(s);
  s.Remove(1);
  ASSERT_TRUE(s.Add(2, {9, 9, 9, 9, 9}, 1, 0).ok());  // 3 blocks: 2 free, then one evicted
  RunStep(s);
  s.Remove(2);
  ASSERT_TRUE(s.Add(3, {1, 2, 3, 4, 5}, 1, 0).ok());
  const StepPlan p = RunStep(s);
  EXPECT_EQ(p.chunks[0].cached_prompt_tokens, 2) << "[3 4] goes first, [1 2] stays";
}

TEST(SchedulerTest, ChunkedPrefillRespectsTheTokenBudget) {
  Scheduler s(Opts(32, 4, /*budget=*/8));
  ASSERT_TRUE(s.Add(1, Range(0, 20), 4, 0).ok());
  ASSERT_TRUE(s.Add(2, Range(100, 5), 4, 0).ok());
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u) << "the first chunk used the whole budget";
  EXPECT_EQ(p.chunks[0].tokens, Range(0, 8));
  EXPECT_EQ(p.chunks[0].block_table.size(), 2u);
  EXPECT_FALSE(p.chunks[0].produces_token);
  s.Complete(p);
  s.CheckInvariants();

  p = RunStep(s);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].start_position, 8);
  EXPECT_EQ(p.chunks[0].tokens, Range(8, 8));
  EXPECT_FALSE(p.chunks[0].produces_token);

  p = RunStep(s, 77);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].id, 1u);
  EXPECT_EQ(p.chunks[0].tokens, Range(16, 4));
  EXPECT_TRUE(p.chunks[0].produces_token);
  EXPECT_EQ(p.chunks[1].id, 2u);
  EXPECT_EQ(p.chunks[1].tokens, Range(100, 4)) << "what is left of the budget";
  EXPECT_FALSE(p.chunks[1].produces_token);
  EXPECT_EQ(p.chunks[1].cached_prompt_tokens, 0);

  p = RunStep(s);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].tokens, std::vector<int32_t>{77});
  EXPECT_EQ(p.chunks[0].start_position, 20);
  EXPECT_EQ(p.chunks[1].tokens, std::vector<int32_t>{104});
  EXPECT_TRUE(p.chunks[1].produces_token);
  EXPECT_EQ(p.chunks[1].cached_prompt_tokens, 0) << "only on the first chunk";

  // A new long prompt gets what the two decodes leave.
  ASSERT_TRUE(s.Add(3, Range(200, 30), 1, 0).ok());
  p = RunStep(s);
  ASSERT_EQ(p.chunks.size(), 3u);
  EXPECT_EQ(p.chunks[0].tokens.size(), 1u);
  EXPECT_EQ(p.chunks[1].tokens.size(), 1u);
  EXPECT_EQ(p.chunks[2].id, 3u);
  EXPECT_EQ(p.chunks[2].tokens, Range(200, 6));
  EXPECT_EQ(PlanTokens(p), 8);
}

TEST(SchedulerTest, DecodesComeFirstThenPrefillChunks) {
  Scheduler s(Opts(32, 4, /*budget=*/8));
  ASSERT_TRUE(s.Add(1, Range(0, 20), 4, 0).ok());
  RunStep(s);  // 8 of 20
  ASSERT_TRUE(s.Add(2, {1}, 4, 0).ok());
  StepPlan p = RunStep(s);  // 16 of 20: the budget is gone, 2 waits
  EXPECT_EQ(FindChunk(p, 2), nullptr);
  p = RunStep(s);  // 1: its last 4 tokens; 2: admitted with the rest of the budget
  ASSERT_NE(FindChunk(p, 2), nullptr);
  p = RunStep(s);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].id, 1u);  // arrival order among decodes
  EXPECT_EQ(p.chunks[1].id, 2u);

  ASSERT_TRUE(s.Add(3, Range(300, 30), 1, 0).ok());
  ASSERT_TRUE(s.Add(4, {9}, 3, 0).ok());
  p = RunStep(s);  // two decodes, then 3 gets the other 6 tokens; 4 waits behind 3 (FIFO)
  ASSERT_EQ(p.chunks.size(), 3u);
  EXPECT_EQ(p.chunks[2].id, 3u);
  EXPECT_EQ(p.chunks[2].tokens.size(), 6u);
  s.Remove(1);
  p = RunStep(s);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].id, 2u);
  EXPECT_EQ(p.chunks[0].tokens.size(), 1u);
  EXPECT_EQ(p.chunks[1].id, 3u);
  EXPECT_EQ(p.chunks[1].start_position, 6);
  EXPECT_EQ(p.chunks[1].tokens.size(), 7u);
}

TEST(SchedulerTest, MaxNumSeqsBoundsRunningSequences) {
  Scheduler s(Opts(64, 4, /*budget=*/64, /*max_num_seqs=*/2));
  for (SequenceId id = 1; id <= 4; ++id) ASSERT_TRUE(s.Add(id, {1, 2, 3}, 5, 0).ok());
  StepPlan p = RunStep(s);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].id, 1u);
  EXPECT_EQ(p.chunks[1].id, 2u);
  EXPECT_EQ(s.Stats().num_running, 2);
  EXPECT_EQ(s.Stats().num_waiting, 2);
  p = RunStep(s);
  EXPECT_EQ(p.chunks.size(), 2u);
  s.Remove(1);
  p = RunStep(s);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].id, 2u);
  EXPECT_EQ(p.chunks[1].id, 3u);
  // Its whole prompt (some of it maybe reused from 1's and 2's cached blocks).
  EXPECT_EQ(p.chunks[1].start_position + static_cast<int64_t>(p.chunks[1].tokens.size()), 3);
}

TEST(SchedulerTest, PreemptsTheLatestArrivalWhenADecodeNeedsABlock) {
  // 4 blocks of 2 tokens; each sequence needs at most 3 prompt + 3 new = 6 positions computed.
  Scheduler s(Opts(4, 2));
  ASSERT_TRUE(s.Add(1, {1, 2, 3}, 4, 0).ok());
  ASSERT_TRUE(s.Add(2, {4, 5, 6}, 4, 0).ok());
  StepPlan p = RunStep(s, 10);  // both prefill: 2 blocks each
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(s.FreeBlockCount(), 0);
  p = RunStep(s, 11);  // position 3 fits the second blocks
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_TRUE(p.preempted.empty());

  // Position 4 needs a third block for 1: 2 goes.
  p = s.Schedule();
  s.CheckInvariants();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].id, 1u);
  EXPECT_EQ(p.chunks[0].block_table.size(), 3u);
  EXPECT_EQ(p.preempted, std::vector<SequenceId>{2});
  EXPECT_EQ(s.Stats().num_waiting, 1);
  EXPECT_EQ(s.Stats().num_preemptions, 1);
  s.Complete(p);
  EXPECT_FALSE(s.AppendToken(1, 12));
  // 2 keeps its tokens; it cannot come back while 1 holds 3 blocks and needs a fourth.
  EXPECT_EQ(s.Tokens(2), (std::vector<int32_t>{4, 5, 6, 10, 11}));
  p = RunStep(s, 13);
  EXPECT_EQ(p.chunks.size(), 1u);
  std::vector<SequenceId> finished;
  // 1 has generated 10, 11, 12, 13: finished, its blocks go back.
  EXPECT_EQ(s.Tokens(1), (std::vector<int32_t>{1, 2, 3, 10, 11, 12, 13}));
  s.Remove(1);
  s.CheckInvariants();

  // 2 is recomputed from prompt + generated tokens (its own cached blocks may help).
  p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  const ScheduledChunk& again = p.chunks[0];
  EXPECT_EQ(again.id, 2u);
  EXPECT_EQ(again.start_position + static_cast<int64_t>(again.tokens.size()), 5);
  const std::vector<int32_t> known = s.Tokens(2);
  EXPECT_EQ(again.tokens, std::vector<int32_t>(known.begin() + again.start_position, known.end()));
  EXPECT_TRUE(again.produces_token);
  EXPECT_EQ(again.cached_prompt_tokens, 0) << "reported on its first chunk only";
  s.Complete(p);
  EXPECT_FALSE(s.AppendToken(2, 14));
  p = RunStep(s, 15, &finished);
  EXPECT_EQ(finished, std::vector<SequenceId>{2});
  EXPECT_EQ(s.Tokens(2), (std::vector<int32_t>{4, 5, 6, 10, 11, 14, 15}));
  s.Remove(2);
  EXPECT_EQ(s.FreeBlockCount(), 4);
  s.CheckInvariants();
}

TEST(SchedulerTest, DecodingLatestArrivalPreemptsItself) {
  Scheduler s(Opts(4, 2));
  ASSERT_TRUE(s.Add(1, {1, 2, 3}, 3, 0).ok());     // 2 blocks, room at position 3
  ASSERT_TRUE(s.Add(2, {4, 5, 6, 7}, 2, 0).ok());  // 2 full blocks: position 4 needs a third
  RunStep(s);
  const StepPlan p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].id, 1u);
  EXPECT_EQ(p.preempted, std::vector<SequenceId>{2});
  s.Complete(p);
  s.AppendToken(1, 1);
  s.CheckInvariants();
}

TEST(SchedulerTest, PrefillChunkShrinksToFreeBlocksThenPreemptsItself) {
  // 6 blocks of 2 tokens, budget 4.
  Scheduler s(Opts(6, 2, /*budget=*/4));
  ASSERT_TRUE(s.Add(1, Range(0, 6), 6, 0).ok());     // up to 11 positions: 6 blocks
  ASSERT_TRUE(s.Add(2, Range(100, 10), 1, 0).ok());  // 10 positions: 5 blocks
  StepPlan p = RunStep(s);                           // 1: 4 tokens
  ASSERT_EQ(p.chunks.size(), 1u);
  p = RunStep(s);  // 1: last 2 prompt tokens; 2: 2 tokens (1 block); 4 blocks used
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(FindChunk(p, 2)->tokens, Range(100, 2));
  p = RunStep(s);  // 1 decodes into a 4th block; 2 gets 2 tokens, not 3: one block was left
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(FindChunk(p, 2)->start_position, 2);
  EXPECT_EQ(FindChunk(p, 2)->tokens, Range(102, 2));
  EXPECT_EQ(s.FreeBlockCount(), 0);
  // 1's decode fits its 4th block; 2 cannot get a block and is the latest arrival.
  p = RunStep(s);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].id, 1u);
  EXPECT_EQ(p.preempted, std::vector<SequenceId>{2});

  std::vector<SequenceId> finished;
  for (int step = 0; step < 20 && finished.size() < 2; ++step) {
    const StepPlan q = RunStep(s, 1, &finished);
    EXPECT_FALSE(q.empty()) << "step " << step << " made no progress";
    EXPECT_LE(PlanTokens(q), 4);
    EXPECT_TRUE(q.preempted.empty());
  }
  EXPECT_EQ(finished, (std::vector<SequenceId>{1, 2}));
  EXPECT_EQ(s.Tokens(2), Concat(Range(100, 10), {1}));
  EXPECT_EQ(s.Stats().num_preemptions, 1);
}

TEST(SchedulerTest, RemoveMidPrefillFreesEverything) {
  Scheduler s(Opts(8, 4, /*budget=*/4));
  ASSERT_TRUE(s.Add(1, Range(0, 16), 4, 0).ok());
  RunStep(s);
  RunStep(s);
  EXPECT_EQ(s.FreeBlockCount(), 6);
  s.Remove(1);
  EXPECT_EQ(s.FreeBlockCount(), 8);
  EXPECT_EQ(s.Stats().num_running, 0);
  EXPECT_EQ(s.Stats().num_cached_blocks, 2);
  s.CheckInvariants();
  for (BlockId b = 0; b < 8; ++b) EXPECT_EQ(s.block_manager().RefCount(b), 0);

  // Between Schedule and Complete; then the same id again.
  ASSERT_TRUE(s.Add(2, Range(100, 16), 4, 0).ok());
  StepPlan p = s.Schedule();
  s.Remove(2);
  EXPECT_EQ(s.FreeBlockCount(), 8);
  ASSERT_TRUE(s.Add(2, Range(200, 3), 1, 0).ok());
  s.Complete(p);  // ignores the removed sequence's chunk
  s.CheckInvariants();
  p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].tokens, Range(200, 3));
  EXPECT_EQ(p.chunks[0].start_position, 0);
  s.Complete(p);
  s.Remove(2);  // while it awaits its token

  // A waiting sequence, and an unknown id.
  ASSERT_TRUE(s.Add(3, {1}, 1, 0).ok());
  s.Remove(3);
  s.Remove(12345);
  EXPECT_TRUE(s.Schedule().empty());
  EXPECT_EQ(s.FreeBlockCount(), 8);
  s.CheckInvariants();
}

TEST(SchedulerTest, DiscardedStepCachesNothingAndIsRecomputed) {
  Scheduler s(Opts(16, 4));
  ASSERT_TRUE(s.Add(1, Range(0, 10), 4, 0).ok());
  RunStep(s, 99);  // caches [0..3] and [4..7]
  ASSERT_TRUE(s.Add(2, Range(50, 9), 4, 0).ok());
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(s.Stats().num_cached_blocks, 2);
  s.Discard(p);
  s.CheckInvariants();
  // Nothing of the failed step is cached; 1's third block joins the cache with the positions
  // computed before it (8 and 9), for partial matches.
  EXPECT_EQ(s.Stats().num_cached_blocks, 3);
  EXPECT_EQ(s.Stats().num_running, 0);
  EXPECT_EQ(s.Stats().num_waiting, 2);
  EXPECT_EQ(s.FreeBlockCount(), 16);
  EXPECT_EQ(s.Tokens(1), Concat(Range(0, 10), {99}));

  // Both run again, in arrival order; 1 reuses its own cached prefix.
  p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].id, 1u);
  EXPECT_EQ(p.chunks[0].start_position, 10);
  EXPECT_EQ(p.chunks[0].reused_positions, 2);
  EXPECT_EQ(p.chunks[0].tokens, (std::vector<int32_t>{99}));
  EXPECT_EQ(p.chunks[1].id, 2u);
  EXPECT_EQ(p.chunks[1].start_position, 0);
  EXPECT_EQ(p.chunks[1].tokens, Range(50, 9));
  s.Complete(p);
  EXPECT_FALSE(s.AppendToken(1, 5));
  EXPECT_FALSE(s.AppendToken(2, 5));
  s.CheckInvariants();
  EXPECT_DEATH(s.Discard(p), "Discard of step");
}

TEST(SchedulerTest, WithoutPrefixCachingNothingIsShared) {
  SchedulerOptions o = Opts(16, 4);
  o.enable_prefix_caching = false;
  Scheduler s(o);
  ASSERT_TRUE(s.Add(1, Range(0, 10), 2, 0).ok());
  RunStep(s);
  ASSERT_TRUE(s.Add(2, Range(0, 10), 2, 0).ok());
  const StepPlan p = RunStep(s);
  EXPECT_EQ(FindChunk(p, 2)->cached_prompt_tokens, 0);
  EXPECT_EQ(s.Stats().num_cached_blocks, 0);
  EXPECT_EQ(s.Stats().prefix_cache_queried_tokens, 0);
}

TEST(SchedulerDeathTest, StepContractViolationsAreBugs) {
  Scheduler s(Opts(8, 4));
  ASSERT_TRUE(s.Add(1, {1, 2}, 2, 0).ok());
  StepPlan p = s.Schedule();
  EXPECT_DEATH(s.Schedule(), "before Complete");
  EXPECT_DEATH(s.AppendToken(1, 0), "does not await");
  StepPlan wrong = p;
  wrong.step += 1;
  EXPECT_DEATH(s.Complete(wrong), "Complete of step");
  s.Complete(p);
  EXPECT_DEATH(s.Schedule(), "await AppendToken");
  EXPECT_DEATH(s.AppendToken(99, 0), "unknown sequence");
  EXPECT_FALSE(s.AppendToken(1, 0));
  EXPECT_FALSE(s.Schedule().empty());
}

// Random sequences, removals (also mid-step) and a simulated KV memory: every reused position
// must hold the token the sequence has there, blocks being written are private, and every
// invariant holds after every step.
TEST(SchedulerStressTest, RandomWorkloadKeepsInvariantsAndKvContent) {
  int64_t total_hits = 0;
  int64_t total_partial_hits = 0;
  int64_t total_preemptions = 0;
  int64_t total_finished = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    auto uniform = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    SchedulerOptions o;
    o.block_size = std::vector<int64_t>{1, 2, 3, 4, 16}[uniform(0, 4)];
    o.num_blocks = uniform(4, 48) * (o.block_size == 16 ? 1 : 2);
    o.max_num_seqs = uniform(1, 8);
    o.max_num_batched_tokens = uniform(o.max_num_seqs, 48);
    o.max_waiting = 12;
    o.max_model_len = uniform(8, 120);
    o.prefix_hash_key = seed;
    Scheduler s(o);
    const int64_t bs = o.block_size;
    const int64_t capacity = std::min(o.max_model_len, o.num_blocks * bs);

    // Simulated KV memory: per slot, (adapter, token) or none.
    std::vector<std::pair<int64_t, int64_t>> kv(static_cast<size_t>(o.num_blocks * bs), {-1, -1});
    struct Mirror {
      uint64_t adapter;
      std::vector<int32_t> tokens;
      bool finished = false;
    };
    std::map<SequenceId, Mirror> live;
    SequenceId next_id = 1;
    // A few shared prefixes so that the prefix cache gets hits.
    std::vector<std::vector<int32_t>> prefixes;
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> pre(static_cast<size_t>(uniform(1, 40)));
      for (int32_t& t : pre) t = static_cast<int32_t>(uniform(0, 1000));
      prefixes.push_back(pre);
    }

    // 300 steps of arrivals, then until everything has run (bounded: no livelock).
    constexpr int kArrivalSteps = 300;
    constexpr int kMaxSteps = 20000;
    for (int step = 0; step < kMaxSteps; ++step) {
      const bool adding = step < kArrivalSteps;
      for (int k = uniform(0, 2); adding && k > 0; --k) {
        std::vector<int32_t> prompt = prefixes[uniform(0, 2)];
        prompt.resize(static_cast<size_t>(uniform(1, static_cast<int64_t>(prompt.size()))));
        for (int64_t extra = uniform(0, 12); extra > 0; --extra) {
          prompt.push_back(static_cast<int32_t>(uniform(0, 3)));
        }
        const int64_t max_new = uniform(1, 12);
        const uint64_t adapter = uniform(0, 1);
        const auto p = static_cast<int64_t>(prompt.size());
        const int64_t waiting = s.Stats().num_waiting;
        const base::Status st = s.Add(next_id, prompt, max_new, adapter);
        if (p + max_new > capacity) {
          EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
        } else if (waiting >= o.max_waiting) {
          EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
        } else {
          ASSERT_TRUE(st.ok()) << st;
          live[next_id] = Mirror{adapter, prompt};
        }
        ++next_id;
      }
      if (adding && !live.empty() && uniform(0, 9) == 0) {
        auto it = std::next(live.begin(), uniform(0, static_cast<int64_t>(live.size()) - 1));
        s.Remove(it->first);
        live.erase(it);
      }

      const StepPlan plan = s.Schedule();
      s.CheckInvariants();
      const SchedulerStats stats = s.Stats();
      int64_t pending = 0;
      for (const auto& [id, m] : live) pending += m.finished ? 0 : 1;
      EXPECT_EQ(stats.num_running + stats.num_waiting, pending);
      if (pending > 0) {
        ASSERT_FALSE(plan.empty()) << "seed " << seed << " step " << step;
      } else if (!adding) {
        break;  // drained
      }
      ASSERT_LE(PlanTokens(plan), o.max_num_batched_tokens);
      ASSERT_LE(static_cast<int64_t>(plan.chunks.size()), o.max_num_seqs);
      for (SequenceId id : plan.preempted) EXPECT_EQ(FindChunk(plan, id), nullptr);

      std::set<BlockId> written;
      std::set<BlockId> copied_from;
      std::set<SequenceId> ids;
      for (const ScheduledChunk& c : plan.chunks) {
        ASSERT_TRUE(ids.insert(c.id).second);
        // The engine's copy of a partial hit, as KvCache::CopyLeadingSlots makes it.
        if (c.reused_positions > 0) {
          ASSERT_LT(c.reused_positions, bs);
          ASSERT_EQ(c.start_position % bs, c.reused_positions);
          ASSERT_TRUE(s.block_manager().IsCached(c.reuse_source));
          ASSERT_GE(s.block_manager().RefCount(c.reuse_source), 1) << "the source must be held";
          copied_from.insert(c.reuse_source);
          const BlockId target = c.block_table[c.start_position / bs];
          for (int64_t slot = 0; slot < c.reused_positions; ++slot) {
            kv[static_cast<size_t>(target * bs + slot)] =
                kv[static_cast<size_t>(c.reuse_source * bs + slot)];
          }
          ++total_partial_hits;
        }
        const Mirror& m = live.at(c.id);
        ASSERT_EQ(s.Tokens(c.id), m.tokens);
        const int64_t end = c.start_position + static_cast<int64_t>(c.tokens.size());
        ASSERT_GT(c.tokens.size(), 0u);
        ASSERT_LE(end, static_cast<int64_t>(m.tokens.size()));
        ASSERT_EQ(c.tokens, std::vector<int32_t>(m.tokens.begin() + c.start_position,
                                                 m.tokens.begin() + end));
        ASSERT_EQ(static_cast<int64_t>(c.block_table.size()), (end + bs - 1) / bs);
        ASSERT_EQ(c.produces_token, end == static_cast<int64_t>(m.tokens.size()));
        ASSERT_LT(c.cached_prompt_tokens, static_cast<int64_t>(m.tokens.size()));
        // What the chunk attends to was written by this or an earlier sequence with the same
        // tokens (and adapter) at the same positions.
        for (int64_t pos = 0; pos < c.start_position; ++pos) {
          const auto slot = static_cast<size_t>(c.block_table[pos / bs] * bs + pos % bs);
          ASSERT_EQ(kv[slot], std::make_pair(static_cast<int64_t>(m.adapter),
                                             static_cast<int64_t>(m.tokens[pos])))
              << "seed " << seed << " step " << step << " seq " << c.id << " pos " << pos;
        }
        for (int64_t j = c.start_position / bs; j < static_cast<int64_t>(c.block_table.size());
             ++j) {
          const BlockId b = c.block_table[j];
          ASSERT_FALSE(s.block_manager().IsCached(b)) << "writing into a cached block";
          ASSERT_EQ(s.block_manager().RefCount(b), 1) << "writing into a shared block";
          ASSERT_TRUE(written.insert(b).second) << "two chunks write block " << b;
        }
      }
      for (BlockId b : copied_from) ASSERT_EQ(written.count(b), 0u) << "copy source written";
      for (const ScheduledChunk& c : plan.chunks) {
        for (BlockId b : c.block_table) {
          const bool writes_it = std::find(c.block_table.begin() + c.start_position / bs,
                                           c.block_table.end(), b) != c.block_table.end();
          if (!writes_it) {
            ASSERT_EQ(written.count(b), 0u) << "block read and written";
          }
        }
      }

      // A cancellation arriving while the model runs.
      if (!plan.chunks.empty() && uniform(0, 14) == 0) {
        const SequenceId victim = plan.chunks[uniform(0, plan.chunks.size() - 1)].id;
        s.Remove(victim);
        live.erase(victim);
      }
      // The model writes the chunks' KV; a failed step may have written garbage.
      const bool failed = uniform(0, 19) == 0;
      for (const ScheduledChunk& c : plan.chunks) {
        int64_t adapter = live.count(c.id) ? static_cast<int64_t>(live[c.id].adapter) : -2;
        if (failed) adapter = -3;
        for (size_t i = 0; i < c.tokens.size(); ++i) {
          const int64_t pos = c.start_position + static_cast<int64_t>(i);
          kv[static_cast<size_t>(c.block_table[pos / bs] * bs + pos % bs)] = {adapter, c.tokens[i]};
        }
      }
      if (failed) {
        s.Discard(plan);
        s.CheckInvariants();
        EXPECT_EQ(s.Stats().num_running, 0);
        continue;
      }
      s.Complete(plan);
      for (const ScheduledChunk& c : plan.chunks) {
        if (!c.produces_token || !live.count(c.id)) continue;
        Mirror& m = live[c.id];
        const auto token = static_cast<int32_t>(uniform(0, 3));
        m.tokens.push_back(token);
        if (s.AppendToken(c.id, token)) {
          m.finished = true;
          ++total_finished;
        }
      }
      s.CheckInvariants();
      // Finished sequences are removed sooner or later.
      for (auto it = live.begin(); it != live.end();) {
        if (it->second.finished && uniform(0, 2) == 0) {
          s.Remove(it->first);
          it = live.erase(it);
        } else {
          ++it;
        }
      }
    }
    EXPECT_EQ(s.Stats().num_running + s.Stats().num_waiting, 0)
        << "seed " << seed << ": the queue did not drain";
    total_hits += s.Stats().prefix_cache_hit_tokens;
    total_preemptions += s.Stats().num_preemptions;
    for (const auto& [id, m] : live) s.Remove(id);
    s.CheckInvariants();
    EXPECT_EQ(s.FreeBlockCount(), o.num_blocks);
    EXPECT_EQ(s.block_manager().UsedBlockCount(), 0);
    for (BlockId b = 0; b < o.num_blocks; ++b) ASSERT_EQ(s.block_manager().RefCount(b), 0);
  }
  // The workload must have exercised what it is meant to test.
  EXPECT_GT(total_hits, 0);
  EXPECT_GT(total_partial_hits, 0);
  EXPECT_GT(total_preemptions, 0);
  EXPECT_GT(total_finished, 100);
}

// Embedding and rerank prompts are prefilled only: the last chunk produces the outputs, the
// engine removes the sequence, and its full blocks stay cached for later prompts. A sequence that
// needs every token's output (mean pooling) reuses no cached prefix.
TEST(SchedulerTest, PrefillOnlySequences) {
  Scheduler s(Opts(16, 4, /*budget=*/6));
  EXPECT_EQ(s.Add(1, Range(0, 9), 1, 0, {.prefill_only = true}).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.Add(1, Range(0, 9), 0, 0, {.prefill_only = true}).ok());
  StepPlan first = s.Schedule();
  ASSERT_EQ(first.chunks.size(), 1u);
  EXPECT_EQ(first.chunks[0].tokens.size(), 6u);
  EXPECT_FALSE(first.chunks[0].produces_token);
  s.Complete(first);
  StepPlan last = s.Schedule();
  ASSERT_EQ(last.chunks.size(), 1u);
  EXPECT_EQ(last.chunks[0].start_position, 6);
  EXPECT_TRUE(last.chunks[0].produces_token);
  s.Complete(last);
  s.Remove(1);
  s.CheckInvariants();
  EXPECT_TRUE(s.Schedule().empty());

  // The same prompt again reuses the two cached full blocks...
  ASSERT_TRUE(s.Add(2, Range(0, 9), 0, 0, {.prefill_only = true}).ok());
  StepPlan reused = s.Schedule();
  ASSERT_EQ(reused.chunks.size(), 1u);
  EXPECT_EQ(reused.chunks[0].cached_prompt_tokens, 8);
  s.Complete(reused);
  s.Remove(2);
  // ...unless it must compute every token.
  ASSERT_TRUE(s.Add(3, Range(0, 9), 0, 0, {.prefill_only = true, .reuse_prefix = false}).ok());
  StepPlan whole = s.Schedule();
  ASSERT_EQ(whole.chunks.size(), 1u);
  EXPECT_EQ(whole.chunks[0].start_position, 0);
  EXPECT_EQ(whole.chunks[0].cached_prompt_tokens, 0);
  s.Complete(whole);
  s.Remove(3);
  s.CheckInvariants();

  // A prompt of the whole context fits: nothing is generated after it.
  SchedulerOptions small = Opts(16, 4);
  small.max_model_len = 8;
  Scheduler t(small);
  EXPECT_TRUE(t.Add(1, Range(0, 8), 0, 0, {.prefill_only = true}).ok());
  EXPECT_EQ(t.Add(2, Range(0, 9), 0, 0, {.prefill_only = true}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sovai::serve
