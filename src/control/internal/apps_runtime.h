// What the three parts of AppService share (apps.cc: the API and the state machine;
// apps_store.cc: the rows; apps_reconcile.cc: the loop that runs the replicas). Private to
// control.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "control/apps.h"

namespace sovai::control {

// What the loop remembers about an app between ticks.
struct AppService::Runtime {
  // Replicas of the current generation that ended before any of them was ready, in a row.
  int start_failures = 0;
  bool generation_ready = false;  // a replica of the current generation has been ready
  bool ever_ready = false;
  std::map<std::string, std::chrono::steady_clock::time_point> last_probe;  // by job
  std::optional<AppRoute> published;
  // For MeasureUsage: CPU ticks by job at the previous measurement.
  std::map<std::string, uint64_t> cpu_ticks;
  std::chrono::steady_clock::time_point measured_at;
};

namespace apps_internal {

// Whether an app in `state` wants replicas (it is not stopping, stopped, failed or deleted).
inline bool Serving(AppState state) {
  return state != AppState::kStopping && state != AppState::kStopped &&
         state != AppState::kFailed && state != AppState::kDeleting && state != AppState::kDeleted;
}

// The state AppStateName spells `name`; nullopt for any other string.
std::optional<AppState> ParseAppState(std::string_view name);

// The default AppServiceOptions::probe: GET http://<host>:<port><path>, true for 2xx.
bool HttpProbe(const std::string& host, uint16_t port, const std::string& path);

}  // namespace apps_internal

}  // namespace sovai::control
