// SyncUpPaths and the unit rules (volume_sync.h): the upload of changed files that both the
// final sync-up and the live sync (live_sync.h) use, with units uploaded manifest last.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/strings.h"
#include "base/unit_manifest.h"
#include "exec/internal/sync_common.h"
#include "exec/volume_sync.h"

namespace sovai::exec {
namespace {

using base::FileType;
using base::Result;
using base::Status;
using internal::LinkStat;
using internal::LStat;
using internal::Progress;

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// `name` is a checkpoint directory's by its name alone (`parent`: the directory above it).
bool IsCheckpointName(std::string_view name, std::string_view parent) {
  if (name.starts_with("checkpoint-") && IsDigits(name.substr(11))) return true;
  return parent == "checkpoints" && name.starts_with("step-") && IsDigits(name.substr(5));
}

// Inserts or replaces the entry of `entry.path`, keeping `files` sorted.
void Record(SyncManifest& state, ManifestEntry entry) {
  auto it =
      std::lower_bound(state.files.begin(), state.files.end(), entry.path,
                       [](const ManifestEntry& e, const std::string& p) { return e.path < p; });
  if (it != state.files.end() && it->path == entry.path) {
    *it = std::move(entry);
  } else {
    state.files.insert(it, std::move(entry));
  }
}

void Forget(SyncManifest& state, const std::string& path) {
  auto it =
      std::lower_bound(state.files.begin(), state.files.end(), path,
                       [](const ManifestEntry& e, const std::string& p) { return e.path < p; });
  if (it != state.files.end() && it->path == path) state.files.erase(it);
}

bool Unchanged(const SyncManifest& state, const std::string& path, const LinkStat& st) {
  const ManifestEntry* known = state.Find(path);
  return known != nullptr && known->size_bytes == st.size_bytes &&
         known->mtime_unix_micros == st.mtime_unix_micros;
}

// Not a file of the workload's: ours (a unit manifest, a temporary), or in a staging directory.
bool PassedOver(std::string_view relative) {
  const std::string name = base::BaseName(relative);
  return name == base::kUnitManifestName || base::IsAtomicWriteTempName(name) ||
         IsStagingPath(relative);
}

class Uploader {
 public:
  Uploader(base::Env& env, S3Client& s3, const VolumeSpec& spec, const std::string& local_dir,
           SyncManifest& state, Progress& progress, SyncReport& report, int64_t settled_before)
      : env_(env),
        settled_before_(settled_before),
        s3_(s3),
        spec_(spec),
        local_dir_(local_dir),
        state_(state),
        progress_(progress),
        report_(report) {}

  // Uploads one file when it changed. OK also when it changed while read (report_.retried) or
  // went away; `uploaded` tells whether it is now stored as it is.
  Status File(const std::string& relative, bool& uploaded) {
    uploaded = false;
    const std::string path = base::JoinPath(local_dir_, relative);
    Result<LinkStat> before = LStat(path);
    if (!before.ok()) {
      return before.status().code() == base::StatusCode::kNotFound ? Status() : before.status();
    }
    if (before->type != FileType::kRegular) {
      progress_.Warn("skipped '" + relative + "': " +
                     (before->type == FileType::kSymlink ? "symlinks are not followed"
                                                         : "not a regular file"));
      return Status();
    }
    if (Unchanged(state_, relative, *before)) {
      uploaded = true;
      return Status();
    }
    Result<std::string> key = KeyForRelativePath(spec_, relative);
    if (!key.ok()) {
      progress_.Warn("skipped '" + relative + "': " + key.status().message());
      return Status();
    }
    auto same = [&]() -> Status {
      Result<LinkStat> now = LStat(path);
      if (now.ok() && now->size_bytes == before->size_bytes &&
          now->mtime_unix_micros == before->mtime_unix_micros) {
        return Status();
      }
      return base::AbortedError("'" + relative + "' changed while it was read");
    };
    Result<S3Object> stored = s3_.PutObjectFromFile(spec_.bucket, *key, path, same);
    if (!stored.ok()) {
      // A file rewritten under the read (it may also have grown past the in-memory bound or
      // shrunk) is not an error: the next sync takes it once it settled again.
      if (stored.status().code() == base::StatusCode::kAborted || !same().ok()) {
        ++report_.retried;
        progress_.Line("sync up " + spec_.SourceName() + ": '" + relative +
                       "' changed while it was uploaded; it goes up again once it settles");
        return Status();
      }
      return stored.status();
    }
    Record(state_, {relative, before->size_bytes, stored->etag, before->mtime_unix_micros});
    ++report_.files;
    report_.bytes += before->size_bytes;
    uploaded = true;
    return Status();
  }

