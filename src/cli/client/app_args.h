// `sovai app` and `sovai endpoint` flags → the JSON bodies of the apps API (docs/api/apps.md):
// the spec of POST /v1/apps, the scale body of POST /v1/apps/{app}/scale, the patch of
// PATCH /v1/apps/{app} and the body of POST /v1/endpoints. Everything is checked locally first so
// that a typo is a usage error (exit 2) naming the flag, not a round trip; the server validates
// everything again.
//
//   AppRunArgs args;  // filled by the flag parser
//   SOVAI_ASSIGN_OR_RETURN(nlohmann::json spec, BuildAppSpec(args, vars));
//
// Errors are InvalidArgument whose message names the flag and says what is wrong.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "cli/client/config.h"

namespace sovai::cli::client {

// A fixed replica count or an autoscaling policy: the flags shared by `app run` and `app scale`.
// Every `auto_*` member belongs to the policy; none is allowed with `replicas`.
struct ScalingArgs {
  std::optional<int64_t> replicas;             // --replicas N
  std::optional<int64_t> auto_min_replicas;    // --auto-min-replicas A
  std::optional<int64_t> auto_max_replicas;    // --auto-max-replicas B
  std::string auto_resource_type;              // --auto-resource-type, "" = the server's default
  std::string auto_threshold;                  // --auto-resource-usage-threshold T, "" = default
  std::optional<int64_t> scale_up_window_s;    // --auto-scale-up-window-s S
  std::optional<int64_t> scale_down_window_s;  // --auto-scale-down-window-s S
  std::optional<int64_t> cooldown_s;           // --auto-cooldown-s S

  // Whether any --auto-* flag was given.
  bool any_auto() const;
};

struct AppRunArgs {
  std::string name;
  std::string model;                 // --model bucket@REGION/prefix
  std::string base_model;            // --base-model bucket@REGION/prefix
  std::string task;                  // --task generate|embed|rerank, with --model only
  std::string image;                 // --image
  std::vector<std::string> command;  // after '--', with --image only
  std::optional<int64_t> port;       // --port, with --image only
  std::string flavor;                // "" = kDefaultCpuFlavor (not allowed with --gpu)
  std::optional<int64_t> gpu_units;  // --gpu N
  std::optional<int64_t> cpu_units;  // --cpu N
  ScalingArgs scaling;
  std::string probe_path;  // "" = the server's default (/health)
  bool unsecure_http = false;
  std::vector<std::string> labels;  // --label K=V
  std::vector<std::string> env;     // --env K=V, or K to pass the local value
};

struct AppUpdateArgs {
  std::string model;
  std::string base_model;
  std::string image;
  std::vector<std::string> command;   // after '--'; needs --image or an image app
  std::vector<std::string> env;       // replaces the app's env
  std::vector<std::string> labels;    // replaces the app's labels
  std::string probe_path;             // "" = unchanged
  std::optional<bool> unsecure_http;  // --unsecure-http / --no-unsecure-http
};

struct EndpointAddArgs {
  std::string name;
  std::string model;
  std::string base_model;
  std::string task;    // --task generate|embed|rerank; "" = the engine decides
  std::string flavor;  // "" = kDefaultCpuFlavor (not allowed with --gpu)
  std::optional<int64_t> gpu_units;
  std::optional<int64_t> cpu_units;
  std::optional<int64_t> min_replicas;
  std::optional<int64_t> max_replicas;
  std::string rate_limit;  // "400/min", "" = the server's default
};

// The POST /v1/apps spec. Errors: a missing or malformed --name; neither or both of --model and
// --image; --base-model without --model; --port or a command without --image; a port outside
// 1..65535; a malformed --model/--base-model (see CheckModelSource); the flavor and unit rules of
// `job run` (--gpu with --cpu, --gpu without --flavor, units < 1); malformed or duplicate
// --env/--label; a --probe-path not starting with '/'; and every error of BuildScaling.
base::Result<nlohmann::json> BuildAppSpec(const AppRunArgs& args, const EnvVars& local_env);

// Adds "replicas" or "autoscaling" to `body` (nothing when no scaling flag was given). Errors:
// --replicas with an --auto-* flag; an --auto-* flag without --auto-max-replicas; a replica count
// below 0 (min) or 1 (max), or max below min; a resource type other than REQUESTS, CPU or RAM
// (any case); a threshold that is not a number above 0; a window or cooldown below 0 or above
// kMaxDurationS.
base::Status BuildScaling(const ScalingArgs& args, nlohmann::json& body);

// The POST /v1/apps/{app}/scale body: BuildScaling, and InvalidArgument when no scaling flag was
// given.
base::Result<nlohmann::json> BuildScaleBody(const ScalingArgs& args);

// The PATCH /v1/apps/{app} body. Errors: no field to change; --model with --image; the checks of
// BuildAppSpec on the fields given.
base::Result<nlohmann::json> BuildAppPatch(const AppUpdateArgs& args, const EnvVars& local_env);

// The POST /v1/endpoints body. Errors: the name, model, flavor and unit checks of BuildAppSpec;
// --min-replicas below 0, --max-replicas below 1 or below --min-replicas; a --rate-limit that is
// not N/min with N ≥ 1.
base::Result<nlohmann::json> BuildEndpointBody(const EndpointAddArgs& args);

// An app or endpoint name: 1..63 characters of a-z, 0-9 and '-', starting with a letter.
// InvalidArgument naming `flag` otherwise.
base::Status CheckAppName(std::string_view name, std::string_view flag);

// A model source `bucket@REGION[/prefix]` (a bucket prefix synced into the replicas), checked
// with the volume-spec parser of the executor. InvalidArgument naming `flag` otherwise.
base::Status CheckModelSource(std::string_view source, std::string_view flag);

// Whether an app in `state` can no longer become RUNNING without a command (FAILED, STOPPING,
// STOPPED, DELETING, DELETED): `app run --wait` gives up on it.
bool IsAppSettledState(std::string_view state);

}  // namespace sovai::cli::client
