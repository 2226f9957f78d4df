// The f32 kernels of the CUDA backend (cuda_backend_kernels.h). Written for exactness first: the
// element-wise ones are grid-stride loops over backend_math.h's functions, the row reductions one
// block per row, and attention one thread per query row (or per key row for dk/dv), which is
// deterministic and needs no atomics but is far from a flash-attention kernel's speed.
//
// Shape letters as in backend.h: N positions, C channels, V vocabulary, H heads, D head size.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/backend_math.h"
#include "kernels/cuda/cuda_backend_kernels.h"
#include "kernels/nf4.h"

namespace sovai::kernels::cuda::internal {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops cover any count with at most this many blocks.
constexpr int64_t kMaxBlocks = 65535;

int Blocks(int64_t count) {
  return static_cast<int>(std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

__device__ __forceinline__ int64_t Thread() {
  return blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
}
__device__ __forceinline__ int64_t Stride() { return int64_t{gridDim.x} * blockDim.x; }

// The sum of `value` over the block (kThreads threads), returned to every thread.
template <typename T>
__device__ T BlockSum(T value) {
  __shared__ T partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) partial[warp] = value;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  __syncthreads();  // partial may be reused by the next call
  return total;
}

__device__ float BlockMax(float value) {
  __shared__ float partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) partial[warp] = value;
  __syncthreads();
  float total = -INFINITY;
  for (int w = 0; w < kThreads / 32; ++w) total = fmaxf(total, partial[w]);
  __syncthreads();
  return total;
}

// --- weights --------------------------------------------------------------------------------

__global__ void ExpandBf16Kernel(float* out, const uint16_t* in, int64_t count) {
  for (int64_t e = Thread(); e < count; e += Stride()) out[e] = math::Bf16ToFloat(in[e]);
}

__global__ void ExpandQ8_0Kernel(float* out, const uint8_t* blocks, int64_t count) {
  for (int64_t e = Thread(); e < count; e += Stride()) out[e] = math::Q8_0Value(blocks, e);
}

struct Nf4Table {
  float values[16];
};

// The _rn intrinsics are never contracted into a fused multiply-add, so every product and sum is
// the separate f32 operation backend.h's formula names (bit-identical to DequantizeNf4).
__global__ void ExpandNf4Kernel(float* out, const uint8_t* codes, const uint8_t* absmax_codes,
                                const float* absmax_scales, const float* absmax_map,
                                float absmax_offset, Nf4Table table, int64_t numel) {
  for (int64_t e = Thread(); e < numel; e += Stride()) {
    const int64_t block = e / Nf4Weight::kBlockSize;
    const float absmax = __fadd_rn(__fmul_rn(absmax_map[absmax_codes[block]],
                                             absmax_scales[block / Nf4Weight::kAbsmaxBlockSize]),
                                   absmax_offset);
    out[e] = __fmul_rn(table.values[math::Nf4Code(codes, e)], absmax);
  }
}

__global__ void AddBiasRowsKernel(float* out, const float* bias, int64_t n, int64_t o) {
  for (int64_t e = Thread(); e < n * o; e += Stride()) out[e] += bias[e % o];
}

__global__ void SumRowsIntoKernel(float* dbias, const float* dout, int64_t n, int64_t o) {
  for (int64_t col = Thread(); col < o; col += Stride()) {
    double sum = 0;
    for (int64_t r = 0; r < n; ++r) sum += dout[r * o + col];
    dbias[col] += static_cast<float>(sum);
  }
}

// --- embedding ------------------------------------------------------------------------------

__global__ void EmbeddingKernel(float* out, const int32_t* ids, const void* table, int format,
                                int64_t n, int64_t c) {
  for (int64_t e = Thread(); e < n * c; e += Stride()) {
    const int64_t row = ids[e / c];
    const int64_t index = row * c + e % c;
    float value;
    if (format == static_cast<int>(WeightRef::Format::kF32)) {
      value = static_cast<const float*>(table)[index];
    } else if (format == static_cast<int>(WeightRef::Format::kBF16)) {
      value = math::Bf16ToFloat(static_cast<const uint16_t*>(table)[index]);
    } else {
      value = math::Q8_0Value(static_cast<const uint8_t*>(table), index);
    }
    out[e] = value;
  }
}

__global__ void EmbeddingScatterKernel(float* dtable, const float* dout, const int32_t* ids,
                                       int64_t n, int64_t c) {
  for (int64_t e = Thread(); e < n * c; e += Stride()) {
    atomicAdd(&dtable[int64_t{ids[e / c]} * c + e % c], dout[e]);
  }
}

// --- RMSNorm (one block per row) -------------------------------------------------------------

__global__ void RmsNormForwardKernel(float* out, float* rstd, const float* x, const float* weight,
                                     int64_t c, float eps) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * c;
  float sum = 0;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) sum += xr[i] * xr[i];
  sum = BlockSum(sum);
  const float r = 1.0f / sqrtf(sum / static_cast<float>(c) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) out[row * c + i] = xr[i] * r * weight[i];
}

