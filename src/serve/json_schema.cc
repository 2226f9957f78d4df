// JSON Schema -> JsonGrammar (serve/json_constraint.h): the subset and its limits are in the
// header; docs/api/openai.md says what response_format accepts.
#include "serve/internal/json_grammar.h"

namespace sovai::serve {

namespace json_internal {
namespace {

// The schema document itself nests at most this deep (the API layer's JSON parser allows 64).
constexpr int kMaxSchemaJsonDepth = 128;

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

}  // namespace
}  // namespace json_internal

using base::InvalidArgumentError;
using base::Result;
using base::Status;
using json_internal::AnyValueRules;
using json_internal::CheckDepth;
using json_internal::Element;
using json_internal::GrammarBuilder;
using json_internal::Json;
using json_internal::Kind;
using json_internal::SchemaCompiler;
using json_internal::ToOrdered;

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

}  // namespace sovai::serve
