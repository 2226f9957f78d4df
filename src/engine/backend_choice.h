// The --backend flag of sovai-engine train, serve and eval: one place that turns a name into a
// kernels::Backend, so every command accepts the same names and gives the same errors.
//
//   cpu        the cpu backend on `threads` threads (0: every core)
//   reference  the plain-loop backend (slow; for checking)
//   strict     the cpu backend behind the device-seam checks (kernels/backend.h)
//   cuda       the CUDA backend on device 0 of CUDA_VISIBLE_DEVICES (kernels/cuda/cuda_backend.h),
//              in a sovai-engine built with SOVAI_CUDA=ON
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "kernels/backend.h"

namespace sovai::engine {

// Whether this binary was built with the CUDA backend.
bool CudaBackendBuiltIn();

// The names MakeBackend accepts, for a flag's help text ("cpu, reference, strict, cuda").
std::string BackendNames();

// The backend `name` names. InvalidArgument for an unknown name; FailedPrecondition for "cuda" in
// a binary built without CUDA; NewCudaBackend's errors (Unavailable: no driver or no device) for
// "cuda" where no GPU can be used. On success with "cuda", `*description` (when not null) names
// the device ("cuda on device 0: NVIDIA H200"), for the job log.
base::Result<std::unique_ptr<kernels::Backend>> MakeBackend(std::string_view name, int threads,
                                                            std::string* description = nullptr);

// For serve::EngineOptions::make_backend: MakeBackend("cuda"), printing the device line
// ("<command>: backend cuda on device 0: NAME") to stdout when it succeeds.
std::function<base::Result<std::unique_ptr<kernels::Backend>>()> CudaBackendFactory(
    std::string command);

}  // namespace sovai::engine
