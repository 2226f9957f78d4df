// Test-only scaffolding shared by the CUDA tests (device_test.cc, ops_test.cc, matmul_test.cc):
// CUDA error checks, a device buffer, a tally of checks, and the opening of a device with a stream.
// These tests are plain executables that run on a machine with a GPU and exit 77 (ctest: skipped)
// where none is visible; only CUDA builds compile them, so <cuda_runtime.h> is available.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/status.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace sovai::kernels::cuda::testing {

// The exit code that tells ctest (SKIP_RETURN_CODE) a test was skipped for want of a device.
inline constexpr int kSkippedExitCode = 77;

// A failed CUDA call is a broken test machine or a bug, not something to report and go on from.
inline void CudaCheck(cudaError_t error, const char* what) {
  SOVAI_CHECK(error == cudaSuccess) << what << ": " << cudaGetErrorString(error);
}

// `count` elements of T in device memory, freed on destruction; DeviceArray<uint8_t> holds raw
// bytes. A zero count still allocates one element, so that get() is never null. Offsets and counts
// are in elements; uploads and downloads outside the array stop the test.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    CudaCheck(cudaMalloc(&ptr_, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc");
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return count_; }

  // Copies `host` to elements [offset, offset + host.size()).
  void Upload(const std::vector<T>& host, size_t offset = 0) {
    SOVAI_CHECK(offset + host.size() <= count_);
    CudaCheck(
        cudaMemcpy(ptr_ + offset, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
        "upload");
  }
  // Waits for all work on the device first (cudaMemcpy on the legacy default stream).
  std::vector<T> Download(size_t offset, size_t count) const {
    SOVAI_CHECK(offset + count <= count_);
    std::vector<T> host(count);
    CudaCheck(cudaMemcpy(host.data(), ptr_ + offset, count * sizeof(T), cudaMemcpyDeviceToHost),
              "download");
    return host;
  }
  std::vector<T> Download() const { return Download(0, count_); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Counts checks and prints one line for each ("  ok  what" or "  FAIL what").
class Report {
 public:
  void Expect(bool ok, const std::string& what) {
    if (ok) {
      ++passed_;
    } else {
      ++failed_;
    }
    std::printf("%s %s\n", ok ? "  ok  " : "  FAIL", what.c_str());
  }
  void ExpectStatus(const base::Status& status, base::StatusCode code, const std::string& what) {
    Expect(status.code() == code, what + " -> " + status.ToString());
  }
  void ExpectOk(const base::Status& status, const std::string& what) {
    ExpectStatus(status, base::StatusCode::kOk, what);
  }
  // |got - want| <= rel * (|want| + |base|) + abs for every element (base: the initial value of an
  // accumulated result, or empty).
  void ExpectNear(const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& want, double rel, double abs,
                  const std::vector<float>& base = {}) {
    SOVAI_CHECK(got.size() == want.size());
    double max_error = 0;
    int64_t bad = 0;
    int64_t first_bad = -1;
    for (size_t i = 0; i < got.size(); ++i) {
      const double scale = std::fabs(want[i]) + (base.empty() ? 0.0 : std::fabs(base[i]));
      const double error = std::fabs(static_cast<double>(got[i]) - want[i]);
      max_error = std::max(max_error, error);
      if (!(error <= rel * scale + abs)) {
        if (bad++ == 0) first_bad = static_cast<int64_t>(i);
      }
    }
    char detail[256];
    std::snprintf(detail, sizeof detail, "%s: %zu values, max |error| %.3g, %lld out of tolerance",
                  what.c_str(), got.size(), max_error, static_cast<long long>(bad));
    std::string message = detail;
    if (first_bad >= 0) {
      message += ", first at " + std::to_string(first_bad) + ": got " +
                 std::to_string(got[first_bad]) + ", want " + std::to_string(want[first_bad]);
    }
    Expect(bad == 0, message);
  }

  int passed() const { return passed_; }
  int failed() const { return failed_; }

  // Prints the totals and returns the process's exit code: 0 when no check failed, 1 otherwise.
  int Summarize() const {
    std::printf("%d passed, %d failed\n", passed_, failed_);
    return failed_ == 0 ? 0 : 1;
  }

 private:
  int passed_ = 0;
  int failed_ = 0;
};

// The visible devices, or nullopt (after printing why) when there are none or the runtime cannot
// start: the caller then returns kSkippedExitCode.
inline std::optional<std::vector<DeviceInfo>> ListDevicesOrSkip() {
  auto devices = ListCudaDevices();
  if (!devices.ok() || devices->empty()) {
    std::printf("no CUDA device: %s\n",
                devices.ok() ? "none visible" : devices.status().ToString().c_str());
    return std::nullopt;
  }
  return *std::move(devices);
}

// A device made current for this thread and a stream of the test's own on it, destroyed with the
// context. Objects that enqueue on the stream must be destroyed first (declare them after it).
class GpuTestContext {
 public:
  GpuTestContext(DeviceInfo device, cudaStream_t stream)
      : device_(std::move(device)), stream_(stream) {}
  ~GpuTestContext() {
    if (stream_ != nullptr) CudaCheck(cudaStreamDestroy(stream_), "cudaStreamDestroy");
  }
  GpuTestContext(GpuTestContext&& other) noexcept
      : device_(std::move(other.device_)), stream_(std::exchange(other.stream_, nullptr)) {}
  GpuTestContext& operator=(GpuTestContext&&) = delete;
  GpuTestContext(const GpuTestContext&) = delete;
  GpuTestContext& operator=(const GpuTestContext&) = delete;

  const DeviceInfo& device() const { return device_; }
  Stream stream() const { return Stream{stream_}; }

  // Waits for everything enqueued on the stream. Errors inside kernels (bad addresses) surface
  // here, not at the launches, so a test calls this before it counts its results.
  void Synchronize() const { CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  DeviceInfo device_;
  cudaStream_t stream_ = nullptr;
};

// The first visible device, printed, made current, with a new stream; nullopt (after printing why)
// when there is none, and the caller returns kSkippedExitCode.
inline std::optional<GpuTestContext> OpenFirstDeviceOrSkip() {
  std::optional<std::vector<DeviceInfo>> devices = ListDevicesOrSkip();
  if (!devices) return std::nullopt;
  const DeviceInfo& device = devices->front();
  std::printf("device %d: %s sm_%d%d\n", device.index, device.name.c_str(), device.compute_major,
              device.compute_minor);
  CudaCheck(cudaSetDevice(device.index), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  CudaCheck(cudaStreamCreate(&stream), "cudaStreamCreate");
  return GpuTestContext(device, stream);
}

}  // namespace sovai::kernels::cuda::testing
