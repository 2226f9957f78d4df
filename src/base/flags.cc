#include "base/flags.h"

#include <charconv>

#include "base/check.h"

namespace sovai::base {

FlagSet::FlagSet(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void FlagSet::String(std::string name, std::string* target, std::string help,
                     std::string value_name) {
  flags_.push_back(
      {std::move(name), Kind::kString, target, std::move(help), *target, std::move(value_name)});
}

void FlagSet::Int(std::string name, int64_t* target, std::string help, std::string value_name) {
  flags_.push_back({std::move(name), Kind::kInt, target, std::move(help), std::to_string(*target),
                    std::move(value_name)});
}

void FlagSet::Bool(std::string name, bool* target, std::string help) {
  flags_.push_back(
      {std::move(name), Kind::kBool, target, std::move(help), *target ? "true" : "false", ""});
}

void FlagSet::StringList(std::string name, std::vector<std::string>* target, std::string help,
                         std::string value_name) {
  flags_.push_back(
      {std::move(name), Kind::kStringList, target, std::move(help), "", std::move(value_name)});
}

void FlagSet::Short(char letter, std::string_view name) {
  SOVAI_CHECK(FindShort(letter) == nullptr) << "short flag -" << letter << " registered twice";
  Flag* flag = Find(name);
  SOVAI_CHECK(flag != nullptr) << "short flag -" << letter << " for unknown flag --" << name;
  flag->short_name = letter;
}

void FlagSet::HideDefault(std::string_view name) {
  Flag* flag = Find(name);
  SOVAI_CHECK(flag != nullptr) << "HideDefault of unknown flag --" << name;
  flag->default_text.clear();
}

FlagSet::Flag* FlagSet::Find(std::string_view name) {
  for (Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

FlagSet::Flag* FlagSet::FindShort(char letter) {
  for (Flag& flag : flags_) {
    if (flag.short_name == letter) return &flag;
  }
  return nullptr;
}

bool FlagSet::WasSet(std::string_view name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return flag.set;
  }
  return false;
}

Status FlagSet::Assign(Flag& flag, std::string_view value) {
  flag.set = true;
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.target) = std::string(value);
      return Status();
    case Kind::kStringList:
      static_cast<std::vector<std::string>*>(flag.target)->emplace_back(value);
      return Status();
    case Kind::kInt: {
      int64_t parsed = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
      if (ec != std::errc() || end != value.data() + value.size() || value.empty()) {
        return InvalidArgumentError("--" + flag.name + " needs an integer, got '" +
                                    std::string(value) + "'");
      }
      *static_cast<int64_t*>(flag.target) = parsed;
      return Status();
    }
    case Kind::kBool:
      if (value == "true" || value == "1") {
        *static_cast<bool*>(flag.target) = true;
      } else if (value == "false" || value == "0") {
        *static_cast<bool*>(flag.target) = false;
      } else {
        return InvalidArgumentError("--" + flag.name + " takes true or false, got '" +
                                    std::string(value) + "'");
      }
      return Status();
  }
  return InternalError("unknown flag kind");
}

Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "--") {
      positional_before_dash_ = positional_.size();
      saw_dash_ = true;
      positional_.insert(positional_.end(), args.begin() + i + 1, args.end());
      return Status();
    }
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      break;
    }
    if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
      // A one-letter alias. Anything longer after one dash is refused rather than taken as a
      // positional argument, so `job run IMAGE sh -c x` says to put the command after "--".
      Flag* flag = arg.size() == 2 ? FindShort(arg[1]) : nullptr;
      if (flag == nullptr) {
        return InvalidArgumentError("unknown flag " + std::string(arg) + " for " + command_ +
                                    " (see " + command_ +
                                    " --help; put arguments that start with '-' after --)");
      }
      if (flag->kind == Kind::kBool) {
        SOVAI_RETURN_IF_ERROR(Assign(*flag, "true"));
      } else if (i + 1 < args.size()) {
        SOVAI_RETURN_IF_ERROR(Assign(*flag, args[++i]));
      } else {
        return InvalidArgumentError(std::string(arg) + " (--" + flag->name +
                                    ") needs a value (see " + command_ + " --help)");
      }
      continue;
    }
    if (arg.size() < 3 || arg.substr(0, 2) != "--") {
      positional_.emplace_back(arg);
      continue;
    }
    std::string_view body = arg.substr(2);
    std::string_view name = body;
    std::optional<std::string_view> inline_value;
    if (size_t eq = body.find('='); eq != std::string_view::npos) {
      name = body.substr(0, eq);
      inline_value = body.substr(eq + 1);
    }
    Flag* flag = Find(name);
    if (flag == nullptr && !inline_value && name.substr(0, 3) == "no-") {
      Flag* negated = Find(name.substr(3));
      if (negated != nullptr && negated->kind == Kind::kBool) {
        SOVAI_RETURN_IF_ERROR(Assign(*negated, "false"));
        continue;
      }
    }
    if (flag == nullptr) {
      return InvalidArgumentError("unknown flag --" + std::string(name) + " for " + command_ +
                                  " (see " + command_ + " --help)");
    }
    if (inline_value) {
      SOVAI_RETURN_IF_ERROR(Assign(*flag, *inline_value));
    } else if (flag->kind == Kind::kBool) {
      SOVAI_RETURN_IF_ERROR(Assign(*flag, "true"));
    } else if (i + 1 < args.size()) {
      SOVAI_RETURN_IF_ERROR(Assign(*flag, args[++i]));
    } else {
      return InvalidArgumentError("--" + flag->name + " needs a value (see " + command_ +
                                  " --help)");
    }
  }
  positional_before_dash_ = positional_.size();
  return Status();
}

std::string FlagSet::Usage() const {
  std::string out = "Usage: " + command_ + " [flags]";
  if (!positional_synopsis_.empty()) out += " " + positional_synopsis_;
  out += "\n\n" + summary_ + "\n\nFlags:\n";
  for (const Flag& flag : flags_) {
    std::string left = flag.short_name != 0 ? std::string("  -") + flag.short_name + ", --"
                                            : std::string("      --");
    left += flag.name;
    if (flag.kind != Kind::kBool) left += " " + flag.value_name;
    if (left.size() < 30) left.resize(30, ' ');
    out += left + " " + flag.help;
    if (flag.kind == Kind::kStringList) {
      out += " (repeatable)";
    } else if (!flag.default_text.empty() &&
               !(flag.kind == Kind::kBool && flag.default_text == "false")) {
      out += " (default: " + flag.default_text + ")";
    }
    out += "\n";
  }
  out += "  -h, --help                   show this help\n";
  return out;
}

}  // namespace sovai::base
