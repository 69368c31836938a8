// Services admitted through ClusterQueues in the head's controller (service_admission.cc,
// docs/serving.md "Admission"): each replica group is one workload of the admission cycle, so
// quota limits groups, a high-priority Service preempts lower-priority training (and
// lower-priority groups), a waiting group says why, scale-down and deletion give quota back,
// and a restarted head keeps what was admitted. Through the public API on the shared fixture:
// a FakeClock, a MemoryStore and two v6e 4x4 slices (16 chips each).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

Json ClusterQueueDoc(const std::string& name, int64_t nominal_chips) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "ClusterQueue"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"quotas", {{{"generation", "v6e"}, {"nominalQuota", nominal_chips}}}},
            {"preemption", {{"withinClusterQueue", "LowerPriority"}}}}}};
}

Json QueuedJobDoc(const std::string& name, int slices, const std::string& priority) {
  Json doc = JobDoc(name, slices);
  doc["metadata"]["queue"] = "team-a";
  doc["spec"]["priority"] = priority;
  return doc;
}

// A Service of `replicas` groups of one v6e 4x4 slice each; no queue: the default LocalQueue.
Json ServiceDoc(const std::string& name, int replicas, const std::string& priority,
                const std::string& queue = "") {
  Json doc = {{"apiVersion", "tessera/v1"},
              {"kind", "Service"},
              {"metadata", {{"name", name}}},
              {"spec",
               {{"accelerator", "v6e"},
                {"topology", "4x4"},
                {"command", {"python3", "server.py"}},
                {"replicas", replicas},
                {"readiness", {{"period", "1s"}, {"startupGrace", "60s"}}}}}};
  if (!queue.empty()) doc["metadata"]["queue"] = queue;
  if (!priority.empty()) doc["spec"]["priority"] = priority;
  return doc;
}

class ServiceAdmissionControllerTest : public ControllerTest {
 protected:
  // One ClusterQueue of `nominal_chips` that preempts lower priorities, reached through both
  // team-a and the default LocalQueue.
  void SetUpQueues(int64_t nominal_chips) {
    RegisterTwoSlices();
    Ok(c_->Apply(PriorityClassDoc("low", 1)));
    Ok(c_->Apply(PriorityClassDoc("high", 100)));
    Ok(c_->Apply(ClusterQueueDoc("research", nominal_chips)));
    Ok(c_->Apply(LocalQueueDoc("team-a", "research")));
    Ok(c_->Apply(LocalQueueDoc("default", "research")));
  }
  Json JobStatus(const std::string& job) { return Ok(c_->GetJob(job))["status"]; }
  Json Service(const std::string& name) { return Ok(c_->GetService(name)); }
  Json Replica(const std::string& name, int i) {
    Json replicas = Service(name)["status"]["roles"][0]["replicas"];
    for (const Json& r : replicas)
      if (r["replica"] == i) return r;
    ADD_FAILURE() << name << " has no replica " << i << ": " << replicas.dump();
    return Json::object();
  }
  Json Usage() { return c_->ListClusterQueues()["items"][0]["status"]; }
  // Every host confirms that it runs nothing any more (a revision after every withdrawal).
  void ConfirmAllStopped() {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w)
        Ok(Beat(*c_, HostName(s, w), {{"workers", Json::array()}, {"revision", 1000}}));
  }
  // Hosts whose assignments include a process of a service group.
  std::set<std::string> HostsServing() {
    std::set<std::string> out;
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        const Json snapshot = Ok(c_->Assignments(HostName(s, w)));
        for (const Json& a : snapshot["assignments"])
          if (a["job"].get<std::string>().find('.') != std::string::npos)
            out.insert(HostName(s, w));
      }
    return out;
  }
  static bool Contains(const Json& text, const std::string& part) {
    return text.is_string() && text.get<std::string>().find(part) != std::string::npos;
  }
};

