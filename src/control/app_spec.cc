#include "control/app_spec.h"

#include <cmath>
#include <set>

#include "control/limits.h"
#include "exec/volume_spec.h"
#include "registry/names.h"

namespace sovai::control {

namespace {

using Json = nlohmann::json;

constexpr std::string_view kMetricNames[] = {"REQUESTS", "CPU", "RAM"};

bool IsAppName(std::string_view name) {
  if (name.empty() || name.size() > kMaxAppNameBytes || name[0] < 'a' || name[0] > 'z') {
    return false;
  }
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

// A model location: bucket@REGION/prefix, addressed like a read-only volume.
void CheckModelLocation(const std::string& value, const char* field, const SpecContext& ctx,
                        SpecErrorCollector& errors) {
  auto parsed = exec::ParseVolumeSpec(value + ":/workspace/model");
  if (!parsed.ok()) {
    errors.Add(field, "must be bucket@REGION/prefix: " + parsed.status().message());
    return;
  }
  if (auto st = exec::CheckVolumes({*parsed}, ctx.region, ctx.other_regions, ctx.datastores);
      !st.ok())
    errors.Add(field, st.message());
}

std::optional<int64_t> IntMember(const Json& obj, const char* name, const std::string& field,
                                 int64_t lo, int64_t hi, SpecErrorCollector& errors) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
    errors.Add(field,
               "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return std::nullopt;
  }
  return it->get<int64_t>();
}

std::optional<AutoscalingSpec> ParseAutoscaling(const Json& j, SpecErrorCollector& errors) {
  if (!j.is_object()) {
    errors.Add("autoscaling",
               "must be an object such as {\"min_replicas\": 0, "
               "\"max_replicas\": 3}");
    return std::nullopt;
  }
  static const std::set<std::string> kKnown = {
      "min_replicas",      "max_replicas",        "resource_type", "threshold",
      "scale_up_window_s", "scale_down_window_s", "cooldown_s"};
  for (const auto& [key, value] : j.items()) {
    if (!kKnown.contains(key)) errors.Add("autoscaling." + key, "is not an autoscaling field");
  }
  AutoscalingSpec a;
  if (auto it = j.find("resource_type"); it != j.end() && !it->is_null()) {
    bool known = false;
    for (size_t i = 0; i < std::size(kMetricNames); ++i) {
      if (it->is_string() && it->get_ref<const std::string&>() == kMetricNames[i]) {
        a.metric = static_cast<ScalingMetric>(i);
        known = true;
      }
    }
    if (!known) errors.Add("autoscaling.resource_type", "must be REQUESTS, CPU or RAM");
  }
  a.threshold = a.metric == ScalingMetric::kRequests ? 4 : 75;
  if (auto it = j.find("threshold"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>()) ||
        (a.metric != ScalingMetric::kRequests && it->get<double>() > 100)) {
      errors.Add("autoscaling.threshold",
                 a.metric == ScalingMetric::kRequests
                     ? "must be a number > 0 (requests in flight per replica)"
                     : "must be a percentage in (0, 100]");
    } else {
      a.threshold = it->get<double>();
    }
  }
  a.min_replicas = static_cast<int>(
      IntMember(j, "min_replicas", "autoscaling.min_replicas", 0, kMaxAppReplicas, errors)
          .value_or(1));
  auto max = IntMember(j, "max_replicas", "autoscaling.max_replicas", 1, kMaxAppReplicas, errors);
  if (!max && !j.contains("max_replicas")) errors.Add("autoscaling.max_replicas", "is required");
  a.max_replicas = static_cast<int>(max.value_or(1));
  if (max && a.min_replicas > a.max_replicas) {
    errors.Add("autoscaling.min_replicas",
               "must not exceed max_replicas (" + std::to_string(a.max_replicas) + ")");
  }
  a.scale_up_window_s = IntMember(j, "scale_up_window_s", "autoscaling.scale_up_window_s", 0,
                                  kMaxScalingWindowS, errors)
                            .value_or(a.scale_up_window_s);
  a.scale_down_window_s = IntMember(j, "scale_down_window_s", "autoscaling.scale_down_window_s", 0,
                                    kMaxScalingWindowS, errors)
                              .value_or(a.scale_down_window_s);
  a.cooldown_s = IntMember(j, "cooldown_s", "autoscaling.cooldown_s", 0, kMaxScalingWindowS, errors)
                     .value_or(a.cooldown_s);
  return a;
}

// Validates what apps share with jobs (flavor and units, env, labels, command) by parsing them as
// the job spec of a replica: one set of rules, the same field names.
void CheckAsReplicaJob(const AppSpec& spec, const SpecContext& ctx, SpecErrorCollector& errors,
                       base::StatusCode* code) {
  Json job = {{"image", std::string(kServeImage)},
              {"flavor", spec.flavor},
              {"units", spec.units},
              {"env", spec.env},
              {"labels", spec.labels},
              {"command", spec.command}};
  auto parsed = ParseJobSpec(job, ctx);
  if (auto* error = std::get_if<SpecError>(&parsed)) {
    errors.Append(*error);
    if (error->status.code() == base::StatusCode::kNotFound) *code = base::StatusCode::kNotFound;
  }
}

std::variant<AppSpec, SpecError> Validate(AppSpec spec, const SpecContext& ctx,
                                          SpecErrorCollector errors) {
  if (!IsAppName(spec.name)) {
    errors.Add("name", "must be 1 to 63 characters of a-z, 0-9 and '-', starting with a letter");
  }
  if (spec.model.empty() == spec.image.empty()) {
    errors.Add(spec.model.empty() ? "model" : "image", "give exactly one of model and image");
  }
  if (!spec.model.empty()) CheckModelLocation(spec.model, "model", ctx, errors);
  if (!spec.base_model.empty()) {
    if (spec.model.empty()) errors.Add("base_model", "goes with model (an adapter's base)");
    CheckModelLocation(spec.base_model, "base_model", ctx, errors);
  }
  if (!spec.image.empty()) {
    if (EngineSubcommandOf(spec.image)) {
      errors.Add("image", "the engine images are chosen by the platform; give model instead");
    } else if (IsRegistryImage(spec.image) && !registry::ParseImageReference(spec.image).ok()) {
      errors.Add("image",
                 "must be an image of this server's registry (HOST:PORT/project/name:tag, "
                 "name@sha256:<hex>), oci:bucket@REGION/path/image.tar or " +
                     std::string(kShellImage) + ": " +
                     registry::ParseImageReference(spec.image).status().message());
    }
    if (spec.image == kShellImage && spec.command.empty()) {
      errors.Add("command", "is required with " + std::string(kShellImage));
    }
  } else if (!spec.command.empty()) {
    errors.Add("command", "goes with image (a model app runs sovai-engine serve)");
  }
  if (!spec.task.empty()) {
    if (spec.model.empty()) {
      errors.Add("task", "goes with model (what sovai-engine serve serves it for)");
    } else if (spec.task != "generate" && spec.task != "embed" && spec.task != "rerank") {
      errors.Add("task", "must be generate, embed or rerank");
    }
  }
  if (spec.port < 1 || spec.port > 65535) errors.Add("port", "must be in [1, 65535]");
  if (!spec.autoscaling && (spec.replicas < 0 || spec.replicas > kMaxAppReplicas)) {
    errors.Add("replicas", "must be in [0, " + std::to_string(kMaxAppReplicas) + "]");
  }
  if (spec.probe_path.empty() || spec.probe_path[0] != '/' ||
      spec.probe_path.size() > kMaxProbePathBytes ||
      spec.probe_path.find_first_of(" \r\n\t") != std::string::npos) {
    errors.Add("probe_path", "must be an absolute path such as /health");
  }
  for (const auto& [key, value] : spec.labels) {
    if (key.starts_with("sovai.")) errors.Add("labels." + key, "sovai.* labels are the platform's");
  }
  for (const auto& [name, value] : spec.env) {
    if (name == "PORT") errors.Add("env.PORT", "is set by the platform (each replica's port)");
  }
  base::StatusCode code = base::StatusCode::kInvalidArgument;
  CheckAsReplicaJob(spec, ctx, errors, &code);
  if (!errors.empty()) return errors.Finish(code);
  return spec;
}

// Reads the members a PATCH may change and the ones a create has, into `spec`.
void ReadMutable(const Json& body, AppSpec& spec, SpecErrorCollector& errors) {
  auto string_member = [&](const char* name, std::string& out) {
    auto it = body.find(name);
    if (it == body.end()) return;
    if (it->is_null()) {
      out.clear();
    } else if (!it->is_string() || it->get_ref<const std::string&>().size() > 1024) {
      errors.Add(name, "must be a string of at most 1024 bytes");
    } else {
      out = it->get<std::string>();
    }
  };
  auto string_map = [&](const char* name, std::map<std::string, std::string>& out) {
    auto it = body.find(name);
    if (it == body.end()) return;
    out.clear();
    if (it->is_null()) return;
    if (!it->is_object()) {
      errors.Add(name, "must be an object of strings");
      return;
    }
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string()) {
        errors.Add(std::string(name) + "." + key, "must be a string");
      } else {
        out[key] = value.get<std::string>();
      }
    }
  };
  string_member("model", spec.model);
  string_member("base_model", spec.base_model);
  string_member("task", spec.task);
  string_member("image", spec.image);
  string_member("probe_path", spec.probe_path);
  string_map("env", spec.env);
  string_map("labels", spec.labels);
  if (auto it = body.find("command"); it != body.end()) {
    spec.command.clear();
    if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        if (!(*it)[i].is_string()) {
          errors.Add("command[" + std::to_string(i) + "]", "must be a string");
        } else {
          spec.command.push_back((*it)[i].get<std::string>());
        }
      }
    } else if (!it->is_null()) {
      errors.Add("command", "must be an array of strings");
    }
  }
  if (auto it = body.find("unsecure_http"); it != body.end()) {
    if (!it->is_boolean()) {
      errors.Add("unsecure_http", "must be true or false");
    } else {
      spec.unsecure_http = it->get<bool>();
    }
  }
}

