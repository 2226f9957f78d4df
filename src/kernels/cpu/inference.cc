#include "kernels/cpu/inference.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

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

// The helpers take and give F16x through references, never by value: a 64-byte vector argument
// or result is passed differently with and without AVX-512 (GCC's -Wpsabi), and these helpers
// serve the AVX-512, AVX2 and SSE2 clones alike. Inlined, references cost nothing.
inline void LoadF(const float* p, F16x& v) { std::memcpy(&v, p, sizeof v); }

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
inline float SumLanes(const F16x& v) {
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
        F16x x_lo, x_hi;
        LoadF(xr, x_lo);
        LoadF(xr + kLanes, x_hi);
        acc[r] += lo * x_lo;
        acc[r] += hi * x_hi;
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
// sum. The sum runs in 8 partial sums by position modulo 8 from the row's start, then the tail,
// then the partial sums in order: an order fixed by `count` alone, whatever the buffer's address
// (a vectorizer free to peel for alignment would make it depend on where the scratch sits, and a
// token's result on its batch). Inlined into each caller, so that it is compiled for the caller's
// instruction set.
inline __attribute__((always_inline)) float ExponentiateScores(float* scores, int64_t count,
                                                               float max_score) {
  constexpr int kLanes = 8;
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= count; j += kLanes) {
#pragma GCC unroll 8
    for (int lane = 0; lane < kLanes; ++lane) {
      scores[j + lane] = ExpF(scores[j + lane] - max_score);
      lanes[lane] += scores[j + lane];
    }
  }
  float sum = 0;
  for (; j < count; ++j) {
    scores[j] = ExpF(scores[j] - max_score);
    sum += scores[j];
  }
  for (int lane = 0; lane < kLanes; ++lane) sum += lanes[lane];
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
// One row of a grouped attention task: query head h of token t, which sees positions first..last.
struct AttendRow {
  const float* q;
  float* out;
  int64_t first;
  int64_t last;
};

// Positions per block of the grouped kernel: its keys or values (8 KiB at head_dim 64) stay in L1
// while every row of the task passes over them.
constexpr int64_t kAttendBlock = 32;
// Floats of scratch a grouped task may use for its rows' scores.
constexpr int64_t kAttendScoreBudget = 64 * 1024;
// Rows of one grouped task at most (its maxima and reciprocals live on the stack).
constexpr int64_t kAttendMaxRows = 64;

// The floats between two rows' scores in the scratch: room for the longest row and for the 7
// lanes a last group of 8 positions may store past it, rounded to 16 (rows start 64 bytes apart).
int64_t ScoreStride(int64_t longest) { return (longest + 7 + 15) / 16 * 16; }

// Adds the weighted values of positions [begin, end) (rows of `block_rows`, which starts at
// position j0) to kRowsAtOnce rows that see the same positions: out_r[d] += p_r[j] * v_j[d], in
// position order, where p_r[j] = scores_r[j] * inv_r. 8 / kRowsAtOnce chunks of 8 values per pass
// and row: eight accumulators, and two rows share every load of the values.
template <int kChunks, int kRowsAtOnce>
SOVAI_TARGET_AVX2 inline void AddWeightedValues(float* const* out, const float* const* scores,
                                                const float* inv, const float* const* block_rows,
                                                int64_t j0, int64_t begin, int64_t end) {
  constexpr int kPass = 8 / kRowsAtOnce;  // chunks per pass
  for (int c0 = 0; c0 < kChunks; c0 += kPass) {
    __m256 acc[kRowsAtOnce][kPass];
    for (int r = 0; r < kRowsAtOnce; ++r) {
      for (int c = 0; c < kPass; ++c) acc[r][c] = _mm256_loadu_ps(out[r] + 8 * (c0 + c));
    }
    for (int64_t j = begin; j < end; ++j) {
      const float* vj = block_rows[j - j0] + 8 * c0;
      __m256 p[kRowsAtOnce];
      for (int r = 0; r < kRowsAtOnce; ++r) p[r] = _mm256_set1_ps(scores[r][j] * inv[r]);
      for (int c = 0; c < kPass; ++c) {
        const __m256 v = _mm256_loadu_ps(vj + 8 * c);
        for (int r = 0; r < kRowsAtOnce; ++r) acc[r][c] = _mm256_fmadd_ps(p[r], v, acc[r][c]);
      }
    }
    for (int r = 0; r < kRowsAtOnce; ++r) {
      for (int c = 0; c < kPass; ++c) _mm256_storeu_ps(out[r] + 8 * (c0 + c), acc[r][c]);
    }
  }
}

// Attention of `count` rows that share kv head g of one sequence (the query heads of a GQA group,
// for one or more consecutive tokens), head_dim = 8 * kChunks, AVX2 and FMA. Each row's
// arithmetic is the same sequence of operations whatever the other rows are (so a token's
// result does not depend on the batch): a score is its position's dot product (one vector of
// partial products per position, 8 positions reduced together by a tree of horizontal adds that
// treats every lane alike), the softmax runs over the row's own scores, and the weighted sum of
// values accumulates in position order. What the grouping changes is the memory traffic: the keys
// and values are read block by block, and each block serves every row while it sits in L1,
// instead of being read once per row from L2 or L3 (a sequence's keys and values outgrow L2).
template <int kChunks>
SOVAI_TARGET_AVX2 void AttendRowsAvx2(const AttendRow* rows, int64_t count, const float* k_cache,
                                      const float* v_cache, const int32_t* table, int64_t g,
                                      const Backend::PagedAttentionShape& s, float* scores,
                                      int64_t stride) {
  static_assert(kChunks % 8 == 0, "the value sums take 8 chunks of the head per pass");
  constexpr int64_t kHead = 8 * kChunks;
  int64_t first = rows[0].first, last = rows[0].last;
  for (int64_t r = 1; r < count; ++r) {
    first = std::min(first, rows[r].first);
    last = std::max(last, rows[r].last);
  }
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 row_max[kAttendMaxRows];
  for (int64_t r = 0; r < count; ++r) row_max[r] = neg_inf;
  const __m256 scale = _mm256_set1_ps(s.scale);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const float* block_rows[kAttendBlock];

  // Scores, block by block of positions. A group of 8 positions stores all 8 lanes (those past
  // the row's range land in its stride's slack, or are overwritten by the next block).
  PositionCursor keys(k_cache, table, first, last, g, s);
  for (int64_t j0 = first; j0 <= last; j0 += kAttendBlock) {
    const int64_t j1 = std::min(last + 1, j0 + kAttendBlock);
    for (int64_t j = j0; j < j1; ++j) block_rows[j - j0] = keys.Next();
    for (int64_t r = 0; r < count; ++r) {
      const AttendRow& row = rows[r];
      const int64_t begin = std::max(j0, row.first), end = std::min(j1, row.last + 1);
      float* row_scores = scores + r * stride - row.first;
      __m256 max_lanes = row_max[r];
      for (int64_t j = begin; j < end; j += 8) {
        const int64_t n = std::min<int64_t>(8, end - j);
        const float* k_rows[8];
        for (int64_t i = 0; i < 8; ++i) {  // lanes past n repeat the first
          k_rows[i] = block_rows[(i < n ? j + i : j) - j0];
        }
        __m256 acc[8];
        for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
        for (int c = 0; c < kChunks; ++c) {
          const __m256 qc = _mm256_loadu_ps(row.q + 8 * c);
          for (int i = 0; i < 8; ++i)
            acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(k_rows[i] + 8 * c), qc, acc[i]);
        }
        const __m256 dots = _mm256_mul_ps(SumEachOf8(acc), scale);  // lane i: position j + i
        _mm256_storeu_ps(row_scores + j, dots);
        const __m256 valid =
            _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane));
        max_lanes = _mm256_max_ps(max_lanes, _mm256_blendv_ps(neg_inf, dots, valid));
      }
      row_max[r] = max_lanes;
    }
  }
  float inv[kAttendMaxRows];
  for (int64_t r = 0; r < count; ++r) {
    float lanes[8];
    _mm256_storeu_ps(lanes, row_max[r]);
    const float max_score = *std::max_element(lanes, lanes + 8);
    inv[r] = ExponentiateScores(scores + r * stride, rows[r].last - rows[r].first + 1, max_score);
    std::memset(rows[r].out, 0, kHead * sizeof(float));
  }

  // Weighted sums of values, block by block; rows of one token (same positions) two at a time.
  // The accumulators go back to the outputs between blocks (a store and a load change no bits).
  PositionCursor values(v_cache, table, first, last, g, s);
  for (int64_t j0 = first; j0 <= last; j0 += kAttendBlock) {
    const int64_t j1 = std::min(last + 1, j0 + kAttendBlock);
    for (int64_t j = j0; j < j1; ++j) block_rows[j - j0] = values.Next();
    for (int64_t r = 0; r < count;) {
      const AttendRow& row = rows[r];
      const int64_t begin = std::max(j0, row.first), end = std::min(j1, row.last + 1);
      const bool pair =
          r + 1 < count && rows[r + 1].first == row.first && rows[r + 1].last == row.last;
      float* const out[2] = {row.out, pair ? rows[r + 1].out : nullptr};
      const float* const row_scores[2] = {scores + r * stride - row.first,
                                          scores + (r + 1) * stride - row.first};
      if (begin < end) {
        if (pair) {
          AddWeightedValues<kChunks, 2>(out, row_scores, inv + r, block_rows, j0, begin, end);
        } else {
          AddWeightedValues<kChunks, 1>(out, row_scores, inv + r, block_rows, j0, begin, end);
        }
      }
      r += pair ? 2 : 1;
    }
  }
}

