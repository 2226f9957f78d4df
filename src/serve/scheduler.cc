#include "serve/scheduler.h"

#include <algorithm>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>

#include "base/check.h"

namespace sovai::serve {
namespace {

uint64_t HashKeyOrRandom(uint64_t key) {
  if (key != 0) return key;
  std::random_device device;
  return (uint64_t{device()} << 32) ^ uint64_t { device() };
}

}  // namespace

struct Scheduler::Sequence {
  SequenceId id = 0;
  uint64_t arrival = 0;  // Add order; kept across preemptions
  uint64_t adapter_key = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int64_t prompt_len = 0;
  int64_t max_new_tokens = 0;
  State state = State::kWaiting;
  std::list<Sequence*>::iterator waiting_pos;  // valid while kWaiting

  std::vector<BlockId> block_table;  // covers num_computed + in_flight_tokens positions
  // Chain hashes of the known full blocks computed so far (tokens only grow, so they stay valid
  // across preemptions).
  std::vector<uint64_t> block_hashes;
  int64_t num_computed = 0;           // tokens whose KV is in the cache
  int64_t num_registered_blocks = 0;  // leading full blocks already offered to the prefix cache
  int64_t in_flight_tokens = 0;       // the chunk in the current plan; 0: not in it
  bool awaiting_token = false;        // its last chunk produced logits; AppendToken pending
  bool scheduled_before = false;      // cached_prompt_tokens already reported
  bool reuse_prefix = true;           // SequenceOptions::reuse_prefix

