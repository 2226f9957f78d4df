// sovai app run|list|get|logs|scale|update|stop|start|delete, sovai endpoint add|list|delete:
// the apps API of docs/api/apps.md.
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/strings.h"
#include "cli/client/app_args.h"
#include "cli/client/billing_commands.h"
#include "cli/client/command_util.h"
#include "cli/client/job_args.h"
#include "cli/client/limits.h"
#include "cli/client/log_stream.h"
#include "cli/client/table.h"

namespace sovai::cli::client {
namespace {

using base::Status;
using Json = nlohmann::json;

std::string AppPath(std::string_view app) { return "/v1/apps/" + net::PercentEncode(app); }

// "2/3": ready over desired replicas.
std::string ReadyOf(const Json& app) {
  const Json& status = At(app, "status");
  return std::to_string(Int(status, "ready_replicas")) + "/" +
         std::to_string(Int(status, "desired_replicas"));
}

std::string FlavorOf(const Json& app) {
  const Json& spec = At(app, "spec");
  return Str(spec, "flavor") + " x" + std::to_string(Int(spec, "units", 1));
}

std::string TextOf(const Json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

std::string MapText(const Json& map, std::string_view separator) {
  std::string out;
  if (!map.is_object()) return out;
  for (const auto& [key, value] : map.items()) {
    if (!out.empty()) out += separator;
    out += key + "=" + TextOf(value);
  }
  return out;
}

// "2 replicas", or "autoscaling 0..4 on REQUESTS, threshold 4 (up 0s, down 60s, cooldown 300s)"
// with only the fields the spec holds.
std::string ScalingText(const Json& spec) {
  const Json& policy = At(spec, "autoscaling");
  if (!policy.is_object()) return std::to_string(Int(spec, "replicas", 1)) + " replicas (fixed)";
  std::string text =
      "autoscaling " + std::to_string(Int(policy, "min_replicas", 1)) + ".." +
      std::to_string(Int(policy, "max_replicas")) + " on " +
      (Str(policy, "resource_type").empty() ? "REQUESTS" : Str(policy, "resource_type"));
  if (policy.contains("threshold")) text += ", threshold " + TextOf(policy["threshold"]);
  std::vector<std::string> windows;
  for (auto [field, label] : {std::pair{"scale_up_window_s", "up"},
                              {"scale_down_window_s", "down"},
                              {"cooldown_s", "cooldown"}}) {
    if (policy.contains(field))
      windows.push_back(std::string(label) + " " + TextOf(policy[field]) + "s");
  }
  if (!windows.empty()) text += " (" + base::Join(windows, ", ") + ")";
  return text;
}

// The flags shared by `app run` and `app scale`: a fixed count or an autoscaling policy.
struct ScalingFlags {
  int64_t replicas = 0;
  int64_t auto_min = 0;
  int64_t auto_max = 0;
  int64_t up_window_s = 0;
  int64_t down_window_s = 0;
  int64_t cooldown_s = 0;
  ScalingArgs args;  // the string flags are bound here directly

  void Register(base::FlagSet& f) {
    f.Int("replicas", &replicas, "a fixed number of replicas (excludes the --auto-* flags)");
    f.Int("auto-min-replicas", &auto_min, "autoscaling: the fewest replicas; 0 scales to zero");
    f.Int("auto-max-replicas", &auto_max,
          "autoscaling: the most replicas (needed with any --auto-* flag)");
    f.String("auto-resource-type", &args.auto_resource_type,
             "autoscaling metric: REQUESTS (in flight per replica), CPU or RAM (percent)", "TYPE");
    f.String("auto-resource-usage-threshold", &args.auto_threshold,
             "autoscaling: the metric's target per replica (default 4 REQUESTS, 75 CPU/RAM)", "T");
    f.Int("auto-scale-up-window-s", &up_window_s, "autoscaling: scale-up window, seconds", "S");
    f.Int("auto-scale-down-window-s", &down_window_s, "autoscaling: scale-down window, seconds",
          "S");
    f.Int("auto-cooldown-s", &cooldown_s,
          "autoscaling with min 0: idle seconds before the last replica stops", "S");
    for (const char* name :
         {"replicas", "auto-min-replicas", "auto-max-replicas", "auto-scale-up-window-s",
          "auto-scale-down-window-s", "auto-cooldown-s"}) {
      f.HideDefault(name);
    }
  }

  ScalingArgs Collect(const base::FlagSet& f) const {
    ScalingArgs out = args;
    if (f.WasSet("replicas")) out.replicas = replicas;
    if (f.WasSet("auto-min-replicas")) out.auto_min_replicas = auto_min;
    if (f.WasSet("auto-max-replicas")) out.auto_max_replicas = auto_max;
    if (f.WasSet("auto-scale-up-window-s")) out.scale_up_window_s = up_window_s;
    if (f.WasSet("auto-scale-down-window-s")) out.scale_down_window_s = down_window_s;
    if (f.WasSet("auto-cooldown-s")) out.cooldown_s = cooldown_s;
    return out;
  }
};

// Polls the app until it is RUNNING (WaitForRunning); prints each new state on stderr.
// FailedPrecondition when it FAILED (with its reason) or settled elsewhere (stopped, deleted).
base::Result<Json> WaitForApp(CommandLine& cmd, ApiClient& api, const Json& app,
                              int64_t timeout_s) {
  const std::string id = Str(app, "id");
  RunningWait wait{
      .path = AppPath(id),
      .change =
          [&](const Json& now) {
            return "app " + id + ": " + Str(now, "state") + " (" + ReadyOf(now) + " ready)\n";
          },
      .settled = [&](const Json& now) -> Status {
        const std::string state = Str(now, "state");
        if (state == "FAILED") {
          const std::string reason = Str(now, "reason");
          return base::FailedPreconditionError("app " + id + " FAILED" +
                                               (reason.empty() ? "" : ": " + reason));
        }
        if (IsAppSettledState(state)) {
          return base::FailedPreconditionError("app " + id + " is " + state +
                                               " and will not become RUNNING");
        }
        return Status();
      },
      .late = [&](const Json& now) -> Status {
        return base::DeadlineExceededError("app " + id + " is still " + Str(now, "state") + " (" +
                                           ReadyOf(now) + " ready) after " +
                                           std::to_string(timeout_s) +
                                           "s; it goes on starting: see 'sovai app get " + id +
                                           "' and 'sovai app logs " + id + "'");
      }};
  return WaitForRunning(cmd, api, app, timeout_s, wait);
}

int RunAppRun(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(
      ctx, "sovai app run",
      "Creates an app (POST /v1/apps): a model served behind the gateway at\n"
      "<api-url>/apps/<app-id>/ (OpenAI base URL <api-url>/apps/<app-id>/v1), or an image\n"
      "that listens on $PORT. Prints the app's id, state and URL; with --wait, waits until it\n"
      "is RUNNING. A fixed --replicas count, or autoscaling with --auto-max-replicas.\n"
      "With --dry-run, prices it and checks the budget instead (exit 1 if it would be\n"
      "refused); nothing is created.\n\n"
      "  sovai app run --name support-bot --model models@EU-WEST-LOCAL/qwen2.5-0.5b \\\n"
      "    --auto-min-replicas 0 --auto-max-replicas 4 --wait");
  AppRunArgs run;
  ScalingFlags scaling;
  int64_t gpu = 0;
  int64_t cpu = 0;
  int64_t port = 0;
  bool wait = false;
  bool dry_run = false;
  std::string timeout = kDefaultAppWaitTimeout;
  base::FlagSet& f = cmd.flags();
  f.Positional("[-- COMMAND ARGS...]");
  f.String("name", &run.name, "the app's name (a-z 0-9 -); clients send it as \"model\"", "NAME");
  f.String("model", &run.model, "model directory or PEFT adapter: bucket@REGION/prefix", "SOURCE");
  f.String("base-model", &run.base_model, "with an adapter --model: its base model", "SOURCE");
  f.String("task", &run.task,
           "with --model: generate, embed (/v1/embeddings) or rerank (/v1/rerank); default: "
           "embed for an embedding model, else generate",
           "TASK");
  f.String("image", &run.image, "instead of --model: oci:bucket@REGION/image.tar or sovai/shell",
           "IMAGE");
  f.Int("port", &port, "with --image: the port the app documents (default 8080)");
  f.String("flavor", &run.flavor, "flavor id (sovai flavor list); ai1-1-cpu when not given",
           "FLAVOR");
  f.Int("gpu", &gpu, "GPU flavor units per replica (needs --flavor)");
  f.Int("cpu", &cpu, "CPU flavor units per replica");
  scaling.Register(f);
  f.String("probe-path", &run.probe_path, "readiness probe, GET must answer 2xx (default /health)",
           "PATH");
  f.Bool("unsecure-http", &run.unsecure_http, "anyone may call the app without a token");
  f.StringList("label", &run.labels, "a label (app tokens reach apps their selector matches)",
               "K=V");
  f.StringList("env", &run.env, "environment variable; NAME alone passes this shell's value",
               "K=V");
  f.Bool("wait", &wait, "wait until the app is RUNNING (fail if it FAILED)");
  f.String("timeout", &timeout, "with --wait: give up after this long", "DURATION");
  f.Bool("dry-run", &dry_run, "print the price per minute and the budget left; create nothing");
  f.HideDefault("port");
  f.HideDefault("gpu");
  f.HideDefault("cpu");
  f.Short('e', "env");
  f.Short('l', "label");
  f.Short('w', "wait");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, -1)) return *code;
  if (f.positional_before_dash() > 0) {
    return cmd.Usage("unexpected argument '" + f.positional()[0] +
                     "'; an image's command goes after '--'");
  }
  run.command = f.positional();
  if (f.WasSet("port")) run.port = port;
  if (f.WasSet("gpu")) run.gpu_units = gpu;
  if (f.WasSet("cpu")) run.cpu_units = cpu;
  run.scaling = scaling.Collect(f);
  auto spec = BuildAppSpec(run, ctx.vars);
  if (!spec.ok()) return cmd.Usage(spec.status().message());
  if (f.WasSet("timeout") && !wait) return cmd.Usage("--timeout needs --wait");
  auto timeout_s = ParseDuration(timeout);
  if (!timeout_s.ok()) return cmd.Usage(timeout_s.status().WithContext("--timeout").message());
  if (dry_run) {
    if (wait) return cmd.Usage("--dry-run creates no app to --wait for");
    return RunDryRun(cmd, "/v1/apps", *spec);
  }

  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto app = (*api)->Post("/v1/apps", *spec);
  if (!app.ok()) return cmd.Fail(app.status());
  const std::string line =
      Str(*app, "id") + "  " + Str(*app, "state") + "  " + Str(*app, "url") + "\n";
  if (!wait) {
    if (cmd.json()) {
      cmd.PrintJson(*app);
    } else {
      ctx.console.Out(line);
    }
    return kExitOk;
  }
  // Waiting: the id comes first on stdout (a script has it even if the wait fails); state
  // changes go to stderr. With -o json, stdout is the running App alone.
  if (!cmd.json()) ctx.console.Out(line);
  auto running = WaitForApp(cmd, **api, *app, *timeout_s);
  if (!running.ok()) return cmd.Fail(running.status());
  if (cmd.json()) cmd.PrintJson(*running);
  return kExitOk;
}

int RunAppList(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunLabelledList(ctx, args, "sovai app list",
                         "Lists the apps of the token's project (GET /v1/apps).", "/v1/apps",
                         "apps", [&](const std::vector<Json>& items) {
                           Table table({"ID", "NAME", "STATE", "READY/DESIRED", "URL"});
                           for (const Json& app : items) {
                             table.AddRow({Str(app, "id"), Str(app, "name"), Str(app, "state"),
                                           ReadyOf(app), Str(app, "url")});
                           }
                           ctx.console.Out(table.Render());
                         });
}

int RunAppGet(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai app get",
                  "Shows an app: spec, state, replicas and its last scaling events.");
  cmd.flags().Positional("APP");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto app = (*api)->Get(AppPath(cmd.flags().positional()[0]));
  if (!app.ok()) return cmd.Fail(app.status());
  if (cmd.json()) {
    cmd.PrintJson(*app);
    return kExitOk;
  }
  const Json& spec = At(*app, "spec");
  const Json& status = At(*app, "status");
  std::vector<std::pair<std::string, std::string>> rows = {
      {"ID", Str(*app, "id")}, {"Name", Str(*app, "name")}, {"State", Str(*app, "state")}};
  if (!Str(*app, "reason").empty()) rows.emplace_back("Reason", Str(*app, "reason"));
  rows.emplace_back("URL", Str(*app, "url"));
  if (!Str(spec, "model").empty()) rows.emplace_back("Model", Str(spec, "model"));
  if (!Str(spec, "base_model").empty()) rows.emplace_back("Base model", Str(spec, "base_model"));
  if (!Str(spec, "task").empty()) rows.emplace_back("Task", Str(spec, "task"));
  if (!Str(spec, "image").empty()) rows.emplace_back("Image", Str(spec, "image"));
  const Json& command = At(spec, "command");
  if (command.is_array() && !command.empty()) {
    std::vector<std::string> argv;
    for (const Json& arg : command) argv.push_back(TextOf(arg));
    rows.emplace_back("Command", ShellJoin(argv));
  }
  if (Int(spec, "port") > 0) rows.emplace_back("Port", std::to_string(Int(spec, "port")));
  rows.emplace_back("Flavor", FlavorOf(*app));
  rows.emplace_back("Scaling", ScalingText(spec));
  rows.emplace_back("Ready", ReadyOf(*app));
  if (!Str(spec, "probe_path").empty()) rows.emplace_back("Probe", Str(spec, "probe_path"));
  if (At(spec, "unsecure_http") == true) rows.emplace_back("Unsecure HTTP", "yes (no token)");
  if (std::string labels = MapText(At(spec, "labels"), ","); !labels.empty())
    rows.emplace_back("Labels", labels);
  if (std::string env = MapText(At(spec, "env"), "\n"); !env.empty()) rows.emplace_back("Env", env);
  rows.emplace_back("Generation", std::to_string(Int(*app, "generation")));
  rows.emplace_back("Created", FormatTime(TimeMicros(*app, "created_at")));

