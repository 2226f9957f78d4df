// The f32 kernels of the CUDA backend (cuda_backend.cc), one launcher per kernel. Private to the
// backend: each launcher enqueues its kernel on `stream` and returns cudaGetLastError(), and
// follows the backend.h op it implements (shapes and pointers as there, all device pointers).
// The per-element math is backend_math.h's. Shape letters as in backend.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/backend.h"

namespace sovai::kernels::cuda::internal {

// out[count] = f32 values of a bf16 (uint16 bits) or Q8_0 array of count elements.
cudaError_t ExpandBf16(float* out, const uint16_t* in, int64_t count, cudaStream_t stream);
cudaError_t ExpandQ8_0(float* out, const uint8_t* blocks, int64_t count, cudaStream_t stream);
// out[numel] = backend.h's Nf4Weight formula, term by term (no fused multiply-add).
cudaError_t ExpandNf4(float* out, const Nf4Weight& w, int64_t numel, cudaStream_t stream);

// out[N, O] += bias[O] on every row.
cudaError_t AddBiasRows(float* out, const float* bias, int64_t n, int64_t o, cudaStream_t stream);
// dbias[O] += sum over rows of dout[N, O] (one thread per column, summed in double).
cudaError_t SumRowsInto(float* dbias, const float* dout, int64_t n, int64_t o, cudaStream_t stream);

// out[N, C] = table[ids[n]] for an f32, bf16 or Q8_0 table (format as WeightRef's).
cudaError_t Embedding(float* out, const int32_t* ids, const void* table, WeightRef::Format format,
                      int64_t n, int64_t c, cudaStream_t stream);
// dtable[V, C] += scatter of dout[N, C] by ids (float atomics: a repeated id's sum is not ordered).
cudaError_t EmbeddingScatter(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                             int64_t c, cudaStream_t stream);

cudaError_t RmsNormForward(float* out, float* rstd, const float* x, const float* weight, int64_t n,
                           int64_t c, float eps, cudaStream_t stream);
// dx += ... (one block per row); dweight[C] += sum_n dout * x * rstd when dweight is not null.
cudaError_t RmsNormBackward(float* dx, float* dweight, const float* dout, const float* x,
                            const float* weight, const float* rstd, int64_t n, int64_t c,
                            cudaStream_t stream);

// sign = +1: out = rope(x) (out may equal x); sign = -1: out += rope^-1(x) (the backward pass).
cudaError_t Rope(float* out, const float* x, const int32_t* positions, const float* inv_freq,
                 int64_t n, int64_t heads, int64_t head_dim, float sign, cudaStream_t stream);

cudaError_t SwiGluForward(float* out, const float* gate, const float* up, int64_t count,
                          cudaStream_t stream);
cudaError_t SwiGluBackward(float* dgate, float* dup, const float* dout, const float* gate,
                           const float* up, int64_t count, cudaStream_t stream);
cudaError_t Add(float* out, const float* a, const float* b, int64_t count, cudaStream_t stream);
cudaError_t Scale(float* x, float factor, int64_t count, cudaStream_t stream);

// out[N, I] = x * DropoutFactor(seed, n * I + i, p).
cudaError_t DropoutApply(float* out, const float* x, const Dropout& dropout, int64_t count,
                         cudaStream_t stream);
// dx[count] += t * DropoutFactor(...).
cudaError_t DropoutAccumulate(float* dx, const float* t, const Dropout& dropout, int64_t count,
                              cudaStream_t stream);

// Per row r of logits[rows, V]: loss[r] = target < 0 ? 0 : logsumexp - logits[target] (double);
// when grad_scale_or_nan is not NaN the row is replaced by its dlogits
// (grad_scale * (softmax - onehot), zeros for an ignored row).
cudaError_t CrossEntropyRows(float* logits, double* loss, const int32_t* targets, int64_t rows,
                             int64_t vocab, bool backward, float grad_scale, cudaStream_t stream);

cudaError_t AttentionForward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const int32_t* segment, const Backend::AttentionShape& s,
                             cudaStream_t stream);
// delta[B, Hq, T] is scratch for rowsum(dout * out).
cudaError_t AttentionBackward(float* dq, float* dk, float* dv, float* delta, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k,
                              const float* v, const int32_t* segment,
                              const Backend::AttentionShape& s, cudaStream_t stream);

cudaError_t KvCacheWrite(float* k_cache, float* v_cache, const float* k, const float* v,
                         const int32_t* slots, int64_t n, int64_t kv_heads, int64_t head_dim,
                         cudaStream_t stream);
cudaError_t PagedAttention(float* out, const float* q, const float* k_cache, const float* v_cache,
                           const int32_t* seq_of, const int32_t* positions,
                           const int32_t* block_tables, int64_t n,
                           const Backend::PagedAttentionShape& s, cudaStream_t stream);

}  // namespace sovai::kernels::cuda::internal
