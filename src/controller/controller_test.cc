#include "controller/controller.h"

#include <gtest/gtest.h>

#include "controller/controller_test_util.h"
#include "store/sqlite_store.h"

namespace tessera::controller {
namespace {

TEST_F(ControllerTest, TwoSliceJobGetsOneWorkerPerHostWithTheFullEnvironment) {
  RegisterTwoSlices();
  Json job = Ok(c_->CreateJob(JobDoc("train", 2)));
  EXPECT_EQ(Phase("train"), "Starting");
  std::set<std::string> ranks;
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) {
      Json a = Ok(c_->Assignments(HostName(s, w)))["assignments"];
      ASSERT_EQ(a.size(), 1u);
      const Json& env = a[0]["env"];
      EXPECT_EQ(env["TPU_WORKER_ID"], std::to_string(w));
      EXPECT_EQ(env["MEGASCALE_SLICE_ID"], std::to_string(s));
      EXPECT_EQ(env["WORLD_SIZE"], "8");
      EXPECT_EQ(env["TPU_NAME"], "slice-" + std::to_string(s));
      EXPECT_EQ(env["TPU_WORKER_HOSTNAMES"], HostName(s, 0) + "," + HostName(s, 1) + "," +
                                                 HostName(s, 2) + "," + HostName(s, 3));
      EXPECT_EQ(env["STEPS"], "5");
      ranks.insert(env["RANK"].get<std::string>());
    }
  EXPECT_EQ(ranks.size(), 8u);
  HeartbeatAll("Running");
  EXPECT_EQ(Phase("train"), "Running");
  HeartbeatAll("Exited", 0);
  EXPECT_EQ(Phase("train"), "Succeeded");
  // Agents confirmed on the same heartbeats; the chips are free again.
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 0);
  EXPECT_TRUE(Ok(c_->Assignments(HostName(0, 0)))["assignments"].empty());
}

// A clock each read of which moves it on by step_ms: what a rebuild that takes that long looks
// like to the controller, which times its inventory rebuilds with its clock.
class SteppingClock final : public Clock {
 public:
  int64_t NowMs() const override { return now_ms_ += step_ms; }
  void AdvanceMs(int64_t ms) { now_ms_ += ms; }
  int64_t step_ms = 0;

 private:
  mutable int64_t now_ms_ = 1'000'000;
};

int HealthyHosts(const Inventory& inventory) {
  int healthy = 0;
  for (const Host& h : inventory.hosts()) healthy += h.health == Health::kHealthy;
  return healthy;
}

TEST(InventoryPacingTest, JoiningHostsWaitForAPacedRebuildAndAHostThatLeavesDoesNot) {
  auto store = OpenMemoryStore();
  ASSERT_NE(store, nullptr);
  SteppingClock clock;
  Controller c(*store, clock, ControllerOptions{});
  ASSERT_TRUE(c.Load().ok());
  const auto register_slice = [&](int s) {
    for (int w = 0; w < 4; ++w) Ok(Register(c, SliceHostDoc(s, w)));
  };
  const auto phase = [&](const std::string& job) {
    return Ok(c.GetJob(job))["status"]["phase"].get<std::string>();
  };
  const auto slow_pass = [&] {  // its rebuild takes 50 ms: the next paced one waits 1 s
    clock.step_ms = 50;
    const Status pass = c.RunPass();
    clock.step_ms = 0;
    return pass;
  };

  register_slice(0);
  ASSERT_TRUE(slow_pass().ok());
  Ok(c.CreateJob(JobDoc("first", 1)));
  Ok(c.CreateJob(JobDoc("second", 1)));
  EXPECT_EQ(phase("first"), "Starting");
  EXPECT_EQ(phase("second"), "Pending");

  // A second slice joins within 20 x 50 ms of that rebuild: the pass leaves the inventory as
  // it was, then rebuilds once the time is up.
  register_slice(1);
  ASSERT_TRUE(c.RunPass().ok());
  EXPECT_EQ(HealthyHosts(c.InventorySnapshot()), 4);
  EXPECT_EQ(phase("second"), "Pending");
  clock.AdvanceMs(20 * 50);
  ASSERT_TRUE(slow_pass().ok());
  EXPECT_EQ(HealthyHosts(c.InventorySnapshot()), 8);
  EXPECT_EQ(phase("second"), "Starting");

  // A new job is checked against every registered host, paced or not: with slices 2 and 3
  // a 4-slice job fits the cluster, so it is not refused as too big for it (it waits).
  register_slice(2);
  register_slice(3);
  ASSERT_TRUE(c.RunPass().ok());
  EXPECT_EQ(HealthyHosts(c.InventorySnapshot()), 8);
  Ok(c.CreateJob(JobDoc("four", 4)));
  EXPECT_EQ(phase("four"), "Pending");
  EXPECT_EQ(HealthyHosts(c.InventorySnapshot()), 16);

  // A host that leaves is out of the inventory at the next pass, however recent the last
  // rebuild: nothing may be placed on it.
  register_slice(4);
  ASSERT_TRUE(slow_pass().ok());
  EXPECT_EQ(HealthyHosts(c.InventorySnapshot()), 20);
  register_slice(5);
  Ok(c.DeleteHost("s4-w3"));
  ASSERT_TRUE(c.RunPass().ok());
  EXPECT_EQ(HealthyHosts(c.InventorySnapshot()), 20 - 1 + 4);

  // A wall clock set back (an NTP step) does not hold joining hosts off until it catches up.
  register_slice(6);
  ASSERT_TRUE(slow_pass().ok());
  EXPECT_EQ(HealthyHosts(c.InventorySnapshot()), 27);
  register_slice(7);
  ASSERT_TRUE(c.RunPass().ok());
  EXPECT_EQ(HealthyHosts(c.InventorySnapshot()), 27);
  clock.AdvanceMs(-3'600'000);
  ASSERT_TRUE(c.RunPass().ok());
  EXPECT_EQ(HealthyHosts(c.InventorySnapshot()), 31);
}

