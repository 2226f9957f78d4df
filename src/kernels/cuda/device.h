// CUDA device inventory and a self-check, built only with SOVAI_CUDA=ON.
//
// ListCudaDevices() tells which GPUs this process can use (after CUDA_VISIBLE_DEVICES), so that
// schedulers and the engine can check a flavor's GPUs are really there. SelfCheck() runs a kernel
// on one device and verifies its result against the CPU: it proves the build's device code runs on
// the present architecture (a build for the wrong sm_XX fails here, not in the middle of a job).
//
// Thread-safety: both functions may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace sovai::kernels::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;       // "NVIDIA H200"
  int compute_major = 0;  // 9 for Hopper
  int compute_minor = 0;
  uint64_t total_memory_bytes = 0;
  int multiprocessors = 0;
};

// The visible devices. An empty vector (not an error) when the driver reports none; Unavailable
// when the CUDA runtime cannot be initialised (no driver).
base::Result<std::vector<DeviceInfo>> ListCudaDevices();

// Runs y = a*x + y over `n` floats on `device` and compares with the CPU result.
// InvalidArgument for a bad device index; Internal with the CUDA error string otherwise.
base::Status SelfCheck(int device, int64_t n);

}  // namespace sovai::kernels::cuda
