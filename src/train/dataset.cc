#include "train/dataset.h"

#include <algorithm>

#include "base/json.h"

namespace sovai::train {

using base::Result;
using base::Status;
using base::StatusCode;

namespace {

Result<std::string> StringField(const nlohmann::json& j, const char* name, bool required) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    if (required)
      return Status(StatusCode::kInvalidArgument, std::string("'") + name + "' is missing");
    return std::string();
  }
  if (!it->is_string()) {
    return Status(StatusCode::kInvalidArgument, std::string("'") + name + "' must be a string");
  }
  return it->get<std::string>();
}

Status Invalid(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

}  // namespace

std::string AlpacaPrompt(std::string_view instruction, std::string_view input) {
  std::string out;
  if (input.empty()) {
    out =
        "Below is an instruction that describes a task. Write a response that appropriately "
        "completes the request.\n\n### Instruction:\n";
    out += instruction;
  } else {
    out =
        "Below is an instruction that describes a task, paired with an input that provides "
        "further context. Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n";
    out += instruction;
    out += "\n\n### Input:\n";
    out += input;
  }
  out += "\n\n### Response:\n";
  return out;
}

Result<Record> ParseRecord(std::string_view line, const RenderChat& render_chat,
                           const LoadOptions& options) {
  auto parsed = base::ParseJson(line);
  if (!parsed.ok()) return Invalid("not valid JSON: " + parsed.status().message());
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return Invalid("a line must be a JSON object");
  Record record;
  if (j.contains("messages")) {
    const nlohmann::json& messages = j["messages"];
    if (!messages.is_array() || messages.empty()) {
      return Invalid("'messages' must be a non-empty array");
    }
    bool has_assistant = false;
    for (const nlohmann::json& m : messages) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return Invalid("every message needs a string 'role'");
      }
      if (!m.contains("content") || !(m["content"].is_string() || m["content"].is_null())) {
        return Invalid("every message needs a string 'content'");
      }
      has_assistant |= m["role"] == "assistant";
    }
    if (!has_assistant) return Invalid("a conversation needs an assistant message to learn from");
    if (!render_chat) return Invalid("chat examples need a chat template");
    SOVAI_ASSIGN_OR_RETURN(record.pieces, render_chat(messages));
    record.chat = true;
  } else if (j.contains("prompt") || j.contains("completion")) {
    SOVAI_ASSIGN_OR_RETURN(std::string prompt, StringField(j, "prompt", true));
    SOVAI_ASSIGN_OR_RETURN(std::string completion, StringField(j, "completion", true));
    record.pieces = {{std::move(prompt), false}, {completion + options.eos_text, true}};
  } else if (j.contains("instruction")) {
    SOVAI_ASSIGN_OR_RETURN(std::string instruction, StringField(j, "instruction", true));
    SOVAI_ASSIGN_OR_RETURN(std::string input, StringField(j, "input", false));
    SOVAI_ASSIGN_OR_RETURN(std::string output, StringField(j, "output", true));
    record.pieces = {{AlpacaPrompt(instruction, input), false}, {output + options.eos_text, true}};
  } else if (j.contains("text")) {
    SOVAI_ASSIGN_OR_RETURN(std::string text, StringField(j, "text", true));
    record.pieces = {{text + options.eos_text, true}};
  } else {
    return Invalid(
        "unknown example format: expected 'messages', 'prompt'/'completion', "
        "'instruction'/'output' or 'text'");
  }
  bool trains = std::any_of(record.pieces.begin(), record.pieces.end(),
                            [](const TextPiece& p) { return p.trained && !p.text.empty(); });
  if (!trains) return Invalid("the example has nothing to learn (empty completion or output)");
  return record;
}

namespace {

Status LoadFile(base::Env& env, const std::string& path, const RenderChat& render_chat,
                const LoadOptions& options, LoadedData& out) {
  SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(path, uint64_t{16} << 30));
  size_t start = 0;
  int64_t line_number = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    Status bad;
    if (line.size() > kMaxLineBytes) {
      bad = Invalid("the line is longer than " + std::to_string(kMaxLineBytes) + " bytes");
    } else {
      auto record = ParseRecord(line, render_chat, options);
      if (record.ok()) {
        if (out.records.size() >= kMaxRecords) {
          return Status(StatusCode::kResourceExhausted,
                        "more than " + std::to_string(kMaxRecords) + " examples");
        }
        out.records.push_back(std::move(*record));
        continue;
      }
      bad = record.status();
    }
    std::string where = path + ":" + std::to_string(line_number) + ": " + bad.message();
    if (!options.skip_bad_lines) {
      return Status(StatusCode::kInvalidArgument,
                    where + " (use --skip-bad-lines to skip such lines)");
    }
    if (out.skipped_lines++ == 0) out.first_skip_reason = where;
  }
  return Status();
}

}  // namespace

Result<LoadedData> LoadJsonl(base::Env& env, const std::string& path, const RenderChat& render_chat,
                             const LoadOptions& options) {
  SOVAI_ASSIGN_OR_RETURN(base::FileStat stat, env.Stat(path));
  LoadedData out;
  if (stat.type == base::FileType::kDirectory) {
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> names, env.ListDir(path));
    std::sort(names.begin(), names.end());
    int files = 0;
    for (const std::string& name : names) {
      if (!name.ends_with(".jsonl")) continue;
      ++files;
      SOVAI_RETURN_IF_ERROR(LoadFile(env, path + "/" + name, render_chat, options, out));
    }
    if (files == 0) return Invalid(path + " holds no .jsonl file");
  } else {
    SOVAI_RETURN_IF_ERROR(LoadFile(env, path, render_chat, options, out));
  }
  if (out.records.empty()) return Invalid(path + " holds no usable example");
  return out;
}

}  // namespace sovai::train
