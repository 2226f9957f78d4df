// Job volumes: which bucket prefix a job sees, where, and what it may do with it.
//
//   data@EU-WEST-LOCAL/datasets/chat:/workspace/data:ro:cache
//   └┬─┘ └─────┬─────┘ └─────┬─────┘ └──────┬──────┘ └┬┘ └─┬─┘
//  bucket   region        prefix       mount path   perm  cache
//
//   out@EU-WEST-LOCAL/run-1:/workspace/output:rw:sync=30s     (live sync every 30 s; the default)
//   out@EU-WEST-LOCAL/run-1:/workspace/output:rw:sync=end     (only when the workload ends)
//
// The syntax, every error and the mapping between object keys and files are written down in
// docs/formats/volume-spec.md:
//
//   SOVAI_ASSIGN_OR_RETURN(VolumeSpec spec, ParseVolumeSpec(flag_value));
//   SOVAI_RETURN_IF_ERROR(CheckVolumes(specs, server.region(), server.other_regions()));
//
// A VolumeSpec that ParseVolumeSpec returned is valid on its own (bucket name, region syntax,
// normalized prefix and mount path); CheckVolumes adds the rules that need context (the server's
// region, the other volumes of the job). ToString() is canonical: ParseVolumeSpec(s.ToString())
// gives `s` back.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "exec/volume_limits.h"

namespace sovai::exec {

// What the job may do to the bucket, and so what happens when it ends.
enum class VolumePermission : uint8_t {
  kReadOnly,         // "ro": synced down, mounted read-only, never synced up
  kReadWrite,        // "rw": new and changed files are uploaded (while it runs and at the end)
  kReadWriteDelete,  // "rwd": as rw, and objects whose files were removed are deleted at the end
};

// "ro", "rw", "rwd".
std::string_view VolumePermissionName(VolumePermission permission);

struct VolumeSpec {
  std::string bucket;  // a valid S3 bucket name
  std::string region;  // as written ("EU-WEST-LOCAL"); compare case-insensitively
  // Object-key prefix the volume shows, without leading or trailing '/': "" is the whole bucket,
  // "datasets/chat" shows the objects "datasets/chat/..." (a directory, not a string prefix:
  // "datasets/chatter" is not in it).
  std::string prefix;
  std::string mount_path;  // absolute and normalized, e.g. "/workspace/data"
  VolumePermission permission = VolumePermission::kReadOnly;
  bool cache = false;  // ":cache": reuse unchanged objects from the server's volume cache
  // ":sync=30s" (rw and rwd volumes): changed files are uploaded while the workload runs, a
  // round every this many seconds (live_sync.h); 0 = ":sync=end", only when it ends. Read-only
  // volumes keep the default and never sync up.
  int64_t sync_interval_s = kDefaultSyncIntervalS;

  // Whether changed files go up while the workload runs.
  bool live_sync() const {
    return permission != VolumePermission::kReadOnly && sync_interval_s > 0;
  }

  // "bucket@REGION[/prefix]:/mount/path:perm:cache|no-cache[:sync=...]" (the permission and the
  // cache option always written, the sync option when it is not the default).
  std::string ToString() const;
  // "bucket@REGION[/prefix]", how progress lines and errors name the volume.
  std::string SourceName() const;
  // The string every key of the volume starts with: "" for the whole bucket, else prefix + "/".
  std::string KeyPrefix() const;

  bool operator==(const VolumeSpec&) const = default;
};

// Parses one volume spec. Errors (InvalidArgument, the message quoting the spec and saying what
// is wrong and what the syntax is): an empty or overlong spec; a missing mount path; a missing
// or malformed "@REGION"; an invalid bucket name (S3's rules); a prefix with a leading '/', an
// empty, "." or ".." segment, or a control character; a mount path that is relative, not
// normalized ("//", "/./", "/../", a trailing '/'), has a control character, or is "/",
// "/proc", "/sys", "/dev" or inside one of them; an empty, unknown or repeated option (two
// permissions, or cache and no-cache, count as repeated); a sync option that is neither "end"
// nor a whole number of s, m or h within kMinSyncIntervalS..kMaxSyncIntervalS, or one on a
// read-only volume.
base::Result<VolumeSpec> ParseVolumeSpec(std::string_view text);

// Checks a job's volumes together. Errors (InvalidArgument): more than kMaxVolumesPerJob volumes;
// a region that is neither `server_region`, one of `other_regions` (the other regions the
// server knows, `sovai server --regions`) nor one of `datastores` (the aliases of the project's
// external datastores, docs/api/datastores.md), case-insensitively, naming the known regions and
// datastores; two volumes on the same mount path or one inside the other ("/data" and
// "/data/raw"), naming both specs. Whether a project may mount another known region is decided
// at admission (control/regions.h), not here.
base::Status CheckVolumes(const std::vector<VolumeSpec>& volumes, std::string_view server_region,
                          const std::vector<std::string>& other_regions = {},
                          const std::vector<std::string>& datastores = {});

// Where an object of the volume goes, relative to the volume's directory: `key` minus
// spec.KeyPrefix(). Errors (InvalidArgument, saying why), for keys that must not become files:
// a key outside the prefix or equal to it; a relative path that is absolute, has an empty, "."
// or ".." segment (so it would leave the directory or alias another file), a NUL byte, a
// component longer than kMaxSyncedNameBytes or a total over kMaxRelativePathBytes. A key
// ending in '/' (a "directory marker" some tools create) is also refused here; SyncDown treats
// those separately.
base::Result<std::string> RelativePathForKey(const VolumeSpec& spec, std::string_view key);

// The object key of a file at `relative_path` ('/'-separated) in the volume's directory. The same
// path rules as RelativePathForKey apply (components up to kMaxPathComponentBytes: any existing
// file), and the key must be valid UTF-8 of at most 1024 bytes (S3's key rules). Errors:
// InvalidArgument saying which rule.
base::Result<std::string> KeyForRelativePath(const VolumeSpec& spec,
                                             std::string_view relative_path);

}  // namespace sovai::exec
