// Shared plumbing of the client commands (commands.h): flag parsing with the exit-code rules,
// the `-o` flag, error printing, and connecting with the config. Private to src/cli/client.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/flags.h"
#include "base/status.h"
#include "cli/client/api_client.h"
#include "cli/client/commands.h"

namespace sovai::cli::client {

enum class OutputFormat { kTable, kJson };

// A subcommand: its flag set and the common `-o, --output` flag.
class CommandLine {
 public:
  CommandLine(CommandContext& ctx, std::string command, std::string summary);

  base::FlagSet& flags() { return flags_; }
  const std::string& name() const { return name_; }
  // Adds `-o, --output table|json`.
  void AddOutputFlag();
  // Adds --limit (how many items a list command shows), checked by Parse against kMaxListLimit.
  void AddLimitFlag(int64_t* limit);
  // Parses; nullopt to go on, or the exit code to return now: 0 after printing --help to stdout,
  // kExitUsage after printing the error. Also checks that there are between `min_positional`
  // and `max_positional` positional arguments (-1: no maximum).
  std::optional<int> Parse(const std::vector<std::string>& args, int min_positional,
                           int max_positional);
  OutputFormat format() const { return format_; }
  bool json() const { return format_ == OutputFormat::kJson; }

  // Prints "<command>: <message>" and returns kExitUsage / kExitFailure.
  int Usage(std::string_view message);
  int Fail(const base::Status& status);
  // Prints a note or warning on stderr: "<command>: <text>".
  void Warn(std::string_view text);

  // Prints `value` as indented JSON on stdout.
  void PrintJson(const nlohmann::json& value);

  // An API client for the logged-in config (with SOVAI_URL/SOVAI_TOKEN applied).
  // FailedPrecondition when there is no URL or token ("not logged in: ...").
  base::Result<std::unique_ptr<ApiClient>> Connect();
  base::Result<std::unique_ptr<ApiClient>> Connect(const ClientConfig& config);
  // The effective config (file + environment); an empty config when there is no file.
  base::Result<ClientConfig> Config();

  CommandContext& ctx() { return ctx_; }

 private:
  std::string PositionalSynopsis() const;

  CommandContext& ctx_;
  std::string name_;
  base::FlagSet flags_;
  std::string output_ = "table";
  bool has_output_flag_ = false;
  int64_t* limit_ = nullptr;  // the --limit target, when AddLimitFlag was called
  OutputFormat format_ = OutputFormat::kTable;
};

// A string member of a JSON object, "" when missing or not a string.
std::string Str(const nlohmann::json& object, std::string_view field);
// An integer member, `fallback` when missing or not an integer.
int64_t Int(const nlohmann::json& object, std::string_view field, int64_t fallback = 0);
// A nested member by path ("status.state"), null when missing.
const nlohmann::json& At(const nlohmann::json& object, std::string_view dotted_path);
// An RFC 3339 member as micros, 0 when missing or malformed.
int64_t TimeMicros(const nlohmann::json& object, std::string_view field);
// A job's or notebook's status.sync (docs/api/jobs.md "Live sync") as one "Live sync" row: "2
// files (48.0 MiB) pending, oldest 12 s; last round 3 s ago; 7 files, 1.2 GiB, 2 units up";
// "" when `sync` is not an object.
std::string LiveSyncText(const nlohmann::json& sync);

// The id of the project or user that a --project / --user flag (or a PROJECT / USER argument)
// names, by id or by name: one resolver for every command. An id (prj_..., usr_...) is taken as
// is; a name is looked up in GET /v1/projects or /v1/users among those this token sees. NotFound
// naming it when none has that name; the list's error when it cannot be read.
base::Result<std::string> ResolveProjectId(ApiClient& api, const std::string& name_or_id);
base::Result<std::string> ResolveUserId(ApiClient& api, const std::string& name_or_id);

// --follow (-f), --timestamps (-t) and --offset, the flags every `logs` subcommand has.
struct LogFlags {
  bool follow = false;
  bool timestamps = false;
  int64_t offset = 0;

  // Registers them; `follow_help` says until when -f streams.
  void Register(base::FlagSet& f, std::string_view follow_help);
  // After Parse: the exit code when --offset is negative (printed), nullopt to go on.
  std::optional<int> Check(CommandLine& cmd) const;
};

// `sovai <group> list`: --label K=V (-l, repeated), --limit and -o. GETs `collection` filtered by
// the labels, at most --limit items; with -o json prints them, else `print_table(items)` and, when
// more exist, "(more <noun> exist; raise --limit to see them)" on stderr.
int RunLabelledList(
    CommandContext& ctx, const std::vector<std::string>& args, std::string command,
    std::string summary, std::string_view collection, std::string_view noun,
    const std::function<void(const std::vector<nlohmann::json>& items)>& print_table);

// `sovai <group> <verb> REF [-o]` (stop, start, delete, ...): DELETE path(REF) for "delete", else
// POST path(REF)/<verb> with no body. `positional` names REF in the usage. The answer (null when
// the server sent no body) goes to `print(cmd, REF, answer)`, whose exit code is returned.
int RunResourceAction(CommandContext& ctx, const std::vector<std::string>& args,
                      std::string command, std::string summary, std::string_view positional,
                      std::string (*path)(std::string_view ref), std::string_view verb,
                      const std::function<int(CommandLine& cmd, const std::string& ref,
                                              nlohmann::json& answer)>& print);
// The `print` of the app and notebook actions: the resource (a body-less DELETE answer reads as
// {"id": REF, "state": "DELETING"}) as JSON with -o json, else "<id>  <state>".
int PrintIdAndState(CommandLine& cmd, const std::string& ref, nlohmann::json& answer);

// How WaitForRunning speaks of one kind of resource (an app, a notebook).
struct RunningWait {
  std::string path;                                          // the resource's GET path
  std::function<std::string(const nlohmann::json&)> change;  // stderr line on a new state
  // Non-OK once it has settled short of RUNNING (FAILED, STOPPED, ...): the wait ends with it.
  std::function<base::Status(const nlohmann::json&)> settled;
  // The DeadlineExceeded error after `timeout_s`.
  std::function<base::Status(const nlohmann::json&)> late;
};
// Polls `wait.path` every kAppWaitPollInterval from `resource` until its "state" is RUNNING and
// returns it. Errors: wait.settled's, wait.late's after `timeout_s`; the API's errors, except
// transient ones (Unavailable, DeadlineExceeded), which are retried until the deadline (a server
// restart does not end the wait).
base::Result<nlohmann::json> WaitForRunning(CommandLine& cmd, ApiClient& api,
                                            nlohmann::json resource, int64_t timeout_s,
                                            const RunningWait& wait);

// One group's subcommands (`sovai job run`, ...), dispatched by name.
struct Subcommand {
  std::string_view name;
  std::string_view summary;
  int (*run)(CommandContext& ctx, const std::vector<std::string>& args);
};
int RunGroup(CommandContext& ctx, std::string_view group, std::string_view summary,
             const std::vector<Subcommand>& subcommands, const std::vector<std::string>& args);

// The command groups (one .cc file each).
int RunLoginCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunLogoutCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunWhoamiCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunJobCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunFlavorCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunBucketCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunTokenCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunUserCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunProjectCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunAppCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunEndpointCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunNotebookCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunDatastoreCommand(CommandContext& ctx, const std::vector<std::string>& args);
int RunS3Command(CommandContext& ctx, const std::vector<std::string>& args);

}  // namespace sovai::cli::client
