// The storage engine's buckets: creation, deletion, versioning, and the per-bucket documents with
// their cache (see store.h).
#include "objstore/internal/store_impl.h"

namespace sovai::objstore::store_internal {

using base::Result;
using base::Status;
using nlohmann::json;

S3Result<BucketInfo> StoreImpl::CreateBucket(const std::string& name, const std::string& owner,
                                             const BucketSetup& setup) {
  BucketInfo info;
  info.name = name;
  info.owner = owner;
  info.versioning = setup.versioning;
  info.region = opts_.region;
  info.created_micros = opts_.env->NowUnixMicros();
  S3Status st = Write([&](Tx& tx) -> S3Status {
    SOVAI_DB_ASSIGN(base::Statement * sel,
                    tx.conn.Prep("SELECT owner FROM buckets WHERE name = ?"));
    sel->Bind(1, name);
    SOVAI_DB_ASSIGN(bool row, sel->Step());
    if (row) {
      if (sel->ColumnText(0) == owner) {
        return S3Error(S3Code::kBucketAlreadyOwnedByYou,
                       "Your previous request to create the named bucket succeeded and you "
                       "already own it.")
            .With("BucketName", name);
      }
      return S3Error(S3Code::kBucketAlreadyExists,
                     "The requested bucket name is not available. Please select a different name "
                     "and try again.")
          .With("BucketName", name);
    }
    SOVAI_DB_ASSIGN(base::Statement * ins,
                    tx.conn.Prep("INSERT INTO buckets(name, owner, region, created, versioning) "
                                 "VALUES (?, ?, ?, ?, ?)"));
    ins->Bind(1, name).Bind(2, owner).Bind(3, info.region).Bind(4, info.created_micros);
    ins->Bind(5, static_cast<int64_t>(setup.versioning));
    SOVAI_DB(ins->Run());
    for (const auto& [kind, value] : setup.configs) {
      SOVAI_DB_ASSIGN(base::Statement * cfg,
                      tx.conn.Prep("INSERT OR REPLACE INTO bucket_config(bucket, kind, value) "
                                   "VALUES (?, ?, ?)"));
      cfg->Bind(1, name).Bind(2, kind).Bind(3, value);
      SOVAI_DB(cfg->Run());
    }
    tx.after_commit.push_back([this, info] { CacheBucket(info.name, info); });
    return std::nullopt;
  });
  if (st) return *st;
  return info;
}

S3Result<BucketInfo> StoreImpl::GetBucket(const std::string& name) {
  std::lock_guard lock(buckets_mu_);
  auto it = buckets_.find(name);
  if (it == buckets_.end()) {
    return S3Error(S3Code::kNoSuchBucket, "The specified bucket does not exist")
        .With("BucketName", name);
  }
  return it->second;
}

void StoreImpl::ForgetBucketConfigs(const std::string& name) {
  std::lock_guard lock(configs_mu_);
  configs_.erase(name);
  ++configs_generation_;
}

void StoreImpl::CacheBucket(const std::string& name, std::optional<BucketInfo> info) {
  ForgetBucketConfigs(name);  // a bucket made or deleted has none
  std::lock_guard lock(buckets_mu_);
  if (info) {
    buckets_[name] = std::move(*info);
  } else {
    buckets_.erase(name);
  }
}

S3Result<std::vector<BucketInfo>> StoreImpl::ListBuckets() {
  return Read([&](Conn& c) -> S3Result<std::vector<BucketInfo>> {
    SOVAI_DB_ASSIGN(base::Statement * st,
                    c.Prep("SELECT name, owner, region, created, versioning FROM buckets "
                           "ORDER BY name"));
    std::vector<BucketInfo> out;
    for (;;) {
      SOVAI_DB_ASSIGN(bool row, st->Step());
      if (!row) break;
      out.push_back(BucketFromRow(*st));
    }
    return out;
  });
}

S3Status StoreImpl::DeleteBucket(const std::string& name) {
  return Write([&](Tx& tx) -> S3Status {
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(tx.conn, name));
    (void)b;
    SOVAI_DB_ASSIGN(base::Statement * any,
                    tx.conn.Prep("SELECT 1 FROM versions WHERE bucket = ? LIMIT 1"));
    any->Bind(1, name);
    SOVAI_DB_ASSIGN(bool row, any->Step());
    any->Reset();
    if (row) {
      return S3Error(S3Code::kBucketNotEmpty, "The bucket you tried to delete is not empty")
          .With("BucketName", name);
    }
    // Uploads in progress go with the bucket (S3 deletes a bucket that has some), their parts'
    // files released like an abort's.
    SOVAI_DB_ASSIGN(base::Statement * parts,
                    tx.conn.Prep("SELECT data_id FROM parts WHERE upload_id IN (SELECT upload_id "
                                 "FROM uploads WHERE bucket = ?)"));
    parts->Bind(1, name);
    SOVAI_DB_ASSIGN(std::vector<std::string> files, FirstColumnOfEachRow(*parts));
    for (const auto& id : files) SOVAI_S3_RETURN_IF_ERROR(DropFile(tx, id));
    for (const char* sql :
         {"DELETE FROM parts WHERE upload_id IN (SELECT upload_id FROM uploads WHERE bucket = ?)",
          "DELETE FROM uploads WHERE bucket = ?", "DELETE FROM completed_uploads WHERE bucket = ?",
          "DELETE FROM bucket_config WHERE bucket = ?", "DELETE FROM buckets WHERE name = ?"}) {
      SOVAI_DB_ASSIGN(base::Statement * st, tx.conn.Prep(sql));
      st->Bind(1, name);
      SOVAI_DB(st->Run());
    }
    tx.after_commit.push_back([this, name] { CacheBucket(name, std::nullopt); });
    return std::nullopt;
  });
}

