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

KvCache::KvCache(const ModelConfig& config, int64_t num_blocks, int64_t block_size)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      slot_floats_(config.num_key_value_heads * config.head_dim) {
  const auto per_layer = static_cast<size_t>(num_blocks * block_size * slot_floats_);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    keys_.emplace_back(per_layer, 0.0f);
    values_.emplace_back(per_layer, 0.0f);
  }
}

void KvCache::CopyLeadingSlots(int64_t from, int64_t to, int64_t count) {
  SOVAI_CHECK(from >= 0 && from < num_blocks_ && to >= 0 && to < num_blocks_ && from != to)
      << from << " -> " << to;
  SOVAI_CHECK(count >= 0 && count <= block_size_) << count;
  const int64_t block_floats = block_size_ * slot_floats_;
  const auto n = static_cast<size_t>(count * slot_floats_);
  for (size_t l = 0; l < keys_.size(); ++l) {
    for (std::vector<float>* kv : {&keys_[l], &values_[l]}) {
      const float* src = kv->data() + from * block_floats;
      std::copy(src, src + n, kv->data() + to * block_floats);
    }
  }
}

int64_t KvCache::BytesPerToken(const ModelConfig& config) {
  return 2 * config.num_hidden_layers * config.kv_dim() * static_cast<int64_t>(sizeof(float));
}

Result<std::unique_ptr<InferenceAdapter>> InferenceAdapter::FromPeft(const LoraAdapter& adapter,
                                                                     const ModelConfig& config) {
  SOVAI_RETURN_IF_ERROR(ValidateLoraAdapter(adapter, config));
  if (!adapter.config.layers_to_transform.empty()) {
    return Status(StatusCode::kUnimplemented,
                  "adapters on a subset of layers (layers_to_transform) are not supported yet");
  }
  std::unique_ptr<InferenceAdapter> out(new InferenceAdapter());
  out->rank_ = adapter.config.r;
  LoraOptions options;
  options.rank = adapter.config.r;
  options.alpha = adapter.config.lora_alpha;
  options.use_rslora = adapter.config.use_rslora;
  out->scale_ = static_cast<float>(options.Scale());
  out->layers_ = config.num_hidden_layers;
  out->index_.assign(static_cast<size_t>(out->layers_ * kProjectionCount), -1);
  out->modules_ = adapter.modules;
  for (size_t m = 0; m < out->modules_.size(); ++m) {
    const LoraModuleWeights& w = out->modules_[m];
    out->index_[static_cast<size_t>(w.layer * kProjectionCount + static_cast<int>(w.module))] =
        static_cast<int32_t>(m);
  }
  return out;
}

const LoraModuleWeights* InferenceAdapter::Module(int64_t layer, Projection projection) const {
  if (layer < 0 || layer >= layers_) return nullptr;
  const int32_t m =
      index_[static_cast<size_t>(layer * kProjectionCount + static_cast<int>(projection))];
  return m < 0 ? nullptr : &modules_[static_cast<size_t>(m)];
}

