#include "sim/admission_scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "sim/simulator.h"

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

const SlicePlanner& TesseraPlanner() {
  static const SlicePlanner planner(PlannerOptions::Tessera());
  return planner;
}

// Runs with the simulator's invariants, plus `extra`, checked after every event.
Result<SimResult> RunChecked(const Inventory& inv, const Workload& w, SimOptions o,
                             std::function<Status(const Simulator&)> extra = {}) {
  std::string violation;
  o.after_event = [&](const Simulator& s) {
    if (!violation.empty()) return;
    Status st = s.CheckInvariants();
    if (st.ok() && extra) st = extra(s);
    if (!st.ok()) violation = "at t=" + std::to_string(s.now()) + ": " + st.message();
  };
  auto r = RunSimulation(inv, MapJobs(w, inv, o.shape_map, TesseraPlanner()), o, TesseraPlanner());
  EXPECT_EQ(violation, "") << AdmissionName(o.admission) << " seed " << o.seed;
  return r;
}

TEST(AdmissionScheduler, ParsesAndNamesTheKueueKinds) {
  EXPECT_EQ(*ParseAdmission("kueue"), AdmissionKind::kKueue);
  EXPECT_EQ(*ParseAdmission("kueue-strict"), AdmissionKind::kKueueStrict);
  EXPECT_STREQ(AdmissionName(AdmissionKind::kKueueStrict), "kueue-strict");
  EXPECT_NE(ParseAdmission("kueue2").status().message().find("kueue-strict"), std::string::npos);
  const KueueConfig c = DefaultKueueConfig(AdmissionKind::kKueueStrict, Generation::k7x, 9216);
  ASSERT_EQ(c.cluster_queues.size(), 1u);
  EXPECT_EQ(c.cluster_queues[0].quotas[0].nominal_chips, 9216);
  EXPECT_EQ(c.cluster_queues[0].queueing_strategy, QueueingStrategy::kStrictFIFO);
  EXPECT_EQ(c.cluster_queues[0].preemption.within_cluster_queue,
            WithinClusterQueue::kLowerPriority);
}

// One cube. A (0 s) and B (2 s) take half each; checkpoints every 4 s of run time. H (high
// priority, half a cube) arrives at 5 s. A checkpointed at 4 s and would lose 1 s; B has not
// checkpointed since its start and would lose 3 s: the admission module's victim search picks
// A (same priority and chips, least lost work), where the simulator's own priority scheduler
// picks the most recently started, B.
TEST(AdmissionScheduler, KueuePreemptsTheVictimThatLosesLeastWork) {
  const Inventory inv = Pod(1, 1);
  Workload w;
  w.jobs = {Job("a", 0, 1000, 32), Job("b", 2, 1000, 32), Job("h", 5, 10, 32, 1)};
  SimOptions o;
  o.admission = AdmissionKind::kKueue;
  o.failures.checkpoint_interval_s = 4;
  auto r = RunChecked(inv, w, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->preemptions, 1);
  EXPECT_EQ(r->outcomes[2].first_start_s, 5);
  EXPECT_EQ(r->outcomes[2].finish_s, 15);
  EXPECT_EQ(r->outcomes[0].restarts, 1);
  EXPECT_EQ(r->outcomes[1].restarts, 0);
  // A ran 5 s, kept 4 s, lost exactly 1 s on 32 chips; it is re-admitted when H finishes, in
  // its original place in line, with 996 s left.
  EXPECT_DOUBLE_EQ(r->lost_chip_hours, 32.0 / 3600);
  EXPECT_EQ(r->outcomes[0].finish_s, 15 + 996);
  EXPECT_EQ(r->outcomes[1].finish_s, 1002);
  EXPECT_EQ(r->makespan_s, 1011);

  o.admission = AdmissionKind::kPriority;
  auto p = RunChecked(inv, w, o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->outcomes[1].restarts, 1);  // the newest, B, losing 3 s
  EXPECT_DOUBLE_EQ(p->lost_chip_hours, 3 * 32.0 / 3600);
}

