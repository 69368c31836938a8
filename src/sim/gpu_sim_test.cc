#include "sim/gpu_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace tessera::sim {
namespace {

JobSpec GpuJob(int gpus, int64_t submit_s, int64_t duration_s) {
  JobSpec j;
  j.name = "j" + std::to_string(submit_s);
  j.accelerators = gpus;
  j.submit_s = submit_s;
  j.duration_s = duration_s;
  return j;
}

// The hold mechanics are tested with exact time limits (every job's real run time); the
// estimates have their own tests.
GpuSimOptions ExactLimits() {
  GpuSimOptions o;
  o.estimates = GpuEstimate::kTrue;
  return o;
}

constexpr int64_t kH = 3600;

// One 8-GPU host, exact limits, one level of attained service at 24 h (las_levels_s).
GpuSimOptions OneHostOneLevel() {
  GpuSimOptions o = ExactLimits();
  o.domains = 1;
  o.las_levels_s = {24 * kH};
  return o;
}

GpuSimResult GpuRun(const Workload& w, GpuSystem sys, int domains, GpuPolicy policy,
                    bool defrag = true) {
  GpuSimOptions o = ExactLimits();
  o.system = sys;
  o.domains = domains;
  o.policy = policy;
  o.defrag = defrag;
  auto r = RunGpuSimulation(w, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : GpuSimResult{};
}

GpuSimResult GpuRunWith(const Workload& w, const GpuSimOptions& o) {
  auto r = RunGpuSimulation(w, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : GpuSimResult{};
}

// Two 8-GPU hosts: A (8 GPUs) holds host 0 until 1000, B (4) half of host 1 until 500. C (8,
// t=10) fits nowhere, and B cannot move (host 0 is full): tessera holds host 1 for C until 500.
// D (4 GPUs, 100 s, t=20) ends before then, so it backfills onto the held host; E (4 GPUs,
// 1000 s, t=200) would not, so it waits for C. Without holds E takes host 1 at 200 and C waits
// for host 0 at 1000.
TEST(GpuSim, SmallJobsBackfillOntoHeldHostsOnlyWhenTheyEndInTime) {
  Workload w;
  w.jobs = {GpuJob(8, 0, 1000), GpuJob(4, 0, 500), GpuJob(8, 10, 10), GpuJob(4, 20, 100),
            GpuJob(4, 200, 1000)};
  GpuSimOptions o = ExactLimits();
  o.system = GpuSystem::kH100;
  o.domains = 2;
  const GpuSimResult t = GpuRunWith(w, o);
  ASSERT_EQ(t.start_s.size(), 5u);
  EXPECT_EQ(t.reserved_s[2], 500);
  EXPECT_EQ(t.start_s[2], 500);
  EXPECT_EQ(t.start_s[3], 20);
  EXPECT_EQ(t.start_s[4], 510);
  EXPECT_EQ(t.holds, 1);
  EXPECT_EQ(t.backfilled, 1);
  EXPECT_EQ(t.late_holds, 0);
  EXPECT_EQ(t.migrations, 0);
  o.holds = 0;
  const GpuSimResult none = GpuRunWith(w, o);
  EXPECT_EQ(none.start_s[4], 200);
  EXPECT_EQ(none.start_s[2], 1000);
  EXPECT_EQ(none.holds, 0);
  EXPECT_EQ(none.reserved_s[2], -1);
  // slurm-block holds nothing unless asked to, and then holds as tessera does.
  o.holds = 1;
  o.policy = GpuPolicy::kSlurmBlock;
  EXPECT_EQ(GpuRunWith(w, o).start_s[4], 200);
  o.baseline_holds = true;
  const GpuSimResult s = GpuRunWith(w, o);
  EXPECT_EQ(s.start_s[2], 500);
  EXPECT_EQ(s.start_s[4], 510);
}

// Three hosts: A (8 GPUs) on host 0 until 2000, C (6) on host 1 until 300, B (4) on host 2
// until 900. D (8 GPUs) is held the host that drains soonest, host 1 (not host 2, which has
// fewer GPUs in use), and starts when C ends.
TEST(GpuSim, TesseraHoldsTheHostsThatDrainSoonest) {
  Workload w;
  w.jobs = {GpuJob(8, 0, 2000), GpuJob(6, 0, 300), GpuJob(4, 0, 900), GpuJob(8, 10, 10)};
  GpuSimOptions o = ExactLimits();
  o.system = GpuSystem::kH100;
  o.domains = 3;
  const GpuSimResult t = GpuRunWith(w, o);
  EXPECT_EQ(t.reserved_s[3], 300);
  EXPECT_EQ(t.start_s[3], 300);
  EXPECT_EQ(t.late_holds, 0);
}

// Which jobs get holds: on h100 a 16-GPU job is whole-host and large but not domain class.
TEST(GpuSim, HoldForPicksTheJobsThatGetReservations) {
  Workload w;
  // Host 0 and 1 half full until 1000 and 2000; the 16-GPU job waits for both.
  w.jobs = {GpuJob(4, 0, 1000), GpuJob(4, 0, 2000), GpuJob(16, 10, 10)};
  GpuSimOptions o = ExactLimits();
  o.system = GpuSystem::kH100;
  o.domains = 2;
  o.defrag = false;
  for (GpuHoldFor h : {GpuHoldFor::kWholeHost, GpuHoldFor::kLarge, GpuHoldFor::kDomainClass}) {
    SCOPED_TRACE(std::string(GpuHoldForName(h)));
    o.hold_for = h;
    const GpuSimResult r = GpuRunWith(w, o);
    EXPECT_EQ(r.holds, h == GpuHoldFor::kDomainClass ? 0 : 1);
    EXPECT_EQ(r.start_s[2], 2000);
  }
  // The default holds for the domain class only.
  GpuSimOptions d;
  d.system = GpuSystem::kH100;
  d.domains = 2;
  d.defrag = false;
  EXPECT_EQ(GpuRunWith(w, d).holds, 0);
  EXPECT_EQ(*ParseGpuHoldFor("large"), GpuHoldFor::kLarge);
  auto bad = ParseGpuHoldFor("big");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("hold_for: unknown 'big'; valid: whole-host"),
            std::string::npos);
}

// Two 8-GPU hosts: A (8 GPUs) on host 0 until 1000, B (6) on host 1 until 500. S (4 GPUs, t=0)
// and the domain-class D (8, t=20) fit nowhere; S was first. `always` holds host 1 for D at
// t=20, so S, which would not end by 500, waits for D: D at 500, S at 600. `fifo` never lets D
// go before the older, smaller S: S takes host 1 at 500, D waits for host 0 until 1000.
// `gpu-wait` holds once D has waited the GPU-hours S has: not at t=20 (0 against 80 GPU-s);
// with E (1 GPU, t=100, 50 s) a pass at t=100 finds 640 against 400 and holds (E backfills),
// as `always` would; with E at t=25 for 1000 s no pass comes until 500, as under `fifo`.
TEST(GpuSim, HoldWhenKeepsAHoldFromJumpingOlderSmallerJobs) {
  GpuSimOptions o = ExactLimits();
  o.system = GpuSystem::kH100;
  o.domains = 2;
  Workload late_e, early_e;
  late_e.jobs = {GpuJob(8, 0, 1000), GpuJob(6, 0, 500), GpuJob(4, 0, 1000), GpuJob(8, 20, 100),
                 GpuJob(1, 100, 50)};
  early_e.jobs = late_e.jobs;
  early_e.jobs[4] = GpuJob(1, 25, 1000);
  struct Case {
    GpuHoldWhen when;
    const Workload* w;
    int64_t s_start, d_start;
  };
  for (const Case& c :
       {Case{GpuHoldWhen::kAlways, &late_e, 600, 500},
        Case{GpuHoldWhen::kAlways, &early_e, 600, 500},
        Case{GpuHoldWhen::kFifo, &late_e, 500, 1000}, Case{GpuHoldWhen::kFifo, &early_e, 500, 1000},
        Case{GpuHoldWhen::kGpuWait, &late_e, 600, 500},
        Case{GpuHoldWhen::kGpuWait, &early_e, 500, 1000},
        // Every job started so far waited 0 s, so S (waiting) is in the tail: never jumped.
        Case{GpuHoldWhen::kTail, &late_e, 500, 1000},
        Case{GpuHoldWhen::kTail, &early_e, 500, 1000}}) {
    SCOPED_TRACE(std::string(GpuHoldWhenName(c.when)) +
                 (c.w == &late_e ? " E at 100" : " E at 25"));
    o.hold_when = c.when;
    const GpuSimResult r = GpuRunWith(*c.w, o);
    ASSERT_EQ(r.start_s.size(), 5u);
    EXPECT_EQ(r.start_s[2], c.s_start);
    EXPECT_EQ(r.start_s[3], c.d_start);
    EXPECT_EQ(r.late_holds, 0);
    EXPECT_EQ(r.migrations, 0);
  }
  // The default is gpu-wait.
  EXPECT_EQ(GpuSimOptions{}.hold_when, GpuHoldWhen::kGpuWait);
  EXPECT_EQ(*ParseGpuHoldWhen("fifo"), GpuHoldWhen::kFifo);
  auto bad = ParseGpuHoldWhen("never");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("hold_when: unknown 'never'; valid: gpu-wait"),
            std::string::npos);
}

// `tail` lets a hold go before an older smaller job that has not yet waited the p95 wait of the
// jobs started so far. Two hosts: P (8) on host 0 until 1000, Q (8) on host 1 until 300; R (8,
// t=0) is held host 1 and starts at 300 (waits so far 0, 0, 300: p95 300 s). S (4 GPUs, t=305)
// and D (8, t=306) wait for host 1 (R until 310). At 306 S has waited 1 s: `tail` holds host 1
// for D, which starts at 310, S when D ends (410). `gpu-wait` (D's 0 GPU-s against S's 4) and
// `fifo` do not hold: S takes host 1 at 310 and D waits for host 0 until 1000.
TEST(GpuSim, HoldWhenTailJumpsOnlyJobsNotYetInTheTail) {
  Workload w;
  w.jobs = {GpuJob(8, 0, 1000), GpuJob(8, 0, 300), GpuJob(8, 0, 10), GpuJob(4, 305, 1000),
            GpuJob(8, 306, 100)};
  GpuSimOptions o = ExactLimits();
  o.system = GpuSystem::kH100;
  o.domains = 2;
  for (GpuHoldWhen when : {GpuHoldWhen::kTail, GpuHoldWhen::kGpuWait, GpuHoldWhen::kFifo}) {
    SCOPED_TRACE(std::string(GpuHoldWhenName(when)));
    o.hold_when = when;
    const GpuSimResult r = GpuRunWith(w, o);
    ASSERT_EQ(r.start_s.size(), 5u);
    EXPECT_EQ(r.start_s[2], 300);
    const bool tail = when == GpuHoldWhen::kTail;
    EXPECT_EQ(r.start_s[3], tail ? 410 : 310);
    EXPECT_EQ(r.start_s[4], tail ? 310 : 1000);
    EXPECT_EQ(r.late_holds, 0);
  }
  EXPECT_EQ(*ParseGpuHoldWhen("tail"), GpuHoldWhen::kTail);
}

// Invariants over random workloads, for every hold setting: every job starts exactly once (a
// second start is an internal error), never before its submission, and a held job never
// later than its first reservation time, whatever was backfilled onto its hosts meanwhile.
void ExpectHoldsKept(const Workload& w, const GpuSimOptions& o) {
  auto r = RunGpuSimulation(w, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->late_holds, 0);
  EXPECT_EQ(r->never_placed, 0);
  int64_t reserved = 0;
  for (size_t j = 0; j < w.jobs.size(); ++j) {
    ASSERT_GE(r->start_s[j], w.jobs[j].submit_s) << "job " << j;
    if (r->reserved_s[j] >= 0) {
      ++reserved;
      EXPECT_LE(r->start_s[j], r->reserved_s[j]) << "job " << j;
    }
  }
  EXPECT_GT(reserved, 0);
  EXPECT_LE(reserved, r->holds);
}

TEST(GpuSim, BackfillNeverDelaysAHeldJobPastItsReservation) {
  for (uint64_t seed : {3u, 8u}) {
    GeneratorOptions g;
    g.jobs = 300;
    g.seed = seed;
    g.mean_interarrival_s = 200;
    g.sizes = {{1, 8}, {2, 4}, {4, 4}, {6, 2}, {8, 4}, {16, 2}, {40, 2}, {72, 1}, {144, 1}};
    const Workload w = Generate(g);
    for (GpuSystem sys : {GpuSystem::kH100, GpuSystem::kGb200Nvl72}) {
      GpuSimOptions o = ExactLimits();
      o.system = sys;
      o.domains = sys == GpuSystem::kH100 ? 20 : 3;
      for (int holds : {1, 4}) {
        for (GpuHoldFor h :
             {GpuHoldFor::kWholeHost, GpuHoldFor::kLarge, GpuHoldFor::kDomainClass}) {
          for (bool defrag : {true, false}) {
            for (GpuHoldWhen when : {GpuHoldWhen::kGpuWait, GpuHoldWhen::kFifo,
                                     GpuHoldWhen::kAlways, GpuHoldWhen::kTail}) {
              SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(GpuSystemName(sys)) +
                           " holds " + std::to_string(holds) + " for " +
                           std::string(GpuHoldForName(h)) + " when " +
                           std::string(GpuHoldWhenName(when)) + (defrag ? " moves" : ""));
              o.holds = holds;
              o.hold_for = h;
              o.hold_when = when;
              o.defrag = defrag;
              ExpectHoldsKept(w, o);
            }
          }
        }
      }
      // Preemption: every job runs to its end (the run checks its own GPU accounting), none
      // starts before its submission, held jobs are never late, and something was preempted.
      {
        SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(GpuSystemName(sys)) +
                     " preempt");
        o.holds = 1;
        o.hold_for = GpuHoldFor::kDomainClass;
        o.hold_when = GpuHoldWhen::kGpuWait;
        o.defrag = true;
        o.preempt = true;
        auto r = RunGpuSimulation(w, o);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_EQ(r->late_holds, 0);
        EXPECT_GT(r->preemptions, 0);
        for (size_t j = 0; j < w.jobs.size(); ++j) {
          EXPECT_GE(r->start_s[j], w.jobs[j].submit_s) << "job " << j;
        }
        o.preempt = false;
      }
      // The baselines given the same holds (Slurm's backfill with exact time limits).
      o.baseline_holds = true;
      o.hold_for = GpuHoldFor::kWholeHost;
      for (GpuPolicy p : {GpuPolicy::kSlurmBlock, GpuPolicy::kFirstFit}) {
        for (int holds : {1, 3}) {
          SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(GpuSystemName(sys)) +
                       " " + std::string(GpuPolicyName(p)) + " holds " + std::to_string(holds));
          o.policy = p;
          o.holds = holds;
          ExpectHoldsKept(w, o);
        }
      }
    }
  }
}

