#include "serve/json_constraint.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "base/check.h"
#include "serve/internal/json_grammar.h"

namespace sovai::serve {

using base::InvalidArgumentError;
using base::Result;
using base::Status;
using json_internal::CountUp;
using json_internal::Done;
using json_internal::Element;
using json_internal::Json;
using json_internal::Kind;
using json_internal::kRejected;
using json_internal::kStrBody;
using json_internal::kStrF4;
using json_internal::kStrStart;
using json_internal::LiteralNodeOf;
using json_internal::NumberCanContinue;
using json_internal::NumberFinal;
using json_internal::Step;
using json_internal::StepLiteral;
using json_internal::StepNumber;
using json_internal::StepResult;
using json_internal::StepString;
using json_internal::StringOf;

namespace {

// Printable form of token bytes for error messages.
std::string Quote(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : bytes.substr(0, 64)) {
    const auto b = static_cast<uint8_t>(c);
    if (b >= 0x20 && b < 0x7F && c != '"' && c != '\\') {
      out += c;
    } else {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  if (bytes.size() > 64) out += "...";
  return out + "\"";
}

}  // namespace

// -----------------------------------------------------------------------------------------------
// ConstraintVocabulary

namespace {

// A preorder trie of (bytes, token) entries.
class TrieBuilder {
 public:
  explicit TrieBuilder(std::vector<std::pair<std::string_view, int32_t>> entries)
      : entries_(std::move(entries)) {
    std::sort(entries_.begin(), entries_.end());
  }

  ConstraintVocabulary::Trie Build() && {
    trie_.token_ids.reserve(entries_.size());
    for (const auto& entry : entries_) trie_.token_ids.push_back(entry.second);
    AddNode(0, entries_.size(), 0, 0);
    return std::move(trie_);
  }

 private:
  // The node for the entries [lo, hi), which share their first `depth` bytes; those with exactly
  // `depth` bytes sort first. Recursion is as deep as the longest token.
  void AddNode(size_t lo, size_t hi, size_t depth, uint8_t byte) {
    const size_t node = trie_.nodes.size();
    trie_.nodes.push_back({.byte = byte});
    size_t i = lo;
    while (i < hi && entries_[i].first.size() == depth) ++i;
    trie_.nodes[node].tokens_begin = static_cast<uint32_t>(lo);
    trie_.nodes[node].tokens_end = static_cast<uint32_t>(i);
    while (i < hi) {
      const char c = entries_[i].first[depth];
      size_t j = i;
      while (j < hi && entries_[j].first[depth] == c) ++j;
      AddNode(i, j, depth + 1, static_cast<uint8_t>(c));
      i = j;
    }
    trie_.nodes[node].subtree_end = static_cast<uint32_t>(trie_.nodes.size());
  }

