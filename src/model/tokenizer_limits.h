// Named limits of the tokenizer (tokenizer.h, tokenizer_trainer.h). A tokenizer.json comes from
// model repositories, which are untrusted: every count and size read from it is checked against
// these before it is used, and exceeding one is a ResourceExhausted error that names the limit.
// The largest real tokenizers (Gemma: 256k tokens; Llama 3: 128k tokens, 280k merges, 9 MB of
// JSON; Qwen 2.5: 151k tokens) fit with room to spare.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sovai::model {

// The tokenizer.json file (read whole, parsed into a DOM).
inline constexpr uint64_t kMaxTokenizerJsonBytes = 64ull << 20;  // 64 MiB
// Nesting of the JSON document (normalizer/pre-tokenizer/decoder Sequences nest).
inline constexpr int kMaxTokenizerJsonDepth = 32;
// Entries of model.vocab, and the largest token id (vocab or added token) plus one.
inline constexpr size_t kMaxVocabSize = 1u << 20;
// Entries of model.merges.
inline constexpr size_t kMaxMerges = 4u << 20;
// Bytes of one vocabulary token, merge part or added token (Llama 3's longest is 256).
inline constexpr size_t kMaxTokenBytes = 1024;
// Entries of added_tokens.
inline constexpr size_t kMaxAddedTokens = 1u << 16;
// Components in one normalizer/pre-tokenizer/decoder/post-processor Sequence, and items of a
// TemplateProcessing template.
inline constexpr size_t kMaxSequenceItems = 64;
// Bytes of a Split/Replace pattern, a Replace content, a Prepend string.
inline constexpr size_t kMaxPatternBytes = 4096;

// Text given to one Encode call (the BPE of one huge word is O(n log n) in time and ~40 bytes a
// character in memory, so this also bounds memory).
inline constexpr size_t kMaxEncodeInputBytes = 16u << 20;  // 16 MiB
// Entries of an EncodeCache (pre-token -> ids); a full cache starts over.
inline constexpr size_t kMaxEncodeCacheEntries = 1u << 16;
// Ids given to one Decode call.
inline constexpr size_t kMaxDecodeIds = 16u << 20;

// PCRE2 matching: the JIT stack grows up to this size (patterns like `\s+(?!\S)` backtrack over
// long whitespace runs), and the interpreter's backtracking is capped by match/depth limits so a
// pathological pattern in a tokenizer.json ends in an error instead of running for hours.
inline constexpr size_t kMaxRegexJitStackBytes = 8u << 20;
inline constexpr uint32_t kRegexMatchLimit = 100'000'000;
inline constexpr uint32_t kRegexDepthLimit = 10'000'000;

// Training (tokenizer_trainer.h): the vocabulary asked for, the input files read, and their total.
inline constexpr size_t kMinTrainVocabSize = 256 + 5;
inline constexpr size_t kMaxTrainVocabSize = 1u << 18;
inline constexpr size_t kMaxTrainInputFiles = 4096;
inline constexpr uint64_t kMaxTrainInputBytes = 4ull << 30;  // 4 GiB

}  // namespace sovai::model