__global__ void RmsNormBackwardKernel(float* dx, const float* dout, const float* x,
                                      const float* weight, const float* rstd, int64_t c) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * c;
  const float* dr = dout + row * c;
  float dot = 0;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) dot += dr[i] * weight[i] * xr[i];
  dot = BlockSum(dot);
  const float r = rstd[row];
  const float k = r * r * r / static_cast<float>(c) * dot;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    dx[row * c + i] += r * weight[i] * dr[i] - xr[i] * k;
  }
}

__global__ void RmsNormWeightGradKernel(float* dweight, const float* dout, const float* x,
                                        const float* rstd, int64_t n, int64_t c) {
  for (int64_t col = Thread(); col < c; col += Stride()) {
    double sum = 0;
    for (int64_t r = 0; r < n; ++r) sum += dout[r * c + col] * x[r * c + col] * rstd[r];
    dweight[col] += static_cast<float>(sum);
  }
}

// --- RoPE -----------------------------------------------------------------------------------

__global__ void RopeKernel(float* out, const float* x, const int32_t* positions,
                           const float* inv_freq, int64_t n, int64_t heads, int64_t head_dim,
                           float sign) {
  const int64_t half = head_dim / 2;
  for (int64_t e = Thread(); e < n * heads * half; e += Stride()) {
    const int64_t i = e % half;
    const int64_t row_head = e / half;  // r * heads + h
    const int64_t base = row_head * head_dim;
    // The f32 product, not fused into anything, as Hugging Face computes the angle.
    const float angle = __fmul_rn(static_cast<float>(positions[row_head / heads]), inv_freq[i]);
    const math::Pair p =
        math::Rotate(x[base + i], x[base + half + i], cosf(angle), sinf(angle), sign);
    if (sign > 0) {
      out[base + i] = p.first;
      out[base + half + i] = p.second;
    } else {
      out[base + i] += p.first;
      out[base + half + i] += p.second;
    }
  }
}

// --- element-wise ---------------------------------------------------------------------------

__global__ void SwiGluForwardKernel(float* out, const float* gate, const float* up, int64_t count) {
  for (int64_t e = Thread(); e < count; e += Stride()) out[e] = math::SwiGlu(gate[e], up[e]);
}

__global__ void SwiGluBackwardKernel(float* dgate, float* dup, const float* dout, const float* gate,
                                     const float* up, int64_t count) {
  for (int64_t e = Thread(); e < count; e += Stride()) {
    dgate[e] += math::SwiGluGradGate(dout[e], gate[e], up[e]);
    dup[e] += math::SwiGluGradUp(dout[e], gate[e]);
  }
}

__global__ void AddKernel(float* out, const float* a, const float* b, int64_t count) {
  for (int64_t e = Thread(); e < count; e += Stride()) out[e] = a[e] + b[e];
}

__global__ void ScaleKernel(float* x, float factor, int64_t count) {
  for (int64_t e = Thread(); e < count; e += Stride()) x[e] *= factor;
}

__global__ void DropoutApplyKernel(float* out, const float* x, uint64_t seed, float p,
                                   int64_t count) {
  for (int64_t e = Thread(); e < count; e += Stride()) {
    out[e] = x[e] * math::DropoutFactor(seed, static_cast<uint64_t>(e), p);
  }
}

