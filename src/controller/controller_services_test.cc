// Services in the head's controller, through its public API with a FakeClock and a MemoryStore:
// placement of groups on whole slices beside training, the processes' assignments and
// environment, readiness, a process exit recreating its group after the backoff, and a
// restarted head keeping the groups' slices.
#include <gtest/gtest.h>

#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

Json ServiceDoc(const std::string& name, int replicas) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "Service"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"accelerator", "v6e"},
            {"topology", "4x4"},
            {"command", {"python3", "server.py"}},
            {"replicas", replicas},
            {"readiness", {{"period", "1s"}, {"startupGrace", "60s"}}}}}};
}

class ControllerServicesTest : public ControllerTest {
 protected:
  Json Service(const std::string& name) { return Ok(c_->GetService(name)); }
  const Json& Replica(const Json& svc, int i) { return svc["status"]["roles"][0]["replicas"][i]; }
  // The assignments of `host` that belong to a service.
  std::vector<Json> ServiceAssignments(const std::string& host) {
    std::vector<Json> out;
    Json a = Ok(c_->Assignments(host));
    for (const Json& x : a["assignments"])
      if (x["job"].get<std::string>().find('.') != std::string::npos) out.push_back(x);
    return out;
  }
  // Every due probe answers `ready`.
  void ProbeAll(bool ready) {
    for (const auto& t : c_->DueProbes()) c_->ReportReadiness(t, ready, ready ? "" : "HTTP 503");
  }
};

TEST_F(ControllerServicesTest, GroupsTakeWholeSlicesWithTheServingEnvironment) {
  RegisterTwoSlices();
  Ok(c_->Apply(ServiceDoc("llm", 2)));
  Json svc = Service("llm");
  ASSERT_EQ(svc["status"]["roles"][0]["replicas"].size(), 2u);
  std::set<std::string> slices, ports;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(Replica(svc, i)["phase"], "Starting");
    EXPECT_EQ(Replica(svc, i)["hosts"].size(), 4u);
    slices.insert(Replica(svc, i)["slice"].get<std::string>());
  }
  EXPECT_EQ(slices, (std::set<std::string>{"slice-0", "slice-1"}));
  // A training job finds no free slice while the service holds both.
  Ok(c_->CreateJob(JobDoc("train", 1)));
  EXPECT_EQ(Phase("train"), "Pending");

  // Each host runs one process of one group, with the serving variables.
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) {
      std::vector<Json> mine = ServiceAssignments(HostName(s, w));
      ASSERT_EQ(mine.size(), 1u) << HostName(s, w);
      const Json& env = mine[0]["env"];
      EXPECT_EQ(env["TESSERA_SERVICE"], "llm");
      EXPECT_EQ(env["TESSERA_ROLE"], "server");
      EXPECT_EQ(env["TESSERA_GROUP_SIZE"], "4");
      EXPECT_EQ(env["TESSERA_WORKER_INDEX"], env["TPU_WORKER_ID"]);
      EXPECT_TRUE(env.contains("MASTER_PORT"));
      ports.insert(env["PORT"].get<std::string>());
    }
  // Every agent shares 127.0.0.1 here: every process has its own port.
  EXPECT_EQ(ports.size(), 8u);

  HeartbeatAll("Running");
  EXPECT_EQ(c_->DueProbes().size(), 2u);
  ProbeAll(true);
  svc = Service("llm");
  EXPECT_EQ(svc["status"]["phase"], "Ready");
  ASSERT_EQ(svc["status"]["endpoints"].size(), 2u);
  for (const Json& e : svc["status"]["endpoints"]) EXPECT_TRUE(e["ready"].get<bool>());
  EXPECT_TRUE(c_->DueProbes().empty());  // the next one a period later
  clock_.AdvanceMs(1000);
  EXPECT_EQ(c_->DueProbes().size(), 2u);

  // Deleting the service frees the slices for training once the agents confirm.
  Ok(c_->DeleteService("llm"));
  HeartbeatAll("Running");
  EXPECT_EQ(c_->GetService("llm").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Phase("train"), "Starting");
}

