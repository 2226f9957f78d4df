#include "model/tokenizer_trainer.h"

#include <algorithm>
#include <queue>
#include <unordered_set>

#include "base/json.h"
#include "model/tokenizer_limits.h"
#include "model/tokenizer_regex.h"
#include "model/tokenizer_unicode.h"

namespace sovai::model {
namespace {

using base::Result;
using base::Status;

// The ByteLevel pre-tokenizer's GPT-2 pattern (tokenizer_pipeline.cc uses the same text).
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

const std::vector<std::string>& SpecialTokens() {
  static const std::vector<std::string> tokens = {
      kBeginOfTextToken, kEndOfTextToken, kStartHeaderToken, kEndHeaderToken, kEndOfTurnToken};
  return tokens;
}

// Llama 3's chat template, with our special tokens.
constexpr std::string_view kChatTemplate =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiAlnum(char c) { return IsAsciiLetter(c) || (c >= '0' && c <= '9'); }

bool IsAsciiNonSpace(char c) {
  return static_cast<uint8_t>(c) < 0x80 && !unicode::IsJsWhitespace(static_cast<uint8_t>(c));
}

// Whether the GPT-2 pattern always ends a match at text[pos] and starts the next one there, so
// that pre-tokenizing text[..pos) and text[pos..) apart gives the same pre-tokens as the whole.
// Two such places: after a lone newline between non-space ASCII characters ("a\n" | "x"; a
// longer whitespace run would match differently at the end of a piece, where `\s+(?!\S)` sees
// no next character), and before a space between an ASCII letter or digit and an ASCII letter
// ("foo" | " bar").
bool IsChunkBoundary(std::string_view text, size_t pos) {
  if (pos < 2 || pos + 1 >= text.size()) return false;
  char before = text[pos - 1];
  char at = text[pos];
  if (before == '\n') return IsAsciiNonSpace(text[pos - 2]) && IsAsciiNonSpace(at);
  return at == ' ' && IsAsciiAlnum(before) && IsAsciiLetter(text[pos + 1]);
}

uint64_t PairKey(uint32_t left, uint32_t right) {
  return (static_cast<uint64_t>(left) << 32) | right;
}

std::string Quote(std::string_view text) { return base::DumpJson(nlohmann::json(text)); }

struct Word {
  std::vector<uint32_t> symbols;
  uint64_t count;
};

// A candidate merge: highest count first, then the smallest (left, right).
struct Candidate {
  uint64_t count;
  uint64_t pair;
  bool operator<(const Candidate& o) const {
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

// The files of a trained tokenizer: tokenizer.json (written by hand so that the vocabulary keeps
// id order) and tokenizer_config.json, from the learned symbols and merges.
TrainedTokenizer WriteTokenizerFiles(const std::vector<std::string>& spelling,
                                     const std::vector<std::pair<uint32_t, uint32_t>>& merges) {
  const size_t specials = SpecialTokens().size();
  auto byte_level = [](std::string_view raw) {
    std::string out;
    unicode::AppendByteLevel(&out, raw);
    return out;
  };
  const auto first_special = static_cast<uint32_t>(spelling.size());
  std::string added;
  for (size_t i = 0; i < specials; ++i) {
    if (i > 0) added += ",\n    ";
    added += "{\"id\": " + std::to_string(first_special + i) +
             ", \"content\": " + Quote(SpecialTokens()[i]) +
             ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
             "\"normalized\": false, \"special\": true}";
  }
  std::string vocab;
  for (size_t id = 0; id < spelling.size(); ++id) {
    if (id > 0) vocab += ",\n      ";
    vocab += Quote(byte_level(spelling[id])) + ": " + std::to_string(id);
  }
  std::string merge_list;
  for (size_t i = 0; i < merges.size(); ++i) {
    if (i > 0) merge_list += ",\n      ";
    merge_list += "[" + Quote(byte_level(spelling[merges[i].first])) + ", " +
                  Quote(byte_level(spelling[merges[i].second])) + "]";
  }
  const std::string bos = Quote(kBeginOfTextToken);
  std::string json;
  json += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  json += "  \"added_tokens\": [\n    " + added + "\n  ],\n";
  json += "  \"normalizer\": null,\n";
  json +=
      "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
      "\"trim_offsets\": true, \"use_regex\": true},\n";
  json +=
      "  \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
      "{\"id\": " +
      bos +
      ", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], "
      "\"pair\": [{\"SpecialToken\": {\"id\": " +
      bos +
      ", \"type_id\": 0}}, {\"Sequence\": "
      "{\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": " +
      bos +
      ", \"type_id\": 1}}, {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}], "
      "\"special_tokens\": {" +
      bos + ": {\"id\": " + bos + ", \"ids\": [" + std::to_string(first_special) +
      "], \"tokens\": [" + bos + "]}}},\n";
  json +=
      "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
      "\"trim_offsets\": true, \"use_regex\": true},\n";
  json +=
      "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
      "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n"
      "    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n";
  json += "    \"vocab\": {\n      " + vocab + "\n    },\n";
  json += "    \"merges\": [\n      " + merge_list + "\n    ]\n  }\n}\n";

  nlohmann::json config = {
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"bos_token", kBeginOfTextToken},
      {"eos_token", kEndOfTextToken},
      {"add_bos_token", true},
      {"add_eos_token", false},
      {"clean_up_tokenization_spaces", false},
      {"model_input_names", {"input_ids", "attention_mask"}},
      {"chat_template", kChatTemplate},
  };
  nlohmann::json decoder = nlohmann::json::object();
  for (size_t i = 0; i < specials; ++i) {
    decoder[std::to_string(first_special + i)] = {
        {"content", SpecialTokens()[i]}, {"lstrip", false},
        {"normalized", false},           {"rstrip", false},
        {"single_word", false},          {"special", true}};
  }
  config["added_tokens_decoder"] = decoder;

  TrainedTokenizer out;
  out.tokenizer_json = std::move(json);
  out.tokenizer_config_json = base::DumpJson(config, 2) + "\n";
  out.vocab_size = spelling.size() + specials;
  out.merges = merges.size();
  return out;
}

}  // namespace

Status BpeTrainer::AddText(std::string_view text, std::string_view what) {
  SOVAI_RETURN_IF_ERROR(unicode::ValidateUtf8(text, what));
  SOVAI_ASSIGN_OR_RETURN(Regex pattern, Regex::FromJsPattern(kGpt2Pattern));
  std::vector<RegexMatch> matches;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.size();
    if (end - start > options_.chunk_bytes) {
      end = start + std::max<size_t>(options_.chunk_bytes, 1);
      while (end < text.size() && !IsChunkBoundary(text, end)) ++end;
    }
    std::string_view chunk = text.substr(start, end - start);
    matches.clear();
    SOVAI_RETURN_IF_ERROR(pattern.FindAll(chunk, &matches));
    for (const RegexMatch& m : matches) {
      if (m.end > m.begin) ++word_counts_[std::string(chunk.substr(m.begin, m.end - m.begin))];
    }
    start = end;
  }
  bytes_seen_ += text.size();
  return Status::Ok();
}

Result<TrainedTokenizer> BpeTrainer::Train() const {
  const size_t specials = SpecialTokens().size();
  if (options_.vocab_size < kMinTrainVocabSize || options_.vocab_size > kMaxTrainVocabSize) {
    return base::InvalidArgumentError("vocab size " + std::to_string(options_.vocab_size) +
                                      " is outside [" + std::to_string(kMinTrainVocabSize) + ", " +
                                      std::to_string(kMaxTrainVocabSize) + "]");
  }
  const size_t learned_target = options_.vocab_size - 256 - specials;

  // Symbols: 0..255 are bytes; later ones are learned tokens, spelled as raw bytes here.
  std::vector<std::string> spelling;
  std::unordered_map<std::string, uint32_t> symbol_of;
  for (int b = 0; b < 256; ++b) {
    spelling.emplace_back(1, static_cast<char>(b));
    symbol_of.emplace(spelling.back(), static_cast<uint32_t>(b));
  }

  // Distinct words in a fixed order (sorted), so that nothing depends on hash order.
  std::vector<std::pair<std::string_view, uint64_t>> sorted;
  sorted.reserve(word_counts_.size());
  for (const auto& [word, count] : word_counts_) sorted.emplace_back(word, count);
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [word, count] : sorted) {
    Word w{{}, count};
    for (char c : word) w.symbols.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(w));
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> pair_words;  // may hold duplicates
  for (uint32_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      uint64_t key = PairKey(s[i], s[i + 1]);
      pair_count[key] += static_cast<int64_t>(words[w].count);
      auto& list = pair_words[key];
      if (list.empty() || list.back() != w) list.push_back(w);
    }
  }
  std::priority_queue<Candidate> queue;
  for (const auto& [key, count] : pair_count) queue.push({static_cast<uint64_t>(count), key});

  std::vector<std::pair<uint32_t, uint32_t>> merges;
  std::vector<uint32_t> seen_in_merge(words.size(), UINT32_MAX);
  size_t learned = 0;
  std::unordered_set<uint64_t> touched;
  while (learned < learned_target && !queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    auto it = pair_count.find(top.pair);
    int64_t actual = it == pair_count.end() ? 0 : it->second;
    if (actual <= 0) continue;
    if (static_cast<uint64_t>(actual) != top.count) {
      // Stale: a fresh entry exists when the count grew; re-queue when it shrank.
      if (static_cast<uint64_t>(actual) < top.count) {
        queue.push({static_cast<uint64_t>(actual), top.pair});
      }
      continue;
    }
    auto a = static_cast<uint32_t>(top.pair >> 32);
    auto b = static_cast<uint32_t>(top.pair & 0xFFFFFFFFu);
    std::string merged = spelling[a] + spelling[b];
    uint32_t c;
    auto existing = symbol_of.find(merged);
    if (existing != symbol_of.end()) {
      c = existing->second;
    } else {
      c = static_cast<uint32_t>(spelling.size());
      spelling.push_back(merged);
      symbol_of.emplace(std::move(merged), c);
      ++learned;
    }
    merges.emplace_back(a, b);
    const auto merge_index = static_cast<uint32_t>(merges.size());

    touched.clear();
    auto add = [&](uint32_t left, uint32_t right, int64_t delta, uint32_t w) {
      uint64_t key = PairKey(left, right);
      int64_t& count = pair_count[key];
      count += delta;
      if (delta > 0) {
        touched.insert(key);
        auto& list = pair_words[key];
        if (list.empty() || list.back() != w) list.push_back(w);
      }
      if (count <= 0) pair_count.erase(key);
    };
    std::vector<uint32_t> word_list = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    std::vector<uint32_t> next;
    for (uint32_t w : word_list) {
      if (seen_in_merge[w] == merge_index) continue;
      seen_in_merge[w] = merge_index;
      auto& s = words[w].symbols;
      const auto n = static_cast<int64_t>(words[w].count);
      next.clear();
      bool changed = false;
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          if (!next.empty()) {
            add(next.back(), a, -n, w);
            add(next.back(), c, n, w);
          }
          if (i + 2 < s.size()) {
            add(b, s[i + 2], -n, w);
            add(c, s[i + 2], n, w);
          }
          add(a, b, -n, w);
          next.push_back(c);
          i += 2;
          changed = true;
        } else {
          next.push_back(s[i]);
          ++i;
        }
      }
      if (changed) s.swap(next);
    }
    for (uint64_t key : touched) {
      auto count = pair_count.find(key);
      if (count != pair_count.end()) queue.push({static_cast<uint64_t>(count->second), key});
    }
  }

  return WriteTokenizerFiles(spelling, merges);
}

