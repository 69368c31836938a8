// TrainLifecycle through its public steps, with a fake ClusterView: no store, no clock, no
// controller. Each test states one rule of docs/elastic.md as inputs and the effects expected.
#include "workload/train_lifecycle.h"

#include <gtest/gtest.h>

#include <set>

namespace tessera {
namespace {

class FakeCluster : public ClusterView {
 public:
  bool HostLost(const std::string& host) const override { return lost.count(host) > 0; }
  int LargestFitWithoutJob(const TrainJob&, int lo, int hi) const override {
    const int n = std::min(hi, free_slices);
    return n >= lo ? n : 0;
  }
  std::set<std::string> lost;
  int free_slices = 0;  // slices that would fit, the job's own included
};

TrainJobSpec Spec(int min_slices, int max_slices, HostLossPolicy policy, int max_failures) {
  TrainJobSpec s;
  s.name = "train";
  s.topology = Shape{4, 4, 1};
  s.min_slices = min_slices;
  s.max_slices = max_slices;
  s.on_host_loss = policy;
  s.max_failures = max_failures;
  s.grow_back_interval_ms = 1000;
  s.hang_timeout_ms = 10'000;
  return s;
}

// Slice s, worker w is host "s<s>w<w>"; 4 hosts a slice.
AttemptPlacement Placement(int slices) {
  AttemptPlacement p;
  for (int s = 0; s < slices; ++s) {
    p.hosts.emplace_back();
    for (int w = 0; w < 4; ++w)
      p.hosts.back().push_back("s" + std::to_string(s) + "w" + std::to_string(w));
    p.slice_names.push_back("slice-" + std::to_string(s));
  }
  p.master_port = 21000;
  p.jax_port = 21001;
  return p;
}

bool HasEvent(const Effects& e, const std::string& reason) {
  for (const JobEvent& ev : e.events)
    if (ev.reason == reason) return true;
  return false;
}

class TrainLifecycleTest : public ::testing::Test {
 protected:
  TrainJob Running(TrainJobSpec spec, int slices) {
    TrainJob job = TrainLifecycle::Create(std::move(spec), "{}", 1, now_);
    Effects placed = life_.Place(job, Placement(slices), now_);
    EXPECT_TRUE(placed.persist && placed.assignments_changed);
    EXPECT_EQ(placed.notify_hosts.size(), static_cast<size_t>(4 * slices));
    for (const auto& [rank, w] : job.status.workers)
      life_.WorkerRunning(job, rank, 100 + rank, now_);
    EXPECT_EQ(job.status.phase, JobPhase::kRunning);
    return job;
  }
  // Every host that may run a worker confirms.
  Effects ConfirmAll(TrainJob& job) {
    Effects all;
    const std::set<std::string> hosts = job.runtime.unconfirmed;
    for (const auto& h : hosts) all.Merge(life_.ConfirmStopped(job, h, now_));
    return all;
  }

