#include "exec/volume_sync.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/crypto.h"
#include "base/json.h"
#include "base/strings.h"
#include "base/unit_manifest.h"
#include "exec/internal/sync_common.h"

namespace sovai::exec {

using base::Env;
using base::FileType;
using base::Result;
using base::Status;

namespace internal {

Result<LinkStat> LStat(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return base::ErrnoToStatus(errno, "lstat '" + path + "'");
  LinkStat out;
  out.type = S_ISREG(st.st_mode)   ? FileType::kRegular
             : S_ISDIR(st.st_mode) ? FileType::kDirectory
             : S_ISLNK(st.st_mode) ? FileType::kSymlink
                                   : FileType::kOther;
  out.size_bytes = static_cast<uint64_t>(st.st_size);
  out.mtime_unix_micros =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000 + st.st_mtim.tv_nsec / 1000;
  return out;
}

std::string TempPathFor(const std::string& dir, std::string_view final_name) {
  std::string name =
      "." + std::string(final_name) + ".sovai-tmp." + base::HexEncode(base::RandomBytes(8));
  SOVAI_CHECK(base::IsAtomicWriteTempName(name)) << name;
  return base::JoinPath(dir, name);
}

void Progress::Warn(std::string line) {
  ++report_.skipped;
  if (report_.warnings.size() < kMaxReportWarnings) {
    Line("warning: " + line);
    report_.warnings.push_back(std::move(line));
  } else if (report_.skipped == kMaxReportWarnings + 1) {
    Line("warning: more keys or files skipped; only their count is reported");
  }
}

void Progress::Tick(const std::string& text) {
  const int64_t now = env_.NowMonotonicMicros();
  if (now - last_micros_ < kProgressIntervalMicros) return;
  last_micros_ = now;
  Line(text);
}

}  // namespace internal

namespace {

using internal::LinkStat;
using internal::LStat;
using internal::Progress;
using internal::TempPathFor;

constexpr int kManifestVersion = 1;
constexpr std::string_view kManifestFormat = "sovai-volume-manifest";
// Cached copies live in <cache_dir>/objects, one flat directory of hash-named files.
constexpr std::string_view kCacheObjectsDir = "objects";
// A temporary in the cache older than this was left by a crashed sync and is removed.
constexpr int64_t kStaleCacheTempMicros = 24ll * 3600 * 1'000'000;

// Makes sure every directory of `relative_dir` exists inside `root` as a real directory,
// creating missing ones. FailedPrecondition when a component is a file, a symlink or something
// else (the key cannot be placed; never followed); other errors are the filesystem's.
// `verified` remembers directories already checked during this sync.
Status EnsureDirs(Env& env, const std::string& root, std::string_view relative_dir,
                  std::set<std::string>& verified) {
  std::string relative;
  for (std::string_view component : base::Split(relative_dir, '/', /*skip_empty=*/true)) {
    if (!relative.empty()) relative += '/';
    relative += component;
    if (verified.count(relative) != 0) continue;
    const std::string path = base::JoinPath(root, relative);
    Result<LinkStat> st = LStat(path);
    if (!st.ok() && st.status().code() == base::StatusCode::kNotFound) {
      Status created = env.CreateDir(path);
      // Another writer may have created it meanwhile: look again.
      if (!created.ok() && created.code() != base::StatusCode::kAlreadyExists) return created;
      st = LStat(path);
    }
    if (!st.ok()) return st.status();
    if (st->type != FileType::kDirectory) {
      return base::FailedPreconditionError(
          "'" + relative + "' is " +
          (st->type == FileType::kSymlink ? "a symlink" : "not a directory"));
    }
    verified.insert(relative);
  }
  return Status();
}

// Copies `from` to `to` atomically (AtomicFileWriter).
Status CopyFile(Env& env, const std::string& from, const std::string& to) {
  SOVAI_ASSIGN_OR_RETURN(auto source, env.NewRandomAccessFile(from));
  SOVAI_ASSIGN_OR_RETURN(auto writer, base::AtomicFileWriter::Open(env, to));
  std::string buffer(kFileReadChunkBytes, '\0');
  for (uint64_t offset = 0;;) {
    SOVAI_ASSIGN_OR_RETURN(size_t n, source->ReadAt(offset, std::span<char>(buffer)));
    if (n == 0) break;
    SOVAI_RETURN_IF_ERROR(writer->Append(std::string_view(buffer.data(), n)));
    offset += n;
  }
  return writer->Commit();
}

// Hard-links `from` to `to`, replacing `to` atomically: link to a temporary name, then rename.
Status LinkFile(Env& env, const std::string& from, const std::string& to) {
  const std::string dir = base::DirName(to);
  const std::string temp = TempPathFor(dir, base::BaseName(to));
  if (::link(from.c_str(), temp.c_str()) != 0) {
    return base::ErrnoToStatus(errno, "link '" + from + "' to '" + temp + "'");
  }
  Status renamed = env.RenameFile(temp, to);
  if (!renamed.ok()) {
    env.DeleteFile(temp).IgnoreError();
    return renamed;
  }
  return env.SyncDir(dir);
}

// The volume cache: hash-named copies of downloaded objects.
class VolumeCache {
 public:
  VolumeCache(Env& env, std::string dir) : env_(env), dir_(std::move(dir)) {}

