// The filters of the chat-template interpreter (`x | name(args)`), one function per filter or
// family of filters, found through one table as in Jinja's FILTERS; semantics of Jinja 3 (see
// docs/formats/chat-templates.md). Every filter the parser accepts has an entry.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "model/jinja_interpreter.h"
#include "model/jinja_strings.h"

namespace sovai::model::jinja {

namespace {

bool IsWordChar(char32_t cp) { return IsAsciiDigit(cp) || cp == '_' || IsAlphaApprox(cp); }

std::string JinjaTitle(std::string_view s) {
  // Jinja's title filter: words start after runs of whitespace, '-', '(', '{', '[' or '<'.
  std::u32string cps = DecodeUtf8(s);
  std::u32string out;
  out.reserve(cps.size());
  bool word_start = true;
  for (char32_t cp : cps) {
    const bool separator =
        IsPySpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (separator) {
      out.push_back(cp);
      word_start = true;
    } else {
      out.push_back(word_start ? ToUpper(cp) : ToLower(cp));
      word_start = false;
    }
  }
  return EncodeUtf8(out);
}

// Python int(text, base) for a str: surrounding whitespace, a sign, underscores between
// digits, and for base 16/8/2 an optional matching prefix.
std::optional<int64_t> ParsePyInt(std::string_view text, int base) {
  std::string s = PyStrip(text, StripSide::kBoth);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (i + 1 < s.size() && s[i] == '0') {
    const char p = static_cast<char>(s[i + 1] | 0x20);
    if ((p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2)) i += 2;
  }
  std::string digits;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] != '_') continue;
    digits += s[i];
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(digits.c_str(), &end, base);
  if (errno != 0 || end != digits.c_str() + digits.size()) return std::nullopt;
  return negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
}

// Python float(text): whitespace, sign, digits with '.', exponent, "inf", "nan".
std::optional<double> ParsePyFloat(std::string_view text) {
  std::string s = PyStrip(text, StripSide::kBoth);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && IsAsciiDigit(s[i - 1]) &&
        IsAsciiDigit(s[i + 1])) {
      continue;
    }
    clean += s[i];
  }
  if (clean.empty()) return std::nullopt;
  std::string lower = PyLower(clean);
  std::string_view body = lower;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) body.remove_prefix(1);
  if (body == "inf" || body == "infinity" || body == "nan") {
    double v = body == "nan" ? std::numeric_limits<double>::quiet_NaN()
                             : std::numeric_limits<double>::infinity();
    return lower[0] == '-' ? -v : v;
  }
  for (char c : body) {
    if (!(IsAsciiDigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' ||
          c == '-')) {
      return std::nullopt;  // strtod would also accept hex floats, which Python does not
    }
  }
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

// Jinja's ignore_case postprocessing for sort/dictsort/unique/min/max.
Value IgnoreCase(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return Value::String(PyLower(v.string_value()));
}

base::Status NoArgs(Interpreter& in, const std::string& name, const CallArgs& args,
                    uint32_t offset) {
  if (!args.positional.empty() || !args.keyword.empty()) {
    return in.Error(offset, "filter '" + name + "' takes no arguments");
  }
  return {};
}

bool AsBool(const Value* v, bool fallback) { return v == nullptr ? fallback : Truthy(*v); }

// Jinja's make_attrgetter: "a.b.0" looked up item by item (keys first, then attributes); a
// default (not none) replaces an undefined result after each step, as in Jinja.
base::Result<Value> AttributePath(Interpreter& in, uint32_t offset, const Value& item,
                                  const Value& path, const Value* fallback = nullptr) {
  const bool use_fallback = fallback != nullptr && !fallback->is_none();
  if (IsIntLike(path)) {
    SOVAI_ASSIGN_OR_RETURN(Value v, in.GetItem(item, Value::Int(AsInt(path)), offset));
    return v.is_undefined() && use_fallback ? *fallback : v;
  }
  if (!path.is_string()) return in.Error(offset, "attribute must be a string or an integer");
  Value v = item;
  for (const std::string& part : PySplit(path.string_value(), std::string("."), -1)) {
    const bool digits =
        !part.empty() && part.size() < 19 &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    Value key = digits ? Value::Int(std::strtoll(part.c_str(), nullptr, 10)) : Value::String(part);
    SOVAI_ASSIGN_OR_RETURN(v, in.GetItem(v, key, offset));
    if (v.is_undefined() && use_fallback) v = *fallback;
  }
  return v;
}

