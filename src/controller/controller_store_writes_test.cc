// What heartbeats cost the store (issue 35): a heartbeat that changes nothing writes nothing; a
// running job's progress is written by the tick's flush at most once a second per job, never by
// the heartbeat itself. The store is a store::CountingStore over a MemoryStore.
#include <gtest/gtest.h>

#include "controller/controller_test_util.h"
#include "store/counting_store.h"

namespace tessera::controller {
namespace {

class StoreWritesTest : public ControllerTest {
 protected:
  void SetUp() override {
    auto counting = std::make_unique<store::CountingStore>(OpenMemoryStore());
    counting_ = counting.get();
    store_ = std::move(counting);
    Start();
  }
  uint64_t Writes() const { return counting_->counts().writes(); }
  uint64_t WritesOf(const std::string& kind) const {
    const auto counts = counting_->counts();
    auto it = counts.writes_by_kind.find(kind);
    return it == counts.writes_by_kind.end() ? 0 : it->second;
  }
  // One heartbeat from every host: its workers all Running, and a progress line at `step` for
  // each of them when step >= 0.
  void BeatAll(int64_t step) {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        const std::string h = HostName(s, w);
        const Json a = Ok(c_->Assignments(h));
        Json progress = Json::array();
        if (step >= 0)
          for (const Json& x : a["assignments"])
            progress.push_back({{"job", x["job"]},
                                {"uid", x["uid"]},
                                {"attempt", x["attempt"]},
                                {"rank", x["rank"]},
                                {"type", "progress"},
                                {"step", step},
                                {"timeMs", clock_.NowMs()}});
        Ok(Beat(*c_, h,
                {{"workers", WorkerReports(a, "Running")},
                 {"progress", progress},
                 {"revision", a["revision"]}}));
      }
  }

  store::CountingStore* counting_ = nullptr;
};

TEST_F(StoreWritesTest, IdleHostsHeartbeatWithoutWriting) {
  RegisterTwoSlices();
  BeatAll(-1);
  ASSERT_TRUE(c_->Tick().ok());
  const uint64_t before = Writes();
  ASSERT_GT(before, 0u) << "registration writes the hosts: the counter must count";
  for (int second = 0; second < 30; ++second) {
    clock_.AdvanceMs(1000);
    BeatAll(-1);
    ASSERT_TRUE(c_->Tick().ok());
  }
  EXPECT_EQ(Writes(), before) << "30 s of heartbeats from 8 idle hosts wrote to the store";
}

TEST_F(StoreWritesTest, ProgressIsWrittenByTheFlushAtMostOnceASecondPerJob) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("a", 1)));
  Ok(c_->CreateJob(JobDoc("b", 1)));
  ASSERT_TRUE(c_->RunPass().ok());
  BeatAll(-1);  // the workers start: a write each (Running)
  ASSERT_EQ(Phase("a"), "Running");
  ASSERT_EQ(Phase("b"), "Running");
  ASSERT_TRUE(c_->Tick().ok());
  clock_.AdvanceMs(1000);
  ASSERT_TRUE(c_->Tick().ok());

  // Running workers that report nothing new: nothing to write.
  uint64_t before = Writes();
  for (int second = 0; second < 10; ++second) {
    clock_.AdvanceMs(1000);
    BeatAll(-1);
    ASSERT_TRUE(c_->Tick().ok());
  }
  EXPECT_EQ(Writes(), before) << "running workers with no new progress wrote to the store";

  // Progress every second: the heartbeats write nothing; the tick's flush writes each job at
  // most once a second, and does write it (the figures survive a restart of the head).
  uint64_t by_beats = 0, by_ticks = 0;
  const int kSeconds = 20;
  for (int second = 0; second < kSeconds; ++second) {
    clock_.AdvanceMs(1000);
    before = Writes();
    BeatAll(10 * (second + 1));
    by_beats += Writes() - before;
    before = Writes();
    ASSERT_TRUE(c_->Tick().ok());
    by_ticks += Writes() - before;
  }
  EXPECT_EQ(by_beats, 0u) << "a progress-only heartbeat wrote to the store";
  EXPECT_LE(by_ticks, 2u * kSeconds) << "more than one write per job and second";
  EXPECT_GE(by_ticks, 2u) << "progress was never persisted";
  EXPECT_EQ(WritesOf("Host"), 8u) << "only the registrations wrote hosts";
  EXPECT_EQ(Ok(c_->GetJob("a"))["status"]["lastStep"], 10 * kSeconds);
}

}  // namespace
}  // namespace tessera::controller
