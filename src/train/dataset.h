// Training data: JSONL files, one example per line, in the formats fine-tuning users bring:
//   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}   chat
//   {"prompt": "...", "completion": "..."}                                       completion
//   {"instruction": "...", "input": "...", "output": "..."}                      Alpaca
//   {"text": "..."}                                                              plain text
// Each line becomes a Record: text pieces, each marked as trained on (the loss counts its tokens)
// or not. Chat lines are rendered with the model's chat template (the caller's RenderChat), which
// marks the assistant messages; a completion's prompt and an Alpaca prompt are not trained on.
//
// Limits: a line of at most kMaxLineBytes, at most kMaxRecords records, JSON nesting as
// base::ParseJson allows. A malformed line is an error naming the file and the 1-based line —
// or, with skip_bad_lines, skipped and counted. Blank lines are ignored.
//
// Thread-safety: functions over caller-owned values.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"

namespace sovai::train {

inline constexpr size_t kMaxLineBytes = 8 << 20;
inline constexpr size_t kMaxRecords = 10'000'000;

struct TextPiece {
  std::string text;
  bool trained = false;
};
struct Record {
  std::vector<TextPiece> pieces;
  bool chat = false;  // rendered by the chat template (which writes its own BOS)
};

// Renders a `messages` array into pieces (assistant content trained). Errors name what is wrong
// with the conversation; the loader adds the file and line.
using RenderChat = std::function<base::Result<std::vector<TextPiece>>(const nlohmann::json&)>;

struct LoadOptions {
  bool skip_bad_lines = false;
  // Appended to the trained text of completion, Alpaca and text records (the EOS token's text),
  // so the model learns to stop.
  std::string eos_text;
};

struct LoadedData {
  std::vector<Record> records;
  int64_t skipped_lines = 0;
  std::string first_skip_reason;  // for the log, when lines were skipped
};

// Parses one JSONL line (already known not blank).
base::Result<Record> ParseRecord(std::string_view line, const RenderChat& render_chat,
                                 const LoadOptions& options);

// Loads a .jsonl file, or every *.jsonl file of a directory in name order.
base::Result<LoadedData> LoadJsonl(base::Env& env, const std::string& path,
                                   const RenderChat& render_chat, const LoadOptions& options);

// Alpaca's prompt (Stanford Alpaca's template, with or without an input).
std::string AlpacaPrompt(std::string_view instruction, std::string_view input);

}  // namespace sovai::train
