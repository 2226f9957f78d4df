// Private to the cpu backend and its tests: the backend with a chosen instruction-set level for
// its hand-specialized kernels (attention tiles), so that a test on an AVX-512 machine also runs
// the AVX2 and baseline variants. Everything else uses backend.h's NewCpuBackend.
//
// Thread-safety: as any Backend (one thread at a time).
#pragma once

#include <memory>

#include "kernels/backend.h"
#include "kernels/cpu/vec_math.h"

namespace sovai::kernels::cpu {

// NewCpuBackend(threads), with its kernels limited to `isa` (and to what the CPU supports).
std::unique_ptr<Backend> NewCpuBackendWithIsa(int threads, Isa isa);

}  // namespace sovai::kernels::cpu
