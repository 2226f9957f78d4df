// Storage: manifests, tags, listings and garbage collection (blobs and uploads: storage.cc).
#include <charconv>
#include <map>
#include <set>

#include "base/json.h"
#include "base/log.h"
#include "registry/manifest.h"
#include "registry/storage.h"

namespace sovai::registry {
namespace {

using objstore::S3Code;

std::string ManifestKey(const std::string& repository, const Digest& d) {
  return "repos/" + repository + "/_manifests/" + d.algorithm + "/" + d.hex;
}
std::string TagPrefix(const std::string& repository) { return "repos/" + repository + "/_tags/"; }
std::string SettingsKey(const std::string& repository) {
  return "repos/" + repository + "/_settings";
}

// The manifest of an index for `os`/`architecture`: the first that names that platform, else
// the first that names none.
base::Result<Descriptor> SelectPlatform(const Manifest& index, std::string_view os,
                                        std::string_view architecture) {
  for (const Descriptor& d : index.manifests) {
    if (d.os == os && d.architecture == architecture) return d;
  }
  for (const Descriptor& d : index.manifests) {
    if (d.os.empty() && d.architecture.empty()) return d;
  }
  std::string platforms;
  for (const Descriptor& d : index.manifests) {
    if (!platforms.empty()) platforms += ", ";
    platforms += d.os + "/" + d.architecture;
  }
  return base::FailedPreconditionError("the index has no manifest for " + std::string(os) + "/" +
                                       std::string(architecture) + " (it has " + platforms +
                                       "); push the image for this platform");
}

std::optional<std::string> UserMeta(const objstore::ObjectMeta& meta, std::string_view name) {
  for (const auto& [k, v] : meta.user) {
    if (k == name) return v;
  }
  return std::nullopt;
}

// "repos/<repository>/_manifests/..." or ".../_tags/..." → the repository; "" otherwise.
std::string RepositoryOfKey(std::string_view key) {
  if (!key.starts_with("repos/")) return "";
  key.remove_prefix(6);
  for (std::string_view marker : {"/_manifests/", "/_tags/"}) {
    size_t at = key.find(marker);
    if (at != std::string_view::npos) return std::string(key.substr(0, at));
  }
  return "";
}

// "blobs/<project>/<algorithm>/<hex>" → (project, "<algorithm>:<hex>"); nullopt otherwise.
std::optional<std::pair<std::string, std::string>> BlobOfKey(std::string_view key) {
  if (!key.starts_with("blobs/")) return std::nullopt;
  std::string_view rest = key.substr(6);
  size_t a = rest.find('/');
  size_t b = a == std::string_view::npos ? a : rest.find('/', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  return std::pair(std::string(rest.substr(0, a)), std::string(rest.substr(a + 1, b - a - 1)) +
                                                       ":" + std::string(rest.substr(b + 1)));
}

// A link's `size` metadata (0 when missing or unreadable).
uint64_t LinkSize(const objstore::ObjectMeta& meta) {
  std::string text = UserMeta(meta, "size").value_or("0");
  uint64_t size = 0;
  std::from_chars(text.data(), text.data() + text.size(), size);
  return size;
}

}  // namespace

#define SOVAI_REG_S3(lhs, expr)                                   \
  auto SOVAI_S3_CONCAT(s3r_, __LINE__) = (expr);                  \
  if (!SOVAI_S3_CONCAT(s3r_, __LINE__).ok())                      \
    return StatusFromS3(SOVAI_S3_CONCAT(s3r_, __LINE__).error()); \
  lhs = std::move(SOVAI_S3_CONCAT(s3r_, __LINE__)).value()

base::Result<StoredManifest> Storage::GetManifest(const std::string& repository,
                                                  const std::string& reference) {
  Digest digest;
  if (auto parsed = ParseDigest(reference); parsed.ok()) {
    digest = *parsed;
  } else {
    SOVAI_RETURN_IF_ERROR(ValidateTag(reference));
    auto tag = store_.Head(options_.bucket, TagPrefix(repository) + reference, std::nullopt);
    if (!tag.ok()) {
      if (tag.error().code == S3Code::kNoSuchKey) {
        return base::NotFoundError("tag " + reference + " of " + repository + " does not exist");
      }
      return StatusFromS3(tag.error());
    }
    SOVAI_ASSIGN_OR_RETURN(digest, ParseDigest(UserMeta(tag->meta, "digest").value_or("")));
  }
  auto object = store_.Head(options_.bucket, ManifestKey(repository, digest), std::nullopt);
  if (!object.ok()) {
    if (object.error().code == S3Code::kNoSuchKey) {
      return base::NotFoundError("manifest " + digest.ToString() + " of " + repository +
                                 " does not exist");
    }
    return StatusFromS3(object.error());
  }
  StoredManifest out;
  out.digest = digest;
  out.media_type = object->meta.content_type;
  SOVAI_ASSIGN_OR_RETURN(out.bytes, ReadSmall(*object, kMaxManifestBytes));
  return out;
}

base::Result<Digest> Storage::PutManifest(const std::string& repository,
                                          const std::string& reference,
                                          std::string_view content_type, const std::string& bytes) {
  std::optional<Digest> by_digest;
  if (auto parsed = ParseDigest(reference); parsed.ok()) {
    by_digest = *parsed;
  } else if (reference.find(':') != std::string::npos) {
    return parsed.status();  // looks like a digest (tags have no ':'), but is not a valid one
  } else {
    SOVAI_RETURN_IF_ERROR(ValidateTag(reference));
  }
  SOVAI_ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(bytes, content_type));
  const std::string project(ProjectOf(repository));
  for (const Descriptor& d : manifest.blobs()) {
    auto blob = StatBlob(project, d.digest);
    if (!blob.ok()) {
      if (blob.status().code() == base::StatusCode::kNotFound) {
        return base::FailedPreconditionError("the manifest references blob " + d.digest.ToString() +
                                             ", which was not pushed to project " + project);
      }
      return blob.status();
    }
    if (blob->size != d.size) {
      return base::InvalidArgumentError("the manifest gives blob " + d.digest.ToString() +
                                        " a size of " + std::to_string(d.size) + "; it has " +
                                        std::to_string(blob->size) + " bytes");
    }
  }
  for (const Descriptor& d : manifest.manifests) {
    auto child = store_.Head(options_.bucket, ManifestKey(repository, d.digest), std::nullopt);
    if (!child.ok()) {
      if (child.error().code == S3Code::kNoSuchKey) {
        return base::FailedPreconditionError("the index lists manifest " + d.digest.ToString() +
                                             ", which is not in " + repository);
      }
      return StatusFromS3(child.error());
    }
  }
  Digest digest = DigestOf(by_digest ? by_digest->algorithm : "sha256", bytes);
  if (by_digest && digest != *by_digest) {
    return base::DataLossError("the manifest's bytes have digest " + digest.ToString() + ", not " +
                               by_digest->ToString());
  }
  if (!by_digest) {
    SOVAI_ASSIGN_OR_RETURN(RepositorySettings settings, GetSettings(repository));
    auto tag = store_.Head(options_.bucket, TagPrefix(repository) + reference, std::nullopt);
    if (settings.immutable_tags && tag.ok() && UserMeta(tag->meta, "digest") != digest.ToString()) {
      return base::AlreadyExistsError(
          "tag " + reference + " of " + repository + " points at " +
          UserMeta(tag->meta, "digest").value_or("") +
          " and the repository's tags are immutable; push under a new tag");
    }
  }
  objstore::ObjectMeta meta;
  meta.content_type = manifest.media_type;
  SOVAI_RETURN_IF_ERROR(PutSmall(ManifestKey(repository, digest), bytes, std::move(meta)));
  if (!by_digest) {
    objstore::ObjectMeta tag;
    tag.user = {{"digest", digest.ToString()}};
    SOVAI_RETURN_IF_ERROR(PutSmall(TagPrefix(repository) + reference, "", std::move(tag)));
  }
  return digest;
}

base::Status Storage::DeleteManifest(const std::string& repository, const Digest& digest) {
  auto object = store_.Head(options_.bucket, ManifestKey(repository, digest), std::nullopt);
  if (!object.ok()) {
    if (object.error().code == S3Code::kNoSuchKey) {
      return base::NotFoundError("manifest " + digest.ToString() + " of " + repository +
                                 " does not exist");
    }
    return StatusFromS3(object.error());
  }
  std::vector<std::string> tags;
  SOVAI_RETURN_IF_ERROR(
      ForEachObject(TagPrefix(repository), kMaxGcManifests, [&](const objstore::ObjectVersion& v) {
        auto tag = store_.Head(options_.bucket, v.key, std::nullopt);
        if (tag.ok() && UserMeta(tag->meta, "digest") == digest.ToString()) tags.push_back(v.key);
        return base::Status();
      }));
  if (!tags.empty()) {
    SOVAI_ASSIGN_OR_RETURN(RepositorySettings settings, GetSettings(repository));
    if (settings.immutable_tags) {
      return base::PermissionDeniedError("manifest " + digest.ToString() + " of " + repository +
                                         " is tagged and the repository's tags are immutable");
    }
  }
  for (const std::string& key : tags) {
    SOVAI_REG_S3(objstore::DeleteResult r, store_.Delete(options_.bucket, key, std::nullopt));
    (void)r;
  }
  SOVAI_REG_S3(objstore::DeleteResult r,
               store_.Delete(options_.bucket, ManifestKey(repository, digest), std::nullopt));
  (void)r;
  return base::Status();
}

base::Status Storage::DeleteTag(const std::string& repository, const std::string& tag) {
  SOVAI_RETURN_IF_ERROR(ValidateTag(tag));
  auto head = store_.Head(options_.bucket, TagPrefix(repository) + tag, std::nullopt);
  if (!head.ok()) {
    if (head.error().code == S3Code::kNoSuchKey) {
      return base::NotFoundError("tag " + tag + " of " + repository + " does not exist");
    }
    return StatusFromS3(head.error());
  }
  SOVAI_ASSIGN_OR_RETURN(RepositorySettings settings, GetSettings(repository));
  if (settings.immutable_tags) {
    return base::PermissionDeniedError("tag " + tag + " of " + repository +
                                       " cannot be deleted: the repository's tags are immutable");
  }
  SOVAI_REG_S3(objstore::DeleteResult r,
               store_.Delete(options_.bucket, TagPrefix(repository) + tag, std::nullopt));
  (void)r;
  return base::Status();
}

base::Result<ResolvedImage> Storage::ResolveImage(const std::string& repository,
                                                  const std::string& reference, std::string_view os,
                                                  std::string_view architecture) {
  ResolvedImage out;
  out.repository = repository;
  SOVAI_ASSIGN_OR_RETURN(StoredManifest stored, GetManifest(repository, reference));
  out.digest = stored.digest;
  SOVAI_ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(stored.bytes, stored.media_type));
  if (manifest.index) {
    SOVAI_ASSIGN_OR_RETURN(Descriptor chosen, SelectPlatform(manifest, os, architecture));
    SOVAI_ASSIGN_OR_RETURN(stored, GetManifest(repository, chosen.digest.ToString()));
    SOVAI_ASSIGN_OR_RETURN(manifest, ParseManifest(stored.bytes, stored.media_type));
    if (manifest.index) {
      return base::FailedPreconditionError("manifest " + stored.digest.ToString() + " of " +
                                           repository + " is an index inside an index");
    }
  }
  out.manifest_digest = stored.digest;
  out.manifest_key = ManifestKey(repository, stored.digest);
  const std::string project(ProjectOf(repository));
  for (const Descriptor& d : manifest.blobs()) {
    auto blob = StatBlob(project, d.digest);
    if (!blob.ok()) {
      return blob.status().WithContext(repository + "@" + stored.digest.ToString());
    }
    ResolvedBlob resolved{d, blob->data_key};
    if (manifest.config && d.digest == manifest.config->digest && out.config.key.empty()) {
      out.config = std::move(resolved);
    } else {
      out.layers.push_back(std::move(resolved));
    }
  }
  if (out.config.key.empty()) {
    return base::FailedPreconditionError("manifest " + stored.digest.ToString() + " of " +
                                         repository + " has no image config");
  }
  return out;
}

