// A new leader over a large store (issue 35, bench/README.md "Failover at fleet scale"): what
// makes its load, its first tick and its first write cheap keeps the controller's behaviour.
//   - The index of unsettled jobs (job_driver.cc): every job a pass or a tick may act on is in
//     it, through creation, placement, success, failure, deletion, a restart's load and a flush.
//   - A pass plans one request its waiting jobs share once, and a placement between two of them
//     is seen by the next (job_scheduling.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

class TakeoverTest : public ControllerTest {
 protected:
  // The index is exact after a load and after each tick, and a superset at any time.
  void ExpectIndexExact(const std::string& when) {
    const Status s = c_->CheckJobIndex(/*exact=*/true);
    EXPECT_TRUE(s.ok()) << when << ": " << s.ToString();
  }
  void ExpectIndexHolds(const std::string& when) {
    const Status s = c_->CheckJobIndex(/*exact=*/false);
    EXPECT_TRUE(s.ok()) << when << ": " << s.ToString();
  }
  void Tick(const std::string& when) {
    ASSERT_TRUE(c_->Tick().ok()) << when;
    ExpectIndexExact("after the tick " + when);
  }
  std::string Reason(const std::string& job) {
    auto r = c_->GetJob(job);
    return r.ok() ? (*r)["status"].value("reason", "") : "Gone";
  }
  std::string Message(const std::string& job) {
    auto r = c_->GetJob(job);
    return r.ok() ? (*r)["status"].value("message", "") : "Gone";
  }
};

TEST_F(TakeoverTest, EveryJobThatMayActIsInTheIndexThroughItsLife) {
  ExpectIndexExact("no jobs");
  // Never fits a cluster of 4x4 slices: accepted only before there are hosts to refuse it by.
  Ok(c_->CreateJob(JobDoc("never", 1, "8x8")));
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("done", 1)));
  Ok(c_->CreateJob(JobDoc("deleted", 1)));
  Ok(c_->CreateJob(JobDoc("waits", 2)));  // behind the two: both slices are taken
  ExpectIndexHolds("created");
  Tick("after the creations");
  EXPECT_EQ(Phase("done"), "Starting");
  EXPECT_EQ(Phase("deleted"), "Starting");
  EXPECT_EQ(Phase("waits"), "Pending");
  EXPECT_EQ(Phase("never"), "Pending");

  HeartbeatAll("Running");
  Tick("with both running");
  EXPECT_EQ(Phase("done"), "Running");
  // One job's workers succeed; the other's keep running.
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) {
      const std::string h = HostName(s, w);
      const Json a = Ok(c_->Assignments(h));
      Json workers = WorkerReports(a, "Running");
      for (Json& report : workers)
        if (report["job"] == "done") report["state"] = "Exited";
      Ok(Beat(*c_, h, {{"workers", workers}, {"revision", a["revision"]}}));
      ExpectIndexHolds("after a heartbeat of " + h);
    }
  Tick("after one job succeeded");
  EXPECT_EQ(Phase("done"), "Succeeded");
  EXPECT_EQ(Phase("waits"), "Pending") << "one slice is free, it needs two";

  // Deleting the running job: stopping, then gone once its workers are confirmed stopped (the
  // agents report none of them any more).
  Ok(c_->DeleteJob("deleted"));
  ExpectIndexHolds("stopping");
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w)
      Ok(Beat(*c_, HostName(s, w),
              {{"workers", Json::array()},
               {"revision", Ok(c_->Assignments(HostName(s, w)))["revision"]}}));
  Tick("after the deletion was confirmed");
  EXPECT_EQ(Phase("deleted"), "Gone");
  EXPECT_EQ(Phase("waits"), "Starting") << "both slices free: the waiting job is placed";
  // A finished job deleted: gone at once, and out of the index.
  Ok(c_->DeleteJob("done"));
  EXPECT_EQ(Phase("done"), "Gone");
  Tick("after the finished job's deletion");

  // A new controller over the same store (a restart or a new leader) indexes what it loads.
  Start();
  ExpectIndexExact("after the load");
  Tick("the new controller's first");
  EXPECT_EQ(Phase("waits"), "Starting");
  EXPECT_EQ(Phase("never"), "Pending");
}

