#include "serve/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "base/env.h"
#include "base/json.h"
#include "base/log.h"
#include "model/model_dir.h"
#include "model/peft_adapter.h"

namespace sovai::serve {

using base::Result;
using base::Status;
using base::StatusCode;

namespace {

// Largest generation_config.json / tokenizer_config.json we read.
constexpr uint64_t kMaxSmallJsonBytes = 1 << 20;

// FNV-1a over bytes, folded into a running 64-bit hash.
uint64_t HashBytes(uint64_t h, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t AdapterContentHash(const model::LoraAdapter& adapter) {
  uint64_t h = 0xcbf29ce484222325ull;
  const double alpha = adapter.config.lora_alpha;
  const int64_t rank = adapter.config.r;
  h = HashBytes(h, &alpha, sizeof alpha);
  h = HashBytes(h, &rank, sizeof rank);
  h = HashBytes(h, &adapter.config.use_rslora, sizeof adapter.config.use_rslora);
  for (const model::LoraModuleWeights& m : adapter.modules) {
    h = HashBytes(h, &m.layer, sizeof m.layer);
    h = HashBytes(h, &m.module, sizeof m.module);
    h = HashBytes(h, m.a.data(), m.a.size() * sizeof(float));
    h = HashBytes(h, m.b.data(), m.b.size() * sizeof(float));
  }
  return h == 0 ? 1 : h;  // 0 is the base model's key
}

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

struct Engine::LoadedAdapter {
  AdapterInfo info;
  std::unique_ptr<model::InferenceAdapter> weights;
};

// One choice of a request while it runs.
struct Engine::Sequence {
  SequenceId id = 0;
  std::shared_ptr<Generation> generation;
  int32_t choice = 0;
  bool first_of_prompt = false;  // choice 0 of its prompt: reports the prompt's cached tokens
  std::shared_ptr<LoadedAdapter> adapter;  // keeps an unloaded adapter alive until done
  std::unique_ptr<Sampler> sampler;
  std::optional<IncrementalDecoder> decoder;
  std::unique_ptr<JsonConstraint> constraint;
  std::set<int32_t> stop_tokens;
  bool want_logprobs = false;
  int64_t generated = 0;
  int64_t min_tokens = 0;  // until then, stop_tokens cannot be drawn
  int64_t max_tokens = 0;
  bool first_chunk = true;

  // A prompt of a pooling request (then generation, sampler and decoder are unset).
  std::shared_ptr<PoolingJob> pooling_job;
  size_t prompt_index = 0;
  PoolingRequest::Output output = PoolingRequest::Output::kEmbedding;
  int32_t yes_token = -1, no_token = -1;
  std::vector<double> pool_sum;  // mean: the sum of the rows so far; cls: the first row
  int64_t pooled_rows = 0;

  bool cancelled() const {
    return pooling_job ? pooling_job->cancelled_.load() : generation->cancelled_.load();
  }
};

bool Generation::Wait(std::vector<ChoiceDelta>& deltas, std::chrono::milliseconds timeout) {
  deltas.clear();
  std::unique_lock lock(mu_);
  auto all_reported = [&] {
    return std::all_of(choices_.begin(), choices_.end(),
                       [](const Choice& c) { return c.finish_reported; });
  };
  if (all_reported()) return false;
  auto has_output = [&] {
    return std::any_of(choices_.begin(), choices_.end(), [](const Choice& c) {
      return !c.text.empty() || !c.tokens.empty() ||
             (c.finish != FinishReason::kNone && !c.finish_reported);
    });
  };
  cv_.wait_for(lock, timeout, has_output);
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    const bool finishing = c.finish != FinishReason::kNone && !c.finish_reported;
    if (c.text.empty() && c.tokens.empty() && !finishing) continue;
    ChoiceDelta delta;
    delta.index = static_cast<int32_t>(i);
    delta.text = std::move(c.text);
    delta.tokens = std::move(c.tokens);
    c.text.clear();
    c.tokens.clear();
    if (finishing) {
      delta.finish = c.finish;
      c.finish_reported = true;
    }
    deltas.push_back(std::move(delta));
  }
  return true;
}

void Generation::Cancel() { cancelled_.store(true); }

GenerationUsage Generation::usage() const {
  std::lock_guard lock(mu_);
  return usage_;
}

Status Generation::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

bool PoolingJob::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return remaining_ == 0 || !error_.ok(); });
}

