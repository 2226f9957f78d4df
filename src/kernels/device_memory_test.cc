// The device seam of backend.h: buffers a backend allocates and frees, and the transfers through
// it (Upload, Download, Copy, Fill), on every host backend and on the strict backend over each;
// then what the strict backend refuses: an op given host memory, a freed buffer or an extent past
// a buffer's end.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace sovai::kernels {
namespace {

struct BackendCase {
  const char* name;
  std::function<std::unique_ptr<Backend>()> make;
};

// gtest prints a parameter by its bytes unless told otherwise.
void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.name; }

class DeviceMemoryTest : public ::testing::TestWithParam<BackendCase> {
 protected:
  std::unique_ptr<Backend> backend_ = GetParam().make();
};

TEST_P(DeviceMemoryTest, BuffersAreAlignedCountedAndFreedByTheirBackend) {
  Backend& b = *backend_;
  EXPECT_EQ(b.name(), GetParam().name);
  EXPECT_EQ(b.activation_dtype(), tensor::DType::kF32);
  {
    auto empty = b.Allocate(0);
    ASSERT_TRUE(empty.ok()) << empty.status();
    EXPECT_TRUE(empty->empty());
    EXPECT_EQ(empty->data(), nullptr);
    EXPECT_EQ(b.memory_stats().live_buffers, 0);
  }
  auto first = b.Allocate(1000);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->empty());
  EXPECT_EQ(first->bytes(), 1000u);
  EXPECT_EQ(first->backend(), &b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first->data()) % kBufferAlignment, 0u);
  EXPECT_EQ(first->count<float>(), 250);
  EXPECT_EQ(b.memory_stats().live_buffers, 1);
  EXPECT_EQ(b.memory_stats().live_bytes, 1000);

  // A move hands the memory over without freeing it; the moved-from buffer is empty.
  void* const address = first->data();
  DeviceBuffer moved = std::move(*first);
  EXPECT_TRUE(first->empty());
  EXPECT_EQ(first->bytes(), 0u);
  EXPECT_EQ(moved.data(), address);
  EXPECT_EQ(b.memory_stats().live_buffers, 1);

  // Assigning to a buffer frees what it held.
  auto second = b.Allocate(24);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(b.memory_stats().live_buffers, 2);
  EXPECT_EQ(b.memory_stats().live_bytes, 1024);
  moved = std::move(*second);
  EXPECT_EQ(moved.bytes(), 24u);
  EXPECT_EQ(b.memory_stats().live_buffers, 1);
  EXPECT_EQ(b.memory_stats().live_bytes, 24);
  moved.Reset();
  EXPECT_TRUE(moved.empty());
  EXPECT_EQ(b.memory_stats().live_buffers, 0);
  EXPECT_EQ(b.memory_stats().live_bytes, 0);
  EXPECT_EQ(b.memory_stats().peak_bytes, 1024);
}

