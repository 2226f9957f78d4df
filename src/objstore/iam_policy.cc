// Bucket policies (see iam_policy.h).
#include "objstore/iam_policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/strings.h"
#include "base/time.h"

namespace sovai::objstore {

using nlohmann::json;

enum class IamPolicy::Op : uint8_t {
  kStringEquals,
  kStringEqualsIgnoreCase,
  kStringLike,
  kNumericEquals,
  kNumericLessThan,
  kNumericLessThanEquals,
  kNumericGreaterThan,
  kNumericGreaterThanEquals,
  kDateEquals,
  kDateLessThan,
  kDateLessThanEquals,
  kDateGreaterThan,
  kDateGreaterThanEquals,
  kBool,
  kIpAddress,
  kArnEquals,
  kArnLike,
  kBinaryEquals,
  kNull,
};

struct IamPolicy::Condition {
  Op op;
  bool negated = false;    // StringNotEquals, NotIpAddress, NumericNotEquals, ...
  bool if_exists = false;  // ...IfExists
  enum class Set : uint8_t { kSingle, kForAllValues, kForAnyValue } set = Set::kSingle;
  std::string key;  // normalized (NormalizeKey)
  std::vector<std::string> values;
};

struct IamPolicy::Statement {
  bool allow = false;
  bool not_principal = false;
  std::vector<std::string> principals;  // "*", ids, ARNs
  bool not_action = false;
  std::vector<std::string> actions;
  bool not_resource = false;
  std::vector<std::string> resources;
  std::vector<Condition> conditions;
};

IamPolicy::IamPolicy() = default;
IamPolicy::~IamPolicy() = default;
IamPolicy::IamPolicy(IamPolicy&&) noexcept = default;
IamPolicy& IamPolicy::operator=(IamPolicy&&) noexcept = default;

namespace {

S3Error Malformed(std::string message) {
  return S3Error(S3Code::kMalformedPolicy, std::move(message));
}

// "S3:Prefix" → "s3:prefix", "s3:ExistingObjectTag/Team" → "s3:existingobjecttag/Team".
std::string NormalizeKey(std::string_view key) {
  size_t slash = key.find('/');
  std::string out = base::AsciiToLower(key.substr(0, slash));
  if (slash != std::string_view::npos) out.append(key.substr(slash));
  return out;
}

// Object/array nesting of a JSON text, strings skipped; a linear pass before any DOM is built.
int JsonDepth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

// A string, number or bool as the text IAM compares; nullopt for objects, arrays and null.
std::optional<std::string> Scalar(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_boolean()) return j.get<bool>() ? "true" : "false";
  if (j.is_number_integer()) return std::to_string(j.get<int64_t>());
  if (j.is_number_unsigned()) return std::to_string(j.get<uint64_t>());
  if (j.is_number_float()) return j.dump();
  return std::nullopt;
}

// A string or a non-empty list of strings, at most kMaxPolicyListEntries.
S3Result<std::vector<std::string>> StringList(const json& j, std::string_view what) {
  std::vector<std::string> out;
  if (j.is_string()) {
    out.push_back(j.get<std::string>());
    return out;
  }
  if (!j.is_array() || j.empty()) {
    return Malformed(std::string(what) + " must be a string or a non-empty list of strings");
  }
  if (j.size() > kMaxPolicyListEntries) {
    return Malformed(std::string(what) + " has more than " + std::to_string(kMaxPolicyListEntries) +
                     " entries");
  }
  for (const auto& e : j) {
    if (!e.is_string()) return Malformed(std::string(what) + " entries must be strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

S3Result<std::vector<std::string>> ParsePrincipal(const json& j) {
  if (j.is_string()) {
    if (j.get<std::string>() != "*") {
      return Malformed("Invalid principal in policy: a string Principal must be \"*\"");
    }
    return std::vector<std::string>{"*"};
  }
  if (!j.is_object() || j.empty()) return Malformed("Invalid principal in policy");
  std::vector<std::string> out;
  for (const auto& [kind, ids] : j.items()) {
    if (kind != "AWS" && kind != "CanonicalUser") {
      return Malformed("Invalid principal in policy: principal type '" + kind +
                       "' is not supported (AWS, CanonicalUser)");
    }
    SOVAI_S3_ASSIGN_OR_RETURN(std::vector<std::string> list, StringList(ids, "Principal"));
    for (auto& id : list) {
      if (id.empty()) return Malformed("Invalid principal in policy: an empty id");
      out.push_back(std::move(id));
    }
  }
  return out;
}

struct OpName {
  std::string_view name;
  IamPolicy::Op op;
  bool negated;
};
using Op = IamPolicy::Op;
constexpr OpName kOps[] = {
    {"StringEquals", Op::kStringEquals, false},
    {"StringNotEquals", Op::kStringEquals, true},
    {"StringEqualsIgnoreCase", Op::kStringEqualsIgnoreCase, false},
    {"StringNotEqualsIgnoreCase", Op::kStringEqualsIgnoreCase, true},
    {"StringLike", Op::kStringLike, false},
    {"StringNotLike", Op::kStringLike, true},
    {"NumericEquals", Op::kNumericEquals, false},
    {"NumericNotEquals", Op::kNumericEquals, true},
    {"NumericLessThan", Op::kNumericLessThan, false},
    {"NumericLessThanEquals", Op::kNumericLessThanEquals, false},
    {"NumericGreaterThan", Op::kNumericGreaterThan, false},
    {"NumericGreaterThanEquals", Op::kNumericGreaterThanEquals, false},
    {"DateEquals", Op::kDateEquals, false},
    {"DateNotEquals", Op::kDateEquals, true},
    {"DateLessThan", Op::kDateLessThan, false},
    {"DateLessThanEquals", Op::kDateLessThanEquals, false},
    {"DateGreaterThan", Op::kDateGreaterThan, false},
    {"DateGreaterThanEquals", Op::kDateGreaterThanEquals, false},
    {"Bool", Op::kBool, false},
    {"IpAddress", Op::kIpAddress, false},
    {"NotIpAddress", Op::kIpAddress, true},
    {"ArnEquals", Op::kArnEquals, false},
    {"ArnNotEquals", Op::kArnEquals, true},
    {"ArnLike", Op::kArnLike, false},
    {"ArnNotLike", Op::kArnLike, true},
    {"BinaryEquals", Op::kBinaryEquals, false},
    {"Null", Op::kNull, false},
};

bool IsNumericOp(Op op) { return op >= Op::kNumericEquals && op <= Op::kNumericGreaterThanEquals; }
bool IsDateOp(Op op) { return op >= Op::kDateEquals && op <= Op::kDateGreaterThanEquals; }

std::optional<double> ParseNumber(std::string_view s) {
  if (s.empty() || s.size() > 64) return std::nullopt;
  std::string copy(s);
  char* end = nullptr;
  double v = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// RFC 3339 or seconds since the epoch, as IAM accepts dates; microseconds.
std::optional<int64_t> ParseDate(std::string_view s) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    auto n = base::ParseUint64(s);
    if (!n.ok() || *n > 253402300799ull) return std::nullopt;  // year 9999
    return static_cast<int64_t>(*n) * 1000000;
  }
  auto t = base::ParseRfc3339(s);
  if (!t.ok()) return std::nullopt;
  return *t;
}

// Key families a bucket policy may test.
bool KnownKeyFamily(std::string_view normalized) {
  return normalized.starts_with("aws:") || normalized.starts_with("s3:");
}

S3Result<IamPolicy::Condition> ParseConditionOperator(std::string_view name, std::string key,
                                                      const json& values) {
  IamPolicy::Condition c;
  std::string_view base = name;
  if (base.starts_with("ForAllValues:")) {
    c.set = IamPolicy::Condition::Set::kForAllValues;
    base.remove_prefix(13);
  } else if (base.starts_with("ForAnyValue:")) {
    c.set = IamPolicy::Condition::Set::kForAnyValue;
    base.remove_prefix(12);
  }
  if (base.ends_with("IfExists") && base != "Null") {
    c.if_exists = true;
    base.remove_suffix(8);
  }
  const OpName* found = nullptr;
  for (const auto& o : kOps) {
    if (o.name == base) found = &o;
  }
  if (!found) return Malformed("Invalid Condition type : " + std::string(name));
  c.op = found->op;
  c.negated = found->negated;
  c.key = NormalizeKey(key);
  if (!KnownKeyFamily(c.key)) {
    return Malformed("Policy has an invalid condition key: " + key +
                     " (bucket policies test aws:* and s3:* keys)");
  }
  std::vector<json> list;
  if (values.is_array()) {
    if (values.empty() || values.size() > kMaxPolicyListEntries) {
      return Malformed("Condition " + std::string(name) + " of " + key + " must have 1 to " +
                       std::to_string(kMaxPolicyListEntries) + " values");
    }
    list.assign(values.begin(), values.end());
  } else {
    list.push_back(values);
  }
  for (const auto& v : list) {
    std::optional<std::string> s = Scalar(v);
    if (!s) return Malformed("Condition values must be strings, numbers or booleans: " + key);
    if (IsNumericOp(c.op) && !ParseNumber(*s)) {
      return Malformed("Condition " + std::string(name) + " needs numbers, got '" + *s + "'");
    }
    if (IsDateOp(c.op) && !ParseDate(*s)) {
      return Malformed("Condition " + std::string(name) + " needs dates, got '" + *s + "'");
    }
    // A block that parses contains its own base address.
    if (c.op == Op::kIpAddress && !IpInCidr(s->substr(0, s->find('/')), *s)) {
      return Malformed("Condition " + std::string(name) + " needs CIDR blocks, got '" + *s + "'");
    }
    if ((c.op == Op::kBool || c.op == Op::kNull) && !base::EqualsIgnoreCase(*s, "true") &&
        !base::EqualsIgnoreCase(*s, "false")) {
      return Malformed("Condition " + std::string(name) + " needs true or false, got '" + *s + "'");
    }
    c.values.push_back(std::move(*s));
  }
  return c;
}

S3Result<std::vector<IamPolicy::Condition>> ParseConditions(const json& j) {
  if (!j.is_object()) return Malformed("Condition must be an object of operators");
  std::vector<IamPolicy::Condition> out;
  for (const auto& [name, block] : j.items()) {
    if (!block.is_object() || block.empty()) {
      return Malformed("Condition " + name + " must be an object of condition keys");
    }
    for (const auto& [key, values] : block.items()) {
      SOVAI_S3_ASSIGN_OR_RETURN(IamPolicy::Condition c, ParseConditionOperator(name, key, values));
      out.push_back(std::move(c));
      if (out.size() > kMaxPolicyListEntries) return Malformed("too many conditions");
    }
  }
  return out;
}

// Each resource must name `bucket` or keys in it.
S3Status CheckResource(std::string_view resource, std::string_view bucket) {
  constexpr std::string_view kArn = "arn:aws:s3:::";
  if (!resource.starts_with(kArn)) {
    return Malformed("Policy has invalid resource: " + std::string(resource) +
                     " (expected arn:aws:s3:::" + std::string(bucket) + "[/key])");
  }
  std::string_view rest = resource.substr(kArn.size());
  std::string_view named = rest.substr(0, rest.find('/'));
  if (!IamWildcardMatch(named, bucket, false)) {
    return Malformed("Policy has invalid resource: " + std::string(resource) +
                     " does not name bucket " + std::string(bucket));
  }
  return std::nullopt;
}

S3Result<IamPolicy::Statement> ParseStatement(const json& s, std::string_view bucket) {
  if (!s.is_object()) return Malformed("Each Statement must be an object");
  static constexpr std::string_view kKnown[] = {"Sid",          "Effect",      "Principal",
                                                "NotPrincipal", "Action",      "NotAction",
                                                "Resource",     "NotResource", "Condition"};
  for (const auto& [k, v] : s.items()) {
    if (std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown)) {
      return Malformed("Unknown field " + k + " in a Statement");
    }
  }
  IamPolicy::Statement st;
  auto effect = s.find("Effect");
  if (effect == s.end() || !effect->is_string() || (*effect != "Allow" && *effect != "Deny")) {
    return Malformed("Invalid effect: Effect must be Allow or Deny");
  }
  st.allow = *effect == "Allow";
  auto pick = [&](const char* yes, const char* no, bool* negated) -> const json* {
    auto a = s.find(yes), b = s.find(no);
    if (a != s.end() && b != s.end()) return nullptr;
    if (b != s.end()) {
      *negated = true;
      return &*b;
    }
    return a != s.end() ? &*a : nullptr;
  };
  const json* principal = pick("Principal", "NotPrincipal", &st.not_principal);
  if (!principal) return Malformed("Missing required field Principal (or NotPrincipal)");
  SOVAI_S3_ASSIGN_OR_RETURN(st.principals, ParsePrincipal(*principal));
  const json* action = pick("Action", "NotAction", &st.not_action);
  if (!action) return Malformed("Missing required field Action (or NotAction)");
  SOVAI_S3_ASSIGN_OR_RETURN(st.actions, StringList(*action, "Action"));
  for (const auto& a : st.actions) {
    if (a != "*" && !base::EqualsIgnoreCase(std::string_view(a).substr(0, 3), "s3:")) {
      return Malformed("Policy has invalid action: " + a);
    }
  }
  const json* resource = pick("Resource", "NotResource", &st.not_resource);
  if (!resource) return Malformed("Missing required field Resource (or NotResource)");
  SOVAI_S3_ASSIGN_OR_RETURN(st.resources, StringList(*resource, "Resource"));
  for (const auto& r : st.resources) SOVAI_S3_RETURN_IF_ERROR(CheckResource(r, bucket));
  if (auto c = s.find("Condition"); c != s.end()) {
    SOVAI_S3_ASSIGN_OR_RETURN(st.conditions, ParseConditions(*c));
  }
  return st;
}

bool PrincipalMatches(const std::vector<std::string>& ids, const PolicyRequest& r) {
  for (const auto& id : ids) {
    if (id == "*") return true;
    if (r.anonymous || r.user.empty()) continue;
    if (id == r.user || id == "arn:aws:iam::" + r.user + ":root") return true;
    // arn:aws:iam::<account>:user/<name>
    if (id.size() > r.user.size() + 1 && id.starts_with("arn:") &&
        id.compare(id.size() - r.user.size() - 1, std::string::npos, "/" + r.user) == 0) {
      return true;
    }
  }
  return false;
}

// Resource patterns with IAM's policy variables replaced for this request.
std::string Substitute(std::string_view pattern, const PolicyRequest& r) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '$' && i + 1 < pattern.size() && pattern[i + 1] == '{') {
      size_t end = pattern.find('}', i);
      if (end != std::string_view::npos) {
        std::string name = base::AsciiToLower(pattern.substr(i + 2, end - i - 2));
        std::optional<std::string> value;
        if (name == "aws:username" || name == "aws:userid") value = r.user;
        if (value) {
          out += *value;
          i = end;
          continue;
        }
      }
    }
    out += pattern[i];
  }
  return out;
}