  int64_t known() const { return static_cast<int64_t>(tokens.size()); }
  int64_t generated() const { return known() - prompt_len; }
};

Scheduler::Scheduler(SchedulerOptions options)
    : options_(options),
      blocks_(options.num_blocks, options.block_size, HashKeyOrRandom(options.prefix_hash_key)) {
  const base::Status valid = ValidateOptions(options_);
  SOVAI_CHECK(valid.ok()) << valid.ToString();
  running_.reserve(static_cast<size_t>(options_.max_num_seqs));
}

Scheduler::~Scheduler() = default;

base::Status Scheduler::ValidateOptions(const SchedulerOptions& o) {
  auto bad = [](const std::string& what) {
    return base::InvalidArgumentError("scheduler options: " + what);
  };
  if (o.num_blocks < 1 || o.num_blocks > std::numeric_limits<int32_t>::max()) {
    return bad("num_blocks is " + std::to_string(o.num_blocks) + ", must be in [1, 2^31-1]");
  }
  if (o.block_size < 1 || o.block_size > kMaxBlockSize) {
    return bad("block_size is " + std::to_string(o.block_size) + ", must be in [1, " +
               std::to_string(kMaxBlockSize) + "]");
  }
  if (o.max_num_seqs < 1) return bad("max_num_seqs must be at least 1");
  if (o.max_num_batched_tokens < o.max_num_seqs) {
    return bad("max_num_batched_tokens (" + std::to_string(o.max_num_batched_tokens) +
               ") must be at least max_num_seqs (" + std::to_string(o.max_num_seqs) +
               "), so that every running sequence can decode each step");
  }
  if (o.max_waiting < 1) return bad("max_waiting must be at least 1");
  if (o.max_model_len < 1) return bad("max_model_len must be at least 1");
  return base::Status::Ok();
}

base::Status Scheduler::Add(SequenceId id, std::vector<int32_t> prompt, int64_t max_new_tokens,
                            uint64_t adapter_key, SequenceOptions sequence_options) {
  const auto prompt_len = static_cast<int64_t>(prompt.size());
  if (prompt_len == 0) {
    return base::InvalidArgumentError("the prompt is empty: at least one token is needed");
  }
  if (sequence_options.prefill_only && max_new_tokens != 0) {
    return base::InvalidArgumentError("a prefill-only sequence generates no tokens");
  }
  if (!sequence_options.prefill_only && max_new_tokens < 1) {
    return base::InvalidArgumentError("max_tokens is " + std::to_string(max_new_tokens) +
                                      ", must be at least 1");
  }
  // Written as a difference so that a huge max_new_tokens cannot overflow.
  if (prompt_len > options_.max_model_len || max_new_tokens > options_.max_model_len - prompt_len) {
    return base::InvalidArgumentError(
        "the prompt (" + std::to_string(prompt_len) + " tokens) plus max_tokens (" +
        std::to_string(max_new_tokens) + ") exceeds the model's context length of " +
        std::to_string(options_.max_model_len) + " tokens; shorten the prompt or lower max_tokens");
  }
  const int64_t cache_tokens = options_.num_blocks * options_.block_size;
  if (prompt_len + max_new_tokens > cache_tokens) {
    return base::InvalidArgumentError(
        "the prompt (" + std::to_string(prompt_len) + " tokens) plus max_tokens (" +
        std::to_string(max_new_tokens) + ") exceeds this server's KV cache of " +
        std::to_string(cache_tokens) + " tokens; shorten the prompt or lower max_tokens");
  }
  if (sequences_.count(id) != 0) {
    return base::AlreadyExistsError("sequence " + std::to_string(id) + " is already scheduled");
  }
  if (static_cast<int64_t>(waiting_.size()) >= options_.max_waiting) {
    return base::ResourceExhaustedError("the server is busy: " + std::to_string(waiting_.size()) +
                                        " requests are already waiting; retry later");
  }
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->arrival = next_arrival_++;
  seq->adapter_key = adapter_key;
  seq->tokens = std::move(prompt);
  seq->prompt_len = prompt_len;
  seq->max_new_tokens = max_new_tokens;
  seq->reuse_prefix = sequence_options.reuse_prefix;
  seq->state = State::kWaiting;
  seq->waiting_pos = waiting_.insert(waiting_.end(), seq.get());
  sequences_.emplace(id, std::move(seq));
  return base::Status::Ok();
}

void Scheduler::Remove(SequenceId id) {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  Sequence& seq = *it->second;
  if (seq.awaiting_token) --num_awaiting_token_;
  switch (seq.state) {
    case State::kWaiting:
      waiting_.erase(seq.waiting_pos);
      break;
    case State::kRunning:
      EraseRunning(seq);
      ReleaseBlocks(seq);
      break;
    case State::kFinished:
      break;
  }
  sequences_.erase(it);
}

StepPlan Scheduler::Schedule() {
  SOVAI_CHECK(!step_in_flight_) << "Schedule called before Complete of step " << step_;
  SOVAI_CHECK_EQ(num_awaiting_token_, 0) << "sequences still await AppendToken or Remove";
  StepPlan plan;
  plan.step = ++step_;
  int64_t budget = options_.max_num_batched_tokens;
  // Preemption edits running_ while we walk it: walk a snapshot and skip what left it.
  const std::vector<Sequence*> order = running_;

  // 1. Decodes: one token each. running_ <= max_num_seqs <= max_num_batched_tokens, so they all
  // fit the budget.
  for (Sequence* seq : order) {
    if (seq->state != State::kRunning || seq->known() - seq->num_computed != 1) continue;
    while (true) {
      if (AllocateFor(*seq, seq->num_computed + 1)) {
        AddChunk(*seq, 1, plan);
        --budget;
        break;
      }
      // running_ is in arrival order and walked in that order: its last one is not in the plan.
      Sequence* victim = running_.back();
      Preempt(*victim);
      plan.preempted.push_back(victim->id);
      if (victim == seq) break;
    }
  }
  SOVAI_CHECK_GE(budget, 0);

  // 2. Running sequences in the middle of their prefill.
  for (Sequence* seq : order) {
    if (budget == 0) break;
    if (seq->state != State::kRunning || seq->in_flight_tokens > 0) continue;
    const int64_t remaining = seq->known() - seq->num_computed;
    if (remaining == 0) continue;
    const int64_t wanted = std::min(remaining, budget);
    while (true) {
      // Tokens that fit the blocks it holds plus every allocatable one.
      const int64_t capacity =
          (static_cast<int64_t>(seq->block_table.size()) + blocks_.FreeBlockCount()) *
              options_.block_size -
          seq->num_computed;
      if (capacity > 0) {
        const int64_t n = std::min(wanted, capacity);
        SOVAI_CHECK(AllocateFor(*seq, seq->num_computed + n));
        AddChunk(*seq, n, plan);
        budget -= n;
        break;
      }
      // Not even one block: the mid-prefill sequence is the latest running arrival (see
      // CheckInvariants), so it is the one to go.
      SOVAI_CHECK_EQ(running_.back(), seq);
      Preempt(*seq);
      plan.preempted.push_back(seq->id);
      break;
    }
  }

  // 3. Waiting sequences, FIFO, unless this step had to preempt (they would only take the blocks
  // the running ones need next).
  if (plan.preempted.empty()) {
    while (budget > 0 && !waiting_.empty() &&
           static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
      if (!TryAdmit(*waiting_.front(), budget, plan)) break;
      budget -= static_cast<int64_t>(plan.chunks.back().tokens.size());
    }
  }
  step_in_flight_ = !plan.chunks.empty();
  return plan;
}

void Scheduler::Complete(const StepPlan& plan) {
  if (plan.chunks.empty()) return;
  SOVAI_CHECK(step_in_flight_ && plan.step == step_)
      << "Complete of step " << plan.step << ", but the step in flight is " << step_;
  step_in_flight_ = false;
  ReleaseCopySources();
  const int64_t bs = options_.block_size;
  for (const ScheduledChunk& chunk : plan.chunks) {
    const auto it = sequences_.find(chunk.id);
    // Removed since Schedule (possibly re-added under the same id: then it is not in flight).
    if (it == sequences_.end()) continue;
    Sequence& seq = *it->second;
    if (seq.state != State::kRunning || seq.in_flight_tokens == 0) continue;
    SOVAI_CHECK_EQ(seq.in_flight_tokens, static_cast<int64_t>(chunk.tokens.size()));
    seq.num_computed += seq.in_flight_tokens;
    seq.in_flight_tokens = 0;
    if (seq.num_computed == seq.known()) {
      seq.awaiting_token = true;
      ++num_awaiting_token_;
    }
    if (!options_.enable_prefix_caching) continue;
    const int64_t full_blocks = seq.num_computed / bs;
    if (seq.num_registered_blocks >= full_blocks) continue;
    HashFullBlocks(seq);
    for (int64_t j = seq.num_registered_blocks; j < full_blocks; ++j) {
      const uint64_t prev = j == 0 ? kRootHash : seq.block_hashes[j - 1];
      blocks_.Register(seq.block_table[j], seq.block_hashes[j], prev, seq.adapter_key,
                       std::span<const int32_t>(seq.tokens).subspan(j * bs, bs));
      // false: the same content is already cached in another block; this copy stays private.
    }
    seq.num_registered_blocks = full_blocks;
  }
}

void Scheduler::Discard(const StepPlan& plan) {
  if (plan.chunks.empty()) return;
  SOVAI_CHECK(step_in_flight_ && plan.step == step_)
      << "Discard of step " << plan.step << ", but the step in flight is " << step_;
  step_in_flight_ = false;
  ReleaseCopySources();
  // Back to the waiting queue, latest first so that the queue keeps arrival order. Their blocks
  // that were cached before this step stay cached, so the recompute is mostly cache hits.
  while (!running_.empty()) {
    Sequence& seq = *running_.back();
    seq.in_flight_tokens = 0;
    Preempt(seq);
  }
}

bool Scheduler::AppendToken(SequenceId id, int32_t token) {
  const auto it = sequences_.find(id);
  SOVAI_CHECK(it != sequences_.end()) << "AppendToken for unknown sequence " << id;
  Sequence& seq = *it->second;
  SOVAI_CHECK(seq.awaiting_token) << "sequence " << id << " does not await a token";
  seq.awaiting_token = false;
  --num_awaiting_token_;
  seq.tokens.push_back(token);
  if (seq.generated() < seq.max_new_tokens) return false;
  // Finished: its last token is never fed back, so its blocks can go now.
  EraseRunning(seq);
  ReleaseBlocks(seq);
  seq.state = State::kFinished;
  return true;
}

std::vector<int32_t> Scheduler::Tokens(SequenceId id) const {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) return {};
  return it->second->tokens;
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats s;
  s.num_running = static_cast<int64_t>(running_.size());
  s.num_waiting = static_cast<int64_t>(waiting_.size());
  s.num_used_blocks = blocks_.UsedBlockCount();
  s.num_cached_blocks = blocks_.CachedBlockCount();
  s.num_free_blocks = blocks_.FreeBlockCount();
  s.num_total_blocks = blocks_.num_blocks();
  s.num_preemptions = num_preemptions_;
  s.prefix_cache_queried_tokens = prefix_queried_tokens_;
  s.prefix_cache_hit_tokens = prefix_hit_tokens_;
  s.prefix_cache_partial_hit_tokens = prefix_partial_hit_tokens_;
  return s;
}

