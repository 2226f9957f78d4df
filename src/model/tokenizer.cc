#include "model/tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <unordered_map>
#include <unordered_set>

#include "base/json.h"
#include "model/tokenizer_bpe.h"
#include "model/tokenizer_limits.h"
#include "model/tokenizer_pipeline.h"
#include "model/tokenizer_unicode.h"

namespace sovai::model {
namespace {

using base::Result;
using base::Status;
using nlohmann::json;

// A byte trie over the added tokens' contents, for the reference's splitter: scanning left to
// right, at each position the longest added token that starts there is cut out.
class AddedTokenTrie {
 public:
  void Insert(std::string_view word, int32_t value) {
    int32_t node = 0;
    for (char c : word) {
      uint64_t key = Key(node, c);
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        auto next = static_cast<int32_t>(values_.size());
        values_.push_back(-1);
        edges_.emplace(key, next);
        node = next;
      } else {
        node = it->second;
      }
    }
    values_[node] = value;
    first_byte_[static_cast<uint8_t>(word[0])] = true;
  }
  // The value and length of the longest word that starts at text[pos], or {-1, 0}.
  std::pair<int32_t, size_t> LongestAt(std::string_view text, size_t pos) const {
    std::pair<int32_t, size_t> best{-1, 0};
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) return best;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      auto it = edges_.find(Key(node, text[i]));
      if (it == edges_.end()) break;
      node = it->second;
      if (values_[node] >= 0) best = {values_[node], i + 1 - pos};
    }
    return best;
  }

 private:
  static uint64_t Key(int32_t node, char c) {
    return (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
  }
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> values_ = {-1};  // node 0 is the root
  std::array<bool, 256> first_byte_{};
};

// Hugging Face's word characters for single_word: alphanumeric or '_'.
bool IsWordChar(char32_t cp) {
  if (cp == '_') return true;
  utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  switch (cat) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

char32_t CodePointBefore(std::string_view text, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && pos - start < 4 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) {
    --start;
  }
  return unicode::NextCodePoint(text, &start);
}

// Which decoder steps turn spellings into raw bytes: TokenBytes stops before the UTF-8 conversion
// those steps end with. `decoder` has passed ParseDecoder.
void FindByteSteps(const json& decoder, bool* byte_level, bool* byte_fallback) {
  auto type = decoder.find("type");
  if (type == decoder.end() || !type->is_string()) return;
  if (*type == "ByteLevel") *byte_level = true;
  if (*type == "ByteFallback") *byte_fallback = true;
  if (*type == "Sequence") {
    for (const json& step : decoder["decoders"]) FindByteSteps(step, byte_level, byte_fallback);
  }
}

// The byte of a byte-fallback token "<0xAB>", or -1.
int FallbackByte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    int digit = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

uint64_t NextTokenizerId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

struct Tokenizer::Impl {
  BpeModel model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  bool byte_level_decoder = false;     // the decoder has a ByteLevel step
  bool byte_fallback_decoder = false;  // the decoder has a ByteFallback step
  std::vector<AddedToken> added;
  std::unordered_map<std::string, size_t> added_index;  // content -> index in `added`
  std::unordered_set<std::string> added_contents;
  std::unordered_set<TokenId> special_ids;
  AddedTokenTrie trie;
  // Tells EncodeCaches which tokenizer filled them.
  uint64_t id;

  explicit Impl(BpeModel m) : model(std::move(m)), id(NextTokenizerId()) {}

