// Private to the cpu backend: products of Q8_0 weights with activations quantized to 8 bits, as
// llama.cpp computes them (the default for Q8_0 weights; Q8_0Product in inference.h keeps the
// activations in f32).
//
// Each row of x is cut into blocks of 32 values and quantized like a Q8_0 weight (QuantizeRowQ8:
// the same q as QuantizeRowQ8_0, the scale kept in f32). A product of a weight row w and an
// activation row x is then, block by block from left to right,
//
//   isum = sum_k qw[k] * qx[k]                  (exact, in int32: |isum| <= 32 * 128 * 127)
//   sum  = sum + float(isum) * (dx * dw)        (three f32 roundings, no fused multiply-add)
//
// starting from sum = 0, with dw the weight block's half scale widened to f32. Every kernel
// (AVX-512 VNNI, AVX2, plain C++) computes exactly this for every (row, output) pair, only many
// pairs at a time in vector lanes, so the result is bit-identical whichever kernel runs, whatever
// the number of rows, which other rows share the batch and how many threads split the outputs.
//
// Kernels: the activations are stored as tiles of L rows (16 for VNNI, 8 for AVX2, 1 plain), each
// 4-byte group of a block interleaved across the tile's rows, so that one integer instruction
// multiplies a broadcast group of 4 weight bytes with the same group of L rows and accumulates one
// int32 per row (no horizontal sums). VNNI's vpdpbusd multiplies unsigned by signed bytes: the
// activations are stored plus 128 and the accumulator starts from -128 * sum(qw) of the block.
// AVX2 multiplies |qw| by qx with qw's sign (vpmaddubsw cannot saturate: |qx| <= 127). A task
// computes a tile of kQ8_0OutputTile outputs for every row tile, two row tiles and up to
// kInt8OutputGroup outputs per pass.
//
// A tile pads a batch smaller than L with rows of zeros, whose products cost as much as real ones:
// decode (one row per running sequence) would spend 7/8 (AVX2) or 15/16 (VNNI) of its work on
// padding. Batches of 1-2 rows therefore take the row kernel (kAvx2Rows): up to 4 rows against one
// weight row at a time, which they read front to back sharing its scales (each thread takes one
// contiguous range of weight rows: one sequential stream per core), 32 bytes of a block per
// instruction, 8 blocks' sums gathered into one vector by a tree of integer horizontal adds
// (exact), their f32 products formed in the lanes as the tiles form them, then added to each
// row's sum block after block in order. Same formula, same bits. Batches of 3 and 4 rows take the
// quad kernel (kAvx2Quads): a tile of 4 rows whose lanes pair up, 8 bytes of a row per pair, so
// that one broadcast of 8 weight bytes serves the 4 rows; one horizontal add per 2 blocks joins
// the pairs, and the weight rows are read as the row kernel reads them.
//
// Accuracy: quantizing x adds an error of at most dx / 2 per value (dx = max |x| / 127 of its
// block), so against the f32-activation product a row's outputs move by a relative error of about
// 0.3% to 1% of their typical size (kernels_q8_0_int8_test measures it), as llama.cpp's do.
//
// Thread-safety: as Context (one op at a time).
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/context.h"

namespace sovai::kernels::cpu {

// The kernels, by the instruction set they need.
enum class Int8Kernel : uint8_t {
  kPlain,       // any CPU
  kAvx2,        // AVX2
  kAvx512Vnni,  // AVX-512 F/BW and VNNI
  kAvx2Rows,    // AVX2, one row at a time (small batches)
  kAvx2Quads,   // AVX2, 4 rows at a time (small batches)
};
// The widest kernel for a context limited to `isa` on this CPU (VNNI needs kAvx512 and the CPU's
// avx512vnni flag).
Int8Kernel Int8KernelFor(Isa isa);
// The kernel Q8_0ProductInt8 runs for a batch of `rows` when `widest` is the widest this context
// allows: the row kernel for batches too small to fill a tile (whose padding would cost more than
// the row kernel's extra horizontal adds), `widest` otherwise.
Int8Kernel Int8KernelForRows(Int8Kernel widest, int64_t rows);
// Rows of x per tile for `kernel` (1 for the row kernel).
int64_t Int8TileRows(Int8Kernel kernel);

// Outputs that share one pass over a tile's activations.
inline constexpr int64_t kInt8OutputGroup = 4;

// Quantizes x[cols] (cols a multiple of 32) block by block: q[cols] exactly as QuantizeRowQ8_0
// computes them, d[cols / 32] = max |x| / 127 of the block in f32 (not rounded to a half). A block
// holding a NaN gets d = NaN (so its products are NaN, as in f32), and q = 0 for the NaN values.
void QuantizeRowQ8(const float* x, int64_t cols, int8_t* q, float* d);
// The same without SIMD intrinsics (tests compare them).
void QuantizeRowQ8Portable(const float* x, int64_t cols, int8_t* q, float* d);

// out[N, O] (+)= x[N, I] @ w[O, I]^T for a Q8_0 weight (beta 0: overwrite, 1: add to out), by the
// int8 kernel for the context's instruction set.
void Q8_0ProductInt8(Context& context, float* out, const float* x, const WeightRef& w, int64_t n,
                     float beta);
// The same with a chosen kernel (tests compare them; `kernel` must run on this CPU).
void Q8_0ProductInt8With(Int8Kernel kernel, Context& context, float* out, const float* x,
                         const WeightRef& w, int64_t n, float beta);

}  // namespace sovai::kernels::cpu
