#include "kernels/q8_0.h"

#include <cmath>
#include <cstring>

#include "base/check.h"
#include "tensor/dtype.h"

namespace sovai::kernels {

void QuantizeRowQ8_0(std::span<const float> x, std::span<uint8_t> out) {
  SOVAI_CHECK_EQ(x.size() % kQ8_0BlockValues, 0u) << "Q8_0 rows are whole blocks of 32";
  SOVAI_CHECK_EQ(out.size(), Q8_0Bytes(x.size()));
  const size_t blocks = x.size() / kQ8_0BlockValues;
  for (size_t b = 0; b < blocks; ++b) {
    const float* block = x.data() + b * kQ8_0BlockValues;
    uint8_t* dst = out.data() + b * kQ8_0BlockBytes;
    float amax = 0.0f;
    for (size_t j = 0; j < kQ8_0BlockValues; ++j) {
      // Exactly ggml's MAX(amax, fabsf(v)), i.e. ((a) > (b) ? (a) : (b)), NaN behaviour included.
      const float magnitude = std::fabs(block[j]);
      amax = amax > magnitude ? amax : magnitude;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d_half = tensor::FloatToF16(d);
    std::memcpy(dst, &d_half, sizeof d_half);  // little-endian host (checked in gguf.cc)
    for (size_t j = 0; j < kQ8_0BlockValues; ++j) {
      float scaled = block[j] * id;
      // |scaled| <= 127 up to float rounding of amax * (1/d); clamp so that an int8 cast is always
      // defined (NaN compares false and lands on 0).
      float rounded = std::round(scaled);
      int8_t q = 0;
      if (rounded >= 127.0f) {
        q = 127;
      } else if (rounded <= -127.0f) {
        q = -127;
      } else if (rounded == rounded) {
        q = static_cast<int8_t>(rounded);
      }
      dst[2 + j] = static_cast<uint8_t>(q);
    }
  }
}

void DequantizeRowQ8_0(std::span<const uint8_t> in, std::span<float> out) {
  SOVAI_CHECK_EQ(in.size() % kQ8_0BlockBytes, 0u) << "Q8_0 data is whole blocks of 34 bytes";
  SOVAI_CHECK_EQ(out.size(), in.size() / kQ8_0BlockBytes * kQ8_0BlockValues);
  const size_t blocks = in.size() / kQ8_0BlockBytes;
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t* src = in.data() + b * kQ8_0BlockBytes;
    uint16_t d_half;
    std::memcpy(&d_half, src, sizeof d_half);
    const float d = tensor::F16ToFloat(d_half);
    for (size_t j = 0; j < kQ8_0BlockValues; ++j) {
      out[b * kQ8_0BlockValues + j] = d * static_cast<float>(static_cast<int8_t>(src[2 + j]));
    }
  }
}

}  // namespace sovai::kernels
