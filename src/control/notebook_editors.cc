#include "control/notebook_editors.h"

#include "base/json.h"

namespace sovai::control {

namespace {

bool IsVscode(std::string_view editor) { return editor == kVscodeEditor; }

// code-server's flags for notebook `id` (docs/api/notebooks.md, "VS Code").
std::vector<std::string> CodeServerFlags(const std::string& id, uint16_t port,
                                         bool listen_everywhere, const std::string& workspace) {
  return {
      "--bind-addr",
      std::string(listen_everywhere ? "0.0.0.0:" : "127.0.0.1:") + std::to_string(port),
      // The platform's token is the "hashed password" (HASHED_PASSWORD); the gateway presents it
      // as the session cookie. The login page is never shown: the gateway authenticates.
      "--auth",
      "password",
      // Its settings, extensions and logs in the sandbox's private, writable /tmp (HOME).
      "--config",
      "/tmp/.config/code-server/config.yaml",
      "--user-data-dir",
      "/tmp/.local/share/code-server",
      "--extensions-dir",
      "/tmp/.local/share/code-server/extensions",
      // Nothing leaves the host on its own (an offline, sovereign installation).
      "--disable-telemetry",
      "--disable-update-check",
      // The workspace is the user's own volumes: no "do you trust the authors" prompt.
      "--disable-workspace-trust",
      "--disable-getting-started-override",
      "--ignore-last-opened",
      // Its port proxy (/absproxy/<port>/) builds absolute URLs under the gateway's prefix.
      "--abs-proxy-base-path",
      "/notebooks/" + id,
      workspace,
  };
}

JobSpec VscodeJobSpec(const std::string& id, const NotebookSpec& spec, uint16_t port,
                      const std::string& token, const std::vector<std::string>& program,
                      bool listen_everywhere) {
  // The rest of the job (flavor, volumes, labels, network, timeout) is the notebook's, as for
  // Jupyter: one definition, with the editor's command and environment replaced.
  JobSpec job = NotebookJobSpec(id, spec, port, token, program, listen_everywhere);
  job.command = program;
  for (std::string& flag : CodeServerFlags(id, port, listen_everywhere, NotebookDirOf(spec))) {
    job.command.push_back(std::move(flag));
  }
  for (auto it = job.env.begin(); it != job.env.end();) {
    it = it->first.starts_with("JUPYTER") || it->first == "IPYTHONDIR" ? job.env.erase(it)
                                                                       : std::next(it);
  }
  // Read by code-server at start and removed from its environment, so neither `ps` nor the
  // editor's terminals show it.
  job.env["HASHED_PASSWORD"] = token;
  // The sandbox's user (nobody) has no login shell: VS Code's terminals and the environment it
  // resolves for its extension host take this one.
  job.env["SHELL"] = "/bin/bash";
  job.env["XDG_CONFIG_HOME"] = "/tmp/.config";
  job.env["XDG_DATA_HOME"] = "/tmp/.local/share";
  job.env["XDG_CACHE_HOME"] = "/tmp/.cache";
  return job;
}

}  // namespace

std::string_view EditorDisplayName(std::string_view editor) {
  return IsVscode(editor) ? "VS Code" : "Jupyter";
}

base::Status CheckEditorInstalled(base::Env& env, std::string_view editor,
                                  const std::vector<std::string>& command) {
  if (command.empty()) {
    return base::FailedPreconditionError("editor '" + std::string(editor) +
                                         "' is not configured on this server");
  }
  const std::string& program = command.front();
  if (!program.starts_with("/")) return base::Status();
  auto st = env.Stat(program);
  if (st.ok() && st->type == base::FileType::kRegular && (st->mode & 0111) != 0) {
    return base::Status();
  }
  if (IsVscode(editor)) {
    return base::FailedPreconditionError(
        "editor 'vscode' needs code-server, which is not installed on this server (no " + program +
        "): install it with tools/install_code_server.sh, or start the server with "
        "--code-server PATH; --editor jupyter works meanwhile");
  }
  return base::FailedPreconditionError("editor '" + std::string(editor) + "' needs " + program +
                                       ", which is not installed on this server");
}

JobSpec EditorJobSpec(const std::string& id, const NotebookSpec& spec, uint16_t port,
                      const std::string& token, const std::vector<std::string>& jupyter_command,
                      const std::vector<std::string>& vscode_command, bool listen_everywhere) {
  if (IsVscode(spec.editor)) {
    return VscodeJobSpec(id, spec, port, token, vscode_command, listen_everywhere);
  }
  return NotebookJobSpec(id, spec, port, token, jupyter_command, listen_everywhere);
}

std::vector<std::string> EditorCommandFor(const NotebookSpec& spec,
                                          const std::vector<std::string>& host_command) {
  if (spec.image.empty()) return host_command;
  return {IsVscode(spec.editor) ? std::string(kCodeServerInImage) : std::string(kJupyterProgram)};
}

std::string EditorInImageHint(const NotebookSpec& spec) {
  if (spec.image.empty()) return "";
  const std::string program = EditorCommandFor(spec, {}).front();
  return "the image '" + spec.image + "' must have " + program +
         " on its PATH (docs/api/notebooks.md, \"Images\")";
}

std::string EditorReadyPath(std::string_view editor, std::string_view id) {
  if (IsVscode(editor)) return "/healthz";
  return "/notebooks/" + std::string(id) + "/api/status?no_track_activity=1";
}

base::Result<int64_t> ParseCodeServerHealth(std::string_view body) {
  if (body.size() > kMaxEditorHealthBodyBytes) {
    return base::InvalidArgumentError("code-server's /healthz answer is longer than " +
                                      std::to_string(kMaxEditorHealthBodyBytes) + " bytes");
  }
  SOVAI_ASSIGN_OR_RETURN(nlohmann::json doc,
                         base::ParseJson(body, {.max_bytes = kMaxEditorHealthBodyBytes}));
  if (!doc.is_object()) {
    return base::InvalidArgumentError("code-server's /healthz answer is not a JSON object");
  }
  auto beat = doc.find("lastHeartbeat");
  if (beat == doc.end() || !beat->is_number_integer()) {
    return base::InvalidArgumentError("code-server's /healthz answer has no integer lastHeartbeat");
  }
  const int64_t ms = beat->get<int64_t>();
  // Milliseconds since the epoch; a value whose µs overflow is not a time.
  constexpr int64_t kMaxMs = INT64_MAX / 1000;
  if (ms < 0 || ms > kMaxMs) {
    return base::InvalidArgumentError("code-server's lastHeartbeat " + std::to_string(ms) +
                                      " is not a time");
  }
  return ms * 1000;
}

std::string EditorUpstreamTarget(std::string_view editor, std::string_view id,
                                 std::string_view target) {
  if (!IsVscode(editor)) return std::string(target);
  const std::string prefix = "/notebooks/" + std::string(id);
  if (!target.starts_with(prefix)) return std::string(target);
  std::string rest(target.substr(prefix.size()));
  if (rest.empty() || rest.front() != '/') rest.insert(0, "/");
  return rest;
}

}  // namespace sovai::control
