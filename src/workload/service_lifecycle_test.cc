// ServiceLifecycle through its public steps with a fake ClusterView: no store, no clock, no
// controller. Each test states one rule of docs/serving.md as inputs and the state expected.
#include "workload/service_lifecycle.h"

#include <gtest/gtest.h>

#include <set>

namespace tessera {
namespace {

class FakeCluster : public ClusterView {
 public:
  bool HostLost(const std::string& host) const override { return lost.count(host) > 0; }
  int LargestFitWithoutJob(const TrainJob&, int, int) const override { return 0; }
  int FreeSlices(Generation, const Shape&) const override { return free_slices; }
  std::set<std::string> lost;
  int free_slices = -1;
};

ServiceRoleSpec Role(int replicas) {
  ServiceRoleSpec r;
  r.topology = Shape{2, 2, 1};
  r.command = {"python3", "server.py"};
  r.replicas = replicas;
  r.readiness.startup_grace_ms = 60'000;
  return r;
}

ServiceSpec Spec(int replicas) {
  ServiceSpec s;
  s.name = "llm";
  s.roles.push_back(Role(replicas));
  return s;
}

bool HasEvent(const ServiceEffects& e, const std::string& reason) {
  for (const JobEvent& ev : e.events)
    if (ev.reason == reason) return true;
  return false;
}

class ServiceLifecycleTest : public ::testing::Test {
 protected:
  const ReplicaStatus& R(int replica, const std::string& role = "server") {
    for (const ReplicaStatus& r : svc_.status.Role(role)->replicas)
      if (r.replica == replica) return r;
    ADD_FAILURE() << "no replica " << replica;
    static ReplicaStatus none;
    return none;
  }
  std::vector<int> Replicas(const std::string& role = "server") {
    std::vector<int> out;
    for (const ReplicaStatus& r : svc_.status.Role(role)->replicas) out.push_back(r.replica);
    return out;
  }
  // Places every waiting group on a fresh 2-host slice "slice-N" (hosts "hN-0", "hN-1").
  ServiceEffects PlaceAll() {
    ServiceEffects all;
    for (const ReplicaKey& k : ServiceLifecycle::WaitingForSlice(svc_)) {
      const int n = next_slice_++;
      GroupPlacement p;
      p.owner = 100 + static_cast<uint64_t>(n);
      p.slice = "slice-" + std::to_string(n);
      p.hosts = {{"h" + std::to_string(n) + "-0", "10.0.0.1"},
                 {"h" + std::to_string(n) + "-1", "10.0.0.2"}};
      p.master_port = 21000 + n;
      p.ports = {8000 + 2 * n, 8001 + 2 * n};
      all.Merge(life_.Place(svc_, k, p, now_));
    }
    return all;
  }
  // Every process of the group runs and its leader passes the probe.
  void MakeReady(int replica, const std::string& role = "server") {
    const ReplicaStatus& r = R(replica, role);
    const int inc = r.incarnation;
    for (int w = 0; w < static_cast<int>(r.processes.size()); ++w)
      life_.ProcessRunning(svc_, {role, replica}, inc, w, 1000 + w);
    life_.Readiness(svc_, {role, replica}, inc, true, "", cluster_, now_);
  }
  // Each host of the group confirms its processes are gone.
  ServiceEffects ConfirmAll(int replica, const std::string& role = "server") {
    ServiceEffects all;
    const std::set<std::string> hosts = R(replica, role).unconfirmed;
    for (const std::string& h : hosts)
      all.Merge(life_.ConfirmStopped(svc_, {role, replica}, h, cluster_));
    return all;
  }
  ServiceEffects Kill(int replica, int worker) {
    return life_.ProcessExited(svc_, {"server", replica}, R(replica).incarnation, worker, 137, 9,
                               cluster_, now_);
  }

