// Command-line flags of `sovai` and `sovai-engine` subcommands: `--name value`, `--name=value`,
// boolean
// `--name` / `--no-name`, one-letter aliases (`-o json`, `-f`), repeated flags collected in order
// (`--volume A --volume B`), `--` ending flags, positional arguments kept in order.
//
//   FlagSet flags("sovai server", "Runs the platform daemon.");
//   std::string data_dir = "./sovai-data";
//   flags.String("data-dir", &data_dir, "directory that holds all state");
//   std::vector<std::string> volumes;
//   flags.StringList("volume", &volumes, "bucket@REGION/prefix:/path[:ro|rw]", "SPEC");
//   flags.Short('v', "volume");
//   SOVAI_RETURN_IF_ERROR(flags.Parse(args));
//
// Parse errors are InvalidArgument with a message naming the flag and pointing at --help.
// Not thread-safe; build and parse on one thread.
//
// It lives in base, not cli, because both binaries parse flags and the ML engine links no platform
// module (src/README.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sovai::base {

class FlagSet {
 public:
  FlagSet(std::string command, std::string summary);

  // Registers a flag bound to `target`, whose current value is the default shown in Usage().
  // `value_name` is the placeholder Usage() shows for the value ("VALUE", "N", "SPEC").
  void String(std::string name, std::string* target, std::string help,
              std::string value_name = "VALUE");
  void Int(std::string name, int64_t* target, std::string help, std::string value_name = "N");
  void Bool(std::string name, bool* target, std::string help);
  // A flag that may repeat: each occurrence appends its value to `target`, in order.
  void StringList(std::string name, std::vector<std::string>* target, std::string help,
                  std::string value_name = "VALUE");
  // `-c` as another spelling of the registered flag `--name` (a bool takes no value: `-f`; the
  // others take the next argument: `-o json`). Registering an alias of an unknown flag, or one
  // letter twice, is a bug (SOVAI_CHECK).
  void Short(char letter, std::string_view name);
  // Usage() shows no "(default: ...)" for the flag `name` (whose default means "not given").
  void HideDefault(std::string_view name);
  // The positional arguments shown after "[flags]" in Usage(), e.g. "IMAGE [-- COMMAND ARGS...]".
  void Positional(std::string synopsis) { positional_synopsis_ = std::move(synopsis); }

  // Parses `args` (without the program and subcommand names). "--help"/"-h" sets help_requested()
  // and stops. Errors: unknown flag, missing value, bad integer, a value given to a boolean with
  // anything but true/false/1/0. A lone "-" is a positional argument (stdin/stdout by custom).
  Status Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  // Every positional argument, those after "--" included.
  const std::vector<std::string>& positional() const { return positional_; }
  // How many of positional() came before "--" (all of them when there was none).
  size_t positional_before_dash() const { return positional_before_dash_; }
  // Whether "--" was given.
  bool saw_dash() const { return saw_dash_; }
  // Whether the flag `name` appeared on the command line (to tell "--priority 0" from nothing).
  bool WasSet(std::string_view name) const;
  // "Usage: ..." with every flag, its default and its help.
  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kBool, kStringList };
  struct Flag {
    std::string name;
    Kind kind;
    void* target;
    std::string help;
    std::string default_text;
    std::string value_name;
    char short_name = 0;
    bool set = false;
  };
  Flag* Find(std::string_view name);
  Flag* FindShort(char letter);
  Status Assign(Flag& flag, std::string_view value);

  std::string command_;
  std::string summary_;
  std::string positional_synopsis_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  size_t positional_before_dash_ = 0;
  bool saw_dash_ = false;
  bool help_requested_ = false;
};

}  // namespace sovai::base
