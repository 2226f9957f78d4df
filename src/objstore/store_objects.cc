// The storage engine's objects: staging, writes, reads (verified block by block), deletes and
// metadata edits (see store.h and docs/formats/objstore.md).
#include <algorithm>
#include <cstring>

#include "base/crc.h"
#include "base/crypto.h"
#include "objstore/internal/store_impl.h"

namespace sovai::objstore::store_internal {

using base::Result;
using base::Status;
using nlohmann::json;

namespace {

constexpr size_t kStageChunkBytes = 1 << 20;

// Incremental computation of the digests a PUT asks for.
class Digests {
 public:
  explicit Digests(uint32_t bits) : bits_(bits), md5_(base::HashAlgorithm::kMd5) {
    if (bits & kSha1) sha1_.emplace(base::HashAlgorithm::kSha1);
    if (bits & kSha256) sha256_.emplace(base::HashAlgorithm::kSha256);
  }
  void Update(std::string_view data) {
    md5_.Update(data);
    if (bits_ & kCrc32) crc32_ = base::Crc32(data, crc32_);
    if (bits_ & kCrc32c) crc32c_ = base::Crc32c(data, crc32c_);
    if (bits_ & kCrc64Nvme) crc64_ = base::Crc64Nvme(data, crc64_);
    if (sha1_) sha1_->Update(data);
    if (sha256_) sha256_->Update(data);
  }
  void Finish(StagedData& out) {
    out.md5 = md5_.Finish();
    if (bits_ & kCrc32) out.checksums.crc32 = base::Base64Encode(base::ToBigEndianBytes(crc32_));
    if (bits_ & kCrc32c) out.checksums.crc32c = base::Base64Encode(base::ToBigEndianBytes(crc32c_));
    if (bits_ & kCrc64Nvme) {
      out.checksums.crc64nvme = base::Base64Encode(base::ToBigEndianBytes(crc64_));
    }
    if (sha1_) out.checksums.sha1 = base::Base64Encode(sha1_->Finish());
    if (sha256_) out.checksums.sha256 = base::Base64Encode(sha256_->Finish());
    if (!out.checksums.empty()) out.checksums.type = "FULL_OBJECT";
  }