  ServiceLifecycle life_;
  FakeCluster cluster_;
  int64_t now_ = 1'000'000;
  int next_slice_ = 0;
  Service svc_ = ServiceLifecycle::Create(Spec(2), 7, 1'000'000);
};

TEST_F(ServiceLifecycleTest, CreateMakesOnePendingGroupPerReplica) {
  EXPECT_EQ(svc_.status.phase, ServicePhase::kPending);
  ASSERT_EQ(Replicas(), (std::vector<int>{0, 1}));
  EXPECT_EQ(R(0).phase, ReplicaPhase::kPending);
  EXPECT_EQ(ServiceLifecycle::WaitingForSlice(svc_).size(), 2u);
  EXPECT_TRUE(svc_.Endpoints().empty());
}

TEST_F(ServiceLifecycleTest, PlaceAssignsEveryHostOfTheSliceAndPendingKeepsThePlannerReason) {
  ServiceEffects e =
      life_.SetPending(svc_, {"server", 0}, "Fragmented", "no free 2x2 block: 3 hosts down");
  EXPECT_TRUE(e.persist);
  EXPECT_EQ(R(0).message, "no free 2x2 block: 3 hosts down");
  EXPECT_EQ(svc_.status.phase, ServicePhase::kPending);
  EXPECT_NE(svc_.status.message.find("Fragmented"), std::string::npos) << svc_.status.message;
  // Unchanged reason: no write.
  EXPECT_FALSE(
      life_.SetPending(svc_, {"server", 0}, "Fragmented", "no free 2x2 block: 3 hosts down")
          .persist);

  e = PlaceAll();
  EXPECT_TRUE(e.assignments_changed);
  EXPECT_EQ(e.notify_hosts, (std::set<std::string>{"h0-0", "h0-1", "h1-0", "h1-1"}));
  EXPECT_EQ(R(0).phase, ReplicaPhase::kStarting);
  ASSERT_EQ(R(0).processes.size(), 2u);
  EXPECT_EQ(R(0).processes[0].host, "h0-0");
  EXPECT_EQ(R(0).incarnation, 1);
  EXPECT_EQ(svc_.status.phase, ServicePhase::kProgressing);
  // Starting groups are endpoints, not ready ones.
  ASSERT_EQ(svc_.Endpoints().size(), 2u);
  EXPECT_FALSE(svc_.Endpoints()[0].ready);
  EXPECT_EQ(svc_.Endpoints()[0].port, 8000);
}

TEST_F(ServiceLifecycleTest, ReadyWhenTheLeaderPassesItsProbe) {
  PlaceAll();
  MakeReady(0);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kReady);
  EXPECT_EQ(svc_.status.phase, ServicePhase::kProgressing);
  MakeReady(1);
  EXPECT_EQ(svc_.status.phase, ServicePhase::kReady);
  EXPECT_EQ(svc_.status.message, "2 of 2 replicas ready");
  for (const Endpoint& ep : svc_.Endpoints()) EXPECT_TRUE(ep.ready);
}

TEST_F(ServiceLifecycleTest, NotReadyWhileAWorkerHasNotStartedThoughTheLeaderAnswers) {
  PlaceAll();
  const int inc = R(0).incarnation;
  life_.ProcessRunning(svc_, {"server", 0}, inc, 0, 1000);
  ServiceEffects e = life_.Readiness(svc_, {"server", 0}, inc, true, "", cluster_, now_);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kStarting);
  EXPECT_FALSE(R(0).ready_once);
  EXPECT_NE(R(0).message.find("worker 1 on host h0-1"), std::string::npos) << R(0).message;
  EXPECT_TRUE(e.persist);
  EXPECT_FALSE(svc_.Endpoints()[0].ready);
  // The same answer again writes nothing; once worker 1 runs, the next probe makes it ready.
  EXPECT_FALSE(life_.Readiness(svc_, {"server", 0}, inc, true, "", cluster_, now_).persist);
  life_.ProcessRunning(svc_, {"server", 0}, inc, 1, 1001);
  life_.Readiness(svc_, {"server", 0}, inc, true, "", cluster_, now_);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kReady);
}

