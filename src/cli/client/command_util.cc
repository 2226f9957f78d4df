#include "cli/client/command_util.h"

#include "base/json.h"
#include "base/time.h"
#include "cli/client/limits.h"

namespace sovai::cli::client {

using Json = nlohmann::json;

CommandLine::CommandLine(CommandContext& ctx, std::string command, std::string summary)
    : ctx_(ctx), name_(command), flags_(std::move(command), std::move(summary)) {}

void CommandLine::AddOutputFlag() {
  flags_.String("output", &output_, "table (for people) or json (for scripts)", "FORMAT");
  flags_.Short('o', "output");
  has_output_flag_ = true;
}

void CommandLine::AddLimitFlag(int64_t* limit) {
  *limit = kDefaultListLimit;
  flags_.Int("limit", limit, "show at most this many");
  limit_ = limit;
}

std::optional<int> CommandLine::Parse(const std::vector<std::string>& args, int min_positional,
                                      int max_positional) {
  if (base::Status parsed = flags_.Parse(args); !parsed.ok()) return Usage(parsed.message());
  if (flags_.help_requested()) {
    ctx_.console.Out(flags_.Usage());
    return kExitOk;
  }
  if (has_output_flag_) {
    if (output_ == "table") {
      format_ = OutputFormat::kTable;
    } else if (output_ == "json") {
      format_ = OutputFormat::kJson;
    } else {
      return Usage("--output must be table or json, not '" + output_ + "'");
    }
  }
  if (limit_ != nullptr && (*limit_ < 1 || *limit_ > kMaxListLimit)) {
    return Usage("--limit must be 1 to " + std::to_string(kMaxListLimit));
  }
  const int count = static_cast<int>(flags_.positional().size());
  if (count < min_positional) {
    return Usage("missing arguments; usage: " + name_ + " [flags] " + PositionalSynopsis());
  }
  if (max_positional >= 0 && count > max_positional) {
    return Usage("unexpected argument '" + flags_.positional()[max_positional] + "'");
  }
  return std::nullopt;
}

std::string CommandLine::PositionalSynopsis() const {
  std::string usage = flags_.Usage();
  // "Usage: <name> [flags] <synopsis>\n": the synopsis is what follows "[flags] ".
  size_t start = usage.find("[flags] ");
  size_t end = usage.find('\n');
  if (start == std::string::npos || start > end) return "";
  return usage.substr(start + 8, end - start - 8);
}

int CommandLine::Usage(std::string_view message) {
  ctx_.console.Err(name_ + ": " + std::string(message) + "\n(see '" + name_ + " --help')\n");
  return kExitUsage;
}

int CommandLine::Fail(const base::Status& status) {
  ctx_.console.Err(name_ + ": " + status.message() + "\n");
  return kExitFailure;
}

void CommandLine::Warn(std::string_view text) {
  ctx_.console.Err(name_ + ": " + std::string(text) + "\n");
}

void CommandLine::PrintJson(const Json& value) {
  ctx_.console.Out(base::DumpJson(value, 2) + "\n");
}

base::Result<ClientConfig> CommandLine::Config() {
  SOVAI_ASSIGN_OR_RETURN(std::string path, ConfigPath(ctx_.vars));
  SOVAI_ASSIGN_OR_RETURN(std::optional<ClientConfig> stored, LoadConfig(ctx_.env, path));
  if (stored) {
    // The file holds a token: say so when others can read it (as ssh does for keys).
    auto stat = ctx_.env.Stat(path);
    if (stat.ok() && (stat->mode & 077) != 0) {
      Warn("warning: " + path + " is readable by other users; run 'chmod 600 " + path + "'");
    }
  }
  return ApplyEnvironment(stored.value_or(ClientConfig{}), ctx_.vars);
}

base::Result<std::unique_ptr<ApiClient>> CommandLine::Connect() {
  SOVAI_ASSIGN_OR_RETURN(ClientConfig config, Config());
  return Connect(config);
}

base::Result<std::unique_ptr<ApiClient>> CommandLine::Connect(const ClientConfig& config) {
  if (config.url.empty() || config.token.empty()) {
    return base::FailedPreconditionError(
        "not logged in: run 'sovai login --url URL --token TOKEN' (or set SOVAI_URL and "
        "SOVAI_TOKEN)");
  }
  return ApiClient::Create(config.url, config.token, ctx_.http);
}

std::string Str(const Json& object, std::string_view field) {
  if (!object.is_object()) return "";
  auto it = object.find(field);
  if (it == object.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

int64_t Int(const Json& object, std::string_view field, int64_t fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(field);
  if (it == object.end() || !it->is_number_integer()) return fallback;
  return it->get<int64_t>();
}

const Json& At(const Json& object, std::string_view dotted_path) {
  static const Json kNull;  // immutable: a shared "missing" value, not state
  const Json* current = &object;
  size_t start = 0;
  while (start <= dotted_path.size()) {
    size_t dot = dotted_path.find('.', start);
    std::string_view name = dotted_path.substr(
        start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (!current->is_object()) return kNull;
    auto it = current->find(name);
    if (it == current->end()) return kNull;
    current = &*it;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return *current;
}

int64_t TimeMicros(const Json& object, std::string_view field) {
  std::string text = Str(object, field);
  if (text.empty()) return 0;
  return base::ParseRfc3339(text).value_or(0);
}

int RunGroup(CommandContext& ctx, std::string_view group, std::string_view summary,
             const std::vector<Subcommand>& subcommands, const std::vector<std::string>& args) {
  std::string usage = "Usage: sovai " + std::string(group) + " COMMAND [flags]\n\n" +
                      std::string(summary) + "\n\nCommands:\n";
  for (const Subcommand& sub : subcommands) {
    std::string left = "  " + std::string(sub.name);
    if (left.size() < 16) left.resize(16, ' ');
    usage += left + " " + std::string(sub.summary) + "\n";
  }
  usage += "\nRun 'sovai " + std::string(group) + " COMMAND --help' for a command's flags.\n";
  if (args.empty()) {
    ctx.console.Err(usage);
    return kExitUsage;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    ctx.console.Out(usage);
    return kExitOk;
  }
  for (const Subcommand& sub : subcommands) {
    if (args[0] == sub.name) {
      return sub.run(ctx, std::vector<std::string>(args.begin() + 1, args.end()));
    }
  }
  ctx.console.Err("sovai " + std::string(group) + ": unknown command '" + args[0] + "'\n\n" +
                  usage);
  return kExitUsage;
}

}  // namespace sovai::cli::client