  Status Open() { return env_.CreateDirs(dir_); }

  // Where the copy of (bucket, key, etag, size) lives. The name hashes all four, so a changed
  // object never matches an old copy and keys need no escaping.
  std::string PathFor(std::string_view bucket, const S3Object& object) const {
    std::string id = std::string(bucket);
    id += '\0';
    id += object.key;
    id += '\0';
    id += object.etag;
    id += '\0';
    id += std::to_string(object.size_bytes);
    return base::JoinPath(dir_, base::HexEncode(base::Sha256(id)));
  }

  // Whether a usable copy is at `path` (a regular file of the right size); marks it used.
  bool Lookup(const std::string& path, uint64_t size_bytes) {
    Result<LinkStat> st = LStat(path);
    if (!st.ok() || st->type != FileType::kRegular || st->size_bytes != size_bytes) return false;
    // The mtime orders eviction (least recently used first).
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
    return true;
  }

  // Removes the least recently used copies until the cache holds at most `max_bytes`, and
  // temporaries a crashed sync left behind. Copies in use elsewhere stay valid: a hard link
  // keeps its data, and a copy was made already.
  Status Evict(uint64_t max_bytes) {
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> names, env_.ListDir(dir_));
    struct Entry {
      int64_t mtime_unix_micros;
      uint64_t size_bytes;
      std::string path;
    };
    std::vector<Entry> entries;
    uint64_t total_bytes = 0;
    const int64_t now = env_.NowUnixMicros();
    for (const std::string& name : names) {
      const std::string path = base::JoinPath(dir_, name);
      Result<LinkStat> st = LStat(path);
      if (!st.ok() || st->type != FileType::kRegular) continue;
      if (base::IsAtomicWriteTempName(name)) {
        if (now - st->mtime_unix_micros > kStaleCacheTempMicros) {
          env_.DeleteFile(path).IgnoreError();
        }
        continue;
      }
      entries.push_back({st->mtime_unix_micros, st->size_bytes, path});
      total_bytes += st->size_bytes;
    }
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.mtime_unix_micros < b.mtime_unix_micros;
    });
    for (const Entry& entry : entries) {
      if (total_bytes <= max_bytes) break;
      Status deleted = env_.DeleteFile(entry.path);
      // Another sync may have evicted it first.
      if (!deleted.ok() && deleted.code() != base::StatusCode::kNotFound) return deleted;
      total_bytes -= entry.size_bytes;
    }
    return Status();
  }

 private:
  Env& env_;
  std::string dir_;
};

std::string DownSummary(const VolumeSpec& spec, const SyncReport& report) {
  std::string line = "sync down " + spec.SourceName() + ": " + std::to_string(report.files) +
                     " files, " + base::HumanBytes(report.bytes) + ", " +
                     std::to_string(report.from_cache) + " from cache";
  if (report.skipped > 0) line += ", " + std::to_string(report.skipped) + " skipped";
  return line;
}

