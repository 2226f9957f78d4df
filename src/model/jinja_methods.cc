// The methods of str, dict and list in the chat-template interpreter (`"text".strip()`), one
// function per method or family, found through one table per receiver type; semantics of
// Python (see docs/formats/chat-templates.md).
#include <algorithm>

#include "model/jinja_interpreter.h"
#include "model/jinja_strings.h"

namespace sovai::model::jinja {

namespace {

// Byte offset of code point `index` in valid UTF-8 (clamped to the end).
size_t ByteOffsetOfCodePoint(std::string_view s, int64_t index) {
  size_t i = 0;
  int64_t n = 0;
  while (i < s.size() && n < index) {
    ++i;
    while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
    ++n;
  }
  return i;
}

// The part of `s` between code points start and end (Python's optional start/end arguments of
// find/count/startswith, with negative values counting from the end).
std::string_view CodePointRange(std::string_view s, std::optional<int64_t> start,
                                std::optional<int64_t> end, int64_t* start_index) {
  const int64_t n = static_cast<int64_t>(CodePointCount(s));
  auto clamp = [n](int64_t v) {
    if (v < 0) v = std::max<int64_t>(0, v + n);
    return std::min(v, n);
  };
  const int64_t b = start ? clamp(*start) : 0;
  const int64_t e = end ? clamp(*end) : n;
  *start_index = b;
  if (e <= b) return s.substr(ByteOffsetOfCodePoint(s, b), 0);
  const size_t bb = ByteOffsetOfCodePoint(s, b);
  const size_t eb = ByteOffsetOfCodePoint(s, e);
  return s.substr(bb, eb - bb);
}

// Python's str.center/ljust/rjust.
std::string Pad(std::string_view s, int64_t width, char32_t fill, int where /*-1 l, 0 c, 1 r*/) {
  const int64_t len = static_cast<int64_t>(CodePointCount(s));
  if (width <= len) return std::string(s);
  const int64_t total = width - len;
  int64_t left = 0;
  if (where == 0) {
    // CPython: left = total / 2 + (total & width & 1).
    left = total / 2 + (total & width & 1);
  } else if (where == 1) {
    left = total;
  }
  std::string fill_utf8;
  base::AppendUtf8(&fill_utf8, fill);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill_utf8;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill_utf8;
  return out;
}

base::Status NoArgs(Interpreter& in, const std::string& fn, const CallArgs& args, uint32_t offset) {
  if (!args.positional.empty() || !args.keyword.empty()) {
    return in.Error(offset, fn + "() takes no arguments");
  }
  return {};
}

base::Result<std::optional<int64_t>> OptionalInt(Interpreter& in, const std::string& fn,
                                                 uint32_t offset, const Value* v,
                                                 std::string_view what) {
  if (v == nullptr || v->is_none()) return std::optional<int64_t>();
  if (!IsIntLike(*v)) {
    return in.Error(offset, fn + "() " + std::string(what) + " must be an integer");
  }
  return std::optional<int64_t>(AsInt(*v));
}

// `fn` is "str.strip" and the like, for messages.
using MethodFn = base::Result<Value> (*)(Interpreter& in, const Value& self,
                                         const std::string& name, const std::string& fn,
                                         const CallArgs& args, uint32_t offset);
struct MethodEntry {
  std::string_view name;
  MethodFn fn;
};

// string: strip lstrip rstrip
base::Result<Value> StrStrip(Interpreter& in, const Value& self, const std::string& name,
                             const std::string& fn, const CallArgs& args, uint32_t offset) {
  const std::string& s = self.string_value();
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"chars"}, fn, offset));
  std::optional<std::string> chars;
  if (const Value* c = b.Get(0); c != nullptr && !c->is_none()) {
    if (!c->is_string()) return in.Error(offset, fn + "() arg must be None or str");
    chars = c->string_value();
  }
  const StripSide side = name == "strip"    ? StripSide::kBoth
                         : name == "lstrip" ? StripSide::kLeft
                                            : StripSide::kRight;
  return Value::String(PyStrip(s, side, chars));
}