int64_t Scheduler::BlocksFor(int64_t num_tokens) const {
  return (num_tokens + options_.block_size - 1) / options_.block_size;
}

bool Scheduler::AllocateFor(Sequence& seq, int64_t num_tokens) {
  const int64_t needed = BlocksFor(num_tokens) - static_cast<int64_t>(seq.block_table.size());
  if (needed <= 0) return true;
  if (needed > blocks_.FreeBlockCount()) return false;
  for (int64_t i = 0; i < needed; ++i) {
    const std::optional<BlockId> block = blocks_.Allocate();
    SOVAI_CHECK(block.has_value());
    seq.block_table.push_back(*block);
  }
  return true;
}

void Scheduler::ReleaseBlocks(Sequence& seq) {
  CachePartialLastBlock(seq);
  // Last to first: the LRU then evicts a sequence's tail before its prefix, which is the part
  // other sequences are likely to share.
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) {
    blocks_.Release(*it);
  }
  seq.block_table.clear();
  seq.num_computed = 0;
  seq.num_registered_blocks = 0;
}

void Scheduler::CachePartialLastBlock(Sequence& seq) {
  const int64_t bs = options_.block_size;
  const int64_t filled = seq.num_computed % bs;
  // A block a chunk in flight writes to is not settled yet; such a sequence is being removed.
  if (!options_.enable_prefix_caching || !options_.reuse_partial_blocks || filled == 0 ||
      seq.in_flight_tokens > 0) {
    return;
  }
  const int64_t j = seq.num_computed / bs;
  // (After a Discard the table still covers the failed chunk too; slots below `filled` were
  // computed by earlier, completed steps.)
  SOVAI_CHECK_LT(j, static_cast<int64_t>(seq.block_table.size())) << seq.id;
  HashFullBlocks(seq);
  const uint64_t prev = j == 0 ? kRootHash : seq.block_hashes[j - 1];
  const auto tokens = std::span<const int32_t>(seq.tokens).subspan(j * bs, filled);
  // The same tokens already cached (the same request again): keep one copy.
  const std::optional<PartialMatch> existing =
      blocks_.LongestPartialMatch(prev, seq.adapter_key, tokens);
  if (existing.has_value() && existing->tokens == filled) return;
  blocks_.RegisterPartial(seq.block_table[j], prev, seq.adapter_key, tokens);
}