bool Compare(IamPolicy::Op op, std::string_view got, std::string_view want) {
  switch (op) {
    case Op::kStringEquals:
    case Op::kArnEquals:
    case Op::kBinaryEquals:
      return got == want;
    case Op::kStringEqualsIgnoreCase:
      return base::EqualsIgnoreCase(got, want);
    case Op::kStringLike:
    case Op::kArnLike:
      return IamWildcardMatch(want, got, false);
    case Op::kBool:
      return base::EqualsIgnoreCase(got, want);
    case Op::kIpAddress:
      return IpInCidr(got, want);
    case Op::kNull:
      return false;  // handled by the caller
    default:
      break;
  }
  if (IsNumericOp(op)) {
    auto a = ParseNumber(got), b = ParseNumber(want);
    if (!a || !b) return false;
    switch (op) {
      case Op::kNumericEquals:
        return *a == *b;
      case Op::kNumericLessThan:
        return *a < *b;
      case Op::kNumericLessThanEquals:
        return *a <= *b;
      case Op::kNumericGreaterThan:
        return *a > *b;
      default:
        return *a >= *b;
    }
  }
  auto a = ParseDate(got), b = ParseDate(want);
  if (!a || !b) return false;
  switch (op) {
    case Op::kDateEquals:
      return *a == *b;
    case Op::kDateLessThan:
      return *a < *b;
    case Op::kDateLessThanEquals:
      return *a <= *b;
    case Op::kDateGreaterThan:
      return *a > *b;
    default:
      return *a >= *b;
  }
}