TEST_F(ServiceAdmissionControllerTest, QuotaLimitsGroupsAndAWaitingGroupSaysWhy) {
  SetUpQueues(16);
  Ok(c_->Apply(ServiceDoc("llm", 2, "low")));  // no queue: the default LocalQueue
  // One group fits the quota and runs; the other waits, with the cycle's reason.
  EXPECT_EQ(Replica("llm", 0)["phase"], "Starting");
  const Json waiting = Replica("llm", 1);
  EXPECT_EQ(waiting["phase"], "Pending");
  EXPECT_EQ(waiting["reason"], "OverQuota");
  EXPECT_TRUE(Contains(waiting["message"], "over quota by 16 chips")) << waiting["message"];
  EXPECT_TRUE(Contains(waiting["message"], "position 1 in ClusterQueue research"));
  EXPECT_TRUE(Contains(waiting["message"], "would help: service/llm/server/0"));
  // The Service's own status says so too (tessera describe service prints both).
  const Json st = Service("llm")["status"];
  EXPECT_EQ(st["phase"], "Progressing");
  EXPECT_TRUE(Contains(st["message"], "replica server/1: OverQuota")) << st["message"];
  // Quota is charged per group.
  Json u = Usage();
  EXPECT_EQ(u["usedChips"], 16);
  EXPECT_EQ(u["admittedWorkloads"], 1);
  EXPECT_EQ(u["pendingWorkloads"], 1);
  // A job of the same queue and priority waits behind the group's quota as well.
  Ok(c_->CreateJob(QueuedJobDoc("train", 1, "low")));
  Json job = JobStatus("train");
  EXPECT_EQ(job["pendingReason"], "OverQuota");
  ASSERT_EQ(job["wouldHelp"].size(), 1u);
  EXPECT_EQ(job["wouldHelp"][0]["name"], "service/llm/server/0");
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 16);
}

TEST_F(ServiceAdmissionControllerTest, AHighPriorityServicePreemptsRunningTrainingAndStartsAfter) {
  SetUpQueues(32);
  Ok(c_->CreateJob(QueuedJobDoc("low-job", 2, "low")));
  HeartbeatAll("Running");
  ASSERT_EQ(JobStatus("low-job")["phase"], "Running");

  Ok(c_->Apply(ServiceDoc("llm", 1, "high", "team-a")));
  // The victim is stopped with the preemption's grace and requeued; its chips stay held.
  Json low = JobStatus("low-job");
  EXPECT_EQ(low["phase"], "Pending");
  EXPECT_EQ(low["reason"], "Preempted");
  EXPECT_EQ(low["preemptions"], 1);
  EXPECT_TRUE(Contains(low["message"], "preempted by service/llm/server/0 (priority 100)"))
      << low["message"];
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) {
      Json a = Ok(c_->Assignments(HostName(s, w)));
      EXPECT_TRUE(a["assignments"].empty());
      ASSERT_TRUE(a.contains("stop"));
      EXPECT_EQ(a["stop"][0]["job"], "low-job");
      EXPECT_EQ(a["stop"][0]["graceMs"], 30'000);
    }
  // The group is admitted but waits for the victim's workers to stop.
  Json group = Replica("llm", 0);
  EXPECT_EQ(group["phase"], "Pending");
  EXPECT_EQ(group["reason"], "WaitingForPreemption");
  EXPECT_TRUE(Contains(group["message"], "low-job")) << group["message"];
  ASSERT_TRUE(c_->Tick().ok());  // another pass preempts nothing more
  EXPECT_EQ(Replica("llm", 0)["phase"], "Pending");
  EXPECT_EQ(JobStatus("low-job")["preemptions"], 1);
  EXPECT_TRUE(HostsServing().empty());

  // Once the agents confirm, the group starts on one slice; the job waits behind it.
  ConfirmAllStopped();
  group = Replica("llm", 0);
  EXPECT_EQ(group["phase"], "Starting");
  EXPECT_EQ(group["hosts"].size(), 4u);
  EXPECT_EQ(HostsServing().size(), 4u);
  low = JobStatus("low-job");
  EXPECT_EQ(low["phase"], "Pending");
  EXPECT_EQ(low["pendingReason"], "OverQuota");
  ASSERT_EQ(low["wouldHelp"].size(), 1u);
  EXPECT_EQ(low["wouldHelp"][0]["name"], "service/llm/server/0");
  EXPECT_FALSE(low["wouldHelp"][0]["preemptible"].get<bool>());  // higher priority
  EXPECT_EQ(Usage()["usedChips"], 16);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 16);
}

