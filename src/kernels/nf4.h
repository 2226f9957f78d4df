// NF4 quantization on the host, bit-compatible with bitsandbytes'
// quantize_4bit(quant_type="nf4", blocksize=64, compress_statistics=True) (its CUDA kernels
// kQuantizeBlockwise, dQuantizeNF4 and dQuantize); docs/formats/nf4.md describes the layout and
// what "bit-compatible" covers. Quantization runs once, when a model is loaded for QLoRA; the
// backends only dequantize (Backend::Nf4Dequantize, and on the fly inside LinearForward).
//
//   SOVAI_ASSIGN_OR_RETURN(Nf4Quantized q, QuantizeNf4(weights));   // weights: span of f32
//   WeightRef w{.format = WeightRef::Format::kNF4, .nf4 = q.View(), .rows = O, .cols = I};
//
// Limits: numel a positive multiple of 64 and at most kMaxNf4Elements; every value finite. A
// violation is an InvalidArgument naming the element or the size.
//
// Thread-safety: pure functions; an Nf4Quantized is a value.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "kernels/backend.h"

namespace sovai::kernels {

// 2^36 elements (256 GiB of f32): far above any single weight matrix, small enough that every
// index and count below fits comfortably in int64_t and size_t.
inline constexpr int64_t kMaxNf4Elements = int64_t{1} << 36;

// The 16 NF4 values (QLoRA, Appendix E), as the f32 literals of bitsandbytes' dDequantizeNF4.
// Code 7 is exactly 0 and code 15 exactly 1; the table is asymmetric (8 positive values).
inline constexpr std::array<float, 16> kNf4Values = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// The NF4 code of a value already divided by its block's absmax (so in [-1, 1]): the nearest of
// kNf4Values, decided by bitsandbytes' comparison tree whose thresholds are the midpoints of
// adjacent values; a value exactly on a midpoint takes the LOWER code (every test is `x > t`).
// NaN fails every test and gets code 0, as in bitsandbytes.
uint8_t Nf4Encode(float normalized);

// bitsandbytes' signed dynamic map, create_dynamic_map(signed=True): 127 negative values, 0,
// 127 positive values below 1, and 1, ascending. bitsandbytes computes it with torch.linspace in
// f32, whose rounding depends on PyTorch's CPU kernels; this is the map PyTorch's x86-64 AVX2
// kernels produce (verified against PyTorch by tests/reference/ops_golden.py). It differs from
// the exactly rounded values of the formula in the last bit of 90 entries.
const std::array<float, Nf4Weight::kAbsmaxMapSize>& BitsandbytesDynamicMap();

// The 8-bit code of x (already divided by its block's absmax) in an ascending 256-entry map, by
// bitsandbytes' dQuantize<0>: a 7-step binary search, then the nearer of the two neighbours by
// f32 midpoint, a value on a midpoint going to the entry the search ended on.
uint8_t DynamicMapEncode(const std::array<float, Nf4Weight::kAbsmaxMapSize>& map, float x);

// An NF4 weight that owns its buffers.
struct Nf4Quantized {
  int64_t numel = 0;
  std::vector<uint8_t> codes;         // [numel / 2]
  std::vector<uint8_t> absmax_codes;  // [numel / 64]
  std::vector<float> absmax_scales;   // [ceil(numel / 64 / 256)]
  std::array<float, Nf4Weight::kAbsmaxMapSize> absmax_map{};
  float absmax_offset = 0;

  // Pointers into this object: valid while it lives at this address (moving it invalidates
  // absmax_map's pointer).
  Nf4Weight View() const;
};

// Quantizes values[numel] (row-major, as the weight's elements) with BitsandbytesDynamicMap():
//   absmax[b]  = max |x| over block b of 64 elements
//   code(e)    = Nf4Encode(x[e] * (1 / absmax[b]))  (the reciprocal in f32 first, as bitsandbytes)
//   offset     = mean(absmax)     (summed in double, rounded once to f32)
//   scale[s]   = max |absmax[b] - offset| over block s of 256 absmaxes
//   absmax_code[b] = DynamicMapEncode(map, (absmax[b] - offset) * (1 / scale[s]))
// A block whose absmax (or scale) is 0 gets code 0 everywhere, as bitsandbytes' 0 * (1 / 0) = NaN
// does there.
base::Result<Nf4Quantized> QuantizeNf4(std::span<const float> values);

// out[numel] = the values w stands for, by the formula at Nf4Weight (every operation in f32, in
// the order bitsandbytes' dequantize_4bit runs them). numel a multiple of 64. The reference
// backend's Nf4Dequantize is this function.
void DequantizeNf4(const Nf4Weight& w, int64_t numel, float* out);

}  // namespace sovai::kernels
