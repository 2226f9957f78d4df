// The stages of a tokenizer.json around the model (internal to src/model; tokenizer.h is the
// public API): normalizers, pre-tokenizers, post-processors and decoders, each parsed from its
// JSON object by a Parse* function that names the path of a bad field ("pre_tokenizer.
// pretokenizers[0].pattern") and reports an unsupported "type" as Unimplemented.
//
// Where the reference implementation (transformers.js) implements an option, these behave as it
// does; where it ignores one (Split's behaviours other than Isolated/Removed, Metaspace's
// `split` and `prepend_scheme`), they follow the Hugging Face tokenizers library. The per-type
// rules are in docs/formats/tokenizer.md.
//
// Thread-safety: immutable after parsing; Apply may run concurrently.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "base/status.h"

namespace sovai::model {

using TokenId = int32_t;

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites one section of text (valid UTF-8 in, valid UTF-8 out).
  virtual base::Status Apply(std::string* text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits each piece of `pieces` further (in place). `section_index` is the index of the
  // section among the added-token split of the input (Metaspace's "first" scheme looks at it).
  virtual base::Status Apply(std::vector<std::string>* pieces, size_t section_index) const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the template's special tokens around the ids of one sequence when `add_special`.
  virtual void Apply(std::vector<TokenId>* ids, bool add_special) const = 0;
};

struct DecodeContext {
  // The content of every added token (the ByteLevel decoder passes them through unmapped).
  const std::unordered_set<std::string>* added_tokens = nullptr;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // One step of the decoder chain: tokens in, tokens out (joined at the end).
  virtual base::Status Apply(std::vector<std::string>* tokens,
                             const DecodeContext& context) const = 0;
};

// `json` is the component object; null gives nullptr (no such stage). `where` is its path.
base::Result<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& json,
                                                          const std::string& where);
base::Result<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& json,
                                                              const std::string& where);
// `lookup` resolves token strings of the template to ids.
base::Result<std::unique_ptr<PostProcessor>> ParsePostProcessor(
    const nlohmann::json& json, const std::string& where,
    const std::function<std::optional<TokenId>(std::string_view)>& lookup);
base::Result<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& json,
                                                    const std::string& where);

}  // namespace sovai::model