TEST_F(ServiceAdmissionControllerTest,
       AHigherPriorityGroupPreemptsALowerGroupTheOthersKeepServing) {
  SetUpQueues(32);
  Ok(c_->Apply(ServiceDoc("batch", 2, "low")));
  HeartbeatAll("Running");
  for (const auto& t : c_->DueProbes()) c_->ReportReadiness(t, true, "");
  ASSERT_EQ(Service("batch")["status"]["phase"], "Ready");

  Ok(c_->Apply(ServiceDoc("chat", 1, "high")));
  // Exactly one batch group is evicted (stopped with the preemption's grace); the other
  // keeps serving.
  int evicted = -1;
  for (int i = 0; i < 2; ++i)
    if (Replica("batch", i)["phase"] == "Recreating") evicted = i;
  ASSERT_GE(evicted, 0) << Service("batch").dump();
  const int kept = 1 - evicted;
  EXPECT_EQ(Replica("batch", evicted)["reason"], "Preempted");
  EXPECT_EQ(Replica("batch", kept)["phase"], "Ready");
  const std::string leader = Replica("batch", evicted)["hosts"][0];
  Json a = Ok(c_->Assignments(leader));
  ASSERT_TRUE(a.contains("stop")) << a.dump();
  EXPECT_EQ(a["stop"][0]["graceMs"], 30'000);
  EXPECT_EQ(Replica("chat", 0)["reason"], "WaitingForPreemption");
  const Json freed = Replica("batch", evicted)["hosts"];

  // Once its hosts confirm, the high-priority group starts on the slice it freed, and the
  // evicted group is Pending again with the cycle's reason.
  ConfirmAllStopped();
  EXPECT_EQ(Replica("chat", 0)["phase"], "Starting");
  EXPECT_EQ(Replica("chat", 0)["hosts"], freed);
  const Json back = Replica("batch", evicted);
  EXPECT_EQ(back["phase"], "Pending");
  EXPECT_EQ(back["reason"], "OverQuota");
  EXPECT_EQ(Replica("batch", kept)["phase"], "Ready");
  EXPECT_EQ(Service("batch")["status"]["endpoints"].size(), 1u);
}

TEST_F(ServiceAdmissionControllerTest, AHigherPriorityJobPreemptsAGroupOfAServiceWithoutPriority) {
  SetUpQueues(32);
  Ok(c_->Apply(ServiceDoc("llm", 2, "")));  // no PriorityClass: priority 0
  HeartbeatAll("Running");
  Ok(c_->CreateJob(QueuedJobDoc("train", 1, "low")));
  int evicted = -1;
  for (int i = 0; i < 2; ++i)
    if (Replica("llm", i)["reason"] == "Preempted") evicted = i;
  ASSERT_GE(evicted, 0) << Service("llm").dump();
  EXPECT_EQ(Replica("llm", 1 - evicted)["phase"], "Starting");  // not touched
  EXPECT_EQ(JobStatus("train")["pendingReason"], "WaitingForPreemption");
  ConfirmAllStopped();
  EXPECT_EQ(JobStatus("train")["phase"], "Starting");
  EXPECT_EQ(Replica("llm", evicted)["phase"], "Pending");
  EXPECT_EQ(Replica("llm", evicted)["reason"], "OverQuota");
  EXPECT_EQ(Usage()["usedChips"], 32);
}

TEST_F(ServiceAdmissionControllerTest, ALowPriorityServiceWaitsBehindQuotaWithTheReason) {
  SetUpQueues(16);
  Ok(c_->CreateJob(QueuedJobDoc("high-job", 1, "high")));
  ASSERT_EQ(JobStatus("high-job")["phase"], "Starting");
  Ok(c_->Apply(ServiceDoc("llm", 1, "low", "team-a")));
  const Json r = Replica("llm", 0);
  EXPECT_EQ(r["phase"], "Pending");
  EXPECT_EQ(r["reason"], "OverQuota");
  EXPECT_TRUE(Contains(r["message"],
                       "would help: trainjob high-job (priority 100, 16 chips, "
                       "must finish)"))
      << r["message"];
  EXPECT_EQ(JobStatus("high-job")["phase"], "Starting");  // never preempted by lower priority
  const Json st = Service("llm")["status"];
  EXPECT_EQ(st["phase"], "Pending");
  EXPECT_TRUE(Contains(st["message"], "OverQuota")) << st["message"];
  EXPECT_TRUE(HostsServing().empty());

  // The job finishes: its quota goes to the group.
  HeartbeatAll("Running");
  HeartbeatAll("Exited", 0);
  ASSERT_EQ(JobStatus("high-job")["phase"], "Succeeded");
  EXPECT_EQ(Replica("llm", 0)["phase"], "Starting");
}

TEST_F(ServiceAdmissionControllerTest, ScaleDownAndDeletionGiveQuotaBackToAWaitingJob) {
  SetUpQueues(32);
  Ok(c_->Apply(ServiceDoc("llm", 2, "low")));
  HeartbeatAll("Running");
  Ok(c_->CreateJob(QueuedJobDoc("train", 1, "low")));
  ASSERT_EQ(JobStatus("train")["pendingReason"], "OverQuota");
  ASSERT_EQ(Usage()["usedChips"], 32);

  // Scaling down stops the newest group; its quota is free at once and the job is admitted on
  // its slice, starting once the group's processes are confirmed gone.
  Ok(c_->ScaleService("llm", "server", 1));
  EXPECT_EQ(Replica("llm", 1)["phase"], "Terminating");
  Json job = JobStatus("train");
  EXPECT_EQ(job["pendingReason"], "WaitingForPreemption");
  EXPECT_TRUE(Contains(job["message"], "service/llm/server/1")) << job["message"];
  ConfirmAllStopped();
  EXPECT_EQ(JobStatus("train")["phase"], "Starting");
  EXPECT_EQ(Service("llm")["status"]["roles"][0]["replicas"].size(), 1u);
  Json u = Usage();
  EXPECT_EQ(u["usedChips"], 32);
  EXPECT_EQ(u["admittedWorkloads"], 2);  // one group, one job

  // Deleting the Service gives the last group's quota back.
  Ok(c_->CreateJob(QueuedJobDoc("second", 1, "low")));
  ASSERT_EQ(JobStatus("second")["pendingReason"], "OverQuota");
  Ok(c_->DeleteService("llm"));
  ConfirmAllStopped();
  EXPECT_EQ(c_->GetService("llm").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(JobStatus("second")["phase"], "Starting");
}

TEST_F(ServiceAdmissionControllerTest,
       ARestartedHeadKeepsAdmittedGroupsQuotaAndAPendingPreemption) {
  SetUpQueues(32);
  Ok(c_->CreateJob(QueuedJobDoc("low-job", 1, "low")));
  Ok(c_->Apply(ServiceDoc("batch", 1, "low")));
  HeartbeatAll("Running");
  const Json batch_before = Replica("batch", 0);
  ASSERT_EQ(batch_before["phase"], "Starting");
  // A high-priority group preempts (the job or the batch group, whichever costs less) and
  // waits for the victim; then the head restarts before the agents confirm.
  Ok(c_->Apply(ServiceDoc("chat", 1, "high")));
  ASSERT_EQ(Replica("chat", 0)["reason"], "WaitingForPreemption");
  const Json victim_job = JobStatus("low-job");
  const bool job_was_victim = victim_job["phase"] == "Pending";

  Start();  // a new controller over the same store
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Replica("chat", 0)["phase"], "Pending");
  EXPECT_EQ(Replica("chat", 0)["reason"], "WaitingForPreemption");
  if (job_was_victim) {
    EXPECT_EQ(JobStatus("low-job")["preemptions"], 1);  // not preempted twice
    EXPECT_EQ(Replica("batch", 0)["hosts"], batch_before["hosts"]);
  } else {
    EXPECT_EQ(Replica("batch", 0)["phase"], "Recreating");
  }
  ConfirmAllStopped();
  const Json chat = Replica("chat", 0);
  EXPECT_EQ(chat["phase"], "Starting");
  EXPECT_EQ(Usage()["usedChips"], 32);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);

  // And once more: the admitted state reloads as it was, nothing moves.
  const Json before = Service("chat");
  Start();
  ASSERT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Replica("chat", 0)["hosts"], chat["hosts"]);
  EXPECT_EQ(Replica("chat", 0)["incarnation"], chat["incarnation"]);
  EXPECT_EQ(Usage()["usedChips"], 32);
  EXPECT_EQ(Usage()["admittedWorkloads"], 2);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);
}

TEST_F(ServiceAdmissionControllerTest, QueueObjectsAServiceIsChargedToAreNotDeletedUnderIt) {
  SetUpQueues(32);
  Ok(c_->Apply(ServiceDoc("llm", 1, "high", "team-a")));
  ASSERT_EQ(Replica("llm", 0)["phase"], "Starting");
  Status busy = Err(c_->DeleteQueueObject("LocalQueue", "team-a"));
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(Json(busy.message()), "service/llm")) << busy.message();
  busy = Err(c_->DeleteQueueObject("ClusterQueue", "research"));
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(Json(busy.message()), "service/llm")) << busy.message();
  busy = Err(c_->DeleteQueueObject("PriorityClass", "high"));
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(Json(busy.message()), "service/llm")) << busy.message();
  // The default LocalQueue holds nothing of it.
  Ok(c_->DeleteQueueObject("LocalQueue", "default"));
}

}  // namespace
}  // namespace tessera::controller
