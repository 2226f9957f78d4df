#include "base/crc.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace sovai::base {
namespace {

// Bit-at-a-time reference: independent of the table code under test.
template <typename T>
T BitwiseCrc(std::string_view data, T reflected_poly) {
  T crc = ~T{0};
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int i = 0; i < 8; ++i) crc = (crc & 1) ? (crc >> 1) ^ reflected_poly : crc >> 1;
  }
  return ~crc;
}

std::string RandomData(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

TEST(CrcTest, CheckValues) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(internal::Crc32cPortable("123456789", 0), 0xE3069283u);
  EXPECT_EQ(Crc64Nvme("123456789"), 0xAE8B14860A799888ull);
  EXPECT_EQ(Crc32(""), 0u);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc64Nvme(""), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros / ones.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  EXPECT_EQ(Crc32("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
}

TEST(CrcTest, MatchesBitwiseReferenceOnLongBuffers) {
  // Every length mod 8 and every start alignment, then a long buffer.
  std::string data = RandomData(1 << 20, 1);
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63},
                       size_t{1000}, size_t{4097}}) {
      std::string_view piece = std::string_view(data).substr(offset, len);
      ASSERT_EQ(Crc32(piece), BitwiseCrc<uint32_t>(piece, 0xEDB88320u));
      ASSERT_EQ(Crc32c(piece), BitwiseCrc<uint32_t>(piece, 0x82F63B78u));
      ASSERT_EQ(internal::Crc32cPortable(piece, 0), BitwiseCrc<uint32_t>(piece, 0x82F63B78u));
      ASSERT_EQ(Crc64Nvme(piece), BitwiseCrc<uint64_t>(piece, 0x9A6C9329AC4BC9B5ull));
    }
  }
  EXPECT_EQ(Crc32(data), BitwiseCrc<uint32_t>(data, 0xEDB88320u));
  EXPECT_EQ(Crc32c(data), BitwiseCrc<uint32_t>(data, 0x82F63B78u));
  EXPECT_EQ(Crc64Nvme(data), BitwiseCrc<uint64_t>(data, 0x9A6C9329AC4BC9B5ull));
}

TEST(CrcTest, IncrementalEqualsOneShotOverRandomSplits) {
  std::string data = RandomData(100'000, 2);
  const uint32_t crc32 = Crc32(data);
  const uint32_t crc32c = Crc32c(data);
  const uint64_t crc64 = Crc64Nvme(data);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    uint32_t a = 0, b = 0, p = 0;
    uint64_t c = 0;
    size_t pos = 0;
    while (pos < data.size()) {
      size_t len = std::min<size_t>(data.size() - pos, rng() % 5000);
      std::string_view piece = std::string_view(data).substr(pos, len);
      a = Crc32(piece, a);
      b = Crc32c(piece, b);
      p = internal::Crc32cPortable(piece, p);
      c = Crc64Nvme(piece, c);
      pos += len;
    }
    ASSERT_EQ(a, crc32);
    ASSERT_EQ(b, crc32c);
    ASSERT_EQ(p, crc32c);
    ASSERT_EQ(c, crc64);
  }
}

TEST(CrcTest, CombineEqualsCrcOfTheConcatenation) {
  std::mt19937 rng(7);
  for (size_t len_a : {0u, 1u, 7u, 100u, 4096u}) {
    for (size_t len_b : {0u, 1u, 8u, 33u, 70000u}) {
      std::string a(len_a, '\0'), b(len_b, '\0');
      for (char& c : a) c = static_cast<char>(rng());
      for (char& c : b) c = static_cast<char>(rng());
      EXPECT_EQ(Crc32Combine(Crc32(a), Crc32(b), b.size()), Crc32(a + b));
      EXPECT_EQ(Crc32cCombine(Crc32c(a), Crc32c(b), b.size()), Crc32c(a + b));
      EXPECT_EQ(Crc64NvmeCombine(Crc64Nvme(a), Crc64Nvme(b), b.size()), Crc64Nvme(a + b));
    }
  }
}

TEST(CrcTest, BigEndianBytes) {
  EXPECT_EQ(ToBigEndianBytes(uint32_t{0xE3069283}), std::string("\xE3\x06\x92\x83", 4));
  EXPECT_EQ(ToBigEndianBytes(uint64_t{0xAE8B14860A799888}),
            std::string("\xAE\x8B\x14\x86\x0A\x79\x98\x88", 8));
}

TEST(CrcTest, ReportsHardwarePath) {
  // Informational: both paths are checked against the reference above.
  RecordProperty("crc32c_hardware", internal::Crc32cUsesHardware() ? "yes" : "no");
}

}  // namespace
}  // namespace sovai::base
