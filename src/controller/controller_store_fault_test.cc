// Every store error surfaces: with the store refusing writes, a request fails with 503 naming
// the cause, the controller's memory is as before, and nothing is emitted (no watch event, no
// assignment change). After the store heals, the same input succeeds.
#include <gtest/gtest.h>

#include "controller/controller.h"
#include "controller/controller_test_util.h"
#include "store/faulty_store.h"
#include "store/memory_store.h"

namespace tessera::controller {
namespace {

class StoreFaultTest : public ControllerTest {
 protected:
  void SetUp() override {
    inner_ = OpenMemoryStore();
    ASSERT_NE(inner_, nullptr);
    faulty_ = std::make_unique<store::FaultyStore>(*inner_);
    c_ = std::make_unique<Controller>(*faulty_, clock_, ControllerOptions{});
    ASSERT_TRUE(c_->Load().ok());
    c_->SetChangeListener([this](const std::string& kind, const std::string&, const Json&) {
      emitted_.push_back(kind);
    });
    c_->SetAssignmentListener([this](const std::set<std::string>& hosts) {
      notified_.insert(hosts.begin(), hosts.end());
    });
  }
  // Starts refusing writes and forgets what was emitted so far.
  void Break() {
    faulty_->FailCommits();
    emitted_.clear();
    notified_.clear();
    events_before_ = c_->ListEvents()["items"].size();
  }
  void ExpectNothingHappened() {
    EXPECT_TRUE(emitted_.empty()) << "emitted " << emitted_.size() << " changes, first "
                                  << (emitted_.empty() ? "" : emitted_[0]);
    EXPECT_TRUE(notified_.empty());
    EXPECT_EQ(c_->ListEvents()["items"].size(), events_before_);
    EXPECT_GT(faulty_->refused(), 0);
  }
  static void ExpectUnavailable(const Status& e) {
    EXPECT_EQ(e.code(), StatusCode::kUnavailable);
    EXPECT_NE(e.message().find("injected: disk I/O error"), std::string::npos) << e.message();
  }

  std::unique_ptr<store::Store> inner_;
  std::unique_ptr<store::FaultyStore> faulty_;
  std::vector<std::string> emitted_;
  std::set<std::string> notified_;
  size_t events_before_ = 0;
};

TEST_F(StoreFaultTest, AFailedCreateStoresNothingAndCanBeRetried) {
  RegisterTwoSlices();
  Break();
  ExpectUnavailable(Err(c_->CreateJob(JobDoc("train", 2))));
  ExpectNothingHappened();
  EXPECT_EQ(Err(c_->GetJob("train")).code(), StatusCode::kNotFound);
  EXPECT_TRUE(c_->ListJobs()["items"].empty());
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 0);
  faulty_->Heal();
  Ok(c_->CreateJob(JobDoc("train", 2)));
  EXPECT_EQ(Phase("train"), "Starting");
}

// A registration of host `name` in slice `slice` at worker `w` (2D v6e 4x4), as decoded.
protocol::Registration SliceHost(const std::string& name, const std::string& slice, int w,
                                 const std::string& credential_of = "") {
  Json body = {{"name", name},
               {"generation", "v6e"},
               {"chips", 4},
               {"address", "127.0.0.1"},
               {"agentPort", 9000 + w},
               {"credential", CredentialOf(credential_of.empty() ? name : credential_of)},
               {"slice", {{"name", slice}, {"topology", "4x4"}, {"worker", w}}}};
  auto r = protocol::ParseRegistration(body.dump());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : protocol::Registration{};
}

// The registered host's name, or the error that refused it.
std::string NameOrError(const Result<Json>& r) {
  return r.ok() ? r->value("host", "") : r.status().ToString();
}

TEST_F(StoreFaultTest, ABatchOfRegistrationsIsOneCommitAndEachIsCheckedAgainstTheOnesBefore) {
  const int64_t revision = inner_->Revision();
  auto answers = c_->RegisterHosts({
      SliceHost("a0", "slice-a", 0), SliceHost("a1", "slice-a", 1),
      SliceHost("a0", "slice-a", 0, "another agent"),  // a0 again, with another credential
      SliceHost("b0", "slice-b", 0),
      SliceHost("a1", "slice-a", 1),  // a1's agent again: one write of a key per commit
  });
  ASSERT_EQ(answers.size(), 5u);
  EXPECT_EQ(Err(answers[4]).code(), StatusCode::kUnavailable);
  EXPECT_NE(Err(answers[4]).message().find("register again"), std::string::npos);
  EXPECT_EQ(NameOrError(answers[0]), "a0");
  EXPECT_EQ(NameOrError(answers[1]), "a1");
  EXPECT_EQ(Err(answers[2]).code(), StatusCode::kAlreadyExists);
  EXPECT_NE(Err(answers[2]).message().find("credential"), std::string::npos);
  EXPECT_EQ(NameOrError(answers[3]), "b0");
  EXPECT_EQ(inner_->Revision(), revision + 1) << "three hosts, one commit";
  EXPECT_EQ(c_->ListHosts()["items"].size(), 3u);
  // What was committed is what a restarted controller loads.
  Controller reloaded(*inner_, clock_, ControllerOptions{});
  ASSERT_TRUE(reloaded.Load().ok());
  EXPECT_EQ(reloaded.ListHosts()["items"].size(), 3u);
}

TEST_F(StoreFaultTest, AFailedBatchOfRegistrationsLeavesNoHostAndEachIsAnsweredUnavailable) {
  Ok(c_->RegisterHost(SliceHost("a0", "slice-a", 0)));
  const Json before = c_->ListHosts();
  protocol::Registration bad_credential = SliceHost("a2", "slice-a", 2);
  bad_credential.credential = "not hex";
  Break();
  auto answers = c_->RegisterHosts({
      SliceHost("a0", "slice-a", 0),  // the same agent again: its entry must come back as it was
      SliceHost("a1", "slice-a", 1),
      bad_credential,  // refused before the commit
  });
  ASSERT_EQ(answers.size(), 3u);
  ExpectUnavailable(Err(answers[0]));
  ExpectUnavailable(Err(answers[1]));
  EXPECT_EQ(Err(answers[2]).code(), StatusCode::kInvalidArgument);
  ExpectNothingHappened();
  EXPECT_EQ(c_->ListHosts(), before);
  faulty_->Heal();
  auto again = c_->RegisterHosts({SliceHost("a1", "slice-a", 1)});
  EXPECT_EQ(NameOrError(again[0]), "a1");
  EXPECT_EQ(c_->ListHosts()["items"].size(), 2u);
}

TEST_F(StoreFaultTest, AFailedUpdateLeavesTheJobAsItWasUntilTheAgentReportsAgain) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 2)));
  const Json before = Ok(c_->GetJob("train"));
  Break();
  const std::string h = HostName(0, 0);
  Json a = Ok(c_->Assignments(h));
  Json running = {{"revision", a["revision"]},
                  {"workers",
                   {{{"job", "train"},
                     {"uid", a["assignments"][0]["uid"]},
                     {"attempt", 0},
                     {"rank", a["assignments"][0]["rank"]},
                     {"pid", 100},
                     {"startedAtMs", 0},
                     {"state", "Running"}}}}};
  ExpectUnavailable(Err(Beat(*c_, h, running)));
  ExpectNothingHappened();
  EXPECT_EQ(Ok(c_->GetJob("train")), before);
  faulty_->Heal();
  Ok(Beat(*c_, h, running));
  EXPECT_EQ(Ok(c_->GetJob("train"))["status"]["workers"][0]["state"], "Running");
}

