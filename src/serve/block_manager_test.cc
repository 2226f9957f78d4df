#include "serve/block_manager.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace sovai::serve {
namespace {

constexpr uint64_t kKey = 0x5eed;

// Allocates, registers under the chain hash of `tokens` after prev_hash, returns the block.
BlockId AllocateCached(BlockManager& bm, const std::vector<int32_t>& tokens, uint64_t adapter_key,
                       uint64_t prev_hash = kRootHash) {
  const std::optional<BlockId> block = bm.Allocate();
  EXPECT_TRUE(block.has_value());
  EXPECT_TRUE(bm.Register(*block, bm.HashBlock(prev_hash, adapter_key, tokens), prev_hash,
                          adapter_key, tokens));
  return *block;
}

std::optional<BlockId> Find(const BlockManager& bm, const std::vector<int32_t>& tokens,
                            uint64_t adapter_key, uint64_t prev_hash = kRootHash) {
  return bm.Lookup(bm.HashBlock(prev_hash, adapter_key, tokens), prev_hash, adapter_key, tokens);
}

TEST(BlockManagerTest, AllocatesEveryBlockOnceThenRunsOut) {
  BlockManager bm(8, 4, kKey);
  std::set<BlockId> seen;
  for (int i = 0; i < 8; ++i) {
    const std::optional<BlockId> block = bm.Allocate();
    ASSERT_TRUE(block.has_value());
    EXPECT_GE(*block, 0);
    EXPECT_LT(*block, 8);
    EXPECT_TRUE(seen.insert(*block).second) << "block " << *block << " handed out twice";
    EXPECT_EQ(bm.RefCount(*block), 1);
  }
  EXPECT_FALSE(bm.Allocate().has_value());
  EXPECT_EQ(bm.FreeBlockCount(), 0);
  EXPECT_EQ(bm.UsedBlockCount(), 8);
  bm.CheckInvariants();
  bm.Release(3);
  EXPECT_EQ(bm.FreeBlockCount(), 1);
  EXPECT_EQ(bm.Allocate(), 3);
  for (BlockId b : seen) bm.Release(b);
  EXPECT_EQ(bm.FreeBlockCount(), 8);
  bm.CheckInvariants();
}

TEST(BlockManagerTest, HashDependsOnEveryInput) {
  BlockManager bm(1, 4, kKey);
  const std::vector<int32_t> t = {1, 2, 3, 4};
  const uint64_t h = bm.HashBlock(kRootHash, 0, t);
  EXPECT_EQ(h, bm.HashBlock(kRootHash, 0, t));
  EXPECT_NE(h, bm.HashBlock(kRootHash, 7, t));                                  // adapter
  EXPECT_NE(h, bm.HashBlock(h, 0, t));                                          // previous block
  EXPECT_NE(h, bm.HashBlock(kRootHash, 0, std::vector<int32_t>{1, 2, 4, 3}));   // order
  EXPECT_NE(h, bm.HashBlock(kRootHash, 0, std::vector<int32_t>{1, 2, 3, 5}));   // last token
  EXPECT_NE(h, bm.HashBlock(kRootHash, 0, std::vector<int32_t>{1, 2, 3, -4}));  // sign
  BlockManager other_key(1, 4, kKey + 1);
  EXPECT_NE(h, other_key.HashBlock(kRootHash, 0, t));  // key
  // An odd block size hashes its last token too.
  BlockManager odd(1, 3, kKey);
  EXPECT_NE(odd.HashBlock(kRootHash, 0, std::vector<int32_t>{1, 2, 3}),
            odd.HashBlock(kRootHash, 0, std::vector<int32_t>{1, 2, 4}));
}

TEST(BlockManagerTest, LookupFindsRegisteredBlockAndComparesContent) {
  BlockManager bm(4, 4, kKey);
  const std::vector<int32_t> t = {10, 11, 12, 13};
  EXPECT_FALSE(Find(bm, t, 0).has_value());
  const BlockId b = AllocateCached(bm, t, 0);
  EXPECT_TRUE(bm.IsCached(b));
  EXPECT_EQ(bm.CachedBlockCount(), 1);
  EXPECT_EQ(Find(bm, t, 0), b);
  // Lookup changes nothing.
  EXPECT_EQ(bm.RefCount(b), 1);

  const uint64_t h = bm.HashBlock(kRootHash, 0, t);
  // A (forced) hash collision with different content is a miss, not a wrong hit.
  EXPECT_FALSE(bm.Lookup(h, kRootHash, 0, std::vector<int32_t>{10, 11, 12, 14}).has_value());
  EXPECT_FALSE(bm.Lookup(h, kRootHash, 9, t).has_value());      // other adapter
  EXPECT_FALSE(bm.Lookup(h, 12345, 0, t).has_value());          // other prefix
  EXPECT_FALSE(bm.Lookup(h + 1, kRootHash, 0, t).has_value());  // other hash
  // A different adapter never finds the block.
  EXPECT_FALSE(Find(bm, t, 1).has_value());
  bm.CheckInvariants();
}

TEST(BlockManagerTest, PartialMatchFindsTheLongestContinuationOfTheSameChain) {
  BlockManager bm(8, 4, kKey);
  const BlockId root = AllocateCached(bm, {1, 2, 3, 4}, 0);
  const uint64_t chain = bm.HashBlock(kRootHash, 0, std::vector<int32_t>{1, 2, 3, 4});
  const BlockId short_match = AllocateCached(bm, {5, 6, 0, 0}, 0, chain);
  const BlockId long_match = AllocateCached(bm, {5, 6, 7, 0}, 0, chain);
  AllocateCached(bm, {5, 6, 7, 9}, 1, chain);  // another adapter
  AllocateCached(bm, {5, 6, 7, 8}, 0, 777);    // another chain
  bm.CheckInvariants();

  const std::vector<int32_t> wanted = {5, 6, 7, 8};
  std::optional<PartialMatch> m = bm.LongestPartialMatch(chain, 0, wanted);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->block, long_match);
  EXPECT_EQ(m->tokens, 3);
  // Only the tokens given are compared; the earliest registered wins a tie.
  m = bm.LongestPartialMatch(chain, 0, std::vector<int32_t>{5, 6});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->block, short_match);
  EXPECT_EQ(m->tokens, 2);
  EXPECT_FALSE(bm.LongestPartialMatch(chain, 0, std::vector<int32_t>{6}).has_value());
  EXPECT_FALSE(bm.LongestPartialMatch(chain, 0, {}).has_value());
  EXPECT_FALSE(bm.LongestPartialMatch(chain, 2, wanted).has_value());  // no such adapter
  m = bm.LongestPartialMatch(kRootHash, 0, std::vector<int32_t>{1, 2, 9});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->block, root);
  EXPECT_EQ(m->tokens, 2);
  EXPECT_EQ(bm.RefCount(long_match), 1) << "a lookup changes nothing";

  // An evicted block is no longer a candidate.
  bm.Release(long_match);
  for (BlockId b = 0; b < 8; ++b) {
    if (b != long_match && bm.RefCount(b) > 0) bm.Release(b);
  }
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(bm.Allocate().has_value());  // evicts every one
  bm.CheckInvariants();
  EXPECT_FALSE(bm.LongestPartialMatch(chain, 0, wanted).has_value());
  EXPECT_EQ(bm.CachedBlockCount(), 0);
}