bool ConditionHolds(const IamPolicy::Condition& c, const PolicyRequest& r) {
  std::vector<std::string_view> got = r.Get(c.key);
  if (c.op == Op::kNull) {
    bool want_absent = base::EqualsIgnoreCase(c.values.front(), "true");
    return want_absent == got.empty();
  }
  using Set = IamPolicy::Condition::Set;
  if (got.empty()) {
    if (c.if_exists) return true;
    if (c.set == Set::kForAllValues) return true;  // vacuously, as IAM documents
    if (c.set == Set::kForAnyValue) return false;
    return c.negated;
  }
  // One request value satisfies the operator when it matches some policy value (or, negated,
  // matches none).
  auto satisfies = [&](std::string_view v) {
    bool any = std::any_of(c.values.begin(), c.values.end(),
                           [&](const std::string& want) { return Compare(c.op, v, want); });
    return c.negated ? !any : any;
  };
  if (c.set == Set::kForAllValues) return std::all_of(got.begin(), got.end(), satisfies);
  return std::any_of(got.begin(), got.end(), satisfies);
}

bool StatementApplies(const IamPolicy::Statement& s, const PolicyRequest& r) {
  if (PrincipalMatches(s.principals, r) == s.not_principal) return false;
  bool action = std::any_of(s.actions.begin(), s.actions.end(), [&](const std::string& a) {
    return IamWildcardMatch(a, r.action, true);
  });
  if (action == s.not_action) return false;
  bool resource = std::any_of(s.resources.begin(), s.resources.end(), [&](const std::string& p) {
    return IamWildcardMatch(Substitute(p, r), r.resource, false);
  });
  if (resource == s.not_resource) return false;
  return std::all_of(s.conditions.begin(), s.conditions.end(),
                     [&](const IamPolicy::Condition& c) { return ConditionHolds(c, r); });
}