void PoolingJob::Cancel() { cancelled_.store(true); }

Status PoolingJob::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

std::vector<std::vector<float>> PoolingJob::outputs() const {
  std::lock_guard lock(mu_);
  return outputs_;
}

Result<std::unique_ptr<Engine>> Engine::Start(const EngineOptions& options) {
  base::Env& env = base::Env::Default();
  std::unique_ptr<Engine> engine(new Engine());
  SOVAI_ASSIGN_OR_RETURN(model::ModelDir dir, model::LoadModelDir(env, options.model_dir));
  engine->config_ = dir.config;
  engine->served_model_name_ =
      options.served_model_name.empty() ? BaseName(options.model_dir) : options.served_model_name;
  if (!dir.Has("tokenizer.json")) {
    return Status(StatusCode::kNotFound, options.model_dir + " has no tokenizer.json");
  }
  SOVAI_ASSIGN_OR_RETURN(model::Tokenizer tokenizer,
                         model::Tokenizer::FromFile(env, dir.PathOf("tokenizer.json")));
  engine->tokenizer_ = std::make_unique<model::Tokenizer>(std::move(tokenizer));
  engine->token_table_ = std::make_unique<TokenTable>(*engine->tokenizer_);
  if (dir.Has("tokenizer_config.json")) {
    SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(dir.PathOf("tokenizer_config.json"),
                                                          model::kMaxTokenizerConfigBytes));
    auto parsed = model::ChatTemplate::FromTokenizerConfig(text);
    if (!parsed.ok()) {
      return Status(parsed.status().code(),
                    dir.PathOf("tokenizer_config.json") + ": " + parsed.status().message());
    }
    engine->chat_template_ = std::make_unique<model::ChatTemplate>(std::move(*parsed));
  } else {
    engine->chat_template_ =
        std::make_unique<model::ChatTemplate>(model::ChatTemplate::DefaultChatML());
  }

  // End-of-sequence tokens: config.json's, generation_config.json's (which transformers'
  // generate() uses, e.g. Llama 3's <|eot_id|> besides <|end_of_text|>), and the tokenizer's.
  std::set<int32_t> eos;
  for (int64_t id : dir.config.eos_token_ids) eos.insert(static_cast<int32_t>(id));
  if (dir.Has("generation_config.json")) {
    SOVAI_ASSIGN_OR_RETURN(std::string text,
                           env.ReadFile(dir.PathOf("generation_config.json"), kMaxSmallJsonBytes));
    SOVAI_ASSIGN_OR_RETURN(nlohmann::json generation, base::ParseJson(text));
    if (generation.is_object() && generation.contains("eos_token_id")) {
      const nlohmann::json& value = generation["eos_token_id"];
      if (value.is_number_integer()) eos.insert(value.get<int32_t>());
      if (value.is_array()) {
        for (const nlohmann::json& id : value) {
          if (id.is_number_integer()) eos.insert(id.get<int32_t>());
        }
      }
    }
  }
  if (auto eos_text = engine->chat_template_->special_tokens().eos_token) {
    if (auto id = engine->tokenizer_->TokenToId(*eos_text)) eos.insert(*id);
  }
  engine->eos_token_ids_.assign(eos.begin(), eos.end());
  SOVAI_ASSIGN_OR_RETURN(engine->pooling_,
                         model::ReadPoolingConfig(env, options.model_dir, dir.config.hidden_size));

  // The backend first: the model, the cache and the adapters live in its memory.
  if (options.make_backend) {
    SOVAI_ASSIGN_OR_RETURN(engine->backend_, options.make_backend());
  } else {
    engine->backend_ = options.strict_backend
                           ? kernels::NewStrictBackend(kernels::NewCpuBackend(options.threads))
                           : kernels::NewCpuBackend(options.threads);
  }
  SOVAI_ASSIGN_OR_RETURN(engine->model_, model::LlamaModel::Load(
                                             *engine->backend_, dir.config,
                                             model::TensorSourceOf(*dir.weights), options.weights));
  engine->max_model_len_ = dir.config.max_position_embeddings;
  if (options.max_model_len > 0) {
    engine->max_model_len_ = std::min(engine->max_model_len_, options.max_model_len);
  }
  const int64_t block_bytes = model::KvCache::BytesPerToken(dir.config) * options.block_size;
  const int64_t num_blocks = options.kv_cache_bytes / std::max<int64_t>(block_bytes, 1);
  const int64_t needed = (engine->max_model_len_ + options.block_size - 1) / options.block_size;
  if (num_blocks < needed && options.max_model_len == 0 && num_blocks > 0) {
    // The model's own context (32k for Mistral v0.3) does not fit the cache, and no context
    // length was asked for: serve the context that fits, as llama.cpp does with its default
    // n_ctx, rather than refusing to start. A context asked for with --max-model-len is kept or
    // refused below.
    const int64_t fits = num_blocks * options.block_size;
    SOVAI_LOG(WARNING) << "the model's context length " << engine->max_model_len_
                       << " does not fit a KV cache of " << (options.kv_cache_bytes >> 20)
                       << " MiB; serving a context of " << fits
                       << " tokens (--kv-cache-mb or --max-model-len to choose)";
    engine->max_model_len_ = fits;
  } else if (num_blocks < needed) {
    return Status(StatusCode::kInvalidArgument,
                  "a KV cache of " + std::to_string(options.kv_cache_bytes >> 20) + " MiB holds " +
                      std::to_string(num_blocks * options.block_size) +
                      " tokens, less than one sequence of the context length " +
                      std::to_string(engine->max_model_len_) +
                      ": give more cache or a shorter --max-model-len");
  }
  SchedulerOptions scheduler;
  scheduler.num_blocks = num_blocks;
  scheduler.block_size = options.block_size;
  scheduler.max_num_batched_tokens = options.max_num_batched_tokens;
  scheduler.max_num_seqs = options.max_num_seqs;
  scheduler.max_waiting = options.max_waiting;
  scheduler.max_model_len = engine->max_model_len_;
  scheduler.enable_prefix_caching = options.enable_prefix_caching;
  SOVAI_RETURN_IF_ERROR(Scheduler::ValidateOptions(scheduler));
  engine->scheduler_ = std::make_unique<Scheduler>(scheduler);
  SOVAI_ASSIGN_OR_RETURN(
      model::KvCache cache,
      model::KvCache::Create(*engine->backend_, dir.config, num_blocks, options.block_size));
  engine->cache_ = std::make_unique<model::KvCache>(std::move(cache));
  for (const auto& [name, path] : options.adapters) {
    SOVAI_RETURN_IF_ERROR(engine->LoadAdapter(name, path));
  }
  engine->loop_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  std::lock_guard lock(mu_);
  while (!sequences_.empty()) Finish(*sequences_.begin()->second, FinishReason::kAbort);
}

