#include "model/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "base/check.h"
#include "model/jinja_strings.h"

namespace sovai::model::jinja {

// --- ValueDict ---

const Value* ValueDict::Find(std::string_view key) const {
  if (!index_.empty()) {
    auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueDict::Set(std::string key, Value value) {
  if (!index_.empty()) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      items_[it->second].second = std::move(value);
      return;
    }
    index_.emplace(key, items_.size());
    items_.emplace_back(std::move(key), std::move(value));
    return;
  }
  for (auto& [k, v] : items_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
  if (items_.size() > kIndexThreshold) {
    for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
  }
}

// --- Value ---

Value Value::Undefined(std::string hint) {
  Value v;
  v.rep_ = UndefinedRep{std::make_shared<const std::string>(std::move(hint))};
  return v;
}

Value Value::None() {
  Value v;
  v.rep_ = NoneRep{};
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.rep_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.rep_ = i;
  return v;
}

Value Value::Float(double d) {
  Value v;
  v.rep_ = d;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.weight_ = std::max<uint64_t>(1, s.size());
  v.rep_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

namespace {

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

}  // namespace

Value Value::List(ValueList items) {
  Value v;
  int depth = 0;
  uint64_t weight = 1;
  for (const Value& item : items) {
    depth = std::max(depth, item.depth());
    weight = SaturatingAdd(weight, item.weight());
  }
  v.depth_ = depth + 1;
  v.weight_ = weight;
  v.rep_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::Dict(ValueDict dict) {
  Value v;
  int depth = 0;
  uint64_t weight = 1;
  for (const auto& [k, item] : dict.items()) {
    depth = std::max(depth, item.depth());
    weight = SaturatingAdd(weight, SaturatingAdd(k.size(), item.weight()));
  }
  v.depth_ = depth + 1;
  v.weight_ = weight;
  v.rep_ = std::make_shared<const ValueDict>(std::move(dict));
  return v;
}

Value Value::NewNamespace(ValueDict attrs) {
  Value v;
  v.depth_ = 1;
  v.rep_ = std::make_shared<Namespace>(Namespace{std::move(attrs)});
  return v;
}

Value Value::Function(std::shared_ptr<const Callable> callable) {
  SOVAI_CHECK(callable != nullptr);
  Value v;
  v.rep_ = std::move(callable);
  return v;
}

bool Value::bool_value() const { return std::get<bool>(rep_); }
int64_t Value::int_value() const { return std::get<int64_t>(rep_); }
double Value::float_value() const { return std::get<double>(rep_); }

double Value::AsDouble() const {
  SOVAI_CHECK(is_number());
  if (is_bool()) return bool_value() ? 1.0 : 0.0;
  if (is_int()) return static_cast<double>(int_value());
  return float_value();
}

const std::string& Value::string_value() const {
  return *std::get<std::shared_ptr<const std::string>>(rep_);
}
const ValueList& Value::list_items() const {
  return *std::get<std::shared_ptr<const ValueList>>(rep_);
}
const ValueDict& Value::dict() const { return *std::get<std::shared_ptr<const ValueDict>>(rep_); }
ValueDict& Value::namespace_attrs() const {
  return std::get<std::shared_ptr<Namespace>>(rep_)->attrs;
}
const Callable& Value::callable() const { return *std::get<std::shared_ptr<const Callable>>(rep_); }

std::string_view Value::undefined_hint() const {
  const auto& hint = std::get<UndefinedRep>(rep_).hint;
  return hint ? std::string_view(*hint) : std::string_view();
}

// --- Python semantics ---

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.bool_value();
    case Value::Kind::kInt:
      return v.int_value() != 0;
    case Value::Kind::kFloat:
      return v.float_value() != 0.0;
    case Value::Kind::kString:
      return !v.string_value().empty();
    case Value::Kind::kList:
      return !v.list_items().empty();
    case Value::Kind::kDict:
      return !v.dict().empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

std::string_view TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "?";
}

namespace {

// Namespaces nested deeper than this inside a printed value print as "<Namespace {...}>" (which
// also ends cycles: a namespace may hold itself).
constexpr int kMaxPrintedNamespaces = 8;

// Returns false once out->size() passes max_bytes (the rest is not printed).
bool AppendRepr(const Value& v, int namespaces, size_t max_bytes, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      *out += "Undefined";
      break;
    case Value::Kind::kNone:
      *out += "None";
      break;
    case Value::Kind::kBool:
      *out += v.bool_value() ? "True" : "False";
      break;
    case Value::Kind::kInt:
      *out += std::to_string(v.int_value());
      break;
    case Value::Kind::kFloat:
      *out += PyFloatRepr(v.float_value());
      break;
    case Value::Kind::kString:
      *out += PyRepr(v.string_value());
      break;
    case Value::Kind::kList: {
      const ValueList& items = v.list_items();
      *out += v.is_tuple() ? '(' : '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += ", ";
        if (!AppendRepr(items[i], namespaces, max_bytes, out)) return false;
      }
      if (v.is_tuple() && items.size() == 1) *out += ',';
      *out += v.is_tuple() ? ')' : ']';
      break;
    }
    case Value::Kind::kDict: {
      *out += '{';
      bool first = true;
      for (const auto& [k, item] : v.dict().items()) {
        if (!first) *out += ", ";
        first = false;
        *out += PyRepr(k);
        *out += ": ";
        if (!AppendRepr(item, namespaces, max_bytes, out)) return false;
      }
      *out += '}';
      break;
    }
    case Value::Kind::kNamespace: {
      if (namespaces >= kMaxPrintedNamespaces) {
        *out += "<Namespace {...}>";
        break;
      }
      *out += "<Namespace {";
      bool first = true;
      for (const auto& [k, item] : v.namespace_attrs().items()) {
        if (!first) *out += ", ";
        first = false;
        *out += PyRepr(k);
        *out += ": ";
        if (!AppendRepr(item, namespaces + 1, max_bytes, out)) return false;
      }
      *out += "}>";
      break;
    }
    case Value::Kind::kCallable:
      *out += "<function " + v.callable().name() + ">";
      break;
  }
  return out->size() <= max_bytes;
}

}  // namespace

bool AppendPyRepr(const Value& v, size_t max_bytes, std::string* out) {
  return AppendRepr(v, 0, max_bytes, out);
}

bool AppendPyStr(const Value& v, size_t max_bytes, std::string* out) {
  if (v.is_string()) {
    if (out->size() + v.string_value().size() > max_bytes) return false;
    *out += v.string_value();
    return true;
  }
  if (v.is_undefined()) return true;
  return AppendRepr(v, 0, max_bytes, out);
}

std::string ToPyRepr(const Value& v) {
  std::string out;
  AppendPyRepr(v, SIZE_MAX, &out);
  return out;
}

std::string ToPyStr(const Value& v) {
  std::string out;
  AppendPyStr(v, SIZE_MAX, &out);
  return out;
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (IsIntLike(a) && IsIntLike(b)) return AsInt(a) == AsInt(b);
    return a.AsDouble() == b.AsDouble();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.string_value() == b.string_value();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const ValueList& x = a.list_items();
      const ValueList& y = b.list_items();
      if (&x == &y) return true;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const ValueDict& x = a.dict();
      const ValueDict& y = b.dict();
      if (&x == &y) return true;
      if (x.size() != y.size()) return false;
      for (const auto& [k, item] : x.items()) {
        const Value* other = y.Find(k);
        if (other == nullptr || !Equals(item, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.namespace_attrs() == &b.namespace_attrs();
    case Value::Kind::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;  // numbers were handled above
  }
}

std::optional<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (IsIntLike(a) && IsIntLike(b)) {
      int64_t x = AsInt(a), y = AsInt(b);
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    double x = a.AsDouble(), y = b.AsDouble();
    if (std::isnan(x) || std::isnan(y)) return 0;  // unordered: sorting keeps NaN in place
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order.
    int c = a.string_value().compare(b.string_value());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const ValueList& x = a.list_items();
    const ValueList& y = b.list_items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return std::nullopt;
}

// --- JSON ---

namespace {

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  char buf[16];
  *out += '"';
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t start = i;
      char32_t cp = base::NextUtf8CodePointOrReplacement(s, &i);
      if (!ensure_ascii) {
        out->append(s.substr(start, i - start));
        continue;
      }
      if (cp >= 0x10000) {
        char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
        *out += buf;
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
        *out += buf;
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

struct JsonWriter {
  const JsonFormat& format;
  std::string item_separator;
  std::string key_separator;
  std::string out;

  void NewLine(int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *format.indent;
  }

  base::Status Write(const Value& v, int level) {
    if (out.size() > format.max_bytes) {
      return base::ResourceExhaustedError("tojson output exceeds " +
                                          std::to_string(format.max_bytes) + " bytes");
    }
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return {};
      case Value::Kind::kBool:
        out += v.bool_value() ? "true" : "false";
        return {};
      case Value::Kind::kInt:
        out += std::to_string(v.int_value());
        return {};
      case Value::Kind::kFloat: {
        double d = v.float_value();
        if (std::isnan(d)) {
          out += "NaN";
        } else if (std::isinf(d)) {
          out += d < 0 ? "-Infinity" : "Infinity";
        } else {
          out += PyFloatRepr(d);
        }
        return {};
      }
      case Value::Kind::kString:
        AppendJsonString(v.string_value(), format.ensure_ascii, &out);
        return {};
      case Value::Kind::kList: {
        const ValueList& items = v.list_items();
        if (items.empty()) {
          out += "[]";
          return {};
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += item_separator;
          if (format.indent) NewLine(level + 1);
          SOVAI_RETURN_IF_ERROR(Write(items[i], level + 1));
        }
        if (format.indent) NewLine(level);
        out += ']';
        return {};
      }
      case Value::Kind::kDict: {
        const auto& items = v.dict().items();
        if (items.empty()) {
          out += "{}";
          return {};
        }
        std::vector<const std::pair<std::string, Value>*> order;
        order.reserve(items.size());
        for (const auto& item : items) order.push_back(&item);
        if (format.sort_keys) {
          std::stable_sort(order.begin(), order.end(),
                           [](const auto* x, const auto* y) { return x->first < y->first; });
        }
        out += '{';
        for (size_t i = 0; i < order.size(); ++i) {
          if (i > 0) out += item_separator;
          if (format.indent) NewLine(level + 1);
          AppendJsonString(order[i]->first, format.ensure_ascii, &out);
          out += key_separator;
          SOVAI_RETURN_IF_ERROR(Write(order[i]->second, level + 1));
        }
        if (format.indent) NewLine(level);
        out += '}';
        return {};
      }
      case Value::Kind::kUndefined:
        return base::InvalidArgumentError("Object of type Undefined is not JSON serializable" +
                                          (v.undefined_hint().empty()
                                               ? std::string()
                                               : " (" + std::string(v.undefined_hint()) + ")"));
      case Value::Kind::kNamespace:
      case Value::Kind::kCallable:
        return base::InvalidArgumentError("Object of type " + std::string(TypeName(v)) +
                                          " is not JSON serializable");
    }
    return {};
  }
};

}  // namespace

base::Result<std::string> ToJson(const Value& v, const JsonFormat& format) {
  JsonWriter writer{format, format.indent ? "," : ", ", ": ", {}};
  if (format.separators) {
    writer.item_separator = format.separators->first;
    writer.key_separator = format.separators->second;
  }
  SOVAI_RETURN_IF_ERROR(writer.Write(v, 0));
  if (writer.out.size() > format.max_bytes) {
    return base::ResourceExhaustedError("tojson output exceeds " +
                                        std::to_string(format.max_bytes) + " bytes");
  }
  return std::move(writer.out);
}

namespace {

template <typename Json>
base::Result<Value> ConvertJson(const Json& json, int depth) {
  if (depth > kMaxValueDepth) {
    return base::InvalidArgumentError("template input nests deeper than " +
                                      std::to_string(kMaxValueDepth) + " levels");
  }
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = json.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::Int(static_cast<int64_t>(u));
      }
      return Value::Float(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::Float(json.template get<double>());
    case nlohmann::json::value_t::string: {
      const auto& s = json.template get_ref<const std::string&>();
      size_t bad = 0;
      if (!IsValidUtf8(s, &bad)) {
        return base::InvalidArgumentError("template input string is not valid UTF-8 (byte " +
                                          std::to_string(bad) + ")");
      }
      return Value::String(s);
    }
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) {
        SOVAI_ASSIGN_OR_RETURN(Value v, ConvertJson(item, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      ValueDict dict;
      for (auto it = json.begin(); it != json.end(); ++it) {
        size_t bad = 0;
        if (!IsValidUtf8(it.key(), &bad)) {
          return base::InvalidArgumentError("template input key is not valid UTF-8");
        }
        SOVAI_ASSIGN_OR_RETURN(Value v, ConvertJson(it.value(), depth + 1));
        dict.Set(it.key(), std::move(v));
      }
      return Value::Dict(std::move(dict));
    }
    case nlohmann::json::value_t::binary:
    case nlohmann::json::value_t::discarded:
      break;
  }
  return base::InvalidArgumentError("template input holds a JSON value of an unsupported type");
}

}  // namespace

base::Result<Value> FromJson(const nlohmann::ordered_json& json) { return ConvertJson(json, 1); }
base::Result<Value> FromJson(const nlohmann::json& json) { return ConvertJson(json, 1); }

}  // namespace sovai::model::jinja
