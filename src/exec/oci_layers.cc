// The layer half of UnpackImage (oci_image.h): each layer's tar stream, decompressed, hashed
// and bounded, applied to the rootfs being built: whiteouts and opaque directories honoured,
// nothing written outside it (docs/formats/images.md). Reading the archive and its manifests is
// oci_image.cc.
#include "exec/internal/oci_layers.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <optional>
#include <unordered_set>
#include <utility>

#include "base/crypto.h"
#include "base/strings.h"
#include "exec/tar_reader.h"

namespace sovai::exec::oci_internal {
namespace {

using base::Result;
using base::Status;
using base::UniqueFd;

constexpr std::string_view kWhiteoutPrefix = ".wh.";
constexpr std::string_view kWhiteoutMetaPrefix = ".wh..wh.";
constexpr std::string_view kOpaqueMarker = ".wh..wh..opq";

// The mode a regular file gets in the rootfs (see oci_image.h).
mode_t FileMode(uint32_t image_mode) {
  mode_t mode = (image_mode & 0755) | 0444;
  if ((image_mode & 0111) != 0) mode |= 0111;
  return mode;
}

// A path inside a layer, as components: "./usr//bin/" is {usr, bin}, "." is {} (the root).
// Absolute paths and ".." components are refused, not rewritten (see oci_image.h).
Result<std::vector<std::string>> SplitLayerPath(std::string_view path, const UnpackOptions& o,
                                                std::string_view what) {
  auto bad = [&](std::string_view why) {
    return base::InvalidArgumentError(std::string(what) + " " + Quote(path) + ": " +
                                      std::string(why));
  };
  if (path.size() > o.max_path_bytes) {
    return base::ResourceExhaustedError(std::string(what) + " " + Quote(path) + " is longer than " +
                                        "max_path_bytes (" + std::to_string(o.max_path_bytes) +
                                        ")");
  }
  if (path.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (!path.empty() && path[0] == '/') {
    return bad("is an absolute path; image layers hold paths relative to the root");
  }
  std::vector<std::string> parts;
  for (std::string_view part : base::Split(path, '/', /*skip_empty=*/true)) {
    if (part == ".") continue;
    if (part == "..") return bad("has a '..' component, which could reach outside the root");
    if (part.size() > kMaxImageNameBytes) {
      return bad("has a component longer than " + std::to_string(kMaxImageNameBytes) + " bytes");
    }
    parts.emplace_back(part);
  }
  if (parts.size() > kMaxImagePathDepth) {
    return base::ResourceExhaustedError(std::string(what) + " " + Quote(path) + " is nested " +
                                        "deeper than " + std::to_string(kMaxImagePathDepth) +
                                        " directories (kMaxImagePathDepth)");
  }
  return parts;
}

std::string JoinComponents(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += '/';
    out += parts[i];
  }
  return out;
}

Result<UniqueFd> Dup(int fd) {
  UniqueFd out(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!out.valid()) return Errno("dup a directory fd");
  return out;
}

}  // namespace

Result<std::vector<std::string>> ListDirFd(int fd) {
  SOVAI_ASSIGN_OR_RETURN(UniqueFd copy, Dup(fd));
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(copy.get()), &::closedir);
  if (dir == nullptr) return Errno("list a directory of the rootfs");
  copy.Release();  // owned by `dir` now
  ::rewinddir(dir.get());
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    dirent* e = ::readdir(dir.get());
    if (e == nullptr) {
      if (errno != 0) return Errno("list a directory of the rootfs");
      break;
    }
    std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    names.emplace_back(name);
  }
  return names;
}

// Writes layers into the directory `root_fd`, never outside it (see oci_image.h).
class LayerUnpacker::Impl {
 public:
  Impl(const UnpackOptions& o, int root_fd)
      : o_(o), root_fd_(root_fd), stream_budget_(o.max_layer_stream_bytes) {}

