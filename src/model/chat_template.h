// Chat templates of Hugging Face tokenizers: turning a conversation into the exact prompt text a
// model was trained on, for inference (Render) and for training (RenderForTraining, which also
// locates each assistant message in the text for the loss mask).
//
//   SOVAI_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::FromTokenizerConfig(config_text));
//   SOVAI_ASSIGN_OR_RETURN(std::string prompt,
//                          t.Render({ChatMessage::Text("user", "Hi!")}, nullptr, true));
//
// The template comes from tokenizer_config.json: `chat_template` as one string, or the list
// form [{"name": "default", "template": ...}, {"name": "tool_use", ...}] (the "tool_use" one is
// used when tools are given, else "default", as transformers does). A tokenizer without a
// template gets the built-in ChatML template (kDefaultChatMLTemplate; has_own_template() tells).
// Special tokens (bos_token, eos_token, unk_token, pad_token) are read as strings or as
// {"content": ...} objects and passed to the template as variables.
//
// Rendering follows transformers' apply_chat_template: the variables are `messages`, `tools`
// (null when there are none), `documents` (null), `add_generation_prompt`, the special tokens,
// then any extra variables (which may override special tokens but not the others). The
// interpreter is jinja.h; its errors (syntax, raise_exception, limits) pass through unchanged.
//
// RenderForTraining: with `{% generation %}` blocks in the template, their output is the span
// of each assistant message (transformers' return_assistant_tokens_mask). Otherwise spans come
// from rendering prefixes of the conversation (see docs/formats/chat-templates.md): the text of
// messages[0..i) with the generation prompt must be a prefix of the text of messages[0..i],
// which must be a prefix of the text of the whole conversation; the span of assistant message
// i is the difference. A template that renders earlier turns differently depending on what
// follows them (for example one that always appends an assistant header) is not prefix-stable:
// that is an error (FailedPrecondition) naming the message, never a wrong mask.
//
// Thread-safety: immutable after construction; all methods may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/jinja.h"

namespace sovai::model {

// transformers' historical default (ChatML), used when a tokenizer has no chat template.
inline constexpr std::string_view kDefaultChatMLTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

// tokenizer_config.json files carry every added token and can reach a few MiB.
inline constexpr size_t kMaxTokenizerConfigBytes = 32u << 20;  // 32 MiB
// RenderForTraining renders the conversation once per assistant message and twice per prefix.
inline constexpr size_t kMaxTrainingMessages = 1024;

struct ChatMessage {
  std::string role;
  // Usually a string; null for an assistant turn that only calls tools; or a list of content
  // parts ({"type": "text", "text": ...}) for templates that accept them.
  nlohmann::ordered_json content = "";
  // Null (the key is absent from the message) or an array like
  // [{"type": "function", "function": {"name": "f", "arguments": {...}}}].
  nlohmann::ordered_json tool_calls = nullptr;
  // Null, or an object of further fields (tool_call_id, name, ...).
  nlohmann::ordered_json extra = nullptr;

  static ChatMessage Text(std::string role, std::string content);
  // {"role", "content", "tool_calls" (if not null), extra fields...}.
  nlohmann::ordered_json ToJson() const;
};

struct SpecialTokens {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> unk_token;
  std::optional<std::string> pad_token;
};

// An assistant message's part of the rendered text: bytes [begin, end).
struct AssistantSpan {
  size_t message_index = 0;  // into the messages given (0 for generation blocks: see below)
  size_t begin = 0;
  size_t end = 0;
  friend bool operator==(const AssistantSpan&, const AssistantSpan&) = default;
};

struct TrainingRender {
  std::string text;
  // In text order. From generation blocks, message_index is the index of the n-th assistant
  // message for the n-th block when the counts match, else the block's ordinal.
  std::vector<AssistantSpan> assistant_spans;
  enum class Method : uint8_t { kGenerationTags, kPrefixes } method = Method::kPrefixes;
};

struct ChatTemplateOptions {
  jinja::TemplateLimits template_limits;
  jinja::RenderOptions render;  // limits and the strftime_now clock
  size_t max_config_bytes = kMaxTokenizerConfigBytes;
  size_t max_training_messages = kMaxTrainingMessages;
  // Pick this named template instead of the default/tool_use rule (list form only).
  std::optional<std::string> template_name;
};

class ChatTemplate {
 public:
  // From the text of tokenizer_config.json. Errors: InvalidArgument for malformed JSON or a
  // malformed chat_template/special-token field (naming it), the template's own parse errors
  // (naming the template and line:column); ResourceExhausted past max_config_bytes.
  static base::Result<ChatTemplate> FromTokenizerConfig(std::string_view json_text,
                                                        const ChatTemplateOptions& options = {});
  static base::Result<ChatTemplate> FromTokenizerConfigJson(
      const nlohmann::json& config, const ChatTemplateOptions& options = {});
  // One template string with the given special tokens.
  static base::Result<ChatTemplate> FromString(std::string_view template_text,
                                               SpecialTokens tokens = {},
                                               const ChatTemplateOptions& options = {});
  // The built-in ChatML template.
  static ChatTemplate DefaultChatML(SpecialTokens tokens = {},
                                    const ChatTemplateOptions& options = {});

  // The variables a render sees (see the header comment). `messages` is a JSON array of
  // message objects. Errors: InvalidArgument when messages is not an array, tools is neither
  // null nor an array, or extra is not an object or sets a reserved variable.
  base::Result<nlohmann::ordered_json> BuildContext(const nlohmann::ordered_json& messages,
                                                    const nlohmann::ordered_json& tools,
                                                    bool add_generation_prompt,
                                                    const nlohmann::ordered_json& extra) const;

  base::Result<std::string> Render(const std::vector<ChatMessage>& messages,
                                   const nlohmann::ordered_json& tools = nullptr,
                                   bool add_generation_prompt = false,
                                   const nlohmann::ordered_json& extra = nullptr) const;
  // Messages as a JSON array (OpenAI-style message objects).
  base::Result<std::string> RenderJson(const nlohmann::ordered_json& messages,
                                       const nlohmann::ordered_json& tools = nullptr,
                                       bool add_generation_prompt = false,
                                       const nlohmann::ordered_json& extra = nullptr) const;

  // The conversation as trained on, with the span of every assistant message. Errors: those of
  // Render; FailedPrecondition when the template is not prefix-stable (see above);
  // ResourceExhausted past max_training_messages.
  base::Result<TrainingRender> RenderForTraining(
      const std::vector<ChatMessage>& messages, const nlohmann::ordered_json& tools = nullptr,
      const nlohmann::ordered_json& extra = nullptr) const;

  // False when the tokenizer had no chat template and the built-in ChatML one is used.
  bool has_own_template() const { return has_own_template_; }
  // Names of the templates: {"default"} for the single-string form.
  std::vector<std::string> template_names() const;
  // The template a render with (or without) tools uses.
  base::Result<const jinja::Template*> Select(bool with_tools) const;
  const SpecialTokens& special_tokens() const { return tokens_; }

 private:
  ChatTemplate() = default;
  base::Result<jinja::RenderResult> RenderRaw(const nlohmann::ordered_json& messages,
                                              const nlohmann::ordered_json& tools,
                                              bool add_generation_prompt,
                                              const nlohmann::ordered_json& extra) const;

  std::map<std::string, jinja::Template> templates_;
  SpecialTokens tokens_;
  ChatTemplateOptions options_;
  bool has_own_template_ = true;
};

}  // namespace sovai::model
