// Private to the cpu backend: the inference-only kernels — products with Q8_0 weights, and
// attention over a paged KV cache.
//
// Decode multiplies one to a few token rows with every weight of the model, so its speed is the
// rate at which the weights stream from memory. Q8_0 halves those bytes against bf16 (a quarter of
// f32). Q8_0Product widens each weight block to f32 in registers once for a group of
// kQ8_0RowGroup rows and never writes the dequantized weight anywhere. It keeps the activations in
// f32 (Q8_0Activations::kF32); the default quantizes them and multiplies in integers
// (q8_0_int8.h), which is many times faster on prefill.
//
// Batch invariance: every row of a Q8_0 product is computed by the same operations in the same
// order, whatever the number of rows and whichever group the row falls in (each row has its own
// accumulators; a remainder group runs the same per-row code). So a sequence's logits do not
// depend on what else is in the batch, and a greedy request gives the same text alone or among
// 32 others. sgemm (f32 and bf16 weights) gives no such promise.
//
// Thread-safety: as Context (one op at a time).
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/context.h"

namespace sovai::kernels::cpu {

// Rows of x that share one pass over a weight block.
inline constexpr int64_t kQ8_0RowGroup = 4;
// Output rows whose weights one task keeps in cache while every row group of x passes them.
inline constexpr int64_t kQ8_0OutputTile = 16;

// out[N, O] (+)= x[N, I] @ w[O, I]^T for a Q8_0 weight (beta 0: overwrite, 1: add to out).
void Q8_0Product(Context& context, float* out, const float* x, const WeightRef& w, int64_t n,
                 float beta);
// Elements [begin, end) of a Q8_0 weight (row-major) as f32: half(d) widened, times q, in f32.
void DequantizeQ8_0Range(const WeightRef& w, int64_t begin, int64_t end, float* out);

void KvCacheWrite(Context& context, float* k_cache, float* v_cache, const float* k, const float* v,
                  const int32_t* slots, int64_t n, int64_t row);
void PagedAttention(Context& context, float* out, const float* q, const float* k_cache,
                    const float* v_cache, const int32_t* seq_of, const int32_t* positions,
                    const int32_t* block_tables, int64_t n,
                    const Backend::PagedAttentionShape& shape);

}  // namespace sovai::kernels::cpu
