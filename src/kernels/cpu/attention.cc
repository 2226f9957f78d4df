// Legend: B sequences of T positions (N = B*T), Hq query heads, Hkv key/value heads, D head size,
// group = Hq / Hkv. q, out, dout, dq are [N, Hq, D]; k, v, dk, dv are [N, Hkv, D]; lse and delta
// are [B, Hq, T]. A tile is kTile positions: a query tile has `rows` <= kTile rows, a key tile
// `cols` <= kTile columns. A score tile is [rows, kTile] (query rows by key columns, the columns
// past `cols` masked) where the key tile is fixed and query tiles stream past it, and transposed,
// [cols, kTile], where the query tile is fixed (forward, dq pass): the fixed operand is the one
// transposed once per task, so no tile is transposed per pair.
//
// The inner products are written on GCC vectors of 16 floats (one AVX-512 register, two AVX2 or
// four SSE ones, by the variant: the tile kernels are compiled once per instruction set at the end
// of the file and Context::isa() picks one) with their accumulators held in registers; this file
// is compiled with -ffp-contract=fast so that they become fused multiply-adds where the CPU has
// them.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/vec_math.h"

namespace sovai::kernels::cpu {
namespace {

constexpr int64_t kTile = kAttentionTile;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// GCC vectors of 4, 8 and 16 floats: one SSE, AVX2 or AVX-512 register. Each variant computes on
// its target's native width (a wider GCC vector than the target has is emulated slowly).
typedef float V4 __attribute__((vector_size(16)));
typedef float V8 __attribute__((vector_size(32)));
typedef float V16 __attribute__((vector_size(64)));

#define SOVAI_ALWAYS_INLINE inline __attribute__((always_inline))

// Unaligned vector access (memcpy compiles to one unaligned load or store). By reference, not by
// value: a 32- or 64-byte vector returned by value from a function compiled for the baseline
// target is an ABI question GCC warns about.
template <typename V>
SOVAI_ALWAYS_INLINE void LoadV(V& v, const float* p) {
  std::memcpy(&v, p, sizeof(V));
}
template <typename V>
SOVAI_ALWAYS_INLINE void StoreV(float* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// How a variant blocks its tiles: vectors of type V (kWidth floats), kRows output rows at a time,
// kVecs vectors per row at a time; kRows * kVecs accumulators stay in registers.
template <typename VecT, int kRowsT, int kVecsT>
struct Blocking {
  using V = VecT;
  static constexpr int kWidth = static_cast<int>(sizeof(V) / sizeof(float));
  static constexpr int kRows = kRowsT;
  static constexpr int kVecs = kVecsT;
  static constexpr int kSpan = kWidth * kVecs;  // floats of a row per pass
  static_assert(kTile % kSpan == 0, "a score row is a whole number of passes");
};

// The geometry of one call, and the rule of who may attend to whom.
struct Layout {
  explicit Layout(const Backend::AttentionShape& s, const int32_t* segment_ids)
      : batch(s.batch),
        seq_len(s.seq_len),
        q_heads(s.q_heads),
        kv_heads(s.kv_heads),
        head_dim(s.head_dim),
        group(s.q_heads / s.kv_heads),
        window(s.window),
        scale(s.scale),
        q_stride(s.q_heads * s.head_dim),
        kv_stride(s.kv_heads * s.head_dim),
        tiles((s.seq_len + kTile - 1) / kTile),
        segment(segment_ids) {}

  // Row i of query head h of sequence b, in a [N, Hq, D] array; likewise for [N, Hkv, D].
  int64_t QIndex(int64_t b, int64_t i, int64_t h) const {
    return ((b * seq_len + i) * q_heads + h) * head_dim;
  }
  int64_t KvIndex(int64_t b, int64_t j, int64_t g) const {
    return ((b * seq_len + j) * kv_heads + g) * head_dim;
  }
  int64_t RowIndex(int64_t b, int64_t h, int64_t i) const {  // into lse / delta
    return (b * q_heads + h) * seq_len + i;
  }

  // Whether position i of sequence b may attend to position j (backend.h's rule).
  bool Allowed(int64_t b, int64_t i, int64_t j) const {
    if (j > i) return false;
    if (window > 0 && i - j >= window) return false;
    return segment == nullptr || segment[b * seq_len + j] == segment[b * seq_len + i];
  }

  int64_t batch, seq_len, q_heads, kv_heads, head_dim, group, window;
  float scale;
  int64_t q_stride, kv_stride;  // floats from one position to the next
  int64_t tiles;                // query tiles = key tiles per sequence
  const int32_t* segment;
};

// How many of the pairs (i in [i0, i1), j in [j0, j1)) of sequence b may attend.
enum class TileMask : uint8_t { kNone, kAll, kSome };

TileMask Classify(const Layout& layout, int64_t b, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (j0 > i1 - 1) return TileMask::kNone;                                          // all future
  if (layout.window > 0 && i0 - (j1 - 1) >= layout.window) return TileMask::kNone;  // all too old
  bool one_segment = true;
  if (layout.segment != nullptr) {
    const int32_t* seg = layout.segment + b * layout.seq_len;
    const auto [row_min, row_max] = std::minmax_element(seg + i0, seg + i1);
    const auto [col_min, col_max] = std::minmax_element(seg + j0, seg + j1);
    if (*row_max < *col_min || *col_max < *row_min) return TileMask::kNone;
    one_segment = *row_min == *row_max && *col_min == *col_max && *row_min == *col_min;
  }
  const bool all_past = j1 - 1 <= i0;
  const bool all_in_window = layout.window <= 0 || (i1 - 1) - j0 < layout.window;
  return all_past && all_in_window && one_segment ? TileMask::kAll : TileMask::kSome;
}

// --- tile kernels -------------------------------------------------------------------------------
//
// Each holds K::kRows rows' accumulators in registers at once (kRows x kVecs vectors): with one
// row, four accumulators are four dependent chains of fused multiply-adds, fewer than the FMA
// units times their latency can overlap; several rows also share every load of the other operand.
// Measured on the benchmark's shape (bench/kernels), one core, forward + backward: AVX-512
// (32 registers) 82, 61 and 36 ms with 1, 2 and 4 rows of 4 x 16 floats (3 rows no better than 2:
// 64 rows leave a remainder; 8 rows x 2 vectors 40 ms); AVX2 (16 registers) 97, 77 and 52 ms with
// 1 x 8, 2 x 4 and 4 x 2 vectors of 8; SSE about the same with 2 x 4 and 4 x 2 vectors of 4.

// s[i * kTile + c] = sum over d < depth of a[i * lda + d] * bt[d * kTile + c] for kRows rows i
// and the kSpan columns c in [c0, c0 + kSpan).
template <typename K, int kRows>
SOVAI_ALWAYS_INLINE void PanelPass(float* s, const float* a, int64_t lda, const float* bt,
                                   int64_t depth, int64_t c0) {
  using V = typename K::V;
  V acc[kRows][K::kVecs] = {};
  for (int64_t d = 0; d < depth; ++d) {
    const float* row = bt + d * kTile + c0;
    V b[K::kVecs];
#pragma GCC unroll 8
    for (int j = 0; j < K::kVecs; ++j) LoadV(b[j], row + j * K::kWidth);
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const float x = a[i * lda + d];
#pragma GCC unroll 8
      for (int j = 0; j < K::kVecs; ++j) acc[i][j] += x * b[j];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < K::kVecs; ++j) StoreV(s + i * kTile + c0 + j * K::kWidth, acc[i][j]);
  }
}

// s[r * kTile + 0:kTile] = sum over d < depth of a[r * lda + d] * bt[d * kTile + 0:kTile] for
// r < rows: the product of `rows` rows of a (row stride lda) with a transposed tile bt.
template <typename K>
SOVAI_ALWAYS_INLINE void PanelProduct(float* s, const float* a, int64_t lda, int64_t rows,
                                      const float* bt, int64_t depth) {
  int64_t r = 0;
  for (; r + K::kRows <= rows; r += K::kRows) {
    for (int64_t c0 = 0; c0 < kTile; c0 += K::kSpan) {
      PanelPass<K, K::kRows>(s + r * kTile, a + r * lda, lda, bt, depth, c0);
    }
  }
  for (; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < kTile; c0 += K::kSpan) {
      PanelPass<K, 1>(s + r * kTile, a + r * lda, lda, bt, depth, c0);
    }
  }
}

// For kRows output rows i:
//   out[i * ldo + d] = scale[i] * out[i * ldo + d] + sum over c < count of w[i * wa + c * wc] *
//   m[c * ldm + d]
// for d in [d0, d0 + kVecs * width of V); scale may be null (1).
template <typename V, int kRows, int kVecs>
SOVAI_ALWAYS_INLINE void WeightedPass(float* out, int64_t ldo, const float* scale, const float* w,
                                      int64_t wa, int64_t wc, const float* m, int64_t ldm,
                                      int64_t count, int64_t d0) {
  constexpr int kWidth = static_cast<int>(sizeof(V) / sizeof(float));
  V acc[kRows][kVecs];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
    const float factor = scale != nullptr ? scale[i] : 1.0f;
#pragma GCC unroll 8
    for (int j = 0; j < kVecs; ++j) {
      LoadV(acc[i][j], out + i * ldo + d0 + j * kWidth);
      acc[i][j] *= factor;
    }
  }
  for (int64_t c = 0; c < count; ++c) {
    const float* row = m + c * ldm + d0;
    V b[kVecs];
#pragma GCC unroll 8
    for (int j = 0; j < kVecs; ++j) LoadV(b[j], row + j * kWidth);
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const float x = w[i * wa + c * wc];
#pragma GCC unroll 8
      for (int j = 0; j < kVecs; ++j) acc[i][j] += x * b[j];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < kVecs; ++j) StoreV(out + i * ldo + d0 + j * kWidth, acc[i][j]);
  }
}

