// Private to the cpu backend: the choices a backend is made with that change its arithmetic.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>

namespace sovai::kernels::cpu {

// How LinearForward multiplies activations with Q8_0 weights: quantized to 8 bits per block of 32
// and multiplied in integers (q8_0_int8.h, as llama.cpp does; the default), or kept in f32 with
// the weights widened to f32 in registers (inference.h: more precise, slower on prefill).
enum class Q8_0Activations : uint8_t { kInt8, kF32 };

}  // namespace sovai::kernels::cpu