  const Json& replicas = At(status, "replicas");
  if (replicas.is_array() && !replicas.empty()) {
    Table table({"JOB", "STATE", "READY", "GENERATION", "IN FLIGHT"});
    for (const Json& r : replicas) {
      table.AddRow({Str(r, "job"), Str(r, "state"), At(r, "ready") == true ? "yes" : "no",
                    std::to_string(Int(r, "generation")), std::to_string(Int(r, "in_flight"))});
    }
    std::string text = table.Render();
    if (!text.empty() && text.back() == '\n') text.pop_back();
    rows.emplace_back("Replicas", text);
  }
  const Json& events = At(status, "scaling_events");
  if (events.is_array() && !events.empty()) {
    std::vector<std::string> lines;
    const size_t first =
        events.size() > kShownScalingEvents ? events.size() - kShownScalingEvents : 0;
    for (size_t i = first; i < events.size(); ++i) {
      const Json& e = events[i];
      std::string text = FormatTime(TimeMicros(e, "at")) + "  " + std::to_string(Int(e, "from")) +
                         " -> " + std::to_string(Int(e, "to"));
      if (!Str(e, "reason").empty()) text += "  " + Str(e, "reason");
      lines.push_back(std::move(text));
    }
    rows.emplace_back("Scaling events", base::Join(lines, "\n"));
  }
  ctx.console.Out(RenderKeyValues(rows));
  return kExitOk;
}

