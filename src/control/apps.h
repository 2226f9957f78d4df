// Apps: the state machine of docs/api/apps.md. An app's replicas are jobs of its project
// (JobService), each running `sovai-engine serve` (image sovai/serve) or the user's image on a port
// of the host that the platform assigns; a reconcile loop keeps the replicas equal to the desired
// number, probes them, replaces those that end, and rolls them over to a new generation after an
// update. The gateway (src/gateway/app_gateway.h) routes requests to the ready replicas it is told
// about and feeds the autoscaler's decisions back through SetDesiredReplicas.
//
//   SOVAI_ASSIGN_OR_RETURN(auto apps, AppService::Start(db, options));
//   SOVAI_ASSIGN_OR_RETURN(App app, apps->Create(project, user, spec));
//   ... apps->Get(project, "support-bot"), apps->Scale(...), apps->Stop(...) ...
//
// Restart: apps are rows of the control database; their replica jobs die with the server
// (JobService marks them INTERRUPTED), so after a restart the loop simply starts new ones for every
// app that was not stopped, failed or deleted.
//
// Two servers on one database (docs/state.md): the reconcile loop runs on the leader only
// (AppServiceOptions::is_leader), and only the leader's replicas take requests; every server
// serves the API from the rows:
//   * the loop of a follower keeps its period but only reads the rows other servers changed
//     (one query of ids and versions, then the changed rows, and the endpoints); the leader
//     records its replicas in the row, so a follower's Get and List show them. Once a server
//     leads, its next round follows the replicas the row names (their jobs say whether they
//     still run; ended ones are replaced as usual) and publishes the routes; a server that
//     stops leading publishes every route without ready replicas;
//   * with is_leader set, every API call except the gateway's (Route, Routes, SetDesiredReplicas,
//     MeasureUsage, FindEndpoint, ListEndpoints, RecordUsage) first reads what other servers
//     changed; a row is written only if it is still as this server last read it (its updated_at
//     is its version), else the call fails with Aborted ("try again") and overwrites nothing;
//   * Create, Scale, Update, Stop, StartApp, Delete and the endpoint calls only write rows on
//     any server: replicas are started and stopped by the leader's loop alone, so nothing is
//     started or stopped twice;
//   * on a follower, Route and Routes give no ready replica, MeasureUsage measures nothing and
//     SetDesiredReplicas (the autoscaler) changes nothing: the replicas, their load and their
//     routing are the leader's;
//   * only a leader's Start is a restart (see Restart above); a follower's Start changes nothing.
//
// Project isolation: every user-facing method takes the caller's project; an app of another
// project is NotFound, exactly like a missing one.
// Thread-safety: all methods may be called concurrently. `mu_` guards the table of apps; the
// reconcile thread does its slow work (probes, job calls) without it.
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
#include "control/app_spec.h"
#include "control/db.h"
#include "control/jobs.h"
#include "control/limits.h"

