// `sovai-engine tokenize` and `sovai-engine tokenizer train` (docs/engine.md).
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/flags.h"
#include "base/json.h"
#include "engine/commands.h"
#include "model/tokenizer.h"
#include "model/tokenizer_limits.h"
#include "model/tokenizer_trainer.h"

namespace sovai::engine {
namespace {

// stdin for --decode: a JSON array of ids, digits and separators (well above kMaxDecodeIds
// short ids, well below what would make the JSON DOM a memory problem).
constexpr size_t kMaxDecodeInputBytes = 64u << 20;

void PrintError(const std::string& command, const base::Status& status) {
  std::fprintf(stderr, "sovai-engine %s: %s\n", command.c_str(), status.ToString().c_str());
}

base::Result<std::string> ReadStdin(size_t max_bytes) {
  auto text = base::ReadFdToEnd(STDIN_FILENO, max_bytes);
  if (!text.ok() && text.status().code() == base::StatusCode::kResourceExhausted) {
    return base::ResourceExhaustedError("standard input is larger than " +
                                        std::to_string(max_bytes) + " bytes");
  }
  return text;
}

base::Result<std::vector<model::TokenId>> ParseIds(std::string_view text) {
  auto json = base::ParseJson(text, {.max_bytes = kMaxDecodeInputBytes, .max_depth = 2});
  if (!json.ok()) return json.status().WithContext("standard input");
  if (!json->is_array()) {
    return base::InvalidArgumentError("standard input must be a JSON array of token ids");
  }
  if (json->size() > model::kMaxDecodeIds) {
    return base::ResourceExhaustedError("standard input has " + std::to_string(json->size()) +
                                        " ids; the limit is " +
                                        std::to_string(model::kMaxDecodeIds));
  }
  std::vector<model::TokenId> ids;
  ids.reserve(json->size());
  for (size_t i = 0; i < json->size(); ++i) {
    const auto& value = (*json)[i];
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() > INT32_MAX) {
      return base::InvalidArgumentError("element " + std::to_string(i) +
                                        " of the input is not a token id (a non-negative "
                                        "integer)");
    }
    ids.push_back(static_cast<model::TokenId>(value.get<int64_t>()));
  }
  return ids;
}

}  // namespace

int RunTokenizeCommand(const std::vector<std::string>& args) {
  const std::string command = "tokenize";
  base::FlagSet flags(
      "sovai-engine tokenize",
      "Reads UTF-8 text on standard input and prints its token ids as a JSON array.\n"
      "With --decode, reads a JSON array of token ids and prints their text (as is,\n"
      "without an added newline). The whole input is one text: a trailing newline\n"
      "is part of it. Exit status: 0 success, 1 bad input or tokenizer, 2 usage.");
  std::string tokenizer_path;
  bool decode = false;
  bool add_special = false;
  bool skip_special = false;
  flags.String("tokenizer", &tokenizer_path, "tokenizer.json to use (required)", "FILE");
  flags.HideDefault("tokenizer");
  flags.Bool("decode", &decode, "read token ids, print text");
  flags.Bool("add-special", &add_special,
             "add the post-processor's special tokens (Llama 2's <s>, a BOS); off by default");
  flags.Bool("skip-special", &skip_special, "with --decode: leave special tokens out");
  base::Status parsed = flags.Parse(args);
  if (!parsed.ok()) return UsageError(command, parsed.message());
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (!flags.positional().empty()) {
    return UsageError(command, "unexpected argument '" + flags.positional()[0] +
                                   "' (the text comes on standard input)");
  }
  if (tokenizer_path.empty()) return UsageError(command, "--tokenizer FILE is required");
  if (add_special && decode) return UsageError(command, "--add-special is for encoding");
  if (skip_special && !decode) return UsageError(command, "--skip-special is for --decode");

  auto tokenizer = model::Tokenizer::FromFile(base::Env::Default(), tokenizer_path);
  if (!tokenizer.ok()) {
    PrintError(command, tokenizer.status());
    return kExitFailure;
  }
  auto input = ReadStdin(decode ? kMaxDecodeInputBytes : model::kMaxEncodeInputBytes);
  if (!input.ok()) {
    PrintError(command, input.status());
    return kExitFailure;
  }
  std::string output;
  if (decode) {
    auto ids = ParseIds(*input);
    if (!ids.ok()) {
      PrintError(command, ids.status());
      return kExitFailure;
    }
    auto text = tokenizer->Decode(*ids, {.skip_special_tokens = skip_special});
    if (!text.ok()) {
      PrintError(command, text.status());
      return kExitFailure;
    }
    output = std::move(text).value();
  } else {
    auto ids = tokenizer->Encode(*input, {.add_special_tokens = add_special});
    if (!ids.ok()) {
      PrintError(command, ids.status().WithContext("standard input"));
      return kExitFailure;
    }
    output = "[";
    for (size_t i = 0; i < ids->size(); ++i) {
      if (i > 0) output += ",";
      output += std::to_string((*ids)[i]);
    }
    output += "]\n";
  }
  base::Status written = base::WriteFdFully(STDOUT_FILENO, output);
  if (!written.ok()) {
    PrintError(command, written);
    return kExitFailure;
  }
  return kExitOk;
}

