// sovai job run|list|get|logs|stop|delete|push-data, sovai flavor list.
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/strings.h"
#include "base/time.h"
#include "cli/client/billing_commands.h"
#include "cli/client/command_util.h"
#include "cli/client/job_args.h"
#include "cli/client/log_stream.h"
#include "cli/client/table.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

std::string JobPath(std::string_view id) { return "/v1/jobs/" + net::PercentEncode(id); }

std::string StateOf(const Json& job) { return Str(At(job, "status"), "state"); }

// "RUNNING", "FAILED (exit 3)", "FAILED (signal 9)".
std::string StateWithExit(const Json& job) {
  const Json& status = At(job, "status");
  std::string state = Str(status, "state");
  if (status.contains("exit_code") && status["exit_code"].is_number_integer() && state != "DONE") {
    state += " (exit " + std::to_string(status["exit_code"].get<int64_t>()) + ")";
  } else if (status.contains("exit_signal") && status["exit_signal"].is_number_integer()) {
    state += " (signal " + std::to_string(status["exit_signal"].get<int64_t>()) + ")";
  }
  return state;
}

std::string FlavorOf(const Json& job) {
  const Json& spec = At(job, "spec");
  return Str(spec, "flavor") + " x" + std::to_string(Int(spec, "units", 1));
}

std::string MapText(const Json& map, std::string_view separator) {
  std::string out;
  if (!map.is_object()) return out;
  for (const auto& [key, value] : map.items()) {
    if (!out.empty()) out += separator;
    out += key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
  }
  return out;
}

// An allocation's devices: a list of indices ("2 GPU (0,1)") or a count ("2 GPU").
std::string Devices(const Json& value, std::string_view kind) {
  if (value.is_number_integer())
    return std::to_string(value.get<int64_t>()) + " " + std::string(kind);
  if (!value.is_array()) return "0 " + std::string(kind);
  std::vector<std::string> ids;
  for (const Json& id : value) ids.push_back(id.dump());
  std::string text = std::to_string(ids.size()) + " " + std::string(kind);
  if (!ids.empty()) text += " (" + base::Join(ids, ",") + ")";
  return text;
}

// Reads a job's log from `offset` and prints it (StreamLog). With `follow`, keeps reading until
// the job has ended and returns the ended job; without, returns null after one read.
base::Result<Json> StreamLogs(CommandLine& cmd, ApiClient& api, const std::string& id,
                              uint64_t offset, bool timestamps, bool follow) {
  Json job;
  LogStreamOptions options{.path = JobPath(id) + "/logs",
                           .offset = offset,
                           .timestamps = timestamps,
                           .follow = follow,
                           .ended = [&]() -> base::Result<bool> {
                             SOVAI_ASSIGN_OR_RETURN(job, api.Get(JobPath(id)));
                             return IsTerminalState(StateOf(job));
                           }};
  SOVAI_RETURN_IF_ERROR(StreamLog(cmd.ctx(), api, options));
  return job;
}

