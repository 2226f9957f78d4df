// The billing service of `sovai server` (docs/billing.md): reads job rows, storage samples and
// token usage from the control database and bills them with billing.h; keeps project budgets;
// refuses workloads a budget cannot pay for (JobServiceOptions::admission_check); stops a
// project's jobs and apps when its month's spend reaches the cap; samples the object store's
// bytes per project every hour.
//
//   SOVAI_ASSIGN_OR_RETURN(auto billing, BillingService::Start(db, options));  // before jobs
//   jobs_options.admission_check = [&](auto& project, auto& spec) {
//     return billing->AdmissionCheck(project, spec);
//   };
//   ... JobService::Start, AppService::Start ...
//   billing->AttachWorkloads(jobs.get(), apps.get());  // the cap watcher may now stop them
//
// Start records a new server lifetime (billing_server_runs) and the watcher thread refreshes its
// heartbeat every `watch_period`: a job that was RUNNING when the server crashed is billed up to
// the last heartbeat, not through the downtime (billing.h ServerRun). Start it before the
// JobService, so that every job of this lifetime starts running after the lifetime's start.
//
// Two servers on one database: every server records its own lifetime and beats its heartbeat
// (the lifetime is the process's). The rest of a round runs on the leader only
// (BillingServiceOptions::is_leader): budget alerts, stopping the workloads of a capped project,
// storage samples (bytes_by_project of the leader's object store; each hour is billed once). A
// follower's rounds skip that work; the leader's next round does it, so leadership moving costs
// at most one period. Every API call (lines, statements, budgets, admission, dry runs) reads and
// writes the database and works the same on every server.
//
// Thread-safety: all methods may be called concurrently. `mu_` guards the attached workloads and
// the threads' stop flag; the database is ControlDb's (thread-safe).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "control/app_spec.h"
#include "control/billing.h"
#include "control/db.h"
#include "control/flavors.h"
#include "control/job_spec.h"
#include "control/limits.h"
#include "control/notebook_spec.h"

namespace sovai::control {

class AppService;
class JobService;

struct BillingServiceOptions {
  const FlavorCatalog* flavors = nullptr;  // not owned; the price of compute
  Prices prices;
  base::Env* env = nullptr;  // nullptr = base::Env::Default()
  // What a job without timeout_s is priced at (the JobService's default timeout).
  int64_t default_timeout_s = kDefaultJobTimeoutS;
  // The cap watcher's period (and the heartbeat's). 0: no watcher thread (tests call WatchOnce).
  std::chrono::milliseconds watch_period = kBudgetWatchPeriod;
  // The storage sampler's period: one sample per hour is what storage lines bill. 0: no sampler
  // thread (tests call SampleStorage).
  std::chrono::milliseconds sample_period = kStorageSamplePeriod;
  // Bytes held in the object store by each project (every version of every object of its
  // buckets). nullptr: storage is not sampled. Called from the sampler thread.
  std::function<std::map<std::string, uint64_t>()> bytes_by_project;
  // Bytes held by registry repositories (StorageUsage with a registry resource, billing.h), each
  // sampled as a resource of its own. nullptr: none. Called from the sampler thread.
  std::function<std::vector<StorageUsage>()> repository_bytes;
  // Two servers on one database (docs/state.md): whether this server leads, asked at each round
  // of the watcher and the sampler. nullptr = always (one server). See "Two servers" above.
  std::function<bool()> is_leader;
};

// A project's budget and where the month stands.
struct BudgetReport {
  std::optional<Budget> budget;  // nullopt: no budget
  int64_t spent_micro_eur = 0;   // this month so far
  bool alert = false;
  bool capped = false;
};

// What `?dry_run=true` answers: the price of a workload before it exists.
struct DryRun {
  int64_t price_per_minute_micro_eur = 0;
  int64_t timeout_s = 0;
  int64_t cost_at_timeout_micro_eur = 0;
  std::optional<int64_t> budget_left_micro_eur;  // cap - spent; nullopt without a budget
  bool would_be_refused = false;
  std::string reason;  // why it would be refused; "" otherwise
};

class BillingService {
 public:
  // Records this server lifetime and starts the watcher and (with bytes_by_project) the sampler,
  // each of which ticks at once and then every period.
  // Errors: the database's.
  static base::Result<std::unique_ptr<BillingService>> Start(ControlDb& db,
                                                             BillingServiceOptions options);
  ~BillingService();  // Shutdown()
  BillingService(const BillingService&) = delete;
  BillingService& operator=(const BillingService&) = delete;

