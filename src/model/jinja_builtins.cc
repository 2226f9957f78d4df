// Filters, tests, methods of str/dict/list, and the global functions of the chat-template
// interpreter, with the semantics of Jinja 3 and Python (see docs/formats/chat-templates.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "base/time.h"
#include "model/jinja_interpreter.h"
#include "model/jinja_strings.h"

namespace sovai::model::jinja {

namespace {

bool IsIntLike(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t AsInt(const Value& v) { return v.is_bool() ? (v.bool_value() ? 1 : 0) : v.int_value(); }

bool IsAsciiAlpha(char32_t cp) { return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'); }
bool IsAsciiDigit(char32_t cp) { return cp >= '0' && cp <= '9'; }
// Letters outside ASCII: the cased scripts of jinja_strings.h plus everything that is neither
// whitespace nor punctuation/symbols of the common blocks (so CJK counts as letters).
bool IsAlphaApprox(char32_t cp) {
  if (cp < 0x80) return IsAsciiAlpha(cp);
  if (IsCased(cp)) return true;
  if (IsPySpace(cp) || cp < 0xC0 || cp == 0xD7 || cp == 0xF7) return false;
  if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) ||
      (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF20) ||
      (cp >= 0x1F000 && cp <= 0x1FAFF)) {
    return false;
  }
  return true;
}
bool IsWordChar(char32_t cp) { return IsAsciiDigit(cp) || cp == '_' || IsAlphaApprox(cp); }

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

const std::string_view kStringMethods[] = {
    "strip",     "lstrip",    "rstrip",  "split",   "rsplit",     "splitlines", "startswith",
    "endswith",  "upper",     "lower",   "title",   "capitalize", "swapcase",   "replace",
    "find",      "rfind",     "index",   "rindex",  "count",      "join",       "isdigit",
    "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace",    "islower",    "isupper",
    "zfill",     "center",    "ljust",   "rjust",   "format",
};
const std::string_view kDictMethods[] = {
    "get", "items", "keys", "values", "copy", "pop", "popitem", "update", "setdefault", "clear",
};
const std::string_view kListMethods[] = {
    "count", "index",  "copy",    "append", "extend", "insert",
    "pop",   "remove", "reverse", "sort",   "clear",
};

template <size_t N>
bool In(const std::string_view (&list)[N], std::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

}  // namespace

bool Interpreter::HasMethod(const Value& receiver, std::string_view name) {
  if (receiver.is_string()) return In(kStringMethods, name);
  if (receiver.is_dict()) return In(kDictMethods, name);
  if (receiver.is_list()) return In(kListMethods, name);
  return false;
}

// --- Methods ---

base::Result<Value> Interpreter::CallMethod(const BoundMethod& method, CallArgs args,
                                            uint32_t offset) {
  const Value& self = method.receiver;
  const std::string& name = method.method;
  const std::string fn = std::string(TypeName(self)) + "." + name;
  auto no_args = [&]() -> base::Status {
    if (!args.positional.empty() || !args.keyword.empty()) {
      return Error(offset, fn + "() takes no arguments");
    }
    return {};
  };
  auto optional_int = [&](const Value* v,
                          std::string_view what) -> base::Result<std::optional<int64_t>> {
    if (v == nullptr || v->is_none()) return std::optional<int64_t>();
    if (!IsIntLike(*v))
      return Error(offset, fn + "() " + std::string(what) + " must be an integer");
    return std::optional<int64_t>(AsInt(*v));
  };

  if (self.is_string()) {
    const std::string& s = self.string_value();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"chars"}, fn, offset));
      std::optional<std::string> chars;
      if (const Value* c = b.Get(0); c != nullptr && !c->is_none()) {
        if (!c->is_string()) return Error(offset, fn + "() arg must be None or str");
        chars = c->string_value();
      }
      const StripSide side = name == "strip"    ? StripSide::kBoth
                             : name == "lstrip" ? StripSide::kLeft
                                                : StripSide::kRight;
      return Value::String(PyStrip(s, side, chars));
    }
    if (name == "split" || name == "rsplit") {
      SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"sep", "maxsplit"}, fn, offset));
      std::optional<std::string> sep;
      if (const Value* v = b.Get(0); v != nullptr && !v->is_none()) {
        if (!v->is_string()) return Error(offset, fn + "() separator must be str or None");
        if (v->string_value().empty()) return Error(offset, "empty separator");
        sep = v->string_value();
      }
      SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> maxsplit, optional_int(b.Get(1), "maxsplit"));
      std::vector<std::string> parts = name == "split" ? PySplit(s, sep, maxsplit.value_or(-1))
                                                       : PyRSplit(s, sep, maxsplit.value_or(-1));
      ValueList items;
      for (std::string& p : parts) items.push_back(Value::String(std::move(p)));
      return MakeList(std::move(items), offset);
    }
    if (name == "splitlines") {
      SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"keepends"}, fn, offset));
      if (const Value* k = b.Get(0); k != nullptr && Truthy(*k)) {
        return UnsupportedError(offset, "str.splitlines(keepends=True)");
      }
      ValueList items;
      for (std::string& p : PySplitLines(s)) items.push_back(Value::String(std::move(p)));
      return MakeList(std::move(items), offset);
    }
    if (name == "startswith" || name == "endswith") {
      SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"prefix", "start", "end"}, fn, offset));
      if (b.Get(0) == nullptr) return Error(offset, fn + "() takes at least 1 argument");
      SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> start, optional_int(b.Get(1), "start"));
      SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> end, optional_int(b.Get(2), "end"));
      int64_t ignored = 0;
      std::string_view range = CodePointRange(s, start, end, &ignored);
      std::vector<std::string> candidates;
      const Value& p = *b.Get(0);
      if (p.is_string()) {
        candidates.push_back(p.string_value());
      } else if (p.is_list()) {
        for (const Value& item : p.list_items()) {
          if (!item.is_string()) return Error(offset, fn + "() tuple items must be str");
          candidates.push_back(item.string_value());
        }
      } else {
        return Error(offset, fn + "() first arg must be str or a tuple of str, not " +
                                 std::string(TypeName(p)));
      }
      for (const std::string& c : candidates) {
        const bool hit = name == "startswith" ? range.substr(0, c.size()) == c
                                              : (range.size() >= c.size() &&
                                                 range.substr(range.size() - c.size()) == c);
        if (hit) return Value::Bool(true);
      }
      return Value::Bool(false);
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
        name == "swapcase") {
      SOVAI_RETURN_IF_ERROR(no_args());
      if (name == "upper") return Value::String(PyUpper(s));
      if (name == "lower") return Value::String(PyLower(s));
      if (name == "title") return Value::String(PyTitle(s));
      if (name == "capitalize") return Value::String(PyCapitalize(s));
      return Value::String(PySwapCase(s));
    }
    if (name == "replace") {
      SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"old", "new", "count"}, fn, offset));
      if (b.Get(0) == nullptr || b.Get(1) == nullptr || !b.Get(0)->is_string() ||
          !b.Get(1)->is_string()) {
        return Error(offset, fn + "() needs two str arguments (old, new)");
      }
      SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> count, optional_int(b.Get(2), "count"));
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
          occurrences > (limits_.max_output_bytes - std::min(limits_.max_output_bytes, s.size())) /
                            (new_text.size() - old_text.size())) {
        return LimitError(offset, "str.replace() result is longer than max_output_bytes");
      }
      return Value::String(PyReplace(s, old_text, new_text, count.value_or(-1)));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" ||
        name == "count") {
      SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"sub", "start", "end"}, fn, offset));
      if (b.Get(0) == nullptr || !b.Get(0)->is_string()) {
        return Error(offset, fn + "() needs a str argument");
      }
      SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> start, optional_int(b.Get(1), "start"));
      SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> end, optional_int(b.Get(2), "end"));
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
        if (name == "index" || name == "rindex") return Error(offset, "substring not found");
        return Value::Int(-1);
      }
      return Value::Int(base_index + static_cast<int64_t>(CodePointCount(range.substr(0, pos))));
    }
    if (name == "join") {
      SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"iterable"}, fn, offset));
      if (b.Get(0) == nullptr) return Error(offset, "str.join() takes exactly one argument");
      SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(*b.Get(0), offset));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string()) {
          return Error(offset, "sequence item " + std::to_string(i) + ": expected str instance, " +
                                   std::string(TypeName(items[i])) + " found");
        }
        if (i > 0) out += s;
        out += items[i].string_value();
        if (out.size() > limits_.max_output_bytes) {
          return LimitError(offset, "str.join() result is longer than max_output_bytes");
        }
      }
      return Value::String(std::move(out));
    }
    if (name.rfind("is", 0) == 0) {
      SOVAI_RETURN_IF_ERROR(no_args());
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
    if (name == "zfill" || name == "center" || name == "ljust" || name == "rjust") {
      SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"width", "fillchar"}, fn, offset));
      if (b.Get(0) == nullptr || !IsIntLike(*b.Get(0))) {
        return Error(offset, fn + "() needs an integer width");
      }
      const int64_t width = AsInt(*b.Get(0));
      if (width > static_cast<int64_t>(limits_.max_output_bytes)) {
        return LimitError(offset, fn + "() width is larger than max_output_bytes");
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
        if (cps.size() != 1) return Error(offset, fn + "() fill character must be one character");
        fill = cps[0];
      }
      return Value::String(Pad(s, width, fill, name == "center" ? 0 : name == "ljust" ? -1 : 1));
    }
    if (name == "format") return UnsupportedError(offset, "str.format()");
  }

  if (self.is_dict()) {
    const ValueDict& d = self.dict();
    if (name == "get") {
      SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"key", "default"}, fn, offset));
      if (b.Get(0) == nullptr) return Error(offset, "dict.get() takes at least 1 argument");
      if (b.Get(0)->is_string()) {
        if (const Value* v = d.Find(b.Get(0)->string_value())) return *v;
      }
      return b.Get(1) != nullptr ? *b.Get(1) : Value::None();
    }
    if (name == "items" || name == "keys" || name == "values") {
      SOVAI_RETURN_IF_ERROR(no_args());
      SOVAI_RETURN_IF_ERROR(Charge(d.size(), offset));
      ValueList items;
      items.reserve(d.size());
      for (const auto& [k, v] : d.items()) {
        if (name == "items") {
          items.push_back(Value::Tuple({Value::String(k), v}));
        } else {
          items.push_back(name == "keys" ? Value::String(k) : v);
        }
      }
      return MakeList(std::move(items), offset);
    }
    if (name == "copy") {
      SOVAI_RETURN_IF_ERROR(no_args());
      return self;
    }
  }

  if (self.is_list()) {
    const ValueList& items = self.list_items();
    if (name == "count" || name == "index") {
      if (args.positional.size() != 1 || !args.keyword.empty()) {
        return Error(offset, fn + "() takes exactly one argument");
      }
      int64_t n = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        SOVAI_ASSIGN_OR_RETURN(bool eq, Eq(items[i], args.positional[0], offset));
        if (!eq) continue;
        if (name == "index") return Value::Int(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") return Error(offset, ToPyRepr(args.positional[0]) + " is not in list");
      return Value::Int(n);
    }
    if (name == "copy") {
      SOVAI_RETURN_IF_ERROR(no_args());
      return self;
    }
  }

  return Error(offset, fn + "() cannot be used: chat templates run in an immutable sandbox and "
                            "cannot change their inputs");
}

