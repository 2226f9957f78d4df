#include "gateway/autoscaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "gateway/limits.h"

namespace sovai::gateway {
namespace {

using ResourceType = AutoscalingPolicy::ResourceType;

// "9", "0.5", "75" — numbers as people write them.
std::string Num(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", value);
  return buf;
}

std::string Seconds(int64_t ms) { return Num(static_cast<double>(ms) / 1000.0) + " s"; }

base::Status FieldError(std::string_view field, std::string_view what, std::string got) {
  return base::InvalidArgumentError("autoscaling." + std::string(field) + " " + std::string(what) +
                                    " (got " + std::move(got) + ")");
}

base::Status CheckDuration(std::string_view field, int64_t ms) {
  if (ms < 0) return FieldError(field, "must not be negative", Seconds(ms));
  if (ms > kMaxAutoscalingWindowMs) {
    return FieldError(field, "must be at most " + Seconds(kMaxAutoscalingWindowMs), Seconds(ms));
  }
  return base::Status::Ok();
}

// ceil(total / threshold) without the float noise of e.g. 3 * 25 / 25.000000001, capped before
// the conversion so that absurd inputs cannot overflow an int.
int64_t CeilRatio(double total, double threshold) {
  double ratio = total / threshold;
  if (!(ratio > 0)) return 0;  // also NaN
  ratio = std::min(ratio, static_cast<double>(kMaxAutoscaledReplicas) + 1);
  return static_cast<int64_t>(std::ceil(ratio - 1e-9));
}

}  // namespace

std::string_view ResourceTypeName(ResourceType type) {
  switch (type) {
    case ResourceType::kRequests:
      return "REQUESTS";
    case ResourceType::kCpu:
      return "CPU";
    case ResourceType::kRam:
      return "RAM";
  }
  return "UNKNOWN";
}

base::Status ValidateAutoscalingPolicy(const AutoscalingPolicy& p) {
  if (p.max_replicas < 1) {
    return FieldError("max_replicas", "must be >= 1", std::to_string(p.max_replicas));
  }
  if (p.max_replicas > kMaxAutoscaledReplicas) {
    return FieldError("max_replicas", "must be at most " + std::to_string(kMaxAutoscaledReplicas),
                      std::to_string(p.max_replicas));
  }
  if (p.min_replicas < 0) {
    return FieldError("min_replicas", "must be >= 0", std::to_string(p.min_replicas));
  }
  if (p.min_replicas > p.max_replicas) {
    return FieldError("min_replicas",
                      "must not exceed max_replicas (" + std::to_string(p.max_replicas) + ")",
                      std::to_string(p.min_replicas));
  }
  if (!(p.threshold > 0) || !std::isfinite(p.threshold)) {
    return FieldError("threshold", "must be a number > 0", Num(p.threshold));
  }
  SOVAI_RETURN_IF_ERROR(CheckDuration("scale_up_window_s", p.scale_up_window_ms));
  SOVAI_RETURN_IF_ERROR(CheckDuration("scale_down_window_s", p.scale_down_window_ms));
  SOVAI_RETURN_IF_ERROR(CheckDuration("cooldown_s", p.cooldown_ms));
  return base::Status::Ok();
}

base::Result<Autoscaler> Autoscaler::Create(const AutoscalingPolicy& policy) {
  SOVAI_RETURN_IF_ERROR(ValidateAutoscalingPolicy(policy));
  return Autoscaler(policy);
}

base::Status Autoscaler::SetPolicy(const AutoscalingPolicy& policy) {
  SOVAI_RETURN_IF_ERROR(ValidateAutoscalingPolicy(policy));
  policy_ = policy;
  history_.clear();
  return base::Status::Ok();
}

void Autoscaler::Record(int64_t now_ms, int replicas) {
  if (history_.empty() || history_.back().replicas != replicas) {
    history_.push_back({now_ms, replicas});
  }
  // The front entry stays while it is still in force at the start of the longest window.
  int64_t horizon_ms = now_ms - std::max(policy_.scale_up_window_ms, policy_.scale_down_window_ms);
  while (history_.size() >= 2 && history_[1].since_ms <= horizon_ms) history_.pop_front();
  while (history_.size() > kMaxAutoscalerHistoryEntries) history_.pop_front();
}

int Autoscaler::Extreme(int64_t now_ms, int64_t window_ms, bool lowest) const {
  int result = history_.back().replicas;  // the current recommendation always counts
  for (size_t i = 0; i + 1 < history_.size(); ++i) {
    // Entry i was in force until entry i+1 began.
    if (history_[i + 1].since_ms <= now_ms - window_ms) continue;
    result =
        lowest ? std::min(result, history_[i].replicas) : std::max(result, history_[i].replicas);
  }
  return result;
}

ScalingDecision Autoscaler::Decide(const LoadSample& s) {
  const AutoscalingPolicy& p = policy_;
  int64_t now_ms = std::max(s.now_ms, last_now_ms_);
  last_now_ms_ = now_ms;
  if (!first_sample_ms_) first_sample_ms_ = now_ms;
  int current = std::max(s.current_replicas, 0);
  double in_flight = std::max(s.in_flight, 0.0);
  int held = std::max(s.held, 0);
  const int min_active = std::max(p.min_replicas, 1);

  // Scale to zero: idle for the cooldown, nothing in flight or waiting. At zero, only a request
  // (held, in flight or recent) brings the app back.
  bool busy = in_flight > 0 || held > 0;
  bool recent_request = s.last_request_ms >= 0 && now_ms - s.last_request_ms < p.cooldown_ms;
  // Idle since the latest of: the last request, the replicas coming up (a stop in between is not
  // idle time: the app was not there to be called), the first tick.
  int64_t idle_since_ms = std::max(s.last_request_ms, s.up_since_ms);
  if (idle_since_ms < 0) idle_since_ms = *first_sample_ms_;
  int64_t idle_ms = now_ms - idle_since_ms;
  if (p.min_replicas == 0 && !busy && (current == 0 ? !recent_request : idle_ms >= p.cooldown_ms)) {
    history_.clear();  // a later start from zero begins afresh
    std::string why =
        "no request for " + Seconds(idle_ms) + " (cooldown " + Seconds(p.cooldown_ms) + ")";
    return {.desired = 0,
            .changed = current != 0,
            .reason = (current == 0 ? "idle at zero: " : "scale to zero: ") + why};
  }

  // The recommendation of this tick.
  std::string reason = std::string(ResourceTypeName(p.resource_type)) + ": ";
  std::optional<int64_t> raw;
  if (p.resource_type == ResourceType::kRequests) {
    raw = CeilRatio(in_flight + held, p.threshold);
    reason += Num(in_flight) + " in flight + " + std::to_string(held) + " held / threshold " +
              Num(p.threshold);
  } else {
    double avg = p.resource_type == ResourceType::kCpu ? s.cpu_percent_avg : s.ram_percent_avg;
    if (s.ready_replicas > 0 && std::isfinite(avg)) {
      avg = std::max(avg, 0.0);
      raw = CeilRatio(s.ready_replicas * avg, p.threshold);
      reason += std::to_string(s.ready_replicas) + " ready replicas at " + Num(avg) +
                "% / threshold " + Num(p.threshold) + "%";
    } else {
      reason += "no ready replica to measure";
    }
  }
  int recommendation;
  if (!raw) {
    recommendation = std::clamp(current, min_active, p.max_replicas);
    reason += ", keep " + std::to_string(recommendation);
  } else {
    reason += " = " + std::to_string(*raw) + " replicas";
    if (*raw > p.max_replicas) {
      reason += ", capped to max " + std::to_string(p.max_replicas);
    } else if (*raw == p.max_replicas) {
      reason += " (max " + std::to_string(p.max_replicas) + ")";
    } else if (*raw < min_active) {
      reason += ", raised to min " + std::to_string(min_active);
    }
    recommendation = static_cast<int>(std::clamp<int64_t>(*raw, min_active, p.max_replicas));
    // Replicas still starting carry load the averages do not show: no scale-down on them.
    if (p.resource_type != ResourceType::kRequests && s.ready_replicas < current &&
        recommendation < current && current <= p.max_replicas) {
      reason += "; " + std::to_string(s.ready_replicas) + " of " + std::to_string(current) +
                " ready, no scale-down while replicas start";
      recommendation = current;
    }
  }

  // From zero: requests are waiting, no window applies.
  if (current == 0) {
    history_.clear();
    Record(now_ms, recommendation);
    std::string prefix = held > 0                 ? "held request while at zero: scale to "
                         : busy || recent_request ? "request while at zero: scale to "
                                                  : "at zero, below min_replicas: scale to ";
    return {.desired = recommendation,
            .changed = true,
            .reason = prefix + std::to_string(recommendation) + " (" + reason + ")"};
  }

  Record(now_ms, recommendation);
  int up = Extreme(now_ms, p.scale_up_window_ms, /*lowest=*/true);
  int down = Extreme(now_ms, p.scale_down_window_ms, /*lowest=*/false);
  int desired = current;
  if (up > current) {
    desired = up;
  } else if (down < current) {
    desired = down;
  }
  if (desired != recommendation) {
    if (recommendation > current) {
      reason += "; scale-up window " + Seconds(p.scale_up_window_ms) + " holds " +
                std::to_string(desired);
    } else {
      reason += "; scale-down window " + Seconds(p.scale_down_window_ms) + " holds " +
                std::to_string(desired);
    }
  }
  return {.desired = desired, .changed = desired != current, .reason = std::move(reason)};
}

}  // namespace sovai::gateway
