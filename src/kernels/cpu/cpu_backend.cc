// The cpu backend: backend.h's interface with OpenBLAS sgemm for every dense product, OpenMP
// threads over rows (or columns, where rows would make two threads add into one element) and
// loops written for the auto-vectorizer, compiled per CPU generation by SOVAI_CPU_CLONES.
// Attention lives in attention.cc, weight formats and linear layers in weights.cc, threads and
// scratch in context.cc; README.md describes the whole.
//
// Legend: N token positions, C channels, V vocabulary, H heads, D head size, I / O a linear
// layer's input / output features, R LoRA rank.
//
// Rounding: this file is compiled with -ffp-contract=off. Element-wise ops compute what the
// reference computes, in the same order where it is cheap (AdamW bit for bit, RMSNorm in double);
// reductions over long rows accumulate in f32 or double lanes in a different order than the
// reference's sequential double sums.
#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/log.h"
#include "kernels/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/context.h"
#include "kernels/cpu/inference.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/cpu/weights.h"
#include "tensor/dtype.h"

namespace sovai::kernels {
namespace {

using cpu::Context;
using cpu::ParallelRanges;

// Element-wise work below this many elements per thread is not worth waking a thread for.
constexpr int64_t kMinElementsPerThread = int64_t{1} << 14;
// Rows of an op over [N, C] per thread, at least (rows are usually >= 512 floats).
constexpr int64_t kMinRowsPerThread = 16;
// Column reductions (dweight, dbias, embedding scatter) run over blocks of this many columns, with
// the block's accumulators on the stack.
constexpr int64_t kColumnBlock = 64;

// --- element-wise kernels (each compiled per CPU generation) ------------------------------------

SOVAI_CPU_CLONES void SwiGluForwardRange(float* out, const float* gate, const float* up,
                                         int64_t count) {
#pragma omp simd
  for (int64_t e = 0; e < count; ++e) {
    const float sigmoid = 1.0f / (1.0f + cpu::ExpF(-gate[e]));
    out[e] = gate[e] * sigmoid * up[e];
  }
}

SOVAI_CPU_CLONES void SwiGluBackwardRange(float* dgate, float* dup, const float* dout,
                                          const float* gate, const float* up, int64_t count) {
#pragma omp simd
  for (int64_t e = 0; e < count; ++e) {
    const float sigmoid = 1.0f / (1.0f + cpu::ExpF(-gate[e]));
    dgate[e] += dout[e] * up[e] * sigmoid * (1.0f + gate[e] * (1.0f - sigmoid));
    dup[e] += dout[e] * gate[e] * sigmoid;
  }
}

SOVAI_CPU_CLONES void AddRange(float* out, const float* a, const float* b, int64_t count) {
#pragma omp simd
  for (int64_t e = 0; e < count; ++e) out[e] = a[e] + b[e];
}

SOVAI_CPU_CLONES void ScaleRange(float* x, float factor, int64_t count) {
#pragma omp simd
  for (int64_t e = 0; e < count; ++e) x[e] *= factor;
}

SOVAI_CPU_CLONES double SumOfSquaresRange(const float* x, int64_t count) {
  return cpu::SumInDouble(count, [x](int64_t e) { return static_cast<double>(x[e]) * x[e]; });
}

// torch.optim.AdamW's update exactly as reference/ops.h writes it (the same double operations in
// the same order, so the result is bit-identical).
struct AdamWScalars {
  double beta1, beta2, decay, step_size, bias_correction2_sqrt, eps;
};

SOVAI_CPU_CLONES void AdamWRange(float* param, const float* grad, float* m, float* v, int64_t count,
                                 const AdamWScalars& s) {
  const double beta1 = s.beta1;
  const double beta2 = s.beta2;
  const double decay = s.decay;
  const double step_size = s.step_size;
  const double bias_correction2_sqrt = s.bias_correction2_sqrt;
  const double eps = s.eps;
#pragma omp simd
  for (int64_t e = 0; e < count; ++e) {
    const float decayed = static_cast<float>(param[e] * decay);
    const float m_new = static_cast<float>(beta1 * m[e] + (1 - beta1) * grad[e]);
    const float v_new =
        static_cast<float>(beta2 * v[e] + (1 - beta2) * static_cast<double>(grad[e]) * grad[e]);
    m[e] = m_new;
    v[e] = v_new;
    const double denom = std::sqrt(static_cast<double>(v_new)) / bias_correction2_sqrt + eps;
    param[e] = static_cast<float>(decayed - step_size * m_new / denom);
  }
}

// Rows [begin, end) of RMSNorm, in double as the reference.
SOVAI_CPU_CLONES void RmsNormForwardRows(float* out, float* rstd, const float* x,
                                         const float* weight, int64_t begin, int64_t end, int64_t c,
                                         float eps) {
  for (int64_t r = begin; r < end; ++r) {
    const float* row = x + r * c;
    const double sum_sq =
        cpu::SumInDouble(c, [row](int64_t j) { return static_cast<double>(row[j]) * row[j]; });
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(c) + eps);
    rstd[r] = static_cast<float>(inv_rms);
    float* out_row = out + r * c;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      out_row[j] = static_cast<float>(static_cast<double>(row[j]) * inv_rms * weight[j]);
    }
  }
}

