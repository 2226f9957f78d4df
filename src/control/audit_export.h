// Periodic export of the audit log (audit.h) to a bucket, and the offline check of what was
// exported (docs/audit.md, "Export to a bucket").
//
// Each export writes the entries not yet in the bucket as JSON Lines objects named
//
//   <prefix><first seq, 20 digits>-<last seq, 20 digits>.jsonl
//
// so that the keys' lexical order is the chain's order. A line carries every hashed field plus
// `seq`, `prev_hash` and `hash`: the files alone verify (VerifyAuditExport) from the genesis hash,
// each file's first prev_hash being the previous file's last hash. Where an export continues is
// read from the bucket itself (the largest last seq under the prefix and that entry's hash), so a
// restart or a lost local state neither duplicates nor skips entries; when the bucket's last entry
// is not this database's (another server's bucket, or either side tampered with) or the database
// chain does not hash, the export stops, logs an error and says so in status().
//
//   SOVAI_ASSIGN_OR_RETURN(AuditExportTarget target, ParseAuditExportTarget("audit-bkt/audit/"));
//   SOVAI_ASSIGN_OR_RETURN(AuditExportBucket bucket,
//                          AuditExportBucketInStore(store, target.bucket, admin_user));
//   SOVAI_ASSIGN_OR_RETURN(auto exporter,
//                          AuditExporter::Start(*audit, {.bucket = std::move(bucket),
//                                                        .prefix = target.prefix}));
//   ...
//   exporter->Shutdown();  // the final export, before the audit log goes
//
// Two servers on one database: their audit logs are one chain (audit.h), exported once, by the
// leader (AuditExportOptions::is_leader). A follower's thread keeps its period but skips the
// export, and its Shutdown makes no final export (the leader's next export takes those entries);
// the leader's next round continues from the bucket, so leadership moving neither duplicates
// nor skips entries. ExportOnce, called explicitly, exports on any server.
//
// Thread-safety: AuditExporter's methods may be called from any thread (exports are serialized).
// The bucket's callbacks are called from the exporter's thread and from callers of ExportOnce and
// Shutdown, one at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "control/audit.h"
#include "control/limits.h"

namespace sovai::objstore {
class Store;
}

namespace sovai::control {

// Where `--audit-export BUCKET[/PREFIX]` points.
struct AuditExportTarget {
  std::string bucket;
  std::string prefix;  // ends with '/'
};

// "bkt" → {bkt, "audit/"}; "bkt/logs" and "bkt/logs/" → {bkt, "logs/"}. InvalidArgument for a bad
// bucket name (the S3 rules) or prefix (empty after the '/', or not a valid key).
base::Result<AuditExportTarget> ParseAuditExportTarget(std::string_view text);

// `--audit-export-interval`: "90s", "10m", "1h", "1d", "1h30m" or bare seconds; from
// kAuditExportMinInterval to kAuditExportMaxInterval. InvalidArgument otherwise.
base::Result<std::chrono::seconds> ParseAuditExportInterval(std::string_view text);

// The destination bucket as three calls (the in-process object store in `sovai server`, a map in
// tests). Errors are passed on as the export's error.
struct AuditExportBucket {
  std::string name;  // for messages
  // Stores `bytes` under `key`, atomically (a reader sees all of it or nothing) and only when no
  // object has that key (an existing key is an error, never overwritten).
  std::function<base::Status(const std::string& key, std::string bytes)> put_object;
  // Every key that starts with `prefix`, in any order.
  std::function<base::Result<std::vector<std::string>>(const std::string& prefix)> list_keys;
  // The object's bytes; at most kAuditExportMaxObjectBytes are expected (more is an error).
  std::function<base::Result<std::string>(const std::string& key)> get_object;
};

// The bucket `bucket` of `store`, created owned by `owner` (a user id, e.g. the bootstrap admin)
// when it does not exist. Objects are written with If-None-Match: * semantics and the bucket's
// owner, content type application/x-ndjson. Errors: the store's (as Unavailable, or
// InvalidArgument for a bad name).
base::Result<AuditExportBucket> AuditExportBucketInStore(objstore::Store& store,
                                                         const std::string& bucket,
                                                         const std::string& owner);

struct AuditExportOptions {
  AuditExportBucket bucket;
  std::string prefix = "audit/";  // "" = the bucket's root
  // Time between exports (the first runs at Start). 0: no thread; call ExportOnce (tests).
  std::chrono::milliseconds interval = kAuditExportDefaultInterval;
  int64_t max_entries_per_object = kAuditExportMaxEntriesPerObject;  // 1.. that
  size_t max_object_bytes = kAuditExportMaxObjectBytes;              // 1.. that
  base::Env* env = nullptr;  // clock of the status' times; nullptr = base::Env::Default()
  // Two servers on one database (docs/state.md): whether this server leads, asked before each
  // periodic export and before the final one of Shutdown. nullptr = always (one server). See
  // "Two servers" above.
  std::function<bool()> is_leader;
};

struct AuditExportResult {
  int64_t objects = 0;       // written by this export
  int64_t entries = 0;       // written by this export
  int64_t exported_seq = 0;  // the bucket's last entry afterwards (0 = none)
};

// What /metrics and an operator see.
struct AuditExportStatus {
  bool ok = true;  // false while the last export failed
  // The last export stopped because the chain does not continue: the bucket's last entry is not
  // this database's, or the database's entries after it do not hash. Exporting resumes only once
  // that is resolved (it is checked again each time).
  bool chain_error = false;
  std::string error;         // the last failure ("" when ok)
  int64_t exported_seq = 0;  // the bucket's last entry as of the last export
  int64_t last_success_unix_us = 0;
  uint64_t exports = 0;  // successful ones
  uint64_t failures = 0;
  uint64_t objects_written = 0;
  uint64_t entries_written = 0;
};

class AuditExporter {
 public:
  // Checks the options (InvalidArgument: missing callbacks, limits out of range, a prefix that is
  // not "" and does not end with '/') and starts the thread when interval > 0. `audit` must
  // outlive the exporter.
  static base::Result<std::unique_ptr<AuditExporter>> Start(AuditLog& audit,
                                                            AuditExportOptions options);
  ~AuditExporter();  // Shutdown()
  AuditExporter(const AuditExporter&) = delete;
  AuditExporter& operator=(const AuditExporter&) = delete;