TEST_P(DeviceMemoryTest, UploadDownloadCopyAndFillRoundTrip) {
  Backend& b = *backend_;
  std::vector<float> host(37);
  std::iota(host.begin(), host.end(), -3.5f);
  host[5] = -0.0f;
  auto src = UploadNew<float>(b, host);
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<float> back = DownloadAll<float>(*src);
  ASSERT_EQ(back.size(), host.size());
  EXPECT_EQ(std::memcmp(back.data(), host.data(), host.size() * sizeof(float)), 0);

  // Device to device, whole and at offsets.
  auto dst = b.Allocate(src->bytes());
  ASSERT_TRUE(dst.ok());
  b.Copy(dst->data(), src->data(), src->bytes());
  EXPECT_EQ(DownloadAll<float>(*dst), host);
  b.Copy(dst->as<float>() + 30, src->as<float>() + 1, 7 * sizeof(float));
  b.Copy(dst->data(), dst->data(), dst->bytes());  // the same range: nothing to do
  std::vector<float> want = host;
  std::copy(host.begin() + 1, host.begin() + 8, want.begin() + 30);
  EXPECT_EQ(DownloadAll<float>(*dst), want);

  // Fill sets bytes; Zero is Fill with 0; Download of a sub-range reads only it.
  b.Fill(dst->as<float>() + 2, 0xAB, 3 * sizeof(float));
  b.Zero(dst->as<float>() + 10, 4 * sizeof(float));
  std::vector<uint32_t> bits(37);
  b.Download(bits.data(), dst->data(), dst->bytes());
  for (int i = 2; i < 5; ++i) EXPECT_EQ(bits[i], 0xABABABABu) << i;
  for (int i = 10; i < 14; ++i) EXPECT_EQ(bits[i], 0u) << i;
  float one = 0;
  b.Download(&one, dst->as<float>() + 20, sizeof one);
  EXPECT_EQ(one, want[20]);
  b.Upload(dst->as<float>() + 36, &host[0], sizeof(float));
  b.Synchronize();
  EXPECT_EQ(DownloadAll<float>(*dst)[36], host[0]);

  auto zeros = AllocateZeros<int32_t>(b, 9);
  ASSERT_TRUE(zeros.ok());
  EXPECT_EQ(DownloadAll<int32_t>(*zeros), std::vector<int32_t>(9, 0));
  EXPECT_TRUE(DownloadAll<float>(DeviceBuffer()).empty());
}

TEST_P(DeviceMemoryTest, ReserveGrowsAndKeepsABufferThatIsLargeEnough) {
  Backend& b = *backend_;
  DeviceBuffer buffer;
  ASSERT_TRUE(Reserve(b, buffer, 64).ok());
  EXPECT_EQ(buffer.bytes(), 64u);
  const std::vector<int32_t> values = {1, 2, 3, 4};
  b.Upload(buffer.data(), values.data(), 16);
  void* const address = buffer.data();
  ASSERT_TRUE(Reserve(b, buffer, 16).ok());  // large enough: kept, contents and all
  EXPECT_EQ(buffer.data(), address);
  std::vector<int32_t> back(4);
  b.Download(back.data(), buffer.data(), 16);
  EXPECT_EQ(back, values);
  ASSERT_TRUE(Reserve(b, buffer, 65).ok());
  EXPECT_EQ(buffer.bytes(), 65u);
  EXPECT_EQ(b.memory_stats().live_buffers, 1);
}

TEST_P(DeviceMemoryTest, OpsComputeOnBuffersAsOnHostArrays) {
  Backend& b = *backend_;
  const std::vector<float> x = {1, -2, 3.5f, 4, 0.25f, -6};
  const std::vector<float> y = {0.5f, 2, -1, 8, 1, 1};
  auto dx = UploadNew<float>(b, x);
  auto dy = UploadNew<float>(b, y);
  auto out = b.Allocate(x.size() * sizeof(float));
  ASSERT_TRUE(dx.ok() && dy.ok() && out.ok());
  b.Add(out->as<float>(), dx->as<float>(), dy->as<float>(), 6);
  EXPECT_EQ(DownloadAll<float>(*out), (std::vector<float>{1.5f, 0, 2.5f, 12, 1.25f, -5}));
  EXPECT_EQ(b.SumOfSquares(dx->as<float>(), 6), 1 + 4 + 12.25 + 16 + 0.0625 + 36);
}

TEST_P(DeviceMemoryTest, AnAllocationThatDoesNotFitIsResourceExhausted) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan aborts on an allocation this large instead of returning null";
#else
  auto huge = backend_->Allocate(size_t{1} << 62);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), base::StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find(GetParam().name), std::string::npos)
      << huge.status().message();
  EXPECT_EQ(backend_->memory_stats().live_buffers, 0);
#endif
}

