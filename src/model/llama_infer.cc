// LlamaModel::Infer: the forward pass of inference over a paged KV cache, for a batch of
// sequences that each bring their own new tokens (a prompt chunk or one decoded token) and
// their own LoRA adapter (or none). The layer arithmetic is the training forward's (llama.cc);
// only attention differs: this step's keys and values go into the cache, and every query reads
// its sequence's cached positions through the block table.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "model/llama.h"
#include "model/llama_internal.h"

namespace sovai::model {

using base::Result;
using base::Status;
using base::StatusCode;
using kernels::Backend;

Result<KvCache> KvCache::Create(Backend& backend, const ModelConfig& config, int64_t num_blocks,
                                int64_t block_size) {
  KvCache cache;
  cache.backend_ = &backend;
  cache.num_blocks_ = num_blocks;
  cache.block_size_ = block_size;
  cache.slot_floats_ = config.num_key_value_heads * config.head_dim;
  const int64_t per_layer = num_blocks * block_size * cache.slot_floats_;
  // Zeroed: attention reads only positions that were written, but a NaN left in an unwritten slot
  // of a block must not reach a masked product.
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    SOVAI_ASSIGN_OR_RETURN(kernels::DeviceBuffer keys,
                           kernels::AllocateZeros<float>(backend, per_layer));
    SOVAI_ASSIGN_OR_RETURN(kernels::DeviceBuffer values,
                           kernels::AllocateZeros<float>(backend, per_layer));
    cache.keys_.push_back(std::move(keys));
    cache.values_.push_back(std::move(values));
  }
  return cache;
}

void KvCache::CopyLeadingSlots(int64_t from, int64_t to, int64_t count) {
  SOVAI_CHECK(from >= 0 && from < num_blocks_ && to >= 0 && to < num_blocks_ && from != to)
      << from << " -> " << to;
  SOVAI_CHECK(count >= 0 && count <= block_size_) << count;
  const int64_t block_floats = block_size_ * slot_floats_;
  const auto bytes = static_cast<size_t>(count * slot_floats_) * sizeof(float);
  for (size_t l = 0; l < keys_.size(); ++l) {
    for (kernels::DeviceBuffer* kv : {&keys_[l], &values_[l]}) {
      backend_->Copy(kv->as<float>() + to * block_floats, kv->as<float>() + from * block_floats,
                     bytes);
    }
  }
}

int64_t KvCache::BytesPerToken(const ModelConfig& config) {
  return 2 * config.num_hidden_layers * config.kv_dim() * static_cast<int64_t>(sizeof(float));
}

Result<std::unique_ptr<InferenceAdapter>> InferenceAdapter::FromPeft(Backend& backend,
                                                                     const LoraAdapter& adapter,
                                                                     const ModelConfig& config) {
  SOVAI_RETURN_IF_ERROR(ValidateLoraAdapter(adapter, config));
  if (!adapter.config.layers_to_transform.empty()) {
    return Status(StatusCode::kUnimplemented,
                  "adapters on a subset of layers (layers_to_transform) are not supported yet");
  }
  std::unique_ptr<InferenceAdapter> out(new InferenceAdapter());
  out->backend_ = &backend;
  out->rank_ = adapter.config.r;
  LoraOptions options;
  options.rank = adapter.config.r;
  options.alpha = adapter.config.lora_alpha;
  options.use_rslora = adapter.config.use_rslora;
  out->scale_ = static_cast<float>(options.Scale());
  out->layers_ = config.num_hidden_layers;
  out->index_.assign(static_cast<size_t>(out->layers_ * kProjectionCount), -1);
  for (size_t m = 0; m < adapter.modules.size(); ++m) {
    const LoraModuleWeights& w = adapter.modules[m];
    ModuleWeights uploaded;
    SOVAI_ASSIGN_OR_RETURN(uploaded.a, kernels::UploadNew<float>(backend, w.a));
    SOVAI_ASSIGN_OR_RETURN(uploaded.b, kernels::UploadNew<float>(backend, w.b));
    out->modules_.push_back(std::move(uploaded));
    out->index_[static_cast<size_t>(w.layer * kProjectionCount + static_cast<int>(w.module))] =
        static_cast<int32_t>(m);
  }
  return out;
}

const InferenceAdapter::ModuleWeights* InferenceAdapter::Module(int64_t layer,
                                                                Projection projection) const {
  if (layer < 0 || layer >= layers_) return nullptr;
  const int32_t m =
      index_[static_cast<size_t>(layer * kProjectionCount + static_cast<int>(projection))];
  return m < 0 ? nullptr : &modules_[static_cast<size_t>(m)];
}

