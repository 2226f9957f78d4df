// Notebooks: the state machine of docs/api/notebooks.md. A notebook is one job of its project
// (JobService) running Jupyter (`jupyter-notebook` of the host, image sovai/shell) on a port of
// the host that the platform picks, with the notebook's volumes; a reconcile loop submits that
// job, probes Jupyter until it answers, watches its activity and stops it after the idle timeout,
// and follows the job to its end. The gateway (src/gateway/notebook_gateway.h) routes
// /notebooks/<id>/ to it with Jupyter's token, which only the platform knows. With `editor:
// vscode` the job runs code-server instead, and what differs (its command, probe, activity and
// how the gateway reaches it) is in notebook_editors.h; "Jupyter" below stands for either.
//
//   SOVAI_ASSIGN_OR_RETURN(auto notebooks, NotebookService::Start(db, options));
//   SOVAI_ASSIGN_OR_RETURN(Notebook nb, notebooks->Create(project, user, spec));
//   ... notebooks->Get(project, nb.id), notebooks->Stop(...), notebooks->StartNotebook(...) ...
//
// States: STARTING (the job is queued, syncing volumes down, or Jupyter is booting), RUNNING
// (Jupyter answers), STOPPING (the job was asked to stop: SIGTERM, then its rw volumes are
// synced up), STOPPED (the job ended after a stop, an idle stop, a budget stop, its timeout or a
// server restart), FAILED (Jupyter exited by itself, or did not answer within the start timeout),
// ERROR (the platform could not run it: admission refused, a volume could not sync, the sandbox
// could not start), DELETING (stopping before the notebook goes), DELETED (gone from lists; the
// row stays). STOPPED, FAILED and ERROR notebooks start again with StartNotebook (a new job).
//
// Restart: notebooks are rows of the control database; their jobs die with the server
// (JobService marks them INTERRUPTED and syncs their outputs), so after a restart a notebook
// that was STARTING, RUNNING or STOPPING is STOPPED ("the server restarted"): the kernels' state
// is gone, and a notebook nobody uses must not start billing again by itself.
//
// Two servers on one database (docs/state.md): the reconcile loop runs on the leader only
// (NotebookServiceOptions::is_leader); every server serves the API from the rows:
//   * the loop of a follower keeps its period but only reads the rows other servers changed
//     (one query of ids and versions, then the changed rows); once it leads, its next round
//     reconciles, following each notebook's job where the previous leader left it;
//   * with is_leader set, every API call first reads what other servers changed; a row is
//     written only if it is still as this server last read it (its updated_at is its version),
//     else the call fails with Aborted ("try again") and overwrites nothing;
//   * Create and StartNotebook on a follower submit the job through its JobService (which queues
//     it for the leader's scheduler, jobs.h) and insert or update the row; Stop and Delete only
//     change the row's state: the leader's loop stops the job. Nothing is started or stopped
//     twice;
//   * Route on a follower gives the notebook as the leader last recorded it (its port is on the
//     host where the leader runs the job). NoteActivity of a follower stays there: requests that
//     reached Jupyter count anyway (the leader polls Jupyter's own last activity);
//   * only a leader's Start is a restart (live notebooks STOPPED, see above); a follower's Start
//     changes nothing.
//
// Project isolation: every user-facing method takes the caller's project; a notebook of another
// project is NotFound, exactly like a missing one.
// Thread-safety: all methods may be called concurrently. `mu_` guards the table of notebooks;
// the reconcile thread does its slow work (probes, job calls) without it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "base/ulid.h"
#include "control/db.h"
#include "control/jobs.h"
#include "control/limits.h"
#include "control/notebook_editors.h"
#include "control/notebook_spec.h"