TEST_F(ControllerTest, AJobThatDoesNotFitNowWaitsWithTheReason) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("first", 2)));
  Ok(c_->CreateJob(JobDoc("second", 1)));
  Json second = Ok(c_->GetJob("second"));
  EXPECT_EQ(second["status"]["phase"], "Pending");
  EXPECT_EQ(second["status"]["reason"], "NoFreeSlice");
  EXPECT_NE(second["status"]["message"].get<std::string>().find("0 of 2 are free"),
            std::string::npos);
  // A shape the cluster can never hold is refused at once, naming the field.
  Status too_big = Err(c_->CreateJob(JobDoc("huge", 3)));
  EXPECT_EQ(too_big.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(too_big), "spec.topology");
  EXPECT_EQ(Err(c_->CreateJob(JobDoc("first", 1))).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(FieldOf(Err(c_->CreateJob(JobDoc("bad", 1, "4x5")))), "spec.topology");
}

TEST_F(ControllerTest, AFailedWorkerStopsTheWholeJobAndFreesChipsOnlyOnceConfirmed) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 2)));
  HeartbeatAll("Running");
  // Only s1-w2 reports its exit; the others still run.
  HeartbeatAll("Exited", 3, HostName(1, 2));
  Json job = Ok(c_->GetJob("train"));
  EXPECT_EQ(job["status"]["phase"], "Failed");
  EXPECT_EQ(job["status"]["reason"], "WorkerFailed");
  EXPECT_NE(
      job["status"]["message"].get<std::string>().find("rank 6 on host s1-w2 exited with code 3"),
      std::string::npos);
  // No host is told to run the job any more, but the chips stay held until agents confirm.
  EXPECT_TRUE(Ok(c_->Assignments(HostName(0, 0)))["assignments"].empty());
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);
  // The next heartbeats carry no running worker of the job: released.
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w)
      Ok(Beat(*c_, HostName(s, w), {{"workers", Json::array()}, {"revision", 1000}}));
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 0);
}