namespace {

// Host index arrays into their buffers (the ops read only the backend's memory).
Status UploadInts(Backend& backend, kernels::DeviceBuffer& buffer,
                  const std::vector<int32_t>& values) {
  SOVAI_RETURN_IF_ERROR(kernels::Reserve(backend, buffer, values.size() * sizeof(int32_t)));
  backend.Upload(buffer.data(), values.data(), values.size() * sizeof(int32_t));
  return Status();
}

}  // namespace

Status LlamaModel::InferScratch::Prepare(Backend& backend, const ModelConfig& config, int64_t n,
                                         int64_t xa_floats, int64_t logits_floats) {
  const int64_t c = config.hidden_size, f = config.intermediate_size;
  const int64_t qd = config.q_dim(), kvd = config.kv_dim(), hq = config.num_attention_heads;
  SOVAI_RETURN_IF_ERROR(UploadInts(backend, d_tokens, tokens));
  SOVAI_RETURN_IF_ERROR(UploadInts(backend, d_positions, positions));
  SOVAI_RETURN_IF_ERROR(UploadInts(backend, d_seq_of, seq_of));
  SOVAI_RETURN_IF_ERROR(UploadInts(backend, d_slots, slots));
  SOVAI_RETURN_IF_ERROR(UploadInts(backend, d_block_tables, block_tables));
  // Buffers keep their memory from step to step while they are large enough.
  const std::pair<kernels::DeviceBuffer*, int64_t> sizes[] = {
      {&x, n * c},
      {&h, n * c},
      {&q, n * qd},
      {&k, n * kvd},
      {&v, n * kvd},
      {&att, n * qd},
      {&tmp, n * std::max({c, qd, kvd})},
      {&gate, n * f},
      {&up, n * f},
      {&hidden, n * f},
      {&rstd, n * std::max(hq, int64_t{1})},
      {&rstd_heads, config.has_qk_norm() ? n * hq : 0},
      {&xa, xa_floats},
      {&logits, logits_floats}};
  for (const auto& [buffer, count] : sizes) {
    SOVAI_RETURN_IF_ERROR(
        kernels::Reserve(backend, *buffer, static_cast<size_t>(count) * sizeof(float)));
  }
  return Status();
}

namespace {

// The rows of a sequence's tokens that the last layer must compute: those whose hidden state
// leaves the step (as logits or as hidden states).
int64_t KeptRows(const InferenceSequence& seq) {
  const auto rows = static_cast<int64_t>(seq.tokens.size());
  if (rows == 0) return 0;
  if (seq.hidden == HiddenOutput::kAll) return rows;
  return seq.want_logits || seq.hidden == HiddenOutput::kLast ? 1 : 0;
}

}  // namespace

Status LlamaModel::CheckInferBackends(kernels::Backend& backend, KvCache& cache,
                                      std::span<const InferenceSequence> sequences) const {
  if (!backend.Supports(kernels::Op::kPagedAttention)) {
    return Status(StatusCode::kFailedPrecondition,
                  "the " + std::string(backend.name()) + " backend cannot run inference");
  }
  if (&backend != backend_ || &cache.backend() != backend_) {
    return Status(StatusCode::kFailedPrecondition,
                  "the model and its KV cache must be in the memory of the backend that runs them");
  }
  for (const InferenceSequence& seq : sequences) {
    if (seq.adapter != nullptr && &seq.adapter->backend() != backend_) {
      return Status(StatusCode::kFailedPrecondition,
                    "an adapter was loaded into another backend's memory than the model's");
    }
  }
  return Status();
}

