// The ledger arithmetic of docs/billing.md: started minutes, intervals, days and windows, crash
// cuts, storage and token rounding, groups, statements, prices and budgets.
#include "control/billing.h"

#include <gtest/gtest.h>

#include <random>

#include "base/time.h"

namespace sovai::control {
namespace {

constexpr int64_t kS = 1'000'000;  // one second in micros
constexpr int64_t kMin = 60 * kS;
// 2026-03-10T00:00:00Z: a day boundary, far from a month boundary.
const int64_t kDay0 = *base::ParseRfc3339("2026-03-10T00:00:00Z");

int64_t At(const char* rfc3339) { return *base::ParseRfc3339(rfc3339); }

std::vector<JobTransition> History(std::initializer_list<std::pair<JobState, int64_t>> steps) {
  std::vector<JobTransition> out;
  for (const auto& [state, at] : steps) out.push_back({state, at});
  return out;
}

// A job that ran [start, end) and ended `final`.
BillableJob Ran(std::string id, std::string flavor, int units, int64_t start, int64_t end,
                JobState final = JobState::kDone) {
  BillableJob job;
  job.id = std::move(id);
  job.project = "prj_a";
  job.flavor = std::move(flavor);
  job.units = units;
  job.history = History({{JobState::kQueued, start - 20 * kS},
                         {JobState::kInitializing, start - 10 * kS},
                         {JobState::kPending, start - kS},
                         {JobState::kRunning, start},
                         {JobState::kFinalizing, end},
                         {final, end + 30 * kS}});
  return job;
}

Window Wide() { return {kDay0 - 30 * 24 * 3600 * kS, kDay0 + 30 * 24 * 3600 * kS}; }

const FlavorCatalog& Catalog() { return FlavorCatalog::Default(); }

TEST(FormatEurTest, SixDecimalsAlways) {
  EXPECT_EQ(FormatEur(0), "0.000000");
  EXPECT_EQ(FormatEur(93'400), "0.093400");
  EXPECT_EQ(FormatEur(1'000'000), "1.000000");
  EXPECT_EQ(FormatEur(50'123'456), "50.123456");
  EXPECT_EQ(FormatEur(-1), "-0.000001");
  EXPECT_EQ(FormatEur(INT64_MIN), "-9223372036854.775808");
}

TEST(StartedMinutesTest, CeilOfSecondsOverSixty) {
  EXPECT_EQ(StartedMinutes(0, 0), 0);
  EXPECT_EQ(StartedMinutes(10, 5), 0);  // a clock that stepped back bills nothing
  EXPECT_EQ(StartedMinutes(0, 1), 1);   // one microsecond starts a minute
  EXPECT_EQ(StartedMinutes(0, 60 * kS), 1);
  EXPECT_EQ(StartedMinutes(0, 60 * kS + 1), 2);
  EXPECT_EQ(StartedMinutes(0, 61 * kS), 2);
  EXPECT_EQ(StartedMinutes(0, 3600 * kS), 60);
}

TEST(JobLinesTest, TheDocumentedExample) {
  // 61 s on 2 units of a 0.0467 €/min flavor: 2 started minutes × 2 units × 46 700 µ€.
  BillableJob job = Ran("job_1", "h100-1-gpu", 2, kDay0 + 3600 * kS, kDay0 + 3661 * kS);
  std::vector<Line> lines = ComputeJobLines({&job, 1}, Catalog(), Wide(), kDay0 + 7200 * kS, {});
  ASSERT_EQ(lines.size(), 1u);
  const Line& l = lines[0];
  EXPECT_EQ(l.kind, LineKind::kJob);
  EXPECT_EQ(l.resource, "job_1");
  EXPECT_EQ(l.flavor, "h100-1-gpu");
  EXPECT_EQ(l.units, 2);
  EXPECT_EQ(l.minutes, 2);
  EXPECT_EQ(l.quantity, 4);
  EXPECT_EQ(l.unit_price_micro_eur, 46'700);
  EXPECT_EQ(l.amount_micro_eur, 186'800);
  EXPECT_FALSE(l.open);
  EXPECT_EQ(l.start_unix_micros, kDay0 + 3600 * kS);
  EXPECT_EQ(l.end_unix_micros, kDay0 + 3661 * kS);
  nlohmann::json j = LineToJson(l);
  EXPECT_EQ(j["kind"], "job");
  EXPECT_EQ(j["amount_eur"], "0.186800");
  EXPECT_EQ(j["amount_micro_eur"], 186'800);
  EXPECT_EQ(j["start"], "2026-03-10T01:00:00.000Z");
  EXPECT_EQ(j["open"], false);
}

TEST(JobLinesTest, QueueingInitializingAndFinalizingAreNotBilled) {
  // 10 minutes in QUEUED/INITIALIZING/PENDING and a long FINALIZING around 30 s of RUNNING.
  BillableJob job;
  job.id = "job_1";
  job.project = "prj_a";
  job.flavor = "ai1-1-cpu";
  job.history = History({{JobState::kQueued, kDay0},
                         {JobState::kInitializing, kDay0 + 300 * kS},
                         {JobState::kPending, kDay0 + 600 * kS},
                         {JobState::kRunning, kDay0 + 601 * kS},
                         {JobState::kFinalizing, kDay0 + 631 * kS},
                         {JobState::kDone, kDay0 + 5000 * kS}});
  std::vector<Line> lines = ComputeJobLines({&job, 1}, Catalog(), Wide(), kDay0 + 9000 * kS, {});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].minutes, 1);
  EXPECT_EQ(lines[0].amount_micro_eur, 500);
  // A job that never ran costs nothing.
  BillableJob queued;
  queued.id = "job_2";
  queued.flavor = "ai1-1-cpu";
  queued.history = History({{JobState::kQueued, kDay0}, {JobState::kInterrupted, kDay0 + kS}});
  EXPECT_TRUE(ComputeJobLines({&queued, 1}, Catalog(), Wide(), kDay0 + kMin, {}).empty());
}

TEST(JobLinesTest, AnOpenIntervalIsBilledUpToNowAndGrows) {
  BillableJob job;
  job.id = "job_1";
  job.project = "prj_a";
  job.flavor = "ai1-1-cpu";
  job.units = 3;
  job.history = History({{JobState::kQueued, kDay0}, {JobState::kRunning, kDay0 + kS}});
  auto at = [&](int64_t now) {
    return ComputeJobLines({&job, 1}, Catalog(), {kDay0, now}, now, {});
  };
  std::vector<Line> early = at(kDay0 + kS + 10 * kS);
  ASSERT_EQ(early.size(), 1u);
  EXPECT_TRUE(early[0].open);
  EXPECT_EQ(early[0].minutes, 1);
  EXPECT_EQ(early[0].amount_micro_eur, 3 * 500);
  EXPECT_EQ(early[0].end_unix_micros, kDay0 + 11 * kS);
  std::vector<Line> later = at(kDay0 + kS + 150 * kS);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_TRUE(later[0].open);
  EXPECT_EQ(later[0].minutes, 3);
  EXPECT_EQ(later[0].amount_micro_eur, 3 * 3 * 500);
}

TEST(JobLinesTest, EveryRunningIntervalOfARestartedJobIsBilledOnItsOwn) {
  // on-failure: RUNNING 10 s, FAILED, QUEUED again, RUNNING 70 s: 1 + 2 minutes, not 2.
  BillableJob job;
  job.id = "job_1";
  job.project = "prj_a";
  job.flavor = "ai1-1-cpu";
  job.history = History({{JobState::kQueued, kDay0},
                         {JobState::kRunning, kDay0 + kS},
                         {JobState::kFinalizing, kDay0 + 11 * kS},
                         {JobState::kFailed, kDay0 + 12 * kS},
                         {JobState::kQueued, kDay0 + 12 * kS},
                         {JobState::kRunning, kDay0 + 20 * kS},
                         {JobState::kFinalizing, kDay0 + 90 * kS},
                         {JobState::kDone, kDay0 + 91 * kS}});
  std::vector<Line> lines = ComputeJobLines({&job, 1}, Catalog(), Wide(), kDay0 + kMin * 10, {});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].minutes, 1);
  EXPECT_EQ(lines[1].minutes, 2);
  EXPECT_EQ(SumAmounts(lines), 3 * 500);
}

TEST(JobLinesTest, AppReplicasAreAppLinesAndAnUnknownFlavorIsFree) {
  BillableJob replica = Ran("job_r", "ai1-1-cpu", 1, kDay0, kDay0 + kMin);
  replica.app = "app_1";
  BillableJob gone = Ran("job_g", "retired-flavor", 1, kDay0, kDay0 + kMin);
  std::vector<BillableJob> jobs = {replica, gone};
  std::vector<Line> lines = ComputeJobLines(jobs, Catalog(), Wide(), kDay0 + kMin * 10, {});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].kind, LineKind::kApp);
  EXPECT_EQ(lines[0].resource, "app_1");
  EXPECT_EQ(lines[0].amount_micro_eur, 500);
  EXPECT_EQ(lines[1].resource, "job_g");
  EXPECT_EQ(lines[1].minutes, 1);
  EXPECT_EQ(lines[1].amount_micro_eur, 0);
}

TEST(JobLinesTest, AnIntervalOverMidnightIsSplitByTheDayEachMinuteStartsIn) {
  // 23:59:30 → 00:01:10 is 100 s: 2 started minutes, one starting on each day.
  const int64_t start = kDay0 - 30 * kS;
  BillableJob job = Ran("job_1", "ai1-1-cpu", 1, start, start + 100 * kS);
  std::vector<Line> lines = ComputeJobLines({&job, 1}, Catalog(), Wide(), kDay0 + kMin * 60, {});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].minutes, 1);
  EXPECT_EQ(lines[0].start_unix_micros, start);
  EXPECT_EQ(lines[0].end_unix_micros, kDay0);
  EXPECT_EQ(lines[1].minutes, 1);
  EXPECT_EQ(lines[1].start_unix_micros, kDay0);
  EXPECT_EQ(lines[1].end_unix_micros, start + 100 * kS);
  std::vector<Group> days = GroupLines(lines, GroupBy::kDay);
  ASSERT_EQ(days.size(), 2u);
  EXPECT_EQ(days[0].key, "2026-03-09");
  EXPECT_EQ(days[1].key, "2026-03-10");
  // A window that starts at midnight sees only the second minute.
  std::vector<Line> today =
      ComputeJobLines({&job, 1}, Catalog(), {kDay0, kDay0 + 3600 * kS}, kDay0 + kMin * 60, {});
  ASSERT_EQ(today.size(), 1u);
  EXPECT_EQ(today[0].minutes, 1);
}