// The newest replica of an app (job ids are ULIDs, so the greatest was created last), "" when it
// has none.
std::string NewestReplica(const Json& app) {
  std::string newest;
  const Json& replicas = At(At(app, "status"), "replicas");
  if (!replicas.is_array()) return newest;
  for (const Json& r : replicas) newest = std::max(newest, Str(r, "job"));
  return newest;
}

int RunAppLogs(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai app logs",
                  "Prints the log of one of an app's replicas (the newest unless --replica),\n"
                  "as 'job logs' does. With -f, keeps streaming until that replica ends.");
  std::string replica;
  LogFlags log;
  base::FlagSet& f = cmd.flags();
  f.Positional("APP");
  f.String("replica", &replica, "the replica's job id (sovai app get APP)", "JOB");
  log.Register(f, "stream new lines until the replica ends");
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  if (auto code = log.Check(cmd)) return *code;
  const std::string& app_ref = f.positional()[0];
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  if (log.follow && replica.empty()) {
    // Offsets belong to one replica's log: pin the newest now, so that a replica started while
    // following does not switch logs under the offset.
    auto app = (*api)->Get(AppPath(app_ref));
    if (!app.ok()) return cmd.Fail(app.status());
    replica = NewestReplica(*app);
    if (replica.empty()) {
      return cmd.Fail(base::FailedPreconditionError(
          "app " + app_ref +
          " has no replica (scaled to zero, or not started yet); nothing to "
          "follow"));
    }
    cmd.Warn("following replica " + replica);
  }
  std::string path = AppPath(app_ref) + "/logs";
  if (!replica.empty()) path = AddQuery(path, "replica", replica);
  LogStreamOptions options{.path = path,
                           .offset = static_cast<uint64_t>(log.offset),
                           .timestamps = log.timestamps,
                           .follow = log.follow,
                           .ended = [&]() -> base::Result<bool> {
                             auto app = (*api)->Get(AppPath(app_ref));
                             // A deleted app's replicas have ended; what is left of the log is read
                             // once more.
                             if (!app.ok() && app.status().code() == base::StatusCode::kNotFound)
                               return true;
                             if (!app.ok()) return app.status();
                             if (IsAppSettledState(Str(*app, "state"))) return true;
                             const Json& replicas = At(At(*app, "status"), "replicas");
                             if (!replicas.is_array()) return true;
                             for (const Json& r : replicas) {
                               if (Str(r, "job") == replica)
                                 return IsTerminalState(Str(r, "state"));
                             }
                             return true;  // replaced or drained: it writes no more
                           }};
  Status done = StreamLog(ctx, **api, options);
  if (!done.ok()) return cmd.Fail(done);
  return kExitOk;
}

