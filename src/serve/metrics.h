// Prometheus metrics of the inference server (GET /metrics): latency histograms with fixed
// buckets, and the text exposition format (version 0.0.4).
//
// Thread-safety: Histogram::Observe and Render may run concurrently (relaxed atomics: a scrape
// may see a count one observation ahead of the sum, which Prometheus tolerates).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sovai::serve {

class Histogram {
 public:
  // `bounds` are the buckets' upper bounds in seconds, increasing (+Inf is implied).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double seconds);
  // "# HELP", "# TYPE ... histogram", the _bucket{le=..} lines, _sum and _count.
  void Render(std::string_view name, std::string_view help, std::string& out) const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::vector<std::atomic<uint64_t>> buckets_;  // per bound, not cumulative; last is +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_micros_{0};
};

// "# HELP name help\n# TYPE name kind\nname value\n" for one unlabelled gauge or counter.
void RenderMetric(std::string_view name, std::string_view kind, std::string_view help, double value,
                  std::string& out);

}  // namespace sovai::serve
