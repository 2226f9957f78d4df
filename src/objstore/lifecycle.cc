// Lifecycle rules: the XML body and the arithmetic (see lifecycle.h).
#include "objstore/lifecycle.h"

#include <algorithm>
#include <set>

#include "base/strings.h"
#include "base/time.h"
#include "objstore/internal/xml_dom.h"

namespace sovai::objstore {

using namespace xml_dom;  // NOLINT(google-build-using-namespace): the parsing vocabulary

namespace {

S3Error Invalid(std::string message) {
  return S3Error(S3Code::kInvalidArgument, std::move(message));
}

S3Result<int64_t> ParseCount(const std::string& text, std::string_view element, int64_t min) {
  auto n = base::ParseInt64(TrimXmlSpace(text));
  if (!n.ok()) return Malformed("<" + std::string(element) + "> must be an integer");
  if (*n < min || *n > 1000000) {
    return Invalid("'" + std::string(element) + "' must be a positive integer");
  }
  return *n;
}

S3Result<uint64_t> ParseSize(const std::string& text, std::string_view element) {
  auto n = base::ParseUint64(TrimXmlSpace(text));
  if (!n.ok()) return Malformed("<" + std::string(element) + "> must be a non-negative integer");
  return *n;
}

// The conditions of a <Filter> or its <And> (`in_and`: several allowed, Tag repeated).
S3Status ParseConditions(pugi::xml_node node, std::string_view path, bool in_and,
                         LifecycleFilter* filter, bool* and_seen) {
  int conditions = 0;
  std::optional<std::string> prefix, greater, less;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(node, path, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    ++conditions;
    if (name == "Prefix") return ReadOnce(c, path, &prefix);
    if (name == "ObjectSizeGreaterThan") return ReadOnce(c, path, &greater);
    if (name == "ObjectSizeLessThan") return ReadOnce(c, path, &less);
    if (name == "Tag") {
      SOVAI_S3_ASSIGN_OR_RETURN(Tag tag, ParseTagElement(c, std::string(path) + "/Tag"));
      filter->tags.push_back(std::move(tag));
      return std::nullopt;
    }
    if (name == "And" && !in_and && and_seen != nullptr && !*and_seen) {
      *and_seen = true;
      return ParseConditions(c, std::string(path) + "/And", true, filter, nullptr);
    }
    return Unexpected(c, path);
  }));
  if (!in_and && conditions > 1) {
    return Malformed("<Filter> takes one condition; combine several in <And>");
  }
  if (prefix) filter->prefix = *prefix;
  if (greater) {
    SOVAI_S3_ASSIGN_OR_RETURN(filter->size_greater_than,
                              ParseSize(*greater, "ObjectSizeGreaterThan"));
  }
  if (less) {
    SOVAI_S3_ASSIGN_OR_RETURN(filter->size_less_than, ParseSize(*less, "ObjectSizeLessThan"));
  }
  if (filter->size_greater_than && filter->size_less_than &&
      *filter->size_greater_than >= *filter->size_less_than) {
    return Invalid("ObjectSizeGreaterThan must be less than ObjectSizeLessThan");
  }
  return std::nullopt;
}

S3Status ParseExpiration(pugi::xml_node node, LifecycleRule* rule) {
  constexpr std::string_view kPath = "Rule/Expiration";
  std::optional<std::string> days, date, marker;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(node, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "Days") return ReadOnce(c, kPath, &days);
    if (name == "Date") return ReadOnce(c, kPath, &date);
    if (name == "ExpiredObjectDeleteMarker") return ReadOnce(c, kPath, &marker);
    return Unexpected(c, kPath);
  }));
  if (days && date) return Malformed("<Expiration> takes <Days> or <Date>, not both");
  if (marker && (days || date)) {
    return Malformed("<ExpiredObjectDeleteMarker> cannot be specified with <Days> or <Date>");
  }
  if (!days && !date && !marker)
    return Malformed("<Expiration> needs <Days>, <Date> or <ExpiredObjectDeleteMarker>");
  if (days) {
    SOVAI_S3_ASSIGN_OR_RETURN(int64_t n, ParseCount(*days, "Days", 1));
    rule->expiration_days = static_cast<int>(n);
  }
  if (date) {
    auto t = base::ParseRfc3339(TrimXmlSpace(*date));
    if (!t.ok()) return Invalid("'Date' must be an ISO 8601 date");
    if (*t % kDayMicros != 0) return Invalid("'Date' must be at midnight GMT");
    rule->expiration_date_micros = *t;
  }
  if (marker) {
    std::string_view m = TrimXmlSpace(*marker);
    if (m != "true" && m != "false")
      return Malformed("<ExpiredObjectDeleteMarker> must be true or false");
    rule->expired_object_delete_marker = m == "true";
  }
  return std::nullopt;
}

