// A budget cap on the real JobService (the fixture of jobs_test_util.h: control database, object
// store over S3, bwrap): admission refuses what the cap cannot pay for, and the cap watcher stops
// a running job once the month's spend reaches the cap. Skips where bwrap cannot run.
#include <gtest/gtest.h>

#include <thread>

#include "control/apps.h"
#include "control/billing_service.h"
#include "control/jobs.h"
#include "control/jobs_test_util.h"

namespace sovai::control {
namespace {

using testing::kProject;

class BillingJobsTest : public testing::JobServiceTest {
 protected:
  void SetUp() override {
    JobServiceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // The fixture's service has no admission check: replace it by one wired to billing.
    service_.reset();
    BillingServiceOptions b;
    b.flavors = &FlavorCatalog::Default();
    b.watch_period = std::chrono::milliseconds(20);
    b.sample_period = std::chrono::milliseconds(0);
    auto billing = BillingService::Start(*db_, b);
    ASSERT_TRUE(billing.ok()) << billing.status();
    billing_ = std::move(*billing);
    JobServiceOptions o;
    o.data_dir = data_dir_;
    o.region = "EU-WEST-LOCAL";
    o.flavors = &FlavorCatalog::Default();
    o.capacity.cpus = host_.cpus;
    o.capacity.memory_bytes = uint64_t{64} << 30;
    o.cpu_ids = host_.cpu_ids;
    o.s3_access = [this](const std::string& project,
                         const std::string& /*region*/) -> base::Result<S3Access> {
      auto it = keys_.find(project);
      if (it == keys_.end()) return base::NotFoundError("no key for " + project);
      return S3Access{s3_.endpoint(), exec::testing::kS3TestRegion, it->second.access_key,
                      it->second.secret_key};
    };
    o.sandbox = sandbox_.get();
    o.stop_grace = std::chrono::milliseconds(500);
    o.admission_check = [this](const std::string& project, const JobSpec& spec) {
      return billing_->AdmissionCheck(project, spec);
    };
    auto service = JobService::Start(*db_, o);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
    billing_->AttachWorkloads(service_.get(), nullptr);
  }

  void TearDown() override {
    if (billing_) billing_->Shutdown();
    apps_.reset();  // before the JobService it uses
    service_.reset();
    billing_.reset();
    JobServiceTest::TearDown();
  }

  static JobSpec Sleep(int64_t timeout_s) {
    JobSpec spec;
    spec.image = "sovai/shell";
    spec.command = {"sleep", "60"};
    spec.flavor = "ai1-1-cpu";  // 0.0005 € per minute
    spec.units = 1;
    spec.timeout_s = timeout_s;
    return spec;
  }

  // An AppService on the service, whose replicas are ready as soon as they run.
  void StartApps() {
    AppServiceOptions o;
    o.jobs = service_.get();
    o.flavors = &FlavorCatalog::Default();
    o.region = "EU-WEST-LOCAL";
    o.api_url = "http://127.0.0.1:8080";
    o.probe = [](const std::string&, uint16_t, const std::string&) { return true; };
    o.reconcile_interval = std::chrono::milliseconds(50);
    o.drain_timeout = std::chrono::milliseconds(500);
    auto apps = AppService::Start(*db_, std::move(o));
    ASSERT_TRUE(apps.ok()) << apps.status();
    apps_ = std::move(*apps);
    billing_->AttachWorkloads(service_.get(), apps_.get());
  }

