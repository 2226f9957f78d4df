// Command-line flags for `sovai` subcommands: `--name value`, `--name=value`, boolean
// `--name` / `--no-name`, `--` ending flags, positional arguments kept in order.
//
//   FlagSet flags("sovai server", "Runs the platform daemon.");
//   std::string data_dir = "./sovai-data";
//   flags.String("data-dir", &data_dir, "directory that holds all state");
//   SOVAI_RETURN_IF_ERROR(flags.Parse(args));
//
// Parse errors are InvalidArgument with a message naming the flag and pointing at --help.
// Not thread-safe; build and parse on one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sovai::cli {

class FlagSet {
 public:
  FlagSet(std::string command, std::string summary);

  // Registers a flag bound to `target`, whose current value is the default shown in Usage().
  void String(std::string name, std::string* target, std::string help);
  void Int(std::string name, int64_t* target, std::string help);
  void Bool(std::string name, bool* target, std::string help);

  // Parses `args` (without the program and subcommand names). "--help"/"-h" sets help_requested()
  // and stops. Errors: unknown flag, missing value, bad integer, a value given to a boolean with
  // anything but true/false/1/0.
  base::Status Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positional() const { return positional_; }
  // "Usage: ..." with every flag, its default and its help.
  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kBool };
  struct Flag {
    std::string name;
    Kind kind;
    void* target;
    std::string help;
    std::string default_text;
  };
  Flag* Find(std::string_view name);
  base::Status Assign(Flag& flag, std::string_view value);

  std::string command_;
  std::string summary_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

}  // namespace sovai::cli
