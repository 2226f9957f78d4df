// Private to the cpu backend: what makes its loops vectorize on any x86-64.
//
// * SOVAI_CPU_CLONES compiles a function three times (AVX-512, AVX2+FMA, baseline SSE2) and picks
//   one at load time by the CPU's features (GCC's target_clones), so the binary stays portable and
//   still uses the wide units where they exist. Put it on the outer function of a hot loop nest;
//   the inline helpers it calls are compiled for each clone's target.
// * Where the code itself must differ by target (attention's register blocking: AVX-512 has 32
//   vector registers, AVX2 16), SOVAI_TARGET_AVX512 / SOVAI_TARGET_AVX2 mark hand-made variants
//   and CpuIsa() picks one at run time.
// * ExpF is exp(x) written without calls or branches, so that a loop over it vectorizes (glibc's
//   expf is a call the vectorizer cannot widen without -ffast-math).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SOVAI_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define SOVAI_TARGET_AVX512 __attribute__((target("arch=x86-64-v4")))
#define SOVAI_TARGET_AVX2 __attribute__((target("arch=x86-64-v3")))
#else
// Clang spells target_clones differently and other architectures need other targets: one
// baseline version there.
#define SOVAI_CPU_CLONES
#define SOVAI_TARGET_AVX512
#define SOVAI_TARGET_AVX2
#endif

namespace sovai::kernels::cpu {

// The x86-64 microarchitecture levels the SOVAI_TARGET_* variants are compiled for.
enum class Isa : uint8_t {
  kBaseline,  // x86-64 (SSE2), or not x86
  kAvx2,      // x86-64-v3: AVX2, FMA
  kAvx512,    // x86-64-v4: AVX-512 F/BW/CD/DQ/VL
};

// The highest level this CPU supports (detected once).
inline Isa CpuIsa() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const Isa isa = __builtin_cpu_supports("x86-64-v4")   ? Isa::kAvx512
                         : __builtin_cpu_supports("x86-64-v3") ? Isa::kAvx2
                                                               : Isa::kBaseline;
  return isa;
#else
  return Isa::kBaseline;
#endif
}

// exp(x) in f32 to within 2 ulp (for |x| < 87: Cody-Waite reduction x = n ln2 + r with
// |r| <= ln2 / 2, then the degree-7 Taylor polynomial of e^r, whose truncation error r^8 / 8! is
// below 2^-27 there, scaled by 2^n through the exponent bits). Returns exactly 0 for x < -87.3
// (and for -inf, as masked attention scores need), +inf for x > 88.7; NaN stays NaN.
inline float ExpF(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // the high bits of ln 2: n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kMaxInput = 88.7f;
  constexpr float kMinInput = -87.3f;
  const float clamped = x > kMaxInput ? kMaxInput : (x < kMinInput ? kMinInput : x);
  const float shifted = clamped * kLog2e + kRoundMagic;
  const float n = shifted - kRoundMagic;
  const float r = (clamped - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t n_int;
  std::memcpy(&n_int, &shifted, sizeof n_int);
  n_int -= 0x4B400000;  // the bits of kRoundMagic: what remains is n
  // 2^n as two factors so that n = 128 (x near 88.7) does not overflow the exponent field.
  const int32_t half = n_int >> 1;
  const int32_t bits_a = (half + 127) << 23;
  const int32_t bits_b = (n_int - half + 127) << 23;
  float scale_a;
  float scale_b;
  std::memcpy(&scale_a, &bits_a, sizeof scale_a);
  std::memcpy(&scale_b, &bits_b, sizeof scale_b);
  // Selects, not branches, so that loops over ExpF stay branch-free and vectorize.
  float result = p * scale_a * scale_b;
  result = x < kMinInput ? 0.0f : result;
  result = x > kMaxInput ? __builtin_inff() : result;
  return x != x ? x : result;
}

// sum over e < count of term(e), accumulated in double in kDoubleLanes independent partial sums
// (a form the vectorizer widens for every target; an OpenMP simd reduction over double does not
// vectorize for AVX2 with GCC 12). term(e) returns double.
inline constexpr int kDoubleLanes = 8;
template <typename Term>
inline __attribute__((always_inline)) double SumInDouble(int64_t count, Term&& term) {
  double lanes[kDoubleLanes] = {};
  int64_t e = 0;
  for (; e + kDoubleLanes <= count; e += kDoubleLanes) {
#pragma GCC unroll 8
    for (int lane = 0; lane < kDoubleLanes; ++lane) lanes[lane] += term(e + lane);
  }
  double sum = 0;
  for (; e < count; ++e) sum += term(e);
  for (int lane = 0; lane < kDoubleLanes; ++lane) sum += lanes[lane];
  return sum;
}

}  // namespace sovai::kernels::cpu