std::string UpSummary(const VolumeSpec& spec, const SyncReport& report, bool delete_removed) {
  std::string line = "sync up " + spec.SourceName() + ": " + std::to_string(report.files) +
                     " files, " + base::HumanBytes(report.bytes) + " uploaded, " +
                     std::to_string(report.unchanged) + " unchanged";
  if (delete_removed) line += ", " + std::to_string(report.deleted) + " deleted";
  if (report.skipped > 0) line += ", " + std::to_string(report.skipped) + " skipped";
  return line;
}

// Puts one object at `dest`: from the cache when it holds the object, else downloaded (through
// the cache when there is one). Returns the object as stored (its ETag may be newer than the
// listing's if it changed meanwhile) and whether the cache served it.
struct Placed {
  S3Object object;
  bool from_cache = false;
};
Result<Placed> PlaceObject(Env& env, S3Client& s3, const VolumeSpec& spec, const S3Object& listed,
                           const std::string& dest, VolumeCache* cache) {
  if (cache == nullptr) {
    SOVAI_ASSIGN_OR_RETURN(S3Object got, s3.GetObjectToFile(spec.bucket, listed.key, dest));
    return Placed{std::move(got), false};
  }
  // Read-only volumes are mounted read-only, so a hard link cannot be written through; writable
  // ones get a copy, or the job could alter the cached bytes in place.
  auto place = [&](const std::string& entry) -> Status {
    if (spec.permission != VolumePermission::kReadOnly) return CopyFile(env, entry, dest);
    Status linked = LinkFile(env, entry, dest);
    // Another filesystem (EXDEV) or one without hard links: a copy does as well.
    if (!linked.ok() && linked.code() != base::StatusCode::kNotFound) {
      return CopyFile(env, entry, dest);
    }
    return linked;
  };
  std::string entry = cache->PathFor(spec.bucket, listed);
  if (cache->Lookup(entry, listed.size_bytes)) {
    Status placed = place(entry);
    if (placed.ok()) return Placed{listed, true};
    // Evicted by a concurrent sync between the lookup and the link: download instead.
    if (placed.code() != base::StatusCode::kNotFound) return placed;
  }
  SOVAI_ASSIGN_OR_RETURN(S3Object got, s3.GetObjectToFile(spec.bucket, listed.key, entry));
  if (got.etag != listed.etag || got.size_bytes != listed.size_bytes) {
    // The object changed since the listing: file the copy under what it really is.
    const std::string actual = cache->PathFor(spec.bucket, got);
    SOVAI_RETURN_IF_ERROR(env.RenameFile(entry, actual));
    entry = actual;
  }
  SOVAI_RETURN_IF_ERROR(place(entry));
  return Placed{std::move(got), false};
}

}  // namespace

const ManifestEntry* SyncManifest::Find(std::string_view path) const {
  auto it = std::lower_bound(files.begin(), files.end(), path,
                             [](const ManifestEntry& e, std::string_view p) { return e.path < p; });
  return it != files.end() && it->path == path ? &*it : nullptr;
}

std::string SyncManifest::ToJson() const {
  nlohmann::json files_json = nlohmann::json::array();
  for (const ManifestEntry& e : files) {
    files_json.push_back({{"path", e.path},
                          {"size", e.size_bytes},
                          {"etag", e.etag},
                          {"mtime_us", e.mtime_unix_micros}});
  }
  nlohmann::json report_json = {{"files", report.files},           {"bytes", report.bytes},
                                {"from_cache", report.from_cache}, {"unchanged", report.unchanged},
                                {"deleted", report.deleted},       {"skipped", report.skipped},
                                {"warnings", report.warnings},     {"summary", report.summary}};
  nlohmann::json doc = {{"format", kManifestFormat}, {"version", kManifestVersion},
                        {"bucket", bucket},          {"prefix", prefix},
                        {"files", files_json},       {"report", report_json}};
  return base::DumpJson(doc);
}