Status Engine::LoadAdapter(const std::string& name, const std::string& path) {
  if (name.empty() || name == served_model_name_) {
    return Status(StatusCode::kInvalidArgument,
                  "an adapter needs a name other than the base model's ('" + name + "')");
  }
  SOVAI_ASSIGN_OR_RETURN(model::LoraAdapter peft,
                         model::LoadLoraAdapter(base::Env::Default(), path, config_));
  auto loaded = std::make_shared<LoadedAdapter>();
  SOVAI_ASSIGN_OR_RETURN(loaded->weights,
                         model::InferenceAdapter::FromPeft(*backend_, peft, config_));
  loaded->info = AdapterInfo{name, path, AdapterContentHash(peft)};
  std::lock_guard lock(mu_);
  if (!adapters_.contains(name) && adapters_.size() >= kMaxAdapters) {
    return Status(StatusCode::kResourceExhausted,
                  "at most " + std::to_string(kMaxAdapters) + " adapters can be loaded at once");
  }
  adapters_[name] = std::move(loaded);
  return Status();
}

Status Engine::UnloadAdapter(const std::string& name) {
  std::lock_guard lock(mu_);
  if (adapters_.erase(name) == 0) {
    return Status(StatusCode::kNotFound, "no adapter named '" + name + "' is loaded");
  }
  return Status();
}