  // Polls until `done(app)`, up to 60 s.
  App WaitForApp(const std::string& id, const std::function<bool(const App&)>& done) {
    for (int i = 0; i < 3000; ++i) {
      auto app = apps_->Get(kProject, id);
      SOVAI_CHECK(app.ok()) << app.status();
      if (done(*app)) return *app;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    auto app = apps_->Get(kProject, id);
    ADD_FAILURE() << "app " << id << " did not get there in 60 s: " << AppToJson(*app, "").dump();
    return *app;
  }

  std::unique_ptr<BillingService> billing_;
  std::unique_ptr<AppService> apps_;
};

TEST_F(BillingJobsTest, TheCapRefusesWhatItCannotPayAndStopsARunningJob) {
  ASSERT_TRUE(billing_->SetBudget(kProject, Budget{500, 80}).ok());  // 0.0005 €: one minute

  // Two minutes at its timeout do not fit: refused before anything is queued.
  auto refused = service_->Submit(kProject, "usr_test", Sleep(120));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("0.001000"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("0.000500"), std::string::npos) << refused.status();
  auto listed = service_->List(kProject, {}, 10, "");
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->jobs.empty());

  // One minute fits exactly; once it runs, its first started minute reaches the cap and the
  // watcher stops it like `sovai job stop`, with the budget as the reason.
  auto admitted = service_->Submit(kProject, "usr_test", Sleep(60));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  Job ended = WaitFor(admitted->id);
  EXPECT_EQ(ended.state, JobState::kInterrupted) << ended.reason;
  EXPECT_EQ(ended.reason, "the project's monthly budget cap of 0.000500 € was reached");
  bool ran = false;
  for (const JobTransition& t : ended.history) ran = ran || t.state == JobState::kRunning;
  EXPECT_TRUE(ran);

  auto report = billing_->GetBudget(kProject);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->spent_micro_eur, 500);
  EXPECT_TRUE(report->capped);
  // A capped project admits nothing more.
  auto after = service_->Submit(kProject, "usr_test", Sleep(1));
  EXPECT_EQ(after.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(after.status().message().find("is reached"), std::string::npos) << after.status();
  // Another project is not affected.
  auto other = service_->Submit(testing::kOtherProject, "usr_test", Sleep(1));
  EXPECT_TRUE(other.ok()) << other.status();
}

TEST_F(BillingJobsTest, TheCapStopsTheProjectsAppsAndTheirReplicas) {
  StartApps();
  AppSpec spec;
  spec.name = "web";
  spec.image = "sovai/shell";
  spec.command = {"sleep", "60"};
  spec.flavor = "ai1-1-cpu";
  spec.replicas = 1;
  spec.probe_path = "/";
  auto created = apps_->Create(kProject, "usr_test", spec);
  ASSERT_TRUE(created.ok()) << created.status();
  App running = WaitForApp(created->id, [](const App& app) {
    return app.state == AppState::kRunning && !app.replicas.empty() && app.replicas[0].ready;
  });
  ASSERT_EQ(running.state, AppState::kRunning);
  const std::string replica = running.replicas[0].job;

  // The replica has run a started minute (500 µ€): a cap below that stops the app and its replica.
  ASSERT_TRUE(billing_->SetBudget(kProject, Budget{100, 80}).ok());
  App stopped =
      WaitForApp(created->id, [](const App& app) { return app.state == AppState::kStopped; });
  EXPECT_EQ(stopped.state, AppState::kStopped);
  Job ended = WaitFor(replica);
  EXPECT_EQ(ended.state, JobState::kInterrupted) << ended.reason;
  // Started again, it gets no replica: admission refuses them. Whichever acts first ends it: the
  // budget watcher stops the app (STOPPED), or the app's own start of a replica is refused
  // (FAILED); either way with the cap as the reason, and no replica runs.
  ASSERT_TRUE(apps_->StartApp(kProject, created->id).ok());
  App refused = WaitForApp(created->id, [](const App& app) {
    return app.state == AppState::kStopped || app.state == AppState::kFailed;
  });
  EXPECT_TRUE(refused.state == AppState::kStopped || refused.state == AppState::kFailed)
      << static_cast<int>(refused.state);
  EXPECT_NE(refused.reason.find("monthly budget cap"), std::string::npos) << refused.reason;
  auto replicas = service_->List(kProject, {{std::string(kAppLabel), created->id}}, 10, "");
  ASSERT_TRUE(replicas.ok());
  EXPECT_EQ(replicas->jobs.size(), 1u);  // only the first replica ever ran
}

}  // namespace
}  // namespace sovai::control
