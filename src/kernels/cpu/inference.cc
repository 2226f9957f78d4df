#include "kernels/cpu/inference.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/vec_math.h"
#include "kernels/q8_0.h"
#include "tensor/dtype.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#include "kernels/cpu/avx2_sums.h"
#define SOVAI_PAGED_ATTENTION_AVX2 1
#else
#define SOVAI_PAGED_ATTENTION_AVX2 0
#endif

namespace sovai::kernels::cpu {
namespace {

constexpr int64_t kBlockValues = static_cast<int64_t>(kQ8_0BlockValues);
constexpr int64_t kBlockBytes = static_cast<int64_t>(kQ8_0BlockBytes);

float BlockScale(const uint8_t* block) {
  uint16_t bits;
  std::memcpy(&bits, block, sizeof bits);
  return tensor::F16ToFloat(bits);
}

// Sixteen floats: GCC's vector extension, lowered to one AVX-512 register or two AVX2 ones. Written
// out explicitly so that every row's arithmetic is the same sequence of vector operations.
typedef float F16x __attribute__((vector_size(64)));
constexpr int kLanes = 16;
static_assert(kBlockValues == 2 * kLanes);

inline F16x LoadF(const float* p) {
  F16x v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The two halves of a block's 32 quants, widened to f32 and scaled by the block's d.
inline void WidenBlock(const uint8_t* block, F16x& lo, F16x& hi) {
  const float d = BlockScale(block);
  const int8_t* q = reinterpret_cast<const int8_t*>(block + 2);
  for (int j = 0; j < kLanes; ++j) {
    lo[j] = static_cast<float>(q[j]);
    hi[j] = static_cast<float>(q[kLanes + j]);
  }
  lo *= d;
  hi *= d;
}

// The fixed-order horizontal sum of a row's accumulator.
inline float SumLanes(F16x v) {
  float s = 0;
  for (int j = 0; j < kLanes; ++j) s += v[j];
  return s;
}

// out[r, o] for kRows rows of x (row stride `in`) and output rows [o0, o1).
template <int kRows>
SOVAI_CPU_CLONES void RowsTimesBlocks(float* out, int64_t out_stride, const float* x, int64_t in,
                                      const uint8_t* weights, int64_t o0, int64_t o1, float beta) {
  const int64_t blocks = in / kBlockValues;
  const int64_t row_bytes = blocks * kBlockBytes;
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = weights + o * row_bytes;
    F16x acc[kRows] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      F16x lo, hi;
      WidenBlock(row + b * kBlockBytes, lo, hi);
      for (int r = 0; r < kRows; ++r) {
        const float* xr = x + r * in + b * kBlockValues;
        acc[r] += lo * LoadF(xr);
        acc[r] += hi * LoadF(xr + kLanes);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      float& dst = out[r * out_stride + o];
      const float sum = SumLanes(acc[r]);
      dst = beta == 0 ? sum : dst + sum;
    }
  }
}

void RowsTimesBlocksAnyCount(int64_t rows, float* out, int64_t out_stride, const float* x,
                             int64_t in, const uint8_t* weights, int64_t o0, int64_t o1,
                             float beta) {
  switch (rows) {
    case 1:
      return RowsTimesBlocks<1>(out, out_stride, x, in, weights, o0, o1, beta);
    case 2:
      return RowsTimesBlocks<2>(out, out_stride, x, in, weights, o0, o1, beta);
    case 3:
      return RowsTimesBlocks<3>(out, out_stride, x, in, weights, o0, o1, beta);
    default:
      return RowsTimesBlocks<4>(out, out_stride, x, in, weights, o0, o1, beta);
  }
}

}  // namespace

void Q8_0Product(Context& context, float* out, const float* x, const WeightRef& w, int64_t n,
                 float beta) {
  static_assert(kQ8_0RowGroup == 4);
  const int64_t in = w.cols;
  const int64_t out_features = w.rows;
  const auto* weights = static_cast<const uint8_t*>(w.data);
  // Tasks are tiles of output rows: a tile's weights (16 rows, ~15 KiB for 896 columns) stay in
  // cache while every group of x rows passes them, so each weight byte comes from memory once.
  const int64_t tiles = (out_features + kQ8_0OutputTile - 1) / kQ8_0OutputTile;
  ParallelTasks(context, tiles, [&](int64_t tile, int) {
    const int64_t o0 = tile * kQ8_0OutputTile;
    const int64_t o1 = std::min(out_features, o0 + kQ8_0OutputTile);
    for (int64_t r = 0; r < n; r += kQ8_0RowGroup) {
      const int64_t rows = std::min(kQ8_0RowGroup, n - r);
      RowsTimesBlocksAnyCount(rows, out + r * out_features, out_features, x + r * in, in, weights,
                              o0, o1, beta);
    }
  });
}

void DequantizeQ8_0Range(const WeightRef& w, int64_t begin, int64_t end, float* out) {
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  // Blocks never straddle rows (cols is a multiple of 32), so element e is in block e / 32.
  for (int64_t e = begin; e < end;) {
    const int64_t block = e / kBlockValues;
    const uint8_t* p = bytes + block * kBlockBytes;
    const float d = BlockScale(p);
    const auto* q = reinterpret_cast<const int8_t*>(p + 2);
    const int64_t stop = std::min(end, (block + 1) * kBlockValues);
    for (; e < stop; ++e) out[e - begin] = d * static_cast<float>(q[e % kBlockValues]);
  }
}

void KvCacheWrite(Context& context, float* k_cache, float* v_cache, const float* k, const float* v,
                  const int32_t* slots, int64_t n, int64_t row) {
  ParallelRanges(context, n, 64, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      std::memcpy(k_cache + slots[t] * row, k + t * row, static_cast<size_t>(row) * sizeof(float));
      std::memcpy(v_cache + slots[t] * row, v + t * row, static_cast<size_t>(row) * sizeof(float));
    }
  });
}

