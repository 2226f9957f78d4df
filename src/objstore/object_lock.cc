// Object Lock bodies and rules (see object_lock.h).
#include "objstore/object_lock.h"

#include "base/strings.h"
#include "base/time.h"
#include "objstore/internal/xml_dom.h"
#include "objstore/s3_xml.h"

namespace sovai::objstore {

using namespace xml_dom;  // NOLINT(google-build-using-namespace): the parsing vocabulary

namespace {

constexpr int64_t kMicrosPerDay = 86400ll * 1000 * 1000;

bool IsMode(std::string_view mode) { return mode == "GOVERNANCE" || mode == "COMPLIANCE"; }

bool Active(const ObjectLock& lock, int64_t now_micros) {
  return !lock.mode.empty() && lock.retain_until_micros > now_micros;
}

S3Error Denied(std::string why) { return S3Error(S3Code::kAccessDenied, std::move(why)); }

S3Result<int> ParsePeriod(const std::optional<std::string>& text, int max,
                          std::string_view element) {
  auto n = base::ParseInt64(TrimXmlSpace(*text));
  if (!n.ok()) return Malformed("<" + std::string(element) + "> must be an integer");
  if (*n < 1 || *n > max) {
    return S3Error(S3Code::kInvalidRetentionPeriod,
                   "Default retention period must be a positive integer value of at most " +
                       std::to_string(max) + " " + base::AsciiToLower(element) + ".");
  }
  return static_cast<int>(*n);
}

S3Status ParseDefaultRetention(pugi::xml_node node, ObjectLockConfiguration* config) {
  constexpr std::string_view kPath = "ObjectLockConfiguration/Rule/DefaultRetention";
  std::optional<std::string> mode, days, years;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(node, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "Mode") return ReadOnce(c, kPath, &mode);
    if (name == "Days") return ReadOnce(c, kPath, &days);
    if (name == "Years") return ReadOnce(c, kPath, &years);
    return Unexpected(c, kPath);
  }));
  if (!mode || !IsMode(TrimXmlSpace(*mode))) {
    return Malformed("<DefaultRetention> needs a <Mode> of GOVERNANCE or COMPLIANCE");
  }
  if (days.has_value() == years.has_value()) {
    return Malformed("<DefaultRetention> needs one of <Days> and <Years>, not both or neither");
  }
  config->default_mode = std::string(TrimXmlSpace(*mode));
  if (days) {
    SOVAI_S3_ASSIGN_OR_RETURN(config->default_days,
                              ParsePeriod(days, kMaxDefaultRetentionDays, "Days"));
  } else {
    SOVAI_S3_ASSIGN_OR_RETURN(config->default_years,
                              ParsePeriod(years, kMaxDefaultRetentionYears, "Years"));
  }
  return std::nullopt;
}

}  // namespace

S3Result<ObjectLockConfiguration> ParseObjectLockConfiguration(std::string_view xml) {
  pugi::xml_document doc;
  constexpr std::string_view kPath = "ObjectLockConfiguration";
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, Load(xml, kPath, &doc));
  ObjectLockConfiguration config;
  std::optional<std::string> enabled;
  bool rule_seen = false;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(root, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "ObjectLockEnabled") return ReadOnce(c, kPath, &enabled);
    if (name != "Rule") return Unexpected(c, kPath);
    if (rule_seen) return Malformed("<Rule> appears more than once in <ObjectLockConfiguration>");
    rule_seen = true;
    bool retention_seen = false;
    SOVAI_S3_RETURN_IF_ERROR(
        ForEachChild(c, "ObjectLockConfiguration/Rule", [&](pugi::xml_node r) -> S3Status {
          if (LocalName(r) != "DefaultRetention" || retention_seen) {
            return Unexpected(r, "ObjectLockConfiguration/Rule");
          }
          retention_seen = true;
          return ParseDefaultRetention(r, &config);
        }));
    if (!retention_seen) return Missing("DefaultRetention", "ObjectLockConfiguration/Rule");
    return std::nullopt;
  }));
  if (!enabled || TrimXmlSpace(*enabled) != "Enabled") {
    return Malformed(
        "<ObjectLockConfiguration> needs <ObjectLockEnabled>Enabled</ObjectLockEnabled>");
  }
  config.enabled = true;
  return config;
}

std::string RenderObjectLockConfiguration(const ObjectLockConfiguration& config) {
  XmlWriter w;
  w.Open("ObjectLockConfiguration", kS3Namespace);
  if (config.enabled) w.Element("ObjectLockEnabled", "Enabled");
  if (!config.default_mode.empty()) {
    w.Open("Rule");
    w.Open("DefaultRetention");
    w.Element("Mode", config.default_mode);
    if (config.default_days > 0) w.Element("Days", config.default_days);
    if (config.default_years > 0) w.Element("Years", config.default_years);
    w.Close();
    w.Close();
  }
  w.Close();
  return w.Finish();
}

S3Result<ObjectLock> ParseRetention(std::string_view xml) {
  pugi::xml_document doc;
  constexpr std::string_view kPath = "Retention";
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, Load(xml, kPath, &doc));
  std::optional<std::string> mode, until;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(root, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "Mode") return ReadOnce(c, kPath, &mode);
    if (name == "RetainUntilDate") return ReadOnce(c, kPath, &until);
    return Unexpected(c, kPath);
  }));
  ObjectLock lock;
  if (mode.has_value() != until.has_value()) {
    return Malformed("<Retention> needs both <Mode> and <RetainUntilDate>, or neither");
  }
  if (!mode) return lock;
  if (!IsMode(TrimXmlSpace(*mode))) return Malformed("<Mode> must be GOVERNANCE or COMPLIANCE");
  auto t = base::ParseRfc3339(TrimXmlSpace(*until));
  if (!t.ok()) {
    return S3Error(S3Code::kInvalidArgument, "The retain until date is not a valid ISO 8601 date")
        .With("ArgumentName", "RetainUntilDate");
  }
  lock.mode = std::string(TrimXmlSpace(*mode));
  lock.retain_until_micros = *t;
  return lock;
}

