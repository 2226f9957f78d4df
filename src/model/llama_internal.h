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

// A buffer's f32 view for the ops (null for an empty buffer).
inline float* F32(const kernels::DeviceBuffer& buffer) { return buffer.as<float>(); }
inline int32_t* I32(const kernels::DeviceBuffer& buffer) { return buffer.as<int32_t>(); }

// A matrix w[rows, cols] in its storage format, in the backend's memory; `ref` is what the
// kernels read.
struct Matrix {
  kernels::WeightRef ref;
  // A frozen weight's bytes in its storage type (f32, bf16, Q8_0, NF4), uploaded once; empty
  // when the weight is trainable (param holds it, in f32). `ref` points into whichever holds it.
  kernels::DeviceBuffer storage;
  tensor::StorageType type = tensor::StorageType::kF32;
  std::string name;                  // its tensor in the model file
  std::unique_ptr<Parameter> param;  // kTrainable

  base::Status Store(kernels::Backend& backend, std::vector<float> values, std::string tensor_name,
                     int64_t rows, int64_t cols, kernels::WeightRef::Format format,
                     bool trainable) {
    ref = kernels::WeightRef{};
    storage.Reset();
    name = std::move(tensor_name);
    if (trainable) {
      SOVAI_ASSIGN_OR_RETURN(
          Parameter p,
          NewParameter(backend, name, {static_cast<uint64_t>(rows), static_cast<uint64_t>(cols)},
                       values, /*with_grad=*/true));
      param = std::make_unique<Parameter>(std::move(p));
      type = tensor::StorageType::kF32;
      ref.format = kernels::WeightRef::Format::kF32;
      ref.data = param->value.data();
      ref.rows = rows;
      ref.cols = cols;
      return base::Status();
    }
    type = kernels::StorageTypeOf(format);
    auto stored = kernels::QuantizeTensor(values, {rows, cols}, type);
    if (!stored.ok()) return stored.status().WithContext("quantizing '" + name + "'");
    // Quantized on the host, then uploaded: the host copy goes when this returns.
    SOVAI_ASSIGN_OR_RETURN(storage, backend.Allocate(stored->bytes()));
    backend.Upload(storage.data(), stored->raw_data(), stored->bytes());
    ref = kernels::WeightOf(*stored, storage.data());
    return base::Status();
  }

  // The weight as f32 on the host (downloaded, then dequantized).
  base::Result<std::vector<float>> ToF32() const {
    if (param) return kernels::DownloadAll<float>(param->value);
    SOVAI_ASSIGN_OR_RETURN(tensor::Tensor host, tensor::Tensor::Zeros(type, {ref.rows, ref.cols}));
    if (host.bytes() > 0)
      storage.backend()->Download(host.raw_data(), storage.data(), host.bytes());
    return kernels::DequantizeToF32(host);
  }

  float* grad() { return param ? F32(param->grad) : nullptr; }
};

// An f32 vector (norm weight, bias) in the backend's memory; trainable in full training.
struct Vector {
  Parameter p;
  bool present() const { return !p.value.empty(); }
  const float* data() const { return F32(p.value); }
  float* grad() { return F32(p.grad); }
};

}  // namespace llama_internal

using llama_internal::F32;
using llama_internal::I32;
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
  Matrix embed;                    // [V, C]
  Vector final_norm;               // [C]
  Matrix head;                     // [V, C], unused when tied
  kernels::DeviceBuffer inv_freq;  // [D/2] RoPE's inverse frequencies
};

