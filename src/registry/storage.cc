#include "registry/storage.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <utility>

#include "base/check.h"
#include "base/crypto.h"
#include "base/log.h"
#include "base/ulid.h"
#include "registry/manifest.h"

namespace sovai::registry {
namespace {

using objstore::S3Code;

// The keys of docs/formats/registry.md.
std::string BlobKey(std::string_view project, const Digest& d) {
  return "blobs/" + std::string(project) + "/" + d.algorithm + "/" + d.hex;
}
std::string DataKey(std::string_view project, std::string_view upload_id) {
  return "data/" + std::string(project) + "/" + std::string(upload_id);
}
std::optional<std::string> UserMeta(const objstore::ObjectMeta& meta, std::string_view name) {
  for (const auto& [k, v] : meta.user) {
    if (k == name) return v;
  }
  return std::nullopt;
}

// A body held in memory, for the small objects (links, tags, manifests).
class StringBody final : public net::BodyReader {
 public:
  explicit StringBody(std::string_view data) : data_(data) {}
  base::Result<size_t> Read(char* buf, size_t n) override {
    size_t k = std::min(n, data_.size() - pos_);
    std::copy_n(data_.data() + pos_, k, buf);
    pos_ += k;
    return k;
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

// Feeds every byte of a chunk to the upload's hashers on its way to the object store.
class HashingBody final : public net::BodyReader {
 public:
  HashingBody(net::BodyReader& inner, base::Hasher& sha256, base::Hasher& sha512)
      : inner_(inner), sha256_(sha256), sha512_(sha512) {}
  base::Result<size_t> Read(char* buf, size_t n) override {
    SOVAI_ASSIGN_OR_RETURN(size_t got, inner_.Read(buf, n));
    sha256_.Update({buf, got});
    sha512_.Update({buf, got});
    return got;
  }

 private:
  net::BodyReader& inner_;
  base::Hasher& sha256_;
  base::Hasher& sha512_;
};

std::string NewUploadId() {
  // Random, not guessable: the id is the upload's only name in its URL.
  return base::HexEncode(base::RandomBytes(16));
}

}  // namespace

base::Status StatusFromS3(const objstore::S3Error& error) {
  std::string message = std::string(error.name()) + ": " + error.message;
  switch (error.code) {
    case S3Code::kNoSuchKey:
    case S3Code::kNoSuchUpload:
    case S3Code::kNoSuchBucket:
    case S3Code::kNoSuchVersion:
      return base::NotFoundError(message);
    case S3Code::kEntityTooLarge:
    case S3Code::kTooManyParts:
      return base::ResourceExhaustedError(message);
    case S3Code::kIncompleteBody:
    case S3Code::kRequestTimeout:
      return base::UnavailableError(message);
    case S3Code::kInvalidArgument:
    case S3Code::kInvalidRequest:
      return base::InvalidArgumentError(message);
    default:
      return base::InternalError(message);
  }
}

#define SOVAI_REG_S3(lhs, expr)                                   \
  auto SOVAI_S3_CONCAT(s3r_, __LINE__) = (expr);                  \
  if (!SOVAI_S3_CONCAT(s3r_, __LINE__).ok())                      \
    return StatusFromS3(SOVAI_S3_CONCAT(s3r_, __LINE__).error()); \
  lhs = std::move(SOVAI_S3_CONCAT(s3r_, __LINE__)).value()

#define SOVAI_REG_S3_STATUS(expr)              \
  do {                                         \
    ::sovai::objstore::S3Status s3s_ = (expr); \
    if (s3s_) return StatusFromS3(*s3s_);      \
  } while (0)

struct Storage::Session {
  std::string id;
  std::string repository;
  std::string project;
  objstore::UploadInfo upload;
  uint64_t offset = 0;
  std::vector<objstore::CompletePart> parts;
  base::Hasher sha256{base::HashAlgorithm::kSha256};
  base::Hasher sha512{base::HashAlgorithm::kSha512};
  int64_t last_used_us = 0;
  bool busy = false;  // a chunk or the finish is in progress (guarded by Storage::mu_)
};

Storage::Storage(objstore::Store& store, base::Env& env, StorageOptions options)
    : store_(store), env_(env), options_(std::move(options)) {}

Storage::~Storage() = default;

base::Result<std::unique_ptr<Storage>> Storage::Open(objstore::Store& store, base::Env& env,
                                                     StorageOptions options) {
  auto bucket = store.GetBucket(options.bucket);
  if (!bucket.ok()) {
    if (bucket.error().code != S3Code::kNoSuchBucket) return StatusFromS3(bucket.error());
    auto created = store.CreateBucket(options.bucket, options.owner);
    if (!created.ok() && created.error().code != S3Code::kBucketAlreadyOwnedByYou) {
      return StatusFromS3(created.error());
    }
  }
  return std::unique_ptr<Storage>(new Storage(store, env, std::move(options)));
}

base::Status Storage::PutSmall(const std::string& key, std::string_view bytes,
                               objstore::ObjectMeta meta) {
  StringBody body(bytes);
  SOVAI_REG_S3(objstore::StagedData staged, store_.Stage(body, {.max_size = kMaxManifestBytes}));
  SOVAI_REG_S3(
      objstore::ObjectVersion version,
      store_.Put(
          {.bucket = options_.bucket, .key = key, .owner = options_.owner, .meta = std::move(meta)},
          std::move(staged)));
  (void)version;
  return base::Status();
}

base::Result<std::string> Storage::ReadSmall(const objstore::ObjectVersion& version, uint64_t max) {
  if (version.size > max) {
    return base::ResourceExhaustedError("object " + version.key + " is larger than expected");
  }
  SOVAI_REG_S3(std::unique_ptr<objstore::ObjectReader> reader,
               store_.Open(version, 0, version.size));
  std::string out(version.size, '\0');
  size_t at = 0;
  while (at < out.size()) {
    SOVAI_ASSIGN_OR_RETURN(size_t n, reader->Read(out.data() + at, out.size() - at));
    if (n == 0) return base::DataLossError("object " + version.key + " ended early");
    at += n;
  }
  return out;
}

base::Status Storage::ForEachObject(
    const std::string& prefix, size_t max_objects,
    const std::function<base::Status(const objstore::ObjectVersion&)>& fn) {
  objstore::ListOptions list{.prefix = prefix, .max_keys = 1000};
  size_t seen = 0;
  for (;;) {
    SOVAI_REG_S3(objstore::ListResult page, store_.List(options_.bucket, list));
    for (const objstore::ObjectVersion& v : page.objects) {
      if (++seen > max_objects) {
        return base::ResourceExhaustedError("more than " + std::to_string(max_objects) +
                                            " objects under " + prefix);
      }
      SOVAI_RETURN_IF_ERROR(fn(v));
    }
    if (!page.truncated) return base::Status();
    list.after = page.next_marker;
  }
}

// --- Blobs -------------------------------------------------------------------------------------

base::Result<BlobInfo> Storage::StatBlob(std::string_view project, const Digest& digest) {
  auto link = store_.Head(options_.bucket, BlobKey(project, digest), std::nullopt);
  if (!link.ok()) {
    if (link.error().code == S3Code::kNoSuchKey) {
      return base::NotFoundError("blob " + digest.ToString() + " is not in project " +
                                 std::string(project));
    }
    return StatusFromS3(link.error());
  }
  BlobInfo info;
  info.digest = digest;
  info.data_key = UserMeta(link->meta, "data").value_or("");
  std::string size = UserMeta(link->meta, "size").value_or("");
  auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), info.size);
  info.mtime_us = link->mtime_micros;
  if (info.data_key.empty() || size.empty() || ec != std::errc() ||
      end != size.data() + size.size()) {
    return base::DataLossError("the link of blob " + digest.ToString() + " is incomplete");
  }
  return info;
}

base::Result<std::unique_ptr<objstore::ObjectReader>> Storage::OpenBlob(const BlobInfo& blob,
                                                                        uint64_t offset,
                                                                        uint64_t length) {
  SOVAI_REG_S3(objstore::ObjectVersion data,
               store_.Head(options_.bucket, blob.data_key, std::nullopt));
  if (data.size != blob.size) {
    return base::DataLossError("blob " + blob.digest.ToString() + " has " +
                               std::to_string(data.size) + " bytes, its link says " +
                               std::to_string(blob.size));
  }
  SOVAI_REG_S3(std::unique_ptr<objstore::ObjectReader> reader, store_.Open(data, offset, length));
  return reader;
}

base::Status Storage::DeleteBlob(std::string_view project, const Digest& digest) {
  SOVAI_ASSIGN_OR_RETURN(BlobInfo blob, StatBlob(project, digest));
  SOVAI_REG_S3(objstore::DeleteResult a,
               store_.Delete(options_.bucket, BlobKey(project, digest), std::nullopt));
  SOVAI_REG_S3(objstore::DeleteResult b,
               store_.Delete(options_.bucket, blob.data_key, std::nullopt));
  (void)a;
  (void)b;
  return base::Status();
}

// --- Uploads -----------------------------------------------------------------------------------

base::Result<UploadStatus> Storage::StartUpload(const std::string& repository) {
  {
    std::lock_guard lock(mu_);
    if (sessions_.size() >= kMaxOpenUploads) {
      return base::ResourceExhaustedError("the registry has " + std::to_string(kMaxOpenUploads) +
                                          " uploads open; retry later");
    }
  }
  auto session = std::make_shared<Session>();
  session->id = NewUploadId();
  session->repository = repository;
  session->project = std::string(ProjectOf(repository));
  SOVAI_REG_S3(session->upload,
               store_.CreateUpload(options_.bucket, DataKey(session->project, session->id),
                                   options_.owner, {}, ""));
  session->last_used_us = env_.NowUnixMicros();
  std::lock_guard lock(mu_);
  sessions_[session->id] = session;
  return UploadStatus{session->id, repository, 0};
}

base::Result<std::shared_ptr<Storage::Session>> Storage::FindSession(const std::string& repository,
                                                                     const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->repository != repository) {
    return base::NotFoundError("upload " + id.substr(0, 64) + " of " + repository +
                               " is unknown, finished, cancelled or expired; start a new one");
  }
  return it->second;
}

