#include "serve/json_constraint.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "base/check.h"

namespace sovai::serve {

using base::InvalidArgumentError;
using base::Result;
using base::Status;
using Json = nlohmann::ordered_json;
using Element = JsonGrammar::Element;
using Kind = JsonGrammar::Kind;

namespace {

// The schema document itself nests at most this deep (the API layer's JSON parser allows 64).
constexpr int kMaxSchemaJsonDepth = 128;

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
StepResult Stay(uint32_t count, uint32_t aux) { return {Step::kStay, count, aux}; }
StepResult Done() { return {Step::kDone, 0, 0}; }

bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }
bool InRange(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

// Counts one more repetition (or code point). Without an upper bound only "at least min" matters,
// so the count saturates there: equal states then compare equal, and no counter can overflow.
uint32_t CountUp(uint32_t count, const Element& e) {
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

StepResult StepString(const Element& e, uint32_t count, uint32_t aux, uint8_t b) {
  const StepResult char_done = Stay(CountUp(count, e), kStrBody);
  const bool cont = InRange(b, 0x80, 0xBF);
  switch (aux) {
    case kStrStart:
      return b == '"' ? Stay(0, kStrBody) : kRejected;
    case kStrBody:
      if (b == '"') return count >= e.min ? Done() : kRejected;
      if (count >= e.max) return kRejected;
      if (b == '\\') return Stay(count, kStrEscape);
      if (InRange(b, 0x20, 0x7F)) return char_done;
      if (InRange(b, 0xC2, 0xDF)) return Stay(count, kStrCont1);
      if (b == 0xE0) return Stay(count, kStrE0);
      if (b == 0xED) return Stay(count, kStrED);
      if (InRange(b, 0xE1, 0xEF)) return Stay(count, kStrCont2);
      if (b == 0xF0) return Stay(count, kStrF0);
      if (b == 0xF4) return Stay(count, kStrF4);
      if (InRange(b, 0xF1, 0xF3)) return Stay(count, kStrCont3);
      return kRejected;  // control characters, stray continuations, C0, C1, F5-FF
    case kStrEscape:
      switch (b) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
          return char_done;
        case 'u':
          return Stay(count, kStrU1);
        default:
          return kRejected;
      }
    case kStrU1:
      if (b == 'd' || b == 'D') return Stay(count, kStrU2AfterD);
      return IsHex(b) ? Stay(count, kStrHex3) : kRejected;
    case kStrU2AfterD:
      if (InRange(b, '0', '7')) return Stay(count, kStrHex2);
      if (InRange(b, '8', '9') || InRange(b, 'a', 'b') || InRange(b, 'A', 'B')) {
        return Stay(count, kStrHighHex2);
      }
      return kRejected;  // DC00-DFFF: a low surrogate without a high one
    case kStrHex3:
      return IsHex(b) ? Stay(count, kStrHex2) : kRejected;
    case kStrHex2:
      return IsHex(b) ? Stay(count, kStrHex1) : kRejected;
    case kStrHex1:
    case kStrLowHex1:
      return IsHex(b) ? char_done : kRejected;
    case kStrHighHex2:
      return IsHex(b) ? Stay(count, kStrHighHex1) : kRejected;
    case kStrHighHex1:
      return IsHex(b) ? Stay(count, kStrLowBackslash) : kRejected;
    case kStrLowBackslash:
      return b == '\\' ? Stay(count, kStrLowU) : kRejected;
    case kStrLowU:
      return b == 'u' ? Stay(count, kStrLowD) : kRejected;
    case kStrLowD:
      return b == 'd' || b == 'D' ? Stay(count, kStrLowC) : kRejected;
    case kStrLowC:
      return InRange(b, 'c', 'f') || InRange(b, 'C', 'F') ? Stay(count, kStrLowHex2) : kRejected;
    case kStrLowHex2:
      return IsHex(b) ? Stay(count, kStrLowHex1) : kRejected;
    case kStrCont1:
      return cont ? char_done : kRejected;
    case kStrCont2:
      return cont ? Stay(count, kStrCont1) : kRejected;
    case kStrCont3:
      return cont ? Stay(count, kStrCont2) : kRejected;
    case kStrE0:
      return InRange(b, 0xA0, 0xBF) ? Stay(count, kStrCont1) : kRejected;
    case kStrED:
      return InRange(b, 0x80, 0x9F) ? Stay(count, kStrCont1) : kRejected;
    case kStrF0:
      return InRange(b, 0x90, 0xBF) ? Stay(count, kStrCont2) : kRejected;
    case kStrF4:
      return InRange(b, 0x80, 0x8F) ? Stay(count, kStrCont2) : kRejected;
    default:
      SOVAI_CHECK(false) << "bad string state " << aux;
      return kRejected;
  }
}

// kNumber: RFC 8259's number. count: digits of the current part.
enum NumberState : uint32_t {
  kNumStart = 0,
  kNumMinus,
  kNumZero,  // a leading 0: no more integer digits
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumExp,  // after e/E
  kNumExpSign,
  kNumExpDigits,
};

StepResult StepNumber(const Element& e, uint32_t count, uint32_t aux, uint8_t b) {
  const bool integer_only = (e.flags & JsonGrammar::kIntegerOnly) != 0;
  const bool exponent = !integer_only && (b == 'e' || b == 'E');
  switch (aux) {
    case kNumStart:
      if (b == '-' && (e.flags & JsonGrammar::kNonNegative) == 0) return Stay(0, kNumMinus);
      [[fallthrough]];
    case kNumMinus:
      if (b == '0') return Stay(0, kNumZero);
      return InRange(b, '1', '9') ? Stay(1, kNumInt) : kRejected;
    case kNumZero:
    case kNumInt:
      if (aux == kNumInt && IsDigit(b) && count < kMaxIntegerDigits)
        return Stay(count + 1, kNumInt);
      if (!integer_only && b == '.') return Stay(0, kNumDot);
      return exponent ? Stay(0, kNumExp) : kRejected;
    case kNumDot:
      return IsDigit(b) ? Stay(1, kNumFrac) : kRejected;
    case kNumFrac:
      if (IsDigit(b) && count < kMaxFractionDigits) return Stay(count + 1, kNumFrac);
      return exponent ? Stay(0, kNumExp) : kRejected;
    case kNumExp:
      if (b == '+' || b == '-') return Stay(0, kNumExpSign);
      [[fallthrough]];
    case kNumExpSign:
      return IsDigit(b) ? Stay(1, kNumExpDigits) : kRejected;
    case kNumExpDigits:
      return IsDigit(b) && count < kMaxExponentDigits ? Stay(count + 1, kNumExpDigits) : kRejected;
    default:
      SOVAI_CHECK(false) << "bad number state " << aux;
      return kRejected;
  }
}

bool NumberFinal(uint32_t aux) {
  return aux == kNumZero || aux == kNumInt || aux == kNumFrac || aux == kNumExpDigits;
}

// Whether some byte continues the number: a state the parse keeps only if it can.
bool NumberCanContinue(const Element& e, uint32_t count, uint32_t aux) {
  const bool integer_only = (e.flags & JsonGrammar::kIntegerOnly) != 0;
  switch (aux) {
    case kNumZero:
      return !integer_only;
    case kNumInt:
      return count < kMaxIntegerDigits || !integer_only;
    case kNumExpDigits:
      return count < kMaxExponentDigits;
    default:
      return true;
  }
}

uint32_t LiteralNodeOf(const Element& e, uint32_t aux) { return aux == 0 ? e.arg : aux; }

StepResult StepLiteral(const JsonGrammar& g, const Element& e, uint32_t aux, uint8_t b) {
  const JsonGrammar::LiteralNode& node = g.literal_nodes[LiteralNodeOf(e, aux)];
  const auto* begin = g.literal_edges.data() + node.first_edge;
  const auto* end = begin + node.num_edges;
  const auto* it = std::lower_bound(
      begin, end, b, [](const JsonGrammar::LiteralEdge& edge, uint8_t v) { return edge.byte < v; });
  if (it == end || it->byte != b) return kRejected;
  if (g.literal_nodes[it->to].num_edges == 0) return Done();
  return Stay(0, it->to);
}

// ---------------------------------------------------------------------------------------------
// Grammar construction.

using Sequence = std::vector<Element>;

Element Byte(char c) { return {Kind::kByte, 0, static_cast<uint8_t>(c), 1, 1}; }
Element OptionalSpace() { return {Kind::kByte, 0, ' ', 0, 1}; }
Element StringOf(uint32_t min, uint32_t max) { return {Kind::kString, 0, 0, min, max}; }
Element NumberOf(uint8_t flags) { return {Kind::kNumber, flags, 0, 0, 0}; }
Element LiteralOf(uint32_t root) { return {Kind::kLiteral, 0, root, 0, 0}; }
Element Ref(uint32_t rule) { return {Kind::kRule, 0, rule, 0, 0}; }
Element RepeatOf(uint32_t rule, uint32_t min, uint32_t max) {
  return {Kind::kRepeat, 0, rule, min, max};
}

// Compact JSON text of a value; never throws (invalid UTF-8 in a schema string becomes U+FFFD).
std::string Dump(const Json& value) {
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

// ---------------------------------------------------------------------------------------------
// Schema compilation.

const std::set<std::string, std::less<>>& AnnotationKeywords() {
  static const std::set<std::string, std::less<>> kKeywords = {"title",
                                                               "description",
                                                               "default",
                                                               "examples",
                                                               "format",
                                                               "$schema",
                                                               "$id",
                                                               "$comment",
                                                               "deprecated",
                                                               "readOnly",
                                                               "writeOnly",
                                                               "contentEncoding",
                                                               "contentMediaType",
                                                               "$defs",
                                                               "definitions"};
  return kKeywords;
}

const std::set<std::string, std::less<>>& ConstrainingKeywords() {
  static const std::set<std::string, std::less<>> kKeywords = {"type",
                                                               "properties",
                                                               "required",
                                                               "additionalProperties",
                                                               "items",
                                                               "minItems",
                                                               "maxItems",
                                                               "minLength",
                                                               "maxLength",
                                                               "enum",
                                                               "const",
                                                               "anyOf",
                                                               "oneOf",
                                                               "allOf",
                                                               "$ref",
                                                               "minimum",
                                                               "maximum",
                                                               "exclusiveMinimum",
                                                               "exclusiveMaximum"};
  return kKeywords;
}

const std::set<std::string, std::less<>>& TypeNames() {
  static const std::set<std::string, std::less<>> kNames = {
      "object", "array", "string", "number", "integer", "boolean", "null"};
  return kNames;
}

std::string PathJoin(const std::string& path, std::string_view key) {
  std::string out = path + "/";
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

Status SchemaError(const std::string& path, const std::string& what) {
  return InvalidArgumentError("JSON schema at " + path + ": " + what);
}

bool Has(const Json& schema, std::string_view key) { return schema.contains(key); }

// A non-negative integer keyword (minItems, maxLength, ...); kUnbounded for absent or huge.
Result<uint32_t> CountKeyword(const Json& schema, std::string_view key, const std::string& path,
                              uint32_t absent) {
  auto it = schema.find(key);
  if (it == schema.end()) return absent;
  double value = -1;
  if (it->is_number_unsigned()) {
    value = static_cast<double>(it->get<uint64_t>());
  } else if (it->is_number_integer()) {
    value = static_cast<double>(it->get<int64_t>());
  } else if (it->is_number_float()) {
    value = it->get<double>();  // JSON Schema allows 2.0 for 2
  }
  if (!(value >= 0) || value != static_cast<double>(static_cast<uint64_t>(std::min(value, 1e19)))) {
    return SchemaError(path, "'" + std::string(key) + "' must be a non-negative integer");
  }
  return value >= JsonGrammar::kUnbounded ? JsonGrammar::kUnbounded : static_cast<uint32_t>(value);
}

bool MatchesType(const Json& value, std::string_view type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    const double d = value.get<double>();
    return d == static_cast<double>(static_cast<int64_t>(d));
  }
  return false;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, GrammarBuilder& b) : root_(root), b_(b), any_(b) {}

  Result<uint32_t> CompileRoot() {
    SOVAI_RETURN_IF_ERROR(AnalyzeRefs());
    return Compile(root_, "#", 0, 0);
  }

 private:
  struct RefInfo {
    const Json* target = nullptr;
    std::vector<std::string> edges;  // refs inside the target (not through other refs)
    bool cyclic = false;             // reaches itself
    bool reaches_cycle = false;      // reaches a cyclic ref (or is one)
  };

  // --- $ref resolution and the shape of the reference graph -------------------------------

  Result<const Json*> Resolve(const std::string& ref, const std::string& path) const {
    if (ref == "#") return &root_;
    if (ref.rfind("#/", 0) != 0) {
      return SchemaError(path, "$ref '" + ref +
                                   "' is not supported: only references inside the schema ('#' "
                                   "or '#/...') are");
    }
    // The fragment is a URI-escaped JSON pointer (RFC 6901 section 6): %XX first, then ~0 ~1.
    std::string pointer;
    for (size_t i = 1; i < ref.size(); ++i) {
      if (ref[i] != '%') {
        pointer += ref[i];
        continue;
      }
      if (i + 2 >= ref.size() || !IsHex(ref[i + 1]) || !IsHex(ref[i + 2])) {
        return SchemaError(path, "$ref '" + ref + "' has a malformed %-escape");
      }
      pointer += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    }
    const Json* node = &root_;
    size_t start = 1;
    while (true) {
      const size_t slash = pointer.find('/', start);
      const std::string token =
          pointer.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      std::string key;
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size() &&
            (token[i + 1] == '0' || token[i + 1] == '1')) {
          key += token[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          key += token[i];
        }
      }
      const Json* next = nullptr;
      if (node->is_object()) {
        auto it = node->find(key);
        if (it != node->end()) next = &*it;
      } else if (node->is_array() && !key.empty() && key.size() < 10 &&
                 std::all_of(key.begin(), key.end(), [](char c) { return IsDigit(c); })) {
        const size_t index = std::stoul(key);
        if (index < node->size()) next = &(*node)[index];
      }
      if (next == nullptr) {
        return SchemaError(path, "$ref '" + ref + "' does not resolve to a part of the schema");
      }
      node = next;
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    return node;
  }

  // The $refs of `schema` and its subschemas, not looking through other $refs. `path` names
  // where each was found, for errors.
  void CollectRefs(const Json& schema, const std::string& path, int depth,
                   std::vector<std::pair<std::string, std::string>>& out) const {
    if (depth > kMaxSchemaDepth || !schema.is_object()) return;
    auto ref = schema.find("$ref");
    if (ref != schema.end() && ref->is_string()) out.emplace_back(ref->get<std::string>(), path);
    auto props = schema.find("properties");
    if (props != schema.end() && props->is_object()) {
      for (auto it = props->begin(); it != props->end(); ++it) {
        CollectRefs(it.value(), PathJoin(PathJoin(path, "properties"), it.key()), depth + 1, out);
      }
    }
    for (const char* key : {"items", "additionalProperties"}) {
      auto it = schema.find(key);
      if (it != schema.end()) CollectRefs(*it, PathJoin(path, key), depth + 1, out);
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      auto it = schema.find(key);
      if (it == schema.end() || !it->is_array()) continue;
      for (size_t i = 0; i < it->size(); ++i) {
        CollectRefs((*it)[i], PathJoin(path, key) + "/" + std::to_string(i), depth + 1, out);
      }
    }
  }

  Status AnalyzeRefs() {
    refs_["#"].target = &root_;
    std::deque<std::string> queue = {"#"};
    while (!queue.empty()) {
      const std::string name = queue.front();
      queue.pop_front();
      std::vector<std::pair<std::string, std::string>> found;
      CollectRefs(*refs_[name].target, name, 0, found);
      for (const auto& [ref, path] : found) {
        refs_[name].edges.push_back(ref);
        if (refs_.count(ref) != 0) continue;
        SOVAI_ASSIGN_OR_RETURN(const Json* target, Resolve(ref, path));
        if (refs_.size() > kMaxSchemaRefs) {
          return InvalidArgumentError("JSON schema has more than " +
                                      std::to_string(kMaxSchemaRefs) + " distinct $ref targets");
        }
        refs_[ref].target = target;
        queue.push_back(ref);
      }
    }
    auto reachable_from = [&](const std::string& start) {
      std::set<std::string> seen;
      std::vector<std::string> stack = refs_[start].edges;
      while (!stack.empty()) {
        std::string n = std::move(stack.back());
        stack.pop_back();
        if (!seen.insert(n).second) continue;
        for (const std::string& e : refs_[n].edges) stack.push_back(e);
      }
      return seen;
    };
    std::map<std::string, std::set<std::string>> reach;
    for (auto& [name, info] : refs_) {
      reach[name] = reachable_from(name);
      info.cyclic = reach[name].count(name) != 0;
    }
    for (auto& [name, info] : refs_) {
      info.reaches_cycle = info.cyclic;
      for (const std::string& n : reach[name]) info.reaches_cycle |= refs_[n].cyclic;
    }
    return Status();
  }

  // --- keywords --------------------------------------------------------------------------

  Status CheckKeywords(const Json& schema, const std::string& path) const {
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      const std::string& key = it.key();
      if (AnnotationKeywords().count(key) != 0 || ConstrainingKeywords().count(key) != 0) continue;
      return SchemaError(path, "keyword '" + key +
                                   "' is not supported (supported: type, properties, required, "
                                   "additionalProperties, items, minItems, maxItems, minLength, "
                                   "maxLength, enum, const, anyOf, oneOf, allOf with one "
                                   "schema, $ref, $defs, minimum, maximum)");
    }
    for (const char* defs : {"$defs", "definitions"}) {
      auto it = schema.find(defs);
      if (it != schema.end() && !it->is_object()) {
        return SchemaError(path, "'" + std::string(defs) + "' must be an object");
      }
    }
    return Status();
  }

  // Only annotations (and `allowed`) may stand beside `keyword`.
  Status CheckOnlyBeside(const Json& schema, const std::string& path, const std::string& keyword,
                         const std::set<std::string, std::less<>>& allowed) const {
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      const std::string& key = it.key();
      if (key == keyword || AnnotationKeywords().count(key) != 0 || allowed.count(key) != 0) {
        continue;
      }
      return SchemaError(path, "'" + key + "' cannot be combined with '" + keyword + "'");
    }
    return Status();
  }

