// The registry's storage: blobs, manifests, tags and uploads in one platform bucket of the
// in-process object store, laid out as docs/formats/registry.md describes. It speaks
// base::Status and its own types; the /v2/ error codes are made by the HTTP layer (registry.h).
//
// Invariants:
//   * a blob is visible (StatBlob finds it) only once every byte was received, its digest
//     verified and its link object written; an upload's chunks are an object-store multipart
//     upload, invisible until then;
//   * blobs belong to a project and are shared by its repositories; no project reaches
//     another's (every key starts with the project's name);
//   * a manifest is stored only once every blob it references exists in the project (an index:
//     every manifest it lists exists in the repository), under the digest of its exact bytes;
//   * an upload whose chunk fails midway is cancelled (its hash state has seen part of a chunk);
//     one left without a request for upload_timeout_s is cancelled by ReclaimExpiredUploads.
//
// Errors, by base code:
//   NotFound            unknown blob, manifest, tag, repository or upload;
//   InvalidArgument     malformed manifest, tag or reference (MANIFEST_INVALID, TAG_INVALID);
//   Unimplemented       Docker schema 1 (MANIFEST_INVALID);
//   FailedPrecondition  a manifest names a blob or manifest that does not exist
//                       (MANIFEST_BLOB_UNKNOWN); a second concurrent chunk on one upload;
//   DataLoss            the bytes do not match the digest given (DIGEST_INVALID);
//   OutOfRange          a chunk that does not start where the upload ends (416);
//   ResourceExhausted   a limit of limits.h; others from the object store (Internal).
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "net/http.h"
#include "objstore/store.h"
#include "registry/limits.h"
#include "registry/manifest.h"
#include "registry/names.h"

namespace sovai::registry {

struct StorageOptions {
  std::string bucket = "sovai-registry";
  std::string owner = "sovai-registry";  // the bucket's owner (a user id) in the object store
  int64_t upload_timeout_s = kDefaultUploadTimeoutS;
  uint64_t max_blob_bytes = kMaxBlobBytes;
};

struct BlobInfo {
  Digest digest;
  uint64_t size = 0;
  std::string data_key;  // the object holding the bytes
  int64_t mtime_us = 0;
};

struct UploadStatus {
  std::string id;
  std::string repository;
  uint64_t offset = 0;  // bytes received so far
};

struct StoredManifest {
  Digest digest;
  std::string media_type;
  std::string bytes;
};

struct ListPage {
  std::vector<std::string> items;
  bool more = false;  // more items follow the last one
};

// What a project's registry data occupies, per repository (billing: docs/billing.md). A blob
// shared by several repositories of the project is counted once, in the first of them in name
// order; blobs no manifest references (until gc) and data objects no blob owns count as the
// project's unreferenced bytes (repository "").
struct RepositoryUsage {
  std::string project;     // the project's name, as in repository names
  std::string repository;  // "<project>/<name>"; "" for the unreferenced bytes
  uint64_t bytes = 0;      // manifests and blobs
};

struct GcOptions {
  std::optional<std::string> project;  // nullopt: every project
  bool dry_run = true;
  int64_t min_age_s = kDefaultGcMinAgeS;  // younger blobs are kept whatever references them
};

struct GcReport {
  struct Removed {
    std::string project;
    std::string digest;  // "sha256:..." or "" for an orphaned data object
    uint64_t size = 0;
  };
  std::vector<Removed> removed;  // removed, or that would be with dry_run
  uint64_t removed_bytes = 0;
  uint64_t kept_blobs = 0;
  uint64_t manifests_read = 0;
  bool dry_run = true;
};

// An image as a workload pulls it: what the reference names, and the image manifest run (for an
// index, the one of the platform asked for) with the objects of its config and layers.
struct ResolvedBlob {
  Descriptor descriptor;
  std::string key;  // the object holding its bytes in the registry's bucket
};
struct ResolvedImage {
  std::string repository;
  Digest digest;           // of what the reference names (a manifest or an index)
  Digest manifest_digest;  // of the image manifest run (== digest unless an index)
  std::string manifest_key;
  ResolvedBlob config;
  std::vector<ResolvedBlob> layers;
};

// A repository's settings (docs/formats/registry.md: repos/<repository>/_settings).
struct RepositorySettings {
  // A tag once pushed is never moved to another manifest nor deleted (TAG_INVALID, DENIED).
  bool immutable_tags = false;
};

class Storage {
 public:
  // Creates the bucket when missing. `store` and `env` must outlive the result.
  static base::Result<std::unique_ptr<Storage>> Open(objstore::Store& store, base::Env& env,
                                                     StorageOptions options);
  ~Storage();

  // --- Blobs -----------------------------------------------------------------------------------
  base::Result<BlobInfo> StatBlob(std::string_view project, const Digest& digest);
  base::Result<std::unique_ptr<objstore::ObjectReader>> OpenBlob(const BlobInfo& blob,
                                                                 uint64_t offset, uint64_t length);
  // Removes the blob's link and bytes (a blob a manifest still references is not protected:
  // the caller asked for it by digest).
  base::Status DeleteBlob(std::string_view project, const Digest& digest);

