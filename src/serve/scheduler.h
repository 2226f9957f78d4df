// Scheduler: continuous batching with chunked prefill over a paged KV cache with automatic prefix
// caching (block_manager.h). Pure logic: it holds token ids and block ids, never tensors.
//
// The engine loop drives it, one step at a time, from one thread:
//
//   Add(id, prompt, max_new_tokens, adapter_key)     // a new sequence (or an error for the API)
//   loop:
//     StepPlan plan = Schedule();                    // what to feed the model this step
//     run the model on plan.chunks                   // writes KV into the chunks' block tables
//     Complete(plan);                                // the KV is computed: cache full blocks
//                                                    // (Discard(plan) if the model failed)
//     for each chunk with produces_token:
//       AppendToken(chunk.id, sampled)               // or Remove(chunk.id) if the engine stops it
//     Remove(id) for sequences that finished (stop, length) or were cancelled
//
// Contract of a step.
//   - Every chunk with produces_token must be followed, before the next Schedule, by
//     AppendToken or Remove for its sequence (a missing one is a bug: SOVAI_CHECK).
//   - Complete (or Discard) is called with the plan of the latest Schedule, before the next
//     Schedule; an empty plan needs neither. Remove may be called at any time, also between
//     Schedule and Complete (the removed sequence's chunk is then ignored by Complete; its blocks
//     are not handed out again before the next Schedule, i.e. after the model ran).
//   - AppendToken returns true once the sequence has generated max_new_tokens: it is then never
//     scheduled again and its blocks are released (full ones stay cached); the engine reports
//     finish_reason "length" and calls Remove to forget it.
//
// What a step holds (Schedule).
//   1. Decodes: every running sequence with one uncomputed token (the last sampled one), in
//      arrival order, one token each. When a decode needs a new block and none is left, the most
//      recently arrived running sequence is preempted (possibly the decoding sequence itself):
//      its blocks are released and it goes back to the front of the waiting queue, to be recomputed
//      later from its prompt plus the tokens generated so far (recompute preemption, as in vLLM).
//      Its id is listed in StepPlan::preempted, for information: the tokens and the sampler state
//      stay valid. The earliest running arrival is never preempted for another sequence and a lone
//      sequence always fits (Add checks it), so every step with work makes progress.
//   2. Prefill chunks of running, partially prefilled sequences (arrival order), then of waiting
//      sequences (FIFO, admitted while running < max_num_seqs), each as long as the token budget
//      left (max_num_batched_tokens minus the tokens already in the plan) allows. A running
//      sequence's chunk is shortened to the blocks available (when not even one block is, it
//      preempts itself: it is always the latest running arrival, see below); a waiting sequence is
//      only admitted when its whole chunk gets its blocks, and no waiting sequence is admitted in a
//      step that preempted one (it would only thrash). A waiting sequence first reuses the longest
//      chain of cached full blocks of its known tokens (prompt, plus the generated ones after a
//      preemption), capped at (known - 1) tokens rounded down to whole blocks so that the last
//      token is computed and yields logits. When the next block it could reuse is one a running
//      sequence has yet to compute (the other choices of an n > 1 request, requests with one
//      system prompt arriving together), it is not admitted this step (nor anything behind it)
//      but waits for that block to be cached, instead of computing the same prefix side by side.
//      With reuse_partial_blocks it then reuses the first k slots of the cached block that
//      continues that chain with the most of its next tokens (block_manager.h, again leaving the
//      last token to compute): its first chunk carries the copy for the engine to make before the
//      model runs (ScheduledChunk::reuse_source), and the source block holds an extra reference
//      until Complete or Discard, so that nothing evicts it before it is read.
//   Arrival order runs through the running sequences, then the waiting queue (admission takes the
//   front, preemption puts the latest running arrival back there), and only the latest running
//   arrival can be mid-prefill: a chunk shorter than its remaining prefill uses up the budget or
//   the blocks, so nothing is admitted behind it.
//   Blocks for every scheduled token are allocated before Schedule returns. A step never holds
//   more than max_num_batched_tokens tokens nor more than max_num_seqs chunks (and
//   max_num_batched_tokens >= max_num_seqs, so decodes always fit).
//
// Prefix caching. After Complete, every block of a sequence that is full and computed (prompt or
// generated tokens) is registered in the prefix cache under the chain hash of its tokens keyed by
// the adapter (block_manager.h); sequences with different adapter_key never share blocks.
// With reuse_partial_blocks, a sequence that lets its blocks go (finished, removed or preempted,
// with no chunk in flight) also offers its partly computed last block, for partial matches (the
// end of an answer, which the next turn of a conversation repeats). Released blocks stay cached
// until evicted, least recently released first; a sequence releases its blocks last to first, so
// the tail of a sequence is evicted before its (more often shared) prefix.
//
// Cost. Schedule is O(running + scheduled tokens + blocks looked up or allocated) plus the copy of
// each chunk's block table (ceil(context / block_size) ids per chunk; the attention over the
// context costs block_size times more). Nothing is O(num_blocks) or O(waiting) except
// CheckInvariants.
//
// Thread-safety: none; the caller serializes every call (the engine under its lock).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "serve/block_manager.h"