TEST_F(ControllerServicesTest, AProcessExitStopsItsGroupAndStartsItAgainAfterTheBackoff) {
  RegisterTwoSlices();
  Ok(c_->Apply(ServiceDoc("llm", 2)));
  HeartbeatAll("Running");
  ProbeAll(true);
  const Json before = Service("llm");
  const std::string victim_host = Replica(before, 0)["hosts"][2];
  const int victim_incarnation = Replica(before, 0)["incarnation"];
  // Worker 2 of replica 0 dies (every other process still runs).
  HeartbeatAll("Exited", 137, victim_host);
  Json svc = Service("llm");
  EXPECT_EQ(Replica(svc, 0)["phase"], "Recreating");
  EXPECT_EQ(Replica(svc, 0)["restarts"], 1);
  EXPECT_EQ(Replica(svc, 1)["phase"], "Ready");
  EXPECT_EQ(svc["status"]["phase"], "Degraded");
  ASSERT_EQ(svc["status"]["endpoints"].size(), 1u);
  // The leader's host is told to kill what is left of the group at once.
  const std::string leader_host = Replica(before, 0)["hosts"][0];
  Json snap = Ok(c_->Assignments(leader_host));
  EXPECT_TRUE(ServiceAssignments(leader_host).empty());
  ASSERT_TRUE(snap.contains("stop")) << snap.dump();
  EXPECT_EQ(snap["stop"][0]["graceMs"], 0);

  // Its hosts report nothing running any more: the stop is confirmed; 1 s later it starts
  // again on the same slice, a new incarnation with a fresh rendezvous port.
  for (const Json& h : Replica(before, 0)["hosts"])
    Ok(Beat(*c_, h.get<std::string>(),
            {{"workers", Json::array()}, {"revision", snap["revision"]}}));
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Replica(Service("llm"), 0)["phase"], "Recreating");
  clock_.AdvanceMs(1000);
  ASSERT_TRUE(c_->Tick().ok());
  svc = Service("llm");
  EXPECT_EQ(Replica(svc, 0)["phase"], "Starting");
  EXPECT_EQ(Replica(svc, 0)["incarnation"], victim_incarnation + 1);
  EXPECT_EQ(Replica(svc, 0)["slice"], Replica(before, 0)["slice"]);
  std::vector<Json> again = ServiceAssignments(leader_host);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0]["attempt"], victim_incarnation + 1);
}

// spec.warmStart of a Service: every process of every group is assigned
// TESSERA_WARM_PRELOAD, as a TrainJob's workers are (the agents' warm pools key on it): the
// first groups, a group recreated after a process exit, a scaled-up group, and after a head
// restart (the stored spec keeps it). Turning it off rolls nothing; later groups start cold.
TEST_F(ControllerServicesTest, WarmStartReachesEveryGroupsAssignments) {
  RegisterTwoSlices();
  Json doc = ServiceDoc("llm", 1);
  doc["spec"]["warmStart"] = {{"preload", {"torch", "numpy"}}};
  Ok(c_->Apply(doc));
  auto preload_on = [&](const std::string& host) {
    std::vector<Json> mine = ServiceAssignments(host);
    EXPECT_EQ(mine.size(), 1u) << host;
    return mine.empty() || !mine[0]["env"].contains("TESSERA_WARM_PRELOAD")
               ? std::string()
               : mine[0]["env"]["TESSERA_WARM_PRELOAD"].get<std::string>();
  };
  Json svc = Service("llm");
  for (const Json& h : Replica(svc, 0)["hosts"])
    EXPECT_EQ(preload_on(h.get<std::string>()), "torch,numpy") << h;
  EXPECT_EQ(svc["spec"]["roles"][0]["warmStart"]["preload"], Json({"torch", "numpy"}));
  HeartbeatAll("Running");
  ProbeAll(true);

  // A follower exits: the recreated group (a new incarnation) is assigned it again.
  const Json before = Service("llm");
  const int incarnation = Replica(before, 0)["incarnation"];
  const std::string leader_host = Replica(before, 0)["hosts"][0];
  const std::string follower_host = Replica(before, 0)["hosts"][1];
  HeartbeatAll("Exited", 137, follower_host);
  Json snap = Ok(c_->Assignments(leader_host));
  for (const Json& h : Replica(before, 0)["hosts"])
    Ok(Beat(*c_, h.get<std::string>(),
            {{"workers", Json::array()}, {"revision", snap["revision"]}}));
  ASSERT_TRUE(c_->Tick().ok());
  clock_.AdvanceMs(1000);
  ASSERT_TRUE(c_->Tick().ok());
  ASSERT_EQ(Replica(Service("llm"), 0)["incarnation"], incarnation + 1);
  for (const Json& h : Replica(before, 0)["hosts"])
    EXPECT_EQ(preload_on(h.get<std::string>()), "torch,numpy") << h;

  // A scaled-up group, after a head restart over the same store.
  Start();
  Ok(c_->ScaleService("llm", "server", 2));
  svc = Service("llm");
  ASSERT_EQ(svc["status"]["roles"][0]["replicas"].size(), 2u);
  for (const Json& h : Replica(svc, 1)["hosts"])
    EXPECT_EQ(preload_on(h.get<std::string>()), "torch,numpy") << h;

  // Off again: no rollout (the generation stays), and the assignments no longer carry it.
  const int generation = svc["status"]["roles"][0]["generation"];
  doc["spec"].erase("warmStart");
  doc["spec"]["replicas"] = 2;
  Ok(c_->Apply(doc));
  svc = Service("llm");
  EXPECT_EQ(svc["status"]["roles"][0]["generation"], generation);
  EXPECT_FALSE(svc["spec"]["roles"][0].contains("warmStart"));
  for (const Json& h : Replica(svc, 1)["hosts"])
    EXPECT_EQ(preload_on(h.get<std::string>()), "") << h;
}