// Filters: default, d
base::Result<Value> FilterDefault(Interpreter& in, const std::string& name, const Value& operand,
                                  const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"default_value", "boolean"}, name, offset));
  const bool boolean = AsBool(b.Get(1), false);
  if (operand.is_undefined() || (boolean && !Truthy(operand))) {
    return b.Get(0) != nullptr ? *b.Get(0) : Value::String("");
  }
  return operand;
}

// Filters: safe
base::Result<Value> FilterSafe(Interpreter& in, const std::string& name, const Value& operand,
                               const CallArgs& args, uint32_t offset) {
  SOVAI_RETURN_IF_ERROR(NoArgs(in, name, args, offset));
  return operand;
}

// Filters: tojson
base::Result<Value> FilterTojson(Interpreter& in, const std::string& name, const Value& operand,
                                 const CallArgs& args, uint32_t offset) {
  // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  SOVAI_ASSIGN_OR_RETURN(
      BoundArgs b,
      in.Bind(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, name, offset));
  JsonFormat format;
  format.ensure_ascii = AsBool(b.Get(0), false);
  format.sort_keys = AsBool(b.Get(3), false);
  format.max_bytes = in.limits().max_output_bytes;
  if (const Value* indent = b.Get(1); indent != nullptr && !indent->is_none()) {
    if (IsIntLike(*indent)) {
      const int64_t n = AsInt(*indent);
      if (n > 64) return in.Error(offset, "tojson indent is larger than 64");
      format.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
    } else if (indent->is_string()) {
      format.indent = indent->string_value();
    } else {
      return in.Error(offset, "tojson indent must be an integer, a string or none");
    }
  }
  if (const Value* sep = b.Get(2); sep != nullptr && !sep->is_none()) {
    if (!sep->is_list() || sep->list_items().size() != 2 || !sep->list_items()[0].is_string() ||
        !sep->list_items()[1].is_string()) {
      return in.Error(offset, "tojson separators must be a pair of strings");
    }
    format.separators.emplace(sep->list_items()[0].string_value(),
                              sep->list_items()[1].string_value());
  }
  SOVAI_RETURN_IF_ERROR(in.Charge(operand.weight(), offset));
  auto json = ToJson(operand, format);
  if (!json.ok()) {
    if (json.status().code() == base::StatusCode::kResourceExhausted) {
      return in.LimitError(offset, json.status().message());
    }
    return in.Error(offset, json.status().message());
  }
  return Value::String(std::move(*json));
}

// Filters: length, count
base::Result<Value> FilterLength(Interpreter& in, const std::string& name, const Value& operand,
                                 const CallArgs& args, uint32_t offset) {
  SOVAI_RETURN_IF_ERROR(NoArgs(in, name, args, offset));
  switch (operand.kind()) {
    case Value::Kind::kUndefined:
      return Value::Int(0);
    case Value::Kind::kString:
      return Value::Int(static_cast<int64_t>(CodePointCount(operand.string_value())));
    case Value::Kind::kList:
      return Value::Int(static_cast<int64_t>(operand.list_items().size()));
    case Value::Kind::kDict:
      return Value::Int(static_cast<int64_t>(operand.dict().size()));
    default:
      return in.Error(offset,
                      "object of type '" + std::string(TypeName(operand)) + "' has no len()");
  }
}

// Filters: string
base::Result<Value> FilterString(Interpreter& in, const std::string& name, const Value& operand,
                                 const CallArgs& args, uint32_t offset) {
  SOVAI_RETURN_IF_ERROR(NoArgs(in, name, args, offset));
  if (operand.is_string()) return operand;
  SOVAI_ASSIGN_OR_RETURN(std::string s, in.Str(operand, offset));
  return Value::String(std::move(s));
}

