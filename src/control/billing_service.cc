#include "control/billing_service.h"

#include <algorithm>
#include <limits>

#include "base/json.h"
#include "base/log.h"
#include "base/time.h"
#include "control/apps.h"
#include "control/jobs.h"

namespace sovai::control {
namespace {

using base::Result;
using base::Status;
using nlohmann::json;

// The parts of a stored job row that billing reads (the columns of `jobs` and of
// billing_deleted_jobs: id, project, spec, history).
Result<BillableJob> BillableJobFromRow(const base::Statement& st) {
  BillableJob job;
  job.id = st.ColumnText(0);
  job.project = st.ColumnText(1);
  auto spec = base::ParseJson(st.ColumnText(2));
  if (!spec.ok() || !spec->is_object()) {
    return base::DataLossError("job " + job.id + " has a corrupt spec");
  }
  job.flavor = spec->value("flavor", "");
  job.units = spec->value("units", 1);
  if (auto labels = spec->find("labels"); labels != spec->end() && labels->is_object()) {
    if (auto app = labels->find(kAppLabel); app != labels->end() && app->is_string()) {
      job.app = app->get<std::string>();
    }
    // A notebook's starts are its jobs: their lines name the notebook (docs/billing.md).
    if (auto nb = labels->find(kNotebookLabel); nb != labels->end() && nb->is_string()) {
      job.notebook = nb->get<std::string>();
    }
  }
  auto history = base::ParseJson(st.ColumnText(3));
  if (!history.ok() || !history->is_array()) {
    return base::DataLossError("job " + job.id + " has a corrupt history");
  }
  for (const json& t : *history) {
    if (!t.is_object()) continue;
    auto state = ParseJobState(t.value("state", ""));
    if (state) job.history.push_back({*state, t.value("at_unix_micros", int64_t{0})});
  }
  return job;
}

void BindProject(base::Statement& st, int index, const std::optional<std::string>& project) {
  if (project) {
    st.Bind(index, *project);
  } else {
    st.BindNull(index);
  }
}

std::string Describe(const JobSpec& spec, int64_t timeout_s) {
  const bool replica = spec.labels.contains(std::string(kAppLabel));
  const bool notebook = spec.labels.contains(std::string(kNotebookLabel));
  return std::string(replica    ? "a replica of app " + spec.labels.at(std::string(kAppLabel))
                     : notebook ? "notebook " + spec.labels.at(std::string(kNotebookLabel))
                                : std::string("this job")) +
         " (flavor " + spec.flavor + " x" + std::to_string(spec.units) + ", timeout " +
         std::to_string(timeout_s) + " s)";
}

}  // namespace

BillingService::BillingService(ControlDb& db, BillingServiceOptions options)
    : db_(db),
      options_(std::move(options)),
      env_(options_.env != nullptr ? *options_.env : base::Env::Default()) {}

BillingService::~BillingService() { Shutdown(); }

Result<std::unique_ptr<BillingService>> BillingService::Start(ControlDb& db,
                                                              BillingServiceOptions options) {
  SOVAI_CHECK(options.flavors != nullptr);
  std::unique_ptr<BillingService> service(new BillingService(db, std::move(options)));
  SOVAI_RETURN_IF_ERROR(service->RecordLifetime());
  BillingService* s = service.get();
  if (s->options_.watch_period.count() > 0) {
    s->watcher_ = std::thread([s] {
      s->Loop(
          s->options_.watch_period, [s] { return s->WatchOnce(); }, "cap watcher");
    });
  }
  if ((s->options_.bytes_by_project || s->options_.repository_bytes) &&
      s->options_.sample_period.count() > 0) {
    s->sampler_ = std::thread([s] {
      s->Loop(
          s->options_.sample_period, [s] { return s->SampleStorage(); }, "storage sampler");
    });
  }
  return service;
}

void BillingService::Shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    jobs_ = nullptr;
    apps_ = nullptr;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (sampler_.joinable()) sampler_.join();
}

void BillingService::AttachWorkloads(JobService* jobs, AppService* apps) {
  std::lock_guard lock(mu_);
  jobs_ = jobs;
  apps_ = apps;
}

bool BillingService::Leading() const { return !options_.is_leader || options_.is_leader(); }

void BillingService::Loop(std::chrono::milliseconds period, const std::function<Status()>& tick,
                          const char* name) {
  for (;;) {
    // Tick first: a fresh server samples at once, and the heartbeat starts with the lifetime.
    if (Status st = tick(); !st.ok()) SOVAI_LOG(WARNING) << "billing " << name << ": " << st;
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, period, [&] { return stopping_; })) return;
  }
}