// Whether a condition pins the statement to known callers (AWS's rule for "not public").
bool RestrictsCaller(const IamPolicy::Condition& c) {
  static constexpr std::string_view kFixedKeys[] = {
      "aws:sourcearn",    "aws:sourcevpc",      "aws:sourcevpce",       "aws:sourceaccount",
      "aws:sourceowner",  "aws:principalorgid", "aws:principalaccount", "aws:userid",
      "aws:principalarn", "aws:sourceip"};
  if (c.negated || c.if_exists || c.op == Op::kNull) return false;
  if (std::find(std::begin(kFixedKeys), std::end(kFixedKeys), c.key) == std::end(kFixedKeys)) {
    return false;
  }
  for (const auto& v : c.values) {
    if (v.find_first_of("*?") != std::string::npos) return false;
    if (c.key == "aws:sourceip") {
      size_t slash = v.find('/');
      if (slash != std::string::npos) {
        auto bits = base::ParseUint64(std::string_view(v).substr(slash + 1));
        bool v6 = v.find(':') != std::string::npos;
        if (!bits.ok() || *bits < (v6 ? 32u : 8u)) return false;
      }
    }
  }
  return true;
}

}  // namespace

void PolicyRequest::Set(std::string_view key, std::string value) {
  keys.emplace_back(NormalizeKey(key), std::move(value));
}