 private:
  uint32_t bits_;
  base::Hasher md5_;
  std::optional<base::Hasher> sha1_, sha256_;
  uint32_t crc32_ = 0, crc32c_ = 0;
  uint64_t crc64_ = 0;
};

S3Error BodyReadError(const Status& st) {
  switch (st.code()) {
    case base::StatusCode::kResourceExhausted:
      return S3Error(S3Code::kEntityTooLarge, st.message());
    case base::StatusCode::kDeadlineExceeded:
      return S3Error(S3Code::kRequestTimeout,
                     "Your socket connection to the server was not read from or written to "
                     "within the timeout period. (" +
                         st.message() + ")");
    case base::StatusCode::kUnavailable:
      return S3Error(S3Code::kIncompleteBody, st.message());
    case base::StatusCode::kInvalidArgument:
      return S3Error(S3Code::kInvalidRequest, st.message());
    default:
      return S3ErrorFromStatus(st);
  }
}
}  // namespace

S3Result<StagedData> StoreImpl::Stage(net::BodyReader& body, const StageOptions& options) {
  StagedData staged;
  Digests digests(options.checksums);
  const uint64_t inline_max = options.allow_inline ? opts_.inline_max_bytes : 0;
  std::string buffer;
  std::unique_ptr<DataFileWriter> file;
  // One buffer per worker thread, allocated once and never zero-filled: a fresh 1 MiB buffer per
  // PUT (mmap, memset, page faults, munmap) was the largest cost of small PUTs.
  thread_local std::unique_ptr<char[]> chunk_buffer(new char[kStageChunkBytes]);
  char* chunk = chunk_buffer.get();
  auto fail = [&](S3Error e) -> S3Result<StagedData> {
    if (file) (void)opts_.env->DeleteFile(TmpPath(staged.data_id));
    return e;
  };
  for (;;) {
    Result<size_t> n = body.Read(chunk, kStageChunkBytes);
    if (!n.ok()) return fail(BodyReadError(n.status()));
    if (*n == 0) break;
    std::string_view piece(chunk, *n);
    staged.size += *n;
    if (staged.size > options.max_size) {
      return fail(S3Error(S3Code::kEntityTooLarge,
                          "Your proposed upload exceeds the maximum allowed size of " +
                              std::to_string(options.max_size) + " bytes"));
    }
    digests.Update(piece);
    if (!file && buffer.size() + piece.size() <= inline_max) {
      buffer.append(piece);
      continue;
    }
    if (!file) {
      std::string id = ulids_.Next().ToString();
      staged.data_id = Lowercase(id);
      auto created = DataFileWriter::Create(*opts_.env, TmpPath(staged.data_id));
      if (!created.ok()) return S3ErrorFromStatus(created.status());
      file = std::move(*created);
      if (Status st = file->Append(buffer); !st.ok()) return fail(S3ErrorFromStatus(st));
      buffer.clear();
    }
    if (Status st = file->Append(piece); !st.ok()) return fail(S3ErrorFromStatus(st));
  }
  if (!file && !options.allow_inline) {
    // Parts are always files (they become segments of the completed object).
    staged.data_id = Lowercase(ulids_.Next().ToString());
    auto created = DataFileWriter::Create(*opts_.env, TmpPath(staged.data_id));
    if (!created.ok()) return S3ErrorFromStatus(created.status());
    file = std::move(*created);
    if (Status st = file->Append(buffer); !st.ok()) return fail(S3ErrorFromStatus(st));
    buffer.clear();
  }
  if (file) {
    if (Status st = file->Seal(); !st.ok()) return fail(S3ErrorFromStatus(st));
    // The directory entry must be durable before a committed row names the file.
    if (Status st = opts_.env->SyncDir(tmp_dir_); !st.ok()) return fail(S3ErrorFromStatus(st));
  } else {
    staged.inline_bytes = std::move(buffer);
  }
  digests.Finish(staged);
  return staged;
}

void StoreImpl::Discard(StagedData& staged) {
  if (!staged.consumed && !staged.data_id.empty()) {
    (void)opts_.env->DeleteFile(TmpPath(staged.data_id));
  }
  staged.consumed = true;
}

S3Result<ObjectVersion> StoreImpl::Put(const PutOptions& o, StagedData staged) {
  ObjectVersion v;
  v.bucket = o.bucket;
  v.key = o.key;
  v.size = staged.size;
  v.etag = Quote(base::HexEncode(staged.md5));
  v.mtime_micros = opts_.env->NowUnixMicros();
  v.owner = o.owner;
  v.meta = o.meta;
  v.checksums = o.checksums.value_or(staged.checksums);
  const bool in_file = !staged.data_id.empty();
  if (in_file) v.segments = {{staged.data_id, staged.size}};
  std::optional<std::string> inline_bytes;
  if (!in_file) inline_bytes = std::move(staged.inline_bytes);
  S3Status st = Write([&](Tx& tx) -> S3Status {
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(tx.conn, o.bucket));
    SOVAI_S3_ASSIGN_OR_RETURN(auto current, LatestVersion(tx.conn, o.bucket, o.key));
    SOVAI_S3_RETURN_IF_ERROR(CheckPutConditions(o, current));
    if (in_file) {
      SOVAI_DB_ASSIGN(base::Statement * f,
                      tx.conn.Prep("INSERT INTO files(data_id, size) VALUES (?, ?)"));
      f->Bind(1, staged.data_id).Bind(2, static_cast<int64_t>(staged.size));
      SOVAI_DB(f->Run());
      tx.commit_files.push_back(staged.data_id);
    }
    return InsertVersion(tx, b, v, inline_bytes);
  });
  staged.consumed = true;
  if (st) {
    if (in_file) (void)opts_.env->DeleteFile(TmpPath(staged.data_id));
    return *st;
  }
  return v;
}

S3Result<ObjectVersion> StoreImpl::Head(const std::string& bucket, const std::string& key,
                                        const std::optional<std::string>& version_id) {
  return Read([&](Conn& c) -> S3Result<ObjectVersion> {
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, GetBucket(bucket));  // cached
    (void)b;
    if (!version_id) {
      SOVAI_S3_ASSIGN_OR_RETURN(auto latest, LatestVersion(c, bucket, key));
      if (!latest) {
        return S3Error(S3Code::kNoSuchKey, "The specified key does not exist.").With("Key", key);
      }
      if (latest->delete_marker) {
        return S3Error(S3Code::kNoSuchKey, "The specified key does not exist.")
            .With("Key", key)
            .With("DeleteMarker", "true")
            .With("VersionId", latest->version_id);
      }
      return std::move(*latest);
    }
    SOVAI_DB_ASSIGN(base::Statement * st,
                    c.Prep("SELECT " + std::string(kVersionColumns) +
                           " FROM versions WHERE bucket = ? AND key = ? AND version_id = ?"));
    st->Bind(1, bucket).Bind(2, key).Bind(3, *version_id);
    SOVAI_DB_ASSIGN(bool row, st->Step());
    if (!row) {
      return S3Error(S3Code::kNoSuchVersion, "The specified version does not exist.")
          .With("Key", key)
          .With("VersionId", *version_id);
    }
    ObjectVersion v = VersionFromRow(*st);
    if (v.delete_marker) {
      // S3 answers 405 for a GET/HEAD of a delete marker by version id.
      return S3Error(S3Code::kMethodNotAllowed,
                     "The specified method is not allowed against this resource.")
          .With("DeleteMarker", "true")
          .With("VersionId", v.version_id);
    }
    return v;
  });
}

