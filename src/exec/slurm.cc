#include "exec/slurm.h"

#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/strings.h"

namespace sovai::exec {
namespace {

using base::Result;
using base::Status;

// A value that sits on an #SBATCH line or in a Slurm name: no whitespace, quotes or shell
// metacharacters that sbatch's parser or a reader could misread.
bool IsPlainToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '%' ||
                    c == ',' || c == '@' || c == '+' || c == '=';
    if (!ok) return false;
  }
  return true;
}

bool IsShellName(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s) {
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  }
  return true;
}

Status CheckToken(std::string_view field, std::string_view value, bool optional) {
  if (value.empty() && optional) return Status();
  if (!IsPlainToken(value)) {
    return base::InvalidArgumentError(
        std::string(field) + " \"" + std::string(value) +
        "\" is not a plain Slurm value (letters, digits, -_.:/%,@+=)");
  }
  return Status();
}

// "CODE:SIGNAL" → an exit status (a nonzero signal means killed by it).
Result<base::ExitStatus> ParseExitCode(std::string_view text) {
  auto parts = base::Split(text, ':');
  if (parts.size() != 2) {
    return base::InvalidArgumentError("ExitCode \"" + std::string(text) + "\" is not CODE:SIGNAL");
  }
  auto code = base::ParseInt64(parts[0]);
  auto signal = base::ParseInt64(parts[1]);
  if (!code.ok() || !signal.ok() || *code < 0 || *code > 255 || *signal < 0 || *signal > 255) {
    return base::InvalidArgumentError("ExitCode \"" + std::string(text) + "\" is not CODE:SIGNAL");
  }
  base::ExitStatus status;
  if (*signal != 0) {
    status.signaled = true;
    status.signal = static_cast<int>(*signal);
  } else {
    status.exited = true;
    status.code = static_cast<int>(*code);
  }
  return status;
}

std::string FirstLine(std::string_view text) {
  text = base::Trim(text);
  size_t nl = text.find('\n');
  return std::string(nl == std::string_view::npos ? text : text.substr(0, nl));
}

}  // namespace

Result<std::string> BuildBatchScript(const SlurmBatch& batch) {
  SOVAI_RETURN_IF_ERROR(CheckToken("job_name", batch.job_name, false));
  SOVAI_RETURN_IF_ERROR(CheckToken("partition", batch.partition, true));
  SOVAI_RETURN_IF_ERROR(CheckToken("account", batch.account, true));
  SOVAI_RETURN_IF_ERROR(CheckToken("gres_type", batch.gres_type, true));
  SOVAI_RETURN_IF_ERROR(CheckToken("output_path", batch.output_path, false));
  if (batch.nodes < 1) return base::InvalidArgumentError("nodes must be at least 1");
  if (batch.tasks_per_node < 1) {
    return base::InvalidArgumentError("tasks_per_node must be at least 1");
  }
  if (batch.cpus_per_task < 1)
    return base::InvalidArgumentError("cpus_per_task must be at least 1");
  if (batch.gpus_per_node < 0) return base::InvalidArgumentError("gpus_per_node is negative");
  if (batch.time_minutes < 0) return base::InvalidArgumentError("time_minutes is negative");
  if (batch.agent_argv.empty() || !batch.agent_argv[0].starts_with("/")) {
    return base::InvalidArgumentError("agent_argv[0] must be an absolute path");
  }

  std::string script = "#!/bin/bash\n";
  auto directive = [&](std::string_view option, std::string_view value) {
    script += "#SBATCH --";
    script += option;
    script += '=';
    script += value;
    script += '\n';
  };
  directive("job-name", batch.job_name);
  if (!batch.partition.empty()) directive("partition", batch.partition);
  if (!batch.account.empty()) directive("account", batch.account);
  directive("nodes", std::to_string(batch.nodes));
  directive("ntasks-per-node", std::to_string(batch.tasks_per_node));
  directive("cpus-per-task", std::to_string(batch.cpus_per_task));
  if (batch.gpus_per_node > 0) {
    directive("gres", "gpu:" + (batch.gres_type.empty() ? "" : batch.gres_type + ":") +
                          std::to_string(batch.gpus_per_node));
  }
  if (batch.memory_mb_per_node > 0) directive("mem", std::to_string(batch.memory_mb_per_node));
  if (batch.time_minutes > 0) directive("time", std::to_string(batch.time_minutes));
  directive("output", batch.output_path);
  // The agent finalizes after its steps end; a requeue would run the workload twice.
  script += "#SBATCH --no-requeue\n";
  script += "set -e\n";
  for (const auto& [name, value] : batch.env) {
    if (!IsShellName(name)) {
      return base::InvalidArgumentError("environment name \"" + name + "\" is not a shell name");
    }
    if (value.find('\0') != std::string::npos) {
      return base::InvalidArgumentError("environment value of " + name + " holds a NUL byte");
    }
    script += "export " + name + "=" + base::ShellQuote(value) + "\n";
  }
  script += "exec";
  for (const std::string& arg : batch.agent_argv) {
    if (arg.find('\0') != std::string::npos) {
      return base::InvalidArgumentError("agent argument holds a NUL byte");
    }
    script += ' ';
    script += base::ShellQuote(arg);
  }
  script += '\n';
  return script;
}