namespace sovai::control {

enum class AppState : uint8_t {
  kQueued,
  kInitializing,
  kRunning,
  kScaling,
  kStopping,
  kStopped,
  kFailed,
  kDeleting,
  kDeleted,
};
std::string_view AppStateName(AppState state);  // "QUEUED", ...

// Where an app's model is, and whether it is an adapter.
struct ModelLocation {
  std::string location;  // bucket@REGION/prefix
  bool adapter = false;
};

// One replica: a job of the app's project serving on 127.0.0.1:port.
struct AppReplica {
  std::string job;
  int64_t generation = 0;
  uint16_t port = 0;
  std::string host;       // where it listens: its job's node (a Slurm node); "" = 127.0.0.1
  std::string job_state;  // the job's state when last looked at ("QUEUED", "RUNNING", ...)
  bool ready = false;     // its probe answered 2xx (and has not failed kMaxProbeFailures times)
  bool draining = false;  // gets no new requests; stopped once idle or after the drain timeout
  bool stop_sent = false;
  int probe_failures = 0;
  int64_t drain_since_ms = 0;  // monotonic
};

struct AppEvent {
  int64_t at_unix_micros = 0;
  std::string what;  // "state RUNNING", "scale 1 -> 2: <reason>", "replica job_... ended: ..."
};

struct App {
  std::string id;  // "app_<ULID>"
  std::string project;
  std::string user;
  AppSpec spec;
  bool adapter = false;  // the model is a PEFT adapter (served on spec.base_model)
  // Where the replicas' model is: spec.model, or the adapter/, merged/ or model/ folder under it
  // when spec.model is the output of a fine-tuning job.
  std::string model_location;
  AppState state = AppState::kQueued;
  std::string reason;
  int64_t generation = 1;    // bumped by a rolling update
  int desired_replicas = 0;  // fixed replicas, or the autoscaler's last decision
  std::vector<AppReplica> replicas;
  std::vector<std::string> recent_jobs;  // replica jobs, newest last (for logs), bounded
  std::vector<AppEvent> events;          // bounded by kMaxAppEvents
  int64_t created_unix_micros = 0;
  // Served so far (app_usage), filled by Get and List.
  int64_t usage_requests = 0;
  int64_t usage_prompt_tokens = 0;
  int64_t usage_completion_tokens = 0;
};

// The REST representation (docs/api/apps.md); `api_url` makes the app's URL.
nlohmann::json AppToJson(const App& app, std::string_view api_url);

// Requests and tokens an app served (one row of the gateway's meter, or totals).
struct AppUsageRecord {
  std::string app;
  std::string token;    // "" for unsecure_http apps and anonymous catalog calls
  std::string project;  // the calling project (for the catalog, not the endpoint's)
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// A model of the endpoints catalog.
struct Endpoint {
  std::string name;        // the model name clients send
  std::string app;         // the app serving it
  std::string rate_limit;  // "400/min": per project per model
  int64_t created_unix_micros = 0;
};

// What the gateway needs to route a request to an app.
struct AppRoute {
  std::string id;
  std::string project;
  std::string name;
  std::map<std::string, std::string> labels;
  bool unsecure_http = false;
  bool model = true;  // the replicas are sovai-engine serve (not a user's image)
  AppState state = AppState::kQueued;
  int64_t generation = 0;
  std::optional<AutoscalingSpec> autoscaling;
  int desired_replicas = 0;
  struct Target {
    std::string job;
    uint16_t port = 0;
    std::string host;  // "" = 127.0.0.1
    friend bool operator==(const Target&, const Target&) = default;
  };
  std::vector<Target> ready;  // ready, not draining: where requests may go (host:port)
  // Whether the app may get a ready replica by waiting (held requests): it is not stopped,
  // failed or deleted.
  bool serving() const;
};

// Average use of an app's ready replicas, in percent of what their flavor allots.
struct AppUsage {
  double cpu_percent = 0;
  double ram_percent = 0;
  int replicas = 0;  // how many were measured
};

struct AppServiceOptions {
  JobService* jobs = nullptr;  // not owned
  const FlavorCatalog* flavors = nullptr;
  std::string region;
  std::vector<std::string> other_regions;  // the other regions the server knows (--regions)
  std::string api_url;       // "http://127.0.0.1:8080": apps' URLs are <api_url>/apps/<id>/
  base::Env* env = nullptr;  // nullptr = base::Env::Default()
  // Credentials acting as a project in a region's object store (to inspect model prefixes); as
  // JobServiceOptions::s3_access, which applies the data-residency rule.
  std::function<base::Result<S3Access>(const std::string& project, const std::string& region)>
      s3_access;
  // Called from the reconcile thread whenever an app's route changed (replicas, state, labels),
  // and with state kDeleted when it is gone. Must not call back into AppService.
  std::function<void(const AppRoute&)> on_route;
  // Requests the gateway is serving on replica `job` of `app` (a draining replica is stopped
  // when this reaches 0). nullptr: draining replicas are stopped at once.
  std::function<uint64_t(const std::string& app, const std::string& job)> in_flight;
  // GET http://<host>:<port><path> (host "" = 127.0.0.1): true for 2xx. nullptr: a real HTTP
  // probe.
  std::function<bool(const std::string& host, uint16_t port, const std::string& path)> probe;
  // The jobs run on other hosts (the Slurm executor): replicas listen on every interface of
  // their node, and are reached at their job's node. false: on 127.0.0.1 of this server.
  bool replicas_on_other_hosts = false;
  std::chrono::milliseconds reconcile_interval{200};
  std::chrono::milliseconds probe_interval{1'000};  // for ready replicas
  std::chrono::milliseconds drain_timeout = kReplicaDrainTimeout;
  // Two servers on one database: whether this server leads, asked once per round of the loop
  // (the gateway's calls go by the last round's answer). nullptr = always, and no reading of
  // other servers' changes (one server). See above.
  std::function<bool()> is_leader;
};

// A free TCP port of 127.0.0.1 for a workload that serves on loopback (an app replica, a
// notebook). The kernel picks it; the workload binds it moments later. Another process could
// take it in between: the workload then fails to start (a replica is replaced on another port).
base::Result<uint16_t> FreeLoopbackPort();

class AppService {
 public:
  static base::Result<std::unique_ptr<AppService>> Start(ControlDb& db, AppServiceOptions options);
  ~AppService();  // Shutdown()
  AppService(const AppService&) = delete;
  AppService& operator=(const AppService&) = delete;

