#include "kernels/cpu/q8_0_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "kernels/cpu/inference.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/q8_0.h"
#include "tensor/dtype.h"

// The SIMD kernels are compiled for their instruction sets by target attributes (the rest of the
// binary stays baseline x86-64) and only called after checking the CPU. Feature names rather than
// x86-64 levels, so that clang compiles them too.
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#include "kernels/cpu/avx2_sums.h"
#define SOVAI_INT8_X86 1
#define SOVAI_TARGET_INT8_AVX2 __attribute__((target("avx2,f16c")))
#define SOVAI_TARGET_INT8_VNNI __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512vnni")))
#else
#define SOVAI_INT8_X86 0
#endif

namespace sovai::kernels::cpu {
namespace {

constexpr int64_t kBlockValues = static_cast<int64_t>(kQ8_0BlockValues);
constexpr int64_t kBlockBytes = static_cast<int64_t>(kQ8_0BlockBytes);
// 4-byte groups per block: one integer instruction per group and tile.
constexpr int64_t kGroups = kBlockValues / 4;
constexpr int64_t kMaxTileRows = 16;
constexpr int64_t kMaxTilesPerPass = 2;
// Rows of x per quad (QuadDotAvx2), and bytes of a row side by side in one of its steps (two
// int32 lanes).
constexpr int64_t kQuadRows = 4;
constexpr int64_t kQuadGranule = 8;
// Rows of x the row kernel takes against one weight row at a time (RowsDotAvx2).
constexpr int64_t kMaxRowsPerPass = 4;
// Rows of x one thread quantizes at the least (a row of 896 values takes about a microsecond).
constexpr int64_t kMinQuantizeRowsPerThread = 8;

float BlockScale(const uint8_t* block) {
  uint16_t bits;
  std::memcpy(&bits, block, sizeof bits);
  return tensor::F16ToFloat(bits);
}

// The quantized activations of one call, in the layout of one kernel: row r is lane r % L of tile
// r / L. Tile t, block b: step j's G bytes (G = the granule: 4 for the tiles, 8 for the quads) of
// every lane together, q[((t * blocks + b) * (32 / G) + j) * L * G + lane * G + k] =
// qx[r][b * 32 + G * j + k] (plus 128 for VNNI), and d[(t * blocks + b) * L + lane] = dx[r][b].
// For L = 1 that is simply the rows one after the other. Lanes past the last row hold q = 0 and
// d = 0.
struct PackedRows {
  int64_t lanes = 1;
  int64_t granule = 4;
  int64_t blocks = 0;
  uint8_t* q = nullptr;
  float* d = nullptr;

  uint8_t* Q(int64_t tile) const { return q + tile * blocks * kBlockValues * lanes; }
  float* D(int64_t tile) const { return d + tile * blocks * lanes; }
};

// Spreads one quantized row (q[blocks * 32], d[blocks]) into its lane of `packed`.
void Interleave(const PackedRows& packed, int64_t row, const int8_t* q, const float* d,
                bool plus_128) {
  const int64_t lanes = packed.lanes;
  const int64_t granule = packed.granule;
  const int64_t steps = kBlockValues / granule;
  const int64_t lane = row % lanes;
  uint8_t* q_tile = packed.Q(row / lanes);
  float* d_tile = packed.D(row / lanes);
  const uint8_t flip = plus_128 ? 0x80 : 0x00;  // q + 128 as an unsigned byte
  for (int64_t b = 0; b < packed.blocks; ++b) {
    for (int64_t j = 0; j < steps; ++j) {
      uint8_t* dst = q_tile + ((b * steps + j) * lanes + lane) * granule;
      const int8_t* src = q + b * kBlockValues + j * granule;
      // Fixed-size copies (with a byte loop here, the quantizing pass's own time, outside
      // QuantizeRowQ8, was 2.9-4.5% of prefill in perf; 1.0% now).
      if (granule == kQuadGranule) {
        std::memcpy(dst, src, kQuadGranule);
      } else {
        std::memcpy(dst, src, 4);
      }
      if (flip != 0) {
        for (int64_t k = 0; k < granule; ++k) dst[k] ^= flip;
      }
    }
    d_tile[b * lanes + lane] = d[b];
  }
}

// --- plain C++: one (row, output) pair at a time -------------------------------------------------

float DotPlain(const int8_t* qx, const float* dx, const uint8_t* w_row, const float* dw,
               int64_t blocks) {
  float sum = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const auto* qw = reinterpret_cast<const int8_t*>(w_row + b * kBlockBytes + 2);
    const int8_t* q = qx + b * kBlockValues;
    int32_t isum = 0;
    for (int64_t k = 0; k < kBlockValues; ++k) {
      isum += static_cast<int32_t>(qw[k]) * static_cast<int32_t>(q[k]);
    }
    sum = sum + static_cast<float>(isum) * (dx[b] * dw[b]);
  }
  return sum;
}

#if SOVAI_INT8_X86

inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// dw[b] = the half scale of block b of a weight row, widened by F16C (exact, as F16ToFloat; a
// signaling NaN comes out quiet, which any product with it would do anyway). Decode converts every
// scale of the model once per token, so this matters next to the products themselves.
SOVAI_TARGET_INT8_AVX2 void BlockScalesF16c(const uint8_t* w_row, int64_t blocks, float* dw) {
  int64_t b = 0;
  for (; b + 8 <= blocks; b += 8) {
    uint16_t halves[8];
    for (int k = 0; k < 8; ++k) std::memcpy(&halves[k], w_row + (b + k) * kBlockBytes, 2);
    _mm256_storeu_ps(dw + b,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(halves))));
  }
  for (; b < blocks; ++b) {
    uint16_t half;
    std::memcpy(&half, w_row + b * kBlockBytes, sizeof half);
    dw[b] = _cvtsh_ss(half);
  }
}

