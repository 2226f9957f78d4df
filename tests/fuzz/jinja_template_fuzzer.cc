// libFuzzer target for the chat-template interpreter (src/model/jinja.h): the input is a
// template. It must parse or fail with a parse error (InvalidArgument, Unimplemented,
// ResourceExhausted) and a message naming a position; a template that parses is rendered with a
// fixed conversation (messages with a tool call, tools, special tokens, add_generation_prompt)
// under small limits, and must render or fail cleanly. Invariants: the output and every
// generation span stay within the limits and the text, and rendering is deterministic (a
// second render gives the same text or the same error).
//
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/check.h"
#include "model/jinja.h"

namespace {

using sovai::base::StatusCode;
using sovai::model::jinja::RenderOptions;
using sovai::model::jinja::RenderResult;
using sovai::model::jinja::Template;
using sovai::model::jinja::TemplateLimits;
using sovai::model::jinja::Value;

constexpr size_t kMaxOutputBytes = 64u << 10;

TemplateLimits SmallTemplateLimits() {
  TemplateLimits limits;
  limits.max_template_bytes = 32u << 10;
  limits.max_statement_depth = 32;
  limits.max_expression_depth = 64;
  return limits;
}

RenderOptions SmallRenderOptions() {
  RenderOptions options;
  options.limits.max_output_bytes = kMaxOutputBytes;
  options.limits.max_loop_iterations = 20'000;
  options.limits.max_steps = 200'000;
  options.limits.max_call_depth = 8;
  options.limits.max_evaluation_depth = 96;
  options.limits.max_range_length = 2'000;
  options.now_unix_micros = [] { return int64_t{1741530600} * 1'000'000; };
  return options;
}

sovai::model::jinja::ValueDict MakeContext() {
  auto json = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "  Hi there, héllo 👋  "},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "abcdefghi", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}]},
      {"role": "tool", "tool_call_id": "abcdefghi", "content": "{\"temp\": 21.5}"},
      {"role": "assistant", "content": "It is 21.5 °C."},
      {"role": "user", "content": "Thanks!"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather",
      "description": "Weather \"now\"\n", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
      "required": ["city"]}}}],
    "documents": null,
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "date_string": "26 Jul 2024"
  })",
                                            nullptr, /*allow_exceptions=*/false);
  SOVAI_CHECK(!json.is_discarded());
  auto value = sovai::model::jinja::FromJson(json);
  SOVAI_CHECK(value.ok()) << value.status();
  return value->dict();
}

// Built once: values are immutable, so every render may share them.
const sovai::model::jinja::ValueDict& Context() {
  static const sovai::model::jinja::ValueDict context = MakeContext();
  return context;
}

void CheckRender(const sovai::base::Result<RenderResult>& r) {
  if (!r.ok()) {
    const StatusCode code = r.status().code();
    SOVAI_CHECK(code == StatusCode::kInvalidArgument || code == StatusCode::kUnimplemented ||
                code == StatusCode::kResourceExhausted)
        << r.status();
    SOVAI_CHECK(!r.status().message().empty());
    return;
  }
  SOVAI_CHECK_LE(r->text.size(), kMaxOutputBytes);
  size_t last_end = 0;
  for (const auto& span : r->generation_spans) {
    SOVAI_CHECK_LE(span.begin, span.end);
    SOVAI_CHECK_LE(span.end, r->text.size());
    SOVAI_CHECK_LE(last_end, span.begin) << "generation spans are in output order";
    last_end = span.end;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(bytes), size);
  auto parsed = Template::Parse(input, SmallTemplateLimits());
  if (!parsed.ok()) {
    const StatusCode code = parsed.status().code();
    SOVAI_CHECK(code == StatusCode::kInvalidArgument || code == StatusCode::kUnimplemented ||
                code == StatusCode::kResourceExhausted)
        << parsed.status();
    SOVAI_CHECK(!parsed.status().message().empty());
    return 0;
  }
  const RenderOptions options = SmallRenderOptions();
  auto first = parsed->RenderValues(Context(), options);
  CheckRender(first);
  auto second = parsed->RenderValues(Context(), options);
  SOVAI_CHECK_EQ(first.ok(), second.ok());
  if (first.ok()) {
    SOVAI_CHECK(first->text == second->text) << "rendering is not deterministic";
    SOVAI_CHECK_EQ(first->generation_spans.size(), second->generation_spans.size());
  } else {
    SOVAI_CHECK(first.status() == second.status()) << first.status() << " vs " << second.status();
  }
  return 0;
}