// Filters: upper, lower, capitalize, title, escape, e, wordcount
base::Result<Value> FilterCaseEscapeWordcount(Interpreter& in, const std::string& name,
                                              const Value& operand, const CallArgs& args,
                                              uint32_t offset) {
  SOVAI_RETURN_IF_ERROR(NoArgs(in, name, args, offset));
  SOVAI_ASSIGN_OR_RETURN(std::string s, in.Str(operand, offset));
  if (name == "upper") return Value::String(PyUpper(s));
  if (name == "lower") return Value::String(PyLower(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "title") return Value::String(JinjaTitle(s));
  if (name == "wordcount") {
    int64_t words = 0;
    bool in_word = false;
    for (char32_t cp : DecodeUtf8(s)) {
      const bool w = IsWordChar(cp);
      if (w && !in_word) ++words;
      in_word = w;
    }
    return Value::Int(words);
  }
  return in.MakeString(HtmlEscape(s), offset);
}

// Filters: trim
base::Result<Value> FilterTrim(Interpreter& in, const std::string& name, const Value& operand,
                               const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"chars"}, name, offset));
  SOVAI_ASSIGN_OR_RETURN(std::string s, in.Str(operand, offset));
  std::optional<std::string> chars;
  if (const Value* c = b.Get(0); c != nullptr && !c->is_none()) {
    if (!c->is_string()) return in.Error(offset, "trim chars must be a string");
    chars = c->string_value();
  }
  return Value::String(PyStrip(s, StripSide::kBoth, chars));
}

// Filters: replace
base::Result<Value> FilterReplace(Interpreter& in, const std::string& name, const Value& operand,
                                  const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"old", "new", "count"}, name, offset));
  SOVAI_ASSIGN_OR_RETURN(std::string s, in.Str(operand, offset));
  if (b.Get(0) == nullptr || b.Get(1) == nullptr) {
    return in.Error(offset, "filter 'replace' needs old and new strings");
  }
  SOVAI_ASSIGN_OR_RETURN(std::string old_text, in.Str(*b.Get(0), offset));
  SOVAI_ASSIGN_OR_RETURN(std::string new_text, in.Str(*b.Get(1), offset));
  CallArgs method_args;
  method_args.positional = {Value::String(old_text), Value::String(new_text)};
  if (const Value* c = b.Get(2); c != nullptr && !c->is_none())
    method_args.positional.push_back(*c);
  return in.CallMethod(BoundMethod(Value::String(std::move(s)), "replace"), std::move(method_args),
                       offset);
}

// Filters: center
base::Result<Value> FilterCenter(Interpreter& in, const std::string& name, const Value& operand,
                                 const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"width"}, name, offset));
  SOVAI_ASSIGN_OR_RETURN(std::string s, in.Str(operand, offset));
  CallArgs method_args;
  method_args.positional = {b.Get(0) != nullptr ? *b.Get(0) : Value::Int(80)};
  return in.CallMethod(BoundMethod(Value::String(std::move(s)), "center"), std::move(method_args),
                       offset);
}

// Filters: indent
base::Result<Value> FilterIndent(Interpreter& in, const std::string& name, const Value& operand,
                                 const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"width", "first", "blank"}, name, offset));
  SOVAI_ASSIGN_OR_RETURN(std::string s, in.Str(operand, offset));
  std::string indention = "    ";
  if (const Value* w = b.Get(0)) {
    if (w->is_string()) {
      indention = w->string_value();
    } else if (IsIntLike(*w)) {
      const int64_t n = AsInt(*w);
      if (n > 1024) return in.Error(offset, "indent width is larger than 1024");
      indention.assign(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
    } else {
      return in.Error(offset, "indent width must be an integer or a string");
    }
  }
  const bool first = AsBool(b.Get(1), false);
  const bool blank = AsBool(b.Get(2), false);
  // Jinja appends a newline first so that splitlines() keeps a trailing empty line.
  std::vector<std::string> lines = PySplitLines(s + "\n");
  if (lines.size() * indention.size() + s.size() > in.limits().max_output_bytes) {
    return in.LimitError(offset, "indent result is longer than max_output_bytes");
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (first) rv = indention + rv;
  return Value::String(std::move(rv));
}

// Filters: int
base::Result<Value> FilterInt(Interpreter& in, const std::string& name, const Value& operand,
                              const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"default", "base"}, name, offset));
  const Value fallback = b.Get(0) != nullptr ? *b.Get(0) : Value::Int(0);
  int base = 10;
  if (const Value* bv = b.Get(1)) {
    if (!IsIntLike(*bv) ||
        (AsInt(*bv) != 2 && AsInt(*bv) != 8 && AsInt(*bv) != 10 && AsInt(*bv) != 16)) {
      return in.Error(offset, "int base must be 2, 8, 10 or 16");
    }
    base = static_cast<int>(AsInt(*bv));
  }
  if (operand.is_undefined()) return in.UndefinedError(operand, offset);
  if (IsIntLike(operand)) return Value::Int(AsInt(operand));
  if (operand.is_float()) {
    const double d = operand.float_value();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value::Int(static_cast<int64_t>(d));
  }
  if (operand.is_string()) {
    if (auto i = ParsePyInt(operand.string_value(), base)) return Value::Int(*i);
    if (auto d = ParsePyFloat(operand.string_value());
        d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) {
      return Value::Int(static_cast<int64_t>(*d));
    }
  }
  return fallback;
}