// Least attained service first (las_levels_s), one 8-GPU host, one level at 24 h. P and Q (4
// GPUs, 100 h each) fill the host from t=0. At 30 h both have run past the level when B (8
// GPUs, 1 h) arrives: it preempts them and starts at once. R (4 GPUs, 10 h) arrives at 30.5 h;
// when B ends at 31 h, R (level 0) goes before the older P and Q (level 1): R and P start,
// Q waits for R. Without levels B waits for P and Q to end (100 h).
TEST(GpuSim, LeastAttainedServiceGoesFirstAndPreemptsJobsThatRanLonger) {
  Workload w;
  w.jobs = {GpuJob(4, 0, 100 * kH), GpuJob(4, 0, 100 * kH), GpuJob(8, 30 * kH, kH),
            GpuJob(4, 30 * kH + kH / 2, 10 * kH)};
  GpuSimOptions o = OneHostOneLevel();
  o.las_starve_limit = 100;  // no promotion back to level 0 within the run (its own test)
  const GpuSimResult r = GpuRunWith(w, o);
  ASSERT_EQ(r.start_s.size(), 4u);
  EXPECT_EQ(r.start_s[2], 30 * kH);
  EXPECT_EQ(r.preemptions, 2);
  EXPECT_EQ(r.start_s[3], 31 * kH);
  // P restarts beside R at 31 h; Q after R ends (41 h), each after the restart cost. Their
  // waits count the time requeued and the restart cost: P 1 h + 300 s, Q 11 h + 300 s; R 0.5 h.
  ASSERT_EQ(r.classes[0].jobs, 3);
  EXPECT_NEAR(r.classes[0].mean_wait_h, (1.0 + 11.0 + 2 * 300.0 / kH + 0.5) / 3, 1e-9);
  o.las_levels_s.clear();
  const GpuSimResult off = GpuRunWith(w, o);
  EXPECT_EQ(off.start_s[2], 100 * kH);
  EXPECT_EQ(off.preemptions, 0);
}