  // The reference's DictionarySplitter, plus single_word: the input cut into text sections and
  // added-token sections, in order.
  std::vector<std::string_view> SplitAdded(std::string_view text) const {
    std::vector<std::string_view> sections;
    size_t start = 0;
    size_t i = 0;
    while (i < text.size()) {
      auto [index, length] = trie.LongestAt(text, i);
      if (index >= 0 && added[index].single_word) {
        bool word_before = i > 0 && IsWordChar(CodePointBefore(text, i));
        size_t after = i + length;
        bool word_after = after < text.size() && IsWordChar(unicode::NextCodePoint(text, &after));
        if (word_before || word_after) index = -1;
      }
      if (index < 0) {
        ++i;
        continue;
      }
      if (i > start) sections.push_back(text.substr(start, i - start));
      sections.push_back(text.substr(i, length));
      i += length;
      start = i;
    }
    if (start < text.size()) sections.push_back(text.substr(start));
    return sections;
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::FromFile(base::Env& env, const std::string& path) {
  auto text = env.ReadFile(path, kMaxTokenizerJsonBytes);
  if (!text.ok()) {
    if (text.status().code() == base::StatusCode::kResourceExhausted) {
      return base::ResourceExhaustedError("tokenizer file '" + path + "' is larger than " +
                                          std::to_string(kMaxTokenizerJsonBytes >> 20) + " MiB");
    }
    return text.status();
  }
  auto tokenizer = FromJson(*text);
  if (!tokenizer.ok()) return tokenizer.status().WithContext("tokenizer file '" + path + "'");
  return tokenizer;
}

Result<Tokenizer> Tokenizer::FromJson(std::string_view json_text) {
  auto parsed = base::ParseJson(
      json_text, {.max_bytes = kMaxTokenizerJsonBytes, .max_depth = kMaxTokenizerJsonDepth});
  if (!parsed.ok()) return parsed.status();
  const json& root = *parsed;
  if (!root.is_object()) return base::InvalidArgumentError("tokenizer.json must be an object");

  // The model.
  SOVAI_ASSIGN_OR_RETURN(const json* model_json, base::GetObject(root, "model"));
  auto type = base::GetOptionalString(*model_json, "type");
  if (!type.ok()) return type.status().WithContext("model");
  if (*type && **type != "BPE") {
    return base::UnimplementedError("model type '" + **type + "' is not supported (only BPE is)");
  }
  if (!*type && !model_json->contains("merges")) {
    return base::UnimplementedError("model has no type and no merges: only BPE is supported");
  }
  auto model = BpeModel::FromJson(*model_json);
  if (!model.ok()) return model.status();
  auto impl = std::make_unique<Impl>(std::move(model).value());

  // Added tokens join the vocabulary (as in the reference) and are split out of the text first.
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    SOVAI_ASSIGN_OR_RETURN(const json* added, base::GetArray(root, "added_tokens"));
    if (added->size() > kMaxAddedTokens) {
      return base::ResourceExhaustedError("added_tokens has " + std::to_string(added->size()) +
                                          " entries; the limit is " +
                                          std::to_string(kMaxAddedTokens));
    }
    for (size_t i = 0; i < added->size(); ++i) {
      const json& entry = (*added)[i];
      std::string where = "added_tokens[" + std::to_string(i) + "]";
      AddedToken token;
      auto content = base::GetString(entry, "content");
      if (!content.ok()) return content.status().WithContext(where);
      token.content = *content;
      if (token.content.size() > kMaxTokenBytes) {
        return base::ResourceExhaustedError(where + ".content is longer than " +
                                            std::to_string(kMaxTokenBytes) + " bytes");
      }
      SOVAI_RETURN_IF_ERROR(unicode::ValidateUtf8(token.content, where + ".content"));
      auto id = base::GetInt(entry, "id");
      if (!id.ok()) return id.status().WithContext(where);
      if (*id < 0 || *id >= static_cast<int64_t>(kMaxVocabSize)) {
        return base::InvalidArgumentError(where + ".id must be in [0, " +
                                          std::to_string(kMaxVocabSize) + ")");
      }
      token.id = static_cast<TokenId>(*id);
      for (auto [field, target] :
           {std::pair{"special", &token.special}, std::pair{"lstrip", &token.lstrip},
            std::pair{"rstrip", &token.rstrip}, std::pair{"single_word", &token.single_word},
            std::pair{"normalized", &token.normalized}}) {
        auto value = base::GetOptionalBool(entry, field);
        if (!value.ok()) return value.status().WithContext(where);
        *target = value->value_or(false);
      }
      impl->model.AddToken(token.content, token.id);
      if (token.special) impl->special_ids.insert(token.id);
      impl->added_contents.insert(token.content);
      // An empty content never matches (as in the reference); a repeated content keeps the
      // later entry.
      auto [it, inserted] = impl->added_index.emplace(token.content, impl->added.size());
      if (!inserted) {
        impl->added[it->second] = token;
      } else {
        impl->added.push_back(token);
      }
    }
    for (const AddedToken& token : impl->added) {
      if (!token.content.empty()) {
        impl->trie.Insert(token.content, static_cast<int32_t>(impl->added_index[token.content]));
      }
    }
  }

  auto field = [&](const char* name) -> const json& {
    static const json kNull;
    auto it = root.find(name);
    return it == root.end() ? kNull : *it;
  };
  SOVAI_ASSIGN_OR_RETURN(impl->normalizer, ParseNormalizer(field("normalizer"), "normalizer"));
  SOVAI_ASSIGN_OR_RETURN(impl->pre_tokenizer,
                         ParsePreTokenizer(field("pre_tokenizer"), "pre_tokenizer"));
  const BpeModel& bpe = impl->model;
  SOVAI_ASSIGN_OR_RETURN(
      impl->post_processor,
      ParsePostProcessor(field("post_processor"), "post_processor",
                         [&bpe](std::string_view token) { return bpe.TokenToId(token); }));
  SOVAI_ASSIGN_OR_RETURN(impl->decoder, ParseDecoder(field("decoder"), "decoder"));
  if (impl->decoder) {
    FindByteSteps(field("decoder"), &impl->byte_level_decoder, &impl->byte_fallback_decoder);
  }
  return Tokenizer(std::move(impl));
}

Result<std::vector<TokenId>> Tokenizer::Encode(std::string_view text, const EncodeOptions& options,
                                               EncodeCache* cache) const {
  if (text.size() > kMaxEncodeInputBytes) {
    return base::ResourceExhaustedError("text to encode is " + std::to_string(text.size()) +
                                        " bytes; the limit is " +
                                        std::to_string(kMaxEncodeInputBytes));
  }
  SOVAI_RETURN_IF_ERROR(unicode::ValidateUtf8(text, "text"));
  const Impl& impl = *impl_;
  std::vector<std::string_view> sections = impl.SplitAdded(text);
  // lstrip / rstrip: whitespace next to such an added token goes.
  for (size_t i = 0; i < sections.size(); ++i) {
    auto it = impl.added_index.find(std::string(sections[i]));
    if (it == impl.added_index.end()) continue;
    const AddedToken& token = impl.added[it->second];
    if (token.lstrip && i > 0) sections[i - 1] = unicode::TrimEndJs(sections[i - 1]);
    if (token.rstrip && i + 1 < sections.size()) {
      sections[i + 1] = unicode::TrimStartJs(sections[i + 1]);
    }
  }
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  EncodeCache call_cache;
  if (cache == nullptr) cache = &call_cache;
  if (cache->tokenizer_id_ != impl.id) {
    cache->entries_.clear();
    cache->tokenizer_id_ = impl.id;
  }
  std::vector<std::string> pieces;
  for (size_t index = 0; index < sections.size(); ++index) {
    std::string_view section = sections[index];
    if (section.empty()) continue;
    if (!impl.added_index.empty()) {
      auto it = impl.added_index.find(std::string(section));
      if (it != impl.added_index.end()) {
        ids.push_back(impl.added[it->second].id);
        continue;
      }
    }
    std::string normalized(section);
    if (impl.normalizer) SOVAI_RETURN_IF_ERROR(impl.normalizer->Apply(&normalized));
    if (normalized.empty()) continue;
    pieces.clear();
    pieces.push_back(std::move(normalized));
    if (impl.pre_tokenizer) SOVAI_RETURN_IF_ERROR(impl.pre_tokenizer->Apply(&pieces, index));
    SOVAI_RETURN_IF_ERROR(impl.model.Encode(pieces, &ids, &cache->entries_));
  }
  if (impl.post_processor) impl.post_processor->Apply(&ids, options.add_special_tokens);
  return ids;
}

Result<std::string> Tokenizer::Decode(std::span<const TokenId> ids,
                                      const DecodeOptions& options) const {
  if (ids.size() > kMaxDecodeIds) {
    return base::ResourceExhaustedError("decode got " + std::to_string(ids.size()) +
                                        " ids; the limit is " + std::to_string(kMaxDecodeIds));
  }
  const Impl& impl = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string* token = impl.model.IdToToken(ids[i]);
    if (token == nullptr) {
      return base::InvalidArgumentError("token id " + std::to_string(ids[i]) + " (at index " +
                                        std::to_string(i) + ") is not in the vocabulary of " +
                                        std::to_string(vocab_size()) + " ids");
    }
    if (options.skip_special_tokens && impl.special_ids.contains(ids[i])) continue;
    tokens.push_back(*token);
  }
  if (!impl.decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  DecodeContext context{&impl.added_contents};
  SOVAI_RETURN_IF_ERROR(impl.decoder->Apply(&tokens, context));
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

size_t Tokenizer::vocab_size() const { return impl_->model.id_limit(); }

std::optional<TokenId> Tokenizer::TokenToId(std::string_view token) const {
  return impl_->model.TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(TokenId id) const {
  const std::string* token = impl_->model.IdToToken(id);
  if (token == nullptr) return std::nullopt;
  return *token;
}

std::optional<std::string> Tokenizer::TokenBytes(TokenId id) const {
  const Impl& impl = *impl_;
  const std::string* token = impl.model.IdToToken(id);
  if (token == nullptr) return std::nullopt;
  if (!impl.decoder || impl.added_contents.contains(*token)) return *token;
  if (impl.byte_level_decoder) {
    // As ByteLevelDecoder, without the UTF-8 conversion at the end.
    std::string bytes;
    for (size_t pos = 0; pos < token->size();) {
      size_t begin = pos;
      int byte = unicode::UnicodeToByte(unicode::NextCodePoint(*token, &pos));
      if (byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
      } else {
        bytes.append(*token, begin, pos - begin);
      }
    }
    return bytes;
  }
  if (impl.byte_fallback_decoder) {
    int byte = FallbackByte(*token);
    if (byte >= 0) return std::string(1, static_cast<char>(byte));
  }
  // The other steps map text to text. The token runs through them between two copies of a plain
  // sentinel, so that rules for the ends of the text apply to the sentinels, not to the token.
  auto decode = [&](std::vector<std::string> tokens) -> std::optional<std::string> {
    DecodeContext context{&impl.added_contents};
    if (!impl.decoder->Apply(&tokens, context).ok()) return std::nullopt;
    std::string out;
    for (const std::string& t : tokens) out += t;
    return out;
  };
  const std::string kSentinel = "x";
  std::optional<std::string> head = decode({kSentinel});
  std::optional<std::string> both = decode({kSentinel, kSentinel});
  std::optional<std::string> full = decode({kSentinel, *token, kSentinel});
  if (head && both && full && both->starts_with(*head)) {
    std::string_view tail = std::string_view(*both).substr(head->size());
    if (full->size() >= head->size() + tail.size() && full->starts_with(*head) &&
        full->ends_with(tail)) {
      return full->substr(head->size(), full->size() - head->size() - tail.size());
    }
  }
  // A chain that rewrites the sentinel itself: the token decoded alone.
  return decode({*token}).value_or(*token);
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

}  // namespace sovai::model
