// Q8_0: ggml's 8-bit block quantization, as GGUF files store it (ggml type 8).
//
// A row of float values is cut into blocks of 32 consecutive values. Each block is stored as
// 34 bytes: the scale d as an IEEE half (little-endian), then 32 signed bytes q. A value is
// d * q. Quantization follows ggml's reference quantize_row_q8_0_ref exactly, so that a file we
// write holds the same bytes llama.cpp's converter would:
//
//   amax = max |x|                      (over the block, in float)
//   d    = amax / 127                   (float division)
//   id   = d != 0 ? 1 / d : 0           (float)
//   q[j] = roundf(x[j] * id)            (round half away from zero, not to even)
//   store half(d)                       (round to nearest even)
//
// Note that q is computed with the float d, not the rounded half, so |q| <= 127 always, and the
// error of a dequantized value is at most d/2 plus the error of rounding d to a half
// (|x - half(d) * q| <= d/2 + 127 * |d - half(d)|).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace sovai::kernels {

inline constexpr size_t kQ8_0BlockValues = 32;
inline constexpr size_t kQ8_0BlockBytes = 2 + kQ8_0BlockValues;

// Bytes of `values` floats in Q8_0. `values` must be a multiple of kQ8_0BlockValues.
constexpr size_t Q8_0Bytes(size_t values) { return values / kQ8_0BlockValues * kQ8_0BlockBytes; }

// Quantizes `x` (a multiple of 32 values) into `out` (exactly Q8_0Bytes(x.size()) bytes). Other
// sizes are a bug (checked). NaN inputs give unspecified (but in-range) bytes.
void QuantizeRowQ8_0(std::span<const float> x, std::span<uint8_t> out);

// The inverse: `in` is a whole number of blocks, `out` has 32 floats per block.
void DequantizeRowQ8_0(std::span<const uint8_t> in, std::span<float> out);

}  // namespace sovai::kernels
