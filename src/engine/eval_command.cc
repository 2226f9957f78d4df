// `sovai-engine eval` (docs/engine.md): exact-match accuracy of a model (and a LoRA adapter) on
// held-out JSONL data, with greedy decoding batched through the inference engine (serve::Engine),
// so the score is that of the model as `sovai-engine serve` runs it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/status.h"
#include "base/strings.h"
#include "engine/backend_choice.h"
#include "engine/commands.h"
#include "engine/limits.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "serve/engine.h"
#include "train/chat_data.h"

namespace sovai::engine {
namespace {

using base::Result;
using base::Status;

// The adapter's name inside the engine (never seen by the user).
constexpr char kAdapterName[] = "eval-adapter";

// One scored example: the prompt as the model sees it and the answer it should give.
struct EvalExample {
  size_t line = 0;        // 1-based line of the data file
  bool chat = false;      // {"messages"}: rendered with the chat template; else {"prompt"}
  std::string request;    // the last user message, or the prompt (for the report)
  std::string prompt;     // the text to encode
  std::string reference;  // the last assistant message, or the completion
};

struct EvalResult {
  std::string prediction;
  serve::FinishReason finish = serve::FinishReason::kNone;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

Status LineError(const std::string& path, size_t line, const std::string& message) {
  return base::InvalidArgumentError(path + ":" + std::to_string(line) + ": " + message);
}

// Parses one data line into an example. Chat lines must end with an assistant message (the
// reference) that follows at least one other message; only role and content are used, as the
// trainer does.
Result<EvalExample> ParseExample(const model::ChatTemplate& chat_template, const std::string& path,
                                 size_t line, std::string_view text) {
  auto parsed = base::ParseJson(text);
  if (!parsed.ok()) return LineError(path, line, parsed.status().message());
  const nlohmann::json& j = *parsed;
  EvalExample example;
  example.line = line;
  if (j.is_object() && j.contains("messages")) {
    const nlohmann::json& messages = j["messages"];
    if (!messages.is_array() || messages.size() < 2) {
      return LineError(path, line, "\"messages\" must be an array of at least two messages");
    }
    std::vector<model::ChatMessage> conversation;
    for (size_t i = 0; i < messages.size(); ++i) {
      const nlohmann::json& m = messages[i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return LineError(path, line, "message " + std::to_string(i) + " has no \"role\" string");
      }
      model::ChatMessage message;
      message.role = m["role"].get<std::string>();
      message.content =
          m.contains("content") ? nlohmann::ordered_json(m["content"]) : nlohmann::ordered_json("");
      conversation.push_back(std::move(message));
    }
    const model::ChatMessage& last = conversation.back();
    if (last.role != "assistant" || !last.content.is_string()) {
      return LineError(path, line,
                       "the last message must be the assistant's reference answer (a string)");
    }
    example.chat = true;
    example.reference = last.content.get<std::string>();
    conversation.pop_back();
    for (auto it = conversation.rbegin(); it != conversation.rend(); ++it) {
      if (it->role == "user" && it->content.is_string()) {
        example.request = it->content.get<std::string>();
        break;
      }
    }
    auto rendered = chat_template.Render(conversation, nullptr, /*add_generation_prompt=*/true);
    if (!rendered.ok()) {
      return LineError(
          path, line,
          "the model's chat template rejected the messages: " + rendered.status().message());
    }
    example.prompt = std::move(*rendered);
    return example;
  }
  if (j.is_object() && j.contains("prompt") && j.contains("completion") &&
      j["prompt"].is_string() && j["completion"].is_string()) {
    example.request = j["prompt"].get<std::string>();
    example.prompt = example.request;
    example.reference = j["completion"].get<std::string>();
    return example;
  }
  return LineError(path, line,
                   "expected {\"messages\": [..., {\"role\": \"assistant\", ...}]} or "
                   "{\"prompt\", \"completion\"}");
}

Result<std::vector<EvalExample>> LoadExamples(base::Env& env,
                                              const model::ChatTemplate& chat_template,
                                              const std::string& path) {
  auto text = env.ReadFile(path, kMaxEvalDataBytes);
  if (!text.ok()) {
    if (text.status().code() == base::StatusCode::kResourceExhausted) {
      return base::ResourceExhaustedError(path + " is larger than " +
                                          std::to_string(kMaxEvalDataBytes >> 20) + " MiB");
    }
    return text.status().WithContext(path);
  }
  std::vector<EvalExample> examples;
  size_t line = 0;
  for (std::string_view piece : base::Split(*text, '\n')) {
    ++line;
    if (base::Trim(piece).empty()) continue;
    if (examples.size() == kMaxEvalExamples) {
      return base::ResourceExhaustedError(path + " has more than " +
                                          std::to_string(kMaxEvalExamples) + " examples");
    }
    SOVAI_ASSIGN_OR_RETURN(EvalExample example, ParseExample(chat_template, path, line, piece));
    examples.push_back(std::move(example));
  }
  if (examples.empty()) return base::InvalidArgumentError(path + " holds no examples");
  return examples;
}

// The token that ends an assistant turn in the chat template (Llama 3's <|eot_id|>, ChatML's
// <|im_end|>), when it is a special token. Models whose generation_config.json does not list it
// as an end-of-sequence token would otherwise run on past their answer, which a chat client does
// not see (the server hides special tokens) but an exact match would.
std::optional<int32_t> EndOfTurnToken(const model::ChatTemplate& chat_template,
                                      const model::Tokenizer& tokenizer) {
  constexpr std::string_view kProbe = "sovai-eval-probe";
  auto render =
      chat_template.RenderForTraining({model::ChatMessage::Text("user", "hi"),
                                       model::ChatMessage::Text("assistant", std::string(kProbe))});
  if (!render.ok() || render->assistant_spans.empty()) return std::nullopt;
  const model::AssistantSpan& span = render->assistant_spans.back();
  const std::string_view assistant =
      std::string_view(render->text).substr(span.begin, span.end - span.begin);
  const size_t at = assistant.find(kProbe);
  if (at == std::string_view::npos) return std::nullopt;
  auto ids = tokenizer.Encode(assistant.substr(at + kProbe.size()));
  if (!ids.ok() || ids->empty()) return std::nullopt;
  for (const model::AddedToken& added : tokenizer.added_tokens()) {
    if (added.id == ids->front() && added.special) return added.id;
  }
  return std::nullopt;
}

// Runs one generation to its end.
Result<EvalResult> Collect(serve::Generation& generation) {
  EvalResult result;
  std::vector<serve::ChoiceDelta> deltas;
  while (generation.Wait(deltas, std::chrono::seconds(1))) {
    for (const serve::ChoiceDelta& delta : deltas) {
      result.prediction += delta.text;
      if (delta.finish != serve::FinishReason::kNone) result.finish = delta.finish;
    }
  }
  SOVAI_RETURN_IF_ERROR(generation.error());
  const serve::GenerationUsage usage = generation.usage();
  result.prompt_tokens = usage.prompt_tokens;
  result.completion_tokens = usage.completion_tokens;
  return result;
}

struct EvalSettings {
  std::string data_path;
  std::string output_path;
  int64_t max_tokens = kDefaultEvalMaxTokens;
  bool use_adapter = false;
};

Status RunEval(base::Env& env, const serve::EngineOptions& engine_options,
               const EvalSettings& settings) {
  const auto started = std::chrono::steady_clock::now();
  // The data is checked before the weights load (minutes for a large model): the chat template
  // is the one the engine loads, read from the same tokenizer_config.json.
  SOVAI_ASSIGN_OR_RETURN(train::ChatData chat, train::LoadChatData(env, engine_options.model_dir));
  SOVAI_ASSIGN_OR_RETURN(std::vector<EvalExample> examples,
                         LoadExamples(env, *chat.chat_template, settings.data_path));
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<serve::Engine> engine,
                         serve::Engine::Start(engine_options));
  std::vector<int32_t> stop_tokens;
  if (auto eot = EndOfTurnToken(engine->chat_template(), engine->tokenizer())) {
    stop_tokens.push_back(*eot);
  }

