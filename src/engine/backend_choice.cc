#include "engine/backend_choice.h"

#include <cstdio>
#include <utility>

#if defined(SOVAI_ENGINE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#endif

namespace sovai::engine {

bool CudaBackendBuiltIn() {
#if defined(SOVAI_ENGINE_CUDA)
  return true;
#else
  return false;
#endif
}

std::string BackendNames() { return "cpu, reference, strict, cuda"; }

base::Result<std::unique_ptr<kernels::Backend>> MakeBackend(std::string_view name, int threads,
                                                            std::string* description) {
  std::unique_ptr<kernels::Backend> backend;
  if (name == "cpu") {
    backend = kernels::NewCpuBackend(threads);
  } else if (name == "reference") {
    backend = kernels::NewReferenceBackend();
  } else if (name == "strict") {
    backend = kernels::NewStrictBackend(kernels::NewCpuBackend(threads));
  } else if (name == "cuda") {
#if defined(SOVAI_ENGINE_CUDA)
    // Device 0 of what CUDA_VISIBLE_DEVICES shows: the executor pins a job's GPUs with it.
    SOVAI_ASSIGN_OR_RETURN(backend, kernels::cuda::NewCudaBackend(0));
    if (description != nullptr) {
      *description = "cuda on device 0";
      auto devices = kernels::cuda::ListCudaDevices();
      if (devices.ok() && !devices->empty()) *description += ": " + devices->front().name;
    }
    return backend;
#else
    return base::FailedPreconditionError(
        "--backend cuda: this sovai-engine was built without CUDA (SOVAI_CUDA=OFF, no nvcc at "
        "build time); rebuild with the CUDA toolkit or use --backend cpu");
#endif
  } else {
    return base::InvalidArgumentError("--backend must be one of " + BackendNames() + ", not '" +
                                      std::string(name) + "'");
  }
  if (description != nullptr) *description = std::string(backend->name());
  return backend;
}

std::function<base::Result<std::unique_ptr<kernels::Backend>>()> CudaBackendFactory(
    std::string command) {
  return [command = std::move(command)]() -> base::Result<std::unique_ptr<kernels::Backend>> {
    std::string description;
    SOVAI_ASSIGN_OR_RETURN(auto backend, MakeBackend("cuda", 0, &description));
    std::fprintf(stdout, "%s: backend %s\n", command.c_str(), description.c_str());
    std::fflush(stdout);
    return backend;
  };
}

}  // namespace sovai::engine