// string: split rsplit
base::Result<Value> StrSplit(Interpreter& in, const Value& self, const std::string& name,
                             const std::string& fn, const CallArgs& args, uint32_t offset) {
  const std::string& s = self.string_value();
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"sep", "maxsplit"}, fn, offset));
  std::optional<std::string> sep;
  if (const Value* v = b.Get(0); v != nullptr && !v->is_none()) {
    if (!v->is_string()) return in.Error(offset, fn + "() separator must be str or None");
    if (v->string_value().empty()) return in.Error(offset, "empty separator");
    sep = v->string_value();
  }
  SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> maxsplit,
                         OptionalInt(in, fn, offset, b.Get(1), "maxsplit"));
  std::vector<std::string> parts = name == "split" ? PySplit(s, sep, maxsplit.value_or(-1))
                                                   : PyRSplit(s, sep, maxsplit.value_or(-1));
  ValueList items;
  for (std::string& p : parts) items.push_back(Value::String(std::move(p)));
  return in.MakeList(std::move(items), offset);
}

// string: splitlines
base::Result<Value> StrSplitLines(Interpreter& in, const Value& self, const std::string& name,
                                  const std::string& fn, const CallArgs& args, uint32_t offset) {
  const std::string& s = self.string_value();
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"keepends"}, fn, offset));
  if (const Value* k = b.Get(0); k != nullptr && Truthy(*k)) {
    return in.UnsupportedError(offset, "str.splitlines(keepends=True)");
  }
  ValueList items;
  for (std::string& p : PySplitLines(s)) items.push_back(Value::String(std::move(p)));
  return in.MakeList(std::move(items), offset);
}

// string: startswith endswith
base::Result<Value> StrStartsOrEndsWith(Interpreter& in, const Value& self, const std::string& name,
                                        const std::string& fn, const CallArgs& args,
                                        uint32_t offset) {
  const std::string& s = self.string_value();
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"prefix", "start", "end"}, fn, offset));
  if (b.Get(0) == nullptr) return in.Error(offset, fn + "() takes at least 1 argument");
  SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> start,
                         OptionalInt(in, fn, offset, b.Get(1), "start"));
  SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> end, OptionalInt(in, fn, offset, b.Get(2), "end"));
  int64_t ignored = 0;
  std::string_view range = CodePointRange(s, start, end, &ignored);
  std::vector<std::string> candidates;
  const Value& p = *b.Get(0);
  if (p.is_string()) {
    candidates.push_back(p.string_value());
  } else if (p.is_list()) {
    for (const Value& item : p.list_items()) {
      if (!item.is_string()) return in.Error(offset, fn + "() tuple items must be str");
      candidates.push_back(item.string_value());
    }
  } else {
    return in.Error(
        offset, fn + "() first arg must be str or a tuple of str, not " + std::string(TypeName(p)));
  }
  for (const std::string& c : candidates) {
    const bool hit = name == "startswith"
                         ? range.substr(0, c.size()) == c
                         : (range.size() >= c.size() && range.substr(range.size() - c.size()) == c);
    if (hit) return Value::Bool(true);
  }
  return Value::Bool(false);
}

