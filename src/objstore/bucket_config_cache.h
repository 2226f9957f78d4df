// The S3 front end's parsed per-bucket documents (bucket_config rows) kept in memory,
// so that the request paths that consult one (x-amz-expiration on every GET, the Object Lock
// default on every PUT) do not read the database each time. An entry is keyed by the bucket's
// creation time, so a bucket deleted and made again never sees the old document; writes through
// this process invalidate it. Read errors are returned, never cached. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "objstore/s3_error.h"
#include "objstore/store.h"

namespace sovai::objstore {

template <class T>
class BucketConfigCache {
 public:
  using Parse = S3Result<T> (*)(std::string_view);
  BucketConfigCache(std::string kind, Parse parse) : kind_(std::move(kind)), parse_(parse) {}

  // The bucket's parsed document; nullptr when it has none.
  S3Result<std::shared_ptr<const T>> Get(Store& store, const BucketInfo& bucket) {
    {
      std::lock_guard lock(mu_);
      auto it = entries_.find(bucket.name);
      if (it != entries_.end() && it->second.created_micros == bucket.created_micros) {
        return it->second.config;
      }
    }
    SOVAI_S3_ASSIGN_OR_RETURN(auto doc, store.GetBucketConfig(bucket.name, kind_));
    std::shared_ptr<const T> config;
    if (doc) {
      SOVAI_S3_ASSIGN_OR_RETURN(T parsed, parse_(*doc));
      config = std::make_shared<const T>(std::move(parsed));
    }
    std::lock_guard lock(mu_);
    entries_[bucket.name] = Entry{bucket.created_micros, config};
    return config;
  }

  // After the bucket's document was replaced or deleted.
  void Invalidate(const std::string& bucket) {
    std::lock_guard lock(mu_);
    entries_.erase(bucket);
  }

 private:
  struct Entry {
    int64_t created_micros = 0;
    std::shared_ptr<const T> config;
  };
  const std::string kind_;
  const Parse parse_;
  std::mutex mu_;  // guards entries_
  std::map<std::string, Entry> entries_;
};

}  // namespace sovai::objstore
