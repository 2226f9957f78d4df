// The BPE model of a tokenizer.json (internal to src/model; tokenizer.h is the public API).
//
// Works as transformers.js's BPE does, on strings rather than ids, so that any vocabulary gives
// the reference's result: a pre-token is split into characters (code points), then the adjacent
// pair with the lowest merge rank is merged, leftmost first among equal ranks, until no pair has
// a merge. Each resulting piece is emitted as its vocabulary id; a piece not in the vocabulary
// becomes `<0xAB>` byte tokens (byte_fallback, when all of them exist) or the unk_token. With
// ignore_merges, a pre-token found whole in the vocabulary is emitted directly. With fuse_unk,
// consecutive unk tokens of one section collapse into one.
//
// Internally every string that can occur as a piece (vocabulary tokens, added tokens, both sides
// and the result of every merge) is a "symbol"; merges are a hash table from a pair of symbols
// to (rank, result). Characters that are no symbol stay single pieces.
//
// Thread-safety: immutable after loading; Encode is safe from many threads (the cache is the
// caller's).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace sovai::model {

using TokenId = int32_t;

class BpeModel {
 public:
  // Reads tokenizer.json's "model" object (type BPE). `where` prefixes error messages.
  static base::Result<BpeModel> FromJson(const nlohmann::json& model);

  // Makes `content` map to `id` and `id` to `content`, as loading added_tokens does in the
  // reference (added tokens join the model's vocabulary).
  void AddToken(const std::string& content, TokenId id);

  // Pre-token -> ids, kept by the caller (pre-tokens repeat a lot in real text). Cleared when it
  // reaches kMaxEncodeCacheEntries.
  using Cache = std::unordered_map<std::string, std::vector<TokenId>>;

  // Encodes the pre-tokens of one section, appending ids to `out`.
  base::Status Encode(const std::vector<std::string>& pieces, std::vector<TokenId>* out,
                      Cache* cache) const;

  std::optional<TokenId> TokenToId(std::string_view token) const;
  // nullptr when no token has `id`.
  const std::string* IdToToken(TokenId id) const;
  // One more than the largest id.
  size_t id_limit() const { return id_to_token_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    int32_t result;  // symbol
  };
  // Open addressing over (left, right) symbol pairs: one probe sequence in one flat array,
  // where std::unordered_map costs a pointer chase per lookup (merge lookups dominate BPE).
  class MergeTable {
   public:
    void Reserve(size_t entries);
    void Set(uint64_t key, Merge merge);
    const Merge* Find(uint64_t key) const;

   private:
    static constexpr uint64_t kEmpty = ~0ull;
    struct Slot {
      uint64_t key = kEmpty;
      Merge merge{};
    };
    size_t Probe(uint64_t key) const;
    std::vector<Slot> slots_;
    size_t size_ = 0;
  };

  int32_t InternSymbol(std::string_view text);
  int32_t FindSymbol(std::string_view text) const;
  int32_t CharSymbol(std::string_view text, size_t begin, size_t end, char32_t cp) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;
  base::Status EncodeWord(std::string_view word, std::vector<TokenId>* out) const;
  base::Status EmitPiece(std::string_view piece, int32_t symbol, std::vector<TokenId>* out) const;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> symbol_of_;
  std::vector<std::string> symbol_text_;
  std::vector<TokenId> symbol_token_;  // -1: not in the vocabulary
  std::vector<int32_t> bmp_symbol_;    // code point < 0x10000 -> symbol of that one character
  MergeTable merges_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_used_;
  std::vector<TokenId> byte_token_;  // <0xAB> ids for byte fallback, -1 when absent
  std::optional<std::string> unk_token_;
  std::optional<TokenId> model_unk_id_;  // unk id as the model saw it before added tokens
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
};

}  // namespace sovai::model
