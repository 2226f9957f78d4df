#include "gateway/replica_set.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

namespace sovai::gateway {
namespace {

std::vector<Replica> Three() {
  return {{"a", "127.0.0.1", 1001}, {"b", "127.0.0.1", 1002}, {"c", "127.0.0.1", 1003}};
}

uint64_t InFlight(const ReplicaSet& set, const std::string& id) {
  for (const ReplicaStats& s : set.Snapshot()) {
    if (s.replica.id == id && !s.draining) return s.in_flight;
  }
  ADD_FAILURE() << "no active replica " << id;
  return 0;
}

TEST(ReplicaSetTest, EmptySetHasNoLease) {
  ReplicaSet set;
  EXPECT_FALSE(set.Acquire().has_value());
  EXPECT_EQ(set.size(), 0u);
  EXPECT_TRUE(set.Snapshot().empty());
}

TEST(ReplicaSetTest, PicksTheReplicaWithFewestInFlight) {
  ReplicaSet set;
  set.Update(Three());
  // Three held leases land on three different replicas.
  std::map<std::string, ReplicaSet::Lease> held;
  for (int i = 0; i < 3; ++i) {
    auto lease = set.Acquire();
    ASSERT_TRUE(lease.has_value());
    std::string id = lease->replica().id;
    EXPECT_TRUE(held.emplace(id, std::move(*lease)).second) << id << " chosen twice";
  }
  // b finishes: it is now the only idle replica, so it is chosen every time, whatever the
  // round-robin position.
  held.at("b").Release();
  EXPECT_EQ(InFlight(set, "b"), 0u);
  for (int round = 0; round < 4; ++round) {
    auto next = set.Acquire();
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(next->replica().id, "b") << "round " << round;
  }  // released at the end of each round
  // b busy again: all at 1. The next three leases must go to three different replicas, since
  // each pick raises its replica above the others.
  auto b2 = set.Acquire();
  ASSERT_TRUE(b2.has_value());
  EXPECT_EQ(b2->replica().id, "b");
  std::map<std::string, ReplicaSet::Lease> second;
  for (int i = 0; i < 3; ++i) {
    auto lease = set.Acquire();
    ASSERT_TRUE(lease.has_value());
    std::string id = lease->replica().id;
    EXPECT_TRUE(second.emplace(id, std::move(*lease)).second) << id << " chosen twice";
  }
  EXPECT_EQ(InFlight(set, "a"), 2u);
  EXPECT_EQ(InFlight(set, "b"), 2u);
  EXPECT_EQ(InFlight(set, "c"), 2u);
}

TEST(ReplicaSetTest, TiesAreSpreadRoundRobin) {
  ReplicaSet set;
  set.Update(Three());
  std::map<std::string, int> count;
  std::string previous;
  for (int i = 0; i < 30; ++i) {
    auto lease = set.Acquire();  // released at once: every replica stays at 0
    ASSERT_TRUE(lease.has_value());
    EXPECT_NE(lease->replica().id, previous) << "the same replica twice in a row";
    previous = lease->replica().id;
    ++count[previous];
  }
  EXPECT_EQ(count["a"], 10);
  EXPECT_EQ(count["b"], 10);
  EXPECT_EQ(count["c"], 10);
}

TEST(ReplicaSetTest, LeasesCountAndRelease) {
  ReplicaSet set;
  set.Update({{"a", "h", 1}});
  {
    auto l1 = set.Acquire();
    auto l2 = set.Acquire();
    ASSERT_TRUE(l1 && l2);
    EXPECT_EQ(InFlight(set, "a"), 2u);
    l1->Release();
    EXPECT_FALSE(l1->held());
    l1->Release();  // idempotent
    EXPECT_EQ(InFlight(set, "a"), 1u);
    // Moving keeps one count; the moved-from lease releases nothing.
    ReplicaSet::Lease moved = std::move(*l2);
    EXPECT_FALSE(l2->held());
    EXPECT_EQ(InFlight(set, "a"), 1u);
    // Move-assigning over a held lease releases the old one.
    auto l3 = set.Acquire();
    EXPECT_EQ(InFlight(set, "a"), 2u);
    moved = std::move(*l3);
    EXPECT_EQ(InFlight(set, "a"), 1u);
  }
  EXPECT_EQ(InFlight(set, "a"), 0u);
  ASSERT_EQ(set.Snapshot().size(), 1u);
  EXPECT_EQ(set.Snapshot()[0].acquired, 3u);
}

TEST(ReplicaSetTest, UpdateWhileLeasesAreHeld) {
  ReplicaSet set;
  set.Update(Three());
  std::vector<ReplicaSet::Lease> held;
  for (int i = 0; i < 3; ++i) held.push_back(*set.Acquire());
  // b goes away, d arrives, a and c stay (with their counts).
  set.Update({{"a", "127.0.0.1", 1001}, {"c", "127.0.0.1", 1003}, {"d", "127.0.0.1", 1004}});
  EXPECT_EQ(set.size(), 3u);
  auto snap = set.Snapshot();
  ASSERT_EQ(snap.size(), 4u);
  EXPECT_EQ(snap[0].replica.id, "a");
  EXPECT_EQ(snap[0].in_flight, 1u);
  EXPECT_EQ(snap[2].replica.id, "d");
  EXPECT_EQ(snap[2].in_flight, 0u);
  EXPECT_EQ(snap[3].replica.id, "b");
  EXPECT_TRUE(snap[3].draining);
  EXPECT_EQ(snap[3].in_flight, 1u);
  // The removed replica gets no new request; the idle newcomer is chosen.
  for (int i = 0; i < 20; ++i) {
    auto l = set.Acquire();
    ASSERT_TRUE(l.has_value());
    EXPECT_NE(l->replica().id, "b");
    EXPECT_EQ(l->replica().id, "d");
  }
  // The in-flight request on b finishes normally; b then leaves the snapshot.
  for (auto& l : held) {
    if (l.replica().id == "b") l.Release();
  }
  snap = set.Snapshot();
  ASSERT_EQ(snap.size(), 3u);
  for (const auto& s : snap) EXPECT_FALSE(s.draining);
  // A changed address is a new replica: the old one drains (and so does c, still serving).
  set.Update({{"a", "127.0.0.2", 1001}});
  snap = set.Snapshot();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].replica.host, "127.0.0.2");
  EXPECT_EQ(snap[0].in_flight, 0u);
  EXPECT_FALSE(snap[0].draining);
  EXPECT_EQ(snap[1].replica, (Replica{"a", "127.0.0.1", 1001}));
  EXPECT_TRUE(snap[1].draining);
  EXPECT_EQ(snap[2].replica.id, "c");
  EXPECT_TRUE(snap[2].draining);
  auto lease = set.Acquire();
  ASSERT_TRUE(lease.has_value());
  EXPECT_EQ(lease->replica().host, "127.0.0.2");
  lease.reset();
  // Emptying the set: no more leases, the held ones stay valid.
  set.Update({});
  EXPECT_FALSE(set.Acquire().has_value());
  for (auto& l : held) {
    if (l.held()) {
      EXPECT_FALSE(l.replica().id.empty());
    }
  }
  held.clear();
  EXPECT_TRUE(set.Snapshot().empty());
}