SlurmPhase SlurmPhaseOf(std::string_view state) {
  // sacct writes "CANCELLED by 1000".
  state = state.substr(0, state.find(' '));
  static constexpr std::pair<std::string_view, SlurmPhase> kNames[] = {
      {"PENDING", SlurmPhase::kPending},       {"REQUEUED", SlurmPhase::kPending},
      {"REQUEUE_HOLD", SlurmPhase::kPending},  {"REQUEUE_FED", SlurmPhase::kPending},
      {"RESV_DEL_HOLD", SlurmPhase::kPending}, {"SPECIAL_EXIT", SlurmPhase::kPending},
      {"SUSPENDED", SlurmPhase::kPending},     {"STOPPED", SlurmPhase::kPending},
      {"RESIZING", SlurmPhase::kPending},      {"RUNNING", SlurmPhase::kRunning},
      {"CONFIGURING", SlurmPhase::kRunning},   {"COMPLETING", SlurmPhase::kRunning},
      {"SIGNALING", SlurmPhase::kRunning},     {"STAGE_OUT", SlurmPhase::kRunning},
      {"UPDATE_DB", SlurmPhase::kRunning},     {"COMPLETED", SlurmPhase::kCompleted},
      {"FAILED", SlurmPhase::kFailed},         {"BOOT_FAIL", SlurmPhase::kFailed},
      {"DEADLINE", SlurmPhase::kFailed},       {"REVOKED", SlurmPhase::kCancelled},
      {"CANCELLED", SlurmPhase::kCancelled},   {"TIMEOUT", SlurmPhase::kTimeout},
      {"NODE_FAIL", SlurmPhase::kNodeFail},    {"OUT_OF_MEMORY", SlurmPhase::kOutOfMemory},
      {"PREEMPTED", SlurmPhase::kPreempted},
  };
  for (const auto& [name, phase] : kNames) {
    if (state == name) return phase;
  }
  return SlurmPhase::kUnknown;
}

bool IsFinal(SlurmPhase phase) {
  return phase != SlurmPhase::kPending && phase != SlurmPhase::kRunning &&
         phase != SlurmPhase::kUnknown;
}

Result<std::string> ParseSbatchJobId(std::string_view output) {
  std::string line = FirstLine(output);
  std::string_view id = std::string_view(line).substr(0, line.find(';'));
  if (id.empty() || id.size() > 20 || !base::ParseUint64(id).ok()) {
    return base::InvalidArgumentError("sbatch answered \"" + line + "\", not a job id");
  }
  return std::string(id);
}

Result<SlurmJobInfo> ParseSqueueLine(std::string_view line) {
  auto fields = base::Split(base::Trim(line), '|');
  if (fields.size() != 4 || fields[0].empty() || fields[1].empty()) {
    return base::InvalidArgumentError("squeue line \"" + std::string(line) +
                                      "\" is not ID|STATE|REASON|NODES");
  }
  SlurmJobInfo info;
  info.id = std::string(fields[0]);
  info.state = std::string(fields[1]);
  info.phase = SlurmPhaseOf(info.state);
  info.reason = std::string(fields[2]);
  info.nodes = std::string(fields[3]);
  return info;
}

