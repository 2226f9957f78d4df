// Tokenizer: Hugging Face `tokenizer.json` BPE tokenizers, byte-level (GPT-2, Llama 3, Qwen 2.5,
// the project's own, see tokenizer_trainer.h) and SentencePiece-style (Llama 2, Mistral: `▁` for
// spaces, `<0xAB>` byte-fallback tokens).
//
//   SOVAI_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::FromFile(env, "tokenizer.json"));
//   SOVAI_ASSIGN_OR_RETURN(std::vector<TokenId> ids, tok.Encode("Hello world"));
//   SOVAI_ASSIGN_OR_RETURN(std::string text, tok.Decode(ids));
//
// What is supported (docs/formats/tokenizer.md has the full list and the rules):
//   model          BPE: vocab, merges ("a b" strings or [a, b] pairs), unk_token, byte_fallback,
//                  ignore_merges, fuse_unk
//   normalizer     Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Strip
//   pre_tokenizer  Sequence, Split, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit
//   post_processor TemplateProcessing, ByteLevel, Sequence, BertProcessing, RobertaProcessing
//   decoder        ByteLevel, Sequence, Replace, ByteFallback, Fuse, Strip, Metaspace
//   added_tokens   matched in the raw text before anything else, longest match first, with
//                  lstrip / rstrip / single_word; `special` marks them for skip_special_tokens
// Any other component type is an Unimplemented error naming the type and where it is.
//
// Encoding gives the same ids as the reference implementation, transformers.js (npm
// @lenml/tokenizers), on the same tokenizer.json: tests/model/ checks this on the real Llama 3,
// Llama 2 and Qwen 2.5 files and on a tokenizer trained by tokenizer_trainer.h. Decoding is the
// tokenizer.json decoder alone (no clean_up_tokenization_spaces), which transformers.js also
// gives with {clean_up_tokenization_spaces: false}; on byte-level tokenizers without a
// normalizer, Decode(Encode(text)) == text.
//
// Errors. Loading: InvalidArgument for malformed JSON or a field of the wrong type, naming the
// field ("model.merges[17]"); ResourceExhausted when a limit of tokenizer_limits.h is exceeded;
// Unimplemented for a component type or option we do not support. Encode: InvalidArgument for
// text that is not valid UTF-8 (with the byte offset), or for a character that is neither in the
// vocabulary nor coverable by byte fallback when the tokenizer has no unk_token;
// ResourceExhausted above kMaxEncodeInputBytes. Decode: InvalidArgument for an id outside the
// vocabulary, ResourceExhausted above kMaxDecodeIds.
//
// Thread-safety: a loaded Tokenizer is immutable; Encode and Decode may run concurrently from
// any number of threads (each with its own EncodeCache, if any).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/env.h"
#include "base/status.h"

namespace sovai::model {

using TokenId = int32_t;

struct EncodeOptions {
  // Apply the post-processor's special tokens (Llama 2's <s>, a TemplateProcessing BOS). Off by
  // default: text is tokenized as it is.
  bool add_special_tokens = false;
};

struct DecodeOptions {
  // Drop added tokens marked "special" (<s>, <|eot_id|>, ...) from the output.
  bool skip_special_tokens = false;
};

// An entry of tokenizer.json's `added_tokens`.
struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// Remembers the ids of recent pre-tokens across Encode calls (words repeat across documents):
// pass one to Encode when encoding many texts. It belongs to one thread at a time, holds at most
// kMaxEncodeCacheEntries entries, and may be used with different tokenizers (it starts over
// when the tokenizer changes).
class EncodeCache {
 public:
  EncodeCache() = default;
  size_t size() const { return entries_.size(); }

 private:
  friend class Tokenizer;
  uint64_t tokenizer_id_ = 0;
  std::unordered_map<std::string, std::vector<TokenId>> entries_;
};

class Tokenizer {
 public:
  // Parses the text of a tokenizer.json.
  static base::Result<Tokenizer> FromJson(std::string_view json_text);
  // Reads and parses a tokenizer.json file (at most kMaxTokenizerJsonBytes); errors name `path`.
  static base::Result<Tokenizer> FromFile(base::Env& env, const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // `cache` may be null (a cache for this call alone is used).
  base::Result<std::vector<TokenId>> Encode(std::string_view text,
                                            const EncodeOptions& options = {},
                                            EncodeCache* cache = nullptr) const;
  base::Result<std::string> Decode(std::span<const TokenId> ids,
                                   const DecodeOptions& options = {}) const;

  // One more than the largest id of the vocabulary and the added tokens.
  size_t vocab_size() const;
  // The id of a vocabulary or added token, by its exact spelling in tokenizer.json.
  std::optional<TokenId> TokenToId(std::string_view token) const;
  // The spelling of `id`; nullopt when no token has that id.
  std::optional<std::string> IdToToken(TokenId id) const;
  // The bytes `id` stands for in decoded text, for decoding a stream one token at a time: the
  // content of an added token; for the other tokens the decoder's output with its byte steps
  // (ByteLevel, ByteFallback's <0xAB>) stopped short of UTF-8 conversion, so a token may hold
  // part of a multi-byte character. The token is decoded as it reads in the middle of a text:
  // rules for the start of the text (Metaspace's and Strip's removal of a first space) do not
  // apply. For ByteLevel decoders the other steps of a decoder Sequence are not applied. Without
  // a decoder: the spelling (Decode joins those with spaces). nullopt when no token has that id.
  // Concatenating the TokenBytes of ids and decoding them as UTF-8, U+FFFD for invalid bytes,
  // gives Decode(ids) on byte-level tokenizers.
  std::optional<std::string> TokenBytes(TokenId id) const;
  const std::vector<AddedToken>& added_tokens() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sovai::model
