#include "control/audit_export.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <utility>

#include "base/crypto.h"
#include "base/duration.h"
#include "base/json.h"
#include "base/log.h"
#include "base/strings.h"
#include "base/utf8.h"
#include "net/http.h"
#include "objstore/names.h"
#include "objstore/store.h"

namespace sovai::control {

namespace {

using base::InvalidArgumentError;

constexpr char kSuffix[] = ".jsonl";
constexpr int kSeqDigits = 20;  // enough for every int64_t

// The free-text fields of an entry, in the order AuditExportLine writes them around `result`.
struct TextField {
  const char* name;
  std::string AuditEvent::*member;
};
constexpr TextField kTextFields[] = {
    {"actor_user", &AuditEvent::actor_user}, {"actor_token", &AuditEvent::actor_token},
    {"project", &AuditEvent::project},       {"action", &AuditEvent::action},
    {"resource", &AuditEvent::resource},     {"source", &AuditEvent::source},
    {"detail", &AuditEvent::detail},
};

void AppendTextField(std::string& out, std::string_view name, std::string_view value) {
  out += ",\"";
  out += name;
  if (base::IsValidUtf8(value)) {
    out += "\":";
    base::AppendJsonQuoted(&out, value);
  } else {
    // JSON strings are Unicode: bytes that are not UTF-8 would come back altered.
    out += "_base64\":\"";
    out += base::Base64Encode(value);
    out += '"';
  }
}

bool IsKnownField(std::string_view name) {
  if (name == "seq" || name == "at_us" || name == "result" || name == "prev_hash" ||
      name == "hash") {
    return true;
  }
  for (const TextField& f : kTextFields) {
    if (name == f.name || name == std::string(f.name) + "_base64") return true;
  }
  return false;
}

base::Result<std::string> GetTextField(const nlohmann::json& doc, const std::string& name) {
  SOVAI_ASSIGN_OR_RETURN(std::optional<std::string> text, base::GetOptionalString(doc, name));
  SOVAI_ASSIGN_OR_RETURN(std::optional<std::string> b64,
                         base::GetOptionalString(doc, name + "_base64"));
  if (text && b64) {
    return InvalidArgumentError("fields '" + name + "' and '" + name + "_base64' are both set");
  }
  if (text) return *std::move(text);
  if (!b64) return InvalidArgumentError("missing required field '" + name + "'");
  auto bytes = base::Base64Decode(*b64);
  if (!bytes.ok()) return bytes.status().WithContext("field '" + name + "_base64'");
  return *std::move(bytes);
}

// One exported line (without its '\n') back into an entry. InvalidArgument naming what is wrong.
base::Result<AuditEntry> ParseLine(std::string_view line) {
  if (line.size() > kMaxAuditExportLineBytes) {
    return InvalidArgumentError("the line is " + std::to_string(line.size()) +
                                " bytes, more than kMaxAuditExportLineBytes (" +
                                std::to_string(kMaxAuditExportLineBytes) + ")");
  }
  SOVAI_ASSIGN_OR_RETURN(
      nlohmann::json doc,
      base::ParseJson(line, {.max_bytes = kMaxAuditExportLineBytes, .max_depth = 1}));
  if (!doc.is_object()) return InvalidArgumentError("the line is not a JSON object");
  // Every field must be one the hash covers: nothing in a verified file is unverified.
  for (const auto& [name, value] : doc.items()) {
    if (!IsKnownField(name)) return InvalidArgumentError("unknown field '" + name + "'");
  }
  AuditEntry e;
  SOVAI_ASSIGN_OR_RETURN(e.seq, base::GetInt(doc, "seq"));
  SOVAI_ASSIGN_OR_RETURN(e.event.at_us, base::GetInt(doc, "at_us"));
  SOVAI_ASSIGN_OR_RETURN(int64_t result, base::GetInt(doc, "result"));
  if (result < INT_MIN || result > INT_MAX) {
    return InvalidArgumentError("field 'result' is out of range");
  }
  e.event.result = static_cast<int>(result);
  for (const TextField& f : kTextFields) {
    SOVAI_ASSIGN_OR_RETURN(e.event.*f.member, GetTextField(doc, f.name));
  }
  SOVAI_ASSIGN_OR_RETURN(e.prev_hash, base::GetString(doc, "prev_hash"));
  SOVAI_ASSIGN_OR_RETURN(e.hash, base::GetString(doc, "hash"));
  return e;
}

// "<first>-<last>.jsonl" (the name without the prefix) → {first, last}.
std::optional<std::pair<int64_t, int64_t>> ParseKeyName(std::string_view name) {
  constexpr size_t kLength = 2 * kSeqDigits + 1 + sizeof(kSuffix) - 1;
  if (name.size() != kLength || name[kSeqDigits] != '-' || !name.ends_with(kSuffix)) {
    return std::nullopt;
  }
  auto digits = [](std::string_view s) -> std::optional<int64_t> {
    if (!std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    auto n = base::ParseInt64(s);
    if (!n.ok()) return std::nullopt;
    return *n;
  };
  auto first = digits(name.substr(0, kSeqDigits));
  auto last = digits(name.substr(kSeqDigits + 1, kSeqDigits));
  if (!first || !last || *first < 1 || *last < *first) return std::nullopt;
  return std::make_pair(*first, *last);
}

base::Status StoreError(const std::string& what, const objstore::S3Error& error) {
  return base::UnavailableError("object store: " + what + ": " + error.ToString());
}

}  // namespace

std::string AuditExportKey(std::string_view prefix, int64_t first_seq, int64_t last_seq) {
  char name[2 * kSeqDigits + 2];
  std::snprintf(name, sizeof name, "%020lld-%020lld", static_cast<long long>(first_seq),
                static_cast<long long>(last_seq));
  return std::string(prefix) + name + kSuffix;
}

std::string AuditExportLine(const AuditEntry& e) {
  std::string out = "{\"seq\":" + std::to_string(e.seq);
  out += ",\"at_us\":" + std::to_string(e.event.at_us);
  for (const TextField& f : kTextFields) {
    if (std::string_view(f.name) == "detail") {
      out += ",\"result\":" + std::to_string(e.event.result);
    }
    AppendTextField(out, f.name, e.event.*f.member);
  }
  AppendTextField(out, "prev_hash", e.prev_hash);
  AppendTextField(out, "hash", e.hash);
  out += "}\n";
  return out;
}

base::Result<AuditExportTarget> ParseAuditExportTarget(std::string_view text) {
  const size_t slash = text.find('/');
  AuditExportTarget target{.bucket = std::string(text.substr(0, slash)), .prefix = "audit/"};
  if (auto bad = objstore::ValidateBucketName(target.bucket)) {
    return InvalidArgumentError("'" + std::string(text) +
                                "' must be BUCKET or BUCKET/PREFIX: " + bad->message);
  }
  if (slash != std::string_view::npos) {
    target.prefix = std::string(text.substr(slash + 1));
    if (target.prefix.empty() || target.prefix.starts_with('/')) {
      return InvalidArgumentError("'" + std::string(text) +
                                  "' has an empty prefix; give BUCKET alone (objects go under "
                                  "audit/) or BUCKET/PREFIX");
    }
    if (!target.prefix.ends_with('/')) target.prefix += '/';
    if (auto bad = objstore::ValidateObjectKey(AuditExportKey(target.prefix, 1, 1))) {
      return InvalidArgumentError("prefix '" + target.prefix + "': " + bad->message);
    }
  }
  return target;
}

base::Result<std::chrono::seconds> ParseAuditExportInterval(std::string_view text) {
  SOVAI_ASSIGN_OR_RETURN(int64_t seconds,
                         base::ParseDurationSeconds(text, kAuditExportMaxInterval.count()));
  if (seconds < kAuditExportMinInterval.count()) {
    return InvalidArgumentError("'" + std::string(text) + "' is shorter than " +
                                std::to_string(kAuditExportMinInterval.count()) +
                                "s, the shortest interval between audit exports");
  }
  return std::chrono::seconds(seconds);
}

base::Result<AuditExportBucket> AuditExportBucketInStore(objstore::Store& store,
                                                         const std::string& bucket,
                                                         const std::string& owner) {
  if (auto bad = objstore::ValidateBucketName(bucket)) {
    return InvalidArgumentError("bucket '" + bucket + "': " + bad->message);
  }
  std::string bucket_owner;
  auto info = store.GetBucket(bucket);
  if (info.ok()) {
    bucket_owner = info->owner;
  } else if (info.error().code == objstore::S3Code::kNoSuchBucket) {
    auto created = store.CreateBucket(bucket, owner);
    if (!created.ok()) return StoreError("creating bucket '" + bucket + "'", created.error());
    bucket_owner = created->owner;
    SOVAI_LOG(INFO).With("bucket", bucket).With("owner", owner)
        << "audit export: created the bucket";
  } else {
    return StoreError("bucket '" + bucket + "'", info.error());
  }

  AuditExportBucket out;
  out.name = bucket;
  objstore::Store* s = &store;
  out.put_object = [s, bucket, bucket_owner](const std::string& key,
                                             std::string bytes) -> base::Status {
    const uint64_t size = bytes.size();
    net::StringBodyReader body(std::move(bytes));
    auto staged = s->Stage(body, {.max_size = size});
    if (!staged.ok()) return StoreError("staging s3://" + bucket + "/" + key, staged.error());
    objstore::PutOptions put{.bucket = bucket, .key = key, .owner = bucket_owner};
    put.meta.content_type = "application/x-ndjson";
    put.if_none_match_star = true;
    auto written = s->Put(put, std::move(*staged));
    if (!written.ok()) {
      if (written.error().code == objstore::S3Code::kPreconditionFailed) {
        return base::AlreadyExistsError("s3://" + bucket + "/" + key + " already exists");
      }
      return StoreError("writing s3://" + bucket + "/" + key, written.error());
    }
    return base::Status();
  };
  out.list_keys = [s, bucket](const std::string& prefix) -> base::Result<std::vector<std::string>> {
    std::vector<std::string> keys;
    objstore::ListOptions list{.prefix = prefix};
    for (;;) {
      auto page = s->List(bucket, list);
      if (!page.ok()) return StoreError("listing s3://" + bucket + "/" + prefix, page.error());
      for (const objstore::ObjectVersion& v : page->objects) keys.push_back(v.key);
      if (!page->truncated) break;
      list.after = page->next_marker;
    }
    return keys;
  };
  out.get_object = [s, bucket](const std::string& key) -> base::Result<std::string> {
    const std::string where = "s3://" + bucket + "/" + key;
    auto head = s->Head(bucket, key, std::nullopt);
    if (!head.ok()) return StoreError("reading " + where, head.error());
    if (head->size > kAuditExportMaxObjectBytes) {
      return base::DataLossError(where + " is " + std::to_string(head->size) +
                                 " bytes, larger than any audit export object");
    }
    auto reader = s->Open(*head, 0, head->size);
    if (!reader.ok()) return StoreError("reading " + where, reader.error());
    std::string bytes(head->size, '\0');
    size_t done = 0;
    while (done < bytes.size()) {
      auto n = (*reader)->Read(bytes.data() + done, bytes.size() - done);
      if (!n.ok()) return n.status().WithContext("reading " + where);
      if (*n == 0) return base::DataLossError(where + " ended early");
      done += *n;
    }
    return bytes;
  };
  return out;
}

// --- AuditExporter ------------------------------------------------------------------------------

base::Result<std::unique_ptr<AuditExporter>> AuditExporter::Start(AuditLog& audit,
                                                                  AuditExportOptions options) {
  const AuditExportBucket& b = options.bucket;
  if (!b.put_object || !b.list_keys || !b.get_object) {
    return InvalidArgumentError("the audit export needs put_object, list_keys and get_object");
  }
  if (!options.prefix.empty() && !options.prefix.ends_with('/')) {
    return InvalidArgumentError("the audit export prefix '" + options.prefix +
                                "' must end with '/'");
  }
  if (options.max_entries_per_object < 1 ||
      options.max_entries_per_object > kAuditExportMaxEntriesPerObject) {
    return InvalidArgumentError("max_entries_per_object must be from 1 to " +
                                std::to_string(kAuditExportMaxEntriesPerObject));
  }
  if (options.max_object_bytes < 1 || options.max_object_bytes > kAuditExportMaxObjectBytes) {
    return InvalidArgumentError("max_object_bytes must be from 1 to " +
                                std::to_string(kAuditExportMaxObjectBytes));
  }
  if (options.interval.count() < 0) {
    return InvalidArgumentError("the audit export interval must not be negative");
  }
  base::Env& env = options.env ? *options.env : base::Env::Default();
  return std::unique_ptr<AuditExporter>(new AuditExporter(audit, std::move(options), env));
}

AuditExporter::AuditExporter(AuditLog& audit, AuditExportOptions options, base::Env& env)
    : audit_(audit), options_(std::move(options)), env_(env) {
  if (options_.interval.count() > 0) thread_ = std::thread([this] { Loop(); });
}

AuditExporter::~AuditExporter() { Shutdown().IgnoreError(); }

bool AuditExporter::Leading() const { return !options_.is_leader || options_.is_leader(); }

void AuditExporter::Loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    // A follower skips its turn: two servers exporting one chain would write overlapping objects.
    if (Leading()) (void)ExportOnce();  // logged and counted in status()
    lock.lock();
    wake_.wait_for(lock, options_.interval, [&] { return stop_; });
  }
}