TEST(ReplicaSetTest, DuplicateIdsKeepTheFirst) {
  ReplicaSet set;
  set.Update({{"a", "h", 1}, {"a", "h", 2}, {"b", "h", 3}});
  auto snap = set.Snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[0].replica.port, 1);
}

TEST(ReplicaSetTest, ExcludeSkipsReplicas) {
  ReplicaSet set;
  set.Update(Three());
  std::vector<std::string> exclude = {"a", "c"};
  for (int i = 0; i < 5; ++i) {
    auto l = set.Acquire(exclude);
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(l->replica().id, "b");
  }
  exclude.push_back("b");
  EXPECT_FALSE(set.Acquire(exclude).has_value());
  // Excluding an unknown id changes nothing.
  std::vector<std::string> unknown = {"zz"};
  EXPECT_TRUE(set.Acquire(unknown).has_value());
}

TEST(ReplicaSetTest, LeaseOutlivesTheSet) {
  std::optional<ReplicaSet::Lease> lease;
  {
    ReplicaSet set;
    set.Update({{"a", "h", 1}});
    lease = set.Acquire();
  }
  ASSERT_TRUE(lease.has_value());
  EXPECT_EQ(lease->replica().id, "a");
  lease->Release();  // must not touch the destroyed set
}

TEST(ReplicaSetTest, ConcurrentAcquireAndReleaseBalance) {
  ReplicaSet set;
  set.Update(Three());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto l = set.Acquire();
        ASSERT_TRUE(l.has_value());
        if (i % 100 == 0) set.Update(Three());  // unchanged: keeps counters
      }
    });
  }
  for (auto& t : threads) t.join();
  uint64_t total = 0;
  for (const auto& s : set.Snapshot()) {
    EXPECT_EQ(s.in_flight, 0u);
    EXPECT_FALSE(s.draining);
    total += s.acquired;
  }
  EXPECT_EQ(total, 16000u);
}

}  // namespace
}  // namespace sovai::gateway
