// What a user asks for when submitting a job (`POST /v1/jobs`, `sovai job run`), parsed from JSON
// and validated before anything is queued. Every error names the field, so the REST layer turns it
// into a problem+json `errors: [{field, message}]` entry.
//
//   {"name": "finetune-1", "image": "sovai/shell", "command": ["python3", "train.py"],
//    "env": {"EPOCHS": "3"}, "flavor": "ai1-1-cpu", "units": 2,
//    "volumes": ["data@EU-WEST-LOCAL/ds:/workspace/data:ro",
//                "data@EU-WEST-LOCAL/out:/workspace/output:rw"],
//    "labels": {"team": "nlp"}, "timeout_s": 3600, "priority": 0,
//    "restart": {"policy": "on-failure", "max_retries": 2}, "network": "none"}
//
// Only `image` and `flavor` are required. Volumes are kept as written (the executor parses them
// with exec::ParseVolumeSpec, which also validates them here).
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

#include "base/status.h"
#include "control/flavors.h"
#include "control/labels.h"
#include "control/problem.h"

namespace sovai::control {

// Built-in images run on the host's root filesystem (read-only); `oci:` images name an image
// archive in a bucket: `oci:bucket@REGION/path/to/image.tar`; every other image is a reference to
// the server's own registry (registry/names.h ParseImageReference: HOST:PORT/project/name:tag,
// ...@sha256:<hex>, project/name:tag or a bare name:tag of the submitting project), resolved to a
// digest at submission (jobs.h).
inline constexpr std::string_view kShellImage = "sovai/shell";
// The ML engine's images: the job's command is the arguments of `sovai-engine train` / `serve`.
inline constexpr std::string_view kFinetuneImage = "sovai/finetune";
inline constexpr std::string_view kServeImage = "sovai/serve";
inline constexpr std::string_view kOciImagePrefix = "oci:";

// The sovai-engine subcommand a built-in engine image runs ("train", "serve"); nullopt for
// every other image.
std::optional<std::string_view> EngineSubcommandOf(std::string_view image);
// Whether `image` is a registry reference: neither a built-in image nor an oci: archive (its
// syntax is checked by ParseJobSpec).
bool IsRegistryImage(std::string_view image);

enum class RestartPolicy : uint8_t { kNever, kOnFailure };
enum class NetworkMode : uint8_t { kNone, kHost };

struct JobSpec {
  std::string name;
  std::string image;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string flavor;
  int units = 1;
  std::vector<std::string> volumes;
  std::map<std::string, std::string> labels;
  int64_t timeout_s = 0;  // 0: the server's default
  int priority = 0;
  RestartPolicy restart = RestartPolicy::kNever;
  int max_retries = 0;  // for kOnFailure
  NetworkMode network = NetworkMode::kHost;
  // Distributed jobs (the Slurm executor): nodes of the allocation, and tasks on each (0 = one
  // per GPU, or one for a CPU flavor). The local executor runs only nodes 1, tasks_per_node <= 1.
  int nodes = 1;
  int tasks_per_node = 0;
};

// A spec that failed validation: InvalidArgument (bad fields) or NotFound (unknown flavor), with
// every field error found (FieldError::field is a JSON path such as "volumes[1]" or "env.PATH").
struct SpecError {
  base::Status status;
  std::vector<FieldError> fields;
};

// Gathers the field errors of one spec as validation finds them, then makes the SpecError: its
// status carries `code` and every error joined ("name: is required; units: must be ...").
// Shared by the job, app and notebook specs so that all three report problems alike.
class SpecErrorCollector {
 public:
  void Add(std::string field, std::string message);
  // Adds the field errors of another spec's failure (a nested one, validated by its own rules).
  void Append(const SpecError& other);
  bool empty() const { return fields_.empty(); }
  SpecError Finish(base::StatusCode code = base::StatusCode::kInvalidArgument);

 private:
  std::vector<FieldError> fields_;
};

// Parses and validates a job spec against the flavor catalog, the regions the server knows and
// the datastores of the submitting project. Returns the spec or every problem found. A volume of
// a name that is neither a region the server knows nor a datastore of the project is invalid
// here; whether the project may mount a known other region is the data-residency rule
// (regions.h), checked at admission.
struct SpecContext {
  const FlavorCatalog* flavors = nullptr;
  std::string region;                      // the server's region
  std::vector<std::string> other_regions;  // the other regions it knows (--regions)
  // The aliases of the project's datastores (datastores.h): volumes may name them as regions.
  std::vector<std::string> datastores = {};
};
std::variant<JobSpec, SpecError> ParseJobSpec(const nlohmann::json& body, const SpecContext& ctx);

nlohmann::json JobSpecToJson(const JobSpec& spec);

}  // namespace sovai::control