  // A window of requests in flight keeps the engine's batch full without filling its waiting
  // queue (Submit answers ResourceExhausted past max_waiting); results are taken in data order.
  const size_t window = static_cast<size_t>(
      std::max<int64_t>(1, std::min(engine_options.max_num_seqs * 2, engine_options.max_waiting)));
  std::vector<EvalResult> results(examples.size());
  std::deque<std::pair<size_t, std::shared_ptr<serve::Generation>>> in_flight;
  auto drain_one = [&]() -> Status {
    auto [index, generation] = std::move(in_flight.front());
    in_flight.pop_front();
    SOVAI_ASSIGN_OR_RETURN(results[index], Collect(*generation));
    return Status();
  };
  for (size_t i = 0; i < examples.size(); ++i) {
    const EvalExample& example = examples[i];
    // A rendered chat prompt holds its special tokens; a raw prompt gets the tokenizer's (BOS),
    // as the server encodes them.
    auto prompt = engine->tokenizer().Encode(example.prompt, {.add_special_tokens = !example.chat});
    if (!prompt.ok()) {
      return LineError(settings.data_path, example.line, prompt.status().message());
    }
    const int64_t prompt_len = static_cast<int64_t>(prompt->size());
    if (prompt_len == 0 || prompt_len >= engine->max_model_len()) {
      return LineError(settings.data_path, example.line,
                       "the prompt has " + std::to_string(prompt_len) +
                           " tokens; the model's context is " +
                           std::to_string(engine->max_model_len()));
    }
    serve::GenerationRequest request;
    request.model = settings.use_adapter ? kAdapterName : engine->served_model_name();
    request.adapter = settings.use_adapter ? kAdapterName : "";
    request.prompts = {std::move(*prompt)};
    request.max_tokens = std::min(settings.max_tokens, engine->max_model_len() - prompt_len);
    request.stop_token_ids = stop_tokens;
    request.sampling.temperature = 0;  // greedy: the score is deterministic
    while (in_flight.size() >= window) SOVAI_RETURN_IF_ERROR(drain_one());
    auto generation = engine->Submit(std::move(request));
    if (!generation.ok()) {
      return LineError(settings.data_path, example.line, generation.status().message());
    }
    in_flight.emplace_back(i, std::move(*generation));
  }
  while (!in_flight.empty()) SOVAI_RETURN_IF_ERROR(drain_one());

