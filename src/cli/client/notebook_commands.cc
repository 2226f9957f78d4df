// sovai notebook run|list|get|logs|stop|start|delete: the notebooks API of
// docs/api/notebooks.md.
#include <chrono>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "cli/client/billing_commands.h"
#include "cli/client/command_util.h"
#include "cli/client/job_args.h"
#include "cli/client/limits.h"
#include "cli/client/log_stream.h"
#include "cli/client/notebook_args.h"
#include "cli/client/table.h"

namespace sovai::cli::client {
namespace {

using base::Status;
using Json = nlohmann::json;

std::string NotebookPath(std::string_view ref) {
  return "/v1/notebooks/" + net::PercentEncode(ref);
}

std::string FlavorOf(const Json& nb) {
  const Json& spec = At(nb, "spec");
  return Str(spec, "flavor") + " x" + std::to_string(Int(spec, "units", 1));
}

std::string IdleText(const Json& spec) {
  const int64_t s = Int(spec, "idle_timeout_s", -1);
  if (s < 0) return "-";
  if (s == 0) return "never";
  return std::to_string(s) + "s";
}

void BrowserHint(CommandLine& cmd, const Json& nb) {
  cmd.ctx().console.Err("Open " + Str(nb, "url") +
                        "?sovai_token=<API token> in a browser once (a cookie keeps it), or send "
                        "'Authorization: Bearer <API token>'.\n");
}

// Polls the notebook until it is RUNNING (WaitForRunning); prints each new state on stderr.
// FailedPrecondition when it settled elsewhere (FAILED, ERROR, STOPPED, ...: with its reason).
base::Result<Json> WaitForNotebook(CommandLine& cmd, ApiClient& api, const Json& nb,
                                   int64_t timeout_s) {
  const std::string id = Str(nb, "id");
  RunningWait wait{
      .path = NotebookPath(id),
      .change = [&](const Json& now) { return "notebook " + id + ": " + Str(now, "state") + "\n"; },
      .settled = [&](const Json& now) -> Status {
        const std::string state = Str(now, "state");
        if (!IsNotebookSettledState(state)) return Status();
        const std::string reason = Str(now, "reason");
        return base::FailedPreconditionError("notebook " + id + " is " + state +
                                             (reason.empty() ? "" : ": " + reason));
      },
      .late = [&](const Json& now) -> Status {
        return base::DeadlineExceededError("notebook " + id + " is still " + Str(now, "state") +
                                           " after " + std::to_string(timeout_s) +
                                           "s; it goes on starting: see 'sovai notebook get " + id +
                                           "' and 'sovai notebook logs " + id + "'");
      }};
  return WaitForRunning(cmd, api, nb, timeout_s, wait);
}

int RunNotebookRun(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(
      ctx, "sovai notebook run",
      "Starts a notebook (POST /v1/notebooks): Jupyter in the sandbox with the volumes\n"
      "mounted (under /workspace, where it opens), served by the gateway at\n"
      "<api-url>/notebooks/<id>/. Stopping it syncs the rw volumes back; after\n"
      "--idle-timeout without activity it stops by itself (and its billing with it).\n"
      "With --dry-run, prices it and checks the budget instead; nothing is created.\n\n"
      "  sovai notebook run --name explore --cpu 2 \\\n"
      "    --volume data@EU-WEST-LOCAL/work:/workspace/work:rw --wait");
  NotebookRunArgs run;
  int64_t gpu = 0;
  int64_t cpu = 0;
  bool wait = false;
  bool dry_run = false;
  std::string timeout = kDefaultAppWaitTimeout;
  base::FlagSet& f = cmd.flags();
  f.String("name", &run.name, "a name (a-z 0-9 -), unique in the project; optional", "NAME");
  f.String("editor", &run.editor, "jupyter, or vscode (VS Code in the browser: code-server)",
           "EDITOR");
  f.String("image", &run.image,
           "run in this image (registry HOST:PORT/project/name:tag, name:tag, @sha256:..., or "
           "oci:bucket@REGION/image.tar) with Jupyter on its PATH; default: the host's",
           "IMAGE");
  f.String("flavor", &run.flavor, "flavor id (sovai flavor list); ai1-1-cpu when not given",
           "FLAVOR");
  f.Int("gpu", &gpu, "GPU flavor units (needs --flavor)");
  f.Int("cpu", &cpu, "CPU flavor units");
  f.StringList("volume", &run.volumes, "bucket@REGION/prefix:/workspace/dir[:ro|rw|rwd]", "SPEC");
  f.StringList("label", &run.labels, "a label (tokens reach notebooks their selector matches)",
               "K=V");
  f.StringList("env", &run.env, "environment variable; NAME alone passes this shell's value",
               "K=V");
  f.String("idle-timeout", &run.idle_timeout,
           "stop after this long without activity (default 1h; 0 = never)", "DURATION");
  f.Bool("wait", &wait, "wait until Jupyter answers (fail if the notebook FAILED)");
  f.String("timeout", &timeout, "with --wait: give up after this long", "DURATION");
  f.Bool("dry-run", &dry_run, "print the price per minute and the budget left; create nothing");
  f.HideDefault("gpu");
  f.HideDefault("cpu");
  f.Short('v', "volume");
  f.Short('e', "env");
  f.Short('l', "label");
  f.Short('w', "wait");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  if (f.WasSet("gpu")) run.gpu_units = gpu;
  if (f.WasSet("cpu")) run.cpu_units = cpu;
  auto spec = BuildNotebookSpec(run, ctx.vars);
  if (!spec.ok()) return cmd.Usage(spec.status().message());
  if (f.WasSet("timeout") && !wait) return cmd.Usage("--timeout needs --wait");
  auto timeout_s = ParseDuration(timeout);
  if (!timeout_s.ok()) return cmd.Usage(timeout_s.status().WithContext("--timeout").message());
  if (dry_run) {
    if (wait) return cmd.Usage("--dry-run creates no notebook to --wait for");
    return RunDryRun(cmd, "/v1/notebooks", *spec);
  }
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto nb = (*api)->Post("/v1/notebooks", *spec);
  if (!nb.ok()) return cmd.Fail(nb.status());
  const std::string line =
      Str(*nb, "id") + "  " + Str(*nb, "state") + "  " + Str(*nb, "url") + "\n";
  if (!wait) {
    if (cmd.json()) {
      cmd.PrintJson(*nb);
    } else {
      ctx.console.Out(line);
      BrowserHint(cmd, *nb);
    }
    return kExitOk;
  }
  if (!cmd.json()) ctx.console.Out(line);
  auto running = WaitForNotebook(cmd, **api, *nb, *timeout_s);
  if (!running.ok()) return cmd.Fail(running.status());
  if (cmd.json()) {
    cmd.PrintJson(*running);
  } else {
    BrowserHint(cmd, *running);
  }
  return kExitOk;
}

int RunNotebookList(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunLabelledList(
      ctx, args, "sovai notebook list",
      "Lists the notebooks of the token's project (GET /v1/notebooks).", "/v1/notebooks",
      "notebooks", [&](const std::vector<Json>& items) {
        Table table({"ID", "NAME", "STATE", "FLAVOR", "URL"});
        for (const Json& nb : items) {
          table.AddRow({Str(nb, "id"), Str(nb, "name").empty() ? "-" : Str(nb, "name"),
                        Str(nb, "state"), FlavorOf(nb), Str(nb, "url")});
        }
        ctx.console.Out(table.Render());
      });
}

int RunNotebookGet(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai notebook get",
                  "Shows a notebook: spec, state, its job and its last events.");
  cmd.flags().Positional("NOTEBOOK");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto nb = (*api)->Get(NotebookPath(cmd.flags().positional()[0]));
  if (!nb.ok()) return cmd.Fail(nb.status());
  if (cmd.json()) {
    cmd.PrintJson(*nb);
    return kExitOk;
  }
  const Json& spec = At(*nb, "spec");
  std::vector<std::pair<std::string, std::string>> rows = {{"ID", Str(*nb, "id")}};
  if (!Str(*nb, "name").empty()) rows.emplace_back("Name", Str(*nb, "name"));
  rows.emplace_back("State", Str(*nb, "state"));
  if (!Str(*nb, "reason").empty()) rows.emplace_back("Reason", Str(*nb, "reason"));
  rows.emplace_back("URL", Str(*nb, "url"));
  rows.emplace_back("Editor", Str(spec, "editor"));
  if (!Str(spec, "image").empty()) {
    const std::string digest = Str(*nb, "image_digest");
    rows.emplace_back("Image", Str(spec, "image") + (digest.empty() ? "" : " (" + digest + ")"));
  }
  rows.emplace_back("Flavor", FlavorOf(*nb));
  std::vector<std::string> volumes;
  if (const Json& v = At(spec, "volumes"); v.is_array()) {
    for (const Json& volume : v) {
      if (volume.is_string()) volumes.push_back(volume.get<std::string>());
    }
  }
  if (!volumes.empty()) rows.emplace_back("Volumes", base::Join(volumes, "\n"));
  if (std::string sync = LiveSyncText(At(*nb, "status.sync")); !sync.empty()) {
    rows.emplace_back("Live sync", sync);
  }
  rows.emplace_back("Workdir", Str(*nb, "workdir"));
  rows.emplace_back("Idle timeout", IdleText(spec));
  std::vector<std::string> labels;
  if (const Json& l = At(spec, "labels"); l.is_object()) {
    for (const auto& [k, v] : l.items())
      labels.push_back(k + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
  }
  if (!labels.empty()) rows.emplace_back("Labels", base::Join(labels, ","));
  if (!Str(*nb, "job").empty()) rows.emplace_back("Job", Str(*nb, "job"));
  if (int64_t t = TimeMicros(*nb, "started_at"); t > 0) rows.emplace_back("Started", FormatTime(t));
  if (int64_t t = TimeMicros(*nb, "last_activity_at"); t > 0) {
    rows.emplace_back("Last activity", FormatTime(t));
  }
  rows.emplace_back("Created", FormatTime(TimeMicros(*nb, "created_at")));
  const Json& events = At(*nb, "events");
  if (events.is_array() && !events.empty()) {
    std::vector<std::string> lines;
    const size_t first =
        events.size() > kShownNotebookEvents ? events.size() - kShownNotebookEvents : 0;
    for (size_t i = first; i < events.size(); ++i) {
      lines.push_back(FormatTime(TimeMicros(events[i], "at")) + "  " + Str(events[i], "what"));
    }
    rows.emplace_back("Events", base::Join(lines, "\n"));
  }
  ctx.console.Out(RenderKeyValues(rows));
  return kExitOk;
}

int RunNotebookLogs(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai notebook logs",
                  "Prints Jupyter's log (the notebook's current job unless --job), as 'job\n"
                  "logs' does. With -f, keeps streaming until that job ends.");
  std::string job;
  LogFlags log;
  base::FlagSet& f = cmd.flags();
  f.Positional("NOTEBOOK");
  f.String("job", &job, "one of the notebook's recent jobs (sovai notebook get -o json)", "JOB");
  log.Register(f, "stream new lines until the job ends");
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  if (auto code = log.Check(cmd)) return *code;
  const std::string& ref = f.positional()[0];
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  if (log.follow && job.empty()) {
    // Offsets belong to one job's log: pin the current job now.
    auto nb = (*api)->Get(NotebookPath(ref));
    if (!nb.ok()) return cmd.Fail(nb.status());
    job = Str(*nb, "job");
    if (job.empty()) {
      return cmd.Fail(base::FailedPreconditionError("notebook " + ref + " has no job to follow"));
    }
  }
  std::string path = NotebookPath(ref) + "/logs";
  if (!job.empty()) path = AddQuery(path, "job", job);
  LogStreamOptions options{.path = path,
                           .offset = static_cast<uint64_t>(log.offset),
                           .timestamps = log.timestamps,
                           .follow = log.follow,
                           .ended = [&]() -> base::Result<bool> {
                             auto nb = (*api)->Get(NotebookPath(ref));
                             if (!nb.ok() && nb.status().code() == base::StatusCode::kNotFound)
                               return true;
                             if (!nb.ok()) return nb.status();
                             if (Str(*nb, "job") != job) return true;  // started again since
                             const std::string state = Str(*nb, "state");
                             return state == "STOPPED" || state == "FAILED" || state == "ERROR";
                           }};
  Status done = StreamLog(ctx, **api, options);
  if (!done.ok()) return cmd.Fail(done);
  return kExitOk;
}

// stop, start and delete: one POST or DELETE on the notebook.
int RunNotebookAction(CommandContext& ctx, const std::vector<std::string>& args,
                      std::string_view verb, std::string_view summary) {
  return RunResourceAction(ctx, args, "sovai notebook " + std::string(verb), std::string(summary),
                           "NOTEBOOK", &NotebookPath, verb, &PrintIdAndState);
}

int RunNotebookSync(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunResourceAction(
      ctx, args, "sovai notebook sync",
      "Sync now: uploads what changed in a RUNNING notebook's rw/rwd volumes to their\n"
      "buckets at once (POST /v1/notebooks/{id}/push-data), without stopping it.",
      "NOTEBOOK", &NotebookPath, "push-data",
      [&](CommandLine& cmd, const std::string& ref, Json& answer) {
        if (cmd.json()) {
          cmd.PrintJson(answer);
        } else {
          ctx.console.Out("Synced the writable volumes of " + ref + " to their buckets.\n");
        }
        return kExitOk;
      });
}

int RunNotebookStop(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunNotebookAction(ctx, args, "stop",
                           "Stops a notebook: Jupyter ends and its rw volumes are synced back\n"
                           "(STOPPING, then STOPPED); 'sovai notebook start' runs it again.");
}
int RunNotebookStart(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunNotebookAction(ctx, args, "start",
                           "Starts a STOPPED, FAILED or ERROR notebook again (STARTING).");
}
int RunNotebookDelete(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunNotebookAction(ctx, args, "delete",
                           "Deletes a notebook: it stops (rw volumes synced) and disappears from "
                           "lists.");
}

}  // namespace

int RunNotebookCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"run", "start a Jupyter notebook with volumes", &RunNotebookRun},
      {"list", "list the project's notebooks", &RunNotebookList},
      {"get", "show a notebook and its events", &RunNotebookGet},
      {"logs", "print (or follow with -f) Jupyter's log", &RunNotebookLogs},
      {"sync", "sync a running notebook's writable volumes now", &RunNotebookSync},
      {"stop", "stop a notebook (syncs its rw volumes)", &RunNotebookStop},
      {"start", "start a stopped notebook", &RunNotebookStart},
      {"delete", "delete a notebook", &RunNotebookDelete},
  };
  return RunGroup(ctx, "notebook",
                  "Notebooks: Jupyter in the sandbox with buckets mounted, behind the gateway.",
                  kSubcommands, args);
}

}  // namespace sovai::cli::client
