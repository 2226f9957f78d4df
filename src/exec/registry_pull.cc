#include "exec/registry_pull.h"

#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "base/crypto.h"
#include "base/json.h"
#include "base/strings.h"
#include "exec/s3_client.h"
#include "exec/sandbox.h"

namespace sovai::exec {
namespace {

using base::Result;
using base::Status;

constexpr std::string_view kSha256Prefix = "sha256:";

Result<std::string> Sha256Hex(const std::string& digest) {
  std::string_view hex = std::string_view(digest).substr(kSha256Prefix.size());
  if (!digest.starts_with(kSha256Prefix) || hex.size() != 64 ||
      hex.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
    return base::InvalidArgumentError("registry images are fetched by sha256 digest, not '" +
                                      digest + "'");
  }
  return std::string(hex);
}

Result<std::string> FileSha256Hex(const std::string& path) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return base::ErrnoToStatus(errno, "open " + path);
  base::Sha256Hasher hasher;
  std::string buf(1 << 20, '\0');
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return base::ErrnoToStatus(errno, "read " + path);
    }
    if (n == 0) break;
    hasher.Update(std::string_view(buf.data(), static_cast<size_t>(n)));
  }
  return base::HexEncode(hasher.Finish());
}

// The object `key` into `path`, whole and verified against `hex`, or nothing there.
Status FetchVerified(base::Env& env, S3Client& s3, const std::string& bucket,
                     const std::string& key, const std::string& hex, const std::string& path) {
  const std::string temp = path + ".download-" + base::RandomToken("", 8);
  Status st = s3.GetObjectToFile(bucket, key, temp).status();
  if (st.ok()) {
    Result<std::string> actual = FileSha256Hex(temp);
    if (!actual.ok()) {
      st = actual.status();
    } else if (*actual != hex) {
      st = base::DataLossError("registry object " + key + " hashes to sha256:" + *actual +
                               ", not sha256:" + hex);
    }
  }
  if (st.ok()) st = env.RenameFile(temp, path);
  if (!st.ok()) (void)env.DeleteFile(temp);
  return st;
}

}  // namespace

std::string CachedLayerPath(const std::string& cache_dir, std::string_view hex) {
  return base::JoinPath(base::JoinPath(cache_dir, "layers/sha256"), std::string(hex));
}

Result<CachedImage> PullRegistryImage(base::Env& env, const RegistryImage& image,
                                      const std::string& cache_dir,
                                      const std::function<void(std::string_view)>& say) {
  SOVAI_ASSIGN_OR_RETURN(std::string manifest_hex, Sha256Hex(image.manifest_digest));
  const std::string cache_key = "registry-sha256-" + manifest_hex;
  const std::string entry = base::JoinPath(cache_dir, cache_key);
  if (env.FileExists(base::JoinPath(entry, "image.json"))) {
    // Unpacked before: CachedRootfs reuses it without looking at an archive.
    return CachedRootfs(cache_dir, cache_key, "");
  }
  SOVAI_RETURN_IF_ERROR(env.CreateDirs(base::JoinPath(cache_dir, "layers/sha256")));
  auto s3 = std::make_unique<S3Client>(image.s3);
  SOVAI_RETURN_IF_ERROR(s3->status());

  // The layout: oci-layout, index.json naming the manifest, blobs/sha256/ with the manifest and
  // symlinks to the cached config and layers.
  const std::string layout =
      base::JoinPath(cache_dir, "." + cache_key + ".layout-" + base::RandomToken("", 8));
  const std::string blobs = base::JoinPath(layout, "blobs/sha256");
  SOVAI_RETURN_IF_ERROR(env.CreateDirs(blobs));
  auto cleanup = [&] { (void)env.DeleteDirRecursive(layout); };
  const std::string manifest_path = base::JoinPath(blobs, manifest_hex);
  Status st =
      FetchVerified(env, *s3, image.bucket, image.manifest_key, manifest_hex, manifest_path);
  uint64_t fetched_bytes = 0;
  size_t reused = 0;
  std::vector<const RegistryBlob*> wanted = {&image.config};
  for (const RegistryBlob& layer : image.layers) wanted.push_back(&layer);
  for (const RegistryBlob* blob : wanted) {
    if (!st.ok()) break;
    Result<std::string> hex = Sha256Hex(blob->digest);
    if (!hex.ok()) {
      st = hex.status();
      break;
    }
    const std::string cached = CachedLayerPath(cache_dir, *hex);
    if (env.FileExists(cached)) {
      ++reused;
    } else {
      st = FetchVerified(env, *s3, image.bucket, blob->key, *hex, cached);
      fetched_bytes += blob->size_bytes;
    }
    const std::string link = base::JoinPath(blobs, *hex);
    if (st.ok() && !env.FileExists(link) && ::symlink(cached.c_str(), link.c_str()) != 0) {
      st = base::ErrnoToStatus(errno, "link " + link);
    }
  }
  if (st.ok()) {
    Result<uint64_t> manifest_size = env.GetFileSize(manifest_path);
    st = manifest_size.status();
    if (st.ok()) {
      nlohmann::json index = {{"schemaVersion", 2},
                              {"manifests",
                               {{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                                 {"digest", image.manifest_digest},
                                 {"size", *manifest_size}}}}};
      st = env.WriteFileAtomically(base::JoinPath(layout, "oci-layout"),
                                   R"({"imageLayoutVersion":"1.0.0"})");
      if (st.ok()) {
        st = env.WriteFileAtomically(base::JoinPath(layout, "index.json"), base::DumpJson(index));
      }
    }
  }
  if (!st.ok()) {
    cleanup();
    return st;
  }
  say("image " + image.manifest_digest + ": fetched " + base::HumanBytes(fetched_bytes) + " (" +
      std::to_string(wanted.size() - reused) + " blobs), " + std::to_string(reused) +
      " blobs from the layer cache");
  Result<CachedImage> unpacked = CachedRootfs(cache_dir, cache_key, layout);
  cleanup();
  return unpacked;
}

}  // namespace sovai::exec