Status BillingService::RecordLifetime() {
  lifetime_started_unix_micros_ = env_.NowUnixMicros();
  return db_.Write([&](base::Database& sql) -> Status {
    // Two starts in one microsecond (tests) share a lifetime.
    SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                           sql.Prepare("INSERT INTO billing_server_runs(started_at, alive_at) "
                                       "VALUES (?1, ?1) ON CONFLICT(started_at) DO UPDATE SET "
                                       "alive_at = excluded.alive_at"));
    st.Bind(1, lifetime_started_unix_micros_);
    return st.Run();
  });
}

Result<std::vector<ServerRun>> BillingService::LoadRuns() {
  std::vector<ServerRun> runs;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("SELECT started_at, alive_at FROM billing_server_runs ORDER BY started_at"));
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) return Status();
      runs.push_back({st.ColumnInt(0), st.ColumnInt(1)});
    }
  }));
  return runs;
}

Result<std::vector<Line>> BillingService::Lines(const std::optional<std::string>& project,
                                                Window window,
                                                std::optional<int64_t> now_unix_micros) {
  const int64_t now = now_unix_micros.value_or(env_.NowUnixMicros());
  std::vector<BillableJob> jobs;
  std::vector<StorageSample> samples;
  std::vector<TokenUsage> usage;
  std::map<std::string, std::string> endpoint_of_app;
  SOVAI_ASSIGN_OR_RETURN(std::vector<ServerRun> runs, LoadRuns());
  SOVAI_RETURN_IF_ERROR(db_.Read([&](base::Database& sql) -> Status {
    // A job can have minutes in the window only if it was created before its end and was still
    // live (or last changed) after its start: a job's last transition is its updated_at.
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("SELECT id, project, spec, history FROM jobs WHERE (?1 IS NULL OR project = "
                    "?1) AND created_at < ?3 AND (updated_at >= ?2 OR state IN ('QUEUED', "
                    "'INITIALIZING', 'PENDING', 'RUNNING', 'FINALIZING')) "
                    "UNION ALL SELECT id, project, spec, history FROM billing_deleted_jobs WHERE "
                    "(?1 IS NULL OR project = ?1) AND created_at < ?3 AND updated_at >= ?2"));
    BindProject(st, 1, project);
    st.Bind(2, window.from_unix_micros).Bind(3, window.to_unix_micros);
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      auto job = BillableJobFromRow(st);
      if (!job.ok()) {
        // One corrupt row must not hide the rest of the bill; it is logged and skipped.
        SOVAI_LOG(WARNING) << "billing: " << job.status();
        continue;
      }
      jobs.push_back(std::move(*job));
    }
    // Samples of hours that start in the window (a sample may be taken late in its hour).
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement ss,
        sql.Prepare("SELECT project, at, bytes, resource FROM storage_samples WHERE (?1 IS NULL "
                    "OR project = ?1) AND at >= ?2 AND at < ?3"));
    BindProject(ss, 1, project);
    ss.Bind(2, window.from_unix_micros - kMicrosPerHour).Bind(3, window.to_unix_micros);
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, ss.Step());
      if (!row) break;
      samples.push_back({ss.ColumnText(0), ss.ColumnInt(1), static_cast<uint64_t>(ss.ColumnInt(2)),
                         ss.ColumnText(3)});
    }
    SOVAI_ASSIGN_OR_RETURN(base::Statement es,
                           sql.Prepare("SELECT app, name FROM billing_endpoint_apps"));
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, es.Step());
      if (!row) break;
      endpoint_of_app[es.ColumnText(0)] = es.ColumnText(1);
    }
    // Anonymous catalog calls (project '') have nobody to bill.
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement us,
        sql.Prepare("SELECT u.app, u.project, u.minute, u.prompt_tokens, u.completion_tokens FROM "
                    "app_usage u JOIN billing_endpoint_apps e ON e.app = u.app WHERE (?1 IS NULL "
                    "OR u.project = ?1) AND u.project != '' AND u.minute >= ?2 AND u.minute < "
                    "?3"));
    BindProject(us, 1, project);
    us.Bind(2, window.from_unix_micros / kMicrosPerMinute - 1)
        .Bind(3, window.to_unix_micros / kMicrosPerMinute + 1);
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, us.Step());
      if (!row) break;
      usage.push_back(
          {us.ColumnText(0), us.ColumnText(1), us.ColumnInt(2), us.ColumnInt(3), us.ColumnInt(4)});
    }
    return Status();
  }));
  std::vector<Line> lines = ComputeJobLines(jobs, *options_.flavors, window, now, runs);
  std::vector<Line> storage = ComputeStorageLines(samples, options_.prices, window, now);
  std::vector<Line> tokens =
      ComputeTokenLines(usage, endpoint_of_app, options_.prices, window, now);
  lines.insert(lines.end(), storage.begin(), storage.end());
  lines.insert(lines.end(), tokens.begin(), tokens.end());
  SortLines(lines);
  return lines;
}