// A job reaching a level is a moment to schedule: G (4 GPUs, 100 h) runs alone from t=0; H (8
// GPUs) arrives at 10 h, when G has run less than the 24 h level, and waits. At 24 h G reaches
// it, and H preempts G then, not at G's next event.
TEST(GpuSim, LeastAttainedServicePreemptsWhenAJobReachesALevel) {
  Workload w;
  w.jobs = {GpuJob(4, 0, 100 * kH), GpuJob(8, 10 * kH, kH)};
  GpuSimOptions o = OneHostOneLevel();
  const GpuSimResult r = GpuRunWith(w, o);
  EXPECT_EQ(r.start_s[1], 24 * kH);
  EXPECT_EQ(r.preemptions, 1);
}

// A preempted job that has waited las_starve_limit times what it ran is first in line again.
// P and Q (4 GPUs, 40 h) fill one host from t=0; R (4 GPUs, 100 h) arrives at 30 h and preempts
// Q (the younger of the two that ran past 24 h). With a limit of 0.25, Q is back at level 0 at
// 37.5 h and preempts P, which has run past the level, and so on; with a limit of 100 Q waits
// for P's end.
TEST(GpuSim, LeastAttainedServicePromotesAJobThatWaitedLongEnough) {
  Workload w;
  w.jobs = {GpuJob(4, 0, 40 * kH), GpuJob(4, 0, 40 * kH), GpuJob(4, 30 * kH, 100 * kH)};
  GpuSimOptions o = OneHostOneLevel();
  o.las_starve_limit = 100;
  const GpuSimResult patient = GpuRunWith(w, o);
  EXPECT_EQ(patient.start_s[2], 30 * kH);
  EXPECT_EQ(patient.preemptions, 1);
  o.las_starve_limit = 0.25;
  const GpuSimResult promoted = GpuRunWith(w, o);
  EXPECT_EQ(promoted.start_s[2], 30 * kH);
  EXPECT_GE(promoted.preemptions, 2);
  o.las_starve_limit = 0;
  EXPECT_FALSE(RunGpuSimulation(w, o).ok());
}

