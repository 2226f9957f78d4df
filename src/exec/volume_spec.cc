#include "exec/volume_spec.h"

#include <string>
#include <string_view>
#include <vector>

#include "base/strings.h"
#include "base/utf8.h"
#include "exec/volume_limits.h"
#include "objstore/names.h"

namespace sovai::exec {
namespace {

using base::InvalidArgumentError;
using base::Result;
using base::Status;

constexpr std::string_view kSyntax =
    "expected bucket@REGION[/prefix]:/mount/path[:ro|rw|rwd][:cache|no-cache][:sync=30s|end]";

// Mount points the sandbox itself provides: a volume there would hide the process's view of the
// kernel (/proc, /sys), its devices (/dev), or the whole root filesystem.
constexpr std::string_view kReservedMountRoots[] = {"proc", "sys", "dev"};

Status SpecError(std::string_view spec, std::string_view what) {
  return InvalidArgumentError("volume '" + std::string(spec) + "': " + std::string(what));
}

bool HasControlCharacter(std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return true;
  }
  return false;
}

// The check shared by prefixes, relative paths and mount paths: every '/'-separated segment of
// `segments` is non-empty and neither "." nor "..". `what` and `shown` name the path in the
// message ("mount path '/a/../b'"), which may differ from `segments` (a mount path is checked
// without its leading '/').
Status CheckSegments(std::string_view segments, std::string_view what, std::string_view shown) {
  for (std::string_view segment : base::Split(segments, '/')) {
    std::string_view problem = segment.empty()
                                   ? "an empty segment ('//' or a leading or trailing '/')"
                               : segment == ".." ? "a '..' segment"
                               : segment == "."  ? "a '.' segment"
                                                 : "";
    if (!problem.empty()) {
      return InvalidArgumentError(std::string(what) + " '" + std::string(shown) + "' has " +
                                  std::string(problem));
    }
  }
  return Status();
}

Status CheckRegionSyntax(std::string_view region) {
  bool ok = region.size() >= kMinRegionBytes && region.size() <= kMaxRegionBytes &&
            ((region[0] >= 'A' && region[0] <= 'Z') || (region[0] >= 'a' && region[0] <= 'z'));
  for (char c : region) {
    ok = ok &&
         ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  }
  if (ok) return Status();
  return InvalidArgumentError("region '" + std::string(region) + "' must be " +
                              std::to_string(kMinRegionBytes) + " to " +
                              std::to_string(kMaxRegionBytes) +
                              " letters, digits and '-', starting with a letter (e.g. "
                              "EU-WEST-LOCAL)");
}

Status CheckPrefix(std::string_view prefix) {
  if (prefix.empty()) return Status();
  if (prefix.front() == '/') {
    return InvalidArgumentError("prefix '" + std::string(prefix) +
                                "' starts with '/'; write bucket@REGION/prefix with one '/'");
  }
  if (HasControlCharacter(prefix)) {
    return InvalidArgumentError("prefix has a control character");
  }
  if (!base::IsValidUtf8(prefix)) {
    return InvalidArgumentError("prefix '" + std::string(prefix) + "' is not valid UTF-8");
  }
  // The prefix plus '/' plus at least one character must still be a valid key.
  if (prefix.size() + 2 > objstore::kMaxObjectKeyBytes) {
    return InvalidArgumentError("prefix is longer than " +
                                std::to_string(objstore::kMaxObjectKeyBytes - 2) + " bytes");
  }
  return CheckSegments(prefix, "prefix", prefix);
}

Status CheckMountPath(std::string_view path) {
  if (path.empty()) return InvalidArgumentError("missing mount path");
  if (path.front() != '/') {
    return InvalidArgumentError("mount path '" + std::string(path) +
                                "' is relative; give an absolute path such as /workspace/data");
  }
  if (HasControlCharacter(path)) {
    return InvalidArgumentError("mount path has a control character");
  }
  if (path == "/") {
    return InvalidArgumentError(
        "mount path '/' would hide the whole filesystem; mount on a "
        "directory such as /workspace/data");
  }
  Status segments = CheckSegments(path.substr(1), "mount path", path);
  if (!segments.ok()) {
    return InvalidArgumentError(segments.message() +
                                "; give a normalized absolute path such as /workspace/data");
  }
  std::string_view first = path.substr(1, path.find('/', 1) - 1);
  for (std::string_view reserved : kReservedMountRoots) {
    if (first == reserved) {
      return InvalidArgumentError("mount path '" + std::string(path) + "' is inside /" +
                                  std::string(reserved) +
                                  ", which the sandbox provides; choose another directory");
    }
  }
  return Status();
}

// "30s", "5m", "1h" → seconds; "end" → 0.
Result<int64_t> ParseSyncInterval(std::string_view value) {
  if (value == "end") return int64_t{0};
  const std::string bounds = "give sync=end or an interval from " +
                             std::to_string(kMinSyncIntervalS) + "s to " +
                             std::to_string(kMaxSyncIntervalS / 3600) + "h such as sync=30s";
  int64_t unit_s = 0;
  if (!value.empty()) {
    unit_s = value.back() == 's' ? 1 : value.back() == 'm' ? 60 : value.back() == 'h' ? 3600 : 0;
  }
  std::string_view digits = value.substr(0, value.empty() ? 0 : value.size() - 1);
  bool ok = unit_s > 0 && !digits.empty() && digits.size() <= 6;
  int64_t n = 0;
  for (char c : digits) {
    ok = ok && c >= '0' && c <= '9';
    n = n * 10 + (c - '0');
  }
  if (!ok) return InvalidArgumentError("sync '" + std::string(value) + "' is malformed; " + bounds);
  const int64_t seconds = n * unit_s;
  if (seconds < kMinSyncIntervalS || seconds > kMaxSyncIntervalS) {
    return InvalidArgumentError("sync interval " + std::string(value) + " is out of range; " +
                                bounds);
  }
  return seconds;
}

std::string SyncIntervalName(int64_t seconds) {
  if (seconds == 0) return "end";
  if (seconds % 3600 == 0) return std::to_string(seconds / 3600) + "h";
  if (seconds % 60 == 0) return std::to_string(seconds / 60) + "m";
  return std::to_string(seconds) + "s";
}

// Applies one ":option" to `spec`. `seen_permission` / `seen_cache` / `seen_sync` hold the
// option already given for that slot ("" when none), so a repeated or contradictory one is
// refused.
Status ApplyOption(std::string_view option, VolumeSpec& spec, std::string& seen_permission,
                   std::string& seen_cache, std::string& seen_sync) {
  if (option.empty()) return InvalidArgumentError("empty option (a stray ':')");
  if (option.starts_with("sync=")) {
    if (!seen_sync.empty()) {
      return InvalidArgumentError("option '" + std::string(option) + "' repeats '" + seen_sync +
                                  "'; give one sync option");
    }
    seen_sync = std::string(option);
    SOVAI_ASSIGN_OR_RETURN(spec.sync_interval_s, ParseSyncInterval(option.substr(5)));
    return Status();
  }
  auto set_permission = [&](VolumePermission permission) -> Status {
    if (!seen_permission.empty()) {
      return InvalidArgumentError("option '" + std::string(option) + "' repeats the permission '" +
                                  seen_permission + "'; give one of ro, rw or rwd");
    }
    seen_permission = std::string(option);
    spec.permission = permission;
    return Status();
  };
  auto set_cache = [&](bool cache) -> Status {
    if (!seen_cache.empty()) {
      return InvalidArgumentError("option '" + std::string(option) +
                                  "' repeats the cache option '" + seen_cache +
                                  "'; give one of cache or no-cache");
    }
    seen_cache = std::string(option);
    spec.cache = cache;
    return Status();
  };
  if (option == "ro") return set_permission(VolumePermission::kReadOnly);
  if (option == "rw") return set_permission(VolumePermission::kReadWrite);
  if (option == "rwd") return set_permission(VolumePermission::kReadWriteDelete);
  if (option == "cache") return set_cache(true);
  if (option == "no-cache") return set_cache(false);
  return InvalidArgumentError("unknown option '" + std::string(option) +
                              "'; the options are ro, rw, rwd, cache, no-cache and sync=");
}

// Whether `inner` is `outer` or a path below it ("/a" contains "/a/b", not "/ab").
bool SameOrInside(std::string_view outer, std::string_view inner) {
  if (inner == outer) return true;
  return inner.size() > outer.size() && inner.substr(0, outer.size()) == outer &&
         inner[outer.size()] == '/';
}

// The rules both directions of the key <-> path mapping share; components may be at most
// `max_component_bytes` long.
Status CheckRelativePath(std::string_view path, size_t max_component_bytes) {
  if (path.empty()) return InvalidArgumentError("empty path");
  if (path.find('\0') != std::string_view::npos) {
    return InvalidArgumentError("path has a NUL byte");
  }
  if (path.front() == '/') {
    return InvalidArgumentError("path '" + std::string(path) + "' is absolute");
  }
  if (path.size() > kMaxRelativePathBytes) {
    return InvalidArgumentError("path is longer than " + std::to_string(kMaxRelativePathBytes) +
                                " bytes");
  }
  SOVAI_RETURN_IF_ERROR(CheckSegments(path, "path", path));
  for (std::string_view segment : base::Split(path, '/')) {
    if (segment.size() > max_component_bytes) {
      return InvalidArgumentError("path '" + std::string(path) + "' has a component longer than " +
                                  std::to_string(max_component_bytes) + " bytes");
    }
  }
  return Status();
}

}  // namespace

