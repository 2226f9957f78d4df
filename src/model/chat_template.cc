#include "model/chat_template.h"

#include <algorithm>

#include "base/json.h"

namespace sovai::model {

namespace {

// A message appended after the last assistant message to check that its rendering does not
// depend on being last (see RenderForTraining).
constexpr std::string_view kProbeContent = "sovai prefix-stability probe";

base::Result<std::optional<std::string>> ReadSpecialToken(const nlohmann::json& config,
                                                          std::string_view field) {
  auto it = config.find(std::string(field));
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) {
      return std::optional<std::string>(content->get<std::string>());
    }
  }
  return base::InvalidArgumentError("tokenizer_config field '" + std::string(field) +
                                    "' must be a string or an object with a string 'content'");
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.substr(0, prefix.size()) == prefix;
}

}  // namespace

ChatMessage ChatMessage::Text(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

nlohmann::ordered_json ChatMessage::ToJson() const {
  nlohmann::ordered_json m = nlohmann::ordered_json::object();
  m["role"] = role;
  m["content"] = content;
  if (!tool_calls.is_null()) m["tool_calls"] = tool_calls;
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) m[it.key()] = it.value();
  }
  return m;
}

base::Result<ChatTemplate> ChatTemplate::FromTokenizerConfig(std::string_view json_text,
                                                             const ChatTemplateOptions& options) {
  if (json_text.size() > options.max_config_bytes) {
    return base::ResourceExhaustedError(
        "tokenizer_config.json is " + std::to_string(json_text.size()) +
        " bytes, more than the limit of " + std::to_string(options.max_config_bytes));
  }
  base::JsonLimits limits;
  limits.max_bytes = options.max_config_bytes;
  auto config = base::ParseJson(json_text, limits);
  if (!config.ok()) return config.status().WithContext("tokenizer_config.json");
  return FromTokenizerConfigJson(*config, options);
}

base::Result<ChatTemplate> ChatTemplate::FromTokenizerConfigJson(
    const nlohmann::json& config, const ChatTemplateOptions& options) {
  if (!config.is_object()) {
    return base::InvalidArgumentError("tokenizer_config.json must hold a JSON object");
  }
  SpecialTokens tokens;
  SOVAI_ASSIGN_OR_RETURN(tokens.bos_token, ReadSpecialToken(config, "bos_token"));
  SOVAI_ASSIGN_OR_RETURN(tokens.eos_token, ReadSpecialToken(config, "eos_token"));
  SOVAI_ASSIGN_OR_RETURN(tokens.unk_token, ReadSpecialToken(config, "unk_token"));
  SOVAI_ASSIGN_OR_RETURN(tokens.pad_token, ReadSpecialToken(config, "pad_token"));

  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null() || (it->is_array() && it->empty())) {
    return DefaultChatML(std::move(tokens), options);
  }
  ChatTemplate result;
  result.tokens_ = std::move(tokens);
  result.options_ = options;
  auto add = [&](const std::string& name, const std::string& text) -> base::Status {
    if (result.templates_.count(name) != 0) {
      return base::InvalidArgumentError("tokenizer_config chat_template lists the name '" + name +
                                        "' twice");
    }
    auto parsed = jinja::Template::Parse(text, options.template_limits);
    if (!parsed.ok()) return parsed.status().WithContext("chat_template '" + name + "'");
    result.templates_.emplace(name, std::move(*parsed));
    return {};
  };
  if (it->is_string()) {
    SOVAI_RETURN_IF_ERROR(add("default", it->get<std::string>()));
  } else if (it->is_array()) {
    for (const nlohmann::json& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
          !entry.contains("template") || !entry["template"].is_string()) {
        return base::InvalidArgumentError(
            "tokenizer_config chat_template list entries must be {\"name\": string, "
            "\"template\": string} objects");
      }
      SOVAI_RETURN_IF_ERROR(
          add(entry["name"].get<std::string>(), entry["template"].get<std::string>()));
    }
  } else {
    return base::InvalidArgumentError(
        "tokenizer_config field 'chat_template' must be a string or a list of {name, template} "
        "objects");
  }
  return result;
}

