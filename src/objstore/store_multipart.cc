// The storage engine's multipart uploads: parts, listing, abort, completion (the parts become the
// object's segments without copying) and the answers kept for retried completions (see store.h).
#include <algorithm>

#include "base/crypto.h"
#include "objstore/internal/store_impl.h"
#include "objstore/multipart_checksum.h"

namespace sovai::objstore::store_internal {

using base::Result;
using base::Status;
using nlohmann::json;

S3Result<UploadInfo> StoreImpl::CreateUpload(const std::string& bucket, const std::string& key,
                                             const std::string& owner, ObjectMeta meta,
                                             std::string checksum_algorithm,
                                             std::string checksum_type) {
  UploadInfo u;
  u.upload_id = RandomAlnum(48);
  u.bucket = bucket;
  u.key = key;
  u.owner = owner;
  u.created_micros = opts_.env->NowUnixMicros();
  u.meta = std::move(meta);
  u.checksum_algorithm = std::move(checksum_algorithm);
  u.checksum_type = std::move(checksum_type);
  S3Status st = Write([&](Tx& tx) -> S3Status {
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(tx.conn, bucket));
    (void)b;
    json j = json::parse(MetaToJson(u.meta, {}, {}));
    if (!u.checksum_algorithm.empty()) j["checksum_algorithm"] = u.checksum_algorithm;
    if (!u.checksum_type.empty()) j["checksum_type"] = u.checksum_type;
    SOVAI_DB_ASSIGN(base::Statement * ins,
                    tx.conn.Prep("INSERT INTO uploads(upload_id, bucket, key, created, owner, "
                                 "meta) VALUES (?, ?, ?, ?, ?, ?)"));
    ins->Bind(1, u.upload_id).Bind(2, bucket).Bind(3, key).Bind(4, u.created_micros);
    ins->Bind(5, owner).Bind(6, DumpJsonLenient(j));
    SOVAI_DB(ins->Run());
    return std::nullopt;
  });
  if (st) return *st;
  return u;
}

S3Result<UploadInfo> StoreImpl::GetUpload(const std::string& bucket, const std::string& key,
                                          const std::string& upload_id) {
  return Read([&](Conn& c) -> S3Result<UploadInfo> {
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(c, bucket));
    (void)b;
    SOVAI_DB_ASSIGN(base::Statement * st,
                    c.Prep("SELECT upload_id, bucket, key, created, owner, meta FROM uploads "
                           "WHERE upload_id = ? AND bucket = ? AND key = ?"));
    st->Bind(1, upload_id).Bind(2, bucket).Bind(3, key);
    SOVAI_DB_ASSIGN(bool row, st->Step());
    if (!row) {
      return S3Error(S3Code::kNoSuchUpload,
                     "The specified upload does not exist. The upload ID may be invalid, or the "
                     "upload may have been aborted or completed.")
          .With("UploadId", upload_id);
    }
    return UploadFromRow(*st);
  });
}

S3Result<PartInfo> StoreImpl::UploadPart(const UploadInfo& upload, int part_number,
                                         StagedData staged, Checksums checksums) {
  SOVAI_CHECK(!staged.data_id.empty()) << "parts are staged with allow_inline = false";
  PartInfo p;
  p.part_number = part_number;
  p.size = staged.size;
  p.etag = Quote(base::HexEncode(staged.md5));
  p.mtime_micros = opts_.env->NowUnixMicros();
  p.checksums = std::move(checksums);
  p.data_id = staged.data_id;
  S3Status st = Write([&](Tx& tx) -> S3Status {
    SOVAI_DB_ASSIGN(base::Statement * up,
                    tx.conn.Prep("SELECT 1 FROM uploads WHERE upload_id = ?"));
    up->Bind(1, upload.upload_id);
    SOVAI_DB_ASSIGN(bool exists, up->Step());
    up->Reset();
    if (!exists) {
      return S3Error(S3Code::kNoSuchUpload,
                     "The specified upload does not exist. The upload ID may be invalid, or the "
                     "upload may have been aborted or completed.")
          .With("UploadId", upload.upload_id);
    }
    SOVAI_DB_ASSIGN(base::Statement * old,
                    tx.conn.Prep("SELECT data_id FROM parts WHERE upload_id = ? AND "
                                 "part_number = ?"));
    old->Bind(1, upload.upload_id).Bind(2, int64_t{part_number});
    SOVAI_DB_ASSIGN(bool replaced, old->Step());
    std::string old_id = replaced ? old->ColumnText(0) : "";
    old->Reset();
    if (replaced) SOVAI_S3_RETURN_IF_ERROR(DropFile(tx, old_id));
    SOVAI_DB_ASSIGN(base::Statement * f,
                    tx.conn.Prep("INSERT INTO files(data_id, size) VALUES (?, ?)"));
    f->Bind(1, p.data_id).Bind(2, static_cast<int64_t>(p.size));
    SOVAI_DB(f->Run());
    SOVAI_DB_ASSIGN(base::Statement * ins,
                    tx.conn.Prep("INSERT OR REPLACE INTO parts(upload_id, part_number, size, "
                                 "etag, mtime, checksums, data_id) VALUES (?, ?, ?, ?, ?, ?, ?)"));
    ins->Bind(1, upload.upload_id).Bind(2, int64_t{part_number});
    ins->Bind(3, static_cast<int64_t>(p.size)).Bind(4, p.etag).Bind(5, p.mtime_micros);
    ins->Bind(6, DumpJsonLenient(ChecksumsToJson(p.checksums))).Bind(7, p.data_id);
    SOVAI_DB(ins->Run());
    tx.commit_files.push_back(p.data_id);
    return std::nullopt;
  });
  if (st) {
    (void)opts_.env->DeleteFile(TmpPath(staged.data_id));
    return *st;
  }
  return p;
}