  // Exports now every entry after the bucket's last one (written entries only: Flush the log
  // first to include queued ones). Objects already written stay when a later one fails; the next
  // export continues after them. Errors: FailedPrecondition for a chain error (see
  // AuditExportStatus::chain_error), DataLoss for a bucket object that is not an export file, the
  // bucket's and the database's errors.
  base::Result<AuditExportResult> ExportOnce();

  // Stops the thread, flushes the audit log and exports what remains (the final export; on a
  // follower none: OK). Returns that export's error. Idempotent: later calls return OK without
  // exporting.
  base::Status Shutdown();

  AuditExportStatus status() const;
  // Prometheus text (sovai_audit_export_*): ok, chain_error, exported_seq, last success time,
  // exports, failures, objects and entries written.
  std::string RenderMetrics() const;

 private:
  AuditExporter(AuditLog& audit, AuditExportOptions options, base::Env& env);
  void Loop();
  // Whether this server exports (options_.is_leader, or true without one).
  bool Leading() const;
  // One export under export_mu_; `progress` counts what was written even when it fails later.
  base::Status Export(AuditExportResult& progress, bool& chain_error);
  // Reads the bucket's last entry (seq, hash) into tail_*_ (the object only when its key is not
  // tail_key_). FailedPrecondition when that entry does not hash.
  base::Status ReadBucketTail();

  AuditLog& audit_;
  const AuditExportOptions options_;
  base::Env& env_;

  std::mutex export_mu_;  // serializes exports; guards the bucket's tail below
  std::string tail_key_;  // the key holding the bucket's last entry ("" = none)
  int64_t tail_seq_ = 0;
  std::string tail_hash_ = kAuditGenesisHash;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable wake_;
  AuditExportStatus status_;
  bool stop_ = false;
  bool shut_down_ = false;

  std::thread thread_;  // last: started after everything it uses
};

// One downloaded export file: its name (the key or its last component; "" = unnamed, not checked
// against the contents) and its bytes.
struct AuditExportFile {
  std::string name;
  std::string contents;
};

// Walks exported files given in key order (as listed, or sorted by name), from the genesis hash,
// and reports the first bad entry like AuditLog::Verify: a line that does not hash (modified), a
// seq gap (removed: a line or a whole file), an entry out of place (reordered), a malformed or
// over-long line, a file that does not end with a newline (truncated) or whose name disagrees
// with its first or last entry. `entries` counts the entries that verified.
AuditVerifyReport VerifyAuditExport(const std::vector<AuditExportFile>& files);

// The object name of entries first..last below `prefix`.
std::string AuditExportKey(std::string_view prefix, int64_t first_seq, int64_t last_seq);
// One entry as its exported JSON line, '\n' included. A field that is not valid UTF-8 is written
// as "<field>_base64" (its bytes in base64) so that the line hashes to the same value.
std::string AuditExportLine(const AuditEntry& entry);

}  // namespace sovai::control