// The jobs holds are made for (here the domain class: 5-8 GPUs on an 8-GPU host) yield only to
// a job at least as large. D (8 GPUs, 100 h) has run 30 h when E (4 GPUs) arrives: E waits for
// D's end. F (8 GPUs) arriving then preempts D.
TEST(GpuSim, LeastAttainedServiceSparesADomainJobForASmallerOne) {
  GpuSimOptions o = OneHostOneLevel();
  Workload w;
  w.jobs = {GpuJob(8, 0, 100 * kH), GpuJob(4, 30 * kH, kH)};
  const GpuSimResult small = GpuRunWith(w, o);
  EXPECT_EQ(small.start_s[1], 100 * kH);
  EXPECT_EQ(small.preemptions, 0);
  w.jobs[1] = GpuJob(8, 30 * kH, kH);
  const GpuSimResult same = GpuRunWith(w, o);
  EXPECT_EQ(same.start_s[1], 30 * kH);
  EXPECT_EQ(same.preemptions, 1);
  // Holding for whole-host jobs only, a 6-GPU job is not spared.
  o.hold_for = GpuHoldFor::kWholeHost;
  w.jobs = {GpuJob(6, 0, 100 * kH), GpuJob(4, 30 * kH, kH)};
  EXPECT_EQ(GpuRunWith(w, o).start_s[1], 30 * kH);
}

// Preempting by attained service stops the small jobs that ran longer before a whole-domain job
// (the hardest to place again). Two 8-GPU hosts: D (8 GPUs, 100 h) takes host 0, S and T (4
// GPUs, 100 h) host 1, all at t=0. At 30 h all three have run past the 24 h level when F (8
// GPUs, 1 h) arrives: stopping S and T makes room, so D runs on. When T starts at 20 h instead
// (10 h run at 30 h, level 0), only D can make room, and F preempts it.
TEST(GpuSim, LeastAttainedServicePreemptsSmallJobsBeforeADomainJob) {
  GpuSimOptions o = OneHostOneLevel();
  o.domains = 2;
  o.las_starve_limit = 100;
  Workload w;
  w.jobs = {GpuJob(8, 0, 100 * kH), GpuJob(4, 0, 100 * kH), GpuJob(4, 0, 100 * kH),
            GpuJob(8, 30 * kH, kH)};
  const GpuSimResult r = GpuRunWith(w, o);
  EXPECT_EQ(r.start_s[3], 30 * kH);
  EXPECT_EQ(r.preemptions, 2);
  ASSERT_EQ(r.classes[1].name, "domain");
  EXPECT_DOUBLE_EQ(r.classes[1].p95_wait_h, 0) << "D was preempted";
  w.jobs[2] = GpuJob(4, 20 * kH, 100 * kH);
  const GpuSimResult d = GpuRunWith(w, o);
  EXPECT_EQ(d.start_s[3], 30 * kH);
  EXPECT_EQ(d.preemptions, 1);
  EXPECT_GT(d.classes[1].p95_wait_h, 0.5) << "D waits out F's hour and its restart";
}

// A whole-domain job restarted after a preemption runs preempt_exempt_s before attained service
// may stop it again; a small job gets no such exemption. One 8-GPU host: D (8 GPUs, 100 h) has
// run 30 h when E (8 GPUs, 2 h) preempts it; D restarts when E ends (32 h, plus the restart
// cost). F (8 GPUs, 1 h) arrives at 34 h: with no exemption it preempts D then; with 8 h it
// waits until D has run 8 h since its restart. Two 4-GPU jobs in D's place are both stopped by
// E, and F (4 GPUs) stops one of them at 34 h whatever the exemption.
TEST(GpuSim, ARestartedDomainJobIsExemptFromPreemptionForAWhile) {
  GpuSimOptions o = OneHostOneLevel();
  o.las_starve_limit = 100;  // D restarts when E ends, not by promotion
  o.preempt_exempt_s = 0;
  Workload w;
  w.jobs = {GpuJob(8, 0, 100 * kH), GpuJob(8, 30 * kH, 2 * kH), GpuJob(8, 34 * kH, kH)};
  const GpuSimResult at_once = GpuRunWith(w, o);
  EXPECT_EQ(at_once.start_s[2], 34 * kH);
  EXPECT_EQ(at_once.preemptions, 2);
  o.preempt_exempt_s = 8 * kH;
  const GpuSimResult exempt = GpuRunWith(w, o);
  EXPECT_EQ(exempt.start_s[2], 32 * kH + o.migrate_s + 8 * kH);
  EXPECT_EQ(exempt.preemptions, 2);
  w.jobs = {GpuJob(4, 0, 100 * kH), GpuJob(4, 0, 100 * kH), GpuJob(8, 30 * kH, 2 * kH),
            GpuJob(4, 34 * kH, kH)};
  const GpuSimResult small = GpuRunWith(w, o);
  EXPECT_EQ(small.start_s[3], 34 * kH);
  EXPECT_EQ(small.preemptions, 3);
}

