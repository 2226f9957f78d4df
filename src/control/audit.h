// The audit log (docs/audit.md): who did what to which resource, when, from where, with what
// result, for every mutating /v1 call, every S3 request and every gateway call. Entries live in
// the `audit_log` table of control.db, append only and hash-chained:
//
//   hash(n) = SHA-256(raw prev_hash(n) || Canonical(entry n)),  prev_hash(n) = hash(n - 1),
//   prev_hash(1) = 32 zero bytes; Canonical = "<len>:<bytes>" for seq, at, actor_user,
//   actor_token, project, action, resource, source, result, detail (integers in decimal).
//
//   SOVAI_ASSIGN_OR_RETURN(auto audit, AuditLog::Open(control->db()));
//   audit->Append({.actor_user = "usr_..", .action = "POST /v1/jobs", .result = 201});
//   SOVAI_ASSIGN_OR_RETURN(AuditVerifyReport report, audit->Verify());
//
// Append() only queues: one writer thread assigns sequence numbers and writes batches, so the
// request path never waits for the database. The writer reads the chain's tail (the last seq and
// hash) inside the same ControlDb::Write that appends the batch, and Writes are serialized across
// every process of a database: several servers sharing one PostgreSQL database (or several
// AuditLogs on one control.db) append to one gapless chain, in the order their Writes ran. A full
// queue (kAuditQueueLimit) drops the event, counts it (dropped()), logs it, and the writer then
// appends an "AUDIT DROPPED" entry naming how many were lost, so that the loss itself is in the
// chain.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "control/db.h"

namespace sovai::control {

struct AuditEvent {
  int64_t at_us = 0;        // Unix microseconds; 0 = when the writer takes it
  std::string actor_user;   // user id (or S3 principal); "" = unauthenticated
  std::string actor_token;  // API token id or S3 access key id; "" = none
  std::string project;      // the project acted in (or the S3 key's principal)
  std::string action;       // "POST /v1/jobs", "S3 GET", "APP POST", "CATALOG POST"
  std::string resource;     // the path: "/v1/jobs/job_01..", "/bucket/key"
  std::string source;       // remote address "ip:port"
  int result = 0;           // HTTP status
  std::string detail;
};

struct AuditEntry {
  int64_t seq = 0;
  AuditEvent event;
  std::string prev_hash;  // lowercase hex
  std::string hash;       // lowercase hex
};

// The canonical bytes an entry's hash covers (exposed so tests and auditors can check it).
std::string AuditCanonical(int64_t seq, const AuditEvent& event);
// Lowercase hex of SHA-256(HexDecode(prev_hash_hex) || AuditCanonical(seq, event)).
std::string AuditHash(std::string_view prev_hash_hex, int64_t seq, const AuditEvent& event);
// 64 '0': the prev_hash of entry 1.
inline constexpr char kAuditGenesisHash[] =
    "0000000000000000000000000000000000000000000000000000000000000000";

struct AuditFilter {
  std::optional<int64_t> from_us;  // at >= from
  std::optional<int64_t> to_us;    // at < to
  std::string actor;               // user id or token id; "" = any
  std::string project;             // "" = any
  std::string action_prefix;       // "POST /v1/jobs", "S3"; "" = any
  int64_t limit = 50;              // 1..kMaxPageSize
  int64_t after_seq = 0;           // the cursor: entries with seq > after_seq, ascending
};

struct AuditPage {
  std::vector<AuditEntry> items;
  std::optional<int64_t> next_cursor;  // set when more entries may follow
};

struct AuditVerifyReport {
  bool ok = true;
  int64_t entries = 0;               // entries walked
  std::optional<int64_t> first_bad;  // the sequence number where the chain breaks
  std::string problem;               // why: "modified", "removed", "reordered", with details
};

struct AuditLogOptions {
  base::Env* env = nullptr;  // clock; nullptr = base::Env::Default()
  size_t queue_limit = 0;    // 0 = kAuditQueueLimit (tests pass small ones)
};

class AuditLog {
 public:
  // Reads the chain's last seq (for Verify) and starts the writer. Errors: the database's.
  static base::Result<std::unique_ptr<AuditLog>> Open(ControlDb& db, AuditLogOptions options = {});
  // Writes what is queued, then stops the writer.
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Queues the event; never blocks beyond a mutex. Fields longer than kMaxAuditFieldBytes are cut.
  void Append(AuditEvent event);
  // Waits until everything queued before the call is written (or failed to be). Returns the
  // last write error, if any.
  base::Status Flush();

  // Entries matching `filter`, ascending by seq, every event appended before the call included
  // (it waits for the writer). InvalidArgument for a bad limit.
  base::Result<AuditPage> List(const AuditFilter& filter);
  // Walks the whole chain (in chunks, not holding the database lock throughout), every event
  // appended before the call included. The report says
  // where and why it is broken; errors are only the database's.
  base::Result<AuditVerifyReport> Verify();

  uint64_t dropped() const;

 private:
  AuditLog(ControlDb& db, base::Env& env, size_t queue_limit, int64_t last_seq);
  void WriterLoop();
  base::Status WriteBatch(std::vector<AuditEvent>& batch);

  ControlDb& db_;
  base::Env& env_;
  const size_t queue_limit_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable wake_;
  std::condition_variable written_;
  std::deque<AuditEvent> queue_;
  uint64_t dropped_total_ = 0;
  uint64_t dropped_unrecorded_ = 0;  // drops not yet written as an "AUDIT DROPPED" entry
  uint64_t enqueued_ = 0;            // events queued ever
  uint64_t done_ = 0;                // events written or failed
  base::Status last_error_;
  bool stop_ = false;
  // The last seq this process wrote (or found at Open): Verify's check that the chain's end was
  // not cut off. Not where appending continues (that is read in the appending Write).
  int64_t last_seq_;

  std::thread writer_;  // last: started after everything it uses
};

}  // namespace sovai::control