std::vector<AdapterInfo> Engine::Adapters() const {
  std::lock_guard lock(mu_);
  std::vector<AdapterInfo> out;
  for (const auto& [name, adapter] : adapters_) out.push_back(adapter->info);
  return out;
}

std::optional<AdapterInfo> Engine::Adapter(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = adapters_.find(name);
  if (it == adapters_.end()) return std::nullopt;
  return it->second->info;
}

EngineStats Engine::Stats() const {
  std::lock_guard lock(mu_);
  EngineStats out = stats_;
  out.scheduler = scheduler_->Stats();
  return out;
}

bool Engine::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return sequences_.empty(); });
}

Result<std::shared_ptr<Engine::LoadedAdapter>> Engine::FindAdapter(const std::string& name) const {
  if (name.empty()) return std::shared_ptr<LoadedAdapter>();
  auto it = adapters_.find(name);
  if (it == adapters_.end()) {
    return Status(StatusCode::kNotFound, "no adapter named '" + name + "'");
  }
  return it->second;
}

Result<std::shared_ptr<Generation>> Engine::Submit(GenerationRequest request) {
  if (request.n < 1) return Status(StatusCode::kInvalidArgument, "n must be at least 1");
  if (request.prompts.empty()) return Status(StatusCode::kInvalidArgument, "no prompt");
  SOVAI_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  std::shared_ptr<const JsonGrammar> grammar;
  if (request.response_format.kind != ResponseFormat::Kind::kText) {
    std::call_once(vocabulary_once_, [&] {
      std::vector<std::string> bytes(static_cast<size_t>(config_.vocab_size));
      for (size_t id = 0; id < bytes.size(); ++id) {
        // Special tokens keep no bytes: a constraint never allows them (EOS is allowed by id).
        if (token_table_->IsSpecial(static_cast<int32_t>(id))) continue;
        bytes[id] = std::string(token_table_->Bytes(static_cast<int32_t>(id)));
      }
      auto created = ConstraintVocabulary::Create(std::move(bytes), eos_token_ids_);
      if (created.ok()) {
        constraint_vocabulary_ = std::move(*created);
      } else {
        vocabulary_status_ = created.status();
      }
    });
    SOVAI_RETURN_IF_ERROR(vocabulary_status_);
    SOVAI_ASSIGN_OR_RETURN(grammar, JsonGrammar::FromResponseFormat(request.response_format));
  }
  auto generation = std::make_shared<Generation>();
  const auto num_prompts = static_cast<int32_t>(request.prompts.size());
  generation->choices_.resize(static_cast<size_t>(num_prompts) * static_cast<size_t>(request.n));
  for (const std::vector<int32_t>& prompt : request.prompts) {
    generation->usage_.prompt_tokens += static_cast<int64_t>(prompt.size());
  }

  std::lock_guard lock(mu_);
  SOVAI_ASSIGN_OR_RETURN(std::shared_ptr<LoadedAdapter> adapter, FindAdapter(request.adapter));
  std::vector<std::unique_ptr<Sequence>> created;
  for (int32_t choice = 0; choice < num_prompts * request.n; ++choice) {
    const int32_t i = choice % request.n;  // of its prompt
    auto seq = std::make_unique<Sequence>();
    seq->id = next_id_++;
    seq->generation = generation;
    seq->choice = choice;
    seq->first_of_prompt = i == 0;
    seq->adapter = adapter;
    // Choice i of a seeded request draws from its own stream derived from the seed, so n > 1
    // gives n different samples that are each reproducible (and each prompt of a batch the
    // answers it would get alone).
    const uint64_t seed = request.sampling.seed
                              ? ChoiceSeed(*request.sampling.seed, i)
                              : kernels::SplitMix64(std::random_device{}() ^ ++seed_counter_);
    seq->sampler = std::make_unique<Sampler>(
        request.sampling, seed, request.prompts[static_cast<size_t>(choice / request.n)]);
    SOVAI_ASSIGN_OR_RETURN(
        IncrementalDecoder decoder,
        IncrementalDecoder::Create(*token_table_,
                                   {.stop = request.stop, .min_tokens = request.min_tokens}));
    seq->decoder.emplace(std::move(decoder));
    if (grammar)
      seq->constraint = std::make_unique<JsonConstraint>(grammar, constraint_vocabulary_);
    if (!request.ignore_eos) seq->stop_tokens.insert(eos_token_ids_.begin(), eos_token_ids_.end());
    seq->stop_tokens.insert(request.stop_token_ids.begin(), request.stop_token_ids.end());
    seq->want_logprobs = request.sampling.logprobs;
    seq->min_tokens = request.min_tokens;
    seq->max_tokens = request.max_tokens;
    created.push_back(std::move(seq));
  }
  const uint64_t adapter_key = adapter ? adapter->info.content_hash : 0;
  for (size_t i = 0; i < created.size(); ++i) {
    const std::vector<int32_t>& prompt =
        request.prompts[static_cast<size_t>(created[i]->choice / request.n)];
    Status added = scheduler_->Add(created[i]->id, prompt, request.max_tokens, adapter_key);
    if (!added.ok()) {
      for (size_t j = 0; j < i; ++j) scheduler_->Remove(created[j]->id);
      return added;
    }
  }
  for (auto& seq : created) sequences_[seq->id] = std::move(seq);
  work_cv_.notify_one();
  return generation;
}