__global__ void DropoutAccumulateKernel(float* dx, const float* t, uint64_t seed, float p,
                                        int64_t count) {
  for (int64_t e = Thread(); e < count; e += Stride()) {
    dx[e] += t[e] * math::DropoutFactor(seed, static_cast<uint64_t>(e), p);
  }
}

// --- cross-entropy (one block per row) -------------------------------------------------------

__global__ void CrossEntropyRowsKernel(float* logits, double* loss, const int32_t* targets,
                                       int64_t vocab, bool backward, float grad_scale) {
  const int64_t row = blockIdx.x;
  float* l = logits + row * vocab;
  float max = -INFINITY;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) max = fmaxf(max, l[v]);
  max = BlockMax(max);
  float sum = 0;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) sum += expf(l[v] - max);
  sum = BlockSum(sum);
  const float lse = max + logf(sum);
  const int32_t target = targets[row];
  if (threadIdx.x == 0) {
    loss[row] = target < 0 ? 0.0 : static_cast<double>(lse) - static_cast<double>(l[target]);
  }
  __syncthreads();  // l[target] is read above before any thread overwrites it below
  if (!backward) return;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    l[v] = target < 0 ? 0.0f : grad_scale * (expf(l[v] - lse) - (v == target ? 1.0f : 0.0f));
  }
}

// --- attention (one thread per row) ---------------------------------------------------------

__device__ float Dot(const float* a, const float* b, int64_t d) {
  float sum = 0;
  for (int64_t i = 0; i < d; ++i) sum += a[i] * b[i];
  return sum;
}

__device__ __forceinline__ int32_t SegmentAt(const int32_t* segment, int64_t index) {
  return segment == nullptr ? 0 : segment[index];
}

// Thread (b, h, i): lse and out of query row i of head h in sequence b, in three passes over the
// visible keys (max, sum, weighted values), so no per-thread array of T scores is needed.
__global__ void AttentionForwardKernel(float* out, float* lse, const float* q, const float* k,
                                       const float* v, const int32_t* segment,
                                       Backend::AttentionShape s) {
  const int64_t T = s.seq_len, Hq = s.q_heads, Hkv = s.kv_heads, D = s.head_dim;
  for (int64_t t = Thread(); t < s.batch * Hq * T; t += Stride()) {
    const int64_t i = t % T, h = (t / T) % Hq, b = t / (T * Hq);
    const int64_t kvh = h / (Hq / Hkv);
    const float* qi = q + ((b * T + i) * Hq + h) * D;
    const int32_t seg_i = SegmentAt(segment, b * T + i);
    float max = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) {
      if (!math::AttentionVisible(i, j, s.window, seg_i, SegmentAt(segment, b * T + j))) continue;
      max = fmaxf(max, s.scale * Dot(qi, k + ((b * T + j) * Hkv + kvh) * D, D));
    }
    float sum = 0;
    float* oi = out + ((b * T + i) * Hq + h) * D;
    for (int64_t d = 0; d < D; ++d) oi[d] = 0;
    for (int64_t j = 0; j <= i; ++j) {
      if (!math::AttentionVisible(i, j, s.window, seg_i, SegmentAt(segment, b * T + j))) continue;
      const float p = expf(s.scale * Dot(qi, k + ((b * T + j) * Hkv + kvh) * D, D) - max);
      sum += p;
      const float* vj = v + ((b * T + j) * Hkv + kvh) * D;
      for (int64_t d = 0; d < D; ++d) oi[d] += p * vj[d];
    }
    for (int64_t d = 0; d < D; ++d) oi[d] /= sum;
    lse[(b * Hq + h) * T + i] = max + logf(sum);
  }
}