TEST_F(ServiceLifecycleTest, FailedProbesInTheStartupGraceDoNotCountThenTheGroupIsRecreated) {
  PlaceAll();
  const int inc = R(0).incarnation;
  now_ += 30'000;
  life_.Readiness(svc_, {"server", 0}, inc, false, "connection refused", cluster_, now_);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kStarting);
  EXPECT_TRUE(life_.Tick(svc_, cluster_, now_).events.empty());
  now_ += 30'000;  // 60 s: the grace is over
  ServiceEffects e = life_.Tick(svc_, cluster_, now_);
  EXPECT_TRUE(HasEvent(e, "StartupTimeout"));
  EXPECT_EQ(R(0).phase, ReplicaPhase::kRecreating);
  EXPECT_TRUE(R(0).stopping);
}

TEST_F(ServiceLifecycleTest, AnUnreadyReplicaLeavesTheReadyEndpointsAtOnce) {
  PlaceAll();
  MakeReady(0);
  MakeReady(1);
  ServiceEffects e =
      life_.Readiness(svc_, {"server", 1}, R(1).incarnation, false, "HTTP 503", cluster_, now_ + 1);
  EXPECT_TRUE(e.persist);
  EXPECT_TRUE(HasEvent(e, "Unready"));
  EXPECT_EQ(R(1).phase, ReplicaPhase::kUnready);
  EXPECT_EQ(svc_.status.phase, ServicePhase::kDegraded);
  std::vector<Endpoint> eps = svc_.Endpoints();
  ASSERT_EQ(eps.size(), 2u);
  EXPECT_TRUE(eps[0].ready);
  EXPECT_FALSE(eps[1].ready);
  // Back.
  life_.Readiness(svc_, {"server", 1}, R(1).incarnation, true, "", cluster_, now_ + 2);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kReady);
  EXPECT_EQ(svc_.status.phase, ServicePhase::kReady);
}

TEST_F(ServiceLifecycleTest, AReadyReplicaWithoutProbeResultsTurnsUnready) {
  PlaceAll();
  MakeReady(0);
  now_ += 39'999;  // period 10 s + timeout 30 s
  life_.Tick(svc_, cluster_, now_);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kReady);
  now_ += 2;
  life_.Tick(svc_, cluster_, now_);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kUnready);
}

TEST_F(ServiceLifecycleTest, AProcessDeathRecreatesTheWholeGroupAndTheOtherKeepsServing) {
  PlaceAll();
  MakeReady(0);
  MakeReady(1);
  ServiceEffects e = Kill(0, 1);  // a follower dies
  EXPECT_TRUE(HasEvent(e, "ProcessExited"));
  EXPECT_EQ(R(0).phase, ReplicaPhase::kRecreating);
  EXPECT_EQ(R(0).restarts, 1);
  // The leader's host must confirm; the dead follower's is done.
  EXPECT_EQ(R(0).unconfirmed, (std::set<std::string>{"h0-0"}));
  EXPECT_TRUE(e.assignments_changed);
  EXPECT_EQ(svc_.status.phase, ServicePhase::kDegraded);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kReady);
  ASSERT_EQ(svc_.Endpoints().size(), 1u);  // only replica 1
  EXPECT_EQ(svc_.Endpoints()[0].replica, 1);
  // Stale reports of the dead incarnation change nothing.
  EXPECT_FALSE(life_.ProcessExited(svc_, {"server", 0}, 1, 0, 0, 15, cluster_, now_).persist);

  e = ConfirmAll(0);
  EXPECT_TRUE(e.release_owners.empty());  // the slice is kept for the new group
  EXPECT_TRUE(ServiceLifecycle::DueRestarts(svc_, now_).empty());
  now_ += 1000;  // the first backoff: 1 s
  ASSERT_EQ(ServiceLifecycle::DueRestarts(svc_, now_).size(), 1u);
  e = life_.Restart(svc_, {"server", 0}, {22000, {8100, 8101}}, now_);
  EXPECT_TRUE(e.assignments_changed);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kStarting);
  EXPECT_EQ(R(0).incarnation, 2);
  EXPECT_EQ(R(0).master_port, 22000);
  EXPECT_EQ(R(0).processes[0].port, 8100);
  EXPECT_EQ(R(0).slice, "slice-0");
  MakeReady(0);
  EXPECT_EQ(svc_.status.phase, ServicePhase::kReady);
}

