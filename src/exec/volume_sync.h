// Volume sync: copies a volume's objects into the job's directory before it starts (SyncDown),
// and its changes back when it ends (SyncUp, rw and rwd volumes).
//
//   SOVAI_ASSIGN_OR_RETURN(SyncManifest manifest,
//                          SyncDown(s3, spec, dir, {.cache_dir = cache, .progress = log}));
//   db.SaveManifest(job, manifest.ToJson());   // INITIALIZING → RUNNING
//   ... the job runs ...
//   SOVAI_ASSIGN_OR_RETURN(SyncManifest baseline, SyncManifest::FromJson(db.LoadManifest(job)));
//   SOVAI_ASSIGN_OR_RETURN(SyncReport report,
//                          SyncUp(s3, spec, dir, baseline,
//                                 spec.permission == VolumePermission::kReadWriteDelete, {...}));
//
// Object key ↔ file: the key minus spec.KeyPrefix() is the path relative to the directory
// (volume_spec.h RelativePathForKey). Keys that would leave the directory or alias another file
// (a ".." or "." segment, an absolute path, an empty segment, NUL) are skipped with a warning;
// nothing is ever written outside `local_dir`. Every file is written atomically (temporary file,
// fsync, rename), so a crash mid-sync leaves whole files or none, plus temporaries that the next
// sync ignores. Keys ending in '/' (directory markers) become directories.
//
// The cache (SyncOptions::cache_dir, for ":cache" volumes) keeps one copy of each downloaded
// object, named by a hash of (bucket, key, ETag, size): an object whose ETag and size match a
// cached copy is taken from there instead of downloaded — hard-linked into read-only volumes,
// copied into writable ones (a job writing into a linked file would alter the cache). Least
// recently used copies are removed once the cache exceeds cache_max_bytes. Several syncs may use
// one cache directory at once.
//
// Symlinks in `local_dir` are never followed by SyncUp (skipped with a warning), nor are other
// non-regular files.
//
// Thread-safety: the functions may run concurrently on different directories with different
// S3Clients (an S3Client is single-threaded). A manifest and a report are values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "exec/s3_client.h"
#include "exec/volume_limits.h"
#include "exec/volume_spec.h"

namespace sovai::exec {

// What a sync did, for the job log and the API. `files`/`bytes` count what was transferred (or
// reused from the cache); warnings say what was skipped and why.
struct SyncReport {
  uint64_t files = 0;       // SyncDown: files written (downloaded + from cache); SyncUp: uploaded
  uint64_t bytes = 0;       // their total size
  uint64_t from_cache = 0;  // SyncDown: files taken from the cache
  uint64_t unchanged = 0;   // SyncUp: files equal to the baseline, not uploaded
  uint64_t deleted = 0;     // SyncUp with delete_removed: objects deleted
  uint64_t skipped = 0;     // keys or files skipped (each one also gives a warning)
  // Not persisted in a manifest's report:
  uint64_t units = 0;    // SyncUp: units (checkpoint directories) completed, manifest last
  uint64_t retried = 0;  // SyncUp: files that changed while read, left for the next sync
  // One line per skipped key or file, the first kMaxReportWarnings of them.
  std::vector<std::string> warnings;
  // The final progress line: "sync down data@EU-WEST-LOCAL/ds: 12 files, 3.4 MiB, 2 from cache".
  std::string summary;

  bool operator==(const SyncReport&) const = default;
};

// One file SyncDown wrote.
struct ManifestEntry {
  std::string path;  // relative to the volume directory, '/'-separated
  uint64_t size_bytes = 0;
  std::string etag;               // the object's, unquoted
  int64_t mtime_unix_micros = 0;  // the local file's after it was written

  bool operator==(const ManifestEntry&) const = default;
};

// The state of a volume directory right after SyncDown: what SyncUp compares against. It is
// persisted between the job's INITIALIZING and FINALIZING (and across a server restart) as JSON;
// docs/formats/volume-spec.md has the format.
struct SyncManifest {
  std::string bucket;
  std::string prefix;                // VolumeSpec::prefix
  std::vector<ManifestEntry> files;  // sorted by path, unique
  SyncReport report;                 // what the SyncDown that made it did

  // The entry for `path`, or nullptr.
  const ManifestEntry* Find(std::string_view path) const;

  std::string ToJson() const;
  // Errors: InvalidArgument for malformed JSON, a wrong or missing field, an unknown version, a
  // path that RelativePathForKey's rules refuse, paths not sorted and unique, more than
  // kMaxSyncFiles entries or more than kMaxManifestJsonBytes.
  static base::Result<SyncManifest> FromJson(std::string_view json);