base::Result<ChatTemplate> ChatTemplate::FromString(std::string_view template_text,
                                                    SpecialTokens tokens,
                                                    const ChatTemplateOptions& options) {
  ChatTemplate result;
  result.tokens_ = std::move(tokens);
  result.options_ = options;
  auto parsed = jinja::Template::Parse(template_text, options.template_limits);
  if (!parsed.ok()) return parsed.status().WithContext("chat_template");
  result.templates_.emplace("default", std::move(*parsed));
  return result;
}

ChatTemplate ChatTemplate::DefaultChatML(SpecialTokens tokens, const ChatTemplateOptions& options) {
  ChatTemplate result;
  result.tokens_ = std::move(tokens);
  result.options_ = options;
  result.has_own_template_ = false;
  auto parsed = jinja::Template::Parse(kDefaultChatMLTemplate);
  SOVAI_CHECK(parsed.ok()) << parsed.status();
  result.templates_.emplace("default", std::move(*parsed));
  return result;
}

std::vector<std::string> ChatTemplate::template_names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : templates_) names.push_back(name);
  return names;
}

base::Result<const jinja::Template*> ChatTemplate::Select(bool with_tools) const {
  auto names = [&] {
    std::string list;
    for (const auto& [name, t] : templates_) list += (list.empty() ? "" : ", ") + name;
    return list;
  };
  if (options_.template_name) {
    auto it = templates_.find(*options_.template_name);
    if (it == templates_.end()) {
      return base::NotFoundError("no chat template named '" + *options_.template_name +
                                 "' (the tokenizer has: " + names() + ")");
    }
    return &it->second;
  }
  if (with_tools) {
    auto it = templates_.find("tool_use");
    if (it != templates_.end()) return &it->second;
  }
  auto it = templates_.find("default");
  if (it != templates_.end()) return &it->second;
  return base::FailedPreconditionError("the tokenizer has several chat templates (" + names() +
                                       ") and none named 'default'; choose one with template_name");
}

base::Result<nlohmann::ordered_json> ChatTemplate::BuildContext(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
    bool add_generation_prompt, const nlohmann::ordered_json& extra) const {
  if (!messages.is_array()) return base::InvalidArgumentError("messages must be a JSON array");
  for (const auto& m : messages) {
    if (!m.is_object()) return base::InvalidArgumentError("each message must be a JSON object");
  }
  if (!tools.is_null() && !tools.is_array()) {
    return base::InvalidArgumentError("tools must be null or a JSON array");
  }
  if (!extra.is_null() && !extra.is_object()) {
    return base::InvalidArgumentError("extra template variables must be a JSON object");
  }
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  auto put = [&](const char* name, const std::optional<std::string>& token) {
    if (token) ctx[name] = *token;
  };
  put("bos_token", tokens_.bos_token);
  put("eos_token", tokens_.eos_token);
  put("unk_token", tokens_.unk_token);
  put("pad_token", tokens_.pad_token);
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (it.key() == "messages" || it.key() == "tools" || it.key() == "documents" ||
          it.key() == "add_generation_prompt") {
        return base::InvalidArgumentError("extra template variable '" + it.key() +
                                          "' is reserved (pass it as a Render argument)");
      }
      ctx[it.key()] = it.value();
    }
  }
  return ctx;
}

base::Result<jinja::RenderResult> ChatTemplate::RenderRaw(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
    bool add_generation_prompt, const nlohmann::ordered_json& extra) const {
  SOVAI_ASSIGN_OR_RETURN(nlohmann::ordered_json ctx,
                         BuildContext(messages, tools, add_generation_prompt, extra));
  SOVAI_ASSIGN_OR_RETURN(const jinja::Template* tpl, Select(!tools.is_null()));
  SOVAI_ASSIGN_OR_RETURN(jinja::Value vars, jinja::FromJson(ctx));
  return tpl->RenderValues(vars.dict(), options_.render);
}

base::Result<std::string> ChatTemplate::RenderJson(const nlohmann::ordered_json& messages,
                                                   const nlohmann::ordered_json& tools,
                                                   bool add_generation_prompt,
                                                   const nlohmann::ordered_json& extra) const {
  SOVAI_ASSIGN_OR_RETURN(jinja::RenderResult r,
                         RenderRaw(messages, tools, add_generation_prompt, extra));
  return std::move(r.text);
}

namespace {

nlohmann::ordered_json MessagesToJson(const std::vector<ChatMessage>& messages, size_t count) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < count && i < messages.size(); ++i) out.push_back(messages[i].ToJson());
  return out;
}

}  // namespace