int RunJobRun(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai job run",
                  "Submits a job (POST /v1/jobs) and prints its id and state. IMAGE is\n"
                  "sovai/shell (the host's filesystem, read-only), an image of the server's\n"
                  "registry (HOST:PORT/project/name:tag, ...@sha256:<hex>, or name:tag of your\n"
                  "project; resolved to a digest now) or oci:bucket@REGION/image.tar;\n"
                  "the command follows '--'. --gpu N / --cpu N ask for N units of the flavor\n"
                  "(--flavor defaults to ai1-1-cpu; GPU flavors must be named). Volumes are\n"
                  "bucket@REGION[/prefix]:/mount/path[:ro|rw|rwd][:cache|no-cache].\n"
                  "With --follow, streams the logs and exits with the job's exit code. With\n"
                  "--dry-run, prices it and checks the budget instead (exit 1 if it would be\n"
                  "refused); nothing is created.\n\n"
                  "  sovai job run --flavor ai1-1-cpu --cpu 1 \\\n"
                  "    --volume my-bucket@EU-WEST-LOCAL/dataset:/workspace/data:ro \\\n"
                  "    --volume my-bucket@EU-WEST-LOCAL/output:/workspace/output:rw \\\n"
                  "    sovai/shell -- sh -c 'wc -l /workspace/data/*'");
  JobRunArgs run;
  int64_t gpu = 0;
  int64_t cpu = 0;
  int64_t priority = 0;
  int64_t nodes = 1;
  int64_t tasks_per_node = 0;
  bool follow = false;
  bool timestamps = false;
  bool dry_run = false;
  base::FlagSet& f = cmd.flags();
  f.Positional("IMAGE [-- COMMAND ARGS...]");
  f.String("name", &run.name, "a display name", "NAME");
  f.String("flavor", &run.flavor, "flavor id (sovai flavor list); ai1-1-cpu when not given",
           "FLAVOR");
  f.Int("gpu", &gpu, "GPU flavor units (needs --flavor)");
  f.Int("cpu", &cpu, "CPU flavor units");
  f.StringList("volume", &run.volumes, "bucket@REGION[/prefix]:/path[:ro|rw|rwd][:cache]", "SPEC");
  f.StringList("env", &run.env, "environment variable; NAME alone passes this shell's value",
               "K=V");
  f.StringList("label", &run.labels, "a label (tokens with a selector see only their labels)",
               "K=V");
  f.String("timeout", &run.timeout, "stop the job after this long RUNNING: 90s, 10m, 2h, 1d",
           "DURATION");
  f.String("restart", &run.restart, "never, on-failure or on-failure:N (N retries)", "POLICY");
  f.String("network", &run.network, "none (loopback only) or host (the server's default)", "MODE");
  f.Int("priority", &priority, "-1000..1000; higher starts first");
  f.Int("nodes", &nodes, "nodes of a distributed job (the Slurm executor)");
  f.Int("tasks-per-node", &tasks_per_node,
        "tasks on each node, with RANK/WORLD_SIZE set (default: one per GPU)");
  f.Bool("follow", &follow, "stream the logs until the job ends; exit with its exit code");
  f.Bool("timestamps", &timestamps, "with --follow: print whole log records");
  f.Bool("dry-run", &dry_run,
         "print the price, the cost at the timeout and the budget left; create nothing");
  f.HideDefault("gpu");
  f.HideDefault("cpu");
  f.HideDefault("priority");
  f.HideDefault("nodes");
  f.HideDefault("tasks-per-node");
  f.Short('f', "follow");
  f.Short('e', "env");
  f.Short('v', "volume");
  f.Short('l', "label");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, -1)) return *code;

  const std::vector<std::string>& positional = f.positional();
  if (f.saw_dash() && f.positional_before_dash() != 1) {
    return cmd.Usage(f.positional_before_dash() == 0
                         ? "missing IMAGE before '--'"
                         : "put the whole command after '--' (IMAGE -- COMMAND ARGS...)");
  }
  run.image = positional[0];
  run.command.assign(positional.begin() + 1, positional.end());
  if (f.WasSet("gpu")) run.gpu_units = gpu;
  if (f.WasSet("cpu")) run.cpu_units = cpu;
  if (f.WasSet("priority")) run.priority = priority;
  if (f.WasSet("nodes")) run.nodes = nodes;
  if (f.WasSet("tasks-per-node")) run.tasks_per_node = tasks_per_node;
  auto spec = BuildJobSpec(run, ctx.vars);
  if (!spec.ok()) return cmd.Usage(spec.status().message());
  if (dry_run) {
    if (follow) return cmd.Usage("--dry-run creates no job to --follow");
    return RunDryRun(cmd, "/v1/jobs", *spec);
  }

  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto job = (*api)->Post("/v1/jobs", *spec);
  if (!job.ok()) return cmd.Fail(job.status());
  const std::string id = Str(*job, "id");
  if (!follow) {
    if (cmd.json()) {
      cmd.PrintJson(*job);
    } else {
      ctx.console.Out(id + "  " + StateOf(*job) + "\n");
    }
    return kExitOk;
  }
  // Following: stdout carries only the job's log; the submission goes to stderr.
  ctx.console.Err(cmd.json() ? base::DumpJson(*job, 2) + "\n" : id + "  " + StateOf(*job) + "\n");
  auto ended = StreamLogs(cmd, **api, id, 0, timestamps, true);
  if (!ended.ok()) return cmd.Fail(ended.status().WithContext("following job " + id));
  if (!cmd.json()) {
    std::string reason = Str(At(*ended, "status"), "reason");
    ctx.console.Err("job " + id + " ended " + StateWithExit(*ended) +
                    (reason.empty() ? "" : ": " + reason) + "\n");
  }
  return ExitCodeForJob(*ended);
}

