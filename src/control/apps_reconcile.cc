// AppService's reconcile loop: each turn surveys an app's replicas (jobs and probes), decides
// which to drain, stop and start, and records the result, the app's state and its route.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "base/log.h"
#include "control/apps.h"
#include "control/internal/apps_runtime.h"
#include "net/client.h"

namespace sovai::control {

namespace {

using apps_internal::Serving;
using base::Result;
using base::Status;

// Replica jobs whose logs `app logs --replica` can still name.
constexpr size_t kMaxRecentJobs = 16;
// Where replicas find their model inside the sandbox.
constexpr char kModelMount[] = "/workspace/model";
constexpr char kBaseModelMount[] = "/workspace/base";

// The event of a replica job just submitted: "started" is said only when its job runs
// (Reconcile); until then, where it is and why it waits ("position 1 in the queue: waiting for
// 1 CPU, 0 free").
std::string SubmittedEvent(const std::string& job_id, uint16_t port, const Result<Job>& job) {
  std::string what = "replica " + job_id;
  if (!job.ok()) return what + " submitted on port " + std::to_string(port);
  if (job->state == JobState::kQueued) {
    what += " queued on port " + std::to_string(port);
    return job->reason.empty() ? what : what + " (" + job->reason + ")";
  }
  return what + " submitted on port " + std::to_string(port) + " (" +
         std::string(JobStateName(job->state)) + ")";
}

// Marks the replicas `app` no longer wants as draining: every one when it is not serving, else
// the surplus of the current generation (the least useful first: not ready, newest) and the old
// generations' beyond those still covering the current one's missing ready replicas. Returns how
// many replicas of the current generation to start.
int MarkDraining(const App& app, std::vector<AppReplica>& replicas) {
  const bool serving = Serving(app.state);
  int active_new = 0, ready_new = 0;
  for (AppReplica& r : replicas) {
    if (!serving) r.draining = true;
    if (r.draining) continue;
    if (r.generation == app.generation) {
      ++active_new;
      if (r.ready) ++ready_new;
    }
  }
  if (!serving) return 0;
  for (auto r = replicas.rbegin(); r != replicas.rend() && active_new > app.desired_replicas; ++r) {
    if (!r->draining && r->generation == app.generation && !r->ready) {
      r->draining = true;
      --active_new;
    }
  }
  for (auto r = replicas.rbegin(); r != replicas.rend() && active_new > app.desired_replicas; ++r) {
    if (!r->draining && r->generation == app.generation) {
      r->draining = true;
      --active_new;
      --ready_new;
    }
  }
  // Old generations: keep ready ones while the new generation is not ready in full.
  int keep_old = std::max(0, app.desired_replicas - ready_new);
  for (AppReplica& r : replicas) {
    if (r.draining || r.generation == app.generation) continue;
    if (r.ready && keep_old > 0) {
      --keep_old;
    } else {
      r.draining = true;
    }
  }
  return app.state != AppState::kFailed ? std::max(0, app.desired_replicas - active_new) : 0;
}

// Whether the gateway must hear of `route`: it differs from what it was last told.
bool RouteChanged(const std::optional<AppRoute>& published, const AppRoute& route) {
  return !published || published->ready != route.ready || published->state != route.state ||
         published->labels != route.labels || published->unsecure_http != route.unsecure_http ||
         published->generation != route.generation ||
         published->desired_replicas != route.desired_replicas ||
         published->autoscaling != route.autoscaling;
}

}  // namespace

Result<uint16_t> FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return base::ErrnoToStatus(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  if (rc == 0) rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int err = errno;
  ::close(fd);
  if (rc != 0) return base::ErrnoToStatus(err, "choosing a loopback port");
  return ntohs(addr.sin_port);
}

namespace apps_internal {

bool HttpProbe(const std::string& host, uint16_t port, const std::string& path) {
  net::ClientOptions options;
  if (!host.empty()) options.host = host;
  options.port = port;
  options.connect_timeout = kProbeTimeout;
  options.read_timeout = kProbeTimeout;
  net::HttpClient client(options);
  net::ClientRequest request;
  request.method = "GET";
  request.target = path;
  auto response = client.Send(request);
  return response.ok() && response->status >= 200 && response->status < 300;
}

}  // namespace apps_internal

struct AppService::ReplicaSurvey {
  std::vector<AppReplica> replicas;  // those whose job has not ended, as seen now
  std::vector<std::string> events;
  bool failed_start = false;  // a replica of the current generation ended before it was ready
  std::string failure;        // why, for the app's reason
  bool saw_generation_ready = false;
  bool saw_ready = false;
};

struct AppService::ReplicaPlan {
  int starts = 0;
  std::vector<std::string> to_stop;  // jobs
};

struct AppService::StartedReplicas {
  std::vector<AppReplica> replicas;
  std::vector<std::string> events;  // one per replica
  std::string error;                // why starting the next one failed ("" = none did)
};

Result<std::string> AppService::StartReplica(const App& app, uint16_t port) {
  JobSpec job;
  job.name = app.spec.name + "-replica";
  job.flavor = app.spec.flavor;
  job.units = app.spec.units;
  job.env = app.spec.env;
  job.labels = app.spec.labels;
  job.labels[std::string(kAppLabel)] = app.id;
  job.network = NetworkMode::kHost;
  job.timeout_s = kAppReplicaTimeoutS;
  const std::string listen =
      (options_.replicas_on_other_hosts ? "0.0.0.0:" : "127.0.0.1:") + std::to_string(port);
  if (!app.spec.model.empty()) {
    job.image = std::string(kServeImage);
    int threads = 1;
    if (auto flavor = options_.flavors->Find(app.spec.flavor); flavor.ok()) {
      if (auto request = RequestFor(**flavor, app.spec.units); request.ok()) {
        threads = std::max(1, request->cpus);
      }
    }
    if (app.adapter) {
      job.volumes = {app.spec.base_model + ":" + kBaseModelMount + ":ro:cache",
                     app.model_location + ":" + kModelMount + ":ro:cache"};
      job.command = {"--model",
                     kBaseModelMount,
                     "--served-model-name",
                     app.spec.name + "-base",
                     "--lora",
                     app.spec.name + "=" + kModelMount};
    } else {
      job.volumes = {app.model_location + ":" + kModelMount + ":ro:cache"};
      job.command = {"--model", kModelMount, "--served-model-name", app.spec.name};
    }
    job.command.insert(job.command.end(),
                       {"--listen", listen, "--threads", std::to_string(threads)});
    if (!app.spec.task.empty()) job.command.insert(job.command.end(), {"--task", app.spec.task});
  } else {
    job.image = app.spec.image;
    job.command = app.spec.command;
  }
  job.env["PORT"] = std::to_string(port);
  std::string bad_field;
  SOVAI_ASSIGN_OR_RETURN(Job submitted,
                         options_.jobs->Submit(app.project, app.user, std::move(job), &bad_field));
  return submitted.id;
}

void AppService::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    Round();
    lock.lock();
    cv_.wait_for(lock, options_.reconcile_interval, [&] { return stopping_; });
  }
}

