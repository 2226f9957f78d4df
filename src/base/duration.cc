#include "base/duration.h"

#include <string>

#include "base/strings.h"

namespace sovai::base {

Result<int64_t> ParseDurationSeconds(std::string_view text, int64_t max_seconds) {
  const std::string quoted = "'" + std::string(text) + "'";
  const std::string expected = "; use a number with a unit, e.g. 90s, 10m, 2h, 1d or 1h30m";
  if (text.empty()) return InvalidArgumentError("empty duration" + expected);
  int64_t total = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == start) return InvalidArgumentError("invalid duration " + quoted + expected);
    auto number = ParseUint64(text.substr(start, i - start));
    if (!number.ok() || *number > static_cast<uint64_t>(max_seconds)) {
      return InvalidArgumentError("duration " + quoted + " is too long" + expected);
    }
    int64_t unit_s = 1;
    if (i == text.size()) {
      // A bare number is seconds, but only on its own: "1h30" is more likely a typo.
      if (start != 0) {
        return InvalidArgumentError("duration " + quoted + " ends without a unit" + expected);
      }
    } else {
      switch (text[i]) {
        case 's':
          unit_s = 1;
          break;
        case 'm':
          unit_s = 60;
          break;
        case 'h':
          unit_s = 3600;
          break;
        case 'd':
          unit_s = 86400;
          break;
        default:
          return InvalidArgumentError("unknown unit in duration " + quoted + expected);
      }
      ++i;
    }
    total += static_cast<int64_t>(*number) * unit_s;
    if (total > max_seconds) {
      return InvalidArgumentError("duration " + quoted + " is longer than " +
                                  (max_seconds % 86400 == 0
                                       ? std::to_string(max_seconds / 86400) + " days"
                                       : std::to_string(max_seconds) + " s"));
    }
  }
  if (total < 1) return InvalidArgumentError("duration " + quoted + " must be at least 1s");
  return total;
}

}  // namespace sovai::base
