// The upstream replicas of one app and how many requests each is serving, for the gateway's
// least-outstanding-requests balancing.
//
//   gateway::ReplicaSet replicas;
//   replicas.Update({{.id = "r1", .host = "10.0.0.5", .port = 8001},
//                    {.id = "r2", .host = "10.0.0.6", .port = 8001}});
//   std::optional<gateway::ReplicaSet::Lease> lease = replicas.Acquire();
//   if (!lease) ...                       // no replica: answer 503
//   ... send to lease->replica() ...      // the replica counts one more request in flight
//   lease.reset();                        // or let it go out of scope: one less in flight
//
// Thread-safety: every method may be called from any thread. A Lease is not shared between
// threads, but it may be released on any thread and may outlive the ReplicaSet (the counters
// it points to are shared, not owned by the set).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sovai::gateway {

// One replica of an app: an OpenAI-compatible server at host:port.
struct Replica {
  std::string id;  // unique within the set; names the replica in errors and metrics
  std::string host;
  uint16_t port = 0;

  friend bool operator==(const Replica&, const Replica&) = default;
};

// A replica's counters at one moment.
struct ReplicaStats {
  Replica replica;
  uint64_t in_flight = 0;  // leases held now
  uint64_t acquired = 0;   // leases handed out since the replica joined the set
  // Removed by Update() but still serving requests that started before; gets no new ones.
  bool draining = false;
};

class ReplicaSet {
 private:
  struct Entry;

 public:
  // The right to send one request to a replica, counted as in flight until released. Move-only.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Release(); }

    // The replica. Only on a lease that was not released or moved from (SOVAI_CHECK).
    const Replica& replica() const;
    bool held() const { return entry_ != nullptr; }
    // Ends the request early (idempotent); the destructor does it otherwise.
    void Release();

   private:
    friend class ReplicaSet;
    explicit Lease(std::shared_ptr<Entry> entry) : entry_(std::move(entry)) {}
    std::shared_ptr<Entry> entry_;
  };

  ReplicaSet();
  ~ReplicaSet();
  ReplicaSet(const ReplicaSet&) = delete;
  ReplicaSet& operator=(const ReplicaSet&) = delete;

  // Replaces the set of replicas. A replica whose id, host and port are unchanged keeps its
  // counters; one that is gone (or whose address changed) gets no new requests, while the
  // requests it is serving finish normally (it shows as `draining` until they do). Replicas are
  // kept in the given order, which decides who goes first among equally loaded ones. Duplicate
  // ids: the first one wins.
  void Update(std::vector<Replica> replicas);

  // A lease on the replica, among those whose id is not in `exclude`, with the fewest requests
  // in flight; ties go round-robin, so equal replicas take turns. nullopt when there is no such
  // replica.
  std::optional<Lease> Acquire(std::span<const std::string> exclude = {});

  // Every replica in the set, in order, then the draining ones.
  std::vector<ReplicaStats> Snapshot() const;
  // Number of replicas that get new requests.
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Entry>> active_;    // guarded by mu_
  std::vector<std::shared_ptr<Entry>> draining_;  // guarded by mu_; pruned when idle
  size_t next_ = 0;                               // guarded by mu_; where tie-breaking starts
};

}  // namespace sovai::gateway