SOVAI_CPU_CLONES void RmsNormBackwardRows(float* dx, const float* dout, const float* x,
                                          const float* weight, const float* rstd, int64_t begin,
                                          int64_t end, int64_t c) {
  for (int64_t r = begin; r < end; ++r) {
    const float* dout_row = dout + r * c;
    const float* x_row = x + r * c;
    const double rs = rstd[r];
    const double dot = cpu::SumInDouble(c, [&](int64_t j) {  // sum_c dout * weight * x
      return static_cast<double>(dout_row[j]) * weight[j] * x_row[j];
    });
    const double coefficient = rs * rs * rs / static_cast<double>(c) * dot;
    float* dx_row = dx + r * c;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      dx_row[j] += static_cast<float>(rs * weight[j] * dout_row[j] - x_row[j] * coefficient);
    }
  }
}

// dweight[j0, j1) += sum over rows of dout * x * rstd (j1 - j0 <= kColumnBlock).
SOVAI_CPU_CLONES void RmsNormWeightColumns(float* dweight, const float* dout, const float* x,
                                           const float* rstd, int64_t n, int64_t c, int64_t j0,
                                           int64_t j1) {
  double acc[kColumnBlock] = {};
  const int64_t width = j1 - j0;
  for (int64_t r = 0; r < n; ++r) {
    const float* dout_row = dout + r * c + j0;
    const float* x_row = x + r * c + j0;
    const double rs = rstd[r];
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) acc[j] += static_cast<double>(dout_row[j]) * x_row[j] * rs;
  }
  for (int64_t j = 0; j < width; ++j) dweight[j0 + j] += static_cast<float>(acc[j]);
}

// dbias[j0, j1) += column sums of dout[N, O] (j1 - j0 <= kColumnBlock).
SOVAI_CPU_CLONES void ColumnSums(float* dbias, const float* dout, int64_t n, int64_t out,
                                 int64_t j0, int64_t j1) {
  double acc[kColumnBlock] = {};
  const int64_t width = j1 - j0;
  for (int64_t r = 0; r < n; ++r) {
    const float* row = dout + r * out + j0;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) acc[j] += row[j];
  }
  for (int64_t j = 0; j < width; ++j) dbias[j0 + j] += static_cast<float>(acc[j]);
}

