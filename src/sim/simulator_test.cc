#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "sim/cluster.h"
#include "sim/report.h"
#include "workload/train_lifecycle.h"

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

// Runs without failures do not use the lifecycle: their hashes are the ones the simulator gave
// before it drove TrainLifecycle (checked against that build on this workload, on cluster04
// and on a 3,000-job generated workload, for every admission).
TEST(Simulator, RunsWithoutFailuresKeepTheirEventHashes) {
  const Inventory inv = Pod(2, 4);
  const Workload w = Generated(11, 250, 0.05);
  const std::map<AdmissionKind, uint64_t> golden = {
      {AdmissionKind::kFifo, 0x6050ea4f6895b13bull},
      {AdmissionKind::kBackfill, 0x40a20477201487fcull},
      {AdmissionKind::kPriority, 0x7cce2eada7101594ull},
      {AdmissionKind::kKueue, 0x089ab0a7c31e970bull},
      {AdmissionKind::kKueueStrict, 0x4a715ba31cb19673ull},
  };
  for (const auto& [a, hash] : golden) {
    SimOptions o;
    o.admission = a;
    o.failures.checkpoint_interval_s = 900;
    EXPECT_EQ(RunChecked(inv, w, o).event_hash, hash) << AdmissionName(a);
  }
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

// A 2-slice job loses a host: under shrink it runs on at one slice, then grows back. Two cubes:
// with a host down only one 64-chip slice fits (the lifecycle restarts a resize job at the
// largest size that fits, so with spare cubes it would not shrink at all).
TEST(Simulator, ShrinkAndGrowBack) {
  const Inventory inv = Pod(1, 2);
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

// The scripted scenarios below run one 2-slice job of 64 chips (a whole cube per slice) on two
// cubes, checkpointing every 600 s; the lifecycle's clock is trace time in ms plus 1 s.
constexpr int64_t kMs = 1000;
int64_t LifecycleMs(int64_t t) { return t * kMs + 1000; }

Workload TwoSliceJob(int64_t duration_s) {
  Workload w;
  JobSpec j = Job("elastic", 0, duration_s, 64);
  j.num_slices = 2;
  j.min_slices = 1;
  w.jobs = {j};
  return w;
}

std::vector<std::string> EndReasons(const std::vector<AttemptRecord>& attempts) {
  std::vector<std::string> out;
  for (const AttemptRecord& a : attempts) out.push_back(a.end_reason);
  return out;
}

std::vector<int> Slices(const std::vector<AttemptRecord>& attempts) {
  std::vector<int> out;
  for (const AttemptRecord& a : attempts) out.push_back(a.slices);
  return out;
}

// Resize: host 0 fails at 1000 s and comes back at 3000 s. The head's rules, step by step:
// detected at 1005 (detect 5 s), restarted at once on the one slice that fits (start-up
// 0.1 + 1.28 + 0.02 s, rounded up to 2 s: progress from 1007); the grow-back check at 3045
// (every 60 s from 1005) finds room for 2 slices, and the job grows back at its next checkpoint,
// 3407 (1007 + 4 x 600), not before.
TEST(Simulator, ResizeShrinksAtOnceAndGrowsBackAtTheNextCheckpoint) {
  const Inventory inv = Pod(1, 2);
  SimOptions o;
  o.admission = AdmissionKind::kFifo;
  o.failures.checkpoint_interval_s = 600;
  o.failures.on_host_loss = OnHostLoss::kShrink;
  o.failures.scripted = {HostFault{1000, HostId(0), 2000}};
  const SimResult r = RunChecked(inv, TwoSliceJob(10000), o);
  ASSERT_EQ(r.outcomes.size(), 1u);
  const std::vector<AttemptRecord>& a = r.outcomes[0].attempts;
  EXPECT_EQ(EndReasons(a), (std::vector<std::string>{"HostLost", "GrowBack", "Succeeded"}));
  EXPECT_EQ(Slices(a), (std::vector<int>{2, 1, 2}));
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].failure_ms, LifecycleMs(1000));
  EXPECT_EQ(a[0].detected_ms, LifecycleMs(1005));
  EXPECT_EQ(a[1].placed_ms, LifecycleMs(1005));
  EXPECT_EQ(a[1].first_step_ms, LifecycleMs(1007));
  EXPECT_EQ(a[1].ended_ms, LifecycleMs(3407));
  EXPECT_EQ(a[2].placed_ms, LifecycleMs(3407));
  EXPECT_EQ(r.shrinks, 1);
  EXPECT_EQ(r.grows, 1);
  EXPECT_EQ(r.interrupted_jobs, 1);
  EXPECT_EQ(r.recoveries, 1);
  EXPECT_DOUBLE_EQ(r.mean_time_to_recover_s, 7);  // 1000 -> 1007
  // Work: 2 x 600 kept from the first attempt (checkpoint at 600, broken at 1000), 1 x 2400 on
  // one slice, the 16,400 slice-seconds left on two slices from 3409.
  EXPECT_EQ(r.outcomes[0].finish_s, 3409 + 8200);
  // Lost: 128 chips x (1005 - 600), 64 x 2 s of start-up, 128 x 2 s of start-up.
  EXPECT_DOUBLE_EQ(r.lost_chip_hours, (128.0 * 405 + 64 * 2 + 128 * 2) / 3600);
}

