#include "serve/json_constraint.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "model/tokenizer.h"

namespace sovai::serve {
namespace {

using Json = nlohmann::ordered_json;
using base::StatusCode;

// ---------------------------------------------------------------------------------------------
// A small independent validator for the schema subset, over the parsed output.

class Validator {
 public:
  explicit Validator(const Json& root) : root_(root) {}

  // Empty when `value` is valid, else why not.
  std::string Check(const Json& value, const Json& schema, const std::string& at = "$") const {
    if (schema.is_boolean()) return schema.get<bool>() ? "" : at + ": false schema";
    if (auto ref = schema.find("$ref"); ref != schema.end()) {
      return Check(value, Resolve(ref->get<std::string>()), at);
    }
    if (auto any = schema.find("anyOf"); any != schema.end()) {
      for (const Json& s : *any) {
        if (Check(value, s, at).empty()) return "";
      }
      return at + ": matches no anyOf branch";
    }
    if (auto one = schema.find("oneOf"); one != schema.end()) {
      int matches = 0;
      for (const Json& s : *one) matches += Check(value, s, at).empty() ? 1 : 0;
      return matches == 1 ? "" : at + ": matches " + std::to_string(matches) + " oneOf branches";
    }
    if (auto all = schema.find("allOf"); all != schema.end()) {
      for (const Json& s : *all) {
        if (std::string why = Check(value, s, at); !why.empty()) return why;
      }
    }
    if (auto e = schema.find("enum"); e != schema.end()) {
      bool found = false;
      for (const Json& v : *e) found |= Same(v, value);
      if (!found) return at + ": not in enum";
    }
    if (auto c = schema.find("const"); c != schema.end() && !Same(*c, value)) {
      return at + ": not the const";
    }
    if (auto t = schema.find("type"); t != schema.end()) {
      bool ok = false;
      if (t->is_string()) {
        ok = IsType(value, t->get<std::string>());
      } else {
        for (const Json& name : *t) ok |= IsType(value, name.get<std::string>());
      }
      if (!ok) return at + ": wrong type for " + t->dump();
    }
    if (value.is_object()) return CheckObject(value, schema, at);
    if (value.is_array()) {
      const uint64_t n = value.size();
      if (schema.contains("minItems") && n < schema["minItems"].get<uint64_t>()) {
        return at + ": too few items";
      }
      if (schema.contains("maxItems") && n > schema["maxItems"].get<uint64_t>()) {
        return at + ": too many items";
      }
      if (auto items = schema.find("items"); items != schema.end()) {
        for (size_t i = 0; i < value.size(); ++i) {
          if (std::string why = Check(value[i], *items, at + "[" + std::to_string(i) + "]");
              !why.empty()) {
            return why;
          }
        }
      }
    }
    if (value.is_string()) {
      const uint64_t n = CodePoints(value.get<std::string>());
      if (schema.contains("minLength") && n < schema["minLength"].get<uint64_t>()) {
        return at + ": string too short";
      }
      if (schema.contains("maxLength") && n > schema["maxLength"].get<uint64_t>()) {
        return at + ": string too long";
      }
    }
    if (value.is_number() && schema.contains("minimum") &&
        value.get<double>() < schema["minimum"].get<double>()) {
      return at + ": below minimum";
    }
    return "";
  }

 private:
  std::string CheckObject(const Json& value, const Json& schema, const std::string& at) const {
    const Json empty = Json::object();
    const Json& props = schema.contains("properties") ? schema["properties"] : empty;
    if (auto req = schema.find("required"); req != schema.end()) {
      for (const Json& name : *req) {
        if (!value.contains(name.get<std::string>())) return at + ": missing " + name.dump();
      }
    }
    // Declared properties come in schema order.
    size_t last_index = 0;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (auto p = props.find(it.key()); p != props.end()) {
        const auto index = static_cast<size_t>(std::distance(props.begin(), p)) + 1;
        if (index <= last_index) return at + ": property '" + it.key() + "' out of schema order";
        last_index = index;
        if (std::string why = Check(it.value(), *p, at + "." + it.key()); !why.empty()) {
          return why;
        }
        continue;
      }
      auto additional = schema.find("additionalProperties");
      if (additional == schema.end()) continue;
      if (std::string why = Check(it.value(), *additional, at + "." + it.key()); !why.empty()) {
        return why;
      }
    }
    return "";
  }

  const Json& Resolve(const std::string& ref) const {
    const Json* node = &root_;
    size_t start = 2;
    while (ref != "#" && start <= ref.size()) {
      size_t slash = ref.find('/', start);
      if (slash == std::string::npos) slash = ref.size();
      node = &(*node)[ref.substr(start, slash - start)];
      start = slash + 1;
    }
    return *node;
  }

  static bool Same(const Json& a, const Json& b) {
    return nlohmann::json::parse(a.dump()) == nlohmann::json::parse(b.dump());
  }

  static bool IsType(const Json& v, const std::string& type) {
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    if (type == "string") return v.is_string();
    if (type == "number") return v.is_number();
    if (type == "integer") return v.is_number_integer();
    if (type == "boolean") return v.is_boolean();
    return v.is_null();
  }

  static uint64_t CodePoints(const std::string& s) {
    uint64_t n = 0;
    for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80 ? 1 : 0;
    return n;
  }

