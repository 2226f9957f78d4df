#include "train/chat_data.h"

namespace sovai::train {

using base::Result;
using base::Status;
using base::StatusCode;

Result<std::vector<TextPiece>> RenderChatPieces(const model::ChatTemplate& chat_template,
                                                const nlohmann::json& messages) {
  std::vector<model::ChatMessage> conversation;
  for (const nlohmann::json& m : messages) {
    model::ChatMessage message;
    message.role = m.at("role").get<std::string>();
    message.content =
        m.contains("content") ? nlohmann::ordered_json(m["content"]) : nlohmann::ordered_json("");
    if (m.contains("tool_calls")) message.tool_calls = nlohmann::ordered_json(m["tool_calls"]);
    conversation.push_back(std::move(message));
  }
  SOVAI_ASSIGN_OR_RETURN(model::TrainingRender render,
                         chat_template.RenderForTraining(conversation));
  std::vector<TextPiece> pieces;
  size_t at = 0;
  for (const model::AssistantSpan& span : render.assistant_spans) {
    if (span.begin < at || span.end < span.begin || span.end > render.text.size()) {
      return Status(StatusCode::kInternal, "the chat template's assistant spans overlap");
    }
    if (span.begin > at) pieces.push_back({render.text.substr(at, span.begin - at), false});
    pieces.push_back({render.text.substr(span.begin, span.end - span.begin), true});
    at = span.end;
  }
  if (at < render.text.size()) pieces.push_back({render.text.substr(at), false});
  return pieces;
}

Result<ChatData> LoadChatData(base::Env& env, const std::string& model_dir) {
  ChatData data;
  SOVAI_ASSIGN_OR_RETURN(model::Tokenizer tokenizer,
                         model::Tokenizer::FromFile(env, model_dir + "/tokenizer.json"));
  data.tokenizer = std::make_unique<model::Tokenizer>(std::move(tokenizer));
  const std::string config_path = model_dir + "/tokenizer_config.json";
  if (env.FileExists(config_path)) {
    SOVAI_ASSIGN_OR_RETURN(std::string text,
                           env.ReadFile(config_path, model::kMaxTokenizerConfigBytes));
    auto parsed = model::ChatTemplate::FromTokenizerConfig(text);
    if (!parsed.ok()) {
      return Status(parsed.status().code(), config_path + ": " + parsed.status().message());
    }
    data.chat_template = std::make_shared<model::ChatTemplate>(std::move(*parsed));
  } else {
    data.chat_template =
        std::make_shared<model::ChatTemplate>(model::ChatTemplate::DefaultChatML());
  }
  data.eos_text = data.chat_template->special_tokens().eos_token.value_or("");
  std::shared_ptr<model::ChatTemplate> chat_template = data.chat_template;
  data.render = [chat_template](const nlohmann::json& messages) {
    return RenderChatPieces(*chat_template, messages);
  };
  return data;
}

}  // namespace sovai::train