// --- Global functions ---

base::Result<Value> Interpreter::CallBuiltin(const BuiltinFunction& fn, CallArgs args,
                                             uint32_t offset) {
  switch (fn.id) {
    case BuiltinFunction::Id::kRange: {
      if (!args.keyword.empty()) return Error(offset, "range() takes no keyword arguments");
      const size_t n = args.positional.size();
      if (n < 1 || n > 3) return Error(offset, "range() takes 1 to 3 arguments");
      for (const Value& v : args.positional) {
        if (v.is_undefined()) return UndefinedError(v, offset);
        if (!IsIntLike(v)) {
          return Error(offset,
                       "range() arguments must be integers, not " + std::string(TypeName(v)));
        }
      }
      int64_t start = 0, stop = 0, step = 1;
      if (n == 1) {
        stop = AsInt(args.positional[0]);
      } else {
        start = AsInt(args.positional[0]);
        stop = AsInt(args.positional[1]);
        if (n == 3) step = AsInt(args.positional[2]);
      }
      if (step == 0) return Error(offset, "range() arg 3 must not be zero");
      // Length without overflow: work in long double-free unsigned arithmetic.
      __int128 span =
          step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
      __int128 abs_step = step > 0 ? step : -static_cast<__int128>(step);
      __int128 length = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
      if (length > limits_.max_range_length) {
        return LimitError(offset, "range() of more than " +
                                      std::to_string(limits_.max_range_length) +
                                      " items (max_range_length)");
      }
      SOVAI_RETURN_IF_ERROR(Charge(static_cast<uint64_t>(length), offset));
      ValueList items;
      items.reserve(static_cast<size_t>(length));
      for (__int128 i = 0; i < length; ++i) {
        items.push_back(Value::Int(static_cast<int64_t>(start + i * step)));
      }
      return MakeList(std::move(items), offset);
    }
    case BuiltinFunction::Id::kNamespace:
    case BuiltinFunction::Id::kDict: {
      const std::string name = fn.name();
      if (args.positional.size() > 1)
        return Error(offset, name + "() takes at most one positional argument");
      ValueDict attrs;
      if (args.positional.size() == 1) {
        const Value& source = args.positional[0];
        if (source.is_dict()) {
          attrs = source.dict();
        } else if (source.is_list()) {
          for (const Value& pair : source.list_items()) {
            SOVAI_ASSIGN_OR_RETURN(ValueList kv, Iterate(pair, offset));
            if (kv.size() != 2 || !kv[0].is_string()) {
              return Error(offset,
                           name + "() expects a mapping or a sequence of (str, value) pairs");
            }
            attrs.Set(kv[0].string_value(), kv[1]);
          }
        } else {
          return Error(offset, name + "() expects a mapping, not " + std::string(TypeName(source)));
        }
      }
      for (auto& [k, v] : args.keyword) attrs.Set(k, std::move(v));
      if (fn.id == BuiltinFunction::Id::kNamespace) {
        Value ns = Value::NewNamespace(std::move(attrs));
        TrackNamespace(ns);
        return ns;
      }
      Value d = Value::Dict(std::move(attrs));
      SOVAI_RETURN_IF_ERROR(CheckValue(d, offset));
      return d;
    }
    case BuiltinFunction::Id::kRaiseException: {
      SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"message"}, "raise_exception", offset));
      std::string message;
      if (b.Get(0) != nullptr) {
        SOVAI_ASSIGN_OR_RETURN(message, Str(*b.Get(0), offset));
      }
      return base::InvalidArgumentError("template raised an exception at " +
                                        compiled_.map.Describe(offset) + ": " + message);
    }
    case BuiltinFunction::Id::kStrftimeNow: {
      SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"format"}, "strftime_now", offset));
      if (b.Get(0) == nullptr || !b.Get(0)->is_string()) {
        return Error(offset, "strftime_now() needs a format string");
      }
      int64_t now = 0;
      if (options_.now_unix_micros) {
        now = options_.now_unix_micros();
      } else {
        now = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
      }
      auto text = FormatStrftime(b.Get(0)->string_value(), now);
      if (!text.ok()) return Error(offset, text.status().message());
      return MakeString(std::move(*text), offset);
    }
  }
  return Error(offset, "unknown function");
}