INSTANTIATE_TEST_SUITE_P(
    HostBackends, DeviceMemoryTest,
    ::testing::Values(BackendCase{"reference", [] { return NewReferenceBackend(); }},
                      BackendCase{"cpu", [] { return NewCpuBackend(2); }},
                      BackendCase{"strict:reference",
                                  [] { return NewStrictBackend(NewReferenceBackend()); }},
                      BackendCase{"strict:cpu", [] { return NewStrictBackend(NewCpuBackend(2)); }}),
    [](const ::testing::TestParamInfo<BackendCase>& info) {
      std::string name = info.param.name;
      for (char& c : name) c = c == ':' ? '_' : c;
      return name;
    });

TEST(StrictBackendTest, FreshBuffersArePoisoned) {
  auto backend = NewStrictBackend(NewReferenceBackend());
  auto buffer = backend->Allocate(8);
  ASSERT_TRUE(buffer.ok());
  std::vector<uint8_t> bytes = DownloadAll<uint8_t>(*buffer);
  EXPECT_EQ(bytes, std::vector<uint8_t>(8, 0xFF));
  // Poison reads as NaN, so an op that reads unwritten activations poisons its result.
  auto out = backend->Allocate(8);
  ASSERT_TRUE(out.ok());
  backend->Add(out->as<float>(), buffer->as<float>(), buffer->as<float>(), 2);
  for (float v : DownloadAll<float>(*out)) EXPECT_TRUE(std::isnan(v));
}

using StrictBackendDeathTest = ::testing::Test;

TEST(StrictBackendDeathTest, RefusesHostMemoryFreedBuffersAndExtentsPastTheEnd) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto backend = NewStrictBackend(NewReferenceBackend());
  auto a = AllocateZeros<float>(*backend, 4);
  auto out = backend->Allocate(4 * sizeof(float));
  ASSERT_TRUE(a.ok() && out.ok());
  std::vector<float> host(4, 1.0f);
  // Its own buffers pass.
  backend->Add(out->as<float>(), a->as<float>(), a->as<float>(), 4);
  // Host memory, as an op argument or as the device side of a transfer.
  EXPECT_DEATH(backend->Add(out->as<float>(), host.data(), a->as<float>(), 4),
               "strict:reference Add: a .* is not inside a live buffer");
  EXPECT_DEATH(backend->Upload(host.data(), a->data(), 4), "Upload: dst");
  EXPECT_DEATH(backend->Download(a->data(), host.data(), 4), "Download: src");
  // Past the end: 5 floats of a 4-float buffer, and a range that starts inside and runs out.
  EXPECT_DEATH(backend->Add(out->as<float>(), a->as<float>(), a->as<float>(), 5),
               "Add: out .* not inside");
  EXPECT_DEATH(backend->Scale(a->as<float>() + 2, 2.0f, 3), "Scale: x .* not inside");
  EXPECT_DEATH(backend->Copy(out->data(), out->as<float>() + 1, 8), "overlapping");
  // A pointer kept after its buffer was freed.
  float* stale = a->as<float>();
  a->Reset();
  EXPECT_DEATH(backend->Scale(stale, 2.0f, 1), "Scale: x .* not inside");
  // Weights are checked too: a WeightRef into host memory.
  const WeightRef w{.format = WeightRef::Format::kF32, .data = host.data(), .rows = 2, .cols = 2};
  auto x = AllocateZeros<float>(*backend, 4);
  ASSERT_TRUE(x.ok());
  EXPECT_DEATH(backend->LinearForward(out->as<float>(), x->as<float>(), w, nullptr, 2),
               "LinearForward: weight");
}

TEST(BackendDeathTest, ABackendDestroyedBeforeItsBuffersStopsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto backend = NewReferenceBackend();
        auto buffer = backend->Allocate(16);
        backend.reset();
      },
      "outlive their backend");
}

TEST(ActivationToleranceTest, IsHalfAnUlpOfTheStorageType) {
  EXPECT_EQ(ActivationTolerance(tensor::DType::kF32), 0x1p-24);
  EXPECT_EQ(ActivationTolerance(tensor::DType::kBF16), 0x1p-8);
  EXPECT_EQ(ActivationTolerance(tensor::DType::kF16), 0x1p-11);
}

}  // namespace
}  // namespace sovai::kernels
