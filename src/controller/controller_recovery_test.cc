// The controller's recovery: failures within the budget restart the job (every worker stopped
// first), host loss pauses or resizes, hangs are detected and named, grow-back waits for a
// checkpoint, and every attempt's figures reach the job's status.
#include <gtest/gtest.h>

#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

Json ElasticDoc(const std::string& name, Json slices, Json failure_policy,
                Json progress = nullptr) {
  Json doc = JobDoc(name, 1);
  doc["spec"]["slices"] = std::move(slices);
  doc["spec"]["failurePolicy"] = std::move(failure_policy);
  if (!progress.is_null()) doc["spec"]["progress"] = std::move(progress);
  return doc;
}

class RecoveryTest : public ControllerTest {
 protected:
  Json Status(const std::string& job) { return Ok(c_->GetJob(job))["status"]; }
  // The job's next attempt is placed (Starting) on `slices` slices; returns its status.
  Json ExpectStarting(const std::string& job, int slices) {
    Json st = Status(job);
    EXPECT_EQ(st["phase"], "Starting");
    EXPECT_EQ(st["slices"], slices);
    return st;
  }
  std::vector<std::string> AllHosts() {
    std::vector<std::string> out;
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) out.push_back(HostName(s, w));
    return out;
  }
  // One heartbeat from `host`: its assigned workers in `state` (Running unless overridden per
  // rank), plus progress records.
  Json Beat(const std::string& host, const std::map<int, Json>& overrides = {},
            Json progress = Json::array()) {
    Json a = Ok(c_->Assignments(host));
    Json workers = Json::array();
    for (const Json& x : a["assignments"]) {
      Json w = {{"job", x["job"]},   {"uid", x["uid"]}, {"attempt", x["attempt"]},
                {"rank", x["rank"]}, {"pid", 100},      {"state", "Running"},
                {"exitCode", 0},     {"signal", 0},     {"startedAtMs", clock_.NowMs()},
                {"finishedAtMs", 0}};
      if (auto it = overrides.find(x["rank"].get<int>()); it != overrides.end())
        w.update(it->second);
      workers.push_back(w);
    }
    return Ok(controller::Beat(
        *c_, host,
        {{"workers", workers}, {"revision", a["revision"]}, {"progress", std::move(progress)}}));
  }
  // Every host but `except` says it runs nothing, confirming every stop.
  void ConfirmAll(const std::string& except = "") {
    for (const auto& h : AllHosts())
      if (h != except)
        Ok(controller::Beat(*c_, h, {{"workers", Json::array()}, {"revision", 1'000'000}}));
  }
  // `lost` stays silent while the others heartbeat, past the lease; then the others confirm.
  void LoseHost(const std::string& lost) {
    for (int i = 0; i < 6; ++i) {
      clock_.AdvanceMs(1000);
      ConfirmAll(lost);
      EXPECT_TRUE(c_->Tick().ok());
    }
    ConfirmAll(lost);
  }
  void BeatAll() {
    for (const auto& h : AllHosts()) Beat(h);
  }
  // Every rank of `job` (attempt `attempt`) reports `type` at `step`, through its own host.
  void Report(const std::string& job, int attempt, const std::string& type, int64_t step,
              double seconds = 0) {
    Json st = Status(job);
    for (const Json& w : st["workers"]) {
      Json rec = {{"job", job},   {"uid", Uid(job)}, {"attempt", attempt},      {"rank", w["rank"]},
                  {"type", type}, {"step", step},    {"timeMs", clock_.NowMs()}};
      if (type != "progress") rec["seconds"] = seconds;
      Beat(w["host"], {}, Json::array({rec}));
    }
  }
  std::string EnvOf(const std::string& host, const std::string& var) {
    Json a = Ok(c_->Assignments(host))["assignments"];
    return a.empty() ? "" : a[0]["env"][var].get<std::string>();
  }
  bool HasEvent(const std::string& reason) {
    const Json events = c_->ListEvents();
    for (const Json& e : events["items"])
      if (e.value("reason", "") == reason) return true;
    return false;
  }
};