std::string_view VolumePermissionName(VolumePermission permission) {
  switch (permission) {
    case VolumePermission::kReadOnly:
      return "ro";
    case VolumePermission::kReadWrite:
      return "rw";
    case VolumePermission::kReadWriteDelete:
      return "rwd";
  }
  return "?";
}

std::string VolumeSpec::SourceName() const {
  std::string out = bucket + "@" + region;
  if (!prefix.empty()) out += "/" + prefix;
  return out;
}

std::string VolumeSpec::ToString() const {
  std::string out = SourceName() + ":" + mount_path + ":" +
                    std::string(VolumePermissionName(permission)) +
                    (cache ? ":cache" : ":no-cache");
  if (sync_interval_s != kDefaultSyncIntervalS) out += ":sync=" + SyncIntervalName(sync_interval_s);
  return out;
}

std::string VolumeSpec::KeyPrefix() const { return prefix.empty() ? "" : prefix + "/"; }

Result<VolumeSpec> ParseVolumeSpec(std::string_view text) {
  if (text.empty()) return SpecError(text, "empty; " + std::string(kSyntax));
  if (text.size() > kMaxVolumeSpecBytes) {
    return InvalidArgumentError("volume spec is longer than " +
                                std::to_string(kMaxVolumeSpecBytes) + " bytes");
  }
  // ':' separates the fields, so neither the prefix nor the mount path can hold one.
  std::vector<std::string_view> fields = base::Split(text, ':');
  if (fields.size() < 2) {
    return SpecError(text, "missing ':/mount/path'; " + std::string(kSyntax));
  }

  VolumeSpec spec;
  std::string_view source = fields[0];
  const size_t at = source.find('@');
  if (at == std::string_view::npos) {
    return SpecError(text, "missing '@REGION' after the bucket name (e.g. data@EU-WEST-LOCAL); " +
                               std::string(kSyntax));
  }
  spec.bucket = std::string(source.substr(0, at));
  if (spec.bucket.empty()) return SpecError(text, "missing bucket name before '@'");
  if (objstore::S3Status bad = objstore::ValidateBucketName(spec.bucket)) {
    return SpecError(text, "invalid bucket name '" + spec.bucket + "': " + bad->message);
  }
  std::string_view after_at = source.substr(at + 1);
  const size_t slash = after_at.find('/');
  std::string_view region = after_at.substr(0, slash);
  if (region.empty()) return SpecError(text, "missing region after '@'; " + std::string(kSyntax));
  if (Status st = CheckRegionSyntax(region); !st.ok()) return SpecError(text, st.message());
  spec.region = std::string(region);
  if (slash != std::string_view::npos) {
    std::string_view prefix = after_at.substr(slash + 1);
    // One trailing '/' is tolerated ("data@R/ds/" is the directory "ds"); "data@R/" is the
    // whole bucket. A leading one is checked before, so "data@R//" is refused.
    if (!prefix.empty() && prefix.front() != '/' && prefix.back() == '/') prefix.remove_suffix(1);
    if (Status st = CheckPrefix(prefix); !st.ok()) return SpecError(text, st.message());
    spec.prefix = std::string(prefix);
  }

  if (Status st = CheckMountPath(fields[1]); !st.ok()) return SpecError(text, st.message());
  spec.mount_path = std::string(fields[1]);

  std::string seen_permission, seen_cache, seen_sync;
  for (size_t i = 2; i < fields.size(); ++i) {
    if (Status st = ApplyOption(fields[i], spec, seen_permission, seen_cache, seen_sync);
        !st.ok()) {
      return SpecError(text, st.message());
    }
  }
  if (!seen_sync.empty() && spec.permission == VolumePermission::kReadOnly) {
    return SpecError(text, "'" + seen_sync +
                               "' needs a writable volume (rw or rwd); a read-only one never "
                               "syncs up");
  }
  return spec;
}

