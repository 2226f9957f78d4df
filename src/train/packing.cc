#include "train/packing.h"

#include <algorithm>

namespace sovai::train {

PackedRows PackRows(std::span<const Example> examples, size_t first, int64_t seq_len,
                    int64_t max_rows, size_t* next) {
  PackedRows out;
  out.seq_len = seq_len;
  size_t i = first;
  while (out.rows < max_rows && i < examples.size()) {
    const size_t row_start = out.tokens.size();
    out.tokens.resize(row_start + static_cast<size_t>(seq_len), 0);
    out.targets.resize(row_start + static_cast<size_t>(seq_len), -1);
    out.positions.resize(row_start + static_cast<size_t>(seq_len), 0);
    out.segments.resize(row_start + static_cast<size_t>(seq_len), -1);
    int64_t used = 0;
    int32_t segment = 0;
    while (i < examples.size()) {
      const Example& e = examples[i];
      int64_t length = static_cast<int64_t>(e.tokens.size());
      // Starts a new row unless this one is empty: a cut example gets a row to itself.
      if (used > 0 && used + length > seq_len) break;
      if (length > seq_len) {
        length = seq_len;
        ++out.truncated;
      }
      for (int64_t t = 0; t < length; ++t) {
        size_t at = row_start + static_cast<size_t>(used + t);
        out.tokens[at] = e.tokens[static_cast<size_t>(t)];
        out.positions[at] = static_cast<int32_t>(t);
        out.segments[at] = segment;
        if (t + 1 < length && e.trained[static_cast<size_t>(t + 1)]) {
          out.targets[at] = e.tokens[static_cast<size_t>(t + 1)];
          ++out.counted_targets;
        }
      }
      used += length;
      ++segment;
      ++out.examples;
      ++i;
      if (used >= seq_len) break;
    }
    ++out.rows;
  }
  *next = i;
  return out;
}

}  // namespace sovai::train