Result<std::shared_ptr<PoolingJob>> Engine::SubmitPooling(PoolingRequest request) {
  if (request.prompts.empty()) return Status(StatusCode::kInvalidArgument, "no prompt");
  const bool score = request.output == PoolingRequest::Output::kYesNoScore;
  if (!score && !pooling_) {
    return Status(StatusCode::kFailedPrecondition,
                  "the model has no pooling (modules.json): it is not an embedding model");
  }
  if (score) {
    for (int32_t t : {request.yes_token, request.no_token}) {
      if (t < 0 || t >= config_.vocab_size) {
        return Status(StatusCode::kInvalidArgument,
                      "the yes/no token " + std::to_string(t) + " is outside the vocabulary");
      }
    }
  }
  auto job = std::make_shared<PoolingJob>();
  job->outputs_.resize(request.prompts.size());
  job->remaining_ = request.prompts.size();
  for (const std::vector<int32_t>& prompt : request.prompts) {
    job->prompt_tokens_ += static_cast<int64_t>(prompt.size());
  }
  // Mean and first-token pooling read every prompt token's hidden state: no cached prefix.
  const bool every_row = !score && pooling_->pooling != model::Pooling::kLastToken;

  std::lock_guard lock(mu_);
  SOVAI_ASSIGN_OR_RETURN(std::shared_ptr<LoadedAdapter> adapter, FindAdapter(request.adapter));
  const uint64_t adapter_key = adapter ? adapter->info.content_hash : 0;
  std::vector<std::unique_ptr<Sequence>> created;
  for (size_t p = 0; p < request.prompts.size(); ++p) {
    auto seq = std::make_unique<Sequence>();
    seq->id = next_id_++;
    seq->adapter = adapter;
    seq->pooling_job = job;
    seq->prompt_index = p;
    seq->output = request.output;
    seq->yes_token = request.yes_token;
    seq->no_token = request.no_token;
    Status added = scheduler_->Add(seq->id, request.prompts[p], 0, adapter_key,
                                   {.prefill_only = true, .reuse_prefix = !every_row});
    if (!added.ok()) {
      for (const auto& done : created) scheduler_->Remove(done->id);
      return added;
    }
    created.push_back(std::move(seq));
  }
  for (auto& seq : created) sequences_[seq->id] = std::move(seq);
  work_cv_.notify_one();
  return job;
}

