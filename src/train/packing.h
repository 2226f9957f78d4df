// Packs tokenized training examples into fixed-size rows, as a step's Batch needs them.
//
// Each row holds T tokens. Examples are placed in order, as many as fit into a row (an example that
// does not fit starts the next row; one longer than T is cut to T and counted). Within a row every
// example keeps to itself: `segments` numbers the examples, so attention does not cross them, and
// `positions` restart at 0 for each, as if it were alone. The target of position t is the token
// at t + 1 of the same example when that token is trained on (an assistant or completion token);
// every other target is -1 (not counted). The rest of a row is padding (token 0, target -1).
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sovai::train {

// One tokenized example; trained[i] says whether token i is one the model learns to predict.
struct Example {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> trained;
};

struct PackedRows {
  int64_t rows = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> tokens;     // [rows * seq_len]
  std::vector<int32_t> targets;    // [rows * seq_len], -1 where not counted
  std::vector<int32_t> positions;  // [rows * seq_len]
  std::vector<int32_t> segments;   // [rows * seq_len]
  int64_t counted_targets = 0;
  int64_t examples = 0;   // examples placed
  int64_t truncated = 0;  // of which cut to seq_len
};

// Packs examples[first...] into at most `max_rows` rows; stops at the first example that no longer
// fits. Returns the rows and sets *next to the index of the first example not placed.
PackedRows PackRows(std::span<const Example> examples, size_t first, int64_t seq_len,
                    int64_t max_rows, size_t* next);

}  // namespace sovai::train