  std::vector<std::pair<std::string_view, int32_t>> entries_;
  ConstraintVocabulary::Trie trie_;
};

constexpr uint32_t kNumStringStates = kStrF4 + 1;

}  // namespace

const ConstraintVocabulary::StringTable* ConstraintVocabulary::string_table(
    uint32_t string_state) const {
  if (string_state == kStrStart || string_state >= kNumStringStates) return nullptr;
  return &string_tables_[string_state - 1];
}

Result<std::shared_ptr<const ConstraintVocabulary>> ConstraintVocabulary::Create(
    std::vector<std::string> token_bytes, std::vector<int32_t> eos_token_ids) {
  if (token_bytes.empty()) return InvalidArgumentError("constraint vocabulary is empty");
  if (token_bytes.size() > kMaxConstraintVocabSize) {
    return InvalidArgumentError("constraint vocabulary has " + std::to_string(token_bytes.size()) +
                                " tokens, more than " + std::to_string(kMaxConstraintVocabSize));
  }
  std::shared_ptr<ConstraintVocabulary> vocab(new ConstraintVocabulary());
  vocab->token_bytes_ = std::move(token_bytes);
  const std::vector<std::string>& tokens = vocab->token_bytes_;
  vocab->is_eos_.assign(tokens.size(), 0);
  for (int32_t id : eos_token_ids) {
    if (id < 0 || static_cast<size_t>(id) >= tokens.size()) {
      return InvalidArgumentError("end-of-sequence token id " + std::to_string(id) +
                                  " is outside the vocabulary of " + std::to_string(tokens.size()) +
                                  " tokens");
    }
    if (vocab->is_eos_[id] == 0) vocab->eos_token_ids_.push_back(id);
    vocab->is_eos_[id] = 1;
  }
  std::vector<std::pair<std::string_view, int32_t>> entries;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id].size() > kMaxConstraintTokenBytes) {
      return InvalidArgumentError("token " + std::to_string(id) + " has " +
                                  std::to_string(tokens[id].size()) + " bytes, more than " +
                                  std::to_string(kMaxConstraintTokenBytes));
    }
    if (!tokens[id].empty() && vocab->is_eos_[id] == 0) {
      entries.emplace_back(tokens[id], static_cast<int32_t>(id));
    }
  }
  vocab->trie_ = TrieBuilder(entries).Build();

  // Each token read from each state inside a string. The counts use no bounds (the element has
  // none); JsonConstraint::StringTokens applies the string's own minLength/maxLength.
  const Element unbounded = StringOf(0, JsonGrammar::kUnbounded);
  vocab->string_tables_.resize(kNumStringStates - 1);
  for (uint32_t state = kStrBody; state < kNumStringStates; ++state) {
    StringTable& table = vocab->string_tables_[state - 1];
    table.chars.assign(tokens.size(), StringTable::kRefused);
    std::vector<std::pair<std::string_view, int32_t>> closing;
    for (const auto& [bytes, id] : entries) {
      uint32_t aux = state;
      uint16_t chars = state == kStrBody ? 0 : 1;  // a character already begun
      size_t i = 0;
      bool refused = false;
      for (; i < bytes.size(); ++i) {
        const auto b = static_cast<uint8_t>(bytes[i]);
        const StepResult r = StepString(unbounded, 0, aux, b);
        if (r.step == Step::kReject) {
          refused = true;
          break;
        }
        if (r.step == Step::kDone) break;  // the closing quote
        if (aux == kStrBody) ++chars;      // a character begins
        aux = r.aux;
      }
      if (refused) continue;
      if (i == bytes.size()) {
        table.chars[id] = chars;
      } else {
        table.chars[id] = StringTable::kCloses | chars;
        closing.emplace_back(bytes.substr(i + 1), id);
      }
    }
    table.after_quote = TrieBuilder(std::move(closing)).Build();
  }
  return std::shared_ptr<const ConstraintVocabulary>(std::move(vocab));
}

// -----------------------------------------------------------------------------------------------
// JsonConstraint

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> grammar,
                               std::shared_ptr<const ConstraintVocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  SOVAI_CHECK(grammar_ != nullptr && vocab_ != nullptr);
  work_.push_back(NewFrame(0, 0, 0, -1));
  complete_ = Expand(tops_);
  DedupTops(tops_, 0);
}

int32_t JsonConstraint::NewFrame(uint32_t pos, uint32_t count, uint32_t aux, int32_t parent) {
  frames_.push_back({pos, count, aux, parent});
  return static_cast<int32_t>(frames_.size() - 1);
}