base::Result<std::string> FormatStrftime(std::string_view format, int64_t unix_micros) {
  static constexpr const char* kMonths[] = {"January",   "February", "March",    "April",
                                            "May",       "June",     "July",     "August",
                                            "September", "October",  "November", "December"};
  static constexpr const char* kDays[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                          "Thursday", "Friday", "Saturday"};
  // Keep the civil conversion in range (years 0000..9999).
  constexpr int64_t kMaxMicros = 253402300799LL * 1'000'000;
  constexpr int64_t kMinMicros = -62167219200LL * 1'000'000;
  unix_micros = std::clamp(unix_micros, kMinMicros, kMaxMicros);
  const base::CivilTime t = base::ToCivil(unix_micros);
  static constexpr int kDaysBefore[] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
  const int yday =
      kDaysBefore[t.month - 1] + t.day + (t.month > 2 && base::IsLeapYear(t.year) ? 1 : 0);
  std::string out;
  char buf[32];
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (i + 1 >= format.size()) return base::InvalidArgumentError("strftime format ends with '%'");
    const char d = format[++i];
    switch (d) {
      case 'Y':
        std::snprintf(buf, sizeof(buf), "%04d", t.year);
        break;
      case 'y':
        std::snprintf(buf, sizeof(buf), "%02d", t.year % 100);
        break;
      case 'm':
        std::snprintf(buf, sizeof(buf), "%02d", t.month);
        break;
      case 'd':
        std::snprintf(buf, sizeof(buf), "%02d", t.day);
        break;
      case 'e':
        std::snprintf(buf, sizeof(buf), "%2d", t.day);
        break;
      case 'H':
        std::snprintf(buf, sizeof(buf), "%02d", t.hour);
        break;
      case 'I':
        std::snprintf(buf, sizeof(buf), "%02d", t.hour % 12 == 0 ? 12 : t.hour % 12);
        break;
      case 'M':
        std::snprintf(buf, sizeof(buf), "%02d", t.minute);
        break;
      case 'S':
        std::snprintf(buf, sizeof(buf), "%02d", t.second);
        break;
      case 'p':
        std::snprintf(buf, sizeof(buf), "%s", t.hour < 12 ? "AM" : "PM");
        break;
      case 'j':
        std::snprintf(buf, sizeof(buf), "%03d", yday);
        break;
      case 'b':
        std::snprintf(buf, sizeof(buf), "%.3s", kMonths[t.month - 1]);
        break;
      case 'B':
        std::snprintf(buf, sizeof(buf), "%s", kMonths[t.month - 1]);
        break;
      case 'a':
        std::snprintf(buf, sizeof(buf), "%.3s", kDays[t.weekday]);
        break;
      case 'A':
        std::snprintf(buf, sizeof(buf), "%s", kDays[t.weekday]);
        break;
      case 'F':
        std::snprintf(buf, sizeof(buf), "%04d-%02d-%02d", t.year, t.month, t.day);
        break;
      case 'T':
        std::snprintf(buf, sizeof(buf), "%02d:%02d:%02d", t.hour, t.minute, t.second);
        break;
      case 'Z':
        std::snprintf(buf, sizeof(buf), "UTC");
        break;
      case 'z':
        std::snprintf(buf, sizeof(buf), "+0000");
        break;
      case '%':
        std::snprintf(buf, sizeof(buf), "%%");
        break;
      default:
        return base::InvalidArgumentError(std::string("strftime directive %") + d +
                                          " is not supported");
    }
    out += buf;
  }
  return out;
}

