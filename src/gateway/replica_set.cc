#include "gateway/replica_set.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "base/check.h"

namespace sovai::gateway {

// Shared by the set and the leases on it, so a lease can be released after the replica left the
// set, or after the set itself is gone.
struct ReplicaSet::Entry {
  explicit Entry(Replica r) : replica(std::move(r)) {}
  const Replica replica;
  // Atomics, not guarded by the set's mutex: leases decrement them without the set.
  std::atomic<uint64_t> in_flight{0};
  std::atomic<uint64_t> acquired{0};
};

ReplicaSet::Lease& ReplicaSet::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    entry_ = std::move(other.entry_);
  }
  return *this;
}

const Replica& ReplicaSet::Lease::replica() const {
  SOVAI_CHECK(entry_ != nullptr) << "replica() on a released lease";
  return entry_->replica;
}

void ReplicaSet::Lease::Release() {
  if (entry_ == nullptr) return;
  entry_->in_flight.fetch_sub(1, std::memory_order_acq_rel);
  entry_.reset();
}

ReplicaSet::ReplicaSet() = default;
ReplicaSet::~ReplicaSet() = default;

namespace {

bool Busy(const auto& entry) { return entry->in_flight.load(std::memory_order_acquire) > 0; }

}  // namespace

void ReplicaSet::Update(std::vector<Replica> replicas) {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Entry>> next;
  next.reserve(replicas.size());
  for (Replica& r : replicas) {
    bool duplicate =
        std::any_of(next.begin(), next.end(), [&](const auto& e) { return e->replica.id == r.id; });
    if (duplicate) continue;
    auto same = std::find_if(active_.begin(), active_.end(),
                             [&](const auto& e) { return e && e->replica == r; });
    if (same != active_.end()) {
      next.push_back(std::move(*same));  // leaves a null in active_: it is not going away
    } else {
      next.push_back(std::make_shared<Entry>(std::move(r)));
    }
  }
  for (auto& gone : active_) {
    if (gone && Busy(gone)) draining_.push_back(std::move(gone));
  }
  std::erase_if(draining_, [](const auto& e) { return !Busy(e); });
  active_ = std::move(next);
}

std::optional<ReplicaSet::Lease> ReplicaSet::Acquire(std::span<const std::string> exclude) {
  std::lock_guard lock(mu_);
  const size_t n = active_.size();
  if (n == 0) return std::nullopt;
  size_t best = n;
  uint64_t best_in_flight = 0;
  // Scan from next_ so that, among equally loaded replicas, the one after the last pick wins.
  for (size_t i = 0; i < n; ++i) {
    size_t index = (next_ + i) % n;
    const Entry& e = *active_[index];
    if (std::find(exclude.begin(), exclude.end(), e.replica.id) != exclude.end()) continue;
    uint64_t in_flight = e.in_flight.load(std::memory_order_acquire);
    if (best == n || in_flight < best_in_flight) {
      best = index;
      best_in_flight = in_flight;
    }
  }
  if (best == n) return std::nullopt;
  next_ = (best + 1) % n;
  active_[best]->in_flight.fetch_add(1, std::memory_order_acq_rel);
  active_[best]->acquired.fetch_add(1, std::memory_order_relaxed);
  return Lease(active_[best]);
}

std::vector<ReplicaStats> ReplicaSet::Snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<ReplicaStats> out;
  out.reserve(active_.size() + draining_.size());
  auto add = [&](const Entry& e, bool draining) {
    out.push_back({.replica = e.replica,
                   .in_flight = e.in_flight.load(std::memory_order_acquire),
                   .acquired = e.acquired.load(std::memory_order_relaxed),
                   .draining = draining});
  };
  for (const auto& e : active_) add(*e, false);
  for (const auto& e : draining_) {
    if (Busy(e)) add(*e, true);
  }
  return out;
}

size_t ReplicaSet::size() const {
  std::lock_guard lock(mu_);
  return active_.size();
}

}  // namespace sovai::gateway
