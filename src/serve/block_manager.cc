#include "serve/block_manager.h"

#include <algorithm>
#include <limits>

#include "base/check.h"

namespace sovai::serve {
namespace {

// The splitmix64 finalizer: a bijection on 64 bits with full avalanche.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, uint64_t hash_key)
    : block_size_(block_size), hash_key_(hash_key) {
  SOVAI_CHECK(num_blocks >= 1 && num_blocks <= std::numeric_limits<int32_t>::max()) << num_blocks;
  SOVAI_CHECK_GE(block_size, 1);
  const auto n = static_cast<size_t>(num_blocks);
  ref_counts_.assign(n, 0);
  cached_.assign(n, 0);
  hashes_.assign(n, 0);
  prev_hashes_.assign(n, 0);
  adapter_keys_.assign(n, 0);
  tokens_.assign(n * static_cast<size_t>(block_size), 0);
  filled_.assign(n, 0);
  lru_prev_.assign(n, kNone);
  lru_next_.assign(n, kNone);
  // Pushed in reverse so that a fresh manager hands out 0, 1, 2, ...
  free_.reserve(n);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<BlockId>(b));
}

uint64_t BlockManager::HashBlock(uint64_t prev_hash, uint64_t adapter_key,
                                 std::span<const int32_t> tokens) const {
  SOVAI_CHECK_EQ(static_cast<int64_t>(tokens.size()), block_size_);
  // The key enters first and again at the end, so that without it neither the chain nor a single
  // block's hash can be computed (or collided on purpose) from the outside.
  uint64_t h = Mix(hash_key_ ^ prev_hash);
  h = Mix(h ^ adapter_key);
  size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    const uint64_t pair = (uint64_t{static_cast<uint32_t>(tokens[i])} << 32) |
                          uint64_t{static_cast<uint32_t>(tokens[i + 1])};
    h = Mix(h ^ pair);
  }
  if (i < tokens.size()) h = Mix(h ^ uint64_t{static_cast<uint32_t>(tokens[i])});
  return Mix(h ^ hash_key_ ^ tokens.size());
}

std::optional<BlockId> BlockManager::Allocate() {
  BlockId block = kNone;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (lru_head_ != kNone) {
    block = lru_head_;
    LruUnlink(block);
    Unregister(block);
  } else {
    return std::nullopt;
  }
  SOVAI_CHECK_EQ(ref_counts_[block], 0);
  ref_counts_[block] = 1;
  return block;
}

std::optional<BlockId> BlockManager::Lookup(uint64_t hash, uint64_t prev_hash, uint64_t adapter_key,
                                            std::span<const int32_t> tokens) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const BlockId block = it->second;
  if (prev_hashes_[block] != prev_hash || adapter_keys_[block] != adapter_key) return std::nullopt;
  const std::span<const int32_t> stored = StoredTokens(block);
  if (!std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end())) return std::nullopt;
  return block;
}

std::optional<PartialMatch> BlockManager::LongestPartialMatch(
    uint64_t prev_hash, uint64_t adapter_key, std::span<const int32_t> tokens) const {
  const auto it = continuations_.find(ContinuationKey(prev_hash, adapter_key));
  if (it == continuations_.end()) return std::nullopt;
  const std::vector<BlockId>& candidates = it->second;
  const size_t first =
      candidates.size() - std::min(candidates.size(), static_cast<size_t>(kMaxPartialCandidates));
  std::optional<PartialMatch> best;
  for (size_t i = first; i < candidates.size(); ++i) {
    const BlockId block = candidates[i];
    // The key is a hash of the two: check them.
    if (prev_hashes_[block] != prev_hash || adapter_keys_[block] != adapter_key) continue;
    const std::span<const int32_t> stored = StoredTokens(block).first(filled_[block]);
    const size_t compared = std::min(tokens.size(), stored.size());
    const auto matched = static_cast<int64_t>(
        std::mismatch(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(compared),
                      stored.begin())
            .first -
        tokens.begin());
    if (matched > 0 && (!best.has_value() || matched > best->tokens)) {
      best = PartialMatch{.block = block, .tokens = matched};
      if (static_cast<size_t>(matched) == tokens.size()) break;
    }
  }
  return best;
}

