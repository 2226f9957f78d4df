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
#include "model/llama.h"
#include "tensor/dtype.h"

namespace sovai::model {

namespace llama_internal {

// A matrix w[rows, cols] in its storage format; `ref` is what the kernels read.
struct Matrix {
  kernels::WeightRef ref;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> q8_0;
  std::unique_ptr<kernels::Nf4Quantized> nf4;  // heap: its View() points into it
  std::unique_ptr<Parameter> param;            // kTrainable

  base::Status Store(std::vector<float> values, std::string name, int64_t rows, int64_t cols,
                     kernels::WeightRef::Format format, bool trainable) {
    ref = kernels::WeightRef{};
    ref.rows = rows;
    ref.cols = cols;
    if (trainable) {
      param = std::make_unique<Parameter>();
      param->name = std::move(name);
      param->shape = {static_cast<uint64_t>(rows), static_cast<uint64_t>(cols)};
      param->value = std::move(values);
      param->grad.assign(param->value.size(), 0.0f);
      ref.format = kernels::WeightRef::Format::kF32;
      ref.data = param->value.data();
      return base::Status();
    }
    ref.format = format;
    switch (format) {
      case kernels::WeightRef::Format::kF32:
        f32 = std::move(values);
        ref.data = f32.data();
        break;
      case kernels::WeightRef::Format::kBF16:
        bf16.resize(values.size());
        tensor::ConvertElements(tensor::DType::kF32, values.data(), tensor::DType::kBF16,
                                bf16.data(), values.size());
        ref.data = bf16.data();
        break;
      case kernels::WeightRef::Format::kNF4: {
        auto q = kernels::QuantizeNf4(values);
        if (!q.ok()) {
          return base::Status(q.status().code(),
                              "quantizing '" + name + "': " + q.status().message());
        }
        nf4 = std::make_unique<kernels::Nf4Quantized>(std::move(*q));
        ref.nf4 = nf4->View();
        break;
      }
      case kernels::WeightRef::Format::kQ8_0: {
        if (cols % static_cast<int64_t>(kernels::kQ8_0BlockValues) != 0) {
          return base::Status(base::StatusCode::kInvalidArgument,
                              "'" + name + "' has rows of " + std::to_string(cols) +
                                  " values, not whole Q8_0 blocks of 32");
        }
        const size_t row_bytes = kernels::Q8_0Bytes(static_cast<size_t>(cols));
        q8_0.resize(row_bytes * static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
          kernels::QuantizeRowQ8_0({values.data() + r * cols, static_cast<size_t>(cols)},
                                   {q8_0.data() + r * row_bytes, row_bytes});
        }
        ref.data = q8_0.data();
        break;
      }
    }
    return base::Status();
  }

  base::Result<std::vector<float>> ToF32() const {
    size_t n = static_cast<size_t>(ref.rows * ref.cols);
    std::vector<float> out(n);
    switch (ref.format) {
      case kernels::WeightRef::Format::kF32:
        std::memcpy(out.data(), ref.data, n * sizeof(float));
        break;
      case kernels::WeightRef::Format::kBF16:
        tensor::ConvertElements(tensor::DType::kBF16, ref.data, tensor::DType::kF32, out.data(), n);
        break;
      case kernels::WeightRef::Format::kNF4:
        kernels::DequantizeNf4(ref.nf4, static_cast<int64_t>(n), out.data());
        break;
      case kernels::WeightRef::Format::kQ8_0:
        kernels::DequantizeRowQ8_0({static_cast<const uint8_t*>(ref.data), q8_0.size()}, out);
        break;
    }
    return out;
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

struct LlamaModel::Layer {
  Vector input_norm, post_norm, q_norm, k_norm;
  Matrix proj[kProjectionCount];
  Vector bias[kProjectionCount];
  std::unique_ptr<Parameter> lora_a[kProjectionCount];
  std::unique_ptr<Parameter> lora_b[kProjectionCount];
  int64_t window = 0;  // 0: full attention
};

struct LlamaModel::Globals {
  Matrix embed;
  Vector final_norm;
  Matrix head;  // unused when tied
};

// What the backward pass needs from the forward pass, and its own scratch.
struct LlamaModel::Activations {
  int64_t n = 0, batch = 0, seq_len = 0;
  struct PerLayer {
    std::vector<float> x_in, ln1, rstd1, q_lin, k_lin, rstd_q, rstd_k, q, k, v, att, lse, x_mid,
        ln2, rstd2, gate, up, hidden;
    std::vector<float> xa[kProjectionCount];
  };
  std::vector<PerLayer> layers;
  std::vector<float> x_out, lnf, rstdf;
  std::vector<int32_t> positions, segments, targets;
  // Backward scratch.
  std::vector<float> dx, dln, dq, dk, dv, dq_lin, dk_lin, datt, dgate, dup, dhidden;
};

// Buffers of an inference step, grown to the largest step seen and reused.
struct LlamaModel::InferScratch {
  std::vector<int32_t> tokens, positions, seq_of, slots, block_tables;  // [N], [S * max_blocks]
  std::vector<float> x, h, q, k, v, att, tmp, gate, up, hidden;         // [N, ...]
  std::vector<float> rstd, rstd_heads, xa;
  std::vector<float> last;  // [S', C] hidden states of the rows whose logits are wanted
};

}  // namespace sovai::model