TEST_F(RecoveryTest, AWorkerFailureWithinTheBudgetRestartsEveryWorkerWithFreshValues) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(ElasticDoc("train", 2, {{"maxFailures", 2}})));
  BeatAll();
  ASSERT_EQ(Phase("train"), "Running");
  const std::string old_port = EnvOf(HostName(0, 0), "MASTER_PORT");
  EXPECT_EQ(EnvOf(HostName(0, 0), "TESSERA_ATTEMPT"), "0");

  clock_.AdvanceMs(1000);
  const int64_t killed_at = clock_.NowMs() - 50;
  Json reply = Beat(
      HostName(0, 3),
      {{3, {{"state", "Exited"}, {"exitCode", 137}, {"signal", 9}, {"finishedAtMs", killed_at}}}});
  EXPECT_EQ(Phase("train"), "Restarting");
  // Every assignment is withdrawn and the broken attempt is killed without a grace period.
  EXPECT_TRUE(reply["assignments"].empty());
  ASSERT_TRUE(reply.contains("stop"));
  EXPECT_EQ(reply["stop"][0]["graceMs"], 0);
  EXPECT_EQ(reply["stop"][0]["attempt"], 0);

  // Until every other host confirms its worker is gone, nothing new starts anywhere.
  for (const auto& h : AllHosts())
    if (h != HostName(1, 3)) Beat(h, {{0, {{"state", "Running"}}}});
  EXPECT_EQ(Phase("train"), "Restarting");
  // (The beats above re-reported attempt 0 as Running: the stop is still unconfirmed there.)
  ConfirmAll();
  EXPECT_EQ(Phase("train"), "Starting");
  Json st = Status("train");
  EXPECT_EQ(st["attempt"], 1);
  EXPECT_EQ(EnvOf(HostName(0, 0), "TESSERA_ATTEMPT"), "1");
  EXPECT_NE(EnvOf(HostName(0, 0), "MASTER_PORT"), old_port);
  ASSERT_EQ(st["attempts"].size(), 2u);
  EXPECT_EQ(st["attempts"][0]["endReason"], "WorkerFailed");
  EXPECT_EQ(st["attempts"][0]["failedRanks"], Json::array({3}));
  EXPECT_EQ(st["attempts"][0]["failureMs"], killed_at);
  EXPECT_EQ(st["attempts"][1]["recovery"]["timeToDetectMs"], 50);
  EXPECT_EQ(st["failures"], 1);
  EXPECT_TRUE(HasEvent("WorkerFailed"));
  EXPECT_TRUE(HasEvent("Restarting"));
}

TEST_F(RecoveryTest, NoAssignmentOfTheNewAttemptWhileAnOldWorkerMayRun) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(ElasticDoc("train", 2, {{"maxFailures", -1}})));
  BeatAll();
  Beat(HostName(0, 0), {{0, {{"state", "Exited"}, {"exitCode", 1}}}});
  // Seven hosts confirm; s1-w2 keeps reporting its attempt-0 worker as running.
  for (const auto& h : AllHosts()) {
    if (h == HostName(1, 2)) {
      Ok(controller::Beat(*c_, h,
                          {{"workers", Json::array({{{"job", "train"},
                                                     {"uid", Uid("train")},
                                                     {"attempt", 0},
                                                     {"rank", 6},
                                                     {"pid", 100},
                                                     {"startedAtMs", 0},
                                                     {"state", "Running"}}})},
                           {"revision", 1'000'000}}));
      continue;
    }
    Ok(controller::Beat(*c_, h, {{"workers", Json::array()}, {"revision", 1'000'000}}));
  }
  for (const auto& h : AllHosts()) EXPECT_TRUE(Ok(c_->Assignments(h))["assignments"].empty()) << h;
  EXPECT_EQ(Phase("train"), "Restarting");
  Ok(controller::Beat(*c_, HostName(1, 2), {{"workers", Json::array()}, {"revision", 1'000'000}}));
  EXPECT_EQ(Phase("train"), "Starting");
}

