#include "model/tokenizer_bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "base/json.h"
#include "model/tokenizer_limits.h"
#include "model/tokenizer_unicode.h"

namespace sovai::model {
namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Pieces shorter than this are cached per Encode call (longer ones rarely repeat).
constexpr size_t kMaxCachedPieceBytes = 256;

base::Status CheckTokenText(std::string_view text, std::string_view where) {
  if (text.size() > kMaxTokenBytes) {
    return base::ResourceExhaustedError(std::string(where) + " is " + std::to_string(text.size()) +
                                        " bytes long; the limit is " +
                                        std::to_string(kMaxTokenBytes));
  }
  return unicode::ValidateUtf8(text, where);
}

uint64_t Mix(uint64_t x) {
  // splitmix64's finalizer: pairs of small ids spread over the whole table.
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

void BpeModel::MergeTable::Reserve(size_t entries) {
  size_t capacity = 16;
  while (capacity < entries * 2) capacity *= 2;
  if (capacity <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  size_ = 0;
  for (const Slot& slot : old) {
    if (slot.key != kEmpty) Set(slot.key, slot.merge);
  }
}

size_t BpeModel::MergeTable::Probe(uint64_t key) const {
  const size_t mask = slots_.size() - 1;
  size_t i = Mix(key) & mask;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask;
  return i;
}

void BpeModel::MergeTable::Set(uint64_t key, Merge merge) {
  if ((size_ + 1) * 2 > slots_.size()) Reserve(size_ + 1);
  size_t i = Probe(key);
  if (slots_[i].key == kEmpty) {
    slots_[i].key = key;
    ++size_;
  }
  slots_[i].merge = merge;
}

const BpeModel::Merge* BpeModel::MergeTable::Find(uint64_t key) const {
  if (slots_.empty()) return nullptr;
  size_t i = Probe(key);
  return slots_[i].key == kEmpty ? nullptr : &slots_[i].merge;
}

int32_t BpeModel::FindSymbol(std::string_view text) const {
  auto it = symbol_of_.find(text);
  return it == symbol_of_.end() ? -1 : it->second;
}

int32_t BpeModel::InternSymbol(std::string_view text) {
  int32_t found = FindSymbol(text);
  if (found >= 0) return found;
  auto symbol = static_cast<int32_t>(symbol_text_.size());
  symbol_text_.emplace_back(text);
  symbol_token_.push_back(-1);
  symbol_of_.emplace(std::string(text), symbol);
  size_t pos = 0;
  if (!text.empty()) {
    char32_t cp = unicode::NextCodePoint(text, &pos);
    if (pos == text.size() && cp < bmp_symbol_.size()) bmp_symbol_[cp] = symbol;
  }
  return symbol;
}

void BpeModel::AddToken(const std::string& content, TokenId id) {
  int32_t symbol = InternSymbol(content);
  symbol_token_[symbol] = id;
  auto index = static_cast<size_t>(id);
  if (index >= id_to_token_.size()) {
    id_to_token_.resize(index + 1);
    id_used_.resize(index + 1, false);
  }
  id_to_token_[index] = content;
  id_used_[index] = true;
  // A byte-fallback token may arrive as an added token.
  if (content.size() == 6 && content.starts_with("<0x") && content.back() == '>') {
    unsigned value = 0;
    if (std::sscanf(content.c_str() + 3, "%2X", &value) == 1) {
      char canonical[8];
      std::snprintf(canonical, sizeof(canonical), "<0x%02X>", value);
      if (content == canonical) byte_token_[value] = id;
    }
  }
}

base::Result<BpeModel> BpeModel::FromJson(const nlohmann::json& model) {
  BpeModel bpe;
  bpe.bmp_symbol_.assign(0x10000, -1);
  bpe.byte_token_.assign(256, -1);

  SOVAI_ASSIGN_OR_RETURN(auto dropout, base::GetOptionalDouble(model, "dropout"));
  if (dropout && *dropout != 0.0) {
    return base::UnimplementedError(
        "model.dropout is not supported (the tokenizer would be "
        "random); set it to null");
  }
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    SOVAI_ASSIGN_OR_RETURN(auto value, base::GetOptionalString(model, field));
    if (value && !value->empty()) {
      return base::UnimplementedError(std::string("model.") + field + " is not supported (it is '" +
                                      *value + "'); only null or \"\" are");
    }
  }
  SOVAI_ASSIGN_OR_RETURN(bpe.unk_token_, base::GetOptionalString(model, "unk_token"));
  SOVAI_ASSIGN_OR_RETURN(auto byte_fallback, base::GetOptionalBool(model, "byte_fallback"));
  SOVAI_ASSIGN_OR_RETURN(auto ignore_merges, base::GetOptionalBool(model, "ignore_merges"));
  SOVAI_ASSIGN_OR_RETURN(auto fuse_unk, base::GetOptionalBool(model, "fuse_unk"));
  bpe.byte_fallback_ = byte_fallback.value_or(false);
  bpe.ignore_merges_ = ignore_merges.value_or(false);
  bpe.fuse_unk_ = fuse_unk.value_or(false);

  // Vocabulary.
  SOVAI_ASSIGN_OR_RETURN(const nlohmann::json* vocab, base::GetObject(model, "vocab"));
  if (vocab->size() > kMaxVocabSize) {
    return base::ResourceExhaustedError("model.vocab has " + std::to_string(vocab->size()) +
                                        " entries; the limit is " + std::to_string(kMaxVocabSize));
  }
  bpe.symbol_of_.reserve(vocab->size() * 2);
  bpe.symbol_text_.reserve(vocab->size() * 2);
  for (const auto& [token, value] : vocab->items()) {
    std::string where = "model.vocab['" + token.substr(0, 64) + "']";
    SOVAI_RETURN_IF_ERROR(CheckTokenText(token, where));
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() >= static_cast<int64_t>(kMaxVocabSize)) {
      return base::InvalidArgumentError(where + " must be an integer id in [0, " +
                                        std::to_string(kMaxVocabSize) + ")");
    }
    auto id = static_cast<TokenId>(value.get<int64_t>());
    if (static_cast<size_t>(id) < bpe.id_used_.size() && bpe.id_used_[id]) {
      return base::InvalidArgumentError(where + " has id " + std::to_string(id) +
                                        ", which token '" + bpe.id_to_token_[id].substr(0, 64) +
                                        "' already has");
    }
    bpe.AddToken(token, id);
  }

  // Merges, in rank order: "a b" strings (tokenizers < 0.20) or ["a", "b"] pairs.
  SOVAI_ASSIGN_OR_RETURN(const nlohmann::json* merges, base::GetArray(model, "merges"));
  if (merges->size() > kMaxMerges) {
    return base::ResourceExhaustedError("model.merges has " + std::to_string(merges->size()) +
                                        " entries; the limit is " + std::to_string(kMaxMerges));
  }
  bpe.merges_.Reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const nlohmann::json& merge = (*merges)[rank];
    std::string where = "model.merges[" + std::to_string(rank) + "]";
    std::string left;
    std::string right;
    if (merge.is_string()) {
      const auto& text = merge.get_ref<const std::string&>();
      size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return base::InvalidArgumentError(where + " ('" + text.substr(0, 64) +
                                          "') must be two tokens separated by one space");
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return base::InvalidArgumentError(where +
                                        " must be a string \"a b\" or a pair [\"a\", \"b\"]");
    }
    SOVAI_RETURN_IF_ERROR(CheckTokenText(left, where));
    SOVAI_RETURN_IF_ERROR(CheckTokenText(right, where));
    if (left.size() + right.size() > kMaxTokenBytes) {
      return base::ResourceExhaustedError(where + " makes a token longer than " +
                                          std::to_string(kMaxTokenBytes) + " bytes");
    }
    int32_t l = bpe.InternSymbol(left);
    int32_t r = bpe.InternSymbol(right);
    int32_t result = bpe.InternSymbol(left + right);
    // A repeated merge keeps its last rank, as the reference's Map does.
    bpe.merges_.Set(PairKey(l, r), Merge{static_cast<uint32_t>(rank), result});
  }
  return bpe;
}

