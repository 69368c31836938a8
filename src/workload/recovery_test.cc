#include "workload/recovery.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessera {
namespace {

AttemptRecord Failed(int attempt, int64_t placed, int64_t first_step_ms, int64_t first_step,
                     int64_t last_step, int64_t last_step_ms, int64_t failure, int64_t detected) {
  AttemptRecord a;
  a.attempt = attempt;
  a.slices = 2;
  a.placed_ms = placed;
  a.first_step_ms = first_step_ms;
  a.first_step = first_step;
  a.last_step = last_step;
  a.last_step_ms = last_step_ms;
  a.end_reason = "WorkerFailed";
  a.failure_ms = failure;
  a.detected_ms = detected;
  a.ended_ms = detected;
  return a;
}

TEST(RecoveryFigures, EveryFigureFromTheTwoAttempts) {
  AttemptRecord prev = Failed(0, 1000, 3000, 0, 34, 20000, 20400, 20500);
  AttemptRecord next;
  next.attempt = 1;
  next.placed_ms = 20800;
  next.restored = true;
  next.resumed_from_step = 30;
  next.restore_seconds = 0.25;
  next.first_step = 31;
  next.first_step_ms = 21300;
  auto f = ComputeRecoveryFigures(prev, next);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->time_to_detect_ms, 100);
  EXPECT_EQ(f->time_to_schedule_ms, 300);
  EXPECT_EQ(f->time_to_first_step_ms, 500);
  EXPECT_EQ(f->time_to_restore_ms, 250);
  EXPECT_EQ(f->time_to_recover_ms, 900);
  EXPECT_EQ(f->steps_lost, 4);
}

TEST(RecoveryFigures, WithoutARestoreReportTheStepBeforeTheFirstIsTheResumePoint) {
  AttemptRecord prev = Failed(0, 1000, 3000, 0, 34, 20000, 20400, 20500);
  AttemptRecord next;
  next.placed_ms = 20800;
  next.first_step = 21;
  next.first_step_ms = 22000;
  auto f = ComputeRecoveryFigures(prev, next);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->steps_lost, 14);
  EXPECT_EQ(f->time_to_restore_ms, -1);
}

TEST(RecoveryFigures, UnknownUntilTheNewAttemptCompletesAStep) {
  AttemptRecord prev = Failed(0, 1000, 3000, 0, 34, 20000, 20400, 20500);
  AttemptRecord next;
  next.placed_ms = 20800;
  auto f = ComputeRecoveryFigures(prev, next);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->time_to_schedule_ms, 300);
  EXPECT_EQ(f->time_to_first_step_ms, -1);
  EXPECT_EQ(f->time_to_recover_ms, -1);
  EXPECT_EQ(f->steps_lost, -1);
}

TEST(RecoveryFigures, NoneAfterAnAttemptThatDidNotFail) {
  AttemptRecord prev = Failed(0, 1000, 3000, 0, 34, 20000, 20400, 20500);
  prev.end_reason = "GrowBack";
  EXPECT_FALSE(ComputeRecoveryFigures(prev, AttemptRecord{}).has_value());
  prev.end_reason = "Preempted";
  EXPECT_FALSE(ComputeRecoveryFigures(prev, AttemptRecord{}).has_value());
}

TEST(SummarizeRecovery, GoodputCountsOnlyKeptSteps) {
  // Attempt 0: steps 0..39 at 100 ms each (first at t=1000, last at t=4900), fails; attempt 1
  // resumes from step 29 (steps 30..39 are redone) and runs steps 30..59 at 100 ms.
  AttemptRecord a0 = Failed(0, 1, 1000, 0, 39, 4900, 5000, 5100);
  AttemptRecord a1;
  a1.attempt = 1;
  a1.placed_ms = 5500;
  a1.restored = true;
  a1.resumed_from_step = 29;
  a1.first_step = 30;
  a1.first_step_ms = 6000;
  a1.last_step = 59;
  a1.last_step_ms = 8900;
  JobRecovery r = SummarizeRecovery({a0, a1}, 10001);
  EXPECT_EQ(r.failures, 1);
  EXPECT_EQ(r.steps_lost, 10);
  EXPECT_EQ(r.mean_time_to_recover_ms, 1000);
  // Kept: attempt 0 from -1 to 29 = 30 steps, attempt 1 from 29 to 59 = 30 steps; 60 x 100 ms
  // over 10 s of wall time.
  EXPECT_NEAR(r.goodput, 0.6, 1e-9);
}

