#include "sim/easy_scheduler.h"

#include <gtest/gtest.h>

#include "admission/model.h"
#include "sim/simulator.h"
#include "sim/simulator_internal.h"

namespace tessera::sim {
namespace {

Inventory Pod(int blocks, int cubes_per_block) {
  auto inv = Inventory::MakePod({Generation::k7x, blocks, cubes_per_block});
  EXPECT_TRUE(inv.ok());
  return *inv;
}

JobSpec Job(std::string name, int64_t submit, int64_t duration, int accelerators) {
  JobSpec j;
  j.name = std::move(name);
  j.submit_s = submit;
  j.duration_s = duration;
  j.accelerators = accelerators;
  return j;
}

SimResult Simulate(const Inventory& inv, const Workload& w, AdmissionKind kind, SimOptions o = {}) {
  o.admission = kind;
  std::string violation;
  o.after_event = [&](const Simulator& s) {
    Status st = s.CheckInvariants();
    if (violation.empty() && !st.ok()) violation = st.message();
  };
  auto r = RunSimulation(inv, MapJobs(w, inv, ShapeMap::Default(Generation::k7x)), o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(violation, "") << AdmissionName(kind);
  return r.ok() ? *r : SimResult{};
}

// One cube. A 4x4x4 arrives behind a half-cube job; a stream of half-cube jobs follows. Plain
// backfill keeps giving the free half to the stream, so the cube job waits for the stream to
// end; easy reserves the cube for it (no estimates: every job counts as running 24 h, so
// nothing may backfill onto the reserved cube) and it starts when the first job ends.
TEST(Easy, AReservationStopsBackfillStarvingTheCubeJob) {
  const Inventory inv = Pod(1, 1);
  Workload w;
  w.jobs = {Job("first", 0, 1000, 32), Job("cube", 1, 100, 64)};
  for (int i = 0; i < 6; ++i)
    w.jobs.push_back(Job("s" + std::to_string(i), 500 + 900 * i, 1000, 32));
  const SimResult backfill = Simulate(inv, w, AdmissionKind::kBackfill);
  const SimResult easy = Simulate(inv, w, AdmissionKind::kEasy);
  EXPECT_EQ(easy.outcomes[1].first_start_s, 1000);
  EXPECT_GT(backfill.outcomes[1].first_start_s, 5000);
  EXPECT_EQ(easy.finished, static_cast<int64_t>(w.jobs.size()));
  EXPECT_EQ(easy.moves, 0);
  // With true durations as estimates the stream's jobs (1000 s) still end after the
  // reservation starts, so the oracle starts the cube job at the same time.
  SimOptions oracle;
  oracle.easy.true_durations = true;
  EXPECT_EQ(Simulate(inv, w, AdmissionKind::kEasy, oracle).outcomes[1].first_start_s, 1000);
  // Reservations only for jobs of 128 chips or more: the cube job reserves nothing and waits
  // as under backfill.
  SimOptions large_only;
  large_only.easy.reserve_min_chips = 128;
  EXPECT_EQ(Simulate(inv, w, AdmissionKind::kEasy, large_only).outcomes[1].first_start_s,
            backfill.outcomes[1].first_start_s);
}

// Two cubes: A and B fill cube 0, C half of cube 1; A ends, leaving 64 chips free in two halves.
// A 4x4x4 arrives: easy moves one half-cube job (checkpoint every 60 s, so it loses 20 s) next
// to the other and starts the cube job at once; backfill makes it wait for B or C to end.
TEST(Easy, DefragmentationMovesOneJobAndTheCubeJobStarts) {
  const Inventory inv = Pod(1, 2);
  Workload w;
  w.jobs = {Job("a", 0, 100, 32), Job("b", 0, 40000, 32), Job("c", 0, 40000, 32),
            Job("cube", 20000, 100, 64)};
  SimOptions o;
  o.failures.checkpoint_interval_s = 60;
  const SimResult backfill = Simulate(inv, w, AdmissionKind::kBackfill, o);
  const SimResult easy = Simulate(inv, w, AdmissionKind::kEasy, o);
  EXPECT_EQ(easy.outcomes[3].first_start_s, 20000);
  EXPECT_GE(backfill.outcomes[3].first_start_s, 40000);
  EXPECT_EQ(easy.moves, 1);
  EXPECT_EQ(easy.preemptions, 1);
  EXPECT_DOUBLE_EQ(easy.moved_chip_hours, 32.0 * 20 / 3600);
  // The moved job resumed from its checkpoint: it ends 20 s (the lost work) later than planned.
  const int64_t b_end = easy.outcomes[1].finish_s, c_end = easy.outcomes[2].finish_s;
  EXPECT_EQ(std::max(b_end, c_end), 40020);
  EXPECT_EQ(std::min(b_end, c_end), 40000);
  // Without defragmentation it waits like backfill, and says why while it waits.
  o.easy.defrag = false;
  o.horizon_s = 30000;
  const SimResult no_defrag = Simulate(inv, w, AdmissionKind::kEasy, o);
  EXPECT_EQ(no_defrag.outcomes[3].first_start_s, -1);
  EXPECT_NE(no_defrag.outcomes[3].reason.find("reserved"), std::string::npos)
      << no_defrag.outcomes[3].reason;
  // A budget of nothing: it waits and the reason says the budget is spent.
  o.easy.defrag = true;
  o.easy.defrag_options.max_share = 0;
  const SimResult no_budget = Simulate(inv, w, AdmissionKind::kEasy, o);
  EXPECT_EQ(no_budget.moves, 0);
  EXPECT_NE(no_budget.outcomes[3].reason.find("the budget of moved work is spent"),
            std::string::npos)
      << no_budget.outcomes[3].reason;
}

// The help threshold (admission/help_threshold.h): two half-cube jobs waited 1000 s for a
// cube job to end, so with factor 2 (quantile 1) the next cube job is helped only once it has
// waited 2000 s. Until then the stream of half-cube jobs backfills as under plain backfill; then
// it reserves and starts when the half it reserved frees. Without the threshold it reserves at
// once and starts when the first half frees.
TEST(Easy, TheHelpThresholdFollowsTheSmallJobsWaits) {
  const Inventory inv = Pod(1, 1);
  Workload w;
  w.jobs = {Job("x", 0, 1000, 64), Job("p", 0, 2000, 32), Job("q", 0, 100, 32),
            Job("cube", 1001, 100, 64)};
  for (int i = 0; i < 6; ++i)
    w.jobs.push_back(Job("s" + std::to_string(i), 1050 + 900 * i, 1000, 32));
  const SimResult backfill = Simulate(inv, w, AdmissionKind::kBackfill);
  const SimResult easy = Simulate(inv, w, AdmissionKind::kEasy);
  SimOptions o;
  o.easy.help = {.factor = 2, .quantile = 1.0, .window = 16};
  const SimResult helped = Simulate(inv, w, AdmissionKind::kEasy, o);
  const int64_t at_once = easy.outcomes[3].first_start_s;
  const int64_t later = helped.outcomes[3].first_start_s;
  EXPECT_EQ(at_once, 3000);  // p ends
  EXPECT_GE(later - 1001, 2000) << later;
  EXPECT_LT(later, backfill.outcomes[3].first_start_s);
  // Meanwhile the first of the stream started at once when q ended, as under backfill.
  EXPECT_EQ(helped.outcomes[4].first_start_s, 1100);
  EXPECT_EQ(backfill.outcomes[4].first_start_s, 1100);
  EXPECT_GT(easy.outcomes[4].first_start_s, 1100);
  EXPECT_EQ(helped.finished, static_cast<int64_t>(w.jobs.size()));
}

// The simulator's slice owners never equal OwnerOf(a job), under which the easy pass holds the
// jobs it starts and re-owns the running ones in its scratch inventories: before the tag, job
// 0's second slice (owner 1) was OwnerOf(job 1), and the pass merged the two.
TEST(Easy, SliceOwnersAreApartFromTheWorkloadOwnersThePassUses) {
  for (JobIndex j : {0u, 1u, 2u, 65535u, 65536u, 70000u, 4000000000u})
    for (uint32_t slot : {0u, 1u, 2u, 65535u, 65536u}) {
      const OwnerId o = detail::SliceOwner(j, slot);
      EXPECT_TRUE(detail::IsSliceOwner(o));
      EXPECT_EQ(detail::JobOfSliceOwner(o), j);
      EXPECT_GT(o.value(), uint64_t{0xFFFFFFFF}) << "job " << j << " slot " << slot;
      EXPECT_NE(o, OwnerOf(WorkloadId(uint64_t{slot}))) << "job " << j << " slot " << slot;
      EXPECT_FALSE(detail::IsSliceOwner(OwnerOf(WorkloadId(uint64_t{j}))));
    }
}

}  // namespace
}  // namespace tessera::sim