  // --- compilation -----------------------------------------------------------------------

  Result<uint32_t> Compile(const Json& schema, const std::string& path, int depth, int level) {
    if (++nodes_ > kMaxSchemaNodes) {
      return InvalidArgumentError("JSON schema is too large: more than " +
                                  std::to_string(kMaxSchemaNodes) +
                                  " subschemas (counting each $ref expansion)");
    }
    if (depth > kMaxSchemaDepth) {
      return SchemaError(path, "the schema nests deeper than " + std::to_string(kMaxSchemaDepth) +
                                   " levels (counting $ref expansions)");
    }
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return any_.Value(0);
      return b_.EmptyRule();
    }
    if (!schema.is_object()) return SchemaError(path, "a schema must be an object or a boolean");
    SOVAI_RETURN_IF_ERROR(CheckKeywords(schema, path));

    if (auto ref = schema.find("$ref"); ref != schema.end()) {
      if (!ref->is_string()) return SchemaError(path, "'$ref' must be a string");
      SOVAI_RETURN_IF_ERROR(CheckOnlyBeside(schema, path, "$ref", {}));
      return CompileRef(ref->get<std::string>(), path, depth, level);
    }
    for (const char* combinator : {"anyOf", "oneOf", "allOf"}) {
      if (Has(schema, combinator)) {
        return CompileCombinator(schema, combinator, path, depth, level);
      }
    }
    if (Has(schema, "enum") || Has(schema, "const")) return CompileEnum(schema, path);
    return CompileTyped(schema, path, depth, level);
  }

  Result<uint32_t> CompileRef(const std::string& ref, const std::string& path, int depth,
                              int level) {
    auto found = refs_.find(ref);
    if (found == refs_.end()) {
      // Not seen by AnalyzeRefs (e.g. below the depth it looks at): resolve to report why.
      SOVAI_RETURN_IF_ERROR(Resolve(ref, path).status());
      return SchemaError(path, "the schema nests too deeply to follow $ref '" + ref + "'");
    }
    const RefInfo& info = found->second;
    const int next_level = level + (info.cyclic ? 1 : 0);
    // Recursion is unrolled a bounded number of times; deeper, the branch matches nothing and
    // is dropped (the productivity pass), so only values within the bound are generated.
    if (info.cyclic && (next_level > kMaxRefRecursion || depth + 1 > kMaxSchemaDepth)) {
      return b_.EmptyRule();
    }
    const std::pair<std::string, int> key(ref, info.reaches_cycle ? next_level : 0);
    if (auto memo = ref_rules_.find(key); memo != ref_rules_.end()) return memo->second;
    SOVAI_ASSIGN_OR_RETURN(uint32_t rule, Compile(*info.target, ref, depth + 1, next_level));
    ref_rules_[key] = rule;
    return rule;
  }

  Result<uint32_t> CompileCombinator(const Json& schema, const char* combinator,
                                     const std::string& path, int depth, int level) {
    SOVAI_RETURN_IF_ERROR(CheckOnlyBeside(schema, path, combinator, {}));
    const Json& branches = schema[combinator];
    const std::string branches_path = PathJoin(path, combinator);
    if (!branches.is_array() || branches.empty()) {
      return SchemaError(path, "'" + std::string(combinator) + "' must be a non-empty array");
    }
    if (std::string_view(combinator) == "allOf") {
      if (branches.size() != 1) {
        return SchemaError(path, "'allOf' with more than one schema is not supported");
      }
      return Compile(branches[0], branches_path + "/0", depth + 1, level);
    }
    std::vector<Sequence> alts;
    for (size_t i = 0; i < branches.size(); ++i) {
      SOVAI_ASSIGN_OR_RETURN(
          uint32_t branch,
          Compile(branches[i], branches_path + "/" + std::to_string(i), depth + 1, level));
      alts.push_back({Ref(branch)});
    }
    return b_.RuleOf(std::move(alts));
  }

  Result<std::vector<std::string>> Types(const Json& schema, const std::string& path) const {
    auto it = schema.find("type");
    std::vector<std::string> types;
    if (it == schema.end()) return types;
    if (it->is_string()) {
      types.push_back(it->get<std::string>());
    } else if (it->is_array() && !it->empty()) {
      for (const Json& t : *it) {
        if (!t.is_string()) return SchemaError(path, "'type' must be a string or strings");
        types.push_back(t.get<std::string>());
      }
    } else {
      return SchemaError(path, "'type' must be a type name or a non-empty array of them");
    }
    for (const std::string& t : types) {
      if (TypeNames().count(t) == 0) {
        return SchemaError(path, "unknown type '" + t +
                                     "' (object, array, string, number, integer, boolean, null)");
      }
    }
    std::sort(types.begin(), types.end());
    types.erase(std::unique(types.begin(), types.end()), types.end());
    return types;
  }

  Result<uint32_t> CompileEnum(const Json& schema, const std::string& path) {
    SOVAI_RETURN_IF_ERROR(CheckOnlyBeside(schema, path, Has(schema, "enum") ? "enum" : "const",
                                          {"type", "enum", "const"}));
    std::vector<const Json*> values;
    if (auto it = schema.find("enum"); it != schema.end()) {
      if (!it->is_array() || it->empty())
        return SchemaError(path, "'enum' must be a non-empty array");
      if (it->size() > kMaxEnumValues) {
        return SchemaError(path,
                           "'enum' has more than " + std::to_string(kMaxEnumValues) + " values");
      }
      for (const Json& v : *it) values.push_back(&v);
    }
    if (auto it = schema.find("const"); it != schema.end()) {
      if (Has(schema, "enum")) {
        std::erase_if(values, [&](const Json* v) { return *v != *it; });
      } else {
        values.push_back(&*it);
      }
    }
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> types, Types(schema, path));
    std::vector<std::string> texts;
    for (const Json* v : values) {
      if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string& t) {
            return MatchesType(*v, t);
          })) {
        continue;
      }
      texts.push_back(Dump(*v));
    }
    if (texts.empty()) return SchemaError(path, "no value of 'enum'/'const' fits 'type'");
    SOVAI_ASSIGN_OR_RETURN(uint32_t root, b_.LiteralSet(texts));
    return b_.RuleOf({{LiteralOf(root)}});
  }

  Result<uint32_t> CompileTyped(const Json& schema, const std::string& path, int depth, int level) {
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> types, Types(schema, path));
    if (types.empty()) {
      // No type: JSON Schema allows any type, and the type-specific keywords constrain only their
      // own type. Generate the types those keywords name, or any value when there are none.
      auto any = [&](std::initializer_list<const char*> keys) {
        return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return Has(schema, k); });
      };
      if (any({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (any({"items", "minItems", "maxItems"})) types.push_back("array");
      if (any({"minLength", "maxLength"})) types.push_back("string");
      if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) {
        types.push_back("number");
      }
      if (types.empty()) return any_.Value(0);
    }
    uint8_t number_flags = 0;
    for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      auto it = schema.find(key);
      if (it == schema.end()) continue;
      if (!it->is_number()) return SchemaError(path, "'" + std::string(key) + "' must be a number");
      const std::string_view k(key);
      if ((k == "minimum" || k == "exclusiveMinimum") && it->get<double>() >= 0) {
        number_flags |= JsonGrammar::kNonNegative;
      }
    }
    std::vector<Sequence> alts;
    for (const std::string& type : types) {
      if (type == "object") {
        SOVAI_ASSIGN_OR_RETURN(uint32_t object, CompileObject(schema, path, depth, level));
        alts.push_back({Ref(object)});
      } else if (type == "array") {
        SOVAI_ASSIGN_OR_RETURN(uint32_t array, CompileArray(schema, path, depth, level));
        alts.push_back({Ref(array)});
      } else if (type == "string") {
        SOVAI_ASSIGN_OR_RETURN(uint32_t min, CountKeyword(schema, "minLength", path, 0));
        SOVAI_ASSIGN_OR_RETURN(uint32_t max,
                               CountKeyword(schema, "maxLength", path, JsonGrammar::kUnbounded));
        if (min > max) return SchemaError(path, "'minLength' is greater than 'maxLength'");
        if (min > kMaxMinLength) {
          return SchemaError(
              path, "'minLength' above " + std::to_string(kMaxMinLength) + " is not supported");
        }
        alts.push_back({StringOf(min, max)});
      } else if (type == "number") {
        alts.push_back({NumberOf(number_flags)});
      } else if (type == "integer") {
        alts.push_back({NumberOf(number_flags | JsonGrammar::kIntegerOnly)});
      } else if (type == "boolean") {
        SOVAI_ASSIGN_OR_RETURN(uint32_t root, b_.LiteralSet({"true", "false"}));
        alts.push_back({LiteralOf(root)});
      } else {
        SOVAI_CHECK(type == "null");
        alts.push_back({Byte('n'), Byte('u'), Byte('l'), Byte('l')});
      }
    }
    return b_.RuleOf(std::move(alts));
  }

  Result<uint32_t> CompileObject(const Json& schema, const std::string& path, int depth,
                                 int level) {
    const Json empty = Json::object();
    const Json* properties = &empty;
    if (auto it = schema.find("properties"); it != schema.end()) {
      if (!it->is_object()) return SchemaError(path, "'properties' must be an object");
      properties = &*it;
    }
    if (properties->size() > kMaxObjectProperties) {
      return SchemaError(path, "more than " + std::to_string(kMaxObjectProperties) + " properties");
    }
    std::set<std::string> required;
    if (auto it = schema.find("required"); it != schema.end()) {
      if (!it->is_array()) return SchemaError(path, "'required' must be an array of names");
      for (const Json& name : *it) {
        if (!name.is_string()) return SchemaError(path, "'required' must be an array of names");
        if (!properties->contains(name.get<std::string>())) {
          return SchemaError(path, "required property '" + name.get<std::string>() +
                                       "' is not declared in 'properties'");
        }
        required.insert(name.get<std::string>());
      }
    }
    const Json* additional = nullptr;
    if (auto it = schema.find("additionalProperties"); it != schema.end()) {
      if (!it->is_boolean() && !it->is_object()) {
        return SchemaError(path, "'additionalProperties' must be a boolean or a schema");
      }
      additional = &*it;
    }

    if (properties->empty()) {
      if (additional == nullptr || (additional->is_boolean() && additional->get<bool>())) {
        return any_.Object(0);
      }
      if (additional->is_boolean()) return b_.RuleOf({{Byte('{'), Byte('}')}});
      SOVAI_ASSIGN_OR_RETURN(
          uint32_t value,
          Compile(*additional, PathJoin(path, "additionalProperties"), depth + 1, level));
      SOVAI_ASSIGN_OR_RETURN(uint32_t member,
                             b_.RuleOf({{StringOf(0, JsonGrammar::kUnbounded), Byte(':'),
                                         OptionalSpace(), Ref(value)}}));
      SOVAI_ASSIGN_OR_RETURN(uint32_t more, b_.RuleOf({{Byte(','), OptionalSpace(), Ref(member)}}));
      return b_.RuleOf(
          {{Byte('{'), Byte('}')},
           {Byte('{'), Ref(member), RepeatOf(more, 0, JsonGrammar::kUnbounded), Byte('}')}});
    }

    // Members in schema order. first[i] / rest[i]: the members from property i on, when no
    // member / some member came before (so with a leading comma).
    const size_t n = properties->size();
    std::vector<std::string> names;
    std::vector<uint32_t> values;
    for (auto it = properties->begin(); it != properties->end(); ++it) {
      names.push_back(it.key());
      SOVAI_ASSIGN_OR_RETURN(
          uint32_t value,
          Compile(it.value(), PathJoin(PathJoin(path, "properties"), it.key()), depth + 1, level));
      values.push_back(value);
    }
    SOVAI_ASSIGN_OR_RETURN(uint32_t first_next, b_.RuleOf(std::vector<Sequence>(1)));
    uint32_t rest_next = first_next;
    for (size_t i = n; i-- > 0;) {
      Sequence member;
      const std::string key = Dump(Json(names[i]));
      SOVAI_ASSIGN_OR_RETURN(uint32_t key_root, b_.LiteralSet({key}));
      member.push_back(LiteralOf(key_root));
      member.push_back(Byte(':'));
      member.push_back(OptionalSpace());
      member.push_back(Ref(values[i]));
      Sequence first = member;
      first.push_back(Ref(rest_next));
      Sequence rest = {Byte(','), OptionalSpace()};
      rest.insert(rest.end(), member.begin(), member.end());
      rest.push_back(Ref(rest_next));
      std::vector<Sequence> first_alts = {std::move(first)};
      std::vector<Sequence> rest_alts = {std::move(rest)};
      if (required.count(names[i]) == 0) {
        first_alts.push_back({Ref(first_next)});
        rest_alts.push_back({Ref(rest_next)});
      }
      SOVAI_ASSIGN_OR_RETURN(uint32_t first_rule, b_.RuleOf(std::move(first_alts)));
      SOVAI_ASSIGN_OR_RETURN(uint32_t rest_rule, b_.RuleOf(std::move(rest_alts)));
      first_next = first_rule;
      rest_next = rest_rule;
    }
    return b_.RuleOf({{Byte('{'), Ref(first_next), Byte('}')}});
  }

  Result<uint32_t> CompileArray(const Json& schema, const std::string& path, int depth, int level) {
    uint32_t item = 0;
    auto items = schema.find("items");
    if (items == schema.end()) {
      SOVAI_ASSIGN_OR_RETURN(item, any_.Value(0));
    } else if (items->is_array()) {
      return SchemaError(path, "'items' as an array (a tuple) is not supported");
    } else {
      SOVAI_ASSIGN_OR_RETURN(item, Compile(*items, PathJoin(path, "items"), depth + 1, level));
    }
    SOVAI_ASSIGN_OR_RETURN(uint32_t min, CountKeyword(schema, "minItems", path, 0));
    SOVAI_ASSIGN_OR_RETURN(uint32_t max,
                           CountKeyword(schema, "maxItems", path, JsonGrammar::kUnbounded));
    if (min > max) return SchemaError(path, "'minItems' is greater than 'maxItems'");
    if (min > kMaxMinItems) {
      return SchemaError(path,
                         "'minItems' above " + std::to_string(kMaxMinItems) + " is not supported");
    }
    std::vector<Sequence> alts;
    if (min == 0) alts.push_back({Byte('['), Byte(']')});
    if (max > 0) {
      SOVAI_ASSIGN_OR_RETURN(uint32_t more, b_.RuleOf({{Byte(','), OptionalSpace(), Ref(item)}}));
      const uint32_t more_min = min == 0 ? 0 : min - 1;
      const uint32_t more_max = max == JsonGrammar::kUnbounded ? max : max - 1;
      alts.push_back({Byte('['), Ref(item), RepeatOf(more, more_min, more_max), Byte(']')});
    }
    return b_.RuleOf(std::move(alts));
  }

  const Json& root_;
  GrammarBuilder& b_;
  AnyValueRules any_;
  std::map<std::string, RefInfo> refs_;
  std::map<std::pair<std::string, int>, uint32_t> ref_rules_;
  size_t nodes_ = 0;
};