void Scheduler::HashFullBlocks(Sequence& seq) {
  const int64_t bs = options_.block_size;
  const int64_t full_blocks = seq.known() / bs;
  for (auto j = static_cast<int64_t>(seq.block_hashes.size()); j < full_blocks; ++j) {
    const uint64_t prev = j == 0 ? kRootHash : seq.block_hashes[j - 1];
    seq.block_hashes.push_back(blocks_.HashBlock(
        prev, seq.adapter_key, std::span<const int32_t>(seq.tokens).subspan(j * bs, bs)));
  }
}

void Scheduler::Preempt(Sequence& seq) {
  SOVAI_CHECK(seq.state == State::kRunning && seq.in_flight_tokens == 0) << seq.id;
  EraseRunning(seq);
  ReleaseBlocks(seq);
  seq.state = State::kWaiting;
  seq.waiting_pos = waiting_.insert(waiting_.begin(), &seq);
  ++num_preemptions_;
}

bool Scheduler::TryAdmit(Sequence& seq, int64_t budget, StepPlan& plan) {
  const int64_t bs = options_.block_size;
  const bool reuse = options_.enable_prefix_caching && seq.reuse_prefix;
  // The longest chain of cached blocks, leaving at least the last known token to compute.
  std::vector<BlockId> hits;
  int64_t hits_evictable = 0;  // hits that Acquire takes out of the allocatable pool
  if (reuse) {
    const int64_t max_hit_blocks = (seq.known() - 1) / bs;
    if (max_hit_blocks > 0) HashFullBlocks(seq);
    for (int64_t j = 0; j < max_hit_blocks; ++j) {
      const uint64_t prev = j == 0 ? kRootHash : seq.block_hashes[j - 1];
      const std::optional<BlockId> block =
          blocks_.Lookup(seq.block_hashes[j], prev, seq.adapter_key,
                         std::span<const int32_t>(seq.tokens).subspan(j * bs, bs));
      if (!block.has_value()) break;
      hits.push_back(*block);
      if (blocks_.RefCount(*block) == 0) ++hits_evictable;
    }
  }
  const auto num_hits = static_cast<int64_t>(hits.size());
  if (reuse && num_hits < (seq.known() - 1) / bs &&
      BeingComputed(seq.block_hashes[num_hits], num_hits, seq.adapter_key)) {
    // A running sequence is computing the next block of this prefix (another choice of the same
    // request, a request with the same system prompt that came just before): wait for it and
    // reuse it, rather than compute the same prefix twice side by side.
    return false;
  }
  // Then the leading slots of the cached block that continues the chain furthest, again leaving
  // the last known token to compute (fewer than bs: a whole match would have been a hit above,
  // unless that cap stopped it).
  std::optional<PartialMatch> partial;
  const int64_t partial_limit = std::min(bs - 1, seq.known() - 1 - num_hits * bs);
  if (reuse && options_.reuse_partial_blocks && partial_limit > 0) {
    const uint64_t prev = num_hits == 0 ? kRootHash : seq.block_hashes[num_hits - 1];
    partial = blocks_.LongestPartialMatch(
        prev, seq.adapter_key,
        std::span<const int32_t>(seq.tokens).subspan(num_hits * bs, partial_limit));
    if (partial.has_value() && blocks_.RefCount(partial->block) == 0) ++hits_evictable;
  }
  const int64_t computed = num_hits * bs + (partial.has_value() ? partial->tokens : 0);
  const int64_t n = std::min(seq.known() - computed, budget);
  if (BlocksFor(computed + n) - num_hits > blocks_.FreeBlockCount() - hits_evictable) {
    return false;
  }

  for (BlockId block : hits) blocks_.Acquire(block);
  if (partial.has_value()) {
    blocks_.Acquire(partial->block);
    copy_sources_in_flight_.push_back(partial->block);
  }
  SOVAI_CHECK(seq.block_table.empty());
  seq.block_table = std::move(hits);
  seq.num_computed = computed;
  seq.num_registered_blocks = num_hits;
  SOVAI_CHECK(AllocateFor(seq, computed + n));
  waiting_.erase(seq.waiting_pos);
  seq.state = State::kRunning;
  InsertRunning(seq);
  if (reuse) {
    prefix_queried_tokens_ += seq.known();
    prefix_hit_tokens_ += computed;
  }
  AddChunk(seq, n, plan);
  if (partial.has_value()) {
    plan.chunks.back().reuse_source = partial->block;
    plan.chunks.back().reused_positions = partial->tokens;
    prefix_partial_hit_tokens_ += partial->tokens;
  }
  return true;
}