TEST_F(ServiceLifecycleTest, BackoffDoublesToFiveMinutesAndResetsAfterTenMinutesReady) {
  PlaceAll();
  std::vector<int64_t> waits;
  for (int i = 0; i < 11; ++i) {
    Kill(0, 0);
    ConfirmAll(0);
    waits.push_back(R(0).restart_at_ms - now_);
    now_ = R(0).restart_at_ms;
    ASSERT_EQ(ServiceLifecycle::DueRestarts(svc_, now_).size(), 1u);
    life_.Restart(svc_, {"server", 0}, {22000, {8100, 8101}}, now_);
  }
  EXPECT_EQ(waits, (std::vector<int64_t>{1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000,
                                         256000, 300000, 300000}));
  MakeReady(0);
  now_ += 599'000;  // ready for less than 10 min: keeps growing (at the cap)
  life_.Readiness(svc_, {"server", 0}, R(0).incarnation, true, "", cluster_, now_);
  Kill(0, 0);
  ConfirmAll(0);
  EXPECT_EQ(R(0).restart_at_ms - now_, 300'000);
  now_ = R(0).restart_at_ms;
  life_.Restart(svc_, {"server", 0}, {22000, {8100, 8101}}, now_);
  MakeReady(0);
  now_ += 600'000;
  life_.Readiness(svc_, {"server", 0}, R(0).incarnation, true, "", cluster_, now_);
  Kill(0, 0);
  EXPECT_EQ(R(0).restart_at_ms - now_, 1000);
}

TEST_F(ServiceLifecycleTest, ALostHostSendsTheGroupToANewSlice) {
  PlaceAll();
  MakeReady(0);
  MakeReady(1);
  cluster_.lost.insert("h0-1");
  ServiceEffects e = life_.HostLost(svc_, "h0-1", "no heartbeat for 5 s", cluster_);
  EXPECT_TRUE(HasEvent(e, "HostLost"));
  EXPECT_EQ(R(0).phase, ReplicaPhase::kRecreating);
  EXPECT_EQ(R(0).unconfirmed, (std::set<std::string>{"h0-0"}));
  e = ConfirmAll(0);
  EXPECT_EQ(e.release_owners, (std::vector<uint64_t>{100}));
  EXPECT_TRUE(e.schedule);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kPending);
  EXPECT_FALSE(R(0).placed());
  PlaceAll();
  EXPECT_EQ(R(0).slice, "slice-2");
}

TEST_F(ServiceLifecycleTest, ScaleAddsAndStopsGroups) {
  PlaceAll();
  MakeReady(0);
  MakeReady(1);
  auto e = life_.Scale(svc_, "server", 3, cluster_);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(Replicas(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(svc_.spec.roles[0].replicas, 3);
  PlaceAll();
  MakeReady(2);
  e = life_.Scale(svc_, "server", 1, cluster_);
  ASSERT_TRUE(e.ok());
  // The newest two go.
  EXPECT_EQ(R(2).phase, ReplicaPhase::kTerminating);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kTerminating);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kReady);
  ServiceEffects done = ConfirmAll(1);
  done.Merge(ConfirmAll(2));
  EXPECT_EQ(done.release_owners.size(), 2u);
  EXPECT_EQ(Replicas(), (std::vector<int>{0}));
  EXPECT_EQ(svc_.status.phase, ServicePhase::kReady);
  // Errors name the field.
  auto bad = life_.Scale(svc_, "decode", 1, cluster_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("role: 'decode' is not a role", 0), 0u);
}

TEST_F(ServiceLifecycleTest, RollingUpdateReplacesOneGroupAtATimeWithSurgeOne) {
  PlaceAll();
  MakeReady(0);
  MakeReady(1);
  ServiceSpec next = Spec(2);
  next.roles[0].command = {"python3", "server.py", "--v2"};
  ServiceEffects e = life_.Apply(svc_, next, cluster_);
  EXPECT_TRUE(HasEvent(e, "RollingUpdate"));
  EXPECT_EQ(svc_.status.Role("server")->generation, 2);
  // maxSurge 1, maxUnavailable 0: one new group, nothing stopped yet.
  EXPECT_EQ(Replicas(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(R(2).generation, 2);
  EXPECT_EQ(svc_.status.phase, ServicePhase::kProgressing);
  EXPECT_EQ(svc_.status.reason, "RollingUpdate");
  PlaceAll();
  EXPECT_EQ(R(0).phase, ReplicaPhase::kReady);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kReady);
  // The new group ready: one old group stops (the newest), and the next new one is added.
  MakeReady(2);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kTerminating);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kReady);
  ConfirmAll(1);
  EXPECT_EQ(Replicas(), (std::vector<int>{0, 2, 3}));
  PlaceAll();
  MakeReady(3);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kTerminating);
  ConfirmAll(0);
  EXPECT_EQ(Replicas(), (std::vector<int>{2, 3}));
  EXPECT_EQ(svc_.status.phase, ServicePhase::kReady);
  // Never fewer than 2 ready during the update: checked at each step above (0 and 1 stayed
  // ready until their replacement was).
}