  const Json& root_;
};

// Outside strings, the only whitespace is one space right after ':' or ','.
std::string CheckWhitespace(const std::string& text) {
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c == ' ' && (i == 0 || (text[i - 1] != ':' && text[i - 1] != ','))) {
      return "space at byte " + std::to_string(i);
    }
    if (c == '\n' || c == '\t' || c == '\r') return "whitespace at byte " + std::to_string(i);
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// A synthetic vocabulary: every single byte, multi-byte JSON pieces, UTF-8 characters whole and
// split, escapes, two special tokens (no bytes) and an end-of-sequence token with bytes of its
// own (which must not matter).

struct TestVocab {
  std::vector<std::string> tokens;
  int32_t eos = -1;
  int32_t special = -1;
  std::shared_ptr<const ConstraintVocabulary> vocab;
};

TestVocab SyntheticVocab() {
  TestVocab v;
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(1, static_cast<char>(b));
  const char* pieces[] = {
      "{\"",
      "\":",
      "\": ",
      "\",",
      "\", \"",
      ",\"",
      "\"}",
      "\"]",
      "}}",
      "]}",
      "},",
      "}]",
      "[{",
      "[\"",
      "[[",
      "[]",
      "{}",
      "true",
      "false",
      "null",
      "tr",
      "ue",
      "fa",
      "lse",
      "nu",
      "ll",
      "12",
      "345",
      "0.",
      ".5",
      "e+",
      "E-",
      "-1",
      "-0",
      "00",
      "1e",
      "07",
      "99",
      "name",
      "age",
      "tags",
      "kind",
      "circle",
      "rect",
      "value",
      "children",
      "\"circle\"",
      "\"rect\"",
      " the",
      " a",
      "hello",
      "\xC3\xA9",
      "\xE4\xB8\xAD",
      "\xF0\x9F\x98\x80",
      "\xC3\xBC"
      "n\xC3\xAF",
      "\xE4",
      "\xB8",
      "\xAD",
      "\xF0\x9F",
      "\x98\x80",
      "\xE4\xB8",
      "\xC3",
      "\\n",
      "\\\"",
      "\\u00e9",
      "\\ud83d",
      "\\ude00",
      "\\u",
      "\\",
      "00e9",
      "d83d",
      "ude00",
      "\\t",
      "\\/",
      "\" ",
      ", ",
      ": ",
      " ",
      "  ",
      "\n",
      "{\n",
      ",\n",
      "\": {\"",
      "\":[",
      "\": [",
      "\":\"",
      "\": \"",
      "\":1",
      "1}",
      "0}",
      "2]",
      "x",
      "xyz",
      "\"x",
      "a\"",
      "\"a",
      "\"b",
      "\"a\"",
      "\"b\"",
      "1,",
      "2,",
      "\xED\xA0\x80",
      "\xC0\xAF",
      "\xE0\x80\x80",
      "\xF4\x90\x80\x80",
      "\x7F",
      "\x1F",
      "\\x",
  };
  for (const char* p : pieces) v.tokens.emplace_back(p);
  v.special = static_cast<int32_t>(v.tokens.size());
  v.tokens.emplace_back();
  v.tokens.emplace_back();
  v.eos = static_cast<int32_t>(v.tokens.size());
  v.tokens.emplace_back("</s>");
  auto vocab = ConstraintVocabulary::Create(v.tokens, {v.eos});
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  v.vocab = *vocab;
  return v;
}

const TestVocab& Synthetic() {
  static const TestVocab* vocab = new TestVocab(SyntheticVocab());
  return *vocab;
}

std::shared_ptr<const JsonGrammar> Compile(const Json& schema) {
  auto grammar = JsonGrammar::FromSchema(schema);
  EXPECT_TRUE(grammar.ok()) << grammar.status() << " for " << schema.dump();
  return grammar.ok() ? *grammar : nullptr;
}

std::vector<int32_t> Allowed(JsonConstraint& c, size_t vocab_size) {
  std::vector<uint8_t> mask;
  const size_t n = c.AllowedTokens(mask);
  EXPECT_EQ(mask.size(), vocab_size);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i] != 0) ids.push_back(static_cast<int32_t>(i));
  }
  EXPECT_EQ(ids.size(), n);
  return ids;
}

struct RunResult {
  std::string text;
  bool finished = false;
  std::string error;
};

// A random "model": draws among the allowed tokens, preferring ones that close something a
// third of the time (so values end), and the end-of-sequence token when it may.
RunResult RandomRun(JsonConstraint& c, const TestVocab& v, uint64_t seed, int max_steps = 4000) {
  std::mt19937_64 rng(seed);
  RunResult run;
  for (int step = 0; step < max_steps; ++step) {
    std::vector<int32_t> allowed = Allowed(c, v.tokens.size());
    if (allowed.empty()) {
      run.error = "no token allowed after " + run.text;
      return run;
    }
    const bool eos_allowed = std::find(allowed.begin(), allowed.end(), v.eos) != allowed.end();
    EXPECT_EQ(eos_allowed, c.Complete());
    int32_t pick;
    if (eos_allowed && rng() % 10 < 7) {
      pick = v.eos;
    } else {
      std::vector<int32_t> closers;
      for (int32_t id : allowed) {
        if (v.tokens[id].find_first_of("\"}]") != std::string::npos) closers.push_back(id);
      }
      const std::vector<int32_t>& from = !closers.empty() && rng() % 3 == 0 ? closers : allowed;
      pick = from[rng() % from.size()];
    }
    if (base::Status s = c.Accept(pick); !s.ok()) {
      run.error = "Accept(" + std::to_string(pick) + ") of an allowed token: " + s.ToString();
      return run;
    }
    if (v.vocab->IsEos(pick)) {
      run.finished = true;
      EXPECT_TRUE(c.Finished());
      return run;
    }
    run.text += v.tokens[pick];
  }
  run.error = "no end after " + std::to_string(max_steps) + " tokens: " + run.text;
  return run;
}

// Runs `seeds` random generations and checks each output parses, is compact and validates.
void ExpectRandomOutputsValid(const Json& schema, int seeds) {
  auto grammar = Compile(schema);
  ASSERT_NE(grammar, nullptr);
  const TestVocab& v = Synthetic();
  Validator validator(schema);
  for (int seed = 0; seed < seeds; ++seed) {
    JsonConstraint c(grammar, v.vocab);
    RunResult run = RandomRun(c, v, seed);
    ASSERT_TRUE(run.finished) << "seed " << seed << ": " << run.error;
    const Json value = Json::parse(run.text, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << "seed " << seed << " output is not JSON: " << run.text;
    EXPECT_EQ(validator.Check(value, schema), "") << "seed " << seed << ": " << run.text;
    EXPECT_EQ(CheckWhitespace(run.text), "") << run.text;
    // The standard library parser agrees (nlohmann::json also checks UTF-8 and surrogates).
    EXPECT_TRUE(nlohmann::json::accept(run.text)) << run.text;
  }
}

// ---------------------------------------------------------------------------------------------
// Random generation against schemas.

TEST(JsonConstraintRandom, ObjectWithRequiredAndOptionalProperties) {
  ExpectRandomOutputsValid(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 8},
      "age": {"type": "integer", "minimum": 0},
      "email": {"type": ["string", "null"]},
      "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "\u00fcn\u00ef"]},
               "minItems": 1, "maxItems": 3},
      "score": {"type": "number"},
      "active": {"type": "boolean", "description": "ignored", "title": "Active"}
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": false
  })"_json,
                           60);
}

TEST(JsonConstraintRandom, AllOptionalPropertiesAndOddNames) {
  ExpectRandomOutputsValid(Json::parse(R"({
    "type": "object",
    "properties": {
      "quo\"te": {"type": "integer"},
      "\u00fcn\u00ef": {"type": "boolean"},
      "a/b~c": {"type": "null"},
      "z": {"type": "string", "maxLength": 2}
    },
    "additionalProperties": false
  })"),
                           60);
}

