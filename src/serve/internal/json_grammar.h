// The parts of serve/json_constraint.h's implementation that its three files share: the byte
// state machines of the grammar's terminals (json_terminals.cc; the constraint and the vocabulary
// step them), and the grammar builder that schema compilation (json_schema.cc) and the
// any-object grammar use. Internal to serve.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "serve/json_constraint.h"

namespace sovai::serve::json_internal {

using base::InvalidArgumentError;
using base::Result;
using base::Status;
using Json = nlohmann::ordered_json;
using Element = JsonGrammar::Element;
using Kind = JsonGrammar::Kind;

// ---------------------------------------------------------------------------------------------
// Terminal state machines. A terminal frame holds (count, aux); feeding it a byte rejects it,
// keeps it in the terminal with a new state (kStay), or ends it with nothing left to take
// (kDone: the parse moves to the next element).

enum class Step : uint8_t { kReject, kStay, kDone };
struct StepResult {
  Step step = Step::kReject;
  uint32_t count = 0;
  uint32_t aux = 0;
};
constexpr StepResult kRejected{};
inline StepResult Stay(uint32_t count, uint32_t aux) { return {Step::kStay, count, aux}; }
inline StepResult Done() { return {Step::kDone, 0, 0}; }

inline bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
inline bool IsHex(uint8_t b) {
  return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}
inline bool InRange(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

// Counts one more repetition (or code point). Without an upper bound only "at least min" matters,
// so the count saturates there: equal states then compare equal, and no counter can overflow.
inline uint32_t CountUp(uint32_t count, const Element& e) {
  if (e.max == JsonGrammar::kUnbounded) return std::min(count + 1, e.min);
  return count + 1;
}

// kString: `"`, then characters, then `"`. count: code points so far.
enum StringState : uint32_t {
  kStrStart = 0,  // before the opening quote
  kStrBody,       // between characters
  kStrEscape,     // after '\'
  kStrU1,         // after "\u"
  kStrU2AfterD,   // after "\uD": the next digit tells a surrogate
  kStrHex3,       // hex digits left of a BMP escape
  kStrHex2,
  kStrHex1,
  kStrHighHex2,  // hex digits left of a high surrogate, which a low one must follow
  kStrHighHex1,
  kStrLowBackslash,
  kStrLowU,
  kStrLowD,
  kStrLowC,  // "\uD" of the low surrogate seen: C-F next
  kStrLowHex2,
  kStrLowHex1,
  kStrCont1,  // UTF-8 continuation bytes left
  kStrCont2,
  kStrCont3,
  kStrE0,  // after E0: A0-BF (no overlong forms)
  kStrED,  // after ED: 80-9F (no surrogates)
  kStrF0,  // after F0: 90-BF (no overlong forms)
  kStrF4,  // after F4: 80-8F (nothing above U+10FFFF)
};

inline uint32_t LiteralNodeOf(const Element& e, uint32_t aux) { return aux == 0 ? e.arg : aux; }

// kString, kNumber and kLiteral: one byte more (json_terminals.cc).
StepResult StepString(const Element& e, uint32_t count, uint32_t aux, uint8_t b);
StepResult StepNumber(const Element& e, uint32_t count, uint32_t aux, uint8_t b);
// A number that may end here; one that may take another byte.
bool NumberFinal(uint32_t aux);
bool NumberCanContinue(const Element& e, uint32_t count, uint32_t aux);
StepResult StepLiteral(const JsonGrammar& g, const Element& e, uint32_t aux, uint8_t b);

// ---------------------------------------------------------------------------------------------
// Grammar construction.

using Sequence = std::vector<Element>;

inline Element Byte(char c) { return {Kind::kByte, 0, static_cast<uint8_t>(c), 1, 1}; }
inline Element OptionalSpace() { return {Kind::kByte, 0, ' ', 0, 1}; }
inline Element StringOf(uint32_t min, uint32_t max) { return {Kind::kString, 0, 0, min, max}; }
inline Element NumberOf(uint8_t flags) { return {Kind::kNumber, flags, 0, 0, 0}; }
inline Element LiteralOf(uint32_t root) { return {Kind::kLiteral, 0, root, 0, 0}; }
inline Element Ref(uint32_t rule) { return {Kind::kRule, 0, rule, 0, 0}; }
inline Element RepeatOf(uint32_t rule, uint32_t min, uint32_t max) {
  return {Kind::kRepeat, 0, rule, min, max};
}

// Compact JSON text of a value; never throws (invalid UTF-8 in a schema string becomes U+FFFD).
inline std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

class GrammarBuilder {
 public:
  GrammarBuilder() {
    literal_children_.emplace_back();  // node 0: unused, so that Frame::aux 0 means "root"
    literal_terminal_.push_back(false);
  }

  uint32_t NewRule() {
    rules_.emplace_back();
    return static_cast<uint32_t>(rules_.size() - 1);
  }

  // A rule with no alternative: it matches nothing (a false schema, recursion cut off).
  uint32_t EmptyRule() { return NewRule(); }

  Status AddAlt(uint32_t rule, Sequence seq) {
    num_elements_ += seq.size() + 1;
    if (num_elements_ > kMaxGrammarElements) {
      return InvalidArgumentError("JSON schema is too large: its grammar exceeds " +
                                  std::to_string(kMaxGrammarElements) + " elements");
    }
    rules_[rule].push_back(std::move(seq));
    return Status();
  }

  Result<uint32_t> RuleOf(std::vector<Sequence> alts) {
    const uint32_t rule = NewRule();
    for (Sequence& alt : alts) SOVAI_RETURN_IF_ERROR(AddAlt(rule, std::move(alt)));
    return rule;
  }

  // A trie of the (non-empty) byte strings; returns its root.
  Result<uint32_t> LiteralSet(const std::vector<std::string>& values) {
    const uint32_t root = NewLiteralNode();
    for (const std::string& value : values) {
      SOVAI_CHECK(!value.empty());
      literal_bytes_ += value.size();
      if (literal_bytes_ > kMaxLiteralBytes) {
        return InvalidArgumentError(
            "JSON schema is too large: its enum and const values and "
            "property names exceed " +
            std::to_string(kMaxLiteralBytes) + " bytes");
      }
      uint32_t node = root;
      for (char c : value) {
        const auto b = static_cast<uint8_t>(c);
        auto it = literal_children_[node].find(b);
        if (it == literal_children_[node].end()) {
          const uint32_t child = NewLiteralNode();
          literal_children_[node][b] = child;
          node = child;
        } else {
          node = it->second;
        }
      }
      literal_terminal_[node] = true;
    }
    return root;
  }

  // Drops what can match nothing, then lays the rules out flat.
  Result<std::shared_ptr<JsonGrammar>> Finish(uint32_t root) {
    const std::vector<bool> productive = ProductiveRules();
    if (!productive[root]) {
      return InvalidArgumentError(
          "JSON schema admits no value that can be generated (a false schema, an unsatisfiable "
          "branch, or a $ref cycle with no way out within " +
          std::to_string(kMaxRefRecursion) + " levels)");
    }
    CheckRepeatsConsume(productive);
    auto g = std::make_shared<JsonGrammar>();
    g->elements.push_back(Ref(root));
    g->elements.push_back(Element{});
    for (size_t r = 0; r < rules_.size(); ++r) {
      g->rule_alts_begin.push_back(static_cast<uint32_t>(g->alt_starts.size()));
      for (const Sequence& alt : rules_[r]) {
        if (!AltProductive(alt, productive)) continue;
        g->alt_starts.push_back(static_cast<uint32_t>(g->elements.size()));
        for (Element e : alt) {
          // A repeat of something impossible can only be done zero times.
          if (e.kind == Kind::kRepeat && !productive[e.arg]) e.max = 0;
          g->elements.push_back(e);
        }
        g->elements.push_back(Element{});
      }
    }
    g->rule_alts_begin.push_back(static_cast<uint32_t>(g->alt_starts.size()));
    g->literal_nodes.resize(literal_children_.size());
    for (size_t n = 0; n < literal_children_.size(); ++n) {
      g->literal_nodes[n].first_edge = static_cast<uint32_t>(g->literal_edges.size());
      g->literal_nodes[n].num_edges = static_cast<uint32_t>(literal_children_[n].size());
      g->literal_nodes[n].terminal = literal_terminal_[n];
      for (auto [byte, to] : literal_children_[n]) g->literal_edges.push_back({byte, to});
    }
    return g;
  }

 private:
  uint32_t NewLiteralNode() {
    literal_children_.emplace_back();
    literal_terminal_.push_back(false);
    return static_cast<uint32_t>(literal_children_.size() - 1);
  }

  static bool AltProductive(const Sequence& alt, const std::vector<bool>& productive) {
    return std::all_of(alt.begin(), alt.end(), [&](const Element& e) {
      if (e.kind == Kind::kRule) return static_cast<bool>(productive[e.arg]);
      if (e.kind == Kind::kRepeat) return e.min == 0 || productive[e.arg];
      return true;
    });
  }

  std::vector<bool> ProductiveRules() const {
    std::vector<bool> productive(rules_.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules_.size(); ++r) {
        if (productive[r]) continue;
        for (const Sequence& alt : rules_[r]) {
          if (AltProductive(alt, productive)) {
            productive[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    return productive;
  }

  // A repeated rule that could match the empty string would let the parser loop without
  // consuming bytes; every rule this file repeats starts with a byte, a value or a member.
  void CheckRepeatsConsume(const std::vector<bool>& productive) const {
    std::vector<bool> nullable(rules_.size(), false);
    auto element_nullable = [&](const Element& e) {
      switch (e.kind) {
        case Kind::kByte:
          return e.min == 0;
        case Kind::kRule:
          return static_cast<bool>(nullable[e.arg]);
        case Kind::kRepeat:
          return e.min == 0 || nullable[e.arg];
        default:
          return false;
      }
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules_.size(); ++r) {
        if (nullable[r]) continue;
        for (const Sequence& alt : rules_[r]) {
          if (std::all_of(alt.begin(), alt.end(), element_nullable)) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    for (const auto& alts : rules_) {
      for (const Sequence& alt : alts) {
        for (const Element& e : alt) {
          if (e.kind == Kind::kRepeat && productive[e.arg]) {
            SOVAI_CHECK(!nullable[e.arg]) << "repeated rule " << e.arg << " matches nothing";
          }
        }
      }
    }
  }

  std::vector<std::vector<Sequence>> rules_;
  size_t num_elements_ = 0;
  std::vector<std::map<uint8_t, uint32_t>> literal_children_;
  std::vector<bool> literal_terminal_;
  size_t literal_bytes_ = 0;
};

// Rules for "any JSON value" nesting at most kMaxAnyValueDepth - depth more levels.
class AnyValueRules {
 public:
  explicit AnyValueRules(GrammarBuilder& b) : b_(b) {}

  Result<uint32_t> Value(int depth) {
    SOVAI_RETURN_IF_ERROR(Build(depth));
    return value_[depth];
  }
  Result<uint32_t> Object(int depth) {
    SOVAI_RETURN_IF_ERROR(Build(depth));
    return object_[depth];
  }
  Result<uint32_t> Scalars() {
    if (!scalars_) {
      SOVAI_ASSIGN_OR_RETURN(scalars_, b_.LiteralSet({"true", "false", "null"}));
    }
    return *scalars_;
  }

 private:
  Status Build(int depth) {
    SOVAI_CHECK(depth >= 0 && depth <= kMaxAnyValueDepth);
    if (value_.empty()) {
      value_.assign(kMaxAnyValueDepth + 1, 0);
      object_.assign(kMaxAnyValueDepth + 1, 0);
      built_.assign(kMaxAnyValueDepth + 1, false);
    }
    if (built_[depth]) return Status();
    SOVAI_ASSIGN_OR_RETURN(uint32_t scalars, Scalars());
    std::vector<Sequence> value_alts = {
        {StringOf(0, JsonGrammar::kUnbounded)}, {NumberOf(0)}, {LiteralOf(scalars)}};
    if (depth < kMaxAnyValueDepth) {
      SOVAI_ASSIGN_OR_RETURN(uint32_t inner, Value(depth + 1));
      // object: {} or {member (, member)*}
      SOVAI_ASSIGN_OR_RETURN(uint32_t member,
                             b_.RuleOf({{StringOf(0, JsonGrammar::kUnbounded), Byte(':'),
                                         OptionalSpace(), Ref(inner)}}));
      SOVAI_ASSIGN_OR_RETURN(uint32_t more_members,
                             b_.RuleOf({{Byte(','), OptionalSpace(), Ref(member)}}));
      SOVAI_ASSIGN_OR_RETURN(
          object_[depth],
          b_.RuleOf({{Byte('{'), Byte('}')},
                     {Byte('{'), Ref(member), RepeatOf(more_members, 0, JsonGrammar::kUnbounded),
                      Byte('}')}}));
      SOVAI_ASSIGN_OR_RETURN(uint32_t more_items,
                             b_.RuleOf({{Byte(','), OptionalSpace(), Ref(inner)}}));
      SOVAI_ASSIGN_OR_RETURN(
          uint32_t array,
          b_.RuleOf({{Byte('['), Byte(']')},
                     {Byte('['), Ref(inner), RepeatOf(more_items, 0, JsonGrammar::kUnbounded),
                      Byte(']')}}));
      value_alts.push_back({Ref(object_[depth])});
      value_alts.push_back({Ref(array)});
    } else {
      SOVAI_ASSIGN_OR_RETURN(object_[depth], b_.RuleOf({{Byte('{'), Byte('}')}}));
    }
    SOVAI_ASSIGN_OR_RETURN(value_[depth], b_.RuleOf(std::move(value_alts)));
    built_[depth] = true;
    return Status();
  }

  GrammarBuilder& b_;
  std::vector<uint32_t> value_;
  std::vector<uint32_t> object_;
  std::vector<bool> built_;
  std::optional<uint32_t> scalars_;
};

}  // namespace sovai::serve::json_internal
