#include "sim/serving_frontier.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera::sim {
namespace {

struct Path {
  double cost = 0;  // chip-seconds
  int64_t met = 0;
  std::vector<int> choice;  // count index per window
};

// The exact minimum of cost - price x met over schedules (ties: cheaper first).
Path SolveAtPrice(const OracleInput& in, double price) {
  const size_t k = in.counts.size();
  const size_t windows = in.window_length_s.size();
  const double chips = static_cast<double>(in.chips_per_replica);
  struct Cell {
    double value = 0, cost = 0;
    int64_t met = 0;
    int from = -1;
  };
  std::vector<std::vector<Cell>> dp(windows, std::vector<Cell>(k));
  for (size_t w = 0; w < windows; ++w) {
    for (size_t j = 0; j < k; ++j) {
      const double run = in.counts[j] * chips * in.window_length_s[w];
      const int64_t met = in.met[j][w];
      Cell best;
      best.value = std::numeric_limits<double>::infinity();
      if (w == 0) {
        best = {run - price * static_cast<double>(met), run, met, -1};
      } else {
        for (size_t i = 0; i < k; ++i) {
          const Cell& prev = dp[w - 1][i];
          const double start = std::max(0, in.counts[j] - in.counts[i]) * chips * in.startup_s;
          const double cost = prev.cost + run + start;
          const double value = prev.value + run + start - price * static_cast<double>(met);
          if (value < best.value - 1e-9 ||
              (std::fabs(value - best.value) <= 1e-9 && cost < best.cost))
            best = {value, cost, prev.met + met, static_cast<int>(i)};
        }
      }
      dp[w][j] = best;
    }
  }
  Path p;
  if (windows == 0) return p;
  size_t at = 0;
  for (size_t j = 1; j < k; ++j)
    if (dp[windows - 1][j].value < dp[windows - 1][at].value - 1e-9 ||
        (std::fabs(dp[windows - 1][j].value - dp[windows - 1][at].value) <= 1e-9 &&
         dp[windows - 1][j].cost < dp[windows - 1][at].cost))
      at = j;
  p.cost = dp[windows - 1][at].cost;
  p.met = dp[windows - 1][at].met;
  p.choice.assign(windows, 0);
  for (size_t w = windows; w-- > 0;) {
    p.choice[w] = static_cast<int>(at);
    if (w > 0) at = static_cast<size_t>(dp[w][at].from);
  }
  return p;
}

double Hours(const ServingRunResult& r) { return static_cast<double>(r.duration_us) / 3.6e9; }

// AutoVerdict's goal reach from the autoscaler's own start (serving_frontier.h).
void SolveFromStart(const ServingRunResult& r, const std::vector<const ServingRunResult*>& counts,
                    GoalReachInput goal, AutoVerdict& v) {
  const int initial = AutoscaleInitialReplicas(*r.config.autoscaling);
  const ServingRunResult* at_start = nullptr;
  for (const ServingRunResult* x : counts)
    if (x->config.replicas == initial) at_start = x;
  if (initial > 0 && at_start == nullptr) return;
  v.from_start = true;
  v.initial_replicas = initial;
  v.early_requests = r.early_requests;
  OracleInput& in = goal.oracle;
  const size_t windows = in.window_length_s.size();
  std::vector<int64_t> in_time(windows, 0);
  if (at_start != nullptr)
    for (size_t w = 0; w < windows && w < at_start->window_early_ttft_met.size(); ++w)
      in_time[w] = at_start->window_early_ttft_met[w];
  for (int64_t n : in_time) v.early_in_time += n;
  for (size_t j = 0; j < counts.size(); ++j)
    for (size_t w = 0; w < windows; ++w) {
      const std::vector<int64_t>& early = counts[j]->window_early_met;
      in.met[j][w] += in_time[w] - (w < early.size() ? early[w] : 0);
    }
  for (size_t w = 0; w < windows; ++w) {
    int64_t most = 0;
    for (size_t j = 0; j < counts.size(); ++j) most = std::max(most, in.met[j][w]);
    v.most_met_from_start += most;
  }
  v.goal_reach_from_start = SolveGoalReach(goal);
}

}  // namespace

