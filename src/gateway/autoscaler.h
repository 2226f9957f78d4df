// The scaling decision of one app (docs/api/apps.md, "autoscaling"), Kubernetes HPA-like.
//
//   SOVAI_ASSIGN_OR_RETURN(gateway::Autoscaler scaler, gateway::Autoscaler::Create(policy));
//   every tick:
//     gateway::ScalingDecision d = scaler.Decide({.now_ms = steady_ms, .current_replicas = 2,
//                                                 .ready_replicas = 2, .in_flight = 9, ...});
//     if (d.changed) ... set the app's desired replicas to d.desired, log d.reason ...
//
// Each tick: a recommendation ceil(metric_total / threshold) clamped to [max(min, 1), max], where
// metric_total is in_flight + held (REQUESTS) or ready_replicas * average use (CPU, RAM). It is
// stabilized as in the HPA: scaling up applies the lowest recommendation of the last
// scale_up_window_ms (a spike must last), scaling down the highest of the last
// scale_down_window_ms (no flapping); a window of 0 applies the current one at once.
// Scale to zero (min_replicas 0 only): to 0 once no request arrived for cooldown_ms since the
// latest request or since the replicas came up (LoadSample::up_since_ms), whichever is later, and
// none is in flight or held; at 0, any held, in-flight or recent request scales up at once (no
// window).
//
// Time is passed in (any monotonic milliseconds, e.g. steady_clock); nothing reads a clock.
// Thread-safety: none; one Autoscaler per app, driven from one thread (or under the caller's
// lock).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace sovai::gateway {

struct AutoscalingPolicy {
  enum class ResourceType : uint8_t { kRequests, kCpu, kRam };

  int min_replicas = 1;  // 0 allows scale to zero
  int max_replicas = 1;
  ResourceType resource_type = ResourceType::kRequests;
  // Target per replica: requests in flight (REQUESTS), percent of the flavor (CPU, RAM).
  double threshold = 4;
  int64_t scale_up_window_ms = 0;
  int64_t scale_down_window_ms = 60'000;
  int64_t cooldown_ms = 300'000;  // idle time before scaling to zero (min_replicas 0)

  friend bool operator==(const AutoscalingPolicy&, const AutoscalingPolicy&) = default;
};

// "REQUESTS", "CPU", "RAM" (the spec's names).
std::string_view ResourceTypeName(AutoscalingPolicy::ResourceType type);

// OK, or InvalidArgument naming the spec field ("autoscaling.max_replicas must be >= 1 (got 0)"):
// min_replicas < 0 or > max_replicas, max_replicas < 1 or > kMaxAutoscaledReplicas, threshold
// not a finite number > 0, a window or cooldown negative or over kMaxAutoscalingWindowMs.
base::Status ValidateAutoscalingPolicy(const AutoscalingPolicy& policy);

// What the app looks like at one tick.
struct LoadSample {
  int64_t now_ms = 0;
  int current_replicas = 0;  // the desired number now (what the last decision set)
  int ready_replicas = 0;
  double in_flight = 0;  // requests in flight over all replicas
  int held = 0;          // requests the gateway holds waiting for a replica
  // Averages over the ready replicas, in percent of the flavor (CPU, RAM policies only).
  double cpu_percent_avg = 0;
  double ram_percent_avg = 0;
  int64_t last_request_ms = -1;  // arrival of the latest request; -1: none yet
  // When the app's replicas last came up: it serves again after a stop, or its first replica is
  // ready after none was; -1: unknown. The idle time of scale to zero counts from the later of
  // this and last_request_ms, so a request from before a stop does not count the stop as idle.
  int64_t up_since_ms = -1;
};

struct ScalingDecision {
  int desired = 0;
  bool changed = false;  // desired != sample.current_replicas
  // Human readable, with the numbers: "REQUESTS: 9 in flight + 0 held / threshold 4 = 3
  // replicas (max 3)", "scale to zero: no request for 300 s (cooldown 300 s)".
  std::string reason;
};

class Autoscaler {
 public:
  // Errors: those of ValidateAutoscalingPolicy.
  static base::Result<Autoscaler> Create(const AutoscalingPolicy& policy);

  // The decision for this tick; records the recommendation for the windows. `now_ms` should not
  // go backwards (an earlier time is treated as no time elapsed).
  //
  // CPU/RAM with no ready replica keep the current number (nothing to measure), and do not scale
  // down while some replicas are not ready yet (their load is unknown). With no request ever seen
  // (last_request_ms -1), the cooldown counts from the first Decide.
  ScalingDecision Decide(const LoadSample& sample);

  // Replaces the policy (`app scale`) and forgets the history, so the new bounds apply at the
  // next Decide. Errors: those of ValidateAutoscalingPolicy (the old policy stays).
  base::Status SetPolicy(const AutoscalingPolicy& policy);

  const AutoscalingPolicy& policy() const { return policy_; }
  // Recommendation changes remembered (at most kMaxAutoscalerHistoryEntries).
  size_t history_entries() const { return history_.size(); }

 private:
  // From `since_ms` until the next entry's since_ms (or now), the recommendation was `replicas`.
  struct Entry {
    int64_t since_ms;
    int replicas;
  };

  explicit Autoscaler(const AutoscalingPolicy& policy) : policy_(policy) {}
  void Record(int64_t now_ms, int replicas);
  // Lowest (or highest) recommendation in force at any time in (now_ms - window_ms, now_ms].
  int Extreme(int64_t now_ms, int64_t window_ms, bool lowest) const;

  AutoscalingPolicy policy_;
  std::deque<Entry> history_;  // oldest first; consecutive entries differ
  std::optional<int64_t> first_sample_ms_;
  int64_t last_now_ms_ = 0;
};

}  // namespace sovai::gateway
