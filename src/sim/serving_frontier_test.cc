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

// Two hour-long windows: the first quiet (one replica meets all 100), the second busy (three
// do), and one chip per replica, so a count costs its number in chip-hours per window.
GoalReachInput QuietThenBusy(double startup_s) {
  GoalReachInput in;
  in.oracle.counts = {1, 2, 3};
  in.oracle.met = {{100, 0}, {100, 50}, {100, 100}};
  in.oracle.window_requests = {100, 100};
  in.oracle.window_length_s = {3600, 3600};
  in.oracle.startup_s = startup_s;
  in.oracle.chips_per_replica = 1;
  // The fixed runs: fixed=n meets the sum of its row and costs 2n chip-hours.
  in.fixed = {{"fixed=1", 2, 100}, {"fixed=2", 4, 150}, {"fixed=3", 6, 200}};
  in.requests = 200;
  return in;
}

TEST(ServingFrontierTest, GoalIsReachableWhenTheOracleFollowsTheLoadForUnderTheRatio) {
  const GoalReach g = SolveGoalReach(QuietThenBusy(0));
  ASSERT_TRUE(g.computed);
  EXPECT_EQ(g.best_fixed_met, 200);
  EXPECT_EQ(g.floor_met, 180);  // 90 % of fixed=3's 200
  // fixed=1 (100) and fixed=2 (150) are under the floor: the floor is the only level, and its
  // comparator is fixed=3 (6 chip-h).
  ASSERT_EQ(g.levels.size(), 1u);
  EXPECT_TRUE(g.levels[0].floor);
  EXPECT_EQ(g.levels[0].comparator, 2);
  // 1 then 3: 4 chip-h for all 200, 0.67x fixed=3.
  ASSERT_EQ(g.best, 0);
  EXPECT_EQ(g.levels[0].oracle.replicas, (std::vector<int>{1, 3}));
  EXPECT_EQ(g.levels[0].oracle.met, 200);
  EXPECT_NEAR(g.levels[0].ratio, 4.0 / 6, 1e-9);
  // The relaxation's bound: on the line through (2 chip-h, 100 met), (3, 150) and (4, 200),
  // 180 met would cost 3.6 (no schedule meets exactly 180).
  EXPECT_NEAR(g.levels[0].lower_bound_ratio, 3.6 / 6, 1e-6);
  EXPECT_EQ(g.first_reachable, 0);
  EXPECT_TRUE(g.reachable);
  EXPECT_FALSE(g.out_of_reach);
  EXPECT_FALSE(g.has_above_all);  // fixed=3 meets every request
}

TEST(ServingFrontierTest, GoalIsOutOfReachWhenTheStartUpEatsTheSaving) {
  // An hour's start-up: the two replicas added for the busy window cost 2 chip-h, so 1, 3
  // costs 6, as fixed=3 does. The cheapest schedule at the floor (180 met) is 6 chip-h (1.0x),
  // and the relaxation's bound there, on the hull between (2 chip-h, 100) and (6, 200), is 5.2
  // chip-h: 0.87x, above 0.8x, so no schedule meets the goal.
  const GoalReach g = SolveGoalReach(QuietThenBusy(3600));
  ASSERT_EQ(g.levels.size(), 1u);
  ASSERT_EQ(g.best, 0);
  EXPECT_NEAR(g.levels[0].oracle.chip_hours, 6, 1e-9);
  EXPECT_NEAR(g.levels[0].ratio, 1, 1e-9);
  EXPECT_NEAR(g.levels[0].oracle.lower_bound_chip_hours, 5.2, 1e-6);
  EXPECT_NEAR(g.levels[0].lower_bound_ratio, 5.2 / 6, 1e-6);
  EXPECT_FALSE(g.reachable);
  EXPECT_TRUE(g.out_of_reach);
}

