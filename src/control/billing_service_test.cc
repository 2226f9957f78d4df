// The billing service on a real control database with a manual clock: job rows (deleted ones
// included), token usage of catalog endpoints, storage samples, server lifetimes, budgets,
// admission and dry runs. The threads are off (periods 0); the tests tick by hand.
#include "control/billing_service.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "base/json.h"
#include "base/time.h"
#include "control/postgres_test_util.h"

namespace sovai::control {
namespace {

constexpr int64_t kS = 1'000'000;
constexpr char kProject[] = "prj_a";
constexpr char kOther[] = "prj_b";

// A manual clock that also moves `tick_micros` forward at every reading, as a real clock moves
// between two readings of one request (0: an ordinary manual clock).
class TickingClockEnv : public base::EnvWrapper {
 public:
  explicit TickingClockEnv(base::ManualClock& clock)
      : EnvWrapper(base::Env::Default()), clock_(clock) {}
  int64_t NowUnixMicros() override {
    clock_.Advance(tick_micros.load());
    return clock_.NowUnixMicros();
  }
  int64_t NowMonotonicMicros() override { return clock_.NowMonotonicMicros(); }
  void SleepForMicros(int64_t micros) override { clock_.Advance(micros); }
  std::atomic<int64_t> tick_micros = 0;

 private:
  base::ManualClock& clock_;
};

class BillingServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-billing-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    clock_.SetUnixMicros(t0_);
    std::string state;
    SOVAI_STATE_LOCATION_OR_SKIP(state, dir_);
    auto db = ControlDb::Open(state, ControlDbOptions{.env = &env_});
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    StartService();
  }
  void TearDown() override {
    service_.reset();
    db_.reset();
    base::Env::Default().DeleteDirRecursive(dir_).IgnoreError();
  }

  // `period` 0: no threads (the tests tick by hand). `is_leader` as BillingServiceOptions'.
  void StartService(std::chrono::milliseconds period = std::chrono::milliseconds(0),
                    std::function<bool()> is_leader = nullptr) {
    service_.reset();
    BillingServiceOptions o;
    o.flavors = &FlavorCatalog::Default();
    o.env = &env_;
    o.default_timeout_s = 3600;
    o.watch_period = period;
    o.sample_period = period;
    o.bytes_by_project = [this] {
      sampled_++;
      return bytes_;
    };
    o.repository_bytes = [this] { return repositories_; };
    o.is_leader = std::move(is_leader);
    auto service = BillingService::Start(*db_, o);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
  }

  void Exec(const std::string& sql) {
    ASSERT_TRUE(db_->Write([&](base::Database& d) { return d.Exec(sql); }).ok()) << sql;
  }

  // A row of `jobs` as JobService writes it.
  void PutJob(const std::string& id, const std::string& project, const std::string& flavor,
              int units, std::vector<std::pair<std::string, int64_t>> history,
              std::map<std::string, std::string> labels = {}) {
    nlohmann::json h = nlohmann::json::array();
    for (const auto& [state, at] : history) h.push_back({{"state", state}, {"at_unix_micros", at}});
    nlohmann::json spec = {
        {"image", "sovai/shell"}, {"flavor", flavor}, {"units", units}, {"labels", labels}};
    ASSERT_TRUE(db_->Write([&](base::Database& sql) -> base::Status {
                     SOVAI_ASSIGN_OR_RETURN(
                         base::Statement st,
                         sql.Prepare("INSERT INTO jobs(id, project, user, sequence, state, "
                                     "spec, history, created_at, updated_at) VALUES (?1, ?2, "
                                     "'usr_x', ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT(id) DO UPDATE "
                                     "SET project = excluded.project, sequence = "
                                     "excluded.sequence, state = excluded.state, spec = "
                                     "excluded.spec, history = excluded.history, created_at = "
                                     "excluded.created_at, updated_at = excluded.updated_at"));
                     st.Bind(1, id).Bind(2, project).Bind(3, ++sequence_);
                     st.Bind(4, history.back().first).Bind(5, base::DumpJson(spec));
                     st.Bind(6, base::DumpJson(h)).Bind(7, history.front().second);
                     st.Bind(8, history.back().second);
                     return st.Run();
                   })
                    .ok());
  }

