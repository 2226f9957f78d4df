#include "train/examples.h"

namespace sovai::train {

base::Result<Example> TokenizeRecord(const Record& record, const model::Tokenizer& tokenizer,
                                     bool add_special_tokens) {
  Example example;
  for (size_t i = 0; i < record.pieces.size(); ++i) {
    const TextPiece& piece = record.pieces[i];
    model::EncodeOptions options;
    options.add_special_tokens = add_special_tokens && i == 0;
    SOVAI_ASSIGN_OR_RETURN(std::vector<model::TokenId> ids, tokenizer.Encode(piece.text, options));
    example.tokens.insert(example.tokens.end(), ids.begin(), ids.end());
    example.trained.insert(example.trained.end(), ids.size(), piece.trained ? 1 : 0);
  }
  return example;
}

}  // namespace sovai::train
