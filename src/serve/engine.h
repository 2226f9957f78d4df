// The inference engine behind `sovai-engine serve`: one model, its LoRA adapters, a paged KV
// cache, and a loop thread that runs continuous batching (scheduler.h) over them.
//
//   auto engine = Engine::Start(options);              // loads the model, starts the loop
//   auto generation = (*engine)->Submit(request);      // n choices of one request
//   while ((*generation)->Wait(deltas, 1s)) send(deltas);
//   generation->Cancel();                              // the client went away: frees its blocks
//
// Each step the loop asks the scheduler for a plan (decodes first, then prefill chunks up to the
// token budget), runs one batched forward pass over every planned sequence (each with its own
// adapter, or none), then samples each sequence that produced logits with its own sampler (its
// own seeded RNG, so the same request and seed give the same text whatever else is in the
// batch), detokenizes, checks stop strings and limits, and hands the new text to the waiting
// API thread.
//
// Thread-safety: Submit, adapters, Stats and the Generation methods may be called from any
// thread; the model and the scheduler are touched by the loop thread (and by Submit under the
// engine's lock).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "kernels/backend.h"
#include "model/chat_template.h"
#include "model/llama.h"
#include "model/model_config.h"
#include "model/pooling_config.h"
#include "model/tokenizer.h"
#include "serve/json_constraint.h"
#include "serve/request.h"
#include "serve/sampler.h"
#include "serve/scheduler.h"
#include "serve/text_stream.h"

namespace sovai::serve {

// Most adapters loaded at once (each holds its A and B matrices in f32).
inline constexpr size_t kMaxAdapters = 64;
// Default KV cache size when neither tokens nor bytes are given.
inline constexpr int64_t kDefaultKvCacheBytes = int64_t{512} << 20;

struct EngineOptions {
  std::string model_dir;
  // The id clients use for the base model; default: the directory's base name.
  std::string served_model_name;
  // Adapters to load at start: name -> PEFT adapter directory.
  std::vector<std::pair<std::string, std::string>> adapters;
  model::BaseWeights weights = model::BaseWeights::kQ8_0;
  int threads = 0;  // 0: every core
  // The cpu backend behind the strict backend's checks that every op is handed only the
  // backend's own buffers (kernels/backend.h): same results, for checking the device seam.
  bool strict_backend = false;
  // When set, makes the backend (e.g. sovai-engine's --backend cuda) instead of the cpu or strict
  // one above; its errors are Create's. The serve library links no device code itself.
  std::function<base::Result<std::unique_ptr<kernels::Backend>>()> make_backend;
  int64_t kv_cache_bytes = kDefaultKvCacheBytes;
  int64_t block_size = kDefaultBlockSize;
  int64_t max_num_batched_tokens = kDefaultMaxNumBatchedTokens;
  int64_t max_num_seqs = kDefaultMaxNumSeqs;
  int64_t max_waiting = kDefaultMaxWaiting;
  // Context length; 0: the model's max_position_embeddings.
  int64_t max_model_len = 0;
  bool enable_prefix_caching = true;
};

// One token of a choice's output.
struct TokenOutput {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top_logprobs;  // when requested
};

// What a choice produced since the previous Wait.
struct ChoiceDelta {
  int32_t index = 0;
  std::string text;                           // new text (complete UTF-8, stop strings held back)
  std::vector<TokenOutput> tokens;            // tokens sampled since the previous Wait
  FinishReason finish = FinishReason::kNone;  // set once, on the last delta of the choice
};

struct GenerationUsage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // of the prompts, from the prefix cache (first choice of each)
  int64_t completion_tokens = 0;  // over all choices
};

class Engine;

// The choices of one request (n per prompt), as the engine produces them.
class Generation {
 public:
  // Waits up to `timeout` for output; appends what is new to `deltas` (cleared first). Returns
  // false once every choice has finished and everything was returned.
  bool Wait(std::vector<ChoiceDelta>& deltas, std::chrono::milliseconds timeout);
  // Stops every unfinished choice (finish_reason abort) and frees its KV blocks.
  void Cancel();
  GenerationUsage usage() const;
  // Set when the engine failed the request after it was accepted.
  base::Status error() const;

 private:
  friend class Engine;
  struct Choice {
    std::string text;
    std::vector<TokenOutput> tokens;
    FinishReason finish = FinishReason::kNone;
    bool finish_reported = false;
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Choice> choices_;
  GenerationUsage usage_;
  base::Status error_;
  std::atomic<bool> cancelled_{false};
};

// The outputs of one PoolingRequest, as the engine produces them.
class PoolingJob {
 public:
  // Waits up to `timeout`; true once every prompt has its output or the job failed.
  bool Wait(std::chrono::milliseconds timeout);
  // Stops the prompts still running (the client went away) and frees their KV blocks.
  void Cancel();
  // Set when the engine failed the job after it was accepted.
  base::Status error() const;
  // Per prompt, in order: the pooled hidden state [hidden_size] (kEmbedding, not normalized) or
  // {score} (kYesNoScore). Valid once Wait returned true without an error.
  std::vector<std::vector<float>> outputs() const;
  int64_t prompt_tokens() const { return prompt_tokens_; }

