// BlockManager: the ids of the paged KV cache, their reference counts and the prefix cache.
//
// The model owns the physical KV arrays, num_blocks blocks of block_size token slots each; this
// class only hands out block ids in [0, num_blocks) and remembers which full blocks hold which
// tokens, so that a later sequence with the same prefix can reuse their KV instead of computing
// it again (automatic prefix caching, as in vLLM). The scheduler (scheduler.h) is its only user.
//
// Blocks. Each block is in exactly one of three states:
//   - in use: ref_count > 0, in the block table of ref_count sequences (only cached blocks are
//     shared, so a block with ref_count > 1 is always cached);
//   - free: ref_count 0 and not cached, on a free stack;
//   - evictable: ref_count 0 and cached (content kept, hash registered), on an LRU list ordered by
//     the time its ref_count dropped to 0.
// Allocate takes a free block first and evicts the least recently released evictable block only
// when none is free, so cached content is kept as long as possible.
//
// Prefix cache. A full block whose KV has been computed is registered under the hash chain
//   h_i = HashBlock(h_{i-1}, adapter_key, tokens of block i),   h_{-1} = kRootHash,
// with adapter_key identifying the LoRA adapter's content (0: the base model), so that blocks of
// different adapters never match. The hash is keyed (hash_key, drawn at random by the server) so
// that clients cannot aim collisions at it, and Lookup compares the stored previous hash, adapter
// key and tokens as well: a hit is only returned when block i's own content and the chain hash of
// its prefix both match. (The remaining risk is two different prefixes with the same 64-bit keyed
// chain hash, ~n^2 / 2^64 for n cached blocks.) A registered block is immutable until evicted.
//
// Partial matches. A new sequence whose next tokens match only the first k < block_size tokens of
// a cached block (the same request again with a different ending, a shared system prompt that
// ends mid-block) can still reuse those k positions' KV: LongestPartialMatch finds, among the
// cached blocks that continue the same chain (same previous hash and adapter), the one whose
// leading tokens match the most; the caller copies its first k slots into a block of its own
// (cached blocks are immutable). Cached blocks are indexed by (previous hash, adapter) for this.
// A sequence's last, partly filled block can join the cache too when the sequence lets it go
// (RegisterPartial: the end of a finished answer, which the next turn of the conversation
// repeats); such a block only serves partial matches, never Lookup.
//
// Cost: every operation is O(1) (hash maps, intrusive doubly-linked LRU, free stack) except
// Lookup and Register, which also compare or copy block_size tokens, eviction, which also unlinks
// the block from its chain's list of continuations (O(continuations)), LongestPartialMatch
// (O(kMaxPartialCandidates * block_size)) and CheckInvariants, O(num_blocks).
//
// Thread-safety: none; the scheduler calls it from the engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace sovai::serve {

using BlockId = int32_t;

// The "previous hash" of a sequence's first block.
inline constexpr uint64_t kRootHash = 0;

// The most recently registered continuations of one chain that LongestPartialMatch compares (a
// system prompt shared by thousands of requests has thousands of continuations).
inline constexpr int64_t kMaxPartialCandidates = 64;

// A cached block whose first `tokens` tokens are the ones looked for.
struct PartialMatch {
  BlockId block = -1;
  int64_t tokens = 0;
};

class BlockManager {
 public:
  // num_blocks in [1, INT32_MAX], block_size >= 1 (violations are bugs: SOVAI_CHECK). hash_key
  // keys HashBlock; any value works, a random one keeps collisions out of clients' reach.
  BlockManager(int64_t num_blocks, int64_t block_size, uint64_t hash_key);

  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;

  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t block_size() const { return block_size_; }

  // Blocks that Allocate can hand out: free plus evictable (ref_count 0).
  int64_t FreeBlockCount() const { return static_cast<int64_t>(free_.size()) + num_evictable_; }
  // Blocks with ref_count > 0.
  int64_t UsedBlockCount() const { return num_blocks() - FreeBlockCount(); }
  // Blocks registered in the prefix cache (full or partial), in use or evictable.
  int64_t CachedBlockCount() const { return num_cached_; }

  // The chain hash of one full block: tokens.size() must be block_size.
  uint64_t HashBlock(uint64_t prev_hash, uint64_t adapter_key,
                     std::span<const int32_t> tokens) const;