TEST_F(ServiceLifecycleTest, RollingUpdateWithoutSurgeStopsAnOldGroupFirst) {
  ServiceSpec spec = Spec(2);
  spec.roles[0].rollout = {0, 1};
  svc_ = ServiceLifecycle::Create(spec, 7, now_);
  PlaceAll();
  MakeReady(0);
  MakeReady(1);
  spec.roles[0].env = {{"MODEL", "v2"}};
  life_.Apply(svc_, spec, cluster_);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kTerminating);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kReady);
  ConfirmAll(1);
  EXPECT_EQ(Replicas(), (std::vector<int>{0, 2}));
  PlaceAll();
  EXPECT_EQ(R(0).phase, ReplicaPhase::kReady);  // waits for the new group
  MakeReady(2);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kTerminating);
}

TEST_F(ServiceLifecycleTest, WithARouterAnOldGroupStopsOnlyOnceTheNewOneTookTraffic) {
  PlaceAll();
  MakeReady(0);
  MakeReady(1);
  // The router reports on the role: the rollout waits for it to route to the new group.
  auto report = [&](std::map<int, int> in_flight, double ongoing) {
    RouterTraffic t;
    t.at_ms = now_;
    t.in_flight = std::move(in_flight);
    t.ongoing_requests = ongoing;
    svc_.runtime.traffic["server"] = t;
  };
  report({{0, 3}, {1, 2}}, 5);
  ServiceSpec next = Spec(2);
  next.roles[0].env = {{"MODEL", "v2"}};
  life_.Apply(svc_, next, cluster_);
  PlaceAll();
  now_ += 1000;
  MakeReady(2);
  EXPECT_EQ(R(2).phase, ReplicaPhase::kReady);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kReady);  // the router has not seen it Ready yet
  now_ += 500;
  report({{0, 3}, {1, 2}, {2, 0}}, 5);  // routed to, nothing in flight on it yet
  life_.Tick(svc_, cluster_, now_);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kReady);
  now_ += 500;
  report({{0, 2}, {1, 2}, {2, 1}}, 5);  // it took a request within the report period
  life_.Tick(svc_, cluster_, now_);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kTerminating);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kReady);
  ConfirmAll(1);
  PlaceAll();
  MakeReady(3);
  // No request at all in the role: nothing to take, the router routing to it is enough.
  now_ += 1000;
  report({{0, 0}, {2, 0}, {3, 0}}, 0);
  life_.Tick(svc_, cluster_, now_);
  EXPECT_EQ(R(0).phase, ReplicaPhase::kTerminating);
}

TEST_F(ServiceLifecycleTest, ANewGroupInTheRotationForAReportPeriodTookOverThoughIdle) {
  PlaceAll();
  MakeReady(0);
  MakeReady(1);
  auto report = [&](std::map<int, int> in_flight) {
    RouterTraffic t;
    t.at_ms = now_;
    t.in_flight = std::move(in_flight);
    t.ongoing_requests = 4;  // all on the old groups: short requests missed it at the instants
    svc_.runtime.traffic["server"] = t;
  };
  report({{0, 2}, {1, 2}});
  ServiceSpec next = Spec(2);
  next.roles[0].env = {{"MODEL", "v2"}};
  life_.Apply(svc_, next, cluster_);
  PlaceAll();
  now_ += 1000;
  MakeReady(2);
  now_ += 100;
  report({{0, 2}, {1, 2}, {2, 0}});
  life_.Tick(svc_, cluster_, now_);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kReady);
  now_ += ServiceLifecycle::kRoutedForMs - 1;
  report({{0, 2}, {1, 2}, {2, 0}});
  life_.Tick(svc_, cluster_, now_);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kReady);
  now_ += 1;
  report({{0, 2}, {1, 2}, {2, 0}});
  life_.Tick(svc_, cluster_, now_);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kTerminating);
}

