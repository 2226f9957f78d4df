#include "cli/client/app_args.h"

#include <charconv>
#include <cmath>

#include "base/strings.h"
#include "cli/client/job_args.h"
#include "cli/client/limits.h"
#include "exec/volume_spec.h"

namespace sovai::cli::client {
namespace {

using base::InvalidArgumentError;
using base::Status;
using Json = nlohmann::json;

constexpr size_t kMaxAppNameBytes = 63;
constexpr int64_t kMaxPort = 65535;
// The mount path appended to a model source so that the volume-spec parser checks it: any valid
// one works, only the source part is kept.
constexpr std::string_view kCheckMountPath = ":/m";

// The flavor, units, env and labels rules are job run's: BuildJobSpec checks them on a
// placeholder image, so `app run` and `job run` accept and refuse exactly the same values.
// Copies `fields` of the result into `body`.
Status AddJobFields(const JobRunArgs& job_args, const EnvVars& local_env,
                    std::initializer_list<std::string_view> fields, Json& body) {
  JobRunArgs args = job_args;
  args.image = "sovai/shell";
  SOVAI_ASSIGN_OR_RETURN(Json spec, BuildJobSpec(args, local_env));
  for (std::string_view field : fields) {
    auto it = spec.find(field);
    if (it != spec.end()) body[std::string(field)] = *it;
  }
  return Status();
}

Status CheckProbePath(std::string_view path) {
  if (!path.starts_with('/')) {
    return InvalidArgumentError("--probe-path '" + std::string(path) +
                                "' must be an absolute path such as /health");
  }
  for (char c : path) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return InvalidArgumentError("--probe-path must not contain spaces or control characters");
    }
  }
  return Status();
}

Status CheckNonNegative(std::optional<int64_t> value, std::string_view flag, int64_t max) {
  if (value && (*value < 0 || *value > max)) {
    return InvalidArgumentError(std::string(flag) + " must be 0 to " + std::to_string(max) +
                                ", not " + std::to_string(*value));
  }
  return Status();
}

// min/max replica bounds shared by autoscaling and endpoints.
Status CheckReplicaRange(std::optional<int64_t> min, std::optional<int64_t> max,
                         std::string_view min_flag, std::string_view max_flag) {
  if (min && *min < 0) {
    return InvalidArgumentError(std::string(min_flag) + " must be 0 or more (0 allows scale to " +
                                "zero), not " + std::to_string(*min));
  }
  if (max && *max < 1) {
    return InvalidArgumentError(std::string(max_flag) + " must be 1 or more, not " +
                                std::to_string(*max));
  }
  // Without a minimum, the server's default (1) is never above a valid maximum.
  if (min && max && *max < *min) {
    return InvalidArgumentError(std::string(max_flag) + " " + std::to_string(*max) + " is below " +
                                std::string(min_flag) + " " + std::to_string(*min));
  }
  return Status();
}

// The model flags of `app run` and `app update`.
Status AddModel(std::string_view model, std::string_view base_model, Json& body) {
  if (!model.empty()) {
    SOVAI_RETURN_IF_ERROR(CheckModelSource(model, "--model"));
    body["model"] = model;
  }
  if (!base_model.empty()) {
    SOVAI_RETURN_IF_ERROR(CheckModelSource(base_model, "--base-model"));
    body["base_model"] = base_model;
  }
  return Status();
}

}  // namespace

bool ScalingArgs::any_auto() const {
  return auto_min_replicas || auto_max_replicas || !auto_resource_type.empty() ||
         !auto_threshold.empty() || scale_up_window_s || scale_down_window_s || cooldown_s;
}

Status CheckAppName(std::string_view name, std::string_view flag) {
  const std::string rule =
      ": 1 to " + std::to_string(kMaxAppNameBytes) +
      " characters of a-z, 0-9 and '-', starting with a letter (clients send it as \"model\")";
  if (name.empty()) return InvalidArgumentError("missing " + std::string(flag) + rule);
  bool ok = name.size() <= kMaxAppNameBytes && name[0] >= 'a' && name[0] <= 'z';
  for (char c : name) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  if (!ok) {
    return InvalidArgumentError(std::string(flag) + " '" + std::string(name) + "' is not a name" +
                                rule);
  }
  return Status();
}

Status CheckModelSource(std::string_view source, std::string_view flag) {
  const std::string expected =
      std::string(flag) + " '" + std::string(source) +
      "' must be bucket@REGION/prefix (e.g. models@EU-WEST-LOCAL/qwen2.5-0.5b)";
  // ':' would let the text carry a mount path or options past the parser.
  if (source.find(':') != std::string_view::npos) {
    return InvalidArgumentError(expected + ", without ':'");
  }
  const std::string spec = std::string(source) + std::string(kCheckMountPath);
  auto parsed = exec::ParseVolumeSpec(spec);
  if (parsed.ok()) return Status();
  // The parser speaks of volumes ("volume 'X:/m': what; expected ...:/mount/path..."): keep only
  // what is wrong, which is about the source part.
  std::string what = parsed.status().message();
  const std::string head = "volume '" + spec + "': ";
  if (what.starts_with(head)) what.erase(0, head.size());
  if (size_t syntax = what.find("; expected "); syntax != std::string::npos) what.erase(syntax);
  return InvalidArgumentError(expected + ": " + what);
}

