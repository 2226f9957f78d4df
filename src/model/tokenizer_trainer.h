// Trains a byte-level BPE tokenizer (the tokenizer of the project's small base model) and writes
// it as a tokenizer.json that Tokenizer (tokenizer.h) and the reference implementation
// (transformers.js) both load and agree on.
//
//   BpeTrainer trainer({.vocab_size = 8192});
//   SOVAI_RETURN_IF_ERROR(trainer.AddText(text));      // as many times as needed
//   SOVAI_ASSIGN_OR_RETURN(TrainedTokenizer out, trainer.Train());
//
// The recipe:
//  * text is pre-tokenized with GPT-2's pattern (the ByteLevel pre-tokenizer with use_regex),
//    and each distinct pre-token is counted (long texts in pieces, cut where the pattern
//    splits anyway);
//  * ids 0..255 are the 256 bytes, in byte order, spelled with GPT-2's byte-to-unicode table;
//  * merges are learned one at a time: the adjacent pair with the highest count over all
//    pre-tokens (weighted by how often each occurs) is merged; ties go to the pair whose ids are
//    smallest (left id, then right id), so training is deterministic. A merge whose result
//    already exists adds no token. Training stops when the vocabulary is full or no pair is left;
//  * the special tokens follow the learned tokens: <|begin_of_text|>, <|end_of_text|>,
//    <|start_header_id|>, <|end_header_id|>, <|eot_id|>.
// `vocab_size` counts all of them (bytes, learned tokens, special tokens); the vocabulary is
// smaller when the text runs out of pairs.
//
// The tokenizer.json has a ByteLevel pre-tokenizer and decoder, a TemplateProcessing post-
// processor that adds <|begin_of_text|>, and merges as [left, right] pairs. tokenizer_config.json
// names the BOS/EOS tokens and carries a Llama 3 style chat template.
//
// Errors: InvalidArgument for text that is not UTF-8 (AddText) or a vocab_size outside
// [kMinTrainVocabSize, kMaxTrainVocabSize]; TrainTokenizerFiles adds the file errors, naming the
// file, and ResourceExhausted above kMaxTrainInputFiles / kMaxTrainInputBytes.
// Thread-safety: a BpeTrainer is used from one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/env.h"
#include "base/status.h"

namespace sovai::model {

inline constexpr const char* kBeginOfTextToken = "<|begin_of_text|>";
inline constexpr const char* kEndOfTextToken = "<|end_of_text|>";
inline constexpr const char* kStartHeaderToken = "<|start_header_id|>";
inline constexpr const char* kEndHeaderToken = "<|end_header_id|>";
inline constexpr const char* kEndOfTurnToken = "<|eot_id|>";

struct TrainOptions {
  size_t vocab_size = 8192;
  // AddText pre-tokenizes in pieces of about this many bytes (cut only where the pattern splits
  // anyway, so the result does not depend on it); tests make it small.
  size_t chunk_bytes = 1u << 20;
};

struct TrainedTokenizer {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
  size_t vocab_size = 0;  // tokens written, special tokens included
  size_t merges = 0;
};

class BpeTrainer {
 public:
  explicit BpeTrainer(TrainOptions options) : options_(options) {}

  // Pre-tokenizes `text` and counts its pre-tokens. `what` names the text in errors.
  base::Status AddText(std::string_view text, std::string_view what = "training text");
  base::Result<TrainedTokenizer> Train() const;

  // How many bytes AddText has counted so far.
  uint64_t bytes_seen() const { return bytes_seen_; }

 private:
  TrainOptions options_;
  std::unordered_map<std::string, uint64_t> word_counts_;
  uint64_t bytes_seen_ = 0;
};

// `sovai-engine tokenizer train`: trains on the files and writes DIR/tokenizer.json and
// DIR/tokenizer_config.json (atomically; DIR is created if missing).
base::Result<TrainedTokenizer> TrainTokenizerFiles(base::Env& env,
                                                   const std::vector<std::string>& inputs,
                                                   const std::string& output_dir,
                                                   const TrainOptions& options);

}  // namespace sovai::model
