#include "serve/openai_api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "serve/sampler.h"

namespace sovai::serve {
namespace {

using nlohmann::ordered_json;

// A valid chat body with `extra` fields appended (`extra` starts with a comma).
std::string Chat(std::string_view extra = "") {
  return R"({"model":"m","messages":[{"role":"user","content":"hi"}])" + std::string(extra) + "}";
}
std::string Completion(std::string_view extra = "") {
  return R"({"model":"m","prompt":"hi")" + std::string(extra) + "}";
}

OpenAiRequest ParseChatOk(const std::string& body, const ParseOptions& options = {}) {
  ApiResult<OpenAiRequest> r = ParseChatCompletionRequest(body, options);
  EXPECT_TRUE(r.ok()) << body << "\n" << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : OpenAiRequest{};
}
OpenAiRequest ParseCompletionOk(const std::string& body, const ParseOptions& options = {}) {
  ApiResult<OpenAiRequest> r = ParseCompletionRequest(body, options);
  EXPECT_TRUE(r.ok()) << body << "\n" << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : OpenAiRequest{};
}

struct ErrorCase {
  std::string body;
  std::string param;  // "" for a body-level error (param null)
};

void ExpectErrors(Endpoint endpoint, const std::vector<ErrorCase>& cases) {
  for (const ErrorCase& c : cases) {
    ApiResult<OpenAiRequest> r = endpoint == Endpoint::kChatCompletions
                                     ? ParseChatCompletionRequest(c.body)
                                     : ParseCompletionRequest(c.body);
    ASSERT_FALSE(r.ok()) << "accepted: " << c.body;
    const ApiError& e = r.error();
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << "\n" << e.message;
    EXPECT_EQ(e.code, "") << c.body;
    // The message names the parameter it is about.
    if (!c.param.empty()) {
      EXPECT_NE(e.message.find("'" + c.param + "'"), std::string::npos) << c.body << "\n"
                                                                        << e.message;
    }
  }
}

// --- Request validation ---

TEST(OpenAiParseTest, MalformedBodies) {
  ExpectErrors(Endpoint::kChatCompletions, {
                                               {"", ""},
                                               {"{", ""},
                                               {R"({"model":"m",})", ""},
                                               {"[]", ""},
                                               {"\"text\"", ""},
                                               {std::string(70, '[') + std::string(70, ']'), ""},
                                           });
  ApiResult<OpenAiRequest> r = ParseChatCompletionRequest("{\"model\":");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("not valid JSON"), std::string::npos) << r.error().message;
  // Where it broke off: after the 9 bytes (nlohmann counts from 1).
  EXPECT_NE(r.error().message.find("at byte 10: "), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().ToJson()["error"]["param"], nullptr);
}

TEST(OpenAiParseTest, ModelErrors) {
  ExpectErrors(Endpoint::kChatCompletions,
               {
                   {R"({"messages":[{"role":"user","content":"hi"}]})", "model"},
                   {R"({"model":5,"messages":[{"role":"user","content":"hi"}]})", "model"},
                   {R"({"model":"","messages":[{"role":"user","content":"hi"}]})", "model"},
                   {R"({"model":")" + std::string(kMaxModelNameBytes + 1, 'm') +
                        R"(","messages":[{"role":"user","content":"hi"}]})",
                    "model"},
               });
}

TEST(OpenAiParseTest, MessageErrors) {
  std::string too_many = R"({"model":"m","messages":[)";
  for (size_t i = 0; i <= kMaxMessages; ++i) {
    too_many += std::string(i ? "," : "") + R"({"role":"user","content":"x"})";
  }
  too_many += "]}";
  ExpectErrors(
      Endpoint::kChatCompletions,
      {
          {R"({"model":"m"})", "messages"},
          {R"({"model":"m","messages":"hi"})", "messages"},
          {R"({"model":"m","messages":[]})", "messages"},
          {too_many, "messages"},
          {R"({"model":"m","messages":["hi"]})", "messages[0]"},
          {R"({"model":"m","messages":[{"content":"hi"}]})", "messages[0].role"},
          {R"({"model":"m","messages":[{"role":7,"content":"hi"}]})", "messages[0].role"},
          {R"({"model":"m","messages":[{"role":"user","content":"a"},{"role":"bot","content":"b"}]})",
           "messages[1].role"},
          {R"({"model":"m","messages":[{"role":"function","content":"b"}]})", "messages[0].role"},
          {R"({"model":"m","messages":[{"role":"user"}]})", "messages[0].content"},
          {R"({"model":"m","messages":[{"role":"assistant","content":null}]})",
           "messages[0].content"},
          {R"({"model":"m","messages":[{"role":"user","content":5}]})", "messages[0].content"},
          {R"({"model":"m","messages":[{"role":"user","content":["x"]}]})",
           "messages[0].content[0]"},
          {R"({"model":"m","messages":[{"role":"user","content":[{"text":"x"}]}]})",
           "messages[0].content[0].type"},
          {R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},)"
           R"({"type":"image_url","image_url":{"url":"http://x"}}]}]})",
           "messages[0].content[1].type"},
          {R"({"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]})",
           "messages[0].content[0].text"},
          {R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":1}]}]})",
           "messages[0].content[0].text"},
          {R"({"model":"m","messages":[{"role":"assistant","content":"x","tool_calls":{}}]})",
           "messages[0].tool_calls"},
          {R"({"model":"m","messages":[{"role":"user","content":"x","name":3}]})",
           "messages[0].name"},
      });
  std::string too_many_parts = R"({"model":"m","messages":[{"role":"user","content":[)";
  for (size_t i = 0; i <= kMaxContentParts; ++i) {
    too_many_parts += std::string(i ? "," : "") + R"({"type":"text","text":"x"})";
  }
  too_many_parts += "]}]}";
  ExpectErrors(Endpoint::kChatCompletions, {{too_many_parts, "messages[0].content"}});
}

