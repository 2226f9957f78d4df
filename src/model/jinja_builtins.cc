// Tests (`x is name`) and the global functions of the chat-template interpreter, with the
// semantics of Jinja 3 and Python (see docs/formats/chat-templates.md). Filters are in
// jinja_filters.cc, methods of str/dict/list in jinja_methods.cc.
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
