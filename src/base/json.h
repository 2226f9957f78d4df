// JSON helpers over nlohmann::json that never throw: parsing with size and depth limits, and typed
// field getters whose errors name the field.
//
// Errors are InvalidArgument with a message a client can act on:
//   "invalid JSON at byte 17: syntax error while parsing object - unexpected '}'"
//   "JSON nests deeper than 64 levels"
//   "field 'name' must be a string"          "missing required field 'name'"
// Thread-safety: pure functions over their arguments.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/limits.h"
#include "base/status.h"

namespace sovai::base {

struct JsonLimits {
  size_t max_bytes = kDefaultMaxJsonBytes;
  // Nesting of arrays and objects: "[]" is depth 1, "[[1]]" depth 2; scalars are depth 0.
  int max_depth = kDefaultMaxJsonDepth;
};

// Parses one JSON document (RFC 8259; UTF-8; surrounding whitespace allowed, anything else after
// the value is an error; duplicate keys keep the last value). Errors (InvalidArgument): text
// longer than max_bytes, nesting deeper than max_depth, or malformed JSON, with its byte offset.
Result<nlohmann::json> ParseJson(std::string_view text, const JsonLimits& limits = {});

// Typed getters on an object. Required forms fail when `obj` is not an object, the field is
// missing (or null), or the value has another type. Optional forms return std::nullopt for a
// missing or null field and fail only on a wrong type (or a non-object `obj`).
// Integers: a JSON number without fraction or exponent that fits in int64_t (GetInt) or
// uint64_t (GetUint); 3.0 is not an integer.
Result<std::string> GetString(const nlohmann::json& obj, std::string_view field);
Result<int64_t> GetInt(const nlohmann::json& obj, std::string_view field);
Result<uint64_t> GetUint(const nlohmann::json& obj, std::string_view field);
Result<double> GetDouble(const nlohmann::json& obj, std::string_view field);  // any number
Result<bool> GetBool(const nlohmann::json& obj, std::string_view field);
// The value must be an object / an array. The pointer points into `obj`.
Result<const nlohmann::json*> GetObject(const nlohmann::json& obj, std::string_view field);
Result<const nlohmann::json*> GetArray(const nlohmann::json& obj, std::string_view field);

Result<std::optional<std::string>> GetOptionalString(const nlohmann::json& obj,
                                                     std::string_view field);
Result<std::optional<int64_t>> GetOptionalInt(const nlohmann::json& obj, std::string_view field);
Result<std::optional<uint64_t>> GetOptionalUint(const nlohmann::json& obj, std::string_view field);
Result<std::optional<double>> GetOptionalDouble(const nlohmann::json& obj, std::string_view field);
Result<std::optional<bool>> GetOptionalBool(const nlohmann::json& obj, std::string_view field);

// Serializes without throwing: invalid UTF-8 in strings is replaced by U+FFFD.
std::string DumpJson(const nlohmann::json& value, int indent = -1);

}  // namespace sovai::base