S3Result<LifecycleRule> ParseRule(pugi::xml_node node) {
  constexpr std::string_view kPath = "LifecycleConfiguration/Rule";
  LifecycleRule rule;
  std::optional<std::string> id, status, legacy_prefix;
  bool filter_seen = false, expiration_seen = false, noncurrent_seen = false, abort_seen = false;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(node, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "ID") return ReadOnce(c, kPath, &id);
    if (name == "Status") return ReadOnce(c, kPath, &status);
    if (name == "Prefix") return ReadOnce(c, kPath, &legacy_prefix);
    if (name == "Filter" && !filter_seen) {
      filter_seen = true;
      bool and_seen = false;
      return ParseConditions(c, "Rule/Filter", false, &rule.filter, &and_seen);
    }
    if (name == "Expiration" && !expiration_seen) {
      expiration_seen = true;
      return ParseExpiration(c, &rule);
    }
    if (name == "NoncurrentVersionExpiration" && !noncurrent_seen) {
      noncurrent_seen = true;
      std::optional<std::string> days, newer;
      SOVAI_S3_RETURN_IF_ERROR(
          ForEachChild(c, "Rule/NoncurrentVersionExpiration", [&](pugi::xml_node e) -> S3Status {
            std::string_view n = LocalName(e);
            if (n == "NoncurrentDays") return ReadOnce(e, "NoncurrentVersionExpiration", &days);
            if (n == "NewerNoncurrentVersions") {
              return ReadOnce(e, "NoncurrentVersionExpiration", &newer);
            }
            return Unexpected(e, "Rule/NoncurrentVersionExpiration");
          }));
      if (!days) return Missing("NoncurrentDays", "NoncurrentVersionExpiration");
      SOVAI_S3_ASSIGN_OR_RETURN(int64_t d, ParseCount(*days, "NoncurrentDays", 1));
      rule.noncurrent_days = static_cast<int>(d);
      if (newer) {
        SOVAI_S3_ASSIGN_OR_RETURN(int64_t k, ParseCount(*newer, "NewerNoncurrentVersions", 1));
        rule.newer_noncurrent_versions = static_cast<int>(k);
      }
      return std::nullopt;
    }
    if (name == "AbortIncompleteMultipartUpload" && !abort_seen) {
      abort_seen = true;
      std::optional<std::string> days;
      SOVAI_S3_RETURN_IF_ERROR(
          ForEachChild(c, "Rule/AbortIncompleteMultipartUpload", [&](pugi::xml_node e) -> S3Status {
            if (LocalName(e) == "DaysAfterInitiation") {
              return ReadOnce(e, "AbortIncompleteMultipartUpload", &days);
            }
            return Unexpected(e, "Rule/AbortIncompleteMultipartUpload");
          }));
      if (!days) return Missing("DaysAfterInitiation", "AbortIncompleteMultipartUpload");
      SOVAI_S3_ASSIGN_OR_RETURN(int64_t d, ParseCount(*days, "DaysAfterInitiation", 1));
      rule.abort_incomplete_days = static_cast<int>(d);
      return std::nullopt;
    }
    if (name == "Transition" || name == "NoncurrentVersionTransition") {
      return S3Error(S3Code::kNotImplemented,
                     "<" + std::string(name) +
                         "> is not supported: this store has one storage class (STANDARD)");
    }
    return Unexpected(c, kPath);
  }));
  if (filter_seen && legacy_prefix) {
    return Malformed("a <Rule> takes <Filter> or <Prefix>, not both");
  }
  if (legacy_prefix) rule.filter.prefix = *legacy_prefix;
  if (!status) return Missing("Status", kPath);
  std::string_view s = TrimXmlSpace(*status);
  if (s != "Enabled" && s != "Disabled") return Malformed("<Status> must be Enabled or Disabled");
  rule.enabled = s == "Enabled";
  if (id) {
    if (id->size() > kMaxLifecycleRuleIdBytes) {
      return Invalid("ID length should not exceed allowed limit of 255");
    }
    rule.id = *id;
  }
  if (rule.expiration_days == 0 && !rule.expiration_date_micros &&
      !rule.expired_object_delete_marker && rule.noncurrent_days == 0 &&
      rule.abort_incomplete_days == 0) {
    return Invalid("At least one action needs to be specified in a rule");
  }
  if (rule.expired_object_delete_marker && !rule.filter.tags.empty()) {
    return Invalid("ExpiredObjectDeleteMarker cannot be specified with a tag filter");
  }
  if (rule.abort_incomplete_days > 0 && !rule.filter.tags.empty()) {
    return Invalid(
        "AbortIncompleteMultipartUpload cannot be specified with a tag filter (uploads have no "
        "tags)");
  }
  return rule;
}

}  // namespace