void AppService::Round() {
  const bool leading = Leading();
  std::vector<std::string> ids;
  std::vector<AppRoute> withdrawn;  // routes of a server that stopped leading
  {
    std::lock_guard lock(mu_);
    if (options_.is_leader) {
      if (Status st = RefreshLocked(leading); !st.ok()) {
        SOVAI_LOG(WARNING) << "apps: reading the changes of other servers: " << st;
        return;  // a round on stale rows could act on what another server already changed
      }
    }
    if (leading && !leading_) {
      SOVAI_LOG(INFO) << "this server now runs the apps (it leads): it follows their replicas";
      for (const auto& [id, app] : apps_) AdoptLocked(app, *runtime_[id]);
    } else if (!leading && leading_) {
      SOVAI_LOG(WARNING) << "this server no longer leads: it stops running the apps and routes "
                            "no request to their replicas";
      for (const auto& [id, app] : apps_) {
        runtime_[id]->published.reset();
        withdrawn.push_back(RouteOfLocked(app));
        withdrawn.back().ready.clear();
      }
    }
    leading_ = leading;
    if (leading) {
      for (const auto& [id, app] : apps_) ids.push_back(id);
    }
  }
  if (options_.on_route) {
    for (const AppRoute& route : withdrawn) options_.on_route(route);
  }
  for (const std::string& id : ids) Reconcile(id);
}