TEST(OpenAiParseTest, SamplingErrors) {
  ExpectErrors(
      Endpoint::kChatCompletions,
      {
          {Chat(R"(,"temperature":2.5)"), "temperature"},
          {Chat(R"(,"temperature":-0.1)"), "temperature"},
          {Chat(R"(,"temperature":"hot")"), "temperature"},
          {Chat(R"(,"top_p":0)"), "top_p"},
          {Chat(R"(,"top_p":1.01)"), "top_p"},
          {Chat(R"(,"top_k":-2)"), "top_k"},
          {Chat(R"(,"top_k":1.5)"), "top_k"},
          {Chat(R"(,"top_k":4294967296)"), "top_k"},
          {Chat(R"(,"presence_penalty":2.5)"), "presence_penalty"},
          {Chat(R"(,"frequency_penalty":-2.01)"), "frequency_penalty"},
          {Chat(R"(,"frequency_penalty":[1])"), "frequency_penalty"},
          {Chat(R"(,"seed":"42")"), "seed"},
          {Chat(R"(,"seed":1.5)"), "seed"},
          {Chat(R"(,"seed":9223372036854775808)"), "seed"},
          {Chat(R"(,"n":0)"), "n"},
          {Chat(R"(,"n":17)"), "n"},
          {Chat(R"(,"n":"2")"), "n"},
          {Chat(R"(,"n":2.0)"), "n"},
          {Chat(R"(,"max_tokens":0)"), "max_tokens"},
          {Chat(R"(,"max_tokens":"10")"), "max_tokens"},
          {Chat(R"(,"max_tokens":10,"max_completion_tokens":0)"), "max_completion_tokens"},
          {Chat(R"(,"ignore_eos":1)"), "ignore_eos"},
          {Chat(R"(,"logprobs":"yes")"), "logprobs"},
          {Chat(R"(,"logprobs":true,"top_logprobs":21)"), "top_logprobs"},
          {Chat(R"(,"logprobs":true,"top_logprobs":-1)"), "top_logprobs"},
          {Chat(R"(,"top_logprobs":2)"), "top_logprobs"},
          {Chat(R"(,"logprobs":false,"top_logprobs":2)"), "top_logprobs"},
          {Chat(R"(,"stream":"yes")"), "stream"},
          {Chat(R"(,"stream_options":{"include_usage":true})"), "stream_options"},
          {Chat(R"(,"stream":false,"stream_options":{"include_usage":true})"), "stream_options"},
          {Chat(R"(,"stream":true,"stream_options":true)"), "stream_options"},
          {Chat(R"(,"stream":true,"stream_options":{"include_usage":"yes"})"),
           "stream_options.include_usage"},
      });
  // The message says what is allowed and what was given.
  ApiResult<OpenAiRequest> r = ParseChatCompletionRequest(Chat(R"(,"temperature":3)"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "Invalid value for 'temperature': must be between 0 and 2, got 3.");
  r = ParseChatCompletionRequest(Chat(R"(,"temperature":"hot")"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "Invalid type for 'temperature': expected a number, but got a string instead.");
}

TEST(OpenAiParseTest, StopErrors) {
  const std::string long_stop(kMaxStopSequenceBytes + 1, 's');
  ExpectErrors(Endpoint::kChatCompletions,
               {
                   {Chat(R"(,"stop":["a","b","c","d","e"])"), "stop"},
                   {Chat(R"(,"stop":")" + long_stop + "\""), "stop"},
                   {Chat(R"(,"stop":["a",")" + long_stop + "\"]"), "stop[1]"},
                   {Chat(R"(,"stop":[1])"), "stop[0]"},
                   {Chat(R"(,"stop":5)"), "stop"},
                   {Chat(R"(,"stop":{"a":1})"), "stop"},
                   {Chat(R"(,"stop_token_ids":[-1])"), "stop_token_ids[0]"},
                   {Chat(R"(,"stop_token_ids":[1,"2"])"), "stop_token_ids[1]"},
                   {Chat(R"(,"stop_token_ids":7)"), "stop_token_ids"},
               });
  std::string many_ids = R"(,"stop_token_ids":[)";
  for (size_t i = 0; i <= kMaxStopTokenIds; ++i) many_ids += (i ? ",1" : "1");
  ExpectErrors(Endpoint::kChatCompletions, {{Chat(many_ids + "]"), "stop_token_ids"}});
  // At the limits: 4 sequences of 256 bytes.
  const std::string max_stop(kMaxStopSequenceBytes, 's');
  OpenAiRequest ok = ParseChatOk(Chat(R"(,"stop":[")" + max_stop + R"(","b","c","d"])"));
  EXPECT_EQ(ok.stop.size(), kMaxStopSequences);
}

TEST(OpenAiParseTest, ResponseFormatErrors) {
  ExpectErrors(
      Endpoint::kChatCompletions,
      {
          {Chat(R"(,"response_format":"json")"), "response_format"},
          {Chat(R"(,"response_format":{})"), "response_format.type"},
          {Chat(R"(,"response_format":{"type":"xml"})"), "response_format.type"},
          {Chat(R"(,"response_format":{"type":1})"), "response_format.type"},
          {Chat(R"(,"response_format":{"type":"json_schema"})"), "response_format.json_schema"},
          {Chat(R"(,"response_format":{"type":"json_schema","json_schema":[]})"),
           "response_format.json_schema"},
          {Chat(R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{}}})"),
           "response_format.json_schema.name"},
          {Chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"a b"}})"),
           "response_format.json_schema.name"},
          {Chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":")" +
                std::string(kMaxSchemaNameBytes + 1, 'n') + R"("}})"),
           "response_format.json_schema.name"},
          {Chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x",)"
                R"("schema":"{}"}})"),
           "response_format.json_schema.schema"},
          {Chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x",)"
                R"("strict":"yes"}})"),
           "response_format.json_schema.strict"},
      });
}

TEST(OpenAiParseTest, UnsupportedFieldsThatChangeTheOutputAreRefused) {
  ExpectErrors(
      Endpoint::kChatCompletions,
      {
          {Chat(R"(,"tools":[{"type":"function","function":{"name":"f"}}])"), "tools"},
          {Chat(R"(,"tools":{})"), "tools"},
          {Chat(R"(,"tool_choice":"required")"), "tool_choice"},
          {Chat(R"(,"tool_choice":{"type":"function","function":{"name":"f"}})"), "tool_choice"},
          {Chat(R"(,"functions":[{"name":"f"}])"), "functions"},
          {Chat(R"(,"function_call":{"name":"f"})"), "function_call"},
          {Chat(R"(,"use_beam_search":true)"), "use_beam_search"},
          {Chat(R"(,"guided_json":{"type":"object"})"), "guided_json"},
          {Chat(R"(,"guided_choice":["a","b"])"), "guided_choice"},
      });
  ExpectErrors(Endpoint::kCompletions, {
                                           {Completion(R"(,"suffix":"end")"), "suffix"},
                                           {Completion(R"(,"suffix":3)"), "suffix"},
                                           {Completion(R"(,"best_of":2)"), "best_of"},
                                           {Completion(R"(,"best_of":0)"), "best_of"},
                                       });
  // Their no-op values, `user` and unknown fields are accepted.
  ParseChatOk(Chat(R"(,"tools":[],"tool_choice":"none","logit_bias":{},"functions":null,)"
                   R"("function_call":"auto",)"
                   R"("min_tokens":0,"use_beam_search":false,"guided_json":null,)"
                   R"("user":"u-1","store":false,"metadata":{"a":"b"},"future_field":[1,{}])"));
  ParseCompletionOk(Completion(R"(,"suffix":"","best_of":1,"suffix_unknown":1)"));
}

TEST(OpenAiParseTest, LogitBiasMinPAndRepetitionPenalty) {
  const OpenAiRequest r = ParseChatOk(Chat(
      R"(,"logit_bias":{"50256":-100,"7":2.5,"0":100},"min_p":0.05,"repetition_penalty":1.3)"));
  EXPECT_EQ(r.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{0, 100.0f}, {7, 2.5f}, {50256, -100.0f}}));
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.3f);
  EXPECT_TRUE(ValidateSamplingParams(r.sampling).ok());
  const OpenAiRequest none = ParseCompletionOk(Completion(R"(,"logit_bias":null)"));
  EXPECT_TRUE(none.sampling.logit_bias.empty());
  EXPECT_FLOAT_EQ(none.sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(none.sampling.repetition_penalty, 1.0f);

  std::string too_many = "{";
  for (int i = 0; i <= static_cast<int>(kMaxLogitBiasEntries); ++i) {
    too_many += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
  }
  too_many += "}";
  ExpectErrors(Endpoint::kChatCompletions,
               {
                   {Chat(R"(,"logit_bias":[1])"), "logit_bias"},
                   {Chat(R"(,"logit_bias":"x")"), "logit_bias"},
                   {Chat(R"(,"logit_bias":{"abc":1})"), "logit_bias"},
                   {Chat(R"(,"logit_bias":{"-1":1})"), "logit_bias"},
                   {Chat(R"(,"logit_bias":{"-0":1,"0":2})"), "logit_bias"},
                   {Chat(R"(,"logit_bias":{"+1":1})"), "logit_bias"},
                   {Chat(R"(,"logit_bias":{" 1":1})"), "logit_bias"},
                   {Chat(R"(,"logit_bias":{"01":1})"), "logit_bias"},
                   {Chat(R"(,"logit_bias":{"1.5":1})"), "logit_bias"},
                   {Chat(R"(,"logit_bias":{"":1})"), "logit_bias"},
                   {Chat(R"(,"logit_bias":{"2147483648":1})"), "logit_bias"},
                   {Chat(R"(,"logit_bias":{"5":100.5})"), "logit_bias.5"},
                   {Chat(R"(,"logit_bias":{"5":"high"})"), "logit_bias.5"},
                   {Chat(",\"logit_bias\":" + too_many), "logit_bias"},
                   {Chat(R"(,"min_p":1.5)"), "min_p"},
                   {Chat(R"(,"min_p":-0.1)"), "min_p"},
                   {Chat(R"(,"repetition_penalty":0)"), "repetition_penalty"},
                   {Chat(R"(,"repetition_penalty":-1)"), "repetition_penalty"},
                   {Chat(R"(,"repetition_penalty":101)"), "repetition_penalty"},
               });

  // Ids past the vocabulary are refused once the model is known, with OpenAI's message.
  auto g = ToGenerationRequest(ParseChatOk(Chat(R"(,"logit_bias":{"100":1})")), {{1}}, "",
                               {.max_model_len = 10, .vocab_size = 100});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().param, "logit_bias");
  EXPECT_EQ(g.error().message, "Invalid key in 'logit_bias': 100. Maximum value is 99.");
  g = ToGenerationRequest(ParseChatOk(Chat(R"(,"logit_bias":{"99":1})")), {{1}}, "",
                          {.max_model_len = 10, .vocab_size = 100});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{99, 1.0f}}));
}