// --- Filters ---

namespace {

// Jinja's ignore_case postprocessing for sort/dictsort/unique/min/max.
Value IgnoreCase(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return Value::String(PyLower(v.string_value()));
}

}  // namespace

base::Result<Value> Interpreter::ApplyFilter(const std::string& name, const Value& operand,
                                             CallArgs args, uint32_t offset) {
  const std::string fn = name;
  auto require_no_args = [&]() -> base::Status {
    if (!args.positional.empty() || !args.keyword.empty()) {
      return Error(offset, "filter '" + name + "' takes no arguments");
    }
    return {};
  };
  auto as_bool = [](const Value* v, bool fallback) { return v == nullptr ? fallback : Truthy(*v); };
  // Jinja's make_attrgetter: "a.b.0" looked up item by item (keys first, then attributes); a
  // default (not none) replaces an undefined result after each step, as in Jinja.
  auto attribute_path = [&](const Value& item, const Value& path,
                            const Value* fallback = nullptr) -> base::Result<Value> {
    const bool use_fallback = fallback != nullptr && !fallback->is_none();
    if (IsIntLike(path)) {
      SOVAI_ASSIGN_OR_RETURN(Value v, GetItem(item, Value::Int(AsInt(path)), offset));
      return v.is_undefined() && use_fallback ? *fallback : v;
    }
    if (!path.is_string()) return Error(offset, "attribute must be a string or an integer");
    Value v = item;
    for (const std::string& part : PySplit(path.string_value(), std::string("."), -1)) {
      const bool digits =
          !part.empty() && part.size() < 19 &&
          std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      Value key =
          digits ? Value::Int(std::strtoll(part.c_str(), nullptr, 10)) : Value::String(part);
      SOVAI_ASSIGN_OR_RETURN(v, GetItem(v, key, offset));
      if (v.is_undefined() && use_fallback) v = *fallback;
    }
    return v;
  };

  if (name == "default" || name == "d") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"default_value", "boolean"}, fn, offset));
    const bool boolean = as_bool(b.Get(1), false);
    if (operand.is_undefined() || (boolean && !Truthy(operand))) {
      return b.Get(0) != nullptr ? *b.Get(0) : Value::String("");
    }
    return operand;
  }
  if (name == "safe") {
    SOVAI_RETURN_IF_ERROR(require_no_args());
    return operand;
  }
  if (name == "tojson") {
    // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    SOVAI_ASSIGN_OR_RETURN(
        BoundArgs b, Bind(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, fn, offset));
    JsonFormat format;
    format.ensure_ascii = as_bool(b.Get(0), false);
    format.sort_keys = as_bool(b.Get(3), false);
    format.max_bytes = limits_.max_output_bytes;
    if (const Value* indent = b.Get(1); indent != nullptr && !indent->is_none()) {
      if (IsIntLike(*indent)) {
        const int64_t n = AsInt(*indent);
        if (n > 64) return Error(offset, "tojson indent is larger than 64");
        format.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
      } else if (indent->is_string()) {
        format.indent = indent->string_value();
      } else {
        return Error(offset, "tojson indent must be an integer, a string or none");
      }
    }
    if (const Value* sep = b.Get(2); sep != nullptr && !sep->is_none()) {
      if (!sep->is_list() || sep->list_items().size() != 2 || !sep->list_items()[0].is_string() ||
          !sep->list_items()[1].is_string()) {
        return Error(offset, "tojson separators must be a pair of strings");
      }
      format.separators.emplace(sep->list_items()[0].string_value(),
                                sep->list_items()[1].string_value());
    }
    SOVAI_RETURN_IF_ERROR(Charge(operand.weight(), offset));
    auto json = ToJson(operand, format);
    if (!json.ok()) {
      if (json.status().code() == base::StatusCode::kResourceExhausted) {
        return LimitError(offset, json.status().message());
      }
      return Error(offset, json.status().message());
    }
    return Value::String(std::move(*json));
  }
  if (name == "length" || name == "count") {
    SOVAI_RETURN_IF_ERROR(require_no_args());
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
        return Error(offset,
                     "object of type '" + std::string(TypeName(operand)) + "' has no len()");
    }
  }
  if (name == "string") {
    SOVAI_RETURN_IF_ERROR(require_no_args());
    if (operand.is_string()) return operand;
    SOVAI_ASSIGN_OR_RETURN(std::string s, Str(operand, offset));
    return Value::String(std::move(s));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title" ||
      name == "escape" || name == "e" || name == "wordcount") {
    SOVAI_RETURN_IF_ERROR(require_no_args());
    SOVAI_ASSIGN_OR_RETURN(std::string s, Str(operand, offset));
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
    return MakeString(HtmlEscape(s), offset);
  }
  if (name == "trim") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"chars"}, fn, offset));
    SOVAI_ASSIGN_OR_RETURN(std::string s, Str(operand, offset));
    std::optional<std::string> chars;
    if (const Value* c = b.Get(0); c != nullptr && !c->is_none()) {
      if (!c->is_string()) return Error(offset, "trim chars must be a string");
      chars = c->string_value();
    }
    return Value::String(PyStrip(s, StripSide::kBoth, chars));
  }
  if (name == "replace") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"old", "new", "count"}, fn, offset));
    SOVAI_ASSIGN_OR_RETURN(std::string s, Str(operand, offset));
    if (b.Get(0) == nullptr || b.Get(1) == nullptr) {
      return Error(offset, "filter 'replace' needs old and new strings");
    }
    SOVAI_ASSIGN_OR_RETURN(std::string old_text, Str(*b.Get(0), offset));
    SOVAI_ASSIGN_OR_RETURN(std::string new_text, Str(*b.Get(1), offset));
    CallArgs method_args;
    method_args.positional = {Value::String(old_text), Value::String(new_text)};
    if (const Value* c = b.Get(2); c != nullptr && !c->is_none())
      method_args.positional.push_back(*c);
    return CallMethod(BoundMethod(Value::String(std::move(s)), "replace"), std::move(method_args),
                      offset);
  }
  if (name == "center") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"width"}, fn, offset));
    SOVAI_ASSIGN_OR_RETURN(std::string s, Str(operand, offset));
    CallArgs method_args;
    method_args.positional = {b.Get(0) != nullptr ? *b.Get(0) : Value::Int(80)};
    return CallMethod(BoundMethod(Value::String(std::move(s)), "center"), std::move(method_args),
                      offset);
  }
  if (name == "indent") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"width", "first", "blank"}, fn, offset));
    SOVAI_ASSIGN_OR_RETURN(std::string s, Str(operand, offset));
    std::string indention = "    ";
    if (const Value* w = b.Get(0)) {
      if (w->is_string()) {
        indention = w->string_value();
      } else if (IsIntLike(*w)) {
        const int64_t n = AsInt(*w);
        if (n > 1024) return Error(offset, "indent width is larger than 1024");
        indention.assign(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
      } else {
        return Error(offset, "indent width must be an integer or a string");
      }
    }
    const bool first = as_bool(b.Get(1), false);
    const bool blank = as_bool(b.Get(2), false);
    // Jinja appends a newline first so that splitlines() keeps a trailing empty line.
    std::vector<std::string> lines = PySplitLines(s + "\n");
    if (lines.size() * indention.size() + s.size() > limits_.max_output_bytes) {
      return LimitError(offset, "indent result is longer than max_output_bytes");
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
  if (name == "int") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"default", "base"}, fn, offset));
    const Value fallback = b.Get(0) != nullptr ? *b.Get(0) : Value::Int(0);
    int base = 10;
    if (const Value* bv = b.Get(1)) {
      if (!IsIntLike(*bv) ||
          (AsInt(*bv) != 2 && AsInt(*bv) != 8 && AsInt(*bv) != 10 && AsInt(*bv) != 16)) {
        return Error(offset, "int base must be 2, 8, 10 or 16");
      }
      base = static_cast<int>(AsInt(*bv));
    }
    if (operand.is_undefined()) return UndefinedError(operand, offset);
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
  if (name == "float") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"default"}, fn, offset));
    const Value fallback = b.Get(0) != nullptr ? *b.Get(0) : Value::Float(0.0);
    if (operand.is_undefined()) return UndefinedError(operand, offset);
    if (operand.is_number()) return Value::Float(operand.AsDouble());
    if (operand.is_string()) {
      if (auto d = ParsePyFloat(operand.string_value())) return Value::Float(*d);
    }
    return fallback;
  }
  if (name == "abs") {
    SOVAI_RETURN_IF_ERROR(require_no_args());
    if (operand.is_undefined()) return UndefinedError(operand, offset);
    if (IsIntLike(operand)) {
      const int64_t i = AsInt(operand);
      if (i == std::numeric_limits<int64_t>::min()) return Error(offset, "integer overflow");
      return Value::Int(i < 0 ? -i : i);
    }
    if (operand.is_float()) return Value::Float(std::fabs(operand.float_value()));
    return Error(offset, "bad operand type for abs(): '" + std::string(TypeName(operand)) + "'");
  }
  if (name == "round") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"precision", "method"}, fn, offset));
    if (operand.is_undefined()) return UndefinedError(operand, offset);
    if (!operand.is_number()) {
      return Error(offset, "filter 'round' needs a number, not " + std::string(TypeName(operand)));
    }
    int64_t precision = 0;
    if (const Value* p = b.Get(0)) {
      if (!IsIntLike(*p)) return Error(offset, "round precision must be an integer");
      precision = std::clamp<int64_t>(AsInt(*p), -300, 300);
    }
    std::string method = "common";
    if (const Value* m = b.Get(1)) {
      if (!m->is_string()) return Error(offset, "round method must be a string");
      method = m->string_value();
    }
    if (method != "common" && method != "ceil" && method != "floor") {
      return Error(offset, "round method must be 'common', 'ceil' or 'floor'");
    }
    if (IsIntLike(operand) && method == "common" && precision >= 0)
      return Value::Int(AsInt(operand));
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = operand.AsDouble() * scale;
    double r = method == "ceil"    ? std::ceil(x)
               : method == "floor" ? std::floor(x)
                                   : std::nearbyint(x);
    return Value::Float(r / scale);
  }
  if (name == "first" || name == "last") {
    SOVAI_RETURN_IF_ERROR(require_no_args());
    if (operand.is_list()) {
      const ValueList& items = operand.list_items();
      if (items.empty()) return Value::Undefined("No " + name + " item, sequence was empty.");
      return name == "first" ? items.front() : items.back();
    }
    SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(operand, offset));
    if (items.empty()) return Value::Undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    SOVAI_RETURN_IF_ERROR(require_no_args());
    if (operand.is_list() && !operand.is_tuple()) return operand;
    SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(operand, offset));
    return MakeList(std::move(items), offset);
  }
  if (name == "items") {
    SOVAI_RETURN_IF_ERROR(require_no_args());
    if (operand.is_undefined()) return Value::List({});
    if (!operand.is_dict()) return Error(offset, "Can only get item pairs from a mapping.");
    return CallMethod(BoundMethod(operand, "items"), {}, offset);
  }
  if (name == "reverse") {
    SOVAI_RETURN_IF_ERROR(require_no_args());
    if (operand.is_string()) {
      std::u32string cps = DecodeUtf8(operand.string_value());
      std::reverse(cps.begin(), cps.end());
      return Value::String(EncodeUtf8(cps));
    }
    SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(operand, offset));
    std::reverse(items.begin(), items.end());
    return MakeList(std::move(items), offset);
  }
  if (name == "join") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"d", "attribute"}, fn, offset));
    std::string sep;
    if (const Value* d = b.Get(0)) {
      SOVAI_ASSIGN_OR_RETURN(sep, Str(*d, offset));
    }
    SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(operand, offset));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      Value item = items[i];
      if (const Value* attr = b.Get(1); attr != nullptr && !attr->is_none()) {
        SOVAI_ASSIGN_OR_RETURN(item, attribute_path(item, *attr));
      }
      if (i > 0) out += sep;
      if (!AppendPyStr(item, limits_.max_output_bytes, &out) ||
          out.size() > limits_.max_output_bytes) {
        return LimitError(offset, "join result is longer than max_output_bytes");
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "attr") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"name"}, fn, offset));
    if (b.Get(0) == nullptr || !b.Get(0)->is_string()) {
      return Error(offset, "filter 'attr' needs an attribute name");
    }
    if (operand.is_undefined()) return UndefinedError(operand, offset);
    const std::string& attr = b.Get(0)->string_value();
    // Only Python attributes: methods, and namespace attributes; dict keys are not attributes.
    if (operand.is_namespace()) {
      if (const Value* v = operand.namespace_attrs().Find(attr)) return *v;
    } else if (HasMethod(operand, attr)) {
      return Value::Function(std::make_shared<BoundMethod>(operand, attr));
    }
    return Value::Undefined("'" + std::string(TypeName(operand)) + " object' has no attribute '" +
                            attr + "'");
  }
  if (name == "batch") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"linecount", "fill_with"}, fn, offset));
    if (b.Get(0) == nullptr || !IsIntLike(*b.Get(0)) || AsInt(*b.Get(0)) <= 0) {
      return Error(offset, "filter 'batch' needs a positive line count");
    }
    const size_t size = static_cast<size_t>(AsInt(*b.Get(0)));
    SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(operand, offset));
    ValueList batches;
    for (size_t i = 0; i < items.size(); i += size) {
      ValueList batch(items.begin() + static_cast<ptrdiff_t>(i),
                      items.begin() + static_cast<ptrdiff_t>(std::min(items.size(), i + size)));
      if (batch.size() < size && b.Get(1) != nullptr && !b.Get(1)->is_none()) {
        batch.resize(size, *b.Get(1));
      }
      batches.push_back(Value::List(std::move(batch)));
    }
    return MakeList(std::move(batches), offset);
  }
  if (name == "sum") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b, Bind(args, {"attribute", "start"}, fn, offset));
    SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(operand, offset));
    Value total = b.Get(1) != nullptr ? *b.Get(1) : Value::Int(0);
    for (Value item : items) {
      if (const Value* attr = b.Get(0); attr != nullptr && !attr->is_none()) {
        SOVAI_ASSIGN_OR_RETURN(item, attribute_path(item, *attr));
      }
      SOVAI_ASSIGN_OR_RETURN(total, Binary(BinaryOp::kAdd, total, item, offset));
    }
    return total;
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    const bool is_sort = name == "sort";
    SOVAI_ASSIGN_OR_RETURN(
        BoundArgs b, is_sort ? Bind(args, {"reverse", "case_sensitive", "attribute"}, fn, offset)
                             : Bind(args, {"case_sensitive", "attribute"}, fn, offset));
    const bool reverse = is_sort && as_bool(b.Get(0), false);
    const bool case_sensitive = as_bool(b.Get(is_sort ? 1 : 0), false);
    const Value* attribute = b.Get(is_sort ? 2 : 1);
    if (attribute != nullptr && attribute->is_none()) attribute = nullptr;
    SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(operand, offset));
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
          SOVAI_ASSIGN_OR_RETURN(Value v,
                                 attribute_path(item, Value::String(PyStrip(a, StripSide::kBoth))));
          parts.push_back(IgnoreCase(v, case_sensitive));
        }
        keys.push_back(Value::List(std::move(parts)));
        continue;
      }
      SOVAI_ASSIGN_OR_RETURN(Value v, attribute_path(item, *attribute));
      keys.push_back(IgnoreCase(v, case_sensitive));
    }
    SOVAI_RETURN_IF_ERROR(Charge(items.size() * 16, offset));
    if (name == "unique") {
      ValueList out;
      std::vector<Value> seen;
      for (size_t i = 0; i < items.size(); ++i) {
        bool dup = false;
        for (const Value& s : seen) {
          SOVAI_ASSIGN_OR_RETURN(dup, Eq(s, keys[i], offset));
          if (dup) break;
        }
        if (dup) continue;
        seen.push_back(keys[i]);
        out.push_back(items[i]);
      }
      return MakeList(std::move(out), offset);
    }
    std::optional<base::Status> failure;
    auto less = [&](size_t x, size_t y) {
      if (failure) return false;
      std::optional<int> c = jinja::Compare(keys[x], keys[y]);
      if (!c) {
        failure = Error(offset, "'<' not supported between instances of '" +
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
      return MakeList(std::move(out), offset);
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
  if (name == "dictsort") {
    SOVAI_ASSIGN_OR_RETURN(BoundArgs b,
                           Bind(args, {"case_sensitive", "by", "reverse"}, fn, offset));
    if (!operand.is_dict()) return Error(offset, "filter 'dictsort' needs a dict");
    const bool case_sensitive = as_bool(b.Get(0), false);
    bool by_value = false;
    if (const Value* by = b.Get(1)) {
      if (!by->is_string() || (by->string_value() != "key" && by->string_value() != "value")) {
        return Error(offset, "You can only sort by either \"key\" or \"value\"");
      }
      by_value = by->string_value() == "value";
    }
    const bool reverse = as_bool(b.Get(2), false);
    std::vector<std::pair<Value, Value>> pairs;
    for (const auto& [k, v] : operand.dict().items()) pairs.emplace_back(Value::String(k), v);
    SOVAI_RETURN_IF_ERROR(Charge(pairs.size() * 16, offset));
    std::optional<base::Status> failure;
    std::stable_sort(pairs.begin(), pairs.end(), [&](const auto& x, const auto& y) {
      if (failure) return false;
      const Value& kx = by_value ? x.second : x.first;
      const Value& ky = by_value ? y.second : y.first;
      std::optional<int> c =
          reverse ? jinja::Compare(IgnoreCase(ky, case_sensitive), IgnoreCase(kx, case_sensitive))
                  : jinja::Compare(IgnoreCase(kx, case_sensitive), IgnoreCase(ky, case_sensitive));
      if (!c) {
        failure = Error(offset, "dictsort: values cannot be compared");
        return false;
      }
      return *c < 0;
    });
    if (failure) return *failure;
    ValueList out;
    for (auto& [k, v] : pairs) out.push_back(Value::Tuple({std::move(k), std::move(v)}));
    return MakeList(std::move(out), offset);
  }
  if (name == "map") {
    SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(operand, offset));
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
          return Error(offset, "filter 'map' got an unexpected keyword argument '" + k + "'");
        }
      }
      if (attribute == nullptr)
        return Error(offset, "filter 'map' requires a filter name or attribute=");
      for (const Value& item : items) {
        SOVAI_ASSIGN_OR_RETURN(Value v, attribute_path(item, *attribute, fallback));
        out.push_back(std::move(v));
      }
      return MakeList(std::move(out), offset);
    }
    if (!args.positional[0].is_string()) return Error(offset, "filter 'map' needs a filter name");
    const std::string filter = args.positional[0].string_value();
    if (!IsKnownFilter(filter)) return Error(offset, "no filter named '" + filter + "'");
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : items) {
      SOVAI_ASSIGN_OR_RETURN(Value v, ApplyFilter(filter, item, rest, offset));
      out.push_back(std::move(v));
    }
    return MakeList(std::move(out), offset);
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_when = name == "select" || name == "selectattr";
    size_t next = 0;
    const Value* attribute = nullptr;
    if (by_attr) {
      if (args.positional.empty()) return Error(offset, "filter '" + name + "' needs an attribute");
      attribute = &args.positional[0];
      next = 1;
    }
    std::optional<std::string> test;
    if (args.positional.size() > next) {
      if (!args.positional[next].is_string())
        return Error(offset, "filter '" + name + "' needs a test name");
      test = args.positional[next].string_value();
      if (!IsKnownTest(*test)) return Error(offset, "no test named '" + *test + "'");
      ++next;
    }
    CallArgs test_args;
    test_args.positional.assign(args.positional.begin() + static_cast<ptrdiff_t>(next),
                                args.positional.end());
    test_args.keyword = args.keyword;
    SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(operand, offset));
    ValueList out;
    for (const Value& item : items) {
      Value subject = item;
      if (attribute != nullptr) {
        SOVAI_ASSIGN_OR_RETURN(subject, attribute_path(item, *attribute));
      }
      bool result = false;
      if (test) {
        SOVAI_ASSIGN_OR_RETURN(result, ApplyTest(*test, subject, test_args, offset));
      } else {
        result = Truthy(subject);
      }
      if (result == keep_when) out.push_back(item);
    }
    return MakeList(std::move(out), offset);
  }
  return Error(offset, "filter '" + name + "' is not implemented");
}