int RunAppScale(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai app scale",
                  "Sets an app's fixed replica count (--replicas N) or its autoscaling policy\n"
                  "(--auto-max-replicas B, ...): POST /v1/apps/{app}/scale.");
  ScalingFlags scaling;
  cmd.flags().Positional("APP");
  scaling.Register(cmd.flags());
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  auto body = BuildScaleBody(scaling.Collect(cmd.flags()));
  if (!body.ok()) return cmd.Usage(body.status().message());
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto app = (*api)->Post(AppPath(cmd.flags().positional()[0]) + "/scale", *body);
  if (!app.ok()) return cmd.Fail(app.status());
  if (cmd.json()) {
    cmd.PrintJson(*app);
    return kExitOk;
  }
  ctx.console.Out(Str(*app, "id") + "  " + Str(*app, "state") + "  " + ReadyOf(*app) + " ready  " +
                  ScalingText(At(*app, "spec")) + "\n");
  return kExitOk;
}

int RunAppUpdate(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai app update",
                  "Changes an app (PATCH /v1/apps/{app}): a rolling update, each new replica\n"
                  "ready before an old one drains. --env and --label replace the app's whole\n"
                  "env and labels.");
  AppUpdateArgs update;
  bool unsecure_http = false;
  base::FlagSet& f = cmd.flags();
  f.Positional("APP [-- COMMAND ARGS...]");
  f.String("model", &update.model, "a new model: bucket@REGION/prefix", "SOURCE");
  f.String("base-model", &update.base_model, "a new base model of an adapter", "SOURCE");
  f.String("image", &update.image, "a new image", "IMAGE");
  f.StringList("env", &update.env, "environment variable (replaces the app's env)", "K=V");
  f.StringList("label", &update.labels, "a label (replaces the app's labels)", "K=V");
  f.String("probe-path", &update.probe_path, "a new readiness probe path", "PATH");
  f.Bool("unsecure-http", &unsecure_http, "--unsecure-http or --no-unsecure-http");
  f.HideDefault("unsecure-http");
  f.Short('e', "env");
  f.Short('l', "label");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, -1)) return *code;
  if (f.positional_before_dash() == 0) return cmd.Usage("missing APP before '--'");
  if (f.positional_before_dash() > 1) {
    return cmd.Usage("unexpected argument '" + f.positional()[1] +
                     "'; a new command goes after '--'");
  }
  update.command.assign(f.positional().begin() + 1, f.positional().end());
  if (f.WasSet("unsecure-http")) update.unsecure_http = unsecure_http;
  auto patch = BuildAppPatch(update, ctx.vars);
  if (!patch.ok()) return cmd.Usage(patch.status().message());
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto app = (*api)->Patch(AppPath(f.positional()[0]), *patch);
  if (!app.ok()) return cmd.Fail(app.status());
  if (cmd.json()) {
    cmd.PrintJson(*app);
    return kExitOk;
  }
  ctx.console.Out(Str(*app, "id") + "  " + Str(*app, "state") + "  generation " +
                  std::to_string(Int(*app, "generation")) + "\n");
  return kExitOk;
}