// Calls f.template operator()<G>() with G = count (1 to kInt8OutputGroup): the tile kernels take
// their output count as a template parameter, so that their accumulators live in registers.
template <typename F>
inline void WithOutputCount(int64_t count, F&& f) {
  switch (count) {
    case 1:
      return f.template operator()<1>();
    case 2:
      return f.template operator()<2>();
    case 3:
      return f.template operator()<3>();
    default:
      return f.template operator()<4>();
  }
}

// --- AVX2: 8 rows per tile -----------------------------------------------------------------------

// sums[t * sums_stride + g][lane] for outputs w_rows + g * row_bytes (g < G) and the 8 rows of
// each of T consecutive row tiles (T <= 2). Per 4-byte group, the weight's broadcast and its
// absolute value serve the T tiles.
template <int G, int T>
SOVAI_TARGET_INT8_AVX2 void TileAvx2(const uint8_t* q, int64_t q_tile_bytes, const float* d,
                                     int64_t d_tile_floats, const uint8_t* w_rows,
                                     int64_t row_bytes, const float* dw, int64_t blocks,
                                     float (*sums)[kMaxTileRows], int64_t sums_stride) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 sum[T][G];
  for (int t = 0; t < T; ++t) {
    for (int g = 0; g < G; ++g) sum[t][g] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i acc[T][G];
    for (int t = 0; t < T; ++t) {
      for (int g = 0; g < G; ++g) acc[t][g] = _mm256_setzero_si256();
    }
#pragma GCC unroll 2
    for (int64_t j = 0; j < kGroups; ++j) {
      __m256i x[T];
      for (int t = 0; t < T; ++t) {
        x[t] = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(q + t * q_tile_bytes + (b * kGroups + j) * 32));
      }
      for (int g = 0; g < G; ++g) {
        const __m256i w = _mm256_set1_epi32(
            static_cast<int32_t>(LoadU32(w_rows + g * row_bytes + b * kBlockBytes + 2 + j * 4)));
        // |w| (unsigned; 128 for -128) times x with w's sign: pairs of products fit int16.
        const __m256i w_magnitude = _mm256_abs_epi8(w);
        for (int t = 0; t < T; ++t) {
          const __m256i pairs = _mm256_maddubs_epi16(w_magnitude, _mm256_sign_epi8(x[t], w));
          acc[t][g] = _mm256_add_epi32(acc[t][g], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_loadu_ps(d + t * d_tile_floats + b * 8);
      for (int g = 0; g < G; ++g) {
        const __m256 scale = _mm256_mul_ps(dx, _mm256_set1_ps(dw[g * blocks + b]));
        sum[t][g] = _mm256_add_ps(sum[t][g], _mm256_mul_ps(_mm256_cvtepi32_ps(acc[t][g]), scale));
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(sums[t * sums_stride + g], sum[t][g]);
  }
}

// TileAvx2 for `count` (1 to 4) outputs: one tile takes 4 outputs per pass, two tiles 2 (the
// registers hold 4 sums and 4 accumulators).
template <int T>
SOVAI_TARGET_INT8_AVX2 void TileAvx2AnyCount(int64_t count, const uint8_t* q, int64_t q_tile_bytes,
                                             const float* d, int64_t d_tile_floats,
                                             const uint8_t* w_rows, int64_t row_bytes,
                                             const float* dw, int64_t blocks,
                                             float (*sums)[kMaxTileRows]) {
  if constexpr (T == 1) {
    WithOutputCount(count, [&]<int G>() {
      TileAvx2<G, 1>(q, 0, d, 0, w_rows, row_bytes, dw, blocks, sums, 0);
    });
  } else {
    for (int64_t g0 = 0; g0 < count; g0 += 2) {
      const uint8_t* w = w_rows + g0 * row_bytes;
      if (count - g0 == 1) {
        TileAvx2<1, T>(q, q_tile_bytes, d, d_tile_floats, w, row_bytes, dw + g0 * blocks, blocks,
                       sums + g0, count);
      } else {
        TileAvx2<2, T>(q, q_tile_bytes, d, d_tile_floats, w, row_bytes, dw + g0 * blocks, blocks,
                       sums + g0, count);
      }
    }
  }
}

// --- AVX2, one row at a time: 8 blocks per pass -------------------------------------------------

// How far ahead of its reads the row kernel asks for weights. Its loop holds ~100 instructions
// per 272 bytes, so the reorder window alone keeps only ~11 cache lines in flight: with DRAM's
// latency that caps a core near 7 GB/s, under what one core can stream. Prefetching 2 KiB ahead
// (the weight rows of a thread are contiguous, so that is the same stream) measured the output
// head at 1 row 9.7-11.8 -> 7.9-9.0 ms (kernels_bench --q8_0, 3 alternating runs); 512 bytes
// gained less, 3 KiB too.
constexpr int64_t kRowPrefetchBytes = 2048;

// The weight scales of blocks b0 .. b0 + 7 of one weight row, widened to f32 (lane k: block
// b0 + k). kTail: only the first `count` blocks exist (the other lanes are 0).
template <bool kTail>
SOVAI_TARGET_INT8_AVX2 inline __m256 WeightScalesAvx2(const uint8_t* w_row, int64_t b0,
                                                      int64_t count) {
  uint16_t halves[8] = {};
  for (int64_t k = 0; k < (kTail ? count : 8); ++k) {
    std::memcpy(&halves[k], w_row + (b0 + k) * kBlockBytes, sizeof halves[k]);
  }
  // The halves as a vector built in registers (a store of 8 halves read back as one load would
  // stall store forwarding).
  return _mm256_cvtph_ps(
      _mm_setr_epi16(static_cast<int16_t>(halves[0]), static_cast<int16_t>(halves[1]),
                     static_cast<int16_t>(halves[2]), static_cast<int16_t>(halves[3]),
                     static_cast<int16_t>(halves[4]), static_cast<int16_t>(halves[5]),
                     static_cast<int16_t>(halves[6]), static_cast<int16_t>(halves[7])));
}

// The products float(isum) * (dx * dw) of blocks b0 .. b0 + 7 of one quantized row (qx, dx) and
// one weight row (scales dw, WeightScalesAvx2), lane k for block b0 + k: each block's 32 products
// summed exactly in int32, the 8 blocks' partial sums reduced by a tree of horizontal adds into
// one vector, then the tiles' f32 steps with the blocks in the lanes. kTail: only the first
// `count` blocks exist (the other lanes are 0).
template <bool kTail>
SOVAI_TARGET_INT8_AVX2 inline __m256 BlockProductsAvx2(const int8_t* qx, const float* dx,
                                                       const uint8_t* w_row, __m256 dw, int64_t b0,
                                                       int64_t count) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[8];
  for (int64_t k = 0; k < 8; ++k) {
    if (kTail && k >= count) {
      acc[k] = _mm256_setzero_si256();
      continue;
    }
    const uint8_t* block = w_row + (b0 + k) * kBlockBytes;
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
    const __m256i x =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + (b0 + k) * kBlockValues));
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    acc[k] = _mm256_madd_epi16(pairs, ones);
  }
  const __m256i isum = SumEachOf8(acc);  // lane k: block b0 + k
  __m256 dx_lanes;
  if (kTail) {
    // A masked load: the scales past the row's end are neither read nor faulted on. (Copying
    // them into a zeroed array and loading that stalled on store forwarding: with 896 columns,
    // 28 blocks, the tail is every row's last 4 blocks, and it took a sixth of the time.)
    const __m256i first_count = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(count)),
                                                   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    dx_lanes = _mm256_maskload_ps(dx + b0, first_count);
  } else {
    dx_lanes = _mm256_loadu_ps(dx + b0);
  }
  return _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dx_lanes, dw));
}

