#include "exec/oci_image.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>
#include <utility>

#include "base/crypto.h"
#include "base/json.h"
#include "base/strings.h"
#include "exec/internal/oci_layers.h"
#include "exec/tar_reader.h"

namespace sovai::exec {

namespace oci_internal {

std::string Quote(std::string_view name) {
  constexpr size_t kMaxShown = 200;
  if (name.size() <= kMaxShown) return base::JsonQuote(name);
  return base::JsonQuote(name.substr(0, kMaxShown)) + "...";
}

base::Status Errno(std::string_view what) { return base::ErrnoToStatus(errno, what); }

}  // namespace oci_internal

namespace {

using oci_internal::Errno;
using oci_internal::kDirMode;
using oci_internal::LayerBlob;
using oci_internal::LayerUnpacker;
using oci_internal::ListDirFd;
using oci_internal::MeteredSource;
using oci_internal::Quote;

using base::Result;
using base::Status;
using base::UniqueFd;
using nlohmann::json;

constexpr std::string_view kUnpackTempInfix = ".sovai-unpack.";
constexpr std::string_view kArchiveTempInfix = ".sovai-archive.";

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// "sha256:<64 lowercase hex>" -> the hex.
Result<std::string> ParseDigest(std::string_view digest, std::string_view what) {
  size_t colon = digest.find(':');
  if (colon == std::string_view::npos) {
    return base::InvalidArgumentError(std::string(what) + ": digest " + Quote(digest) +
                                      " is not of the form sha256:<hex>");
  }
  std::string_view algorithm = digest.substr(0, colon);
  std::string_view hex = digest.substr(colon + 1);
  if (algorithm != "sha256") {
    return base::UnimplementedError(std::string(what) + ": digest algorithm " + Quote(algorithm) +
                                    " is not supported (only sha256)");
  }
  if (hex.size() != 2 * base::kSha256Bytes || !IsLowerHex(hex)) {
    return base::InvalidArgumentError(std::string(what) + ": digest " + Quote(digest) +
                                      " is not sha256 followed by 64 lowercase hex digits");
  }
  return std::string(hex);
}

// Resolves "." and ".." and drops empty components of a member name of the image archive (these
// names are only looked up, never written). std::nullopt when ".." climbs above the top.
std::optional<std::string> NormalizeMemberName(std::string_view name) {
  std::vector<std::string_view> parts;
  for (std::string_view part : base::Split(name, '/', /*skip_empty=*/true)) {
    if (part == ".") continue;
    if (part == "..") {
      if (parts.empty()) return std::nullopt;
      parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  if (parts.empty()) return std::nullopt;
  return base::Join(parts, "/");
}

// The sha256 that a member's name promises: "blobs/sha256/<hex>" (OCI layouts and `docker save`
// since Docker 25) or "<hex>.json" (the config of older `docker save` archives).
std::optional<std::string> DigestInMemberName(std::string_view name) {
  constexpr std::string_view kBlobs = "blobs/sha256/";
  std::string_view hex;
  if (name.substr(0, kBlobs.size()) == kBlobs) {
    hex = name.substr(kBlobs.size());
  } else if (name.size() == 2 * base::kSha256Bytes + 5 &&
             name.substr(2 * base::kSha256Bytes) == ".json") {
    hex = name.substr(0, 2 * base::kSha256Bytes);
  } else {
    return std::nullopt;
  }
  if (hex.size() != 2 * base::kSha256Bytes || !IsLowerHex(hex)) return std::nullopt;
  return std::string(hex);
}

// --- The image archive ---

struct Member {
  std::string name;  // normalized
  uint64_t offset = 0;
  uint64_t size_bytes = 0;
  TarEntryType type = TarEntryType::kRegular;
  std::string link_target;
  int fd = -1;  // a file of an OCI layout directory; -1 = the archive's own
};

// The members of the outer tar, indexed by name, read in place with pread (a gzip-compressed
// archive is first decompressed into an unlinked temporary file).
class ImageArchive {
 public:
  static Result<std::unique_ptr<ImageArchive>> Open(const std::string& path,
                                                    const std::string& scratch_path,
                                                    const UnpackOptions& o) {
    auto archive = std::unique_ptr<ImageArchive>(new ImageArchive());
    archive->fd_.Reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!archive->fd_.valid()) return Errno("open the image archive " + Quote(path));
    struct stat st;
    if (::fstat(archive->fd_.get(), &st) != 0) return Errno("stat the image archive");
    if (!S_ISREG(st.st_mode)) {
      return base::InvalidArgumentError("image archive " + Quote(path) + " is not a file");
    }
    auto size = static_cast<uint64_t>(st.st_size);
    if (size > o.max_archive_bytes) {
      return base::ResourceExhaustedError(
          "image archive " + Quote(path) + " is " + std::to_string(size) +
          " bytes, more than max_archive_bytes (" + std::to_string(o.max_archive_bytes) + ")");
    }
    FileRangeSource raw(archive->fd_.get(), 0, size);
    Result<std::unique_ptr<ByteSource>> stream = OpenDecompressed(raw);
    if (!stream.ok()) return stream.status().WithContext("image archive");
    char head[2] = {};
    if (::pread(archive->fd_.get(), head, sizeof head, 0) == 2 &&
        DetectCompression(std::string_view(head, 2)) == Compression::kGzip) {
      // `docker save | gzip`: the members are needed in an order of their own, so the tar is
      // decompressed once into a temporary file, unlinked at once (nothing is left behind).
      UniqueFd tmp(::open(scratch_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!tmp.valid()) return Errno("create " + Quote(scratch_path));
      ::unlink(scratch_path.c_str());
      uint64_t budget = o.max_archive_bytes;
      MeteredSource metered(**stream, false, &budget,
                            "the decompressed image archive is larger than max_archive_bytes (" +
                                std::to_string(o.max_archive_bytes) + ")");
      auto buf = std::make_unique<char[]>(kImageReadChunkBytes);
      size = 0;
      for (;;) {
        SOVAI_ASSIGN_OR_RETURN(size_t got,
                               metered.Read(std::span<char>(buf.get(), kImageReadChunkBytes)));
        if (got == 0) break;
        SOVAI_RETURN_IF_ERROR(base::WriteFdFully(tmp.get(), std::string_view(buf.get(), got)));
        size += got;
      }
      archive->fd_ = std::move(tmp);
    }
    FileRangeSource tar_source(archive->fd_.get(), 0, size);
    // Members are counted here, against their own limit.
    TarReader tar(tar_source, {.max_path_bytes = o.max_path_bytes,
                               .max_pax_header_bytes = kMaxTarPaxHeaderBytes,
                               .max_entries = static_cast<size_t>(-1)});
    for (;;) {
      Result<std::optional<TarEntry>> next = tar.Next();
      if (!next.ok()) return next.status().WithContext("image archive");
      if (!*next) break;
      if (tar.entries() > o.max_archive_members) {
        return base::ResourceExhaustedError("image archive has more than " +
                                            std::to_string(o.max_archive_members) +
                                            " members (max_archive_members)");
      }
      TarEntry& e = **next;
      std::optional<std::string> name = NormalizeMemberName(e.path);
      if (!name) continue;  // "..", "/": never looked up
      Member m{*name, e.data_offset, e.size_bytes, e.type, std::move(e.link_target)};
      archive->members_[*name] = std::move(m);
    }
    return archive;
  }

  // An OCI image layout as a directory the platform laid out (PrepareRootfs: oci-layout,
  // index.json and blobs/sha256/<hex>, the blobs possibly symlinks into a layer cache). Its
  // files are the members; the blobs are still verified against their digests.
  static Result<std::unique_ptr<ImageArchive>> OpenDirectory(const std::string& dir,
                                                             const UnpackOptions& o) {
    auto archive = std::unique_ptr<ImageArchive>(new ImageArchive());
    auto add = [&](const std::string& name) -> Status {
      const std::string path = base::JoinPath(dir, name);
      UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd.valid()) return Errno("open " + Quote(path));
      struct stat st;
      if (::fstat(fd.get(), &st) != 0) return Errno("stat " + Quote(path));
      if (!S_ISREG(st.st_mode)) {
        return base::InvalidArgumentError("image layout member " + Quote(path) + " is not a file");
      }
      if (archive->member_fds_.size() >= o.max_archive_members) {
        return base::ResourceExhaustedError("image layout has more than " +
                                            std::to_string(o.max_archive_members) +
                                            " members (max_archive_members)");
      }
      Member m{name, 0, static_cast<uint64_t>(st.st_size), TarEntryType::kRegular, "", fd.get()};
      archive->member_fds_.push_back(std::move(fd));
      archive->members_[name] = std::move(m);
      return Status();
    };
    SOVAI_RETURN_IF_ERROR(add("oci-layout"));
    SOVAI_RETURN_IF_ERROR(add("index.json"));
    const std::string blobs = base::JoinPath(dir, "blobs/sha256");
    UniqueFd blobs_fd(::open(blobs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!blobs_fd.valid()) return Errno("open " + Quote(blobs));
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirFd(blobs_fd.get()));
    for (const std::string& name : names) {
      SOVAI_RETURN_IF_ERROR(add("blobs/sha256/" + name));
    }
    return archive;
  }

  // The file a member's bytes are in (at m.offset).
  int FdOf(const Member& m) const { return m.fd >= 0 ? m.fd : fd_.get(); }
  bool Has(std::string_view name) const { return members_.find(name) != members_.end(); }

  // The regular file named `name`, following symlinks and hard links of the archive.
  Result<const Member*> Find(std::string_view name) const {
    std::optional<std::string> current = NormalizeMemberName(name);
    for (int hop = 0; current && hop <= kMaxImageArchiveLinkHops; ++hop) {
      auto it = members_.find(*current);
      if (it == members_.end()) break;
      const Member& m = it->second;
      switch (m.type) {
        case TarEntryType::kRegular:
          return &m;
        case TarEntryType::kSymlink:
          if (!m.link_target.empty() && m.link_target[0] == '/') {
            return base::InvalidArgumentError("image archive member " + Quote(m.name) +
                                              " is a symlink to an absolute path");
          }
          current = NormalizeMemberName(base::DirName(m.name) + "/" + m.link_target);
          continue;
        case TarEntryType::kHardLink:
          current = NormalizeMemberName(m.link_target);
          continue;
        default:
          return base::InvalidArgumentError("image archive member " + Quote(m.name) + " is a " +
                                            std::string(TarEntryTypeName(m.type)) + ", not a file");
      }
    }
    if (current && members_.count(*current) != 0) {
      return base::InvalidArgumentError("image archive member " + Quote(name) + " is a chain of " +
                                        "more than " + std::to_string(kMaxImageArchiveLinkHops) +
                                        " links");
    }
    return base::NotFoundError("the image archive has no member " + Quote(name));
  }

  Result<std::string> Read(const Member& m, size_t max_bytes, std::string_view limit_name) const {
    if (m.size_bytes > max_bytes) {
      return base::ResourceExhaustedError(
          "image archive member " + Quote(m.name) + " is " + std::to_string(m.size_bytes) +
          " bytes, more than " + std::string(limit_name) + " (" + std::to_string(max_bytes) + ")");
    }
    std::string data(static_cast<size_t>(m.size_bytes), '\0');
    FileRangeSource source(FdOf(m), m.offset, m.size_bytes);
    SOVAI_ASSIGN_OR_RETURN(size_t got, ReadFull(source, data));
    data.resize(got);
    return data;
  }

 private:
  ImageArchive() = default;
  UniqueFd fd_;
  std::vector<UniqueFd> member_fds_;  // an OCI layout directory's files
  std::map<std::string, Member, std::less<>> members_;
};

Status CheckSha256(std::string_view data, std::string_view expected_hex, std::string_view what) {
  std::string actual = base::HexEncode(base::Sha256(data));
  if (actual == expected_hex) return Status();
  return base::DataLossError(
      std::string(what) + " does not match its digest sha256:" + std::string(expected_hex) +
      " (its content hashes to sha256:" + actual + "); the archive is corrupt or was altered");
}

// --- Manifests and config ---

struct Descriptor {
  std::string media_type;
  std::string hex;  // sha256
  std::optional<uint64_t> size_bytes;
  std::string os;
  std::string architecture;
  bool attestation = false;  // BuildKit's provenance manifests: not an image
};

struct LayerRef {
  const Member* member = nullptr;
  std::string blob_hex;  // the sha256 its bytes must have; empty when nothing says
  std::string label;     // for messages: the member name
};

struct ImagePlan {
  ImageInfo info;
  std::vector<LayerRef> layers;
  std::vector<std::string> diff_ids;  // hex; empty when the config has none
};

Result<json> ParseDocument(std::string_view text, const UnpackOptions& o, std::string_view what) {
  Result<json> doc = base::ParseJson(text, {.max_bytes = o.max_manifest_bytes});
  if (!doc.ok()) return doc.status().WithContext(what);
  return doc;
}

Result<std::vector<std::string>> GetStringArray(const json& obj, std::string_view field,
                                                std::string_view what) {
  std::vector<std::string> out;
  auto it = obj.find(std::string(field));
  if (it == obj.end() || it->is_null()) return out;
  if (!it->is_array()) {
    return base::InvalidArgumentError(std::string(what) + ": field '" + std::string(field) +
                                      "' must be an array of strings");
  }
  for (const json& v : *it) {
    if (!v.is_string()) {
      return base::InvalidArgumentError(std::string(what) + ": field '" + std::string(field) +
                                        "' must be an array of strings");
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

Result<Descriptor> ParseDescriptor(const json& obj, std::string_view what) {
  if (!obj.is_object()) {
    return base::InvalidArgumentError(std::string(what) + ": a descriptor must be an object");
  }
  Descriptor d;
  Result<std::optional<std::string>> media = base::GetOptionalString(obj, "mediaType");
  if (!media.ok()) return media.status().WithContext(what);
  d.media_type = media->value_or("");
  Result<std::string> digest = base::GetString(obj, "digest");
  if (!digest.ok()) return digest.status().WithContext(what);
  SOVAI_ASSIGN_OR_RETURN(d.hex, ParseDigest(*digest, what));
  Result<std::optional<uint64_t>> size = base::GetOptionalUint(obj, "size");
  if (!size.ok()) return size.status().WithContext(what);
  d.size_bytes = *size;
  auto platform = obj.find("platform");
  if (platform != obj.end() && platform->is_object()) {
    d.os = base::GetOptionalString(*platform, "os").value_or(std::nullopt).value_or("");
    d.architecture =
        base::GetOptionalString(*platform, "architecture").value_or(std::nullopt).value_or("");
    if (d.os == "unknown" && d.architecture == "unknown") d.attestation = true;
  }
  auto annotations = obj.find("annotations");
  if (annotations != obj.end() && annotations->is_object()) {
    auto type = annotations->find("vnd.docker.reference.type");
    if (type != annotations->end() && type->is_string() &&
        type->get<std::string>() == "attestation-manifest") {
      d.attestation = true;
    }
  }
  return d;
}

std::string PlatformName(std::string_view os, std::string_view architecture) {
  return std::string(os.empty() ? "?" : os) + "/" +
         std::string(architecture.empty() ? "?" : architecture);
}

// The manifest of an index for this platform: the first whose platform matches; else, when no
// candidate names a platform, the first.
Result<Descriptor> SelectManifest(const json& index, const UnpackOptions& o,
                                  std::string_view what) {
  Result<const json*> manifests = base::GetArray(index, "manifests");
  if (!manifests.ok()) return manifests.status().WithContext(what);
  std::vector<Descriptor> candidates;
  for (const json& m : **manifests) {
    SOVAI_ASSIGN_OR_RETURN(Descriptor d, ParseDescriptor(m, what));
    if (!d.attestation) candidates.push_back(std::move(d));
  }
  if (candidates.empty()) {
    return base::InvalidArgumentError(std::string(what) + " lists no image manifest");
  }
  for (const Descriptor& d : candidates) {
    if (d.os == o.os && d.architecture == o.architecture) return d;
  }
  for (const Descriptor& d : candidates) {
    if (d.os.empty() && d.architecture.empty()) return d;
  }
  std::vector<std::string> platforms;
  for (const Descriptor& d : candidates) platforms.push_back(PlatformName(d.os, d.architecture));
  return base::FailedPreconditionError(std::string(what) + " has no manifest for " +
                                       PlatformName(o.os, o.architecture) + " (it has " +
                                       base::Join(platforms, ", ") + ")");
}

bool IsIndexMediaType(std::string_view media_type) {
  return media_type == "application/vnd.oci.image.index.v1+json" ||
         media_type == "application/vnd.docker.distribution.manifest.list.v2+json";
}

Result<const Member*> FindBlob(const ImageArchive& archive, const Descriptor& d,
                               std::string_view what) {
  Result<const Member*> member = archive.Find("blobs/sha256/" + d.hex);
  if (!member.ok()) {
    if (member.status().code() == base::StatusCode::kNotFound) {
      return base::NotFoundError("the image archive has no blob sha256:" + d.hex + " (" +
                                 std::string(what) + ")");
    }
    return member.status();
  }
  if (d.size_bytes && *d.size_bytes != (*member)->size_bytes) {
    return base::DataLossError(std::string(what) + ": blob sha256:" + d.hex + " is " +
                               std::to_string((*member)->size_bytes) +
                               " bytes, its descriptor says " + std::to_string(*d.size_bytes));
  }
  return *member;
}

Result<std::string> ReadBlob(const ImageArchive& archive, const Descriptor& d,
                             const UnpackOptions& o, std::string_view what) {
  SOVAI_ASSIGN_OR_RETURN(const Member* member, FindBlob(archive, d, what));
  SOVAI_ASSIGN_OR_RETURN(std::string data,
                         archive.Read(*member, o.max_manifest_bytes, "max_manifest_bytes"));
  SOVAI_RETURN_IF_ERROR(CheckSha256(data, d.hex, std::string(what) + " blob"));
  return data;
}

Status ParseConfig(std::string_view text, const UnpackOptions& o, ImagePlan* plan) {
  constexpr std::string_view kWhat = "image config";
  SOVAI_ASSIGN_OR_RETURN(json doc, ParseDocument(text, o, kWhat));
  if (!doc.is_object()) return base::InvalidArgumentError("image config must be a JSON object");
  ImageInfo& info = plan->info;
  info.config_digest = "sha256:" + base::HexEncode(base::Sha256(text));
  Result<std::optional<std::string>> os = base::GetOptionalString(doc, "os");
  Result<std::optional<std::string>> arch = base::GetOptionalString(doc, "architecture");
  if (!os.ok()) return os.status().WithContext(kWhat);
  if (!arch.ok()) return arch.status().WithContext(kWhat);
  info.os = os->value_or("");
  info.architecture = arch->value_or("");
  if ((!info.os.empty() && info.os != o.os) ||
      (!info.architecture.empty() && info.architecture != o.architecture)) {
    return base::FailedPreconditionError(
        "the image is for " + PlatformName(info.os, info.architecture) + ", and this host runs " +
        PlatformName(o.os, o.architecture) + "; build or pull the image for this platform");
  }
  auto config = doc.find("config");
  if (config != doc.end() && !config->is_null()) {
    if (!config->is_object()) {
      return base::InvalidArgumentError("image config: field 'config' must be an object");
    }
    SOVAI_ASSIGN_OR_RETURN(info.env, GetStringArray(*config, "Env", kWhat));
    SOVAI_ASSIGN_OR_RETURN(info.entrypoint, GetStringArray(*config, "Entrypoint", kWhat));
    SOVAI_ASSIGN_OR_RETURN(info.cmd, GetStringArray(*config, "Cmd", kWhat));
    Result<std::optional<std::string>> dir = base::GetOptionalString(*config, "WorkingDir");
    Result<std::optional<std::string>> user = base::GetOptionalString(*config, "User");
    if (!dir.ok()) return dir.status().WithContext(kWhat);
    if (!user.ok()) return user.status().WithContext(kWhat);
    info.working_dir = dir->value_or("");
    info.user = user->value_or("");
  }
  auto rootfs = doc.find("rootfs");
  if (rootfs != doc.end() && rootfs->is_object()) {
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> diff_ids,
                           GetStringArray(*rootfs, "diff_ids", kWhat));
    for (const std::string& id : diff_ids) {
      SOVAI_ASSIGN_OR_RETURN(std::string hex, ParseDigest(id, "image config diff_ids"));
      plan->diff_ids.push_back(std::move(hex));
    }
  }
  return Status();
}

Status CheckLayerCount(size_t n, const UnpackOptions& o) {
  if (n <= o.max_layers) return Status();
  return base::ResourceExhaustedError("the image has " + std::to_string(n) +
                                      " layers, more than max_layers (" +
                                      std::to_string(o.max_layers) + ")");
}

// `docker save`: manifest.json names the config and the layer tars by member path.
Result<ImagePlan> PlanDockerSave(const ImageArchive& archive, const UnpackOptions& o) {
  ImagePlan plan;
  plan.info.format = "docker-save";
  SOVAI_ASSIGN_OR_RETURN(const Member* manifest_member, archive.Find("manifest.json"));
  SOVAI_ASSIGN_OR_RETURN(
      std::string manifest_text,
      archive.Read(*manifest_member, o.max_manifest_bytes, "max_manifest_bytes"));
  SOVAI_ASSIGN_OR_RETURN(json manifest, ParseDocument(manifest_text, o, "manifest.json"));
  if (!manifest.is_array() || manifest.empty() || !manifest[0].is_object()) {
    return base::InvalidArgumentError("manifest.json must be a non-empty array of image objects");
  }
  // An archive of several images (`docker save a b`): the first one.
  const json& image = manifest[0];
  Result<std::string> config_name = base::GetString(image, "Config");
  if (!config_name.ok()) return config_name.status().WithContext("manifest.json");
  SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> layer_names,
                         GetStringArray(image, "Layers", "manifest.json"));
  SOVAI_RETURN_IF_ERROR(CheckLayerCount(layer_names.size(), o));

  SOVAI_ASSIGN_OR_RETURN(const Member* config_member, archive.Find(*config_name));
  SOVAI_ASSIGN_OR_RETURN(std::string config_text,
                         archive.Read(*config_member, o.max_manifest_bytes, "max_manifest_bytes"));
  if (std::optional<std::string> hex = DigestInMemberName(config_member->name)) {
    SOVAI_RETURN_IF_ERROR(CheckSha256(config_text, *hex, "image config " + Quote(*config_name)));
  }
  SOVAI_RETURN_IF_ERROR(ParseConfig(config_text, o, &plan));
  for (const std::string& name : layer_names) {
    SOVAI_ASSIGN_OR_RETURN(const Member* member, archive.Find(name));
    plan.layers.push_back({member, DigestInMemberName(member->name).value_or(""), member->name});
  }
  return plan;
}

// An OCI image layout: index.json -> (nested indexes) -> manifest -> config and layers, each a
// blob named by its sha256.
Result<ImagePlan> PlanOciLayout(const ImageArchive& archive, const UnpackOptions& o) {
  ImagePlan plan;
  plan.info.format = "oci-layout";
  SOVAI_ASSIGN_OR_RETURN(const Member* layout_member, archive.Find("oci-layout"));
  SOVAI_ASSIGN_OR_RETURN(std::string layout_text,
                         archive.Read(*layout_member, o.max_manifest_bytes, "max_manifest_bytes"));
  SOVAI_ASSIGN_OR_RETURN(json layout, ParseDocument(layout_text, o, "oci-layout"));
  Result<std::string> version = base::GetString(layout, "imageLayoutVersion");
  if (!version.ok()) return version.status().WithContext("oci-layout");
  if (version->substr(0, 2) != "1.") {
    return base::UnimplementedError("OCI image layout version " + Quote(*version) +
                                    " is not supported (only 1.x)");
  }
  SOVAI_ASSIGN_OR_RETURN(const Member* index_member, archive.Find("index.json"));
  SOVAI_ASSIGN_OR_RETURN(std::string index_text,
                         archive.Read(*index_member, o.max_manifest_bytes, "max_manifest_bytes"));
  SOVAI_ASSIGN_OR_RETURN(json doc, ParseDocument(index_text, o, "index.json"));
  SOVAI_ASSIGN_OR_RETURN(Descriptor selected, SelectManifest(doc, o, "index.json"));
  for (int depth = 0;; ++depth) {
    if (depth > kMaxImageIndexDepth) {
      return base::ResourceExhaustedError("index.json nests more than " +
                                          std::to_string(kMaxImageIndexDepth) +
                                          " image indexes (kMaxImageIndexDepth)");
    }
    std::string what = "manifest sha256:" + selected.hex;
    SOVAI_ASSIGN_OR_RETURN(std::string text, ReadBlob(archive, selected, o, what));
    SOVAI_ASSIGN_OR_RETURN(doc, ParseDocument(text, o, what));
    if (!doc.is_object()) return base::InvalidArgumentError(what + " must be a JSON object");
    std::string media_type = base::GetOptionalString(doc, "mediaType").value_or("").value_or("");
    if (IsIndexMediaType(selected.media_type) || IsIndexMediaType(media_type) ||
        (doc.contains("manifests") && !doc.contains("layers"))) {
      SOVAI_ASSIGN_OR_RETURN(selected, SelectManifest(doc, o, what));
      continue;
    }
    break;
  }
  const std::string what = "manifest sha256:" + selected.hex;
  Result<const json*> config = base::GetObject(doc, "config");
  if (!config.ok()) return config.status().WithContext(what);
  SOVAI_ASSIGN_OR_RETURN(Descriptor config_desc, ParseDescriptor(**config, what + " config"));
  Result<const json*> layers = base::GetArray(doc, "layers");
  if (!layers.ok()) return layers.status().WithContext(what);
  SOVAI_RETURN_IF_ERROR(CheckLayerCount((*layers)->size(), o));
  SOVAI_ASSIGN_OR_RETURN(std::string config_text,
                         ReadBlob(archive, config_desc, o, "image config"));
  SOVAI_RETURN_IF_ERROR(ParseConfig(config_text, o, &plan));
  for (const json& layer : **layers) {
    SOVAI_ASSIGN_OR_RETURN(Descriptor d, ParseDescriptor(layer, what + " layer"));
    SOVAI_ASSIGN_OR_RETURN(const Member* member,
                           FindBlob(archive, d, "layer " + std::to_string(plan.layers.size() + 1)));
    plan.layers.push_back({member, d.hex, member->name});
  }
  return plan;
}

// Deletes a temporary directory on destruction unless released.
class TempDirGuard {
 public:
  TempDirGuard(base::Env& env, std::string path) : env_(env), path_(std::move(path)) {}
  ~TempDirGuard() {
    if (!path_.empty()) env_.DeleteDirRecursive(path_).IgnoreError();
  }
  TempDirGuard(const TempDirGuard&) = delete;
  TempDirGuard& operator=(const TempDirGuard&) = delete;
  void Release() { path_.clear(); }

 private:
  base::Env& env_;
  std::string path_;
};

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

std::string_view HostImageArchitecture() {
#if defined(__x86_64__)
  return "amd64";
#elif defined(__aarch64__)
  return "arm64";
#elif defined(__powerpc64__)
  return "ppc64le";
#elif defined(__s390x__)
  return "s390x";
#elif defined(__riscv) && __riscv_xlen == 64
  return "riscv64";
#else
  return "unknown";
#endif
}

Result<ImageInfo> UnpackImage(const std::string& archive_path, const std::string& rootfs_arg,
                              const UnpackOptions& o) {
  base::Env& env = o.env != nullptr ? *o.env : base::Env::Default();
  const std::string rootfs_dir = StripTrailingSlashes(rootfs_arg);
  if (rootfs_dir.empty() || rootfs_dir == "/") {
    return base::InvalidArgumentError("rootfs directory " + Quote(rootfs_arg) +
                                      " must name a new directory");
  }
  struct stat st;
  if (::lstat(rootfs_dir.c_str(), &st) == 0) {
    return base::AlreadyExistsError("rootfs directory " + Quote(rootfs_dir) +
                                    " already exists; remove it or unpack elsewhere");
  }
  const std::string parent = base::DirName(rootfs_dir);
  const std::string name = base::BaseName(rootfs_dir);
  const std::string suffix = base::RandomToken("", 8);
  const std::string temp_dir =
      base::JoinPath(parent, "." + name + std::string(kUnpackTempInfix) + suffix);
  const std::string scratch =
      base::JoinPath(parent, "." + name + std::string(kArchiveTempInfix) + suffix);

  if (::mkdir(temp_dir.c_str(), 0700) != 0) return Errno("create " + Quote(temp_dir));
  TempDirGuard guard(env, temp_dir);
  UniqueFd root(::open(temp_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root.valid()) return Errno("open " + Quote(temp_dir));
  if (::fchmod(root.get(), kDirMode) != 0) return Errno("chmod " + Quote(temp_dir));

  struct stat source;
  const bool layout_dir = ::stat(archive_path.c_str(), &source) == 0 && S_ISDIR(source.st_mode);
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<ImageArchive> archive,
                         layout_dir ? ImageArchive::OpenDirectory(archive_path, o)
                                    : ImageArchive::Open(archive_path, scratch, o));
  // Docker 25 and later write both forms; the OCI one has descriptors with sizes and digests.
  const bool oci = archive->Has("oci-layout");
  if (!oci && !archive->Has("manifest.json")) {
    return base::InvalidArgumentError(
        "image archive " + Quote(archive_path) +
        " is not an image: it has neither manifest.json (docker save) nor oci-layout and "
        "index.json (an OCI image layout)");
  }
  SOVAI_ASSIGN_OR_RETURN(ImagePlan plan,
                         oci ? PlanOciLayout(*archive, o) : PlanDockerSave(*archive, o));
  if (!plan.diff_ids.empty() && plan.diff_ids.size() != plan.layers.size()) {
    return base::DataLossError("the image config lists " + std::to_string(plan.diff_ids.size()) +
                               " diff_ids for " + std::to_string(plan.layers.size()) + " layers");
  }

  LayerUnpacker unpacker(o, root.get());
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerRef& layer = plan.layers[i];
    const LayerBlob blob{.fd = archive->FdOf(*layer.member),
                         .offset = layer.member->offset,
                         .size_bytes = layer.member->size_bytes,
                         .blob_hex = layer.blob_hex};
    Status s = unpacker.ApplyLayer(blob, plan.diff_ids.empty() ? "" : plan.diff_ids[i]);
    if (!s.ok()) {
      return s.WithContext("image layer " + std::to_string(i + 1) + " of " +
                           std::to_string(plan.layers.size()) + " (" + Quote(plan.layers[i].label) +
                           ")");
    }
  }
  SOVAI_RETURN_IF_ERROR(unpacker.Finish());
  // The files' data must be on disk before the rename makes the rootfs visible.
  if (::syncfs(root.get()) != 0) return Errno("sync " + Quote(temp_dir));
  if (::renameat2(AT_FDCWD, temp_dir.c_str(), AT_FDCWD, rootfs_dir.c_str(), RENAME_NOREPLACE) !=
      0) {
    if (errno != EINVAL && errno != ENOSYS) {
      return Errno("rename " + Quote(temp_dir) + " to " + Quote(rootfs_dir));
    }
    // A filesystem without RENAME_NOREPLACE: check, then rename (it fails on a non-empty
    // directory anyway).
    if (::lstat(rootfs_dir.c_str(), &st) == 0) {
      return base::AlreadyExistsError("rootfs directory " + Quote(rootfs_dir) + " already exists");
    }
    SOVAI_RETURN_IF_ERROR(env.RenameFile(temp_dir, rootfs_dir));
  }
  guard.Release();
  SOVAI_RETURN_IF_ERROR(env.SyncDir(parent));

  plan.info.layers = plan.layers.size();
  plan.info.files = unpacker.files();
  plan.info.bytes = unpacker.bytes();
  plan.info.whiteouts = unpacker.whiteouts();
  plan.info.skipped_special = unpacker.skipped_special();
  return plan.info;
}

// --- Cache ---

std::string ImageInfoToJson(const ImageInfo& info) {
  json j = {
      {"format", info.format},
      {"config_digest", info.config_digest},
      {"os", info.os},
      {"architecture", info.architecture},
      {"env", info.env},
      {"entrypoint", info.entrypoint},
      {"cmd", info.cmd},
      {"working_dir", info.working_dir},
      {"user", info.user},
      {"layers", info.layers},
      {"files", info.files},
      {"bytes", info.bytes},
      {"whiteouts", info.whiteouts},
      {"skipped_special", info.skipped_special},
  };
  return base::DumpJson(j, 2) + "\n";
}

Result<ImageInfo> ImageInfoFromJson(std::string_view text) {
  SOVAI_ASSIGN_OR_RETURN(json j, base::ParseJson(text));
  if (!j.is_object()) return base::InvalidArgumentError("image info must be a JSON object");
  ImageInfo info;
  SOVAI_ASSIGN_OR_RETURN(info.format, base::GetString(j, "format"));
  SOVAI_ASSIGN_OR_RETURN(info.config_digest, base::GetString(j, "config_digest"));
  SOVAI_ASSIGN_OR_RETURN(info.os, base::GetString(j, "os"));
  SOVAI_ASSIGN_OR_RETURN(info.architecture, base::GetString(j, "architecture"));
  SOVAI_ASSIGN_OR_RETURN(info.env, GetStringArray(j, "env", "image info"));
  SOVAI_ASSIGN_OR_RETURN(info.entrypoint, GetStringArray(j, "entrypoint", "image info"));
  SOVAI_ASSIGN_OR_RETURN(info.cmd, GetStringArray(j, "cmd", "image info"));
  SOVAI_ASSIGN_OR_RETURN(info.working_dir, base::GetString(j, "working_dir"));
  SOVAI_ASSIGN_OR_RETURN(info.user, base::GetString(j, "user"));
  SOVAI_ASSIGN_OR_RETURN(info.layers, base::GetUint(j, "layers"));
  SOVAI_ASSIGN_OR_RETURN(info.files, base::GetUint(j, "files"));
  SOVAI_ASSIGN_OR_RETURN(info.bytes, base::GetUint(j, "bytes"));
  SOVAI_ASSIGN_OR_RETURN(info.whiteouts, base::GetUint(j, "whiteouts"));
  SOVAI_ASSIGN_OR_RETURN(info.skipped_special, base::GetUint(j, "skipped_special"));
  return info;
}

Result<CachedImage> CachedRootfs(const std::string& cache_dir, std::string_view key,
                                 const std::string& archive_path, const UnpackOptions& o) {
  base::Env& env = o.env != nullptr ? *o.env : base::Env::Default();
  bool key_ok = !key.empty() && key.size() <= kMaxImageCacheKeyBytes && key != "." && key != "..";
  for (char c : key) {
    bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '_' || c == '-';
    key_ok = key_ok && allowed;
  }
  if (!key_ok) {
    return base::InvalidArgumentError(
        "image cache key " + Quote(key) + " must be 1 to " +
        std::to_string(kMaxImageCacheKeyBytes) +
        " characters of A-Z a-z 0-9 . _ - (an ETag or a hex digest), not '.' or '..'");
  }
  const std::string key_dir = base::JoinPath(cache_dir, key);
  SOVAI_RETURN_IF_ERROR(env.CreateDirs(key_dir));
  const std::string lock_path = base::JoinPath(key_dir, "lock");
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock.valid()) return Errno("open " + Quote(lock_path));
  // Held until `lock` closes: one caller per key looks and unpacks at a time, across threads
  // (each call opens its own file description) and processes.
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return Errno("lock " + Quote(lock_path));
  }