bool Scheduler::BeingComputed(uint64_t hash, int64_t index, uint64_t adapter_key) const {
  for (const Sequence* other : running_) {
    if (other->adapter_key == adapter_key && other->num_registered_blocks <= index &&
        index < static_cast<int64_t>(other->block_hashes.size()) &&
        other->block_hashes[static_cast<size_t>(index)] == hash) {
      return true;
    }
  }
  return false;
}

void Scheduler::ReleaseCopySources() {
  for (BlockId block : copy_sources_in_flight_) blocks_.Release(block);
  copy_sources_in_flight_.clear();
}

void Scheduler::AddChunk(Sequence& seq, int64_t num_tokens, StepPlan& plan) {
  SOVAI_CHECK(num_tokens > 0 && seq.num_computed + num_tokens <= seq.known());
  ScheduledChunk chunk;
  chunk.id = seq.id;
  chunk.tokens.assign(seq.tokens.begin() + seq.num_computed,
                      seq.tokens.begin() + seq.num_computed + num_tokens);
  chunk.start_position = seq.num_computed;
  chunk.block_table = seq.block_table;
  chunk.produces_token = seq.num_computed + num_tokens == seq.known();
  if (!seq.scheduled_before) {
    // The first chunk starts right after the prefix cache hit, which is below the prompt length.
    chunk.cached_prompt_tokens = seq.num_computed;
    seq.scheduled_before = true;
  }
  seq.in_flight_tokens = num_tokens;
  plan.chunks.push_back(std::move(chunk));
}

