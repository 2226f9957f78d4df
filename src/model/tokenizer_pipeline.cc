#include "model/tokenizer_pipeline.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "base/json.h"
#include "model/tokenizer_limits.h"
#include "model/tokenizer_regex.h"
#include "model/tokenizer_unicode.h"

namespace sovai::model {
namespace {

using base::Result;
using base::Status;
using nlohmann::json;

// GPT-2's pre-tokenization pattern, as transformers.js's ByteLevel pre-tokenizer writes it.
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

Status Unsupported(std::string_view stage, const std::string& type, const std::string& where) {
  return base::UnimplementedError(std::string(stage) + " type '" + type + "' (at " + where +
                                  ") is not supported");
}

Result<std::string> TypeOf(const json& j, const std::string& where) {
  if (!j.is_object()) return base::InvalidArgumentError(where + " must be an object");
  auto type = base::GetString(j, "type");
  if (!type.ok()) return type.status().WithContext(where);
  return *type;
}

// Field getters whose errors carry the component's path.
Result<std::string> String(const json& j, std::string_view field, const std::string& where) {
  auto value = base::GetString(j, field);
  if (!value.ok()) return value.status().WithContext(where);
  if (value->size() > kMaxPatternBytes) {
    return base::ResourceExhaustedError(where + "." + std::string(field) + " is longer than " +
                                        std::to_string(kMaxPatternBytes) + " bytes");
  }
  SOVAI_RETURN_IF_ERROR(unicode::ValidateUtf8(*value, where + "." + std::string(field)));
  return *value;
}

Result<bool> Bool(const json& j, std::string_view field, bool fallback, const std::string& where) {
  auto value = base::GetOptionalBool(j, field);
  if (!value.ok()) return value.status().WithContext(where);
  return value->value_or(fallback);
}

Result<const json*> Array(const json& j, std::string_view field, const std::string& where) {
  auto value = base::GetArray(j, field);
  if (!value.ok()) return value.status().WithContext(where);
  if ((*value)->size() > kMaxSequenceItems) {
    return base::ResourceExhaustedError(where + "." + std::string(field) + " has " +
                                        std::to_string((*value)->size()) + " items; the limit is " +
                                        std::to_string(kMaxSequenceItems));
  }
  return *value;
}

// A {"String": ...} or {"Regex": ...} pattern object.
Result<Regex> ParsePattern(const json& j, const std::string& where) {
  auto pattern = base::GetObject(j, "pattern");
  if (!pattern.ok()) return pattern.status().WithContext(where);
  const json& p = **pattern;
  std::string path = where + ".pattern";
  if (p.contains("String")) {
    SOVAI_ASSIGN_OR_RETURN(std::string literal, String(p, "String", path));
    auto regex = Regex::FromLiteral(literal);
    if (!regex.ok()) return regex.status().WithContext(path);
    return std::move(regex).value();
  }
  if (p.contains("Regex")) {
    SOVAI_ASSIGN_OR_RETURN(std::string text, String(p, "Regex", path));
    auto regex = Regex::FromJsPattern(text);
    if (!regex.ok()) return regex.status().WithContext(path);
    return std::move(regex).value();
  }
  return base::InvalidArgumentError(path + " must have a \"String\" or a \"Regex\" field");
}

// Every match of `regex` in `text` replaced by `content` (literally).
Result<std::string> ReplaceAll(const Regex& regex, std::string_view text,
                               std::string_view content) {
  std::vector<RegexMatch> matches;
  SOVAI_RETURN_IF_ERROR(regex.FindAll(text, &matches));
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t prev = 0;
  for (const RegexMatch& m : matches) {
    out.append(text.substr(prev, m.begin - prev));
    out.append(content);
    prev = m.end;
  }
  out.append(text.substr(prev));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Normalizers

class NormalizerSequence : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  Status Apply(std::string* text) const override {
    for (const auto& step : steps_) SOVAI_RETURN_IF_ERROR(step->Apply(text));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  Status Apply(std::string* text) const override {
    text->insert(0, prefix_);
    return Status::Ok();
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status Apply(std::string* text) const override {
    SOVAI_ASSIGN_OR_RETURN(*text, ReplaceAll(pattern_, *text, content_));
    return Status::Ok();
  }

 private:
  Regex pattern_;
  std::string content_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  Status Apply(std::string* text) const override {
    SOVAI_ASSIGN_OR_RETURN(*text, unicode::Normalize(*text, form_));
    return Status::Ok();
  }

 private:
  unicode::NormalForm form_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status Apply(std::string* text) const override {
    std::string_view view = *text;
    if (left_) view = unicode::TrimStartJs(view);
    if (right_) view = unicode::TrimEndJs(view);
    *text = std::string(view);
    return Status::Ok();
  }

 private:
  bool left_;
  bool right_;
};

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers

class PreTokenizerSequence : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  Status Apply(std::vector<std::string>* pieces, size_t section_index) const override {
    for (const auto& step : steps_) SOVAI_RETURN_IF_ERROR(step->Apply(pieces, section_index));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin;
  size_t end;
  bool is_delimiter;
};

// The Hugging Face tokenizers rules for what happens to the delimiters of a split.
std::vector<Span> ApplyBehavior(std::vector<Span> spans, SplitBehavior behavior) {
  std::vector<Span> out;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      out = std::move(spans);
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_delimiter) out.push_back(s);
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_delimiter = false;
      for (const Span& s : spans) {
        if (s.is_delimiter && !previous_delimiter && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_delimiter = s.is_delimiter;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool next_delimiter = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_delimiter && !next_delimiter && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back(*it);
        }
        next_delimiter = it->is_delimiter;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_delimiter = false;
      bool first = true;
      for (const Span& s : spans) {
        if (!first && s.is_delimiter == previous_delimiter) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_delimiter = s.is_delimiter;
        first = false;
      }
      break;
    }
  }
  return out;
}

// Splits `text` at the matches of `regex` (or, with `invert`, keeps the matches and splits at
// what lies between them), appending the non-empty pieces to `out`.
Status SplitText(const Regex& regex, std::string_view text, SplitBehavior behavior, bool invert,
                 std::vector<std::string>* out) {
  std::vector<RegexMatch> matches;
  SOVAI_RETURN_IF_ERROR(regex.FindAll(text, &matches));
  if (behavior == SplitBehavior::kIsolated) {
    // The common case (every real tokenizer), without the intermediate spans.
    size_t prev = 0;
    for (const RegexMatch& m : matches) {
      if (m.begin > prev) out->emplace_back(text.substr(prev, m.begin - prev));
      if (m.end > m.begin) out->emplace_back(text.substr(m.begin, m.end - m.begin));
      prev = m.end;
    }
    if (prev < text.size()) out->emplace_back(text.substr(prev));
    return Status::Ok();
  }
  std::vector<Span> spans;
  size_t prev = 0;
  for (const RegexMatch& m : matches) {
    if (m.begin > prev) spans.push_back({prev, m.begin, invert});
    spans.push_back({m.begin, m.end, !invert});
    prev = m.end;
  }
  if (prev < text.size()) spans.push_back({prev, text.size(), invert});
  for (const Span& s : ApplyBehavior(std::move(spans), behavior)) {
    if (s.end > s.begin) out->emplace_back(text.substr(s.begin, s.end - s.begin));
  }
  return Status::Ok();
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  Status Apply(std::vector<std::string>* pieces, size_t) const override {
    std::vector<std::string> out;
    out.reserve(pieces->size() * 4);
    for (const std::string& piece : *pieces) {
      SOVAI_RETURN_IF_ERROR(SplitText(pattern_, piece, behavior_, invert_, &out));
    }
    *pieces = std::move(out);
    return Status::Ok();
  }

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> pattern)
      : add_prefix_space_(add_prefix_space), pattern_(std::move(pattern)) {}
  Status Apply(std::vector<std::string>* pieces, size_t) const override {
    std::vector<std::string> out;
    out.reserve(pieces->size());
    std::vector<RegexMatch> matches;
    std::string prefixed;
    for (const std::string& piece : *pieces) {
      std::string_view text = piece;
      if (add_prefix_space_ && !text.starts_with(' ')) {
        prefixed = " " + piece;
        text = prefixed;
      }
      if (!pattern_) {
        std::string mapped;
        unicode::AppendByteLevel(&mapped, text);
        out.push_back(std::move(mapped));
        continue;
      }
      matches.clear();
      SOVAI_RETURN_IF_ERROR(pattern_->FindAll(text, &matches));
      for (const RegexMatch& m : matches) {
        // text.match() keeps empty matches; they encode to nothing.
        if (m.end == m.begin) continue;
        std::string mapped;
        unicode::AppendByteLevel(&mapped, text.substr(m.begin, m.end - m.begin));
        out.push_back(std::move(mapped));
      }
    }
    *pieces = std::move(out);
    return Status::Ok();
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> pattern_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  Status Apply(std::vector<std::string>* pieces, size_t section_index) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces->size(); ++i) {
      std::string text;
      for (char c : (*pieces)[i]) {
        if (c == ' ') {
          text += replacement_;
        } else {
          text.push_back(c);
        }
      }
      bool prepend = scheme_ == PrependScheme::kAlways ||
                     (scheme_ == PrependScheme::kFirst && section_index == 0 && i == 0);
      if (prepend && !std::string_view(text).starts_with(replacement_)) {
        text.insert(0, replacement_);
      }
      if (!split_ || replacement_.empty()) {
        if (!text.empty()) out.push_back(std::move(text));
        continue;
      }
      // Split before each replacement character (MergedWithNext).
      size_t start = 0;
      for (size_t pos = text.find(replacement_, 1); pos != std::string::npos;
           pos = text.find(replacement_, pos + replacement_.size())) {
        out.push_back(text.substr(start, pos - start));
        start = pos;
      }
      if (start < text.size()) out.push_back(text.substr(start));
    }
    *pieces = std::move(out);
    return Status::Ok();
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  Status Apply(std::vector<std::string>* pieces, size_t) const override {
    std::vector<std::string> out;
    for (const std::string& piece : *pieces) {
      size_t i = 0;
      while (i < piece.size()) {
        size_t j = i;
        bool digit = piece[i] >= '0' && piece[i] <= '9';
        if (digit) {
          ++j;
          if (!individual_) {
            while (j < piece.size() && piece[j] >= '0' && piece[j] <= '9') ++j;
          }
        } else {
          while (j < piece.size() && !(piece[j] >= '0' && piece[j] <= '9')) ++j;
        }
        out.push_back(piece.substr(i, j - i));
        i = j;
      }
    }
    *pieces = std::move(out);
    return Status::Ok();
  }

