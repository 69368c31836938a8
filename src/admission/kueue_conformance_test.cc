// Scenarios from Kueue's own tests (kubernetes-sigs/kueue: pkg/scheduler/preemption/
// preemption_test.go TestPreemption, preemption_fair_test.go TestFairPreemptions,
// pkg/scheduler/scheduler_test.go TestEntryOrdering), replayed on tessera's admission model.
// Each case names the Kueue test case it comes from; the scenarios were re-expressed, not
// copied: Kueue's CPU units are chips of a v6e fleet of 1x1 slices (one unit, one chip, one
// host), so quota and room coincide the way Kueue's quota-only tests assume, and a workload of
// n units is n slices. Kueue's tests ask the preemptor for targets directly; here a whole
// cycle runs, so the fleet is sized to be full where Kueue's case forces preemption.
// Scenarios that need what tessera lacks (several flavours or resources, hierarchical cohorts,
// partial admission, fractional units) and the ones where tessera differs by design are listed
// in docs/admission.md, "Kueue conformance".
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "admission/admission.h"
#include "admission/settings.h"

// The tables below give only the fields a case needs; the rest keep their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace tessera {
namespace {

constexpr Generation kGen = Generation::kV6e;

struct QueueDef {
  std::string name;
  int64_t nominal = 0;
  std::string cohort;
  std::optional<int64_t> borrowing_limit;
  std::optional<int64_t> lending_limit;
  WithinClusterQueue within = WithinClusterQueue::kNever;
  ReclaimWithinCohort reclaim = ReclaimWithinCohort::kNever;
  BorrowWithinCohortPolicy borrow = BorrowWithinCohortPolicy::kNever;
  std::optional<int32_t> threshold;
};

struct RunningDef {
  std::string name;
  std::string queue;
  int32_t priority = 0;
  int units = 1;
  int64_t admitted_at_ms = 0;
};

struct Incoming {
  std::string queue;
  int32_t priority = 0;
  int units = 1;
  std::optional<int64_t> creation_order;  // unset: after every running workload
};

struct Case {
  std::string kueue_case;  // file and case name in Kueue's tests
  std::vector<QueueDef> queues;
  int fleet_units = 0;
  std::vector<RunningDef> running;
  Incoming incoming;
  FairSharing fair = FairSharing::kDisabled;
  std::set<std::string> want_preempted;  // empty: no preemption, the incoming waits
  // Some of Kueue's cases accept any workload of a queue (all alike): the victims' queues.
  std::vector<std::string> want_victim_queues;
};

ClusterQueueSpec Spec(const QueueDef& d) {
  ClusterQueueSpec q;
  q.name = d.name;
  q.cohort = d.cohort;
  q.quotas = {ResourceQuota{kGen, d.nominal, d.borrowing_limit, d.lending_limit, std::nullopt}};
  q.preemption.within_cluster_queue = d.within;
  q.preemption.reclaim_within_cohort = d.reclaim;
  q.preemption.borrow_within_cohort = {d.borrow, d.threshold};
  return q;
}

constexpr int64_t kNow = 1'000'000;

struct Outcome {
  bool admitted = false;
  std::set<std::string> preempted;
  std::vector<std::string> victim_queues;  // sorted
};

Outcome Replay(const Case& c) {
  Outcome out;
  auto inv = Inventory::MakeFleet({kGen, std::vector<Shape>(c.fleet_units, Shape::Of(1, 1))});
  EXPECT_TRUE(inv.ok()) << inv.status().ToString();
  if (!inv.ok()) return out;
  Snapshot s{*inv, {}, {}, {}, std::nullopt};
  for (const QueueDef& d : c.queues) {
    s.cluster_queues.push_back(Spec(d));
    s.local_queues.push_back({d.name, d.name});
  }
  SlicePlanner planner;
  uint64_t id = 1;
  std::vector<std::string> names = {""}, queue_of = {""};
  for (const RunningDef& r : c.running) {
    Workload w;
    w.id = WorkloadId(id);
    w.name = r.name;
    w.local_queue = r.queue;
    w.priority = r.priority;
    w.request = SliceRequest{kGen, Shape::Of(1, 1), r.units};
    w.creation_order = static_cast<int64_t>(id) * 10;
    w.state = WorkloadState::kRunning;
    w.admitted_at_ms = r.admitted_at_ms;
    PlanResult plan = planner.Plan(s.inventory, w.request);
    EXPECT_TRUE(plan.placed()) << r.name << ": " << plan.message;
    EXPECT_TRUE(ApplyPlan(s.inventory, OwnerOf(w.id), plan).ok());
    s.workloads.push_back(std::move(w));
    names.push_back(r.name);
    queue_of.push_back(r.queue);
    ++id;
  }
  Workload in;
  in.id = WorkloadId(id);
  in.name = "in";
  in.local_queue = c.incoming.queue;
  in.priority = c.incoming.priority;
  in.request = SliceRequest{kGen, Shape::Of(1, 1), c.incoming.units};
  in.creation_order = c.incoming.creation_order.value_or(static_cast<int64_t>(id) * 10);
  s.workloads.push_back(in);

  AdmissionOptions o;
  o.fair_sharing = c.fair;
  o.explain = Explain::kReasons;
  auto cycle = Admitter(o).Run(s, kNow);
  EXPECT_TRUE(cycle.ok()) << cycle.status().ToString();
  if (!cycle.ok()) return out;
  for (const Admission& a : cycle->admissions) out.admitted = out.admitted || a.workload == in.id;
  for (const Eviction& e : cycle->evictions) {
    out.preempted.insert(names.at(e.workload.value()));
    out.victim_queues.push_back(queue_of.at(e.workload.value()));
  }
  std::sort(out.victim_queues.begin(), out.victim_queues.end());
  return out;
}

using W = WithinClusterQueue;
using R = ReclaimWithinCohort;
using B = BorrowWithinCohortPolicy;

// TestPreemption's defaultClusterQueues, the ones these cases use.
const QueueDef kStandalone{"standalone", 6, "", {}, {}, W::kLowerPriority};
const QueueDef kC1{"c1", 6, "cohort", 6, {}, W::kLowerPriority, R::kLowerPriority};
const QueueDef kC2{"c2", 6, "cohort", 6, {}, W::kNever, R::kAny};
const QueueDef kL1{"l1", 6, "legion", 12, {}, W::kLowerPriority, R::kLowerPriority};
const QueueDef kPreventStarvation{"prevent-starvation",         6, "", {}, {},
                                  W::kLowerOrNewerEqualPriority};
const QueueDef kAStandard{"a-standard",      1, "shared-cq", 12, {}, W::kNever, R::kLowerPriority,
                          B::kLowerPriority, 0};
const QueueDef kBStandard{"b-standard",      1,       "shared-cq",       12, {},
                          W::kLowerPriority, R::kAny, B::kLowerPriority, 0};
const QueueDef kABestEffort{"a-best-effort",   1, "shared-cq", 12, {}, W::kNever, R::kLowerPriority,
                            B::kLowerPriority, 0};
const QueueDef kBBestEffort{"b-best-effort",   0, "shared-cq", 13, {}, W::kNever, R::kLowerPriority,
                            B::kLowerPriority, 0};
const QueueDef kShared{"shared", 10, "shared-cq"};
const std::vector<QueueDef> kWithSharedCq = {kAStandard, kBStandard, kABestEffort, kBBestEffort,
                                             kShared};
const QueueDef kLend1{"lend1", 6, "cohort-lend", {}, 4, W::kLowerPriority, R::kLowerPriority};
const QueueDef kLend2{"lend2", 6, "cohort-lend", {}, 2, W::kLowerPriority, R::kLowerPriority};

// TestFairPreemptions' baseCQs: a, b, c (3 each; borrowWithinCohort set, and ignored under
// fair sharing) and preemptible (0).
QueueDef FairQueue(std::string name) {
  return {std::move(name), 3, "all", {}, {}, W::kLowerPriority, R::kAny, B::kLowerPriority, -3};
}
const std::vector<QueueDef> kFairCqs = {FairQueue("a"), FairQueue("b"), FairQueue("c"),
                                        QueueDef{"preemptible", 0, "all"}};

// n running workloads of one unit in `queue`, named prefix1..prefixn.
std::vector<RunningDef> Units(const std::string& queue, const std::string& prefix, int n,
                              int32_t priority = 0) {
  std::vector<RunningDef> out;
  for (int i = 1; i <= n; ++i) out.push_back({prefix + std::to_string(i), queue, priority, 1});
  return out;
}
std::vector<RunningDef> Concat(std::vector<std::vector<RunningDef>> parts) {
  std::vector<RunningDef> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

const std::string kP = "preemption_test.go TestPreemption: ";
const std::string kF = "preemption_fair_test.go TestFairPreemptions: ";

std::vector<Case> Cases() {
  const auto on = FairSharing::kEnabled;
  return {
      {kP + "preempt lowest priority",
       {kStandalone},
       6,
       {{"low", "standalone", -1, 2}, {"mid", "standalone", 0, 2}, {"high", "standalone", 1, 2}},
       {"standalone", 1, 2},
       FairSharing::kDisabled,
       {"low"}},
      {kP + "preempt multiple",
       {kStandalone},
       6,
       {{"low", "standalone", -1, 2}, {"mid", "standalone", 0, 2}, {"high", "standalone", 1, 2}},
       {"standalone", 1, 3},
       FairSharing::kDisabled,
       {"low", "mid"}},
      {kP + "no preemption for low priority",
       {kStandalone},
       6,
       {{"low", "standalone", -1, 3}, {"mid", "standalone", 0, 3}},
       {"standalone", -1, 1}},
      {kP + "not enough low priority workloads",
       {kStandalone},
       6,
       {{"low", "standalone", -1, 3}, {"mid", "standalone", 0, 3}},
       {"standalone", 0, 4}},
      {kP + "some free quota, preempt low priority",
       {kStandalone},
       6,
       {{"low", "standalone", -1, 1}, {"mid", "standalone", 0, 1}, {"high", "standalone", 1, 3}},
       {"standalone", 1, 2},
       FairSharing::kDisabled,
       {"low"}},
      {kP + "minimal set excludes low priority",
       {kStandalone},
       6,
       {{"low", "standalone", -1, 1}, {"mid", "standalone", 0, 2}, {"high", "standalone", 1, 3}},
       {"standalone", 1, 2},
       FairSharing::kDisabled,
       {"mid"}},
      // issue 19, first finding: the borrower's workload goes, not c1's own lower one.
      {kP + "reclaim quota from borrower",
       {kC1, kC2},
       12,
       {{"c1-low", "c1", -1, 3}, {"c2-mid", "c2", 0, 3}, {"c2-high", "c2", 1, 6}},
       {"c1", 1, 3},
       FairSharing::kDisabled,
       {"c2-mid"}},
      // Kueue asks for targets with 8 of 12 units used; here the fleet is those 8 units.
      {kP + "no workloads borrowing",
       {kC1, kC2},
       8,
       {{"c1-high", "c1", 1, 4}, {"c2-low-1", "c2", -1, 4}},
       {"c1", 1, 4}},
      {kP + "not enough workloads borrowing",
       {kC1, kC2},
       12,
       {{"c1-high", "c1", 1, 4}, {"c2-low-1", "c2", -1, 4}, {"c2-low-2", "c2", -1, 4}},
       {"c1", 1, 4}},
      {kP + "preempting locally and borrowing same resource in cohort",
       {kC1, kC2},
       12,
       {{"c1-med", "c1", 0, 4}, {"c1-low", "c1", -1, 4}, {"c2-low-1", "c2", -1, 4}},
       {"c1", 1, 4},
       FairSharing::kDisabled,
       {"c1-low"}},
      {kP + "preempting locally and not borrowing same resource in 1-queue cohort",
       {kL1},
       6,
       {{"l1-med", "l1", 0, 4}, {"l1-low", "l1", -1, 2}},
       {"l1", 1, 4},
       FairSharing::kDisabled,
       {"l1-med"}},
      {kP + "do not reclaim borrowed quota from same priority for "
            "withinCohort=ReclaimFromLowerPriority",
       {kC1, kC2},
       12,
       {{"c1", "c1", 0, 2}, {"c2-1", "c2", 0, 4}, {"c2-2", "c2", 0, 4}},
       {"c1", 0, 4}},
      {kP + "reclaim borrowed quota from same priority for withinCohort=ReclaimFromAny",
       {kC1, kC2},
       12,
       {{"c1-1", "c1", 0, 4}, {"c1-2", "c1", 1, 4}, {"c2", "c2", 0, 2}},
       {"c2", 0, 4},
       FairSharing::kDisabled,
       {"c1-1"}},
      {kP + "preempt from all ClusterQueues in cohort",
       {kC1, kC2},
       12,
       {{"c1-low", "c1", -1, 3},
        {"c1-mid", "c1", 0, 2},
        {"c2-low", "c2", -1, 3},
        {"c2-mid", "c2", 0, 4}},
       {"c1", 0, 4},
       FairSharing::kDisabled,
       {"c1-low", "c2-low"}},
      {kP + "can't preempt workloads in ClusterQueue for withinClusterQueue=Never",
       {kC1, kC2},
       6,
       {{"c2-low", "c2", -1, 3}},
       {"c2", 1, 4}},
      {kP + "preempt newer workloads with the same priority",
       {kPreventStarvation},
       6,
       {{"wl1", "prevent-starvation", 2, 2, 0},
        {"wl2", "prevent-starvation", 1, 2, 1000},
        {"wl3", "prevent-starvation", 1, 2, 0}},
       {"prevent-starvation", 1, 2, /*creation_order=*/0},
       FairSharing::kDisabled,
       {"wl2"}},
      {kP + "use BorrowWithinCohort; allow preempting a lower-priority workload from another "
            "ClusterQueue while borrowing",
       kWithSharedCq,
       13,
       {{"a-best-effort-low", "a-best-effort", -1, 10},
        {"b-best-effort-low", "b-best-effort", -1, 1}},
       {"a-standard", 0, 10},
       FairSharing::kDisabled,
       {"a-best-effort-low"}},
      {kP + "use BorrowWithinCohort; don't allow preempting a lower-priority workload with "
            "priority above MaxPriorityThreshold, if borrowing is required even after the "
            "preemption",
       kWithSharedCq,
       13,
       {{"b-standard", "b-standard", 1, 10}},
       {"a-standard", 2, 10}},
      {kP + "use BorrowWithinCohort; allow preempting a lower-priority workload with priority "
            "above MaxPriorityThreshold, if borrowing is not required after the preemption",
       kWithSharedCq,
       13,
       {{"b-standard", "b-standard", 1, 13}},
       {"a-standard", 2, 1},
       FairSharing::kDisabled,
       {"b-standard"}},
      {kP + "use BorrowWithinCohort; don't allow for preemption of lower-priority workload from "
            "the same ClusterQueue",
       kWithSharedCq,
       13,
       {{"a-standard", "a-standard", 1, 13}},
       {"a-standard", 2, 1}},
      {kP + "use BorrowWithinCohort; only preempt from CQ if no workloads below threshold and "
            "already above nominal",
       kWithSharedCq,
       13,
       {{"a-standard-1", "a-standard", 1, 10},
        {"a-standard-2", "a-standard", 1, 1},
        {"b-standard-1", "b-standard", 1, 1},
        {"b-standard-2", "b-standard", 2, 1}},
       {"b-standard", 3, 1},
       FairSharing::kDisabled,
       {"b-standard-1"}},
      {kP + "use BorrowWithinCohort; preempt from CQ and from other CQs with workloads below "
            "threshold",
       kWithSharedCq,
       13,
       {{"b-standard-high", "b-standard", 2, 10},
        {"b-standard-mid", "b-standard", 1, 1},
        {"a-best-effort-low", "a-best-effort", -1, 1},
        {"a-best-effort-lower", "a-best-effort", -2, 1}},
       {"b-standard", 2, 2},
       FairSharing::kDisabled,
       {"b-standard-mid", "a-best-effort-lower"}},
      {kP + "reclaim quota from lender",
       {kLend1, kLend2},
       12,
       {{"lend1-low", "lend1", -1, 3}, {"lend2-mid", "lend2", 0, 3}, {"lend2-high", "lend2", 1, 4}},
       {"lend1", 1, 3},
       FairSharing::kDisabled,
       {"lend2-mid"}},

      // Fair sharing on.
      {kF + "reclaim nominal from user using the most",
       kFairCqs,
       9,
       Concat({Units("a", "a", 3), Units("b", "b", 5), Units("c", "c", 1)}),
       {"c", 0, 1},
       on,
       {},
       {"b"}},
      {kF + "can't preempt when everyone under nominal",
       kFairCqs,
       9,
       Concat({Units("a", "a", 3), Units("b", "b", 3), Units("c", "c", 3)}),
       {"c", 0, 1},
       on},
      {kF + "can't preempt when it would switch the imbalance",
       kFairCqs,
       9,
       Concat({Units("a", "a", 3), Units("b", "b", 5)}),
       {"a", 0, 2},
       on},
      {kF + "can preempt lower priority workloads from same CQ",
       kFairCqs,
       9,
       Concat({Units("a", "a-low", 2, -1), Units("a", "a", 2), Units("b", "b", 5)}),
       {"a", 0, 2},
       on,
       {"a-low1", "a-low2"}},
      {kF + "preempt huge workload if there is no other option, as long as the target CQ gets a "
            "lower share",
       kFairCqs,
       9,
       {{"b1", "b", 0, 9}},
       {"a", 0, 2},
       on,
       {"b1"}},
      {kF + "can't preempt huge workload if the incoming is also huge",
       kFairCqs,
       9,
       {{"a1", "a", 0, 2}, {"b1", "b", 0, 7}},
       {"a", 0, 5},
       on},
      {kF + "can't preempt 2 smaller workloads if the incoming is huge",
       kFairCqs,
       9,
       {{"b1", "b", 0, 2}, {"b2", "b", 0, 2}, {"b3", "b", 0, 3}},
       {"a", 0, 6},
       on},
  };
}

TEST(KueueConformance, PreemptionScenarios) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.kueue_case);
    const Outcome got = Replay(c);
    const bool want_preemption = !c.want_preempted.empty() || !c.want_victim_queues.empty();
    EXPECT_EQ(got.admitted, want_preemption);
    if (!c.want_victim_queues.empty()) {
      EXPECT_EQ(got.victim_queues, c.want_victim_queues);
    } else {
      EXPECT_EQ(got.preempted, c.want_preempted);
    }
  }
}