void BlockManager::Acquire(BlockId block) {
  SOVAI_CHECK(block >= 0 && block < num_blocks()) << block;
  if (ref_counts_[block] == 0) {
    SOVAI_CHECK(cached_[block]) << "acquiring free block " << block;
    LruUnlink(block);
  }
  ++ref_counts_[block];
}

void BlockManager::Release(BlockId block) {
  SOVAI_CHECK(block >= 0 && block < num_blocks()) << block;
  SOVAI_CHECK_GT(ref_counts_[block], 0) << "block " << block;
  if (--ref_counts_[block] > 0) return;
  if (cached_[block]) {
    LruPushBack(block);
  } else {
    free_.push_back(block);
  }
}

bool BlockManager::Register(BlockId block, uint64_t hash, uint64_t prev_hash, uint64_t adapter_key,
                            std::span<const int32_t> tokens) {
  SOVAI_CHECK(block >= 0 && block < num_blocks()) << block;
  SOVAI_CHECK_GT(ref_counts_[block], 0) << "registering unused block " << block;
  SOVAI_CHECK(!cached_[block]) << "block " << block << " registered twice";
  SOVAI_CHECK_EQ(static_cast<int64_t>(tokens.size()), block_size_);
  if (!by_hash_.emplace(hash, block).second) return false;
  hashes_[block] = hash;
  Cache(block, prev_hash, adapter_key, tokens);
  return true;
}

void BlockManager::RegisterPartial(BlockId block, uint64_t prev_hash, uint64_t adapter_key,
                                   std::span<const int32_t> tokens) {
  SOVAI_CHECK(block >= 0 && block < num_blocks()) << block;
  SOVAI_CHECK_GT(ref_counts_[block], 0) << "registering unused block " << block;
  SOVAI_CHECK(!cached_[block]) << "block " << block << " registered twice";
  SOVAI_CHECK(!tokens.empty() && static_cast<int64_t>(tokens.size()) < block_size_)
      << tokens.size() << " tokens";
  Cache(block, prev_hash, adapter_key, tokens);
}

void BlockManager::Cache(BlockId block, uint64_t prev_hash, uint64_t adapter_key,
                         std::span<const int32_t> tokens) {
  cached_[block] = 1;
  ++num_cached_;
  prev_hashes_[block] = prev_hash;
  adapter_keys_[block] = adapter_key;
  filled_[block] = static_cast<int32_t>(tokens.size());
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + block * block_size_);
  continuations_[ContinuationKey(prev_hash, adapter_key)].push_back(block);
}

uint64_t BlockManager::ContinuationKey(uint64_t prev_hash, uint64_t adapter_key) {
  return Mix(prev_hash ^ Mix(adapter_key));
}

void BlockManager::Unregister(BlockId block) {
  if (filled_[block] == block_size_) by_hash_.erase(hashes_[block]);
  const auto it = continuations_.find(ContinuationKey(prev_hashes_[block], adapter_keys_[block]));
  SOVAI_CHECK(it != continuations_.end()) << "block " << block << " not a continuation";
  std::vector<BlockId>& siblings = it->second;
  siblings.erase(std::find(siblings.begin(), siblings.end(), block));
  if (siblings.empty()) continuations_.erase(it);
  cached_[block] = 0;
  --num_cached_;
}

int32_t BlockManager::RefCount(BlockId block) const {
  SOVAI_CHECK(block >= 0 && block < num_blocks()) << block;
  return ref_counts_[block];
}

bool BlockManager::IsCached(BlockId block) const {
  SOVAI_CHECK(block >= 0 && block < num_blocks()) << block;
  return cached_[block] != 0;
}

