// The GPU domain comparison's writers (gpu_sim.h): text and JSON.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "sim/gpu_sim.h"

namespace tessera::sim {

namespace {

// p95 of a over p95 of b; 0/0 = 0, x/0 = infinity.
double P95Ratio(double a, double b) { return b > 0 ? a / b : (a > 0 ? INFINITY : 0); }

}  // namespace

void WriteGpuText(std::ostream& out, const GpuComparison& c) {
  out << "cluster:  " << c.cluster << "\nworkload: " << c.workload << "\noptions:  " << c.command
      << "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-12s %-13s %-14s %6s %9s %9s %9s\n", "policy", "class",
                "sizes", "jobs", "p50 h", "p95 h", "mean h");
  out << line;
  for (const GpuSimResult& r : c.runs) {
    std::vector<GpuClassStats> rows = r.classes;
    rows.push_back(r.overall);
    for (const GpuClassStats& s : rows) {
      std::snprintf(line, sizeof line, "%-12s %-13s %-14s %6lld %9.2f %9.2f %9.2f\n",
                    r.policy.c_str(), s.name.c_str(), s.sizes.c_str(),
                    static_cast<long long>(s.jobs), s.p50_wait_h, s.p95_wait_h, s.mean_wait_h);
      out << line;
    }
  }
  out << "\n";
  std::snprintf(line, sizeof line, "%-12s %8s %8s %8s %10s %8s %12s %9s %9s %8s %12s\n", "policy",
                "spanned", "never", "holds", "backfilled", "moves", "moved GPU-h", "preempted",
                "reclaims", "util %", "makespan d");
  out << line;
  for (const GpuSimResult& r : c.runs) {
    std::snprintf(
        line, sizeof line, "%-12s %8lld %8lld %8lld %10lld %8lld %12.1f %9lld %9lld %8.1f %12.1f\n",
        r.policy.c_str(), static_cast<long long>(r.spanned), static_cast<long long>(r.never_placed),
        static_cast<long long>(r.holds), static_cast<long long>(r.backfilled),
        static_cast<long long>(r.migrations), r.migrated_gpu_h + r.preempted_gpu_h,
        static_cast<long long>(r.preemptions), static_cast<long long>(r.reclaims),
        100 * r.utilisation, static_cast<double>(r.makespan_s) / 86400);
    out << line;
  }
  // What the domain class's tail waited for.
  bool any_tail = false;
  for (const GpuSimResult& r : c.runs) {
    for (const GpuWaitCause& w : r.domain_tail_waits) any_tail = any_tail || w.mean_h > 0;
  }
  if (any_tail) {
    out << "\ndomain-class jobs waiting at or above the class p95, mean h per job by state "
           "(of it: the fleet had the GPUs free, not on whole hosts of one domain)\n";
    for (const GpuSimResult& r : c.runs) {
      std::string row = r.policy;
      row.resize(12, ' ');
      for (const GpuWaitCause& w : r.domain_tail_waits) {
        std::snprintf(line, sizeof line, " %s %.1f (%.1f);", w.state.c_str(), w.mean_h,
                      w.fragmented_h);
        row += line;
      }
      out << row << "\n";
    }
  }
  // The goal, against slurm-block when both ran.
  const GpuSimResult *t = nullptr, *s = nullptr;
  for (const GpuSimResult& r : c.runs) {
    if (r.policy == "tessera") t = &r;
    if (r.policy == "slurm-block") s = &r;
  }
  const bool goal = t != nullptr && s != nullptr && t->classes[1].jobs > 0;
  if (goal) {
    const double dom = P95Ratio(t->classes[1].p95_wait_h, s->classes[1].p95_wait_h);
    const double all = s->overall.p95_wait_h > 0 ? t->overall.p95_wait_h / s->overall.p95_wait_h
                                                 : (t->overall.p95_wait_h > 0 ? INFINITY : 1);
    std::snprintf(line, sizeof line,
                  "\ngoal: domain-class p95 wait tessera/slurm-block = %.2fx (goal <= 0.5x, %s); "
                  "overall p95 %.2fx (goal <= 1x, %s)\n",
                  dom, dom <= 0.5 ? "met" : "missed", all, all <= 1.0 ? "met" : "missed");
    out << line;
  }
  if (c.domain_alone && c.domain_alone->classes[1].jobs > 0) {
    const double alone = c.domain_alone->classes[1].p95_wait_h;
    std::snprintf(line, sizeof line,
                  "floor: the domain class alone on the fleet (its %lld jobs, each in one domain, "
                  "in submission order, nothing preempted) waits %.2f h at p95",
                  static_cast<long long>(c.domain_alone->classes[1].jobs), alone);
    out << (goal ? "" : "\n") << line;
    if (s != nullptr && s->classes[1].jobs > 0) {
      const double ratio = P95Ratio(alone, s->classes[1].p95_wait_h);
      std::snprintf(line, sizeof line, ", %.2fx slurm-block's%s", ratio,
                    ratio > 0.5 ? ": over 0.5x, so only a scheduler that starts these jobs out "
                                  "of order or preempts them can meet the domain half"
                                : "");
      out << line;
    }
    out << "\n";
  }
}

void WriteGpuJson(std::ostream& out, const GpuComparison& c) {
  nlohmann::json j;
  j["cluster"] = c.cluster;
  j["workload"] = c.workload;
  j["options"] = c.command;
  auto stats = [](const GpuClassStats& s) {
    return nlohmann::json{{"class", s.name},
                          {"sizes", s.sizes},
                          {"jobs", s.jobs},
                          {"p50_wait_h", s.p50_wait_h},
                          {"p95_wait_h", s.p95_wait_h},
                          {"mean_wait_h", s.mean_wait_h}};
  };
  for (const GpuSimResult& r : c.runs) {
    nlohmann::json run{{"policy", r.policy},
                       {"jobs", r.jobs},
                       {"never_placed", r.never_placed},
                       {"spanned", r.spanned},
                       {"holds", r.holds},
                       {"backfilled", r.backfilled},
                       {"late_holds", r.late_holds},
                       {"migrations", r.migrations},
                       {"preemptions", r.preemptions},
                       {"reclaims", r.reclaims},
                       {"preempted_gpu_h", r.preempted_gpu_h},
                       {"migrated_gpu_h", r.migrated_gpu_h},
                       {"utilisation", r.utilisation},
                       {"makespan_s", r.makespan_s},
                       {"hash", std::to_string(r.hash)},
                       {"overall", stats(r.overall)}};
    for (const GpuClassStats& s : r.classes) run["classes"].push_back(stats(s));
    for (const GpuWaitCause& w : r.domain_tail_waits) {
      run["domain_tail_waits"].push_back(
          {{"state", w.state}, {"mean_h", w.mean_h}, {"fragmented_h", w.fragmented_h}});
    }
    j["runs"].push_back(run);
  }
  if (c.domain_alone && c.domain_alone->classes[1].jobs > 0) {
    j["domain_class_alone"] = stats(c.domain_alone->classes[1]);
  }
  out << j.dump(2) << "\n";
}

}  // namespace tessera::sim