std::vector<std::string_view> PolicyRequest::Get(std::string_view key) const {
  std::vector<std::string_view> out;
  const std::string normalized = NormalizeKey(key);
  for (const auto& [k, v] : keys) {
    if (k == normalized) out.push_back(v);
  }
  return out;
}

bool IamWildcardMatch(std::string_view pattern, std::string_view text, bool ignore_case) {
  auto same = [&](char a, char b) {
    return ignore_case ? std::tolower(static_cast<unsigned char>(a)) ==
                             std::tolower(static_cast<unsigned char>(b))
                       : a == b;
  };
  // Iterative with backtracking to the last '*': linear in practice, O(n·m) at worst.
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() &&
        (pattern[p] == '?' || (pattern[p] != '*' && same(pattern[p], text[t])))) {
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

bool IpInCidr(std::string_view address, std::string_view cidr) {
  auto parse = [](std::string_view text, std::array<unsigned char, 16>* out, bool* v6) {
    std::string s(text);
    if (s.size() > 64) return false;
    unsigned char buf[16] = {};
    if (::inet_pton(AF_INET, s.c_str(), buf) == 1) {
      *v6 = false;
      std::memcpy(out->data(), buf, 4);
      return true;
    }
    if (::inet_pton(AF_INET6, s.c_str(), buf) == 1) {
      *v6 = true;
      std::memcpy(out->data(), buf, 16);
      return true;
    }
    return false;
  };
  // The peer address may carry a port: "1.2.3.4:5", "[::1]:80".
  std::string_view host = address;
  if (host.starts_with("[")) {
    host = host.substr(1, host.find(']') - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));
  }
  std::string_view net = cidr.substr(0, cidr.find('/'));
  std::array<unsigned char, 16> a{}, n{};
  bool a6 = false, n6 = false;
  if (!parse(host, &a, &a6) || !parse(net, &n, &n6) || a6 != n6) return false;
  uint64_t bits = a6 ? 128 : 32;
  if (size_t slash = cidr.find('/'); slash != std::string_view::npos) {
    auto b = base::ParseUint64(cidr.substr(slash + 1));
    if (!b.ok() || *b > bits) return false;
    bits = *b;
  }
  for (uint64_t i = 0; i < bits; ++i) {
    unsigned char mask = static_cast<unsigned char>(0x80 >> (i % 8));
    if ((a[i / 8] & mask) != (n[i / 8] & mask)) return false;
  }
  return true;
}