void Storage::EndSession(const std::string& id, bool abort) {
  std::shared_ptr<Session> session;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    session = it->second;
    sessions_.erase(it);
  }
  if (abort) {
    if (objstore::S3Status st = store_.AbortUpload(session->upload);
        st && st->code != S3Code::kNoSuchUpload) {
      SOVAI_LOG(WARNING) << "registry: aborting upload " << id << ": " << st->ToString();
    }
  }
}

base::Result<UploadStatus> Storage::GetUpload(const std::string& repository,
                                              const std::string& id) {
  SOVAI_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(repository, id));
  std::lock_guard lock(mu_);
  return UploadStatus{s->id, s->repository, s->offset};
}

base::Result<UploadStatus> Storage::AppendUpload(const std::string& repository,
                                                 const std::string& id, net::BodyReader& body,
                                                 std::optional<uint64_t> start) {
  SOVAI_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(repository, id));
  {
    std::lock_guard lock(mu_);
    if (s->busy) {
      return base::FailedPreconditionError("upload " + id +
                                           " is receiving another chunk; send chunks in order");
    }
    if (start && *start != s->offset) {
      return base::OutOfRangeError("the chunk starts at byte " + std::to_string(*start) +
                                   " but the upload has " + std::to_string(s->offset) +
                                   " bytes; resume from there");
    }
    if (static_cast<int>(s->parts.size()) >= kMaxUploadChunks) {
      return base::ResourceExhaustedError("an upload takes at most " +
                                          std::to_string(kMaxUploadChunks) + " chunks");
    }
    s->busy = true;
  }
  HashingBody hashing(body, s->sha256, s->sha512);
  uint64_t room = options_.max_blob_bytes - s->offset;
  auto staged = store_.Stage(hashing, {.max_size = room, .allow_inline = false});
  if (!staged.ok()) {
    // The hashers have seen part of this chunk: the upload cannot continue.
    EndSession(id, /*abort=*/true);
    base::Status st = StatusFromS3(staged.error());
    if (st.code() == base::StatusCode::kResourceExhausted) {
      return base::ResourceExhaustedError("a blob may have at most " +
                                          std::to_string(options_.max_blob_bytes) + " bytes");
    }
    return st;
  }
  if (staged->size == 0) {
    store_.Discard(*staged);
    std::lock_guard lock(mu_);
    s->busy = false;
    s->last_used_us = env_.NowUnixMicros();
    return UploadStatus{s->id, s->repository, s->offset};
  }
  int part_number = static_cast<int>(s->parts.size()) + 1;
  uint64_t size = staged->size;
  auto part = store_.UploadPart(s->upload, part_number, std::move(*staged), {});
  if (!part.ok()) {
    EndSession(id, /*abort=*/true);
    return StatusFromS3(part.error());
  }
  std::lock_guard lock(mu_);
  s->parts.push_back({part_number, part->etag});
  s->offset += size;
  s->busy = false;
  s->last_used_us = env_.NowUnixMicros();
  return UploadStatus{s->id, s->repository, s->offset};
}

