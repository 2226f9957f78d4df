// Bucket policies: IAM's policy language as S3 evaluates it for one bucket (docs/api/s3.md,
// "Bucket policies"). A policy is parsed and validated once (PutBucketPolicy) and evaluated per
// request against a PolicyRequest that names the caller, the action, the resource and the
// condition keys the request carries.
//
//   SOVAI_S3_ASSIGN_OR_RETURN(IamPolicy policy, IamPolicy::Parse(text, "bucket"));
//   PolicyRequest r{.user = "alice", .action = "s3:GetObject",
//                   .resource = "arn:aws:s3:::bucket/k"};
//   r.Set("aws:SourceIp", "10.0.0.7");
//   if (policy.Evaluate(r) == PolicyEffect::kDeny) ...
//
// What is understood: Statement (one or a list) of Sid, Effect Allow/Deny, Principal /
// NotPrincipal ("*", {"AWS": "*" | ids | ARNs ending in "/<id>" or "arn:aws:iam::<id>:root"},
// {"CanonicalUser": ids}), Action / NotAction (case-insensitive, * and ? wildcards), Resource /
// NotResource (arn:aws:s3:::bucket[/key pattern], case-sensitive, wildcards, the variables
// ${aws:username} and ${aws:userid}), and Condition: the String, Numeric, Date,
// Bool, IpAddress/NotIpAddress, Arn, Binary and Null operators, each with IfExists and the
// ForAllValues:/ForAnyValue: qualifiers. Anything else (an unknown element, operator or key
// family, a resource of another bucket) is MalformedPolicy at Parse, never ignored later.
//
// Evaluation as IAM: an explicit Deny wins, then any Allow, else kNone (the caller's other
// rights decide). A condition on a key the request does not carry is false, except for the
// negated operators (StringNotEquals, NotIpAddress, ...), IfExists and Null, as IAM documents.
//
// Limits (each exceeded one is MalformedPolicy): kMaxPolicyBytes, kMaxPolicyJsonDepth,
// kMaxPolicyStatements, kMaxPolicyListEntries.
//
// Thread-safety: an IamPolicy is an immutable value after Parse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "objstore/s3_error.h"

namespace sovai::objstore {

// AWS's limit on a bucket policy.
inline constexpr size_t kMaxPolicyBytes = 20 * 1024;
// Object/array nesting; the deepest valid policy is 5 (document, Statement list, statement,
// Condition, operator block, value list).
inline constexpr int kMaxPolicyJsonDepth = 8;
inline constexpr size_t kMaxPolicyStatements = 100;
// Entries of one Principal, Action, Resource or condition value list.
inline constexpr size_t kMaxPolicyListEntries = 256;

enum class PolicyEffect { kNone, kAllow, kDeny };

// One request as a policy sees it.
struct PolicyRequest {
  std::string user;  // the caller's user id; "" when anonymous
  bool anonymous = false;
  std::string action;    // "s3:GetObject"
  std::string resource;  // "arn:aws:s3:::bucket" or "arn:aws:s3:::bucket/key"
  // Condition keys and their values; a key may have several values (s3:RequestObjectTagKeys).
  // Keys compare case-insensitively up to the first '/' (the tag key after it is exact).
  std::vector<std::pair<std::string, std::string>> keys;

  void Set(std::string_view key, std::string value);
  std::vector<std::string_view> Get(std::string_view key) const;
};

class IamPolicy {
 public:
  // Parses and validates `text` as the policy of `bucket`. MalformedPolicy saying what is wrong.
  static S3Result<IamPolicy> Parse(std::string_view text, std::string_view bucket);

  PolicyEffect Evaluate(const PolicyRequest& request) const;

  // AWS's "public" test (GetBucketPolicyStatus, BlockPublicPolicy, RestrictPublicBuckets): some
  // Allow statement applies to every principal ("*" or NotPrincipal) without a condition that
  // pins it to fixed values of aws:SourceIp (a CIDR of /8 or narrower for IPv4, /32 for IPv6),
  // aws:SourceArn, aws:SourceVpc, aws:SourceVpce, aws:SourceAccount, aws:SourceOwner,
  // aws:PrincipalOrgID, aws:PrincipalAccount, aws:userid or aws:PrincipalArn.
  bool IsPublic() const;

  enum class Op : uint8_t;
  struct Condition;
  struct Statement;
  IamPolicy();
  ~IamPolicy();
  IamPolicy(IamPolicy&&) noexcept;
  IamPolicy& operator=(IamPolicy&&) noexcept;

 private:
  std::vector<Statement> statements_;
};

// IAM's wildcard match: '*' any run (also empty), '?' one byte; `ignore_case` for actions.
bool IamWildcardMatch(std::string_view pattern, std::string_view text, bool ignore_case);

// Whether `address` ("10.1.2.3", "::1", "10.1.2.3:443", "[::1]:80") lies in `cidr`
// ("10.0.0.0/8", "2001:db8::/32", or one address). False when either does not parse.
bool IpInCidr(std::string_view address, std::string_view cidr);

}  // namespace sovai::objstore
