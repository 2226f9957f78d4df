// Constrained decoding for OpenAI's `response_format`: {"type": "json_object"} and
// {"type": "json_schema", "json_schema": {"schema": {...}}}. At every step the engine asks a
// JsonConstraint which tokens may come next, masks the others out of the logits, and tells it the
// token it drew. The generated text then always parses as JSON and (json_schema) validates
// against the schema; once the value is complete only an end-of-sequence token is allowed.
//
//   // Once per model:
//   SOVAI_ASSIGN_OR_RETURN(auto vocab, ConstraintVocabulary::Create(token_bytes, eos_ids));
//   // Once per request, shared by its choices:
//   SOVAI_ASSIGN_OR_RETURN(auto grammar, JsonGrammar::FromResponseFormat(format));
//   // One per sequence; then at every step:
//   JsonConstraint constraint(grammar, vocab);
//   constraint.AllowedTokens(mask);  // mask[id] == 1: token id may come next
//   SOVAI_RETURN_IF_ERROR(constraint.Accept(drawn_token));
//
// The three parts:
//   ConstraintVocabulary  the bytes of every token in a byte trie; built once per model.
//   JsonGrammar           a schema compiled into a pushdown grammar over bytes; built once per
//                         request (shared by its n choices).
//   JsonConstraint        one sequence's parse state: a set of parse stacks (stacks share their
//                         common bottoms), advanced byte by byte. AllowedTokens walks the trie,
//                         advancing a copy of the state one byte per edge and pruning every
//                         subtree whose prefix no stack accepts. A stack inside a string (where
//                         nearly every token fits) uses the vocabulary's precomputed string
//                         tables instead, and walks only the tokens that close the string.
//
// What is generated (a subset of what the schema allows, so that outputs stay finite, compact
// and unambiguous):
//   * No insignificant whitespace, except one optional space after ':' and after ','.
//   * Object properties in the order the schema object lists them (nlohmann::json iterates keys
//     sorted by bytes; nlohmann::ordered_json in declaration order), required ones always present,
//     optional ones optional. No property outside `properties`, whatever `additionalProperties`
//     says, except for an object schema without `properties`: additionalProperties false gives
//     {}, a schema gives a map of string keys to that schema, true or absent any object.
//   * Numbers: at most kMaxIntegerDigits digits before the point, kMaxFractionDigits after it and
//     kMaxExponentDigits in the exponent; "integer" has neither fraction nor exponent.
//   * Strings: valid UTF-8 (raw multi-byte characters or \u escapes, surrogate pairs paired), the
//     JSON escapes, no raw control characters; minLength/maxLength count code points.
//   * enum/const values in their compact form (nlohmann's dump), e.g. {"a":1}, 1.5, "x".
//   * Any JSON value (json_object's members, `{}`, items without a schema) nests at most
//     kMaxAnyValueDepth levels of arrays and objects.
//
// The JSON Schema subset (anything else is an InvalidArgument naming the keyword and where):
//   type (a name or a list of names), properties, required, additionalProperties, items (a
//   schema), minItems, maxItems, minLength, maxLength, enum, const, anyOf, oneOf (as anyOf: an
//   output may match several branches), allOf with one branch, $ref to "#" or "#/..." (e.g.
//   "#/$defs/x", "#/definitions/x"; recursion is unrolled kMaxRefRecursion levels deep, branches
//   that need more are not generated), $defs, definitions.
//   minimum / maximum / exclusiveMinimum / exclusiveMaximum are accepted but NOT enforced, except
//   that a lower bound >= 0 forbids the minus sign (so exclusiveMinimum 0 still lets 0 through).
//   Annotations are ignored: title, description, default, examples, format, $schema, $id,
//   $comment, deprecated, readOnly, writeOnly, contentEncoding, contentMediaType.
//   Refused: pattern, multipleOf, prefixItems, tuple items, uniqueItems, contains, not,
//   if/then/else, patternProperties, propertyNames, min/maxProperties, dependent*, unevaluated*,
//   remote $ref, and $ref, anyOf, oneOf or allOf combined with other constraining keywords.
//
// Errors: compiling a schema returns InvalidArgument for a malformed or unsupported schema, for
// one that admits no value the generator can produce (a false schema, a required property whose
// schema is false, a $ref cycle with no way out within kMaxRefRecursion levels), and for one
// above the limits below; the message names the keyword and its place ("#/properties/a").
//
// Thread-safety: ConstraintVocabulary and JsonGrammar are immutable and may be shared by any
// number of threads. A JsonConstraint belongs to one thread at a time (AllowedTokens uses scratch
// space inside it); copies are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "serve/request.h"