Result<SlurmJobInfo> ParseScontrolJob(std::string_view text) {
  // Key=Value pairs separated by spaces. Values of the keys read here hold no spaces, except a
  // Reason that scontrol leaves as one token ("Reason=None"); other keys may hold anything.
  std::map<std::string, std::string, std::less<>> pairs;
  const std::string line = FirstLine(text);
  for (std::string_view token : base::Split(line, ' ', /*skip_empty=*/true)) {
    size_t eq = token.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    pairs.emplace(std::string(token.substr(0, eq)), std::string(token.substr(eq + 1)));
  }
  auto id = pairs.find("JobId");
  auto state = pairs.find("JobState");
  if (id == pairs.end() || state == pairs.end() || id->second.empty() || state->second.empty()) {
    return base::InvalidArgumentError("scontrol answered without JobId and JobState: \"" +
                                      line.substr(0, 200) + "\"");
  }
  SlurmJobInfo info;
  info.id = id->second;
  info.state = state->second;
  info.phase = SlurmPhaseOf(info.state);
  if (auto it = pairs.find("Reason"); it != pairs.end()) info.reason = it->second;
  if (auto it = pairs.find("NodeList"); it != pairs.end() && it->second != "(null)") {
    info.nodes = it->second;
  }
  if (IsFinal(info.phase)) {
    if (auto it = pairs.find("ExitCode"); it != pairs.end()) {
      SOVAI_ASSIGN_OR_RETURN(info.exit, ParseExitCode(it->second));
    }
  }
  return info;
}

Result<SlurmJobInfo> ParseSacctLine(std::string_view line) {
  auto fields = base::Split(base::Trim(line), '|');
  if (fields.size() != 4 || fields[0].empty() || fields[1].empty()) {
    return base::InvalidArgumentError("sacct line \"" + std::string(line) +
                                      "\" is not JobID|State|ExitCode|Reason");
  }
  SlurmJobInfo info;
  info.id = std::string(fields[0]);
  info.state = std::string(fields[1].substr(0, fields[1].find(' ')));
  info.phase = SlurmPhaseOf(info.state);
  info.reason = std::string(fields[3]);
  if (IsFinal(info.phase)) {
    SOVAI_ASSIGN_OR_RETURN(info.exit, ParseExitCode(fields[2]));
  }
  return info;
}

Result<base::CapturedRun> SlurmClient::Run(std::vector<std::string> argv,
                                           std::string_view stdin_data) {
  if (!options_.bin_dir.empty()) argv[0] = base::JoinPath(options_.bin_dir, argv[0]);
  base::SpawnOptions spawn;
  spawn.argv = std::move(argv);
  if (!options_.slurm_conf.empty()) spawn.env["SLURM_CONF"] = options_.slurm_conf;
  spawn.new_process_group = true;
  return base::RunAndCapture(env_, std::move(spawn), stdin_data, options_.command_timeout_ms);
}

namespace {
// The command's complaint, for an error message.
std::string Complaint(const base::CapturedRun& run) {
  std::string text = FirstLine(run.stderr_text);
  if (text.empty()) text = FirstLine(run.stdout_text);
  if (text.empty()) text = run.exit.ToString();
  return text;
}
}  // namespace

Result<std::string> SlurmClient::Submit(const std::string& script) {
  SOVAI_ASSIGN_OR_RETURN(base::CapturedRun run, Run({"sbatch", "--parsable"}, script));
  if (!run.exit.success()) return base::FailedPreconditionError(Complaint(run));
  return ParseSbatchJobId(run.stdout_text);
}

Result<SlurmJobInfo> SlurmClient::Query(const std::string& id) {
  if (auto run = Run({"squeue", "-h", "-j", id, "-o", "%i|%T|%r|%N"}, ""); run.ok()) {
    if (run->exit.success() && !base::Trim(run->stdout_text).empty()) {
      return ParseSqueueLine(FirstLine(run->stdout_text));
    }
  } else if (run.status().code() == base::StatusCode::kNotFound) {
    return run.status();
  }
  if (auto run = Run({"scontrol", "show", "job", "-o", id}, ""); run.ok() && run->exit.success()) {
    return ParseScontrolJob(run->stdout_text);
  }
  if (auto run =
          Run({"sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode,Reason", "-j", id}, "");
      run.ok() && run->exit.success() && !base::Trim(run->stdout_text).empty()) {
    return ParseSacctLine(FirstLine(run->stdout_text));
  }
  return base::NotFoundError("Slurm does not know job " + id +
                             " (not in squeue, scontrol or sacct)");
}

Status SlurmClient::Signal(const std::string& id, int signal) {
  const char* name = sigabbrev_np(signal);
  SOVAI_ASSIGN_OR_RETURN(
      base::CapturedRun run,
      Run({"scancel", "--signal=" + std::string(name ? name : std::to_string(signal)), id}, ""));
  if (!run.exit.success()) return base::FailedPreconditionError(Complaint(run));
  return Status();
}

