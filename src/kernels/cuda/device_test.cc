// Runs on a machine with a GPU; exits 77 (ctest: skipped) where none is visible.
#include "kernels/cuda/device.h"

#include <cstdio>

int main() {
  using sovai::kernels::cuda::ListCudaDevices;
  auto devices = ListCudaDevices();
  if (!devices.ok() || devices->empty()) {
    std::printf("no CUDA device: %s\n",
                devices.ok() ? "none visible" : devices.status().ToString().c_str());
    return 77;
  }
  int failures = 0;
  for (const auto& device : *devices) {
    std::printf("device %d: %s sm_%d%d, %.1f GiB, %d SMs\n", device.index, device.name.c_str(),
                device.compute_major, device.compute_minor,
                device.total_memory_bytes / (1024.0 * 1024 * 1024), device.multiprocessors);
    for (int64_t n : {1, 1000, 1 << 24}) {
      auto status = sovai::kernels::cuda::SelfCheck(device.index, n);
      std::printf("  self-check n=%lld: %s\n", static_cast<long long>(n),
                  status.ToString().c_str());
      failures += !status.ok();
    }
  }
  // A bad device index must be refused, not crash.
  auto bad = sovai::kernels::cuda::SelfCheck(static_cast<int>(devices->size()), 10);
  std::printf("bad index: %s\n", bad.ToString().c_str());
  failures += bad.code() != sovai::base::StatusCode::kInvalidArgument;
  std::printf("%d passed, %d failed\n", failures == 0 ? 1 : 0, failures == 0 ? 0 : 1);
  return failures == 0 ? 0 : 1;
}