  // A block with ref_count 1, or nullopt when every block is in use. Evicts (unregisters) the
  // least recently released evictable block when no block is free.
  std::optional<BlockId> Allocate();

  // The cached block registered under `hash` whose previous hash, adapter key and tokens are
  // exactly these; nullopt otherwise. Changes nothing (call Acquire to use the block).
  std::optional<BlockId> Lookup(uint64_t hash, uint64_t prev_hash, uint64_t adapter_key,
                                std::span<const int32_t> tokens) const;

  // Among the cached blocks whose previous hash and adapter key are these (up to the
  // kMaxPartialCandidates most recently registered), the one whose leading tokens match the
  // longest prefix of `tokens` (a partial block compares its filled tokens only); the earliest
  // registered wins a tie. nullopt when none matches even the first token. Changes nothing.
  std::optional<PartialMatch> LongestPartialMatch(uint64_t prev_hash, uint64_t adapter_key,
                                                  std::span<const int32_t> tokens) const;

  // Adds a reference to a block already in use or cached (a Lookup hit); an evictable block
  // leaves the LRU list. Acquiring a free (uncached, unused) block is a bug.
  void Acquire(BlockId block);

  // Drops one reference. At 0 a cached block becomes evictable (most recently used end of the
  // LRU), an uncached one free.
  void Release(BlockId block);

  // Registers a full, computed block in use under its chain hash and copies its tokens (the
  // block becomes immutable). Returns false, and changes nothing, when another block already
  // holds this hash (the same prefix computed twice concurrently: the first one stays the cached
  // copy, this one is freed as usual on release). Registering a block twice is a bug.
  bool Register(BlockId block, uint64_t hash, uint64_t prev_hash, uint64_t adapter_key,
                std::span<const int32_t> tokens);

  // Registers a block in use whose first tokens.size() slots, fewer than block_size, are
  // computed and will never change (its sequence is letting it go) as a continuation of
  // prev_hash for partial matches only. The block becomes cached (immutable) like a full one.
  // Registering a cached block, or an empty or full token list, is a bug.
  void RegisterPartial(BlockId block, uint64_t prev_hash, uint64_t adapter_key,
                       std::span<const int32_t> tokens);

  int32_t RefCount(BlockId block) const;
  bool IsCached(BlockId block) const;

  // Checks every invariant in the header comment (SOVAI_CHECK); O(num_blocks), for tests.
  void CheckInvariants() const;

 private:
  static constexpr BlockId kNone = -1;

  void LruPushBack(BlockId block);
  void LruUnlink(BlockId block);
  std::span<const int32_t> StoredTokens(BlockId block) const;
  // The key of the continuations of a chain: its previous hash under an adapter.
  static uint64_t ContinuationKey(uint64_t prev_hash, uint64_t adapter_key);
  void Unregister(BlockId block);
  // Marks a block cached with these contents and lists it among its chain's continuations.
  void Cache(BlockId block, uint64_t prev_hash, uint64_t adapter_key,
             std::span<const int32_t> tokens);

  int64_t block_size_;
  uint64_t hash_key_;

  // Per block, indexed by BlockId.
  std::vector<int32_t> ref_counts_;
  std::vector<uint8_t> cached_;  // registered in by_hash_
  std::vector<uint64_t> hashes_;
  std::vector<uint64_t> prev_hashes_;
  std::vector<uint64_t> adapter_keys_;
  std::vector<int32_t> tokens_;  // (num_blocks, block_size): the tokens of cached blocks
  std::vector<int32_t> filled_;  // tokens of a cached block: block_size, or fewer when partial
  int64_t num_cached_ = 0;
  // Intrusive LRU of evictable blocks; kNone ends the list. Head: least recently released.
  std::vector<BlockId> lru_prev_;
  std::vector<BlockId> lru_next_;
  BlockId lru_head_ = kNone;
  BlockId lru_tail_ = kNone;
  int64_t num_evictable_ = 0;

  std::vector<BlockId> free_;  // unused, uncached blocks (a stack)
  std::unordered_map<uint64_t, BlockId> by_hash_;
  // ContinuationKey -> the cached blocks with that previous hash and adapter, in registration
  // order.
  std::unordered_map<uint64_t, std::vector<BlockId>> continuations_;
};

}  // namespace sovai::serve