TEST_F(StoreFaultTest, AFailedDeleteKeepsTheJobRunning) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 2)));
  HeartbeatAll("Running");
  const Json before = Ok(c_->GetJob("train"));
  const Json assignments = Ok(c_->Assignments(HostName(1, 3)));
  Break();
  ExpectUnavailable(Err(c_->DeleteJob("train")));
  ExpectNothingHappened();
  EXPECT_EQ(Ok(c_->GetJob("train")), before);
  EXPECT_EQ(Ok(c_->Assignments(HostName(1, 3))), assignments);
  faulty_->Heal();
  EXPECT_EQ(Ok(c_->DeleteJob("train"))["status"], "Terminating");
  EXPECT_EQ(Phase("train"), "Terminating");
}

TEST_F(StoreFaultTest, AFailedSchedulingPassPlacesNothingAndTheNextTickDoes) {
  // The job arrives before any host: it waits for the first pass after registration.
  Ok(c_->CreateJob(JobDoc("train", 2)));
  RegisterTwoSlices();
  const Json before = Ok(c_->GetJob("train"));
  Break();
  const Status ticked = c_->Tick();
  EXPECT_EQ(ticked.code(), StatusCode::kUnavailable) << ticked.ToString();
  ExpectNothingHappened();
  EXPECT_EQ(Ok(c_->GetJob("train")), before);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 0);
  EXPECT_TRUE(Ok(c_->Assignments(HostName(0, 0)))["assignments"].empty());
  faulty_->Heal();
  EXPECT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Phase("train"), "Starting");
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);
}

TEST_F(StoreFaultTest, ALeaseThatRunsOutWhileTheStoreIsDownIsExpiredOnceItHeals) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 2)));
  HeartbeatAll("Running");
  Break();
  clock_.AdvanceMs(ControllerOptions{}.lease_ms + 1);
  EXPECT_FALSE(c_->Tick().ok());
  ExpectNothingHappened();
  EXPECT_EQ(Phase("train"), "Running");
  EXPECT_EQ(c_->ListHosts()["items"][0]["status"]["state"], "Ready");
  faulty_->Heal();
  EXPECT_TRUE(c_->Tick().ok());
  EXPECT_EQ(c_->ListHosts()["items"][0]["status"]["state"], "Lost");
  EXPECT_EQ(Phase("train"), "Failed");  // onHostLoss: fail (the default)
}

