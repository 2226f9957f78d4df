#include "cli/flags.h"

#include <charconv>

namespace sovai::cli {

FlagSet::FlagSet(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void FlagSet::String(std::string name, std::string* target, std::string help) {
  flags_.push_back({std::move(name), Kind::kString, target, std::move(help), *target});
}

void FlagSet::Int(std::string name, int64_t* target, std::string help) {
  flags_.push_back({std::move(name), Kind::kInt, target, std::move(help), std::to_string(*target)});
}

void FlagSet::Bool(std::string name, bool* target, std::string help) {
  flags_.push_back(
      {std::move(name), Kind::kBool, target, std::move(help), *target ? "true" : "false"});
}

FlagSet::Flag* FlagSet::Find(std::string_view name) {
  for (Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

base::Status FlagSet::Assign(Flag& flag, std::string_view value) {
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.target) = std::string(value);
      return base::Status();
    case Kind::kInt: {
      int64_t parsed = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
      if (ec != std::errc() || end != value.data() + value.size() || value.empty()) {
        return base::InvalidArgumentError("--" + flag.name + " needs an integer, got '" +
                                          std::string(value) + "'");
      }
      *static_cast<int64_t*>(flag.target) = parsed;
      return base::Status();
    }
    case Kind::kBool:
      if (value == "true" || value == "1") {
        *static_cast<bool*>(flag.target) = true;
      } else if (value == "false" || value == "0") {
        *static_cast<bool*>(flag.target) = false;
      } else {
        return base::InvalidArgumentError("--" + flag.name + " takes true or false, got '" +
                                          std::string(value) + "'");
      }
      return base::Status();
  }
  return base::InternalError("unknown flag kind");
}

base::Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "--") {
      positional_.insert(positional_.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return base::Status();
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
        *static_cast<bool*>(negated->target) = false;
        continue;
      }
    }
    if (flag == nullptr) {
      return base::InvalidArgumentError("unknown flag --" + std::string(name) + " for " + command_ +
                                        " (see " + command_ + " --help)");
    }
    if (inline_value) {
      SOVAI_RETURN_IF_ERROR(Assign(*flag, *inline_value));
    } else if (flag->kind == Kind::kBool) {
      *static_cast<bool*>(flag->target) = true;
    } else if (i + 1 < args.size()) {
      SOVAI_RETURN_IF_ERROR(Assign(*flag, args[++i]));
    } else {
      return base::InvalidArgumentError("--" + flag->name + " needs a value (see " + command_ +
                                        " --help)");
    }
  }
  return base::Status();
}

std::string FlagSet::Usage() const {
  std::string out = "Usage: " + command_ + " [flags]\n\n" + summary_ + "\n\nFlags:\n";
  for (const Flag& flag : flags_) {
    std::string left = "  --" + flag.name;
    if (flag.kind != Kind::kBool) left += flag.kind == Kind::kInt ? " N" : " VALUE";
    if (left.size() < 28) left.resize(28, ' ');
    out += left + " " + flag.help;
    if (!flag.default_text.empty()) out += " (default: " + flag.default_text + ")";
    out += "\n";
  }
  return out;
}

}  // namespace sovai::cli
