// GPU workloads through the admission cycle (admission.h, Snapshot::gpu): quota in GPUs of a
// system, cohorts, preemption by priority, and the reasons a waiting GPU workload gives.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "admission/admission.h"
#include "admission/gpu_preemption.h"
#include "admission/test_util.h"

namespace tessera {
namespace {

using testing::Admitted;
using testing::FindPending;

constexpr GpuSystem kNvl72 = GpuSystem::kGb200Nvl72;  // 4 GPUs per host, 18 hosts per domain

ClusterQueueSpec NvlQueue(std::string name, int64_t nominal_gpus, std::string cohort = "") {
  ClusterQueueSpec q;
  q.name = std::move(name);
  q.cohort = std::move(cohort);
  ResourceQuota rq;
  rq.gpu_system = kNvl72;
  rq.nominal_chips = nominal_gpus;
  q.quotas = {rq};
  return q;
}

Workload NvlJob(uint64_t id, std::string queue, int hosts, int32_t priority = 0,
                DomainRule rule = DomainRule::kRequired) {
  Workload w;
  w.id = WorkloadId(id);
  w.name = "gpu-" + std::to_string(id);
  w.local_queue = std::move(queue);
  w.priority = priority;
  w.gpu = GpuWorkloadRequest{kNvl72, GpuRequest{hosts * 4, DomainRuleSpec{rule, 0}}};
  w.creation_order = static_cast<int64_t>(id);
  return w;
}

// `domains` empty GB200 NVL72 domains; LocalQueues named after their ClusterQueues.
Snapshot GpuSnapshotOf(int domains, std::vector<ClusterQueueSpec> queues) {
  Snapshot s;
  s.cluster_queues = std::move(queues);
  for (const auto& q : s.cluster_queues) s.local_queues.push_back({q.name, q.name});
  GpuSnapshot g;
  g.fleet = GpuFleet::Make(kNvl72, domains);
  g.holders.assign(g.fleet.hosts.size(), WorkloadId());
  s.gpu = std::move(g);
  return s;
}

// Adds `w` as running on fleet hosts `hosts`.
void AddRunningGpu(Snapshot& s, Workload w, const std::vector<int>& hosts) {
  for (int h : hosts) {
    ASSERT_FALSE(s.gpu->holders[h].valid()) << "host " << h << " is taken";
    s.gpu->holders[h] = w.id;
    s.gpu->fleet.hosts[h].free_gpus = 0;
  }
  w.state = WorkloadState::kRunning;
  w.admitted_at_ms = 1000;
  s.workloads.push_back(std::move(w));
}

std::vector<int> HostRange(int from, int to) {
  std::vector<int> out;
  for (int i = from; i < to; ++i) out.push_back(i);
  return out;
}

AdmissionCycle RunGpuCycle(const Snapshot& s, AdmissionOptions o = {}) {
  auto r = Admitter(o).Run(s, 1'000'000);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

const Admission* FindAdmission(const AdmissionCycle& c, uint64_t id) {
  for (const Admission& a : c.admissions)
    if (a.workload == WorkloadId(id)) return &a;
  return nullptr;
}

TEST(GpuAdmission, QuotaInGpusAdmitsWhatFitsWithADomainPlacement) {
  Snapshot s = GpuSnapshotOf(2, {NvlQueue("gpus", 32)});
  s.workloads.push_back(NvlJob(1, "gpus", 4));
  s.workloads.push_back(NvlJob(2, "gpus", 4));
  AdmissionCycle c = RunGpuCycle(s);
  ASSERT_EQ(c.admissions.size(), 2u);
  for (const Admission& a : c.admissions) {
    EXPECT_TRUE(a.gpu_placement.placed);
    EXPECT_EQ(a.gpu_placement.hosts.size(), 4u);
    EXPECT_EQ(a.gpu_placement.domains.size(), 1u) << "domain: required keeps one domain";
  }
  // No host given twice.
  std::vector<int> hosts = c.admissions[0].gpu_placement.hosts;
  for (int h : c.admissions[1].gpu_placement.hosts)
    EXPECT_EQ(std::count(hosts.begin(), hosts.end(), h), 0) << "host " << h << " given twice";
  ASSERT_EQ(c.usage.size(), 1u);
  EXPECT_EQ(c.usage[0].nominal_chips, 32);
  EXPECT_EQ(c.usage[0].used_chips, 32);
  EXPECT_TRUE(c.pending.empty());
}

TEST(GpuAdmission, QuotaExhaustedWaitsNamingTheQueueAndTheFiguresThenRuns) {
  Snapshot s = GpuSnapshotOf(1, {NvlQueue("gpus", 16)});
  AddRunningGpu(s, NvlJob(1, "gpus", 4), HostRange(0, 4));
  s.workloads.push_back(NvlJob(2, "gpus", 4));
  AdmissionCycle c = RunGpuCycle(s);
  EXPECT_TRUE(c.admissions.empty());
  const PendingStatus* p = FindPending(c, 2);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->reason, PendingReason::kOverQuota);
  EXPECT_EQ(p->over_quota_chips, 16);
  EXPECT_NE(p->message.view().find("needs 16 GPUs; queue gpus uses 16 of nominal 16 GPUs"),
            std::string::npos)
      << p->message;
  EXPECT_NE(p->message.view().find("over quota by 16 GPUs"), std::string::npos) << p->message;
  ASSERT_EQ(p->would_help.size(), 1u);
  EXPECT_EQ(p->would_help[0].name, "gpu-1");
  EXPECT_EQ(p->would_help[0].chips, 16);
  EXPECT_FALSE(p->would_help[0].preemptible) << "withinClusterQueue is Never";

  // The first job finishes: the second is admitted on the next cycle.
  s.workloads.erase(s.workloads.begin());
  s.gpu->holders.assign(s.gpu->fleet.hosts.size(), WorkloadId());
  for (GpuHostState& h : s.gpu->fleet.hosts) h.free_gpus = 4;
  c = RunGpuCycle(s);
  EXPECT_TRUE(Admitted(c, 2));
}

TEST(GpuAdmission, NoPlacementNamesTheDomainRule) {
  // 8 hosts free in each of two domains; 10 in one domain asked.
  Snapshot s = GpuSnapshotOf(2, {NvlQueue("gpus", 1000), NvlQueue("other", 1000)});
  AddRunningGpu(s, NvlJob(1, "other", 10), HostRange(0, 10));
  AddRunningGpu(s, NvlJob(2, "other", 10), HostRange(18, 28));
  s.workloads.push_back(NvlJob(3, "gpus", 10));
  AdmissionCycle c = RunGpuCycle(s);
  const PendingStatus* p = FindPending(c, 3);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->reason, PendingReason::kNoFreeBox);
  EXPECT_NE(p->message.view().find("10 gb200-nvl72 hosts (domain: required)"), std::string::npos)
      << p->message;
  EXPECT_NE(p->message.view().find("at most 8 in one domain"), std::string::npos) << p->message;
  EXPECT_FALSE(p->would_help.empty()) << "a running job's finishing would make room";