// What the backward pass needs from the forward pass, and its own scratch (sized by
// PrepareActivations). Shapes as in kernels/backend.h: N = B*T token positions of the step, C the
// hidden size, F the intermediate size, Hq/Hkv the query/key-value heads of D values, R the LoRA
// rank, L the layers.
struct LlamaModel::Activations {
  int64_t n = 0, batch = 0, seq_len = 0;  // N = B*T, B, T
  struct PerLayer {
    kernels::DeviceBuffer x_in;   // [N, C] the layer's input (the residual stream)
    kernels::DeviceBuffer ln1;    // [N, C] input_layernorm(x_in)
    kernels::DeviceBuffer rstd1;  // [N]
    kernels::DeviceBuffer q_lin;  // [N, Hq, D] q before its per-head norm (qwen3 only, else empty)
    kernels::DeviceBuffer k_lin;  // [N, Hkv, D] k before its per-head norm (qwen3 only, else empty)
    kernels::DeviceBuffer rstd_q;                // [N, Hq] (qwen3 only)
    kernels::DeviceBuffer rstd_k;                // [N, Hkv] (qwen3 only)
    kernels::DeviceBuffer q;                     // [N, Hq, D] after RoPE
    kernels::DeviceBuffer k;                     // [N, Hkv, D] after RoPE
    kernels::DeviceBuffer v;                     // [N, Hkv, D]
    kernels::DeviceBuffer att;                   // [N, Hq, D] attention output, before o_proj
    kernels::DeviceBuffer lse;                   // [B, Hq, T] log-sum-exp of each attention row
    kernels::DeviceBuffer x_mid;                 // [N, C] x_in + o_proj(att)
    kernels::DeviceBuffer ln2;                   // [N, C] post_attention_layernorm(x_mid)
    kernels::DeviceBuffer rstd2;                 // [N]
    kernels::DeviceBuffer gate;                  // [N, F]
    kernels::DeviceBuffer up;                    // [N, F]
    kernels::DeviceBuffer hidden;                // [N, F] silu(gate) * up
    kernels::DeviceBuffer xa[kProjectionCount];  // [N, R] per adapted projection, else empty
  };
  std::vector<PerLayer> layers;  // [L]
  kernels::DeviceBuffer x_out;   // [N, C] the last layer's output
  kernels::DeviceBuffer lnf;     // [N, C] norm(x_out), the head's input
  kernels::DeviceBuffer rstdf;   // [N]
  // The batch's int32 arrays, uploaded by PrepareActivations.
  kernels::DeviceBuffer tokens;     // [N]
  kernels::DeviceBuffer targets;    // [N] (empty without targets)
  kernels::DeviceBuffer positions;  // [N] the batch's positions, or i % T
  kernels::DeviceBuffer segments;   // [N] (empty: one sample per row)
  // Backward scratch: the gradient of the loss with respect to...
  kernels::DeviceBuffer dx;       // [N, C] the residual stream
  kernels::DeviceBuffer dln;      // [N, C] a norm's output (entering Backward: lnf)
  kernels::DeviceBuffer dq;       // [N, Hq, D] q
  kernels::DeviceBuffer dk;       // [N, Hkv, D] k
  kernels::DeviceBuffer dv;       // [N, Hkv, D] v
  kernels::DeviceBuffer dq_lin;   // [N, Hq, D] q before RoPE (qwen3: then q_lin)
  kernels::DeviceBuffer dk_lin;   // [N, Hkv, D] k before RoPE (qwen3: then k_lin)
  kernels::DeviceBuffer datt;     // [N, Hq, D] att
  kernels::DeviceBuffer dgate;    // [N, F] gate
  kernels::DeviceBuffer dup;      // [N, F] up
  kernels::DeviceBuffer dhidden;  // [N, F] hidden
};

// Buffers of an inference step, grown to the largest step seen and reused. The index arrays are
// built on the host and uploaded (the d_ buffers) before the ops read them.
struct LlamaModel::InferScratch {
  std::vector<int32_t> tokens, positions, seq_of, slots, block_tables;  // [N], [S * max_blocks]
  kernels::DeviceBuffer d_tokens, d_positions, d_seq_of, d_slots, d_block_tables;
  kernels::DeviceBuffer x, h, q, k, v, att, tmp, gate, up, hidden;  // [N, ...]
  kernels::DeviceBuffer rstd, rstd_heads, xa;
  kernels::DeviceBuffer logits;                      // [S', V]
  std::vector<int64_t> seq_rows;                     // [S] rows of each sequence in x
  std::vector<int32_t> kept_seq_of, kept_positions;  // [S'] of the rows the last layer keeps
  kernels::DeviceBuffer d_kept_seq_of, d_kept_positions;

  // Uploads the index arrays and sizes the buffers for N tokens, adapters' xa of xa_floats and
  // logits_floats of logits (llama_infer.cc).
  base::Status Prepare(kernels::Backend& backend, const ModelConfig& config, int64_t n,
                       int64_t xa_floats, int64_t logits_floats);
};

}  // namespace sovai::model
