// Tests of the pod-scale recovery simulation: the failure process, the Young/Daly formulas, runs
// against Daly's expectation, in-memory checkpoints and their disk fallback, the head's figures,
// determinism, bad options.
#include "sim/recovery_sim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "sim/recovery_report.h"

namespace tessera::sim {
namespace {

// A small job with fast, round costs: 4 slices of 4 hosts of 4 chips.
RecoverySimOptions Small(uint64_t seed) {
  RecoverySimOptions o;
  o.chips = 64;
  o.chips_per_host = 4;
  o.hosts_per_slice = 4;
  o.spare_slices = 3;
  o.step_s = 1;
  o.repair_hours = 0.01;  // 36 s
  o.seed = seed;
  o.costs.name = "custom";
  o.costs.detect_s = 4;
  o.costs.schedule_s = 0.5;
  o.costs.start_s = 0.5;
  o.costs.disk_save_s = 10;
  o.costs.disk_restore_s = 5;
  o.costs.memory_snapshot_s = 0.5;
  o.costs.memory_replicate_s = 0;
  o.costs.memory_restore_s = 1;
  o.costs.disk_persist_s = 10;
  return o;
}

// MTBF of the job in seconds -> interruptions per chip-day.
double RateFor(double mtbf_s, int64_t chips) {
  return 86400.0 / mtbf_s / static_cast<double>(chips);
}

TEST(RecoverySimTest, InterruptionsArePoissonAtTheConfiguredRate) {
  for (uint64_t seed : {1, 2, 3}) {
    RecoverySimOptions o = Small(seed);
    o.interruptions_per_chip_day = RateFor(2000, o.chips);
    o.days = 20;  // 864 expected
    o.peer_loss_share = 0.25;
    auto r = RunRecoverySim(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const double expected = o.days * 86400 / 2000;
    EXPECT_NEAR(static_cast<double>(r->interruptions), expected, 4 * std::sqrt(expected))
        << "seed " << seed;
    EXPECT_NEAR(r->mtbf_s, 2000, 1e-6);
    const double share = static_cast<double>(r->correlated) / static_cast<double>(r->interruptions);
    EXPECT_NEAR(share, 0.25, 4 * std::sqrt(0.25 * 0.75 / expected)) << "seed " << seed;
  }
}

TEST(RecoverySimTest, NoInterruptionsLosesOnlyCheckpointTime) {
  RecoverySimOptions o = Small(1);
  o.interruptions_per_chip_day = 0;
  o.interval_steps = 90;
  o.days = 1;
  auto r = RunRecoverySim(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->interruptions, 0);
  EXPECT_EQ(r->steps_lost, 0);
  // 86,400 s in cycles of 90 s of work + 10 s of checkpoint: 864 cycles, 90% of the time (the
  // last checkpoint ends at the horizon, uncounted).
  EXPECT_EQ(r->checkpoints, 863);
  EXPECT_DOUBLE_EQ(r->ettr, 0.9);
}

TEST(RecoverySimTest, YoungDalyFormulas) {
  EXPECT_DOUBLE_EQ(YoungDalyInterval(2, 10000), 200);
  // By hand: 100 / (1000 (e^0.11 - 1)) = 100 / 116.27807 = 0.8600074.
  EXPECT_NEAR(DalyEfficiency(100, 10, 0, 1000), 0.8600074, 1e-6);
  // The downtime factor e^(D/M).
  EXPECT_NEAR(DalyEfficiency(100, 10, 50, 1000), 0.8600074 / std::exp(0.05), 1e-6);
  // No failures: work over work + checkpoint.
  EXPECT_DOUBLE_EQ(DalyEfficiency(90, 10, 5, std::numeric_limits<double>::infinity()), 0.9);
  // sqrt(2CM) is near the optimum: better than intervals 30% shorter or 40% longer.
  const double c = 6, d = 70, m = 17800;
  const double tau = YoungDalyInterval(c, m);
  const double at = DalyEfficiency(tau, c, d, m);
  EXPECT_GT(at, DalyEfficiency(tau * 0.7, c, d, m));
  EXPECT_GT(at, DalyEfficiency(tau * 1.4, c, d, m));
  // And the first-order form agrees with the exact one when C and D are small against M.
  const YoungDalyBound b = ComputeYoungDalyBound(c, d, m);
  EXPECT_DOUBLE_EQ(b.interval_s, tau);
  EXPECT_DOUBLE_EQ(b.efficiency, at);
  EXPECT_NEAR(b.first_order, 1 - std::sqrt(2 * c / m) - d / m, 1e-12);
  EXPECT_NEAR(b.first_order, b.efficiency, 0.002);
}

TEST(RecoverySimTest, DiskRunMatchesDalysExpectation) {
  // About 3,000 failures: the run's ETTR must be within half a point of E(tau) for the interval
  // it used, and close to the Young/Daly bound.
  for (uint64_t seed : {7, 8}) {
    RecoverySimOptions o = Small(seed);
    o.interruptions_per_chip_day = RateFor(1000, o.chips);
    o.days = 35;
    auto r = RunRecoverySim(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const double tau = static_cast<double>(r->options.interval_steps) * o.step_s;
    EXPECT_EQ(r->options.interval_steps, std::llround(YoungDalyInterval(10, 1000)));  // 141
    const double d = 4 + 0.5 + 0.5 + 5;
    EXPECT_DOUBLE_EQ(r->bound.downtime_s, d);
    EXPECT_NEAR(r->ettr, DalyEfficiency(tau, 10, d, 1000), 0.005) << "seed " << seed;
    EXPECT_NEAR(r->ettr, r->bound.efficiency, 0.006) << "seed " << seed;
    EXPECT_EQ(r->disk_restores, r->memory_restores + r->disk_restores);
    EXPECT_NEAR(r->useful_s + r->lost_s + r->checkpoint_s + r->downtime_s, r->wall_s, 1e-6);
    EXPECT_GE(r->lost_s, 0);
    EXPECT_EQ(r->spare_wait_s, 0) << "seed " << seed;
  }
}

TEST(RecoverySimTest, MemoryRunMatchesDalysExpectationAndBeatsDisk) {
  RecoverySimOptions o = Small(11);
  o.interruptions_per_chip_day = RateFor(1000, o.chips);
  o.days = 35;
  o.tier = CheckpointTier::kMemory;
  auto mem = RunRecoverySim(o);
  ASSERT_TRUE(mem.ok()) << mem.status().message();
  const double tau = static_cast<double>(mem->options.interval_steps) * o.step_s;
  EXPECT_EQ(mem->options.interval_steps, std::llround(YoungDalyInterval(0.5, 1000)));  // 32
  const double d = 4 + 0.5 + 0.5 + 1;
  EXPECT_NEAR(mem->ettr, DalyEfficiency(tau, 0.5, d, 1000), 0.005);
  // With peers in another slice and independent failures, almost every recovery is from memory.
  EXPECT_GT(mem->memory_restores, 0);
  EXPECT_LE(mem->disk_restores * 50, mem->memory_restores);
  EXPECT_GT(mem->disk_checkpoints, 0);  // persisted in the background

  o.tier = CheckpointTier::kDisk;
  auto disk = RunRecoverySim(o);
  ASSERT_TRUE(disk.ok()) << disk.status().message();
  EXPECT_GT(mem->ettr, disk->ettr + 0.05);
}

TEST(RecoverySimTest, LosingThePeerTooFallsBackToDisk) {
  RecoverySimOptions o = Small(5);
  o.interruptions_per_chip_day = RateFor(1000, o.chips);
  o.days = 5;
  o.tier = CheckpointTier::kMemory;
  o.peer_loss_share = 1;  // every interruption takes the host and its peer
  auto r = RunRecoverySim(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GT(r->interruptions, 100);
  EXPECT_EQ(r->memory_restores, 0);
  EXPECT_GT(r->disk_restores, 0);
  o.peer_loss_share = 0;
  auto independent = RunRecoverySim(o);
  ASSERT_TRUE(independent.ok());
  EXPECT_GT(independent->ettr, r->ettr);
}

TEST(RecoverySimTest, TheHeadsFiguresAgreeWithTheEngine) {
  RecoverySimOptions o = Small(3);
  o.interruptions_per_chip_day = RateFor(5000, o.chips);
  o.days = 10;
  auto r = RunRecoverySim(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_GT(r->interruptions, 100);
  // Every interruption of a running attempt is a failure of the head's TrainJob, with an attempt
  // after it; the head counts the same steps lost.
  EXPECT_EQ(r->head_failures, r->interruptions);
  EXPECT_EQ(r->attempts, r->head_failures + 1);
  EXPECT_EQ(r->head_steps_lost, r->steps_lost);
  // Time to recover: the downtime plus the first step, on average.
  EXPECT_NEAR(r->head_mean_time_to_recover_s, r->downtime_s / r->interruptions + o.step_s, 0.5);
  // The head's goodput prices kept steps at its measured step time, which includes the
  // checkpoint stalls: above the ETTR, never below.
  EXPECT_GE(r->head_goodput, r->ettr);
}

TEST(RecoverySimTest, SameSeedSameRunOtherSeedOtherRun) {
  RecoverySimOptions o = Small(42);
  o.interruptions_per_chip_day = RateFor(3000, o.chips);
  o.days = 3;
  o.tier = CheckpointTier::kMemory;
  o.peer_loss_share = 0.1;
  auto a = RunRecoverySim(o);
  auto b = RunRecoverySim(o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->event_hash, b->event_hash) << "seed " << o.seed;
  EXPECT_EQ(a->ettr, b->ettr);
  EXPECT_EQ(a->interruptions, b->interruptions);
  std::ostringstream ja, jb;
  WriteRecoveryJson(ja, {*a}, 0.97, 0.01);
  WriteRecoveryJson(jb, {*b}, 0.97, 0.01);
  EXPECT_EQ(ja.str(), jb.str());
  o.seed = 43;
  auto c = RunRecoverySim(o);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->event_hash, c->event_hash);
}

// The run: 9,216 chips, 30 days, Llama 3's rate, this machine's costs (docs/elastic.md).
TEST(RecoverySimTest, PodScaleMemoryCheckpointsMeetTheGoalDiskOnlyDoesNot) {
  RecoverySimOptions o;  // the defaults are the pod-scale job
  o.costs = MeasuredCosts();
  o.seed = 1;
  o.tier = CheckpointTier::kMemory;
  auto mem = RunRecoverySim(o);
  ASSERT_TRUE(mem.ok()) << mem.status().message();
  EXPECT_EQ(mem->hosts, 2304);
  EXPECT_NEAR(mem->mtbf_s, 54.0 * 86400 * 16384 / (466.0 * 9216), 1e-6);
  EXPECT_GE(mem->ettr, 0.97) << "seed " << o.seed;
  EXPECT_LE(mem->bound.efficiency - mem->ettr, 0.01) << "seed " << o.seed;
  EXPECT_EQ(mem->head_steps_lost, mem->steps_lost);
  o.tier = CheckpointTier::kDisk;
  auto disk = RunRecoverySim(o);
  ASSERT_TRUE(disk.ok()) << disk.status().message();
  EXPECT_LT(disk->bound.efficiency, 0.97);
  EXPECT_LE(disk->bound.efficiency - disk->ettr, 0.01) << "seed " << o.seed;
}

TEST(RecoverySimTest, BadOptionsNameTheField) {
  auto expect_error = [](RecoverySimOptions o, const std::string& field) {
    auto r = RunRecoverySim(o);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  };
  RecoverySimOptions o = Small(1);
  o.chips = 100;  // not a multiple of 16
  expect_error(o, "chips");
  o = Small(1);
  o.peer_loss_share = 1.5;
  expect_error(o, "peer_loss_share");
  o = Small(1);
  o.days = 0;
  expect_error(o, "days");
  o = Small(1);
  o.costs.disk_save_s = -1;
  expect_error(o, "costs.disk_save_s");
  o = Small(1);
  o.repair_hours = 0.001;  // 3.6 s, shorter than the 4 s lease
  expect_error(o, "repair_hours");
  EXPECT_FALSE(ParseCheckpointTier("tape").ok());
  EXPECT_FALSE(CostProfile("guess").ok());
}

TEST(RecoverySimTest, TextReportListsEveryRun) {
  RecoverySimOptions o = Small(1);
  o.interruptions_per_chip_day = RateFor(3000, o.chips);
  o.days = 1;
  auto disk = RunRecoverySim(o);
  o.tier = CheckpointTier::kMemory;
  auto mem = RunRecoverySim(o);
  ASSERT_TRUE(disk.ok() && mem.ok());
  std::ostringstream out;
  WriteRecoveryText(out, {*disk, *mem}, 0.97, 0.01);
  EXPECT_NE(out.str().find("custom     disk"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("custom     memory"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("seed 1"), std::string::npos);
}

}  // namespace
}  // namespace tessera::sim