base::Status AuditExporter::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return base::Status();
    shut_down_ = true;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // What is still queued belongs in the final export; a write error only loses those events.
  if (base::Status flushed = audit_.Flush(); !flushed.ok()) {
    SOVAI_LOG(WARNING) << "audit export: the audit log's last write failed: " << flushed.ToString();
  }
  if (!Leading()) return base::Status();  // the leader exports what this server wrote
  return ExportOnce().status();
}

base::Result<AuditExportResult> AuditExporter::ExportOnce() {
  std::lock_guard export_lock(export_mu_);
  AuditExportResult progress;
  bool chain_error = false;
  base::Status st = Export(progress, chain_error);
  progress.exported_seq = tail_seq_;
  if (chain_error) {
    // Forget the cached tail: the next export reads the whole bucket again (an operator may have
    // resolved it meanwhile).
    tail_key_.clear();
    tail_seq_ = 0;
    tail_hash_ = kAuditGenesisHash;
  }
  if (!st.ok()) {
    SOVAI_LOG(ERROR).With("bucket", options_.bucket.name).With("prefix", options_.prefix)
        << "audit export failed" << (chain_error ? " (the chain does not continue)" : "") << ": "
        << st.ToString();
  }
  {
    std::lock_guard lock(mu_);
    status_.objects_written += progress.objects;
    status_.entries_written += progress.entries;
    status_.exported_seq = progress.exported_seq;
    status_.ok = st.ok();
    status_.chain_error = chain_error;
    status_.error = st.ok() ? "" : st.ToString();
    if (st.ok()) {
      ++status_.exports;
      status_.last_success_unix_us = env_.NowUnixMicros();
    } else {
      ++status_.failures;
    }
  }
  if (!st.ok()) return st;
  return progress;
}