// Thread (b, h, i): delta = rowsum(dout * out), then dq_i += scale * sum_j p_ij (dp_ij - delta)
// k_j.
__global__ void AttentionBackwardQueryKernel(float* dq, float* delta, const float* dout,
                                             const float* out, const float* lse, const float* q,
                                             const float* k, const float* v, const int32_t* segment,
                                             Backend::AttentionShape s) {
  const int64_t T = s.seq_len, Hq = s.q_heads, Hkv = s.kv_heads, D = s.head_dim;
  for (int64_t t = Thread(); t < s.batch * Hq * T; t += Stride()) {
    const int64_t i = t % T, h = (t / T) % Hq, b = t / (T * Hq);
    const int64_t kvh = h / (Hq / Hkv);
    const int64_t row = ((b * T + i) * Hq + h) * D;
    const float di = Dot(dout + row, out + row, D);
    delta[(b * Hq + h) * T + i] = di;
    const float l = lse[(b * Hq + h) * T + i];
    const int32_t seg_i = SegmentAt(segment, b * T + i);
    for (int64_t j = 0; j <= i; ++j) {
      if (!math::AttentionVisible(i, j, s.window, seg_i, SegmentAt(segment, b * T + j))) continue;
      const float* kj = k + ((b * T + j) * Hkv + kvh) * D;
      const float p = expf(s.scale * Dot(q + row, kj, D) - l);
      const float ds = p * (Dot(dout + row, v + ((b * T + j) * Hkv + kvh) * D, D) - di);
      for (int64_t d = 0; d < D; ++d) dq[row + d] += s.scale * ds * kj[d];
    }
  }
}

// Thread (b, kvh, j): dk_j and dv_j summed over the query heads of the group and the rows i >= j
// that see j. Runs after AttentionBackwardQueryKernel (it reads delta).
__global__ void AttentionBackwardKeyKernel(float* dk, float* dv, const float* delta,
                                           const float* dout, const float* lse, const float* q,
                                           const float* k, const float* v, const int32_t* segment,
                                           Backend::AttentionShape s) {
  const int64_t T = s.seq_len, Hq = s.q_heads, Hkv = s.kv_heads, D = s.head_dim;
  const int64_t group = Hq / Hkv;
  for (int64_t t = Thread(); t < s.batch * Hkv * T; t += Stride()) {
    const int64_t j = t % T, kvh = (t / T) % Hkv, b = t / (T * Hkv);
    const int64_t key = ((b * T + j) * Hkv + kvh) * D;
    const int32_t seg_j = SegmentAt(segment, b * T + j);
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      for (int64_t i = j; i < T; ++i) {
        if (!math::AttentionVisible(i, j, s.window, SegmentAt(segment, b * T + i), seg_j)) continue;
        const int64_t row = ((b * T + i) * Hq + h) * D;
        const float p = expf(s.scale * Dot(q + row, k + key, D) - lse[(b * Hq + h) * T + i]);
        const float ds = p * (Dot(dout + row, v + key, D) - delta[(b * Hq + h) * T + i]);
        for (int64_t d = 0; d < D; ++d) {
          dv[key + d] += p * dout[row + d];
          dk[key + d] += s.scale * ds * q[row + d];
        }
      }
    }
  }
}

// --- paged KV cache -------------------------------------------------------------------------

__global__ void KvCacheWriteKernel(float* k_cache, float* v_cache, const float* k, const float* v,
                                   const int32_t* slots, int64_t n, int64_t width) {
  for (int64_t e = Thread(); e < n * width; e += Stride()) {
    const int64_t dst = int64_t{slots[e / width]} * width + e % width;
    k_cache[dst] = k[e];
    v_cache[dst] = v[e];
  }
}

// Thread (n, h): token n's query head h over its sequence's cached positions, three passes as in
// AttentionForwardKernel.
__global__ void PagedAttentionKernel(float* out, const float* q, const float* k_cache,
                                     const float* v_cache, const int32_t* seq_of,
                                     const int32_t* positions, const int32_t* block_tables,
                                     int64_t n, Backend::PagedAttentionShape s) {
  const int64_t Hq = s.q_heads, Hkv = s.kv_heads, D = s.head_dim, bs = s.block_size;
  for (int64_t t = Thread(); t < n * Hq; t += Stride()) {
    const int64_t h = t % Hq, token = t / Hq;
    const int64_t kvh = h / (Hq / Hkv);
    const int32_t* table = block_tables + int64_t{seq_of[token]} * s.max_blocks;
    const int64_t pos = positions[token];
    const int64_t first = s.window > 0 ? max(int64_t{0}, pos - s.window + 1) : 0;
    const float* qi = q + t * D;
    auto key_at = [&](int64_t j) {
      return ((int64_t{table[j / bs]} * bs + j % bs) * Hkv + kvh) * D;
    };
    float max = -INFINITY;
    for (int64_t j = first; j <= pos; ++j)
      max = fmaxf(max, s.scale * Dot(qi, k_cache + key_at(j), D));
    float* oi = out + t * D;
    for (int64_t d = 0; d < D; ++d) oi[d] = 0;
    float sum = 0;
    for (int64_t j = first; j <= pos; ++j) {
      const int64_t key = key_at(j);
      const float p = expf(s.scale * Dot(qi, k_cache + key, D) - max);
      sum += p;
      for (int64_t d = 0; d < D; ++d) oi[d] += p * v_cache[key + d];
    }
    for (int64_t d = 0; d < D; ++d) oi[d] /= sum;
  }
}

}  // namespace