std::optional<TokenId> BpeModel::TokenToId(std::string_view token) const {
  int32_t symbol = FindSymbol(token);
  if (symbol < 0 || symbol_token_[symbol] < 0) return std::nullopt;
  return symbol_token_[symbol];
}

const std::string* BpeModel::IdToToken(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !id_used_[id]) return nullptr;
  return &id_to_token_[id];
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return nullptr;
  return merges_.Find(PairKey(left, right));
}

int32_t BpeModel::CharSymbol(std::string_view text, size_t begin, size_t end, char32_t cp) const {
  if (cp < bmp_symbol_.size()) return bmp_symbol_[cp];
  return FindSymbol(text.substr(begin, end - begin));
}

base::Status BpeModel::EmitPiece(std::string_view piece, int32_t symbol,
                                 std::vector<TokenId>* out) const {
  if (symbol < 0) symbol = FindSymbol(piece);
  if (symbol >= 0 && symbol_token_[symbol] >= 0) {
    out->push_back(symbol_token_[symbol]);
    return base::Status::Ok();
  }
  if (byte_fallback_) {
    bool all = true;
    for (char c : piece) all = all && byte_token_[static_cast<uint8_t>(c)] >= 0;
    if (all) {
      for (char c : piece) out->push_back(byte_token_[static_cast<uint8_t>(c)]);
      return base::Status::Ok();
    }
  }
  std::optional<TokenId> unk = unk_token_ ? TokenToId(*unk_token_) : std::nullopt;
  if (!unk) {
    return base::InvalidArgumentError(
        "text contains '" + std::string(piece.substr(0, 64)) +
        "', which is not in the vocabulary, and the tokenizer has no unk_token" +
        (byte_fallback_ ? " (and not all its bytes have <0x..> tokens)" : ""));
  }
  out->push_back(*unk);
  return base::Status::Ok();
}