// Blocks b0 .. b0 + 7 (kTail: the first `count`) of R quantized rows against one weight row, each
// row's products added to its sum in block order. The rows share the weight scales, and their
// chains of additions (latency-bound, one per block) run side by side.
template <int R, bool kTail>
SOVAI_TARGET_INT8_AVX2 inline void AddBlockProductsAvx2(const int8_t* const* qx,
                                                        const float* const* dx,
                                                        const uint8_t* w_row, int64_t b0,
                                                        int64_t count, float* sums) {
  // The weights kRowPrefetchBytes ahead (the pass reads 8 * 34 = 272 bytes: 5 lines cover them).
  const char* ahead = reinterpret_cast<const char*>(w_row + b0 * kBlockBytes) + kRowPrefetchBytes;
  for (int line = 0; line < 5; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
  const __m256 dw = WeightScalesAvx2<kTail>(w_row, b0, count);
  alignas(32) float products[R][8];
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(products[r], BlockProductsAvx2<kTail>(qx[r], dx[r], w_row, dw, b0, count));
  }
  for (int64_t k = 0; k < (kTail ? count : 8); ++k) {
    for (int r = 0; r < R; ++r) sums[r] = sums[r] + products[r][k];
  }
}

// The products of R quantized rows (qx[r], dx[r]) with one weight row: sums[r], block by block in
// order. One weight row is read front to back, so a task's rows (contiguous) are one sequential
// stream. (Two weight rows interleaved, to overlap their chains of additions, measured 2x slower
// from memory: two streams per core prefetch worse than one.)
template <int R>
SOVAI_TARGET_INT8_AVX2 void RowsDotAvx2(const int8_t* const* qx, const float* const* dx,
                                        const uint8_t* w_row, int64_t blocks, float* sums) {
  for (int r = 0; r < R; ++r) sums[r] = 0.0f;
  int64_t b0 = 0;
  for (; b0 + 8 <= blocks; b0 += 8) AddBlockProductsAvx2<R, false>(qx, dx, w_row, b0, 8, sums);
  if (b0 < blocks) AddBlockProductsAvx2<R, true>(qx, dx, w_row, b0, blocks - b0, sums);
}

// --- AVX2, 4 rows per quad: 8 bytes of each row per pair of lanes --------------------------------

inline uint64_t LoadU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Block b of a quad (q_block: its 128 bytes, 8 values of each of the 4 rows per step) times one
// weight block: lanes 2r and 2r + 1 hold the exact integer sums of row r's two halves. Each step
// broadcasts the weight's 8 bytes for the same 8 columns of every row.
SOVAI_TARGET_INT8_AVX2 inline __m256i QuadBlockAvx2(const uint8_t* q_block,
                                                    const uint8_t* w_block) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc = _mm256_setzero_si256();
  for (int64_t j = 0; j < kBlockValues / kQuadGranule; ++j) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q_block + j * 32));
    const __m256i w =
        _mm256_set1_epi64x(static_cast<int64_t>(LoadU64(w_block + 2 + j * kQuadGranule)));
    // As the tiles: |w| times x with w's sign, pairs of products fit int16.
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
  }
  return acc;
}