  int64_t Spent(const std::string& project = kProject) {
    auto spent = service_->MonthToDate(project);
    EXPECT_TRUE(spent.ok()) << spent.status();
    return spent.ok() ? *spent : -1;
  }

  // 2026-03-10T12:00:00Z
  const int64_t t0_ = *base::ParseRfc3339("2026-03-10T12:00:00Z");
  base::ManualClock clock_;
  TickingClockEnv env_{clock_};
  std::string dir_;
  std::unique_ptr<ControlDb> db_;
  std::unique_ptr<BillingService> service_;
  std::map<std::string, uint64_t> bytes_;
  std::vector<StorageUsage> repositories_;
  std::atomic<int> sampled_ = 0;  // calls of bytes_by_project
  int64_t sequence_ = 0;
};

// A string column of the first row of `sql` ("" when none), through `db`.
std::string QueryText(ControlDb& db, const std::string& sql) {
  std::string out;
  EXPECT_TRUE(db.Read([&](base::Database& d) -> base::Status {
                  SOVAI_ASSIGN_OR_RETURN(base::Statement st, d.Prepare(sql));
                  SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
                  if (row) out = st.ColumnText(0);
                  return base::Status();
                }).ok())
      << sql;
  return out;
}

TEST_F(BillingServiceTest, JobRowsAreBilledAndADeletedJobStaysOnTheBill) {
  // 90 s of ai1-1-cpu x2: 2 minutes × 2 units × 500 µ€.
  PutJob("job_1", kProject, "ai1-1-cpu", 2,
         {{"QUEUED", t0_ - 200 * kS},
          {"RUNNING", t0_ - 100 * kS},
          {"FINALIZING", t0_ - 10 * kS},
          {"DONE", t0_ - 5 * kS}});
  // Last month's job and another project's are not this month's spend.
  PutJob("job_old", kProject, "h100-1-gpu", 1,
         {{"QUEUED", t0_ - 30 * 86'400 * kS},
          {"RUNNING", t0_ - 30 * 86'400 * kS},
          {"DONE", t0_ - 29 * 86'400 * kS}});
  PutJob("job_b", kOther, "ai1-1-cpu", 1,
         {{"QUEUED", t0_ - 100 * kS}, {"RUNNING", t0_ - 100 * kS}, {"DONE", t0_ - 50 * kS}});
  EXPECT_EQ(Spent(), 2000);
  EXPECT_EQ(Spent(kOther), 500);
  Exec("DELETE FROM jobs WHERE id = 'job_1'");
  EXPECT_EQ(Spent(), 2000);
  auto lines = service_->Lines(std::nullopt, {t0_ - 86'400 * kS, t0_});
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 2u);
  EXPECT_EQ((*lines)[0].resource, "job_1");
  EXPECT_EQ((*lines)[1].resource, "job_b");
  // The previous month's statement has the old job (over two days: two lines).
  auto february = service_->MonthStatement(kProject, *ParseMonth("2026-02"));
  ASSERT_TRUE(february.ok());
  ASSERT_EQ(february->lines.size(), 2u);
  EXPECT_EQ(february->lines[0].resource, "job_old");
  EXPECT_EQ(february->lines[1].resource, "job_old");
  EXPECT_EQ(february->total_micro_eur, 24 * 60 * 46'700);
}

TEST_F(BillingServiceTest, ARunningJobGrowsAndAnAppReplicaIsAnAppLine) {
  PutJob("job_r", kProject, "ai1-1-cpu", 1, {{"QUEUED", t0_}, {"RUNNING", t0_ + kS}},
         {{"sovai.app", "app_1"}});
  clock_.Advance(30 * kS);
  EXPECT_EQ(Spent(), 500);
  clock_.Advance(60 * kS);
  EXPECT_EQ(Spent(), 1000);
  auto statement = service_->MonthStatement(kProject, MonthOf(t0_));
  ASSERT_TRUE(statement.ok());
  ASSERT_EQ(statement->lines.size(), 1u);
  EXPECT_EQ(statement->lines[0].kind, LineKind::kApp);
  EXPECT_EQ(statement->lines[0].resource, "app_1");
  EXPECT_TRUE(statement->lines[0].open);
  EXPECT_EQ(statement->total_micro_eur, SumAmounts(statement->lines));
}

// Regression: the window of a statement (and of GET /v1/billing/usage without `to`) ends at the
// now its caller read; reading the clock again for the lines cut the running job's line at the
// window's end, short of its new "now", and the line was not `open`.
TEST_F(BillingServiceTest, ARunningJobsLineIsOpenInAWindowThatEndsNow) {
  PutJob("job_r", kProject, "ai1-1-cpu", 1, {{"QUEUED", t0_}, {"RUNNING", t0_ + kS}});
  clock_.Advance(90 * kS);
  env_.tick_micros = 1000;  // every reading of the clock is 1 ms after the previous one
  auto statement = service_->MonthStatement(kProject, MonthOf(t0_));
  ASSERT_TRUE(statement.ok()) << statement.status();
  ASSERT_EQ(statement->lines.size(), 1u);
  EXPECT_TRUE(statement->lines[0].open);
  EXPECT_EQ(statement->lines[0].minutes, 2);

  const int64_t now = env_.NowUnixMicros();
  const int64_t from = MonthOf(t0_).start_unix_micros;
  auto lines = service_->Lines(kProject, {from, now}, now);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 1u);
  EXPECT_TRUE((*lines)[0].open) << "the window ends at the now of the lines";
  EXPECT_EQ((*lines)[0].end_unix_micros, now);
  // A window in the future holds the line up to now, still growing; one that ended before now
  // holds a part that no longer grows.
  auto later = service_->Lines(kProject, {from, now + 3600 * kS}, now);
  ASSERT_TRUE(later.ok()) << later.status();
  ASSERT_EQ(later->size(), 1u);
  EXPECT_TRUE((*later)[0].open);
  EXPECT_EQ((*later)[0].end_unix_micros, now);
  auto earlier = service_->Lines(kProject, {from, now - 30 * kS}, now);
  ASSERT_TRUE(earlier.ok()) << earlier.status();
  ASSERT_EQ(earlier->size(), 1u);
  EXPECT_FALSE((*earlier)[0].open);
  EXPECT_EQ((*earlier)[0].end_unix_micros, now - 30 * kS);
}

TEST_F(BillingServiceTest, ACrashsDowntimeIsNotBilled) {
  // Lifetime 1 (started at t0_ by SetUp) sees the job start and beats at +20 s, then dies.
  PutJob("job_1", kProject, "ai1-1-cpu", 1, {{"QUEUED", t0_}, {"RUNNING", t0_ + 5 * kS}});
  clock_.Advance(20 * kS);
  ASSERT_TRUE(service_->WatchOnce().ok());
  // An hour later lifetime 2 starts and its JobService finalizes the job as INTERRUPTED.
  clock_.Advance(3600 * kS);
  StartService();
  clock_.Advance(kS);
  PutJob("job_1", kProject, "ai1-1-cpu", 1,
         {{"QUEUED", t0_},
          {"RUNNING", t0_ + 5 * kS},
          {"FINALIZING", t0_ + 3621 * kS},
          {"INTERRUPTED", t0_ + 3622 * kS}});
  EXPECT_EQ(Spent(), 500);  // 15 s known to have run: one minute, not 61
}

TEST_F(BillingServiceTest, TokensOfCatalogEndpointsStayBilledAfterTheEndpointIsDeleted) {
  const int64_t minute = t0_ / (60 * kS);
  Exec(
      "INSERT INTO endpoints(name, app, rate_limit, created_at) VALUES ('llama', 'app_cat', "
      "'400/min', 0)");
  Exec("INSERT INTO app_usage VALUES ('app_cat', 'tok_1', 'prj_a', " + std::to_string(minute) +
       ", 3, 1000000, 1000000)");
  Exec("INSERT INTO app_usage VALUES ('app_cat', '', '', " + std::to_string(minute) +
       ", 1, 1000000, 0)");  // anonymous: nobody to bill
  Exec("INSERT INTO app_usage VALUES ('app_mine', 'tok_1', 'prj_a', " + std::to_string(minute) +
       ", 1, 5000000, 0)");  // a project's own app: its replicas are billed, not its tokens
  clock_.Advance(120 * kS);
  EXPECT_EQ(Spent(), 1'000'000);  // 2 million tokens at 0.50 € per million
  Exec("DELETE FROM endpoints WHERE name = 'llama'");
  EXPECT_EQ(Spent(), 1'000'000);
  auto lines = service_->Lines(kProject, {t0_, t0_ + 120 * kS});
  ASSERT_TRUE(lines.ok());
  ASSERT_EQ(lines->size(), 1u);
  EXPECT_EQ((*lines)[0].kind, LineKind::kTokens);
  EXPECT_EQ((*lines)[0].resource, "llama");
  EXPECT_EQ((*lines)[0].quantity, 2'000'000);
}

TEST_F(BillingServiceTest, StorageSamplesBillEachHourOnce) {
  bytes_ = {{kProject, kBytesPerGib * 73}, {kOther, 0}};
  const int64_t hour = (t0_ / (3600 * kS)) * 3600 * kS;
  clock_.SetUnixMicros(hour + 60 * kS);
  ASSERT_TRUE(service_->SampleStorage().ok());
  clock_.SetUnixMicros(hour + 1800 * kS);  // the same hour again: still one hour
  ASSERT_TRUE(service_->SampleStorage().ok());
  clock_.SetUnixMicros(hour + 3600 * kS + 60 * kS);
  ASSERT_TRUE(service_->SampleStorage().ok());
  clock_.SetUnixMicros(hour + 7200 * kS);
  // 73 GiB for 2 hours = 146 GiB-hours = 0.2 GiB-months = 2000 µ€ at 0.01 €.
  EXPECT_EQ(Spent(), 2000);
  EXPECT_EQ(Spent(kOther), 0);
}

// Each registry repository is a storage resource of its own, billed beside the buckets.
TEST_F(BillingServiceTest, RegistryRepositoriesAreStorageLinesOfTheirOwn) {
  bytes_ = {{kProject, kBytesPerGib * 73}};
  repositories_ = {{kProject, "registry:team/trainer", kBytesPerGib * 73 * 2},
                   {kProject, std::string(kRegistryUnreferencedResource), 0},
                   {kOther, "registry:other/app", kBytesPerGib * 73}};
  const int64_t hour = (t0_ / (3600 * kS)) * 3600 * kS;
  clock_.SetUnixMicros(hour + 60 * kS);
  ASSERT_TRUE(service_->SampleStorage().ok());
  clock_.SetUnixMicros(hour + 3600 * kS + 60 * kS);
  ASSERT_TRUE(service_->SampleStorage().ok());
  clock_.SetUnixMicros(hour + 7200 * kS);
  auto lines = service_->Lines(kProject, Window{hour, hour + 7200 * kS});
  ASSERT_TRUE(lines.ok()) << lines.status();
  std::map<std::string, int64_t> amount_by_resource;
  for (const Line& line : *lines) {
    EXPECT_EQ(line.kind, LineKind::kStorage);
    amount_by_resource[line.resource] += line.amount_micro_eur;
  }
  // 73 GiB for 2 hours = 2000 µ€ at 0.01 €/GiB-month; the repository holds twice as much. An
  // empty resource bills nothing; another project's repository is its own.
  EXPECT_EQ(amount_by_resource,
            (std::map<std::string, int64_t>{{"buckets", 2000}, {"registry:team/trainer", 4000}}));
  EXPECT_EQ(Spent(), 6000);
  EXPECT_EQ(Spent(kOther), 2000);
}

TEST_F(BillingServiceTest, BudgetsSetGetRemove) {
  auto none = service_->GetBudget(kProject);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->budget.has_value());
  EXPECT_FALSE(none->alert);
  EXPECT_FALSE(none->capped);
  ASSERT_TRUE(service_->SetBudget(kProject, Budget{1000, 50}).ok());
  PutJob("job_1", kProject, "ai1-1-cpu", 1,
         {{"QUEUED", t0_ - 100 * kS}, {"RUNNING", t0_ - 100 * kS}, {"DONE", t0_ - 50 * kS}});
  auto report = service_->GetBudget(kProject);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->budget->monthly_cap_micro_eur, 1000);
  EXPECT_EQ(report->spent_micro_eur, 500);
  EXPECT_TRUE(report->alert);
  EXPECT_FALSE(report->capped);
  EXPECT_EQ(service_->SetBudget(kProject, Budget{-1, 50}).code(),
            base::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->SetBudget(kProject, Budget{1000, 0}).code(),
            base::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->SetBudget(kProject, Budget{1000, 101}).code(),
            base::StatusCode::kInvalidArgument);
  ASSERT_TRUE(service_->SetBudget(kProject, Budget{500, 80}).ok());
  EXPECT_TRUE(service_->GetBudget(kProject)->capped);
  ASSERT_TRUE(service_->SetBudget(kProject, std::nullopt).ok());
  EXPECT_FALSE(service_->GetBudget(kProject)->budget.has_value());
}

TEST_F(BillingServiceTest, TheAlertIsRecordedOncePerMonth) {
  auto alerted_month = [&] {
    std::string month = "?";
    EXPECT_TRUE(db_->Read([&](base::Database& sql) -> base::Status {
                     SOVAI_ASSIGN_OR_RETURN(
                         base::Statement st,
                         sql.Prepare("SELECT alerted_month FROM project_budgets WHERE project = "
                                     "'prj_a'"));
                     SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
                     if (row) month = st.ColumnText(0);
                     return base::Status();
                   })
                    .ok());
    return month;
  };
  ASSERT_TRUE(service_->SetBudget(kProject, Budget{1000, 50}).ok());
  ASSERT_TRUE(service_->WatchOnce().ok());
  EXPECT_EQ(alerted_month(), "");
  PutJob("job_1", kProject, "ai1-1-cpu", 1,
         {{"QUEUED", t0_ - 100 * kS}, {"RUNNING", t0_ - 100 * kS}, {"DONE", t0_ - 50 * kS}});
  ASSERT_TRUE(service_->WatchOnce().ok());
  EXPECT_EQ(alerted_month(), "2026-03");
  // Setting the budget again re-arms the alert.
  ASSERT_TRUE(service_->SetBudget(kProject, Budget{1000, 50}).ok());
  EXPECT_EQ(alerted_month(), "");
}

TEST_F(BillingServiceTest, AdmissionAndDryRunsPriceTheTimeout) {
  JobSpec spec;
  spec.image = "sovai/shell";
  spec.flavor = "ai1-1-cpu";
  spec.units = 2;
  spec.timeout_s = 90;  // 2 minutes × 2 units × 500 = 2000 µ€
  // Without a budget everything is admitted and nothing is left to say.
  EXPECT_TRUE(service_->AdmissionCheck(kProject, spec).ok());
  auto free = service_->DryRunJob(kProject, spec);
  ASSERT_TRUE(free.ok());
  EXPECT_EQ(free->price_per_minute_micro_eur, 1000);
  EXPECT_EQ(free->cost_at_timeout_micro_eur, 2000);
  EXPECT_FALSE(free->budget_left_micro_eur.has_value());
  EXPECT_FALSE(free->would_be_refused);

  ASSERT_TRUE(service_->SetBudget(kProject, Budget{2500, 80}).ok());
  PutJob("job_1", kProject, "ai1-1-cpu", 1,
         {{"QUEUED", t0_ - 100 * kS}, {"RUNNING", t0_ - 100 * kS}, {"DONE", t0_ - 50 * kS}});
  // 500 spent + 2000 = 2500: exactly the cap, admitted.
  EXPECT_TRUE(service_->AdmissionCheck(kProject, spec).ok());
  auto fits = service_->DryRunJob(kProject, spec);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(fits->budget_left_micro_eur, 2000);
  EXPECT_FALSE(fits->would_be_refused);
  EXPECT_EQ(fits->reason, "");
  spec.timeout_s = 121;  // 3 minutes: 3000 µ€
  base::Status refused = service_->AdmissionCheck(kProject, spec);
  EXPECT_EQ(refused.code(), base::StatusCode::kFailedPrecondition);
  for (const char* number : {"0.000500", "0.003000", "0.002500"}) {
    EXPECT_NE(refused.message().find(number), std::string::npos) << refused.message();
  }
  auto dry = service_->DryRunJob(kProject, spec);
  ASSERT_TRUE(dry.ok());
  EXPECT_TRUE(dry->would_be_refused);
  EXPECT_EQ(dry->reason, refused.message());
  // No timeout: the server's default (3600 s in this test) prices it.
  spec.timeout_s = 0;
  auto untimed = service_->DryRunJob(kProject, spec);
  ASSERT_TRUE(untimed.ok());
  EXPECT_EQ(untimed->timeout_s, 3600);
  EXPECT_EQ(untimed->cost_at_timeout_micro_eur, 60 * 1000);
  // Another project has no budget.
  EXPECT_TRUE(service_->AdmissionCheck(kOther, spec).ok());
  // An unknown flavor is NotFound for the dry run (Submit reports it for admission).
  spec.flavor = "nope";
  EXPECT_EQ(service_->DryRunJob(kProject, spec).status().code(), base::StatusCode::kNotFound);
  EXPECT_TRUE(service_->AdmissionCheck(kProject, spec).ok());

  AppSpec app;
  app.name = "bot";
  app.flavor = "ai1-1-cpu";
  app.units = 1;
  app.autoscaling = AutoscalingSpec{.min_replicas = 0, .max_replicas = 3};
  auto app_run = service_->DryRunApp(kOther, app, 60);
  ASSERT_TRUE(app_run.ok());
  EXPECT_EQ(app_run->price_per_minute_micro_eur, 3 * 500);
  EXPECT_EQ(app_run->cost_at_timeout_micro_eur, 3 * 500);
}

// Two servers on one database: a follower's rounds beat its heartbeat but neither alert, nor stop,
// nor sample; the threads keep ticking, and the same service does all of it once it leads.
TEST_F(BillingServiceTest, AFollowerOnlyBeatsItsHeartbeatUntilItLeads) {
  std::atomic<bool> leader = false;
  StartService(std::chrono::milliseconds(10), [&] { return leader.load(); });
  bytes_ = {{kProject, kBytesPerGib}};
  ASSERT_TRUE(service_->SetBudget(kProject, Budget{1000, 50}).ok());
  PutJob("job_1", kProject, "ai1-1-cpu", 1,
         {{"QUEUED", t0_ - 100 * kS}, {"RUNNING", t0_ - 100 * kS}, {"DONE", t0_ - 50 * kS}});
  auto alerted = [&] {
    return QueryText(*db_, "SELECT alerted_month FROM project_budgets WHERE project = 'prj_a'");
  };
  auto samples = [&] {
    return QueryText(*db_, "SELECT CAST(COUNT(*) AS TEXT) FROM storage_samples");
  };
  auto alive_at = [&] {
    return QueryText(*db_, "SELECT CAST(MAX(alive_at) AS TEXT) FROM billing_server_runs");
  };
  clock_.Advance(30 * kS);
  const std::string beat = std::to_string(t0_ + 30 * kS);
  for (int i = 0; i < 3000 && alive_at() != beat; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(alive_at(), beat) << "a follower beats its own heartbeat";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // ten rounds of each thread
  ASSERT_TRUE(service_->WatchOnce().ok());
  ASSERT_TRUE(service_->SampleStorage().ok());
  EXPECT_EQ(alerted(), "") << "a follower does not alert";
  EXPECT_EQ(samples(), "0") << "a follower does not sample";
  EXPECT_EQ(sampled_.load(), 0);

  leader = true;
  for (int i = 0; i < 3000 && (alerted().empty() || samples() == "0"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(alerted(), "2026-03") << "the leader's round alerts";
  EXPECT_NE(samples(), "0") << "the leader's round samples";
  EXPECT_GT(sampled_.load(), 0);
  service_.reset();
}

}  // namespace
}  // namespace sovai::control