// A heartbeat never runs a scheduling pass itself (the head's io threads would queue behind
// it): one that freed chips asks the loop for one, and one that changed nothing does not.
TEST_F(ControllerTest, AHeartbeatAsksForAPassInsteadOfRunningOne) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("first", 2)));
  Ok(c_->CreateJob(JobDoc("second", 2)));
  int passes_wanted = 0;
  c_->SetPassListener([&passes_wanted] { ++passes_wanted; });
  auto beat_all = [&](const Json& workers_of, int64_t revision) {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        const std::string h = HostName(s, w);
        Json workers =
            workers_of.is_null() ? WorkerReports(Ok(c_->Assignments(h)), "Running") : workers_of;
        Json body = {{"workers", workers}, {"revision", revision}};
        auto b = protocol::ParseHeartbeat(body.dump());
        ASSERT_TRUE(b.ok()) << b.status().ToString();
        Ok(c_->Heartbeat(h, *b));
      }
  };
  beat_all(nullptr, 0);
  EXPECT_EQ(Phase("first"), "Running");
  EXPECT_EQ(passes_wanted, 0) << "nothing was freed";
  Ok(c_->DeleteJob("first"));
  beat_all(Json::array(), 1'000'000);  // every worker of "first" is gone: its chips are free
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 0);
  EXPECT_GT(passes_wanted, 0);
  EXPECT_EQ(Phase("second"), "Pending") << "no heartbeat placed it";
  ASSERT_TRUE(c_->RunPass().ok());
  EXPECT_EQ(Phase("second"), "Starting");
}

TEST_F(ControllerTest, ALostHostFailsItsJobAfterTheLease) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 1)));
  HeartbeatAll("Running");
  clock_.AdvanceMs(3000);
  for (int w = 0; w < 4; ++w)
    if (w != 1) Ok(Beat(*c_, HostName(0, w), {{"workers", Json::array()}}));
  for (int w = 0; w < 4; ++w) Ok(Beat(*c_, HostName(1, w), {{"workers", Json::array()}}));
  clock_.AdvanceMs(2500);  // s0-w1 is now 5.5 s silent; lease is 5 s
  EXPECT_TRUE(c_->Tick().ok());
  Json job = Ok(c_->GetJob("train"));
  EXPECT_EQ(job["status"]["reason"], "HostLost");
  EXPECT_EQ(LostHosts(), 1);
}

// Leases when the head itself stalls: a controller that allows ticks 0.5 s apart (lease 5 s),
// running job "train" on one slice.
class LeaseStallTest : public ControllerTest {
 protected:
  void StartWithTrainRunning() {
    options_.lease_stall_ms = 500;  // lease_ms stays 5000
    StartAgain();
    RegisterTwoSlices();
    Ok(c_->CreateJob(JobDoc("train", 1)));
    HeartbeatAll("Running");
    ASSERT_TRUE(c_->Tick().ok());
  }
  void StartAgain() {
    c_ = std::make_unique<Controller>(*store_, clock_, options_);
    ASSERT_TRUE(c_->Load().ok());
  }
  // The head serves and s0-w1 stays silent while the others beat: having been silent 0.5 s, it
  // is lost once it has been silent for the lease (0.5 s + 12 x 0.4 s = 5.3 s), not before.
  void ExpectTheSilentHostLostAfterItsLease() {
    for (int step = 1; step <= 11; ++step) {
      AdvanceBeatAllButAndTick(400, "s0-w1");
      ASSERT_EQ(LostHosts(), 0) << "after " << step << " steps of 0.4 s";
    }
    AdvanceBeatAllButAndTick(400, "s0-w1");
    EXPECT_EQ(LostHosts(), 1);
    EXPECT_EQ(Ok(c_->GetJob("train"))["status"]["reason"], "HostLost");
  }

  ControllerOptions options_;
};

// The head's own stall (a slow store write under its lock, a machine that did not schedule it)
// is not a host's silence: heartbeats sent meanwhile were waiting for the lock.
TEST_F(LeaseStallTest, TheHeadsOwnStallIsNotCountedAsAHostsSilence) {
  StartWithTrainRunning();
  // Nothing ran for 6 s: 5.5 s of it is the head's stall, so each host has been silent 0.5 s.
  clock_.AdvanceMs(6000);
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(LostHosts(), 0);
  EXPECT_EQ(Ok(c_->GetJob("train"))["status"]["phase"], "Running");
  ExpectTheSilentHostLostAfterItsLease();
  Json job = Ok(c_->GetJob("train"));
  EXPECT_NE(job["status"]["message"].get<std::string>().find("5.5 s of it the head itself stalled"),
            std::string::npos)
      << job["status"]["message"];
}

