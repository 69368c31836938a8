// Property tests: random queues, workloads and cycles; invariants checked after every cycle.
// Each run prints its seed; TESSERA_SEED is not read (the core is pure): change kSeeds to
// replay one.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "admission/admission.h"
#include "admission/test_util.h"
#include "common/rng.h"

namespace tessera {
namespace {

using testing::Pod;

const std::vector<Shape> kShapes = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2), Shape::Of(2, 2, 4),
                                    Shape::Of(2, 4, 4), Shape::Of(4, 4, 4), Shape::Of(4, 4, 8)};

ClusterQueueSpec RandomQueue(Rng& rng, const std::string& name, const std::string& cohort) {
  ClusterQueueSpec q;
  q.name = name;
  q.cohort = cohort;
  ResourceQuota rq{Generation::k7x, int64_t(rng.Uniform(5)) * 64, std::nullopt, std::nullopt,
                   std::nullopt};
  if (!cohort.empty() && rng.Uniform(3) == 0) rq.borrowing_limit_chips = rng.Uniform(4) * 32;
  if (!cohort.empty() && rng.Uniform(3) == 0)
    rq.lending_limit_chips = std::min<int64_t>(rq.nominal_chips, rng.Uniform(4) * 32);
  q.quotas = {rq};
  q.queueing_strategy =
      rng.Uniform(2) ? QueueingStrategy::kStrictFIFO : QueueingStrategy::kBestEffortFIFO;
  q.preemption.within_cluster_queue = static_cast<WithinClusterQueue>(rng.Uniform(3));
  q.preemption.reclaim_within_cohort = static_cast<ReclaimWithinCohort>(rng.Uniform(3));
  q.preemption.borrow_within_cohort.policy = static_cast<BorrowWithinCohortPolicy>(rng.Uniform(2));
  if (q.preemption.borrow_within_cohort.policy != BorrowWithinCohortPolicy::kNever &&
      rng.Uniform(2))
    q.preemption.borrow_within_cohort.max_priority_threshold = int32_t(rng.Uniform(3));
  q.fair_sharing_weight = 1.0 + double(rng.Uniform(3));
  return q;
}

struct Limits {
  int64_t nominal = 0, guaranteed = 0, lendable = 0;
  std::optional<int64_t> borrow;
  std::string cohort;
};

void CheckQuota(const Snapshot& s, const std::map<std::string, int64_t>& used) {
  std::map<std::string, Limits> limits;
  std::map<std::string, int64_t> pool_cap, pool_used;
  for (const auto& q : s.cluster_queues) {
    Limits l;
    l.nominal = q.quotas[0].nominal_chips;
    l.borrow = q.quotas[0].borrowing_limit_chips;
    l.cohort = q.cohort;
    if (!q.cohort.empty()) l.lendable = q.quotas[0].lending_limit_chips.value_or(l.nominal);
    l.guaranteed = l.nominal - l.lendable;
    limits[q.name] = l;
    pool_cap[q.cohort] += l.lendable;
  }
  for (const auto& [name, u] : used) {
    const Limits& l = limits.at(name);
    if (l.cohort.empty()) {
      EXPECT_LE(u, l.nominal) << name;
      continue;
    }
    if (l.borrow) {
      EXPECT_LE(u, l.nominal + *l.borrow) << name << " beyond its borrowing limit";
    }
    pool_used[l.cohort] += std::max<int64_t>(0, u - l.guaranteed);
  }
  for (const auto& [cohort, u] : pool_used) {
    if (!cohort.empty()) {
      EXPECT_LE(u, pool_cap[cohort]) << "cohort " << cohort;
    }
  }
}