TEST_F(ServiceLifecycleTest, ARouterThatStoppedReportingHoldsTheRolloutAtMostTheTrafficWait) {
  PlaceAll();
  MakeReady(0);
  MakeReady(1);
  RouterTraffic old_report;
  old_report.at_ms = now_;
  old_report.ongoing_requests = 4;
  old_report.in_flight = {{0, 2}, {1, 2}};
  svc_.runtime.traffic["server"] = old_report;
  ServiceSpec next = Spec(2);
  next.roles[0].env = {{"MODEL", "v2"}};
  life_.Apply(svc_, next, cluster_);
  PlaceAll();
  now_ += 1000;
  MakeReady(2);
  const int64_t ready_at = now_;
  // Probes keep it Ready; no report comes.
  for (now_ = ready_at + 1000; now_ < ready_at + ServiceLifecycleOptions{}.traffic_wait_ms;
       now_ += 1000) {
    life_.Readiness(svc_, {"server", 2}, R(2).incarnation, true, "", cluster_, now_);
    life_.Tick(svc_, cluster_, now_);
    ASSERT_EQ(R(1).phase, ReplicaPhase::kReady) << "at +" << now_ - ready_at << " ms";
  }
  life_.Readiness(svc_, {"server", 2}, R(2).incarnation, true, "", cluster_, now_);
  life_.Tick(svc_, cluster_, now_);
  EXPECT_EQ(R(1).phase, ReplicaPhase::kTerminating);
}

TEST_F(ServiceLifecycleTest, AGroupsFirstReadyChangesItsAssignmentsForItsStartupPriority) {
  PlaceAll();
  const ReplicaStatus& r = R(0);
  for (int w = 0; w < 2; ++w) life_.ProcessRunning(svc_, {"server", 0}, r.incarnation, w, 1000 + w);
  ServiceEffects e = life_.Readiness(svc_, {"server", 0}, r.incarnation, true, "", cluster_, now_);
  EXPECT_TRUE(R(0).ready_once);
  EXPECT_TRUE(e.assignments_changed);  // the agents give it the normal priority
  EXPECT_EQ(e.notify_hosts, (std::set<std::string>{"h0-0", "h0-1"}));
  // Later probes change nothing.
  e = life_.Readiness(svc_, {"server", 0}, R(0).incarnation, true, "", cluster_, now_ + 1000);
  EXPECT_FALSE(e.assignments_changed);
  // startupNice 0: nothing to give back.
  ServiceSpec spec = Spec(1);
  spec.roles[0].startup_nice = 0;
  svc_ = ServiceLifecycle::Create(spec, 8, now_);
  PlaceAll();
  const ReplicaStatus& q = R(0);
  for (int w = 0; w < 2; ++w) life_.ProcessRunning(svc_, {"server", 0}, q.incarnation, w, 1000 + w);
  e = life_.Readiness(svc_, {"server", 0}, q.incarnation, true, "", cluster_, now_);
  EXPECT_TRUE(R(0).ready_once);
  EXPECT_FALSE(e.assignments_changed);
}

TEST_F(ServiceLifecycleTest, ChangesOutsideTheTemplateDoNotRoll) {
  PlaceAll();
  MakeReady(0);
  MakeReady(1);
  ServiceSpec next = Spec(2);
  next.roles[0].max_ongoing_requests = 9;
  next.roles[0].readiness.period_ms = 5000;
  ServiceEffects e = life_.Apply(svc_, next, cluster_);
  EXPECT_FALSE(HasEvent(e, "RollingUpdate"));
  EXPECT_EQ(Replicas(), (std::vector<int>{0, 1}));
  EXPECT_EQ(svc_.status.phase, ServicePhase::kReady);
}