OracleResult SolveOracle(const OracleInput& in) {
  OracleResult out;
  if (in.counts.empty() || in.window_length_s.empty()) return out;
  // The price of a met request that makes meeting it worth any replica: then the schedule
  // meets as many as the counts can.
  double hi = 1;
  for (double len : in.window_length_s)
    hi += static_cast<double>(in.counts.back()) * static_cast<double>(in.chips_per_replica) *
          (len + in.startup_s);
  Path best = SolveAtPrice(in, hi);
  if (best.met < in.target_met) return out;
  // Every price gives a bound: a schedule meeting the target costs at least the minimum of
  // cost - price x met, plus price x target.
  const double target = static_cast<double>(in.target_met);
  double bound = 0;
  const auto note_bound = [&](const Path& p, double price) {
    bound = std::max(bound, p.cost - price * static_cast<double>(p.met) + price * target);
  };
  note_bound(best, hi);
  double lo = 0;
  const Path cheapest = SolveAtPrice(in, lo);
  note_bound(cheapest, lo);
  if (cheapest.met >= in.target_met) {
    best = cheapest;
  } else {
    for (int i = 0; i < 100; ++i) {
      const double mid = (lo + hi) / 2;
      Path p = SolveAtPrice(in, mid);
      note_bound(p, mid);
      if (p.met >= in.target_met) {
        hi = mid;
        best = std::move(p);
      } else {
        lo = mid;
      }
    }
  }
  out.reached = true;
  out.chip_hours = best.cost / 3600.0;
  // The DP breaks ties within 1e-9, so a bound may pass the schedule's cost by as much.
  out.lower_bound_chip_hours = std::min(bound, best.cost) / 3600.0;
  out.met = best.met;
  for (size_t w = 0; w < best.choice.size(); ++w) {
    out.replicas.push_back(in.counts[static_cast<size_t>(best.choice[w])]);
    if (w > 0 && out.replicas[w] != out.replicas[w - 1]) ++out.changes;
  }
  return out;
}

namespace {

// The oracle's schedule as scale decisions at window boundaries.
int ScheduleUndone(const std::vector<int>& replicas, const std::vector<double>& window_length_s) {
  std::vector<ScaleEvent> events;
  double at = 0;
  for (size_t w = 0; w < replicas.size() && w < window_length_s.size(); ++w) {
    if (w > 0 && replicas[w] != replicas[w - 1])
      events.push_back({at, replicas[w - 1], replicas[w], "oracle"});
    at += window_length_s[w];
  }
  return CountUndone(events, kUndoneWithinS);
}

}  // namespace

