// Fencing on the head (fencing.cc, head_term.cc, workload/train_fence.cc): a job that loses a
// host whose agent fences waits for that fence before its replacement attempt starts (fake
// clock), the term goes into every snapshot and only grows, agents' refusals become events, and
// every head start takes a new term from the store.
#include <gtest/gtest.h>

#include "controller/controller_test_util.h"
#include "controller/head_term.h"

namespace tessera::controller {
namespace {

constexpr int64_t kFenceMs = 15'000;

class FenceTest : public ControllerTest {
 protected:
  // Two 4x4 slices whose agents fence after `fence_ms` (0: agents that do not fence).
  void RegisterFencedSlices(int64_t fence_ms) {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        Json body = {
            {"name", HostName(s, w)},
            {"generation", "v6e"},
            {"chips", 4},
            {"slice",
             {{"name", "slice-" + std::to_string(s)}, {"topology", "4x4"}, {"worker", w}}}};
        if (fence_ms > 0) body["fenceMs"] = fence_ms;
        Ok(Register(*c_, body));
      }
  }
  // `host` reports its assigned workers running.
  void BeatRunning(const std::string& host) {
    Json a = Ok(c_->Assignments(host));
    Ok(Beat(*c_, host, {{"workers", WorkerReports(a, "Running")}, {"revision", a["revision"]}}));
  }
  // Every host but `silent` heartbeats (running what it is assigned), then a tick.
  void Second(const std::string& silent) {
    clock_.AdvanceMs(1000);
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w)
        if (HostName(s, w) != silent) BeatRunning(HostName(s, w));
    ASSERT_TRUE(c_->Tick().ok());
  }
  Json Status(const std::string& job) { return Ok(c_->GetJob(job))["status"]; }
  bool HasEvent(const std::string& reason, const std::string& object = "") {
    const Json events = c_->ListEvents();
    for (const Json& e : events["items"])
      if (e.value("reason", "") == reason && (object.empty() || e.value("object", "") == object))
        return true;
    return false;
  }
  Json TrainDoc() {
    Json doc = JobDoc("train", 1);
    doc["spec"]["failurePolicy"] = {{"maxFailures", 2}, {"onHostLoss", "resize"}};
    return doc;
  }
};

TEST_F(FenceTest, AReplacementAttemptWaitsForTheLostHostsFence) {
  RegisterFencedSlices(kFenceMs);
  Ok(c_->CreateJob(TrainDoc()));
  ASSERT_EQ(Status("train")["phase"], "Starting");
  const std::string lost = Status("train")["workers"][0]["host"];
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) BeatRunning(HostName(s, w));
  ASSERT_EQ(Status("train")["phase"], "Running");
  const int64_t last_heard = clock_.NowMs();

  // The lease (5 s) runs out: the attempt has failed, but its worker on the lost host may still
  // run until that agent's fence (15 s since it was last heard of) is over.
  for (int i = 0; i < 6; ++i) Second(lost);
  Json st = Status("train");
  ASSERT_EQ(st["attempts"][0]["endReason"], "HostLost");
  EXPECT_EQ(st["phase"], "Restarting");
  EXPECT_NE(st["message"].get<std::string>().find("to fence its workers"), std::string::npos)
      << st["message"];
  EXPECT_NE(st["message"].get<std::string>().find(lost), std::string::npos);
  EXPECT_TRUE(HasEvent("WaitingForFence", "trainjob/train"));
  // Every other host confirmed long ago; still nothing starts, on any slice.
  while (clock_.NowMs() < last_heard + kFenceMs) {
    EXPECT_EQ(Status("train")["phase"], "Restarting") << "at +" << clock_.NowMs() - last_heard;
    EXPECT_EQ(Status("train")["attempt"], 0);
    Second(lost);
  }
  // The fence plus the margin (1 s) is over: the chips are released and attempt 1 starts.
  Second(lost);
  Second(lost);
  st = Status("train");
  EXPECT_EQ(st["attempt"], 1) << st;
  EXPECT_TRUE(st["phase"] == "Starting" || st["phase"] == "Running") << st["phase"];
  EXPECT_TRUE(HasEvent("Fenced", "trainjob/train"));
  const int64_t placed = st["attempts"][1]["placedMs"].get<int64_t>();
  EXPECT_GE(placed, last_heard + kFenceMs + 1000);
  for (const Json& w : st["workers"]) EXPECT_NE(w["host"], lost);
}

TEST_F(FenceTest, AgentsThatDoNotFenceAreNotWaitedFor) {
  RegisterFencedSlices(0);
  Ok(c_->CreateJob(TrainDoc()));
  const std::string lost = Status("train")["workers"][0]["host"];
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) BeatRunning(HostName(s, w));
  const int64_t last_heard = clock_.NowMs();
  for (int i = 0; i < 8; ++i) Second(lost);
  Json st = Status("train");
  EXPECT_EQ(st["attempt"], 1) << st;
  EXPECT_LT(st["attempts"][1]["placedMs"].get<int64_t>(), last_heard + kFenceMs);
  EXPECT_FALSE(HasEvent("WaitingForFence"));
}

