#include "control/audit.h"

#include <utility>

#include "base/crypto.h"
#include "base/log.h"
#include "control/limits.h"

namespace sovai::control {

namespace {

constexpr char kColumns[] =
    "seq, at, actor_user, actor_token, project, action, resource, source, result, detail, "
    "prev_hash, hash";

void AddField(std::string& out, std::string_view field) {
  out += std::to_string(field.size());
  out += ':';
  out += field;
}

// A free-text field is bounded so one request cannot blow up the log; the cut is visible.
void Bound(std::string& field) {
  constexpr std::string_view kCut = "...(cut)";
  if (field.size() > kMaxAuditFieldBytes) {
    field.resize(kMaxAuditFieldBytes - kCut.size());
    field += kCut;
  }
}

AuditEntry ReadEntry(const base::Statement& st) {
  AuditEntry e;
  e.seq = st.ColumnInt(0);
  e.event.at_us = st.ColumnInt(1);
  e.event.actor_user = st.ColumnText(2);
  e.event.actor_token = st.ColumnText(3);
  e.event.project = st.ColumnText(4);
  e.event.action = st.ColumnText(5);
  e.event.resource = st.ColumnText(6);
  e.event.source = st.ColumnText(7);
  e.event.result = static_cast<int>(st.ColumnInt(8));
  e.event.detail = st.ColumnText(9);
  e.prev_hash = st.ColumnText(10);
  e.hash = st.ColumnText(11);
  return e;
}

}  // namespace

std::string AuditCanonical(int64_t seq, const AuditEvent& e) {
  std::string out;
  AddField(out, std::to_string(seq));
  AddField(out, std::to_string(e.at_us));
  AddField(out, e.actor_user);
  AddField(out, e.actor_token);
  AddField(out, e.project);
  AddField(out, e.action);
  AddField(out, e.resource);
  AddField(out, e.source);
  AddField(out, std::to_string(e.result));
  AddField(out, e.detail);
  return out;
}

std::string AuditHash(std::string_view prev_hash_hex, int64_t seq, const AuditEvent& event) {
  // A prev_hash that is not 32 bytes of hex (tampered) hashes as its text, so the result can
  // only mismatch.
  auto prev = base::HexDecode(prev_hash_hex);
  std::string input = prev.ok() ? *prev : std::string(prev_hash_hex);
  input += AuditCanonical(seq, event);
  return base::HexEncode(base::Sha256(input));
}

base::Result<std::unique_ptr<AuditLog>> AuditLog::Open(ControlDb& db, AuditLogOptions options) {
  base::Env& env = options.env ? *options.env : base::Env::Default();
  // The tail as of now, for Verify's check that nothing was cut off the end; appending reads the
  // tail afresh each time.
  int64_t last_seq = 0;
  SOVAI_RETURN_IF_ERROR(db.Read([&](base::Database& sql) -> base::Status {
    SOVAI_ASSIGN_OR_RETURN(auto st,
                           sql.Prepare("SELECT seq FROM audit_log ORDER BY seq DESC LIMIT 1"));
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (row) last_seq = st.ColumnInt(0);
    return base::Status();
  }));
  const size_t limit = options.queue_limit ? options.queue_limit : kAuditQueueLimit;
  return std::unique_ptr<AuditLog>(new AuditLog(db, env, limit, last_seq));
}

AuditLog::AuditLog(ControlDb& db, base::Env& env, size_t queue_limit, int64_t last_seq)
    : db_(db), env_(env), queue_limit_(queue_limit), last_seq_(last_seq), writer_([this] {
        WriterLoop();
      }) {}

AuditLog::~AuditLog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  writer_.join();
}

void AuditLog::Append(AuditEvent event) {
  if (event.at_us == 0) event.at_us = env_.NowUnixMicros();
  Bound(event.resource);
  Bound(event.detail);
  Bound(event.action);
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= queue_limit_) {
      ++dropped_total_;
      // Log the first drop of a run of drops, not each one (the log must not become the problem).
      if (dropped_unrecorded_++ == 0) {
        SOVAI_LOG(WARNING).With("queue_limit", std::to_string(queue_limit_))
            << "audit: queue full, dropping events (an AUDIT DROPPED entry will count them)";
      }
      return;
    }
    queue_.push_back(std::move(event));
    ++enqueued_;
  }
  wake_.notify_one();
}

base::Status AuditLog::Flush() {
  std::unique_lock lock(mu_);
  const uint64_t target = enqueued_;
  written_.wait(lock, [&] { return done_ >= target; });
  return last_error_;
}