Result<Json> ToOrdered(const nlohmann::json& value, int depth) {
  if (depth > kMaxSchemaJsonDepth) {
    return InvalidArgumentError("JSON schema nests deeper than " +
                                std::to_string(kMaxSchemaJsonDepth) + " levels");
  }
  if (value.is_object()) {
    Json out = Json::object();
    for (auto it = value.begin(); it != value.end(); ++it) {
      SOVAI_ASSIGN_OR_RETURN(Json v, ToOrdered(it.value(), depth + 1));
      out[it.key()] = std::move(v);
    }
    return out;
  }
  if (value.is_array()) {
    Json out = Json::array();
    for (const nlohmann::json& v : value) {
      SOVAI_ASSIGN_OR_RETURN(Json converted, ToOrdered(v, depth + 1));
      out.push_back(std::move(converted));
    }
    return out;
  }
  switch (value.type()) {
    case nlohmann::json::value_t::string:
      return Json(value.get<std::string>());
    case nlohmann::json::value_t::boolean:
      return Json(value.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Json(value.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Json(value.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return Json(value.get<double>());
    default:
      return Json(nullptr);  // null (binary and discarded values do not come from parsing)
  }
}

Status CheckDepth(const Json& value, int depth) {
  if (depth > kMaxSchemaJsonDepth) {
    return InvalidArgumentError("JSON schema nests deeper than " +
                                std::to_string(kMaxSchemaJsonDepth) + " levels");
  }
  if (value.is_structured()) {
    for (const Json& v : value) SOVAI_RETURN_IF_ERROR(CheckDepth(v, depth + 1));
  }
  return Status();
}

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
// JsonGrammar

Result<std::shared_ptr<const JsonGrammar>> JsonGrammar::FromResponseFormat(
    const ResponseFormat& format) {
  switch (format.kind) {
    case ResponseFormat::Kind::kJsonObject:
      return AnyObject();
    case ResponseFormat::Kind::kJsonSchema:
      return FromSchema(format.schema);
    case ResponseFormat::Kind::kText:
      break;
  }
  return InvalidArgumentError("response_format 'text' has no JSON constraint");
}

Result<std::shared_ptr<const JsonGrammar>> JsonGrammar::FromSchema(const nlohmann::json& schema) {
  SOVAI_ASSIGN_OR_RETURN(Json ordered, ToOrdered(schema, 0));
  return FromSchema(ordered);
}

Result<std::shared_ptr<const JsonGrammar>> JsonGrammar::FromSchema(
    const nlohmann::ordered_json& schema) {
  SOVAI_RETURN_IF_ERROR(CheckDepth(schema, 0));
  GrammarBuilder builder;
  SchemaCompiler compiler(schema, builder);
  SOVAI_ASSIGN_OR_RETURN(uint32_t root, compiler.CompileRoot());
  SOVAI_ASSIGN_OR_RETURN(std::shared_ptr<JsonGrammar> grammar, builder.Finish(root));
  return std::shared_ptr<const JsonGrammar>(std::move(grammar));
}

std::shared_ptr<const JsonGrammar> JsonGrammar::AnyObject() {
  GrammarBuilder builder;
  AnyValueRules any(builder);
  Result<uint32_t> root = any.Object(0);
  SOVAI_CHECK(root.ok()) << root.status();
  Result<std::shared_ptr<JsonGrammar>> grammar = builder.Finish(*root);
  SOVAI_CHECK(grammar.ok()) << grammar.status();
  return std::move(grammar).value();
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
