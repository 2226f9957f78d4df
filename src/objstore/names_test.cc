#include "objstore/names.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sovai::objstore {
namespace {

using namespace std::string_view_literals;

TEST(ValidateBucketNameTest, ValidNames) {
  for (std::string_view name : {"abc", "my-bucket", "my.bucket.1", "a-b.c-d", "123", "1.2.3",
                                "1.2.3.4.5", "xn-a", "s3alias", "bucket-s3alia", "a--b"}) {
    EXPECT_FALSE(ValidateBucketName(name)) << name << ": " << ValidateBucketName(name)->message;
  }
  EXPECT_FALSE(ValidateBucketName(std::string(63, 'a')));
}

TEST(ValidateBucketNameTest, EachRuleNamesItself) {
  struct Case {
    std::string name;
    std::string_view rule;
  };
  const Case cases[] = {
      {"ab", "between 3 and 63 characters long, this one is 2"},
      {"", "between 3 and 63"},
      {std::string(64, 'a'), "this one is 64"},
      {"MyBucket", "only lowercase letters, digits"},
      {"my_bucket", "disallowed character at offset 2"},
      {"my bucket", "disallowed character"},
      {"-bucket", "begin and end with a lowercase letter or digit"},
      {"bucket-", "begin and end"},
      {".bucket", "begin and end"},
      {"bucket.", "begin and end"},
      {"my..bucket", "two adjacent periods"},
      {"192.168.5.4", "formatted as an IP address"},
      {"999.999.999.999", "formatted as an IP address"},
      {"xn--bucket", "prefix \"xn--\" is reserved"},
      {"sthree-bucket", "prefix \"sthree-\""},
      {"sthree-configurator", "prefix \"sthree-\""},
      {"amzn-s3-demo-bucket", "prefix \"amzn-s3-demo-\""},
      {"bucket-s3alias", "suffix \"-s3alias\" is reserved"},
      {"bucket--ol-s3", "suffix \"--ol-s3\""},
      {"bucket.mrap", "suffix \".mrap\""},
      {"bucket--x-s3", "suffix \"--x-s3\""},
      {"bucket--table-s3", "suffix \"--table-s3\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    S3Status s = ValidateBucketName(c.name);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->code, S3Code::kInvalidBucketName);
    EXPECT_NE(s->message.find(c.rule), std::string::npos) << s->message;
    ASSERT_EQ(s->details.size(), 1u);
    EXPECT_EQ(s->details[0].first, "BucketName");
    EXPECT_EQ(s->details[0].second, c.name);
  }
}

TEST(ValidateObjectKeyTest, ValidKeys) {
  for (std::string_view key :
       {"a"sv, "dir/sub/file.txt"sv, " leading and trailing "sv, "caf\xC3\xA9 \xF0\x9F\x98\x80"sv,
        "control\x01\x1F\x7F\r\n\tchars"sv, "../../etc/passwd"sv, "//"sv}) {
    EXPECT_FALSE(ValidateObjectKey(key)) << testing::PrintToString(key);
  }
  EXPECT_FALSE(ValidateObjectKey(std::string(1024, 'k')));
  // 1024 bytes of 4-byte characters.
  std::string emoji;
  for (int i = 0; i < 256; ++i) emoji += "\xF0\x9F\x98\x80";
  EXPECT_FALSE(ValidateObjectKey(emoji));
}

TEST(ValidateObjectKeyTest, Errors) {
  S3Status long_key = ValidateObjectKey(std::string(1025, 'k'));
  ASSERT_TRUE(long_key);
  EXPECT_EQ(long_key->code, S3Code::kKeyTooLongError);
  EXPECT_NE(long_key->message.find("1025 bytes"), std::string::npos);

  S3Status empty = ValidateObjectKey("");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->code, S3Code::kInvalidArgument);

  S3Status nul = ValidateObjectKey("a\0b"sv);
  ASSERT_TRUE(nul);
  EXPECT_EQ(nul->code, S3Code::kInvalidArgument);
  EXPECT_NE(nul->message.find("NUL character (found at offset 1)"), std::string::npos);

  for (std::string_view bad : {"\xFF"sv, "a\xC3"sv, "\xC0\xAF"sv, "\xED\xA0\x80"sv,
                               "\xF4\x90\x80\x80"sv, "\x80"sv, "ok\xE2\x82"sv}) {
    SCOPED_TRACE(testing::PrintToString(bad));
    S3Status s = ValidateObjectKey(bad);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->code, S3Code::kInvalidArgument);
    EXPECT_NE(s->message.find("not valid UTF-8"), std::string::npos);
  }
}

TEST(ValidateUserMetadataTest, TwoKiBOfNamesAndValues) {
  EXPECT_FALSE(ValidateUserMetadata({}));
  // 1000 + 1048 = 2048 bytes: the prefix does not count.
  EXPECT_FALSE(ValidateUserMetadata(
      {{"x-amz-meta-" + std::string(1000, 'n'), ""}, {"m", std::string(1047, 'v')}}));
  EXPECT_FALSE(ValidateUserMetadata({{"X-Amz-Meta-a", std::string(2047, 'v')}}));
  S3Status s = ValidateUserMetadata({{"a", std::string(2047, 'v')}, {"b", ""}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->code, S3Code::kMetadataTooLarge);
  EXPECT_NE(s->message.find("2049 bytes"), std::string::npos) << s->message;
}

TEST(Utf8Test, DecodesAndCounts) {
  std::string_view s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
  size_t pos = 0;
  EXPECT_EQ(NextUtf8CodePoint(s, &pos), 'a');
  EXPECT_EQ(NextUtf8CodePoint(s, &pos), 0xE9);
  EXPECT_EQ(NextUtf8CodePoint(s, &pos), 0x20AC);
  EXPECT_EQ(NextUtf8CodePoint(s, &pos), 0x1F600);
  EXPECT_EQ(pos, s.size());
  EXPECT_EQ(Utf8Length(s), 4u);
  EXPECT_TRUE(IsValidUtf8(s));
  EXPECT_TRUE(IsValidUtf8(""));

  std::string_view bad = "\xE2\x82x";
  pos = 0;
  EXPECT_EQ(NextUtf8CodePoint(bad, &pos), -1);
  EXPECT_EQ(pos, 1u);  // one byte at a time after an error
  EXPECT_FALSE(IsValidUtf8(bad));
  EXPECT_EQ(Utf8Length(bad), 3u);
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));   // U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\x80"));      // overlong NUL
}

}  // namespace
}  // namespace sovai::objstore
