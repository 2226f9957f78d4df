// The storage of LlamaModel's weights and activations, shared by the files that implement the
// model (llama.cc: loading and training; llama_infer.cc: inference over a paged KV cache).
// Not part of the model's interface: include only from src/model/llama*.cc.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/backend.h"
#include "kernels/nf4.h"
#include "kernels/q8_0.h"
#include "kernels/weight.h"
#include "model/llama.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace sovai::model {

namespace llama_internal {

// A matrix w[rows, cols] in its storage format; `ref` is what the kernels read.
struct Matrix {
  kernels::WeightRef ref;
  // A frozen weight in its storage type (f32, bf16, Q8_0, NF4), named after its tensor in the
  // model file; empty when the weight is trainable (param holds it, in f32). `ref` points into
  // whichever holds it.
  tensor::Tensor storage;
  std::unique_ptr<Parameter> param;  // kTrainable

  base::Status Store(std::vector<float> values, std::string name, int64_t rows, int64_t cols,
                     kernels::WeightRef::Format format, bool trainable) {
    ref = kernels::WeightRef{};
    storage = tensor::Tensor();
    if (trainable) {
      param = std::make_unique<Parameter>();
      param->name = std::move(name);
      param->shape = {static_cast<uint64_t>(rows), static_cast<uint64_t>(cols)};
      param->value = std::move(values);
      param->grad.assign(param->value.size(), 0.0f);
      ref.format = kernels::WeightRef::Format::kF32;
      ref.data = param->value.data();
      ref.rows = rows;
      ref.cols = cols;
      return base::Status();
    }
    auto stored = kernels::QuantizeTensor(values, {rows, cols}, kernels::StorageTypeOf(format));
    if (!stored.ok()) return stored.status().WithContext("quantizing '" + name + "'");
    storage = std::move(*stored);
    storage.set_name(std::move(name));
    ref = kernels::WeightOf(storage);
    return base::Status();
  }

  base::Result<std::vector<float>> ToF32() const {
    if (param) return param->value;
    return kernels::DequantizeToF32(storage);
  }

  float* grad() { return param ? param->grad.data() : nullptr; }
};

// An f32 vector (norm weight, bias); trainable in full training.
struct Vector {
  Parameter p;
  bool present() const { return !p.value.empty(); }
  const float* data() const { return present() ? p.value.data() : nullptr; }
  float* grad() { return p.grad.empty() ? nullptr : p.grad.data(); }
};

}  // namespace llama_internal

using llama_internal::Matrix;
using llama_internal::Vector;

struct LlamaModel::Slot {
  Matrix* matrix = nullptr;
  Vector* vector = nullptr;
};

// Shapes: C hidden, D head size, V vocabulary, R LoRA rank; projection i is w[O, I] (q: [Hq*D, C],
// k and v: [Hkv*D, C], o: [C, Hq*D], gate and up: [F, C], down: [C, F]).
struct LlamaModel::Layer {
  Vector input_norm, post_norm, q_norm, k_norm;  // [C], [C], [D], [D] (q/k norms: qwen3 only)
  Matrix proj[kProjectionCount];                 // [O, I] each
  Vector bias[kProjectionCount];  // [O] where the model has one (qwen2, attention_bias)
  std::unique_ptr<Parameter> lora_a[kProjectionCount];  // [R, I] (adapted projections only)
  std::unique_ptr<Parameter> lora_b[kProjectionCount];  // [O, R]
  int64_t window = 0;                                   // 0: full attention
};

struct LlamaModel::Globals {
  Matrix embed;       // [V, C]
  Vector final_norm;  // [C]
  Matrix head;        // [V, C], unused when tied
};

// What the backward pass needs from the forward pass, and its own scratch (sized by
// PrepareActivations). Shapes as in kernels/backend.h: N = B*T token positions of the step, C the
// hidden size, F the intermediate size, Hq/Hkv the query/key-value heads of D values, R the LoRA
// rank, L the layers.
struct LlamaModel::Activations {
  int64_t n = 0, batch = 0, seq_len = 0;  // N = B*T, B, T
  struct PerLayer {
    std::vector<float> x_in;    // [N, C] the layer's input (the residual stream)
    std::vector<float> ln1;     // [N, C] input_layernorm(x_in)
    std::vector<float> rstd1;   // [N]
    std::vector<float> q_lin;   // [N, Hq, D] q before its per-head norm (qwen3 only, else empty)
    std::vector<float> k_lin;   // [N, Hkv, D] k before its per-head norm (qwen3 only, else empty)
    std::vector<float> rstd_q;  // [N, Hq] (qwen3 only)
    std::vector<float> rstd_k;  // [N, Hkv] (qwen3 only)
    std::vector<float> q;       // [N, Hq, D] after RoPE
    std::vector<float> k;       // [N, Hkv, D] after RoPE
    std::vector<float> v;       // [N, Hkv, D]
    std::vector<float> att;     // [N, Hq, D] attention output, before o_proj
    std::vector<float> lse;     // [B, Hq, T] log-sum-exp of each attention row
    std::vector<float> x_mid;   // [N, C] x_in + o_proj(att)
    std::vector<float> ln2;     // [N, C] post_attention_layernorm(x_mid)
    std::vector<float> rstd2;   // [N]
    std::vector<float> gate;    // [N, F]
    std::vector<float> up;      // [N, F]
    std::vector<float> hidden;  // [N, F] silu(gate) * up
    std::vector<float> xa[kProjectionCount];  // [N, R] per adapted projection, else empty
  };
  std::vector<PerLayer> layers;    // [L]
  std::vector<float> x_out;        // [N, C] the last layer's output
  std::vector<float> lnf;          // [N, C] norm(x_out), the head's input
  std::vector<float> rstdf;        // [N]
  std::vector<int32_t> positions;  // [N] the batch's positions, or i % T
  // Not filled: Forward reads the batch's segments and targets in place.
  std::vector<int32_t> segments, targets;
  // Backward scratch: the gradient of the loss with respect to...
  std::vector<float> dx;       // [N, C] the residual stream
  std::vector<float> dln;      // [N, C] a norm's output (entering Backward: lnf)
  std::vector<float> dq;       // [N, Hq, D] q
  std::vector<float> dk;       // [N, Hkv, D] k
  std::vector<float> dv;       // [N, Hkv, D] v
  std::vector<float> dq_lin;   // [N, Hq, D] q before RoPE (qwen3: then q_lin)
  std::vector<float> dk_lin;   // [N, Hkv, D] k before RoPE (qwen3: then k_lin)
  std::vector<float> datt;     // [N, Hq, D] att
  std::vector<float> dgate;    // [N, F] gate
  std::vector<float> dup;      // [N, F] up
  std::vector<float> dhidden;  // [N, F] hidden
};

// Buffers of an inference step, grown to the largest step seen and reused.
struct LlamaModel::InferScratch {
  std::vector<int32_t> tokens, positions, seq_of, slots, block_tables;  // [N], [S * max_blocks]
  std::vector<float> x, h, q, k, v, att, tmp, gate, up, hidden;         // [N, ...]
  std::vector<float> rstd, rstd_heads, xa;
  std::vector<int64_t> seq_rows;                     // [S] rows of each sequence in x
  std::vector<int32_t> kept_seq_of, kept_positions;  // [S'] of the rows the last layer keeps
};

}  // namespace sovai::model