TEST_F(TakeoverTest, ALoadIndexesOnlyTheJobsThatMayActAndTheTickStillStepsThem) {
  RegisterTwoSlices();
  for (int i = 0; i < 5; ++i) Ok(c_->CreateJob(JobDoc("short-" + std::to_string(i), 2)));
  // One at a time: each runs to success on both slices, the next is placed after it.
  for (int i = 0; i < 5; ++i) {
    Tick("before job " + std::to_string(i) + " runs");
    HeartbeatAll("Running");
    HeartbeatAll("Exited");
    Tick("after job " + std::to_string(i) + " succeeded");
    EXPECT_EQ(Phase("short-" + std::to_string(i)), "Succeeded");
  }
  Ok(c_->CreateJob(JobDoc("long", 1)));
  Ok(c_->CreateJob(JobDoc("later", 2)));
  Tick("with long placed");
  HeartbeatAll("Running");
  Tick("with long running");
  EXPECT_EQ(Phase("long"), "Running");

  Start();  // five finished jobs, one running, one waiting behind it
  ExpectIndexExact("after the load");
  Tick("the new controller's first");
  EXPECT_EQ(Phase("long"), "Running") << "its hosts got fresh leases at the load";
  EXPECT_EQ(Phase("later"), "Pending");
  // The running job is still stepped and the waiting one still seen by the pass.
  HeartbeatAll("Exited");
  Tick("after long succeeded");
  EXPECT_EQ(Phase("long"), "Succeeded");
  EXPECT_EQ(Phase("later"), "Starting") << "the waiting job was still seen by the pass";
}

TEST_F(TakeoverTest, WaitingJobsOfOneShapeShareAPlanAndAPlacementIsSeenByTheNext) {
  // In arrival order: two that never fit between ones that fit, then one that must wait; all
  // created before the hosts register (a job that never fits is refused once there are hosts).
  Ok(c_->CreateJob(JobDoc("never-1", 1, "8x8")));
  Ok(c_->CreateJob(JobDoc("fits-1", 1)));
  Ok(c_->CreateJob(JobDoc("never-2", 1, "8x8")));
  Ok(c_->CreateJob(JobDoc("fits-2", 1)));
  Ok(c_->CreateJob(JobDoc("waits", 1)));
  RegisterTwoSlices();
  ASSERT_TRUE(c_->RunPass().ok());
  EXPECT_EQ(Phase("fits-1"), "Starting");
  EXPECT_EQ(Phase("fits-2"), "Starting") << "planned after fits-1 took a slice: the other";
  EXPECT_NE(Ok(c_->GetJob("fits-1"))["status"]["workers"][0]["host"],
            Ok(c_->GetJob("fits-2"))["status"]["workers"][0]["host"]);
  EXPECT_EQ(Phase("waits"), "Pending") << "both slices taken";
  EXPECT_NE(Reason("waits"), "NeverFits") << "it fits an empty cluster: " << Message("waits");
  EXPECT_NE(Reason("waits"), "") << Message("waits");
  EXPECT_EQ(Phase("never-1"), "Pending");
  EXPECT_EQ(Reason("never-1"), "NeverFits") << Message("never-1");
  EXPECT_EQ(Reason("never-2"), "NeverFits");
  EXPECT_EQ(Message("never-1"), Message("never-2")) << "one answer to one question";
  // The shared answer is the one each would get alone: a controller over a copy of this store
  // whose only waiting 8x8 job is never-2 (never-1 deleted) says the same.
  const std::string shared = Message("never-2");
  Ok(c_->DeleteJob("never-1"));
  ASSERT_TRUE(c_->RunPass().ok());
  EXPECT_EQ(Message("never-2"), shared);
}

// A registration batch (the head's batcher sends up to 1,000) is written in commits of at most
// Controller::kRegistrationBytesPerCommit of documents, not one commit: etcd refuses a request
// over 1.5 MiB by default (controller_etcd_test registers 1,000 hosts on a real etcd).
TEST_F(CountingStoreTest, ARegistrationBatchIsWrittenInCommitsOfBoundedSize) {
  std::vector<protocol::Registration> batch;
  for (int s = 0; s < 250; ++s)
    for (int w = 0; w < 4; ++w) {
      Json doc = SliceHostDoc(s, w);
      doc["credential"] = CredentialOf(doc["name"].get<std::string>());
      auto parsed = protocol::ParseRegistration(doc.dump());
      ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
      batch.push_back(*parsed);
    }
  const uint64_t before = counting_->counts().commits;
  const auto answers = c_->RegisterHosts(batch);
  ASSERT_EQ(answers.size(), 1000u);
  for (const auto& a : answers) ASSERT_TRUE(a.ok()) << a.status().ToString();
  const uint64_t commits = counting_->counts().commits - before;
  auto stored = store_->List(codec::kHostKind);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1000u);
  size_t bytes = 0;
  for (const store::Object& o : *stored) bytes += o.body.size() + o.name.size();
  // At least the documents' bytes over the cap, rounded up; at most one more for the events.
  const uint64_t least = (bytes + Controller::kRegistrationBytesPerCommit - 1) /
                         Controller::kRegistrationBytesPerCommit;
  EXPECT_GE(commits, least) << bytes << " bytes of host documents";
  EXPECT_LE(commits, least + 2) << bytes << " bytes of host documents";
  EXPECT_GT(commits, 1u);
  EXPECT_EQ(c_->ListHosts()["items"].size(), 1000u);
  // Every host answers its heartbeats: registered in memory as in the store.
  Ok(Beat(*c_, "s249-w3", {{"workers", Json::array()}}));
}

}  // namespace
}  // namespace tessera::controller