// WeightedPass over all of [0, depth) for kRows rows: kSpan columns at a time, then single
// vectors, then a scalar tail for head sizes that are not a multiple of the vector width.
template <typename K, int kRows>
SOVAI_ALWAYS_INLINE void WeightedRows(float* out, int64_t ldo, const float* scale, const float* w,
                                      int64_t wa, int64_t wc, const float* m, int64_t ldm,
                                      int64_t count, int64_t depth) {
  int64_t d0 = 0;
  for (; d0 + K::kSpan <= depth; d0 += K::kSpan) {
    WeightedPass<typename K::V, kRows, K::kVecs>(out, ldo, scale, w, wa, wc, m, ldm, count, d0);
  }
  for (; d0 + K::kWidth <= depth; d0 += K::kWidth) {
    WeightedPass<typename K::V, kRows, 1>(out, ldo, scale, w, wa, wc, m, ldm, count, d0);
  }
  for (; d0 < depth; ++d0) {
    for (int i = 0; i < kRows; ++i) {
      float acc = out[i * ldo + d0] * (scale != nullptr ? scale[i] : 1.0f);
      for (int64_t c = 0; c < count; ++c) acc += w[i * wa + c * wc] * m[c * ldm + d0];
      out[i * ldo + d0] = acc;
    }
  }
}