TEST(JobLinesTest, MinutesOfAdjacentWindowsAddUpToTheWholeInterval) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 2000; ++i) {
    const int64_t start =
        kDay0 + static_cast<int64_t>(rng() % (3 * 86'400)) * kS + static_cast<int64_t>(rng() % kS);
    const int64_t end = start + static_cast<int64_t>(rng() % (2 * 86'400 * kS));
    // Cut [start - 1 day, end + 1 day) at three random points.
    std::vector<int64_t> cuts = {start - 86'400 * kS, end + 86'400 * kS};
    for (int c = 0; c < 3; ++c) {
      cuts.push_back(start - 3600 * kS + static_cast<int64_t>(rng() % (end - start + 7200 * kS)));
    }
    std::sort(cuts.begin(), cuts.end());
    int64_t sum = 0;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      sum += MinutesStartingIn(start, end, cuts[c], cuts[c + 1]);
    }
    ASSERT_EQ(sum, StartedMinutes(start, end)) << start << " " << end;
    // Through ComputeJobLines (split by day and window) as well.
    BillableJob job = Ran("job", "ai1-1-cpu", 1, start, end);
    int64_t billed = 0;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      for (const Line& l :
           ComputeJobLines({&job, 1}, Catalog(), {cuts[c], cuts[c + 1]}, end + kMin, {})) {
        billed += l.minutes;
      }
    }
    ASSERT_EQ(billed, StartedMinutes(start, end));
  }
}

TEST(RunningIntervalsTest, AGracefulShutdownEndsTheIntervalAtItsTransition) {
  // The server stopped the job at shutdown (FINALIZING, INTERRUPTED) and restarted an hour later.
  std::vector<ServerRun> runs = {{kDay0, kDay0 + 100 * kS}, {kDay0 + 3700 * kS, kDay0 + 3700 * kS}};
  auto history = History({{JobState::kRunning, kDay0 + 10 * kS},
                          {JobState::kFinalizing, kDay0 + 100 * kS},
                          {JobState::kInterrupted, kDay0 + 101 * kS}});
  EXPECT_EQ(RunningIntervals(history, kDay0 + 4000 * kS, runs),
            (std::vector<RunningInterval>{{kDay0 + 10 * kS, kDay0 + 100 * kS, false}}));
}

TEST(RunningIntervalsTest, ACrashIsBilledOnlyUpToTheLastHeartbeat) {
  // Lifetime 1 started at kDay0, last heartbeat at +100 s, crashed; lifetime 2 started an hour
  // later and recorded the job FINALIZING, INTERRUPTED (its last transition).
  std::vector<ServerRun> runs = {{kDay0, kDay0 + 100 * kS}, {kDay0 + 3600 * kS, kDay0 + 3700 * kS}};
  auto history = History({{JobState::kQueued, kDay0 + kS},
                          {JobState::kRunning, kDay0 + 10 * kS},
                          {JobState::kFinalizing, kDay0 + 3601 * kS},
                          {JobState::kInterrupted, kDay0 + 3602 * kS}});
  EXPECT_EQ(RunningIntervals(history, kDay0 + 4000 * kS, runs),
            (std::vector<RunningInterval>{{kDay0 + 10 * kS, kDay0 + 100 * kS, false}}));
  // Before lifetime 2 recovered it, the row still said RUNNING: not billed through the downtime
  // either, and no longer open.
  auto running = History({{JobState::kRunning, kDay0 + 10 * kS}});
  EXPECT_EQ(RunningIntervals(running, kDay0 + 3600 * kS + 1, runs),
            (std::vector<RunningInterval>{{kDay0 + 10 * kS, kDay0 + 100 * kS, false}}));
  // Entering RUNNING after the last heartbeat: nothing is known to have run.
  auto late =
      History({{JobState::kRunning, kDay0 + 150 * kS}, {JobState::kFinalizing, kDay0 + 3601 * kS}});
  EXPECT_EQ(RunningIntervals(late, kDay0 + 4000 * kS, runs),
            (std::vector<RunningInterval>{{kDay0 + 150 * kS, kDay0 + 150 * kS, false}}));
  // Without lifetimes (rows older than billing) the last transition ends it.
  EXPECT_EQ(RunningIntervals(history, kDay0 + 4000 * kS, {}),
            (std::vector<RunningInterval>{{kDay0 + 10 * kS, kDay0 + 3601 * kS, false}}));
  // A job running in the current lifetime stays open.
  auto current = History({{JobState::kRunning, kDay0 + 3650 * kS}});
  EXPECT_EQ(RunningIntervals(current, kDay0 + 3660 * kS, runs),
            (std::vector<RunningInterval>{{kDay0 + 3650 * kS, kDay0 + 3660 * kS, true}}));
}

TEST(JobLinesTest, ACrashedJobIsBilledFromTheHeartbeat) {
  std::vector<ServerRun> runs = {{kDay0, kDay0 + 100 * kS}, {kDay0 + 3600 * kS, kDay0 + 3700 * kS}};
  BillableJob job =
      Ran("job_1", "ai1-1-cpu", 1, kDay0 + 10 * kS, kDay0 + 3601 * kS, JobState::kInterrupted);
  std::vector<Line> lines = ComputeJobLines({&job, 1}, Catalog(), Wide(), kDay0 + 4000 * kS, runs);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].minutes, 2);  // 90 s, not the hour of downtime
  EXPECT_EQ(lines[0].end_unix_micros, kDay0 + 100 * kS);
}