  // Uploads the unit at `dir` when one of its files changed or it was never completed: the
  // manifest "complete": false, the changed files, the manifest listing every file.
  Status Unit(const std::string& dir) {
    std::vector<std::pair<std::string, LinkStat>> files;
    SOVAI_RETURN_IF_ERROR(Walk(dir, files));
    const std::string manifest_path = dir.empty()
                                          ? std::string(base::kUnitManifestName)
                                          : dir + "/" + std::string(base::kUnitManifestName);
    // The live sync uploads a unit only once none of its files changed for the settle time.
    if (settled_before_ > 0 && std::any_of(files.begin(), files.end(), [&](const auto& f) {
          return f.second.mtime_unix_micros > settled_before_;
        })) {
      return Status();
    }
    const ManifestEntry* written = state_.Find(manifest_path);
    const bool changed = std::any_of(files.begin(), files.end(), [&](const auto& f) {
      return !Unchanged(state_, f.first, f.second);
    });
    // A manifest this sync wrote has mtime 0; one that came down with the volume is a file.
    if (!changed && written != nullptr) return Status();
    SOVAI_ASSIGN_OR_RETURN(std::string key, KeyForRelativePath(spec_, manifest_path));
    base::UnitManifest manifest;
    SOVAI_RETURN_IF_ERROR(s3_.PutObject(spec_.bucket, key, manifest.ToJson()).status());
    if (written != nullptr && written->mtime_unix_micros != 0) {
      // The copy synced down describes the unit as it was; it would mislead a reader now.
      env_.DeleteFile(base::JoinPath(local_dir_, manifest_path)).IgnoreError();
    }
    Forget(state_, manifest_path);
    for (const auto& [relative, st] : files) {
      bool uploaded = false;
      SOVAI_RETURN_IF_ERROR(File(relative, uploaded));
      // A file still changing: the unit stays incomplete until the next sync.
      if (!uploaded) return Status();
      const ManifestEntry* entry = state_.Find(relative);
      if (entry == nullptr) return Status();  // gone meanwhile: the next sync sees the unit again
      const std::string inside = dir.empty() ? relative : relative.substr(dir.size() + 1);
      manifest.files.push_back({inside, entry->size_bytes, entry->etag});
    }
    std::sort(manifest.files.begin(), manifest.files.end(),
              [](const base::UnitFile& a, const base::UnitFile& b) { return a.path < b.path; });
    manifest.complete = true;
    const std::string json = manifest.ToJson();
    SOVAI_ASSIGN_OR_RETURN(S3Object stored, s3_.PutObject(spec_.bucket, key, json));
    Record(state_, {manifest_path, json.size(), stored.etag, 0});
    ++report_.units;
    uint64_t bytes = 0;
    for (const base::UnitFile& f : manifest.files) bytes += f.size_bytes;
    progress_.Line("sync up " + spec_.SourceName() + ": unit '" + dir + "' complete, " +
                   std::to_string(manifest.files.size()) + " files, " + base::HumanBytes(bytes));
    return Status();
  }

