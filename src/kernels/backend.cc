#include "kernels/backend.h"

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

}  // namespace sovai::kernels
