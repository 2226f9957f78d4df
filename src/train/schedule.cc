#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace sovai::train {

std::optional<ScheduleKind> ParseScheduleKind(std::string_view name) {
  if (name == "cosine") return ScheduleKind::kCosine;
  if (name == "linear") return ScheduleKind::kLinear;
  if (name == "constant") return ScheduleKind::kConstant;
  return std::nullopt;
}

std::string_view ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kCosine:
      return "cosine";
    case ScheduleKind::kLinear:
      return "linear";
    case ScheduleKind::kConstant:
      return "constant";
  }
  return "?";
}

double Schedule::LearningRate(int64_t step) const {
  if (step < warmup_steps) {
    return peak * static_cast<double>(step) /
           static_cast<double>(std::max<int64_t>(1, warmup_steps));
  }
  if (kind == ScheduleKind::kConstant) return peak;
  const double decay_steps = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = static_cast<double>(step - warmup_steps) / decay_steps;
  if (kind == ScheduleKind::kLinear) {
    return peak * std::max(0.0, static_cast<double>(total_steps - step) / decay_steps);
  }
  return peak * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace sovai::train