  // Creates an app and starts its replicas. Errors: AlreadyExists (the name is taken in the
  // project), NotFound naming `model`/`base_model` (no model there, or the bucket is missing) or
  // `image` (an oci: image's bucket or archive is missing), FailedPrecondition (an adapter without
  // base_model; the flavor can never run here), the database's. `bad_field` receives the field an
  // error is about.
  base::Result<App> Create(const std::string& project, const std::string& user, AppSpec spec,
                           std::string* bad_field = nullptr);
  // `app` is an id or a name. Deleted apps are NotFound.
  base::Result<App> Get(const std::string& project, const std::string& app);
  // Apps carrying all `labels`, oldest first (at most kMaxPageSize).
  base::Result<std::vector<App>> List(const std::string& project,
                                      const std::map<std::string, std::string>& labels);
  // New scaling (fixed replicas or autoscaling).
  base::Result<App> Scale(const std::string& project, const std::string& app, AppSpec spec);
  // New spec; with `rolling` the replicas are replaced by a new generation.
  base::Result<App> Update(const std::string& project, const std::string& app, AppSpec spec,
                           bool rolling, std::string* bad_field = nullptr);
  // Drains and stops every replica (STOPPING, STOPPED). FailedPrecondition when deleting.
  base::Result<App> Stop(const std::string& project, const std::string& app);
  // Stop with the reason the app records (Stop's is "stopped by the user"; the budget watcher
  // names the cap).
  base::Result<App> StopBecause(const std::string& project, const std::string& app,
                                const std::string& reason);
  // A STOPPED or FAILED app starts again (QUEUED). FailedPrecondition otherwise.
  base::Result<App> StartApp(const std::string& project, const std::string& app);
  // DELETING: replicas stopped, then DELETED (the name is free again at once).
  base::Result<App> Delete(const std::string& project, const std::string& app);
  // A replica's log (jobs' ReadLog); `replica` "" = the newest replica.
  base::Result<exec::LogChunk> ReadLog(const std::string& project, const std::string& app,
                                       const std::string& replica, uint64_t offset,
                                       size_t max_bytes);

  // The endpoints catalog: models published under /v1, each served by an app of `project` (the
  // system project). Create: AlreadyExists for a taken name; the app's errors otherwise.
  base::Result<Endpoint> CreateEndpoint(const std::string& project, const std::string& user,
                                        AppSpec spec, std::string rate_limit,
                                        std::string* bad_field = nullptr);
  std::vector<Endpoint> ListEndpoints();
  std::optional<Endpoint> FindEndpoint(const std::string& name);
  // Deletes the endpoint and its app. NotFound when there is none.
  base::Status DeleteEndpoint(const std::string& name);

  // Adds the gateway's meter readings to app_usage, in the minute of `now_unix_micros`.
  base::Status RecordUsage(const std::vector<AppUsageRecord>& rows, int64_t now_unix_micros);

  // For the gateway. The autoscaler's decision for an autoscaled app (ignored for fixed apps
  // and apps that are not serving); recorded as an event with `reason` when it changes the app.
  base::Status SetDesiredReplicas(const std::string& app_id, int replicas,
                                  const std::string& reason);
  std::optional<AppRoute> Route(const std::string& app_id);
  std::vector<AppRoute> Routes();
  // CPU and memory use of the app's ready replicas since the previous call for that app.
  AppUsage MeasureUsage(const std::string& app_id);

  // Stops the reconcile loop (replicas are jobs: JobService::Shutdown stops them). Idempotent.
  void Shutdown();

