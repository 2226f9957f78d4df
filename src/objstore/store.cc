// The storage engine (see store.h and docs/formats/objstore.md): opening and recovery, group
// commit, the helpers every write's transaction uses, access keys.
#include "objstore/store.h"

#include <sys/stat.h>

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

constexpr int64_t kSchemaVersion = 1;
constexpr size_t kMaxBatch = 512;
// How much of meta.db each connection maps (base::DatabaseOptions::mmap_size_bytes): address
// space, not memory; the kernel's page cache holds what is read.
constexpr int64_t kMetaMmapBytes = int64_t{1} << 30;

constexpr std::string_view kSchema = R"sql(
CREATE TABLE IF NOT EXISTS buckets(
  name TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  region TEXT NOT NULL,
  created INTEGER NOT NULL,
  versioning INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS bucket_config(
  bucket TEXT NOT NULL,
  kind TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY(bucket, kind));
CREATE TABLE IF NOT EXISTS versions(
  id INTEGER PRIMARY KEY,
  bucket TEXT NOT NULL,
  key TEXT NOT NULL,
  version_id TEXT NOT NULL,
  is_latest INTEGER NOT NULL,
  delete_marker INTEGER NOT NULL,
  size INTEGER NOT NULL,
  etag TEXT NOT NULL,
  mtime INTEGER NOT NULL,
  owner TEXT NOT NULL,
  meta TEXT NOT NULL,
  inline_data BLOB,
  inline_crc32c INTEGER,
  segments TEXT);
CREATE UNIQUE INDEX IF NOT EXISTS versions_by_version ON versions(bucket, key, version_id);
CREATE UNIQUE INDEX IF NOT EXISTS versions_latest ON versions(bucket, key) WHERE is_latest = 1;
CREATE INDEX IF NOT EXISTS versions_by_key ON versions(bucket, key, id);
CREATE TABLE IF NOT EXISTS uploads(
  upload_id TEXT PRIMARY KEY,
  bucket TEXT NOT NULL,
  key TEXT NOT NULL,
  created INTEGER NOT NULL,
  owner TEXT NOT NULL,
  meta TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS uploads_by_key ON uploads(bucket, key, created);
CREATE TABLE IF NOT EXISTS parts(
  upload_id TEXT NOT NULL,
  part_number INTEGER NOT NULL,
  size INTEGER NOT NULL,
  etag TEXT NOT NULL,
  mtime INTEGER NOT NULL,
  checksums TEXT NOT NULL,
  data_id TEXT NOT NULL,
  PRIMARY KEY(upload_id, part_number));
CREATE TABLE IF NOT EXISTS completed_uploads(
  upload_id TEXT PRIMARY KEY,
  bucket TEXT NOT NULL,
  key TEXT NOT NULL,
  version_id TEXT NOT NULL,
  etag TEXT NOT NULL,
  checksums TEXT NOT NULL,
  completed INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS completed_uploads_by_time ON completed_uploads(completed);
CREATE TABLE IF NOT EXISTS files(data_id TEXT PRIMARY KEY, size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS garbage(data_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS access_keys(
  access_key TEXT PRIMARY KEY,
  secret TEXT NOT NULL,
  user_id TEXT NOT NULL,
  created INTEGER NOT NULL);
)sql";

}  // namespace

std::string Lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string RandomAlnum(size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string raw = base::RandomBytes(n);
  std::string out(n, 'a');
  for (size_t i = 0; i < n; ++i) out[i] = kAlphabet[static_cast<unsigned char>(raw[i]) % 62];
  return out;
}

std::string Quote(std::string_view etag) { return "\"" + std::string(etag) + "\""; }

std::string DumpJsonLenient(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json PairsToJson(const std::vector<std::pair<std::string, std::string>>& pairs) {
  json a = json::array();
  for (const auto& [k, v] : pairs) a.push_back(json::array({k, v}));
  return a;
}

std::vector<std::pair<std::string, std::string>> PairsFromJson(const json& j) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!j.is_array()) return out;
  for (const auto& p : j) {
    if (p.is_array() && p.size() == 2 && p[0].is_string() && p[1].is_string()) {
      out.emplace_back(p[0].get<std::string>(), p[1].get<std::string>());
    }
  }
  return out;
}

json ChecksumsToJson(const Checksums& c) {
  json j = json::object();
  if (!c.crc32.empty()) j["CRC32"] = c.crc32;
  if (!c.crc32c.empty()) j["CRC32C"] = c.crc32c;
  if (!c.crc64nvme.empty()) j["CRC64NVME"] = c.crc64nvme;
  if (!c.sha1.empty()) j["SHA1"] = c.sha1;
  if (!c.sha256.empty()) j["SHA256"] = c.sha256;
  if (!c.type.empty()) j["type"] = c.type;
  return j;
}

Checksums ChecksumsFromJson(const json& j) {
  Checksums c;
  if (!j.is_object()) return c;
  auto get = [&](const char* name) {
    auto it = j.find(name);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  c.crc32 = get("CRC32");
  c.crc32c = get("CRC32C");
  c.crc64nvme = get("CRC64NVME");
  c.sha1 = get("SHA1");
  c.sha256 = get("SHA256");
  c.type = get("type");
  return c;
}

json LockToJson(const ObjectLock& lock) {
  json j = json::object();
  if (!lock.mode.empty()) {
    j["mode"] = lock.mode;
    j["until"] = lock.retain_until_micros;
  }
  if (lock.legal_hold) j["hold"] = true;
  return j;
}

ObjectLock LockFromJson(const json& j) {
  ObjectLock lock;
  if (!j.is_object()) return lock;
  if (auto it = j.find("mode"); it != j.end() && it->is_string()) lock.mode = *it;
  if (auto it = j.find("until"); it != j.end() && it->is_number_integer()) {
    lock.retain_until_micros = it->get<int64_t>();
  }
  if (auto it = j.find("hold"); it != j.end() && it->is_boolean()) lock.legal_hold = *it;
  return lock;
}

std::string MetaToJson(const ObjectMeta& m, const Checksums& checksums,
                       const std::vector<uint64_t>& part_sizes,
                       const std::vector<Checksums>& part_checksums) {
  json j = json::object();
  auto put = [&](const char* name, const std::string& v) {
    if (!v.empty()) j[name] = v;
  };
  put("content_type", m.content_type);
  put("content_encoding", m.content_encoding);
  put("content_disposition", m.content_disposition);
  put("content_language", m.content_language);
  put("cache_control", m.cache_control);
  put("expires", m.expires);
  put("storage_class", m.storage_class);
  put("acl", m.acl);
  if (!m.user.empty()) j["user"] = PairsToJson(m.user);
  if (!m.tags.empty()) j["tags"] = PairsToJson(m.tags);
  if (!checksums.empty()) j["checksums"] = ChecksumsToJson(checksums);
  if (!part_sizes.empty()) j["parts"] = part_sizes;
  if (!part_checksums.empty()) {
    json a = json::array();
    for (const Checksums& c : part_checksums) a.push_back(ChecksumsToJson(c));
    j["part_checksums"] = std::move(a);
  }
  if (m.lock != ObjectLock()) j["lock"] = LockToJson(m.lock);
  return DumpJsonLenient(j);
}

void MetaFromJson(std::string_view text, ObjectMeta& m, Checksums& checksums,
                  std::vector<uint64_t>& part_sizes, std::vector<Checksums>* part_checksums) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  auto get = [&](const char* name) {
    auto it = j.find(name);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  m.content_type = get("content_type");
  m.content_encoding = get("content_encoding");
  m.content_disposition = get("content_disposition");
  m.content_language = get("content_language");
  m.cache_control = get("cache_control");
  m.expires = get("expires");
  m.storage_class = get("storage_class");
  m.acl = get("acl");
  if (auto it = j.find("user"); it != j.end()) m.user = PairsFromJson(*it);
  if (auto it = j.find("tags"); it != j.end()) m.tags = PairsFromJson(*it);
  if (auto it = j.find("checksums"); it != j.end()) checksums = ChecksumsFromJson(*it);
  if (auto it = j.find("parts"); it != j.end() && it->is_array()) {
    for (const auto& p : *it) {
      if (p.is_number_unsigned()) part_sizes.push_back(p.get<uint64_t>());
    }
  }
  if (auto it = j.find("part_checksums"); part_checksums && it != j.end() && it->is_array()) {
    for (const auto& c : *it) part_checksums->push_back(ChecksumsFromJson(c));
  }
  if (auto it = j.find("lock"); it != j.end()) m.lock = LockFromJson(*it);
}

std::string SegmentsToJson(const std::vector<std::pair<std::string, uint64_t>>& segments) {
  json a = json::array();
  for (const auto& [id, size] : segments) a.push_back(json::array({id, size}));
  return a.dump();
}

std::vector<std::pair<std::string, uint64_t>> SegmentsFromJson(std::string_view text) {
  std::vector<std::pair<std::string, uint64_t>> out;
  json j = json::parse(text, nullptr, false);
  if (!j.is_array()) return out;
  for (const auto& s : j) {
    if (s.is_array() && s.size() == 2 && s[0].is_string() && s[1].is_number_unsigned()) {
      out.emplace_back(s[0].get<std::string>(), s[1].get<uint64_t>());
    }
  }
  return out;
}

// The first column of every row `st` yields, as text (the data ids a query selects), leaving
// `st` reset for its next use.
base::Result<std::vector<std::string>> FirstColumnOfEachRow(base::Statement& st) {
  std::vector<std::string> values;
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    values.push_back(st.ColumnText(0));
  }
  st.Reset();
  return values;
}

ObjectVersion VersionFromRow(const base::Statement& st) {
  ObjectVersion v;
  v.row_id = st.ColumnInt(0);
  v.bucket = st.ColumnText(1);
  v.key = st.ColumnText(2);
  v.version_id = st.ColumnText(3);
  v.is_latest = st.ColumnInt(4) != 0;
  v.delete_marker = st.ColumnInt(5) != 0;
  v.size = static_cast<uint64_t>(st.ColumnInt(6));
  v.etag = st.ColumnText(7);
  v.mtime_micros = st.ColumnInt(8);
  v.owner = st.ColumnText(9);
  MetaFromJson(st.ColumnText(10), v.meta, v.checksums, v.part_sizes, &v.part_checksums);
  v.inline_data = st.ColumnInt(11) != 0;
  if (!st.ColumnIsNull(12)) v.segments = SegmentsFromJson(st.ColumnText(12));
  return v;
}

BucketInfo BucketFromRow(const base::Statement& st) {
  BucketInfo b;
  b.name = st.ColumnText(0);
  b.owner = st.ColumnText(1);
  b.region = st.ColumnText(2);
  b.created_micros = st.ColumnInt(3);
  b.versioning = static_cast<Versioning>(st.ColumnInt(4));
  return b;
}

UploadInfo UploadFromRow(const base::Statement& st) {
  UploadInfo u;
  u.upload_id = st.ColumnText(0);
  u.bucket = st.ColumnText(1);
  u.key = st.ColumnText(2);
  u.created_micros = st.ColumnInt(3);
  u.owner = st.ColumnText(4);
  Checksums unused;
  std::vector<uint64_t> unused_parts;
  std::string meta = st.ColumnText(5);
  MetaFromJson(meta, u.meta, unused, unused_parts);
  json j = json::parse(meta, nullptr, false);
  if (j.is_object() && j.contains("checksum_algorithm") && j["checksum_algorithm"].is_string()) {
    u.checksum_algorithm = j["checksum_algorithm"].get<std::string>();
  }
  if (j.is_object() && j.contains("checksum_type") && j["checksum_type"].is_string()) {
    u.checksum_type = j["checksum_type"].get<std::string>();
  }
  return u;
}

PartInfo PartFromRow(const base::Statement& st) {
  PartInfo p;
  p.part_number = static_cast<int>(st.ColumnInt(0));
  p.size = static_cast<uint64_t>(st.ColumnInt(1));
  p.etag = st.ColumnText(2);
  p.mtime_micros = st.ColumnInt(3);
  p.checksums = ChecksumsFromJson(json::parse(st.ColumnText(4), nullptr, false));
  p.data_id = st.ColumnText(5);
  return p;
}
// --- Init and recovery ------------------------------------------------------------------------

Result<std::unique_ptr<Conn>> StoreImpl::OpenConn() {
  // Every reader connection maps the file: small objects live inline in their rows, and GETs
  // spread over many connections would otherwise each read them into a page cache of its own.
  SOVAI_ASSIGN_OR_RETURN(auto db, base::Database::Open(base::JoinPath(opts_.root, "meta.db"),
                                                       {.mmap_size_bytes = kMetaMmapBytes}));
  return std::make_unique<Conn>(std::move(db));
}

Status StoreImpl::Init() {
  base::Env& env = *opts_.env;
  data_dir_ = base::JoinPath(opts_.root, "data");
  tmp_dir_ = base::JoinPath(opts_.root, "tmp");
  SOVAI_RETURN_IF_ERROR(env.CreateDirs(data_dir_));
  SOVAI_RETURN_IF_ERROR(env.CreateDirs(tmp_dir_));
  SOVAI_ASSIGN_OR_RETURN(writer_, OpenConn());
  // The database holds access key secrets.
  for (const char* suffix : {"", "-wal", "-shm"}) {
    (void)::chmod(base::JoinPath(opts_.root, std::string("meta.db") + suffix).c_str(), 0600);
  }
  SOVAI_ASSIGN_OR_RETURN(int64_t version, writer_->db().UserVersion());
  if (version > kSchemaVersion) {
    return base::FailedPreconditionError(
        "object store at '" + opts_.root + "' has schema version " + std::to_string(version) +
        ", newer than this server understands (" + std::to_string(kSchemaVersion) + ")");
  }
  SOVAI_RETURN_IF_ERROR(writer_->db().Exec("BEGIN IMMEDIATE"));
  SOVAI_RETURN_IF_ERROR(writer_->db().Exec(kSchema));
  SOVAI_RETURN_IF_ERROR(
      writer_->db().Exec("PRAGMA user_version = " + std::to_string(kSchemaVersion)));
  SOVAI_RETURN_IF_ERROR(writer_->db().Exec("COMMIT"));

  // Files left in tmp/: committed ones move into data/, the rest were never acknowledged.
  SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> leftovers, env.ListDir(tmp_dir_));
  for (const std::string& name : leftovers) {
    SOVAI_ASSIGN_OR_RETURN(base::Statement * st,
                           writer_->Prep("SELECT 1 FROM files WHERE data_id = ?"));
    st->Bind(1, name);
    SOVAI_ASSIGN_OR_RETURN(bool referenced, st->Step());
    st->Reset();
    if (referenced) {
      SOVAI_RETURN_IF_ERROR(env.CreateDirs(base::JoinPath(data_dir_, DataShard(name))));
      SOVAI_RETURN_IF_ERROR(env.RenameFile(TmpPath(name), DataPath(name)));
      recovered_.fetch_add(1);
    } else {
      SOVAI_RETURN_IF_ERROR(env.DeleteFile(TmpPath(name)));
      deleted_temp_.fetch_add(1);
    }
  }
  // Unlink what the last run had released but not yet deleted.
  {
    SOVAI_ASSIGN_OR_RETURN(base::Statement * st, writer_->Prep("SELECT data_id FROM garbage"));
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> ids, FirstColumnOfEachRow(*st));
    for (const auto& id : ids) {
      (void)env.DeleteFile(DataPath(id));
      (void)env.DeleteFile(TmpPath(id));
    }
    SOVAI_RETURN_IF_ERROR(writer_->db().Exec("DELETE FROM garbage"));
  }
  {
    SOVAI_ASSIGN_OR_RETURN(base::Statement * st,
                           writer_->Prep("SELECT name, owner, region, created, versioning FROM "
                                         "buckets"));
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st->Step());
      if (!row) break;
      BucketInfo b = BucketFromRow(*st);
      buckets_.emplace(b.name, b);
    }
    st->Reset();
  }
  {
    SOVAI_ASSIGN_OR_RETURN(base::Statement * st,
                           writer_->Prep("SELECT access_key, secret, user_id FROM access_keys"));
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st->Step());
      if (!row) break;
      Credential c{st->ColumnText(0), st->ColumnText(1), st->ColumnText(2)};
      keys_.emplace(c.access_key, c);
    }
    st->Reset();
  }
  if (!leftovers.empty()) {
    SOVAI_LOG(INFO).With("recovered", recovered_.load()).With("deleted", deleted_temp_.load())
        << "object store: finished writes interrupted by the last shutdown";
  }
  committer_ = std::thread([this] { CommitterLoop(); });
  return Status();
}