namespace sovai::serve {

// Named limits and defaults.
inline constexpr int64_t kDefaultBlockSize = 16;
inline constexpr int64_t kMaxBlockSize = 1024;
inline constexpr int64_t kDefaultMaxNumBatchedTokens = 2048;
inline constexpr int64_t kDefaultMaxNumSeqs = 64;
// Waiting sequences (including preempted ones) beyond which Add answers ResourceExhausted (429).
inline constexpr int64_t kDefaultMaxWaiting = 1024;

struct SchedulerOptions {
  int64_t num_blocks = 0;                  // KV cache blocks, [1, INT32_MAX]
  int64_t block_size = kDefaultBlockSize;  // tokens per block, [1, kMaxBlockSize]
  int64_t max_num_batched_tokens = kDefaultMaxNumBatchedTokens;  // tokens per step
  int64_t max_num_seqs = kDefaultMaxNumSeqs;  // running sequences (and chunks per step)
  int64_t max_waiting = kDefaultMaxWaiting;   // waiting queue length
  int64_t max_model_len = 0;                  // prompt + max_new_tokens, at most
  bool enable_prefix_caching = true;
  // Also reuse the leading slots of a cached block that matches only part of a block (token-
  // granular prefix hits: a 700-token prefix in blocks of 16 reuses 700 positions, not 688).
  bool reuse_partial_blocks = true;
  // Keys the prefix cache's block hashes; 0 draws a random key (std::random_device).
  uint64_t prefix_hash_key = 0;
};

using SequenceId = uint64_t;

// How a sequence is run (Add).
struct SequenceOptions {
  // A prompt that is only prefilled (embeddings, rerank scores): max_new_tokens is 0, its last
  // chunk has produces_token set (the engine reads that step's outputs) and the engine Removes
  // it then instead of calling AppendToken. Its KV blocks are released (full ones stay cached).
  bool prefill_only = false;
  // Reuse cached prefix blocks at admission. False when the engine needs every prompt token's
  // output (mean pooling reads every hidden state): the whole prompt is computed.
  bool reuse_prefix = true;
};

// What to feed the model for one sequence in one step.
struct ScheduledChunk {
  SequenceId id = 0;
  // The token ids to feed, at positions start_position, start_position + 1, ...
  std::vector<int32_t> tokens;
  // Tokens of this sequence whose KV is already in the cache (from earlier steps or the prefix
  // cache): the chunk attends to them and writes its own KV after them.
  int64_t start_position = 0;
  // Block ids for positions [0, start_position + tokens.size()): position p lives in slot
  // p % block_size of block_table[p / block_size].
  std::vector<BlockId> block_table;
  // True when this chunk reaches the end of the known tokens: the model returns logits for its
  // last token and the engine samples the next one (AppendToken).
  bool produces_token = false;
  // On the first chunk ever scheduled for the sequence: prompt tokens reused from the prefix
  // cache (usage.prompt_tokens_details.cached_tokens); 0 on later chunks.
  int64_t cached_prompt_tokens = 0;
  // A partial prefix hit (reused_positions > 0, first chunk only): before running the chunk, the
  // engine copies slots [0, reused_positions) of block reuse_source, for every layer, into
  // block_table[start_position / block_size], which then holds positions start_position -
  // reused_positions .. start_position - 1. The source is a cached block, never written.
  BlockId reuse_source = -1;
  int64_t reused_positions = 0;
};

struct StepPlan {
  uint64_t step = 0;                   // matches Complete to its Schedule
  std::vector<ScheduledChunk> chunks;  // decodes first, then prefill chunks
  std::vector<SequenceId> preempted;   // sent back to the waiting queue this step
  bool empty() const { return chunks.empty(); }
};

// Counters for metrics (a snapshot).
struct SchedulerStats {
  int64_t num_running = 0;  // admitted and holding blocks
  int64_t num_waiting = 0;  // queued, including preempted ones
  int64_t num_used_blocks = 0;
  int64_t num_cached_blocks = 0;  // registered in the prefix cache (in use or evictable)
  int64_t num_free_blocks = 0;    // allocatable: unused plus evictable
  int64_t num_total_blocks = 0;
  int64_t num_preemptions = 0;                  // since construction
  int64_t prefix_cache_queried_tokens = 0;      // tokens looked up at admission, since construction
  int64_t prefix_cache_hit_tokens = 0;          // of which reused from the cache
  int64_t prefix_cache_partial_hit_tokens = 0;  // of which copied from partly matching blocks
};

class Scheduler {
 public:
  // The options must pass ValidateOptions (a violation is a configuration bug: SOVAI_CHECK).
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // InvalidArgument naming the first option out of range.
  static base::Status ValidateOptions(const SchedulerOptions& options);

