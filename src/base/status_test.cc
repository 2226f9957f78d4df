#include "base/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>

namespace sovai::base {
namespace {

Result<int> ParsePositive(int x) {
  if (x <= 0) return InvalidArgumentError("x must be positive, got " + std::to_string(x));
  return x;
}

Result<int> Doubled(int x) {
  SOVAI_ASSIGN_OR_RETURN(int v, ParsePositive(x));
  return v * 2;
}

Status CheckBoth(int a, int b) {
  SOVAI_RETURN_IF_ERROR(ParsePositive(a));
  SOVAI_RETURN_IF_ERROR(ParsePositive(b));
  return Status();
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(s, Status::Ok());
}

TEST(StatusTest, CarriesCodeAndMessage) {
  Status s = NotFoundError("bucket 'x' does not exist");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: bucket 'x' does not exist");
  EXPECT_EQ(s.WithContext("GetObject").message(), "GetObject: bucket 'x' does not exist");
  EXPECT_TRUE(Status().WithContext("ignored").ok());
}

TEST(StatusTest, ErrnoMapping) {
  EXPECT_EQ(ErrnoToStatus(ENOENT, "open '/nope'").code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToStatus(EEXIST, "mkdir").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoToStatus(EACCES, "open").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "write").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EIO, "read").code(), StatusCode::kInternal);
  EXPECT_NE(ErrnoToStatus(ENOENT, "open '/nope'").message().find("/nope"), std::string::npos);
}

TEST(ResultTest, ValueAndErrorPropagate) {
  EXPECT_EQ(*Doubled(21), 42);
  Result<int> bad = Doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.value_or(7), 7);
  EXPECT_TRUE(CheckBoth(1, 2).ok());
  EXPECT_EQ(CheckBoth(1, 0).message(), "x must be positive, got 0");
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

TEST(ResultDeathTest, ValueOnErrorAborts) {
  Result<int> bad = NotFoundError("gone");
  EXPECT_DEATH((void)bad.value(), "value\\(\\) on an error Result: NOT_FOUND: gone");
}

TEST(ResultDeathTest, ResultFromOkStatusAborts) {
  EXPECT_DEATH(
      {
        Result<int> r{Status()};
        (void)r;
      },
      "Result constructed from an OK Status");
}

TEST(CheckDeathTest, FailedCheckPrintsConditionAndMessage) {
  int limit = 3;
  EXPECT_DEATH(SOVAI_CHECK_LT(limit, 2) << "limit too big", "limit < 2.*limit too big");
}

}  // namespace
}  // namespace sovai::base
