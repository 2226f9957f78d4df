// The lifecycle sweeper (see lifecycle_sweeper.h).
#include "objstore/lifecycle_sweeper.h"

#include "base/log.h"
#include "objstore/object_lock.h"

namespace sovai::objstore {

namespace {

constexpr int kPageKeys = 1000;

// Refuses the removal when the version is not the one examined (a newer write replaced it).
S3Error Changed() {
  return S3Error(S3Code::kPreconditionFailed, "the version changed since the sweep examined it");
}

}  // namespace

LifecycleSweeper::LifecycleSweeper(Store& store, LifecycleSweeperOptions options)
    : store_(store), opts_(options) {
  if (!opts_.env) opts_.env = &base::Env::Default();
  if (opts_.day_micros <= 0) opts_.day_micros = kDayMicros;
}

LifecycleSweeper::~LifecycleSweeper() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LifecycleSweeper::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void LifecycleSweeper::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    SweepNow();
    lock.lock();
    cv_.wait_for(lock, std::chrono::seconds(std::max<int64_t>(1, opts_.interval_s)),
                 [&] { return stopping_; });
  }
}

void LifecycleSweeper::SweepNow() {
  std::lock_guard sweep(sweep_mu_);
  const int64_t now = opts_.env->NowUnixMicros();
  auto buckets = store_.ListBuckets();
  if (!buckets.ok()) {
    stats_.errors.fetch_add(1);
    return;
  }
  for (const BucketInfo& b : *buckets) {
    auto doc = store_.GetBucketConfig(b.name, std::string(kLifecycleConfigKind));
    if (!doc.ok() || !doc->has_value()) continue;  // a bucket deleted meanwhile, or no rules
    auto config = ParseLifecycleConfiguration(**doc);
    if (!config.ok()) {
      stats_.errors.fetch_add(1);
      continue;
    }
    SweepBucket(b, *config, now);
  }
  stats_.sweeps.fetch_add(1);
}

void LifecycleSweeper::SweepBucket(const BucketInfo& bucket, const LifecycleConfiguration& config,
                                   int64_t now) {
  SweepVersions(bucket, config, now);
  SweepUploads(bucket, config, now);
}

void LifecycleSweeper::SweepVersions(const BucketInfo& bucket, const LifecycleConfiguration& config,
                                     int64_t now) {
  const int64_t day = opts_.day_micros;
  // Per key (versions come newest first): when the newer version was written (when this one
  // became noncurrent), how many noncurrent versions are newer, and a latest delete marker that
  // may be the only version left.
  std::string key;
  int64_t successor_mtime = 0;
  int newer_noncurrent = 0;
  int versions_of_key = 0;
  std::optional<ObjectVersion> latest_marker;
  auto finish_key = [&] {
    if (latest_marker && versions_of_key == 1) {
      for (const LifecycleRule& r : config.rules) {
        if (!r.enabled || !r.expired_object_delete_marker || !RuleCovers(r, *latest_marker)) {
          continue;
        }
        const ObjectVersion examined = *latest_marker;
        // Count again: a page boundary may have hidden older versions (removing the marker
        // would make one of them current again). Versions are never added below a marker.
        ListVersionsOptions own;
        own.prefix = examined.key;
        own.max_keys = 2;
        auto listed = store_.ListVersions(bucket.name, own);
        if (!listed.ok()) break;
        int same_key = 0;
        for (const auto& other : listed->versions) same_key += other.key == examined.key;
        if (same_key != 1) break;  // keys sort together: a second one would be listed
        auto done = store_.Delete(bucket.name, examined.key, examined.version_id,
                                  [&](const ObjectVersion& v) -> S3Status {
                                    if (!v.is_latest) return Changed();
                                    return std::nullopt;
                                  });
        if (done.ok()) stats_.removed_delete_markers.fetch_add(1);
        break;
      }
    }
    latest_marker.reset();
    versions_of_key = 0;
    newer_noncurrent = 0;
  };
  auto expire_current = [&](const ObjectVersion& v) {
    auto expiry = CurrentExpiry(config, v, day);
    if (!expiry || expiry->at_micros > now) return false;
    const int64_t row = v.row_id;
    auto done = store_.Delete(bucket.name, v.key, std::nullopt,
                              [row](const ObjectVersion& current) -> S3Status {
                                if (current.row_id != row) return Changed();
                                return std::nullopt;
                              });
    if (done.ok()) {
      stats_.expired_current.fetch_add(1);
      return true;
    }
    return false;
  };
  auto expire_noncurrent = [&](const ObjectVersion& v) {
    for (const LifecycleRule& r : config.rules) {
      if (!r.enabled || r.noncurrent_days == 0 || !RuleCovers(r, v)) continue;
      if (newer_noncurrent < r.newer_noncurrent_versions) continue;
      if (DaysLater(successor_mtime, r.noncurrent_days, day) > now) continue;
      auto done = store_.Delete(bucket.name, v.key, v.version_id,
                                [now](const ObjectVersion& stored) -> S3Status {
                                  return CheckVersionRemovable(stored.meta.lock, now, false);
                                });
      if (done.ok()) {
        stats_.expired_noncurrent.fetch_add(1);
        return true;
      }
      if (done.error().code == S3Code::kAccessDenied) stats_.skipped_locked.fetch_add(1);
      return false;
    }
    return false;
  };

  ListVersionsOptions page;
  page.max_keys = kPageKeys;
  for (;;) {
    auto listed = store_.ListVersions(bucket.name, page);
    if (!listed.ok()) {
      stats_.errors.fetch_add(1);
      return;
    }
    for (const ObjectVersion& v : listed->versions) {
      if (v.key != key) {
        finish_key();
        key = v.key;
      }
      ++versions_of_key;
      if (v.is_latest) {
        if (v.delete_marker) {
          latest_marker = v;
        } else if (expire_current(v) && bucket.versioning == Versioning::kUnversioned) {
          --versions_of_key;
        }
      } else if (expire_noncurrent(v)) {
        --versions_of_key;
      } else {
        ++newer_noncurrent;
      }
      successor_mtime = v.mtime_micros;
    }
    if (!listed->truncated) break;
    page.key_marker = listed->next_key_marker;
    page.version_id_marker = listed->next_version_id_marker;
  }
  finish_key();
}

void LifecycleSweeper::SweepUploads(const BucketInfo& bucket, const LifecycleConfiguration& config,
                                    int64_t now) {
  bool any = false;
  for (const LifecycleRule& r : config.rules) any = any || (r.enabled && r.abort_incomplete_days);
  if (!any) return;
  ListUploadsOptions page;
  page.max_uploads = kPageKeys;
  for (;;) {
    bool truncated = false;
    auto uploads = store_.ListUploads(bucket.name, page, &truncated);
    if (!uploads.ok()) {
      stats_.errors.fetch_add(1);
      return;
    }
    for (const UploadInfo& u : *uploads) {
      for (const LifecycleRule& r : config.rules) {
        if (!r.enabled || r.abort_incomplete_days == 0 || !u.key.starts_with(r.filter.prefix)) {
          continue;
        }
        if (DaysLater(u.created_micros, r.abort_incomplete_days, opts_.day_micros) > now) continue;
        if (!store_.AbortUpload(u)) stats_.aborted_uploads.fetch_add(1);
        break;
      }
    }
    if (!truncated || uploads->empty()) break;
    page.key_marker = uploads->back().key;
    page.upload_id_marker = uploads->back().upload_id;
  }
}

}  // namespace sovai::objstore
