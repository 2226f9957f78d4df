#include "tensor/dtype.h"

namespace sovai::tensor {

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

std::optional<DType> ParseDType(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  return std::nullopt;
}

size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

float F16ToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN (payload kept)
  } else if (exponent != 0) {
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    out = sign;  // ±0
  } else {
    // Subnormal: shift the mantissa up until its leading one becomes the implicit bit.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    out = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &out, sizeof value);
  return value;
}

uint16_t FloatToF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u)
    return sign | 0x7e00u | static_cast<uint16_t>((magnitude >> 13) & 0x3ffu);
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // rounds to or beyond 65520: infinity
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal or zero, rounded to nearest even.
    if (magnitude < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25)
    uint32_t exponent = magnitude >> 23;
    uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    // value = mantissa * 2^(exponent - 150) and a subnormal half counts units of 2^-24, so the
    // half's mantissa is mantissa >> (126 - exponent), with the shifted-out bits rounded.
    uint32_t shift = 126 - exponent;
    uint32_t kept = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1u))) ++kept;
    return sign | static_cast<uint16_t>(kept);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  uint32_t rebased = magnitude - (112u << 23);
  rebased += 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>(rebased >> 13);
}

void ConvertElements(DType from_type, const void* from, DType to_type, void* to, size_t count) {
  if (from_type == to_type) {
    std::memcpy(to, from, count * DTypeSize(from_type));
    return;
  }
  // Elements are copied in and out with memcpy: mapped model files need not be aligned.
  const auto* in = static_cast<const unsigned char*>(from);
  auto* out = static_cast<unsigned char*>(to);
  auto load = [&](size_t i) -> float {
    if (from_type == DType::kF32) {
      float f;
      std::memcpy(&f, in + i * 4, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, in + i * 2, 2);
    return from_type == DType::kF16 ? F16ToFloat(h) : BF16ToFloat(h);
  };
  for (size_t i = 0; i < count; ++i) {
    float v = load(i);
    if (to_type == DType::kF32) {
      std::memcpy(out + i * 4, &v, 4);
    } else {
      uint16_t h = to_type == DType::kF16 ? FloatToF16(v) : FloatToBF16(v);
      std::memcpy(out + i * 2, &h, 2);
    }
  }
}

}  // namespace sovai::tensor