TEST(JsonConstraintRandom, DiscriminatedAnyOf) {
  ExpectRandomOutputsValid(Json::parse(R"({
    "anyOf": [
      {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
       "required": ["kind", "r"], "additionalProperties": false},
      {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "integer"},
       "h": {"type": "integer"}}, "required": ["kind", "w", "h"], "additionalProperties": false}
    ]
  })"),
                           60);
}

TEST(JsonConstraintRandom, RecursiveRefUnrolled) {
  ExpectRandomOutputsValid(Json::parse(R"({
    "$defs": {
      "node": {
        "type": "object",
        "properties": {
          "value": {"type": "integer"},
          "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}
        },
        "required": ["value", "children"],
        "additionalProperties": false
      }
    },
    "$ref": "#/$defs/node"
  })"),
                           40);
}

TEST(JsonConstraintRandom, DefinitionsAndNestedRefs) {
  ExpectRandomOutputsValid(Json::parse(R"({
    "definitions": {
      "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"], "additionalProperties": false},
      "line": {"type": "object",
               "properties": {"from": {"$ref": "#/definitions/point"},
                              "to": {"$ref": "#/definitions/point"}},
               "required": ["from", "to"], "additionalProperties": false}
    },
    "type": "array",
    "items": {"$ref": "#/definitions/line"},
    "minItems": 1
  })"),
                           40);
}

TEST(JsonConstraintRandom, EnumOfMixedValues) {
  ExpectRandomOutputsValid(Json::parse(R"({"enum": [1, 12, "two", null, true, {"a": [1, 2]},
                                                    [3], 2.5, "tw"]})"),
                           60);
}

TEST(JsonConstraintRandom, MapOfIntegers) {
  ExpectRandomOutputsValid(
      Json::parse(R"({"type": "object", "additionalProperties": {"type": "integer"}})"), 60);
}

TEST(JsonConstraintRandom, ArrayOfObjectsWithBounds) {
  ExpectRandomOutputsValid(Json::parse(R"({
    "type": "array",
    "items": {"type": "object",
              "properties": {"x": {"type": "number"}, "y": {"type": "string", "maxLength": 3}},
              "required": ["x"]},
    "minItems": 2, "maxItems": 4
  })"),
                           60);
}

TEST(JsonConstraintRandom, BoundedString) {
  ExpectRandomOutputsValid(Json::parse(R"({"type": "string", "minLength": 3, "maxLength": 5})"),
                           60);
}

TEST(JsonConstraintRandom, AnyValueAndAnyObject) {
  ExpectRandomOutputsValid(Json::object(), 60);
  ExpectRandomOutputsValid(Json::parse(R"({"type": "object"})"), 60);
  ExpectRandomOutputsValid(Json(true), 20);
}

TEST(JsonConstraintRandom, OneOfWithTypeList) {
  ExpectRandomOutputsValid(Json::parse(R"({"oneOf": [{"type": "string"}, {"type": "integer"},
                                                     {"type": ["boolean", "null"]}]})"),
                           60);
}

TEST(JsonConstraintRandom, TopLevelNumbers) {
  ExpectRandomOutputsValid(Json::parse(R"({"type": "number"})"), 60);
  ExpectRandomOutputsValid(Json::parse(R"({"type": "integer", "minimum": 0})"), 60);
}

TEST(JsonConstraintRandom, JsonObjectOutputsAreObjects) {
  auto grammar = JsonGrammar::FromResponseFormat({.kind = ResponseFormat::Kind::kJsonObject});
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  const TestVocab& v = Synthetic();
  for (int seed = 0; seed < 100; ++seed) {
    JsonConstraint c(*grammar, v.vocab);
    RunResult run = RandomRun(c, v, seed);
    ASSERT_TRUE(run.finished) << run.error;
    const nlohmann::json value = nlohmann::json::parse(run.text, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << run.text;
    EXPECT_TRUE(value.is_object()) << run.text;
    EXPECT_EQ(CheckWhitespace(run.text), "") << run.text;
  }
}

// Every token the mask allows is accepted and every other one refused, all along random runs.
// (The mask reads strings from the vocabulary's tables and walks everything else; Accept steps
// the automaton byte by byte, so the two paths check each other.)
TEST(JsonConstraint, MaskAgreesWithAccept) {
  const TestVocab& v = Synthetic();
  const char* schemas[] = {
      R"({"type": "object",
          "properties": {"s": {"type": "string", "maxLength": 4}, "n": {"type": "number"},
                         "t": {"type": "string", "minLength": 2, "maxLength": 3},
                         "e": {"enum": ["x", 1, [true]]},
                         "m": {"additionalProperties": {"type": "null"}},
                         "a": {"type": "array", "items": {}}},
          "required": ["s", "n"]})",
      R"({"type": "array", "items": {"anyOf": [{"type": "string", "maxLength": 1},
                                                {"type": "string", "minLength": 3},
                                                {"enum": ["ab", "abc"]}]}})",
      R"({"type": "string"})",
  };
  for (const char* text : schemas) {
    auto grammar = Compile(Json::parse(text));
    ASSERT_NE(grammar, nullptr);
    for (int seed = 0; seed < 8; ++seed) {
      JsonConstraint c(grammar, v.vocab);
      std::mt19937_64 rng(seed);
      for (int step = 0; step < 60 && !c.Finished(); ++step) {
        std::vector<uint8_t> mask;
        c.AllowedTokens(mask);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < static_cast<int32_t>(v.tokens.size()); ++id) {
          JsonConstraint copy = c;
          EXPECT_EQ(copy.Accept(id).ok(), mask[id] != 0)
              << "token " << id << " '" << v.tokens[id] << "' at step " << step << " of " << text;
          if (mask[id] != 0) allowed.push_back(id);
        }
        ASSERT_FALSE(allowed.empty());
        ASSERT_TRUE(c.Accept(allowed[rng() % allowed.size()]).ok());
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Exact behaviour on hand-written token sequences.

// A vocabulary of single bytes (id = byte) plus an end-of-sequence token 256 and a special 257.
std::shared_ptr<const ConstraintVocabulary> ByteVocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.emplace_back("<eos>");
  tokens.emplace_back();
  auto vocab = ConstraintVocabulary::Create(tokens, {256});
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  return *vocab;
}
constexpr int32_t kEos = 256;
constexpr int32_t kSpecial = 257;

// Feeds `text` byte by byte; returns the offset of the first refused byte, or -1.
int FeedBytes(JsonConstraint& c, std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!c.Accept(static_cast<uint8_t>(text[i])).ok()) return static_cast<int>(i);
  }
  return -1;
}

// Whether `text` is accepted as a complete value under `schema`.
bool AcceptsComplete(const Json& schema, std::string_view text) {
  auto grammar = Compile(schema);
  if (grammar == nullptr) return false;
  JsonConstraint c(grammar, ByteVocab());
  return FeedBytes(c, text) < 0 && c.Complete();
}

