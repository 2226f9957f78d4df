// The scheduler of one machine's resources: which queued workload starts next, and on exactly
// which GPUs (by index), CPUs (by index) and how much memory.
//
// Order: higher priority first, then submission order (FIFO). A workload whose project is at its
// quota (concurrent GPUs or CPUs) waits without blocking anyone. Otherwise the first workload in
// that order that does not fit the free resources blocks every workload after it (no backfill),
// so a large job is never starved by a stream of small ones.
//
//   Scheduler s(capacity);
//   SOVAI_RETURN_IF_ERROR(s.CheckFits(request));      // at submission: could it ever run here?
//   s.Enqueue({.id = "job_…", .project = "prj_…", .priority = 0, .request = request});
//   for (const Placement& p : s.Schedule()) Start(p.id, p.allocation);
//   ... when it ends: s.Release(id); s.Schedule();
//
// Thread-safety: none; the owner serializes calls (the job service holds its mutex around them).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "control/flavors.h"

namespace sovai::control {

struct GpuSlot {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
};

// What the machine offers to workloads.
struct Capacity {
  int cpus = 0;
  uint64_t memory_bytes = 0;
  std::vector<GpuSlot> gpus;
};

// Exactly what one running workload holds.
struct Allocation {
  std::vector<int> gpus;  // indexes, ascending
  std::vector<int> cpus;  // indexes, ascending
  uint64_t memory_bytes = 0;
};

// Limits on what one project may hold at once; nullopt: no limit.
struct Quota {
  std::optional<int> max_gpus;
  std::optional<int> max_cpus;
};

struct QueuedWork {
  std::string id;
  std::string project;
  int priority = 0;  // higher runs first
  ResourceRequest request;
};

struct Placement {
  std::string id;
  Allocation allocation;
};

// Why a queued workload has not started yet, for `job get` and the panel.
struct QueueEntry {
  std::string id;
  std::string project;
  int priority = 0;
  int position = 0;    // 1-based in scheduling order
  std::string reason;  // "waiting for 1 GPU (H100)", "project quota: 4 GPUs"
};

class Scheduler {
 public:
  explicit Scheduler(Capacity capacity);

  const Capacity& capacity() const { return capacity_; }

  // OK when the machine has enough of everything for `request` when idle; FailedPrecondition
  // otherwise, naming what is missing ("this machine has 0 GPUs of model H100; the flavor needs
  // 1").
  base::Status CheckFits(const ResourceRequest& request) const;

  void SetQuota(const std::string& project, Quota quota);

  // Adds to the queue. The id must be new (queued or running ids are a bug: SOVAI_CHECK).
  void Enqueue(QueuedWork work);
  // Removes a queued workload; false when it is not queued.
  bool Dequeue(const std::string& id);
  // Takes the resources of a workload that is already running (re-attached after a restart).
  // FailedPrecondition when any of them is out of range or already taken.
  base::Status Restore(const std::string& id, const std::string& project,
                       const Allocation& allocation);
  // Frees a running workload's resources; false when it holds none.
  bool Release(const std::string& id);

  // Starts what can start, in order, and returns the placements (now held as running).
  std::vector<Placement> Schedule();

  std::vector<QueueEntry> Queue() const;
  bool IsQueued(const std::string& id) const;
  std::optional<Allocation> Running(const std::string& id) const;
  int free_cpus() const;
  uint64_t free_memory_bytes() const { return free_memory_bytes_; }
  int free_gpus() const;

 private:
  struct Queued {
    QueuedWork work;
    uint64_t sequence = 0;
  };
  struct Held {
    std::string project;
    Allocation allocation;
  };
  // Held GPUs and CPUs of a project.
  struct Usage {
    int gpus = 0;
    int cpus = 0;
  };

  std::vector<const Queued*> Ordered() const;
  Usage ProjectUsage(const std::string& project) const;
  // Empty when the quota allows `request`; else why not.
  std::string QuotaBlock(const std::string& project, const ResourceRequest& request) const;
  // The allocation from free resources, or nullopt with `why` set.
  std::optional<Allocation> TryAllocate(const ResourceRequest& request, std::string* why) const;
  void Take(const std::string& id, const std::string& project, Allocation allocation);

  Capacity capacity_;
  std::vector<bool> cpu_taken_;
  std::vector<bool> gpu_taken_;  // by position in capacity_.gpus
  uint64_t free_memory_bytes_ = 0;
  std::map<std::string, Queued> queue_;
  std::map<std::string, Held> running_;
  std::map<std::string, Quota> quotas_;
  uint64_t next_sequence_ = 0;
};

}  // namespace sovai::control
