#include "cli/client/command_util.h"

#include <chrono>

#include "base/json.h"
#include "base/strings.h"
#include "base/time.h"
#include "cli/client/job_args.h"
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

std::string LiveSyncText(const Json& sync) {
  if (!sync.is_object()) return "";
  std::string text = std::to_string(Int(sync, "pending_files")) + " files (" +
                     base::HumanBytes(static_cast<uint64_t>(Int(sync, "pending_bytes"))) +
                     ") pending";
  if (sync.contains("oldest_pending_age_s") && sync["oldest_pending_age_s"].is_number()) {
    text += ", oldest " +
            std::to_string(static_cast<int64_t>(sync["oldest_pending_age_s"].get<double>())) + " s";
  }
  if (sync.contains("last_sync_age_s") && sync["last_sync_age_s"].is_number()) {
    text += "; last round " +
            std::to_string(static_cast<int64_t>(sync["last_sync_age_s"].get<double>())) + " s ago";
  }
  text += "; " + std::to_string(Int(sync, "uploaded_files")) + " files, " +
          base::HumanBytes(static_cast<uint64_t>(Int(sync, "uploaded_bytes"))) + ", " +
          std::to_string(Int(sync, "units")) + " units up";
  if (!Str(sync, "last_error").empty()) text += "\nlast error: " + Str(sync, "last_error");
  return text;
}

void LogFlags::Register(base::FlagSet& f, std::string_view follow_help) {
  f.Bool("follow", &follow, std::string(follow_help));
  f.Bool("timestamps", &timestamps,
         "print whole records: <timestamp> <stdout|stderr|sovai>[+] <text>");
  f.Int("offset", &offset, "start at this byte offset of the log (a record boundary)");
  f.Short('f', "follow");
  f.Short('t', "timestamps");
}

std::optional<int> LogFlags::Check(CommandLine& cmd) const {
  if (offset < 0) return cmd.Usage("--offset must be 0 or more");
  return std::nullopt;
}

int RunLabelledList(CommandContext& ctx, const std::vector<std::string>& args, std::string command,
                    std::string summary, std::string_view collection, std::string_view noun,
                    const std::function<void(const std::vector<Json>& items)>& print_table) {
  CommandLine cmd(ctx, std::move(command), std::move(summary));
  std::vector<std::string> labels;
  int64_t limit = 0;
  cmd.flags().StringList("label", &labels, "only " + std::string(noun) + " with this label", "K=V");
  cmd.flags().Short('l', "label");
  cmd.AddLimitFlag(&limit);
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  std::string path(collection);
  if (!labels.empty()) {
    auto selector = ParseSelector(base::Join(labels, ","), "--label");
    if (!selector.ok()) return cmd.Usage(selector.status().message());
    path = AddQuery(path, "labels", *selector);
  }
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto listed = (*api)->List(path, limit);
  if (!listed.ok()) return cmd.Fail(listed.status());
  if (cmd.json()) {
    cmd.PrintJson(listed->ToJson());
    return kExitOk;
  }
  print_table(listed->items);
  if (listed->truncated) {
    ctx.console.Err("(more " + std::string(noun) + " exist; raise --limit to see them)\n");
  }
  return kExitOk;
}

int RunResourceAction(
    CommandContext& ctx, const std::vector<std::string>& args, std::string command,
    std::string summary, std::string_view positional, std::string (*path)(std::string_view ref),
    std::string_view verb,
    const std::function<int(CommandLine& cmd, const std::string& ref, Json& answer)>& print) {
  CommandLine cmd(ctx, std::move(command), std::move(summary));
  cmd.flags().Positional(std::string(positional));
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  const std::string& ref = cmd.flags().positional()[0];
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  base::Result<Json> answer = verb == "delete"
                                  ? (*api)->Delete(path(ref))
                                  : (*api)->Post(path(ref) + "/" + std::string(verb), Json());
  if (!answer.ok()) return cmd.Fail(answer.status());
  return print(cmd, ref, *answer);
}

int PrintIdAndState(CommandLine& cmd, const std::string& ref, Json& answer) {
  // A server may answer the DELETE without a body: the resource is DELETING all the same.
  if (answer.is_null()) answer = Json{{"id", ref}, {"state", "DELETING"}};
  if (cmd.json()) {
    cmd.PrintJson(answer);
    return kExitOk;
  }
  cmd.ctx().console.Out(Str(answer, "id") + "  " + Str(answer, "state") + "\n");
  return kExitOk;
}

namespace {

bool IsTransient(const base::Status& status) {
  return status.code() == base::StatusCode::kUnavailable ||
         status.code() == base::StatusCode::kDeadlineExceeded;
}

}  // namespace

base::Result<Json> WaitForRunning(CommandLine& cmd, ApiClient& api, Json resource,
                                  int64_t timeout_s, const RunningWait& wait) {
  base::Env& env = cmd.ctx().env;
  const int64_t deadline = env.NowMonotonicMicros() + timeout_s * 1'000'000;
  const int64_t poll_micros =
      std::chrono::duration_cast<std::chrono::microseconds>(kAppWaitPollInterval).count();
  std::string shown = Str(resource, "state");
  for (;;) {
    const std::string state = Str(resource, "state");
    if (state != shown) {
      cmd.ctx().console.Err(wait.change(resource));
      shown = state;
    }
    if (state == "RUNNING") return resource;
    if (base::Status settled = wait.settled(resource); !settled.ok()) return settled;
    if (env.NowMonotonicMicros() >= deadline) return wait.late(resource);
    env.SleepForMicros(poll_micros);
    auto polled = api.Get(wait.path);
    if (polled.ok()) {
      resource = std::move(*polled);
    } else if (!IsTransient(polled.status())) {
      return polled.status();
    }
  }
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

namespace {
// ResolveProjectId and ResolveUserId: ids start with `id_prefix`; a name is looked up in
// `list_path`.
base::Result<std::string> ResolveId(ApiClient& api, std::string_view list_path,
                                    std::string_view id_prefix, std::string_view what,
                                    const std::string& name_or_id) {
  if (name_or_id.starts_with(id_prefix)) return name_or_id;
  SOVAI_ASSIGN_OR_RETURN(ListResult list, api.List(list_path, kMaxNameLookupItems));
  for (const nlohmann::json& item : list.items) {
    if (Str(item, "name") == name_or_id) return Str(item, "id");
  }
  return base::NotFoundError("no " + std::string(what) + " named '" + name_or_id +
                             "' is visible to this token (give its id, " + std::string(id_prefix) +
                             "...)");
}
}  // namespace

base::Result<std::string> ResolveProjectId(ApiClient& api, const std::string& name_or_id) {
  return ResolveId(api, "/v1/projects", "prj_", "project", name_or_id);
}

base::Result<std::string> ResolveUserId(ApiClient& api, const std::string& name_or_id) {
  return ResolveId(api, "/v1/users", "usr_", "user", name_or_id);
}

}  // namespace sovai::cli::client
