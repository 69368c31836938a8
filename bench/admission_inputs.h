// The admission benchmarks' snapshots (admission_bench.cc, admission_hash.cc): a 7x pod filled
// with running workloads from a fixed seed, then pending workloads over ClusterQueues in
// cohorts of 10. The same seed gives the same snapshot, so runs and builds compare.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "admission/admission.h"
#include "common/rng.h"

namespace tessera::bench {

inline const std::vector<Shape>& SubCubeShapes() {
  static const std::vector<Shape> shapes = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2),
                                            Shape::Of(2, 2, 4), Shape::Of(2, 4, 4)};
  return shapes;
}

inline Shape RandomShape(Rng& rng) {
  const uint64_t r = rng.Uniform(100);
  if (r < 85) return SubCubeShapes()[rng.Uniform(SubCubeShapes().size())];
  if (r < 97) return Shape::Of(4, 4, 4);
  return Shape::Of(4, 4, 8);
}

// The shape of one benchmark cycle: the pod's blocks (16 cubes of 64 chips each) and the
// number of ClusterQueues (cohorts of 10, nominal 192 chips each).
struct CycleScale {
  int blocks = 9;
  int queues = 50;
};

// What the snapshot exercises beyond the benchmark's policies (withinClusterQueue and
// reclaimWithinCohort LowerPriority, every fifth queue StrictFIFO).
enum class CycleVariant {
  kBench,
  // Also borrowWithinCohort with a priority threshold, reclaimWithinCohort Any,
  // LowerOrNewerEqualPriority, borrowing and lending limits, fair-sharing weights, admitted
  // workloads that the start guard evicts, pending workloads in backoff and in a missing queue.
  kMixed,
};

// `queues` queues in cohorts of 10, each with nominal 192 chips (9,600 in all for 50 queues),
// the pod filled to `load` (the fill stops at 200 misses), then `pending` workloads.
inline Snapshot LoadedCycle(int pending, double load, uint64_t seed, CycleScale scale = {},
                            CycleVariant variant = CycleVariant::kBench) {
  const bool mixed = variant == CycleVariant::kMixed;
  Rng rng(seed);
  Snapshot s;
  s.inventory = *Inventory::MakePod({Generation::k7x, scale.blocks, 16});
  const int queues = scale.queues;
  for (int q = 0; q < queues; ++q) {
    ClusterQueueSpec spec;
    spec.name = "q" + std::to_string(q);
    spec.cohort = "cohort" + std::to_string(q / 10);
    spec.quotas = {{Generation::k7x, 192, std::nullopt, std::nullopt, std::nullopt}};
    spec.queueing_strategy =
        q % 5 == 0 ? QueueingStrategy::kStrictFIFO : QueueingStrategy::kBestEffortFIFO;
    spec.preemption.within_cluster_queue = WithinClusterQueue::kLowerPriority;
    spec.preemption.reclaim_within_cohort = ReclaimWithinCohort::kLowerPriority;
    if (mixed) {
      if (q % 3 == 0)
        spec.preemption.borrow_within_cohort = {BorrowWithinCohortPolicy::kLowerPriority, 1};
      if (q % 3 == 1) spec.preemption.reclaim_within_cohort = ReclaimWithinCohort::kAny;
      if (q % 2 == 1)
        spec.preemption.within_cluster_queue = WithinClusterQueue::kLowerOrNewerEqualPriority;
      if (q % 4 == 0) spec.quotas[0].borrowing_limit_chips = 64;
      if (q % 4 == 1) spec.quotas[0].lending_limit_chips = 96;
      spec.fair_sharing_weight = 1.0 + q % 3;
    }
    s.cluster_queues.push_back(spec);
    s.local_queues.push_back({spec.name, spec.name});
  }
  SlicePlanner planner;
  uint64_t id = 1;
  std::vector<int64_t> used(size_t(queues), 0);
  const int64_t target = static_cast<int64_t>(load * double(s.inventory.total_chips()));
  int misses = 0;
  while (s.inventory.owned_chips() < target && misses < 200) {
    Workload w;
    w.id = WorkloadId(id);
    w.name = "run-" + std::to_string(id);
    w.creation_order = int64_t(id);
    w.priority = int32_t(rng.Uniform(4));
    w.request = {Generation::k7x, RandomShape(rng), 1};
    const int q = int(id % uint64_t(queues));
    if (used[q] + w.chips() > 192) {
      ++misses;
      ++id;
      continue;
    }
    PlanResult plan = planner.Plan(s.inventory, w.request);
    ++id;
    if (!plan.placed() || !ApplyPlan(s.inventory, OwnerOf(w.id), plan).ok()) {
      ++misses;
      continue;
    }
    used[q] += w.chips();
    w.local_queue = "q" + std::to_string(q);
    w.state = WorkloadState::kRunning;
    w.admitted_at_ms = 0;
    w.last_checkpoint_ms = int64_t(rng.Uniform(600'000));
    if (mixed && id % 50 == 0) w.state = WorkloadState::kAdmitted;  // the start guard evicts it
    s.workloads.push_back(w);
  }
  for (int i = 0; i < pending; ++i, ++id) {
    Workload w;
    w.id = WorkloadId(id);
    w.name = "job-" + std::to_string(id);
    w.creation_order = int64_t(id);
    w.priority = int32_t(rng.Uniform(4));
    w.local_queue = "q" + std::to_string(rng.Uniform(uint64_t(queues)));
    w.request = {Generation::k7x, RandomShape(rng), rng.Uniform(20) == 0 ? 2 : 1};
    if (mixed && i % 97 == 0) {
      w.start_guard.retries = 1;
      w.start_guard.backoff_until_ms = 4'000'000;
      w.start_guard.last_eviction = "not all workers running";
    }
    if (mixed && i % 211 == 0) w.local_queue = "missing";
    s.workloads.push_back(w);
  }
  return s;
}

}  // namespace tessera::bench