// --- Tests ---

base::Result<bool> Interpreter::ApplyTest(const std::string& name, const Value& v, CallArgs args,
                                          uint32_t offset) {
  auto no_args = [&]() -> base::Status {
    if (!args.positional.empty() || !args.keyword.empty()) {
      return Error(offset, "test '" + name + "' takes no arguments");
    }
    return {};
  };
  auto one_arg = [&]() -> base::Result<Value> {
    if (args.positional.size() + args.keyword.size() != 1) {
      return Error(offset, "test '" + name + "' takes exactly one argument");
    }
    return args.positional.empty() ? args.keyword[0].second : args.positional[0];
  };
  if (name == "defined" || name == "undefined") {
    SOVAI_RETURN_IF_ERROR(no_args());
    return v.is_undefined() == (name == "undefined");
  }
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.bool_value();
  if (name == "false") return v.is_bool() && !v.bool_value();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  // Undefined iterates as empty and has len() and __getitem__ in Jinja, so it is iterable and a
  // sequence; it also has __call__, so it is callable.
  if (name == "iterable" || name == "sequence") {
    return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  }
  if (name == "callable") return v.is_callable() || v.is_undefined();
  if (name == "escaped") return false;
  if (name == "filter" || name == "test") {
    return v.is_string() &&
           (name == "filter" ? IsKnownFilter(v.string_value()) : IsKnownTest(v.string_value()));
  }
  if (name == "lower" || name == "upper") {
    SOVAI_ASSIGN_OR_RETURN(std::string s, Str(v, offset));
    SOVAI_ASSIGN_OR_RETURN(Value r, CallMethod(BoundMethod(Value::String(std::move(s)),
                                                           name == "lower" ? "islower" : "isupper"),
                                               {}, offset));
    return r.bool_value();
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    Value divisor = Value::Int(2);
    if (name == "divisibleby") {
      SOVAI_ASSIGN_OR_RETURN(divisor, one_arg());
    } else {
      SOVAI_RETURN_IF_ERROR(no_args());
    }
    SOVAI_ASSIGN_OR_RETURN(Value rem, Binary(BinaryOp::kMod, v, divisor, offset));
    const bool zero = !Truthy(rem);
    return name == "odd" ? !zero : zero;
  }
  if (name == "sameas") {
    SOVAI_ASSIGN_OR_RETURN(Value other, one_arg());
    if (v.kind() != other.kind()) return false;
    switch (v.kind()) {
      case Value::Kind::kNone:
      case Value::Kind::kUndefined:
        return true;
      case Value::Kind::kBool:
        return v.bool_value() == other.bool_value();
      case Value::Kind::kInt:
        return v.int_value() == other.int_value();
      case Value::Kind::kString:
        return &v.string_value() == &other.string_value();
      case Value::Kind::kList:
        return &v.list_items() == &other.list_items();
      case Value::Kind::kDict:
        return &v.dict() == &other.dict();
      case Value::Kind::kNamespace:
        return &v.namespace_attrs() == &other.namespace_attrs();
      case Value::Kind::kCallable:
        return &v.callable() == &other.callable();
      default:
        return false;
    }
  }
  if (name == "in") {
    SOVAI_ASSIGN_OR_RETURN(Value seq, one_arg());
    return Contains(seq, v, offset);
  }
  static constexpr std::pair<std::string_view, CompareOp> kComparisons[] = {
      {"eq", CompareOp::kEq}, {"equalto", CompareOp::kEq},     {"ne", CompareOp::kNe},
      {"lt", CompareOp::kLt}, {"lessthan", CompareOp::kLt},    {"le", CompareOp::kLe},
      {"gt", CompareOp::kGt}, {"greaterthan", CompareOp::kGt}, {"ge", CompareOp::kGe},
  };
  for (const auto& [test, op] : kComparisons) {
    if (test == name) {
      SOVAI_ASSIGN_OR_RETURN(Value other, one_arg());
      return Compare(op, v, other, offset);
    }
  }
  return Error(offset, "test '" + name + "' is not implemented");
}

}  // namespace sovai::model::jinja
