#include "base/json.h"

#include <limits>

namespace sovai::base {
namespace {

using nlohmann::json;

// Thrown from the parser callback to stop at the depth limit; never escapes ParseJson.
struct DepthExceeded {};

std::string FieldName(std::string_view field) { return "'" + std::string(field) + "'"; }

// The field's value, nullptr when missing or null; error when `obj` is not an object.
Result<const json*> Lookup(const json& obj, std::string_view field) {
  if (!obj.is_object()) {
    return InvalidArgumentError("expected a JSON object with field " + FieldName(field) + ", got " +
                                obj.type_name());
  }
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return static_cast<const json*>(nullptr);
  return &*it;
}

Status WrongType(std::string_view field, std::string_view expected, const json& value) {
  return InvalidArgumentError("field " + FieldName(field) + " must be " + std::string(expected) +
                              ", got " + value.type_name());
}

Status Missing(std::string_view field) {
  return InvalidArgumentError("missing required field " + FieldName(field));
}

// Converts an optional getter into a required one.
template <typename T>
Result<T> Required(Result<std::optional<T>> value, std::string_view field) {
  if (!value.ok()) return value.status();
  if (!value->has_value()) return Missing(field);
  return std::move(**value);
}

}  // namespace

Result<nlohmann::json> ParseJson(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return InvalidArgumentError("JSON document of " + std::to_string(text.size()) +
                                " bytes exceeds the limit of " + std::to_string(limits.max_bytes) +
                                " bytes");
  }
  const int max_depth = limits.max_depth;
  // `depth` is the number of enclosing containers, so an object/array start at `depth` opens
  // nesting level depth + 1.
  json::parser_callback_t check_depth = [max_depth](int depth, json::parse_event_t event,
                                                    json& /*parsed*/) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth + 1 > max_depth) {
      throw DepthExceeded{};
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check_depth);
  } catch (const DepthExceeded&) {
    return InvalidArgumentError("JSON nests deeper than " + std::to_string(max_depth) + " levels");
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: " prefix;
    // the byte offset says where.
    size_t colon = what.find(": ");
    std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    return InvalidArgumentError("invalid JSON at byte " + std::to_string(e.byte) + ": " + detail);
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("invalid JSON: ") + e.what());
  }
}

Result<std::optional<std::string>> GetOptionalString(const json& obj, std::string_view field) {
  SOVAI_ASSIGN_OR_RETURN(const json* v, Lookup(obj, field));
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return WrongType(field, "a string", *v);
  return std::optional<std::string>(v->get_ref<const std::string&>());
}

Result<std::optional<int64_t>> GetOptionalInt(const json& obj, std::string_view field) {
  SOVAI_ASSIGN_OR_RETURN(const json* v, Lookup(obj, field));
  if (v == nullptr) return std::optional<int64_t>();
  if (v->is_number_unsigned()) {
    auto u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgumentError("field " + FieldName(field) + " is out of the int64 range");
    }
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
  return WrongType(field, "an integer", *v);
}

Result<std::optional<uint64_t>> GetOptionalUint(const json& obj, std::string_view field) {
  SOVAI_ASSIGN_OR_RETURN(const json* v, Lookup(obj, field));
  if (v == nullptr) return std::optional<uint64_t>();
  if (v->is_number_unsigned()) return std::optional<uint64_t>(v->get<uint64_t>());
  if (v->is_number_integer()) {
    return InvalidArgumentError("field " + FieldName(field) + " must not be negative");
  }
  return WrongType(field, "a non-negative integer", *v);
}

Result<std::optional<double>> GetOptionalDouble(const json& obj, std::string_view field) {
  SOVAI_ASSIGN_OR_RETURN(const json* v, Lookup(obj, field));
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return WrongType(field, "a number", *v);
  return std::optional<double>(v->get<double>());
}

Result<std::optional<bool>> GetOptionalBool(const json& obj, std::string_view field) {
  SOVAI_ASSIGN_OR_RETURN(const json* v, Lookup(obj, field));
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return WrongType(field, "a boolean", *v);
  return std::optional<bool>(v->get<bool>());
}

Result<std::string> GetString(const json& obj, std::string_view field) {
  return Required(GetOptionalString(obj, field), field);
}
Result<int64_t> GetInt(const json& obj, std::string_view field) {
  return Required(GetOptionalInt(obj, field), field);
}
Result<uint64_t> GetUint(const json& obj, std::string_view field) {
  return Required(GetOptionalUint(obj, field), field);
}
Result<double> GetDouble(const json& obj, std::string_view field) {
  return Required(GetOptionalDouble(obj, field), field);
}
Result<bool> GetBool(const json& obj, std::string_view field) {
  return Required(GetOptionalBool(obj, field), field);
}

Result<const json*> GetObject(const json& obj, std::string_view field) {
  SOVAI_ASSIGN_OR_RETURN(const json* v, Lookup(obj, field));
  if (v == nullptr) return Missing(field);
  if (!v->is_object()) return WrongType(field, "an object", *v);
  return v;
}

Result<const json*> GetArray(const json& obj, std::string_view field) {
  SOVAI_ASSIGN_OR_RETURN(const json* v, Lookup(obj, field));
  if (v == nullptr) return Missing(field);
  if (!v->is_array()) return WrongType(field, "an array", *v);
  return v;
}

std::string DumpJson(const json& value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

}  // namespace sovai::base