 private:
  bool individual_;
};

// transformers.js's Whitespace (/\w+|[^\w\s]+/g: ASCII word characters) and WhitespaceSplit
// (/\S+/g) pre-tokenizers.
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  explicit WhitespacePreTokenizer(bool split_only) : split_only_(split_only) {}
  Status Apply(std::vector<std::string>* pieces, size_t) const override {
    // 0: whitespace, 1: word, 2: other.
    auto kind = [&](char32_t cp) {
      if (unicode::IsJsWhitespace(cp)) return 0;
      if (split_only_) return 1;
      bool word = cp < 0x80 && (std::isalnum(static_cast<int>(cp)) || cp == '_');
      return word ? 1 : 2;
    };
    std::vector<std::string> out;
    for (const std::string& piece : *pieces) {
      size_t pos = 0;
      size_t start = 0;
      int current = 0;
      while (pos < piece.size()) {
        size_t at = pos;
        int k = kind(unicode::NextCodePoint(piece, &pos));
        if (k != current) {
          if (current != 0) out.push_back(piece.substr(start, at - start));
          start = at;
          current = k;
        }
      }
      if (current != 0) out.push_back(piece.substr(start));
    }
    *pieces = std::move(out);
    return Status::Ok();
  }

 private:
  bool split_only_;
};

