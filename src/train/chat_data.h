// What turns dataset text into tokens for a given model directory: its tokenizer, its chat
// template (tokenizer_config.json's, or the built-in ChatML one) as a RenderChat for the dataset
// loader, and the text of its EOS token, which completion and text examples end with.
//
// Thread-safety: immutable after loading.
#pragma once

#include <memory>
#include <string>

#include "base/env.h"
#include "base/status.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "train/dataset.h"

namespace sovai::train {

struct ChatData {
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::shared_ptr<model::ChatTemplate> chat_template;
  RenderChat render;
  std::string eos_text;
};

// Loads <model_dir>/tokenizer.json (required) and <model_dir>/tokenizer_config.json (optional).
base::Result<ChatData> LoadChatData(base::Env& env, const std::string& model_dir);

// Renders `messages` with `chat_template` into pieces: the assistant messages' spans trained.
base::Result<std::vector<TextPiece>> RenderChatPieces(const model::ChatTemplate& chat_template,
                                                      const nlohmann::json& messages);

}  // namespace sovai::train
