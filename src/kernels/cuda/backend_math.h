// The per-element arithmetic of the CUDA backend (cuda_backend.h), as __host__ __device__
// functions: the kernels in cuda_backend_kernels.cu call them on the device, and
// backend_math_test.cc checks them on the host against the reference backend and the shared
// definitions of backend.h (DropoutKeep, the NF4 and Q8_0 layouts), so that most of a kernel's
// math is tested in every build, with or without a GPU.
//
// Every function is pure and follows backend.h's formulas term by term. Thread-safety: pure.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SOVAI_HD __host__ __device__ __forceinline__
#else
#define SOVAI_HD inline
#endif

namespace sovai::kernels::cuda::math {

// splitmix64's finalizer, as kernels::SplitMix64 (backend.cc).
SOVAI_HD uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// What element `index` of a LoRA input is multiplied by: 0 when dropped, 1 / (1 - p) when kept,
// 1 without dropout (p <= 0): backend.h's Dropout and the reference's DropoutFactor.
SOVAI_HD float DropoutFactor(uint64_t seed, uint64_t index, float probability) {
  if (probability <= 0) return 1.0f;
  const uint64_t h = SplitMix64(seed ^ SplitMix64(index));
  const float u = static_cast<float>(h >> 40) * 0x1p-24f;
  if (!(u >= probability)) return 0.0f;
  return 1.0f / (1.0f - probability);
}

// The float a bfloat16's bits stand for (exact).
SOVAI_HD float Bf16ToFloat(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  memcpy(&value, &word, sizeof(value));
  return value;
}

// The float an IEEE half's bits stand for (exact, subnormals, infinities and NaN included): the
// scale of a Q8_0 block.
SOVAI_HD float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // zero or subnormal: m * 2^-24
  } else if (exponent == 31) {
    const uint32_t word = 0x7f800000u | (mantissa << 13);
    memcpy(&magnitude, &word, sizeof(magnitude));
  } else {
    const uint32_t word = ((exponent + 112u) << 23) | (mantissa << 13);
    memcpy(&magnitude, &word, sizeof(magnitude));
  }
  uint32_t word;
  memcpy(&word, &magnitude, sizeof(word));
  word |= sign;
  memcpy(&magnitude, &word, sizeof(magnitude));
  return magnitude;
}

// Element e of a Q8_0 array (blocks of 32 values, 34 bytes each: a little-endian half scale,
// then 32 signed bytes), row-major over whole rows, so element e is in block e / 32.
SOVAI_HD float Q8_0Value(const uint8_t* blocks, int64_t e) {
  const uint8_t* block = blocks + (e / 32) * 34;
  const uint16_t scale_bits = static_cast<uint16_t>(block[0] | (block[1] << 8));
  return HalfToFloat(scale_bits) * static_cast<float>(static_cast<int8_t>(block[2 + e % 32]));
}

// The 4-bit code of element e of an NF4 weight: the high nibble of codes[e / 2] for even e.
SOVAI_HD uint8_t Nf4Code(const uint8_t* codes, int64_t e) {
  const uint8_t byte = codes[e / 2];
  return (e % 2 == 0) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0x0f);
}

// sigmoid(g) = 1 / (1 + exp(-g)).
SOVAI_HD float Sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }
// silu(g) * up.
SOVAI_HD float SwiGlu(float gate, float up) { return gate * Sigmoid(gate) * up; }
// d/dgate of silu(gate) * up, times dout: dout * up * s * (1 + g * (1 - s)).
SOVAI_HD float SwiGluGradGate(float dout, float gate, float up) {
  const float s = Sigmoid(gate);
  return dout * up * s * (1.0f + gate * (1.0f - s));
}
// d/dup of silu(gate) * up, times dout.
SOVAI_HD float SwiGluGradUp(float dout, float gate) { return dout * gate * Sigmoid(gate); }

// The rotate-half rotation of the pair (x1, x2) = (x[i], x[i + D/2]) by angle; sign = -1 rotates
// by the opposite angle (RoPE's backward pass).
struct Pair {
  float first;
  float second;
};
SOVAI_HD Pair Rotate(float x1, float x2, float cos_a, float sin_a, float sign) {
  const float s = sign * sin_a;
  return Pair{x1 * cos_a - x2 * s, x2 * cos_a + x1 * s};
}

// Whether position i may attend to position j of the same sequence (backend.h's attention mask):
// causal, inside the window when window > 0, and in the same packed segment (seg_i, seg_j;
// pass equal values when there are no segments).
SOVAI_HD bool AttentionVisible(int64_t i, int64_t j, int64_t window, int32_t seg_i, int32_t seg_j) {
  if (j > i) return false;
  if (window > 0 && i - j >= window) return false;
  return seg_i == seg_j;
}

}  // namespace sovai::kernels::cuda::math