base::Result<BlobInfo> Storage::FinishUpload(const std::string& repository, const std::string& id,
                                             const Digest& digest) {
  SOVAI_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(repository, id));
  {
    std::lock_guard lock(mu_);
    if (s->busy) {
      return base::FailedPreconditionError("upload " + id + " is receiving a chunk");
    }
    s->busy = true;
  }
  base::Hasher& hasher = digest.algorithm == "sha256" ? s->sha256 : s->sha512;
  std::string actual = base::HexEncode(hasher.Finish());
  if (actual != digest.hex) {
    EndSession(id, /*abort=*/true);
    return base::DataLossError("the upload's " + std::to_string(s->offset) + " bytes have digest " +
                               digest.algorithm + ":" + actual + ", not " + digest.ToString());
  }
  std::string data_key = DataKey(s->project, s->id);
  if (s->parts.empty()) {
    // An empty blob: a multipart upload needs a part, so store the empty object directly.
    EndSession(id, /*abort=*/true);
    SOVAI_RETURN_IF_ERROR(PutSmall(data_key, "", {}));
  } else {
    objstore::PutOptions complete{.bucket = options_.bucket, .key = data_key};
    complete.min_part_size = 0;  // chunks come in any size
    auto done = store_.CompleteUpload(s->upload, s->parts, complete);
    EndSession(id, /*abort=*/!done.ok());
    if (!done.ok()) return StatusFromS3(done.error());
  }
  if (auto existing = StatBlob(s->project, digest); existing.ok()) {
    // Pushed before: keep the blob that manifests may already reference, drop the new copy.
    auto dropped = store_.Delete(options_.bucket, data_key, std::nullopt);
    if (!dropped.ok()) SOVAI_LOG(WARNING) << "registry: " << dropped.error().ToString();
    return *existing;
  }
  objstore::ObjectMeta link;
  link.user = {{"data", data_key}, {"size", std::to_string(s->offset)}};
  SOVAI_RETURN_IF_ERROR(PutSmall(BlobKey(s->project, digest), "", std::move(link)));
  return StatBlob(s->project, digest);
}