Status CheckVolumes(const std::vector<VolumeSpec>& volumes, std::string_view server_region,
                    const std::vector<std::string>& other_regions,
                    const std::vector<std::string>& datastores) {
  if (volumes.size() > kMaxVolumesPerJob) {
    return InvalidArgumentError("a job may mount at most " + std::to_string(kMaxVolumesPerJob) +
                                " volumes; " + std::to_string(volumes.size()) + " were given");
  }
  for (const VolumeSpec& v : volumes) {
    bool known = base::EqualsIgnoreCase(v.region, server_region);
    for (const std::string& other : other_regions) {
      known = known || base::EqualsIgnoreCase(v.region, other);
    }
    for (const std::string& alias : datastores) {
      known = known || base::EqualsIgnoreCase(v.region, alias);
    }
    if (!known) {
      std::string accepted = std::string(server_region);
      for (const std::string& other : other_regions) accepted += ", " + other;
      return InvalidArgumentError(
          "volume '" + v.ToString() + "': region '" + v.region +
          "' is not one this server knows (docs/sovereignty.md); known: " + accepted +
          "; the project's datastores (docs/api/datastores.md): " +
          (datastores.empty() ? "none" : base::Join(datastores, ", ")));
    }
  }
  for (size_t i = 0; i < volumes.size(); ++i) {
    for (size_t j = i + 1; j < volumes.size(); ++j) {
      const std::string& a = volumes[i].mount_path;
      const std::string& b = volumes[j].mount_path;
      if (a == b) {
        return InvalidArgumentError("volumes '" + volumes[i].ToString() + "' and '" +
                                    volumes[j].ToString() + "' mount on the same path " + a);
      }
      if (SameOrInside(a, b) || SameOrInside(b, a)) {
        return InvalidArgumentError("volumes '" + volumes[i].ToString() + "' and '" +
                                    volumes[j].ToString() +
                                    "' have nested mount paths; one would hide the other");
      }
    }
  }
  return Status();
}