Result<TrainedTokenizer> TrainTokenizerFiles(base::Env& env, const std::vector<std::string>& inputs,
                                             const std::string& output_dir,
                                             const TrainOptions& options) {
  if (inputs.empty()) return base::InvalidArgumentError("no input files to train on");
  if (inputs.size() > kMaxTrainInputFiles) {
    return base::ResourceExhaustedError(std::to_string(inputs.size()) +
                                        " input files; the limit is " +
                                        std::to_string(kMaxTrainInputFiles));
  }
  if (options.vocab_size < kMinTrainVocabSize || options.vocab_size > kMaxTrainVocabSize) {
    return base::InvalidArgumentError("vocab size " + std::to_string(options.vocab_size) +
                                      " is outside [" + std::to_string(kMinTrainVocabSize) + ", " +
                                      std::to_string(kMaxTrainVocabSize) + "]");
  }
  BpeTrainer trainer(options);
  for (const std::string& path : inputs) {
    uint64_t left = kMaxTrainInputBytes - trainer.bytes_seen();
    auto text = env.ReadFile(path, left);
    if (!text.ok()) {
      if (text.status().code() == base::StatusCode::kResourceExhausted) {
        return base::ResourceExhaustedError("training input '" + path + "' takes the total past " +
                                            std::to_string(kMaxTrainInputBytes >> 20) + " MiB");
      }
      return text.status();
    }
    SOVAI_RETURN_IF_ERROR(trainer.AddText(*text, "training input '" + path + "'"));
  }
  SOVAI_ASSIGN_OR_RETURN(TrainedTokenizer trained, trainer.Train());
  SOVAI_RETURN_IF_ERROR(env.CreateDirs(output_dir));
  SOVAI_RETURN_IF_ERROR(env.WriteFileAtomically(base::JoinPath(output_dir, "tokenizer.json"),
                                                trained.tokenizer_json));
  SOVAI_RETURN_IF_ERROR(env.WriteFileAtomically(base::JoinPath(output_dir, "tokenizer_config.json"),
                                                trained.tokenizer_config_json));
  return trained;
}

}  // namespace sovai::model
