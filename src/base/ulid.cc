#include "base/ulid.h"

#include <chrono>
#include <cstring>

#include "base/crypto.h"

namespace sovai::base {
namespace {

constexpr char kAlphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
constexpr uint64_t kMaxTimestampMs = (uint64_t{1} << 48) - 1;

int DecodeChar(char c) {
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  for (int i = 0; i < 32; ++i) {
    if (kAlphabet[i] == c) return i;
  }
  return -1;
}

std::string Quoted(std::string_view text) {
  constexpr size_t kMaxQuoted = 40;
  std::string out = "'";
  out.append(text.substr(0, kMaxQuoted));
  if (text.size() > kMaxQuoted) out += "...";
  return out + "'";
}

// Adds 1 to the 80-bit random part (bytes 6..15). Returns false if it was all ones (it wraps to 0).
bool IncrementRandom(std::array<uint8_t, 16>& bytes) {
  for (int i = 15; i >= 6; --i) {
    if (++bytes[i] != 0) return true;
  }
  return false;
}

void SetTimestamp(std::array<uint8_t, 16>& bytes, uint64_t timestamp_ms) {
  for (int i = 0; i < 6; ++i) bytes[i] = static_cast<uint8_t>(timestamp_ms >> (40 - 8 * i));
}

}  // namespace

Ulid::Ulid(uint64_t timestamp_ms, uint16_t random_hi, uint64_t random_lo) {
  SOVAI_CHECK_LE(timestamp_ms, kMaxTimestampMs) << "ULID timestamp does not fit in 48 bits";
  SetTimestamp(bytes_, timestamp_ms);
  bytes_[6] = static_cast<uint8_t>(random_hi >> 8);
  bytes_[7] = static_cast<uint8_t>(random_hi);
  for (int i = 0; i < 8; ++i) bytes_[8 + i] = static_cast<uint8_t>(random_lo >> (56 - 8 * i));
}

uint64_t Ulid::timestamp_ms() const {
  uint64_t ts = 0;
  for (int i = 0; i < 6; ++i) ts = ts << 8 | bytes_[i];
  return ts;
}

std::string Ulid::ToString() const {
  // 128 bits as 26 base32 digits: the first digit holds the top 3 bits (hence <= '7').
  std::string out(kUlidTextLength, '0');
  uint64_t hi = 0, lo = 0;
  for (int i = 0; i < 8; ++i) hi = hi << 8 | bytes_[i];
  for (int i = 8; i < 16; ++i) lo = lo << 8 | bytes_[i];
  for (int i = kUlidTextLength - 1; i >= 0; --i) {
    out[i] = kAlphabet[lo & 31];
    lo = (lo >> 5) | (hi << 59);
    hi >>= 5;
  }
  return out;
}

Result<Ulid> ParseUlid(std::string_view text) {
  if (text.size() != kUlidTextLength) {
    return InvalidArgumentError("invalid ULID " + Quoted(text) + ": length " +
                                std::to_string(text.size()) + ", expected 26 characters");
  }
  uint64_t hi = 0, lo = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    int v = DecodeChar(text[i]);
    if (v < 0) {
      return InvalidArgumentError("invalid ULID " + Quoted(text) + ": character '" +
                                  std::string(1, text[i]) + "' at offset " + std::to_string(i) +
                                  " is not Crockford base32 (0-9, A-Z without I L O U)");
    }
    if (i == 0 && v > 7) {
      return InvalidArgumentError("invalid ULID " + Quoted(text) +
                                  ": first character must be 0-7 (the value overflows 128 bits)");
    }
    hi = (hi << 5) | (lo >> 59);
    lo = (lo << 5) | static_cast<uint64_t>(v);
  }
  std::array<uint8_t, 16> bytes{};
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<uint8_t>(hi >> (56 - 8 * i));
    bytes[8 + i] = static_cast<uint8_t>(lo >> (56 - 8 * i));
  }
  return Ulid::FromBytes(bytes);
}

UlidGenerator::UlidGenerator()
    : UlidGenerator(
          [] {
            return std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                .count();
          },
          [](std::span<uint8_t> out) {
            std::string bytes = RandomBytes(out.size());
            std::memcpy(out.data(), bytes.data(), out.size());
          }) {}

UlidGenerator::UlidGenerator(NowUnixMillisFn now_unix_ms, RandomFn random)
    : now_unix_ms_(std::move(now_unix_ms)), random_(std::move(random)) {}

Ulid UlidGenerator::Next() {
  int64_t now = now_unix_ms_();
  SOVAI_CHECK(now >= 0 && static_cast<uint64_t>(now) <= kMaxTimestampMs)
      << "clock reads " << now << " ms, outside the ULID range";
  std::lock_guard<std::mutex> lock(mu_);
  std::array<uint8_t, 16> bytes = last_.bytes();
  uint64_t last_ms = last_.timestamp_ms();
  bool fresh = static_cast<uint64_t>(now) > last_ms || last_ == Ulid();
  if (fresh) {
    SetTimestamp(bytes, static_cast<uint64_t>(now));
    random_(std::span<uint8_t>(bytes.data() + 6, 10));
  } else if (!IncrementRandom(bytes)) {
    SOVAI_CHECK_LT(last_ms, kMaxTimestampMs) << "ULID space exhausted";
    SetTimestamp(bytes, last_ms + 1);
    random_(std::span<uint8_t>(bytes.data() + 6, 10));
  }
  last_ = Ulid::FromBytes(bytes);
  return last_;
}

}  // namespace sovai::base
