// Bucket lifecycle rules, as S3 has them (docs/api/s3.md, "Lifecycle"): which objects a rule
// covers (prefix, tags, object size) and what it does to them (expire current versions after
// days or on a date, expire noncurrent versions, remove expired delete markers, abort
// incomplete multipart uploads). This file is the XML body and the rules' arithmetic;
// lifecycle_sweeper.h applies them, the front end answers x-amz-expiration from them.
//
//   auto config = ParseLifecycleConfiguration(xml);
//   std::optional<Expiry> e = CurrentExpiry(*config, version, kDayMicros);
//
// Thread-safety: pure functions and values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "objstore/s3_error.h"
#include "objstore/s3_xml.h"
#include "objstore/store.h"

namespace sovai::objstore {

// The bucket_config kind holding a bucket's LifecycleConfiguration (rendered XML).
inline constexpr std::string_view kLifecycleConfigKind = "lifecycle";
inline constexpr size_t kMaxLifecycleRules = 1000;  // AWS's limit
inline constexpr size_t kMaxLifecycleRuleIdBytes = 255;
inline constexpr int64_t kDayMicros = 86400ll * 1000 * 1000;

struct LifecycleFilter {
  std::string prefix;
  std::vector<Tag> tags;  // every one must be on the object
  std::optional<uint64_t> size_greater_than, size_less_than;
  bool operator==(const LifecycleFilter&) const = default;
};

struct LifecycleRule {
  std::string id;
  bool enabled = true;
  LifecycleFilter filter;
  // Expiration of current versions: after days (from creation) or on a date (midnight UTC).
  int expiration_days = 0;
  std::optional<int64_t> expiration_date_micros;
  bool expired_object_delete_marker = false;
  // NoncurrentVersionExpiration: days after a version became noncurrent, keeping the newest N.
  int noncurrent_days = 0;
  int newer_noncurrent_versions = 0;
  // AbortIncompleteMultipartUpload: days after initiation.
  int abort_incomplete_days = 0;
  bool operator==(const LifecycleRule&) const = default;
};

struct LifecycleConfiguration {
  std::vector<LifecycleRule> rules;
  bool operator==(const LifecycleConfiguration&) const = default;
};

// Errors: MalformedXML (the structure; Days with Date; a Filter with more than one condition
// outside <And>; ExpiredObjectDeleteMarker with Days or Date; a Rule without Status);
// InvalidArgument (no rules or more than 1000, a repeated or too long ID, a rule without an
// action, days below 1, a Date not at midnight UTC, ExpiredObjectDeleteMarker with tags);
// NotImplemented for Transition actions (this store has one storage class).
S3Result<LifecycleConfiguration> ParseLifecycleConfiguration(std::string_view xml);
std::string RenderLifecycleConfiguration(const LifecycleConfiguration& config);

// Whether the rule's filter covers `v` (a delete marker: by prefix alone; it has no tags or
// size).
bool RuleCovers(const LifecycleRule& rule, const ObjectVersion& v);

// When a duration of `days` from `from_micros` ends: S3 rounds up to the next midnight UTC.
// With a `day_micros` other than a real day (tests), days are that long and nothing is rounded.
int64_t DaysLater(int64_t from_micros, int days, int64_t day_micros);

struct Expiry {
  int64_t at_micros = 0;
  std::string rule_id;
};
// The earliest expiration of the current version `v` by the enabled rules; nullopt when none
// applies.
std::optional<Expiry> CurrentExpiry(const LifecycleConfiguration& config, const ObjectVersion& v,
                                    int64_t day_micros);
// The x-amz-expiration header value: expiry-date="<HTTP date>", rule-id="<id>".
std::string FormatExpirationHeader(const Expiry& expiry);

}  // namespace sovai::objstore