TEST(BlockManagerTest, PartialMatchLooksAtTheMostRecentContinuationsOnly) {
  BlockManager bm(kMaxPartialCandidates + 2, 2, kKey);
  const BlockId oldest = AllocateCached(bm, {1, 2}, 0);
  for (int32_t i = 0; i < kMaxPartialCandidates; ++i) AllocateCached(bm, {1, 100 + i}, 0);
  std::optional<PartialMatch> m = bm.LongestPartialMatch(kRootHash, 0, std::vector<int32_t>{1, 2});
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->block, oldest) << "past the candidate limit";
  EXPECT_EQ(m->tokens, 1);
  bm.CheckInvariants();
}

TEST(BlockManagerTest, SecondRegistrationOfTheSameHashIsRefused) {
  BlockManager bm(4, 2, kKey);
  const std::vector<int32_t> t = {1, 2};
  const BlockId first = AllocateCached(bm, t, 0);
  const BlockId second = *bm.Allocate();
  EXPECT_FALSE(bm.Register(second, bm.HashBlock(kRootHash, 0, t), kRootHash, 0, t));
  EXPECT_FALSE(bm.IsCached(second));
  EXPECT_EQ(Find(bm, t, 0), first);
  // The uncached duplicate goes back to the free stack, the cached block to the LRU.
  bm.Release(second);
  bm.Release(first);
  EXPECT_EQ(bm.FreeBlockCount(), 4);
  EXPECT_EQ(bm.CachedBlockCount(), 1);
  bm.CheckInvariants();
}

