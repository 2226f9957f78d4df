// How notebooks are billed (docs/billing.md): the RUNNING time of their jobs, on lines that name
// the notebook; admitted and priced for an hour like an app replica. The billing service on a real
// control database with a manual clock, its threads off.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "base/json.h"
#include "base/time.h"
#include "control/billing_service.h"
#include "control/notebook_spec.h"
#include "control/postgres_test_util.h"

namespace sovai::control {
namespace {

constexpr int64_t kS = 1'000'000;
constexpr char kProject[] = "prj_a";

class NotebookBillingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-nb-billing-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    clock_.SetUnixMicros(t0_);
    std::string state;
    SOVAI_STATE_LOCATION_OR_SKIP(state, dir_);
    auto db = ControlDb::Open(state, ControlDbOptions{.env = &env_});
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    BillingServiceOptions o;
    o.flavors = &FlavorCatalog::Default();
    o.env = &env_;
    o.watch_period = std::chrono::milliseconds(0);
    o.sample_period = std::chrono::milliseconds(0);
    auto service = BillingService::Start(*db_, o);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
  }
  void TearDown() override {
    service_.reset();
    db_.reset();
    base::Env::Default().DeleteDirRecursive(dir_).IgnoreError();
  }

  // A row of `jobs` as JobService writes it for a notebook's start.
  void PutNotebookJob(const std::string& id, const std::string& notebook,
                      std::vector<std::pair<std::string, int64_t>> history) {
    nlohmann::json h = nlohmann::json::array();
    for (const auto& [state, at] : history) h.push_back({{"state", state}, {"at_unix_micros", at}});
    const JobSpec job =
        NotebookJobSpec(notebook, NotebookSpec{.flavor = "ai1-1-cpu", .units = 1}, 1, "t");
    ASSERT_TRUE(db_->Write([&](base::Database& sql) -> base::Status {
                     SOVAI_ASSIGN_OR_RETURN(
                         base::Statement st,
                         sql.Prepare("INSERT INTO jobs(id, project, user, sequence, state, spec, "
                                     "history, created_at, updated_at) VALUES (?1, ?2, 'usr_x', "
                                     "?3, ?4, ?5, ?6, ?7, ?8)"));
                     st.Bind(1, id).Bind(2, kProject).Bind(3, ++sequence_);
                     st.Bind(4, history.back().first).Bind(5, base::DumpJson(JobSpecToJson(job)));
                     st.Bind(6, base::DumpJson(h)).Bind(7, history.front().second);
                     st.Bind(8, history.back().second);
                     return st.Run();
                   })
                    .ok());
  }

  const int64_t t0_ = *base::ParseRfc3339("2026-03-10T12:00:00Z");
  base::ManualClock clock_;
  base::ManualClockEnv env_{base::Env::Default(), clock_};
  std::string dir_;
  std::unique_ptr<ControlDb> db_;
  std::unique_ptr<BillingService> service_;
  int64_t sequence_ = 0;
};

TEST_F(NotebookBillingTest, ItsJobsRunningTimeIsBilledUnderTheNotebook) {
  // Two starts: 61 s and 30 s of RUNNING (2 + 1 started minutes at 500 µ€); the queue and the
  // volume syncs (INITIALIZING, FINALIZING) are not billed.
  PutNotebookJob("job_n1", "nb_1",
                 {{"QUEUED", t0_ - 300 * kS},
                  {"INITIALIZING", t0_ - 290 * kS},
                  {"PENDING", t0_ - 285 * kS},
                  {"RUNNING", t0_ - 280 * kS},
                  {"FINALIZING", t0_ - 219 * kS},
                  {"INTERRUPTED", t0_ - 200 * kS}});
  PutNotebookJob(
      "job_n2", "nb_1",
      {{"QUEUED", t0_ - 100 * kS}, {"RUNNING", t0_ - 90 * kS}, {"INTERRUPTED", t0_ - 60 * kS}});
  auto lines = service_->Lines(std::string(kProject), {t0_ - 86'400 * kS, t0_});
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 2u);
  for (const Line& line : *lines) {
    EXPECT_EQ(line.resource, "nb_1");
    EXPECT_EQ(line.kind, LineKind::kNotebook);
  }
  EXPECT_EQ((*lines)[0].minutes + (*lines)[1].minutes, 3);
  auto spent = service_->MonthToDate(kProject);
  ASSERT_TRUE(spent.ok());
  EXPECT_EQ(*spent, 3 * 500);
}

TEST_F(NotebookBillingTest, ANotebookIsPricedAndAdmittedForAnHour) {
  NotebookSpec nb{.flavor = "ai1-1-cpu", .units = 2};
  auto run = service_->DryRunNotebook(kProject, nb);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->price_per_minute_micro_eur, 1000);
  EXPECT_EQ(run->timeout_s, kAppAdmissionHorizonS);
  EXPECT_EQ(run->cost_at_timeout_micro_eur, 60 * 1000);
  EXPECT_FALSE(run->would_be_refused);
  NotebookSpec unknown{.flavor = "nope"};
  EXPECT_EQ(service_->DryRunNotebook(kProject, unknown).status().code(),
            base::StatusCode::kNotFound);
  // Its job's timeout is 30 days, but admission prices the hour: 60 000 µ€.
  const JobSpec job = NotebookJobSpec("nb_1", nb, 1, "t");
  ASSERT_TRUE(service_->SetBudget(kProject, Budget{100'000, 80}).ok());
  EXPECT_TRUE(service_->AdmissionCheck(kProject, job).ok());
  ASSERT_TRUE(service_->SetBudget(kProject, Budget{50'000, 80}).ok());
  base::Status refused = service_->AdmissionCheck(kProject, job);
  EXPECT_EQ(refused.code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("notebook nb_1"), std::string::npos) << refused.message();
  auto priced = service_->DryRunNotebook(kProject, nb);
  ASSERT_TRUE(priced.ok());
  EXPECT_TRUE(priced->would_be_refused);
}

}  // namespace
}  // namespace sovai::control