base::Result<RepositorySettings> Storage::GetSettings(const std::string& repository) {
  RepositorySettings settings;
  auto object = store_.Head(options_.bucket, SettingsKey(repository), std::nullopt);
  if (!object.ok()) {
    if (object.error().code == S3Code::kNoSuchKey) return settings;
    return StatusFromS3(object.error());
  }
  SOVAI_ASSIGN_OR_RETURN(std::string bytes, ReadSmall(*object, kMaxManifestBytes));
  auto doc = base::ParseJson(bytes);
  if (!doc.ok() || !doc->is_object()) {
    return base::DataLossError("the settings of " + repository + " do not parse");
  }
  settings.immutable_tags = doc->value("immutable_tags", false);
  return settings;
}

base::Status Storage::SetSettings(const std::string& repository,
                                  const RepositorySettings& settings) {
  SOVAI_RETURN_IF_ERROR(ValidateRepositoryName(repository));
  nlohmann::json doc = {{"immutable_tags", settings.immutable_tags}};
  objstore::ObjectMeta meta;
  meta.content_type = "application/json";
  return PutSmall(SettingsKey(repository), base::DumpJson(doc), std::move(meta));
}

base::Result<ListPage> Storage::ListTags(const std::string& repository, const std::string& last,
                                         int n) {
  const std::string prefix = TagPrefix(repository);
  ListPage out;
  if (n > 0) {
    objstore::ListOptions list{.prefix = prefix, .delimiter = "/", .max_keys = n};
    if (!last.empty()) list.after = prefix + last;
    SOVAI_REG_S3(objstore::ListResult page, store_.List(options_.bucket, list));
    for (const objstore::ObjectVersion& v : page.objects) {
      out.items.push_back(v.key.substr(prefix.size()));
    }
    out.more = page.truncated;
  }
  if (out.items.empty() && last.empty()) {
    // A repository exists while it holds a manifest (possibly untagged).
    objstore::ListOptions any{.prefix = "repos/" + repository + "/_manifests/", .max_keys = 1};
    SOVAI_REG_S3(objstore::ListResult manifests, store_.List(options_.bucket, any));
    if (manifests.objects.empty()) {
      return base::NotFoundError("repository " + repository + " does not exist");
    }
  }
  return out;
}

