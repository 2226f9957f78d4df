#include "control/notebook_spec.h"

#include <set>

#include "exec/volume_spec.h"

namespace sovai::control {

namespace {

using Json = nlohmann::json;

bool IsNotebookName(std::string_view name) {
  if (name.empty() || name.size() > kMaxAppNameBytes || name[0] < 'a' || name[0] > 'z') {
    return false;
  }
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

}  // namespace

std::variant<NotebookSpec, SpecError> ParseNotebookSpec(const Json& body, const SpecContext& ctx) {
  SpecErrorCollector errors;
  if (!body.is_object()) {
    errors.Add("(body)", "must be a JSON object");
    return errors.Finish();
  }
  static const std::set<std::string> kKnown = {
      "name", "editor", "flavor", "units", "volumes", "labels", "env", "idle_timeout_s", "image"};
  // What notebooks share with jobs, validated as the notebook's job: one set of rules (the
  // image's included: registry references, oci: archives).
  Json job = {{"image", std::string(kShellImage)}, {"command", {std::string(kJupyterProgram)}}};
  for (const auto& [key, value] : body.items()) {
    if (!kKnown.contains(key)) {
      errors.Add(key, "is not a notebook spec field");
    } else if (key == "flavor" || key == "units" || key == "volumes" || key == "labels" ||
               key == "env" || (key == "image" && !value.is_null())) {
      job[key] = value;
    }
  }
  NotebookSpec spec;
  if (auto it = body.find("image"); it != body.end() && it->is_string()) {
    const std::string& image = it->get_ref<const std::string&>();
    if (EngineSubcommandOf(image)) {
      errors.Add("image",
                 "the engine images run jobs and apps, not notebooks; give an image "
                 "with Jupyter (or code-server) in it, or none for the host's");
    }
  }
  if (auto it = body.find("name"); it != body.end() && !it->is_null()) {
    if (!it->is_string() || !IsNotebookName(it->get_ref<const std::string&>())) {
      errors.Add("name", "must be 1 to 63 characters of a-z, 0-9 and '-', starting with a letter");
    } else {
      spec.name = it->get<std::string>();
    }
  }
  if (auto it = body.find("editor"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) {
      errors.Add("editor", "must be \"jupyter\" or \"vscode\"");
    } else if (it->get_ref<const std::string&>() == kVscodeEditor ||
               it->get_ref<const std::string&>() == kJupyterEditor) {
      spec.editor = it->get<std::string>();
    } else {
      errors.Add("editor",
                 "unknown editor '" + it->get<std::string>() + "'; use \"jupyter\" or \"vscode\"");
    }
  }
  if (auto it = body.find("idle_timeout_s"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() > kMaxNotebookIdleTimeoutS) {
      errors.Add("idle_timeout_s", "must be an integer in [0, " +
                                       std::to_string(kMaxNotebookIdleTimeoutS) +
                                       "] (0: never stop)");
    } else {
      spec.idle_timeout_s = it->get<int64_t>();
    }
  }
  base::StatusCode code = base::StatusCode::kInvalidArgument;
  auto parsed = ParseJobSpec(job, ctx);
  if (auto* error = std::get_if<SpecError>(&parsed)) {
    errors.Append(*error);
    if (error->status.code() == base::StatusCode::kNotFound) code = base::StatusCode::kNotFound;
  } else {
    JobSpec& j = std::get<JobSpec>(parsed);
    if (j.image != kShellImage) spec.image = std::move(j.image);
    spec.flavor = std::move(j.flavor);
    spec.units = j.units;
    spec.volumes = std::move(j.volumes);
    spec.labels = std::move(j.labels);
    spec.env = std::move(j.env);
  }
  for (const auto& [key, value] : spec.labels) {
    if (key.starts_with("sovai.")) errors.Add("labels." + key, "sovai.* labels are the platform's");
  }
  for (const auto& [name, value] : spec.env) {
    // The editors' own: Jupyter's token and directories, code-server's password and settings.
    const bool code_server_own =
        name == "PASSWORD" || name == "HASHED_PASSWORD" || name.starts_with("CODE_SERVER");
    if (name == "PORT" || name.starts_with("JUPYTER") ||
        (spec.editor == kVscodeEditor && code_server_own)) {
      errors.Add("env." + name, "is set by the platform");
    }
  }
  for (size_t i = 0; i < spec.volumes.size(); ++i) {
    auto volume = exec::ParseVolumeSpec(spec.volumes[i]);
    if (volume.ok() && volume->mount_path.starts_with("/tmp/")) {
      errors.Add("volumes[" + std::to_string(i) + "]",
                 "mount notebook volumes under " + std::string(kNotebookWorkspace) +
                     " (/tmp is the notebook's private scratch space)");
    }
  }
  if (!errors.empty()) return errors.Finish(code);
  return spec;
}

Json NotebookSpecToJson(const NotebookSpec& spec) {
  return {{"name", spec.name},
          {"editor", spec.editor},
          {"image", spec.image.empty() ? Json(nullptr) : Json(spec.image)},
          {"flavor", spec.flavor},
          {"units", spec.units},
          {"volumes", spec.volumes},
          {"labels", spec.labels},
          {"env", spec.env},
          {"idle_timeout_s", spec.idle_timeout_s}};
}

std::string NotebookImageOf(const NotebookSpec& spec) {
  return spec.image.empty() ? std::string(kShellImage) : spec.image;
}

std::string NotebookDirOf(const NotebookSpec& spec) {
  const std::string workspace(kNotebookWorkspace);
  for (const std::string& text : spec.volumes) {
    auto volume = exec::ParseVolumeSpec(text);
    if (!volume.ok()) continue;
    if (volume->mount_path == workspace || volume->mount_path.starts_with(workspace + "/")) {
      return workspace;
    }
  }
  return "/tmp";
}

JobSpec NotebookJobSpec(const std::string& id, const NotebookSpec& spec, uint16_t port,
                        const std::string& jupyter_token, const std::vector<std::string>& program,
                        bool listen_everywhere) {
  JobSpec job;
  job.name = spec.name.empty() ? id : spec.name;
  job.image = NotebookImageOf(spec);
  const std::string dir = NotebookDirOf(spec);
  job.command = program;
  job.command.insert(
      job.command.end(),
      {"--no-browser", listen_everywhere ? "--ip=0.0.0.0" : "--ip=127.0.0.1",
       "--port=" + std::to_string(port), "--port-retries=0",
       "--NotebookApp.base_url=/notebooks/" + id + "/", "--NotebookApp.notebook_dir=" + dir,
       // The gateway checks the Origin of websockets and of cookie-authenticated
       // requests; Jupyter sees every request come from it (docs/api/notebooks.md).
       "--NotebookApp.allow_origin=*",
       "--NotebookApp.password=", "--NotebookApp.quit_button=False"});
  job.flavor = spec.flavor;
  job.units = spec.units;
  job.volumes = spec.volumes;
  job.labels = spec.labels;
  job.labels[std::string(kNotebookLabel)] = id;
  job.env = spec.env;
  job.env["PORT"] = std::to_string(port);
  // Read by Jupyter at start (NotebookApp.token), so it never shows in `ps`.
  job.env["JUPYTER_TOKEN"] = jupyter_token;
  // Jupyter's and IPython's state in the sandbox's private, writable /tmp (HOME).
  job.env["JUPYTER_CONFIG_DIR"] = "/tmp/.jupyter";
  job.env["JUPYTER_DATA_DIR"] = "/tmp/.local/share/jupyter";
  job.env["JUPYTER_RUNTIME_DIR"] = "/tmp/.local/share/jupyter/runtime";
  job.env["IPYTHONDIR"] = "/tmp/.ipython";
  job.env["PYTHONUNBUFFERED"] = "1";
  job.network = NetworkMode::kHost;
  job.timeout_s = kNotebookJobTimeoutS;
  return job;
}

}  // namespace sovai::control