S3Result<IamPolicy> IamPolicy::Parse(std::string_view text, std::string_view bucket) {
  if (text.size() > kMaxPolicyBytes) {
    return Malformed("Policies must be at most " + std::to_string(kMaxPolicyBytes) +
                     " bytes; this one is " + std::to_string(text.size()));
  }
  if (JsonDepth(text) > kMaxPolicyJsonDepth) {
    return Malformed("Policies may nest at most " + std::to_string(kMaxPolicyJsonDepth) +
                     " levels of objects and lists");
  }
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Malformed("Policies must be valid JSON and the first byte must be '{'");
  }
  for (const auto& [k, v] : doc.items()) {
    if (k != "Version" && k != "Id" && k != "Statement") {
      return Malformed("Unknown field " + k + " in the policy");
    }
  }
  if (auto version = doc.find("Version"); version != doc.end()) {
    if (!version->is_string() || (*version != "2012-10-17" && *version != "2008-10-17")) {
      return Malformed("The policy must contain a valid version string (2012-10-17)");
    }
  }
  auto st = doc.find("Statement");
  if (st == doc.end()) return Malformed("Missing required field Statement");
  json statements = st->is_array() ? *st : json::array({*st});
  if (statements.empty() || statements.size() > kMaxPolicyStatements) {
    return Malformed("Statement must have 1 to " + std::to_string(kMaxPolicyStatements) +
                     " entries");
  }
  IamPolicy policy;
  for (const auto& s : statements) {
    SOVAI_S3_ASSIGN_OR_RETURN(Statement parsed, ParseStatement(s, bucket));
    policy.statements_.push_back(std::move(parsed));
  }
  return policy;
}

PolicyEffect IamPolicy::Evaluate(const PolicyRequest& request) const {
  PolicyEffect effect = PolicyEffect::kNone;
  for (const auto& s : statements_) {
    if (!StatementApplies(s, request)) continue;
    if (!s.allow) return PolicyEffect::kDeny;
    effect = PolicyEffect::kAllow;
  }
  return effect;
}

bool IamPolicy::IsPublic() const {
  for (const auto& s : statements_) {
    if (!s.allow) continue;
    bool everyone = s.not_principal ||
                    std::find(s.principals.begin(), s.principals.end(), "*") != s.principals.end();
    if (!everyone) continue;
    if (std::none_of(s.conditions.begin(), s.conditions.end(), RestrictsCaller)) return true;
  }
  return false;
}

}  // namespace sovai::objstore