 private:
  // The regular files under `dir`, without following symlinks, sorted.
  Status Walk(const std::string& dir, std::vector<std::pair<std::string, LinkStat>>& out) {
    std::vector<std::pair<std::string, int>> pending = {{dir, 0}};
    base::Env& env = env_;
    while (!pending.empty()) {
      auto [at, depth] = std::move(pending.back());
      pending.pop_back();
      auto names = env.ListDir(at.empty() ? local_dir_ : base::JoinPath(local_dir_, at));
      if (!names.ok()) {
        if (names.status().code() == base::StatusCode::kNotFound) continue;
        return names.status();
      }
      for (const std::string& name : *names) {
        const std::string relative = at.empty() ? name : at + "/" + name;
        if (PassedOver(relative)) continue;
        Result<LinkStat> st = LStat(base::JoinPath(local_dir_, relative));
        if (!st.ok()) continue;  // gone since the listing
        if (st->type == FileType::kDirectory && depth + 1 < kMaxSyncDirDepth) {
          pending.emplace_back(relative, depth + 1);
        } else if (st->type == FileType::kRegular) {
          if (out.size() >= base::kMaxUnitFiles) {
            return base::ResourceExhaustedError("unit '" + dir + "' has more than " +
                                                std::to_string(base::kMaxUnitFiles) + " files");
          }
          out.emplace_back(relative, *st);
        }
      }
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    return Status();
  }

  base::Env& env_;
  const int64_t settled_before_;
  S3Client& s3_;
  const VolumeSpec& spec_;
  const std::string& local_dir_;
  SyncManifest& state_;
  Progress& progress_;
  SyncReport& report_;
};

}  // namespace

namespace internal {

Result<std::set<std::string>> UntrustedUnitKeys(S3Client& s3, const VolumeSpec& spec,
                                                const std::vector<S3Object>& objects,
                                                const std::string& scratch_dir, base::Env& env,
                                                Progress& progress) {
  std::set<std::string> refused;
  const std::string suffix = "/" + std::string(base::kUnitManifestName);
  std::map<std::string, const S3Object*> by_key;
  std::vector<const S3Object*> manifests;
  for (const S3Object& o : objects) {
    by_key[o.key] = &o;
    if (o.key.ends_with(suffix) && o.key.size() > spec.KeyPrefix().size() + suffix.size()) {
      manifests.push_back(&o);
    }
  }
  // Innermost units last, so that their verdict is the one that stands for their keys.
  std::sort(manifests.begin(), manifests.end(),
            [](const S3Object* a, const S3Object* b) { return a->key.size() < b->key.size(); });
  for (const S3Object* m : manifests) {
    const std::string unit_prefix = m->key.substr(0, m->key.size() - suffix.size() + 1);
    const std::string temp = TempPathFor(scratch_dir, "unit-manifest");
    std::string why;
    Result<base::UnitManifest> manifest = base::InvalidArgumentError("unread");
    if (m->size_bytes > base::kMaxUnitManifestBytes) {
      why = "its manifest is too large";
    } else {
      Result<S3Object> got = s3.GetObjectToFile(spec.bucket, m->key, temp);
      if (!got.ok()) {
        if (got.status().code() != base::StatusCode::kNotFound) return got.status();
        why = "its manifest went away";
      } else {
        Result<std::string> text = env.ReadFile(temp, base::kMaxUnitManifestBytes);
        env.DeleteFile(temp).IgnoreError();
        SOVAI_RETURN_IF_ERROR(text.status());
        manifest = base::UnitManifest::FromJson(*text);
        if (!manifest.ok()) why = manifest.status().message();
      }
    }
    if (why.empty() && !manifest->complete) why = "it is still being written";
    if (why.empty()) {
      for (const base::UnitFile& f : manifest->files) {
        auto it = by_key.find(unit_prefix + f.path);
        if (it == by_key.end()) {
          why = "'" + f.path + "' is missing";
        } else if (it->second->size_bytes != f.size_bytes ||
                   (!f.etag.empty() && it->second->etag != f.etag)) {
          why = "'" + f.path + "' is not the version its manifest lists";
        }
        if (!why.empty()) break;
      }
    }
    const std::string name = unit_prefix.substr(spec.KeyPrefix().size());
    if (!why.empty()) {
      progress.Warn("skipped unit '" + name.substr(0, name.size() - 1) + "': " + why);
      for (auto it = by_key.lower_bound(unit_prefix);
           it != by_key.end() && it->first.starts_with(unit_prefix); ++it) {
        refused.insert(it->first);
      }
      continue;
    }
    // A trusted unit shows exactly what its manifest lists.
    for (auto it = by_key.lower_bound(unit_prefix);
         it != by_key.end() && it->first.starts_with(unit_prefix); ++it) {
      const std::string inside = it->first.substr(unit_prefix.size());
      if (inside != base::kUnitManifestName && manifest->Find(inside) == nullptr &&
          !it->first.ends_with("/")) {
        refused.insert(it->first);
      } else {
        refused.erase(it->first);  // an outer unit's refusal does not hold inside a good one
      }
    }
  }
  return refused;
}

}  // namespace internal

std::string UnitDirFor(std::string_view relative_path,
                       const std::function<bool(const std::string& dir)>& has_marker) {
  std::vector<std::string_view> parts = base::Split(relative_path, '/');
  // The innermost first: parts[0..i) is a directory above the file.
  for (size_t i = parts.size() - 1; i > 0; --i) {
    std::string dir(
        relative_path.substr(0, parts[i - 1].data() + parts[i - 1].size() - relative_path.data()));
    const std::string_view parent = i >= 2 ? parts[i - 2] : std::string_view();
    if (IsCheckpointName(parts[i - 1], parent)) return dir;
    if (has_marker && has_marker(dir)) return dir;
  }
  return "";
}

bool IsStagingPath(std::string_view relative_path) {
  std::vector<std::string_view> parts = base::Split(relative_path, '/');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i].starts_with(".tmp-") || parts[i].starts_with("tmp-checkpoint-")) return true;
  }
  return false;
}

Result<SyncReport> SyncUpPaths(S3Client& s3, const VolumeSpec& spec, const std::string& local_dir,
                               const std::vector<std::string>& paths, SyncManifest& state,
                               const SyncOptions& options) {
  base::Env& env = options.env != nullptr ? *options.env : base::Env::Default();
  SyncReport report;
  Progress progress(options, env, report);
  Uploader uploader(env, s3, spec, local_dir, state, progress, report,
                    options.unit_settled_before_unix_micros);
  auto has_marker = [&](const std::string& dir) {
    return env.FileExists(
        base::JoinPath(base::JoinPath(local_dir, dir), std::string(base::kUnitMarkerName)));
  };
  std::set<std::string> units;
  std::vector<std::string> plain;
  for (const std::string& path : std::set<std::string>(paths.begin(), paths.end())) {
    if (PassedOver(path)) continue;
    std::string unit = UnitDirFor(path, has_marker);
    if (!unit.empty()) {
      units.insert(std::move(unit));
    } else {
      plain.push_back(path);
    }
  }
  for (const std::string& path : plain) {
    bool uploaded = false;
    SOVAI_RETURN_IF_ERROR(uploader.File(path, uploaded));
  }
  for (const std::string& unit : units) SOVAI_RETURN_IF_ERROR(uploader.Unit(unit));
  return report;
}

}  // namespace sovai::exec
