#include "base/status.h"

#include <cerrno>
#include <cstring>

namespace sovai::base {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kUnknown:
      return "UNKNOWN";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kDataLoss:
      return "DATA_LOSS";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

Status::Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {
  SOVAI_CHECK(code != StatusCode::kOk) << "use Status() for OK";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view prefix) const {
  if (ok()) return *this;
  std::string message(prefix);
  message += ": ";
  message += message_;
  return Status(code_, std::move(message));
}

std::ostream& operator<<(std::ostream& os, const Status& status) { return os << status.ToString(); }

#define SOVAI_DEFINE_ERROR_CTOR_(Name, Code) \
  Status Name(std::string message) { return Status(StatusCode::Code, std::move(message)); }
SOVAI_DEFINE_ERROR_CTOR_(CancelledError, kCancelled)
SOVAI_DEFINE_ERROR_CTOR_(UnknownError, kUnknown)
SOVAI_DEFINE_ERROR_CTOR_(InvalidArgumentError, kInvalidArgument)
SOVAI_DEFINE_ERROR_CTOR_(DeadlineExceededError, kDeadlineExceeded)
SOVAI_DEFINE_ERROR_CTOR_(NotFoundError, kNotFound)
SOVAI_DEFINE_ERROR_CTOR_(AlreadyExistsError, kAlreadyExists)
SOVAI_DEFINE_ERROR_CTOR_(PermissionDeniedError, kPermissionDenied)
SOVAI_DEFINE_ERROR_CTOR_(ResourceExhaustedError, kResourceExhausted)
SOVAI_DEFINE_ERROR_CTOR_(FailedPreconditionError, kFailedPrecondition)
SOVAI_DEFINE_ERROR_CTOR_(AbortedError, kAborted)
SOVAI_DEFINE_ERROR_CTOR_(OutOfRangeError, kOutOfRange)
SOVAI_DEFINE_ERROR_CTOR_(UnimplementedError, kUnimplemented)
SOVAI_DEFINE_ERROR_CTOR_(InternalError, kInternal)
SOVAI_DEFINE_ERROR_CTOR_(UnavailableError, kUnavailable)
SOVAI_DEFINE_ERROR_CTOR_(DataLossError, kDataLoss)
SOVAI_DEFINE_ERROR_CTOR_(UnauthenticatedError, kUnauthenticated)
#undef SOVAI_DEFINE_ERROR_CTOR_

Status ErrnoToStatus(int errno_value, std::string_view what) {
  std::string message(what);
  message += ": ";
  message += std::strerror(errno_value);
  switch (errno_value) {
    case ENOENT:
      return Status(StatusCode::kNotFound, std::move(message));
    case EEXIST:
      return Status(StatusCode::kAlreadyExists, std::move(message));
    case EACCES:
    case EPERM:
      return Status(StatusCode::kPermissionDenied, std::move(message));
    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE:
      return Status(StatusCode::kResourceExhausted, std::move(message));
    default:
      return Status(StatusCode::kInternal, std::move(message));
  }
}

}  // namespace sovai::base