// --- launchers ------------------------------------------------------------------------------

cudaError_t ExpandBf16(float* out, const uint16_t* in, int64_t count, cudaStream_t stream) {
  ExpandBf16Kernel<<<Blocks(count), kThreads, 0, stream>>>(out, in, count);
  return cudaGetLastError();
}

cudaError_t ExpandQ8_0(float* out, const uint8_t* blocks, int64_t count, cudaStream_t stream) {
  ExpandQ8_0Kernel<<<Blocks(count), kThreads, 0, stream>>>(out, blocks, count);
  return cudaGetLastError();
}

cudaError_t ExpandNf4(float* out, const Nf4Weight& w, int64_t numel, cudaStream_t stream) {
  Nf4Table table;
  for (int i = 0; i < 16; ++i) table.values[i] = kNf4Values[i];
  ExpandNf4Kernel<<<Blocks(numel), kThreads, 0, stream>>>(
      out, w.codes, w.absmax_codes, w.absmax_scales, w.absmax_map, w.absmax_offset, table, numel);
  return cudaGetLastError();
}

cudaError_t AddBiasRows(float* out, const float* bias, int64_t n, int64_t o, cudaStream_t stream) {
  AddBiasRowsKernel<<<Blocks(n * o), kThreads, 0, stream>>>(out, bias, n, o);
  return cudaGetLastError();
}

cudaError_t SumRowsInto(float* dbias, const float* dout, int64_t n, int64_t o,
                        cudaStream_t stream) {
  SumRowsIntoKernel<<<Blocks(o), kThreads, 0, stream>>>(dbias, dout, n, o);
  return cudaGetLastError();
}

cudaError_t Embedding(float* out, const int32_t* ids, const void* table, WeightRef::Format format,
                      int64_t n, int64_t c, cudaStream_t stream) {
  EmbeddingKernel<<<Blocks(n * c), kThreads, 0, stream>>>(out, ids, table, static_cast<int>(format),
                                                          n, c);
  return cudaGetLastError();
}

cudaError_t EmbeddingScatter(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                             int64_t c, cudaStream_t stream) {
  EmbeddingScatterKernel<<<Blocks(n * c), kThreads, 0, stream>>>(dtable, dout, ids, n, c);
  return cudaGetLastError();
}

cudaError_t RmsNormForward(float* out, float* rstd, const float* x, const float* weight, int64_t n,
                           int64_t c, float eps, cudaStream_t stream) {
  RmsNormForwardKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(out, rstd, x, weight, c,
                                                                          eps);
  return cudaGetLastError();
}

cudaError_t RmsNormBackward(float* dx, float* dweight, const float* dout, const float* x,
                            const float* weight, const float* rstd, int64_t n, int64_t c,
                            cudaStream_t stream) {
  RmsNormBackwardKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(dx, dout, x, weight,
                                                                           rstd, c);
  if (dweight != nullptr) {
    RmsNormWeightGradKernel<<<Blocks(c), kThreads, 0, stream>>>(dweight, dout, x, rstd, n, c);
  }
  return cudaGetLastError();
}

cudaError_t Rope(float* out, const float* x, const int32_t* positions, const float* inv_freq,
                 int64_t n, int64_t heads, int64_t head_dim, float sign, cudaStream_t stream) {
  RopeKernel<<<Blocks(n * heads * (head_dim / 2)), kThreads, 0, stream>>>(
      out, x, positions, inv_freq, n, heads, head_dim, sign);
  return cudaGetLastError();
}