base::Status AuditExporter::ReadBucketTail() {
  // The whole listing each time (keys only, one per export object), so that the bucket, not a
  // cache, says where the export stands: an object deleted from its end is written again.
  const std::string& prefix = options_.prefix;
  SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> keys, options_.bucket.list_keys(prefix));
  std::string best_key;
  int64_t best_last = 0;
  for (const std::string& key : keys) {
    if (!key.starts_with(prefix)) continue;
    auto range = ParseKeyName(std::string_view(key).substr(prefix.size()));
    if (!range) continue;  // not an export object (a README, a folder): not ours to judge
    if (range->second > best_last) {
      best_last = range->second;
      best_key = key;
    }
  }
  if (best_key == tail_key_) return base::Status();  // read before (or both empty)
  if (best_key.empty()) {
    tail_key_.clear();
    tail_seq_ = 0;
    tail_hash_ = kAuditGenesisHash;
    return base::Status();
  }
  const std::string where = "s3://" + options_.bucket.name + "/" + best_key;
  SOVAI_ASSIGN_OR_RETURN(std::string contents, options_.bucket.get_object(best_key));
  if (contents.empty() || contents.back() != '\n') {
    return base::DataLossError(where + " does not end with a newline: not an audit export object");
  }
  const size_t start = contents.rfind('\n', contents.size() - 2);
  std::string_view last_line(contents);
  last_line = last_line.substr(start == std::string::npos ? 0 : start + 1);
  last_line.remove_suffix(1);
  auto entry = ParseLine(last_line);
  if (!entry.ok()) {
    return base::DataLossError(where +
                               "'s last line is not an audit entry: " + entry.status().message());
  }
  if (entry->seq != best_last) {
    return base::DataLossError(where + " is named for entries up to " + std::to_string(best_last) +
                               " but its last line is entry " + std::to_string(entry->seq));
  }
  tail_key_ = best_key;
  tail_seq_ = entry->seq;
  tail_hash_ = entry->hash;
  if (AuditHash(entry->prev_hash, entry->seq, entry->event) != entry->hash) {
    return base::FailedPreconditionError(where + ": entry " + std::to_string(entry->seq) +
                                         " does not hash to its hash (it was modified)");
  }
  return base::Status();
}