void AppService::Reconcile(const std::string& app_id) {
  App snapshot;
  std::shared_ptr<Runtime> rt;
  bool generation_ready = false;
  {
    std::lock_guard lock(mu_);
    auto it = apps_.find(app_id);
    if (it == apps_.end()) return;
    snapshot = it->second;
    rt = runtime_[app_id];
    generation_ready = rt->generation_ready;
  }
  ReplicaSurvey survey = SurveyReplicas(snapshot, *rt, generation_ready);
  ReplicaPlan plan;
  {
    // Decided from the app as it is now (the user may have changed it meanwhile).
    std::lock_guard lock(mu_);
    auto it = apps_.find(app_id);
    if (it == apps_.end()) return;
    plan = PlanLocked(it->second, *rt, snapshot.generation, std::move(survey));
  }
  StopReplicas(snapshot, plan.to_stop);
  StartedReplicas started = StartReplicas(snapshot, plan.starts);
  std::optional<AppRoute> publish;
  {
    std::lock_guard lock(mu_);
    auto it = apps_.find(app_id);
    if (it == apps_.end()) return;
    publish = RecordLocked(it->second, *rt, std::move(started), !plan.to_stop.empty());
    // A replica submitted while the app was deleted (Delete saw none, so DELETED at once) is
    // still running: the app stays in the table, invisible, until later ticks have stopped it.
    if (it->second.state == AppState::kDeleted && it->second.replicas.empty()) {
      apps_.erase(it);
      runtime_.erase(app_id);
    }
  }
  if (publish && options_.on_route) options_.on_route(*publish);
}

AppService::ReplicaSurvey AppService::SurveyReplicas(const App& snapshot, Runtime& rt,
                                                     bool generation_ready) {
  const auto now = std::chrono::steady_clock::now();
  ReplicaSurvey survey;
  for (AppReplica r : snapshot.replicas) {
    auto job = options_.jobs->Get(snapshot.project, r.job);
    if (!job.ok() || IsTerminal(job->state)) {
      if (!r.draining) {
        std::string why = job.ok() ? std::string(JobStateName(job->state)) + ": " + job->reason
                                   : job.status().message();
        survey.events.push_back("replica " + r.job + " ended (" + why + ")");
        if (r.generation == snapshot.generation && !generation_ready) {
          survey.failed_start = true;
          survey.failure = "replica " + r.job + " ended before it was ready (" + why +
                           "); see `sovai app logs " + snapshot.spec.name + " --replica " + r.job +
                           "`";
        }
      }
      rt.last_probe.erase(r.job);
      continue;
    }
    if (job->state == JobState::kRunning && r.job_state != "RUNNING" && !r.draining) {
      survey.events.push_back("replica " + r.job + " started on port " + std::to_string(r.port));
    }
    r.job_state = std::string(JobStateName(job->state));
    r.host = job->node;
    if (job->state == JobState::kRunning && !r.draining) {
      auto& last = rt.last_probe[r.job];
      if (!r.ready || now - last >= options_.probe_interval) {
        last = now;
        if (options_.probe(r.host, r.port, snapshot.spec.probe_path)) {
          if (!r.ready) survey.events.push_back("replica " + r.job + " is ready");
          r.ready = true;
          r.probe_failures = 0;
          if (r.generation == snapshot.generation) survey.saw_generation_ready = true;
          survey.saw_ready = true;
        } else if (r.ready && ++r.probe_failures >= kMaxProbeFailures) {
          r.ready = false;
          survey.events.push_back("replica " + r.job + " failed its probe " +
                                  std::to_string(r.probe_failures) + " times; no more requests");
        }
      }
    }
    survey.replicas.push_back(std::move(r));
  }
  return survey;
}

void AppService::ApplySurveyLocked(App& app, Runtime& rt, int64_t snapshot_generation,
                                   ReplicaSurvey& survey) {
  for (std::string& e : survey.events) AddEventLocked(app, std::move(e));
  if (survey.saw_ready) rt.ever_ready = true;
  if (survey.saw_generation_ready && app.generation == snapshot_generation) {
    rt.generation_ready = true;
    rt.start_failures = 0;
  }
  if (survey.failed_start && Serving(app.state)) {
    rt.start_failures += 1;
    if (rt.start_failures >= kMaxAppStartFailures) {
      SetStateLocked(
          app, AppState::kFailed,
          std::to_string(rt.start_failures) + " replicas in a row failed: " + survey.failure);
    }
  }
}

AppService::ReplicaPlan AppService::PlanLocked(App& app, Runtime& rt, int64_t snapshot_generation,
                                               ReplicaSurvey survey) {
  const bool dirty = !survey.events.empty();
  ApplySurveyLocked(app, rt, snapshot_generation, survey);
  ReplicaPlan plan;
  plan.starts = MarkDraining(app, survey.replicas);
  plan.to_stop = DueForStopLocked(app, survey.replicas, env_.NowMonotonicMicros() / 1000);
  app.replicas = std::move(survey.replicas);
  if (dirty) (void)Save(app);
  return plan;
}