// Filters: float
base::Result<Value> FilterFloat(Interpreter& in, const std::string& name, const Value& operand,
                                const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"default"}, name, offset));
  const Value fallback = b.Get(0) != nullptr ? *b.Get(0) : Value::Float(0.0);
  if (operand.is_undefined()) return in.UndefinedError(operand, offset);
  if (operand.is_number()) return Value::Float(operand.AsDouble());
  if (operand.is_string()) {
    if (auto d = ParsePyFloat(operand.string_value())) return Value::Float(*d);
  }
  return fallback;
}

// Filters: abs
base::Result<Value> FilterAbs(Interpreter& in, const std::string& name, const Value& operand,
                              const CallArgs& args, uint32_t offset) {
  SOVAI_RETURN_IF_ERROR(NoArgs(in, name, args, offset));
  if (operand.is_undefined()) return in.UndefinedError(operand, offset);
  if (IsIntLike(operand)) {
    const int64_t i = AsInt(operand);
    if (i == std::numeric_limits<int64_t>::min()) return in.Error(offset, "integer overflow");
    return Value::Int(i < 0 ? -i : i);
  }
  if (operand.is_float()) return Value::Float(std::fabs(operand.float_value()));
  return in.Error(offset, "bad operand type for abs(): '" + std::string(TypeName(operand)) + "'");
}

// Filters: round
base::Result<Value> FilterRound(Interpreter& in, const std::string& name, const Value& operand,
                                const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"precision", "method"}, name, offset));
  if (operand.is_undefined()) return in.UndefinedError(operand, offset);
  if (!operand.is_number()) {
    return in.Error(offset, "filter 'round' needs a number, not " + std::string(TypeName(operand)));
  }
  int64_t precision = 0;
  if (const Value* p = b.Get(0)) {
    if (!IsIntLike(*p)) return in.Error(offset, "round precision must be an integer");
    precision = std::clamp<int64_t>(AsInt(*p), -300, 300);
  }
  std::string method = "common";
  if (const Value* m = b.Get(1)) {
    if (!m->is_string()) return in.Error(offset, "round method must be a string");
    method = m->string_value();
  }
  if (method != "common" && method != "ceil" && method != "floor") {
    return in.Error(offset, "round method must be 'common', 'ceil' or 'floor'");
  }
  if (IsIntLike(operand) && method == "common" && precision >= 0) return Value::Int(AsInt(operand));
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = operand.AsDouble() * scale;
  double r = method == "ceil"    ? std::ceil(x)
             : method == "floor" ? std::floor(x)
                                 : std::nearbyint(x);
  return Value::Float(r / scale);
}

