// Object Lock, as S3 has it (docs/api/s3.md, "Object Lock"): a bucket created with
// `x-amz-bucket-object-lock-enabled: true` (versioning on, for good), its default retention,
// each version's retention (GOVERNANCE or COMPLIANCE until a date) and legal hold. This file is
// the XML bodies and the rules; the front end applies them (s3_object_lock.cc), the store checks
// them inside its write transactions (VersionGuard).
//
//   S3Status st = CheckVersionRemovable(v.meta.lock, now_micros, bypass_governance);
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "objstore/s3_error.h"
#include "objstore/store.h"

namespace sovai::objstore {

// The bucket_config kind holding a bucket's ObjectLockConfiguration (rendered XML).
inline constexpr std::string_view kObjectLockConfigKind = "object-lock";
// Limits on a default retention (AWS: 100 years; days likewise).
inline constexpr int kMaxDefaultRetentionYears = 100;
inline constexpr int kMaxDefaultRetentionDays = 36500;

struct ObjectLockConfiguration {
  bool enabled = false;      // ObjectLockEnabled = Enabled
  std::string default_mode;  // "" = no default retention
  int default_days = 0;      // one of days or years, with a mode
  int default_years = 0;
  bool operator==(const ObjectLockConfiguration&) const = default;
};

// Errors: MalformedXML (also ObjectLockEnabled other than Enabled, a mode other than GOVERNANCE
// or COMPLIANCE, both or neither of Days and Years, a Rule without DefaultRetention);
// InvalidRetentionPeriod for a period below 1 or above the limits.
S3Result<ObjectLockConfiguration> ParseObjectLockConfiguration(std::string_view xml);
std::string RenderObjectLockConfiguration(const ObjectLockConfiguration& config);

// <Retention><Mode/><RetainUntilDate/></Retention>: both or neither (neither removes the
// retention). Errors: MalformedXML; InvalidArgument for an unparsable date.
S3Result<ObjectLock> ParseRetention(std::string_view xml);
std::string RenderRetention(const ObjectLock& lock);
// <LegalHold><Status>ON|OFF</Status></LegalHold>. MalformedXML otherwise.
S3Result<bool> ParseLegalHold(std::string_view xml);
std::string RenderLegalHold(bool on);

// The retention a new version gets from the bucket's default (none when it has none).
ObjectLock DefaultRetention(const ObjectLockConfiguration& config, int64_t now_micros);

// The x-amz-object-lock-mode / -retain-until-date / -legal-hold headers of a write (each may be
// empty). InvalidArgument: only one of mode and date, an unknown mode or hold status, a date
// that does not parse or is not in the future.
S3Result<ObjectLock> LockFromHeaders(std::string_view mode, std::string_view retain_until,
                                     std::string_view legal_hold, int64_t now_micros);

// Whether a version may be deleted (by version id) now: not under a legal hold, a COMPLIANCE
// retention or (without the bypass) a GOVERNANCE retention that has not expired. AccessDenied.
S3Status CheckVersionRemovable(const ObjectLock& lock, int64_t now_micros, bool bypass_governance);

// Whether PutObjectRetention may replace `current` by `wanted` now: a COMPLIANCE retention is
// never shortened, removed or weakened to GOVERNANCE; a GOVERNANCE one only with the bypass
// (AccessDenied). A new date must be in the future (InvalidArgument).
S3Status CheckRetentionChange(const ObjectLock& current, const ObjectLock& wanted,
                              int64_t now_micros, bool bypass_governance);

}  // namespace sovai::objstore