TEST(OpenAiParseTest, MinTokensIsAtMostMaxTokens) {
  EXPECT_EQ(ParseCompletionOk(Completion(R"(,"min_tokens":5,"max_tokens":5)")).min_tokens, 5);
  EXPECT_EQ(ParseChatOk(Chat()).min_tokens, 0);
  ExpectErrors(Endpoint::kCompletions,
               {
                   {Completion(R"(,"min_tokens":17)"), "min_tokens"},  // the default max_tokens 16
                   {Completion(R"(,"min_tokens":-1)"), "min_tokens"},
                   {Completion(R"(,"min_tokens":"3")"), "min_tokens"},
               });
  // Chat without max_tokens: the context left decides, once the prompt is known.
  const OpenAiRequest chat = ParseChatOk(Chat(R"(,"min_tokens":8)"));
  auto g = ToGenerationRequest(chat, {{1, 2, 3}}, "", {.max_model_len = 10, .vocab_size = 100});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().param, "min_tokens");
  g = ToGenerationRequest(chat, {{1, 2}}, "", {.max_model_len = 10, .vocab_size = 100});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->min_tokens, 8);
}

TEST(OpenAiParseTest, PromptErrors) {
  ExpectErrors(Endpoint::kCompletions, {
                                           {R"({"model":"m"})", "prompt"},
                                           {R"({"model":"m","prompt":5})", "prompt"},
                                           {R"({"model":"m","prompt":{"text":"x"}})", "prompt"},
                                           {R"({"model":"m","prompt":[]})", "prompt"},
                                           {R"({"model":"m","prompt":["a",[2]]})", "prompt[1]"},
                                           {R"({"model":"m","prompt":[[1],"b"]})", "prompt[1]"},
                                           {R"({"model":"m","prompt":[[1],[-2]]})", "prompt[1][0]"},
                                           {R"({"model":"m","prompt":["a",null]})", "prompt[1]"},
                                           {R"({"model":"m","prompt":[1,-1]})", "prompt[1]"},
                                           {R"({"model":"m","prompt":[1,2.5]})", "prompt[1]"},
                                           {R"({"model":"m","prompt":[1,"a"]})", "prompt[1]"},
                                           {R"({"model":"m","prompt":[2147483648]})", "prompt[0]"},
                                           {R"({"model":"m","prompt":[[]]})", "prompt[0]"},
                                           {R"({"model":"m","prompt":[["a"]]})", "prompt[0][0]"},
                                           {R"({"model":"m","prompt":[true]})", "prompt[0]"},
                                           {Completion(R"(,"echo":"yes")"), "echo"},
                                           {Completion(R"(,"logprobs":6)"), "logprobs"},
                                           {Completion(R"(,"logprobs":true)"), "logprobs"},
                                       });
  // Batches: at most kMaxPrompts prompts and kMaxBatchChoices choices.
  auto prompts = [](size_t count) {
    std::string list = "[";
    for (size_t i = 0; i < count; ++i) list += i ? ",\"x\"" : "\"x\"";
    return list + "]";
  };
  const size_t too_many_for_16 = static_cast<size_t>(kMaxBatchChoices / kMaxChoices) + 1;
  ExpectErrors(Endpoint::kCompletions,
               {
                   {R"({"model":"m","prompt":)" + prompts(kMaxPrompts + 1) + "}", "prompt"},
                   {R"({"model":"m","n":16,"prompt":)" + prompts(too_many_for_16) + "}", "n"},
               });
  ParseCompletionOk(R"({"model":"m","prompt":)" + prompts(kMaxPrompts) + "}");
  ParseCompletionOk(R"({"model":"m","n":16,"prompt":)" + prompts(too_many_for_16 - 1) + "}");
}

TEST(OpenAiTokenizeTest, ParsesPromptsAndMessagesWithVllmsDefaults) {
  ApiResult<TokenizeRequest> text = ParseTokenizeRequest(R"({"model":"m","prompt":"hi"})");
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_FALSE(text->chat);
  EXPECT_EQ(text->prompt, "hi");
  EXPECT_TRUE(text->add_special_tokens);
  ApiResult<TokenizeRequest> chat = ParseTokenizeRequest(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false})");
  ASSERT_TRUE(chat.ok()) << chat.error().message;
  EXPECT_TRUE(chat->chat);
  ASSERT_EQ(chat->messages.size(), 1u);
  EXPECT_FALSE(chat->add_generation_prompt);
  EXPECT_FALSE(chat->add_special_tokens) << "the template holds them";
  ApiResult<TokenizeRequest> raw =
      ParseTokenizeRequest(R"({"model":"m","prompt":"hi","add_special_tokens":false})");
  ASSERT_TRUE(raw.ok());
  EXPECT_FALSE(raw->add_special_tokens);

  ApiResult<DetokenizeRequest> ids = ParseDetokenizeRequest(R"({"model":"m","tokens":[3,0,7]})");
  ASSERT_TRUE(ids.ok()) << ids.error().message;
  EXPECT_EQ(ids->tokens, (std::vector<int32_t>{3, 0, 7}));
  EXPECT_TRUE(ParseDetokenizeRequest(R"({"model":"m","tokens":[]})").ok());

  struct Bad {
    bool detokenize;
    std::string body;
    std::string param;
  };
  for (const Bad& bad : std::vector<Bad>{
           {false, R"({"prompt":"hi"})", "model"},
           {false, R"({"model":"m"})", "prompt"},
           {false, R"({"model":"m","prompt":5})", "prompt"},
           {false, R"({"model":"m","prompt":"a","messages":[{"role":"user","content":"b"}]})",
            "messages"},
           {false, R"({"model":"m","messages":[{"role":"wizard","content":"b"}]})",
            "messages[0].role"},
           {false, R"({"model":"m","prompt":"a","add_special_tokens":"yes"})",
            "add_special_tokens"},
           {false, "[1]", ""},
           {true, R"({"model":"m","tokens":[1,-2]})", "tokens[1]"},
           {true, R"({"model":"m","tokens":"1 2"})", "tokens"},
           {true, R"({"model":"m"})", "tokens"},
           {true, R"({"tokens":[1]})", "model"},
       }) {
    const ApiError error = bad.detokenize ? ParseDetokenizeRequest(bad.body).error()
                                          : ParseTokenizeRequest(bad.body).error();
    EXPECT_EQ(error.status, 400) << bad.body;
    EXPECT_EQ(error.param, bad.param) << bad.body << ": " << error.message;
  }
  EXPECT_EQ(SerializeJson(TokenizeResponse({5, 6}, 1024)),
            R"({"count":2,"max_model_len":1024,"tokens":[5,6]})");
  EXPECT_EQ(SerializeJson(DetokenizeResponse("hi")), R"({"prompt":"hi"})");
}

