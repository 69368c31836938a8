#include "sim/serving_report.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/serving_frontier.h"

namespace tessera::sim {
namespace {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Pair(const LatencySummary& s, int digits, double scale = 1) {
  if (s.count == 0) return "-";
  return Fixed(s.p50_ms * scale, digits) + " / " + Fixed(s.p99_ms * scale, digits);
}

struct Column {
  std::string header;
  std::function<std::string(const ServingRunResult&)> value;
};

std::vector<Column> Columns() {
  return {
      {"config", [](const ServingRunResult& r) { return r.config.name; }},
      {"chip-h", [](const ServingRunResult& r) { return Fixed(r.chip_hours, 1); }},
      {"replica-h", [](const ServingRunResult& r) { return Fixed(r.replica_hours, 2); }},
      {"max groups", [](const ServingRunResult& r) { return std::to_string(r.max_placed); }},
      {"SLO", [](const ServingRunResult& r) { return Fixed(100 * r.slo_attainment, 1) + "%"; }},
      {"TTFT p50/p99 ms", [](const ServingRunResult& r) { return Pair(r.ttft, 0); }},
      {"TPOT p50/p99 ms", [](const ServingRunResult& r) { return Pair(r.tpot, 1); }},
      {"latency p50/p99 s", [](const ServingRunResult& r) { return Pair(r.latency, 1, 1e-3); }},
      {"done", [](const ServingRunResult& r) { return std::to_string(r.completed); }},
      {"503 full/timeout",
       [](const ServingRunResult& r) {
         return std::to_string(r.rejected) + " / " + std::to_string(r.timed_out);
       }},
      {"killed", [](const ServingRunResult& r) { return std::to_string(r.failed); }},
      {"scalings", [](const ServingRunResult& r) { return std::to_string(r.scale_events.size()); }},
  };
}

nlohmann::json Summary(const LatencySummary& s) {
  return {{"count", s.count}, {"p50Ms", s.p50_ms}, {"p99Ms", s.p99_ms}, {"meanMs", s.mean_ms}};
}

std::string Percent(double v) { return Fixed(100 * v, 1) + "%"; }

std::string Met(bool ok) { return ok ? "met" : "NOT met"; }

// "default (stated, not measured)" or "example-cpu (example-cpu.json), measured 2026-12-05 ...".
std::string ProfileText(const ProfileLabel& p) {
  if (p.file.empty()) return p.name + " (stated, not measured)";
  return p.name + " (" + p.file + "), measured " + p.measured_on;
}

nlohmann::json ProfileJson(const ProfileLabel& p) {
  if (p.file.empty()) return {{"name", p.name}, {"measured", false}};
  return {{"name", p.name},
          {"file", p.file},
          {"measured", true},
          {"measuredOn", p.measured_on},
          {"command", p.command}};
}

// "yes, from attainment ...", "no, ..." and the schedule, for a goal reach.
void WriteReachVerdict(std::ostream& out, const GoalReach& g,
                       const std::function<std::string(int64_t)>& share) {
  if (g.best < 0) {
    out << "no: no schedule of the fixed counts reaches the floor\n";
    return;
  }
  const GoalLevel& b = g.levels[static_cast<size_t>(g.best)];
  if (g.first_reachable >= 0 && g.first_reachable != g.best) {
    const GoalLevel& first = g.levels[static_cast<size_t>(g.first_reachable)];
    out << "yes, from attainment " << share(first.oracle.met) << ", ratio " << Fixed(first.ratio, 2)
        << "; the least ratio " << Fixed(b.ratio, 2) << " at " << share(b.oracle.met)
        << " (goal <= " << Fixed(kGoalChipRatio, 1) << ")";
  } else {
    out << (g.reachable      ? "yes"
            : g.out_of_reach ? "no"
                             : "open")
        << ", at attainment " << share(b.oracle.met) << ", ratio " << Fixed(b.ratio, 2)
        << " (goal <= " << Fixed(kGoalChipRatio, 1) << ")";
  }
  if (g.out_of_reach)
    out << "; no schedule at any level is under " << Fixed(kGoalChipRatio, 1) << "x";
  else if (!g.reachable)
    out << "; the relaxation's bound leaves it open";
  out << "\n    schedule:";
  for (int n : b.oracle.replicas) out << " " << n;
  out << "\n";
}

// The oracle at every attainment where the goal's comparator changes (serving_frontier.h).
void WriteGoalReachText(std::ostream& out, const GoalReach& g, const ServingFrontier& f,
                        int64_t requests) {
  if (!g.computed) return;
  const auto share = [&](int64_t met) {
    return Percent(static_cast<double>(met) / static_cast<double>(std::max<int64_t>(1, requests)));
  };
  const auto name_of = [&](int i) -> const ServingRunResult& {
    // GoalReachInput.fixed is f.fixed in order.
    return *f.fixed[static_cast<size_t>(i)];
  };
  out << "  the goal's oracle, at each attainment where its comparator changes (from "
      << share(g.floor_met) << ", " << Fixed(100 * kGoalAttainmentRatio, 0)
      << "% of the best fixed count's " << share(g.best_fixed_met) << "):\n";
  for (const GoalLevel& l : g.levels) {
    out << "    "
        << (l.floor ? ">= " + share(l.target_met) + " (the floor)"
                    : "> " + l.above + "'s " + share(l.target_met - 1));
    if (l.comparator < 0 || !l.oracle.reached) {
      out << ": no schedule of the fixed counts attains it\n";
      continue;
    }
    const ServingRunResult& cmp = name_of(l.comparator);
    out << ": vs " << cmp.config.name << " " << Fixed(cmp.chip_hours, 1) << " chip-h, oracle "
        << Fixed(l.oracle.chip_hours, 1) << " at " << share(l.oracle.met) << ", "
        << Fixed(l.ratio, 2) << "x (none under " << Fixed(l.lower_bound_ratio, 2) << "x), "
        << Fixed(l.undone_per_hour, 1) << " undone/h\n";
  }
  if (g.has_above_all) {
    out << "    > every fixed count (" << share(g.best_fixed_met) << "): ";
    if (g.above_all.reached)
      out << "oracle " << Fixed(g.above_all.chip_hours, 1) << " chip-h at "
          << share(g.above_all.met) << "; no comparator, so the goal's ratio does not apply\n";
    else
      out << "no schedule of the fixed counts attains it\n";
  }
  out << "  goal reachable by an oracle (" << f.oracle_counts << ", windows independent): ";
  WriteReachVerdict(out, g, share);
}

// From the autoscaler's own start (AutoVerdict::from_start): what it costs, then the verdict.
void WriteFromStartText(std::ostream& out, const AutoVerdict& v, const ServingFrontier& f,
                        const ServingComparison& c) {
  if (!v.from_start) return;
  const ServingRunResult& r = *v.run;
  const auto share = [&](int64_t met) {
    return Percent(static_cast<double>(met) /
                   static_cast<double>(std::max<int64_t>(1, r.requests)));
  };
  out << "  from auto's start (" << v.initial_replicas
      << (v.initial_replicas == 1 ? " replica" : " replicas") << " ready at time 0; a group "
      << "placed then is ready " << Fixed(static_cast<double>(c.options.model.startup_ms) / 1000, 0)
      << " s later): ";
  if (r.early_cut_us > 0) {
    out << "of the " << v.early_requests << " requests arriving in the first "
        << Fixed(static_cast<double>(r.early_cut_us) / 1e6, 0) << " s, ";
    if (v.initial_replicas == 0)
      out << "none can have a first token within " << c.options.slo.ttft_ms << " ms; ";
    else
      out << "fixed=" << v.initial_replicas << " (the same run until then) gave " << v.early_in_time
          << " a first token within " << c.options.slo.ttft_ms
          << " ms, and no schedule from that start gives more; ";
  }
  out << "at most " << share(v.most_met_from_start) << " meet the SLO\n";
  out << "  goal reachable by an oracle from that start (" << f.oracle_counts
      << ", windows independent): ";
  WriteReachVerdict(out, v.goal_reach_from_start, share);
}

void WriteFrontierText(std::ostream& out, const ServingComparison& c) {
  const ServingFrontier f = ComputeFrontier(c);
  if (f.fixed.empty() || f.autos.empty()) return;
  out << "\nFrontier: chip-h against SLO attainment (* a fixed count no other fixed count beats "
         "on both; <- where an autoscaler lands)\n";
  std::vector<std::pair<double, std::string>> lines;
  for (size_t i = 0; i < f.fixed.size(); ++i) {
    const ServingRunResult& r = *f.fixed[i];
    lines.push_back({r.chip_hours, "  " + std::string(f.on_frontier[i] ? "* " : "  ") +
                                       r.config.name + "  " + Fixed(r.chip_hours, 1) + " chip-h  " +
                                       Percent(r.slo_attainment)});
  }
  for (const AutoVerdict& v : f.autos)
    lines.push_back({v.run->chip_hours, "  <- " + v.run->config.name + "  " +
                                            Fixed(v.run->chip_hours, 1) + " chip-h  " +
                                            Percent(v.run->slo_attainment) +
                                            (v.dominated ? "  (a fixed count does as well)" : "")});
  std::stable_sort(lines.begin(), lines.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [chips, line] : lines) out << line << "\n";
  for (const AutoVerdict& v : f.autos) {
    const ServingRunResult& r = *v.run;
    out << "\n"
        << r.config.name << ": " << Fixed(v.decisions_per_hour, 1) << " scale decisions/h, "
        << v.undone << " undone within 10 min (" << Fixed(v.undone_per_hour, 1)
        << "/h, goal <= " << Fixed(kGoalUndonePerHour, 0) << "): " << Met(v.undone_goal) << "\n";
    if (v.cheapest_at_least != nullptr)
      out << "  cheapest fixed count with SLO >= " << Percent(r.slo_attainment) << ": "
          << v.cheapest_at_least->config.name << " at " << Fixed(v.cheapest_at_least->chip_hours, 1)
          << " chip-h; auto needs " << Fixed(v.chip_ratio, 2)
          << "x (goal <= " << Fixed(kGoalChipRatio, 1) << "x): " << Met(v.chips_goal) << "\n";
    else
      out << "  no fixed count attains " << Percent(r.slo_attainment) << ": " << Met(v.chips_goal)
          << "\n";
    if (v.best_fixed != nullptr)
      out << "  best fixed SLO " << Percent(v.best_fixed->slo_attainment) << " ("
          << v.best_fixed->config.name << "); auto attains " << Percent(v.attainment_ratio)
          << " of it (goal >= " << Fixed(100 * kGoalAttainmentRatio, 0)
          << "%): " << Met(v.attainment_goal) << "\n";
    if (v.oracle.reached) {
      out << "  oracle (" << Fixed(static_cast<double>(c.options.oracle_window_ms) / 1000, 0)
          << " s windows, start-up "
          << Fixed(static_cast<double>(c.options.model.startup_ms) / 1000, 0) << " s, counts "
          << f.oracle_counts << "): " << Fixed(v.oracle.chip_hours, 1) << " chip-h at "
          << Percent(static_cast<double>(v.oracle.met) / std::max<int64_t>(1, r.requests)) << ", "
          << v.oracle.changes << " changes; auto is " << Fixed(v.oracle_ratio, 2)
          << "x the oracle\n    schedule:";
      for (int n : v.oracle.replicas) out << " " << n;
      out << "\n";
    } else {
      out << "  oracle: no schedule of the fixed counts " << f.oracle_counts << " attains "
          << Percent(r.slo_attainment) << "\n";
    }
    WriteGoalReachText(out, v.goal_reach, f, r.requests);
    WriteFromStartText(out, v, f, c);
  }
}

}  // namespace

void WriteServingText(std::ostream& out, const ServingComparison& c) {
  out << "tessera sim-serve: " << c.source << ", offered " << Fixed(c.offered_rps, 2) << " req/s\n";
  out << "model: " << c.model << "\n";
  out << "profile: " << ProfileText(c.profile) << "\n";
  out << "SLO: TTFT <= " << c.options.slo.ttft_ms
      << " ms and TPOT <= " << Fixed(c.options.slo.tpot_ms, 1) << " ms; seed " << c.options.seed
      << "\n\n";
  const std::vector<Column> cols = Columns();
  std::vector<size_t> width;
  for (const Column& col : cols) {
    size_t w = col.header.size();
    for (const ServingRunResult& r : c.runs) w = std::max(w, col.value(r).size());
    width.push_back(w);
  }
  auto row = [&](const std::function<std::string(size_t)>& cell) {
    std::string line;
    for (size_t i = 0; i < cols.size(); ++i) {
      const std::string v = cell(i);
      line += (i == 0 ? "" : "  ") + v + std::string(width[i] - v.size(), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  row([&](size_t i) { return cols[i].header; });
  for (const ServingRunResult& r : c.runs) row([&](size_t i) { return cols[i].value(r); });
  out << "\n";
  for (const ServingRunResult& r : c.runs) {
    if (!r.config.autoscaling) continue;
    out << r.config.name << ": " << r.scale_events.size() << " scale decisions, "
        << r.groups_started << " groups started";
    if (r.scale_events.empty()) {
      out << "\n";
      continue;
    }
    out << "; replicas ";
    const size_t shown = std::min<size_t>(r.scale_events.size(), 12);
    out << r.scale_events.front().from;
    for (size_t i = 0; i < shown; ++i)
      out << " -(" << Fixed(r.scale_events[i].time_s, 0) << " s)-> " << r.scale_events[i].to;
    if (shown < r.scale_events.size()) out << " ... (" << r.scale_events.size() - shown << " more)";
    out << "\n  first: " << r.scale_events.front().reason << "\n";
  }
  WriteFrontierText(out, c);
  out << "\nchip-h: chips of every slice held from placement to the confirmed stop, first arrival "
         "to last request's end;\nSLO: requests with TTFT and TPOT within the objective over all "
         "requests (503s and killed ones miss it);\nTTFT/TPOT/latency over completed requests, "
         "linear interpolation between closest ranks.\n";
}

namespace {

// A goal reach (serving_frontier.h) as JSON.
nlohmann::json GoalReachJson(const GoalReach& g, const ServingFrontier& f, int64_t requests) {
  const auto share = [&](int64_t met) {
    return static_cast<double>(met) / static_cast<double>(std::max<int64_t>(1, requests));
  };
  nlohmann::json levels = nlohmann::json::array();
  for (const GoalLevel& l : g.levels) {
    nlohmann::json level = {{"targetMet", l.target_met},
                            {"targetAttainment", share(l.target_met)},
                            {"floor", l.floor},
                            {"aboveFixed", l.above},
                            {"reached", l.oracle.reached}};
    if (l.comparator >= 0)
      level["comparator"] = f.fixed[static_cast<size_t>(l.comparator)]->config.name;
    if (l.oracle.reached && l.comparator >= 0) {
      level["chipHours"] = l.oracle.chip_hours;
      level["lowerBoundChipHours"] = l.oracle.lower_bound_chip_hours;
      level["attainment"] = share(l.oracle.met);
      level["ratio"] = l.ratio;
      level["lowerBoundRatio"] = l.lower_bound_ratio;
      level["undonePerHour"] = l.undone_per_hour;
      level["replicas"] = l.oracle.replicas;
    }
    levels.push_back(std::move(level));
  }
  nlohmann::json reach = {{"reachable", g.reachable},
                          {"outOfReach", g.out_of_reach},
                          {"floorMet", g.floor_met},
                          {"bestFixedMet", g.best_fixed_met},
                          {"levels", std::move(levels)}};
  if (g.best >= 0) {
    const GoalLevel& b = g.levels[static_cast<size_t>(g.best)];
    reach["attainment"] = share(b.oracle.met);
    reach["ratio"] = b.ratio;
    reach["lowerBoundRatio"] = b.lower_bound_ratio;
  }
  if (g.first_reachable >= 0) {
    const GoalLevel& first = g.levels[static_cast<size_t>(g.first_reachable)];
    reach["firstReachable"] = {
        {"attainment", share(first.oracle.met)},
        {"ratio", first.ratio},
        {"comparator", f.fixed[static_cast<size_t>(first.comparator)]->config.name}};
  }
  if (g.has_above_all && g.above_all.reached)
    reach["aboveEveryFixed"] = {{"chipHours", g.above_all.chip_hours},
                                {"attainment", share(g.above_all.met)}};
  return reach;
}

}  // namespace

void WriteServingJson(std::ostream& out, const ServingComparison& c) {
  const ServingSimOptions& o = c.options;
  nlohmann::json j = {{"source", c.source},
                      {"model", c.model},
                      {"offeredRps", c.offered_rps},
                      {"profile", ProfileJson(c.profile)},
                      {"options",
                       {{"accelerator", std::string(GenerationName(o.accelerator))},
                        {"topology", o.topology.ToString()},
                        {"prefillTokensPerS", o.model.prefill_tokens_per_s},
                        {"decodeTokensPerS", o.model.decode_tokens_per_s},
                        {"decodeTokensPerSPerRequest", o.model.decode_tokens_per_s_per_request},
                        {"startupMs", o.model.startup_ms},
                        {"maxOngoingRequests", o.max_ongoing_requests},
                        {"graceMs", o.grace_ms},
                        {"probePeriodMs", o.probe_period_ms},
                        {"clusterSlices", o.cluster_slices},
                        {"timeScale", o.time_scale},
                        {"tickMs", o.tick_ms},
                        {"reportMs", o.report_ms},
                        {"maxQueued", o.max_queued},
                        {"queueTimeoutMs", o.queue_timeout_ms},
                        {"sloTtftMs", o.slo.ttft_ms},
                        {"sloTpotMs", o.slo.tpot_ms},
                        {"seed", o.seed},
                        {"oracleWindowMs", o.oracle_window_ms}}},
                      {"runs", nlohmann::json::array()}};
  if (!o.model.decode_table.empty()) {
    // The table replaces the two stated decode figures.
    nlohmann::json& options = j["options"];
    options.erase("decodeTokensPerS");
    options.erase("decodeTokensPerSPerRequest");
    options["decodeTable"] = nlohmann::json::array();
    for (const DecodeRow& row : o.model.decode_table)
      options["decodeTable"].push_back({{"concurrency", row.concurrency},
                                        {"perRequestTokensPerSecond", row.per_request_tokens_per_s},
                                        {"perGroupTokensPerSecond", row.per_group_tokens_per_s}});
  }
  for (const ServingRunResult& r : c.runs) {
    nlohmann::json run = {{"config", r.config.name},
                          {"chipsPerReplica", r.chips_per_replica},
                          {"requests", r.requests},
                          {"completed", r.completed},
                          {"rejected", r.rejected},
                          {"timedOut", r.timed_out},
                          {"killed", r.failed},
                          {"sloMet", r.slo_met},
                          {"sloAttainment", r.slo_attainment},
                          {"ttft", Summary(r.ttft)},
                          {"tpot", Summary(r.tpot)},
                          {"latency", Summary(r.latency)},
                          {"durationS", static_cast<double>(r.duration_us) / 1e6},
                          {"chipHours", r.chip_hours},
                          {"replicaHours", r.replica_hours},
                          {"maxGroups", r.max_placed},
                          {"groupsStarted", r.groups_started},
                          {"eventHash", r.event_hash},
                          {"series", nlohmann::json::array()},
                          {"scaleEvents", nlohmann::json::array()}};
    if (r.config.autoscaling) {
      const AutoscalerConfig& a = *r.config.autoscaling;
      run["autoscaling"] = {{"minReplicas", a.min_replicas},
                            {"maxReplicas", a.max_replicas},
                            {"initialReplicas", AutoscaleInitialReplicas(a)},
                            {"targetOngoingRequests", a.target_ongoing_requests},
                            {"upscaleDelayMs", a.upscale_delay_ms},
                            {"downscaleDelayMs", a.downscale_delay_ms},
                            {"lookbackMs", a.lookback_ms},
                            {"targetTTFTMs", a.target_ttft_ms},
                            {"targetTPOTMs", a.target_tpot_ms}};
    } else {
      run["replicas"] = r.config.replicas;
    }
    for (const ReplicaPoint& p : r.series)
      run["series"].push_back({{"timeS", p.time_s},
                               {"desired", p.desired},
                               {"placed", p.placed},
                               {"ready", p.ready},
                               {"ongoing", p.ongoing},
                               {"queued", p.queued}});
    for (const ScaleEvent& e : r.scale_events)
      run["scaleEvents"].push_back(
          {{"timeS", e.time_s}, {"from", e.from}, {"to", e.to}, {"reason", e.reason}});
    j["runs"].push_back(std::move(run));
  }
  const ServingFrontier f = ComputeFrontier(c);
  j["verdicts"] = nlohmann::json::array();
  for (const AutoVerdict& v : f.autos) {
    nlohmann::json verdict = {
        {"config", v.run->config.name},
        {"scaleDecisionsPerHour", v.decisions_per_hour},
        {"undoneWithin10Min", v.undone},
        {"undonePerHour", v.undone_per_hour},
        {"chipRatio", v.chip_ratio},
        {"attainmentRatio", v.attainment_ratio},
        {"dominated", v.dominated},
        {"goal",
         {{"chips", v.chips_goal}, {"attainment", v.attainment_goal}, {"undone", v.undone_goal}}}};
    if (v.cheapest_at_least != nullptr)
      verdict["cheapestFixedAtLeast"] = v.cheapest_at_least->config.name;
    if (v.best_fixed != nullptr) verdict["bestFixed"] = v.best_fixed->config.name;
    if (v.oracle.reached)
      verdict["oracle"] = {{"chipHours", v.oracle.chip_hours},
                           {"met", v.oracle.met},
                           {"replicas", v.oracle.replicas},
                           {"ratio", v.oracle_ratio}};
    if (v.goal_reach.computed)
      verdict["goalOracle"] = GoalReachJson(v.goal_reach, f, v.run->requests);
    if (v.from_start && v.goal_reach_from_start.computed) {
      nlohmann::json from_start = GoalReachJson(v.goal_reach_from_start, f, v.run->requests);
      from_start["initialReplicas"] = v.initial_replicas;
      from_start["earlyCutS"] = static_cast<double>(v.run->early_cut_us) / 1e6;
      from_start["earlyRequests"] = v.early_requests;
      from_start["earlyInTime"] = v.early_in_time;
      from_start["mostMet"] = v.most_met_from_start;
      verdict["goalOracleFromStart"] = std::move(from_start);
    }
    j["verdicts"].push_back(std::move(verdict));
  }
  out << j.dump(2) << "\n";
}

void WriteServingCsv(std::ostream& out, const ServingComparison& c) {
  out << "config,time_s,desired,placed,ready,ongoing,queued\n";
  for (const ServingRunResult& r : c.runs)
    for (const ReplicaPoint& p : r.series)
      out << r.config.name << "," << Fixed(p.time_s, 3) << "," << p.desired << "," << p.placed
          << "," << p.ready << "," << p.ongoing << "," << p.queued << "\n";
}

}  // namespace tessera::sim