namespace {

// The visible positions first .. last of one sequence, block by block of its table (a division
// per block, not per position): Next() gives the row of kv head g at the next position of
// `cache` ([slots, Hkv, D]).
class PositionCursor {
 public:
  PositionCursor(const float* cache, const int32_t* table, int64_t first, int64_t last, int64_t g,
                 const Backend::PagedAttentionShape& s)
      : cache_(cache),
        table_(table),
        j_(first),
        last_(last),
        block_size_(s.block_size),
        row_(s.kv_heads * s.head_dim),
        head_offset_(g * s.head_dim) {}

  const float* Next() {
    if (j_ >= block_end_) {
      const int64_t block = j_ / block_size_;
      block_end_ = std::min(last_ + 1, (block + 1) * block_size_);
      base_ = cache_ + (static_cast<int64_t>(table_[block]) - block) * block_size_ * row_ +
              head_offset_;
    }
    return base_ + j_++ * row_;
  }

 private:
  const float* cache_;
  const int32_t* table_;
  int64_t j_;
  int64_t last_;
  int64_t block_size_;
  int64_t row_;
  int64_t head_offset_;
  int64_t block_end_ = 0;
  const float* base_ = nullptr;
};

// The softmax's numerators in place: scores[j] = exp(scores[j] - max_score); returns 1 / their
// sum. Inlined into each caller, so that it is compiled for the caller's instruction set.
inline __attribute__((always_inline)) float ExponentiateScores(float* scores, int64_t count,
                                                               float max_score) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < count; ++j) {
    scores[j] = ExpF(scores[j] - max_score);
    sum += scores[j];
  }
  return 1.0f / sum;
}

// One (token, query head): scores over the visible positions into `scores`, softmax, then the
// weighted sum of values, every sum in position order.
SOVAI_CPU_CLONES void AttendOne(float* out, const float* q, const float* k_cache,
                                const float* v_cache, const int32_t* table, int64_t first,
                                int64_t last, int64_t g, const Backend::PagedAttentionShape& s,
                                float* scores) {
  const int64_t d_size = s.head_dim;
  const int64_t count = last - first + 1;
  float max_score = -std::numeric_limits<float>::infinity();
  PositionCursor keys(k_cache, table, first, last, g, s);
  for (int64_t j = 0; j < count; ++j) {
    const float* kj = keys.Next();
    float dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t d = 0; d < d_size; ++d) dot += q[d] * kj[d];
    const float score = dot * s.scale;
    scores[j] = score;
    max_score = std::max(max_score, score);
  }
  const float inv = ExponentiateScores(scores, count, max_score);
  for (int64_t d = 0; d < d_size; ++d) out[d] = 0;
  PositionCursor values(v_cache, table, first, last, g, s);
  for (int64_t j = 0; j < count; ++j) {
    const float* vj = values.Next();
    const float p = scores[j] * inv;
#pragma omp simd
    for (int64_t d = 0; d < d_size; ++d) out[d] += p * vj[d];
  }
}