std::string RenderRetention(const ObjectLock& lock) {
  XmlWriter w;
  w.Open("Retention", kS3Namespace);
  w.Element("Mode", lock.mode);
  w.Element("RetainUntilDate", base::FormatRfc3339(lock.retain_until_micros, 3));
  w.Close();
  return w.Finish();
}

S3Result<bool> ParseLegalHold(std::string_view xml) {
  pugi::xml_document doc;
  constexpr std::string_view kPath = "LegalHold";
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, Load(xml, kPath, &doc));
  std::optional<std::string> status;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(root, kPath, [&](pugi::xml_node c) -> S3Status {
    if (LocalName(c) == "Status") return ReadOnce(c, kPath, &status);
    return Unexpected(c, kPath);
  }));
  std::string_view s = status ? TrimXmlSpace(*status) : "";
  if (s != "ON" && s != "OFF") return Malformed("<LegalHold> needs a <Status> of ON or OFF");
  return s == "ON";
}

std::string RenderLegalHold(bool on) {
  XmlWriter w;
  w.Open("LegalHold", kS3Namespace);
  w.Element("Status", on ? "ON" : "OFF");
  w.Close();
  return w.Finish();
}

ObjectLock DefaultRetention(const ObjectLockConfiguration& config, int64_t now_micros) {
  ObjectLock lock;
  if (config.default_mode.empty()) return lock;
  lock.mode = config.default_mode;
  if (config.default_days > 0) {
    lock.retain_until_micros = now_micros + config.default_days * kMicrosPerDay;
  } else {
    // Years are calendar years, as S3 counts them.
    base::CivilTime civil = base::ToCivil(now_micros);
    civil.year += config.default_years;
    if (civil.month == 2 && civil.day == 29 && !base::IsLeapYear(civil.year)) civil.day = 28;
    lock.retain_until_micros =
        base::FromCivil(civil).value_or(now_micros + config.default_years * 365 * kMicrosPerDay);
  }
  return lock;
}

S3Result<ObjectLock> LockFromHeaders(std::string_view mode, std::string_view retain_until,
                                     std::string_view legal_hold, int64_t now_micros) {
  ObjectLock lock;
  mode = base::Trim(mode);
  retain_until = base::Trim(retain_until);
  legal_hold = base::Trim(legal_hold);
  if (mode.empty() != retain_until.empty()) {
    return S3Error(S3Code::kInvalidArgument,
                   "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be "
                   "supplied");
  }
  if (!mode.empty()) {
    if (!IsMode(mode)) {
      return S3Error(S3Code::kInvalidArgument, "Unknown wormMode directive.")
          .With("ArgumentName", "x-amz-object-lock-mode")
          .With("ArgumentValue", std::string(mode));
    }
    auto t = base::ParseRfc3339(retain_until);
    if (!t.ok()) {
      return S3Error(S3Code::kInvalidArgument,
                     "The retain until date must be provided in ISO 8601 format")
          .With("ArgumentName", "x-amz-object-lock-retain-until-date");
    }
    if (*t <= now_micros) {
      return S3Error(S3Code::kInvalidArgument, "The retain until date must be in the future!")
          .With("ArgumentName", "x-amz-object-lock-retain-until-date");
    }
    lock.mode = std::string(mode);
    lock.retain_until_micros = *t;
  }
  if (!legal_hold.empty()) {
    if (legal_hold != "ON" && legal_hold != "OFF") {
      return S3Error(S3Code::kInvalidArgument, "Legal Hold must be either of 'ON' or 'OFF'")
          .With("ArgumentName", "x-amz-object-lock-legal-hold");
    }
    lock.legal_hold = legal_hold == "ON";
  }
  return lock;
}

S3Status CheckVersionRemovable(const ObjectLock& lock, int64_t now_micros, bool bypass_governance) {
  if (lock.legal_hold) return Denied("Access Denied because object protected by object lock.");
  if (!Active(lock, now_micros)) return std::nullopt;
  if (lock.mode == "GOVERNANCE" && bypass_governance) return std::nullopt;
  return Denied("Access Denied because object protected by object lock.");
}

S3Status CheckRetentionChange(const ObjectLock& current, const ObjectLock& wanted,
                              int64_t now_micros, bool bypass_governance) {
  if (!wanted.mode.empty() && wanted.retain_until_micros <= now_micros) {
    return S3Error(S3Code::kInvalidArgument, "The retain until date must be in the future!")
        .With("ArgumentName", "RetainUntilDate");
  }
  if (!Active(current, now_micros)) return std::nullopt;
  const bool weaker = wanted.mode.empty() ||
                      wanted.retain_until_micros < current.retain_until_micros ||
                      (current.mode == "COMPLIANCE" && wanted.mode != "COMPLIANCE");
  if (!weaker) return std::nullopt;
  if (current.mode == "GOVERNANCE" && bypass_governance) return std::nullopt;
  return Denied(current.mode == "COMPLIANCE"
                    ? "Access Denied: a COMPLIANCE retention can only be extended"
                    : "Access Denied: shortening or removing a GOVERNANCE retention needs "
                      "x-amz-bypass-governance-retention: true and s3:BypassGovernanceRetention");
}

}  // namespace sovai::objstore