// stop, start and delete: one POST or DELETE on the app.
int RunAppAction(CommandContext& ctx, const std::vector<std::string>& args, std::string_view verb,
                 std::string_view summary) {
  return RunResourceAction(ctx, args, "sovai app " + std::string(verb), std::string(summary), "APP",
                           &AppPath, verb, &PrintIdAndState);
}

int RunAppStop(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunAppAction(ctx, args, "stop",
                      "Stops an app: its replicas drain and stop (STOPPING, then STOPPED);\n"
                      "'sovai app start' brings them back.");
}
int RunAppStart(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunAppAction(ctx, args, "start", "Starts a STOPPED app again (QUEUED).");
}
int RunAppDelete(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunAppAction(ctx, args, "delete",
                      "Deletes an app: its replicas stop and it disappears from lists (DELETING).");
}

// --- endpoint -----------------------------------------------------------------------------------

std::string EndpointPath(std::string_view name) {
  return "/v1/endpoints/" + net::PercentEncode(name);
}

int RunEndpointAdd(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai endpoint add",
                  "Publishes a model in the endpoints catalog (POST /v1/endpoints; platform\n"
                  "admins): any project's token calls it as \"model\": NAME on <api-url>/v1.");
  EndpointAddArgs add;
  int64_t gpu = 0;
  int64_t cpu = 0;
  int64_t min_replicas = 0;
  int64_t max_replicas = 0;
  base::FlagSet& f = cmd.flags();
  f.String("name", &add.name, "the model name clients send (a-z 0-9 -)", "NAME");
  f.String("model", &add.model, "model directory or PEFT adapter: bucket@REGION/prefix", "SOURCE");
  f.String("base-model", &add.base_model, "with an adapter --model: its base model", "SOURCE");
  f.String("task", &add.task,
           "generate, embed (/v1/embeddings) or rerank (/v1/rerank); default: embed for an "
           "embedding model, else generate",
           "TASK");
  f.String("flavor", &add.flavor, "flavor id (sovai flavor list); ai1-1-cpu when not given",
           "FLAVOR");
  f.Int("gpu", &gpu, "GPU flavor units per replica (needs --flavor)");
  f.Int("cpu", &cpu, "CPU flavor units per replica");
  f.Int("min-replicas", &min_replicas, "the fewest replicas; 0 scales to zero");
  f.Int("max-replicas", &max_replicas, "the most replicas");
  f.String("rate-limit", &add.rate_limit, "per project, e.g. 400/min (the server's default)",
           "N/min");
  for (const char* name : {"gpu", "cpu", "min-replicas", "max-replicas"}) f.HideDefault(name);
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  if (f.WasSet("gpu")) add.gpu_units = gpu;
  if (f.WasSet("cpu")) add.cpu_units = cpu;
  if (f.WasSet("min-replicas")) add.min_replicas = min_replicas;
  if (f.WasSet("max-replicas")) add.max_replicas = max_replicas;
  auto body = BuildEndpointBody(add);
  if (!body.ok()) return cmd.Usage(body.status().message());
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto endpoint = (*api)->Post("/v1/endpoints", *body);
  if (!endpoint.ok()) return cmd.Fail(endpoint.status());
  if (cmd.json()) {
    cmd.PrintJson(*endpoint);
    return kExitOk;
  }
  ctx.console.Out(Str(*endpoint, "name") + "  " + Str(*endpoint, "state") + "  " +
                  Str(*endpoint, "app") + "\n");
  ctx.console.Err("Call it with \"model\": \"" + Str(*endpoint, "name") + "\" on " + (*api)->url() +
                  "/v1/chat/completions.\n");
  return kExitOk;
}