TEST_F(RecoveryTest, PastMaxFailuresTheJobFailsWithItsAttemptHistory) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(ElasticDoc("train", 1, {{"maxFailures", 1}})));
  for (int attempt = 0; attempt < 2; ++attempt) {
    BeatAll();
    ASSERT_EQ(Phase("train"), "Running") << attempt;
    Report("train", attempt, "progress", 10 + attempt);
    const std::string host = Status("train")["workers"][1]["host"];
    Beat(host, {{1, {{"state", "Exited"}, {"exitCode", 3}}}});
    ConfirmAll();
  }
  EXPECT_EQ(Phase("train"), "Failed");
  Json st = Status("train");
  EXPECT_EQ(st["failures"], 2);
  ASSERT_EQ(st["attempts"].size(), 2u);
  EXPECT_EQ(st["attempts"][1]["endReason"], "WorkerFailed");
  const std::string msg = st["message"];
  EXPECT_NE(msg.find("maxFailures 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("attempt 0 WorkerFailed at step 10; attempt 1 WorkerFailed at step 11"),
            std::string::npos)
      << msg;
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 0);
}

TEST_F(RecoveryTest, RecoveryFiguresFromProgressCheckpointAndRestoreReports) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(ElasticDoc("train", 1, {{"maxFailures", 3}})));
  BeatAll();
  for (int step = 0; step <= 34; ++step) {
    clock_.AdvanceMs(100);
    Report("train", 0, "progress", step);
    if (step == 30) Report("train", 0, "checkpoint", step, 0.5);
  }
  clock_.AdvanceMs(100);
  const std::string host = Status("train")["workers"][2]["host"];
  const int64_t failed_at = clock_.NowMs();
  clock_.AdvanceMs(200);
  Beat(host,
       {{2, {{"state", "Exited"}, {"signal", 9}, {"exitCode", 137}, {"finishedAtMs", failed_at}}}});
  clock_.AdvanceMs(300);
  ConfirmAll();
  ASSERT_EQ(Phase("train"), "Starting");
  BeatAll();
  clock_.AdvanceMs(400);
  Report("train", 1, "restore", 30, 0.25);
  clock_.AdvanceMs(600);
  Report("train", 1, "progress", 31);

  Json st = Status("train");
  const Json& r = st["attempts"][1]["recovery"];
  EXPECT_EQ(r["timeToDetectMs"], 200);
  EXPECT_EQ(r["timeToScheduleMs"], 300);
  EXPECT_EQ(r["timeToFirstStepMs"], 1000);
  EXPECT_EQ(r["timeToRestoreMs"], 250);
  EXPECT_EQ(r["timeToRecoverMs"], 1500);
  EXPECT_EQ(r["stepsLost"], 4);
  EXPECT_EQ(st["recovery"]["stepsLost"], 4);
  EXPECT_EQ(st["recovery"]["checkpoint"]["saveSeconds"], 0.5);
  EXPECT_EQ(st["recovery"]["checkpoint"]["mtbfSource"], "observed");
  EXPECT_GT(st["recovery"]["checkpoint"]["advisedIntervalSeconds"].get<double>(), 0);
  const double goodput = st["recovery"]["goodput"];
  EXPECT_GT(goodput, 0.5);
  EXPECT_LT(goodput, 1.0);
  EXPECT_TRUE(HasEvent("Recovered"));
}

TEST_F(RecoveryTest, AHangIsDetectedAndTheRankThatStoppedTickingIsNamed) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(ElasticDoc("train", 2, {{"maxFailures", 1}}, {{"hangTimeout", "10s"}})));
  BeatAll();
  ASSERT_EQ(Phase("train"), "Running");
  Report("train", 0, "progress", 5);
  Report("train", 0, "alive", 5);
  // Rank 6 stops entirely; the others keep ticking (they wait in a collective) but complete no
  // step.
  for (int second = 1; second <= 10; ++second) {
    clock_.AdvanceMs(1000);
    Json st = Status("train");
    for (const Json& w : st["workers"]) {
      if (w["rank"] == 6) {
        Beat(w["host"]);
        continue;
      }
      Beat(w["host"], {},
           Json::array({{{"job", "train"},
                         {"uid", Uid("train")},
                         {"attempt", 0},
                         {"rank", w["rank"]},
                         {"type", "alive"},
                         {"step", 5},
                         {"timeMs", clock_.NowMs()}}}));
    }
    EXPECT_TRUE(c_->Tick().ok());
    ASSERT_EQ(Phase("train"), "Running") << "detected too early, after " << second << " s";
  }
  clock_.AdvanceMs(1000);
  EXPECT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Phase("train"), "Restarting");
  Json st = Status("train");
  EXPECT_EQ(st["attempts"][0]["endReason"], "Hang");
  EXPECT_EQ(st["attempts"][0]["failedRanks"], Json::array({6}));
  const std::string msg = st["attempts"][0]["message"];
  EXPECT_NE(msg.find("rank 6 "), std::string::npos) << msg;
  EXPECT_TRUE(HasEvent("HangDetected"));
}