TEST_F(ControllerServicesTest, ARestartedHeadKeepsTheGroupsAndTheirSlices) {
  RegisterTwoSlices();
  Ok(c_->Apply(ServiceDoc("llm", 1)));
  HeartbeatAll("Running");
  ProbeAll(true);
  const Json before = Service("llm");
  Start();  // a new controller over the same store
  const Json after = Service("llm");
  EXPECT_EQ(Replica(after, 0)["hosts"], Replica(before, 0)["hosts"]);
  EXPECT_EQ(Replica(after, 0)["phase"], "Ready");
  Ok(c_->CreateJob(JobDoc("train", 2)));
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Phase("train"), "Pending");  // one of the two slices is the service's
}

TEST_F(ControllerServicesTest, AHeadRestartedLongAfterTheLastProbeKeepsReadyReplicasReady) {
  RegisterTwoSlices();
  Ok(c_->Apply(ServiceDoc("llm", 1)));
  HeartbeatAll("Running");
  ProbeAll(true);
  clock_.AdvanceMs(60'000);  // the head down for a minute: nothing probed
  Start();
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Replica(Service("llm"), 0)["phase"], "Ready")
      << Replica(Service("llm"), 0);      // still routed to
  EXPECT_EQ(c_->DueProbes().size(), 1u);  // and probed at once
  // No answer within the probe timeout (30 s): stale, Unready.
  clock_.AdvanceMs(30'001);
  HeartbeatAll("Running");
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Replica(Service("llm"), 0)["phase"], "Unready");
}

TEST_F(ControllerServicesTest, AHostRunningAGroupIsNotDeletedUntilTheServiceIsGone) {
  RegisterTwoSlices();
  Ok(c_->Apply(ServiceDoc("llm", 1)));
  const Json svc = Service("llm");
  const std::string host = Replica(svc, 0)["hosts"][0].get<std::string>();
  Status busy = Err(c_->DeleteHost(host));
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(busy.message().find("service/llm"), std::string::npos) << busy.message();
  EXPECT_EQ(c_->ListHosts()["items"].size(), 8u);  // nothing was removed
}

TEST_F(ControllerServicesTest, ScaleAndLoadReportsNameTheirErrors) {
  RegisterTwoSlices();
  Ok(c_->Apply(ServiceDoc("llm", 1)));
  Status e = Err(c_->ScaleService("llm", "decode", 2));
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(e), "role");
  EXPECT_EQ(Err(c_->ScaleService("nope", "server", 2)).code(), StatusCode::kNotFound);
  Ok(c_->ScaleService("llm", "server", 2));
  EXPECT_EQ(Service("llm")["status"]["roles"][0]["replicas"].size(), 2u);
  EXPECT_EQ(FieldOf(Err(c_->ReportServiceLoad("llm", "decode", 1))), "role");
  Ok(c_->ReportServiceLoad("llm", "server", 3));
  // A shape this cluster can never hold, in a role of spec.roles: the field names the role.
  Json big = ServiceDoc("big", 1);
  Json role = big["spec"];
  role["name"] = "server";
  role["topology"] = "8x16";
  big["spec"] = {{"roles", {role}}};
  e = Err(c_->Apply(big));
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(e), "spec.roles[0].topology") << e.message();
}

}  // namespace
}  // namespace tessera::controller
