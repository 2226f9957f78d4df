// ChatTemplate (chat_template.h): loading tokenizer_config.json, the render variables, named
// templates, the built-in ChatML template, and the training spans.
//
// Expected prompts for real templates are the outputs published by projects that generated
// them with transformers' apply_chat_template: the six-message conversation of llama.cpp's
// tests/test-chat-template.cpp (ChatML, Llama 3) and of mistral.rs's chat-template tests
// (Llama 2), and the EXAMPLE_CHAT targets of huggingface.js packages/jinja/test/e2e.test.js
// (Mistral 7B Instruct v0.1).
#include "model/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace sovai::model {
namespace {

using base::StatusCode;
using Json = nlohmann::ordered_json;

std::string ReadTestTemplate(const std::string& name) {
  std::ifstream in(std::string(SOVAI_TEMPLATE_TESTDATA_DIR) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The conversation of llama.cpp's and mistral.rs's chat-template tests.
std::vector<ChatMessage> SixMessages() {
  return {
      ChatMessage::Text("system", "You are a helpful assistant"),
      ChatMessage::Text("user", "Hello"),
      ChatMessage::Text("assistant", "Hi there"),
      ChatMessage::Text("user", "Who are you"),
      ChatMessage::Text("assistant", "   I am an assistant   "),
      ChatMessage::Text("user", "Another question"),
  };
}

// huggingface.js e2e EXAMPLE_CHAT.
std::vector<ChatMessage> ExampleChat() {
  return {
      ChatMessage::Text("user", "Hello, how are you?"),
      ChatMessage::Text("assistant", "I'm doing great. How can I help you today?"),
      ChatMessage::Text("user", "I'd like to show off how chat templating works!"),
  };
}

constexpr std::string_view kLlama3BaseTemplate =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}";

TEST(ChatTemplateTest, RendersPublishedPromptsOfRealTemplates) {
  ChatTemplate chatml = ChatTemplate::DefaultChatML();
  auto text = chatml.Render(SixMessages(), nullptr, true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello"
            "<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are "
            "you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
            "<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n");

  auto llama3 = ChatTemplate::FromString(kLlama3BaseTemplate, SpecialTokens{.bos_token = ""});
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  text = llama3->Render(SixMessages(), nullptr, true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(
      *text,
      "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>"
      "assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>"
      "\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an "
      "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question"
      "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");

  SpecialTokens s_tokens{.bos_token = "<s>", .eos_token = "</s>"};
  auto llama2 = ChatTemplate::FromString(ReadTestTemplate("llama2_chat.jinja"), s_tokens);
  ASSERT_TRUE(llama2.ok()) << llama2.status();
  text = llama2->Render(SixMessages(), nullptr, true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there "
            "</s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question "
            "[/INST]");

  auto mistral =
      ChatTemplate::FromString(ReadTestTemplate("mistral_instruct_v0_1.jinja"), s_tokens);
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  text = mistral->Render(ExampleChat());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<s>[INST] Hello, how are you? [/INST]I'm doing great. How can I help you today?</s> "
            "[INST] I'd like to show off how chat templating works! [/INST]");
}

TEST(ChatTemplateTest, Llama2AlternationErrorComesFromTheTemplate) {
  auto llama2 = ChatTemplate::FromString(ReadTestTemplate("llama2_chat.jinja"),
                                         SpecialTokens{.bos_token = "<s>", .eos_token = "</s>"});
  ASSERT_TRUE(llama2.ok());
  auto text = llama2->Render({ChatMessage::Text("user", "a"), ChatMessage::Text("user", "b")});
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().message().find(
                "template raised an exception at 1:329: Conversation roles must alternate "
                "user/assistant/user/assistant/..."),
            std::string::npos)
      << text.status();
}

TEST(ChatTemplateTest, LoadsTokenizerConfigForms) {
  // Special tokens as AddedToken objects, the template as a string.
  auto t = ChatTemplate::FromTokenizerConfig(R"({
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
    "eos_token": "</s>", "pad_token": null, "unk_token": "<unk>",
    "chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}{{ unk_token }}[{{ pad_token }}]",
    "added_tokens_decoder": {"0": {"content": "<unk>"}}
  })");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->has_own_template());
  EXPECT_EQ(t->special_tokens().bos_token, "<s>");
  EXPECT_EQ(t->special_tokens().pad_token, std::nullopt);
  EXPECT_EQ(*t->Render({ChatMessage::Text("user", "x")}), "<s>x</s><unk>[]");
  EXPECT_EQ(t->template_names(), std::vector<std::string>{"default"});

