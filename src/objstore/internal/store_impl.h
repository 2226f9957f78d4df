// The storage engine's implementation class and what its files share (store.cc: opening,
// recovery, group commit, transaction helpers, access keys; store_buckets.cc; store_objects.cc;
// store_listings.cc; store_multipart.cc). Private to objstore's store files.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/env.h"
#include "base/log.h"
#include "base/sqlite.h"
#include "base/status.h"
#include "base/strings.h"
#include "base/ulid.h"
#include "objstore/data_file.h"
#include "objstore/store.h"

namespace sovai::objstore::store_internal {

using base::Result;
using base::Status;
using nlohmann::json;

constexpr std::string_view kVersionColumns =
    "id, bucket, key, version_id, is_latest, delete_marker, size, etag, mtime, owner, meta, "
    "inline_data IS NOT NULL, segments";

std::string Lowercase(std::string s);
// n random characters of [A-Za-z0-9].
std::string RandomAlnum(size_t n);
std::string Quote(std::string_view etag);

// The JSON columns of the index (docs/formats/objstore.md).
std::string DumpJsonLenient(const json& j);
json ChecksumsToJson(const Checksums& c);
Checksums ChecksumsFromJson(const json& j);
std::string MetaToJson(const ObjectMeta& m, const Checksums& checksums,
                       const std::vector<uint64_t>& part_sizes,
                       const std::vector<Checksums>& part_checksums = {});
void MetaFromJson(std::string_view text, ObjectMeta& m, Checksums& checksums,
                  std::vector<uint64_t>& part_sizes,
                  std::vector<Checksums>* part_checksums = nullptr);
std::string SegmentsToJson(const std::vector<std::pair<std::string, uint64_t>>& segments);

inline std::string DataShard(const std::string& id) { return id.substr(id.size() - 2); }

// A SQLite connection with its prepared statements.
class Conn {
 public:
  explicit Conn(std::unique_ptr<base::Database> db) : db_(std::move(db)) {}
  base::Database& db() { return *db_; }
  // A prepared statement for `sql`, reset and ready to bind.
  Result<base::Statement*> Prep(std::string_view sql) {
    auto it = stmts_.find(std::string(sql));
    if (it == stmts_.end()) {
      SOVAI_ASSIGN_OR_RETURN(base::Statement st, db_->Prepare(sql));
      it = stmts_.emplace(std::string(sql), std::move(st)).first;
    } else {
      it->second.Reset();
    }
    return &it->second;
  }
  // Resets every statement: a stepped statement keeps its read transaction (and so an old
  // snapshot) open until reset.
  void ResetAll() {
    for (auto& [sql, st] : stmts_) st.Reset();
  }

 private:
  std::unique_ptr<base::Database> db_;
  std::unordered_map<std::string, base::Statement> stmts_;
};

// What a write does to files once its transaction has committed.
struct Tx {
  Conn& conn;
  std::vector<std::string> commit_files;  // tmp/<id> → data/<xx>/<id>
  std::vector<std::string> garbage;       // unlink
  // Run after the commit, before the writer is answered (in-memory caches).
  std::vector<std::function<void()>> after_commit;
};

#define SOVAI_DB(expr)                                                      \
  do {                                                                      \
    ::sovai::base::Status sovai_db_status_ = (expr);                        \
    if (!sovai_db_status_.ok()) return S3ErrorFromStatus(sovai_db_status_); \
  } while (0)
#define SOVAI_DB_ASSIGN(lhs, expr) \
  SOVAI_DB_ASSIGN_IMPL(SOVAI_S3_CONCAT(sovai_db_r_, __LINE__), lhs, expr)
#define SOVAI_DB_ASSIGN_IMPL(tmp, lhs, expr)             \
  auto tmp = (expr);                                     \
  if (!tmp.ok()) return S3ErrorFromStatus(tmp.status()); \
  lhs = std::move(*tmp)

base::Result<std::vector<std::string>> FirstColumnOfEachRow(base::Statement& st);

// Rows as selected by kVersionColumns, the buckets, uploads and parts queries.
ObjectVersion VersionFromRow(const base::Statement& st);
BucketInfo BucketFromRow(const base::Statement& st);
UploadInfo UploadFromRow(const base::Statement& st);
PartInfo PartFromRow(const base::Statement& st);

class StoreImpl;

// Reads the bytes of one version: inline, or across its segments' data files.
class VersionReader final : public ObjectReader {
 public:
  VersionReader(StoreImpl& store, ObjectVersion version, std::string inline_bytes, uint64_t offset,
                uint64_t length)
      : store_(store),
        version_(std::move(version)),
        inline_(std::move(inline_bytes)),
        pos_(offset),
        end_(offset + length) {}
  Result<size_t> Read(char* buf, size_t n) override;

