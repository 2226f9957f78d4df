#include "gateway/autoscaler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gateway/limits.h"

namespace sovai::gateway {
namespace {

using ::testing::HasSubstr;
using ResourceType = AutoscalingPolicy::ResourceType;

AutoscalingPolicy Requests(int min, int max, int64_t up_ms = 0, int64_t down_ms = 0) {
  return {.min_replicas = min,
          .max_replicas = max,
          .resource_type = ResourceType::kRequests,
          .threshold = 4,
          .scale_up_window_ms = up_ms,
          .scale_down_window_ms = down_ms,
          .cooldown_ms = 300'000};
}

Autoscaler Make(const AutoscalingPolicy& policy) {
  auto scaler = Autoscaler::Create(policy);
  EXPECT_TRUE(scaler.ok()) << scaler.status();
  return std::move(scaler).value();
}

LoadSample Load(int64_t now_ms, int current, double in_flight, int held = 0) {
  return {.now_ms = now_ms,
          .current_replicas = current,
          .ready_replicas = current,
          .in_flight = in_flight,
          .held = held,
          .last_request_ms = now_ms};
}

TEST(AutoscalerTest, ScalesOutToMaxUnderSustainedLoadAndNotBeyond) {
  Autoscaler scaler = Make(Requests(1, 3));
  ScalingDecision d = scaler.Decide(Load(0, 1, 9));
  EXPECT_EQ(d.desired, 3);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.reason, "REQUESTS: 9 in flight + 0 held / threshold 4 = 3 replicas (max 3)");

  d = scaler.Decide(Load(1000, 3, 100, 20));
  EXPECT_EQ(d.desired, 3);
  EXPECT_FALSE(d.changed);
  EXPECT_EQ(d.reason,
            "REQUESTS: 100 in flight + 20 held / threshold 4 = 30 replicas, capped to max 3");
}

TEST(AutoscalerTest, HeldRequestsCountAsLoad) {
  Autoscaler scaler = Make(Requests(1, 10));
  ScalingDecision d = scaler.Decide(Load(0, 1, 4, 5));  // 9 / 4 → 3
  EXPECT_EQ(d.desired, 3);
  EXPECT_THAT(d.reason, HasSubstr("4 in flight + 5 held / threshold 4 = 3 replicas"));
}

TEST(AutoscalerTest, SpikeShorterThanTheUpWindowIsIgnored) {
  Autoscaler scaler = Make(Requests(1, 5, /*up_ms=*/30'000, /*down_ms=*/0));
  EXPECT_EQ(scaler.Decide(Load(0, 1, 2)).desired, 1);
  // 10 s of load worth 3 replicas, then quiet again.
  for (int64_t t = 1'000; t <= 10'000; t += 1'000) {
    ScalingDecision d = scaler.Decide(Load(t, 1, 12));
    EXPECT_EQ(d.desired, 1) << "at " << t;
    EXPECT_FALSE(d.changed);
    EXPECT_THAT(d.reason, HasSubstr("scale-up window 30 s holds 1"));
  }
  for (int64_t t = 11'000; t <= 60'000; t += 1'000) {
    EXPECT_EQ(scaler.Decide(Load(t, 1, 2)).desired, 1) << "at " << t;
  }
}

TEST(AutoscalerTest, SustainedLoadScalesUpWhenTheUpWindowHasPassed) {
  Autoscaler scaler = Make(Requests(1, 5, /*up_ms=*/30'000, /*down_ms=*/0));
  EXPECT_EQ(scaler.Decide(Load(0, 1, 2)).desired, 1);
  // Load worth 3 from t=1 s: the window still sees the earlier 1 until t=31 s.
  for (int64_t t = 1'000; t <= 30'000; t += 1'000) {
    EXPECT_EQ(scaler.Decide(Load(t, 1, 12)).desired, 1) << "at " << t;
  }
  ScalingDecision d = scaler.Decide(Load(31'000, 1, 12));
  EXPECT_EQ(d.desired, 3);
  EXPECT_TRUE(d.changed);
}

TEST(AutoscalerTest, ZeroUpWindowScalesUpAtOnce) {
  Autoscaler scaler = Make(Requests(1, 5, 0, 60'000));
  EXPECT_EQ(scaler.Decide(Load(0, 1, 0)).desired, 1);
  EXPECT_EQ(scaler.Decide(Load(1'000, 1, 20)).desired, 5);
}

TEST(AutoscalerTest, ScalesDownOnlyAfterTheDownWindow) {
  Autoscaler scaler = Make(Requests(1, 5, 0, /*down_ms=*/60'000));
  EXPECT_EQ(scaler.Decide(Load(0, 1, 16)).desired, 4);
  // Load drops at t=1 s; 4 stays recommended by the window until t=61 s.
  for (int64_t t = 1'000; t <= 60'000; t += 5'000) {
    ScalingDecision d = scaler.Decide(Load(t, 4, 1));
    EXPECT_EQ(d.desired, 4) << "at " << t;
    EXPECT_THAT(d.reason, HasSubstr("scale-down window 60 s holds 4"));
  }
  ScalingDecision d = scaler.Decide(Load(61'000, 4, 1));
  EXPECT_EQ(d.desired, 1);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.reason, "REQUESTS: 1 in flight + 0 held / threshold 4 = 1 replicas");
}

TEST(AutoscalerTest, DownWindowAppliesTheHighestRecentRecommendation) {
  Autoscaler scaler = Make(Requests(1, 5, 0, 60'000));
  EXPECT_EQ(scaler.Decide(Load(0, 1, 20)).desired, 5);
  EXPECT_EQ(scaler.Decide(Load(10'000, 5, 12)).desired, 5);  // recommends 3
  EXPECT_EQ(scaler.Decide(Load(20'000, 5, 4)).desired, 5);   // recommends 1
  // 5 was last in force at 10 s, 3 until 20 s: at 70 s+ the highest left is 3, at 80 s+ it is 1.
  EXPECT_EQ(scaler.Decide(Load(70'000, 5, 4)).desired, 3);
  EXPECT_EQ(scaler.Decide(Load(80'000, 3, 4)).desired, 1);
}

TEST(AutoscalerTest, MinReplicasIsAFloor) {
  Autoscaler scaler = Make(Requests(2, 5));
  ScalingDecision d = scaler.Decide(Load(0, 2, 0));
  EXPECT_EQ(d.desired, 2);
  EXPECT_FALSE(d.changed);
  EXPECT_EQ(d.reason, "REQUESTS: 0 in flight + 0 held / threshold 4 = 0 replicas, raised to min 2");
  // A stopped app (0 desired) with min 2 comes back to 2 at once.
  d = scaler.Decide(Load(1'000, 0, 0));
  EXPECT_EQ(d.desired, 2);
  EXPECT_TRUE(d.changed);
}

TEST(AutoscalerTest, ScalesToZeroOnlyAfterCooldownAndIdle) {
  Autoscaler scaler = Make(Requests(0, 3));
  LoadSample s = Load(0, 1, 1);
  EXPECT_EQ(scaler.Decide(s).desired, 1);

  // Last request at 0; nothing in flight from 1 s on.
  s = {.now_ms = 299'999, .current_replicas = 1, .ready_replicas = 1, .last_request_ms = 0};
  EXPECT_EQ(scaler.Decide(s).desired, 1);  // not yet idle for 300 s

  // Idle long enough but a request is still in flight (a long generation) or held: stays.
  s.now_ms = 400'000;
  s.in_flight = 1;
  EXPECT_EQ(scaler.Decide(s).desired, 1);
  s.in_flight = 0;
  s.held = 1;
  EXPECT_EQ(scaler.Decide(s).desired, 1);

  s.held = 0;
  ScalingDecision d = scaler.Decide(s);
  EXPECT_EQ(d.desired, 0);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.reason, "scale to zero: no request for 400 s (cooldown 300 s)");

  // Stays at zero while idle.
  s.current_replicas = 0;
  s.ready_replicas = 0;
  s.now_ms = 500'000;
  d = scaler.Decide(s);
  EXPECT_EQ(d.desired, 0);
  EXPECT_FALSE(d.changed);
  EXPECT_THAT(d.reason, HasSubstr("idle at zero"));
}

TEST(AutoscalerTest, NeverCalledAppCoolsDownFromTheFirstTick) {
  Autoscaler scaler = Make(Requests(0, 3));
  LoadSample s = {.now_ms = 1'000, .current_replicas = 1, .ready_replicas = 1};
  EXPECT_EQ(scaler.Decide(s).desired, 1);
  s.now_ms = 300'999;
  EXPECT_EQ(scaler.Decide(s).desired, 1);
  s.now_ms = 301'000;
  EXPECT_EQ(scaler.Decide(s).desired, 0);
  // An app that starts at zero and is never called stays there.
  Autoscaler fresh = Make(Requests(0, 3));
  EXPECT_EQ(fresh.Decide({.now_ms = 5}).desired, 0);
}

// Regression: an app stopped for 364 s after its last request, then started with a cooldown of
// 15 s, was scaled to zero one second after its replica came up ("no request for 363.956 s").
TEST(AutoscalerTest, IdleTimeCountsFromWhenTheReplicasCameUpNotFromARequestBeforeAStop) {
  AutoscalingPolicy policy = Requests(0, 1);
  policy.cooldown_ms = 15'000;
  Autoscaler scaler = Make(policy);
  EXPECT_EQ(scaler.Decide(Load(0, 1, 1)).desired, 1);  // the last request, at 0
  // Stopped (no ticks), started again at 363 s: its replica is ready at 364 s.
  LoadSample s = {.now_ms = 364'000,
                  .current_replicas = 1,
                  .ready_replicas = 1,
                  .last_request_ms = 0,
                  .up_since_ms = 364'000};
  ScalingDecision d = scaler.Decide(s);
  EXPECT_EQ(d.desired, 1) << d.reason;
  EXPECT_FALSE(d.changed);
  s.now_ms = 378'999;
  EXPECT_EQ(scaler.Decide(s).desired, 1) << "not yet 15 s since the replica came up";
  s.now_ms = 379'000;
  d = scaler.Decide(s);
  EXPECT_EQ(d.desired, 0);
  EXPECT_EQ(d.reason, "scale to zero: no request for 15 s (cooldown 15 s)");
  // A request after the replicas came up counts from itself.
  Autoscaler other = Make(policy);
  s = {.now_ms = 20'000,
       .current_replicas = 1,
       .ready_replicas = 1,
       .last_request_ms = 10'000,
       .up_since_ms = 1'000};
  EXPECT_EQ(other.Decide(s).desired, 1);
  s.now_ms = 25'000;
  EXPECT_EQ(other.Decide(s).desired, 0);
}

TEST(AutoscalerTest, HeldRequestAtZeroScalesToOneWithoutWindow) {
  Autoscaler scaler = Make(Requests(0, 3, /*up_ms=*/60'000, /*down_ms=*/60'000));
  EXPECT_EQ(scaler.Decide({.now_ms = 0}).desired, 0);
  LoadSample s = {.now_ms = 1'000, .current_replicas = 0, .held = 1, .last_request_ms = 1'000};
  ScalingDecision d = scaler.Decide(s);
  EXPECT_EQ(d.desired, 1);
  EXPECT_TRUE(d.changed);
  EXPECT_THAT(d.reason, HasSubstr("held request while at zero: scale to 1"));

  // Many held requests: straight to what they need.
  Autoscaler other = Make(Requests(0, 3, 60'000, 60'000));
  s.held = 10;
  d = other.Decide(s);
  EXPECT_EQ(d.desired, 3);
  EXPECT_THAT(d.reason, HasSubstr("10 held"));
}

TEST(AutoscalerTest, CpuThreshold) {
  AutoscalingPolicy p = {.min_replicas = 1,
                         .max_replicas = 10,
                         .resource_type = ResourceType::kCpu,
                         .threshold = 75,
                         .scale_down_window_ms = 0};
  Autoscaler scaler = Make(p);
  LoadSample s = {.now_ms = 0, .current_replicas = 2, .ready_replicas = 2, .cpu_percent_avg = 90};
  ScalingDecision d = scaler.Decide(s);  // 2 * 90 / 75 = 2.4 → 3
  EXPECT_EQ(d.desired, 3);
  EXPECT_EQ(d.reason, "CPU: 2 ready replicas at 90% / threshold 75% = 3 replicas");

  s = {.now_ms = 1'000, .current_replicas = 3, .ready_replicas = 3, .cpu_percent_avg = 50};
  EXPECT_EQ(scaler.Decide(s).desired, 2);  // 150 / 75 exactly
  s = {.now_ms = 2'000,
       .current_replicas = 3,
       .ready_replicas = 3,
       .cpu_percent_avg = 20,
       .ram_percent_avg = 99};
  EXPECT_EQ(scaler.Decide(s).desired, 1);  // CPU decides; RAM is ignored
}

TEST(AutoscalerTest, RamThreshold) {
  AutoscalingPolicy p = {.min_replicas = 1,
                         .max_replicas = 4,
                         .resource_type = ResourceType::kRam,
                         .threshold = 60,
                         .scale_down_window_ms = 0};
  Autoscaler scaler = Make(p);
  LoadSample s = {.now_ms = 0,
                  .current_replicas = 1,
                  .ready_replicas = 1,
                  .cpu_percent_avg = 1,
                  .ram_percent_avg = 95};
  ScalingDecision d = scaler.Decide(s);
  EXPECT_EQ(d.desired, 2);
  EXPECT_EQ(d.reason, "RAM: 1 ready replicas at 95% / threshold 60% = 2 replicas");
}

TEST(AutoscalerTest, CpuWithoutReadyReplicasKeepsTheCurrentNumber) {
  AutoscalingPolicy p = {.min_replicas = 1,
                         .max_replicas = 4,
                         .resource_type = ResourceType::kCpu,
                         .threshold = 75,
                         .scale_down_window_ms = 0};
  Autoscaler scaler = Make(p);
  ScalingDecision d = scaler.Decide({.now_ms = 0, .current_replicas = 3, .ready_replicas = 0});
  EXPECT_EQ(d.desired, 3);
  EXPECT_FALSE(d.changed);
  EXPECT_THAT(d.reason, HasSubstr("no ready replica"));
  // Nor scales down on the few that are ready while the others start.
  d = scaler.Decide(
      {.now_ms = 1'000, .current_replicas = 3, .ready_replicas = 1, .cpu_percent_avg = 10});
  EXPECT_EQ(d.desired, 3);
  EXPECT_THAT(d.reason, HasSubstr("1 of 3 ready"));
  // But scales up on them.
  d = scaler.Decide(
      {.now_ms = 2'000, .current_replicas = 3, .ready_replicas = 2, .cpu_percent_avg = 150});
  EXPECT_EQ(d.desired, 4);
}

TEST(AutoscalerTest, SetPolicyAppliesNewBoundsAtOnce) {
  Autoscaler scaler = Make(Requests(1, 5, 60'000, 60'000));
  EXPECT_EQ(scaler.Decide(Load(0, 5, 20)).desired, 5);
  ASSERT_TRUE(scaler.SetPolicy(Requests(1, 2, 60'000, 60'000)).ok());
  EXPECT_EQ(scaler.Decide(Load(1'000, 5, 20)).desired, 2);
  EXPECT_FALSE(scaler.SetPolicy(Requests(3, 2)).ok());
  EXPECT_EQ(scaler.policy().max_replicas, 2);
}

TEST(AutoscalerTest, HistoryIsBounded) {
  Autoscaler scaler = Make(Requests(1, 8, 0, kMaxAutoscalingWindowMs));
  for (int64_t t = 0; t < 3 * static_cast<int64_t>(kMaxAutoscalerHistoryEntries); ++t) {
    (void)scaler.Decide(Load(t * 1'000, 8, (t % 2) ? 32 : 4));  // flaps between 8 and 1
  }
  EXPECT_EQ(scaler.history_entries(), kMaxAutoscalerHistoryEntries);
  // Steady recommendations are stored once.
  Autoscaler steady = Make(Requests(1, 8, 0, 60'000));
  for (int64_t t = 0; t < 1000; ++t) (void)steady.Decide(Load(t * 1'000, 2, 8));
  EXPECT_EQ(steady.history_entries(), 1u);
}

TEST(AutoscalerTest, ValidateNamesTheField) {
  auto message = [](const AutoscalingPolicy& p) {
    base::Status st = ValidateAutoscalingPolicy(p);
    EXPECT_EQ(st.code(), base::StatusCode::kInvalidArgument);
    return st.message();
  };
  EXPECT_TRUE(ValidateAutoscalingPolicy(Requests(0, 1)).ok());
  EXPECT_THAT(message(Requests(3, 2)), HasSubstr("autoscaling.min_replicas must not exceed"));
  EXPECT_THAT(message(Requests(0, 0)), HasSubstr("autoscaling.max_replicas must be >= 1"));
  EXPECT_THAT(message(Requests(-1, 2)), HasSubstr("autoscaling.min_replicas"));
  EXPECT_THAT(message(Requests(1, kMaxAutoscaledReplicas + 1)),
              HasSubstr("autoscaling.max_replicas"));
  AutoscalingPolicy p = Requests(1, 2);
  p.threshold = 0;
  EXPECT_THAT(message(p), HasSubstr("autoscaling.threshold must be a number > 0 (got 0)"));
  p.threshold = -1;
  EXPECT_THAT(message(p), HasSubstr("autoscaling.threshold"));
  p.threshold = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(message(p), HasSubstr("autoscaling.threshold"));
  EXPECT_THAT(message(Requests(1, 2, -1'000, 0)),
              HasSubstr("autoscaling.scale_up_window_s must not be negative (got -1 s)"));
  EXPECT_THAT(message(Requests(1, 2, 0, -1)), HasSubstr("autoscaling.scale_down_window_s"));
  p = Requests(1, 2);
  p.cooldown_ms = -5;
  EXPECT_THAT(message(p), HasSubstr("autoscaling.cooldown_s"));
  p.cooldown_ms = kMaxAutoscalingWindowMs + 1;
  EXPECT_THAT(message(p), HasSubstr("autoscaling.cooldown_s must be at most"));
  EXPECT_FALSE(Autoscaler::Create(Requests(3, 2)).ok());
}

}  // namespace
}  // namespace sovai::gateway
