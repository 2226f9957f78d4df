// The subcommands of `sovai-engine` (main.cc holds the table that dispatches to them). Each takes
// its arguments without the program and subcommand names and returns the process exit code:
// 0 success, 1 bad input or a failure while running (the message is on stderr), 2 a usage error
// (unknown flag, missing required flag).
// Thread-safety: called once, from main.
#pragma once

#include <atomic>
#include <string>
#include <vector>

namespace sovai::engine {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Prints "sovai-engine COMMAND: MESSAGE" and where to find the usage to stderr; returns kExitUsage.
int UsageError(const std::string& command, const std::string& message);
// Makes SIGTERM and SIGINT set the returned flag (and do nothing else), for commands that stop
// cleanly: training saves a checkpoint, the server drains.
std::atomic<bool>& InstallStopSignalHandlers();

// `sovai-engine tokenize`: text on stdin -> ids as a JSON array on stdout (or, with --decode,
// a JSON array of ids -> text).
int RunTokenizeCommand(const std::vector<std::string>& args);
// `sovai-engine convert`: an HF llama directory -> GGUF.
int RunConvertCommand(const std::vector<std::string>& args);
// `sovai-engine train`: LoRA, QLoRA or full training (train/trainer.h).
int RunTrainCommand(const std::vector<std::string>& args);
// `sovai-engine serve`: the OpenAI-compatible inference server (serve/server.h).
int RunServeCommand(const std::vector<std::string>& args);
// `sovai-engine eval`: exact-match accuracy of greedy decoding on JSONL data (serve/engine.h).
int RunEvalCommand(const std::vector<std::string>& args);
// `sovai-engine tokenizer train`: trains a byte-level BPE tokenizer.
int RunTokenizerCommand(const std::vector<std::string>& args);

}  // namespace sovai::engine
