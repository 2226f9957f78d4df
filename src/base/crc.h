// Checksums: CRC32 (IEEE 802.3 / zlib / gzip), CRC32C (Castagnoli; iSCSI, ext4, S3) and CRC64NVME
// (S3 "flexible checksums" default). All three are the reflected, init-all-ones, xorout-all-ones
// variants, with the zlib calling convention for incremental use:
//
//   uint32_t crc = Crc32c(part1);          // or Crc32c(part1, 0)
//   crc = Crc32c(part2, crc);              // == Crc32c(part1 + part2)
//
// i.e. `crc` is the finished CRC of everything before `data` (0 for the empty prefix).
// Check values ("123456789"): CRC32 0xCBF43926, CRC32C 0xE3069283, CRC64NVME 0xAE8B14860A799888.
//
// Implementation: slicing-by-8 tables built at compile time; CRC32C uses the SSE4.2 crc32
// instruction when the CPU has it (checked once at runtime). S3 sends these values base64-encoded
// in big-endian byte order; see ToBigEndianBytes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sovai::base {

uint32_t Crc32(std::string_view data, uint32_t crc = 0);
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);
uint64_t Crc64Nvme(std::string_view data, uint64_t crc = 0);

// The CRC of A followed by B, from CRC(A), CRC(B) and B's length in bytes (zlib's crc32_combine):
// S3's full-object checksum of a multipart upload is made from its parts' CRCs this way, without
// reading the parts again. O(log length_b).
uint32_t Crc32Combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);
uint64_t Crc64NvmeCombine(uint64_t crc_a, uint64_t crc_b, uint64_t length_b);

// The value as big-endian bytes (4 or 8), the form S3's x-amz-checksum-* headers base64-encode.
std::string ToBigEndianBytes(uint32_t value);
std::string ToBigEndianBytes(uint64_t value);

namespace internal {
// The portable table implementation of Crc32c (exposed to test it against the hardware path).
uint32_t Crc32cPortable(std::string_view data, uint32_t crc);
// Whether Crc32c uses the SSE4.2 instruction on this machine.
bool Crc32cUsesHardware();
}  // namespace internal

}  // namespace sovai::base
