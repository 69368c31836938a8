// The frontier, the undone-decision count and the oracle on small cases checked by hand.
#include "sim/serving_frontier.h"

#include <gtest/gtest.h>

namespace tessera::sim {
namespace {

TEST(ServingFrontierTest, ADecisionIsUndoneWhenTheNextOppositeOneComesWithinTheWindow) {
  const std::vector<ScaleEvent> events = {
      {0, 2, 4, ""},     // undone by the step down at 300
      {300, 4, 3, ""},   // the next up is 1,700 s later: kept
      {2000, 3, 5, ""},  // the down at 3,000 is 1,000 s later: kept
      {2100, 5, 6, ""},  // 900 s: kept
      {3000, 6, 4, ""},
  };
  EXPECT_EQ(CountUndone(events, 600), 1);
  EXPECT_EQ(CountUndone(events, 1000), 3);  // 0, 2000 (1,000 s to the down) and 2100 (900 s)
  EXPECT_EQ(CountUndone({}, 600), 0);
}

OracleInput TwoWindows() {
  OracleInput in;
  in.counts = {1, 2};
  in.met = {{10, 2}, {10, 10}};  // 1 replica meets every request of window 0, 2 of window 1
  in.window_requests = {10, 10};
  in.window_length_s = {60, 60};
  in.startup_s = 30;
  in.chips_per_replica = 1;
  return in;
}

TEST(ServingFrontierTest, OracleFindsTheCheapestScheduleAndPaysTheStartUpOfEachAddedReplica) {
  OracleInput in = TwoWindows();
  in.target_met = 20;
  OracleResult r = SolveOracle(in);
  ASSERT_TRUE(r.reached);
  // 1 then 2: 60 + 120 chip-s, plus 30 s of the added replica started early = 210 (2, 2: 240).
  EXPECT_EQ(r.replicas, (std::vector<int>{1, 2}));
  EXPECT_NEAR(r.chip_hours, 210.0 / 3600, 1e-12);
  EXPECT_EQ(r.met, 20);
  EXPECT_EQ(r.changes, 1);
  in.target_met = 12;  // 1, 1 meets 12 for 120 chip-s
  r = SolveOracle(in);
  EXPECT_EQ(r.replicas, (std::vector<int>{1, 1}));
  EXPECT_NEAR(r.chip_hours, 120.0 / 3600, 1e-12);
  in.target_met = 13;
  r = SolveOracle(in);
  EXPECT_NEAR(r.chip_hours, 210.0 / 3600, 1e-12);
  in.target_met = 21;  // more than there are requests: no schedule
  EXPECT_FALSE(SolveOracle(in).reached);
}

TEST(ServingFrontierTest, OracleStartsHighWhenTheFirstWindowNeedsIt) {
  OracleInput in = TwoWindows();
  in.met = {{2, 10}, {10, 10}};  // the load is in window 0
  in.target_met = 20;
  const OracleResult r = SolveOracle(in);
  ASSERT_TRUE(r.reached);
  EXPECT_EQ(r.replicas, (std::vector<int>{2, 1}));  // ready at 0, as every run's initial ones
  EXPECT_NEAR(r.chip_hours, 180.0 / 3600, 1e-12);
}

ServingRunResult Fixed(int n, double chip_hours, double attainment) {
  ServingRunResult r;
  r.config.name = "fixed=" + std::to_string(n);
  r.config.replicas = n;
  r.chip_hours = chip_hours;
  r.slo_attainment = attainment;
  r.requests = 100;
  r.slo_met = static_cast<int64_t>(attainment * 100);
  r.duration_us = 3'600'000'000;
  r.chips_per_replica = 1;
  r.window_requests = {100};
  r.window_met = {r.slo_met};
  return r;
}

TEST(ServingFrontierTest, AutoIsComparedWithTheCheapestFixedCountAttainingAsMuch) {
  ServingComparison c;
  c.options.oracle_window_ms = 3'600'000;
  c.options.model.startup_ms = 0;
  c.runs = {Fixed(1, 1, 0.50), Fixed(2, 2, 0.90), Fixed(3, 3, 0.95), Fixed(4, 4, 0.94)};
  ServingRunResult a = Fixed(0, 1.5, 0.88);
  a.config.name = "auto";
  a.config.autoscaling = AutoscalerConfig{};
  a.scale_events = {{0, 1, 2, ""}, {100, 2, 1, ""}, {1000, 1, 2, ""}};
  c.runs.push_back(a);
  const ServingFrontier f = ComputeFrontier(c);
  ASSERT_EQ(f.fixed.size(), 4u);
  EXPECT_EQ(f.on_frontier, (std::vector<bool>{true, true, true, false}));  // 4 is beaten by 3
  EXPECT_EQ(f.oracle_counts, "1..4");
  ASSERT_EQ(f.autos.size(), 1u);
  const AutoVerdict& v = f.autos[0];
  EXPECT_EQ(v.cheapest_at_least->config.name, "fixed=2");
  EXPECT_NEAR(v.chip_ratio, 0.75, 1e-12);
  EXPECT_TRUE(v.chips_goal);
  EXPECT_EQ(v.best_fixed->config.name, "fixed=3");
  EXPECT_NEAR(v.attainment_ratio, 0.88 / 0.95, 1e-12);
  EXPECT_TRUE(v.attainment_goal);
  EXPECT_EQ(v.undone, 1);  // the up at 0, undone at 100
  EXPECT_NEAR(v.decisions_per_hour, 3, 1e-9);
  EXPECT_FALSE(v.dominated);
  // One window: the oracle's cheapest count meeting 88 requests is 2 (90 met).
  ASSERT_TRUE(v.oracle.reached);
  EXPECT_EQ(v.oracle.replicas, (std::vector<int>{2}));
  EXPECT_NEAR(v.oracle.chip_hours, 2, 1e-9);
  EXPECT_NEAR(v.oracle_ratio, 0.75, 1e-9);
}

}  // namespace
}  // namespace tessera::sim