bool JsonConstraint::Expand(std::vector<int32_t>& tops_out) {
  const JsonGrammar& g = *grammar_;
  bool complete = false;
  while (!work_.empty()) {
    const int32_t id = work_.back();
    work_.pop_back();
    const Frame f = frames_[id];
    const Element& e = g.elements[f.pos];
    switch (e.kind) {
      case Kind::kEnd: {
        if (f.parent < 0) {
          complete = true;
          break;
        }
        const Frame p = frames_[f.parent];
        const Element& pe = g.elements[p.pos];
        if (pe.kind == Kind::kRule) {
          work_.push_back(NewFrame(p.pos + 1, 0, 0, p.parent));
        } else {
          SOVAI_CHECK(pe.kind == Kind::kRepeat);
          work_.push_back(NewFrame(p.pos, CountUp(p.count, pe), 0, p.parent));
        }
        break;
      }
      case Kind::kRule: {
        // A rule in tail position returns straight to our caller: shorter stacks, and stacks
        // that differ only in how they got here compare equal.
        const int32_t parent = g.elements[f.pos + 1].kind == Kind::kEnd ? f.parent : id;
        for (uint32_t a = g.rule_alts_begin[e.arg]; a < g.rule_alts_begin[e.arg + 1]; ++a) {
          work_.push_back(NewFrame(g.alt_starts[a], 0, 0, parent));
        }
        break;
      }
      case Kind::kRepeat:
        if (f.count < e.max) {
          for (uint32_t a = g.rule_alts_begin[e.arg]; a < g.rule_alts_begin[e.arg + 1]; ++a) {
            work_.push_back(NewFrame(g.alt_starts[a], 0, 0, id));
          }
        }
        if (f.count >= e.min) work_.push_back(NewFrame(f.pos + 1, 0, 0, f.parent));
        break;
      case Kind::kByte:
        tops_out.push_back(id);
        if (e.min == 0) work_.push_back(NewFrame(f.pos + 1, 0, 0, f.parent));
        break;
      case Kind::kString:
        tops_out.push_back(id);
        break;
      case Kind::kNumber:
        if (NumberCanContinue(e, f.count, f.aux)) tops_out.push_back(id);
        if (NumberFinal(f.aux)) work_.push_back(NewFrame(f.pos + 1, 0, 0, f.parent));
        break;
      case Kind::kLiteral: {
        const JsonGrammar::LiteralNode& node = g.literal_nodes[LiteralNodeOf(e, f.aux)];
        if (node.num_edges > 0) tops_out.push_back(id);
        if (node.terminal) work_.push_back(NewFrame(f.pos + 1, 0, 0, f.parent));
        break;
      }
    }
  }
  return complete;
}

bool JsonConstraint::Advance(std::vector<int32_t>& tops, size_t begin, size_t end, uint8_t byte,
                             std::vector<int32_t>& tops_out) {
  const JsonGrammar& g = *grammar_;
  const size_t out_begin = tops_out.size();
  bool complete = false;
  for (size_t i = begin; i < end; ++i) {
    const Frame f = frames_[tops[i]];
    const Element& e = g.elements[f.pos];
    StepResult r;
    switch (e.kind) {
      case Kind::kByte:
        r = byte == e.arg ? Done() : kRejected;
        break;
      case Kind::kString:
        r = StepString(e, f.count, f.aux, byte);
        break;
      case Kind::kNumber:
        r = StepNumber(e, f.count, f.aux, byte);
        break;
      case Kind::kLiteral:
        r = StepLiteral(g, e, f.aux, byte);
        break;
      default:
        SOVAI_CHECK(false) << "a stack top is not a terminal";
    }
    if (r.step == Step::kReject) continue;
    if (r.step == Step::kStay) {
      const int32_t next = NewFrame(f.pos, r.count, r.aux, f.parent);
      // The common case, a terminal that goes on and cannot end here, needs no expansion.
      const bool goes_on_only = e.kind == Kind::kString ||
                                (e.kind == Kind::kNumber && !NumberFinal(r.aux) &&
                                 NumberCanContinue(e, r.count, r.aux)) ||
                                (e.kind == Kind::kLiteral && !g.literal_nodes[r.aux].terminal);
      if (goes_on_only) {
        tops_out.push_back(next);
        continue;
      }
      work_.push_back(next);
    } else {
      work_.push_back(NewFrame(f.pos + 1, 0, 0, f.parent));
    }
    complete |= Expand(tops_out);
  }
  DedupTops(tops_out, out_begin);
  if (tops_out.size() - out_begin > kMaxParseStacks) tops_out.resize(out_begin + kMaxParseStacks);
  return complete;
}