cudaError_t SwiGluForward(float* out, const float* gate, const float* up, int64_t count,
                          cudaStream_t stream) {
  SwiGluForwardKernel<<<Blocks(count), kThreads, 0, stream>>>(out, gate, up, count);
  return cudaGetLastError();
}

cudaError_t SwiGluBackward(float* dgate, float* dup, const float* dout, const float* gate,
                           const float* up, int64_t count, cudaStream_t stream) {
  SwiGluBackwardKernel<<<Blocks(count), kThreads, 0, stream>>>(dgate, dup, dout, gate, up, count);
  return cudaGetLastError();
}

cudaError_t Add(float* out, const float* a, const float* b, int64_t count, cudaStream_t stream) {
  AddKernel<<<Blocks(count), kThreads, 0, stream>>>(out, a, b, count);
  return cudaGetLastError();
}

cudaError_t Scale(float* x, float factor, int64_t count, cudaStream_t stream) {
  ScaleKernel<<<Blocks(count), kThreads, 0, stream>>>(x, factor, count);
  return cudaGetLastError();
}

cudaError_t DropoutApply(float* out, const float* x, const Dropout& dropout, int64_t count,
                         cudaStream_t stream) {
  DropoutApplyKernel<<<Blocks(count), kThreads, 0, stream>>>(out, x, dropout.seed,
                                                             dropout.probability, count);
  return cudaGetLastError();
}

cudaError_t DropoutAccumulate(float* dx, const float* t, const Dropout& dropout, int64_t count,
                              cudaStream_t stream) {
  DropoutAccumulateKernel<<<Blocks(count), kThreads, 0, stream>>>(dx, t, dropout.seed,
                                                                  dropout.probability, count);
  return cudaGetLastError();
}

cudaError_t CrossEntropyRows(float* logits, double* loss, const int32_t* targets, int64_t rows,
                             int64_t vocab, bool backward, float grad_scale, cudaStream_t stream) {
  CrossEntropyRowsKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      logits, loss, targets, vocab, backward, grad_scale);
  return cudaGetLastError();
}

cudaError_t AttentionForward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const int32_t* segment, const Backend::AttentionShape& s,
                             cudaStream_t stream) {
  const int64_t rows = s.batch * s.q_heads * s.seq_len;
  AttentionForwardKernel<<<Blocks(rows), kThreads, 0, stream>>>(out, lse, q, k, v, segment, s);
  return cudaGetLastError();
}

cudaError_t AttentionBackward(float* dq, float* dk, float* dv, float* delta, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k,
                              const float* v, const int32_t* segment,
                              const Backend::AttentionShape& s, cudaStream_t stream) {
  const int64_t rows = s.batch * s.q_heads * s.seq_len;
  AttentionBackwardQueryKernel<<<Blocks(rows), kThreads, 0, stream>>>(dq, delta, dout, out, lse, q,
                                                                      k, v, segment, s);
  const int64_t keys = s.batch * s.kv_heads * s.seq_len;
  AttentionBackwardKeyKernel<<<Blocks(keys), kThreads, 0, stream>>>(dk, dv, delta, dout, lse, q, k,
                                                                    v, segment, s);
  return cudaGetLastError();
}

cudaError_t KvCacheWrite(float* k_cache, float* v_cache, const float* k, const float* v,
                         const int32_t* slots, int64_t n, int64_t kv_heads, int64_t head_dim,
                         cudaStream_t stream) {
  const int64_t width = kv_heads * head_dim;
  KvCacheWriteKernel<<<Blocks(n * width), kThreads, 0, stream>>>(k_cache, v_cache, k, v, slots, n,
                                                                 width);
  return cudaGetLastError();
}

cudaError_t PagedAttention(float* out, const float* q, const float* k_cache, const float* v_cache,
                           const int32_t* seq_of, const int32_t* positions,
                           const int32_t* block_tables, int64_t n,
                           const Backend::PagedAttentionShape& s, cudaStream_t stream) {
  PagedAttentionKernel<<<Blocks(n * s.q_heads), kThreads, 0, stream>>>(
      out, q, k_cache, v_cache, seq_of, positions, block_tables, n, s);
  return cudaGetLastError();
}

}  // namespace sovai::kernels::cuda::internal
