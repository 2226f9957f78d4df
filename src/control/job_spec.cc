#include "control/job_spec.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "base/check.h"
#include "base/strings.h"
#include "exec/volume_spec.h"
#include "registry/names.h"

namespace sovai::control {

void SpecErrorCollector::Add(std::string field, std::string message) {
  fields_.push_back({std::move(field), std::move(message)});
}

void SpecErrorCollector::Append(const SpecError& other) {
  fields_.insert(fields_.end(), other.fields.begin(), other.fields.end());
}

SpecError SpecErrorCollector::Finish(base::StatusCode code) {
  std::string summary;
  for (const FieldError& f : fields_) {
    if (!summary.empty()) summary += "; ";
    summary += f.field + ": " + f.message;
  }
  return SpecError{base::Status(code, summary), std::move(fields_)};
}

bool IsRegistryImage(std::string_view image) {
  return !image.empty() && image != kShellImage && !EngineSubcommandOf(image) &&
         !image.starts_with(kOciImagePrefix);
}

std::optional<std::string_view> EngineSubcommandOf(std::string_view image) {
  if (image == kFinetuneImage) return "train";
  if (image == kServeImage) return "serve";
  return std::nullopt;
}
namespace {

constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxImageBytes = 1024;
constexpr size_t kMaxCommandArgs = 1024;
constexpr size_t kMaxEnvVars = 256;
constexpr size_t kMaxArgBytes = 32 * 1024;          // one argument or one env value
constexpr size_t kMaxSpecStringBytes = 256 * 1024;  // command + env together
constexpr size_t kMaxLabels = 32;
constexpr size_t kMaxVolumes = 16;
constexpr int64_t kMaxTimeoutS = 30LL * 24 * 3600;
constexpr int kMaxPriority = 1000;
// Distributed jobs: the most nodes one job may span, and tasks on one node (one per GPU on the
// largest GPU servers, with room).
constexpr int64_t kMaxJobNodes = 256;
constexpr int64_t kMaxTasksPerNode = 64;
constexpr int kMaxRetries = 100;

// Environment names a job may not set: the sandbox owns them.
constexpr std::string_view kReservedEnv[] = {"CUDA_VISIBLE_DEVICES", "SOVAI_JOB_ID"};

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

std::string TypeName(const nlohmann::json& j) { return j.type_name(); }

}  // namespace

std::variant<JobSpec, SpecError> ParseJobSpec(const nlohmann::json& body, const SpecContext& ctx) {
  SpecErrorCollector errors;
  JobSpec spec;
  if (!body.is_object()) {
    errors.Add("(body)", "must be a JSON object, not " + TypeName(body));
    return errors.Finish();
  }
  static const std::set<std::string> kKnown = {
      "name",   "image",     "command",  "env",     "flavor",  "units", "volumes",
      "labels", "timeout_s", "priority", "restart", "network", "nodes", "tasks_per_node"};
  for (const auto& [key, value] : body.items()) {
    if (!kKnown.contains(key)) errors.Add(key, "is not a job spec field");
  }
  auto string_field = [&](const char* field, bool required, size_t max_bytes) -> std::string {
    auto it = body.find(field);
    if (it == body.end() || it->is_null()) {
      if (required) errors.Add(field, "is required");
      return "";
    }
    if (!it->is_string()) {
      errors.Add(field, "must be a string, not " + TypeName(*it));
      return "";
    }
    const std::string& s = it->get_ref<const std::string&>();
    if (s.size() > max_bytes || HasNul(s)) {
      errors.Add(field, "must be at most " + std::to_string(max_bytes) + " bytes, without NUL");
      return "";
    }
    return s;
  };
  auto int_field = [&](const char* field, int64_t lo, int64_t hi, int64_t fallback) -> int64_t {
    auto it = body.find(field);
    if (it == body.end() || it->is_null()) return fallback;
    if (!it->is_number_integer()) {
      errors.Add(field, "must be an integer, not " + TypeName(*it));
      return fallback;
    }
    int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) {
      errors.Add(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            "], not " + std::to_string(v));
      return fallback;
    }
    return v;
  };