GoalReach SolveGoalReach(const GoalReachInput& in) {
  GoalReach g;
  if (in.fixed.empty() || in.requests <= 0 || in.oracle.window_length_s.empty() ||
      in.oracle.counts.empty())
    return g;
  g.computed = true;
  for (const GoalFixedPoint& x : in.fixed) g.best_fixed_met = std::max(g.best_fixed_met, x.met);
  const auto meets_floor = [&](int64_t met) {
    return g.best_fixed_met == 0 ||
           static_cast<double>(met) / static_cast<double>(g.best_fixed_met) >= kGoalAttainmentRatio;
  };
  // The least met count whose attainment passes the floor, as AutoVerdict's check reads it.
  int64_t floor =
      static_cast<int64_t>(std::ceil(kGoalAttainmentRatio * static_cast<double>(g.best_fixed_met)));
  while (floor > 0 && meets_floor(floor - 1)) --floor;
  while (!meets_floor(floor)) ++floor;
  g.floor_met = floor;

  std::vector<GoalLevel> levels;
  GoalLevel at_floor;
  at_floor.target_met = floor;
  at_floor.floor = true;
  levels.push_back(at_floor);
  for (const GoalFixedPoint& x : in.fixed) {
    const int64_t t = x.met + 1;
    if (t <= floor || t > g.best_fixed_met) continue;
    auto same = std::find_if(levels.begin(), levels.end(),
                             [&](const GoalLevel& l) { return l.target_met == t; });
    if (same != levels.end()) {
      if (!same->floor) same->above += ", " + x.name;
      continue;
    }
    GoalLevel l;
    l.target_met = t;
    l.above = x.name;
    levels.push_back(std::move(l));
  }
  std::sort(levels.begin(), levels.end(),
            [](const GoalLevel& a, const GoalLevel& b) { return a.target_met < b.target_met; });
  const double hours = [&] {
    double s = 0;
    for (double len : in.oracle.window_length_s) s += len;
    return std::max(s / 3600.0, 1e-9);
  }();
  for (GoalLevel& l : levels) {
    for (size_t i = 0; i < in.fixed.size(); ++i)
      if (in.fixed[i].met >= l.target_met &&
          (l.comparator < 0 ||
           in.fixed[i].chip_hours < in.fixed[static_cast<size_t>(l.comparator)].chip_hours))
        l.comparator = static_cast<int>(i);
    OracleInput o = in.oracle;
    o.target_met = l.target_met;
    l.oracle = SolveOracle(o);
    const double comparator_chip_hours =
        l.comparator < 0 ? 0 : in.fixed[static_cast<size_t>(l.comparator)].chip_hours;
    if (l.oracle.reached && comparator_chip_hours > 0) {
      l.ratio = l.oracle.chip_hours / comparator_chip_hours;
      l.lower_bound_ratio = l.oracle.lower_bound_chip_hours / comparator_chip_hours;
      l.undone = ScheduleUndone(l.oracle.replicas, in.oracle.window_length_s);
      l.undone_per_hour = l.undone / hours;
    }
  }
  g.levels = std::move(levels);
  bool every_bound_above = true;
  for (size_t i = 0; i < g.levels.size(); ++i) {
    const GoalLevel& l = g.levels[i];
    if (!l.oracle.reached || l.comparator < 0) continue;
    if (g.best < 0 || l.ratio < g.levels[static_cast<size_t>(g.best)].ratio)
      g.best = static_cast<int>(i);
    if (l.lower_bound_ratio <= kGoalChipRatio) every_bound_above = false;
    if (g.first_reachable < 0 && l.ratio <= kGoalChipRatio) g.first_reachable = static_cast<int>(i);
  }
  g.reachable = g.best >= 0 && g.levels[static_cast<size_t>(g.best)].ratio <= kGoalChipRatio;
  g.out_of_reach = !g.reachable && every_bound_above;
  if (g.best_fixed_met < in.requests) {
    OracleInput o = in.oracle;
    o.target_met = g.best_fixed_met + 1;
    g.above_all = SolveOracle(o);
    g.has_above_all = true;
  }
  return g;
}

int CountUndone(const std::vector<ScaleEvent>& events, double within_s) {
  int undone = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const int dir = events[i].to > events[i].from ? 1 : -1;
    for (size_t j = i + 1; j < events.size() && events[j].time_s - events[i].time_s <= within_s;
         ++j) {
      if ((events[j].to > events[j].from ? 1 : -1) != dir) {
        ++undone;
        break;
      }
    }
  }
  return undone;
}

