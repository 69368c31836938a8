// The differential test of the head and the simulator: one scripted scenario (an elastic job on
// two cubes, a host lost and back, checkpoints every 600 s of run time), played once through
// the head's controller with a fake clock and agents' messages, and once through the simulator.
// Both drive the same TrainLifecycle, so they must record the same attempts: sizes, when each
// was placed, first stepped and ended, why, which ranks failed, and the last step.
#include <gtest/gtest.h>

#include "controller/controller.h"
#include "controller/controller_test_util.h"
#include "sim/simulator.h"
#include "store/memory_store.h"

namespace tessera::controller {
namespace {

// The scenario, in seconds of trace time.
constexpr int64_t kFailAt = 1000;         // host 0 (cube c0, position 0,0,0) stops
constexpr int64_t kBackAt = 3000;         // and comes back
constexpr int64_t kDetectS = 60;          // the lease; the simulator's detect_s
constexpr int64_t kCheckpointS = 600;     // of run time
constexpr int64_t kStartupS = 2;          // restart: schedule + start + restore, rounded up
constexpr int64_t kEndAt = 3600;          // the script stops here (the job runs on)
constexpr int64_t kHeartbeatEveryS = 20;  // kFailAt is a heartbeat: host 0 is last heard then

// Trace second t as the lifecycle sees it in both: ms, with t = 0 at 1 s (0 means unknown).
int64_t Ms(int64_t t) { return t * 1000 + 1000; }

std::string HostAt(int cube, int x, int y, int z) {
  return "c" + std::to_string(cube) + "-" + std::to_string(x) + std::to_string(y) +
         std::to_string(z);
}

std::vector<AttemptRecord> RunSimulator() {
  auto inv = Inventory::MakePod({Generation::k7x, 1, 2});
  EXPECT_TRUE(inv.ok());
  sim::Workload w;
  sim::JobSpec j;
  j.name = "elastic";
  j.duration_s = 10'000;
  j.accelerators = 64;  // one 4x4x4 cube a slice
  j.num_slices = 2;
  j.min_slices = 1;
  w.jobs = {j};
  sim::SimOptions o;
  o.admission = sim::AdmissionKind::kFifo;
  o.failures.checkpoint_interval_s = kCheckpointS;
  o.failures.on_host_loss = sim::OnHostLoss::kShrink;
  o.failures.detect_s = kDetectS;
  o.failures.scripted = {sim::HostFault{kFailAt, HostId(0), kBackAt - kFailAt}};
  const SlicePlanner planner(o.placement);
  auto r = sim::RunSimulation(*inv, sim::MapJobs(w, *inv, o.shape_map, planner), o, planner);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok() || r->outcomes.empty()) return {};
  return r->outcomes[0].attempts;
}

// The head's side: 32 agents of two 7x cubes, driven second by second. Agents heartbeat every
// 20 s and at once after the head withdraws or assigns work (as real agents do, woken by their
// assignment watch). Rank 0 reports the job's work in slice-seconds as its step, as the
// simulator counts it.
class HeadVsSimulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenMemoryStore();
    ASSERT_NE(store_, nullptr);
    ControllerOptions options;
    // A lease expires when a host is silent for more than lease_ms: 59,999 ms expires at the
    // same millisecond the simulator notices the failure, detect_s after it.
    options.lease_ms = kDetectS * 1000 - 1;
    c_ = std::make_unique<Controller>(*store_, clock_, options);
    ASSERT_TRUE(c_->Load().ok());
    for (int cube = 0; cube < 2; ++cube)
      for (int z = 0; z < 4; ++z)
        for (int y = 0; y < 2; ++y)
          for (int x = 0; x < 2; ++x)
            Ok(Register(*c_, {{"name", HostAt(cube, x, y, z)},
                              {"generation", "7x"},
                              {"chips", 4},
                              {"cube",
                               {{"name", "c" + std::to_string(cube)},
                                {"block", "block-00"},
                                {"coord", {x, y, z}}}}}));
  }

  void AdvanceTo(int64_t t) { clock_.AdvanceMs(Ms(t) - clock_.NowMs()); }
  bool Down(const std::string& host, int64_t t) const {
    return host == HostAt(0, 0, 0, 0) && t > kFailAt && t < kBackAt;
  }
  Json Job() { return Ok(c_->GetJob("elastic")); }

  // One agent's heartbeat: its assigned workers running, `progress` if it hosts rank 0.
  void Beat(const std::string& host, const Json& progress) {
    Json a = Ok(c_->Assignments(host));
    Json workers = Json::array();
    std::string job;
    uint64_t uid = 0;
    int attempt = -1;
    for (const Json& x : a["assignments"]) {
      workers.push_back({{"job", x["job"]},
                         {"uid", x["uid"]},
                         {"attempt", x["attempt"]},
                         {"rank", x["rank"]},
                         {"pid", 100},
                         {"startedAtMs", clock_.NowMs()},
                         {"state", "Running"}});
      if (x["rank"] == 0) {
        job = x["job"];
        uid = x["uid"];
        attempt = x["attempt"];
      }
    }
    Json body = {{"workers", workers}, {"revision", a["revision"]}};
    if (attempt >= 0 && !progress.empty()) {
      Json records = Json::array();
      for (Json p : progress) {
        p["job"] = job;
        p["uid"] = uid;
        p["attempt"] = attempt;
        p["rank"] = 0;
        records.push_back(std::move(p));
      }
      body["progress"] = std::move(records);
    }
    Ok(controller::Beat(*c_, host, body));
  }
  void BeatAll(int64_t t, const Json& progress) {
    for (int cube = 0; cube < 2; ++cube)
      for (int z = 0; z < 4; ++z)
        for (int y = 0; y < 2; ++y)
          for (int x = 0; x < 2; ++x)
            if (!Down(HostAt(cube, x, y, z), t)) Beat(HostAt(cube, x, y, z), progress);
  }

  FakeClock clock_{Ms(0)};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(HeadVsSimulatorTest, TheSameScenarioRecordsTheSameAttempts) {
  Json doc = {{"apiVersion", "tessera/v1"},
              {"kind", "TrainJob"},
              {"metadata", {{"name", "elastic"}}},
              {"spec",
               {{"accelerator", "7x"},
                {"topology", "4x4x4"},
                {"slices", {{"min", 1}, {"max", 2}}},
                {"failurePolicy",
                 {{"maxFailures", -1}, {"onHostLoss", "resize"}, {"growBackInterval", "60s"}}},
                {"template", {{"command", {"python3", "train.py"}}}}}}};
  Ok(c_->CreateJob(doc));

  // The workers' side of the script: work done (slice-seconds) when the attempt started running,
  // the second it started, its size.
  int64_t work_at_start = 0, run_start = 0, slices = 0, last_attempt = -1, last_checkpoint = 0;
  std::string rank0_host;
  // Agents answer a withdrawal or a new assignment at once (their assignment watch wakes them):
  // they confirm stopped workers, then report the new attempt's workers running.
  auto settle = [&](int64_t t) {
    for (int round = 0; round < 3; ++round) {
      const Json st = Job()["status"];
      if (!st["stopping"].get<bool>() && st["attempt"].get<int>() == last_attempt) return;
      BeatAll(t, Json::array());
      const Json now = Job()["status"];
      if (now["attempt"].get<int>() != last_attempt && now["phase"] == "Running") {
        last_attempt = now["attempt"];
        work_at_start = last_checkpoint;  // the new attempt resumes from the last checkpoint
        run_start = t + (last_attempt == 0 ? 0 : kStartupS);
        slices = now["slices"];
        rank0_host = now["workers"][0]["host"];
      }
    }
  };
  for (int64_t t = 0; t <= kEndAt; ++t) {
    AdvanceTo(t);
    EXPECT_TRUE(c_->Tick().ok()) << "t=" << t;
    settle(t);
    const int64_t run = t - run_start;
    const int64_t work = work_at_start + slices * std::max<int64_t>(run, 0);
    Json progress = Json::array();
    if (run == 0 || (run > 0 && t % kHeartbeatEveryS == 0) || t == kFailAt)
      progress.push_back({{"type", "progress"}, {"step", work}, {"timeMs", Ms(t)}});
    if (run > 0 && run % kCheckpointS == 0) {
      progress.push_back({{"type", "progress"}, {"step", work}, {"timeMs", Ms(t)}});
      progress.push_back(
          {{"type", "checkpoint"}, {"step", work}, {"timeMs", Ms(t)}, {"seconds", 1.0}});
      last_checkpoint = work;
    }
    if (t % kHeartbeatEveryS == 0)
      BeatAll(t, progress);
    else if (!progress.empty())
      Beat(rank0_host, progress);
    settle(t);  // a checkpoint may have started the grow-back
  }

  const std::vector<AttemptRecord> sim = RunSimulator();
  const Json head = Job()["status"]["attempts"];
  std::vector<std::string> reasons;
  for (const Json& a : head) reasons.push_back(a["endReason"]);
  EXPECT_EQ(reasons, (std::vector<std::string>{"HostLost", "GrowBack", ""}));
  ASSERT_EQ(sim.size(), head.size());
  for (size_t i = 0; i < head.size(); ++i) {
    const AttemptRecord h = codec::AttemptFromJson(head[i]);
    EXPECT_EQ(sim[i].attempt, h.attempt) << i;
    EXPECT_EQ(sim[i].slices, h.slices) << i;
    EXPECT_EQ(sim[i].world_size, h.world_size) << i;
    EXPECT_EQ(sim[i].placed_ms, h.placed_ms) << i;
    EXPECT_EQ(sim[i].first_step_ms, h.first_step_ms) << i;
    if (i + 1 < head.size()) {  // the script stops while the last attempt runs
      EXPECT_EQ(sim[i].end_reason, h.end_reason) << i;
      EXPECT_EQ(sim[i].ended_ms, h.ended_ms) << i;
      EXPECT_EQ(sim[i].failure_ms, h.failure_ms) << i;
      EXPECT_EQ(sim[i].detected_ms, h.detected_ms) << i;
      EXPECT_EQ(sim[i].failed_ranks, h.failed_ranks) << i;
      EXPECT_EQ(sim[i].last_step, h.last_step) << i;
    }
  }
  // The rules, as both took them: shrink to one cube when the host is noticed lost, grow back
  // at the first checkpoint after the grow-back check found the host back.
  ASSERT_EQ(head.size(), 3u);
  EXPECT_EQ(head[0]["failureMs"], Ms(kFailAt));
  EXPECT_EQ(head[0]["detectedMs"], Ms(kFailAt + kDetectS));
  EXPECT_EQ(head[1]["slices"], 1);
  EXPECT_EQ(head[2]["slices"], 2);
  EXPECT_GT(head[2]["placedMs"].get<int64_t>(), Ms(kBackAt));
}

}  // namespace
}  // namespace tessera::controller