 private:
  friend class Engine;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<float>> outputs_;
  size_t remaining_ = 0;  // prompts without an output yet
  base::Status error_;
  std::atomic<bool> cancelled_{false};
  int64_t prompt_tokens_ = 0;
};

struct AdapterInfo {
  std::string name;
  std::string path;
  uint64_t content_hash = 0;  // of the adapter's weights and scale (response cache key)
};

struct EngineStats {
  SchedulerStats scheduler;
  int64_t prompt_tokens = 0;      // computed prompt tokens, since start
  int64_t generation_tokens = 0;  // sampled tokens, since start
  // Choices (sequences) that ended, by finish reason.
  int64_t finished_stop = 0;
  int64_t finished_length = 0;
  int64_t finished_abort = 0;  // cancelled (client gone) or failed
  int64_t pooled_prompts = 0;  // prompts of pooling requests that produced their output
  int64_t steps = 0;
};

class Engine {
 public:
  // Loads the model directory (config.json, safetensors, tokenizer.json, tokenizer_config.json,
  // generation_config.json, and an embedding model's modules.json) and the adapters, sizes the KV
  // cache, and starts the loop thread.
  static base::Result<std::unique_ptr<Engine>> Start(const EngineOptions& options);
  ~Engine();

  const model::ModelConfig& config() const { return config_; }
  const model::Tokenizer& tokenizer() const { return *tokenizer_; }
  const model::ChatTemplate& chat_template() const { return *chat_template_; }
  const std::string& served_model_name() const { return served_model_name_; }
  int64_t max_model_len() const { return max_model_len_; }
  // The end-of-sequence tokens (generation_config.json, config.json, the tokenizer's eos).
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }
  // The pooling of an embedding model (modules.json); nullopt for other models.
  const std::optional<model::PoolingConfig>& pooling() const { return pooling_; }

  // Queues a request. Errors: NotFound (unknown adapter), InvalidArgument (prompt too long for
  // the cache, bad schema), ResourceExhausted (the waiting queue is full: retry later).
  base::Result<std::shared_ptr<Generation>> Submit(GenerationRequest request);
  // Queues a pooling request: each prompt a prefill-only sequence, batched with the other work.
  // Errors: those of Submit, and FailedPrecondition for embeddings of a model without pooling,
  // InvalidArgument for yes/no tokens outside the vocabulary.
  base::Result<std::shared_ptr<PoolingJob>> SubmitPooling(PoolingRequest request);

  // Loads (or replaces) an adapter at run time. Errors: those of reading the adapter;
  // ResourceExhausted past kMaxAdapters; InvalidArgument for a name that is the base model's.
  base::Status LoadAdapter(const std::string& name, const std::string& path);
  // NotFound when absent. Running sequences keep the adapter until they finish.
  base::Status UnloadAdapter(const std::string& name);
  std::vector<AdapterInfo> Adapters() const;
  std::optional<AdapterInfo> Adapter(const std::string& name) const;

  EngineStats Stats() const;
  // Waits until no request is running or waiting (for tests); false on timeout.
  bool WaitIdle(std::chrono::milliseconds timeout);

 private:
  struct Sequence;
  struct LoadedAdapter;
  Engine() = default;
  void Loop();
  // One scheduler step; false when there was nothing to do.
  bool Step();
  void Finish(Sequence& seq, FinishReason reason);
  // What the model runs for `chunk` of `seq`: its tokens, and the logits or hidden states it
  // needs (a generation's logits; an embedding's last or every hidden state; a score's logits).
  model::InferenceSequence InputOf(const Sequence& seq, const ScheduledChunk& chunk) const;
  // The loaded adapter `name` (nullptr for "": the base model); NotFound. Under the lock.
  base::Result<std::shared_ptr<LoadedAdapter>> FindAdapter(const std::string& name) const;
  // A pooling sequence's end: its output (nullopt: cancelled or failed) goes to its job.
  void FinishPooling(Sequence& seq, std::optional<std::vector<float>> output);
  // The step's outputs for a pooling sequence's chunk (`hidden`: its rows of the step's hidden
  // states; `logits`: its logits row, when it asked for one). Under the lock.
  void PoolChunk(Sequence& seq, const ScheduledChunk& chunk, std::span<const float> hidden,
                 std::span<const float> logits);

  // Declared first, so destroyed last: every buffer of the model, the cache and the adapters
  // below is freed by it.
  std::unique_ptr<kernels::Backend> backend_;
  model::ModelConfig config_;
  std::string served_model_name_;
  int64_t max_model_len_ = 0;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<model::ChatTemplate> chat_template_;
  std::vector<int32_t> eos_token_ids_;
  std::optional<model::PoolingConfig> pooling_;
  std::unique_ptr<model::LlamaModel> model_;  // in backend_'s memory, as cache_ and the adapters
  std::unique_ptr<model::KvCache> cache_;
  std::vector<float> logits_;       // [S', V] of the latest step (loop thread only)
  std::vector<float> hidden_;       // [H', C] of the latest step (loop thread only)
  std::vector<uint8_t> mask_;       // allowed tokens of a constrained sequence (loop thread only)
  SamplerScratch sampler_scratch_;  // loop thread only
  std::unique_ptr<TokenTable> token_table_;
  std::once_flag vocabulary_once_;
  base::Status vocabulary_status_;
  std::shared_ptr<const ConstraintVocabulary> constraint_vocabulary_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<std::string, std::shared_ptr<LoadedAdapter>> adapters_;
  std::map<SequenceId, std::unique_ptr<Sequence>> sequences_;
  SequenceId next_id_ = 1;
  uint64_t seed_counter_ = 0;
  EngineStats stats_;
  bool stopping_ = false;
  std::thread loop_;
};

}  // namespace sovai::serve