// Rotates rows [begin, end) of x[N, H, D] by each row's angles; `inverse` rotates by the opposite
// angle and adds into out (the backward pass). cos_sin is scratch for 2 * D/2 floats.
SOVAI_CPU_CLONES void RopeRows(float* out, const float* x, const int32_t* positions,
                               const float* inv_freq, int64_t begin, int64_t end, int64_t heads,
                               int64_t head_dim, bool inverse, float* cos_sin) {
  const int64_t half = head_dim / 2;
  float* cos = cos_sin;
  float* sin = cos_sin + half;
  for (int64_t r = begin; r < end; ++r) {
    // The angle is the f32 product, as Hugging Face computes it; cosf and sinf are the
    // reference's own calls, so the rotation matrices are bit-identical.
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[r]) * inv_freq[i];
      cos[i] = std::cos(angle);
      sin[i] = std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = (r * heads + h) * head_dim;
      const float* x1 = x + base;
      const float* x2 = x + base + half;
      float* o1 = out + base;
      float* o2 = out + base + half;
      if (!inverse) {
        // out may equal x: iteration i reads and writes only elements i and i + D/2.
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = x1[i];
          const float b = x2[i];
          o1[i] = a * cos[i] - b * sin[i];
          o2[i] = b * cos[i] + a * sin[i];
        }
      } else {
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = x1[i];
          const float b = x2[i];
          o1[i] += a * cos[i] + b * sin[i];
          o2[i] += b * cos[i] - a * sin[i];
        }
      }
    }
  }
}

// One row of cross-entropy: z[V] holds the logits on entry. Returns logsumexp(z) - z[target];
// with backward, leaves dlogits = grad_scale * (softmax(z) - onehot(target)) in z.
SOVAI_CPU_CLONES double CrossEntropyRow(float* z, int64_t vocab, int32_t target, float grad_scale,
                                        bool backward) {
  float max_logit = z[0];
#pragma omp simd reduction(max : max_logit)
  for (int64_t j = 0; j < vocab; ++j) max_logit = z[j] > max_logit ? z[j] : max_logit;
  const double target_logit = z[target];
  // The sum of exp in f32 lanes over blocks of kSumBlock, the blocks added in double: each term
  // is at most 1, so a block's f32 sum is good to ~1e-6 relative whatever the vocabulary size.
  constexpr int64_t kSumBlock = 1024;
  double sum = 0;
  for (int64_t j0 = 0; j0 < vocab; j0 += kSumBlock) {
    const int64_t j1 = std::min(vocab, j0 + kSumBlock);
    float block = 0;
    if (backward) {
#pragma omp simd reduction(+ : block)
      for (int64_t j = j0; j < j1; ++j) {
        z[j] = cpu::ExpF(z[j] - max_logit);
        block += z[j];
      }
    } else {
#pragma omp simd reduction(+ : block)
      for (int64_t j = j0; j < j1; ++j) block += cpu::ExpF(z[j] - max_logit);
    }
    sum += block;
  }
  if (backward) {
    const float factor = static_cast<float>(grad_scale / sum);
#pragma omp simd
    for (int64_t j = 0; j < vocab; ++j) z[j] *= factor;
    z[target] -= grad_scale;
  }
  return max_logit + std::log(sum) - target_logit;
}

// splitmix64's finalizer, as backend.cc's DropoutKeep computes it (backend.h spells the hash out
// so that every backend can compute it itself): inline here so that the mask loops vectorize
// instead of calling DropoutKeep per element. The consistency test checks the masks agree.
inline uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// out[e] = x[e] * (kept factor, or 0 if dropped) for the flat indices e in [begin, end), with
// x and out pointing at element `begin`. Without `scale_into`, out = dropout(x); with it,
// out += dropout(x) (the backward pass's mask applied to a product).
SOVAI_CPU_CLONES void ApplyDropout(float* out, const float* x, int64_t begin, int64_t end,
                                   uint64_t seed, float probability, bool accumulate) {
  const float kept = 1.0f / (1.0f - probability);
  const int64_t count = end - begin;
#pragma omp simd
  for (int64_t e = 0; e < count; ++e) {
    const uint64_t h = Mix(seed ^ Mix(static_cast<uint64_t>(begin + e)));
    const float u = static_cast<float>(h >> 40) * 0x1p-24f;
    const float factor = u >= probability ? kept : 0.0f;
    out[e] = accumulate ? out[e] + factor * x[e] : x[e] * factor;
  }
}