S3Result<std::vector<PartInfo>> StoreImpl::ListParts(const UploadInfo& upload) {
  return Read([&](Conn& c) -> S3Result<std::vector<PartInfo>> {
    SOVAI_DB_ASSIGN(base::Statement * st,
                    c.Prep("SELECT part_number, size, etag, mtime, checksums, data_id FROM parts "
                           "WHERE upload_id = ? ORDER BY part_number"));
    st->Bind(1, upload.upload_id);
    std::vector<PartInfo> out;
    for (;;) {
      SOVAI_DB_ASSIGN(bool row, st->Step());
      if (!row) break;
      out.push_back(PartFromRow(*st));
    }
    return out;
  });
}

S3Result<std::vector<UploadInfo>> StoreImpl::ListUploads(const std::string& bucket,
                                                         const ListUploadsOptions& o,
                                                         bool* truncated) {
  return Read([&](Conn& c) -> S3Result<std::vector<UploadInfo>> {
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(c, bucket));
    (void)b;
    SOVAI_DB_ASSIGN(base::Statement * st,
                    c.Prep("SELECT upload_id, bucket, key, created, owner, meta FROM uploads "
                           "WHERE bucket = ? AND key >= ? AND (key > ? OR (key = ? AND "
                           "upload_id > ?)) ORDER BY key, created, upload_id LIMIT ?"));
    int limit = std::max(0, o.max_uploads);
    st->Bind(1, bucket).Bind(2, o.prefix).Bind(3, o.key_marker).Bind(4, o.key_marker);
    // Without an upload-id marker, every upload of key_marker itself is skipped too.
    st->Bind(5, o.upload_id_marker.empty() ? std::string("\x7f\x7f") : o.upload_id_marker);
    st->Bind(6, int64_t{limit + 1});
    std::vector<UploadInfo> out;
    *truncated = false;
    for (;;) {
      SOVAI_DB_ASSIGN(bool row, st->Step());
      if (!row) break;
      UploadInfo u = UploadFromRow(*st);
      if (u.key.compare(0, o.prefix.size(), o.prefix) != 0) break;
      if (static_cast<int>(out.size()) == limit) {
        *truncated = true;
        break;
      }
      out.push_back(std::move(u));
    }
    return out;
  });
}

S3Status StoreImpl::AbortUpload(const UploadInfo& upload) {
  return Write([&](Tx& tx) -> S3Status {
    SOVAI_DB_ASSIGN(base::Statement * sel,
                    tx.conn.Prep("SELECT data_id FROM parts WHERE upload_id = ?"));
    sel->Bind(1, upload.upload_id);
    SOVAI_DB_ASSIGN(std::vector<std::string> ids, FirstColumnOfEachRow(*sel));
    SOVAI_DB_ASSIGN(base::Statement * del, tx.conn.Prep("DELETE FROM uploads WHERE upload_id = ?"));
    del->Bind(1, upload.upload_id);
    SOVAI_DB(del->Run());
    if (tx.conn.db().Changes() == 0) {
      return S3Error(S3Code::kNoSuchUpload,
                     "The specified upload does not exist. The upload ID may be invalid, or the "
                     "upload may have been aborted or completed.")
          .With("UploadId", upload.upload_id);
    }
    SOVAI_DB_ASSIGN(base::Statement * delp, tx.conn.Prep("DELETE FROM parts WHERE upload_id = ?"));
    delp->Bind(1, upload.upload_id);
    SOVAI_DB(delp->Run());
    for (const auto& id : ids) SOVAI_S3_RETURN_IF_ERROR(DropFile(tx, id));
    return std::nullopt;
  });
}