  TrainLifecycle life_{TrainLifecycleOptions{5000}};
  FakeCluster cluster_;
  int64_t now_ = 1'000'000;
};

TEST_F(TrainLifecycleTest, AllWorkersExitingZeroSucceedsAndReleasesOnlyAfterEveryConfirmation) {
  TrainJob job = Running(Spec(1, 1, HostLossPolicy::kFail, 0), 1);
  Effects last;
  for (int rank = 0; rank < 4; ++rank)
    last = life_.WorkerExited(job, rank, 0, 0, 0, now_, cluster_, now_);
  EXPECT_EQ(job.status.phase, JobPhase::kSucceeded);
  EXPECT_TRUE(HasEvent(last, "Completed"));
  // Exited workers are known gone: nothing to confirm, chips released at once.
  EXPECT_TRUE(last.release_chips);
  EXPECT_FALSE(job.status.stopping);
  EXPECT_EQ(job.status.attempts.back().end_reason, "Succeeded");
}

TEST_F(TrainLifecycleTest, AFailureWithinTheBudgetRestartsAfterEveryHostConfirms) {
  TrainJob job = Running(Spec(1, 1, HostLossPolicy::kFail, 2), 1);
  Effects failed = life_.WorkerExited(job, 2, 1, 0, 0, now_ - 50, cluster_, now_);
  EXPECT_EQ(job.status.phase, JobPhase::kRestarting);
  EXPECT_TRUE(job.status.fast_stop);  // a broken attempt is killed, not asked
  EXPECT_TRUE(failed.assignments_changed);
  EXPECT_FALSE(failed.release_chips);
  EXPECT_EQ(job.runtime.unconfirmed.size(), 3u);  // rank 2 reported its own exit
  EXPECT_EQ(job.status.attempts.back().failed_ranks, std::vector<int>{2});
  EXPECT_EQ(job.status.attempts.back().failure_ms, now_ - 50);
  Effects confirmed = ConfirmAll(job);
  EXPECT_TRUE(confirmed.release_chips && confirmed.schedule);
  EXPECT_EQ(job.status.phase, JobPhase::kPending);
  EXPECT_EQ(job.status.failures, 1);
}

TEST_F(TrainLifecycleTest, PastTheBudgetTheJobFailsWithItsHistory) {
  TrainJob job = Running(Spec(1, 1, HostLossPolicy::kFail, 0), 1);
  Effects e = life_.WorkerExited(job, 0, 0, 9, 0, now_, cluster_, now_);
  EXPECT_EQ(job.status.phase, JobPhase::kFailed);
  EXPECT_NE(job.status.message.find("attempt 0 WorkerFailed"), std::string::npos)
      << job.status.message;
  EXPECT_TRUE(e.events.front().warning);
}

TEST_F(TrainLifecycleTest, ALostHostUnderPauseRestartsAtTheSameSize) {
  TrainJob job = Running(Spec(1, 2, HostLossPolicy::kPause, -1), 2);
  cluster_.lost.insert("s1w2");
  life_.HostLost(job, "s1w2", now_ - 6000, "no heartbeat", cluster_, now_);
  EXPECT_EQ(job.status.phase, JobPhase::kRestarting);
  EXPECT_EQ(job.runtime.unconfirmed.count("s1w2"), 0u);  // a lost host cannot confirm
  EXPECT_EQ(job.SizeRange(), (std::pair<int, int>{2, 2}));
}

TEST_F(TrainLifecycleTest, ResizeShrinksThenGrowsBackOnlyAtTheNextCheckpoint) {
  TrainJob job = Running(Spec(1, 2, HostLossPolicy::kResize, -1), 2);
  cluster_.lost.insert("s1w0");
  life_.HostLost(job, "s1w0", now_, "no heartbeat", cluster_, now_);
  EXPECT_EQ(job.SizeRange(), (std::pair<int, int>{1, 2}));
  ConfirmAll(job);
  ASSERT_EQ(job.status.phase, JobPhase::kPending);
  life_.Place(job, Placement(1), now_);
  for (const auto& [rank, w] : job.status.workers) life_.WorkerRunning(job, rank, 1, now_);
  life_.Progress(job, {ProgressInput::Type::kCheckpoint, 0, 30, now_, 1.5}, cluster_, now_);

  // Capacity returns: the next grow-back check finds it, and waits for a checkpoint.
  cluster_.free_slices = 2;
  now_ += 1000;
  Effects found = life_.Tick(job, cluster_, now_);
  EXPECT_TRUE(HasEvent(found, "GrowingBack"));
  EXPECT_EQ(job.status.grow_target, 2);
  EXPECT_EQ(job.status.phase, JobPhase::kRunning);
  // The same checkpoint again (another rank) is not a new one.
  life_.Progress(job, {ProgressInput::Type::kCheckpoint, 1, 30, now_, 1.5}, cluster_, now_);
  EXPECT_EQ(job.status.phase, JobPhase::kRunning);
  Effects grown =
      life_.Progress(job, {ProgressInput::Type::kCheckpoint, 0, 40, now_, 1.5}, cluster_, now_);
  EXPECT_EQ(job.status.phase, JobPhase::kRestarting);
  EXPECT_FALSE(job.status.fast_stop);  // SIGTERM and the grace: they may save their state
  EXPECT_EQ(job.status.attempts.back().end_reason, "GrowBack");
  EXPECT_EQ(job.SizeRange(), (std::pair<int, int>{1, 2}));
  EXPECT_TRUE(grown.assignments_changed);
  EXPECT_EQ(job.status.failures, 1);  // the host loss; growing is not a failure
}

TEST_F(TrainLifecycleTest, AHangNamesTheRankWhoseTicksStopped) {
  TrainJob job = Running(Spec(1, 1, HostLossPolicy::kFail, 3), 1);
  for (int rank = 0; rank < 4; ++rank) {
    life_.Progress(job, {ProgressInput::Type::kAlive, rank, -1, 0, 0}, cluster_, now_);
    life_.Progress(job, {ProgressInput::Type::kProgress, rank, 7, now_, 0}, cluster_, now_);
  }
  for (int t = 1; t <= 12; ++t) {
    now_ += 1000;
    for (int rank : {0, 1, 3})  // rank 2 is stopped
      life_.Progress(job, {ProgressInput::Type::kAlive, rank, -1, 0, 0}, cluster_, now_);
    life_.Tick(job, cluster_, now_);
  }
  EXPECT_EQ(job.status.phase, JobPhase::kRestarting);
  EXPECT_EQ(job.status.reason, "Restarting");
  EXPECT_EQ(job.status.attempts.back().end_reason, "Hang");
  EXPECT_EQ(job.status.attempts.back().failed_ranks, std::vector<int>{2});
}

TEST_F(TrainLifecycleTest, DeletingARunningJobRemovesItOnceItsWorkersAreGone) {
  TrainJob job = Running(Spec(1, 1, HostLossPolicy::kFail, 0), 1);
  Effects deleting = life_.Delete(job, cluster_, now_);
  EXPECT_EQ(job.status.phase, JobPhase::kTerminating);
  EXPECT_FALSE(deleting.remove);
  EXPECT_TRUE(deleting.persist);
  EXPECT_TRUE(life_.Delete(job, cluster_, now_).empty());  // a second delete changes nothing
  Effects gone = ConfirmAll(job);
  EXPECT_TRUE(gone.remove && gone.release_chips);
}

TEST_F(TrainLifecycleTest, AStepThatChangesNothingAsksForNothing) {
  TrainJob job = TrainLifecycle::Create(Spec(1, 1, HostLossPolicy::kFail, 0), "{}", 1, now_);
  EXPECT_TRUE(life_.SetPending(job, "NoFreeSlice", "0 of 2 are free", 1, {}).persist);
  EXPECT_TRUE(life_.SetPending(job, "NoFreeSlice", "0 of 2 are free", 1, {}).empty());
  EXPECT_TRUE(life_.Tick(job, cluster_, now_ + 60'000).empty());
  // Reports of a worker that is not in the attempt are ignored.
  EXPECT_TRUE(life_.WorkerRunning(job, 0, 1, now_).empty());
}

TEST_F(TrainLifecycleTest, ANewDetailUnderTheSameReasonIsFlushedByTickNotWrittenAtOnce) {
  TrainJob job = TrainLifecycle::Create(Spec(1, 1, HostLossPolicy::kFail, 0), "{}", 1, now_);
  EXPECT_TRUE(life_.SetPending(job, "Queued", "waiting behind trainjob a", 3, {}).persist);
  job.runtime.persisted_ms = now_;  // as the controller records after the write
  // The job ahead started: the place in line and the job it waits behind change, the reason
  // does not. Reads see them; no write yet.
  EXPECT_TRUE(life_.SetPending(job, "Queued", "waiting behind trainjob b", 2, {}).empty());
  EXPECT_EQ(job.status.queue_position, 2);
  EXPECT_EQ(job.status.message, "waiting behind trainjob b");
  EXPECT_TRUE(job.runtime.detail_dirty);
  EXPECT_FALSE(life_.Tick(job, cluster_, now_ + 4'999).persist);
  EXPECT_TRUE(life_.Tick(job, cluster_, now_ + 5'000).persist);
  // A change of reason is written at once, position and all.
  EXPECT_TRUE(life_.SetPending(job, "Fragmented", "no free 2x2 block", 1, {}).persist);
  EXPECT_EQ(job.status.queue_position, 1);
}

// A driver skips the tick of a job for which TickMayAct is false (the head over 100,000 stored
// jobs, most finished): in every such state Tick must return nothing, now and much later.
// Progress is written at most every progress_write_ms (the head's
// --progress-write-interval-ms: 10 s on etcd), while the job's own steps (here a failure) are
// written at once.
TEST_F(TrainLifecycleTest, ProgressIsPersistedAtMostEveryWriteIntervalAndAFailureAtOnce) {
  life_ = TrainLifecycle(TrainLifecycleOptions{5000, 10'000});
  TrainJob job = Running(Spec(1, 1, HostLossPolicy::kFail, 3), 1);
  job.runtime.persisted_ms = now_;  // as the controller records after the placement's write
  for (int s = 1; s <= 9; ++s) {
    const int64_t at = now_ + s * 1000;
    for (int rank = 0; rank < 4; ++rank)
      EXPECT_FALSE(
          life_.Progress(job, {ProgressInput::Type::kProgress, rank, s, at}, cluster_, at).persist);
    EXPECT_FALSE(life_.Tick(job, cluster_, at).persist) << "written after " << s << " s";
  }
  EXPECT_EQ(job.status.last_step, 9);  // in memory at once: reads show it
  EXPECT_TRUE(job.runtime.progress_dirty);
  EXPECT_TRUE(life_.Tick(job, cluster_, now_ + 10'000).persist);
  // With the default of a second, the same progress is written after a second.
  TrainLifecycle every_second(TrainLifecycleOptions{5000});
  EXPECT_FALSE(every_second.Tick(job, cluster_, now_ + 999).persist);
  EXPECT_TRUE(every_second.Tick(job, cluster_, now_ + 1000).persist);
  // A worker's failure is the job's own step: written at once, whatever the interval.
  Effects failed = life_.WorkerExited(job, 0, 1, 0, 0, now_ + 10'500, cluster_, now_ + 10'500);
  EXPECT_TRUE(failed.persist);
}

TEST_F(TrainLifecycleTest, TickMayActIsFalseOnlyWhereTickDoesNothing) {
  auto check = [&](TrainJob job, bool may_act, const char* state) {
    EXPECT_EQ(life_.TickMayAct(job), may_act) << state;
    if (may_act) return;
    for (int64_t later : {int64_t{0}, int64_t{60'000}, int64_t{3'600'000}}) {
      const JobPhase phase = job.status.phase;
      EXPECT_TRUE(life_.Tick(job, cluster_, now_ + later).empty()) << state << " +" << later;
      EXPECT_EQ(job.status.phase, phase) << state;
    }
  };
  TrainJob waiting = TrainLifecycle::Create(Spec(1, 1, HostLossPolicy::kFail, 0), "{}", 1, now_);
  life_.SetPending(waiting, "Queued", "waiting behind trainjob a", 3, {});
  waiting.runtime.persisted_ms = now_;
  check(waiting, false, "pending, written");
  life_.SetPending(waiting, "Queued", "waiting behind trainjob b", 2, {});  // detail only
  check(waiting, true, "pending, its detail not yet flushed");

  TrainJob running = Running(Spec(1, 1, HostLossPolicy::kFail, 0), 1);
  check(running, true, "running");
  TrainJob done = running;
  for (int rank = 0; rank < 4; ++rank)
    life_.WorkerExited(done, rank, 0, 0, 0, now_, cluster_, now_);
  ASSERT_EQ(done.status.phase, JobPhase::kSucceeded);
  done.runtime.progress_dirty = false;
  done.runtime.detail_dirty = false;
  check(done, false, "succeeded");
  done.runtime.progress_dirty = true;
  check(done, true, "succeeded, its last progress not yet flushed");

  TrainJob lost = Running(Spec(1, 2, HostLossPolicy::kPause, -1), 2);
  cluster_.lost.insert("s1w2");
  life_.HostLost(lost, "s1w2", now_ - 6000, "no heartbeat", cluster_, now_);
  ASSERT_TRUE(lost.status.stopping);
  if (!lost.runtime.fencing.empty()) {  // the lost host's fence: Tick ends it when it is over
    EXPECT_TRUE(life_.TickMayAct(lost));
    life_.Tick(lost, cluster_, now_ + 3'600'000);
  }
  lost.runtime.progress_dirty = false;
  lost.runtime.detail_dirty = false;
  check(lost, false, "after a host loss, no fence pending");
}

}  // namespace
}  // namespace tessera