// ---------------------------------------------------------------------------------------------
// Post-processors

class PostProcessorSequence : public PostProcessor {
 public:
  explicit PostProcessorSequence(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void Apply(std::vector<TokenId>* ids, bool add_special) const override {
    for (const auto& step : steps_) step->Apply(ids, add_special);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

// ByteLevel's post-processing only trims offsets, which we do not report.
class NoOpPostProcessor : public PostProcessor {
 public:
  void Apply(std::vector<TokenId>*, bool) const override {}
};

// TemplateProcessing (single-sequence template), and Bert/RobertaProcessing as the template
// [cls] $A [sep].
class TemplatePostProcessor : public PostProcessor {
 public:
  TemplatePostProcessor(std::vector<TokenId> before, std::vector<TokenId> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  void Apply(std::vector<TokenId>* ids, bool add_special) const override {
    if (!add_special) return;
    ids->insert(ids->begin(), before_.begin(), before_.end());
    ids->insert(ids->end(), after_.begin(), after_.end());
  }

 private:
  std::vector<TokenId> before_;
  std::vector<TokenId> after_;
};

// ---------------------------------------------------------------------------------------------
// Decoders

class DecoderSequence : public Decoder {
 public:
  explicit DecoderSequence(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  Status Apply(std::vector<std::string>* tokens, const DecodeContext& context) const override {
    for (const auto& step : steps_) SOVAI_RETURN_IF_ERROR(step->Apply(tokens, context));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// Byte-level tokens back to bytes, then UTF-8 (invalid sequences become U+FFFD). Added tokens
// are passed through as they are, each run of other tokens is decoded on its own (as the
// reference does). A character outside the byte-level alphabet stands for itself.
class ByteLevelDecoder : public Decoder {
 public:
  Status Apply(std::vector<std::string>* tokens, const DecodeContext& context) const override {
    std::vector<std::string> out;
    std::string bytes;
    bool pending = false;
    auto flush = [&] {
      if (pending) out.push_back(unicode::DecodeUtf8Lossy(bytes, /*strip_bom=*/false));
      bytes.clear();
      pending = false;
    };
    for (std::string& token : *tokens) {
      if (context.added_tokens != nullptr && context.added_tokens->contains(token)) {
        flush();
        out.push_back(std::move(token));
        continue;
      }
      pending = true;
      for (size_t pos = 0; pos < token.size();) {
        size_t begin = pos;
        int byte = unicode::UnicodeToByte(unicode::NextCodePoint(token, &pos));
        if (byte >= 0) {
          bytes.push_back(static_cast<char>(byte));
        } else {
          bytes.append(token, begin, pos - begin);
        }
      }
    }
    flush();
    *tokens = std::move(out);
    return Status::Ok();
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status Apply(std::vector<std::string>* tokens, const DecodeContext&) const override {
    for (std::string& token : *tokens) {
      SOVAI_ASSIGN_OR_RETURN(token, ReplaceAll(pattern_, token, content_));
    }
    return Status::Ok();
  }

 private:
  Regex pattern_;
  std::string content_;
};

// Runs of <0xAB> tokens become the UTF-8 text of their bytes (TextDecoder: invalid sequences
// become U+FFFD, a leading byte-order mark is dropped).
class ByteFallbackDecoder : public Decoder {
 public:
  Status Apply(std::vector<std::string>* tokens, const DecodeContext&) const override {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (!bytes.empty()) out.push_back(unicode::DecodeUtf8Lossy(bytes, /*strip_bom=*/true));
      bytes.clear();
    };
    for (std::string& token : *tokens) {
      int byte = ByteOf(token);
      if (byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    *tokens = std::move(out);
    return Status::Ok();
  }

 private:
  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int ByteOf(std::string_view token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
    int hi = Hex(token[3]);
    int lo = Hex(token[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  Status Apply(std::vector<std::string>* tokens, const DecodeContext&) const override {
    std::string all;
    for (const std::string& token : *tokens) all += token;
    tokens->assign(1, std::move(all));
    return Status::Ok();
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  Status Apply(std::vector<std::string>* tokens, const DecodeContext&) const override {
    if (content_.empty()) return Status::Ok();
    for (std::string& token : *tokens) {
      std::string_view view = token;
      for (size_t i = 0; i < start_ && view.starts_with(content_); ++i) {
        view.remove_prefix(content_.size());
      }
      for (size_t i = 0; i < stop_ && view.ends_with(content_); ++i) {
        view.remove_suffix(content_.size());
      }
      token = std::string(view);
    }
    return Status::Ok();
  }

 private:
  std::string content_;
  size_t start_;
  size_t stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first_space)
      : replacement_(std::move(replacement)), strip_first_space_(strip_first_space) {}
  Status Apply(std::vector<std::string>* tokens, const DecodeContext&) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      if (!replacement_.empty()) {
        std::string out;
        size_t prev = 0;
        size_t pos = 0;
        while ((pos = token.find(replacement_, prev)) != std::string::npos) {
          out.append(token, prev, pos - prev);
          out.push_back(' ');
          prev = pos + replacement_.size();
        }
        out.append(token, prev);
        token = std::move(out);
      }
      if (i == 0 && strip_first_space_ && token.starts_with(' ')) token.erase(0, 1);
    }
    return Status::Ok();
  }

 private:
  std::string replacement_;
  bool strip_first_space_;
};

// Metaspace's options, shared by the pre-tokenizer and the decoder: `prepend_scheme` ("always",
// "first", "never"; default "always"), and the older `add_prefix_space` (false means "never").
Result<PrependScheme> ParsePrependScheme(const json& j, const std::string& where) {
  PrependScheme scheme = PrependScheme::kAlways;
  auto scheme_text = base::GetOptionalString(j, "prepend_scheme");
  if (!scheme_text.ok()) return scheme_text.status().WithContext(where);
  if (*scheme_text) {
    if (**scheme_text == "always") {
      scheme = PrependScheme::kAlways;
    } else if (**scheme_text == "first") {
      scheme = PrependScheme::kFirst;
    } else if (**scheme_text == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return base::InvalidArgumentError(where +
                                        ".prepend_scheme must be \"always\", \"first\" "
                                        "or \"never\", not '" +
                                        **scheme_text + "'");
    }
  }
  SOVAI_ASSIGN_OR_RETURN(bool add_prefix_space, Bool(j, "add_prefix_space", true, where));
  if (!add_prefix_space) scheme = PrependScheme::kNever;
  return scheme;
}

Result<std::string> ParseReplacement(const json& j, const std::string& where) {
  SOVAI_ASSIGN_OR_RETURN(std::string replacement, String(j, "replacement", where));
  size_t pos = 0;
  if (replacement.empty() ||
      (unicode::NextCodePoint(replacement, &pos), pos != replacement.size())) {
    return base::InvalidArgumentError(where + ".replacement must be one character");
  }
  return replacement;
}

}  // namespace

Result<std::unique_ptr<Normalizer>> ParseNormalizer(const json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  SOVAI_ASSIGN_OR_RETURN(std::string type, TypeOf(j, where));
  if (type == "Sequence") {
    SOVAI_ASSIGN_OR_RETURN(const json* items, Array(j, "normalizers", where));
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < items->size(); ++i) {
      std::string path = where + ".normalizers[" + std::to_string(i) + "]";
      if ((*items)[i].is_null()) return base::InvalidArgumentError(path + " must be an object");
      SOVAI_ASSIGN_OR_RETURN(auto step, ParseNormalizer((*items)[i], path));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<Normalizer>(new NormalizerSequence(std::move(steps)));
  }
  if (type == "Prepend") {
    SOVAI_ASSIGN_OR_RETURN(std::string prefix, String(j, "prepend", where));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prefix)));
  }
  if (type == "Replace") {
    SOVAI_ASSIGN_OR_RETURN(Regex pattern, ParsePattern(j, where));
    SOVAI_ASSIGN_OR_RETURN(std::string content, String(j, "content", where));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(pattern), content));
  }
  if (type == "NFC")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNfc));
  if (type == "NFD")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNfd));
  if (type == "NFKC") {
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNfkc));
  }
  if (type == "NFKD") {
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNfkd));
  }
  if (type == "Strip") {
    SOVAI_ASSIGN_OR_RETURN(bool left, Bool(j, "strip_left", false, where));
    SOVAI_ASSIGN_OR_RETURN(bool right, Bool(j, "strip_right", false, where));
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  return Unsupported("normalizer", type, where);
}