void BlockManager::CheckInvariants() const {
  const int64_t n = num_blocks();
  std::vector<uint8_t> on_free(static_cast<size_t>(n), 0);
  for (BlockId b : free_) {
    SOVAI_CHECK(b >= 0 && b < n) << b;
    SOVAI_CHECK(!on_free[b]) << "block " << b << " twice on the free stack";
    on_free[b] = 1;
  }
  std::vector<uint8_t> on_lru(static_cast<size_t>(n), 0);
  int64_t lru_length = 0;
  BlockId prev = kNone;
  for (BlockId b = lru_head_; b != kNone; b = lru_next_[b]) {
    SOVAI_CHECK(b >= 0 && b < n) << b;
    SOVAI_CHECK(!on_lru[b]) << "LRU cycle at block " << b;
    SOVAI_CHECK_EQ(lru_prev_[b], prev);
    on_lru[b] = 1;
    prev = b;
    ++lru_length;
  }
  SOVAI_CHECK_EQ(lru_tail_, prev);
  SOVAI_CHECK_EQ(lru_length, num_evictable_);
  int64_t num_cached = 0;
  int64_t num_full = 0;
  for (BlockId b = 0; b < n; ++b) {
    SOVAI_CHECK_GE(ref_counts_[b], 0) << "block " << b;
    if (ref_counts_[b] > 0) {
      SOVAI_CHECK(!on_free[b] && !on_lru[b]) << "block " << b << " in use and free";
    } else if (cached_[b]) {
      SOVAI_CHECK(on_lru[b] && !on_free[b]) << "evictable block " << b << " not on the LRU";
    } else {
      SOVAI_CHECK(on_free[b] && !on_lru[b]) << "free block " << b << " not on the free stack";
    }
    if (cached_[b]) {
      ++num_cached;
      SOVAI_CHECK(filled_[b] >= 1 && filled_[b] <= block_size_) << "block " << b;
      if (filled_[b] == block_size_) {
        ++num_full;
        const auto it = by_hash_.find(hashes_[b]);
        SOVAI_CHECK(it != by_hash_.end() && it->second == b) << "block " << b << " not by hash";
      }
    }
  }
  SOVAI_CHECK_EQ(num_cached, num_cached_);
  SOVAI_CHECK_EQ(num_full, static_cast<int64_t>(by_hash_.size()));
  int64_t num_continuations = 0;
  for (const auto& [key, blocks] : continuations_) {
    SOVAI_CHECK(!blocks.empty()) << "an empty list of continuations";
    for (BlockId b : blocks) {
      SOVAI_CHECK(b >= 0 && b < n && cached_[b]) << "uncached continuation " << b;
      SOVAI_CHECK_EQ(ContinuationKey(prev_hashes_[b], adapter_keys_[b]), key);
      ++num_continuations;
    }
  }
  SOVAI_CHECK_EQ(num_continuations, num_cached);
}

void BlockManager::LruPushBack(BlockId block) {
  lru_prev_[block] = lru_tail_;
  lru_next_[block] = kNone;
  if (lru_tail_ != kNone) {
    lru_next_[lru_tail_] = block;
  } else {
    lru_head_ = block;
  }
  lru_tail_ = block;
  ++num_evictable_;
}

void BlockManager::LruUnlink(BlockId block) {
  const BlockId prev = lru_prev_[block];
  const BlockId next = lru_next_[block];
  if (prev != kNone) {
    lru_next_[prev] = next;
  } else {
    lru_head_ = next;
  }
  if (next != kNone) {
    lru_prev_[next] = prev;
  } else {
    lru_tail_ = prev;
  }
  lru_prev_[block] = kNone;
  lru_next_[block] = kNone;
  --num_evictable_;
}

std::span<const int32_t> BlockManager::StoredTokens(BlockId block) const {
  return {tokens_.data() + block * block_size_, static_cast<size_t>(block_size_)};
}

}  // namespace sovai::serve