namespace {

// The client's declarations about a completed object (PutOptions::expected_*) against it.
S3Status CheckDeclaredObject(const PutOptions& declared, const ObjectVersion& v) {
  if (declared.expected_size && *declared.expected_size != v.size) {
    return S3Error(S3Code::kInvalidRequest, "The x-amz-mp-object-size you specified (" +
                                                std::to_string(*declared.expected_size) +
                                                ") is not the size of the parts you listed (" +
                                                std::to_string(v.size) + ").");
  }
  static constexpr std::pair<const char*, std::string Checksums::*> kFields[] = {
      {"CRC32", &Checksums::crc32},         {"CRC32C", &Checksums::crc32c},
      {"CRC64NVME", &Checksums::crc64nvme}, {"SHA1", &Checksums::sha1},
      {"SHA256", &Checksums::sha256},
  };
  for (const auto& [algorithm, member] : kFields) {
    const std::string& want = declared.expected_checksums.*member;
    if (want.empty()) continue;
    const std::string& have = v.checksums.*member;
    if (have.empty()) {
      return S3Error(S3Code::kInvalidRequest,
                     std::string("The upload was not created with ChecksumAlgorithm ") + algorithm +
                         ", so its " + algorithm +
                         " cannot be checked; create the upload with that algorithm.");
    }
    // S3 answers the composite value with its "-N"; a client may send it with or without.
    const std::string bare = have.substr(0, have.rfind('-'));
    if (want != have && want != bare) {
      return S3Error(S3Code::kBadDigest, std::string("The ") + algorithm +
                                             " you specified did not match the calculated "
                                             "checksum.");
    }
  }
  return std::nullopt;
}

}  // namespace