// A new leader (or a restarted head) gives every stored host a fresh lease when it loads, then
// spends seconds reading the rest of the store and starting to serve before its first tick: no
// agent could reach it meanwhile, so that gap is the head's own stall (issue 35: a leader over
// 100,000 stored jobs loaded for 7 s, past the 5 s lease, and its first tick declared all 1,000
// hosts lost). Hosts that stay silent once it serves are still lost after their lease.
TEST_F(LeaseStallTest, AHostsLeaseIsNotSpentWhileTheHeadLoadsAndStarts) {
  StartWithTrainRunning();
  // The head is replaced: the next one loads, and its first tick comes 7 s later.
  StartAgain();
  clock_.AdvanceMs(7000);
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(LostHosts(), 0) << "the load and start were counted as the hosts' silence";
  EXPECT_EQ(Ok(c_->GetJob("train"))["status"]["phase"], "Running");
  // Every agent but s0-w1's comes back (0.5 s of the start counts as silence).
  ExpectTheSilentHostLostAfterItsLease();
}

TEST_F(ControllerTest, DeleteStopsWorkersThenRemovesAndIsIdempotent) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 2)));
  HeartbeatAll("Running");
  EXPECT_EQ(Ok(c_->DeleteJob("train"))["status"], "Terminating");
  EXPECT_EQ(Ok(c_->DeleteJob("train"))["status"], "Terminating");
  EXPECT_TRUE(Ok(c_->Assignments(HostName(1, 3)))["assignments"].empty());
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w)
      Ok(Beat(*c_, HostName(s, w), {{"workers", Json::array()}, {"revision", 1000}}));
  EXPECT_EQ(Phase("train"), "Gone");
  EXPECT_EQ(Err(c_->DeleteJob("train")).code(), StatusCode::kNotFound);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 0);
}

TEST_F(ControllerTest, ARestartedControllerKeepsJobsAndTheSameAssignments) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 2)));
  HeartbeatAll("Running");
  const Json before = Ok(c_->Assignments(HostName(1, 1)))["assignments"];
  Start();  // a new controller on the same store, as after kill -9 of the head
  EXPECT_EQ(Phase("train"), "Running");
  EXPECT_EQ(Ok(c_->Assignments(HostName(1, 1)))["assignments"], before);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);
}

TEST_F(ControllerTest, RegistrationErrorsNameTheField) {
  EXPECT_EQ(FieldOf(Err(Register(*c_, {{"name", "Bad_Name"}, {"generation", "v6e"}}))), "name");
  EXPECT_EQ(FieldOf(Err(Register(*c_, {{"name", "h"}, {"generation", "v9"}}))), "generation");
  EXPECT_EQ(
      FieldOf(Err(Register(*c_, {{"name", "h"},
                                 {"generation", "v6e"},
                                 {"slice", {{"name", "s"}, {"topology", "4x4"}, {"worker", 4}}}}))),
      "slice.worker");
  RegisterTwoSlices();
  EXPECT_EQ(
      Err(Register(*c_, {{"name", "other"},
                         {"generation", "v6e"},
                         {"chips", 4},
                         {"slice", {{"name", "slice-0"}, {"topology", "4x4"}, {"worker", 1}}}}))
          .code(),
      StatusCode::kAlreadyExists);
}

TEST_F(ControllerTest, AHostNameWithUpperCaseOrADomainRegistersUnderItsNormalisedName) {
  // gethostname() is the agent's default name; both sides apply protocol::NormalizeHostName.
  Json reply = Ok(Register(*c_, {{"name", "TPU-Host-1.Zone-A.Example.COM"},
                                 {"generation", "v6e"},
                                 {"chips", 4},
                                 {"slice", {{"name", "s"}, {"topology", "4x4"}, {"worker", 0}}}}));
  EXPECT_EQ(reply["host"], "tpu-host-1.zone-a.example.com");
  EXPECT_EQ(c_->ListHosts()["items"][0]["metadata"]["name"], "tpu-host-1.zone-a.example.com");
  Ok(Beat(*c_, "tpu-host-1.zone-a.example.com", Json::object()));
  // A name no rule can make valid is refused once, naming the field.
  EXPECT_EQ(FieldOf(Err(Register(*c_, {{"name", "host_1"}, {"generation", "v6e"}, {"chips", 4}}))),
            "name");
}

// --- admission through queues ---

Json ClusterQueueDoc(const std::string& name, int64_t nominal_chips,
                     const std::string& within = "LowerPriority") {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "ClusterQueue"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"quotas", {{{"generation", "v6e"}, {"nominalQuota", nominal_chips}}}},
            {"preemption", {{"withinClusterQueue", within}}}}}};
}

Json QueuedJobDoc(const std::string& name, int slices, const std::string& queue,
                  const std::string& priority) {
  Json doc = JobDoc(name, slices);
  doc["metadata"]["queue"] = queue;
  if (!priority.empty()) doc["spec"]["priority"] = priority;
  return doc;
}