// The products of the 4 rows of one quad (q, d: the quad's bytes and scales) with one weight row:
// sums[r], block by block in order. Two blocks at a time: one
// horizontal add gathers both blocks' sums of every row, so that the f32 steps run for 8 (row,
// block) pairs at once; the rows' in-order additions then run side by side in 4 lanes.
SOVAI_TARGET_INT8_AVX2 void QuadDotAvx2(const uint8_t* q, const float* d, const uint8_t* w_row,
                                        int64_t blocks, float* sums) {
  constexpr int64_t kQuadBlockBytes = kQuadRows * kBlockValues;
  __m128 sum = _mm_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    // As the row kernel (kRowPrefetchBytes): the output head at 4 rows 12.5-18.4 -> 10.9-12.5 ms.
    const char* ahead = reinterpret_cast<const char*>(w_row + b * kBlockBytes) + kRowPrefetchBytes;
    _mm_prefetch(ahead, _MM_HINT_T0);  // two lines cover the pass's 68 bytes wherever they start
    _mm_prefetch(ahead + 64, _MM_HINT_T0);
    const __m256i first = QuadBlockAvx2(q + b * kQuadBlockBytes, w_row + b * kBlockBytes);
    const __m256i second =
        QuadBlockAvx2(q + (b + 1) * kQuadBlockBytes, w_row + (b + 1) * kBlockBytes);
    // hadd: [b: r0 r1, b+1: r0 r1 | b: r2 r3, b+1: r2 r3]; the 64-bit permute puts block b's 4
    // rows in the low half and block b + 1's in the high half, as d holds their scales.
    const __m256i isum = _mm256_permute4x64_epi64(_mm256_hadd_epi32(first, second), 0xD8);
    // The two blocks' weight scales, widened in registers as the blocks are read (a pass over the
    // row's scales first took a third of decode's time: it was the one to wait for memory).
    uint16_t first_half, second_half;
    std::memcpy(&first_half, w_row + b * kBlockBytes, sizeof first_half);
    std::memcpy(&second_half, w_row + (b + 1) * kBlockBytes, sizeof second_half);
    const __m256 dw = _mm256_permutevar8x32_ps(
        _mm256_castps128_ps256(
            _mm_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(first_half),
                                        static_cast<int16_t>(second_half), 0, 0, 0, 0, 0, 0))),
        _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    const __m256 scales = _mm256_mul_ps(_mm256_loadu_ps(d + b * kQuadRows), dw);
    const __m256 products = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), scales);
    sum = _mm_add_ps(sum, _mm256_castps256_ps128(products));
    sum = _mm_add_ps(sum, _mm256_extractf128_ps(products, 1));
  }
  if (b < blocks) {
    const __m256i last = QuadBlockAvx2(q + b * kQuadBlockBytes, w_row + b * kBlockBytes);
    const __m256i isum =
        _mm256_permute4x64_epi64(_mm256_hadd_epi32(last, _mm256_setzero_si256()), 0xD8);
    uint16_t half;
    std::memcpy(&half, w_row + b * kBlockBytes, sizeof half);
    const __m128 scales = _mm_mul_ps(_mm_loadu_ps(d + b * kQuadRows), _mm_set1_ps(_cvtsh_ss(half)));
    sum = _mm_add_ps(sum, _mm_mul_ps(_mm_cvtepi32_ps(_mm256_castsi256_si128(isum)), scales));
  }
  _mm_storeu_ps(sums, sum);
}

// --- quantizing x -------------------------------------------------------------------------------

// QuantizeRowQ8Portable's steps on 8 values at a time (it ran as scalar code: 7% of prefill).
// Each lane does the same correctly rounded f32 operations, so the bytes are the same; the
// maximum is exact in any order.
SOVAI_TARGET_INT8_AVX2 void QuantizeRowQ8Avx2(const float* x, int64_t cols, int8_t* q, float* d) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 max_quant = _mm256_set1_ps(127.0f);
  const __m256 half = _mm256_set1_ps(0.5f);
  const int64_t blocks = cols / kBlockValues;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* v = x + b * kBlockValues;
    __m256 values[4];
    __m256 amax = _mm256_setzero_ps();
    __m256 nan = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      values[k] = _mm256_loadu_ps(v + 8 * k);
      // max(|v|, amax): amax when |v| is NaN, as the portable `magnitude > amax` keeps it.
      amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, values[k]), amax);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(values[k], values[k], _CMP_UNORD_Q));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float scale = _mm_cvtss_f32(m) / 127.0f;
    const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    const __m256 inverse_lanes = _mm256_set1_ps(inverse);
    __m256i rounded[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 scaled = _mm256_mul_ps(values[k], inverse_lanes);
      // |scaled| clamped to 127 (NaN to 0), truncated, plus 1 if the fraction is at least 1/2.
      __m256 a = _mm256_andnot_ps(sign_bit, scaled);
      a = _mm256_or_ps(_mm256_and_ps(_mm256_cmp_ps(a, max_quant, _CMP_LT_OQ), a),
                       _mm256_and_ps(_mm256_cmp_ps(a, max_quant, _CMP_GE_OQ), max_quant));
      const __m256i whole = _mm256_cvttps_epi32(a);
      const __m256 up =
          _mm256_cmp_ps(_mm256_sub_ps(a, _mm256_cvtepi32_ps(whole)), half, _CMP_GE_OQ);
      const __m256i magnitude = _mm256_sub_epi32(whole, _mm256_castps_si256(up));  // up: -1
      const __m256i negative =
          _mm256_castps_si256(_mm256_cmp_ps(scaled, _mm256_setzero_ps(), _CMP_LT_OQ));
      rounded[k] = _mm256_sub_epi32(_mm256_xor_si256(magnitude, negative), negative);
    }
    // int32 -> int8 (|q| <= 127: no saturation); the packs interleave 128-bit halves, the
    // permute restores the order.
    const __m256i words = _mm256_packs_epi16(_mm256_packs_epi32(rounded[0], rounded[1]),
                                             _mm256_packs_epi32(rounded[2], rounded[3]));
    const __m256i in_order =
        _mm256_permutevar8x32_epi32(words, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kBlockValues), in_order);
    d[b] = _mm256_movemask_ps(nan) != 0 ? std::numeric_limits<float>::quiet_NaN() : scale;
  }
}

