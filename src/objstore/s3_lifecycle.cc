// The lifecycle operations of S3Api::Call (see lifecycle.h, internal/s3_call.h): the bucket's
// rules and the x-amz-expiration header. The rules are applied by LifecycleSweeper.
#include "base/time.h"
#include "objstore/internal/s3_call.h"
#include "objstore/lifecycle.h"

namespace sovai::objstore {

net::Response S3Api::Call::BucketLifecycle() {
  const std::string_view m = req_.method();
  auto b = BucketFor(m == "GET" ? "s3:GetLifecycleConfiguration" : "s3:PutLifecycleConfiguration",
                     false);
  if (!b.ok()) return Error(b.error());
  const std::string kind(kLifecycleConfigKind);
  if (m == "GET") {
    auto doc = store_.GetBucketConfig(bucket_, kind);
    if (!doc.ok()) return Error(doc.error());
    if (!doc->has_value()) {
      return Error(S3Error(S3Code::kNoSuchLifecycleConfiguration,
                           "The lifecycle configuration does not exist")
                       .With("BucketName", bucket_));
    }
    return Xml(200, **doc);
  }
  std::optional<std::string> stored;
  if (m == "PUT") {
    auto body = ReadXmlBody();
    if (!body.ok()) return Error(body.error());
    auto config = ParseLifecycleConfiguration(*body);
    if (!config.ok()) return Error(config.error());
    stored = RenderLifecycleConfiguration(*config);
  }
  S3Status st = store_.SetBucketConfig(bucket_, kind, stored);
  if (st) return Error(*st);
  return Empty(m == "PUT" ? 200 : 204);
}

void S3Api::Call::AddExpirationHeader(net::Response& res, const ObjectVersion& v) {
  if (!bucket_info_) return;
  auto config = store_.GetParsedBucketConfig(bucket_info_->name, std::string(kLifecycleConfigKind),
                                             &ParseLifecycleConfiguration);
  if (!config.ok() || !*config) return;  // no header rather than a failed GET
  if (auto expiry = CurrentExpiry(**config, v, api_.opts_.lifecycle_day_micros)) {
    res.headers.Set("x-amz-expiration", FormatExpirationHeader(*expiry));
  }
}

}  // namespace sovai::objstore