  // domain: preferred spills over two domains instead.
  s.workloads.back() = NvlJob(3, "gpus", 10, 0, DomainRule::kPreferred);
  c = RunGpuCycle(s);
  const Admission* a = FindAdmission(c, 3);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->gpu_placement.domains.size(), 2u);
}

TEST(GpuAdmission, NeverFitsAndWrongSystemDoNotBlockTheLine) {
  ClusterQueueSpec q = NvlQueue("gpus", 1000);
  q.queueing_strategy = QueueingStrategy::kStrictFIFO;
  Snapshot s = GpuSnapshotOf(1, {q});
  s.workloads.push_back(NvlJob(1, "gpus", 19));  // more than a domain, domain: required
  Workload h100 = NvlJob(2, "gpus", 1);
  h100.gpu->system = GpuSystem::kH100;
  h100.gpu->request.gpus = 8;
  s.workloads.push_back(h100);
  s.workloads.push_back(NvlJob(3, "gpus", 2));
  AdmissionCycle c = RunGpuCycle(s);
  EXPECT_TRUE(Admitted(c, 3));
  ASSERT_NE(FindPending(c, 1), nullptr);
  EXPECT_EQ(FindPending(c, 1)->reason, PendingReason::kNeverFits);
  EXPECT_NE(FindPending(c, 1)->message.view().find("domain: required"), std::string::npos);
  ASSERT_NE(FindPending(c, 2), nullptr);
  EXPECT_EQ(FindPending(c, 2)->reason, PendingReason::kInvalidRequest);
  EXPECT_NE(FindPending(c, 2)->message.view().find("h100 GPUs"), std::string::npos);
}

