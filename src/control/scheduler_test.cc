#include "control/scheduler.h"

#include <gtest/gtest.h>

namespace sovai::control {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

Capacity TwoH100AndOneL4() {
  Capacity c;
  c.cpus = 8;
  c.memory_bytes = 64 * kGiB;
  c.gpus = {{0, "NVIDIA H100 80GB HBM3"}, {1, "NVIDIA L4"}, {2, "NVIDIA H100 80GB HBM3"}};
  return c;
}

ResourceRequest Gpus(int n, const char* model, int cpus = 1) {
  return ResourceRequest{n, cpus, kGiB, model};
}
ResourceRequest Cpus(int n) { return ResourceRequest{0, n, kGiB, ""}; }

std::vector<std::string> Ids(const std::vector<Placement>& placed) {
  std::vector<std::string> ids;
  for (const Placement& p : placed) ids.push_back(p.id);
  return ids;
}

TEST(SchedulerTest, CheckFitsNamesWhatIsMissing) {
  Scheduler s(TwoH100AndOneL4());
  EXPECT_TRUE(s.CheckFits(Gpus(2, "H100")).ok());
  auto three = s.CheckFits(Gpus(3, "H100"));
  EXPECT_EQ(three.code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(three.message().find("2 GPUs (H100)"), std::string::npos) << three.message();
  auto a100 = s.CheckFits(Gpus(1, "A100"));
  EXPECT_NE(a100.message().find("0 GPUs (A100)"), std::string::npos) << a100.message();
  EXPECT_FALSE(s.CheckFits(Cpus(9)).ok());
  EXPECT_FALSE(s.CheckFits(ResourceRequest{0, 1, 65 * kGiB, ""}).ok());
}

TEST(SchedulerTest, AllocatesGpusOfTheModelByIndex) {
  Scheduler s(TwoH100AndOneL4());
  s.Enqueue({"a", "p", 0, Gpus(1, "H100", 2)});
  s.Enqueue({"b", "p", 0, Gpus(1, "L4", 2)});
  s.Enqueue({"c", "p", 0, Gpus(1, "H100", 2)});
  auto placed = s.Schedule();
  ASSERT_EQ(placed.size(), 3u);
  EXPECT_EQ(placed[0].allocation.gpus, std::vector<int>{0});
  EXPECT_EQ(placed[1].allocation.gpus, std::vector<int>{1});
  EXPECT_EQ(placed[2].allocation.gpus, std::vector<int>{2});
  EXPECT_EQ(placed[0].allocation.cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(placed[1].allocation.cpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(s.free_gpus(), 0);
  EXPECT_EQ(s.free_cpus(), 2);
  EXPECT_EQ(s.free_memory_bytes(), 61 * kGiB);
  // Freed GPUs and CPUs are reused exactly.
  EXPECT_TRUE(s.Release("b"));
  EXPECT_FALSE(s.Release("b"));
  s.Enqueue({"d", "p", 0, Gpus(1, "L4", 1)});
  placed = s.Schedule();
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].allocation.gpus, std::vector<int>{1});
  EXPECT_EQ(placed[0].allocation.cpus, std::vector<int>{2});
}

TEST(SchedulerTest, PriorityThenFifoWithoutBackfill) {
  Scheduler s(TwoH100AndOneL4());
  s.Enqueue({"big", "p", 0, Cpus(6)});
  ASSERT_EQ(Ids(s.Schedule()), std::vector<std::string>{"big"});
  s.Enqueue({"wide", "p", 0, Cpus(4)});   // does not fit: 2 CPUs free
  s.Enqueue({"small", "p", 0, Cpus(1)});  // would fit, but must not pass "wide"
  s.Enqueue({"urgent", "p", 5, Cpus(2)});
  // "urgent" has the highest priority and fits; then "wide" blocks "small".
  EXPECT_EQ(Ids(s.Schedule()), std::vector<std::string>{"urgent"});
  auto queue = s.Queue();
  ASSERT_EQ(queue.size(), 2u);
  EXPECT_EQ(queue[0].id, "wide");
  EXPECT_EQ(queue[0].position, 1);
  EXPECT_NE(queue[0].reason.find("waiting for 4 CPUs, 0 free"), std::string::npos)
      << queue[0].reason;
  EXPECT_EQ(queue[1].reason, "behind wide");
  s.Release("big");
  EXPECT_EQ(Ids(s.Schedule()), (std::vector<std::string>{"wide", "small"}));
  EXPECT_TRUE(s.Queue().empty());
}

TEST(SchedulerTest, QuotaMakesAProjectWaitWithoutBlockingOthers) {
  Scheduler s(TwoH100AndOneL4());
  s.SetQuota("a", Quota{1, std::nullopt});
  s.Enqueue({"a1", "a", 0, Gpus(1, "H100")});
  s.Enqueue({"a2", "a", 0, Gpus(1, "H100")});
  s.Enqueue({"b1", "b", 0, Gpus(1, "H100")});
  EXPECT_EQ(Ids(s.Schedule()), (std::vector<std::string>{"a1", "b1"}));
  auto queue = s.Queue();
  ASSERT_EQ(queue.size(), 1u);
  EXPECT_NE(queue[0].reason.find("project quota: 1 GPU"), std::string::npos) << queue[0].reason;
  EXPECT_TRUE(s.IsQueued("a2"));
  s.Release("b1");  // frees a GPU, but a's quota still holds a2 back
  EXPECT_TRUE(s.Schedule().empty());
  s.Release("a1");
  EXPECT_EQ(Ids(s.Schedule()), std::vector<std::string>{"a2"});
  // CPU quotas count CPUs.
  s.SetQuota("c", Quota{std::nullopt, 2});
  s.Enqueue({"c1", "c", 0, Cpus(2)});
  s.Enqueue({"c2", "c", 0, Cpus(1)});
  EXPECT_EQ(Ids(s.Schedule()), std::vector<std::string>{"c1"});
}

TEST(SchedulerTest, DequeueAndRestore) {
  Scheduler s(TwoH100AndOneL4());
  s.Enqueue({"q", "p", 0, Cpus(1)});
  EXPECT_TRUE(s.Dequeue("q"));
  EXPECT_FALSE(s.Dequeue("q"));
  EXPECT_TRUE(s.Schedule().empty());

  Allocation held{{2}, {4, 5}, 4 * kGiB};
  ASSERT_TRUE(s.Restore("r", "p", held).ok());
  EXPECT_EQ(s.Running("r")->cpus, (std::vector<int>{4, 5}));
  EXPECT_EQ(s.free_gpus(), 2);
  EXPECT_EQ(s.free_memory_bytes(), 60 * kGiB);
  // The same resources cannot be restored twice, nor ones the machine lacks.
  EXPECT_FALSE(s.Restore("r2", "p", Allocation{{2}, {}, 0}).ok());
  EXPECT_FALSE(s.Restore("r3", "p", Allocation{{}, {8}, 0}).ok());
  EXPECT_FALSE(s.Restore("r4", "p", Allocation{{7}, {}, 0}).ok());
  // A restored workload is scheduled around.
  s.Enqueue({"h", "p", 0, Gpus(2, "H100")});
  EXPECT_TRUE(s.Schedule().empty());
  s.Release("r");
  auto placed = s.Schedule();
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].allocation.gpus, (std::vector<int>{0, 2}));
}

}  // namespace
}  // namespace sovai::control
