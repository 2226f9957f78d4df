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

namespace {

// One spec's validation, step by step; each step adds the errors it finds and reads what is
// valid into `spec`.
class JobSpecReader {
 public:
  JobSpecReader(const nlohmann::json& body, const SpecContext& ctx) : body_(body), ctx_(ctx) {}

  std::variant<JobSpec, SpecError> Read() {
    if (!body_.is_object()) {
      errors_.Add("(body)", "must be a JSON object, not " + TypeName(body_));
      return errors_.Finish();
    }
    RejectUnknownFields();
    ReadScalars();
    ReadCommand();
    ReadEnv();
    if (string_bytes_ > kMaxSpecStringBytes) {
      errors_.Add("command", "command and env together exceed 256 KiB");
    }
    ReadLabels();
    ReadNetwork();
    ReadRestart();
    ReadVolumes();
    CheckImage();
    if (!errors_.empty()) return errors_.Finish();
    return CheckFlavor();
  }

 private:
  void RejectUnknownFields() {
    static const std::set<std::string> kKnown = {
        "name",   "image",     "command",  "env",     "flavor",  "units", "volumes",
        "labels", "timeout_s", "priority", "restart", "network", "nodes", "tasks_per_node"};
    for (const auto& [key, value] : body_.items()) {
      if (!kKnown.contains(key)) errors_.Add(key, "is not a job spec field");
    }
  }

  // `field` when it is a string of at most `max_bytes` without NUL; "" (and an error) otherwise.
  std::string StringField(const char* field, bool required, size_t max_bytes) {
    auto it = body_.find(field);
    if (it == body_.end() || it->is_null()) {
      if (required) errors_.Add(field, "is required");
      return "";
    }
    if (!it->is_string()) {
      errors_.Add(field, "must be a string, not " + TypeName(*it));
      return "";
    }
    const std::string& s = it->get_ref<const std::string&>();
    if (s.size() > max_bytes || HasNul(s)) {
      errors_.Add(field, "must be at most " + std::to_string(max_bytes) + " bytes, without NUL");
      return "";
    }
    return s;
  }

  // `field` when it is an integer in [lo, hi]; `fallback` when absent (or, with an error, bad).
  int64_t IntField(const char* field, int64_t lo, int64_t hi, int64_t fallback) {
    auto it = body_.find(field);
    if (it == body_.end() || it->is_null()) return fallback;
    if (!it->is_number_integer()) {
      errors_.Add(field, "must be an integer, not " + TypeName(*it));
      return fallback;
    }
    int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) {
      errors_.Add(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                             "], not " + std::to_string(v));
      return fallback;
    }
    return v;
  }

  // The field's value when present and not null.
  const nlohmann::json* Present(const char* field) const {
    auto it = body_.find(field);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }

  void ReadScalars() {
    spec_.name = StringField("name", false, kMaxNameBytes);
    spec_.image = StringField("image", true, kMaxImageBytes);
    spec_.flavor = StringField("flavor", true, 64);
    spec_.units = static_cast<int>(IntField("units", 1, 4096, 1));
    spec_.timeout_s = IntField("timeout_s", 1, kMaxTimeoutS, 0);
    spec_.priority = static_cast<int>(IntField("priority", -kMaxPriority, kMaxPriority, 0));
    spec_.nodes = static_cast<int>(IntField("nodes", 1, kMaxJobNodes, 1));
    spec_.tasks_per_node = static_cast<int>(IntField("tasks_per_node", 0, kMaxTasksPerNode, 0));
  }

  void ReadCommand() {
    const nlohmann::json* command = Present("command");
    if (command == nullptr) return;
    if (!command->is_array()) {
      errors_.Add("command", "must be an array of strings, not " + TypeName(*command));
      return;
    }
    if (command->size() > kMaxCommandArgs) {
      errors_.Add("command", "has more than " + std::to_string(kMaxCommandArgs) + " arguments");
      return;
    }
    for (size_t i = 0; i < command->size(); ++i) {
      const std::string field = "command[" + std::to_string(i) + "]";
      const nlohmann::json& arg = (*command)[i];
      if (!arg.is_string()) {
        errors_.Add(field, "must be a string, not " + TypeName(arg));
        continue;
      }
      const std::string& s = arg.get_ref<const std::string&>();
      if (s.size() > kMaxArgBytes || HasNul(s)) {
        errors_.Add(field, "must be at most 32 KiB, without NUL");
        continue;
      }
      string_bytes_ += s.size();
      spec_.command.push_back(s);
    }
  }