TEST_F(ServiceLifecycleTest, DeleteStopsEveryGroupThenRemoves) {
  PlaceAll();
  MakeReady(0);
  ServiceEffects e = life_.Delete(svc_, cluster_);
  EXPECT_FALSE(e.remove);
  EXPECT_EQ(svc_.status.phase, ServicePhase::kDeleting);
  EXPECT_TRUE(ServiceLifecycle::WaitingForSlice(svc_).empty());
  e = ConfirmAll(0);
  EXPECT_FALSE(e.remove);
  e = ConfirmAll(1);
  EXPECT_TRUE(e.remove);
  EXPECT_TRUE(HasEvent(e, "Deleted"));
}

TEST_F(ServiceLifecycleTest, DeleteOfANeverPlacedServiceRemovesAtOnce) {
  ServiceEffects e = life_.Delete(svc_, cluster_);
  EXPECT_TRUE(e.remove);
}

TEST_F(ServiceLifecycleTest, TheAutoscalerScalesFromZeroOnTheFirstWaitingRequest) {
  ServiceSpec spec = Spec(0);
  AutoscalerConfig as;
  as.min_replicas = 0;
  as.max_replicas = 4;
  spec.roles[0].autoscaling = as;
  svc_ = ServiceLifecycle::Create(spec, 7, now_);
  EXPECT_TRUE(svc_.status.Role("server")->replicas.empty());
  EXPECT_EQ(svc_.status.phase, ServicePhase::kReady);
  life_.Load(svc_, "server", {now_, 0});
  EXPECT_FALSE(life_.Tick(svc_, cluster_, now_).persist);
  now_ += 1000;
  life_.Load(svc_, "server", {now_, 1});
  ServiceEffects e = life_.Tick(svc_, cluster_, now_);
  EXPECT_TRUE(HasEvent(e, "Autoscaled"));
  EXPECT_EQ(svc_.status.Role("server")->desired_replicas, 1);
  EXPECT_EQ(Replicas(), (std::vector<int>{0}));
  EXPECT_NE(svc_.status.Role("server")->autoscaler.reason.find("1 at once"), std::string::npos);
  // An autoscaled role cannot be scaled by hand.
  auto bad = life_.Scale(svc_, "server", 3, cluster_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("autoscaled"), std::string::npos);
}

// The lifecycle passes the autoscaler what it knows of the role: groups still starting count
// as capacity on the way, and a scale-up takes no more than the cluster's free slices.
TEST_F(ServiceLifecycleTest, TheAutoscalerSeesStartingGroupsAndTheFreeSlices) {
  ServiceSpec spec = Spec(0);
  AutoscalerConfig as;
  as.max_replicas = 8;
  as.target_ongoing_requests = 2;
  as.upscale_delay_ms = 0;
  spec.roles[0].autoscaling = as;
  svc_ = ServiceLifecycle::Create(spec, 7, now_);
  cluster_.free_slices = 0;
  now_ += 1000;
  life_.Load(svc_, "server", {now_, 8});
  life_.Tick(svc_, cluster_, now_);
  EXPECT_EQ(svc_.status.Role("server")->desired_replicas, 1);
  EXPECT_NE(svc_.status.Role("server")->autoscaler.reason.find("no free slice"), std::string::npos)
      << svc_.status.Role("server")->autoscaler.reason;
  cluster_.free_slices = 1;
  now_ += 1000;
  life_.Load(svc_, "server", {now_, 8});
  life_.Tick(svc_, cluster_, now_);
  EXPECT_EQ(svc_.status.Role("server")->desired_replicas, 2);  // 1 + the one free slice
  // With slices free it reaches the want (4 = 8 / 2); while those groups start, the same load
  // asks for no more: they count as capacity on the way.
  cluster_.free_slices = 8;
  for (int i = 0; i < 30; ++i) {
    now_ += 1000;
    life_.Load(svc_, "server", {now_, 8});
    life_.Tick(svc_, cluster_, now_);
  }
  EXPECT_EQ(svc_.status.Role("server")->desired_replicas, 4);
  EXPECT_NE(svc_.status.Role("server")->autoscaler.reason.find("4 starting"), std::string::npos)
      << svc_.status.Role("server")->autoscaler.reason;
}