namespace sovai::serve {

// Vocabulary limits (ConstraintVocabulary::Create). A vocabulary takes about 100 bytes per token
// besides the tokens' own bytes (the trie and the string tables).
inline constexpr size_t kMaxConstraintVocabSize = size_t{1} << 20;
inline constexpr size_t kMaxConstraintTokenBytes = 1024;

// Schema limits (JsonGrammar::FromSchema). Depth counts nested subschemas (properties, items,
// anyOf branches, $ref targets).
inline constexpr int kMaxSchemaDepth = 64;
inline constexpr size_t kMaxSchemaNodes = 20000;  // subschemas compiled, $ref expansions included
inline constexpr size_t kMaxSchemaRefs = 512;     // distinct $ref targets
inline constexpr int kMaxRefRecursion = 6;        // expansions of a $ref cycle along one path
inline constexpr size_t kMaxObjectProperties = 1000;  // per object
inline constexpr size_t kMaxEnumValues = 4096;        // per enum
inline constexpr size_t kMaxLiteralBytes = 1 << 20;   // enum/const values and keys, all together
inline constexpr uint64_t kMaxMinItems = 4096;        // minItems above this is refused
inline constexpr uint64_t kMaxMinLength = 1 << 14;    // minLength above this is refused
inline constexpr size_t kMaxGrammarElements = 1 << 21;

// Generated-value limits.
inline constexpr int kMaxIntegerDigits = 18;  // keeps every integer within int64_t
inline constexpr int kMaxFractionDigits = 17;
inline constexpr int kMaxExponentDigits = 2;  // keeps every number finite as a double
inline constexpr int kMaxAnyValueDepth = 16;
// Parse stacks kept per state; an ambiguous schema (anyOf branches sharing long prefixes) may need
// more, in which case the extra ones are dropped. Every stack kept can still complete the value.
inline constexpr size_t kMaxParseStacks = 1024;

// The bytes of every token of one model, in a trie, and how each token reads inside a JSON
// string. Immutable.
class ConstraintVocabulary {
 public:
  // token_bytes[id] is what token `id` decodes to, as raw bytes (a piece of a UTF-8 character
  // is fine); empty for special tokens, which are never allowed. eos_token_ids end a sequence:
  // they are allowed exactly when the value is complete, whatever their bytes.
  // Errors (InvalidArgument): an empty vocabulary or one above kMaxConstraintVocabSize, a token
  // longer than kMaxConstraintTokenBytes, an end-of-sequence id outside the vocabulary.
  static base::Result<std::shared_ptr<const ConstraintVocabulary>> Create(
      std::vector<std::string> token_bytes, std::vector<int32_t> eos_token_ids);