#if SOVAI_PAGED_ATTENTION_AVX2
// AttendOne for head_dim = 8 * kChunks with AVX2 and FMA, the accumulators in registers: the
// scores of 8 positions at a time (one vector of partial products per position, the 8 reduced
// together by a tree of horizontal adds instead of one reduction per position), and the weighted
// sum of values 8 chunks of the head at a time over all positions. Sums run in position order.
template <int kChunks>
SOVAI_TARGET_AVX2 void AttendOneAvx2(float* out, const float* q, const float* k_cache,
                                     const float* v_cache, const int32_t* table, int64_t first,
                                     int64_t last, int64_t g, const Backend::PagedAttentionShape& s,
                                     float* scores) {
  static_assert(kChunks % 8 == 0, "the value sums take 8 chunks of the head per pass");
  const int64_t count = last - first + 1;
  float max_score = -std::numeric_limits<float>::infinity();
  const __m256 scale = _mm256_set1_ps(s.scale);
  PositionCursor keys(k_cache, table, first, last, g, s);
  for (int64_t j0 = 0; j0 < count; j0 += 8) {
    const int64_t n = std::min<int64_t>(8, count - j0);
    const float* rows[8];
    rows[0] = keys.Next();  // lanes past n repeat it (computed, never stored)
    for (int64_t i = 1; i < 8; ++i) rows[i] = i < n ? keys.Next() : rows[0];
    __m256 acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
    for (int c = 0; c < kChunks; ++c) {
      const __m256 qc = _mm256_loadu_ps(q + 8 * c);
      for (int i = 0; i < 8; ++i)
        acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(rows[i] + 8 * c), qc, acc[i]);
    }
    const __m256 dots = SumEachOf8(acc);  // lane i: position j0 + i
    float lanes[8];
    _mm256_storeu_ps(lanes, _mm256_mul_ps(dots, scale));
    for (int64_t i = 0; i < n; ++i) {
      scores[j0 + i] = lanes[i];
      max_score = std::max(max_score, lanes[i]);
    }
  }
  const float inv = ExponentiateScores(scores, count, max_score);
  // Eight chunks (64 values) of the head per pass over the positions: eight accumulators.
  for (int c0 = 0; c0 < kChunks; c0 += 8) {
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    PositionCursor values(v_cache, table, first, last, g, s);
    for (int64_t j = 0; j < count; ++j) {
      const float* vj = values.Next() + 8 * c0;
      const __m256 p = _mm256_set1_ps(scores[j] * inv);
      for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), acc[c]);
    }
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(out + 8 * (c0 + c), acc[c]);
  }
}
#endif

}  // namespace

void PagedAttention(Context& context, float* out, const float* q, const float* k_cache,
                    const float* v_cache, const int32_t* seq_of, const int32_t* positions,
                    const int32_t* block_tables, int64_t n, const Backend::PagedAttentionShape& s) {
  const int64_t group = s.q_heads / s.kv_heads;
  int64_t longest = 1;
  for (int64_t t = 0; t < n; ++t) longest = std::max<int64_t>(longest, positions[t] + 1);
  context.ReserveThreadScratch(static_cast<size_t>(longest));
  // Head sizes of 64 and 128 (Llama, Qwen, Mistral) take the AVX2 kernel where the CPU has it.
  [[maybe_unused]] const bool avx2 = context.isa() >= Isa::kAvx2;
  ParallelTasks(context, n * s.q_heads, [&](int64_t task, int thread) {
    const int64_t t = task / s.q_heads;
    const int64_t h = task % s.q_heads;
    const int64_t pos = positions[t];
    const int64_t first = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0;
    const int32_t* table = block_tables + static_cast<int64_t>(seq_of[t]) * s.max_blocks;
    float* head_out = out + (t * s.q_heads + h) * s.head_dim;
    const float* head_q = q + (t * s.q_heads + h) * s.head_dim;
#if SOVAI_PAGED_ATTENTION_AVX2
    if (avx2 && s.head_dim == 64) {
      return AttendOneAvx2<8>(head_out, head_q, k_cache, v_cache, table, first, pos, h / group, s,
                              context.ThreadScratch(thread));
    }
    if (avx2 && s.head_dim == 128) {
      return AttendOneAvx2<16>(head_out, head_q, k_cache, v_cache, table, first, pos, h / group, s,
                               context.ThreadScratch(thread));
    }
#endif
    AttendOne(head_out, head_q, k_cache, v_cache, table, first, pos, h / group, s,
              context.ThreadScratch(thread));
  });
}

}  // namespace sovai::kernels::cpu
