// Text stream: generated token ids to the text a client may be sent so far, one token at a time,
// with OpenAI's stop strings.
//
//   TokenTable table(tokenizer);                       // once per model
//   SOVAI_ASSIGN_OR_RETURN(IncrementalDecoder stream,
//                          IncrementalDecoder::Create(table, {.stop = request.stop}));
//   TextDelta delta = stream.Add(token);               // per generated token
//   ... send delta.text; end the choice when delta.stopped ...
//   TextDelta last = stream.Finish();                  // when the choice ends another way
//
// What Add emits:
//   * complete UTF-8 only. A trailing incomplete character is held back until its next bytes
//     come; bytes that cannot be UTF-8 become U+FFFD, one per maximal invalid subpart (the WHATWG
//     decoder, as Tokenizer::Decode). Finish flushes a character that never completed as U+FFFD.
//   * no special tokens (added tokens marked "special": <|eot_id|>, ...) unless
//     skip_special_tokens is off. They are dropped before decoding, as Decode does, so a
//     character split around one still joins up.
//   * no stop string, nor anything after one. Text that could be the start of a stop string is
//     held back until it is known not to be one; when a stop string appears, the text ends just
//     before it and the delta says stopped (with the index of the stop string that appears
//     first in the text; of several starting at the same place, the first listed).
//   * token ids without a token (a model's padded logits) contribute nothing.
// Streamed deltas concatenated, Finish included, equal Tokenizer::Decode of the same ids with
// skip_special_tokens and the text cut before the first stop string, on byte-level tokenizers.
// On SentencePiece-style ones each token is decoded as a continuation (Tokenizer::TokenBytes),
// so a text that starts with "▁Hi" streams " Hi" where Decode of the whole gives "Hi".
//
// Thread-safety: a TokenTable is immutable and shared by every sequence; an IncrementalDecoder
// belongs to one sequence and is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "model/tokenizer.h"

namespace sovai::serve {

// OpenAI's limit on `stop`, and ours on each one (UTF-8 bytes).
inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxStopStringBytes = 256;

// The bytes of every token of a tokenizer (Tokenizer::TokenBytes) and which are special,
// computed once per model.
class TokenTable {
 public:
  explicit TokenTable(const model::Tokenizer& tokenizer);

  // Ids [0, size()) may have a token; others never do.
  size_t size() const { return kinds_.size(); }
  bool Contains(int32_t id) const { return Kind(id) != kNone; }
  bool IsSpecial(int32_t id) const { return Kind(id) == kSpecial; }
  // The raw bytes the token stands for (possibly part of a UTF-8 character; OpenAI's logprobs
  // `bytes`); empty for an id without a token.
  std::string_view Bytes(int32_t id) const;
  // The token as text (logprobs' `token`): its bytes with invalid or incomplete UTF-8 replaced
  // by U+FFFD; empty for an id without a token.
  std::string TokenText(int32_t id) const;

 private:
  enum TokenKind : uint8_t { kNone, kNormal, kSpecial };
  TokenKind Kind(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < kinds_.size() ? kinds_[id] : kNone;
  }
  std::string bytes_;              // every token's bytes, in id order
  std::vector<uint32_t> offsets_;  // token id's bytes are [offsets_[id], offsets_[id + 1])
  std::vector<TokenKind> kinds_;
};

struct TextStreamOptions {
  // At most kMaxStopStrings, each 1..kMaxStopStringBytes bytes of valid UTF-8.
  std::vector<std::string> stop;
  bool skip_special_tokens = true;
  // vLLM's min_tokens: the text of the first min_tokens tokens is never searched for stop
  // strings (nor held back for them); a stop string must start after it.
  int64_t min_tokens = 0;
};

// OK when `stop` respects the limits above; InvalidArgument naming the offending entry.
base::Status ValidateStopStrings(std::span<const std::string> stop);

// What one Add or Finish call adds to the text.
struct TextDelta {
  std::string text;         // new text to send (often empty while bytes or a prefix are held)
  bool stopped = false;     // a stop string has ended the text (in this call or before)
  int32_t stop_index = -1;  // which one (an index into TextStreamOptions::stop) when stopped
};

class IncrementalDecoder {
 public:
  // `table` must outlive the decoder. Errors: those of ValidateStopStrings.
  static base::Result<IncrementalDecoder> Create(const TokenTable& table,
                                                 TextStreamOptions options);

  // Feeds the next generated token (every one counts towards min_tokens, special or not). After
  // a stop, returns an empty delta that says stopped. Must not be called after Finish (checked).
  TextDelta Add(int32_t token);
  // The end of the sequence: flushes what is held back (an incomplete character as U+FFFD, a
  // possible stop-string prefix as text). Called once (checked); returns an empty delta after a
  // stop.
  TextDelta Finish();

  bool stopped() const { return stop_index_ >= 0; }
  // The table's TokenText, for logprobs.
  std::string TokenText(int32_t id) const { return table_->TokenText(id); }

 private:
  IncrementalDecoder(const TokenTable& table, TextStreamOptions options)
      : table_(&table), options_(std::move(options)) {}
  // Appends decoded text to what is held, moves what is safe to `delta`.
  void Release(std::string_view text, bool final, TextDelta* delta);

  const TokenTable* table_;
  TextStreamOptions options_;
  std::string pending_bytes_;  // an incomplete UTF-8 character (at most 3 bytes)
  std::string held_text_;      // decoded text that may be the start of a stop string
  int64_t added_ = 0;          // Add calls so far
  int32_t stop_index_ = -1;
  bool finished_ = false;
};

}  // namespace sovai::serve