S3Status StoreImpl::SetVersioning(const std::string& bucket, Versioning state) {
  return Write([&](Tx& tx) -> S3Status {
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(tx.conn, bucket));
    // A bucket that has had versioning can be suspended but never goes back to unversioned.
    if (state == Versioning::kUnversioned && b.versioning != Versioning::kUnversioned) {
      return S3Error(S3Code::kInvalidArgument,
                     "a bucket that has had versioning can only be suspended");
    }
    SOVAI_DB_ASSIGN(base::Statement * st,
                    tx.conn.Prep("UPDATE buckets SET versioning = ? WHERE name = ?"));
    st->Bind(1, static_cast<int64_t>(state)).Bind(2, bucket);
    SOVAI_DB(st->Run());
    b.versioning = state;
    tx.after_commit.push_back([this, b] { CacheBucket(b.name, b); });
    return std::nullopt;
  });
}

S3Result<std::optional<std::string>> StoreImpl::GetBucketConfig(const std::string& bucket,
                                                                const std::string& kind) {
  SOVAI_S3_ASSIGN_OR_RETURN(auto docs, GetBucketConfigs(bucket));  // cached
  for (auto& [k, value] : docs) {
    if (k == kind) return std::optional<std::string>(std::move(value));
  }
  return std::optional<std::string>();
}

S3Result<std::vector<std::pair<std::string, std::string>>> StoreImpl::GetBucketConfigs(
    const std::string& bucket) {
  using Configs = std::vector<std::pair<std::string, std::string>>;
  uint64_t generation = 0;
  {
    std::lock_guard lock(configs_mu_);
    if (auto it = configs_.find(bucket); it != configs_.end()) return it->second.docs;
    generation = configs_generation_;
  }
  S3Result<Configs> read = Read([&](Conn& c) -> S3Result<Configs> {
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(c, bucket));
    (void)b;
    SOVAI_DB_ASSIGN(base::Statement * st,
                    c.Prep("SELECT kind, value FROM bucket_config WHERE bucket = ?"));
    st->Bind(1, bucket);
    Configs out;
    for (;;) {
      SOVAI_DB_ASSIGN(bool row, st->Step());
      if (!row) break;
      out.emplace_back(st->ColumnText(0), st->ColumnText(1));
    }
    return out;
  });
  if (read.ok()) {
    std::lock_guard lock(configs_mu_);
    if (configs_generation_ == generation) configs_[bucket] = CachedConfigs{.docs = *read};
  }
  return read;
}

S3Result<Store::ParsedConfig> StoreImpl::GetParsedBucketConfig(const std::string& bucket,
                                                               const std::string& kind,
                                                               const ConfigParser& parse) {
  uint64_t generation = 0;
  {
    std::lock_guard lock(configs_mu_);
    if (auto it = configs_.find(bucket); it != configs_.end()) {
      if (auto p = it->second.parsed.find(kind); p != it->second.parsed.end()) return p->second;
    }
    generation = configs_generation_;
  }
  SOVAI_S3_ASSIGN_OR_RETURN(auto docs, GetBucketConfigs(bucket));
  ParsedConfig parsed;
  for (const auto& [k, value] : docs) {
    if (k != kind) continue;
    SOVAI_S3_ASSIGN_OR_RETURN(parsed, parse(value));
    break;
  }
  std::lock_guard lock(configs_mu_);
  if (auto it = configs_.find(bucket); it != configs_.end() && configs_generation_ == generation) {
    it->second.parsed[kind] = parsed;
  }
  return parsed;
}

S3Status StoreImpl::SetBucketConfig(const std::string& bucket, const std::string& kind,
                                    std::optional<std::string> value) {
  return Write([&](Tx& tx) -> S3Status {
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(tx.conn, bucket));
    (void)b;
    if (value) {
      SOVAI_DB_ASSIGN(base::Statement * st,
                      tx.conn.Prep("INSERT OR REPLACE INTO bucket_config(bucket, kind, value) "
                                   "VALUES (?, ?, ?)"));
      st->Bind(1, bucket).Bind(2, kind).Bind(3, *value);
      SOVAI_DB(st->Run());
    } else {
      SOVAI_DB_ASSIGN(base::Statement * st,
                      tx.conn.Prep("DELETE FROM bucket_config WHERE bucket = ? AND kind = ?"));
      st->Bind(1, bucket).Bind(2, kind);
      SOVAI_DB(st->Run());
    }
    tx.after_commit.push_back([this, bucket] { ForgetBucketConfigs(bucket); });
    return std::nullopt;
  });
}

}  // namespace sovai::objstore::store_internal