Status LlamaModel::FlattenSequences(KvCache& cache, std::span<const InferenceSequence> sequences,
                                    int64_t max_blocks) {
  InferScratch& s = *infer_;
  const int64_t vocab = config_.vocab_size;
  const int64_t block_size = cache.block_size();
  s.tokens.clear();
  s.positions.clear();
  s.seq_of.clear();
  s.slots.clear();
  s.block_tables.assign(static_cast<size_t>(static_cast<int64_t>(sequences.size()) * max_blocks),
                        0);
  for (size_t i = 0; i < sequences.size(); ++i) {
    const InferenceSequence& seq = sequences[i];
    const int64_t end = seq.start + static_cast<int64_t>(seq.tokens.size());
    if (seq.start < 0 || end > config_.max_position_embeddings) {
      return Status(StatusCode::kInvalidArgument,
                    "positions up to " + std::to_string(end) + " exceed the model's " +
                        std::to_string(config_.max_position_embeddings));
    }
    if (static_cast<int64_t>(seq.block_table.size()) * block_size < end) {
      return Status(StatusCode::kInvalidArgument,
                    "a block table of " + std::to_string(seq.block_table.size()) +
                        " blocks cannot hold " + std::to_string(end) + " positions");
    }
    for (size_t b = 0; b < seq.block_table.size(); ++b) {
      const int32_t block = seq.block_table[b];
      if (block < 0 || block >= cache.num_blocks()) {
        return Status(StatusCode::kInvalidArgument, "block " + std::to_string(block) +
                                                        " is outside the cache of " +
                                                        std::to_string(cache.num_blocks()));
      }
      s.block_tables[i * static_cast<size_t>(max_blocks) + b] = block;
    }
    for (size_t t = 0; t < seq.tokens.size(); ++t) {
      const int32_t token = seq.tokens[t];
      if (token < 0 || token >= vocab) {
        return Status(StatusCode::kInvalidArgument, "token id " + std::to_string(token) +
                                                        " is outside the vocabulary of " +
                                                        std::to_string(vocab));
      }
      const int64_t pos = seq.start + static_cast<int64_t>(t);
      s.tokens.push_back(token);
      s.positions.push_back(static_cast<int32_t>(pos));
      s.seq_of.push_back(static_cast<int32_t>(i));
      s.slots.push_back(static_cast<int32_t>(
          seq.block_table[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size));
    }
  }
  return Status();
}

void LlamaModel::MoveKeptRowsUp(kernels::Backend& backend,
                                std::span<const InferenceSequence> sequences) {
  InferScratch& s = *infer_;
  const int64_t c = config_.hidden_size, qd = config_.q_dim();
  s.kept_seq_of.clear();
  s.kept_positions.clear();
  int64_t row = 0;
  for (size_t si = 0; si < sequences.size(); ++si) {
    const int64_t rows = s.seq_rows[si];
    const int64_t keep = KeptRows(sequences[si]);
    s.seq_rows[si] = keep;
    for (int64_t k = rows - keep; k < rows; ++k) {
      const auto from = static_cast<size_t>(row + k);
      const auto to = s.kept_seq_of.size();
      if (to != from) {
        backend.Copy(F32(s.q) + to * qd, F32(s.q) + from * qd, qd * sizeof(float));
        backend.Copy(F32(s.x) + to * c, F32(s.x) + from * c, c * sizeof(float));
      }
      s.kept_seq_of.push_back(s.seq_of[from]);
      s.kept_positions.push_back(s.positions[from]);
    }
    row += rows;
  }
}

Status LlamaModel::Infer(Backend& backend, KvCache& cache,
                         std::span<const InferenceSequence> sequences, std::vector<float>& logits) {
  std::vector<float> hidden;
  return Infer(backend, cache, sequences, logits, hidden);
}

Status LlamaModel::Infer(Backend& backend, KvCache& cache,
                         std::span<const InferenceSequence> sequences, std::vector<float>& logits,
                         std::vector<float>& hidden) {
  const int64_t c = config_.hidden_size, f = config_.intermediate_size;
  const int64_t hq = config_.num_attention_heads, hkv = config_.num_key_value_heads;
  const int64_t d = config_.head_dim, qd = config_.q_dim(), kvd = config_.kv_dim();
  const int64_t vocab = config_.vocab_size;
  const int64_t block_size = cache.block_size();
  const float eps = static_cast<float>(config_.rms_norm_eps);
  SOVAI_RETURN_IF_ERROR(CheckInferBackends(backend, cache, sequences));
  if (!infer_) infer_ = std::make_unique<InferScratch>();
  InferScratch& s = *infer_;

  // The step's sizes: the widest block table, and the rows of logits, kept and hidden states.
  int64_t max_blocks = 1;
  int64_t with_logits = 0;
  int64_t kept = 0;  // rows the last layer computes (logits and hidden states are read from)
  int64_t hidden_rows = 0;
  for (const InferenceSequence& seq : sequences) {
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(seq.block_table.size()));
    if (seq.want_logits && !seq.tokens.empty()) ++with_logits;
    kept += KeptRows(seq);
    if (seq.hidden != HiddenOutput::kNone) {
      hidden_rows += seq.hidden == HiddenOutput::kAll ? static_cast<int64_t>(seq.tokens.size())
                                                      : (seq.tokens.empty() ? 0 : 1);
    }
  }
  // Flatten the sequences: token n belongs to sequence seq_of[n] at position positions[n] and is
  // stored at cache slot slots[n].
  SOVAI_RETURN_IF_ERROR(FlattenSequences(cache, sequences, max_blocks));
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  logits.resize(static_cast<size_t>(with_logits * vocab));
  hidden.resize(static_cast<size_t>(hidden_rows * c));
  if (n == 0) return Status();
  int64_t max_xa = 0;  // the largest [rows, R] of any sequence's adapter
  for (const InferenceSequence& seq : sequences) {
    if (seq.adapter != nullptr) {
      max_xa = std::max(max_xa, static_cast<int64_t>(seq.tokens.size()) * seq.adapter->rank());
    }
  }
  SOVAI_RETURN_IF_ERROR(s.Prepare(backend, config_, n, max_xa, with_logits * vocab));
  const float* inv_freq = F32(globals_->inv_freq);

  // The rows of x: every token's until the last layer, which keeps only the rows whose logits
  // are wanted (below).
  int64_t rows_now = n;
  s.seq_rows.clear();
  for (const InferenceSequence& seq : sequences) {
    s.seq_rows.push_back(static_cast<int64_t>(seq.tokens.size()));
  }
  // y[rows_now, out] = x[rows_now, in] @ W^T + bias, plus each sequence's own adapter on its rows.
  auto project = [&](Layer& layer, int64_t l, int i, const float* x, float* y) {
    const kernels::WeightRef& w = layer.proj[i].ref;
    backend.LinearForward(y, x, w, layer.bias[i].data(), rows_now);
    int64_t row = 0;
    for (size_t si = 0; si < sequences.size(); ++si) {
      const InferenceSequence& seq = sequences[si];
      const int64_t rows = s.seq_rows[si];
      const InferenceAdapter::ModuleWeights* m =
          seq.adapter ? seq.adapter->Module(l, static_cast<Projection>(i)) : nullptr;
      if (m != nullptr && rows > 0) {
        const int64_t r = seq.adapter->rank();
        backend.LoraForward(y + row * w.rows, F32(s.xa), x + row * w.cols, F32(m->a), F32(m->b),
                            rows, w.cols, w.rows, r, seq.adapter->scale(), kernels::Dropout{});
      }
      row += rows;
    }
  };

  backend.EmbeddingForward(F32(s.x), I32(s.d_tokens), globals_->embed.ref, n);  // x[N, C]
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = *layers_[l];
    const int64_t li = static_cast<int64_t>(l);
    backend.RmsNormForward(F32(s.h), F32(s.rstd), F32(s.x), layer.input_norm.data(), n, c,
                           eps);                // h[N, C]
    project(layer, li, 0, F32(s.h), F32(s.q));  // q[N, Hq, D]
    project(layer, li, 1, F32(s.h), F32(s.k));  // k[N, Hkv, D]
    project(layer, li, 2, F32(s.h), F32(s.v));  // v[N, Hkv, D]
    if (config_.has_qk_norm()) {
      backend.Copy(F32(s.tmp), F32(s.q), static_cast<size_t>(n * qd) * sizeof(float));
      backend.RmsNormForward(F32(s.q), F32(s.rstd_heads), F32(s.tmp), layer.q_norm.data(), n * hq,
                             d, eps);
      backend.Copy(F32(s.tmp), F32(s.k), static_cast<size_t>(n * kvd) * sizeof(float));
      backend.RmsNormForward(F32(s.k), F32(s.rstd_heads), F32(s.tmp), layer.k_norm.data(), n * hkv,
                             d, eps);
    }
    backend.RopeForward(F32(s.q), F32(s.q), I32(s.d_positions), inv_freq, n, hq, d);
    backend.RopeForward(F32(s.k), F32(s.k), I32(s.d_positions), inv_freq, n, hkv, d);
    backend.KvCacheWrite(cache.keys(li), cache.values(li), F32(s.k), F32(s.v), I32(s.d_slots), n,
                         hkv, d);
    const int32_t* seq_of = I32(s.d_seq_of);
    const int32_t* positions = I32(s.d_positions);
    if (l + 1 == layers_.size() && kept < n) {
      // The last layer's output is only read for logits and hidden states: the other rows have
      // left what later steps need of them (their keys and values) in the cache, so the rest of
      // the layer runs on the kept rows alone (a prefill chunk of 32 tokens that wants logits
      // skips 31/32 of the last layer's attention, output and MLP). Kept rows move up in order (a
      // row's copy never overlaps another row); every op computes a row the same way in any
      // batch, so their results do not change.
      MoveKeptRowsUp(backend, sequences);
      rows_now = kept;
      if (rows_now == 0) break;  // a prefill chunk that produces no token
      SOVAI_RETURN_IF_ERROR(UploadInts(backend, s.d_kept_seq_of, s.kept_seq_of));
      SOVAI_RETURN_IF_ERROR(UploadInts(backend, s.d_kept_positions, s.kept_positions));
      seq_of = I32(s.d_kept_seq_of);
      positions = I32(s.d_kept_positions);
    }
    const Backend::PagedAttentionShape shape{
        .q_heads = hq,
        .kv_heads = hkv,
        .head_dim = d,
        .block_size = block_size,
        .max_blocks = max_blocks,
        .window = layer.window,
        .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)))};
    const int64_t r = rows_now;
    backend.PagedAttention(F32(s.att), F32(s.q), cache.keys(li), cache.values(li), seq_of,
                           positions, I32(s.d_block_tables), r,
                           shape);                  // att[R, Hq, D]
    project(layer, li, 3, F32(s.att), F32(s.tmp));  // tmp[R, C]
    backend.Add(F32(s.x), F32(s.x), F32(s.tmp), r * c);
    backend.RmsNormForward(F32(s.h), F32(s.rstd), F32(s.x), layer.post_norm.data(), r, c, eps);
    project(layer, li, 4, F32(s.h), F32(s.gate));  // gate[R, F]
    project(layer, li, 5, F32(s.h), F32(s.up));    // up[R, F]
    backend.SwiGluForward(F32(s.hidden), F32(s.gate), F32(s.up), r * f);
    project(layer, li, 6, F32(s.hidden), F32(s.tmp));  // tmp[R, C]
    backend.Add(F32(s.x), F32(s.x), F32(s.tmp), r * c);
  }
  if (kept == 0) return Status();
  // x's first `kept` rows are now the kept rows of the sequences, in order (the last layer kept
  // only them, or every row was kept).
  SOVAI_CHECK_EQ(rows_now, kept);
  InferOutputs(backend, sequences, kept, with_logits, logits, hidden);
  return Status();
}