// string: upper lower title capitalize swapcase
base::Result<Value> StrCase(Interpreter& in, const Value& self, const std::string& name,
                            const std::string& fn, const CallArgs& args, uint32_t offset) {
  const std::string& s = self.string_value();
  SOVAI_RETURN_IF_ERROR(NoArgs(in, fn, args, offset));
  if (name == "upper") return Value::String(PyUpper(s));
  if (name == "lower") return Value::String(PyLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  return Value::String(PySwapCase(s));
}

// string: replace
base::Result<Value> StrReplace(Interpreter& in, const Value& self, const std::string& name,
                               const std::string& fn, const CallArgs& args, uint32_t offset) {
  const std::string& s = self.string_value();
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"old", "new", "count"}, fn, offset));
  if (b.Get(0) == nullptr || b.Get(1) == nullptr || !b.Get(0)->is_string() ||
      !b.Get(1)->is_string()) {
    return in.Error(offset, fn + "() needs two str arguments (old, new)");
  }
  SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> count,
                         OptionalInt(in, fn, offset, b.Get(2), "count"));
  const std::string& old_text = b.Get(0)->string_value();
  const std::string& new_text = b.Get(1)->string_value();
  // Bound the result before building it.
  uint64_t occurrences = 0;
  if (old_text.empty()) {
    occurrences = CodePointCount(s) + 1;
  } else {
    for (size_t i = s.find(old_text); i != std::string::npos;
         i = s.find(old_text, i + old_text.size())) {
      ++occurrences;
    }
  }
  if (count && *count >= 0)
    occurrences = std::min<uint64_t>(occurrences, static_cast<uint64_t>(*count));
  if (new_text.size() > old_text.size() &&
      occurrences >
          (in.limits().max_output_bytes - std::min(in.limits().max_output_bytes, s.size())) /
              (new_text.size() - old_text.size())) {
    return in.LimitError(offset, "str.replace() result is longer than max_output_bytes");
  }
  return Value::String(PyReplace(s, old_text, new_text, count.value_or(-1)));
}

// string: find rfind index rindex count
base::Result<Value> StrSearch(Interpreter& in, const Value& self, const std::string& name,
                              const std::string& fn, const CallArgs& args, uint32_t offset) {
  const std::string& s = self.string_value();
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"sub", "start", "end"}, fn, offset));
  if (b.Get(0) == nullptr || !b.Get(0)->is_string()) {
    return in.Error(offset, fn + "() needs a str argument");
  }
  SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> start,
                         OptionalInt(in, fn, offset, b.Get(1), "start"));
  SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> end, OptionalInt(in, fn, offset, b.Get(2), "end"));
  int64_t base_index = 0;
  std::string_view range = CodePointRange(s, start, end, &base_index);
  const std::string& sub = b.Get(0)->string_value();
  if (name == "count") {
    if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(range)) + 1);
    int64_t n = 0;
    for (size_t i = range.find(sub); i != std::string_view::npos;
         i = range.find(sub, i + sub.size()))
      ++n;
    return Value::Int(n);
  }
  const bool reverse = name == "rfind" || name == "rindex";
  size_t pos = reverse ? range.rfind(sub) : range.find(sub);
  if (pos == std::string_view::npos) {
    if (name == "index" || name == "rindex") return in.Error(offset, "substring not found");
    return Value::Int(-1);
  }
  return Value::Int(base_index + static_cast<int64_t>(CodePointCount(range.substr(0, pos))));
}

// string: join
base::Result<Value> StrJoin(Interpreter& in, const Value& self, const std::string& name,
                            const std::string& fn, const CallArgs& args, uint32_t offset) {
  const std::string& s = self.string_value();
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"iterable"}, fn, offset));
  if (b.Get(0) == nullptr) return in.Error(offset, "str.join() takes exactly one argument");
  SOVAI_ASSIGN_OR_RETURN(ValueList items, in.Iterate(*b.Get(0), offset));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return in.Error(offset, "sequence item " + std::to_string(i) + ": expected str instance, " +
                                  std::string(TypeName(items[i])) + " found");
    }
    if (i > 0) out += s;
    out += items[i].string_value();
    if (out.size() > in.limits().max_output_bytes) {
      return in.LimitError(offset, "str.join() result is longer than max_output_bytes");
    }
  }
  return Value::String(std::move(out));
}

// string: isdigit isdecimal isnumeric isalpha isalnum isspace islower isupper
base::Result<Value> StrClassify(Interpreter& in, const Value& self, const std::string& name,
                                const std::string& fn, const CallArgs& args, uint32_t offset) {
  const std::string& s = self.string_value();
  SOVAI_RETURN_IF_ERROR(NoArgs(in, fn, args, offset));
  std::u32string cps = DecodeUtf8(s);
  if (cps.empty()) return Value::Bool(false);
  if (name == "islower" || name == "isupper") {
    bool cased = false;
    for (char32_t cp : cps) {
      if (!IsCased(cp)) continue;
      cased = true;
      const bool lower = ToLower(cp) == cp;
      if ((name == "islower") != lower) return Value::Bool(false);
    }
    return Value::Bool(cased);
  }
  for (char32_t cp : cps) {
    bool ok = false;
    if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") {
      ok = IsAsciiDigit(cp);
    } else if (name == "isalpha") {
      ok = IsAlphaApprox(cp);
    } else if (name == "isalnum") {
      ok = IsAlphaApprox(cp) || IsAsciiDigit(cp);
    } else if (name == "isspace") {
      ok = IsPySpace(cp);
    }
    if (!ok) return Value::Bool(false);
  }
  return Value::Bool(true);
}

