// Element types of the ML engine and the conversions between their storage formats.
//
// f32 is what the CPU kernels compute in; bf16 and f16 are what model files store (and what the GPU
// computes in). Conversions round to nearest even, keep infinities, and keep NaN a NaN (quiet), as
// PyTorch's `.to(dtype)` does, so a tensor converted here is bit-identical to the reference.
//
// DType names element types only: a Tensor may also be stored in a block format (Q8_0, NF4; see
// StorageType in tensor.h), where a value has no size of its own, so DTypeSize and ConvertElements
// do not apply there.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

namespace sovai::tensor {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
};

// "f32", "f16", "bf16".
std::string_view DTypeName(DType dtype);
// Parses DTypeName's spelling and torch's ("float32", "float16", "bfloat16"); nullopt otherwise.
std::optional<DType> ParseDType(std::string_view name);
// Bytes per element.
size_t DTypeSize(DType dtype);

inline float BF16ToFloat(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof out);
  return out;
}

inline uint16_t FloatToBF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit, then truncate.
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float F16ToFloat(uint16_t bits);
uint16_t FloatToF16(float value);

// Converts `count` elements between storage formats (any pair, including the same one); neither
// buffer needs to be aligned.
// `from` holds count * DTypeSize(from_type) bytes; `to` has room for count * DTypeSize(to_type).
void ConvertElements(DType from_type, const void* from, DType to_type, void* to, size_t count);

}  // namespace sovai::tensor