// --- Happy paths ---

TEST(OpenAiParseTest, ChatRequestWithEveryField) {
  OpenAiRequest r = ParseChatOk(R"({
    "model": "llama-3-8b",
    "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}], "name": "ann"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "content": "42", "tool_call_id": "c1"},
      {"role": "user", "content": ""}
    ],
    "temperature": 0.5, "top_p": 0.9, "top_k": -1, "seed": -5, "n": 2,
    "max_tokens": 100, "stop": "END", "stop_token_ids": [7, 9], "ignore_eos": true,
    "logprobs": true, "top_logprobs": 3, "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "stream": true, "stream_options": {"include_usage": true},
    "response_format": {"type": "json_object"}, "user": "someone"
  })");
  EXPECT_EQ(r.endpoint, Endpoint::kChatCompletions);
  EXPECT_EQ(r.model, "llama-3-8b");
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[0].role, "system");  // developer is read as system
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "Hello\nthere");
  EXPECT_EQ(r.messages[1].extra, ordered_json({{"name", "ann"}}));
  EXPECT_EQ(r.messages[2].content, nullptr);
  ASSERT_TRUE(r.messages[2].tool_calls.is_array());
  EXPECT_EQ(r.messages[2].tool_calls[0]["function"]["name"], "f");
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.messages[3].extra, ordered_json({{"tool_call_id", "c1"}}));
  EXPECT_EQ(r.messages[4].content, "");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 0);
  ASSERT_TRUE(r.sampling.seed.has_value());
  EXPECT_EQ(static_cast<int64_t>(*r.sampling.seed), -5);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.max_tokens, 100);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 3);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.response_format.kind, ResponseFormat::Kind::kJsonObject);
  EXPECT_EQ(r.cache_control, base::CacheControl::kDefault);
  EXPECT_FALSE(r.echo);
}

TEST(OpenAiParseTest, ChatDefaults) {
  OpenAiRequest r = ParseChatOk(Chat());
  EXPECT_EQ(r.max_tokens, std::nullopt);  // the rest of the context
  EXPECT_EQ(r.n, 1);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FALSE(r.sampling.seed.has_value());
  EXPECT_FALSE(r.sampling.logprobs);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.response_format.kind, ResponseFormat::Kind::kText);
  // null reads as "not given".
  OpenAiRequest nulls = ParseChatOk(
      Chat(R"(,"temperature":null,"n":null,"stop":null,"max_tokens":null,"response_format":null)"));
  EXPECT_FLOAT_EQ(nulls.sampling.temperature, 1.0f);
  EXPECT_EQ(nulls.n, 1);
  EXPECT_EQ(nulls.max_tokens, std::nullopt);
  // top_k 0 is off like -1; a positive k stays.
  EXPECT_EQ(ParseChatOk(Chat(R"(,"top_k":0)")).sampling.top_k, 0);
  EXPECT_EQ(ParseChatOk(Chat(R"(,"top_k":40)")).sampling.top_k, 40);
}

TEST(OpenAiParseTest, StopAsStringOrList) {
  EXPECT_EQ(ParseChatOk(Chat(R"(,"stop":"\n")")).stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(ParseChatOk(Chat(R"(,"stop":["a","b"])")).stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(ParseChatOk(Chat(R"(,"stop":[])")).stop.empty());
  // Empty strings would match everywhere: they are dropped.
  EXPECT_TRUE(ParseChatOk(Chat(R"(,"stop":"")")).stop.empty());
  EXPECT_EQ(ParseChatOk(Chat(R"(,"stop":["","x"])")).stop, std::vector<std::string>{"x"});
}

TEST(OpenAiParseTest, MaxCompletionTokensWinsOverMaxTokens) {
  EXPECT_EQ(ParseChatOk(Chat(R"(,"max_tokens":100,"max_completion_tokens":20)")).max_tokens, 20);
  EXPECT_EQ(ParseChatOk(Chat(R"(,"max_completion_tokens":20,"max_tokens":100)")).max_tokens, 20);
  EXPECT_EQ(ParseChatOk(Chat(R"(,"max_completion_tokens":20)")).max_tokens, 20);
  EXPECT_EQ(ParseChatOk(Chat(R"(,"max_tokens":100,"max_completion_tokens":null)")).max_tokens, 100);
}

TEST(OpenAiParseTest, ResponseFormatVariants) {
  EXPECT_EQ(ParseChatOk(Chat(R"(,"response_format":{"type":"text"})")).response_format.kind,
            ResponseFormat::Kind::kText);
  EXPECT_EQ(ParseChatOk(Chat(R"(,"response_format":{"type":"json_object"})")).response_format.kind,
            ResponseFormat::Kind::kJsonObject);
  OpenAiRequest schema = ParseChatOk(Chat(R"(,"response_format":{"type":"json_schema",
      "json_schema":{"name":"person-v_1","description":"d","strict":true,
      "schema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}})"));
  EXPECT_EQ(schema.response_format.kind, ResponseFormat::Kind::kJsonSchema);
  EXPECT_EQ(schema.response_format.schema_name, "person-v_1");
  EXPECT_EQ(schema.response_format.schema["properties"]["name"]["type"], "string");
  EXPECT_TRUE(schema.response_format_strict);
  OpenAiRequest no_schema = ParseChatOk(
      Chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"any"}})"));
  EXPECT_EQ(no_schema.response_format.kind, ResponseFormat::Kind::kJsonSchema);
  EXPECT_EQ(no_schema.response_format.schema, nlohmann::json::object());
  EXPECT_FALSE(no_schema.response_format_strict);
  // Completions accept it too (a vLLM extension).
  EXPECT_EQ(ParseCompletionOk(Completion(R"(,"response_format":{"type":"json_object"})"))
                .response_format.kind,
            ResponseFormat::Kind::kJsonObject);
}

TEST(OpenAiParseTest, CompletionPrompts) {
  OpenAiRequest text = ParseCompletionOk(Completion());
  EXPECT_EQ(text.endpoint, Endpoint::kCompletions);
  EXPECT_EQ(text.prompts, std::vector<CompletionPrompt>{{.text = "hi"}});
  EXPECT_EQ(text.max_tokens, kDefaultCompletionMaxTokens);
  EXPECT_EQ(ParseCompletionOk(R"({"model":"m","prompt":["one"]})").prompts,
            std::vector<CompletionPrompt>{{.text = "one"}});
  EXPECT_EQ(ParseCompletionOk(R"({"model":"m","prompt":""})").prompts,
            std::vector<CompletionPrompt>{{.text = ""}});
  EXPECT_EQ(ParseCompletionOk(R"({"model":"m","prompt":[1,2,3]})").prompts,
            (std::vector<CompletionPrompt>{{.token_ids = std::vector<int32_t>{1, 2, 3}}}));
  EXPECT_EQ(ParseCompletionOk(R"({"model":"m","prompt":[[4,5]]})").prompts,
            (std::vector<CompletionPrompt>{{.token_ids = std::vector<int32_t>{4, 5}}}));
  // Batches, in order.
  EXPECT_EQ(ParseCompletionOk(R"({"model":"m","prompt":["a","","c"],"n":2})").prompts,
            (std::vector<CompletionPrompt>{{.text = "a"}, {.text = ""}, {.text = "c"}}));
  EXPECT_EQ(ParseCompletionOk(R"({"model":"m","prompt":[[1],[2,3]]})").prompts,
            (std::vector<CompletionPrompt>{{.token_ids = std::vector<int32_t>{1}},
                                           {.token_ids = std::vector<int32_t>{2, 3}}}));

  OpenAiRequest full = ParseCompletionOk(
      Completion(R"(,"echo":true,"logprobs":2,"max_tokens":5,"stop":["\n\n"],"seed":1)"));
  EXPECT_TRUE(full.echo);
  EXPECT_TRUE(full.sampling.logprobs);
  EXPECT_EQ(full.sampling.top_logprobs, 2);
  EXPECT_EQ(full.max_tokens, 5);
  OpenAiRequest zero = ParseCompletionOk(Completion(R"(,"logprobs":0)"));
  EXPECT_TRUE(zero.sampling.logprobs);  // the sampled token's logprob, no alternatives
  EXPECT_EQ(zero.sampling.top_logprobs, 0);
  EXPECT_FALSE(ParseCompletionOk(Completion(R"(,"logprobs":null)")).sampling.logprobs);
  // `echo` belongs to completions; chat ignores it like any unknown field.
  EXPECT_FALSE(ParseChatOk(Chat(R"(,"echo":true)")).echo);
}

// The header's directives themselves are base::ParseCacheControl's (response_cache_policy_test).
TEST(OpenAiParseTest, CacheControlIsKeptOnTheRequest) {
  EXPECT_EQ(ParseChatOk(Chat(), {.cache_control = base::CacheControl::kNoStore}).cache_control,
            base::CacheControl::kNoStore);
  EXPECT_EQ(ParseCompletionOk(Completion(), {.cache_control = base::CacheControl::kNoCache})
                .cache_control,
            base::CacheControl::kNoCache);
}

// --- Prompt rendering and the engine request ---

TEST(OpenAiEngineRequestTest, RenderChatPromptUsesTheTemplateWithGenerationPrompt) {
  OpenAiRequest r = ParseChatOk(
      R"({"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]})");
  ApiResult<std::string> text = RenderChatPrompt(model::ChatTemplate::DefaultChatML(), r);
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_EQ(*text,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\n");

  base::Result<model::ChatTemplate> strict = model::ChatTemplate::FromString(
      "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation must start with "
      "a user message') }}{% endif %}x");
  ASSERT_TRUE(strict.ok()) << strict.status();
  ApiResult<std::string> refused = RenderChatPrompt(*strict, r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().status, 400);
  EXPECT_EQ(refused.error().param, "messages");
  EXPECT_NE(refused.error().message.find("Conversation must start with a user message"),
            std::string::npos)
      << refused.error().message;
}