Result<Statement> BillingService::MonthStatement(const std::string& project, const Month& month) {
  const int64_t now = env_.NowUnixMicros();
  Window window{month.start_unix_micros, std::min(month.end_unix_micros, now)};
  std::vector<Line> lines;
  if (window.from_unix_micros < window.to_unix_micros) {
    SOVAI_ASSIGN_OR_RETURN(lines, Lines(project, window, now));
  }
  return MakeStatement(project, month, std::move(lines));
}

Result<int64_t> BillingService::MonthToDate(const std::string& project) {
  SOVAI_ASSIGN_OR_RETURN(Statement s, MonthStatement(project, MonthOf(env_.NowUnixMicros())));
  return s.total_micro_eur;
}

// --- Budgets ---------------------------------------------------------------------------------
Result<std::map<std::string, Budget>> BillingService::LoadBudgets(const std::string* project) {
  std::map<std::string, Budget> out;
  SOVAI_RETURN_IF_ERROR(db_.Read([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("SELECT project, monthly_cap_micro_eur, alert_percent FROM project_budgets "
                    "WHERE ?1 IS NULL OR project = ?1 ORDER BY project"));
    if (project != nullptr) {
      st.Bind(1, *project);
    } else {
      st.BindNull(1);
    }
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) return Status();
      out[st.ColumnText(0)] = Budget{st.ColumnInt(1), static_cast<int>(st.ColumnInt(2))};
    }
  }));
  return out;
}

Result<BudgetReport> BillingService::GetBudget(const std::string& project) {
  SOVAI_ASSIGN_OR_RETURN(auto budgets, LoadBudgets(&project));
  BudgetReport report;
  SOVAI_ASSIGN_OR_RETURN(report.spent_micro_eur, MonthToDate(project));
  if (auto it = budgets.find(project); it != budgets.end()) {
    report.budget = it->second;
    report.alert = BudgetAlert(it->second, report.spent_micro_eur);
    report.capped = BudgetCapped(it->second, report.spent_micro_eur);
  }
  return report;
}

Status BillingService::SetBudget(const std::string& project, std::optional<Budget> budget) {
  if (budget) {
    if (budget->monthly_cap_micro_eur < 0) {
      return base::InvalidArgumentError("monthly_cap_eur must not be negative");
    }
    if (budget->alert_percent < 1 || budget->alert_percent > 100) {
      return base::InvalidArgumentError("alert_percent must be an integer from 1 to 100");
    }
  }
  return db_.Write([&](base::Database& sql) -> Status {
    if (!budget) {
      SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                             sql.Prepare("DELETE FROM project_budgets WHERE project = ?1"));
      st.Bind(1, project);
      return st.Run();
    }
    // A new cap may deserve a new alert this month: the alert month is reset.
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("INSERT INTO project_budgets(project, monthly_cap_micro_eur, alert_percent, "
                    "alerted_month, updated_at) VALUES (?1, ?2, ?3, '', ?4) ON CONFLICT(project) "
                    "DO UPDATE SET monthly_cap_micro_eur = ?2, alert_percent = ?3, "
                    "alerted_month = '', updated_at = ?4"));
    st.Bind(1, project).Bind(2, budget->monthly_cap_micro_eur);
    st.Bind(3, int64_t{budget->alert_percent}).Bind(4, env_.NowUnixMicros());
    return st.Run();
  });
}

Result<DryRun> BillingService::Price(const std::string& project, int64_t price_per_minute,
                                     int64_t timeout_s, const std::string& what) {
  DryRun out;
  out.price_per_minute_micro_eur = price_per_minute;
  out.timeout_s = timeout_s;
  out.cost_at_timeout_micro_eur = CostAtTimeout(price_per_minute, timeout_s);
  SOVAI_ASSIGN_OR_RETURN(auto budgets, LoadBudgets(&project));
  auto it = budgets.find(project);
  if (it == budgets.end()) return out;
  SOVAI_ASSIGN_OR_RETURN(int64_t spent, MonthToDate(project));
  out.budget_left_micro_eur = it->second.monthly_cap_micro_eur - spent;
  Status verdict = CheckBudget(it->second, spent, out.cost_at_timeout_micro_eur, what);
  out.would_be_refused = !verdict.ok();
  out.reason = verdict.message();
  return out;
}