// Kueue cases where tessera answers differently by design (docs/admission.md, the table "Kueue
// does / tessera does / why"): the outcome asserted is tessera's, the comment says Kueue's.
TEST(KueueConformance, DocumentedDifferences) {
  // Kueue preempts a1_low and b1 under rule S2-b (a's share after admission, 2/9, is below b's
  // share before, 3/9). tessera's strict rule compares with b's share after the eviction (b is
  // then within nominal, share 0) and refuses: that is what rules out preempting back and
  // forth. a's own low-priority workloads alone cannot make room for 4 units.
  Case strict{
      kF + "preempt from target and others even if over nominal",
      kFairCqs,
      9,
      {{"a1-low", "a", -1, 2}, {"a2-low", "a", -1, 1}, {"b1", "b", 0, 3}, {"b2", "b", 0, 3}},
      {"a", 0, 4},
      FairSharing::kEnabled};
  const Outcome s = Replay(strict);
  EXPECT_FALSE(s.admitted);
  EXPECT_TRUE(s.preempted.empty());
  // Kueue preempts a_low and b1 (one each). tessera's N-slice search is greedy by room and
  // ranks b (the highest share) first, so it tries two of b's workloads, which the share rule
  // refuses, and its retries (without one victim at a time) keep finding b's: it finds none.
  Case greedy{kF + "can preempt a combination of same CQ and highest user",
              kFairCqs,
              9,
              Concat({{{"a-low", "a", -1, 1}}, Units("a", "a", 2), Units("b", "b", 6)}),
              {"a", 0, 2},
              FairSharing::kEnabled};
  const Outcome g = Replay(greedy);
  EXPECT_FALSE(g.admitted);
  EXPECT_TRUE(g.preempted.empty());
}

