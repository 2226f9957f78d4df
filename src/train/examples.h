// Turns dataset Records (text pieces marked trained or not) into token Examples for packing.
//
// Each piece is encoded on its own and the ids are concatenated, so every token knows whether it
// is trained on without character offsets. Chat templates put their role headers and end-of-turn
// markers in special tokens, which the tokenizer matches before splitting, so encoding by piece
// gives the ids of encoding the whole text at those boundaries; a boundary inside a word could
// differ by a merge, which costs nothing in training (both spellings decode to the same text).
//
// Thread-safety: pure functions over a thread-safe Tokenizer.
#pragma once

#include "base/status.h"
#include "model/tokenizer.h"
#include "train/dataset.h"
#include "train/packing.h"

namespace sovai::train {

// `add_special_tokens` applies the tokenizer's post-processor (its BOS) to the first piece: wanted
// for completion, Alpaca and text records, not for chat templates that write bos_token themselves.
base::Result<Example> TokenizeRecord(const Record& record, const model::Tokenizer& tokenizer,
                                     bool add_special_tokens);

}  // namespace sovai::train