TEST(GpuAdmission, AQueueWithoutGpuQuotaSaysHowToAddOne) {
  ClusterQueueSpec tpu_only;
  tpu_only.name = "tpu";
  tpu_only.quotas = {ResourceQuota{Generation::kV6e, 64, std::nullopt, std::nullopt, std::nullopt}};
  Snapshot s = GpuSnapshotOf(1, {tpu_only});
  s.workloads.push_back(NvlJob(1, "tpu", 1));
  AdmissionCycle c = RunGpuCycle(s);
  const PendingStatus* p = FindPending(c, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->reason, PendingReason::kOverQuota);
  EXPECT_NE(p->message.view().find("can never hold more than 0 GPUs"), std::string::npos)
      << p->message;
  EXPECT_NE(p->message.view().find("resource: nvidia.com/gpu, gpuSystem: gb200-nvl72"),
            std::string::npos)
      << p->message;
}

TEST(GpuAdmission, TpuCycleIgnoresGpuQuotas) {
  // A queue with a GPU quota only: a TPU cycle sees nominal 0 chips of its generation.
  Snapshot s = testing::MakeSnapshot(testing::Pod(1, 1), {NvlQueue("gpus", 64)});
  s.workloads.push_back(testing::Job(1, "gpus", Shape::Of(2, 2, 2)));
  AdmissionCycle c = RunGpuCycle(s);
  ASSERT_NE(FindPending(c, 1), nullptr);
  EXPECT_EQ(FindPending(c, 1)->reason, PendingReason::kOverQuota);
  EXPECT_EQ(c.usage[0].nominal_chips, 0);
}

TEST(GpuAdmission, CohortBorrowingInGpus) {
  Snapshot s = GpuSnapshotOf(2, {NvlQueue("a", 16, "org"), NvlQueue("b", 16, "org")});
  s.workloads.push_back(NvlJob(1, "a", 8));  // 32 GPUs: 16 borrowed from b
  AdmissionCycle c = RunGpuCycle(s);
  const Admission* a = FindAdmission(c, 1);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->borrowed_chips, 16);

  // b wants its quota back: without a preemption policy it waits, saying what it lent.
  AddRunningGpu(s, NvlJob(1, "a", 8), a->gpu_placement.hosts);
  s.workloads.erase(s.workloads.begin());
  s.workloads.push_back(NvlJob(2, "b", 2));
  c = RunGpuCycle(s);
  const PendingStatus* p = FindPending(c, 2);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->reason, PendingReason::kOverQuota);
  EXPECT_NE(p->message.view().find("cohort org has 0 of 32 lendable GPUs unused"),
            std::string::npos)
      << p->message;
  ASSERT_EQ(p->would_help.size(), 1u);
  EXPECT_FALSE(p->would_help[0].preemptible);

  // With reclaimWithinCohort: Any, b takes its quota back from the borrower.
  s.cluster_queues[1].preemption.reclaim_within_cohort = ReclaimWithinCohort::kAny;
  c = RunGpuCycle(s);
  ASSERT_EQ(c.preemptions.size(), 1u);
  EXPECT_EQ(c.preemptions[0].kind, PreemptionKind::kReclaimWithinCohort);
  EXPECT_EQ(c.preemptions[0].victims, std::vector<WorkloadId>{WorkloadId(1)});
  const Admission* b = FindAdmission(c, 2);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->waits_for, std::vector<WorkloadId>{WorkloadId(1)});
}