  // No template: the built-in ChatML one.
  auto none = ChatTemplate::FromTokenizerConfig(R"({"eos_token": "</s>"})");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_own_template());
  EXPECT_EQ(*none->Render({ChatMessage::Text("user", "hi")}, nullptr, true),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, NamedTemplatesFollowTransformersSelection) {
  const std::string config = R"({"chat_template": [
    {"name": "default", "template": "default:{{ tools is none }}"},
    {"name": "tool_use", "template": "tool_use:{{ tools | length }}"},
    {"name": "rag", "template": "rag"}
  ]})";
  auto t = ChatTemplate::FromTokenizerConfig(config);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->template_names(), (std::vector<std::string>{"default", "rag", "tool_use"}));
  EXPECT_EQ(*t->Render({}), "default:True");
  EXPECT_EQ(*t->Render({}, Json::array({Json::object()})), "tool_use:1");
  EXPECT_EQ(*t->Render({}, Json::array()), "tool_use:0");  // tools given, even if empty

  ChatTemplateOptions pick;
  pick.template_name = "rag";
  EXPECT_EQ(*ChatTemplate::FromTokenizerConfig(config, pick)->Render({}), "rag");
  pick.template_name = "nope";
  auto missing = ChatTemplate::FromTokenizerConfig(config, pick)->Render({});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("default, rag, tool_use"), std::string::npos);

  auto no_default = ChatTemplate::FromTokenizerConfig(
      R"({"chat_template": [{"name": "a", "template": "A"}, {"name": "b", "template": "B"}]})");
  ASSERT_TRUE(no_default.ok());
  EXPECT_EQ(no_default->Render({}).status().code(), StatusCode::kFailedPrecondition);
}

TEST(ChatTemplateTest, RejectsMalformedConfigs) {
  struct Case {
    std::string config;
    StatusCode code;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"{", StatusCode::kInvalidArgument, "tokenizer_config.json: invalid JSON"},
      {"[]", StatusCode::kInvalidArgument, "must hold a JSON object"},
      {R"({"chat_template": 5})", StatusCode::kInvalidArgument, "field 'chat_template' must be"},
      {R"({"chat_template": [{"name": "x"}]})", StatusCode::kInvalidArgument,
       "list entries must be"},
      {R"({"chat_template": [{"name": "x", "template": "a"}, {"name": "x", "template": "b"}]})",
       StatusCode::kInvalidArgument, "lists the name 'x' twice"},
      {R"({"bos_token": 1, "chat_template": "x"})", StatusCode::kInvalidArgument,
       "field 'bos_token' must be a string or an object with a string 'content'"},
      {R"({"eos_token": {"text": "x"}})", StatusCode::kInvalidArgument, "field 'eos_token'"},
      {R"({"chat_template": "ok\n{% if %}"})", StatusCode::kInvalidArgument,
       "chat_template 'default': template syntax error at 2:7"},
      {R"({"chat_template": "{% include 'x' %}"})", StatusCode::kUnimplemented,
       "chat_template 'default': unsupported Jinja construct at 1:4"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.config);
    auto t = ChatTemplate::FromTokenizerConfig(c.config);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), c.code) << t.status();
    EXPECT_NE(t.status().message().find(c.want), std::string::npos) << t.status();
  }
  ChatTemplateOptions small;
  small.max_config_bytes = 10;
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(R"({"chat_template": "x"})", small).status().code(),
            StatusCode::kResourceExhausted);
  small = {};
  small.template_limits.max_template_bytes = 4;
  EXPECT_EQ(
      ChatTemplate::FromTokenizerConfig(R"({"chat_template": "hello"})", small).status().code(),
      StatusCode::kResourceExhausted);
}

