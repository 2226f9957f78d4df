// OCI images: unpacks an image archive (`docker save` output, or an OCI image layout packed as a
// tar) into a root filesystem for the sandbox (SandboxSpec::rootfs), and caches unpacked images.
// The format, what is accepted and how each entry is applied are in docs/formats/images.md.
//
//   SOVAI_ASSIGN_OR_RETURN(CachedImage image,
//                          CachedRootfs(cache_dir, etag, downloaded_archive_path));
//   spec.rootfs = image.rootfs;                 // read-only "/" of the job
//   spec.cwd = image.info.working_dir;          // and Entrypoint + Cmd as the default argv
//
// Security contract (the archive is untrusted; the platform may be root):
//   * nothing is ever created, changed or deleted outside the new rootfs: a path that is absolute
//     or has a ".." component, a hard link whose target is, and an entry whose parent directory
//     is a symlink are rejected (InvalidArgument) rather than rewritten. Every parent is opened
//     with openat(O_NOFOLLOW) from the rootfs's own directory fd, files are created with
//     O_CREAT|O_EXCL|O_NOFOLLOW (never written through an existing link), and an existing entry
//     is removed before it is replaced. Symlinks of the image are stored as they are (they may
//     point anywhere, "/" included) and never traversed;
//   * the rootfs appears complete or not at all: it is built in a temporary sibling directory
//     (".<name>.sovai-unpack.<hex>"), synced, and renamed into place only when every layer was
//     applied and every digest matched; on any error the temporary directory is removed;
//   * ownership is not applied (the sandbox runs everything as one unprivileged uid). Modes are
//     normalised so that the workload uid can read everything and no host user but the platform
//     can change the cached image: directories 0755; files keep their owner bits minus setuid,
//     setgid and sticky, gain read for everyone, gain execute for everyone when any execute bit
//     was set, and lose group/other write. Device nodes and fifos are not created (counted in
//     ImageInfo::skipped_special). Modification times are kept (directories' are set last);
//   * every size and count is bounded (image_limits.h, UnpackOptions): ResourceExhausted names
//     the limit.
//
// Errors: NotFound for a missing archive or a member the manifest names; AlreadyExists when the
// rootfs directory exists; InvalidArgument for an archive that is not an image (neither
// manifest.json nor oci-layout + index.json), malformed JSON, and unsafe entries (see above);
// DataLoss for a blob whose sha256 does not match its name or descriptor, a layer whose
// uncompressed digest does not match the config's diff_ids, and corrupt or truncated tar or gzip
// data; FailedPrecondition for an image for another OS or architecture; Unimplemented for zstd,
// bzip2 or xz compression, digests other than sha256, and OCI layout versions other than 1.x;
// ResourceExhausted for a limit; Env errors for the local files.
//
// Thread-safety: UnpackImage may run concurrently for different rootfs directories. CachedRootfs
// may run concurrently for any keys, also from several processes: callers for one key serialize
// on a lock file, and only the first one unpacks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "exec/image_limits.h"

namespace sovai::exec {

// The architecture this binary runs on, in OCI's names ("amd64", "arm64", ...).
std::string_view HostImageArchitecture();

struct UnpackOptions {
  uint64_t max_archive_bytes = kMaxImageArchiveBytes;
  uint64_t max_unpacked_bytes = kMaxImageUnpackedBytes;
  uint64_t max_layer_stream_bytes = kMaxImageLayerStreamBytes;
  size_t max_entries = kMaxImageEntries;
  size_t max_archive_members = kMaxImageArchiveMembers;
  size_t max_path_bytes = kMaxImagePathBytes;
  size_t max_manifest_bytes = kMaxImageManifestBytes;
  size_t max_layers = kMaxImageLayers;
  // The platform: which manifest of an OCI index is chosen, and what an image config must not
  // contradict.
  std::string os = "linux";
  std::string architecture = std::string(HostImageArchitecture());
  // Files outside the rootfs (temporary directory removal, rename, directory sync).
  // nullptr = Env::Default().
  base::Env* env = nullptr;
};

struct ImageInfo {
  std::string format;         // "docker-save" or "oci-layout"
  std::string config_digest;  // "sha256:<64 hex>" of the image config JSON (the image ID)
  std::string os;             // from the config; may be empty
  std::string architecture;
  // From the config's "config" object; empty when absent.
  std::vector<std::string> env;  // "NAME=value"
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::string working_dir;
  std::string user;  // informational: the sandbox runs as its own uid
  // What the unpacking did.
  uint64_t layers = 0;           // layers applied
  uint64_t files = 0;            // entries created: files, directories, symlinks, hard links
  uint64_t bytes = 0;            // bytes of regular files written
  uint64_t whiteouts = 0;        // whiteout and opaque-directory markers applied
  uint64_t skipped_special = 0;  // device nodes and fifos not created

  friend bool operator==(const ImageInfo&, const ImageInfo&) = default;
};

// Unpacks the image archive at `archive_path` into `rootfs_dir`, which must not exist (its
// parent must). See the header comment for the guarantees and errors.
base::Result<ImageInfo> UnpackImage(const std::string& archive_path, const std::string& rootfs_dir,
                                    const UnpackOptions& options = {});

struct CachedImage {
  std::string rootfs;  // <cache_dir>/<key>/rootfs
  ImageInfo info;
  bool reused = false;  // true when an earlier call had unpacked it
};

// The rootfs of the archive identified by `key` (its ETag or sha256, as the caller knows it: two
// different archives must not share a key), unpacked into <cache_dir>/<key>/rootfs by the first
// caller and reused by every later one. <cache_dir>/<key>/ also holds `lock` (flock'ed while a
// caller looks or unpacks) and `image.json` (the ImageInfo, written after the rootfs is in
// place; a rootfs without it is unpacked again). Leftover temporary directories of a crashed
// unpack are removed. Errors: InvalidArgument for a key that is empty, longer than
// kMaxImageCacheKeyBytes, "." or "..", or has a character other than A-Z a-z 0-9 . _ -; those of
// UnpackImage.
base::Result<CachedImage> CachedRootfs(const std::string& cache_dir, std::string_view key,
                                       const std::string& archive_path,
                                       const UnpackOptions& options = {});

// ImageInfo as the JSON object of the cache's image.json (docs/formats/images.md), and back.
// Errors: InvalidArgument for malformed JSON or a field of the wrong type.
std::string ImageInfoToJson(const ImageInfo& info);
base::Result<ImageInfo> ImageInfoFromJson(std::string_view json);

}  // namespace sovai::exec