  size_t vocab_size() const { return token_bytes_.size(); }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }
  bool IsEos(int32_t id) const { return is_eos_[id] != 0; }
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }

  // A byte trie in preorder: node 0 is the root (the empty prefix), the first child of node n is
  // n + 1, and the next sibling of a node is its subtree_end; siblings are sorted by byte. The
  // tokens spelled by the path to a node are token_ids[tokens_begin, tokens_end).
  struct TrieNode {
    uint32_t subtree_end = 0;  // one past the node's last descendant
    uint32_t tokens_begin = 0;
    uint32_t tokens_end = 0;
    uint8_t byte = 0;  // the edge from the parent
  };
  struct Trie {
    std::vector<TrieNode> nodes;
    std::vector<int32_t> token_ids;
  };
  // Every token except the end-of-sequence and empty ones.
  const Trie& trie() const { return trie_; }

  // How every token reads when generation stands inside a JSON string, in one state of the string
  // automaton: most tokens stay inside (their bytes are valid string content) and need no walk
  // of the trie; the few that close the string are walked from their closing quote on.
  struct StringTable {
    // Per token: kRefused; or the number of characters the string has gained by the end of the
    // token (inside) or by its closing quote (with kCloses set), counting one begun before it.
    static constexpr uint16_t kRefused = UINT16_MAX;
    static constexpr uint16_t kCloses = 0x8000;
    std::vector<uint16_t> chars;
    Trie after_quote;  // the bytes after the closing quote of each token that closes the string
  };
  // The table for a kString frame's state (JsonConstraint's Frame::aux); nullptr for the state
  // before the opening quote.
  const StringTable* string_table(uint32_t string_state) const;

 private:
  ConstraintVocabulary() = default;

  std::vector<std::string> token_bytes_;
  std::vector<uint8_t> is_eos_;
  std::vector<int32_t> eos_token_ids_;
  Trie trie_;
  std::vector<StringTable> string_tables_;  // [state - 1]
};

// A compiled `response_format`: a grammar over bytes whose sentences are the JSON texts generated
// for it. Immutable. (Its parts are public for JsonConstraint; callers need only the factories.)
class JsonGrammar {
 public:
  // kJsonObject: any JSON object. kJsonSchema: FromSchema(format.schema). kText: InvalidArgument
  // (text needs no constraint).
  static base::Result<std::shared_ptr<const JsonGrammar>> FromResponseFormat(
      const ResponseFormat& format);
  // A JSON Schema (the subset above). nlohmann::json orders properties by key; pass an
  // ordered_json to generate them in declaration order.
  static base::Result<std::shared_ptr<const JsonGrammar>> FromSchema(const nlohmann::json& schema);
  static base::Result<std::shared_ptr<const JsonGrammar>> FromSchema(
      const nlohmann::ordered_json& schema);
  // Any JSON object ({"type": "json_object"}).
  static std::shared_ptr<const JsonGrammar> AnyObject();

  // What one grammar position matches. Byte, String, Number and Literal are terminals with a
  // small state of their own (Frame::count and Frame::aux); Rule and Repeat push a rule.
  enum class Kind : uint8_t {
    kEnd,      // end of an alternative: pop
    kByte,     // arg: the byte; min == 0: optional
    kString,   // a JSON string with min..max code points (quotes included)
    kNumber,   // a JSON number; flags: kIntegerOnly, kNonNegative
    kLiteral,  // one of a set of byte strings; arg: the root of its trie in literal_nodes
    kRule,     // arg: the rule
    kRepeat,   // arg: the rule, repeated min..max times
  };
  static constexpr uint8_t kIntegerOnly = 1;
  static constexpr uint8_t kNonNegative = 2;
  static constexpr uint32_t kUnbounded = UINT32_MAX;

  struct Element {
    Kind kind = Kind::kEnd;
    uint8_t flags = 0;
    uint32_t arg = 0;
    uint32_t min = 0;
    uint32_t max = 0;
  };
  struct LiteralNode {
    uint32_t first_edge = 0;
    uint32_t num_edges = 0;
    bool terminal = false;  // a literal ends here
  };
  struct LiteralEdge {
    uint8_t byte = 0;
    uint32_t to = 0;
  };

  // Alternatives are runs of elements ending in kEnd. elements[0] is kRule(root), elements[1]
  // kEnd: parsing starts there, and the value is complete when that kEnd pops.
  std::vector<Element> elements;
  std::vector<uint32_t> rule_alts_begin;  // rule r's alternatives: alt_starts[begin[r], begin[r+1])
  std::vector<uint32_t> alt_starts;       // index of an alternative's first element
  std::vector<LiteralNode> literal_nodes;  // node 0 unused (Frame::aux 0 means "at the root")
  std::vector<LiteralEdge> literal_edges;  // sorted by byte within a node
};

