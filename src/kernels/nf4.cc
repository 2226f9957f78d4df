#include "kernels/nf4.h"

#include <algorithm>
#include <cmath>
#include <string>

// Bit-exactness with bitsandbytes depends on every f32 operation here being rounded on its own:
// CMakeLists.txt builds this file with -ffp-contract=off so that no multiply and add are fused
// except the std::fma calls that reproduce PyTorch's own fused ones.

namespace sovai::kernels {

uint8_t Nf4Encode(float x) {
  // bitsandbytes' dQuantizeNF4 tree; thresholds are midpoints of adjacent kNf4Values, written as
  // the same f32 literals so that a value near a threshold lands where it lands there.
  if (x > 0.03979014977812767f) {
    if (x > 0.3893125355243683f) {
      if (x > 0.6427869200706482f) return x > 0.8614784181118011f ? 0b1111 : 0b1110;
      return x > 0.5016634166240692f ? 0b1101 : 0b1100;
    }
    if (x > 0.2035212516784668f) return x > 0.2920137718319893f ? 0b1011 : 0b1010;
    return x > 0.1202552504837513f ? 0b1001 : 0b1000;
  }
  if (x > -0.33967943489551544f) {
    if (x > -0.13791173323988914f) return x > -0.045525018125772476f ? 0b0111 : 0b0110;
    return x > -0.23460740596055984f ? 0b0101 : 0b0100;
  }
  if (x > -0.6106329262256622f) return x > -0.4599952697753906f ? 0b0011 : 0b0010;
  return x > -0.8480964004993439f ? 0b0001 : 0b0000;
}

namespace {

using DynamicMap = std::array<float, Nf4Weight::kAbsmaxMapSize>;

// torch.linspace(0.1, 1, steps) in f32 exactly as PyTorch's CPU kernel (RangeFactoriesKernel.cpp)
// computes it with AVX2: element idx is start + step * idx in the first half and
// end - step * (steps - 1 - idx) in the second, each one fused multiply-add. The vectorized part
// (whole pairs of 8-lane vectors) computes only each vector's first element so and steps the
// other lanes from it with a separate multiply and add (Vectorized::arange).
std::vector<float> TorchLinspace(int steps) {
  constexpr int kLanes = 8;
  const float start = 0.1f;
  const float end = 1.0f;
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int halfway = steps / 2;
  auto scalar_at = [&](int idx) {
    return idx < halfway ? std::fma(step, static_cast<float>(idx), start)
                         : std::fma(-step, static_cast<float>(steps - 1 - idx), end);
  };
  std::vector<float> out(static_cast<size_t>(steps));
  const int vectorized = steps / (2 * kLanes) * (2 * kLanes);
  for (int first = 0; first < vectorized; first += kLanes) {
    const float base = scalar_at(first);
    for (int lane = 0; lane < kLanes; ++lane) {
      const float lane_step = static_cast<float>(lane) * step;
      out[static_cast<size_t>(first + lane)] = base + lane_step;
    }
  }
  for (int idx = vectorized; idx < steps; ++idx) out[static_cast<size_t>(idx)] = scalar_at(idx);
  return out;
}

// create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for exponent i = 0..6,
// the 2^i midpoints of linspace(0.1, 1, 2^i + 1) times 10^(i - 6), and their negatives; then 0
// and 1; sorted. PyTorch multiplies the f32 midpoints by the Python scalar rounded to f32.
DynamicMap MakeDynamicMap() {
  std::vector<float> values;
  for (int i = 0; i < 7; ++i) {
    const std::vector<float> boundaries = TorchLinspace((1 << i) + 1);
    const float magnitude = static_cast<float>(std::pow(10.0, i - 6));
    for (size_t j = 0; j + 1 < boundaries.size(); ++j) {
      const float mean = (boundaries[j] + boundaries[j + 1]) / 2.0f;
      values.push_back(magnitude * mean);
      values.push_back(-magnitude * mean);
    }
  }
  values.push_back(0.0f);
  values.push_back(1.0f);
  SOVAI_CHECK_EQ(values.size(), size_t{Nf4Weight::kAbsmaxMapSize});
  std::sort(values.begin(), values.end());
  DynamicMap map;
  std::copy(values.begin(), values.end(), map.begin());
  return map;
}

base::Status NotFinite(std::span<const float> values, size_t index) {
  return base::InvalidArgumentError("nf4: element " + std::to_string(index) + " is " +
                                    std::to_string(values[index]) +
                                    "; only finite weights can be quantized");
}

}  // namespace

const DynamicMap& BitsandbytesDynamicMap() {
  static const DynamicMap map = MakeDynamicMap();
  return map;
}

uint8_t DynamicMapEncode(const DynamicMap& map, float x) {
  // dQuantize<0>: binary search from the middle; lower/upper track the last entries passed on
  // each side (the map's ends when the search never turned that way).
  int pivot = 127;
  int upper_pivot = 255;
  int lower_pivot = 0;
  float lower = map[0];
  float upper = map[255];
  float value = map[127];
  for (int half = 64; half > 0; half >>= 1) {
    if (x > value) {
      lower_pivot = pivot;
      lower = value;
      pivot += half;
    } else {
      upper_pivot = pivot;
      upper = value;
      pivot -= half;
    }
    value = map[static_cast<size_t>(pivot)];
  }
  if (x > value) {
    const float midpoint = (upper + value) * 0.5f;
    return static_cast<uint8_t>(x > midpoint ? upper_pivot : pivot);
  }
  const float midpoint = (lower + value) * 0.5f;
  return static_cast<uint8_t>(x < midpoint ? lower_pivot : pivot);
}

Nf4Weight Nf4Quantized::View() const {
  Nf4Weight w;
  w.codes = codes.data();
  w.absmax_codes = absmax_codes.data();
  w.absmax_scales = absmax_scales.data();
  w.absmax_map = absmax_map.data();
  w.absmax_offset = absmax_offset;
  return w;
}

base::Result<Nf4Quantized> QuantizeNf4(std::span<const float> values) {
  const auto numel = static_cast<int64_t>(values.size());
  if (numel == 0 || numel % Nf4Weight::kBlockSize != 0 || numel > kMaxNf4Elements) {
    return base::InvalidArgumentError(
        "nf4: cannot quantize " + std::to_string(numel) +
        " elements; the count must be a positive multiple of 64 and at most " +
        std::to_string(kMaxNf4Elements));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) return NotFinite(values, i);
  }