// out[a, :] = scale[a] * out[a, :] + sum over c < count of w(a, c) * m[c, :] for a < rows, where
// w(a, c) = w[a * wa + c * wc] (wa = kTile, wc = 1 reads a score tile by rows; wa = 1, wc = kTile
// reads it transposed).
template <typename K>
SOVAI_ALWAYS_INLINE void WeightedSum(float* out, int64_t ldo, const float* scale, int64_t rows,
                                     const float* w, int64_t wa, int64_t wc, const float* m,
                                     int64_t ldm, int64_t count, int64_t depth) {
  int64_t a = 0;
  for (; a + K::kRows <= rows; a += K::kRows) {
    WeightedRows<K, K::kRows>(out + a * ldo, ldo, scale != nullptr ? scale + a : nullptr,
                              w + a * wa, wa, wc, m, ldm, count, depth);
  }
  for (; a < rows; ++a) {
    WeightedRows<K, 1>(out + a * ldo, ldo, scale != nullptr ? scale + a : nullptr, w + a * wa, wa,
                       wc, m, ldm, count, depth);
  }
}

// bt[d * kTile + c] = rows[c * ld + d] for c < cols, 0 for cols <= c < kTile: a key or value tile
// transposed, so that a score row is a sum of contiguous kTile-wide rows.
// `factor` scales every element on the way (1 for keys and values; the forward pass folds the
// score scale into its transposed queries).
SOVAI_ALWAYS_INLINE void TransposeTile(float* bt, const float* rows, int64_t ld, int64_t cols,
                                       int64_t depth, float factor = 1.0f) {
  // Rows read contiguously; the strided writes stay in L1 (the tile is at most 64 KiB).
  for (int64_t c = 0; c < cols; ++c) {
    const float* row = rows + c * ld;
    for (int64_t d = 0; d < depth; ++d) bt[d * kTile + c] = row[d] * factor;
  }
  if (cols < kTile) {
    for (int64_t d = 0; d < depth; ++d)
      std::fill(bt + d * kTile + cols, bt + (d + 1) * kTile, 0.0f);
  }
}