// issue 19, third finding: with fair sharing, a queue within its nominal quota reclaims from
// the queue with the highest share (Kueue: the fair-sharing candidate order), even when a
// workload of another borrowing queue would lose less work.
TEST(KueueConformance, FairReclaimTakesFromTheHighestShare) {
  Case c{kF + "reclaim nominal from user using the most (a borrows too, its workload is newer)",
         kFairCqs,
         9,
         Concat({Units("a", "a", 3),
                 {{"a4", "a", 0, 1, /*admitted_at_ms=*/kNow - 1}},
                 Units("b", "b", 5)}),
         {"c", 0, 1},
         FairSharing::kEnabled};
  c.want_victim_queues = {"b"};
  const Outcome got = Replay(c);
  EXPECT_TRUE(got.admitted);
  EXPECT_EQ(got.victim_queues, c.want_victim_queues);
  // Without fair sharing, Kueue's classical order (other queues, then priority, then the most
  // recently admitted) picks a4, the one that lost the least.
  c.fair = FairSharing::kDisabled;
  const Outcome classic = Replay(c);
  EXPECT_EQ(classic.preempted, std::set<std::string>{"a4"});
}

// issue 19, second finding: with fair sharing off (the default), borrowWithinCohort and its
// maxPriorityThreshold decide; with it on they are ignored and the share rule decides.
TEST(KueueConformance, BorrowWithinCohortOnlyWithoutFairSharing) {
  // a-standard borrows to place 10 units; the only candidate is at the threshold (0).
  Case c{kP + "use BorrowWithinCohort (threshold 0, victim at 0)",
         kWithSharedCq,
         13,
         {{"a-best-effort-zero", "a-best-effort", 0, 10}},
         {"a-standard", 1, 10}};
  const Outcome off = Replay(c);
  EXPECT_TRUE(off.admitted);
  EXPECT_EQ(off.preempted, std::set<std::string>{"a-best-effort-zero"});
  // Fair sharing: a-standard after admission borrows 9 of 13, a-best-effort after the eviction
  // none: the share rule refuses, whatever borrowWithinCohort says.
  c.fair = FairSharing::kEnabled;
  const Outcome on = Replay(c);
  EXPECT_FALSE(on.admitted);
  EXPECT_TRUE(on.preempted.empty());
}

