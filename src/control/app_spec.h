// What a user asks for when creating an app (`POST /v1/apps`, `sovai app run`), parsed from JSON
// and validated before anything starts (docs/api/apps.md). Errors name the field, as job specs do.
//
//   {"name": "support-bot", "model": "demo@EU-WEST-LOCAL/output",
//    "base_model": "demo@EU-WEST-LOCAL/base", "flavor": "ai1-1-cpu", "units": 2,
//    "autoscaling": {"min_replicas": 0, "max_replicas": 3, "resource_type": "REQUESTS",
//                    "threshold": 4, "cooldown_s": 300},
//    "labels": {"team": "support"}}
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "control/job_spec.h"

namespace sovai::control {

enum class ScalingMetric : uint8_t { kRequests, kCpu, kRam };
std::string_view ScalingMetricName(ScalingMetric metric);  // "REQUESTS", "CPU", "RAM"

struct AutoscalingSpec {
  int min_replicas = 1;
  int max_replicas = 1;
  ScalingMetric metric = ScalingMetric::kRequests;
  double threshold = 4;
  int64_t scale_up_window_s = 0;
  int64_t scale_down_window_s = 60;
  int64_t cooldown_s = 300;
  bool operator==(const AutoscalingSpec&) const = default;
};

struct AppSpec {
  std::string name;
  std::string model;       // bucket@REGION/prefix, or "" with `image`
  std::string base_model;  // bucket@REGION/prefix of the adapter's base, or ""
  // With `model`: what sovai-engine serve serves it for ("generate", "embed", "rerank"); "":
  // the engine decides (embed for a sentence-transformers embedding model, else generate).
  std::string task;
  std::string image;  // with `model` empty: oci:... or sovai/shell
  std::vector<std::string> command;
  int port = 8080;
  std::string flavor;
  int units = 1;
  int replicas = 1;  // when `autoscaling` is empty
  std::optional<AutoscalingSpec> autoscaling;
  std::string probe_path = "/health";
  bool unsecure_http = false;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> env;
  bool operator==(const AppSpec&) const = default;
};

// The label every replica job of an app carries: sovai.app=<app id>.
inline constexpr std::string_view kAppLabel = "sovai.app";

// Parses and validates a whole spec. Unknown flavor: NotFound naming "flavor".
std::variant<AppSpec, SpecError> ParseAppSpec(const nlohmann::json& body, const SpecContext& ctx);

// Applies `PATCH /v1/apps/{app}` (model, base_model, image, command, env, labels, probe_path,
// unsecure_http) to `spec` and validates the result. `rolling` is set when the replicas must be
// replaced (model, base_model, image, command or env changed).
std::variant<AppSpec, SpecError> PatchAppSpec(const AppSpec& spec, const nlohmann::json& patch,
                                              const SpecContext& ctx, bool* rolling);

// `{"replicas": N}` or `{"autoscaling": {...}}` → the spec with that scaling.
std::variant<AppSpec, SpecError> ScaleAppSpec(const AppSpec& spec, const nlohmann::json& body,
                                              const SpecContext& ctx);

nlohmann::json AppSpecToJson(const AppSpec& spec);

}  // namespace sovai::control