// Invariants of least attained service over random workloads of long jobs, with the estimates
// a scheduler has: the run ends with every GPU free and its own accounting whole (else an
// internal error), no job starts before its submission, jobs are preempted, and the same input
// gives the same result.
TEST(GpuSim, LeastAttainedServiceRunsEveryJobToItsEnd) {
  for (uint64_t seed : {4u, 9u}) {
    GeneratorOptions g;
    g.jobs = 100;
    g.seed = seed;
    g.mean_interarrival_s = 1800;
    g.mean_duration_s = 12 * 3600;
    g.sizes = {{1, 8}, {2, 4}, {4, 4}, {6, 2}, {8, 4}, {16, 2}, {40, 2}, {72, 1}, {144, 1}};
    const Workload w = Generate(g);
    for (GpuSystem sys : {GpuSystem::kH100, GpuSystem::kGb200Nvl72}) {
      for (bool preempt : {false, true}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(GpuSystemName(sys)) +
                     (preempt ? " preempt" : ""));
        GpuSimOptions o;
        o.system = sys;
        o.domains = sys == GpuSystem::kH100 ? 20 : 2;
        o.las_levels_s = {2 * 3600, 12 * 3600};
        o.preempt = preempt;
        auto r = RunGpuSimulation(w, o);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_EQ(r->never_placed, 0);
        EXPECT_EQ(r->overall.jobs, static_cast<int64_t>(w.jobs.size()));
        EXPECT_GT(r->preemptions, 0);
        EXPECT_LE(r->utilisation, 1.0);
        for (size_t j = 0; j < w.jobs.size(); ++j) {
          EXPECT_GE(r->start_s[j], w.jobs[j].submit_s) << "job " << j;
        }
        auto again = RunGpuSimulation(w, o);
        ASSERT_TRUE(again.ok());
        EXPECT_EQ(again->hash, r->hash);
      }
    }
  }
}

// Two 8-GPU hosts. A (4 GPUs, short) and B (4, long) share host 0 by best fit, C (4, long) takes
// host 1. When A ends, each host has 4 GPUs free: the 8-GPU job D fits nowhere. slurm-block
// waits until B and C end (t=1000); tessera holds host 0, moves B to host 1, starts D at 200.
TEST(GpuSim, TesseraMovesSmallJobsOffTheHostABigJobNeeds) {
  Workload w;
  w.jobs = {GpuJob(4, 0, 100), GpuJob(4, 0, 1000), GpuJob(4, 0, 1000), GpuJob(8, 200, 10)};
  const GpuSimResult s = GpuRun(w, GpuSystem::kH100, 2, GpuPolicy::kSlurmBlock);
  const GpuSimResult t = GpuRun(w, GpuSystem::kH100, 2, GpuPolicy::kTessera);
  const GpuSimResult no_defrag = GpuRun(w, GpuSystem::kH100, 2, GpuPolicy::kTessera, false);
  ASSERT_EQ(s.classes[1].name, "domain");
  EXPECT_EQ(s.classes[1].jobs, 1);
  EXPECT_DOUBLE_EQ(s.classes[1].p95_wait_h, 800.0 / 3600);
  EXPECT_DOUBLE_EQ(no_defrag.classes[1].p95_wait_h, 800.0 / 3600);
  EXPECT_DOUBLE_EQ(t.classes[1].p95_wait_h, 0);
  EXPECT_EQ(t.migrations, 1);
  EXPECT_DOUBLE_EQ(t.migrated_gpu_h, 4.0 * 300 / 3600);
  EXPECT_EQ(s.migrations, 0);
  // B ends 300 s late: the last end is 1300.
  EXPECT_EQ(t.makespan_s, 1300);
  EXPECT_EQ(s.makespan_s, 1010);
}

// Preemption instead of a hold. Two 8-GPU hosts: A and B (4 GPUs, 1000 s) fill host 0, C (4)
// half of host 1. D (8 GPUs, t=10) fits nowhere, and C cannot move (host 0 is full): without
// preemption D holds a host until 1000. With it, C is preempted (checkpointed and requeued), D
// starts at once and ends at 20, and C restarts then: its wait counts its 10 s requeued and its
// 300 s restart cost, and it ends at 20 + 990 + 300. The baselines never preempt.
TEST(GpuSim, PreemptionStartsTheHeldJobAndCountsTheVictimsWait) {
  Workload w;
  w.jobs = {GpuJob(4, 0, 1000), GpuJob(4, 0, 1000), GpuJob(4, 0, 1000), GpuJob(8, 10, 10)};
  GpuSimOptions o = ExactLimits();
  o.system = GpuSystem::kH100;
  o.domains = 2;
  const GpuSimResult hold = GpuRunWith(w, o);
  EXPECT_EQ(hold.start_s[3], 1000);
  EXPECT_EQ(hold.preemptions, 0);
  o.preempt = true;
  const GpuSimResult t = GpuRunWith(w, o);
  EXPECT_EQ(t.start_s[3], 10);
  EXPECT_EQ(t.preemptions, 1);
  EXPECT_EQ(t.migrations, 0);
  EXPECT_EQ(t.start_s[2], 0);  // its first start
  EXPECT_DOUBLE_EQ(t.preempted_gpu_h, 4.0 * 300 / 3600);
  EXPECT_DOUBLE_EQ(t.classes[1].p95_wait_h, 0);
  EXPECT_DOUBLE_EQ(t.classes[0].p95_wait_h, 310.0 / 3600);
  EXPECT_EQ(t.makespan_s, 1310);
  o.policy = GpuPolicy::kSlurmBlock;
  o.baseline_holds = true;
  EXPECT_EQ(GpuRunWith(w, o).preemptions, 0);
}