  void ReadEnv() {
    const nlohmann::json* env = Present("env");
    if (env == nullptr) return;
    if (!env->is_object()) {
      errors_.Add("env", "must be an object of strings, not " + TypeName(*env));
      return;
    }
    if (env->size() > kMaxEnvVars) {
      errors_.Add("env", "has more than " + std::to_string(kMaxEnvVars) + " variables");
      return;
    }
    for (const auto& [name, value] : env->items()) {
      const std::string field = "env." + name;
      if (!IsEnvName(name)) {
        errors_.Add(field, "is not a valid variable name (letters, digits and _)");
      } else if (std::find(std::begin(kReservedEnv), std::end(kReservedEnv), name) !=
                 std::end(kReservedEnv)) {
        errors_.Add(field, "is set by the platform");
      } else if (!value.is_string()) {
        errors_.Add(field, "must be a string, not " + TypeName(value));
      } else if (value.get_ref<const std::string&>().size() > kMaxArgBytes ||
                 HasNul(value.get_ref<const std::string&>())) {
        errors_.Add(field, "must be at most 32 KiB, without NUL");
      } else {
        string_bytes_ += name.size() + value.get_ref<const std::string&>().size();
        spec_.env[name] = value.get<std::string>();
      }
    }
  }

  void ReadLabels() {
    const nlohmann::json* labels = Present("labels");
    if (labels == nullptr) return;
    if (!labels->is_object()) {
      errors_.Add("labels", "must be an object of strings, not " + TypeName(*labels));
      return;
    }
    if (labels->size() > kMaxLabels) {
      errors_.Add("labels", "has more than " + std::to_string(kMaxLabels) + " labels");
      return;
    }
    for (const auto& [key, value] : labels->items()) {
      if (!value.is_string()) {
        errors_.Add("labels." + key, "must be a string, not " + TypeName(value));
        continue;
      }
      if (auto st = ValidateLabel(key, value.get_ref<const std::string&>()); !st.ok()) {
        errors_.Add("labels." + key, st.message());
        continue;
      }
      spec_.labels[key] = value.get<std::string>();
    }
  }

  void ReadNetwork() {
    const nlohmann::json* network = Present("network");
    if (network == nullptr) return;
    if (*network == "none") {
      spec_.network = NetworkMode::kNone;
    } else if (*network == "host") {
      spec_.network = NetworkMode::kHost;
    } else {
      errors_.Add("network", "must be \"none\" or \"host\"");
    }
  }

  void ReadRestart() {
    const nlohmann::json* restart = Present("restart");
    if (restart == nullptr) return;
    if (!restart->is_object()) {
      errors_.Add("restart",
                  "must be an object such as {\"policy\": \"on-failure\", "
                  "\"max_retries\": 2}");
      return;
    }
    auto policy = restart->find("policy");
    if (policy == restart->end() || *policy == "never") {
      spec_.restart = RestartPolicy::kNever;
    } else if (*policy == "on-failure") {
      spec_.restart = RestartPolicy::kOnFailure;
    } else {
      errors_.Add("restart.policy", "must be \"never\" or \"on-failure\"");
    }
    auto retries = restart->find("max_retries");
    if (retries != restart->end()) {
      if (!retries->is_number_integer() || retries->get<int64_t>() < 0 ||
          retries->get<int64_t>() > kMaxRetries) {
        errors_.Add("restart.max_retries", "must be an integer in [0, 100]");
      } else {
        spec_.max_retries = retries->get<int>();
      }
    } else if (spec_.restart == RestartPolicy::kOnFailure) {
      spec_.max_retries = 1;
    }
    if (spec_.restart == RestartPolicy::kNever && spec_.max_retries > 0) {
      errors_.Add("restart.max_retries", "needs \"policy\": \"on-failure\"");
    }
  }