// Filters: first, last
base::Result<Value> FilterFirstLast(Interpreter& in, const std::string& name, const Value& operand,
                                    const CallArgs& args, uint32_t offset) {
  SOVAI_RETURN_IF_ERROR(NoArgs(in, name, args, offset));
  if (operand.is_list()) {
    const ValueList& items = operand.list_items();
    if (items.empty()) return Value::Undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  SOVAI_ASSIGN_OR_RETURN(ValueList items, in.Iterate(operand, offset));
  if (items.empty()) return Value::Undefined("No " + name + " item, sequence was empty.");
  return name == "first" ? items.front() : items.back();
}

// Filters: list
base::Result<Value> FilterList(Interpreter& in, const std::string& name, const Value& operand,
                               const CallArgs& args, uint32_t offset) {
  SOVAI_RETURN_IF_ERROR(NoArgs(in, name, args, offset));
  if (operand.is_list() && !operand.is_tuple()) return operand;
  SOVAI_ASSIGN_OR_RETURN(ValueList items, in.Iterate(operand, offset));
  return in.MakeList(std::move(items), offset);
}

// Filters: items
base::Result<Value> FilterItems(Interpreter& in, const std::string& name, const Value& operand,
                                const CallArgs& args, uint32_t offset) {
  SOVAI_RETURN_IF_ERROR(NoArgs(in, name, args, offset));
  if (operand.is_undefined()) return Value::List({});
  if (!operand.is_dict()) return in.Error(offset, "Can only get item pairs from a mapping.");
  return in.CallMethod(BoundMethod(operand, "items"), {}, offset);
}

// Filters: reverse
base::Result<Value> FilterReverse(Interpreter& in, const std::string& name, const Value& operand,
                                  const CallArgs& args, uint32_t offset) {
  SOVAI_RETURN_IF_ERROR(NoArgs(in, name, args, offset));
  if (operand.is_string()) {
    std::u32string cps = DecodeUtf8(operand.string_value());
    std::reverse(cps.begin(), cps.end());
    return Value::String(EncodeUtf8(cps));
  }
  SOVAI_ASSIGN_OR_RETURN(ValueList items, in.Iterate(operand, offset));
  std::reverse(items.begin(), items.end());
  return in.MakeList(std::move(items), offset);
}

// Filters: join
base::Result<Value> FilterJoin(Interpreter& in, const std::string& name, const Value& operand,
                               const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"d", "attribute"}, name, offset));
  std::string sep;
  if (const Value* d = b.Get(0)) {
    SOVAI_ASSIGN_OR_RETURN(sep, in.Str(*d, offset));
  }
  SOVAI_ASSIGN_OR_RETURN(ValueList items, in.Iterate(operand, offset));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (const Value* attr = b.Get(1); attr != nullptr && !attr->is_none()) {
      SOVAI_ASSIGN_OR_RETURN(item, AttributePath(in, offset, item, *attr));
    }
    if (i > 0) out += sep;
    if (!AppendPyStr(item, in.limits().max_output_bytes, &out) ||
        out.size() > in.limits().max_output_bytes) {
      return in.LimitError(offset, "join result is longer than max_output_bytes");
    }
  }
  return Value::String(std::move(out));
}

// Filters: attr
base::Result<Value> FilterAttr(Interpreter& in, const std::string& name, const Value& operand,
                               const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"name"}, name, offset));
  if (b.Get(0) == nullptr || !b.Get(0)->is_string()) {
    return in.Error(offset, "filter 'attr' needs an attribute name");
  }
  if (operand.is_undefined()) return in.UndefinedError(operand, offset);
  const std::string& attr = b.Get(0)->string_value();
  // Only Python attributes: methods, and namespace attributes; dict keys are not attributes.
  if (operand.is_namespace()) {
    if (const Value* v = operand.namespace_attrs().Find(attr)) return *v;
  } else if (in.HasMethod(operand, attr)) {
    return Value::Function(std::make_shared<BoundMethod>(operand, attr));
  }
  return Value::Undefined("'" + std::string(TypeName(operand)) + " object' has no attribute '" +
                          attr + "'");
}