base::Result<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                               const nlohmann::ordered_json& tools,
                                               bool add_generation_prompt,
                                               const nlohmann::ordered_json& extra) const {
  return RenderJson(MessagesToJson(messages, messages.size()), tools, add_generation_prompt, extra);
}

base::Result<TrainingRender> ChatTemplate::RenderForTraining(
    const std::vector<ChatMessage>& messages, const nlohmann::ordered_json& tools,
    const nlohmann::ordered_json& extra) const {
  if (messages.size() > options_.max_training_messages) {
    return base::ResourceExhaustedError("conversation has " + std::to_string(messages.size()) +
                                        " messages, more than max_training_messages (" +
                                        std::to_string(options_.max_training_messages) + ")");
  }
  std::vector<size_t> assistant;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "assistant") assistant.push_back(i);
  }
  SOVAI_ASSIGN_OR_RETURN(const jinja::Template* tpl, Select(!tools.is_null()));
  // The variables are converted once; each render below swaps in a prefix of the messages.
  nlohmann::ordered_json probe_messages = MessagesToJson(messages, messages.size());
  probe_messages.push_back(ChatMessage::Text("user", std::string(kProbeContent)).ToJson());
  SOVAI_ASSIGN_OR_RETURN(nlohmann::ordered_json ctx_json,
                         BuildContext(probe_messages, tools, false, extra));
  SOVAI_ASSIGN_OR_RETURN(jinja::Value ctx, jinja::FromJson(ctx_json));
  const jinja::ValueList& all = ctx.dict().Find("messages")->list_items();
  auto render = [&](size_t count, bool add_generation_prompt) {
    jinja::ValueDict vars = ctx.dict();
    vars.Set("messages", jinja::Value::List(jinja::ValueList(
                             all.begin(), all.begin() + static_cast<ptrdiff_t>(count))));
    vars.Set("add_generation_prompt", jinja::Value::Bool(add_generation_prompt));
    return tpl->RenderValues(vars, options_.render);
  };

  SOVAI_ASSIGN_OR_RETURN(jinja::RenderResult full, render(messages.size(), false));
  TrainingRender result;
  result.text = std::move(full.text);
  if (tpl->uses_generation()) {
    result.method = TrainingRender::Method::kGenerationTags;
    const bool matched = full.generation_spans.size() == assistant.size();
    for (size_t k = 0; k < full.generation_spans.size(); ++k) {
      const jinja::GenerationSpan& s = full.generation_spans[k];
      if (s.begin == s.end) continue;
      result.assistant_spans.push_back(AssistantSpan{matched ? assistant[k] : k, s.begin, s.end});
    }
    return result;
  }

  result.method = TrainingRender::Method::kPrefixes;
  auto not_stable = [&](size_t i, const std::string& why) {
    return base::FailedPreconditionError(
        "chat template is not prefix-stable at message " + std::to_string(i) + " (" +
        messages[i].role + "): " + why +
        ", so the assistant span cannot be located; use a template with {% generation %} "
        "blocks, or one that renders each turn the same whatever follows it");
  };
  for (size_t i : assistant) {
    SOVAI_ASSIGN_OR_RETURN(jinja::RenderResult prompt, render(i, true));
    SOVAI_ASSIGN_OR_RETURN(jinja::RenderResult upto, render(i + 1, false));
    if (!StartsWith(result.text, upto.text)) {
      return not_stable(i, "the text of messages[0.." + std::to_string(i) +
                               "] is not a prefix of the text of the whole conversation");
    }
    if (!StartsWith(upto.text, prompt.text)) {
      return not_stable(i, "the text of messages[0.." + std::to_string(i) +
                               ") with the generation prompt is not a prefix of the text "
                               "including the message");
    }
    if (i + 1 == messages.size()) {
      // The last message's text is trivially a prefix of the whole; check that it does not
      // change when a turn follows (templates that always append an assistant header do).
      auto followed = render(messages.size() + 1, false);
      // A template may legitimately refuse the probe (role rules); then nothing is learned.
      if (followed.ok() && !StartsWith(followed->text, upto.text)) {
        return not_stable(i, "its text changes when another message follows it");
      }
    }
    result.assistant_spans.push_back(AssistantSpan{i, prompt.text.size(), upto.text.size()});
  }
  return result;
}

}  // namespace sovai::model