// Prefill and decode roles are roles like any other: each gets its own groups, placed on its
// own slices, and each autoscales on its own signal (prefill: queued prompt tokens; decode:
// ongoing requests) from the same kind of load report.
TEST_F(ServiceLifecycleTest, PrefillAndDecodeRolesArePlacedAndScaledEachOnItsOwnSignal) {
  ServiceSpec spec;
  spec.name = "llm";
  ServiceRoleSpec decode = Role(1), prefill = Role(1);
  decode.name = "decode";
  decode.kv_role = KvRole::kDecode;
  prefill.name = "prefill";
  prefill.kv_role = KvRole::kPrefill;
  prefill.topology = Shape{2, 2, 2};
  AutoscalerConfig tokens;
  tokens.min_replicas = 1;
  tokens.max_replicas = 4;
  tokens.signal = AutoscaleSignal::kQueuedPromptTokens;
  tokens.target_queued_prompt_tokens = 1000;
  tokens.upscale_delay_ms = 0;
  prefill.autoscaling = tokens;
  AutoscalerConfig ongoing = tokens;
  ongoing.signal = AutoscaleSignal::kOngoingRequests;
  ongoing.target_ongoing_requests = 4;
  decode.autoscaling = ongoing;
  spec.roles = {decode, prefill};
  svc_ = ServiceLifecycle::Create(spec, 7, now_);
  EXPECT_EQ(svc_.spec.FrontRole()->name, "decode");
  EXPECT_EQ(ServiceLifecycle::WaitingForSlice(svc_).size(), 2u);  // one group per role
  PlaceAll();
  EXPECT_NE(R(0, "decode").slice, R(0, "prefill").slice);
  // 3,000 prompt tokens waiting and 2 ongoing requests: prefill wants 3 and steps to 2 (a step
  // at most doubles), decode stays.
  now_ += 1000;
  life_.Load(svc_, "prefill", {now_, 2, 3000});
  life_.Load(svc_, "decode", {now_, 2, 0});
  ServiceEffects e = life_.Tick(svc_, cluster_, now_);
  EXPECT_TRUE(HasEvent(e, "Autoscaled"));
  EXPECT_EQ(svc_.status.Role("prefill")->desired_replicas, 2)
      << svc_.status.Role("prefill")->autoscaler.reason;
  EXPECT_EQ(svc_.status.Role("decode")->desired_replicas, 1)
      << svc_.status.Role("decode")->autoscaler.reason;
  EXPECT_EQ(Replicas("prefill"), (std::vector<int>{0, 1}));
  EXPECT_EQ(ServiceLifecycle::WaitingForSlice(svc_).size(), 1u);  // the new prefill group
}

TEST(ServiceNamesTest, ReplicaWorkloadNamesRoundTripAndNeverMatchAJobName) {
  EXPECT_EQ(ReplicaWorkloadName("llm", "server", 3), "llm.server.3");
  auto ref = ParseReplicaWorkloadName("llm.server.3");
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->service, "llm");
  EXPECT_EQ(ref->role, "server");
  EXPECT_EQ(ref->replica, 3);
  EXPECT_FALSE(ParseReplicaWorkloadName("train-demo").has_value());
  EXPECT_FALSE(ParseReplicaWorkloadName("a.b.c.d").has_value());
  EXPECT_FALSE(ParseReplicaWorkloadName("a.b.c.d.1").has_value());
  EXPECT_FALSE(ParseReplicaWorkloadName("team-x.train").has_value());  // a TrainJob's key
  // A Service of another namespace: its key holds the namespace (common/object_key.h).
  auto other = ParseReplicaWorkloadName(ReplicaWorkloadName("team-s.llm", "server", 2));
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->service, "team-s.llm");
  EXPECT_EQ(other->role, "server");
  EXPECT_EQ(other->replica, 2);
  EXPECT_FALSE(ParseReplicaWorkloadName("a.b.x").has_value());
  EXPECT_FALSE(ParseReplicaWorkloadName("a.b.-1").has_value());
}

}  // namespace
}  // namespace tessera