  CachedImage out;
  out.rootfs = base::JoinPath(key_dir, "rootfs");
  const std::string info_path = base::JoinPath(key_dir, "image.json");
  struct stat st;
  if (::lstat(out.rootfs.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      Result<std::string> text = env.ReadFile(info_path, 2 * o.max_manifest_bytes + (1u << 20));
      if (text.ok()) {
        Result<ImageInfo> info = ImageInfoFromJson(*text);
        if (info.ok()) {
          out.info = std::move(*info);
          out.reused = true;
          return out;
        }
      }
      // The rootfs is in place but its image.json is not: a crash came between the two.
      SOVAI_RETURN_IF_ERROR(env.DeleteDirRecursive(out.rootfs));
    } else {
      SOVAI_RETURN_IF_ERROR(env.DeleteFile(out.rootfs));
    }
  }
  // Leftovers of an unpack that crashed (we hold the lock: nobody else is unpacking).
  SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> names, env.ListDir(key_dir));
  for (const std::string& name : names) {
    std::string path = base::JoinPath(key_dir, name);
    if (name.rfind(".rootfs" + std::string(kUnpackTempInfix), 0) == 0) {
      SOVAI_RETURN_IF_ERROR(env.DeleteDirRecursive(path));
    } else if (name.rfind(".rootfs" + std::string(kArchiveTempInfix), 0) == 0) {
      SOVAI_RETURN_IF_ERROR(env.DeleteFile(path));
    }
  }
  SOVAI_ASSIGN_OR_RETURN(out.info, UnpackImage(archive_path, out.rootfs, o));
  SOVAI_RETURN_IF_ERROR(env.WriteFileAtomically(info_path, ImageInfoToJson(out.info)));
  return out;
}

}  // namespace sovai::exec
