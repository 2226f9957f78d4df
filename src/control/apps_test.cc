// AppService end to end in one process: the real JobService on a real control database, the
// object store's S3 front end on a loopback port and the bubblewrap sandbox (jobs_test_util.h).
// The apps use the image sovai/shell with Python's http.server as the replica, so no ML engine is
// needed. Every wait polls with a deadline. Skips (naming why) where bwrap cannot run, unless
// SOVAI_REQUIRE_SANDBOX is set.
#include "control/apps.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "base/env.h"
#include "control/jobs_test_util.h"
#include "net/client.h"

namespace sovai::control {
namespace {

using base::StatusCode;
using std::chrono::milliseconds;
using testing::kOtherProject;
using testing::kProject;

constexpr char kUser[] = "usr_test";
// How long any wait of this test may take before it fails.
constexpr auto kDeadline = std::chrono::seconds(60);

// A replica that serves `GET /` on $PORT (no shell expansion happens in a command: sh does it).
std::vector<std::string> ServeCommand() {
  return {"sh", "-c", "exec python3 -m http.server --bind 127.0.0.1 $PORT"};
}

int ReadyReplicas(const App& app) {
  return static_cast<int>(
      std::count_if(app.replicas.begin(), app.replicas.end(),
                    [](const AppReplica& r) { return r.ready && !r.draining; }));
}

// RUNNING with exactly `n` replicas, all ready.
std::function<bool(const App&)> RunningWith(int n) {
  return [n](const App& app) {
    return app.state == AppState::kRunning && static_cast<int>(app.replicas.size()) == n &&
           ReadyReplicas(app) == n;
  };
}

bool HasEvent(const App& app, const std::string& part) {
  return std::any_of(app.events.begin(), app.events.end(),
                     [&](const AppEvent& e) { return e.what.find(part) != std::string::npos; });
}

// GET http://127.0.0.1:<port>/ answers 2xx.
bool Answers(uint16_t port) {
  net::ClientOptions options;
  options.port = port;
  net::HttpClient client(options);
  net::ClientRequest request;
  request.method = "GET";
  request.target = "/";
  auto response = client.Send(request);
  return response.ok() && response->status >= 200 && response->status < 300;
}

// The JobService's Env, with a hook run once, on the first clock reading by thread `on` after Arm.
// JobService reads the clock in Submit: armed for the reconcile thread of an app without
// replicas, the hook runs while the loop submits a replica job, between its decision to start a
// replica and its recording of it.
class SubmitHookEnv : public base::EnvWrapper {
 public:
  SubmitHookEnv() : EnvWrapper(base::Env::Default()) {}
  void Arm(std::thread::id on, std::function<void()> hook) {
    std::lock_guard lock(mu_);
    thread_ = on;
    hook_ = std::move(hook);
  }
  int64_t NowUnixMicros() override {
    std::function<void()> hook;
    {
      std::lock_guard lock(mu_);
      if (std::this_thread::get_id() == thread_) hook.swap(hook_);
    }
    if (hook) hook();
    return EnvWrapper::NowUnixMicros();
  }

 private:
  std::mutex mu_;  // guards thread_, hook_
  std::thread::id thread_;
  std::function<void()> hook_;
};

class AppsTest : public testing::JobServiceTest {
 protected:
  void SetUp() override {
    jobs_env_ = &jobs_env_hook_;
    JobServiceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    OpenApps();
  }

  void TearDown() override {
    apps_.reset();  // before the JobService it uses
    JobServiceTest::TearDown();
  }

  void OpenApps() {
    apps_ = StartApps(*db_, is_leader_, [this](const AppRoute& route) {
      std::lock_guard lock(routes_mu_);
      routes_.push_back(route);
      loop_thread_ = std::this_thread::get_id();
    });
  }

