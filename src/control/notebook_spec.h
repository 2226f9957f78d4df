// What a user asks for when starting a notebook (`POST /v1/notebooks`, `sovai notebook run`),
// parsed from JSON and validated before anything starts (docs/api/notebooks.md). Errors name the
// field, as job specs do; the flavor, units, volumes, env and labels follow the job spec's rules
// (they are checked by parsing them as the notebook's job).
//
//   {"name": "explore", "editor": "jupyter", "flavor": "ai1-1-cpu", "units": 2,
//    "volumes": ["data@EU-WEST-LOCAL/ds:/workspace/data:ro",
//                "data@EU-WEST-LOCAL/work:/workspace/work:rw"],
//    "labels": {"team": "nlp"}, "env": {"HF_HUB_OFFLINE": "1"}, "idle_timeout_s": 3600,
//    "image": "127.0.0.1:5000/prj_.../torch-notebook:2.4"}
//
// Only `flavor` is required. `editor` is "jupyter" (the default) or "vscode" (code-server;
// whether this server has it is the service's check, notebook_editors.h). `image` takes what a
// job's does but the engine images (job_spec.h): a registry reference, resolved to a digest when
// the notebook's job is submitted, or an oci: archive, checked then; the editor must be in it
// (on its PATH). Without one, the notebook runs on the host's root filesystem (sovai/shell).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "control/job_spec.h"
#include "control/limits.h"

namespace sovai::control {

inline constexpr std::string_view kJupyterEditor = "jupyter";
inline constexpr std::string_view kVscodeEditor = "vscode";

struct NotebookSpec {
  std::string name;                                  // "" = none (the id names it)
  std::string editor = std::string(kJupyterEditor);  // kJupyterEditor or kVscodeEditor
  std::string image;                                 // "" = the host's root filesystem
  std::string flavor;
  int units = 1;
  std::vector<std::string> volumes;  // as a job's: bucket@REGION/prefix:/mount/path[:ro|rw|...]
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> env;
  // No kernel activity, API call or open connection for this long stops the notebook; 0 = never.
  int64_t idle_timeout_s = kDefaultNotebookIdleTimeoutS;
  bool operator==(const NotebookSpec&) const = default;
};

// The label every notebook's job carries: sovai.notebook=<notebook id>.
inline constexpr std::string_view kNotebookLabel = "sovai.notebook";
// Where Jupyter opens: volumes belong under it (a volume at /workspace itself is allowed).
inline constexpr std::string_view kNotebookWorkspace = "/workspace";

// Parses and validates a whole spec. Unknown flavor: NotFound naming "flavor".
std::variant<NotebookSpec, SpecError> ParseNotebookSpec(const nlohmann::json& body,
                                                        const SpecContext& ctx);

nlohmann::json NotebookSpecToJson(const NotebookSpec& spec);

// The notebook's working directory in the sandbox: kNotebookWorkspace when a volume is mounted
// there or under it, else /tmp (the sandbox's private scratch space, gone when it stops).
std::string NotebookDirOf(const NotebookSpec& spec);

// The program a notebook runs: Debian's jupyter-notebook on the host's root filesystem, and the
// one on the PATH of a notebook's image.
inline constexpr std::string_view kJupyterProgram = "jupyter-notebook";

// The image of the notebook's job: spec.image, or sovai/shell (the host's root) without one.
std::string NotebookImageOf(const NotebookSpec& spec);

// The job that runs notebook `id` of `spec`: `program` (kJupyterProgram; tests put a stand-in
// there) with Jupyter's flags, serving on 127.0.0.1:`port` with base URL /notebooks/<id>/, its
// token in JUPYTER_TOKEN (never on the command line), its state in the sandbox's /tmp, labelled
// kNotebookLabel=id, on the host network (the gateway reaches it on loopback).
// With `listen_everywhere` (jobs on other hosts: the Slurm executor) it serves on every
// interface of its node instead, for the gateway to reach it there.
JobSpec NotebookJobSpec(const std::string& id, const NotebookSpec& spec, uint16_t port,
                        const std::string& jupyter_token,
                        const std::vector<std::string>& program = {std::string(kJupyterProgram)},
                        bool listen_everywhere = false);

}  // namespace sovai::control