Status SlurmClient::Cancel(const std::string& id) {
  SOVAI_ASSIGN_OR_RETURN(base::CapturedRun run, Run({"scancel", id}, ""));
  if (!run.exit.success()) return base::FailedPreconditionError(Complaint(run));
  return Status();
}

Status SlurmClient::Check() {
  auto run = Run({"sinfo", "-h", "-o", "%P"}, "");
  if (!run.ok()) {
    return base::FailedPreconditionError(
        "the Slurm commands are not usable: " + run.status().message() +
        " (install slurm-client, or set the Slurm bin_dir)");
  }
  if (!run->exit.success()) {
    return base::FailedPreconditionError("sinfo failed: " + Complaint(*run) +
                                         " (is slurmctld reachable? SLURM_CONF?)");
  }
  return Status();
}

Result<std::string> FirstHostOf(std::string_view node_list) {
  node_list = base::Trim(node_list);
  size_t end = node_list.find_first_of(",[");
  if (node_list.empty() || end == 0) {
    return base::InvalidArgumentError("node list \"" + std::string(node_list) + "\" is malformed");
  }
  if (end == std::string_view::npos || node_list[end] == ',') {
    return std::string(node_list.substr(0, end));
  }
  // prefix[03-05,09]suffix…: the first number of the range, zero padding kept.
  std::string_view prefix = node_list.substr(0, end);
  size_t close = node_list.find(']', end);
  if (close == std::string_view::npos) {
    return base::InvalidArgumentError("node list \"" + std::string(node_list) +
                                      "\" has an unclosed [");
  }
  std::string_view range = node_list.substr(end + 1, close - end - 1);
  std::string_view first = range.substr(0, range.find_first_of(",-"));
  if (first.empty() || !base::ParseUint64(first).ok()) {
    return base::InvalidArgumentError("node list \"" + std::string(node_list) +
                                      "\" has a malformed range");
  }
  std::string_view suffix = node_list.substr(close + 1);
  suffix = suffix.substr(0, suffix.find(','));
  return std::string(prefix) + std::string(first) + std::string(suffix);
}

Result<std::vector<std::pair<std::string, std::string>>> DistributedEnv(
    const std::map<std::string, std::string>& slurm_env, std::string_view first_host,
    int master_port) {
  auto get = [&](const char* name) -> Result<int64_t> {
    auto it = slurm_env.find(name);
    if (it == slurm_env.end()) return base::InvalidArgumentError(std::string(name) + " is not set");
    auto value = base::ParseInt64(it->second);
    if (!value.ok() || *value < 0) {
      return base::InvalidArgumentError(std::string(name) + "=\"" + it->second +
                                        "\" is not a count");
    }
    return *value;
  };
  SOVAI_ASSIGN_OR_RETURN(int64_t rank, get("SLURM_PROCID"));
  SOVAI_ASSIGN_OR_RETURN(int64_t local_rank, get("SLURM_LOCALID"));
  SOVAI_ASSIGN_OR_RETURN(int64_t world, get("SLURM_NTASKS"));
  SOVAI_ASSIGN_OR_RETURN(int64_t node_rank, get("SLURM_NODEID"));
  if (rank >= world) {
    return base::InvalidArgumentError("SLURM_PROCID " + std::to_string(rank) +
                                      " is not below SLURM_NTASKS " + std::to_string(world));
  }
  // SLURM_TASKS_PER_NODE: "2(x3),1" — the count of the first node is enough for a job whose
  // nodes run equal numbers of tasks (the batch script asks for --ntasks-per-node).
  int64_t local_world = 1;
  if (auto it = slurm_env.find("SLURM_TASKS_PER_NODE"); it != slurm_env.end()) {
    std::string_view first = it->second;
    first = first.substr(0, first.find_first_of("(,"));
    if (auto n = base::ParseInt64(first); n.ok() && *n > 0) local_world = *n;
  }
  if (first_host.empty()) return base::InvalidArgumentError("the first host is empty");
  return std::vector<std::pair<std::string, std::string>>{
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_WORLD_SIZE", std::to_string(local_world)},
      {"NODE_RANK", std::to_string(node_rank)},
      {"MASTER_ADDR", std::string(first_host)},
      {"MASTER_PORT", std::to_string(master_port)},
  };
}