Result<std::string> RelativePathForKey(const VolumeSpec& spec, std::string_view key) {
  const std::string key_prefix = spec.KeyPrefix();
  if (key.substr(0, key_prefix.size()) != key_prefix) {
    return InvalidArgumentError("key is outside the prefix '" + key_prefix + "'");
  }
  std::string_view relative = key.substr(key_prefix.size());
  if (relative.empty()) return InvalidArgumentError("key names the prefix itself");
  if (relative.back() == '/') return InvalidArgumentError("key is a directory marker");
  SOVAI_RETURN_IF_ERROR(CheckRelativePath(relative, kMaxSyncedNameBytes));
  return std::string(relative);
}

Result<std::string> KeyForRelativePath(const VolumeSpec& spec, std::string_view relative_path) {
  SOVAI_RETURN_IF_ERROR(CheckRelativePath(relative_path, kMaxPathComponentBytes));
  std::string key = spec.KeyPrefix() + std::string(relative_path);
  if (!base::IsValidUtf8(key)) {
    return InvalidArgumentError("path '" + std::string(relative_path) +
                                "' is not valid UTF-8, which object keys must be");
  }
  if (key.size() > objstore::kMaxObjectKeyBytes) {
    return InvalidArgumentError("key for path '" + std::string(relative_path) +
                                "' is longer than " + std::to_string(objstore::kMaxObjectKeyBytes) +
                                " bytes");
  }
  return key;
}

}  // namespace sovai::exec