Result<SyncManifest> SyncManifest::FromJson(std::string_view json) {
  auto fail = [](std::string what) {
    return base::InvalidArgumentError("volume manifest: " + std::move(what));
  };
  if (json.size() > kMaxManifestJsonBytes) {
    return fail("larger than " + std::to_string(kMaxManifestJsonBytes) + " bytes");
  }
  Result<nlohmann::json> parsed = base::ParseJson(json, {.max_bytes = kMaxManifestJsonBytes});
  if (!parsed.ok()) return fail(parsed.status().message());
  const nlohmann::json& doc = *parsed;
  auto format = base::GetString(doc, "format");
  if (!format.ok() || *format != kManifestFormat) {
    return fail("not a manifest (\"format\" must be \"" + std::string(kManifestFormat) + "\")");
  }
  auto version = base::GetInt(doc, "version");
  if (!version.ok()) return fail(version.status().message());
  if (*version != kManifestVersion) {
    return fail("version " + std::to_string(*version) + " is not supported (this build reads " +
                std::to_string(kManifestVersion) + ")");
  }
  SyncManifest manifest;
  auto bucket = base::GetString(doc, "bucket");
  auto prefix = base::GetString(doc, "prefix");
  if (!bucket.ok()) return fail(bucket.status().message());
  if (!prefix.ok()) return fail(prefix.status().message());
  manifest.bucket = std::move(*bucket);
  manifest.prefix = std::move(*prefix);
  // The path rules are the key rules: a manifest cannot name a file outside the directory.
  VolumeSpec spec;
  spec.prefix = manifest.prefix;

  auto files = base::GetArray(doc, "files");
  if (!files.ok()) return fail(files.status().message());
  if ((*files)->size() > kMaxSyncFiles) {
    return fail("more than " + std::to_string(kMaxSyncFiles) + " files");
  }
  for (const nlohmann::json& item : **files) {
    ManifestEntry e;
    auto path = base::GetString(item, "path");
    auto size = base::GetUint(item, "size");
    auto etag = base::GetString(item, "etag");
    auto mtime = base::GetInt(item, "mtime_us");
    for (const Status& st : {path.status(), size.status(), etag.status(), mtime.status()}) {
      if (!st.ok())
        return fail("files[" + std::to_string(manifest.files.size()) + "]: " + st.message());
    }
    e.path = std::move(*path);
    if (Result<std::string> ok = RelativePathForKey(spec, spec.KeyPrefix() + e.path);
        !ok.ok() || *ok != e.path) {
      return fail("files[" + std::to_string(manifest.files.size()) + "]: path '" + e.path +
                  "' is not a safe relative path");
    }
    if (!manifest.files.empty() && !(manifest.files.back().path < e.path)) {
      return fail("files are not sorted by path and unique at '" + e.path + "'");
    }
    e.size_bytes = *size;
    e.etag = std::move(*etag);
    e.mtime_unix_micros = *mtime;
    manifest.files.push_back(std::move(e));
  }

  auto report = base::GetObject(doc, "report");
  if (!report.ok()) return fail(report.status().message());
  const nlohmann::json& r = **report;
  SyncReport& out = manifest.report;
  const std::pair<const char*, uint64_t*> counters[] = {
      {"files", &out.files},         {"bytes", &out.bytes},     {"from_cache", &out.from_cache},
      {"unchanged", &out.unchanged}, {"deleted", &out.deleted}, {"skipped", &out.skipped}};
  for (auto [field, value] : counters) {
    auto n = base::GetUint(r, field);
    if (!n.ok()) return fail("report: " + n.status().message());
    *value = *n;
  }
  auto summary = base::GetString(r, "summary");
  if (!summary.ok()) return fail("report: " + summary.status().message());
  out.summary = std::move(*summary);
  auto warnings = base::GetArray(r, "warnings");
  if (!warnings.ok()) return fail("report: " + warnings.status().message());
  for (const nlohmann::json& w : **warnings) {
    if (!w.is_string() || out.warnings.size() >= kMaxReportWarnings) {
      return fail("report: warnings must be at most " + std::to_string(kMaxReportWarnings) +
                  " strings");
    }
    out.warnings.push_back(w.get<std::string>());
  }
  return manifest;
}