// A holds half the cube; B wants all of it; C (8) fits beside A. kueue-strict holds C behind
// B as fifo does; kueue lets it pass as backfill does. Equal priorities: nobody is preempted.
TEST(AdmissionScheduler, StrictFifoBlocksBestEffortPasses) {
  const Inventory inv = Pod(1, 1);
  Workload w;
  w.jobs = {Job("a", 0, 100, 32), Job("b", 1, 10, 64), Job("c", 2, 10, 8)};
  SimOptions o;
  o.admission = AdmissionKind::kKueueStrict;
  auto strict = RunChecked(inv, w, o);
  ASSERT_TRUE(strict.ok());
  EXPECT_EQ(strict->outcomes[1].first_start_s, 100);
  EXPECT_EQ(strict->outcomes[2].first_start_s, 110);
  EXPECT_EQ(strict->preemptions, 0);
  o.admission = AdmissionKind::kKueue;
  auto best = RunChecked(inv, w, o);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->outcomes[1].first_start_s, 100);
  EXPECT_EQ(best->outcomes[2].first_start_s, 2);
  EXPECT_EQ(best->makespan_s, 110);
}

// A job still waiting when the run stops carries the admission module's pending reason. The
// default queue's quota is the whole cluster, and quota is checked before room, so a full
// cluster reads as over quota.
TEST(AdmissionScheduler, UnfinishedJobsCarryTheAdmissionReason) {
  const Inventory inv = Pod(1, 1);
  Workload w;
  w.jobs = {Job("a", 0, 1000, 64), Job("b", 1, 10, 64)};
  SimOptions o;
  o.admission = AdmissionKind::kKueue;
  o.horizon_s = 100;
  auto r = RunChecked(inv, w, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcomes[1].state, JobOutcome::State::kUnfinished);
  EXPECT_NE(r->outcomes[1].reason.find("OverQuota: needs 64 chips; queue default uses 64 of "
                                       "nominal 64"),
            std::string::npos)
      << r->outcomes[1].reason;
}

Workload Generated(uint64_t seed, int64_t jobs, double multi_slice_fraction) {
  GeneratorOptions g;
  g.jobs = jobs;
  g.seed = seed;
  g.mean_interarrival_s = 120;
  g.mean_duration_s = 3600;
  g.multi_slice_fraction = multi_slice_fraction;
  return Generate(g);
}