// Filters: batch
base::Result<Value> FilterBatch(Interpreter& in, const std::string& name, const Value& operand,
                                const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"linecount", "fill_with"}, name, offset));
  if (b.Get(0) == nullptr || !IsIntLike(*b.Get(0)) || AsInt(*b.Get(0)) <= 0) {
    return in.Error(offset, "filter 'batch' needs a positive line count");
  }
  const size_t size = static_cast<size_t>(AsInt(*b.Get(0)));
  SOVAI_ASSIGN_OR_RETURN(ValueList items, in.Iterate(operand, offset));
  ValueList batches;
  for (size_t i = 0; i < items.size(); i += size) {
    ValueList batch(items.begin() + static_cast<ptrdiff_t>(i),
                    items.begin() + static_cast<ptrdiff_t>(std::min(items.size(), i + size)));
    if (batch.size() < size && b.Get(1) != nullptr && !b.Get(1)->is_none()) {
      batch.resize(size, *b.Get(1));
    }
    batches.push_back(Value::List(std::move(batch)));
  }
  return in.MakeList(std::move(batches), offset);
}

// Filters: sum
base::Result<Value> FilterSum(Interpreter& in, const std::string& name, const Value& operand,
                              const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"attribute", "start"}, name, offset));
  SOVAI_ASSIGN_OR_RETURN(ValueList items, in.Iterate(operand, offset));
  Value total = b.Get(1) != nullptr ? *b.Get(1) : Value::Int(0);
  for (Value item : items) {
    if (const Value* attr = b.Get(0); attr != nullptr && !attr->is_none()) {
      SOVAI_ASSIGN_OR_RETURN(item, AttributePath(in, offset, item, *attr));
    }
    SOVAI_ASSIGN_OR_RETURN(total, in.Binary(BinaryOp::kAdd, total, item, offset));
  }
  return total;
}

// Filters: sort, unique, min, max
base::Result<Value> FilterSortUniqueMinMax(Interpreter& in, const std::string& name,
                                           const Value& operand, const CallArgs& args,
                                           uint32_t offset) {
  const bool is_sort = name == "sort";
  SOVAI_ASSIGN_OR_RETURN(
      BoundArgs b, is_sort ? in.Bind(args, {"reverse", "case_sensitive", "attribute"}, name, offset)
                           : in.Bind(args, {"case_sensitive", "attribute"}, name, offset));
  const bool reverse = is_sort && AsBool(b.Get(0), false);
  const bool case_sensitive = AsBool(b.Get(is_sort ? 1 : 0), false);
  const Value* attribute = b.Get(is_sort ? 2 : 1);
  if (attribute != nullptr && attribute->is_none()) attribute = nullptr;
  SOVAI_ASSIGN_OR_RETURN(ValueList items, in.Iterate(operand, offset));
  // Sort keys: the attribute(s) (comma-separated for sort), case-folded unless case_sensitive.
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const Value& item : items) {
    if (attribute == nullptr) {
      keys.push_back(IgnoreCase(item, case_sensitive));
      continue;
    }
    if (is_sort && attribute->is_string() &&
        attribute->string_value().find(',') != std::string::npos) {
      ValueList parts;
      for (const std::string& a : PySplit(attribute->string_value(), std::string(","), -1)) {
        SOVAI_ASSIGN_OR_RETURN(
            Value v, AttributePath(in, offset, item, Value::String(PyStrip(a, StripSide::kBoth))));
        parts.push_back(IgnoreCase(v, case_sensitive));
      }
      keys.push_back(Value::List(std::move(parts)));
      continue;
    }
    SOVAI_ASSIGN_OR_RETURN(Value v, AttributePath(in, offset, item, *attribute));
    keys.push_back(IgnoreCase(v, case_sensitive));
  }
  SOVAI_RETURN_IF_ERROR(in.Charge(items.size() * 16, offset));
  if (name == "unique") {
    ValueList out;
    std::vector<Value> seen;
    for (size_t i = 0; i < items.size(); ++i) {
      bool dup = false;
      for (const Value& s : seen) {
        SOVAI_ASSIGN_OR_RETURN(dup, in.Eq(s, keys[i], offset));
        if (dup) break;
      }
      if (dup) continue;
      seen.push_back(keys[i]);
      out.push_back(items[i]);
    }
    return in.MakeList(std::move(out), offset);
  }
  std::optional<base::Status> failure;
  auto less = [&](size_t x, size_t y) {
    if (failure) return false;
    std::optional<int> c = jinja::Compare(keys[x], keys[y]);
    if (!c) {
      failure = in.Error(offset, "'<' not supported between instances of '" +
                                     std::string(TypeName(keys[x])) + "' and '" +
                                     std::string(TypeName(keys[y])) + "'");
      return false;
    }
    return *c < 0;
  };
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (is_sort) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return reverse ? less(y, x) : less(x, y); });
    if (failure) return *failure;
    ValueList out;
    out.reserve(items.size());
    for (size_t i : order) out.push_back(items[i]);
    return in.MakeList(std::move(out), offset);
  }
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    // Python's min/max keep the first of equal items.
    if (name == "min" ? less(i, best) : less(best, i)) best = i;
  }
  if (failure) return *failure;
  return items[best];
}

