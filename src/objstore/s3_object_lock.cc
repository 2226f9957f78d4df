// The Object Lock operations of S3Api::Call (see object_lock.h, internal/s3_call.h): the
// bucket's configuration, each version's retention and legal hold, and what writes and deletes
// do with them.
#include "base/strings.h"
#include "base/time.h"
#include "objstore/internal/s3_call.h"
#include "objstore/object_lock.h"

namespace sovai::objstore {

namespace {

S3Error MissingLockConfiguration() {
  return S3Error(S3Code::kInvalidRequest, "Bucket is missing Object Lock Configuration");
}

}  // namespace

S3Result<std::optional<ObjectLockConfiguration>> S3Api::Call::BucketObjectLock() {
  SOVAI_S3_ASSIGN_OR_RETURN(
      auto config, store_.GetParsedBucketConfig(bucket_, std::string(kObjectLockConfigKind),
                                                &ParseObjectLockConfiguration));
  if (!config) return std::optional<ObjectLockConfiguration>();
  return std::optional<ObjectLockConfiguration>(*config);
}

S3Result<ObjectLock> S3Api::Call::LockForNewObject() {
  const int64_t now = api_.opts_.env->NowUnixMicros();
  SOVAI_S3_ASSIGN_OR_RETURN(ObjectLock lock,
                            LockFromHeaders(Header("x-amz-object-lock-mode"),
                                            Header("x-amz-object-lock-retain-until-date"),
                                            Header("x-amz-object-lock-legal-hold"), now));
  SOVAI_S3_ASSIGN_OR_RETURN(auto config, BucketObjectLock());
  if (!config) {
    if (lock != ObjectLock()) return MissingLockConfiguration();
    return lock;
  }
  if (lock.mode.empty()) {
    ObjectLock by_default = DefaultRetention(*config, now);
    lock.mode = by_default.mode;
    lock.retain_until_micros = by_default.retain_until_micros;
  }
  return lock;
}

bool S3Api::Call::BypassGovernance() {
  if (!base::EqualsIgnoreCase(base::Trim(Header("x-amz-bypass-governance-retention")), "true")) {
    return false;
  }
  if (!bucket_info_) return false;
  return !Authorize(*bucket_info_, "s3:BypassGovernanceRetention", true, key_).has_value();
}

VersionGuard S3Api::Call::LockGuard(bool by_version_id) {
  if (!by_version_id) return nullptr;  // a delete marker hides a version, it removes nothing
  const int64_t now = api_.opts_.env->NowUnixMicros();
  const bool bypass = BypassGovernance();
  return [now, bypass](const ObjectVersion& v) -> S3Status {
    return CheckVersionRemovable(v.meta.lock, now, bypass);
  };
}

void S3Api::Call::AddLockHeaders(net::Response& res, const ObjectVersion& v) {
  const ObjectLock& lock = v.meta.lock;
  if (!lock.mode.empty()) {
    res.headers.Set("x-amz-object-lock-mode", lock.mode);
    res.headers.Set("x-amz-object-lock-retain-until-date",
                    base::FormatRfc3339(lock.retain_until_micros, 3));
  }
  if (lock.legal_hold) res.headers.Set("x-amz-object-lock-legal-hold", "ON");
}

net::Response S3Api::Call::ObjectLockConfig() {
  const bool put = req_.method() == "PUT";
  auto b = BucketFor(
      put ? "s3:PutBucketObjectLockConfiguration" : "s3:GetBucketObjectLockConfiguration", false);
  if (!b.ok()) return Error(b.error());
  auto current = BucketObjectLock();
  if (!current.ok()) return Error(current.error());
  if (!put) {
    if (!*current) {
      return Error(S3Error(S3Code::kObjectLockConfigurationNotFoundError,
                           "Object Lock configuration does not exist for this bucket")
                       .With("BucketName", bucket_));
    }
    return Xml(200, RenderObjectLockConfiguration(**current));
  }
  auto body = ReadXmlBody();
  if (!body.ok()) return Error(body.error());
  auto config = ParseObjectLockConfiguration(*body);
  if (!config.ok()) return Error(config.error());
  // S3 lets Object Lock be turned on for a bucket whose versioning is Enabled; never off.
  if (!*current && b->versioning != Versioning::kEnabled) {
    return Error(S3Error(S3Code::kInvalidBucketState,
                         "Versioning must be 'Enabled' on the bucket to apply a Object Lock "
                         "configuration")
                     .With("BucketName", bucket_));
  }
  S3Status st = store_.SetBucketConfig(bucket_, std::string(kObjectLockConfigKind),
                                       RenderObjectLockConfiguration(*config));
  if (st) return Error(*st);
  return Empty(200);
}

S3Status S3Api::Call::LockedObjectFor(std::string_view action) {
  SOVAI_S3_ASSIGN_OR_RETURN(BucketInfo b, BucketFor(action, true));
  (void)b;
  SOVAI_S3_ASSIGN_OR_RETURN(auto config, BucketObjectLock());
  if (!config) return MissingLockConfiguration();
  return std::nullopt;
}

net::Response S3Api::Call::ObjectRetention() {
  const bool put = req_.method() == "PUT";
  std::optional<std::string> version;
  if (auto q = Query("versionId")) version = std::string(*q);
  if (S3Status st = LockedObjectFor(put ? "s3:PutObjectRetention" : "s3:GetObjectRetention"))
    return Error(*st);
  if (!put) {
    auto v = store_.Head(bucket_, key_, version);
    if (!v.ok()) return Error(v.error());
    if (v->meta.lock.mode.empty()) {
      return Error(S3Error(S3Code::kNoSuchObjectLockConfiguration,
                           "The specified object does not have a ObjectLock configuration"));
    }
    return Xml(200, RenderRetention(v->meta.lock));
  }
  auto body = ReadXmlBody();
  if (!body.ok()) return Error(body.error());
  auto wanted = ParseRetention(*body);
  if (!wanted.ok()) return Error(wanted.error());
  const int64_t now = api_.opts_.env->NowUnixMicros();
  const bool bypass = BypassGovernance();
  auto v = store_.UpdateVersion(bucket_, key_, version, [&](ObjectVersion& stored) -> S3Status {
    SOVAI_S3_RETURN_IF_ERROR(CheckRetentionChange(stored.meta.lock, *wanted, now, bypass));
    stored.meta.lock.mode = wanted->mode;
    stored.meta.lock.retain_until_micros = wanted->retain_until_micros;
    return std::nullopt;
  });
  if (!v.ok()) return Error(v.error());
  net::Response res = Empty(200);
  res.headers.Set("x-amz-version-id", v->version_id);
  return res;
}

net::Response S3Api::Call::ObjectLegalHold() {
  const bool put = req_.method() == "PUT";
  std::optional<std::string> version;
  if (auto q = Query("versionId")) version = std::string(*q);
  if (S3Status st = LockedObjectFor(put ? "s3:PutObjectLegalHold" : "s3:GetObjectLegalHold"))
    return Error(*st);
  if (!put) {
    auto v = store_.Head(bucket_, key_, version);
    if (!v.ok()) return Error(v.error());
    return Xml(200, RenderLegalHold(v->meta.lock.legal_hold));
  }
  auto body = ReadXmlBody();
  if (!body.ok()) return Error(body.error());
  auto on = ParseLegalHold(*body);
  if (!on.ok()) return Error(on.error());
  auto v = store_.UpdateVersion(bucket_, key_, version, [&](ObjectVersion& stored) -> S3Status {
    stored.meta.lock.legal_hold = *on;
    return std::nullopt;
  });
  if (!v.ok()) return Error(v.error());
  net::Response res = Empty(200);
  res.headers.Set("x-amz-version-id", v->version_id);
  return res;
}

}  // namespace sovai::objstore