TEST(GpuAdmission, PreemptsLowerPriorityWithinTheQueueOnTheVictimsHosts) {
  ClusterQueueSpec q = NvlQueue("gpus", 32);
  q.preemption.within_cluster_queue = WithinClusterQueue::kLowerPriority;
  Snapshot s = GpuSnapshotOf(2, {q});
  // Two low-priority jobs fill the quota, one per domain; the rest of the fleet is free.
  AddRunningGpu(s, NvlJob(1, "gpus", 4, 1), HostRange(0, 4));
  AddRunningGpu(s, NvlJob(2, "gpus", 4, 0), HostRange(18, 22));
  s.workloads.push_back(NvlJob(3, "gpus", 4, 10));
  AdmissionCycle c = RunGpuCycle(s);
  ASSERT_EQ(c.preemptions.size(), 1u);
  // The lowest priority goes, and the preemptor lands on its hosts (never evicted only for
  // quota).
  EXPECT_EQ(c.preemptions[0].victims, std::vector<WorkloadId>{WorkloadId(2)});
  const Admission* a = FindAdmission(c, 3);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->gpu_placement.hosts, HostRange(18, 22));
  EXPECT_EQ(a->waits_for, std::vector<WorkloadId>{WorkloadId(2)});
  ASSERT_NE(FindPending(c, 2), nullptr);
  EXPECT_EQ(FindPending(c, 2)->reason, PendingReason::kPreempted);

  // An equal priority is not preempted under LowerPriority.
  s.workloads.back().priority = 0;
  c = RunGpuCycle(s);
  EXPECT_TRUE(c.preemptions.empty());
  ASSERT_NE(FindPending(c, 3), nullptr);
  EXPECT_EQ(FindPending(c, 3)->reason, PendingReason::kOverQuota);
}

TEST(GpuAdmission, VictimSearchUsesEveryVictimsHosts) {
  GpuFleet fleet = GpuFleet::Make(kNvl72, 1);
  std::vector<WorkloadId> holders(fleet.hosts.size());
  for (int h = 0; h < 6; ++h) {
    holders[h] = WorkloadId(h < 3 ? 1 : 2);
    fleet.hosts[h].free_gpus = 0;
  }
  // 14 hosts in one domain: 12 are free, so one of the two 3-host jobs must go.
  std::vector<PreemptionCandidate> cands = {{WorkloadId(1), 5, 0, 0}, {WorkloadId(2), 1, 0, 0}};
  GpuVictimSet v =
      FindGpuVictims(fleet, holders, {56, {DomainRule::kRequired, 0}}, GpuPolicy::kTessera, cands);
  ASSERT_TRUE(v.found) << v.message;
  EXPECT_EQ(v.victims, std::vector<WorkloadId>{WorkloadId(2)});
  EXPECT_EQ(v.cost.chips, 12);
  int on_victim = 0;
  for (int h : v.plan.hosts) on_victim += holders[h] == WorkloadId(2) ? 1 : 0;
  EXPECT_GE(on_victim, 1);
  // A check that refuses every set: nothing found, and why.
  v = FindGpuVictims(fleet, holders, {56, {DomainRule::kRequired, 0}}, GpuPolicy::kTessera, cands,
                     [](const std::vector<int>&) { return false; });
  EXPECT_FALSE(v.found);
  EXPECT_FALSE(v.message.empty());
}

TEST(GpuAdmission, ValidationNamesTheField) {
  Workload w = NvlJob(1, "gpus", 1);
  w.gpu->request.gpus = 6;  // not whole gb200 hosts
  Status st = Validate(w);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("gpu.gpus: 6 is not a whole number of gb200-nvl72 hosts"),
            std::string::npos)
      << st.message();
  ClusterQueueSpec q = NvlQueue("gpus", 8);
  q.quotas.push_back(q.quotas[0]);
  st = Validate(q);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("quotas[1].gpuSystem: gb200-nvl72 is listed twice"),
            std::string::npos)
      << st.message();
  // A TPU quota and a GPU quota side by side are fine.
  q.quotas[1] = ResourceQuota{Generation::kV6e, 64, std::nullopt, std::nullopt, std::nullopt};
  EXPECT_TRUE(Validate(q).ok());
}

}  // namespace
}  // namespace tessera
