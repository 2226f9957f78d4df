// Rotary position embedding frequencies: inv_freq[D/2] for a head size D, `rope_theta` and the
// model's `rope_scaling`, computed as Hugging Face transformers computes them
// (modeling_rope_utils.py):
//   default  inv_freq[i] = 1 / theta^(2i / D)
//   linear   inv_freq[i] / factor            (positions divided by factor)
//   llama3   Llama 3.1's banded scaling (_compute_llama3_parameters): with
//            wavelen = 2*pi / inv_freq, low = original_max_position_embeddings / low_freq_factor
//            and high = original_max_position_embeddings / high_freq_factor, frequencies with
//            wavelen > low are divided by factor, those with wavelen < high are kept, and those in
//            between are interpolated with smooth = (original / wavelen - low_freq_factor) /
//            (high_freq_factor - low_freq_factor): (1 - smooth) * f / factor + smooth * f.
// transformers computes in f32 with PyTorch's pow; we compute in double and round once to f32, so
// a frequency can differ from theirs in the last bit or two (the golden test allows 1e-6
// relative) but is the correctly rounded value of the formula.
//
// The configuration comes from a model's config.json (untrusted): every parameter is checked and
// a bad one is an InvalidArgument naming it. Other scaling kinds (dynamic, yarn, longrope) are
// not supported.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sovai::kernels {

// The largest head size (D) we accept; real models use 64..256.
inline constexpr int64_t kMaxRopeHeadDim = 4096;

struct RopeScaling {
  enum class Kind : uint8_t { kNone, kLinear, kLlama3 };
  Kind kind = Kind::kNone;
  double factor = 1;                               // linear and llama3
  double low_freq_factor = 1;                      // llama3
  double high_freq_factor = 4;                     // llama3
  double original_max_position_embeddings = 8192;  // llama3
};

// Parses config.json's rope_scaling "rope_type" (or legacy "type"): "default" -> kNone, "linear",
// "llama3"; nullopt for anything else.
std::optional<RopeScaling::Kind> ParseRopeScalingKind(std::string_view name);

// inv_freq[head_dim / 2]. head_dim must be even, in [2, kMaxRopeHeadDim]; rope_theta finite and
// > 1; factor finite and > 0; for llama3 also 0 < low_freq_factor < high_freq_factor (finite) and
// original_max_position_embeddings finite and > 0.
base::Result<std::vector<float>> RopeInverseFrequencies(int64_t head_dim, double rope_theta,
                                                        const RopeScaling& scaling);

}  // namespace sovai::kernels