ServingFrontier ComputeFrontier(const ServingComparison& c) {
  ServingFrontier f;
  std::vector<const ServingRunResult*> fixed_by_count;
  for (const ServingRunResult& r : c.runs) {
    if (r.config.autoscaling) continue;
    f.fixed.push_back(&r);
    fixed_by_count.push_back(&r);
  }
  std::stable_sort(f.fixed.begin(), f.fixed.end(),
                   [](const auto* a, const auto* b) { return a->chip_hours < b->chip_hours; });
  for (const ServingRunResult* r : f.fixed) {
    bool beaten = false;
    for (const ServingRunResult* o : f.fixed)
      if (o != r && o->chip_hours <= r->chip_hours && o->slo_attainment > r->slo_attainment)
        beaten = true;
    f.on_frontier.push_back(!beaten);
  }
  std::stable_sort(fixed_by_count.begin(), fixed_by_count.end(), [](const auto* a, const auto* b) {
    return a->config.replicas < b->config.replicas;
  });
  // One run per count (the first named), for the oracle.
  std::vector<const ServingRunResult*> counts;
  for (const ServingRunResult* r : fixed_by_count)
    if (counts.empty() || counts.back()->config.replicas != r->config.replicas) counts.push_back(r);
  for (size_t i = 0; i < counts.size(); ++i) {
    const bool run_start =
        i == 0 || counts[i - 1]->config.replicas + 1 != counts[i]->config.replicas;
    const bool run_end =
        i + 1 == counts.size() || counts[i + 1]->config.replicas != counts[i]->config.replicas + 1;
    if (run_start)
      f.oracle_counts += (i == 0 ? "" : ", ") + std::to_string(counts[i]->config.replicas);
    if (run_end && !run_start) f.oracle_counts += ".." + std::to_string(counts[i]->config.replicas);
  }

  for (const ServingRunResult& r : c.runs) {
    if (!r.config.autoscaling) continue;
    AutoVerdict v;
    v.run = &r;
    v.hours = Hours(r);
    const double hours = std::max(v.hours, 1e-9);
    v.decisions_per_hour = static_cast<double>(r.scale_events.size()) / hours;
    v.undone = CountUndone(r.scale_events, kUndoneWithinS);
    v.undone_per_hour = v.undone / hours;
    for (const ServingRunResult* x : f.fixed) {
      if (x->slo_attainment >= r.slo_attainment &&
          (v.cheapest_at_least == nullptr || x->chip_hours < v.cheapest_at_least->chip_hours))
        v.cheapest_at_least = x;
      if (v.best_fixed == nullptr || x->slo_attainment > v.best_fixed->slo_attainment ||
          (x->slo_attainment == v.best_fixed->slo_attainment &&
           x->chip_hours < v.best_fixed->chip_hours))
        v.best_fixed = x;
      if (x->chip_hours <= r.chip_hours && x->slo_attainment >= r.slo_attainment)
        v.dominated = true;
    }
    if (v.cheapest_at_least != nullptr && v.cheapest_at_least->chip_hours > 0)
      v.chip_ratio = r.chip_hours / v.cheapest_at_least->chip_hours;
    if (v.best_fixed != nullptr && v.best_fixed->slo_attainment > 0)
      v.attainment_ratio = r.slo_attainment / v.best_fixed->slo_attainment;
    // No fixed count attains as much: auto beats every one at its quality.
    v.chips_goal = v.cheapest_at_least == nullptr || v.chip_ratio <= kGoalChipRatio;
    v.attainment_goal = v.best_fixed == nullptr || v.attainment_ratio >= kGoalAttainmentRatio;
    v.undone_goal = v.undone_per_hour <= kGoalUndonePerHour;

    if (!counts.empty()) {
      OracleInput in;
      const int64_t window_us = c.options.oracle_window_ms * 1000;
      const size_t windows = r.window_requests.size();
      for (const ServingRunResult* x : counts) {
        in.counts.push_back(x->config.replicas);
        std::vector<int64_t> met = x->window_met;
        met.resize(windows, 0);
        in.met.push_back(std::move(met));
      }
      in.window_requests = r.window_requests;
      for (size_t w = 0; w < windows; ++w) {
        const int64_t from = static_cast<int64_t>(w) * window_us;
        const int64_t to = std::min<int64_t>(from + window_us, r.duration_us);
        in.window_length_s.push_back(static_cast<double>(std::max<int64_t>(0, to - from)) / 1e6);
      }
      in.startup_s = static_cast<double>(c.options.model.startup_ms) / 1000.0;
      in.chips_per_replica = r.chips_per_replica;
      in.target_met = r.slo_met;
      v.oracle = SolveOracle(in);
      if (v.oracle.reached && v.oracle.chip_hours > 0)
        v.oracle_ratio = r.chip_hours / v.oracle.chip_hours;
      GoalReachInput goal;
      goal.oracle = std::move(in);
      for (const ServingRunResult* x : f.fixed)
        goal.fixed.push_back({x->config.name, x->chip_hours, x->slo_met});
      goal.requests = r.requests;
      v.goal_reach = SolveGoalReach(goal);
      SolveFromStart(r, counts, goal, v);
    }
    f.autos.push_back(std::move(v));
  }
  return f;
}

}  // namespace tessera::sim