int RunJobList(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunLabelledList(
      ctx, args, "sovai job list",
      "Lists the jobs of the token's project, newest first (GET /v1/jobs).", "/v1/jobs", "jobs",
      [&](const std::vector<Json>& items) {
        Table table({"ID", "NAME", "STATE", "FLAVOR", "IMAGE", "AGE"});
        const int64_t now = ctx.env.NowUnixMicros();
        for (const Json& job : items) {
          table.AddRow({Str(job, "id"), Str(At(job, "spec"), "name"), StateWithExit(job),
                        FlavorOf(job), Str(At(job, "spec"), "image"),
                        FormatAge(now, Int(job, "created_unix_micros"))});
        }
        ctx.console.Out(table.Render());
      });
}

int RunJobGet(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai job get", "Shows a job: spec, state, exit code, state history.");
  cmd.flags().Positional("JOB_ID");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto job = (*api)->Get(JobPath(cmd.flags().positional()[0]));
  if (!job.ok()) return cmd.Fail(job.status());
  if (cmd.json()) {
    cmd.PrintJson(*job);
    return kExitOk;
  }
  const Json& spec = At(*job, "spec");
  const Json& status = At(*job, "status");
  std::vector<std::pair<std::string, std::string>> rows = {{"ID", Str(*job, "id")}};
  if (!Str(spec, "name").empty()) rows.emplace_back("Name", Str(spec, "name"));
  rows.emplace_back("State", StateWithExit(*job));
  if (!Str(status, "reason").empty()) rows.emplace_back("Reason", Str(status, "reason"));
  if (Int(status, "retries") > 0)
    rows.emplace_back("Retries", std::to_string(Int(status, "retries")));
  rows.emplace_back("Image", Str(spec, "image"));
  if (!Str(status, "image_digest").empty()) {
    rows.emplace_back("Image digest", Str(status, "image_digest"));
  }
  std::vector<std::string> command;
  if (spec.contains("command") && spec["command"].is_array()) {
    for (const Json& arg : spec["command"])
      command.push_back(arg.is_string() ? arg.get<std::string>() : arg.dump());
  }
  if (!command.empty()) rows.emplace_back("Command", ShellJoin(command));
  rows.emplace_back("Flavor", FlavorOf(*job));
  const Json& allocation = At(status, "allocation");
  if (allocation.is_object()) {
    rows.emplace_back("Allocation", Devices(At(allocation, "gpus"), "GPU") + ", " +
                                        Devices(At(allocation, "cpus"), "CPU") + ", " +
                                        base::HumanBytes(static_cast<uint64_t>(std::max<int64_t>(
                                            0, Int(allocation, "memory_bytes")))));
  }
  if (spec.contains("volumes") && spec["volumes"].is_array() && !spec["volumes"].empty()) {
    std::vector<std::string> volumes;
    for (const Json& v : spec["volumes"])
      volumes.push_back(v.is_string() ? v.get<std::string>() : v.dump());
    rows.emplace_back("Volumes", base::Join(volumes, "\n"));
  }
  if (std::string sync = LiveSyncText(At(status, "sync")); !sync.empty()) {
    rows.emplace_back("Live sync", sync);
  }
  if (std::string env = MapText(At(spec, "env"), "\n"); !env.empty()) rows.emplace_back("Env", env);
  if (std::string labels = MapText(At(spec, "labels"), ","); !labels.empty())
    rows.emplace_back("Labels", labels);
  if (Int(spec, "timeout_s") > 0)
    rows.emplace_back("Timeout", std::to_string(Int(spec, "timeout_s")) + "s");
  if (Int(spec, "priority") != 0)
    rows.emplace_back("Priority", std::to_string(Int(spec, "priority")));
  const Json& restart = At(spec, "restart");
  if (Str(restart, "policy") == "on-failure") {
    rows.emplace_back("Restart", "on-failure:" + std::to_string(Int(restart, "max_retries")));
  }
  if (!Str(spec, "network").empty()) rows.emplace_back("Network", Str(spec, "network"));
  rows.emplace_back("Created", FormatTime(Int(*job, "created_unix_micros")));
  const Json& history = At(status, "history");
  if (history.is_array() && !history.empty()) {
    std::vector<std::string> lines;
    for (const Json& step : history) {
      // A restart says why it ended and why it was queued again.
      const std::string why = Str(step, "reason");
      lines.push_back(FormatTime(Int(step, "at_unix_micros")) + "  " + Str(step, "state") +
                      (why.empty() ? "" : ": " + why));
    }
    rows.emplace_back("History", base::Join(lines, "\n"));
  }
  ctx.console.Out(RenderKeyValues(rows));
  return kExitOk;
}

