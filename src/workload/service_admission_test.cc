// The admission view of a Service's replica groups (service_admission.h), on services driven
// through ServiceLifecycle's public steps with a fake ClusterView: which groups are workloads in
// which state, which slices are on their way out, and what a pending group says.
#include "workload/service_admission.h"

#include <gtest/gtest.h>

#include <set>

namespace tessera {
namespace {

class FakeCluster : public ClusterView {
 public:
  bool HostLost(const std::string& host) const override { return lost.count(host) > 0; }
  int LargestFitWithoutJob(const TrainJob&, int, int) const override { return 0; }
  std::set<std::string> lost;
};

ServiceSpec Spec(int replicas) {
  ServiceSpec s;
  s.name = "llm";
  ServiceRoleSpec r;
  r.topology = Shape::Of(4, 4);
  r.command = {"python3", "server.py"};
  r.replicas = replicas;
  s.roles.push_back(r);
  return s;
}

class ServiceAdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override { svc_ = ServiceLifecycle::Create(Spec(3), /*uid=*/7, 0); }
  void Place(int replica, uint64_t owner) {
    GroupPlacement p;
    p.owner = owner;
    p.slice = "slice-" + std::to_string(replica);
    // Two hosts: when one process dies, the other host still has to confirm the stop.
    p.hosts = {{"h" + std::to_string(replica) + "-0", "10.0.0.1"},
               {"h" + std::to_string(replica) + "-1", "10.0.0.2"}};
    p.ports = {8000, 8001};
    life_.Place(svc_, {"server", replica}, p, 0);
  }
  const ReplicaStatus& R(int replica) {
    for (const ReplicaStatus& r : svc_.status.Role("server")->replicas)
      if (r.replica == replica) return r;
    ADD_FAILURE() << "no replica " << replica;
    static ReplicaStatus none;
    return none;
  }
  Service svc_;
  ServiceLifecycle life_;
  FakeCluster cluster_;
};

TEST_F(ServiceAdmissionTest, EachGroupIsOneWorkloadOfOneSlicePendingOrHoldingItsSlice) {
  Place(0, 100);
  const ServiceWorkloads w = AdmissionWorkloads(svc_);
  ASSERT_EQ(w.groups.size(), 3u);
  EXPECT_TRUE(w.releasing.empty());
  EXPECT_EQ(w.groups[0].key, (ReplicaKey{"server", 0}));
  EXPECT_EQ(w.groups[0].state, WorkloadState::kRunning);
  EXPECT_EQ(w.groups[0].owner, 100u);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(w.groups[static_cast<size_t>(i)].state, WorkloadState::kPending);
    EXPECT_EQ(w.groups[static_cast<size_t>(i)].owner, 0u);
    EXPECT_EQ(w.groups[static_cast<size_t>(i)].key.replica, i);
  }
  for (const GroupWorkload& g : w.groups) {
    EXPECT_EQ(g.request.shape, (Shape::Of(4, 4)));
    EXPECT_EQ(g.request.num_slices, 1);  // all or nothing, one slice per group
  }
}

TEST_F(ServiceAdmissionTest, AGroupRecreatingOnItsSliceKeepsItAndAStoppedOneReleasesIt) {
  Place(0, 100);
  Place(1, 101);
  // Replica 0's process dies: it is recreated on the same slice, still charged.
  life_.ProcessExited(svc_, {"server", 0}, R(0).incarnation, 0, 137, 0, cluster_, 0);
  ASSERT_EQ(R(0).phase, ReplicaPhase::kRecreating);
  ASSERT_TRUE(R(0).stopping);
  // Replica 1 is preempted: stopped, then Pending for a new slice; its slice is on its way out.
  life_.Evict(svc_, {"server", 1}, "preempted by trainjob big", cluster_);
  ASSERT_TRUE(R(1).stopping);
  EXPECT_TRUE(StoppingForPreemption(R(1)));
  EXPECT_FALSE(StoppingForPreemption(R(0)));
  ServiceWorkloads w = AdmissionWorkloads(svc_);
  ASSERT_EQ(w.groups.size(), 2u);  // replica 0 (running) and replica 2 (pending)
  EXPECT_EQ(w.groups[0].key.replica, 0);
  EXPECT_EQ(w.groups[0].state, WorkloadState::kRunning);
  EXPECT_EQ(w.groups[1].key.replica, 2);
  EXPECT_EQ(w.releasing, std::vector<uint64_t>{101});

  // Once its host confirms, replica 1 is an ordinary pending group again.
  life_.ConfirmStopped(svc_, {"server", 1}, "h1-0", cluster_);
  life_.ConfirmStopped(svc_, {"server", 1}, "h1-1", cluster_);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kPending);
  w = AdmissionWorkloads(svc_);
  ASSERT_EQ(w.groups.size(), 3u);
  EXPECT_EQ(w.groups[1].state, WorkloadState::kPending);
  EXPECT_TRUE(w.releasing.empty());
}

