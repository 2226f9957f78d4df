#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"

namespace sovai::kernels::cuda {
namespace {

base::Status CudaError(cudaError_t error, const char* what) {
  return base::InternalError(std::string(what) + ": " + cudaGetErrorString(error));
}

// y[i] = a * x[i] + y[i], grid-stride so any n works with a fixed launch.
__global__ void SaxpyKernel(int64_t n, float a, const float* x, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    y[i] = a * x[i] + y[i];
  }
}

// Frees device memory on every exit path.
struct DeviceBuffer {
  float* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

}  // namespace

base::Result<std::vector<DeviceInfo>> ListCudaDevices() {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorNoDevice) return std::vector<DeviceInfo>{};
  if (error != cudaSuccess) {
    return base::UnavailableError(std::string("CUDA runtime unavailable: ") +
                                  cudaGetErrorString(error));
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if ((error = cudaGetDeviceProperties(&prop, i)) != cudaSuccess) {
      return CudaError(error, "cudaGetDeviceProperties");
    }
    devices.push_back(DeviceInfo{.index = i,
                                 .name = prop.name,
                                 .compute_major = prop.major,
                                 .compute_minor = prop.minor,
                                 .total_memory_bytes = prop.totalGlobalMem,
                                 .multiprocessors = prop.multiProcessorCount});
  }
  return devices;
}

base::Status SelfCheck(int device, int64_t n) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return CudaError(error, "cudaGetDeviceCount");
  if (device < 0 || device >= count) {
    return base::InvalidArgumentError("no CUDA device " + std::to_string(device) + " (have " +
                                      std::to_string(count) + ")");
  }
  if (n <= 0) return base::InvalidArgumentError("self-check size must be positive");
  if ((error = cudaSetDevice(device)) != cudaSuccess) return CudaError(error, "cudaSetDevice");

  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.5f;
    y[i] = static_cast<float>(i % 7);
  }
  DeviceBuffer dx, dy;
  const size_t bytes = sizeof(float) * n;
  if ((error = cudaMalloc(&dx.ptr, bytes)) != cudaSuccess) return CudaError(error, "cudaMalloc");
  if ((error = cudaMalloc(&dy.ptr, bytes)) != cudaSuccess) return CudaError(error, "cudaMalloc");
  cudaMemcpy(dx.ptr, x.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(dy.ptr, y.data(), bytes, cudaMemcpyHostToDevice);
  const float a = 3.0f;
  SaxpyKernel<<<256, 256>>>(n, a, dx.ptr, dy.ptr);
  if ((error = cudaGetLastError()) != cudaSuccess) return CudaError(error, "SaxpyKernel launch");
  std::vector<float> out(n);
  if ((error = cudaMemcpy(out.data(), dy.ptr, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess) {
    return CudaError(error, "SaxpyKernel result");
  }
  for (int64_t i = 0; i < n; ++i) {
    const float want = a * x[i] + y[i];
    if (std::fabs(out[i] - want) > 1e-5f * std::fabs(want) + 1e-6f) {
      return base::InternalError("self-check mismatch at " + std::to_string(i) + ": got " +
                                 std::to_string(out[i]) + ", want " + std::to_string(want));
    }
  }
  return base::Status();
}

}  // namespace sovai::kernels::cuda
