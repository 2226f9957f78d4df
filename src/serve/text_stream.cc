#include "serve/text_stream.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "base/check.h"
#include "base/utf8.h"

namespace sovai::serve {

TokenTable::TokenTable(const model::Tokenizer& tokenizer) {
  size_t n = tokenizer.vocab_size();
  SOVAI_CHECK(n <= static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  kinds_.assign(n, kNone);
  offsets_.reserve(n + 1);
  offsets_.push_back(0);
  for (size_t id = 0; id < n; ++id) {
    std::optional<std::string> bytes = tokenizer.TokenBytes(static_cast<int32_t>(id));
    if (bytes) {
      kinds_[id] = kNormal;
      bytes_ += *bytes;
    }
    // Tokens are at most model::kMaxTokenBytes and ids below model::kMaxVocabSize: 1 GiB at most.
    SOVAI_CHECK(bytes_.size() <= std::numeric_limits<uint32_t>::max());
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  }
  for (const model::AddedToken& token : tokenizer.added_tokens()) {
    if (token.special && static_cast<size_t>(token.id) < n && kinds_[token.id] == kNormal) {
      kinds_[token.id] = kSpecial;
    }
  }
}

std::string_view TokenTable::Bytes(int32_t id) const {
  if (!Contains(id)) return {};
  return std::string_view(bytes_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
}

std::string TokenTable::TokenText(int32_t id) const {
  std::string text;
  base::AppendUtf8Lossy(Bytes(id), /*final=*/true, &text);
  return text;
}

base::Status ValidateStopStrings(std::span<const std::string> stop) {
  if (stop.size() > kMaxStopStrings) {
    return base::InvalidArgumentError("stop has " + std::to_string(stop.size()) +
                                      " strings; at most " + std::to_string(kMaxStopStrings) +
                                      " are allowed");
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    std::string where = "stop[" + std::to_string(i) + "]";
    if (stop[i].empty()) return base::InvalidArgumentError(where + " is empty");
    if (stop[i].size() > kMaxStopStringBytes) {
      return base::InvalidArgumentError(where + " is " + std::to_string(stop[i].size()) +
                                        " bytes; the limit is " +
                                        std::to_string(kMaxStopStringBytes));
    }
    if (!base::IsValidUtf8(stop[i]))
      return base::InvalidArgumentError(where + " is not valid UTF-8");
  }
  return base::Status::Ok();
}

base::Result<IncrementalDecoder> IncrementalDecoder::Create(const TokenTable& table,
                                                            TextStreamOptions options) {
  SOVAI_RETURN_IF_ERROR(ValidateStopStrings(options.stop));
  return IncrementalDecoder(table, std::move(options));
}

TextDelta IncrementalDecoder::Add(int32_t token) {
  SOVAI_CHECK(!finished_) << "Add after Finish";
  ++added_;
  TextDelta delta;
  if (stopped() || !table_->Contains(token) ||
      (options_.skip_special_tokens && table_->IsSpecial(token))) {
    delta.stopped = stopped();
    delta.stop_index = stop_index_;
    return delta;
  }
  pending_bytes_ += table_->Bytes(token);
  std::string text;
  size_t used = base::AppendUtf8Lossy(pending_bytes_, /*final=*/false, &text);
  pending_bytes_.erase(0, used);
  if (added_ <= options_.min_tokens) {
    delta.text = std::move(text);  // before min_tokens: no stop string can start here
    return delta;
  }
  Release(text, /*final=*/false, &delta);
  return delta;
}

TextDelta IncrementalDecoder::Finish() {
  SOVAI_CHECK(!finished_) << "Finish called twice";
  finished_ = true;
  TextDelta delta;
  std::string text;
  base::AppendUtf8Lossy(pending_bytes_, /*final=*/true, &text);
  pending_bytes_.clear();
  Release(text, /*final=*/true, &delta);
  return delta;
}

void IncrementalDecoder::Release(std::string_view text, bool final, TextDelta* delta) {
  if (!stopped()) {
    held_text_ += text;
    // Text already released holds no start of a stop string (that part was held back), so the
    // first stop string, if any, lies within what is held.
    size_t first = std::string::npos;
    for (size_t i = 0; i < options_.stop.size(); ++i) {
      size_t at = held_text_.find(options_.stop[i]);
      if (at < first) {
        first = at;
        stop_index_ = static_cast<int32_t>(i);
      }
    }
    if (first != std::string::npos) {
      delta->text = held_text_.substr(0, first);
      held_text_.clear();
    } else {
      // Hold back the longest end of the text that begins a stop string. Stop strings are valid
      // UTF-8, so this cut falls between characters.
      size_t hold = 0;
      if (!final) {
        for (const std::string& stop : options_.stop) {
          for (size_t k = std::min(stop.size() - 1, held_text_.size()); k > hold; --k) {
            if (std::string_view(held_text_).ends_with(std::string_view(stop).substr(0, k))) {
              hold = k;
              break;
            }
          }
        }
      }
      delta->text = held_text_.substr(0, held_text_.size() - hold);
      held_text_.erase(0, held_text_.size() - hold);
    }
  }
  delta->stopped = stopped();
  delta->stop_index = stop_index_;
}

}  // namespace sovai::serve