base::Status AuditExporter::Export(AuditExportResult& progress, bool& chain_error) {
  auto fail_chain = [&](std::string message) {
    chain_error = true;
    return base::FailedPreconditionError(std::move(message));
  };
  if (base::Status st = ReadBucketTail(); !st.ok()) {
    if (st.code() == base::StatusCode::kFailedPrecondition) return fail_chain(st.message());
    return st;
  }
  const std::string tail_where = "s3://" + options_.bucket.name + "/" + tail_key_;
  if (tail_seq_ > 0) {
    SOVAI_ASSIGN_OR_RETURN(AuditPage page, audit_.List({.limit = 1, .after_seq = tail_seq_ - 1}));
    if (page.items.empty() || page.items[0].seq != tail_seq_) {
      return fail_chain("the bucket's export ends at entry " + std::to_string(tail_seq_) + " (" +
                        tail_where +
                        "), which this database does not have: the bucket holds another "
                        "server's audit log, or entries were removed here; nothing is exported "
                        "until that is resolved");
    }
    if (page.items[0].hash != tail_hash_) {
      return fail_chain("entry " + std::to_string(tail_seq_) + " has hash " + tail_hash_ +
                        " in the bucket (" + tail_where + ") but " + page.items[0].hash +
                        " in this database: the bucket holds another server's audit log, or "
                        "one of them was altered; nothing is exported until that is resolved");
    }
  }

  // Entries are checked as they are read, so that only a chain that continues the bucket's
  // goes out; what verified before a break is still exported.
  int64_t seq = tail_seq_;
  std::string hash = tail_hash_;
  int64_t first = 0;
  int64_t count = 0;
  std::string body;
  auto put = [&]() -> base::Status {
    const std::string key = AuditExportKey(options_.prefix, first, seq);
    SOVAI_RETURN_IF_ERROR(options_.bucket.put_object(key, std::move(body)));
    body.clear();
    tail_key_ = key;
    tail_seq_ = seq;
    tail_hash_ = hash;
    ++progress.objects;
    progress.entries += count;
    count = 0;
    return base::Status();
  };
  std::optional<base::Status> stop;
  while (!stop) {
    SOVAI_ASSIGN_OR_RETURN(AuditPage page, audit_.List({.limit = kMaxPageSize, .after_seq = seq}));
    for (const AuditEntry& e : page.items) {
      if (e.seq != seq + 1) {
        stop = fail_chain("the database's entries " + std::to_string(seq + 1) + ".." +
                          std::to_string(e.seq - 1) + " are missing (run sovai audit verify)");
      } else if (e.prev_hash != hash || AuditHash(e.prev_hash, e.seq, e.event) != e.hash) {
        stop = fail_chain("the database's entry " + std::to_string(e.seq) +
                          " does not continue the chain (run sovai audit verify)");
      }
      if (stop) break;
      std::string line = AuditExportLine(e);
      if (line.size() > kMaxAuditExportLineBytes) {
        stop = base::ResourceExhaustedError("entry " + std::to_string(e.seq) + " is " +
                                            std::to_string(line.size()) +
                                            " bytes as JSON, more than kMaxAuditExportLineBytes (" +
                                            std::to_string(kMaxAuditExportLineBytes) + ")");
        break;
      }
      if (count > 0 && (count >= options_.max_entries_per_object ||
                        body.size() + line.size() > options_.max_object_bytes)) {
        SOVAI_RETURN_IF_ERROR(put());
      }
      if (count == 0) first = e.seq;
      body += line;
      ++count;
      seq = e.seq;
      hash = e.hash;
    }
    if (!page.next_cursor) break;
  }
  if (count > 0) SOVAI_RETURN_IF_ERROR(put());
  return stop.value_or(base::Status());
}