void LlamaModel::InferOutputs(Backend& backend, std::span<const InferenceSequence> sequences,
                              int64_t kept, int64_t with_logits, std::vector<float>& logits,
                              std::vector<float>& hidden) {
  InferScratch& s = *infer_;
  const int64_t c = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  backend.RmsNormForward(F32(s.h), F32(s.rstd), F32(s.x), globals_->final_norm.data(), kept, c,
                         eps);  // h[K, C]
  if (with_logits > 0) {
    const float* head_input = F32(s.h);
    if (with_logits < kept) {
      // Some kept rows are hidden states only: the head reads each logits sequence's last row.
      int64_t row = 0, gathered = 0;
      for (size_t si = 0; si < sequences.size(); ++si) {
        row += s.seq_rows[si];
        if (!sequences[si].want_logits || s.seq_rows[si] == 0) continue;
        backend.Copy(F32(s.tmp) + gathered * c, F32(s.h) + (row - 1) * c, c * sizeof(float));
        ++gathered;
      }
      head_input = F32(s.tmp);  // tmp[S', C]
    }
    const Matrix& head = config_.tie_word_embeddings ? globals_->embed : globals_->head;
    backend.LinearForward(F32(s.logits), head_input, head.ref, nullptr, with_logits);  // [S', V]
    // The sampler reads the logits on the host: the step's one download.
    backend.Download(logits.data(), s.logits.data(), logits.size() * sizeof(float));
  }
  // The hidden states a sequence asked for are its kept rows (all, or its last).
  int64_t row = 0, out = 0;
  for (size_t si = 0; si < sequences.size(); ++si) {
    const int64_t rows = s.seq_rows[si];
    row += rows;
    if (sequences[si].hidden == HiddenOutput::kNone || rows == 0) continue;
    const int64_t take = sequences[si].hidden == HiddenOutput::kAll ? rows : 1;
    backend.Download(hidden.data() + out * c, F32(s.h) + (row - take) * c,
                     static_cast<size_t>(take * c) * sizeof(float));
    out += take;
  }
}

}  // namespace sovai::model