S3Result<std::string> StoreImpl::LoadInline(int64_t row_id) {
  return Read([&](Conn& c) -> S3Result<std::string> {
    SOVAI_DB_ASSIGN(base::Statement * st,
                    c.Prep("SELECT inline_data, inline_crc32c FROM versions WHERE id = ?"));
    st->Bind(1, row_id);
    SOVAI_DB_ASSIGN(bool row, st->Step());
    if (!row) return S3Error(S3Code::kNoSuchKey, "The object was deleted while being read.");
    std::string bytes = st->ColumnText(0);
    if (base::Crc32c(bytes) != static_cast<uint32_t>(st->ColumnInt(1))) {
      CountCorruption("inline object row " + std::to_string(row_id) + " fails its checksum");
      return S3Error(S3Code::kInternalError,
                     "The stored object failed its integrity check; it was not served.");
    }
    return bytes;
  });
}

S3Result<std::unique_ptr<ObjectReader>> StoreImpl::Open(const ObjectVersion& version,
                                                        uint64_t offset, uint64_t length) {
  if (offset > version.size || length > version.size - offset) {
    return S3Error(S3Code::kInvalidRange, "The requested range is not satisfiable");
  }
  std::string inline_bytes;
  if (version.inline_data) {
    SOVAI_S3_ASSIGN_OR_RETURN(inline_bytes, LoadInline(version.row_id));
    if (inline_bytes.size() != version.size) {
      CountCorruption("inline object row " + std::to_string(version.row_id) + " has a wrong size");
      return S3Error(S3Code::kInternalError,
                     "The stored object failed its integrity check; it was not served.");
    }
  }
  return std::unique_ptr<ObjectReader>(
      new VersionReader(*this, version, std::move(inline_bytes), offset, length));
}

Result<size_t> VersionReader::Read(char* buf, size_t n) {
  if (pos_ >= end_ || n == 0) return size_t{0};
  n = static_cast<size_t>(std::min<uint64_t>(n, end_ - pos_));
  if (version_.inline_data) {
    std::memcpy(buf, inline_.data() + pos_, n);
    pos_ += n;
    return n;
  }
  // Find the segment holding pos_.
  while (segment_ < version_.segments.size() &&
         pos_ >= segment_start_ + version_.segments[segment_].second) {
    segment_start_ += version_.segments[segment_].second;
    ++segment_;
    file_.reset();
  }
  if (segment_ >= version_.segments.size()) {
    return base::DataLossError("object is shorter than its recorded size");
  }
  const auto& [id, seg_size] = version_.segments[segment_];
  if (!file_) {
    auto opened = DataFileReader::Open(*store_.opts_.env, store_.DataPath(id));
    if (!opened.ok() && opened.status().code() == base::StatusCode::kNotFound) {
      opened =
          DataFileReader::Open(*store_.opts_.env, store_.TmpPath(id));  // committed, not yet moved
    }
    if (!opened.ok()) {
      if (opened.status().code() == base::StatusCode::kDataLoss) {
        store_.CountCorruption(opened.status().message());
      }
      return opened.status();
    }
    file_ = std::move(*opened);
    if (file_->size() != seg_size) {
      store_.CountCorruption("data file " + id + " has a wrong size");
      return base::DataLossError("data file " + id + " has a wrong size");
    }
  }
  uint64_t in_segment = pos_ - segment_start_;
  size_t want = static_cast<size_t>(std::min<uint64_t>(n, seg_size - in_segment));
  Result<size_t> got = file_->ReadAt(in_segment, buf, want);
  if (!got.ok()) {
    if (got.status().code() == base::StatusCode::kDataLoss) {
      store_.CountCorruption(got.status().message());
    }
    return got.status();
  }
  pos_ += *got;
  return *got;
}