// --- AVX-512 VNNI: 16 rows per tile --------------------------------------------------------------

// GCC 12 warns about the deliberately undefined pass-through operand inside _mm512_cvtepi32_ps.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// neg[b] = -128 * (sum of the weight row's quants in block b): what vpdpbusd over q + 128 counts
// in excess.
SOVAI_TARGET_INT8_VNNI void NegatedCompensationVnni(const uint8_t* w_row, int64_t blocks,
                                                    int32_t* neg) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256i biased = _mm256_xor_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_row + b * kBlockBytes + 2)), flip);
    const __m256i partial = _mm256_sad_epu8(biased, _mm256_setzero_si256());  // 4 x u64
    __m128i total =
        _mm_add_epi64(_mm256_castsi256_si128(partial), _mm256_extracti128_si256(partial, 1));
    total = _mm_add_epi64(total, _mm_unpackhi_epi64(total, total));
    const int32_t sum = _mm_cvtsi128_si32(total) - 128 * static_cast<int32_t>(kBlockValues);
    neg[b] = -128 * sum;
  }
}

// sums[t * G + g][lane] for T consecutive row tiles (T <= 2) and G outputs. Per 4-byte group, T
// activation vectors and G weight broadcasts feed T * G independent accumulators (one vpdpbusd
// each), so loads stay below one per vpdpbusd and no accumulator waits on its previous sum.
template <int T, int G>
SOVAI_TARGET_INT8_VNNI void TileVnni(const uint8_t* q, int64_t q_tile_bytes, const float* d,
                                     int64_t d_tile_floats, const uint8_t* w_rows,
                                     int64_t row_bytes, const float* dw, const int32_t* neg,
                                     int64_t blocks, float (*sums)[kMaxTileRows]) {
  __m512 sum[T][G];
  for (int t = 0; t < T; ++t) {
    for (int g = 0; g < G; ++g) sum[t][g] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i acc[T][G];
    for (int g = 0; g < G; ++g) {
      const __m512i start = _mm512_set1_epi32(neg[g * blocks + b]);
      for (int t = 0; t < T; ++t) acc[t][g] = start;
    }
    const uint8_t* w_block = w_rows + b * kBlockBytes + 2;
#pragma GCC unroll 8
    for (int64_t j = 0; j < kGroups; ++j) {
      __m512i x[T];
      for (int t = 0; t < T; ++t) {
        x[t] = _mm512_loadu_si512(q + t * q_tile_bytes + (b * kGroups + j) * 64);
      }
      for (int g = 0; g < G; ++g) {
        const __m512i w =
            _mm512_set1_epi32(static_cast<int32_t>(LoadU32(w_block + g * row_bytes + j * 4)));
        for (int t = 0; t < T; ++t) acc[t][g] = _mm512_dpbusd_epi32(acc[t][g], x[t], w);
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_loadu_ps(d + t * d_tile_floats + b * 16);
      for (int g = 0; g < G; ++g) {
        const __m512 scale = _mm512_mul_ps(dx, _mm512_set1_ps(dw[g * blocks + b]));
        sum[t][g] = _mm512_add_ps(sum[t][g], _mm512_mul_ps(_mm512_cvtepi32_ps(acc[t][g]), scale));
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(sums[t * G + g], sum[t][g]);
  }
}

template <int T>
void TileVnniAnyCount(int64_t count, const uint8_t* q, int64_t q_tile_bytes, const float* d,
                      int64_t d_tile_floats, const uint8_t* w_rows, int64_t row_bytes,
                      const float* dw, const int32_t* neg, int64_t blocks,
                      float (*sums)[kMaxTileRows]) {
  WithOutputCount(count, [&]<int G>() {
    TileVnni<T, G>(q, q_tile_bytes, d, d_tile_floats, w_rows, row_bytes, dw, neg, blocks, sums);
  });
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // SOVAI_INT8_X86

// Row tiles one pass of a kernel covers. (AVX2 with 2 tiles of 2 outputs against 1 of 4:
// kernels_bench --q8_0, 2 threads, 64 and 256 rows, 4 runs each: 8-16% more GFLOP/s.)
int64_t TilesPerPass(Int8Kernel kernel) {
  return kernel == Int8Kernel::kAvx512Vnni || kernel == Int8Kernel::kAvx2 ? 2 : 1;
}

// `tile_count` (1 to TilesPerPass) row tiles from `tile` on, times `count` (1 to
// kInt8OutputGroup) outputs, into sums[t * count + g][lane].
void TilesTimesOutputs(Int8Kernel kernel, const PackedRows& packed, int64_t tile,
                       int64_t tile_count, const uint8_t* w_rows, int64_t row_bytes,
                       const float* dw, const int32_t* neg, int64_t count,
                       float (*sums)[kMaxTileRows]) {
  static_assert(kInt8OutputGroup == 4);
  const int64_t blocks = packed.blocks;
  const uint8_t* q = packed.Q(tile);
  const float* d = packed.D(tile);
  const int64_t q_tile_bytes = packed.Q(1) - packed.Q(0);
  const int64_t d_tile_floats = packed.D(1) - packed.D(0);
  switch (kernel) {
    case Int8Kernel::kPlain:
      for (int64_t g = 0; g < count; ++g) {
        sums[g][0] = DotPlain(reinterpret_cast<const int8_t*>(q), d, w_rows + g * row_bytes,
                              dw + g * blocks, blocks);
      }
      return;
#if SOVAI_INT8_X86
    case Int8Kernel::kAvx2:
      if (tile_count == 2) {
        return TileAvx2AnyCount<2>(count, q, q_tile_bytes, d, d_tile_floats, w_rows, row_bytes, dw,
                                   blocks, sums);
      }
      return TileAvx2AnyCount<1>(count, q, q_tile_bytes, d, d_tile_floats, w_rows, row_bytes, dw,
                                 blocks, sums);
    case Int8Kernel::kAvx512Vnni: {
      if (tile_count == 2) {
        return TileVnniAnyCount<2>(count, q, q_tile_bytes, d, d_tile_floats, w_rows, row_bytes, dw,
                                   neg, blocks, sums);
      }
      return TileVnniAnyCount<1>(count, q, q_tile_bytes, d, d_tile_floats, w_rows, row_bytes, dw,
                                 neg, blocks, sums);
    }
    case Int8Kernel::kAvx2Rows:
    case Int8Kernel::kAvx2Quads:
      SOVAI_CHECK(false) << "the row and quad kernels have no tiles";
#else
    default:
      SOVAI_CHECK(false) << "no SIMD int8 kernels in this build";
#endif
  }
}

#if SOVAI_INT8_X86
// F16C by CPUID (clang 14's __builtin_cpu_supports does not know it).
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

bool RunsHere(Int8Kernel kernel) {
#if SOVAI_INT8_X86
  static const bool f16c = CpuHasF16c();
  switch (kernel) {
    case Int8Kernel::kPlain:
      return true;
    case Int8Kernel::kAvx2:
      return __builtin_cpu_supports("avx2") && f16c;
    case Int8Kernel::kAvx512Vnni:
      return f16c && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vnni");
    case Int8Kernel::kAvx2Rows:
    case Int8Kernel::kAvx2Quads:
      return __builtin_cpu_supports("avx2") && f16c;
  }
  return false;
#else
  return kernel == Int8Kernel::kPlain;
#endif
}

}  // namespace

Int8Kernel Int8KernelFor(Isa isa) {
  // Context lowers its isa to what the CPU supports, so kAvx2 and kAvx512 are safe to trust.
  if (isa == Isa::kAvx512 && RunsHere(Int8Kernel::kAvx512Vnni)) return Int8Kernel::kAvx512Vnni;
  if (isa >= Isa::kAvx2 && RunsHere(Int8Kernel::kAvx2)) return Int8Kernel::kAvx2;
  return Int8Kernel::kPlain;
}

Int8Kernel Int8KernelForRows(Int8Kernel widest, int64_t rows) {
  // A tile costs the same for 1 row as for L; the row kernel's cost grows with the rows (per
  // block and row: 5 operations, plus about 4 for the sums and the in-order adds; the weight
  // scales are shared by the up to 4 rows of a pass), against 8 groups of 6 for the AVX2 tile's 8
  // rows. The quad kernel is a tile of 4 rows, 8 columns per lane pair: 4 steps of 6 per block
  // and 4 rows, one horizontal add per 2 blocks. Measured (kernels_bench --q8_0, AVX2, 2 threads;
  // up and down from cache, the output head from memory): the row kernel is 2.0-3.3x faster than
  // the tile at 1 row, 1.5-2.1x at 2 (the quads 0.6-1.1x of it there); at 4 rows the quads are
  // 1.2-1.6x faster than the row kernel, at 3 rows 1.2-1.35x on up and the head, level on down.
  // At 6-8 rows the tile is faster on up from cache and the quads on the head from memory; in
  // the server (8 streams) either gave the same tokens/s, so the tile keeps them. VNNI tiles are
  // 16 lanes for 2 operations a group: the row kernel is worth it at 1 row only.
  constexpr int64_t kAvx2RowKernelMaxRows = 2;
  constexpr int64_t kAvx2QuadKernelMaxRows = kQuadRows;
  constexpr int64_t kVnniRowKernelMaxRows = 1;
  switch (widest) {
    case Int8Kernel::kAvx2:
      if (rows <= kAvx2RowKernelMaxRows) return Int8Kernel::kAvx2Rows;
      return rows <= kAvx2QuadKernelMaxRows ? Int8Kernel::kAvx2Quads : widest;
    case Int8Kernel::kAvx512Vnni:
      return rows <= kVnniRowKernelMaxRows ? Int8Kernel::kAvx2Rows : widest;
    default:
      return widest;
  }
}

int64_t Int8TileRows(Int8Kernel kernel) {
  switch (kernel) {
    case Int8Kernel::kPlain:
    case Int8Kernel::kAvx2Rows:
      return 1;
    case Int8Kernel::kAvx2Quads:
      return kQuadRows;
    case Int8Kernel::kAvx2:
      return 8;
    case Int8Kernel::kAvx512Vnni:
      return 16;
  }
  return 1;
}

// Compiled per instruction set; every step is one correctly rounded f32 operation or an exact
// integer one, so every version (and QuantizeRowQ8Avx2) gives the same bytes.
SOVAI_CPU_CLONES void QuantizeRowQ8Portable(const float* x, int64_t cols, int8_t* q, float* d) {
  const int64_t blocks = cols / kBlockValues;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* v = x + b * kBlockValues;
    int8_t* out = q + b * kBlockValues;
    // max |x| as QuantizeRowQ8_0 takes it for finite values; NaN is tracked apart (ggml's running
    // maximum would drop a NaN that is followed by a larger value).
    float amax = 0.0f;
    int nan = 0;
    for (int64_t k = 0; k < kBlockValues; ++k) {
      const float magnitude = std::fabs(v[k]);
      amax = magnitude > amax ? magnitude : amax;
      nan |= v[k] != v[k];
    }
    const float scale = amax / 127.0f;
    const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    for (int64_t k = 0; k < kBlockValues; ++k) {
      const float scaled = v[k] * inverse;
      // roundf(|scaled|) clamped to 127 (NaN to 0): truncate, then add 1 if the fraction (exact:
      // a - trunc(a) for a < 2^23) is at least one half, which is round-half-away-from-zero.
      float a = std::fabs(scaled);
      a = a < 127.0f ? a : (a >= 127.0f ? 127.0f : 0.0f);
      const int32_t whole = static_cast<int32_t>(a);
      const int32_t rounded = whole + (a - static_cast<float>(whole) >= 0.5f ? 1 : 0);
      out[k] = static_cast<int8_t>(scaled < 0.0f ? -rounded : rounded);
    }
    d[b] = nan != 0 ? std::numeric_limits<float>::quiet_NaN() : scale;
  }
}

void QuantizeRowQ8(const float* x, int64_t cols, int8_t* q, float* d) {
#if SOVAI_INT8_X86
  static const bool avx2 = RunsHere(Int8Kernel::kAvx2);
  if (avx2) return QuantizeRowQ8Avx2(x, cols, q, d);
#endif
  QuantizeRowQ8Portable(x, cols, q, d);
}

void Q8_0ProductInt8(Context& context, float* out, const float* x, const WeightRef& w, int64_t n,
                     float beta) {
  Q8_0ProductInt8With(Int8KernelForRows(Int8KernelFor(context.isa()), n), context, out, x, w, n,
                      beta);
}

namespace {

// The setup of Q8_0ProductInt8With: x[n][in] quantized once per call into the kernel's layout in
// the context's shared buffer, and the per-thread scratch reserved for the product's tasks.
PackedRows PackActivations(Int8Kernel kernel, Context& context, const float* x, int64_t n,
                           int64_t in, bool plus_128) {
  const int64_t blocks = in / kBlockValues;
  // x quantized once per call, in the kernel's layout: [tiles * L * blocks] scales, then the bytes.
  PackedRows packed;
  packed.lanes = Int8TileRows(kernel);
  packed.granule = kernel == Int8Kernel::kAvx2Quads ? kQuadGranule : 4;
  packed.blocks = blocks;
  const int64_t tiles = (n + packed.lanes - 1) / packed.lanes;
  const int64_t scale_count = tiles * packed.lanes * blocks;
  const int64_t byte_count = tiles * packed.lanes * in;
  float* shared =
      context.Shared(Context::Slot::kD, static_cast<size_t>(scale_count + (byte_count + 3) / 4));
  packed.d = shared;
  packed.q = reinterpret_cast<uint8_t*>(shared + scale_count);
  if (n % packed.lanes != 0) {
    // The padding lanes: q = 0 (stored as 128 for VNNI) and d = 0, so their sums stay 0.
    const int64_t last = tiles - 1;
    std::memset(packed.Q(last), plus_128 ? 0x80 : 0, static_cast<size_t>(packed.lanes * in));
    std::fill_n(packed.D(last), packed.lanes * blocks, 0.0f);
  }

  // Per-thread scratch: a row's q and d before interleaving, then a task's weight scales (f32)
  // and VNNI's compensations (int32, in the same float buffer).
  const int64_t row_floats = blocks + (in + 3) / 4;
  const int64_t task_floats = 2 * kQ8_0OutputTile * blocks;
  context.ReserveThreadScratch(static_cast<size_t>(std::max(row_floats, task_floats)));

  ParallelRanges(
      context, n, kMinQuantizeRowsPerThread, [&](int64_t begin, int64_t end, int thread) {
        float* row_d = context.ThreadScratch(thread);
        auto* row_q = reinterpret_cast<int8_t*>(row_d + blocks);
        for (int64_t r = begin; r < end; ++r) {
          if (packed.lanes == 1) {
            QuantizeRowQ8(x + r * in, in, reinterpret_cast<int8_t*>(packed.Q(r)), packed.D(r));
          } else {
            QuantizeRowQ8(x + r * in, in, row_q, row_d);
            Interleave(packed, r, row_q, row_d, plus_128);
          }
        }
      });
  return packed;
}

}  // namespace

void Q8_0ProductInt8With(Int8Kernel kernel, Context& context, float* out, const float* x,
                         const WeightRef& w, int64_t n, float beta) {
  SOVAI_CHECK(RunsHere(kernel)) << "int8 kernel " << static_cast<int>(kernel)
                                << " needs instructions this CPU lacks";
  SOVAI_CHECK_EQ(w.cols % kBlockValues, int64_t{0}) << "Q8_0 rows are whole blocks of 32";
  if (n <= 0 || w.rows <= 0) return;
  const int64_t in = w.cols;
  const int64_t out_features = w.rows;
  const int64_t blocks = in / kBlockValues;
  const int64_t row_bytes = blocks * kBlockBytes;
  const auto* weights = static_cast<const uint8_t*>(w.data);
  const bool plus_128 = kernel == Int8Kernel::kAvx512Vnni;

  // x quantized once per call; the tiles of packed.lanes rows it is read in.
  const PackedRows packed = PackActivations(kernel, context, x, n, in, plus_128);
  const int64_t tiles = (n + packed.lanes - 1) / packed.lanes;

  // Tasks are tiles of kQ8_0OutputTile outputs, as Q8_0Product's: the tile's weights stay in
  // cache while every row (or row tile) passes them.
  const int64_t output_tiles = (out_features + kQ8_0OutputTile - 1) / kQ8_0OutputTile;
  // out[row, first_output + g] (+)= sums[g * stride] for g < count, read straight from the
  // kernel's sums: staging a row's sums in a small array first made the compiler read them back
  // as one vector, a stalled store forwarding that took a tenth of prefill.
  const auto store = [&](int64_t row, int64_t first_output, const float* sums, int64_t stride,
                         int64_t count) {
    float* dst = out + row * out_features + first_output;
    if (beta == 0) {
      for (int64_t g = 0; g < count; ++g) dst[g] = sums[g * stride];
    } else {
      for (int64_t g = 0; g < count; ++g) dst[g] = dst[g] + sums[g * stride];
    }
  };
#if SOVAI_INT8_X86
  if (kernel == Int8Kernel::kAvx2Rows || kernel == Int8Kernel::kAvx2Quads) {
    // Each thread takes one contiguous range of weight rows: one sequential stream per core for
    // the whole product. (Tiles of 16 rows handed out one at a time, as the tile kernel's tasks
    // are, made each thread's reads jump every 16 rows; the output head from memory measured
    // 12.0-12.3 ms against 13.5-14.4 at 1 row, 14-17 against 18 at 2.)
    ParallelRanges(context, out_features, kQ8_0OutputTile, [&](int64_t o0, int64_t o1, int) {
      for (int64_t o = o0; o < o1; ++o) {
        const uint8_t* w_row = weights + o * row_bytes;
        if (kernel == Int8Kernel::kAvx2Quads) {
          for (int64_t tile = 0; tile < tiles; ++tile) {
            float sums[kQuadRows];
            QuadDotAvx2(packed.Q(tile), packed.D(tile), w_row, blocks, sums);
            const int64_t first_row = tile * kQuadRows;
            for (int64_t r = 0; r < std::min(kQuadRows, n - first_row); ++r) {
              store(first_row + r, o, &sums[r], 1, 1);
            }
          }
          continue;
        }
        for (int64_t r0 = 0; r0 < n; r0 += kMaxRowsPerPass) {
          const int64_t rows = std::min(kMaxRowsPerPass, n - r0);
          const int8_t* qx[kMaxRowsPerPass];
          const float* dx[kMaxRowsPerPass];
          for (int64_t r = 0; r < rows; ++r) {
            qx[r] = reinterpret_cast<const int8_t*>(packed.Q(r0 + r));
            dx[r] = packed.D(r0 + r);
          }
          float sums[kMaxRowsPerPass];
          switch (rows) {
            case 1:
              RowsDotAvx2<1>(qx, dx, w_row, blocks, sums);
              break;
            case 2:
              RowsDotAvx2<2>(qx, dx, w_row, blocks, sums);
              break;
            case 3:
              RowsDotAvx2<3>(qx, dx, w_row, blocks, sums);
              break;
            default:
              RowsDotAvx2<4>(qx, dx, w_row, blocks, sums);
              break;
          }
          for (int64_t r = 0; r < rows; ++r) store(r0 + r, o, &sums[r], 1, 1);
        }
      }
    });
    return;
  }
#endif
  ParallelTasks(context, output_tiles, [&](int64_t task, int thread) {
    const int64_t o0 = task * kQ8_0OutputTile;
    const int64_t o1 = std::min(out_features, o0 + kQ8_0OutputTile);
    float* dw = context.ThreadScratch(thread);                              // [o1 - o0][blocks]
    auto* neg = reinterpret_cast<int32_t*>(dw + kQ8_0OutputTile * blocks);  // [o1 - o0][blocks]
    for (int64_t o = o0; o < o1; ++o) {
      const uint8_t* row = weights + o * row_bytes;
      float* row_dw = dw + (o - o0) * blocks;
#if SOVAI_INT8_X86
      if (kernel != Int8Kernel::kPlain) {
        BlockScalesF16c(row, blocks, row_dw);
        if (plus_128) NegatedCompensationVnni(row, blocks, neg + (o - o0) * blocks);
        continue;
      }
#endif
      for (int64_t b = 0; b < blocks; ++b) row_dw[b] = BlockScale(row + b * kBlockBytes);
    }
    float sums[kMaxTilesPerPass * kInt8OutputGroup][kMaxTileRows];
    const int64_t pass = TilesPerPass(kernel);
    for (int64_t tile = 0; tile < tiles; tile += pass) {
      const int64_t tile_count = std::min(pass, tiles - tile);
      for (int64_t og = o0; og < o1; og += kInt8OutputGroup) {
        const int64_t count = std::min(kInt8OutputGroup, o1 - og);
        TilesTimesOutputs(kernel, packed, tile, tile_count, weights + og * row_bytes, row_bytes,
                          dw + (og - o0) * blocks, neg + (og - o0) * blocks, count, sums);
        for (int64_t t = 0; t < tile_count; ++t) {
          const int64_t first_row = (tile + t) * packed.lanes;
          const int64_t rows = std::min(packed.lanes, n - first_row);
          for (int64_t lane = 0; lane < rows; ++lane) {
            store(first_row + lane, og, &sums[t * count][lane], kMaxTileRows, count);
          }
        }
      }
    }
  });
}

}  // namespace sovai::kernels::cpu