void Engine::Loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (stopping_) return;
    }
    if (Step()) continue;
    std::unique_lock lock(mu_);
    if (stopping_) return;
    // Wake for new work, or now and then to notice cancelled requests that are still waiting.
    work_cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
}

void Engine::FinishPooling(Sequence& seq, std::optional<std::vector<float>> output) {
  PoolingJob& job = *seq.pooling_job;
  {
    std::lock_guard jlock(job.mu_);
    if (output) {
      job.outputs_[seq.prompt_index] = std::move(*output);
      --job.remaining_;
    } else if (job.error_.ok()) {
      job.error_ = Status(StatusCode::kAborted, "the request was cancelled");
    }
  }
  job.cv_.notify_all();
  scheduler_->Remove(seq.id);
  (output ? stats_.pooled_prompts : stats_.finished_abort) += 1;
  sequences_.erase(seq.id);  // destroys seq
  if (sequences_.empty()) idle_cv_.notify_all();
}

void Engine::PoolChunk(Sequence& seq, const ScheduledChunk& chunk, std::span<const float> hidden,
                       std::span<const float> logits) {
  const auto c = static_cast<size_t>(config_.hidden_size);
  stats_.prompt_tokens += static_cast<int64_t>(chunk.tokens.size());
  if (seq.output == PoolingRequest::Output::kYesNoScore) {
    if (!chunk.produces_token) return;
    // Qwen3-Reranker's score: softmax over the pair (no, yes), the probability of "yes".
    const double yes = logits[static_cast<size_t>(seq.yes_token)];
    const double no = logits[static_cast<size_t>(seq.no_token)];
    FinishPooling(seq, std::vector<float>{static_cast<float>(1.0 / (1.0 + std::exp(no - yes)))});
    return;
  }
  switch (pooling_->pooling) {
    case model::Pooling::kLastToken:
      break;
    case model::Pooling::kMean:
      // A preempted sequence starts again from position 0: so does its sum.
      if (chunk.start_position == 0) {
        seq.pool_sum.assign(c, 0.0);
        seq.pooled_rows = 0;
      }
      for (size_t r = 0; r < hidden.size() / c; ++r) {
        for (size_t k = 0; k < c; ++k) seq.pool_sum[k] += hidden[r * c + k];
      }
      seq.pooled_rows += static_cast<int64_t>(hidden.size() / c);
      break;
    case model::Pooling::kCls:
      if (chunk.start_position == 0) seq.pool_sum.assign(hidden.begin(), hidden.begin() + c);
      break;
  }
  if (!chunk.produces_token) return;
  std::vector<float> pooled(c);
  if (pooling_->pooling == model::Pooling::kLastToken) {
    std::copy(hidden.end() - static_cast<std::ptrdiff_t>(c), hidden.end(), pooled.begin());
  } else {
    const double divisor =
        pooling_->pooling == model::Pooling::kMean ? static_cast<double>(seq.pooled_rows) : 1.0;
    for (size_t k = 0; k < c; ++k) pooled[k] = static_cast<float>(seq.pool_sum[k] / divisor);
  }
  FinishPooling(seq, std::move(pooled));
}

