#include "cli/client/job_args.h"

#include <cctype>
#include <map>

#include "base/duration.h"
#include "base/strings.h"
#include "cli/client/limits.h"
#include "control/labels.h"
#include "exec/volume_spec.h"

namespace sovai::cli::client {
namespace {

using base::InvalidArgumentError;
using Json = nlohmann::json;

constexpr int64_t kMaxPriority = 1000;
constexpr int64_t kMaxRetries = 100;
constexpr int64_t kMaxUnits = 4096;

base::Result<int64_t> Units(std::optional<int64_t> units, std::string_view flag) {
  if (*units < 1 || *units > kMaxUnits) {
    return InvalidArgumentError(std::string(flag) + " is a number of flavor units, 1 to " +
                                std::to_string(kMaxUnits) + ", not " + std::to_string(*units));
  }
  return *units;
}

}  // namespace

base::Result<int64_t> ParseDuration(std::string_view text) {
  return base::ParseDurationSeconds(text, kMaxDurationS);
}

base::Result<std::pair<std::string, std::string>> ParseKeyValue(std::string_view text,
                                                                std::string_view flag) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return InvalidArgumentError(std::string(flag) + " '" + std::string(text) +
                                "' must be KEY=VALUE");
  }
  return std::make_pair(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
}

base::Result<std::string> ParseSelector(std::string_view text, std::string_view flag) {
  std::map<std::string, std::string> pairs;
  for (std::string_view item : base::Split(text, ',')) {
    SOVAI_ASSIGN_OR_RETURN(auto kv, ParseKeyValue(base::Trim(item), flag));
    SOVAI_RETURN_IF_ERROR(
        control::ValidateLabel(kv.first, kv.second).WithContext(std::string(flag)));
    if (!pairs.emplace(kv.first, kv.second).second) {
      return InvalidArgumentError(std::string(flag) + " names '" + kv.first + "' twice");
    }
  }
  std::vector<std::string> parts;
  for (const auto& [key, value] : pairs) parts.push_back(key + "=" + value);
  return base::Join(parts, ",");
}