base::Status BpeModel::EncodeWord(std::string_view word, std::vector<TokenId>* out) const {
  // Characters as a doubly linked list of pieces; each piece is [begin, end) of `word`.
  struct Node {
    int32_t symbol;
    int32_t prev;
    int32_t next;
    uint32_t begin;
    uint32_t end;
  };
  std::vector<Node> nodes;
  nodes.reserve(word.size());
  for (size_t pos = 0; pos < word.size();) {
    size_t begin = pos;
    char32_t cp = unicode::NextCodePoint(word, &pos);
    auto index = static_cast<int32_t>(nodes.size());
    nodes.push_back(Node{CharSymbol(word, begin, pos, cp), index - 1, index + 1,
                         static_cast<uint32_t>(begin), static_cast<uint32_t>(pos)});
  }
  if (nodes.empty()) return base::Status::Ok();
  nodes.back().next = -1;

  // Candidate merges ordered by (rank, position of the left piece): the reference's
  // rank + position/length priority. Entries go stale when a piece changes; they are checked
  // against the current symbols when popped.
  struct Candidate {
    uint32_t rank;
    int32_t left;
    int32_t left_symbol;
    int32_t right_symbol;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    int32_t right = nodes[left].next;
    if (right < 0) return;
    const Merge* merge = FindMerge(nodes[left].symbol, nodes[right].symbol);
    if (merge != nullptr) {
      queue.push(Candidate{merge->rank, left, nodes[left].symbol, nodes[right].symbol});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(nodes.size()); ++i) consider(i);
  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Node& left = nodes[c.left];
    if (left.symbol != c.left_symbol || left.next < 0 ||
        nodes[left.next].symbol != c.right_symbol) {
      continue;
    }
    // Pieces only grow, so matching symbols mean this is still the pair that was queued.
    Node& right = nodes[left.next];
    const Merge* merge = FindMerge(left.symbol, right.symbol);
    left.symbol = merge->result;
    left.end = right.end;
    left.next = right.next;
    right.symbol = -2;  // dead
    if (left.next >= 0) nodes[left.next].prev = c.left;
    if (left.prev >= 0) consider(left.prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = nodes[i].next) {
    const Node& node = nodes[i];
    SOVAI_RETURN_IF_ERROR(
        EmitPiece(word.substr(node.begin, node.end - node.begin), node.symbol, out));
  }
  return base::Status::Ok();
}

base::Status BpeModel::Encode(const std::vector<std::string>& pieces, std::vector<TokenId>* out,
                              Cache* cache) const {
  const size_t first = out->size();
  for (const std::string& piece : pieces) {
    if (piece.empty()) continue;
    if (ignore_merges_) {
      int32_t symbol = FindSymbol(piece);
      if (symbol >= 0 && symbol_token_[symbol] >= 0) {
        out->push_back(symbol_token_[symbol]);
        continue;
      }
    }
    if (cache != nullptr && piece.size() < kMaxCachedPieceBytes) {
      auto it = cache->find(piece);
      if (it != cache->end()) {
        out->insert(out->end(), it->second.begin(), it->second.end());
        continue;
      }
      size_t before = out->size();
      SOVAI_RETURN_IF_ERROR(EncodeWord(piece, out));
      if (cache->size() >= kMaxEncodeCacheEntries) cache->clear();
      cache->emplace(
          piece, std::vector<TokenId>(out->begin() + static_cast<ptrdiff_t>(before), out->end()));
      continue;
    }
    SOVAI_RETURN_IF_ERROR(EncodeWord(piece, out));
  }
  if (fuse_unk_ && unk_token_) {
    std::optional<TokenId> unk = TokenToId(*unk_token_);
    if (unk) {
      auto begin = out->begin() + static_cast<ptrdiff_t>(first);
      auto end = std::unique(begin, out->end(),
                             [&](TokenId a, TokenId b) { return a == *unk && b == *unk; });
      out->erase(end, out->end());
    }
  }
  return base::Status::Ok();
}

}  // namespace sovai::model