class CpuBackend final : public HostMemoryBackend {
 public:
  CpuBackend(int threads, const cpu::CpuOptions& options)
      : context_(threads, options.isa, options.q8_0_activations) {}

  std::string_view name() const override { return "cpu"; }
  bool Supports(Op op) const override { return op != Op::kCount; }

  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override {
    cpu::Sgemm(context_, {.trans_a = trans_a,
                          .trans_b = trans_b,
                          .m = m,
                          .n = n,
                          .k = k,
                          .alpha = alpha,
                          .a = a,
                          .lda = trans_a ? m : k,
                          .b = b,
                          .ldb = trans_b ? k : n,
                          .beta = beta,
                          .c = c,
                          .ldc = n});
  }

  void LinearForward(float* out, const float* x, const WeightRef& w, const float* bias,
                     int64_t n) override {
    cpu::LinearForward(context_, out, x, w, bias, n);
  }
  void LinearBackwardInput(float* dx, const float* dout, const WeightRef& w, int64_t n) override {
    cpu::LinearBackwardInput(context_, dx, dout, w, n);
  }
  void LinearBackwardBias(float* dbias, const float* dout, int64_t n, int64_t out) override {
    ParallelRanges(
        context_, out, kColumnBlock,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t j0 = begin; j0 < end; j0 += kColumnBlock) {
            ColumnSums(dbias, dout, n, out, j0, std::min(end, j0 + kColumnBlock));
          }
        },
        kColumnBlock);
  }

  void EmbeddingForward(float* out, const int32_t* ids, const WeightRef& table,
                        int64_t n) override {
    const int64_t c = table.cols;
    ParallelRanges(context_, n, kMinRowsPerThread, [&](int64_t begin, int64_t end, int) {
      for (int64_t r = begin; r < end; ++r) {
        cpu::DequantizeRange(table, ids[r] * c, (ids[r] + 1) * c, out + r * c);
      }
    });
  }
  void KvCacheWrite(float* k_cache, float* v_cache, const float* k, const float* v,
                    const int32_t* slots, int64_t n, int64_t kv_heads, int64_t head_dim) override {
    cpu::KvCacheWrite(context_, k_cache, v_cache, k, v, slots, n, kv_heads * head_dim);
  }
  void PagedAttention(float* out, const float* q, const float* k_cache, const float* v_cache,
                      const int32_t* seq_of, const int32_t* positions, const int32_t* block_tables,
                      int64_t n, const PagedAttentionShape& shape) override {
    cpu::PagedAttention(context_, out, q, k_cache, v_cache, seq_of, positions, block_tables, n,
                        shape);
  }

  void EmbeddingBackward(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                         int64_t vocab, int64_t c) override {
    // Threads own column ranges, so a repeated id never has two threads adding into one row.
    ParallelRanges(
        context_, c, kColumnBlock,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t r = 0; r < n; ++r) {
            float* dst = dtable + ids[r] * c;
            const float* src = dout + r * c;
#pragma omp simd
            for (int64_t j = begin; j < end; ++j) dst[j] += src[j];
          }
        },
        16);
  }

  void RmsNormForward(float* out, float* rstd, const float* x, const float* weight, int64_t n,
                      int64_t c, float eps) override {
    ParallelRanges(context_, n, kMinRowsPerThread, [&](int64_t begin, int64_t end, int) {
      RmsNormForwardRows(out, rstd, x, weight, begin, end, c, eps);
    });
  }
  void RmsNormBackward(float* dx, float* dweight, const float* dout, const float* x,
                       const float* weight, const float* rstd, int64_t n, int64_t c) override {
    ParallelRanges(context_, n, kMinRowsPerThread, [&](int64_t begin, int64_t end, int) {
      RmsNormBackwardRows(dx, dout, x, weight, rstd, begin, end, c);
    });
    if (dweight == nullptr) return;
    ParallelRanges(
        context_, c, kColumnBlock,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t j0 = begin; j0 < end; j0 += kColumnBlock) {
            RmsNormWeightColumns(dweight, dout, x, rstd, n, c, j0,
                                 std::min(end, j0 + kColumnBlock));
          }
        },
        kColumnBlock);
  }

  void RopeForward(float* out, const float* x, const int32_t* positions, const float* inv_freq,
                   int64_t n, int64_t heads, int64_t head_dim) override {
    Rope(out, x, positions, inv_freq, n, heads, head_dim, /*inverse=*/false);
  }
  void RopeBackward(float* dx, const float* dout, const int32_t* positions, const float* inv_freq,
                    int64_t n, int64_t heads, int64_t head_dim) override {
    Rope(dx, dout, positions, inv_freq, n, heads, head_dim, /*inverse=*/true);
  }

  void AttentionForward(float* out, float* lse, const float* q, const float* k, const float* v,
                        const int32_t* segment, const AttentionShape& shape) override {
    cpu::AttentionForward(context_, out, lse, q, k, v, segment, shape);
  }
  void AttentionBackward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                         const float* lse, const float* q, const float* k, const float* v,
                         const int32_t* segment, const AttentionShape& shape) override {
    cpu::AttentionBackward(context_, dq, dk, dv, dout, out, lse, q, k, v, segment, shape);
  }

  void SwiGluForward(float* out, const float* gate, const float* up, int64_t count) override {
    ParallelRanges(context_, count, kMinElementsPerThread, [&](int64_t begin, int64_t end, int) {
      SwiGluForwardRange(out + begin, gate + begin, up + begin, end - begin);
    });
  }
  void SwiGluBackward(float* dgate, float* dup, const float* dout, const float* gate,
                      const float* up, int64_t count) override {
    ParallelRanges(context_, count, kMinElementsPerThread, [&](int64_t begin, int64_t end, int) {
      SwiGluBackwardRange(dgate + begin, dup + begin, dout + begin, gate + begin, up + begin,
                          end - begin);
    });
  }
  void Add(float* out, const float* a, const float* b, int64_t count) override {
    ParallelRanges(context_, count, kMinElementsPerThread, [&](int64_t begin, int64_t end, int) {
      AddRange(out + begin, a + begin, b + begin, end - begin);
    });
  }

  double CrossEntropy(float* dhidden, float* dweight, const float* hidden, const WeightRef& weight,
                      const int32_t* targets, int64_t n, float grad_scale,
                      int64_t chunk_rows) override {
    const int64_t c = weight.cols;
    const int64_t vocab = weight.rows;
    const bool backward = dhidden != nullptr;
    chunk_rows = std::max<int64_t>(1, std::min(chunk_rows, n));
    float* logits = context_.Shared(Context::Slot::kB, static_cast<size_t>(chunk_rows * vocab));
    double loss_sum = 0;
    for (int64_t first = 0; first < n; first += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, n - first);
      cpu::LinearForward(context_, logits, hidden + first * c, weight, nullptr, rows);  // [rows, V]
      double partial[cpu::kMaxThreads] = {};
      ParallelRanges(context_, rows, 1, [&](int64_t begin, int64_t end, int thread) {
        for (int64_t r = begin; r < end; ++r) {
          float* z = logits + r * vocab;
          const int32_t target = targets[first + r];
          if (target < 0) {  // ignored: no loss, no gradient
            if (backward) std::fill(z, z + vocab, 0.0f);
            continue;
          }
          partial[thread] += CrossEntropyRow(z, vocab, target, grad_scale, backward);
        }
      });
      for (double p : partial) loss_sum += p;
      if (!backward) continue;
      cpu::LinearBackwardInput(context_, dhidden + first * c, logits, weight, rows);
      if (dweight != nullptr) {
        cpu::Sgemm(context_, {.trans_a = true,
                              .m = vocab,
                              .n = c,
                              .k = rows,
                              .a = logits,
                              .lda = vocab,
                              .b = hidden + first * c,
                              .ldb = c,
                              .beta = 1,
                              .c = dweight,
                              .ldc = c});
      }
    }
    return loss_sum;
  }

  void LoraForward(float* y, float* xa, const float* x, const float* a, const float* b, int64_t n,
                   int64_t in, int64_t out, int64_t rank, float scale,
                   const Dropout& dropout) override {
    const float* dropped = Dropped(x, n, in, dropout);
    cpu::Sgemm(context_, {.trans_b = true,
                          .m = n,
                          .n = rank,
                          .k = in,
                          .a = dropped,
                          .lda = in,
                          .b = a,
                          .ldb = in,
                          .beta = 0,
                          .c = xa,
                          .ldc = rank});
    cpu::Sgemm(context_, {.trans_b = true,
                          .m = n,
                          .n = out,
                          .k = rank,
                          .alpha = scale,
                          .a = xa,
                          .lda = rank,
                          .b = b,
                          .ldb = rank,
                          .beta = 1,
                          .c = y,
                          .ldc = out});
  }
  void LoraBackward(float* dx, float* da, float* db, const float* dy, const float* x,
                    const float* xa, const float* a, const float* b, int64_t n, int64_t in,
                    int64_t out, int64_t rank, float scale, const Dropout& dropout) override {
    // dxa[N, R] = scale * dy @ b
    float* dxa = context_.Shared(Context::Slot::kB, static_cast<size_t>(n * rank));
    cpu::Sgemm(context_, {.m = n,
                          .n = rank,
                          .k = out,
                          .alpha = scale,
                          .a = dy,
                          .lda = out,
                          .b = b,
                          .ldb = rank,
                          .beta = 0,
                          .c = dxa,
                          .ldc = rank});
    // db[O, R] += scale * dy^T @ xa
    cpu::Sgemm(context_, {.trans_a = true,
                          .m = out,
                          .n = rank,
                          .k = n,
                          .alpha = scale,
                          .a = dy,
                          .lda = out,
                          .b = xa,
                          .ldb = rank,
                          .beta = 1,
                          .c = db,
                          .ldc = rank});
    // da[R, I] += dxa^T @ dropout(x)
    const float* dropped = Dropped(x, n, in, dropout);
    cpu::Sgemm(context_, {.trans_a = true,
                          .m = rank,
                          .n = in,
                          .k = n,
                          .a = dxa,
                          .lda = rank,
                          .b = dropped,
                          .ldb = in,
                          .beta = 1,
                          .c = da,
                          .ldc = in});
    if (dx == nullptr) return;
    if (dropout.probability <= 0) {
      cpu::Sgemm(context_, {.m = n,
                            .n = in,
                            .k = rank,
                            .a = dxa,
                            .lda = rank,
                            .b = a,
                            .ldb = in,
                            .beta = 1,
                            .c = dx,
                            .ldc = in});
      return;
    }
    // dx[N, I] += dropout'(dxa @ a): the product first, then the mask.
    float* product = context_.Shared(Context::Slot::kC, static_cast<size_t>(n * in));
    cpu::Sgemm(context_, {.m = n,
                          .n = in,
                          .k = rank,
                          .a = dxa,
                          .lda = rank,
                          .b = a,
                          .ldb = in,
                          .beta = 0,
                          .c = product,
                          .ldc = in});
    ParallelRanges(context_, n, kMinRowsPerThread, [&](int64_t begin, int64_t end, int) {
      ApplyDropout(dx + begin * in, product + begin * in, begin * in, end * in, dropout.seed,
                   dropout.probability, /*accumulate=*/true);
    });
  }

  void Nf4Dequantize(float* out, const Nf4Weight& w, int64_t numel) override {
    const WeightRef ref{.format = WeightRef::Format::kNF4, .nf4 = w, .rows = 1, .cols = numel};
    ParallelRanges(
        context_, numel, kMinElementsPerThread,
        [&](int64_t begin, int64_t end, int) {
          cpu::DequantizeRange(ref, begin, end, out + begin);
        },
        Nf4Weight::kBlockSize);
  }

  void AdamWStep(float* param, const float* grad, float* m, float* v, int64_t count,
                 const AdamWParams& p) override {
    const double beta1 = p.beta1;
    const double beta2 = p.beta2;
    const double lr = p.learning_rate;
    const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(p.step));
    const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(p.step));
    const AdamWScalars scalars{.beta1 = beta1,
                               .beta2 = beta2,
                               .decay = 1 - lr * p.weight_decay,
                               .step_size = lr / bias_correction1,
                               .bias_correction2_sqrt = std::sqrt(bias_correction2),
                               .eps = p.eps};
    ParallelRanges(context_, count, kMinElementsPerThread, [&](int64_t begin, int64_t end, int) {
      AdamWRange(param + begin, grad + begin, m + begin, v + begin, end - begin, scalars);
    });
  }
  double SumOfSquares(const float* grad, int64_t count) override {
    double partial[cpu::kMaxThreads] = {};
    ParallelRanges(context_, count, kMinElementsPerThread,
                   [&](int64_t begin, int64_t end, int thread) {
                     partial[thread] = SumOfSquaresRange(grad + begin, end - begin);
                   });
    double sum = 0;
    for (double p : partial) sum += p;
    return sum;
  }
  void Scale(float* x, float factor, int64_t count) override {
    ParallelRanges(context_, count, kMinElementsPerThread, [&](int64_t begin, int64_t end, int) {
      ScaleRange(x + begin, factor, end - begin);
    });
  }

 private:
  void Rope(float* out, const float* x, const int32_t* positions, const float* inv_freq, int64_t n,
            int64_t heads, int64_t head_dim, bool inverse) {
    context_.ReserveThreadScratch(static_cast<size_t>(head_dim));
    ParallelRanges(context_, n, kMinRowsPerThread, [&](int64_t begin, int64_t end, int thread) {
      RopeRows(out, x, positions, inv_freq, begin, end, heads, head_dim, inverse,
               context_.ThreadScratch(thread));
    });
  }

  // x[N, I] with LoRA dropout applied (x itself without dropout); valid until the next call.
  const float* Dropped(const float* x, int64_t n, int64_t in, const Dropout& dropout) {
    if (dropout.probability <= 0) return x;
    float* dropped = context_.Shared(Context::Slot::kA, static_cast<size_t>(n * in));
    ParallelRanges(context_, n, kMinRowsPerThread, [&](int64_t begin, int64_t end, int) {
      ApplyDropout(dropped + begin * in, x + begin * in, begin * in, end * in, dropout.seed,
                   dropout.probability, /*accumulate=*/false);
    });
    return dropped;
  }

  Context context_;
};

}  // namespace