  spec.name = string_field("name", false, kMaxNameBytes);
  spec.image = string_field("image", true, kMaxImageBytes);
  spec.flavor = string_field("flavor", true, 64);
  spec.units = static_cast<int>(int_field("units", 1, 4096, 1));
  spec.timeout_s = int_field("timeout_s", 1, kMaxTimeoutS, 0);
  spec.priority = static_cast<int>(int_field("priority", -kMaxPriority, kMaxPriority, 0));
  spec.nodes = static_cast<int>(int_field("nodes", 1, kMaxJobNodes, 1));
  spec.tasks_per_node = static_cast<int>(int_field("tasks_per_node", 0, kMaxTasksPerNode, 0));

  size_t string_bytes = 0;
  if (auto it = body.find("command"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) {
      errors.Add("command", "must be an array of strings, not " + TypeName(*it));
    } else if (it->size() > kMaxCommandArgs) {
      errors.Add("command", "has more than " + std::to_string(kMaxCommandArgs) + " arguments");
    } else {
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string field = "command[" + std::to_string(i) + "]";
        const nlohmann::json& arg = (*it)[i];
        if (!arg.is_string()) {
          errors.Add(field, "must be a string, not " + TypeName(arg));
          continue;
        }
        const std::string& s = arg.get_ref<const std::string&>();
        if (s.size() > kMaxArgBytes || HasNul(s)) {
          errors.Add(field, "must be at most 32 KiB, without NUL");
          continue;
        }
        string_bytes += s.size();
        spec.command.push_back(s);
      }
    }
  }
  if (auto it = body.find("env"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      errors.Add("env", "must be an object of strings, not " + TypeName(*it));
    } else if (it->size() > kMaxEnvVars) {
      errors.Add("env", "has more than " + std::to_string(kMaxEnvVars) + " variables");
    } else {
      for (const auto& [name, value] : it->items()) {
        const std::string field = "env." + name;
        if (!IsEnvName(name)) {
          errors.Add(field, "is not a valid variable name (letters, digits and _)");
        } else if (std::find(std::begin(kReservedEnv), std::end(kReservedEnv), name) !=
                   std::end(kReservedEnv)) {
          errors.Add(field, "is set by the platform");
        } else if (!value.is_string()) {
          errors.Add(field, "must be a string, not " + TypeName(value));
        } else if (value.get_ref<const std::string&>().size() > kMaxArgBytes ||
                   HasNul(value.get_ref<const std::string&>())) {
          errors.Add(field, "must be at most 32 KiB, without NUL");
        } else {
          string_bytes += name.size() + value.get_ref<const std::string&>().size();
          spec.env[name] = value.get<std::string>();
        }
      }
    }
  }
  if (string_bytes > kMaxSpecStringBytes) {
    errors.Add("command", "command and env together exceed 256 KiB");
  }
  if (auto it = body.find("labels"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      errors.Add("labels", "must be an object of strings, not " + TypeName(*it));
    } else if (it->size() > kMaxLabels) {
      errors.Add("labels", "has more than " + std::to_string(kMaxLabels) + " labels");
    } else {
      for (const auto& [key, value] : it->items()) {
        if (!value.is_string()) {
          errors.Add("labels." + key, "must be a string, not " + TypeName(value));
          continue;
        }
        if (auto st = ValidateLabel(key, value.get_ref<const std::string&>()); !st.ok()) {
          errors.Add("labels." + key, st.message());
          continue;
        }
        spec.labels[key] = value.get<std::string>();
      }
    }
  }
  if (auto it = body.find("network"); it != body.end() && !it->is_null()) {
    if (*it == "none") {
      spec.network = NetworkMode::kNone;
    } else if (*it == "host") {
      spec.network = NetworkMode::kHost;
    } else {
      errors.Add("network", "must be \"none\" or \"host\"");
    }
  }
  if (auto it = body.find("restart"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      errors.Add("restart",
                 "must be an object such as {\"policy\": \"on-failure\", "
                 "\"max_retries\": 2}");
    } else {
      auto policy = it->find("policy");
      if (policy == it->end() || *policy == "never") {
        spec.restart = RestartPolicy::kNever;
      } else if (*policy == "on-failure") {
        spec.restart = RestartPolicy::kOnFailure;
      } else {
        errors.Add("restart.policy", "must be \"never\" or \"on-failure\"");
      }
      auto retries = it->find("max_retries");
      if (retries != it->end()) {
        if (!retries->is_number_integer() || retries->get<int64_t>() < 0 ||
            retries->get<int64_t>() > kMaxRetries) {
          errors.Add("restart.max_retries", "must be an integer in [0, 100]");
        } else {
          spec.max_retries = retries->get<int>();
        }
      } else if (spec.restart == RestartPolicy::kOnFailure) {
        spec.max_retries = 1;
      }
      if (spec.restart == RestartPolicy::kNever && spec.max_retries > 0) {
        errors.Add("restart.max_retries", "needs \"policy\": \"on-failure\"");
      }
    }
  }
  std::vector<exec::VolumeSpec> volumes;
  if (auto it = body.find("volumes"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) {
      errors.Add("volumes", "must be an array of strings, not " + TypeName(*it));
    } else if (it->size() > kMaxVolumes) {
      errors.Add("volumes", "has more than " + std::to_string(kMaxVolumes) + " volumes");
    } else {
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string field = "volumes[" + std::to_string(i) + "]";
        const nlohmann::json& v = (*it)[i];
        if (!v.is_string()) {
          errors.Add(field, "must be a string, not " + TypeName(v));
          continue;
        }
        auto parsed = exec::ParseVolumeSpec(v.get_ref<const std::string&>());
        if (!parsed.ok()) {
          errors.Add(field, parsed.status().message());
          continue;
        }
        volumes.push_back(*parsed);
        spec.volumes.push_back(parsed->ToString());
      }
      if (volumes.size() == it->size()) {
        if (auto st = exec::CheckVolumes(volumes, ctx.region, ctx.other_regions, ctx.datastores);
            !st.ok()) {
          errors.Add("volumes", st.message());
        }
      }
    }
  }
  if (!spec.image.empty() && IsRegistryImage(spec.image)) {
    if (auto reference = registry::ParseImageReference(spec.image); !reference.ok()) {
      errors.Add("image", "unknown image '" + spec.image.substr(0, 200) + "': " +
                              reference.status().message() + "; use " + std::string(kShellImage) +
                              ", " + std::string(kFinetuneImage) + ", " + std::string(kServeImage) +
                              ", an image of this server's registry (HOST:PORT/project/name:tag, "
                              "project/name@sha256:<hex>, name:tag) or "
                              "oci:bucket@REGION/path/to/image.tar");
    }
  }
  if (spec.image == kShellImage && spec.command.empty()) {
    errors.Add("command", "is required with " + std::string(kShellImage));
  }
  if (spec.image.starts_with(kOciImagePrefix)) {
    // The archive is addressed like a volume: bucket@REGION/key.
    auto source = exec::ParseVolumeSpec(spec.image.substr(kOciImagePrefix.size()) + ":/image");
    if (!source.ok() || source->prefix.empty()) {
      errors.Add("image", "an OCI image is oci:bucket@REGION/path/to/image.tar");
    } else if (auto st =
                   exec::CheckVolumes({*source}, ctx.region, ctx.other_regions, ctx.datastores);
               !st.ok()) {
      errors.Add("image", st.message());
    }
  }
  if (!errors.empty()) return errors.Finish();

  // The flavor last: an unknown one is NotFound, and its unit count is checked against it.
  SOVAI_CHECK(ctx.flavors != nullptr);
  auto flavor = ctx.flavors->Find(spec.flavor);
  if (!flavor.ok()) {
    errors.Add("flavor", flavor.status().message());
    return errors.Finish(base::StatusCode::kNotFound);
  }
  if (auto request = RequestFor(**flavor, spec.units); !request.ok()) {
    errors.Add("units", request.status().message());
    return errors.Finish();
  }
  return spec;
}

nlohmann::json JobSpecToJson(const JobSpec& spec) {
  nlohmann::json j = {
      {"name", spec.name},
      {"image", spec.image},
      {"command", spec.command},
      {"env", spec.env},
      {"flavor", spec.flavor},
      {"units", spec.units},
      {"volumes", spec.volumes},
      {"labels", spec.labels},
      {"priority", spec.priority},
      {"network", spec.network == NetworkMode::kNone ? "none" : "host"},
      {"restart",
       {{"policy", spec.restart == RestartPolicy::kOnFailure ? "on-failure" : "never"},
        {"max_retries", spec.max_retries}}},
  };
  if (spec.timeout_s > 0) j["timeout_s"] = spec.timeout_s;
  if (spec.nodes > 1) j["nodes"] = spec.nodes;
  if (spec.tasks_per_node > 0) j["tasks_per_node"] = spec.tasks_per_node;
  return j;
}

}  // namespace sovai::control
