// Private to the cpu backend: the sums of 8 AVX2 vectors, each reduced to one lane, for kernels
// that compute 8 dot products side by side (one vector of partial sums each) and want the 8 dots
// in one vector, without a horizontal reduction per dot.
//
// Per 128-bit half, hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3]: two levels leave the sums of
// vectors 0-3 (and 4-7) in order, split between the two halves; adding the halves finishes them.
// Lane i of the result is the sum of v[i]'s 8 lanes. Integer sums are exact (whatever the order);
// float sums round in this tree's order, the same for every call.
//
// Only for x86-64 with GCC or clang: callers compiled for AVX2 (or more) include it.
#pragma once

#include <immintrin.h>

namespace sovai::kernels::cpu {

__attribute__((target("avx2"))) inline __m256i SumEachOf8(const __m256i (&v)[8]) {
  const __m256i h0123 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i h4567 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                          _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

__attribute__((target("avx"))) inline __m256 SumEachOf8(const __m256 (&v)[8]) {
  const __m256 h0123 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 h4567 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                       _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

}  // namespace sovai::kernels::cpu