std::unique_ptr<Backend> NewCpuBackend(int threads) {
  return std::make_unique<CpuBackend>(
      threads, cpu::CpuOptions{.q8_0_activations = cpu::Q8_0ActivationsFromEnvironment()});
}

std::unique_ptr<Backend> cpu::NewCpuBackendWithIsa(int threads, Isa isa) {
  return std::make_unique<CpuBackend>(threads, CpuOptions{.isa = isa});
}

std::unique_ptr<Backend> cpu::NewCpuBackendWithOptions(int threads, const CpuOptions& options) {
  return std::make_unique<CpuBackend>(threads, options);
}

cpu::Q8_0Activations cpu::Q8_0ActivationsFromEnvironment() {
  const char* value = std::getenv("SOVAI_Q8_0_ACTIVATIONS");
  if (value == nullptr || std::strcmp(value, "int8") == 0) return Q8_0Activations::kInt8;
  if (std::strcmp(value, "f32") == 0) return Q8_0Activations::kF32;
  static std::once_flag warned;
  std::call_once(warned, [value] {
    SOVAI_LOG(WARNING).With("SOVAI_Q8_0_ACTIVATIONS", value)
        << "SOVAI_Q8_0_ACTIVATIONS must be int8 or f32; using int8";
  });
  return Q8_0Activations::kInt8;
}

}  // namespace sovai::kernels