Result<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  SOVAI_ASSIGN_OR_RETURN(std::string type, TypeOf(j, where));
  if (type == "Sequence") {
    SOVAI_ASSIGN_OR_RETURN(const json* items, Array(j, "pretokenizers", where));
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < items->size(); ++i) {
      std::string path = where + ".pretokenizers[" + std::to_string(i) + "]";
      if ((*items)[i].is_null()) return base::InvalidArgumentError(path + " must be an object");
      SOVAI_ASSIGN_OR_RETURN(auto step, ParsePreTokenizer((*items)[i], path));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<PreTokenizer>(new PreTokenizerSequence(std::move(steps)));
  }
  if (type == "Split") {
    SOVAI_ASSIGN_OR_RETURN(Regex pattern, ParsePattern(j, where));
    SOVAI_ASSIGN_OR_RETURN(std::string behavior_text, String(j, "behavior", where));
    SplitBehavior behavior;
    if (behavior_text == "Removed") {
      behavior = SplitBehavior::kRemoved;
    } else if (behavior_text == "Isolated") {
      behavior = SplitBehavior::kIsolated;
    } else if (behavior_text == "MergedWithPrevious") {
      behavior = SplitBehavior::kMergedWithPrevious;
    } else if (behavior_text == "MergedWithNext") {
      behavior = SplitBehavior::kMergedWithNext;
    } else if (behavior_text == "Contiguous") {
      behavior = SplitBehavior::kContiguous;
    } else {
      return base::InvalidArgumentError(where + ".behavior '" + behavior_text +
                                        "' is not one of Removed, Isolated, MergedWithPrevious, "
                                        "MergedWithNext, Contiguous");
    }
    SOVAI_ASSIGN_OR_RETURN(bool invert, Bool(j, "invert", false, where));
    return std::unique_ptr<PreTokenizer>(
        new SplitPreTokenizer(std::move(pattern), behavior, invert));
  }
  if (type == "ByteLevel") {
    SOVAI_ASSIGN_OR_RETURN(bool add_prefix_space, Bool(j, "add_prefix_space", false, where));
    SOVAI_ASSIGN_OR_RETURN(bool use_regex, Bool(j, "use_regex", true, where));
    std::optional<Regex> pattern;
    if (use_regex) {
      SOVAI_ASSIGN_OR_RETURN(Regex gpt2, Regex::FromJsPattern(kGpt2Pattern));
      pattern = std::move(gpt2);
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelPreTokenizer(add_prefix_space, std::move(pattern)));
  }
  if (type == "Metaspace") {
    SOVAI_ASSIGN_OR_RETURN(std::string replacement, ParseReplacement(j, where));
    SOVAI_ASSIGN_OR_RETURN(PrependScheme scheme, ParsePrependScheme(j, where));
    SOVAI_ASSIGN_OR_RETURN(bool split, Bool(j, "split", true, where));
    return std::unique_ptr<PreTokenizer>(
        new MetaspacePreTokenizer(std::move(replacement), scheme, split));
  }
  if (type == "Digits") {
    SOVAI_ASSIGN_OR_RETURN(bool individual, Bool(j, "individual_digits", false, where));
    return std::unique_ptr<PreTokenizer>(new DigitsPreTokenizer(individual));
  }
  if (type == "Whitespace") return std::unique_ptr<PreTokenizer>(new WhitespacePreTokenizer(false));
  if (type == "WhitespaceSplit") {
    return std::unique_ptr<PreTokenizer>(new WhitespacePreTokenizer(true));
  }
  return Unsupported("pre_tokenizer", type, where);
}

