#include "cli/prometheus.h"

#include <cstdio>

namespace sovai::cli {
namespace {

void Header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void PerServer(std::string& out, const char* name, const char* type, const char* help,
               const std::vector<NamedServerStats>& servers,
               uint64_t (*value)(const net::ServerStats&)) {
  Header(out, name, type, help);
  for (const auto& [server, stats] : servers) {
    out += name;
    out += "{server=\"" + EscapeLabelValue(server) + "\"} " + std::to_string(value(stats)) + "\n";
  }
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderPrometheusMetrics(std::string_view version, double uptime_s,
                                    const std::vector<NamedServerStats>& servers) {
  std::string out;
  Header(out, "sovai_build_info", "gauge", "Always 1; the version label says which build runs.");
  out += "sovai_build_info{version=\"" + EscapeLabelValue(version) + "\"} 1\n";

  Header(out, "sovai_uptime_seconds", "gauge", "Seconds since the server started.");
  char uptime[64];
  std::snprintf(uptime, sizeof uptime, "%.3f", uptime_s);
  out += "sovai_uptime_seconds " + std::string(uptime) + "\n";

  PerServer(out, "sovai_http_open_connections", "gauge", "HTTP connections open now.", servers,
            [](const net::ServerStats& s) { return s.open_connections; });
  PerServer(out, "sovai_http_connections_total", "counter", "HTTP connections accepted.", servers,
            [](const net::ServerStats& s) { return s.total_connections; });
  PerServer(out, "sovai_http_rejected_connections_total", "counter",
            "HTTP connections refused because max_connections was reached.", servers,
            [](const net::ServerStats& s) { return s.rejected_connections; });
  PerServer(out, "sovai_http_active_requests", "gauge", "HTTP requests being handled now.", servers,
            [](const net::ServerStats& s) { return s.active_requests; });
  PerServer(out, "sovai_http_received_bytes_total", "counter", "Bytes read from HTTP sockets.",
            servers, [](const net::ServerStats& s) { return s.bytes_in; });
  PerServer(out, "sovai_http_sent_bytes_total", "counter", "Bytes written to HTTP sockets.",
            servers, [](const net::ServerStats& s) { return s.bytes_out; });

  Header(out, "sovai_http_requests_total", "counter",
         "HTTP requests answered, by route pattern, method and status.");
  for (const auto& [server, stats] : servers) {
    for (const net::RequestCount& count : stats.requests) {
      out += "sovai_http_requests_total{server=\"" + EscapeLabelValue(server) + "\",route=\"" +
             EscapeLabelValue(count.pattern) + "\",method=\"" + EscapeLabelValue(count.method) +
             "\",status=\"" + std::to_string(count.status) + "\"} " + std::to_string(count.count) +
             "\n";
    }
  }
  return out;
}

namespace {

void AppendCounter(std::string& out, const char* name, const char* help, uint64_t value) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
         " " + std::to_string(value) + "\n";
}

}  // namespace

std::string RenderObjectStoreMetrics(const objstore::StoreStats& store,
                                     const objstore::S3ApiStats& api) {
  std::string out;
  auto counter = [&](const char* name, const char* help, uint64_t value) {
    AppendCounter(out, name, help, value);
  };
  counter("sovai_objstore_commit_batches_total", "Metadata transactions committed (group commits).",
          store.commit_batches);
  counter("sovai_objstore_committed_writes_total", "Writes made durable by those commits.",
          store.committed_writes);
  counter("sovai_objstore_corruptions_total",
          "Stored blocks or objects that failed their checksum on read.", store.corruptions);
  counter("sovai_objstore_recovered_temp_files_total",
          "Committed files moved into place at start-up.", store.recovered_temp_files);
  counter("sovai_objstore_deleted_temp_files_total",
          "Unacknowledged temporary files deleted at start-up.", store.deleted_temp_files);
  counter("sovai_s3_auth_failures_total", "Requests whose authentication failed.",
          api.auth_failures.load());
  counter("sovai_s3_access_denied_total", "Requests denied by authorization.",
          api.access_denied.load());
  counter("sovai_s3_bytes_stored_total", "Object bytes received and stored.",
          api.bytes_stored.load());
  counter("sovai_s3_bytes_served_total", "Object bytes served by GET.", api.bytes_served.load());
  out +=
      "# HELP sovai_s3_authenticated_requests_total Authenticated S3 requests by payload mode.\n"
      "# TYPE sovai_s3_authenticated_requests_total counter\n";
  for (int mode = 0; mode < 5; ++mode) {
    out += std::string("sovai_s3_authenticated_requests_total{payload=\"") +
           objstore::PayloadModeName(mode) + "\"} " +
           std::to_string(api.payload_modes[mode].load()) + "\n";
  }
  return out;
}

std::string RenderLifecycleMetrics(const objstore::LifecycleStats& s) {
  std::string out;
  auto counter = [&](const char* name, const char* help, uint64_t value) {
    AppendCounter(out, name, help, value);
  };
  counter("sovai_s3_lifecycle_sweeps_total", "Applications of every bucket's lifecycle rules.",
          s.sweeps.load());
  counter("sovai_s3_lifecycle_expired_current_total",
          "Current object versions expired by lifecycle rules.", s.expired_current.load());
  counter("sovai_s3_lifecycle_expired_noncurrent_total",
          "Noncurrent object versions removed by lifecycle rules.", s.expired_noncurrent.load());
  counter("sovai_s3_lifecycle_removed_delete_markers_total",
          "Expired delete markers removed by lifecycle rules.", s.removed_delete_markers.load());
  counter("sovai_s3_lifecycle_aborted_uploads_total",
          "Incomplete multipart uploads aborted by lifecycle rules.", s.aborted_uploads.load());
  counter("sovai_s3_lifecycle_skipped_locked_total",
          "Versions a lifecycle rule would remove, kept by Object Lock.", s.skipped_locked.load());
  counter("sovai_s3_lifecycle_errors_total", "Lifecycle sweeps of a bucket that failed.",
          s.errors.load());
  return out;
}

}  // namespace sovai::cli
