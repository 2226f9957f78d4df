// S3 errors: the code, HTTP status and message an S3 client sees in the XML error body
// (<Error><Code>NoSuchKey</Code><Message>...</Message>...</Error>). Every layer of objstore (auth,
// XML, storage engine, front end) reports failures as an S3Error so that the client gets the code
// its SDK understands (boto3 maps `NoSuchKey` to an exception class, aws-cli retries `SlowDown`).
//
//   S3Result<ObjectInfo> r = store.Head(bucket, key);
//   if (!r.ok()) return RenderError(r.error());
//
// Thread-safety: values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/check.h"
#include "base/status.h"

namespace sovai::objstore {

// X(code, HTTP status). The names are S3's error codes, verbatim.
#define SOVAI_S3_ERROR_CODES(X)                          \
  X(AccessDenied, 403)                                   \
  X(AuthorizationHeaderMalformed, 400)                   \
  X(AuthorizationQueryParametersError, 400)              \
  X(BadDigest, 400)                                      \
  X(BucketAlreadyExists, 409)                            \
  X(BucketAlreadyOwnedByYou, 409)                        \
  X(BucketNotEmpty, 409)                                 \
  X(EntityTooLarge, 400)                                 \
  X(EntityTooSmall, 400)                                 \
  X(ExpiredToken, 400)                                   \
  X(IllegalLocationConstraintException, 400)             \
  X(IncompleteBody, 400)                                 \
  X(InternalError, 500)                                  \
  X(InvalidAccessKeyId, 403)                             \
  X(InvalidArgument, 400)                                \
  X(InvalidBucketName, 400)                              \
  X(InvalidDigest, 400)                                  \
  X(InvalidPart, 400)                                    \
  X(InvalidPartOrder, 400)                               \
  X(InvalidRange, 416)                                   \
  X(InvalidRequest, 400)                                 \
  X(InvalidStorageClass, 400)                            \
  X(InvalidTag, 400)                                     \
  X(KeyTooLongError, 400)                                \
  X(MalformedXML, 400)                                   \
  X(MetadataTooLarge, 400)                               \
  X(MethodNotAllowed, 405)                               \
  X(MissingContentLength, 411)                           \
  X(MissingSecurityHeader, 400)                          \
  X(NoSuchBucket, 404)                                   \
  X(NoSuchBucketPolicy, 404)                             \
  X(NoSuchCORSConfiguration, 404)                        \
  X(NoSuchKey, 404)                                      \
  X(NoSuchTagSet, 404)                                   \
  X(NoSuchUpload, 404)                                   \
  X(NoSuchVersion, 404)                                  \
  X(NotImplemented, 501)                                 \
  X(NotModified, 304)                                    \
  X(PreconditionFailed, 412)                             \
  X(RequestTimeout, 400)                                 \
  X(RequestTimeTooSkewed, 403)                           \
  X(ServiceUnavailable, 503)                             \
  X(SignatureDoesNotMatch, 403)                          \
  X(SlowDown, 503)                                       \
  X(XAmzContentSHA256Mismatch, 400)                      \
  X(ConditionalRequestConflict, 409)                     \
  X(MalformedPolicy, 400)                                \
  X(TooManyParts, 400)                                   \
  X(UnexpectedContent, 400)                              \
  X(NoSuchLifecycleConfiguration, 404)                   \
  X(ServerSideEncryptionConfigurationNotFoundError, 404) \
  X(ObjectLockConfigurationNotFoundError, 404)           \
  X(NoSuchWebsiteConfiguration, 404)                     \
  X(AccessForbidden, 403)                                \
  X(InvalidBucketState, 409)                             \
  X(NoSuchObjectLockConfiguration, 404)                  \
  X(InvalidRetentionPeriod, 400)                         \
  X(AccessControlListNotSupported, 400)                  \
  X(InvalidBucketAclWithObjectOwnership, 400)            \
  X(MalformedACLError, 400)                              \
  X(NoSuchPublicAccessBlockConfiguration, 404)           \
  X(OwnershipControlsNotFoundError, 404)                 \
  X(UnresolvableGrantByEmailAddress, 400)                \
  X(MalformedPOSTRequest, 400)                           \
  X(InvalidPolicyDocument, 400)                          \
  X(MaxPostPreDataLengthExceededError, 400)              \
  X(IncorrectNumberOfFilesInPostRequest, 400)

enum class S3Code {
#define SOVAI_S3_ENUM(name, status) k##name,
  SOVAI_S3_ERROR_CODES(SOVAI_S3_ENUM)
#undef SOVAI_S3_ENUM
};

// "NoSuchKey" for kNoSuchKey.
std::string_view S3CodeName(S3Code code);
// 404 for kNoSuchKey.
int S3HttpStatus(S3Code code);

struct S3Error {
  S3Code code = S3Code::kInternalError;
  std::string message;
  // Extra elements of the XML error body, in order (e.g. "StringToSign" for a signature mismatch,
  // "BucketName", "Key", "ArgumentName").
  std::vector<std::pair<std::string, std::string>> details;

  S3Error() = default;
  S3Error(S3Code c, std::string m) : code(c), message(std::move(m)) {}
  S3Error& With(std::string name, std::string value) {
    details.emplace_back(std::move(name), std::move(value));
    return *this;
  }
  std::string_view name() const { return S3CodeName(code); }
  int http_status() const { return S3HttpStatus(code); }
  // "NoSuchKey: The specified key does not exist."
  std::string ToString() const;
};

// An internal failure (I/O, database) as the client sees it: InternalError with the message
// (the server logs the full status where it happens).
S3Error S3ErrorFromStatus(const base::Status& status);

// Either a T or an S3Error. [[nodiscard]] like base::Result.
template <class T>
class [[nodiscard]] S3Result {
 public:
  S3Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  S3Result(S3Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return v_.index() == 0; }
  const S3Error& error() const {
    SOVAI_CHECK(!ok()) << "S3Result::error() on a value";
    return std::get<1>(v_);
  }
  T& value() & {
    SOVAI_CHECK(ok()) << "S3Result::value() on an error: " << std::get<1>(v_).ToString();
    return std::get<0>(v_);
  }
  const T& value() const& {
    SOVAI_CHECK(ok()) << "S3Result::value() on an error: " << std::get<1>(v_).ToString();
    return std::get<0>(v_);
  }
  T&& value() && { return std::move(value()); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(value()); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, S3Error> v_;
};

// For operations without a value: nullopt is success.
using S3Status = std::optional<S3Error>;

}  // namespace sovai::objstore

// Propagation, like SOVAI_RETURN_IF_ERROR / SOVAI_ASSIGN_OR_RETURN.
#define SOVAI_S3_CONCAT_INNER(a, b) a##b
#define SOVAI_S3_CONCAT(a, b) SOVAI_S3_CONCAT_INNER(a, b)
#define SOVAI_S3_RETURN_IF_ERROR(expr)                         \
  do {                                                         \
    ::sovai::objstore::S3Status sovai_s3_status_ = (expr);     \
    if (sovai_s3_status_) return std::move(*sovai_s3_status_); \
  } while (0)
#define SOVAI_S3_ASSIGN_OR_RETURN(lhs, expr) \
  SOVAI_S3_ASSIGN_OR_RETURN_IMPL(SOVAI_S3_CONCAT(sovai_s3_result_, __LINE__), lhs, expr)
#define SOVAI_S3_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.error();                   \
  lhs = std::move(tmp).value()
