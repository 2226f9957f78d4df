// The S3 front end's access control (see s3_api.h and docs/api/s3.md, "Access control"): who
// may do what (bucket policies, ACLs, Object Ownership, the Public Access Block), the ACL
// operations, ownership controls, the Public Access Block and the policy status.
#include <algorithm>

#include "base/strings.h"
#include "base/time.h"
#include "objstore/acl.h"
#include "objstore/bucket_access.h"
#include "objstore/iam_policy.h"
#include "objstore/internal/s3_call.h"
#include "objstore/s3_api.h"

namespace sovai::objstore {

using s3_call::BucketAccess;

namespace {

S3Error AccessDenied() { return S3Error(S3Code::kAccessDenied, "Access Denied"); }

// The ACL permission an action needs, and whether it is the object's ACL (else the bucket's)
// that must give it. False for actions no ACL grants (only the owner and policies do).
bool AclNeed(std::string_view action, uint32_t* bits, bool* on_object) {
  struct Need {
    std::string_view action;
    uint32_t bits;
    bool on_object;
  };
  static constexpr Need kNeeds[] = {
      {"s3:ListBucket", kAclRead, false},
      {"s3:ListBucketVersions", kAclRead, false},
      {"s3:ListBucketMultipartUploads", kAclRead, false},
      {"s3:PutObject", kAclWrite, false},
      {"s3:DeleteObject", kAclWrite, false},
      {"s3:DeleteObjectVersion", kAclWrite, false},
      {"s3:AbortMultipartUpload", kAclWrite, false},
      {"s3:ListMultipartUploadParts", kAclWrite, false},
      {"s3:GetBucketAcl", kAclReadAcp, false},
      {"s3:PutBucketAcl", kAclWriteAcp, false},
      {"s3:GetObject", kAclRead, true},
      {"s3:GetObjectVersion", kAclRead, true},
      {"s3:GetObjectAcl", kAclReadAcp, true},
      {"s3:PutObjectAcl", kAclWriteAcp, true},
  };
  for (const Need& n : kNeeds) {
    if (n.action == action) {
      *bits = n.bits;
      *on_object = n.on_object;
      return true;
    }
  }
  return false;
}

// The ACL an object has: its stored one, or its owner's FULL_CONTROL.
objstore::Acl ObjectAcl(const ObjectVersion& v) {
  if (!v.meta.acl.empty()) {
    if (auto acl = AclFromJson(v.meta.acl)) return *acl;
  }
  return PrivateAcl(v.owner);
}

objstore::Acl BucketAcl(const BucketAccess& access, const BucketInfo& b) {
  if (access.acl) {
    if (auto acl = AclFromJson(*access.acl)) return *acl;
  }
  return PrivateAcl(b.owner);
}

// What ACLs disabled (BucketOwnerEnforced) still accept: grants of FULL_CONTROL to the
// resource's owner or the bucket's owner, nothing else (AWS's rule).
bool OnlyOwnersFullControl(const objstore::Acl& acl, const std::string& bucket_owner) {
  return std::all_of(acl.grants.begin(), acl.grants.end(), [&](const AclGrant& g) {
    return !g.group && g.permission == "FULL_CONTROL" &&
           (g.id == acl.owner || g.id == bucket_owner);
  });
}

S3Error AclsDisabled() {
  return S3Error(S3Code::kAccessControlListNotSupported,
                 "The bucket does not allow ACLs (its Object Ownership is BucketOwnerEnforced)");
}

S3Error BlockedPublicAcl() {
  return S3Error(S3Code::kAccessDenied,
                 "Access Denied: the bucket's Public Access Block (BlockPublicAcls) refuses a "
                 "public ACL");
}

std::string PeerHost(std::string_view address) {
  if (address.starts_with("[")) return std::string(address.substr(1, address.find(']') - 1));
  if (std::count(address.begin(), address.end(), ':') == 1) {
    return std::string(address.substr(0, address.find(':')));
  }
  return std::string(address);
}

}  // namespace

bool S3Api::Call::IsAdmin() const {
  const auto& admins = api_.opts_.admin_users;
  return !auth_.anonymous && std::find(admins.begin(), admins.end(), user_) != admins.end();
}

S3Result<BucketAccess> S3Api::Call::AccessOf(const std::string& bucket) {
  if (bucket == bucket_ && access_) return *access_;
  SOVAI_S3_ASSIGN_OR_RETURN(auto configs, store_.GetBucketConfigs(bucket));
  BucketAccess a;
  for (auto& [kind, value] : configs) {
    if (kind == "policy") a.policy = std::move(value);
    if (kind == "acl") a.acl = std::move(value);
    if (kind == kOwnershipConfigKind) a.ownership = std::move(value);
    if (kind == kPublicAccessBlockConfigKind) a.public_access_block = std::move(value);
  }
  if (bucket == bucket_) access_ = a;
  return a;
}

AclResolver S3Api::Call::Resolver() {
  AclResolver r;
  r.user_exists = [this](std::string_view id) {
    const auto& admins = api_.opts_.admin_users;
    return std::find(admins.begin(), admins.end(), id) != admins.end() ||
           !store_.ListAccessKeys(std::string(id)).empty();
  };
  r.user_by_email = api_.opts_.user_by_email;
  return r;
}

PolicyRequest S3Api::Call::PolicyRequestFor(const BucketInfo& bucket, std::string_view action,
                                            bool object_action, const std::string& key,
                                            std::string_view policy_text) {
  PolicyRequest r;
  r.user = user_;
  r.anonymous = auth_.anonymous;
  r.action = std::string(action);
  r.resource = "arn:aws:s3:::" + bucket.name + (object_action ? "/" + key : "");
  r.Set("aws:SourceIp", PeerHost(req_.remote_address()));
  r.Set("aws:SecureTransport", req_.is_tls() ? "true" : "false");
  const int64_t now = api_.opts_.env->NowUnixMicros();
  r.Set("aws:CurrentTime", base::FormatRfc3339(now, 0));
  r.Set("aws:EpochTime", std::to_string(now / base::kMicrosPerSecond));
  r.Set("aws:PrincipalType", auth_.anonymous ? "Anonymous" : "User");
  if (!auth_.anonymous) {
    r.Set("aws:username", user_);
    r.Set("aws:userid", user_);
  }
  if (auto ua = req_.header("User-Agent")) r.Set("aws:UserAgent", std::string(*ua));
  if (auto referer = req_.header("Referer")) r.Set("aws:Referer", std::string(*referer));
  // Request headers S3 offers as condition keys (s3:x-amz-acl, s3:x-amz-grant-read, ...).
  for (const auto& [name, value] : req_.headers()) {
    const std::string lower = base::AsciiToLower(name);
    if (lower == "x-amz-acl" || lower.starts_with("x-amz-grant-") || lower == "x-amz-copy-source" ||
        lower == "x-amz-metadata-directive" || lower == "x-amz-server-side-encryption" ||
        lower == "x-amz-storage-class" || lower == "x-amz-content-sha256" ||
        lower == "x-amz-object-ownership") {
      r.Set("s3:" + lower, value);
    }
  }
  if (bucket.name == bucket_) {
    if (!object_action) {
      for (const char* param : {"prefix", "delimiter", "max-keys"}) {
        if (auto v = Query(param)) r.Set(std::string("s3:") + param, std::string(*v));
      }
    } else if (auto v = Query("versionId")) {
      r.Set("s3:VersionId", std::string(*v));
    }
  }
  if (auto tagging = req_.header("x-amz-tagging")) {
    if (auto tags = ParseTaggingHeader(*tagging, false); tags.ok()) {
      for (const Tag& t : *tags) {
        r.Set("s3:RequestObjectTag/" + t.key, t.value);
        r.Set("s3:RequestObjectTagKeys", t.key);
      }
    }
  }
  // The existing object's tags cost a read: only for policies that test them.
  if (object_action &&
      base::AsciiToLower(policy_text).find("existingobjecttag") != std::string::npos) {
    std::optional<std::string> version;
    if (bucket.name == bucket_ && key == key_ && Query("versionId")) {
      version = std::string(*Query("versionId"));
    }
    if (auto v = store_.Head(bucket.name, key, version); v.ok()) {
      for (const auto& [k, value] : v->meta.tags) r.Set("s3:ExistingObjectTag/" + k, value);
    }
  }
  return r;
}

S3Status S3Api::Call::Authorize(const BucketInfo& bucket, std::string_view action,
                                bool object_action, const std::string& key) {
  if (IsAdmin()) return std::nullopt;
  SOVAI_S3_ASSIGN_OR_RETURN(BucketAccess access, AccessOf(bucket.name));
  const bool owner = !auth_.anonymous && bucket.owner == user_;
  const PublicAccessBlock pab = PublicAccessBlockFromStored(access.public_access_block);
  PolicyEffect effect = PolicyEffect::kNone;
  if (access.policy) {
    auto policy = IamPolicy::Parse(*access.policy, bucket.name);
    if (policy.ok()) {
      effect =
          policy->Evaluate(PolicyRequestFor(bucket, action, object_action, key, *access.policy));
      // RestrictPublicBuckets: a public policy grants only the bucket owner's own callers.
      if (effect == PolicyEffect::kAllow && !owner && pab.restrict_public_buckets &&
          policy->IsPublic()) {
        effect = PolicyEffect::kNone;
      }
    } else if (!owner) {
      // A stored policy this server cannot read (stored before its rules were checked) grants
      // nothing and is read as denying everyone but the owner.
      effect = PolicyEffect::kDeny;
    }
  }
  // The owner can always repair its policy, as AWS's account root can.
  const bool policy_action = action == "s3:GetBucketPolicy" || action == "s3:PutBucketPolicy" ||
                             action == "s3:DeleteBucketPolicy";
  if (effect == PolicyEffect::kDeny && !(owner && policy_action)) return AccessDenied();
  if (owner || effect == PolicyEffect::kAllow) return std::nullopt;

  // ACLs, unless Object Ownership disables them.
  if (OwnershipFromStored(access.ownership) == ObjectOwnership::kBucketOwnerEnforced) {
    return AccessDenied();
  }
  uint32_t need = 0;
  bool on_object = false;
  if (!AclNeed(action, &need, &on_object)) return AccessDenied();
  auto granted = [&](const objstore::Acl& acl) {
    return (AclPermissionsFor(acl, user_, auth_.anonymous, pab.ignore_public_acls) & need) == need;
  };
  if (!on_object) return granted(BucketAcl(access, bucket)) ? S3Status() : AccessDenied();
  std::optional<std::string> version;
  if (bucket.name == bucket_ && key == key_ && Query("versionId")) {
    version = std::string(*Query("versionId"));
  }
  auto v = store_.Head(bucket.name, key, version);
  if (!v.ok()) {
    // A missing key is told only to a caller that may list the bucket, as S3 does.
    const bool may_list = (AclPermissionsFor(BucketAcl(access, bucket), user_, auth_.anonymous,
                                             pab.ignore_public_acls) &
                           kAclRead) != 0;
    return may_list ? S3Status(v.error()) : AccessDenied();
  }
  return granted(ObjectAcl(*v)) ? S3Status() : AccessDenied();
}

S3Result<std::optional<objstore::Acl>> S3Api::Call::RequestedAcl(const BucketInfo& bucket,
                                                                 const std::string& owner,
                                                                 bool object) {
  std::optional<std::string_view> canned = req_.header("x-amz-acl");
  SOVAI_S3_ASSIGN_OR_RETURN(
      std::optional<objstore::Acl> acl,
      AclFromGrantHeaders([this](std::string_view name) { return req_.header(name); }, owner,
                          Resolver()));
  if (canned && acl) {
    return S3Error(S3Code::kInvalidRequest,
                   "Specifying both Canned ACLs and Header Grants is not allowed");
  }
  if (canned) {
    SOVAI_S3_ASSIGN_OR_RETURN(objstore::Acl c,
                              CannedAcl(base::Trim(*canned), owner, bucket.owner, object));
    acl = std::move(c);
  }
  if (!acl) return std::optional<objstore::Acl>();
  SOVAI_S3_ASSIGN_OR_RETURN(BucketAccess access, AccessOf(bucket.name));
  if (OwnershipFromStored(access.ownership) == ObjectOwnership::kBucketOwnerEnforced) {
    if (!OnlyOwnersFullControl(*acl, bucket.owner)) return AclsDisabled();
    return std::optional<objstore::Acl>();
  }
  if (PublicAccessBlockFromStored(access.public_access_block).block_public_acls &&
      AclIsPublic(*acl)) {
    return BlockedPublicAcl();
  }
  return acl;
}

S3Status S3Api::Call::ApplyWriteAcl(const BucketInfo& bucket, std::string* owner,
                                    ObjectMeta* meta) {
  SOVAI_S3_ASSIGN_OR_RETURN(BucketAccess access, AccessOf(bucket.name));
  std::optional<ObjectOwnership> ownership = OwnershipFromStored(access.ownership);
  *owner = bucket.owner;
  if (!auth_.anonymous && ownership != ObjectOwnership::kBucketOwnerEnforced) {
    const bool to_bucket_owner =
        ownership == ObjectOwnership::kBucketOwnerPreferred &&
        base::Trim(req_.header("x-amz-acl").value_or("")) == "bucket-owner-full-control";
    if (!to_bucket_owner) *owner = user_;
  }
  meta->acl.clear();  // a copy's ACL is the request's, never the source's
  SOVAI_S3_ASSIGN_OR_RETURN(std::optional<objstore::Acl> acl,
                            RequestedAcl(bucket, *owner, /*object=*/true));
  if (acl && *acl != PrivateAcl(*owner)) meta->acl = AclToJson(*acl);
  return std::nullopt;
}

S3Result<S3Api::Call::NewBucketAccess> S3Api::Call::AccessForNewBucket() {
  // AWS's default for a new bucket is BucketOwnerEnforced (ACLs disabled). A request that asks
  // for an ACL without naming an ownership gets ObjectWriter, the behaviour such requests were
  // written for (AWS now refuses them; tools and test suites still send them).
  std::string header(base::Trim(req_.header("x-amz-object-ownership").value_or("")));
  BucketInfo would_be{.name = bucket_, .owner = user_};
  SOVAI_S3_ASSIGN_OR_RETURN(
      std::optional<objstore::Acl> acl,
      AclFromGrantHeaders([this](std::string_view name) { return req_.header(name); }, user_,
                          Resolver()));
  std::optional<std::string_view> canned = req_.header("x-amz-acl");
  if (canned && acl) {
    return S3Error(S3Code::kInvalidRequest,
                   "Specifying both Canned ACLs and Header Grants is not allowed");
  }
  if (canned) {
    SOVAI_S3_ASSIGN_OR_RETURN(objstore::Acl c,
                              CannedAcl(base::Trim(*canned), user_, user_, /*for_object=*/false));
    acl = std::move(c);
  }
  const bool exposes = acl && !OnlyOwnersFullControl(*acl, would_be.owner);
  NewBucketAccess out;
  if (header.empty()) {
    out.ownership = std::string(ObjectOwnershipName(
        exposes ? ObjectOwnership::kObjectWriter : ObjectOwnership::kBucketOwnerEnforced));
  } else {
    SOVAI_S3_ASSIGN_OR_RETURN(ObjectOwnership o, ParseObjectOwnershipName(header));
    if (o == ObjectOwnership::kBucketOwnerEnforced && exposes) {
      return S3Error(S3Code::kInvalidBucketAclWithObjectOwnership,
                     "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced "
                     "setting");
    }
    out.ownership = std::string(ObjectOwnershipName(o));
  }
  if (exposes) out.acl = std::move(acl);
  return out;
}

void S3Api::Call::AddNewBucketAccess(const NewBucketAccess& access, BucketSetup* setup) {
  setup->configs.emplace_back(std::string(kOwnershipConfigKind), access.ownership);
  if (access.acl) setup->configs.emplace_back("acl", AclToJson(*access.acl));
}

S3Status S3Api::Call::CheckNewPolicy(std::string_view text) {
  SOVAI_S3_ASSIGN_OR_RETURN(IamPolicy policy, IamPolicy::Parse(text, bucket_));
  SOVAI_S3_ASSIGN_OR_RETURN(BucketAccess access, AccessOf(bucket_));
  if (PublicAccessBlockFromStored(access.public_access_block).block_public_policy &&
      policy.IsPublic()) {
    return S3Error(S3Code::kAccessDenied,
                   "Access Denied: the bucket's Public Access Block (BlockPublicPolicy) refuses a "
                   "public policy");
  }
  return std::nullopt;
}

// --- Operations ----------------------------------------------------------------------------------

net::Response S3Api::Call::AclOperation(bool object) {
  const bool put = req_.method() == "PUT";
  auto b = BucketFor(put ? (object ? "s3:PutObjectAcl" : "s3:PutBucketAcl")
                         : (object ? "s3:GetObjectAcl" : "s3:GetBucketAcl"),
                     object);
  if (!b.ok()) return Error(b.error());
  auto access = AccessOf(bucket_);
  if (!access.ok()) return Error(access.error());
  const bool enforced =
      OwnershipFromStored(access->ownership) == ObjectOwnership::kBucketOwnerEnforced;
  std::optional<std::string> version;
  if (auto q = Query("versionId")) version = std::string(*q);
  std::optional<ObjectVersion> v;
  if (object) {
    auto head = store_.Head(bucket_, key_, version);
    if (!head.ok()) return Error(head.error());
    v = std::move(*head);
  }
  // With ACLs disabled the bucket owner owns everything and holds the only grant.
  objstore::Acl current = enforced ? PrivateAcl(b->owner)
                          : object ? ObjectAcl(*v)
                                   : BucketAcl(*access, *b);
  if (!put) return Xml(200, RenderAccessControlPolicy(current));

  const bool headers = req_.header("x-amz-acl") || req_.header("x-amz-grant-read") ||
                       req_.header("x-amz-grant-write") || req_.header("x-amz-grant-read-acp") ||
                       req_.header("x-amz-grant-write-acp") ||
                       req_.header("x-amz-grant-full-control");
  std::optional<objstore::Acl> wanted;
  if (headers) {
    if (req_.has_body()) {
      return Error(S3Error(S3Code::kUnexpectedContent,
                           "This request does not support content: the ACL is either in the "
                           "headers or in the body"));
    }
    auto acl = RequestedAcl(*b, current.owner, object);
    if (!acl.ok()) return Error(acl.error());
    // ACLs disabled: RequestedAcl accepted only the owners' full control; nothing changes.
    if (enforced) return Empty(200);
    wanted = std::move(*acl);
  } else {
    auto body = ReadXmlBody();
    if (!body.ok()) return Error(body.error());
    if (body->empty()) {
      return Error(S3Error(S3Code::kMissingSecurityHeader,
                           "Your request was missing a required header: x-amz-acl, an "
                           "x-amz-grant-* header or an AccessControlPolicy body"));
    }
    auto acl = ParseAccessControlPolicy(*body, current.owner, Resolver());
    if (!acl.ok()) return Error(acl.error());
    if (enforced) {
      if (!OnlyOwnersFullControl(*acl, b->owner)) return Error(AclsDisabled());
      return Empty(200);
    }
    if (PublicAccessBlockFromStored(access->public_access_block).block_public_acls &&
        AclIsPublic(*acl)) {
      return Error(BlockedPublicAcl());
    }
    wanted = std::move(*acl);
  }
  std::string stored = AclToJson(*wanted);
  if (object) {
    auto done =
        store_.SetObjectAcl(bucket_, key_, version, *wanted == PrivateAcl(v->owner) ? "" : stored);
    if (!done.ok()) return Error(done.error());
  } else {
    std::optional<std::string> value;
    if (*wanted != PrivateAcl(b->owner)) value = stored;
    if (S3Status st = store_.SetBucketConfig(bucket_, "acl", value)) return Error(*st);
  }
  return Empty(200);
}

net::Response S3Api::Call::OwnershipControls() {
  const std::string_view m = req_.method();
  auto b = BucketFor(m == "GET" ? "s3:GetBucketOwnershipControls" : "s3:PutBucketOwnershipControls",
                     false);
  if (!b.ok()) return Error(b.error());
  const std::string kind(kOwnershipConfigKind);
  if (m == "GET") {
    auto access = AccessOf(bucket_);
    if (!access.ok()) return Error(access.error());
    std::optional<ObjectOwnership> o = OwnershipFromStored(access->ownership);
    if (!o) {
      return Error(S3Error(S3Code::kOwnershipControlsNotFoundError,
                           "The bucket ownership controls were not found")
                       .With("BucketName", bucket_));
    }
    return Xml(200, RenderOwnershipControls(*o));
  }
  if (m == "DELETE") {
    if (S3Status st = store_.SetBucketConfig(bucket_, kind, std::string(kOwnershipDeleted))) {
      return Error(*st);
    }
    return Empty(204);
  }
  auto body = ReadXmlBody();
  if (!body.ok()) return Error(body.error());
  auto o = ParseOwnershipControls(*body);
  if (!o.ok()) return Error(o.error());
  if (S3Status st = store_.SetBucketConfig(bucket_, kind, std::string(ObjectOwnershipName(*o)))) {
    return Error(*st);
  }
  return Empty(200);
}

net::Response S3Api::Call::PublicAccessBlockConfig() {
  const std::string_view m = req_.method();
  auto b = BucketFor(m == "GET" ? "s3:GetBucketPublicAccessBlock" : "s3:PutBucketPublicAccessBlock",
                     false);
  if (!b.ok()) return Error(b.error());
  const std::string kind(kPublicAccessBlockConfigKind);
  if (m == "GET") {
    auto access = AccessOf(bucket_);
    if (!access.ok()) return Error(access.error());
    if (!access->public_access_block) {
      return Error(S3Error(S3Code::kNoSuchPublicAccessBlockConfiguration,
                           "The public access block configuration was not found")
                       .With("BucketName", bucket_));
    }
    return Xml(200,
               RenderPublicAccessBlock(PublicAccessBlockFromStored(access->public_access_block)));
  }
  if (m == "DELETE") {
    if (S3Status st = store_.SetBucketConfig(bucket_, kind, std::nullopt)) return Error(*st);
    return Empty(204);
  }
  auto body = ReadXmlBody();
  if (!body.ok()) return Error(body.error());
  auto pab = ParsePublicAccessBlock(*body);
  if (!pab.ok()) return Error(pab.error());
  if (S3Status st = store_.SetBucketConfig(bucket_, kind, RenderPublicAccessBlock(*pab))) {
    return Error(*st);
  }
  return Empty(200);
}

net::Response S3Api::Call::PolicyStatus() {
  auto b = BucketFor("s3:GetBucketPolicyStatus", false);
  if (!b.ok()) return Error(b.error());
  auto access = AccessOf(bucket_);
  if (!access.ok()) return Error(access.error());
  if (!access->policy) {
    return Error(S3Error(S3Code::kNoSuchBucketPolicy, "The bucket policy does not exist")
                     .With("BucketName", bucket_));
  }
  auto policy = IamPolicy::Parse(*access->policy, bucket_);
  // A policy that no longer parses grants nothing (Authorize), so it is not public.
  return Xml(200, RenderPolicyStatus(policy.ok() && policy->IsPublic()));
}

}  // namespace sovai::objstore
