// Named limits of the sovai-engine commands (the libraries they call have their own).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sovai::engine {

// `eval`: the data file is read whole; an evaluation set is hundreds to thousands of
// conversations, so 64 MiB and 100,000 examples are far above any real one while keeping the
// parsed examples' memory bounded.
inline constexpr uint64_t kMaxEvalDataBytes = 64ull << 20;
inline constexpr size_t kMaxEvalExamples = 100'000;
// `eval --max-tokens` default: long enough for a command, a label or a short answer; longer
// references need a larger value (an answer cut short is scored as a miss).
inline constexpr int64_t kDefaultEvalMaxTokens = 256;

}  // namespace sovai::engine
