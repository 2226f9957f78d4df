// Named limits of job volumes: spec parsing (volume_spec.h), the S3 client (s3_client.h) and
// volume sync (volume_sync.h). Each is enforced where it is used; exceeding one is a clear error
// (or, for report warnings, a visible count of the ones left out), never a silent misbehaviour.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sovai::exec {

// --- Volume specs
// --------------------------------------------------------------------------------- A whole
// "bucket@REGION/prefix:/mount/path:rw:cache" string (so also bounds the mount path).
inline constexpr size_t kMaxVolumeSpecBytes = 4096;
// The region part; server regions are 2..32 characters (src/cli/server.cc ValidateRegion).
inline constexpr size_t kMinRegionBytes = 2;
inline constexpr size_t kMaxRegionBytes = 32;
// Volumes one job may mount.
inline constexpr size_t kMaxVolumesPerJob = 32;
// ":sync=30s": the live sync's round interval of rw/rwd volumes (volume_spec.h, live_sync.h).
inline constexpr int64_t kDefaultSyncIntervalS = 30;
inline constexpr int64_t kMinSyncIntervalS = 1;
inline constexpr int64_t kMaxSyncIntervalS = 24 * 3600;

// --- Local paths ------------------------------------------------------------------------------
// One path component (NAME_MAX on Linux filesystems).
inline constexpr size_t kMaxPathComponentBytes = 255;
// The name of a file SyncDown writes: NAME_MAX less what its temporary name adds
// ("." + name + ".sovai-tmp." + 16 hex digits), so that the temporary can exist.
inline constexpr size_t kMaxSyncedNameBytes = kMaxPathComponentBytes - 28;
// A relative path inside the volume directory.
inline constexpr size_t kMaxRelativePathBytes = 4096;
// Directory nesting SyncUp walks before refusing (a loop guard and a bound on recursion).
inline constexpr int kMaxSyncDirDepth = 256;

// --- S3 client ----------------------------------------------------------------------------------
// Files above this size are uploaded with multipart upload.
inline constexpr uint64_t kDefaultMultipartThresholdBytes = 64ull << 20;  // 64 MiB
inline constexpr uint64_t kDefaultPartSizeBytes = 16ull << 20;            // 16 MiB
// S3's rules for parts: every part but the last is at least 5 MiB, at most 5 GiB, and an upload
// has at most 10 000 parts. When a file would need more parts, the part size grows.
inline constexpr uint64_t kMinPartSizeBytes = 5ull << 20;
inline constexpr uint64_t kMaxPartSizeBytes = 5ull << 30;
inline constexpr uint64_t kMaxParts = 10000;
// S3's largest object (5 TiB) and largest single PUT (5 GiB).
inline constexpr uint64_t kMaxObjectBytes = 5ull << 40;
inline constexpr uint64_t kMaxSinglePutBytes = 5ull << 30;
// Keys per ListObjectsV2 page (S3's maximum).
inline constexpr int kDefaultListPageKeys = 1000;
// Objects one ListObjects call collects before it stops with ResourceExhausted.
inline constexpr size_t kMaxListedObjects = 1'000'000;
// Pages one ListObjects call follows (a server that never stops truncating cannot loop forever).
inline constexpr size_t kMaxListPages = 100'000;
// The body of an S3 error response kept for its Code and Message.
inline constexpr size_t kMaxErrorBodyBytes = 64u << 10;
// A buffered (XML) response: listings, InitiateMultipartUpload, CompleteMultipartUpload.
inline constexpr uint64_t kMaxXmlResponseBytes = 16ull << 20;
// Attempts of one request when the server is busy (503 SlowDown, 500 InternalError) or the
// connection broke, with exponential backoff starting at kRetryBackoff.
inline constexpr int kMaxRequestAttempts = 3;
inline constexpr std::chrono::milliseconds kRetryBackoff{200};
// Pieces a request body is read from a file in.
inline constexpr size_t kFileReadChunkBytes = 256u << 10;

// --- Volume sync --------------------------------------------------------------------------------
// Files one sync handles (a manifest holds at most this many entries).
inline constexpr size_t kMaxSyncFiles = 1'000'000;
// A serialized manifest (about 150 bytes per file at kMaxSyncFiles).
inline constexpr size_t kMaxManifestJsonBytes = 256u << 20;
// Warnings kept in a SyncReport; the rest are counted in `skipped` only.
inline constexpr size_t kMaxReportWarnings = 100;
// The default size of a volume cache directory; least recently used entries go beyond it.
inline constexpr uint64_t kDefaultVolumeCacheMaxBytes = 100ull << 30;  // 100 GiB
// How often a running sync reports progress.
inline constexpr int64_t kProgressIntervalMicros = 10'000'000;

// --- Live sync (live_sync.h) ------------------------------------------------------------------
// A file is uploaded once closed and unchanged for the settle time: min(this, the interval).
inline constexpr int64_t kMaxSyncSettleMicros = 5'000'000;
// The full scan (the safety net under inotify) runs every this many rounds, and at least once a
// kMaxScanIntervalMicros.
inline constexpr int kScanEveryRounds = 10;
inline constexpr int64_t kMaxScanIntervalMicros = 300'000'000;
// inotify watches one workload may hold (one per directory); beyond it, the volume is followed
// by scans only (a line in the log says so).
inline constexpr size_t kMaxSyncWatches = 65'536;
// A file at most this large is read into memory and checked unchanged before its PUT; larger
// ones go up as multipart uploads, checked unchanged before the upload completes
// (S3Client::PutObjectFromFile with before_commit). So a sync holds at most this much of a file
// in memory, and never stores a file that changed while it was read.
inline constexpr uint64_t kSnapshotInMemoryBytes = 8ull << 20;

}  // namespace sovai::exec
