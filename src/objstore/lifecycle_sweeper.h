// Applies every bucket's lifecycle rules (lifecycle.h) in the background: expires current
// versions (a delete marker on versioned buckets, as S3 does), noncurrent versions, expired
// delete markers, and aborts incomplete multipart uploads. Each removal is conditional, in the
// store's transaction (VersionGuard): a version that changed since it was examined is left
// alone, and Object Lock (retention, legal hold) is always respected.
//
//   LifecycleSweeper sweeper(store, {.env = &env, .interval_s = 3600});
//   sweeper.Start();
//   sweeper.SweepNow();  // tests and the admin endpoint: one full sweep, now
//
// Thread-safety: every method is thread-safe; sweeps never overlap.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "base/env.h"
#include "objstore/lifecycle.h"
#include "objstore/store.h"

namespace sovai::objstore {

struct LifecycleSweeperOptions {
  base::Env* env = nullptr;  // clock; nullptr = Env::Default()
  int64_t interval_s = 3600;
  // How long a lifecycle "day" is (tests shorten it, as RGW's rgw_lc_debug_interval does).
  int64_t day_micros = kDayMicros;
};

struct LifecycleStats {
  std::atomic<uint64_t> sweeps{0};
  std::atomic<uint64_t> expired_current{0};     // current versions expired
  std::atomic<uint64_t> expired_noncurrent{0};  // noncurrent versions removed
  std::atomic<uint64_t> removed_delete_markers{0};
  std::atomic<uint64_t> aborted_uploads{0};
  std::atomic<uint64_t> skipped_locked{0};  // kept by Object Lock
  std::atomic<uint64_t> errors{0};
};

class LifecycleSweeper {
 public:
  LifecycleSweeper(Store& store, LifecycleSweeperOptions options);
  ~LifecycleSweeper();  // stops the thread
  LifecycleSweeper(const LifecycleSweeper&) = delete;
  LifecycleSweeper& operator=(const LifecycleSweeper&) = delete;

  // A background thread sweeping every interval_s.
  void Start();
  // One sweep of every bucket with rules, now; returns when it is done.
  void SweepNow();
  const LifecycleStats& stats() const { return stats_; }
  int64_t day_micros() const { return opts_.day_micros; }

 private:
  void SweepBucket(const BucketInfo& bucket, const LifecycleConfiguration& config, int64_t now);
  void SweepVersions(const BucketInfo& bucket, const LifecycleConfiguration& config, int64_t now);
  void SweepUploads(const BucketInfo& bucket, const LifecycleConfiguration& config, int64_t now);
  void Loop();

  Store& store_;
  LifecycleSweeperOptions opts_;
  LifecycleStats stats_;
  std::mutex sweep_mu_;  // held for a whole sweep: sweeps never overlap
  std::mutex mu_;        // guards stopping_
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace sovai::objstore