void ReadScaling(const Json& body, AppSpec& spec, SpecErrorCollector& errors) {
  auto replicas = body.find("replicas");
  auto autoscaling = body.find("autoscaling");
  const bool has_replicas = replicas != body.end() && !replicas->is_null();
  const bool has_auto = autoscaling != body.end() && !autoscaling->is_null();
  if (has_replicas && has_auto) {
    errors.Add("replicas", "give replicas or autoscaling, not both");
    return;
  }
  if (has_auto) {
    spec.autoscaling = ParseAutoscaling(*autoscaling, errors);
  } else if (has_replicas) {
    spec.autoscaling.reset();
    if (!replicas->is_number_integer()) {
      errors.Add("replicas", "must be an integer");
    } else {
      spec.replicas = replicas->get<int>();
    }
  }
}

void RejectUnknown(const Json& body, const std::set<std::string>& known,
                   SpecErrorCollector& errors) {
  for (const auto& [key, value] : body.items()) {
    if (!known.contains(key)) errors.Add(key, "is not a field here");
  }
}

}  // namespace

std::string_view ScalingMetricName(ScalingMetric metric) {
  return kMetricNames[static_cast<int>(metric)];
}

std::variant<AppSpec, SpecError> ParseAppSpec(const Json& body, const SpecContext& ctx) {
  SpecErrorCollector errors;
  if (!body.is_object()) {
    errors.Add("(body)", "must be a JSON object");
    return errors.Finish();
  }
  RejectUnknown(
      body,
      {"name", "model", "base_model", "task", "image", "command", "port", "flavor", "units",
       "replicas", "autoscaling", "probe_path", "unsecure_http", "labels", "env"},
      errors);
  AppSpec spec;
  if (auto it = body.find("name"); it != body.end() && it->is_string()) {
    spec.name = it->get<std::string>();
  }
  if (auto it = body.find("flavor"); it != body.end() && it->is_string()) {
    spec.flavor = it->get<std::string>();
  } else {
    errors.Add("flavor", "is required");
  }
  spec.units = static_cast<int>(IntMember(body, "units", "units", 1, 4096, errors).value_or(1));
  spec.port = static_cast<int>(IntMember(body, "port", "port", 1, 65535, errors).value_or(8080));
  ReadMutable(body, spec, errors);
  ReadScaling(body, spec, errors);
  return Validate(std::move(spec), ctx, std::move(errors));
}