TEST(OpenAiEngineRequestTest, CopiesFieldsAndFillsMaxTokens) {
  OpenAiRequest r = ParseChatOk(
      Chat(R"(,"temperature":0,"stop":["x"],"stop_token_ids":[3],"n":2,"ignore_eos":true,)"
           R"("response_format":{"type":"json_object"})"));
  ApiResult<GenerationRequest> g =
      ToGenerationRequest(r, {{1, 2, 3}}, "my-lora", {.max_model_len = 10, .vocab_size = 100});
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->model, "m");
  EXPECT_EQ(g->adapter, "my-lora");
  EXPECT_EQ(g->prompts, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(g->max_tokens, 7);  // the rest of the context
  EXPECT_EQ(g->stop, std::vector<std::string>{"x"});
  EXPECT_EQ(g->stop_token_ids, std::vector<int32_t>{3});
  EXPECT_TRUE(g->ignore_eos);
  EXPECT_EQ(g->n, 2);
  EXPECT_TRUE(g->sampling.Greedy());
  EXPECT_EQ(g->response_format.kind, ResponseFormat::Kind::kJsonObject);

  OpenAiRequest explicit_max = ParseCompletionOk(Completion(R"(,"max_tokens":7,"echo":true)"));
  ApiResult<GenerationRequest> fits =
      ToGenerationRequest(explicit_max, {{1, 2, 3}}, "", {.max_model_len = 10, .vocab_size = 100});
  ASSERT_TRUE(fits.ok()) << fits.error().message;
  EXPECT_EQ(fits->max_tokens, 7);
  EXPECT_TRUE(fits->echo);
  EXPECT_EQ(fits->adapter, "");
}

TEST(OpenAiEngineRequestTest, ContextLengthAndTokenIdErrors) {
  OpenAiRequest chat = ParseChatOk(Chat(R"(,"max_tokens":8)"));
  ApiResult<GenerationRequest> g =
      ToGenerationRequest(chat, {{1, 2, 3}}, "", {.max_model_len = 10, .vocab_size = 100});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error(), ContextLengthError(Endpoint::kChatCompletions, 10, 3, 8));
  EXPECT_EQ(g.error().message,
            "This model's maximum context length is 10 tokens. However, you requested 11 tokens "
            "(3 in the messages, 8 in the completion). Please reduce the length of the messages "
            "or completion.");
  EXPECT_EQ(g.error().param, "messages");
  EXPECT_EQ(g.error().code, "context_length_exceeded");

  OpenAiRequest no_max = ParseChatOk(Chat());
  g = ToGenerationRequest(no_max, {std::vector<int32_t>(10, 1)}, "", {10, 100});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().message,
            "This model's maximum context length is 10 tokens. However, your messages resulted "
            "in 10 tokens. Please reduce the length of the messages.");

  OpenAiRequest completion = ParseCompletionOk(R"({"model":"m","prompt":[5,200]})");
  g = ToGenerationRequest(completion, {{5, 200}}, "", {.max_model_len = 1000, .vocab_size = 100});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().param, "prompt");
  EXPECT_NE(g.error().message.find("200"), std::string::npos) << g.error().message;
  g = ToGenerationRequest(completion, {{}}, "", {.max_model_len = 1000, .vocab_size = 100});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().param, "prompt");
  g = ToGenerationRequest(ParseCompletionOk(Completion(R"(,"max_tokens":20)")), {{1, 2}}, "",
                          {.max_model_len = 16, .vocab_size = 100});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().message,
            "This model's maximum context length is 16 tokens. However, you requested 22 tokens "
            "(2 in the prompt, 20 in the completion). Please reduce the length of the prompt or "
            "completion.");

  // A batch: every prompt is checked (and named), and the longest must fit with max_tokens.
  const OpenAiRequest batch =
      ParseCompletionOk(R"({"model":"m","prompt":[[1],[2]],"max_tokens":4})");
  g = ToGenerationRequest(batch, {{1}, {2, 3}}, "", {.max_model_len = 6, .vocab_size = 100});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->prompts, (std::vector<std::vector<int32_t>>{{1}, {2, 3}}));
  g = ToGenerationRequest(batch, {{1}, {2, 3, 4}}, "", {.max_model_len = 6, .vocab_size = 100});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().param, "prompt");
  EXPECT_NE(g.error().message.find("3 in the prompt"), std::string::npos) << g.error().message;
  g = ToGenerationRequest(batch, {{1}, {}}, "", {.max_model_len = 6, .vocab_size = 100});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().param, "prompt[1]");
  g = ToGenerationRequest(batch, {{1}, {100}}, "", {.max_model_len = 6, .vocab_size = 100});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().param, "prompt[1]");

  OpenAiRequest stop_ids = ParseChatOk(Chat(R"(,"stop_token_ids":[100])"));
  g = ToGenerationRequest(stop_ids, {{1}}, "", {.max_model_len = 10, .vocab_size = 100});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().param, "stop_token_ids");
}

// --- Errors ---