// string: zfill center ljust rjust
base::Result<Value> StrPad(Interpreter& in, const Value& self, const std::string& name,
                           const std::string& fn, const CallArgs& args, uint32_t offset) {
  const std::string& s = self.string_value();
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"width", "fillchar"}, fn, offset));
  if (b.Get(0) == nullptr || !IsIntLike(*b.Get(0))) {
    return in.Error(offset, fn + "() needs an integer width");
  }
  const int64_t width = AsInt(*b.Get(0));
  if (width > static_cast<int64_t>(in.limits().max_output_bytes)) {
    return in.LimitError(offset, fn + "() width is larger than max_output_bytes");
  }
  if (name == "zfill") {
    std::string body = s;
    std::string sign;
    if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
      sign = body.substr(0, 1);
      body.erase(0, 1);
    }
    const int64_t len = static_cast<int64_t>(CodePointCount(s));
    if (width <= len) return self;
    return Value::String(sign + std::string(static_cast<size_t>(width - len), '0') + body);
  }
  char32_t fill = ' ';
  if (const Value* f = b.Get(1)) {
    std::u32string cps = f->is_string() ? DecodeUtf8(f->string_value()) : std::u32string();
    if (cps.size() != 1) return in.Error(offset, fn + "() fill character must be one character");
    fill = cps[0];
  }
  return Value::String(Pad(s, width, fill, name == "center" ? 0 : name == "ljust" ? -1 : 1));
}

// string: format
base::Result<Value> StrFormat(Interpreter& in, const Value& self, const std::string& name,
                              const std::string& fn, const CallArgs& args, uint32_t offset) {
  return in.UnsupportedError(offset, "str.format()");
}

// dict: get
base::Result<Value> DictGet(Interpreter& in, const Value& self, const std::string& name,
                            const std::string& fn, const CallArgs& args, uint32_t offset) {
  const ValueDict& d = self.dict();
  SOVAI_ASSIGN_OR_RETURN(BoundArgs b, in.Bind(args, {"key", "default"}, fn, offset));
  if (b.Get(0) == nullptr) return in.Error(offset, "dict.get() takes at least 1 argument");
  if (b.Get(0)->is_string()) {
    if (const Value* v = d.Find(b.Get(0)->string_value())) return *v;
  }
  return b.Get(1) != nullptr ? *b.Get(1) : Value::None();
}

// dict: items keys values
base::Result<Value> DictViews(Interpreter& in, const Value& self, const std::string& name,
                              const std::string& fn, const CallArgs& args, uint32_t offset) {
  const ValueDict& d = self.dict();
  SOVAI_RETURN_IF_ERROR(NoArgs(in, fn, args, offset));
  SOVAI_RETURN_IF_ERROR(in.Charge(d.size(), offset));
  ValueList items;
  items.reserve(d.size());
  for (const auto& [k, v] : d.items()) {
    if (name == "items") {
      items.push_back(Value::Tuple({Value::String(k), v}));
    } else {
      items.push_back(name == "keys" ? Value::String(k) : v);
    }
  }
  return in.MakeList(std::move(items), offset);
}

// list: count index
base::Result<Value> ListSearch(Interpreter& in, const Value& self, const std::string& name,
                               const std::string& fn, const CallArgs& args, uint32_t offset) {
  const ValueList& items = self.list_items();
  if (args.positional.size() != 1 || !args.keyword.empty()) {
    return in.Error(offset, fn + "() takes exactly one argument");
  }
  int64_t n = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    SOVAI_ASSIGN_OR_RETURN(bool eq, in.Eq(items[i], args.positional[0], offset));
    if (!eq) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++n;
  }
  if (name == "index") return in.Error(offset, ToPyRepr(args.positional[0]) + " is not in list");
  return Value::Int(n);
}