TEST(ServingFrontierTest, GoalIsLeftOpenWhenOnlyTheRelaxationsBoundIsUnderTheRatio) {
  // Half an hour's start-up: 1, 3 costs 5 chip-h (0.83x), the cheapest at 180 met since 1, 2
  // meets only 150; the hull between (2, 100) and (5, 200) passes 180 at 4.4 chip-h (0.73x).
  const GoalReach g = SolveGoalReach(QuietThenBusy(1800));
  ASSERT_EQ(g.best, 0);
  EXPECT_NEAR(g.levels[0].ratio, 5.0 / 6, 1e-9);
  EXPECT_NEAR(g.levels[0].lower_bound_ratio, 4.4 / 6, 1e-6);
  EXPECT_FALSE(g.reachable);
  EXPECT_FALSE(g.out_of_reach);
}

TEST(ServingFrontierTest, GoalLevelsSitJustAboveEachFixedCountOverTheFloor) {
  GoalReachInput in;
  in.oracle.counts = {1, 2, 3, 4};
  in.oracle.met = {{100, 0}, {100, 80}, {100, 95}, {100, 100}};
  in.oracle.window_requests = {100, 110};
  in.oracle.window_length_s = {3600, 3600};
  in.oracle.startup_s = 0;
  in.oracle.chips_per_replica = 1;
  in.fixed = {{"fixed=1", 2, 100}, {"fixed=2", 4, 180}, {"fixed=3", 6, 195}, {"fixed=4", 8, 200}};
  in.requests = 210;
  const GoalReach g = SolveGoalReach(in);
  // The floor (180, where fixed=2 is the comparator), then one above fixed=2 (181: fixed=3)
  // and one above fixed=3 (196: fixed=4); fixed=1's 101 is under the floor.
  ASSERT_EQ(g.levels.size(), 3u);
  EXPECT_EQ(g.levels[0].target_met, 180);
  EXPECT_TRUE(g.levels[0].floor);
  EXPECT_EQ(g.levels[0].comparator, 1);
  EXPECT_EQ(g.levels[1].target_met, 181);
  EXPECT_EQ(g.levels[1].above, "fixed=2");
  EXPECT_EQ(g.levels[1].comparator, 2);
  EXPECT_EQ(g.levels[2].target_met, 196);
  EXPECT_EQ(g.levels[2].above, "fixed=3");
  EXPECT_EQ(g.levels[2].comparator, 3);
  // 1, 2 (3 chip-h) against fixed=2's 4: 0.75x; 1, 3 (4) against 6: 0.67x; 1, 4 (5) against 8:
  // 0.625x, the best, at the highest attainment.
  EXPECT_NEAR(g.levels[0].ratio, 0.75, 1e-9);
  EXPECT_NEAR(g.levels[1].ratio, 4.0 / 6, 1e-9);
  EXPECT_NEAR(g.levels[2].ratio, 0.625, 1e-9);
  EXPECT_EQ(g.best, 2);
  EXPECT_EQ(g.first_reachable, 0);
  EXPECT_EQ(g.levels[1].oracle.replicas, (std::vector<int>{1, 3}));
  EXPECT_EQ(g.levels[2].oracle.replicas, (std::vector<int>{1, 4}));
  EXPECT_TRUE(g.reachable);
  // 201 met is more than any window's best adds up to (100 + 100): no schedule, shown apart.
  EXPECT_TRUE(g.has_above_all);
  EXPECT_FALSE(g.above_all.reached);
}