// The grouped tasks of one PagedAttention call: runs of consecutive tokens of one sequence (a
// prefill chunk, or one decoding token) cut into pieces of `tokens` tokens, times the kv heads,
// times pieces of `heads` query heads of each kv head's group.
struct AttendTasks {
  struct Piece {
    int64_t first_token;
    int64_t tokens;
  };
  std::vector<Piece> pieces;
  int64_t tokens = 1;       // tokens per piece at most
  int64_t heads = 1;        // query heads per task (of one group)
  int64_t head_pieces = 1;  // tasks per (piece, kv head)
  int64_t stride = 0;       // ScoreStride of the longest row

  int64_t count(int64_t kv_heads) const {
    return static_cast<int64_t>(pieces.size()) * kv_heads * head_pieces;
  }
};

AttendTasks PlanAttendTasks(const int32_t* seq_of, const int32_t* positions, int64_t n,
                            int64_t longest, const Backend::PagedAttentionShape& s, int threads) {
  const int64_t group = s.q_heads / s.kv_heads;
  AttendTasks plan;
  plan.stride = ScoreStride(longest);
  // Rows per task: bounded by the stack arrays and by the scores' scratch.
  const int64_t max_rows = std::clamp<int64_t>(kAttendScoreBudget / plan.stride, 1, kAttendMaxRows);
  std::vector<std::pair<int64_t, int64_t>> runs;  // first token, tokens
  for (int64_t t = 0; t < n; ++t) {
    if (t == 0 || seq_of[t] != seq_of[t - 1] || positions[t] != positions[t - 1] + 1) {
      runs.push_back({t, 0});
    }
    ++runs.back().second;
  }
  auto tokens_per_piece = [&](int64_t heads) { return std::max<int64_t>(1, max_rows / heads); };
  auto tasks_with = [&](int64_t heads) {
    int64_t pieces = 0;
    for (const auto& run : runs) {
      pieces += (run.second + tokens_per_piece(heads) - 1) / tokens_per_piece(heads);
    }
    return pieces * s.kv_heads * ((group + heads - 1) / heads);
  };
  // A whole group per task, unless that leaves threads idle (one decoding sequence on many
  // cores): then the group's heads are split.
  plan.heads = std::min(group, max_rows);
  while (plan.heads > 1 && tasks_with(plan.heads) < 2 * threads) {
    plan.heads = (plan.heads + 1) / 2;
  }
  plan.head_pieces = (group + plan.heads - 1) / plan.heads;
  plan.tokens = tokens_per_piece(plan.heads);
  for (const auto& [first, count] : runs) {
    for (int64_t t = first; t < first + count; t += plan.tokens) {
      plan.pieces.push_back({t, std::min(plan.tokens, first + count - t)});
    }
  }
  return plan;
}
#endif

}  // namespace