  // The workloads the cap watcher stops (not owned; either may be null). Call Detach (nullptrs)
  // before destroying them.
  void AttachWorkloads(JobService* jobs, AppService* apps);

  const Prices& prices() const { return options_.prices; }
  const FlavorCatalog& flavors() const { return *options_.flavors; }
  int64_t default_timeout_s() const { return options_.default_timeout_s; }

  // Lines of `project` (nullopt: every project) in `window`, sorted, as of `now_unix_micros`
  // (nullopt: the clock's now). Unbounded: the REST layer bounds what it sends
  // (kMaxBillingLines); the spend budgets compare is never cut. A caller whose window ends at
  // "now" passes the now it cut the window at: read again here, the clock would have moved past
  // the window's end, and a running job's line would be cut short of it and not be `open`.
  base::Result<std::vector<Line>> Lines(const std::optional<std::string>& project, Window window,
                                        std::optional<int64_t> now_unix_micros = std::nullopt);
  // The month's statement of `project` (lines up to now when the month is not over).
  base::Result<Statement> MonthStatement(const std::string& project, const Month& month);
  // What `project` spent this month so far.
  base::Result<int64_t> MonthToDate(const std::string& project);

  base::Result<BudgetReport> GetBudget(const std::string& project);
  // Sets (or with nullopt removes) the budget. InvalidArgument for a negative cap or an
  // alert_percent outside 1..100.
  base::Status SetBudget(const std::string& project, std::optional<Budget> budget);

  // JobServiceOptions::admission_check: OK without a budget; FailedPrecondition (with spent,
  // this job's cost at its timeout and the cap) when it could take the month over the cap.
  base::Status AdmissionCheck(const std::string& project, const JobSpec& spec);
  // The dry runs of POST /v1/jobs and POST /v1/apps. NotFound for an unknown flavor; an app is
  // priced at its replicas (max_replicas when autoscaled) for a replica's timeout.
  base::Result<DryRun> DryRunJob(const std::string& project, const JobSpec& spec);
  base::Result<DryRun> DryRunApp(const std::string& project, const AppSpec& spec,
                                 int64_t replica_timeout_s);
  // The dry run of POST /v1/notebooks: a notebook has no end, so it is priced (and admitted)
  // like an app replica, for kAppAdmissionHorizonS.
  base::Result<DryRun> DryRunNotebook(const std::string& project, const NotebookSpec& spec);

  // One round of the cap watcher (heartbeat; then, on the leader only, alerts and stops), and one
  // storage sample (the leader only; OK without sampling on a follower); the threads call these,
  // tests may too.
  base::Status WatchOnce();
  base::Status SampleStorage();

  // Stops the threads. Idempotent.
  void Shutdown();

 private:
  BillingService(ControlDb& db, BillingServiceOptions options);
  base::Status RecordLifetime();
  base::Result<std::vector<ServerRun>> LoadRuns();
  base::Result<std::map<std::string, Budget>> LoadBudgets(const std::string* project);
  // Stops the project's apps and running jobs with `reason`.
  void StopProject(const std::string& project, const std::string& reason);
  // Whether this server does the leader's work (options_.is_leader, or true without one).
  bool Leading() const;
  base::Result<DryRun> Price(const std::string& project, int64_t price_per_minute,
                             int64_t timeout_s, const std::string& what);
  void Loop(std::chrono::milliseconds period, const std::function<base::Status()>& tick,
            const char* name);

  ControlDb& db_;
  BillingServiceOptions options_;
  base::Env& env_;
  int64_t lifetime_started_unix_micros_ = 0;

  std::mutex mu_;  // guards jobs_, apps_, stopping_
  std::condition_variable cv_;
  JobService* jobs_ = nullptr;
  AppService* apps_ = nullptr;
  bool stopping_ = false;
  std::thread watcher_;
  std::thread sampler_;
};

}  // namespace sovai::control
