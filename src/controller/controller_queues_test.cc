// Deleting ClusterQueues, LocalQueues and PriorityClasses through the controller
// (controller_queues.cc): what is refused while in use, what a delete leaves behind, and that it
// survives a restart. On the shared fixture: a MemoryStore, a FakeClock and two v6e 4x4 slices.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

Json JobDoc(const std::string& name, int slices, const std::string& queue,
            const std::string& priority) {
  Json doc = {{"apiVersion", "tessera/v1"},
              {"kind", "TrainJob"},
              {"metadata", {{"name", name}, {"queue", queue}}},
              {"spec",
               {{"accelerator", "v6e"},
                {"topology", "4x4"},
                {"slices", slices},
                {"template", {{"command", {"python3", "train.py"}}}}}}};
  if (!priority.empty()) doc["spec"]["priority"] = priority;
  return doc;
}

Json ClusterQueueDoc(const std::string& name, int64_t nominal_chips) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "ClusterQueue"},
          {"metadata", {{"name", name}}},
          {"spec", {{"quotas", {{{"generation", "v6e"}, {"nominalQuota", nominal_chips}}}}}}};
}

class QueueDeleteTest : public ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    RegisterTwoSlices();
    Ok(c_->Apply(PriorityClassDoc("low", 1)));
    Ok(c_->Apply(ClusterQueueDoc("research", 16)));
    Ok(c_->Apply(LocalQueueDoc("team-a", "research")));
  }
  // By value: a missing member reads as null here (these tests look up optional fields).
  static Json Ok(const Result<Json>& r) { return controller::Ok(r); }
  Json Status(const std::string& job) { return Ok(c_->GetJob(job))["status"]; }
  std::vector<std::string> Names(const Json& list) {
    std::vector<std::string> out;
    for (const Json& item : list["items"]) out.push_back(item["metadata"]["name"]);
    return out;
  }
  // Every worker of `job` reports exit 0, and every host confirms it runs nothing.
  void Finish(const std::string& job) {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        Json a = Ok(c_->Assignments(HostName(s, w)));
        Json workers = Json::array();
        for (const Json& x : a["assignments"])
          if (x["job"] == job)
            workers.push_back({{"job", job},
                               {"uid", x["uid"]},
                               {"attempt", x["attempt"]},
                               {"rank", x["rank"]},
                               {"pid", 100},
                               {"startedAtMs", 0},
                               {"state", "Exited"},
                               {"exitCode", 0},
                               {"signal", 0},
                               {"finishedAtMs", 0}});
        Ok(Beat(*c_, HostName(s, w), {{"workers", workers}, {"revision", a["revision"]}}));
      }
  }
};

TEST_F(QueueDeleteTest, MissingObjectsAndUnknownKindsAreErrors) {
  EXPECT_EQ(Err(c_->DeleteQueueObject("ClusterQueue", "nope")).code(), StatusCode::kNotFound);
  EXPECT_EQ(Err(c_->DeleteQueueObject("LocalQueue", "nope")).code(), StatusCode::kNotFound);
  EXPECT_EQ(Err(c_->DeleteQueueObject("PriorityClass", "nope")).code(), StatusCode::kNotFound);
  auto kind = Err(c_->DeleteQueueObject("TrainJob", "x"));
  EXPECT_EQ(kind.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FieldOf(kind), "kind");
}

TEST_F(QueueDeleteTest, AClusterQueueIsRefusedWhileJobsAreAdmittedOrLocalQueuesPointAtIt) {
  Ok(c_->CreateJob(JobDoc("train", 1, "team-a", "low")));
  ASSERT_EQ(Status("train")["phase"], "Starting");
  auto busy = Err(c_->DeleteQueueObject("ClusterQueue", "research"));
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(busy.message().find("admitted jobs: train"), std::string::npos) << busy.message();
  EXPECT_NE(busy.message().find("localqueues point at it: team-a"), std::string::npos);
  EXPECT_EQ(Names(c_->ListClusterQueues()), std::vector<std::string>{"research"});

  // Once the job finished, only the LocalQueue holds it.
  Finish("train");
  ASSERT_EQ(Status("train")["phase"], "Succeeded");
  busy = Err(c_->DeleteQueueObject("ClusterQueue", "research"));
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(busy.message().find("admitted"), std::string::npos) << busy.message();
  EXPECT_NE(busy.message().find("team-a"), std::string::npos);

  Json gone = Ok(c_->DeleteQueueObject("LocalQueue", "team-a"));
  EXPECT_EQ(gone["status"], "Deleted");
  EXPECT_EQ(gone["pendingJobs"], 0);
  Json deleted = Ok(c_->DeleteQueueObject("ClusterQueue", "research"));
  EXPECT_EQ(deleted["kind"], "ClusterQueue");
  EXPECT_TRUE(c_->ListClusterQueues()["items"].empty());
  EXPECT_TRUE(c_->ListLocalQueues()["items"].empty());

  // Gone from the store too: a restarted controller does not bring it back.
  Start();
  EXPECT_TRUE(c_->ListClusterQueues()["items"].empty());
  EXPECT_TRUE(c_->ListLocalQueues()["items"].empty());
  EXPECT_EQ(Names(c_->ListPriorityClasses()), std::vector<std::string>{"low"});
}

