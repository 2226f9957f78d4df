// A Jinja-subset interpreter for Hugging Face chat templates (the `chat_template` strings of
// tokenizer_config.json), behaving as transformers' apply_chat_template renders them: Jinja 3
// with trim_blocks=True, lstrip_blocks=True, the loop-controls extension (break/continue),
// transformers' `{% generation %}` tag, the globals raise_exception(msg) and strftime_now(fmt),
// and tojson as json.dumps(ensure_ascii=False). The supported language is listed in
// docs/formats/chat-templates.md; chat_template.h builds the chat-specific API on top.
//
//   SOVAI_ASSIGN_OR_RETURN(Template t, Template::Parse(text));
//   SOVAI_ASSIGN_OR_RETURN(std::string out, t.Render(context_json));
//
// Values behave as in Python (jinja_value.h): `{{ none }}` prints "None", `{{ [1] }}` prints
// "[1]", a missing dict key or attribute is undefined (printing it gives "", iterating it gives
// nothing, testing it is false), and using an undefined value any other way (its attributes,
// arithmetic, calling it) is an error, as with Jinja's default Undefined.
//
// Errors name the construct and the template position as line:column:
//   InvalidArgument   syntax errors, unknown filters/tests, runtime type errors, and
//                     raise_exception() ("template raised an exception at 1:245: Conversation
//                     roles must alternate user/assistant/user/assistant/...");
//   Unimplemented     Jinja constructs outside the subset ({% include %}, the 'groupby'
//                     filter, recursive loops, ...);
//   ResourceExhausted a limit of TemplateLimits or RenderLimits.
//
// Limits (TemplateLimits, RenderLimits) bound the template size, statement and expression
// nesting, evaluation steps, loop iterations, macro recursion, output size and the size of
// every value the template builds, so that any input renders or fails in bounded time and memory.
//
// Thread-safety: a Template is immutable after Parse; Render may run concurrently from several
// threads (each render has its own state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/jinja_value.h"

namespace sovai::model::jinja {

// Real chat templates are 0.1-30 KiB.
inline constexpr size_t kMaxTemplateBytes = 1u << 20;  // 1 MiB
inline constexpr int kMaxStatementDepth = 64;
inline constexpr int kMaxExpressionDepth = 128;

// Per render. The defaults leave room for long conversations with large tool schemas.
inline constexpr size_t kMaxOutputBytes = 16u << 20;         // 16 MiB
inline constexpr uint64_t kMaxLoopIterations = 1'000'000;    // all loops of one render
inline constexpr uint64_t kMaxEvaluationSteps = 20'000'000;  // expressions and statements
inline constexpr int kMaxCallDepth = 32;                     // macro calls inside macro calls
inline constexpr int kMaxEvaluationDepth = 256;              // interpreter recursion
inline constexpr int64_t kMaxRangeLength = 100'000;          // range(); Jinja's sandbox limit

struct TemplateLimits {
  size_t max_template_bytes = kMaxTemplateBytes;
  int max_statement_depth = kMaxStatementDepth;
  int max_expression_depth = kMaxExpressionDepth;
};

struct RenderLimits {
  // The output, and also any one string or value the template builds (value weight, see
  // jinja_value.h).
  size_t max_output_bytes = kMaxOutputBytes;
  uint64_t max_loop_iterations = kMaxLoopIterations;
  uint64_t max_steps = kMaxEvaluationSteps;
  int max_call_depth = kMaxCallDepth;
  int max_evaluation_depth = kMaxEvaluationDepth;
  int64_t max_range_length = kMaxRangeLength;
};

struct RenderOptions {
  RenderLimits limits;
  // The clock of strftime_now(), in microseconds since the Unix epoch; times are formatted in
  // UTC. Unset: the system clock.
  std::function<int64_t()> now_unix_micros;
};

// A `{% generation %}...{% endgeneration %}` block's output: bytes [begin, end) of the text.
struct GenerationSpan {
  size_t begin = 0;
  size_t end = 0;
  friend bool operator==(const GenerationSpan&, const GenerationSpan&) = default;
};

struct RenderResult {
  std::string text;
  std::vector<GenerationSpan> generation_spans;  // in output order
};

class Template {
 public:
  // Parses a template. Errors: InvalidArgument (syntax, unknown filter/test, invalid UTF-8),
  // Unimplemented (constructs outside the subset), ResourceExhausted (limits), each naming the
  // line:column.
  static base::Result<Template> Parse(std::string_view source, const TemplateLimits& limits = {});

  // Renders with `context`, a JSON object whose members are the template's variables.
  base::Result<std::string> Render(const nlohmann::ordered_json& context,
                                   const RenderOptions& options = {}) const;
  // The same with variables already converted to values, and the generation spans.
  base::Result<RenderResult> RenderValues(const ValueDict& context,
                                          const RenderOptions& options = {}) const;

  // True when the template has {% generation %} blocks.
  bool uses_generation() const;
  // The normalized source (newlines as \n, no trailing newline).
  const std::string& source() const;

  struct Compiled;  // internal: source map and syntax tree

 private:
  explicit Template(std::shared_ptr<const Compiled> compiled) : compiled_(std::move(compiled)) {}
  std::shared_ptr<const Compiled> compiled_;
};

// Python's time.strftime for the directives %a %A %b %B %d %e %F %H %I %j %m %M %p %S %T %y %Y
// %z %Z %% (C/English locale, UTC). Errors: InvalidArgument for any other directive.
base::Result<std::string> FormatStrftime(std::string_view format, int64_t unix_micros);

}  // namespace sovai::model::jinja