TEST(BlockManagerTest, ReleasedCachedBlockStaysFindableAndCanBeAcquired) {
  BlockManager bm(2, 2, kKey);
  const std::vector<int32_t> t = {5, 6};
  const BlockId b = AllocateCached(bm, t, 0);
  bm.Release(b);
  EXPECT_EQ(bm.RefCount(b), 0);
  EXPECT_EQ(bm.FreeBlockCount(), 2);  // evictable counts as allocatable
  EXPECT_EQ(Find(bm, t, 0), b);
  bm.Acquire(b);
  EXPECT_EQ(bm.RefCount(b), 1);
  EXPECT_EQ(bm.FreeBlockCount(), 1);
  bm.Acquire(b);
  EXPECT_EQ(bm.RefCount(b), 2);
  bm.CheckInvariants();
  // An acquired block is not evicted: the only other block is handed out, then none.
  const std::optional<BlockId> other = bm.Allocate();
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(*other, b);
  EXPECT_FALSE(bm.Allocate().has_value());
  EXPECT_EQ(Find(bm, t, 0), b);
  bm.Release(b);
  bm.Release(b);
  bm.Release(*other);
  bm.CheckInvariants();
}

TEST(BlockManagerTest, EvictsLeastRecentlyReleasedCachedBlockFirst) {
  BlockManager bm(3, 2, kKey);
  const std::vector<int32_t> a = {1, 1}, b = {2, 2}, c = {3, 3};
  const BlockId ba = AllocateCached(bm, a, 0);
  const BlockId bb = AllocateCached(bm, b, 0);
  const BlockId bc = AllocateCached(bm, c, 0);
  // Released b, a, c: the LRU order is b (oldest), a, c.
  bm.Release(bb);
  bm.Release(ba);
  bm.Release(bc);
  // Reusing a refreshes nothing until it is released again: acquire + release moves it last.
  bm.Acquire(ba);
  bm.Release(ba);  // order now b, c, a

  EXPECT_EQ(bm.Allocate(), bb);
  EXPECT_FALSE(Find(bm, b, 0).has_value()) << "an evicted block is unregistered";
  EXPECT_EQ(Find(bm, c, 0), bc);
  EXPECT_EQ(Find(bm, a, 0), ba);
  EXPECT_EQ(bm.Allocate(), bc);
  EXPECT_FALSE(Find(bm, c, 0).has_value());
  EXPECT_EQ(bm.Allocate(), ba);
  EXPECT_FALSE(bm.Allocate().has_value());
  EXPECT_EQ(bm.CachedBlockCount(), 0);
  bm.CheckInvariants();
}

TEST(BlockManagerTest, PrefersFreeBlocksOverEvictingCachedOnes) {
  BlockManager bm(3, 2, kKey);
  const std::vector<int32_t> t = {4, 2};
  const BlockId cached = AllocateCached(bm, t, 0);
  bm.Release(cached);
  const std::optional<BlockId> x = bm.Allocate();
  const std::optional<BlockId> y = bm.Allocate();
  ASSERT_TRUE(x.has_value() && y.has_value());
  EXPECT_NE(*x, cached);
  EXPECT_NE(*y, cached);
  EXPECT_EQ(Find(bm, t, 0), cached) << "evicted while free blocks were left";
  EXPECT_EQ(bm.Allocate(), cached);  // now it must go
  bm.CheckInvariants();
}

TEST(BlockManagerTest, ChainDistinguishesSameBlockUnderDifferentPrefixes) {
  BlockManager bm(4, 2, kKey);
  const std::vector<int32_t> p1 = {1, 2}, p2 = {3, 4}, tail = {9, 9};
  AllocateCached(bm, p1, 0);
  const uint64_t h1 = bm.HashBlock(kRootHash, 0, p1);
  const uint64_t h2 = bm.HashBlock(kRootHash, 0, p2);
  const BlockId t1 = AllocateCached(bm, tail, 0, h1);
  EXPECT_EQ(Find(bm, tail, 0, h1), t1);
  EXPECT_FALSE(Find(bm, tail, 0, h2).has_value());
  EXPECT_FALSE(Find(bm, tail, 0).has_value());
}

TEST(BlockManagerDeathTest, MisuseIsABug) {
  BlockManager bm(2, 2, kKey);
  EXPECT_DEATH(bm.Release(0), "block 0");
  EXPECT_DEATH(bm.Acquire(0), "acquiring free block");
  const BlockId b = *bm.Allocate();
  const std::vector<int32_t> t = {1, 2};
  ASSERT_TRUE(bm.Register(b, 7, kRootHash, 0, t));
  EXPECT_DEATH((void)bm.Register(b, 8, kRootHash, 0, t), "registered twice");
  EXPECT_DEATH((void)bm.HashBlock(kRootHash, 0, std::vector<int32_t>{1}), "");
  EXPECT_DEATH(BlockManager(0, 2, kKey), "");
}

}  // namespace
}  // namespace sovai::serve