bool AcceptsPrefix(const Json& schema, std::string_view text) {
  auto grammar = Compile(schema);
  if (grammar == nullptr) return false;
  JsonConstraint c(grammar, ByteVocab());
  return FeedBytes(c, text) < 0;
}

TEST(JsonConstraint, WhitespaceIsOneSpaceAfterColonOrComma) {
  const Json schema = Json::parse(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"array"}},
          "required":["a","b"]})");
  EXPECT_TRUE(AcceptsComplete(schema, R"({"a":1,"b":[]})"));
  EXPECT_TRUE(AcceptsComplete(schema, R"({"a": 1, "b": [1, 2]})"));
  EXPECT_FALSE(AcceptsPrefix(schema, R"({ )"));
  EXPECT_FALSE(AcceptsPrefix(schema, R"({"a" )"));
  EXPECT_FALSE(AcceptsPrefix(schema, R"({"a":  )"));
  EXPECT_FALSE(AcceptsPrefix(schema, "{\"a\":\n"));
  EXPECT_FALSE(AcceptsPrefix(schema, R"({"a":1 )"));
  EXPECT_FALSE(AcceptsPrefix(schema, " "));
  // Properties come in schema order (ordered_json keeps declaration order).
  EXPECT_FALSE(AcceptsPrefix(schema, R"({"b")"));
}

TEST(JsonConstraint, PropertiesFollowNlohmannJsonKeyOrder) {
  // nlohmann::json sorts keys: "a" before "b" even though "b" is written first.
  auto grammar = JsonGrammar::FromSchema(nlohmann::json::parse(
      R"({"type":"object","properties":{"b":{"type":"null"},"a":{"type":"null"}},
          "required":["a","b"]})"));
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  JsonConstraint c(*grammar, ByteVocab());
  EXPECT_EQ(FeedBytes(c, R"({"a":null,"b":null})"), -1);
  EXPECT_TRUE(c.Complete());
}