  // --- Uploads ---------------------------------------------------------------------------------
  base::Result<UploadStatus> StartUpload(const std::string& repository);
  base::Result<UploadStatus> GetUpload(const std::string& repository, const std::string& id);
  // Appends `body` as the next chunk. `start`, when given (Content-Range), must equal the
  // current offset (OutOfRange otherwise). A failure while reading cancels the upload.
  base::Result<UploadStatus> AppendUpload(const std::string& repository, const std::string& id,
                                          net::BodyReader& body, std::optional<uint64_t> start);
  // Verifies the received bytes against `digest` and makes the blob visible; the upload ends
  // either way (DataLoss on a mismatch, nothing stored). An existing blob of that digest is kept.
  base::Result<BlobInfo> FinishUpload(const std::string& repository, const std::string& id,
                                      const Digest& digest);
  base::Status CancelUpload(const std::string& repository, const std::string& id);
  // Cancels uploads idle for upload_timeout_s as of `now_us`, also those of an earlier process
  // (multipart uploads under data/ that no open upload owns). Returns how many were cancelled.
  size_t ReclaimExpiredUploads(int64_t now_us);
  size_t open_uploads();

  // --- Manifests and tags ------------------------------------------------------------------
  // `reference` is a tag or a digest.
  base::Result<StoredManifest> GetManifest(const std::string& repository,
                                           const std::string& reference);
  // Verifies and stores; by tag, also points the tag at it (AlreadyExists when the repository's
  // tags are immutable and the tag points at another manifest). Returns the manifest's digest
  // (the reference's algorithm when it is a digest, sha256 otherwise).
  base::Result<Digest> PutManifest(const std::string& repository, const std::string& reference,
                                   std::string_view content_type, const std::string& bytes);
  // The image `reference` (tag or digest) names, with the objects a workload fetches; an index
  // resolves to its manifest for `os`/`architecture` (or the only one that names no platform).
  // NotFound for a missing repository, tag or manifest (and a blob deleted since the push);
  // FailedPrecondition for an index without that platform.
  base::Result<ResolvedImage> ResolveImage(const std::string& repository,
                                           const std::string& reference, std::string_view os,
                                           std::string_view architecture);
  const std::string& bucket() const { return options_.bucket; }
  const std::string& owner() const { return options_.owner; }

  // Settings of a repository (defaults when none were set). Setting them needs no manifest:
  // a repository may be made immutable before its first push.
  base::Result<RepositorySettings> GetSettings(const std::string& repository);
  base::Status SetSettings(const std::string& repository, const RepositorySettings& settings);

  // Deletes the manifest and every tag of the repository that points at it (PermissionDenied
  // when a tag points at it and the repository's tags are immutable).
  base::Status DeleteManifest(const std::string& repository, const Digest& digest);
  // PermissionDenied when the repository's tags are immutable.
  base::Status DeleteTag(const std::string& repository, const std::string& tag);
  // Tags in lexical order, strictly after `last`. NotFound for a repository with no manifest.
  base::Result<ListPage> ListTags(const std::string& repository, const std::string& last, int n);
  // Repositories (of one project, or all) in lexical order, strictly after `last`.
  base::Result<ListPage> ListRepositories(const std::optional<std::string>& project,
                                          const std::string& last, int n);

  // Removes blobs no manifest of their project references (and data objects no blob owns),
  // leaving those younger than min_age_s. A manifest that cannot be read or parsed stops the
  // collection before anything is removed.
  base::Result<GcReport> CollectGarbage(const GcOptions& options);
  // Every project's usage, one entry per repository with data and one for its unreferenced
  // bytes when there are any. A manifest that cannot be read or parsed is an error (DataLoss).
  base::Result<std::vector<RepositoryUsage>> Usage();

 private:
  struct Session;
  Storage(objstore::Store& store, base::Env& env, StorageOptions options);

  base::Status PutSmall(const std::string& key, std::string_view bytes, objstore::ObjectMeta meta);
  base::Result<std::string> ReadSmall(const objstore::ObjectVersion& version, uint64_t max);
  base::Result<std::shared_ptr<Session>> FindSession(const std::string& repository,
                                                     const std::string& id);
  void EndSession(const std::string& id, bool abort);
  // Every manifest of the repositories under repos/<scope>, in key order (so repositories in
  // name order), parsed; one that cannot be read or parsed stops the walk (DataLoss naming
  // `what`).
  base::Status ForEachManifest(
      const std::string& scope, std::string_view what,
      const std::function<base::Status(const std::string& repository,
                                       const objstore::ObjectVersion& version,
                                       const struct Manifest& manifest)>& fn);
  base::Status ForEachObject(const std::string& prefix, size_t max_objects,
                             const std::function<base::Status(const objstore::ObjectVersion&)>& fn);

  objstore::Store& store_;
  base::Env& env_;
  const StorageOptions options_;
  std::mutex mu_;  // guards sessions_
  std::map<std::string, std::shared_ptr<Session>> sessions_;
};

// An S3Error of the object store as a base::Status (NoSuchKey/NoSuchUpload → NotFound, ...).
base::Status StatusFromS3(const objstore::S3Error& error);

}  // namespace sovai::registry