void RunSeed(uint64_t seed) {
  std::cout << "admission property seed " << seed << "\n";
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  Snapshot s;
  s.inventory = Pod(2, 4);
  for (int i = 0; i < 4; ++i)
    s.cluster_queues.push_back(RandomQueue(rng, "q" + std::to_string(i), "co"));
  s.cluster_queues.push_back(RandomQueue(rng, "solo", ""));
  for (const auto& q : s.cluster_queues) s.local_queues.push_back({q.name, q.name});
  AdmissionOptions o;
  o.fair_sharing = rng.Uniform(2) ? FairSharing::kEnabled : FairSharing::kDisabled;
  o.start_guard.start_timeout_ms = 5'000;
  o.start_guard.backoff_base_ms = 1'000;
  o.start_guard.backoff_cap_ms = 8'000;
  o.start_guard.retry_limit = 2;
  Admitter admitter(o);
  // The same cycle at the other explain levels: the same decisions, and (kFitsNextCycleOnly)
  // exactly the workloads that fit now.
  std::vector<Admitter> levels;
  for (Explain level : {Explain::kFitsNextCycleOnly, Explain::kReasons}) {
    AdmissionOptions lo = o;
    lo.explain = level;
    levels.emplace_back(lo);
  }
  uint64_t next_id = 1;
  int64_t now = 0;
  int preemptions = 0, admissions = 0;
  for (int step = 0; step < 60; ++step) {
    now += 1'000 + int64_t(rng.Uniform(3'000));
    // New work.
    for (int n = int(rng.Uniform(6)); n > 0; --n) {
      Workload w;
      w.id = WorkloadId(next_id);
      w.name = "w" + std::to_string(next_id);
      w.creation_order = int64_t(next_id);
      ++next_id;
      w.local_queue = s.cluster_queues[rng.Uniform(s.cluster_queues.size())].name;
      w.priority = int32_t(rng.Uniform(4));
      w.request = {Generation::k7x, kShapes[rng.Uniform(kShapes.size())],
                   rng.Uniform(5) == 0 ? 2 : 1};
      s.workloads.push_back(w);
    }
    // Some running work finishes; some admitted work starts.
    std::vector<Workload> kept;
    for (Workload& w : s.workloads) {
      const bool holds = w.state == WorkloadState::kRunning || w.state == WorkloadState::kAdmitted;
      if (holds && rng.Uniform(8) == 0) {
        s.inventory.Release(OwnerOf(w.id));
        continue;
      }
      if (w.state == WorkloadState::kAdmitted && rng.Uniform(2)) w.state = WorkloadState::kRunning;
      if (w.state == WorkloadState::kRunning && rng.Uniform(3) == 0) w.last_checkpoint_ms = now;
      kept.push_back(w);
    }
    s.workloads = std::move(kept);

    auto result = admitter.Run(s, now);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    const AdmissionCycle& c = *result;
    // Determinism: the same snapshot gives the same decisions.
    const AdmissionCycle again = *admitter.Run(s, now);
    ASSERT_EQ(again.admissions.size(), c.admissions.size());
    for (size_t i = 0; i < c.admissions.size(); ++i) {
      EXPECT_EQ(again.admissions[i].workload, c.admissions[i].workload);
      EXPECT_EQ(again.admissions[i].placement.AllHosts(), c.admissions[i].placement.AllHosts());
    }
    for (const Admitter& level : levels) {
      SCOPED_TRACE("explain level " + std::to_string(static_cast<int>(level.options().explain)));
      auto other = level.Run(s, now);
      ASSERT_TRUE(other.ok()) << other.status().ToString();
      ASSERT_EQ(other->admissions.size(), c.admissions.size());
      for (size_t i = 0; i < c.admissions.size(); ++i) {
        EXPECT_EQ(other->admissions[i].workload, c.admissions[i].workload);
        EXPECT_EQ(other->admissions[i].placement.AllHosts(), c.admissions[i].placement.AllHosts());
        EXPECT_EQ(other->admissions[i].waits_for, c.admissions[i].waits_for);
      }
      ASSERT_EQ(other->evictions.size(), c.evictions.size());
      for (size_t i = 0; i < c.evictions.size(); ++i) {
        EXPECT_EQ(other->evictions[i].workload, c.evictions[i].workload);
        EXPECT_EQ(other->evictions[i].cause, c.evictions[i].cause);
        EXPECT_EQ(other->evictions[i].message, c.evictions[i].message);
      }
      std::vector<std::tuple<uint64_t, int, std::string>> want, got;
      for (const PendingStatus& p : c.pending)
        if (level.options().explain != Explain::kFitsNextCycleOnly ||
            p.reason == PendingReason::kFitsNextCycle)
          want.emplace_back(p.workload.value(), p.position,
                            PendingReasonName(p.reason) + std::string(": ") + p.message.str());
      for (const PendingStatus& p : other->pending)
        got.emplace_back(p.workload.value(), p.position,
                         PendingReasonName(p.reason) + std::string(": ") + p.message.str());
      EXPECT_EQ(got, want);
    }

    std::map<WorkloadId, const Workload*> by_id;
    for (const Workload& w : s.workloads) by_id[w.id] = &w;
    std::set<WorkloadId> evicted;
    for (const Eviction& e : c.evictions) evicted.insert(e.workload);

    // No chip double-booked: admissions are disjoint, and each host was free or held by a
    // workload evicted in this cycle (which the admission then waits for).
    std::set<HostId> taken;
    for (const Admission& a : c.admissions) {
      const Workload& w = *by_id.at(a.workload);
      ASSERT_EQ(a.placement.slices.size(), size_t(w.request.num_slices));
      for (const SlicePlacement& sp : a.placement.slices)
        EXPECT_EQ(int64_t(sp.hosts.size()) * 4, w.request.shape.chips());
      for (HostId h : a.placement.AllHosts()) {
        EXPECT_TRUE(taken.insert(h).second) << "host " << h.value() << " given twice";
        EXPECT_EQ(c.inventory.host(h).owner, OwnerOf(a.workload));
        const OwnerId before = s.inventory.host(h).owner;
        if (before.valid()) {
          EXPECT_TRUE(evicted.count(WorkloadId(before.value())));
          EXPECT_TRUE(
              std::count(a.waits_for.begin(), a.waits_for.end(), WorkloadId(before.value())));
        }
      }
    }
    // Every preemption frees something the preemptor then uses.
    for (const Preemption& p : c.preemptions) {
      ++preemptions;
      EXPECT_FALSE(p.victims.empty());
      const Admission* a = nullptr;
      for (const Admission& x : c.admissions)
        if (x.workload == p.preemptor) a = &x;
      ASSERT_NE(a, nullptr);
      const std::vector<HostId> used = a->placement.AllHosts();
      // Re-plan: the snapshot with the victims (and only them) released takes the placement.
      Inventory replay = s.inventory;
      for (WorkloadId v : p.victims) replay.Release(OwnerOf(v));
      for (const Eviction& e : c.evictions)
        if (e.cause == EvictionCause::kStartTimeout) replay.Release(OwnerOf(e.workload));
      for (WorkloadId v : p.victims) {
        const auto hosts = s.inventory.HostsOf(OwnerOf(v));
        bool touches = false;
        for (HostId h : hosts) touches = touches || std::count(used.begin(), used.end(), h);
        EXPECT_TRUE(touches) << "victim " << v.value() << " does not help " << p.preemptor.value();
      }
      bool free_now = true;
      for (HostId h : used) free_now = free_now && replay.host(h).free();
      EXPECT_TRUE(free_now);
    }
    admissions += int(c.admissions.size());

    // Every waiting workload has exactly one reason.
    std::set<WorkloadId> admitted_now, explained;
    for (const Admission& a : c.admissions) admitted_now.insert(a.workload);
    for (const PendingStatus& p : c.pending) {
      EXPECT_TRUE(explained.insert(p.workload).second);
      EXPECT_FALSE(p.message.empty());
    }
    for (const Workload& w : s.workloads) {
      const bool waiting = (w.state == WorkloadState::kPending ||
                            w.state == WorkloadState::kDeactivated || evicted.count(w.id)) &&
                           !admitted_now.count(w.id);
      EXPECT_EQ(waiting, explained.count(w.id) == 1) << w.name;
    }

    // Apply the decisions.
    s.inventory = c.inventory;
    for (Workload& w : s.workloads) {
      if (admitted_now.count(w.id)) {
        w.state = WorkloadState::kAdmitted;
        w.admitted_at_ms = now;
        w.last_checkpoint_ms.reset();
      }
      for (const Eviction& e : c.evictions)
        if (e.workload == w.id) {
          w.state = e.deactivated ? WorkloadState::kDeactivated : WorkloadState::kPending;
          w.start_guard = e.start_guard;
        }
    }
    // Quota never exceeded beyond borrowing limits, and the report agrees.
    std::map<std::string, int64_t> used;
    for (const Workload& w : s.workloads)
      if (w.state == WorkloadState::kAdmitted || w.state == WorkloadState::kRunning)
        used[w.local_queue] += w.chips();
    CheckQuota(s, used);
    for (const ClusterQueueUsage& u : c.usage) EXPECT_EQ(u.used_chips, used[u.name]) << u.name;
    if (::testing::Test::HasFailure()) return;
  }
  std::cout << "  " << admissions << " admissions, " << preemptions << " preemptions\n";
}

TEST(AdmissionProperty, RandomCyclesKeepTheInvariants) {
  for (uint64_t seed : {1ull, 2ull, 3ull, 4ull, 5ull, 6ull, 7ull, 8ull, 42ull, 2024ull}) {
    RunSeed(seed);
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace tessera