void JsonConstraint::DedupTops(std::vector<int32_t>& tops, size_t begin) {
  if (tops.size() - begin < 2) return;
  auto key = [&](int32_t id) {
    const Frame& f = frames_[id];
    return std::tuple(f.pos, f.aux, f.count, f.parent);
  };
  std::sort(tops.begin() + begin, tops.end(),
            [&](int32_t a, int32_t b) { return key(a) < key(b); });
  tops.erase(std::unique(tops.begin() + begin, tops.end(),
                         [&](int32_t a, int32_t b) { return key(a) == key(b); }),
             tops.end());
}

void JsonConstraint::MarkTokens(const ConstraintVocabulary::Trie& trie, uint32_t node,
                                const CharsFilter* filter, std::vector<uint8_t>& mask) const {
  const ConstraintVocabulary::TrieNode& n = trie.nodes[node];
  for (uint32_t t = n.tokens_begin; t < n.tokens_end; ++t) {
    const int32_t id = trie.token_ids[t];
    if (filter != nullptr) {
      const uint32_t chars = filter->chars[id] & ~ConstraintVocabulary::StringTable::kCloses;
      if (chars < filter->min || chars > filter->max) continue;
    }
    mask[id] = 1;
  }
}

void JsonConstraint::Walk(const ConstraintVocabulary::Trie& trie, uint32_t node, size_t begin,
                          size_t end, const CharsFilter* filter, std::vector<uint8_t>& mask) {
  const ConstraintVocabulary::TrieNode* nodes = trie.nodes.data();
  for (uint32_t c = node + 1; c < nodes[node].subtree_end; c = nodes[c].subtree_end) {
    const size_t frames_mark = frames_.size();
    const size_t out_begin = scratch_tops_.size();
    const bool complete = Advance(scratch_tops_, begin, end, nodes[c].byte, scratch_tops_);
    const size_t out_end = scratch_tops_.size();
    if (out_end > out_begin || complete) {
      MarkTokens(trie, c, filter, mask);
      if (out_end > out_begin && nodes[c].subtree_end > c + 1) {
        Walk(trie, c, out_begin, out_end, filter, mask);
      }
    }
    scratch_tops_.resize(out_begin);
    frames_.resize(frames_mark);
  }
}

void JsonConstraint::StringTokens(int32_t top, const ConstraintVocabulary::StringTable& table,
                                  std::vector<uint8_t>& mask) {
  const Frame f = frames_[top];
  const Element& e = grammar_->elements[f.pos];
  // How many more characters the string may gain, and how many it needs before closing.
  constexpr uint32_t kAny = ConstraintVocabulary::StringTable::kCloses - 1;
  const uint32_t room = e.max == JsonGrammar::kUnbounded ? kAny : std::min(e.max - f.count, kAny);
  const uint32_t needed = f.count >= e.min ? 0 : e.min - f.count;

  // Tokens that stay inside the string: chars <= room (closing and refused ones are above).
  const uint16_t* chars = table.chars.data();
  const size_t size = table.chars.size();
  uint8_t* out = mask.data();
  for (size_t id = 0; id < size; ++id) out[id] |= chars[id] <= room ? 1 : 0;

  // Tokens that close it: walk what follows their closing quote from the stacks after it.
  const size_t frames_mark = frames_.size();
  scratch_tops_.clear();
  work_.push_back(NewFrame(f.pos + 1, 0, 0, f.parent));
  const bool complete = Expand(scratch_tops_);
  DedupTops(scratch_tops_, 0);
  const CharsFilter filter{chars, needed, room};
  if (!scratch_tops_.empty() || complete) MarkTokens(table.after_quote, 0, &filter, mask);
  if (!scratch_tops_.empty()) {
    Walk(table.after_quote, 0, 0, scratch_tops_.size(), &filter, mask);
  }
  scratch_tops_.clear();
  frames_.resize(frames_mark);
}