Status LlamaModel::Infer(Backend& backend, KvCache& cache,
                         std::span<const InferenceSequence> sequences, std::vector<float>& logits) {
  const int64_t c = config_.hidden_size, f = config_.intermediate_size;
  const int64_t hq = config_.num_attention_heads, hkv = config_.num_key_value_heads;
  const int64_t d = config_.head_dim, qd = config_.q_dim(), kvd = config_.kv_dim();
  const int64_t vocab = config_.vocab_size;
  const int64_t block_size = cache.block_size();
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (!backend.Supports(kernels::Op::kPagedAttention)) {
    return Status(StatusCode::kFailedPrecondition,
                  "the " + std::string(backend.name()) + " backend cannot run inference");
  }
  if (!infer_) infer_ = std::make_unique<InferScratch>();
  InferScratch& s = *infer_;

  // Flatten the sequences: token n belongs to sequence seq_of[n] at position positions[n] and is
  // stored at cache slot slots[n].
  int64_t max_blocks = 1;
  int64_t with_logits = 0;
  for (const InferenceSequence& seq : sequences) {
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(seq.block_table.size()));
    if (seq.want_logits && !seq.tokens.empty()) ++with_logits;
  }
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
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  logits.resize(static_cast<size_t>(with_logits * vocab));
  if (n == 0) return Status();
  auto grow = [](std::vector<float>& v, int64_t count) {
    if (static_cast<int64_t>(v.size()) < count) v.resize(static_cast<size_t>(count));
  };
  grow(s.x, n * c);
  grow(s.h, n * c);
  grow(s.q, n * qd);
  grow(s.k, n * kvd);
  grow(s.v, n * kvd);
  grow(s.att, n * qd);
  grow(s.tmp, n * std::max({c, qd, kvd}));
  grow(s.gate, n * f);
  grow(s.up, n * f);
  grow(s.hidden, n * f);
  grow(s.rstd, n * std::max(hq, int64_t{1}));

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
      const LoraModuleWeights* m =
          seq.adapter ? seq.adapter->Module(l, static_cast<Projection>(i)) : nullptr;
      if (m != nullptr && rows > 0) {
        const int64_t r = seq.adapter->rank();
        grow(s.xa, rows * r);
        backend.LoraForward(y + row * w.rows, s.xa.data(), x + row * w.cols, m->a.data(),
                            m->b.data(), rows, w.cols, w.rows, r, seq.adapter->scale(),
                            kernels::Dropout{});
      }
      row += rows;
    }
  };

  backend.EmbeddingForward(s.x.data(), s.tokens.data(), globals_->embed.ref, n);  // x[N, C]
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = *layers_[l];
    const int64_t li = static_cast<int64_t>(l);
    backend.RmsNormForward(s.h.data(), s.rstd.data(), s.x.data(), layer.input_norm.data(), n, c,
                           eps);                    // h[N, C]
    project(layer, li, 0, s.h.data(), s.q.data());  // q[N, Hq, D]
    project(layer, li, 1, s.h.data(), s.k.data());  // k[N, Hkv, D]
    project(layer, li, 2, s.h.data(), s.v.data());  // v[N, Hkv, D]
    if (config_.has_qk_norm()) {
      grow(s.rstd_heads, n * hq);
      std::copy_n(s.q.data(), n * qd, s.tmp.data());
      backend.RmsNormForward(s.q.data(), s.rstd_heads.data(), s.tmp.data(), layer.q_norm.data(),
                             n * hq, d, eps);
      std::copy_n(s.k.data(), n * kvd, s.tmp.data());
      backend.RmsNormForward(s.k.data(), s.rstd_heads.data(), s.tmp.data(), layer.k_norm.data(),
                             n * hkv, d, eps);
    }
    backend.RopeForward(s.q.data(), s.q.data(), s.positions.data(), inv_freq_.data(), n, hq, d);
    backend.RopeForward(s.k.data(), s.k.data(), s.positions.data(), inv_freq_.data(), n, hkv, d);
    backend.KvCacheWrite(cache.keys(li), cache.values(li), s.k.data(), s.v.data(), s.slots.data(),
                         n, hkv, d);
    const int32_t* seq_of = s.seq_of.data();
    const int32_t* positions = s.positions.data();
    if (l + 1 == layers_.size() && with_logits < n) {
      // The last layer's output is only read for logits: the other rows have left what later
      // steps need of them (their keys and values) in the cache, so the rest of the layer runs
      // on the rows whose logits are wanted alone (a prefill chunk of 32 tokens skips 31/32 of
      // the last layer's attention, output and MLP). Kept rows move up in order; every op
      // computes a row the same way in any batch, so their results do not change.
      s.kept_seq_of.clear();
      s.kept_positions.clear();
      int64_t row = 0;
      for (size_t si = 0; si < sequences.size(); ++si) {
        const int64_t rows = s.seq_rows[si];
        row += rows;
        const bool keep = sequences[si].want_logits && rows > 0;
        s.seq_rows[si] = keep ? 1 : 0;
        if (!keep) continue;
        const auto from = static_cast<size_t>(row - 1);
        const auto to = s.kept_seq_of.size();
        std::memmove(s.q.data() + to * qd, s.q.data() + from * qd, qd * sizeof(float));
        std::memmove(s.x.data() + to * c, s.x.data() + from * c, c * sizeof(float));
        s.kept_seq_of.push_back(s.seq_of[from]);
        s.kept_positions.push_back(s.positions[from]);
      }
      rows_now = with_logits;
      seq_of = s.kept_seq_of.data();
      positions = s.kept_positions.data();
      if (rows_now == 0) break;  // a prefill chunk that produces no token
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
    backend.PagedAttention(s.att.data(), s.q.data(), cache.keys(li), cache.values(li), seq_of,
                           positions, s.block_tables.data(), r,
                           shape);                      // att[R, Hq, D]
    project(layer, li, 3, s.att.data(), s.tmp.data());  // tmp[R, C]
    backend.Add(s.x.data(), s.x.data(), s.tmp.data(), r * c);
    backend.RmsNormForward(s.h.data(), s.rstd.data(), s.x.data(), layer.post_norm.data(), r, c,
                           eps);
    project(layer, li, 4, s.h.data(), s.gate.data());  // gate[R, F]
    project(layer, li, 5, s.h.data(), s.up.data());    // up[R, F]
    backend.SwiGluForward(s.hidden.data(), s.gate.data(), s.up.data(), r * f);
    project(layer, li, 6, s.hidden.data(), s.tmp.data());  // tmp[R, C]
    backend.Add(s.x.data(), s.x.data(), s.tmp.data(), r * c);
  }
  if (with_logits == 0) return Status();
  // x's first S' rows are now the last rows of the sequences that want logits, in order (the
  // last layer kept only them, or every sequence brought one row and wants its logits).
  SOVAI_CHECK_EQ(rows_now, with_logits);
  backend.RmsNormForward(s.h.data(), s.rstd.data(), s.x.data(), globals_->final_norm.data(),
                         with_logits, c, eps);
  const Matrix& head = config_.tie_word_embeddings ? globals_->embed : globals_->head;
  backend.LinearForward(logits.data(), s.h.data(), head.ref, nullptr, with_logits);  // [S', V]
  return Status();
}

}  // namespace sovai::model