uint64_t AuditLog::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_total_;
}

void AuditLog::WriterLoop() {
  for (;;) {
    std::vector<AuditEvent> batch;
    size_t taken = 0;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty() || dropped_unrecorded_ > 0; });
      if (queue_.empty() && dropped_unrecorded_ == 0 && stop_) return;
      if (dropped_unrecorded_ > 0) {
        batch.push_back({.at_us = env_.NowUnixMicros(),
                         .action = "AUDIT DROPPED",
                         .detail = std::to_string(dropped_unrecorded_) +
                                   " events dropped: the audit queue (" +
                                   std::to_string(queue_limit_) + ") was full"});
        dropped_unrecorded_ = 0;
      }
      while (!queue_.empty() && batch.size() < kAuditWriteBatch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
        ++taken;
      }
    }
    base::Status st = WriteBatch(batch);
    if (!st.ok()) {
      SOVAI_LOG(ERROR).With("events", std::to_string(batch.size()))
          << "audit: writing entries failed, they are lost: " << st.ToString();
    }
    {
      std::lock_guard lock(mu_);
      done_ += taken;
      if (!st.ok()) {
        last_error_ = st;
        dropped_total_ += taken;
      }
    }
    written_.notify_all();
  }
}

base::Status AuditLog::WriteBatch(std::vector<AuditEvent>& batch) {
  // The tail is read inside the Write that appends: Writes are serialized across every process
  // of the database (db.h), so two servers appending to one database continue one chain.
  int64_t new_seq = 0;
  std::string new_hash;
  SOVAI_RETURN_IF_ERROR(db_.Write([&](base::Database& sql) -> base::Status {
    new_seq = 0;
    new_hash = kAuditGenesisHash;
    SOVAI_ASSIGN_OR_RETURN(
        auto tail, sql.Prepare("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1"));
    SOVAI_ASSIGN_OR_RETURN(bool row, tail.Step());
    if (row) {
      new_seq = tail.ColumnInt(0);
      new_hash = tail.ColumnText(1);
    }
    SOVAI_ASSIGN_OR_RETURN(
        auto st, sql.Prepare("INSERT INTO audit_log(seq, at, actor_user, actor_token, project, "
                             "action, resource, source, result, detail, prev_hash, hash) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    for (const AuditEvent& e : batch) {
      ++new_seq;
      std::string entry_hash = AuditHash(new_hash, new_seq, e);
      st.Reset();
      st.Bind(1, new_seq)
          .Bind(2, e.at_us)
          .Bind(3, e.actor_user)
          .Bind(4, e.actor_token)
          .Bind(5, e.project)
          .Bind(6, e.action)
          .Bind(7, e.resource)
          .Bind(8, e.source)
          .Bind(9, static_cast<int64_t>(e.result))
          .Bind(10, e.detail)
          .Bind(11, new_hash)
          .Bind(12, entry_hash);
      SOVAI_RETURN_IF_ERROR(st.Run());
      new_hash = std::move(entry_hash);
    }
    return base::Status();
  }));
  std::lock_guard lock(mu_);
  last_seq_ = new_seq;
  return base::Status();
}

base::Result<AuditPage> AuditLog::List(const AuditFilter& filter) {
  if (filter.limit < 1 || filter.limit > kMaxPageSize) {
    return base::InvalidArgumentError("limit must be from 1 to " + std::to_string(kMaxPageSize));
  }
  // Read-your-writes: a call's entry is queued before its answer goes out, so a caller that
  // lists right after it must find it. (A past write error is not this read's.)
  Flush().IgnoreError();
  std::string sql = std::string("SELECT ") + kColumns + " FROM audit_log WHERE seq > ?";
  if (filter.from_us) sql += " AND at >= ?";
  if (filter.to_us) sql += " AND at < ?";
  if (!filter.actor.empty()) sql += " AND (actor_user = ? OR actor_token = ?)";
  if (!filter.project.empty()) sql += " AND project = ?";
  // substr instead of LIKE: no escaping of '%' and '_' in user input.
  if (!filter.action_prefix.empty()) sql += " AND substr(action, 1, length(?)) = ?";
  sql += " ORDER BY seq LIMIT ?";
  AuditPage page;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](base::Database& db) -> base::Status {
    SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare(sql));
    int i = 1;
    st.Bind(i++, filter.after_seq);
    if (filter.from_us) st.Bind(i++, *filter.from_us);
    if (filter.to_us) st.Bind(i++, *filter.to_us);
    if (!filter.actor.empty()) {
      st.Bind(i, filter.actor).Bind(i + 1, filter.actor);
      i += 2;
    }
    if (!filter.project.empty()) st.Bind(i++, filter.project);
    if (!filter.action_prefix.empty()) {
      st.Bind(i, filter.action_prefix).Bind(i + 1, filter.action_prefix);
      i += 2;
    }
    st.Bind(i++, filter.limit + 1);
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      page.items.push_back(ReadEntry(st));
    }
    return base::Status();
  }));
  if (static_cast<int64_t>(page.items.size()) > filter.limit) {
    page.items.resize(filter.limit);
    page.next_cursor = page.items.back().seq;
  }
  return page;
}