std::variant<AppSpec, SpecError> PatchAppSpec(const AppSpec& spec, const Json& patch,
                                              const SpecContext& ctx, bool* rolling) {
  SpecErrorCollector errors;
  if (!patch.is_object()) {
    errors.Add("(body)", "must be a JSON object");
    return errors.Finish();
  }
  RejectUnknown(
      patch,
      {"model", "base_model", "image", "command", "env", "labels", "probe_path", "unsecure_http"},
      errors);
  AppSpec next = spec;
  ReadMutable(patch, next, errors);
  *rolling = next.model != spec.model || next.base_model != spec.base_model ||
             next.image != spec.image || next.command != spec.command || next.env != spec.env;
  return Validate(std::move(next), ctx, std::move(errors));
}

std::variant<AppSpec, SpecError> ScaleAppSpec(const AppSpec& spec, const Json& body,
                                              const SpecContext& ctx) {
  SpecErrorCollector errors;
  if (!body.is_object() || (!body.contains("replicas") && !body.contains("autoscaling"))) {
    errors.Add("(body)", "must be {\"replicas\": N} or {\"autoscaling\": {...}}");
    return errors.Finish();
  }
  RejectUnknown(body, {"replicas", "autoscaling"}, errors);
  AppSpec next = spec;
  ReadScaling(body, next, errors);
  return Validate(std::move(next), ctx, std::move(errors));
}

Json AppSpecToJson(const AppSpec& spec) {
  Json j = {{"name", spec.name},
            {"flavor", spec.flavor},
            {"units", spec.units},
            {"probe_path", spec.probe_path},
            {"unsecure_http", spec.unsecure_http},
            {"labels", spec.labels},
            {"env", spec.env}};
  if (!spec.model.empty()) j["model"] = spec.model;
  if (!spec.base_model.empty()) j["base_model"] = spec.base_model;
  if (!spec.task.empty()) j["task"] = spec.task;
  if (!spec.image.empty()) {
    j["image"] = spec.image;
    j["command"] = spec.command;
    j["port"] = spec.port;
  }
  if (spec.autoscaling) {
    const AutoscalingSpec& a = *spec.autoscaling;
    j["autoscaling"] = {{"min_replicas", a.min_replicas},
                        {"max_replicas", a.max_replicas},
                        {"resource_type", std::string(ScalingMetricName(a.metric))},
                        {"threshold", a.threshold},
                        {"scale_up_window_s", a.scale_up_window_s},
                        {"scale_down_window_s", a.scale_down_window_s},
                        {"cooldown_s", a.cooldown_s}};
  } else {
    j["replicas"] = spec.replicas;
  }
  return j;
}

}  // namespace sovai::control