Status BuildScaling(const ScalingArgs& args, Json& body) {
  if (args.replicas) {
    if (args.any_auto()) {
      return InvalidArgumentError(
          "--replicas excludes the --auto-* flags: a fixed count, or an autoscaling policy "
          "(--auto-min-replicas, --auto-max-replicas, ...)");
    }
    if (*args.replicas < 0) {
      return InvalidArgumentError("--replicas must be 0 or more, not " +
                                  std::to_string(*args.replicas));
    }
    body["replicas"] = *args.replicas;
    return Status();
  }
  if (!args.any_auto()) return Status();
  if (!args.auto_max_replicas) {
    return InvalidArgumentError(
        "--auto-max-replicas is needed with the other --auto-* flags (the autoscaling policy's "
        "upper bound)");
  }
  SOVAI_RETURN_IF_ERROR(CheckReplicaRange(args.auto_min_replicas, args.auto_max_replicas,
                                          "--auto-min-replicas", "--auto-max-replicas"));
  Json policy = Json::object();
  if (args.auto_min_replicas) policy["min_replicas"] = *args.auto_min_replicas;
  policy["max_replicas"] = *args.auto_max_replicas;
  if (!args.auto_resource_type.empty()) {
    std::string type = base::AsciiToUpper(args.auto_resource_type);
    if (type != "REQUESTS" && type != "CPU" && type != "RAM") {
      return InvalidArgumentError("--auto-resource-type must be REQUESTS, CPU or RAM, not '" +
                                  args.auto_resource_type + "'");
    }
    policy["resource_type"] = type;
  }
  if (!args.auto_threshold.empty()) {
    const std::string& text = args.auto_threshold;
    double threshold = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), threshold);
    if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(threshold) ||
        threshold <= 0) {
      return InvalidArgumentError(
          "--auto-resource-usage-threshold must be a number above 0 (requests in flight per "
          "replica, or percent of CPU or RAM), not '" +
          text + "'");
    }
    policy["threshold"] = threshold;
  }
  SOVAI_RETURN_IF_ERROR(
      CheckNonNegative(args.scale_up_window_s, "--auto-scale-up-window-s", kMaxDurationS));
  SOVAI_RETURN_IF_ERROR(
      CheckNonNegative(args.scale_down_window_s, "--auto-scale-down-window-s", kMaxDurationS));
  SOVAI_RETURN_IF_ERROR(CheckNonNegative(args.cooldown_s, "--auto-cooldown-s", kMaxDurationS));
  if (args.scale_up_window_s) policy["scale_up_window_s"] = *args.scale_up_window_s;
  if (args.scale_down_window_s) policy["scale_down_window_s"] = *args.scale_down_window_s;
  if (args.cooldown_s) policy["cooldown_s"] = *args.cooldown_s;
  body["autoscaling"] = std::move(policy);
  return Status();
}

base::Result<Json> BuildScaleBody(const ScalingArgs& args) {
  if (!args.replicas && !args.any_auto()) {
    return InvalidArgumentError(
        "give --replicas N, or an autoscaling policy with --auto-max-replicas B (and "
        "--auto-min-replicas A, ...)");
  }
  Json body = Json::object();
  SOVAI_RETURN_IF_ERROR(BuildScaling(args, body));
  return body;
}

namespace {

// --task: what a model app's server serves the model for (docs/engine.md).
base::Status AddTask(const std::string& task, bool has_model, Json& spec) {
  if (task.empty()) return base::Status::Ok();
  if (!has_model)
    return InvalidArgumentError("--task needs --model (an image runs its own server)");
  if (task != "generate" && task != "embed" && task != "rerank") {
    return InvalidArgumentError("--task must be generate, embed or rerank, not '" + task + "'");
  }
  spec["task"] = task;
  return base::Status::Ok();
}

}  // namespace