namespace sovai::control {

enum class NotebookState : uint8_t {
  kStarting,
  kRunning,
  kStopping,
  kStopped,
  kFailed,
  kError,
  kDeleting,
  kDeleted,
};
std::string_view NotebookStateName(NotebookState state);  // "STARTING", ...

struct NotebookEvent {
  int64_t at_unix_micros = 0;
  std::string what;  // "state RUNNING", "job job_... started on port 41234", "idle for 3600 s"
};

struct Notebook {
  std::string id;  // "nb_<ULID>"
  std::string project;
  std::string user;
  NotebookSpec spec;
  NotebookState state = NotebookState::kStarting;
  std::string reason;
  std::string job;  // the current (or last) job; "" before the first submission
  // The manifest digest its current job's registry image resolved to at submission (jobs.h
  // Job::image_digest); "" for an oci: archive or the host's root.
  std::string image_digest;
  uint16_t port = 0;
  // Where Jupyter listens: its job's node (a Slurm node), as the last round saw it; "" =
  // 127.0.0.1.
  std::string host;
  // Jupyter's token for the current job (new at each start). Never in the REST representation.
  std::string jupyter_token;
  std::vector<std::string> recent_jobs;  // newest last, bounded
  std::vector<NotebookEvent> events;     // bounded by kMaxNotebookEvents
  int64_t created_unix_micros = 0;
  int64_t started_unix_micros = 0;        // of the current start
  int64_t last_activity_unix_micros = 0;  // Jupyter's or the gateway's, whichever is later
};

// The REST representation (docs/api/notebooks.md); `api_url` makes the notebook's URL.
nlohmann::json NotebookToJson(const Notebook& notebook, std::string_view api_url);

// What the gateway needs to route a request to a notebook.
struct NotebookRoute {
  std::string id;
  std::string project;
  std::map<std::string, std::string> labels;
  NotebookState state = NotebookState::kStarting;
  uint16_t port = 0;
  std::string jupyter_token;  // the editor's per-start token (Jupyter's or code-server's)
  std::string host;           // "" = 127.0.0.1
  std::string editor = std::string(kJupyterEditor);  // how the gateway reaches it
};

// An answer of Jupyter's API: its status and body.
struct JupyterAnswer {
  int status = 0;
  std::string body;
};

struct NotebookServiceOptions {
  JobService* jobs = nullptr;  // not owned
  base::Env* env = nullptr;    // nullptr = base::Env::Default()
  // GET http://<host>:<port><path> (host "" = 127.0.0.1) with `Authorization: token <token>`;
  // nullopt when nothing answered. nullptr: a real HTTP call (kProbeTimeout).
  std::function<std::optional<JupyterAnswer>(const std::string& host, uint16_t port,
                                             const std::string& path, const std::string& token)>
      fetch;
  // The jobs run on other hosts (the Slurm executor): Jupyter listens on every interface of its
  // node, and is reached at its job's node.
  bool on_other_hosts = false;
  // The program and first arguments of the notebook's job (NotebookJobSpec); tests put a
  // stand-in for Jupyter here.
  std::vector<std::string> jupyter_command = {std::string(kJupyterProgram)};
  // The same for `editor: vscode` (notebook_editors.h): `sovai server --code-server`; a notebook
  // asking for it is refused (FailedPrecondition naming "editor") while it is not installed.
  std::vector<std::string> vscode_command = {std::string(kCodeServerProgram)};
  std::chrono::milliseconds reconcile_interval{200};
  std::chrono::milliseconds probe_interval{500};  // while STARTING
  std::chrono::milliseconds activity_poll_interval = kNotebookActivityPollInterval;
  std::chrono::milliseconds start_timeout = kNotebookStartTimeout;
  // Two servers on one database: whether this server leads, asked at each round of the loop.
  // nullptr = always, and no reading of other servers' changes (one server). See above.
  std::function<bool()> is_leader;
};

class NotebookService {
 public:
  static base::Result<std::unique_ptr<NotebookService>> Start(ControlDb& db,
                                                              NotebookServiceOptions options);
  ~NotebookService();  // Shutdown()
  NotebookService(const NotebookService&) = delete;
  NotebookService& operator=(const NotebookService&) = delete;