Status BillingService::AdmissionCheck(const std::string& project, const JobSpec& spec) {
  SOVAI_ASSIGN_OR_RETURN(auto budgets, LoadBudgets(&project));
  if (budgets.empty()) return Status();  // no budget: nothing to check (and no spend to read)
  auto flavor = options_.flavors->Find(spec.flavor);
  if (!flavor.ok()) return Status();  // Submit reports the unknown flavor itself
  int64_t timeout_s = spec.timeout_s > 0 ? spec.timeout_s : options_.default_timeout_s;
  // An app's replica runs until it is stopped: it is admitted for the next hour, and the cap
  // watcher stops the app at the cap.
  // A notebook likewise runs until it is stopped (or idle).
  if (spec.labels.contains(std::string(kAppLabel)) ||
      spec.labels.contains(std::string(kNotebookLabel))) {
    timeout_s = kAppAdmissionHorizonS;
  }
  SOVAI_ASSIGN_OR_RETURN(DryRun run, Price(project, PricePerMinute(**flavor, spec.units), timeout_s,
                                           Describe(spec, timeout_s)));
  if (run.would_be_refused) return base::FailedPreconditionError(run.reason);
  return Status();
}

Result<DryRun> BillingService::DryRunJob(const std::string& project, const JobSpec& spec) {
  SOVAI_ASSIGN_OR_RETURN(const Flavor* flavor, options_.flavors->Find(spec.flavor));
  SOVAI_RETURN_IF_ERROR(RequestFor(*flavor, spec.units).status());
  const int64_t timeout_s = spec.timeout_s > 0 ? spec.timeout_s : options_.default_timeout_s;
  return Price(project, PricePerMinute(*flavor, spec.units), timeout_s, Describe(spec, timeout_s));
}

Result<DryRun> BillingService::DryRunApp(const std::string& project, const AppSpec& spec,
                                         int64_t replica_timeout_s) {
  SOVAI_ASSIGN_OR_RETURN(const Flavor* flavor, options_.flavors->Find(spec.flavor));
  SOVAI_RETURN_IF_ERROR(RequestFor(*flavor, spec.units).status());
  const int replicas = spec.autoscaling ? spec.autoscaling->max_replicas : spec.replicas;
  const int64_t per_minute = PricePerMinute(*flavor, spec.units);
  const int64_t all = replicas <= 0 ? 0
                      : per_minute > std::numeric_limits<int64_t>::max() / replicas
                          ? std::numeric_limits<int64_t>::max()
                          : per_minute * replicas;
  return Price(project, all, replica_timeout_s,
               "app " + spec.name + " (" + std::to_string(replicas) + " replicas of flavor " +
                   spec.flavor + " x" + std::to_string(spec.units) + ", timeout " +
                   std::to_string(replica_timeout_s) + " s)");
}

Result<DryRun> BillingService::DryRunNotebook(const std::string& project,
                                              const NotebookSpec& spec) {
  SOVAI_ASSIGN_OR_RETURN(const Flavor* flavor, options_.flavors->Find(spec.flavor));
  SOVAI_RETURN_IF_ERROR(RequestFor(*flavor, spec.units).status());
  return Price(project, PricePerMinute(*flavor, spec.units), kAppAdmissionHorizonS,
               "notebook" + (spec.name.empty() ? std::string() : " " + spec.name) + " (flavor " +
                   spec.flavor + " x" + std::to_string(spec.units) + ", priced for " +
                   std::to_string(kAppAdmissionHorizonS) + " s)");
}

