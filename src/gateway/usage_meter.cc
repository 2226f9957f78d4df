#include "gateway/usage_meter.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "base/check.h"
#include "base/json.h"
#include "base/strings.h"

namespace sovai::gateway {
namespace {

// A token count: an integer in [0, INT64_MAX]. nullopt for any other value.
std::optional<int64_t> TokenCount(const nlohmann::json& value) {
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return value.get<int64_t>();
  return std::nullopt;
}

// The document's top-level "usage", if it is a well-formed one.
std::optional<Usage> ExtractUsage(const nlohmann::json& doc) {
  if (!doc.is_object()) return std::nullopt;
  auto usage = doc.find("usage");
  if (usage == doc.end() || !usage->is_object()) return std::nullopt;
  Usage out;
  bool any = false;
  bool has_total = false;
  for (auto [name, field] : {std::pair{"prompt_tokens", &out.prompt_tokens},
                             std::pair{"completion_tokens", &out.completion_tokens},
                             std::pair{"total_tokens", &out.total_tokens}}) {
    auto it = usage->find(name);
    if (it == usage->end() || it->is_null()) continue;
    std::optional<int64_t> count = TokenCount(*it);
    if (!count) return std::nullopt;
    *field = *count;
    any = true;
    if (field == &out.total_tokens) has_total = true;
  }
  if (!any) return std::nullopt;
  if (!has_total) {
    out.total_tokens =
        out.prompt_tokens > std::numeric_limits<int64_t>::max() - out.completion_tokens
            ? std::numeric_limits<int64_t>::max()
            : out.prompt_tokens + out.completion_tokens;
  }
  return out;
}

std::optional<Usage> ParseUsage(std::string_view text, size_t max_bytes) {
  // Most events (one token each) carry no usage: skip the parse.
  if (text.find("\"usage\"") == std::string_view::npos) return std::nullopt;
  base::Result<nlohmann::json> doc = base::ParseJson(text, {.max_bytes = max_bytes});
  if (!doc.ok()) return std::nullopt;
  return ExtractUsage(*doc);
}

}  // namespace

bool IsEventStream(std::string_view content_type) {
  return base::EqualsIgnoreCase(base::Trim(content_type.substr(0, content_type.find(';'))),
                                "text/event-stream");
}

UsageScanner::UsageScanner(bool sse) : sse_(sse) {}

void UsageScanner::Feed(std::string_view bytes) {
  if (sse_) {
    FeedSse(bytes);
    return;
  }
  if (gave_up_) return;
  if (buffer_.size() + bytes.size() > kMaxUsageScanBodyBytes) {
    gave_up_ = true;
    std::string().swap(buffer_);  // release the memory, not just the contents
    usage_.reset();
    return;
  }
  buffer_.append(bytes);
  parsed_ = false;
}

std::optional<Usage> UsageScanner::usage() const {
  if (sse_) return usage_;
  if (gave_up_) return std::nullopt;
  if (!parsed_) {
    usage_ = ParseUsage(buffer_, kMaxUsageScanBodyBytes);
    parsed_ = true;
  }
  return usage_;
}

void UsageScanner::FeedSse(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (bytes[i] == '\n') {
        ++i;
        continue;
      }
    }
    size_t eol = bytes.find_first_of("\r\n", i);
    if (eol == std::string_view::npos) {
      AppendToLine(bytes.substr(i));
      return;
    }
    AppendToLine(bytes.substr(i, eol - i));
    skip_lf_ = bytes[eol] == '\r';
    EndLine();
    i = eol + 1;
  }
}

void UsageScanner::AppendToLine(std::string_view piece) {
  if (line_too_long_) return;
  if (buffer_.size() + piece.size() > kMaxUsageSseEventBytes) {
    line_too_long_ = true;
    std::string().swap(buffer_);
    return;
  }
  buffer_.append(piece);
}

void UsageScanner::EndLine() {
  if (line_too_long_) {
    line_too_long_ = false;
    event_too_long_ = true;
    return;
  }
  if (buffer_.empty()) {
    EndEvent();
    return;
  }
  std::string_view line = buffer_;
  size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);  // a line starting with ':' is a comment
  if (colon == 0) {
    // `sovai-engine serve` ends a stream whose client did not ask for usage with the comment
    // `: {"usage": {...}}`: clients skip it, the meter reads it.
    std::string_view comment = base::Trim(line.substr(1));
    if (!comment.empty() && comment.front() == '{') {
      if (std::optional<Usage> usage = ParseUsage(comment, kMaxUsageSseEventBytes)) usage_ = usage;
    }
  } else if (field == "data" && !event_too_long_) {
    std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (event_data_.size() + value.size() + 1 > kMaxUsageSseEventBytes) {
      event_too_long_ = true;
      std::string().swap(event_data_);
    } else {
      if (event_has_data_) event_data_ += '\n';
      event_data_.append(value);
      event_has_data_ = true;
    }
  }
  buffer_.clear();
}

void UsageScanner::EndEvent() {
  if (event_has_data_ && !event_too_long_ && event_data_ != "[DONE]") {
    if (std::optional<Usage> usage = ParseUsage(event_data_, kMaxUsageSseEventBytes)) {
      usage_ = usage;
    }
  }
  event_data_.clear();
  event_has_data_ = false;
  event_too_long_ = false;
}

UsageLedger::UsageLedger(size_t max_rows) : max_rows_(max_rows) {
  SOVAI_CHECK(max_rows >= 1) << "a UsageLedger holds at least one row";
}

bool UsageLedger::Add(const UsageKey& key, const Usage& usage) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rows_.find(key);
  if (it == rows_.end()) {
    if (rows_.size() >= max_rows_) {
      ++dropped_;
      return false;
    }
    it = rows_.emplace(key, UsageRow{.key = key}).first;
  }
  UsageRow& row = it->second;
  ++row.requests;
  row.prompt_tokens += std::max<int64_t>(usage.prompt_tokens, 0);
  row.completion_tokens += std::max<int64_t>(usage.completion_tokens, 0);
  return true;
}

std::vector<UsageRow> UsageLedger::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<UsageRow> out;
  out.reserve(rows_.size());
  for (const auto& [key, row] : rows_) out.push_back(row);
  return out;
}

std::vector<UsageRow> UsageLedger::Take() {
  std::map<UsageKey, UsageRow> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    taken.swap(rows_);
  }
  std::vector<UsageRow> out;
  out.reserve(taken.size());
  for (auto& [key, row] : taken) out.push_back(std::move(row));
  return out;
}

uint64_t UsageLedger::dropped_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

}  // namespace sovai::gateway