Result<SlurmConfig> ParseSlurmConfig(std::string_view text) {
  using nlohmann::json;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return base::InvalidArgumentError("slurm config: not a JSON object");
  }
  SlurmConfig config;
  auto string = [&](const json& value, const std::string& field, std::string* out) -> Status {
    if (!value.is_string()) {
      return base::InvalidArgumentError("slurm config: " + field + " must be a string");
    }
    *out = value.get<std::string>();
    return Status();
  };
  auto absolute = [&](const json& value, const std::string& field, std::string* out) -> Status {
    SOVAI_RETURN_IF_ERROR(string(value, field, out));
    if (!out->starts_with("/")) {
      return base::InvalidArgumentError("slurm config: " + field + " must be an absolute path");
    }
    return Status();
  };
  auto count = [&](const json& value, const std::string& field, int64_t min, int64_t max,
                   int64_t* out) -> Status {
    if (!value.is_number_integer() || value.get<int64_t>() < min || value.get<int64_t>() > max) {
      return base::InvalidArgumentError("slurm config: " + field + " must be an integer in [" +
                                        std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    *out = value.get<int64_t>();
    return Status();
  };
  for (const auto& [key, value] : j.items()) {
    if (key == "bin_dir") {
      SOVAI_RETURN_IF_ERROR(absolute(value, key, &config.client.bin_dir));
    } else if (key == "slurm_conf") {
      SOVAI_RETURN_IF_ERROR(absolute(value, key, &config.client.slurm_conf));
    } else if (key == "partition") {
      SOVAI_RETURN_IF_ERROR(string(value, key, &config.partition));
      SOVAI_RETURN_IF_ERROR(CheckToken("slurm config: partition", config.partition, true));
    } else if (key == "account") {
      SOVAI_RETURN_IF_ERROR(string(value, key, &config.account));
      SOVAI_RETURN_IF_ERROR(CheckToken("slurm config: account", config.account, true));
    } else if (key == "agent_binary") {
      SOVAI_RETURN_IF_ERROR(absolute(value, key, &config.agent_binary));
    } else if (key == "engine_binary") {
      SOVAI_RETURN_IF_ERROR(absolute(value, key, &config.engine_binary));
    } else if (key == "scratch_dir") {
      SOVAI_RETURN_IF_ERROR(absolute(value, key, &config.scratch_dir));
    } else if (key == "s3_endpoint") {
      SOVAI_RETURN_IF_ERROR(string(value, key, &config.s3_endpoint));
      if (!config.s3_endpoint.starts_with("http://") &&
          !config.s3_endpoint.starts_with("https://")) {
        return base::InvalidArgumentError("slurm config: s3_endpoint must be an http(s):// URL");
      }
    } else if (key == "staging_minutes") {
      SOVAI_RETURN_IF_ERROR(count(value, key, 0, 7 * 24 * 60, &config.staging_minutes));
    } else if (key == "poll_ms") {
      SOVAI_RETURN_IF_ERROR(count(value, key, 50, 60'000, &config.poll_ms));
    } else if (key == "flavors") {
      if (!value.is_object()) {
        return base::InvalidArgumentError("slurm config: flavors must be an object");
      }
      for (const auto& [flavor, mapping] : value.items()) {
        const std::string field = "flavors." + flavor;
        if (!mapping.is_object()) {
          return base::InvalidArgumentError("slurm config: " + field + " must be an object");
        }
        std::pair<std::string, std::string> entry;
        for (const auto& [name, v] : mapping.items()) {
          if (name == "partition") {
            SOVAI_RETURN_IF_ERROR(string(v, field + ".partition", &entry.first));
            SOVAI_RETURN_IF_ERROR(
                CheckToken("slurm config: " + field + ".partition", entry.first, true));
          } else if (name == "gres") {
            SOVAI_RETURN_IF_ERROR(string(v, field + ".gres", &entry.second));
            SOVAI_RETURN_IF_ERROR(
                CheckToken("slurm config: " + field + ".gres", entry.second, true));
          } else {
            return base::InvalidArgumentError("slurm config: " + field + "." + name +
                                              " is not a setting (partition, gres)");
          }
        }
        config.flavors[flavor] = std::move(entry);
      }
    } else {
      return base::InvalidArgumentError("slurm config: " + key + " is not a setting");
    }
  }
  return config;
}

}  // namespace sovai::exec
