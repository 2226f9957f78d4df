// The storage engine's listings: the latest versions (ListObjects) and every version
// (ListObjectVersions), a page per snapshot (see store.h).
#include <algorithm>

#include "objstore/internal/store_impl.h"

namespace sovai::objstore::store_internal {

using base::Result;
using base::Status;
using nlohmann::json;

namespace {

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
}  // namespace

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

}  // namespace sovai::objstore::store_internal
