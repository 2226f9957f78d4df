// SelfCheck (device.h) on every visible device at several sizes, and its refusal of a bad device
// index. Runs on a machine with a GPU; exits 77 (ctest: skipped) where none is visible.
#include "kernels/cuda/device.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/cuda/gpu_test_util.h"

int main() {
  using namespace sovai::kernels::cuda;
  const std::optional<std::vector<DeviceInfo>> devices = testing::ListDevicesOrSkip();
  if (!devices) return testing::kSkippedExitCode;
  testing::Report report;
  for (const DeviceInfo& device : *devices) {
    std::printf("device %d: %s sm_%d%d, %.1f GiB, %d SMs\n", device.index, device.name.c_str(),
                device.compute_major, device.compute_minor,
                device.total_memory_bytes / (1024.0 * 1024 * 1024), device.multiprocessors);
    for (int64_t n : {1, 1000, 1 << 24}) {
      report.ExpectOk(SelfCheck(device.index, n), "self-check n=" + std::to_string(n));
    }
  }
  // A bad device index must be refused, not crash.
  report.ExpectStatus(SelfCheck(static_cast<int>(devices->size()), 10),
                      sovai::base::StatusCode::kInvalidArgument, "bad index");
  return report.Summarize();
}