// One sequence's progress through a JsonGrammar.
class JsonConstraint {
 public:
  JsonConstraint(std::shared_ptr<const JsonGrammar> grammar,
                 std::shared_ptr<const ConstraintVocabulary> vocab);

  // Resizes `mask` to the vocabulary size and sets mask[id] = 1 for every token that may come
  // next: a token whose every byte keeps the text a prefix of a sentence, or an end-of-sequence
  // token when the text is complete. Returns how many tokens are allowed; 0 after an
  // end-of-sequence token was accepted (or if the vocabulary cannot spell any continuation,
  // in which case the caller should end the sequence).
  size_t AllowedTokens(std::vector<uint8_t>& mask);

  // Advances past `token`. Errors (the state is then unchanged): InvalidArgument for an id
  // outside the vocabulary or a token that AllowedTokens would not allow (named, with the
  // offending byte's offset); FailedPrecondition after an end-of-sequence token.
  base::Status Accept(int32_t token);

  // The text accepted so far is a complete value (an end-of-sequence token is allowed).
  bool Complete() const { return complete_; }
  // An end-of-sequence token was accepted.
  bool Finished() const { return finished_; }
  // Bytes accepted so far.
  size_t bytes_accepted() const { return bytes_accepted_; }

 private:
  // One parse-stack entry; stacks share their bottoms, so a stack is named by its top frame.
  struct Frame {
    uint32_t pos = 0;    // an index into grammar elements
    uint32_t count = 0;  // kRepeat: repetitions done; kString: code points; kNumber: digits
    uint32_t aux = 0;    // terminal state (kString, kNumber, kLiteral, kByte)
    int32_t parent = -1;
  };

  // Appends to tops_out the stacks that follow `byte` from stacks tops[begin, end) (indices into
  // `tops`, which may be tops_out itself). Returns whether some stack completed the value.
  bool Advance(std::vector<int32_t>& tops, size_t begin, size_t end, uint8_t byte,
               std::vector<int32_t>& tops_out);
  // Expands the frames on work_ until each stack's top is a terminal that can take a byte,
  // appending those to tops_out. Returns whether some stack completed the value.
  bool Expand(std::vector<int32_t>& tops_out);
  int32_t NewFrame(uint32_t pos, uint32_t count, uint32_t aux, int32_t parent);
  void DedupTops(std::vector<int32_t>& tops, size_t begin);
  // Which tokens of a StringTable's after_quote trie may be marked (by their chars).
  struct CharsFilter {
    const uint16_t* chars = nullptr;
    uint32_t min = 0;
    uint32_t max = 0;
  };
  // Marks the tokens below trie node `node` that stacks tops[begin, end) (in scratch_tops_)
  // accept; with a filter, only tokens whose chars pass it.
  void Walk(const ConstraintVocabulary::Trie& trie, uint32_t node, size_t begin, size_t end,
            const CharsFilter* filter, std::vector<uint8_t>& mask);
  void MarkTokens(const ConstraintVocabulary::Trie& trie, uint32_t node, const CharsFilter* filter,
                  std::vector<uint8_t>& mask) const;
  // AllowedTokens for one stack standing inside a string, from the vocabulary's string table.
  void StringTokens(int32_t top, const ConstraintVocabulary::StringTable& table,
                    std::vector<uint8_t>& mask);
  // Drops the frames no stack of tops_ uses.
  void Compact();

  std::shared_ptr<const JsonGrammar> grammar_;
  std::shared_ptr<const ConstraintVocabulary> vocab_;
  std::vector<Frame> frames_;
  std::vector<int32_t> tops_;
  bool complete_ = false;
  bool finished_ = false;
  size_t bytes_accepted_ = 0;
  // Scratch space, reused across calls.
  std::vector<int32_t> work_;
  std::vector<int32_t> scratch_tops_;
  std::vector<int32_t> general_tops_;
  std::vector<int32_t> remap_;
  std::vector<Frame> live_frames_;
};

}  // namespace sovai::serve
