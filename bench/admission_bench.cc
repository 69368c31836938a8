// Admission benchmarks: one full admission cycle on the 9,216-chip 7x pod at 80% load with
// 10,000 pending workloads over 50 queues; the same at fleet scale (issue 35): 100,000 pending
// over 500 queues on a 100,352-chip pod; and topology-aware victim search for a 4x4x4 among
// 1,000 running candidates. Inputs come from a fixed seed, so runs compare.
#include <benchmark/benchmark.h>

#include <string>

#include "admission/admission.h"
#include "common/rng.h"

namespace tessera {
namespace {

const std::vector<Shape> kSubShapes = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2), Shape::Of(2, 2, 4),
                                       Shape::Of(2, 4, 4)};

Shape RandomShape(Rng& rng) {
  const uint64_t r = rng.Uniform(100);
  if (r < 85) return kSubShapes[rng.Uniform(kSubShapes.size())];
  if (r < 97) return Shape::Of(4, 4, 4);
  return Shape::Of(4, 4, 8);
}

Inventory PodOf7x() { return *Inventory::MakePod({Generation::k7x, 9, 16}); }

// The shape of one benchmark cycle: the pod's blocks (16 cubes of 64 chips each) and the
// number of ClusterQueues (cohorts of 10, nominal 192 chips each).
struct CycleScale {
  int blocks = 9;
  int queues = 50;
};

// `queues` queues in cohorts of 10, each with nominal 192 chips (9,600 in all for 50 queues).
Snapshot LoadedCycle(int pending, double load, uint64_t seed, CycleScale scale = {}) {
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
    s.workloads.push_back(w);
  }
  return s;
}

void RunCycleBenchmark(benchmark::State& state, const Snapshot& s) {
  AdmissionOptions o;
  o.explain = state.range(0) ? Explain::kReasonsAndWhatHelps : Explain::kReasons;
  Admitter admitter(o);
  size_t admitted = 0, preempted = 0, running = 0;
  for (const Workload& w : s.workloads) running += w.state == WorkloadState::kRunning;
  for (auto _ : state) {
    auto c = admitter.Run(s, 3'600'000);
    if (!c.ok()) {
      state.SkipWithError(c.status().ToString().c_str());
      return;
    }
    admitted = c->admissions.size();
    preempted = c->preemptions.size();
    benchmark::DoNotOptimize(c);
  }
  state.counters["load_pct"] =
      100.0 * double(s.inventory.owned_chips()) / double(s.inventory.total_chips());
  state.counters["running"] = double(running);
  state.counters["admitted"] = double(admitted);
  state.counters["preemptions"] = double(preempted);
  state.counters["pending"] = double(s.workloads.size() - running);
  state.counters["chips"] = double(s.inventory.total_chips());
}

void BM_AdmissionCycle(benchmark::State& state) {
  static const Snapshot s = LoadedCycle(10'000, 0.8, 7);
  RunCycleBenchmark(state, s);
}
BENCHMARK(BM_AdmissionCycle)->ArgName("what_helps")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Fleet scale (issue 35): 100,000 pending workloads over 500 queues (50 cohorts of 10) on a
// 7x pod of 98 blocks (1,568 cubes, 100,352 chips) at 80% load. Goal: under 100 ms a cycle.
Snapshot FleetCycle() { return LoadedCycle(100'000, 0.8, 7, {.blocks = 98, .queues = 500}); }

void BM_AdmissionCycle100k(benchmark::State& state) {
  static const Snapshot s = FleetCycle();
  RunCycleBenchmark(state, s);
}
BENCHMARK(BM_AdmissionCycle100k)
    ->ArgName("what_helps")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);

// The pod full: 1,000 running sub-cube workloads are the candidates; the rest of the room is
// held by others (not candidates), so no cube is free and a 4x4x4 needs victims.
void BM_PreemptionPlanning4x4x4(benchmark::State& state) {
  Rng rng(11);
  Inventory inv = PodOf7x();
  SlicePlanner planner;
  std::vector<PreemptionCandidate> cands;
  uint64_t id = 1;
  // Small shapes (8 chips on average), so 1,000 of them fit in the 9,216 chips.
  const std::vector<Shape> small = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 1), Shape::Of(2, 2, 2),
                                    Shape::Of(2, 2, 4)};
  while (cands.size() < 1000) {
    SliceRequest req{Generation::k7x, small[rng.Uniform(small.size())], 1};
    PlanResult plan = planner.Plan(inv, req);
    if (!plan.placed()) break;
    if (!ApplyPlan(inv, OwnerOf(WorkloadId(id)), plan).ok()) break;
    cands.push_back({WorkloadId(id), int32_t(rng.Uniform(4)),
                     req.shape.chips() * int64_t(rng.Uniform(600'000))});
    ++id;
  }
  for (const Host& h : inv.hosts())
    if (h.free()) (void)inv.Reserve(OwnerOf(WorkloadId(id++)), {h.id});
  const SliceRequest cube{Generation::k7x, Shape::Of(4, 4, 4), 1};
  size_t victims = 0;
  for (auto _ : state) {
    VictimSet v = FindVictims(inv, planner, cube, cands);
    if (!v.found) {
      state.SkipWithError(v.message.c_str());
      return;
    }
    victims = v.victims.size();
    benchmark::DoNotOptimize(v);
  }
  state.counters["candidates"] = double(cands.size());
  state.counters["victims"] = double(victims);
}
BENCHMARK(BM_PreemptionPlanning4x4x4)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