namespace {

int RunTrain(const std::vector<std::string>& args) {
  const std::string command = "tokenizer train";
  base::FlagSet flags(
      "sovai-engine tokenizer train",
      "Trains a byte-level BPE tokenizer (GPT-2 pre-tokenization, 256 byte tokens, then merges by\n"
      "pair frequency, then the special tokens <|begin_of_text|>, <|end_of_text|>,\n"
      "<|start_header_id|>, <|end_header_id|>, <|eot_id|>) on UTF-8 text files, and writes\n"
      "DIR/tokenizer.json and DIR/tokenizer_config.json.");
  int64_t vocab_size = 0;
  std::vector<std::string> inputs;
  std::string output_dir;
  flags.Int("vocab-size", &vocab_size,
            "tokens in all: 256 bytes + learned tokens + 5 special tokens (required)");
  flags.HideDefault("vocab-size");
  flags.StringList("input", &inputs, "a text file to train on; more may follow as arguments",
                   "FILE");
  flags.String("output", &output_dir, "directory to write the tokenizer to (required)", "DIR");
  flags.HideDefault("output");
  flags.Positional("[FILE...]");
  base::Status parsed = flags.Parse(args);
  if (!parsed.ok()) return UsageError(command, parsed.message());
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  inputs.insert(inputs.end(), flags.positional().begin(), flags.positional().end());
  if (inputs.empty()) return UsageError(command, "--input FILE is required");
  if (output_dir.empty()) return UsageError(command, "--output DIR is required");
  if (!flags.WasSet("vocab-size")) return UsageError(command, "--vocab-size N is required");
  if (vocab_size < static_cast<int64_t>(model::kMinTrainVocabSize) ||
      vocab_size > static_cast<int64_t>(model::kMaxTrainVocabSize)) {
    return UsageError(command, "--vocab-size must be in [" +
                                   std::to_string(model::kMinTrainVocabSize) + ", " +
                                   std::to_string(model::kMaxTrainVocabSize) + "]");
  }
  auto trained = model::TrainTokenizerFiles(base::Env::Default(), inputs, output_dir,
                                            {.vocab_size = static_cast<size_t>(vocab_size)});
  if (!trained.ok()) {
    PrintError(command, trained.status());
    return kExitFailure;
  }
  std::printf("wrote %s/tokenizer.json: %zu tokens (%zu merges)\n", output_dir.c_str(),
              trained->vocab_size, trained->merges);
  return kExitOk;
}

constexpr const char* kTokenizerUsage =
    "Usage: sovai-engine tokenizer SUBCOMMAND [flags]\n"
    "\n"
    "Subcommands:\n"
    "  train       train a byte-level BPE tokenizer on text files\n"
    "\n"
    "Run 'sovai-engine tokenizer train --help' for its flags.\n";

}  // namespace

int RunTokenizerCommand(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fputs(kTokenizerUsage, stderr);
    return kExitUsage;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kTokenizerUsage, stdout);
    return kExitOk;
  }
  if (args[0] == "train") return RunTrain(std::vector<std::string>(args.begin() + 1, args.end()));
  return UsageError("tokenizer", "unknown subcommand '" + args[0] + "'");
}

}  // namespace sovai::engine