// Why the domain class's tail waited. Two hosts: A (8 GPUs) on host 0 until 1000, B (4) on host
// 1 until 500. C (8, t=10) is held host 1 until 500; D (8, t=20) waits for the one hold (slot
// taken) until C starts at 500, then is held host 1 until C ends at 510. Both waited 490 s (the
// tail is both): C 490 s held, D 480 s slot taken and 10 s held; 4 GPUs free at most meanwhile,
// never the 8 they need (not fragmented).
TEST(GpuSim, DomainTailWaitsSplitByWhatTheJobsWaitedFor) {
  Workload w;
  w.jobs = {GpuJob(8, 0, 1000), GpuJob(4, 0, 500), GpuJob(8, 10, 10), GpuJob(8, 20, 10)};
  GpuSimOptions o = ExactLimits();
  o.system = GpuSystem::kH100;
  o.domains = 2;
  const GpuSimResult t = GpuRunWith(w, o);
  EXPECT_EQ(t.start_s[2], 500);
  EXPECT_EQ(t.start_s[3], 510);
  ASSERT_EQ(t.domain_tail_waits.size(), 4u);
  EXPECT_EQ(t.domain_tail_waits[0].state, "held");
  EXPECT_DOUBLE_EQ(t.domain_tail_waits[0].mean_h, (490.0 + 10.0) / 2 / 3600);
  EXPECT_EQ(t.domain_tail_waits[2].state, "slot taken");
  EXPECT_DOUBLE_EQ(t.domain_tail_waits[2].mean_h, 480.0 / 2 / 3600);
  EXPECT_DOUBLE_EQ(t.domain_tail_waits[1].mean_h, 0);
  EXPECT_DOUBLE_EQ(t.domain_tail_waits[3].mean_h, 0);
  for (const GpuWaitCause& c : t.domain_tail_waits) EXPECT_DOUBLE_EQ(c.fragmented_h, 0);
  // Fragmented: three 4-GPU jobs on two hosts; when the first ends (t=100) 8 GPUs are free, on
  // no whole host. Without moves or holds G (8, t=200) waits 800 s unheld, all of it fragmented;
  // with moves it starts at once.
  Workload f;
  f.jobs = {GpuJob(4, 0, 100), GpuJob(4, 0, 1000), GpuJob(4, 0, 1000), GpuJob(8, 200, 10)};
  o.holds = 0;
  o.defrag = false;
  const GpuSimResult stuck = GpuRunWith(f, o);
  EXPECT_EQ(stuck.start_s[3], 1000);
  EXPECT_DOUBLE_EQ(stuck.domain_tail_waits[3].mean_h, 800.0 / 3600);
  EXPECT_DOUBLE_EQ(stuck.domain_tail_waits[3].fragmented_h, 800.0 / 3600);
  o.holds = 1;
  o.defrag = true;
  const GpuSimResult moved = GpuRunWith(f, o);
  EXPECT_EQ(moved.start_s[3], 200);
  EXPECT_EQ(moved.migrations, 1);
}

// First fit ignores cliques: on two NVL72 racks, after a 10-tray job in rack 0 (8 trays free),
// a 12-tray job spans both racks under first fit; the domain planners put it in rack 1.
TEST(GpuSim, FirstFitSpansCliquesAndTheDomainPlannersDoNot) {
  Workload w;
  w.jobs = {GpuJob(40, 0, 1000), GpuJob(48, 10, 100), GpuJob(48, 20, 100)};
  const GpuSimResult f = GpuRun(w, GpuSystem::kGb200Nvl72, 2, GpuPolicy::kFirstFit);
  const GpuSimResult t = GpuRun(w, GpuSystem::kGb200Nvl72, 2, GpuPolicy::kTessera);
  const GpuSimResult s = GpuRun(w, GpuSystem::kGb200Nvl72, 2, GpuPolicy::kSlurmBlock);
  EXPECT_GE(f.spanned, 1);
  EXPECT_EQ(t.spanned, 0);
  EXPECT_EQ(s.spanned, 0);
}

TEST(GpuSim, SameInputSameResultAndEveryJobRuns) {
  GeneratorOptions g;
  g.jobs = 400;
  g.seed = 11;
  g.mean_interarrival_s = 300;
  g.sizes = {{1, 8}, {2, 2}, {4, 4}, {8, 3}, {16, 2}, {36, 1}, {64, 1}, {144, 1}};
  const Workload w = Generate(g);
  for (GpuSystem sys : {GpuSystem::kH100, GpuSystem::kGb200Nvl72}) {
    for (GpuPolicy p : {GpuPolicy::kTessera, GpuPolicy::kSlurmBlock, GpuPolicy::kFirstFit}) {
      SCOPED_TRACE(std::string(GpuSystemName(sys)) + " " + std::string(GpuPolicyName(p)));
      const int domains = sys == GpuSystem::kH100 ? 24 : 3;
      const GpuSimResult a = GpuRun(w, sys, domains, p);
      const GpuSimResult b = GpuRun(w, sys, domains, p);
      EXPECT_EQ(a.hash, b.hash);
      EXPECT_EQ(a.never_placed, 0);
      EXPECT_EQ(a.overall.jobs, 400);
      EXPECT_GT(a.utilisation, 0);
      EXPECT_LE(a.utilisation, 1.0);
    }
  }
}

// A fleet and the sizes of the jobs generated for it.
struct FleetCase {
  GpuSystem sys;
  int domains;
  std::vector<std::pair<int, double>> sizes;
};

Workload Generated(const FleetCase& c, uint64_t seed, int64_t jobs, double interarrival_s) {
  GeneratorOptions g;
  g.jobs = jobs;
  g.seed = seed;
  g.mean_interarrival_s = interarrival_s;
  g.sizes = c.sizes;
  return Generate(g);
}

GpuSimOptions FleetOf(const FleetCase& c) {
  GpuSimOptions o;
  o.system = c.sys;
  o.domains = c.domains;
  return o;
}

// The domain class alone against a naive model: a queue of identical servers in submission
// order (each job to the server free soonest, at its submit time or then). Every domain-class
// job takes more than half a domain, so a domain is one server; other jobs are left out.
TEST(GpuSim, DomainClassAloneIsAQueueOfWholeDomains) {
  const std::vector<FleetCase> cases = {
      {GpuSystem::kH100, 5, {{1, 4}, {4, 2}, {5, 1}, {6, 1}, {8, 3}, {16, 1}}},
      {GpuSystem::kGb200Nvl72, 2, {{4, 4}, {36, 2}, {37, 1}, {48, 1}, {72, 2}, {144, 1}}},
  };
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    for (const FleetCase& c : cases) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(GpuSystemName(c.sys)));
      const Workload w = Generated(c, seed, 300, 600);
      GpuSimOptions o = FleetOf(c);
      auto alone = RunDomainClassAlone(w, o);
      ASSERT_TRUE(alone.ok()) << alone.status().ToString();
      EXPECT_EQ(alone->policy, "domain class alone");
      const int gpd = Info(c.sys).gpus_per_domain();
      std::vector<int64_t> free_at(c.domains, 0);
      size_t k = 0;
      for (const JobSpec& j : w.jobs) {
        if (j.accelerators <= gpd / 2 || j.accelerators > gpd) continue;
        auto soonest = std::min_element(free_at.begin(), free_at.end());
        const int64_t start = std::max(j.submit_s, *soonest);
        *soonest = start + std::max<int64_t>(1, j.duration_s);
        ASSERT_LT(k, alone->start_s.size());
        EXPECT_EQ(alone->start_s[k], start) << "domain-class job " << k;
        ++k;
      }
      EXPECT_GT(k, 20u);
      EXPECT_EQ(alone->start_s.size(), k);
      EXPECT_EQ(alone->classes[1].jobs, static_cast<int64_t>(k));
      EXPECT_EQ(alone->classes[0].jobs + alone->classes[2].jobs, 0);
    }
  }
}