  Status ApplyLayer(const LayerBlob& layer, std::string_view diff_id_hex) {
    layer_paths_.clear();
    FileRangeSource raw(layer.fd, layer.offset, layer.size_bytes);
    MeteredSource blob(raw, !layer.blob_hex.empty(), nullptr, "");
    SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> stream, OpenDecompressed(blob));
    MeteredSource tar_bytes(*stream, !diff_id_hex.empty(), &stream_budget_,
                            "the uncompressed layers are larger than max_layer_stream_bytes (" +
                                std::to_string(o_.max_layer_stream_bytes) + ")");
    // Entries are counted here, over all layers, rather than by the reader.
    TarReader tar(tar_bytes, {.max_path_bytes = o_.max_path_bytes,
                              .max_pax_header_bytes = kMaxTarPaxHeaderBytes,
                              .max_entries = static_cast<size_t>(-1)});
    auto blob_mismatch = [&]() -> std::optional<Status> {
      if (layer.blob_hex.empty()) return std::nullopt;
      std::string actual = blob.HexDigest();
      if (actual == layer.blob_hex) return std::nullopt;
      return base::DataLossError(
          "layer blob does not match its digest sha256:" + std::string(layer.blob_hex) +
          " (its content hashes to sha256:" + actual + "); the archive is corrupt or was altered");
    };
    Status applied = ApplyEntries(tar);
    if (!applied.ok()) {
      // The layer is parsed while it is hashed, so a corrupt blob is usually seen first as bad
      // tar or gzip data: when the digest says so, report the root cause. Only the compressed
      // bytes are read for this (bounded by the archive's size), never more decompressed data.
      if (!layer.blob_hex.empty() && blob.Drain().ok()) {
        if (std::optional<Status> mismatch = blob_mismatch()) {
          return base::DataLossError(mismatch->message() +
                                     "; reading it failed with: " + applied.ToString());
        }
      }
      return applied;
    }
    // The digests cover the whole stream, also what follows the end-of-archive marker.
    SOVAI_RETURN_IF_ERROR(tar_bytes.Drain());
    SOVAI_RETURN_IF_ERROR(blob.Drain());
    if (std::optional<Status> mismatch = blob_mismatch()) return *mismatch;
    if (!diff_id_hex.empty()) {
      std::string actual = tar_bytes.HexDigest();
      if (actual != diff_id_hex) {
        return base::DataLossError(
            "uncompressed layer does not match the config's diff_id "
            "sha256:" +
            std::string(diff_id_hex) + " (it hashes to sha256:" + actual +
            "); the archive is corrupt or was altered");
      }
    }
    return Status();
  }

  Status ApplyEntries(TarReader& tar) {
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(std::optional<TarEntry> entry, tar.Next());
      if (!entry) return Status();
      SOVAI_RETURN_IF_ERROR(ApplyEntry(*entry, tar));
    }
  }

  // Sets the directories' modification times, now that nothing is created in them any more.
  Status Finish() {
    for (auto it = dir_mtimes_.rbegin(); it != dir_mtimes_.rend(); ++it) {
      std::vector<std::string> parts;
      for (std::string_view p : base::Split(it->first, '/')) parts.emplace_back(p);
      Result<UniqueFd> dir = OpenDir(parts, parts.size(), /*create=*/false);
      if (!dir.ok()) continue;  // replaced or deleted by a later layer
      timespec times[2] = {it->second, it->second};
      if (::futimens(dir->get(), times) != 0) return Errno("set the mtime of " + Quote(it->first));
    }
    return Status();
  }

  uint64_t files() const { return files_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t whiteouts() const { return whiteouts_; }
  uint64_t skipped_special() const { return skipped_special_; }

 private:
  // Opens the directory made of the first `n` components, from the root, never following a
  // symlink; with `create`, makes missing ones. Errors: InvalidArgument for a symlink on the way,
  // FailedPrecondition for a non-directory, NotFound for a missing one (without `create`).
  Result<UniqueFd> OpenDir(const std::vector<std::string>& parts, size_t n, bool create) {
    std::string path = JoinComponents(parts, n);
    if (cache_fd_.valid() && path == cache_path_) return Dup(cache_fd_.get());
    SOVAI_ASSIGN_OR_RETURN(UniqueFd dir, Dup(root_fd_));
    for (size_t i = 0; i < n; ++i) {
      const char* name = parts[i].c_str();
      int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
      UniqueFd next(::openat(dir.get(), name, flags));
      if (!next.valid() && errno == ENOENT && create) {
        if (::mkdirat(dir.get(), name, kDirMode) != 0 && errno != EEXIST) {
          return Errno("create directory " + Quote(JoinComponents(parts, i + 1)));
        }
        next.Reset(::openat(dir.get(), name, flags));
        if (next.valid() && ::fchmod(next.get(), kDirMode) != 0) {
          return Errno("chmod " + Quote(JoinComponents(parts, i + 1)));
        }
      }
      if (!next.valid()) {
        int err = errno;
        std::string sub = JoinComponents(parts, i + 1);
        struct stat st;
        if (::fstatat(dir.get(), name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
          if (S_ISLNK(st.st_mode)) {
            return base::InvalidArgumentError(
                Quote(sub) +
                " is a symlink in the image; nothing is created, changed or deleted "
                "through a symlink");
          }
          if (!S_ISDIR(st.st_mode)) {
            return base::FailedPreconditionError(Quote(sub) + " is not a directory");
          }
        }
        return base::ErrnoToStatus(err, "open directory " + Quote(sub));
      }
      dir = std::move(next);
    }
    SOVAI_ASSIGN_OR_RETURN(cache_fd_, Dup(dir.get()));
    cache_path_ = std::move(path);
    return dir;
  }

  // Removes `name` in `dir_fd`, a directory with everything below it, never following symlinks.
  Status RemoveAt(int dir_fd, const std::string& name, const std::string& rel, size_t depth) {
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return Status();
      return Errno("stat " + Quote(rel));
    }
    if (S_ISDIR(st.st_mode)) {
      if (depth > kMaxImagePathDepth + 1) {
        return base::ResourceExhaustedError("directory " + Quote(rel) + " is nested too deep");
      }
      cache_fd_.Reset();  // it may be the cached directory, or below it
      UniqueFd child(
          ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!child.valid()) return Errno("open directory " + Quote(rel));
      SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirFd(child.get()));
      for (const std::string& n : names) {
        SOVAI_RETURN_IF_ERROR(RemoveAt(child.get(), n, rel + "/" + n, depth + 1));
      }
      if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0) return Errno("remove " + Quote(rel));
      return Status();
    }
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0) return Errno("remove " + Quote(rel));
    return Status();
  }

  // Removes what lower layers put below the opaque directory `dir_fd` (`rel`), keeping what this
  // layer put there (with containerd's semantics: this layer's entries may come before or after
  // the marker).
  Status ClearOpaque(int dir_fd, const std::string& rel, size_t depth) {
    if (depth > kMaxImagePathDepth + 1) {
      return base::ResourceExhaustedError("directory " + Quote(rel) + " is nested too deep");
    }
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirFd(dir_fd));
    for (const std::string& name : names) {
      std::string child_rel = rel.empty() ? name : rel + "/" + name;
      if (layer_paths_.count(child_rel) == 0) {
        SOVAI_RETURN_IF_ERROR(RemoveAt(dir_fd, name, child_rel, depth + 1));
        continue;
      }
      UniqueFd child(
          ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (child.valid()) SOVAI_RETURN_IF_ERROR(ClearOpaque(child.get(), child_rel, depth + 1));
    }
    return Status();
  }

  // Records that this layer wrote `parts` (and so its parent directories).
  void MarkLayerPath(const std::vector<std::string>& parts, size_t n) {
    for (size_t k = n; k > 0; --k) {
      if (!layer_paths_.insert(JoinComponents(parts, k)).second) break;
    }
  }

  Status ApplyWhiteout(const std::vector<std::string>& parts) {
    const std::string& marker = parts.back();
    const size_t dir_n = parts.size() - 1;
    const std::string dir_rel = JoinComponents(parts, dir_n);
    if (marker == kOpaqueMarker) {
      SOVAI_ASSIGN_OR_RETURN(UniqueFd dir, OpenDir(parts, dir_n, /*create=*/true));
      MarkLayerPath(parts, dir_n);
      ++whiteouts_;
      return ClearOpaque(dir.get(), dir_rel, dir_n);
    }
    if (marker.substr(0, kWhiteoutMetaPrefix.size()) == kWhiteoutMetaPrefix) {
      return Status();  // AUFS bookkeeping (.wh..wh.plnk, ...): not part of the image
    }
    std::string name = marker.substr(kWhiteoutPrefix.size());
    if (name.empty() || name == "." || name == "..") {
      return base::InvalidArgumentError("whiteout " + Quote(marker) + " names no file");
    }
    ++whiteouts_;
    std::string target_rel = dir_rel.empty() ? name : dir_rel + "/" + name;
    // A whiteout hides lower layers only, never an entry of its own layer.
    if (layer_paths_.count(target_rel) != 0) return Status();
    Result<UniqueFd> dir = OpenDir(parts, dir_n, /*create=*/false);
    if (!dir.ok()) {
      base::StatusCode code = dir.status().code();
      // Nothing there to hide.
      if (code == base::StatusCode::kNotFound || code == base::StatusCode::kFailedPrecondition) {
        return Status();
      }
      return dir.status();
    }
    return RemoveAt(dir->get(), name, target_rel, dir_n + 1);
  }

  Status ApplyEntry(const TarEntry& e, TarReader& tar) {
    Status s = ApplyEntryImpl(e, tar);
    if (s.ok()) return s;
    return s.WithContext("entry " + Quote(e.path) + " (" + std::string(TarEntryTypeName(e.type)) +
                         ")");
  }

  Status ApplyEntryImpl(const TarEntry& e, TarReader& tar) {
    if (++entries_ > o_.max_entries) {
      return base::ResourceExhaustedError(
          "the image has more than " + std::to_string(o_.max_entries) + " entries (max_entries)");
    }
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitLayerPath(e.path, o_, "path"));
    if (parts.empty()) {
      // The root itself ("./"): it stays a 0755 directory.
      if (e.type == TarEntryType::kDirectory) return Status();
      return base::InvalidArgumentError("only a directory may name the root");
    }
    if (parts.back().substr(0, kWhiteoutPrefix.size()) == kWhiteoutPrefix) {
      return ApplyWhiteout(parts);
    }
    const std::string rel = JoinComponents(parts, parts.size());
    const std::string& leaf = parts.back();
    SOVAI_ASSIGN_OR_RETURN(UniqueFd parent, OpenDir(parts, parts.size() - 1, /*create=*/true));
    struct stat st;
    bool exists = ::fstatat(parent.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (!exists && errno != ENOENT) return Errno("stat " + Quote(rel));
    const timespec mtime{static_cast<time_t>(e.mtime_unix_s), static_cast<long>(e.mtime_nanos)};
    const timespec times[2] = {mtime, mtime};

    switch (e.type) {
      case TarEntryType::kDirectory: {
        if (exists && !S_ISDIR(st.st_mode)) {
          SOVAI_RETURN_IF_ERROR(RemoveAt(parent.get(), leaf, rel, parts.size()));
          exists = false;
        }
        if (!exists) {
          if (::mkdirat(parent.get(), leaf.c_str(), kDirMode) != 0) {
            return Errno("create directory " + Quote(rel));
          }
          UniqueFd dir(::openat(parent.get(), leaf.c_str(),
                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
          if (!dir.valid() || ::fchmod(dir.get(), kDirMode) != 0)
            return Errno("chmod " + Quote(rel));
          ++files_;
        }
        dir_mtimes_[rel] = mtime;
        break;
      }
      case TarEntryType::kRegular: {
        if (e.size_bytes > o_.max_unpacked_bytes - bytes_) {
          return base::ResourceExhaustedError(
              "its " + std::to_string(e.size_bytes) + " bytes would take the image beyond " +
              "max_unpacked_bytes (" + std::to_string(o_.max_unpacked_bytes) + ")");
        }
        if (exists) SOVAI_RETURN_IF_ERROR(RemoveAt(parent.get(), leaf, rel, parts.size()));
        // O_EXCL: never opens an existing file or follows a symlink planted in the meantime.
        UniqueFd file(::openat(parent.get(), leaf.c_str(),
                               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!file.valid()) return Errno("create " + Quote(rel));
        if (!buffer_) buffer_ = std::make_unique<char[]>(kImageReadChunkBytes);
        uint64_t written = 0;
        for (;;) {
          SOVAI_ASSIGN_OR_RETURN(
              size_t got, tar.ReadData(std::span<char>(buffer_.get(), kImageReadChunkBytes)));
          if (got == 0) break;
          SOVAI_RETURN_IF_ERROR(
              base::WriteFdFully(file.get(), std::string_view(buffer_.get(), got)));
          written += got;
        }
        SOVAI_CHECK_EQ(written, e.size_bytes);
        if (::fchmod(file.get(), FileMode(e.mode)) != 0) return Errno("chmod " + Quote(rel));
        if (::futimens(file.get(), times) != 0) return Errno("set the mtime of " + Quote(rel));
        SOVAI_RETURN_IF_ERROR(file.Close());
        bytes_ += written;
        ++files_;
        break;
      }
      case TarEntryType::kSymlink: {
        if (e.link_target.empty()) return base::InvalidArgumentError("empty symlink target");
        if (exists) SOVAI_RETURN_IF_ERROR(RemoveAt(parent.get(), leaf, rel, parts.size()));
        // Stored as it is, wherever it points: it is never followed while unpacking, and in the
        // sandbox it resolves inside the sandbox's own root.
        if (::symlinkat(e.link_target.c_str(), parent.get(), leaf.c_str()) != 0) {
          return Errno("create symlink " + Quote(rel));
        }
        if (::utimensat(parent.get(), leaf.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
          return Errno("set the mtime of " + Quote(rel));
        }
        ++files_;
        break;
      }
      case TarEntryType::kHardLink: {
        SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> target,
                               SplitLayerPath(e.link_target, o_, "hard link target"));
        if (target.empty()) return base::InvalidArgumentError("hard link to the root");
        if (target == parts) break;  // a link to itself: nothing to do
        Result<UniqueFd> target_dir = OpenDir(target, target.size() - 1, /*create=*/false);
        struct stat target_st;
        if (!target_dir.ok() || ::fstatat(target_dir->get(), target.back().c_str(), &target_st,
                                          AT_SYMLINK_NOFOLLOW) != 0) {
          if (!target_dir.ok() &&
              target_dir.status().code() == base::StatusCode::kInvalidArgument) {
            return target_dir.status();
          }
          return base::InvalidArgumentError("hard link target " + Quote(e.link_target) +
                                            " does not exist in the image (a hard link must "
                                            "name a file of this or a lower layer)");
        }
        if (S_ISDIR(target_st.st_mode)) {
          return base::InvalidArgumentError("hard link target " + Quote(e.link_target) +
                                            " is a directory");
        }
        if (exists) SOVAI_RETURN_IF_ERROR(RemoveAt(parent.get(), leaf, rel, parts.size()));
        // Flags 0: a link to a symlink links the symlink itself, never what it points to.
        if (::linkat(target_dir->get(), target.back().c_str(), parent.get(), leaf.c_str(), 0) !=
            0) {
          return Errno("create hard link " + Quote(rel));
        }
        ++files_;
        break;
      }
      case TarEntryType::kCharDevice:
      case TarEntryType::kBlockDevice:
      case TarEntryType::kFifo:
        // Not created (the sandbox has its own /dev); what lower layers had there is gone.
        if (exists) SOVAI_RETURN_IF_ERROR(RemoveAt(parent.get(), leaf, rel, parts.size()));
        ++skipped_special_;
        break;
    }
    MarkLayerPath(parts, parts.size());
    return Status();
  }

  const UnpackOptions& o_;
  const int root_fd_;
  uint64_t stream_budget_;
  uint64_t entries_ = 0;
  uint64_t files_ = 0;
  uint64_t bytes_ = 0;
  uint64_t whiteouts_ = 0;
  uint64_t skipped_special_ = 0;
  // Paths the current layer wrote (with their parents): what an opaque marker keeps.
  std::unordered_set<std::string> layer_paths_;
  // Directories' modification times, set by Finish.
  std::map<std::string, timespec> dir_mtimes_;
  // The last directory OpenDir opened (most entries share their parent with the previous one);
  // dropped whenever a directory is removed.
  std::string cache_path_;
  UniqueFd cache_fd_;
  std::unique_ptr<char[]> buffer_;
};

LayerUnpacker::LayerUnpacker(const UnpackOptions& o, int root_fd)
    : impl_(std::make_unique<Impl>(o, root_fd)) {}
LayerUnpacker::~LayerUnpacker() = default;
Status LayerUnpacker::ApplyLayer(const LayerBlob& layer, std::string_view diff_id_hex) {
  return impl_->ApplyLayer(layer, diff_id_hex);
}
Status LayerUnpacker::Finish() { return impl_->Finish(); }
uint64_t LayerUnpacker::files() const { return impl_->files(); }
uint64_t LayerUnpacker::bytes() const { return impl_->bytes(); }
uint64_t LayerUnpacker::whiteouts() const { return impl_->whiteouts(); }
uint64_t LayerUnpacker::skipped_special() const { return impl_->skipped_special(); }

}  // namespace sovai::exec::oci_internal