std::vector<std::string> AppService::DueForStopLocked(const App& app,
                                                      std::vector<AppReplica>& replicas,
                                                      int64_t now_ms) {
  std::vector<std::string> due;
  for (AppReplica& r : replicas) {
    if (!r.draining || r.stop_sent) continue;
    if (r.drain_since_ms == 0) r.drain_since_ms = now_ms;
    const uint64_t busy = options_.in_flight ? options_.in_flight(app.id, r.job) : 0;
    if (busy == 0 || now_ms - r.drain_since_ms >= options_.drain_timeout.count()) {
      due.push_back(r.job);
      r.stop_sent = true;
    }
  }
  return due;
}

void AppService::StopReplicas(const App& snapshot, const std::vector<std::string>& jobs) {
  for (const std::string& job : jobs) {
    auto stopped = options_.jobs->Stop(snapshot.project, job);
    if (!stopped.ok() && stopped.status().code() != base::StatusCode::kFailedPrecondition) {
      SOVAI_LOG(WARNING).With("app", snapshot.id)
          << "stopping replica " << job << ": " << stopped.status();
    }
  }
}

AppService::StartedReplicas AppService::StartReplicas(const App& snapshot, int count) {
  StartedReplicas started;
  for (int i = 0; i < count; ++i) {
    auto port = FreeLoopbackPort();
    if (!port.ok()) {
      started.error = port.status().message();
      break;
    }
    auto job = StartReplica(snapshot, *port);
    if (!job.ok()) {
      started.error = job.status().message();
      break;
    }
    AppReplica r;
    r.job = *job;
    r.generation = snapshot.generation;
    r.port = *port;
    r.job_state = "QUEUED";
    started.replicas.push_back(std::move(r));
    started.events.push_back(
        SubmittedEvent(*job, *port, options_.jobs->Get(snapshot.project, *job)));
  }
  return started;
}

std::optional<AppRoute> AppService::RecordLocked(App& app, Runtime& rt, StartedReplicas started,
                                                 bool stopped_any) {
  for (size_t i = 0; i < started.replicas.size(); ++i) {
    AppReplica& r = started.replicas[i];
    if (r.generation != app.generation || !Serving(app.state)) {
      // The app changed while the job was submitted: this replica is not wanted after all.
      r.draining = true;
    }
    app.recent_jobs.push_back(r.job);
    if (app.recent_jobs.size() > kMaxRecentJobs) app.recent_jobs.erase(app.recent_jobs.begin());
    app.replicas.push_back(std::move(r));
    AddEventLocked(app, std::move(started.events[i]));
  }
  if (!started.error.empty()) {
    SetStateLocked(app, AppState::kFailed, "starting a replica: " + started.error);
  }
  if (app.state == AppState::kStopping && app.replicas.empty()) {
    SetStateLocked(app, AppState::kStopped, app.reason);
  } else if (app.state == AppState::kDeleting && app.replicas.empty()) {
    SetStateLocked(app, AppState::kDeleted, app.reason);
  } else if (app.state == AppState::kFailed && !app.replicas.empty()) {
    for (AppReplica& r : app.replicas) r.draining = true;
  } else if (Serving(app.state)) {
    SetStateLocked(app, ServingStateLocked(app, rt));
  }
  std::optional<AppRoute> publish;
  AppRoute route = RouteOfLocked(app);
  const bool changed = RouteChanged(rt.published, route);
  if (changed) {
    rt.published = route;
    publish = std::move(route);
  }
  if (changed || !started.replicas.empty() || stopped_any) (void)Save(app);
  return publish;
}

AppState AppService::ServingStateLocked(const App& app, const Runtime& rt) const {
  int ready = 0, active = 0, draining = 0;
  bool all_queued = true;
  for (const AppReplica& r : app.replicas) {
    if (r.draining) {
      ++draining;
      continue;
    }
    ++active;
    if (r.ready && r.generation == app.generation) ++ready;
    if (r.job_state != "QUEUED") all_queued = false;
  }
  if (ready == app.desired_replicas && active == app.desired_replicas && draining == 0) {
    return AppState::kRunning;
  }
  if (!rt.ever_ready) return all_queued && active > 0 ? AppState::kQueued : AppState::kInitializing;
  return AppState::kScaling;
}

}  // namespace sovai::control