// --- forward ------------------------------------------------------------------------------------

struct ForwardIo {
  float* out;
  float* lse;
  const float* q;
  const float* k;
  const float* v;
};

// Thread scratch: qt[D, kTile], acc[kTile, D], st[kTile, kTile], and six [kTile] rows.
int64_t ForwardScratchFloats(int64_t head_dim) {
  return 2 * head_dim * kTile + kTile * kTile + 6 * kTile;
}

// Query tile qt of head h of sequence b: its output rows and their log-sum-exps.
//
// The scores are computed transposed, st[c, r] = k_c . q_r, from the query tile transposed once
// per task; then the online softmax (running max m and sum l per query row) runs across the
// query rows r, which are the vector lanes, and no key tile needs transposing.
template <typename K>
SOVAI_ALWAYS_INLINE void ForwardTileImpl(const Layout& L, const ForwardIo& io, int64_t b, int64_t h,
                                         int64_t qt, float* scratch) {
  const int64_t D = L.head_dim;
  const int64_t g = h / L.group;
  const int64_t i0 = qt * kTile;
  const int64_t i1 = std::min(L.seq_len, i0 + kTile);
  const int64_t rows = i1 - i0;
  float* q_t = scratch;                  // [D, kTile] the query rows, transposed
  float* acc = q_t + D * kTile;          // [rows, D] unnormalized output
  float* st = acc + D * kTile;           // [cols, kTile] scores, then probabilities, transposed
  float* m = st + kTile * kTile;         // [kTile] running max per query row
  float* l = m + kTile;                  // [kTile] running sum of exp(score - m)
  float* correction = l + kTile;         // [kTile] exp(old m - new m)
  float* tile_max = correction + kTile;  // [kTile]
  float* base = tile_max + kTile;        // [kTile] what exp subtracts: the new m, or 0 if -inf
  float* tile_sum = base + kTile;        // [kTile]
  TransposeTile(q_t, io.q + L.QIndex(b, i0, h), L.q_stride, rows, D, L.scale);
  std::fill(acc, acc + rows * D, 0.0f);
  std::fill(m, m + kTile, kNegInf);
  std::fill(l, l + kTile, 0.0f);
  const int64_t first_tile = L.window > 0 ? std::max<int64_t>(0, i0 - L.window + 1) / kTile : 0;
  for (int64_t j0 = first_tile * kTile; j0 < i1; j0 += kTile) {
    const int64_t j1 = std::min(i1, j0 + kTile);
    const int64_t cols = j1 - j0;
    const TileMask mask = Classify(L, b, i0, i1, j0, j1);
    if (mask == TileMask::kNone) continue;
    const float* v_rows = io.v + L.KvIndex(b, j0, g);
    // Scaled scores (q_t holds scale * q); the lanes r >= rows hold junk that no output reads.
    PanelProduct<K>(st, io.k + L.KvIndex(b, j0, g), L.kv_stride, cols, q_t, D);
    if (mask == TileMask::kSome) {
      for (int64_t c = 0; c < cols; ++c) {
        float* column = st + c * kTile;  // key j0 + c against every query row
        for (int64_t r = 0; r < rows; ++r) {
          if (!L.Allowed(b, i0 + r, j0 + c)) column[r] = kNegInf;
        }
      }
    }
    std::fill(tile_max, tile_max + kTile, kNegInf);
    for (int64_t c = 0; c < cols; ++c) {
      const float* column = st + c * kTile;
#pragma omp simd
      for (int64_t r = 0; r < kTile; ++r) {
        tile_max[r] = column[r] > tile_max[r] ? column[r] : tile_max[r];
      }
    }
#pragma omp simd
    for (int64_t r = 0; r < kTile; ++r) {
      const float new_max = tile_max[r] > m[r] ? tile_max[r] : m[r];
      // A row that has seen nothing yet subtracts 0: exp(-inf - 0) = 0 keeps it empty.
      base[r] = new_max == kNegInf ? 0.0f : new_max;
      correction[r] = ExpF(m[r] - base[r]);  // 0 on the row's first tile (m = -inf)
      m[r] = new_max;
      tile_sum[r] = 0;
    }
    for (int64_t c = 0; c < cols; ++c) {
      float* column = st + c * kTile;
#pragma omp simd
      for (int64_t r = 0; r < kTile; ++r) {
        column[r] = ExpF(column[r] - base[r]);
        tile_sum[r] += column[r];
      }
    }
#pragma omp simd
    for (int64_t r = 0; r < kTile; ++r) l[r] = l[r] * correction[r] + tile_sum[r];
    // acc = correction * acc + p @ v, p read from st transposed.
    WeightedSum<K>(acc, D, correction, rows, st, 1, kTile, v_rows, L.kv_stride, cols, D);
  }
  // Every row sees at least itself, so l > 0.
  for (int64_t r = 0; r < rows; ++r) {
    const float inverse = 1.0f / l[r];
    float* out_row = io.out + L.QIndex(b, i0 + r, h);
    for (int64_t d = 0; d < D; ++d) out_row[d] = acc[r * D + d] * inverse;
    io.lse[L.RowIndex(b, h, i0 + r)] = m[r] + std::log(l[r]);
  }
}