TEST_F(RecoveryTest, HostLossWithPauseWaitsForTheHostAndComesBackAtFullSize) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(ElasticDoc("train", 2, {{"maxFailures", 2}, {"onHostLoss", "pause"}})));
  BeatAll();
  ASSERT_EQ(Phase("train"), "Running");
  // s1-w1 goes silent past the lease (5 s); everyone else keeps heartbeating.
  LoseHost(HostName(1, 1));
  Json st = Status("train");
  EXPECT_EQ(st["phase"], "Pending");
  EXPECT_EQ(st["attempts"][0]["endReason"], "HostLost");
  EXPECT_EQ(st["attempts"][0]["failedRanks"], Json::array({5}));
  EXPECT_EQ(st["attempts"].size(), 1u);  // waiting: nothing placed on the remaining slice
  // The host comes back.
  Ok(controller::Beat(*c_, HostName(1, 1), {{"workers", Json::array()}, {"revision", 1'000'000}}));
  EXPECT_TRUE(c_->Tick().ok());
  EXPECT_EQ(ExpectStarting("train", 2)["attempt"], 1);
}

TEST_F(RecoveryTest, HostLossFailsTheJobWhenOnHostLossIsFail) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(ElasticDoc("train", 2, {{"maxFailures", 5}})));
  BeatAll();
  LoseHost(HostName(0, 2));
  EXPECT_EQ(Phase("train"), "Failed");
  EXPECT_NE(Status("train")["message"].get<std::string>().find("onHostLoss is fail"),
            std::string::npos);
}

TEST_F(RecoveryTest, ResizeShrinksAtOnceAndGrowsBackAfterTheNextCheckpoint) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(
      ElasticDoc("train", {{"min", 1}, {"max", 2}},
                 {{"maxFailures", 2}, {"onHostLoss", "resize"}, {"growBackInterval", "1s"}})));
  BeatAll();
  ASSERT_EQ(Status("train")["slices"], 2);
  Report("train", 0, "checkpoint", 10, 0.1);
  LoseHost(HostName(1, 0));
  Json st = Status("train");
  ASSERT_EQ(st["phase"], "Starting") << st.dump();
  EXPECT_EQ(st["slices"], 1);
  EXPECT_TRUE(HasEvent("Resized"));
  for (const auto& h : AllHosts())
    if (h != HostName(1, 0)) Beat(h);
  ASSERT_EQ(Phase("train"), "Running");
  Report("train", 1, "progress", 11);

  // The host returns; the next grow check sees room for 2 slices but waits for a checkpoint.
  Ok(controller::Beat(*c_, HostName(1, 0), {{"workers", Json::array()}, {"revision", 1'000'000}}));
  clock_.AdvanceMs(1000);
  EXPECT_TRUE(c_->Tick().ok());
  EXPECT_EQ(Phase("train"), "Running");
  EXPECT_EQ(Status("train")["growBack"]["targetSlices"], 2);
  Report("train", 1, "progress", 12);
  EXPECT_EQ(Phase("train"), "Running");
  Report("train", 1, "checkpoint", 12, 0.1);
  st = Status("train");
  EXPECT_EQ(st["phase"], "Restarting");
  EXPECT_EQ(st["attempts"][1]["endReason"], "GrowBack");
  // A grow-back is not a failure: SIGTERM with the grace period, so the workers can save.
  EXPECT_FALSE(Ok(c_->Assignments(HostName(0, 0))).contains("stop"));
  ConfirmAll();
  EXPECT_EQ(ExpectStarting("train", 2)["failures"], 1);
}

