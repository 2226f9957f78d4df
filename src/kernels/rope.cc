#include "kernels/rope.h"

#include <cmath>
#include <numbers>
#include <string>

namespace sovai::kernels {

std::optional<RopeScaling::Kind> ParseRopeScalingKind(std::string_view name) {
  if (name == "default") return RopeScaling::Kind::kNone;
  if (name == "linear") return RopeScaling::Kind::kLinear;
  if (name == "llama3") return RopeScaling::Kind::kLlama3;
  return std::nullopt;
}

namespace {

base::Status Bad(std::string_view what, double value, std::string_view rule) {
  return base::InvalidArgumentError("rope: " + std::string(what) + " = " + std::to_string(value) +
                                    " " + std::string(rule));
}

bool PositiveFinite(double x) { return std::isfinite(x) && x > 0; }

}  // namespace

base::Result<std::vector<float>> RopeInverseFrequencies(int64_t head_dim, double rope_theta,
                                                        const RopeScaling& scaling) {
  if (head_dim < 2 || head_dim > kMaxRopeHeadDim || head_dim % 2 != 0) {
    return Bad("head_dim", static_cast<double>(head_dim),
               "must be even and in [2, " + std::to_string(kMaxRopeHeadDim) + "]");
  }
  // theta <= 1 would make every frequency 1 or grow with i: no model is configured so.
  if (!std::isfinite(rope_theta) || rope_theta <= 1) {
    return Bad("rope_theta", rope_theta, "must be finite and > 1");
  }
  if (scaling.kind != RopeScaling::Kind::kNone && !PositiveFinite(scaling.factor)) {
    return Bad("rope_scaling.factor", scaling.factor, "must be finite and > 0");
  }
  if (scaling.kind == RopeScaling::Kind::kLlama3) {
    if (!PositiveFinite(scaling.low_freq_factor)) {
      return Bad("rope_scaling.low_freq_factor", scaling.low_freq_factor, "must be finite and > 0");
    }
    // Equal factors would divide by zero in the smoothing term.
    if (!std::isfinite(scaling.high_freq_factor) ||
        scaling.high_freq_factor <= scaling.low_freq_factor) {
      return Bad("rope_scaling.high_freq_factor", scaling.high_freq_factor,
                 "must be finite and > low_freq_factor");
    }
    if (!PositiveFinite(scaling.original_max_position_embeddings)) {
      return Bad("rope_scaling.original_max_position_embeddings",
                 scaling.original_max_position_embeddings, "must be finite and > 0");
    }
  }

  const int64_t half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double base_freq =
        1.0 / std::pow(rope_theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
    double freq = base_freq;
    switch (scaling.kind) {
      case RopeScaling::Kind::kNone:
        break;
      case RopeScaling::Kind::kLinear:
        freq = base_freq / scaling.factor;
        break;
      case RopeScaling::Kind::kLlama3: {
        const double original = scaling.original_max_position_embeddings;
        const double low_freq_wavelen = original / scaling.low_freq_factor;
        const double high_freq_wavelen = original / scaling.high_freq_factor;
        const double wavelen = 2 * std::numbers::pi / base_freq;
        if (wavelen > low_freq_wavelen) {
          freq = base_freq / scaling.factor;  // long wavelengths: interpolate fully
        } else if (wavelen < high_freq_wavelen) {
          freq = base_freq;  // short wavelengths: unchanged
        } else {
          const double smooth = (original / wavelen - scaling.low_freq_factor) /
                                (scaling.high_freq_factor - scaling.low_freq_factor);
          freq = (1 - smooth) * base_freq / scaling.factor + smooth * base_freq;
        }
        break;
      }
    }
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(freq);
  }
  return inv_freq;
}

}  // namespace sovai::kernels