size_t JsonConstraint::AllowedTokens(std::vector<uint8_t>& mask) {
  mask.assign(vocab_->vocab_size(), 0);
  if (finished_) return 0;
  if (complete_) {
    for (int32_t id : vocab_->eos_token_ids()) mask[id] = 1;
  }
  // Stacks are alternatives: the allowed set is the union of what each allows. Stacks inside a
  // string go through the vocabulary's string tables, the others walk the trie together.
  general_tops_.clear();
  for (int32_t top : tops_) {
    const Frame& f = frames_[top];
    const ConstraintVocabulary::StringTable* table =
        grammar_->elements[f.pos].kind == Kind::kString ? vocab_->string_table(f.aux) : nullptr;
    if (table != nullptr) {
      StringTokens(top, *table, mask);
    } else {
      general_tops_.push_back(top);
    }
  }
  if (!general_tops_.empty()) {
    scratch_tops_.assign(general_tops_.begin(), general_tops_.end());
    Walk(vocab_->trie(), 0, 0, scratch_tops_.size(), nullptr, mask);
    scratch_tops_.clear();
  }
  return static_cast<size_t>(std::count(mask.begin(), mask.end(), 1));
}

Status JsonConstraint::Accept(int32_t token) {
  if (finished_) {
    return base::FailedPreconditionError(
        "the JSON output already ended with an end-of-sequence token");
  }
  if (token < 0 || static_cast<size_t>(token) >= vocab_->vocab_size()) {
    return InvalidArgumentError("token " + std::to_string(token) +
                                " is outside the vocabulary of " +
                                std::to_string(vocab_->vocab_size()) + " tokens");
  }
  if (vocab_->IsEos(token)) {
    if (!complete_) {
      return InvalidArgumentError("end-of-sequence token " + std::to_string(token) +
                                  " before the JSON value is complete (after " +
                                  std::to_string(bytes_accepted_) + " bytes)");
    }
    finished_ = true;
    return Status();
  }
  const std::string& bytes = vocab_->token_bytes(token);
  if (bytes.empty()) {
    return InvalidArgumentError("token " + std::to_string(token) +
                                " is a special token, which JSON output cannot contain");
  }
  const size_t frames_mark = frames_.size();
  scratch_tops_.assign(tops_.begin(), tops_.end());
  size_t begin = 0;
  size_t end = scratch_tops_.size();
  bool complete = false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const size_t out_begin = scratch_tops_.size();
    complete = begin < end && Advance(scratch_tops_, begin, end, bytes[i], scratch_tops_);
    if (scratch_tops_.size() == out_begin && !complete) {
      scratch_tops_.clear();
      frames_.resize(frames_mark);
      return InvalidArgumentError("token " + std::to_string(token) + " " + Quote(bytes) +
                                  " does not continue the JSON output: its byte " +
                                  std::to_string(i) + " (output byte " +
                                  std::to_string(bytes_accepted_ + i) + ") is not allowed");
    }
    begin = out_begin;
    end = scratch_tops_.size();
  }
  tops_.assign(scratch_tops_.begin() + begin, scratch_tops_.begin() + end);
  scratch_tops_.clear();
  complete_ = complete;
  bytes_accepted_ += bytes.size();
  Compact();
  return Status();
}

void JsonConstraint::Compact() {
  remap_.assign(frames_.size(), -1);
  live_frames_.clear();
  for (int32_t& top : tops_) {
    for (int32_t x = top; x >= 0 && remap_[x] < 0; x = frames_[x].parent) {
      remap_[x] = static_cast<int32_t>(live_frames_.size());
      live_frames_.push_back(frames_[x]);
    }
    top = remap_[top];
  }
  for (Frame& f : live_frames_) {
    if (f.parent >= 0) f.parent = remap_[f.parent];
  }
  frames_.swap(live_frames_);
}

}  // namespace sovai::serve