TEST(JsonConstraint, EndOfSequenceOnlyWhenComplete) {
  auto grammar = Compile(Json::parse(R"({"type":"object","properties":{"a":{"type":"boolean"}},
                                         "required":["a"]})"));
  JsonConstraint c(grammar, ByteVocab());
  std::vector<uint8_t> mask;
  for (char ch : std::string(R"({"a":true)")) {
    c.AllowedTokens(mask);
    EXPECT_EQ(mask[kEos], 0);
    EXPECT_FALSE(c.Complete());
    EXPECT_EQ(c.Accept(kEos).code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE(c.Accept(static_cast<uint8_t>(ch)).ok()) << ch;
  }
  // Only '}' may close it.
  EXPECT_EQ(c.AllowedTokens(mask), 1u);
  EXPECT_EQ(mask['}'], 1);
  ASSERT_TRUE(c.Accept('}').ok());
  EXPECT_TRUE(c.Complete());
  // Complete: only the end-of-sequence token.
  EXPECT_EQ(c.AllowedTokens(mask), 1u);
  EXPECT_EQ(mask[kEos], 1);
  EXPECT_EQ(c.Accept(' ').code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Accept(kSpecial).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(c.Accept(kEos).ok());
  EXPECT_TRUE(c.Finished());
  EXPECT_EQ(c.AllowedTokens(mask), 0u);
  EXPECT_EQ(c.Accept(kEos).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.bytes_accepted(), 10u);
}

TEST(JsonConstraint, RefusedTokenLeavesStateUnchanged) {
  const TestVocab& v = Synthetic();
  auto grammar = Compile(Json::parse(R"({"type":"array","items":{"type":"integer"}})"));
  JsonConstraint c(grammar, v.vocab);
  auto id_of = [&](const std::string& s) {
    return static_cast<int32_t>(std::find(v.tokens.begin(), v.tokens.end(), s) - v.tokens.begin());
  };
  ASSERT_TRUE(c.Accept(id_of("[")).ok());
  ASSERT_TRUE(c.Accept(id_of("12")).ok());
  const base::Status refused = c.Accept(id_of("true"));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("\"true\""), std::string::npos) << refused;
  EXPECT_EQ(c.Accept(id_of("0.")).code(), StatusCode::kInvalidArgument);  // no fraction
  EXPECT_EQ(c.Accept(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Accept(static_cast<int32_t>(v.tokens.size())).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Accept(v.special).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.bytes_accepted(), 3u);
  ASSERT_TRUE(c.Accept(id_of("345")).ok());
  ASSERT_TRUE(c.Accept(id_of("]")).ok());
  EXPECT_TRUE(c.Complete());
}

TEST(JsonConstraint, StringLengthCountsCodePoints) {
  const Json schema = Json::parse(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(AcceptsComplete(schema, "\"ab\""));
  EXPECT_TRUE(AcceptsComplete(schema, "\"\xE4\xB8\xAD\xF0\x9F\x98\x80\xC3\xA9\""));  // 3 chars
  EXPECT_TRUE(AcceptsComplete(schema, R"("\ud83d\ude00\n")"));  // a pair is one code point
  EXPECT_FALSE(AcceptsPrefix(schema, "\"a\""));
  EXPECT_FALSE(AcceptsPrefix(schema, "\"abcd"));
  EXPECT_FALSE(AcceptsPrefix(schema, "\"ab\xC3\xA9\xC3"));
  // At the bound, only the closing quote may follow.
  auto grammar = Compile(schema);
  JsonConstraint c(grammar, ByteVocab());
  ASSERT_EQ(FeedBytes(c, "\"abc"), -1);
  std::vector<uint8_t> mask;
  EXPECT_EQ(c.AllowedTokens(mask), 1u);
  EXPECT_EQ(mask['"'], 1);
}

TEST(JsonConstraint, StringsAreValidUtf8AndValidEscapes) {
  const Json schema = Json::parse(R"({"type":"string"})");
  EXPECT_TRUE(AcceptsComplete(schema, "\"\xF4\x8F\xBF\xBF \xEF\xBF\xBD\x7F\""));
  EXPECT_TRUE(AcceptsComplete(schema, R"("\"\\\/\b\f\n\r\t\u0000\uABCD\uD7FF\uDBFF\uDFFF")"));
  EXPECT_FALSE(AcceptsPrefix(schema, "\"\xC0"));  // overlong lead
  EXPECT_FALSE(AcceptsPrefix(schema, "\"\xC1"));
  EXPECT_FALSE(AcceptsPrefix(schema, "\"\x80"));      // stray continuation
  EXPECT_FALSE(AcceptsPrefix(schema, "\"\xE0\x80"));  // overlong
  EXPECT_FALSE(AcceptsPrefix(schema, "\"\xED\xA0"));  // UTF-16 surrogate
  EXPECT_FALSE(AcceptsPrefix(schema, "\"\xF4\x90"));  // above U+10FFFF
  EXPECT_FALSE(AcceptsPrefix(schema, "\"\xF5"));
  EXPECT_FALSE(AcceptsPrefix(schema, "\"\xC3\xA9\xA9"));  // one continuation too many
  EXPECT_FALSE(AcceptsPrefix(schema, "\"\x01"));          // raw control character
  EXPECT_FALSE(AcceptsPrefix(schema, "\"\n"));
  EXPECT_FALSE(AcceptsPrefix(schema, R"("\x)"));
  EXPECT_FALSE(AcceptsPrefix(schema, R"("\u12G)"));
  EXPECT_FALSE(AcceptsPrefix(schema, R"("\uDC00)"));        // low surrogate alone
  EXPECT_FALSE(AcceptsPrefix(schema, R"("\uD83D")"));       // high surrogate alone
  EXPECT_FALSE(AcceptsPrefix(schema, R"("\uD83D\u0041)"));  // high then not low
  EXPECT_FALSE(AcceptsPrefix(schema, R"("\uD83D\uD83D)"));
}

TEST(JsonConstraint, SplitUtf8AcrossTokensIsAccepted) {
  const TestVocab& v = Synthetic();
  auto grammar = Compile(Json::parse(R"({"type":"string","maxLength":1})"));
  JsonConstraint c(grammar, v.vocab);
  auto id_of = [&](const std::string& s) {
    return static_cast<int32_t>(std::find(v.tokens.begin(), v.tokens.end(), s) - v.tokens.begin());
  };
  ASSERT_TRUE(c.Accept(id_of("\"")).ok());
  ASSERT_TRUE(c.Accept(id_of("\xE4\xB8")).ok());
  std::vector<uint8_t> mask;
  c.AllowedTokens(mask);
  EXPECT_EQ(mask[id_of("\xAD")], 1);
  EXPECT_EQ(mask[id_of("\xE4")], 0);
  EXPECT_EQ(mask[id_of("\"")], 0);
  ASSERT_TRUE(c.Accept(id_of("\xAD")).ok());
  c.AllowedTokens(mask);
  EXPECT_EQ(mask[id_of("\"")], 1);
  EXPECT_EQ(mask[id_of("x")], 0);  // maxLength 1 reached
}

TEST(JsonConstraint, NumberGrammar) {
  const Json number = Json::parse(R"({"type":"array","items":{"type":"number"}})");
  EXPECT_TRUE(AcceptsComplete(number, "[0,-0,1.5,-12.25e+10,3E-2,7e9,0.0]"));
  EXPECT_FALSE(AcceptsPrefix(number, "[01"));
  EXPECT_FALSE(AcceptsPrefix(number, "[-."));
  EXPECT_FALSE(AcceptsPrefix(number, "[1.]"));
  EXPECT_FALSE(AcceptsPrefix(number, "[1e]"));
  EXPECT_FALSE(AcceptsPrefix(number, "[+1"));
  EXPECT_FALSE(AcceptsPrefix(number, "[.5"));
  EXPECT_FALSE(AcceptsPrefix(number, "[1e999"));  // kMaxExponentDigits
  EXPECT_TRUE(AcceptsPrefix(number, "[" + std::string(kMaxIntegerDigits, '9')));
  EXPECT_FALSE(AcceptsPrefix(number, "[" + std::string(kMaxIntegerDigits + 1, '9')));
  const Json integer = Json::parse(R"({"type":"array","items":{"type":"integer"}})");
  EXPECT_TRUE(AcceptsComplete(integer, "[0,-7,123]"));
  EXPECT_FALSE(AcceptsPrefix(integer, "[1."));
  EXPECT_FALSE(AcceptsPrefix(integer, "[1e"));
  const Json non_negative = Json::parse(R"({"type":"integer","minimum":0})");
  EXPECT_FALSE(AcceptsPrefix(non_negative, "-"));
  EXPECT_TRUE(AcceptsComplete(non_negative, "42"));
  // A complete top-level number may still grow: both digits and end-of-sequence are allowed.
  auto grammar = Compile(non_negative);
  JsonConstraint c(grammar, ByteVocab());
  ASSERT_EQ(FeedBytes(c, "4"), -1);
  std::vector<uint8_t> mask;
  c.AllowedTokens(mask);
  EXPECT_EQ(mask[kEos], 1);
  EXPECT_EQ(mask['2'], 1);
  EXPECT_EQ(mask['.'], 0);
}

TEST(JsonConstraint, EnumAndConstAreExact) {
  const Json schema =
      Json::parse(R"({"enum":["a", 1, 12, {"k":[null]}], "type":["string","integer","object"]})");
  EXPECT_TRUE(AcceptsComplete(schema, R"("a")"));
  EXPECT_TRUE(AcceptsComplete(schema, "1"));
  EXPECT_TRUE(AcceptsComplete(schema, "12"));
  EXPECT_TRUE(AcceptsComplete(schema, R"({"k":[null]})"));
  EXPECT_FALSE(AcceptsPrefix(schema, "13"));
  EXPECT_FALSE(AcceptsPrefix(schema, R"("b)"));
  EXPECT_FALSE(AcceptsPrefix(schema, R"({ )"));
  // type filters enum values.
  EXPECT_FALSE(AcceptsPrefix(Json::parse(R"({"enum":["a", 1], "type":"integer"})"), "\""));
  EXPECT_TRUE(AcceptsComplete(Json::parse(R"({"const":"x\"y"})"), R"("x\"y")"));
}

TEST(JsonConstraint, AdditionalPropertiesFalseWithoutPropertiesIsEmptyObject) {
  const Json schema = Json::parse(R"({"type":"object","additionalProperties":false})");
  EXPECT_TRUE(AcceptsComplete(schema, "{}"));
  EXPECT_FALSE(AcceptsPrefix(schema, "{\""));
}

TEST(JsonConstraint, ArrayBounds) {
  const Json schema = Json::parse(R"({"type":"array","items":{"type":"null"},"minItems":2,
                                      "maxItems":3})");
  EXPECT_FALSE(AcceptsPrefix(schema, "[]"));
  EXPECT_FALSE(AcceptsPrefix(schema, "[null]"));
  EXPECT_TRUE(AcceptsComplete(schema, "[null,null]"));
  EXPECT_TRUE(AcceptsComplete(schema, "[null, null, null]"));
  EXPECT_FALSE(AcceptsPrefix(schema, "[null,null,null,"));
  EXPECT_TRUE(AcceptsComplete(Json::parse(R"({"type":"array","maxItems":0})"), "[]"));
  EXPECT_TRUE(AcceptsComplete(Json::parse(R"({"type":"array","items":false})"), "[]"));
}

TEST(JsonConstraint, RecursionDepthIsBounded) {
  const Json schema = Json::parse(R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},
                                      {"type":"null"}]}},"required":["next"]})");
  std::string deep;
  for (int i = 0; i <= kMaxRefRecursion; ++i) deep += R"({"next":)";
  deep += "null";
  deep += std::string(kMaxRefRecursion + 1, '}');
  EXPECT_TRUE(AcceptsComplete(schema, deep));
  std::string deeper;
  for (int i = 0; i <= kMaxRefRecursion + 1; ++i) deeper += R"({"next":)";
  EXPECT_FALSE(AcceptsPrefix(schema, deeper + "{"));
}

TEST(JsonConstraint, RefsUseEscapedJsonPointers) {
  EXPECT_TRUE(AcceptsComplete(Json::parse(R"({"$defs":{"a b/c~d":{"type":"null"}},
                                              "$ref":"#/$defs/a%20b~1c~0d"})"),
                              "null"));
  EXPECT_TRUE(
      AcceptsComplete(Json::parse(R"({"anyOf":[{"type":"null"},{"$ref":"#/anyOf/0"}]})"), "null"));
}

TEST(JsonConstraint, CopiesAreIndependent) {
  auto grammar = Compile(Json::parse(R"({"type":"string"})"));
  JsonConstraint a(grammar, ByteVocab());
  ASSERT_EQ(FeedBytes(a, "\"ab"), -1);
  JsonConstraint b = a;
  ASSERT_TRUE(a.Accept('"').ok());
  EXPECT_TRUE(a.Complete());
  EXPECT_FALSE(b.Complete());
  ASSERT_TRUE(b.Accept('c').ok());
  ASSERT_TRUE(b.Accept('"').ok());
  EXPECT_TRUE(b.Complete());
}

TEST(JsonConstraint, LongGenerationKeepsStateSmall) {
  // A long string: frames are compacted after every token, so nothing grows with the output.
  auto grammar = Compile(Json::parse(R"({"type":"array","items":{"type":"string"}})"));
  JsonConstraint c(grammar, ByteVocab());
  ASSERT_EQ(FeedBytes(c, "[\""), -1);
  for (int i = 0; i < 200000; ++i) ASSERT_TRUE(c.Accept('x').ok());
  ASSERT_EQ(FeedBytes(c, "\",\"y\"]"), -1);
  EXPECT_TRUE(c.Complete());
}

// ---------------------------------------------------------------------------------------------
// Schemas that are refused.

void ExpectRefused(const std::string& schema_text, const std::string& expected_in_message) {
  const Json schema = Json::parse(schema_text, nullptr, false);
  ASSERT_FALSE(schema.is_discarded()) << schema_text;
  auto grammar = JsonGrammar::FromSchema(schema);
  ASSERT_FALSE(grammar.ok()) << schema_text;
  EXPECT_EQ(grammar.status().code(), StatusCode::kInvalidArgument) << grammar.status();
  EXPECT_NE(grammar.status().message().find(expected_in_message), std::string::npos)
      << grammar.status() << " should mention " << expected_in_message;
}

TEST(JsonGrammar, UnsupportedKeywordsAreNamed) {
  ExpectRefused(R"({"type":"object","properties":{"code":{"type":"string","pattern":"^a"}}})",
                "'pattern'");
  ExpectRefused(R"({"type":"object","properties":{"code":{"type":"string","pattern":"^a"}}})",
                "#/properties/code");
  ExpectRefused(R"({"type":"integer","multipleOf":2})", "'multipleOf'");
  ExpectRefused(R"({"not":{"type":"null"}})", "'not'");
  ExpectRefused(R"({"type":"array","prefixItems":[{"type":"null"}]})", "'prefixItems'");
  ExpectRefused(R"({"type":"array","uniqueItems":true})", "'uniqueItems'");
  ExpectRefused(R"({"if":{"type":"null"},"then":{"type":"null"}})", "'if'");
  ExpectRefused(R"({"type":"object","patternProperties":{"a":{}}})", "'patternProperties'");
  ExpectRefused(R"({"type":"object","minProperties":1})", "'minProperties'");
  ExpectRefused(R"({"type":"string","nullable":true})", "'nullable'");
  ExpectRefused(R"({"type":"array","items":[{"type":"null"}]})", "tuple");
  ExpectRefused(R"({"allOf":[{"type":"null"},{"type":"null"}]})", "'allOf'");
  ExpectRefused(R"({"$ref":"other.json#/a"})", "only references inside the schema");
  ExpectRefused(R"({"$ref":"#/$defs/a","type":"object","$defs":{"a":{}}})",
                "'type' cannot be combined with '$ref'");
  ExpectRefused(R"({"anyOf":[{"type":"null"}],"type":"null"})", "cannot be combined");
  ExpectRefused(R"({"enum":["a"],"minLength":1})", "cannot be combined");
}

TEST(JsonGrammar, MalformedSchemasAreRefused) {
  ExpectRefused("5", "must be an object or a boolean");
  ExpectRefused(R"({"type":5})", "'type'");
  ExpectRefused(R"({"type":[]})", "'type'");
  ExpectRefused(R"({"type":"float"})", "unknown type 'float'");
  ExpectRefused(R"({"type":"object","properties":[]})", "'properties' must be an object");
  ExpectRefused(R"({"type":"object","required":"a"})", "'required'");
  ExpectRefused(R"({"type":"object","properties":{"a":{}},"required":["b"]})",
                "required property 'b' is not declared");
  ExpectRefused(R"({"type":"object","additionalProperties":1})", "'additionalProperties'");
  ExpectRefused(R"({"type":"array","minItems":-1})", "'minItems' must be a non-negative integer");
  ExpectRefused(R"({"type":"array","minItems":1.5})", "'minItems'");
  ExpectRefused(R"({"type":"array","minItems":3,"maxItems":1})", "greater than 'maxItems'");
  ExpectRefused(R"({"type":"string","minLength":3,"maxLength":1})", "greater than 'maxLength'");
  ExpectRefused(R"({"type":"string","maxLength":"3"})", "'maxLength'");
  ExpectRefused(R"({"type":"integer","minimum":"0"})", "'minimum' must be a number");
  ExpectRefused(R"({"enum":[]})", "'enum' must be a non-empty array");
  ExpectRefused(R"({"enum":"a"})", "'enum'");
  ExpectRefused(R"({"enum":["a"],"type":"integer"})", "no value of 'enum'");
  ExpectRefused(R"({"anyOf":[]})", "'anyOf' must be a non-empty array");
  ExpectRefused(R"({"$ref":7})", "'$ref' must be a string");
  ExpectRefused(R"({"$ref":"#/$defs/missing"})", "does not resolve");
  ExpectRefused(R"({"$ref":"#/$defs/a%2"})", "malformed %-escape");
  ExpectRefused(R"({"$defs":[],"type":"null"})", "'$defs' must be an object");
  ExpectRefused(R"({"type":"array","items":{"type":"strin"}})", "#/items");
}

TEST(JsonGrammar, SchemasWithNoGeneratableValueAreRefused) {
  ExpectRefused("false", "admits no value");
  ExpectRefused(R"({"$ref":"#"})", "admits no value");
  ExpectRefused(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}},
                   "$ref":"#/$defs/a"})",
                "admits no value");
  ExpectRefused(R"({"type":"object","properties":{"a":false},"required":["a"]})",
                "admits no value");
  ExpectRefused(R"({"type":"array","items":false,"minItems":1})", "admits no value");
  // A recursion that must go on forever.
  ExpectRefused(R"({"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]})",
                "admits no value");
}

TEST(JsonGrammar, LimitsAreEnforced) {
  Json props = Json::object();
  for (size_t i = 0; i <= kMaxObjectProperties; ++i)
    props["p" + std::to_string(i)] = Json::object();
  ExpectRefused(Json{{"type", "object"}, {"properties", props}}.dump(), "properties");

  Json values = Json::array();
  for (size_t i = 0; i <= kMaxEnumValues; ++i) values.push_back(i);
  ExpectRefused(Json{{"enum", values}}.dump(), "'enum' has more than");

  Json deep = Json::object();
  for (int i = 0; i <= kMaxSchemaDepth; ++i) deep = Json{{"type", "array"}, {"items", deep}};
  ExpectRefused(deep.dump(), "deeper than");

  ExpectRefused(R"({"type":"array","minItems":100000})", "'minItems' above");
  ExpectRefused(R"({"type":"string","minLength":1000000})", "'minLength' above");

  // Many $ref expansions: each of 20 definitions refers to the next one twice.
  Json defs = Json::object();
  for (int i = 0; i < 20; ++i) {
    const std::string next = "#/$defs/d" + std::to_string(i + 1);
    defs["d" + std::to_string(i)] = Json{
        {"type", "object"}, {"properties", {{"l", {{"$ref", next}}}, {"r", {{"$ref", next}}}}}};
  }
  defs["d20"] = Json{{"type", "null"}};
  // Memoised: each definition is compiled once, so this is small and accepted.
  auto grammar = JsonGrammar::FromSchema(Json{{"$defs", defs}, {"$ref", "#/$defs/d0"}});
  EXPECT_TRUE(grammar.ok()) << grammar.status();
}

TEST(JsonGrammar, ResponseFormatKinds) {
  EXPECT_EQ(JsonGrammar::FromResponseFormat({}).status().code(), StatusCode::kInvalidArgument);
  ResponseFormat format{.kind = ResponseFormat::Kind::kJsonSchema,
                        .schema = nlohmann::json::parse(R"({"type":"boolean"})"),
                        .schema_name = "b"};
  auto grammar = JsonGrammar::FromResponseFormat(format);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  JsonConstraint c(*grammar, ByteVocab());
  EXPECT_EQ(FeedBytes(c, "false"), -1);
  EXPECT_TRUE(c.Complete());
  format.schema = nlohmann::json::parse(R"({"type":"string","pattern":"x"})");
  EXPECT_EQ(JsonGrammar::FromResponseFormat(format).status().code(), StatusCode::kInvalidArgument);
}

TEST(ConstraintVocabulary, RefusesBadInput) {
  EXPECT_EQ(ConstraintVocabulary::Create({}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ConstraintVocabulary::Create({"a"}, {1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ConstraintVocabulary::Create({"a"}, {-1}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ConstraintVocabulary::Create({std::string(kMaxConstraintTokenBytes + 1, 'a')}, {})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(ConstraintVocabulary, TrieHoldsEveryTokenOnce) {
  auto vocab = ConstraintVocabulary::Create({"ab", "a", "", "abc", "b", "ab", "<eos>"}, {6, 6});
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ((*vocab)->eos_token_ids(), std::vector<int32_t>{6});
  // Spell every trie path and check the tokens there.
  std::map<std::string, std::vector<int32_t>> found;
  const ConstraintVocabulary::Trie& trie = (*vocab)->trie();
  std::vector<std::pair<uint32_t, std::string>> stack = {{0, ""}};
  while (!stack.empty()) {
    auto [node, prefix] = stack.back();
    stack.pop_back();
    for (uint32_t t = trie.nodes[node].tokens_begin; t < trie.nodes[node].tokens_end; ++t) {
      found[prefix].push_back(trie.token_ids[t]);
    }
    for (uint32_t c = node + 1; c < trie.nodes[node].subtree_end; c = trie.nodes[c].subtree_end) {
      stack.push_back({c, prefix + static_cast<char>(trie.nodes[c].byte)});
    }
  }
  const std::map<std::string, std::vector<int32_t>> expected = {
      {"a", {1}}, {"ab", {0, 5}}, {"abc", {3}}, {"b", {4}}};
  EXPECT_EQ(found, expected);
}

// ---------------------------------------------------------------------------------------------
// The shipped tokenizer (byte-level BPE, 4096 tokens).

// GPT-2's byte-to-unicode table, inverted: the code point a vocabulary string uses -> the byte.
std::map<uint32_t, uint8_t> Gpt2UnicodeToByte() {
  std::map<uint32_t, uint8_t> out;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    out[printable ? b : next++] = static_cast<uint8_t>(b);
  }
  return out;
}

std::string Gpt2Decode(const std::string& token, const std::map<uint32_t, uint8_t>& table) {
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    const auto lead = static_cast<uint8_t>(token[i]);
    const int len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? lead : lead & (0xFF >> (len + 1));
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(token[i + k]) & 0x3F);
    bytes += static_cast<char>(table.at(cp));
    i += len;
  }
  return bytes;
}

struct RealVocab {
  std::string tokenizer_json;
  TestVocab vocab;
};

const RealVocab& TinyLlama() {
  static const RealVocab* real = [] {
    auto* r = new RealVocab;
    std::ifstream in(SOVAI_TINY_LLAMA_TOKENIZER, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    r->tokenizer_json = text.str();
    const nlohmann::json doc = nlohmann::json::parse(r->tokenizer_json, nullptr, false);
    if (doc.is_discarded()) return r;
    const auto table = Gpt2UnicodeToByte();
    size_t size = 0;
    for (auto& [token, id] : doc["model"]["vocab"].items())
      size = std::max<size_t>(size, id.get<size_t>() + 1);
    for (const auto& added : doc["added_tokens"])
      size = std::max<size_t>(size, added["id"].get<size_t>() + 1);
    r->vocab.tokens.assign(size, "");
    for (auto& [token, id] : doc["model"]["vocab"].items()) {
      r->vocab.tokens[id.get<size_t>()] = Gpt2Decode(token, table);
    }
    std::vector<int32_t> eos;
    for (const auto& added : doc["added_tokens"]) {
      const auto id = added["id"].get<int32_t>();
      r->vocab.tokens[id].clear();  // special tokens spell nothing in the output
      if (added["content"] == "<|end_of_text|>" || added["content"] == "<|eot_id|>")
        eos.push_back(id);
    }
    r->vocab.eos = eos.empty() ? -1 : eos[0];
    auto vocab = ConstraintVocabulary::Create(r->vocab.tokens, eos);
    if (vocab.ok()) r->vocab.vocab = *vocab;
    return r;
  }();
  return *real;
}

TEST(JsonConstraintRealVocab, RandomOutputsValidate) {
  const RealVocab& real = TinyLlama();
  ASSERT_NE(real.vocab.vocab, nullptr) << "cannot load " << SOVAI_TINY_LLAMA_TOKENIZER;
  const Json schema = Json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer"},
      "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 3},
      "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}
    },
    "required": ["name", "age", "pets"],
    "additionalProperties": false
  })");
  auto grammar = Compile(schema);
  ASSERT_NE(grammar, nullptr);
  Validator validator(schema);
  for (int seed = 0; seed < 30; ++seed) {
    JsonConstraint c(grammar, real.vocab.vocab);
    RunResult run = RandomRun(c, real.vocab, seed);
    ASSERT_TRUE(run.finished) << run.error;
    const Json value = Json::parse(run.text, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << run.text;
    EXPECT_EQ(validator.Check(value, schema), "") << run.text;
  }
}

// The tokenizer's own encoding of a valid answer goes through the constraint token by token.
TEST(JsonConstraintRealVocab, TokenizedAnswerIsAccepted) {
  const RealVocab& real = TinyLlama();
  ASSERT_NE(real.vocab.vocab, nullptr);
  auto tokenizer = model::Tokenizer::FromJson(real.tokenizer_json);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Json schema = Json::parse(R"({"type":"object","properties":{
      "city":{"type":"string"},"population":{"type":"integer"},"rivers":{"type":"array",
      "items":{"type":"string"}},"capital":{"type":"boolean"}},"required":["city","population"]})");
  auto grammar = Compile(schema);
  const std::string answer = R"({"city": "Zürich", "population": 421878, )"
                             R"("rivers": ["Limmat", "Sihl"], "capital": false})";
  auto ids = tokenizer->Encode(answer);
  ASSERT_TRUE(ids.ok()) << ids.status();
  JsonConstraint c(grammar, real.vocab.vocab);
  std::vector<uint8_t> mask;
  for (int32_t id : *ids) {
    c.AllowedTokens(mask);
    EXPECT_EQ(mask[id], 1) << "token " << id << " '" << real.vocab.tokens[id] << "'";
    ASSERT_TRUE(c.Accept(id).ok());
  }
  EXPECT_TRUE(c.Complete());
  c.AllowedTokens(mask);
  EXPECT_EQ(mask[real.vocab.eos], 1);
}

// ---------------------------------------------------------------------------------------------
// Mask cost on a 150k-token vocabulary (printed; no assertion on time).

TEST(JsonConstraintSpeed, MaskOverLargeVocabulary) {
  std::mt19937_64 rng(7);
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  const std::string letters = "etaoinshrdlucmfwypvbgkqjxzETAOINSHRDLU";
  const std::string punct = "\"{}[],:.-_0123456789\\/'!?()";
  const char* utf8[] = {"\xC3\xA9",     "\xC3\xBC", "\xE4\xB8\xAD",
                        "\xE6\x96\x87", "\xD0\xB4", "\xF0\x9F\x98\x80"};
  while (tokens.size() < 150000) {
    std::string t;
    if (rng() % 3 == 0) t += ' ';
    const int len = 1 + static_cast<int>(rng() % 9);
    for (int i = 0; i < len; ++i) {
      const uint64_t r = rng() % 20;
      if (r < 15) {
        t += letters[rng() % letters.size()];
      } else if (r < 18) {
        t += punct[rng() % punct.size()];
      } else {
        t += utf8[rng() % 6];
      }
    }
    tokens.push_back(std::move(t));
  }
  const int32_t eos = static_cast<int32_t>(tokens.size());
  tokens.emplace_back();
  auto vocab = ConstraintVocabulary::Create(tokens, {eos});
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  std::printf("trie: %zu nodes for %zu tokens\n", (*vocab)->trie().nodes.size(), tokens.size());

  auto grammar = Compile(Json::parse(R"({"type":"object","properties":{
      "name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{}},
      "code":{"type":"string","maxLength":5}},
      "required":["name","age","tags","code"]})"));
  auto any_object = JsonGrammar::AnyObject();
  struct Case {
    const char* label;
    std::shared_ptr<const JsonGrammar> grammar;
    std::string prefix;
  };
  const Case cases[] = {
      {"start of object", grammar, ""},
      {"inside a string", grammar, R"({"name":"Ali)"},
      {"inside a character", grammar, "{\"name\":\"\xE4\xB8"},
      {"inside an escape", grammar, R"({"name":"\)"},
      {"string, maxLength", grammar, R"({"name":"x","age":1,"tags":[],"code":"ab)"},
      {"inside a number", grammar, R"({"name":"x","age":12)"},
      {"inside any value", grammar, R"({"name":"x","age":12,"tags":[{"k":[)"},
      {"json_object key", any_object, R"({")"},
  };
  std::vector<uint8_t> mask;
  for (const Case& c : cases) {
    JsonConstraint constraint(c.grammar, *vocab);
    for (char ch : c.prefix) {
      const auto id = static_cast<int32_t>(static_cast<uint8_t>(ch));
      ASSERT_TRUE(constraint.Accept(id).ok()) << c.label;
    }
    constexpr int kRepeats = 5;
    size_t allowed = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRepeats; ++i) allowed = constraint.AllowedTokens(mask);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() /
        kRepeats;
    std::printf("mask %-18s %8zu allowed  %7.2f ms\n", c.label, allowed, ms);
    EXPECT_GT(allowed, 0u) << c.label;
  }
}

}  // namespace
}  // namespace sovai::serve