// Filters: dictsort
base::Result<Value> FilterDictsort(Interpreter& in, const std::string& name, const Value& operand,
                                   const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b,
                         in.Bind(args, {"case_sensitive", "by", "reverse"}, name, offset));
  if (!operand.is_dict()) return in.Error(offset, "filter 'dictsort' needs a dict");
  const bool case_sensitive = AsBool(b.Get(0), false);
  bool by_value = false;
  if (const Value* by = b.Get(1)) {
    if (!by->is_string() || (by->string_value() != "key" && by->string_value() != "value")) {
      return in.Error(offset, "You can only sort by either \"key\" or \"value\"");
    }
    by_value = by->string_value() == "value";
  }
  const bool reverse = AsBool(b.Get(2), false);
  std::vector<std::pair<Value, Value>> pairs;
  for (const auto& [k, v] : operand.dict().items()) pairs.emplace_back(Value::String(k), v);
  SOVAI_RETURN_IF_ERROR(in.Charge(pairs.size() * 16, offset));
  std::optional<base::Status> failure;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const auto& x, const auto& y) {
    if (failure) return false;
    const Value& kx = by_value ? x.second : x.first;
    const Value& ky = by_value ? y.second : y.first;
    std::optional<int> c =
        reverse ? jinja::Compare(IgnoreCase(ky, case_sensitive), IgnoreCase(kx, case_sensitive))
                : jinja::Compare(IgnoreCase(kx, case_sensitive), IgnoreCase(ky, case_sensitive));
    if (!c) {
      failure = in.Error(offset, "dictsort: values cannot be compared");
      return false;
    }
    return *c < 0;
  });
  if (failure) return *failure;
  ValueList out;
  for (auto& [k, v] : pairs) out.push_back(Value::Tuple({std::move(k), std::move(v)}));
  return in.MakeList(std::move(out), offset);
}

// Filters: map
base::Result<Value> FilterMap(Interpreter& in, const std::string& name, const Value& operand,
                              const CallArgs& args, uint32_t offset) {
  SOVAI_ASSIGN_OR_RETURN(ValueList items, in.Iterate(operand, offset));
  ValueList out;
  out.reserve(items.size());
  if (args.positional.empty()) {
    const Value* attribute = nullptr;
    const Value* fallback = nullptr;
    for (const auto& [k, v] : args.keyword) {
      if (k == "attribute") {
        attribute = &v;
      } else if (k == "default") {
        fallback = &v;
      } else {
        return in.Error(offset, "filter 'map' got an unexpected keyword argument '" + k + "'");
      }
    }
    if (attribute == nullptr)
      return in.Error(offset, "filter 'map' requires a filter name or attribute=");
    for (const Value& item : items) {
      SOVAI_ASSIGN_OR_RETURN(Value v, AttributePath(in, offset, item, *attribute, fallback));
      out.push_back(std::move(v));
    }
    return in.MakeList(std::move(out), offset);
  }
  if (!args.positional[0].is_string()) return in.Error(offset, "filter 'map' needs a filter name");
  const std::string filter = args.positional[0].string_value();
  if (!IsKnownFilter(filter)) return in.Error(offset, "no filter named '" + filter + "'");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    SOVAI_ASSIGN_OR_RETURN(Value v, in.ApplyFilter(filter, item, rest, offset));
    out.push_back(std::move(v));
  }
  return in.MakeList(std::move(out), offset);
}

