// ULIDs (https://github.com/ulid/spec): 128-bit ids made of a 48-bit Unix-millisecond timestamp
// and 80 random bits, written as 26 Crockford base32 characters ("01ARZ3NDEKTSV4RRFFQ69G5FAV").
// Their text sorts like their time, so object versions, jobs and audit events listed by id come
// out in creation order.
//
// Thread-safety: Ulid is a value. UlidGenerator::Next is thread-safe.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace sovai::base {

inline constexpr size_t kUlidTextLength = 26;

class Ulid {
 public:
  // The all-zero id "00000000000000000000000000".
  Ulid() = default;
  // `timestamp_ms` must fit in 48 bits (SOVAI_CHECK); `random` holds the low 80 bits.
  Ulid(uint64_t timestamp_ms, uint16_t random_hi, uint64_t random_lo);

  static Ulid FromBytes(const std::array<uint8_t, 16>& bytes) { return Ulid(bytes); }

  uint64_t timestamp_ms() const;
  // Big-endian: bytes 0..5 are the timestamp, 6..15 the random part.
  const std::array<uint8_t, 16>& bytes() const { return bytes_; }
  // The canonical 26-character uppercase text.
  std::string ToString() const;

  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 misfires on defaulted <=>
  friend auto operator<=>(const Ulid&, const Ulid&) = default;

 private:
  explicit Ulid(const std::array<uint8_t, 16>& bytes) : bytes_(bytes) {}
  std::array<uint8_t, 16> bytes_{};
};

// Parses the 26-character text. Letters are accepted in either case (ToString gives the
// canonical uppercase form; compare and store that). Errors, all InvalidArgument quoting the
// input: wrong length; a character outside Crockford base32 (which excludes I, L, O, U); a first
// character above '7' (the value would overflow 128 bits).
Result<Ulid> ParseUlid(std::string_view text);

// Makes ULIDs that increase strictly, even within one millisecond and across a clock that steps
// backwards: when the clock reads at or before the last id's millisecond, the new id keeps that
// millisecond and adds 1 to the random part; if the random part is all ones, it moves on to the
// next millisecond instead of failing (so ids never collide and never go backwards, at the cost
// of a timestamp that can run ahead of the clock by a millisecond under extreme load).
class UlidGenerator {
 public:
  using NowUnixMillisFn = std::function<int64_t()>;
  using RandomFn = std::function<void(std::span<uint8_t> out)>;

  // The system wall clock and OpenSSL's CSPRNG.
  UlidGenerator();
  // Injected clock and randomness (tests, fakes). Both must be callable from any thread.
  UlidGenerator(NowUnixMillisFn now_unix_ms, RandomFn random);

  Ulid Next();

 private:
  NowUnixMillisFn now_unix_ms_;
  RandomFn random_;
  std::mutex mu_;  // guards last_
  Ulid last_;
};

}  // namespace sovai::base