Result<SyncManifest> SyncDown(S3Client& s3, const VolumeSpec& spec, const std::string& local_dir,
                              const SyncOptions& options) {
  Env& env = options.env != nullptr ? *options.env : Env::Default();
  SyncManifest manifest;
  manifest.bucket = spec.bucket;
  manifest.prefix = spec.prefix;
  Progress progress(options, env, manifest.report);
  SyncReport& report = manifest.report;

  SOVAI_RETURN_IF_ERROR(env.CreateDirs(local_dir));
  std::unique_ptr<VolumeCache> cache;
  if (!options.cache_dir.empty()) {
    cache = std::make_unique<VolumeCache>(
        env, base::JoinPath(options.cache_dir, std::string(kCacheObjectsDir)));
    SOVAI_RETURN_IF_ERROR(cache->Open());
  }

  SOVAI_ASSIGN_OR_RETURN(std::vector<S3Object> objects,
                         s3.ListObjects(spec.bucket, spec.KeyPrefix()));
  if (objects.size() > kMaxSyncFiles) {
    return base::ResourceExhaustedError(
        "sync down " + spec.SourceName() + ": " + std::to_string(objects.size()) +
        " objects, more than a volume may hold (" + std::to_string(kMaxSyncFiles) + ")");
  }
  uint64_t listed_bytes = 0;
  for (const S3Object& o : objects) listed_bytes += o.size_bytes;
  progress.Line("sync down " + spec.SourceName() + ": " + std::to_string(objects.size()) +
                " objects, " + base::HumanBytes(listed_bytes));

  // Units (checkpoint directories) come down whole or not at all.
  SOVAI_ASSIGN_OR_RETURN(std::set<std::string> refused,
                         internal::UntrustedUnitKeys(s3, spec, objects, local_dir, env, progress));

  std::set<std::string> verified_dirs;
  const std::string key_prefix = spec.KeyPrefix();
  for (const S3Object& object : objects) {
    if (refused.count(object.key) != 0) continue;
    // A directory marker ("ds/sub/") makes the directory, so empty directories survive.
    if (!object.key.empty() && object.key.back() == '/') {
      std::string_view without_slash(object.key.data(), object.key.size() - 1);
      if (without_slash.size() + 1 <= key_prefix.size()) continue;  // the prefix's own marker
      Result<std::string> dir = RelativePathForKey(spec, without_slash);
      Status made = dir.ok() ? EnsureDirs(env, local_dir, *dir, verified_dirs) : dir.status();
      if (made.code() == base::StatusCode::kInvalidArgument ||
          made.code() == base::StatusCode::kFailedPrecondition) {
        progress.Warn("skipped key '" + object.key + "': " + made.message());
      } else if (!made.ok()) {
        return made;
      }
      continue;
    }
    Result<std::string> relative = RelativePathForKey(spec, object.key);
    if (!relative.ok()) {
      progress.Warn("skipped key '" + object.key + "': " + relative.status().message());
      continue;
    }
    const size_t slash = relative->rfind('/');
    if (slash != std::string::npos) {
      Status made = EnsureDirs(env, local_dir, relative->substr(0, slash), verified_dirs);
      if (made.code() == base::StatusCode::kFailedPrecondition) {
        progress.Warn("skipped key '" + object.key + "': " + made.message());
        continue;
      }
      SOVAI_RETURN_IF_ERROR(made);
    }
    const std::string dest = base::JoinPath(local_dir, *relative);
    if (Result<LinkStat> existing = LStat(dest);
        existing.ok() && existing->type == FileType::kDirectory) {
      progress.Warn("skipped key '" + object.key + "': '" + *relative + "' is a directory");
      continue;
    }

    SOVAI_ASSIGN_OR_RETURN(Placed placed, PlaceObject(env, s3, spec, object, dest, cache.get()));
    SOVAI_ASSIGN_OR_RETURN(LinkStat written, LStat(dest));
    manifest.files.push_back(
        {*relative, written.size_bytes, placed.object.etag, written.mtime_unix_micros});
    ++report.files;
    report.bytes += written.size_bytes;
    if (placed.from_cache) ++report.from_cache;
    progress.Tick(DownSummary(spec, report) + " so far");
  }
  // Keys come sorted from the listing and share the prefix, so the paths are sorted already;
  // sorting again keeps Find()'s contract independent of the server's order.
  std::sort(manifest.files.begin(), manifest.files.end(),
            [](const ManifestEntry& a, const ManifestEntry& b) { return a.path < b.path; });

  if (cache) SOVAI_RETURN_IF_ERROR(cache->Evict(options.cache_max_bytes));
  report.summary = DownSummary(spec, report);
  progress.Line(report.summary);
  return manifest;
}