void Engine::Finish(Sequence& seq, FinishReason reason) {
  if (seq.pooling_job) {
    FinishPooling(seq, std::nullopt);
    return;
  }
  Generation& g = *seq.generation;
  {
    std::lock_guard glock(g.mu_);
    Generation::Choice& choice = g.choices_[static_cast<size_t>(seq.choice)];
    // What the decoder held back (a possible start of a stop string, an incomplete character)
    // belongs to the text unless the request was cancelled.
    if (reason != FinishReason::kAbort) choice.text += seq.decoder->Finish().text;
    choice.finish = reason;
    g.usage_.completion_tokens += seq.generated;
  }
  g.cv_.notify_all();
  scheduler_->Remove(seq.id);
  (reason == FinishReason::kStop     ? stats_.finished_stop
   : reason == FinishReason::kLength ? stats_.finished_length
                                     : stats_.finished_abort) += 1;
  sequences_.erase(seq.id);  // destroys seq
  if (sequences_.empty()) idle_cv_.notify_all();
}

model::InferenceSequence Engine::InputOf(const Sequence& seq, const ScheduledChunk& chunk) const {
  model::InferenceSequence input{.tokens = chunk.tokens,
                                 .start = chunk.start_position,
                                 .block_table = chunk.block_table,
                                 .adapter = seq.adapter ? seq.adapter->weights.get() : nullptr,
                                 .want_logits = chunk.produces_token};
  if (seq.pooling_job && seq.output == PoolingRequest::Output::kEmbedding) {
    // An embedding reads hidden states, never logits: the last one, or every one.
    input.want_logits = false;
    if (pooling_->pooling == model::Pooling::kLastToken) {
      input.hidden = chunk.produces_token ? model::HiddenOutput::kLast : model::HiddenOutput::kNone;
    } else if (pooling_->pooling == model::Pooling::kMean || chunk.start_position == 0) {
      input.hidden = model::HiddenOutput::kAll;
    }
  }
  return input;
}