TEST(OpenAiErrorTest, JsonShapeAndNamedErrors) {
  EXPECT_EQ(SerializeJson(InvalidRequestError("temperature", "bad").ToJson()),
            R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature",)"
            R"("code":null}})");

  ApiError not_found = ModelNotFoundError("gpt-x");
  EXPECT_EQ(not_found.status, 404);
  EXPECT_EQ(SerializeJson(not_found.ToJson()),
            R"({"error":{"message":"The model `gpt-x` does not exist or you do not have access )"
            R"(to it.","type":"invalid_request_error","param":"model","code":"model_not_found"}})");

  ApiError busy = QueueFullError(256);
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(busy.type, "requests");
  EXPECT_EQ(busy.code, "rate_limit_exceeded");
  EXPECT_NE(busy.message.find("256"), std::string::npos);
  EXPECT_EQ(busy.ToJson()["error"]["param"], nullptr);

  ApiError internal = InternalServerError("kernel failed");
  EXPECT_EQ(internal.status, 500);
  EXPECT_EQ(internal.type, "server_error");
  ApiError loading = ModelLoadingError("m");
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(loading.type, "server_error");
  EXPECT_NE(loading.message.find("loading"), std::string::npos);
}

TEST(OpenAiErrorTest, StatusTable) {
  struct Row {
    base::Status status;
    int http;
    std::string type;
    std::string code;
  };
  const Row rows[] = {
      {base::InvalidArgumentError("x"), 400, "invalid_request_error", ""},
      {base::OutOfRangeError("x"), 400, "invalid_request_error", ""},
      {base::FailedPreconditionError("x"), 400, "invalid_request_error", ""},
      {base::UnimplementedError("x"), 400, "invalid_request_error", ""},
      {base::NotFoundError("x"), 404, "invalid_request_error", ""},
      {base::AlreadyExistsError("x"), 409, "invalid_request_error", ""},
      {base::PermissionDeniedError("x"), 403, "invalid_request_error", ""},
      {base::UnauthenticatedError("x"), 401, "invalid_request_error", "invalid_api_key"},
      {base::ResourceExhaustedError("x"), 429, "requests", "rate_limit_exceeded"},
      {base::UnavailableError("x"), 503, "server_error", ""},
      {base::DeadlineExceededError("x"), 504, "server_error", ""},
      {base::InternalError("x"), 500, "server_error", ""},
      {base::DataLossError("x"), 500, "server_error", ""},
  };
  for (const Row& row : rows) {
    ApiError e = ApiErrorFromStatus(row.status, "p");
    EXPECT_EQ(e.status, row.http) << row.status;
    EXPECT_EQ(e.type, row.type) << row.status;
    EXPECT_EQ(e.code, row.code) << row.status;
    EXPECT_EQ(e.message, "x");
    EXPECT_EQ(e.param, "p");
  }
}

TEST(OpenAiErrorTest, ErrorsOfTheHttpLayer) {
  ApiError too_large = ApiErrorFromHttpStatus(413, "request body of 20 bytes exceeds the limit");
  EXPECT_EQ(too_large.ToJson(),
            ordered_json::parse(R"({"error":{"message":"request body of 20 bytes exceeds the )"
                                R"(limit","type":"invalid_request_error","param":null,)"
                                R"("code":"request_too_large"}})"));
  EXPECT_EQ(too_large.status, 413);
  for (int status : {400, 404, 405, 414, 431}) {
    ApiError e = ApiErrorFromHttpStatus(status, "x");
    EXPECT_EQ(e.status, status);
    EXPECT_EQ(e.type, "invalid_request_error") << status;
    EXPECT_EQ(e.code, "") << status;
  }
  EXPECT_EQ(ApiErrorFromHttpStatus(429, "x").type, QueueFullError(1).type);
  EXPECT_EQ(ApiErrorFromHttpStatus(429, "x").code, QueueFullError(1).code);
  for (int status : {500, 503}) EXPECT_EQ(ApiErrorFromHttpStatus(status, "x").type, "server_error");
}

// --- Responses ---

ResponseMeta Meta(std::string id, std::string fingerprint = "") {
  return ResponseMeta{.id = std::move(id),
                      .created = 1700000000,
                      .model = "m",
                      .system_fingerprint = std::move(fingerprint)};
}

TEST(OpenAiResponseTest, ChatCompletionKeyOrder) {
  ChoiceResult choice{.index = 0, .text = "Hello", .finish_reason = FinishReason::kStop};
  EXPECT_EQ(SerializeJson(ChatCompletionResponse(
                Meta("chatcmpl-1", "fp_1"), {choice},
                {.prompt_tokens = 5, .completion_tokens = 2, .cached_tokens = 3})),
            R"({"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",)"
            R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},)"
            R"("logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":5,)"
            R"("completion_tokens":2,"total_tokens":7,"prompt_tokens_details":)"
            R"({"cached_tokens":3}},"system_fingerprint":"fp_1"})");
}

TEST(OpenAiResponseTest, ChatCompletionLogprobsAndSeveralChoices) {
  ChoiceResult first{
      .index = 0,
      .text = "Hi",
      .finish_reason = FinishReason::kLength,
      .logprobs = std::vector<OutputLogprob>{
          {.token = "Hi", .logprob = -0.25f, .top_logprobs = {{"Hi", -0.25f}, {"Hello", -1.5f}}},
      }};
  ChoiceResult second{.index = 1,
                      .text = "",
                      .finish_reason = FinishReason::kAbort,
                      .logprobs = std::vector<OutputLogprob>{
                          {.token = "x", .logprob = -std::numeric_limits<float>::infinity()}}};
  EXPECT_EQ(SerializeJson(ChatCompletionResponse(Meta("chatcmpl-2"), {first, second}, {})),
            R"({"id":"chatcmpl-2","object":"chat.completion","created":1700000000,"model":"m",)"
            R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"logprobs":)"
            R"({"content":[{"token":"Hi","logprob":-0.25,"bytes":[72,105],"top_logprobs":[)"
            R"({"token":"Hi","logprob":-0.25,"bytes":[72,105]},)"
            R"({"token":"Hello","logprob":-1.5,"bytes":[72,101,108,108,111]}]}]},)"
            R"("finish_reason":"length"},)"
            R"({"index":1,"message":{"role":"assistant","content":""},"logprobs":)"
            R"({"content":[{"token":"x","logprob":-9999.0,"bytes":[120],"top_logprobs":[]}]},)"
            R"("finish_reason":"abort"}],)"
            R"("usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
  // Floats are written with their shortest decimal form.
  ChoiceResult precise{.logprobs = std::vector<OutputLogprob>{{.token = "a", .logprob = -0.1f}}};
  ordered_json j = ChatCompletionResponse(Meta("c"), {precise}, {});
  EXPECT_EQ(SerializeJson(j["choices"][0]["logprobs"]["content"][0]["logprob"]), "-0.1");
}

TEST(OpenAiResponseTest, CompletionKeyOrderAndLogprobs) {
  // Echo: the prompt token "Say" has no logprob; "é" is one code point in two bytes.
  ChoiceResult choice{
      .index = 0,
      .text = "Say \xC3\xA9!",
      .finish_reason = FinishReason::kStop,
      .logprobs =
          std::vector<OutputLogprob>{
              {.token = "Say", .logprob = std::nullopt},
              {.token = " \xC3\xA9", .logprob = -0.5f, .top_logprobs = {{" \xC3\xA9", -0.5f}}},
              {.token = "!", .logprob = -2.0f, .top_logprobs = {{"!", -2.0f}, {".", -2.5f}}},
          },
      .text_offset = 0};
  EXPECT_EQ(SerializeJson(CompletionResponse(Meta("cmpl-1"), {choice},
                                             {.prompt_tokens = 1, .completion_tokens = 2})),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"m",)"
            R"("choices":[{"text":"Say é!","index":0,"logprobs":{"tokens":["Say"," é","!"],)"
            R"("token_logprobs":[null,-0.5,-2.0],"top_logprobs":[null,{" é":-0.5},)"
            R"({"!":-2.0,".":-2.5}],"text_offset":[0,3,5]},"finish_reason":"stop"}],)"
            R"("usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
  ChoiceResult plain{.index = 0, .text = "x", .finish_reason = FinishReason::kLength};
  EXPECT_EQ(SerializeJson(CompletionResponse(Meta("cmpl-2", "fp"), {plain}, {})["choices"]),
            R"([{"text":"x","index":0,"logprobs":null,"finish_reason":"length"}])");
}