// --- Storage -------------------------------------------------------------------------------

TEST(StorageLinesTest, OneGibForADayAtTheDefaultPrice) {
  std::vector<StorageSample> samples;
  for (int h = 0; h < 24; ++h) {
    samples.push_back({"prj_a", kDay0 + h * 3600 * kS + 5 * kS, kBytesPerGib});
  }
  std::vector<Line> lines = ComputeStorageLines(samples, Prices{}, Wide(), kDay0 + 48 * 3600 * kS);
  ASSERT_EQ(lines.size(), 1u);
  const Line& l = lines[0];
  EXPECT_EQ(l.kind, LineKind::kStorage);
  EXPECT_EQ(l.resource, "buckets");
  // 24 GiB-hours = 24/730 GiB-months: 32 876.71 micro-GiB-months, 328.767 µ€ at 0.01 €.
  EXPECT_EQ(l.quantity, 32'877);
  EXPECT_EQ(l.amount_micro_eur, 329);
  EXPECT_EQ(l.unit_price_micro_eur, 10'000);
  EXPECT_EQ(l.start_unix_micros, kDay0);
  EXPECT_EQ(l.end_unix_micros, kDay0 + 24 * 3600 * kS);
  EXPECT_FALSE(l.open);
}

TEST(StorageLinesTest, AGibMonthIsTheCatalogPriceAndEachHourCountsOnce) {
  std::vector<StorageSample> samples;
  for (int h = 0; h < 24; ++h) {
    // Two samples in the same hour (a restart, a faster sampler): the larger one counts, once.
    samples.push_back({"prj_a", kDay0 + h * 3600 * kS, kBytesPerGib * 73 / 2});
    samples.push_back({"prj_a", kDay0 + h * 3600 * kS + 1800 * kS, kBytesPerGib * 73 / 2 - 1});
  }
  // 36.5 GiB × 24 h = 876 GiB-hours = 1.2 GiB-months.
  Prices prices;
  prices.gib_month_micro_eur = 10'000;
  std::vector<Line> lines = ComputeStorageLines(samples, prices, Wide(), kDay0 + 48 * 3600 * kS);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].quantity, 1'200'000);
  EXPECT_EQ(lines[0].amount_micro_eur, 12'000);
}

TEST(StorageLinesTest, RoundsHalfUpOncePerLine) {
  Prices prices;
  prices.gib_month_micro_eur = 1;  // 0.000001 € per GiB-month
  // 365 GiB-hours = half a GiB-month: 0.5 µ€ rounds up to 1; one byte less rounds down to 0.
  auto amount = [&](uint64_t bytes) {
    StorageSample s{"prj_a", kDay0, bytes};
    std::vector<Line> lines = ComputeStorageLines({&s, 1}, prices, Wide(), kDay0);
    return lines.empty() ? int64_t{-1} : lines[0].amount_micro_eur;
  };
  EXPECT_EQ(amount(kBytesPerGib * 365), 1);
  EXPECT_EQ(amount(kBytesPerGib * 365 - 1), 0);
  EXPECT_EQ(amount(kBytesPerGib * 365 * 3), 2);  // 1.5 → 2
  EXPECT_EQ(amount(kBytesPerGib * 730), 1);
  // Two days of half a GiB-month each: each line rounds on its own (1 + 1, not round(1.0)).
  std::vector<StorageSample> two = {{"prj_a", kDay0, kBytesPerGib * 365},
                                    {"prj_a", kDay0 + 86'400 * kS, kBytesPerGib * 365}};
  std::vector<Line> lines = ComputeStorageLines(two, prices, Wide(), kDay0);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(SumAmounts(lines), 2);
}

TEST(StorageLinesTest, EachResourceOfAProjectIsALineOfItsOwn) {
  std::vector<StorageSample> samples = {
      {"prj_a", kDay0, kBytesPerGib * 730},
      {"prj_a", kDay0, kBytesPerGib * 730 * 2, "registry:team/trainer"},
      {"prj_a", kDay0 + 10 * kMin, kBytesPerGib * 730 * 3, "registry:team/trainer"},  // same hour
  };
  std::vector<Line> lines = ComputeStorageLines(samples, Prices{}, Wide(), kDay0 + 3600 * kS);
  ASSERT_EQ(lines.size(), 2u);
  std::map<std::string, int64_t> quantity;  // micro-GiB-months
  for (const Line& l : lines) quantity[l.resource] = l.quantity;
  // One hour of 730 GiB is one GiB-month / 730 × 730 = 1 GiB-month; the repository's hour counts
  // its largest sample (3×).
  EXPECT_EQ(quantity, (std::map<std::string, int64_t>{{"buckets", 1'000'000},
                                                      {"registry:team/trainer", 3'000'000}}));
}

TEST(StorageLinesTest, HoursBelongToTheWindowTheyStartIn) {
  std::vector<StorageSample> samples = {
      {"prj_a", kDay0 - 3600 * kS + 59 * kMin, kBytesPerGib},  // the hour before the window
      {"prj_a", kDay0 + 10 * kMin, kBytesPerGib},              // hour 0
      {"prj_b", kDay0 + 3600 * kS, kBytesPerGib},              // hour 1, another project
      {"prj_a", kDay0 + 7200 * kS, kBytesPerGib},              // hour 2: after the window
  };
  std::vector<Line> lines =
      ComputeStorageLines(samples, Prices{}, {kDay0, kDay0 + 7200 * kS}, kDay0 + 5400 * kS);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].project, "prj_a");
  EXPECT_EQ(lines[0].quantity, 1370);  // 1/730 GiB-month = 1369.86 micro
  EXPECT_FALSE(lines[0].open);
  EXPECT_EQ(lines[1].project, "prj_b");
  EXPECT_TRUE(lines[1].open);  // its hour is not over at `now`
}

// --- Tokens --------------------------------------------------------------------------------

TEST(TokenLinesTest, CatalogEndpointsOnlyPerCallingProjectAndDay) {
  const int64_t minute0 = kDay0 / kMin;
  std::vector<TokenUsage> usage = {
      {"app_cat", "prj_a", minute0, 1'000'000, 2'000'000},
      {"app_cat", "prj_a", minute0 + 5, 0, 1},
      {"app_cat", "prj_b", minute0 + 1, 10, 20},
      {"app_private", "prj_a", minute0, 5'000'000, 0},  // not a catalog endpoint
      {"app_cat", "prj_a", minute0 + 24 * 60, 1, 0},    // the next day
  };
  std::map<std::string, std::string> endpoints = {{"app_cat", "llama-3-8b"}};
  std::vector<Line> lines =
      ComputeTokenLines(usage, endpoints, Prices{}, Wide(), kDay0 + 86'400 * kS * 3);
  SortLines(lines);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].project, "prj_a");
  EXPECT_EQ(lines[0].kind, LineKind::kTokens);
  EXPECT_EQ(lines[0].resource, "llama-3-8b");
  EXPECT_EQ(lines[0].quantity, 3'000'001);
  // 3 000 001 tokens × 0.50 € / million = 1 500 000.5 µ€ → 1 500 001.
  EXPECT_EQ(lines[0].amount_micro_eur, 1'500'001);
  EXPECT_EQ(lines[0].unit_price_micro_eur, 500'000);
  EXPECT_EQ(lines[0].start_unix_micros, kDay0);
  EXPECT_EQ(lines[0].end_unix_micros, kDay0 + 6 * kMin);
  EXPECT_EQ(lines[1].project, "prj_b");
  EXPECT_EQ(lines[1].amount_micro_eur, 15);
  EXPECT_EQ(lines[2].project, "prj_a");
  EXPECT_EQ(lines[2].amount_micro_eur, 1);  // 0.5 µ€ rounds half up
  // Only the first day in a window of that day.
  EXPECT_EQ(
      ComputeTokenLines(usage, endpoints, Prices{}, {kDay0, kDay0 + 86'400 * kS}, kDay0).size(),
      2u);
}

// --- Groups, statements, months -------------------------------------------------------------

TEST(GroupsTest, ByEveryKeyAndTheirSumIsTheTotal) {
  std::vector<BillableJob> jobs = {
      Ran("job_1", "ai1-1-cpu", 2, kDay0, kDay0 + 90 * kS),
      Ran("job_2", "h100-1-gpu", 1, kDay0 + 86'400 * kS, kDay0 + 86'400 * kS + 30 * kS)};
  jobs[1].project = "prj_b";
  std::vector<Line> lines = ComputeJobLines(jobs, Catalog(), Wide(), kDay0 + 3 * 86'400 * kS, {});
  StorageSample s{"prj_a", kDay0, kBytesPerGib * 730};
  for (const Line& l : ComputeStorageLines({&s, 1}, Prices{}, Wide(), kDay0)) lines.push_back(l);
  const int64_t total = SumAmounts(lines);
  EXPECT_EQ(total, 2 * 2 * 500 + 46'700 + 10'000);
  for (GroupBy by : {GroupBy::kProject, GroupBy::kFlavor, GroupBy::kResource, GroupBy::kDay}) {
    int64_t sum = 0;
    for (const Group& g : GroupLines(lines, by)) sum += g.amount_micro_eur;
    EXPECT_EQ(sum, total);
  }
  std::vector<Group> by_project = GroupLines(lines, GroupBy::kProject);
  ASSERT_EQ(by_project.size(), 2u);
  EXPECT_EQ(by_project[0], (Group{"prj_a", 2000 + 10'000, 2, 4 + 1'000'000}));
  EXPECT_EQ(by_project[1], (Group{"prj_b", 46'700, 1, 1}));
  std::vector<Group> by_flavor = GroupLines(lines, GroupBy::kFlavor);
  ASSERT_EQ(by_flavor.size(), 3u);
  EXPECT_EQ(by_flavor[0].key, "ai1-1-cpu");
  EXPECT_EQ(by_flavor[1].key, "h100-1-gpu");
  EXPECT_EQ(by_flavor[2].key, "storage");
  EXPECT_EQ(GroupLines(lines, GroupBy::kResource)[0].key, "buckets");
  EXPECT_EQ(GroupLines(lines, GroupBy::kDay).size(), 2u);
  EXPECT_EQ(*ParseGroupBy("day"), GroupBy::kDay);
  EXPECT_FALSE(ParseGroupBy("week").ok());
}

TEST(StatementTest, TheTotalIsTheSumOfTheSortedLines) {
  std::vector<BillableJob> jobs;
  for (int i = 0; i < 50; ++i) {
    jobs.push_back(Ran("job_" + std::to_string(i), i % 2 ? "l4-1-gpu" : "ai1-1-cpu", 1 + i % 3,
                       kDay0 + (50 - i) * 997 * kS, kDay0 + (50 - i) * 997 * kS + i * 61 * kS + 1));
  }
  std::vector<Line> lines = ComputeJobLines(jobs, Catalog(), Wide(), kDay0 + 30 * 86'400 * kS, {});
  Month march = *ParseMonth("2026-03");
  Statement st = MakeStatement("prj_a", march, lines);
  EXPECT_EQ(st.total_micro_eur, SumAmounts(st.lines));
  int64_t by_hand = 0;
  for (const Line& l : lines) by_hand += l.amount_micro_eur;
  EXPECT_EQ(st.total_micro_eur, by_hand);
  EXPECT_EQ(st.lines.size(), lines.size());
  EXPECT_TRUE(std::is_sorted(st.lines.begin(), st.lines.end(), [](const Line& a, const Line& b) {
    return a.start_unix_micros < b.start_unix_micros;
  }));
  EXPECT_EQ(MakeStatement("prj_a", march, {}).total_micro_eur, 0);
}

TEST(MonthTest, ParsesAndBounds) {
  Month feb = *ParseMonth("2026-02");
  EXPECT_EQ(feb.start_unix_micros, At("2026-02-01T00:00:00Z"));
  EXPECT_EQ(feb.end_unix_micros, At("2026-03-01T00:00:00Z"));
  EXPECT_EQ(feb.Name(), "2026-02");
  EXPECT_EQ(ParseMonth("2024-02")->end_unix_micros, At("2024-03-01T00:00:00Z"));
  EXPECT_EQ(ParseMonth("2026-12")->end_unix_micros, At("2027-01-01T00:00:00Z"));
  for (const char* bad : {"2026-13", "2026-00", "26-01", "2026-1", "2026/01", "", "1969-12"}) {
    EXPECT_FALSE(ParseMonth(bad).ok()) << bad;
  }
  EXPECT_EQ(MonthOf(At("2026-03-31T23:59:59.999999Z")).Name(), "2026-03");
  EXPECT_EQ(MonthOf(At("2026-04-01T00:00:00Z")).Name(), "2026-04");
}

TEST(MonthTest, AJobOverTheMonthEndIsSplitBetweenTheStatements) {
  const int64_t start = At("2026-03-31T23:59:00Z");
  BillableJob job = Ran("job_1", "ai1-1-cpu", 1, start, start + 150 * kS);  // 3 minutes
  Month march = *ParseMonth("2026-03");
  Month april = *ParseMonth("2026-04");
  const int64_t now = At("2026-05-01T00:00:00Z");
  auto minutes = [&](const Month& m) {
    int64_t n = 0;
    for (const Line& l :
         ComputeJobLines({&job, 1}, Catalog(), {m.start_unix_micros, m.end_unix_micros}, now, {})) {
      n += l.minutes;
    }
    return n;
  };
  EXPECT_EQ(minutes(march), 1);
  EXPECT_EQ(minutes(april), 2);
}

// --- Prices and budgets ---------------------------------------------------------------------

TEST(PricesTest, DefaultsValuesAndErrorsNamingTheField) {
  Prices defaults = *ParsePrices("{}");
  EXPECT_EQ(defaults.currency, "EUR");
  EXPECT_EQ(defaults.gib_month_micro_eur, 10'000);
  EXPECT_EQ(defaults.million_tokens_micro_eur, 500'000);
  auto parsed = ParsePrices(
      R"({"currency": "EUR", "price_per_gib_month_eur": "0.02", "price_per_million_tokens_eur": "1.25"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->gib_month_micro_eur, 20'000);
  EXPECT_EQ(parsed->million_tokens_micro_eur, 1'250'000);
  struct Bad {
    const char* json;
    const char* field;
  };
  for (const Bad& bad :
       {Bad{R"({"currency": "USD"})", "currency"},
        Bad{R"({"price_per_gib_month_eur": 0.01})", "price_per_gib_month_eur"},
        Bad{R"({"price_per_gib_month_eur": "-1"})", "price_per_gib_month_eur"},
        Bad{R"({"price_per_million_tokens_eur": "0.1234567"})", "price_per_million_tokens_eur"},
        Bad{R"({"price_per_token": "1"})", "price_per_token"}, Bad{R"([1])", "object"},
        Bad{"{", "prices"}}) {
    auto st = ParsePrices(bad.json);
    ASSERT_FALSE(st.ok()) << bad.json;
    EXPECT_EQ(st.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(st.status().message().find(bad.field), std::string::npos) << st.status();
  }
}

TEST(CostAtTimeoutTest, EqualsTheBillOfAJobThatRanExactlyToItsTimeout) {
  for (int64_t timeout_s : {1, 59, 60, 61, 3600, 7 * 24 * 3600}) {
    for (const char* flavor : {"ai1-1-cpu", "h100-1-gpu"}) {
      const Flavor* f = *Catalog().Find(flavor);
      BillableJob job = Ran("job", flavor, 3, kDay0, kDay0 + timeout_s * kS, JobState::kTimeout);
      std::vector<Line> lines = ComputeJobLines(
          {&job, 1}, Catalog(), {kDay0, kDay0 + 8 * 86'400 * kS}, kDay0 + 9 * 86'400 * kS, {});
      EXPECT_EQ(CostAtTimeout(PricePerMinute(*f, 3), timeout_s), SumAmounts(lines))
          << flavor << " " << timeout_s;
    }
  }
  EXPECT_EQ(CostAtTimeout(46'700, 61), 2 * 46'700);
  EXPECT_EQ(CostAtTimeout(INT64_MAX, 3600), INT64_MAX);  // saturates
}

TEST(BudgetTest, AlertCapAndAdmission) {
  Budget b{50'000'000, 80};
  EXPECT_FALSE(BudgetAlert(b, 39'999'999));
  EXPECT_TRUE(BudgetAlert(b, 40'000'000));
  EXPECT_FALSE(BudgetCapped(b, 49'999'999));
  EXPECT_TRUE(BudgetCapped(b, 50'000'000));
  // Exactly up to the cap is admitted; one µ€ more is not.
  EXPECT_TRUE(CheckBudget(b, 40'000'000, 10'000'000, "this job").ok());
  base::Status over = CheckBudget(b, 40'000'000, 10'000'001, "this job");
  EXPECT_EQ(over.code(), base::StatusCode::kFailedPrecondition);
  for (const char* number : {"40.000000", "10.000001", "50.000000", "10.000000 € left"}) {
    EXPECT_NE(over.message().find(number), std::string::npos) << over.message();
  }
  // A capped project admits nothing, not even a free job.
  base::Status capped = CheckBudget(b, 50'000'000, 0, "this job");
  EXPECT_EQ(capped.code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(capped.message().find("is reached"), std::string::npos) << capped.message();
  // A zero cap: nothing runs.
  EXPECT_FALSE(CheckBudget(Budget{0, 80}, 0, 1, "this job").ok());
}

}  // namespace
}  // namespace sovai::control

namespace sovai::control {
namespace {

// A job that the restart policy ran again after its server died (job_restart.h): the lost try
// is billed up to the dead lifetime's last heartbeat, the second from its own RUNNING: the two
// intervals do not overlap, and their minutes add up once.
TEST(RunningIntervalsTest, ATryLostWithItsServerAndItsRerunAreBilledOnceEach) {
  std::vector<ServerRun> runs = {{kDay0, kDay0 + 100 * kS}, {kDay0 + 3600 * kS, kDay0 + 9000 * kS}};
  auto history = History({{JobState::kQueued, kDay0 + kS},
                          {JobState::kRunning, kDay0 + 10 * kS},
                          // Recovery in lifetime 2: the lost try ends, and is queued again.
                          {JobState::kFinalizing, kDay0 + 3601 * kS},
                          {JobState::kInterrupted, kDay0 + 3602 * kS},
                          {JobState::kQueued, kDay0 + 3602 * kS},
                          {JobState::kInitializing, kDay0 + 3603 * kS},
                          {JobState::kRunning, kDay0 + 3610 * kS},
                          {JobState::kFinalizing, kDay0 + 3730 * kS},
                          {JobState::kDone, kDay0 + 3731 * kS}});
  const std::vector<RunningInterval> intervals = RunningIntervals(history, kDay0 + 9000 * kS, runs);
  EXPECT_EQ(intervals,
            (std::vector<RunningInterval>{{kDay0 + 10 * kS, kDay0 + 100 * kS, false},
                                          {kDay0 + 3610 * kS, kDay0 + 3730 * kS, false}}));
  BillableJob job;
  job.id = "job_retried";
  job.project = "prj_a";
  job.flavor = "ai1-1-cpu";
  job.units = 1;
  job.history = history;
  int64_t minutes = 0;
  for (const Line& l : ComputeJobLines({&job, 1}, Catalog(), {kDay0, kDay0 + 86400 * kS},
                                       kDay0 + 9000 * kS, runs)) {
    minutes += l.minutes;
  }
  // 90 s (2 started minutes) + 120 s (2 started minutes).
  EXPECT_EQ(minutes, 4);
}

}  // namespace
}  // namespace sovai::control