base::Result<Json> BuildAppSpec(const AppRunArgs& args, const EnvVars& local_env) {
  Json spec = Json::object();
  SOVAI_RETURN_IF_ERROR(CheckAppName(args.name, "--name"));
  spec["name"] = args.name;

  if (args.model.empty() == args.image.empty()) {
    return InvalidArgumentError(
        args.model.empty()
            ? "give --model bucket@REGION/prefix (a model to serve) or --image IMAGE (an HTTP "
              "server listening on $PORT)"
            : "--model excludes --image: an app serves a model or runs an image");
  }
  if (!args.base_model.empty() && args.model.empty()) {
    return InvalidArgumentError("--base-model needs --model (the adapter trained on it)");
  }
  SOVAI_RETURN_IF_ERROR(AddModel(args.model, args.base_model, spec));
  SOVAI_RETURN_IF_ERROR(AddTask(args.task, !args.model.empty(), spec));
  if (args.image.empty()) {
    if (args.port) return InvalidArgumentError("--port needs --image");
    if (!args.command.empty()) {
      return InvalidArgumentError(
          "a command after '--' needs --image (a model app runs the "
          "platform's server)");
    }
  } else {
    spec["image"] = args.image;
    if (!args.command.empty()) spec["command"] = args.command;
    if (args.port) {
      if (*args.port < 1 || *args.port > kMaxPort) {
        return InvalidArgumentError("--port must be 1 to " + std::to_string(kMaxPort) + ", not " +
                                    std::to_string(*args.port));
      }
      spec["port"] = *args.port;
    }
  }

  JobRunArgs shared;
  shared.flavor = args.flavor;
  shared.gpu_units = args.gpu_units;
  shared.cpu_units = args.cpu_units;
  shared.env = args.env;
  shared.labels = args.labels;
  SOVAI_RETURN_IF_ERROR(
      AddJobFields(shared, local_env, {"flavor", "units", "labels", "env"}, spec));

  SOVAI_RETURN_IF_ERROR(BuildScaling(args.scaling, spec));
  if (!args.probe_path.empty()) {
    SOVAI_RETURN_IF_ERROR(CheckProbePath(args.probe_path));
    spec["probe_path"] = args.probe_path;
  }
  if (args.unsecure_http) spec["unsecure_http"] = true;
  return spec;
}

base::Result<Json> BuildAppPatch(const AppUpdateArgs& args, const EnvVars& local_env) {
  Json patch = Json::object();
  if (!args.model.empty() && !args.image.empty()) {
    return InvalidArgumentError("--model excludes --image: an app serves a model or runs an image");
  }
  SOVAI_RETURN_IF_ERROR(AddModel(args.model, args.base_model, patch));
  if (!args.image.empty()) patch["image"] = args.image;
  if (!args.command.empty()) patch["command"] = args.command;
  if (!args.env.empty() || !args.labels.empty()) {
    JobRunArgs shared;
    shared.env = args.env;
    shared.labels = args.labels;
    SOVAI_RETURN_IF_ERROR(AddJobFields(shared, local_env, {"labels", "env"}, patch));
  }
  if (!args.probe_path.empty()) {
    SOVAI_RETURN_IF_ERROR(CheckProbePath(args.probe_path));
    patch["probe_path"] = args.probe_path;
  }
  if (args.unsecure_http) patch["unsecure_http"] = *args.unsecure_http;
  if (patch.empty()) {
    return InvalidArgumentError(
        "nothing to update: give --model, --base-model, --image, '-- COMMAND', --env, --label, "
        "--probe-path or --[no-]unsecure-http");
  }
  return patch;
}

base::Result<Json> BuildEndpointBody(const EndpointAddArgs& args) {
  Json body = Json::object();
  SOVAI_RETURN_IF_ERROR(CheckAppName(args.name, "--name"));
  body["name"] = args.name;
  if (args.model.empty()) {
    return InvalidArgumentError("missing --model bucket@REGION/prefix (the model to publish)");
  }
  SOVAI_RETURN_IF_ERROR(AddModel(args.model, args.base_model, body));
  SOVAI_RETURN_IF_ERROR(AddTask(args.task, true, body));

  JobRunArgs shared;
  shared.flavor = args.flavor;
  shared.gpu_units = args.gpu_units;
  shared.cpu_units = args.cpu_units;
  SOVAI_RETURN_IF_ERROR(AddJobFields(shared, {}, {"flavor", "units"}, body));

  SOVAI_RETURN_IF_ERROR(
      CheckReplicaRange(args.min_replicas, args.max_replicas, "--min-replicas", "--max-replicas"));
  if (args.min_replicas) body["min_replicas"] = *args.min_replicas;
  if (args.max_replicas) body["max_replicas"] = *args.max_replicas;

  if (!args.rate_limit.empty()) {
    const std::string usage =
        "--rate-limit must be N/min (requests per minute per project, N at "
        "least 1), e.g. 400/min, not '" +
        args.rate_limit + "'";
    std::string_view text = args.rate_limit;
    if (!text.ends_with("/min")) return InvalidArgumentError(usage);
    auto count = base::ParseUint64(text.substr(0, text.size() - 4));
    if (!count.ok() || *count < 1) return InvalidArgumentError(usage);
    body["rate_limit"] = args.rate_limit;
  }
  return body;
}

bool IsAppSettledState(std::string_view state) {
  return state == "FAILED" || state == "STOPPING" || state == "STOPPED" || state == "DELETING" ||
         state == "DELETED";
}

}  // namespace sovai::cli::client