TEST(ChatTemplateTest, ContextHasTransformersVariables) {
  auto t = ChatTemplate::FromString("x", SpecialTokens{.bos_token = "<s>", .eos_token = "</s>"});
  ASSERT_TRUE(t.ok());
  auto ctx = t->BuildContext(Json::array({{{"role", "user"}, {"content", "hi"}}}), nullptr, true,
                             Json{{"date_string", "1 Jan"}, {"bos_token", "<override>"}});
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_EQ(ctx->dump(),
            R"({"messages":[{"role":"user","content":"hi"}],"tools":null,"documents":null,)"
            R"("add_generation_prompt":true,"bos_token":"<override>","eos_token":"</s>",)"
            R"("date_string":"1 Jan"})");
  EXPECT_FALSE(t->BuildContext(Json::object(), nullptr, false, nullptr).ok());
  EXPECT_FALSE(t->BuildContext(Json::array({1}), nullptr, false, nullptr).ok());
  EXPECT_FALSE(t->BuildContext(Json::array(), Json::object(), false, nullptr).ok());
  EXPECT_FALSE(t->BuildContext(Json::array(), nullptr, false, Json::array()).ok());
  auto reserved = t->BuildContext(Json::array(), nullptr, false, Json{{"messages", 1}});
  EXPECT_NE(reserved.status().message().find("'messages' is reserved"), std::string::npos);
}