// The statuses a pass changes are written by the tick's flush, many jobs to a commit
// (status_writes.cc). With the store down the flush fails, says so, and every stored document
// stays as it was; the statuses stay unsaved and reach the store once it heals.
TEST_F(StoreFaultTest, AFailedStatusFlushKeepsTheStoredJobsAndWritesOnceTheStoreHeals) {
  Ok(c_->CreateJob(JobDoc("big-a", 3)));  // three slices: never placed on two
  Ok(c_->CreateJob(JobDoc("big-b", 3)));
  auto stored = [&](const std::string& name) {
    auto obj = inner_->Get("TrainJob", name);
    EXPECT_TRUE(obj.ok()) << obj.status().ToString();
    return obj.ok() ? *obj : store::Object{};
  };
  const store::Object a_before = stored("big-a"), b_before = stored("big-b");
  RegisterTwoSlices();
  Break();
  const Status ticked = c_->Tick();  // its pass gives both jobs a reason, in memory
  const std::string reason = Ok(c_->GetJob("big-a"))["status"]["reason"];
  ASSERT_NE(Json::parse(a_before.body)["status"].value("reason", ""), reason);
  EXPECT_EQ(ticked.code(), StatusCode::kUnavailable) << ticked.ToString();
  EXPECT_NE(ticked.message().find("writing the status of trainjob big-a and 1 more jobs"),
            std::string::npos)
      << ticked.message();
  EXPECT_EQ(stored("big-a"), a_before) << "a failed flush changed a stored job";
  EXPECT_EQ(stored("big-b"), b_before);
  EXPECT_EQ(Ok(c_->GetJob("big-a"))["status"]["reason"], reason) << "reads see the reason";
  faulty_->Heal();
  ASSERT_TRUE(c_->Tick().ok());
  for (const std::string name : {"big-a", "big-b"}) {
    const store::Object now = stored(name);
    EXPECT_EQ(Json::parse(now.body)["status"]["reason"], reason) << name;
    EXPECT_EQ(Ok(c_->GetJob(name))["metadata"]["resourceVersion"], now.resource_version) << name;
  }
  EXPECT_EQ(stored("big-a").resource_version, stored("big-b").resource_version)
      << "two statuses, two commits";
}

// A beat answered from memory (quiet_beats.cc) whose reports need a write when applied, here the
// first step of a restarted attempt (its Recovered event): while the store refuses, the beat is
// answered, nothing of it shows, and the tick fails; once the store heals, the next tick applies
// it. The agent dropped those lines when it was answered: they must not be lost.
TEST_F(StoreFaultTest, ASteadyBeatWhoseWriteFailsIsAppliedOnceTheStoreHeals) {
  RegisterTwoSlices();
  Json doc = JobDoc("train", 1);
  doc["spec"]["failurePolicy"] = {{"maxFailures", 2}};
  Ok(c_->CreateJob(doc));
  ASSERT_TRUE(c_->RunPass().ok());
  HeartbeatAll("Running");
  const std::string host = Ok(c_->GetJob("train"))["status"]["workers"][0]["host"];
  HeartbeatAll("Exited", 1, host);  // attempt 0 fails; the others' workers are stopped
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w)
      Ok(Beat(*c_, HostName(s, w), {{"workers", Json::array()}, {"revision", 1'000'000}}));
  ASSERT_TRUE(c_->RunPass().ok());
  HeartbeatAll("Running");
  Json st = Ok(c_->GetJob("train"))["status"];
  ASSERT_EQ(st["phase"], "Running");
  ASSERT_EQ(st["attempt"], 1);
  const std::string rank0 = st["workers"][0]["host"];
  const Json assigned = Ok(c_->Assignments(rank0));
  const Json body = {{"workers", WorkerReports(assigned, "Running")},
                     {"progress", ProgressReports(assigned, 3, clock_.NowMs())}};
  auto beat = protocol::ParseHeartbeat(body.dump());
  ASSERT_TRUE(beat.ok()) << beat.status().ToString();

  Break();
  ASSERT_TRUE(c_->QuietHeartbeat(rank0, CredentialOf(rank0), *beat)) << "answered from memory";
  EXPECT_EQ(Ok(c_->GetJob("train"))["status"]["attempts"][1]["firstStep"], -1);
  ExpectNothingHappened();
  ExpectUnavailable(c_->Tick());
  faulty_->Heal();
  ASSERT_TRUE(c_->Tick().ok());
  st = Ok(c_->GetJob("train"))["status"];
  EXPECT_EQ(st["attempts"][1]["firstStep"], 3) << st.dump();
  EXPECT_EQ(st["lastStep"], 3);
  int recovered = 0;
  const Json events = c_->ListEvents();
  for (const Json& e : events["items"]) recovered += e["reason"] == "Recovered";
  EXPECT_EQ(recovered, 1);
}

}  // namespace
}  // namespace tessera::controller