// Filters: select, reject, selectattr, rejectattr
base::Result<Value> FilterSelectReject(Interpreter& in, const std::string& name,
                                       const Value& operand, const CallArgs& args,
                                       uint32_t offset) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep_when = name == "select" || name == "selectattr";
  size_t next = 0;
  const Value* attribute = nullptr;
  if (by_attr) {
    if (args.positional.empty())
      return in.Error(offset, "filter '" + name + "' needs an attribute");
    attribute = &args.positional[0];
    next = 1;
  }
  std::optional<std::string> test;
  if (args.positional.size() > next) {
    if (!args.positional[next].is_string())
      return in.Error(offset, "filter '" + name + "' needs a test name");
    test = args.positional[next].string_value();
    if (!IsKnownTest(*test)) return in.Error(offset, "no test named '" + *test + "'");
    ++next;
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<ptrdiff_t>(next),
                              args.positional.end());
  test_args.keyword = args.keyword;
  SOVAI_ASSIGN_OR_RETURN(ValueList items, in.Iterate(operand, offset));
  ValueList out;
  for (const Value& item : items) {
    Value subject = item;
    if (attribute != nullptr) {
      SOVAI_ASSIGN_OR_RETURN(subject, AttributePath(in, offset, item, *attribute));
    }
    bool result = false;
    if (test) {
      SOVAI_ASSIGN_OR_RETURN(result, in.ApplyTest(*test, subject, test_args, offset));
    } else {
      result = Truthy(subject);
    }
    if (result == keep_when) out.push_back(item);
  }
  return in.MakeList(std::move(out), offset);
}

using FilterFn = base::Result<Value> (*)(Interpreter& in, const std::string& name,
                                         const Value& operand, const CallArgs& args,
                                         uint32_t offset);
struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilterTable[] = {
    {"default", &FilterDefault},
    {"d", &FilterDefault},
    {"safe", &FilterSafe},
    {"tojson", &FilterTojson},
    {"length", &FilterLength},
    {"count", &FilterLength},
    {"string", &FilterString},
    {"upper", &FilterCaseEscapeWordcount},
    {"lower", &FilterCaseEscapeWordcount},
    {"capitalize", &FilterCaseEscapeWordcount},
    {"title", &FilterCaseEscapeWordcount},
    {"escape", &FilterCaseEscapeWordcount},
    {"e", &FilterCaseEscapeWordcount},
    {"wordcount", &FilterCaseEscapeWordcount},
    {"trim", &FilterTrim},
    {"replace", &FilterReplace},
    {"center", &FilterCenter},
    {"indent", &FilterIndent},
    {"int", &FilterInt},
    {"float", &FilterFloat},
    {"abs", &FilterAbs},
    {"round", &FilterRound},
    {"first", &FilterFirstLast},
    {"last", &FilterFirstLast},
    {"list", &FilterList},
    {"items", &FilterItems},
    {"reverse", &FilterReverse},
    {"join", &FilterJoin},
    {"attr", &FilterAttr},
    {"batch", &FilterBatch},
    {"sum", &FilterSum},
    {"sort", &FilterSortUniqueMinMax},
    {"unique", &FilterSortUniqueMinMax},
    {"min", &FilterSortUniqueMinMax},
    {"max", &FilterSortUniqueMinMax},
    {"dictsort", &FilterDictsort},
    {"map", &FilterMap},
    {"select", &FilterSelectReject},
    {"reject", &FilterSelectReject},
    {"selectattr", &FilterSelectReject},
    {"rejectattr", &FilterSelectReject},
};

FilterFn FindFilter(std::string_view name) {
  for (const FilterEntry& entry : kFilterTable) {
    if (entry.name == name) return entry.fn;
  }
  return nullptr;
}

}  // namespace

bool Interpreter::HasFilter(std::string_view name) { return FindFilter(name) != nullptr; }

base::Result<Value> Interpreter::ApplyFilter(const std::string& name, const Value& operand,
                                             CallArgs args, uint32_t offset) {
  if (FilterFn fn = FindFilter(name)) return fn(*this, name, operand, args, offset);
  return Error(offset, "filter '" + name + "' is not implemented");
}

}  // namespace sovai::model::jinja
