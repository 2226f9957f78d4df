// Bucket policies: a subset of IAM's policy language (docs/api/s3.md, "Authentication and
// authorization"): Statements of Effect Allow/Deny, Principal ("*", {"AWS": [user ids or ARNs
// ending in /<user>]}), Action (s3:* patterns with * and ?), Resource (arn:aws:s3:::bucket[/key
// pattern]). Conditions are not evaluated: a conditional Allow never grants, a conditional Deny
// always denies (the safe reading of a policy this server cannot fully understand).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "objstore/s3_error.h"

namespace sovai::objstore {

// Checks a policy document's shape. Errors: MalformedPolicy saying what is wrong.
S3Status ValidatePolicy(std::string_view text);

// "Allow", "Deny" or "" (no statement applies) for `user` (anonymous: only Principal "*"
// applies) doing `action` ("s3:GetObject") on `resource` ("arn:aws:s3:::b/k"). Deny wins.
std::string EvaluatePolicy(std::string_view text, const std::string& user, bool anonymous,
                           std::string_view action, std::string_view resource);

}  // namespace sovai::objstore
