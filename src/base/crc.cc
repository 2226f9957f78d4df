#include "base/crc.h"

#include <array>
#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace sovai::base {
namespace {

// tables[k][b] is the CRC of byte b followed by k zero bytes, for slicing-by-8.
template <typename T>
using Tables = std::array<std::array<T, 256>, 8>;

template <typename T>
constexpr Tables<T> MakeTables(T reflected_poly) {
  Tables<T> t{};
  for (unsigned b = 0; b < 256; ++b) {
    T crc = b;
    for (int i = 0; i < 8; ++i) crc = (crc & 1) ? (crc >> 1) ^ reflected_poly : crc >> 1;
    t[0][b] = crc;
  }
  for (unsigned b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
  return t;
}

constexpr Tables<uint32_t> kCrc32Tables = MakeTables<uint32_t>(0xEDB88320u);
constexpr Tables<uint32_t> kCrc32cTables = MakeTables<uint32_t>(0x82F63B78u);
constexpr Tables<uint64_t> kCrc64NvmeTables = MakeTables<uint64_t>(0x9A6C9329AC4BC9B5ull);

uint64_t LoadLittleEndian64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// Raw (un-inverted) CRC update, slicing-by-8.
template <typename T>
T Update(const Tables<T>& t, T crc, const unsigned char* p, size_t n) {
  while (n >= 8) {
    uint64_t word = LoadLittleEndian64(p);
    word ^= crc;  // the CRC register lines up with the first sizeof(T) bytes
    crc = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^
          t[4][(word >> 24) & 0xFF] ^ t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^
          t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFF];
  return crc;
}

const unsigned char* Bytes(std::string_view data) {
  return reinterpret_cast<const unsigned char*>(data.data());
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(std::string_view data, uint32_t crc) {
  const unsigned char* p = Bytes(data);
  size_t n = data.size();
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32(std::string_view data, uint32_t crc) {
  return ~Update<uint32_t>(kCrc32Tables, ~crc, Bytes(data), data.size());
}

uint32_t Crc32c(std::string_view data, uint32_t crc) {
#if defined(__x86_64__)
  if (HasSse42()) return Crc32cSse42(data, crc);
#endif
  return internal::Crc32cPortable(data, crc);
}

uint64_t Crc64Nvme(std::string_view data, uint64_t crc) {
  return ~Update<uint64_t>(kCrc64NvmeTables, ~crc, Bytes(data), data.size());
}

namespace {

// Polynomial arithmetic mod P in the reflected representation (the top bit is x^0), as zlib's
// crc32_combine: crc(A+B) = crc(A) * x^(8 * len(B)) mod P, xor crc(B), with the pre/post
// inversions cancelling out.
template <typename T>
T MultiplyModP(T a, T b, T reflected_poly) {
  constexpr T kTop = T{1} << (sizeof(T) * 8 - 1);
  T product = 0;
  for (T m = kTop; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ reflected_poly : b >> 1;
  }
  return product;
}

template <typename T>
T CombineCrc(T crc_a, T crc_b, uint64_t length_b, T reflected_poly) {
  constexpr T kOne = T{1} << (sizeof(T) * 8 - 1);  // x^0
  // x^(8 * length_b) by squaring: power holds x^(8 * 2^k).
  T power = MultiplyModP<T>(kOne >> 8, kOne, reflected_poly);  // x^8
  T shift = kOne;
  for (uint64_t n = length_b; n != 0; n >>= 1) {
    if (n & 1) shift = MultiplyModP<T>(power, shift, reflected_poly);
    power = MultiplyModP<T>(power, power, reflected_poly);
  }
  return MultiplyModP<T>(shift, crc_a, reflected_poly) ^ crc_b;
}

}  // namespace

uint32_t Crc32Combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return CombineCrc<uint32_t>(crc_a, crc_b, length_b, 0xEDB88320u);
}

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return CombineCrc<uint32_t>(crc_a, crc_b, length_b, 0x82F63B78u);
}

uint64_t Crc64NvmeCombine(uint64_t crc_a, uint64_t crc_b, uint64_t length_b) {
  return CombineCrc<uint64_t>(crc_a, crc_b, length_b, 0x9A6C9329AC4BC9B5ull);
}

std::string ToBigEndianBytes(uint32_t value) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(value >> (24 - 8 * i));
  return out;
}

std::string ToBigEndianBytes(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(value >> (56 - 8 * i));
  return out;
}

namespace internal {

uint32_t Crc32cPortable(std::string_view data, uint32_t crc) {
  return ~Update<uint32_t>(kCrc32cTables, ~crc, Bytes(data), data.size());
}

bool Crc32cUsesHardware() {
#if defined(__x86_64__)
  return HasSse42();
#else
  return false;
#endif
}

}  // namespace internal
}  // namespace sovai::base