int RunJobLogs(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai job logs",
                  "Prints a job's log (stdout, stderr and the platform's notes, in order). With\n"
                  "-f, keeps streaming until the job ends.");
  LogFlags log;
  cmd.flags().Positional("JOB_ID");
  log.Register(cmd.flags(), "stream new lines until the job ends");
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  if (auto code = log.Check(cmd)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto done = StreamLogs(cmd, **api, cmd.flags().positional()[0], static_cast<uint64_t>(log.offset),
                         log.timestamps, log.follow);
  if (!done.ok()) return cmd.Fail(done.status());
  return kExitOk;
}

// stop, delete and push-data: one POST or DELETE on the job.
int RunJobAction(CommandContext& ctx, const std::vector<std::string>& args, std::string_view verb,
                 std::string_view summary) {
  return RunResourceAction(
      ctx, args, "sovai job " + std::string(verb), std::string(summary), "JOB_ID", &JobPath, verb,
      [&](CommandLine& cmd, const std::string& id, Json& answer) {
        if (cmd.json()) {
          cmd.PrintJson(answer.is_null() ? Json{{"id", id}, {"deleted", true}} : answer);
          return kExitOk;
        }
        if (verb == "stop") {
          ctx.console.Out(id + "  " + StateOf(answer) + " (stopping: outputs are still synced)\n");
        } else if (verb == "delete") {
          ctx.console.Out("Deleted " + id + ".\n");
        } else {
          ctx.console.Out("Pushed the writable volumes of " + id + " to their buckets.\n");
        }
        return kExitOk;
      });
}

int RunJobStop(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunJobAction(ctx, args, "stop",
                      "Stops a job: SIGTERM, then SIGKILL after the grace period; rw volumes are\n"
                      "still synced back (state INTERRUPTED).");
}
int RunJobDelete(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunJobAction(ctx, args, "delete",
                      "Deletes a job that has ended: its record, log and files.");
}
int RunJobPushData(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunJobAction(ctx, args, "push-data",
                      "Syncs a running job's rw/rwd volumes to their buckets now (checkpoints)\n"
                      "without stopping it.");
}

int RunFlavorList(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai flavor list",
                  "Lists the flavors (GET /v1/flavors): what one unit holds, its price, and\n"
                  "whether this installation can run it now.");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  auto api = cmd.Connect();
  if (!api.ok()) return cmd.Fail(api.status());
  auto flavors = (*api)->Get("/v1/flavors");
  if (!flavors.ok()) return cmd.Fail(flavors.status());
  const Json& items = At(*flavors, "items");
  if (cmd.json()) {
    cmd.PrintJson(*flavors);  // the API's own object, {"items": [...]}
    return kExitOk;
  }
  Table table({"ID", "KIND", "GPU", "PER UNIT", "MAX UNITS", "EUR/MIN", "AVAILABLE"});
  if (items.is_array()) {
    for (const Json& f : items) {
      std::string per_unit;
      if (Int(f, "gpus_per_unit") > 0)
        per_unit = std::to_string(Int(f, "gpus_per_unit")) + " GPU, ";
      per_unit += std::to_string(Int(f, "vcpus_per_unit")) + " vCPU, " +
                  base::HumanBytes(
                      static_cast<uint64_t>(std::max<int64_t>(0, Int(f, "memory_bytes_per_unit"))));
      const Json& price = At(f, "price_per_minute_eur");
      std::string available = At(f, "available") == true ? "yes" : "no";
      if (!Str(f, "reason").empty() && available == "no") available += ": " + Str(f, "reason");
      table.AddRow({Str(f, "id"), Str(f, "kind"),
                    Str(f, "gpu_model").empty() ? "-" : Str(f, "gpu_model"), per_unit,
                    std::to_string(Int(f, "max_units")),
                    price.is_string() ? price.get<std::string>() : price.dump(), available});
    }
  }
  ctx.console.Out(table.Render());
  return kExitOk;
}

}  // namespace

int RunJobCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"run", "submit a job (and follow its logs with -f)", &RunJobRun},
      {"list", "list the project's jobs", &RunJobList},
      {"get", "show a job", &RunJobGet},
      {"logs", "print (or follow with -f) a job's log", &RunJobLogs},
      {"stop", "stop a job", &RunJobStop},
      {"delete", "delete an ended job", &RunJobDelete},
      {"push-data", "sync a running job's writable volumes now", &RunJobPushData},
  };
  return RunGroup(ctx, "job", "Training jobs: a command in a sandbox with bucket volumes.",
                  kSubcommands, args);
}

int RunFlavorCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"list", "list the flavors, prices and availability", &RunFlavorList},
  };
  return RunGroup(ctx, "flavor", "Machine flavors jobs ask for with --flavor.", kSubcommands, args);
}

}  // namespace sovai::cli::client