base::Result<Json> BuildJobSpec(const JobRunArgs& args, const EnvVars& local_env) {
  Json spec = Json::object();
  if (args.image.empty()) {
    return InvalidArgumentError(
        "missing IMAGE (e.g. sovai/shell, HOST:PORT/project/name:tag, or "
        "oci:bucket@REGION/image.tar)");
  }
  spec["image"] = args.image;
  if (!args.command.empty()) spec["command"] = args.command;
  if (!args.name.empty()) spec["name"] = args.name;

  if (args.gpu_units && args.cpu_units) {
    return InvalidArgumentError(
        "--gpu and --cpu exclude each other: --gpu N for a GPU flavor, "
        "--cpu N for a CPU flavor");
  }
  std::string flavor = args.flavor;
  if (args.gpu_units) {
    if (flavor.empty()) {
      return InvalidArgumentError(
          "--gpu needs --flavor: a GPU flavor such as h100-1-gpu (see "
          "'sovai flavor list')");
    }
    SOVAI_ASSIGN_OR_RETURN(spec["units"], Units(args.gpu_units, "--gpu"));
  } else if (args.cpu_units) {
    SOVAI_ASSIGN_OR_RETURN(spec["units"], Units(args.cpu_units, "--cpu"));
  }
  spec["flavor"] = flavor.empty() ? std::string(kDefaultCpuFlavor) : flavor;

  if (!args.volumes.empty()) {
    Json volumes = Json::array();
    for (const std::string& volume : args.volumes) {
      auto parsed = exec::ParseVolumeSpec(volume);
      if (!parsed.ok()) return parsed.status().WithContext("--volume");
      volumes.push_back(volume);
    }
    spec["volumes"] = std::move(volumes);
  }

  if (!args.env.empty()) {
    Json env = Json::object();
    for (const std::string& item : args.env) {
      std::string name = item;
      std::string value;
      if (size_t eq = item.find('='); eq != std::string::npos) {
        name = item.substr(0, eq);
        value = item.substr(eq + 1);
      } else {
        // `--env NAME` passes this shell's value, as `docker run -e NAME` does.
        auto it = local_env.find(item);
        if (it == local_env.end()) {
          return InvalidArgumentError("--env " + item + ": " + item +
                                      " is not set here; give --env " + item + "=VALUE");
        }
        value = it->second;
      }
      if (!control::IsEnvName(name)) {
        return InvalidArgumentError("--env '" + item +
                                    "': the name must be letters, digits and _, not starting "
                                    "with a digit");
      }
      if (env.contains(name)) return InvalidArgumentError("--env " + name + " is given twice");
      env[name] = value;
    }
    spec["env"] = std::move(env);
  }

  if (!args.labels.empty()) {
    Json labels = Json::object();
    for (const std::string& item : args.labels) {
      SOVAI_ASSIGN_OR_RETURN(auto kv, ParseKeyValue(item, "--label"));
      SOVAI_RETURN_IF_ERROR(control::ValidateLabel(kv.first, kv.second).WithContext("--label"));
      if (labels.contains(kv.first)) {
        return InvalidArgumentError("--label " + kv.first + " is given twice");
      }
      labels[kv.first] = kv.second;
    }
    spec["labels"] = std::move(labels);
  }

  if (!args.timeout.empty()) {
    auto timeout = ParseDuration(args.timeout);
    if (!timeout.ok()) return timeout.status().WithContext("--timeout");
    spec["timeout_s"] = *timeout;
  }

  if (!args.restart.empty()) {
    const std::string_view restart = args.restart;
    const std::string usage =
        "--restart must be never, on-failure or on-failure:N (N retries, 0 to " +
        std::to_string(kMaxRetries) + "), not '" + args.restart + "'";
    if (restart == "never") {
      spec["restart"] = {{"policy", "never"}};
    } else if (restart == "on-failure") {
      spec["restart"] = {{"policy", "on-failure"}};
    } else if (restart.starts_with("on-failure:")) {
      auto retries = base::ParseUint64(restart.substr(std::string_view("on-failure:").size()));
      if (!retries.ok() || *retries > static_cast<uint64_t>(kMaxRetries)) {
        return InvalidArgumentError(usage);
      }
      spec["restart"] = {{"policy", "on-failure"}, {"max_retries", *retries}};
    } else {
      return InvalidArgumentError(usage);
    }
  }

  if (!args.network.empty()) {
    if (args.network != "none" && args.network != "host") {
      return InvalidArgumentError("--network must be none or host, not '" + args.network + "'");
    }
    spec["network"] = args.network;
  }

  if (args.priority) {
    if (*args.priority < -kMaxPriority || *args.priority > kMaxPriority) {
      return InvalidArgumentError("--priority must be in [-1000, 1000], not " +
                                  std::to_string(*args.priority));
    }
    spec["priority"] = *args.priority;
  }
  if (args.nodes) {
    if (*args.nodes < 1) return InvalidArgumentError("--nodes must be at least 1");
    spec["nodes"] = *args.nodes;
  }
  if (args.tasks_per_node) {
    if (*args.tasks_per_node < 1)
      return InvalidArgumentError("--tasks-per-node must be at least 1");
    spec["tasks_per_node"] = *args.tasks_per_node;
  }
  return spec;
}

bool IsTerminalState(std::string_view state) {
  return state == "DONE" || state == "FAILED" || state == "ERROR" || state == "INTERRUPTED" ||
         state == "TIMEOUT";
}

int ExitCodeForJob(const Json& job) {
  const Json* status = nullptr;
  if (job.is_object()) {
    auto it = job.find("status");
    if (it != job.end() && it->is_object()) status = &*it;
  }
  if (status == nullptr) return 1;
  auto state = status->find("state");
  if (state != status->end() && *state == "DONE") return 0;
  auto code = status->find("exit_code");
  if (code != status->end() && code->is_number_integer()) {
    int64_t value = code->get<int64_t>();
    if (value > 0 && value <= 255) return static_cast<int>(value);
  }
  return 1;
}

}  // namespace sovai::cli::client
