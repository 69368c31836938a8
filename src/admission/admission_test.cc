#include "admission/admission.h"

#include <gtest/gtest.h>

#include "admission/test_util.h"

namespace tessera {
namespace {

using testing::AddRunning;
using testing::Admitted;
using testing::CubeHosts;
using testing::FindPending;
using testing::Job;
using testing::MakeSnapshot;
using testing::Pod;
using testing::Queue;

const Shape k222 = Shape::Of(2, 2, 2);
const Shape k444 = Shape::Of(4, 4, 4);

AdmissionCycle RunCycle(const Snapshot& s, AdmissionOptions o = {}, int64_t now_ms = 1'000'000) {
  Admitter admitter(o);
  auto r = admitter.Run(s, now_ms);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

const ClusterQueueUsage& UsageOf(const AdmissionCycle& c, const std::string& name) {
  for (const auto& u : c.usage)
    if (u.name == name) return u;
  ADD_FAILURE() << "no usage for " << name;
  return c.usage.front();
}

TEST(Admission, AdmitsManyFromEveryQueueInOneCycle) {
  Snapshot s = MakeSnapshot(Pod(1, 2), {Queue("a", 64), Queue("b", 64)});
  for (int i = 1; i <= 8; ++i) s.workloads.push_back(Job(i, "a", k222));
  for (int i = 11; i <= 18; ++i) s.workloads.push_back(Job(i, "b", k222));
  AdmissionCycle c = RunCycle(s);
  EXPECT_EQ(c.admissions.size(), 16u);
  EXPECT_TRUE(c.pending.empty());
  EXPECT_EQ(c.inventory.usable_chips(), 0);
  EXPECT_EQ(UsageOf(c, "a").used_chips, 64);
  EXPECT_EQ(UsageOf(c, "a").admitted_workloads, 8);
}

// A cube with 8 of its hosts taken: a 4x4x4 cannot go, a 2x2x2 can.
Snapshot HalfFullCube(QueueingStrategy strategy) {
  ClusterQueueSpec q = Queue("a", 256);
  q.queueing_strategy = strategy;
  Snapshot s = MakeSnapshot(Pod(1, 1), {q, Queue("other", 64)});
  AddRunning(s, Job(100, "other", Shape::Of(2, 4, 4)), CubeHosts(s.inventory, 0, 0, 8));
  s.workloads.push_back(Job(1, "a", k444, 5));
  s.workloads.push_back(Job(2, "a", k222, 1));
  s.workloads.push_back(Job(3, "a", k222, 1));
  return s;
}

TEST(Admission, StrictFifoBlocksBehindAHeadThatDoesNotFit) {
  AdmissionCycle c = RunCycle(HalfFullCube(QueueingStrategy::kStrictFIFO));
  EXPECT_TRUE(c.admissions.empty());
  const PendingStatus* head = FindPending(c, 1);
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->reason, PendingReason::kNoFreeBox);
  EXPECT_EQ(head->position, 1);
  EXPECT_FALSE(head->largest_free.empty());
  ASSERT_EQ(head->would_help.size(), 1u);
  EXPECT_EQ(head->would_help[0].workload, WorkloadId(100));
  EXPECT_FALSE(head->would_help[0].preemptible);
  const PendingStatus* third = FindPending(c, 3);
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(third->reason, PendingReason::kWaitingBehind);
  EXPECT_EQ(third->waiting_behind, 2);
  EXPECT_NE(third->message.view().find("job-1"), std::string::npos);
}

// A cycle at another explain level than the options' (the head's cycles between those that find
// what would help): the same decisions and reasons, no would-help list, and it says so.
TEST(Admission, RunAtReasonsOnlyGivesTheSameReasonsWithoutWhatHelps) {
  const Snapshot s = HalfFullCube(QueueingStrategy::kStrictFIFO);
  const AdmissionCycle full = RunCycle(s);
  EXPECT_EQ(full.explained, Explain::kReasonsAndWhatHelps);
  auto reasons = Admitter().Run(s, 1'000'000, Explain::kReasons);
  ASSERT_TRUE(reasons.ok()) << reasons.status().ToString();
  EXPECT_EQ(reasons->explained, Explain::kReasons);
  EXPECT_EQ(reasons->admissions.size(), full.admissions.size());
  ASSERT_EQ(reasons->pending.size(), full.pending.size());
  for (size_t i = 0; i < full.pending.size(); ++i) {
    EXPECT_EQ(reasons->pending[i].workload, full.pending[i].workload);
    EXPECT_EQ(reasons->pending[i].reason, full.pending[i].reason);
    EXPECT_EQ(reasons->pending[i].message, full.pending[i].message);
    EXPECT_TRUE(reasons->pending[i].would_help.empty());
  }
  EXPECT_FALSE(FindPending(full, 1)->would_help.empty());
}

TEST(Admission, BestEffortFifoLetsOthersPass) {
  AdmissionCycle c = RunCycle(HalfFullCube(QueueingStrategy::kBestEffortFIFO));
  EXPECT_TRUE(Admitted(c, 2));
  EXPECT_TRUE(Admitted(c, 3));
  EXPECT_EQ(FindPending(c, 1)->reason, PendingReason::kNoFreeBox);
}

TEST(Admission, BorrowsFromTheCohortWithinItsBorrowingLimit) {
  Snapshot s = MakeSnapshot(Pod(1, 2), {Queue("a", 32, "co"), Queue("b", 96, "co")});
  s.workloads.push_back(Job(1, "a", k444));
  AdmissionCycle c = RunCycle(s);
  ASSERT_TRUE(Admitted(c, 1));
  EXPECT_EQ(c.admissions[0].borrowed_chips, 32);
  EXPECT_EQ(UsageOf(c, "a").borrowed_chips, 32);

  s.cluster_queues[0].quotas[0].borrowing_limit_chips = 16;
  c = RunCycle(s);
  EXPECT_FALSE(Admitted(c, 1));
  const PendingStatus* p = FindPending(c, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->reason, PendingReason::kOverQuota);
  EXPECT_EQ(p->over_quota_chips, 16);
}

TEST(Admission, LendingLimitKeepsPartOfTheLendersQuota) {
  Snapshot s = MakeSnapshot(Pod(1, 2), {Queue("a", 32, "co"), Queue("b", 96, "co")});
  s.cluster_queues[1].quotas[0].lending_limit_chips = 16;
  s.workloads.push_back(Job(1, "a", k444));
  AdmissionCycle c = RunCycle(s);
  EXPECT_FALSE(Admitted(c, 1));
  EXPECT_EQ(FindPending(c, 1)->over_quota_chips, 16);
  s.cluster_queues[1].quotas[0].lending_limit_chips = 32;
  EXPECT_TRUE(Admitted(RunCycle(s), 1));
}

TEST(Admission, NoCohortMeansNominalIsTheLimit) {
  Snapshot s = MakeSnapshot(Pod(1, 2), {Queue("a", 32)});
  s.workloads.push_back(Job(1, "a", k444));
  AdmissionCycle c = RunCycle(s);
  EXPECT_EQ(FindPending(c, 1)->reason, PendingReason::kOverQuota);
  EXPECT_NE(FindPending(c, 1)->message.view().find("never"), std::string::npos);
}

// One cube, fully used by a running 4x4x4 of queue "a"; a 4x4x4 arrives in "a".
Snapshot WithinQueue(WithinClusterQueue policy, int32_t running_prio, int32_t new_prio,
                     int64_t new_creation) {
  ClusterQueueSpec q = Queue("a", 128);
  q.preemption.within_cluster_queue = policy;
  Snapshot s = MakeSnapshot(Pod(1, 1), {q});
  Workload r = Job(10, "a", k444, running_prio);
  r.creation_order = 10;
  AddRunning(s, r);
  Workload w = Job(1, "a", k444, new_prio);
  w.creation_order = new_creation;
  s.workloads.push_back(w);
  return s;
}

TEST(Admission, WithinClusterQueuePolicies) {
  using P = WithinClusterQueue;
  EXPECT_FALSE(Admitted(RunCycle(WithinQueue(P::kNever, 1, 5, 1)), 1));
  EXPECT_TRUE(Admitted(RunCycle(WithinQueue(P::kLowerPriority, 1, 5, 1)), 1));
  EXPECT_FALSE(Admitted(RunCycle(WithinQueue(P::kLowerPriority, 5, 5, 1)), 1));
  EXPECT_TRUE(Admitted(RunCycle(WithinQueue(P::kLowerOrNewerEqualPriority, 5, 5, 1)), 1));
  EXPECT_FALSE(Admitted(RunCycle(WithinQueue(P::kLowerOrNewerEqualPriority, 5, 5, 20)), 1));

  AdmissionCycle c = RunCycle(WithinQueue(P::kLowerPriority, 1, 5, 1));
  ASSERT_EQ(c.preemptions.size(), 1u);
  EXPECT_EQ(c.preemptions[0].kind, PreemptionKind::kWithinClusterQueue);
  EXPECT_EQ(c.preemptions[0].victims, std::vector<WorkloadId>{WorkloadId(10)});
  EXPECT_EQ(c.preemptions[0].grace_ms, AdmissionOptions{}.preemption_grace_ms);
  ASSERT_EQ(c.admissions.size(), 1u);
  EXPECT_EQ(c.admissions[0].waits_for, std::vector<WorkloadId>{WorkloadId(10)});
  ASSERT_EQ(c.evictions.size(), 1u);
  EXPECT_EQ(c.evictions[0].cause, EvictionCause::kPreempted);
  EXPECT_EQ(c.evictions[0].preemptor, WorkloadId(1));
  EXPECT_EQ(UsageOf(c, "a").used_chips, 64);
}

// Cohort of a and b (64 each) on two cubes; b runs both cubes, borrowing 64 of a's quota.
Snapshot Reclaim(ReclaimWithinCohort policy, int32_t b_prio) {
  ClusterQueueSpec a = Queue("a", 64, "co");
  a.preemption.reclaim_within_cohort = policy;
  Snapshot s = MakeSnapshot(Pod(1, 2), {a, Queue("b", 64, "co")});
  AddRunning(s, Job(10, "b", k444, b_prio));
  AddRunning(s, Job(11, "b", k444, b_prio));
  s.workloads.push_back(Job(1, "a", k444, 3));
  return s;
}

TEST(Admission, ReclaimWithinCohortPolicies) {
  using P = ReclaimWithinCohort;
  AdmissionCycle never = RunCycle(Reclaim(P::kNever, 1));
  EXPECT_FALSE(Admitted(never, 1));
  const PendingStatus* p = FindPending(never, 1);
  EXPECT_EQ(p->reason, PendingReason::kOverQuota);
  EXPECT_EQ(p->over_quota_chips, 64);
  ASSERT_EQ(p->would_help.size(), 1u);
  EXPECT_FALSE(p->would_help[0].preemptible);

  EXPECT_TRUE(Admitted(RunCycle(Reclaim(P::kLowerPriority, 1)), 1));
  EXPECT_FALSE(Admitted(RunCycle(Reclaim(P::kLowerPriority, 5)), 1));
  AdmissionCycle any = RunCycle(Reclaim(P::kAny, 5));
  ASSERT_TRUE(Admitted(any, 1));
  ASSERT_EQ(any.preemptions.size(), 1u);
  EXPECT_EQ(any.preemptions[0].kind, PreemptionKind::kReclaimWithinCohort);
  EXPECT_EQ(any.preemptions[0].victims.size(), 1u);
}

// Cohort a, b, c (64 each) on three cubes: a runs one cube, b two (borrowing 64); a wants a
// second cube, which means borrowing.
Snapshot BorrowWithin(BorrowWithinCohortPolicy policy, std::optional<int32_t> threshold) {
  ClusterQueueSpec a = Queue("a", 64, "co");
  a.preemption.borrow_within_cohort = {policy, threshold};
  Snapshot s = MakeSnapshot(Pod(1, 3), {a, Queue("b", 64, "co"), Queue("c", 64, "co")});
  AddRunning(s, Job(10, "a", k444, 0));
  AddRunning(s, Job(20, "b", k444, 1));
  AddRunning(s, Job(21, "b", k444, 1));
  s.workloads.push_back(Job(1, "a", k444, 5));
  return s;
}

TEST(Admission, BorrowWithinCohortPolicies) {
  AdmissionOptions classic;
  classic.fair_sharing = FairSharing::kDisabled;
  using P = BorrowWithinCohortPolicy;
  EXPECT_FALSE(Admitted(RunCycle(BorrowWithin(P::kNever, std::nullopt), classic), 1));
  AdmissionCycle c = RunCycle(BorrowWithin(P::kLowerPriority, std::nullopt), classic);
  ASSERT_TRUE(Admitted(c, 1));
  EXPECT_EQ(c.preemptions.at(0).kind, PreemptionKind::kBorrowWithinCohort);
  EXPECT_EQ(c.preemptions.at(0).victims.size(), 1u);
  EXPECT_FALSE(Admitted(RunCycle(BorrowWithin(P::kLowerPriority, 0), classic), 1));
  EXPECT_TRUE(Admitted(RunCycle(BorrowWithin(P::kLowerPriority, 1), classic), 1));
}

// Cohort a (64), b (64), c (cubes-2 x 64) on `cubes` cubes; a runs one cube, b runs the rest
// and borrows; a wants one more cube (so it would borrow 64).
Snapshot FairShare(int cubes) {
  ClusterQueueSpec a = Queue("a", 64, "co");
  a.preemption.reclaim_within_cohort = ReclaimWithinCohort::kAny;
  ClusterQueueSpec b = Queue("b", 64, "co");
  b.preemption.reclaim_within_cohort = ReclaimWithinCohort::kAny;
  Snapshot s = MakeSnapshot(Pod(1, cubes), {a, b, Queue("c", 64 * (cubes - 2), "co")});
  AddRunning(s, Job(10, "a", k444));
  for (int i = 0; i < cubes - 1; ++i) AddRunning(s, Job(20 + i, "b", k444));
  s.workloads.push_back(Job(1, "a", k444));
  return s;
}

// Applies a cycle's decisions the way the controller would, immediately.
void Apply(Snapshot& s, const AdmissionCycle& c, int64_t now_ms) {
  s.inventory = c.inventory;
  for (Workload& w : s.workloads) {
    for (const auto& a : c.admissions)
      if (a.workload == w.id) {
        w.state = WorkloadState::kRunning;
        w.admitted_at_ms = now_ms;
      }
    for (const auto& e : c.evictions)
      if (e.workload == w.id) {
        w.state = e.deactivated ? WorkloadState::kDeactivated : WorkloadState::kPending;
        w.start_guard = e.start_guard;
      }
  }
}

TEST(Admission, FairSharePreemptsOnlyWhenStrictlyLessServedAndNeverBack) {
  // 5 cubes: a after admission borrows 64/320 = 0.2; b after losing a cube borrows 128/320 =
  // 0.4: a may preempt.
  AdmissionOptions fair;
  fair.fair_sharing = FairSharing::kEnabled;
  Snapshot s = FairShare(5);
  AdmissionCycle c = RunCycle(s, fair);
  ASSERT_TRUE(Admitted(c, 1));
  ASSERT_EQ(c.preemptions.size(), 1u);
  EXPECT_EQ(c.preemptions[0].kind, PreemptionKind::kBorrowWithinCohort);
  // The victim, requeued, must not take its cube back, now or later.
  Apply(s, c, 1'000'000);
  for (int cycle = 0; cycle < 3; ++cycle) {
    AdmissionCycle next = RunCycle(s, fair, 2'000'000 + cycle);
    EXPECT_TRUE(next.preemptions.empty());
    Apply(s, next, 2'000'000 + cycle);
  }
  // 4 cubes: a after = 64/256 = 0.25, b after = 64/256 = 0.25: equal, so no preemption.
  AdmissionCycle equal = RunCycle(FairShare(4), fair);
  EXPECT_FALSE(Admitted(equal, 1));
  EXPECT_TRUE(equal.preemptions.empty());
}

TEST(Admission, FairShareOrdersTheLeastServedQueueFirst) {
  // Cohort a, b (64 each), c (128, idle); four cubes. a runs two (borrowing 64), b one. Both
  // want the last free cube; a's workload has the higher priority and is older.
  auto make = [] {
    Snapshot s = MakeSnapshot(Pod(1, 4),
                              {Queue("a", 64, "co"), Queue("b", 64, "co"), Queue("c", 128, "co")});
    AddRunning(s, Job(10, "a", k444));
    AddRunning(s, Job(11, "a", k444));
    AddRunning(s, Job(20, "b", k444));
    s.workloads.push_back(Job(1, "a", k444, 9));
    s.workloads.push_back(Job(2, "b", k444, 0));
    return s;
  };
  AdmissionOptions fair_on;
  fair_on.fair_sharing = FairSharing::kEnabled;
  AdmissionCycle fair = RunCycle(make(), fair_on);
  EXPECT_TRUE(Admitted(fair, 2));
  EXPECT_FALSE(Admitted(fair, 1));
  AdmissionOptions classic;
  classic.fair_sharing = FairSharing::kDisabled;
  AdmissionCycle by_priority = RunCycle(make(), classic);
  EXPECT_TRUE(Admitted(by_priority, 1));
  EXPECT_FALSE(Admitted(by_priority, 2));
}

TEST(Admission, StartGuardEvictsWithExponentialBackoffThenDeactivates) {
  AdmissionOptions o;
  o.start_guard.retry_limit = 3;
  Admitter admitter(o);
  EXPECT_EQ(admitter.BackoffMs(1), 60'000);
  EXPECT_EQ(admitter.BackoffMs(2), 120'000);
  EXPECT_EQ(admitter.BackoffMs(6), 1'920'000);
  EXPECT_EQ(admitter.BackoffMs(7), 3'600'000);
  EXPECT_EQ(admitter.BackoffMs(40), 3'600'000);

  Snapshot s = MakeSnapshot(Pod(1, 1), {Queue("a", 64)});
  AddRunning(s, Job(1, "a", k444), {}, WorkloadState::kAdmitted);
  int64_t now = 0;
  s.workloads[0].admitted_at_ms = now;
  for (int attempt = 1; attempt <= 4; ++attempt) {
    now += o.start_guard.start_timeout_ms - 1;
    AdmissionCycle early = *admitter.Run(s, now);
    EXPECT_TRUE(early.evictions.empty()) << "attempt " << attempt;
    now += 1;
    AdmissionCycle c = *admitter.Run(s, now);
    ASSERT_EQ(c.evictions.size(), 1u);
    const Eviction& e = c.evictions[0];
    EXPECT_EQ(e.cause, EvictionCause::kStartTimeout);
    EXPECT_EQ(e.start_guard.retries, attempt);
    EXPECT_FALSE(e.start_guard.last_eviction.empty());
    const PendingStatus* p = FindPending(c, 1);
    ASSERT_NE(p, nullptr);
    if (attempt <= 3) {
      EXPECT_FALSE(e.deactivated);
      EXPECT_EQ(e.start_guard.backoff_until_ms, now + admitter.BackoffMs(attempt));
      EXPECT_EQ(p->reason, PendingReason::kBackoff);
      EXPECT_EQ(p->backoff_until_ms, e.start_guard.backoff_until_ms);
    } else {
      EXPECT_TRUE(e.deactivated);
      EXPECT_EQ(p->reason, PendingReason::kDeactivated);
    }
    Apply(s, c, now);
    if (e.deactivated) break;
    // Not before the backoff ends; then admitted again.
    AdmissionCycle waiting = *admitter.Run(s, e.start_guard.backoff_until_ms - 1);
    EXPECT_TRUE(waiting.admissions.empty());
    now = e.start_guard.backoff_until_ms;
    AdmissionCycle again = *admitter.Run(s, now);
    ASSERT_TRUE(Admitted(again, 1));
    Apply(s, again, now);
    s.workloads[0].state = WorkloadState::kAdmitted;  // and again its workers do not start
  }
  EXPECT_EQ(s.workloads[0].state, WorkloadState::kDeactivated);
  AdmissionCycle after = *admitter.Run(s, now + 10'000'000);
  EXPECT_TRUE(after.admissions.empty());
  EXPECT_EQ(FindPending(after, 1)->reason, PendingReason::kDeactivated);
}

TEST(Admission, RunningWorkloadsAreNotSubjectToTheStartGuard) {
  Snapshot s = MakeSnapshot(Pod(1, 1), {Queue("a", 64)});
  AddRunning(s, Job(1, "a", k444));
  EXPECT_TRUE(RunCycle(s, {}, int64_t{1} << 40).evictions.empty());
}

TEST(Admission, ReasonsForWorkloadsThatCannotRun) {
  Snapshot s = MakeSnapshot(Pod(1, 2), {Queue("a", 1024)});
  s.workloads.push_back(Job(1, "a", Shape::Of(8, 8, 8)));  // 8 cubes; the block has 2
  s.workloads.push_back(Job(2, "nowhere", k222));
  Workload other_gen = Job(3, "a", Shape::Of(4, 4));
  other_gen.request.generation = Generation::kV6e;
  s.workloads.push_back(other_gen);
  AdmissionCycle c = RunCycle(s);
  EXPECT_EQ(FindPending(c, 1)->reason, PendingReason::kNeverFits);
  EXPECT_EQ(FindPending(c, 2)->reason, PendingReason::kLocalQueueNotFound);
  EXPECT_EQ(FindPending(c, 2)->cluster_queue, "");
  EXPECT_EQ(FindPending(c, 3)->reason, PendingReason::kInvalidRequest);
  for (const auto& p : c.pending) EXPECT_FALSE(p.message.empty());
  // The message names the fix and the LocalQueues that exist.
  EXPECT_EQ(FindPending(c, 2)->message,
            "LocalQueue nowhere does not exist; set metadata.queue: NAME to one of the "
            "LocalQueues a (ClusterQueue a) (delete the workload and apply it again), or apply a "
            "LocalQueue named nowhere");
}

TEST(Admission, AWorkloadWithoutAQueueSaysItWaitsForTheDefaultOneAndHowToFixIt) {
  Snapshot s = MakeSnapshot(Pod(1, 2), {Queue("research", 1024)});
  s.local_queues = {{"team-a", "research"}, {"team-b", "research"}};
  s.workloads.push_back(Job(1, kDefaultLocalQueue, k222));  // what a job without a queue gets
  AdmissionCycle c = RunCycle(s);
  ASSERT_NE(FindPending(c, 1), nullptr);
  EXPECT_EQ(FindPending(c, 1)->reason, PendingReason::kLocalQueueNotFound);
  const std::string m = FindPending(c, 1)->message.str();
  EXPECT_NE(m.find("LocalQueue default does not exist (a workload without metadata.queue"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("set metadata.queue: NAME"), std::string::npos) << m;
  EXPECT_NE(m.find("team-a (ClusterQueue research), team-b (ClusterQueue research)"),
            std::string::npos)
      << m;
  // No LocalQueue at all: the message says to apply one.
  s.local_queues.clear();
  c = RunCycle(s);
  EXPECT_NE(FindPending(c, 1)->message.view().find("no LocalQueue exists: apply one"),
            std::string::npos)
      << FindPending(c, 1)->message;
}

TEST(Admission, UsageReport) {
  Snapshot s = MakeSnapshot(Pod(1, 2), {Queue("a", 32, "co"), Queue("b", 96, "co")});
  AddRunning(s, Job(10, "b", k222));
  s.workloads.push_back(Job(1, "a", k444));
  s.workloads.push_back(Job(2, "a", k444));
  AdmissionCycle c = RunCycle(s);
  const ClusterQueueUsage& a = UsageOf(c, "a");
  EXPECT_EQ(a.nominal_chips, 32);
  EXPECT_EQ(a.used_chips, 64);
  EXPECT_EQ(a.borrowed_chips, 32);
  EXPECT_EQ(a.admitted_workloads, 1);
  EXPECT_EQ(a.pending_workloads, 1);
  EXPECT_GT(a.share, 0);
  EXPECT_EQ(UsageOf(c, "b").used_chips, 8);
}

TEST(Admission, InvalidSnapshotsNameTheObject) {
  Admitter admitter;
  Snapshot s = MakeSnapshot(Pod(1, 1), {Queue("a", 64), Queue("a", 64)});
  EXPECT_NE(admitter.Run(s, 0).status().message().find("used twice"), std::string::npos);
  s = MakeSnapshot(Pod(1, 1), {Queue("a", 64)});
  s.local_queues.push_back({"team", "missing"});
  EXPECT_NE(admitter.Run(s, 0).status().message().find("localQueues[1] (team).clusterQueue"),
            std::string::npos);
  s = MakeSnapshot(Pod(1, 1), {Queue("a", 64)});
  Workload w = Job(1, "a", k444);
  w.state = WorkloadState::kRunning;
  s.workloads.push_back(w);
  EXPECT_NE(admitter.Run(s, 0).status().message().find("holds no hosts"), std::string::npos);
}

// Dense ids (creation orders) are checked in a bitmap, sparse ones by sorting: a workload id
// used twice is refused either way, naming the id, and distinct ids pass.
TEST(Admission, AWorkloadIdUsedTwiceIsRefusedWhetherIdsAreDenseOrSparse) {
  Admitter admitter;
  for (const uint64_t step : {uint64_t{1}, uint64_t{1} << 40}) {
    Snapshot s = MakeSnapshot(Pod(1, 1), {Queue("a", 64)});
    for (uint64_t i = 1; i <= 20; ++i) s.workloads.push_back(Job(1 + i * step, "a", k222));
    EXPECT_TRUE(admitter.Run(s, 0).ok()) << "step " << step;
    s.workloads.push_back(Job(1 + 7 * step, "a", k222));
    auto refused = admitter.Run(s, 0);
    ASSERT_FALSE(refused.ok()) << "step " << step;
    EXPECT_EQ(refused.status().message(),
              "workloads: id " + std::to_string(1 + 7 * step) + " is used twice");
  }
}

// The cycle checks a queue key once per local queue and a shape once per generation and
// request: a workload is still refused for its own shape or queue when one before it asked for
// the same dimensions or sat in another queue.
TEST(Admission, AWorkloadIsCheckedInFullWhenOthersShareItsDimensionsOrQueue) {
  Admitter admitter;
  Snapshot s = MakeSnapshot(Pod(1, 1), {Queue("a", 64)});
  s.workloads.push_back(Job(1, "a", k222));
  s.workloads.push_back(Job(2, "a", k222));
  s.workloads.push_back(Job(3, "elsewhere", k222));  // a valid name no queue has: it waits
  ASSERT_TRUE(admitter.Run(s, 0).ok());

  Snapshot other_generation = s;  // the same dimensions, a generation whose slices are 2D
  other_generation.workloads[1].request.generation = Generation::kV6e;
  auto refused = admitter.Run(other_generation, 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "workloads[1] (job-2): " + Validate(other_generation.workloads[1]).message());
  EXPECT_NE(refused.status().message().find("topology '2x2x2' has 3 dimensions"), std::string::npos)
      << refused.status().message();

  Snapshot bad_queue = s;
  bad_queue.workloads[2].local_queue = "Not_A_Name";
  refused = admitter.Run(bad_queue, 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "workloads[2] (job-3): " + Validate(bad_queue.workloads[2]).message());
  EXPECT_NE(refused.status().message().find("queue"), std::string::npos);
}

}  // namespace
}  // namespace tessera