  // Queues a new sequence. Errors (nothing is queued):
  //   InvalidArgument: empty prompt, max_new_tokens < 1, prompt + max_new_tokens over
  //     max_model_len or over the whole KV cache (num_blocks * block_size tokens: it could never
  //     run, waiting would not help);
  //   AlreadyExists: the id is in use (until Remove);
  //   ResourceExhausted: max_waiting sequences are already waiting (try again later: HTTP 429).
  // With options.prefill_only, max_new_tokens must be 0 and the prompt alone is checked
  // against the context and the cache.
  base::Status Add(SequenceId id, std::vector<int32_t> prompt, int64_t max_new_tokens,
                   uint64_t adapter_key, SequenceOptions options = {});

  // Forgets a sequence in any state (waiting, running, finished; mid-prefill or mid-step),
  // releasing its blocks (cached full blocks stay cached). Unknown ids are ignored.
  void Remove(SequenceId id);

  // Plans the next step (see the header comment). An empty plan when nothing can run.
  StepPlan Schedule();

  // The model ran `plan` (the latest Schedule's): its tokens' KV is in the cache.
  void Complete(const StepPlan& plan);

  // Instead of Complete, when the model failed to run `plan` (the latest Schedule's): nothing it
  // wrote may be trusted, so nothing of it is cached. Every running sequence goes back to the
  // waiting queue, in arrival order, to be recomputed (blocks cached before this step still
  // serve as prefix hits); the engine may Remove the ones it fails instead.
  void Discard(const StepPlan& plan);

  // The token sampled from the logits of a produces_token chunk of the completed plan. Returns
  // true when the sequence has now generated max_new_tokens (it is finished: see above). Calling
  // it for a sequence that does not await a token is a bug.
  bool AppendToken(SequenceId id, int32_t token);

  // The sequence's prompt and generated tokens; empty for an unknown id.
  std::vector<int32_t> Tokens(SequenceId id) const;
  bool Contains(SequenceId id) const { return sequences_.count(id) != 0; }

  SchedulerStats Stats() const;
  const SchedulerOptions& options() const { return options_; }

  // For tests and metrics.
  int64_t FreeBlockCount() const { return blocks_.FreeBlockCount(); }
  const BlockManager& block_manager() const { return blocks_; }
  // Checks every invariant of the scheduler and the block manager (SOVAI_CHECK): each block's
  // ref_count equals the number of block tables holding it, shared blocks are cached, no table
  // holds a block twice, tables cover exactly the computed (and in-flight) tokens, waiting
  // sequences hold no blocks, limits hold. O(num_blocks + total tokens), for tests.
  void CheckInvariants() const;

 private:
  struct Sequence;
  enum class State : uint8_t { kWaiting, kRunning, kFinished };

  int64_t BlocksFor(int64_t num_tokens) const;
  // Extends the sequence's block table to cover num_tokens positions; false (and nothing
  // allocated) when there are not enough blocks.
  bool AllocateFor(Sequence& seq, int64_t num_tokens);
  void ReleaseBlocks(Sequence& seq);
  // Offers the sequence's partly computed last block to the prefix cache (partial matches only)
  // before its blocks are released.
  void CachePartialLastBlock(Sequence& seq);
  // Computes the chain hashes of the sequence's known full blocks that are not hashed yet.
  void HashFullBlocks(Sequence& seq);
  // Sends a running sequence with no chunk in flight back to the front of the waiting queue.
  void Preempt(Sequence& seq);
  // Looks up the sequence's cached prefix and, if its first chunk of `budget` tokens fits,
  // admits it (running) and adds the chunk. False when it does not fit (nothing changes).
  bool TryAdmit(Sequence& seq, int64_t budget, StepPlan& plan);
  // Releases the references the step's copy sources hold.
  void ReleaseCopySources();
  // Whether a running sequence with this adapter has block `index` of the chain `hash` among its
  // known full blocks but not yet computed and cached.
  bool BeingComputed(uint64_t hash, int64_t index, uint64_t adapter_key) const;
  void AddChunk(Sequence& seq, int64_t num_tokens, StepPlan& plan);
  void EraseRunning(const Sequence& seq);
  void InsertRunning(Sequence& seq);

  SchedulerOptions options_;
  BlockManager blocks_;
  std::unordered_map<SequenceId, std::unique_ptr<Sequence>> sequences_;
  std::vector<Sequence*> running_;  // ordered by arrival; at most max_num_seqs
  std::list<Sequence*> waiting_;    // FIFO; preempted sequences go to the front
  uint64_t next_arrival_ = 0;
  uint64_t step_ = 0;
  bool step_in_flight_ = false;  // a non-empty plan awaits Complete
  int64_t num_awaiting_token_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t prefix_queried_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  int64_t prefix_partial_hit_tokens_ = 0;
  // Sources of the copies the step in flight makes (ScheduledChunk::reuse_source), each holding
  // a reference until Complete or Discard.
  std::vector<BlockId> copy_sources_in_flight_;
};

}  // namespace sovai::serve
