// Access control lists of buckets and objects, as S3 defines them (docs/api/s3.md, "ACLs"): an
// owner and up to kMaxAclGrants grants of FULL_CONTROL, READ, WRITE, READ_ACP or WRITE_ACP to a
// user (canonical id, or an e-mail address resolved to one) or to a group (AllUsers,
// AuthenticatedUsers, LogDelivery). They come from a canned ACL (x-amz-acl), the x-amz-grant-*
// headers or an AccessControlPolicy body, are stored as JSON (AclToJson) and answered as XML.
//
//   AclResolver resolver{.user_exists = ..., .user_by_email = ...};
//   SOVAI_S3_ASSIGN_OR_RETURN(Acl acl, CannedAcl("public-read", owner, bucket_owner, true));
//   if (AclPermissionsFor(acl, user, anonymous) & kAclRead) ...
//
// Errors as S3 answers them: an unknown canned ACL or grantee id, a bad grant header or URI is
// InvalidArgument; an e-mail that names no user is UnresolvableGrantByEmailAddress; a body that
// is not an AccessControlPolicy is MalformedACLError (or MalformedXML from the XML gate).
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "objstore/s3_error.h"

namespace sovai::objstore {

// AWS's limit of grants in one ACL.
inline constexpr size_t kMaxAclGrants = 100;

inline constexpr std::string_view kAllUsersGroup =
    "http://acs.amazonaws.com/groups/global/AllUsers";
inline constexpr std::string_view kAuthenticatedUsersGroup =
    "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
inline constexpr std::string_view kLogDeliveryGroup =
    "http://acs.amazonaws.com/groups/s3/LogDelivery";

enum AclPermissionBits : uint32_t {
  kAclRead = 1,
  kAclWrite = 2,
  kAclReadAcp = 4,
  kAclWriteAcp = 8,
  kAclFullControl = 15,
};

struct AclGrant {
  bool group = false;  // id is a group URI (else a user id)
  std::string id;
  std::string permission;  // FULL_CONTROL, READ, WRITE, READ_ACP, WRITE_ACP

  bool operator==(const AclGrant&) const = default;
};

struct Acl {
  std::string owner;
  std::vector<AclGrant> grants;

  bool operator==(const Acl&) const = default;
};

// Who grant references name. Either function may be empty: then no id (or e-mail) resolves.
struct AclResolver {
  std::function<bool(std::string_view id)> user_exists;
  std::function<std::optional<std::string>(std::string_view email)> user_by_email;
};

// The owner's FULL_CONTROL and nothing else (what "private" and no ACL mean).
Acl PrivateAcl(const std::string& owner);

// A canned ACL: private, public-read, public-read-write, authenticated-read, bucket-owner-read,
// bucket-owner-full-control (objects; on a bucket they are private), log-delivery-write
// (buckets). InvalidArgument for any other name.
S3Result<Acl> CannedAcl(std::string_view name, const std::string& owner,
                        const std::string& bucket_owner, bool for_object);

// The x-amz-grant-read/-write/-read-acp/-write-acp/-full-control headers (`header` returns a
// header's value), each a comma-separated list of id="...", uri="..." or emailAddress="...".
// nullopt when none is present. The owner keeps FULL_CONTROL only if a header grants it, as S3
// does.
S3Result<std::optional<Acl>> AclFromGrantHeaders(
    const std::function<std::optional<std::string_view>(std::string_view)>& header,
    const std::string& owner, const AclResolver& resolver);

// An AccessControlPolicy body. The Owner ID, when given, must be `owner` (an ACL cannot give a
// resource away: AccessDenied).
S3Result<Acl> ParseAccessControlPolicy(std::string_view xml, const std::string& owner,
                                       const AclResolver& resolver);
// The GetBucketAcl / GetObjectAcl answer, with xsi:type on every Grantee.
std::string RenderAccessControlPolicy(const Acl& acl);

std::string AclToJson(const Acl& acl);
// nullopt when `json` is not an ACL this file wrote.
std::optional<Acl> AclFromJson(std::string_view json);

// The AclPermissionBits `acl` gives a caller (`user` empty when anonymous); `ignore_public`
// leaves out grants to AllUsers and AuthenticatedUsers (IgnorePublicAcls).
uint32_t AclPermissionsFor(const Acl& acl, const std::string& user, bool anonymous,
                           bool ignore_public);
// Whether some grant goes to AllUsers or AuthenticatedUsers (S3's "public" ACL).
bool AclIsPublic(const Acl& acl);

}  // namespace sovai::objstore