TEST(SummarizeRecovery, NoStepsNoGoodput) {
  AttemptRecord a;
  a.placed_ms = 100;
  JobRecovery r = SummarizeRecovery({a}, 1000);
  EXPECT_EQ(r.failures, 0);
  EXPECT_LT(r.goodput, 0);
  EXPECT_EQ(r.mean_time_to_recover_ms, -1);
}

TEST(CheckpointAdvice, YoungDalyFromObservedFailures) {
  // Saves of 2, 4 and 3 s every 60 s; 2 failures in 2 hours: MTBF 3600 s.
  auto a = AdviseCheckpointInterval({{0, 2.0}, {60'000, 4.0}, {120'000, 3.0}}, 2, 7'200'000, 0);
  EXPECT_DOUBLE_EQ(a.save_seconds, 3.0);
  EXPECT_DOUBLE_EQ(a.interval_seconds, 60.0);
  EXPECT_DOUBLE_EQ(a.mtbf_seconds, 3600.0);
  EXPECT_EQ(a.mtbf_source, "observed");
  EXPECT_NEAR(a.advised_interval_seconds, std::sqrt(2.0 * 3.0 * 3600.0), 1e-9);
}

TEST(CheckpointAdvice, ConfiguredMtbfWhenNothingFailed) {
  auto a = AdviseCheckpointInterval({{0, 8.0}}, 0, 1000, 86'400'000);
  EXPECT_EQ(a.mtbf_source, "configured");
  EXPECT_LT(a.interval_seconds, 0);  // one checkpoint: no interval yet
  EXPECT_NEAR(a.advised_interval_seconds, std::sqrt(2.0 * 8.0 * 86'400.0), 1e-9);
}

TEST(CheckpointAdvice, UnknownWithoutSavesOrFailureRate) {
  EXPECT_LT(AdviseCheckpointInterval({}, 1, 1000, 0).advised_interval_seconds, 0);
  EXPECT_LT(AdviseCheckpointInterval({{0, 1.0}}, 0, 1000, 0).advised_interval_seconds, 0);
}

TEST(FailureBudget, ZeroAllowsNoneAndMinusOneIsUnlimited) {
  EXPECT_FALSE(WithinFailureBudget(1, 0));
  EXPECT_TRUE(WithinFailureBudget(3, 3));
  EXPECT_FALSE(WithinFailureBudget(4, 3));
  EXPECT_TRUE(WithinFailureBudget(1'000'000, -1));
}

TEST(DecideRecovery, WorkerFailureRestartsAtTheSameSize) {
  auto d = DecideRecovery(FailureKind::kWorkerFailed, HostLossPolicy::kResize, 1, 3, 2, 1, 2);
  EXPECT_FALSE(d.fail);
  EXPECT_EQ(d.action, RecoveryAction::kRestartSameSize);
  EXPECT_EQ(d.min_slices, 2);
  EXPECT_EQ(d.max_slices, 2);
}

TEST(DecideRecovery, PastTheBudgetTheJobFails) {
  auto d = DecideRecovery(FailureKind::kHang, HostLossPolicy::kPause, 2, 1, 2, 2, 2);
  EXPECT_TRUE(d.fail);
  EXPECT_NE(d.why.find("maxFailures 1"), std::string::npos) << d.why;
}

TEST(DecideRecovery, HostLossFollowsOnHostLoss) {
  auto fail = DecideRecovery(FailureKind::kHostLost, HostLossPolicy::kFail, 1, -1, 2, 1, 2);
  EXPECT_TRUE(fail.fail);
  EXPECT_NE(fail.why.find("onHostLoss"), std::string::npos);
  auto pause = DecideRecovery(FailureKind::kHostLost, HostLossPolicy::kPause, 1, -1, 2, 1, 2);
  EXPECT_FALSE(pause.fail);
  EXPECT_EQ(pause.action, RecoveryAction::kRestartSameSize);
  EXPECT_EQ(pause.min_slices, 2);
  auto resize = DecideRecovery(FailureKind::kHostLost, HostLossPolicy::kResize, 1, -1, 2, 1, 2);
  EXPECT_EQ(resize.action, RecoveryAction::kRestartLargestFit);
  EXPECT_EQ(resize.min_slices, 1);
  EXPECT_EQ(resize.max_slices, 2);
}

TEST(FindHungRanks, NothingWhileEveryRankReports) {
  std::map<int, RankProgress> ranks = {{0, {10, 9500, 0}}, {1, {10, 9600, 0}}};
  EXPECT_FALSE(FindHungRanks(ranks, 1000, 10'000, 5000, 3000).hung);
}

TEST(FindHungRanks, OffWithoutATimeout) {
  std::map<int, RankProgress> ranks = {{0, {10, 100, 0}}};
  EXPECT_FALSE(FindHungRanks(ranks, 50, 1'000'000, 0, 3000).hung);
}

TEST(FindHungRanks, TheRankWithoutLivenessIsNamed) {
  // Every rank is stuck at step 10 (a collective waits), but only rank 2 stopped ticking.
  std::map<int, RankProgress> ranks = {
      {0, {10, 2000, 9900}}, {1, {10, 2000, 9800}}, {2, {10, 2000, 2500}}, {3, {10, 2000, 9900}}};
  HangVerdict v = FindHungRanks(ranks, 1000, 10'000, 5000, 3000);
  ASSERT_TRUE(v.hung);
  EXPECT_EQ(v.stuck_ranks, std::vector<int>({2}));
  EXPECT_EQ(v.since_ms, 2000);
  EXPECT_NE(v.message.find("rank 2 "), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("last step 10"), std::string::npos) << v.message;
}

TEST(FindHungRanks, WithoutLivenessTheRanksBehindAreNamed) {
  std::map<int, RankProgress> ranks = {{0, {12, 9000, 0}}, {1, {7, 3000, 0}}};
  HangVerdict v = FindHungRanks(ranks, 1000, 10'000, 5000, 3000);
  ASSERT_TRUE(v.hung);
  EXPECT_EQ(v.stuck_ranks, std::vector<int>({1}));
}

TEST(FindHungRanks, RanksThatStalledTogetherAreAllNamed) {
  std::map<int, RankProgress> ranks = {{0, {7, 3000, 0}}, {1, {7, 3100, 0}}};
  HangVerdict v = FindHungRanks(ranks, 1000, 10'000, 5000, 3000);
  ASSERT_TRUE(v.hung);
  EXPECT_EQ(v.stuck_ranks, std::vector<int>({0, 1}));
  EXPECT_NE(v.message.find("stalled together"), std::string::npos);
}

TEST(FindHungRanks, ARankThatNeverReportedCountsFromTheStart) {
  std::map<int, RankProgress> ranks = {{0, {}}, {1, {}}};
  EXPECT_FALSE(FindHungRanks(ranks, 6000, 10'000, 5000, 3000).hung);
  HangVerdict v = FindHungRanks(ranks, 4000, 10'000, 5000, 3000);
  ASSERT_TRUE(v.hung);
  EXPECT_NE(v.message.find("no step yet"), std::string::npos) << v.message;
}

}  // namespace
}  // namespace tessera
