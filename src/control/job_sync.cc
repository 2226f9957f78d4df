// The live sync of jobs as the API and /metrics show it (jobs.h: LiveSyncToJson,
// RenderLiveSyncMetrics).
#include <algorithm>
#include <string>

#include "control/jobs.h"

namespace sovai::control {

void LiveSyncTotals::Add(const exec::LiveSyncStatus& s, bool running) {
  if (!s.active) return;
  if (running) {
    ++workloads;
    pending_files += s.pending_files;
    pending_bytes += s.pending_bytes;
    if (s.oldest_pending_unix_micros != 0 &&
        (oldest_pending_unix_micros == 0 ||
         s.oldest_pending_unix_micros < oldest_pending_unix_micros)) {
      oldest_pending_unix_micros = s.oldest_pending_unix_micros;
    }
  }
  uploaded_files += s.uploaded_files;
  uploaded_bytes += s.uploaded_bytes;
  units += s.units;
  retried += s.retried;
  errors += s.errors;
}

nlohmann::json LiveSyncToJson(const exec::LiveSyncStatus& s, int64_t now_unix_micros) {
  auto age_s = [&](int64_t at) -> nlohmann::json {
    if (at == 0) return nullptr;
    return static_cast<double>(std::max<int64_t>(0, now_unix_micros - at)) / 1e6;
  };
  nlohmann::json j = {{"pending_files", s.pending_files},
                      {"pending_bytes", s.pending_bytes},
                      {"oldest_pending_age_s", age_s(s.oldest_pending_unix_micros)},
                      {"last_sync_unix_micros", s.last_sync_unix_micros},
                      {"last_sync_age_s", age_s(s.last_sync_unix_micros)},
                      {"uploaded_files", s.uploaded_files},
                      {"uploaded_bytes", s.uploaded_bytes},
                      {"units", s.units},
                      {"retried", s.retried},
                      {"errors", s.errors}};
  if (!s.last_error.empty()) j["last_error"] = s.last_error;
  return j;
}

std::string RenderLiveSyncMetrics(const LiveSyncTotals& t, int64_t now_unix_micros) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, const std::string& v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + v + "\n";
  };
  metric("sovai_live_sync_workloads", "gauge", "Running jobs whose rw volumes sync live.",
         std::to_string(t.workloads));
  metric("sovai_live_sync_pending_files", "gauge", "Changed files not yet uploaded.",
         std::to_string(t.pending_files));
  metric("sovai_live_sync_pending_bytes", "gauge", "Bytes of changed files not yet uploaded.",
         std::to_string(t.pending_bytes));
  const double oldest_s = t.oldest_pending_unix_micros == 0
                              ? 0
                              : static_cast<double>(std::max<int64_t>(
                                    0, now_unix_micros - t.oldest_pending_unix_micros)) /
                                    1e6;
  metric("sovai_live_sync_oldest_pending_age_seconds", "gauge",
         "Age of the oldest change not yet uploaded (0 when none).", std::to_string(oldest_s));
  metric("sovai_live_sync_uploaded_files_total", "counter", "Files uploaded by live syncs.",
         std::to_string(t.uploaded_files));
  metric("sovai_live_sync_uploaded_bytes_total", "counter", "Bytes uploaded by live syncs.",
         std::to_string(t.uploaded_bytes));
  metric("sovai_live_sync_units_total", "counter",
         "Units (checkpoint directories) completed by live syncs, manifest last.",
         std::to_string(t.units));
  metric("sovai_live_sync_retried_total", "counter",
         "Files that changed while they were uploaded and went up again.",
         std::to_string(t.retried));
  metric("sovai_live_sync_errors_total", "counter", "Live sync rounds that failed.",
         std::to_string(t.errors));
  return out;
}

}  // namespace sovai::control