// --- The threads -------------------------------------------------------------------------------
Status BillingService::WatchOnce() {
  const int64_t now = env_.NowUnixMicros();
  SOVAI_RETURN_IF_ERROR(db_.Write([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("UPDATE billing_server_runs SET alive_at = CASE WHEN alive_at > ?2 THEN "
                    "alive_at ELSE ?2 END WHERE started_at = ?1"));
    st.Bind(1, lifetime_started_unix_micros_).Bind(2, now);
    return st.Run();
  }));
  // Alerts and stops once for the database, by the leader (the others would stop the same
  // workloads again and log the same alert).
  if (!Leading()) return Status();
  SOVAI_ASSIGN_OR_RETURN(auto budgets, LoadBudgets(nullptr));
  const std::string month = MonthOf(now).Name();
  for (const auto& [project, budget] : budgets) {
    SOVAI_ASSIGN_OR_RETURN(int64_t spent, MonthToDate(project));
    if (BudgetAlert(budget, spent)) {
      // Once per month (and again after the budget is set anew): the row remembers the month.
      bool first = false;
      SOVAI_RETURN_IF_ERROR(db_.Write([&](base::Database& sql) -> Status {
        SOVAI_ASSIGN_OR_RETURN(
            base::Statement st,
            sql.Prepare("UPDATE project_budgets SET alerted_month = ?2 WHERE project = ?1 AND "
                        "alerted_month != ?2"));
        st.Bind(1, project).Bind(2, month);
        SOVAI_RETURN_IF_ERROR(st.Run());
        first = sql.Changes() > 0;
        return Status();
      }));
      if (first) {
        SOVAI_LOG(WARNING).With("project", project)
            << "project " << project << " has spent " << FormatEur(spent) << " € of its monthly "
            << "budget cap of " << FormatEur(budget.monthly_cap_micro_eur) << " € (alert at "
            << budget.alert_percent << "%)";
      }
    }
    if (BudgetCapped(budget, spent)) {
      StopProject(project, "the project's monthly budget cap of " +
                               FormatEur(budget.monthly_cap_micro_eur) + " € was reached");
    }
  }
  return Status();
}

void BillingService::StopProject(const std::string& project, const std::string& reason) {
  // Held throughout: Shutdown/AttachWorkloads wait, so the services are not destroyed under us.
  // JobService and AppService never call into this service while holding their own locks.
  std::lock_guard lock(mu_);
  if (stopping_) return;
  if (apps_ != nullptr) {
    // Apps first: a stopped app does not replace the replicas stopped below.
    auto apps = apps_->List(project, {});
    if (!apps.ok()) {
      SOVAI_LOG(WARNING) << "billing: listing the apps of " << project << ": " << apps.status();
    } else {
      for (const App& app : *apps) {
        if (app.state == AppState::kStopped || app.state == AppState::kStopping ||
            app.state == AppState::kFailed || app.state == AppState::kDeleting ||
            app.state == AppState::kDeleted) {
          continue;
        }
        auto stopped = apps_->StopBecause(project, app.id, reason);
        if (stopped.ok()) {
          SOVAI_LOG(WARNING).With("project", project).With("app", app.id)
              << "stopping app " << app.id << ": " << reason;
        }
      }
    }
  }
  if (jobs_ == nullptr) return;
  std::vector<std::string> live;
  Status read = db_.Read([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                           sql.Prepare("SELECT id FROM jobs WHERE project = ?1 AND state IN "
                                       "('QUEUED', 'INITIALIZING', 'PENDING', 'RUNNING')"));
    st.Bind(1, project);
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) return Status();
      live.push_back(st.ColumnText(0));
    }
  });
  if (!read.ok()) {
    SOVAI_LOG(WARNING) << "billing: listing the jobs of " << project << ": " << read;
    return;
  }
  for (const std::string& id : live) {
    auto stopped = jobs_->Stop(project, id, reason);
    if (stopped.ok()) {
      SOVAI_LOG(WARNING).With("project", project).With("job", id)
          << "stopping job " << id << ": " << reason;
    }
  }
}

Status BillingService::SampleStorage() {
  if ((!options_.bytes_by_project && !options_.repository_bytes) || !Leading()) return Status();
  std::vector<StorageUsage> usage;
  if (options_.bytes_by_project) {
    for (const auto& [project, n] : options_.bytes_by_project()) {
      usage.push_back({project, std::string(kStorageResource), n});
    }
  }
  if (options_.repository_bytes) {
    for (StorageUsage& u : options_.repository_bytes()) usage.push_back(std::move(u));
  }
  const int64_t now = env_.NowUnixMicros();
  return db_.Write([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare("INSERT INTO storage_samples(project, resource, at, bytes) VALUES (?1, ?2, "
                    "?3, ?4) ON CONFLICT(project, resource, at) DO UPDATE SET bytes = "
                    "excluded.bytes"));
    for (const StorageUsage& u : usage) {
      if (u.bytes == 0) continue;
      // SQLite integers are signed: a store beyond 8 EiB is not a concern of this century.
      st.Bind(1, u.project)
          .Bind(2, u.resource)
          .Bind(3, now)
          .Bind(4, static_cast<int64_t>(
                       std::min<uint64_t>(u.bytes, std::numeric_limits<int64_t>::max())));
      SOVAI_RETURN_IF_ERROR(st.Run());
      st.Reset();
    }
    return Status();
  });
}

}  // namespace sovai::control