int RunEndpointList(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai endpoint list",
                  "Lists the endpoints catalog (GET /v1/endpoints): the models every project "
                  "may call.");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto listed = (*api)->Get("/v1/endpoints");
  if (!listed.ok()) return cmd.Fail(listed.status());
  const Json& items = At(*listed, "items");
  if (!items.is_array()) {
    return cmd.Fail(base::InternalError("GET /v1/endpoints: the answer has no 'items' list"));
  }
  if (cmd.json()) {
    cmd.PrintJson(*listed);  // the API's own object, {"items": [...]}
    return kExitOk;
  }
  Table table({"NAME", "APP", "STATE", "RATE LIMIT", "URL"});
  for (const Json& e : items) {
    table.AddRow({Str(e, "name"), Str(e, "app"), Str(e, "state"),
                  Str(e, "rate_limit").empty() ? "-" : Str(e, "rate_limit"), Str(e, "url")});
  }
  ctx.console.Out(table.Render());
  return kExitOk;
}

int RunEndpointDelete(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai endpoint delete",
                  "Removes a model from the catalog and deletes its app (DELETE "
                  "/v1/endpoints/{name}).");
  cmd.flags().Positional("NAME");
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  const std::string& name = cmd.flags().positional()[0];
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto deleted = (*api)->Delete(EndpointPath(name));
  if (!deleted.ok()) return cmd.Fail(deleted.status());
  ctx.console.Out("Deleted endpoint " + name + ".\n");
  return kExitOk;
}

}  // namespace

int RunAppCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"run", "create an app serving a model or an image", &RunAppRun},
      {"list", "list the project's apps", &RunAppList},
      {"get", "show an app, its replicas and scaling events", &RunAppGet},
      {"logs", "print (or follow with -f) a replica's log", &RunAppLogs},
      {"scale", "set the replica count or the autoscaling policy", &RunAppScale},
      {"update", "change the model, image or env (rolling)", &RunAppUpdate},
      {"stop", "stop an app's replicas", &RunAppStop},
      {"start", "start a stopped app", &RunAppStart},
      {"delete", "delete an app", &RunAppDelete},
  };
  return RunGroup(ctx, "app",
                  "Apps: a model (or an HTTP image) served behind the gateway, autoscaled.",
                  kSubcommands, args);
}

int RunEndpointCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"add", "publish a model in the catalog", &RunEndpointAdd},
      {"list", "list the catalog's models", &RunEndpointList},
      {"delete", "remove a model from the catalog", &RunEndpointDelete},
  };
  return RunGroup(ctx, "endpoint",
                  "The endpoints catalog: models every project calls on one OpenAI /v1.",
                  kSubcommands, args);
}

}  // namespace sovai::cli::client
