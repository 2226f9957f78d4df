// Private to the cpu backend, its tests and benchmarks: the backend with a chosen instruction-set
// level for its hand-specialized kernels (attention tiles, int8 products), so that a test on an
// AVX-512 machine also runs the AVX2 and baseline variants, and with a chosen way of multiplying
// Q8_0 weights. Everything else uses backend.h's NewCpuBackend.
//
// Thread-safety: as any Backend (one thread at a time).
#pragma once

#include <memory>

#include "kernels/backend.h"
#include "kernels/cpu/options.h"
#include "kernels/cpu/vec_math.h"

namespace sovai::kernels::cpu {

struct CpuOptions {
  // The widest instruction set of the hand-specialized kernels (lowered to what the CPU supports).
  Isa isa = CpuIsa();
  Q8_0Activations q8_0_activations = Q8_0Activations::kInt8;
};

// NewCpuBackend(threads), with its kernels limited to `isa` (and to what the CPU supports).
std::unique_ptr<Backend> NewCpuBackendWithIsa(int threads, Isa isa);
// The backend with every option chosen (NewCpuBackend takes the defaults and the environment).
std::unique_ptr<Backend> NewCpuBackendWithOptions(int threads, const CpuOptions& options);

// NewCpuBackend's Q8_0 activations: SOVAI_Q8_0_ACTIVATIONS=f32 keeps them in f32; unset or int8
// quantizes them (any other value: int8, with a warning once per process).
Q8_0Activations Q8_0ActivationsFromEnvironment();

}  // namespace sovai::kernels::cpu