TEST(OpenAiResponseTest, ChatStreamChunks) {
  const ResponseMeta meta = Meta("chatcmpl-3", "fp_9");
  EXPECT_EQ(SerializeJson(ChatCompletionRoleChunk(meta, 0, /*include_usage=*/false)),
            R"({"id":"chatcmpl-3","object":"chat.completion.chunk","created":1700000000,)"
            R"("model":"m","system_fingerprint":"fp_9","choices":[{"index":0,"delta":)"
            R"({"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(SerializeJson(ChatCompletionChunk(meta, {.index = 1, .text = "Hel"}, false)),
            R"({"id":"chatcmpl-3","object":"chat.completion.chunk","created":1700000000,)"
            R"("model":"m","system_fingerprint":"fp_9","choices":[{"index":1,"delta":)"
            R"({"content":"Hel"},"logprobs":null,"finish_reason":null}]})");
  // The last chunk of a choice: empty delta and the finish reason; "usage": null when the
  // client asked for the usage chunk.
  EXPECT_EQ(SerializeJson(ChatCompletionChunk(
                Meta("chatcmpl-3"), {.index = 0, .finish_reason = FinishReason::kStop}, true)),
            R"({"id":"chatcmpl-3","object":"chat.completion.chunk","created":1700000000,)"
            R"("model":"m","choices":[{"index":0,"delta":{},"logprobs":null,)"
            R"("finish_reason":"stop"}],"usage":null})");
  EXPECT_EQ(SerializeJson(UsageChunk(Endpoint::kChatCompletions, Meta("chatcmpl-3"),
                                     {.prompt_tokens = 4, .completion_tokens = 6})),
            R"({"id":"chatcmpl-3","object":"chat.completion.chunk","created":1700000000,)"
            R"("model":"m","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":6,)"
            R"("total_tokens":10,"prompt_tokens_details":{"cached_tokens":0}}})");
  // A chunk with logprobs carries them for its tokens only.
  ChoiceResult with_logprobs{
      .text = "a", .logprobs = std::vector<OutputLogprob>{{.token = "a", .logprob = -1.0f}}};
  EXPECT_EQ(SerializeJson(ChatCompletionChunk(Meta("c"), with_logprobs, false)["choices"][0]),
            R"({"index":0,"delta":{"content":"a"},"logprobs":{"content":[{"token":"a",)"
            R"("logprob":-1.0,"bytes":[97],"top_logprobs":[]}]},"finish_reason":null})");
}

TEST(OpenAiResponseTest, CompletionStreamChunks) {
  EXPECT_EQ(SerializeJson(CompletionChunk(Meta("cmpl-4"), {.index = 0, .text = "He"}, false)),
            R"({"id":"cmpl-4","object":"text_completion","created":1700000000,"model":"m",)"
            R"("choices":[{"text":"He","index":0,"logprobs":null,"finish_reason":null}]})");
  ChoiceResult last{.index = 0,
                    .text = "y",
                    .finish_reason = FinishReason::kLength,
                    .logprobs = std::vector<OutputLogprob>{{.token = "y", .logprob = -0.5f}},
                    .text_offset = 7};
  EXPECT_EQ(SerializeJson(CompletionChunk(Meta("cmpl-4"), last, true)),
            R"({"id":"cmpl-4","object":"text_completion","created":1700000000,"model":"m",)"
            R"("choices":[{"text":"y","index":0,"logprobs":{"tokens":["y"],"token_logprobs":)"
            R"([-0.5],"top_logprobs":[{}],"text_offset":[7]},"finish_reason":"length"}],)"
            R"("usage":null})");
  EXPECT_EQ(SerializeJson(UsageChunk(Endpoint::kCompletions, Meta("cmpl-4"), {})),
            R"({"id":"cmpl-4","object":"text_completion","created":1700000000,"model":"m",)"
            R"("choices":[],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
  EXPECT_EQ(kStreamDoneData, "[DONE]");
}

TEST(OpenAiResponseTest, ModelList) {
  EXPECT_EQ(SerializeJson(ModelList({
                {.id = "llama", .created = 1, .root = "/models/llama", .max_model_len = 8192},
                {.id = "llama-sql",
                 .created = 2,
                 .root = "/adapters/sql",
                 .parent = "llama",
                 .max_model_len = 8192},
            })),
            R"({"object":"list","data":[)"
            R"({"id":"llama","object":"model","created":1,"owned_by":"sovai",)"
            R"("root":"/models/llama","parent":null,"max_model_len":8192},)"
            R"({"id":"llama-sql","object":"model","created":2,"owned_by":"sovai",)"
            R"("root":"/adapters/sql","parent":"llama","max_model_len":8192}]})");
  EXPECT_EQ(SerializeJson(ModelList({})), R"({"object":"list","data":[]})");
}

TEST(OpenAiResponseTest, InvalidUtf8IsReplacedNotThrown) {
  // A token that ends inside a character.
  ChoiceResult partial{.text = "\xE2\x80"};
  std::string body = SerializeJson(ChatCompletionResponse(Meta("c"), {partial}, {}));
  EXPECT_NE(body.find("\"content\":\"\xEF\xBF\xBD"), std::string::npos) << body;
}

TEST(OpenAiResponseTest, ResponseIds) {
  std::string chat = NewResponseId(Endpoint::kChatCompletions);
  std::string completion = NewResponseId(Endpoint::kCompletions);
  EXPECT_EQ(chat.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(chat.size(), 9u + 24u);
  EXPECT_EQ(completion.rfind("cmpl-", 0), 0u);
  EXPECT_EQ(completion.size(), 5u + 24u);
  EXPECT_NE(chat, NewResponseId(Endpoint::kChatCompletions));
}

// --- Cache key ---

TEST(OpenAiCacheKeyTest, EqualMeaningGivesEqualKeys) {
  const std::string a = CacheKey(
      ParseChatOk(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0,)"
                  R"("stop":"x","max_tokens":5,"response_format":{"type":"json_schema",)"
                  R"("json_schema":{"name":"s","schema":{"type":"object","required":["a"]}}}})"),
      "hash1");
  const std::string b = CacheKey(
      ParseChatOk(R"({"response_format":{"json_schema":{"schema":{"required":["a"],)"
                  R"("type":"object"},"name":"s"},"type":"json_schema"},)"
                  R"("max_completion_tokens":5,"stop":["x"],"temperature":0.0,)"
                  R"("messages":[{"content":[{"text":"hi","type":"text"}],"role":"user"}],)"
                  R"("model":"m","stream":true,"stream_options":{"include_usage":true},)"
                  R"("user":"someone","top_p":1,"n":1,"unknown":7})",
                  {.cache_control = base::CacheControl::kNoStore}),
      "hash1");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(OpenAiCacheKeyTest, AnyOutputFieldChangesTheKey) {
  const std::string base_body = Chat(R"(,"temperature":0,"seed":1)");
  const std::string base = CacheKey(ParseChatOk(base_body), "h");
  const std::vector<std::string> variants = {
      Chat(R"(,"temperature":0.1,"seed":1)"),
      Chat(R"(,"temperature":0,"seed":2)"),
      Chat(R"(,"temperature":0)"),
      Chat(R"(,"temperature":0,"seed":1,"top_p":0.9)"),
      Chat(R"(,"temperature":0,"seed":1,"top_k":5)"),
      Chat(R"(,"temperature":0,"seed":1,"n":2)"),
      Chat(R"(,"temperature":0,"seed":1,"max_tokens":9)"),
      Chat(R"(,"temperature":0,"seed":1,"stop":"s")"),
      Chat(R"(,"temperature":0,"seed":1,"stop_token_ids":[2])"),
      Chat(R"(,"temperature":0,"seed":1,"ignore_eos":true)"),
      Chat(R"(,"temperature":0,"seed":1,"min_tokens":2)"),
      Chat(R"(,"temperature":0,"seed":1,"presence_penalty":0.1)"),
      Chat(R"(,"temperature":0,"seed":1,"frequency_penalty":0.1)"),
      Chat(R"(,"temperature":0,"seed":1,"repetition_penalty":1.1)"),
      Chat(R"(,"temperature":0,"seed":1,"min_p":0.1)"),
      Chat(R"(,"temperature":0,"seed":1,"logit_bias":{"3":1})"),
      Chat(R"(,"temperature":0,"seed":1,"logit_bias":{"3":2})"),
      Chat(R"(,"temperature":0,"seed":1,"logit_bias":{"4":1})"),
      Chat(R"(,"temperature":0,"seed":1,"logprobs":true)"),
      Chat(R"(,"temperature":0,"seed":1,"logprobs":true,"top_logprobs":2)"),
      Chat(R"(,"temperature":0,"seed":1,"response_format":{"type":"json_object"})"),
      R"({"model":"m2","messages":[{"role":"user","content":"hi"}],"temperature":0,"seed":1})",
      R"({"model":"m","messages":[{"role":"user","content":"hi!"}],"temperature":0,"seed":1})",
      R"({"model":"m","messages":[{"role":"system","content":"hi"}],"temperature":0,"seed":1})",
  };
  for (const std::string& v : variants) {
    EXPECT_NE(CacheKey(ParseChatOk(v), "h"), base) << v;
  }
  EXPECT_NE(CacheKey(ParseChatOk(base_body), "other-adapter-hash"), base);

  // The endpoint and the form of the prompt count; the two json_schema schemas differ.
  const std::string text = CacheKey(ParseCompletionOk(Completion(R"(,"temperature":0)")), "h");
  EXPECT_NE(text, CacheKey(ParseCompletionOk(Completion(R"(,"temperature":0,"echo":true)")), "h"));
  EXPECT_NE(CacheKey(ParseCompletionOk(R"({"model":"m","prompt":[1,2]})"), "h"),
            CacheKey(ParseCompletionOk(R"({"model":"m","prompt":[1,3]})"), "h"));
  // A batch is not its first prompt, nor the same prompts in another order; the text "1" is not
  // the token id 1.
  EXPECT_NE(CacheKey(ParseCompletionOk(R"({"model":"m","prompt":["a","b"]})"), "h"),
            CacheKey(ParseCompletionOk(R"({"model":"m","prompt":"a"})"), "h"));
  EXPECT_NE(CacheKey(ParseCompletionOk(R"({"model":"m","prompt":["a","b"]})"), "h"),
            CacheKey(ParseCompletionOk(R"({"model":"m","prompt":["b","a"]})"), "h"));
  EXPECT_NE(CacheKey(ParseCompletionOk(R"({"model":"m","prompt":"1"})"), "h"),
            CacheKey(ParseCompletionOk(R"({"model":"m","prompt":[1]})"), "h"));
  EXPECT_EQ(CacheKey(ParseCompletionOk(R"({"model":"m","prompt":["a"]})"), "h"),
            CacheKey(ParseCompletionOk(R"({"model":"m","prompt":"a"})"), "h"));
  auto schema_key = [](std::string_view schema) {
    return CacheKey(ParseChatOk(Chat(R"(,"response_format":{"type":"json_schema","json_schema":)"
                                     R"({"name":"s","schema":)" +
                                     std::string(schema) + "}}")),
                    "h");
  };
  EXPECT_NE(schema_key(R"({"type":"object"})"), schema_key(R"({"type":"array"})"));
}

TEST(OpenAiCacheKeyTest, CanonicalRequestIsSortedAndNormalized) {
  std::string canonical = CanonicalRequest(ParseCompletionOk(Completion(R"(,"stop":"z")")), "h");
  EXPECT_EQ(
      canonical,
      R"({"adapter_hash":"h","echo":false,"endpoint":"completions",)"
      R"("frequency_penalty":0.0,"ignore_eos":false,"logit_bias":[],"logprobs":false,)"
      R"("max_tokens":16,"min_p":0.0,"min_tokens":0,"model":"m","n":1,"presence_penalty":0.0,)"
      R"("prompts":[{"text":"hi"}],"repetition_penalty":1.0,"response_format":{"type":"text"},"seed":null,)"
      R"("stop":["z"],"stop_token_ids":[],"temperature":1.0,"top_k":0,"top_logprobs":0,)"
      R"("top_p":1.0})");
  // The biases in token order, whatever order the request gave them in.
  EXPECT_EQ(CanonicalRequest(ParseChatOk(Chat(R"(,"logit_bias":{"9":1,"10":-2})")), "h"),
            CanonicalRequest(ParseChatOk(Chat(R"(,"logit_bias":{"10":-2,"9":1})")), "h"));
}

TEST(OpenAiCacheKeyTest, CacheableOnlyWhenDeterministic) {
  EXPECT_FALSE(Cacheable(ParseChatOk(Chat())));  // sampling without a seed
  EXPECT_FALSE(Cacheable(ParseChatOk(Chat(R"(,"temperature":0.7,"n":2)"))));
  EXPECT_TRUE(Cacheable(ParseChatOk(Chat(R"(,"temperature":0)"))));
  EXPECT_TRUE(Cacheable(ParseChatOk(Chat(R"(,"top_k":1)"))));
  EXPECT_TRUE(Cacheable(ParseChatOk(Chat(R"(,"temperature":0.7,"seed":3)"))));
  EXPECT_TRUE(Cacheable(ParseChatOk(Chat(R"(,"temperature":0.7,"seed":3,"n":4)"))));
  EXPECT_TRUE(Cacheable(ParseCompletionOk(Completion(R"(,"temperature":0)"))));
  // Streamed answers are never cached (the server used to check this apart from Cacheable).
  EXPECT_FALSE(Cacheable(ParseChatOk(Chat(R"(,"temperature":0,"stream":true)"))));
}

TEST(OpenAiCacheKeyTest, CacheControlDecidesLookupAndStore) {
  using base::CacheControl;
  auto use = [](std::string_view extra, CacheControl cc) {
    return CacheUse(ParseChatOk(Chat(extra), {.cache_control = cc}));
  };
  const base::ResponseCacheUse both{.lookup = true, .store = true};
  const base::ResponseCacheUse store_only{.lookup = false, .store = true};
  const base::ResponseCacheUse neither{};
  EXPECT_EQ(use(R"(,"temperature":0)", CacheControl::kDefault), both);
  EXPECT_EQ(use(R"(,"seed":4)", CacheControl::kDefault), both);
  // no-cache: a fresh answer, which replaces the stored one.
  EXPECT_EQ(use(R"(,"temperature":0)", CacheControl::kNoCache), store_only);
  EXPECT_EQ(use(R"(,"seed":4,"n":2)", CacheControl::kNoCache), store_only);
  // no-store: the cache is not touched.
  EXPECT_EQ(use(R"(,"temperature":0)", CacheControl::kNoStore), neither);
  EXPECT_EQ(use(R"(,"seed":4)", CacheControl::kNoStore), neither);
  // Not cacheable whatever the header says.
  EXPECT_EQ(use("", CacheControl::kDefault), neither);
  EXPECT_EQ(use("", CacheControl::kNoCache), neither);
  EXPECT_EQ(use(R"(,"temperature":0,"stream":true)", CacheControl::kDefault), neither);
}

}  // namespace
}  // namespace sovai::serve
