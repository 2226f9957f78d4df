// Status and Result<T>: how Sovai code reports expected failures.
//
// A Status is either OK or carries a code and a human-readable message that says what was wrong
// and, where possible, what to do about it. Result<T> holds either a T or a non-OK Status.
// Both are [[nodiscard]]: dropping one on the floor is a compile warning.
//
// Propagate with SOVAI_RETURN_IF_ERROR(expr) and SOVAI_ASSIGN_OR_RETURN(lhs, expr).
// Bugs (violated invariants) are not Statuses: they are SOVAI_CHECK failures (check.h).
//
// Thread-safety: values; safe to copy between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "base/check.h"

namespace sovai::base {

// The codes follow gRPC/absl semantics so that every edge (HTTP, S3 XML, OpenAI JSON, problem+json)
// can map them with one table.
enum class StatusCode : uint8_t {
  kOk = 0,
  kCancelled,
  kUnknown,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kResourceExhausted,
  kFailedPrecondition,
  kAborted,
  kOutOfRange,
  kUnimplemented,
  kInternal,
  kUnavailable,
  kDataLoss,
  kUnauthenticated,
};

// "OK", "INVALID_ARGUMENT", ...
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  // OK.
  Status() = default;
  // A non-OK status. `code` must not be kOk (use Status() for that).
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "NOT_FOUND: bucket 'x' does not exist", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<prefix>: <message>"; OK stays OK.
  Status WithContext(std::string_view prefix) const;

  // Explicitly ignores the status (for best-effort cleanup paths).
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& status);

// Constructors named after the code, for readable call sites.
Status CancelledError(std::string message);
Status UnknownError(std::string message);
Status InvalidArgumentError(std::string message);
Status DeadlineExceededError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status PermissionDeniedError(std::string message);
Status ResourceExhaustedError(std::string message);
Status FailedPreconditionError(std::string message);
Status AbortedError(std::string message);
Status OutOfRangeError(std::string message);
Status UnimplementedError(std::string message);
Status InternalError(std::string message);
Status UnavailableError(std::string message);
Status DataLossError(std::string message);
Status UnauthenticatedError(std::string message);

// A Status from errno for a failed system call: "open '/x/y': No such file or directory".
// ENOENT maps to kNotFound, EEXIST to kAlreadyExists, EACCES/EPERM to kPermissionDenied,
// ENOSPC/EDQUOT/EMFILE/ENFILE to kResourceExhausted, others to kInternal.
Status ErrnoToStatus(int errno_value, std::string_view what);

template <typename T>
class [[nodiscard]] Result {
 public:
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "Result<Status> makes no sense");

  // Implicit from a value and from a non-OK status so that `return value;` and
  // `return NotFoundError(...);` both read naturally.
  Result(const T& value) : storage_(value) {}            // NOLINT(google-explicit-constructor)
  Result(T&& value) : storage_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Status status) : storage_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    SOVAI_CHECK(!std::get<Status>(storage_).ok()) << "Result constructed from an OK Status";
  }
  template <typename U>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, Status> &&
           !std::is_same_v<std::decay_t<U>, T> && !std::is_same_v<std::decay_t<U>, Result>)
      Result(U&& value)  // NOLINT(google-explicit-constructor): implicit, like the others
      : storage_(T(std::forward<U>(value))) {}

  bool ok() const { return std::holds_alternative<T>(storage_); }

  // The error; OK when the result holds a value.
  Status status() const { return ok() ? Status() : std::get<Status>(storage_); }

  // Access to the value. Calling these on an error is a bug and stops the process.
  T& value() & {
    CheckOk();
    return std::get<T>(storage_);
  }
  const T& value() const& {
    CheckOk();
    return std::get<T>(storage_);
  }
  T&& value() && {
    CheckOk();
    return std::get<T>(std::move(storage_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  T value_or(T fallback) const& { return ok() ? std::get<T>(storage_) : std::move(fallback); }

 private:
  void CheckOk() const {
    SOVAI_CHECK(ok()) << "value() on an error Result: " << std::get<Status>(storage_).ToString();
  }
  std::variant<T, Status> storage_;
};

namespace internal {
inline const Status& AsStatus(const Status& s) { return s; }
template <typename T>
Status AsStatus(const Result<T>& r) {
  return r.status();
}
}  // namespace internal

}  // namespace sovai::base

#define SOVAI_CONCAT_INNER_(a, b) a##b
#define SOVAI_CONCAT_(a, b) SOVAI_CONCAT_INNER_(a, b)

// Evaluates `expr` (a Status or Result<T>) and returns its Status from the enclosing function
// when it is not OK.
#define SOVAI_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                               \
    ::sovai::base::Status sovai_status_ = ::sovai::base::internal::AsStatus((expr)); \
    if (!sovai_status_.ok()) return sovai_status_;                                   \
  } while (0)

// `SOVAI_ASSIGN_OR_RETURN(auto x, Foo());` declares x = the value of Foo(), or returns its error.
#define SOVAI_ASSIGN_OR_RETURN(lhs, expr) \
  SOVAI_ASSIGN_OR_RETURN_IMPL_(SOVAI_CONCAT_(sovai_result_, __LINE__), lhs, expr)
#define SOVAI_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                 \
  if (!result.ok()) return result.status();             \
  lhs = std::move(result).value()
