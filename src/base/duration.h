// Durations as people type them on command lines: "90s", "10m", "2h", "1d", "1h30m", or a bare
// number of seconds.
//
//   SOVAI_ASSIGN_OR_RETURN(int64_t seconds, ParseDurationSeconds("1h30m", 366LL * 86400));
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace sovai::base {

// Seconds of `text`: one or more <digits><unit> with unit s, m, h or d, or a bare number of
// seconds alone ("1h30" is refused: more likely a typo). At least 1 s and at most `max_seconds`.
// InvalidArgument otherwise, quoting the text and saying what is expected.
Result<int64_t> ParseDurationSeconds(std::string_view text, int64_t max_seconds);

}  // namespace sovai::base