  size_t correct = 0, cut_short = 0;
  int64_t completion_tokens = 0;
  std::string report;
  for (size_t i = 0; i < examples.size(); ++i) {
    const EvalExample& example = examples[i];
    const EvalResult& result = results[i];
    // The chat template trims what it renders (and training learned the trimmed text), so
    // whitespace around an answer does not count.
    const bool match = base::Trim(result.prediction) == base::Trim(example.reference);
    correct += match ? 1 : 0;
    cut_short += result.finish == serve::FinishReason::kLength ? 1 : 0;
    completion_tokens += result.completion_tokens;
    if (!settings.output_path.empty()) {
      nlohmann::ordered_json row;
      row["line"] = example.line;
      row["request"] = example.request;
      row["reference"] = example.reference;
      row["prediction"] = result.prediction;
      row["exact_match"] = match;
      row["finish_reason"] = serve::FinishReasonName(result.finish);
      row["prompt_tokens"] = result.prompt_tokens;
      row["completion_tokens"] = result.completion_tokens;
      report += row.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    }
  }
  if (!settings.output_path.empty()) {
    SOVAI_RETURN_IF_ERROR(env.WriteFileAtomically(settings.output_path, report));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const std::string cut_note =
      cut_short > 0 ? ", " + std::to_string(cut_short) + " cut short by --max-tokens" : "";
  std::printf("evaluated %zu examples in %.1f s (%.0f generated tokens/s)%s\n", examples.size(),
              seconds, seconds > 0 ? static_cast<double>(completion_tokens) / seconds : 0.0,
              cut_note.c_str());
  std::printf("exact match %zu/%zu = %.1f%%\n", correct, examples.size(),
              100.0 * static_cast<double>(correct) / static_cast<double>(examples.size()));
  return Status();
}

}  // namespace

int RunEvalCommand(const std::vector<std::string>& args) {
  base::FlagSet flags(
      "sovai-engine eval",
      "Scores a model (and a LoRA adapter) on JSONL data by exact match: greedy decoding of\n"
      "each example's prompt, compared with its reference. Data lines: {\"messages\": [...]}\n"
      "whose last message is the assistant's reference (the others are the prompt, rendered\n"
      "with the model's chat template), or {\"prompt\", \"completion\"}. Prints\n"
      "'exact match C/N = P%'; --output writes one JSON object per example.");
  serve::EngineOptions engine_options;
  EvalSettings settings;
  std::string lora, dtype = "q8_0", backend_name = "cpu";
  int64_t threads = 0, max_num_seqs = engine_options.max_num_seqs;
  flags.String("model", &engine_options.model_dir, "Hugging Face model directory (required)",
               "DIR");
  flags.String("lora", &lora, "a PEFT adapter directory to evaluate on top of the model", "DIR");
  flags.String("data", &settings.data_path, "JSONL file of examples (required)", "FILE");
  flags.Int("max-tokens", &settings.max_tokens, "most tokens generated per example");
  flags.String("output", &settings.output_path, "per-example results (JSONL)", "FILE");
  flags.String("dtype", &dtype, "weights in memory, as serve: q8_0, bf16 or f32", "TYPE");
  flags.Int("threads", &threads, "CPU threads (0: all cores)");
  flags.Int("max-num-seqs", &max_num_seqs, "most sequences decoded together");
  flags.String("backend", &backend_name, "cpu or cuda (a GPU; sovai-engine built with CUDA)",
               "NAME");
  base::Status parsed = flags.Parse(args);
  if (!parsed.ok()) return UsageError("eval", parsed.message());
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (!flags.positional().empty()) {
    return UsageError("eval", "unexpected argument " + flags.positional()[0]);
  }
  if (engine_options.model_dir.empty()) return UsageError("eval", "--model is required");
  if (settings.data_path.empty()) return UsageError("eval", "--data is required");
  if (settings.max_tokens < 1) return UsageError("eval", "--max-tokens must be positive");
  if (threads < 0) return UsageError("eval", "--threads must not be negative");
  if (max_num_seqs < 1) return UsageError("eval", "--max-num-seqs must be positive");
  if (dtype == "q8_0") {
    engine_options.weights = model::BaseWeights::kQ8_0;
  } else if (dtype == "bf16") {
    engine_options.weights = model::BaseWeights::kBF16;
  } else if (dtype == "f32") {
    engine_options.weights = model::BaseWeights::kF32;
  } else {
    return UsageError("eval", "--dtype must be q8_0, bf16 or f32");
  }
  if (!lora.empty()) {
    engine_options.adapters.emplace_back(kAdapterName, lora);
    settings.use_adapter = true;
  }
  engine_options.threads = static_cast<int>(threads);
  engine_options.max_num_seqs = max_num_seqs;
  if (backend_name == "cuda") {
    engine_options.make_backend = CudaBackendFactory("eval");
  } else if (backend_name != "cpu") {
    return UsageError("eval", "--backend must be cpu or cuda");
  }

  base::Status status = RunEval(base::Env::Default(), engine_options, settings);
  if (!status.ok()) {
    std::fprintf(stderr, "sovai-engine eval: %s\n", status.ToString().c_str());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace sovai::engine
