// POST policy documents (see post_policy.h).
#include "objstore/post_policy.h"

#include <algorithm>

#include "base/json.h"
#include "base/strings.h"
#include "base/time.h"
#include "objstore/limits.h"

namespace sovai::objstore {

using nlohmann::json;

namespace {

S3Error InvalidPolicy(std::string what) {
  return S3Error(S3Code::kInvalidPolicyDocument, "Invalid Policy: " + std::move(what));
}

S3Error NotAccordingToPolicy(std::string what) {
  return S3Error(S3Code::kAccessDenied, "Invalid according to Policy: " + std::move(what));
}

// A field reference "$key" → "key".
S3Result<std::string> FieldName(const json& j, const std::string& text) {
  if (!j.is_string()) return InvalidPolicy("Invalid Condition: " + text);
  std::string name = j.get<std::string>();
  if (name.size() < 2 || name[0] != '$') {
    return InvalidPolicy("Invalid Condition: " + text + " (a field is named \"$field\")");
  }
  return base::AsciiToLower(std::string_view(name).substr(1));
}

// A content-length-range bound: a non-negative integer, or a string of one.
std::optional<uint64_t> Bound(const json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0)
    return static_cast<uint64_t>(j.get<int64_t>());
  if (j.is_string()) {
    if (auto v = base::ParseUint64(j.get<std::string>()); v.ok()) return *v;
  }
  return std::nullopt;
}

S3Status ParseCondition(const json& c, PostPolicy* policy) {
  const std::string text = base::DumpJson(c);
  if (c.is_object()) {
    if (c.empty()) return InvalidPolicy("Invalid Condition: {} names no field");
    for (const auto& [name, value] : c.items()) {
      if (!value.is_string()) return InvalidPolicy("Invalid Condition: " + text);
      policy->conditions.push_back({.kind = PostCondition::Kind::kEq,
                                    .field = base::AsciiToLower(name),
                                    .value = value.get<std::string>(),
                                    .text = text});
    }
    return std::nullopt;
  }
  if (!c.is_array() || c.size() != 3 || !c[0].is_string()) {
    return InvalidPolicy("Invalid Condition: " + text);
  }
  const std::string op = base::AsciiToLower(c[0].get<std::string>());
  if (op == "content-length-range") {
    auto min = Bound(c[1]), max = Bound(c[2]);
    if (!min || !max || *min > *max) {
      return InvalidPolicy("Invalid content-length-range: " + text +
                           " (two non-negative integers, min <= max)");
    }
    policy->length_range = std::make_pair(*min, *max);
    return std::nullopt;
  }
  PostCondition out;
  if (op == "eq") {
    out.kind = PostCondition::Kind::kEq;
  } else if (op == "starts-with") {
    out.kind = PostCondition::Kind::kStartsWith;
  } else {
    return InvalidPolicy("Invalid Condition: " + text + " (unknown operator '" + op +
                         "'; eq, starts-with and content-length-range are)");
  }
  SOVAI_S3_ASSIGN_OR_RETURN(out.field, FieldName(c[1], text));
  if (!c[2].is_string()) return InvalidPolicy("Invalid Condition: " + text);
  out.value = c[2].get<std::string>();
  out.text = text;
  policy->conditions.push_back(std::move(out));
  return std::nullopt;
}

// Form fields no condition needs to name: AWS's list, and the bucket (the URL names it).
bool ExemptField(std::string_view name) {
  return name == "policy" || name == "bucket" || name == "x-amz-signature" || name == "file" ||
         name.starts_with("x-ignore-");
}

}  // namespace

S3Result<PostPolicy> ParsePostPolicy(std::string_view text) {
  if (text.size() > kMaxPostPolicyBytes) {
    return InvalidPolicy("the policy is larger than " + std::to_string(kMaxPostPolicyBytes) +
                         " bytes");
  }
  // A valid policy nests three deep (document, conditions, a condition).
  auto doc = base::ParseJson(text, {.max_bytes = kMaxPostPolicyBytes, .max_depth = 4});
  if (!doc.ok()) return InvalidPolicy("the policy is not valid JSON: " + doc.status().message());
  if (!doc->is_object()) return InvalidPolicy("the policy must be a JSON object");
  PostPolicy policy;
  auto expiration = doc->find("expiration");
  if (expiration == doc->end()) return InvalidPolicy("Policy missing expiration.");
  if (!expiration->is_string()) return InvalidPolicy("Invalid Policy expiration.");
  auto when = base::ParseRfc3339(expiration->get<std::string>());
  if (!when.ok()) {
    return InvalidPolicy("Invalid 'expiration' value: '" + expiration->get<std::string>() +
                         "' (ISO 8601, e.g. 2026-12-01T12:00:00.000Z)");
  }
  policy.expiration_micros = *when;
  auto conditions = doc->find("conditions");
  if (conditions == doc->end()) return InvalidPolicy("Policy missing conditions.");
  if (!conditions->is_array()) return InvalidPolicy("'conditions' must be a list");
  if (conditions->size() > kMaxPostPolicyConditions) {
    return InvalidPolicy("more than " + std::to_string(kMaxPostPolicyConditions) + " conditions");
  }
  for (const auto& [name, value] : doc->items()) {
    if (name != "expiration" && name != "conditions") {
      return InvalidPolicy("Unexpected field '" + name + "' in the policy");
    }
  }
  for (const json& c : *conditions) SOVAI_S3_RETURN_IF_ERROR(ParseCondition(c, &policy));
  return policy;
}

S3Status CheckPostPolicy(const PostPolicy& policy, const PostFields& fields, int64_t now_micros) {
  if (now_micros >= policy.expiration_micros) return NotAccordingToPolicy("Policy expired.");
  auto value_of = [&](const std::string& name) -> std::string_view {
    for (const auto& [k, v] : fields) {
      if (k == name) return v;
    }
    return {};
  };
  for (const PostCondition& c : policy.conditions) {
    std::string_view v = value_of(c.field);
    const bool holds = c.kind == PostCondition::Kind::kEq ? v == c.value : v.starts_with(c.value);
    if (!holds) return NotAccordingToPolicy("Policy Condition failed: " + c.text);
  }
  for (const auto& [name, value] : fields) {
    if (ExemptField(name)) continue;
    const bool named = std::any_of(policy.conditions.begin(), policy.conditions.end(),
                                   [&](const PostCondition& c) { return c.field == name; });
    if (!named) return NotAccordingToPolicy("Extra input fields: " + name);
  }
  return std::nullopt;
}

}  // namespace sovai::objstore