  // An AppService on `db` (the fixture's, or another connection to its database) with the
  // fixture's options; its replicas are jobs of the fixture's JobService.
  std::unique_ptr<AppService> StartApps(ControlDb& db, std::function<bool()> is_leader,
                                        std::function<void(const AppRoute&)> on_route = nullptr) {
    AppServiceOptions o;
    o.jobs = service_.get();
    o.flavors = &FlavorCatalog::Default();
    o.region = "EU-WEST-LOCAL";
    o.api_url = "http://127.0.0.1:8080";
    o.on_route = std::move(on_route);
    o.is_leader = std::move(is_leader);
    o.env = apps_env_;
    // Short intervals keep the whole test quick; in_flight is unset, so a draining replica is
    // stopped at once.
    o.reconcile_interval = milliseconds(50);
    o.probe_interval = milliseconds(200);
    o.drain_timeout = milliseconds(1'000);
    auto apps = AppService::Start(db, std::move(o));
    EXPECT_TRUE(apps.ok()) << apps.status();
    return apps.ok() ? std::move(*apps) : nullptr;
  }

  static AppSpec Spec(const std::string& name, int replicas = 1,
                      std::vector<std::string> command = ServeCommand()) {
    AppSpec spec;
    spec.name = name;
    spec.image = "sovai/shell";
    spec.command = std::move(command);
    spec.flavor = "ai1-1-cpu";
    spec.replicas = replicas;
    spec.probe_path = "/";
    return spec;
  }

  App Create(AppSpec spec) {
    auto app = apps_->Create(kProject, kUser, std::move(spec));
    SOVAI_CHECK(app.ok()) << app.status();
    return *app;
  }

  // Polls the app on `on` (nullptr: apps_) until `done` holds, up to kDeadline.
  App WaitForApp(const std::string& id, const std::function<bool(const App&)>& done,
                 const std::string& what, AppService* on = nullptr) {
    if (on == nullptr) on = apps_.get();
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    for (;;) {
      auto app = on->Get(kProject, id);
      SOVAI_CHECK(app.ok()) << app.status();
      if (done(*app)) return *app;
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "app " << id << " is not " << what
                      << " after 60 s: " << AppToJson(*app, "").dump();
        return *app;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  }

  // The replica jobs ever started for the app, oldest first.
  std::vector<Job> ReplicaJobs(const std::string& app_id) {
    auto page = service_->List(kProject, {{std::string(kAppLabel), app_id}}, 100, "");
    SOVAI_CHECK(page.ok()) << page.status();
    std::vector<Job> jobs = page->jobs;
    std::reverse(jobs.begin(), jobs.end());
    return jobs;
  }

  std::vector<AppRoute> RoutesOf(const std::string& app_id, size_t from = 0) {
    std::lock_guard lock(routes_mu_);
    std::vector<AppRoute> out;
    for (size_t i = from; i < routes_.size(); ++i) {
      if (routes_[i].id == app_id) out.push_back(routes_[i]);
    }
    return out;
  }
  // Polls until the last route published for the app satisfies `done`, up to kDeadline.
  bool WaitForRoute(const std::string& app_id, const std::function<bool(const AppRoute&)>& done,
                    size_t from = 0) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    for (;;) {
      std::vector<AppRoute> routes = RoutesOf(app_id, from);
      if (!routes.empty() && done(routes.back())) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  size_t RouteCount() {
    std::lock_guard lock(routes_mu_);
    return routes_.size();
  }

  SubmitHookEnv jobs_env_hook_;      // jobs_env_
  std::function<bool()> is_leader_;  // AppServiceOptions::is_leader of OpenApps
  base::Env* apps_env_ = nullptr;    // AppServiceOptions::env of StartApps
  std::unique_ptr<AppService> apps_;
  std::mutex routes_mu_;          // guards routes_
  std::vector<AppRoute> routes_;  // every on_route call, in order
  std::thread::id loop_thread_;   // the reconcile thread, which calls on_route
};

TEST_F(AppsTest, CreateRunsTheReplicasAndPublishesTheirRoute) {
  AppSpec spec = Spec("web");
  spec.labels = {{"team", "web"}};
  App created = Create(spec);
  EXPECT_EQ(created.state, AppState::kQueued);
  EXPECT_EQ(created.desired_replicas, 1);
  EXPECT_EQ(created.generation, 1);
  EXPECT_EQ(created.id.rfind("app_", 0), 0u) << created.id;

  App app = WaitForApp(created.id, RunningWith(1), "RUNNING with 1 ready replica");
  ASSERT_EQ(app.replicas.size(), 1u);
  const AppReplica& replica = app.replicas[0];
  EXPECT_EQ(replica.generation, 1);
  EXPECT_EQ(replica.job_state, "RUNNING");
  EXPECT_TRUE(Answers(replica.port)) << "the replica serves on 127.0.0.1:" << replica.port;
  EXPECT_TRUE(HasEvent(app, "replica " + replica.job + " is ready"));
  // The replica is a job of the app's project, labelled with the app, with PORT set.
  auto job = service_->Get(kProject, replica.job);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_EQ(job->spec.labels.at(std::string(kAppLabel)), app.id);
  EXPECT_EQ(job->spec.labels.at("team"), "web");
  EXPECT_EQ(job->spec.env.at("PORT"), std::to_string(replica.port));
  const nlohmann::json json = AppToJson(app, "http://api");
  EXPECT_EQ(json["status"]["ready_replicas"], 1);
  EXPECT_EQ(json["url"], "http://api/apps/" + app.id + "/");

  auto route = apps_->Route(app.id);
  ASSERT_TRUE(route.has_value());
  EXPECT_EQ(route->state, AppState::kRunning);
  EXPECT_FALSE(route->model) << "a user image";
  EXPECT_TRUE(route->serving());
  EXPECT_EQ(route->labels, spec.labels);
  ASSERT_EQ(route->ready.size(), 1u);
  EXPECT_EQ(route->ready[0], (AppRoute::Target{replica.job, replica.port}));
  // on_route runs after the app's state is recorded: it may come a moment after Get saw it.
  EXPECT_TRUE(WaitForRoute(app.id, [&](const AppRoute& r) {
    return r.state == AppState::kRunning && r.ready == route->ready;
  })) << "on_route was called with the ready replica";
  EXPECT_EQ(apps_->Routes().size(), 1u);
  EXPECT_FALSE(apps_->Route("app_missing").has_value());

  // Get by name and by id; List with and without a label filter.
  EXPECT_EQ(apps_->Get(kProject, "web")->id, app.id);
  EXPECT_EQ(apps_->Get(kProject, app.id)->spec.name, "web");
  AppSpec other = Spec("batch", 0);
  other.labels = {{"team", "ops"}};
  App idle = Create(other);
  EXPECT_EQ(WaitForApp(idle.id, RunningWith(0), "RUNNING with no replica").replicas.size(), 0u);
  auto web_team = apps_->List(kProject, {{"team", "web"}});
  ASSERT_TRUE(web_team.ok());
  ASSERT_EQ(web_team->size(), 1u);
  EXPECT_EQ((*web_team)[0].id, app.id);
  auto all = apps_->List(kProject, {});
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, app.id) << "oldest first";
  EXPECT_EQ(apps_->List(kProject, {{"team", "nobody"}})->size(), 0u);

  // A taken name; a flavor that is unknown or too large for this machine.
  std::string bad_field;
  auto duplicate = apps_->Create(kProject, kUser, Spec("web"), &bad_field);
  EXPECT_EQ(duplicate.status().code(), StatusCode::kAlreadyExists) << duplicate.status();
  EXPECT_EQ(bad_field, "name");
  AppSpec unknown = Spec("unknown");
  unknown.flavor = "no-such-flavor";
  bad_field.clear();
  EXPECT_EQ(apps_->Create(kProject, kUser, unknown, &bad_field).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(bad_field, "flavor");
  AppSpec huge = Spec("huge");
  huge.units = host_.cpus + 1;
  bad_field.clear();
  EXPECT_EQ(apps_->Create(kProject, kUser, huge, &bad_field).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(bad_field, "flavor");

  // Another project sees none of it, and may use the same name.
  for (const std::string& key : {std::string("web"), app.id}) {
    EXPECT_EQ(apps_->Get(kOtherProject, key).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(apps_->Scale(kOtherProject, key, Spec("web", 3)).status().code(),
              StatusCode::kNotFound);
    EXPECT_EQ(apps_->Stop(kOtherProject, key).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(apps_->Delete(kOtherProject, key).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(apps_->ReadLog(kOtherProject, key, "", 0, 100).status().code(),
              StatusCode::kNotFound);
  }
  EXPECT_TRUE(apps_->List(kOtherProject, {})->empty());
  auto theirs = apps_->Create(kOtherProject, kUser, Spec("web", 0));
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_NE(theirs->id, app.id);
  EXPECT_EQ(apps_->Get(kProject, "web")->id, app.id);
}

TEST_F(AppsTest, ScaleStartsDrainsAndStopsReplicas) {
  App app = Create(Spec("scaled", 1));
  app = WaitForApp(app.id, RunningWith(1), "RUNNING with 1 replica");
  const std::string first = app.replicas[0].job;

  auto scaled = apps_->Scale(kProject, "scaled", Spec("scaled", 2));
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  EXPECT_EQ(scaled->desired_replicas, 2);
  app = WaitForApp(app.id, RunningWith(2), "RUNNING with 2 replicas");
  std::set<std::string> jobs;
  for (const AppReplica& r : app.replicas) jobs.insert(r.job);
  EXPECT_TRUE(jobs.contains(first)) << "scaling up keeps the replica that serves";
  EXPECT_TRUE(HasEvent(app, "scale 1 -> 2: requested by the user"));
  EXPECT_EQ(apps_->Route(app.id)->ready.size(), 2u);
  EXPECT_EQ(ReplicaJobs(app.id).size(), 2u);

  ASSERT_TRUE(apps_->Scale(kProject, app.id, Spec("scaled", 0)).ok());
  app = WaitForApp(app.id, RunningWith(0), "RUNNING with no replica");
  EXPECT_TRUE(apps_->Route(app.id)->ready.empty());
  for (const std::string& job : jobs) {
    Job ended = WaitFor(job);
    EXPECT_EQ(ended.state, JobState::kInterrupted) << job << ": " << ended.reason;
  }
  EXPECT_EQ(ReplicaJobs(app.id).size(), 2u) << "no replica was started for 0";
  // While it scaled, the app was SCALING, never RUNNING short of replicas.
  bool saw_scaling = false;
  for (const AppRoute& route : RoutesOf(app.id)) {
    if (route.state == AppState::kScaling) saw_scaling = true;
    if (route.state == AppState::kRunning) {
      EXPECT_EQ(static_cast<int>(route.ready.size()), route.desired_replicas);
    }
  }
  EXPECT_TRUE(saw_scaling);
}

TEST_F(AppsTest, RollingUpdateStartsTheNewGenerationBeforeStoppingTheOld) {
  App app = Create(Spec("rolling", 1));
  app = WaitForApp(app.id, RunningWith(1), "RUNNING with 1 replica");
  const std::string old_job = app.replicas[0].job;
  const size_t routes_before = RouteCount();

  AppSpec updated = Spec("rolling", 1);
  updated.env = {{"GENERATION", "2"}};
  auto update = apps_->Update(kProject, app.id, updated, /*rolling=*/true);
  ASSERT_TRUE(update.ok()) << update.status();
  EXPECT_EQ(update->generation, 2);
  app = WaitForApp(
      app.id, [](const App& a) { return RunningWith(1)(a) && a.replicas[0].generation == 2; },
      "RUNNING with 1 replica of generation 2");
  const std::string new_job = app.replicas[0].job;
  ASSERT_NE(new_job, old_job);
  EXPECT_EQ(service_->Get(kProject, new_job)->spec.env.at("GENERATION"), "2");
  Job old_ended = WaitFor(old_job);
  EXPECT_EQ(old_ended.state, JobState::kInterrupted) << old_ended.reason;

  // Every route published during the update had a ready replica: first the old one, then the
  // new one, never none.
  std::vector<AppRoute> routes = RoutesOf(app.id, routes_before);
  ASSERT_FALSE(routes.empty());
  bool saw_new = false;
  for (const AppRoute& route : routes) {
    ASSERT_EQ(route.ready.size(), 1u) << "state " << AppStateName(route.state);
    if (route.ready[0].job == new_job) {
      saw_new = true;
    } else {
      EXPECT_EQ(route.ready[0].job, old_job);
      EXPECT_FALSE(saw_new) << "the old replica came back after the new one";
    }
  }
  EXPECT_TRUE(saw_new);
  EXPECT_EQ(routes.back().generation, 2);
  // The new replica was ready before the old one was told to stop.
  int64_t new_ready_at = 0;
  for (const AppEvent& e : app.events) {
    if (e.what == "replica " + new_job + " is ready") new_ready_at = e.at_unix_micros;
  }
  ASSERT_NE(new_ready_at, 0);
  int64_t old_stopped_at = 0;
  for (const JobTransition& t : old_ended.history) {
    if (t.state == JobState::kFinalizing) old_stopped_at = t.at_unix_micros;
  }
  ASSERT_NE(old_stopped_at, 0);
  EXPECT_LE(new_ready_at, old_stopped_at);
  EXPECT_TRUE(HasEvent(app, "update: rolling replacement to generation 2"));
}

TEST_F(AppsTest, AKilledReplicaIsReplaced) {
  App app = Create(Spec("killed", 1));
  app = WaitForApp(app.id, RunningWith(1), "RUNNING with 1 replica");
  const std::string victim = app.replicas[0].job;
  auto pids = service_->ProcessIds(victim);
  ASSERT_TRUE(pids.ok()) << pids.status();
  ASSERT_FALSE(pids->empty());
  for (pid_t pid : *pids) (void)::kill(pid, SIGKILL);

  app = WaitForApp(
      app.id, [&](const App& a) { return RunningWith(1)(a) && a.replicas[0].job != victim; },
      "RUNNING with a replacement replica");
  EXPECT_TRUE(Answers(app.replicas[0].port));
  EXPECT_TRUE(HasEvent(app, "replica " + victim + " ended (")) << AppToJson(app, "").dump();
  Job ended = WaitFor(victim);
  EXPECT_NE(ended.state, JobState::kInterrupted) << "it ended by itself, not by a stop";
  EXPECT_EQ(ReplicaJobs(app.id).size(), 2u);
  EXPECT_TRUE(app.reason.empty()) << app.reason;
}

TEST_F(AppsTest, ReplicasThatExitAtOnceFailTheAppAfterThreeTries) {
  App app = Create(Spec("crashing", 1, {"sh", "-c", "exit 3"}));
  app = WaitForApp(
      app.id, [](const App& a) { return a.state == AppState::kFailed; }, "FAILED");
  std::vector<Job> jobs = ReplicaJobs(app.id);
  ASSERT_EQ(jobs.size(), static_cast<size_t>(kMaxAppStartFailures));
  for (const Job& job : jobs) {
    EXPECT_EQ(WaitFor(job.id).exit_code, 3) << job.id;
  }
  EXPECT_NE(app.reason.find("3 replicas in a row failed"), std::string::npos) << app.reason;
  EXPECT_NE(app.reason.find("replica " + jobs.back().id + " ended before it was ready"),
            std::string::npos)
      << app.reason;
  EXPECT_NE(app.reason.find("sovai app logs crashing --replica " + jobs.back().id),
            std::string::npos)
      << app.reason;
  auto route = apps_->Route(app.id);
  ASSERT_TRUE(route.has_value());
  EXPECT_FALSE(route->serving());
  // FAILED cannot be scaled; it can be started again, and fails again after three more tries.
  EXPECT_EQ(apps_->Scale(kProject, app.id, Spec("crashing", 2)).status().code(),
            StatusCode::kFailedPrecondition);
  auto started = apps_->StartApp(kProject, app.id);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(started->state, AppState::kQueued);
  EXPECT_TRUE(started->reason.empty()) << started->reason;
  app = WaitForApp(
      app.id,
      [&](const App& a) {
        return a.state == AppState::kFailed &&
               ReplicaJobs(app.id).size() == 2 * static_cast<size_t>(kMaxAppStartFailures);
      },
      "FAILED again after 3 more replicas");
  EXPECT_EQ(ReplicaJobs(app.id).size(), 2 * static_cast<size_t>(kMaxAppStartFailures));
}

// As for a job (JobService::CheckSources): a missing archive is the request's error, not every
// replica's after the app was accepted.
TEST_F(AppsTest, AnOciImageWithoutItsArchiveIsRefusedWhenCreatedOrUpdated) {
  AppSpec boxed = Spec("boxed");
  boxed.image = "oci:data@EU-WEST-LOCAL/images/missing.tar";
  std::string field;
  auto refused = apps_->Create(kProject, kUser, boxed, &field);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kNotFound) << refused.status();
  EXPECT_EQ(field, "image");
  EXPECT_NE(refused.status().message().find(
                "image: the archive s3://data/images/missing.tar does not exist"),
            std::string::npos)
      << refused.status();
  auto listed = apps_->List(kProject, {});
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());

  App web = Create(Spec("web", 0));
  field.clear();
  auto updated = apps_->Update(kProject, web.id, boxed, /*rolling=*/true, &field);
  ASSERT_FALSE(updated.ok());
  EXPECT_EQ(updated.status().code(), StatusCode::kNotFound) << updated.status();
  EXPECT_EQ(field, "image");
  auto after = apps_->Get(kProject, web.id);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->spec.image, "sovai/shell");
  EXPECT_EQ(after->generation, 1);
}

TEST_F(AppsTest, StopStartAndDelete) {
  App app = Create(Spec("lifecycle", 1));
  app = WaitForApp(app.id, RunningWith(1), "RUNNING with 1 replica");
  const std::string first = app.replicas[0].job;
  EXPECT_EQ(apps_->StartApp(kProject, app.id).status().code(), StatusCode::kFailedPrecondition);

  auto stopping = apps_->Stop(kProject, "lifecycle");
  ASSERT_TRUE(stopping.ok()) << stopping.status();
  EXPECT_EQ(stopping->state, AppState::kStopping);
  app = WaitForApp(
      app.id, [](const App& a) { return a.state == AppState::kStopped && a.replicas.empty(); },
      "STOPPED without replicas");
  EXPECT_EQ(WaitFor(first).state, JobState::kInterrupted);
  EXPECT_FALSE(apps_->Route(app.id)->serving());
  EXPECT_TRUE(apps_->Route(app.id)->ready.empty());
  EXPECT_EQ(apps_->Stop(kProject, app.id)->state, AppState::kStopped) << "idempotent";

  auto started = apps_->StartApp(kProject, app.id);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(started->state, AppState::kQueued);
  app = WaitForApp(app.id, RunningWith(1), "RUNNING again");
  const std::string second = app.replicas[0].job;
  EXPECT_NE(second, first);
  auto log = apps_->ReadLog(kProject, app.id, first, 0, 1 << 20);
  EXPECT_TRUE(log.ok()) << "a recent replica's log: " << log.status();
  EXPECT_EQ(apps_->ReadLog(kProject, app.id, "job_unknown", 0, 100).status().code(),
            StatusCode::kNotFound);

  const size_t routes_before = RouteCount();
  auto deleting = apps_->Delete(kProject, app.id);
  ASSERT_TRUE(deleting.ok()) << deleting.status();
  EXPECT_EQ(deleting->state, AppState::kDeleting);
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (apps_->Get(kProject, app.id).ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(apps_->Get(kProject, app.id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(apps_->Get(kProject, "lifecycle").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(WaitFor(second).state, JobState::kInterrupted);
  EXPECT_TRUE(apps_->List(kProject, {})->empty());
  EXPECT_FALSE(apps_->Route(app.id).has_value());
  // The gateway is told it is gone (on_route runs once the app has left the table).
  EXPECT_TRUE(WaitForRoute(
      app.id, [](const AppRoute& r) { return r.state == AppState::kDeleted && r.ready.empty(); },
      routes_before));

  // The name is free again.
  App again = Create(Spec("lifecycle", 0));
  EXPECT_NE(again.id, app.id);
  EXPECT_EQ(apps_->Get(kProject, "lifecycle")->id, again.id);
}

// Regression: a replica whose job waited in the queue had the event "replica job_… started on
// port N" while its job was QUEUED (waiting for 1 CPU, 0 free). It is "queued", with why, until
// its job runs; "started" comes then.
TEST_F(AppsTest, AQueuedReplicaIsSaidQueuedWithWhyAndStartedOnlyWhenItRuns) {
  // Jobs that hold every CPU of this machine (a job has at most the flavor's 12 units).
  std::vector<std::string> hogs;
  for (int left = host_.cpus; left > 0;) {
    JobSpec hog;
    hog.image = "sovai/shell";
    hog.command = {"sleep", "60"};
    hog.flavor = "ai1-1-cpu";
    hog.units = std::min(left, 12);
    left -= hog.units;
    auto job = service_->Submit(kProject, kUser, hog);
    ASSERT_TRUE(job.ok()) << job.status();
    hogs.push_back(job->id);
  }
  for (const std::string& id : hogs) WaitFor(id, JobState::kRunning);

  App app = Create(Spec("waits", 1));
  app = WaitForApp(
      app.id, [](const App& a) { return !a.replicas.empty() && HasEvent(a, " queued on port "); },
      "with a queued replica");
  const AppReplica replica = app.replicas[0];
  EXPECT_TRUE(HasEvent(app, "replica " + replica.job + " queued on port " +
                                std::to_string(replica.port) +
                                " (position 1 in the queue: "
                                "waiting for 1 CPU, 0 free)"))
      << AppToJson(app, "").dump();
  std::this_thread::sleep_for(milliseconds(300));  // a few reconcile rounds: still queued
  app = *apps_->Get(kProject, app.id);
  EXPECT_EQ(app.state, AppState::kQueued);
  EXPECT_FALSE(HasEvent(app, " started on port ")) << AppToJson(app, "").dump();

  for (const std::string& id : hogs) ASSERT_TRUE(service_->Stop(kProject, id).ok());
  app = WaitForApp(app.id, RunningWith(1), "RUNNING once the CPUs are free");
  EXPECT_TRUE(
      HasEvent(app, "replica " + replica.job + " started on port " + std::to_string(replica.port)))
      << AppToJson(app, "").dump();
}

// A stop or a delete that lands while the loop submits a replica job: the replica is stopped
// anyway (a deleted app must not leave its replica running, unowned).
TEST_F(AppsTest, AReplicaStartedWhileTheAppStopsOrIsDeletedIsStopped) {
  for (const bool remove : {false, true}) {
    SCOPED_TRACE(remove ? "delete" : "stop");
    const std::string name = remove ? "deleted-early" : "stopped-early";
    App app = Create(Spec(name, 0));
    WaitForApp(app.id, RunningWith(0), "RUNNING with no replica");
    // Once on_route has been called, loop_thread_ is known.
    ASSERT_TRUE(WaitForRoute(app.id, [](const AppRoute& r) { return r.serving(); }));
    const size_t routes_before = RouteCount();
    std::thread::id loop_thread;
    {
      std::lock_guard lock(routes_mu_);
      loop_thread = loop_thread_;
    }
    std::atomic<bool> fired = false;
    jobs_env_hook_.Arm(loop_thread, [&] {
      fired = true;
      auto done = remove ? apps_->Delete(kProject, app.id) : apps_->Stop(kProject, app.id);
      EXPECT_TRUE(done.ok()) << done.status();
      EXPECT_EQ(done->state, remove ? AppState::kDeleted : AppState::kStopped)
          << "no replica yet: at once";
    });
    ASSERT_TRUE(apps_->Scale(kProject, app.id, Spec(name, 1)).ok());
    // The replica the loop was submitting is stopped, and the app ends without replicas.
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    std::vector<Job> jobs;
    while ((jobs = ReplicaJobs(app.id)).empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_TRUE(fired) << "the hook ran while the replica was submitted";
    Job ended = WaitFor(jobs[0].id);
    EXPECT_EQ(ended.state, JobState::kInterrupted) << ended.reason;
    if (remove) {
      EXPECT_EQ(apps_->Get(kProject, app.id).status().code(), StatusCode::kNotFound);
      EXPECT_TRUE(WaitForRoute(
          app.id, [](const AppRoute& r) { return r.state == AppState::kDeleted; }, routes_before));
    } else {
      App stopped = WaitForApp(
          app.id, [](const App& a) { return a.replicas.empty(); }, "without replicas");
      EXPECT_EQ(stopped.state, AppState::kStopped);
    }
    EXPECT_EQ(ReplicaJobs(app.id).size(), 1u);
  }
}

TEST_F(AppsTest, MeasureUsageReportsCpuAndMemoryOfTheReadyReplicas) {
  App app = Create(
      Spec("busy", 1,
           {"sh", "-c", "python3 -m http.server --bind 127.0.0.1 $PORT & while :; do :; done"}));
  app = WaitForApp(app.id, RunningWith(1), "RUNNING with 1 replica");
  AppUsage first = apps_->MeasureUsage(app.id);
  EXPECT_EQ(first.replicas, 1);
  EXPECT_GT(first.ram_percent, 0);
  EXPECT_LT(first.ram_percent, 100);
  EXPECT_EQ(first.cpu_percent, 0) << "no previous measurement to compare with";
  // CPU use is the change since the previous call: give the loop a second to burn. The replica
  // is pinned to its flavor's one CPU, so it uses at most 100% of it. On a loaded machine (other
  // builds share the cores) a second may give the loop little time: a few more windows may be
  // needed before one shows it burning.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  AppUsage second = apps_->MeasureUsage(app.id);
  EXPECT_EQ(second.replicas, 1);
  EXPECT_GT(second.cpu_percent, 0);
  EXPECT_LT(second.cpu_percent, 150);
  EXPECT_GT(second.ram_percent, 0);
  double busiest = second.cpu_percent;
  for (int window = 0; window < 30 && busiest <= 20; ++window) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    AppUsage next = apps_->MeasureUsage(app.id);
    EXPECT_LT(next.cpu_percent, 150);
    busiest = std::max(busiest, next.cpu_percent);
  }
  EXPECT_GT(busiest, 20) << "the replica burns a CPU";

  AppUsage none = apps_->MeasureUsage("app_missing");
  EXPECT_EQ(none.replicas, 0);
  EXPECT_EQ(none.cpu_percent, 0);
}

TEST_F(AppsTest, AfterARestartTheAppComesBackWithNewReplicas) {
  App app = Create(Spec("survivor", 1));
  app = WaitForApp(app.id, RunningWith(1), "RUNNING with 1 replica");
  const std::string before = app.replicas[0].job;
  App stopped = Create(Spec("resting", 0));
  ASSERT_TRUE(apps_->Stop(kProject, stopped.id).ok());
  WaitForApp(
      stopped.id, [](const App& a) { return a.state == AppState::kStopped; }, "STOPPED");

  apps_.reset();
  OpenService();
  ASSERT_FALSE(HasFatalFailure());
  OpenApps();
  ASSERT_FALSE(HasFatalFailure());

  EXPECT_EQ(WaitFor(before).state, JobState::kInterrupted);
  app = WaitForApp(
      app.id, [&](const App& a) { return RunningWith(1)(a) && a.replicas[0].job != before; },
      "RUNNING with a new replica");
  EXPECT_TRUE(Answers(app.replicas[0].port));
  EXPECT_TRUE(HasEvent(app, "created with 1 replica(s)")) << "events are kept";
  EXPECT_EQ(app.spec, Spec("survivor", 1));
  EXPECT_EQ(apps_->Get(kProject, "resting")->state, AppState::kStopped);
  EXPECT_TRUE(ReplicaJobs(stopped.id).empty());
}

// Two servers on one database: while this server does not lead, its loop starts no replica and
// publishes no route; once it leads, its next round does; when it stops leading, it withdraws the
// routes and leaves the replicas alone.
TEST_F(AppsTest, TheLoopActsOnlyWhileThisServerLeads) {
  std::atomic<bool> leader = false;
  is_leader_ = [&] { return leader.load(); };
  apps_.reset();
  OpenApps();
  App app = Create(Spec("waits", 1));
  std::this_thread::sleep_for(milliseconds(500));  // ten rounds
  EXPECT_TRUE(ReplicaJobs(app.id).empty()) << "a follower starts no replica";
  EXPECT_EQ(apps_->Get(kProject, app.id)->state, AppState::kQueued);
  EXPECT_TRUE(RoutesOf(app.id).empty()) << "a follower publishes no route";

  leader = true;
  app = WaitForApp(app.id, RunningWith(1), "RUNNING with 1 replica once this server leads");
  EXPECT_TRUE(WaitForRoute(app.id, [](const AppRoute& r) { return r.ready.size() == 1; }));
  EXPECT_EQ(apps_->Route(app.id)->ready.size(), 1u);

  leader = false;
  EXPECT_TRUE(WaitForRoute(app.id, [](const AppRoute& r) { return r.ready.empty(); }))
      << "the routes are withdrawn";
  EXPECT_TRUE(apps_->Route(app.id)->ready.empty());
  EXPECT_EQ(apps_->MeasureUsage(app.id).replicas, 0);
  ASSERT_TRUE(apps_->SetDesiredReplicas(app.id, 3, "a follower's autoscaler").ok());
  auto scaled = apps_->Scale(kProject, app.id, Spec("waits", 2));
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(ReplicaJobs(app.id).size(), 1u) << "a follower starts no replica";
  EXPECT_EQ(service_->Get(kProject, app.replicas[0].job)->state, JobState::kRunning)
      << "nor stops one";

  leader = true;
  app = WaitForApp(app.id, RunningWith(2), "RUNNING with 2 replicas once this server leads");
  EXPECT_EQ(ReplicaJobs(app.id).size(), 2u) << "the replica it ran is followed, not replaced";
}

// Two servers on one database, each with its own connection: what the follower is asked, the
// leader runs, and the follower shows the leader's replicas.
TEST_F(AppsTest, AFollowersCallsAreRunByTheLeader) {
  is_leader_ = [] { return true; };
  apps_.reset();
  OpenApps();
  auto follower_db = ControlDb::Open(state_);
  ASSERT_TRUE(follower_db.ok()) << follower_db.status();
  std::unique_ptr<AppService> follower = StartApps(**follower_db, [] { return false; });
  ASSERT_NE(follower, nullptr);

  auto created = follower->Create(kProject, kUser, Spec("shared", 1));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(follower->Create(kProject, kUser, Spec("shared")).status().code(),
            StatusCode::kAlreadyExists);
  App app = WaitForApp(created->id, RunningWith(1), "RUNNING on the leader");
  App seen =
      WaitForApp(created->id, RunningWith(1), "RUNNING as the follower shows it", follower.get());
  EXPECT_EQ(seen.replicas[0].job, app.replicas[0].job);
  EXPECT_EQ(seen.replicas[0].port, app.replicas[0].port);
  EXPECT_TRUE(follower->Route(app.id)->ready.empty()) << "only the leader routes";

  ASSERT_TRUE(follower->Scale(kProject, "shared", Spec("shared", 2)).ok());
  app = WaitForApp(app.id, RunningWith(2), "RUNNING with 2 replicas");
  EXPECT_TRUE(HasEvent(app, "scale 1 -> 2: requested by the user"));
  ASSERT_TRUE(follower->Stop(kProject, "shared").ok());
  app = WaitForApp(
      app.id, [](const App& a) { return a.state == AppState::kStopped; }, "STOPPED");
  for (const Job& job : ReplicaJobs(app.id)) EXPECT_TRUE(IsTerminal(WaitFor(job.id).state));
  ASSERT_TRUE(follower->StartApp(kProject, app.id).ok());
  WaitForApp(app.id, RunningWith(2), "RUNNING again");
  ASSERT_TRUE(follower->Delete(kProject, app.id).ok());
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (apps_->Get(kProject, app.id).ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(apps_->Get(kProject, app.id).status().code(), StatusCode::kNotFound);
  for (const Job& job : ReplicaJobs(app.id)) EXPECT_TRUE(IsTerminal(WaitFor(job.id).state));
  follower.reset();
}

// Two servers on one database: a row that another server changed after this one read it is not
// overwritten; the call fails with Aborted, and the next one sees the change.
TEST_F(AppsTest, AWriteOverAnotherServersChangeIsRefused) {
  is_leader_ = [] { return true; };
  SubmitHookEnv hook;
  apps_env_ = &hook;
  apps_.reset();
  OpenApps();
  App app = Create(Spec("idle", 0));
  WaitForApp(app.id, RunningWith(0), "RUNNING with no replica");
  auto row_reason = [&] {
    std::string reason = "?";
    EXPECT_TRUE(db_->Read([&](base::Database& sql) -> base::Status {
                     SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                                            sql.Prepare("SELECT reason FROM apps WHERE id = ?1"));
                     st.Bind(1, app.id);
                     SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
                     if (row) reason = st.ColumnText(0);
                     return base::Status();
                   })
                    .ok());
    return reason;
  };
  // Scale reads the clock for its event after it read the rows and before it writes: the other
  // server's write comes in between.
  hook.Arm(std::this_thread::get_id(), [&] {
    ASSERT_TRUE(db_->Write([&](base::Database& sql) -> base::Status {
                     SOVAI_ASSIGN_OR_RETURN(
                         base::Statement st,
                         sql.Prepare("UPDATE apps SET reason = 'changed elsewhere', updated_at = "
                                     "updated_at + 1 WHERE id = ?1"));
                     st.Bind(1, app.id);
                     return st.Run();
                   })
                    .ok());
  });
  auto scaled = apps_->Scale(kProject, app.id, Spec("idle", 0));
  EXPECT_EQ(scaled.status().code(), StatusCode::kAborted) << scaled.status();
  EXPECT_EQ(row_reason(), "changed elsewhere") << "not overwritten";
  auto again = apps_->Scale(kProject, app.id, Spec("idle", 0));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->reason, "changed elsewhere") << "the retry saw the change";
  EXPECT_EQ(row_reason(), "changed elsewhere");
}

}  // namespace
}  // namespace sovai::control