base::Status Storage::CancelUpload(const std::string& repository, const std::string& id) {
  SOVAI_ASSIGN_OR_RETURN(std::shared_ptr<Session> s, FindSession(repository, id));
  (void)s;
  EndSession(id, /*abort=*/true);
  return base::Status();
}

size_t Storage::open_uploads() {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

size_t Storage::ReclaimExpiredUploads(int64_t now_us) {
  const int64_t cutoff_us = now_us - options_.upload_timeout_s * 1000000;
  std::vector<std::string> expired;
  std::set<std::string> owned;  // multipart upload ids of the open sessions
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, s] : sessions_) {
      if (!s->busy && s->last_used_us < cutoff_us) {
        expired.push_back(id);
      } else {
        owned.insert(s->upload.upload_id);
      }
    }
  }
  for (const std::string& id : expired) EndSession(id, /*abort=*/true);
  size_t reclaimed = expired.size();
  // Multipart uploads of an earlier process (a crash or restart): no session owns them.
  objstore::ListUploadsOptions list{.prefix = "data/", .max_uploads = 1000};
  for (int page = 0; page < 100; ++page) {
    bool truncated = false;
    auto uploads = store_.ListUploads(options_.bucket, list, &truncated);
    if (!uploads.ok()) {
      SOVAI_LOG(WARNING) << "registry: listing uploads: " << uploads.error().ToString();
      break;
    }
    for (const objstore::UploadInfo& u : *uploads) {
      if (owned.count(u.upload_id) || u.created_micros >= cutoff_us) continue;
      std::lock_guard lock(mu_);
      bool now_owned = std::any_of(sessions_.begin(), sessions_.end(), [&](const auto& kv) {
        return kv.second->upload.upload_id == u.upload_id;
      });
      if (now_owned) continue;
      if (!store_.AbortUpload(u)) ++reclaimed;
    }
    if (!truncated || uploads->empty()) break;
    list.key_marker = uploads->back().key;
    list.upload_id_marker = uploads->back().upload_id;
  }
  return reclaimed;
}

}  // namespace sovai::registry