// --- backward -----------------------------------------------------------------------------------

struct BackwardIo {
  float* dq;
  float* dk;
  float* dv;
  const float* dout;
  const float* lse;
  const float* delta;  // [B, Hq, T]: dout_i . out_i
  const float* q;
  const float* k;
  const float* v;
};

// Thread scratch: kt and vt [D, kTile], dk_acc and dv_acc [kTile, D], p and ds [kTile, kTile].
int64_t BackwardScratchFloats(int64_t head_dim) { return 4 * head_dim * kTile + 2 * kTile * kTile; }

struct BackwardScratch {
  BackwardScratch(float* scratch, int64_t head_dim)
      : kt(scratch),
        vt(kt + head_dim * kTile),
        dk_acc(vt + head_dim * kTile),
        dv_acc(dk_acc + head_dim * kTile),
        p(dv_acc + head_dim * kTile),
        ds(p + kTile * kTile) {}
  float* kt;
  float* vt;
  float* dk_acc;
  float* dv_acc;
  float* p;
  float* ds;
};

// One (query tile, key tile) pair of head h: with kt and vt already holding the key tile,
// recomputes p = exp(scale * q.k - lse) and ds = scale * p * (dout.v - delta); adds ds @ k to dq
// when with_dq, and p^T @ dout, ds^T @ q to the tile's dv_acc and dk_acc when with_dkdv.
template <typename K>
SOVAI_ALWAYS_INLINE void BackwardPair(const Layout& L, const BackwardIo& io, BackwardScratch& t,
                                      int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t j0,
                                      int64_t j1, TileMask mask, bool with_dq, bool with_dkdv) {
  const int64_t D = L.head_dim;
  const int64_t g = h / L.group;
  const int64_t rows = i1 - i0;
  const int64_t cols = j1 - j0;
  const float* q_rows = io.q + L.QIndex(b, i0, h);
  const float* dout_rows = io.dout + L.QIndex(b, i0, h);
  PanelProduct<K>(t.p, q_rows, L.q_stride, rows, t.kt, D);      // scores
  PanelProduct<K>(t.ds, dout_rows, L.q_stride, rows, t.vt, D);  // dout . v
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    float* p = t.p + r * kTile;
    float* ds = t.ds + r * kTile;
    const float row_lse = io.lse[L.RowIndex(b, h, i)];
    const float row_delta = io.delta[L.RowIndex(b, h, i)];
    if (mask == TileMask::kAll) {
#pragma omp simd
      for (int64_t c = 0; c < kTile; ++c) {
        const float prob = c < cols ? ExpF(p[c] * L.scale - row_lse) : 0.0f;
        p[c] = prob;
        ds[c] = L.scale * prob * (ds[c] - row_delta);
      }
    } else {
      for (int64_t c = 0; c < kTile; ++c) {
        const float prob =
            c < cols && L.Allowed(b, i, j0 + c) ? ExpF(p[c] * L.scale - row_lse) : 0.0f;
        p[c] = prob;
        ds[c] = L.scale * prob * (ds[c] - row_delta);
      }
    }
  }
  if (with_dq) {  // dq rows += ds @ k
    WeightedSum<K>(io.dq + L.QIndex(b, i0, h), L.q_stride, nullptr, rows, t.ds, kTile, 1,
                   io.k + L.KvIndex(b, j0, g), L.kv_stride, cols, D);
  }
  if (with_dkdv) {  // dv_acc += p^T @ dout, dk_acc += ds^T @ q
    WeightedSum<K>(t.dv_acc, D, nullptr, cols, t.p, 1, kTile, dout_rows, L.q_stride, rows, D);
    WeightedSum<K>(t.dk_acc, D, nullptr, cols, t.ds, 1, kTile, q_rows, L.q_stride, rows, D);
  }
}