S3Result<ObjectVersion> StoreImpl::CompleteUpload(const UploadInfo& upload,
                                                  const std::vector<CompletePart>& requested,
                                                  const PutOptions& conditions) {
  ObjectVersion v;
  S3Status st = Write([&](Tx& tx) -> S3Status {
    v = ObjectVersion();
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(tx.conn, upload.bucket));
    SOVAI_DB_ASSIGN(base::Statement * up,
                    tx.conn.Prep("SELECT upload_id, bucket, key, created, owner, meta FROM "
                                 "uploads WHERE upload_id = ?"));
    up->Bind(1, upload.upload_id);
    SOVAI_DB_ASSIGN(bool exists, up->Step());
    if (!exists) {
      return S3Error(S3Code::kNoSuchUpload,
                     "The specified upload does not exist. The upload ID may be invalid, or the "
                     "upload may have been aborted or completed.")
          .With("UploadId", upload.upload_id);
    }
    UploadInfo u = UploadFromRow(*up);
    up->Reset();
    SOVAI_DB_ASSIGN(base::Statement * sel,
                    tx.conn.Prep("SELECT part_number, size, etag, mtime, checksums, data_id FROM "
                                 "parts WHERE upload_id = ? ORDER BY part_number"));
    sel->Bind(1, upload.upload_id);
    std::map<int, PartInfo> stored;
    for (;;) {
      SOVAI_DB_ASSIGN(bool row, sel->Step());
      if (!row) break;
      PartInfo p = PartFromRow(*sel);
      stored.emplace(p.part_number, std::move(p));
    }
    sel->Reset();
    if (requested.empty()) {
      return S3Error(S3Code::kMalformedXML,
                     "You must specify at least one part to complete a multipart upload");
    }
    std::vector<PartInfo> chosen;
    int previous = 0;
    for (size_t i = 0; i < requested.size(); ++i) {
      const CompletePart& r = requested[i];
      if (r.part_number <= previous) {
        return S3Error(S3Code::kInvalidPartOrder,
                       "The list of parts was not in ascending order. The parts list must be "
                       "specified in order by part number.");
      }
      previous = r.part_number;
      auto it = stored.find(r.part_number);
      if (it == stored.end() || UnquoteEtag(it->second.etag) != UnquoteEtag(r.etag)) {
        return S3Error(S3Code::kInvalidPart,
                       "One or more of the specified parts could not be found. The part may not "
                       "have been uploaded, or the specified entity tag may not match the part's "
                       "entity tag.")
            .With("PartNumber", std::to_string(r.part_number))
            .With("ETag", r.etag);
      }
      if (i + 1 < requested.size() && it->second.size < conditions.min_part_size) {
        return S3Error(S3Code::kEntityTooSmall,
                       "Your proposed upload is smaller than the minimum allowed object size: "
                       "every part but the last must be at least 5 MiB.")
            .With("PartNumber", std::to_string(r.part_number))
            .With("ProposedSize", std::to_string(it->second.size))
            .With("MinSizeAllowed", std::to_string(conditions.min_part_size));
      }
      chosen.push_back(it->second);
      stored.erase(it);
    }
    SOVAI_S3_ASSIGN_OR_RETURN(auto current, LatestVersion(tx.conn, upload.bucket, upload.key));
    PutOptions cond = conditions;
    cond.key = upload.key;
    SOVAI_S3_RETURN_IF_ERROR(CheckPutConditions(cond, current));

    std::string md5s;
    for (const auto& p : chosen) {
      auto raw = base::HexDecode(UnquoteEtag(p.etag));
      if (raw.ok()) md5s += *raw;
      v.segments.emplace_back(p.data_id, p.size);
      v.part_sizes.push_back(p.size);
      v.size += p.size;
    }
    v.bucket = upload.bucket;
    v.key = upload.key;
    v.etag = Quote(base::HexEncode(base::Md5(md5s)) + "-" + std::to_string(chosen.size()));
    v.mtime_micros = opts_.env->NowUnixMicros();
    v.owner = u.owner;
    v.meta = u.meta;
    if (!u.checksum_algorithm.empty()) {
      std::vector<MultipartPartChecksum> sums;
      for (const auto& p : chosen) {
        sums.push_back({p.size, p.checksums});
        v.part_checksums.push_back(p.checksums);
      }
      v.checksums = MultipartChecksum(u.checksum_algorithm, u.checksum_type, sums);
    }
    SOVAI_S3_RETURN_IF_ERROR(CheckDeclaredObject(conditions, v));
    // Parts not in the list are released; the chosen ones become the object's segments.
    for (const auto& [n, p] : stored) SOVAI_S3_RETURN_IF_ERROR(DropFile(tx, p.data_id));
    for (const char* sql :
         {"DELETE FROM parts WHERE upload_id = ?", "DELETE FROM uploads WHERE upload_id = ?"}) {
      SOVAI_DB_ASSIGN(base::Statement * del, tx.conn.Prep(sql));
      del->Bind(1, upload.upload_id);
      SOVAI_DB(del->Run());
    }
    SOVAI_S3_RETURN_IF_ERROR(InsertVersion(tx, b, v, std::nullopt));
    // The answer, for a retry of this request (older answers are dropped here).
    SOVAI_DB_ASSIGN(base::Statement * prune,
                    tx.conn.Prep("DELETE FROM completed_uploads WHERE completed < ?"));
    prune->Bind(1, v.mtime_micros - kCompletedUploadRetentionMicros);
    SOVAI_DB(prune->Run());
    SOVAI_DB_ASSIGN(base::Statement * done,
                    tx.conn.Prep("INSERT OR REPLACE INTO completed_uploads(upload_id, bucket, "
                                 "key, version_id, etag, checksums, completed) VALUES (?, ?, ?, "
                                 "?, ?, ?, ?)"));
    done->Bind(1, upload.upload_id).Bind(2, v.bucket).Bind(3, v.key).Bind(4, v.version_id);
    done->Bind(5, v.etag).Bind(6, DumpJsonLenient(ChecksumsToJson(v.checksums)));
    done->Bind(7, v.mtime_micros);
    SOVAI_DB(done->Run());
    return std::nullopt;
  });
  if (st) return *st;
  return v;
}

S3Result<ObjectVersion> StoreImpl::GetCompletedUpload(const std::string& bucket,
                                                      const std::string& key,
                                                      const std::string& upload_id) {
  return Read([&](Conn& c) -> S3Result<ObjectVersion> {
    SOVAI_DB_ASSIGN(base::Statement * st,
                    c.Prep("SELECT version_id, etag, checksums, completed FROM completed_uploads "
                           "WHERE upload_id = ? AND bucket = ? AND key = ? AND completed >= ?"));
    st->Bind(1, upload_id).Bind(2, bucket).Bind(3, key);
    st->Bind(4, opts_.env->NowUnixMicros() - kCompletedUploadRetentionMicros);
    SOVAI_DB_ASSIGN(bool row, st->Step());
    if (!row) {
      return S3Error(S3Code::kNoSuchUpload,
                     "The specified upload does not exist. The upload ID may be invalid, or the "
                     "upload may have been aborted or completed.")
          .With("UploadId", upload_id);
    }
    ObjectVersion v;
    v.bucket = bucket;
    v.key = key;
    v.version_id = st->ColumnText(0);
    v.etag = st->ColumnText(1);
    v.checksums = ChecksumsFromJson(json::parse(st->ColumnText(2), nullptr, false));
    v.mtime_micros = st->ColumnInt(3);
    return v;
  });
}

}  // namespace sovai::objstore::store_internal
