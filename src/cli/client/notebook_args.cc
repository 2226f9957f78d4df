#include "cli/client/notebook_args.h"

#include "cli/client/app_args.h"
#include "cli/client/job_args.h"
#include "control/notebook_spec.h"

namespace sovai::cli::client {

using base::InvalidArgumentError;
using Json = nlohmann::json;

base::Result<Json> BuildNotebookSpec(const NotebookRunArgs& args, const EnvVars& local_env) {
  Json spec = Json::object();
  if (!args.name.empty()) {
    SOVAI_RETURN_IF_ERROR(CheckAppName(args.name, "--name"));
    spec["name"] = args.name;
  }
  if (args.editor != control::kJupyterEditor && args.editor != control::kVscodeEditor) {
    return InvalidArgumentError("--editor '" + args.editor +
                                "' is not an editor; use --editor jupyter or --editor vscode");
  }
  spec["editor"] = args.editor;
  // The flavor, units, volume, env and label rules are job run's: checked on a placeholder job,
  // so `notebook run` and `job run` accept and refuse exactly the same values.
  JobRunArgs job;
  job.flavor = args.flavor;
  job.gpu_units = args.gpu_units;
  job.cpu_units = args.cpu_units;
  job.volumes = args.volumes;
  job.labels = args.labels;
  job.env = args.env;
  // The engine images by name: the client links the spec constants, not the spec's parser.
  if (args.image == control::kFinetuneImage || args.image == control::kServeImage) {
    return InvalidArgumentError("--image " + args.image +
                                " runs jobs and apps, not notebooks; give an image with "
                                "Jupyter (or code-server) in it, or none for the host's");
  }
  job.image = args.image.empty() ? std::string(control::kShellImage) : args.image;
  job.command = {std::string(control::kJupyterProgram)};
  SOVAI_ASSIGN_OR_RETURN(Json checked, BuildJobSpec(job, local_env));
  if (!args.image.empty()) spec["image"] = checked["image"];
  for (const char* field : {"flavor", "units", "volumes", "labels", "env"}) {
    if (auto it = checked.find(field); it != checked.end()) spec[field] = *it;
  }
  if (!args.idle_timeout.empty()) {
    if (args.idle_timeout == "0" || args.idle_timeout == "never") {
      spec["idle_timeout_s"] = 0;
    } else {
      auto seconds = ParseDuration(args.idle_timeout);
      if (!seconds.ok()) return seconds.status().WithContext("--idle-timeout");
      if (*seconds > control::kMaxNotebookIdleTimeoutS) {
        return InvalidArgumentError("--idle-timeout must be at most 7d (or 0 for never)");
      }
      spec["idle_timeout_s"] = *seconds;
    }
  }
  return spec;
}

bool IsNotebookSettledState(std::string_view state) {
  return state == "STOPPED" || state == "FAILED" || state == "ERROR" || state == "STOPPING" ||
         state == "DELETING" || state == "DELETED";
}

}  // namespace sovai::cli::client