// Pause with maxFailures 1: the first loss restarts the job at full size once host 0 is back
// (1100), the second is past the budget and fails it.
TEST(Simulator, PauseWaitsForFullSizeAndTheBudgetFailsTheJob) {
  const Inventory inv = Pod(1, 2);
  SimOptions o;
  o.admission = AdmissionKind::kFifo;
  o.failures.checkpoint_interval_s = 600;
  o.failures.on_host_loss = OnHostLoss::kRestart;
  o.failures.max_failures = 1;
  o.failures.scripted = {HostFault{1000, HostId(0), 100}, HostFault{2000, HostId(20), 100}};
  const SimResult r = RunChecked(inv, TwoSliceJob(10000), o);
  const std::vector<AttemptRecord>& a = r.outcomes[0].attempts;
  EXPECT_EQ(EndReasons(a), (std::vector<std::string>{"HostLost", "HostLost"}));
  EXPECT_EQ(Slices(a), (std::vector<int>{2, 2}));
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1].placed_ms, LifecycleMs(1100));
  EXPECT_EQ(r.outcomes[0].state, JobOutcome::State::kFailed);
  EXPECT_NE(r.outcomes[0].reason.find("exceeds spec.failurePolicy.maxFailures 1"),
            std::string::npos)
      << r.outcomes[0].reason;
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.finished, 0);
  EXPECT_EQ(r.shrinks, 0);
  EXPECT_EQ(r.recoveries, 1);
  EXPECT_DOUBLE_EQ(r.mean_time_to_recover_s, 102);  // 1000 -> 1102: waited for the host
  // Unlimited failures (the default): the same faults cost two restarts and the job finishes.
  o.failures.max_failures = -1;
  const SimResult unlimited = RunChecked(inv, TwoSliceJob(10000), o);
  EXPECT_EQ(unlimited.finished, 1);
  EXPECT_EQ(EndReasons(unlimited.outcomes[0].attempts),
            (std::vector<std::string>{"HostLost", "HostLost", "Succeeded"}));
}

// A host that never returns: pause waits for the full size for good (the run stops, the job
// unfinished with its reason), resize finishes on one slice.
TEST(Simulator, AHostThatNeverReturns) {
  const Inventory inv = Pod(1, 2);
  SimOptions o;
  o.admission = AdmissionKind::kFifo;
  o.failures.checkpoint_interval_s = 600;
  o.failures.scripted = {HostFault{1000, HostId(0), 0}};
  const SimResult pause = RunChecked(inv, TwoSliceJob(10000), o);
  EXPECT_EQ(pause.outcomes[0].state, JobOutcome::State::kUnfinished);
  EXPECT_NE(pause.outcomes[0].reason.find("still waiting"), std::string::npos);
  EXPECT_EQ(pause.recoveries, 0);
  o.failures.on_host_loss = OnHostLoss::kShrink;
  const SimResult resize = RunChecked(inv, TwoSliceJob(10000), o);
  EXPECT_EQ(resize.finished, 1);
  EXPECT_EQ(Slices(resize.outcomes[0].attempts), (std::vector<int>{2, 1}));
  // 1200 slice-seconds kept at the checkpoint of 600, 18,800 left on one slice from 1007.
  EXPECT_EQ(resize.outcomes[0].finish_s, 1007 + 18800);
}

// A ClusterView for driving TrainLifecycle by hand: lost hosts and the room to grow are set by
// the test.
class ScriptedView final : public ClusterView {
 public:
  std::set<std::string> lost;
  int fit = 0;
  bool HostLost(const std::string& host) const override { return lost.count(host) > 0; }
  int LargestFitWithoutJob(const TrainJob&, int lo, int hi) const override {
    return fit >= lo ? std::min(fit, hi) : 0;
  }
};

