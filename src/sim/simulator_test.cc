#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <sstream>

#include "sim/cluster.h"
#include "sim/report.h"

namespace tessera::sim {
namespace {

Inventory Pod(int blocks, int cubes_per_block) {
  auto inv = Inventory::MakePod({Generation::k7x, blocks, cubes_per_block});
  EXPECT_TRUE(inv.ok());
  return *inv;
}

JobSpec Job(std::string name, int64_t submit, int64_t duration, int accelerators,
            int priority = 0) {
  JobSpec j;
  j.name = std::move(name);
  j.submit_s = submit;
  j.duration_s = duration;
  j.accelerators = accelerators;
  j.priority = priority;
  return j;
}

// Planners are built once per policy: their tables take a while under the sanitizers.
const SlicePlanner& PlannerFor(const PlannerOptions& o) {
  static std::map<std::string, std::unique_ptr<SlicePlanner>> planners;
  auto& p = planners[o.Name()];
  if (!p) p = std::make_unique<SlicePlanner>(o);
  return *p;
}

// Runs with the invariants checked after every event; any violation fails the test.
SimResult RunChecked(const Inventory& inv, const Workload& w, SimOptions o) {
  std::string violation;
  o.after_event = [&](const Simulator& s) {
    if (!violation.empty()) return;
    Status st = s.CheckInvariants();
    if (!st.ok()) violation = "at t=" + std::to_string(s.now()) + ": " + st.message();
  };
  const SlicePlanner& tessera = PlannerFor(PlannerOptions::Tessera());
  auto r = RunSimulation(inv, MapJobs(w, inv, o.shape_map, tessera), o, PlannerFor(o.placement));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(violation, "") << "seed " << o.seed << ", " << o.placement.Name() << "/"
                           << AdmissionName(o.admission);
  if (!r.ok()) return SimResult{};
  // Every job ends finished, or with a reason.
  for (size_t i = 0; i < r->outcomes.size(); ++i) {
    const JobOutcome& out = r->outcomes[i];
    if (out.state != JobOutcome::State::kFinished)
      EXPECT_FALSE(out.reason.empty()) << "job " << i << " seed " << o.seed;
    else
      EXPECT_GE(out.finish_s, w.jobs[i].submit_s + w.jobs[i].duration_s) << "job " << i;
  }
  return *r;
}

// One cube (64 chips). A takes the whole cube for 100 s; B (8) and C (3 -> 2x2x1) wait for it.
TEST(Simulator, HandComputedFifoScenario) {
  const Inventory inv = Pod(1, 1);
  Workload w;
  w.jobs = {Job("A", 0, 100, 64), Job("B", 10, 50, 8), Job("C", 20, 30, 3)};
  SimOptions o;
  o.admission = AdmissionKind::kFifo;
  for (const char* policy : {"first-fit", "tightest-fit", "tessera"}) {
    o.placement = *PlannerOptions::Named(policy);
    const SimResult r = RunChecked(inv, w, o);
    EXPECT_EQ(r.finished, 3) << policy;
    EXPECT_EQ(r.outcomes[0].first_start_s, 0);
    EXPECT_EQ(r.outcomes[1].first_start_s, 100);
    EXPECT_EQ(r.outcomes[2].first_start_s, 100);
    EXPECT_EQ(r.outcomes[1].finish_s, 150);
    EXPECT_EQ(r.outcomes[2].finish_s, 130);
    EXPECT_EQ(r.makespan_s, 150);
    // Waits 0, 90, 80: nearest-rank p50 = 80, p95 = p99 = 90.
    EXPECT_EQ(r.wait_p50_s, 80);
    EXPECT_EQ(r.wait_p95_s, 90);
    EXPECT_EQ(r.wait_p99_s, 90);
    // JCT 100, 140, 110.
    EXPECT_DOUBLE_EQ(r.mean_jct_s, 350.0 / 3);
    // 64*100 + 8*50 + 4*30 = 6920 chip-seconds over 64 chips * 150 s.
    EXPECT_DOUBLE_EQ(r.utilization, 6920.0 / 9600.0);
    // C asked 3 chips for 30 s and got 4: 30 chip-seconds of 6920 are rounding.
    EXPECT_DOUBLE_EQ(r.rounding_waste, 30.0 / 6920.0);
    EXPECT_EQ(r.never_placed, 0);
    EXPECT_DOUBLE_EQ(r.goodput, 1.0);
  }
}

// A holds half the cube. B wants all of it; C (8) fits beside A. StrictFIFO holds C behind B,
// backfill lets it pass.
TEST(Simulator, BackfillPassesABlockedHead) {
  const Inventory inv = Pod(1, 1);
  Workload w;
  w.jobs = {Job("A", 0, 100, 32), Job("B", 1, 10, 64), Job("C", 2, 10, 8)};
  SimOptions o;
  o.admission = AdmissionKind::kFifo;
  SimResult fifo = RunChecked(inv, w, o);
  EXPECT_EQ(fifo.outcomes[1].first_start_s, 100);
  EXPECT_EQ(fifo.outcomes[2].first_start_s, 110);
  o.admission = AdmissionKind::kBackfill;
  SimResult backfill = RunChecked(inv, w, o);
  EXPECT_EQ(backfill.outcomes[1].first_start_s, 100);
  EXPECT_EQ(backfill.outcomes[2].first_start_s, 2);
  EXPECT_EQ(backfill.makespan_s, 110);
}

// Two low-priority halves fill the cube; a high-priority half arrives. Priority admission
// evicts exactly one victim, the newest, and the victim restarts from its checkpoint.
TEST(Simulator, PriorityPreemptsOnlyTheVictimWhoseChipsHelp) {
  const Inventory inv = Pod(1, 1);
  Workload w;
  w.jobs = {Job("A", 0, 1000, 32), Job("B", 1, 1000, 32), Job("H", 5, 10, 32, 1)};
  SimOptions o;
  o.admission = AdmissionKind::kPriority;
  o.failures.checkpoint_interval_s = 3;
  const SimResult r = RunChecked(inv, w, o);
  EXPECT_EQ(r.preemptions, 1);
  EXPECT_EQ(r.outcomes[2].first_start_s, 5);
  EXPECT_EQ(r.outcomes[2].finish_s, 15);
  EXPECT_EQ(r.outcomes[0].restarts, 0);
  EXPECT_EQ(r.outcomes[1].restarts, 1);
  // B ran 4 s, kept the 3 s up to its checkpoint, lost 1 s on 32 chips; it resumes at 15 with
  // 997 s left.
  EXPECT_EQ(r.outcomes[1].finish_s, 15 + 997);
  EXPECT_DOUBLE_EQ(r.lost_chip_hours, 32.0 / 3600);
  // Backfill never preempts: H waits for A.
  o.admission = AdmissionKind::kBackfill;
  const SimResult b = RunChecked(inv, w, o);
  EXPECT_EQ(b.preemptions, 0);
  EXPECT_EQ(b.outcomes[2].first_start_s, 1000);
}

TEST(Simulator, NeverPlaceableJobsAreReportedNotQueued) {
  const Inventory inv = Pod(1, 2);  // 128 chips in one block
  Workload w;
  w.jobs = {Job("big", 0, 10, 256), Job("huge", 0, 10, 4096), Job("ok", 1, 10, 8)};
  SimOptions o;
  o.admission = AdmissionKind::kFifo;  // a never-placeable head must not block the line
  const SimResult r = RunChecked(inv, w, o);
  EXPECT_EQ(r.never_placed, 2);
  EXPECT_EQ(r.outcomes[0].state, JobOutcome::State::kNeverPlaced);
  EXPECT_NE(r.outcomes[0].reason.find("never fits this cluster"), std::string::npos);
  EXPECT_NE(r.outcomes[1].reason.find("largest mapped shape"), std::string::npos);
  EXPECT_EQ(r.outcomes[2].first_start_s, 1);
}

Workload Generated(uint64_t seed, int64_t jobs, double multi = 0) {
  GeneratorOptions g;
  g.jobs = jobs;
  g.seed = seed;
  g.mean_interarrival_s = 120;
  g.mean_duration_s = 3600;
  g.multi_slice_fraction = multi;
  return Generate(g);
}

SimOptions WithFailures(uint64_t seed) {
  SimOptions o;
  o.seed = seed;
  o.failures.host_mtbf_hours = 200;
  o.failures.host_repair_hours = 2;
  o.failures.cube_mtbf_hours = 2000;
  o.failures.checkpoint_interval_s = 900;
  return o;
}

TEST(Simulator, SameSeedSameHashDifferentSeedDifferentHash) {
  const Inventory inv = Pod(2, 4);
  for (AdmissionKind a : {AdmissionKind::kFifo, AdmissionKind::kBackfill, AdmissionKind::kPriority,
                          AdmissionKind::kKueue, AdmissionKind::kKueueStrict}) {
    SimOptions o = WithFailures(11);
    o.admission = a;
    const Workload w = Generated(11, 250);
    const SimResult r1 = RunChecked(inv, w, o);
    const SimResult r2 = RunChecked(inv, w, o);
    EXPECT_EQ(r1.event_hash, r2.event_hash) << AdmissionName(a);
    EXPECT_EQ(r1.events, r2.events);
    EXPECT_EQ(r1.waits_s, r2.waits_s);
    EXPECT_GT(r1.host_failures, 0);
    // A different seed changes the failures (same workload) ...
    SimOptions o2 = WithFailures(12);
    o2.admission = a;
    EXPECT_NE(RunChecked(inv, w, o2).event_hash, r1.event_hash) << AdmissionName(a);
    // ... and the generated workload (no failures).
    SimOptions plain;
    plain.admission = a;
    EXPECT_NE(RunChecked(inv, Generated(11, 250), plain).event_hash,
              RunChecked(inv, Generated(12, 250), plain).event_hash);
  }
}

// Random workloads with failures under every policy and admission (the kueue ones run the
// admission module): the invariants hold after every event, every job ends finished, and the
// accounting adds up.
TEST(Simulator, InvariantsHoldUnderFailuresForEveryPolicy) {
  const Inventory inv = Pod(2, 3);
  for (uint64_t seed : {1, 2}) {
    const Workload w = Generated(seed, 200, 0.05);
    for (const char* policy : {"first-fit", "tightest-fit", "tessera"})
      for (AdmissionKind a :
           {AdmissionKind::kFifo, AdmissionKind::kBackfill, AdmissionKind::kPriority,
            AdmissionKind::kKueue, AdmissionKind::kKueueStrict})
        for (OnHostLoss loss : {seed == 1 ? OnHostLoss::kRestart : OnHostLoss::kShrink}) {
          SimOptions o = WithFailures(seed);
          o.placement = *PlannerOptions::Named(policy);
          o.admission = a;
          o.failures.on_host_loss = loss;
          const SimResult r = RunChecked(inv, w, o);
          EXPECT_EQ(r.finished + r.never_placed, r.jobs) << "seed " << seed << " " << policy;
          EXPECT_LE(r.goodput, 1.0);
          EXPECT_GT(r.goodput, 0.5);
          EXPECT_GE(r.recoveries, 0);
          EXPECT_LE(r.recoveries, r.interrupted_jobs);
          EXPECT_GT(r.utilization, 0);
          EXPECT_LE(r.utilization, 1.0);
        }
  }
}

// A 2-slice job loses a host: under shrink it runs on at one slice, then grows back.
TEST(Simulator, ShrinkAndGrowBack) {
  const Inventory inv = Pod(1, 4);
  Workload w;
  JobSpec j = Job("elastic", 0, 200000, 64);
  j.num_slices = 2;
  j.min_slices = 1;
  w.jobs = {j};
  SimOptions o;
  o.seed = 5;
  o.failures.host_mtbf_hours = 300;
  o.failures.host_repair_hours = 1;
  o.failures.checkpoint_interval_s = 600;
  o.failures.on_host_loss = OnHostLoss::kShrink;
  const SimResult r = RunChecked(inv, w, o);
  EXPECT_EQ(r.finished, 1);
  EXPECT_GT(r.shrinks, 0);
  EXPECT_GT(r.grows, 0);
  EXPECT_EQ(r.recoveries, r.interrupted_jobs);
  o.failures.on_host_loss = OnHostLoss::kRestart;
  const SimResult restart = RunChecked(inv, w, o);
  EXPECT_EQ(restart.shrinks, 0);
  EXPECT_EQ(restart.finished, 1);
}

TEST(Simulator, V6eFleetRunsWholeSlices) {
  auto inv = BuildCluster(*Preset("v6e-fleet"));
  ASSERT_TRUE(inv.ok());
  const Workload w = Generated(4, 300);
  SimOptions o;
  const SimResult r = RunChecked(*inv, w, o);
  EXPECT_EQ(r.finished, 300);
  EXPECT_GT(r.rounding_waste, 0);  // 4-chip asks take 16-chip node pools
}

TEST(Report, WritersProduceEveryFormat) {
  const Inventory inv = Pod(1, 2);
  Comparison c;
  c.cluster = "test";
  c.workload = "generated";
  c.failures = true;
  const Workload w = Generated(2, 50);
  for (const char* policy : {"first-fit", "tessera"}) {
    SimOptions o = WithFailures(2);
    o.placement = *PlannerOptions::Named(policy);
    c.runs.push_back(RunChecked(inv, w, o));
  }
  std::ostringstream text, json, csv, html;
  WriteText(text, c);
  WriteJson(json, c);
  WriteCsv(csv, c);
  WriteHtml(html, c);
  EXPECT_NE(text.str().find("goodput"), std::string::npos);
  EXPECT_NE(json.str().find("\"eventHash\""), std::string::npos);
  EXPECT_EQ(csv.str().rfind("policy,admission,time_s,", 0), 0u);
  EXPECT_NE(html.str().find("<svg"), std::string::npos);
  EXPECT_EQ(html.str().find("http://www.w3.org/2000/svg"),
            html.str().find("http"));  // the only URL is the SVG namespace: no network
}

}  // namespace
}  // namespace tessera::sim
