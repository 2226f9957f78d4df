// Prometheus text exposition (format 0.0.4) of the server's own metrics: build info, uptime and,
// per HTTP listener, connections, bytes and requests by route pattern, method and status.
// Route patterns, not raw paths, label the requests, so the number of series stays bounded.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/http.h"
#include "objstore/lifecycle_sweeper.h"
#include "objstore/s3_api.h"
#include "objstore/store.h"

namespace sovai::cli {

// A listener's name ("api", "s3") and its stats.
using NamedServerStats = std::pair<std::string, net::ServerStats>;

std::string RenderPrometheusMetrics(std::string_view version, double uptime_s,
                                    const std::vector<NamedServerStats>& servers);

// The object store's counters (commit batches, corruptions, recovery, auth failures, bytes).
std::string RenderObjectStoreMetrics(const objstore::StoreStats& store,
                                     const objstore::S3ApiStats& api);
// The lifecycle sweeper's counters (sovai_s3_lifecycle_*).
std::string RenderLifecycleMetrics(const objstore::LifecycleStats& stats);

// Escapes a label value: backslash, double quote and newline, as the format requires.
std::string EscapeLabelValue(std::string_view value);

}  // namespace sovai::cli
