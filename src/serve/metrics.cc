#include "serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sovai::serve {
namespace {

std::string FormatValue(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.12g", value);  // 0.1, not 0.10000000000000001
  return buf;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1) {}

void Histogram::Observe(double seconds) {
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin());
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_micros_.fetch_add(static_cast<uint64_t>(std::max(0.0, seconds) * 1e6),
                        std::memory_order_relaxed);
}

void Histogram::Render(std::string_view name, std::string_view help, std::string& out) const {
  const std::string n(name);
  out += "# HELP " + n + " " + std::string(help) + "\n# TYPE " + n + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    const std::string le = i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf";
    out += n + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += n + "_sum " + FormatValue(static_cast<double>(sum_micros_.load()) / 1e6) + "\n";
  out += n + "_count " + std::to_string(cumulative) + "\n";
}

void RenderMetric(std::string_view name, std::string_view kind, std::string_view help, double value,
                  std::string& out) {
  const std::string n(name);
  out += "# HELP " + n + " " + std::string(help) + "\n# TYPE " + n + " " + std::string(kind) +
         "\n" + n + " " + FormatValue(value) + "\n";
}

}  // namespace sovai::serve
