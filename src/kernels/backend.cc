#include "kernels/backend.h"

#include <cstring>
#include <new>
#include <string>

#include "base/check.h"

namespace sovai::kernels {

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kGemm:
      return "gemm";
    case Op::kLinear:
      return "linear";
    case Op::kEmbedding:
      return "embedding";
    case Op::kRmsNorm:
      return "rmsnorm";
    case Op::kRope:
      return "rope";
    case Op::kAttention:
      return "attention";
    case Op::kSwiGlu:
      return "swiglu";
    case Op::kAdd:
      return "add";
    case Op::kCrossEntropy:
      return "cross_entropy";
    case Op::kLora:
      return "lora";
    case Op::kNf4:
      return "nf4";
    case Op::kAdamW:
      return "adamw";
    case Op::kQ8_0:
      return "q8_0";
    case Op::kPagedAttention:
      return "paged_attention";
    case Op::kCount:
      break;
  }
  return "unknown";
}

uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool DropoutKeep(uint64_t seed, uint64_t index, float probability) {
  if (probability <= 0) return true;
  const uint64_t h = SplitMix64(seed ^ SplitMix64(index));
  // 24 bits fit a float's mantissa exactly, so every backend (f32 on a GPU too) gets the same u.
  const float u = static_cast<float>(h >> 40) * 0x1p-24f;
  return u >= probability;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : backend_(other.backend_), data_(other.data_), bytes_(other.bytes_) {
  other.backend_ = nullptr;
  other.data_ = nullptr;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    backend_ = other.backend_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.backend_ = nullptr;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (data_ != nullptr) backend_->Release(data_, bytes_);
  backend_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

Backend::~Backend() {
  SOVAI_CHECK_EQ(live_buffers_.load(), 0)
      << "buffers (" << live_bytes_.load()
      << " bytes) outlive their backend: destroy what holds them first";
}

base::Result<DeviceBuffer> Backend::Allocate(size_t bytes) {
  if (bytes == 0) return DeviceBuffer();
  void* data = AllocateBytes(bytes);
  if (data == nullptr) {
    return base::ResourceExhaustedError("the " + std::string(name()) + " backend cannot allocate " +
                                        std::to_string(bytes) +
                                        " bytes: use a smaller model, batch or cache");
  }
  SOVAI_CHECK(reinterpret_cast<uintptr_t>(data) % kBufferAlignment == 0)
      << name() << " returned a misaligned buffer";
  live_buffers_.fetch_add(1);
  const int64_t live =
      live_bytes_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t peak = peak_bytes_.load();
  while (live > peak && !peak_bytes_.compare_exchange_weak(peak, live)) {
  }
  return DeviceBuffer(this, data, bytes);
}

void Backend::Release(void* data, size_t bytes) {
  FreeBytes(data, bytes);
  live_buffers_.fetch_sub(1);
  live_bytes_.fetch_sub(static_cast<int64_t>(bytes));
}

MemoryStats Backend::memory_stats() const {
  return MemoryStats{live_buffers_.load(), live_bytes_.load(), peak_bytes_.load()};
}

void HostMemoryBackend::Upload(void* dst, const void* host_src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, host_src, bytes);
}

void HostMemoryBackend::Download(void* host_dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, src, bytes);
}

void HostMemoryBackend::Copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

void HostMemoryBackend::Fill(void* dst, uint8_t value, size_t bytes) {
  if (bytes > 0) std::memset(dst, value, bytes);
}

void* HostMemoryBackend::AllocateBytes(size_t bytes) {
  return ::operator new[](bytes, std::align_val_t{kBufferAlignment}, std::nothrow);
}

void HostMemoryBackend::FreeBytes(void* data, size_t /*bytes*/) {
  ::operator delete[](data, std::align_val_t{kBufferAlignment});
}

double ActivationTolerance(tensor::DType dtype) {
  switch (dtype) {
    case tensor::DType::kF32:
      return 0x1p-24;
    case tensor::DType::kBF16:
      return 0x1p-8;
    case tensor::DType::kF16:
      return 0x1p-11;
  }
  SOVAI_CHECK(false) << "unknown DType " << static_cast<int>(dtype);
  return 0;
}

base::Status Reserve(Backend& backend, DeviceBuffer& buffer, size_t bytes) {
  if (buffer.backend() == &backend && buffer.bytes() >= bytes) return base::Status();
  buffer.Reset();
  SOVAI_ASSIGN_OR_RETURN(buffer, backend.Allocate(bytes));
  return base::Status();
}

}  // namespace sovai::kernels