class AdmissionControllerTest : public ControllerTest {
 protected:
  void SetUpQueues(int64_t nominal_chips) {
    RegisterTwoSlices();
    Ok(c_->Apply(PriorityClassDoc("low", 1)));
    Ok(c_->Apply(PriorityClassDoc("high", 100)));
    Ok(c_->Apply(ClusterQueueDoc("research", nominal_chips)));
    Ok(c_->Apply(LocalQueueDoc("team-a", "research")));
  }
  Json Status(const std::string& job) { return Ok(c_->GetJob(job))["status"]; }
  // Every host confirms that it runs nothing any more.
  void ConfirmAllStopped() {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w)
        Ok(Beat(*c_, HostName(s, w), {{"workers", Json::array()}, {"revision", 1000}}));
  }
};

// What would help is found at most every what_helps_interval_ms (and at most a tenth of the
// head's time): the cycles between give reasons only, and a waiting job keeps the list the last
// such cycle found while its reason stays the same.
TEST(WhatHelpsPacingTest, CyclesBetweenCarryTheLastListsOver) {
  std::unique_ptr<store::Store> store = OpenMemoryStore();
  ASSERT_NE(store, nullptr);
  FakeClock clock;
  ControllerOptions options;
  options.what_helps_interval_ms = 10'000;
  Controller c(*store, clock, options);
  ASSERT_TRUE(c.Load().ok());
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) Ok(Register(c, SliceHostDoc(s, w)));
  Ok(c.Apply(PriorityClassDoc("low", 1)));
  Ok(c.Apply(ClusterQueueDoc("research", 16)));
  Ok(c.Apply(LocalQueueDoc("team-a", "research")));
  auto help_of = [&](const std::string& job) {
    const Json st = Ok(c.GetJob(job))["status"];
    EXPECT_EQ(st["pendingReason"], "OverQuota") << job;
    std::vector<std::string> names;
    for (const Json& b : st.value("wouldHelp", Json::array())) names.push_back(b["name"]);
    return names;
  };
  // The first cycle with queues finds what would help ("first" needs no help: admitted).
  Ok(c.CreateJob(QueuedJobDoc("first", 1, "team-a", "low")));
  clock.AdvanceMs(10'000);
  Ok(c.CreateJob(QueuedJobDoc("second", 1, "team-a", "low")));
  EXPECT_EQ(help_of("second"), std::vector<std::string>{"first"});
  // Within the interval: reasons only. "second" keeps its list; "third" has none yet.
  clock.AdvanceMs(5'000);
  Ok(c.CreateJob(QueuedJobDoc("third", 1, "team-a", "low")));
  EXPECT_EQ(help_of("second"), std::vector<std::string>{"first"});
  EXPECT_TRUE(help_of("third").empty());
  // Once it is due, the next cycle finds it for every waiting job.
  clock.AdvanceMs(5'000);
  ASSERT_TRUE(c.RunPass().ok());
  EXPECT_EQ(help_of("second"), std::vector<std::string>{"first"});
  EXPECT_EQ(help_of("third"), std::vector<std::string>{"first"});
}

TEST_F(AdmissionControllerTest, QueueResourcesAreValidatedStoredAndReloaded) {
  SetUpQueues(32);
  Json bad = ClusterQueueDoc("bad", 16);
  bad["spec"]["quotas"][0]["lendingLimit"] = 8;  // needs a cohort
  auto e = Err(c_->Apply(bad));
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(e), "spec.quotas[0].lendingLimit");
  Json typo = LocalQueueDoc("b", "research");
  typo["spec"]["clusterQeue"] = "x";
  EXPECT_EQ(FieldOf(Err(c_->Apply(typo))), "spec.clusterQeue");
  EXPECT_EQ(FieldOf(Err(c_->Apply(PriorityClassDoc("Bad", 1)))), "metadata.name");
  Json wrong_kind = PriorityClassDoc("p", 1);
  wrong_kind["kind"] = "Pod";
  EXPECT_EQ(FieldOf(Err(c_->Apply(wrong_kind))), "kind");
  // A job naming an unknown PriorityClass is refused, naming the field.
  EXPECT_EQ(FieldOf(Err(c_->CreateJob(QueuedJobDoc("j", 1, "team-a", "urgent")))), "spec.priority");
  // Applying again replaces.
  Json replaced = Ok(c_->Apply(ClusterQueueDoc("research", 16)));
  EXPECT_FALSE(replaced["created"].get<bool>());
  Start();  // a new controller on the same store
  Json queues = c_->ListClusterQueues()["items"];
  ASSERT_EQ(queues.size(), 1u);
  EXPECT_EQ(queues[0]["spec"]["quotas"][0]["nominalQuota"], 16);
  EXPECT_EQ(queues[0]["status"]["nominalChips"], 16);
  EXPECT_EQ(c_->ListLocalQueues()["items"].size(), 1u);
  EXPECT_EQ(c_->ListPriorityClasses()["items"].size(), 2u);
}

TEST_F(AdmissionControllerTest, QuotaLimitsAdmissionAndThePendingJobExplainsWhy) {
  SetUpQueues(16);
  Ok(c_->CreateJob(QueuedJobDoc("first", 1, "team-a", "low")));
  Ok(c_->CreateJob(QueuedJobDoc("second", 1, "team-a", "low")));
  EXPECT_EQ(Phase("first"), "Starting");
  Json st = Status("second");
  EXPECT_EQ(st["phase"], "Pending");
  EXPECT_EQ(st["pendingReason"], "OverQuota");
  EXPECT_EQ(st["queuePosition"], 1);
  ASSERT_EQ(st["wouldHelp"].size(), 1u);
  EXPECT_EQ(st["wouldHelp"][0]["name"], "first");
  EXPECT_FALSE(st["wouldHelp"][0]["preemptible"].get<bool>());  // same priority
  Json q = c_->ListClusterQueues()["items"][0]["status"];
  EXPECT_EQ(q["nominalChips"], 16);
  EXPECT_EQ(q["usedChips"], 16);
  EXPECT_EQ(q["pendingWorkloads"], 1);
  EXPECT_EQ(q["admittedWorkloads"], 1);
  // A job whose LocalQueue does not exist waits with that reason.
  Ok(c_->CreateJob(QueuedJobDoc("lost", 1, "nobody", "")));
  EXPECT_EQ(Status("lost")["pendingReason"], "LocalQueueNotFound");
  // So does one that names none (it waits for the LocalQueue named default), with the fix.
  Ok(c_->CreateJob(JobDoc("unqueued", 1)));
  st = Status("unqueued");
  EXPECT_EQ(st["pendingReason"], "LocalQueueNotFound");
  const std::string message = st["message"];
  EXPECT_NE(message.find("LocalQueue default does not exist"), std::string::npos) << message;
  EXPECT_NE(message.find("set metadata.queue: NAME to one of the LocalQueues team-a (ClusterQueue "
                         "research)"),
            std::string::npos)
      << message;
  // When the first finishes, the second is admitted.
  HeartbeatAll("Running");
  HeartbeatAll("Exited", 0);
  EXPECT_EQ(Phase("first"), "Succeeded");
  EXPECT_EQ(Phase("second"), "Starting");
}

TEST_F(AdmissionControllerTest, APreemptedJobIsStoppedRequeuedAndRestartsAfterThePreemptor) {
  SetUpQueues(32);
  Ok(c_->CreateJob(QueuedJobDoc("low-job", 2, "team-a", "low")));
  HeartbeatAll("Running");
  EXPECT_EQ(Phase("low-job"), "Running");
  Ok(Beat(*c_, HostName(0, 0),
          {{"workers", Json::array()},
           {"progress",
            {{{"job", "low-job"},
              {"uid", Uid("low-job")},
              {"attempt", 0},
              {"rank", 0},
              {"type", "checkpoint"},
              {"step", 7},
              {"timeMs", clock_.NowMs()}}}}}));
  EXPECT_EQ(Status("low-job")["lastCheckpointTimeMs"], clock_.NowMs());
  clock_.AdvanceMs(1000);

  Ok(c_->CreateJob(QueuedJobDoc("high-job", 1, "team-a", "high")));
  // The victim's workers are no longer assigned (agents SIGTERM them), it is back in line,
  // and its chips stay held until the agents confirm.
  Json low = Status("low-job");
  EXPECT_EQ(low["phase"], "Pending");
  EXPECT_EQ(low["reason"], "Preempted");
  EXPECT_EQ(low["preemptions"], 1);
  EXPECT_TRUE(low["stopping"].get<bool>());
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) {
      Json a = Ok(c_->Assignments(HostName(s, w)));
      EXPECT_TRUE(a["assignments"].empty());
      // SIGKILL after the preemption's grace (30 s), not the job's own (10 s).
      ASSERT_TRUE(a.contains("stop"));
      EXPECT_EQ(a["stop"][0]["job"], "low-job");
      EXPECT_EQ(a["stop"][0]["graceMs"], 30'000);
    }
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);
  Json high = Status("high-job");
  EXPECT_EQ(high["phase"], "Pending");
  EXPECT_EQ(high["pendingReason"], "WaitingForPreemption");
  EXPECT_TRUE(c_->Tick().ok());  // another pass changes nothing while the victim stops
  EXPECT_EQ(Phase("high-job"), "Pending");
  EXPECT_EQ(Status("low-job")["preemptions"], 1);

  ConfirmAllStopped();
  EXPECT_EQ(Phase("high-job"), "Starting");
  EXPECT_EQ(Phase("low-job"), "Pending");
  EXPECT_EQ(Status("low-job")["attempt"], 0);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 16);

  HeartbeatAll("Running");
  HeartbeatAll("Exited", 0);
  EXPECT_EQ(Phase("high-job"), "Succeeded");
  // Capacity returned: the victim restarts with its next attempt.
  low = Status("low-job");
  EXPECT_EQ(low["phase"], "Starting");
  EXPECT_EQ(low["attempt"], 1);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);
}

