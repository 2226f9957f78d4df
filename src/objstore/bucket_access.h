// A bucket's access settings besides its ACL and policy (docs/api/s3.md, "Access control"):
// Object Ownership (OwnershipControls) and the Public Access Block, their XML bodies and how
// they are stored in the bucket's configuration documents.
//
//   SOVAI_S3_ASSIGN_OR_RETURN(ObjectOwnership o, ParseOwnershipControls(body));
//   PublicAccessBlock pab = PublicAccessBlockFromStored(stored);  // all false when unset
//
// Thread-safety: values and pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "objstore/s3_error.h"

namespace sovai::objstore {

// S3's Object Ownership. kBucketOwnerEnforced disables ACLs (they neither grant nor may be set,
// AccessControlListNotSupported) and the bucket owner owns every object; the other two keep
// ACLs, kObjectWriter making the writer the owner of what it writes, kBucketOwnerPreferred the
// bucket owner when the write says bucket-owner-full-control.
enum class ObjectOwnership { kBucketOwnerEnforced, kBucketOwnerPreferred, kObjectWriter };

// "BucketOwnerEnforced", ...
std::string_view ObjectOwnershipName(ObjectOwnership o);
// InvalidArgument naming x-amz-object-ownership for anything else.
S3Result<ObjectOwnership> ParseObjectOwnershipName(std::string_view name);

// <OwnershipControls><Rule><ObjectOwnership>..</ObjectOwnership></Rule></OwnershipControls>
// (exactly one rule, as S3 requires). MalformedXML otherwise.
S3Result<ObjectOwnership> ParseOwnershipControls(std::string_view xml);
std::string RenderOwnershipControls(ObjectOwnership o);

// The bucket configuration kind that holds the ownership ("ownership"): absent is
// BucketOwnerEnforced (every bucket before ownership controls existed behaved so, and it is
// AWS's default); kOwnershipDeleted after DeleteBucketOwnershipControls (no controls, ACLs
// enabled as ObjectWriter, as AWS does).
inline constexpr std::string_view kOwnershipConfigKind = "ownership";
inline constexpr std::string_view kOwnershipDeleted = "none";
// What a stored value means; nullopt = no controls (deleted) → ObjectWriter behaviour.
std::optional<ObjectOwnership> OwnershipFromStored(const std::optional<std::string>& stored);

struct PublicAccessBlock {
  bool block_public_acls = false;
  bool ignore_public_acls = false;
  bool block_public_policy = false;
  bool restrict_public_buckets = false;

  bool operator==(const PublicAccessBlock&) const = default;
};

inline constexpr std::string_view kPublicAccessBlockConfigKind = "public_access_block";

// <PublicAccessBlockConfiguration> with any of the four flags (absent = false).
S3Result<PublicAccessBlock> ParsePublicAccessBlock(std::string_view xml);
std::string RenderPublicAccessBlock(const PublicAccessBlock& pab);
// The stored form is the rendered XML; unset is all false, unreadable all true.
PublicAccessBlock PublicAccessBlockFromStored(const std::optional<std::string>& stored);

// <PolicyStatus><IsPublic>..</IsPublic></PolicyStatus>
std::string RenderPolicyStatus(bool is_public);

}  // namespace sovai::objstore