TEST_F(RecoveryTest, AHostLostDuringARestartLetsResizeTakeFewerSlices) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(ElasticDoc("train", {{"min", 1}, {"max", 2}},
                              {{"maxFailures", 2}, {"onHostLoss", "resize"}})));
  BeatAll();
  ASSERT_EQ(Status("train")["slices"], 2);
  // The host dies; its peers' collectives fail first, before the lease runs out.
  Beat(HostName(0, 1), {{1, {{"state", "Exited"}, {"exitCode", 1}}}});
  ASSERT_EQ(Phase("train"), "Restarting");
  LoseHost(HostName(1, 0));
  Json st = Status("train");
  EXPECT_EQ(st["phase"], "Starting") << st.dump();
  EXPECT_EQ(st["slices"], 1);
  EXPECT_EQ(st["placement"][0]["slice"], "slice-0");
  EXPECT_EQ(st["failures"], 1);
}

TEST_F(RecoveryTest, AnElasticJobStartsAtItsMinimumWhenOnlyThatFits) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("first", 1)));
  Ok(c_->CreateJob(ElasticDoc("elastic", {{"min", 1}, {"max", 2}}, {{"onHostLoss", "resize"}})));
  EXPECT_EQ(Phase("elastic"), "Starting");
  EXPECT_EQ(Status("elastic")["slices"], 1);
}

TEST_F(RecoveryTest, AttemptsSurviveAHeadRestart) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(ElasticDoc("train", 1, {{"maxFailures", 2}})));
  BeatAll();
  const std::string host = Status("train")["workers"][0]["host"];
  Beat(host, {{0, {{"state", "Exited"}, {"exitCode", 1}}}});
  ConfirmAll();
  ASSERT_EQ(Status("train")["attempt"], 1);
  Start();  // a new controller on the same store
  Json st = Status("train");
  EXPECT_EQ(st["failures"], 1);
  ASSERT_EQ(st["attempts"].size(), 2u);
  EXPECT_EQ(st["attempts"][0]["endReason"], "WorkerFailed");
}

// A worker's last lines reach the head in the heartbeat that reports its exit (the agent reads
// them first), and the other ranks' last lines in heartbeats after the head began stopping the
// attempt. Every one counts: the attempt's last step is the last step any worker completed.
TEST_F(RecoveryTest, LastLinesInTheExitHeartbeatAndAfterTheStopCountInTheFigures) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(ElasticDoc("train", 1, {{"maxFailures", 3}})));
  BeatAll();
  for (int step = 0; step <= 33; ++step) {
    clock_.AdvanceMs(100);
    Report("train", 0, "progress", step);
    if (step == 30) Report("train", 0, "checkpoint", step, 0.5);
  }
  Json st = Status("train");
  auto line = [&](int rank, int64_t step) {
    return Json{{"job", "train"},
                {"uid", Uid("train")},
                {"attempt", 0},
                {"rank", rank},
                {"type", "progress"},
                {"step", step},
                {"timeMs", clock_.NowMs()}};
  };
  clock_.AdvanceMs(200);
  const std::string dead = st["workers"][2]["host"];
  Beat(
      dead,
      {{2,
        {{"state", "Exited"}, {"signal", 9}, {"exitCode", 137}, {"finishedAtMs", clock_.NowMs()}}}},
      Json::array({line(2, 34), line(2, 35)}));
  ASSERT_EQ(Phase("train"), "Restarting");
  for (const Json& w : st["workers"])
    if (w["rank"] != 2)
      Beat(w["host"], {}, Json::array({line(w["rank"], 34), line(w["rank"], 35)}));
  EXPECT_EQ(Status("train")["attempts"][0]["lastStep"], 35);
  ConfirmAll();
  ASSERT_EQ(Phase("train"), "Starting");
  BeatAll();
  clock_.AdvanceMs(400);
  Report("train", 1, "restore", 30, 0.25);
  // A line of the old attempt after the new one was placed is not counted in the new one.
  Beat(dead, {}, Json::array({line(2, 36)}));
  clock_.AdvanceMs(600);
  Report("train", 1, "progress", 31);
  st = Status("train");
  EXPECT_EQ(st["attempts"][0]["lastStep"], 35);
  EXPECT_EQ(st["attempts"][1]["lastStep"], 31);
  EXPECT_EQ(st["attempts"][1]["resumedFromStep"], 30);
  EXPECT_EQ(st["attempts"][1]["recovery"]["stepsLost"], 5);
}

}  // namespace
}  // namespace tessera::controller