TEST_F(AdmissionControllerTest, WithoutAClusterQueueJobsAreServedFirstComeFirstServed) {
  RegisterTwoSlices();
  Ok(c_->Apply(PriorityClassDoc("high", 100)));
  Ok(c_->CreateJob(JobDoc("first", 2)));
  Ok(c_->CreateJob(QueuedJobDoc("second", 1, "", "high")));
  EXPECT_EQ(Phase("first"), "Starting");
  Json st = Status("second");
  EXPECT_EQ(st["phase"], "Pending");
  EXPECT_EQ(st["queuePosition"], 1);
}

// A host's owner (status.job) and a ClusterQueue's usage are derived, not committed: a watcher
// still gets one MODIFIED each time they move (`tessera get hosts -w`), and none when they
// do not.
TEST_F(AdmissionControllerTest, WatchersSeeHostOwnersAndQueueUsageMove) {
  std::vector<std::pair<std::string, Json>> hosts;  // host, status.job of each Host change
  std::vector<int64_t> used;                        // status.usedChips of each research change
  c_->SetChangeListener([&](const std::string& kind, const std::string&, const Json& obj) {
    if (kind == "Host") hosts.push_back({obj["metadata"]["name"], obj["status"]["job"]});
    if (kind == "ClusterQueue" && obj["metadata"]["name"] == "research")
      used.push_back(obj["status"]["usedChips"]);
  });
  SetUpQueues(32);
  hosts.clear();
  used.clear();
  Ok(c_->CreateJob(QueuedJobDoc("a", 1, "team-a", "low")));
  ASSERT_TRUE(c_->Tick().ok());
  ASSERT_EQ(Status("a")["phase"], "Starting");
  std::vector<std::string> placed;
  const Json placement = Status("a")["placement"];
  for (const Json& slice : placement)
    for (const Json& h : slice["hosts"]) placed.push_back(h);
  ASSERT_EQ(placed.size(), 4u);
  std::vector<std::pair<std::string, Json>> expected;
  for (const std::string& h : placed) expected.push_back({h, "a"});
  EXPECT_EQ(hosts, expected);
  EXPECT_EQ(used, std::vector<int64_t>{16});
  // Nothing moved: no change on the next ticks.
  ASSERT_TRUE(c_->Tick().ok());
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(hosts.size(), 4u);
  EXPECT_EQ(used.size(), 1u);
  // The job ends and its hosts are released: each host once more, now free.
  HeartbeatAll("Running");
  HeartbeatAll("Exited", 0);
  ConfirmAllStopped();
  ASSERT_EQ(Status("a")["phase"], "Succeeded");
  ASSERT_TRUE(c_->Tick().ok());
  for (const std::string& h : placed) expected.push_back({h, ""});
  EXPECT_EQ(hosts, expected);
  EXPECT_EQ(used, (std::vector<int64_t>{16, 0}));
}

}  // namespace
}  // namespace tessera::controller