 private:
  StoreImpl& store_;
  ObjectVersion version_;
  std::string inline_;
  uint64_t pos_;
  uint64_t end_;
  size_t segment_ = 0;
  uint64_t segment_start_ = 0;  // object offset of segments[segment_]
  std::unique_ptr<DataFileReader> file_;
};

class StoreImpl final : public Store {
 public:
  explicit StoreImpl(const StoreOptions& o) : opts_(o) {
    if (!opts_.env) opts_.env = &base::Env::Default();
  }
  ~StoreImpl() override {
    {
      std::lock_guard lock(queue_mu_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    if (committer_.joinable()) committer_.join();
  }

  Status Init();

  const std::string& region() const override { return opts_.region; }

  S3Result<BucketInfo> CreateBucket(const std::string& name, const std::string& owner,
                                    const BucketSetup& setup) override;
  S3Result<BucketInfo> GetBucket(const std::string& name) override;
  S3Result<std::vector<BucketInfo>> ListBuckets() override;
  S3Status DeleteBucket(const std::string& name) override;
  S3Status SetVersioning(const std::string& bucket, Versioning state) override;
  S3Result<std::optional<std::string>> GetBucketConfig(const std::string& bucket,
                                                       const std::string& kind) override;
  S3Status SetBucketConfig(const std::string& bucket, const std::string& kind,
                           std::optional<std::string> value) override;
  S3Result<std::vector<std::pair<std::string, std::string>>> GetBucketConfigs(
      const std::string& bucket) override;
  using Store::GetParsedBucketConfig;
  S3Result<ParsedConfig> GetParsedBucketConfig(const std::string& bucket, const std::string& kind,
                                               const ConfigParser& parse) override;

  S3Result<StagedData> Stage(net::BodyReader& body, const StageOptions& options) override;
  void Discard(StagedData& staged) override;
  S3Result<ObjectVersion> Put(const PutOptions& options, StagedData staged) override;
  S3Result<ObjectVersion> Head(const std::string& bucket, const std::string& key,
                               const std::optional<std::string>& version_id) override;
  S3Result<std::unique_ptr<ObjectReader>> Open(const ObjectVersion& version, uint64_t offset,
                                               uint64_t length) override;
  S3Result<DeleteResult> Delete(const std::string& bucket, const std::string& key,
                                const std::optional<std::string>& version_id,
                                const VersionGuard& guard) override;
  S3Result<ObjectVersion> UpdateVersion(
      const std::string& bucket, const std::string& key,
      const std::optional<std::string>& version_id,
      const std::function<S3Status(ObjectVersion&)>& edit) override;
  S3Result<ObjectVersion> SetTags(const std::string& bucket, const std::string& key,
                                  const std::optional<std::string>& version_id,
                                  std::vector<std::pair<std::string, std::string>> tags) override {
    return UpdateVersion(bucket, key, version_id, [&](ObjectVersion& v) -> S3Status {
      v.meta.tags = tags;
      return std::nullopt;
    });
  }
  S3Result<ObjectVersion> SetObjectAcl(const std::string& bucket, const std::string& key,
                                       const std::optional<std::string>& version_id,
                                       std::string acl) override {
    return UpdateVersion(bucket, key, version_id, [&](ObjectVersion& v) -> S3Status {
      v.meta.acl = acl;
      return std::nullopt;
    });
  }
  S3Result<ListResult> List(const std::string& bucket, const ListOptions& options) override;
  S3Result<ListVersionsResult> ListVersions(const std::string& bucket,
                                            const ListVersionsOptions& options) override;

  S3Result<UploadInfo> CreateUpload(const std::string& bucket, const std::string& key,
                                    const std::string& owner, ObjectMeta meta,
                                    std::string checksum_algorithm,
                                    std::string checksum_type) override;
  S3Result<UploadInfo> GetUpload(const std::string& bucket, const std::string& key,
                                 const std::string& upload_id) override;
  S3Result<PartInfo> UploadPart(const UploadInfo& upload, int part_number, StagedData staged,
                                Checksums checksums) override;
  S3Result<std::vector<PartInfo>> ListParts(const UploadInfo& upload) override;
  S3Result<std::vector<UploadInfo>> ListUploads(const std::string& bucket,
                                                const ListUploadsOptions& options,
                                                bool* truncated) override;
  S3Status AbortUpload(const UploadInfo& upload) override;
  S3Result<ObjectVersion> CompleteUpload(const UploadInfo& upload,
                                         const std::vector<CompletePart>& parts,
                                         const PutOptions& conditions) override;
  S3Result<ObjectVersion> GetCompletedUpload(const std::string& bucket, const std::string& key,
                                             const std::string& upload_id) override;

  S3Result<Credential> CreateAccessKey(const std::string& user_id) override;
  S3Status PutAccessKey(const Credential& credential) override;
  S3Status DeleteAccessKey(const std::string& access_key) override;
  std::optional<Credential> LookupAccessKey(std::string_view access_key) override {
    std::lock_guard lock(keys_mu_);
    auto it = keys_.find(std::string(access_key));
    if (it == keys_.end()) return std::nullopt;
    return it->second;
  }
  std::vector<Credential> ListAccessKeys(const std::string& user_id) override {
    std::lock_guard lock(keys_mu_);
    std::vector<Credential> out;
    for (const auto& [k, c] : keys_) {
      if (c.user_id == user_id) out.push_back(c);
    }
    return out;
  }

  StoreStats Stats() override {
    StoreStats s;
    s.commit_batches = batches_.load();
    s.committed_writes = writes_.load();
    s.corruptions = corruptions_.load();
    s.recovered_temp_files = recovered_.load();
    s.deleted_temp_files = deleted_temp_.load();
    return s;
  }

  // Paths.
  std::string DataPath(const std::string& id) const {
    return base::JoinPath(base::JoinPath(data_dir_, DataShard(id)), id);
  }
  std::string TmpPath(const std::string& id) const { return base::JoinPath(tmp_dir_, id); }

  void CountCorruption(const std::string& what) {
    corruptions_.fetch_add(1);
    SOVAI_LOG(ERROR).With("error", what) << "object store: stored data failed its checksum";
  }

  // The inline bytes of a version row (checked against their CRC).
  S3Result<std::string> LoadInline(int64_t row_id);

 private:
  // --- Writes: group commit -----------------------------------------------------------------
  struct WriteOp {
    std::function<S3Status(Tx&)> fn;
    S3Status result;
    bool done = false;
  };
  // Runs `fn` in the next batch's transaction and returns when that batch is durable.
  S3Status Write(std::function<S3Status(Tx&)> fn);
  void CommitterLoop();
  void RunBatch(std::vector<WriteOp*>& ops);

  // --- Reads --------------------------------------------------------------------------------
  template <class Fn>
  auto Read(Fn fn) -> decltype(fn(std::declval<Conn&>()));
  Result<std::unique_ptr<Conn>> OpenConn();

  // --- Helpers inside a write transaction ---------------------------------------------------
  S3Result<BucketInfo> TxBucket(Conn& c, const std::string& name);
  S3Result<std::optional<ObjectVersion>> LatestVersion(Conn& c, const std::string& bucket,
                                                       const std::string& key);
  S3Status DropVersionRow(Tx& tx, const ObjectVersion& v);
  S3Status DropFile(Tx& tx, const std::string& data_id);
  S3Status CheckPutConditions(const PutOptions& o, const std::optional<ObjectVersion>& current);
  // Makes `v` the latest version of its key, replacing the "null" version when the bucket is
  // not versioning-enabled. Fills v.row_id and v.version_id.
  S3Status InsertVersion(Tx& tx, const BucketInfo& bucket, ObjectVersion& v,
                         const std::optional<std::string>& inline_bytes);

  StoreOptions opts_;
  std::string data_dir_, tmp_dir_;
  base::UlidGenerator ulids_;

  std::mutex queue_mu_;  // guards queue_, stopping_, and every WriteOp's result/done
  std::condition_variable queue_cv_;
  std::condition_variable done_cv_;
  std::deque<WriteOp*> queue_;
  bool stopping_ = false;
  std::unique_ptr<Conn> writer_;                   // committer thread only
  std::vector<std::string> pending_garbage_rows_;  // committer thread only
  std::thread committer_;

  // Every bucket, mirrored from the database after each commit that changes one: bucket lookups
  // are on every request's path.
  void CacheBucket(const std::string& name, std::optional<BucketInfo> info);
  std::mutex buckets_mu_;  // guards buckets_
  std::map<std::string, BucketInfo> buckets_;

  // Per-bucket documents, loaded on first use and forgotten after each commit that changes a
  // bucket's or makes or deletes the bucket (the access documents are read on every request's
  // path; the lifecycle and Object Lock ones on every GET and write, parsed). A read that
  // overlapped such a commit is not cached: `configs_generation_` changed under it.
  struct CachedConfigs {
    std::vector<std::pair<std::string, std::string>> docs;  // kind → value
    std::map<std::string, ParsedConfig> parsed;             // kind → GetParsedBucketConfig's
  };
  void ForgetBucketConfigs(const std::string& name);
  std::mutex configs_mu_;  // guards configs_, configs_generation_
  std::map<std::string, CachedConfigs> configs_;
  uint64_t configs_generation_ = 0;

  std::mutex keys_mu_;  // guards keys_
  std::map<std::string, Credential> keys_;

  std::mutex readers_mu_;  // guards readers_
  std::vector<std::unique_ptr<Conn>> readers_;

  std::atomic<uint64_t> batches_{0}, writes_{0}, corruptions_{0}, recovered_{0}, deleted_temp_{0};

  friend class VersionReader;
};

template <class Fn>
auto StoreImpl::Read(Fn fn) -> decltype(fn(std::declval<Conn&>())) {
  std::unique_ptr<Conn> conn;
  {
    std::lock_guard lock(readers_mu_);
    if (!readers_.empty()) {
      conn = std::move(readers_.back());
      readers_.pop_back();
    }
  }
  if (!conn) {
    auto opened = OpenConn();
    if (!opened.ok()) return S3ErrorFromStatus(opened.status());
    conn = std::move(*opened);
  }
  auto result = fn(*conn);
  conn->ResetAll();
  std::lock_guard lock(readers_mu_);
  readers_.push_back(std::move(conn));
  return result;
}

}  // namespace sovai::objstore::store_internal
