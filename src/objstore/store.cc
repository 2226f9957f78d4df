// The storage engine (see store.h and docs/formats/objstore.md).
#include "objstore/store.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "base/crc.h"
#include "base/crypto.h"
#include "base/log.h"
#include "base/sqlite.h"
#include "base/strings.h"
#include "base/ulid.h"
#include "objstore/data_file.h"
#include "objstore/multipart_checksum.h"

namespace sovai::objstore {

using base::Result;
using base::Status;
using nlohmann::json;

namespace {

constexpr int64_t kSchemaVersion = 1;
constexpr size_t kStageChunkBytes = 1 << 20;
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

constexpr std::string_view kVersionColumns =
    "id, bucket, key, version_id, is_latest, delete_marker, size, etag, mtime, owner, meta, "
    "inline_data IS NOT NULL, segments";

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
                       const std::vector<Checksums>& part_checksums = {}) {
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
                  std::vector<uint64_t>& part_sizes,
                  std::vector<Checksums>* part_checksums = nullptr) {
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

// The smallest string greater than every string that starts with `s` ("" when none exists).
std::string PrefixSuccessor(std::string s) {
  while (!s.empty() && static_cast<unsigned char>(s.back()) == 0xff) s.pop_back();
  if (!s.empty()) s.back() = static_cast<char>(static_cast<unsigned char>(s.back()) + 1);
  return s;
}

// Where a listing resumes: at `key` (inclusive) or strictly after it.
struct Cursor {
  std::string key;
  bool inclusive = true;
  bool end = false;  // nothing can follow
};

// The common prefix `key` rolls up into under (prefix, delimiter), or "".
std::string CommonPrefixOf(std::string_view key, std::string_view prefix,
                           std::string_view delimiter) {
  if (delimiter.empty() || key.size() < prefix.size() || key.substr(0, prefix.size()) != prefix) {
    return {};
  }
  size_t pos = key.find(delimiter, prefix.size());
  if (pos == std::string_view::npos) return {};
  return std::string(key.substr(0, pos + delimiter.size()));
}

// The first position of a listing that starts after `marker`: past the whole common prefix when
// the marker lies inside one (its keys were rolled up into that prefix already).
Cursor StartCursor(const std::string& prefix, const std::string& delimiter,
                   const std::string& marker) {
  Cursor c;
  if (marker.empty() || marker < prefix) {
    c.key = prefix;
    return c;
  }
  std::string cp = CommonPrefixOf(marker, prefix, delimiter);
  if (!cp.empty()) {
    c.key = PrefixSuccessor(cp);
    c.end = c.key.empty();
    return c;
  }
  c.key = marker;
  c.inclusive = false;
  return c;
}

std::string DataShard(const std::string& id) { return id.substr(id.size() - 2); }

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

// --- Buckets -----------------------------------------------------------------------------------

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

// --- Objects -----------------------------------------------------------------------------------

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
      auto created = DataFileWriter::Create(TmpPath(staged.data_id));
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
    auto created = DataFileWriter::Create(TmpPath(staged.data_id));
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
    auto opened = DataFileReader::Open(store_.DataPath(id));
    if (!opened.ok() && opened.status().code() == base::StatusCode::kNotFound) {
      opened = DataFileReader::Open(store_.TmpPath(id));  // committed, not yet moved
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

S3Result<ListResult> StoreImpl::List(const std::string& bucket, const ListOptions& o) {
  return Read([&](Conn& c) -> S3Result<ListResult> {
    SOVAI_DB(c.db().Exec("BEGIN"));  // one snapshot for the whole page
    struct EndTx {
      Conn& c;
      ~EndTx() { (void)c.db().Exec("COMMIT"); }
    } end_tx{c};
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(c, bucket));
    (void)b;
    ListResult out;
    Cursor cur = StartCursor(o.prefix, o.delimiter, o.after);
    int emitted = 0;
    const int max_keys = std::max(0, o.max_keys);
    constexpr int kBatch = 256;
    std::string last_emitted;
    while (!cur.end) {
      SOVAI_DB_ASSIGN(
          base::Statement * st,
          c.Prep(std::string("SELECT ") + std::string(kVersionColumns) +
                 (cur.inclusive
                      ? " FROM versions WHERE bucket = ? AND is_latest = 1 AND key >= ? "
                      : " FROM versions WHERE bucket = ? AND is_latest = 1 AND key > ? ") +
                 "ORDER BY key LIMIT " + std::to_string(kBatch)));
      st->Bind(1, bucket).Bind(2, cur.key);
      int rows = 0;
      bool jumped = false;
      for (;;) {
        SOVAI_DB_ASSIGN(bool row, st->Step());
        if (!row) break;
        ++rows;
        std::string key = st->ColumnText(2);
        if (key.compare(0, o.prefix.size(), o.prefix) != 0) {
          cur.end = true;  // past the prefix: keys are sorted
          break;
        }
        cur.key = key;
        cur.inclusive = false;
        if (st->ColumnInt(5) != 0) continue;  // a delete marker hides the key
        std::string cp = CommonPrefixOf(key, o.prefix, o.delimiter);
        if (emitted == max_keys) {
          out.truncated = true;
          cur.end = true;
          break;
        }
        if (!cp.empty()) {
          out.common_prefixes.push_back(cp);
          last_emitted = cp;
          ++emitted;
          cur.key = PrefixSuccessor(cp);
          cur.inclusive = true;
          cur.end = cur.key.empty();
          jumped = true;
          break;
        }
        out.objects.push_back(VersionFromRow(*st));
        last_emitted = key;
        ++emitted;
      }
      st->Reset();
      if (!jumped && rows < kBatch) break;  // no more rows
    }
    if (out.truncated) out.next_marker = last_emitted;
    return out;
  });
}

S3Result<ListVersionsResult> StoreImpl::ListVersions(const std::string& bucket,
                                                     const ListVersionsOptions& o) {
  return Read([&](Conn& c) -> S3Result<ListVersionsResult> {
    SOVAI_DB(c.db().Exec("BEGIN"));
    struct EndTx {
      Conn& c;
      ~EndTx() { (void)c.db().Exec("COMMIT"); }
    } end_tx{c};
    SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, TxBucket(c, bucket));
    (void)b;
    ListVersionsResult out;
    const int max_keys = std::max(0, o.max_keys);
    int emitted = 0;
    // Resume inside key_marker's versions (older than version_id_marker), then after it.
    Cursor cur;
    int64_t below_id = -1;  // >= 0: continue within cur.key below this row id
    if (!o.key_marker.empty() && !o.version_id_marker.empty() &&
        CommonPrefixOf(o.key_marker, o.prefix, o.delimiter).empty()) {
      SOVAI_DB_ASSIGN(base::Statement * st,
                      c.Prep("SELECT id FROM versions WHERE bucket = ? AND key = ? AND "
                             "version_id = ?"));
      st->Bind(1, bucket).Bind(2, o.key_marker).Bind(3, o.version_id_marker);
      SOVAI_DB_ASSIGN(bool row, st->Step());
      if (row) below_id = st->ColumnInt(0);
      st->Reset();
      cur.key = o.key_marker;
      cur.inclusive = false;
    } else {
      cur = StartCursor(o.prefix, o.delimiter, o.key_marker);
    }
    ObjectVersion last;
    bool last_was_prefix = false;
    std::string last_cp;
    constexpr int kBatch = 256;
    auto emit_version = [&](ObjectVersion v) -> bool {
      if (emitted == max_keys) {
        out.truncated = true;
        return false;
      }
      last = v;
      last_was_prefix = false;
      out.versions.push_back(std::move(v));
      ++emitted;
      return true;
    };
    if (below_id >= 0) {
      SOVAI_DB_ASSIGN(base::Statement * st,
                      c.Prep("SELECT " + std::string(kVersionColumns) +
                             " FROM versions WHERE bucket = ? AND key = ? AND id < ? ORDER BY id "
                             "DESC"));
      st->Bind(1, bucket).Bind(2, o.key_marker).Bind(3, below_id);
      for (;;) {
        SOVAI_DB_ASSIGN(bool row, st->Step());
        if (!row) break;
        if (!emit_version(VersionFromRow(*st))) break;
      }
      st->Reset();
    }
    while (!cur.end && !out.truncated) {
      SOVAI_DB_ASSIGN(base::Statement * st,
                      c.Prep(std::string("SELECT ") + std::string(kVersionColumns) +
                             (cur.inclusive ? " FROM versions WHERE bucket = ? AND key >= ? "
                                            : " FROM versions WHERE bucket = ? AND key > ? ") +
                             "ORDER BY key, id DESC LIMIT " + std::to_string(kBatch)));
      st->Bind(1, bucket).Bind(2, cur.key);
      int rows = 0;
      bool jumped = false;
      for (;;) {
        SOVAI_DB_ASSIGN(bool row, st->Step());
        if (!row) break;
        ++rows;
        std::string key = st->ColumnText(2);
        if (key.compare(0, o.prefix.size(), o.prefix) != 0) {
          cur.end = true;
          break;
        }
        std::string cp = CommonPrefixOf(key, o.prefix, o.delimiter);
        if (!cp.empty()) {
          if (emitted == max_keys) {
            out.truncated = true;
            break;
          }
          out.common_prefixes.push_back(cp);
          last_cp = cp;
          last_was_prefix = true;
          last = ObjectVersion();
          ++emitted;
          cur.key = PrefixSuccessor(cp);
          cur.inclusive = true;
          cur.end = cur.key.empty();
          jumped = true;
          break;
        }
        if (!emit_version(VersionFromRow(*st))) break;
      }
      st->Reset();
      if (out.truncated || jumped) continue;
      if (rows < kBatch) break;
      // A batch can end in the middle of a key's versions: resume after what was emitted.
      if (!last.key.empty()) {
        SOVAI_DB_ASSIGN(base::Statement * rest,
                        c.Prep("SELECT " + std::string(kVersionColumns) +
                               " FROM versions WHERE bucket = ? AND key = ? AND id < ? ORDER BY "
                               "id DESC"));
        rest->Bind(1, bucket).Bind(2, last.key).Bind(3, last.row_id);
        for (;;) {
          SOVAI_DB_ASSIGN(bool row, rest->Step());
          if (!row) break;
          if (!emit_version(VersionFromRow(*rest))) break;
        }
        rest->Reset();
        cur.key = last.key;
        cur.inclusive = false;
      }
    }
    if (out.truncated) {
      if (last_was_prefix) {
        out.next_key_marker = last_cp;
      } else {
        out.next_key_marker = last.key;
        out.next_version_id_marker = last.version_id;
      }
    }
    return out;
  });
}

// --- Multipart -----------------------------------------------------------------------------------

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

}  // namespace

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

Checksums ComputeChecksums(std::string_view data, uint32_t bits) {
  Digests digests(bits);
  digests.Update(data);
  StagedData out;
  digests.Finish(out);
  return out.checksums;
}

bool IsPlausibleVersionId(std::string_view s) {
  if (s == "null") return true;
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  auto store = std::make_unique<StoreImpl>(options);
  SOVAI_RETURN_IF_ERROR(store->Init().WithContext("opening the object store"));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace sovai::objstore