namespace {

// SyncUp's deletions (rwd): the objects of `state`'s files that are not `present` any more. A
// unit's manifest stays while its directory does (it is no local file), and goes before the
// unit's files when the directory is gone, so that no reader trusts a unit half deleted.
Status DeleteRemoved(Env& env, S3Client& s3, const VolumeSpec& spec, const std::string& local_dir,
                     const std::set<std::string>& present, SyncManifest& state,
                     SyncReport& report) {
  auto is_manifest = [](const ManifestEntry& e) {
    return base::BaseName(e.path) == base::kUnitManifestName;
  };
  std::set<std::string> gone;
  Status failed;
  for (bool manifests : {true, false}) {
    for (const ManifestEntry& e : state.files) {
      if (is_manifest(e) != manifests || present.count(e.path) != 0) continue;
      if (manifests && env.FileExists(base::JoinPath(local_dir, base::DirName(e.path)))) continue;
      failed = s3.DeleteObject(spec.bucket, spec.KeyPrefix() + e.path);
      if (!failed.ok()) break;
      ++report.deleted;
      gone.insert(e.path);
    }
    if (!failed.ok()) break;
  }
  std::erase_if(state.files, [&](const ManifestEntry& e) { return gone.count(e.path) != 0; });
  return failed;
}

}  // namespace

