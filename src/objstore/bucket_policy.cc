// Bucket policies (see bucket_policy.h).
#include "objstore/bucket_policy.h"

#include <nlohmann/json.hpp>
#include <vector>

namespace sovai::objstore {

using nlohmann::json;

namespace {

bool Wildcard(std::string_view pattern, std::string_view text) {
  // '*' any run, '?' one character; iterative with backtracking to the last '*'.
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::string> StringOrList(const json& j) {
  std::vector<std::string> out;
  if (j.is_string()) out.push_back(j.get<std::string>());
  if (j.is_array()) {
    for (const auto& e : j) {
      if (e.is_string()) out.push_back(e.get<std::string>());
    }
  }
  return out;
}

bool PrincipalMatches(const json& principal, const std::string& user, bool anonymous) {
  std::vector<std::string> ids;
  if (principal.is_string()) {
    ids.push_back(principal.get<std::string>());
  } else if (principal.is_object() && principal.contains("AWS")) {
    ids = StringOrList(principal["AWS"]);
  }
  for (const auto& id : ids) {
    if (id == "*") return true;
    if (anonymous) continue;
    if (id == user) return true;
    // arn:aws:iam::<account>:user/<name>
    if (id.size() > user.size() + 1 &&
        id.compare(id.size() - user.size() - 1, std::string::npos, "/" + user) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

S3Status ValidatePolicy(std::string_view text) {
  json doc = json::parse(text, nullptr, false);
  auto bad = [](std::string m) { return S3Error(S3Code::kMalformedPolicy, std::move(m)); };
  if (!doc.is_object()) return bad("Policies must be valid JSON objects");
  auto st = doc.find("Statement");
  if (st == doc.end()) return bad("Missing required field Statement");
  json statements = st->is_array() ? *st : json::array({*st});
  if (statements.empty() || statements.size() > 100)
    return bad("Statement must have 1 to 100 entries");
  for (const auto& s : statements) {
    if (!s.is_object()) return bad("Each Statement must be an object");
    auto effect = s.find("Effect");
    if (effect == s.end() || !effect->is_string() || (*effect != "Allow" && *effect != "Deny")) {
      return bad("Effect must be Allow or Deny");
    }
    if (!s.contains("Principal")) return bad("Missing required field Principal");
    if (!s.contains("Action") || StringOrList(s["Action"]).empty()) {
      return bad("Missing required field Action");
    }
    if (!s.contains("Resource") || StringOrList(s["Resource"]).empty()) {
      return bad("Missing required field Resource");
    }
    for (const auto& a : StringOrList(s["Action"])) {
      if (a != "*" && a.rfind("s3:", 0) != 0) return bad("Action does not apply: " + a);
    }
  }
  return std::nullopt;
}

std::string EvaluatePolicy(std::string_view text, const std::string& user, bool anonymous,
                           std::string_view action, std::string_view resource) {
  json doc = json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc.contains("Statement")) return "";
  json statements =
      doc["Statement"].is_array() ? doc["Statement"] : json::array({doc["Statement"]});
  std::string verdict;
  for (const auto& s : statements) {
    if (!s.is_object() || !s.contains("Principal")) continue;
    if (!PrincipalMatches(s["Principal"], user, anonymous)) continue;
    bool action_ok = false;
    for (const auto& a : StringOrList(s.value("Action", json()))) {
      action_ok = action_ok || Wildcard(a, action);
    }
    bool resource_ok = false;
    for (const auto& r : StringOrList(s.value("Resource", json()))) {
      resource_ok = resource_ok || Wildcard(r, resource);
    }
    if (!action_ok || !resource_ok) continue;
    std::string effect = s.value("Effect", "");
    // Conditions are not evaluated: a conditional Allow never grants, a conditional Deny always
    // denies (the safe reading of a policy we cannot fully understand).
    if (s.contains("Condition") && effect == "Allow") continue;
    if (effect == "Deny") return "Deny";
    if (effect == "Allow") verdict = "Allow";
  }
  return verdict;
}

}  // namespace sovai::objstore