base::Result<AuditVerifyReport> AuditLog::Verify() {
  Flush().IgnoreError();  // as List: what was queued before the call is walked too
  // Every entry up to the last one this process wrote (or saw at Open) must exist (catches a
  // cut-off end).
  int64_t written_tail;
  {
    std::lock_guard lock(mu_);
    written_tail = last_seq_;
  }
  AuditVerifyReport report;
  int64_t expected = 1;
  std::string prev_hash = kAuditGenesisHash;
  auto fail = [&](int64_t seq, std::string problem) {
    report.ok = false;
    report.first_bad = seq;
    report.problem = std::move(problem);
  };
  // The seq of the entry whose hash is `hash`, when some entry has it (a reordering's evidence).
  auto seq_of_hash = [&](const std::string& hash) -> base::Result<std::optional<int64_t>> {
    std::optional<int64_t> found;
    SOVAI_RETURN_IF_ERROR(db_.Read([&](base::Database& db) -> base::Status {
      SOVAI_ASSIGN_OR_RETURN(auto st, db.Prepare("SELECT seq FROM audit_log WHERE hash = ?"));
      st.Bind(1, hash);
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (row) found = st.ColumnInt(0);
      return base::Status();
    }));
    return found;
  };
  for (;;) {
    std::vector<AuditEntry> chunk;
    SOVAI_RETURN_IF_ERROR(db_.Read([&](base::Database& db) -> base::Status {
      SOVAI_ASSIGN_OR_RETURN(auto st,
                             db.Prepare(std::string("SELECT ") + kColumns +
                                        " FROM audit_log WHERE seq >= ? ORDER BY seq LIMIT ?"));
      st.Bind(1, expected).Bind(2, kAuditVerifyChunk);
      for (;;) {
        SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
        if (!row) break;
        chunk.push_back(ReadEntry(st));
      }
      return base::Status();
    }));
    if (chunk.empty()) break;
    for (const AuditEntry& e : chunk) {
      if (e.seq != expected) {
        fail(expected, "removed: entries " + std::to_string(expected) + ".." +
                           std::to_string(e.seq - 1) + " are missing (entry " +
                           std::to_string(e.seq) + " follows entry " +
                           std::to_string(expected - 1) + ")");
        return report;
      }
      if (e.prev_hash != prev_hash) {
        SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> linked, seq_of_hash(e.prev_hash));
        if (linked && *linked != e.seq - 1) {
          fail(e.seq, "reordered: entry " + std::to_string(e.seq) +
                          " was written after the entry now numbered " + std::to_string(*linked) +
                          ", not after entry " + std::to_string(e.seq - 1) +
                          " (sequence numbers were changed)");
        } else {
          fail(e.seq, "removed or replaced: entry " + std::to_string(e.seq) +
                          "'s prev_hash does not match the hash of entry " +
                          std::to_string(e.seq - 1) + " (an entry before it was removed and the " +
                          "rest renumbered, or entry " + std::to_string(e.seq - 1) +
                          " was rewritten)");
        }
        return report;
      }
      if (AuditHash(e.prev_hash, e.seq, e.event) != e.hash) {
        fail(e.seq, "modified: entry " + std::to_string(e.seq) +
                        "'s fields do not match its hash (a field was edited)");
        return report;
      }
      prev_hash = e.hash;
      ++expected;
      ++report.entries;
    }
  }
  if (expected - 1 < written_tail) {
    fail(
        expected,
        "removed: entries " + std::to_string(expected) + ".." + std::to_string(written_tail) +
            " were in the chain when this server last wrote to (or opened) it but are missing from "
            "its end");
  }
  return report;
}

}  // namespace sovai::control