S3Result<DeleteResult> StoreImpl::Delete(const std::string& bucket, const std::string& key,
                                         const std::optional<std::string>& version_id,
                                         const VersionGuard& guard) {
  DeleteResult result;
  S3Status st = Write([&](Tx& tx) -> S3Status {
    result = DeleteResult();
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(tx.conn, bucket));
    if (version_id) {
      SOVAI_DB_ASSIGN(base::Statement * st,
                      tx.conn.Prep("SELECT " + std::string(kVersionColumns) +
                                   " FROM versions WHERE bucket = ? AND key = ? AND "
                                   "version_id = ?"));
      st->Bind(1, bucket).Bind(2, key).Bind(3, *version_id);
      SOVAI_DB_ASSIGN(bool row, st->Step());
      if (!row) {
        result.version_id = *version_id;  // deleting what is not there succeeds
        return std::nullopt;
      }
      ObjectVersion v = VersionFromRow(*st);
      st->Reset();
      if (guard) SOVAI_S3_RETURN_IF_ERROR(guard(v));
      SOVAI_S3_RETURN_IF_ERROR(DropVersionRow(tx, v));
      result.version_id = v.version_id;
      result.delete_marker = v.delete_marker;
      if (v.is_latest) {
        // The newest remaining version becomes the latest.
        SOVAI_DB_ASSIGN(base::Statement * promote,
                        tx.conn.Prep("UPDATE versions SET is_latest = 1 WHERE id = (SELECT id "
                                     "FROM versions WHERE bucket = ? AND key = ? ORDER BY id "
                                     "DESC LIMIT 1)"));
        promote->Bind(1, bucket).Bind(2, key);
        SOVAI_DB(promote->Run());
      }
      return std::nullopt;
    }
    if (guard) {
      SOVAI_S3_ASSIGN_OR_RETURN(auto current, LatestVersion(tx.conn, bucket, key));
      if (current) SOVAI_S3_RETURN_IF_ERROR(guard(*current));
    }
    if (b.versioning == Versioning::kUnversioned) {
      SOVAI_S3_ASSIGN_OR_RETURN(auto current, LatestVersion(tx.conn, bucket, key));
      if (current) SOVAI_S3_RETURN_IF_ERROR(DropVersionRow(tx, *current));
      return std::nullopt;
    }
    // Versioned: a delete marker becomes the latest version.
    ObjectVersion marker;
    marker.bucket = bucket;
    marker.key = key;
    marker.delete_marker = true;
    marker.mtime_micros = opts_.env->NowUnixMicros();
    SOVAI_S3_RETURN_IF_ERROR(InsertVersion(tx, b, marker, std::nullopt));
    result.version_id = marker.version_id;
    result.delete_marker = true;
    return std::nullopt;
  });
  if (st) return *st;
  return result;
}

S3Result<ObjectVersion> StoreImpl::UpdateVersion(
    const std::string& bucket, const std::string& key, const std::optional<std::string>& version_id,
    const std::function<S3Status(ObjectVersion&)>& edit) {
  ObjectVersion out;
  S3Status st = Write([&](Tx& tx) -> S3Status {
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(tx.conn, bucket));
    (void)b;
    std::string sql = "SELECT " + std::string(kVersionColumns) +
                      " FROM versions WHERE bucket = ? AND key = ? AND " +
                      (version_id ? "version_id = ?" : "is_latest = 1");
    SOVAI_DB_ASSIGN(base::Statement * sel, tx.conn.Prep(sql));
    sel->Bind(1, bucket).Bind(2, key);
    if (version_id) sel->Bind(3, *version_id);
    SOVAI_DB_ASSIGN(bool row, sel->Step());
    if (!row || (!version_id && sel->ColumnInt(5) != 0)) {
      if (version_id) {
        return S3Error(S3Code::kNoSuchVersion, "The specified version does not exist.")
            .With("Key", key);
      }
      return S3Error(S3Code::kNoSuchKey, "The specified key does not exist.").With("Key", key);
    }
    out = VersionFromRow(*sel);
    sel->Reset();
    if (out.delete_marker) {
      return S3Error(S3Code::kMethodNotAllowed,
                     "The specified method is not allowed against this resource.");
    }
    SOVAI_S3_RETURN_IF_ERROR(edit(out));
    SOVAI_DB_ASSIGN(base::Statement * upd,
                    tx.conn.Prep("UPDATE versions SET meta = ? WHERE id = ?"));
    upd->Bind(1, MetaToJson(out.meta, out.checksums, out.part_sizes, out.part_checksums))
        .Bind(2, out.row_id);
    SOVAI_DB(upd->Run());
    return std::nullopt;
  });
  if (st) return *st;
  return out;
}

}  // namespace sovai::objstore::store_internal

namespace sovai::objstore {

Checksums ComputeChecksums(std::string_view data, uint32_t bits) {
  store_internal::Digests digests(bits);
  digests.Update(data);
  StagedData out;
  digests.Finish(out);
  return out.checksums;
}

}  // namespace sovai::objstore
