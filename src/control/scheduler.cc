#include "control/scheduler.h"

#include <algorithm>

#include "base/check.h"
#include "base/strings.h"

namespace sovai::control {
namespace {

std::string Plural(int n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string GpuWord(int n, const std::string& model) {
  std::string s = Plural(n, "GPU", "GPUs");
  if (!model.empty()) s += " (" + model + ")";
  return s;
}

}  // namespace

Scheduler::Scheduler(Capacity capacity)
    : capacity_(std::move(capacity)),
      cpu_taken_(static_cast<size_t>(std::max(capacity_.cpus, 0)), false),
      gpu_taken_(capacity_.gpus.size(), false),
      free_memory_bytes_(capacity_.memory_bytes) {}

base::Status Scheduler::CheckFits(const ResourceRequest& request) const {
  if (request.gpus > 0) {
    int matching = 0;
    for (const GpuSlot& g : capacity_.gpus) {
      if (request.gpu_model.empty() || GpuMatchesModel(g.name, request.gpu_model)) ++matching;
    }
    if (matching < request.gpus) {
      return base::FailedPreconditionError("this machine has " +
                                           GpuWord(matching, request.gpu_model) +
                                           "; the request needs " + std::to_string(request.gpus));
    }
  }
  if (request.cpus > capacity_.cpus) {
    return base::FailedPreconditionError("this machine has " +
                                         Plural(capacity_.cpus, "CPU", "CPUs") +
                                         "; the request needs " + std::to_string(request.cpus));
  }
  if (request.memory_bytes > capacity_.memory_bytes) {
    return base::FailedPreconditionError(
        "this machine has " + base::HumanBytes(capacity_.memory_bytes) +
        " of memory for workloads; the request needs " + base::HumanBytes(request.memory_bytes));
  }
  return base::Status();
}

void Scheduler::SetQuota(const std::string& project, Quota quota) { quotas_[project] = quota; }

void Scheduler::Enqueue(QueuedWork work) {
  SOVAI_CHECK(!queue_.contains(work.id) && !running_.contains(work.id)) << work.id;
  std::string id = work.id;
  queue_.emplace(std::move(id), Queued{std::move(work), next_sequence_++});
}

bool Scheduler::Dequeue(const std::string& id) { return queue_.erase(id) > 0; }

base::Status Scheduler::Restore(const std::string& id, const std::string& project,
                                const Allocation& allocation) {
  if (running_.contains(id)) return base::FailedPreconditionError(id + " already holds resources");
  for (int cpu : allocation.cpus) {
    if (cpu < 0 || cpu >= capacity_.cpus || cpu_taken_[static_cast<size_t>(cpu)]) {
      return base::FailedPreconditionError(id + ": CPU " + std::to_string(cpu) +
                                           " is not available on this machine");
    }
  }
  for (int gpu : allocation.gpus) {
    auto it = std::find_if(capacity_.gpus.begin(), capacity_.gpus.end(),
                           [&](const GpuSlot& g) { return g.index == gpu; });
    if (it == capacity_.gpus.end() ||
        gpu_taken_[static_cast<size_t>(it - capacity_.gpus.begin())]) {
      return base::FailedPreconditionError(id + ": GPU " + std::to_string(gpu) +
                                           " is not available on this machine");
    }
  }
  if (allocation.memory_bytes > free_memory_bytes_) {
    return base::FailedPreconditionError(id + ": not enough free memory to re-attach");
  }
  Take(id, project, allocation);
  return base::Status();
}

bool Scheduler::Release(const std::string& id) {
  auto it = running_.find(id);
  if (it == running_.end()) return false;
  const Allocation& a = it->second.allocation;
  for (int cpu : a.cpus) cpu_taken_[static_cast<size_t>(cpu)] = false;
  for (int gpu : a.gpus) {
    for (size_t i = 0; i < capacity_.gpus.size(); ++i) {
      if (capacity_.gpus[i].index == gpu) gpu_taken_[i] = false;
    }
  }
  free_memory_bytes_ += a.memory_bytes;
  running_.erase(it);
  return true;
}

std::vector<const Scheduler::Queued*> Scheduler::Ordered() const {
  std::vector<const Queued*> order;
  order.reserve(queue_.size());
  for (const auto& [id, q] : queue_) order.push_back(&q);
  std::sort(order.begin(), order.end(), [](const Queued* a, const Queued* b) {
    if (a->work.priority != b->work.priority) return a->work.priority > b->work.priority;
    return a->sequence < b->sequence;
  });
  return order;
}

Scheduler::Usage Scheduler::ProjectUsage(const std::string& project) const {
  Usage u;
  for (const auto& [id, held] : running_) {
    if (held.project != project) continue;
    u.gpus += static_cast<int>(held.allocation.gpus.size());
    u.cpus += static_cast<int>(held.allocation.cpus.size());
  }
  return u;
}

std::string Scheduler::QuotaBlock(const std::string& project,
                                  const ResourceRequest& request) const {
  auto it = quotas_.find(project);
  if (it == quotas_.end()) return "";
  const Quota& q = it->second;
  Usage u = ProjectUsage(project);
  if (q.max_gpus && request.gpus > 0 && u.gpus + request.gpus > *q.max_gpus) {
    return "project quota: " + Plural(*q.max_gpus, "GPU", "GPUs") + " at once, " +
           std::to_string(u.gpus) + " in use";
  }
  if (q.max_cpus && u.cpus + request.cpus > *q.max_cpus) {
    return "project quota: " + Plural(*q.max_cpus, "CPU", "CPUs") + " at once, " +
           std::to_string(u.cpus) + " in use";
  }
  return "";
}

std::optional<Allocation> Scheduler::TryAllocate(const ResourceRequest& request,
                                                 std::string* why) const {
  Allocation a;
  for (size_t i = 0; i < capacity_.gpus.size() && static_cast<int>(a.gpus.size()) < request.gpus;
       ++i) {
    if (gpu_taken_[i]) continue;
    if (!request.gpu_model.empty() && !GpuMatchesModel(capacity_.gpus[i].name, request.gpu_model)) {
      continue;
    }
    a.gpus.push_back(capacity_.gpus[i].index);
  }
  if (static_cast<int>(a.gpus.size()) < request.gpus) {
    *why = "waiting for " + GpuWord(request.gpus, request.gpu_model) + ", " +
           std::to_string(a.gpus.size()) + " free";
    return std::nullopt;
  }
  for (int cpu = 0; cpu < capacity_.cpus && static_cast<int>(a.cpus.size()) < request.cpus; ++cpu) {
    if (!cpu_taken_[static_cast<size_t>(cpu)]) a.cpus.push_back(cpu);
  }
  if (static_cast<int>(a.cpus.size()) < request.cpus) {
    *why = "waiting for " + Plural(request.cpus, "CPU", "CPUs") + ", " +
           std::to_string(a.cpus.size()) + " free";
    return std::nullopt;
  }
  if (request.memory_bytes > free_memory_bytes_) {
    *why = "waiting for " + base::HumanBytes(request.memory_bytes) + " of memory, " +
           base::HumanBytes(free_memory_bytes_) + " free";
    return std::nullopt;
  }
  std::sort(a.gpus.begin(), a.gpus.end());
  a.memory_bytes = request.memory_bytes;
  return a;
}

void Scheduler::Take(const std::string& id, const std::string& project, Allocation allocation) {
  for (int cpu : allocation.cpus) cpu_taken_[static_cast<size_t>(cpu)] = true;
  for (int gpu : allocation.gpus) {
    for (size_t i = 0; i < capacity_.gpus.size(); ++i) {
      if (capacity_.gpus[i].index == gpu) gpu_taken_[i] = true;
    }
  }
  free_memory_bytes_ -= allocation.memory_bytes;
  running_[id] = Held{project, std::move(allocation)};
}

std::vector<Placement> Scheduler::Schedule() {
  std::vector<Placement> placed;
  for (const Queued* q : Ordered()) {
    const QueuedWork& w = q->work;
    if (!QuotaBlock(w.project, w.request).empty()) continue;  // waits; blocks nobody
    std::string why;
    std::optional<Allocation> a = TryAllocate(w.request, &why);
    if (!a) break;  // no backfill: everything after it waits too
    const std::string id = w.id;
    placed.push_back(Placement{id, *a});
    Take(id, w.project, std::move(*a));
    queue_.erase(id);  // `q` and `w` dangle from here on
  }
  return placed;
}

std::vector<QueueEntry> Scheduler::Queue() const {
  std::vector<QueueEntry> out;
  bool blocked = false;
  std::string blocker;
  for (const Queued* q : Ordered()) {
    const QueuedWork& w = q->work;
    QueueEntry e{w.id, w.project, w.priority, static_cast<int>(out.size()) + 1, ""};
    e.reason = QuotaBlock(w.project, w.request);
    if (e.reason.empty()) {
      if (blocked) {
        e.reason = "behind " + blocker;
      } else {
        std::string why;
        if (!TryAllocate(w.request, &why)) {
          e.reason = why;
          blocked = true;
          blocker = w.id;
        } else {
          e.reason = "starting";
        }
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

bool Scheduler::IsQueued(const std::string& id) const { return queue_.contains(id); }

std::optional<Allocation> Scheduler::Running(const std::string& id) const {
  auto it = running_.find(id);
  if (it == running_.end()) return std::nullopt;
  return it->second.allocation;
}

int Scheduler::free_cpus() const {
  return static_cast<int>(std::count(cpu_taken_.begin(), cpu_taken_.end(), false));
}

int Scheduler::free_gpus() const {
  return static_cast<int>(std::count(gpu_taken_.begin(), gpu_taken_.end(), false));
}

}  // namespace sovai::control