// Key tile jt of kv head g of sequence b: its dk and dv rows from every query head of the group
// and every query tile that sees it, plus (with_dq) those pairs' share of dq.
template <typename K>
SOVAI_ALWAYS_INLINE void BackwardKeyTileImpl(const Layout& L, const BackwardIo& io, int64_t b,
                                             int64_t g, int64_t jt, bool with_dq, float* scratch) {
  const int64_t D = L.head_dim;
  BackwardScratch t(scratch, D);
  const int64_t j0 = jt * kTile;
  const int64_t j1 = std::min(L.seq_len, j0 + kTile);
  const int64_t cols = j1 - j0;
  TransposeTile(t.kt, io.k + L.KvIndex(b, j0, g), L.kv_stride, cols, D);
  TransposeTile(t.vt, io.v + L.KvIndex(b, j0, g), L.kv_stride, cols, D);
  std::fill(t.dk_acc, t.dk_acc + cols * D, 0.0f);
  std::fill(t.dv_acc, t.dv_acc + cols * D, 0.0f);
  for (int64_t h = g * L.group; h < (g + 1) * L.group; ++h) {
    for (int64_t qt = jt; qt < L.tiles; ++qt) {
      const int64_t i0 = qt * kTile;
      const int64_t i1 = std::min(L.seq_len, i0 + kTile);
      if (L.window > 0 && i0 - (j1 - 1) >= L.window) break;  // this and every later tile
      const TileMask mask = Classify(L, b, i0, i1, j0, j1);
      if (mask == TileMask::kNone) continue;
      BackwardPair<K>(L, io, t, b, h, i0, i1, j0, j1, mask, with_dq, /*with_dkdv=*/true);
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    float* dk_row = io.dk + L.KvIndex(b, j0 + c, g);
    float* dv_row = io.dv + L.KvIndex(b, j0 + c, g);
    for (int64_t d = 0; d < D; ++d) {
      dk_row[d] += t.dk_acc[c * D + d];
      dv_row[d] += t.dv_acc[c * D + d];
    }
  }
}

// Thread scratch of BackwardQueryTileImpl: q_t and dout_t [D, kTile], pt and dst [kTile, kTile],
// lse and delta [kTile].
int64_t QueryTileScratchFloats(int64_t head_dim) {
  return 2 * head_dim * kTile + 2 * kTile * kTile + 2 * kTile;
}

// Query tile qt of head h of sequence b: its dq rows from every key tile it sees. As in the
// forward pass, the tiles are computed transposed (key c by query row r) against the query and
// dout rows transposed once per task.
template <typename K>
SOVAI_ALWAYS_INLINE void BackwardQueryTileImpl(const Layout& L, const BackwardIo& io, int64_t b,
                                               int64_t h, int64_t qt, float* scratch) {
  const int64_t D = L.head_dim;
  const int64_t g = h / L.group;
  const int64_t i0 = qt * kTile;
  const int64_t i1 = std::min(L.seq_len, i0 + kTile);
  const int64_t rows = i1 - i0;
  float* q_t = scratch;              // [D, kTile]
  float* dout_t = q_t + D * kTile;   // [D, kTile]
  float* pt = dout_t + D * kTile;    // [cols, kTile] probabilities, transposed
  float* dst = pt + kTile * kTile;   // [cols, kTile] dout . v, then ds, transposed
  float* lse = dst + kTile * kTile;  // [kTile]
  float* delta = lse + kTile;        // [kTile]
  TransposeTile(q_t, io.q + L.QIndex(b, i0, h), L.q_stride, rows, D);
  TransposeTile(dout_t, io.dout + L.QIndex(b, i0, h), L.q_stride, rows, D);
  for (int64_t r = 0; r < kTile; ++r) {
    lse[r] = r < rows ? io.lse[L.RowIndex(b, h, i0 + r)] : 0.0f;
    delta[r] = r < rows ? io.delta[L.RowIndex(b, h, i0 + r)] : 0.0f;
  }
  const int64_t first_tile = L.window > 0 ? std::max<int64_t>(0, i0 - L.window + 1) / kTile : 0;
  for (int64_t jt = first_tile; jt <= qt; ++jt) {
    const int64_t j0 = jt * kTile;
    const int64_t j1 = std::min(L.seq_len, j0 + kTile);
    const int64_t cols = j1 - j0;
    const TileMask mask = Classify(L, b, i0, i1, j0, j1);
    if (mask == TileMask::kNone) continue;
    const float* k_rows = io.k + L.KvIndex(b, j0, g);
    PanelProduct<K>(pt, k_rows, L.kv_stride, cols, q_t, D);
    PanelProduct<K>(dst, io.v + L.KvIndex(b, j0, g), L.kv_stride, cols, dout_t, D);
    for (int64_t c = 0; c < cols; ++c) {
      float* p = pt + c * kTile;
      float* ds = dst + c * kTile;
      if (mask == TileMask::kAll) {
#pragma omp simd
        for (int64_t r = 0; r < kTile; ++r) {
          const float prob = r < rows ? ExpF(p[r] * L.scale - lse[r]) : 0.0f;
          ds[r] = L.scale * prob * (ds[r] - delta[r]);
        }
      } else {
        for (int64_t r = 0; r < kTile; ++r) {
          const float prob =
              r < rows && L.Allowed(b, i0 + r, j0 + c) ? ExpF(p[r] * L.scale - lse[r]) : 0.0f;
          ds[r] = L.scale * prob * (ds[r] - delta[r]);
        }
      }
    }
    // dq rows += ds @ k, ds read from dst transposed.
    WeightedSum<K>(io.dq + L.QIndex(b, i0, h), L.q_stride, nullptr, rows, dst, 1, kTile, k_rows,
                   L.kv_stride, cols, D);
  }
}

// --- one compiled variant per instruction set ---------------------------------------------------

struct TileKernels {
  void (*forward)(const Layout&, const ForwardIo&, int64_t b, int64_t h, int64_t qt, float*);
  void (*backward_key)(const Layout&, const BackwardIo&, int64_t b, int64_t g, int64_t jt,
                       bool with_dq, float*);
  void (*backward_query)(const Layout&, const BackwardIo&, int64_t b, int64_t h, int64_t qt,
                         float*);
};

#define SOVAI_TILE_KERNELS(Suffix, Target, ...)                                                    \
  Target void ForwardTile##Suffix(const Layout& L, const ForwardIo& io, int64_t b, int64_t h,      \
                                  int64_t qt, float* scratch) {                                    \
    ForwardTileImpl<__VA_ARGS__>(L, io, b, h, qt, scratch);                                        \
  }                                                                                                \
  Target void BackwardKeyTile##Suffix(const Layout& L, const BackwardIo& io, int64_t b, int64_t g, \
                                      int64_t jt, bool with_dq, float* scratch) {                  \
    BackwardKeyTileImpl<__VA_ARGS__>(L, io, b, g, jt, with_dq, scratch);                           \
  }                                                                                                \
  Target void BackwardQueryTile##Suffix(const Layout& L, const BackwardIo& io, int64_t b,          \
                                        int64_t h, int64_t qt, float* scratch) {                   \
    BackwardQueryTileImpl<__VA_ARGS__>(L, io, b, h, qt, scratch);                                  \
  }                                                                                                \
  constexpr TileKernels kTileKernels##Suffix = {ForwardTile##Suffix, BackwardKeyTile##Suffix,      \
                                                BackwardQueryTile##Suffix};