  // Creates a notebook (STARTING) and submits its job. Errors: AlreadyExists (the name is taken
  // in the project), ResourceExhausted (kMaxNotebooksPerProject), FailedPrecondition (the flavor
  // can never run here), and the job's admission errors (JobService::Submit: a missing bucket is
  // NotFound naming "volumes[i]", a budget refusal FailedPrecondition, ...), after which nothing
  // is left behind. `bad_field` receives the field an error is about.
  base::Result<Notebook> Create(const std::string& project, const std::string& user,
                                NotebookSpec spec, std::string* bad_field = nullptr);
  // `notebook` is an id or a name. Deleted notebooks are NotFound.
  base::Result<Notebook> Get(const std::string& project, const std::string& notebook);
  // Notebooks carrying all `labels`, oldest first (at most kMaxPageSize).
  base::Result<std::vector<Notebook>> List(const std::string& project,
                                           const std::map<std::string, std::string>& labels);
  // STOPPING (STOPPED at once without a job). A STOPPED, FAILED or ERROR notebook is returned as
  // is. FailedPrecondition while DELETING. `reason` "" = "stopped by the user".
  base::Result<Notebook> Stop(const std::string& project, const std::string& notebook,
                              const std::string& reason = "");
  // A STOPPED, FAILED or ERROR notebook starts again (STARTING, a new job with a new port and
  // Jupyter token). The job's admission errors as for Create (the notebook stays as it was);
  // FailedPrecondition in other states.
  base::Result<Notebook> StartNotebook(const std::string& project, const std::string& notebook);
  // DELETING (its job stopped, outputs synced), then DELETED (the name is free again at once).
  base::Result<Notebook> Delete(const std::string& project, const std::string& notebook);
  // "Sync now": uploads what changed in the rw/rwd volumes of a RUNNING notebook at once
  // (JobService::PushData on its job). FailedPrecondition in other states, or without a
  // writable volume.
  base::Status PushData(const std::string& project, const std::string& notebook);
  // The log of the notebook's current (or last) job, `job` "" = that one, else one of its
  // recent jobs (NotFound otherwise).
  base::Result<exec::LogChunk> ReadLog(const std::string& project, const std::string& notebook,
                                       const std::string& job, uint64_t offset, size_t max_bytes);

  // For the gateway: the notebook `id` (nullopt when it does not exist or was deleted), and a
  // request that reached it (activity that holds off the idle stop).
  std::optional<NotebookRoute> Route(const std::string& id);
  void NoteActivity(const std::string& id);

  // Runs one reconcile pass over every notebook now, whether or not this server leads (tests;
  // the loop does it every reconcile_interval, on the leader).
  void ReconcileAll();

  // Stops the reconcile loop (notebooks' jobs are jobs: JobService::Shutdown stops them).
  // Idempotent.
  void Shutdown();

 private:
  struct Runtime;  // per-notebook state of the loop that is not persisted
  NotebookService(ControlDb& db, NotebookServiceOptions options);
  // Reads the rows; a leader's start converts the live ones (see Restart above).
  base::Status Load(bool leading);
  // Under mu_: writes the row; with is_leader set, only if it is still at versions_[id] (else
  // Aborted). Records the new version.
  base::Status Save(const Notebook& notebook);
  // Under mu_: takes the rows that other servers changed since this process read or wrote them.
  base::Status RefreshLocked();
  // Under mu_: RefreshLocked when is_leader is set (a shared database), else nothing.
  base::Status SyncLocked();
  bool Leading() const;
  void Loop();
  // One turn of the loop: the refresh (shared database), then, on the leader, ReconcileAll.
  void Round();
  void Reconcile(const std::string& id);
  base::Result<Notebook*> FindLocked(const std::string& project, const std::string& notebook);
  void SetStateLocked(Notebook& notebook, NotebookState state, std::string reason = "");
  void AddEventLocked(Notebook& notebook, std::string what);
  // Picks a port and a token and submits the notebook's job; records both in `notebook`.
  base::Status SubmitJob(Notebook& notebook, std::string* bad_field);
  // When Jupyter last saw activity (its /api/status last_activity; now when a kernel is busy),
  // nullopt when it did not answer.
  std::optional<int64_t> JupyterActivity(const Notebook& notebook);
  // The same for the notebook's editor (code-server: its /healthz lastHeartbeat).
  std::optional<int64_t> EditorActivity(const Notebook& notebook);

  ControlDb& db_;
  NotebookServiceOptions options_;
  base::Env& env_;
  base::UlidGenerator ulids_;

  std::mutex mu_;  // guards notebooks_, runtime_, versions_, stopping_
  std::condition_variable cv_;
  std::map<std::string, Notebook> notebooks_;                // by id; deleted ones are dropped
  std::map<std::string, std::shared_ptr<Runtime>> runtime_;  // by notebook id
  std::map<std::string, int64_t> versions_;  // by id: the row's updated_at as last read/written
  bool stopping_ = false;
  bool leading_ = true;  // the loop thread's (and Start's): whether the last round led
  std::thread loop_;
};

}  // namespace sovai::control
