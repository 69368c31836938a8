// Admission benchmarks: one full admission cycle on the 9,216-chip 7x pod at 80% load with
// 10,000 pending workloads over 50 queues; the same at fleet scale (issue 35): 100,000 pending
// over 500 queues on a 100,352-chip pod; and topology-aware victim search for a 4x4x4 among
// 1,000 running candidates. Inputs come from a fixed seed, so runs compare.
#include <benchmark/benchmark.h>

#include <string>

#include "admission/admission.h"
#include "admission_inputs.h"
#include "common/rng.h"

namespace tessera {
namespace {

using bench::LoadedCycle;

Inventory PodOf7x() { return *Inventory::MakePod({Generation::k7x, 9, 16}); }

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
  for (const Host& h : inv.hosts()) {
    if (!h.free()) continue;
    if (Status held = inv.Reserve(OwnerOf(WorkloadId(id++)), {h.id}); !held.ok()) {
      state.SkipWithError(held.ToString().c_str());
      return;
    }
  }
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