// The differential check: the resize scenario above, fed by hand to TrainLifecycle as the head
// would see it (placement, a lost host, checkpoints, the host back, the grow-back), gives the
// simulator's attempts.
TEST(Simulator, AttemptsMatchTheLifecycleDrivenByHand) {
  const Inventory inv = Pod(1, 2);
  SimOptions o;
  o.admission = AdmissionKind::kFifo;
  o.failures.checkpoint_interval_s = 600;
  o.failures.on_host_loss = OnHostLoss::kShrink;
  o.failures.scripted = {HostFault{1000, HostId(0), 2000}};
  const SimResult r = RunChecked(inv, TwoSliceJob(10000), o);

  const TrainLifecycle life(TrainLifecycleOptions{5000});
  TrainJobSpec spec;
  spec.name = "elastic";
  spec.min_slices = 1;
  spec.max_slices = 2;
  spec.max_failures = -1;
  spec.on_host_loss = HostLossPolicy::kResize;
  TrainJob job = TrainLifecycle::Create(spec, "", 0, LifecycleMs(0));
  ScriptedView view;
  auto place = [&](std::vector<std::vector<int>> slices, int64_t t) {
    AttemptPlacement p;
    for (const auto& hosts : slices) {
      p.hosts.emplace_back();
      for (int h : hosts) p.hosts.back().push_back(std::to_string(h));
    }
    life.Place(job, p, LifecycleMs(t));
    for (const auto& [rank, w] : std::map<int, WorkerStatus>(job.status.workers))
      life.WorkerRunning(job, rank, rank + 1, LifecycleMs(t));
  };
  auto report = [&](ProgressInput::Type type, int64_t step, int64_t t) {
    ProgressInput p;
    p.type = type;
    p.rank = 0;
    p.step = step;
    p.time_ms = LifecycleMs(t);
    return life.Progress(job, p, view, LifecycleMs(t));
  };
  auto confirm_all = [&](int64_t t) {
    const std::set<std::string> hosts = job.runtime.unconfirmed;
    for (const std::string& h : hosts) life.ConfirmStopped(job, h, LifecycleMs(t));
  };
  std::vector<int> cube0, cube1;
  for (int h = 0; h < 16; ++h) cube0.push_back(h), cube1.push_back(16 + h);
  place({cube0, cube1}, 0);
  report(ProgressInput::Type::kProgress, 0, 0);
  report(ProgressInput::Type::kCheckpoint, 1200, 600);
  report(ProgressInput::Type::kProgress, 2000, 1000);  // last step before the failure
  view.lost = {"0"};                                   // the lease runs out at 1005
  life.HostLost(job, "0", LifecycleMs(1000), "down", view, LifecycleMs(1005));
  confirm_all(1005);
  EXPECT_EQ(job.status.phase, JobPhase::kPending);
  EXPECT_EQ(job.SizeRange(), std::make_pair(1, 2));
  place({cube1}, 1005);  // only the healthy cube fits
  report(ProgressInput::Type::kProgress, 1200, 1007);
  for (int64_t t = 1607; t <= 2807; t += 600) {
    report(ProgressInput::Type::kProgress, 1200 + (t - 1007), t);
    report(ProgressInput::Type::kCheckpoint, 1200 + (t - 1007), t);
  }
  view.lost.clear();
  view.fit = 1;
  for (int64_t t = 1065; t < 3000; t += 60) life.Tick(job, view, LifecycleMs(t));
  view.fit = 2;  // host 0 is back at 3000
  life.Tick(job, view, LifecycleMs(3045));
  EXPECT_EQ(job.status.grow_target, 2);
  EXPECT_EQ(job.status.phase, JobPhase::kRunning);  // not before the next checkpoint
  for (int64_t t = 3105; t < 3407; t += 60) life.Tick(job, view, LifecycleMs(t));
  report(ProgressInput::Type::kProgress, 1200 + 2400, 3407);
  report(ProgressInput::Type::kCheckpoint, 1200 + 2400, 3407);
  confirm_all(3407);
  EXPECT_EQ(job.status.phase, JobPhase::kPending);
  place({cube0, cube1}, 3407);
  report(ProgressInput::Type::kProgress, 3600, 3409);

  const std::vector<AttemptRecord>& sim = r.outcomes[0].attempts;
  const std::vector<AttemptRecord>& head = job.status.attempts;
  ASSERT_EQ(sim.size(), head.size());
  for (size_t i = 0; i < head.size(); ++i) {
    EXPECT_EQ(sim[i].attempt, head[i].attempt) << i;
    EXPECT_EQ(sim[i].slices, head[i].slices) << i;
    EXPECT_EQ(sim[i].world_size, head[i].world_size) << i;
    EXPECT_EQ(sim[i].placed_ms, head[i].placed_ms) << i;
    EXPECT_EQ(sim[i].first_step_ms, head[i].first_step_ms) << i;
    if (i + 1 < head.size()) {  // the last attempt is still running in the hand-driven copy
      EXPECT_EQ(sim[i].end_reason, head[i].end_reason) << i;
      EXPECT_EQ(sim[i].ended_ms, head[i].ended_ms) << i;
      EXPECT_EQ(sim[i].failure_ms, head[i].failure_ms) << i;
      EXPECT_EQ(sim[i].detected_ms, head[i].detected_ms) << i;
      EXPECT_EQ(sim[i].failed_ranks, head[i].failed_ranks) << i;
      EXPECT_EQ(sim[i].last_step, head[i].last_step) << i;
    }
  }
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