Result<SyncReport> SyncUp(S3Client& s3, const VolumeSpec& spec, const std::string& local_dir,
                          const SyncManifest& baseline, bool delete_removed,
                          const SyncOptions& options, SyncManifest* state_out) {
  const std::string name = "sync up " + spec.SourceName();
  if (spec.permission == VolumePermission::kReadOnly) {
    return base::FailedPreconditionError(name + ": the volume is read-only");
  }
  if (delete_removed && spec.permission != VolumePermission::kReadWriteDelete) {
    return base::FailedPreconditionError(name +
                                         ": deleting removed files needs an rwd volume, not " +
                                         std::string(VolumePermissionName(spec.permission)));
  }
  // An empty baseline (no SyncDown recorded) uploads everything and deletes nothing.
  if (!baseline.bucket.empty() &&
      (baseline.bucket != spec.bucket || baseline.prefix != spec.prefix)) {
    return base::FailedPreconditionError(name + ": the baseline manifest is for " +
                                         baseline.bucket + "/" + baseline.prefix +
                                         ", not this volume");
  }
  Env& env = options.env != nullptr ? *options.env : Env::Default();
  SyncReport report;
  Progress progress(options, env, report);

  SOVAI_ASSIGN_OR_RETURN(LinkStat root, LStat(local_dir));
  if (root.type != FileType::kDirectory) {
    return base::FailedPreconditionError(name + ": '" + local_dir + "' is not a directory");
  }

  // Walk the directory without following symlinks.
  struct File {
    std::string relative;
    LinkStat stat;
  };
  std::vector<File> changed;
  std::set<std::string> present;
  std::vector<std::pair<std::string, int>> pending = {{"", 0}};  // (relative dir, depth)
  while (!pending.empty()) {
    auto [dir, depth] = std::move(pending.back());
    pending.pop_back();
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> names,
                           env.ListDir(dir.empty() ? local_dir : base::JoinPath(local_dir, dir)));
    for (const std::string& entry_name : names) {
      // Our own temporaries, left by an interrupted sync: never the job's data.
      if (base::IsAtomicWriteTempName(entry_name)) continue;
      const std::string relative = dir.empty() ? entry_name : dir + "/" + entry_name;
      Result<LinkStat> st = LStat(base::JoinPath(local_dir, relative));
      if (!st.ok()) {
        // Gone since the listing (a process still running in the sandbox): nothing to upload.
        if (st.status().code() == base::StatusCode::kNotFound) continue;
        return st.status();
      }
      switch (st->type) {
        case FileType::kDirectory:
          // A staging directory is renamed into place once complete; only then it goes up.
          if (IsStagingPath(relative + "/")) break;
          if (depth + 1 >= kMaxSyncDirDepth) {
            return base::ResourceExhaustedError(name + ": '" + relative +
                                                "' is nested deeper than " +
                                                std::to_string(kMaxSyncDirDepth) + " levels");
          }
          pending.emplace_back(relative, depth + 1);
          break;
        case FileType::kRegular: {
          if (present.size() >= kMaxSyncFiles) {
            return base::ResourceExhaustedError(name + ": more than " +
                                                std::to_string(kMaxSyncFiles) + " files");
          }
          present.insert(relative);
          // A unit manifest that came down with the volume: SyncUpPaths writes its own.
          if (entry_name == base::kUnitManifestName) break;
          const ManifestEntry* known = baseline.Find(relative);
          if (known != nullptr && known->size_bytes == st->size_bytes &&
              known->mtime_unix_micros == st->mtime_unix_micros) {
            ++report.unchanged;
          } else {
            changed.push_back({relative, *st});
          }
          break;
        }
        case FileType::kSymlink:
          progress.Warn("skipped '" + relative + "': symlinks are not followed");
          break;
        case FileType::kOther:
          progress.Warn("skipped '" + relative + "': not a regular file");
          break;
      }
    }
  }
  std::sort(changed.begin(), changed.end(),
            [](const File& a, const File& b) { return a.relative < b.relative; });
  uint64_t changed_bytes = 0;
  for (const File& f : changed) changed_bytes += f.stat.size_bytes;
  progress.Line(name + ": " + std::to_string(changed.size()) + " new or changed files, " +
                base::HumanBytes(changed_bytes));

  SyncManifest state = baseline;
  state.bucket = spec.bucket;
  state.prefix = spec.prefix;
  std::vector<std::string> paths;
  for (const File& f : changed) paths.push_back(f.relative);
  if (delete_removed) {
    // A unit that loses a file gets a manifest without it before the file's object goes.
    for (const ManifestEntry& e : baseline.files) {
      if (present.count(e.path) != 0) continue;
      const std::string unit = UnitDirFor(e.path, [&](const std::string& dir) {
        return env.FileExists(
            base::JoinPath(base::JoinPath(local_dir, dir), std::string(base::kUnitMarkerName)));
      });
      if (unit.empty() || !env.FileExists(base::JoinPath(local_dir, unit))) continue;
      auto manifest = std::find_if(state.files.begin(), state.files.end(), [&](const auto& m) {
        return m.path == unit + "/" + std::string(base::kUnitManifestName);
      });
      if (manifest != state.files.end()) state.files.erase(manifest);
      paths.push_back(e.path);
    }
  }
  SyncOptions upload_options = options;
  upload_options.progress = [&](std::string_view line) {
    // Warnings are counted in this report; everything else is passed on.
    if (!line.starts_with("warning: ")) progress.Line(line);
  };
  SOVAI_ASSIGN_OR_RETURN(SyncReport uploaded,
                         SyncUpPaths(s3, spec, local_dir, paths, state, upload_options));
  report.files += uploaded.files;
  report.bytes += uploaded.bytes;
  report.units += uploaded.units;
  report.retried += uploaded.retried;
  for (std::string& w : uploaded.warnings) progress.Warn(std::move(w));

  if (delete_removed) {
    SOVAI_RETURN_IF_ERROR(DeleteRemoved(env, s3, spec, local_dir, present, state, report));
  }
  if (state_out != nullptr) *state_out = std::move(state);
  report.summary = UpSummary(spec, report, delete_removed);
  progress.Line(report.summary);
  return report;
}

}  // namespace sovai::exec