// scheduler_test.go TestEntryOrdering: a head that fits within its queue's nominal quota goes
// before one that must borrow, even an older one; then priority, then age.
TEST(KueueConformance, WithinNominalHeadsBeforeBorrowingOnes) {
  for (FairSharing fair : {FairSharing::kDisabled, FairSharing::kEnabled}) {
    SCOPED_TRACE(fair == FairSharing::kEnabled ? "fair sharing" : "classical");
    auto inv = Inventory::MakeFleet({kGen, std::vector<Shape>(4, Shape::Of(1, 1))});
    ASSERT_TRUE(inv.ok());
    Snapshot s{*inv, {}, {}, {}, std::nullopt};
    for (const char* name : {"borrower", "owner"}) {
      s.cluster_queues.push_back(Spec(QueueDef{name, 2, "co"}));
      s.local_queues.push_back({name, name});
    }
    // borrower already uses its 2 units; its older head would borrow the last 2 of owner's.
    for (uint64_t i = 1; i <= 2; ++i) {
      Workload w;
      w.id = WorkloadId(i);
      w.name = "running-" + std::to_string(i);
      w.local_queue = "borrower";
      w.request = SliceRequest{kGen, Shape::Of(1, 1), 1};
      w.creation_order = static_cast<int64_t>(i);
      w.state = WorkloadState::kRunning;
      PlanResult plan = SlicePlanner().Plan(s.inventory, w.request);
      ASSERT_TRUE(plan.placed());
      ASSERT_TRUE(ApplyPlan(s.inventory, OwnerOf(w.id), plan).ok());
      s.workloads.push_back(w);
    }
    auto pending = [&](uint64_t id, const char* queue, int32_t priority) {
      Workload w;
      w.id = WorkloadId(id);
      w.name = "pending-" + std::to_string(id);
      w.local_queue = queue;
      w.priority = priority;
      w.request = SliceRequest{kGen, Shape::Of(1, 1), 2};
      w.creation_order = static_cast<int64_t>(id);
      s.workloads.push_back(w);
    };
    pending(10, "borrower", 5);  // older and higher priority, but must borrow
    pending(20, "owner", 0);     // within owner's nominal quota
    AdmissionOptions o;
    o.fair_sharing = fair;
    auto c = Admitter(o).Run(s, kNow);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_EQ(c->admissions.size(), 1u);
    EXPECT_EQ(c->admissions[0].workload, WorkloadId(20));
  }
}