Result<std::unique_ptr<PostProcessor>> ParsePostProcessor(
    const json& j, const std::string& where,
    const std::function<std::optional<TokenId>(std::string_view)>& lookup) {
  if (j.is_null()) return std::unique_ptr<PostProcessor>();
  SOVAI_ASSIGN_OR_RETURN(std::string type, TypeOf(j, where));
  if (type == "Sequence") {
    SOVAI_ASSIGN_OR_RETURN(const json* items, Array(j, "processors", where));
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (size_t i = 0; i < items->size(); ++i) {
      std::string path = where + ".processors[" + std::to_string(i) + "]";
      if ((*items)[i].is_null()) return base::InvalidArgumentError(path + " must be an object");
      SOVAI_ASSIGN_OR_RETURN(auto step, ParsePostProcessor((*items)[i], path, lookup));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<PostProcessor>(new PostProcessorSequence(std::move(steps)));
  }
  if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(new NoOpPostProcessor());
  if (type == "TemplateProcessing") {
    SOVAI_ASSIGN_OR_RETURN(const json* single, Array(j, "single", where));
    // special_tokens: {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}
    const json* special = nullptr;
    if (j.contains("special_tokens") && !j["special_tokens"].is_null()) {
      SOVAI_ASSIGN_OR_RETURN(special, base::GetObject(j, "special_tokens"));
    }
    std::vector<TokenId> before;
    std::vector<TokenId> after;
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const json& item = (*single)[i];
      std::string path = where + ".single[" + std::to_string(i) + "]";
      if (item.is_object() && item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.is_object() || !item.contains("SpecialToken")) {
        return base::InvalidArgumentError(path +
                                          " must be {\"SpecialToken\": ...} or "
                                          "{\"Sequence\": ...}");
      }
      auto name = base::GetString(item["SpecialToken"], "id");
      if (!name.ok()) return name.status().WithContext(path + ".SpecialToken");
      std::vector<TokenId> ids;
      if (special != nullptr && special->contains(*name)) {
        const json& entry = (*special)[*name];
        auto list = base::GetArray(entry, "ids");
        if (!list.ok())
          return list.status().WithContext(where + ".special_tokens['" + *name + "']");
        if ((*list)->size() > kMaxSequenceItems) {
          return base::ResourceExhaustedError(where + ".special_tokens['" + *name +
                                              "'].ids is too long");
        }
        for (const json& id : **list) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
              id.get<int64_t>() >= static_cast<int64_t>(kMaxVocabSize)) {
            return base::InvalidArgumentError(where + ".special_tokens['" + *name +
                                              "'].ids must hold token ids");
          }
          ids.push_back(static_cast<TokenId>(id.get<int64_t>()));
        }
      } else {
        std::optional<TokenId> id = lookup(*name);
        if (!id) {
          return base::InvalidArgumentError(path + " names the special token '" + *name +
                                            "', which is neither in special_tokens nor in the "
                                            "vocabulary");
        }
        ids.push_back(*id);
      }
      auto& target = seen_sequence ? after : before;
      target.insert(target.end(), ids.begin(), ids.end());
    }
    return std::unique_ptr<PostProcessor>(
        new TemplatePostProcessor(std::move(before), std::move(after)));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto token_of = [&](std::string_view field) -> Result<TokenId> {
      // "cls": ["[CLS]", 101]
      if (!j.contains(field) || !j[field].is_array() || j[field].size() != 2 ||
          !j[field][0].is_string() || !j[field][1].is_number_integer()) {
        return base::InvalidArgumentError(where + "." + std::string(field) +
                                          " must be [token, id]");
      }
      std::optional<TokenId> id = lookup(j[field][0].get<std::string>());
      if (id) return *id;
      int64_t given = j[field][1].get<int64_t>();
      if (given < 0 || given >= static_cast<int64_t>(kMaxVocabSize)) {
        return base::InvalidArgumentError(where + "." + std::string(field) + " has a bad id");
      }
      return static_cast<TokenId>(given);
    };
    SOVAI_ASSIGN_OR_RETURN(TokenId cls, token_of("cls"));
    SOVAI_ASSIGN_OR_RETURN(TokenId sep, token_of("sep"));
    return std::unique_ptr<PostProcessor>(new TemplatePostProcessor({cls}, {sep}));
  }
  return Unsupported("post_processor", type, where);
}