// The floor holds for every scheduler that starts the domain class in submission order and
// does not preempt it, whatever else runs beside it. With every domain-class job a whole
// domain, slurm-block and first-fit without holds start it in order: no domain-class job starts
// before its start with the fleet to the class alone, so their class p95 is at least the floor.
TEST(GpuSim, NoInOrderSchedulerStartsTheDomainClassBeforeItsFloor) {
  const std::vector<FleetCase> cases = {
      {GpuSystem::kH100, 6, {{1, 6}, {2, 2}, {4, 3}, {8, 3}, {16, 1}}},
      {GpuSystem::kGb200Nvl72, 3, {{4, 6}, {16, 3}, {36, 2}, {72, 3}, {144, 1}}},
  };
  for (uint64_t seed : {5u, 6u, 7u}) {
    for (const FleetCase& c : cases) {
      const Workload w = Generated(c, seed, 400, 400);
      GpuSimOptions o = FleetOf(c);
      auto alone = RunDomainClassAlone(w, o);
      ASSERT_TRUE(alone.ok()) << alone.status().ToString();
      const int gpd = Info(c.sys).gpus_per_domain();
      for (GpuPolicy p : {GpuPolicy::kSlurmBlock, GpuPolicy::kFirstFit}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(GpuSystemName(c.sys)) +
                     " " + std::string(GpuPolicyName(p)));
        o.policy = p;
        const GpuSimResult r = GpuRunWith(w, o);
        ASSERT_EQ(r.start_s.size(), w.jobs.size());
        size_t k = 0;
        int64_t later = 0;  // class jobs that start later than alone: the others' share
        for (size_t i = 0; i < w.jobs.size(); ++i) {
          if (w.jobs[i].accelerators != gpd) continue;
          EXPECT_GE(r.start_s[i], alone->start_s[k]) << "job " << i;
          later += r.start_s[i] > alone->start_s[k] ? 1 : 0;
          ++k;
        }
        EXPECT_EQ(k, alone->start_s.size());
        EXPECT_GT(later, 0);  // the other jobs do take the class's domains at times
        EXPECT_GE(r.classes[1].p95_wait_h, alone->classes[1].p95_wait_h);
      }
    }
  }
}

// The writers set the floor beside slurm-block's domain p95 and say when it is over the goal.
// One 8-GPU host: A and B (8 GPUs, 10 h each, t=0) queue behind each other alone too, so
// B's wait is the class's floor (10 h at p95 of two).
TEST(GpuSim, WritersReportTheDomainClassFloor) {
  Workload w;
  w.jobs = {GpuJob(8, 0, 36000), GpuJob(8, 0, 36000), GpuJob(2, 0, 100)};
  GpuSimOptions o = ExactLimits();
  o.domains = 1;
  GpuComparison c;
  o.policy = GpuPolicy::kSlurmBlock;
  c.runs.push_back(GpuRunWith(w, o));
  auto alone = RunDomainClassAlone(w, o);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ(alone->classes[1].jobs, 2);
  EXPECT_NEAR(alone->classes[1].p95_wait_h, 10.0, 1e-9);
  c.domain_alone = *alone;
  std::ostringstream text, json;
  WriteGpuText(text, c);
  EXPECT_NE(text.str().find("floor: the domain class alone on the fleet (its 2 jobs"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("waits 10.00 h at p95, "), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("over 0.5x"), std::string::npos) << text.str();
  WriteGpuJson(json, c);
  EXPECT_NE(json.str().find("\"domain_class_alone\""), std::string::npos) << json.str();
  // No domain-class job: no floor.
  w.jobs = {GpuJob(2, 0, 100)};
  alone = RunDomainClassAlone(w, o);
  ASSERT_TRUE(alone.ok());
  c.domain_alone = *alone;
  std::ostringstream none;
  WriteGpuText(none, c);
  EXPECT_EQ(none.str().find("floor:"), std::string::npos) << none.str();
}

// Holds and backfill go by estimates, never by the real run times. Two hosts: P and Q (4 GPUs,
// 100 s) finish first. A (8 GPUs, t=200, 1000 s) takes host 0, B (4, 500 s) half of host 1. C
// (8, t=210) is held a host; D (4 GPUs, t=400, 1000 s) arrives.
//  - true (the oracle): C's hold ends when B really ends (700); D, 1000 s, does not fit before
//    it and starts after C (710).
//  - default (a 24 h limit each): no job ends in time, D waits too.
//  - history: a job is expected to run the median of the finished ones (100 s; 2x what it has
//    run once past them all). C's hold, for 300, has passed by 400 and is made again: both hosts
//    are expected free at 600 (A and B have run 200 s), so D, expected 100 s, is backfilled at
//    400 and runs 1000 s: C, reserved for 300, starts at 1200 when A ends (late). (Reclaiming
//    the hosts from D has its own test.)
Workload EstimatesCase() {
  Workload w;
  w.jobs = {GpuJob(4, 0, 100),   GpuJob(4, 0, 100),  GpuJob(8, 200, 1000),
            GpuJob(4, 200, 500), GpuJob(8, 210, 10), GpuJob(4, 400, 1000)};
  return w;
}

TEST(GpuSim, HoldsAndBackfillGoByEstimatesNotRealRunTimes) {
  const Workload w = EstimatesCase();
  GpuSimOptions o;
  o.system = GpuSystem::kH100;
  o.domains = 2;
  o.reclaim = false;
  for (GpuPolicy p : {GpuPolicy::kTessera, GpuPolicy::kSlurmBlock}) {
    SCOPED_TRACE(std::string(GpuPolicyName(p)));
    o.policy = p;
    o.baseline_holds = true;  // slurm-block's backfill under the same estimates
    o.estimates = GpuEstimate::kTrue;
    const GpuSimResult exact = GpuRunWith(w, o);
    EXPECT_EQ(exact.reserved_s[4], 700);
    EXPECT_EQ(exact.start_s[4], 700);
    EXPECT_EQ(exact.start_s[5], 710);
    EXPECT_EQ(exact.late_holds, 0);
    o.estimates = GpuEstimate::kLimit;
    const GpuSimResult limit = GpuRunWith(w, o);
    EXPECT_EQ(limit.reserved_s[4], 200 + 24 * 3600);
    EXPECT_EQ(limit.start_s[4], 700);
    EXPECT_EQ(limit.start_s[5], 710);
    EXPECT_EQ(limit.backfilled, 0);
    o.default_estimate_s = 300;  // a stated limit: B is then expected to end at 500
    EXPECT_EQ(GpuRunWith(w, o).reserved_s[4], 500);
    o.default_estimate_s = 24 * 3600;
    o.estimates = GpuEstimate::kHistory;
    const GpuSimResult history = GpuRunWith(w, o);
    EXPECT_EQ(history.reserved_s[4], 300);
    EXPECT_EQ(history.start_s[5], 400);
    EXPECT_EQ(history.backfilled, 1);
    EXPECT_EQ(history.start_s[4], 1200);
    EXPECT_EQ(history.late_holds, 1);
  }
  EXPECT_EQ(ParseGpuEstimate("history").value(), GpuEstimate::kHistory);
  const auto bad = ParseGpuEstimate("exact");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("valid: default"), std::string::npos);
}