void Scheduler::EraseRunning(const Sequence& seq) {
  const auto it = std::find(running_.begin(), running_.end(), &seq);
  SOVAI_CHECK(it != running_.end()) << "sequence " << seq.id << " is not running";
  running_.erase(it);
}

void Scheduler::InsertRunning(Sequence& seq) {
  const auto it = std::upper_bound(
      running_.begin(), running_.end(), seq.arrival,
      [](uint64_t arrival, const Sequence* other) { return arrival < other->arrival; });
  running_.insert(it, &seq);
}

void Scheduler::CheckInvariants() const {
  blocks_.CheckInvariants();
  const int64_t bs = options_.block_size;
  std::vector<int32_t> references(static_cast<size_t>(blocks_.num_blocks()), 0);
  SOVAI_CHECK(step_in_flight_ || copy_sources_in_flight_.empty());
  for (BlockId source : copy_sources_in_flight_) {
    SOVAI_CHECK(blocks_.IsCached(source)) << "copy source " << source << " is not cached";
    ++references[source];
  }
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t num_awaiting = 0;
  for (const auto& [id, owned] : sequences_) {
    const Sequence& seq = *owned;
    SOVAI_CHECK_EQ(seq.id, id);
    SOVAI_CHECK_GE(seq.prompt_len, 1);
    SOVAI_CHECK(seq.generated() >= 0 && seq.generated() <= seq.max_new_tokens) << id;
    SOVAI_CHECK_LE(static_cast<int64_t>(seq.block_hashes.size()), seq.known() / bs);
    if (seq.awaiting_token) ++num_awaiting;
    if (!step_in_flight_) SOVAI_CHECK_EQ(seq.in_flight_tokens, 0) << id;
    switch (seq.state) {
      case State::kWaiting:
        ++num_waiting;
        SOVAI_CHECK(seq.block_table.empty() && seq.num_computed == 0) << id;
        SOVAI_CHECK(seq.in_flight_tokens == 0 && !seq.awaiting_token) << id;
        SOVAI_CHECK_EQ(*seq.waiting_pos, &seq);
        break;
      case State::kFinished:
        SOVAI_CHECK(seq.block_table.empty() && seq.in_flight_tokens == 0) << id;
        SOVAI_CHECK(!seq.awaiting_token && seq.generated() == seq.max_new_tokens) << id;
        break;
      case State::kRunning: {
        ++num_running;
        const int64_t covered = seq.num_computed + seq.in_flight_tokens;
        SOVAI_CHECK_LE(covered, seq.known()) << id;
        SOVAI_CHECK_EQ(static_cast<int64_t>(seq.block_table.size()), BlocksFor(covered)) << id;
        SOVAI_CHECK(!seq.awaiting_token || seq.num_computed == seq.known()) << id;
        SOVAI_CHECK_LE(seq.num_registered_blocks, seq.num_computed / bs) << id;
        if (options_.enable_prefix_caching && seq.in_flight_tokens == 0) {
          SOVAI_CHECK_EQ(seq.num_registered_blocks, seq.num_computed / bs) << id;
        }
        std::vector<BlockId> sorted = seq.block_table;
        std::sort(sorted.begin(), sorted.end());
        SOVAI_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end())
            << "sequence " << id << " holds a block twice";
        for (size_t j = 0; j < seq.block_table.size(); ++j) {
          const BlockId block = seq.block_table[j];
          ++references[block];
          // Blocks still being written are never cached (cached blocks are immutable).
          if (static_cast<int64_t>(j) >= seq.num_registered_blocks) {
            SOVAI_CHECK(!blocks_.IsCached(block)) << "sequence " << id << " block " << block;
          }
        }
        break;
      }
    }
  }
  for (BlockId b = 0; b < blocks_.num_blocks(); ++b) {
    SOVAI_CHECK_EQ(references[b], blocks_.RefCount(b)) << "block " << b;
    if (references[b] > 1) SOVAI_CHECK(blocks_.IsCached(b)) << "shared block " << b;
  }
  SOVAI_CHECK_EQ(num_awaiting, num_awaiting_token_);
  SOVAI_CHECK_EQ(num_running, static_cast<int64_t>(running_.size()));
  SOVAI_CHECK_LE(num_running, options_.max_num_seqs);
  SOVAI_CHECK_EQ(num_waiting, static_cast<int64_t>(waiting_.size()));
  // Admission takes the front of the queue and preemption puts the latest running arrival back
  // there, so arrival order runs through running_ and then waiting_. A chunk shorter than what is
  // left of its prefill exhausts the budget or the blocks, so nothing is admitted after it: only
  // the latest running arrival can be mid-prefill (more than one token left to compute).
  const Sequence* previous = nullptr;
  for (size_t i = 0; i < running_.size(); ++i) {
    const Sequence* seq = running_[i];
    SOVAI_CHECK(seq->state == State::kRunning);
    if (previous != nullptr) SOVAI_CHECK_LT(previous->arrival, seq->arrival);
    if (i + 1 < running_.size()) {
      SOVAI_CHECK_LE(seq->known() - seq->num_computed - seq->in_flight_tokens, 1)
          << "sequence " << seq->id << " is mid-prefill but not the latest running arrival";
    }
    previous = seq;
  }
  for (const Sequence* seq : waiting_) {
    SOVAI_CHECK(seq->state == State::kWaiting);
    if (previous != nullptr) SOVAI_CHECK_LT(previous->arrival, seq->arrival);
    previous = seq;
  }
}

}  // namespace sovai::serve