  bool operator==(const SyncManifest&) const = default;
};

struct SyncOptions {
  // The volume cache directory (":cache" volumes); empty = no cache. Created when missing.
  std::string cache_dir;
  uint64_t cache_max_bytes = kDefaultVolumeCacheMaxBytes;
  // Receives progress lines as the sync goes (listing, periodic progress, each warning, the
  // summary); the job log gets them. Called on the syncing thread.
  std::function<void(std::string_view line)> progress;
  // Files and clock. nullptr = Env::Default().
  base::Env* env = nullptr;
  // SyncUpPaths: a unit goes up only when every file of it was last modified before this time
  // (the live sync's settle rule); 0 = whatever their age.
  int64_t unit_settled_before_unix_micros = 0;
};

// Downloads every object under spec's prefix into `local_dir` (created when missing), replacing
// files that exist; files that are not objects are left alone. Returns the manifest of what it
// wrote, with the report. Errors: those of S3Client (NotFound for a missing bucket,
// Unauthenticated for wrong keys, ...), of the local filesystem, and ResourceExhausted beyond
// kMaxSyncFiles objects. A failure can leave some files written (each one whole).
base::Result<SyncManifest> SyncDown(S3Client& s3, const VolumeSpec& spec,
                                    const std::string& local_dir, const SyncOptions& options = {});

// Uploads the regular files of `local_dir` that are new or changed since `baseline` (changed: size
// or mtime differ from the manifest entry), and with `delete_removed` deletes the objects of
// baseline entries whose files are gone. Files whose paths cannot be keys (invalid UTF-8, too
// long), symlinks and special files are skipped with a warning; so are AtomicFileWriter
// temporaries left by an interrupted sync. Errors: FailedPrecondition for a read-only volume,
// for delete_removed on a volume that is not rwd, or for a baseline made for another bucket or
// prefix; NotFound when `local_dir` does not exist; ResourceExhausted beyond kMaxSyncFiles files
// or kMaxSyncDirDepth levels; S3Client's and the filesystem's errors. Uploads happen before
// deletions: a failed upload stops the sync before anything is deleted.
//
// Units (docs/formats/volume-spec.md): the files of a unit directory (UnitDirFor) go up together
// once one of them changed — first the unit manifest with "complete": false, then the changed
// files, then the manifest listing every file — so that no reader trusts half a unit; staging
// directories (IsStagingPath) are never uploaded. Files are read so that none is stored torn
// (S3Client::PutObjectFromFile with a check): one that changes while read is counted in
// `retried` and left as it was in the bucket. With delete_removed, the manifest of a unit whose
// directory is gone is deleted before its files. `state_out`, when given, receives the baseline
// with every upload and deletion applied (what a later SyncUp compares against).
base::Result<SyncReport> SyncUp(S3Client& s3, const VolumeSpec& spec, const std::string& local_dir,
                                const SyncManifest& baseline, bool delete_removed,
                                const SyncOptions& options = {}, SyncManifest* state_out = nullptr);

// Uploads those of `paths` (relative to `local_dir`) that are new or changed since `state`, as
// SyncUp does (units as units, never a torn file), and records each upload in `state`. A path
// inside a unit stands for its whole unit. Paths that are gone, staging paths, unit manifests
// and AtomicFileWriter temporaries are passed over. Errors: as SyncUp's uploads (the first one
// stops the call; `state` holds what was stored until then).
base::Result<SyncReport> SyncUpPaths(S3Client& s3, const VolumeSpec& spec,
                                     const std::string& local_dir,
                                     const std::vector<std::string>& paths, SyncManifest& state,
                                     const SyncOptions& options = {});

// The unit `relative_path` belongs to: the innermost directory above it that is named
// "checkpoint-<digits>" (Hugging Face, PyTorch Lightning), or "step-<digits>" inside a
// "checkpoints" directory (sovai-engine train), or that holds base::kUnitMarkerName
// (`has_marker`, asked with the directory's relative path); "" when none.
std::string UnitDirFor(std::string_view relative_path,
                       const std::function<bool(const std::string& dir)>& has_marker);

// Whether `relative_path` is inside a staging directory: one a writer fills and then renames
// into place (".tmp-*", sovai-engine's; "tmp-checkpoint-*", Hugging Face's). Never uploaded.
bool IsStagingPath(std::string_view relative_path);

}  // namespace sovai::exec