AuditExportStatus AuditExporter::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

std::string AuditExporter::RenderMetrics() const {
  const AuditExportStatus s = status();
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(value) + "\n";
  };
  metric("sovai_audit_export_ok", "gauge", "1 when the last audit export succeeded.", s.ok ? 1 : 0);
  metric("sovai_audit_export_chain_error", "gauge",
         "1 when exporting stopped: the bucket's chain and the database's do not continue.",
         s.chain_error ? 1 : 0);
  metric("sovai_audit_export_exported_seq", "gauge", "The last audit entry in the bucket.",
         s.exported_seq);
  metric("sovai_audit_export_last_success_timestamp_seconds", "gauge",
         "Unix time of the last successful audit export (0: none yet).",
         s.last_success_unix_us / 1'000'000);
  metric("sovai_audit_export_exports_total", "counter", "Successful audit exports.", s.exports);
  metric("sovai_audit_export_failures_total", "counter", "Failed audit exports.", s.failures);
  metric("sovai_audit_export_objects_total", "counter", "Audit export objects written.",
         s.objects_written);
  metric("sovai_audit_export_entries_total", "counter", "Audit entries exported.",
         s.entries_written);
  return out;
}

// --- Offline verification -----------------------------------------------------------------------

AuditVerifyReport VerifyAuditExport(const std::vector<AuditExportFile>& files) {
  // Every line parsed first: the walk then tells a moved entry (found elsewhere) from a missing
  // one.
  struct Item {
    size_t file = 0;
    size_t line = 0;  // 1-based; 0 = the file as a whole
    std::optional<AuditEntry> entry;
    std::string problem;  // when !entry
  };
  std::vector<Item> items;
  for (size_t f = 0; f < files.size(); ++f) {
    std::string_view rest = files[f].contents;
    if (rest.empty()) {
      items.push_back({.file = f, .problem = "removed: the file is empty"});
      continue;
    }
    for (size_t line_no = 1; !rest.empty(); ++line_no) {
      const size_t nl = rest.find('\n');
      if (nl == std::string_view::npos) {
        items.push_back({.file = f,
                         .line = line_no,
                         .problem = "truncated: the file does not end with a newline (an "
                                    "incomplete copy?)"});
        break;
      }
      auto entry = ParseLine(rest.substr(0, nl));
      rest.remove_prefix(nl + 1);
      if (entry.ok()) {
        items.push_back({.file = f, .line = line_no, .entry = *std::move(entry)});
      } else {
        items.push_back({.file = f,
                         .line = line_no,
                         .problem = "malformed: not an audit entry: " + entry.status().message()});
      }
    }
  }
  std::unordered_map<int64_t, size_t> item_of_seq;       // first occurrence
  std::unordered_map<std::string, int64_t> seq_of_hash;  // a reordering's evidence
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].entry) continue;
    item_of_seq.emplace(items[i].entry->seq, i);
    seq_of_hash.emplace(items[i].entry->hash, items[i].entry->seq);
  }

  AuditVerifyReport report;
  auto fail = [&](int64_t seq, std::string problem) {
    report.ok = false;
    report.first_bad = seq;
    report.problem = std::move(problem);
    return report;
  };
  auto file_name = [&](size_t f) {
    return files[f].name.empty() ? "file #" + std::to_string(f + 1) : "'" + files[f].name + "'";
  };
  auto where = [&](const Item& it) {
    return it.line == 0 ? file_name(it.file)
                        : "line " + std::to_string(it.line) + " of " + file_name(it.file);
  };
  int64_t expected = 1;
  std::string prev_hash = kAuditGenesisHash;
  // A file's name must match the entries it holds (a line cut off its end shows only there).
  // Returns the bad seq and the problem.
  int64_t file_first = 0;
  auto name_problem = [&](size_t f) -> std::optional<std::pair<int64_t, std::string>> {
    if (files[f].name.empty()) return std::nullopt;
    std::string_view base = files[f].name;
    if (size_t slash = base.rfind('/'); slash != std::string_view::npos) {
      base.remove_prefix(slash + 1);
    }
    auto range = ParseKeyName(base);
    const int64_t file_last = expected - 1;
    if (!range) {
      return std::make_pair(file_first, "file " + file_name(f) +
                                            " is not named <first seq>-<last seq>.jsonl (20 "
                                            "digits each)");
    }
    if (range->first == file_first && range->second > file_last) {
      return std::make_pair(
          file_last + 1, "removed: file " + file_name(f) + " is named for entries " +
                             std::to_string(range->first) + ".." + std::to_string(range->second) +
                             " but ends at entry " + std::to_string(file_last));
    }
    if (range->first != file_first || range->second != file_last) {
      return std::make_pair(
          std::min(range->first, file_first),
          "file " + file_name(f) + " is named for entries " + std::to_string(range->first) + ".." +
              std::to_string(range->second) + " but holds entries " + std::to_string(file_first) +
              ".." + std::to_string(file_last) + " (files were renamed or lines moved)");
    }
    return std::nullopt;
  };

  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    const bool new_file = i == 0 || items[i - 1].file != it.file;
    if (new_file && i > 0) {
      if (auto bad = name_problem(items[i - 1].file)) return fail(bad->first, bad->second);
    }
    if (!it.entry) return fail(expected, it.problem + " (" + where(it) + ")");
    const AuditEntry& e = *it.entry;
    if (new_file) file_first = e.seq;
    if (e.seq > expected) {
      auto later = item_of_seq.find(expected);
      if (later != item_of_seq.end() && later->second > i) {
        return fail(expected, "reordered: entry " + std::to_string(expected) + " is at " +
                                  where(items[later->second]) + ", after entry " +
                                  std::to_string(e.seq) + " at " + where(it));
      }
      const std::string missing =
          e.seq - 1 == expected
              ? "entry " + std::to_string(expected) + " is"
              : "entries " + std::to_string(expected) + ".." + std::to_string(e.seq - 1) + " are";
      return fail(expected, "removed: " + missing + " missing (" + where(it) + " holds entry " +
                                std::to_string(e.seq) +
                                (it.line == 1 ? "; is a file before it missing?)" : ")"));
    }
    if (e.seq < expected) {
      return fail(expected, "reordered or duplicated: entry " + std::to_string(e.seq) +
                                " appears again at " + where(it) + ", after entry " +
                                std::to_string(expected - 1));
    }
    if (e.prev_hash != prev_hash) {
      auto linked = seq_of_hash.find(e.prev_hash);
      if (linked != seq_of_hash.end() && linked->second != e.seq - 1) {
        return fail(e.seq, "reordered: entry " + std::to_string(e.seq) + " (" + where(it) +
                               ") was written after the entry now numbered " +
                               std::to_string(linked->second) + ", not after entry " +
                               std::to_string(e.seq - 1) + " (sequence numbers were changed)");
      }
      return fail(e.seq, "removed or replaced: entry " + std::to_string(e.seq) + "'s prev_hash (" +
                             where(it) + ") does not match the hash of entry " +
                             std::to_string(e.seq - 1));
    }
    if (AuditHash(e.prev_hash, e.seq, e.event) != e.hash) {
      return fail(e.seq, "modified: entry " + std::to_string(e.seq) + " (" + where(it) +
                             ") does not match its hash (a field was edited)");
    }
    prev_hash = e.hash;
    ++expected;
    ++report.entries;
  }
  if (!items.empty()) {
    if (auto bad = name_problem(items.back().file)) return fail(bad->first, bad->second);
  }
  return report;
}

}  // namespace sovai::control