SOVAI_TILE_KERNELS(Avx512, SOVAI_TARGET_AVX512, Blocking<V16, 4, 4>)
SOVAI_TILE_KERNELS(Avx2, SOVAI_TARGET_AVX2, Blocking<V8, 4, 2>)
SOVAI_TILE_KERNELS(Baseline, , Blocking<V4, 2, 4>)

#undef SOVAI_TILE_KERNELS

const TileKernels& KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return kTileKernelsAvx512;
    case Isa::kAvx2:
      return kTileKernelsAvx2;
    case Isa::kBaseline:
      break;
  }
  return kTileKernelsBaseline;
}

}  // namespace

void AttentionForward(Context& context, float* out, float* lse, const float* q, const float* k,
                      const float* v, const int32_t* segment,
                      const Backend::AttentionShape& shape) {
  const Layout layout(shape, segment);
  const TileKernels& kernels = KernelsFor(context.isa());
  const ForwardIo io{out, lse, q, k, v};
  context.ReserveThreadScratch(static_cast<size_t>(ForwardScratchFloats(shape.head_dim)));
  const int64_t heads = layout.batch * layout.q_heads;
  // The last query tiles see the most keys: hand them out first so that the cheap ones fill the
  // gaps at the end.
  ParallelTasks(context, heads * layout.tiles, [&](int64_t task, int thread) {
    const int64_t qt = layout.tiles - 1 - task / heads;
    const int64_t b = task % heads / layout.q_heads;
    const int64_t h = task % layout.q_heads;
    kernels.forward(layout, io, b, h, qt, context.ThreadScratch(thread));
  });
}

