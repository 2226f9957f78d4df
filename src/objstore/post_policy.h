// The policy document of S3's browser form uploads (POST Object): a base64 JSON document that
// says until when and on which conditions a signed HTML form may upload, checked against the
// form's fields (docs/api/s3.md, "POST Object").
//
//   {"expiration": "2026-12-01T12:00:00.000Z",
//    "conditions": [{"bucket": "photos"}, ["starts-with", "$key", "user/alice/"],
//                   {"acl": "public-read"}, ["content-length-range", 1, 10485760],
//                   {"x-amz-algorithm": "AWS4-HMAC-SHA256"}, ...]}
//
//   SOVAI_S3_ASSIGN_OR_RETURN(PostPolicy policy, ParsePostPolicy(json));
//   SOVAI_S3_RETURN_IF_ERROR(CheckPostPolicy(policy, fields, now_micros));
//
// Conditions: {"field": "value"} and ["eq", "$field", "value"] match exactly; ["starts-with",
// "$field", "prefix"] matches a prefix ("" matches anything); ["content-length-range", min, max]
// bounds the file's size in bytes (the caller checks it while the file streams). Field names
// compare case-insensitively, values exactly.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "objstore/s3_error.h"

namespace sovai::objstore {

struct PostCondition {
  enum class Kind { kEq, kStartsWith };
  Kind kind = Kind::kEq;
  std::string field;  // lowercased, without the '$': "key", "x-amz-meta-owner"
  std::string value;
  std::string text;  // the condition as written, for "Policy Condition failed: ..."
};

struct PostPolicy {
  int64_t expiration_micros = 0;
  std::vector<PostCondition> conditions;
  // The content-length-range, when the policy has one (the last one wins, as in AWS).
  std::optional<std::pair<uint64_t, uint64_t>> length_range;
};

// Form fields as the policy sees them: lowercased names, values as sent.
using PostFields = std::vector<std::pair<std::string, std::string>>;

// Parses the decoded policy (at most kMaxPostPolicyBytes, kMaxPostPolicyConditions conditions).
// InvalidPolicyDocument naming what is wrong: not a JSON object, no or an unparsable expiration,
// no conditions list, an unknown operator, a malformed condition or range.
S3Result<PostPolicy> ParsePostPolicy(std::string_view text);

// AccessDenied "Invalid according to Policy: ..." when the policy expired ("Policy expired."),
// a condition fails ("Policy Condition failed: [\"eq\", \"$key\", \"a\"]"), or a field is named
// by no condition ("Extra input fields: content-type"; bucket, policy, x-amz-signature,
// file and x-ignore-* need none). `fields` must include "bucket", the bucket the form posts to.
S3Status CheckPostPolicy(const PostPolicy& policy, const PostFields& fields, int64_t now_micros);

}  // namespace sovai::objstore