Result<std::unique_ptr<Decoder>> ParseDecoder(const json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  SOVAI_ASSIGN_OR_RETURN(std::string type, TypeOf(j, where));
  if (type == "Sequence") {
    SOVAI_ASSIGN_OR_RETURN(const json* items, Array(j, "decoders", where));
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < items->size(); ++i) {
      std::string path = where + ".decoders[" + std::to_string(i) + "]";
      if ((*items)[i].is_null()) return base::InvalidArgumentError(path + " must be an object");
      SOVAI_ASSIGN_OR_RETURN(auto step, ParseDecoder((*items)[i], path));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<Decoder>(new DecoderSequence(std::move(steps)));
  }
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "Replace") {
    SOVAI_ASSIGN_OR_RETURN(Regex pattern, ParsePattern(j, where));
    SOVAI_ASSIGN_OR_RETURN(std::string content, String(j, "content", where));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(pattern), content));
  }
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    SOVAI_ASSIGN_OR_RETURN(std::string content, String(j, "content", where));
    // Counts of characters to strip (JSON from text has them unsigned; accept any integer >= 0).
    auto count = [&](std::string_view field) -> Result<size_t> {
      auto value = base::GetOptionalInt(j, field);
      if (!value.ok()) return value.status().WithContext(where);
      if (value->value_or(0) < 0) {
        return base::InvalidArgumentError(where + "." + std::string(field) +
                                          " must not be negative");
      }
      return static_cast<size_t>(std::min<int64_t>(value->value_or(0), kMaxTokenBytes));
    };
    SOVAI_ASSIGN_OR_RETURN(size_t start, count("start"));
    SOVAI_ASSIGN_OR_RETURN(size_t stop, count("stop"));
    size_t pos = 0;
    if (!content.empty() && (unicode::NextCodePoint(content, &pos), pos != content.size())) {
      return base::InvalidArgumentError(where + ".content must be one character");
    }
    return std::unique_ptr<Decoder>(new StripDecoder(content, start, stop));
  }
  if (type == "Metaspace") {
    SOVAI_ASSIGN_OR_RETURN(std::string replacement, ParseReplacement(j, where));
    SOVAI_ASSIGN_OR_RETURN(PrependScheme scheme, ParsePrependScheme(j, where));
    return std::unique_ptr<Decoder>(
        new MetaspaceDecoder(std::move(replacement), scheme != PrependScheme::kNever));
  }
  return Unsupported("decoder", type, where);
}

}  // namespace sovai::model
