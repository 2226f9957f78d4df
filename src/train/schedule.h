// Learning-rate schedules as transformers defines them (optimization.py), so that a recipe moved
// between PEFT/TRL and sovai trains the same way:
//   warmup   lr * step / warmup_steps for step < warmup_steps
//   cosine   lr * max(0, 0.5 * (1 + cos(pi * progress)))      (get_cosine_schedule_with_warmup)
//   linear   lr * max(0, (total - step) / (total - warmup))   (get_linear_schedule_with_warmup)
//   constant lr                                               (get_constant_schedule_with_warmup)
// with progress = (step - warmup) / (total - warmup). `step` counts optimizer steps from 0: the
// rate used for the first update is LearningRate(0), as torch's LambdaLR applies it.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sovai::train {

enum class ScheduleKind : uint8_t { kCosine, kLinear, kConstant };
std::optional<ScheduleKind> ParseScheduleKind(std::string_view name);  // "cosine", ...
std::string_view ScheduleKindName(ScheduleKind kind);

struct Schedule {
  ScheduleKind kind = ScheduleKind::kCosine;
  double peak = 2e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  double LearningRate(int64_t step) const;
};

}  // namespace sovai::train
