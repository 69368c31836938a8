// Placement decision latency: SlicePlanner (tessera policy) against the exhaustive NaivePlanner
// baseline, on the same inventories in the same run.
//
//   pods: the 9,216-chip Ironwood pod (9 blocks x 16 cubes) and a synthetic 100,352-chip pod
//         (98 blocks x 16 cubes);
//   load: 0%, 50% and 90% of chips owned, filled by a seeded stream of mixed shapes with churn;
//   requests: 2x2x2 (sub-slice), 4x4x4 (one cube), 8x8x8 (8 cubes in one block).
//
// Each benchmark times every decision on its own and reports p50 and p99 in microseconds as
// counters (Google Benchmark's own time column is the mean).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "common/rng.h"
#include "placement/naive_planner.h"
#include "placement/planner.h"

namespace tessera {
namespace {

// A pod at `load` (0..1): allocations of mixed shapes placed and released at random until the
// owned fraction reaches the target. Deterministic for a seed.
Inventory LoadedPod(int blocks, double load, uint64_t seed) {
  Inventory inv = *Inventory::MakePod({Generation::k7x, blocks, 16});
  SlicePlanner planner;
  Rng rng(seed);
  const std::vector<Shape> shapes = {Shape::Of(2, 2, 1), Shape::Of(2, 2, 2), Shape::Of(2, 2, 4),
                                     Shape::Of(2, 4, 4), Shape::Of(4, 4, 4)};
  std::vector<OwnerId> running;
  uint64_t next = 1;
  const int64_t target = static_cast<int64_t>(load * static_cast<double>(inv.total_chips()));
  while (inv.owned_chips() < target) {
    if (!running.empty() && rng.Uniform(10) < 3) {
      const size_t i = rng.Uniform(running.size());
      inv.Release(running[i]);
      running[i] = running.back();
      running.pop_back();
      continue;
    }
    PlanResult r = planner.Plan(inv, {Generation::k7x, shapes[rng.Uniform(shapes.size())], 1});
    if (!r.placed()) continue;
    const OwnerId owner(next++);
    if (ApplyPlan(inv, owner, r).ok()) running.push_back(owner);
  }
  return inv;
}

const Inventory& CachedPod(int blocks, int load_percent) {
  static std::map<std::pair<int, int>, Inventory> cache;
  auto key = std::make_pair(blocks, load_percent);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, LoadedPod(blocks, load_percent / 100.0, 7)).first;
  return it->second;
}

Shape ShapeArg(int64_t code) {
  switch (code) {
    case 2:
      return Shape::Of(2, 2, 2);
    case 4:
      return Shape::Of(4, 4, 4);
    default:
      return Shape::Of(8, 8, 8);
  }
}

template <typename Planner>
void RunDecisions(benchmark::State& state, const Planner& planner) {
  const Inventory& inv =
      CachedPod(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  const SliceRequest req{Generation::k7x, ShapeArg(state.range(2)), 1};
  std::vector<double> us;
  us.reserve(1 << 16);
  int64_t placed = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    PlanResult r = planner.Plan(inv, req);
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(r);
    placed += r.placed();
    if (us.size() < us.capacity())
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  state.counters["placed"] = static_cast<double>(placed) / static_cast<double>(state.iterations());
  state.counters["chips"] = static_cast<double>(inv.total_chips());
}

void BM_Tessera(benchmark::State& state) {
  static const SlicePlanner planner(PlannerOptions::Tessera());
  RunDecisions(state, planner);
}

void BM_Naive(benchmark::State& state) {
  static const NaivePlanner planner(PositionMode::kAny);
  RunDecisions(state, planner);
}

// Args: blocks (9 = 9,216 chips, 98 = 100,352 chips), load percent, shape (2 = 2x2x2,
// 4 = 4x4x4, 8 = 8x8x8).
void Args(benchmark::internal::Benchmark* b) {
  for (int blocks : {9, 98})
    for (int load : {0, 50, 90})
      for (int shape : {2, 4, 8}) b->Args({blocks, load, shape});
  b->ArgNames({"blocks", "load", "shape"});
}

BENCHMARK(BM_Tessera)->Apply(Args);
BENCHMARK(BM_Naive)->Apply(Args);

// A pod snapshot per scheduling cycle: the copy the planner plans against.
void BM_SnapshotCopy(benchmark::State& state) {
  const Inventory& inv = CachedPod(static_cast<int>(state.range(0)), 50);
  for (auto _ : state) {
    Inventory copy = inv;
    benchmark::DoNotOptimize(copy);
  }
  state.counters["chips"] = static_cast<double>(inv.total_chips());
}
BENCHMARK(BM_SnapshotCopy)->Arg(9)->Arg(98)->ArgName("blocks");

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
