// The verdict of a serving comparison (serving_sim.h): the chip-hours / SLO-attainment frontier
// of the fixed replica counts, where each autoscaled configuration lands on it, how often it
// changed its mind, and an oracle: the cheapest replica schedule that meets the same
// attainment knowing the future, with the same start-up time.
//
// The oracle (docs/simulator.md "Oracle"): the run is cut into windows of
// options.oracle_window_ms by arrival time. Each fixed run of n replicas says how many of a
// window's requests met the SLO with n replicas (window_met). A schedule picks n per window;
// it pays n x chips x the window's length, plus start-up x chips for every replica added at a
// window boundary (the new group is placed a start-up earlier, as the autoscaled run pays it);
// the first window's replicas are ready at time 0, as every run's initial ones. The cheapest
// schedule whose met requests reach a target is found by Lagrangian relaxation: for a price
// per met request, a dynamic program over (window, replicas) minimises cost - price x met
// exactly; the price is bisected to the least one whose schedule reaches the target. That
// schedule is feasible; it is the cheapest up to the relaxation's gap (a schedule off the
// convex hull of (cost, met) could be cheaper by less than one window's step). The model
// treats windows as independent: a window's met count under n is the one the fixed-n run saw,
// with the backlog that run carried into it, not the schedule's.
//
// Pure functions of the results. Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/serving_sim.h"

namespace tessera::sim {

// Goal thresholds of issue 34.
inline constexpr double kGoalChipRatio = 0.8;
inline constexpr double kGoalAttainmentRatio = 0.9;
inline constexpr double kGoalUndonePerHour = 6;
inline constexpr double kUndoneWithinS = 600;

// The oracle's inputs: per fixed count, the met requests of each window.
struct OracleInput {
  std::vector<int> counts;                // replica counts available, increasing
  std::vector<std::vector<int64_t>> met;  // [count index][window]
  std::vector<int64_t> window_requests;   // [window]
  std::vector<double> window_length_s;    // [window]
  double startup_s = 0;
  int64_t chips_per_replica = 1;
  int64_t target_met = 0;  // requests that must meet the SLO
};

struct OracleResult {
  bool reached = false;  // false: no schedule of the counts reaches the target
  double chip_hours = 0;
  // No schedule reaching the target costs less (the relaxation's bound: the best over the
  // prices tried of min(cost - price x met) + price x target); equal to chip_hours when the
  // relaxation has no gap there. Within the model (windows independent), not beyond it.
  double lower_bound_chip_hours = 0;
  int64_t met = 0;
  std::vector<int> replicas;  // per window
  int changes = 0;            // windows whose count differs from the one before
};

OracleResult SolveOracle(const OracleInput& input);

// Could any schedule meet the goal (issue 34) on this trace? The goal asks for an attainment
// of at least kGoalAttainmentRatio of the best fixed count's, and chip-hours at most
// kGoalChipRatio of the cheapest fixed count attaining as much. That comparator is a step in
// the attainment: it changes just above each fixed count's attainment, and the oracle's cost
// only grows with its target; so the least ratio any schedule reaches is at one of the levels
// where the comparator changes: the floor (kGoalAttainmentRatio of the best fixed count's) and
// one request above each fixed count's met requests between that floor and the best. The
// oracle is solved at each level, against that level's comparator (a schedule that overshoots
// its level has a comparator no cheaper, so the ratio shown is at most its own).
struct GoalFixedPoint {
  std::string name;  // "fixed=5"
  double chip_hours = 0;
  int64_t met = 0;
};

struct GoalLevel {
  int64_t target_met = 0;
  // Why the level is one: the floor, or one request above this fixed count's met requests.
  bool floor = false;
  std::string above;             // "fixed=4" (empty for the floor)
  int comparator = -1;           // index into fixed: the cheapest with met >= target_met
  OracleResult oracle;           // at target_met
  double ratio = 0;              // oracle / comparator chip-hours (0: no schedule)
  double lower_bound_ratio = 0;  // the oracle's lower bound / comparator chip-hours
  int undone = 0;                // the schedule's changes undone within kUndoneWithinS
  double undone_per_hour = 0;
};

struct GoalReach {
  bool computed = false;  // false: no fixed count, no request or no window
  int64_t best_fixed_met = 0;
  int64_t floor_met = 0;          // the least met count the attainment goal allows
  std::vector<GoalLevel> levels;  // increasing target_met, each with a comparator
  int best = -1;                  // the level with the least ratio among those reached
  int first_reachable = -1;       // the lowest level whose ratio is <= kGoalChipRatio
  bool reachable = false;         // that ratio is <= kGoalChipRatio
  bool out_of_reach = false;      // every level's lower bound is above kGoalChipRatio
  // Neither: the relaxation's gap leaves it open (a ratio above, a bound at or below).
  // Above every fixed count's attainment the goal has no comparator (it counts as met there);
  // the oracle at best_fixed_met + 1, when the requests allow it, is shown apart.
  bool has_above_all = false;
  OracleResult above_all;
};

struct GoalReachInput {
  OracleInput oracle;  // target_met is ignored
  std::vector<GoalFixedPoint> fixed;
  int64_t requests = 0;
};

GoalReach SolveGoalReach(const GoalReachInput& input);

// Scale decisions undone within `within_s`: a decision is undone when a later one within that
// time moves the size the other way.
int CountUndone(const std::vector<ScaleEvent>& events, double within_s);

struct AutoVerdict {
  const ServingRunResult* run = nullptr;
  double hours = 0;  // the run's duration
  double decisions_per_hour = 0;
  int undone = 0;  // within 10 minutes
  double undone_per_hour = 0;
  const ServingRunResult* cheapest_at_least = nullptr;  // fixed, attainment >= auto's
  double chip_ratio = 0;                                // auto / that; 0 when none
  const ServingRunResult* best_fixed = nullptr;         // highest attainment, then cheapest
  double attainment_ratio = 0;                          // auto / best
  bool dominated = false;  // some fixed count is as cheap or cheaper and attains as much
  OracleResult oracle;
  double oracle_ratio = 0;  // auto's chip-hours / the oracle's
  GoalReach goal_reach;     // the oracle at every attainment the goal's comparator changes
  // The same from the autoscaler's own start: its initial size (by default its minimum) ready
  // at time 0, any group more placed then is ready a start-up later. Until then the run is the
  // fixed run of that count, so a request due its first token before then (arrived before
  // ServingRunResult::early_cut_us) gets it in time from no schedule more often than from that
  // run; the oracle's first windows count those requests as that run did (its in-time first
  // tokens, an upper bound). Computed when that size is 0 or among the fixed counts.
  bool from_start = false;
  int initial_replicas = 0;
  int64_t early_requests = 0;       // arrived before the cut
  int64_t early_in_time = 0;        // of them, first token in time in the fixed run of that size
  int64_t most_met_from_start = 0;  // the most met requests any schedule from that start reaches
  GoalReach goal_reach_from_start;
  bool chips_goal = false, attainment_goal = false, undone_goal = false;
};

struct ServingFrontier {
  std::vector<const ServingRunResult*> fixed;  // by chip-hours
  std::vector<bool> on_frontier;               // no other fixed count is cheaper and better
  std::vector<AutoVerdict> autos;
  std::string oracle_counts;  // "1..16" or "2, 4, 8": the fixed counts the oracle may use
};

ServingFrontier ComputeFrontier(const ServingComparison& comparison);

}  // namespace tessera::sim