// dict, list: copy (values are immutable, so the copy is the value)
base::Result<Value> Copy(Interpreter& in, const Value& self, const std::string& name,
                         const std::string& fn, const CallArgs& args, uint32_t offset) {
  SOVAI_RETURN_IF_ERROR(NoArgs(in, fn, args, offset));
  return self;
}

base::Result<Value> Immutable(Interpreter& in, const Value& self, const std::string& name,
                              const std::string& fn, const CallArgs& args, uint32_t offset) {
  return in.Error(offset, fn + "() cannot be used: chat templates run in an immutable sandbox and "
                               "cannot change their inputs");
}

constexpr MethodEntry kStringMethods[] = {
    {"strip", &StrStrip},
    {"lstrip", &StrStrip},
    {"rstrip", &StrStrip},
    {"split", &StrSplit},
    {"rsplit", &StrSplit},
    {"splitlines", &StrSplitLines},
    {"startswith", &StrStartsOrEndsWith},
    {"endswith", &StrStartsOrEndsWith},
    {"upper", &StrCase},
    {"lower", &StrCase},
    {"title", &StrCase},
    {"capitalize", &StrCase},
    {"swapcase", &StrCase},
    {"replace", &StrReplace},
    {"find", &StrSearch},
    {"rfind", &StrSearch},
    {"index", &StrSearch},
    {"rindex", &StrSearch},
    {"count", &StrSearch},
    {"join", &StrJoin},
    {"isdigit", &StrClassify},
    {"isdecimal", &StrClassify},
    {"isnumeric", &StrClassify},
    {"isalpha", &StrClassify},
    {"isalnum", &StrClassify},
    {"isspace", &StrClassify},
    {"islower", &StrClassify},
    {"isupper", &StrClassify},
    {"zfill", &StrPad},
    {"center", &StrPad},
    {"ljust", &StrPad},
    {"rjust", &StrPad},
    {"format", &StrFormat},
};
constexpr MethodEntry kDictMethods[] = {
    {"get", &DictGet},
    {"items", &DictViews},
    {"keys", &DictViews},
    {"values", &DictViews},
    {"copy", &Copy},
    // Methods that would change the value; they exist so that the error says why.
    {"pop", &Immutable},
    {"popitem", &Immutable},
    {"update", &Immutable},
    {"setdefault", &Immutable},
    {"clear", &Immutable},
};
constexpr MethodEntry kListMethods[] = {
    {"count", &ListSearch},
    {"index", &ListSearch},
    {"copy", &Copy},
    // Methods that would change the value; they exist so that the error says why.
    {"append", &Immutable},
    {"extend", &Immutable},
    {"insert", &Immutable},
    {"pop", &Immutable},
    {"remove", &Immutable},
    {"reverse", &Immutable},
    {"sort", &Immutable},
    {"clear", &Immutable},
};

template <size_t N>
MethodFn Find(const MethodEntry (&table)[N], std::string_view name) {
  for (const MethodEntry& entry : table) {
    if (entry.name == name) return entry.fn;
  }
  return nullptr;
}

MethodFn FindMethod(const Value& receiver, std::string_view name) {
  if (receiver.is_string()) return Find(kStringMethods, name);
  if (receiver.is_dict()) return Find(kDictMethods, name);
  if (receiver.is_list()) return Find(kListMethods, name);
  return nullptr;
}

}  // namespace

bool Interpreter::HasMethod(const Value& receiver, std::string_view name) {
  return FindMethod(receiver, name) != nullptr;
}

base::Result<Value> Interpreter::CallMethod(const BoundMethod& method, CallArgs args,
                                            uint32_t offset) {
  const std::string fn = std::string(TypeName(method.receiver)) + "." + method.method;
  MethodFn call = FindMethod(method.receiver, method.method);
  if (call == nullptr) call = &Immutable;
  return call(*this, method.receiver, method.method, fn, args, offset);
}

}  // namespace sovai::model::jinja