TEST_F(ServiceAdmissionTest, EvictingAGroupAlreadyBeingStoppedIsPersistedAndRequeuesIt) {
  Place(0, 100);
  life_.ProcessExited(svc_, {"server", 0}, R(0).incarnation, 0, 137, 0, cluster_, 0);
  ASSERT_TRUE(R(0).stopping);
  const ServiceEffects e = life_.Evict(svc_, {"server", 0}, "preempted", cluster_);
  EXPECT_TRUE(e.persist);  // a restarted head must not start it on the slice again
  EXPECT_EQ(R(0).after_stop, AfterStop::kRequeue);
  EXPECT_EQ(AdmissionWorkloads(svc_).releasing, std::vector<uint64_t>{100});
}

TEST_F(ServiceAdmissionTest, ScaledDownAndDeletedGroupsReleaseTheirSlices) {
  Place(0, 100);
  Place(1, 101);
  ASSERT_TRUE(life_.Scale(svc_, "server", 1, cluster_).ok());
  ServiceWorkloads w = AdmissionWorkloads(svc_);
  ASSERT_EQ(w.groups.size(), 1u);
  EXPECT_EQ(w.groups[0].key.replica, 0);
  EXPECT_EQ(w.releasing, std::vector<uint64_t>{101});
  life_.Delete(svc_, cluster_);
  w = AdmissionWorkloads(svc_);
  EXPECT_TRUE(w.groups.empty());
  EXPECT_EQ(w.releasing, (std::vector<uint64_t>{100, 101}));
}

TEST_F(ServiceAdmissionTest, AGroupTakesTheServicesQueuePriorityAndPlaceInLine) {
  const GroupWorkload g = AdmissionWorkloads(svc_).groups[1];
  Workload w = GroupAdmissionWorkload(svc_, g, WorkloadId(55), 100, "default");
  EXPECT_EQ(w.name, "service/llm/server/1");
  EXPECT_EQ(w.local_queue, "default");  // no metadata.queue: the default LocalQueue
  EXPECT_EQ(w.priority, 100);
  EXPECT_EQ(w.creation_order, 7);  // the Service's uid
  EXPECT_EQ(w.chips(), 16);
  EXPECT_TRUE(Validate(w).ok()) << Validate(w).message();
  svc_.spec.queue = "serving";
  w = GroupAdmissionWorkload(svc_, g, WorkloadId(55), 0, "default");
  EXPECT_EQ(w.local_queue, "serving");
}

TEST_F(ServiceAdmissionTest, APendingGroupSaysWhyWhereItIsInLineAndWhatWouldHelp) {
  PendingStatus p;
  p.cluster_queue = "serving";
  p.message = "needs 16 chips; queue serving uses 16 of nominal 16: over quota by 16 chips";
  p.position = 2;
  p.would_help = {{WorkloadId(3), "train", "serving", 1, 16, true},
                  {WorkloadId(9), "service/chat/server/0", "serving", 50, 16, false}};
  EXPECT_EQ(
      GroupPendingMessage(p),
      "needs 16 chips; queue serving uses 16 of nominal 16: over quota by 16 chips; position 2 in "
      "ClusterQueue serving; would help: trainjob train (priority 1, 16 chips, "
      "preemptible), service/chat/server/0 (priority 50, 16 chips, must finish)");
  p.position = 0;
  p.would_help.clear();
  EXPECT_EQ(GroupPendingMessage(p), p.message);
}

}  // namespace
}  // namespace tessera