void AttentionBackward(Context& context, float* dq, float* dk, float* dv, const float* dout,
                       const float* out, const float* lse, const float* q, const float* k,
                       const float* v, const int32_t* segment,
                       const Backend::AttentionShape& shape) {
  const Layout layout(shape, segment);
  const TileKernels& kernels = KernelsFor(context.isa());
  const int64_t positions = layout.batch * layout.seq_len;
  const int64_t D = layout.head_dim;
  float* delta = context.Shared(Context::Slot::kA, static_cast<size_t>(positions * layout.q_heads));
  ParallelRanges(context, positions, 64, [&](int64_t begin, int64_t end, int) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t b = n / layout.seq_len;
      const int64_t i = n % layout.seq_len;
      for (int64_t h = 0; h < layout.q_heads; ++h) {
        const float* dout_row = dout + layout.QIndex(b, i, h);
        const float* out_row = out + layout.QIndex(b, i, h);
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t d = 0; d < D; ++d) sum += dout_row[d] * out_row[d];
        delta[layout.RowIndex(b, h, i)] = sum;
      }
    }
  });
  const BackwardIo io{dq, dk, dv, dout, lse, delta, q, k, v};
  context.ReserveThreadScratch(
      static_cast<size_t>(std::max(BackwardScratchFloats(D), QueryTileScratchFloats(D))));
  const int64_t kv_pairs = layout.batch * layout.kv_heads;
  if (context.threads() == 1 || kv_pairs >= 2 * context.threads()) {
    ParallelTasks(context, kv_pairs, [&](int64_t task, int thread) {
      for (int64_t jt = 0; jt < layout.tiles; ++jt) {
        kernels.backward_key(layout, io, task / layout.kv_heads, task % layout.kv_heads, jt,
                             /*with_dq=*/true, context.ThreadScratch(thread));
      }
    });
    return;
  }
  // Early key tiles are seen by the most query tiles, late query tiles see the most key tiles:
  // both passes hand out their expensive tasks first.
  ParallelTasks(context, kv_pairs * layout.tiles, [&](int64_t task, int thread) {
    const int64_t jt = task / kv_pairs;
    const int64_t pair = task % kv_pairs;
    kernels.backward_key(layout, io, pair / layout.kv_heads, pair % layout.kv_heads, jt,
                         /*with_dq=*/false, context.ThreadScratch(thread));
  });
  const int64_t heads = layout.batch * layout.q_heads;
  ParallelTasks(context, heads * layout.tiles, [&](int64_t task, int thread) {
    const int64_t qt = layout.tiles - 1 - task / heads;
    const int64_t b = task % heads / layout.q_heads;
    const int64_t h = task % layout.q_heads;
    kernels.backward_query(layout, io, b, h, qt, context.ThreadScratch(thread));
  });
}

}  // namespace sovai::kernels::cpu