// --- Group commit ------------------------------------------------------------------------------

S3Status StoreImpl::Write(std::function<S3Status(Tx&)> fn) {
  WriteOp op;
  op.fn = std::move(fn);
  std::unique_lock lock(queue_mu_);
  if (stopping_) return S3Error(S3Code::kServiceUnavailable, "the object store is shutting down");
  queue_.push_back(&op);
  queue_cv_.notify_one();
  done_cv_.wait(lock, [&] { return op.done; });
  return std::move(op.result);
}

void StoreImpl::CommitterLoop() {
  for (;;) {
    std::vector<WriteOp*> ops;
    {
      std::unique_lock lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left
      while (!queue_.empty() && ops.size() < kMaxBatch) {
        ops.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    RunBatch(ops);
    {
      std::lock_guard lock(queue_mu_);
      for (WriteOp* op : ops) op->done = true;
    }
    done_cv_.notify_all();
  }
}

void StoreImpl::RunBatch(std::vector<WriteOp*>& ops) {
  base::Database& db = writer_->db();
  std::vector<std::string> commit_files, garbage;
  std::vector<std::function<void()>> after_commit;
  Status st = db.Exec("BEGIN IMMEDIATE");
  if (st.ok() && !pending_garbage_rows_.empty()) {
    // Rows of files unlinked after the previous batch.
    for (const auto& id : pending_garbage_rows_) {
      auto del = writer_->Prep("DELETE FROM garbage WHERE data_id = ?");
      if (!del.ok()) break;
      (*del)->Bind(1, id);
      (void)(*del)->Run();
    }
  }
  for (WriteOp* op : ops) {
    if (!st.ok()) break;
    st = db.Exec("SAVEPOINT op");
    if (!st.ok()) break;
    Tx tx{*writer_, {}, {}, {}};
    try {
      op->result = op->fn(tx);
    } catch (const std::exception& e) {
      op->result = S3Error(S3Code::kInternalError, std::string("write failed: ") + e.what());
    }
    writer_->ResetAll();
    if (op->result) {
      st = db.Exec("ROLLBACK TO op; RELEASE op");
    } else {
      st = db.Exec("RELEASE op");
      commit_files.insert(commit_files.end(), tx.commit_files.begin(), tx.commit_files.end());
      garbage.insert(garbage.end(), tx.garbage.begin(), tx.garbage.end());
      for (auto& fn : tx.after_commit) after_commit.push_back(std::move(fn));
    }
  }
  if (st.ok()) st = db.Exec("COMMIT");
  if (!st.ok()) {
    (void)db.Exec("ROLLBACK");
    SOVAI_LOG(ERROR).With("error", st.ToString()) << "object store: commit failed";
    for (WriteOp* op : ops) {
      if (!op->result) op->result = S3ErrorFromStatus(st);
    }
    return;
  }
  pending_garbage_rows_.clear();
  for (auto& fn : after_commit) fn();
  batches_.fetch_add(1);
  writes_.fetch_add(ops.size());
  base::Env& env = *opts_.env;
  for (const auto& id : commit_files) {
    Status moved = env.RenameFile(TmpPath(id), DataPath(id));
    if (!moved.ok() && moved.code() == base::StatusCode::kNotFound) {
      (void)env.CreateDirs(base::JoinPath(data_dir_, DataShard(id)));
      moved = env.RenameFile(TmpPath(id), DataPath(id));
    }
    // A failed move is finished at the next start; readers fall back to tmp/ meanwhile.
    if (!moved.ok()) SOVAI_LOG(WARNING).With("error", moved.ToString()) << "object store: move";
  }
  for (const auto& id : garbage) {
    (void)env.DeleteFile(DataPath(id));
    (void)env.DeleteFile(TmpPath(id));
    pending_garbage_rows_.push_back(id);
  }
}

// --- Transaction helpers -----------------------------------------------------------------------

S3Result<BucketInfo> StoreImpl::TxBucket(Conn& c, const std::string& name) {
  SOVAI_DB_ASSIGN(base::Statement * st,
                  c.Prep("SELECT name, owner, region, created, versioning FROM buckets "
                         "WHERE name = ?"));
  st->Bind(1, name);
  SOVAI_DB_ASSIGN(bool row, st->Step());
  if (!row) {
    return S3Error(S3Code::kNoSuchBucket, "The specified bucket does not exist")
        .With("BucketName", name);
  }
  return BucketFromRow(*st);
}

S3Result<std::optional<ObjectVersion>> StoreImpl::LatestVersion(Conn& c, const std::string& bucket,
                                                                const std::string& key) {
  SOVAI_DB_ASSIGN(base::Statement * st,
                  c.Prep("SELECT " + std::string(kVersionColumns) +
                         " FROM versions WHERE bucket = ? AND key = ? AND is_latest = 1"));
  st->Bind(1, bucket).Bind(2, key);
  SOVAI_DB_ASSIGN(bool row, st->Step());
  if (!row) return std::optional<ObjectVersion>();
  return std::optional<ObjectVersion>(VersionFromRow(*st));
}

S3Status StoreImpl::DropFile(Tx& tx, const std::string& data_id) {
  SOVAI_DB_ASSIGN(base::Statement * del, tx.conn.Prep("DELETE FROM files WHERE data_id = ?"));
  del->Bind(1, data_id);
  SOVAI_DB(del->Run());
  SOVAI_DB_ASSIGN(base::Statement * ins,
                  tx.conn.Prep("INSERT OR IGNORE INTO garbage(data_id) VALUES (?)"));
  ins->Bind(1, data_id);
  SOVAI_DB(ins->Run());
  tx.garbage.push_back(data_id);
  return std::nullopt;
}

S3Status StoreImpl::DropVersionRow(Tx& tx, const ObjectVersion& v) {
  SOVAI_DB_ASSIGN(base::Statement * st, tx.conn.Prep("DELETE FROM versions WHERE id = ?"));
  st->Bind(1, v.row_id);
  SOVAI_DB(st->Run());
  for (const auto& [id, size] : v.segments) SOVAI_S3_RETURN_IF_ERROR(DropFile(tx, id));
  return std::nullopt;
}

S3Status StoreImpl::CheckPutConditions(const PutOptions& o,
                                       const std::optional<ObjectVersion>& current) {
  bool exists = current && !current->delete_marker;
  if (exists && (o.if_none_match_star ||
                 (o.if_none_match && EtagListMatches(*o.if_none_match, current->etag)))) {
    return S3Error(S3Code::kPreconditionFailed,
                   "At least one of the pre-conditions you specified did not hold")
        .With("Condition", "If-None-Match");
  }
  if (o.if_match) {
    if (!exists) {
      return S3Error(S3Code::kNoSuchKey, "The specified key does not exist.").With("Key", o.key);
    }
    if (!EtagListMatches(*o.if_match, current->etag)) {
      return S3Error(S3Code::kPreconditionFailed,
                     "At least one of the pre-conditions you specified did not hold")
          .With("Condition", "If-Match");
    }
  }
  return std::nullopt;
}

S3Status StoreImpl::InsertVersion(Tx& tx, const BucketInfo& bucket, ObjectVersion& v,
                                  const std::optional<std::string>& inline_bytes) {
  Conn& c = tx.conn;
  if (bucket.versioning == Versioning::kEnabled) {
    v.version_id = RandomAlnum(32);
  } else {
    v.version_id = "null";
    // The "null" version (if any) is replaced.
    SOVAI_DB_ASSIGN(base::Statement * st,
                    c.Prep("SELECT " + std::string(kVersionColumns) +
                           " FROM versions WHERE bucket = ? AND key = ? AND version_id = 'null'"));
    st->Bind(1, v.bucket).Bind(2, v.key);
    SOVAI_DB_ASSIGN(bool row, st->Step());
    if (row) {
      ObjectVersion old = VersionFromRow(*st);
      st->Reset();
      SOVAI_S3_RETURN_IF_ERROR(DropVersionRow(tx, old));
    }
  }
  SOVAI_DB_ASSIGN(base::Statement * demote,
                  c.Prep("UPDATE versions SET is_latest = 0 WHERE bucket = ? AND key = ? AND "
                         "is_latest = 1"));
  demote->Bind(1, v.bucket).Bind(2, v.key);
  SOVAI_DB(demote->Run());
  SOVAI_DB_ASSIGN(
      base::Statement * ins,
      c.Prep("INSERT INTO versions(bucket, key, version_id, is_latest, delete_marker, size, etag, "
             "mtime, owner, meta, inline_data, inline_crc32c, segments) "
             "VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  ins->Bind(1, v.bucket).Bind(2, v.key).Bind(3, v.version_id);
  ins->Bind(4, int64_t{v.delete_marker ? 1 : 0}).Bind(5, static_cast<int64_t>(v.size));
  ins->Bind(6, v.etag).Bind(7, v.mtime_micros).Bind(8, v.owner);
  ins->Bind(9, MetaToJson(v.meta, v.checksums, v.part_sizes, v.part_checksums));
  if (inline_bytes) {
    ins->BindBlob(10, *inline_bytes).Bind(11, int64_t{base::Crc32c(*inline_bytes)});
  } else {
    ins->BindNull(10).BindNull(11);
  }
  if (v.delete_marker || inline_bytes) {
    ins->BindNull(12);
  } else {
    ins->Bind(12, SegmentsToJson(v.segments));
  }
  SOVAI_DB(ins->Run());
  v.row_id = c.db().LastInsertRowId();
  v.is_latest = true;
  v.inline_data = inline_bytes.has_value();
  return std::nullopt;
}
// --- Access keys ---------------------------------------------------------------------------------

S3Status StoreImpl::PutAccessKey(const Credential& credential) {
  S3Status st = Write([&](Tx& tx) -> S3Status {
    SOVAI_DB_ASSIGN(base::Statement * ins,
                    tx.conn.Prep("INSERT OR REPLACE INTO access_keys(access_key, secret, user_id, "
                                 "created) VALUES (?, ?, ?, ?)"));
    ins->Bind(1, credential.access_key).Bind(2, credential.secret_key);
    ins->Bind(3, credential.user_id).Bind(4, opts_.env->NowUnixMicros());
    SOVAI_DB(ins->Run());
    return std::nullopt;
  });
  if (st) return st;
  std::lock_guard lock(keys_mu_);
  keys_[credential.access_key] = credential;
  return std::nullopt;
}

S3Result<Credential> StoreImpl::CreateAccessKey(const std::string& user_id) {
  static constexpr char kUpper[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string raw = base::RandomBytes(18);
  Credential c;
  c.access_key = "SV";
  for (char b : raw) c.access_key.push_back(kUpper[static_cast<unsigned char>(b) % 36]);
  c.secret_key = RandomAlnum(40);
  c.user_id = user_id;
  SOVAI_S3_RETURN_IF_ERROR(PutAccessKey(c));
  return c;
}

S3Status StoreImpl::DeleteAccessKey(const std::string& access_key) {
  S3Status st = Write([&](Tx& tx) -> S3Status {
    SOVAI_DB_ASSIGN(base::Statement * del,
                    tx.conn.Prep("DELETE FROM access_keys WHERE access_key = ?"));
    del->Bind(1, access_key);
    SOVAI_DB(del->Run());
    if (tx.conn.db().Changes() == 0) {
      return S3Error(S3Code::kInvalidAccessKeyId, "no such access key");
    }
    return std::nullopt;
  });
  if (st) return st;
  std::lock_guard lock(keys_mu_);
  keys_.erase(access_key);
  return std::nullopt;
}

}  // namespace sovai::objstore::store_internal

namespace sovai::objstore {

std::string UnquoteEtag(std::string_view etag) {
  etag = base::Trim(etag);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return std::string(etag);
}

bool EtagListMatches(std::string_view list, std::string_view etag) {
  for (std::string_view item : base::Split(list, ',')) {
    std::string_view t = base::Trim(item);
    if (t == "*") return true;
    if (t.substr(0, 2) == "W/") t.remove_prefix(2);
    if (UnquoteEtag(t) == UnquoteEtag(etag)) return true;
  }
  return false;
}

bool IsPlausibleVersionId(std::string_view s) {
  if (s == "null") return true;
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

base::Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  auto store = std::make_unique<store_internal::StoreImpl>(options);
  SOVAI_RETURN_IF_ERROR(store->Init().WithContext("opening the object store"));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace sovai::objstore
