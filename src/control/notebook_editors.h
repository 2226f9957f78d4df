// What differs between a notebook's editors (docs/api/notebooks.md): Jupyter (`jupyter`, Debian's
// jupyter-notebook) and VS Code in the browser (`vscode`, code-server from npm, installed by
// tools/install_code_server.sh). For each: the job that runs it, how the platform sees that it is
// up and when it was last used, and how the gateway reaches it (the target it is given, how the
// platform's per-start token is presented). The state machine (notebooks.h) and the gateway
// (gateway/notebook_gateway.h) are the same for both.
//
//   JobSpec job = EditorJobSpec(id, spec, port, token, options.vscode_command);
//   fetch(host, port, EditorReadyPath(spec.editor, id), token) ... 200: RUNNING
//   std::string upstream = EditorUpstreamTarget(route.editor, id, request.target());
//
// code-server runs with password authentication, its "hashed password" being the platform's
// random per-start token (HASHED_PASSWORD, in its environment, never on a command line; a value
// without "$argon" is compared as is with the session cookie). The gateway sends that token as
// the cookie kCodeServerSessionCookie, so, as with Jupyter, only requests through the gateway,
// authenticated by the user's API token, reach the editor; another sandbox on the host's loopback
// does not. code-server serves at `/` with relative URLs: the gateway strips `/notebooks/<id>`.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "control/job_spec.h"
#include "control/notebook_spec.h"

namespace sovai::control {

// Where tools/install_code_server.sh puts code-server (a symlink to the installed version); the
// notebook sandbox sees /usr read-only, so the editor runs from there on the host's root.
inline constexpr std::string_view kCodeServerProgram =
    "/usr/local/lib/sovai/code-server/bin/code-server";
// code-server's program in a notebook's image, on the image's PATH.
inline constexpr std::string_view kCodeServerInImage = "code-server";
// The cookie code-server reads its session from (code-server's default name, no suffix).
inline constexpr std::string_view kCodeServerSessionCookie = "code-server-session";
// Bounds what the platform reads of code-server's /healthz answer.
inline constexpr size_t kMaxEditorHealthBodyBytes = 4096;

// "Jupyter", "VS Code": for events and reasons.
std::string_view EditorDisplayName(std::string_view editor);

// OK when `program` (the first word of the editor's command) can run: a bare name is taken on
// trust (looked up on the PATH in the sandbox), an absolute path must be an executable file.
// FailedPrecondition otherwise, saying how to install it (tools/install_code_server.sh,
// `sovai server --code-server`).
base::Status CheckEditorInstalled(base::Env& env, std::string_view editor,
                                  const std::vector<std::string>& command);

// The command that starts the editor of `spec`: `host_command` (the server's, checked with
// CheckEditorInstalled) without an image; in an image, the editor's program by name, looked up
// on the image's PATH ("jupyter-notebook", "code-server"): the image brings its own.
std::vector<std::string> EditorCommandFor(const NotebookSpec& spec,
                                          const std::vector<std::string>& host_command);

// What a notebook in an image that ended before its editor answered was missing, for its reason:
// "the image '...' must have jupyter-notebook on its PATH (...)". "" without an image.
std::string EditorInImageHint(const NotebookSpec& spec);

// The job that runs notebook `id`'s editor on `port` with `token`: NotebookJobSpec for Jupyter;
// for VS Code, `vscode_command` (kCodeServerProgram; tests put a stand-in there) with
// code-server's flags: bound to 127.0.0.1:`port` (every interface with `listen_everywhere`),
// password auth with HASHED_PASSWORD=`token`, its state under the sandbox's /tmp, telemetry,
// update checks and workspace trust off, opening NotebookDirOf(spec) (the volumes' root).
JobSpec EditorJobSpec(const std::string& id, const NotebookSpec& spec, uint16_t port,
                      const std::string& token, const std::vector<std::string>& jupyter_command,
                      const std::vector<std::string>& vscode_command, bool listen_everywhere);

// The path the platform probes (GET, 200 = the editor is up): Jupyter's
// /notebooks/<id>/api/status?no_track_activity=1, code-server's /healthz (which code-server does
// not count as activity).
std::string EditorReadyPath(std::string_view editor, std::string_view id);

// code-server's /healthz answer ({"status": "alive"|"expired", "lastHeartbeat": <ms since the
// epoch>}) as the time of its last activity, in µs since the epoch (0: none yet). code-server
// beats on every request but /healthz, and every 60 s while a connection is open (an editor tab).
// InvalidArgument for a body that is not such an object (it comes from the sandbox), or longer
// than kMaxEditorHealthBodyBytes.
base::Result<int64_t> ParseCodeServerHealth(std::string_view body);

// The target the editor gets for the client's `target` under /notebooks/<id>/: as is for Jupyter
// (its base_url is the prefix), without the prefix for code-server ("/notebooks/<id>/x?y" ->
// "/x?y").
std::string EditorUpstreamTarget(std::string_view editor, std::string_view id,
                                 std::string_view target);

}  // namespace sovai::control