void PagedAttention(Context& context, float* out, const float* q, const float* k_cache,
                    const float* v_cache, const int32_t* seq_of, const int32_t* positions,
                    const int32_t* block_tables, int64_t n, const Backend::PagedAttentionShape& s) {
  const int64_t group = s.q_heads / s.kv_heads;
  int64_t longest = 1;
  for (int64_t t = 0; t < n; ++t) longest = std::max<int64_t>(longest, positions[t] + 1);
  auto first_of = [&](int64_t t) -> int64_t {
    return s.window > 0 ? std::max<int64_t>(0, positions[t] - s.window + 1) : 0;
  };
#if SOVAI_PAGED_ATTENTION_AVX2
  // Head sizes of 64 and 128 (Llama, Qwen, Mistral) take the grouped AVX2 kernel where the CPU
  // has it.
  if (context.isa() >= Isa::kAvx2 && (s.head_dim == 64 || s.head_dim == 128)) {
    const int64_t span = s.window > 0 ? std::min(longest, s.window) : longest;
    const AttendTasks plan = PlanAttendTasks(seq_of, positions, n, span, s, context.threads());
    context.ReserveThreadScratch(static_cast<size_t>(plan.tokens * plan.heads * plan.stride));
    ParallelTasks(context, plan.count(s.kv_heads), [&](int64_t task, int thread) {
      const int64_t head_piece = task % plan.head_pieces;
      const int64_t g = task / plan.head_pieces % s.kv_heads;
      const AttendTasks::Piece& piece = plan.pieces[task / plan.head_pieces / s.kv_heads];
      const int64_t h0 = g * group + head_piece * plan.heads;
      const int64_t h1 = std::min(h0 + plan.heads, (g + 1) * group);
      AttendRow rows[kAttendMaxRows];
      int64_t count = 0;
      for (int64_t t = piece.first_token; t < piece.first_token + piece.tokens; ++t) {
        for (int64_t h = h0; h < h1; ++h) {
          rows[count++] = {.q = q + (t * s.q_heads + h) * s.head_dim,
                           .out = out + (t * s.q_heads + h) * s.head_dim,
                           .first = first_of(t),
                           .last = positions[t]};
        }
      }
      const int32_t* table =
          block_tables + static_cast<int64_t>(seq_of[piece.first_token]) * s.max_blocks;
      if (s.head_dim == 64) {
        AttendRowsAvx2<8>(rows, count, k_cache, v_cache, table, g, s, context.ThreadScratch(thread),
                          plan.stride);
      } else {
        AttendRowsAvx2<16>(rows, count, k_cache, v_cache, table, g, s,
                           context.ThreadScratch(thread), plan.stride);
      }
    });
    return;
  }
#endif
  context.ReserveThreadScratch(static_cast<size_t>(longest));
  ParallelTasks(context, n * s.q_heads, [&](int64_t task, int thread) {
    const int64_t t = task / s.q_heads;
    const int64_t h = task % s.q_heads;
    const int32_t* table = block_tables + static_cast<int64_t>(seq_of[t]) * s.max_blocks;
    AttendOne(out + (t * s.q_heads + h) * s.head_dim, q + (t * s.q_heads + h) * s.head_dim, k_cache,
              v_cache, table, first_of(t), positions[t], h / group, s,
              context.ThreadScratch(thread));
  });
}

}  // namespace sovai::kernels::cpu