TEST_F(QueueDeleteTest, ALocalQueueWithOnlyPendingJobsGoesAndTheyWaitForItToReturn) {
  Ok(c_->CreateJob(JobDoc("first", 1, "team-a", "low")));
  Ok(c_->CreateJob(JobDoc("second", 1, "team-a", "low")));  // over the 16-chip quota
  ASSERT_EQ(Status("second")["pendingReason"], "OverQuota");
  auto busy = Err(c_->DeleteQueueObject("LocalQueue", "team-a"));
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(busy.message().find("admitted jobs: first"), std::string::npos) << busy.message();
  EXPECT_EQ(busy.message().find("second"), std::string::npos) << "pending jobs do not block";

  Ok(c_->DeleteJob("first"));
  Finish("first");  // the agents confirm the deleted job's workers are gone
  // "second" was admitted once "first" left; delete it too, so only a pending job remains.
  Ok(c_->DeleteJob("second"));
  Finish("second");
  Ok(c_->CreateJob(JobDoc("third", 1, "team-a", "low")));
  Ok(c_->CreateJob(JobDoc("fourth", 2, "team-a", "low")));  // 32 chips: never fits the quota
  ASSERT_EQ(Status("third")["phase"], "Starting");
  ASSERT_EQ(Status("fourth")["phase"], "Pending");
  Ok(c_->DeleteJob("third"));
  Finish("third");
  ASSERT_EQ(Status("fourth")["phase"], "Pending");

  Json gone = Ok(c_->DeleteQueueObject("LocalQueue", "team-a"));
  EXPECT_EQ(gone["pendingJobs"], 1);
  EXPECT_EQ(Status("fourth")["pendingReason"], "LocalQueueNotFound");
  // Recreated (pointing at a bigger queue), the waiting job is admitted.
  Ok(c_->Apply(ClusterQueueDoc("big", 32)));
  Ok(c_->Apply(LocalQueueDoc("team-a", "big")));
  EXPECT_EQ(Status("fourth")["phase"], "Starting");
}

TEST_F(QueueDeleteTest, APriorityClassIsRefusedWhileUnfinishedJobsNameIt) {
  Ok(c_->CreateJob(JobDoc("running", 1, "team-a", "low")));
  Ok(c_->CreateJob(JobDoc("waiting", 1, "team-a", "low")));
  auto busy = Err(c_->DeleteQueueObject("PriorityClass", "low"));
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(busy.message().find("unfinished jobs use it: running, waiting"), std::string::npos)
      << busy.message();
  Finish("running");
  ASSERT_EQ(Status("waiting")["phase"], "Starting");
  Finish("waiting");
  ASSERT_EQ(Status("waiting")["phase"], "Succeeded");
  // Finished jobs keep their spec; they do not hold the class.
  EXPECT_EQ(Ok(c_->DeleteQueueObject("PriorityClass", "low"))["status"], "Deleted");
  EXPECT_TRUE(c_->ListPriorityClasses()["items"].empty());
  // New jobs naming it are refused again, as for any unknown class.
  EXPECT_EQ(FieldOf(Err(c_->CreateJob(JobDoc("late", 1, "team-a", "low")))), "spec.priority");
}

TEST_F(QueueDeleteTest, DeletingTheLastClusterQueueReturnsToFirstComeFirstServed) {
  Ok(c_->DeleteQueueObject("LocalQueue", "team-a"));
  Ok(c_->DeleteQueueObject("ClusterQueue", "research"));
  // No queue: the job is placed first come, first served although it names no LocalQueue.
  Ok(c_->CreateJob(JobDoc("free", 2, "", "")));
  EXPECT_EQ(Status("free")["phase"], "Starting");
}

}  // namespace
}  // namespace tessera::controller