 private:
  struct Runtime;  // per-app state of the reconcile loop that is not persisted
  AppService(ControlDb& db, AppServiceOptions options);
  // A row of `apps` (kColumns in apps.cc) as stored, replicas included; *version = updated_at.
  base::Result<App> AppFromRow(base::Database& sql, const base::Statement& st, int64_t* version);
  // Reads the rows; a leader's start drops the replicas and ends STOPPING/DELETING (Restart).
  base::Status Load(bool leading);
  // Under mu_: writes the row; with is_leader set, only if it is still at versions_[id] (else
  // Aborted). Records the new version.
  base::Status Save(const App& app);
  // Under mu_: takes the rows that other servers changed since this process read or wrote them
  // (a leader keeps its own replicas), and the endpoints.
  base::Status RefreshLocked(bool leading);
  // Under mu_: RefreshLocked when is_leader is set (a shared database), else nothing.
  base::Status SyncLocked();
  bool Leading() const;
  // Under mu_: `rt` afresh for a leader that follows the replicas `app` recorded.
  void AdoptLocked(const App& app, Runtime& rt);
  void Loop();
  // One turn of the loop: the refresh (shared database), leadership changes, then, on the
  // leader, Reconcile of every app.
  void Round();
  // One app's turn, in steps (apps_reconcile.cc): SurveyReplicas without the lock, PlanLocked,
  // StopReplicas and StartReplicas without it, then RecordLocked.
  void Reconcile(const std::string& app_id);
  struct ReplicaSurvey;    // what SurveyReplicas saw
  struct ReplicaPlan;      // what PlanLocked decided
  struct StartedReplicas;  // what StartReplicas submitted
  // Each replica's job and probe; `snapshot` is the app as the turn began.
  ReplicaSurvey SurveyReplicas(const App& snapshot, Runtime& rt, bool generation_ready);
  // Under mu_: the survey's events and failures applied to `app` (as it is now), which replicas
  // drain, which are stopped and how many to start.
  ReplicaPlan PlanLocked(App& app, Runtime& rt, int64_t snapshot_generation, ReplicaSurvey survey);
  // Under mu_: the survey's events, readiness and failed starts recorded in `app` and `rt`.
  void ApplySurveyLocked(App& app, Runtime& rt, int64_t snapshot_generation, ReplicaSurvey& survey);
  // Under mu_: the draining replicas whose requests are done (or whose drain timed out).
  std::vector<std::string> DueForStopLocked(const App& app, std::vector<AppReplica>& replicas,
                                            int64_t now_ms);
  void StopReplicas(const App& snapshot, const std::vector<std::string>& jobs);
  StartedReplicas StartReplicas(const App& snapshot, int count);
  // Under mu_: the started replicas, the app's next state and its route; the route to publish
  // when it changed.
  std::optional<AppRoute> RecordLocked(App& app, Runtime& rt, StartedReplicas started,
                                       bool stopped_any);
  // Under mu_: the state a serving app is in from its replicas.
  AppState ServingStateLocked(const App& app, const Runtime& rt) const;
  // Under mu_: the app `app` (id or name) of `project`.
  base::Result<App*> FindLocked(const std::string& project, const std::string& app);
  void SetStateLocked(App& app, AppState state, std::string reason = "");
  void AddEventLocked(App& app, std::string what);
  AppRoute RouteOfLocked(const App& app) const;
  // What `location` holds: a model directory, a PEFT adapter, or the output of `sovai-engine
  // train` (its adapter/ when `have_base`, else merged/ or model/). NotFound otherwise.
  base::Result<ModelLocation> InspectModel(const std::string& project, const std::string& location,
                                           bool have_base);
  // InspectModel of spec.model and spec.base_model, with the errors of Create.
  base::Result<ModelLocation> ResolveModels(const std::string& project, const AppSpec& spec,
                                            std::string* bad_field);
  // An oci: image's bucket and archive (JobService::CheckSources), naming "image".
  base::Status CheckImage(const std::string& project, const AppSpec& spec, std::string* bad_field);
  base::Result<std::string> StartReplica(const App& app, uint16_t port);
  base::Status LoadEndpoints();
  // Fills the usage totals of `app` from app_usage.
  void FillUsage(App& app);

  ControlDb& db_;
  AppServiceOptions options_;
  base::Env& env_;
  base::UlidGenerator ulids_;

  std::mutex mu_;  // guards apps_, runtime_, endpoints_, versions_, leading_, stopping_
  std::condition_variable cv_;
  std::map<std::string, App> apps_;                          // by id; deleted apps are dropped
  std::map<std::string, std::shared_ptr<Runtime>> runtime_;  // by app id
  std::map<std::string, Endpoint> endpoints_;                // by name
  std::map<std::string, int64_t> versions_;  // by id: the row's updated_at as last read/written
  bool leading_ = true;                      // whether the loop's last round led
  bool stopping_ = false;
  std::thread loop_;
};

}  // namespace sovai::control