// Two teams with their own quota (128 chips each, no cohort) on a 384-chip pod: after every
// event neither holds more than its quota, although chips stay free, and jobs wait over quota.
TEST(AdmissionScheduler, QuotaIsNeverExceeded) {
  const Inventory inv = Pod(2, 3);
  KueueConfig k;
  for (const char* team : {"team-a", "team-b"}) {
    ClusterQueueSpec q;
    q.name = team;
    q.quotas.push_back(
        ResourceQuota{Generation::k7x, 128, std::nullopt, std::nullopt, std::nullopt});
    q.preemption.within_cluster_queue = WithinClusterQueue::kLowerPriority;
    k.cluster_queues.push_back(q);
    k.local_queues.push_back(LocalQueueSpec{team, team});
  }
  k.local_queue_of = [](JobIndex j, const SimJob&) {
    return std::string(j % 2 == 0 ? "team-a" : "team-b");
  };
  const Workload w = Generated(3, 150, 0);  // every job fits a team's quota
  SimOptions o;
  o.admission = AdmissionKind::kKueue;
  o.kueue = k;
  o.seed = 3;
  o.failures.host_mtbf_hours = 200;
  o.failures.checkpoint_interval_s = 900;
  int64_t peak[2] = {0, 0};
  auto r = RunChecked(inv, w, o, [&](const Simulator& s) {
    int64_t used[2] = {0, 0};
    for (const Host& h : s.inventory().hosts())
      if (h.owner.valid()) used[(h.owner.value() >> 16) % 2] += h.chips;
    for (int t = 0; t < 2; ++t) {
      peak[t] = std::max(peak[t], used[t]);
      if (used[t] > 128)
        return Internal("team " + std::to_string(t) + " holds " + std::to_string(used[t]) +
                        " chips, over its quota of 128");
    }
    return Status::Ok();
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->finished + r->never_placed, r->jobs);
  EXPECT_EQ(peak[0], 128);  // the limit binds
  EXPECT_EQ(peak[1], 128);
  EXPECT_LE(r->utilization, 256.0 / 384.0);
}

TEST(AdmissionScheduler, BadQueueConfigurationStopsTheRun) {
  const Inventory inv = Pod(1, 1);
  Workload w;
  w.jobs = {Job("a", 0, 10, 8)};
  SimOptions o;
  o.admission = AdmissionKind::kKueue;
  o.kueue.cluster_queues.push_back(ClusterQueueSpec{});
  o.kueue.cluster_queues[0].name = "Bad_Name";
  o.kueue.local_queues.push_back(LocalQueueSpec{"default", "Bad_Name"});
  auto r = RunSimulation(inv, MapJobs(w, inv, o.shape_map, TesseraPlanner()), o, TesseraPlanner());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Bad_Name"), std::string::npos) << r.status().ToString();
}

// The kueue admission runs the admission module's rules (issue 19), fair sharing on or off
// as `tessera sim --fair-sharing` sets it: two queues of 64 chips in a cohort on a 128-chip
// pod; c2 runs a cube and a half cube (borrowing 32 chips), then c1 a low-priority half cube,
// which would lose the least work. A high-priority half cube arrives in c1, within its nominal
// quota: Kueue reclaims from the borrowing queue (c2's half cube) before the preemptor's own
// lower-priority job, and so does the simulator, with either setting (by lost work alone,
// c1's own job would be the cheaper victim).
TEST(AdmissionScheduler, KueueReclaimTakesTheBorrowersJobWithOrWithoutFairSharing) {
  const Inventory inv = Pod(1, 2);
  Workload w;
  w.jobs = {Job("c2-cube", 0, 1000, 64), Job("c2-half", 1, 1000, 32), Job("c1-low", 3, 1000, 32),
            Job("c1-high", 5, 10, 32, 1)};
  for (FairSharing fair : {FairSharing::kDisabled, FairSharing::kEnabled}) {
    SimOptions o;
    o.admission = AdmissionKind::kKueue;
    for (const char* name : {"c1", "c2"}) {
      ClusterQueueSpec q;
      q.name = name;
      q.cohort = "lab";
      q.quotas.push_back(
          ResourceQuota{Generation::k7x, 64, std::nullopt, std::nullopt, std::nullopt});
      q.preemption.within_cluster_queue = WithinClusterQueue::kLowerPriority;
      q.preemption.reclaim_within_cohort = ReclaimWithinCohort::kLowerPriority;
      o.kueue.cluster_queues.push_back(q);
      o.kueue.local_queues.push_back(LocalQueueSpec{name, name});
    }
    o.kueue.local_queue_of = [](JobIndex j, const SimJob&) {
      return std::string(j <= 1 ? "c2" : "c1");
    };
    o.kueue.admission.fair_sharing = fair;
    auto r = RunChecked(inv, w, o);
    const std::string label = fair == FairSharing::kEnabled ? "fair sharing" : "no fair sharing";
    ASSERT_TRUE(r.ok()) << label << ": " << r.status().ToString();
    EXPECT_EQ(r->preemptions, 1) << label;
    EXPECT_EQ(r->outcomes[3].first_start_s, 5) << label;
    EXPECT_EQ(r->outcomes[1].preemptions, 1) << label << ": the borrower's job is the victim";
    EXPECT_EQ(r->outcomes[2].preemptions, 0) << label << ": not the preemptor's own job";
    EXPECT_EQ(r->outcomes[0].preemptions, 0) << label;
  }
}

}  // namespace
}  // namespace tessera::sim
