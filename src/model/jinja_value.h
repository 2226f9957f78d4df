// Runtime values of the chat-template interpreter (internal to sovai_model_template).
//
// The values are Python's, as Jinja templates see them under transformers: undefined, None,
// bool, int (64-bit; overflow is an error, not a bignum), float, str (valid UTF-8), list, tuple,
// dict (string keys, insertion order kept), Jinja's namespace() object, and callables (globals,
// macros, bound methods). Lists and dicts are immutable once built and shared by reference
// counting, as in the sandboxed environment templates run in; a namespace is the one mutable
// object (`{% set ns.x = ... %}`).
//
// Printing (ToPyStr), equality, ordering and JSON follow Python: `{{ [1, 'a'] }}` prints
// "[1, 'a']", `{{ true }}` prints "True", 1 == 1.0, and `tojson` is json.dumps with
// transformers' defaults (ensure_ascii=False).
//
// Nesting and size are bounded: every list/dict records its depth and its weight (items plus
// string bytes, counting a shared item once per reference), and the interpreter refuses to
// build one deeper than kMaxValueDepth or heavier than its limit. So the recursive functions
// here neither overflow the stack nor run for long, even on values that share sub-lists
// (`{% set x = [x, x] %}` in a loop). A namespace counts as depth 1, weight 1; printing
// descends into at most a few nested namespaces (they can form cycles) and every printer takes
// a byte budget.
//
// Thread-safety: values are immutable except a namespace's attributes; a Value may be read from
// several threads when no thread renders with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "base/status.h"

namespace sovai::model::jinja {

// Deepest list/dict nesting a value may have (JSON inputs, literals and filter results alike).
inline constexpr int kMaxValueDepth = 128;

class Value;
class Callable;
using ValueList = std::vector<Value>;

class ValueDict;
struct Namespace;

class Value {
 public:
  // The order matches the alternatives of Rep.
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // list or tuple (is_tuple())
    kDict,
    kNamespace,
    kCallable,
  };

  // Undefined, with no explanation.
  Value() = default;
  // Undefined; `hint` says why ("'foo' is undefined", "dict has no key 'x'") for the error
  // raised if the value is used in a way undefined values cannot be.
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value List(ValueList items);
  static Value Tuple(ValueList items);
  static Value Dict(ValueDict dict);
  static Value NewNamespace(ValueDict attrs);
  static Value Function(std::shared_ptr<const Callable> callable);

  Kind kind() const { return static_cast<Kind>(rep_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // int, float or bool (bool is an int in Python arithmetic).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_tuple() const { return is_list() && tuple_; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  // Accessors; calling one for another kind is a bug (SOVAI_CHECK).
  bool bool_value() const;
  int64_t int_value() const;
  double float_value() const;
  // int, float or bool as a double.
  double AsDouble() const;
  const std::string& string_value() const;
  const ValueList& list_items() const;
  const ValueDict& dict() const;
  // The namespace's attributes, shared by every copy of this value.
  ValueDict& namespace_attrs() const;
  const Callable& callable() const;
  std::string_view undefined_hint() const;

  // Nesting: 0 for scalars, 1 for an empty container or a namespace, 1 + the deepest item.
  int depth() const { return depth_; }
  // Size: a string's byte count; 1 for other scalars and namespaces; 1 + the items' weights
  // (and key bytes) for containers. Saturates at UINT64_MAX.
  uint64_t weight() const { return weight_; }

 private:
  struct UndefinedRep {
    std::shared_ptr<const std::string> hint;
  };
  struct NoneRep {};
  using Rep =
      std::variant<UndefinedRep, NoneRep, bool, int64_t, double, std::shared_ptr<const std::string>,
                   std::shared_ptr<const ValueList>, std::shared_ptr<const ValueDict>,
                   std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>;
  Rep rep_;
  bool tuple_ = false;
  int depth_ = 0;
  uint64_t weight_ = 1;
};

// An insertion-ordered str -> Value mapping (Python dict). Lookups are linear for small dicts
// and hashed once a dict grows past a few entries.
class ValueDict {
 public:
  const Value* Find(std::string_view key) const;
  // Replaces the value of an existing key (keeping its position) or appends a new key.
  void Set(std::string key, Value value);
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }

 private:
  static constexpr size_t kIndexThreshold = 16;
  std::vector<std::pair<std::string, Value>> items_;
  std::unordered_map<std::string, size_t> index_;  // built once items_ passes kIndexThreshold
};

// Jinja's namespace(): attributes that `{% set ns.attr = ... %}` may change from inside loops.
struct Namespace {
  ValueDict attrs;
};

// Arguments of a call: f(a, b, key=c).
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Something a template can call. The interpreter defines the kinds (globals, macros, bound
// methods); values only carry them.
class Callable {
 public:
  virtual ~Callable() = default;
  // For messages and printing: "range", "macro 'render_tool'", "str.strip".
  virtual std::string name() const = 0;
};

// Python truthiness: None, False, 0, 0.0, "", [], {} and undefined are false.
bool Truthy(const Value& v);
// Python's bool is an int (True + 1 == 2, x[True] == x[1]): an int or a bool, and its value.
inline bool IsIntLike(const Value& v) { return v.is_int() || v.is_bool(); }
inline int64_t AsInt(const Value& v) {
  return v.is_bool() ? (v.bool_value() ? 1 : 0) : v.int_value();
}
// Python's type name for messages: "str", "int", "NoneType", "dict", "undefined", ...
std::string_view TypeName(const Value& v);

// str(v) and repr(v) as Python and Jinja print them; undefined prints as "". Appending stops
// and returns false once `out` would exceed `max_bytes`.
bool AppendPyStr(const Value& v, size_t max_bytes, std::string* out);
bool AppendPyRepr(const Value& v, size_t max_bytes, std::string* out);
// Unbounded forms (for values known to be small, and tests).
std::string ToPyStr(const Value& v);
std::string ToPyRepr(const Value& v);

// Python ==: numbers compare by value (True == 1), containers item by item, dicts regardless of
// order, namespaces and callables by identity, undefined only equals undefined.
bool Equals(const Value& a, const Value& b);
// Python ordering (<): numbers with numbers, str with str (code point order), lists with lists
// and tuples with tuples, lexicographically. Returns <0, 0, >0, or nullopt when Python raises
// TypeError.
std::optional<int> Compare(const Value& a, const Value& b);

// json.dumps options (transformers' tojson: ensure_ascii=False, indent=None, separators=None,
// sort_keys=False).
struct JsonFormat {
  // Nothing: one line. Otherwise the indent unit (json.dumps(indent=4) is "    ", indent=0 "").
  std::optional<std::string> indent;
  // nullopt: Python's defaults, (", ", ": ") without indent and (",", ": ") with it.
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
  bool ensure_ascii = false;
  // The output may not be longer (ResourceExhausted).
  size_t max_bytes = SIZE_MAX;
};
// json.dumps(v). Errors: InvalidArgument when the value holds undefined, a namespace or a
// callable (not JSON serializable, as in Python); ResourceExhausted past format.max_bytes.
base::Result<std::string> ToJson(const Value& v, const JsonFormat& format = {});

// Converts a JSON document into values: objects become dicts (key order kept), arrays lists,
// integers ints (unsigned values above INT64_MAX become floats). Errors (InvalidArgument): a
// string that is not valid UTF-8, nesting deeper than kMaxValueDepth.
base::Result<Value> FromJson(const nlohmann::ordered_json& json);
base::Result<Value> FromJson(const nlohmann::json& json);

}  // namespace sovai::model::jinja