TEST(ServingFrontierTest, OracleScheduleChangesCountAsDecisionsUndoneWithinTenMinutes) {
  GoalReachInput in = QuietThenBusy(0);
  // Four 5-minute windows, quiet, busy, quiet, busy: 1, 3, 1, 3 makes three changes, each of
  // the first two undone by the next, 5 minutes later.
  in.oracle.met = {{100, 0, 100, 0}, {100, 50, 100, 50}, {100, 100, 100, 100}};
  in.oracle.window_requests = {100, 100, 100, 100};
  in.oracle.window_length_s = {300, 300, 300, 300};
  in.fixed = {{"fixed=1", 1.0 / 3, 200}, {"fixed=2", 2.0 / 3, 300}, {"fixed=3", 1, 400}};
  in.requests = 400;
  const GoalReach g = SolveGoalReach(in);
  ASSERT_GE(g.best, 0);
  const GoalLevel& b = g.levels[static_cast<size_t>(g.best)];
  EXPECT_EQ(b.oracle.replicas, (std::vector<int>{1, 3, 1, 3}));
  EXPECT_EQ(b.undone, 2);
  EXPECT_NEAR(b.undone_per_hour, 6, 1e-9);  // 2 in 20 minutes
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
  // The goal's oracle, from the same windows: with one window a schedule is a fixed count, so
  // at best it matches the comparator (1.0x) and the goal is not reachable.
  ASSERT_TRUE(v.goal_reach.computed);
  EXPECT_EQ(v.goal_reach.best_fixed_met, 95);
  ASSERT_GE(v.goal_reach.best, 0);
  EXPECT_NEAR(v.goal_reach.levels[static_cast<size_t>(v.goal_reach.best)].ratio, 1, 1e-9);
  EXPECT_FALSE(v.goal_reach.reachable);
}

}  // namespace
// From the autoscaler's start (1 replica at time 0): of window 0's requests, the 60 due their
// first token before a group placed at 0 is ready meet the SLO at most as fixed=1 gave them a
// first token (5), whatever the count. From any start the goal is reachable (2 then 1: 185 met
// for 1.5 chip-h, 0.75x fixed=2); from auto's start no schedule reaches the floor (180).
TEST(ServingFrontierTest, FromAutosStartTheEarlyRequestsMeetAsInTheFixedRunOfItsMinimum) {
  ServingComparison c;
  c.options.oracle_window_ms = 1'800'000;
  c.options.model.startup_ms = 0;
  std::vector<ServingRunResult> fixed = {Fixed(1, 1, 0.50), Fixed(2, 2, 0.95), Fixed(3, 3, 1.0)};
  const std::vector<std::vector<int64_t>> met = {{10, 90}, {95, 95}, {100, 100}};
  const std::vector<int64_t> early_met = {5, 58, 60};
  for (size_t i = 0; i < fixed.size(); ++i) {
    ServingRunResult& r = fixed[i];
    r.requests = 200;
    r.slo_met = met[i][0] + met[i][1];
    r.window_requests = {100, 100};
    r.window_met = met[i];
    r.early_requests = 60;
    r.window_early_met = {early_met[i], 0};
    r.window_early_ttft_met = {early_met[i] + 1, 0};
  }
  fixed[0].window_early_ttft_met = {5, 0};
  c.runs = fixed;
  ServingRunResult a = Fixed(0, 1.6, 0.9);
  a.config.name = "auto";
  a.config.autoscaling = AutoscalerConfig{};
  a.requests = 200;
  a.slo_met = 140;
  a.window_requests = {100, 100};
  a.early_requests = 60;
  c.runs.push_back(a);

  ServingFrontier f = ComputeFrontier(c);
  ASSERT_EQ(f.autos.size(), 1u);
  const AutoVerdict* v = &f.autos[0];
  ASSERT_TRUE(v->goal_reach.reachable);
  const GoalLevel& any = v->goal_reach.levels[static_cast<size_t>(v->goal_reach.best)];
  EXPECT_EQ(any.oracle.replicas, (std::vector<int>{2, 1}));
  EXPECT_NEAR(any.ratio, 0.75, 1e-9);
  ASSERT_TRUE(v->from_start);
  EXPECT_EQ(v->initial_replicas, 1);
  EXPECT_EQ(v->early_requests, 60);
  EXPECT_EQ(v->early_in_time, 5);
  // Window 0: at most 100 - 60 + 5 = 45 (fixed=3); window 1: 100.
  EXPECT_EQ(v->most_met_from_start, 145);
  ASSERT_TRUE(v->goal_reach_from_start.computed);
  EXPECT_EQ(v->goal_reach_from_start.best, -1);
  EXPECT_FALSE(v->goal_reach_from_start.reachable);

  // From zero replicas nothing is in time; with a minimum of no fixed run, nothing is said.
  c.runs.back().config.autoscaling->min_replicas = 0;
  f = ComputeFrontier(c);
  v = &f.autos[0];
  ASSERT_TRUE(v->from_start);
  EXPECT_EQ(v->early_in_time, 0);
  EXPECT_EQ(v->most_met_from_start, 140);
  c.runs.back().config.autoscaling->min_replicas = 4;
  f = ComputeFrontier(c);
  EXPECT_FALSE(f.autos[0].from_start);
}

}  // namespace tessera::sim