S3Result<LifecycleConfiguration> ParseLifecycleConfiguration(std::string_view xml) {
  pugi::xml_document doc;
  constexpr std::string_view kPath = "LifecycleConfiguration";
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, Load(xml, kPath, &doc));
  LifecycleConfiguration config;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(root, kPath, [&](pugi::xml_node c) -> S3Status {
    if (LocalName(c) != "Rule") return Unexpected(c, kPath);
    if (config.rules.size() == kMaxLifecycleRules) {
      return Invalid("a lifecycle configuration has at most 1000 rules");
    }
    SOVAI_S3_ASSIGN_OR_RETURN(LifecycleRule rule, ParseRule(c));
    config.rules.push_back(std::move(rule));
    return std::nullopt;
  }));
  if (config.rules.empty()) return Malformed("<LifecycleConfiguration> needs at least one <Rule>");
  std::set<std::string> ids;
  for (size_t i = 0; i < config.rules.size(); ++i) {
    LifecycleRule& rule = config.rules[i];
    // S3 names a rule without an ID; a stable name keeps x-amz-expiration meaningful.
    if (rule.id.empty()) rule.id = "rule-" + std::to_string(i + 1);
    if (!ids.insert(rule.id).second) {
      return Invalid("Rule ID must be unique. Found same ID for more than one rule");
    }
  }
  return config;
}

std::string RenderLifecycleConfiguration(const LifecycleConfiguration& config) {
  XmlWriter w;
  w.Open("LifecycleConfiguration", kS3Namespace);
  for (const LifecycleRule& r : config.rules) {
    w.Open("Rule");
    w.Element("ID", r.id);
    w.Open("Filter");
    const LifecycleFilter& f = r.filter;
    const int conditions = (f.prefix.empty() ? 0 : 1) + static_cast<int>(f.tags.size()) +
                           (f.size_greater_than ? 1 : 0) + (f.size_less_than ? 1 : 0);
    if (conditions > 1) w.Open("And");
    if (!f.prefix.empty() || conditions == 0) w.Element("Prefix", f.prefix);
    for (const Tag& t : f.tags) {
      w.Open("Tag");
      w.Element("Key", t.key);
      w.Element("Value", t.value);
      w.Close();
    }
    if (f.size_greater_than) w.Element("ObjectSizeGreaterThan", *f.size_greater_than);
    if (f.size_less_than) w.Element("ObjectSizeLessThan", *f.size_less_than);
    if (conditions > 1) w.Close();
    w.Close();
    w.Element("Status", r.enabled ? "Enabled" : "Disabled");
    if (r.expiration_days > 0 || r.expiration_date_micros || r.expired_object_delete_marker) {
      w.Open("Expiration");
      if (r.expiration_days > 0) w.Element("Days", r.expiration_days);
      if (r.expiration_date_micros) {
        w.Element("Date", base::FormatRfc3339(*r.expiration_date_micros, 3));
      }
      if (r.expired_object_delete_marker) w.Element("ExpiredObjectDeleteMarker", "true");
      w.Close();
    }
    if (r.noncurrent_days > 0) {
      w.Open("NoncurrentVersionExpiration");
      w.Element("NoncurrentDays", r.noncurrent_days);
      if (r.newer_noncurrent_versions > 0) {
        w.Element("NewerNoncurrentVersions", r.newer_noncurrent_versions);
      }
      w.Close();
    }
    if (r.abort_incomplete_days > 0) {
      w.Open("AbortIncompleteMultipartUpload");
      w.Element("DaysAfterInitiation", r.abort_incomplete_days);
      w.Close();
    }
    w.Close();
  }
  w.Close();
  return w.Finish();
}

bool RuleCovers(const LifecycleRule& rule, const ObjectVersion& v) {
  const LifecycleFilter& f = rule.filter;
  if (!v.key.starts_with(f.prefix)) return false;
  if (v.delete_marker) return f.tags.empty() && !f.size_greater_than && !f.size_less_than;
  for (const Tag& t : f.tags) {
    auto it = std::find_if(v.meta.tags.begin(), v.meta.tags.end(), [&](const auto& kv) {
      return kv.first == t.key && kv.second == t.value;
    });
    if (it == v.meta.tags.end()) return false;
  }
  if (f.size_greater_than && !(v.size > *f.size_greater_than)) return false;
  if (f.size_less_than && !(v.size < *f.size_less_than)) return false;
  return true;
}

int64_t DaysLater(int64_t from_micros, int days, int64_t day_micros) {
  const int64_t end = from_micros + days * day_micros;
  if (day_micros != kDayMicros) return end;
  // The next midnight UTC at or after the end.
  return (end + kDayMicros - 1) / kDayMicros * kDayMicros;
}

std::optional<Expiry> CurrentExpiry(const LifecycleConfiguration& config, const ObjectVersion& v,
                                    int64_t day_micros) {
  std::optional<Expiry> best;
  for (const LifecycleRule& r : config.rules) {
    if (!r.enabled || v.delete_marker || !RuleCovers(r, v)) continue;
    std::optional<int64_t> at;
    if (r.expiration_days > 0) at = DaysLater(v.mtime_micros, r.expiration_days, day_micros);
    if (r.expiration_date_micros) at = *r.expiration_date_micros;
    if (at && (!best || *at < best->at_micros)) best = Expiry{*at, r.id};
  }
  return best;
}

std::string FormatExpirationHeader(const Expiry& expiry) {
  return "expiry-date=\"" + base::FormatHttpDate(expiry.at_micros) + "\", rule-id=\"" +
         expiry.rule_id + "\"";
}

}  // namespace sovai::objstore