base::Result<ListPage> Storage::ListRepositories(const std::optional<std::string>& project,
                                                 const std::string& last, int n) {
  std::set<std::string> names;
  SOVAI_RETURN_IF_ERROR(ForEachObject(project ? "repos/" + *project + "/" : "repos/",
                                      kMaxGcManifests, [&](const objstore::ObjectVersion& v) {
                                        std::string repo = RepositoryOfKey(v.key);
                                        if (!repo.empty() && repo > last) names.insert(repo);
                                        return base::Status();
                                      }));
  ListPage out;
  for (const std::string& name : names) {
    if (static_cast<int>(out.items.size()) == n) {
      out.more = true;
      break;
    }
    out.items.push_back(name);
  }
  return out;
}

base::Result<GcReport> Storage::CollectGarbage(const GcOptions& options) {
  GcReport report;
  report.dry_run = options.dry_run;
  const std::string scope = options.project ? *options.project + "/" : "";
  const int64_t cutoff_us = env_.NowUnixMicros() - options.min_age_s * 1000000;

  // 1. Every blob some manifest references, as "<project> <digest>". Unreadable → stop.
  std::set<std::string> referenced;
  SOVAI_RETURN_IF_ERROR(
      ForEachManifest(scope, "garbage collection",
                      [&](const std::string& repository, const objstore::ObjectVersion&,
                          const Manifest& manifest) -> base::Status {
                        std::string project(ProjectOf(repository));
                        for (const Descriptor& d : manifest.blobs()) {
                          referenced.insert(project + " " + d.digest.ToString());
                        }
                        ++report.manifests_read;
                        return base::Status();
                      }));

  // 2. Links no manifest references, old enough.
  std::set<std::string> kept_data;
  std::vector<std::pair<std::string, std::string>> doomed;  // (link key, data key)
  std::set<std::string> doomed_data;
  SOVAI_RETURN_IF_ERROR(
      ForEachObject("blobs/" + scope, kMaxGcManifests * 8, [&](const objstore::ObjectVersion& v) {
        auto blob = BlobOfKey(v.key);
        if (!blob) return base::Status();
        const auto& [project, digest] = *blob;
        auto link = store_.Head(options_.bucket, v.key, std::nullopt);
        if (!link.ok()) return base::Status();  // removed meanwhile
        std::string data = UserMeta(link->meta, "data").value_or("");
        if (referenced.count(project + " " + digest) || link->mtime_micros > cutoff_us) {
          kept_data.insert(data);
          ++report.kept_blobs;
          return base::Status();
        }
        const uint64_t size = LinkSize(link->meta);
        report.removed.push_back({project, digest, size});
        report.removed_bytes += size;
        doomed.emplace_back(v.key, data);
        doomed_data.insert(data);
        return base::Status();
      }));

  // 3. Data objects no link owns (a crash between the upload's completion and its link).
  SOVAI_RETURN_IF_ERROR(
      ForEachObject("data/" + scope, kMaxGcManifests * 8, [&](const objstore::ObjectVersion& v) {
        if (kept_data.count(v.key) || v.mtime_micros > cutoff_us) return base::Status();
        if (doomed_data.count(v.key)) return base::Status();  // goes with its link
        std::string_view rest = std::string_view(v.key).substr(5);
        report.removed.push_back({std::string(rest.substr(0, rest.find('/'))), "", v.size});
        report.removed_bytes += v.size;
        doomed.emplace_back("", v.key);
        return base::Status();
      }));

  if (!options.dry_run) {
    for (const auto& [link, data] : doomed) {
      for (const std::string& key : {link, data}) {
        if (key.empty()) continue;
        auto r = store_.Delete(options_.bucket, key, std::nullopt);
        if (!r.ok()) return StatusFromS3(r.error());
      }
    }
  }
  return report;
}