  const int64_t blocks = numel / Nf4Weight::kBlockSize;
  const int64_t absmax_blocks =
      (blocks + Nf4Weight::kAbsmaxBlockSize - 1) / Nf4Weight::kAbsmaxBlockSize;
  Nf4Quantized q;
  q.numel = numel;
  q.codes.assign(static_cast<size_t>(numel / 2), 0);
  q.absmax_codes.assign(static_cast<size_t>(blocks), 0);
  q.absmax_scales.assign(static_cast<size_t>(absmax_blocks), 0.0f);
  q.absmax_map = BitsandbytesDynamicMap();

  // 1. NF4 codes and the f32 absmax of every block of 64.
  std::vector<float> absmax(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    const float* block = values.data() + b * Nf4Weight::kBlockSize;
    float block_absmax = 0;
    for (int64_t i = 0; i < Nf4Weight::kBlockSize; ++i) {
      block_absmax = std::max(block_absmax, std::fabs(block[i]));
    }
    absmax[static_cast<size_t>(b)] = block_absmax;
    uint8_t* out = q.codes.data() + b * Nf4Weight::kBlockSize / 2;
    if (block_absmax == 0) continue;  // bitsandbytes: NaN codes, i.e. 0 (already there)
    const float reciprocal = 1.0f / block_absmax;
    for (int64_t i = 0; i < Nf4Weight::kBlockSize; i += 2) {
      const uint8_t high = Nf4Encode(block[i] * reciprocal);
      const uint8_t low = Nf4Encode(block[i + 1] * reciprocal);
      out[i / 2] = static_cast<uint8_t>(high << 4 | low);
    }
  }

  // 2. Double quantization: center the absmaxes on their mean, then 8-bit codes of the dynamic
  // map in blocks of 256, each block scaled by its largest magnitude.
  double sum = 0;
  for (float a : absmax) sum += a;
  q.absmax_offset = static_cast<float>(sum / static_cast<double>(blocks));
  for (int64_t s = 0; s < absmax_blocks; ++s) {
    const int64_t first = s * Nf4Weight::kAbsmaxBlockSize;
    const int64_t last = std::min(first + Nf4Weight::kAbsmaxBlockSize, blocks);
    float scale = 0;
    for (int64_t b = first; b < last; ++b) {
      scale = std::max(scale, std::fabs(absmax[static_cast<size_t>(b)] - q.absmax_offset));
    }
    q.absmax_scales[static_cast<size_t>(s)] = scale;
    if (scale == 0) continue;  // bitsandbytes: NaN codes, i.e. 0 (already there)
    const float reciprocal = 1.0f / scale;
    for (int64_t b = first; b < last; ++b) {
      const float centered = absmax[static_cast<size_t>(b)] - q.absmax_offset;
      q.absmax_codes[static_cast<size_t>(b)] =
          DynamicMapEncode(q.absmax_map, centered * reciprocal);
    }
  }
  return q;
}

void DequantizeNf4(const Nf4Weight& w, int64_t numel, float* out) {
  SOVAI_CHECK(numel % Nf4Weight::kBlockSize == 0) << numel;
  const int64_t blocks = numel / Nf4Weight::kBlockSize;
  for (int64_t b = 0; b < blocks; ++b) {
    // bitsandbytes: dequantize_blockwise (code * scale), then `absmax += offset`, then the NF4
    // kernel's code * absmax: three separately rounded f32 operations.
    const float scaled =
        w.absmax_map[w.absmax_codes[b]] * w.absmax_scales[b / Nf4Weight::kAbsmaxBlockSize];
    const float absmax = scaled + w.absmax_offset;
    for (int64_t i = 0; i < Nf4Weight::kBlockSize; ++i) {
      const int64_t e = b * Nf4Weight::kBlockSize + i;
      const uint8_t byte = w.codes[e / 2];
      const uint8_t code = e % 2 == 0 ? byte >> 4 : byte & 0x0f;
      out[e] = kNf4Values[code] * absmax;
    }
  }
}

}  // namespace sovai::kernels