bool Engine::Step() {
  StepPlan plan;
  std::vector<model::InferenceSequence> inputs;
  {
    std::lock_guard lock(mu_);
    std::vector<Sequence*> cancelled;
    for (auto& [id, seq] : sequences_) {
      if (seq->cancelled()) cancelled.push_back(seq.get());
    }
    for (Sequence* seq : cancelled) Finish(*seq, FinishReason::kAbort);
    plan = scheduler_->Schedule();
    if (plan.empty()) return false;
    for (const ScheduledChunk& chunk : plan.chunks) {
      inputs.push_back(InputOf(*sequences_.at(chunk.id), chunk));
    }
  }
  // Partial prefix-cache hits: the reused slots first (their sources are held until Complete).
  for (const ScheduledChunk& chunk : plan.chunks) {
    if (chunk.reused_positions == 0) continue;
    const auto target = static_cast<size_t>(chunk.start_position / cache_->block_size());
    cache_->CopyLeadingSlots(chunk.reuse_source, chunk.block_table[target], chunk.reused_positions);
  }
  // The forward pass runs without the lock: Submit and the API threads go on meanwhile.
  const Status ran = model_->Infer(*backend_, *cache_, inputs, logits_, hidden_);

  std::lock_guard lock(mu_);
  if (ran.ok()) {
    scheduler_->Complete(plan);
  } else {
    // Nothing the failed step wrote may be reused; its sequences fail below (Remove).
    SOVAI_LOG(ERROR) << "inference step failed: " << ran.ToString();
    scheduler_->Discard(plan);
  }
  ++stats_.steps;
  const int64_t vocab = config_.vocab_size;
  const auto c = static_cast<size_t>(config_.hidden_size);
  int64_t next_logits_row = 0;
  size_t next_hidden_row = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& chunk = plan.chunks[i];
    // This chunk's rows of the step's logits and hidden states (model::LlamaModel::Infer).
    const int64_t row = next_logits_row;
    if (inputs[i].want_logits) ++next_logits_row;
    const size_t hidden_row = next_hidden_row;
    next_hidden_row += inputs[i].hidden == model::HiddenOutput::kAll    ? chunk.tokens.size()
                       : inputs[i].hidden == model::HiddenOutput::kLast ? 1
                                                                        : 0;
    auto it = sequences_.find(chunk.id);
    if (it == sequences_.end()) continue;
    Sequence& seq = *it->second;
    if (seq.pooling_job) {
      if (!ran.ok()) {
        {
          std::lock_guard jlock(seq.pooling_job->mu_);
          seq.pooling_job->error_ = ran;
        }
        FinishPooling(seq, std::nullopt);
        continue;
      }
      const std::span<const float> hidden = std::span<const float>(hidden_).subspan(
          hidden_row * c, (next_hidden_row - hidden_row) * c);
      const std::span<const float> logits =
          inputs[i].want_logits ? std::span<const float>(logits_).subspan(
                                      static_cast<size_t>(row * vocab), static_cast<size_t>(vocab))
                                : std::span<const float>();
      PoolChunk(seq, chunk, hidden, logits);
      continue;
    }
    Generation& g = *seq.generation;
    if (!chunk.produces_token || chunk.tokens.size() > 1) {
      stats_.prompt_tokens += static_cast<int64_t>(chunk.tokens.size());
    }
    if (seq.first_chunk) {
      seq.first_chunk = false;
      if (seq.first_of_prompt) {
        std::lock_guard glock(g.mu_);
        g.usage_.cached_tokens += chunk.cached_prompt_tokens;
      }
    }
    if (!ran.ok()) {
      {
        std::lock_guard glock(g.mu_);
        g.error_ = ran;
      }
      Finish(seq, FinishReason::kAbort);
      continue;
    }
    if (!chunk.produces_token) continue;
    std::span<float> logits(logits_.data() + row * vocab, static_cast<size_t>(vocab));
    std::span<const uint8_t> allowed;
    if (seq.constraint) {
      seq.constraint->AllowedTokens(mask_);
      allowed = mask_;
    }
    if (seq.generated < seq.min_tokens) {
      // vLLM's min_tokens: no end token yet (before the sampler, so logprobs say so too).
      for (int32_t t : seq.stop_tokens) {
        if (t >= 0 && t < vocab)
          logits[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
      }
    }
    auto drawn = seq.sampler->Sample(logits, allowed, &sampler_scratch_);
    if (!drawn.ok()) {
      // Nothing can be drawn (a constraint the vocabulary cannot continue, or NaN logits).
      {
        std::lock_guard glock(g.mu_);
        g.error_ = drawn.status();
      }
      Finish(seq, FinishReason::kAbort);
      continue;
    }
    const SampledToken& sampled = *drawn;
    seq.sampler->Accept(sampled.token);
    if (seq.constraint) seq.constraint->Accept(sampled.token).IgnoreError();
    ++seq.generated;
    ++stats_.generation_tokens;
    const bool out_of_budget = scheduler_->AppendToken(seq.id, sampled.token);
    FinishReason finish = FinishReason::kNone;
    {
      std::lock_guard glock(g.mu_);
      Generation::Choice& choice = g.choices_[static_cast<size_t>(seq.choice)];
      if (seq.stop_tokens.contains(sampled.token)) {
        finish = FinishReason::kStop;  // an end token is not part of the text nor its logprobs
      } else {
        if (seq.want_logprobs) {
          TokenOutput out{sampled.token, sampled.logprob, {}};
          for (const TokenLogprob& top : sampled.top_logprobs) {
            out.top_logprobs.emplace_back(top.token, top.logprob);
          }
          choice.tokens.push_back(std::move(out));
        }
        const TextDelta piece = seq.decoder->Add(sampled.token);
        choice.text += piece.text;
        if (piece.stopped) finish = FinishReason::kStop;
      }
    }
    if (finish == FinishReason::kNone && (out_of_budget || seq.generated >= seq.max_tokens)) {
      finish = FinishReason::kLength;
    }
    if (finish != FinishReason::kNone) {
      Finish(seq, finish);
    } else {
      g.cv_.notify_all();
    }
  }
  return true;
}

}  // namespace sovai::serve