TEST(ChatTemplateTest, MessagesBecomeJsonObjects) {
  ChatMessage call;
  call.role = "assistant";
  call.content = nullptr;
  call.tool_calls = Json::array(
      {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", {{"b", 1}, {"a", 2}}}}}}});
  call.extra = {{"name", "bot"}};
  EXPECT_EQ(call.ToJson().dump(),
            R"({"role":"assistant","content":null,"tool_calls":[{"type":"function","function":)"
            R"({"name":"f","arguments":{"b":1,"a":2}}}],"name":"bot"})");
  EXPECT_EQ(ChatMessage::Text("user", "x").ToJson().dump(), R"({"role":"user","content":"x"})");
  // Templates see a missing key for absent tool_calls, and the argument order of the input.
  auto t = ChatTemplate::FromString(
      "{% for m in messages %}{{ m.tool_calls is defined }}"
      "{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}{% endif %};{% endfor "
      "%}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->Render({ChatMessage::Text("user", "x"), call}), "False;True{\"b\": 1, \"a\": 2};");
}

// --- Training spans ---

std::vector<std::string> SpanTexts(const TrainingRender& r) {
  std::vector<std::string> out;
  for (const AssistantSpan& s : r.assistant_spans)
    out.push_back(r.text.substr(s.begin, s.end - s.begin));
  return out;
}

TEST(ChatTemplateTrainingTest, PrefixMethodFindsEachAssistantTurn) {
  ChatTemplate chatml = ChatTemplate::DefaultChatML();
  auto r = chatml.RenderForTraining(SixMessages());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->method, TrainingRender::Method::kPrefixes);
  EXPECT_EQ(*chatml.Render(SixMessages()), r->text);
  // What follows the generation prompt: the content and the end-of-turn marker.
  EXPECT_EQ(SpanTexts(*r), (std::vector<std::string>{"Hi there<|im_end|>\n",
                                                     "   I am an assistant   <|im_end|>\n"}));
  ASSERT_EQ(r->assistant_spans.size(), 2u);
  EXPECT_EQ(r->assistant_spans[0].message_index, 2u);
  EXPECT_EQ(r->assistant_spans[1].message_index, 4u);

  auto llama2 = ChatTemplate::FromString(ReadTestTemplate("llama2_chat.jinja"),
                                         SpecialTokens{.bos_token = "<s>", .eos_token = "</s>"});
  ASSERT_TRUE(llama2.ok());
  std::vector<ChatMessage> ending = SixMessages();
  ending.pop_back();  // end on the assistant turn
  r = llama2->RenderForTraining(ending);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(SpanTexts(*r), (std::vector<std::string>{" Hi there </s>", " I am an assistant </s>"}));
}

TEST(ChatTemplateTrainingTest, GenerationTagsGiveTheSpans) {
  auto t = ChatTemplate::FromString(
      "{% for m in messages %}<|{{ m.role }}|>\n{% if m.role == 'assistant' %}"
      "{% generation %}{{ m.content }}<|end|>{% endgeneration %}{% else %}{{ m.content }}<|end|>"
      "{% endif %}\n{% endfor %}");
  ASSERT_TRUE(t.ok()) << t.status();
  auto r = t->RenderForTraining(SixMessages());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->method, TrainingRender::Method::kGenerationTags);
  EXPECT_EQ(SpanTexts(*r),
            (std::vector<std::string>{"Hi there<|end|>", "   I am an assistant   <|end|>"}));
  EXPECT_EQ(r->assistant_spans[1].message_index, 4u);
}

TEST(ChatTemplateTrainingTest, TemplatesThatAreNotPrefixStableAreRejected) {
  // Always appends the assistant header: turn texts change when a turn follows.
  auto llama3 = ChatTemplate::FromString(kLlama3BaseTemplate, SpecialTokens{.bos_token = "<s>"});
  ASSERT_TRUE(llama3.ok());
  auto r = llama3->RenderForTraining(SixMessages());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("not prefix-stable at message 2 (assistant)"),
            std::string::npos)
      << r.status();
  // Even when the conversation ends with the assistant (checked with a following turn).
  r = llama3->RenderForTraining(
      {ChatMessage::Text("user", "q"), ChatMessage::Text("assistant", "a")});
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("changes when another message follows"), std::string::npos)
      << r.status();

  // Rewrites earlier assistant turns (as reasoning templates do with their thinking).
  auto rewriting = ChatTemplate::FromString(
      "{% for m in messages %}{% if m.role == 'assistant' and not loop.last %}[{{ m.content[:2] }}]"
      "{% else %}[{{ m.content }}]{% endif %}{% endfor %}");
  ASSERT_TRUE(rewriting.ok());
  r = rewriting->RenderForTraining({ChatMessage::Text("user", "q"),
                                    ChatMessage::Text("assistant", "long answer"),
                                    ChatMessage::Text("user", "q2")});
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("at message 1"), std::string::npos) << r.status();
}

TEST(ChatTemplateTrainingTest, EdgeCases) {
  ChatTemplate chatml = ChatTemplate::DefaultChatML();
  auto r = chatml.RenderForTraining({ChatMessage::Text("user", "only")});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->assistant_spans.empty());

  ChatTemplateOptions small;
  small.max_training_messages = 2;
  r = ChatTemplate::DefaultChatML({}, small).RenderForTraining(SixMessages());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);

  // Template errors pass through (Llama 2's alternation rule).
  auto llama2 = ChatTemplate::FromString(ReadTestTemplate("llama2_chat.jinja"),
                                         SpecialTokens{.bos_token = "<s>", .eos_token = "</s>"});
  r = llama2->RenderForTraining(
      {ChatMessage::Text("assistant", "a"), ChatMessage::Text("user", "b")});
  EXPECT_NE(r.status().message().find("Conversation roles must alternate"), std::string::npos);
}

}  // namespace
}  // namespace sovai::model