// Settings that cannot take effect: refused (Validate) or warned about (IneffectiveSettings).
TEST(KueueConformance, SettingsThatCannotTakeEffect) {
  ClusterQueueSpec lend = Spec(QueueDef{"q", 4, "co", {}, 6});
  const Status refused = Validate(lend);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("lendingLimit"), std::string::npos) << refused.message();

  ClusterQueueSpec a = Spec(kAStandard);  // borrowWithinCohort set
  ClusterQueueSpec b = Spec(kShared);
  auto fields = [](const std::vector<SettingWarning>& ws) {
    std::vector<std::string> out;
    for (const SettingWarning& w : ws) {
      EXPECT_FALSE(w.message.empty());
      out.push_back(w.field);
    }
    return out;
  };
  EXPECT_TRUE(IneffectiveSettings(a, {a, b}, FairSharing::kDisabled).empty());
  EXPECT_EQ(fields(IneffectiveSettings(a, {a, b}, FairSharing::kEnabled)),
            std::vector<std::string>{"spec.preemption.borrowWithinCohort"});
  // A cohort of one: nothing to borrow or lend.
  EXPECT_EQ(fields(IneffectiveSettings(a, {a}, FairSharing::kDisabled)),
            std::vector<std::string>{"spec.cohort"});
  ClusterQueueSpec alone = Spec(kStandalone);
  alone.preemption.reclaim_within_cohort = ReclaimWithinCohort::kAny;
  alone.fair_sharing_weight = 2;
  EXPECT_EQ(
      fields(IneffectiveSettings(alone, {alone}, FairSharing::kDisabled)),
      (std::vector<std::string>{"spec.preemption.reclaimWithinCohort", "spec.fairSharing.weight"}));
  EXPECT_EQ(fields(IneffectiveSettings(alone, {alone}, FairSharing::kEnabled)),
            std::vector<std::string>{"spec.preemption.reclaimWithinCohort"});
}

}  // namespace
}  // namespace tessera
