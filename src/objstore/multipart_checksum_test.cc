// Checksums of multipart objects: composite and full-object values against ones computed
// independently over the whole data.
#include "objstore/multipart_checksum.h"

#include <gtest/gtest.h>

#include "base/crc.h"
#include "base/crypto.h"

namespace sovai::objstore {
namespace {

TEST(MultipartChecksumTest, FullObjectIsTheCrcOfTheWholeObject) {
  const std::string a(5 << 20, 'a'), b = "the last part";
  for (const char* algorithm : {"CRC32", "CRC32C", "CRC64NVME"}) {
    const uint32_t bit = std::string(algorithm) == "CRC32"    ? kCrc32
                         : std::string(algorithm) == "CRC32C" ? kCrc32c
                                                              : kCrc64Nvme;
    Checksums c = MultipartChecksum(
        algorithm, "FULL_OBJECT",
        {{a.size(), ComputeChecksums(a, bit)}, {b.size(), ComputeChecksums(b, bit)}});
    Checksums whole = ComputeChecksums(a + b, bit);
    EXPECT_EQ(c.type, "FULL_OBJECT");
    EXPECT_EQ(c.crc32 + c.crc32c + c.crc64nvme, whole.crc32 + whole.crc32c + whole.crc64nvme)
        << algorithm;
  }
}

TEST(MultipartChecksumTest, CompositeIsTheChecksumOfThePartChecksums) {
  const std::string a = "part one", b = "part two";
  Checksums c = MultipartChecksum(
      "SHA256", "COMPOSITE",
      {{a.size(), ComputeChecksums(a, kSha256)}, {b.size(), ComputeChecksums(b, kSha256)}});
  EXPECT_EQ(c.sha256, base::Base64Encode(base::Sha256(base::Sha256(a) + base::Sha256(b))) + "-2");
  EXPECT_EQ(c.type, "COMPOSITE");
  // Uploads stored before the type was recorded are composite.
  EXPECT_EQ(MultipartChecksum("SHA256", "", {{a.size(), ComputeChecksums(a, kSha256)}}).type,
            "COMPOSITE");
  // A part without the algorithm's value, or a combination S3 does not have: nothing.
  EXPECT_TRUE(MultipartChecksum("CRC32", "COMPOSITE", {{a.size(), {}}}).empty());
  EXPECT_TRUE(
      MultipartChecksum("SHA1", "FULL_OBJECT", {{a.size(), ComputeChecksums(a, kSha1)}}).empty());
}

TEST(MultipartChecksumTest, TypesAsS3AllowsThem) {
  EXPECT_EQ(*CheckMultipartChecksumType("crc32", ""), "COMPOSITE");
  EXPECT_EQ(*CheckMultipartChecksumType("CRC64NVME", ""), "FULL_OBJECT");
  EXPECT_EQ(*CheckMultipartChecksumType("CRC32C", "full_object"), "FULL_OBJECT");
  EXPECT_EQ(*CheckMultipartChecksumType("", ""), "");
  for (auto [algorithm, type] :
       {std::pair{"", "COMPOSITE"}, std::pair{"SHA256", "FULL_OBJECT"},
        std::pair{"CRC64NVME", "COMPOSITE"}, std::pair{"CRC32", "BOTH"}, std::pair{"MD5", ""}}) {
    auto r = CheckMultipartChecksumType(algorithm, type);
    ASSERT_FALSE(r.ok()) << algorithm << " " << type;
    EXPECT_EQ(r.error().code, S3Code::kInvalidRequest);
  }
}

}  // namespace
}  // namespace sovai::objstore