TEST_F(FenceTest, TheFenceTimeSurvivesAHeadRestart) {
  RegisterFencedSlices(kFenceMs);
  Start();  // a new controller on the same store: the hosts come back from it
  Ok(c_->CreateJob(TrainDoc()));
  const std::string lost = Status("train")["workers"][0]["host"];
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) BeatRunning(HostName(s, w));
  for (int i = 0; i < 8; ++i) Second(lost);
  EXPECT_EQ(Status("train")["phase"], "Restarting");
  EXPECT_TRUE(HasEvent("WaitingForFence"));
}

TEST_F(FenceTest, EverySnapshotCarriesTheTermAndTheKind) {
  ControllerOptions options;
  options.term = 7;
  c_ = std::make_unique<Controller>(*store_, clock_, options);
  ASSERT_TRUE(c_->Load().ok());
  RegisterFencedSlices(kFenceMs);
  Ok(c_->CreateJob(TrainDoc()));
  const std::string host = Status("train")["workers"][0]["host"];
  Json a = Ok(c_->Assignments(host));
  EXPECT_EQ(a["term"], 7);
  EXPECT_EQ(a["assignments"][0]["kind"], "TrainJob");
  c_->SetTerm(5);  // a term never goes back
  EXPECT_EQ(c_->term(), 7u);
  c_->SetTerm(9);
  EXPECT_EQ(Ok(c_->Assignments(host))["term"], 9);
}

TEST_F(FenceTest, RefusalsAndANewerTermBecomeEventsOnTheHost) {
  ControllerOptions options;
  options.term = 3;
  c_ = std::make_unique<Controller>(*store_, clock_, options);
  ASSERT_TRUE(c_->Load().ok());
  RegisterFencedSlices(kFenceMs);
  const std::string host = HostName(0, 1);
  const Json beat = {{"term", 4},
                     {"refused",
                      {{{"term", 3}, {"reason", "stale term: the snapshot is of term 3 ..."}},
                       {{"term", 0},
                        {"job", "train"},
                        {"uid", 1},
                        {"attempt", 0},
                        {"reason", "fenced: no head answered; the training worker was stopped"}}}}};
  Ok(Beat(*c_, host, beat));
  EXPECT_TRUE(HasEvent("StaleTerm", "host/" + host));
  EXPECT_TRUE(HasEvent("AssignmentRefused", "host/" + host));
  EXPECT_EQ(c_->newest_agent_term(), 4u);
  // The messages of the AssignmentRefused events, oldest first.
  auto refusals = [&] {
    std::vector<std::string> out;
    const Json events = c_->ListEvents();
    for (const Json& e : events["items"])
      if (e.value("reason", "") == "AssignmentRefused") out.push_back(e["message"]);
    return out;
  };
  ASSERT_EQ(refusals().size(), 2u);
  EXPECT_NE(refusals()[1].find("job train (uid 1) attempt 0: fenced"), std::string::npos)
      << refusals()[1];
  // An agent whose heartbeat timed out sends the same refusals again: no new events.
  Ok(Beat(*c_, host, beat));
  EXPECT_EQ(refusals().size(), 2u);
  // A refusal it had not reported becomes one.
  Ok(Beat(*c_, host,
          {{"refused",
            {{{"term", 0},
              {"job", "train"},
              {"uid", 1},
              {"attempt", 1},
              {"reason", "fenced: no head answered; the training worker was stopped"}}}}}));
  ASSERT_EQ(refusals().size(), 3u);
  EXPECT_NE(refusals()[2].find("attempt 1: fenced"), std::string::npos) << refusals()[2];
  // A malformed refusal refuses the heartbeat, naming the field.
  auto bad = Err(Beat(*c_, host, {{"refused", {{{"term", 1}}}}}));
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("refused[0].reason"), std::string::npos) << bad.message();
}

TEST(HeadTermTest, EveryStartTakesATermAboveEveryOneBefore) {
  auto store = OpenMemoryStore();
  ASSERT_NE(store, nullptr);
  for (uint64_t want = 1; want <= 3; ++want) {
    auto term = TakeNextHeadTerm(*store);
    ASSERT_TRUE(term.ok()) << term.status().ToString();
    EXPECT_EQ(*term, want);
  }
  ASSERT_TRUE(store
                  ->Update(kHeadTermKind, kHeadTermName, "{\"term\": \"x\"}",
                           store->Get(kHeadTermKind, kHeadTermName)->resource_version)
                  .ok());
  auto broken = TakeNextHeadTerm(*store);
  EXPECT_EQ(broken.status().code(), StatusCode::kInternal);
  EXPECT_NE(broken.status().message().find("HeadTerm"), std::string::npos);
}

}  // namespace
}  // namespace tessera::controller