// A job backfilled on held hosts ran past the time it was to end by: the hold takes the hosts
// back. In EstimatesCase with history estimates, D is backfilled at 400 on C's hold, to end by
// 600. At 600 D is preempted (requeued), and is not backfilled on C's hosts again: C starts at
// 700, when B ends, not at 1200; D restarts when C ends (710) and ends 300 s (its restart) +
// 800 s later. Without reclaiming, D keeps the host and C starts at 1200.
TEST(GpuSim, AHoldReclaimsItsHostsFromABackfillThatRunsLate) {
  const Workload w = EstimatesCase();
  GpuSimOptions o;
  o.system = GpuSystem::kH100;
  o.domains = 2;
  o.estimates = GpuEstimate::kHistory;
  const GpuSimResult r = GpuRunWith(w, o);
  EXPECT_EQ(r.backfilled, 1);
  EXPECT_EQ(r.reclaims, 1);
  EXPECT_EQ(r.preemptions, 1);
  EXPECT_EQ(r.start_s[4], 700);
  EXPECT_EQ(r.start_s[5], 400);  // its first start
  EXPECT_EQ(r.makespan_s, 710 + 300 + 800);
  GpuComparison c;
  c.runs.push_back(r);
  std::ostringstream text, json;
  WriteGpuText(text, c);
  EXPECT_NE(text.str().find(" reclaims "), std::string::npos) << text.str();
  WriteGpuJson(json, c);
  EXPECT_NE(json.str().find("\"reclaims\": 1"), std::string::npos) << json.str();
  o.reclaim = false;
  const GpuSimResult kept = GpuRunWith(w, o);
  EXPECT_EQ(kept.reclaims, 0);
  EXPECT_EQ(kept.start_s[4], 1200);
  // The baselines do not reclaim (Slurm would have killed D at its time limit instead).
  o.reclaim = true;
  o.policy = GpuPolicy::kSlurmBlock;
  o.baseline_holds = true;
  EXPECT_EQ(GpuRunWith(w, o).reclaims, 0);
}

TEST(GpuSim, BadOptionsNameTheField) {
  Workload w;
  GpuSimOptions o;
  o.domains = 0;
  auto r = RunGpuSimulation(w, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("domains: 0 must be at least 1"), std::string::npos);
  o.domains = 1;
  o.span_slowdown = 0.5;
  r = RunGpuSimulation(w, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("span_slowdown"), std::string::npos);
  o.span_slowdown = 1;
  o.holds = 65;
  r = RunGpuSimulation(w, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("holds: 65 must be between 0"), std::string::npos);
  o.holds = 1;
  o.default_estimate_s = 0;
  r = RunGpuSimulation(w, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("default_estimate_s: 0 must be at least 1"),
            std::string::npos);
  o.default_estimate_s = 3600;
  o.preempt_exempt_s = -1;
  r = RunGpuSimulation(w, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("preempt_exempt_s: -1 must be >= 0"), std::string::npos);
}

// A job larger than the fleet is counted, not queued forever.
TEST(GpuSim, JobsLargerThanTheFleetAreCounted) {
  Workload w;
  w.jobs = {GpuJob(64, 0, 10), GpuJob(8, 1, 10)};
  const GpuSimResult r = GpuRun(w, GpuSystem::kH100, 4, GpuPolicy::kTessera);
  EXPECT_EQ(r.never_placed, 1);
  EXPECT_EQ(r.overall.jobs, 1);
}

TEST(GpuSim, ReplaysAnItpTrace) {
  std::ifstream in(std::string(TESSERA_TRACES_DIR) + "/microsoft-itp-elasticflow/cluster10.csv");
  if (!in) GTEST_SKIP() << "trace not present";
  auto w = ReadTrace(in, "cluster10.csv");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (GpuPolicy p : {GpuPolicy::kTessera, GpuPolicy::kSlurmBlock, GpuPolicy::kFirstFit}) {
    const GpuSimResult r = GpuRun(*w, GpuSystem::kH100, 4, p);
    EXPECT_EQ(r.overall.jobs + r.never_placed, static_cast<int64_t>(w->jobs.size()));
  }
}

}  // namespace
}  // namespace tessera::sim