base::Status Storage::ForEachManifest(
    const std::string& scope, std::string_view what,
    const std::function<base::Status(const std::string& repository,
                                     const objstore::ObjectVersion& version,
                                     const Manifest& manifest)>& fn) {
  return ForEachObject(
      "repos/" + scope, kMaxGcManifests, [&](const objstore::ObjectVersion& v) -> base::Status {
        if (v.key.find("/_manifests/") == std::string::npos) return base::Status();
        SOVAI_ASSIGN_OR_RETURN(objstore::ObjectVersion full,
                               [&]() -> base::Result<objstore::ObjectVersion> {
                                 auto h = store_.Head(options_.bucket, v.key, std::nullopt);
                                 if (!h.ok()) return StatusFromS3(h.error());
                                 return *h;
                               }());
        SOVAI_ASSIGN_OR_RETURN(std::string bytes, ReadSmall(full, kMaxManifestBytes));
        auto manifest = ParseManifest(bytes, full.meta.content_type);
        if (!manifest.ok()) {
          return base::DataLossError(std::string(what) + " stopped: manifest " + v.key +
                                     " does not parse: " + manifest.status().message());
        }
        return fn(RepositoryOfKey(v.key), full, *manifest);
      });
}

base::Result<std::vector<RepositoryUsage>> Storage::Usage() {
  // (project, repository) → bytes; a blob's bytes go to the first repository referencing it.
  std::map<std::pair<std::string, std::string>, uint64_t> bytes;
  std::map<std::string, std::string> owner;  // "<project> <digest>" → repository
  SOVAI_RETURN_IF_ERROR(
      ForEachManifest("", "measuring the registry's usage",
                      [&](const std::string& repository, const objstore::ObjectVersion& v,
                          const Manifest& manifest) -> base::Status {
                        std::string project(ProjectOf(repository));
                        bytes[{project, repository}] += v.size;
                        for (const Descriptor& d : manifest.blobs()) {
                          owner.try_emplace(project + " " + d.digest.ToString(), repository);
                        }
                        return base::Status();
                      }));
  std::set<std::string> linked_data;
  SOVAI_RETURN_IF_ERROR(
      ForEachObject("blobs/", kMaxGcManifests * 8, [&](const objstore::ObjectVersion& v) {
        auto blob = BlobOfKey(v.key);
        if (!blob) return base::Status();
        const auto& [project, digest] = *blob;
        auto link = store_.Head(options_.bucket, v.key, std::nullopt);
        if (!link.ok()) return base::Status();  // removed meanwhile
        linked_data.insert(UserMeta(link->meta, "data").value_or(""));
        const uint64_t size = LinkSize(link->meta);
        auto it = owner.find(project + " " + digest);
        bytes[{project, it == owner.end() ? "" : it->second}] += size;
        return base::Status();
      }));
  SOVAI_RETURN_IF_ERROR(
      ForEachObject("data/", kMaxGcManifests * 8, [&](const objstore::ObjectVersion& v) {
        if (linked_data.count(v.key)) return base::Status();
        std::string_view rest = std::string_view(v.key).substr(5);
        bytes[{std::string(rest.substr(0, rest.find('/'))), ""}] += v.size;
        return base::Status();
      }));
  std::vector<RepositoryUsage> out;
  for (const auto& [key, n] : bytes) {
    if (n > 0) out.push_back({key.first, key.second, n});
  }
  return out;
}

}  // namespace sovai::registry