  void ReadVolumes() {
    const nlohmann::json* list = Present("volumes");
    if (list == nullptr) return;
    if (!list->is_array()) {
      errors_.Add("volumes", "must be an array of strings, not " + TypeName(*list));
      return;
    }
    if (list->size() > kMaxVolumes) {
      errors_.Add("volumes", "has more than " + std::to_string(kMaxVolumes) + " volumes");
      return;
    }
    std::vector<exec::VolumeSpec> volumes;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string field = "volumes[" + std::to_string(i) + "]";
      const nlohmann::json& v = (*list)[i];
      if (!v.is_string()) {
        errors_.Add(field, "must be a string, not " + TypeName(v));
        continue;
      }
      auto parsed = exec::ParseVolumeSpec(v.get_ref<const std::string&>());
      if (!parsed.ok()) {
        errors_.Add(field, parsed.status().message());
        continue;
      }
      volumes.push_back(*parsed);
      spec_.volumes.push_back(parsed->ToString());
    }
    // Mount points and regions are checked together, once every volume parsed.
    if (volumes.size() != list->size()) return;
    if (auto st = exec::CheckVolumes(volumes, ctx_.region, ctx_.other_regions, ctx_.datastores);
        !st.ok()) {
      errors_.Add("volumes", st.message());
    }
  }

  void CheckImage() {
    const std::string& image = spec_.image;
    if (!image.empty() && IsRegistryImage(image)) {
      if (auto reference = registry::ParseImageReference(image); !reference.ok()) {
        errors_.Add("image", "unknown image '" + image.substr(0, 200) +
                                 "': " + reference.status().message() + "; use " +
                                 std::string(kShellImage) + ", " + std::string(kFinetuneImage) +
                                 ", " + std::string(kServeImage) +
                                 ", an image of this server's registry (HOST:PORT/project/"
                                 "name:tag, project/name@sha256:<hex>, name:tag) or "
                                 "oci:bucket@REGION/path/to/image.tar");
      }
    }
    if (image == kShellImage && spec_.command.empty()) {
      errors_.Add("command", "is required with " + std::string(kShellImage));
    }
    if (image.starts_with(kOciImagePrefix)) {
      // The archive is addressed like a volume: bucket@REGION/key.
      auto source = exec::ParseVolumeSpec(image.substr(kOciImagePrefix.size()) + ":/image");
      if (!source.ok() || source->prefix.empty()) {
        errors_.Add("image", "an OCI image is oci:bucket@REGION/path/to/image.tar");
      } else if (auto st = exec::CheckVolumes({*source}, ctx_.region, ctx_.other_regions,
                                              ctx_.datastores);
                 !st.ok()) {
        errors_.Add("image", st.message());
      }
    }
  }

  // The flavor last: an unknown one is NotFound, and its unit count is checked against it.
  std::variant<JobSpec, SpecError> CheckFlavor() {
    SOVAI_CHECK(ctx_.flavors != nullptr);
    auto flavor = ctx_.flavors->Find(spec_.flavor);
    if (!flavor.ok()) {
      errors_.Add("flavor", flavor.status().message());
      return errors_.Finish(base::StatusCode::kNotFound);
    }
    if (auto request = RequestFor(**flavor, spec_.units); !request.ok()) {
      errors_.Add("units", request.status().message());
      return errors_.Finish();
    }
    return std::move(spec_);
  }

  const nlohmann::json& body_;
  const SpecContext& ctx_;
  SpecErrorCollector errors_;
  JobSpec spec_;
  size_t string_bytes_ = 0;  // command and env together
};

}  // namespace

std::variant<JobSpec, SpecError> ParseJobSpec(const nlohmann::json& body, const SpecContext& ctx) {
  return JobSpecReader(body, ctx).Read();
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
