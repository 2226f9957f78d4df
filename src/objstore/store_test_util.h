// What the storage engine's tests share (store_test.cc, store_fault_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sovai::objstore::store_testing {

// Bodies are read in pieces of an odd size, so that reads straddle every boundary.
inline constexpr size_t kBodyPieceBytes = 7919;

// n bytes of a deterministic pseudo-random sequence; different seeds give different bytes.
inline std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

}  // namespace sovai::objstore::store_testing
