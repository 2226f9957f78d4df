#include "cli/client/bucket_ops.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "base/crypto.h"
#include "base/strings.h"
#include "base/time.h"
#include "cli/client/limits.h"
#include "exec/volume_spec.h"
#include "net/client.h"
#include "objstore/sigv4.h"

namespace sovai::cli::client {
namespace {

namespace fs = std::filesystem;
using base::Status;
using base::StatusCode;

constexpr std::string_view kS3Scheme = "s3://";

// "s3://bucket/key" → {bucket, key}, `uri` starting with the scheme. A plain Result (no optional to
// unwrap twice) also keeps g++ from a -Wmaybe-uninitialized false positive in ParseBucketPath.
base::Result<S3Location> ParseWithScheme(std::string_view uri) {
  std::string_view rest = uri.substr(kS3Scheme.size());
  size_t slash = rest.find('/');
  S3Location location;
  location.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) location.key = std::string(rest.substr(slash + 1));
  if (location.bucket.empty()) {
    return base::InvalidArgumentError("'" + std::string(uri) +
                                      "' names no bucket; write s3://bucket/key");
  }
  return location;
}

}  // namespace

base::Result<std::optional<S3Location>> ParseS3Uri(std::string_view text) {
  if (!text.starts_with(kS3Scheme)) return std::optional<S3Location>();
  SOVAI_ASSIGN_OR_RETURN(S3Location location, ParseWithScheme(text));
  return std::optional<S3Location>(std::move(location));
}

base::Result<S3Location> ParseBucketPath(std::string_view text) {
  if (text.starts_with(kS3Scheme)) return ParseWithScheme(text);
  return ParseWithScheme(std::string(kS3Scheme) + std::string(text));
}

std::string S3Uri(const S3Location& location) {
  return std::string(kS3Scheme) + location.bucket + "/" + location.key;
}

base::Result<SyncListing> ListLocalFiles(const std::string& root,
                                         std::vector<std::string>* warnings) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return base::InvalidArgumentError("'" + root + "' is not a directory");
  }
  SyncListing files;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  if (ec) return base::ErrnoToStatus(ec.value(), "listing '" + root + "'");
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return base::ErrnoToStatus(ec.value(), "listing '" + root + "'");
    const fs::path& path = it->path();
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0)
      return base::ErrnoToStatus(errno, "lstat '" + path.string() + "'");
    if (S_ISDIR(st.st_mode)) continue;
    const std::string relative = path.lexically_relative(root).generic_string();
    if (!S_ISREG(st.st_mode)) {
      warnings->push_back("skipped " + path.string() + ": not a regular file");
      continue;
    }
    if (base::IsAtomicWriteTempName(path.filename().string())) continue;  // an unfinished download
    if (files.size() >= kMaxLocalFiles) {
      return base::ResourceExhaustedError("'" + root + "' holds more than " +
                                          std::to_string(kMaxLocalFiles) +
                                          " files; copy a subdirectory at a time");
    }
    files[relative] =
        SyncEntry{static_cast<uint64_t>(st.st_size),
                  int64_t{st.st_mtim.tv_sec} * base::kMicrosPerSecond + st.st_mtim.tv_nsec / 1000};
  }
  return files;
}

SyncListing RelativeObjects(std::string_view bucket, std::string_view prefix,
                            const std::vector<exec::S3Object>& objects,
                            std::vector<std::string>* warnings) {
  exec::VolumeSpec spec;
  spec.bucket = std::string(bucket);
  spec.prefix = std::string(prefix);
  while (!spec.prefix.empty() && spec.prefix.back() == '/') spec.prefix.pop_back();
  SyncListing listing;
  for (const exec::S3Object& object : objects) {
    if (object.key.ends_with('/')) continue;  // a directory marker
    auto relative = exec::RelativePathForKey(spec, object.key);
    if (!relative.ok()) {
      warnings->push_back("skipped " + S3Uri({std::string(bucket), object.key}) + ": " +
                          relative.status().message());
      continue;
    }
    listing[*relative] = SyncEntry{object.size_bytes, object.last_modified_unix_micros};
  }
  return listing;
}

SyncPlan PlanSync(const SyncListing& source, const SyncListing& destination, bool delete_extra) {
  // Whole seconds: S3 listings may give Last-Modified in seconds, and a file uploaded within the
  // second it was written must not look newer than its copy.
  auto seconds = [](int64_t micros) { return micros / base::kMicrosPerSecond; };
  SyncPlan plan;
  for (const auto& [path, entry] : source) {
    auto it = destination.find(path);
    if (it != destination.end() && it->second.size_bytes == entry.size_bytes &&
        seconds(entry.mtime_unix_micros) <= seconds(it->second.mtime_unix_micros)) {
      ++plan.unchanged;
      continue;
    }
    plan.copy.push_back(path);
    plan.copy_bytes += entry.size_bytes;
  }
  if (delete_extra) {
    for (const auto& [path, entry] : destination) {
      if (!source.contains(path)) plan.remove.push_back(path);
    }
  }
  return plan;
}

}  // namespace sovai::cli::client
