// Token metering (docs/api/apps.md, "Usage"): reads the OpenAI "usage" of an answer as it
// streams through the gateway, and sums it per app, token and project for billing.
//
//   gateway::UsageScanner scanner(gateway::IsEventStream(content_type));
//   for each piece of the answer's body on its way to the client: scanner.Feed(piece);
//   at the end: ledger.Add({app_id, token_id, project_id}, scanner.usage().value_or({}));
//   periodically: for (const UsageRow& row : ledger.Take()) ... persist ...
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/limits.h"

namespace sovai::gateway {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t total_tokens = 0;

  friend bool operator==(const Usage&, const Usage&) = default;
};

// Whether a Content-Type is Server-Sent Events ("text/event-stream", any case, any parameters).
bool IsEventStream(std::string_view content_type);

// Finds the "usage" of one answer body fed in pieces of any size.
//
// JSON (sse false): the body is buffered (up to kMaxUsageScanBodyBytes; beyond, the scanner
// gives up and usage() stays nullopt) and usage() is the top-level "usage" object once the whole
// body has been fed.
// SSE (sse true): events are split on blank lines (LF, CRLF or CR), the "data:" lines of an event
// are joined, and each event's JSON is read; usage() is the last non-null "usage" seen so far.
// "[DONE]", comments, other fields and events that are not JSON are skipped. A line or event
// longer than kMaxUsageSseEventBytes is skipped whole (memory stays bounded); later events still
// count.
// A "usage" counts only as an object whose token fields, where present, are integers >= 0;
// total_tokens defaults to prompt + completion. Malformed input never fails: it yields nullopt.
//
// Thread-safety: none; one scanner per answer.
class UsageScanner {
 public:
  explicit UsageScanner(bool sse);

  void Feed(std::string_view bytes);
  std::optional<Usage> usage() const;
  // JSON only: the body outgrew kMaxUsageScanBodyBytes.
  bool gave_up() const { return gave_up_; }

 private:
  void FeedSse(std::string_view bytes);
  void AppendToLine(std::string_view piece);
  void EndLine();
  void EndEvent();

  const bool sse_;
  std::string buffer_;  // JSON: the body so far; SSE: the current line
  bool gave_up_ = false;
  // JSON: the body is parsed at most once per Feed (usage() may be called repeatedly).
  mutable bool parsed_ = false;
  mutable std::optional<Usage> usage_;
  // SSE state.
  bool line_too_long_ = false;
  bool skip_lf_ = false;  // the last line ended with CR: a following LF belongs to it
  std::string event_data_;
  bool event_has_data_ = false;
  bool event_too_long_ = false;
};

// Who used what.
struct UsageKey {
  std::string app;
  std::string token_id;  // empty for unsecure_http apps
  std::string project;

  friend auto operator<=>(const UsageKey&, const UsageKey&) = default;
};

struct UsageRow {
  UsageKey key;
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// Sums of usage per key since the last Take(). At most max_rows keys: usage of a new key beyond
// that is dropped (counted in dropped_requests()); call Take() often enough (keys are tokens in
// use, so this does not happen in practice).
//
// Thread-safety: every method may be called from any thread.
class UsageLedger {
 public:
  explicit UsageLedger(size_t max_rows = kMaxUsageLedgerRows);
  UsageLedger(const UsageLedger&) = delete;
  UsageLedger& operator=(const UsageLedger&) = delete;

  // One request, with its usage (Usage{} when the answer had none). False when dropped.
  bool Add(const UsageKey& key, const Usage& usage);
  // All rows, ordered by key.
  std::vector<UsageRow> Snapshot() const;
  // All rows, ordered by key, and starts over from zero (for persisting deltas).
  std::vector<UsageRow> Take();
  uint64_t dropped_requests() const;

 private:
  const size_t max_rows_;
  mutable std::mutex mu_;
  std::map<UsageKey, UsageRow> rows_;  // guarded by mu_
  uint64_t dropped_ = 0;               // guarded by mu_
};

}  // namespace sovai::gateway
