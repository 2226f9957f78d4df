// The pieces of `sovai bucket` that are not the S3 client itself (exec::S3Client):
// `s3://bucket/key` arguments, local directory walks, and what `bucket sync` must copy.
//
// Thread-safety: functions are pure (or touch only the files named).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "exec/s3_client.h"

namespace sovai::net {
class HttpClient;
}  // namespace sovai::net

namespace sovai::cli::client {

struct S3Location {
  std::string bucket;
  std::string key;  // an object key or a prefix; may be empty
  bool operator==(const S3Location&) const = default;
};

// "s3://bucket[/key]" → the location; nullopt for anything not starting with "s3://" (a local
// path). InvalidArgument for "s3://" without a bucket name.
base::Result<std::optional<S3Location>> ParseS3Uri(std::string_view text);
// The argument of `bucket ls`: "bucket[/prefix]" or "s3://bucket[/prefix]".
base::Result<S3Location> ParseBucketPath(std::string_view text);
// "s3://bucket/key".
std::string S3Uri(const S3Location& location);

// A file or object by relative path, for sync.
struct SyncEntry {
  uint64_t size_bytes = 0;
  int64_t mtime_unix_micros = 0;
  bool operator==(const SyncEntry&) const = default;
};
using SyncListing = std::map<std::string, SyncEntry>;

// The regular files under `root` by relative '/'-separated path, without following symlinks.
// Symlinks, sockets and the like are skipped with a warning in `warnings`. Errors: `root` is not
// a directory, it cannot be read, or it holds more than kMaxLocalFiles files.
base::Result<SyncListing> ListLocalFiles(const std::string& root,
                                         std::vector<std::string>* warnings);

// The objects under the directory `prefix` of a listing, by path relative to it (the key rules of
// exec::RelativePathForKey: keys that cannot be files, such as "a/../b", are skipped with a
// warning; directory markers ending in '/' silently).
SyncListing RelativeObjects(std::string_view bucket, std::string_view prefix,
                            const std::vector<exec::S3Object>& objects,
                            std::vector<std::string>* warnings);

// What `bucket sync` does: copy every source entry that the destination lacks, whose size
// differs, or whose source is newer than the destination's copy, in whole seconds (a copy made
// by an earlier sync is at least as new as its source, so it is not copied again); with
// `delete_extra`, remove destination entries the source does not have.
struct SyncPlan {
  std::vector<std::string> copy;    // relative paths, sorted
  std::vector<std::string> remove;  // relative paths, sorted
  size_t unchanged = 0;
  uint64_t copy_bytes = 0;
};
SyncPlan PlanSync(const SyncListing& source, const SyncListing& destination, bool delete_extra);

}  // namespace sovai::cli::client
