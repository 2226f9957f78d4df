// Named limits of image unpacking (oci_image.h, tar_reader.h, docs/formats/images.md). An image
// archive is untrusted input from a bucket: every size, count and length it declares is checked
// against one of these before it is acted on. Exceeding one is ResourceExhausted with a message
// that names the limit (e.g. "the image has more than 1000000 entries (max_entries)").
// UnpackOptions carries each one, so that a caller (or a test) may lower or raise it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sovai::exec {

// The image archive as stored in the bucket (and, for a gzip-compressed archive, its
// decompressed tar, which is written to a temporary file next to the rootfs).
inline constexpr uint64_t kMaxImageArchiveBytes = 32ull << 30;  // 32 GiB
// Bytes of regular files written into the rootfs, all layers together (a file that a later
// layer replaces counts twice: both were written).
inline constexpr uint64_t kMaxImageUnpackedBytes = 64ull << 30;  // 64 GiB
// Decompressed layer streams (tar headers and padding included), all layers together. Bounds the
// work on a gzip bomb whose tar ends early and is followed by endless zeros: those bytes are
// still read, to check the layer's diff_id.
inline constexpr uint64_t kMaxImageLayerStreamBytes = kMaxImageUnpackedBytes + (16ull << 30);
// Tar entries of all layers together (each whiteout and directory counts).
inline constexpr size_t kMaxImageEntries = 1'000'000;
// Members of the image archive itself (manifest, config, layers, the OCI layout's blobs).
inline constexpr size_t kMaxImageArchiveMembers = 100'000;
// A path inside an archive or a layer, and a symlink or hard-link target (PATH_MAX).
inline constexpr size_t kMaxImagePathBytes = 4096;
// Components of a path inside a layer: bounds the descent when creating and deleting entries
// (and stays below what Env::DeleteDirRecursive descends when the rootfs is removed).
inline constexpr size_t kMaxImagePathDepth = 256;
// One path component (NAME_MAX).
inline constexpr size_t kMaxImageNameBytes = 255;
// Each JSON document of the image: manifest.json, index.json, an OCI manifest, the config.
inline constexpr size_t kMaxImageManifestBytes = 4u << 20;  // 4 MiB
// Layers of one image (Docker allows 127).
inline constexpr size_t kMaxImageLayers = 256;
// Nested OCI indexes followed from index.json to the image manifest.
inline constexpr int kMaxImageIndexDepth = 4;
// Symlinks followed to find one member of a `docker save` archive (older Docker versions store a
// layer shared by two images once and link to it).
inline constexpr int kMaxImageArchiveLinkHops = 8;
// One PAX extended header (a path, a link target, a few numbers and xattrs).
inline constexpr size_t kMaxTarPaxHeaderBytes = 1u << 20;  // 1 MiB
// A cache key of CachedRootfs (an ETag or a hex digest).
inline constexpr size_t kMaxImageCacheKeyBytes = 128;
// Bytes read from a layer stream at a time.
inline constexpr size_t kImageReadChunkBytes = 256u << 10;  // 256 KiB

}  // namespace sovai::exec
